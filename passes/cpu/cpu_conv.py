"""--fusion-cpu-conv: 2-D convolutions in CPU kernels as im2col + the matmul microkernel.

A convolution tile (NCHW input, FCHW filter, one group: torch's `Conv2d`, after the
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

Left alone: other element types (the microkernel is f32), grouped and depthwise
convolutions (another op), pooling (no multiply-accumulate), and a tile whose output rows
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
    """The dims of a 2-D NCHW/FCHW f32 convolution `linalg.generic` on memrefs, or None."""
    if len(op.results) or not all(isinstance(v.type, ir.MemRefType) for v in op.operands):
        return None
    return conv_loops(op)


def conv_loops(op: ir.Operation) -> Conv | None:
    """The dims of a 2-D NCHW/FCHW f32 convolution `linalg.generic` (on tensors or memrefs:
    the tiling asks before bufferization which roots this pass will build), or None."""
    if op.name != "linalg.generic" or len(op.operands) != 3:
        return None
    types = [v.type for v in op.operands]
    if not all(isinstance(t, ir.ShapedType) for t in types):
        return None
    if any(str(ir.ShapedType(t).element_type) != "f32" or ir.ShapedType(t).rank != 4
           for t in types):
        return None
    iterators = iterator_kinds(op)
    if len(iterators) != 7 or iterators.count("reduction") != 3:
        return None
    x_map, w_map, y_map = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    y_dims, w_dims = map_dims(y_map), map_dims(w_map)
    if y_dims is None or w_dims is None or len(set(y_dims)) != 4 or len(set(w_dims)) != 4:
        return None
    n, f, oh, ow = y_dims
    f2, c, kh, kw = w_dims
    if f2 != f or any(iterators[d] != "parallel" for d in y_dims):
        return None
    if any(iterators[d] != "reduction" for d in (c, kh, kw)):
        return None
    x = list(x_map.results)
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
    tile's views cannot be collapsed or the col buffer is over `max_col_bytes`."""
    x, w, y = op.operands
    y_shape = ir.MemRefType(y.type).shape
    w_shape = ir.MemRefType(w.type).shape
    # The images and the output channels may be a partial tile's dynamic extents; the
    # window and the pixels are what the matmul's K and columns are made of.
    if any(e < 0 for e in list(y_shape[2:]) + list(w_shape[1:])):
        return False
    batch, _, out_h, out_w = y_shape
    _, channels, win_h, win_w = w_shape
    if not (collapsible(y.type, [[0], [1], [2, 3]]) and collapsible(w.type, [[0], [1, 2, 3]])):
        return False
    k, p = channels * win_h * win_w, out_h * out_w
    p_pad = cost_model.cpu_conv_padded_pixels(p)
    if max_col_bytes and 4 * max(batch, 1) * k * p_pad > max_col_bytes:
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

        def alloc(shape: list[int], dynamic: list[ir.Value]) -> ir.Value:
            return memref.AllocOp(ir.MemRefType.get(shape, f32), dynamic, [],
                                  alignment=aligned).result

        def dynamic(*sizes: int | ir.Value) -> list[ir.Value]:
            return [v for v in sizes if isinstance(v, ir.Value)]

        images, channels_out = extent(y, 0), extent(y, 1)
        if p_pad == p:
            # col's dims: (n, c, kh, kw, oh, ow); the gather walks the output's width
            # innermost, reading the input's rows.
            d = [ir.AffineDimExpr.get(i, ctx) for i in range(6)]
            col = alloc([batch, channels, win_h, win_w, out_h, out_w], dynamic(images))
            x_map = affine_map_attr(6, [d[0], d[1], d[4] * s0 + d[2] * d0 + const(p0),
                             d[5] * s1 + d[3] * d1 + const(p1)])
            _copy_generic(x, col, x_map, affine_map_attr(6, d), 6, f32)
            b = collapse_view(col, [[0], [1, 2, 3], [4, 5]])
        else:
            # The pixels padded to whole vectors (a 7x7 image's 49 to 64): col's dims are
            # (n, c, kh, kw, q) with q = oh * OW + ow; the pad columns are zeros, met by
            # the filter in the matmul and dropped after it.
            d = [ir.AffineDimExpr.get(i, ctx) for i in range(5)]
            col = alloc([batch, channels, win_h, win_w, p_pad], dynamic(images))
            q_row = ir.AffineFloorDivExpr.get(d[4], const(out_w))
            q_col = ir.AffineModExpr.get(d[4], const(out_w))
            x_map = affine_map_attr(5, [d[0], d[1], q_row * s0 + d[2] * d0 + const(p0),
                             q_col * s1 + d[3] * d1 + const(p1)])
            shape = [images, channels, win_h, win_w]
            zero = arith.ConstantOp(f32, 0.0).result
            linalg.fill(zero, outs=[_subview(col, [0, 0, 0, 0, p], shape + [p_pad - p])])
            valid = _subview(col, [0] * 5, shape + [p])
            _copy_generic(x, valid, x_map, affine_map_attr(5, d), 5, f32)
            b = collapse_view(col, [[0], [1, 2, 3], [4]])
        a = collapse_view(w, [[0], [1, 2, 3]])
        c = out = collapse_view(y, [[0], [1], [2, 3]])
        if p_pad != p:
            # The matmul writes a staging buffer as wide as col; the output's own values
            # (the convolution's init: zeros, a bias) go in and the result comes out.
            c = alloc([batch, ir.MemRefType(y.type).shape[1], p_pad],
                      dynamic(images, channels_out))
            linalg.fill(zero, outs=[_subview(c, [0, 0, p], [images, channels_out, p_pad - p])])
            staged = _subview(c, [0, 0, 0], [images, channels_out, p])
            linalg.copy(out, outs=[staged])
        # The matmul's dims: (n, f, p, k).
        e = [ir.AffineDimExpr.get(i, ctx) for i in range(4)]
        mm = multiply_accumulate(a, b, c, [affine_map_attr(4, [e[1], e[3]]),
                                           affine_map_attr(4, [e[0], e[3], e[2]]),
                                           affine_map_attr(4, [e[0], e[1], e[2]])],
                                 ["parallel"] * 3 + ["reduction"])
        if p_pad != p:
            linalg.copy(staged, outs=[out])
    f = ir.MemRefType(y.type).shape[1]
    padded = f" (pixels padded to {p_pad})" if p_pad != p else ""
    mm.operation.attributes[TAG] = ir.StringAttr.get(
        f"{channels}x{win_h}x{win_w} window, stride {list(conv.strides)}, dilation "
        f"{list(conv.dilations)}: im2col [{k}, {p}] per image, matmul "
        f"[{f if f >= 0 else '?'}, {k}] @ [{k}, {p}]{padded}")
    op.erase()
    return True


