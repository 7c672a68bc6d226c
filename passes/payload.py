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
from fusec.passes.grouping import iterator_kinds, value_key


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
            "arith.truncf", "arith.extui", "arith.index_castui", "arith.uitofp")
CMPI = {0: "equal", 1: "not_equal", 2: "less", 3: "less_equal", 4: "greater",
        5: "greater_equal", 6: "less", 7: "less_equal", 8: "greater", 9: "greater_equal"}
CMPF = {"ogt": "greater", "ugt": "greater", "oge": "greater_equal", "uge": "greater_equal",
        "olt": "less", "ult": "less", "ole": "less_equal", "ule": "less_equal",
        "oeq": "equal", "une": "not_equal"}  # (x une x: x is NaN, as numpy's x != x)
_CMPF_CODES = {"0": "false", "1": "oeq", "2": "ogt", "3": "oge", "4": "olt", "5": "ole",
               "6": "one", "7": "ord", "8": "ueq", "9": "ugt", "10": "uge", "11": "ult",
               "12": "ule", "13": "une", "14": "uno", "15": "true"}
# Bitwise ops: on i1 logical (an i1 `true` reads as -1 here), else two's complement in int64.
BIT_OPS = {"arith.andi": ("logical_and", "bitwise_and"), "arith.ori": ("logical_or", "bitwise_or"),
           "arith.xori": ("logical_xor", "bitwise_xor")}
PAYLOAD_OPS = frozenset({"arith.constant", "arith.cmpi", "arith.cmpf", "arith.select",
                         "linalg.index", *UNARY_OPS, *FLOAT_OPS, *INT_OPS, *CAST_OPS,
                         *BIT_OPS})


def cmpf_predicate(op: ir.Operation) -> str:
    raw = str(op.attributes["predicate"])
    if raw[:1].isdigit():
        return _CMPF_CODES.get(raw.split(":")[0].strip(), "")
    return re.sub(r"[^a-z]", " ", raw).split()[-1]


def evaluate_payload(op: ir.Operation, args: list[Any], index: Any = None,
                     only: frozenset[str] = PAYLOAD_OPS, captured: bool = True,
                     tensors: Any = None) -> Any:
    """The value a one-result linalg.generic's body yields for the block arguments `args`
    (numpy arrays or numbers), computed in float64 / int64. `index[d]` is loop d's index
    (for `linalg.index`; None: a body that reads one is refused). Raises PayloadError
    for an op not in `only` (a subset of PAYLOAD_OPS) or a value the body does not define
    (a float or integer constant defined outside the body is read when `captured`).
    `tensors(value)`: the numpy value of a tensor the body reads with `tensor.extract`
    (None: not known; the op is then refused)."""
    parsed = scalar_body(op)
    if parsed is None:
        raise PayloadError("not a one-result linalg.generic")
    return evaluate_region(*parsed, args, index, only, captured, tensors)


def evaluate_region(block_args: list[ir.Value], ops: list[ir.Operation], yielded: ir.Value,
                    args: list[Any], index: Any = None, only: frozenset[str] = PAYLOAD_OPS,
                    captured: bool = True, tensors: Any = None, rounded: bool = False) -> Any:
    """`evaluate_payload` of a region given as its block arguments, its ops (the terminator
    left out) and its yielded value: a generic's body, a scan's combiner. With `rounded`,
    each op's value is rounded to its result type (`round_to_element`), as a kernel rounds
    it: +, -, *, / and sqrt are then IEEE's bit for bit (f64 holds an f32 or 16-bit
    result's double rounding exactly), the transcendentals correctly rounded."""
    import numpy as np

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
            if isinstance(attr, ir.BoolAttr):
                return np.bool_(attr.value)
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
            elif isinstance(attr, ir.BoolAttr):
                env[value_key(o.results[0])] = np.bool_(attr.value)
            continue
        if name == "linalg.index":
            if index is None:
                raise PayloadError("linalg.index in the body")
            env[value_key(o.results[0])] = index[ir.IntegerAttr(o.attributes["dim"]).value]
            continue
        if name == "tensor.extract" and tensors is not None:
            source = tensors(o.operands[0])
            if source is None:
                raise PayloadError("tensor.extract from a tensor not known here")
            at = tuple(np.asarray(get(v), dtype=np.int64) for v in list(o.operands)[1:])
            env[value_key(o.results[0])] = source[at] if at else source[()]
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
        elif name in BIT_OPS:
            logical, bitwise = BIT_OPS[name]
            r = getattr(np, logical if str(o.results[0].type) == "i1" else bitwise)(xs[0], xs[1])
        elif name in CAST_OPS:
            to = str(o.results[0].type)
            # (no copy where the value already has the type: masks evaluate whole grids)
            r = np.asarray(xs[0], dtype=np.float64 if to.startswith(("f", "bf")) else np.int64)
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
        env[value_key(o.results[0])] = round_to_element(r, str(o.results[0].type)) \
            if rounded else r
    return get(yielded)


