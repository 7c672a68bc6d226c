"""--fusion-cpu-conv: 2-D convolutions in CPU kernels as im2col + the matmul microkernel.

A convolution tile (NCHW input, FCHW filter: torch's `Conv2d`, after the
`tiled` stage generalised it and `--fusion-cpu-loop-order` ordered its loops) otherwise
becomes a 7-deep scalar loop nest that LLVM vectorizes along the output's width at best:
7-25 GFLOP/s on one core here, where oneDNN does 100-150. This pass rewrites each such
`linalg.generic` of a bufferized CPU kernel into two ops the rest of the pipeline builds
well:

    col[n, c, kh, kw, oh, ow] = x[n, c, oh * s0 + kh * d0 + p0, ow * s1 + kw * d1 + p1]
    out[n, f, (oh, ow)] += w[f, (c, kh, kw)] * col[n, (c, kh, kw), (oh, ow)]

The first is a gather into a buffer of the tile's own (K = C * KH * KW rows, P = OH * OW
columns, contiguous); the second is a matmul (A = the filter, shared by every image; B =
col; C = the output tile viewed as [N, F, P]) that `--fusion-cpu-matmul` then builds as its
register-blocked microkernel. NCHW stays NCHW: the filter is already [F, K] and the
output's pixels are contiguous, so neither side needs a transpose. The padding is wherever
the kernel put it (the `tensor.pad` before the convolution is a buffer by now; `p0`, `p1`
are the map's constant offsets into it).

Exact: each output is the same sum of the same products; only the order of the additions
changes (as `--fusion-reassociate-reductions` already allows for the convolution's
reduction).

Grouped convolutions (torch-mlir's `conv_2d_ngchw_gfchw`, generalised: x[n, g, c, h, w],
w[g, f, c, kh, kw], y[n, g, f, oh, ow]; `grouped_conv_loops`) have the group as a second
batch dim everywhere: col[n, g, (c, kh, kw), (oh, ow)], one matmul batched over (n, g),
each group's filter [f, (c, kh, kw)] its A. As LLVM's loops they were 75% of ResNeXt-50's
CPU time (0.26x eager); after, its whole run 270 -> 109 ms (2 threads, one process each).

Left alone: other element types (the microkernel is f32), depthwise convolutions (another
op, `--fusion-cpu-vectorize`'s windows), pooling (no multiply-accumulate), and a tile whose output rows
are not contiguous (a tile narrower than the output's width: its pixels cannot be one
matmul column range) or whose filter is not contiguous per output channel.

Chunks: a whole image's col buffer is K x P floats (7 MB for a ResNet's 64-channel 3x3
layer at 56x56), written by the gather and read back by the matmul from memory. So each
convolution is first tiled along its output rows (`transform.structured.tile_using_for`,
which computes the input window a chunk reads) into chunks whose col buffer fits in half a
core's L2 (`cost_model.cpu_conv_rows`: 4 rows of 56 there, 512 KB); the buffer is
allocated once per chunk loop, reused by every chunk.

Options: `rows` (output rows per chunk; 0, the default: the cost model's; -1: one chunk),
`max-col-kb` (default 0: no limit): the largest col buffer the pass builds, in KB; a larger
one leaves the convolution as it is.

Before (3x3, stride 1, on a padded 1x64x58x58 input):
    linalg.generic {indexing_maps = [(n, f, oh, c, kh, kw, ow) -> (n, c, oh + kh, kw + ow),
                                     (n, f, oh, c, kh, kw, ow) -> (f, c, kh, kw),
                                     (n, f, oh, c, kh, kw, ow) -> (n, f, oh, ow)], ...}
        ins(%x, %w : memref<1x64x58x58xf32>, memref<64x64x3x3xf32>)
        outs(%y : memref<1x64x56x56xf32>)
After:
    %col = memref.alloc() : memref<1x64x3x3x56x56xf32>
    linalg.generic {indexing_maps = [(n, c, kh, kw, oh, ow) -> (n, c, oh + kh, ow + kw),
                                     identity]} ins(%x) outs(%col)       // the gather
    %b = memref.collapse_shape %col [[0], [1, 2, 3], [4, 5]] : ... to memref<1x576x3136xf32>
    %a = memref.collapse_shape %w [[0], [1, 2, 3]] : ... to memref<64x576xf32>
    %c = memref.collapse_shape %y [[0], [1], [2, 3]] : ... to memref<1x64x3136xf32>
    linalg.generic {indexing_maps = [(n, f, p, k) -> (f, k), (n, f, p, k) -> (n, k, p),
                                     (n, f, p, k) -> (n, f, p)], ...}
        ins(%a, %b) outs(%c)                                             // the matmul
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes import attributes, cost_model
from fusec.passes.cpu.cpu_matmul import (affine_map_attr, apply_script, collapsible,
                                         collapse_view, is_multiply_accumulate,
                                         iterator_kinds, iterator_types_attr, map_dims,
                                         memref_strides, multiply_accumulate)
from fusec.passes.grouping import walk_ops
from fusec.passes.registry import Pass, register
from mlir import ir
from mlir.dialects import arith, linalg, memref

TAG = attributes.CPU_CONV
CHUNK_TAG = attributes.CPU_CONV_CHUNK


@dataclass
class Conv:
    """A convolution generic's loop dims (positions in its loop nest) and geometry."""

    n: int
    f: int
    oh: int
    ow: int
    c: int
    kh: int
    kw: int
    strides: tuple[int, int]
    dilations: tuple[int, int]
    offsets: tuple[int, int]  # constant offsets into the (padded) input's rows and columns
    g: int | None = None  # the group dim of a grouped convolution (NGCHW / GFCHW), or None

    @property
    def lead(self) -> int:
        """The output's dims before its channels: n, and g for a grouped convolution."""
        return 1 if self.g is None else 2

    def groups(self, y_shape: list[int]) -> int:
        """The groups in a tile whose output has `y_shape` (1 without groups; a dynamic
        extent counts as one)."""
        return 1 if self.g is None else max(y_shape[1], 1)


