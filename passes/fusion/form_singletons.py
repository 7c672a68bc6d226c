"""--fusion-form-singletons: one kernel per compute op, the unfused baseline.

Wraps every compute op of every function (linalg ops and the tensor ops that compute,
see `grouping.is_compute`) in its own `fusion.group` of kind `single`. Ops already inside a
group are left alone, so the pass can finish a partial plan: whatever no fusion pass
claimed becomes a kernel of its own.

Before:
    %e = tensor.empty() : tensor<8xf32>
    %0 = linalg.exp ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
After:
    %0 = fusion.group single (%arg1 = %a : tensor<8xf32>) -> tensor<8xf32> {
      %e = tensor.empty() : tensor<8xf32>
      %1 = linalg.exp ins(%arg1 : tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
      fusion.yield %1 : tensor<8xf32>
    }
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir

from fusec.passes.grouping import form_group, is_compute
from fusec.passes.registry import Pass, register


def function_bodies(module: ir.Operation) -> list[ir.Block]:
    """The entry blocks of the module's `func.func`s that have bodies."""
    blocks = []
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and len(op.operation.regions[0].blocks):
            blocks.append(op.operation.regions[0].blocks[0])
    return blocks


def ungrouped_compute_ops(block: ir.Block) -> list[ir.Operation]:
    """Compute ops directly in `block` (so not yet in any group), in block order."""
    return [op.operation for op in block.operations if is_compute(op.operation)]


@register
@dataclass
class FormSingletonsPass(Pass):
    """Wrap every compute op that is not in a group yet in its own `single` group."""

    ARGUMENT = "fusion-form-singletons"

    def run(self, module: ir.Operation) -> None:
        for block in function_bodies(module):
            for op in ungrouped_compute_ops(block):
                if any(True for r in op.results for _ in r.uses):
                    form_group([op], "single")
