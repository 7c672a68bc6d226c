"""--fusion-vertical: producer-consumer fusion of elementwise, broadcast and reduction chains.

Each op, last to first, becomes the root of a group that absorbs its producers (elementwise
ops, broadcasts, transposes, reshapes, fills of reduction inits, and reductions whose row is
compatible with the root) while the cost model agrees; see `producer_fusion` for the rules.
Softmax, LayerNorm (with torch-mlir's f64 variance), RMSNorm and GELU chains each become one
group. Contractions are left alone (`--fusion-epilogue` fuses them). Each group records the
cost model's numbers (`fusion.bytes_unfused`, `fusion.bytes_fused`, `fusion.launches_saved`,
`fusion.tile_dims`, ...) and every refused producer with its reason (`fusion.refused`); a
root that absorbed nothing carries its refusals itself.

Before:
    %1 = linalg.generic {... math.exp ...} ins(%x) outs(%e)
    %2 = linalg.generic {... arith.mulf ...} ins(%1, %y) outs(%e)
After:
    %2 = fusion.group vertical (%a = %x, %b = %y) -> tensor<...> attributes {...} {
      %1 = linalg.generic {... math.exp ...} ins(%a) ...
      %2 = linalg.generic {... arith.mulf ...} ins(%1, %b) ...
      fusion.yield %2
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
class FuseVerticalPass(Pass):
    """Fuse elementwise and broadcast producers into consumers, through reductions."""

    ARGUMENT = "fusion-vertical"
    device: str = "cpu"  # the default target of `fusec` too; nvidia-h200 for the GPU
    max_ops: int = 128

    def run(self, module: ir.Operation) -> None:
        policy = Policy(device=cost_model.device_named(self.device), allow_contraction=False,
                        max_ops=self.max_ops)
        for block in function_bodies(module):
            fuse_block(block, policy)
