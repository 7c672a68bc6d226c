"""--fusion-drop-asserts: remove the run-time checks torch-mlir emits as `cf.assert`.

torch-mlir guards index arithmetic (embedding lookups, gathers) with `cf.assert` inside
linalg bodies. A kernel has no way to report a failed check, so fusec drops them in the
`linalg` stage, as Inductor drops its device-side asserts by default: an out-of-range index
is then undefined behaviour, exactly as in a CUDA kernel. The number removed is recorded on
the module (`fusion.asserts_dropped`) so the decision stays visible.

Before:
    %ok = arith.cmpi slt, %i, %c50 : i64
    cf.assert %ok, "index must be smaller than dim size"
After:
    %ok = arith.cmpi slt, %i, %c50 : i64        // dead; canonicalize removes it
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from fusec.passes import attributes
from fusec.passes.grouping import walk_ops
from fusec.passes.registry import Pass, register


@register
@dataclass
class DropAssertsPass(Pass):
    """Erase cf.assert run-time checks (kernels cannot report them)."""

    ARGUMENT = "fusion-drop-asserts"

    def run(self, module: ir.Operation) -> None:
        asserts = walk_ops(module, lambda op: op.name == "cf.assert")
        for op in asserts:
            op.erase()
        if asserts:
            module.attributes[attributes.ASSERTS_DROPPED] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), len(asserts))
