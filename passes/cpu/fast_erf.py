"""--fusion-fast-erf: f32 `math.erf` as a rational polynomial that LLVM can vectorize.

Like `math.exp` (see --fusion-fast-exp), `math.erf` otherwise lowers to one libm `erff` call
per element, which the loop vectorizer cannot widen: GELU then runs 20-40x slower than
PyTorch on the CPU (bench/RESULTS.md, CPU section). This pass replaces each f32 `math.erf` by
the standard single-precision rational approximation on the clamped input x in [-4, 4]
(beyond it erf is +-1 in f32):

    erf(x) ~ x * P(x^2) / Q(x^2),  P of degree 6, Q of degree 4 in x^2,

all in `arith`. Accuracy: a few ulp over the whole line (checked against float64 erf in
test/python/test_codegen_cpu.py); NaN stays NaN. f64 erfs are left to libm.

Before:
    %y = math.erf %x : f32
After:
    %c = arith.minimumf (arith.maximumf %x, -4), 4 ... (about 25 arith ops) ...
    %y = arith.divf %p, %q : f32
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.grouping import walk_ops
from fusec.passes.registry import Pass, register
from mlir import ir
from mlir.dialects import arith

CLAMP = 4.0
# Numerator, odd powers x^13 ... x^1 (evaluated in x^2 by Horner, then times x).
NUMERATOR = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
             -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
             -1.60960333262415e-02)
# Denominator, even powers x^8 ... x^0.
DENOMINATOR = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
               -7.37332916720468e-03, -1.42647390514189e-02)


def _f32(value: float) -> ir.Value:
    return arith.ConstantOp(ir.F32Type.get(), value).result


def _horner(coefficients: tuple[float, ...], x2: ir.Value) -> ir.Value:
    value = _f32(coefficients[0])
    for coefficient in coefficients[1:]:
        value = arith.AddFOp(arith.MulFOp(value, x2).result, _f32(coefficient)).result
    return value


def expand_erf(op: ir.Operation) -> None:
    """Replace one f32 `math.erf` by the rational approximation, at its place."""
    x = op.operands[0]
    with ir.InsertionPoint(op), op.location:
        # maximumf/minimumf propagate NaN, so erf(NaN) stays NaN.
        clamped = arith.MinimumFOp(arith.MaximumFOp(x, _f32(-CLAMP)).result,
                                   _f32(CLAMP)).result
        x2 = arith.MulFOp(clamped, clamped).result
        p = arith.MulFOp(clamped, _horner(NUMERATOR, x2)).result
        q = _horner(DENOMINATOR, x2)
        result = arith.DivFOp(p, q).result
    op.results[0].replace_all_uses_with(result)
    op.erase()


@register
@dataclass
class FastErfPass(Pass):
    """Expand every scalar f32 math.erf into a vectorizable rational polynomial."""

    ARGUMENT = "fusion-fast-erf"

    def run(self, module: ir.Operation) -> None:
        for op in walk_ops(module, lambda op: op.name == "math.erf"
                           and str(op.results[0].type) == "f32"):
            expand_erf(op)
