"""--fusion-cpu-log1p-expm1: `math.log1p` and `math.expm1` accurate near 0.

MLIR's math-to-LLVM lowering writes log1p(x) as log(1 + x) and expm1(x) as exp(x) - 1: for
|x| under the float's epsilon, 1 + x is 1 and the result 0 (torch.log1p(1e-10) is 1e-10;
fusec gave 0, and 1.19e-7 for 1e-7). This pass writes them with the classic correction
(Kahan; Higham, "Accuracy and Stability of Numerical Algorithms", 1.14.1), which needs only
the log and exp the target already has (the CPU's vectorized exp, `--fusion-fast-exp`):

    log1p(x) = x                          where u = 1 + x rounds to 1
             = log(u) * (x / (u - 1))     elsewhere (u - 1 is exact; the ratio corrects
                                          log(u) for the rounding of u)
    expm1(x) = x                          where u = exp(x) rounds to 1
             = -1                         where u - 1 is -1
             = (u - 1) * (x / log(u))     elsewhere

with the infinities passed through (inf / inf would be NaN). After
`math-extend-to-supported-types` (16-bit floats are f32 here) and before the expansions
and `--fusion-fast-exp` (which then takes this exp too); f64 takes the same form.

Before:
    %y = math.log1p %x : f32
After:
    %u = arith.addf %one, %x ; %d = arith.subf %u, %one ; %l = math.log %u
    %y = arith.select (%d == 0), %x, (%l * (%x / %d))  (and x = +inf -> +inf)
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.grouping import walk_ops
from fusec.passes.registry import Pass, register
from mlir import ir
from mlir.dialects import arith, math


def _float_constant(value: float, t: ir.Type) -> ir.Value:
    if isinstance(t, ir.VectorType):
        element = ir.VectorType(t).element_type
        return arith.ConstantOp(t, ir.DenseElementsAttr.get_splat(
            t, ir.FloatAttr.get(element, value))).result
    return arith.ConstantOp(t, ir.FloatAttr.get(t, value)).result


def _cmp(predicate: arith.CmpFPredicate, a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.CmpFOp(predicate, a, b).result


def _log1p(x: ir.Value) -> ir.Value:
    t = x.type
    one, zero = _float_constant(1.0, t), _float_constant(0.0, t)
    inf = _float_constant(float("inf"), t)
    u = arith.AddFOp(one, x).result
    d = arith.SubFOp(u, one).result
    corrected = arith.MulFOp(math.LogOp(u).result, arith.DivFOp(x, d).result).result
    tiny = _cmp(arith.CmpFPredicate.OEQ, d, zero)
    result = arith.SelectOp(tiny, x, corrected).result
    return arith.SelectOp(_cmp(arith.CmpFPredicate.OEQ, x, inf), x, result).result


def _expm1(x: ir.Value) -> ir.Value:
    t = x.type
    one, minus_one = _float_constant(1.0, t), _float_constant(-1.0, t)
    inf = _float_constant(float("inf"), t)
    u = math.ExpOp(x).result
    d = arith.SubFOp(u, one).result
    corrected = arith.MulFOp(d, arith.DivFOp(x, math.LogOp(u).result).result).result
    result = arith.SelectOp(_cmp(arith.CmpFPredicate.OEQ, d, minus_one), minus_one,
                            corrected).result
    result = arith.SelectOp(_cmp(arith.CmpFPredicate.OEQ, u, one), x, result).result
    return arith.SelectOp(_cmp(arith.CmpFPredicate.OEQ, u, inf), u, result).result


@register
@dataclass
class Log1pExpm1Pass(Pass):
    """log1p and expm1 written so that they keep their accuracy near 0."""

    ARGUMENT = "fusion-cpu-log1p-expm1"

    def run(self, module: ir.Operation) -> None:
        for op in walk_ops(module, lambda op: op.name in ("math.log1p", "math.expm1")):
            with ir.InsertionPoint(op), op.location:
                x = op.operands[0]
                value = _log1p(x) if op.name == "math.log1p" else _expm1(x)
            op.results[0].replace_all_uses_with(value)
            op.erase()
