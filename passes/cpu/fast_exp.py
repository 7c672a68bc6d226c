"""--fusion-fast-exp: f32 `math.exp` as a short polynomial that LLVM can vectorize.

`math.exp` lowers to a call of libm's `expf` per element, which the loop vectorizer cannot
widen; softmax, GELU (tanh) and attention then run at the speed of scalar calls. This pass
replaces each f32 `math.exp` by the classic Cephes scheme, all in `arith`/`math.floor`:
n = floor(x log2 e + 1/2), r = x - n ln 2 (in two parts, for accuracy), exp(r) by a
degree-6 polynomial (Estrin's scheme), times 2^n built in the exponent bits. The products
and sums that pair up are marked `contract`, so that LLVM makes them FMAs where the target
has them. Accuracy about 1 ulp over the normal range; inputs above 88.72 give +inf, NaN
stays NaN. 2^n is a float for n in [-126, 127] only: outside it the result is y 2^(n - m)
2^m with m clamped there (n - m in [-24, 1], a normal float, so y 2^(n - m) is exact and
the one rounding is the last product's), which gives +inf's neighbour near the top and
torch's denormals between -103.97 and -87.34 (they were flushed to 0). Below -103.97 the
result is 0, as y times a second factor of 0 (2^-127's bits): a product whose result is a
denormal or underflows costs a microcode assist on x86 cores, and a softmax's masked
(-inf) scores would pay it in every lane. f64 exps are left to libm.

Measured on one Zen 1 core: Horner's chain of separate multiplies and adds made each
vector's exp a chain of about 25 dependent ops, which the core could not overlap enough
across iterations; FMAs and Estrin cut torch.exp of 256K floats from about 2.3 to 1.9 ns
per element and causal attention at S2048 (bench/cpu_attention.py) by about 4%
(alternating runs on a shared machine).

Before:
    %y = math.exp %x : f32
After:
    %c = arith.maximumf %x, %lo : f32 ... (about 20 arith ops) ...
    %y = arith.select %overflow, %inf, %scaled : f32
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.grouping import walk_ops
from fusec.passes.registry import Pass, register
from mlir import ir
from mlir.dialects import arith, math

LOG2E = 1.44269504088896341
LN2_HI = 0.693359375
LN2_LO = -2.12194440e-4
# Cephes expf: exp(r) ~ 1 + r + r^2 * P(r) on |r| <= ln(2)/2.
POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
              1.6666665459e-1, 5.0000001201e-1)
OVERFLOW = 88.72283905206835  # ln(FLT_MAX)
UNDERFLOW = -103.97207708399179  # ln(2^-150): below it exp rounds to 0 in f32


def _f32(value: float) -> ir.Value:
    return arith.ConstantOp(ir.F32Type.get(), value).result


def _contract() -> ir.Attribute:
    return ir.Attribute.parse("#arith.fastmath<contract>")


def fma_contract(a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    """a b + c, which LLVM may fuse into one FMA (`contract`: one rounding, not two) where
    the target has it; a multiply and an add where it has not (no `fmaf` call)."""
    product = arith.MulFOp(a, b, fastmath=_contract()).result
    return arith.AddFOp(product, c, fastmath=_contract()).result


def _polynomial(r: ir.Value) -> ir.Value:
    """1 + r + r^2 P(r) with P in Estrin's form: the three pairs (c0 r + c1, ...) are
    independent, then combined by r^2 and r^4, so that the longest chain is four FMAs, not
    Horner's six (one vector's exp is a chain of dependent ops: latency, not throughput,
    bounds the loop)."""
    c = [_f32(x) for x in POLYNOMIAL]
    r2 = arith.MulFOp(r, r).result
    r4 = arith.MulFOp(r2, r2).result
    high, middle, low = (fma_contract(c[i], r, c[i + 1]) for i in (0, 2, 4))
    poly = fma_contract(high, r4, fma_contract(middle, r2, low))
    return arith.AddFOp(fma_contract(poly, r2, r), _f32(1.0)).result


def _i32(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IntegerType.get_signless(32), value).result


def _power_of_two(n: ir.Value) -> ir.Value:
    """2^n for an i32 `n` in [-126, 127] (and 0 for -127, +inf for 128), built in the
    exponent bits."""
    bits = arith.ShLIOp(arith.AddIOp(n, _i32(127)).result, _i32(23)).result
    return arith.BitcastOp(ir.F32Type.get(), bits).result


# 2^r = e^(r ln 2) on |r| <= 1/2: Taylor's terms (ln 2)^k / k!, k = 0..6 (the first left
# out is 1.2e-7 of the value at |r| = 1/2).
EXP2_TERMS = (1.0, 0.6931471805599453, 0.2402265069591007, 0.05550410866482158,
              0.009618129107628477, 0.0013333558146428443, 0.00015403530393381608)


def approx_exp2(t: ir.Value) -> ir.Value:
    """2^t for an f32 `t`, built at the insertion point, for what needs no denormal: about
    2e-7 relative; t clamped to [-127, 128], so below -126.5 the result is 0 (2^-127's bits
    are zero) and near 128 +inf; NaN stays NaN. About 17 vector ops where `expand_exp`
    takes 28: no two-part ln 2 reduction (the caller folds log2 e into its argument, often
    into a product it makes anyway), no overflow select, no second factor. The attention
    kernel's probabilities exp(s - max) are its use: their denormals are below any sum's
    rounding."""
    t = arith.MinimumFOp(arith.MaximumFOp(t, _f32(-127.0)).result, _f32(128.0)).result
    n = math.FloorOp(arith.AddFOp(t, _f32(0.5)).result).result
    r = arith.SubFOp(t, n).result  # exact: |r| <= 1/2
    c = [_f32(x) for x in EXP2_TERMS]
    r2 = arith.MulFOp(r, r).result
    r4 = arith.MulFOp(r2, r2).result
    low, middle, high = (fma_contract(c[i + 1], r, c[i]) for i in (0, 2, 4))
    poly = fma_contract(fma_contract(c[6], r2, high), r4, fma_contract(middle, r2, low))
    whole = arith.FPToSIOp(ir.IntegerType.get_signless(32), n).result
    return arith.MulFOp(poly, _power_of_two(whole)).result


def expand_exp(op: ir.Operation) -> None:
    """Replace one f32 `math.exp` by the polynomial scheme, at its place."""
    x = op.operands[0]
    with ir.InsertionPoint(op), op.location:
        underflow = arith.CmpFOp(arith.CmpFPredicate.OLT, x, _f32(UNDERFLOW)).result
        clamped = arith.MinimumFOp(arith.MaximumFOp(x, _f32(UNDERFLOW)).result,
                                   _f32(OVERFLOW)).result
        n = math.FloorOp(fma_contract(clamped, _f32(LOG2E), _f32(0.5))).result
        r = fma_contract(n, _f32(-LN2_HI), clamped)
        r = fma_contract(n, _f32(-LN2_LO), r)
        y = _polynomial(r)
        # 2^n in two factors, each a float: 2^(n - m) with m = n clamped to [-126, 127]
        # (in integers: one conversion, integer min and max).
        i32 = ir.IntegerType.get_signless(32)
        whole = arith.FPToSIOp(i32, n).result
        clamped_n = arith.MaxSIOp(arith.MinSIOp(whole, _i32(127)).result, _i32(-126)).result
        y = arith.MulFOp(y, _power_of_two(arith.SubIOp(whole, clamped_n).result)).result
        # Below ln(2^-150) the second factor is 0 (2^-127's bits): an exact product, where
        # y 2^-150 would underflow in the multiply.
        clamped_n = arith.SelectOp(underflow, _i32(-127), clamped_n).result
        scaled = arith.MulFOp(y, _power_of_two(clamped_n)).result
        overflow = arith.CmpFOp(arith.CmpFPredicate.OGT, x, _f32(OVERFLOW)).result
        result = arith.SelectOp(overflow, _f32(float("inf")), scaled).result
    op.results[0].replace_all_uses_with(result)
    op.erase()


@register
@dataclass
class FastExpPass(Pass):
    """Expand every scalar f32 math.exp into a vectorizable polynomial."""

    ARGUMENT = "fusion-fast-exp"

    def run(self, module: ir.Operation) -> None:
        for op in walk_ops(module, lambda op: op.name == "math.exp"
                           and str(op.results[0].type) == "f32"):
            expand_exp(op)
