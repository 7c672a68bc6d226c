"""Compile time of the zoo's models on the CPU target (issue 17's "small models under 2 s").

    python bench/compile_time.py                      # every small zoo model, min of 3
    python bench/compile_time.py --only resnet18 gpt2 --repeats 5 --stages

One warm process, as a user's notebook is: a first, untimed compile (of the first model)
pays the process's one-time imports (torch.export's modules) before anything is timed. Each timed
compile is `fusec.compile(model, *inputs, cache=False)`: no artifact is taken from the
cache (the cache folder's runtime shim, built once, is kept as a user's is). Reported per
model: kernels, the minimum and all times; with `--stages`, the minimum run's time per
part (`import`: torch.export and torch-mlir; each IR stage; `object`: LLVM's opt and llc),
measured by wrapping those functions (`_instrument`); the rest is caching, linking and
loading.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PARTS: dict[str, float] = {}


def _timed(name, fn):
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            key = name(args) if callable(name) else name
            PARTS[key] = PARTS.get(key, 0.0) + time.perf_counter() - started
    return wrapper


def _instrument() -> None:
    """Time the import, each IR stage and the object file (the functions fusec calls
    through their modules' attributes: `compile` imports the frontend's function when it
    runs)."""
    from fusec.compiler import frontend, pipeline
    from fusec.compiler.targets import cpu

    frontend.import_torch_module = _timed("import", frontend.import_torch_module)
    pipeline.run_stage = _timed(lambda a: a[1], pipeline.run_stage)
    cpu.emit_object = _timed("object", cpu.emit_object)


def _one(entry, size: str) -> tuple[float, int, dict[str, float]]:
    import fusec

    model, inputs = entry.build(size)
    PARTS.clear()
    started = time.perf_counter()
    module = fusec.compile(model, *inputs, cache=False)
    elapsed = time.perf_counter() - started
    return elapsed, len(module.kernels), dict(PARTS)


def main(argv: list[str] | None = None) -> int:
    from zoo import ZOO

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="zoo model names (default: all)")
    parser.add_argument("--size", default="small", choices=("small", "full"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stages", action="store_true", help="time each stage (-v)")
    args = parser.parse_args(argv)
    names = args.only or [n for n, e in ZOO.items() if n != "mixtral_moe"]
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        parser.error(f"unknown zoo model(s): {', '.join(unknown)}")
    # Warm the process (torch.export's first use imports most of torch's compiler stack).
    warm = names[0]
    if args.stages:
        _instrument()
    _one(ZOO[warm], "small")
    print(f"| model ({args.size}) | kernels | min s | all s |" +
          (" stages of the minimum (s) |" if args.stages else ""))
    print("| --- | --- | --- | --- |" + (" --- |" if args.stages else ""))
    for name in names:
        try:
            runs = [_one(ZOO[name], args.size) for _ in range(args.repeats)]
        except Exception as exc:  # a model that does not compile is reported, not fatal
            print(f"| {name} | - | failed: {type(exc).__name__}: {str(exc)[:120]} | |")
            continue
        best = min(runs, key=lambda r: r[0])
        row = (f"| {name} | {best[1]} | {best[0]:.2f} | "
               f"{', '.join(f'{r[0]:.2f}' for r in runs)} |")
        if args.stages:
            row += " " + ", ".join(f"{k} {v:.2f}" for k, v in best[2].items()) + " |"
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
