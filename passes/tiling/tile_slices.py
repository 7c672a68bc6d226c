"""A rectangular slice of a value, computed per tile from the elementwise ops that make it.

Tile-and-fuse for hand-built tile loops (the CPU attention kernel's key tiles): where a
loop needs `value[offsets : offsets + sizes]` and `value` is the end of an elementwise chain
(parallel `linalg.generic`s with an identity result map, reshapes of leading unit dims,
fills, empties), `Slicer.slice` clones the chain onto the slice instead of reading a whole
materialised tensor: each operand is sliced by its indexing map (a map result `d_i` takes
dim i's offset and size, a constant `c` the element c alone), `linalg.index` in the payload
is shifted by the slice's offsets, and what is not such an op (a block argument, a
reduction, a constant that is not a splat) is read through `tensor.extract_slice`. Each
slice keeps its value's rank (the sliced-away dims as size 1). A `leaf` callback may
compute a given value's slice itself (the attention's scores, from Q and K tiles).

Offsets are ints or `index` Values; sizes are ints (static) or `index` Values (dynamic).
The ops are built at the current insertion point and location.
"""

from __future__ import annotations

from typing import Callable, Union

from fusec.passes.fusion.reduction import clone_body
from fusec.passes.grouping import defining_op, splat_value, value_key
from mlir import ir
from mlir.dialects import arith, linalg, tensor

Index = Union[int, ir.Value]
DYNAMIC = ir.ShapedType.get_dynamic_size()


def index(value: Index) -> ir.Value:
    """`value` as an index Value (a constant for an int)."""
    if isinstance(value, int):
        return arith.ConstantOp(ir.IndexType.get(), value).result
    return value


def static_shape(sizes: list[Index]) -> list[int]:
    return [s if isinstance(s, int) else DYNAMIC for s in sizes]


def dynamic(sizes: list[Index]) -> list[ir.Value]:
    return [s for s in sizes if not isinstance(s, int)]


def empty(sizes: list[Index], element: ir.Type) -> ir.Value:
    return tensor.EmptyOp(sizes, element).result


def extract(source: ir.Value, offsets: list[Index], sizes: list[Index],
            result_shape: list[Index] | None = None) -> ir.Value:
    """`tensor.extract_slice` of `source` at `offsets`, `sizes`, stride 1; its type has
    `result_shape` (a rank-reduced slice drops unit dims) or `sizes`."""
    element = ir.RankedTensorType(source.type).element_type
    shape = static_shape(result_shape if result_shape is not None else sizes)
    result = ir.RankedTensorType.get(shape, element)
    return tensor.ExtractSliceOp(
        result, source, dynamic(offsets), dynamic(sizes), [],
        static_shape(offsets), static_shape(sizes), [1] * len(sizes)).result


def _elementwise(op: ir.Operation) -> bool:
    if op.name != "linalg.generic" or len(op.results) != 1:
        return False
    if any("parallel" not in str(i) for i in op.attributes["iterator_types"]):
        return False
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    out = maps[-1]
    if not (out.is_permutation and all(
            isinstance(e, ir.AffineDimExpr) and ir.AffineDimExpr(e).position == i
            for i, e in enumerate(out.results))):
        return False
    return all(isinstance(e, ir.AffineDimExpr) or isinstance(e, ir.AffineConstantExpr)
               for m in maps[:-1] for e in m.results)