# Integer element types -> the numpy dtype they are held and wrap in.
INTS = {"i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "index": "int64"}


def round_to_element(x: Any, element: str) -> Any:
    """`x` (float64 / int64 / bool values) as an element of type `element` holds it, read
    back as float64 / int64 / bool: floats rounded to nearest-even (bf16 through f32, as
    MLIR and torch round), integers wrapped."""
    import numpy as np

    if element == "bf16":
        return from_bf16_bits(bf16_bits(x))
    if element in ("f32", "f16"):
        return np.asarray(x).astype(np.float32 if element == "f32" else np.float16) \
            .astype(np.float64)
    if element in INTS:
        return np.asarray(x).astype(INTS[element]).astype(np.int64)
    return x


# Element types a constant read by `constant_array` may have (numpy dtype names), and the most
# elements it reads.
CONSTANT_DTYPES = {"f32": "float32", "f64": "float64", "i64": "int64", "i32": "int32"}
CONSTANT_MAX_ELEMENTS = 1 << 16


def constant_array(value: ir.Value, dtypes: dict[str, str] = CONSTANT_DTYPES,
                   max_elements: int = CONSTANT_MAX_ELEMENTS, scalars: bool = False) -> Any:
    """The numpy value of a dense (non-resource) tensor constant whose element type is a key
    of `dtypes`, as that key's dtype; with `scalars`, of a scalar constant too (a numpy
    scalar); or None. A bf16 constant is read only as a splat (numpy has no bf16 buffer)."""
    import math

    import numpy as np

    op = defining(value)
    if op is None or op.name != "arith.constant":
        return None
    t = op.results[0].type
    attr = op.attributes["value"]
    if not isinstance(t, ir.RankedTensorType):
        if not scalars or str(t) not in dtypes or \
                not isinstance(attr, (ir.BoolAttr, ir.FloatAttr, ir.IntegerAttr)):
            return None
        return np.dtype(dtypes[str(t)]).type(attr.value)
    rt = ir.RankedTensorType(t)
    if not rt.has_static_shape:
        return None
    shape, elt = list(rt.shape), str(rt.element_type)
    if elt not in dtypes or not isinstance(attr, ir.DenseElementsAttr) or \
            math.prod(shape) > max_elements:
        return None
    try:
        if attr.is_splat:
            splat = attr.get_splat_value()
            scalar = ir.FloatAttr(splat).value if elt.startswith(("f", "bf")) else \
                ir.IntegerAttr(splat).value
            return np.full(shape, scalar, dtype=dtypes[elt])
        return np.array(attr).reshape(shape).astype(dtypes[elt])
    except Exception:  # noqa: BLE001 - an attribute numpy cannot read (bf16): not read
        return None


def bf16_bits(x: Any) -> Any:
    """`x` (a number or an array) as bf16 bit patterns (uint16), rounded to nearest-even
    through f32 as MLIR and torch round; a NaN is the quiet NaN 0x7FC0, as torch's."""
    import numpy as np

    f32 = np.asarray(x, dtype=np.float32)
    bits = f32.view(np.uint32)
    # In uint32, in place (6x faster than in uint64 on a 4096 x 4096 weight: the norm fold's
    # W'): only a NaN's pattern can overflow, and a NaN is replaced.
    rounded = np.asarray((bits >> 16) & 1)
    rounded += bits
    rounded += 0x7FFF
    rounded >>= 16
    return np.where(np.isnan(f32), np.uint16(0x7FC0), rounded.astype(np.uint16))


def from_bf16_bits(bits: Any) -> Any:
    """bf16 bit patterns (uint16) as the float64 values they hold."""
    import numpy as np

    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)


