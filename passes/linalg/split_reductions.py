"""--fusion-split-reductions: a long reduction over few rows folds in partials, then combines.

A row reduction runs, on the GPU, one block per row: a whole-tensor `x.sum()` ran on one SM
of 132 and GroupNorm at batch 1 (32 rows of a million values) on 32; and each of the block's
threads folded thousands of values one after another, which rounds like a sum in one order
(a sum of 16 M fp32 values: 7e-5 from float64 where torch's is 1e-7). On the CPU the same
long folds round the same way. Here such a reduction becomes two:

- the *partials*: the same payload, over the same values, with the outer part of the
  reduced dims made parallel: each row gets P partial results (folded from the neutral
  value), as many blocks as the GPU holds, each folding a chunk of bounded length;
- the *combine*: the payload's combining op alone (add, mul, max, min, and, or, ...)
  folding the P partials into the original init.

The cost model decides P (`cost_model.reduction_partials`: SM count and chunk length on the
GPU, chunk length for float sums and products on both targets) and how the reduced dims
realise it (`factor_partials`: outer reduced dims whole, then a divisor of the next one).
A reduced dim that must be cut is cut with a `tensor.expand_shape` of what reads it; where
that is an elementwise `linalg.generic`, the generic itself is cloned over the cut
iteration space (its own operands cut in turn), so it still fuses into the partials' kernel
and the cut lands on a view of a kernel's input.

Beside the target's own rewrite: the CUDA target's `--fusion-gpu-split-long-reductions`
splits, at the tiled stage, reductions over a leading dim (column sums, BatchNorm's
statistics) by the data-movement family's launch shape; on the H200 this pass takes the
reductions over the trailing dims (rows), which that rewrite leaves to the row kernels.

Reduced dims anywhere in the loops (a column sum, BatchNorm's statistics over N, H, W) are
split on the CPU for the rounding's sake; on the H200 those are the data-movement family's
(its slices and tree keep each thread's fold short). The partials' result is [the kept
loops, the partial loops], each in loop order; the combine writes through the original
output map, its kept loops renumbered.

On the CPU the combine of f32 partials that rounds (a sum, a product) folds them in f64
and rounds once (`widen_accumulators.widen` with f64): the partials are large (a 1000-offset
sum of 3 M values is 3e9, whose f32 ulp is 256), so an f32 combine rounded each step at
that magnitude; GroupNorm(1, 3) of `randn + 1000` at 1021 x 1021 was 1.2-3.0e-4 from
float64 against torch's 1e-6 to 6.5e-5, now within 1.8x of torch's (most draws equal). The
GPU's combine stays f32 (its row kernels fold f32).

An argmax / argmin over one trailing loop (`payload.arg_reduction`: torch's, after
`--fusion-nan-minmax`) splits too (`split_arg`): partials of (value, position in the
chunk), then a combine over the chunks in order that adds the chunk's offset, with the same
rule, so the first NaN or the first extreme wins as in torch (greedy decoding's argmax
over a 50257-token vocabulary was one GPU thread per row).

Left alone: reductions that are not a payload folding into its accumulator through one
known combining op (other payloads reading `linalg.index`), reads through other than a dim
or a constant, other multi-result reductions, dynamic shapes, reductions inside a kernel
formed already (an attention chain's softmax: the pass runs after `--fusion-attention`),
and what the cost model does not split (many rows, short rows, a single prime length).

Before (a row sum of 4 rows of 262144 values on the GPU, 64 partials each):
    %s = linalg.generic {maps = [(d0, d1) -> (d0, d1), (d0, d1) -> (d0)],
                         iterators = [parallel, reduction]}
        ins(%x : tensor<4x262144xf32>) outs(%zero : tensor<4xf32>) { addf }
After:
    %xe = tensor.expand_shape %x [[0], [1, 2]] : tensor<4x262144xf32> into tensor<4x64x4096xf32>
    %p = linalg.generic {maps = [(d0, d1, d2) -> (d0, d1, d2), (d0, d1, d2) -> (d0, d1)],
                         iterators = [parallel, parallel, reduction]}
        ins(%xe) outs(%fill0 : tensor<4x64xf32>) { addf }
    %s = linalg.generic {maps = [(d0, d1) -> (d0, d1), (d0, d1) -> (d0)],
                         iterators = [parallel, reduction]}
        ins(%p) outs(%zero : tensor<4xf32>) { addf }

Options: device (nvidia-h200 | cpu).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlir.ir as ir
from mlir.dialects import arith, linalg, tensor

from fusec.passes import attributes, cost_model
from fusec.passes.grouping import (defining_op, iterator_kinds, loop_ranges, projection,
                                   value_key, walk_ops)
from fusec.passes.linalg.nan_minmax import nan_first_move
from fusec.passes.linalg.widen_accumulators import widen
from fusec.passes.payload import arg_reduction
from fusec.passes.registry import Pass, register

# The combining ops a partial and its combine may use: associative and commutative (floats
# up to rounding), with the neutral value a partial starts from. `exact`: a different
# grouping gives the same result, so only the GPU's parallelism asks for a split.
NEUTRAL_FLOAT = {"arith.addf": 0.0, "arith.mulf": 1.0, "arith.maximumf": -math.inf,
                 "arith.minimumf": math.inf, "arith.maxnumf": -math.inf,
                 "arith.minnumf": math.inf}
EXACT = frozenset({"arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf",
                   "arith.addi", "arith.muli", "arith.maxsi", "arith.minsi", "arith.maxui",
                   "arith.minui", "arith.andi", "arith.ori", "arith.xori"})
COMBINERS = NEUTRAL_FLOAT.keys() | EXACT


def _neutral_int(name: str, width: int) -> int | None:
    """The neutral value of an integer combiner, as the (signless) attribute's integer."""
    return {"arith.addi": 0, "arith.ori": 0, "arith.xori": 0, "arith.maxui": 0,
            "arith.muli": 1, "arith.andi": -1, "arith.minui": -1,
            "arith.maxsi": -(1 << (width - 1)), "arith.minsi": (1 << (width - 1)) - 1
            }.get(name)


