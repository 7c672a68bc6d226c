"""CPU benchmark: torch eager, torch.compile (Inductor), fusec fused and fusec unfused.

    python bench/cpu.py                         # every workload; table on stdout
    python bench/cpu.py --json bench/results-cpu.json
    python bench/cpu.py --only softmax rmsnorm  # a subset
    python bench/cpu.py --quick --no-inductor   # short timing, skip torch.compile (smoke test)

Workloads: every example under examples/ (model() and example_inputs()) plus four larger
memory-bound ones (an elementwise chain at 16M fp32, softmax 4096x4096, residual + LayerNorm
4096x1024 and RMSNorm 4096x1024), two matmul microbenchmarks (512x512x512 and
4096x1024 @ 1024x1024 fp32) and two attentions (naive and causal SDPA, B1 H8 S1024 D64 fp32:
fusec's attention kernel against its unfused plan), also reported in GFLOP/s. Each runs in this one process, on fresh random inputs of the
example's shapes (not the example's own tensors):

- correctness: every variant's output against the same model in float64 torch, as
  ||out - ref|| / ||ref|| over all outputs; a fusec error above TOLERANCE is flagged with "!";
- time: time.perf_counter around each call; warm-up, then the variants take turns in blocks
  (the machine is shared and noisy: interleaving spreads drift over all of them); the median
  of every timed call is reported. fusec is called the way a user calls it (inputs checked,
  outputs allocated); "out=" is the same artifact writing into preallocated outputs;
- kernels: fusec's launches per call (`Module.kernels`), fused and unfused; Inductor's
  generated C++ kernels plus extern calls (matmuls, convolutions) in its wrapper's call();
- memory floor: bytes the workload must move (inputs, parameters and buffers read once,
  outputs written once) / this machine's copy bandwidth, measured here with a large numpy copy
  (bytes read + written per second); on small examples that fit in cache, and on matmul-heavy
  ones, the floor is not the binding limit;
- compile time: fusec = `fusec.compile` with its cache off (torch-mlir import included);
  Inductor = the first call of the `torch.compile`d module, with a fresh Inductor cache
  directory (its one-time start-up is spent on a throwaway function first).

Threads: torch.set_num_threads(N) and FUSEC_NUM_THREADS=N (set before any artifact is
loaded), N = --threads, default all cores available to this process.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import importlib.util
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
EXAMPLE_NAMES = ["mlp", "layernorm_mlp", "softmax", "attention", "transformer", "cnn",
                 "elementwise", "rmsnorm", "gpt2_block"]
# The end-to-end tests' bound for float32 against a float64 reference.
TOLERANCE = 1e-5
VARIANTS = ["eager", "inductor", "fusec", "fusec_out", "fusec_unfused"]


# ---------------------------------------------------------------- workloads


@dataclass
class Workload:
    """A model and the shapes of its inputs; `build` returns (module, example inputs)."""

    name: str
    description: str
    build: Callable[[], tuple[Any, tuple[Any, ...]]]
    # Floating-point operations per call (2*M*N*K for a matmul): set for the matmul
    # microbenchmarks, whose figure of merit is GFLOP/s.
    flops: int = 0
    # New inputs from a seed (token ids, masks: the zoo's models); default: randn of the
    # example's shapes.
    fresh: Callable[[int], tuple[Any, ...]] | None = None


def _example(name: str) -> Workload:
    path = EXAMPLES / name / "model.py"
    spec = importlib.util.spec_from_file_location(f"fusec_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    doc = (module.__doc__ or name).strip().splitlines()[0]
    return Workload(name, doc, lambda: (module.model(), module.example_inputs()))


def _large_workloads() -> list[Workload]:
    import torch
    from torch import nn

    class EwChain(nn.Module):
        def forward(self, x):
            return nn.functional.gelu(x * 2 + 1) * 3

    class ResidualLayerNorm(nn.Module):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(n)
            with torch.no_grad():  # not the identity affine: the parameters must matter
                self.norm.weight.copy_(torch.randn(n) * 0.5 + 1)
                self.norm.bias.copy_(torch.randn(n) * 0.1)

        def forward(self, x, r):
            return self.norm(x + r)

    class RMSNorm(nn.Module):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(n) * 0.5 + 1)

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    class Softmax(nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=-1)

    def make(module_fn, *shapes):
        def build():
            torch.manual_seed(0)
            return module_fn().eval(), tuple(torch.randn(*s) for s in shapes)

        return build

    class MatMul(nn.Module):
        def forward(self, a, b):
            return a @ b

    class NaiveAttention(nn.Module):
        def forward(self, q, k, v):
            s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
            return torch.softmax(s, dim=-1) @ v

    class CausalSDPA(nn.Module):
        def forward(self, q, k, v):
            return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    class Transpose(nn.Module):
        def forward(self, x):
            return x.t().contiguous()

    attention = (1, 8, 1024, 64)
    attention_flops = 4 * 8 * 1024 * 1024 * 64
    return [
        Workload("attention_naive_s1024", "softmax(q k^T / 8) v, B1 H8 S1024 D64 fp32",
                 make(NaiveAttention, attention, attention, attention), flops=attention_flops),
        Workload("sdpa_causal_s1024", "SDPA is_causal, B1 H8 S1024 D64 fp32 (flops: all "
                 "scores)", make(CausalSDPA, attention, attention, attention),
                 flops=attention_flops),
        Workload("matmul_512", "a @ b, 512x512 @ 512x512 fp32",
                 make(MatMul, (512, 512), (512, 512)), flops=2 * 512**3),
        Workload("matmul_4096x1024x1024", "a @ b, 4096x1024 @ 1024x1024 fp32",
                 make(MatMul, (4096, 1024), (1024, 1024)), flops=2 * 4096 * 1024 * 1024),
        # The microkernel's table (one shape per use it serves; run them at every stop, so that
        # a regression of the plain matmul shows the same day): GPT-2's MLP Linear at seq 128,
        # a ResNet 3x3 layer as im2col GEMM (filters @ columns), and a shape nothing divides.
        *[Workload(f"matmul_{m}x{k}x{n}", f"a @ b, {m}x{k} @ {k}x{n} fp32 ({use})",
                   make(MatMul, (m, k), (k, n)), flops=2 * m * k * n)
          for m, k, n, use in [(128, 768, 3072, "Linear at seq 128"),
                               (64, 576, 3136, "a 3x3 convolution's GEMM"),
                               (1024, 1024, 1024, "square"),
                               (100, 700, 1000, "ragged: no block divides")]],
        Workload("ew_chain_16M", "gelu(x*2+1)*3 over 16M fp32", make(EwChain, (1 << 24,))),
        Workload("softmax_4096x4096", "softmax(x, -1), 4096x4096 fp32",
                 make(Softmax, (4096, 4096))),
        Workload("residual_layernorm_4096x1024", "LayerNorm(x + r), 4096x1024 fp32",
                 make(lambda: ResidualLayerNorm(1024), (4096, 1024), (4096, 1024))),
        Workload("rmsnorm_4096x1024", "x * rsqrt(mean(x^2) + eps) * w, 4096x1024 fp32",
                 make(lambda: RMSNorm(1024), (4096, 1024))),
        Workload("transpose_4096x4096", "x.t().contiguous(), 4096x4096 fp32",
                 make(Transpose, (4096, 4096))),
    ]


def all_workloads() -> list[Workload]:
    return [_example(n) for n in EXAMPLE_NAMES] + _large_workloads()


def _batched(inputs: tuple[Any, ...], batch: int) -> tuple[Any, ...]:
    """`inputs` with their batch dim (the first) `batch` long: the example's rows repeated
    (each row a fresh draw when the inputs were), so that every model keeps its own input
    kinds (images, token ids, masks)."""
    import torch

    if batch <= 1:
        return inputs
    return tuple(torch.cat([x] * batch) if isinstance(x, torch.Tensor) and x.dim() else x
                 for x in inputs)


def zoo_workloads(size: str, batch: int = 1) -> list[Workload]:
    """The model zoo's whole models (bench/zoo.py) at `size`, named `zoo:<model>`, at the
    zoo's batch 1 or `batch` (named `zoo:<model>:b<batch>`)."""
    spec = importlib.util.spec_from_file_location("fusec_bench_zoo", REPO / "bench" / "zoo.py")
    zoo = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = zoo
    spec.loader.exec_module(zoo)

    def build(entry):
        model, inputs = entry.build(size)
        return model, _batched(inputs, batch)

    def fresh(entry, seed):
        import torch

        rows = [zoo.fresh_inputs(entry, size, seed * 1000 + i) for i in range(batch)]
        return tuple(torch.cat(parts) if isinstance(parts[0], torch.Tensor) and parts[0].dim()
                     else parts[0] for parts in zip(*rows))

    suffix = f":b{batch}" if batch > 1 else ""
    return [Workload(f"zoo:{name}{suffix}", f"{entry.description} ({size}, batch {batch})",
                     lambda entry=entry: build(entry),
                     fresh=lambda seed, entry=entry: fresh(entry, seed))
            for name, entry in zoo.ZOO.items()]


