"""torch's semantics where a probe outside the zoo found fusec's CPU results wrong (2026-12-05):
each case is compared with torch's own result in the same dtype (exactly for integers and
booleans, NaNs in the same places), and each failed before its fix.

- `pow` with a negative base: a constant base's kernel stored nothing (the output was
  whatever the buffer held), an integral exponent gave NaN, 0 ** 0 gave NaN (upstream's
  `math-expand-ops` writes powf as exp(y * log(x)); the CPU now calls libm's pow).
- `isfinite(nan)` was true (torch-mlir's `|x| != inf`).
- INT_MIN // -1, % -1, fmod(INT_MIN, -1) killed the process (SIGFPE).
- uint8 values were read as signed (`x * 0.5`, `x / 255`, `x > 200`, `x.sum()`), and a sort
  of uint8 values ordered them as signed: now read as unsigned, or refused with the line.
- compiling a model in training mode left the user's module in eval mode.
- `log1p` / `expm1` of tiny x were 0 (math-to-LLVM's log(1 + x) and exp(x) - 1).
- `sort` / `topk` with NaNs left the NaNs where they were (torch: NaN is the greatest).
- float `fmod` was a - trunc(a / b) * b: fmod(1e8, 3.7) gave 0 (torch 2.511), fmod(5, inf)
  NaN.
- signed zeros: ceil(-0.4) and trunc(-0.0) gave +0, frac(-0.0) -0 (torch: -0, -0, +0).
- `signbit` / `copysign` were refused with a message naming `constant.int`.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")
F = torch.nn.functional

import fusec  # noqa: E402
from fusec.compiler.frontend import FrontendError  # noqa: E402


class Fn(torch.nn.Module):
    def __init__(self, f) -> None:
        super().__init__()
        self.f = f

    def forward(self, *args):
        return self.f(*args)


def _same(out: np.ndarray, ref: torch.Tensor) -> None:
    ref = ref.numpy()
    assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
    if np.issubdtype(ref.dtype, np.floating):
        np.testing.assert_allclose(out, ref, rtol=2e-6, atol=0, equal_nan=True)
    else:
        np.testing.assert_array_equal(out, ref)


def _check(f, *example, fresh=None):
    compiled = fusec.compile(Fn(f).eval(), *example, cache=False)
    inputs = fresh if fresh is not None else example
    _same(compiled(*[x.numpy() for x in inputs]), f(*inputs))


EXPONENTS = torch.tensor([0.0, 1, 2, 3, -1, 0.5, float("nan"), float("inf"), -float("inf"), -2])
BASES = torch.tensor([-2.0, -1.5, 3, 0, -0.0, 1, float("nan"), -1, 0.5, -3])


@pytest.mark.parametrize("base", [-2.0, -0.5, 0.0])
def test_pow_of_a_constant_base(base):
    g = torch.Generator().manual_seed(1)
    fresh = torch.randint(-4, 5, (10,), generator=g).float()
    _check(lambda e: base ** e, EXPONENTS, fresh=(fresh,))
    _check(lambda e: base ** e, EXPONENTS)


def test_pow_of_negative_bases():
    _check(torch.pow, BASES, EXPONENTS)
    _check(torch.pow, BASES, torch.tensor([2, 3, 2, 0, 1, 5, 0, 3, -2, 3]))
    _check(lambda x: x ** 2.5, BASES)


def test_isfinite_of_nan():
    x = torch.tensor([float("nan"), float("inf"), 1.0, -float("inf"), -0.0])
    _check(torch.isfinite, x)
    _check(lambda x: torch.where(torch.isfinite(x), x, 0.0).sum(), x)
    _check(torch.isfinite, torch.tensor([3, -7]))


@pytest.mark.parametrize("name,f", [
    ("floor_divide", lambda x, y: x // y),
    ("remainder", torch.remainder),
    ("fmod", torch.fmod),
    ("constant divisor", lambda x, y: x // -1 + y),
    ("constant remainder", lambda x, y: x % -1 + y),
])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_division_of_the_minimum_by_minus_one(name, f, dtype):
    low = torch.iinfo(dtype).min
    x = torch.tensor([low, 7, -7, 5, low, 9], dtype=dtype)
    y = torch.tensor([-1, 2, -1, -1, 3, -1], dtype=dtype)
    _check(f, x, y)


def test_truncating_division_of_the_minimum_by_minus_one():
    # torch's own CPU kernel traps on this one; C's wrapping quotient is what fusec gives.
    low = torch.iinfo(torch.int64).min
    x = torch.tensor([low, 7, -7, 5], dtype=torch.int64)
    y = torch.tensor([-1, 2, -1, -1], dtype=torch.int64)
    compiled = fusec.compile(Fn(lambda x, y: torch.div(x, y, rounding_mode="trunc")), x, y,
                             cache=False)
    np.testing.assert_array_equal(compiled(x.numpy(), y.numpy()), [low, 3, 7, -5])


U8 = torch.tensor([[10, 200, 255, 0, 128, 77]], dtype=torch.uint8)


@pytest.mark.parametrize("name,f", [
    ("scale", lambda x: x * 0.5),
    ("normalise", lambda x: x / 255),
    ("compare", lambda x: x > 200),
    ("sum", lambda x: x.sum(1)),
    ("mask", lambda x: torch.where(x > 100, x, 0)),
    ("wrapping add", lambda x: x + 100),
    ("wrapping product", lambda x: x * x),
    ("negate", lambda x: -x),
    ("with int8", lambda x: x + x.to(torch.int8)),
    ("converted", lambda x: x.float() / 255),
])
def test_uint8_is_unsigned(name, f):
    g = torch.Generator().manual_seed(3)
    fresh = torch.randint(0, 256, U8.shape, generator=g, dtype=torch.uint8)
    _check(f, U8, fresh=(fresh,))


def test_ordering_uint8_is_refused_at_its_line():
    with pytest.raises(FrontendError, match=r"test_semantics\.py:\d+: 'sort' of a uint8"):
        fusec.compile(Fn(lambda x: torch.sort(x, dim=1).values), U8, cache=False)


def test_compiling_keeps_the_modules_training_modes():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    model[0].eval()
    fusec.compile(model, torch.randn(2, 4), cache=False)
    assert [model.training, model[0].training, model[1].training] == [True, False, True]


@pytest.mark.parametrize("f", [torch.log1p, torch.expm1], ids=["log1p", "expm1"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_log1p_and_expm1_near_zero(f, dtype):
    x = torch.tensor([1e-10, 1e-7, 1e-5, -1e-6, 0.3, -0.7, 5.0, -1.0, -2.0, float("inf"),
                      -float("inf"), float("nan"), 0.0, 80.0, -100.0], dtype=dtype)
    compiled = fusec.compile(Fn(f), x, cache=False)
    out = torch.from_numpy(compiled(x.numpy())).double()
    ref = f(x.double())
    assert torch.equal(out.isnan(), ref.isnan())
    finite = torch.isfinite(ref)
    assert torch.equal(out[~finite & ~ref.isnan()], ref[~finite & ~ref.isnan()])
    rel = ((out - ref).abs() / ref.abs().clamp_min(1e-300))[finite]
    assert rel.max() < (4e-7 if dtype == torch.float32 else 1e-15), rel


NAN, INF = float("nan"), float("inf")
WITH_NANS = torch.tensor([[3, NAN, -1, INF, 0, -INF, NAN, 2], [1, 1, NAN, 0, 0, 5, -2, 1]])


@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
def test_sort_puts_nan_where_torch_does(descending):
    def f(x):
        return torch.sort(x, dim=1, descending=descending)

    compiled = fusec.compile(Fn(f), WITH_NANS, cache=False)
    values, indices = compiled(WITH_NANS.numpy())
    ref_values, ref_indices = f(WITH_NANS)
    np.testing.assert_array_equal(values, ref_values.numpy())  # NaNs in the same places
    np.testing.assert_array_equal(indices, ref_indices.numpy())


def test_topk_takes_nan_as_the_largest():
    f = lambda x: torch.topk(x, 6, dim=1).values  # noqa: E731 (tie order is torch's own)
    compiled = fusec.compile(Fn(f), WITH_NANS, cache=False)
    np.testing.assert_array_equal(compiled(WITH_NANS.numpy()), f(WITH_NANS).numpy())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_fmod_is_exact(dtype):
    a = torch.tensor([5.0, -5, 1e8, 123456.7, 7.5, -7.5, 1, NAN, INF, -5], dtype=dtype)
    b = torch.tensor([INF, 3, 3.7, 0.1, 2, 2, 0, 1, 1, -INF], dtype=dtype)
    _check(torch.fmod, a, b)
    _check(lambda a: torch.fmod(a, 3.7), a)
    g = torch.Generator().manual_seed(5)
    fresh = (torch.randn(64, generator=g, dtype=dtype) * 1e6,
             torch.randn(64, generator=g, dtype=dtype))
    _check(torch.fmod, a[:1].expand(64).contiguous(), b[:1].expand(64).contiguous(),
           fresh=fresh)


def test_float_fmod_keeps_the_sign_of_zero():
    a = torch.tensor([-0.0, 0.0, -6.0, 6.0, -0.0])
    b = torch.tensor([3.0, -3.0, 3.0, -3.0, -INF])
    compiled = fusec.compile(Fn(torch.fmod), a, b, cache=False)
    out, ref = compiled(a.numpy(), b.numpy()), torch.fmod(a, b).numpy()
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))


@pytest.mark.parametrize("f", [torch.ceil, torch.floor, torch.trunc, torch.frac, torch.round],
                         ids=["ceil", "floor", "trunc", "frac", "round"])
def test_rounding_keeps_the_sign_of_zero(f):
    x = torch.tensor([-0.4, -0.0, 0.0, -2.5, 2.5, -3.5, 1e30, -1e30, NAN, INF, -0.6, 0.6])
    compiled = fusec.compile(Fn(f), x, cache=False)
    out, ref = compiled(x.numpy()), f(x).numpy()
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))


SIGNED = torch.tensor([1.5, -2.0, 0.0, -0.0, 3.0, INF, -INF, 7.0])
SIGNS = torch.tensor([-1.0, 2.0, -0.0, 0.0, -INF, -3.0, 1.0, -0.0])


@pytest.mark.parametrize("name,f,args", [
    ("signbit", torch.signbit, (SIGNS,)),
    ("copysign", torch.copysign, (SIGNED, SIGNS)),
    ("copysign by a number", lambda a: torch.copysign(a, -2.0), (SIGNED,)),
    ("copysign of integers", lambda a, b: torch.copysign(a.long(), b), (SIGNED.clamp(-5, 5), SIGNS)),
])
def test_signbit_and_copysign(name, f, args):
    compiled = fusec.compile(Fn(f), *args, cache=False)
    out, ref = compiled(*[x.numpy() for x in args]), f(*args).numpy()
    assert out.dtype == ref.dtype
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))


BIG = {torch.int32: 2 ** 30, torch.int64: 2 ** 60}


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("f", [
    lambda a: -a,
    lambda a: a // 7,
    lambda a: a // -7,
    lambda a: torch.div(a, 7, rounding_mode="trunc"),
    lambda a: torch.fmod(a, 7),
    lambda a: torch.fmod(a, -7),
    lambda a: a ** 3,
    lambda a: a ** 0,
], ids=["neg", "floordiv", "floordiv_negative", "div_trunc", "fmod", "fmod_negative",
        "pow3", "pow0"])
def test_integer_arithmetic_by_a_python_int_stays_in_integers(f, dtype):
    """torch-mlir negated integers in f32 (-16777217 gave -16777216) and divided them by a
    Python int in f64 (int64 // 7 inexact above 2^53); it refused fmod and ** by one."""
    big = BIG[dtype]
    a = torch.tensor([big + 1, -big - 3, 123456789, -5, 7, 2 ** 24 + 1, 0, -2 ** 24 - 1],
                     dtype=dtype)
    _check(f, a)


@pytest.mark.parametrize("f", [lambda a: a * 3, lambda a: a - 5, lambda a: a % 7,
                               lambda a: a // 7, lambda a: torch.fmod(a, -3)],
                         ids=["mul", "sub", "remainder", "floordiv", "fmod"])
def test_int8_arithmetic_by_a_python_int(f):
    """An int8 tensor times, minus or modulo a Python int crashed torch-mlir's import
    (SIGSEGV: the process survived, the model was refused)."""
    _check(f, torch.tensor([100, -100, 7, -7, 0, 127, -128, 55], dtype=torch.int8))


def test_nan_equals_itself_is_false():
    """torch-mlir folded `x == x` to true: the NaN-scrubbing idiom `where(x == x, x, 0)` kept
    the NaNs; isclose called NaN close to NaN."""
    x = torch.tensor([NAN, 1.0, INF, -2.0, -INF, 0.0])
    _check(lambda x: x == x, x)
    _check(lambda x: torch.where(x == x, x, torch.zeros_like(x)), x)
    y = torch.tensor([NAN, 1.0 + 1e-6, INF, INF, -INF, 1e-9])
    for kwargs in ({}, {"equal_nan": True}, {"rtol": 0.1, "atol": 0.5}):
        _check(lambda a, b: torch.isclose(a, b, **kwargs), x, y)


def test_randint_with_a_negative_low_is_uniform():
    """torch-mlir drew randint(-3, 4) as a float truncated toward zero: -3 never came out and
    0 twice as often. Counts over 70000 draws, each value within 5 sigma of 10000."""
    compiled = fusec.compile(Fn(lambda x: x + torch.randint(-3, 4, (70000,))).eval(),
                             torch.zeros(70000, dtype=torch.int64), cache=False)
    values = compiled(np.zeros(70000, np.int64))
    assert values.min() == -3 and values.max() == 3
    counts = np.bincount(values + 3)
    assert np.all(np.abs(counts - 10000) < 5 * np.sqrt(10000 * 6 / 7)), counts.tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("low", [0, -2])
def test_randint_with_a_float_dtype_draws_integers(dtype, low):
    """randint(high, dtype=float) came out as a uniform float in [low, high) (torch-mlir draws
    one and converts it only for an integer dtype): torch-mlir's e2e RandIntDtypeModule's
    mean of randint(1000) was 500.0 instead of 499.5. Integers in [low, high), each within
    5 sigma of its expected count over 60000 draws."""
    high, n = 4, 60000
    compiled = fusec.compile(
        Fn(lambda x: x + torch.randint(low, high, (n,), dtype=dtype)).eval(),
        torch.zeros(n, dtype=dtype), cache=False)
    out = compiled(torch.zeros(n, dtype=dtype))
    values = (out.float().numpy() if isinstance(out, torch.Tensor) else
              np.asarray(out).astype(np.float64))
    assert np.all(values == np.floor(values)), values[values != np.floor(values)][:5]
    assert values.min() == low and values.max() == high - 1
    k = high - low
    counts = np.bincount((values - low).astype(np.int64), minlength=k)
    assert np.all(np.abs(counts - n / k) < 5 * np.sqrt(n / k * (k - 1) / k)), counts.tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_randint_like_draws_integers_of_the_input_shape(dtype):
    """`torch.randint_like` was refused (torch-mlir cannot lower `aten.randint_like`)."""
    n = 40000
    x = torch.zeros(4, n // 4, dtype=dtype)
    for bounds in ((5,), (-2, 3)):
        compiled = fusec.compile(Fn(lambda x: x + torch.randint_like(x, *bounds)).eval(), x,
                                 cache=False)
        values = np.asarray(compiled(x), dtype=np.float64)
        assert values.shape == (4, n // 4)
        low, high = (0, bounds[0]) if len(bounds) == 1 else bounds
        assert np.all(values == np.floor(values))
        assert values.min() == low and values.max() == high - 1
        counts = np.bincount((values - low).astype(np.int64).ravel(), minlength=high - low)
        k = high - low
        assert np.all(np.abs(counts - n / k) < 5 * np.sqrt(n / k * (k - 1) / k)), counts


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("draw", ["rand", "rand_like", "uniform_"])
def test_rand_in_a_narrow_dtype_stays_below_one(dtype, draw):
    """torch.rand in bf16 returned exactly 1.0 about once in 500 draws (torch-mlir draws in
    f64 and rounds to the dtype: [1 - 2^-9, 1) rounds up), where torch's is in [0, 1) (so
    that `(u * n).long()` is an index and `log(1 - u)` finite). Like torch's, each draw is
    a multiple of 2^-p (p: the dtype's significand bits) below 1, uniform over them."""
    n = 1 << 18
    x = torch.zeros(n, dtype=dtype)
    fns = {"rand": lambda x: x + torch.rand(n, dtype=dtype),
           "rand_like": lambda x: x + torch.rand_like(x),
           "uniform_": lambda x: x + torch.empty_like(x).uniform_()}
    compiled = fusec.compile(Fn(fns[draw]).eval(), x, cache=False)
    out = compiled(x)
    values = (out.double().numpy() if isinstance(out, torch.Tensor) else
              np.asarray(out, dtype=np.float64))
    bits = {torch.bfloat16: 8, torch.float16: 11, torch.float32: 24}[dtype]
    assert values.min() >= 0 and values.max() < 1, values.max()
    steps = values * 2.0 ** bits
    assert np.all(steps == np.floor(steps))
    # Uniform: each of 16 equal bins within 5 sigma of n / 16.
    counts = np.bincount((values * 16).astype(np.int64), minlength=16)
    assert np.all(np.abs(counts - n / 16) < 5 * np.sqrt(n / 16 * 15 / 16)), counts.tolist()


def test_stable_sort_and_argsort():
    """`sort(stable=True)` and `argsort(stable=True)` (MoE token routing's) were refused
    (torch-mlir cannot lower `aten.sort.stable`). Rows of many ties, both directions: the
    indices exactly torch's stable ones."""
    x = torch.randint(0, 4, (3, 301), generator=torch.Generator().manual_seed(5)).float()
    for descending in (False, True):
        _check(lambda x: torch.sort(x, dim=-1, descending=descending, stable=True).indices, x)
        _check(lambda x: torch.sort(x, dim=1, descending=descending, stable=True).values, x)
        _check(lambda x: torch.argsort(x, dim=0, descending=descending, stable=True), x)


def test_hypot_and_median():
    """`torch.hypot` and `torch.median` were refused (torch-mlir cannot lower them).
    hypot: no overflow at 1e30 in f32, inf beside NaN, 0 of zeros, broadcasting; median:
    the lower middle of an even count, NaN where any is NaN."""
    x = torch.tensor([3.0, 1e30, -0.0, INF, NAN, -INF, 5e-39, 2.0])
    y = torch.tensor([4.0, 1e30, 0.0, NAN, 1.0, 2.0, 5e-39, -0.0])
    _check(torch.hypot, x, y)
    _check(lambda x: torch.hypot(x, torch.tensor(2.5)), x)
    g = torch.Generator().manual_seed(2)
    v = torch.randn(6, 7, generator=g)
    _check(torch.median, v)
    _check(torch.median, v[:, :4].contiguous())
    _check(torch.median, torch.tensor([1.0, NAN, -2.0, 0.5]))
    _check(torch.median, torch.tensor([3, -1, 4, 1, -5, 9], dtype=torch.int64))


@pytest.mark.parametrize("dim, keepdim", [(2, False), (1, True), (0, False), (-1, True)])
def test_median_along_a_dim_gives_torchs_values_and_indices(dim, keepdim):
    """`torch.median(x, dim)` was refused (torch-mlir cannot lower `aten.median.dim`). Its
    values and indices equal torch's exactly, on fresh inputs with ties (torch's index among
    equal values is the one a stable sort puts at the middle) and NaN (NaN, and the index of
    the slice's first NaN), in float and in int64."""
    g = torch.Generator().manual_seed(5)

    def draw(dtype):
        x = torch.randint(-3, 4, (5, 6, 8), generator=g).to(dtype)
        if dtype.is_floating_point:
            x[torch.rand(x.shape, generator=g) < 0.15] = NAN
            x = x + 0.5  # no zeros
        return x

    def f(x):
        return torch.median(x, dim, keepdim=keepdim)

    for dtype in (torch.float32, torch.int64):
        compiled = fusec.compile(Fn(f).eval(), draw(dtype), cache=False)
        for _ in range(2):
            x = draw(dtype)
            values, indices = compiled(x.numpy())
            ref = f(x)
            assert values.dtype == ref.values.numpy().dtype and indices.dtype == np.int64
            np.testing.assert_array_equal(values, ref.values.numpy())
            np.testing.assert_array_equal(indices, ref.indices.numpy())
    continuous = fusec.compile(Fn(f).eval(), torch.randn(4, 5, 7, generator=g), cache=False)
    fresh = torch.randn(4, 5, 7, generator=g)
    values, indices = continuous(fresh.numpy())
    np.testing.assert_array_equal(values, f(fresh).values.numpy())
    np.testing.assert_array_equal(indices, f(fresh).indices.numpy())


def test_index_writes_wrap_negative_indices_and_take_boolean_masks():
    """`y[i] = v`, `index_put(accumulate=True)` with i = -1 raised IndexError (fusec's check)
    where torch wraps; `y[mask] = 0.0` was refused (nonzero's data-dependent shape); `x[i]`
    with an int32 index was refused (an i32/i64 compare)."""
    g = torch.Generator().manual_seed(4)
    x, v = torch.randn(7, 3, generator=g), torch.randn(2, 3, generator=g)
    i = torch.tensor([-1, 2])

    def put(x, i, v):
        y = x.clone()
        y[i] = v
        return y

    _check(put, x, i, v)
    _check(lambda x, i, v: x.index_put((i,), v, accumulate=True), x, i, v)
    mask = torch.rand(7, 3, generator=g) > 0.5

    def masked(x, m):
        y = x.clone()
        y[m] = 0.25
        return y

    def masked_rows(x, m):
        return x.index_put((m[:, 0],), torch.tensor(2.0), accumulate=True)

    _check(masked, x, mask)
    _check(masked_rows, x, mask)
    _check(lambda x, i: x[i], x, torch.tensor([6, 0, 3], dtype=torch.int32))
    _check(lambda x: torch.clamp(x, min=0.5, max=3.7), torch.arange(-3, 6))


@pytest.mark.parametrize("exponent", [-1, -2, -3])
def test_negative_integral_powers_of_signed_zeros(exponent):
    """`x ** -1` of +0.0 was -inf (upstream's fpowi expansion); torch gives +inf."""
    x = torch.tensor([0.0, -0.0, 2.0, -3.0, INF, -INF, NAN, 1e-20])
    compiled = fusec.compile(Fn(lambda x: x ** exponent), x, cache=False)
    out, ref = compiled(x.numpy()), (x ** exponent).numpy()
    np.testing.assert_allclose(out, ref, rtol=2e-7, atol=0, equal_nan=True)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))


TINY_AND_HUGE = torch.tensor([1e-8, -3e-7, 1e-5, -1e-3, 0.2, -0.3, 0.7, 3.0, -20.0, 0.0, -0.0,
                              NAN, INF, -INF])


@pytest.mark.parametrize("f", [torch.tanh, torch.sinh, torch.cosh, torch.asinh,
                               lambda x: torch.atanh(x.clamp(-0.9, 0.9)),
                               lambda x: torch.acosh(1 + x.abs()),
                               torch.nn.functional.elu, torch.nn.functional.selu,
                               torch.nn.functional.celu],
                         ids=["tanh", "sinh", "cosh", "asinh", "atanh", "acosh", "elu",
                              "selu", "celu"])
def test_hyperbolic_functions_keep_small_arguments(f):
    """Upstream's expansions cancel near 0: tanh(1e-8) was 0, sinh(-3e-7) 9% off; exp(x) - 1
    in ELU lost -3e-7. Each element within 4 ulp of torch's float32 value, signed zeros
    and specials as torch's."""
    x = TINY_AND_HUGE
    compiled = fusec.compile(Fn(f), x, cache=False)
    out, ref = compiled(x.numpy()), f(x).numpy()
    np.testing.assert_allclose(out, ref, rtol=5e-7, atol=0, equal_nan=True)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))


