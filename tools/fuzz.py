"""Differential fuzzing of fusec: random graphs, fusion on vs off vs a float64 reference.

    python -m fusec.tools.fuzz --examples 500 [--seed N] [--max-ops 8] [--exclude softmax,...]
                               [--focus conv2d,maxpool,avgpool]

A *program* is a small dataflow graph over float32 tensors with random static shapes: graph
inputs, then ops (elementwise unary and binary with broadcasting, reductions over an axis with
or without keepdim, softmax, layernorm, matmul, linear, transpose, reshape; convolutions and
pools over NCHW values, strided, padded and grouped; what models build around their blocks:
comparisons and `where`, a causal `masked_fill` from aranges, gathers at arange indices,
concats), then one or two outputs. Hypothesis draws programs (`programs()`), so a failing one
is shrunk to a minimal one. `--focus KINDS` starts every program with one of KINDS and draws
them as often as all the others together (CNN: conv2d,maxpool,avgpool; around blocks:
where,cat,causal_fill,gather_rev).

Each program becomes a `torch.nn.Module` (`ProgramModule`, an interpreter over the op list,
which torch.export traces to a flat graph) and goes through fusec's real frontend
(`import_torch`) once; the imported MLIR is then compiled twice, with fusion on and off. Both
artifacts run on fresh random inputs (|x| in [0.5, 1], random signs: never zero) and are
compared with the module run by torch in float64, by relative norm error. The tolerance is
1e-4, or ten times torch's own float32 error on that program when that is larger (a graph whose
float32 evaluation is ill-conditioned is not a compiler bug). The fused program must also have
no more kernels than the unfused one.

Value ranges are tracked while generating (a bound on |value| per tensor), so that `exp`, `mul`
and sums never overflow float32 or make float32 and float64 diverge; division is
`a / (b * b + 0.5)`, so denominators stay away from zero.

The CLI keeps going after a failure: each hypothesis round ignores failures whose signature
(where it failed and the first line of the error) was already found, so that the next round
looks for a different bug; every found failure is printed as a shrunk, runnable reproducer.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TOLERANCE = 1e-4
# Beyond this bound on |value|, ops that grow values are not generated.
MAX_BOUND = 1e3
MAX_EXP_INPUT = 3.0
# Small sizes, odd ones, and a few large enough that the CPU code generator tiles the kernels
# (it splits work above 16 KB), so partial tiles are exercised too.
DIM_SIZES = (1, 2, 3, 4, 5, 7, 8, 16, 17, 33, 65, 129, 257)
MAX_ELEMENTS = 1 << 17  # per tensor: keeps the float64 reference and the runs fast

# --------------------------------------------------------------------------------------------
# Programs


@dataclass(frozen=True)
class Program:
    """A graph: input shapes, ops `(kind, operand indices, params)`, output indices.

    Values are numbered inputs first, then one value per op, in order.
    """

    inputs: tuple[tuple[int, ...], ...]
    ops: tuple[tuple[str, tuple[int, ...], tuple[Any, ...]], ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class OpKind:
    """How to run an op on torch tensors, how to print it, and how it bounds its result."""

    apply: Callable[..., Any]
    template: str  # Python source, operands as {0}, {1}, params as {p0}, {p1}
    bound: Callable[..., float]  # (operand bounds, operand shapes, params) -> bound


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether `a` and `b` broadcast to one of them (no shape bigger than both)."""
    try:
        result = tuple(_torch().broadcast_shapes(a, b))
    except RuntimeError:
        return False
    return result in (a, b)


def _torch() -> Any:
    import torch

    return torch


def _layer_norm(x: Any) -> Any:
    return _torch().nn.functional.layer_norm(x, (x.shape[-1],))


def _gelu(x: Any) -> Any:
    return _torch().nn.functional.gelu(x)


