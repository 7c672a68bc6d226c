"""--fusion-epilogue: a contraction (matmul, batch_matmul, generic multiply-accumulate) with
the elementwise ops after it (bias, activation, residual add, scaling) as one group.

The planner of `producer_fusion` grows groups from their last op; this pass keeps only the
groups that hold a contraction. Cheap producers of the contraction (its accumulator's fill,
a transpose or reshape of an operand, a cast) come along as a prologue; a row reduction after
the contraction is refused (`reduction-order`), and so is a second contraction. Groups are of
kind `epilogue` when ops follow the contraction.

Before:
    %f = linalg.fill ins(%zero) outs(%e)
    %m = linalg.matmul ins(%a, %w) outs(%f)
    %b = linalg.generic {... arith.addf ...} ins(%m, %bias) outs(%e)
After:
    %b = fusion.group epilogue (%x = %a, %y = %w, %z = %bias) -> tensor<...> {
      %f = linalg.fill ...
      %m = linalg.matmul ins(%x, %y) outs(%f)
      %b = linalg.generic {... arith.addf ...} ins(%m, %z) ...
      fusion.yield %b
    }

Options: device (nvidia-h200 | cpu), max-ops (group size cap).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir

from fusec.passes import cost_model
from fusec.passes.fusion.form_singletons import function_bodies
from fusec.passes.fusion.producer_fusion import Policy, fuse_block
from fusec.passes.registry import Pass, register


@register
@dataclass
class FuseEpiloguePass(Pass):
    """Fuse each contraction with its elementwise epilogue and cheap prologue."""

    ARGUMENT = "fusion-epilogue"
    device: str = "cpu"  # the default target of `fusec` too; nvidia-h200 for the GPU
    max_ops: int = 128

    def run(self, module: ir.Operation) -> None:
        policy = Policy(device=cost_model.device_named(self.device), allow_contraction=True,
                        max_ops=self.max_ops, require_contraction=True)
        for block in function_bodies(module):
            fuse_block(block, policy)
