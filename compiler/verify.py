"""`fusec --verify`: check the fused program against the unfused one, kernel by kernel.

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
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fusec.compiler.diagnostics import FusecError, format_location
from fusec.compiler.pipeline import CompileOptions, detect_stage, lower
from fusec.passes.grouping import model_functions
from mlir import ir

TAG = "fusec.verify_id"

# Relative error ||fused - unfused|| / ||unfused|| allowed per element type.
TOLERANCE = {"float32": 1e-4, "float64": 1e-9, "float16": 1e-2, "bfloat16": 1e-2}


class VerificationError(FusecError):
    """The fused program disagrees with the unfused one; `result` holds the details."""

    def __init__(self, message: str, location: str | None, result: VerifyResult) -> None:
        super().__init__(message, location)
        self.result = result


@dataclass
class GroupCheck:
    """One fused group (= one kernel) and how its outputs compare with the unfused program."""

    index: int
    kind: str
    ops: list[str]
    location: str | None
    errors: list[float] = field(default_factory=list)  # one per probed output
    tolerances: list[float] = field(default_factory=list)  # the same outputs' tolerances
    unmatched: int = 0  # outputs that could not be found in the unfused program

    @property
    def symbol(self) -> str:
        return f"fusec_kernel_{self.index}"

    def describe(self) -> str:
        counts: dict[str, int] = {}
        for name in self.ops:
            counts[name] = counts.get(name, 0) + 1
        ops = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in counts.items())
        return f"kernel {self.index} ({self.symbol}, {self.kind}: {ops})"


@dataclass
class VerifyResult:
    """The outcome of `verify`: per-output and per-kernel relative errors."""

    output_errors: list[float]
    groups: list[GroupCheck]
    tolerances: list[float]
    first_bad: GroupCheck | None
    ok: bool
    kernels: tuple[int, int] = (0, 0)  # (fused, unfused) kernel counts

    def kernel_lines(self) -> list[str]:
        """One line per fused kernel: its worst relative error against the unfused program."""
        lines = []
        for g in self.groups:
            if not g.errors:
                lines.append(f"  {g.describe()}: not compared (outputs not found unfused)")
                continue
            worst = max(g.errors, key=_nan_last)
            bad = any(_exceeds(e, t) for e, t in zip(g.errors, g.tolerances))
            lines.append(f"  {g.describe()}: relative error {worst:.2e}"
                         f"{'  <-- DIFFERS' if bad else ''}")
        return lines

    def summary(self) -> str:
        probed = sum(1 for g in self.groups if g.errors)
        worst = max([0.0, *self.output_errors], key=_nan_last)
        head = "OK" if self.ok else "MISMATCH"
        return (f"verify {head}: fused ({self.kernels[0]} kernels) vs unfused "
                f"({self.kernels[1]} kernels) on random inputs: {probed} of "
                f"{len(self.groups)} fused kernels compared, worst output relative error "
                f"{worst:.2e}")


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


def _add_results(function: ir.Operation, extra: list[ir.Value]) -> None:
    """Return `extra` from `function` after its own results."""
    from mlir.dialects import func

    ret = _top_level_ops(function)[-1]
    values = list(ret.operands) + extra
    with ir.InsertionPoint(ret), ret.location:
        func.ReturnOp(values)
    ret.erase()
    ftype = ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value)
    with function.context:
        function.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(list(ftype.inputs), [v.type for v in values]))


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


# --------------------------------------------------------------------------- comparing


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """||actual - expected|| / ||expected|| in float64; NaN where they disagree on NaNs.

    Integer and boolean values must match exactly: the error is the fraction that differ.
    """
    if expected.dtype.kind in "biu":
        return float(np.mean(actual != expected)) if expected.size else 0.0
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(e)):
        return float("nan")
    finite = ~np.isnan(e)
    diff = float(np.linalg.norm(a[finite] - e[finite]))
    scale = float(np.linalg.norm(e[finite]))
    if scale == 0.0:
        return diff  # an all-zero reference: absolute error
    return diff / scale


def random_inputs(signature: Any, rng: np.random.Generator,
                  examples: tuple | None = None) -> list[np.ndarray]:
    """Fresh inputs for `signature` (a fusec.runtime.Signature): standard normal floats;
    integers from the example inputs when given (they are often indices), else small
    non-negative integers."""
    arrays = []
    for i, spec in enumerate(signature.inputs):
        dtype = spec.numpy_dtype
        if spec.dtype in TOLERANCE and spec.dtype != "bfloat16":
            arrays.append(rng.standard_normal(spec.shape).astype(dtype))
        elif examples is not None and i < len(examples):
            arrays.append(np.array(examples[i], dtype=dtype).reshape(spec.shape))
        elif spec.dtype == "bool":
            arrays.append(rng.random(spec.shape) < 0.5)
        elif spec.dtype == "bfloat16":
            bits = rng.standard_normal(spec.shape).astype(np.float32).view(np.uint32) >> 16
            arrays.append(bits.astype(np.uint16).view(dtype))
        else:
            arrays.append(rng.integers(0, 4, spec.shape).astype(dtype))
    return arrays


def _nan_last(error: float) -> float:
    """Sort key: NaN is the worst error of all."""
    return math.inf if math.isnan(error) else error


def _exceeds(error: float, tolerance: float) -> bool:
    return math.isnan(error) or error > tolerance  # NaN always fails


# --------------------------------------------------------------------------- entry


def require_linalg(module: ir.Module, filename: str | None,
                   options: CompileOptions | None = None) -> None:
    """--verify rebuilds the program unfused, so it needs the input before fusion; and it
    runs both programs here, so it needs the CPU target."""
    if options is not None and options.resolved_target() != "cpu":
        raise FusecError(f"--verify runs both programs on this machine's CPU: it supports "
                         f"--target cpu only, not '{options.resolved_target()}'", filename)
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
    from fusec import runtime
    from fusec.compiler import driver

    options = options or CompileOptions()
    module = driver.parse(text, filename or "<text>")
    require_linalg(module, filename, options)
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
    _add_results(function, [p[1] for p in probes])

    unfused_options = dataclasses.replace(options, fusion=False, dump_dir=None)
    unfused = driver.parse(tagged, filename or "<text>")
    _add_results(_function(unfused), _tagged_values(_function(unfused),
                                                    [(p[2], p[3]) for p in probes]))

    with tempfile.TemporaryDirectory(prefix="fusec-verify-", dir=work_dir) as tmp:
        fused_path, unfused_path = os.path.join(tmp, "fused.so"), os.path.join(tmp, "unfused.so")
        _build(fused, fused_options, fused_path, filename)
        _build(unfused, unfused_options, unfused_path, filename)
        fused_model, unfused_model = runtime.load(fused_path), runtime.load(unfused_path)
        inputs = random_inputs(unfused_model.signature, np.random.default_rng(seed), examples)
        got = _as_tuple(fused_model(*inputs))
        want = _as_tuple(unfused_model(*inputs))
        specs = unfused_model.signature.outputs
        kernels = (len(fused_model.kernels), len(unfused_model.kernels))
    result = _compare(got, want, specs, n_outputs, groups, probes)
    result.kernels = kernels
    return result


def _as_tuple(result: Any) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def _as_float(array: np.ndarray, dtype: str) -> np.ndarray:
    """bfloat16 comes back as raw uint16 bits without ml_dtypes: compare it as numbers."""
    if dtype == "bfloat16":
        if array.dtype == np.uint16:
            return (array.astype(np.uint32) << 16).view(np.float32)
        return array.astype(np.float32)
    return array


def _compare(got: tuple, want: tuple, specs: Any, n_outputs: int, groups: list[GroupCheck],
             probes: list) -> VerifyResult:
    tolerances = [TOLERANCE.get(s.dtype, 0.0) for s in specs]
    got = tuple(_as_float(a, s.dtype) for a, s in zip(got, specs))
    want = tuple(_as_float(a, s.dtype) for a, s in zip(want, specs))
    output_errors = [relative_error(g, w) for g, w in zip(got[:n_outputs], want[:n_outputs])]
    for k, (group_index, *_rest) in enumerate(probes):
        i = n_outputs + k
        groups[group_index].errors.append(relative_error(got[i], want[i]))
        groups[group_index].tolerances.append(tolerances[i])
    first_bad = next((g for g in groups
                      if any(_exceeds(e, t) for e, t in zip(g.errors, g.tolerances))), None)
    outputs_ok = not any(_exceeds(e, t) for e, t in zip(output_errors, tolerances))
    return VerifyResult(output_errors, groups, tolerances[:n_outputs], first_bad,
                        ok=outputs_ok and first_bad is None)


def check_or_raise(result: VerifyResult, filename: str | None) -> None:
    """Raise VerificationError naming the first differing kernel (or output) if not ok."""
    if result.ok:
        return
    bad = result.first_bad
    if bad is not None:
        k = next(k for k, (e, t) in enumerate(zip(bad.errors, bad.tolerances)) if _exceeds(e, t))
        raise VerificationError(
            f"--verify: {bad.describe()} differs from the unfused program: output {k} of the "
            f"kernel has relative error {bad.errors[k]:.2e} (tolerance {bad.tolerances[k]:.0e})",
            bad.location or filename, result)
    index, error = next((i, e) for i, (e, t) in enumerate(zip(result.output_errors,
                                                              result.tolerances))
                        if _exceeds(e, t))
    raise VerificationError(
        f"--verify: output {index} differs from the unfused program: relative error "
        f"{error:.2e} (tolerance {result.tolerances[index]:.0e}); no single kernel could be "
        "named (its outputs could not be matched)", filename, result)
