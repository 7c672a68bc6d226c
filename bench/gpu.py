"""Issue 6's GPU benchmark: torch eager, torch.compile and fusec on the memory-bound workloads.

Two halves, because MLIR is here and the GPU is there:

  python bench/gpu.py build DIR     (this machine, no GPU) import each workload with torch-mlir,
                                    fuse it into one fusion.group, compile it with
                                    fusec.compiler.codegen_cuda to PTX + sm_90 cubin, write
                                    DIR/<name>.so and DIR/build.json (fusec compile seconds).
  python bench/gpu.py run DIR OUT   (the H200) for each workload, in one process: check fusec's
                                    output (and eager's and Inductor's) against a float64
                                    reference, then time eager, torch.compile (default; with
                                    --max-autotune also mode="max-autotune-no-cudagraphs") and
                                    fusec with CUDA events (median of --reps timed runs after
                                    warm-up, each run timed alone), count kernels per run with
                                    the profiler, and compare with the HBM floor (bytes that
                                    must move / measured device-to-device copy bandwidth).
                                    Prints a table and writes OUT/bench_gpu.json.

The run half imports neither MLIR nor fusec's compiler: model.so is loaded with ctypes.
Fusion is decided by hand here (all of a workload's ops in one group) until the fusion stage
chooses the same; dtypes are float32 (bf16 code generation is not done yet).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- the workloads


def ew_chain(x):
    return F.gelu(x * 2 + 1) * 3


def residual_layernorm(x, r, w, b):
    return F.layer_norm(x + r, (x.shape[-1],), w, b, 1e-5)


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def softmax(x):
    return torch.softmax(x, -1)


class Wrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _shapes(name: str, rows: int, cols: int) -> list[tuple[int, ...]]:
    if name.startswith("ew"):
        return [(rows * cols,)]
    if name.startswith("ln"):
        return [(rows, cols), (rows, cols), (cols,), (cols,)]
    if name.startswith("rms"):
        return [(rows, cols), (cols,)]
    return [(rows, cols)]


FUNCTIONS = {"ew": ew_chain, "ln": residual_layernorm, "rms": rmsnorm, "softmax": softmax}

# name -> (function key, rows, cols, description, dtype). Large: issue 6's shapes; small: odd
# shapes for numerics and compute-sanitizer.
WORKLOADS = {
    "ew": ("ew", 8192, 8192, "gelu(x*2+1)*3, 64M fp32", torch.float32),
    "ln": ("ln", 16384, 4096, "residual + LayerNorm 16384x4096 fp32", torch.float32),
    "rms": ("rms", 16384, 4096, "RMSNorm 16384x4096 fp32", torch.float32),
    "softmax": ("softmax", 8192, 8192, "softmax 8192x8192 fp32", torch.float32),
    "ew_bf16": ("ew", 8192, 8192, "gelu(x*2+1)*3, 64M bf16", torch.bfloat16),
    "ln_bf16": ("ln", 16384, 4096, "residual + LayerNorm 16384x4096 bf16", torch.bfloat16),
    "rms_bf16": ("rms", 16384, 4096, "RMSNorm 16384x4096 bf16", torch.bfloat16),
    "softmax_bf16": ("softmax", 8192, 8192, "softmax 8192x8192 bf16", torch.bfloat16),
}
SMALL = {
    "ew_small": ("ew", 1, 1000003, "elementwise, odd length (scalar, guarded)", torch.float32),
    "ln_small": ("ln", 37, 768, "residual + LayerNorm 37x768", torch.float32),
    "rms_small": ("rms", 5, 4096, "RMSNorm 5x4096", torch.float32),
    "softmax_small": ("softmax", 3, 1000, "softmax 3x1000 (short row)", torch.float32),
    "softmax_small_bf16": ("softmax", 3, 1000, "softmax 3x1000 bf16", torch.bfloat16),
    "ln_small_bf16": ("ln", 37, 768, "residual + LayerNorm 37x768 bf16", torch.bfloat16),
}
# Launch-shape experiments: the same workload with another row_elements_per_thread.
EXPERIMENTS = {
    "ln_bf16_e16": ("ln", 16384, 4096, "residual + LayerNorm bf16, 16 per thread", torch.bfloat16),
    "softmax_bf16_e16": ("softmax", 8192, 8192, "softmax bf16, 16 per thread", torch.bfloat16),
    "rms_bf16_e16": ("rms", 16384, 4096, "RMSNorm bf16, 16 per thread", torch.bfloat16),
    "ln_e8": ("ln", 16384, 4096, "residual + LayerNorm fp32, 8 per thread", torch.float32),
    "ew_u2": ("ew", 8192, 8192, "gelu chain fp32, 2 chunks per thread", torch.float32),
    "ew_u4": ("ew", 8192, 8192, "gelu chain fp32, 4 chunks per thread", torch.float32),
}
VARIANTS = {"ln_bf16_e16": 16, "softmax_bf16_e16": 16, "rms_bf16_e16": 16, "ln_e8": 8}
UNROLL = {"ew_u2": 2, "ew_u4": 4}
# fusec without fusion (fusec's own fusion=False stage: one kernel per linalg op): what fusion
# buys inside one code generator.
UNFUSED = {f"{n}_unfused": v[:3] + (v[3] + " [fusec unfused]",) + v[4:]
           for n, v in {**WORKLOADS, **SMALL}.items()
           if n in ("ew", "ln", "rms", "softmax", "ln_small", "softmax_small", "rms_small")}
ALL = {**WORKLOADS, **SMALL, **EXPERIMENTS, **UNFUSED}


def tolerance(name: str) -> float:
    """Relative-error bound against float64: fp32 1e-5, bf16 1e-2 (issue 6)."""
    return 1e-2 if ALL[name][4] == torch.bfloat16 else 1e-5


def inputs_for(name: str, device: str, seed: int = 0) -> list[torch.Tensor]:
    key, rows, cols, _, dtype = ALL[name]
    g = torch.Generator(device="cpu").manual_seed(seed)
    out = []
    for shape in _shapes(key, rows, cols):
        out.append(torch.randn(shape, generator=g, dtype=torch.float32).to(device, dtype))
    return out


def floor_bytes(name: str) -> int:
    """Bytes that must move: every input read once, the output written once."""
    key, rows, cols, _, dtype = ALL[name]
    elems = sum(torch.Size(s).numel() for s in _shapes(key, rows, cols))
    out = rows * cols
    return dtype.itemsize * (elems + out)


# ---------------------------------------------------------------- build (no GPU)


def build(out_dir: Path, names: list[str]) -> None:
    import mlir.ir as ir
    from torch_mlir import fx

    from fusec.compiler import codegen_cuda
    from fusec.compiler import pipeline as pl
    from fusec.dialects import make_context
    from fusec.passes.grouping import form_group, is_compute

    out_dir.mkdir(parents=True, exist_ok=True)
    report_path = out_dir / "build.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    for name in names:
        key, rows, cols, desc, dtype = ALL[name]
        args = [torch.empty(s, dtype=dtype) for s in _shapes(key, rows, cols)]
        t0 = time.perf_counter()
        text = str(fx.export_and_import(Wrap(FUNCTIONS[key]), *args,
                                        output_type="linalg-on-tensors"))
        t1 = time.perf_counter()
        with make_context() as ctx, ir.Location.unknown(ctx):
            module = ir.Module.parse(text)
            if name in UNFUSED:
                options = pl.CompileOptions(target="cpu", fusion=False)
                for stage in ("linalg", "fusion"):
                    pl.run_stage(module, stage, options)
            else:
                func = module.body.operations[0]
                ops = [o for o in func.regions[0].blocks[0].operations
                       if is_compute(o) or o.operation.name == "linalg.fill"]
                form_group(ops, "reduction" if key != "ew" else "vertical")
            program = codegen_cuda.generate(module, codegen_cuda.CudaOptions(
                row_elements_per_thread=VARIANTS.get(name, 0),
                elementwise_unroll=UNROLL.get(name, 0)))
            codegen_cuda.write_cuda_artifact(program, out_dir / f"{name}.so")
            (out_dir / f"{name}.ptx").write_text(program.ptx)
        t2 = time.perf_counter()
        report[name] = {"description": desc, "import_s": round(t1 - t0, 3),
                        "fusec_compile_s": round(t2 - t1, 3),
                        "kernels": len(program.plan.launches),
                        "launch": program.plan.launches[0].info}
        print(f"{name}: import {t1 - t0:.2f} s, fusec compile {t2 - t1:.2f} s, "
              f"{program.plan.launches[0].info['launch']}")
    report_path.write_text(json.dumps(report, indent=1))


def build_examples(out_dir: Path) -> None:
    """Every examples/<name>: fusec's own linalg and fusion stages, then the CUDA code generator.

    Writes DIR/example_<name>.so where it compiles and DIR/examples.json (what compiled, the
    kernel count, or the reason it did not).
    """
    import mlir.ir as ir

    from fusec.compiler import codegen_cuda
    from fusec.compiler import pipeline as pl
    from fusec.dialects import make_context

    root = Path(__file__).resolve().parents[1] / "examples"
    report = {}
    for folder in sorted(p for p in root.iterdir() if (p / "model.mlir").exists()):
        name = folder.name
        t0 = time.perf_counter()
        with make_context() as ctx, ir.Location.unknown(ctx):
            module = ir.Module.parse((folder / "model.mlir").read_text())
            options = pl.CompileOptions(target="cpu")  # linalg + fusion stages are shared
            try:
                for stage in ("linalg", "fusion"):
                    pl.run_stage(module, stage, options)
                program = codegen_cuda.generate(module)
                codegen_cuda.write_cuda_artifact(program, out_dir / f"example_{name}.so")
                report[name] = {"ok": True, "kernels": len(program.plan.launches),
                                "compile_s": round(time.perf_counter() - t0, 3)}
            except Exception as e:  # noqa: BLE001 - recorded: a refusal is a result
                report[name] = {"ok": False, "reason": str(e).splitlines()[0][:300]}
        print(f"example {name}: {report[name]}")
    (out_dir / "examples.json").write_text(json.dumps(report, indent=1))


# ---------------------------------------------------------------- run (on the GPU)


class FusecModel:
    """A CUDA model.so called through its C ABI with torch tensors (device pointers)."""

    def __init__(self, path: Path) -> None:
        self.lib = ctypes.CDLL(str(path))
        self.lib.fusec_metadata.restype = ctypes.c_char_p
        self.lib.fusec_last_error.restype = ctypes.c_char_p
        self.lib.fusec_run_stream.argtypes = [ctypes.c_void_p] * 3
        self.lib.fusec_run.argtypes = [ctypes.c_void_p] * 2
        self.meta = json.loads(self.lib.fusec_metadata().decode())
        self.kernels = len(self.meta["kernels"])

    def outputs_like(self, device: str) -> list[torch.Tensor]:
        return [torch.full(o["shape"], float("nan"), device=device,
                           dtype=getattr(torch, o["dtype"])) for o in self.meta["outputs"]]

    def bind(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]):
        ins = (ctypes.c_void_p * len(inputs))(*[t.data_ptr() for t in inputs])
        outs = (ctypes.c_void_p * len(outputs))(*[t.data_ptr() for t in outputs])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

        def call() -> None:
            rc = self.lib.fusec_run_stream(ins, outs, stream)
            if rc:
                raise RuntimeError(self.lib.fusec_last_error().decode())

        return call


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.double()
    if not torch.isfinite(out).all():
        return float("nan")
    return ((out - ref).norm() / ref.norm()).item()


def time_ms(fn, reps: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def count_kernels(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read + written), 1 GiB."""
    a = torch.empty(1 << 28, device="cuda")
    b = torch.empty_like(a)
    ms = time_ms(lambda: b.copy_(a), 20)
    return 2 * a.numel() * 4 / (ms * 1e-3)


