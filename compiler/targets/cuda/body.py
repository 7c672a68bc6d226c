"""CUDA target: body."""

from __future__ import annotations

from typing import Any

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import parse_map, value_key
from fusec.compiler.targets.cuda.device import CudaCodegenError

# ---------------------------------------------------------------- matmul-rooted groups: cuBLASLt
#
# A group whose root is a matmul / batch_matmul is split, before code generation, into up to
# three groups: a *prologue* (whatever the matmul's operands need that cuBLASLt cannot absorb,
# through the emitter or the fallback), the *gemm* (one cuBLASLt call: transposes of the last
# two dims become transpose flags, contiguous reshapes and bf16/f16->f32 casts of operands are
# free, and the first elementwise ops on the result become cuBLASLt's fused epilogue when they
# match it: + bias row vector, ReLU, f32->bf16/f16 rounding, GELU), and an *epilogue* (the
# rest, one fused elementwise kernel of the emitter). The decision and its reason live in the
# IR (`fusion.path = "gemm"`, `fusion.why`, `fusion.gemm_epilogue` on the gemm group).
#
# GELU: torch's default GELU is the erf form, cuBLASLt's the tanh approximation (they differ
# by up to 4.7e-4 absolute, about 1e-4 relative on normal data): above fp32's 1e-5 tolerance,
# far below bf16/f16 rounding (2^-8 relative). So GELU goes into cuBLASLt only when the
# output is 16-bit; in fp32 it stays in the elementwise epilogue kernel.

GEMM_OPS = ("linalg.matmul", "linalg.batch_matmul")
from fusec.passes.grouping import RESHAPE_OPS  # noqa: E402,F401 - the rooms import it here
from fusec.passes.grouping import use_owner  # noqa: E402
def defining(value: ir.Value) -> ir.Operation | None:
    from fusec.passes.grouping import defining_op

    return defining_op(value)


def single_use(value: ir.Value) -> bool:
    return len(list(value.uses)) == 1


from fusec.passes.payload import (  # noqa: E402,F401 - the rooms import them here
    CAST_OPS,
    CMPF,
    CMPI,
    FLOAT_OPS,
    INT_OPS,
    PAYLOAD_OPS,
    UNARY_OPS,
    PayloadError,
)
from fusec.passes.payload import evaluate_payload as _evaluate_payload  # noqa: E402
from fusec.passes.payload import scalar_body as _scalar_body  # noqa: E402


def evaluate_payload(op: ir.Operation, args: list[Any], index: Any = None,
                     only: frozenset[str] = PAYLOAD_OPS, captured: bool = True) -> Any:
    """passes/payload.evaluate_payload, its refusals as CudaCodegenError."""
    try:
        return _evaluate_payload(op, args, index, only, captured)
    except PayloadError as e:
        raise CudaCodegenError(str(e)) from None


# What the epilogue recognition evaluates: no index arithmetic, casts between floats only.
EPILOGUE_OPS = frozenset({"arith.constant", "arith.cmpf", "arith.select", "arith.extf",
                          "arith.truncf", *UNARY_OPS, *FLOAT_OPS})


def evaluate_body(op: ir.Operation, args: list[Any]) -> Any:
    """The value a linalg.generic's scalar body yields for `args` (numpy float64 arrays).

    Recognising an epilogue by what it computes, not by how torch-mlir spelled it, makes the
    match independent of the op order in the body; any op not in EPILOGUE_OPS means no match
    (CudaCodegenError).
    """
    import numpy as np

    # Samples outside an op's domain (sqrt of a negative sample) give NaNs there: a NaN
    # never matches an epilogue, which is the answer; no warning is due.
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return evaluate_payload(op, args, only=EPILOGUE_OPS)


def samples() -> Any:
    import numpy as np

    return np.linspace(-4.0, 4.0, 81)


def _is_elementwise_1(op: ir.Operation) -> bool:
    """One input, one output, identity maps, all parallel."""
    if op.name != "linalg.generic" or len(op.operands) != 2:
        return False
    try:
        maps = [parse_map(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    except CudaCodegenError:  # a window's map (im2col): not elementwise
        return False
    return all(m.results == tuple(range(m.num_dims)) for m in maps) and all(
        "parallel" in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"]))


def unary_kind(op: ir.Operation) -> str | None:
    """'cast' (extf/truncf only), 'relu', 'gelu' (erf form) or None, by evaluation."""
    import numpy as np

    if not _is_elementwise_1(op):
        return None
    parsed = _scalar_body(op)
    if parsed is None:
        return None
    names = [o.name for o in parsed[1] if o.name != "arith.constant"]
    if names in (["arith.extf"], ["arith.truncf"]):
        return "cast"
    x = samples()
    try:
        y = evaluate_body(op, [x, np.zeros_like(x)])
    except CudaCodegenError:
        return None
    from math import erf

    gelu = 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2.0)))
    if np.allclose(y, np.maximum(x, 0), rtol=1e-6, atol=1e-6):
        return "relu"
    # bf16 constants (sqrt(2) rounded) move the value by ~2^-8 relative: still erf-GELU.
    if np.allclose(y, gelu, rtol=1e-2, atol=1e-2):
        return "gelu"
    return None