@pytest.mark.parametrize("f,x", [
    (torch.sinh, [88.8, -89.4, 4.3]), (torch.cosh, [88.8, -89.4, 4.3]),
    (torch.asinh, [1e20, -1e20, 3e38, -INF, 5.0]), (torch.acosh, [1e20, -1e20, 3e38, 0.5, 5.0]),
], ids=["sinh", "cosh", "asinh", "acosh"])
def test_hyperbolic_functions_reach_the_ends_of_the_range(f, x):
    """sinh and cosh overflowed from 88.72 (exp's limit), not 89.4; asinh(-1e20) was +inf
    and asinh / acosh of 1e20 overflowed in x^2."""
    x = torch.tensor(x)
    compiled = fusec.compile(Fn(f), x, cache=False)
    np.testing.assert_allclose(compiled(x.numpy()), f(x).numpy(), rtol=1e-6, atol=0,
                               equal_nan=True)


def test_diagonal_writes_and_block_diag():
    """`y.diagonal().fill_(0)`, `fill_diagonal_`, `diagonal_scatter` were refused naming
    torch-mlir's `vtensor.literal`; `torch.block_diag` naming `constant.int` at no location
    (its [n, 0] padding blocks)."""
    g = torch.Generator().manual_seed(6)
    x, b = torch.randn(4, 4, generator=g), torch.randn(2, 5, 6, generator=g)

    def diagonal_fill(x):
        y = x.clone()
        y.diagonal().fill_(0)
        return y

    def fill_diagonal(x):
        y = x.clone()
        y.fill_diagonal_(-1.0)
        return y

    _check(diagonal_fill, x)
    _check(fill_diagonal, x)
    _check(lambda x: torch.diagonal_scatter(x, torch.arange(3.0), 1), x)
    _check(lambda x: torch.diagonal_scatter(x, torch.arange(3.0) * 2, -1), x)
    _check(lambda b: torch.diagonal_scatter(b, torch.ones(2, 5), 0, 1, 2), b)
    _check(lambda x: torch.block_diag(x, x[:2, :3]), x)


