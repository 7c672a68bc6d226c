"""CUDA target: body."""

from __future__ import annotations

import re
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
def defining(value: ir.Value) -> ir.Operation | None:
    from fusec.passes.grouping import defining_op

    return defining_op(value)


def single_use(value: ir.Value) -> bool:
    return len(list(value.uses)) == 1


def _scalar_body(op: ir.Operation) -> tuple[list[ir.Value], list[ir.Operation], ir.Value] | None:
    """A linalg.generic's block arguments, its ops and its one yielded value."""
    if op.name != "linalg.generic" or len(op.results) != 1:
        return None
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if ops[-1].name != "linalg.yield" or len(ops[-1].operands) != 1:
        return None
    return list(block.arguments), ops[:-1], ops[-1].operands[0]


# The one numpy interpreter of payloads (scalar linalg.generic bodies): the epilogue
# recognition evaluates bodies on sample values (`evaluate_body`), the constant folding on
# whole tensors with the loop indices (`folding.evaluate_generic`).
UNARY_OPS = {"math.erf": "erf", "math.sqrt": "sqrt", "math.tanh": "tanh", "math.exp": "exp",
             "arith.negf": "negative"}
FLOAT_OPS = {"arith.addf": "add", "arith.subf": "subtract", "arith.mulf": "multiply",
             "arith.divf": "divide", "arith.maximumf": "maximum", "arith.maxnumf": "maximum",
             "arith.minimumf": "minimum", "arith.minnumf": "minimum"}
INT_OPS = {"arith.addi": "add", "arith.subi": "subtract", "arith.muli": "multiply",
           "arith.maxsi": "maximum", "arith.minsi": "minimum"}
# Casts: values are float64 or int64 here, so a cast only changes which of the two.
CAST_OPS = ("arith.index_cast", "arith.extsi", "arith.trunci", "arith.sitofp", "arith.extf",
            "arith.truncf")
CMPI = {0: "equal", 1: "not_equal", 2: "less", 3: "less_equal", 4: "greater",
        5: "greater_equal", 6: "less", 7: "less_equal", 8: "greater", 9: "greater_equal"}
CMPF = {"ogt": "greater", "ugt": "greater", "oge": "greater_equal", "uge": "greater_equal",
        "olt": "less", "ult": "less", "ole": "less_equal", "ule": "less_equal"}
_CMPF_CODES = {"2": "ogt", "3": "oge", "4": "olt", "5": "ole", "9": "ugt", "10": "uge",
               "11": "ult", "12": "ule"}
PAYLOAD_OPS = frozenset({"arith.constant", "arith.cmpi", "arith.cmpf", "arith.select",
                         "linalg.index", *UNARY_OPS, *FLOAT_OPS, *INT_OPS, *CAST_OPS})


def _cmpf_predicate(op: ir.Operation) -> str:
    raw = str(op.attributes["predicate"])
    if raw[:1].isdigit():
        return _CMPF_CODES.get(raw.split(":")[0].strip(), "")
    return re.sub(r"[^a-z]", " ", raw).split()[-1]


def evaluate_payload(op: ir.Operation, args: list[Any], index: Any = None,
                     only: frozenset[str] = PAYLOAD_OPS, captured: bool = True) -> Any:
    """The value a one-result linalg.generic's body yields for the block arguments `args`
    (numpy arrays or numbers), computed in float64 / int64. `index[d]` is loop d's index
    (for `linalg.index`; None: a body that reads one is refused). Raises CudaCodegenError
    for an op not in `only` (a subset of PAYLOAD_OPS) or a value the body does not define
    (a float constant defined outside the body is read when `captured`)."""
    import numpy as np

    parsed = _scalar_body(op)
    if parsed is None:
        raise CudaCodegenError("not a one-result linalg.generic")
    block_args, ops, yielded = parsed
    env: dict[int, Any] = {value_key(a): x for a, x in zip(block_args, args)}

    def get(v: ir.Value) -> Any:
        key = value_key(v)
        if key in env:
            return env[key]
        producer = defining(v) if captured else None
        if producer is not None and producer.name == "arith.constant":
            attr = producer.attributes["value"]
            if isinstance(attr, ir.FloatAttr):
                return float(attr.value)
        raise CudaCodegenError("the body reads a value it does not define")

    for o in ops:
        name = o.name
        if name not in only:
            raise CudaCodegenError(f"'{name}' in the body")
        if name == "arith.constant":
            attr = o.attributes["value"]
            if isinstance(attr, ir.FloatAttr):
                env[value_key(o.results[0])] = np.float64(attr.value)
            elif isinstance(attr, ir.IntegerAttr):
                env[value_key(o.results[0])] = np.int64(attr.value)
            continue
        if name == "linalg.index":
            if index is None:
                raise CudaCodegenError("linalg.index in the body")
            env[value_key(o.results[0])] = index[ir.IntegerAttr(o.attributes["dim"]).value]
            continue
        xs = [get(v) for v in o.operands]
        if name == "math.erf":
            from math import erf

            r = np.vectorize(erf)(xs[0])
        elif name in UNARY_OPS:
            r = getattr(np, UNARY_OPS[name])(xs[0])
        elif name in FLOAT_OPS:
            r = getattr(np, FLOAT_OPS[name])(xs[0], xs[1])
        elif name in INT_OPS:
            r = getattr(np, INT_OPS[name])(xs[0], xs[1])
        elif name in CAST_OPS:
            to = str(o.results[0].type)
            r = np.asarray(xs[0]).astype(np.float64 if to.startswith(("f", "bf")) else np.int64)
        elif name == "arith.cmpi":
            pred = ir.IntegerAttr(o.attributes["predicate"]).value
            if pred not in CMPI:
                raise CudaCodegenError(f"cmpi predicate {pred}")
            r = getattr(np, CMPI[pred])(xs[0], xs[1])
        elif name == "arith.cmpf":
            pred = _cmpf_predicate(o)
            if pred not in CMPF:
                raise CudaCodegenError(f"cmpf {pred}")
            r = getattr(np, CMPF[pred])(xs[0], xs[1])
        else:  # arith.select
            r = np.where(xs[0], xs[1], xs[2])
        env[value_key(o.results[0])] = r
    return get(yielded)


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


def cast_types(op: ir.Operation) -> tuple[str, str]:
    ins = ir.RankedTensorType(op.operands[0].type).element_type
    outs = ir.RankedTensorType(op.results[0].type).element_type
    return str(ins), str(outs)


def group_body_ops(group: ir.Operation) -> list[ir.Operation]:
    """A group's ops without the terminator and the constants/empties cloned into groups."""
    from fusec.passes.grouping import CLONED_INTO_GROUPS

    return [o.operation for o in list(group.regions[0].blocks[0].operations)[:-1]
            if o.operation.name not in CLONED_INTO_GROUPS]


