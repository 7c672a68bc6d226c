"""`fusec --verify`: check the fused program against the unfused one, kernel by kernel.

This module builds the check (`prepare`: MLIR, the pipeline); `fusec.compiler.verify_run`
runs it (numpy and the runtime only, so also where the GPU is and the compiler is not).

The unfused program (fusion off: one kernel per op) is the reference. Both programs are built
from one linalg-stage module whose top-level ops carry a tag (`fusec.verify_id`), so that every
value a fused group yields can be found in the unfused program too. Each program is compiled
with extra function results: the fused one returns every group's outputs, the unfused one the
same SSA values. Both run on the same fresh random inputs; the first group, in program order,
whose outputs differ beyond tolerance is the kernel named (`fusec_kernel_<n>`, n counting
groups in order, as --fusion-outline-kernels names them). Every earlier group agreed, so that
group is where the difference starts, not where it propagates to.

Group outputs whose defining op lost its tag (a pass replaced the op) cannot be matched and
are not probed; the model's outputs are always compared.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Callable

import numpy as np
from fusec.compiler.diagnostics import FusecError, format_location
from fusec.compiler.verify_run import (  # noqa: F401 - the check's API, re-exported
    BUNDLE,
    TOLERANCE,
    GroupCheck,
    VerificationError,
    VerifyResult,
    check_or_raise,
    random_inputs,
    relative_error,
    run_bundle,
)
from fusec.compiler.pipeline import CompileOptions, detect_stage, lower
from fusec.passes.grouping import model_functions
from mlir import ir

TAG = "fusec.verify_id"



# --------------------------------------------------------------------------- building


def _function(module: ir.Module) -> ir.Operation:
    """The public entry function (the model)."""
    for function in model_functions(module.operation):
        return function
    raise FusecError("--verify: the module has no public function")


def _top_level_ops(function: ir.Operation) -> list[ir.Operation]:
    return [op.operation for op in function.regions[0].blocks[0].operations]


def tag_ops(module: ir.Module) -> None:
    """Give every computing top-level op of the entry function a unique `fusec.verify_id`.

    Constants and `tensor.empty` stay untagged: a tag would keep CSE from merging them, and
    the fused program checked must be the one fusec builds.
    """
    from fusec.passes.grouping import is_compute

    i64 = ir.IntegerType.get_signless(64, module.context)
    for i, op in enumerate(_top_level_ops(_function(module))):
        if is_compute(op):
            op.attributes[TAG] = ir.IntegerAttr.get(i64, i)


def _tag_of(value: ir.Value) -> tuple[int, int] | None:
    """(tag, result number) of the op defining `value`, if it is tagged."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    op = owner.operation
    if TAG not in op.attributes:
        return None
    return ir.IntegerAttr(op.attributes[TAG]).value, ir.OpResult(value).result_number


def _add_results(function: ir.Operation, extra: list[ir.Value]) -> list[int]:
    """Return `extra` from `function` after its own results; the result number of each.

    A value already returned is not returned again (a value returned twice costs the CUDA
    target a copy kernel: the program checked would not be the one fusec builds)."""
    from mlir.dialects import func

    ret = _top_level_ops(function)[-1]
    values = list(ret.operands)
    numbers = []
    for value in extra:
        if value not in values:
            values.append(value)
        numbers.append(values.index(value))
    with ir.InsertionPoint(ret), ret.location:
        func.ReturnOp(values)
    ret.erase()
    ftype = ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value)
    with function.context:
        function.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(list(ftype.inputs), [v.type for v in values]))
    return numbers


def _groups(function: ir.Operation, filename: str | None) -> tuple[list[GroupCheck], list]:
    """The fused groups in order, and (group index, result, tag, result number) probes."""
    groups, probes = [], []
    for op in _top_level_ops(function):
        if op.name != "fusion.group":
            continue
        body = list(op.regions[0].blocks[0].operations)
        check = GroupCheck(
            index=len(groups),
            kind=str(op.attributes["kind"]).strip('"').split("<")[-1].rstrip(">"),
            ops=[o.operation.name for o in body[:-1]
                 if o.operation.name not in ("arith.constant", "tensor.empty")],
            location=format_location(op.location, filename))
        for j, yielded in enumerate(body[-1].operands):
            tag = _tag_of(yielded)
            if tag is None:
                check.unmatched += 1
            else:
                probes.append((check.index, op.results[j], *tag))
        groups.append(check)
    return groups, probes


def _tagged_values(function: ir.Operation, tags: list[tuple[int, int]]) -> list[ir.Value]:
    by_tag = {ir.IntegerAttr(op.attributes[TAG]).value: op
              for op in _top_level_ops(function) if TAG in op.attributes}
    return [by_tag[t].results[r] for t, r in tags]


def _build(module: ir.Module, options: CompileOptions, path: str, filename: str | None) -> None:
    from fusec.compiler import driver

    lower(module, options, filename=filename)
    driver.build(module, options, path, filename)


# --------------------------------------------------------------------------- entry


