"""Differential fuzzing of the CUDA target: the fuzzer's random graphs, built here, run there.

    python test/gpu/fuzz_cuda.py build DIR [--examples N] [--seed S] [--dtype bfloat16]
                                           [--focus conv2d,maxpool,avgpool]
                                                                        here (no GPU needed)
    python3 test/gpu/fuzz_cuda.py run DIR                               on the H200

`build` draws N programs with `fusec.tools.fuzz.programs()` (elementwise with broadcasting,
reductions, softmax, layernorm, matmul, linear, transpose, reshape), imports each through
fusec's frontend and compiles it for target cuda twice, with fusion on and off, through the
real pipeline (its `tiled` stage, the tile emitter, cuBLASLt calls, the fallback). Fresh
random inputs (|x| in [0.5, 1], never zero) and the float64 reference outputs computed by
torch on the CPU are saved beside each artifact, with the tolerance (`fuzz.TOLERANCE`, or ten
times torch's own float32 error when that is larger). A program fusec refuses to compile for
cuda is recorded (with the first line of its error) and not run. With `--dtype bfloat16` the
graphs take bf16 inputs (the saved inputs are the bf16-rounded values, the reference float64
from them, the tolerance 2e-2 or ten times torch's own bf16 error on the program).

`run` loads every artifact with `fusec.runtime.load`, runs it on the saved inputs (as torch
CUDA tensors), and compares
each output with its reference by relative norm error. It prints one line per failure and a
summary; the exit code is 1 if any program failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def draw_programs(examples: int, seed: int, max_ops: int, focus: tuple = ()) -> list:
    """`examples` programs from the fuzzer's strategy, reproducibly for `seed`."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    from fusec.tools import fuzz

    drawn: list = []

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @hypothesis_seed(seed)
    @given(fuzz.programs(max_ops, focus=focus))
    def collect(program) -> None:
        drawn.append(program)

    collect()
    return drawn


# bf16 programs: the inputs rounded to bf16, the reference in float64 from those values; the
# tolerance is BF16_TOLERANCE or ten times torch's own bf16 error on the program (CPU).
BF16_TOLERANCE = 2e-2


def _bf16_references(program, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], float]:
    """float64 outputs from the bf16-rounded `inputs`, and torch's own bf16 error."""
    import torch

    from fusec.tools import fuzz

    model = fuzz.module(program)
    with torch.no_grad():
        ref64 = fuzz._as_tuple(model(*[torch.from_numpy(x).double() for x in inputs]))
        ref16 = fuzz._as_tuple(model(*[torch.from_numpy(x).to(torch.bfloat16) for x in inputs]))
    refs = [r.numpy() for r in ref64]
    err = max((relative_error(a.float().numpy(), b) for a, b in zip(ref16, refs)), default=0.0)
    return refs, err


def build(out_dir: Path, examples: int, seed: int, max_ops: int, dtype: str = "float32",
          focus: tuple = ()) -> None:
    import torch

    from fusec.compiler import driver
    from fusec.compiler.frontend import import_torch
    from fusec.compiler.pipeline import CompileOptions
    from fusec.tools import fuzz

    out_dir.mkdir(parents=True, exist_ok=True)
    index = []
    for k, program in enumerate(draw_programs(examples, seed, max_ops, focus)):
        name = f"p{k:03d}"
        bf16 = dtype == "bfloat16"
        example = [torch.from_numpy(x) for x in fuzz.random_inputs(program, k)]
        if bf16:
            example = [x.to(torch.bfloat16) for x in example]
        entry = {"name": name, "program": fuzz.to_python(program), "built": {}, "dtype": dtype}
        try:
            with driver.quiet_torch_logs():
                text = import_torch(fuzz.module(program), *example)
        except Exception as error:  # noqa: BLE001 - a frontend refusal: recorded, not run
            entry["import_error"] = str(error).splitlines()[0][:300]
            index.append(entry)
            continue
        inputs = fuzz.random_inputs(program, k + 1)
        if bf16:  # the values the artifact will see: rounded to bf16 (stored as float32)
            inputs = [torch.from_numpy(x).to(torch.bfloat16).float().numpy() for x in inputs]
            refs, err = _bf16_references(program, inputs)
            entry["tolerance"] = max(BF16_TOLERANCE, 10.0 * err)
        else:
            refs, err32 = fuzz.references(program, inputs)
            entry["tolerance"] = max(fuzz.TOLERANCE, 10.0 * err32)
        np.savez(out_dir / f"{name}.npz", *inputs, *refs)
        entry["inputs"], entry["outputs"] = len(inputs), len(refs)
        for fusion in (True, False):
            label = "fused" if fusion else "unfused"
            options = CompileOptions(target="cuda", fusion=fusion, model_name=f"{name}_{label}")
            try:
                meta = driver.compile_text(text, f"<fuzz {name}>", options,
                                           str(out_dir / f"{name}_{label}.so"))
            except Exception as error:  # noqa: BLE001 - recorded with its first line
                entry["built"][label] = {"error": str(error).splitlines()[0][:300]}
                continue
            infos = [k_["info"] for k_ in meta["kernels"]]
            entry["built"][label] = {
                "kernels": len(infos),
                "paths": [i.get("path") for i in infos],
                "tiled": sum(1 for i in infos if i.get("tiled")),
            }
        index.append(entry)
        print(name, json.dumps(entry["built"]), flush=True)
    (out_dir / "index.json").write_text(json.dumps(index, indent=1))


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    norm = float(np.linalg.norm(ref.ravel()))
    diff = float(np.linalg.norm((out - ref).ravel()))
    return diff / norm if norm else diff


