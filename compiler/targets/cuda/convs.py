"""The CUDA target's convolutions as GEMMs (`--fusion-gpu-convs-to-gemm`): im2col with the
channels last and a transpose back, or, for a 1x1 convolution of stride 1 over one image,
the filter times the image as stored (its product already NCHW). The cuBLASLt call or our
tensor-core GEMM runs the product; the data-movement kernels build the rest."""

from __future__ import annotations

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import tensor_info
from fusec.compiler.targets.cuda.body import defining
from fusec.compiler.targets.cuda.device import ELEMENT_BYTES, GROUP_OP, CudaCodegenError
from fusec.compiler.targets.cuda.options import CudaOptions
from fusec.passes import attributes, cost_model


CONV_OPS = ("linalg.conv_2d_nchw_fchw", "linalg.conv_2d_ngchw_gfchw")


def _tensor_type(shape: list[int], element: ir.Type) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(shape, element)


def _zero(element: ir.Type) -> ir.Value:
    """A 0 of `element` (float or integer), at the insertion point."""
    from mlir.dialects import arith

    return arith.ConstantOp(element, ir.FloatAttr.get(element, 0.0)
                            if not isinstance(element, ir.IntegerType) else
                            ir.IntegerAttr.get(element, 0)).result


def _mark_tf32(product: ir.Value, element: ir.Type, options: CudaOptions | None) -> None:
    """An fp32 convolution's product in TF32 where `CudaOptions.conv_tf32` asks for it."""
    if options is not None and options.conv_tf32 and str(element) == "f32":
        product.owner.attributes[attributes.TF32] = ir.UnitAttr.get()


def _plus_init(value: ir.Value, init: ir.Value) -> ir.Value:
    """`value + init`, elementwise (both of the convolution's output shape), as a generic
    at the insertion point."""
    from mlir.dialects import arith, linalg, tensor

    shape, _ = tensor_info(init.type)
    element = ir.RankedTensorType(init.type).element_type
    ctx = init.context
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>", ctx)
    ident = ir.AffineMapAttr.get(ir.AffineMap.get_identity(len(shape), ctx))
    add = linalg.GenericOp([_tensor_type(list(shape), element)], [value, init],
                           [tensor.EmptyOp(list(shape), element).result],
                           ir.ArrayAttr.get([ident] * 3),
                           ir.ArrayAttr.get([parallel] * len(shape)))
    block = add.regions[0].blocks.append(element, element, element)
    with ir.InsertionPoint(block):
        integer = isinstance(element, ir.IntegerType)
        s = (arith.AddIOp if integer else arith.AddFOp)(block.arguments[0], block.arguments[1])
        linalg.YieldOp([s.result])
    return add.results[0]


def convs_to_gemm(func: ir.Operation, options: CudaOptions | None = None) -> int:
    """Rewrite each 2-D convolution (NCHW input, FCHW filter; any stride and dilation;
    padding is the `tensor.pad` before it) inside a group as im2col + one matmul, so that
    the GEMM library (or our tensor-core GEMM) runs it and the data-movement kernels build
    the rest, where the fallback path ran a thread per output element:

        col[n, oh, ow, c, kh, kw] = x[n, c, oh * s0 + kh * d0, ow * s1 + kw * d1]
        y[n*oh*ow, f] = col[n*oh*ow, c*kh*kw] @ w[f, c*kh*kw]^T
        out[n, f, oh, ow] = init + y (expanded, transposed to NCHW)

    A grouped convolution (NGCHW, GFCHW: ResNeXt's, RegNet's) whose window is more points
    than the data-movement family unrolls per output (its input channels per group times
    the window: `movement.MAX_WINDOW_POINTS`) is the same with the groups as the batch of
    one batched matmul, `col[g, n*oh*ow, c*kh*kw] @ w[g, f, c*kh*kw]^T`; a smaller one (and
    every depthwise convolution) stays the family's unrolled window. A 1x1 convolution of
    stride 1 over one image whose rows are 16-byte aligned (`cost_model.
    conv_reads_image_as_columns`) needs no gather: `w[f, c] @ x[c, h*w]` is already NCHW.

    The im2col gather (with the pad) becomes the matmul's prologue kernel, the transpose
    back to NCHW joins the epilogue (bias, BatchNorm, ReLU, residual) in one kernel. fp32
    convolutions stay exact fp32 unless `CudaOptions.conv_tf32` (torch's cuDNN default is
    TF32 for convolutions; fusec's is exact): then the matmul is marked `fusion.tf32` and
    cuBLASLt computes it with TF32 operands.
    Returns how many convolutions were rewritten."""
    from fusec.passes.grouping import walk_ops

    if options is not None and not (options.gemm and options.movement):
        return 0  # the im2col gather is the data-movement kernels' to build
    count = 0
    for conv in walk_ops(func, lambda o: o.name in CONV_OPS):
        parent = conv.parent
        if parent is None or parent.name != GROUP_OP or attributes.PATH in parent.attributes:
            continue
        shapes = _conv_shapes(conv)
        if shapes is None:
            continue
        g, n, c, f, kh, kw, oh, ow = shapes
        if _reads_image_as_columns(conv, n, kh, kw, oh, ow):
            note = _conv_as_image_gemm(conv, c, f, oh, ow, options)
        else:
            note = _conv_as_gemm(conv, *shapes, options)
        parent.attributes[attributes.CONV_AS_GEMM] = ir.StringAttr.get(note)
        count += 1
    return count


