"""`fusec --tune` on the H200, split in two because the H200's image has no MLIR bindings:
the candidates are built here and timed there, as `fusec --tune` does in one process on a
machine that has both (compiler/tuner.py; the same `select` and cache).

    python bench/tune_gpu.py build DIR [NAME ...]     here: DIR/<name>/candidate<i>.so
    python3 bench/tune_gpu.py time DIR [NAME ...]     H200: every candidate's kernels
                                                      (runtime/timing.py, CUDA events)
                                                      -> DIR/times.json
    python bench/tune_gpu.py record DIR TIMES CACHE   here: winners -> CACHE (the tuning
                                                      cache), DIR/<name>/tuned.so built
                                                      with it
    python3 bench/tune_gpu.py measure DIR [NAME ...]  H200: `time`, then `compare` with
                                                      the winners `select` picks there
    python3 bench/tune_gpu.py compare DIR [NAME ...]  H200: untuned (the cost model's
                                                      tiles) against tuned, with eager and
                                                      Inductor, numerics against float64,
                                                      in one process -> DIR/compare.json

Workloads: our GEMM with the epilogues it fuses (issue 14's Linear + bias + GELU, GPT-2's
and LLaMA's projections) and the attention kernel (issue 15's shapes); each must be one
kernel of ours (the build says which kernel paths it got).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _linear_gelu(x, w, b):
    import torch.nn.functional as F

    return F.gelu(F.linear(x, w, b))


def _linear_residual(x, w, b, r):
    import torch.nn.functional as F

    return F.linear(x, w, b) + r


def _linear_gelu_tanh(x, w, b):
    import torch.nn.functional as F

    return F.gelu(F.linear(x, w, b), approximate="tanh")


def _attention(q, k, v):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v)


def _causal(q, k, v):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _gemm(m, n, k):
    return [(m, k), (n, k), (n,)]


# name: (function, input shapes, what)
WORKLOADS = {
    "lg_8192x4096x4096": (_linear_gelu, _gemm(8192, 4096, 4096),
                          "Linear + bias + GELU 8192x4096x4096 (issue 14)"),
    "gpt2_fc_8192x3072x768": (_linear_gelu_tanh, _gemm(8192, 3072, 768),
                              "GPT-2 c_fc + GELU(tanh) B8 T1024"),
    "gpt2_proj_8192x768x3072": (_linear_residual, _gemm(8192, 768, 3072) + [(8192, 768)],
                                "GPT-2 c_proj + residual B8 T1024"),
    "gpt2_attnout_8192x768x768": (_linear_residual, _gemm(8192, 768, 768) + [(8192, 768)],
                                  "GPT-2 attention out-proj + residual B8 T1024"),
    "llama_o_2048x1024x1024": (_linear_residual, _gemm(2048, 1024, 1024) + [(2048, 1024)],
                               "LLaMA block o_proj + residual B4 T512 d1024"),
    "lg_1000x520x264": (_linear_gelu, _gemm(1000, 520, 264),
                        "Linear + bias + GELU, ragged 1000x520x264"),
    "att_s4096_d128": (_attention, [(8, 16, 4096, 128)] * 3,
                       "attention B8 H16 S4096 D128 (issue 15)"),
    "att_causal_s4096_d128": (_causal, [(8, 16, 4096, 128)] * 3,
                              "causal attention B8 H16 S4096 D128 (issue 15)"),
    "att_causal_s4096_d64": (_causal, [(8, 16, 4096, 64)] * 3,
                             "causal attention B8 H16 S4096 D64"),
    "att_causal_t1024_d64": (_causal, [(8, 12, 1024, 64)] * 3,
                             "GPT-2 causal attention B8 H12 T1024 D64"),
    "att_decode_kv8192": (_attention, [(8, 32, 1, 128), (8, 32, 8192, 128),
                                       (8, 32, 8192, 128)],
                          "decode B8 H32 one query, 8192 keys, D128"),
}


def _inputs(name: str, device: str, seed: int):
    import torch

    _, shapes, _ = WORKLOADS[name]
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, s in enumerate(shapes):
        x = torch.randn(s, generator=g)
        if name.startswith(("lg", "gpt2", "llama")) and i == 1:
            x /= s[1] ** 0.5  # nn.Linear's weight scale
        out.append(x.to(device, torch.bfloat16))
    return out


def _bench_gpu():
    """bench/gpu.py as a module (its Wrap, FusecModel and timers)."""
    spec = importlib.util.spec_from_file_location("fusec_bench_gpu", ROOT / "bench" / "gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def build(folder: Path, names: list[str]) -> None:
    import dataclasses

    from fusec.compiler import driver, tuner
    from fusec.compiler.frontend import import_torch
    from fusec.compiler.pipeline import CompileOptions, lower
    from fusec.compiler.targets.cuda.options import CudaOptions

    Wrap = _bench_gpu().Wrap
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {}
    for name in names:
        fn, _, what = WORKLOADS[name]
        xs = _inputs(name, "cpu", 0)
        with driver.quiet_torch_logs():
            text = import_torch(Wrap(fn).eval(), *xs)
        options = CompileOptions(target="cuda", model_name=name)
        module = driver.parse(text, name)
        lower(module, options, stop_after="fusion", filename=name)
        fused = driver.as_text(module)
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "fusion.mlir").write_text(fused)
        counts, i, n, started = {}, 0, 1, time.perf_counter()
        while i < n:
            cuda = dataclasses.replace(options.cuda, tile_candidate=i, tuning="off")
            meta = driver.compile_text(fused, name, dataclasses.replace(options, cuda=cuda),
                                       str(folder / name / f"candidate{i}.so"))
            if i == 0:
                counts = tuner.tunable(meta["kernels"])
                n = max([c for c, _ in counts.values()] or [1])
            i += 1
        paths = [k["info"].get("path") for k in meta["kernels"]]
        manifest[name] = {"what": what, "candidates": n, "paths": paths,
                          "counts": {k: list(v) for k, v in counts.items()},
                          "build_s": round(time.perf_counter() - started, 1)}
        print(name, manifest[name], flush=True)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))


def time_candidates(folder: Path, names: list[str]) -> None:
    """Each candidate in a child process with a time limit (as `fusec --tune` does): a tile
    whose kernel never finishes is killed and recorded as failed."""
    from fusec.runtime.timing import TimingFailed, relative_error, time_isolated

    manifest = json.loads((folder / "manifest.json").read_text())
    path = folder / "times.json"
    out = json.loads(path.read_text()) if path.exists() else {}
    for name in names:
        n = manifest[name]["candidates"]
        rows, base = [], None
        for i in range(n):
            try:
                t = time_isolated(str(folder / name / f"candidate{i}.so"), seed=1, warmup=5,
                                  runs=30, timeout=60)
            except TimingFailed as e:
                rows.append({"us": {}, "tiles": {}, "valid": False, "note": str(e)[:300]})
                print(name, i, "failed:", str(e)[:200], flush=True)
                continue
            if base is None:
                base = t
            err = max(relative_error(a, b) for a, b in zip(t.outputs, base.outputs))
            rows.append({"us": t.us, "tiles": t.tiles, "valid": err <= 2e-2, "err": err})
            print(name, i, list(t.tiles.values()), [round(v, 1) for v in t.us.values()],
                  f"err {err:.1e}", flush=True)
        out[name] = rows
        path.write_text(json.dumps(out, indent=1))


def winner(folder: Path, name: str) -> str:
    """The tuned artifact of `name`: tuned.so when `record` built it, else (one tunable
    kernel) the candidate `tuner.select` picks from times.json, which is what a tuned
    build's kernel is."""
    from fusec.compiler import tuner

    if (folder / name / "tuned.so").exists():
        return "tuned.so"
    manifest = json.loads((folder / "manifest.json").read_text())
    rows = json.loads((folder / "times.json").read_text())[name]
    counts = {k: tuple(v) for k, v in manifest[name]["counts"].items()}
    if len(counts) != 1:
        return "candidate0.so"
    (report,) = tuner.select(counts, [tuner.Measured(r["us"], r["tiles"], r["valid"])
                                      for r in rows])
    for i, r in enumerate(rows):
        if r["valid"] and list(r["tiles"].values()) == [report.tile]:
            return f"candidate{i}.so"
    return "candidate0.so"