# ---------------------------------------------------------------- measuring


def copy_bandwidth(nbytes: int = 256 << 20, reps: int = 15) -> tuple[float, float]:
    """Host copy bandwidth in bytes/s, counting bytes read + written (numpy copyto, one
    thread): (best, median) of `reps` copies. The floor uses the best: it is what this
    machine can do; the median shows how much other jobs took away during the run."""
    src = np.random.default_rng(0).standard_normal(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    times = []
    for i in range(reps + 2):
        t = time.perf_counter()
        np.copyto(dst, src)
        if i >= 2:  # the first two touch fresh pages
            times.append(time.perf_counter() - t)
    return 2 * nbytes / min(times), 2 * nbytes / statistics.median(times)


def floor_bytes(module: Any, inputs: tuple[Any, ...], outputs: list[Any]) -> int:
    """Bytes that must move: inputs, parameters and buffers read once, outputs written once."""
    seen: set[int] = set()
    total = 0
    for t in [*inputs, *module.parameters(), *module.buffers(), *outputs]:
        if t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    return total


def as_list(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def rel_err(outs: list[Any], refs: list[Any]) -> float:
    """||out - ref|| / ||ref|| over all outputs together, in float64."""
    if len(outs) != len(refs):
        raise ValueError(f"{len(outs)} outputs, expected {len(refs)}")
    num = den = 0.0
    for o, r in zip(outs, refs):
        o = np.asarray(o.detach() if hasattr(o, "detach") else o, dtype=np.float64)
        r = r.detach().numpy()
        if o.shape != r.shape:
            raise ValueError(f"output shape {o.shape}, expected {r.shape}")
        num += float(np.sum((o - r) ** 2))
        den += float(np.sum(r**2))
    return (num / den) ** 0.5


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:200]


def inductor_kernels(codes: list[str]) -> tuple[int, int]:
    """(generated C++ kernels, extern calls) per call, read off the wrapper's call()."""
    cpp = ext = 0
    for src in codes:
        start = src.find("def call(")
        body = src[start:src.find("\nrunner = ", start)] if start >= 0 else ""
        for line in body.splitlines():
            # A call may be a statement or assigned: `buf0 = torch.ops.aten.x.default(...)`.
            s = re.sub(r"^[\w, ]+=\s*", "", line.strip())
            if re.match(r"cpp_fused_\w*\(", s):
                cpp += 1
            elif re.match(r"(extern_kernels\.\w+|torch\.ops\.[\w.]+)\(", s):
                ext += 1
    return cpp, ext


@dataclass
class Result:
    name: str
    description: str
    ms: dict[str, float | None] = field(default_factory=dict)
    ms_min: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    err: dict[str, float | None] = field(default_factory=dict)
    failure: dict[str, str] = field(default_factory=dict)
    compile_s: dict[str, float] = field(default_factory=dict)
    kernels: dict[str, Any] = field(default_factory=dict)
    floor_bytes: int = 0
    floor_ms: float = 0.0
    flops: int = 0
    threads: dict[str, int] = field(default_factory=dict)


def time_variants(
    runners: dict[str, Callable[[], Any]], budget_s: float, rounds: int, warmup_s: float
) -> tuple[dict[str, float], dict[str, float], dict[str, int]]:
    """Median ms, minimum ms and number of timed calls per runner.

    Warm-up, then `rounds` rounds in which each runner makes a block of calls, each call
    timed alone, after one untimed call; a block's size comes from the warm-up's time."""
    estimate = {}
    for name, fn in runners.items():
        # Warm up for a while, not a few calls: on this shared 2-core machine a thread pool
        # that has been idle runs far slower for its first calls (workers asleep or
        # descheduled at the first barrier).
        start, calls = time.perf_counter(), 0
        while calls < 3 or (time.perf_counter() - start < warmup_s and calls < 1000):
            fn()
            calls += 1
        t = time.perf_counter()
        fn()
        estimate[name] = max(time.perf_counter() - t, 1e-6)
    per_block = {n: max(2, min(200, int(budget_s / rounds / e))) for n, e in estimate.items()}
    samples: dict[str, list[float]] = {n: [] for n in runners}
    for _ in range(rounds):
        for name, fn in runners.items():
            fn()  # untimed: the previous block belonged to another variant
            for _ in range(per_block[name]):
                t = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - t)
    return ({n: statistics.median(s) * 1e3 for n, s in samples.items()},
            {n: min(s) * 1e3 for n, s in samples.items()},
            {n: len(s) for n, s in samples.items()})


