"""Fingerprints of what fusec generates, to prove a refactoring changes no behaviour.

    python bench/fingerprint.py texts DIR [--fuzz N] [--seed S] [--focus KINDS]
        the inputs: every example's model.mlir and N fuzzer programs imported once
    python bench/fingerprint.py print DIR OUT.json
        for every input, both targets, fused and unfused: the md5 of each kernel's text
        (CPU: each function of the `cpu` stage's IR; CUDA: each gpu.func the code generator
        emits, and the PTX) and of the launch plan (its JSON, without timings)
    python bench/fingerprint.py diff A.json B.json
        what differs (exit 1 if anything does)

Run `print` on the tree before and after the change; `diff` must print nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _md5(text: str | bytes) -> str:
    return hashlib.md5(text.encode() if isinstance(text, str) else text).hexdigest()


def texts(folder: Path, fuzz_count: int, seed: int, focus: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for example in sorted((ROOT / "examples").glob("*/model.mlir")):
        shutil.copy(example, folder / f"ex_{example.parent.name}.mlir")
    if not fuzz_count:
        return
    import torch

    sys.path.insert(0, str(ROOT / "test" / "gpu"))
    from fusec.compiler import driver
    from fusec.compiler.frontend import import_torch
    from fusec.tools import fuzz
    from fuzz_cuda import draw_programs

    tag = "_".join(focus) or "all"
    for k, program in enumerate(draw_programs(fuzz_count, seed, 8, tuple(focus))):
        example = [torch.from_numpy(x) for x in fuzz.random_inputs(program, k)]
        try:
            with driver.quiet_torch_logs():
                text = import_torch(fuzz.module(program), *example)
        except Exception:  # noqa: BLE001 - a frontend refusal: nothing to fingerprint
            continue
        (folder / f"fz_{tag}_{seed}_{k:03d}.mlir").write_text(text)


def _functions(module_text: str) -> dict[str, str]:
    """md5 of each top-level function's text, by name. The names bufferization gives the
    constants' globals (`@__constant_8xf32_1`) depend on the order it meets them, which is
    not stable from run to run: they are compared as `@__constant`."""
    text = re.sub(r"@__constant_\w+", "@__constant", module_text)
    out = {}
    for match in re.finditer(r"^  (?:func\.func|llvm\.func) (?:\w+ )?@([\w.$]+).*$", text,
                             re.M):
        start = match.start()
        if not match.group(0).rstrip().endswith("{"):
            out[match.group(1)] = _md5(match.group(0))  # a declaration
            continue
        end = text.find("\n  }\n", start)
        out[match.group(1)] = _md5(text[start:end])
    return out


def fingerprint(path: Path) -> dict:
    from fusec.compiler import driver, pipeline

    try:
        from fusec.compiler.targets import cuda as codegen_cuda
    except ImportError:  # the tree before the CUDA target had its package
        from fusec.compiler import codegen_cuda
    try:
        from fusec.compiler.targets.cpu import take_plan
    except ImportError:  # the tree before the targets had their packages
        from fusec.compiler.codegen_cpu import take_plan

    text = path.read_text()
    result = {}
    for target in ("cpu", "cuda"):
        for fusion in (True, False):
            key = f"{target}-{'fused' if fusion else 'unfused'}"
            options = pipeline.CompileOptions(target=target, fusion=fusion,
                                              model_name=path.stem)
            try:
                module = driver.parse(text, str(path))
                if target == "cpu":
                    pipeline.lower(module, options)
                    ir_text = str(module)
                    plan = take_plan(module).to_json_dict()
                    result[key] = {"kernels": _functions(ir_text), "plan": _md5(
                        json.dumps(plan, sort_keys=True))}
                else:
                    pipeline.lower(module, options, stop_after="tiled")
                    program = codegen_cuda.generate(module, codegen_cuda.CudaOptions(
                        cubin=False))
                    plan = program.plan.to_json_dict()
                    plan.get("metadata", {}).pop("compile_seconds", None)
                    kernels = {m.group(1): _md5(m.group(0)) for m in re.finditer(
                        r"gpu\.func @(\w+)[\s\S]*?\n    }\n", program.kernels_mlir)}
                    result[key] = {"kernels": kernels, "ptx": _md5(program.ptx),
                                   "plan": _md5(json.dumps(plan, sort_keys=True))}
            except Exception as error:  # noqa: BLE001 - a refusal is part of the behaviour
                result[key] = {"error": f"{type(error).__name__}: {str(error)[:200]}"}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["texts", "print", "diff"])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--fuzz", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--focus", default="")
    args = parser.parse_args()
    if args.mode == "texts":
        texts(args.paths[0], args.fuzz, args.seed, [k for k in args.focus.split(",") if k])
        return 0
    if args.mode == "print":
        inputs = sorted(args.paths[0].glob("*.mlir"))
        prints = {p.stem: fingerprint(p) for p in inputs}
        args.paths[1].write_text(json.dumps(prints, indent=1, sort_keys=True))
        errors = sum("error" in v for p in prints.values() for v in p.values())
        print(f"{len(prints)} inputs x 4 builds fingerprinted ({errors} refusals)")
        return 0
    a, b = (json.loads(p.read_text()) for p in args.paths[:2])
    differ = 0
    for name in sorted(set(a) | set(b)):
        if a.get(name) != b.get(name):
            differ += 1
            for key in sorted(set(a.get(name, {})) | set(b.get(name, {}))):
                if a.get(name, {}).get(key) != b.get(name, {}).get(key):
                    print(f"{name} {key}: differs")
    print(f"{len(set(a) | set(b))} inputs compared, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
