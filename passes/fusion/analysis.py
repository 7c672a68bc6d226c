"""What the fusion passes need to know about each op: its category, loops and data movement.

`analyse_block(block)` describes every compute op of a function body as an `OpFacts`: its
category (elementwise, reduction, contraction, ...), its iteration space, for each tensor
operand and result which loop each tensor dimension follows (the indexing maps, reduced to
"dim i of this tensor is loop j"), the bytes it reads and writes as a kernel of its own, and
its flops. Nothing here decides anything; `cost_model` and the fusion passes do.

Named linalg ops carry no `indexing_maps` attribute in the Python bindings, so the maps of
the ones torch-mlir emits (fill, matmul, batch_matmul, transpose, broadcast, reduce, the
elementwise named ops, convolutions and pooling) are spelled out here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlir.ir as ir

from fusec.passes.grouping import defining_op, is_compute, op_key

# Categories. CHEAP ones may be recomputed freely; EXPENSIVE ones are written once.
ELEMENTWISE = "elementwise"  # all loops parallel, output follows the loops (includes broadcasts)
TRANSPOSE = "transpose"  # all loops parallel, permuted output
FILL = "fill"
RESHAPE = "reshape"  # tensor.expand_shape / collapse_shape
SLICE = "slice"  # tensor.extract_slice with static sizes and unit strides
PAD = "pad"  # tensor.pad with static shapes
CONCAT = "concat"  # tensor.concat: each piece's dims follow the result's (one of them offset)
REDUCTION = "reduction"
CONTRACTION = "contraction"  # matmul, batch_matmul, generic multiply-accumulate
WINDOW = "window"  # convolutions and pooling
OTHER = "other"

CHEAP = frozenset({ELEMENTWISE, TRANSPOSE, FILL, RESHAPE, SLICE, PAD, CONCAT})
EXPENSIVE = frozenset({REDUCTION, CONTRACTION, WINDOW})

# A tensor dimension's loop: a loop index; None when the dimension follows no loop (a constant
# index such as the `0` of a kept unit dimension); WINDOWED when it follows a compound
# expression of loops (a convolution's `oh + kh`), which no tile slices without a halo.
DimMap = list  # list[int | None]
WINDOWED = -1

_ELEMENTWISE_NAMED = frozenset({
    "linalg.add", "linalg.sub", "linalg.mul", "linalg.div", "linalg.div_unsigned",
    "linalg.max", "linalg.min", "linalg.powf", "linalg.exp", "linalg.log", "linalg.abs",
    "linalg.ceil", "linalg.floor", "linalg.negf", "linalg.reciprocal", "linalg.round",
    "linalg.sqrt", "linalg.rsqrt", "linalg.square", "linalg.tanh", "linalg.erf",
    "linalg.copy", "linalg.select", "linalg.elementwise",
})


@dataclass
class OpFacts:
    """One compute op as the fusion passes see it."""

    op: ir.Operation
    key: int
    position: int
    name: str
    category: str
    loop_ranges: list[int]
    loop_parallel: list[bool]
    # Per tensor operand (in operand order; None for scalars) and per result: tensor dim -> loop.
    operand_maps: list[DimMap | None]
    result_maps: list[DimMap]
    bytes_read: int
    bytes_written: int
    flops: int
    # Loops that are an inner part of a reshape's merged dimension: tiling them would not
    # give a contiguous slice on the other side of the reshape.
    merged_inner_loops: set[int] = field(default_factory=set)
    producers: list[int] = field(default_factory=list)  # keys of compute producers (unique)
    users: list[int] = field(default_factory=list)  # keys of top-level users (unique)

    @property
    def is_cheap(self) -> bool:
        return self.category in CHEAP

    @property
    def location(self) -> str:
        return short_location(self.op)


def short_location(op: ir.Operation) -> str:
    """`line:col` of an op's file location, or the location as MLIR prints it."""
    text = str(op.location)
    if text.startswith('loc("') and text.count(":") >= 2:
        inner = text[len('loc("'):].rstrip(")")
        parts = inner.rsplit(":", 2)
        if len(parts) == 3:
            return f"{parts[1]}:{parts[2]}"
    return text


