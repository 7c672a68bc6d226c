"""The model zoo on the H200: whole models, fusec against torch eager and torch.compile.

Two halves, because MLIR is here and the GPU is there:

  python bench/zoo_gpu.py build DIR [--size full] [--dtype bf16] [--only NAME ...]
        (this machine) each zoo model (bench/zoo.py) compiled by fusec for target cuda with
        its parameters as inputs of the artifact (weights beside the artifact, as
        AOTInductor can keep them: a 124 M parameter model's artifact is its kernels only),
        DIR/<name>.so and DIR/<name>.json (parameter names, shapes and dtypes in the order
        the artifact takes them, compile seconds, kernels, the path of every kernel)
  python bench/zoo_gpu.py table OUT/zoo_gpu.json ...   the markdown table of runs
  python3 bench/zoo_gpu.py run DIR OUT [--reps N]
        (the H200) each model built again from the zoo (the same architecture; its weights
        drawn there, passed to the artifact and to torch alike), on fresh inputs: fusec's,
        eager's and Inductor's outputs against float64 on the GPU, then each timed with CUDA
        events (median of N runs after warm-up) and its kernels counted with the profiler;
        a table on stdout and OUT/zoo_gpu.json

The run half imports neither MLIR nor fusec's compiler (fusec.runtime loads the artifact).
Parameters as inputs are what `torch.compile(model, backend="fusec")` gets from Dynamo too;
`fusec.compile(model)` would fold them into the artifact as constants, which at these sizes
(250 MB for GPT-2 in bf16) cannot travel to the device. Inductor runs in torch.compile's
default mode and fusec through its runtime's plain launch loop: neither uses CUDA graphs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import zoo  # noqa: E402

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def weights_as_inputs(model, names: list[str]):
    """`model` as a module whose first inputs are its parameters (torch.func.functional_call),
    in `names` order; buffers (BatchNorm statistics, position ids) stay constants."""
    import torch

    class Functional(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args):
            params = dict(zip(names, args[:len(names)]))
            return torch.func.functional_call(self.model, params, args[len(names):])

    return Functional().eval()


def _cast(model, inputs, dtype: str):
    import torch

    dt = getattr(torch, DTYPES[dtype])
    model = model.to(dt)
    return model, tuple(x.to(dt) if x.is_floating_point() else x for x in inputs)


def build(folder: Path, size: str, dtype: str, names: list[str], off: list[str] = (),
          set_: list[str] = ()) -> int:
    """`off`: CudaOptions fields turned off (an A/B's base: `--off gemm_siblings`); `set_`:
    fields given values, FIELD=VALUE (`--set dependent_launch=off`)."""
    import torch

    import fusec
    from fusec.compiler.targets.cuda.options import CudaOptions

    given = {name: False for name in off}
    for item in set_:
        field, _, value = item.partition("=")
        given[field] = {"true": True, "false": False}.get(value, value)
    cuda = CudaOptions(**given) if given else None

    folder.mkdir(parents=True, exist_ok=True)
    failures = 0
    for name in names or list(zoo.ZOO):
        model, inputs = zoo.ZOO[name].build(size)
        model, inputs = _cast(model, inputs, dtype)
        params = dict(model.named_parameters())
        wrapped = weights_as_inputs(model, list(params))
        record = {"name": name, "size": size, "dtype": dtype,
                  "params": [[n, list(p.shape), str(p.dtype).removeprefix("torch.")]
                             for n, p in params.items()],
                  "inputs": [[list(x.shape), str(x.dtype).removeprefix("torch.")]
                             for x in inputs],
                  "parameters": sum(p.numel() for p in params.values())}
        t = time.perf_counter()
        try:
            with torch.no_grad():
                compiled = fusec.compile(wrapped, *[p.detach() for p in params.values()],
                                         *inputs, target="cuda", cache=False, cuda=cuda)
        except Exception as error:  # noqa: BLE001 - a refusal is a result, recorded
            record["refused"] = f"{type(error).__name__}: {str(error).splitlines()[0][:400]}"
            failures += 1
        else:
            record["compile_s"] = time.perf_counter() - t
            record["kernels"] = [{"kind": k.get("kind"), "path": k.get("info", {}).get("path"),
                                  "ops": len(k.get("ops", []))} for k in compiled.kernels]
            os.replace(compiled.path, folder / f"{name}.so")
        (folder / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
        paths = {}
        for k in record.get("kernels", []):
            paths[k["path"]] = paths.get(k["path"], 0) + 1
        print(f"{name}: " + (f"refused: {record['refused']}" if "refused" in record else
                             f"{len(record['kernels'])} kernels {paths}, compiled in "
                             f"{record['compile_s']:.1f} s"), flush=True)
    return failures


def _bases(given: list[str] | None) -> list[tuple[str, Path]]:
    """`--base` folders as (label, folder): DIR is fusec_base, LABEL=DIR is fusec_LABEL."""
    out = []
    for item in given or []:
        label, _, folder = item.rpartition("=")
        out.append((f"fusec_{label}" if label else "fusec_base", Path(folder)))
    return out


def run(folder: Path, out: Path, reps: int, only: list[str], check_only: bool = False,
        base: list[str] | None = None, graphs: bool = False) -> int:
    import torch

    import fusec.runtime as rt
    from gpu import FusecModel, count_kernels, interleaved_ms, rel_err

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 as torch computes it by default
    rows = []
    for meta_path in sorted(folder.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        name = meta["name"]
        if only and name not in only:
            continue
        row = {"name": name, "size": meta["size"], "dtype": meta["dtype"],
               "parameters": meta["parameters"]}
        rows.append(row)
        if "refused" in meta:
            row["refused"] = meta["refused"]
            print(f"{name}: refused at compile time: {meta['refused']}", flush=True)
            continue
        row["compile_s"] = meta["compile_s"]
        entry = zoo.ZOO[name]
        model, _ = entry.build(meta["size"])
        fresh = zoo.fresh_inputs(entry, meta["size"], seed=1)
        model, fresh = _cast(model, fresh, meta["dtype"])
        params = dict(model.named_parameters())
        theirs = [[n, list(p.shape), str(p.dtype).removeprefix("torch.")]
                  for n, p in params.items()]
        if theirs != meta["params"]:
            row["error"] = "the zoo's parameters differ from the build's (another version?)"
            print(f"{name}: {row['error']}", flush=True)
            continue
        model = model.cuda().eval()
        xs = [x.cuda() for x in fresh]
        with torch.no_grad():
            import copy

            ref = copy.deepcopy(model).double()(
                *[x.double() if x.is_floating_point() else x for x in xs])
            weights = [p.detach() for p in model.parameters()]
            artifact = rt.load(folder / f"{name}.so")
            artifacts = {"fusec": folder / f"{name}.so"}

            def fusec_call():
                return artifact(*weights, *xs)

            def eager():
                return model(*xs)

            if check_only:  # under compute-sanitizer: the artifact against float64 only
                row["err"] = {"fusec": rel_err(fusec_call(), ref)}
                torch.cuda.synchronize()
                print(f"{name}: fusec err {row['err']['fusec']:.1e}", flush=True)
                continue
            # Each model's compiles start from an empty Dynamo cache: models share code (HF's
            # layers, nn.Module's call), and its recompile limit, reached by earlier models,
            # would run this one eagerly under Inductor's name.
            torch._dynamo.reset()
            compiled = torch.compile(model)
            t = time.perf_counter()
            ind_out = compiled(*xs)
            torch.cuda.synchronize()
            row["inductor_compile_s"] = time.perf_counter() - t
            runs = {"eager": eager, "inductor": lambda: compiled(*xs), "fusec": fusec_call}
            row["err"] = {"eager": rel_err(eager(), ref), "inductor": rel_err(ind_out, ref),
                          "fusec": rel_err(fusec_call(), ref)}
            for label, other_dir in _bases(base):
                if not (other_dir / f"{name}.so").exists():
                    continue
                # Another build of the same model (an A/B of a change), in the same process.
                other = rt.load(other_dir / f"{name}.so")
                artifacts[label] = other_dir / f"{name}.so"
                runs[label] = lambda other=other: other(*weights, *xs)
                row["err"][label] = rel_err(runs[label](), ref)
            if graphs:
                # The GPU's time without the host's launches: each fusec build replaying its
                # launches as one CUDA graph, Inductor with its CUDA graphs (reduce-overhead).
                # Eager has no graph of its own here. What a slow or busy host adds to every
                # launch (the plain rows) drops out of these.
                for label, path in artifacts.items():
                    bound = FusecModel(path)
                    outs = bound.outputs_like("cuda")
                    runs[f"{label}_graph"] = bound.bind([*weights, *xs], outs, graph=True)
                    runs[f"{label}_graph"]()
                    torch.cuda.synchronize()
                    row["err"][f"{label}_graph"] = rel_err(
                        outs if isinstance(ref, (tuple, list)) else outs[0], ref)
                overhead = torch.compile(model, mode="reduce-overhead")
                t = time.perf_counter()
                for _ in range(3):  # cudagraph trees record on the second or third call
                    overhead_out = overhead(*xs)
                torch.cuda.synchronize()
                row["inductor_graphs_compile_s"] = time.perf_counter() - t
                row["err"]["inductor_graphs"] = rel_err(overhead_out, ref)
                runs["inductor_graphs"] = lambda: overhead(*xs)
            # Interleaved rounds: a GPU under sustained load slows down (bench/gpu.py).
            row["ms"] = interleaved_ms(runs, reps)
            row["kernels"] = {k: count_kernels(fn) for k, fn in runs.items()}
        row["fusec_kernels_planned"] = len(meta["kernels"])
        row["fallback_kernels"] = sum(1 for k in meta["kernels"] if k["path"] == "fallback")
        print(f"{name}: " + " ".join(f"{k} {v:.3f} ms ({row['kernels'][k]} kernels, err "
                                     f"{row['err'][k]:.1e})" for k, v in row["ms"].items()),
              flush=True)
    out.mkdir(parents=True, exist_ok=True)
    info = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "reps": reps}
    (out / "zoo_gpu.json").write_text(json.dumps({"info": info, "rows": rows}, indent=1) + "\n")
    if not check_only:
        print(table(rows))
        if graphs:
            print(graph_table(rows))
    return 0


def profile(folder: Path, only: list[str], top: int) -> int:
    """Where each model's GPU time goes: fusec's kernels (by path, and the slowest, with
    what each fuses) against Inductor's (the slowest by name), from the profiler's kernel
    durations over 10 calls. The sums are GPU time, so the host's launch cost is out."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    import fusec.runtime as rt

    def kernel_times(fn, calls: int = 10) -> dict[str, float]:
        fn()
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        totals: dict[str, float] = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                totals[e.name] = totals.get(e.name, 0.0) + e.time_range.elapsed_us() / calls
        return totals

    for meta_path in sorted(folder.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        name = meta["name"]
        if (only and name not in only) or "refused" in meta:
            continue
        entry = zoo.ZOO[name]
        model, _ = entry.build(meta["size"])
        model, fresh = _cast(model, zoo.fresh_inputs(entry, meta["size"], seed=1), meta["dtype"])
        model = model.cuda().eval()
        xs = [x.cuda() for x in fresh]
        weights = [p.detach() for p in model.parameters()]
        artifact = rt.load(folder / f"{name}.so")
        kinds = {k["symbol"]: k for k in artifact.kernels}
        torch._dynamo.reset()
        compiled = torch.compile(model)
        with torch.no_grad():
            compiled(*xs)
            ours = kernel_times(lambda: artifact(*weights, *xs))
            theirs = kernel_times(lambda: compiled(*xs))
        by_path: dict[str, list[float]] = {}
        for sym, us in ours.items():
            k = kinds.get(sym, {})
            path = k.get("info", {}).get("path", "library") if k else "library (cuBLASLt)"
            by_path.setdefault(path, [0, 0.0])
            by_path[path][0] += 1
            by_path[path][1] += us
        print(f"== {name}: fusec {sum(ours.values()):.1f} us GPU time in {len(ours)} kernels, "
              f"Inductor {sum(theirs.values()):.1f} us in {len(theirs)}")
        for path, (n, us) in sorted(by_path.items(), key=lambda kv: -kv[1][1]):
            print(f"   fusec {path}: {n} kernels {us:.1f} us")
        for sym, us in sorted(ours.items(), key=lambda kv: -kv[1])[:top]:
            k = kinds.get(sym, {})
            ops = ",".join(o.split(".")[-1] for o in k.get("ops", []))[:110]
            print(f"   {us:8.1f} us  {k.get('info', {}).get('path', 'library'):9s} "
                  f"grid {k.get('grid', '')}  {ops or sym[:110]}")
        print("   Inductor's slowest:")
        for kname, us in sorted(theirs.items(), key=lambda kv: -kv[1])[:top]:
            print(f"   {us:8.1f} us  {kname[:120]}")
        sys.stdout.flush()
    return 0


def graph_table(rows: list[dict]) -> str:
    """The CUDA graph rows of a `run --graphs`: each fusec build against Inductor's CUDA
    graphs (mode='reduce-overhead'), all replaying, so the host's launch cost is out."""
    timed = [r for r in rows if "inductor_graphs" in r.get("ms", {})]
    labels = sorted({k for r in timed for k in r["ms"] if k.endswith("_graph")},
                    key=lambda k: (k != "fusec_graph", k))
    lines = ["| model | " + " | ".join(f"{k} ms" for k in labels) +
             " | Inductor graphs ms | fusec vs Inductor (graphs) | err fusec / Inductor |",
             "|" + " --- |" * (len(labels) + 4)]
    for r in timed:
        ms = r["ms"]
        cells = [f"{ms[k]:.3f}" if k in ms else "" for k in labels]
        lines.append(f"| {r['name']} | " + " | ".join(cells) +
                     f" | {ms['inductor_graphs']:.3f} | "
                     f"{ms['inductor_graphs'] / ms['fusec_graph']:.2f}x | "
                     f"{r['err']['fusec_graph']:.1e} / {r['err']['inductor_graphs']:.1e} |")
    return "\n".join(lines)


def table(rows: list[dict]) -> str:
    lines = ["| model | dtype | params | kernels fusec / eager / Inductor | fallback kernels | "
             "fusec ms | eager ms | Inductor ms | fusec vs eager | fusec vs Inductor | "
             "err fusec / Inductor | compile s fusec / Inductor |",
             "|" + " --- |" * 12]
    for r in rows:
        if "ms" not in r:
            lines.append(f"| {r['name']} | {r['dtype']} | {r['parameters'] / 1e6:.1f} M | "
                         f"{r.get('refused') or r.get('error')} |" + " |" * 8)
            continue
        ms, k, err = r["ms"], r["kernels"], r["err"]
        lines.append(
            f"| {r['name']} | {r['dtype']} | {r['parameters'] / 1e6:.1f} M | "
            f"{k['fusec']} / {k['eager']} / {k['inductor']} | {r['fallback_kernels']} | "
            f"{ms['fusec']:.3f} | {ms['eager']:.3f} | {ms['inductor']:.3f} | "
            f"{ms['eager'] / ms['fusec']:.2f}x | {ms['inductor'] / ms['fusec']:.2f}x | "
            f"{err['fusec']:.1e} / {err['inductor']:.1e} | "
            f"{r['compile_s']:.1f} / {r['inductor_compile_s']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir", type=Path)
    b.add_argument("--size", choices=zoo.SIZES, default="full")
    b.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    b.add_argument("--only", nargs="*", default=[])
    b.add_argument("--off", nargs="*", default=[],
                   help="CudaOptions fields to turn off (e.g. gemm_siblings: an A/B's base)")
    b.add_argument("--set", nargs="*", default=[], dest="set_", metavar="FIELD=VALUE",
                   help="CudaOptions fields to set (e.g. dependent_launch=off, graph=true)")
    r = sub.add_parser("run")
    r.add_argument("dir", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--reps", type=int, default=50)
    r.add_argument("--only", nargs="*", default=[])
    r.add_argument("--base", nargs="*", default=[],
                   help="folders of other builds of the same models, timed beside as "
                        "fusec_base (DIR) or fusec_LABEL (LABEL=DIR): an A/B of a change")
    r.add_argument("--check-only", action="store_true",
                   help="run fusec against float64 only (no timing, no Inductor): for "
                   "compute-sanitizer")
    r.add_argument("--graphs", action="store_true",
                   help="also time each fusec build replaying a CUDA graph (graph=True) and "
                   "Inductor with CUDA graphs (mode='reduce-overhead'): the GPU's time "
                   "without the host's launch cost")
    f = sub.add_parser("profile", help="where the GPU time goes: fusec's kernels by path "
                       "and the slowest, against Inductor's slowest (the profiler's)")
    f.add_argument("dir", type=Path)
    f.add_argument("--only", nargs="*", default=[])
    f.add_argument("--top", type=int, default=15)
    t = sub.add_parser("table", help="the markdown table of earlier runs' zoo_gpu.json files "
                       "(a model's last row wins)")
    t.add_argument("json", type=Path, nargs="+")
    args = p.parse_args(argv)
    if args.cmd == "table":
        rows: dict[tuple, dict] = {}
        for path in args.json:
            for row in json.loads(path.read_text())["rows"]:
                rows[(row["size"], row["dtype"], row["name"])] = row
        print(table([rows[k] for k in sorted(rows)]))
        return 0
    if args.cmd == "profile":
        return profile(args.dir, args.only, args.top)
    if args.cmd == "build":
        unknown = set(args.only) - set(zoo.ZOO)
        if unknown:
            p.error(f"unknown model(s): {', '.join(sorted(unknown))}")
        build(args.dir, args.size, args.dtype, args.only, args.off, args.set_)
        return 0
    return run(args.dir, args.out, args.reps, args.only, args.check_only, args.base,
               args.graphs)


if __name__ == "__main__":
    sys.exit(main())
