"""Builds of test/gpu/movement.py's cases against each other in one process (the H200): each
case built into several folders (for example at two commits), checked against float64 on
fresh random inputs, then timed interleaved with eager and Inductor (`bench/gpu.py`'s
`interleaved_ms`: rounds taking the variants in turn, the order reversed every other round),
so that the variants' ratios come from one machine in one state.

    python3 test/gpu/movement_ab.py LABEL=DIR LABEL=DIR ... [-- CASE ...]

Each line of output is one case as JSON: per variant its error, tolerance, kernels and time,
with eager's and Inductor's times and the HBM floor, and each fusec variant's kernels' own
times in launch order (the profiler's, means of 10 calls, us: where a change lands). A case missing from a folder is left out
of that folder's column. Exit 1 when a variant's error is over its tolerance or its kernel
count is not the one its build recorded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import movement  # noqa: E402  (test/gpu/movement.py)


def kernel_us(fn, calls: int = 10) -> list[float]:
    """The GPU kernels one call of `fn` launches, each kernel's mean duration in us over
    `calls` calls, in launch order."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start)
    per_call = len(events) // calls
    return [round(sum(e.time_range.elapsed_us() for e in events[i::per_call]) / calls, 1)
            for i in range(per_call)]


def main(argv: list[str]) -> int:
    split = argv.index("--") if "--" in argv else len(argv)
    folders = dict(a.split("=", 1) for a in argv[:split])
    names = argv[split + 1:] or sorted(movement.BLOCKS)
    bench = movement._bench()
    ok = True
    for name in names:
        fn = movement.case(name)[0]
        xs = movement._inputs(name, 1)
        row: dict = {"name": name}
        variants = {}
        moved = sum(x.numel() * x.element_size() for x in xs)
        for label, folder in folders.items():
            art = Path(folder)
            if not (art / "mv" / f"{name}.so").exists():
                continue
            built = json.loads((art / "mv" / "cases.json").read_text())[name]["mv"]
            checked = movement.check(art, [name])[0]
            row_ok = checked["err"] <= checked["tol"] and \
                checked["kernels"] == built["kernels"] and "fallback" not in built["paths"]
            ok = ok and row_ok
            row[label] = {"err": checked["err"], "tol": checked["tol"], "ok": row_ok,
                          "kernels": checked["kernels"], "paths": built["paths"]}
            model = movement._bench().FusecModel(art / "mv" / f"{name}.so")
            out = model.outputs_like("cuda")
            variants[label] = model.bind(xs, out)
            row[label]["kernel_us"] = kernel_us(variants[label])
        if not variants:
            continue
        moved += sum(o.numel() * o.element_size() for o in out)
        ind = torch.compile(fn)
        ind(*xs)
        variants["eager"] = lambda: fn(*xs)
        variants["inductor"] = lambda: ind(*xs)
        times = bench.interleaved_ms(variants, 20)
        for label, ms in times.items():
            row.setdefault(label, {})["ms"] = round(ms, 4)
        row["kernels_inductor"] = bench.count_kernels(lambda: ind(*xs))
        row["hbm_floor_ms"] = round(moved / bench.copy_bandwidth() * 1e3, 4)
        print(json.dumps(row), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
