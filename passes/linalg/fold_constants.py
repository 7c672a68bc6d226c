"""--fusion-fold-constants: a serial loop op computed from constants alone is computed here;
so is a transpose of a weight (`fold_weight_transposes`).

Hugging Face's decoders build their attention mask from aranges each call, and look for
packed sequences in their positions with a cumsum (`(position_ids diff != 1).cumsum(-1)`,
a `tm_tensor.scan`), which `fusion-lower-tm-tensor` turns into a serial loop nest: a kernel
of one thread on the GPU (the fallback path), whose input is computed from an arange. With
no input among its operands the scan is a constant: this pass computes it with numpy (the
ops it reads from, too: only those, walking back from its operands, each op once; the
constant masks and weights no scan reads are never read) and puts a dense constant in its
place. The ops before it stay as they are: what fuses into its consumers costs no kernel,
and a mask computed from indices in registers is what the attention kernels classify
(attention_mask.causal_bound); a materialized mask would be a read per score.

Evaluated (their operands all dense constants, not resources: weights are never read;
results of at most FOLD_MAX_ELEMENTS elements of a type numpy holds here: f64, f32, f16,
bf16, i64, i32, i16, i8, i1, index):

    linalg.generic      parallel loops with projection maps, one result; its body through
                        `payload.evaluate_region` (with `tensor.extract` of an evaluated
                        tensor, `linalg.index`); float arithmetic only on f64 results (a
                        body on f32 or 16-bit values is evaluated when it only selects,
                        compares and casts: computed in float64, one rounding per op is
                        not reproduced here)
    linalg.fill, linalg.broadcast, linalg.transpose, tensor.expand_shape,
    tensor.collapse_shape, tensor.extract_slice (static), tensor.concat, tensor.extract
    tm_tensor.scan      its combiner step by step along the dimension (integer combiners;
                        a float one only on f64): replaced by its values

Before:
    %a = linalg.generic {...} outs(%e : tensor<32xi64>) { linalg.index 0 ... }
    ...
    %s:2 = "tm_tensor.scan"(%d, %z, %z1) <{dimension = 1, inclusive = true}> ({ addi })
After:
    %s = arith.constant dense<[[0, 0, ...]]> : tensor<1x32xi64>
    (%a and the ops after it unchanged; those only the scan read are erased as dead)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import mlir.ir as ir

from fusec.passes.constants import FLOATS, INTS, dense_attr, stored_values
from fusec.passes.grouping import defining_op, value_key, walk_ops
from fusec.passes.payload import (
    CAST_OPS,
    PAYLOAD_OPS,
    PayloadError,
    constant_array,
    evaluate_region,
    scalar_body,
)
from fusec.passes.registry import Pass, register

FOLD_MAX_ELEMENTS = 1 << 16
# Element type -> the numpy dtype a constant is read as here.
READ_DTYPES = {**{e: "float64" for e in FLOATS}, **{e: "int64" for e in INTS}, "i1": "bool"}
# Body ops exact whatever the element type (no rounding beyond the result's conversion).
EXACT_OPS = frozenset({"arith.constant", "linalg.index", "arith.cmpi", "arith.cmpf",
                       "arith.select", "tensor.extract", "arith.addi", "arith.subi",
                       "arith.muli", "arith.maxsi", "arith.minsi", "arith.andi", "arith.ori",
                       "arith.xori", *CAST_OPS})
SCAN = "tm_tensor.scan"
FOLDED = frozenset({"linalg.generic", "linalg.fill", "linalg.broadcast", "linalg.transpose",
                    "tensor.expand_shape", "tensor.collapse_shape", "tensor.extract_slice",
                    "tensor.concat", "tensor.extract", SCAN})


def _element(t: ir.Type) -> str:
    return str(ir.RankedTensorType(t).element_type) if isinstance(t, ir.RankedTensorType) \
        else str(t)


def _numel(t: ir.Type) -> int:
    return math.prod(ir.RankedTensorType(t).shape) if isinstance(t, ir.RankedTensorType) else 1


def _holdable(t: ir.Type) -> bool:
    if isinstance(t, ir.RankedTensorType) and not ir.RankedTensorType(t).has_static_shape:
        return False
    e = _element(t)
    return (e in INTS or e in FLOATS or e == "i1") and _numel(t) <= FOLD_MAX_ELEMENTS


def _ints(attr: ir.Attribute) -> list[int]:
    return [int(x) for x in ir.DenseI64ArrayAttr(attr)]


def _reads(op: ir.Operation) -> list[ir.Value]:
    """The operands `Fold.evaluate` reads of `op` (of a linalg op, not its inits)."""
    operands = list(op.operands)
    if "operandSegmentSizes" in op.attributes and op.name != SCAN:
        return operands[:list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[0]]
    if op.name in ("linalg.broadcast", "linalg.transpose"):
        return operands[:1]
    return operands


def read_constant(v: ir.Value) -> Any:
    """A dense (non-resource) constant's value as the folds compute (float64 / int64 /
    bool; a bf16 one only as a splat), or None."""
    return constant_array(v, READ_DTYPES, FOLD_MAX_ELEMENTS, scalars=True)


class Fold:
    """The values known so far (by value key), each found on demand, and the evaluation of
    one op."""

    def __init__(self, read: Any = None, rounded: bool = False) -> None:
        self.known: dict[int, Any] = {}
        # A constant's value (`read_constant`, or `read`: one that reads more types), and
        # whether a body's float arithmetic is rounded op by op (any result type), not only
        # evaluated where it is exact.
        self.read = read or read_constant
        self.rounded = rounded

    def value(self, v: ir.Value) -> Any:
        """`v`'s value (float64 / int64 / bool), or None: a constant's read, an op of FOLDED's
        evaluated, first the ops it reads (walking back from it): each op at most once."""
        key = value_key(v)
        if key not in self.known:
            self._settle(v)
        return self.known[key]

    def _settle(self, v: ir.Value) -> None:
        # Post-order on a stack (a chain of ops as long as a model's costs no Python stack):
        # an op is evaluated once the values it reads are known.
        stack, pending = [(v, False)], set()
        while stack:
            w, ready = stack.pop()
            key = value_key(w)
            if key in self.known:
                continue
            op = defining_op(w)
            # (a scan's result is a scan before this one not computed: one computed is a
            # constant now)
            if op is None or op.name not in FOLDED or op.name == SCAN:
                self.known[key] = self.read(w)
                continue
            if not ready and key in pending:  # it reads itself (a graph region)
                self.known[key] = None
                continue
            if not ready and all(_holdable(r.type) for r in op.results):
                pending.add(key)
                stack.append((w, True))
                stack.extend((u, False) for u in _reads(op))
                continue
            values = self.results(op) or [None] * len(op.results)
            for result, x in zip(op.results, values):
                self.known[value_key(result)] = None if x is None else \
                    stored_values(x, result.type)

    def results(self, op: ir.Operation) -> list[Any] | None:
        """`evaluate(op)`, None where it fails."""
        try:
            return self.evaluate(op)
        except (PayloadError, IndexError, ValueError, TypeError):
            return None

    def inputs(self, op: ir.Operation) -> tuple[list[Any], list[ir.Value]] | None:
        seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        ins = list(op.operands)[:seg[0]]
        values = [self.value(v) for v in ins]
        return None if any(x is None for x in values) else (values, ins)

    def exact(self, ops: list[ir.Operation], result_types: list[ir.Type]) -> bool:
        return all(_element(t) == "f64" or _element(t) in INTS or _element(t) == "i1"
                   for t in result_types) or all(o.name in EXACT_OPS for o in ops)

    def evaluate(self, op: ir.Operation) -> list[Any] | None:
        import numpy as np

        name = op.name
        if name not in FOLDED or not all(_holdable(r.type) for r in op.results):
            return None
        if name == "linalg.generic":
            return self._generic(op)
        if name == SCAN:
            return self._scan(op)
        if name == "linalg.fill":
            x = self.value(op.operands[0])
            return None if x is None else [np.full(ir.RankedTensorType(op.results[0].type).shape,
                                                   x)]
        if name == "tensor.extract":
            x = self.value(op.operands[0])
            idx = [self.value(v) for v in list(op.operands)[1:]]
            if x is None or any(i is None for i in idx):
                return None
            return [x[tuple(int(i) for i in idx)]]
        x = self.value(op.operands[0])
        if x is None:
            return None
        shape = list(ir.RankedTensorType(op.results[0].type).shape)
        if name in ("tensor.expand_shape", "tensor.collapse_shape"):
            return [np.reshape(x, shape)]
        if name == "linalg.broadcast":
            dims = _ints(op.attributes["dimensions"])
            return [np.broadcast_to(np.expand_dims(x, dims), shape)]
        if name == "linalg.transpose":
            return [np.transpose(x, _ints(op.attributes["permutation"]))]
        if name == "tensor.extract_slice":
            if len(op.operands) != 1:
                return None  # dynamic offsets or sizes
            offsets, sizes, strides = (_ints(op.attributes[a]) for a in
                                       ("static_offsets", "static_sizes", "static_strides"))
            cut = x[tuple(slice(o, o + s * st, st) for o, s, st in zip(offsets, sizes, strides))]
            return [np.reshape(cut, shape)]
        if name == "tensor.concat":
            parts = [self.value(v) for v in op.operands]
            if any(p is None for p in parts):
                return None
            return [np.concatenate(parts, axis=int(ir.IntegerAttr(op.attributes["dim"]).value))]
        return None

    def _generic(self, op: ir.Operation) -> list[Any] | None:
        import numpy as np

        parsed = scalar_body(op)
        got = self.inputs(op)
        if parsed is None or got is None or \
                any("parallel" not in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
            return None
        block_args, ops, yielded = parsed
        if not self.rounded and not self.exact(ops, [op.results[0].type]):
            return None
        values, _ = got
        maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
        shape = list(ir.RankedTensorType(op.results[0].type).shape)
        out_map = maps[-1]
        if not all(isinstance(e, ir.AffineDimExpr) for e in out_map.results) or \
                len(out_map.results) != out_map.n_dims:
            return None
        grid = np.indices(shape, dtype=np.int64)
        loops: list[Any] = [None] * out_map.n_dims
        for e, g in zip(out_map.results, grid):
            loops[ir.AffineDimExpr(e).position] = g
        args = []
        for x, m in zip(values, maps):
            sub = []
            for e in m.results:
                if isinstance(e, ir.AffineDimExpr):
                    sub.append(loops[ir.AffineDimExpr(e).position])
                elif isinstance(e, ir.AffineConstantExpr):
                    sub.append(ir.AffineConstantExpr(e).value)
                else:
                    return None
            args.append(np.asarray(x)[tuple(sub)] if sub else np.asarray(x))
        try:
            with np.errstate(all="ignore"):
                result = evaluate_region(block_args, ops, yielded, args, loops,
                                         PAYLOAD_OPS | {"tensor.extract"}, True, self.value,
                                         self.rounded)
        except (PayloadError, IndexError, TypeError, ValueError):
            return None
        return [np.broadcast_to(np.asarray(result), shape)]

    def _scan(self, op: ir.Operation) -> list[Any] | None:
        import numpy as np

        seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        operands = [self.value(v) for v in op.operands]
        if seg != [1, 2] or any(x is None for x in operands):
            return None
        source, _, acc = operands
        block = op.regions[0].blocks[0]
        ops = [o.operation for o in block.operations]
        if ops[-1].name != "tm_tensor.yield" or len(ops[-1].operands) != 1 or \
                not self.exact(ops[:-1], [op.results[0].type]):
            return None
        dim = int(ir.IntegerAttr(op.attributes["dimension"]).value)
        inclusive = bool(ir.BoolAttr(op.attributes["inclusive"]).value)
        src = np.moveaxis(np.asarray(source), dim, 0)
        out = np.empty(src.shape, dtype=np.result_type(src, np.asarray(acc)))
        try:
            for j in range(src.shape[0]):
                if j == 0:
                    out[0] = src[0] if inclusive else acc
                    continue
                x = src[j] if inclusive else src[j - 1]
                with np.errstate(all="ignore"):
                    out[j] = evaluate_region(list(block.arguments), ops[:-1], ops[-1].operands[0],
                                             [out[j - 1], x])
        except (PayloadError, ValueError, TypeError):
            return None
        out = np.moveaxis(out, 0, dim)
        return [out, np.take(out, -1, axis=dim)]


# Element types whose dense constants numpy reads and writes bit for bit (its own dtype).
EXACT_DTYPES = {"f64": "float64", "f32": "float32", "f16": "float16", "i64": "int64",
                "i32": "int32", "i16": "int16", "i8": "int8"}


def fold_weight_transposes(module: ir.Operation) -> int:
    """Each `linalg.transpose` of a dense (non-splat) constant of any size becomes the
    transposed constant, moved by numpy in its own dtype: bit for bit what upstream's
    elementwise fusion would fold later (`linalg-fuse-elementwise-ops`, in the tiled stage),
    element by element in C++: 4.8 s of GPT-2-small's 29 s compile, for its tied LM head
    (wte.T, 50257 x 768). bf16 constants (no numpy dtype) are left to it. Returns how many."""
    import numpy as np

    count = 0
    for op in walk_ops(module, lambda o: o.name == "linalg.transpose"):
        source = defining_op(op.operands[0])
        if source is None or source.name != "arith.constant":
            continue
        attr = source.attributes["value"]
        t = op.results[0].type
        dtype = EXACT_DTYPES.get(_element(t))
        if dtype is None or not isinstance(attr, ir.DenseElementsAttr) or attr.is_splat or \
                not ir.RankedTensorType(t).has_static_shape:
            continue
        array = np.asarray(attr)
        if array.dtype != np.dtype(dtype):
            continue
        moved = np.ascontiguousarray(np.transpose(array, _ints(op.attributes["permutation"])))
        with ir.InsertionPoint(op), op.location:
            constant = ir.Operation.create("arith.constant", results=[t], attributes={
                "value": ir.DenseElementsAttr.get(moved, type=t)})
        op.results[0].replace_all_uses_with(constant.results[0])
        op.erase()
        count += 1
    return count


@register
@dataclass
class FoldConstantsPass(Pass):
    """Compute here the ops whose operands are all constants (see the module docstring)."""

    ARGUMENT = "fusion-fold-constants"

    def run(self, module: ir.Operation) -> None:
        fold_weight_transposes(module)
        # Only a scan is replaced; the ops it reads are evaluated on demand (`Fold.value`)
        # and kept: what fuses into its consumers costs no kernel (a mask from indices is
        # computed in registers and classified by the attention kernels; a contraction's
        # init is a fill its kernels recognise); a serial scan is a kernel of one thread.
        fold = Fold()
        for op in walk_ops(module, lambda o: o.name == SCAN):
            values = fold.results(op)
            if values is None:
                continue
            results = list(op.results)
            constants = []
            with ir.InsertionPoint(op), op.location:
                for result, x in zip(results, values):
                    constants.append(ir.Operation.create(
                        "arith.constant", results=[result.type],
                        attributes={"value": dense_attr(x, result.type)}))
            for result, constant, x in zip(results, constants, values):
                fold.known[value_key(constant.results[0])] = stored_values(x, result.type)
                result.replace_all_uses_with(constant.results[0])
            op.erase()