OPS: dict[str, OpKind] = {
    # unary elementwise
    "neg": OpKind(lambda a: -a, "-{0}", lambda b, s, p: b[0]),
    "abs": OpKind(lambda a: a.abs(), "{0}.abs()", lambda b, s, p: b[0]),
    "exp": OpKind(lambda a: _torch().exp(a), "torch.exp({0})", lambda b, s, p: math.exp(b[0])),
    "tanh": OpKind(lambda a: _torch().tanh(a), "torch.tanh({0})", lambda b, s, p: 1.0),
    "sigmoid": OpKind(lambda a: _torch().sigmoid(a), "torch.sigmoid({0})", lambda b, s, p: 1.0),
    "relu": OpKind(lambda a: _torch().relu(a), "torch.relu({0})", lambda b, s, p: b[0]),
    "gelu": OpKind(_gelu, "F.gelu({0})", lambda b, s, p: b[0]),
    "affine": OpKind(lambda a, c, d: a * c + d, "{0} * {p0} + {p1}",
                     lambda b, s, p: b[0] * abs(p[0]) + abs(p[1])),
    # binary elementwise, with broadcasting
    "add": OpKind(lambda a, b: a + b, "{0} + {1}", lambda b, s, p: b[0] + b[1]),
    "sub": OpKind(lambda a, b: a - b, "{0} - {1}", lambda b, s, p: b[0] + b[1]),
    "mul": OpKind(lambda a, b: a * b, "{0} * {1}", lambda b, s, p: b[0] * b[1]),
    "div": OpKind(lambda a, b: a / (b * b + 0.5), "{0} / ({1} * {1} + 0.5)",
                  lambda b, s, p: b[0] / 0.5),
    "maximum": OpKind(lambda a, b: _torch().maximum(a, b), "torch.maximum({0}, {1})",
                      lambda b, s, p: max(b[0], b[1])),
    # reductions over one axis
    "sum": OpKind(lambda a, axis, keep: a.sum(axis, keepdim=keep),
                  "{0}.sum({p0}, keepdim={p1})", lambda b, s, p: b[0] * s[0][p[0]]),
    "mean": OpKind(lambda a, axis, keep: a.mean(axis, keepdim=keep),
                   "{0}.mean({p0}, keepdim={p1})", lambda b, s, p: b[0]),
    "amax": OpKind(lambda a, axis, keep: a.amax(axis, keepdim=keep),
                   "{0}.amax({p0}, keepdim={p1})", lambda b, s, p: b[0]),
    "amin": OpKind(lambda a, axis, keep: a.amin(axis, keepdim=keep),
                   "{0}.amin({p0}, keepdim={p1})", lambda b, s, p: b[0]),
    # composite reductions
    "softmax": OpKind(lambda a, axis: _torch().softmax(a, axis), "torch.softmax({0}, {p0})",
                      lambda b, s, p: 1.0),
    # normalised values are bounded by sqrt(n) (all of the deviation in one element).
    "layernorm": OpKind(_layer_norm, "F.layer_norm({0}, ({0}.shape[-1],))",
                        lambda b, s, p: math.sqrt(s[0][-1]) + 1.0),
    # contractions
    "matmul": OpKind(lambda a, b: a @ b, "{0} @ {1}",
                     lambda b, s, p: b[0] * b[1] * s[0][-1]),
    "linear": OpKind(lambda a, w, c: a @ w + c, "{0} @ {1} + {2}",
                     lambda b, s, p: b[0] * b[1] * s[0][-1] + b[2]),
    # data movement
    "transpose": OpKind(lambda a, d0, d1: a.transpose(d0, d1), "{0}.transpose({p0}, {p1})",
                        lambda b, s, p: b[0]),
    "reshape": OpKind(lambda a, shape: a.reshape(shape), "{0}.reshape({p0})",
                      lambda b, s, p: b[0]),
    # convolutions and pooling (NCHW): strided, padded, windowed and grouped reads, the
    # accesses tile-and-fuse must not cut short (a stride-2 downsample of a residual sum).
    "conv2d": OpKind(lambda a, w, stride, pad, groups: _torch().nn.functional.conv2d(
                         a, w, None, stride, pad, 1, groups),
                     "F.conv2d({0}, {1}, None, {p0}, {p1}, 1, {p2})",
                     lambda b, s, p: b[0] * b[1] * s[1][1] * s[1][2] * s[1][3]),
    "maxpool": OpKind(lambda a, k, stride, pad: _torch().nn.functional.max_pool2d(
                          a, k, stride, pad),
                      "F.max_pool2d({0}, {p0}, {p1}, {p2})", lambda b, s, p: b[0]),
    "avgpool": OpKind(lambda a, k, stride, pad: _torch().nn.functional.avg_pool2d(
                          a, k, stride, pad),
                      "F.avg_pool2d({0}, {p0}, {p1}, {p2})", lambda b, s, p: b[0]),
    # what models build around their blocks (HF's masks, positions, rotate_half): boolean
    # masks from comparisons, where, integer index arithmetic on aranges, gathers, concats.
    "where": OpKind(lambda a, b: _torch().where(a > b, a, b * 0.5),
                    "torch.where({0} > {1}, {0}, {1} * 0.5)", lambda b, s, p: max(b[0], b[1])),
    "cat": OpKind(lambda a, b, dim: _torch().cat((a, b), dim), "torch.cat(({0}, {1}), {p0})",
                  lambda b, s, p: max(b[0], b[1])),
    "causal_fill": OpKind(lambda a: a.masked_fill(
                              _torch().arange(a.shape[-1], device=a.device)
                              > _torch().arange(a.shape[-2], device=a.device)[:, None], -2.0),
                          "{0}.masked_fill(torch.arange({0}.shape[-1]) > "
                          "torch.arange({0}.shape[-2])[:, None], -2.0)",
                          lambda b, s, p: max(b[0], 2.0)),
    "gather_rev": OpKind(lambda a: _torch().gather(
                             a, -1, (a.shape[-1] - 1 - _torch().arange(
                                 a.shape[-1], device=a.device)).expand(a.shape)),
                         "torch.gather({0}, -1, ({0}.shape[-1] - 1 - "
                         "torch.arange({0}.shape[-1])).expand({0}.shape))",
                         lambda b, s, p: b[0]),
}
CNN = ("conv2d", "maxpool", "avgpool")
AROUND_BLOCKS = ("where", "cat", "causal_fill", "gather_rev")

