"""Run torch-mlir's e2e test suite with fusec as the linalg-on-tensors backend.

    python -m fusec.tools.torch_mlir_e2e /path/to/torch-mlir [--backend fusec|ref]
        [--workers 2] [--budget-seconds 1800] [--filter REGEX] [--no-fusion] [--json out.json]

The suite (about 1,800 `@register_test_case` modules) lives in the torch-mlir repository under
`projects/pt1/python/torch_mlir_e2e_test`, not in the torch-mlir wheel; this tool takes the path
of a checkout, puts that folder on `sys.path` and runs the suite's FX-importer configuration
(`FxImporterTestConfig`, linalg-on-tensors output) with one of two backends:

- `fusec`: the imported module is printed in generic form (torch-mlir carries its own MLIR),
  its `dense_resource` blobs are inlined, and it goes through fusec's pipeline to a `.so`
  loaded by `fusec.runtime`;
- `ref`: torch-mlir's own reference backend (`RefBackendLinalgOnTensorsBackend`), the judge's
  baseline: the figure that matters is fusec passes / reference passes on the same tests.

Tests run in worker processes (spawned, one test at a time each), so a test that crashes the
process (a segfault in compiled code, an abort in MLIR) is recorded as a crash and the worker is
replaced; a test that runs past its own timeout plus a grace period is killed. Tests run in a
fixed shuffled order, so a run stopped by `--budget-seconds` measures a random sample rather than
the alphabetically first tests. Tests in the suite's FX-importer crashing set are not attempted
(as torch-mlir's own runner does), and suite modules that cannot be imported here (torchvision is
absent) are reported and skipped.

Prints pass/fail/crash counts and the failures grouped by cause (the first line of the error,
with numbers and paths normalised so that one cause is one group).

`--target cuda --build-dir DIR` builds instead of running (this machine has no GPU): each test's
artifacts for sm_90 go to DIR, with the inputs the suite's FX configuration hands the backend
and the golden outputs (torch eager, here) in DIR/<test>.pt; a test the CUDA target refuses is
a compile_error with its located message, one that builds is `built`. test/gpu/e2e_cuda.py
runs DIR on the H200 and judges each result as the suite's reporting does (shape, dtype,
allclose rtol 1e-3, atol 1e-7, NaN equal).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import importlib.util
import inspect
import json
import multiprocessing
import os
import random
import re
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from multiprocessing.connection import wait
from typing import Any

import numpy as np

SUITE_SUBDIR = os.path.join("projects", "pt1", "python")
E2E_SUBDIR = os.path.join("projects", "pt1")
OUTCOMES = ("pass", "fail", "import_error", "compile_error", "runtime_error", "crash", "timeout",
            "built")
# A hung test is killed this long after its own timeout (SIGALRM cannot interrupt C code).
KILL_GRACE_SECONDS = 60


@dataclass
class Result:
    """The outcome of one test: one of OUTCOMES, the first line of its error, seconds taken."""

    name: str
    outcome: str
    cause: str = ""
    seconds: float = 0.0
    detail: str = ""  # the start of the error text


# --------------------------------------------------------------------------------------------
# The suite: import path and test registry


def add_suite_to_path(checkout: str) -> None:
    """Put the checkout's `torch_mlir_e2e_test` and `e2e_testing` packages on sys.path."""
    suite = os.path.join(checkout, SUITE_SUBDIR)
    if not os.path.isdir(os.path.join(suite, "torch_mlir_e2e_test")):
        raise SystemExit(f"error: {checkout}: no {SUITE_SUBDIR}/torch_mlir_e2e_test "
                         "(expected a torch-mlir checkout)")
    for path in (os.path.join(checkout, E2E_SUBDIR), suite):
        if path not in sys.path:
            sys.path.insert(0, path)
    try:
        import multiprocess  # noqa: F401  (the suite's framework imports it at module level)
    except ImportError:
        # The framework only uses it in its own runner, which this tool replaces.
        sys.modules["multiprocess"] = multiprocessing