# Unary ops that never decrease: an interval maps to the interval of its ends.
MONOTONE_OPS = {"math.erf": "erf", "math.sqrt": "sqrt", "math.tanh": "tanh", "math.exp": "exp"}


def evaluate_payload_intervals(op: ir.Operation, args: list[Any], index: list) -> Any:
    """`evaluate_payload` over intervals: each value is a (lo, hi) pair of float64 arrays (or
    numbers) holding every value it takes for block arguments in `args`' intervals and loop
    indices in `index`'s; an i1 is (0, 0), (1, 1) or (0, 1) (not known). The bounds are
    sound, not tight; a NaN bound (inf - inf) widens to the whole line. Raises PayloadError
    for an op it does not bound (bitwise ops on integers, remainders, ...). What the
    attention mask's classification proves over blocks of a grid too large to evaluate."""
    import numpy as np

    parsed = scalar_body(op)
    if parsed is None:
        raise PayloadError("not a one-result linalg.generic")
    block_args, ops, yielded = parsed
    env: dict[int, Any] = {value_key(a): x for a, x in zip(block_args, args)}

    def point(attr: ir.Attribute) -> Any:
        if isinstance(attr, ir.FloatAttr):
            v = float(attr.value)
        elif isinstance(attr, ir.BoolAttr):
            v = 1.0 if attr.value else 0.0
        elif isinstance(attr, ir.IntegerAttr):
            v = float(attr.value)
            if str(attr.type) == "i1":
                v = 1.0 if v else 0.0
        else:
            raise PayloadError("a constant that is not a number")
        return (np.float64(v), np.float64(v))

    def get(v: ir.Value) -> Any:
        key = value_key(v)
        if key in env:
            return env[key]
        producer = defining(v)
        if producer is not None and producer.name == "arith.constant":
            return point(producer.attributes["value"])
        raise PayloadError("the body reads a value it does not define")

    def whole(lo: Any, hi: Any) -> tuple:
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        return (np.where(np.isnan(lo), -np.inf, lo), np.where(np.isnan(hi), np.inf, hi))

    def truth(t: Any, f: Any) -> tuple:
        """An i1 from where it is surely true and surely false."""
        return (np.where(t, 1.0, 0.0), np.where(f, 0.0, 1.0))

    for o in ops:
        name = o.name
        if name == "arith.constant":
            env[value_key(o.results[0])] = point(o.attributes["value"])
            continue
        if name == "linalg.index":
            env[value_key(o.results[0])] = index[ir.IntegerAttr(o.attributes["dim"]).value]
            continue
        xs = [get(v) for v in o.operands]
        with np.errstate(all="ignore"):
            if name in ("arith.addf", "arith.addi"):
                r = whole(xs[0][0] + xs[1][0], xs[0][1] + xs[1][1])
            elif name in ("arith.subf", "arith.subi"):
                r = whole(xs[0][0] - xs[1][1], xs[0][1] - xs[1][0])
            elif name in ("arith.mulf", "arith.muli"):
                p = [a * b for a in xs[0] for b in xs[1]]
                if any(np.isnan(x).any() for x in p):
                    r = whole(np.nan, np.nan)
                else:
                    r = (np.minimum.reduce(p), np.maximum.reduce(p))
            elif name == "arith.divf":
                lo, hi = xs[1]
                if not (np.all(lo == hi) and np.all(lo != 0)):
                    raise PayloadError("a divide by a value that is not one known number")
                a, b = xs[0][0] / lo, xs[0][1] / lo
                r = whole(np.minimum(a, b), np.maximum(a, b))
            elif name in ("arith.maximumf", "arith.maxnumf", "arith.maxsi"):
                r = (np.maximum(xs[0][0], xs[1][0]), np.maximum(xs[0][1], xs[1][1]))
            elif name in ("arith.minimumf", "arith.minnumf", "arith.minsi"):
                r = (np.minimum(xs[0][0], xs[1][0]), np.minimum(xs[0][1], xs[1][1]))
            elif name == "arith.negf":
                r = (-xs[0][1], -xs[0][0])
            elif name in MONOTONE_OPS:
                f = np.vectorize(__import__("math").erf) if name == "math.erf" \
                    else getattr(np, MONOTONE_OPS[name])
                r = whole(f(xs[0][0]), f(xs[0][1]))
            elif name in CAST_OPS:
                r = xs[0]
            elif name in ("arith.cmpi", "arith.cmpf"):
                if name == "arith.cmpi":
                    code = ir.IntegerAttr(o.attributes["predicate"]).value
                    if code not in CMPI:
                        raise PayloadError(f"cmpi predicate {code}")
                    if code >= 6 and not (np.all(xs[0][0] >= 0) and np.all(xs[1][0] >= 0)):
                        raise PayloadError("an unsigned compare of values that may be negative")
                    pred = CMPI[code]
                else:
                    pred = CMPF.get(cmpf_predicate(o), "")
                    if not pred:
                        raise PayloadError(f"cmpf {cmpf_predicate(o)}")
                (alo, ahi), (blo, bhi) = xs
                if pred == "less":
                    r = truth(ahi < blo, alo >= bhi)
                elif pred == "less_equal":
                    r = truth(ahi <= blo, alo > bhi)
                elif pred == "greater":
                    r = truth(alo > bhi, ahi <= blo)
                elif pred == "greater_equal":
                    r = truth(alo >= bhi, ahi < blo)
                else:
                    equal = (alo == ahi) & (blo == bhi) & (alo == blo)
                    apart = (ahi < blo) | (alo > bhi)
                    r = truth(equal, apart) if pred == "equal" else truth(apart, equal)
            elif name == "arith.select":
                (clo, chi), (xlo, xhi), (ylo, yhi) = xs
                sure_t, sure_f = clo > 0, chi < 1
                r = (np.where(sure_t, xlo, np.where(sure_f, ylo, np.minimum(xlo, ylo))),
                     np.where(sure_t, xhi, np.where(sure_f, yhi, np.maximum(xhi, yhi))))
            elif name in BIT_OPS and str(o.results[0].type) == "i1":
                (alo, ahi), (blo, bhi) = xs
                if name == "arith.andi":
                    r = (np.minimum(alo, blo), np.minimum(ahi, bhi))
                elif name == "arith.ori":
                    r = (np.maximum(alo, blo), np.maximum(ahi, bhi))
                else:
                    known = (alo == ahi) & (blo == bhi)
                    value = np.where(alo != blo, 1.0, 0.0)
                    r = (np.where(known, value, 0.0), np.where(known, value, 1.0))
            else:
                raise PayloadError(f"'{name}' is not bounded here")
        env[value_key(o.results[0])] = r
    return get(yielded)


