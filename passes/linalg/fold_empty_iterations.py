"""--fusion-fold-empty-iterations: a linalg op that iterates over nothing returns its init.

A contraction over a zero-size dimension (`torch.mm` of 5x0 by 0x10) runs no iteration: its
result is its `outs` operand (the zero fill torch-mlir puts there), yet a kernel for it would
take zero-size buffers that the CPU lowering cannot pass (the kernel function is not
converted to LLVM and the artifact has no kernel to call). When an input of a linalg op with
projected-permutation indexing maps (a named contraction, or a generic without constant or
compound indices) has a zero-size dimension, a loop of the op has no iterations, so the
whole iteration space is empty: the op's results are replaced by its inits and it goes. So
does any linalg op whose results have no elements (`torch.triu_indices(0, 0)`): there is
nothing to write.

Before:
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<5x10xf32>) -> tensor<5x10xf32>
    %m = linalg.matmul ins(%a, %b : tensor<5x0xf32>, tensor<0x10xf32>)
                       outs(%f : tensor<5x10xf32>) -> tensor<5x10xf32>
    return %m
After:
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<5x10xf32>) -> tensor<5x10xf32>
    return %f
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir

from fusec.passes.grouping import walk_ops
from fusec.passes.registry import Pass, register

# Named ops whose every operand dimension is one loop dimension.
CONTRACTIONS = frozenset({
    "linalg.matmul", "linalg.batch_matmul", "linalg.matvec", "linalg.vecmat", "linalg.dot",
    "linalg.batch_matvec", "linalg.batch_vecmat", "linalg.batch_reduce_matmul",
    "linalg.matmul_transpose_a", "linalg.matmul_transpose_b",
    "linalg.batch_matmul_transpose_a", "linalg.batch_matmul_transpose_b",
})


def _maps_are_permutations(op: ir.Operation) -> bool:
    if op.name in CONTRACTIONS:
        return "indexing_maps" not in op.attributes or all(
            ir.AffineMapAttr(m).value.is_projected_permutation
            for m in ir.ArrayAttr(op.attributes["indexing_maps"]))
    if op.name != "linalg.generic":
        return False
    return all(ir.AffineMapAttr(m).value.is_projected_permutation
               for m in ir.ArrayAttr(op.attributes["indexing_maps"]))


def _writes_nothing(op: ir.Operation) -> bool:
    """Every result of the (destination-style) linalg op has zero elements."""
    return all(isinstance(r.type, ir.RankedTensorType) and 0 in r.type.shape
               for r in op.results)


def _has_empty_input(op: ir.Operation) -> bool:
    view = op.opview
    for value in view.inputs:
        if isinstance(value.type, ir.RankedTensorType) and 0 in value.type.shape:
            return True
    return False


@register
@dataclass
class FoldEmptyIterationsPass(Pass):
    """Replace linalg ops whose iteration space is empty by their init operands."""

    ARGUMENT = "fusion-fold-empty-iterations"

    def run(self, module: ir.Operation) -> None:
        ops = walk_ops(module, lambda op: op.name.startswith("linalg.") and len(op.results)
                       and "operandSegmentSizes" in op.attributes)
        for op in ops:
            empty_loops = _maps_are_permutations(op) and _has_empty_input(op)
            if not (empty_loops or _writes_nothing(op)):
                continue
            for result, init in zip(op.results, op.opview.outputs):
                result.replace_all_uses_with(init)
            op.erase()
