"""--fusion-cpu-hyperbolic: f32 tanh, sinh, cosh, asinh, acosh, atanh accurate over their range.

Upstream's `math-expand-ops` writes them from exp and log the textbook way, which loses the
small arguments to cancellation and overflows early (measured against torch, run 173):
tanh(1e-8) gave 0 (it is (1 - e^-2x) / (1 + e^-2x)), sinh(-3e-7) was 9% off, asinh(-1e4)
was -inf (log(x + sqrt(x^2 + 1)) of a negative x), sinh(88.8) +inf (torch: 1.84e38),
asinh(-1e20) +inf. This pass writes each f32 op before that expansion, in ops the CPU
lowers well (exp by `--fusion-fast-exp`, log1p by `--fusion-cpu-log1p-expm1`, which run
after it):

    tanh(x)  = x + x^3 P(x^2)                      |x| < 1/4 (Taylor to x^11, 2e-10)
             = sign(x) (1 - e) / (1 + e), e = exp(-2|x|)   elsewhere (at most ~3 ulp)
    sinh(x)  = x + x^3 Q(x^2)                      |x| < 1/4 (Taylor to x^9)
             = sign(x) (h - 1/(4h)),  h = exp(|x|) / 2     elsewhere
    cosh(x)  = h + 1/(4h)
    asinh(x) = sign(x) log1p(a + a^2 / (1 + sqrt(1 + a^2)))  a = |x| <= 2^12
             = sign(x) (log(a) + ln 2)                      beyond (a^2 would overflow)
    acosh(x) = log1p(t + sqrt(t (t + 2))), t = x - 1         1 <= x <= 2^12; NaN below 1
             = log(x) + ln 2                                 beyond
    atanh(x) = sign(x) log1p(2a / (1 - a)) / 2               (a = 1: inf; a > 1: NaN)

h = exp(|x|) / 2 is taken as exp(|x| - 88) times e^88 / 2 above 88 (the subtraction exact),
so sinh and cosh reach FLT_MAX where torch does (89.4), not exp's 88.72. The sign is taken
by a select on x < 0 and an odd function's zero is x itself, so -0.0 keeps its sign; NaN
stays NaN.

f64 ops become calls to the C library's functions of the same name (`tanh`, `sinh`, ...:
within an ulp, as torch's float64 kernels): upstream's expansion lost them near 0 in f64 too
(tanh(1e-17) and asinh(1e-300) gave 0, tanh(1e-8) was 1.6e-9 off, measured against torch).
"""

from __future__ import annotations

import math as pymath
from dataclasses import dataclass

from fusec.passes.grouping import declare_function, walk_ops
from fusec.passes.registry import Pass, register
from mlir import ir
from mlir.dialects import arith, func, math

# tanh's odd Taylor terms after x: x^3 .. x^11.
TANH_TERMS = (-1.0 / 3, 2.0 / 15, -17.0 / 315, 62.0 / 2835, -1382.0 / 155925)
# sinh's: x^3 .. x^9.
SINH_TERMS = (1.0 / 6, 1.0 / 120, 1.0 / 5040, 1.0 / 362880)
SMALL = 0.25
# exp(88) / 2 is a float; exp(|x| - 88) of |x| in (88, 89.4] is exact in its argument.
SHIFT = 88.0
LARGE = 4096.0  # 2^12: beyond, asinh and acosh are log(2 |x|) to the float's precision


def _c(value: float) -> ir.Value:
    return arith.ConstantOp(ir.F32Type.get(), value).result