def bench_workload(w: Workload, args: argparse.Namespace, bw: float) -> Result:
    import torch

    import fusec

    res = Result(w.name, w.description, flops=w.flops)
    model, example = w.build()
    model = model.eval()
    gen = torch.Generator().manual_seed(1234)  # fresh data, not the example's tensors
    inputs = (w.fresh(1234) if w.fresh else
              tuple(torch.randn(x.shape, generator=gen, dtype=x.dtype) for x in example))
    np_inputs = [x.numpy() for x in inputs]
    with torch.no_grad():
        ref = as_list(copy.deepcopy(model).double()(
            *(x.double() if x.is_floating_point() else x for x in inputs)))
        eager_out = as_list(model(*inputs))
    res.err["eager"] = rel_err(eager_out, ref)
    res.floor_bytes = floor_bytes(model, inputs, eager_out)
    res.floor_ms = res.floor_bytes / bw * 1e3

    def eager() -> Any:
        with torch.no_grad():
            return model(*inputs)

    runners: dict[str, Callable[[], Any]] = {"eager": eager}
    res.threads["torch"] = torch.get_num_threads()

    plans = (("fusec", True),) if args.no_unfused else (("fusec", True), ("fusec_unfused", False))
    for variant, fusion in plans:
        try:
            t = time.perf_counter()
            m = fusec.compile(model, *example, target="cpu", fusion=fusion, cache=False)
            res.compile_s[variant] = time.perf_counter() - t
            res.kernels[variant] = len(m.kernels)
            res.threads[variant] = m.num_threads
            res.err[variant] = rel_err(as_list(m(*np_inputs)), ref)
        except Exception as exc:  # a failing workload is a result, not the end of the run
            res.failure[variant] = first_line(exc)
            if args.verbose:
                traceback.print_exc()
            continue
        runners[variant] = lambda m=m: m(*np_inputs)
        if fusion:
            outs = [np.empty(s.shape, s.numpy_dtype) for s in m.signature.outputs]
            runners["fusec_out"] = lambda m=m, outs=outs: m(*np_inputs, out=outs)

    if not args.no_inductor:
        try:
            from torch._inductor.utils import run_and_get_code

            torch._dynamo.reset()
            compiled = torch.compile(model)
            with torch.no_grad():
                t = time.perf_counter()
                out, codes = run_and_get_code(compiled, *inputs)
                res.compile_s["inductor"] = time.perf_counter() - t
            res.err["inductor"] = rel_err(as_list(out), ref)
            cpp, ext = inductor_kernels(codes)
            res.kernels["inductor"] = {"cpp": cpp, "extern": ext, "total": cpp + ext,
                                       "graphs": len(codes)}

            def inductor() -> Any:
                with torch.no_grad():
                    return compiled(*inputs)

            runners["inductor"] = inductor
        except Exception as exc:
            res.failure["inductor"] = first_line(exc)
            if args.verbose:
                traceback.print_exc()

    res.ms, res.ms_min, res.calls = time_variants(runners, args.budget, args.rounds, args.warmup)
    return res