def _linear(expr: ir.AffineExpr) -> dict[int, int] | None:
    """An affine expression as {dim: coefficient, -1: constant}, or None when not linear."""
    if isinstance(expr, ir.AffineDimExpr):
        return {expr.position: 1}
    if isinstance(expr, ir.AffineConstantExpr):
        return {-1: expr.value}
    if isinstance(expr, ir.AffineAddExpr):
        lhs, rhs = _linear(expr.lhs), _linear(expr.rhs)
        if lhs is None or rhs is None:
            return None
        for d, k in rhs.items():
            lhs[d] = lhs.get(d, 0) + k
        return lhs
    if isinstance(expr, ir.AffineMulExpr):
        lhs, rhs = _linear(expr.lhs), _linear(expr.rhs)
        if lhs is None or rhs is None:
            return None
        if set(rhs) == {-1}:
            return {d: k * rhs[-1] for d, k in lhs.items()}
        if set(lhs) == {-1}:
            return {d: k * lhs[-1] for d, k in rhs.items()}
    return None


def _window(expr: ir.AffineExpr, out_dim: int, window_dim: int) -> tuple[int, int, int] | None:
    """(stride, dilation, offset) of an input index `out * s + window * d + offset`."""
    terms = _linear(expr)
    if terms is None or set(terms) - {-1} != {out_dim, window_dim}:
        return None
    stride, dilation = terms[out_dim], terms[window_dim]
    if stride <= 0 or dilation <= 0:
        return None
    return stride, dilation, terms.get(-1, 0)


def match_conv(op: ir.Operation) -> Conv | None:
    """The dims of a 2-D NCHW/FCHW f32 convolution `linalg.generic` on memrefs, one group
    (`conv_loops`) or several (`grouped_conv_loops`), or None."""
    if len(op.results) or not all(isinstance(v.type, ir.MemRefType) for v in op.operands):
        return None
    return conv_loops(op) or grouped_conv_loops(op)


def grouped_conv_loops(op: ir.Operation) -> Conv | None:
    """The dims of a grouped 2-D f32 convolution `linalg.generic` (torch-mlir's
    `conv_2d_ngchw_gfchw` generalised: x[n, g, c, h, w], w[g, f, c, kh, kw],
    y[n, g, f, oh, ow]), or None. The tiling does not ask for these (`conv_loops` only):
    their kernels are tiled as any other contraction."""
    shaped = _conv_shaped(op, 5)
    if shaped is None:
        return None
    iterators, x, y_dims, w_dims = shaped
    n, g, f, oh, ow = y_dims
    g2, f2, c, kh, kw = w_dims
    if (g2, f2) != (g, f) or any(iterators[d] != "parallel" for d in y_dims):
        return None
    if any(iterators[d] != "reduction" for d in (c, kh, kw)):
        return None
    if _linear(x[0]) != {n: 1} or _linear(x[1]) != {g: 1} or _linear(x[2]) != {c: 1}:
        return None
    rows, cols = _window(x[3], oh, kh), _window(x[4], ow, kw)
    if rows is None or cols is None or not is_multiply_accumulate(op):
        return None
    return Conv(n, f, oh, ow, c, kh, kw, (rows[0], cols[0]), (rows[1], cols[1]),
                (rows[2], cols[2]), g)


