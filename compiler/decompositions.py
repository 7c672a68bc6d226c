"""fusec's decompositions of torch ops (the table `frontend.decompose_program` and
`frontend.trace_fx_graph` trace with): torch-mlir's table with the overrides that give fusec
clean, fusable linalg (see `decomposition_table`)."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fusec.compiler.random_decompositions import (
    rand,
    rand_like,
    randint_from_zero,
    randint_high,
    randint_like,
    uniform,
)

if TYPE_CHECKING:
    import torch


def decomposition_table() -> dict[Any, Any]:
    """torch-mlir's decomposition table with the overrides that give fusec clean linalg.

    - `aten.scaled_dot_product_attention`: naive attention, softmax(Q K^T * scale [+ causal
      mask]) V, instead of torch's math path. torch's path ends in `_safe_softmax`, whose
      "is the whole row -inf" check lowers to an i1 `all` reduction whose result must go
      through memory (MLIR 22's `finalize-memref-to-llvm` aborts on i1 memrefs); removing
      the entry instead makes torch-mlir emit `tm_tensor.attention`, which MLIR 22 cannot
      parse. Without a user mask no row is fully masked, so plain softmax is exact; with a
      mask, the fully-masked-row check reuses softmax's row max (elementwise, fusable). GQA
      repeats K/V heads; only dropout (never on in eval) falls back to torch's path.
    - `aten.var_mean.correction` (LayerNorm): two-pass mean and variance in the input's dtype;
      torch-mlir's lowering upcasts the whole tensor to f64.
    - `aten.reciprocal` (BatchNorm): `1 / x`; torch-mlir's lowering puts a `cf.assert(x != 0)`
      in the linalg body (PyTorch itself gives inf).
    - `aten.gelu` with approximate="tanh": written out with an exact sqrt(2/pi); torch-mlir's
      lowering uses 0.797724 (sqrt(2/pi) = 0.7978846), a relative error of 5e-5 in the output.
      Of a 16-bit float, computed in float32 and rounded once, as torch's kernels do.
    - `aten.pow.Tensor_Scalar` with exponent 2 or 3 (RMSNorm, GELU-tanh): multiplications,
      instead of `math.fpowi`.
    - `aten.floor_divide` of uint8: in int32 (torch-mlir's unsigned lowering segfaults).
    - integer floor division (`//`, `div(rounding_mode="floor")`): a truncating division and
      a correction, in integers. torch-mlir computes it in f64 (`floor(a / b)`), which is
      inexact above 2^53 and turns a division by zero into a number, where torch raises
      (`--fusion-guard-division` reports the truncating division's zero divisor).
    - `aten.constant_pad_nd` with a negative pad (a crop: RWKV's time shift,
      `ZeroPad2d((0, 0, 1, -1))`): a slice, then the non-negative pads. torch-mlir folds a
      pad whose result has its input's shape away as the identity, whatever the pads.
    - `aten._native_batch_norm_legit_no_training` (an inference BatchNorm): torch's own
      formula, `(x - mean) * (1 / sqrt(var + eps)) * weight + bias` in f32 for 16-bit inputs,
      in 7-10 ops instead of the 25 of torch's helper (its copies, flattens and empty saved
      statistics): every op costs ~2 ms in the trace, 0.5 s of ResNet-18's compile.
    - `aten.roll` (Swin's shifted windows): a concat of two slices per rolled dim (a flat
      roll: of the flattened tensor). torch-mlir's lowering types the slices with dynamic
      sizes, and it refuses a roll without dims.
    - `aten.isfinite`: `|x| < inf` (torch-mlir's `|x| != inf` called NaN finite).
    - `aten.trunc` of floats: ceil below zero, floor elsewhere (signed zeros kept).
    - `aten.signbit`, `aten.copysign` of floats: compares (torch-mlir cannot lower them).
    - `aten.fmod` of floats: the exact remainder of |a| by |b| with a's sign (torch-mlir's
      `a - trunc(a / b) * b` lost every digit of a large quotient, and gave NaN for b = inf).
    - `aten.eq.Tensor` of a float tensor with itself: `not (x != x)` (torch-mlir folds it to
      true; NaN == NaN is false); `aten.isclose` of floats as torch writes it.
    - `aten.index_put` (`y[i] = v`): a boolean mask with one value as a select; int32
      indices widened (also for `aten.index.Tensor`).
    - `aten.diagonal_scatter` (`y.diagonal().fill_(v)`, `fill_diagonal_`'s as_strided form):
      a select on the diagonal; `aten.cat` drops inputs empty along its dim (block_diag).
    - comparisons of a float tensor with a Python int: with the int as a float (torch-mlir
      folded `zeros_like(x) == 0` to false).
    - `aten.adaptive_max_pool2d` to a size that does not divide: a max per window.
    - `aten.lstm`: torch's decomposition with oneDNN off (no `mkldnn_rnn_layer`).
    - `aten.elu` (SELU, CELU): expm1 below zero, as torch's kernel.
    - `aten.clamp` of integers by float bounds: in the default float, as torch promotes.
    - `aten.randint` with a negative low: low + randint(0, high - low) (torch-mlir's
      float-to-int conversion truncates toward zero: biased below zero); with a float
      dtype: drawn as int64 and converted (torch-mlir left the uniform float unrounded);
      `aten.randint_like` (which torch-mlir cannot lower) as randint of the input's shape.
    - `aten.sort.stable` as `aten.sort.default` (fusec's sort is stable); `aten.median`
      (all elements, and along a dim with its indices) by it; `aten.hypot` as C's hypot
      computes it (no overflow).
    - `aten.uniform` / `rand` / `rand_like` in bf16, f16 and f32: k * 2^-bits below 1, as
      torch draws them (torch-mlir's f64 draw rounded to bf16 gave 1.0 once in 500).
    - `aten.neg` of integers: 0 - x (torch-mlir negates in f32); integer `//`, `fmod` and
      `x ** n` by a Python int: in integers (torch-mlir's f64 division, its refusals).
    - integer shifts by a count outside [0, bits): 0 for `<<`, the sign for `>>`, as torch's
      kernels define them (LLVM's shift by the width or more is poison: x86 took the count
      mod 32); `max()` / `min()` of an empty tensor raise torch's error (no identity).
    - `aten.index_add`, `index_copy`, `scatter_add`: a negative index raises IndexError as
      in torch (the scatter's lowering counted it from the end, as `y[i] = v` does);
      `one_hot`: a class out of range raises (it wrote a row of zeros); `index_fill` counts
      a negative index from the end, as torch does (fusec raised for it).
    - `aten.embedding_bag` with `per_sample_weights` (mode "sum"): the weighted rows summed
      per bag (the lowering dropped the weights).
    - `aten.scatter` with `reduce="add" / "multiply"`: scatter_reduce's sum / prod.
    - `aten.scatter_reduce` "mean" of integers: floor division by the count, as torch.
    - `aten.logcumsumexp` of floats: shifted by the row's largest finite value and summed in
      f64 (torch-mlir's `log(cumsum(exp(x)))` gave inf above x = 88 and -inf below -103);
      exact unless a prefix of the row lies more than ~700 below the row's maximum.
    - `aten.topk` of a few largest and `aten.scatter` of a few indices per row (a mixture of
      experts' router): row maxima and selects, fusable, instead of tm_tensor's serial
      loops (a one-thread kernel on the GPU); more than SMALL_SELECTION stay torch-mlir's.
    """
    import torch
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    aten = torch.ops.aten
    table = dict(get_decomposition_table())
    sdpa = aten.scaled_dot_product_attention.default
    table[sdpa] = _naive_attention_decomposition(table.get(sdpa))
    table[aten.var_mean.correction] = _var_mean_two_pass
    for op in (aten.var.correction, aten.std.correction):
        table[op] = _var_correction_over_count(op, table.get(op))
    table[aten.reciprocal.default] = _reciprocal
    table[aten.gelu.default] = _gelu_tanh
    table[aten.pow.Tensor_Scalar] = _pow_scalar
    table[aten.floor_divide.default] = _floor_divide
    table[aten.div.Tensor_mode] = _div_floor_mode
    table[aten.constant_pad_nd.default] = _crop_negative_pads
    table[aten.topk.default] = _small_topk
    table[aten.scatter.src] = _scatter(aten.scatter.src)
    table[aten.scatter.value] = _scatter(aten.scatter.value)
    table[aten.scatter.reduce] = _scatter_with_reduce
    table[aten.scatter.value_reduce] = _scatter_with_reduce
    table[aten.roll.default] = _roll_as_slices
    table[aten._native_batch_norm_legit_no_training.default] = _batch_norm_no_training
    table[aten.isfinite.default] = _isfinite
    table[aten.fmod.Tensor] = _fmod
    table[aten.fmod.Scalar] = _fmod
    table[aten.trunc.default] = _trunc
    table[aten.signbit.default] = _signbit
    table[aten.copysign.Tensor] = _copysign
    table[aten.copysign.Scalar] = _copysign
    table[aten.neg.default] = _neg
    # (`a << b` and `a >> b` are `__lshift__` / `__rshift__`: the same ops, which torch-mlir
    # refused by those names; probe 10)
    for shift in (aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
                  aten.__lshift__.Tensor, aten.__lshift__.Scalar):
        table[shift] = _shift(left=True)
    for shift in (aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
                  aten.__rshift__.Tensor, aten.__rshift__.Scalar):
        table[shift] = _shift(left=False)
    table[aten.xlogy.Scalar_Other] = _xlogy_scalar
    for op, name in ((aten.max.default, "max"), (aten.min.default, "min")):
        table[op] = _full_reduction_of_nonempty(op, name, table.get(op))
    table[aten.eq.Tensor] = _eq_self
    table[aten.isclose.default] = _isclose
    table[aten.logcumsumexp.default] = _logcumsumexp
    table[aten.scatter_reduce.two] = _scatter_reduce_integer_mean
    for op in (aten.index_add.default, aten.index_copy.default, aten.scatter_add.default):
        table[op] = _with_checked_index(op, table.get(op))
    for op in (aten.index_fill.int_Scalar, aten.index_fill.int_Tensor):
        table[op] = _with_checked_index(op, table.get(op), _wrapped)
    table[aten.one_hot.default] = _one_hot_checked
    for op in (aten.embedding_bag.padding_idx, aten.embedding_bag.default):
        table[op] = _weighted_embedding_bag(op)
    table[aten.randint.low] = randint_from_zero
    table[aten.randint.default] = randint_high
    table[aten.randint_like.default] = randint_like
    table[aten.randint_like.low_dtype] = randint_like
    table[aten.uniform.default] = uniform
    table[aten.sort.stable] = _sort_stable
    table[aten.hypot.default] = _hypot
    table[aten.median.default] = _median
    table[aten.median.dim] = _median_dim
    table[aten.rand.default] = rand
    table[aten.rand_like.default] = rand_like
    table[aten.index_put.default] = _index_put
    table[aten.index.Tensor] = _index_int64
    table[aten.clamp.default] = _clamp_promoted
    table[aten.elu.default] = _elu
    table[aten.cat.default] = _cat_nonempty
    table[aten.convolution.default] = _depthwise_conv_transpose
    table[aten.fmax.default] = _fmax_fmin(aten.maximum.default)
    table[aten.fmin.default] = _fmax_fmin(aten.minimum.default)
    for rnn in (aten.lstm.input, aten.lstm.data):
        if rnn in table:
            table[rnn] = _without_mkldnn(table[rnn])
    table[aten.adaptive_max_pool2d.default] = _adaptive_max_pool2d
    for compare in (aten.eq.Scalar, aten.ne.Scalar, aten.lt.Scalar, aten.le.Scalar,
                    aten.gt.Scalar, aten.ge.Scalar):
        table[compare] = _compare_float_scalar(compare)
    table[aten.diagonal_scatter.default] = _diagonal_scatter
    table[aten.as_strided_scatter.default] = _as_strided_diagonal
    for scalar, tensor_form in ((aten.mul.Tensor, aten.mul.Tensor),
                                (aten.sub.Tensor, aten.sub.Tensor),
                                (aten.remainder.Scalar, aten.remainder.Tensor)):
        table.setdefault(scalar, _int8_scalar_operand(tensor_form))
    # 16-bit floats computed in float32 where torch's kernels do (their "opmath" type):
    # means, norms and average pools accumulate and divide in f32, a Python number is
    # applied in f32 (not rounded to the tensor's type: 1e5 is inf in f16, 0.1 is 0.1001 in
    # bf16; so is a 0-dim float tensor a product or quotient's second operand); the result
    # rounded once.
    for op in (aten.mean.dim, aten.mean.default, aten.linalg_vector_norm.default,
               aten.avg_pool2d.default, aten.avg_pool1d.default, aten.avg_pool3d.default,
               aten.round.decimals):
        table[op] = _in_float32(op, table.get(op))
    for op in (aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.div.Tensor,
               aten.rsub.Scalar):
        table[op] = _in_float32(op, table.get(op), scalar_second=True,
                                zero_dim=op in (aten.mul.Tensor, aten.div.Tensor))
    return table


def _scalar_operand(x: Any, other: Any, zero_dim: bool) -> bool:
    """Whether `other`, the second operand of an op on 16-bit `x`, is one torch's CPU kernels
    apply in float32 unrounded: a Python number, or (`zero_dim`: multiply and divide, whose
    kernels read TensorIterator's `original_scalar_value`) a 0-dim floating tensor that
    leaves the result in x's type: `x * s` with s a 0-dim f32 buffer multiplies by s, not by
    s rounded to bf16, and 65536 stays finite for f16. (Eager's add and sub round such an s
    to x's type first, as fusec's graph does.)"""
    import torch

    if isinstance(other, bool):
        return False
    if isinstance(other, (int, float)):
        return True
    return zero_dim and isinstance(other, torch.Tensor) and other.ndim == 0 and \
        other.dtype.is_floating_point and torch.result_type(x, other) == x.dtype


def _in_float32(op: Any, original: Any, scalar_second: bool = False,
                zero_dim: bool = False) -> Any:
    """`op` of a bf16 / f16 first argument computed on it converted to float32, the result
    converted back (with `scalar_second`: only where the second argument is a Python number
    or, with `zero_dim`, a 0-dim float tensor: `_scalar_operand`); anything else goes to
    `original` (the table's entry, or none)."""
    import torch

    half = (torch.float16, torch.bfloat16)
    convert = torch.ops.prims.convert_element_type.default

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        x = args[0] if args else None
        ours = isinstance(x, torch.Tensor) and x.dtype in half and \
            kwargs.get("dtype") is None and (not scalar_second or (
                len(args) > 1 and _scalar_operand(x, args[1], zero_dim)))
        if ours:
            return convert(op(convert(x, torch.float32), *args[1:], **kwargs), x.dtype)
        return original(*args, **kwargs) if original is not None else NotImplemented

    return decomposition


def _shift(left: bool) -> Any:
    """`bitwise_left_shift` / `bitwise_right_shift` of integers with torch's meaning of a
    count below 0 or at least the type's bits: 0 for a left shift, the sign (0 or -1; 0 for
    uint8) for a right one; the shift itself by a count clamped into range."""
    import torch

    aten = torch.ops.aten
    building = []  # the shifts this builds are by counts in range: left as they are

    def decomposition(a: Any, b: Any) -> Any:
        if building or not isinstance(a, torch.Tensor) or a.dtype.is_floating_point or \
                a.dtype == torch.bool:
            return NotImplemented
        building.append(True)
        try:
            return _in_range(a, b)
        finally:
            building.pop()

    def _in_range(a: Any, b: Any) -> Any:
        bits = torch.iinfo(a.dtype).bits
        # The count compared and clamped as int64 (a uint8 count in its unsigned order).
        count = (b if isinstance(b, torch.Tensor) else torch.full((), b)).to(torch.int64)
        outside = aten.logical_or.default(aten.lt.Scalar(count, 0),
                                          aten.ge.Scalar(count, bits))
        inside = aten.clamp.default(count, 0, bits - 1).to(a.dtype)
        if left:
            return aten.where.self(outside, aten.zeros_like.default(a),
                                   aten.bitwise_left_shift.Tensor(a, inside))
        if a.dtype == torch.uint8:  # unsigned: shifted out entirely
            sign = aten.zeros_like.default(a)
        else:
            sign = aten.bitwise_right_shift.Tensor(a, torch.full((), bits - 1, dtype=a.dtype))
        return aten.where.self(outside, sign, aten.bitwise_right_shift.Tensor(a, inside))

    return decomposition


def _full_reduction_of_nonempty(op: Any, name: str, original: Any) -> Any:
    """`x.max()` / `x.min()` over every element: torch raises for an empty x (a max has no
    identity); torch-mlir's fold gave -inf / +inf."""
    import torch

    def decomposition(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.numel() == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for "
                               f"input.numel() == 0. Specify the reduction dim with the "
                               f"'dim' argument.")
        return original(x) if original is not None else NotImplemented

    return decomposition


def _signbit(x: Any) -> Any:
    """Below zero, or a zero whose reciprocal is -inf (-0.0); torch-mlir cannot lower it (its
    refusal named `constant.int`). A NaN counts as positive (torch reads its sign bit: the
    NaNs arithmetic makes have it clear on x86, a negated one has it set)."""
    import torch

    aten = torch.ops.aten
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        return NotImplemented
    negative_zero = aten.logical_and.default(
        aten.eq.Scalar(x, 0), aten.lt.Scalar(aten.reciprocal.default(x), 0))
    return aten.logical_or.default(aten.lt.Scalar(x, 0), negative_zero)


def _as_dtype(t: Any, dtype: Any) -> Any:
    """Tensor `t` converted to `dtype` (itself where it has it)."""
    import torch

    return t if t.dtype == dtype else torch.ops.aten._to_copy.default(t, dtype=dtype)


def _copysign(a: Any, b: Any) -> Any:
    """|a| with b's sign (`_signbit`'s reading of it, -0.0 included), in the float type torch
    gives the result (integers promote to the default float)."""
    import torch

    aten = torch.ops.aten
    if not isinstance(a, torch.Tensor):
        return NotImplemented
    dtype = torch.result_type(a, b)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    a = _as_dtype(a, dtype)
    if isinstance(b, torch.Tensor) and not b.dtype.is_floating_point:
        b = _as_dtype(b, dtype)
    magnitude = aten.abs.default(a)
    if not isinstance(b, torch.Tensor):
        return magnitude if math.copysign(1.0, b) > 0 else aten.neg.default(magnitude)
    return aten.where.self(_signbit(b), aten.neg.default(magnitude), magnitude)


def _trunc(x: Any) -> Any:
    """`ceil` below zero, `floor` elsewhere: the sign of a zero kept (torch-mlir's selects
    gave trunc(-0.0) = +0, and so `frac(-0.0)` = -0; torch: -0 and +0)."""
    import torch

    aten = torch.ops.aten
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        return NotImplemented
    return aten.where.self(aten.lt.Scalar(x, 0), aten.ceil.default(x), aten.floor.default(x))


def _fmod(a: Any, b: Any) -> Any:
    """C's fmod of a float tensor: the remainder of |a| by |b|, with a's sign. torch-mlir's
    is a - trunc(a / b) * b in the float type: fmod(1e8, 3.7) gave 0 (torch: 2.511) and
    fmod(5, inf) NaN. Its remainder is exact (`arith.remf`, then a sign correction that
    two non-negative operands never need), with a's sign bit (-0.0 keeps it). Integers:
    torch-mlir's."""
    import torch

    aten = torch.ops.aten
    operand = _integer_operand(a, b)
    if operand is not b:
        # An integer fmod by a scalar (torch-mlir refused it, naming `constant.int`): a less
        # the truncating quotient times b, in integers.
        q = aten.div.Tensor_mode(a, operand, rounding_mode="trunc")
        return aten.sub.Tensor(a, aten.mul.Tensor(q, operand))
    if not isinstance(a, torch.Tensor) or not a.dtype.is_floating_point:
        return NotImplemented
    if isinstance(b, torch.Tensor):
        r = aten.remainder.Tensor(aten.abs.default(a), aten.abs.default(b))
    else:
        r = aten.remainder.Scalar(aten.abs.default(a), abs(b))
    # a's sign as its sign bit reads: fmod(-0.0, b) is -0.0.
    return aten.where.self(_signbit(a), aten.neg.default(r), r)


_CHECKING = threading.local()  # a wrapped op's own call inside its decomposition


def _calling_itself(op: Any) -> bool:
    """Whether `op`'s decomposition is running `op` itself (`_own_call`): its table entry
    then gives it back as it is (NotImplemented), for torch-mlir."""
    return op in _CHECKING.__dict__.setdefault("ops", set())


@contextlib.contextmanager
def _own_call(op: Any) -> Iterator[None]:
    """While a decomposition of `op` calls `op` itself (`_calling_itself` holds)."""
    active = _CHECKING.__dict__.setdefault("ops", set())
    active.add(op)
    try:
        yield
    finally:
        active.discard(op)


def _checked(index: Any, size: int) -> Any:
    """`index`'s values read back through a gather from arange(size): the same values, and
    fusec's bounds check on the gather (--fusion-guard-indices) raises IndexError for any
    outside [0, size), as torch does for these ops (no wrapping of negative indices)."""
    import torch

    positions = torch.arange(size, dtype=index.dtype, device=index.device)
    return torch.index_select(positions, 0, index.reshape(-1)).reshape(index.shape)


def _unwrapped(index: Any, size: int) -> Any:
    """`index` with each negative value moved down by `size`: the scatter's lowering counts
    a negative index from the end (as `y[i] = v` takes it) and its bounds check then sees
    the original negative value and raises IndexError, as torch does for these ops. One
    elementwise op that fuses with the index's other ops (a gather would be a kernel)."""
    import torch

    return torch.where(index < 0, index - size, index)


def _wrapped(index: Any, size: int) -> Any:
    """`index` with each negative value counted from the end, as torch's index_fill takes
    it (fusec's bounds check raised for it)."""
    import torch

    return torch.where(index < 0, index + size, index)


def _with_checked_index(op: Any, decomposition: Any, adjust: Any = None) -> Any:
    """`op(x, dim, index, ...)` with negative indices made errors (`_unwrapped`), or counted
    from the end (`adjust`: `_wrapped`), then as before: torch's decomposition where the
    table has one, else the op itself."""
    adjust = adjust or _unwrapped

    def run(x: Any, dim: int, index: Any, *args: Any, **kwargs: Any) -> Any:
        if _calling_itself(op) or index.numel() == 0 or x.dim() == 0:
            return NotImplemented
        with _own_call(op):
            index = adjust(index, x.shape[dim % x.dim()])
            if decomposition is not None:
                return decomposition(x, dim, index, *args, **kwargs)
            return op(x, dim, index, *args, **kwargs)

    return run


def _one_hot_checked(x: Any, num_classes: int = -1) -> Any:
    """one_hot with the class count given: a compare with arange, the classes checked
    (`_checked`): torch raises for a class below 0 or at least num_classes."""
    import torch

    if num_classes < 0 or x.numel() == 0:
        return NotImplemented
    classes = torch.arange(num_classes, dtype=x.dtype, device=x.device)
    return (_checked(x, num_classes).unsqueeze(-1) == classes).to(torch.int64)


def _weighted_embedding_bag(op: Any) -> Any:
    """embedding_bag with per_sample_weights (mode "sum", the only mode torch allows them
    in): each row scaled by its weight, summed per bag (bags from the offsets, or the rows
    of 2-D indices); padding_idx rows add nothing. Without weights but with a padding_idx,
    "sum" and "mean" the same way (a mean over the bag's other rows; an empty bag zeros):
    its lowering failed on an internal tensor.cast. The other outputs (offsets to bags, bag
    sizes, max indices) are the unweighted op's. Otherwise: as before."""

    def run(weight: Any, indices: Any, offsets: Any, scale_grad_by_freq: bool = False,
            mode: int = 0, sparse: bool = False, per_sample_weights: Any = None,
            include_last_offset: bool = False, padding_idx: Any = None) -> Any:
        import torch

        padded = padding_idx is not None and padding_idx >= 0
        handled = mode == 0 if per_sample_weights is not None else padded and mode in (0, 1)
        if _calling_itself(op) or indices.dim() not in (1, 2) or not handled:
            return NotImplemented
        rest = (scale_grad_by_freq, mode, sparse, None, include_last_offset) + \
            ((padding_idx,) if op is torch.ops.aten.embedding_bag.padding_idx else ())
        with _own_call(op):  # its other outputs, as torch-mlir takes them
            aux = op(weight, indices, offsets, *rest)
        if indices.dim() == 2:
            length = indices.shape[1]
            bags = indices.shape[0]
            bag = torch.arange(indices.numel(), device=indices.device) // length
        else:
            bags = offsets.shape[0] - (1 if include_last_offset else 0)
            pos = torch.arange(indices.shape[0], device=indices.device)
            bag = (pos.unsqueeze(1) >= offsets[:bags].unsqueeze(0)).sum(1) - 1
        flat = indices.reshape(-1)
        rows = torch.embedding(weight, flat)
        if per_sample_weights is not None:
            rows = rows * per_sample_weights.reshape(-1, 1).to(weight.dtype)
        if padded:
            rows = torch.where((flat == padding_idx).unsqueeze(1), torch.zeros_like(rows), rows)
        out = torch.zeros(bags, weight.shape[1], dtype=weight.dtype, device=weight.device)
        out = out.index_add(0, bag, rows)
        if mode == 1:
            kept = (flat != padding_idx).to(weight.dtype) if padded else \
                torch.ones(flat.shape, dtype=weight.dtype, device=weight.device)
            count = torch.zeros(bags, dtype=weight.dtype, device=weight.device)
            out = out / count.index_add(0, bag, kept).clamp(min=1).unsqueeze(1)
        return (out,) + tuple(aux[1:])

    return run


def _scatter_reduce_integer_mean(x: Any, dim: int, index: Any, src: Any, reduce: str,
                                 include_self: bool = True) -> Any:
    """scatter_reduce's "mean" of integers as torch computes it: the sum over the count,
    rounded toward -inf (torch divides with rounding_mode="floor"; torch-mlir's division
    truncated: (7 - 8) / 2 gave 0 where torch gives -1). Positions no index reaches keep
    x's value. Floats and the other reductions: torch-mlir's."""
    import torch

    if reduce != "mean" or x.dtype.is_floating_point or x.dtype == torch.bool:
        return NotImplemented
    total = torch.scatter_reduce(x, dim, index, src, "sum", include_self=include_self)
    count = torch.ones_like(x) if include_self else torch.zeros_like(x)
    count = torch.scatter_add(count, dim, index, torch.ones_like(src))
    return torch.div(total, count.clamp(min=1), rounding_mode="floor")


def _logcumsumexp(x: Any, dim: int) -> Any:
    """log(cumsum(exp(x))) along `dim`, as torch's scan computes it to within float
    rounding: shifted by the largest finite value of each row (no overflow), in f64 (no
    underflow until a prefix is ~700 below that maximum), rounded once. NaN propagates from
    its position on, +inf gives inf from its position on, -inf adds nothing."""
    import torch

    if not x.dtype.is_floating_point or x.numel() == 0:
        return NotImplemented
    wide = x.to(torch.float64)
    ninf = torch.scalar_tensor(float("-inf"), dtype=torch.float64, device=x.device)
    peak = torch.where(torch.isfinite(wide), wide, ninf).amax(dim, keepdim=True)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    return (torch.log(torch.cumsum(torch.exp(wide - peak), dim)) + peak).to(x.dtype)


def _isfinite(x: torch.Tensor) -> torch.Tensor:
    """`|x| < inf`: false for NaN as for the infinities (torch-mlir's `|x| != inf` is true for
    NaN); every integer is finite."""
    import torch

    if not x.dtype.is_floating_point:
        return torch.ones_like(x, dtype=torch.bool)
    return torch.abs(x) < float("inf")


def fx_decomposition_table() -> dict[Any, Any]:
    """`decomposition_table` for graphs traced by make_fx (`trace_fx_graph`), where the
    composite ops come in as they dispatch after autograd rather than as torch.export's
    functional forms: an inference batch norm reaches `native_batch_norm` (training False),
    whose lowering in torch-mlir cannot type its empty saved statistics; it goes to the
    form torch.export gives (`_native_batch_norm_legit_no_training`)."""
    import torch

    table = decomposition_table()
    table[torch.ops.aten.native_batch_norm.default] = _batch_norm_inference
    return table


def _batch_norm_inference(x: torch.Tensor, weight: Any, bias: Any, running_mean: Any,
                          running_var: Any, training: bool, momentum: float,
                          eps: float) -> Any:
    import torch

    if training or running_mean is None or running_var is None:
        return NotImplemented
    return torch.ops.aten._native_batch_norm_legit_no_training(
        x, weight, bias, running_mean, running_var, momentum, eps)


def _floor_divide(a: torch.Tensor, b: Any) -> torch.Tensor | Any:
    """uint8 `a // b` computed in int32 and narrowed back (exact: both are non-negative);
    torch-mlir's lowering of an unsigned floor division crashes the process (SIGSEGV).
    Other integers: `_floor_divide_integers`; floats: torch-mlir's."""
    import torch

    if a.dtype != torch.uint8:
        return _floor_divide_integers(a, b)
    if isinstance(b, int) and not isinstance(b, bool):
        b %= 256  # torch reads a Python integer beside uint8 as uint8 (x // -3 is x // 253)
    wide = b.to(torch.int32) if isinstance(b, torch.Tensor) else b
    return torch.floor_divide(a.to(torch.int32), wide).to(torch.uint8)


def _naive_attention_decomposition(fallback: Any) -> Any:
    """A decomposition of `aten.scaled_dot_product_attention` as naive attention."""
    import torch

    def naive_attention(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        *,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> torch.Tensor:
        if dropout_p != 0.0:
            if fallback is None:
                return NotImplemented
            return fallback(
                query, key, value, attn_mask, dropout_p, is_causal,
                scale=scale, enable_gqa=enable_gqa,
            )
        if enable_gqa:
            key, value = _repeat_heads(key, query.shape[-3]), _repeat_heads(value, query.shape[-3])
        if scale is None:
            scale = 1.0 / math.sqrt(query.shape[-1])
        # 16-bit inputs: the scores and the softmax in f32, P rounded to the inputs' type
        # for the second product (as torch's fused kernels do: the scores of large
        # queries and keys lose their softmax's precision when rounded to 16 bits).
        low = query.dtype in (torch.float16, torch.bfloat16)
        wide = (lambda t: t.float()) if low else (lambda t: t)
        scores = torch.matmul(wide(query), wide(key).transpose(-2, -1)) * scale
        if is_causal:
            # torch's causal mask is top-left aligned: row i sees columns 0..i, so no row is
            # fully masked and plain softmax is exact.
            rows = torch.arange(query.shape[-2], device=query.device).unsqueeze(-1)
            columns = torch.arange(key.shape[-2], device=query.device).unsqueeze(0)
            scores = torch.where(rows >= columns, scores, float("-inf"))
        if attn_mask is None:
            return torch.matmul(torch.softmax(scores, dim=-1).to(value.dtype), value)
        if attn_mask.dtype == torch.bool:
            scores = torch.where(attn_mask, scores, float("-inf"))
        else:
            scores = scores + attn_mask
        return torch.matmul(_safe_softmax(scores).to(value.dtype), value)

    return naive_attention


def _safe_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim that gives 0, not NaN, on rows that are entirely -inf.

    torch's `_safe_softmax` tests "all -inf" with an i1 `all` reduction; a row is all -inf
    exactly when its max is, so the test reuses softmax's own max and stays elementwise.
    """
    import torch

    row_max = torch.amax(scores, dim=-1, keepdim=True)
    exponentials = torch.exp(scores - row_max)
    probabilities = exponentials / torch.sum(exponentials, dim=-1, keepdim=True)
    return torch.where(row_max == float("-inf"), 0.0, probabilities)


def _repeat_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Repeat each of x's heads (dim -3) so that it has `heads` heads (grouped-query attention)."""
    repeats = heads // x.shape[-3]
    expanded = x.unsqueeze(-3).expand(*x.shape[:-2], repeats, *x.shape[-2:])
    return expanded.reshape(*x.shape[:-3], heads, *x.shape[-2:])


def _reduced_dims(x: Any, dim: Any) -> list[int]:
    """The dims a reduction over `dim` folds (an empty list or None: every dim)."""
    return [d % x.ndim for d in dim] if dim else list(range(x.ndim))


def _var_mean_two_pass(
    x: torch.Tensor,
    dim: list[int] | None = None,
    *,
    correction: float | None = None,
    keepdim: bool = False,
) -> tuple[torch.Tensor, torch.Tensor] | Any:
    """var_mean as mean, then the mean of squared deviations, in x's own dtype."""
    import torch

    if not x.dtype.is_floating_point or x.ndim == 0:
        return NotImplemented
    # An empty dim list reduces over every dim, as None does.
    dims = _reduced_dims(x, dim)
    count = math.prod(x.shape[d] for d in dims)
    mean = torch.mean(x, dims, keepdim=True)
    centered = x - mean
    divisor = max(count - (1 if correction is None else correction), 0)
    var = torch.sum(centered * centered, dims, keepdim=keepdim) / divisor
    if not keepdim:
        mean = torch.squeeze(mean, dims)
    return var, mean


def _var_correction_over_count(op: Any, original: Any) -> Any:
    """var / std with a correction at least the reduced count: the sum of squared deviations
    over a divisor of 0 (torch clamps it: inf, or NaN for a zero sum), as var_mean's
    decomposition computes it (torch-mlir's lowering divided by the negative count: a
    negative variance, a NaN std; probe 10). Any other: the table's (torch-mlir's)."""
    import torch

    def decomposition(x: Any, dim: Any = None, *, correction: Any = None,
                      keepdim: bool = False) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype.is_floating_point and x.ndim > 0 and \
                correction is not None:
            if math.prod(x.shape[d] for d in _reduced_dims(x, dim)) - correction <= 0:
                var, _ = _var_mean_two_pass(x, dim, correction=correction, keepdim=keepdim)
                return torch.sqrt(var) if op == torch.ops.aten.std.correction else var
        if original is not None:
            return original(x, dim, correction=correction, keepdim=keepdim)
        return NotImplemented

    return decomposition


def _reciprocal(x: torch.Tensor) -> torch.Tensor | Any:
    """1 / x as a division by a 0-d one."""
    import torch

    if not x.dtype.is_floating_point:
        return NotImplemented
    return torch.div(torch.scalar_tensor(1.0, dtype=x.dtype, device=x.device), x)


def _gelu_tanh(x: torch.Tensor, approximate: str = "none") -> torch.Tensor | Any:
    """GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), of a
    bf16 / f16 `x` computed in float32 and rounded once, as torch's kernels compute it (and
    its reference decomposition): rounding each of the formula's nine ops to 16 bits was
    1.2x eager's error against float64, and each rounding is two conversions in a GEMM's
    epilogue."""
    import torch

    if approximate != "tanh":
        return NotImplemented
    half = x.dtype in (torch.float16, torch.bfloat16)
    convert = torch.ops.prims.convert_element_type.default
    wide = convert(x, torch.float32) if half else x
    inner = math.sqrt(2.0 / math.pi) * (wide + 0.044715 * (wide * wide * wide))
    out = 0.5 * wide * (1.0 + torch.tanh(inner))
    return convert(out, x.dtype) if half else out


def _crop_negative_pads(x: torch.Tensor, pad: list[int], value: float = 0.0
                        ) -> torch.Tensor | Any:
    """A constant pad with negative entries as a slice of each cropped dim followed by the
    pad of the non-negative entries; without negative entries, left to torch-mlir."""
    import torch

    if all(p >= 0 for p in pad):
        return NotImplemented
    for i in range(len(pad) // 2):
        dim, low, high = x.dim() - 1 - i, pad[2 * i], pad[2 * i + 1]
        if low < 0 or high < 0:
            size = x.shape[dim]
            x = torch.ops.aten.slice.Tensor(x, dim, max(-low, 0), size + min(high, 0))
    kept = [max(p, 0) for p in pad]
    if any(kept):
        x = torch.ops.aten.constant_pad_nd.default(x, kept, value)
    return x


def _batch_norm_no_training(x: torch.Tensor, weight: Any, bias: Any, running_mean: Any,
                            running_var: Any, momentum: float, eps: float) -> Any:
    """An inference batch norm as torch's decomposition computes it (its helper's formula,
    in the computation dtype: f32 for 16-bit inputs), with no saved statistics to speak
    of (empty, as torch's on the CPU)."""
    import torch

    if running_mean is None or running_var is None or x.dim() < 2:
        return NotImplemented
    wide = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    shape = [-1] + [1] * (x.dim() - 2)

    def column(v: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.reshape.default(v.to(wide), shape)

    invstd = 1 / torch.sqrt(running_var.to(wide) + eps)
    out = (x.to(wide) - column(running_mean)) * torch.ops.aten.reshape.default(invstd, shape)
    if weight is not None:
        out = out * column(weight)
    if bias is not None:
        out = out + column(bias)
    empty = x.new_zeros((0,))
    return out.to(x.dtype), empty, empty


def _floor_divide_integers(a: Any, b: Any) -> Any:
    """`a // b` of signed integer tensors as torch computes it: the truncating quotient, one
    less where the remainder is not zero and its sign differs from the divisor's."""
    import torch

    aten = torch.ops.aten
    if isinstance(a, torch.Tensor) and a.dtype.is_floating_point:
        return _floor_divide_floats(a, b)
    b = _integer_operand(a, b)
    if not all(isinstance(t, torch.Tensor) and not t.dtype.is_floating_point and
               not t.dtype.is_complex and t.dtype not in (torch.bool, torch.uint8)
               for t in (a, b)):
        return NotImplemented
    q = aten.div.Tensor_mode(a, b, rounding_mode="trunc")
    r = aten.sub.Tensor(a, aten.mul.Tensor(q, b))
    fix = aten.logical_and(aten.ne.Scalar(r, 0),
                           aten.ne.Tensor(aten.lt.Scalar(r, 0), aten.lt.Scalar(b, 0)))
    return aten.sub.Tensor(q, aten._to_copy.default(fix, dtype=q.dtype))


def _floor_divide_floats(a: Any, b: Any) -> Any:
    """`a // b` of floats as torch (and Python) compute it, from the exact remainder: q =
    (a - fmod(a, b)) / b, one less where the remainder's sign differs from b's, then rounded
    to the nearest integer; a zero quotient takes the sign of a / b, and b = 0 gives a / b.
    torch-mlir's floor(a / b) gave -7 // inf = -0.0 (torch -1) and inf // 3 = inf (NaN)."""
    import torch

    aten = torch.ops.aten
    if not isinstance(b, torch.Tensor):
        b = aten.full.default([], b, dtype=a.dtype, device=a.device)
    if a.dtype in (torch.float16, torch.bfloat16):
        # In f32, rounded once at the end, as torch's kernels compute 16-bit floats.
        wide = aten._to_copy.default
        result = _floor_divide_floats(wide(a, dtype=torch.float32),
                                      wide(b, dtype=torch.float32))
        return wide(result, dtype=a.dtype)
    if b.dtype != a.dtype:
        b = aten._to_copy.default(b, dtype=a.dtype)
    mod = _fmod(a, b)
    div = aten.div.Tensor(aten.sub.Tensor(a, mod), b)
    off = aten.logical_and.default(aten.ne.Scalar(mod, 0.0),
                                   aten.ne.Tensor(aten.lt.Scalar(b, 0.0), aten.lt.Scalar(mod, 0.0)))
    div = aten.where.self(off, aten.sub.Scalar(div, 1.0), div)
    floor = aten.floor.default(div)
    floor = aten.where.self(aten.gt.Scalar(aten.sub.Tensor(div, floor), 0.5),
                            aten.add.Scalar(floor, 1.0), floor)
    quotient = aten.div.Tensor(a, b)
    signed_zero = _copysign(aten.zeros_like.default(a), quotient)
    result = aten.where.self(aten.eq.Scalar(div, 0.0), signed_zero, floor)
    return aten.where.self(aten.eq.Scalar(b, 0.0), quotient, result)


def _integer_operand(a: Any, b: Any) -> Any:
    """A Python int `b` beside an integer tensor `a` as a 0-d tensor of a's dtype (torch's
    promotion keeps a's dtype), where it fits that dtype; `b` itself otherwise. torch-mlir
    computes an integer tensor's division by a scalar in f64 (`a // 7` of int64 was
    inexact above 2^53), its fmod by a scalar not at all; with a tensor it divides in
    integers."""
    import torch

    if not isinstance(a, torch.Tensor) or a.dtype.is_floating_point or a.dtype.is_complex \
            or a.dtype == torch.bool or type(b) is not int:
        return b
    limits = torch.iinfo(a.dtype)
    if not limits.min <= b <= limits.max:
        return b
    return torch.ops.aten.full.default([], b, dtype=a.dtype, device=a.device)


def _neg(x: Any) -> Any:
    """-x of an integer tensor as 0 - x: torch-mlir negates integers in f32 (sitofp, negf,
    fptosi), wrong above 2^24 (-16777217 came back -16777216). Floats: torch-mlir's."""
    import torch

    if not isinstance(x, torch.Tensor) or x.dtype.is_floating_point or x.dtype.is_complex \
            or x.dtype == torch.bool:
        return NotImplemented
    aten = torch.ops.aten
    return aten.sub.Tensor(aten.full.default([], 0, dtype=x.dtype, device=x.device), x)


def _eq_self(a: Any, b: Any) -> Any:
    """`x == x` of a float tensor as `not (x != x)`: torch-mlir folds an equality of a value
    with itself to true, and NaN == NaN is false (`where(x == x, x, 0)`, the NaN-scrubbing
    idiom, kept the NaNs). Anything else: torch-mlir's."""
    import torch

    if a is not b or not isinstance(a, torch.Tensor) or not a.dtype.is_floating_point:
        return NotImplemented
    aten = torch.ops.aten
    return aten.logical_not.default(aten.ne.Tensor(a, b))


def _isclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> Any:
    """torch's isclose of float tensors: equal, or a finite |a - b| within atol + |rtol b|
    (torch-mlir's lowering called NaN close to NaN without `equal_nan`)."""
    import torch

    if not all(isinstance(t, torch.Tensor) and t.dtype.is_floating_point for t in (a, b)):
        return NotImplemented
    aten = torch.ops.aten
    close = aten.eq.Tensor(a, b)
    if equal_nan:
        close = aten.logical_or.default(close, aten.logical_and.default(
            aten.isnan.default(a), aten.isnan.default(b)))
    error = aten.abs.default(aten.sub.Tensor(a, b))
    allowed = aten.add.Scalar(aten.abs.default(aten.mul.Scalar(b, rtol)), atol)
    within = aten.logical_and.default(_isfinite(error), aten.le.Tensor(error, allowed))
    return aten.logical_or.default(close, within)


def _hypot(x: Any, y: Any) -> Any:
    """`aten.hypot` (torch-mlir cannot lower it) as C's hypot computes it: the larger
    magnitude times sqrt(1 + (smaller / larger)^2), so that 1e30 in f32 does not overflow
    where sqrt(x^2 + y^2) would; 0 where both are 0; inf where either is infinite, even
    beside a NaN; NaN otherwise where either is."""
    import torch

    aten = torch.ops.aten
    a, b = aten.abs.default(x), aten.abs.default(y)
    big, small = aten.maximum.default(a, b), aten.minimum.default(a, b)
    ratio = aten.where.self(aten.eq.Scalar(big, 0), aten.zeros_like.default(big),
                            aten.div.Tensor(small, big))
    value = aten.mul.Tensor(big, aten.sqrt.default(
        aten.add.Scalar(aten.mul.Tensor(ratio, ratio), 1)))
    infinite = aten.logical_or.default(aten.isinf.default(a), aten.isinf.default(b))
    return aten.where.self(infinite, aten.full_like.default(value, float("inf")), value)


def _median(x: Any) -> Any:
    """`aten.median.default` (torch-mlir cannot lower it): `_median_dim`'s value over all
    elements (the lower of the two middle values, NaN where any is NaN)."""
    import torch

    median = _median_dim(torch.ops.aten.reshape.default(x, [-1]), 0)
    return median if median is NotImplemented else median[0]


def _median_dim(x: Any, dim: int, keepdim: bool = False) -> Any:
    """`aten.median.dim` (torch-mlir cannot lower it): along `dim`, the lower of the two
    middle values and its index, as torch's CPU kernel picks them: among equal values the
    one a stable sort puts at the middle, and where the slice holds NaN, NaN and the index
    of its first NaN (a stable sort puts NaN last, in order)."""
    import torch

    aten = torch.ops.aten
    if x.dim() == 0:
        return NotImplemented
    dim = dim % x.dim()
    n = x.shape[dim]
    if n == 0:
        return NotImplemented
    ordered, order = aten.sort.default(x, dim, False)
    nans = aten.sum.dim_IntList(aten.isnan.default(x), [dim], True)
    middle = aten.full_like.default(nans, (n - 1) // 2)
    # The first NaN's place in the sorted slice: n minus the number of NaN.
    at = aten.where.self(aten.gt.Scalar(nans, 0), aten.rsub.Scalar(nans, n), middle)
    values = aten.gather.default(ordered, dim, at)
    indices = aten.gather.default(order, dim, at)
    if not keepdim:
        values, indices = aten.squeeze.dim(values, dim), aten.squeeze.dim(indices, dim)
    return values, indices


def _sort_stable(x: Any, *, stable: bool | None = None, dim: int = -1,
                 descending: bool = False) -> Any:
    """`aten.sort.stable` (`sort(stable=True)`, `argsort(stable=True)`), which torch-mlir
    cannot lower, as `aten.sort.default`: fusec's sort (passes/fusion/lower_tm_tensor.py's
    merge sort) is stable whatever `stable` says."""
    import torch

    return torch.ops.aten.sort.default(x, dim, descending)


def _widened_indices(indices: list[Any]) -> list[Any] | None:
    """`indices` with the int32 (or narrower) ones widened to int64, or None where none is
    narrow (torch-mlir's index lowerings compare them with int64 bounds: "arith.cmpi
    requires all operands to have the same type")."""
    import torch

    def narrow(i: Any) -> bool:
        return i is not None and i.dtype in (torch.int32, torch.int16, torch.int8)

    if not any(narrow(i) for i in indices):
        return None
    return [torch.ops.aten._to_copy.default(i, dtype=torch.int64) if narrow(i) else i
            for i in indices]


def _index_put(x: Any, indices: list[Any], values: Any, accumulate: bool = False) -> Any:
    """`x[indices] = values` (`index_put`) as torch means it:
    - one boolean mask over x's leading dims and one value (`y[mask] = 0.0`, masked_fill's
      meaning; with accumulate, `y[mask] += v`): a select (torch-mlir went through nonzero
      and refused the data-dependent shape);
    - narrow integer indices widened to int64 (negative ones are wrapped where the scatter
      reads them, `lower_tm_tensor`).
    Anything else: torch-mlir's."""
    import torch

    aten = torch.ops.aten
    given = [i for i in indices if i is not None]
    if not given:
        return NotImplemented
    if any(i.dtype == torch.bool for i in given):
        mask = indices[0]
        if len(given) != 1 or mask is None or mask.dtype != torch.bool or \
                tuple(mask.shape) != tuple(x.shape[:mask.dim()]) or values.numel() != 1:
            return NotImplemented
        mask = aten.view.default(mask, list(mask.shape) + [1] * (x.dim() - mask.dim()))
        value = aten._to_copy.default(aten.view.default(values, []), dtype=x.dtype)
        new = aten.add.Tensor(x, value) if accumulate else value
        return aten.where.self(mask, new, x)
    widened = _widened_indices(indices)
    if widened is None:
        return NotImplemented
    # (Called again with the int64 indices, this decomposition leaves them to torch-mlir.)
    return aten.index_put.default(x, widened, values, accumulate)


def _index_int64(x: Any, indices: list[Any]) -> Any:
    """`x[i]` with an int32 (or narrower) index tensor: the index widened to int64 first
    (`_widened_indices`)."""
    import torch

    widened = _widened_indices(indices)
    if widened is None:
        return NotImplemented
    return torch.ops.aten.index.Tensor(x, widened)


def _clamp_promoted(x: Any, min: Any = None, max: Any = None) -> Any:  # noqa: A002
    """clamp of an integer tensor by float bounds: in the type torch promotes to (the default
    float), as torch returns it (torch-mlir compared the integers with float compares)."""
    import torch

    if not isinstance(x, torch.Tensor) or x.dtype.is_floating_point or \
            not any(isinstance(b, float) for b in (min, max)):
        return NotImplemented
    wide = torch.ops.aten._to_copy.default(x, dtype=torch.get_default_dtype())
    return torch.ops.aten.clamp.default(wide, min, max)


def _elu(x: Any, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Any:
    """ELU (and SELU, CELU through it) with expm1 below zero, as torch's kernel: torch-mlir's
    exp(x) - 1 lost the small negative inputs (elu(-3e-7) was -2.98e-7)."""
    import torch

    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        return NotImplemented
    aten = torch.ops.aten
    negative = aten.mul.Scalar(aten.expm1.default(aten.mul.Scalar(x, input_scale)),
                               alpha * scale)
    return aten.where.self(aten.gt.Scalar(x, 0), aten.mul.Scalar(x, scale), negative)


def _cat_nonempty(tensors: list[Any], dim: int = 0) -> Any:
    """cat without the inputs that are empty along `dim` (`torch.block_diag` pads with [n, 0]
    blocks, which torch-mlir refused naming `constant.int`). Anything else: torch-mlir's."""
    import torch

    def empty(t: Any) -> bool:
        # A 1-D empty tensor is skipped whatever the rank of the others (torch's legacy).
        return t.numel() == 0 and (t.dim() == 1 or -t.dim() <= dim < t.dim() and
                                   t.shape[dim] == 0)

    kept = [t for t in tensors if not empty(t)]
    if len(kept) == len(tensors) or not kept or any(t.dim() != kept[0].dim() for t in kept):
        return NotImplemented
    if len(kept) == 1:
        return torch.ops.aten.clone.default(kept[0])
    return torch.ops.aten.cat.default(kept, dim)


def _xlogy_scalar(x: Any, y: float) -> Any:
    """`xlogy(x, y)` with y a Python number: x * log(y), 0 where x is 0 unless y is NaN
    (torch-mlir refused it naming `prims.scalar_tensor`; probe 10)."""
    import torch

    aten = torch.ops.aten
    if not isinstance(x, torch.Tensor):
        return NotImplemented
    dtype = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
    x = _as_dtype(x, dtype)
    if math.isnan(y):
        return aten.full_like.default(x, math.nan)
    product = aten.mul.Tensor(x, math.log(y) if y > 0 else (-math.inf if y == 0 else math.nan))
    return aten.where.self(aten.eq.Scalar(x, 0), aten.zeros_like.default(x), product)


def _fmax_fmin(extreme: Any) -> Any:
    """fmax / fmin of floats: the NaN-propagating maximum / minimum, and where one side is
    NaN the other (torch-mlir's lowering of a broadcast or 0-d operand failed MLIR's verifier
    on a tensor.cast; probe 10). Integers: the plain maximum / minimum."""
    import torch

    aten = torch.ops.aten

    def decomposition(a: Any, b: Any) -> Any:
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            return NotImplemented
        dtype = torch.result_type(a, b)
        a, b = _as_dtype(a, dtype), _as_dtype(b, dtype)
        both = extreme(a, b)
        if not dtype.is_floating_point:
            return both
        return aten.where.self(aten.isnan.default(a), b,
                               aten.where.self(aten.isnan.default(b), a, both))

    return decomposition


def _depthwise_conv_transpose(x: Any, w: Any, bias: Any, stride: Any, padding: Any,
                              dilation: Any, transposed: bool, output_padding: Any,
                              groups: int) -> Any:
    """A transposed convolution with one input and one output channel per group (a
    depthwise ConvTranspose; torch-mlir's lowering fails on it with an invalid
    tensor.collapse_shape, probe 9) as the regular convolution it is: zeros inserted between
    the input's elements (stride - 1 per gap), padded by dilation * (k - 1) - padding on each
    side (output_padding more after: a negative pad crops), the kernel flipped. Anything
    else: torch-mlir's."""
    import torch

    aten = torch.ops.aten
    if not transposed or groups == 1 or w.shape[0] != groups or w.shape[1] != 1 or \
            x.dim() < 3 or x.shape[1] != groups:
        return NotImplemented
    spatial = x.dim() - 2
    y = x
    for d in range(spatial):
        s, dim = stride[d], 2 + d
        if s == 1:
            continue
        length = y.shape[dim]
        grown = aten.unsqueeze.default(y, dim + 1)
        after = grown.dim() - 2 - dim
        grown = aten.constant_pad_nd.default(grown, [0, 0] * after + [0, s - 1], 0.0)
        shape = list(y.shape)
        shape[dim] = length * s
        y = aten.view.default(aten.clone.default(grown), shape)
        y = aten.slice.Tensor(y, dim, 0, (length - 1) * s + 1)
    pads: list[int] = []
    for d in reversed(range(spatial)):
        low = dilation[d] * (w.shape[2 + d] - 1) - padding[d]
        pads += [low, low + output_padding[d]]
    y = aten.constant_pad_nd.default(y, pads, 0.0)
    flipped = aten.flip.default(w, list(range(2, w.dim())))
    return aten.convolution.default(y, flipped, bias, [1] * spatial, [0] * spatial,
                                    list(dilation), False, [0] * spatial, groups)


def _diagonal_scatter(x: Any, src: Any, offset: int = 0, dim1: int = 0,
                      dim2: int = 1) -> Any:
    """`x` with `src` written on its diagonal (`y.diagonal().fill_(0)`, torch-mlir refused
    it naming `vtensor.literal`): a select between x and src placed along the diagonal's
    rows (offset >= 0) or columns, the diagonal found by comparing two aranges."""
    import torch

    aten = torch.ops.aten
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        return NotImplemented
    d1, d2 = dim1 % x.dim(), dim2 % x.dim()
    if d1 == d2:
        return NotImplemented
    moved = aten.movedim.intlist(x, [d1, d2], [-2, -1])
    n, m = moved.shape[-2], moved.shape[-1]
    length = src.shape[-1]
    rows = aten.view.default(aten.arange.default(n, dtype=torch.int64), [n, 1])
    cols = aten.view.default(aten.arange.default(m, dtype=torch.int64), [1, m])
    on_diagonal = aten.eq.Scalar(aten.sub.Tensor(cols, rows), offset)
    src = aten._to_copy.default(src, dtype=x.dtype)
    if offset >= 0:  # diagonal element k sits in row k
        padded = aten.constant_pad_nd.default(src, [0, n - length])
        placed = aten.unsqueeze.default(padded, -1)
    else:  # in column k
        padded = aten.constant_pad_nd.default(src, [0, m - length])
        placed = aten.unsqueeze.default(padded, -2)
    result = aten.where.self(on_diagonal, placed, moved)
    return aten.movedim.intlist(result, [-2, -1], [d1, d2])


def _as_strided_diagonal(x: Any, src: Any, size: list[int], stride: list[int],
                         storage_offset: int | None = None) -> Any:
    """as_strided_scatter that writes the main diagonal of a contiguous 2-D tensor (what
    `fill_diagonal_` exports to): `_diagonal_scatter`. Other strides: torch-mlir's."""
    import torch

    if not isinstance(x, torch.Tensor) or x.dim() != 2 or not x.is_contiguous():
        return NotImplemented
    n, m = x.shape
    if list(size) != [min(n, m)] or list(stride) != [m + 1] or storage_offset not in (0, None):
        return NotImplemented
    return _diagonal_scatter(x, src)


def _compare_float_scalar(op: Any) -> Any:
    """A comparison of a float tensor with a Python int, with the int as a float:
    torch-mlir's folder compared a constant float tensor with an int scalar as unequal
    (`zeros_like(x) == 0` folded to false; `xlogy` of a constant zero gave NaN); of an
    integer tensor with a Python float, in the default float as torch promotes."""
    import torch

    def decomposition(a: Any, b: Any) -> Any:
        if not isinstance(a, torch.Tensor):
            return NotImplemented
        if a.dtype.is_floating_point and type(b) is int:
            return op(a, float(b))
        if not a.dtype.is_floating_point and not a.dtype.is_complex and \
                a.dtype != torch.bool and type(b) is float:
            # torch promotes: the integers as the default float (torch-mlir's import of an
            # integer tensor compared with a float crashed, SIGSEGV).
            return op(torch.ops.aten._to_copy.default(a, dtype=torch.get_default_dtype()), b)
        return NotImplemented

    return decomposition


def _adaptive_max_pool2d(x: Any, output_size: list[int]) -> Any:
    """Adaptive max pooling to a size that does not divide the input's (torch-mlir's lowering
    failed on a `tensor.cast` of the uneven windows): output cell (i, j) is the max of rows
    [floor(i H / oh), ceil((i + 1) H / oh)) and the columns likewise, its index the first
    maximum's position in the H x W plane (torch's). Sizes that divide: torch-mlir's."""
    import torch

    aten = torch.ops.aten
    height, width = x.shape[-2], x.shape[-1]
    oh, ow = (output_size[0] or height), (output_size[-1] or width)
    if height % oh == 0 and width % ow == 0:
        return NotImplemented
    lead = list(x.shape[:-2])
    values, indices = [], []
    for i in range(oh):
        h0, h1 = (i * height) // oh, -((-(i + 1) * height) // oh)
        for j in range(ow):
            w0, w1 = (j * width) // ow, -((-(j + 1) * width) // ow)
            window = aten.slice.Tensor(aten.slice.Tensor(x, -2, h0, h1), -1, w0, w1)
            flat = aten.view.default(aten.clone.default(window), lead + [(h1 - h0) * (w1 - w0)])
            value, where = aten.max.dim(flat, -1)
            row = aten.add.Scalar(aten.div.Tensor_mode(where, w1 - w0, rounding_mode="trunc"), h0)
            col = aten.add.Scalar(aten.remainder.Scalar(where, w1 - w0), w0)
            values.append(value)
            indices.append(aten.add.Tensor(aten.mul.Scalar(row, width), col))
    shape = lead + [oh, ow]
    return (aten.view.default(aten.stack.default(values, -1), shape),
            aten.view.default(aten.stack.default(indices, -1), shape))


def _without_mkldnn(decomposition: Any) -> Any:
    """torch's own decomposition of an RNN op (LSTM), run with oneDNN turned off: on the CPU
    it otherwise emits `aten.mkldnn_rnn_layer`, which torch-mlir cannot lower (nn.LSTM was
    refused); without, it is the cells' matmuls and gates, step by step."""
    import torch

    def decompose(*args: Any, **kwargs: Any) -> Any:
        with torch.backends.mkldnn.flags(enabled=False):
            return decomposition(*args, **kwargs)

    return decompose


def _div_floor_mode(a: Any, b: Any, *, rounding_mode: str | None = None) -> Any:
    """`div(a, b, rounding_mode="floor")` of integer tensors: `_floor_divide_integers`;
    "trunc" by a Python int: by a 0-d tensor (`_integer_operand`); floats: torch-mlir's."""
    import torch

    if rounding_mode == "trunc":
        operand = _integer_operand(a, b)
        if operand is b:
            return NotImplemented
        return torch.ops.aten.div.Tensor_mode(a, operand, rounding_mode="trunc")
    if rounding_mode != "floor":
        return NotImplemented
    return _floor_divide_integers(a, b)


def _int8_scalar_operand(op: Any) -> Any:
    """`op(a, b)` of an int8 tensor and a Python int with b as a 0-d int8 tensor: torch-mlir's
    import of such a scalar crashes the process (SIGSEGV; `x * 3`, `x - 5`, `x % 7` of
    int8). Anything else: torch-mlir's."""
    import torch

    def decomposition(a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
        if not (isinstance(a, torch.Tensor) and a.dtype == torch.int8 and type(b) is int):
            return NotImplemented
        operand = _integer_operand(a, b)
        if operand is b:
            return NotImplemented
        return op(a, operand, *args, **kwargs)

    return decomposition


def _roll_as_slices(x: torch.Tensor, shifts: list[int], dims: list[int] = ()
                    ) -> torch.Tensor | Any:
    """`torch.roll` as slices and a concat per rolled dim (static sizes: element i of the
    result is element (i - shift) mod size); a roll without dims rolls the flattened
    tensor."""
    import torch

    aten = torch.ops.aten
    shifts, dims = list(shifts), list(dims)
    if not dims:
        if len(shifts) != 1:
            return NotImplemented
        flat = _roll_as_slices(aten.reshape.default(x, [-1]), shifts, [0])
        return aten.reshape.default(flat, list(x.shape))
    if len(shifts) != len(dims):
        return NotImplemented
    for shift, dim in zip(shifts, dims):
        dim = dim % x.dim()
        size = x.shape[dim]
        shift = shift % size if size else 0
        if shift:
            x = aten.cat.default([aten.slice.Tensor(x, dim, size - shift, size),
                                  aten.slice.Tensor(x, dim, 0, size - shift)], dim)
    return aten.clone.default(x)


def _pow_scalar(x: torch.Tensor, exponent: float) -> torch.Tensor | Any:
    """x ** 2 and x ** 3 as multiplications, x ** -1, -2, -3 as 1 / x^n, x ** +-0.5 as
    torch's sqrt and 1 / sqrt; an integer tensor to a non-negative integer power by squaring
    (wrapping as torch's; torch-mlir refused it), to a float power in the float dtype torch
    gives the result (torch-mlir's lowering made an invalid fptosi or fpowi of it); other
    exponents are left to torch-mlir."""
    import torch

    if type(exponent) is float and not x.dtype.is_floating_point and not x.dtype.is_complex:
        as_float = torch.ops.prims.convert_element_type.default(
            x, torch.result_type(x, exponent))
        result = _pow_scalar(as_float, exponent)
        return torch.ops.aten.pow.Tensor_Scalar(as_float, exponent) \
            if result is NotImplemented else result
    if not x.dtype.is_floating_point:
        if x.dtype.is_complex or x.dtype == torch.bool or type(exponent) is not int or \
                not 0 <= exponent < 2 ** 16:
            return NotImplemented
        result, base, e = None, x, exponent
        while e:
            if e & 1:
                result = base if result is None else result * base
            e >>= 1
            if e:
                base = base * base
        return torch.ones_like(x) if result is None else result
    if exponent == 2:
        return x * x
    if exponent == 3:
        return x * x * x
    if exponent in (0.5, -0.5):
        # torch's pow takes these as sqrt and 1 / sqrt: (-inf) ** 0.5 is NaN and (-0.0) **
        # 0.5 is -0.0 there, where libm's pow gives +inf and +0.0; and a sqrt is one
        # instruction, not a call per element.
        root = torch.ops.aten.sqrt.default(x)
        return root if exponent > 0 else torch.ops.aten.div.Tensor(torch.ones_like(x), root)
    if exponent in (-1, -2, -3):
        # 1 / x^n: upstream's fpowi expansion gave 0 ** -1 as -inf (torch: +inf).
        return torch.ops.aten.div.Tensor(torch.ones_like(x), _pow_scalar(x, -exponent)
                                         if exponent != -1 else x)
    return NotImplemented


# The most winners `_small_topk` finds by rounds (and the most indices per row
# `_small_scatter` writes by selects): up to it, elementwise ops and row reductions the
# planner fuses; past it, torch-mlir's serial tm_tensor ops.
SMALL_SELECTION = 8


def _small_topk(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True,
                sorted: bool = True) -> Any:  # noqa: A002 - torch's argument name
    """topk of a few (k <= SMALL_SELECTION, largest) as k rounds of a row max and the first
    position holding it among those not taken yet, instead of torch-mlir's tm_tensor.topk (an
    insertion per element, serial: a one-thread kernel on the GPU). The order is torch's:
    descending, ties to the lower index; NaN is the largest (a max propagates it)."""
    import torch

    if not largest or k > SMALL_SELECTION or x.dim() == 0 or not x.dtype.is_floating_point:
        return NotImplemented
    dim = dim % x.dim()
    n = x.shape[dim]
    shape = [1] * x.dim()
    shape[dim] = n
    pos = torch.arange(n, device=x.device).reshape(shape)
    taken = torch.zeros_like(x, dtype=torch.bool)
    values, indices = [], []
    for _ in range(k):
        m = torch.amax(torch.where(taken, float("-inf"), x), dim=dim, keepdim=True)
        hit = ~taken & ((x == m) | (torch.isnan(x) & torch.isnan(m)))
        i = torch.amin(torch.where(hit, pos, n), dim=dim, keepdim=True)
        values.append(m)
        indices.append(i)
        taken = taken | (pos == i)
    return torch.cat(values, dim), torch.cat(indices, dim)


def _scatter_with_reduce(x: Any, dim: int, index: Any, src: Any, reduce: str) -> Any:
    """scatter's older `reduce="add" / "multiply"` as scatter_reduce's "sum" / "prod" with
    x included (torch-mlir refused it naming an internal `constant.int`; a probe's find);
    a number `src` is a tensor of it in index's shape."""
    import torch

    if reduce not in ("add", "multiply"):
        return NotImplemented
    if not isinstance(src, torch.Tensor):
        src = torch.full(index.shape, src, dtype=x.dtype, device=x.device)
    return torch.scatter_reduce(x, dim, index, src.to(x.dtype),
                                "sum" if reduce == "add" else "prod", include_self=True)


def _scatter(op: Any) -> Any:
    """scatter: `_small_scatter` where it applies; else torch-mlir's, a negative index made
    an error first (`_with_checked_index`: the lowering counted it from the end, where torch
    raises; a probe's find)."""
    general = _with_checked_index(op, None)

    def run(x: Any, dim: int, index: Any, src: Any) -> Any:
        small = _small_scatter(x, dim, index, src)
        return small if small is not NotImplemented else general(x, dim, index, src)

    return run


def _small_scatter(x: torch.Tensor, dim: int, index: torch.Tensor, src: Any) -> Any:
    """scatter (no reduce) of a few indices per row (index's `dim` at most SMALL_SELECTION,
    its other dims x's) as selects in index order: out = where(position == index[..., j],
    src[..., j], out) for each j, the later write winning as in the serial loop. A router's
    weights written at its topk positions; torch-mlir's tm_tensor.scatter is a serial loop.
    Other shapes are torch-mlir's. Each index is compared through a gather of the positions
    (itself, where it is in range), so that an index out of range (or negative) is reported
    by the gather's bounds check as torch's IndexError, not silently written nowhere (a
    probe's find)."""
    import torch

    dim = dim % x.dim()
    if index.dim() != x.dim() or index.shape[dim] > SMALL_SELECTION or \
            any(index.shape[d] != x.shape[d] for d in range(x.dim()) if d != dim):
        return NotImplemented
    shape = [1] * x.dim()
    shape[dim] = x.shape[dim]
    pos = torch.arange(x.shape[dim], device=x.device).reshape(shape)
    if isinstance(src, torch.Tensor):
        src = src[tuple(slice(0, s) for s in index.shape)].to(x.dtype)
    # The positions gathered at the indices: the indices themselves, bounds-checked along
    # the scatter's own dim (so that the error names it).
    every = pos.expand(*index.shape[:dim], x.shape[dim], *index.shape[dim + 1:])
    checked = torch.gather(every, dim, index)
    out = x
    for j in range(index.shape[dim]):
        value = src.narrow(dim, j, 1) if isinstance(src, torch.Tensor) else src
        out = torch.where(pos == checked.narrow(dim, j, 1), value, out)
    return out