def record(folder: Path, times_path: Path, cache: Path) -> None:
    import dataclasses

    from fusec.compiler import driver, tuner
    from fusec.compiler.pipeline import CompileOptions
    from fusec.passes import cost_model
    from fusec.runtime import tuning

    manifest = json.loads((folder / "manifest.json").read_text())
    times = json.loads(times_path.read_text())
    entries, lines = {}, []
    device = cost_model.H200.name
    for name, rows in times.items():
        counts = {k: tuple(v) for k, v in manifest[name]["counts"].items()}
        measured = [tuner.Measured(r["us"], r["tiles"], r["valid"]) for r in rows]
        reports = tuner.select(counts, measured)
        entries.update({tuning.entry_key(device, r.key): r.entry() for r in reports})
        lines += [f"{name}: {line}" for line in tuner.report_lines(reports, [])]
    tuning.store(str(cache), entries)
    print("\n".join(lines))
    for name in times:
        options = CompileOptions(target="cuda", model_name=name)
        options = dataclasses.replace(options, cuda=dataclasses.replace(
            options.cuda, tuning=str(cache)))
        meta = driver.compile_text((folder / name / "fusion.mlir").read_text(), name, options,
                                   str(folder / name / "tuned.so"))
        print(name, "tuned build:", [k["info"].get("tile") for k in meta["kernels"]
                                     if k["info"].get("tune_key")])