def run(art_dir: Path, out_dir: Path, names: list[str], reps: int, max_autotune: bool) -> None:
    build_info = json.loads((art_dir / "build.json").read_text())
    bw = copy_bandwidth()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "copy_TBps": bw / 1e12, "workloads": {}}
    for name in names:
        key = ALL[name][0]
        fn = FUNCTIONS[key]
        xs = inputs_for(name, "cuda", seed=1)
        ref = fn(*[x.double() for x in xs])
        model = FusecModel(art_dir / f"{name}.so")
        outs = model.outputs_like("cuda")
        call = model.bind(xs, outs)
        call()
        torch.cuda.synchronize()
        row = {"description": ALL[name][3],
               "floor_ms": floor_bytes(name) / bw * 1e3,
               "fusec_compile_s": build_info.get(name, {}).get("fusec_compile_s"),
               "err": {"fusec": rel_err(outs[0], ref), "eager": rel_err(fn(*xs), ref)}}
        variants = {"eager": lambda: fn(*xs)}
        compiled = {"inductor": torch.compile(fn)}
        if max_autotune:
            compiled["inductor_max_autotune"] = torch.compile(
                fn, mode="max-autotune-no-cudagraphs")
        for label, cfn in compiled.items():
            t0 = time.perf_counter()
            y = cfn(*xs)
            torch.cuda.synchronize()
            row[f"{label}_compile_s"] = time.perf_counter() - t0
            row["err"][label] = rel_err(y, ref)
            variants[label] = (lambda c: (lambda: c(*xs)))(cfn)
        variants["fusec"] = call
        row["ms"], row["kernels"] = {}, {}
        for label, v in variants.items():
            row["ms"][label] = time_ms(v, reps)
            row["kernels"][label] = model.kernels if label == "fusec" else count_kernels(v)
        # fusec timed a second time: the spread between two timings of one version is the noise.
        row["ms"]["fusec_again"] = time_ms(call, reps)
        results["workloads"][name] = row
        out_dir.mkdir(parents=True, exist_ok=True)  # saved as it goes: a timeout keeps the rest
        (out_dir / "bench_gpu.json").write_text(json.dumps(results, indent=1))
        print(f"{name}: " + ", ".join(f"{k} {v:.4f} ms" for k, v in row["ms"].items())
              + f"; errors {row['err']}", flush=True)
        del xs, ref, outs
        torch.cuda.empty_cache()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_gpu.json").write_text(json.dumps(results, indent=1))
    print_table(results)


