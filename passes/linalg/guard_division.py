"""--fusion-guard-division: an integer division by a value that may be zero reports it.

torch raises an error for an integer division or remainder by zero (`//`, `%`, `fmod`,
`div(rounding_mode=...)`: "ZeroDivisionError"). A kernel that divides unchecked kills the
calling process on x86 (SIGFPE) or returns garbage. This pass guards each integer
`arith.divsi`, `divui`, `remsi`, `remui`, `floordivsi` and `ceildivsi` whose divisor is not
a non-zero constant: the divisor is replaced by 1 where it is 0 (the kernel never traps),
and the failure is reported as `--fusion-guard-indices` reports an index out of range, with
a check of its own in `fusion.index_checks` (its message says "integer division by 0";
the runtime raises ZeroDivisionError for it). A signed division by -1 (which traps for
INT_MIN: the quotient overflows) divides by 1 and negates instead, wrapping as torch does
(INT_MIN // -1 is INT_MIN, INT_MIN % -1 is 0). With `defer=true` the report goes in after tiling
(`--fusion-report-indices`), for the same reason as the index checks'.

Before:
    %q = arith.divsi %a, %b : i64
After:
    %nz = arith.cmpi ne, %b, %c0 : i64
    %safe = arith.select %nz, %b, %c1 : i64
    scf.if !%nz { func.call @fusec_index_error(%check, %b) }   (deferred: a tag on the op)
    %q = arith.divsi %a, %safe {fusion.guarded} : i64
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.grouping import splat_value, walk_ops
from fusec.passes.linalg.guard_indices import GUARDED_ATTR, _report_unless, _tag_check, \
    add_check, module_checks, store_checks
from fusec.passes.registry import Pass, register
from fusec.runtime.specs import ZERO_DIVISION_MESSAGE
from mlir import ir
from mlir.dialects import arith

DIVISIONS = frozenset({"arith.divsi", "arith.divui", "arith.remsi", "arith.remui",
                       "arith.floordivsi", "arith.ceildivsi"})
# The runtime puts the divisor (0) in place of {index} and raises ZeroDivisionError for it.
MESSAGE = ZERO_DIVISION_MESSAGE.replace("{index}", "{{index}}") + \
    "{op}: torch raises ZeroDivisionError)"


# Signed divisions, which also trap for INT_MIN / -1 (the quotient overflows; torch's CPU
# kernels give INT_MIN, and 0 for the remainder).
SIGNED = frozenset({"arith.divsi", "arith.remsi", "arith.floordivsi", "arith.ceildivsi"})


def _constant(value: ir.Value) -> int | None:
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "arith.constant":
        return None
    attr = owner.operation.attributes["value"]
    return ir.IntegerAttr(attr).value if isinstance(attr, ir.IntegerAttr) else None


def _always_zero(op: ir.Operation) -> bool:
    """Whether the divisor is the constant 0, or a linalg body's argument read from a
    constant tensor of zeros (a Python int 0 as torch-mlir imports it)."""
    divisor = op.operands[1]
    if _constant(divisor) == 0:
        return True
    block = divisor.owner
    if not isinstance(block, ir.Block) or block.owner.operation.name != "linalg.generic":
        return False
    generic = block.owner.operation
    position = ir.BlockArgument(divisor).arg_number
    splat = splat_value(generic.operands[position]) if position < len(generic.operands) \
        else None
    return isinstance(splat, ir.IntegerAttr) and ir.IntegerAttr(splat).value == 0


def _needs_guard(op: ir.Operation) -> bool:
    """Whether the divisor may be 0 (or -1, for a signed division)."""
    value = _constant(op.operands[1])
    return value is None or value == 0 or (value == -1 and op.name in SIGNED)


def _guard_minus_one(op: ir.Operation) -> None:
    """A signed division by -1 as a negation (wrapping: INT_MIN stays INT_MIN), a remainder
    by -1 as 0; the division itself divides by 1 there and never traps."""
    a, divisor = op.operands[0], op.operands[1]
    with ir.InsertionPoint(op), op.location:
        minus_one = arith.ConstantOp(divisor.type, -1).result
        one = arith.ConstantOp(divisor.type, 1).result
        zero = arith.ConstantOp(divisor.type, 0).result
        is_minus_one = arith.CmpIOp(arith.CmpIPredicate.eq, divisor, minus_one).result
        op.operands[1] = arith.SelectOp(is_minus_one, one, divisor).result
    with ir.InsertionPoint.after(op), op.location:
        exact = zero if op.name == "arith.remsi" else arith.SubIOp(zero, a).result
        result = arith.SelectOp(is_minus_one, exact, op.results[0])
    op.results[0].replace_all_uses_except(result.result, result.operation)


@register
@dataclass
class GuardDivisionPass(Pass):
    """Integer divisions by a value that may be zero: divide by 1 instead, and report."""

    ARGUMENT = "fusion-guard-division"
    report: bool = True
    defer: bool = False

    def run(self, module: ir.Operation) -> None:
        divisions = walk_ops(module, lambda op: op.name in DIVISIONS and
                             GUARDED_ATTR not in op.attributes and _needs_guard(op))
        zero_guarded = []
        for op in divisions:
            always = _always_zero(op)  # before the -1 guard replaces the divisor
            constant = _constant(op.operands[1])
            if op.name in SIGNED and constant != 0:
                _guard_minus_one(op)
            if constant not in (None, 0):
                op.attributes[GUARDED_ATTR] = ir.UnitAttr.get()  # the constant -1: never 0
            else:
                zero_guarded.append((op, always))
        if not zero_guarded:
            return
        checks = module_checks(module)
        for op, always in zero_guarded:
            divisor = op.operands[1]
            with ir.InsertionPoint(op), op.location:
                zero = arith.ConstantOp(divisor.type, 0).result
                one = arith.ConstantOp(divisor.type, 1).result
                nonzero = arith.CmpIOp(arith.CmpIPredicate.ne, divisor, zero).result
                check = add_check(checks, MESSAGE.format(op=op.name), op) if self.report else -1
                # A divisor that is always 0 reports here even when deferred: folding
                # makes x // select(0 != 0, 0, 1) plain x, and the deferred tag went with the
                # division (x // 0 returned x with no error).
                now = self.report and (not self.defer or always)
                if now:
                    _report_unless(nonzero, check, divisor)
                op.operands[1] = arith.SelectOp(nonzero, divisor, one).result
            if self.report and not now:
                _tag_check(op, 1, check)
            op.attributes[GUARDED_ATTR] = ir.UnitAttr.get()
        if self.report:
            store_checks(module, checks)