def _chunk_script(i: int, conv: Conv, rows: int) -> str:
    """Transform IR: tile the convolution tagged `i` by `rows` output rows (one loop)."""
    any_op = "!transform.any_op"
    sizes = [0] * 7
    sizes[conv.oh] = rows
    return (f"%c{i} = transform.structured.match attributes{{{CHUNK_TAG} = {i} : i64}} in "
            f"%root : ({any_op}) -> {any_op}\n    "
            f"%c{i}_t, %c{i}_l = transform.structured.tile_using_for %c{i} tile_sizes "
            f"{sizes} : ({any_op}) -> ({any_op}, {any_op})")


def _chunk_rows(op: ir.Operation, conv: Conv, rows: int) -> int:
    """The output rows per im2col chunk for `op` (`rows` > 0: that many; 0: the cost
    model's), or 0 when the whole tile is one chunk."""
    y_shape = ir.MemRefType(op.operands[2].type).shape
    w_shape = ir.MemRefType(op.operands[1].type).shape
    out_h, out_w = y_shape[2], y_shape[3]
    if out_h < 0 or out_w < 0 or any(e < 0 for e in w_shape[1:]):
        return 0
    if rows <= 0:
        rows = cost_model.cpu_conv_rows(out_h, out_w, w_shape[1] * w_shape[2] * w_shape[3])
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
