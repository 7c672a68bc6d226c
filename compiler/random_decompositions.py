"""fusec's decompositions of torch's random number ops (`decompositions.decomposition_table`
puts them in its table): draws made as torch makes them where torch-mlir's own lowering
differs (integers from a float draw, narrow floats rounded up to 1.0, `randint_like`)."""

from __future__ import annotations

from typing import Any


def randint_from_zero(low: int, high: int, size: list[int], **kwargs: Any) -> Any:
    """randint(low, high) as torch-mlir draws it right: torch-mlir draws a uniform float in
    [low, high) and converts it to the integer dtype, which truncates toward zero (with low
    < 0, low never drawn and 0 twice as often), and for a float dtype does not convert it at
    all (non-integers). So: with low < 0, low + randint(0, high - low), where truncation is
    the floor; with a float dtype, drawn as int64 and converted."""
    import torch

    if not isinstance(low, int) or not isinstance(high, int):
        return NotImplemented
    dtype = kwargs.get("dtype")
    floating = dtype is not None and dtype.is_floating_point
    if low >= 0 and not floating:
        return NotImplemented
    aten = torch.ops.aten
    drawn = aten.randint.low(0, high - low, size, **{**kwargs, "dtype": torch.int64})
    if low:
        drawn = aten.add.Scalar(drawn, low)
    return aten._to_copy.default(drawn, dtype=dtype if dtype is not None else torch.int64)


def randint_high(high: int, size: list[int], **kwargs: Any) -> Any:
    """`aten.randint.default` (randint(high)): `randint_from_zero` from 0."""
    return randint_from_zero(0, high, size, **kwargs)


# Significand bits of the float dtypes a uniform draw is made in below f64: torch draws
# k * 2^-bits, k uniform in [0, 2^bits) (so that a draw is exact in the dtype and below 1).
_UNIFORM_BITS = {"torch.bfloat16": 8, "torch.float16": 11, "torch.float32": 24}


def _uniform_draw(size: list[int], dtype: Any, device: Any, low: float = 0.0,
                  high: float = 1.0) -> Any:
    """A uniform draw in [low, high) of `dtype` as torch makes it: k * 2^-bits in f64 (k
    the floor of torch-mlir's f64 draw times 2^bits, at most 2^bits - 1), scaled and
    converted. torch-mlir draws in f64 and rounds to the dtype, so bf16's `torch.rand` was
    exactly 1.0 about once in 500 draws (f32's once in 2^25)."""
    import torch

    bits = _UNIFORM_BITS.get(str(dtype))
    if bits is None:
        return NotImplemented
    aten = torch.ops.aten
    draw = aten.uniform.default(
        aten.empty.memory_format(size, dtype=torch.float64, device=device), 0.0, 1.0)
    k = aten.clamp_max.default(aten.floor.default(aten.mul.Tensor(draw, 2.0 ** bits)),
                               2.0 ** bits - 1)
    value = aten.mul.Tensor(k, 2.0 ** -bits)
    if (low, high) != (0.0, 1.0):
        value = aten.add.Tensor(aten.mul.Tensor(value, high - low), low)
    return aten._to_copy.default(value, dtype=dtype)


def uniform(x: Any, low: float = 0.0, high: float = 1.0, generator: Any = None) -> Any:
    """`aten.uniform` (`x.uniform_()`, what `rand` becomes) in a float dtype below f64."""
    if generator is not None:
        return NotImplemented
    return _uniform_draw(list(x.shape), x.dtype, x.device, float(low), float(high))


def rand(size: list[int], generator: Any = None, **kwargs: Any) -> Any:
    """`aten.rand`: `_uniform_draw` in the dtype asked for (torch's default float)."""
    import torch

    if generator is not None:
        return NotImplemented
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    return _uniform_draw(list(size), dtype, kwargs.get("device"))


def rand_like(x: Any, **kwargs: Any) -> Any:
    """`aten.rand_like`: `_uniform_draw` of x's shape and dtype (or the one asked for)."""
    return _uniform_draw(list(x.shape), kwargs.get("dtype") or x.dtype, x.device)


def randint_like(x: Any, *bounds: int, **kwargs: Any) -> Any:
    """`aten.randint_like` (`.default`: high; `.low_dtype`: low, high), which torch-mlir
    cannot lower: randint of x's shape in x's dtype (or the one asked for)."""
    import torch

    low, high = (0, bounds[0]) if len(bounds) == 1 else bounds[:2]
    if not isinstance(low, int) or not isinstance(high, int):
        return NotImplemented
    dtype = kwargs.get("dtype") or x.dtype
    size = list(x.shape)
    drawn = randint_from_zero(low, high, size, dtype=dtype, device=x.device)
    if drawn is NotImplemented:
        drawn = torch.ops.aten.randint.low(low, high, size, dtype=dtype, device=x.device)
    return drawn