def _maps(op: ir.Operation) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _static(value: ir.Value) -> bool:
    return isinstance(value.type, ir.RankedTensorType) and \
        ir.RankedTensorType(value.type).has_static_shape


@dataclass
class Candidate:
    op: ir.Operation
    combiner: ir.Operation  # the payload's op folding into the accumulator
    ranges: list[int]  # loop extents
    kept: list[int]  # the parallel loops (the result's), in loop order
    reduced: list[int]  # the reduced loops, in loop order
    arg: tuple | None = None  # an argmax / argmin: `payload.arg_reduction`'s answer

    @property
    def trailing(self) -> bool:
        """The reduced loops come after every parallel one (a row reduction)."""
        return not self.kept or max(self.kept) < min(self.reduced)


def candidate(op: ir.Operation) -> Candidate | None:
    """`op` as a reduction this pass can split (see the module's docstring), or None."""
    if op.name == "linalg.generic" and len(op.results) == 2:
        return _arg_candidate(op)
    if op.name != "linalg.generic" or len(op.results) != 1:
        return None
    kinds = iterator_kinds(op)
    if "reduction" not in kinds:
        return None
    kept = [i for i, k in enumerate(kinds) if k == "parallel"]
    reduced = [i for i, k in enumerate(kinds) if k == "reduction"]
    operands = list(op.operands)
    if not all(_static(v) or not isinstance(v.type, ir.ShapedType) for v in operands):
        return None
    maps = _maps(op)
    reads = [projection(m) for m in maps]
    if any(r is None for r in reads) or any(d in reduced for d in reads[-1]):
        return None
    block = op.regions[0].blocks[0]
    if any(inner.operation.name == "linalg.index" for inner in block.operations):
        return None
    acc = block.arguments[len(block.arguments) - 1]
    uses = list(acc.uses)
    if len(uses) != 1:
        return None
    combiner = uses[0].owner
    combiner = combiner.operation if hasattr(combiner, "operation") else combiner
    terminator = block.operations[len(block.operations) - 1].operation
    if combiner.name not in COMBINERS or len(combiner.operands) != 2 or \
            terminator.operands[0] != combiner.results[0]:
        return None
    element = ir.RankedTensorType(op.results[0].type).element_type
    if not isinstance(element, ir.FloatType if combiner.name in NEUTRAL_FLOAT
                      else ir.IntegerType):
        return None  # (an index accumulator, say)
    ranges = loop_ranges(op)
    if 0 in ranges:
        return None  # a loop no operand spans, or an empty one
    return Candidate(op, combiner, ranges, kept, reduced)


