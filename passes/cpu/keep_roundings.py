"""--fusion-cpu-keep-roundings: a 16-bit float value read by an op whose result jumps (an
int cast, a compare, floor / ceil / round / trunc, a remainder) keeps its rounding to 16
bits.

`arith-emulate-unsupported-floats` computes each bf16 / f16 op in f32 between an `extf`
and a `truncf`, both marked `fastmath<contract>`, so that canonicalization may fold
`extf(truncf(x))` to x: a chain of 16-bit ops then computes in f32 and rounds once, where
torch rounds after each op. For continuous ops that is a little more accurate (as Inductor
computes them too); for an op whose result jumps it is a different answer, by a whole unit:
a bf16 model's `(y * 100).to(torch.int64)` differed from torch in 126 of 1024 elements
(y * 100 rounded to bf16 first in torch, not here), and likewise `y * 100 > 250`,
`round(y * 10)`. This pass runs between the emulation and the canonicalization and clears
the `contract` flag of such an `extf` (read by one of those ops, from a `truncf` to 16 bits),
so that the fold keeps the rounding there, and only there.

Before (after arith-emulate-unsupported-floats):
    %r = arith.truncf %p fastmath<contract> : f32 to bf16
    %e = arith.extf %r fastmath<contract> : bf16 to f32
    %i = arith.fptosi %e : f32 to i64
After:
    %e = arith.extf %r : bf16 to f32                 (the fold leaves it: a real rounding)
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.grouping import defining_op, walk_ops
from fusec.passes.registry import Pass, register
from mlir import ir

# Ops whose result is not a continuous function of their float operand.
JUMPS = frozenset({"arith.fptosi", "arith.fptoui", "arith.cmpf", "arith.remf",
                   "math.floor", "math.ceil", "math.round", "math.roundeven", "math.trunc"})
NARROW = ("bf16", "f16")


def _rounds_to_16_bits(op: ir.Operation) -> bool:
    source = defining_op(op.operands[0])
    return source is not None and source.name == "arith.truncf" and \
        str(source.results[0].type) in NARROW


@register
@dataclass
class KeepRoundingsPass(Pass):
    """Clear `contract` on an extf of a 16-bit rounding that an op with jumps reads."""

    ARGUMENT = "fusion-cpu-keep-roundings"

    def run(self, module: ir.Operation) -> None:
        def kept(op: ir.Operation) -> bool:
            return op.name == "arith.extf" and "fastmath" in op.attributes and \
                str(op.operands[0].type) in NARROW and _rounds_to_16_bits(op) and \
                any(use.owner.name in JUMPS for use in op.results[0].uses)

        for op in walk_ops(module, kept):
            del op.attributes["fastmath"]
