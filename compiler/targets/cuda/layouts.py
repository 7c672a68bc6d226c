"""CUDA target: layouts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import parse_map, value_key
from fusec.compiler.targets.cuda.body import (
    GEMM_OPS,
    RESHAPE_OPS,
    cast_types,
    defining,
    group_body_ops,
    unary_kind,
)
from fusec.compiler.targets.cuda.device import CudaCodegenError
from fusec.passes import attributes

# ---------------------------------------------------------------- layout views
#
# Transposes, reshapes, static slices (the gathers of `extract_slices_to_generics`, marked
# `fusion.slice_offsets`) and broadcasts do no arithmetic: each output element is one input
# element at an affine position. A chain of them from a buffer is a *strided view* of it:
# element idx lives at offset + sum(idx[d] * strides[d]) elements. cuBLASLt reads its operands
# and writes its result through such a view when it is one batch stride, one leading
# dimension and a unit stride (`matrix_layout`): the head split / merge of attention then costs
# no kernel (`absorb_operand_layouts`, `absorb_result_layouts`). A layout group whose view is
# dense (a reshape, a slice of whole rows) is a plan-level view of its input buffer
# (`mark_view_groups`: `Buffer.view_of`), no kernel either.

SLICE_OFFSETS = attributes.SLICE_OFFSETS
VIEW_OFFSET = attributes.VIEW_OFFSET
# The byte alignment a view's offset needs: the widest access a kernel makes (16-byte vectors).
VIEW_ALIGNMENT = 16


@dataclass(frozen=True)
class StridedView:
    """Where each element of a tensor lives in a buffer (in elements)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @staticmethod
    def dense(shape: Iterable[int]) -> StridedView:
        shape = tuple(shape)
        strides, s = [], 1
        for d in reversed(shape):
            strides.append(s)
            s *= d
        return StridedView(shape, tuple(reversed(strides)), 0)

    def is_dense(self) -> bool:
        """Row-major contiguous from `offset`: the bytes of a buffer of this shape."""
        expected = StridedView.dense(self.shape).strides
        return all(n == 1 or s == e for n, s, e in zip(self.shape, self.strides, expected))


def _reassociation(op: ir.Operation) -> list[list[int]]:
    return [[ir.IntegerAttr(x).value for x in ir.ArrayAttr(g)]
            for g in ir.ArrayAttr(op.attributes["reassociation"])]


def merged_stride(sizes: list[int], strides: list[int]) -> int | None:
    """The stride of `sizes` merged into one row-major dim, or None if they are not contiguous."""
    live = [(n, s) for n, s in zip(sizes, strides) if n != 1]
    if not live:
        return 1
    for (_, s0), (n1, s1) in zip(live, live[1:]):
        if s0 != s1 * n1:
            return None
    return live[-1][1]


