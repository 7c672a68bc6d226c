"""--fusion-propagate-reshapes: move reshapes inside groups through elementwise ops.

A reshape (`tensor.collapse_shape`/`expand_shape`) between two ops of a group stops
tile-and-fuse: the tiling interface cannot slice through it, so the ops before it stay
outside the tile loop. torch-mlir puts one on each side of every linear layer applied to a
3-D activation (collapse, matmul, expand), so a GELU before or a bias/residual after the
matmul is cut off. For elementwise ops (all loops parallel, identity maps, no
`linalg.index`) the reshape commutes with the op, and this pass moves it:

- up:   collapse(elementwise(a, b)) -> elementwise(collapse(a), collapse(b)), when the
        collapse is the op's only user;
- down: elementwise(expand(a), b) -> expand(elementwise(a, collapse(b))): the other
        operands are collapsed alike (an empty init becomes a smaller empty).

Repeated until nothing moves, reshapes gather at group edges (then views in the host, see
--fusion-hoist-reshapes) or meet their inverse (canonicalize folds collapse(expand(x))).
The op is rewritten in place (operands, maps, result type); its payload does not depend on
the rank.

Before:
    %g = linalg.generic {maps = [(d0, d1, d2) -> (d0, d1, d2), ...]} ins(%x : tensor<4x8x16xf32>)
    %c = tensor.collapse_shape %g [[0, 1], [2]] : tensor<4x8x16xf32> into tensor<32x16xf32>
After:
    %x2 = tensor.collapse_shape %x [[0, 1], [2]] : tensor<4x8x16xf32> into tensor<32x16xf32>
    %g = linalg.generic {maps = [(d0, d1) -> (d0, d1), ...]} ins(%x2 : tensor<32x16xf32>)
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from mlir.dialects import tensor

from fusec.passes.grouping import defining_op, is_elementwise, retype_elementwise
from fusec.passes.inline_groups import groups_in
from fusec.passes.registry import Pass, register


def _collapsed(value: ir.Value, shape: list[int], reassociation: ir.Attribute) -> ir.Value:
    """`value` collapsed to `shape` (at the insertion point): an empty init becomes a smaller
    empty, anything else a tensor.collapse_shape."""
    element = ir.RankedTensorType(value.type).element_type
    source = defining_op(value)
    if source is not None and source.name == "tensor.empty":
        return tensor.EmptyOp(shape, element).result
    return tensor.CollapseShapeOp(ir.RankedTensorType.get(shape, element), value,
                                  reassociation).result


def collapse_up(collapse: ir.Operation) -> bool:
    """collapse(elementwise(...)) -> elementwise(collapse(...)); True if rewritten."""
    producer = defining_op(collapse.operands[0])
    if producer is None or not is_elementwise(producer):
        return False
    if sum(1 for _ in producer.results[0].uses) != 1:
        return False
    reassociation = collapse.attributes["reassociation"]
    result_type = collapse.results[0].type
    new_operands = []
    shape = ir.RankedTensorType(result_type).shape
    with ir.InsertionPoint(producer), collapse.location:
        for value in producer.operands:
            if isinstance(value.type, ir.RankedTensorType):
                value = _collapsed(value, shape, reassociation)
            new_operands.append(value)
    retype_elementwise(producer, new_operands, result_type)
    collapse.results[0].replace_all_uses_with(producer.results[0])
    collapse.erase()
    return True


def expand_down(op: ir.Operation) -> bool:
    """elementwise(expand(a), b) -> expand(elementwise(a, collapse(b))); True if rewritten.

    Any operand that is not an expand of the same reassociation is collapsed instead (an
    empty init becomes a smaller empty): a collapse of a group input is a view once hoisted,
    and one of an elementwise result moves further up. Every rewrite lowers one op's rank,
    so repeating it ends.
    """
    if not is_elementwise(op):
        return False
    expands = [p for v in op.operands
               if (p := defining_op(v)) is not None and p.name == "tensor.expand_shape"]
    if not expands:
        return False
    first = expands[0]
    reassociation = first.attributes["reassociation"]
    source_shape = ir.RankedTensorType(first.operands[0].type).shape
    matching = [e for e in expands
                if str(e.attributes["reassociation"]) == str(reassociation)
                and ir.RankedTensorType(e.operands[0].type).shape == source_shape]
    result = ir.RankedTensorType(op.results[0].type)
    new_operands = []
    with ir.InsertionPoint(op), op.location:
        narrow = ir.RankedTensorType.get(source_shape, result.element_type)
        for value in op.operands:
            if not isinstance(value.type, ir.RankedTensorType):
                new_operands.append(value)
                continue
            producer = defining_op(value)
            if producer is not None and any(producer == e for e in matching):
                value = producer.operands[0]
            else:
                value = _collapsed(value, source_shape, reassociation)
            new_operands.append(value)
    old_uses = [(u.owner, u.operand_number) for u in op.results[0].uses]
    retype_elementwise(op, new_operands, narrow)
    with ir.InsertionPoint.after(op), op.location:
        expanded = tensor.ExpandShapeOp(result, op.results[0], reassociation, [],
                                        first.attributes["static_output_shape"])
    for owner, number in old_uses:
        owner.operation.operands[number] = expanded.result
    return True


def propagate_in(group: ir.Operation) -> None:
    """Move reshapes through the group's elementwise ops until none moves."""
    body = group.regions[0].blocks[0]
    changed = True
    budget = 10000  # each step moves one reshape one op towards an edge; this is ample
    while changed and budget:
        changed, budget = False, budget - 1
        for op in [o.operation for o in body.operations]:
            if op.name == "tensor.collapse_shape" and collapse_up(op):
                changed = True
                break
            if op.name.startswith("linalg.") and expand_down(op):
                changed = True
                break


@register
@dataclass
class PropagateReshapesPass(Pass):
    """Move reshapes through elementwise ops inside groups, towards the group's edges."""

    ARGUMENT = "fusion-propagate-reshapes"

    def run(self, module: ir.Operation) -> None:
        for group in groups_in(module):
            propagate_in(group)