def warm_up_inductor() -> float:
    """Spend Inductor's one-time start-up (imports, compiler probe) on a throwaway function."""
    import torch

    t = time.perf_counter()
    torch.compile(lambda x: torch.sin(x) + 1)(torch.randn(8))
    torch._dynamo.reset()
    return time.perf_counter() - t


# ---------------------------------------------------------------- reporting


def machine() -> dict[str, Any]:
    model = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
    except OSError:
        pass
    return {"cpu": model, "cores_available": len(os.sched_getaffinity(0)), "memory": mem,
            "python": platform.python_version(), "platform": platform.platform()}


def git_state() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=10).stdout
        return f"{head} (+{len(dirty.splitlines())} uncommitted paths)" if dirty else head
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _ms(r: Result, v: str) -> str:
    if v in r.failure:
        return f"FAILED: {r.failure[v]}"
    x = r.ms.get(v)
    return "-" if x is None else f"{x:.3f}"


def _ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:.2f}x" if num and den else "-"


def _err(r: Result, v: str) -> str:
    e = r.err.get(v)
    if e is None:
        return "-"
    return f"{e:.1e}" + ("!" if v.startswith("fusec") and e > TOLERANCE else "")


COLUMNS = ["workload", "eager ms", "Inductor ms", "fusec ms", "fusec out= ms",
           "fusec unfused ms", "fusec speed vs eager", "fusec speed vs Inductor",
           "kernels fusec / unfused / Inductor (cpp+extern)", "floor ms", "fusec % of floor",
           "Inductor % of floor", "err fusec / unfused / eager", "compile s fusec / Inductor"]


