"""The bytes of dense tensor constants, for every element type: shared by the passes that
read weights (fusion-fold-norm-prologue) and the targets that write them.

numpy reads a `DenseElementsAttr` of the types it knows through the bindings' buffer; for
bf16 and f16 it has none (and the base class's buffer is an object array, not the data), so
their bytes come from the attribute's printed form: the hex MLIR prints for large constants,
or the short list of numbers it prints for small ones, rounded as MLIR stored them.
"""

from __future__ import annotations

import re

import mlir.ir as ir
from typing import Any

from fusec.passes.payload import INTS, bf16_bits, round_to_element


_HEX = re.compile(r'dense<"0x([0-9A-Fa-f]*)">')


def dense_bytes(attr: ir.Attribute) -> bytes | None:
    """The raw little-endian data of a dense constant (one element for a splat), or None
    where it is not a dense constant or its data cannot be read (i1: bit-packed)."""
    import numpy as np

    if not isinstance(attr, ir.DenseElementsAttr):
        return None
    element = str(ir.ShapedType(attr.type).element_type)
    if element == "i1":
        return None
    if element not in ("bf16", "f16"):
        try:
            array = np.array(attr)
        except Exception:  # noqa: BLE001 - a type numpy cannot view: from the text below
            array = None
        if array is not None and array.dtype != object:
            return array.tobytes()
    text = str(attr)
    found = _HEX.match(text)
    if found:
        return bytes.fromhex(found.group(1))
    return _dense_16bit(attr)


def _dense_16bit(attr: ir.Attribute) -> bytes | None:
    """The bytes of a bf16 / f16 constant MLIR printed as a list of numbers (a short one:
    `dense<[1.0, 0.75]> : tensor<2xbf16>`), rounded to nearest-even as MLIR stored them."""
    import numpy as np

    t = ir.RankedTensorType(attr.type)
    elt = str(t.element_type)
    if elt not in ("bf16", "f16"):
        return None
    text = str(attr)
    if not text.startswith("dense<") or "> :" not in text:
        return None
    body = text[len("dense<"):text.rindex("> :")]
    tokens = [x for x in re.split(r"[\s,\[\]()]+", body) if x]
    count = int(np.prod(t.shape)) if t.shape else 1
    if len(tokens) == 1 and count > 1:
        tokens = tokens * count  # a splat
    if len(tokens) != count:
        return None
    out = np.empty(count, dtype=np.uint16)
    for i, token in enumerate(tokens):
        if token.lower().startswith("0x"):  # MLIR prints inf / nan as their bits
            out[i] = int(token, 16)
            continue
        try:
            value = np.float32(float(token))
        except ValueError:
            return None
        if elt == "f16":
            out[i] = np.array(value).astype(np.float16).view(np.uint16)
        else:
            out[i] = bf16_bits(value)
    return out.tobytes()


# Float element types -> the numpy dtype of their stored bits.
_FLOAT_BITS = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "uint16"}


def dense_floats(attr: ir.Attribute):
    """A dense float constant's values as a float64 numpy array of its shape (a splat
    repeated), or None (not a dense float constant, or unreadable)."""
    import numpy as np

    if not isinstance(attr, ir.DenseElementsAttr):
        return None
    t = ir.RankedTensorType(attr.type)
    element = str(t.element_type)
    if element not in _FLOAT_BITS or not t.has_static_shape:
        return None
    data = dense_bytes(attr)
    if data is None:
        return None
    bits = np.frombuffer(data, dtype=_FLOAT_BITS[element])
    if element == "bf16":
        bits = (bits.astype(np.uint32) << 16).view(np.float32)
    values = bits.astype(np.float64)
    count = int(np.prod(t.shape)) if t.shape else 1
    if values.size == 1 and count != 1:
        values = np.full(count, values[0])
    if values.size != count:
        return None
    return values.reshape(list(t.shape))


# Float element types -> the numpy dtype a constant of it is computed in (bf16: f32) and written
# from (the integer ones: payload.INTS).
FLOATS = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "float32"}


def _element(t: ir.Type) -> str:
    return str(ir.RankedTensorType(t).element_type) if isinstance(t, ir.RankedTensorType) \
        else str(t)


def dense_attr(value: Any, t: ir.Type) -> ir.Attribute:
    """The dense attribute of type `t` holding `value` (converted to its element type)."""
    import numpy as np

    e = _element(t)
    if not isinstance(t, ir.RankedTensorType):
        if e == "i1":
            return ir.BoolAttr.get(bool(value))
        if e in FLOATS:
            return ir.FloatAttr.get(t, float(value))
        return ir.IntegerAttr.get(t, int(value))
    shape = list(ir.RankedTensorType(t).shape)
    x = np.broadcast_to(np.asarray(value), shape)
    if e == "i1":
        return ir.DenseElementsAttr.get(np.ascontiguousarray(x.astype(np.bool_)))
    if e == "bf16":
        return ir.DenseElementsAttr.get(np.ascontiguousarray(bf16_bits(x)), type=t)
    dtype = INTS.get(e) or FLOATS[e]
    return ir.DenseElementsAttr.get(np.ascontiguousarray(x.astype(dtype)), type=t)


def stored_values(value: Any, t: ir.Type) -> Any:
    """`value` as the constant of type `t` holds it (rounded to its element type), read back
    as the folds compute: float64 / int64 / bool."""
    import numpy as np

    e = _element(t)
    x = np.asarray(value)
    if e == "i1":
        return x.astype(np.bool_)
    if e == "f64":
        return x.astype(np.float64)
    return round_to_element(x, e)
