"""The tensor-core GEMM family (compiler/targets/cuda/wgmma.py) on the H200, standalone.

    python bench/tc_gemm.py build DIR     (here: PTX per problem + ptxas -v; no GPU needed)
    python bench/tc_gemm.py run DIR       (on the H200: numerics and time against torch.mm)
    python bench/tc_gemm.py build DIR resnet50   (ResNet-50's GEMMs at batch 1, 3 tiles each)

`run` encodes the TMA maps with the driver (`cuTensorMapEncodeTiled`, through ctypes, as a
runtime would), loads the PTX with `cuModuleLoadData` and launches with `cuLaunchKernel`;
numerics by relative norm error against float64 on fresh random inputs; times are medians
of CUDA-event timings, with torch.mm (cuBLAS) and F.linear in the same process, one launch
at a time and, under `graph`, per launch of GRAPH_LAUNCHES back to back replayed as one CUDA
graph (no host time between them: what a model run with `graph=True` pays).

"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

# (M, N, K, B layout): the two plain shapes, both B layouts, and ragged ones (partial
# M, N and K tiles, through TMA's zero fill and the epilogue's guards).
PROBLEMS = [(8192, 8192, 8192, "nk"), (8192, 4096, 4096, "nk"), (8192, 4096, 4096, "kn"),
            (1000, 520, 264, "nk"), (512, 384, 136, "kn"), (128, 128, 64, "nk"),
            # GPT-2's projections (B8 T1024 d768): out-proj, c_fc, c_proj.
            (8192, 768, 768, "nk"), (8192, 3072, 768, "nk"), (8192, 768, 3072, "nk"),
            # LayerNorm + Linear's shape (issue 14), GPT-2's c_attn (Conv1D: B is K x N).
            (16384, 4096, 4096, "nk"), (8192, 2304, 768, "kn"),
            # LLaMA-7B's SwiGLU gate and up projections as one GEMM (N = 2 x 11008).
            (8192, 22016, 4096, "nk")]
# Schedules built for each problem: one warpgroup per CTA with 4 stages (128 KB of shared
# memory: one CTA per SM) or 3 (96 KB: two CTAs per SM, one's epilogue beside the other's
# main loop); the persistent ping-pong kernel (a producer and two consumer warpgroups, one
# CTA per SM) with 4 stages (5 and the kernel without setmaxnreg measured no faster, run
# 200); its cooperative variant (256 x 128 tiles, both consumers on each) with 3, or 4
# beside a 32-row epilogue buffer per consumer instead of 64.
SCHEDULES = (("s", 4), ("s", 3), ("pp", 4), ("co", 3), ("co", 4))
# ResNet-50's GEMMs at batch 1 (224 x 224, bf16), as fusec's plan gives them (M, N, K, B's
# layout, D's type): the 1x1 convolutions and the channels-last im2col products, the
# products with no epilogue writing f32 for the movement kernel after them. Each is built
# with the one-warpgroup kernel at 128 x 128, 64 x 128 and 128 x 64 (`RESNET50_TILES`).
RESNET50 = [(64, 3136, 64, "kn", "bf16"), (256, 3136, 64, "kn", "f32"),
            (512, 784, 128, "kn", "f32"), (64, 3136, 256, "kn", "bf16"),
            (128, 3136, 256, "kn", "bf16"), (196, 1024, 256, "nk", "f32"),
            (784, 512, 256, "nk", "f32"), (49, 2048, 512, "nk", "f32"),
            (128, 784, 512, "kn", "bf16"), (196, 1024, 512, "nk", "f32"),
            (256, 784, 512, "kn", "bf16"), (3136, 64, 576, "nk", "f32"),
            (49, 2048, 1024, "nk", "f32"), (196, 512, 1024, "nk", "f32"),
            (196, 256, 1024, "nk", "f32"), (784, 128, 1152, "nk", "f32")]
RESNET50_TILES = ((128, 128), (64, 128), (128, 64))
# Small-M, long-K GEMMs (a CTA per 64 x 128 tile leaves most SMs idle), each at 64 x 128 with
# split-K into SPLITK_SPLITS (1: none): GPT-2's and LLaMA's down projections at 128 tokens,
# a decode step's, ResNet-50's late 3x3 im2col products and 1x1s at batch 1 (`build DIR
# splitk`).
SPLITK = [(128, 768, 3072, "nk", "bf16"), (128, 1024, 2816, "nk", "bf16"),
          (16, 4096, 4096, "nk", "bf16"), (1, 768, 3072, "nk", "bf16"),
          (49, 512, 4608, "nk", "f32"), (196, 256, 1024, "nk", "f32"),
          (196, 256, 2304, "kn", "bf16"), (49, 2048, 1024, "nk", "f32")]
SPLITK_SPLITS = (1, 2, 4, 8)
GRAPH_LAUNCHES = 20
SMS = 132  # the H100's and the H200's
# The tiles' order: in groups of wgmma.GROUP_ROWS rows of tiles (the kernels' own), and, as
# `<name>_rows`, row by row (the order before; `build ... rows`).
ORDERS = ("", "_rows")


def build(folder: Path, only: list[str] | None = None) -> None:
    """Every problem x schedule (x order); `only`: problems ("8192x8192x8192_nk"),
    schedules ("co4") and orders ("rows": both orders, else the kernels' own) to keep."""
    from fusec.compiler.targets.cuda import wgmma

    folder.mkdir(parents=True, exist_ok=True)
    only = only or []
    if only == ["resnet50"]:
        _build_resnet50(folder)
        return
    if only == ["splitk"]:
        _build_splitk(folder)
        return
    problems = [p for p in PROBLEMS if not any("x" in o for o in only) or
                f"{p[0]}x{p[1]}x{p[2]}_{p[3]}" in only]
    schedules = [s for s in SCHEDULES if not any(o[:2] in ("s3", "s4", "pp", "co")
                                                 for o in only) or f"{s[0]}{s[1]}" in only]
    orders = ORDERS if "rows" in only else ORDERS[:1]
    manifest = []
    for (m, n, k, layout), (schedule, stages), order in [
            (p, s, o) for p in problems for s in schedules for o in orders]:
        code = {"s": 0, "pp": wgmma.PINGPONG, "co": wgmma.COOPERATIVE}[schedule]
        tile = wgmma.GemmTile(256 if schedule == "co" else 128, stages=stages, schedule=code)
        problem = wgmma.GemmProblem(m, n, k, b_layout=layout)
        name = f"gemm_{m}x{n}x{k}_{layout}_{schedule}{stages}{order}"
        entry = _kernel(folder, name, problem, tile, 1 if order else wgmma.GROUP_ROWS,
                        ptxas=True)
        manifest.append(entry)
        print(name, entry["ptxas"])
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))


