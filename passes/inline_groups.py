"""--fusion-inline-groups: dissolve every `fusion.group`, the inverse of grouping.

The ops of each group's body move to where the group was, block arguments are replaced
by the group's operands and the group's results by the yielded values. Cloned constants
and `tensor.empty` ops stay duplicated (`--canonicalize`/`--cse` merge them). With
`--fusion-form-singletons` this gives a round trip that lit tests check.

Before:
    %0 = fusion.group single (%arg1 = %a : tensor<8xf32>) -> tensor<8xf32> {
      ...
      fusion.yield %1 : tensor<8xf32>
    }
After:
    ... (the body, reading %a directly)
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir

from fusec.passes.registry import Pass, register


def groups_in(module: ir.Operation) -> list[ir.Operation]:
    """Every `fusion.group` in the module, outermost first."""
    found = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "fusion.group":
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def inline_group(group: ir.Operation) -> None:
    """Replace `group` by its body."""
    body = group.regions[0].blocks[0]
    for arg, operand in zip(body.arguments, group.operands):
        arg.replace_all_uses_with(operand)
    terminator = list(body.operations)[-1]
    for result, value in zip(group.results, terminator.operands):
        result.replace_all_uses_with(value)
    for op in list(body.operations)[:-1]:
        op.operation.move_before(group)
    group.erase()


@register
@dataclass
class InlineGroupsPass(Pass):
    """Dissolve every fusion.group into the enclosing block."""

    ARGUMENT = "fusion-inline-groups"

    def run(self, module: ir.Operation) -> None:
        for group in reversed(groups_in(module)):
            inline_group(group)
