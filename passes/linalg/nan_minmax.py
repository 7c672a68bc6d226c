"""--fusion-nan-minmax: torch's float min/max ops as MLIR's NaN-propagating min/max.

torch's `maximum`, `minimum` and clamps (`clamp`, `clamp_min/max`, `hardtanh`, ReLU6,
hardsigmoid) give NaN for a NaN input. torch-mlir lowers each to a compare and a select in
one payload, which gives the other operand (or the bound) instead: `maximum(nan, 0.5)` was
0.5, `clamp(nan, 0, 6)` was 0. This pass, first in the `linalg` stage (before anything
merges payloads), rewrites exactly those four shapes, within one payload:

    select(cmpf ogt(a, b), a, b)    maximum(a, b)    -> arith.maximumf a, b
    select(cmpf olt(a, b), a, b)    minimum(a, b)    -> arith.minimumf a, b
    select(cmpf ult(x, lo), lo, x)  clamp below lo   -> arith.maximumf x, lo
    select(cmpf ugt(x, hi), hi, x)  clamp above hi   -> arith.minimumf x, hi

(`arith.maximumf` / `minimumf`: NaN if either operand is NaN, as torch). A user's
`torch.where(a > b, a, b)` keeps its meaning (a NaN `a` gives `b`): torch-mlir lowers the
compare and the select to two payloads, which this pass never sees as one. ReLU
(`select(ugt(x, 0), x, 0)`) already passes NaN and is left alone. One difference remains,
of zeros' signs only: `maximumf(-0.0, +0.0)` is +0.0 where torch's clamp keeps -0.0.

Before:
    %c = arith.cmpf ogt, %a, %b : f32
    %m = arith.select %c, %a, %b : f32
After:
    %m = arith.maximumf %a, %b : f32

torch's `argmax` / `argmin` (and `max(dim)` / `min(dim)`'s indices) give the first NaN's
index in a row with a NaN. torch-mlir's reduction payload keeps the running value with
`maximumf` (NaN-propagating) but moves the index by `cmpf ogt(x, acc)`, false for a NaN `x`:
the index stayed the largest number's before it ([1, nan, 3] gave 2). In a reduction payload
that yields `maximumf(x, acc)` (`minimumf`) as one result and `select(cmpf ogt(x, acc),
index, acc_index)` (`olt`) as another, the compare becomes "x is larger or NaN, and the
running value is not NaN yet":

    %c = arith.cmpf ogt, %x, %acc     ->  %u = arith.cmpf ugt, %x, %acc
                                          %o = arith.cmpf ord, %acc, %acc
                                          %c = arith.andi %u, %o

Ties keep the first index (the compare is strict), as torch.

Max pooling's indices (`max_pool*d(return_indices=True)`, `adaptive_max_pool*d`): torch-mlir
computes them after the pooled values, in a reduction over the window that keeps the first
element equal to the window's max (its accumulator starts at -1):
`select(cmpi eq(acc, -1), select(cmpf oeq(x, max), i, acc), acc)`. A window with a NaN has
a NaN max, which no element equals: the index stayed -1 (and max_unpool wrote the value at
the end). torch takes the window's last NaN there; so does the payload now:

    %y = select(%first, ...)      ->  %n = arith.cmpf uno, %x, %x
                                      %y2 = arith.select %n, %i, %y
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.grouping import defining_op, iterator_kinds, walk_ops
from fusec.passes.payload import cmpf_predicate
from fusec.passes.registry import Pass, register
from mlir import ir
from mlir.dialects import arith

# predicate -> (the select's true value is the compare's operand ..., the op it becomes):
# (0: a select(c, a, b) of the compare's own operands; 1: select(c, b, a), a clamp's bound first)
PATTERNS = {"ogt": (0, arith.MaximumFOp), "olt": (0, arith.MinimumFOp),
            "ult": (1, arith.MaximumFOp), "ugt": (1, arith.MinimumFOp)}


@register
@dataclass
class NanMinMaxPass(Pass):
    """torch-mlir's compare-and-select min/max/clamp as NaN-propagating maximumf/minimumf."""

    ARGUMENT = "fusion-nan-minmax"

    def run(self, module: ir.Operation) -> None:
        for select in walk_ops(module, lambda op: op.name == "arith.select"):
            cond = select.operands[0].owner
            if isinstance(cond, ir.Block) or cond.operation.name != "arith.cmpf" or \
                    cond.operation.parent != select.parent:
                continue
            cmp = cond.operation
            pattern = PATTERNS.get(cmpf_predicate(cmp))
            if pattern is None or not isinstance(select.results[0].type, ir.FloatType):
                continue
            a, b = cmp.operands[0], cmp.operands[1]
            on_true, on_false = select.operands[1], select.operands[2]
            order, new_op = pattern
            expected = (a, b) if order == 0 else (b, a)
            if not (on_true == expected[0] and on_false == expected[1]):
                continue
            with ir.InsertionPoint(select), select.location:
                result = new_op(a, b).result
            select.results[0].replace_all_uses_with(result)
            select.erase()
            if not list(cmp.results[0].uses):
                cmp.erase()
        for generic in walk_ops(module, lambda op: op.name == "linalg.generic"):
            for select, cmp in _arg_selects(generic):
                _nan_first(select, cmp)
            for select, x, index in _pool_index_selects(generic):
                _nan_last(select, x, index)