def _build_splitk(folder: Path) -> None:
    """SPLITK's problems at 64 x 128, each split of SPLITK_SPLITS the kernel takes."""
    from fusec.compiler.targets.cuda import wgmma

    manifest = []
    for m, n, k, layout, out in SPLITK:
        for splits in SPLITK_SPLITS:
            problem = wgmma.GemmProblem(m, n, k, out_type=out, b_layout=layout)
            tile = wgmma.GemmTile(64, 128, stages=4, splits=splits)
            if wgmma.refusal(problem, tile):
                continue
            name = f"gemm_{m}x{n}x{k}_{layout}_{out}_s{splits}"
            manifest.append(_kernel(folder, name, problem, tile, wgmma.GROUP_ROWS))
            print(name, manifest[-1]["grid"])
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))


def _build_resnet50(folder: Path) -> None:
    """RESNET50's problems x RESNET50_TILES (one warpgroup, as many stages as fit one CTA
    per SM and K has tiles)."""
    from fusec.compiler.targets.cuda import wgmma

    manifest = []
    for m, n, k, layout, out in RESNET50:
        for bm, bn in RESNET50_TILES:
            problem = wgmma.GemmProblem(m, n, k, out_type=out, b_layout=layout)
            tile = wgmma.GemmTile(bm, bn, stages=max(2, min(4, -(-k // 64))))
            if wgmma.refusal(problem, tile):
                continue
            name = f"gemm_{m}x{n}x{k}_{layout}_{out}_t{bm}x{bn}"
            entry = _kernel(folder, name, problem, tile, wgmma.GROUP_ROWS)
            manifest.append(entry)
            print(name, entry["grid"])
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))


def _kernel(folder: Path, name: str, problem, tile, group_rows: int,
            ptxas: bool = False) -> dict:
    """Build one kernel's PTX into `folder` (and, with `ptxas`, its cubin and ptxas -v's
    resource lines) and return its manifest entry."""
    from fusec.compiler.targets.cuda import wgmma

    grid, block, shared = wgmma.launch_geometry(problem, tile, SMS)
    text = wgmma.build_kernel_text(name, problem, tile, SMS, group_rows=group_rows)
    ptx = wgmma.lower(wgmma.gpu_module_text([text]))
    (folder / f"{name}.ptx").write_text(ptx)
    resources = []
    if ptxas:
        done = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(folder / f"{name}.ptx"),
                               "-o", str(folder / f"{name}.cubin")],
                              capture_output=True, text=True)
        resources = [line for line in done.stderr.splitlines()
                     if "Used" in line or "spill" in line]
    return {"name": name, "m": problem.m, "n": problem.n, "k": problem.k,
            "layout": problem.b_layout, "out": problem.out_type, "bm": tile.bm,
            "bn": tile.bn, "bk": tile.bk, "stages": tile.stages, "shared_bytes": shared,
            "grid": grid, "block": block, "ptxas": resources, "splits": tile.splits,
            "split_scratch": list(wgmma.split_scratch(problem, tile))}