def _conv_shapes(conv: ir.Operation) -> tuple | None:
    """(groups, n, c, f, kh, kw, oh, ow) of a convolution `convs_to_gemm` rewrites (c and
    f per group), or None: mixed types, shapes that do not agree, or a grouped window the
    data-movement family unrolls."""
    from fusec.compiler.targets.cuda.folds import MAX_WINDOW_POINTS

    x, w, init = conv.operands[0], conv.operands[1], conv.operands[2]
    grouped = conv.name == "linalg.conv_2d_ngchw_gfchw"
    try:
        xs, xe = tensor_info(x.type)
        ws, we = tensor_info(w.type)
        os_, _ = tensor_info(init.type)
    except (CudaCodegenError, ValueError):
        return None
    if xe != we:
        return None
    if grouped:
        (n, g, c, _, _), (g2, f, c2, kh, kw), (n2, g3, f2, oh, ow) = xs, ws, os_
        if c * kh * kw <= MAX_WINDOW_POINTS or not (g == g2 == g3):
            return None
    else:
        (n, c, _, _), (f, c2, kh, kw), (n2, f2, oh, ow) = xs, ws, os_
        g = 1
    if c2 != c or f2 != f or n2 != n:
        return None
    return g, n, c, f, kh, kw, oh, ow


def _strides(conv: ir.Operation, name: str) -> list[int]:
    return [int(v) for v in ir.DenseIntElementsAttr(conv.attributes[name])]


def _reads_image_as_columns(conv: ir.Operation, n: int, kh: int, kw: int, oh: int,
                            ow: int) -> bool:
    """A non-grouped convolution whose image is its own columns
    (`cost_model.conv_reads_image_as_columns`)."""
    if conv.name != "linalg.conv_2d_nchw_fchw":
        return False
    x = conv.operands[0]
    element = str(ir.RankedTensorType(x.type).element_type)
    return cost_model.conv_reads_image_as_columns(
        n, kh, kw, _strides(conv, "strides"), list(tensor_info(x.type)[0])[2:] == [oh, ow],
        oh * ow * ELEMENT_BYTES.get(element, 4))


