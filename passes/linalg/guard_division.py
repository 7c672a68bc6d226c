"""--fusion-guard-division: an integer division by a value that may be zero reports it.

torch raises an error for an integer division or remainder by zero (`//`, `%`, `fmod`,
`div(rounding_mode=...)`: "ZeroDivisionError"). A kernel that divides unchecked kills the
calling process on x86 (SIGFPE) or returns garbage. This pass guards each integer
`arith.divsi`, `divui`, `remsi`, `remui`, `floordivsi` and `ceildivsi` whose divisor is not
a non-zero constant: the divisor is replaced by 1 where it is 0 (the kernel never traps),
and the failure is reported as `--fusion-guard-indices` reports an index out of range, with
a check of its own in `fusion.index_checks` (its message says "integer division by 0";
the runtime raises ZeroDivisionError for it). With `defer=true` the report goes in after tiling
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

from fusec.passes.grouping import walk_ops
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


def _nonzero_constant(value: ir.Value) -> bool:
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "arith.constant":
        return False
    attr = owner.operation.attributes["value"]
    return isinstance(attr, ir.IntegerAttr) and ir.IntegerAttr(attr).value != 0


@register
@dataclass
class GuardDivisionPass(Pass):
    """Integer divisions by a value that may be zero: divide by 1 instead, and report."""

    ARGUMENT = "fusion-guard-division"
    report: bool = True
    defer: bool = False

    def run(self, module: ir.Operation) -> None:
        divisions = walk_ops(module, lambda op: op.name in DIVISIONS and
                             GUARDED_ATTR not in op.attributes and
                             not _nonzero_constant(op.operands[1]))
        if not divisions:
            return
        checks = module_checks(module)
        for op in divisions:
            divisor = op.operands[1]
            with ir.InsertionPoint(op), op.location:
                zero = arith.ConstantOp(divisor.type, 0).result
                one = arith.ConstantOp(divisor.type, 1).result
                nonzero = arith.CmpIOp(arith.CmpIPredicate.ne, divisor, zero).result
                check = add_check(checks, MESSAGE.format(op=op.name), op) if self.report else -1
                if self.report and not self.defer:
                    _report_unless(nonzero, check, divisor)
                op.operands[1] = arith.SelectOp(nonzero, divisor, one).result
            if self.report and self.defer:
                _tag_check(op, 1, check)
            op.attributes[GUARDED_ATTR] = ir.UnitAttr.get()
        if self.report:
            store_checks(module, checks)
