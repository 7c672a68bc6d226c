"""--fusion-unshare-empties: one `tensor.empty` per use in every tiled group, so that work
computed beside a tile loop never shares a buffer with the loop's output.

CSE, after tiling, makes the `tensor.empty`s of one type one op: the init of a prologue
computed whole before the tile loop (a BatchNorm and ReLU feeding the next convolution's
padding) and the tile loop's shared output become the same value, and one-shot
bufferization then writes the prologue into the kernel's output buffer, an argument of the
kernel. Work on a kernel argument outside the tile loop cannot be split across threads
(`--fusion-cpu-tile-loops` would race): such a kernel ran as one tile, on one core (every
convolution with a prologue in ResNet-18 at batch 1). With an empty of its own, the
prologue gets a buffer of its own, which each call computes for itself.

Before (after CSE):
    %e = tensor.empty() : tensor<1x64x28x28xf32>
    %bn = linalg.generic ... outs(%e : ...)
    %padded = tensor.pad %bn ...
    %r = scf.forall (%i) in (2) shared_outs(%o = %e) -> (tensor<1x64x28x28xf32>) { ... }
After:
    %e = tensor.empty() : tensor<1x64x28x28xf32>
    %bn = linalg.generic ... outs(%e : ...)
    %padded = tensor.pad %bn ...
    %e_0 = tensor.empty() : tensor<1x64x28x28xf32>
    %r = scf.forall (%i) in (2) shared_outs(%o = %e_0) -> (tensor<1x64x28x28xf32>) { ... }
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir

from fusec.passes.inline_groups import groups_in
from fusec.passes.registry import Pass, register
from fusec.passes.tiling.tile import unshare_empties


@register
@dataclass
class UnshareEmptiesPass(Pass):
    """One `tensor.empty` per use in each group that has a tile loop."""

    ARGUMENT = "fusion-unshare-empties"

    def run(self, module: ir.Operation) -> None:
        for group in groups_in(module):
            body = group.regions[0].blocks[0]
            if any(op.operation.name == "scf.forall" for op in body.operations):
                unshare_empties(group)