# The running value's combiner -> the compare that moves an argmax / argmin's index.
ARG_COMPARES = {"arith.maximumf": "ogt", "arith.minimumf": "olt"}


def _keeping_selects(generic: ir.Operation) -> tuple[list, list, list]:
    """A reduction payload's yielded values, its accumulators, and each yielded
    `select(c, v, acc_j)` that keeps its own accumulator otherwise, as (j, select)."""
    if "reduction" not in iterator_kinds(generic):
        return [], [], []
    block = generic.regions[0].blocks[0]
    n_out = len(generic.results)
    accs = list(block.arguments)[len(block.arguments) - n_out:]
    yielded = list(block.operations[len(block.operations) - 1].operands)
    kept = []
    for j, value in enumerate(yielded):
        select = defining_op(value)
        if select is not None and select.name == "arith.select" and \
                select.operands[2] == accs[j]:
            kept.append((j, select))
    return yielded, accs, kept


def _arg_selects(generic: ir.Operation) -> list[tuple[ir.Operation, ir.Operation]]:
    """The (select, compare) pairs of a reduction payload's argmax / argmin results: a
    yielded `select(cmpf P(x, acc), i, acc_i)` whose `acc` is the accumulator of another
    result yielded as `C(x, acc)`, with (C, P) in ARG_COMPARES."""
    yielded, accs, kept = _keeping_selects(generic)
    found = []
    for j, select in kept:
        cmp = defining_op(select.operands[0])
        if cmp is None or cmp.name != "arith.cmpf":
            continue
        x, acc = cmp.operands[0], cmp.operands[1]
        for k, other in enumerate(yielded):
            combiner = defining_op(other)
            if k == j or acc != accs[k] or combiner is None or \
                    ARG_COMPARES.get(combiner.name) != cmpf_predicate(cmp):
                continue
            if {combiner.operands[0], combiner.operands[1]} == {x, acc}:
                found.append((select, cmp))
                break
    return found


def nan_first_move(kind: str, x: ir.Value, acc: ir.Value) -> ir.Value:
    """At the insertion point: whether point value `x` moves an argmax's ("max") or
    argmin's ("min") index past running value `acc`: larger (smaller) or NaN, while `acc`
    is a number (torch's first NaN, else its first extreme)."""
    moved = arith.CmpFOp(arith.CmpFPredicate.UGT if kind == "max" else arith.CmpFPredicate.ULT,
                         x, acc).result
    ordered = arith.CmpFOp(arith.CmpFPredicate.ORD, acc, acc).result
    return arith.AndIOp(moved, ordered).result


def _nan_first(select: ir.Operation, cmp: ir.Operation) -> None:
    """`select`'s condition as "x moves the index, or is the first NaN" (see above)."""
    x, acc = cmp.operands[0], cmp.operands[1]
    with ir.InsertionPoint(select), select.location:
        cond = nan_first_move("max" if cmpf_predicate(cmp) == "ogt" else "min", x, acc)
    select.operands[0] = cond
    if not list(cmp.results[0].uses):
        cmp.erase()


def _is_constant(value: ir.Value, number: int) -> bool:
    op = defining_op(value)
    return op is not None and op.name == "arith.constant" and \
        isinstance(op.attributes["value"], ir.IntegerAttr) and \
        ir.IntegerAttr(op.attributes["value"]).value == number


def _pool_index_selects(generic: ir.Operation) -> list[tuple[ir.Operation, ir.Value, ir.Value]]:
    """The yielded `select(cmpi eq(acc, -1), select(cmpf oeq(x, m), i, acc), acc)` of a
    reduction payload (max pooling's index), with its `x` and `i`."""
    _, accs, kept = _keeping_selects(generic)
    found = []
    for j, outer in kept:
        first = defining_op(outer.operands[0])
        inner = defining_op(outer.operands[1])
        if first is None or first.name != "arith.cmpi" or inner is None or \
                inner.name != "arith.select" or inner.operands[2] != accs[j]:
            continue
        if ir.IntegerAttr(first.attributes["predicate"]).value != 0 or \
                first.operands[0] != accs[j] or not _is_constant(first.operands[1], -1):
            continue
        cmp = defining_op(inner.operands[0])
        if cmp is None or cmp.name != "arith.cmpf" or cmpf_predicate(cmp) != "oeq":
            continue
        found.append((outer, cmp.operands[0], inner.operands[1]))
    return found


def _nan_last(select: ir.Operation, x: ir.Value, index: ir.Value) -> None:
    """After `select`: a NaN `x` takes the index whatever came before (torch's last NaN)."""
    with ir.InsertionPoint.after(select), select.location:
        nan = arith.CmpFOp(arith.CmpFPredicate.UNO, x, x).result
        taken = arith.SelectOp(nan, index, select.results[0])
    for use in list(select.results[0].uses):
        owner = use.owner
        if owner != taken.operation and owner != taken:
            owner.operands[use.operand_number] = taken.result