def layout_generic(op: ir.Operation) -> str | None:
    """'slice' (a marked gather), 'broadcast' (a pure copy with a projected input map) or
    'cast' (extf/truncf to f32) for a linalg.generic that moves no arithmetic; else None."""
    if op.name != "linalg.generic" or len(op.results) != 1:
        return None
    if SLICE_OFFSETS in op.attributes:
        return "slice"
    if len(op.operands) != 2:
        return None
    if unary_kind(op) == "cast":
        return "cast" if cast_types(op)[1] == "f32" else None
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if len(ops) != 1 or value_key(ops[0].operands[0]) != value_key(block.arguments[0]):
        return None
    try:
        maps = [parse_map(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    except CudaCodegenError:
        return None
    dims = maps[0].results
    if maps[1].results != tuple(range(maps[1].num_dims)) or None in dims or \
            len(set(dims)) != len(dims) or list(dims) != sorted(dims):
        return None
    return "broadcast"


def layout_source(op: ir.Operation) -> tuple[ir.Value, ir.Operation, int] | None:
    """For a layout op (no arithmetic): (the value it reads, the op that reads it, which
    operand); None for any other op. A gather reads its source through a tensor.extract."""
    name = op.name
    if name in RESHAPE_OPS or name == "linalg.transpose":
        return op.operands[0], op, 0
    kind = layout_generic(op)
    if kind in ("cast", "broadcast"):
        return op.operands[0], op, 0
    if kind == "slice":
        from fusec.passes.grouping import walk_ops

        extracts = walk_ops(op, lambda o: o.name == "tensor.extract")
        if len(extracts) == 1:
            return extracts[0].operands[0], extracts[0], 0
    return None


def view_forward(view: StridedView, op: ir.Operation) -> StridedView | None:
    """The view of `op`'s result given the view of what it reads (`layout_source`); None when
    the result is not a strided view of the same buffer (a collapse of non-contiguous dims)."""
    name = op.name
    out_shape = tuple(ir.RankedTensorType(op.results[0].type).shape)
    if name == "linalg.transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        return StridedView(out_shape, tuple(view.strides[p] for p in perm), view.offset)
    if name == "tensor.collapse_shape":
        strides = []
        for group in _reassociation(op):
            s = merged_stride([view.shape[d] for d in group], [view.strides[d] for d in group])
            if s is None:
                return None
            strides.append(s)
        return StridedView(out_shape, tuple(strides), view.offset)
    if name == "tensor.expand_shape":
        out = [0] * len(out_shape)
        for d, group in enumerate(_reassociation(op)):
            s = view.strides[d]
            for o in reversed(group):
                out[o] = s
                s *= out_shape[o]
        return StridedView(out_shape, tuple(out), view.offset)
    kind = layout_generic(op)
    if kind == "cast":
        return StridedView(out_shape, view.strides, view.offset)
    if kind == "slice":
        offsets = list(ir.DenseI64ArrayAttr(op.attributes[SLICE_OFFSETS]))
        return StridedView(out_shape, view.strides,
                           view.offset + sum(o * s for o, s in zip(offsets, view.strides)))
    if kind == "broadcast":
        dims = parse_map(ir.ArrayAttr(op.attributes["indexing_maps"])[0]).results
        out = [0] * len(out_shape)
        for j, d in enumerate(dims):
            out[d] = view.strides[j]
        return StridedView(out_shape, tuple(out), view.offset)
    return None


def view_backward(view: StridedView, op: ir.Operation) -> StridedView | None:
    """The view of what a *bijective* layout op (transpose, reshape) reads, given the view of
    its result: where a gemm must write so that the op's result needs no kernel."""
    src = tuple(ir.RankedTensorType(op.operands[0].type).shape)
    name = op.name
    if name == "linalg.transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        strides = [0] * len(perm)
        for d, p in enumerate(perm):
            strides[p] = view.strides[d]
        return StridedView(src, tuple(strides), view.offset)
    if name in RESHAPE_OPS:
        groups = _reassociation(op)
        if name == "tensor.expand_shape":  # the source is the result collapsed
            strides = []
            for group in groups:
                s = merged_stride([view.shape[d] for d in group],
                                   [view.strides[d] for d in group])
                if s is None:
                    return None
                strides.append(s)
            return StridedView(src, tuple(strides), view.offset)
        out = [0] * len(src)  # collapse: the source is the result expanded
        for d, group in enumerate(groups):
            s = view.strides[d]
            for o in reversed(group):
                out[o] = s
                s *= src[o]
        return StridedView(src, tuple(out), view.offset)
    return None


@dataclass(frozen=True)
class MatrixLayout:
    """One cuBLASLt operand in row-major terms: [batch,] rows x cols, stored transposed or not,
    leading dimension `ld`, `batch_stride` and `offset` in elements."""

    transposed: bool
    ld: int
    batch_stride: int
    offset: int


def matrix_layout(view: StridedView, element_bytes: int, output: bool = False
                  ) -> MatrixLayout | None:
    """The cuBLASLt layout of a [batch,] rows x cols view, or None if it has none: one unit
    stride among the last two dims, a leading dimension that covers the other, one batch
    stride (0: broadcast, operands only). A view that is not dense must keep 16-byte aligned
    strides and offset (what cuBLASLt's fast kernels assume)."""
    if len(view.shape) not in (2, 3) or any(s < 0 for s in view.strides):
        return None
    r, c = view.shape[-2:]
    sr, sc = view.strides[-2:]
    batch = view.shape[0] if len(view.shape) == 3 else 1
    batch_stride = view.strides[0] if batch > 1 else 0
    if (sc == 1 or c == 1) and (r == 1 or sr >= c):
        layout = MatrixLayout(False, sr if r > 1 else c, batch_stride, view.offset)
    elif not output and (sr == 1 or r == 1) and (c == 1 or sc >= r):
        layout = MatrixLayout(True, sc if c > 1 else r, batch_stride, view.offset)
    else:
        return None
    if output and batch > 1 and batch_stride == 0:
        return None
    if not (view.is_dense() and view.offset == 0):
        if any((x * element_bytes) % 16 for x in (layout.ld, layout.batch_stride,
                                                   layout.offset)):
            return None
    return layout


def _result_chain(group: ir.Operation) -> tuple[ir.Operation, list[ir.Operation]] | None:
    """A gemm group's matmul and the ops from its yielded value back to the matmul's result
    (epilogue generics and layout ops), each op's matmul-side operand followed: where an
    elementwise op reads several values of its shape (an epilogue written as a DAG, as
    GPT-2's GELU is), the one that leads back to the matmul."""
    body = group.regions[0].blocks[0]
    mm = next((o for o in group_body_ops(group) if o.name in GEMM_OPS), None)
    if mm is None:
        return None
    dead: set = set()  # values known not to lead back to the matmul

    def walk(value: ir.Value) -> list[ir.Operation] | None:
        if value_key(value) == value_key(mm.results[0]):
            return []
        if value_key(value) in dead:
            return None
        op = defining(value)
        chain = None
        if op is None:
            pass
        elif op.name in RESHAPE_OPS or op.name == "linalg.transpose":
            rest = walk(op.operands[0])
            chain = None if rest is None else [op] + rest
        elif op.name == "linalg.generic":
            shape = list(ir.RankedTensorType(op.results[0].type).shape)
            inits = len(op.results)
            for v in list(op.operands)[:len(op.operands) - inits]:
                if list(ir.RankedTensorType(v.type).shape) != shape or defining(v) is None \
                        or defining(v).name == "arith.constant":
                    continue
                rest = walk(v)
                if rest is not None:
                    chain = [op] + rest
                    break
        if chain is None:
            dead.add(value_key(value))
        return chain

    chain = walk(list(body.operations)[-1].operands[0])
    return None if chain is None else (mm, chain)


def result_view(group: ir.Operation, extra: list[ir.Operation] = ()) -> StridedView | None:
    """Where a gemm group's matmul result lives in the buffer of the group's result (after
    `extra`, bijective layout ops that would follow, result side first)."""
    found = _result_chain(group)
    if found is None:
        return None
    mm, chain = found
    last = extra[0].results[0] if extra else group.results[0]
    view: StridedView | None = StridedView.dense(ir.RankedTensorType(last.type).shape)
    for op in list(extra) + chain:
        if op.name == "linalg.generic":
            continue  # elementwise: the same positions
        view = view_backward(view, op)
        if view is None:
            return None
    return view