def _encode(cuda, pointer: int, rows: int, cols: int, box_rows: int, box_cols: int) -> bytes:
    """A 2-D bf16 tensor map (dims innermost first), 128-byte swizzle, L2 promotion 256 B,
    out-of-range elements read as zeros."""
    out = (ctypes.c_uint8 * 128)()
    dims = (ctypes.c_uint64 * 2)(cols, rows)
    strides = (ctypes.c_uint64 * 1)(cols * 2)
    box = (ctypes.c_uint32 * 2)(box_cols, box_rows)
    elem = (ctypes.c_uint32 * 2)(1, 1)
    bf16, interleave_none, swizzle_128b, l2_256b, oob_zero = 9, 0, 3, 3, 0
    err = cuda.cuTensorMapEncodeTiled(out, bf16, 2, ctypes.c_void_p(pointer), dims, strides,
                                      box, elem, interleave_none, swizzle_128b, l2_256b,
                                      oob_zero)
    if err:
        raise RuntimeError(f"cuTensorMapEncodeTiled: error {err}")
    return bytes(out)


def run(folder: Path, only: str | None = None) -> None:
    """Every problem in a process of its own (a fault in one does not hide the others)."""
    if only is None:
        results = []
        for entry in json.loads((folder / "manifest.json").read_text()):
            try:  # a kernel that hangs (a pipeline's deadlock) costs 60 s, not the run
                done = subprocess.run([sys.executable, __file__, "run", str(folder),
                                       entry["name"]], capture_output=True, text=True,
                                      timeout=60)
            except subprocess.TimeoutExpired:
                print(json.dumps({"name": entry["name"], "error": "timed out (60 s)"}),
                      flush=True)
                continue
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            row = json.loads(lines[-1]) if lines else {
                "name": entry["name"], "error": (done.stderr or done.stdout)[-600:]}
            print(json.dumps(row), flush=True)
            results.append(row)
        (folder / "results.json").write_text(json.dumps(results, indent=1))
        return
    import torch

    cuda = ctypes.CDLL("libcuda.so.1")
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    for entry in json.loads((folder / "manifest.json").read_text()):
        if entry["name"] != only:
            continue
        m, n, k, layout = entry["m"], entry["n"], entry["k"], entry["layout"]
        bm, bn, bk = entry["bm"], entry["bn"], entry["bk"]
        ptx = (folder / f"{entry['name']}.ptx").read_bytes() + b"\0"
        module, function = ctypes.c_void_p(), ctypes.c_void_p()
        assert cuda.cuModuleLoadData(ctypes.byref(module), ptx) == 0
        assert cuda.cuModuleGetFunction(ctypes.byref(function), module,
                                        entry["name"].encode()) == 0
        assert cuda.cuFuncSetAttribute(function, 8, entry["shared_bytes"]) == 0
        # All of the SM's unified L1/shared memory as shared (two CTAs of 97 KB fit).
        assert cuda.cuFuncSetAttribute(function, 9, 100) == 0
        torch.manual_seed(m + n + k)
        a = torch.randn(m, k, device="cuda").bfloat16()
        b = torch.randn(n, k, device="cuda").bfloat16() if layout == "nk" else \
            torch.randn(k, n, device="cuda").bfloat16()
        d = torch.empty(m, n, device="cuda", dtype=getattr(torch, {"bf16": "bfloat16"}.get(
            entry.get("out", "bf16"), "float32")))
        map_a = _encode(cuda, a.data_ptr(), m, k, bm, bk)
        map_b = _encode(cuda, b.data_ptr(), n, k, bn, bk) if layout == "nk" else \
            _encode(cuda, b.data_ptr(), k, n, bk, 64)
        # The maps are by-value (grid-constant) parameters: the launch copies their bytes.
        maps = [(ctypes.c_uint8 * 128).from_buffer_copy(x) for x in (map_a, map_b)]
        d_arg = ctypes.c_void_p(d.data_ptr())
        args = [ctypes.addressof(maps[0]), ctypes.addressof(maps[1]), ctypes.addressof(d_arg)]
        floats, counters = entry.get("split_scratch", [0, 0])
        if floats:  # split-K: the f32 partials and the zeroed counters, after D
            scratch = torch.empty(floats, device="cuda", dtype=torch.float32)
            count = torch.zeros(counters, device="cuda", dtype=torch.int32)
            split_args = [ctypes.c_void_p(scratch.data_ptr()), ctypes.c_void_p(count.data_ptr())]
            args += [ctypes.addressof(x) for x in split_args]
        params = (ctypes.c_void_p * len(args))(*args)
        grid, block = entry["grid"], entry["block"]

        def launch() -> None:
            stream = torch.cuda.current_stream().cuda_stream  # a graph's capture stream too
            err = cuda.cuLaunchKernel(function, grid, 1, 1, block, 1, 1,
                                      entry["shared_bytes"], ctypes.c_void_p(stream), params,
                                      None)
            assert err == 0, err

        launch()
        torch.cuda.synchronize()
        bt = b.double().t() if layout == "nk" else b.double()
        ref = a.double() @ bt
        err = float((d.double() - ref).norm() / ref.norm())
        mm = (lambda: a @ b.t()) if layout == "nk" else (lambda: a @ b)
        lin = (lambda: torch.nn.functional.linear(a, b)) if layout == "nk" else mm
        torch_err = float((mm().double() - ref).norm() / ref.norm())
        times = {"fusec": _time(launch), "torch_mm": _time(mm), "linear": _time(lin)}
        graph = {"fusec": _time_graph(launch), "torch_mm": _time_graph(mm)}
        # After a few hundred launches: still right, and (split-K) every counter back at 0.
        d.zero_()
        launch()
        torch.cuda.synchronize()
        err_after = float((d.double() - ref).norm() / ref.norm())
        counters_left = int(count.abs().sum()) if floats else 0
        flops = 2 * m * n * k
        row = {"name": entry["name"], "rel_err": err, "torch_rel_err": torch_err,
               "rel_err_after_timing": err_after, "split_counters_left": counters_left,
               "ms": times, "graph_us": {key: t * 1e3 for key, t in graph.items()},
               "tflops": {key: flops / (t * 1e-3) / 1e12 for key, t in times.items()},
               "fusec_vs_torch_mm": times["torch_mm"] / times["fusec"],
               "ptxas": entry["ptxas"]}
        print(json.dumps(row), flush=True)


def _time(fn, reps: int = 30) -> float:
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[len(times) // 2]


def _time_graph(fn, reps: int = 10) -> float:
    """Milliseconds per call of `fn` among GRAPH_LAUNCHES calls captured as one CUDA graph
    (median of `reps` replays)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_LAUNCHES):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    return _time(graph.replay, reps) / GRAPH_LAUNCHES


if __name__ == "__main__":
    mode, where = sys.argv[1], Path(sys.argv[2])
    build(where, sys.argv[3:]) if mode == "build" else \
        run(where, sys.argv[3] if len(sys.argv) > 3 else None)
