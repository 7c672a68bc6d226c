"""Fuzzing the data-movement kernel family (compiler/targets/cuda/movement.py) through the
whole pipeline: random chains of permutes, transposes, slices (with steps), concats, pads,
flips, repeat_interleave, expands, flattens, index_selects (ids as an input: the index check
path) and elementwise ops, on random shapes (ragged dims, unit dims, powers of two), bf16 and
fp32, built here, run on the H200.

    python test/gpu/fuzz_movement.py build DIR [--examples N] [--seed S]   here
    python3 test/gpu/fuzz_movement.py run DIR                              on the H200

`build` writes DIR/mvfz/pNNN.so and index.json (each program's source, input shapes,
dtype, input seed, kernels and paths). `run` draws each program's inputs from its seed
(torch's CPU generator: the values `build` compiled against), computes the float64
reference, runs the artifact and compares by relative norm error: data movement alone must
be exact; with elementwise ops in bf16 the tolerance is 2e-2 or ten times torch's own bf16
error, in fp32 1e-6. Exit 1 on any mismatch. Under `compute-sanitizer` for memcheck /
racecheck.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MAX_NUMEL = 1 << 21


def _dim(rng: np.random.Generator) -> int:
    r = rng.random()
    if r < 0.15:
        return 1
    if r < 0.5:
        return int(rng.choice([8, 16, 32, 64, 128]))
    return int(rng.integers(2, 70))


def draw(rng: np.random.Generator, index: int) -> dict:
    """One program: its source and input shapes (shapes followed with meta tensors)."""
    import torch

    rank = int(rng.integers(2, 5))
    shape = [_dim(rng) for _ in range(rank)]
    while int(np.prod(shape)) > MAX_NUMEL // 4:
        shape[int(np.argmax(shape))] //= 2
    dtype = "bfloat16" if rng.random() < 0.6 else "float32"
    inputs = {"x": ("float", list(shape))}
    lines = []
    y = torch.empty(shape, device="meta")
    pure = True
    for _ in range(int(rng.integers(1, 5))):
        r = len(y.shape)
        kind = rng.choice(["permute", "transpose", "slice", "concat", "pad", "flip", "repeat",
                           "expand", "flatten", "select", "elementwise", "add", "reduce"])
        d = int(rng.integers(0, r))
        if kind == "permute":
            line = f"y = y.permute({tuple(int(p) for p in rng.permutation(r))})"
        elif kind == "transpose":
            line = f"y = y.transpose({d}, {int(rng.integers(0, r))})"
        elif kind == "slice":
            n = y.shape[d]
            a = int(rng.integers(0, max(1, n // 2)))
            b = int(rng.integers(a + 1, n + 1))
            step = int(rng.choice([1, 1, 2, 3]))
            line = f"y = y[{':, ' * d}{a}:{b}:{step}]"
        elif kind == "concat":
            other = "y * 2.0" if rng.random() < 0.5 else f"z{len(inputs)}"
            if other.startswith("z"):
                inputs[other] = ("float", list(y.shape))
            else:
                pure = False
            line = f"y = torch.cat([y, {other}], dim={d})" if rng.random() < 0.5 else \
                f"y = torch.cat([{other}, y], dim={d})"
        elif kind == "pad":
            pads = tuple(int(rng.integers(0, 3)) for _ in range(2 * min(2, r)))
            line = f"y = F.pad(y, {pads})"
        elif kind == "flip":
            line = f"y = torch.flip(y, ({d},))"
        elif kind == "repeat":
            line = f"y = y.repeat_interleave({int(rng.integers(2, 4))}, dim={d})"
        elif kind == "expand":
            sizes = [-1] * (r + 1)
            sizes[d] = int(rng.integers(2, 5))
            line = f"y = y.unsqueeze({d}).expand({tuple(sizes)})"
        elif kind == "flatten":
            if r < 2 or d == r - 1:
                continue
            line = f"y = y.flatten({d}, {d + 1})"
        elif kind == "select":
            name = f"ids{len(inputs)}"
            inputs[name] = ("ids", [int(rng.integers(1, 2 * y.shape[d] + 2))], int(y.shape[d]))
            line = f"y = torch.index_select(y, {d}, {name})"
        elif kind == "reduce":  # over a dim that is not the last (the lanes' loop)
            if r < 2 or d == r - 1:
                continue
            pure = False
            line = f"y = y.sum(dim={d})" if rng.random() < 0.5 else f"y = y.amax(dim={d})"
        elif kind == "elementwise":
            pure = False
            line = "y = torch.sigmoid(y) * 1.5 - 0.25" if rng.random() < 0.5 else "y = y * 0.5"
        else:
            name = f"z{len(inputs)}"
            inputs[name] = ("float", list(y.shape))
            pure = False
            line = f"y = y + {name}"
        scope = {"torch": torch, "F": _f(), "y": y}
        for k, spec in inputs.items():
            if k != "x":
                scope[k] = torch.zeros(spec[1], dtype=torch.int64, device="meta") \
                    if spec[0] == "ids" else torch.empty(spec[1], device="meta")
        exec(line, scope)  # noqa: S102 - our own generated program
        if scope["y"].numel() > MAX_NUMEL or scope["y"].numel() == 0:
            continue
        y = scope["y"]
        lines.append(line)
    if not lines:
        lines.append("y = y.transpose(0, 1)")
    names = list(inputs)
    src = (f"def program({', '.join(names)}):\n    y = x\n" +
           "".join(f"    {line}\n" for line in lines) + "    return y\n")
    return {"name": f"p{index:03d}", "source": src, "inputs": [inputs[k] for k in names],
            "dtype": dtype, "pure": pure}


def _f():
    import torch.nn.functional as F  # noqa: N812

    return F


def _function(source: str):
    import torch

    scope = {"torch": torch, "F": _f()}
    exec(source, scope)  # noqa: S102 - our own generated program
    return scope["program"]


def make_inputs(spec: dict, device: str) -> list:
    """The program's inputs from its seed (torch's CPU generator: the same values here and
    on the H200); ids in range."""
    import torch

    gen = torch.Generator().manual_seed(spec["seed"])
    dtype = getattr(torch, spec["dtype"])
    xs = []
    for s in spec["inputs"]:
        if s[0] == "ids":
            xs.append(torch.randint(0, s[2], s[1], generator=gen).to(device))
        else:
            xs.append(torch.randn(s[1], generator=gen).to(dtype).to(device))
    return xs


def build(out_dir: Path, examples: int, seed: int) -> None:
    from fusec.compiler import driver
    from fusec.compiler.frontend import import_torch
    from fusec.compiler.pipeline import CompileOptions

    folder = out_dir / "mvfz"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    spec_ = importlib.util.spec_from_file_location("fusec_bench_gpu", ROOT / "bench" / "gpu.py")
    bench = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(bench)
    index = []
    for i in range(examples):
        spec = draw(rng, i)
        spec["seed"] = seed * 1000 + i
        fn = _function(spec["source"])
        xs = make_inputs(spec, "cpu")
        entry = dict(spec)
        try:
            with driver.quiet_torch_logs():
                text = import_torch(bench.Wrap(fn).eval(), *xs)
            meta = driver.compile_text(text, f"<{spec['name']}>",
                                       CompileOptions(target="cuda", model_name=spec["name"]),
                                       str(folder / f"{spec['name']}.so"))
            entry["paths"] = [k["info"].get("path") for k in meta["kernels"]]
            entry["shapes"] = [k["info"].get("shape") for k in meta["kernels"]]
        except Exception as e:  # noqa: BLE001 - a refusal is a result, recorded
            entry["refused"] = str(e).splitlines()[0][:300]
        index.append(entry)
        print(spec["name"], entry.get("paths", entry.get("refused")), flush=True)
    (folder / "index.json").write_text(json.dumps(index, indent=1))
    paths = [p for e in index for p in e.get("paths", [])]
    print(f"built {len(index)} programs: {paths.count('movement')} movement kernels, "
          f"{paths.count('fallback')} fallback kernels, {paths.count('fast')} fast; "
          f"{sum('refused' in e for e in index)} refused")


def run(out_dir: Path) -> int:
    import torch

    from fusec import runtime

    folder = out_dir / "mvfz"
    index = json.loads((folder / "index.json").read_text())
    bad = ran = 0
    worst = 0.0
    for entry in index:
        if "refused" in entry:
            continue
        xs = make_inputs(entry, "cuda")
        fn = _function(entry["source"])
        ref = fn(*[x.double() if x.is_floating_point() else x for x in xs]).double()
        own = fn(*xs).double()
        norm = float(ref.norm())
        own_err = float((own - ref).norm()) / norm if norm > 0 else 0.0
        if entry["pure"]:
            tolerance = 0.0
        elif entry["dtype"] == "float32":
            tolerance = 1e-6
        else:
            tolerance = max(2e-2, 10 * own_err)
        model = runtime.load(str(folder / f"{entry['name']}.so"))
        out = model(*xs)
        out = out[0] if isinstance(out, (list, tuple)) else out
        torch.cuda.synchronize()
        diff = float((out.double().reshape(ref.shape) - ref).norm())
        err = diff / norm if norm > 0 else diff
        ran += 1
        worst = max(worst, err / tolerance if tolerance else (0.0 if err == 0 else float("inf")))
        if not err <= tolerance:
            bad += 1
            print(f"MISMATCH {entry['name']} err {err:.3e} > {tolerance:.1e} "
                  f"paths {entry['paths']}\n{entry['source']}", flush=True)
    paths = [p for e in index for p in e.get("paths", [])]
    print(f"movement fuzz: {ran} programs run ({paths.count('movement')} movement kernels), "
          f"{bad} mismatches, worst error / tolerance {worst:.2f}")
    return 1 if bad else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["build", "run"])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.mode == "build":
        build(args.dir, args.examples, args.seed)
        sys.exit(0)
    sys.exit(run(args.dir))