# ---------------------------------------------------------------- argmax / argmin payloads

# The running value's combiner -> (kind, the predicate that moves the index).
ARG_COMBINERS = {"arith.maximumf": ("max", "ugt"), "arith.minimumf": ("min", "ult")}
# Casts an argmax's index may pass through from `linalg.index` to the yielded value.
INDEX_CASTS = ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui")


def arg_reduction(op: ir.Operation) -> tuple | None:
    """(value result, index result, "max" | "min", the linalg.index op) of a two-result
    reduction over one loop whose payload is torch's argmax / argmin after
    `--fusion-nan-minmax` (the index moved while the running value is a number and the
    point's value is larger (smaller) or NaN: the first NaN, else the first extreme):

        %v = arith.maximumf %x, %acc_v
        %u = arith.cmpf ugt, %x, %acc_v ; %o = arith.cmpf ord, %acc_v, %acc_v
        %i = arith.select (andi %u, %o), %index, %acc_i

    (minimumf with ult for argmin; through the 16-bit widening's casts), where %index is
    the reduced loop's position (`index_cast(linalg.index d)`) or, in the combine of
    `--fusion-split-reductions`' argmax partials, `index_cast(linalg.index d) * C + %local`
    with %local an input (the partial's position within its chunk of C, which that pass
    guarantees below C). Either way the
    index grows with the point, which a parallel fold's tie-break relies on. None for
    anything else."""
    if op.name != "linalg.generic" or len(op.results) != 2:
        return None
    block = op.regions[0].blocks[0]
    n_in = len(op.operands) - 2
    inputs = list(block.arguments)[:n_in]
    accs = list(block.arguments)[n_in:]
    yielded = list(block.operations[len(block.operations) - 1].operands)
    reduced = [d for d, k in enumerate(iterator_kinds(op)) if k == "reduction"]
    if len(reduced) != 1:
        return None

    def through_casts(v: ir.Value) -> ir.Value:
        while defining(v) is not None and defining(v).name in INDEX_CASTS:
            v = defining(v).operands[0]
        return v

    def position(v: ir.Value) -> ir.Operation | None:
        o = defining(through_casts(v))
        if o is not None and o.name == "linalg.index" and \
                ir.IntegerAttr(o.attributes["dim"]).value == reduced[0]:
            return o
        return None

    def index_source(v: ir.Value) -> ir.Operation | None:
        found = position(v)
        if found is not None:
            return found
        add = defining(v)
        if add is None or add.name != "arith.addi":
            return None
        for scaled, local in (tuple(add.operands), tuple(reversed(list(add.operands)))):
            mul = defining(scaled)
            if mul is None or mul.name != "arith.muli" or through_casts(local) not in inputs:
                continue
            for pos, c in (tuple(mul.operands), tuple(reversed(list(mul.operands)))):
                const = defining(c)
                if const is not None and const.name == "arith.constant" and \
                        position(pos) is not None:
                    return position(pos)
        return None

    def exact(v: ir.Value) -> ir.Value:
        """`v` through the 16-bit widening's casts (`extf`, and the `truncf` of a max:
        exact either way)."""
        while defining(v) is not None and defining(v).name in ("arith.extf", "arith.truncf"):
            v = defining(v).operands[0]
        return v

    for jv, ji in ((0, 1), (1, 0)):
        comb, sel = defining(exact(yielded[jv])), defining(yielded[ji])
        if comb is None or sel is None or comb.name not in ARG_COMBINERS or \
                sel.name != "arith.select" or sel.operands[2] != accs[ji]:
            continue
        kind, moved_pred = ARG_COMBINERS[comb.name]
        acc_v = accs[jv]
        operands = [exact(v) for v in comb.operands]
        xs = [v for v in operands if v != acc_v]
        if len(xs) != 1 or len(operands) != 2:
            continue
        x = xs[0]
        cond = defining(sel.operands[0])
        if cond is None or cond.name != "arith.andi":
            continue
        cmps = [defining(v) for v in cond.operands]
        if any(c is None or c.name != "arith.cmpf" for c in cmps):
            continue
        preds = {cmpf_predicate(c): c for c in cmps}
        moved, ordered = preds.get(moved_pred), preds.get("ord")
        if moved is None or ordered is None or \
                [exact(v) for v in moved.operands] != [x, acc_v] or \
                [exact(v) for v in ordered.operands] != [acc_v, acc_v]:
            continue
        idx = index_source(sel.operands[1])
        if idx is None:
            continue
        return jv, ji, kind, idx
    return None
