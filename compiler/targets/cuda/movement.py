"""The data-movement kernel family: reshapes, slices, transposes, concats, pads, gathers and
broadcasts, with the elementwise ops around them, as one kernel at the HBM floor.

A group of such ops is a function of the output's index: every output element is some
elementwise payload of input elements, each read at an index that the ops between compose
(an `expand_shape` linearises, a `collapse_shape` delinearises, a slice offsets and strides, a
transpose permutes, a broadcast drops, a concat, pad or insert_slice chooses a piece; a
payload's `linalg.index` and `tensor.extract` gather). `MovementEmitter` evaluates that
function backwards from the output, lazily (only what an output needs is read), for the
vector of `V` consecutive elements one thread owns, and proves what it can about the lanes:

  * every index is an `Ix`: lane k's value is `name + k * step` (`step` 0: the same for the
    whole vector; 1: consecutive), or a list of per-lane names where nothing is known; with a
    known divisor `align` of `name`;
  * a read whose linear index has step 1 and an aligned base is one vector load (16 bytes);
    step 0, one scalar load for all lanes; anything else a load per lane ("strided": counted
    in `stats`, the kernel-shape decision reads it);
  * a concat / pad / insert_slice whose piece boundaries the vector cannot straddle (or whose
    choosing index is the same for all lanes) is one `scf.if` for the whole vector; otherwise
    each lane chooses alone;
  * windows (pooling, depthwise and small grouped convolutions) and reductions over loops
    the output does not index fold their points unrolled when there are at most
    MAX_WINDOW_POINTS (64); a longer window folds in a loop nest (kh, kw: `rolled_fold`;
    YOLO's 13x13 SPP pool, a 13x13 depthwise convolution); 16-bit sums and products
    accumulate in f32, rounded once.

Three kernel shapes (the cost model's pure functions give their sizes):

  * **direct** (`cost_model.movement_launch_shape`): each thread writes vectors along the
    output's last dim, in a grid-stride loop, every load of a pass before its stores (loads
    are clamped into bounds, stores guarded). Reads are coalesced where the inputs keep the
    output's last dim contiguous: slices, head split / merge (0, 2, 1, 3), concat, pad,
    repeat_interleave and expand, embedding gathers.
  * **transpose** (`cost_model.transpose_tile_shape`): when the inputs' contiguous dim is
    another output dim p (a 2-D transpose, K^T's (0, 2, 3, 1)), each block moves a 256-byte
    square of (p, l): read in vectors along p, kept in shared memory (the chunks XOR-swizzled
    by row so neither phase has bank conflicts), written in vectors along l. Where the
    inputs disagree (`x.t() + y`: x contiguous along p, y along l) the *staged* variant
    keeps the reads along p in the squares instead of the outputs, and computes the outputs
    in the second phase with the other inputs read along l (transpose.py).

  * **reduce** (`cost_model.split_reduction_shape`): a longer reduction over a non-last
    dim: a few output vectors per block, the reduced points split over the block's slices
    (an `scf.for` each), the partials combined by a tree in shared memory; a reduction
    along the inputs' contiguous dim that the fast emitter does not take (BatchNorm's
    statistics over N, H, W; an NCHW 7x7 pool) puts output elements of one on slices
    sized to its points (a warp for 49), several per block. "Along the contiguous dim" is
    the physical loads' (`Stats.row_bytes`: the linear index into the group's inputs,
    through transposes and reshapes), not the generic's maps: an NHWC pool read through a
    transpose is a short fold in registers with vectors along C.

Between direct and transpose the shape with the fewer strided bytes wins (`movement_kernel`);
a long reduction takes the reduce shape. A fold (a window, a short reduction) multiplies a
direct thread's work by its points, so the direct shape fills the GPU before it widens its
vectors (`movement_launch_shape`'s `points`); a short reduction that one element per thread
still leaves SMs idle for is split over a block's slices too (`cost_model.fold_prefers_split`:
ResNet-18's end at batch 1 was one block of 64 threads and an 11 000-line kernel), and so is
a long window over few outputs. The shape goes into `Launch.info` ("path": "movement",
"shape": "direct" | "transpose" | "reduce"). What the family refuses (a row reduction, a
reduction broadcast back to a larger output) goes to the fallback path with the reason.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import iterators, numel_of, parse_map, \
    reports_failed_check, tensor_info, value_key
from fusec.compiler.targets.cuda.device import (
    ELEMENT_BYTES,
    H200,
    MEMORY_ELEMENT,
    PAYLOAD_DIALECTS,
    INDEX_STATUS,
    CudaCodegenError,
    CudaDevice,
)
from fusec.compiler.targets.cuda.lanes import BIG, Ix
from fusec.compiler.targets.cuda.transpose import TransposeShapes, lanes_dim, staged_refusal
from fusec.compiler.targets.cuda.emitter import Input, KernelEmitter, _attr_value, _neutral, \
    id_of, payload_op_text
from fusec.compiler.targets.cuda.built import PROBE_SYMBOL, Built, body_text, renamed
from fusec.compiler.targets.cuda.folds import MAX_WINDOW_POINTS, WINDOW_OPS, fold_points, \
    loop_ranges, reduction_combiner, split_points, window_extents
from fusec.passes import cost_model
from fusec.passes.payload import arg_reduction

# The group-level ops this family evaluates (besides scalar arith/math ops and constants).
MOVEMENT_OPS = frozenset({
    "linalg.generic", "linalg.fill", "linalg.transpose", "linalg.broadcast", "linalg.copy",
    "tensor.expand_shape", "tensor.collapse_shape", "tensor.extract_slice",
    "tensor.insert_slice", "tensor.concat", "tensor.pad", "tensor.empty", "arith.constant"})
VECTOR_BYTES = 16
# The refusal of a fold along its inputs' rows; `_build_movement_kernel` retries such a
# group in the "reduce" shape, along the rows.
ROW_REDUCTION = ("a reduction over its inputs' contiguous dim (a row reduction: the fast "
                 "emitter's)")
# Switches for two shapes (off: the shapes before them), on since their GPU cases ran clean
# on sm_90 (an H100, 2026-12-05, bench/RESULTS.md run 178: test/gpu/movement.py's staged
# cases, arg_reductions.py's seg_* / col_* cases, racecheck and memcheck, 200 fuzzed
# movement programs).
STAGED_TRANSPOSE = True  # `emit_staged_transpose`: inputs read each in their own phase
JOINT_REDUCTIONS = True  # `eval_joint_reduction`: an argmax over a non-last dim


@dataclass
class Stats:
    strided_bytes: int = 0  # bytes read a lane at a time (the shape choice minimises them)
    # Bytes that unrolled reduction folds load a lane at a time where the fold's point (not
    # the output's lanes) fixes the index along the input's contiguous dim: the reduction
    # runs along the physical rows (an NCHW 7x7 pool); and the bytes the folds load
    # otherwise (vectors along the contiguous dim, uniform values). Where the first are
    # the most, the "reduce" shape reads along the rows instead.
    row_bytes: int = 0
    fold_bytes: int = 0


@dataclass
class _Mode:
    kind: str  # "direct" | "transpose"
    p: int = -1  # transpose: the output dim read contiguously
    extra: dict = field(default_factory=dict)


def _ints(attr: ir.Attribute) -> list[int]:
    return list(ir.DenseI64ArrayAttr(attr))


class MovementEmitter(TransposeShapes, KernelEmitter):
    """One `gpu.func` for a data-movement group (see the module docstring)."""

    phase = 0  # the staged transpose's phase (0: not staging; see `emit_staged_transpose`)

    folding = 0  # depth of unrolled reduction folds being evaluated (`Stats.row_loads`)

    def __init__(self, group: ir.Operation, symbol: str, constants: list[ir.Operation] = (),
                 device: CudaDevice = H200, mode: _Mode | None = None) -> None:
        super().__init__(group, symbol, None, constants)
        self.device = device
        self.mode = mode or _Mode("direct")
        self.stats = Stats()
        self.memo: list[dict] = [{}]
        self.V = 1
        # The staged transpose (`emit_staged_transpose`): the values and generic operands on
        # the way from the output being evaluated to the read in hand (a read's identity in
        # both phases), the phase, what phase 1 read along p (in evaluation order), and
        # where phase 2 finds each such read in shared memory.
        self.path: list = []
        self.phase = 0
        self.recorded: list[tuple[tuple, list[str], str]] = []
        self.squares: dict[tuple, tuple[str, str, str]] = {}
        self.square_at: tuple[str, str] | None = None
        body = group.regions[0].blocks[0]
        for op in body.operations:
            name = op.operation.name
            if name == "fusion.yield" or name.startswith(PAYLOAD_DIALECTS):
                continue  # scalars and constants: evaluated where an op reads them
            if name in WINDOW_OPS:
                continue  # a long one: split by the "reduce" shape (`eval_window`)
            if name not in MOVEMENT_OPS:
                raise CudaCodegenError(f"'{name}' is not a data-movement op")
        if not self.outputs:
            raise CudaCodegenError("a group without results")
        shapes = {tuple(tensor_info(v.type)[0]) for v in self.outputs}
        if len(shapes) != 1:
            raise CudaCodegenError("outputs of different shapes")
        self.out_shape = list(shapes.pop())
        if not self.out_shape or numel_of(self.out_shape) == 0:
            raise CudaCodegenError("a 0-d or empty output")
        self.eb = max(ELEMENT_BYTES.get(tensor_info(v.type)[1], 4) for v in self.outputs)
        numel = numel_of(self.out_shape)
        for op in body.operations:
            op = op.operation
            if op.name == "linalg.generic" and any(k != "parallel" for k in iterators(op)) \
                    and numel_of(tensor_info(op.results[0].type)[0]) < numel:
                # Broadcast back (softmax over a non-last dim): every output element would
                # fold the whole reduction again.
                raise CudaCodegenError("a reduction whose result is broadcast back to a "
                                       "larger output (recomputed per element)")

    # -- index arithmetic (constants folded, lanes tracked)

    def ix_const(self, c: int) -> Ix:
        return Ix(self.index(c), 0, abs(c) if c else BIG, c)

    def ix_uniform(self, name: str, align: int = 1) -> Ix:
        return Ix(name, 0, align)

    def _lane_names(self, a: Ix) -> list[str]:
        if a.names:
            return list(a.names)
        if a.step == 0:
            return [a.name] * self.V
        return [a.name if k == 0 else self.arith("addi", a.name, self.index(k * a.step))
                for k in range(self.V)]

    def ix_add(self, a: Ix, b: Ix) -> Ix:
        if a.const is not None and b.const is not None:
            return self.ix_const(a.const + b.const)
        if b.const == 0:
            return a
        if a.const == 0:
            return b
        if a.names or b.names:
            return Ix(names=tuple(self.arith("addi", x, y) for x, y in
                                  zip(self._lane_names(a), self._lane_names(b))))
        return Ix(self.arith("addi", a.name, b.name), a.step + b.step, math.gcd(a.align, b.align))

    def ix_mul(self, a: Ix, c: int) -> Ix:
        if c == 0:
            return self.ix_const(0)
        if c == 1:
            return a
        if a.const is not None:
            return self.ix_const(a.const * c)
        if a.names:
            return Ix(names=tuple(self.arith("muli", x, self.index(c)) for x in a.names))
        return Ix(self.arith("muli", a.name, self.index(c)), a.step * c,
                  min(a.align * c, BIG))

    def _divmod(self, a: Ix, size: int) -> tuple[Ix, Ix]:
        """(a / size, a % size) for an index with no lanes (or a constant)."""
        if a.const is not None:
            return self.ix_const(a.const // size), self.ix_const(a.const % size)
        q = Ix(self.arith("divui", a.name, self.index(size)), 0,
               a.align // size if a.align % size == 0 else 1)
        r = Ix(self.arith("remui", a.name, self.index(size)), 0, math.gcd(a.align, size))
        return q, r

    def linearize(self, idx: list[Ix], shape: list[int]) -> Ix:
        total = self.ix_const(0)
        stride = 1
        for d in reversed(range(len(shape))):
            if shape[d] != 1:
                total = self.ix_add(total, self.ix_mul(idx[d], stride))
            stride *= shape[d]
        return total

    def delinearize(self, a: Ix, sizes: list[int]) -> list[Ix]:
        out: list[Ix | None] = [None] * len(sizes)
        real = [d for d, s in enumerate(sizes) if s != 1]
        for d, s in enumerate(sizes):
            if s == 1:
                out[d] = self.ix_const(0)
        if not real:
            return out
        if len(real) == 1:
            out[real[0]] = a
            return out
        if a.names:
            per_lane = [self.delinearize(Ix(n, 0, 1), sizes) for n in a.names]
            return [Ix(names=tuple(lane[d].name for lane in per_lane)) for d in range(len(sizes))]
        last = real[-1]
        if a.step not in (0, 1) or (a.step == 1 and (a.align % self.V or sizes[last] % self.V)):
            return [Ix(names=tuple(x.name for x in col)) for col in
                    zip(*[self.delinearize(Ix(n, 0, 1), sizes) for n in self._lane_names(a)])]
        rest = Ix(a.name, 0, a.align, a.const)
        for d in reversed(real):
            if d == real[0]:
                out[d] = rest
                break
            rest, out[d] = self._divmod(rest, sizes[d])
        if a.step == 1:
            out[last] = Ix(out[last].name, 1, out[last].align)
        return out

    def lane(self, a: Ix, k: int) -> Ix:
        """Lane k of `a`, as an index with no lanes."""
        if a.names:
            return Ix(a.names[k], 0, 1)
        if a.step == 0 or k == 0:
            return Ix(a.name, 0, a.align, a.const)
        return Ix(self.arith("addi", a.name, self.index(k * a.step)), 0,
                  math.gcd(a.align, k * a.step))

    # -- evaluation

    def _find(self, key: tuple) -> Any:
        for scope in reversed(self.memo):
            if key in scope:
                return scope[key]
        return None

    def at(self, value: ir.Value, idx: list[Ix]) -> list[str]:
        """The V lanes of `value` at index `idx` (SSA names)."""
        key = (value_key(value), self.V, tuple(i.key() for i in idx))
        found = self._find(key)
        if found is not None:
            return found
        rep = self.values.get(value_key(value))
        if self.phase:  # a staged transpose names each read by its path
            self.path.append(value_key(value))
        try:
            if isinstance(rep, Input):
                result = self.load(rep, tensor_info(value.type)[0], idx)
            else:
                result = self.eval_at(value, idx)
        finally:
            if self.phase:
                self.path.pop()
        self.memo[-1][key] = result
        return result

    def load(self, inp: Input, shape: list[int], idx: list[Ix]) -> list[str]:
        lin = self.linearize(idx, shape)
        eb = ELEMENT_BYTES.get(inp.type, 4)
        if self.phase:
            staged = self.staged_load(inp, lin)
            if staged is not None:
                return staged
        if self.folding:
            # The physical layout decides, not the generic's maps: is the input's contiguous
            # dim indexed by the fold's point (a constant here) rather than the lanes?
            real = [d for d, size in enumerate(shape) if size != 1]
            strided = bool(lin.names) or lin.step not in (0, 1)
            if strided and real and idx[real[-1]].const is not None:
                self.stats.row_bytes += self.V * eb
            else:
                self.stats.fold_bytes += eb if lin.step == 0 and not lin.names else self.V * eb
        if lin.names or lin.step not in (0, 1):
            self.stats.strided_bytes += self.V * eb
            names = self._lane_names(lin)
            return [self.load_vector(inp.index, n, 1)[0] for n in names]
        if lin.step == 0:
            return [self.load_vector(inp.index, lin.name, 1)[0]] * self.V
        w = max(1, min(self.V, VECTOR_BYTES // eb))
        while w > 1 and lin.align % w:
            w //= 2
        if w * eb < VECTOR_BYTES and w < self.V:
            self.stats.strided_bytes += self.V * eb
        out: list[str] = []
        for j in range(0, self.V, w):
            off = lin.name if j == 0 else self.arith("addi", lin.name, self.index(j))
            out += self.load_vector(inp.index, off, w)
        return out

    def scalar(self, value: ir.Value) -> str:
        """A scalar the group computes outside any payload (a constant, a fill's value)."""
        owner = value.owner
        if isinstance(owner, ir.Block):
            raise CudaCodegenError("a scalar group argument")
        op = owner.operation
        if op.name == "arith.constant":
            return self.const(_attr_value(op.attributes["value"]), str(value.type))
        if not op.name.startswith(PAYLOAD_DIALECTS) or len(op.regions):
            raise CudaCodegenError(f"scalar '{op.name}' is not supported")
        names = [self.fresh("s")]
        self.emit(payload_op_text(op, [self.scalar(v) for v in op.operands], names,
                                   self.signatures))
        return names[0]

    def eval_at(self, value: ir.Value, idx: list[Ix]) -> list[str]:
        owner = value.owner
        if isinstance(owner, ir.Block):
            raise CudaCodegenError("a block argument that is not a group input")
        op = owner.operation
        name = op.name
        shape = tensor_info(value.type)[0]
        if name == "arith.constant":
            attr = op.attributes["value"]
            if not (isinstance(attr, ir.DenseElementsAttr) and attr.is_splat):
                raise CudaCodegenError("a tensor constant that is not a weight")
            splat = attr.get_splat_value()
            return [self.const(_attr_value(splat), str(splat.type))] * self.V
        if name == "tensor.empty":
            raise CudaCodegenError("reads an uninitialised tensor (tensor.empty)")
        if name == "linalg.fill":
            return [self.scalar(op.operands[0])] * self.V
        if name in ("tensor.expand_shape", "tensor.collapse_shape"):
            groups = [[ir.IntegerAttr(d).value for d in ir.ArrayAttr(g)]
                      for g in ir.ArrayAttr(op.attributes["reassociation"])]
            src = op.operands[0]
            src_shape = tensor_info(src.type)[0]
            if name == "tensor.expand_shape":
                src_idx = [self.linearize([idx[d] for d in g], [shape[d] for d in g])
                           for g in groups]
            else:
                # Dims in no group are unit dims (a collapse to rank 0): index 0.
                src_idx = [self.ix_const(0)] * len(src_shape)
                for r, g in enumerate(groups):
                    for d, ix in zip(g, self.delinearize(idx[r], [src_shape[d] for d in g])):
                        src_idx[d] = ix
            return self.at(src, src_idx)
        if name == "tensor.extract_slice":
            return self.at(op.operands[0], self.slice_index(op, idx))
        if name == "linalg.transpose":
            perm = _ints(op.attributes["permutation"])
            src_idx: list[Ix | None] = [None] * len(perm)
            for j, p in enumerate(perm):
                src_idx[p] = idx[j]
            return self.at(op.operands[0], src_idx)
        if name == "linalg.broadcast":
            dims = set(_ints(op.attributes["dimensions"]))
            return self.at(op.operands[0], [ix for j, ix in enumerate(idx) if j not in dims])
        if name == "linalg.copy":
            return self.at(op.operands[0], idx)
        if name == "linalg.generic":
            return self.eval_generic(op, ir.OpResult(value).result_number, idx)
        if name in WINDOW_OPS:
            return self.eval_window(op, idx)
        if name == "tensor.concat":
            dim = ir.IntegerAttr(op.attributes["dim"]).value
            pieces, start = [], 0
            for piece in op.operands:
                size = tensor_info(piece.type)[0][dim]
                pieces.append((piece, start, start + size))
                start += size
            return self.choose_piece(dim, idx, pieces)
        if name == "tensor.pad":
            return self.eval_pad(op, idx)
        if name == "tensor.insert_slice":
            return self.eval_insert(op, idx)
        raise CudaCodegenError(f"'{name}' is not a data-movement op")

    def eval_window(self, op: ir.Operation, idx: list[Ix]) -> list[str]:
        """A pooling or grouped convolution at one output vector: its init, then the window's
        points folded in order (kh, kw; for a convolution c, kh, kw), each read at
        `o * stride + k * dilation` of the (already padded) input. A window of more than
        MAX_WINDOW_POINTS points is folded in a loop (`rolled_fold`), or, in the "reduce"
        shape (few outputs: `cost_model.fold_prefers_split`), split over the block's slices
        (`split_reduction`)."""
        x, w, init = op.operands[0], op.operands[1], op.operands[2]
        strides = [int(v) for v in ir.DenseIntElementsAttr(op.attributes["strides"])]
        dilations = [int(v) for v in ir.DenseIntElementsAttr(op.attributes["dilations"])]
        out_elt = str(ir.RankedTensorType(init.type).element_type)
        floating = not out_elt.startswith("i")
        # 16-bit sums and products accumulate in f32 (as torch's kernels do), rounded once.
        wide = out_elt in ("bf16", "f16") and not op.name.endswith("max")
        elt = "f32" if wide else out_elt

        def widen(lanes: list[str], from_elt: str) -> list[str]:
            """`lanes` as the accumulator's type (a bf16 input of an f32 accumulator)."""
            if from_elt == elt:
                return lanes
            if not floating or from_elt.startswith("i") or \
                    ELEMENT_BYTES.get(from_elt, 4) > ELEMENT_BYTES.get(elt, 4):
                raise CudaCodegenError(f"a window of {from_elt} into {elt}")
            return [self._cast("extf", v, from_elt, elt) for v in lanes]

        x_elt = str(ir.RankedTensorType(x.type).element_type)
        w_elt = str(ir.RankedTensorType(w.type).element_type)
        acc = widen(self.at(init, idx), out_elt)
        point = self._window_point(op, idx, x, w, strides, dilations, elt, floating,
                                   lambda v: widen(v, x_elt), lambda v: widen(v, w_elt))
        extents = window_extents(op)
        total = math.prod(extents)
        if total > MAX_WINDOW_POINTS and self.mode.kind == "reduce" and len(self.memo) == 1:
            return self.split_reduction(op, 0, extents, total, point, acc, elt, out_elt, wide)
        if total > MAX_WINDOW_POINTS:
            acc = self.rolled_fold(extents, point, acc, elt)
        else:
            for at in itertools.product(*(range(e) for e in extents)):
                acc = point([self.ix_const(k) for k in at], acc)
        if not wide:
            return acc
        return [self._cast("truncf", v, "f32", out_elt) for v in acc]

    def _window_point(self, op, idx, x, w, strides, dilations, elt, floating, wx, ww):
        """`point(at, acc)`: `acc` (lanes of type `elt`) with the window's point `at` (Ix
        coordinates: kh, kw; for a grouped convolution c, kh, kw) folded in."""
        oh, ow = idx[-2], idx[-1]

        def spatial(k_h: Ix, k_w: Ix) -> list[Ix]:
            return [self.ix_add(self.ix_mul(oh, strides[0]), self.ix_mul(k_h, dilations[0])),
                    self.ix_add(self.ix_mul(ow, strides[1]), self.ix_mul(k_w, dilations[1]))]

        def fold(kind: str, a: list[str], b: list[str]) -> list[str]:
            out = []
            for k in range(self.V):
                n = self.fresh("p")
                self.emit(f"{n} = arith.{kind} {a[k]}, {b[k]} : {elt}")
                out.append(n)
            return out

        add, mul = ("addf", "mulf") if floating else ("addi", "muli")
        if op.name.startswith("linalg.pooling"):
            kind = ("maximumf" if floating else "maxsi") if op.name.endswith("max") else add
            return lambda at, acc: fold(kind, acc, wx(self.at(x, idx[:2] + spatial(*at))))
        if op.name == "linalg.depthwise_conv_2d_nchw_chw":
            # out[n, c, oh, ow] += x[n, c, oh * s + kh * d, ...] * w[c, kh, kw]
            return lambda at, acc: fold(add, acc, fold(
                mul, wx(self.at(x, idx[:2] + spatial(*at))), ww(self.at(w, [idx[1], *at]))))
        # conv_2d_ngchw_gfchw: out[n, g, f, oh, ow] += x[n, g, c, ...] * w[g, f, c, kh, kw]
        n_, g, f = idx[0], idx[1], idx[2]
        return lambda at, acc: fold(add, acc, fold(
            mul, wx(self.at(x, [n_, g, at[0]] + spatial(at[1], at[2]))),
            ww(self.at(w, [g, f, *at]))))

    def slice_index(self, op: ir.Operation, idx: list[Ix]) -> list[Ix]:
        if len(op.operands) != 1:
            raise CudaCodegenError("a slice with dynamic offsets, sizes or strides")
        offsets, sizes, strides = (_ints(op.attributes[a]) for a in
                                   ("static_offsets", "static_sizes", "static_strides"))
        result = tensor_info(op.results[0].type)[0]
        # Unit dims read at their offset; the others map in order (a rank-reducing slice
        # drops unit dims only).
        kept = [j for j, size in enumerate(result) if size != 1]
        real = [d for d, size in enumerate(sizes) if size != 1]
        if [result[j] for j in kept] != [sizes[d] for d in real]:
            raise CudaCodegenError("a rank-reducing slice this emitter cannot map")
        where = dict(zip(real, kept))
        src_idx = []
        for d in range(len(sizes)):
            i = idx[where[d]] if d in where else self.ix_const(0)
            src_idx.append(self.ix_add(self.ix_mul(i, strides[d]), self.ix_const(offsets[d])))
        return src_idx

    # -- choosing a piece (concat, pad, insert_slice)

    def _uniform_range(self, ix: Ix, lo: int, hi: int) -> bool:
        """Whether `lo <= ix < hi` has one answer for all lanes."""
        if ix.names:
            return False
        if ix.step == 0:
            return True
        return ix.step == 1 and ix.align % self.V == 0 and lo % self.V == 0 and hi % self.V == 0

    def branch(self, cond: str, then: Callable[[], list[str]], other: Callable[[], list[str]],
               types: list[str]) -> list[str]:
        """`scf.if cond` yielding V values: `then()` and `other()` each in a scope of its own."""
        res = self.fresh("r")
        arity = f":{len(types)}" if len(types) > 1 else ""
        self.emit(f"{res}{arity} = scf.if {cond} -> ({', '.join(types)}) {{")
        for k, fn in enumerate((then, other)):
            if k:
                self.emit("} else {")
            self.indent += 1
            self.memo.append({})
            vals = fn()
            self.memo.pop()
            self.emit(f"scf.yield {', '.join(vals)} : {', '.join(types)}")
            self.indent -= 1
        self.emit("}")
        return [f"{res}#{k}" for k in range(len(types))] if len(types) > 1 else [res]

    def per_lane(self, fn: Callable[[list[Ix]], list[str]], idx: list[Ix]) -> list[str]:
        """Evaluate `fn` once per lane (V = 1 inside), where the lanes choose apart."""
        v, out = self.V, []
        lanes = [[self.lane(ix, k) for ix in idx] for k in range(v)]
        self.V = 1
        try:
            for k in range(v):
                out += fn(lanes[k])
        finally:
            self.V = v
        return out

    def choose_piece(self, dim: int, idx: list[Ix],
                     pieces: list[tuple[ir.Value, int, int]]) -> list[str]:
        ix = idx[dim]
        if not all(self._uniform_range(ix, lo, hi) for _, lo, hi in pieces):
            return self.per_lane(lambda one: self.choose_piece(dim, one, pieces), idx)
        if ix.const is not None:
            for piece, lo, hi in pieces:
                if lo <= ix.const < hi:
                    return self.at(piece, self._shifted(idx, dim, lo))
        types = [str(ir.RankedTensorType(pieces[0][0].type).element_type)] * self.V

        def pick(k: int) -> list[str]:
            piece, lo, hi = pieces[k]
            if k == len(pieces) - 1:
                return self.at(piece, self._shifted(idx, dim, lo))
            cond = self.arith("cmpi ult,", ix.name, self.index(hi))
            return self.branch(cond, lambda: self.at(piece, self._shifted(idx, dim, lo)),
                               lambda: pick(k + 1), types)

        return pick(0)

    def _shifted(self, idx: list[Ix], dim: int, by: int) -> list[Ix]:
        out = list(idx)
        if by:
            out[dim] = self.ix_add(idx[dim], self.ix_const(-by))
        return out

    def eval_pad(self, op: ir.Operation, idx: list[Ix]) -> list[str]:
        if len(op.operands) != 1:
            raise CudaCodegenError("a pad with dynamic sizes")
        low, high = _ints(op.attributes["static_low"]), _ints(op.attributes["static_high"])
        block = op.regions[0].blocks[0]
        yielded = block.operations[len(block.operations) - 1].operands[0]
        if isinstance(yielded.owner, ir.Block):
            raise CudaCodegenError("a pad whose value depends on the index")
        if yielded.owner.operation.parent.name == "tensor.pad":
            raise CudaCodegenError("a pad that computes its value")
        src = op.operands[0]
        src_shape = tensor_info(src.type)[0]
        bounds = [(d, low[d], low[d] + src_shape[d]) for d in range(len(src_shape))
                  if low[d] or high[d]]
        return self._guarded(idx, bounds, src, [-lo for lo in low],
                             lambda at: [self.scalar(yielded)] * self.V,
                             str(ir.RankedTensorType(src.type).element_type))

    def eval_insert(self, op: ir.Operation, idx: list[Ix]) -> list[str]:
        if len(op.operands) != 2:
            raise CudaCodegenError("an insert_slice with dynamic offsets, sizes or strides")
        offsets, sizes, strides = (_ints(op.attributes[a]) for a in
                                   ("static_offsets", "static_sizes", "static_strides"))
        src, dest = op.operands[0], op.operands[1]
        src_shape = tensor_info(src.type)[0]
        if len(src_shape) != len(sizes):
            raise CudaCodegenError("a rank-changing insert_slice")
        if any(s != 1 for s in strides):
            return self._strided_insert(idx, offsets, sizes, strides, src, dest)
        dest_shape = tensor_info(dest.type)[0]
        bounds = [(d, offsets[d], offsets[d] + sizes[d]) for d in range(len(sizes))
                  if offsets[d] or sizes[d] != dest_shape[d]]
        return self._guarded(idx, bounds, src, [-o for o in offsets],
                             lambda at: self.at(dest, at),
                             str(ir.RankedTensorType(src.type).element_type))

    def _strided_insert(self, idx: list[Ix], offsets: list[int], sizes: list[int],
                        strides: list[int], src: ir.Value, dest: ir.Value) -> list[str]:
        """A strided insert_slice (a transposed convolution's input spread over zeros):
        `src[(i - o) / s]` where every dim's `o <= i < o + (n - 1) * s + 1` and `(i - o) % s
        == 0`, else `dest[i]`; per lane where a strided dim is the lanes' dim."""
        dims = [d for d in range(len(sizes)) if strides[d] != 1 or offsets[d] or
                sizes[d] != tensor_info(dest.type)[0][d]]
        if any(strides[d] < 1 for d in dims):
            raise CudaCodegenError("an insert_slice with a negative stride")
        if any(idx[d].names or idx[d].step for d in dims):
            return self.per_lane(lambda one: self._strided_insert(one, offsets, sizes, strides,
                                                                  src, dest), idx)
        elt = str(ir.RankedTensorType(src.type).element_type)
        ends = [offsets[d] + (sizes[d] - 1) * strides[d] + 1 for d in range(len(sizes))]
        if all(idx[d].const is not None for d in dims):
            inside = all(offsets[d] <= idx[d].const < ends[d] and
                         (idx[d].const - offsets[d]) % strides[d] == 0 for d in dims)
            return self.at(src, self._strided_source(idx, offsets, strides)) if inside else \
                self.at(dest, idx)
        cond = None
        for d in dims:
            name = idx[d].name
            tests = [self.arith("cmpi ult,", name, self.index(ends[d]))]
            if offsets[d] > 0:
                tests.append(self.arith("cmpi uge,", name, self.index(offsets[d])))
            if strides[d] > 1:
                rel = self.arith("subi", name, self.index(offsets[d])) if offsets[d] else name
                rem = self.arith("remui", rel, self.index(strides[d]))
                tests.append(self.arith("cmpi eq,", rem, self.index(0)))
            for t in tests:
                cond = t if cond is None else self.arith("andi", cond, t, "i1")
        # (A strided dim is among `dims`: `cond` has at least its bound.)
        return self.branch(cond, lambda: self.at(src, self._strided_source(idx, offsets,
                                                                            strides)),
                           lambda: self.at(dest, idx), [elt] * self.V)

    def _strided_source(self, idx: list[Ix], offsets: list[int],
                        strides: list[int]) -> list[Ix]:
        """The source index of a strided insert_slice at destination index `idx`."""
        at = []
        for d, ix in enumerate(idx):
            rel = self.ix_add(ix, self.ix_const(-offsets[d])) if offsets[d] else ix
            at.append(self._divmod(rel, strides[d])[0] if strides[d] > 1 else rel)
        return at

    def _guarded(self, idx: list[Ix], bounds: list[tuple[int, int, int]], src: ir.Value,
                 shift: list[int], outside: Callable[[list[Ix]], list[str]],
                 elt: str) -> list[str]:
        """`src` at `idx + shift` where every (dim, lo, hi) of `bounds` holds, else
        `outside(idx)` (at the same index: per lane, the lane's; found by the e2e suite on
        the H200, an insert_slice whose boundary splits a vector read lane 0's element of
        the destination for every lane)."""
        if not all(self._uniform_range(idx[d], lo, hi) for d, lo, hi in bounds):
            return self.per_lane(lambda one: self._guarded(one, bounds, src, shift,
                                                           outside, elt), idx)

        def inside() -> list[str]:
            return self.at(src, [self.ix_add(ix, self.ix_const(s)) if s else ix
                                 for ix, s in zip(idx, shift)])

        if not bounds:
            return inside()
        if all(idx[d].const is not None for d, _, _ in bounds):
            ok = all(lo <= idx[d].const < hi for d, lo, hi in bounds)
            return inside() if ok else outside(idx)
        cond = None
        for d, lo, hi in bounds:
            for c in ([self.arith("cmpi uge,", idx[d].name, self.index(lo))] if lo > 0 else []) + \
                    [self.arith("cmpi ult,", idx[d].name, self.index(hi))]:
                cond = c if cond is None else self.arith("andi", cond, c, "i1")
        return self.branch(cond, inside, lambda: outside(idx), [elt] * self.V)

    # -- generics

    def eval_generic(self, op: ir.Operation, result: int, idx: list[Ix]) -> list[str]:
        affine = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
        n_out = len(op.results)
        n_in = len(op.operands) - n_out
        out_map = parse_map(ir.ArrayAttr(op.attributes["indexing_maps"])[n_in + result])
        kinds = iterators(op)
        dom: list[Ix | None] = [None] * out_map.num_dims
        for j, d in enumerate(out_map.results):
            if d is not None:
                dom[d] = idx[j]
        reduced = [d for d, k in enumerate(kinds) if k != "parallel"]
        if any(dom[d] is None for d in range(len(dom)) if d not in reduced):
            raise CudaCodegenError("an output map that does not cover the parallel loops")
        if not reduced:
            return self._payload(op, result, dom, n_in, affine, None)
        return self.eval_reduction(op, result, idx, dom, reduced, n_in, affine)

    def eval_reduction(self, op: ir.Operation, result: int, idx: list[Ix], dom: list,
                       reduced: list[int], n_in: int, affine: list) -> list[str]:
        """A reduction over loops the output does not index, at one output vector: the init
        (the outs operand), then the payload folded over the reduced loops in order. A short
        one (at most MAX_WINDOW_POINTS points) is unrolled, the lanes along a parallel loop:
        vector loads where the inputs' contiguous dim (the physical one: the linear index
        `load` computes, through transposes and reshapes) is not reduced, as an NHWC pool
        read through a transpose to NCHW (contiguous C) or a sum over experts (contiguous
        d). A fold that would read a lane at a time along reduced rows (an NCHW 7x7 pool) is
        refused in the direct and transposing shapes where most of its bytes are read so
        (`Stats.row_bytes`): the "reduce" shape
        takes it, along_rows. The "reduce" shape splits its top-level reductions over the
        block's slices (`split_reduction`): a long one (more points), or any one along rows.
        16-bit accumulators are f32 (as torch's reductions), rounded once."""
        if n_in + len(op.results) != len(op.operands):
            raise CudaCodegenError("a reduction whose operands are not ins and outs")
        if len(op.results) != 1:
            if not JOINT_REDUCTIONS:
                raise CudaCodegenError("a reduction with several results")
            return self.eval_joint_reduction(op, result, idx, dom, reduced, n_in, affine)
        ranges = loop_ranges(op)
        extents = [ranges[d] for d in reduced]
        total = math.prod(extents)
        along_rows = self.mode.extra.get("along_rows", False)
        init_value = op.operands[n_in]
        out_elt = str(ir.RankedTensorType(init_value.type).element_type)
        wide = out_elt in ("bf16", "f16")
        acc_elt = "f32" if wide else out_elt
        acc = self.at(init_value, idx)
        if wide:
            acc = [self._cast("extf", v, out_elt, "f32") for v in acc]

        def step(at_point: list[Ix], acc: list[str]) -> list[str]:
            point = list(dom)
            for d, ix in zip(reduced, at_point):
                point[d] = ix
            return self._payload(op, result, point, n_in, affine, (acc, acc_elt, out_elt))

        def point_of(flat: int) -> list[Ix]:
            coords, rest = [], flat
            for e in reversed(extents):
                coords.append(self.ix_const(rest % e))
                rest //= e
            return list(reversed(coords))

        rows_error = CudaCodegenError(ROW_REDUCTION)
        if self.mode.kind == "reduce" and len(self.memo) == 1 and \
                (total > MAX_WINDOW_POINTS or along_rows or self.mode.extra.get("short")):
            return self.split_reduction(op, result, extents, total, step, acc, acc_elt,
                                        out_elt, wide)
        checked = self.mode.kind != "reduce" and not self.mode.extra.get("strided_fold")
        if total > MAX_WINDOW_POINTS:
            # One thread per output vector looping over a long reduction was 3-4x slower
            # than the fallback's tiling on the H200 (bench/RESULTS.md run 66): the rows are
            # split across the block's slices instead (the "reduce" shape). Which reads
            # that shape makes (along the rows or not) is the first point's loads'.
            if checked:
                before = (self.stats.row_bytes, self.stats.fold_bytes)
                self.memo.append({})
                self.folding += 1
                try:
                    step(point_of(0), acc)
                finally:
                    self.folding -= 1
                    self.memo.pop()
                if self._along_rows_since(before):
                    raise rows_error
            raise CudaCodegenError(f"a reduction of {total} points over a non-last dim "
                                   f"(more than the {MAX_WINDOW_POINTS} unrolled here)")
        before = (self.stats.row_bytes, self.stats.fold_bytes)
        self.folding += 1
        try:
            for flat in range(total):
                acc = step(point_of(flat), acc)
        finally:
            self.folding -= 1
        if checked and self._along_rows_since(before):
            raise rows_error
        if wide:
            acc = [self._cast("truncf", v, "f32", out_elt) for v in acc]
        return acc

    def eval_joint_reduction(self, op: ir.Operation, result: int, idx: list[Ix], dom: list,
                             reduced: list[int], n_in: int, affine: list) -> list[str]:
        """A reduction with several results (torch's argmax: the running value and its
        index), at one output vector: every result's accumulator folded together, point by
        point in order, by the payload itself (its own sequential meaning: the first
        extreme, the first NaN), unrolled up to MAX_WINDOW_POINTS points, else in a loop
        nest (`rolled_fold`); the results are computed once per output vector
        (`self.memo`). The direct and transposing shapes only: the "reduce" shape's tree of
        slices has no order to keep."""
        if self.mode.kind == "reduce":
            raise CudaCodegenError("a reduction with several results (split over slices)")
        key = ("joint", id_of(op), self.V, tuple(i.key() for i in idx))
        found = self._find(key)
        if found is not None:
            return found[result]
        n_out = len(op.results)
        maps = ir.ArrayAttr(op.attributes["indexing_maps"])
        if len({str(maps[n_in + j]) for j in range(n_out)}) != 1:
            raise CudaCodegenError("a reduction whose results are written through different "
                                   "maps")
        elts = [str(ir.RankedTensorType(r.type).element_type) for r in op.results]
        if any(e in ("bf16", "f16") for e in elts) and arg_reduction(op) is None:
            raise CudaCodegenError("a 16-bit reduction with several results")
        if any(e in MEMORY_ELEMENT for e in elts):
            raise CudaCodegenError("a bool reduction with several results")
        extents = [loop_ranges(op)[d] for d in reduced]
        total = math.prod(extents)
        accs = [self.at(op.operands[n_in + j], idx) for j in range(n_out)]

        def step(coords: list[Ix], flat: list[str]) -> list[str]:
            point = list(dom)
            for d, ix in zip(reduced, coords):
                point[d] = ix
            parts = [flat[j * self.V:(j + 1) * self.V] for j in range(n_out)]
            return [v for lanes in self._payload(op, 0, point, n_in, affine, None, parts)
                    for v in lanes]

        flat = [v for lanes in accs for v in lanes]
        before = (self.stats.row_bytes, self.stats.fold_bytes)
        self.folding += 1
        try:
            if total > MAX_WINDOW_POINTS:
                # Which reads the loop makes (along the rows or not) is its first point's
                # (probed at constant coordinates, as `eval_reduction` does; dead code).
                self.memo.append({})
                try:
                    step([self.ix_const(0)] * len(extents), flat)
                finally:
                    self.memo.pop()
                if self._along_rows_since(before):
                    raise CudaCodegenError(ROW_REDUCTION)
                flat = self.rolled_fold(extents, step, flat,
                                        [e for e in elts for _ in range(self.V)])
            else:
                for p in itertools.product(*[range(e) for e in extents]):
                    flat = step([self.ix_const(c) for c in p], flat)
        finally:
            self.folding -= 1
        if self.mode.kind != "reduce" and not self.mode.extra.get("strided_fold") and \
                self._along_rows_since(before):
            raise CudaCodegenError(ROW_REDUCTION)
        found = [flat[j * self.V:(j + 1) * self.V] for j in range(n_out)]
        self.memo[-1][key] = found
        return found[result]

    def _along_rows_since(self, before: tuple[int, int]) -> bool:
        """Whether the folds evaluated since `before` (`Stats.row_bytes`, `.fold_bytes`)
        read more bytes along reduced rows, a lane at a time, than otherwise."""
        rows = self.stats.row_bytes - before[0]
        return rows > 0 and rows > self.stats.fold_bytes - before[1]

    def rolled_fold(self, extents: list[int], step, acc: list[str],
                    acc_elt: str | list[str]) -> list[str]:
        """`acc` with the `extents` points folded in order by
        `step(coords, acc)`, in nested scf.for loops (one per extent: no division per point)
        carrying the vector's accumulators (a window too long to unroll, one thread per
        output vector: its neighbours' windows overlap, and the L1 serves the reuse).
        `acc_elt`: the accumulators' type, or one per entry of `acc` (several results)."""
        elts = [acc_elt] * len(acc) if isinstance(acc_elt, str) else list(acc_elt)
        types = ", ".join(elts)
        arity = f":{len(acc)}" if len(acc) > 1 else ""
        coords: list[Ix] = []
        results = []
        for extent in extents:
            k, res = self.fresh("k"), self.fresh("r")
            iters = [self.fresh("acc") for _ in acc]
            self.emit(f"{res}{arity} = scf.for {k} = {self.index(0)} to {self.index(extent)} "
                      f"step {self.index(1)} iter_args("
                      f"{', '.join(f'{a} = {v}' for a, v in zip(iters, acc))}) -> ({types}) {{")
            self.indent += 1
            self.memo.append({})
            coords.append(Ix(k, 0, 1))
            results.append([f"{res}#{j}" for j in range(len(acc))] if len(acc) > 1 else [res])
            acc = iters
        acc = step(coords, acc)
        for res in reversed(results):
            self.emit(f"scf.yield {', '.join(acc)} : {types}")
            self.memo.pop()
            self.indent -= 1
            self.emit("}")
            acc = res
        return acc

    def split_reduction(self, op, result, extents, total, step, init, acc_elt, out_elt,
                        wide) -> list[str]:
        """The "reduce" shape's fold: slice s of the block's S folds points s, s + S, ...
        from the combiner's neutral element, in an scf.for carrying the vector's
        accumulators; the S partials meet in shared memory (one barrier) and every thread
        folds them in slice order, then the init (the outs value)."""
        split = self.mode.extra
        S, C = split["slices"], split["columns"]
        combiner = reduction_combiner(op, result)
        neutral = self.const(_neutral(combiner, acc_elt), acc_elt)
        k = self.fresh("k")
        iters = [self.fresh("acc") for _ in range(self.V)]
        res = self.fresh("r")
        arity = f":{self.V}" if self.V > 1 else ""
        types = ", ".join([acc_elt] * self.V)
        self.emit(f"{res}{arity} = scf.for {k} = {split['slice']} to {self.index(total)} step "
                  f"{self.index(S)} iter_args({', '.join(f'{a} = {neutral}' for a in iters)})"
                  f" -> ({types}) {{")
        self.indent += 1
        self.memo.append({})
        coords = self.delinearize(Ix(k, 0, 1), extents) if len(extents) > 1 else [Ix(k, 0, 1)]
        new = step(coords, iters)
        self.memo.pop()
        self.emit(f"scf.yield {', '.join(new)} : {types}")
        self.indent -= 1
        self.emit("}")
        partial = [f"{res}#{j}" for j in range(self.V)] if self.V > 1 else [res]
        # Bools meet in bytes (no sub-byte memory): zero-extended, combined so, truncated.
        slot_elt = MEMORY_ELEMENT.get(acc_elt, acc_elt)
        if slot_elt != acc_elt:
            partial = [self._cast("extui", v, acc_elt, slot_elt) for v in partial]
        smem = f"%partials{len(self.workgroup)}"
        smem_type = f"memref<{S}x{C * self.V}x{slot_elt}, #gpu.address_space<workgroup>>"
        self.workgroup.append((smem, smem_type))
        base = self.arith("muli", split["column"], self.index(self.V))
        cols = [base if j == 0 else self.arith("addi", base, self.index(j))
                for j in range(self.V)]
        for j, v in enumerate(partial):
            self.emit(f"memref.store {v}, {smem}[{split['slice']}, {cols[j]}] : {smem_type}")
        self.emit("gpu.barrier")
        # A tree over the slices: log2(S) rounds, a barrier after each (outside the branch).
        op_name = combiner.split(".")[1]
        half = S // 2
        while half >= 1:
            low = self.arith("cmpi ult,", split["slice"], self.index(half))
            self.emit(f"scf.if {low} {{")
            self.indent += 1
            other = self.arith("addi", split["slice"], self.index(half))
            for j in range(self.V):
                a, b, n = self.fresh("w"), self.fresh("w"), self.fresh("p")
                self.emit(f"{a} = memref.load {smem}[{split['slice']}, {cols[j]}] : {smem_type}")
                self.emit(f"{b} = memref.load {smem}[{other}, {cols[j]}] : {smem_type}")
                self.emit(f"{n} = arith.{op_name} {a}, {b} : {slot_elt}")
                self.emit(f"memref.store {n}, {smem}[{split['slice']}, {cols[j]}] : {smem_type}")
            self.indent -= 1
            self.emit("}")
            self.emit("gpu.barrier")
            half //= 2
        acc = list(init)
        for j in range(self.V):
            v, n = self.fresh("w"), self.fresh("p")
            self.emit(f"{v} = memref.load {smem}[{self.index(0)}, {cols[j]}] : {smem_type}")
            if slot_elt != acc_elt:
                v = self._cast("trunci", v, slot_elt, acc_elt)
            self.emit(f"{n} = arith.{op_name} {acc[j]}, {v} : {acc_elt}")
            acc[j] = n
        if wide:
            acc = [self._cast("truncf", v, "f32", out_elt) for v in acc]
        return acc

    def _cast(self, kind: str, value: str, src: str, dst: str) -> str:
        n = self.fresh("p")
        self.emit(f"{n} = arith.{kind} {value} : {src} to {dst}")
        return n

    def _payload(self, op: ir.Operation, result: int, dom: list[Ix], n_in: int,
                 affine: list, acc: tuple | None, accs: list | None = None) -> Any:
        """The payload's yielded value `result` at loop point `dom`; for a reduction `acc`
        = (the accumulator's lanes, their type, the outs' type): the outs argument reads
        it (an f32 accumulator of a 16-bit output is read as f32 where the payload widens
        its outs argument), and the new accumulator is returned (before the payload's
        rounding back to 16 bits). With `accs` (each result's accumulator lanes, in their
        own types: `eval_joint_reduction`), every yielded value, as a list per result."""
        def operand_at(i: int) -> list[str]:
            # Any affine map of the loops (a projection, or a window's `oh * s + kh`).
            m = affine[i]
            idx = [self.eval_affine(e, dom, m.n_dims) for e in m.results]
            if not self.phase:
                return self.at(op.operands[i], idx)
            # A staged transpose names a read by its path: the operand's position is part
            # of it (one value read through two maps is two reads).
            self.path.append(("operand", id_of(op), i))
            try:
                return self.at(op.operands[i], idx)
            finally:
                self.path.pop()

        block = op.regions[0].blocks[0]
        yield_op = block.operations[len(block.operations) - 1]
        wanted = yield_op.operands[result]
        env: dict[int, Any] = {}
        for i, arg in enumerate(block.arguments):
            env[value_key(arg)] = (lambda i=i: operand_at(i))
        for j, lanes in enumerate(accs or ()):
            env[value_key(block.arguments[n_in + j])] = list(lanes)
        widened_out = None
        if acc is not None:
            lanes, acc_elt, out_elt = acc
            out_arg = block.arguments[n_in + result]
            if acc_elt == out_elt:
                env[value_key(out_arg)] = list(lanes)
            else:  # the f32 accumulator; the rounded value only if the payload asks
                widened_out = (value_key(out_arg), list(lanes))
                env[value_key(out_arg)] = (
                    lambda: [self._cast("truncf", v, acc_elt, out_elt) for v in lanes])
        every = list(yield_op.operands) if accs is not None else [wanted]
        needed = _needed(block, every)

        def get(v: ir.Value) -> Any:
            key = value_key(v)
            if key in env:
                got = env[key]
                if callable(got):
                    got = env[key] = got()
                return got
            # Defined in the group, outside the payload: a scalar (an index constant: an Ix).
            owner = v.owner
            if isinstance(v.type, ir.IndexType) and not isinstance(owner, ir.Block) and \
                    owner.operation.name == "arith.constant":
                return self.ix_const(ir.IntegerAttr(owner.operation.attributes["value"]).value)
            return [self.scalar(v)] * self.V

        for inner in block.operations:
            inner = inner.operation
            if inner.name == "linalg.yield" or id_of(inner) not in needed:
                continue
            if widened_out is not None and inner.name == "arith.extf" and \
                    value_key(inner.operands[0]) == widened_out[0]:
                env[value_key(inner.results[0])] = widened_out[1]  # no rounding of acc
                continue
            env_out = self.eval_payload_op(inner, dom, get)
            for r, val in zip(inner.results, env_out):
                env[value_key(r)] = val
        if accs is not None:
            return [self._lane_names(g) if isinstance(g, Ix) else g
                    for g in (get(v) for v in every)]
        if widened_out is not None:
            owner = wanted.owner
            if not isinstance(owner, ir.Block) and owner.operation.name == "arith.truncf":
                got = get(owner.operation.operands[0])  # the f32 sum, before its rounding
            else:
                got = [self._cast("extf", v, acc[2], acc[1]) for v in get(wanted)]
            return got
        got = get(wanted)
        return self._lane_names(got) if isinstance(got, Ix) else got

    def eval_payload_op(self, inner: ir.Operation, dom: list[Ix],
                        get: Callable[[ir.Value], Any]) -> list[Any]:
        name = inner.name
        index_type = ir.IndexType.get(inner.context)
        if name == "linalg.index":
            return [dom[ir.IntegerAttr(inner.attributes["dim"]).value]]
        if name == "tensor.extract":
            where = [get(v) for v in inner.operands[1:]]
            where = [w if isinstance(w, Ix) else self._as_ix(w) for w in where]
            return [self.at(inner.operands[0], where)]
        if name == "scf.if" and reports_failed_check(inner):
            self.report_index_error(inner, get)
            return []
        if name == "affine.apply":
            amap = ir.AffineMapAttr(inner.attributes["map"]).value
            operands = [get(v) for v in inner.operands]
            if not all(isinstance(o, Ix) for o in operands) or len(amap.results) != 1:
                raise CudaCodegenError("an affine.apply of values that are not indices")
            return [self.eval_affine(amap.results[0], operands, amap.n_dims)]
        if not name.startswith(PAYLOAD_DIALECTS) or len(inner.regions):
            raise CudaCodegenError(f"payload op '{name}' is not supported")
        if name == "arith.constant" and inner.results[0].type == index_type:
            return [self.ix_const(ir.IntegerAttr(inner.attributes["value"]).value)]
        args = [get(v) for v in inner.operands]
        if name in ("arith.addi", "arith.muli", "arith.subi") and \
                all(isinstance(a, Ix) for a in args):
            a, b = args
            if name == "arith.addi":
                return [self.ix_add(a, b)]
            if name == "arith.subi" and b.const is not None:
                return [self.ix_add(a, self.ix_const(-b.const))]
            if name == "arith.muli" and (a.const is not None or b.const is not None):
                return [self.ix_mul(b, a.const) if a.const is not None else self.ix_mul(a, b.const)]
        divisor = _constant_float(inner.operands[1]) if name == "arith.divf" else None
        if divisor:
            # x / c as x * (1 / c), 1 / c rounded once here: <= 1 ulp more rounding, as the
            # fast emitter divides by a row value; a division is ~10 instructions per lane
            # (attention's `/ sqrt(d)` on every score).
            type_ = str(inner.results[0].type)
            if type_ in ("f32", "f64"):
                inverse = self.const(_float_text(1.0 / divisor, type_), type_)
                out = []
                for lane in (self._lane_names(args[0]) if isinstance(args[0], Ix) else args[0]):
                    product = self.fresh("p")
                    self.emit(f"{product} = arith.mulf {lane}, {inverse} : {type_}")
                    out.append(product)
                return [out]
        lanes = [self._lane_names(a) if isinstance(a, Ix) else a for a in args]
        uniform = all(len(set(lane)) == 1 for lane in lanes)
        count = 1 if uniform else self.V
        results: list[list[str]] = [[] for _ in inner.results]
        for k in range(count):
            names = [self.fresh("p") for _ in inner.results]
            self.emit(payload_op_text(inner, [lane[k] for lane in lanes], names,
                                       self.signatures))
            for r, n in enumerate(names):
                results[r].append(n)
        out: list[Any] = []
        for r, res in zip(inner.results, results):
            lane_vals = res * self.V if uniform else res
            out.append(self._as_ix(lane_vals) if r.type == index_type else lane_vals)
        return out

    def report_index_error(self, branch: ir.Operation, get: Callable[[ir.Value], Any]) -> None:
        """The index check of a gather (`scf.if %bad { func.call @fusec_index_error(check,
        index) }`, fusec.passes.linalg.guard_indices): per lane, where the index is out of
        range, a compare-and-swap of `check + 1` into word 0 of the device status (the first
        failure wins) and, by the winner, the index into word 1 (as the fallback path's
        `report_index_errors_on_device`; the runtime reads the status after the run)."""
        lanes = self._lane_names(get(branch.operands[0])) if isinstance(
            get(branch.operands[0]), Ix) else get(branch.operands[0])
        region = [o.operation for o in branch.regions[0].blocks[0].operations]
        status_type = "memref<2xi64>"
        for k in range(1 if len(set(lanes)) == 1 else self.V):
            self.emit(f"scf.if {lanes[k]} {{")
            self.indent += 1
            local: dict[int, str] = {}

            def name_of(v: ir.Value) -> str:
                if value_key(v) in local:
                    return local[value_key(v)]
                got = get(v)
                return self._lane_names(got)[k] if isinstance(got, Ix) else got[k]

            for op in region:
                if op.name == "scf.yield":
                    continue
                if op.name == "func.call":
                    check, bad = (name_of(v) for v in op.operands)
                    status = self.fresh("st")
                    self.emit(f"{status} = memref.get_global @{INDEX_STATUS} : {status_type}")
                    mark = self.arith("addi", check, self.const(1, "i64"), "i64")
                    old = self.fresh("st")
                    cur = self.fresh("st")
                    self.emit(f"{old} = memref.generic_atomic_rmw {status}[{self.index(0)}] : "
                              f"{status_type} {{")
                    self.emit(f"^bb0({cur}: i64):")
                    free = self.arith("cmpi eq,", cur, self.const(0, "i64"), "i64")
                    chosen = self.fresh("st")
                    self.emit(f"  {chosen} = arith.select {free}, {mark}, {cur} : i64")
                    self.emit(f"  memref.atomic_yield {chosen} : i64")
                    self.emit("}")
                    won = self.arith("cmpi eq,", old, self.const(0, "i64"), "i64")
                    self.emit(f"scf.if {won} {{")
                    self.emit(f"  memref.store {bad}, {status}[{self.index(1)}] : {status_type}")
                    self.emit("}")
                    continue
                if not op.name.startswith(PAYLOAD_DIALECTS) or len(op.regions):
                    raise CudaCodegenError(f"'{op.name}' in an index check")
                names = [self.fresh("p") for _ in op.results]
                self.emit(payload_op_text(op, [name_of(v) for v in op.operands], names,
                                           self.signatures))
                for r, n in zip(op.results, names):
                    local[value_key(r)] = n
            self.indent -= 1
            self.emit("}")

    def eval_affine(self, expr: ir.AffineExpr, operands: list[Ix], n_dims: int) -> Ix:
        """An affine expression of indices (dims, then symbols, bound to `operands`)."""
        if isinstance(expr, ir.AffineConstantExpr):
            return self.ix_const(expr.value)
        if isinstance(expr, ir.AffineDimExpr):
            return operands[expr.position]
        if isinstance(expr, ir.AffineSymbolExpr):
            return operands[n_dims + expr.position]
        if isinstance(expr, ir.AffineAddExpr):
            return self.ix_add(self.eval_affine(expr.lhs, operands, n_dims),
                               self.eval_affine(expr.rhs, operands, n_dims))
        if isinstance(expr, ir.AffineMulExpr):
            lhs, rhs = expr.lhs, expr.rhs
            if isinstance(lhs, ir.AffineConstantExpr):
                lhs, rhs = rhs, lhs
            if isinstance(rhs, ir.AffineConstantExpr):
                return self.ix_mul(self.eval_affine(lhs, operands, n_dims), rhs.value)
        if isinstance(expr, (ir.AffineFloorDivExpr, ir.AffineModExpr)) and \
                isinstance(expr.rhs, ir.AffineConstantExpr) and expr.rhs.value > 0:
            a = self.eval_affine(expr.lhs, operands, n_dims)
            size = expr.rhs.value
            pick = 0 if isinstance(expr, ir.AffineFloorDivExpr) else 1
            if a.names or a.step:
                lanes = [self._divmod(self.lane(a, k), size)[pick].name for k in range(self.V)]
                return self._as_ix(lanes)
            return self._divmod(a, size)[pick]
        raise CudaCodegenError(f"affine expression {expr} is not supported")

    def _as_ix(self, lanes: list[str]) -> Ix:
        if len(set(lanes)) == 1:
            return Ix(lanes[0], 0, 1)
        return Ix(names=tuple(lanes))

    # -- stores

    def store_lanes(self, arg: int, offset: str, lanes: list[str]) -> None:
        eb = ELEMENT_BYTES.get(self.arg_types[arg][1], 4)
        w = max(1, min(len(lanes), VECTOR_BYTES // eb))
        for j in range(0, len(lanes), w):
            off = offset if j == 0 else self.arith("addi", offset, self.index(j))
            self.store_vector(arg, off, lanes[j:j + w])

    # -- kernels

    def build(self) -> str:
        self.prologue: list[str] = []
        self.emit("%tid = gpu.thread_id x")
        self.emit("%bid = gpu.block_id x")
        if self.mode.kind == "direct":
            block, grid = self.emit_direct()
        elif self.mode.kind == "reduce":
            block, grid = self.emit_reduce()
        elif self.mode.extra.get("staged"):
            block, grid = self.emit_staged_transpose()
        else:
            block, grid = self.emit_transpose()
        self.block, self.grid = block, grid
        return self.function_text(block, grid)

    def _last_dim(self) -> int:
        """The output's last dim that is not 1: the lanes' (a pool's [N, C, 1, 1] output
        is vectors along C)."""
        return next((s for s in reversed(self.out_shape) if s != 1), 1)

    def emit_reduce(self) -> tuple[int, int]:
        """The "reduce" shape (a long reduction over a non-last dim): C output vectors per
        block (one 128-byte line of a row), S = 256 / C slices of the reduced points each;
        every thread evaluates its vector's expression (the reduction folds its slice's
        points, `split_reduction`), the slice-0 threads store."""
        numel = numel_of(self.out_shape)
        along_rows = self.mode.extra.get("along_rows", False)
        shape = cost_model.split_reduction_shape(
            numel, self._last_dim(), self.eb, self.device, along_rows=along_rows,
            points=split_points(self.group)
            if along_rows or self.mode.extra.get("short") else None)
        self.shape = shape
        self.V = shape.vec
        nvec = numel // shape.vec
        if along_rows:
            # A warp's consecutive threads are consecutive slices: consecutive points of
            # one row.
            column = self.arith("divui", "%tid", self.index(shape.slices))
            slice_ = self.arith("remui", "%tid", self.index(shape.slices))
        else:
            column = self.arith("remui", "%tid", self.index(shape.columns))
            slice_ = self.arith("divui", "%tid", self.index(shape.columns))
        ov = self.arith("addi", self.arith("muli", "%bid", self.index(shape.columns)), column)
        ok = self.arith("andi", self.arith("cmpi ult,", ov, self.index(nvec)),
                        self.arith("cmpi eq,", slice_, self.index(0)), "i1")
        ov = self.arith("minui", ov, self.index(nvec - 1))
        off = self.arith("muli", ov, self.index(shape.vec))
        self.mode.extra.update(slices=shape.slices, columns=shape.columns, column=column,
                               slice=slice_)
        idx = self.delinearize(Ix(off, 1, shape.vec), self.out_shape)
        values = [self.at(v, idx) for v in self.outputs]
        self.emit(f"scf.if {ok} {{")
        self.indent += 1
        for i, lanes in enumerate(values):
            self.store_lanes(self.num_inputs + i, off, lanes)
        self.indent -= 1
        self.emit("}")
        return shape.block, shape.grid

    def emit_direct(self) -> tuple[int, int]:
        numel = numel_of(self.out_shape)
        shape = cost_model.movement_launch_shape(numel, self._last_dim(), self.eb,
                                                 self.device, points=fold_points(self.group))
        self.shape = shape
        self.V = shape.vec
        tile_elems = shape.block * shape.unroll * shape.vec
        self.emit(f"scf.for %tile = %bid to {self.index(shape.tiles)} "
                  f"step {self.index(shape.grid)} {{")
        self.indent += 1
        base = self.arith("addi", self.arith("muli", "%tile", self.index(tile_elems)),
                          self.arith("muli", "%tid", self.index(shape.vec)))
        chunks = []
        for c in range(shape.unroll):
            off = base if c == 0 else self.arith("addi", base,
                                                 self.index(c * shape.block * shape.vec))
            cond = None
            if shape.guarded:
                cond = self.arith("cmpi ult,", off, self.index(numel))
                off = self.arith("minui", off, self.index(numel - shape.vec))
            idx = self.delinearize(Ix(off, 1, shape.vec), self.out_shape)
            chunks.append((off, cond, [self.at(v, idx) for v in self.outputs]))
        for off, cond, values in chunks:
            if cond:
                self.emit(f"scf.if {cond} {{")
                self.indent += 1
            for i, lanes in enumerate(values):
                self.store_lanes(self.num_inputs + i, off, lanes)
            if cond:
                self.indent -= 1
                self.emit("}")
        self.indent -= 1
        self.emit("}")
        return shape.block, shape.grid


def _constant_float(value: ir.Value) -> float | None:
    """The value of a float constant, or of casts of one (torch's f64 scale rounded to the
    payload's type, 16-bit widening's extf), rounded as the casts round; else None."""
    casts = []
    owner = value.owner
    while not isinstance(owner, ir.Block):
        op = owner.operation
        if op.name == "arith.constant" and isinstance(op.attributes["value"], ir.FloatAttr):
            result = float(ir.FloatAttr(op.attributes["value"]).value)
            for cast in reversed(casts):
                result = _round_to(result, str(cast.results[0].type))
                if result is None:
                    return None
            return result
        if op.name not in ("arith.extf", "arith.truncf") or len(casts) > 3:
            return None
        casts.append(op)
        owner = op.operands[0].owner
    return None


def _round_to(value: float, type_: str) -> float | None:
    """`value` rounded to nearest-even in `type_` (f64, f32, f16, bf16), else None."""
    import numpy as np

    if type_ == "f64":
        return value
    if type_ == "f32":
        return float(np.float32(value))
    if type_ == "f16":
        return float(np.float16(value))
    if type_ == "bf16":
        from fusec.passes.payload import bf16_bits, from_bf16_bits

        return float(from_bf16_bits(bf16_bits(value)))
    return None


def _float_text(value: float, type_: str) -> str:
    """`value` rounded to `type_` (f32: through numpy), as MLIR's float literal."""
    import numpy as np

    if type_ == "f32":
        value = float(np.float32(value))
    return repr(value)


def _needed(block: ir.Block, wanted: list[ir.Value]) -> set[int]:
    """The payload ops `wanted` needs, and every index check with what it reads."""
    from fusec.compiler.targets.cuda.analysis import needed_ops

    roots = list(wanted)
    checks = []
    for op in block.operations:
        if reports_failed_check(op.operation):
            checks.append(id_of(op.operation))
            roots.append(op.operation.operands[0])
            for inner in op.operation.regions[0].blocks[0].operations:
                roots += [v for v in inner.operation.operands
                          if not isinstance(v.owner, ir.Block) and
                          v.owner.operation.parent.name != "scf.if"]
    return needed_ops(block, roots) | set(checks)


@dataclass
class MovementKernel:
    text: str
    block: int
    grid: int
    info: dict
    ops: list  # the group's ops the kernel runs (data movement included), for the report


# Kernels (or refusals) already built (built.py): three builds of each of ResNet-18's 46
# movement kernels were 28 of its 42 s of compile for cuda.
_BUILT = Built()


def movement_kernel(group: ir.Operation, symbol: str, constants: list[ir.Operation],
                    device: CudaDevice = H200) -> MovementKernel:
    """The data-movement kernel of `group` (a `CudaCodegenError` where the family refuses
    it): the direct shape, or the transposing one where it reads fewer bytes in strided
    loads (tried for each output dim the inputs could be contiguous along). Built once per
    group body and device (built.py)."""
    built = _BUILT.get((body_text(group), device, len(constants), STAGED_TRANSPOSE,
                        JOINT_REDUCTIONS),
                       lambda: _build_movement_kernel(group, PROBE_SYMBOL, constants, device))
    return dataclasses.replace(built, text=renamed(built.text, symbol),
                               info=copy.deepcopy(built.info), ops=list(built.ops))


def _build_movement_kernel(group: ir.Operation, symbol: str, constants: list[ir.Operation],
                           device: CudaDevice) -> MovementKernel:
    """movement_kernel's build."""
    try:
        best = MovementEmitter(group, symbol, constants, device)
        text = best.build()
    except CudaCodegenError as refusal:
        long = "more than the" in str(refusal) and "reduction of" in str(refusal)
        rows = ROW_REDUCTION in str(refusal)
        if not (long or rows):
            raise
        # A long reduction: split over a block's slices; one over the inputs' contiguous
        # dim (BatchNorm's statistics: N, H, W per channel), one output element per block,
        # its slices reading consecutive elements of the rows.
        mode = _Mode("reduce", extra={"along_rows": rows})
        try:
            best = MovementEmitter(group, symbol, constants, device, mode)
            text = best.build()
        except CudaCodegenError:
            if not rows or long:
                raise
            # The rows shape does not take it (a nested reduction): the direct fold, its
            # loads a lane at a time.
            best = MovementEmitter(group, symbol, constants, device,
                                   _Mode("direct", extra={"strided_fold": True}))
            text = best.build()
    if best.mode.kind == "direct" and _split_short_fold(best, device):
        # A short reduction on too few threads: its points split over a block's slices.
        try:
            trial = MovementEmitter(group, symbol, constants, device,
                                    _Mode("reduce", extra={"along_rows": False, "short": True}))
            best, text = trial, trial.build()
        except CudaCodegenError:
            pass
    if best.stats.strided_bytes and len(best.out_shape) > 1:
        staged = STAGED_TRANSPOSE and staged_refusal(group) is None
        for p in range(lanes_dim(best.out_shape)):
            if best.out_shape[p] == 1:
                continue
            # The plain transpose, then (where the group's reads disagree on the contiguous
            # dim) the staged one, which reads each input in the phase that suits it.
            for extra in ({}, {"staged": True}) if staged else ({},):
                try:
                    trial = MovementEmitter(group, symbol, constants, device,
                                            _Mode("transpose", p, extra=dict(extra)))
                    trial_text = trial.build()
                except CudaCodegenError:
                    continue
                if trial.stats.strided_bytes * 2 < best.stats.strided_bytes:
                    best, text = trial, trial_text
    kind = best.mode.kind
    info = {"path": "movement", "shape": kind,
            "launch": {"block": best.block, "grid": best.grid,
                       **({"vec": best.shape.vec, "unroll": best.shape.unroll}
                          if kind == "direct" else
                          {"vec": best.shape.vec, "columns": best.shape.columns,
                           "slices": best.shape.slices} if kind == "reduce" else
                          {"tile": best.shape.tile, "vec_p": best.shape.vec_p,
                           "vec_l": best.shape.vec_l, "p_dim": best.mode.p,
                           "staged": bool(best.mode.extra.get("staged"))})},
            "strided_load_bytes_per_thread_pass": best.stats.strided_bytes}
    ops = [o.operation.name for o in group.regions[0].blocks[0].operations
           if o.operation.name.startswith(("linalg.", "tensor.")) and
           o.operation.name != "tensor.empty"]
    return MovementKernel(text, best.block, best.grid, info, ops)


def _split_short_fold(direct: MovementEmitter, device: CudaDevice) -> bool:
    """Whether the direct build `direct` folds reductions (or windows too long to unroll)
    the cost model would rather split over a block's slices (`cost_model.fold_prefers_split`);
    short windows stay unrolled."""
    points = split_points(direct.group)
    return points > 1 and cost_model.fold_prefers_split(
        numel_of(direct.out_shape), direct._last_dim(), direct.eb, points, device)


def movement_refusal(group: ir.Operation, device: CudaDevice = H200) -> str | None:
    """Why the data-movement family does not take `group` (None: it does)."""
    from fusec.compiler.targets.cuda.emitter import is_weight

    weights = [w for w in group.regions[0].blocks[0].operations if is_weight(w)]
    try:
        movement_kernel(group, "fusec_probe", weights, device)
    except CudaCodegenError as refusal:
        return str(refusal)
    return None
