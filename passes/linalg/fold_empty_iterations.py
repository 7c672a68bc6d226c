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

The same holds for the tensor ops around them: a slice with no elements (`x[:, 1:]` of a
one-token sequence, as MobileBERT's trigram embedding takes) is a `tensor.empty`, whose
bufferization needs no view (a view at offset 1 of a size-1 dim does not verify); an
`insert_slice` of nothing is its destination; a pad of nothing is a fill of the pad value.

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
from mlir.dialects import linalg, tensor

from fusec.passes.grouping import op_key, walk_ops
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
        for op in walk_ops(module, lambda op: op.name in EMPTY_TENSOR_OPS):
            _fold_empty_tensor_op(op)


EMPTY_TENSOR_OPS = ("tensor.extract_slice", "tensor.insert_slice", "tensor.pad")


def _empty(value: ir.Value) -> bool:
    return isinstance(value.type, ir.RankedTensorType) and \
        value.type.has_static_shape and 0 in value.type.shape


def _fold_empty_tensor_op(op: ir.Operation) -> None:
    """A slice with no elements -> tensor.empty; an insert of nothing -> its destination; a
    pad of nothing -> a fill of the padded shape with the pad value (when that value is
    defined outside the pad's body)."""
    result = op.results[0]
    if op.name == "tensor.extract_slice" and _empty(result):
        with ir.InsertionPoint(op), op.location:
            replacement = tensor.EmptyOp(list(result.type.shape), result.type.element_type)
        result.replace_all_uses_with(replacement.result)
        op.erase()
    elif op.name == "tensor.insert_slice" and _empty(op.operands[0]):
        result.replace_all_uses_with(op.operands[1])
        op.erase()
    elif op.name == "tensor.pad" and _empty(op.operands[0]) and \
            isinstance(result.type, ir.RankedTensorType) and result.type.has_static_shape:
        body = op.regions[0].blocks[0]
        value = list(body.operations)[-1].operands[0]
        owner = value.owner
        if isinstance(owner, ir.Block) or owner.parent is None or \
                op_key(owner.parent) == op_key(op):
            return  # the pad value is computed in the body (per index): left as it is
        with ir.InsertionPoint(op), op.location:
            empty = tensor.EmptyOp(list(result.type.shape), result.type.element_type)
            filled = linalg.fill(value, outs=[empty.result])
        result.replace_all_uses_with(filled)
        op.erase()
