"""Row argmax / argmin and boolean any / all on the H200, through fusec's whole pipeline:
the row emitter's (value, index) fold (`emitter.PendingArgReduction`) and its i1 combiners,
against float64 torch, eager and Inductor.

    python test/gpu/arg_reductions.py build DIR     here: DIR/arg/<case>.so, cases.json
    python3 test/gpu/arg_reductions.py run DIR      the H200: each case twice on fresh random
                                                    inputs with NaNs, ties, rows of -inf and
                                                    ragged row ends put in (indices and bools
                                                    must equal torch's exactly, values to
                                                    float64's), the kernel counts, then
                                                    times (CUDA events, medians) beside
                                                    eager and Inductor, and the HBM floor.
    python3 test/gpu/arg_reductions.py check DIR    numerics only (compute-sanitizer)

Exit 1 on any mismatch, on kernels on other paths than the case expects, or on a kernel
count that differs from the build's.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
f32, bf16 = torch.float32, torch.bfloat16

# name -> (function, input (shape, dtype), what it stands for, the kernels' paths expected).
# A long row over few rows splits into partials and a combine (`--fusion-split-reductions`,
# as sums do); a long row over many rows (more than 16 chunks a thread: an odd length read a
# lane at a time) stays on the fallback path: checked here for its numerics, and so that
# the day it moves shows.
CASES = {
    "argmax_rows_f32": (lambda x: x.argmax(-1), ((4096, 1000), f32),
                        "argmax over rows whose end is a partial vector chunk", ["fast"]),
    "max_dim_f32": (lambda x: x.max(-1), ((8192, 4096), f32),
                    "torch.max(dim): values and indices from one fold", ["fast"]),
    "argmin_rows_bf16": (lambda x: x.argmin(-1), ((4096, 4096), bf16),
                         "argmin of bf16 rows", ["fast"]),
    "argmin_odd_bf16": (lambda x: x.argmin(-1), ((4096, 4099), bf16),
                        "argmin of bf16 rows of odd length (too long a row for registers)",
                        ["fallback"]),
    "argmax_vocab_f32": (lambda x: x.argmax(-1), ((64, 50257), f32),
                         "greedy decoding: argmax over GPT-2's vocabulary (split in 29)",
                         ["fast", "fast"]),
    "argmax_whole_f32": (lambda x: x.argmax(), ((4096, 4096), f32),
                         "argmax of a whole tensor (split into partials)", ["fast", "fast"]),
    "seg_argmax_c21_f32": (lambda x: x.argmax(1), ((4, 21, 256, 256), f32),
                           "segmentation: argmax over 21 classes of NCHW logits", ["movement"]),
    "seg_argmax_c150_bf16": (lambda x: x.argmax(1), ((2, 150, 128, 128), bf16),
                             "segmentation: argmax over 150 classes (a loop per pixel)",
                             ["movement"]),
    "col_max_f32": (lambda x: x.max(0), ((4096, 1024), f32),
                    "max(dim=0): values and indices of columns", ["movement"]),
    "argmax_softmax_f32": (lambda x: (torch.softmax(x, -1), x.argmax(-1)), ((2048, 2048), f32),
                           "a softmax and the argmax of its row in one kernel", ["fast"]),
    "any_rows_f32": (lambda x: (x > 3.5).any(-1), ((8192, 1024), f32),
                     "any() over rows (i1 or-fold)", ["fast"]),
    "all_rows_f32": (lambda x: (x > -3.5).all(-1), ((8192, 1024), f32),
                     "all() over rows (i1 and-fold)", ["fast"]),
    "all_whole_f32": (lambda x: (x > -5.5).all(), ((4096, 4096), f32),
                      "all() of a whole tensor (split into partials)", ["movement", "fast"]),
}


def _bench():
    spec = importlib.util.spec_from_file_location("fusec_bench_gpu", ROOT / "bench" / "gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _input(name: str, seed: int, device: str = "cuda") -> torch.Tensor:
    """Fresh random values with the cases that decide an argmax or a fold put in: NaNs (two
    in a row: the first one's index; one as a row's last element), tied extremes (the first
    index), a row of -inf (index 0), a row of +inf, rows entirely above / below a bool
    threshold, and (trial by trial) one far outlier for the whole-tensor fold."""
    shape, dtype = CASES[name][1]
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape, device=device, generator=g)
    rows, cols = shape[0], shape[-1]
    pick = torch.randint(0, cols, (8,), device=device, generator=g).tolist()
    if name.startswith("seg_"):  # [N, C, H, W]: per pixel, over C
        x[0, 3, 5, 7] = x[0, 9, 5, 7] = float("nan")  # the first NaN's class
        x[1, :, 0, 0] = float("-inf")  # class 0
        x[1, 2, 1, 1] = x[1, 7, 1, 1] = x.abs().max() + 1  # tied: the first
        x[0, -1, -1, -1] = float("nan")  # the last class of the last pixel
        return x.to(dtype)
    if name == "col_max_f32":
        x[5, 3] = x[900, 3] = float("nan")
        x[:, 4] = float("-inf")
        x[7, 5] = x[3000, 5] = x.abs().max() + 1
        return x.to(dtype)
    if name == "argmax_whole_f32":
        x[rows // 3, pick[0]] = x[rows // 2, pick[1]] = x.abs().max() + 1  # tied: the first
        if seed % 2:
            x[rows - 1, pick[2]] = float("nan")
    elif name.startswith(("argmax", "argmin", "max_dim")):
        x[0, pick[0]] = x[0, max(pick[1], pick[0] + 1) % cols] = float("nan")
        x[1, cols - 1] = float("nan")
        top = x[2].abs().max() + 1
        x[2, pick[2]] = x[2, pick[3]] = top
        x[2, pick[4]] = x[2, pick[5]] = -top
        x[3] = float("-inf")
        x[4] = float("inf")
        x[5, 0] = float("nan")
        x[6] = 0.0  # all tied: index 0
    elif name.startswith(("any", "all_rows")):
        x[0] = 0.0
        x[1] = 10.0
        x[2] = -10.0
    elif name.startswith("all_whole") and seed % 2:
        x[rows // 2, pick[0]] = -10.0
    return x.to(dtype)


def build(out_dir: Path, only: list[str] | None = None) -> dict:
    from fusec.compiler import driver
    from fusec.compiler.frontend import import_torch
    from fusec.compiler.pipeline import CompileOptions

    Wrap = _bench().Wrap
    folder = out_dir / "arg"
    folder.mkdir(parents=True, exist_ok=True)
    report = {}
    for name, (fn, _, desc, _) in CASES.items():
        if only and name not in only:
            continue
        with driver.quiet_torch_logs():
            text = import_torch(Wrap(fn), _input(name, 0, "cpu"))
        t0 = time.perf_counter()
        meta = driver.compile_text(text, f"<arg {name}>",
                                   CompileOptions(target="cuda", model_name=name),
                                   str(folder / f"{name}.so"))
        report[name] = {"description": desc, "compile_s": round(time.perf_counter() - t0, 3),
                        "kernels": len(meta["kernels"]),
                        "paths": [k["info"].get("path") for k in meta["kernels"]],
                        "shapes": [k["info"].get("shape") for k in meta["kernels"]]}
        print(name, json.dumps(report[name]), flush=True)
    (folder / "cases.json").write_text(json.dumps(report, indent=1))
    return report


def _outputs(result) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for t in result]


def _compare(outs: list[torch.Tensor], refs: list[torch.Tensor], bench) -> tuple[bool, float]:
    """Indices and bools equal; floating values NaN where the reference is, else within
    1e-6 relative (a max or a softmax of the same values)."""
    ok, worst = True, 0.0
    for out, ref in zip(outs, refs):
        out = out.cpu()
        ref = ref.cpu()
        if not ref.is_floating_point():
            ok = ok and out.shape == ref.shape and bool(torch.equal(out.to(ref.dtype), ref))
            continue
        # NaN and infinities where the reference has them (a row of +inf's max), the
        # finite values within 1e-6 relative.
        finite = ref.isfinite()
        same = torch.equal(out.isnan(), ref.isnan()) and \
            torch.equal(out.double()[ref.isinf()], ref[ref.isinf()])
        err = bench.rel_err(torch.where(finite, out.double(), 0), torch.where(finite, ref, 0))
        worst = max(worst, err)
        ok = ok and same and err < 1e-6
    return ok, worst


def check(art_dir: Path, names: list[str]) -> list[dict]:
    bench = _bench()
    rows = []
    for name in names:
        fn = CASES[name][0]
        model = bench.FusecModel(art_dir / "arg" / f"{name}.so")
        row = {"name": name, "ok": True, "err": 0.0}
        for trial in range(2):
            x = _input(name, int(time.time_ns() % 2**31) + trial)
            outs = model.outputs_like("cuda")
            for o in outs:
                o.fill_(float("nan") if o.is_floating_point() else 7)
            model.bind([x], outs)()
            torch.cuda.synchronize()
            refs = _outputs(fn(x.double()))
            ok, err = _compare(outs, refs, bench)
            row["ok"] = row["ok"] and ok
            row["err"] = max(row["err"], err)
        row["kernels"] = model.kernels
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def run(art_dir: Path, names: list[str]) -> int:
    bench = _bench()
    built = json.loads((art_dir / "arg" / "cases.json").read_text())
    rows = check(art_dir, names)
    ok = True
    for row in rows:
        name = row["name"]
        fn = CASES[name][0]
        paths = built[name]["paths"]
        row["ok"] = row["ok"] and paths == CASES[name][3] and \
            row["kernels"] == built[name]["kernels"]
        ok = ok and row["ok"]
        x = _input(name, 1)
        model = bench.FusecModel(art_dir / "arg" / f"{name}.so")
        out = model.outputs_like("cuda")
        ind = torch.compile(fn)
        ind(x)
        times = {"fusec": bench.time_ms(model.bind([x], out), 50),
                 "eager": bench.time_ms(lambda: fn(x), 50),
                 "inductor": bench.time_ms(lambda: ind(x), 50)}
        moved = x.numel() * x.element_size() + sum(o.numel() * o.element_size() for o in out)
        floor = moved / bench.copy_bandwidth() * 1e3
        row.update({"paths": paths, "gpu_kernels_fusec": bench.count_kernels(model.bind([x], out)),
                    "kernels_eager": bench.count_kernels(lambda: fn(x)),
                    "kernels_inductor": bench.count_kernels(lambda: ind(x)),
                    "ms": {k: round(v, 4) for k, v in times.items()},
                    "hbm_floor_ms": round(floor, 4),
                    "floor_fraction": round(floor / times["fusec"], 3),
                    "vs_best_of_eager_inductor": round(
                        min(times["eager"], times["inductor"]) / times["fusec"], 3)})
        print(json.dumps(row), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    names = sys.argv[3:] or list(CASES)
    if mode == "build":
        build(folder, sys.argv[3:] or None)
        sys.exit(0)
    if mode == "check":
        sys.exit(0 if all(r["ok"] for r in check(folder, names)) else 1)
    sys.exit(run(folder, names))
