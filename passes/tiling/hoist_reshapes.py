"""--fusion-hoist-reshapes: move reshapes at a group's boundary out of the group.

`tensor.expand_shape`/`tensor.collapse_shape` of a dense row-major tensor move no data:
after bufferization they are views. Inside a kernel, a reshape of a kernel input or of the
kernel's result only blocks tiling (it is not tileable), so this pass moves them out to
the host function, where they become views of the plan's buffers. A reshape is at the
boundary when its source is a group input (input side) or its only user is the group's
`fusion.yield` (output side) and it does not reshape a constant (a constant stays in a
kernel, where it is a global). A group left with no compute disappears.

Before:
    %0 = fusion.group single (%arg1 = %a : tensor<4x8xf32>) -> tensor<32xf32> {
      %c = tensor.collapse_shape %arg1 [[0, 1]] : tensor<4x8xf32> into tensor<32xf32>
      %1 = linalg.exp ins(%c : tensor<32xf32>) outs(...) -> tensor<32xf32>
      fusion.yield %1 : tensor<32xf32>
    }
After:
    %c = tensor.collapse_shape %a [[0, 1]] : tensor<4x8xf32> into tensor<32xf32>
    %0 = fusion.group single (%arg1 = %c : tensor<32xf32>) -> tensor<32xf32> {
      %1 = linalg.exp ins(%arg1 : tensor<32xf32>) outs(...) -> tensor<32xf32>
      fusion.yield %1 : tensor<32xf32>
    }
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.grouping import (RESHAPE_OPS, defining_op, form_group, op_key,
                                   producer_through_reshapes)
from fusec.passes.inline_groups import groups_in, inline_group
from fusec.passes.registry import Pass, register
from mlir import ir

FREE_OPS = frozenset({"arith.constant", "tensor.empty"})


def boundary_reshapes(group: ir.Operation) -> list[ir.Operation]:
    """The group's reshapes that read only group inputs or feed only the yield."""
    body = group.regions[0].blocks[0]
    ops = [op.operation for op in body.operations]
    hoisted: set[int] = set()
    # Input side, in block order so that chains of reshapes go out together.
    for op in ops:
        if op.name in RESHAPE_OPS:
            producer = defining_op(op.operands[0])
            if producer is None or op_key(producer) in hoisted:
                hoisted.add(op_key(op))
    # Output side, from the end for the same reason.
    terminator = ops[-1]
    for op in reversed(ops[:-1]):
        if op.name in RESHAPE_OPS and op_key(op) not in hoisted and not _of_constant(op):
            users = [u.owner for r in op.results for u in r.uses]
            if users and all(
                    u.operation == terminator or op_key(u.operation) in hoisted for u in users):
                hoisted.add(op_key(op))
    return [op for op in ops if op_key(op) in hoisted]


def _attribute_names(op: ir.Operation) -> list[str]:
    return [op.attributes[i].name for i in range(len(op.attributes))]


def _of_constant(reshape: ir.Operation) -> bool:
    """True if `reshape` reshapes a constant (through reshapes): in the host it would be a
    constant buffer, which a CPU plan cannot hold; inside a kernel it is a global."""
    op = producer_through_reshapes(reshape.results[0])
    return op is not None and op.name == "arith.constant"


def hoist_group_reshapes(group: ir.Operation) -> None:
    """Regroup `group` without its boundary reshapes (they stay in the enclosing block)."""
    hoisted = {op_key(op) for op in boundary_reshapes(group)}
    if not hoisted:
        return
    body = group.regions[0].blocks[0]
    kind = ir.StringAttr(group.attributes["kind"]).value
    kept_attributes = {name: group.attributes[name] for name in _attribute_names(group)
                  if name.startswith("fusion.")}
    members = [op.operation for op in list(body.operations)[:-1]
               if op_key(op.operation) not in hoisted]
    inline_group(group)
    compute = [op for op in members if op.name not in FREE_OPS]
    if compute:
        form_group(compute, kind, kept_attributes)
    # form_group cloned what it needed of these into the new group.
    for op in members:
        if op.name in FREE_OPS and not any(True for r in op.results for _ in r.uses):
            op.erase()


@register
@dataclass
class HoistReshapesPass(Pass):
    """Move reshapes at fusion.group boundaries out to the host, where they are views."""

    ARGUMENT = "fusion-hoist-reshapes"

    def run(self, module: ir.Operation) -> None:
        for group in groups_in(module):
            hoist_group_reshapes(group)
