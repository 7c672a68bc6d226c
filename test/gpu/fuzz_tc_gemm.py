"""Fuzzing the tensor-core GEMM family through the whole pipeline: random matmuls (shapes on
and off the 128 x 128 x 64 tile, ragged M, N and K, both B layouts, bf16 and f16) with random
epilogue chains after them (bias, residual, row and column broadcasts, scalars, activations,
values read twice, row reshapes, a cast to f32), built here, run on the H200.

    python test/gpu/fuzz_tc_gemm.py build DIR [--examples N] [--seed S]   here
    python3 test/gpu/fuzz_tc_gemm.py run DIR                              on the H200

With `--siblings`, each program is two to four matmuls of one x (q, k and v projections),
each with its own epilogue steps and output (some Ns ragged, so that some siblings stay
apart): one kernel of sibling GEMMs where the planner merges them (gemm_siblings.py); every
output is compared.

With `--schedule tiles`, every GEMM is ours on the one-warpgroup kernel with a tile drawn
per program from `gemm_cost.TC_GEMM_TILES`, 2-4 stages and, for about half, split-K into 2,
3, 4 or 8 (`gemm_cost.tc_gemm_tile` patched in this process; half the Ks long): every tile
the table offers `--tune`, on both B layouts, not only the model's choices (RESULTS run 252
found the 128 x 64 tile over a K x N B wrong, which the model never chose).

With `--schedule ping-pong` or `cooperative` (both modes) every GEMM is built on that
persistent schedule (`--cuda-gemm-schedule`; and ours wherever it takes the matmul,
whatever the cost model predicts for cuBLASLt: `gemm_cost.prefer_tc_gemm` patched in this process), and the
shapes are drawn with at least as many 128 x 128 tiles (cooperative: 256 x 128) as the
H200 has SMs (with fewer the schedule is not used): M ragged by up to 99 rows,
N any multiple of 4, K ragged or long (the ring of stages then wraps within and across
tiles); written to DIR/tcfz_ping-pong (DIR/tcfz_cooperative).

`build` writes DIR/tcfz/pNNN.so (the planner's choice: our kernel where predicted faster,
cuBLASLt otherwise; both must be right) and index.json (each program's source, shapes,
dtype, input seed, kernels and paths). `run` draws each program's inputs from its seed
(torch's CPU generator: the values `build` compiled against), computes the float64
reference and torch's own 16-bit result on the GPU, runs the artifact and compares by
relative norm error with the tolerance (2e-2, or ten times torch's own 16-bit error when
that is larger). Exit 1 on any
mismatch. Under `compute-sanitizer` for memcheck / racecheck.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

# Epilogue steps: (source with {y} the value so far, the extra inputs it reads: "bias" [N],
# "res" [M, N], "row" [M, 1]).
STEPS = [
    ("{y} + bias", ["bias"]),
    ("{y} + res", ["res"]),
    ("res - {y}", ["res"]),
    ("{y} * row", ["row"]),
    ("{y} * bias", ["bias"]),
    ("{y} * 0.125", []),
    ("torch.relu({y})", []),
    ("F.gelu({y})", []),
    ("F.gelu({y}, approximate='tanh')", []),
    ("F.silu({y})", []),
    ("torch.sigmoid({y})", []),
    ("torch.tanh({y})", []),
    ("torch.clamp({y}, -0.5, 0.75)", []),
    ("{y} * {y}", []),
    ("{y} + torch.exp(-{y} * {y})", []),
]


# How a pair's two products meet (`--pairs`: SwiGLU's and GEGLU's gates, and others), with the
# extra inputs the join reads.
JOINS = [
    ("F.silu({g}) * {u}", []),
    ("F.gelu({g}) * {u}", []),
    ("F.gelu({g}, approximate='tanh') * {u}", []),
    ("{g} * torch.sigmoid({u})", []),
    ("{g} + {u}", []),
    ("({g} + bias) * {u}", ["bias"]),
    ("torch.relu({g}) * ({u} + res)", ["res"]),
]


SMS = 132  # the H200's (and the H100's) SMs: the ping-pong schedule wants as many tiles


def draw_siblings(rng: np.random.Generator, index: int, schedule: str = "model") -> dict:
    """Two to four matmuls of one x, each with up to two epilogue steps, all returned."""
    count = int(rng.integers(2, 5))
    ns = [int(rng.integers(1, 5)) * 128 if rng.random() < 0.7 else
          int(rng.integers(1, 130)) * 4 for _ in range(count)]
    if schedule in ("ping-pong", "cooperative"):
        bm = 256 if schedule == "cooperative" else 128
        col_tiles = sum(-(-n // 128) for n in ns)
        m = (-(-SMS // col_tiles) + int(rng.integers(0, 4))) * bm - \
            int(rng.integers(0, 100 if bm == 128 else 200))
        k = int(rng.integers(1, 80)) * 8
    elif rng.random() < 0.25:  # decode-sized: few rows, a long K (cuBLASLt's alone)
        m = int(rng.integers(1, 65))
        k = int(rng.integers(16, 65)) * 64
    else:
        m = int(rng.integers(1, 700))
        k = int(rng.integers(1, 80)) * 8
    dtype = "bfloat16" if rng.random() < 0.7 else "float16"
    layout = "nk" if rng.random() < 0.7 else "kn"
    inputs: dict = {"x": (m, k)}
    lines = []
    for j, n in enumerate(ns):
        inputs[f"w{j}"] = (n, k) if layout == "nk" else (k, n)
        lines.append(f"y{j} = F.linear(x, w{j})" if layout == "nk" else f"y{j} = x @ w{j}")
        for _ in range(int(rng.integers(0, 3))):
            step, extra = STEPS[int(rng.integers(0, len(STEPS)))]
            lines.append(f"y{j} = " + step.format(y=f"y{j}").replace("bias", f"bias{j}")
                         .replace("res", f"res{j}"))
            for name in extra:
                inputs[name if name == "row" else f"{name}{j}"] = \
                    {"bias": (n,), "res": (m, n), "row": (m, 1)}[name]
    names = list(inputs)
    src = (f"def program({', '.join(names)}):\n" + "".join(f"    {line}\n" for line in lines) +
           f"    return {', '.join(f'y{j}' for j in range(count))}\n")
    return {"name": f"p{index:03d}", "source": src, "inputs": [inputs[k_] for k_ in names],
            "dtype": dtype, "weights": [i for i, k_ in enumerate(names) if k_.startswith("w")]}


def draw(rng: np.random.Generator, index: int, schedule: str = "model",
         pairs: bool = False) -> dict:
    """One program: its source, input shapes and dtype; with `pairs`, two matmuls of x (by
    w and w2) joined elementwise (JOINS) before the epilogue steps."""
    # A third of the shapes on whole tiles, the rest ragged (TMA needs K * 2 bytes % 16).
    if schedule in ("ping-pong", "cooperative"):
        bm = 256 if schedule == "cooperative" else 128
        n = int(rng.integers(16, 400)) * 4
        row_tiles = -(-SMS // -(-n // 128)) + int(rng.integers(0, 8))
        m = row_tiles * bm - int(rng.integers(0, 100 if bm == 128 else 200))
        k = int(rng.integers(1, 80)) * 8 if rng.random() < 0.6 else \
            int(rng.integers(8, 48)) * 64
    elif rng.random() < 0.33:
        m, n, k = (int(rng.integers(1, 5)) * 128, int(rng.integers(1, 4)) * 128,
                   int(rng.integers(1, 5)) * 64)
    else:
        m = int(rng.integers(1, 700))
        n = int(rng.integers(1, 130)) * 4
        k = int(rng.integers(1, 80)) * 8
    if schedule == "tiles" and rng.random() < 0.5:  # long K, for split-K's ranges
        k = int(rng.integers(16, 400)) * 8
    dtype = "bfloat16" if rng.random() < 0.7 else "float16"
    layout = "nk" if rng.random() < 0.7 else "kn"
    lines = ["y = F.linear(x, w)" if layout == "nk" else "y = x @ w"]
    inputs = {"x": (m, k), "w": (n, k) if layout == "nk" else (k, n)}
    if pairs:
        inputs["w2"] = inputs["w"]
        lines = ["g = F.linear(x, w)" if layout == "nk" else "g = x @ w",
                 "u = F.linear(x, w2)" if layout == "nk" else "u = x @ w2"]
        join, extra = JOINS[int(rng.integers(0, len(JOINS)))]
        lines.append("y = " + join.format(g="g", u="u"))
        for name in extra:
            inputs[name] = {"bias": (n,), "res": (m, n)}[name]
    for _ in range(int(rng.integers(0, 3 if pairs else 5))):
        step, extra = STEPS[int(rng.integers(0, len(STEPS)))]
        lines.append("y = " + step.format(y="y"))
        for name in extra:
            inputs[name] = {"bias": (n,), "res": (m, n), "row": (m, 1)}[name]
    if m % 4 == 0 and rng.random() < 0.2:  # rows split into batch x sequence
        lines.append(f"y = y.reshape(4, {m // 4}, {n})")
    if rng.random() < 0.15:
        lines.append("y = y.float()")
    names = list(inputs)
    src = (f"def program({', '.join(names)}):\n" + "".join(f"    {line}\n" for line in lines) +
           "    return y\n")
    return {"name": f"p{index:03d}", "source": src, "inputs": [inputs[k_] for k_ in names],
            "dtype": dtype}


def _function(source: str):
    import torch
    import torch.nn.functional as F  # noqa: N812

    scope = {"torch": torch, "F": F}
    exec(source, scope)  # noqa: S102 - our own generated program
    return scope["program"]


def make_inputs(spec: dict, device: str) -> list:
    """The program's inputs, from its seed (torch's CPU generator: the same values here and
    on the H200), unit variance, the weight scaled by 1 / sqrt(K)."""
    import torch

    gen = torch.Generator().manual_seed(spec["seed"])
    dtype = getattr(torch, spec["dtype"])
    xs = []
    weights = spec.get("weights") or ((1, 2) if "w2" in spec["source"] else (1,))
    for j, shape in enumerate(spec["inputs"]):
        scale = 1.0 / np.sqrt(spec["inputs"][0][-1]) if j in weights else 1.0
        xs.append((torch.randn(shape, generator=gen) * scale).to(dtype).to(device))
    return xs


def _folder(out_dir: Path, schedule: str, pairs: bool = False, siblings: bool = False
            ) -> Path:
    return out_dir / (("tcfz" if schedule == "model" else f"tcfz_{schedule}") +
                      ("_pairs" if pairs else "") + ("_siblings" if siblings else ""))


def build(out_dir: Path, examples: int, seed: int, schedule: str = "model",
          pairs: bool = False, siblings: bool = False) -> None:
    from fusec.compiler import driver
    from fusec.compiler.frontend import import_torch
    from fusec.compiler.pipeline import CompileOptions
    from fusec.compiler.targets.cuda.options import CudaOptions

    folder = _folder(out_dir, schedule, pairs, siblings)
    folder.mkdir(parents=True, exist_ok=True)
    if schedule != "model":  # the schedule under test, for every matmul our GEMM takes
        from fusec.passes import gemm_cost

        gemm_cost.prefer_tc_gemm = lambda ours, library: True
    rng = np.random.default_rng(seed)
    index = []
    # bench/gpu.py's Wrap: a function as a module, for fusec's frontend.
    spec = importlib.util.spec_from_file_location("fusec_bench_gpu", ROOT / "bench" / "gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    Wrap = bench.Wrap

    for i in range(examples):
        spec = draw_siblings(rng, i, schedule) if siblings else draw(rng, i, schedule, pairs)
        spec["seed"] = seed * 1000 + i
        if schedule == "tiles":  # the one-warpgroup kernel on a tile of the table, drawn
            from fusec.passes import gemm_cost

            bm, bn = gemm_cost.TC_GEMM_TILES[int(rng.integers(0, len(gemm_cost.TC_GEMM_TILES)))]
            forced = (bm, bn, 64, int(rng.integers(2, 5)))
            # Half of them split-K, where the kernel takes it (every split has k-tiles).
            from fusec.compiler.targets.cuda import wgmma

            m, k = spec["inputs"][0]
            kn = "x @ w" in spec["source"]
            n = spec["inputs"][1][1 if kn else 0]
            problem = wgmma.GemmProblem(m, n, k, b_layout="kn" if kn else "nk")
            split = forced + (0, int(rng.choice([2, 3, 4, 8])))
            if rng.random() < 0.5 and wgmma.refusal(problem, wgmma.GemmTile(*split)) is None:
                forced = split
            spec["tile"] = list(forced)
            gemm_cost.tc_gemm_tile = lambda *args, forced=forced, **kwargs: forced
        fn = _function(spec["source"])
        xs = make_inputs(spec, "cpu")
        entry = dict(spec)
        try:
            with driver.quiet_torch_logs():
                text = import_torch(Wrap(fn).eval(), *xs)
            options = CompileOptions(target="cuda", model_name=spec["name"],
                                     cuda=CudaOptions(gemm_schedule="model" if schedule ==
                                                      "tiles" else schedule))
            meta = driver.compile_text(text, f"<{spec['name']}>", options,
                                       str(folder / f"{spec['name']}.so"))
            entry["paths"] = [k["info"].get("path") for k in meta["kernels"]]
            entry["schedules"] = [k["info"].get("schedule") for k in meta["kernels"]
                                  if k["info"].get("path") == "tc_gemm"]
            entry["epilogue"] = [k["info"].get("epilogue") for k in meta["kernels"]
                                 if k["info"].get("path") == "tc_gemm"]
            entry["pairs"] = sum(1 for k in meta["kernels"] if k["info"].get("pair"))
            entry["siblings"] = [k["info"]["siblings"] for k in meta["kernels"]
                                 if k["info"].get("siblings")]
        except Exception as e:  # noqa: BLE001 - a refusal is a result, recorded
            entry["refused"] = str(e).splitlines()[0][:300]
        index.append(entry)
        print(spec["name"], entry.get("paths", entry.get("refused")), flush=True)
    (folder / "index.json").write_text(json.dumps(index, indent=1))
    tc = sum(1 for e in index if "tc_gemm" in e.get("paths", []))
    name = schedule if schedule not in ("model", "tiles") else "ping-pong"
    on = sum(1 for e in index if name.replace("-", " ") in
             [x.replace("-", " ") for x in e.get("schedules", [])])
    pair_count = sum(1 for e in index if e.get("pairs"))
    merged = sum(1 for e in index if e.get("siblings"))
    print(f"built {len(index)} programs, {tc} with our tensor-core GEMM ({on} on the "
          f"{name} schedule, {pair_count} as one GEMM pair, {merged} with sibling GEMMs "
          f"in one kernel), "
          f"{sum('refused' in e for e in index)} refused")


def run(out_dir: Path, schedule: str = "model", pairs: bool = False,
        siblings: bool = False, limit: int | None = None) -> int:
    """Run the built programs (the first `limit` of them) against float64. With
    FUSEC_TORCH_REFERENCE=0 the float64 reference runs on the CPU and torch's own-dtype
    run is skipped (tolerance 2e-2 flat): under compute-sanitizer only fusec's kernels
    run on the GPU (racecheck reports cuBLAS's own kernels otherwise)."""
    import os

    import torch

    from fusec import runtime

    folder = _folder(out_dir, schedule, pairs, siblings)
    index = json.loads((folder / "index.json").read_text())
    bad = 0
    ran = 0
    worst = 0.0
    on_gpu = os.environ.get("FUSEC_TORCH_REFERENCE", "1") != "0"
    for entry in [e for e in index if "refused" not in e][:limit]:
        xs = make_inputs(entry, "cuda")
        fn = _function(entry["source"])
        refs = fn(*[x.double() if on_gpu else x.cpu().double() for x in xs])
        owns = fn(*xs) if on_gpu else refs
        model = runtime.load(str(folder / f"{entry['name']}.so"))
        outs = model(*xs)
        torch.cuda.synchronize()
        if not isinstance(refs, tuple):
            refs, owns = (refs,), (owns,)
            outs = (outs[0] if isinstance(outs, (list, tuple)) else outs,)
        ran += 1
        failed = False
        for ref, own, out in zip(refs, owns, outs):  # each output on its own
            ref = ref.double().to(out.device)
            norm = float(ref.norm())
            own_err = float((own.double().to(out.device) - ref).norm()) / norm \
                if norm > 0 else 0.0
            tolerance = max(2e-2, 10 * own_err)
            err = float((out.double() - ref).norm()) / norm if norm > 0 else \
                float(out.double().norm())
            worst = max(worst, err / tolerance)
            failed = failed or not err <= tolerance
        if len(outs) != len(refs):
            failed, err, tolerance = True, float("nan"), 0.0
        if failed:
            bad += 1
            print(f"MISMATCH {entry['name']} err {err:.3e} > {tolerance:.1e} "
                  f"paths {entry['paths']}\n{entry['source']}", flush=True)
    tc = sum(1 for e in index if "tc_gemm" in e.get("paths", []))
    pair_count = sum(1 for e in index if e.get("pairs"))
    merged = sum(1 for e in index if e.get("siblings"))
    print(f"tc fuzz: {ran} programs run ({tc} with our tensor-core GEMM, {pair_count} with a "
          f"GEMM pair, {merged} with sibling GEMMs in one kernel), {bad} mismatches, worst "
          f"error / tolerance {worst:.2f}")
    return 1 if bad else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["build", "run"])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--schedule", default="model",
                        choices=["model", "ping-pong", "cooperative", "one-warpgroup", "tiles"])
    parser.add_argument("--pairs", action="store_true",
                        help="two matmuls of one input joined elementwise (GEMM pairs)")
    parser.add_argument("--siblings", action="store_true",
                        help="two to four matmuls of one input, each its own output")
    parser.add_argument("--limit", type=int, default=None,
                        help="run: only the first N programs that built")
    args = parser.parse_args()
    if args.mode == "build":
        build(args.dir, args.examples, args.seed, args.schedule, args.pairs, args.siblings)
        sys.exit(0)
    sys.exit(run(args.dir, args.schedule, args.pairs, args.siblings, args.limit))