def element_bytes(element_type: ir.Type) -> int:
    """Size in bytes of one element (i1 counts as one byte, index as eight)."""
    if isinstance(element_type, ir.IndexType):
        return 8
    width = getattr(element_type, "width", None)
    if width is None:
        try:
            width = ir.IntegerType(element_type).width
        except (ValueError, TypeError):
            width = 32
    return max(1, (width + 7) // 8)


def tensor_shape(t: ir.Type) -> list[int] | None:
    """Static shape of a ranked tensor type, None for anything else or a dynamic shape."""
    if not isinstance(t, ir.RankedTensorType):
        try:
            t = ir.RankedTensorType(t)
        except (ValueError, TypeError):
            return None
    shape = list(t.shape)
    if any(d < 0 for d in shape):
        return None
    return shape


def tensor_bytes(t: ir.Type) -> int:
    """Bytes of a statically shaped tensor type (0 for scalars and dynamic shapes)."""
    shape = tensor_shape(t)
    if shape is None:
        return 0
    n = element_bytes(ir.RankedTensorType(t).element_type)
    for d in shape:
        n *= d
    return n


def _affine_dims(map_attr: ir.Attribute) -> DimMap:
    result: DimMap = []
    for expr in ir.AffineMapAttr(map_attr).value.results:
        if isinstance(expr, ir.AffineDimExpr):
            result.append(expr.position)
        else:
            result.append(None if isinstance(expr, ir.AffineConstantExpr) else WINDOWED)
    return result


def _identity(rank: int) -> DimMap:
    return list(range(rank))


def _dps_split(op: ir.Operation) -> tuple[int, int]:
    """(number of `ins`, number of `outs`) of a destination-style linalg op."""
    if "operandSegmentSizes" in op.attributes:
        sizes = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        return sizes[0], sizes[1]
    return len(op.operands) - len(op.results), len(op.results)


def _ranges_from_maps(op: ir.Operation, operand_maps: list[DimMap | None],
                      n_loops: int) -> list[int]:
    ranges = [1] * n_loops
    for operand, dims in zip(op.operands, operand_maps):
        shape = tensor_shape(operand.type)
        if shape is None or dims is None:
            continue
        for size, loop in zip(shape, dims):
            if loop is not None and 0 <= loop < n_loops:
                ranges[loop] = max(ranges[loop], size)
    return ranges


def _body_op_count(op: ir.Operation) -> int:
    if not op.regions or not op.regions[0].blocks:
        return 1
    count = sum(1 for inner in op.regions[0].blocks[0].operations
                if inner.operation.name not in ("linalg.yield", "linalg.index"))
    return max(1, count)


def _body_has(op: ir.Operation, names: tuple[str, ...]) -> bool:
    if not op.regions or not op.regions[0].blocks:
        return False
    return any(inner.operation.name in names for inner in op.regions[0].blocks[0].operations)


def _generic_facts(op: ir.Operation) -> tuple[str, list[int], list[bool], list, list]:
    maps = [_affine_dims(a) for a in op.attributes["indexing_maps"]]
    parallel = ["parallel" in str(a) for a in op.attributes["iterator_types"]]
    n_in, n_out = _dps_split(op)
    operand_maps: list[DimMap | None] = []
    for i, operand in enumerate(op.operands):
        operand_maps.append(maps[i] if tensor_shape(operand.type) is not None else None)
    result_maps = maps[n_in:n_in + n_out]
    ranges = _ranges_from_maps(op, operand_maps, len(parallel))
    if all(parallel):
        transposed = any([d for d in m if d is not None and d >= 0]
                         != sorted(d for d in m if d is not None and d >= 0) for m in result_maps)
        category = TRANSPOSE if transposed else ELEMENTWISE
        return category, ranges, parallel, operand_maps, result_maps
    reduction_loops = {i for i, p in enumerate(parallel) if not p}
    inputs_with_reduction = sum(
        1 for m in operand_maps[:n_in]
        if m is not None and reduction_loops & {d for d in m if d is not None})
    if any(d == WINDOWED for m in operand_maps[:n_in] if m is not None for d in m):
        return WINDOW, ranges, parallel, operand_maps, result_maps
    is_mac = (_body_has(op, ("arith.mulf", "arith.muli"))
              and _body_has(op, ("arith.addf", "arith.addi")))
    category = CONTRACTION if inputs_with_reduction >= 2 and is_mac else REDUCTION
    return category, ranges, parallel, operand_maps, result_maps


def _named_facts(op: ir.Operation) -> tuple[str, list[int], list[bool], list, list] | None:
    name = op.name
    shapes = [tensor_shape(v.type) for v in op.operands]
    out_shape = tensor_shape(op.results[0].type) if len(op.results) else None
    if out_shape is None:
        return None
    rank = len(out_shape)
    if "indexing_maps" in op.attributes and name in ("linalg.matmul", "linalg.batch_matmul"):
        maps = [_affine_dims(a) for a in op.attributes["indexing_maps"]]
        n_loops = 1 + max(d for m in maps for d in m if d is not None)
        parallel = [d in maps[2] for d in range(n_loops)]
        return CONTRACTION, _ranges_from_maps(op, maps, n_loops), parallel, maps, [maps[2]]
    if name == "linalg.matmul":
        maps = [[0, 2], [2, 1], [0, 1]]
        return CONTRACTION, _ranges_from_maps(op, maps, 3), [True, True, False], maps, [[0, 1]]
    if name == "linalg.batch_matmul":
        maps = [[0, 1, 3], [0, 3, 2], [0, 1, 2]]
        return (CONTRACTION, _ranges_from_maps(op, maps, 4), [True, True, True, False], maps,
                [[0, 1, 2]])
    if name == "linalg.fill":
        return FILL, out_shape, [True] * rank, [None, _identity(rank)], [_identity(rank)]
    if name == "linalg.transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        # output dim i is input dim perm[i]: the input's dim j follows the loop i with perm[i] == j
        in_map = [perm.index(j) for j in range(rank)]
        return TRANSPOSE, out_shape, [True] * rank, [in_map, _identity(rank)], [_identity(rank)]
    if name == "linalg.broadcast":
        added = set(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        in_map = [d for d in range(rank) if d not in added]
        return ELEMENTWISE, out_shape, [True] * rank, [in_map, _identity(rank)], [_identity(rank)]
    if name == "linalg.reduce":
        reduced = set(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        in_rank = len(shapes[0] or [])
        kept = [d for d in range(in_rank) if d not in reduced]
        n_in, _ = _dps_split(op)
        maps = [_identity(in_rank)] * n_in + [kept] * (len(op.operands) - n_in)
        return (REDUCTION, list(shapes[0]), [d not in reduced for d in range(in_rank)], maps,
                [kept] * len(op.results))
    if name in _ELEMENTWISE_NAMED:
        maps = [_identity(rank) if s is not None and len(s) == rank else None for s in shapes]
        return ELEMENTWISE, out_shape, [True] * rank, maps, [_identity(rank)]
    if name == "linalg.conv_2d_nchw_fchw" and len(out_shape) == 4 and shapes[1] is not None:
        # loops (n, f, oh, ow, c, kh, kw): a contraction whose input is read through windows
        c, kh, kw = shapes[1][1], shapes[1][2], shapes[1][3]
        maps = [[0, 4, WINDOWED, WINDOWED], [1, 4, 5, 6], [0, 1, 2, 3]]
        return (CONTRACTION, list(out_shape) + [c, kh, kw], [True] * 4 + [False] * 3, maps,
                [[0, 1, 2, 3]])
    if name.startswith("linalg.pooling_nchw") and len(out_shape) == 4 and shapes[1] is not None:
        # loops (n, c, oh, ow, kh, kw); operand 1 only carries the window's shape
        kh, kw = shapes[1][0], shapes[1][1]
        maps = [[0, 1, WINDOWED, WINDOWED], [4, 5], [0, 1, 2, 3]]
        return (WINDOW, list(out_shape) + [kh, kw], [True] * 4 + [False] * 2, maps, [[0, 1, 2, 3]])
    if name.startswith("linalg.conv") or name.startswith("linalg.pooling") or name.startswith(
            "linalg.depthwise"):
        # The output follows the first `rank` loops; the windowed inputs follow compound
        # expressions, which no tile of the output slices contiguously.
        n_in, _ = _dps_split(op)
        maps = [None if i < n_in else _identity(rank) for i in range(len(op.operands))]
        return WINDOW, out_shape, [True] * rank, maps, [_identity(rank)]
    return None


def _reshape_facts(op: ir.Operation) -> tuple[str, list[int], list[bool], list, list, set[int]]:
    """Loops of a reshape are the dims of its higher-rank side; the lower-rank side's dim g
    follows the outermost non-unit loop of reassociation group g (inner ones are merged)."""
    src_shape = tensor_shape(op.operands[0].type) or []
    res_shape = tensor_shape(op.results[0].type) or []
    expanding = op.name == "tensor.expand_shape"
    high = res_shape if expanding else src_shape
    groups = [[ir.IntegerAttr(i).value for i in g] for g in op.attributes["reassociation"]]
    low_map: DimMap = []
    merged_inner: set[int] = set()
    for group in groups:
        non_unit = [d for d in group if high[d] != 1]
        low_map.append(non_unit[0] if non_unit else None)
        merged_inner.update(non_unit[1:])
    high_map = _identity(len(high))
    operand_maps: list[DimMap | None] = [low_map if expanding else high_map]
    operand_maps += [None] * (len(op.operands) - 1)  # dynamic output_shape operands
    result_maps = [high_map if expanding else low_map]
    return RESHAPE, list(high), [True] * len(high), operand_maps, result_maps, merged_inner


def _slice_facts(op: ir.Operation) -> tuple[str, list[int], list[bool], list, list] | None:
    src_shape = tensor_shape(op.operands[0].type)
    res_shape = tensor_shape(op.results[0].type)
    if src_shape is None or res_shape is None or len(src_shape) != len(res_shape):
        return None
    strides = ir.DenseI64ArrayAttr(op.attributes["static_strides"])
    if len(op.operands) != 1 or any(s != 1 for s in strides):
        return None
    rank = len(res_shape)
    return SLICE, list(res_shape), [True] * rank, [_identity(rank)], [_identity(rank)]


def _pad_facts(op: ir.Operation) -> tuple[str, list[int], list[bool], list, list] | None:
    """A static pad: its result dims follow the source's (shifted by the low padding)."""
    res_shape = tensor_shape(op.results[0].type)
    if res_shape is None or tensor_shape(op.operands[0].type) is None:
        return None
    rank = len(res_shape)
    maps = [_identity(rank)] + [None] * (len(op.operands) - 1)
    return PAD, list(res_shape), [True] * rank, maps, [_identity(rank)]


def _concat_facts(op: ir.Operation) -> tuple[str, list[int], list[bool], list, list] | None:
    """A static concat: every piece's dims follow the result's (along the concat dim, offset
    by the pieces before it), as a slice's follow its source's."""
    res_shape = tensor_shape(op.results[0].type)
    if res_shape is None or any(tensor_shape(v.type) is None for v in op.operands):
        return None
    rank = len(res_shape)
    return (CONCAT, list(res_shape), [True] * rank, [_identity(rank)] * len(op.operands),
            [_identity(rank)])


def describe(op: ir.Operation, position: int) -> OpFacts:
    """The facts of one compute op."""
    merged: set[int] = set()
    facts = None
    if op.name == "linalg.generic":
        facts = _generic_facts(op)
    elif op.name in ("tensor.expand_shape", "tensor.collapse_shape"):
        *facts, merged = _reshape_facts(op)
    elif op.name == "tensor.extract_slice":
        facts = _slice_facts(op)
    elif op.name == "tensor.pad":
        facts = _pad_facts(op)
    elif op.name == "tensor.concat":
        facts = _concat_facts(op)
    elif op.name.startswith("linalg."):
        facts = _named_facts(op)
    if facts is None:
        shape = tensor_shape(op.results[0].type) if len(op.results) else None
        rank = len(shape or [])
        facts = (OTHER, list(shape or []), [True] * rank, [None] * len(op.operands),
                 [_identity(rank) if tensor_shape(r.type) is not None else [] for r in op.results])
    category, ranges, parallel, operand_maps, result_maps = facts
    return OpFacts(
        op=op, key=op_key(op), position=position, name=op.name, category=category,
        loop_ranges=list(ranges), loop_parallel=list(parallel),
        operand_maps=list(operand_maps), result_maps=list(result_maps),
        bytes_read=_bytes_read(op, category),
        bytes_written=sum(tensor_bytes(r.type) for r in op.results),
        flops=_flops(op, category, ranges), merged_inner_loops=merged,
    )


def _bytes_read(op: ir.Operation, category: str) -> int:
    """Bytes an op reads as a kernel of its own: its tensor inputs, and the accumulator
    init of reductions and contractions (elementwise `outs` are never read). Reshapes and
    fills read nothing of their own."""
    if category in (RESHAPE, FILL):
        return 0
    n_in, _ = _dps_split(op) if op.name.startswith("linalg.") else (len(op.operands), 0)
    total = 0
    for i, operand in enumerate(op.operands):
        if i >= n_in and category not in (REDUCTION, CONTRACTION, WINDOW):
            continue
        total += tensor_bytes(operand.type)
    return total


def _flops(op: ir.Operation, category: str, ranges: list[int]) -> int:
    points = 1
    for r in ranges:
        points *= r
    if category in (RESHAPE, FILL, SLICE, TRANSPOSE, PAD, CONCAT):
        return 0
    if category == CONTRACTION:
        return 2 * points
    return points * _body_op_count(op)


def _top_level_owner(user: ir.Operation, block: ir.Block) -> ir.Operation | None:
    """The ancestor of `user` that sits directly in `block`."""
    op = user
    while op is not None:
        parent_block = op.block if hasattr(op, "block") else None
        if parent_block is not None and parent_block == block:
            return op
        parent = op.parent
        op = parent.operation if parent is not None else None
    return None


@dataclass
class BlockGraph:
    """The compute ops of one block and the producer/user edges between them."""

    block: ir.Block
    facts: dict[int, OpFacts]
    order: list[int]  # keys of compute ops in block order
    positions: dict[int, int]  # key -> position of every op in the block
    ops: dict[int, ir.Operation]  # key -> op, for every op in the block


def analyse_block(block: ir.Block) -> BlockGraph:
    """Describe every compute op of `block` and link producers and users (linear time)."""
    facts: dict[int, OpFacts] = {}
    order: list[int] = []
    positions: dict[int, int] = {}
    ops: dict[int, ir.Operation] = {}
    for i, op in enumerate(block.operations):
        op = op.operation
        key = op_key(op)
        positions[key] = i
        ops[key] = op
        if is_compute(op):
            facts[key] = describe(op, i)
            order.append(key)
    for key in order:
        f = facts[key]
        for operand in f.op.operands:
            producer = defining_op(operand)
            if producer is None:
                continue
            pkey = op_key(producer)
            if pkey in facts and pkey not in f.producers:
                f.producers.append(pkey)
        for result in f.op.results:
            for use in result.uses:
                owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
                top = _top_level_owner(owner, block)
                ukey = op_key(top) if top is not None else 0
                if ukey and ukey not in f.users:
                    f.users.append(ukey)
    return BlockGraph(block=block, facts=facts, order=order, positions=positions, ops=ops)
