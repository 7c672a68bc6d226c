"""Run a step whose native code may crash, abort or run away, in a watched child process.

torch-mlir runs C++ in our process: an assertion aborts the user's Python, a segfault kills
it, and some graphs make it grow to tens of gigabytes over minutes without printing a line.
`run_isolated` forks, runs the step in the child and hands its text result (or its
FrontendError/exception message) back through a file; the parent watches the child's resident
memory and time and kills it past the limits. Ctrl-C in the parent kills the child too.

Limits: `FUSEC_IMPORT_MEMORY_MB` (default: half of the machine's memory) and
`FUSEC_IMPORT_TIMEOUT` (seconds, default 1800). `FUSEC_IMPORT_IN_PROCESS=1` runs the step in
this process (debugging); so does a platform without fork.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import tempfile
import time
import warnings
from collections.abc import Callable


class IsolatedFailure(Exception):
    """The step crashed, was killed for memory or time, or raised; the message says which."""


def _memory_limit_bytes() -> int:
    text = os.environ.get("FUSEC_IMPORT_MEMORY_MB")
    if text:
        return int(text) << 20
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError):
        return 16 << 30


def _resident_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _exit_waiter(pid: int) -> Callable[[float | None], None]:
    """A function that waits up to its argument in seconds, returning early when the child
    `pid` exits (a pidfd polled), or sleeps where there is no pidfd; None closes it."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return lambda seconds: time.sleep(seconds) if seconds is not None else None
    poller = select.poll()
    poller.register(fd, select.POLLIN)

    def wait(seconds: float | None) -> None:
        if seconds is None:
            os.close(fd)
        else:
            poller.poll(int(seconds * 1000))

    return wait


def fork_frozen() -> int:
    """`os.fork()`, with what the parent holds frozen out of the garbage collector across the
    fork: the child never collects it. An MLIR context the child's collector freed waited
    forever in its thread pool's destructor for the parent's worker threads, which a forked
    child lacks (a CI run hung in `pthread_cond_destroy` under `mlirContextDestroy`,
    2026-12-05). The child's pid in the parent, 0 in the child."""
    gc.freeze()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded, use of fork()"
        pid = os.fork()
    if pid != 0:
        gc.unfreeze()
    return pid


def run_isolated(step: Callable[[], str], what: str, timeout: float | None = None,
                 memory_bytes: int | None = None) -> str:
    """`step()` (which returns text) in a child process; its result, or an IsolatedFailure
    (or the child's FrontendError, re-raised here) naming `what` and what went wrong."""
    from fusec.compiler.frontend import FrontendError

    if not hasattr(os, "fork") or os.environ.get("FUSEC_IMPORT_IN_PROCESS") == "1":
        return step()
    timeout = float(os.environ.get("FUSEC_IMPORT_TIMEOUT", "1800")) if timeout is None else timeout
    memory_bytes = _memory_limit_bytes() if memory_bytes is None else memory_bytes
    fd, result_path = tempfile.mkstemp(prefix="fusec-import-", suffix=".txt")
    os.close(fd)
    error_path = result_path + ".error"
    pid = fork_frozen()
    if pid == 0:  # the child: run, write, leave without running the parent's exit handlers
        status = 0
        try:
            text = step()
            with open(result_path, "w") as f:
                f.write(text)
        except BaseException as error:  # noqa: BLE001 - everything goes back to the parent
            kind = "FrontendError" if isinstance(error, FrontendError) else type(error).__name__
            with open(error_path, "w") as f:
                f.write(f"{kind}\n{error}")
            status = 1
        os._exit(status)
    start = time.monotonic()
    peak = 0
    exited = _exit_waiter(pid)
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            peak = max(peak, _resident_bytes(pid))
            elapsed = time.monotonic() - start
            if peak > memory_bytes or elapsed > timeout:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                if peak > memory_bytes:
                    raise IsolatedFailure(
                        f"{what} used more than {memory_bytes >> 20} MB of memory and was "
                        f"stopped after {elapsed:.0f} s (FUSEC_IMPORT_MEMORY_MB sets the limit)")
                raise IsolatedFailure(f"{what} took more than {timeout:.0f} s and was stopped "
                                      "(FUSEC_IMPORT_TIMEOUT sets the limit)")
            # Woken at once by the child's exit where Linux gives a pidfd (a fixed sleep
            # waited half a period, 50 ms, on average past every import); the period is
            # how often the child's memory is read.
            exited(0.02 if elapsed < 1 else 0.1)
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            raise IsolatedFailure(f"{what} crashed ({signal.Signals(number).name}) inside "
                                  "torch-mlir's native code")
        if os.path.exists(error_path):
            with open(error_path) as f:
                kind, _, message = f.read().partition("\n")
            if kind == "FrontendError":
                raise FrontendError(message)
            raise IsolatedFailure(f"{what} failed: {kind}: {message}")
        if os.WEXITSTATUS(status) != 0:
            raise IsolatedFailure(f"{what} exited with status {os.WEXITSTATUS(status)}")
        with open(result_path) as f:
            return f.read()
    except KeyboardInterrupt:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        raise
    finally:
        exited(None)
        for path in (result_path, error_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
