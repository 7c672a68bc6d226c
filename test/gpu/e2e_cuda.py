"""torch-mlir's e2e suite on the CUDA target: run on the H200 what
`python -m fusec.tools.torch_mlir_e2e CHECKOUT --target cuda --build-dir DIR` built here.

    python3 test/gpu/e2e_cuda.py split DIR [--mb 60]       here: DIR/batchN/, each small
                                                           enough to carry in one call
    python3 test/gpu/e2e_cuda.py run DIR [--json OUT]      the H200: every DIR/<test>.pt

Each test's artifacts run on the inputs the suite's FX configuration gave the backend, and
the outputs are judged against the golden ones (torch eager, computed at the build) as the
suite's reporting judges them: the user outputs only, one-element tuples unwrapped, tensors
by shape, dtype and allclose(rtol 1e-3, atol 1e-7, NaN equal), floats to 1e-4 relative,
ints and bools exactly. The tests run in a child process, one after another; a child that
dies (a crash, an illegal address that poisons the CUDA context) marks the test it was
running `crash` and a new child goes on with the next. One JSON line per test on stdout,
then the counts; with --json, the results (the build's outcomes merged in when
DIR/results.json, the build's --json, is there).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import traceback
from pathlib import Path

RTOL, ATOL, FLOAT_RTOL = 1e-3, 1e-7, 1e-4


def _refine(value):
    """The backend's result as the suite's FX configuration sees it: arrays as tensors."""
    import numpy as np
    import torch

    if isinstance(value, (tuple, list)):
        return tuple(_refine(v) for v in value)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    return value


def mismatch(value, golden, where: str = "output") -> str | None:
    """Why `value` is not the golden value (None: it is), by the suite's rules."""
    import torch

    if isinstance(value, tuple) and len(value) == 1:
        value = value[0]
    if isinstance(golden, tuple) and len(golden) == 1:
        golden = golden[0]
    if isinstance(golden, bool) or isinstance(golden, int):
        return None if type(value) is type(golden) and value == golden else \
            f"{where}: {value!r} is not {golden!r}"
    if isinstance(golden, float):
        if not isinstance(value, float):
            return f"{where}: a {type(value).__name__}, not a float"
        ok = value == golden or (golden != 0 and abs(value - golden) / abs(golden) <= FLOAT_RTOL)
        return None if ok or (math.isnan(value) and math.isnan(golden)) else \
            f"{where}: {value!r} is not close to {golden!r}"
    if isinstance(golden, (tuple, list)):
        if not isinstance(value, (tuple, list)) or len(value) != len(golden):
            return f"{where}: {type(value).__name__} of {len(value) if hasattr(value, '__len__') else '?'}, golden {len(golden)}"
        for i, (v, g) in enumerate(zip(value, golden)):
            why = mismatch(v, g, f"{where}[{i}]")
            if why:
                return why
        return None
    if isinstance(golden, torch.Tensor):
        if not isinstance(value, torch.Tensor):
            return f"{where}: a {type(value).__name__}, not a tensor"
        if value.shape != golden.shape:
            return f"{where}: shape {tuple(value.shape)}, golden {tuple(golden.shape)}"
        if value.dtype != golden.dtype:
            return f"{where}: dtype {value.dtype}, golden {golden.dtype}"
        if not torch.allclose(value, golden, rtol=RTOL, atol=ATOL, equal_nan=True):
            diff = (value.double() - golden.double()).abs()
            diff = diff[~diff.isnan()]
            worst = float(diff.max()) if diff.numel() else float("nan")
            return f"{where}: not close (max |diff| {worst:.3g})"
        return None
    return f"{where}: a golden value of type {type(golden).__name__}"


