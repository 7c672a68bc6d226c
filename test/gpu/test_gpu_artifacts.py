"""CUDA model.so artifacts on a real GPU: numerics, ABI, error reporting.

Run on the H200 through the device tool, after `python bench/gpu.py build .device-carry/cuda`
here (the artifacts are compiled on the machine without a GPU and carried):

    python3 -m pytest -q test/gpu            (FUSEC_GPU_ARTIFACTS overrides the folder)

Skipped where there is no CUDA GPU or no artifacts, so it never fails CI. Each check draws
fresh random inputs, poisons the outputs with NaN first, and compares with a float64 reference
by ||out - ref|| / ||ref|| (fp32: < 1e-5).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("FUSEC_GPU_ARTIFACTS", ROOT / ".device-carry" / "cuda"))

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
if not (ARTIFACTS / "build.json").exists():
    pytest.skip(f"no artifacts in {ARTIFACTS} (run bench/gpu.py build)", allow_module_level=True)

_spec = importlib.util.spec_from_file_location("fusec_bench_gpu", ROOT / "bench" / "gpu.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

NAMES = sorted(p.stem for p in ARTIFACTS.glob("*.so") if p.stem in bench.ALL)


@pytest.mark.parametrize("name", NAMES)
def test_numerics(name: str) -> None:
    key = bench.ALL[name][0]
    fn = bench.FUNCTIONS[key]
    model = bench.FusecModel(ARTIFACTS / f"{name}.so")
    assert model.meta["target"] == "cuda"
    if name in bench.UNFUSED:
        assert model.kernels > 1  # one kernel per linalg op, temporaries between them
    else:
        assert model.kernels == 1  # every workload is one fused kernel
    for trial in range(2):
        xs = bench.inputs_for(name, "cuda", seed=int(time.time_ns() % 2**31) + trial)
        outs = model.outputs_like("cuda")
        model.bind(xs, outs)()
        torch.cuda.synchronize()
        ref = fn(*[x.double() for x in xs])
        assert outs[0].shape == ref.shape
        err = bench.rel_err(outs[0], ref)
        assert err < bench.tolerance(name), f"{name}: relative error {err}"


def test_synchronous_run_and_null_pointer() -> None:
    import ctypes

    model = bench.FusecModel(ARTIFACTS / "softmax_small.so")
    xs = bench.inputs_for("softmax_small", "cuda", seed=7)
    outs = model.outputs_like("cuda")
    ins = (ctypes.c_void_p * 1)(xs[0].data_ptr())
    out = (ctypes.c_void_p * 1)(outs[0].data_ptr())
    assert model.lib.fusec_run(ins, out) == 0, model.lib.fusec_last_error()
    assert bench.rel_err(outs[0], torch.softmax(xs[0].double(), -1)) < 1e-5
    bad = (ctypes.c_void_p * 1)(None)
    assert model.lib.fusec_run(bad, out) == 1
    assert b"inputs[0] is NULL" in model.lib.fusec_last_error()


def test_fault_names_cuda_error_and_kernel() -> None:
    # A wild device pointer faults inside the kernel; with FUSEC_CUDA_SYNC=1 the error names
    # the kernel. In a child process: the fault poisons the context for good.
    code = textwrap.dedent(f"""
        import ctypes, sys, torch
        torch.zeros(1, device="cuda")
        lib = ctypes.CDLL({str(ARTIFACTS / "ew_small.so")!r})
        lib.fusec_last_error.restype = ctypes.c_char_p
        lib.fusec_run.argtypes = [ctypes.c_void_p] * 2
        out = torch.empty(1000003, device="cuda")
        ins = (ctypes.c_void_p * 1)(0x10)
        outs = (ctypes.c_void_p * 1)(out.data_ptr())
        rc = lib.fusec_run(ins, outs)
        print(rc, lib.fusec_last_error().decode())
    """)
    env = dict(os.environ, FUSEC_CUDA_SYNC="1")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    text = done.stdout + done.stderr
    assert done.stdout.startswith("2 "), text
    assert "CUDA_ERROR_" in text and "fusec_k0" in text, text


def _example_report() -> dict:
    import json

    path = ARTIFACTS / "examples.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _examples() -> list[str]:
    return sorted(n for n, r in _example_report().items() if r["ok"])


def test_every_example_compiled() -> None:
    """test/gpu/build_examples.py compiled all nine examples (fast path or fallback)."""
    report = _example_report()
    assert len(report) == 9, sorted(report)
    assert all(r["ok"] for r in report.values()), {n: r for n, r in report.items()
                                                   if not r["ok"]}


@pytest.mark.parametrize("name", _examples())
def test_example_model(name: str) -> None:
    """examples/<name> compiled here (fusec's fusion stage + CUDA codegen) vs the torch model.

    One kernel per fusion group, whichever path (fast emitter, upstream fallback) built it.
    """
    groups = _example_report()[name].get("groups")
    spec = importlib.util.spec_from_file_location(f"example_{name}",
                                                  ROOT / "examples" / name / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reference = module.model().double().cuda()
    example = module.example_inputs()
    model = bench.FusecModel(ARTIFACTS / f"example_{name}.so")
    if groups is not None:
        assert model.kernels == groups
    for trial in range(2):
        g = torch.Generator().manual_seed(int(time.time_ns() % 2**31) + trial)
        xs = [torch.randn(x.shape, generator=g).to("cuda", x.dtype) for x in example]
        outs = model.outputs_like("cuda")
        model.bind(xs, outs)()
        torch.cuda.synchronize()
        with torch.no_grad():
            ref = reference(*[x.double() for x in xs])
        err = bench.rel_err(outs[0], ref)
        assert err < 1e-5, f"example {name}: relative error {err}"


def test_fusec_runtime_runs_cuda_artifact() -> None:
    """fusec.runtime (the deployment loader, no MLIR) runs a CUDA model.so on device pointers."""
    runtime = pytest.importorskip("fusec.runtime")
    module = runtime.load(ARTIFACTS / "softmax_small.so")
    assert module.target == "cuda"
    x = torch.randn(3, 1000, device="cuda")
    y = torch.full_like(x, float("nan"))
    module.run_pointers([x.data_ptr()], [y.data_ptr()], torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert bench.rel_err(y, torch.softmax(x.double(), -1)) < 1e-5