def register_tests() -> tuple[dict[str, Any], list[str]]:
    """Import the suite's test modules one by one; return tests by name and skipped modules.

    `register_all_tests` imports every module in one go and stops at the first missing
    dependency; importing them one at a time keeps the rest of the suite usable.
    """
    import torch_mlir_e2e_test.test_suite as suite
    from torch_mlir_e2e_test.registry import GLOBAL_TEST_REGISTRY

    modules = re.findall(r"from \. import (\w+)", inspect.getsource(suite.register_all_tests))
    skipped = []
    for module in modules:
        name = f"torch_mlir_e2e_test.test_suite.{module}"
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        loaded = importlib.util.module_from_spec(spec)
        # Kept in sys.modules even when it fails half-way (conv.py imports torchvision after
        # registering most of its tests): torch.export looks classes' modules up there, and
        # re-importing the module would register its tests twice.
        sys.modules[name] = loaded
        try:
            spec.loader.exec_module(loaded)
        except Exception as error:  # noqa: BLE001  (any import failure skips the rest)
            skipped.append(f"{module} ({type(error).__name__}: {error})")
    return {test.unique_name: test for test in GLOBAL_TEST_REGISTRY}, skipped


def crashing_set() -> set[str]:
    """The tests torch-mlir's runner does not attempt with the FX importer."""
    from e2e_testing.xfail_sets import FX_IMPORTER_CRASHING_SET

    return set(FX_IMPORTER_CRASHING_SET)


# --------------------------------------------------------------------------------------------
# fusec as a LinalgOnTensorsBackend


def make_fusec_backend(workdir: str, fusion: bool, target: str = "cpu") -> Any:
    """A `LinalgOnTensorsBackend` whose artifact is a fusec `.so` built in `workdir` (for
    target cuda: kept there, and `load` records the inputs instead of running)."""
    from torch_mlir_e2e_test.linalg_on_tensors_backends.abc import LinalgOnTensorsBackend

    class FusecBackend(LinalgOnTensorsBackend):
        """compile: torch-mlir module -> path of a fusec `.so`; load: path -> invoker."""

        def __init__(self) -> None:
            super().__init__()
            self.count = 0
            self.test = ""  # target cuda: the test being built (its artifacts' names)
            self.built: list[str] = []
            self.recorded: list[list[Any]] = []

        def compile(self, module: Any) -> str:
            from fusec.compiler import driver
            from fusec.compiler.frontend import check_dialects, inline_dense_resources, to_generic
            from fusec.compiler.pipeline import CompileOptions
            from fusec.dialects import make_context

            # torch-mlir's MLIR is newer than fusec's: hand over generic text, as the
            # frontend does for `fusec.compile(nn.Module)`.
            text = inline_dense_resources(module.operation.get_asm(print_generic_op_form=True))
            context = make_context()
            check_dialects(text, context)
            text = to_generic(text, context)
            self.count += 1
            if target == "cuda":
                path = os.path.join(workdir, f"{self.test}.{len(self.built)}.so")
            else:
                path = os.path.join(workdir, f"test{os.getpid()}_{self.count}.so")
            options = CompileOptions(target=target, fusion=fusion)
            driver.compile_text(text, "<torch-mlir-suite>", options, path)
            if target == "cuda":
                self.built.append(os.path.basename(path))
            return path

        def load(self, artifact: str) -> Any:
            if target == "cuda":
                return RecordingInvoker(self.recorded)
            import fusec.runtime

            return FusecInvoker(fusec.runtime.load(artifact))

    return FusecBackend()