def _lt(a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.CmpFOp(arith.CmpFPredicate.OLT, a, b).result


def _gt(a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.CmpFOp(arith.CmpFPredicate.OGT, a, b).result


def _signed(x: ir.Value, magnitude: ir.Value) -> ir.Value:
    """magnitude with x's sign (a select: NaN in magnitude stays NaN)."""
    return arith.SelectOp(_lt(x, _c(0.0)), arith.NegFOp(magnitude).result, magnitude).result


def _odd(x: ir.Value, value: ir.Value) -> ir.Value:
    """An odd function's value, x itself at a zero (f(-0.0) is -0.0)."""
    zero = arith.CmpFOp(arith.CmpFPredicate.OEQ, x, _c(0.0)).result
    return arith.SelectOp(zero, x, value).result


def _odd_series(x: ir.Value, terms: tuple[float, ...]) -> ir.Value:
    """x + x^3 (t0 + x^2 (t1 + ...)), Horner in x^2."""
    x2 = arith.MulFOp(x, x).result
    acc = _c(terms[-1])
    for term in reversed(terms[:-1]):
        acc = arith.AddFOp(arith.MulFOp(acc, x2).result, _c(term)).result
    x3 = arith.MulFOp(x2, x).result
    return arith.AddFOp(x, arith.MulFOp(x3, acc).result).result


def _half_exp(a: ir.Value) -> ir.Value:
    """exp(a) / 2 for a >= 0, finite up to a = 89.4 (where exp(a) alone overflows at 88.72)."""
    high = _gt(a, _c(SHIFT))
    shifted = arith.SelectOp(high, arith.SubFOp(a, _c(SHIFT)).result, a).result
    scale = arith.SelectOp(high, _c(pymath.exp(SHIFT) / 2), _c(0.5)).result
    return arith.MulFOp(math.ExpOp(shifted).result, scale).result


def _tanh(x: ir.Value) -> ir.Value:
    a = math.AbsFOp(x).result
    e = math.ExpOp(arith.MulFOp(a, _c(-2.0)).result).result
    big = arith.DivFOp(arith.SubFOp(_c(1.0), e).result, arith.AddFOp(_c(1.0), e).result).result
    return _odd(x, arith.SelectOp(_lt(a, _c(SMALL)), _odd_series(x, TANH_TERMS),
                                  _signed(x, big)).result)


def _sinh_cosh(x: ir.Value, cosh: bool) -> ir.Value:
    a = math.AbsFOp(x).result
    h = _half_exp(a)
    quarter = arith.DivFOp(_c(0.25), h).result
    if cosh:
        return arith.AddFOp(h, quarter).result
    big = arith.SubFOp(h, quarter).result
    return _odd(x, arith.SelectOp(_lt(a, _c(SMALL)), _odd_series(x, SINH_TERMS),
                                  _signed(x, big)).result)


def _log_of_twice(a: ir.Value) -> ir.Value:
    """log(2 a) = log(a) + ln 2 (no overflow of 2 a)."""
    return arith.AddFOp(math.LogOp(a).result, _c(pymath.log(2.0))).result


def _asinh(x: ir.Value) -> ir.Value:
    a = math.AbsFOp(x).result
    a2 = arith.MulFOp(a, a).result
    root = math.SqrtOp(arith.AddFOp(a2, _c(1.0)).result).result
    near = math.Log1pOp(arith.AddFOp(a, arith.DivFOp(
        a2, arith.AddFOp(root, _c(1.0)).result).result).result).result
    magnitude = arith.SelectOp(_gt(a, _c(LARGE)), _log_of_twice(a), near).result
    return _odd(x, _signed(x, magnitude))


def _acosh(x: ir.Value) -> ir.Value:
    t = arith.SubFOp(x, _c(1.0)).result
    root = math.SqrtOp(arith.MulFOp(t, arith.AddFOp(t, _c(2.0)).result).result).result
    near = math.Log1pOp(arith.AddFOp(t, root).result).result
    value = arith.SelectOp(_gt(x, _c(LARGE)), _log_of_twice(x), near).result
    return arith.SelectOp(_lt(x, _c(1.0)), _c(float("nan")), value).result


def _atanh(x: ir.Value) -> ir.Value:
    a = math.AbsFOp(x).result
    ratio = arith.DivFOp(arith.MulFOp(a, _c(2.0)).result, arith.SubFOp(_c(1.0), a).result)
    half = arith.MulFOp(math.Log1pOp(ratio.result).result, _c(0.5)).result
    return _odd(x, _signed(x, half))


EXPANSIONS = {
    "math.tanh": _tanh,
    "math.sinh": lambda x: _sinh_cosh(x, cosh=False),
    "math.cosh": lambda x: _sinh_cosh(x, cosh=True),
    "math.asinh": _asinh,
    "math.acosh": _acosh,
    "math.atanh": _atanh,
}


@register
@dataclass
class HyperbolicPass(Pass):
    """Scalar f32 hyperbolic functions and their inverses, accurate near 0 and at the ends
    of the range; f64 ones as the C library's."""

    ARGUMENT = "fusion-cpu-hyperbolic"

    def run(self, module: ir.Operation) -> None:
        declared: set[str] = set()
        for op in walk_ops(module, lambda op: op.name in EXPANSIONS
                           and str(op.results[0].type) in ("f32", "f64")):
            with ir.InsertionPoint(op), op.location:
                if str(op.results[0].type) == "f32":
                    value = EXPANSIONS[op.name](op.operands[0])
                else:
                    name = op.name.removeprefix("math.")
                    if name not in declared:
                        f64 = ir.F64Type.get()
                        declare_function(module, name, ir.FunctionType.get([f64], [f64]))
                        declared.add(name)
                    value = func.CallOp([op.results[0].type], name,
                                        [op.operands[0]]).results[0]
            op.results[0].replace_all_uses_with(value)
            op.erase()

