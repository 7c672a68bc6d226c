"""--fusion-reassociate-reductions: let LLVM vectorize float sums (fastmath `reassoc`).

A linalg reduction's payload adds each element into the accumulator in loop order; LLVM
must keep that order for floats unless the add may be reassociated, so a row sum runs one
scalar add at a time. Marking the accumulating `arith.addf`/`arith.mulf` of reduction ops
`reassoc` lets the loop vectorizer keep several partial sums (one per vector lane), which
is faster and, like PyTorch's own CPU kernels, usually more accurate than one running sum.
Only the combine with the accumulator (the payload's output block argument) is marked; the
rest of the payload keeps strict semantics.

Before:
    ^bb0(%in: f32, %acc: f32):
      %s = arith.addf %in, %acc : f32
After:
    ^bb0(%in: f32, %acc: f32):
      %s = arith.addf %in, %acc fastmath<reassoc> : f32
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir

from fusec.passes.registry import Pass, register

COMBINERS = frozenset({"arith.addf", "arith.mulf"})


def mark_reduction(op: ir.Operation) -> None:
    """Mark `op`'s accumulator updates reassociable."""
    payload = op.regions[0].blocks[0]
    n_results = len(op.results)
    accumulators = list(payload.arguments)[len(payload.arguments) - n_results:]
    for inner in payload.operations:
        inner = inner.operation
        if inner.name in COMBINERS and any(
                any(operand == acc for acc in accumulators) for operand in inner.operands):
            inner.attributes["fastmath"] = ir.Attribute.parse("#arith.fastmath<reassoc>")


@register
@dataclass
class ReassociateReductionsPass(Pass):
    """Mark the accumulating float adds/muls of linalg reductions `reassoc`."""

    ARGUMENT = "fusion-reassociate-reductions"

    def run(self, module: ir.Operation) -> None:
        found: list[ir.Operation] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name == "linalg.generic" and any(
                    "reduction" in str(a) for a in op.attributes["iterator_types"]):
                found.append(op.operation)
            return ir.WalkResult.ADVANCE

        module.walk(visit)
        for op in found:
            mark_reduction(op)
