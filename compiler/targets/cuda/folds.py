"""CUDA target: what a data-movement kernel's folds read (movement.py's family).

A fold is a reduction (a `linalg.generic` with reduction loops) or a window (pooling, a
grouped or depthwise convolution) that one output element of a kernel folds. The family
sizes its launch by the most points any output element folds (`fold_points`,
`cost_model.movement_launch_shape`), unrolls windows up to MAX_WINDOW_POINTS, and names the
op that combines a reduction's payload into its accumulator (`reduction_combiner`).
"""

from __future__ import annotations

import math

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import iterators, tensor_info, value_key
from fusec.compiler.targets.cuda.device import CudaCodegenError

# Window ops whose window is small enough to unroll per output element: pooling, and
# grouped / depthwise convolutions with few input channels per group.
WINDOW_OPS = frozenset({"linalg.pooling_nchw_max", "linalg.pooling_nchw_sum",
                        "linalg.conv_2d_ngchw_gfchw", "linalg.depthwise_conv_2d_nchw_chw"})
MAX_WINDOW_POINTS = 64  # multiply-adds (or compares) per output element, unrolled


def reduction_combiner(op: ir.Operation, result: int) -> str:
    """The op that folds a reduction payload's value into its accumulator, through the
    16-bit widening's casts (`truncf(addf(extf(x), extf(acc)))` folds by addf)."""
    from fusec.compiler.targets.cuda.device import COMBINERS

    block = op.regions[0].blocks[0]
    acc = block.arguments[len(op.operands) - len(op.results) + result]
    yielded = block.operations[len(block.operations) - 1].operands[result]

    def strip(v: ir.Value) -> ir.Value:
        owner = v.owner
        if not isinstance(owner, ir.Block) and owner.operation.name in ("arith.truncf",
                                                                       "arith.extf"):
            return owner.operation.operands[0]
        return v

    core = strip(yielded)
    owner = core.owner
    if isinstance(owner, ir.Block) or owner.operation.name not in COMBINERS or \
            value_key(acc) not in {value_key(strip(v)) for v in owner.operation.operands}:
        raise CudaCodegenError("a reduction payload that does not end in a known combiner")
    return owner.operation.name


def loop_ranges(op: ir.Operation) -> list[int]:
    """A generic's loop extents, from its operands' shapes through their maps."""
    ranges: dict[int, int] = {}
    for attr, v in zip(ir.ArrayAttr(op.attributes["indexing_maps"]), op.operands):
        m = ir.AffineMapAttr(attr).value
        shape = tensor_info(v.type)[0]
        for e, size in zip(m.results, shape):
            if isinstance(e, ir.AffineDimExpr):
                ranges[e.position] = size
    n = ir.AffineMapAttr(ir.ArrayAttr(op.attributes["indexing_maps"])[0]).value.n_dims
    if any(d not in ranges for d in range(n)):
        raise CudaCodegenError("a loop whose extent no operand gives")
    return [ranges[d] for d in range(n)]


def most_reduced_points(group: ir.Operation) -> int:
    """The most points any reduction of `group` folds per output element (the "reduce"
    shape's slices along rows are sized to it)."""
    most = 1
    for op in group.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "linalg.generic" and any(k != "parallel" for k in iterators(op)):
            ranges = loop_ranges(op)
            most = max(most, math.prod(r for r, k in zip(ranges, iterators(op))
                                       if k != "parallel"))
    return most


def fold_points(group: ir.Operation) -> int:
    """The most input points any output element of `group` folds: its reductions' and its
    windows' (the direct shape's parallelism follows it: `cost_model.movement_launch_shape`)."""
    return max([most_reduced_points(group)] + _windows_points(group))


def split_points(group: ir.Operation) -> int:
    """The most points a "reduce" shape's slices split per output element: its reductions'
    and its windows' longer than MAX_WINDOW_POINTS (shorter windows are unrolled)."""
    return max([most_reduced_points(group)] +
               [p for p in _windows_points(group) if p > MAX_WINDOW_POINTS])


def _windows_points(group: ir.Operation) -> list[int]:
    return [window_points(op.operation) for op in group.regions[0].blocks[0].operations
            if op.operation.name in WINDOW_OPS]


def window_extents(op: ir.Operation) -> list[int]:
    """The window's loop extents, in the order one output element folds them: kh, kw (a
    grouped convolution: its input channels per group, kh, kw)."""
    shape = tensor_info(op.operands[1].type)[0]
    return shape[2:] if op.name == "linalg.conv_2d_ngchw_gfchw" else shape[-2:]


def window_points(op: ir.Operation) -> int:
    """Points of the window one output element folds (a convolution: times its input
    channels per group)."""
    return math.prod(window_extents(op))