def table_rows(results: list[Result]) -> list[list[str]]:
    rows = []
    for r in results:
        ind = r.kernels.get("inductor")
        ind_k = f"{ind['total']} ({ind['cpp']}+{ind['extern']})" if ind else "-"
        fus = r.ms.get("fusec")
        rows.append([
            r.name, _ms(r, "eager"), _ms(r, "inductor"), _ms(r, "fusec"), _ms(r, "fusec_out"),
            _ms(r, "fusec_unfused"),
            _ratio(r.ms.get("eager"), fus), _ratio(r.ms.get("inductor"), fus),
            f"{r.kernels.get('fusec', '-')} / {r.kernels.get('fusec_unfused', '-')} / {ind_k}",
            f"{r.floor_ms:.3f}",
            f"{100 * r.floor_ms / fus:.0f}" if fus else "-",
            f"{100 * r.floor_ms / r.ms['inductor']:.0f}" if r.ms.get("inductor") else "-",
            f"{_err(r, 'fusec')} / {_err(r, 'fusec_unfused')} / {_err(r, 'eager')}",
            " / ".join(f"{r.compile_s[v]:.1f}" if v in r.compile_s else "-"
                       for v in ("fusec", "inductor")),
        ])
    return rows


def markdown(results: list[Result]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(results)]
    return "\n".join(lines)


