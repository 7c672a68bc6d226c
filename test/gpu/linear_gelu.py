"""Linear + bias + GELU (8192x4096x4096, fp32) through fusec's CUDA fallback path, timed.

    python test/gpu/linear_gelu.py build DIR     (here, no GPU): DIR/linear_gelu.so
    python3 test/gpu/linear_gelu.py run DIR      (the H200): error vs float64, then eager,
                                                 torch.compile and fusec timed with CUDA
                                                 events (bench/gpu.py's time_ms), kernels

The weight and bias are inputs (a 64 MiB constant would be embedded in model.so). Run 7
measured the upstream fallback here (one thread per output element); the matmul group now
goes through cuBLASLt, and bench/gpu.py's `linear_gelu` / `linear_gelu_bf16` workloads are
the maintained version of this measurement (this script is kept for run 7's record).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
M, K, N = 8192, 4096, 4096


def linear_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b))


class Wrap(torch.nn.Module):
    def forward(self, x, w, b):
        return linear_gelu(x, w, b)


def build(out_dir: Path) -> None:
    import mlir.ir as ir
    from torch_mlir import fx

    from fusec.compiler import pipeline as pl
    from fusec.dialects import make_context

    args = [torch.empty(M, K), torch.empty(N, K), torch.empty(N)]
    text = str(fx.export_and_import(Wrap(), *args, output_type="linalg-on-tensors"))
    t0 = time.perf_counter()
    with make_context() as ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(text)
        options = pl.CompileOptions(target="cuda", model_name="linear_gelu")
        pl.lower(module, options)
        meta = pl.build_so(module, options, str(out_dir / "linear_gelu.so"))
    launches = meta["plan"]["launches"]
    info = {"compile_s": round(time.perf_counter() - t0, 3), "kernels": len(launches),
            "launches": [{k: v for k, v in launch.items() if k in ("symbol", "grid", "block")}
                         | {"path": launch["info"].get("path")} for launch in launches]}
    (out_dir / "linear_gelu.json").write_text(json.dumps(info, indent=1))
    print(info)


def run(art_dir: Path) -> None:
    spec = importlib.util.spec_from_file_location("fusec_bench_gpu", ROOT / "bench" / "gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(M, K, generator=g).cuda()
    w = (torch.randn(N, K, generator=g) / K**0.5).cuda()
    b = torch.randn(N, generator=g).cuda()
    ref = linear_gelu(x.double(), w.double(), b.double())
    model = bench.FusecModel(art_dir / "linear_gelu.so")
    outs = model.outputs_like("cuda")
    call = model.bind([x, w, b], outs)
    call()
    torch.cuda.synchronize()
    row = {"err_fusec": bench.rel_err(outs[0], ref),
           "err_eager": bench.rel_err(linear_gelu(x, w, b), ref)}
    del ref
    compiled = torch.compile(linear_gelu)
    t0 = time.perf_counter()
    compiled(x, w, b)
    torch.cuda.synchronize()
    row["inductor_compile_s"] = round(time.perf_counter() - t0, 1)
    variants = {"eager": lambda: linear_gelu(x, w, b), "inductor": lambda: compiled(x, w, b),
                "fusec": call}
    for label, fn in variants.items():
        reps = 3 if label == "fusec" else 20
        row[f"{label}_ms"] = round(bench.time_ms(fn, reps, warmup=1), 3)
        row[f"{label}_kernels"] = model.kernels if label == "fusec" else bench.count_kernels(fn)
    print("linear+bias+GELU 8192x4096x4096 fp32:", json.dumps(row), flush=True)


if __name__ == "__main__":
    {"build": build, "run": run}[sys.argv[1]](Path(sys.argv[2]))