class FusecInvoker:
    """`getattr(invoker, name)(*numpy_arrays)` runs the model (a fusec artifact has one entry
    point, whatever the function was called)."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        module = self._module

        def invoke(*arrays: Any) -> Any:
            return module(*signless_inputs(arrays, module.signature.inputs))

        return invoke


class RecordingInvoker:
    """Target cuda, built here: `getattr(invoker, name)(*numpy_arrays)` keeps the arrays (the
    inputs the H200 run gets) and returns a placeholder, whose verdict is not used."""

    def __init__(self, recorded: list) -> None:
        self._recorded = recorded

    def __getattr__(self, name: str) -> Any:
        def invoke(*arrays: Any) -> Any:
            self._recorded.append([np.array(a, copy=True) if isinstance(a, np.ndarray) else a
                                   for a in arrays])
            return np.zeros(1, np.float32)

        return invoke


def signless_inputs(arrays: tuple, specs: tuple) -> list:
    """The suite's arrays, with each uint8 array for a signless `i8` input seen as int8.

    torch-mlir's linalg-on-tensors has signless integers: a torch.uint8 argument is an `i8`
    tensor, which the artifact lists as int8, and the model's ops read its bits unsigned
    (`arith.extui`, `arith.uitofp`). The suite's arrays come from torch tensors, so a uint8
    array here means exactly a torch.uint8 argument: the bytes are passed unchanged. Any
    other mismatch is left for the runtime to refuse.
    """
    out = []
    for a, spec in zip(arrays, specs):
        if spec.dtype == "int8" and getattr(a, "dtype", None) == np.uint8:
            a = a.view(np.int8)
        out.append(a)
    return out + list(arrays[len(out):])


def _configs_package_without_init() -> None:
    """Make `torch_mlir_e2e_test.configs` importable without its `__init__`.

    That `__init__` imports every configuration, among them the lazy-tensor one, whose C++
    extension the torch-mlir wheel does not ship; the FX-importer one needs none of them.
    """
    import types

    import torch_mlir_e2e_test

    name = "torch_mlir_e2e_test.configs"
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(os.path.dirname(torch_mlir_e2e_test.__file__),
                                         "configs")]
        sys.modules[name] = package


def make_config(backend_name: str, workdir: str, fusion: bool, target: str = "cpu") -> Any:
    """The suite's FX-importer test configuration over the chosen backend."""
    _configs_package_without_init()
    from torch_mlir_e2e_test.configs.fx_importer_backend import FxImporterTestConfig

    if backend_name == "ref":
        from torch_mlir_e2e_test.linalg_on_tensors_backends.refbackend import (
            RefBackendLinalgOnTensorsBackend,
        )

        return FxImporterTestConfig(RefBackendLinalgOnTensorsBackend())
    return FxImporterTestConfig(make_fusec_backend(workdir, fusion, target))


# --------------------------------------------------------------------------------------------
# Classifying one result


def error_first_line(text: str) -> str:
    """The exception line ("pkg.SomeError: message") of a formatted traceback.

    When exceptions chain, the last one printed (the outermost) is taken. torch._dynamo's
    messages contain "File ..." lines of user code and advice after the exception line, so the
    line is found by its form rather than by its position after the last frame.
    """
    lines = text.rstrip().splitlines()
    pattern = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Unsupported|Exit)"
                         r"(?::|$)")
    matches = [line for line in lines if pattern.match(line)]
    if matches:
        return matches[-1].strip()
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def normalise_cause(line: str) -> str:
    """Make causes that differ only in names, numbers or paths fall into one group."""
    line = re.sub(r" \[stage '([\w-]+)'; reproduce with: .*", r" [stage '\1']", line)
    line = re.sub(r"/[\w./+-]+", "<path>", line)
    line = re.sub(r"loc\([^)]*\)", "loc(...)", line)
    line = re.sub(r"%[\w#]+", "%v", line)
    line = re.sub(r"torch\.Size\(\[[^\]]*\]\)", "torch.Size([...])", line)
    line = re.sub(r"\d+", "N", line)
    return line[:200]


