"""The one numpy interpreter of linalg payloads (scalar `linalg.generic` bodies), target
independent: what constant folding, epilogue recognition and the attention mask's
classification evaluate. Values are float64 or int64 numpy arrays (or numbers);
`evaluate_payload` raises PayloadError for what it does not compute.
"""

from __future__ import annotations

import re
from typing import Any

import mlir.ir as ir
from fusec.passes.grouping import defining_op as defining
from fusec.passes.grouping import value_key


class PayloadError(Exception):
    """A payload (or constant) this interpreter does not compute; the message says why."""


def scalar_body(op: ir.Operation) -> tuple[list[ir.Value], list[ir.Operation], ir.Value] | None:
    """A linalg.generic's block arguments, its ops and its one yielded value."""
    if op.name != "linalg.generic" or len(op.results) != 1:
        return None
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if ops[-1].name != "linalg.yield" or len(ops[-1].operands) != 1:
        return None
    return list(block.arguments), ops[:-1], ops[-1].operands[0]


# The ops it computes: the CUDA target's epilogue recognition evaluates bodies on sample
# values (`body.evaluate_body`), its constant folding whole tensors with the loop indices
# (`folding.evaluate_generic`), the attention mask's classification (row, key) grids.
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


def cmpf_predicate(op: ir.Operation) -> str:
    raw = str(op.attributes["predicate"])
    if raw[:1].isdigit():
        return _CMPF_CODES.get(raw.split(":")[0].strip(), "")
    return re.sub(r"[^a-z]", " ", raw).split()[-1]


def evaluate_payload(op: ir.Operation, args: list[Any], index: Any = None,
                     only: frozenset[str] = PAYLOAD_OPS, captured: bool = True) -> Any:
    """The value a one-result linalg.generic's body yields for the block arguments `args`
    (numpy arrays or numbers), computed in float64 / int64. `index[d]` is loop d's index
    (for `linalg.index`; None: a body that reads one is refused). Raises PayloadError
    for an op not in `only` (a subset of PAYLOAD_OPS) or a value the body does not define
    (a float or integer constant defined outside the body is read when `captured`)."""
    import numpy as np

    parsed = scalar_body(op)
    if parsed is None:
        raise PayloadError("not a one-result linalg.generic")
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
            if isinstance(attr, ir.IntegerAttr):  # an index or integer (an offset of a mask)
                return np.int64(attr.value)
        raise PayloadError("the body reads a value it does not define")

    for o in ops:
        name = o.name
        if name not in only:
            raise PayloadError(f"'{name}' in the body")
        if name == "arith.constant":
            attr = o.attributes["value"]
            if isinstance(attr, ir.FloatAttr):
                env[value_key(o.results[0])] = np.float64(attr.value)
            elif isinstance(attr, ir.IntegerAttr):
                env[value_key(o.results[0])] = np.int64(attr.value)
            continue
        if name == "linalg.index":
            if index is None:
                raise PayloadError("linalg.index in the body")
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
                raise PayloadError(f"cmpi predicate {pred}")
            r = getattr(np, CMPI[pred])(xs[0], xs[1])
        elif name == "arith.cmpf":
            pred = cmpf_predicate(o)
            if pred not in CMPF:
                raise PayloadError(f"cmpf {pred}")
            r = getattr(np, CMPF[pred])(xs[0], xs[1])
        else:  # arith.select
            r = np.where(xs[0], xs[1], xs[2])
        env[value_key(o.results[0])] = r
    return get(yielded)


# Element types a constant read by `constant_array` may have (numpy dtype names), and the most
# elements it reads.
CONSTANT_DTYPES = {"f32": "float32", "f64": "float64", "i64": "int64", "i32": "int32"}
CONSTANT_MAX_ELEMENTS = 1 << 16


def constant_array(value: ir.Value, dtypes: dict[str, str] = CONSTANT_DTYPES,
                   max_elements: int = CONSTANT_MAX_ELEMENTS) -> Any:
    """The numpy value of a dense (non-resource) tensor constant, or None."""
    import math

    import numpy as np

    op = defining(value)
    if op is None or op.name != "arith.constant" or \
            not isinstance(op.results[0].type, ir.RankedTensorType):
        return None
    rt = ir.RankedTensorType(op.results[0].type)
    if not rt.has_static_shape:
        return None
    shape, elt = list(rt.shape), str(rt.element_type)
    attr = op.attributes["value"]
    if elt not in dtypes or not isinstance(attr, ir.DenseElementsAttr) or \
            math.prod(shape) > max_elements:
        return None
    try:
        if attr.is_splat:
            splat = attr.get_splat_value()
            scalar = ir.FloatAttr(splat).value if elt.startswith("f") else \
                ir.IntegerAttr(splat).value
            return np.full(shape, scalar, dtype=dtypes[elt])
        return np.array(attr).reshape(shape).astype(dtypes[elt])
    except Exception:  # noqa: BLE001 - an attribute numpy cannot read: not read
        return None