def require_linalg(module: ir.Module, filename: str | None,
                   options: CompileOptions | None = None, *, run_here: bool = True) -> None:
    """--verify rebuilds the program unfused, so it needs the input before fusion; run here
    (`run_here`), a CUDA check needs this machine's GPU (else: --verify-dir, and
    `fusec-verify DIR` where the GPU is)."""
    if run_here and options is not None and options.resolved_target() == "cuda":
        from fusec.compiler.pipeline import gpu_present

        if not gpu_present():
            raise FusecError("--verify runs the fused and the unfused program, and there is no "
                             "GPU here (libcuda.so.1 and /dev/nvidia0 not found): add "
                             "--verify-dir DIR to build the check, and run `fusec-verify DIR` "
                             "where the GPU is", filename)
    stage = detect_stage(module)
    if stage != "torch":
        raise FusecError(f"--verify needs linalg-on-tensors input (a model.py or the .mlir "
                         f"torch-mlir emits); this input is at stage '{stage}'", filename)


def verify(text: str, filename: str | None, options: CompileOptions | None = None, *,
           seed: int | None = None, examples: tuple | None = None,
           mutate_fused: Callable[[str], str] | None = None,
           work_dir: str | None = None) -> VerifyResult:
    """Compile linalg-on-tensors `text` fused and unfused, run both on fresh random inputs
    and compare every fused group's outputs with the unfused program's same values.

    `mutate_fused` (for tests) rewrites the fused module's text after the fusion stage, to
    check that a wrong fused program is caught. Raises FusecError if the input is not
    linalg-on-tensors; never raises for a mismatch (see `VerifyResult.ok`).
    """
    with tempfile.TemporaryDirectory(prefix="fusec-verify-", dir=work_dir) as tmp:
        bundle = os.path.join(tmp, "check")
        prepare(text, filename, options, bundle, seed=seed, examples=examples,
                mutate_fused=mutate_fused, run_here=True)
        return run_bundle(bundle)




def prepare(text: str, filename: str | None, options: CompileOptions | None, out_dir: str, *,
            seed: int | None = None, examples: tuple | None = None,
            mutate_fused: Callable[[str], str] | None = None, run_here: bool = False) -> str:
    """Build the check's two programs into `out_dir` (fused.so, unfused.so, verify.json and
    the example inputs), without running them: `run_bundle(out_dir)` runs them, here or on
    another machine (a CUDA artifact is built here and checked where the GPU is).
    `run_here`: the caller runs it on this machine next (refused before building for CUDA
    without a GPU).

    The directory appears whole or not at all: it is built beside `out_dir` and renamed.
    Returns `out_dir`.
    """
    from fusec.compiler import driver

    options = options or CompileOptions()
    module = driver.parse(text, filename or "<text>")
    require_linalg(module, filename, options, run_here=run_here)
    _check_bundle_path(out_dir)
    lower(module, options, stop_after="linalg", filename=filename)
    tag_ops(module)
    tagged = module.operation.get_asm(enable_debug_info=True)

    fused_options = dataclasses.replace(options, fusion=True, dump_dir=None)
    fused = driver.parse(tagged, filename or "<text>")
    lower(fused, fused_options, stop_after="fusion", filename=filename)
    if mutate_fused is not None:
        fused = ir.Module.parse(mutate_fused(fused.operation.get_asm(enable_debug_info=True)),
                                fused.context)
    function = _function(fused)
    n_outputs = len(ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value)
                    .results)
    groups, probes = _groups(function, filename)
    fused_numbers = _add_results(function, [p[1] for p in probes])

    unfused_options = dataclasses.replace(options, fusion=False, dump_dir=None)
    unfused = driver.parse(tagged, filename or "<text>")
    unfused_numbers = _add_results(_function(unfused), _tagged_values(
        _function(unfused), [(p[2], p[3]) for p in probes]))

    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (1 << 63))
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=".fusec-verify-", dir=parent)
    try:
        _build(fused, fused_options, os.path.join(partial, "fused.so"), filename)
        _build(unfused, unfused_options, os.path.join(partial, "unfused.so"), filename)
        if examples is not None:
            np.savez(os.path.join(partial, "examples.npz"),
                     *[np.asarray(e) for e in examples])
        description = {
            "source": filename, "target": options.resolved_target(), "seed": seed,
            "outputs": n_outputs, "probes": [[p[0], f, u] for p, f, u in
                                              zip(probes, fused_numbers, unfused_numbers)],
            "groups": [{"index": g.index, "kind": g.kind, "ops": g.ops,
                        "location": g.location, "unmatched": g.unmatched} for g in groups]}
        with open(os.path.join(partial, BUNDLE), "w") as f:
            json.dump(description, f, indent=1)
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)  # an earlier bundle (_check_bundle_path allowed it)
        os.replace(partial, out_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return out_dir


def _check_bundle_path(out_dir: str) -> None:
    """Refuse to replace anything but an empty directory or an earlier bundle."""
    if not os.path.exists(out_dir):
        return
    if not os.path.isdir(out_dir):
        raise FusecError("--verify-dir: exists and is not a directory", out_dir)
    if os.listdir(out_dir) and not os.path.exists(os.path.join(out_dir, BUNDLE)):
        raise FusecError("--verify-dir: the directory is not empty and holds no earlier "
                         f"check ({BUNDLE}); give a new or empty directory", out_dir)