def _error_outcome(text: str) -> str:
    """Where a test failed, from its traceback: the FX config does everything in `run`, so
    the frames say whether torch.export/torch-mlir (import), the backend's compile, or the
    loaded artifact failed."""
    if text.startswith("Test timed out"):
        return "timeout"
    frames = re.findall(r'File "([^"]+)", line \d+, in (\w+)', text)
    functions = [function for _, function in frames]
    if "export_and_import" in functions or "export" in functions:
        return "import_error"
    if "compile" in functions or "load" in functions:
        return "compile_error"
    return "runtime_error"


def classify(test_result: Any) -> tuple[str, str, str]:
    """(outcome, cause, detail) of a framework TestResult, judged by the suite's own report
    code."""
    from torch_mlir_e2e_test.reporting import ErrorContext, SingleTestReport

    text = test_result.compilation_error or test_result.runtime_error
    if text is not None:
        return _error_outcome(text), error_first_line(text), text[-3000:]
    report = SingleTestReport(test_result, ErrorContext.empty())
    if not report.failed:
        return "pass", "", ""
    text = report.error_str()
    # The report nests context lines ("@ trace item #0 ...", "@ output of ..."); the line
    # that says what differs starts with ERROR.
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = next((line for line in lines if line.startswith("ERROR")), lines[0] if lines else "")
    return "fail", f"wrong result: {first}", text[:3000]


# --------------------------------------------------------------------------------------------
# Workers


def worker_main(checkout: str, backend_name: str, fusion: bool, workdir: str,
                connection: Any, target: str = "cpu") -> None:
    """Run the tests the parent sends (one name at a time) and send back Results (target
    cuda: build them into `workdir`, the build directory)."""
    import warnings

    warnings.simplefilter("ignore")
    add_suite_to_path(checkout)
    import torch
    from torch_mlir_e2e_test.framework import compile_and_run_test

    torch.autograd.set_grad_enabled(False)
    tests, _ = register_tests()
    config = make_config(backend_name, workdir, fusion, target)
    connection.send("ready")
    while True:
        name = connection.recv()
        if name is None:
            return
        start = time.monotonic()
        try:
            if target == "cuda":
                outcome, cause, detail = build_for_cuda(tests[name], config, workdir)
            else:
                outcome, cause, detail = classify(compile_and_run_test(tests[name], config))
        except Exception as error:  # noqa: BLE001  (the framework's own reporting failed)
            outcome, cause = "runtime_error", f"{type(error).__name__}: {error}"
            detail = traceback.format_exc()
        if target != "cuda":
            _remove_artifacts(workdir)
        connection.send(Result(name, outcome, cause, time.monotonic() - start, detail))


def build_for_cuda(test: Any, config: Any, build_dir: str) -> tuple[str, str, str]:
    """Build one test's artifacts for target cuda and keep what the H200 run needs in
    `build_dir/<test>.pt`: per trace item the artifact, the inputs the backend got, the
    golden output (torch eager here) and which outputs are the user's (the suite's FX
    configuration drops the others, buffer mutations, before comparing)."""
    import torch
    from torch_mlir_e2e_test.framework import compile_and_run_test, generate_golden_trace

    backend = config._backend
    backend.test, backend.built, backend.recorded = test.unique_name, [], []
    golden = generate_golden_trace(test)
    result = compile_and_run_test(test, config)
    text = result.compilation_error or result.runtime_error
    if text is not None:
        return _error_outcome(text), error_first_line(text), text[-3000:]
    if len(backend.built) != len(golden) or len(backend.recorded) != len(golden):
        return "runtime_error", "a trace item without its artifact or inputs", ""
    items = []
    for item, artifact, inputs in zip(golden, backend.built, backend.recorded):
        program = test.program_factory()
        specs = torch.export.export(program, tuple(item.inputs), strict=True)
        user = [s.kind.name == "USER_OUTPUT" for s in specs.graph_signature.output_specs]
        items.append({"artifact": artifact, "inputs": inputs, "golden": item.output,
                      "user_outputs": user})
    torch.save({"test": test.unique_name, "items": items},
               os.path.join(build_dir, f"{test.unique_name}.pt"))
    return "built", "", ""


