"""--fusion-fence-broadcast-consumers: keep `linalg-fuse-elementwise-ops` from recomputing.

Upstream elementwise fusion merges a producer `linalg.generic` into its consumer even when
the consumer reads the producer's result through a broadcast (a map that is not a
permutation of the consumer's loops, e.g. a matmul's A operand, or a row statistic used
by a whole row): the merged op then recomputes the producer in every iteration of the
loops the producer does not have (a GELU-tanh before a matmul, evaluated N times over).
This pass wraps each such consumer in a nested `fusion.group` marked `fusion.fence`, which
the fusion cannot cross (groups are isolated from above); `--fusion-unfence` removes the
fences afterwards. Consumers reading producers through permutations are left open.

Before:
    %g = linalg.generic {... ["parallel", "parallel", "parallel"]} ... (gelu, b x t x k)
    %m = linalg.generic {indexing_maps = [(b, t, k, n) -> (b, t, k), ...]} ins(%g, %w ...)
After:
    %g = linalg.generic ...
    %m = fusion.group single (%arg = %g ...) attributes {fusion.fence} {
      %0 = linalg.generic {...} ins(%arg, ...)
      fusion.yield %0
    }
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from fusec.passes import attributes
from fusec.passes.grouping import defining_op, form_group
from fusec.passes.inline_groups import groups_in
from fusec.passes.registry import Pass, register

FENCE = attributes.FENCE


RESHAPES = frozenset({"tensor.expand_shape", "tensor.collapse_shape"})
# Named linalg ops that read some input through a broadcast (each element many times).
BROADCAST_READERS = ("matmul", "matvec", "vecmat", "dot", "conv", "pooling", "contract",
                     "broadcast", "reduce")


def _generic_producer(value: ir.Value) -> bool:
    """True if `value` is a linalg.generic's result, possibly reshaped (elementwise fusion
    propagates reshapes, so a reshape does not stop it)."""
    op = defining_op(value)
    while op is not None and op.name in RESHAPES:
        op = defining_op(op.operands[0])
    return op is not None and op.name == "linalg.generic"


def reads_generic_through_broadcast(op: ir.Operation) -> bool:
    """True for a linalg op that reads a linalg.generic's result by a non-permutation map."""
    name = op.name
    if not name.startswith("linalg."):
        return False
    if name != "linalg.generic":
        if not any(kind in name for kind in BROADCAST_READERS):
            return False
        n_results = len(op.results)
        inputs = list(op.operands)[:len(op.operands) - n_results]
        return any(_generic_producer(v) for v in inputs)
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    n_inputs = len(maps) - len(op.results)
    return any(_generic_producer(operand) and not amap.is_permutation
               for operand, amap in zip(list(op.operands)[:n_inputs], maps[:n_inputs]))


@register
@dataclass
class FenceBroadcastConsumersPass(Pass):
    """Wrap generics that read a generic's result through a broadcast in fence groups."""

    ARGUMENT = "fusion-fence-broadcast-consumers"

    def run(self, module: ir.Operation) -> None:
        for group in groups_in(module):
            if FENCE in group.attributes:
                continue
            body = group.regions[0].blocks[0]
            for op in [o.operation for o in body.operations]:
                if reads_generic_through_broadcast(op):
                    form_group([op], "single", {FENCE: ir.UnitAttr.get()})
