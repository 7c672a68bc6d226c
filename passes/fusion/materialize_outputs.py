"""--fusion-materialize-outputs: every model output is written by a kernel.

A model output that is a constant (`torch.zeros(3, 4)` folds to `arith.constant dense<0.0>`)
is computed by no op, so no kernel writes the caller's output buffer: on the CPU the plan
would hold a `memref.get_global` it cannot place. This pass, first in the `fusion` stage,
gives each such output a `linalg.fill` (a splat: zeros, ones, full) or a `linalg.copy` from
the constant, which the planner then puts in a kernel like any other op (a constant is never
a group input: it is cloned into the group).

Before:
    %cst = arith.constant dense<0.0> : tensor<3x4xf32>
    return %cst, %1 : tensor<3x4xf32>, tensor<2x2xf32>
After:
    %e = tensor.empty() : tensor<3x4xf32>
    %z = arith.constant 0.0 : f32
    %0 = linalg.fill ins(%z : f32) outs(%e : tensor<3x4xf32>) -> tensor<3x4xf32>
    return %0, %1 : tensor<3x4xf32>, tensor<2x2xf32>

Outputs that are function arguments (or views of them) need nothing here: the artifact
copies their bytes (`Buffer.copy_of`).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from mlir.dialects import arith, linalg, tensor

from fusec.passes.fusion.form_singletons import function_bodies
from fusec.passes.grouping import defining_op
from fusec.passes.registry import Pass, register


@register
@dataclass
class MaterializeOutputsPass(Pass):
    """Copy constant model outputs into a kernel, so that every output has a writer."""

    ARGUMENT = "fusion-materialize-outputs"

    def run(self, module: ir.Operation) -> None:
        for block in function_bodies(module):
            terminator = list(block.operations)[-1].operation
            if terminator.name != "func.return":
                continue
            for index, value in enumerate(list(terminator.operands)):
                producer = defining_op(value)
                if producer is None or producer.name != "arith.constant":
                    continue
                if not isinstance(value.type, ir.RankedTensorType):
                    continue
                attr = producer.attributes["value"]
                with ir.InsertionPoint(terminator), terminator.location:
                    empty = tensor.EmptyOp(list(value.type.shape), value.type.element_type)
                    if 0 in value.type.shape:
                        # No element to write: no kernel (one could not take the buffer).
                        written = empty.result
                    elif isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
                        # zeros/ones/full: a fill reads nothing (and, unlike a 0-d copy, does
                        # not trip linalg-fuse-elementwise-ops in MLIR 22).
                        scalar = arith.ConstantOp(value.type.element_type,
                                                  attr.get_splat_value()).result
                        written = linalg.fill(scalar, outs=[empty.result])
                    else:
                        written = linalg.copy(value, outs=[empty.result])
                terminator.operands[index] = written