def _arg_candidate(op: ir.Operation) -> Candidate | None:
    """An argmax / argmin over one trailing loop (`payload.arg_reduction`, its index the
    loop's position: not a combine of partials already), static, read through projections,
    its two results written through one map."""
    arg = arg_reduction(op)
    if arg is None:
        return None
    jv, ji, kind, index_op = arg
    kinds = iterator_kinds(op)
    reduced = [i for i, k in enumerate(kinds) if k == "reduction"]
    kept = [i for i, k in enumerate(kinds) if k == "parallel"]
    if reduced != [len(kinds) - 1] or not all(
            _static(v) or not isinstance(v.type, ir.ShapedType) for v in op.operands):
        return None
    maps = _maps(op)
    reads = [projection(m) for m in maps]
    if any(r is None for r in reads) or reads[-1] != reads[-2] or reduced[0] in reads[-1]:
        return None
    block = op.regions[0].blocks[0]
    indices = [o.operation for o in block.operations if o.operation.name == "linalg.index"]
    users = [u.owner.operation if hasattr(u.owner, "operation") else u.owner
             for u in index_op.results[0].uses]
    if len(indices) != 1 or not users or \
            any(u.name not in ("arith.index_cast", "arith.index_castui") for u in users):
        return None  # the plain position only (the combine's form has a multiply too)
    combiner = block.operations[len(block.operations) - 1].operands[jv].owner.operation
    ranges = loop_ranges(op)
    if 0 in ranges:
        return None
    return Candidate(op, combiner, ranges, kept, reduced, arg)


def split_arg(c: Candidate, factor: int) -> None:
    """An argmax / argmin's row cut into `factor` chunks: partials (value, position within
    the chunk) over [kept..., chunk], folded by the payload itself from (the neutral value,
    0), then a combine over the chunks in order with the same rule, the position made the
    row's (`chunk * length + local`). The combine's fold meets the chunks in order and moves
    the index only for a larger value or the first NaN, so ties keep the first chunk's, and
    within it the first position: torch's answer."""
    op = c.op
    jv, ji, kind, index_op = c.arg
    operands = list(op.operands)
    n_in = len(operands) - 2
    reads = [projection(m) for m in _maps(op)]
    cut = c.reduced[0]
    new_inputs, new_maps = _cut_inputs(op, operands[:n_in], reads[:n_in], len(c.ranges),
                                       Cutter(cut, factor))
    ranges = c.ranges[:cut] + [factor, c.ranges[cut] // factor]
    length = ranges[-1]
    out_dims = list(c.kept) + [cut]
    shape = [ranges[d] for d in out_dims]
    p = len(c.kept)
    types = [ir.RankedTensorType(r.type).element_type for r in op.results]
    with ir.InsertionPoint(op), op.location:
        inits = []
        for j, element in enumerate(types):
            start = _neutral(c.combiner, element) if j == jv else \
                arith.ConstantOp(element, ir.IntegerAttr.get(element, 0)).result
            inits.append(linalg.fill(start, outs=[tensor.EmptyOp(shape, element).result]))
        partial = linalg.GenericOp(
            [ir.RankedTensorType.get(shape, t) for t in types], new_inputs, inits,
            ir.ArrayAttr.get(new_maps + [_map(len(ranges), out_dims)] * 2),
            _iterators(["parallel"] * (len(ranges) - 1) + ["reduction"]))
    _copy_payload(op, partial.operation)
    for inner in partial.regions[0].blocks[0].operations:
        if inner.operation.name == "linalg.index":  # the position within the chunk
            inner.operation.attributes["dim"] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), cut + 1)
    partial.operation.attributes[attributes.SPLIT_PARTIALS] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), factor)
    # The combine: [kept..., chunk] (a unit row loop for a whole-tensor argmax), the
    # payload's rule with the chunk's offset added to its position.
    unit = 1 if p == 0 else 0
    partials = list(partial.results)
    outs = operands[n_in:]
    place = {d: i for i, d in enumerate(c.kept)}
    with ir.InsertionPoint(op), op.location:
        if unit:
            outs = [_reshaped(v, [1]) for v in outs]
            partials = [tensor.ExpandShapeOp(ir.RankedTensorType.get([1, factor], t), v,
                                             [[0, 1]], [], [1, factor]).result
                        for v, t in zip(partials, types)]
        n = p + 1 + unit
        out_map = [0] if unit else [None if d is None else place[d] for d in reads[n_in]]
        combine = linalg.GenericOp(
            [v.type for v in outs], partials, outs,
            ir.ArrayAttr.get([_map(n, list(range(n)))] * 2 + [_map(n, out_map)] * 2),
            _iterators(["parallel"] * (n - 1) + ["reduction"]))
        block = combine.regions[0].blocks.append(*(types + types))
    value, local, acc_v, acc_i = block.arguments
    index_type = types[ji]
    with ir.InsertionPoint(block), op.location:
        chunk = arith.IndexCastOp(index_type, linalg.IndexOp(n - 1).result).result
        size = arith.ConstantOp(index_type, ir.IntegerAttr.get(index_type, length)).result
        position = arith.AddIOp(arith.MulIOp(chunk, size).result, local).result
        folded = ir.Operation.create(c.combiner.name, results=[types[jv]],
                                     operands=[value, acc_v]).results[0]
        index = arith.SelectOp(nan_first_move(kind, value, acc_v), position, acc_i).result
        results = [None, None]
        results[jv], results[ji] = folded, index
        linalg.YieldOp(results)
    for j, r in enumerate(op.results):
        new = combine.results[j]
        if unit:
            with ir.InsertionPoint(op), op.location:
                new = _reshaped(new, ir.RankedTensorType(r.type).shape)
        r.replace_all_uses_with(new)
    op.erase()