def test_comparisons_of_constant_tensors_with_python_numbers():
    """torch-mlir folded `zeros_like(x) == 0` to false (a float splat against an int scalar),
    so `xlogy(zeros_like(y), y)` gave NaN where y <= 0; an int tensor against a float scalar
    crashed its import (SIGSEGV)."""
    x = torch.tensor([0.0, -1.0, INF, 1.0, NAN])
    _check(lambda x: torch.zeros_like(x) == 0, x)
    _check(lambda x: torch.where(torch.zeros_like(x) == 0, 1.0, x), x)
    _check(lambda x: (torch.full_like(x, 2.0) != 2) | (torch.full_like(x, 2.0) < 3), x)
    _check(lambda x: torch.xlogy(torch.zeros_like(x), x), x)
    i = torch.tensor([3, -2, 7, 0])
    _check(lambda i: (i == 3.0) | (i < 3.5), i)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_floor_division_as_torch(dtype):
    """torch-mlir's floor(a / b): -7 // inf gave -0.0 (torch -1), inf // 3 inf (torch NaN);
    torch divides from the exact remainder."""
    a = torch.tensor([-7.0, 7.0, INF, -INF, 5.0, -5.0, 0.0, -0.0, 1e30, 7.5, -7.5, 3.0, NAN, 1.0],
                     dtype=dtype)
    b = torch.tensor([INF, -INF, 3.0, 3.0, 2.0, 2.0, -3.0, 3.0, 7.0, -2.0, 0.5, 0.0, 1.0, -0.0],
                     dtype=dtype)
    compiled = fusec.compile(Fn(lambda a, b: (a // b, torch.div(a, b, rounding_mode="floor"),
                                              a // 3)), a, b, cache=False)
    for out, ref in zip(compiled(a.numpy(), b.numpy()), (a // b, a // b, a // 3)):
        np.testing.assert_array_equal(out, ref.numpy())
        numbers = ~np.isnan(out)  # (a NaN's sign bit means nothing)
        np.testing.assert_array_equal(np.signbit(out[numbers]), np.signbit(ref.numpy()[numbers]))
    g = torch.Generator().manual_seed(7)
    x = torch.randn(4096, generator=g, dtype=dtype) * 100
    y = torch.randn(4096, generator=g, dtype=dtype)
    many = fusec.compile(Fn(lambda a, b: a // b), x, y, cache=False)
    np.testing.assert_array_equal(many(x.numpy(), y.numpy()), (x // y).numpy())


@pytest.mark.parametrize("size,shape", [((3, 4), (2, 3, 10, 11)), ((5, 5), (1, 2, 7, 9)),
                                        ((3, None), (1, 2, 10, 6))])
def test_adaptive_max_pool_to_a_size_that_does_not_divide(size, shape):
    """AdaptiveMaxPool2d((3, 4)) of 10 x 11 was refused naming a `tensor.cast`: uneven
    windows, values and torch's indices (the first maximum in the plane)."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(8))
    f = lambda x: torch.nn.functional.adaptive_max_pool2d(x, size, return_indices=True)  # noqa: E731
    compiled = fusec.compile(Fn(f), x, cache=False)
    for out, ref in zip(compiled(x.numpy()), f(x)):
        np.testing.assert_array_equal(out, ref.numpy())


@pytest.mark.parametrize("exponent", [0.5, -0.5])
def test_square_root_powers_as_torch(exponent):
    """torch takes x ** 0.5 as sqrt: (-inf) ** 0.5 is NaN and (-0.0) ** 0.5 is -0.0 there
    (libm's pow, which fusec called: +inf and +0.0)."""
    x = torch.tensor([-INF, -0.0, 0.0, 4.0, -1.0, INF, NAN, 2.0])
    compiled = fusec.compile(Fn(lambda x: x ** exponent), x, cache=False)
    out, ref = compiled(x.numpy()), (x ** exponent).numpy()
    np.testing.assert_allclose(out, ref, rtol=2e-7, atol=0, equal_nan=True)
    numbers = ~np.isnan(ref)
    np.testing.assert_array_equal(np.signbit(out[numbers]), np.signbit(ref[numbers]))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
@pytest.mark.parametrize("exponent", [0.5, 0.3, 3.0, -1.0])
def test_integer_tensors_to_a_float_power(dtype, exponent):
    """An integer tensor to a float power is float32 in torch; torch-mlir's lowering made an
    invalid `arith.fptosi` / `math.fpowi` of it, refused with MLIR's words."""
    x = torch.tensor([0, 1, 2, 3, 7, 100, 5, 1], dtype=dtype)
    _check(lambda a: a ** exponent, x)


@pytest.mark.parametrize("f", [torch.tanh, torch.sinh, torch.cosh, torch.asinh,
                               lambda x: torch.atanh(x.clamp(-0.9, 0.9)),
                               lambda x: torch.acosh(1 + x.abs())],
                         ids=["tanh", "sinh", "cosh", "asinh", "atanh", "acosh"])
def test_float64_hyperbolic_functions(f):
    """In float64 upstream's expansions lost small arguments too (tanh(1e-17) and
    asinh(1e-300) gave 0, tanh(1e-8) was 1.6e-9 off): the C library's functions now, each
    element within 4 ulp of torch's."""
    x = torch.cat([TINY_AND_HUGE.double(),
                   torch.tensor([1e-300, -1e-17, 3e-12, 700.0, -710.0], dtype=torch.float64)])
    compiled = fusec.compile(Fn(f), x, cache=False)
    out, ref = compiled(x.numpy()), f(x).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-15, atol=0, equal_nan=True)
    numbers = ~np.isnan(ref)  # a NaN's sign bit is the library's own
    np.testing.assert_array_equal(np.signbit(out[numbers]), np.signbit(ref[numbers]))


def test_bf16_values_rounded_before_an_int_cast_or_a_compare():
    """torch rounds each bf16 op's result to bf16, so `(y * 100).to(int64)` truncates the
    rounded product; fusec computed the chain in f32 and rounded once (upstream's emulation
    lets canonicalization fold extf(truncf)): 126 of 1024 ints differed from torch, and so
    did compares and rounds. The values read by such ops keep their rounding now."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, x):
            y = self.lin(x)
            return (y * 100).to(torch.int64), (y * 100 > 25), torch.round(y * 10), y * 100

    torch.manual_seed(0)
    model = M().to(torch.bfloat16).eval()
    x = torch.randn(64, 16).to(torch.bfloat16)
    compiled = fusec.compile(model, x, cache=False)
    fresh = torch.randn(64, 16).to(torch.bfloat16)
    with torch.no_grad():
        refs = model(fresh)
    outs = compiled(fresh)
    for out, ref in zip(outs[:3], refs[:3]):
        out = np.asarray(out)
        if ref.dtype == torch.bfloat16:
            out = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
            assert torch.equal(out, ref)
        else:
            np.testing.assert_array_equal(out, ref.numpy())


def test_indexing_with_a_0d_integer_tensor():
    """`x[i]` with a 0-d tensor i (a token id): torch.export reads i as a number and selects
    with it, refused with an internal error ("a scalar computed in the model function is
    used by 'tensor.extract_slice'"). It is a one-row gather now, negative indices wrapped
    and one out of range reported as IndexError."""
    f = lambda x, i: (x[i] * 2, x[:, i] + 1, x[i, i])  # noqa: E731
    x = torch.randn(5, 5)
    compiled = fusec.compile(Fn(f), x, torch.tensor(2), cache=False)
    for value in (0, 3, -1, -5):
        i = torch.tensor(value)
        for out, ref in zip(compiled(x.numpy(), i.numpy()), f(x, i)):
            np.testing.assert_array_equal(out, ref.numpy())
    with pytest.raises(IndexError, match="index 5 is out of range for dimension 0 of size 5"):
        compiled(x.numpy(), np.array(5))


def _half_out(out: Any) -> torch.Tensor:
    out = np.asarray(out)
    if out.dtype.kind != "f" or out.dtype.itemsize != 2 or out.dtype.name == "bfloat16":
        return torch.from_numpy(out.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(out.copy())


@pytest.mark.parametrize("name,f,make", [
    ("mean_65536", lambda x: x.mean(), lambda: torch.rand(65536) + 0.5),
    ("mean_over_65504", lambda x: x.mean(-1), lambda: torch.randn(8, 4096) + 30),
    ("mean_hw", lambda x: x.mean(dim=(2, 3)), lambda: torch.randn(2, 8, 64, 64) + 20),
    ("rmsnorm_no_upcast", lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
     lambda: torch.randn(4, 4096) * 5),
    ("vector_norm", lambda x: torch.linalg.vector_norm(x, dim=-1),
     lambda: torch.randn(4, 32768) * 1.4),
    ("normalize", lambda x: F.normalize(x, dim=-1), lambda: torch.randn(4, 8192) * 4),
    ("times_1e5", lambda x: x * 1e5, lambda: torch.rand(64) * 0.6),
    ("over_1e5", lambda x: x / 1e5, lambda: torch.randn(64)),
    ("avg_pool_16", lambda x: F.avg_pool2d(x, 16), lambda: torch.randn(1, 4, 32, 32) + 300),
    ("times_0dim_65536", lambda x: x * torch.tensor(65536.0), lambda: torch.randn(64) * 1e-3),
    ("over_0dim_1e-5", lambda x: x / torch.tensor(1e-5, dtype=torch.float64),
     lambda: torch.randn(64)),
])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_floats_compute_in_float32_where_torch_does(name, f, make, dtype):
    """torch accumulates and divides means, norms and average pools of f16 / bf16 in f32 and
    applies a Python number in f32; fusec rounded the sum (or the element count: 65536 is inf
    in f16), the window sum or the number to 16 bits first: a mean of 0 or inf, an RMSNorm
    or normalize of zeros, x * 1e5 all inf, an avg_pool of 300s at 278 (a probe's finds)."""
    torch.manual_seed(0)
    x = make().to(dtype)
    compiled = fusec.compile(Fn(f), x, cache=False)
    out, eager, ref = _half_out(compiled(x)), f(x), f(x.double())
    assert out.dtype == eager.dtype
    assert torch.equal(torch.isfinite(out), torch.isfinite(eager))
    error = ((out.double() - ref).norm() / ref.norm()).item()
    eager_error = ((eager.double() - ref).norm() / ref.norm()).item()
    assert error <= max(1e-2, 2 * eager_error), (error, eager_error)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gelu_tanh_of_16bit_floats_rounds_once(dtype):
    """torch computes GELU's tanh approximation of f16 / bf16 in float32 and rounds the
    result once; fusec's decomposition rounded each of the formula's ops to 16 bits: 1.19x
    eager's error against float64 in bf16 (and two conversions an op in a GEMM's
    epilogue on the GPU)."""
    torch.manual_seed(0)
    x = (torch.randn(64, 256) * 3).to(dtype)
    f = lambda x: F.gelu(x, approximate="tanh")  # noqa: E731
    compiled = fusec.compile(Fn(f), x, cache=False)
    out, eager, ref = _half_out(compiled(x)), f(x), f(x.double())
    assert out.dtype == eager.dtype
    error = ((out.double() - ref).norm() / ref.norm()).item()
    eager_error = ((eager.double() - ref).norm() / ref.norm()).item()
    assert error <= 1.02 * eager_error, (error, eager_error)


class _ScaledByBuffer(torch.nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor(scale))  # 0-dim float32

    def forward(self, x):
        return x * self.scale, x - self.scale


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_0dim_float_tensor_second_operand_is_applied_unrounded(dtype):
    """`x * s` with x bf16 / f16 and s a 0-dim f32 buffer: torch's result is x's type, and its
    CPU kernel multiplies by s itself (TensorIterator's original scalar value), in f32,
    rounding once. fusec rounded s to x's type first: 1.005 became 1.0078 in bf16 (every
    product 0.28% off, a probe's find). Bit for bit as eager's; `x - s` too, where eager's
    kernel rounds s to x's type first (its add and sub have no such path)."""
    torch.manual_seed(3)
    model = _ScaledByBuffer(1.005).eval()
    x = (torch.randn(4, 256) + 3).to(dtype)
    compiled = fusec.compile(model, x, cache=False)
    x = (torch.randn(4, 256) + 3).to(dtype)
    for out, eager in zip(compiled(x), model(x)):
        assert torch.equal(_half_out(out), eager)


class _Shifts(torch.nn.Module):
    def forward(self, a, b):
        return (torch.bitwise_left_shift(a, b), torch.bitwise_right_shift(a, b),
                torch.bitwise_left_shift(a, 9), torch.bitwise_right_shift(a, 70))


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64])
def test_shifts_by_counts_outside_the_width_are_torchs(dtype):
    """torch defines a shift by a count below 0 or at least the type's bits: 0 for `<<`, the
    sign (0 or -1; 0 for uint8) for `>>`. LLVM's shift by the width or more is poison, and
    x86 took the count mod 32: int32 1 << 32 gave 1, -8 >> 33 gave -4 (a probe's find)."""
    bits = torch.iinfo(dtype).bits
    low = 0 if dtype == torch.uint8 else -100
    a = torch.tensor([1, 1, 1, -8, 5, 3, low, 100], dtype=dtype) if low else \
        torch.tensor([1, 1, 1, 200, 5, 3, 255, 100], dtype=dtype)
    counts = [3, bits - 1, bits, bits, bits + 1, 2 * bits + 3, 1, 0]
    if dtype != torch.uint8:
        counts[5] = -1
    b = torch.tensor(counts, dtype=dtype)
    compiled = fusec.compile(_Shifts(), a, b, cache=False)
    for out, eager in zip(compiled(a, b), _Shifts()(a, b)):
        np.testing.assert_array_equal(np.asarray(out), eager.numpy())


def test_max_of_an_empty_tensor_raises_as_torch_does():
    """`x.max()` over no element has no value: torch raises; fusec returned -inf."""
    with pytest.raises(Exception, match="Expected reduction dim to be specified"):
        fusec.compile(Fn(lambda x: x.max()), torch.randn(0, 5), cache=False)
    with pytest.raises(Exception, match="Expected reduction dim to be specified"):
        fusec.compile(Fn(lambda x: x.min()), torch.randn(3, 0), cache=False)


def test_logcumsumexp_keeps_its_range():
    """torch-mlir writes logcumsumexp as log(cumsum(exp(x))): inf above x = 88, -inf below
    -103 (a probe's find). fusec shifts each row by its largest finite value and sums in
    f64: large, very negative, mixed and non-finite rows match eager's scan; fresh random
    rows match float64 along either dim."""
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0],
                      [100.0, 50.0, 120.0, 0.0, 300.0],
                      [-200.0, -150.0, -300.0, -120.0, -500.0],
                      [-1.0, float("-inf"), 2.0, float("inf"), 3.0],
                      [0.5, 1.5, float("nan"), 2.0, -3.0],
                      [float("-inf")] * 5])
    compiled = fusec.compile(Fn(lambda t: torch.logcumsumexp(t, 1)), x, cache=False)
    np.testing.assert_allclose(np.asarray(compiled(x)), torch.logcumsumexp(x, 1).numpy(),
                               rtol=1e-6, atol=0, equal_nan=True)
    r = torch.randn(6, 300) * 30
    for dim in (0, 1, -1):
        compiled = fusec.compile(Fn(lambda t: torch.logcumsumexp(t, dim)), r, cache=False)
        fresh = torch.randn(6, 300) * 30
        ref = torch.logcumsumexp(fresh.double(), dim)
        out = torch.as_tensor(np.asarray(compiled(fresh))).double()
        assert float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref)) < 1e-6


def test_scatter_out_of_range_raises_as_torch_does():
    """A few indices per row are written by selects; an index out of range (or negative)
    matched no position and was silently dropped where torch raises (a probe's find). Each
    index now goes through a bounds-checked gather: IndexError naming it; in range, the
    result is eager's."""
    x = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    v = torch.tensor([[100.0], [200.0], [300.0], [400.0]])
    good = torch.tensor([[0], [2], [1], [2]])
    compiled = fusec.compile(Fn(lambda a, i, b: a.scatter(1, i, b)), x, good, v, cache=False)
    np.testing.assert_array_equal(np.asarray(compiled(x, good, v)), x.scatter(1, good, v).numpy())
    for bad in ([[0], [3], [1], [2]], [[0], [1], [-1], [2]], [[0], [1], [1], [1000000]]):
        with pytest.raises(IndexError, match="out of range for dimension 1 of size 3"):
            compiled(x, torch.tensor(bad), v)


@pytest.mark.parametrize("include_self", [True, False])
def test_integer_scatter_reduce_mean_rounds_down(include_self):
    """scatter_reduce's integer "mean" divides with rounding toward -inf in torch; the
    lowering truncated ((7 - 8) / 2 gave 0, torch -1: a probe's find)."""
    x = torch.tensor([[5, -3, 7], [2, 4, -6], [1, 1, 1], [-7, 8, 3]])
    i = torch.tensor([[0, 1, 0], [0, 1, 3], [1, 1, 3]])
    v = torch.tensor([[2, 4, -8], [-3, -6, 2], [9, 1, 6]])

    def fn(a, j, b):
        return a.scatter_reduce(0, j, b, "mean", include_self=include_self)

    compiled = fusec.compile(Fn(fn), x, i, v, cache=False)
    g = torch.Generator().manual_seed(3)
    for xs in ((x, i, v), (torch.randint(-50, 50, (4, 3), generator=g), i,
                           torch.randint(-50, 50, (3, 3), generator=g))):
        np.testing.assert_array_equal(np.asarray(compiled(*xs)), fn(*xs).numpy())


@pytest.mark.parametrize("name", ["index_add", "index_copy", "scatter_add"])
def test_negative_indices_of_scatters_raise_as_torch_does(name):
    """torch raises for a negative index in index_add, index_copy and scatter_add (no
    Python wrapping there); the lowerings wrapped it to the last row (a probe's find)."""
    x = torch.zeros(4, 3)
    if name == "scatter_add":
        fn = lambda a, i, v: a.scatter_add(0, i, v)  # noqa: E731
        good, bad, v = torch.tensor([[0, 3, 1]]), torch.tensor([[0, -1, 1]]), torch.rand(1, 3)
    else:
        fn = (lambda a, i, v: a.index_add(0, i, v)) if name == "index_add" else \
            (lambda a, i, v: a.index_copy(0, i, v))
        good, bad, v = torch.tensor([0, 3]), torch.tensor([0, -1]), torch.rand(2, 3)
    compiled = fusec.compile(Fn(fn), x, good, v, cache=False)
    x = torch.rand(4, 3)
    np.testing.assert_allclose(np.asarray(compiled(x, good, v)), fn(x, good, v).numpy(),
                               rtol=1e-6)
    for index in (bad, torch.full_like(good, 4)):
        with pytest.raises(IndexError, match="out of range for dimension 0 of size 4"):
            compiled(x, index, v)


def test_one_hot_out_of_range_raises_as_torch_does():
    """F.one_hot(i, 4) of a class 4 or -1: torch raises; fusec wrote a row of zeros."""
    compiled = fusec.compile(Fn(lambda i: F.one_hot(i, 4)), torch.tensor([0, 1, 2]),
                             cache=False)
    i = torch.tensor([3, 0, 2])
    np.testing.assert_array_equal(np.asarray(compiled(i)), F.one_hot(i, 4).numpy())
    for bad in ([0, 4, 1], [0, -1, 1]):
        with pytest.raises(IndexError, match="out of range"):
            compiled(torch.tensor(bad))


@pytest.mark.parametrize("two_d,padding_idx", [(False, None), (True, None), (False, 2)])
def test_embedding_bag_applies_per_sample_weights(two_d, padding_idx):
    """F.embedding_bag(..., mode="sum", per_sample_weights=p): each row scaled by its
    weight before the bag's sum; the lowering dropped the weights (a probe's find)."""
    g = torch.Generator().manual_seed(5)
    w = torch.randn(10, 6, generator=g)
    if two_d:
        i, o = torch.randint(0, 10, (3, 4), generator=g), None
    else:
        i, o = torch.randint(0, 10, (7,), generator=g), torch.tensor([0, 2, 2, 5])
    p = torch.rand(i.shape, generator=g) + 0.5

    def fn(idx, weights, per_sample, offsets=None):
        return F.embedding_bag(idx, weights, offsets, mode="sum", per_sample_weights=per_sample,
                               padding_idx=padding_idx)

    args = (i, w, p) if o is None else (i, w, p, o)
    compiled = fusec.compile(Fn(fn), *args, cache=False)
    ref = fn(*[a.double() if a.is_floating_point() else a for a in args])
    out = torch.as_tensor(np.asarray(compiled(*args))).double()
    assert float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref)) < 1e-6


def test_index_fill_counts_negative_indices_from_the_end():
    """torch's index_fill takes -2 as the second row from the end; fusec's bounds check
    raised for it (a probe's find). Out of range either way still raises."""
    fn = lambda a, i: a.index_fill(0, i, 7.0)  # noqa: E731
    x = torch.rand(5, 3)
    compiled = fusec.compile(Fn(fn), x, torch.tensor([1, -2]), cache=False)
    for index in ([1, -2], [-5, 4], [0, 0]):
        i = torch.tensor(index)
        np.testing.assert_array_equal(np.asarray(compiled(x, i)), fn(x, i).numpy())
    with pytest.raises(IndexError, match="out of range"):
        compiled(x, torch.tensor([1, -6]))


def test_scatter_of_a_narrower_index_raises_for_a_negative_one():
    """An index narrower than x in another dim is torch-mlir's scatter (not the selects),
    whose lowering counted -1 from the end where torch raises (a probe's find)."""
    fn = lambda a, i, v: a.scatter(0, i, v)  # noqa: E731
    x, v = torch.rand(4, 3), torch.rand(1, 2)
    compiled = fusec.compile(Fn(fn), x, torch.tensor([[0, 3]]), v, cache=False)
    good = torch.tensor([[2, 3]])
    np.testing.assert_array_equal(np.asarray(compiled(x, good, v)), fn(x, good, v).numpy())
    with pytest.raises(IndexError, match="index -1 is out of range for dimension 0 of size 4"):
        compiled(x, torch.tensor([[0, -1]]), v)


@pytest.mark.parametrize("reduce,scalar", [("add", False), ("multiply", False),
                                           ("add", True), ("multiply", True)])
def test_scatter_with_the_older_reduce_argument(reduce, scalar):
    """`x.scatter(dim, i, src, reduce="add" / "multiply")` was refused with torch-mlir's
    message about an internal `constant.int` (a probe's find); repeated indices combine."""
    def fn(a, i, v):
        return a.scatter(1, i, 2.5 if scalar else v, reduce=reduce)

    x, v = torch.rand(3, 4) + 0.5, torch.rand(2, 2) + 0.5
    i = torch.tensor([[0, 1], [2, 2]])
    compiled = fusec.compile(Fn(fn), x, i, v, cache=False)
    x, v = torch.rand(3, 4) + 0.5, torch.rand(2, 2) + 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ref = fn(x.double(), i, v.double())
    out = torch.as_tensor(np.asarray(compiled(x, i, v))).double()
    assert float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref)) < 1e-6


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_with_a_padding_idx(mode):
    """F.embedding_bag(..., padding_idx=p) in "sum" and "mean" mode failed inside the
    lowering (an internal tensor.cast: a probe's find). Padding rows add nothing and do
    not count in a mean; a bag of padding only is zeros."""
    def fn(idx, weights, offsets):
        return F.embedding_bag(idx, weights, offsets, mode=mode, padding_idx=2)

    g = torch.Generator().manual_seed(8)
    w = torch.randn(6, 4, generator=g)
    i, o = torch.tensor([1, 2, 2, 4, 2, 5, 0]), torch.tensor([0, 2, 4, 5])
    compiled = fusec.compile(Fn(fn), i, w, o, cache=False)
    for idx in (i, torch.tensor([2, 2, 3, 2, 2, 1, 2])):
        ref = fn(idx, w.double(), o)
        out = torch.as_tensor(np.asarray(compiled(idx, w, o))).double()
        assert float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref)) < 1e-6