def _conv_shaped(op: ir.Operation, rank: int):
    """(iterators, x map's results, y dims, w dims) of an f32 `linalg.generic` with three
    operands of `rank` dims, rank + 3 loops of which 3 reductions, whose output and filter
    maps are permutations of distinct dims; None otherwise."""
    if op.name != "linalg.generic" or len(op.operands) != 3:
        return None
    types = [v.type for v in op.operands]
    if not all(isinstance(t, ir.ShapedType) for t in types):
        return None
    if any(str(ir.ShapedType(t).element_type) != "f32" or ir.ShapedType(t).rank != rank
           for t in types):
        return None
    iterators = iterator_kinds(op)
    if len(iterators) != rank + 3 or iterators.count("reduction") != 3:
        return None
    x_map, w_map, y_map = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    y_dims, w_dims = map_dims(y_map), map_dims(w_map)
    if y_dims is None or w_dims is None or len(set(y_dims)) != rank \
            or len(set(w_dims)) != rank:
        return None
    return iterators, list(x_map.results), y_dims, w_dims


def conv_loops(op: ir.Operation) -> Conv | None:
    """The dims of a 2-D NCHW/FCHW f32 convolution `linalg.generic` (on tensors or memrefs:
    the tiling asks before bufferization which roots this pass will build), or None."""
    shaped = _conv_shaped(op, 4)
    if shaped is None:
        return None
    iterators, x, y_dims, w_dims = shaped
    n, f, oh, ow = y_dims
    f2, c, kh, kw = w_dims
    if f2 != f or any(iterators[d] != "parallel" for d in y_dims):
        return None
    if any(iterators[d] != "reduction" for d in (c, kh, kw)):
        return None
    if _linear(x[0]) != {n: 1} or _linear(x[1]) != {c: 1}:
        return None
    rows, cols = _window(x[2], oh, kh), _window(x[3], ow, kw)
    if rows is None or cols is None or not is_multiply_accumulate(op):
        return None
    return Conv(n, f, oh, ow, c, kh, kw, (rows[0], cols[0]), (rows[1], cols[1]),
                (rows[2], cols[2]))


def _subview(source: ir.Value, offsets: list[int], sizes: list[int | ir.Value]) -> ir.Value:
    """A unit-stride `memref.subview` of `source` at static `offsets` (sizes static or
    dynamic), its strided result type spelled out (mixed sizes need it)."""
    strides, offset = memref_strides(source.type)
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    if offset != dynamic:
        for at, stride in zip(offsets, strides):
            if at:
                offset = dynamic if stride == dynamic else offset + at * stride
    shape = [v if isinstance(v, int) else ir.ShapedType.get_dynamic_size() for v in sizes]
    t = ir.MemRefType(source.type)
    result = ir.MemRefType.get(shape, t.element_type, ir.StridedLayoutAttr.get(offset, strides))
    return memref.subview(source, offsets, sizes, [1] * len(sizes), result_type=result)


def _copy_generic(source: ir.Value, dest: ir.Value, source_map: ir.AffineMapAttr,
                  dest_map: ir.AffineMapAttr, rank: int, element: ir.Type) -> None:
    """A parallel `linalg.generic` over `dest` writing `source` read through `source_map`."""
    gather = linalg.GenericOp([], [source], [dest], ir.ArrayAttr.get([source_map, dest_map]),
                              iterator_types_attr(["parallel"] * rank))
    block = gather.regions[0].blocks.append(element, element)
    with ir.InsertionPoint(block):
        linalg.YieldOp([block.arguments[0]])