class Slicer:
    """Slices of values, each built once (cached by value and slice)."""

    def __init__(self, leaf: Callable[[ir.Value, list[Index], list[Index]], ir.Value | None]
                 = lambda value, offsets, sizes: None) -> None:
        self.leaf = leaf
        self.cache: dict[tuple, ir.Value] = {}

    @staticmethod
    def _key(value: ir.Value, offsets: list[Index], sizes: list[Index]) -> tuple:
        def part(x: Index):
            return x if isinstance(x, int) else ("v", value_key(x))

        return (value_key(value), tuple(part(o) for o in offsets), tuple(part(s) for s in sizes))

    def slice(self, value: ir.Value, offsets: list[Index], sizes: list[Index]) -> ir.Value:
        """`value[offsets : offsets + sizes]`, of `value`'s rank."""
        shape = ir.RankedTensorType(value.type).shape
        if not shape:
            return value
        if all(o == 0 for o in offsets) and list(sizes) == list(shape):
            return value
        key = self._key(value, offsets, sizes)
        if key not in self.cache:
            self.cache[key] = self._build(value, list(offsets), list(sizes))
        return self.cache[key]

    def _build(self, value: ir.Value, offsets: list[Index], sizes: list[Index]) -> ir.Value:
        found = self.leaf(value, offsets, sizes)
        if found is not None:
            return found
        element = ir.RankedTensorType(value.type).element_type
        op = defining_op(value)
        if op is None:
            return extract(value, offsets, sizes)
        if op.name == "tensor.empty":
            return empty(sizes, element)
        if op.name == "linalg.fill":
            return linalg.fill(op.operands[0], outs=[empty(sizes, element)])
        splat = splat_value(value)
        if splat is not None:
            return linalg.fill(arith.ConstantOp(element, splat).result,
                               outs=[empty(sizes, element)])
        if op.name in ("tensor.expand_shape", "tensor.collapse_shape"):
            through = self._through_reshape(op, offsets, sizes)
            if through is not None:
                return through
        if op.name == "tensor.extract_slice":
            through = self._through_extract_slice(op, offsets, sizes)
            if through is not None:
                return through
        if _elementwise(op):
            return self._generic(op, offsets, sizes)
        return extract(value, offsets, sizes)

    def _generic(self, op: ir.Operation, offsets: list[Index], sizes: list[Index]) -> ir.Value:
        """An elementwise generic cloned onto the slice: its operands sliced by their maps,
        its `linalg.index` ops shifted by the offsets."""
        maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
        n_in = len(maps) - 1
        operands, new_maps = [], []
        for operand, amap in zip(list(op.operands), maps):
            off, size, results = [], [], []
            for e in amap.results:
                if isinstance(e, ir.AffineDimExpr):
                    d = ir.AffineDimExpr(e).position
                    off.append(offsets[d])
                    size.append(sizes[d])
                    results.append(e)
                else:
                    off.append(ir.AffineConstantExpr(e).value)
                    size.append(1)
                    results.append(ir.AffineConstantExpr.get(0))
            operands.append(self.slice(operand, off, size))
            new_maps.append(ir.AffineMap.get(amap.n_dims, 0, results))
        result = ir.RankedTensorType.get(static_shape(sizes),
                                         ir.RankedTensorType(op.results[0].type).element_type)
        clone = linalg.GenericOp([result], operands[:n_in], operands[n_in:],
                                 ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps]),
                                 op.attributes["iterator_types"])
        source = op.regions[0].blocks[0]
        block = clone.regions[0].blocks.append(*[a.type for a in source.arguments])
        yielded = clone_body(op, list(block.arguments), block)
        with ir.InsertionPoint(block):
            linalg.YieldOp(yielded)
        shifted = [o for o in block.operations if o.operation.name == "linalg.index"]
        for inner in shifted:
            dim = ir.IntegerAttr(inner.operation.attributes["dim"]).value
            if offsets[dim] == 0:
                continue
            with ir.InsertionPoint(_next(inner.operation)):  # a payload ends in its yield
                total = arith.AddIOp(inner.operation.results[0], index(offsets[dim])).result
            inner.operation.results[0].replace_all_uses_with(total)
            # replace_all_uses_with redirected the add's own operand too: put it back.
            defining_op(total).operands[0] = inner.operation.results[0]
        return clone.results[0]

    def _through_reshape(self, op: ir.Operation, offsets: list[Index],
                         sizes: list[Index]) -> ir.Value | None:
        """The slice of a reshape's source, reshaped the same way; None where the slice is
        not a rectangle of the source (`_merge`, `_split`)."""
        src = op.operands[0]
        src_shape = ir.RankedTensorType(src.type).shape
        dst_shape = ir.RankedTensorType(op.results[0].type).shape
        groups = [[ir.IntegerAttr(i).value for i in g]
                  for g in ir.ArrayAttr(op.attributes["reassociation"])]
        expand = op.name == "tensor.expand_shape"
        if expand:  # each source dim is a group of result dims
            src_off, src_size = [], []
            for g in groups:
                merged = _merge([offsets[d] for d in g], [sizes[d] for d in g],
                                [dst_shape[d] for d in g])
                if merged is None:
                    return None
                src_off.append(merged[0])
                src_size.append(merged[1])
        else:  # each result dim is a group of source dims
            src_off, src_size = [0] * len(src_shape), [0] * len(src_shape)
            for t, g in enumerate(groups):
                split = _split(offsets[t], sizes[t], [src_shape[d] for d in g])
                if split is None:
                    return None
                for d, o, s in zip(g, *split):
                    src_off[d], src_size[d] = o, s
        inner = self.slice(src, src_off, src_size)
        element = ir.RankedTensorType(op.results[0].type).element_type
        result = ir.RankedTensorType.get(static_shape(sizes), element)
        if expand:
            return tensor.ExpandShapeOp(result, inner, op.attributes["reassociation"],
                                        dynamic(sizes), static_shape(sizes)).result
        return tensor.CollapseShapeOp(result, inner, op.attributes["reassociation"]).result

    def _through_extract_slice(self, op: ir.Operation, offsets: list[Index],
                               sizes: list[Index]) -> ir.Value | None:
        """A slice of a static, unit-stride, rank-keeping extract_slice: a slice of its
        source at the summed offsets."""
        static_offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
        strides = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
        src = op.operands[0]
        if len(ir.RankedTensorType(src.type).shape) != len(offsets) or \
                any(o == DYNAMIC for o in static_offsets) or any(s != 1 for s in strides):
            return None
        summed = [b if o == 0 else (o + b if isinstance(o, int) else
                                    (o if b == 0 else arith.AddIOp(o, index(b)).result))
                  for o, b in zip(offsets, static_offsets)]
        return self.slice(src, summed, sizes)