UNARY = ("neg", "abs", "exp", "tanh", "sigmoid", "relu", "gelu", "affine")
BINARY = ("add", "sub", "mul", "div", "maximum")
REDUCTIONS = ("sum", "mean", "amax", "amin")


def value_shapes(program: Program) -> list[tuple[int, ...]]:
    """The shape of every value of `program` (inputs, then op results)."""
    torch = _torch()
    values = [torch.empty(shape, device="meta") for shape in program.inputs]
    for kind, operands, params in program.ops:
        values.append(OPS[kind].apply(*[values[i] for i in operands], *params))
    return [tuple(v.shape) for v in values]


def module(program: Program) -> Any:
    """A `torch.nn.Module` whose forward runs `program` on its inputs."""
    torch = _torch()

    class Interpreter(torch.nn.Module):
        def forward(self, *inputs: Any) -> Any:
            values = list(inputs)
            for kind, operands, params in program.ops:
                values.append(OPS[kind].apply(*[values[i] for i in operands], *params))
            outputs = tuple(values[i] for i in program.outputs)
            return outputs[0] if len(outputs) == 1 else outputs

    return Interpreter().eval()


def to_python(program: Program) -> str:
    """A standalone nn.Module source for `program` (what a bug report shows)."""
    n = len(program.inputs)
    names = [f"x{i}" for i in range(n)] + [f"v{i}" for i in range(n, n + len(program.ops))]
    lines = ["class Model(torch.nn.Module):",
             f"    def forward(self, {', '.join(names[:n])}):"]
    for index, (kind, operands, params) in enumerate(program.ops):
        text = OPS[kind].template.format(*[names[i] for i in operands],
                                         **{f"p{j}": repr(p) for j, p in enumerate(params)})
        lines.append(f"        {names[n + index]} = {text}")
    lines.append(f"        return {', '.join(names[i] for i in program.outputs)}")
    shapes = ", ".join(f"torch.randn{tuple(s)!r}" for s in program.inputs)
    lines.append(f"# inputs: {shapes}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Generation (hypothesis)


def programs(max_ops: int = 8, exclude: Sequence[str] = (),
             focus: Sequence[str] = ()) -> Any:
    """A hypothesis strategy of Programs with 1..max_ops ops, none of the kinds in `exclude`.
    With `focus` (op kinds), every program starts with one of them on an NCHW input (where
    a focus kind is a convolution or a pool) and draws them as often as all others together
    afterwards: a campaign on one family that still meets the others."""
    from hypothesis import strategies as st

    kinds = [k for k in OPS if k not in set(exclude)]
    focused = [k for k in focus if k in kinds]

    @st.composite
    def strategy(draw: Any) -> Program:
        builder = _Builder(draw)
        if focused and any(k in CNN for k in focused):
            builder.new_input(builder.draw_image_shape())
        else:
            builder.new_input(builder.draw_shape())
        for step in range(draw(st.integers(1, max_ops))):
            if focused and (step == 0 or draw(st.booleans())):
                builder.add_op(draw(st.sampled_from(focused)))
            else:
                builder.add_op(draw(st.sampled_from(kinds)))
        return builder.program(draw)

    return strategy()


@dataclass
class _Builder:
    """Grows a Program op by op, tracking shapes and value bounds."""

    draw: Any
    inputs: list[tuple[int, ...]] = field(default_factory=list)
    ops: list[tuple[str, tuple[int, ...], tuple[Any, ...]]] = field(default_factory=list)
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    bounds: list[float] = field(default_factory=list)

    def draw_shape(self, rank: int | None = None) -> tuple[int, ...]:
        from hypothesis import strategies as st

        rank = rank if rank is not None else self.draw(st.integers(1, 3))
        dims: list[int] = []
        for _ in range(rank):
            dims.append(self.draw_dim(math.prod(dims)))
        return tuple(dims)

    def draw_image_shape(self) -> tuple[int, ...]:
        """An NCHW shape: batch 1-3, a few channels, odd and even spatial sizes."""
        from hypothesis import strategies as st

        return (self.draw(st.integers(1, 3)), self.draw(st.sampled_from((1, 2, 3, 4, 8))),
                self.draw(st.sampled_from((4, 5, 7, 8, 9, 16))),
                self.draw(st.sampled_from((4, 5, 7, 8, 9, 16))))

    def draw_dim(self, elements_so_far: int) -> int:
        """A dim size that keeps the tensor within MAX_ELEMENTS."""
        from hypothesis import strategies as st

        size = self.draw(st.sampled_from(DIM_SIZES))
        return size if elements_so_far * size <= MAX_ELEMENTS else 2

    def new_input(self, shape: tuple[int, ...]) -> int:
        """Add a graph input. Inputs are numbered before op results, so indices shift."""
        position = len(self.inputs)
        self.inputs.append(tuple(shape))
        self.ops = [(k, tuple(i + 1 if i >= position else i for i in operands), p)
                    for k, operands, p in self.ops]
        self.shapes.insert(position, tuple(shape))
        self.bounds.insert(position, 1.0)
        return position

    def pick(self, accept: Callable[[int], bool] = lambda i: True) -> int | None:
        """An existing value satisfying `accept` (later values more likely), or None."""
        from hypothesis import strategies as st

        candidates = [i for i in range(len(self.shapes)) if accept(i)]
        if not candidates:
            return None
        # Prefer recent values, so that graphs are chains more than forests.
        recent = candidates[-3:]
        return self.draw(st.sampled_from(recent + candidates)) if len(candidates) > 3 \
            else self.draw(st.sampled_from(candidates))

    def broadcast_partner(self, shape: tuple[int, ...]) -> int:
        """A value that broadcasts with `shape`: an existing one or a new input."""
        from hypothesis import strategies as st

        same = self.pick(lambda i: self.shapes[i] == shape)
        choice = self.draw(st.integers(0, 3))
        if choice == 0 and same is not None:
            return same
        # An existing value that broadcasts with `shape` (a keepdim reduction, a bias): the
        # reduce-then-broadcast patterns of norms and softmax, where fusion is hardest.
        fits = self.pick(lambda i: _broadcasts(self.shapes[i], shape))
        if choice == 3 and fits is not None:
            return fits
        # A broadcast shape: some dims set to 1, maybe leading dims dropped.
        drop = self.draw(st.integers(0, max(len(shape) - 1, 0))) if choice == 2 else 0
        dims = [1 if self.draw(st.booleans()) else d for d in shape[drop:]]
        existing = self.pick(lambda i: self.shapes[i] == tuple(dims))
        if existing is not None and self.draw(st.booleans()):
            return existing
        return self.new_input(tuple(dims))

    def append(self, kind: str, operands: tuple[int, ...], params: tuple[Any, ...]) -> None:
        import torch

        shapes = [self.shapes[i] for i in operands]
        bound = OPS[kind].bound([self.bounds[i] for i in operands], shapes, params)
        if bound > MAX_BOUND:
            return  # would leave the range where float32 tracks float64; skip the op
        out = OPS[kind].apply(*[torch.empty(s, device="meta") for s in shapes], *params)
        self.ops.append((kind, operands, params))
        self.shapes.append(tuple(out.shape))
        self.bounds.append(bound)

    def add_op(self, kind: str) -> None:
        from hypothesis import strategies as st

        draw = self.draw
        if kind in UNARY:
            a = self.pick()
            if kind == "exp" and self.bounds[a] > MAX_EXP_INPUT:
                return
            params = ()
            if kind == "affine":
                params = (draw(st.sampled_from((0.5, -2.0, 3.0))),
                          draw(st.sampled_from((0.0, 1.0, -0.25))))
            self.append(kind, (a,), params)
        elif kind in BINARY:
            a = self.pick()
            inputs_before = len(self.inputs)
            b = self.broadcast_partner(self.shapes[a])
            if len(self.inputs) > inputs_before and a >= b:
                a += 1  # a new input took position b: op results moved up by one
            operands = (b, a) if draw(st.booleans()) else (a, b)
            self.append(kind, operands, ())
        elif kind in REDUCTIONS or kind == "softmax":
            a = self.pick(lambda i: len(self.shapes[i]) >= 1)
            axis = draw(st.integers(-len(self.shapes[a]), len(self.shapes[a]) - 1))
            keep = (draw(st.booleans()),) if kind != "softmax" else ()
            # Reducing the only axis gives a 0-d tensor; keep it (it is a legal graph).
            self.append(kind, (a,), (axis, *keep))
        elif kind == "layernorm":
            a = self.pick(lambda i: len(self.shapes[i]) >= 1 and self.shapes[i][-1] > 1)
            if a is not None:
                self.append(kind, (a,), ())
        elif kind in ("matmul", "linear"):
            self._contraction(kind)
        elif kind == "transpose":
            a = self.pick(lambda i: len(self.shapes[i]) >= 2)
            if a is not None:
                rank = len(self.shapes[a])
                d0 = draw(st.integers(0, rank - 1))
                d1 = draw(st.integers(0, rank - 1).filter(lambda d: d != d0))
                self.append(kind, (a,), (d0, d1))
        elif kind == "reshape":
            a = self.pick(lambda i: len(self.shapes[i]) >= 1)
            self.append(kind, (a,), (self._new_shape(self.shapes[a]),))
        elif kind in CNN:
            self._window(kind)
        elif kind == "where":
            a = self.pick()
            inputs_before = len(self.inputs)
            b = self.broadcast_partner(self.shapes[a])
            if len(self.inputs) > inputs_before and a >= b:
                a += 1
            self.append(kind, (a, b), ())
        elif kind == "cat":
            a = self.pick(lambda i: len(self.shapes[i]) >= 1)
            shape = self.shapes[a]
            dim = draw(st.integers(0, len(shape) - 1))
            extent = self.draw_dim(math.prod(shape) // max(shape[dim], 1))
            partner_shape = tuple(extent if d == dim else n for d, n in enumerate(shape))
            b = self.pick(lambda i: self.shapes[i] == partner_shape)
            if b is None or draw(st.booleans()):
                b = self.new_input(partner_shape)
                a += 1 if a >= b else 0
            if math.prod(shape) + math.prod(partner_shape) <= MAX_ELEMENTS:
                self.append(kind, (a, b), (dim,))
        elif kind == "causal_fill":
            a = self.pick(lambda i: len(self.shapes[i]) >= 2)
            if a is not None:
                self.append(kind, (a,), ())
        elif kind == "gather_rev":
            a = self.pick(lambda i: len(self.shapes[i]) >= 1)
            self.append(kind, (a,), ())

    def _contraction(self, kind: str) -> None:
        """`a @ w` (+ bias): w (and bias) are new inputs, or an existing value that fits."""
        from hypothesis import strategies as st

        a = self.pick(lambda i: 2 <= len(self.shapes[i]) <= 3)
        if a is None:
            return
        shape = self.shapes[a]
        n = self.draw_dim(max(math.prod(shape[:-1]), shape[-1]))
        w_shape = (*shape[:-2], shape[-1], n) if self.draw(st.booleans()) else (shape[-1], n)
        w = self.pick(lambda i: self.shapes[i] == w_shape)
        if w is None or self.draw(st.booleans()):
            w = self.new_input(w_shape)
            a += 1 if a >= w else 0
        operands = (a, w)
        if kind == "linear":
            bias = self.new_input((n,))
            a, w = (i + 1 if i >= bias else i for i in (a, w))
            operands = (a, w, bias)
        self.append(kind, operands, ())

    def _window(self, kind: str) -> None:
        """A convolution (the weight a new input; maybe depthwise) or a pool over an NCHW
        value with room for the window; a new NCHW input where there is none."""
        from hypothesis import strategies as st

        draw = self.draw
        k = draw(st.sampled_from((1, 2, 3)))
        a = self.pick(lambda i: len(self.shapes[i]) == 4 and min(self.shapes[i][2:]) >= k)
        if a is None:
            a = self.new_input(self.draw_image_shape())
            if min(self.shapes[a][2:]) < k:
                return
        n, c, h, w = self.shapes[a]
        stride = draw(st.sampled_from((1, 2)))
        pad = draw(st.integers(0, k // 2))
        if kind != "conv2d":
            self.append(kind, (a,), (k, stride, pad))
            return
        groups = c if c > 1 and draw(st.booleans()) else 1
        out_channels = c * draw(st.sampled_from((1, 2))) if groups > 1 \
            else draw(st.sampled_from((1, 2, 4, 8)))
        out_h, out_w = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        if n * out_channels * out_h * out_w > MAX_ELEMENTS:
            return
        weight = self.new_input((out_channels, c // groups, k, k))
        a += 1 if a >= weight else 0
        self.append(kind, (a, weight), (stride, pad, groups))

    def _new_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Merge two adjacent dims, split one, add a unit dim or flatten: a valid reshape."""
        from hypothesis import strategies as st

        choice = self.draw(st.integers(0, 3))
        dims = list(shape)
        if choice == 0 and len(dims) >= 2:
            i = self.draw(st.integers(0, len(dims) - 2))
            return tuple(dims[:i] + [dims[i] * dims[i + 1]] + dims[i + 2:])
        if choice == 1 and len(dims) <= 3:
            i = self.draw(st.integers(0, len(dims) - 1))
            factors = [f for f in range(2, dims[i]) if dims[i] % f == 0]
            if factors:
                f = self.draw(st.sampled_from(factors))
                return tuple(dims[:i] + [f, dims[i] // f] + dims[i + 1:])
        if choice == 2 and len(dims) <= 3:
            i = self.draw(st.integers(0, len(dims)))
            return tuple(dims[:i] + [1] + dims[i:])
        return (math.prod(dims),)

    def program(self, draw: Any) -> Program:
        """The finished Program: the last value, and maybe one earlier op result, as outputs."""
        from hypothesis import strategies as st

        last = len(self.shapes) - 1
        outputs = [last]
        # Prefer op results nothing uses: otherwise they are dead code, which export drops.
        used = {i for _, operands, _ in self.ops for i in operands}
        earlier = list(range(len(self.inputs), last))
        leaves = [i for i in earlier if i not in used]
        if (leaves or earlier) and draw(st.booleans()):
            outputs.append(draw(st.sampled_from(leaves or earlier)))
        return Program(tuple(self.inputs), tuple(self.ops), tuple(outputs))


# --------------------------------------------------------------------------------------------
# Checking one program


class FuzzFailure(AssertionError):
    """A program on which fusec failed; `signature` says where (a stable, short key)."""

    def __init__(self, signature: str, detail: str) -> None:
        super().__init__(f"{signature}: {detail}")
        self.signature = signature
        self.detail = detail


def random_inputs(program: Program, seed: int) -> list[np.ndarray]:
    """float32 inputs with |x| in [0.5, 1] and random signs: never zero, never large."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape in program.inputs:
        magnitude = rng.uniform(0.5, 1.0, size=shape)
        sign = np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)
        # np.asarray: for a 0-d shape, numpy gives back scalars, not arrays.
        arrays.append(np.asarray(magnitude * sign, dtype=np.float32))
    return arrays


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| in float64 (0 when both are zero)."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    diff = float(np.linalg.norm((out - ref).ravel()))
    norm = float(np.linalg.norm(ref.ravel()))
    if norm == 0.0:
        return diff
    return diff / norm


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _normalise(line: str) -> str:
    """A stable key for an error line: names, numbers and paths stripped."""
    line = re.sub(r" \[stage '([\w-]+)'; reproduce with: .*", r" [stage '\1']", line)
    line = re.sub(r"/[\w./+-]+", "<path>", line)
    line = re.sub(r"%[\w#]+", "%v", line)
    return re.sub(r"\d+", "N", line)[:160]


def references(program: Program, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], float]:
    """The float64 reference outputs, and torch's own float32 error against them."""
    torch = _torch()
    model = module(program)
    with torch.no_grad():
        ref64 = _as_tuple(model(*[torch.from_numpy(x).double() for x in inputs]))
        ref32 = _as_tuple(model(*[torch.from_numpy(x) for x in inputs]))
    refs = [r.numpy() for r in ref64]
    err32 = max((relative_error(a.numpy(), b) for a, b in zip(ref32, refs)), default=0.0)
    return refs, err32


def check_program(program: Program, seed: int = 0) -> dict[str, Any]:
    """Compile `program` with fusion on and off, run both, compare with float64.

    Raises FuzzFailure (signature, detail) on a compile error, wrong numbers, a wrong output
    shape, or more fused kernels than unfused ones. Returns a summary on success.
    """
    import fusec
    import torch
    from fusec.compiler.frontend import import_torch

    example = [torch.from_numpy(x) for x in random_inputs(program, seed)]
    try:
        text = import_torch(module(program), *example)
    except Exception as error:
        raise FuzzFailure(f"import: {_normalise(_first_line(error))}", str(error)) from error
    inputs = random_inputs(program, seed + 1)  # fresh data, not the example inputs
    refs, err32 = references(program, inputs)
    tolerance = max(TOLERANCE, 10.0 * err32)
    kernels = {}
    for fusion in (False, True):
        label = "fused" if fusion else "unfused"
        try:
            compiled = fusec.compile(text, fusion=fusion)
        except Exception as error:
            raise FuzzFailure(f"compile {label}: {_normalise(_first_line(error))}",
                              str(error)) from error
        try:
            outs = _as_tuple(compiled(*inputs))
        except Exception as error:
            raise FuzzFailure(f"run {label}: {_normalise(_first_line(error))}",
                              str(error)) from error
        kernels[label] = len(compiled.kernels)
        _compare(label, outs, refs, tolerance)
    if kernels["fused"] > kernels["unfused"]:
        raise FuzzFailure("kernel count", f"fused {kernels['fused']} > unfused "
                                          f"{kernels['unfused']} kernels")
    return {"kernels": kernels, "tolerance": tolerance}


def _compare(label: str, outs: Sequence[Any], refs: Sequence[np.ndarray],
             tolerance: float) -> None:
    if len(outs) != len(refs):
        raise FuzzFailure(f"outputs {label}", f"{len(outs)} outputs, expected {len(refs)}")
    for index, (out, ref) in enumerate(zip(outs, refs)):
        out = np.asarray(out)
        if out.shape != ref.shape:
            raise FuzzFailure(f"shape {label}",
                              f"output {index} has shape {out.shape}, expected {ref.shape}")
        error = relative_error(out, ref)
        if not error <= tolerance:  # NaN fails too
            raise FuzzFailure(f"numerics {label}",
                              f"output {index}: relative error {error:.3g} > {tolerance:.3g}")


# --------------------------------------------------------------------------------------------
# The command line: many examples, keep going after failures


@dataclass
class Finding:
    """A failure found by the fuzzer: its signature, shrunk program and error."""

    signature: str
    program: Program
    detail: str


@dataclass
class Campaign:
    """Counts across hypothesis rounds, and the findings so far."""

    graphs: int = 0  # graphs compiled and run, shrinking included
    shrink_runs: int = 0  # of which, runs while shrinking a failure
    failing_runs: int = 0
    findings: list[Finding] = field(default_factory=list)
    last_failure: dict[str, Any] = field(default_factory=dict)
    ignored: set[str] = field(default_factory=set)  # signatures of bugs already filed

    def known(self) -> set[str]:
        return {f.signature for f in self.findings} | self.ignored


def run_round(campaign: Campaign, examples: int, seed: int, max_ops: int,
              exclude: Sequence[str], deadline: float, focus: Sequence[str] = ()) -> bool:
    """One hypothesis run; returns True if it found (and shrank) a new failure."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    known = campaign.known()
    shrinking = False

    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
              phases=[Phase.generate, Phase.shrink])
    @hypothesis_seed(seed)  # each round reproducible
    @given(programs(max_ops, exclude, focus))
    def property_(program: Program) -> None:
        nonlocal shrinking
        if time.monotonic() > deadline:
            return
        campaign.graphs += 1
        campaign.shrink_runs += shrinking
        if campaign.graphs % 25 == 0:
            print(f"  ... {campaign.graphs} graphs, {len(campaign.findings)} failures",
                  file=sys.stderr, flush=True)
        try:
            check_program(program)
        except FuzzFailure as failure:
            if failure.signature in known:
                return  # already reported: look for something else
            shrinking = True
            campaign.failing_runs += 1
            campaign.last_failure = {"signature": failure.signature, "program": program,
                                     "detail": failure.detail}
            raise

    try:
        property_()
    except FuzzFailure:
        # Hypothesis re-runs the shrunk example last: it is the last failure seen.
        last = campaign.last_failure
        campaign.findings.append(Finding(last["signature"], last["program"], last["detail"]))
        return True
    return False


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m fusec.tools.fuzz",
                                     description="Differential fuzzing of fusec.")
    parser.add_argument("--examples", type=int, default=100,
                        help="graphs to compile and run, shrinking included")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-ops", type=int, default=8)
    parser.add_argument("--exclude", default="", help="op kinds not to generate (comma list)")
    parser.add_argument("--focus", default="",
                        help="op kinds every program starts with and draws often (comma list; "
                             "e.g. conv2d,maxpool,avgpool)")
    parser.add_argument("--known", action="append", default=[], metavar="SIGNATURE",
                        help="a failure signature already filed (e.g. 'shape unfused'): "
                             "ignore it and look for others; may be repeated")
    parser.add_argument("--budget-seconds", type=float, default=None,
                        help="stop generating after this long")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    exclude = [k for k in args.exclude.split(",") if k]
    focus = [k for k in args.focus.split(",") if k]
    unknown = [k for k in exclude + focus if k not in OPS]
    if unknown:
        print(f"error: unknown op kinds {unknown}; known: {', '.join(OPS)}", file=sys.stderr)
        return 2
    cache = tempfile.mkdtemp(prefix="fusec-fuzz-cache-")
    os.environ["FUSEC_CACHE_DIR"] = cache
    start = time.monotonic()
    deadline = start + (args.budget_seconds if args.budget_seconds else math.inf)
    campaign = Campaign(ignored=set(args.known))
    status = 0
    seed = args.seed
    # SIGTERM (a CI timeout, `kill`) still prints what was found so far.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        while campaign.graphs < args.examples and time.monotonic() < deadline:
            before = campaign.graphs
            found = run_round(campaign, args.examples - campaign.graphs, seed, args.max_ops,
                              exclude, deadline, focus)
            if found:
                f = campaign.findings[-1]
                print(f"found [{f.signature}] after {campaign.graphs} graphs",
                      file=sys.stderr, flush=True)
            elif campaign.graphs == before:
                break
            seed += 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
    except Exception:  # noqa: BLE001  (reported below, not swallowed)
        # A bug of the fuzzer itself (hypothesis shrinks it too): show it, keep the summary.
        traceback.print_exc()
        print("the fuzzer itself failed (above); the summary covers the graphs before",
              file=sys.stderr)
        status = 2
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(summary(campaign, time.monotonic() - start))
    return status or (1 if campaign.findings else 0)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def summary(campaign: Campaign, seconds: float) -> str:
    lines = [(f"fusec fuzz: {campaign.graphs} graphs compiled and run in {seconds:.0f} s "
             f"({campaign.graphs - campaign.shrink_runs} generated, {campaign.shrink_runs} "
             f"while shrinking); {len(campaign.findings)} distinct failures "
             f"({campaign.failing_runs} failing runs)")]
    for index, finding in enumerate(campaign.findings, 1):
        lines += [f"\n--- failure {index}: {finding.signature}",
                  finding.detail.splitlines()[0][:300] if finding.detail else "",
                  f"program: {finding.program!r}",
                  to_python(finding.program)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