def compare(folder: Path, names: list[str]) -> None:
    import torch

    bench = _bench_gpu()
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "workloads": {}}
    for name in names:
        fn, _, what = WORKLOADS[name]
        xs = _inputs(name, "cuda", 1)
        ref = fn(*[x.double() for x in xs])
        row = {"what": what, "ms": {}, "err": {}}
        tuned = winner(folder, name)
        row["tuned_artifact"] = tuned
        for label, so in (("untuned", "candidate0.so"), ("tuned", tuned)):
            model = bench.FusecModel(folder / name / so)
            outs = model.outputs_like("cuda")
            call = model.bind(xs, outs)
            call()
            torch.cuda.synchronize()
            row["err"][label] = bench.rel_err(outs[0], ref)
            row["ms"][label] = bench.time_ms(call, 50)
            row.setdefault("tiles", {})[label] = [k["info"].get("tile")
                                                  for k in model.meta["kernels"]
                                                  if k["info"].get("tune_key")]
        row["ms"]["eager"] = bench.time_ms(lambda: fn(*xs), 50)
        row["err"]["eager"] = bench.rel_err(fn(*xs), ref)
        compiled = torch.compile(fn)
        compiled(*xs)
        row["ms"]["inductor"] = bench.time_ms(lambda: compiled(*xs), 50)
        # The first two again: the spread is the noise of the measurement.
        for label, so in (("untuned_again", "candidate0.so"), ("tuned_again", tuned)):
            model = bench.FusecModel(folder / name / so)
            outs = model.outputs_like("cuda")
            row["ms"][label] = bench.time_ms(model.bind(xs, outs), 50)
        best = min(row["ms"]["eager"], row["ms"]["inductor"])
        row["tuned_vs_untuned"] = min(row["ms"]["untuned"], row["ms"]["untuned_again"]) / \
            min(row["ms"]["tuned"], row["ms"]["tuned_again"])
        row["tuned_vs_best_torch"] = best / min(row["ms"]["tuned"], row["ms"]["tuned_again"])
        results["workloads"][name] = row
        (folder / "compare.json").write_text(json.dumps(results, indent=1))
        print(name, {k: round(v, 4) for k, v in row["ms"].items()},
              {k: f"{v:.1e}" for k, v in row["err"].items()},
              f"tuned/untuned {row['tuned_vs_untuned']:.3f}x, "
              f"vs best torch {row['tuned_vs_best_torch']:.3f}x", flush=True)
        del xs, ref
        torch.cuda.empty_cache()


def main(argv: list[str]) -> int:
    command, folder = argv[0], Path(argv[1])
    rest = argv[2:]
    if command == "record":
        record(folder, Path(rest[0]), Path(rest[1]))
        return 0
    names = rest or list(WORKLOADS)
    folder.mkdir(parents=True, exist_ok=True)
    if command == "measure":  # time, then compare, in one call on the GPU
        time_candidates(folder, names)
        compare(folder, names)
        return 0
    {"build": build, "time": time_candidates, "compare": compare}[command](folder, names)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