def print_table(results: dict) -> None:
    print(f"\n{results['date']}  {results['device']}  torch {results['torch']}  "
          f"copy {results['copy_TBps']:.2f} TB/s")
    print("| workload | eager ms | Inductor ms | Inductor max-autotune ms | fusec ms (again) | "
          "floor ms | fusec speed vs best Inductor | fusec % of floor | kernels eager/Ind/fusec "
          "| fusec err | fusec compile s | Inductor compile s |")
    print("|" + " --- |" * 12)
    for r in results["workloads"].values():
        ms, k = r["ms"], r["kernels"]
        auto = ms.get("inductor_max_autotune")
        best = min(ms["inductor"], auto) if auto else ms["inductor"]
        auto_text = f"{auto:.3f}" if auto else "-"
        print(f"| {r['description']} | {ms['eager']:.3f} | {ms['inductor']:.3f} | {auto_text} | "
              f"{ms['fusec']:.3f} ({ms['fusec_again']:.3f}) | {r['floor_ms']:.3f} | "
              f"{best / ms['fusec']:.2f}x | {100 * r['floor_ms'] / ms['fusec']:.0f} | "
              f"{k['eager']}/{k['inductor']}/{k['fusec']} | {r['err']['fusec']:.1e} | "
              f"{r['fusec_compile_s']} | {r['inductor_compile_s']:.1f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir", type=Path)
    b.add_argument("--only", nargs="*", default=list(ALL))
    b.add_argument("--examples", action="store_true", help="also build examples/*")
    r = sub.add_parser("run")
    r.add_argument("dir", type=Path)
    r.add_argument("out", type=Path, nargs="?", default=Path(os.environ.get("OUT", ".")))
    r.add_argument("--only", nargs="*", default=list(WORKLOADS))
    r.add_argument("--reps", type=int, default=50)
    r.add_argument("--max-autotune", action="store_true")
    a = ap.parse_args(argv)
    if a.cmd == "build":
        build(a.dir, a.only)
        if a.examples:
            build_examples(a.dir)
    else:
        run(a.dir, a.out, a.only, a.reps, a.max_autotune)
    return 0


if __name__ == "__main__":
    sys.exit(main())