def _remove_artifacts(workdir: str) -> None:
    """Delete this worker's `.so` files (already loaded, or never to be)."""
    prefix = f"test{os.getpid()}_"
    for entry in os.listdir(workdir):
        if entry.startswith(prefix):
            try:
                os.remove(os.path.join(workdir, entry))
            except OSError:
                pass


@dataclass
class Worker:
    """A worker process, its pipe, and the test it is running (with when it started)."""

    process: Any
    connection: Any
    test: str | None = None
    started: float = 0.0
    ready: bool = False


class Runner:
    """Hands tests to workers, replaces dead or hung workers, stops at the time budget."""

    def __init__(self, args: argparse.Namespace, tests: dict[str, Any], workdir: str) -> None:
        self.args = args
        self.tests = tests
        self.workdir = workdir
        self.context = multiprocessing.get_context("spawn")
        self.workers: list[Worker] = []
        self.results: list[Result] = []

    def start_worker(self) -> Worker:
        parent, child = self.context.Pipe()
        process = self.context.Process(
            target=worker_main,
            args=(self.args.checkout, self.args.backend, not self.args.no_fusion, self.workdir,
                  child, self.args.target),
            daemon=True,
        )
        process.start()
        child.close()
        worker = Worker(process, parent)
        self.workers.append(worker)
        return worker

    def stop_worker(self, worker: Worker) -> None:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join()
        worker.connection.close()
        self.workers.remove(worker)

    def run(self, names: list[str]) -> list[str]:
        """Run `names`; returns the names not run because the budget ran out."""
        pending = collections.deque(names)
        deadline = time.monotonic() + self.args.budget_seconds
        for _ in range(min(self.args.workers, len(pending))):
            self.start_worker()
        done = 0
        while self.workers:
            now = time.monotonic()
            for worker in list(self.workers):
                self._check_hung(worker, now)
            idle = [w for w in self.workers if w.ready and w.test is None]
            for worker in idle:
                if pending and now < deadline:
                    worker.test, worker.started = pending.popleft(), now
                    worker.connection.send(worker.test)
                else:
                    worker.connection.send(None)
                    self.stop_worker(worker)
            if not self.workers:
                break
            sentinels = {w.process.sentinel: w for w in self.workers}
            connections = {w.connection: w for w in self.workers}
            for ready in wait(list(sentinels) + list(connections), timeout=5):
                worker = connections.get(ready) or sentinels[ready]
                if worker not in self.workers:
                    continue
                done += self._receive(worker, pending, deadline)
            if done and done % 50 == 0 and self.args.progress:
                self._progress(done, len(names))
        return list(pending)

    def _receive(self, worker: Worker, pending: collections.deque, deadline: float) -> int:
        """Take a message from `worker`, or note its death; returns how many tests finished."""
        try:
            message = worker.connection.recv() if worker.connection.poll() else None
        except (EOFError, OSError):
            message = None
        if message == "ready":
            worker.ready = True
            return 0
        if isinstance(message, Result):
            self.results.append(message)
            worker.test = None
            return 1
        if worker.process.is_alive():
            return 0
        finished = 0
        if worker.test is not None:
            code = worker.process.exitcode
            self.results.append(Result(worker.test, "crash", f"process died (exit code {code})",
                                       time.monotonic() - worker.started))
            finished = 1
        elif not worker.ready:
            raise SystemExit("error: a worker died while starting (import of the suite failed?)")
        self.stop_worker(worker)
        if pending and time.monotonic() < deadline:
            self.start_worker()
        return finished

    def _check_hung(self, worker: Worker, now: float) -> None:
        if worker.test is None:
            return
        limit = self.tests[worker.test].timeout_seconds + KILL_GRACE_SECONDS
        if now - worker.started > limit:
            self.results.append(Result(worker.test, "timeout", f"killed after {limit} s",
                                       now - worker.started))
            worker.test = None
            self.stop_worker(worker)
            self.start_worker()

    def _progress(self, done: int, total: int) -> None:
        passed = sum(r.outcome == "pass" for r in self.results)
        print(f"  ... {done}/{total} run, {passed} passed", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Report


def summarise(results: list[Result], not_run: list[str], skipped_modules: list[str],
              not_attempted: int, args: argparse.Namespace, seconds: float) -> str:
    """The text report: counts, then failures grouped by cause, most frequent first."""
    counts = collections.Counter(r.outcome for r in results)
    lines = [
        f"torch-mlir e2e suite, FX importer, backend={args.backend}"
        + ("" if args.backend == "ref" else f" (fusion={'off' if args.no_fusion else 'on'})"),
        (f"ran {len(results)} tests in {seconds:.0f} s with {args.workers} workers; "
        f"not run (budget): {len(not_run)}; not attempted (FX crashing set): {not_attempted}"),
    ]
    if skipped_modules:
        lines.append("suite modules not importable here: " + "; ".join(skipped_modules))
    lines.append("  " + "  ".join(f"{o}={counts.get(o, 0)}" for o in OUTCOMES))
    groups: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for r in results:
        if r.outcome != "pass":
            groups[(r.outcome, normalise_cause(r.cause))].append(r.name)
    lines.append(f"failures by cause ({len(groups)} causes):")
    for (outcome, cause), names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        examples = ", ".join(sorted(names)[:3])
        lines.append(f"  {len(names):4d}  {outcome:13s} {cause}")
        lines.append(f"        e.g. {examples}")
    return "\n".join(lines)


def load_results(path: str) -> list[Result]:
    with open(path) as f:
        return [Result(**r) for r in json.load(f)["results"]]


def report_only(args: argparse.Namespace, skipped_modules: list[str], not_attempted: int,
                names: list[str]) -> int:
    """`--report`: the combined summary of earlier runs (later files win on a repeated test)."""
    by_name: dict[str, Result] = {}
    seconds = 0.0
    for path in args.report:
        with open(path) as f:
            data = json.load(f)
        args.backend, args.no_fusion = data["backend"], not data["fusion"]
        seconds += data["seconds"]
        by_name.update({r["name"]: Result(**r) for r in data["results"]})
    results = list(by_name.values())
    not_run = [n for n in names if n not in by_name]
    print(summarise(results, not_run, skipped_modules, not_attempted, args, seconds))
    if args.compare:
        print(compare(results, args.compare, args.backend))
    return 0


def compare(results: list[Result], other_json: str, backend: str) -> str:
    """Passes of this run against another run's, on the tests both ran."""
    with open(other_json) as f:
        other = json.load(f)
    theirs = {r["name"]: r["outcome"] for r in other["results"]}
    ours = {r.name: r.outcome for r in results if r.name in theirs}
    our_passes = sum(o == "pass" for o in ours.values())
    their_passes = sum(theirs[n] == "pass" for n in ours)
    both = sum(o == "pass" and theirs[n] == "pass" for n, o in ours.items())
    def percent(a: int, b: int) -> str:
        return f"{a / b:.1%}" if b else "n/a"

    # What to fix first: the causes of failures on tests the other backend passes.
    causes = collections.Counter(
        (r.outcome, normalise_cause(r.cause)) for r in results
        if r.name in theirs and theirs[r.name] == "pass" and r.outcome != "pass")
    lost = [f"    {count:4d}  {outcome:13s} {cause}"
            for (outcome, cause), count in causes.most_common()]

    return "\n".join([
        (f"on the {len(ours)} tests both runs ran: {backend} passes {our_passes}, "
        f"{other['backend']} passes {their_passes}, both pass {both}"),
        f"  {backend} passes / {other['backend']} passes = {percent(our_passes, their_passes)}",
        (f"  of the tests {other['backend']} passes, {backend} passes "
        f"{percent(both, their_passes)}"),
        f"  {backend}'s failures on tests {other['backend']} passes, by cause:",
        *lost,
    ])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m fusec.tools.torch_mlir_e2e",
        description="Run torch-mlir's e2e suite (FX importer) with fusec or the reference "
                    "backend.")
    parser.add_argument("checkout", help="path of a torch-mlir checkout")
    parser.add_argument("--backend", choices=("fusec", "ref"), default="fusec")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budget-seconds", type=float, default=1800.0,
                        help="stop starting tests after this long (default 1800)")
    parser.add_argument("--filter", default=None, help="only tests whose name matches")
    parser.add_argument("--limit", type=int, default=None, help="at most this many tests")
    parser.add_argument("--seed", type=int, default=0, help="seed of the test order")
    parser.add_argument("--names-from", default=None,
                        help="only the tests of an earlier run's --json (same sample, other "
                             "backend)")
    parser.add_argument("--compare", default=None,
                        help="an earlier run's --json: also print passes here / passes there "
                             "on the tests both ran")
    parser.add_argument("--skip-names-from", action="append", default=[],
                        help="skip the tests of an earlier run's --json (to resume a run "
                             "stopped by its budget); may be repeated")
    parser.add_argument("--report", action="append", default=[], metavar="JSON",
                        help="run nothing: print the combined report of earlier runs' --json "
                             "files (of one backend); may be repeated")
    parser.add_argument("--no-fusion", action="store_true", help="fusec with fusion off")
    parser.add_argument("--target", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: build the tests for the H200 into --build-dir (run them "
                             "there with test/gpu/e2e_cuda.py)")
    parser.add_argument("--build-dir", default=None, help="target cuda: where the tests go")
    parser.add_argument("--json", default=None, help="write per-test results here")
    parser.add_argument("--progress", action="store_true", help="progress on stderr")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.checkout = os.path.abspath(args.checkout)
    add_suite_to_path(args.checkout)
    tests, skipped_modules = register_tests()
    crashing = crashing_set()
    names = sorted(n for n in tests if n not in crashing)
    not_attempted = len(tests) - len(names)
    if args.report:
        return report_only(args, skipped_modules, not_attempted, names)
    if args.filter:
        names = [n for n in names if re.search(args.filter, n)]
    for path in args.skip_names_from:
        done = {r.name for r in load_results(path)}
        names = [n for n in names if n not in done]
    if args.names_from:
        with open(args.names_from) as f:
            wanted = {r["name"] for r in json.load(f)["results"]}
        names = [n for n in names if n in wanted]
    random.Random(args.seed).shuffle(names)
    if args.limit is not None:
        names = names[: args.limit]
    if args.target == "cuda":
        if not args.build_dir or args.backend != "fusec":
            raise SystemExit("error: --target cuda needs --build-dir DIR (backend fusec)")
        os.makedirs(args.build_dir, exist_ok=True)
        workdir = os.path.abspath(args.build_dir)
    else:
        workdir = tempfile.mkdtemp(prefix="fusec-e2e-")
    start = time.monotonic()
    runner = Runner(args, tests, workdir)
    try:
        not_run = runner.run(names)
    finally:
        for worker in list(runner.workers):
            runner.stop_worker(worker)
        if args.target != "cuda":
            shutil.rmtree(workdir, ignore_errors=True)
    seconds = time.monotonic() - start
    print(summarise(runner.results, not_run, skipped_modules, not_attempted, args, seconds))
    if args.compare:
        print(compare(runner.results, args.compare, args.backend))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "fusion": not args.no_fusion,
                       "seconds": seconds, "not_run": not_run,
                       "skipped_modules": skipped_modules,
                       "results": [asdict(r) for r in runner.results]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