def gflops_table(results: list[Result]) -> str:
    """GFLOP/s of every variant, for the workloads that count their flops (matmuls)."""
    rows = [r for r in results if r.flops]
    if not rows:
        return ""
    names = [v for v in VARIANTS if any(r.ms.get(v) for r in rows)]
    lines = ["| workload | " + " | ".join(f"{v} GFLOP/s" for v in names) + " |",
             "|" + " --- |" * (len(names) + 1)]
    for r in rows:
        cells = [f"{r.flops / (r.ms[v] * 1e-3) / 1e9:.1f}" if r.ms.get(v) else "-"
                 for v in names]
        lines.append(f"| {r.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", help="workload names to run (default: all)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--budget", type=float, default=2.0,
                   help="seconds of timed calls per variant and workload (default 2)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--warmup", type=float, default=0.5,
                   help="seconds of warm-up calls per variant (default 0.5)")
    p.add_argument("--quick", action="store_true",
                   help="short timing: --budget 0.1 --rounds 2 --warmup 0.05")
    p.add_argument("--no-inductor", action="store_true", help="skip torch.compile")
    p.add_argument("--zoo", choices=("small", "full"),
                   help="the model zoo's whole models (bench/zoo.py) at this size instead")
    p.add_argument("--batch", type=int, default=1,
                   help="with --zoo: the batch size (the zoo's inputs are batch 1; their rows "
                   "are drawn this many times; named zoo:<model>:b<batch>)")
    p.add_argument("--no-unfused", action="store_true", help="skip fusec's unfused plan")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failures")
    args = p.parse_args(argv)
    if args.quick:
        args.budget, args.rounds, args.warmup = 0.1, 2, 0.05

    # Before any artifact is loaded: the runtime's thread pool reads it on the first run.
    os.environ["FUSEC_NUM_THREADS"] = str(args.threads)
    # Compile times are measured cold: private caches for fusec and Inductor.
    scratch = tempfile.mkdtemp(prefix="fusec-bench-")
    os.environ["FUSEC_CACHE_DIR"] = os.path.join(scratch, "fusec")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(scratch, "inductor")
    import torch

    torch.set_num_threads(args.threads)

    workloads = zoo_workloads(args.zoo, args.batch) if args.zoo else all_workloads()
    if args.only:
        def named(w: Workload) -> set[str]:  # a zoo model by its name alone, too
            return {w.name, w.name.removeprefix("zoo:")}

        unknown = set(args.only) - set().union(*(named(w) for w in workloads))
        if unknown:
            p.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
        workloads = [w for w in workloads if named(w) & set(args.only)]

    info = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "machine": machine(), "threads": args.threads, "torch": torch.__version__,
        "fusec_commit": git_state(), "budget_s": args.budget, "rounds": args.rounds,
        "warmup_s": args.warmup,
        # Other jobs share this machine: its load says how much the timings can be trusted.
        "loadavg_1_5_15_start": list(os.getloadavg()),
        "tolerance": TOLERANCE,
    }
    bw, bw_median = copy_bandwidth()
    info["copy_bandwidth_GBps"] = bw / 1e9
    info["copy_bandwidth_median_GBps"] = bw_median / 1e9
    if not args.no_inductor:
        info["inductor_startup_s"] = warm_up_inductor()
    print(f"# {info['date_utc']} UTC, {info['machine']['cpu']}, "
          f"{info['machine']['cores_available']} cores, {info['machine']['memory']}; "
          f"threads {args.threads} (torch.set_num_threads and FUSEC_NUM_THREADS); "
          f"torch {torch.__version__}; fusec {info['fusec_commit']}; "
          f"copy bandwidth {bw / 1e9:.1f} GB/s (best of 15; median {bw_median / 1e9:.1f}); "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)

    results = []
    for w in workloads:
        print(f"# {w.name}: {w.description}", file=sys.stderr, flush=True)
        r = bench_workload(w, args, bw)
        results.append(r)
        print(f"#   {' '.join(f'{k}={v:.3f}ms' for k, v in r.ms.items())} "
              f"failures={r.failure}", file=sys.stderr, flush=True)
    info["loadavg_1_5_15_end"] = list(os.getloadavg())
    print(f"# load average at the end {info['loadavg_1_5_15_end'][0]:.1f}; "
          f"'!' marks a fusec error above {TOLERANCE:g}")
    print(markdown(results))
    flops = gflops_table(results)
    if flops:
        print()
        print(flops)
    failures = [(r.name, v, f) for r in results for v, f in r.failure.items()]
    wrong = [(r.name, v, r.err[v]) for r in results for v in ("fusec", "fusec_unfused")
             if r.err.get(v) is not None and r.err[v] > TOLERANCE]
    for name, v, f in failures:
        print(f"FAILED {name} {v}: {f}")
    for name, v, e in wrong:
        print(f"WRONG {name} {v}: rel err {e:.2e} > {TOLERANCE:g}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"info": info, "results": [r.__dict__ for r in results]}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