def rewrite(op: ir.Operation, conv: Conv, max_col_bytes: int = 0) -> bool:
    """Replace the convolution `op` by im2col + a matmul; False (nothing changed) when its
    tile's views cannot be collapsed or the col buffer is over `max_col_bytes`. A grouped
    convolution (`conv.g`) has the group as a second batch dim everywhere: col[n, g, (c, kh,
    kw), (oh, ow)], the filter [g, f, (c, kh, kw)], the output [n, g, f, (oh, ow)], and the
    matmul is batched over (n, g): one per group, each group's filter its A."""
    x, w, y = op.operands
    y_shape = ir.MemRefType(y.type).shape
    w_shape = ir.MemRefType(w.type).shape
    lead = conv.lead
    # The images (groups) and the output channels may be a partial tile's dynamic extents;
    # the window and the pixels are what the matmul's K and columns are made of.
    if any(e < 0 for e in list(y_shape[lead + 1:]) + list(w_shape[lead:])):
        return False
    batch, out_h, out_w = y_shape[0], y_shape[lead + 1], y_shape[lead + 2]
    channels, win_h, win_w = w_shape[lead], w_shape[lead + 1], w_shape[lead + 2]
    y_groups = [[i] for i in range(lead + 1)] + [[lead + 1, lead + 2]]
    w_groups = [[i] for i in range(lead)] + [[lead, lead + 1, lead + 2]]
    if not (collapsible(y.type, y_groups) and collapsible(w.type, w_groups)):
        return False
    k, p = channels * win_h * win_w, out_h * out_w
    p_pad = cost_model.cpu_conv_padded_pixels(p)
    if max_col_bytes and 4 * max(batch, 1) * conv.groups(y_shape) * k * p_pad > max_col_bytes:
        return False
    ctx = op.context
    (s0, s1), (d0, d1), (p0, p1) = conv.strides, conv.dilations, conv.offsets
    const = ir.AffineConstantExpr.get
    f32 = ir.F32Type.get(ctx)
    index = ir.IndexType.get(ctx)
    aligned = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 64)
    with ir.InsertionPoint(op), op.location:
        def extent(value: ir.Value, i: int) -> int | ir.Value:
            size = ir.MemRefType(value.type).shape[i]
            return size if size >= 0 else memref.DimOp(value, arith.ConstantOp(index,
                                                                                i).result).result

        def alloc(shape: list[int | ir.Value]) -> ir.Value:
            static = [v if isinstance(v, int) else ir.ShapedType.get_dynamic_size()
                      for v in shape]
            return memref.AllocOp(ir.MemRefType.get(static, f32),
                                  [v for v in shape if isinstance(v, ir.Value)], [],
                                  alignment=aligned).result

        # The leading (batch) extents: images, and groups for a grouped convolution.
        leading = [extent(y, i) for i in range(lead)]
        channels_out = extent(y, lead)
        window = [channels, win_h, win_w]
        if p_pad == p:
            # col's dims: (n, [g,] c, kh, kw, oh, ow); the gather walks the output's width
            # innermost, reading the input's rows.
            r = lead + 5
            d = [ir.AffineDimExpr.get(i, ctx) for i in range(r)]
            col = alloc(leading + window + [out_h, out_w])
            c_, kh_, kw_, oh_, ow_ = d[lead:]
            x_map = affine_map_attr(r, d[:lead] + [c_, oh_ * s0 + kh_ * d0 + const(p0),
                                                   ow_ * s1 + kw_ * d1 + const(p1)])
            _copy_generic(x, col, x_map, affine_map_attr(r, d), r, f32)
            b = collapse_view(col, [[i] for i in range(lead)]
                              + [[lead, lead + 1, lead + 2], [lead + 3, lead + 4]])
        else:
            # The pixels padded to whole vectors (a 7x7 image's 49 to 64): col's dims are
            # (n, [g,] c, kh, kw, q) with q = oh * OW + ow; the pad columns are zeros, met by
            # the filter in the matmul and dropped after it.
            r = lead + 4
            d = [ir.AffineDimExpr.get(i, ctx) for i in range(r)]
            col = alloc(leading + window + [p_pad])
            c_, kh_, kw_, q = d[lead:]
            q_row = ir.AffineFloorDivExpr.get(q, const(out_w))
            q_col = ir.AffineModExpr.get(q, const(out_w))
            x_map = affine_map_attr(r, d[:lead] + [c_, q_row * s0 + kh_ * d0 + const(p0),
                                                   q_col * s1 + kw_ * d1 + const(p1)])
            shape = leading + window
            zero = arith.ConstantOp(f32, 0.0).result
            linalg.fill(zero, outs=[_subview(col, [0] * (r - 1) + [p], shape + [p_pad - p])])
            valid = _subview(col, [0] * r, shape + [p])
            _copy_generic(x, valid, x_map, affine_map_attr(r, d), r, f32)
            b = collapse_view(col, [[i] for i in range(lead)]
                              + [[lead, lead + 1, lead + 2], [lead + 3]])
        a = collapse_view(w, w_groups)
        c = out = collapse_view(y, y_groups)
        if p_pad != p:
            # The matmul writes a staging buffer as wide as col; the output's own values
            # (the convolution's init: zeros, a bias) go in and the result comes out.
            c = alloc(leading + [channels_out, p_pad])
            linalg.fill(zero, outs=[_subview(c, [0] * (lead + 1) + [p],
                                             leading + [channels_out, p_pad - p])])
            staged = _subview(c, [0] * (lead + 2), leading + [channels_out, p])
            linalg.copy(out, outs=[staged])
        # The matmul's dims: (n, [g,] f, p, k); the filter has no image dim.
        e = [ir.AffineDimExpr.get(i, ctx) for i in range(lead + 3)]
        batch_dims, f_, p_, k_ = e[:lead], e[lead], e[lead + 1], e[lead + 2]
        mm = multiply_accumulate(a, b, c, [affine_map_attr(lead + 3, batch_dims[1:] + [f_, k_]),
                                           affine_map_attr(lead + 3, batch_dims + [k_, p_]),
                                           affine_map_attr(lead + 3, batch_dims + [f_, p_])],
                                 ["parallel"] * (lead + 2) + ["reduction"])
        if p_pad != p:
            linalg.copy(staged, outs=[out])
    f = ir.MemRefType(y.type).shape[lead]
    padded = f" (pixels padded to {p_pad})" if p_pad != p else ""
    grouped = "" if conv.g is None else " per group"
    mm.operation.attributes[TAG] = ir.StringAttr.get(
        f"{channels}x{win_h}x{win_w} window, stride {list(conv.strides)}, dilation "
        f"{list(conv.dilations)}: im2col [{k}, {p}] per image{grouped}, matmul "
        f"[{f if f >= 0 else '?'}, {k}] @ [{k}, {p}]{padded}")
    op.erase()
    return True


