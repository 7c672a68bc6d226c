"""--fusion-copies-to-linalg: rewrite `memref.copy` as `linalg.copy`, which lowers to loops.

The LLVM lowering of a `memref.copy` between non-contiguous views is a call to the MLIR
runtime's `memrefCopy`, which a self-contained `model.so` does not have. As a `linalg.copy`
it becomes plain loops with `convert-linalg-to-loops`.

Before:
    memref.copy %a, %b : memref<1x9xf32> to memref<1x9xf32, strided<[18, 1], offset: ?>>
After:
    linalg.copy ins(%a : memref<1x9xf32>) outs(%b : memref<1x9xf32, strided<[18, 1], ...>>)
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.grouping import walk_ops
from fusec.passes.registry import Pass, register
from mlir import ir
from mlir.dialects import linalg


@register
@dataclass
class CopiesToLinalgPass(Pass):
    """Replace every memref.copy by an equivalent linalg.copy."""

    ARGUMENT = "fusion-copies-to-linalg"

    def run(self, module: ir.Operation) -> None:
        for copy in walk_ops(module, lambda op: op.name == "memref.copy"):
            with ir.InsertionPoint(copy), copy.location:
                linalg.copy(copy.operands[0], outs=[copy.operands[1]])
            copy.erase()