def _conv_as_gemm(conv: ir.Operation, g: int, n: int, c: int, f: int, kh: int, kw: int,
                  oh: int, ow: int, options: CudaOptions | None) -> str:
    """Replace `conv` (`convs_to_gemm`) by im2col, a (batched, `g` > 1 or grouped) matmul
    and the transpose back; returns the note the group keeps."""
    from mlir.dialects import linalg, tensor

    grouped = conv.name == "linalg.conv_2d_ngchw_gfchw"
    x, w, init = conv.operands[0], conv.operands[1], conv.operands[2]
    strides, dilations = _strides(conv, "strides"), _strides(conv, "dilations")
    m, k = n * oh * ow, c * kh * kw
    elt = ir.RankedTensorType(x.type).element_type
    out_elt = ir.RankedTensorType(init.type).element_type
    out_shape = list(tensor_info(init.type)[0])
    ctx = conv.context
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>", ctx)

    ty = _tensor_type
    # The columns' loops: (g,) n, oh, ow, c, kh, kw.
    lead = 1 if grouped else 0
    d = [ir.AffineDimExpr.get(i, ctx) for i in range(6 + lead)]
    dn, dh, dw, dc, dkh, dkw = d[lead:]
    rows = [dn] + ([d[0]] if grouped else []) + [
        dc, dh * strides[0] + dkh * dilations[0], dw * strides[1] + dkw * dilations[1]]
    src_map = ir.AffineMap.get(6 + lead, 0, rows, ctx)
    batch = [g] if grouped else []
    with ir.InsertionPoint(conv), conv.location:
        col_shape = batch + [n, oh, ow, c, kh, kw]
        col = linalg.GenericOp(
            [ty(col_shape, elt)], [x], [tensor.EmptyOp(col_shape, elt).result],
            ir.ArrayAttr.get([ir.AffineMapAttr.get(src_map),
                              ir.AffineMapAttr.get(ir.AffineMap.get_identity(6 + lead, ctx))]),
            ir.ArrayAttr.get([parallel] * (6 + lead)))
        block = col.regions[0].blocks.append(elt, elt)
        with ir.InsertionPoint(block):
            linalg.YieldOp([block.arguments[0]])
        b = [[0]] if grouped else []
        pixels, window = [lead, lead + 1, lead + 2], [lead + 3, lead + 4, lead + 5]
        col2 = tensor.CollapseShapeOp(ty(batch + [m, k], elt), col.results[0],
                                      b + [pixels, window])
        w2 = tensor.CollapseShapeOp(ty(batch + [f, k], elt), w,
                                    b + [[lead], [lead + 1, lead + 2, lead + 3]])
        wt = linalg.transpose(w2.result, outs=[tensor.EmptyOp(batch + [k, f], elt).result],
                              permutation=([0, 2, 1] if grouped else [1, 0]))
        acc = linalg.fill(_zero(out_elt),
                          outs=[tensor.EmptyOp(batch + [m, f], out_elt).result])
        mm = (linalg.batch_matmul if grouped else linalg.matmul)(col2.result, wt, outs=[acc])
        _mark_tf32(mm, elt, options)
        y = tensor.ExpandShapeOp(ty(batch + [n, oh, ow, f], out_elt), mm,
                                 b + [[lead, lead + 1, lead + 2], [lead + 3]], [],
                                 batch + [n, oh, ow, f])
        # Back to the convolution's layout: NCHW, or NGFHW for a grouped one.
        perm = [1, 0, 4, 2, 3] if grouped else [0, 3, 1, 2]
        t = linalg.transpose(y.result, outs=[tensor.EmptyOp(out_shape, out_elt).result],
                             permutation=perm)
        t = t if isinstance(t, ir.Value) else t.operation.results[0]
        result = _plus_init(t, init)
    xs = "x".join(str(v) for v in tensor_info(x.type)[0])
    ws = "x".join(str(v) for v in tensor_info(w.type)[0])
    shape = f"[{g}, {m}, {k}] @ [{g}, {k}, {f}]" if grouped else f"[{m}, {k}] @ [{k}, {f}]"
    conv.results[0].replace_all_uses_with(result)
    note = (f"{conv.name} {xs} * {ws} as im2col {shape} (stride {strides}, dilation "
            f"{dilations})")
    conv.erase()
    return note


def _conv_as_image_gemm(conv: ir.Operation, c: int, f: int, oh: int, ow: int,
                        options: CudaOptions | None) -> str:
    """A 1x1 NCHW convolution of stride 1 over one image (`cost_model.
    conv_reads_image_as_columns`) as the filter times the image itself:

        y[f, oh*ow] = w[f, c] @ x[c, oh*ow]        (both as stored: reshapes only)
        out[1, f, oh, ow] = y (a reshape), + init unless the init is a fill

    The product comes out in the convolution's layout, so the BatchNorm / ReLU / residual
    after it are per-row and elementwise maps of it: the GEMM's epilogue. The im2col route
    needed a transpose of the image in and of the product out."""
    from mlir.dialects import linalg, tensor

    x, w, init = conv.operands[0], conv.operands[1], conv.operands[2]
    p = oh * ow
    elt = ir.RankedTensorType(x.type).element_type
    out_elt = ir.RankedTensorType(init.type).element_type
    out_shape = list(tensor_info(init.type)[0])
    ty = _tensor_type
    with ir.InsertionPoint(conv), conv.location:
        cols = tensor.CollapseShapeOp(ty([c, p], elt), x, [[0, 1], [2, 3]]).result
        w2 = tensor.CollapseShapeOp(ty([f, c], elt), w, [[0], [1, 2, 3]])
        # The usual init is a fill (of zero): the product accumulates into the same fill,
        # with nothing added after it, so that the epilogue starts at the product.
        filled = defining(init)
        filled = filled if filled is not None and filled.name == "linalg.fill" else None
        start = filled.operands[0] if filled is not None else _zero(out_elt)
        acc = linalg.fill(start, outs=[tensor.EmptyOp([f, p], out_elt).result])
        mm = linalg.matmul(w2.result, cols, outs=[acc])
        _mark_tf32(mm, elt, options)
        result = tensor.ExpandShapeOp(ty(out_shape, out_elt), mm, [[0, 1], [2, 3]], [],
                                      out_shape).result
        if filled is None:
            result = _plus_init(result, init)
    xs = "x".join(str(v) for v in tensor_info(x.type)[0])
    ws = "x".join(str(v) for v in tensor_info(w.type)[0])
    note = f"{conv.name} {xs} * {ws} as [{f}, {c}] @ [{c}, {p}]: the image as its columns"
    conv.results[0].replace_all_uses_with(result)
    conv.erase()
    if filled is not None and not list(filled.results[0].uses):
        filled.erase()  # (the init's fill, now read by nothing: no kernel of its own)
    return note
