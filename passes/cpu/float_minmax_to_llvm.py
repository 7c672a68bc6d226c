"""--fusion-float-minmax-to-llvm: `arith.maximumf/minimumf` straight to LLVM's intrinsics.

`arith-expand` (needed for integer ops such as `floordivsi`) would also expand float
max/min into compares and selects that spell out NaN propagation, and LLVM's loop
vectorizer does not recognize a max reduction in that form: a row max (softmax) stays
scalar. `llvm.intr.maximum`/`minimum` have the same semantics (NaN-propagating, -0 < +0)
and vectorize, so scalar float max/min become them before `arith-expand` runs.

Before:
    %m = arith.maximumf %a, %b : f32
After:
    %m = llvm.intr.maximum(%a, %b) : (f32, f32) -> f32
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from mlir.dialects import llvm

from fusec.passes.grouping import walk_ops
from fusec.passes.registry import Pass, register

INTRINSICS = {"arith.maximumf": llvm.MaximumOp, "arith.minimumf": llvm.MinimumOp}


@register
@dataclass
class FloatMinMaxToLlvmPass(Pass):
    """Replace scalar arith.maximumf/minimumf by llvm.intr.maximum/minimum."""

    ARGUMENT = "fusion-float-minmax-to-llvm"

    def run(self, module: ir.Operation) -> None:
        def is_float_minmax(op: ir.Operation) -> bool:
            return op.name in INTRINSICS and isinstance(op.results[0].type, ir.FloatType)

        for op in walk_ops(module, is_float_minmax):
            with ir.InsertionPoint(op), op.location:
                new = INTRINSICS[op.name](op.operands[0], op.operands[1])
            op.results[0].replace_all_uses_with(new.result)
            op.erase()