def run(out_dir: Path, only: str = "") -> int:
    import torch  # the CUDA context, and the inputs as CUDA tensors (the runtime's main use)

    import fusec.runtime as runtime

    index = json.loads((out_dir / "index.json").read_text())
    ran = failed = refused = 0
    kernels = {"fast": 0, "tiled": 0, "gemm": 0, "fallback": 0}
    start = time.perf_counter()
    for entry in index:
        if "import_error" in entry or (only and entry["name"] != only):
            continue
        data = np.load(out_dir / f"{entry['name']}.npz")
        arrays = [data[f"arr_{i}"] for i in range(entry["inputs"] + entry["outputs"])]
        inputs, refs = arrays[:entry["inputs"]], arrays[entry["inputs"]:]
        for label, built in entry["built"].items():
            if "error" in built:
                refused += 1
                print(f"{entry['name']} {label}: not built: {built['error']}")
                continue
            ran += 1
            for path in built["paths"]:
                kernels[path] = kernels.get(path, 0) + 1
            kernels["tiled"] += built["tiled"]
            try:
                model = runtime.load(str(out_dir / f"{entry['name']}_{label}.so"))
                dtype = torch.bfloat16 if entry.get("dtype") == "bfloat16" else torch.float32
                outs = model(*[torch.from_numpy(x).to(dtype).cuda() for x in inputs])
                outs = outs if isinstance(outs, (tuple, list)) else (outs,)
                torch.cuda.synchronize()
                outs = [o.float().cpu().numpy() if isinstance(o, torch.Tensor) else o
                        for o in outs]
                errors = [relative_error(np.asarray(o), r) for o, r in zip(outs, refs)]
                bad = len(outs) != len(refs) or any(
                    np.asarray(o).shape != r.shape for o, r in zip(outs, refs)) or \
                    not all(e <= entry["tolerance"] for e in errors)
            except Exception as error:  # noqa: BLE001 - a failure to report
                bad, errors = True, [f"{type(error).__name__}: {error}"]
            if bad:
                failed += 1
                print(f"FAIL {entry['name']} {label}: errors {errors} (tolerance "
                      f"{entry['tolerance']:.2g}), paths {built['paths']}\n{entry['program']}")
    seconds = time.perf_counter() - start
    print(f"fuzz_cuda: {ran} artifacts of {len(index)} programs run in {seconds:.1f} s; "
          f"{failed} failed; {refused} not built; kernels by path {kernels}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["build", "run"])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-ops", type=int, default=8)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--only", default="", help="run: this program alone (its name)")
    parser.add_argument("--focus", default="",
                        help="op kinds every program starts with (fuzz --focus), comma list")
    args = parser.parse_args(argv)
    if args.mode == "build":
        build(args.dir, args.examples, args.seed, args.max_ops, args.dtype,
              tuple(k for k in args.focus.split(",") if k))
        return 0
    return run(args.dir, args.only)


if __name__ == "__main__":
    sys.exit(main())
