"""Per-kernel times of an artifact on its device, for `fusec --tune` (compiler/tuner.py).

Needs numpy and the runtime only (no MLIR), so that candidates built on one machine can be
timed where the GPU is. `time_isolated` times an artifact in a child process with a time
limit (`python -m fusec.runtime.timing`): a candidate tile whose kernel never finishes (a
pipeline that deadlocks) costs the limit, not the tuner. Inputs are seeded random values (floats in [-1, 1); integers 0 and 1,
in range for any index); on CUDA they are copied to the device once and every run reads
them there, so the times are the kernels' alone (`Module.profiling`, CUDA events).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class KernelTimes:
    """One artifact's measured kernels: per tuning key, the mean time of one launch of that
    kernel (microseconds) and its tile; the outputs of the last run (numpy), to compare
    candidates with each other."""

    us: dict[str, float]
    tiles: dict[str, list[int]]
    outputs: list[np.ndarray]
    total_us: float


def random_inputs(module: Any, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in module.signature.inputs:
        dtype = spec.numpy_dtype
        if spec.dtype not in ("float16", "bfloat16", "float32", "float64"):
            arrays.append(rng.integers(0, 2, size=spec.shape).astype(dtype))
        else:
            values = rng.uniform(-1.0, 1.0, size=spec.shape).astype(np.float32)
            if spec.dtype == "bfloat16" and dtype == np.uint16:  # no ml_dtypes: the bits
                arrays.append((values.view(np.uint32) >> 16).astype(np.uint16))
            else:
                arrays.append(values.astype(dtype))
    return arrays


def kernel_times(module: Any, inputs: list[np.ndarray], warmup: int = 3,
                 runs: int = 20) -> KernelTimes:
    """Run `module` `warmup` + `runs` times on `inputs`; the launches that carry a tuning key
    (`info.tune_key`) timed per key."""
    if module.target == "cuda":
        outputs = _cuda_runs(module, inputs, warmup, runs)
    else:
        for _ in range(warmup):
            module(*inputs)
        module.profile(reset=True)
        for _ in range(runs):
            result = module(*inputs)
        outputs = list(result) if isinstance(result, tuple) else [result]
    launches = module.profile(reset=True)
    us: dict[str, list[float]] = {}
    tiles: dict[str, list[int]] = {}
    for launch in launches:
        info = launch.get("info") or {}
        key = info.get("tune_key")
        if key:
            us.setdefault(key, []).append(launch["ms"] * 1e3)
            tiles[key] = list(info.get("tile") or [])
    total = sum(launch["ms"] for launch in launches) * 1e3
    return KernelTimes({k: sum(v) / len(v) for k, v in us.items()}, tiles,
                       [np.asarray(o) for o in outputs], total)


def _cuda_runs(module: Any, inputs: list[np.ndarray], warmup: int,
               runs: int) -> list[np.ndarray]:
    from fusec.runtime.cuda import _Driver

    _Driver.current_device()
    ins = []
    try:
        for a in inputs:
            ptr = _Driver.alloc(a.nbytes)
            ins.append(ptr)
            _Driver.to_device(ptr, np.ascontiguousarray(a), 0)
        outs = [np.empty(s.shape, s.numpy_dtype) for s in module.signature.outputs]
        out_ptrs = [_Driver.alloc(o.nbytes) for o in outs]
        try:
            _Driver.synchronize(0)
            for _ in range(warmup):
                module.run_pointers(ins, out_ptrs)
            _Driver.synchronize(0)
            module.profiling(True)
            module.profile(reset=True)
            for _ in range(runs):
                module.run_pointers(ins, out_ptrs)
            _Driver.synchronize(0)
            module.profiling(False)
            for o, ptr in zip(outs, out_ptrs):
                _Driver.to_host(o, ptr, 0)
            _Driver.synchronize(0)
        finally:
            for ptr in out_ptrs:
                _Driver.free(ptr)
    finally:
        for ptr in ins:
            _Driver.free(ptr)
    return outs


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """|a - b| / |b| in float64 (0 for two empty or all-zero arrays)."""
    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    denom = float(np.linalg.norm(y))
    diff = float(np.linalg.norm(x - y))
    return diff / denom if denom else diff


def _as_float32(a: np.ndarray, dtype: str) -> np.ndarray:
    """An output as float32 (bf16 given as its bits when ml_dtypes is absent), so that it
    can be saved with numpy and compared anywhere."""
    if dtype == "bfloat16" and a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32)
    return np.asarray(a).astype(np.float32)


class TimingFailed(RuntimeError):
    """The artifact could not be timed: its run failed, or it passed the time limit."""


def time_isolated(path: str, seed: int = 0, warmup: int = 3, runs: int = 20,
                  timeout: float | None = None) -> KernelTimes:
    """`kernel_times` of the artifact at `path` on `random_inputs(seed)`, in a child process
    killed after `timeout` seconds ($FUSEC_TUNE_TIMEOUT, default 60); outputs as float32."""
    timeout = float(os.environ.get("FUSEC_TUNE_TIMEOUT", "60")) if timeout is None else timeout
    with tempfile.TemporaryDirectory(prefix="fusec-timing-") as tmp:
        result = os.path.join(tmp, "times.json")
        cmd = [sys.executable, "-m", "fusec.runtime.timing", str(path), result, str(seed),
               str(warmup), str(runs)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimingFailed(f"{os.path.basename(path)}: still running after {timeout:.0f} s "
                               f"(killed; a kernel that never finishes?)") from None
        if done.returncode != 0 or not os.path.exists(result):
            lines = (done.stderr or done.stdout or "").strip().splitlines()
            raise TimingFailed(f"{os.path.basename(path)}: " + (lines[-1] if lines else
                                                                  f"exit {done.returncode}"))
        with open(result) as f:
            data = json.load(f)
        with np.load(result + ".npz") as z:
            outputs = [z[f"out{i}"] for i in range(len(z.files))]
    return KernelTimes(data["us"], data["tiles"], outputs, data["total_us"])


def _main(argv: list[str]) -> int:
    import fusec.runtime as runtime

    path, result, seed, warmup, runs = argv[0], argv[1], *map(int, argv[2:5])
    module = runtime.load(path)
    times = kernel_times(module, random_inputs(module, seed), warmup, runs)
    outs = {f"out{i}": _as_float32(o, spec.dtype)
            for i, (o, spec) in enumerate(zip(times.outputs, module.signature.outputs))}
    np.savez(result + ".npz", **outs)
    with open(result, "w") as f:
        json.dump({"us": times.us, "tiles": times.tiles, "total_us": times.total_us}, f)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