def _next(op: ir.Operation) -> ir.Operation | None:
    """The op after `op` in its block (None: it is the last)."""
    found = False
    for o in op.block.operations:
        if found:
            return o.operation
        if o.operation == op:
            found = True
    return None


def _merge(offsets: list[Index], sizes: list[Index], shape: list[int]
           ) -> tuple[Index, Index] | None:
    """The (offset, size) in a merged dim of a slice (offsets, sizes) of its factors `shape`,
    if that slice is contiguous: only the first factor with a size other than 1 may be
    partial, every later one whole."""
    partial = False
    for s, n in zip(sizes, shape):
        if partial and s != n:
            return None
        if s != 1:
            partial = True
    offset: Index = 0
    stride = 1
    for o, n in reversed(list(zip(offsets, shape))):
        if o != 0:
            term = o * stride if isinstance(o, int) else (
                o if stride == 1 else arith.MulIOp(o, index(stride)).result)
            offset = term if offset == 0 else (
                offset + term if isinstance(offset, int) and isinstance(term, int)
                else arith.AddIOp(index(offset), index(term)).result)
        stride *= n
    size: Index = 1
    for s in sizes:
        if isinstance(s, int) and isinstance(size, int):
            size *= s
        elif s != 1:
            size = s if size == 1 else arith.MulIOp(index(size), index(s)).result
    return offset, size


def _split(offset: Index, size: Index, shape: list[int]
           ) -> tuple[list[Index], list[Index]] | None:
    """A slice (offset, size) of a merged dim as slices of its factors `shape`: one element
    (the offset delinearised), or a slice of the only factor that is not 1."""
    if size == 1:
        offsets: list[Index] = []
        rest: Index = offset
        for i in range(len(shape)):
            stride = 1
            for n in shape[i + 1:]:
                stride *= n
            if isinstance(rest, int):
                offsets.append(rest // stride)
                rest = rest % stride
            elif stride == 1:
                offsets.append(rest)
                rest = 0
            else:
                offsets.append(arith.DivUIOp(rest, index(stride)).result)
                rest = arith.RemUIOp(rest, index(stride)).result
        return offsets, [1] * len(shape)
    nonunit = [i for i, n in enumerate(shape) if n != 1]
    if len(nonunit) > 1:
        return None
    at = nonunit[0] if nonunit else len(shape) - 1
    return ([offset if i == at else 0 for i in range(len(shape))],
            [size if i == at else 1 for i in range(len(shape))])
