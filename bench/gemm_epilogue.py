"""Our tensor-core GEMM's fused epilogue on the GPU: GPT-2's fc (8192 x 768 -> 3072, bf16)
with a bias, bias + ReLU and bias + GELU(tanh), against torch's F.linear (cuBLAS) and
F.linear + GELU, to see what an epilogue costs the kernel (session 59: the GELU kernel
takes 8.1 us a 128 x 128 tile an SM, the bias-only QKV GEMM 5.5).

    python bench/gemm_epilogue.py build DIR [--unroll N] [--only NAME ...] [--model]
        here: DIR/<name>_u<N>.so, our GEMM whatever the model predicts (N: the
        epilogue's row passes per loop iteration, `gemm_cost.tc_epilogue_unroll`; 0, the
        default: the model's choice); with --model, DIR/<name>_model.so, the planner's
        own path (GELU: cuBLASLt's GELU_BIAS epilogue since session 60)
    python3 bench/gemm_epilogue.py run DIR      the GPU: errors against float64, then times
                                                (interleaved, medians) and TFLOP/s
    python3 bench/gemm_epilogue.py one SO       one call of one build (for ncu)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
bf16 = torch.bfloat16
M, K, N = 8192, 768, 3072
FNS = {
    "bias": lambda x, w, b: F.linear(x, w, b),
    "relu": lambda x, w, b: torch.relu(F.linear(x, w, b)),
    "gelu": lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"),
}


def inputs(device: str) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(M, K, generator=g).to(bf16)
    w = (torch.randn(N, K, generator=g) / K ** 0.5).to(bf16)
    b = torch.randn(N, generator=g).to(bf16)
    return [t.to(device) for t in (x, w, b)]


def build(folder: Path, unroll: int, only: list[str] | None, model: bool = False) -> dict:
    """Build the variants into `folder`; return each build's metadata by name. `model`:
    the planner's own choice of path (cuBLASLt where predicted faster), as
    `<name>_model.so`, instead of our GEMM."""
    from fusec.compiler import driver
    from fusec.compiler.frontend import import_torch
    from fusec.compiler.pipeline import CompileOptions
    from fusec.passes import gemm_cost

    wrap = _bench().Wrap
    model_unroll = gemm_cost.tc_epilogue_unroll
    model_prefer = gemm_cost.prefer_tc_gemm
    # Our GEMM whatever the model predicts for cuBLASLt (which takes GELU as its own
    # epilogue since session 60): this measures our kernel's epilogue.
    if not model:
        gemm_cost.prefer_tc_gemm = lambda ours_s, library_s: True
    if unroll:
        gemm_cost.tc_epilogue_unroll = lambda weighted_ops: unroll
    folder.mkdir(parents=True, exist_ok=True)
    metas = {}
    try:
        for name, fn in FNS.items():
            if only and name not in only:
                continue
            with driver.quiet_torch_logs():
                text = import_torch(wrap(fn).eval(), *inputs("cpu"))
            meta = driver.compile_text(text, f"<gemm_epilogue {name}>",
                                       CompileOptions(target="cuda"),
                                       str(folder / (f"{name}_model.so" if model
                                                     else f"{name}_u{unroll}.so")))
            print(name, "model" if model else f"u{unroll}",
                  [k["info"].get("tile") for k in meta["kernels"]],
                  [k["info"].get("path") for k in meta["kernels"]])
            metas[name] = meta
    finally:
        gemm_cost.tc_epilogue_unroll = model_unroll
        gemm_cost.prefer_tc_gemm = model_prefer
    return metas


def _bench():
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu

    return gpu


def run(folder: Path) -> None:
    bench = _bench()
    xs = inputs("cuda")
    calls = {}
    for so in sorted(folder.glob("*.so")):
        model = bench.FusecModel(so)
        out = model.outputs_like("cuda")
        call = model.bind(xs, out)
        call()
        torch.cuda.synchronize()
        name = so.stem.split("_")[0]
        ref = FNS[name](*[t.double() for t in xs])
        print(f"{so.stem:10s} error {bench.rel_err(out[0], ref):.2e} (torch "
              f"{bench.rel_err(FNS[name](*xs), ref):.2e}), kernels {model.kernels}")
        calls[so.stem] = call
    calls["torch_bias"] = lambda: F.linear(*xs)
    calls["torch_gelu"] = lambda: F.gelu(F.linear(*xs), approximate="tanh")
    for name, ms in bench.interleaved_ms(calls, 50).items():
        print(f"{name:12s} {ms * 1e3:8.1f} us  {2 * M * N * K / (ms * 1e-3) / 1e12:5.0f} TFLOP/s")


def one(so: Path) -> None:
    bench = _bench()
    xs = inputs("cuda")
    model = bench.FusecModel(so)
    model.bind(xs, model.outputs_like("cuda"))()
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("build", "run", "one"))
    parser.add_argument("path", type=Path)
    parser.add_argument("--unroll", type=int, default=0)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--model", action="store_true",
                        help="the planner's path (cuBLASLt where predicted faster)")
    args = parser.parse_args()
    if args.mode == "build":
        build(args.path, args.unroll, args.only, args.model)
    elif args.mode == "run":
        run(args.path)
    else:
        one(args.path)


if __name__ == "__main__":
    main()