def run_test(folder: Path, name: str) -> dict:
    import torch

    import fusec.runtime
    from fusec.tools.torch_mlir_e2e import signless_inputs

    start = time.monotonic()
    record = torch.load(folder / f"{name}.pt", weights_only=False)
    for i, item in enumerate(record["items"]):
        module = fusec.runtime.load(folder / item["artifact"])
        inputs = signless_inputs(tuple(item["inputs"]), module.signature.inputs)
        out = _refine(module(*inputs))
        if isinstance(out, tuple):
            out = tuple(v for v, user in zip(out, item["user_outputs"]) if user)
        why = mismatch(out, item["golden"], f"item {i}")
        if why:
            return {"name": name, "outcome": "fail", "cause": f"wrong result: {why}",
                    "seconds": time.monotonic() - start}
    return {"name": name, "outcome": "pass", "seconds": time.monotonic() - start}


def child(folder: Path, names: list[str]) -> None:
    """Run `names` in order: "START name" before each, its JSON after."""
    for name in names:
        print(f"START {name}", flush=True)
        try:
            row = run_test(folder, name)
        except Exception as error:  # noqa: BLE001 - the error is the result
            row = {"name": name, "outcome": "runtime_error",
                   "cause": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}",
                   "detail": traceback.format_exc()[-2000:]}
        print(json.dumps(row), flush=True)


def run(folder: Path, out: Path | None) -> int:
    names = sorted(p.name[:-3] for p in folder.glob("*.pt"))
    results: list[dict] = []
    pending = list(names)
    while pending:
        process = subprocess.Popen([sys.executable, __file__, "child", str(folder), *pending],
                                   stdout=subprocess.PIPE, text=True)
        current = None
        for line in process.stdout:
            if line.startswith("START "):
                current = line[6:].strip()
                continue
            if line.startswith("{"):
                row = json.loads(line)
                results.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "detail"}), flush=True)
                pending.remove(row["name"])
                current = None
        code = process.wait()
        if current is not None:  # died in the middle of a test
            row = {"name": current, "outcome": "crash", "cause": f"process died (exit {code})"}
            results.append(row)
            print(json.dumps(row), flush=True)
            pending.remove(current)
        elif code != 0 and pending:
            raise SystemExit(f"error: the child exited {code} between tests")
    counts: dict[str, int] = {}
    for row in results:
        counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
    summary = {"tests": len(results), **counts}
    if out is not None:
        build = folder / "results.json"
        built = json.loads(build.read_text())["results"] if build.exists() else []
        refused = [r for r in built if r["outcome"] != "built"]
        out.write_text(json.dumps({"summary": summary, "results": results,
                                   "not_built": refused}, indent=1))
    print(json.dumps(summary), flush=True)
    return 0


def split(folder: Path, megabytes: float) -> None:
    """Move each test's files (its .pt and artifacts) into DIR/batch0, batch1, ... of at most
    `megabytes` each; a test bigger than that (its inputs) into DIR/too_large, not run."""
    import shutil

    batch, size, limit = 0, 0, megabytes * 2**20
    for pt in sorted(folder.glob("*.pt")):
        files = [pt] + sorted(folder.glob(f"{pt.name[:-3]}.*.so"))  # test names have no dots
        total = sum(f.stat().st_size for f in files)
        if total > limit:
            (folder / "too_large").mkdir(exist_ok=True)
            for f in files:
                shutil.move(str(f), folder / "too_large" / f.name)
            print(f"{pt.name[:-3]}: {total / 2**20:.0f} MB, over a batch: not carried")
            continue
        if size and size + total > limit:
            batch, size = batch + 1, 0
        target = folder / f"batch{batch}"
        target.mkdir(exist_ok=True)
        for f in files:
            shutil.move(str(f), target / f.name)
        size += total
    print(f"{batch + 1} batches")


if __name__ == "__main__":
    mode, where = sys.argv[1], Path(sys.argv[2])
    if mode == "split":
        split(where, float(sys.argv[sys.argv.index("--mb") + 1]) if "--mb" in sys.argv else 60)
        sys.exit(0)
    if mode == "child":
        child(where, sys.argv[3:])
        sys.exit(0)
    target = Path(sys.argv[sys.argv.index("--json") + 1]) if "--json" in sys.argv else None
    sys.exit(run(where, target))
