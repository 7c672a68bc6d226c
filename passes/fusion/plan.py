"""--fusion-plan: the whole graph-level fusion plan, driven by the cost model.

Runs, in order:
0. `--fusion-reduction`: sibling reductions over a shared input become one multi-result
   reduction, so that what follows sees one op reading the input once;
1. one producer-absorption planning over each function (`producer_fusion`) with every kind
   allowed, so that each root takes what pays most for it: a contraction with its epilogue
   and prologue (`epilogue`), elementwise/broadcast chains through row-compatible
   reductions (`vertical`), a reduction with its init (`single`);
2. `--fusion-form-singletons` for what no group took, so that every compute op is in
   exactly one group (one group = one kernel);
3. `--fusion-input`: independent kernels that read one large input share one kernel that
   reads it once (kind `input`); after singletons, so that every kernel is a candidate, and
   before horizontal fusion, which would otherwise take launch-bound readers of a shared
   input without asking whether their iteration spaces agree;
4. `--fusion-horizontal`: independent kernels too small to pay for their own launch share
   one (kind `horizontal`).

Every group records the cost model's numbers and the refused fusions with their reasons;
`fusec --report` is derived from these attributes.

Before (softmax as torch-mlir emits it: 2 fills, max-reduce, reshape, sub, exp, fill,
sum-reduce, div: 9 kernels unfused):
    %4:2 = linalg.generic {... ["parallel", "reduction"]} ins(%x) outs(%ninf, %zero_i64)
    ...
    %11 = linalg.generic {... arith.divf ...} ins(%7, %10) outs(%e)
After (one kernel, tiled along rows only):
    %r = fusion.group vertical (%a = %x : tensor<64x128xf32>) -> tensor<64x128xf32>
        attributes {fusion.bytes_fused = 65536, fusion.bytes_unfused = 265984,
                    fusion.launches_saved = 8, fusion.tile_dims = [0], ...} {
      ... the nine ops ...
      fusion.yield %11 : tensor<64x128xf32>
    }

Options: device (nvidia-h200 | cpu), max-ops (group size cap), input (step 3 on/off),
horizontal (step 4 on/off).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir

from fusec.passes import cost_model
from fusec.passes.fusion.form_singletons import FormSingletonsPass, function_bodies
from fusec.passes.fusion.horizontal import FuseHorizontalPass
from fusec.passes.fusion.input import FuseInputPass
from fusec.passes.fusion.reduction import FuseReductionPass
from fusec.passes.fusion.producer_fusion import Policy, fuse_block
from fusec.passes.registry import Pass, register


@register
@dataclass
class PlanFusionPass(Pass):
    """Plan every fusion kind with the cost model; every compute op ends in a group."""

    ARGUMENT = "fusion-plan"
    device: str = "cpu"  # the default target of `fusec` too; nvidia-h200 for the GPU
    max_ops: int = 128
    input: bool = True
    horizontal: bool = True

    def run(self, module: ir.Operation) -> None:
        policy = Policy(device=cost_model.device_named(self.device), allow_contraction=True,
                        max_ops=self.max_ops)
        FuseReductionPass().run(module)
        for block in function_bodies(module):
            fuse_block(block, policy)
        FormSingletonsPass().run(module)
        if self.input:
            FuseInputPass(device=self.device, max_ops=self.max_ops).run(module)
        if self.horizontal:
            FuseHorizontalPass(device=self.device, max_ops=self.max_ops).run(module)
