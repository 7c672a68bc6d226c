"""fp32 matmuls with and without TF32 (`CudaOptions.matmul_tf32`, torch's
`torch.backends.cuda.matmul.allow_tf32`), on the GPU against float64, eager and Inductor.

    python test/gpu/tf32.py build DIR     (here, no GPU): DIR/<case>.<exact|tf32>.so
    python3 test/gpu/tf32.py run DIR      (the GPU): per case and mode, the error against
                                          float64 beside torch's own under the same setting,
                                          kernels, and the times of fusec, eager and
                                          Inductor (bench/gpu.py's time_ms), both settings

Cases: Linear + bias + ReLU 4096 x 4096 x 4096 and a bmm 16 x 1024 x 1024 x 512, fp32, the
weights as inputs. Exit 1 if a build's error is not at its setting's level: exact within
1e-5, TF32 within 1e-2 and no more than 4x torch's own TF32 error.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]


def linear_relu(x, w, b):
    return F.relu(F.linear(x, w, b))


def bmm(a, b):
    return torch.bmm(a, b)


CASES = {
    "linear_relu": (linear_relu, lambda: [torch.randn(4096, 4096), torch.randn(4096, 4096)
                                          / 64, torch.randn(4096)]),
    "bmm": (bmm, lambda: [torch.randn(16, 1024, 512), torch.randn(16, 512, 1024)]),
}
MODES = {"exact": False, "tf32": True}


def _bench():
    spec = importlib.util.spec_from_file_location("fusec_bench_gpu", ROOT / "bench" / "gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def build(out_dir: Path) -> None:
    from fusec.compiler import driver, pipeline as pl
    from fusec.compiler.frontend import import_torch
    from fusec.compiler.targets.cuda import CudaOptions

    out_dir.mkdir(parents=True, exist_ok=True)
    for name, (fn, make) in CASES.items():
        with driver.quiet_torch_logs():
            text = import_torch(_bench().Wrap(fn).eval(), *make())
        for mode, tf32 in MODES.items():
            module = driver.parse(text, "<tf32>")
            options = pl.CompileOptions(target="cuda", model_name=name,
                                        cuda=CudaOptions(matmul_tf32=tf32))
            pl.lower(module, options)
            meta = pl.build_so(module, options, str(out_dir / f"{name}.{mode}.so"))
            paths = [k["info"].get("path") for k in meta["plan"]["launches"]]
            print(name, mode, paths, flush=True)


def run(art_dir: Path) -> int:
    bench = _bench()
    bad = 0
    for name, (fn, make) in CASES.items():
        torch.manual_seed(1)
        xs = [t.cuda() for t in make()]
        ref = fn(*[t.double() for t in xs])
        compiled = torch.compile(fn)
        for mode, tf32 in MODES.items():
            torch.backends.cuda.matmul.allow_tf32 = tf32
            model = bench.FusecModel(art_dir / f"{name}.{mode}.so")
            outs = model.outputs_like("cuda")
            call = model.bind(xs, outs)
            call()
            torch.cuda.synchronize()
            row = {"case": name, "mode": mode, "err_fusec": bench.rel_err(outs[0], ref),
                   "err_torch": bench.rel_err(fn(*xs), ref), "kernels": model.kernels}
            compiled(*xs)  # compiles under this setting (a recompile where it changed)
            for label, f in (("fusec", call), ("eager", lambda: fn(*xs)),
                             ("inductor", lambda: compiled(*xs))):
                row[f"{label}_ms"] = round(bench.time_ms(f, 20, warmup=3), 4)
            ok = row["err_fusec"] <= 1e-5 if not tf32 else \
                row["err_fusec"] <= min(1e-2, 4 * max(row["err_torch"], 1e-6))
            row["ok"] = ok
            bad += not ok
            print(json.dumps(row), flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(Path(sys.argv[2]))
    else:
        sys.exit(run(Path(sys.argv[2])))
