"""--fusion-form-loop-kernels: a loop in the model function becomes a serial kernel.

torch-mlir writes some ops as loops on tensors in the model function itself (multinomial
sampling: an `scf.for` over the samples with an `scf.while` binary search inside, reading
and writing tensors with `tensor.extract`/`tensor.insert`). The host has no place to run
them, and nothing in them can be tiled, so each such top-level `scf.for`, `scf.while` or
`scf.if` whose results are all tensors is wrapped in a `fusion.group single` marked
`fusion.serial`: one kernel, run by one thread, that the planner does not fuse into. The
group's inputs are the tensors it reads; host scalars it used are 0-d tensors already
(--fusion-scalars-to-tensors).

Before:
    %r = scf.for %i = %c0 to %c8 step %c1 iter_args(%t = %init) -> (tensor<8xi64>) {...}
After:
    %r = fusion.group single (%a = %init : tensor<8xi64>) -> tensor<8xi64>
        attributes {fusion.serial, fusion.reason = "..."} {
      %0 = scf.for %i = %c0 to %c8 step %c1 iter_args(%t = %a) -> (tensor<8xi64>) {...}
      fusion.yield %0 : tensor<8xi64>
    }
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from fusec.passes import attributes
from fusec.passes.fusion.form_singletons import function_bodies
from fusec.passes.grouping import form_group
from fusec.passes.registry import Pass, register

LOOP_OPS = ("scf.for", "scf.while", "scf.if")
SERIAL_ATTR = attributes.SERIAL


@register
@dataclass
class FormLoopKernelsPass(Pass):
    """Wrap each top-level loop on tensors in a serial single-op group (one kernel)."""

    ARGUMENT = "fusion-form-loop-kernels"

    def run(self, module: ir.Operation) -> None:
        for block in function_bodies(module):
            for op in [o.operation for o in block.operations]:
                if op.name not in LOOP_OPS or not len(op.results):
                    continue
                if not all(isinstance(r.type, ir.RankedTensorType) for r in op.results):
                    continue
                group = form_group([op], "single")
                group.attributes[SERIAL_ATTR] = ir.UnitAttr.get()
                group.attributes[attributes.REASON] = ir.StringAttr.get(
                    f"{op.name} of the model function as a serial kernel (never tiled or "
                    "merged)")