def _chunk_script(i: int, conv: Conv, rows: int) -> str:
    """Transform IR: tile the convolution tagged `i` by `rows` output rows (one loop)."""
    any_op = "!transform.any_op"
    sizes = [0] * (conv.lead + 6)
    sizes[conv.oh] = rows
    return (f"%c{i} = transform.structured.match attributes{{{CHUNK_TAG} = {i} : i64}} in "
            f"%root : ({any_op}) -> {any_op}\n    "
            f"%c{i}_t, %c{i}_l = transform.structured.tile_using_for %c{i} tile_sizes "
            f"{sizes} : ({any_op}) -> ({any_op}, {any_op})")


def _chunk_rows(op: ir.Operation, conv: Conv, rows: int) -> int:
    """The output rows per im2col chunk for `op` (`rows` > 0: that many; 0: the cost
    model's), or 0 when the whole tile is one chunk."""
    lead = conv.lead
    y_shape = ir.MemRefType(op.operands[2].type).shape
    w_shape = ir.MemRefType(op.operands[1].type).shape
    out_h, out_w = y_shape[lead + 1], y_shape[lead + 2]
    if out_h < 0 or out_w < 0 or any(e < 0 for e in w_shape[lead:]):
        return 0
    if rows <= 0:
        # A tile's groups share the chunk's col buffer: each holds its own window's rows.
        rows = cost_model.cpu_conv_rows(out_h, out_w,
                                        conv.groups(y_shape) * w_shape[lead]
                                        * w_shape[lead + 1] * w_shape[lead + 2])
    rows = min(rows, out_h)
    return rows if rows < out_h and out_h % rows == 0 else 0


@register
@dataclass
class CpuConvPass(Pass):
    """Rewrite each f32 2-D convolution of a bufferized CPU kernel as im2col + a matmul."""

    ARGUMENT = "fusion-cpu-conv"
    max_col_kb: int = 0
    # Output rows per im2col chunk; 0: the cost model's (`cpu_conv_rows`), -1: no chunks.
    rows: int = 0

    def run(self, module: ir.Operation) -> None:
        # First the chunks: each convolution tiled along its output rows (upstream's tiling
        # computes the input window each chunk reads), so that the col buffer of a chunk
        # stays in cache between the gather and the matmul.
        scripts = []
        if self.rows >= 0:
            i64 = ir.IntegerType.get_signless(64)
            for op in walk_ops(module, lambda o: o.name == "linalg.generic"):
                conv = match_conv(op)
                rows = _chunk_rows(op, conv, self.rows) if conv is not None else 0
                if rows:
                    op.attributes[CHUNK_TAG] = ir.IntegerAttr.get(i64, len(scripts))
                    scripts.append(_chunk_script(len(scripts), conv, rows))
        if scripts:
            apply_script(module, "\n    ".join(scripts))
        for op in walk_ops(module, lambda o: o.name == "linalg.generic"):
            if CHUNK_TAG in op.attributes:
                del op.attributes[CHUNK_TAG]
            conv = match_conv(op)
            if conv is not None:
                rewrite(op, conv, self.max_col_kb * 1024)
