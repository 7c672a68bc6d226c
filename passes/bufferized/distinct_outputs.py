"""--fusion-distinct-outputs: every model output is its own buffer.

A model may return one value at several positions (`return y, y`; torch-mlir's zero-size
outputs often become one shared `tensor.empty`). The caller passes one buffer per output, but
after bufferization both positions would return the same allocation, which
`buffer-results-to-out-params` cannot turn into two out parameters (MLIR 22 crashes on it).
This pass, first in the `bufferized` stage, gives every repeated position a copy: a
`bufferization.alloc_tensor` with `copy`, which bufferizes to an allocation and a
`memref.copy` that the CPU plan turns into a copy of the first output (`Buffer.copy_of`).

Before:
    return %0, %0 : tensor<4xf32>, tensor<4xf32>
After:
    %1 = bufferization.alloc_tensor() copy(%0) : tensor<4xf32>
    return %0, %1 : tensor<4xf32>, tensor<4xf32>

Must not: touch a value returned once, or anything but the public function's return.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from mlir.dialects import bufferization

from fusec.passes.fusion.form_singletons import function_bodies
from fusec.passes.registry import Pass, register


@register
@dataclass
class DistinctOutputsPass(Pass):
    """Copy a value returned at several positions, so that each output has its own buffer."""

    ARGUMENT = "fusion-distinct-outputs"

    def run(self, module: ir.Operation) -> None:
        for block in function_bodies(module):
            terminator = list(block.operations)[-1].operation
            if terminator.name != "func.return":
                continue
            seen: list[ir.Value] = []
            for index, value in enumerate(list(terminator.operands)):
                if not isinstance(value.type, ir.RankedTensorType):
                    continue
                if not any(value == earlier for earlier in seen):
                    seen.append(value)
                    continue
                with ir.InsertionPoint(terminator), terminator.location:
                    copy = bufferization.AllocTensorOp(value.type, [], copy=value)
                terminator.operands[index] = copy.result
