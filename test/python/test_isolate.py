"""compiler/isolate.py: a native crash, a runaway or an exception in the isolated step
becomes a named error in the parent, which lives on."""

from __future__ import annotations

import ctypes
import os
import time

import pytest
from fusec.compiler.frontend import FrontendError
from fusec.compiler.isolate import IsolatedFailure, run_isolated


def test_result_comes_back():
    assert run_isolated(lambda: "x" * 100_000, "the step") == "x" * 100_000


def test_segfault_is_an_error_not_a_dead_process():
    def crash() -> str:
        ctypes.string_at(0)  # reads address 0: SIGSEGV
        return ""

    with pytest.raises(IsolatedFailure, match=r"the step crashed \(SIGSEGV\)"):
        run_isolated(crash, "the step")


def test_abort_is_an_error():
    with pytest.raises(IsolatedFailure, match=r"crashed \(SIGABRT\)"):
        run_isolated(lambda: os.abort() or "", "the step")


def test_runaway_memory_is_stopped():
    def grow() -> str:
        blocks = []
        while True:
            blocks.append(bytearray(16 << 20))

    start = time.monotonic()
    with pytest.raises(IsolatedFailure, match=r"used more than 200 MB of memory"):
        run_isolated(grow, "the step", memory_bytes=200 << 20)
    assert time.monotonic() - start < 20


def test_runaway_time_is_stopped():
    with pytest.raises(IsolatedFailure, match=r"took more than 1 s"):
        run_isolated(lambda: time.sleep(60) or "", "the step", timeout=1)


def test_frontend_error_is_re_raised_as_itself():
    def refuse() -> str:
        raise FrontendError("model.py:3: cannot lower `aten.foo`")

    with pytest.raises(FrontendError, match=r"^model.py:3: cannot lower `aten.foo`$"):
        run_isolated(refuse, "the step")


def test_other_exceptions_are_named():
    with pytest.raises(IsolatedFailure, match=r"the step failed: KeyError: 'k'"):
        run_isolated(lambda: {}["k"], "the step")