def _elementwise_like(op: ir.Operation, shape: list[int]) -> bool:
    """A linalg.generic of identity maps, all parallel, every operand of `shape`."""
    if op.name != "linalg.generic":
        return False
    try:
        maps = [parse_map(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    except CudaCodegenError:
        return False
    return all(m.results == tuple(range(m.num_dims)) for m in maps) and all(
        "parallel" in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])) and \
        all(list(ir.RankedTensorType(v.type).shape) == shape for v in op.operands)


def gelu_cone(value: ir.Value, limit: int = 32) -> list[ir.Operation] | None:
    """The elementwise ops computing GELU of `value` as a DAG of several ops (GPT-2's tanh
    form after its cast to f32: x feeds both x^3 and the final product, so no op alone is
    GELU and `unary_kind` cannot see it), in order, the last one's result the GELU; None
    if there is none. The ops read nothing but `value`, each other's results and their
    bodies' constants; every result but the last is used by them alone. Recognised by
    evaluation, as `unary_kind` does: within 1e-2 of erf-GELU on `samples()` (the tanh
    form is 4.7e-4 from it at most)."""
    from math import erf

    import numpy as np

    shape = list(ir.RankedTensorType(value.type).shape)
    inside: list[ir.Operation] = []
    known = {value_key(value)}
    frontier = [use_owner(u) for u in value.uses]
    progress = True
    while progress and len(inside) < limit:
        progress = False
        for op in list(frontier):
            if any(op == o for o in inside) or not _elementwise_like(op, shape):
                continue
            ins = list(op.operands)[:len(op.operands) - 1]
            if not all(value_key(v) in known for v in ins):
                continue
            inside.append(op)
            known.add(value_key(op.results[0]))
            frontier += [use_owner(u) for u in op.results[0].uses]
            progress = True
    x = samples()
    gelu = 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2.0)))
    # Every op's values on the samples, each evaluated once (in order, so its inputs are
    # there); one the evaluator cannot take is left out, and so is whatever reads it.
    env = {value_key(value): x}
    for op in inside:
        ins = [env.get(value_key(v)) for v in list(op.operands)[:len(op.operands) - 1]]
        if any(i is None for i in ins):
            continue
        try:
            env[value_key(op.results[0])] = evaluate_body(op, ins + [np.zeros_like(x)])
        except CudaCodegenError:
            continue
    best = None
    for end in range(len(inside)):
        cone = _cone(inside[:end + 1])
        # Nothing but the cone reads `value` (the GEMM writes the GELU only).
        if cone is None or len(cone) < 2 or \
                not all(any(use_owner(u) == o for o in cone) for u in value.uses):
            continue
        y = env.get(value_key(cone[-1].results[0]))
        if y is None:
            continue
        y = np.asarray(y, dtype=float)
        if y.shape == x.shape and np.allclose(y, gelu, rtol=1e-2, atol=1e-2):
            best = cone
    return best


def _cone(ops: list[ir.Operation]) -> list[ir.Operation] | None:
    """The ops of `ops` (in order) that its last one depends on, if every result among them
    but the last's is used by them alone; else None."""
    last = ops[-1]
    need = {value_key(v) for v in last.operands}
    cone = [last]
    for op in reversed(ops[:-1]):
        if value_key(op.results[0]) in need:
            cone.append(op)
            need |= {value_key(v) for v in op.operands}
    cone.reverse()
    for op in cone[:-1]:
        if not all(any(use_owner(u) == o for o in cone) for u in op.results[0].uses):
            return None
    return cone


def cast_types(op: ir.Operation) -> tuple[str, str]:
    ins = ir.RankedTensorType(op.operands[0].type).element_type
    outs = ir.RankedTensorType(op.results[0].type).element_type
    return str(ins), str(outs)


def group_body_ops(group: ir.Operation) -> list[ir.Operation]:
    """A group's ops without the terminator and the constants/empties cloned into groups."""
    from fusec.passes.grouping import CLONED_INTO_GROUPS

    return [o.operation for o in list(group.regions[0].blocks[0].operations)[:-1]
            if o.operation.name not in CLONED_INTO_GROUPS]