def _cut_inputs(op: ir.Operation, inputs: list[ir.Value], reads: list[list[int | None]],
                n_loops: int, cutter: "Cutter") -> tuple[list[ir.Value], list[ir.AffineMapAttr]]:
    """`op`'s inputs over the iteration space `cutter` cuts (one loop more): an input that
    reads the cut loop is cut with it (`Cutter.value`), the others kept; with their maps."""
    new_inputs, new_maps = [], []
    for v, dims in zip(inputs, reads):
        if isinstance(v.type, ir.ShapedType) and cutter.loop in dims:
            v = cutter.value(v, dims.index(cutter.loop), op)
        new_inputs.append(v)
        new_maps.append(_map(n_loops + 1, cutter.dims(dims)))
    return new_inputs, new_maps


def _map(n_dims: int, dims: list[int | None]) -> ir.AffineMapAttr:
    exprs = [ir.AffineDimExpr.get(d) if d is not None else ir.AffineConstantExpr.get(0)
             for d in dims]
    return ir.AffineMapAttr.get(ir.AffineMap.get(n_dims, 0, exprs))


def _iterators(kinds: list[str]) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{k}>") for k in kinds])


class Cutter:
    """Values cut along one loop: loop `loop` of extent e becomes loops (loop, loop + 1) of
    extents (factor, e / factor); later loops move up by one."""

    def __init__(self, loop: int, factor: int) -> None:
        self.loop, self.factor = loop, factor

    def dims(self, dims: list[int | None]) -> list[int | None]:
        out: list[int | None] = []
        for d in dims:
            if d is None or d < self.loop:
                out.append(d)
            elif d == self.loop:
                out += [d, d + 1]
            else:
                out.append(d + 1)
        return out

    def value(self, value: ir.Value, position: int, at: ir.Operation, depth: int = 0) -> ir.Value:
        """`value` with its dim `position` cut in two (factor first)."""
        shape = list(ir.RankedTensorType(value.type).shape)
        element = ir.RankedTensorType(value.type).element_type
        cut = shape[:position] + [self.factor, shape[position] // self.factor] + \
            shape[position + 1:]
        producer = defining_op(value)
        if producer is not None and depth < 8 and _elementwise(producer):
            return self.clone_elementwise(producer, position, cut, at, depth)
        groups = [[i] for i in range(position)] + [[position, position + 1]] + \
            [[i + 1] for i in range(position + 1, len(shape))]
        with ir.InsertionPoint(at), at.location:
            return tensor.ExpandShapeOp(ir.RankedTensorType.get(cut, element), value,
                                        groups, [], cut).result

    def clone_elementwise(self, op: ir.Operation, position: int, cut: list[int],
                          at: ir.Operation, depth: int) -> ir.Value:
        """`op` (elementwise, identity output map) over the cut iteration space."""
        inner = Cutter(position, self.factor)
        maps = _maps(op)
        operands = list(op.operands)
        n_in = len(operands) - 1
        new_operands, new_maps = [], []
        for v, m in zip(operands[:n_in], maps[:n_in]):
            dims = projection(m)
            if isinstance(v.type, ir.ShapedType) and position in dims:
                v = inner.value(v, dims.index(position), at, depth + 1)
            new_operands.append(v)
            new_maps.append(_map(len(cut), inner.dims(dims)))
        new_maps.append(_map(len(cut), list(range(len(cut)))))
        element = ir.RankedTensorType(op.results[0].type).element_type
        block_out = op.regions[0].blocks[0].arguments[n_in]
        if any(True for _ in block_out.uses):  # the payload reads its output's old value
            out = inner.value(operands[n_in], position, at, depth + 1)
        else:
            with ir.InsertionPoint(at), at.location:
                out = tensor.EmptyOp(cut, element).result
        with ir.InsertionPoint(at), at.location:
            clone = linalg.GenericOp([ir.RankedTensorType.get(cut, element)],
                                     new_operands, [out], ir.ArrayAttr.get(new_maps),
                                     _iterators(["parallel"] * len(cut)))
        _copy_payload(op, clone.operation)
        return clone.result


def _elementwise(op: ir.Operation) -> bool:
    """A one-result `linalg.generic`, all loops parallel, its output the identity, its reads
    dims or constants, no `linalg.index`: it can be computed over a cut iteration space."""
    if op.name != "linalg.generic" or len(op.results) != 1 or "reduction" in iterator_kinds(op):
        return False
    maps = [projection(m) for m in _maps(op)]
    if any(m is None for m in maps) or maps[-1] != list(range(len(maps[-1]))) or \
            not all(_static(v) or not isinstance(v.type, ir.ShapedType) for v in op.operands):
        return False
    return not any(o.operation.name == "linalg.index" for o in op.regions[0].blocks[0].operations)


def _copy_payload(source: ir.Operation, dest: ir.Operation) -> None:
    """Clone `source`'s payload into `dest`'s (new, empty) region."""
    old = source.regions[0].blocks[0]
    with source.location:
        block = dest.regions[0].blocks.append(*[a.type for a in old.arguments])
    mapping = {value_key(a): b for a, b in zip(old.arguments, block.arguments)}
    for inner in old.operations:
        clone = inner.operation.clone(ip=ir.InsertionPoint(block))
        for i, operand in enumerate(clone.operands):
            if value_key(operand) in mapping:
                clone.operands[i] = mapping[value_key(operand)]
        for a, b in zip(inner.operation.results, clone.results):
            mapping[value_key(a)] = b


def _reshaped(value: ir.Value, shape: list[int]) -> ir.Value:
    """`value`, of one element, as a tensor of `shape` (all ones, or 0-d)."""
    t = ir.RankedTensorType(value.type)
    if list(t.shape) == list(shape):
        return value
    if t.rank:
        value = tensor.CollapseShapeOp(ir.RankedTensorType.get([], t.element_type), value,
                                       []).result
    if not shape:
        return value
    return tensor.ExpandShapeOp(ir.RankedTensorType.get(shape, t.element_type), value, [], [],
                                shape).result


def _neutral(combiner: ir.Operation, element: ir.Type) -> ir.Value:
    if combiner.name in NEUTRAL_FLOAT:
        value = NEUTRAL_FLOAT[combiner.name]
        return arith.ConstantOp(element, ir.FloatAttr.get(element, value)).result
    width = ir.IntegerType(element).width
    value = _neutral_int(combiner.name, width)
    return arith.ConstantOp(element, ir.IntegerAttr.get(element, value)).result


def split(c: Candidate, loops_whole: int, factor: int, wide_combine: bool = False) -> None:
    """Rewrite `c.op` into partials and a combine (see the module's docstring): the first
    `loops_whole` reduced loops become the partials' dims, and the next one is cut by
    `factor` (1: not cut). `wide_combine`: an f32 combine that rounds (a sum, a product)
    folds the partials in f64 and rounds once."""
    op = c.op
    operands = list(op.operands)
    n_in = len(operands) - 1
    reads = [projection(m) for m in _maps(op)]
    n_loops = len(c.ranges)
    partial_loops = c.reduced[:loops_whole]
    ranges = list(c.ranges)
    if factor > 1:
        cut = c.reduced[loops_whole]
        cutter = Cutter(cut, factor)
        new_inputs, new_maps = _cut_inputs(op, operands[:n_in], reads[:n_in], n_loops, cutter)
        renumber = cutter.dims
        ranges = ranges[:cut] + [factor, ranges[cut] // factor] + ranges[cut + 1:]
        partial_loops = renumber(partial_loops) + [cut]
    else:
        new_inputs = operands[:n_in]
        new_maps = [_map(n_loops, dims) for dims in reads[:n_in]]
        renumber = list
    kept = renumber(c.kept)  # the parallel loops, in the partials' numbering
    n_space = len(ranges)
    # The partials: [kept loops..., partial loops...], each in loop order.
    out_dims = kept + partial_loops
    p = len(kept)
    acc_type = ir.RankedTensorType(op.results[0].type).element_type
    shape = [ranges[d] for d in out_dims]
    with ir.InsertionPoint(op), op.location:
        neutral = _neutral(c.combiner, acc_type)
        init = linalg.fill(neutral, outs=[tensor.EmptyOp(shape, acc_type).result])
        partial = linalg.GenericOp(
            [ir.RankedTensorType.get(shape, acc_type)], new_inputs, [init],
            ir.ArrayAttr.get(new_maps + [_map(n_space, out_dims)]),
            _iterators(["parallel" if d in out_dims else "reduction"
                        for d in range(n_space)]))
    _copy_payload(op, partial.operation)
    partial.operation.attributes[attributes.SPLIT_PARTIALS] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), math.prod(shape[p:]))
    # The combine: loops [kept..., one partials dim] (several partial dims are one to it: a
    # view between the two kernels), its result written through the original output map
    # with each kept loop renumbered to its place. A reduction to one value gets a unit
    # parallel loop, so that the combine is a row (one block on the GPU) rather than a loop
    # with none to spread.
    unit = 1 if p == 0 else 0
    init = operands[n_in]
    partials = partial.result
    count = math.prod(shape[p:])
    place = {d: i for i, d in enumerate(c.kept)}
    with ir.InsertionPoint(op), op.location:
        if len(shape) - p > 1:
            partials = tensor.CollapseShapeOp(
                ir.RankedTensorType.get(shape[:p] + [count], acc_type),
                partials, [[i] for i in range(p)] + [list(range(p, len(shape)))]).result
        if unit:
            init = _reshaped(init, [1])
            partials = tensor.ExpandShapeOp(ir.RankedTensorType.get([1, count], acc_type),
                                            partials, [[0, 1]], [], [1, count]).result
        out_map = [0] if unit else [None if d is None else place[d] for d in reads[n_in]]
        combine = linalg.GenericOp(
            [init.type], [partials], [init],
            ir.ArrayAttr.get([_map(p + 1 + unit, list(range(p + 1 + unit))),
                              _map(p + 1 + unit, out_map)]),
            _iterators(["parallel"] * (p + unit) + ["reduction"]))
        block = combine.regions[0].blocks.append(acc_type, acc_type)
        result = _reshaped(combine.result, ir.RankedTensorType(op.results[0].type).shape) \
            if unit else combine.result
    attrs = {c.combiner.attributes[i].name: c.combiner.attributes[i].attr
             for i in range(len(c.combiner.attributes))}
    with ir.InsertionPoint(block), op.location:
        folded = ir.Operation.create(c.combiner.name, results=[acc_type],
                                     operands=[block.arguments[0], block.arguments[1]],
                                     attributes=attrs)
        linalg.YieldOp([folded.results[0]])
    op.results[0].replace_all_uses_with(result)
    op.erase()
    if wide_combine:
        widen(combine.operation, ir.F64Type.get(), ("f32",))


@register
@dataclass
class SplitReductionsPass(Pass):
    """Long reductions over few rows: partials in parallel, then a combine (cost model)."""

    ARGUMENT = "fusion-split-reductions"
    device: str = "cpu"

    def run(self, module: ir.Operation) -> None:
        device = cost_model.device_named(self.device)
        for op in walk_ops(module, lambda o: o.name == "linalg.generic"):
            if op.parent.name == "fusion.group":
                continue  # a kernel formed already (an attention chain's softmax)
            c = candidate(op)
            if c is None:
                continue
            rows = math.prod(c.ranges[d] for d in c.kept)
            extents = [c.ranges[d] for d in c.reduced]
            wanted = cost_model.reduction_partials(
                rows, math.prod(extents), c.combiner.name in EXACT, device, c.trailing)
            if wanted < 2:
                continue
            whole, factor = cost_model.factor_partials(extents, wanted)
            if whole == 0 and factor == 1:
                continue
            if c.arg is not None:
                split_arg(c, factor)
                continue
            split(c, whole, factor, wide_combine=device.name == cost_model.CPU_HOST.name)
