"""CUDA target: where an attention kernel's Q, K, V and O live (attention.py's operands).

A view is a list of dims, each a list of (size, stride) factors, row-major within the dim
(strides in elements), plus an offset, so that a collapse of dims that are not contiguous
(GQA's heads broadcast over a repeat: a stride-0 factor) stays exact where layouts.py's
StridedView (one stride per dim) cannot say it. The layout ops between a group input and an
operand (head split: slice, expand, transpose; repeat_interleave's broadcast and collapse)
compose forward (`operand_view`); those between O and the group's result (head merge)
backward (`output_view`). `operand_views` checks what the kernel's TMA maps can read;
`absorb_attention_layouts` (the tiled stage's rewrite) merges the layout groups around an
attention group into it when they can.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import parse_map, tensor_info, value_key
from fusec.compiler.targets.cuda.device import ELEMENT_BYTES, GROUP_OP, CudaCodegenError
from fusec.compiler.targets.cuda.layouts import (
    SLICE_OFFSETS,
    _reassociation,
    layout_generic,
    layout_source,
)
from fusec.compiler.targets.cuda.wgmma import MAP_RANK
from fusec.compiler.targets.cuda.rewrites import (
    _chain_in,
    _is_attention,
    _is_layout_group,
    _only_user,
    regroup,
)
from fusec.passes.grouping import CLONED_INTO_GROUPS, cast_input, form_group, op_key, use_owner
from fusec.passes.inline_groups import inline_group
from fusec.passes.fusion.attention import NotAttention, match_group

# What the kernel takes (its refusal says so before a group is formed).
INPUTS = ("bf16", "f16")
HEAD_DIMS = (64, 128)

Factors = list  # [(size, stride), ...]


@dataclass
class Operands:
    q: int  # block argument positions
    k: int
    v: int
    batch: int  # batch x heads (of Q; K and V's factors may repeat heads: GQA)
    m: int
    n: int
    d: int
    el: str
    out_el: str


@dataclass
class View:
    dims: list  # list[Factors]
    offset: int = 0

    @staticmethod
    def dense(shape: list[int]) -> "View":
        dims, s = [], 1
        for n in reversed(shape):
            dims.append([(n, s)])
            s *= n
        return View(list(reversed(dims)), 0)


def _tidy(f: Factors) -> Factors:
    """Unit factors dropped, neighbours that are one row-major dim merged."""
    out: Factors = []
    for n, st in f:
        if n == 1:
            continue
        if out and out[-1][1] == n * st:
            out[-1] = (out[-1][0] * n, st)
        else:
            out.append((n, st))
    return out


def _split(f: Factors, sizes: list[int]) -> list[Factors] | None:
    """Factors `f` of one dim split into dims of `sizes` (row-major); None if a factor
    boundary does not fall on the split."""
    f = list(_tidy(f))
    out = []
    for size in sizes:
        dim: Factors = []
        need = size
        while need > 1:
            if not f:
                return None
            n, st = f[0]
            if n <= need:
                if need % n:
                    return None
                dim.append((n, st))
                need //= n
                f.pop(0)
            else:
                if n % need:
                    return None
                dim.append((need, st * (n // need)))
                f[0] = (n // need, st)
                need = 1
        out.append(dim)
    return out if not f else None


def _merged(view: View, op: ir.Operation) -> View:
    """The view with each reassociation group of `op` (a reshape) merged into one dim."""
    return View([[f for d in g for f in view.dims[d]] for g in _reassociation(op)],
                view.offset)


def _expanded(view: View, op: ir.Operation, shape: list[int]) -> View | None:
    """The view with each dim split into its reassociation group of `op` (a reshape), the
    group's sizes from `shape`; None where a factor boundary does not fall on a split."""
    dims: list = [None] * len(shape)
    for d, g in enumerate(_reassociation(op)):
        parts = _split(view.dims[d], [shape[o] for o in g])
        if parts is None:
            return None
        for o, part in zip(g, parts):
            dims[o] = part
    return View(dims, view.offset)


def view_forward(view: View, op: ir.Operation) -> View | None:
    """The view of `op`'s result given that of what it reads; None where it is not one."""
    name = op.name
    out_shape = list(ir.RankedTensorType(op.results[0].type).shape)
    if name == "linalg.transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        return View([view.dims[p] for p in perm], view.offset)
    if name == "tensor.collapse_shape":
        return _merged(view, op)
    if name == "tensor.expand_shape":
        return _expanded(view, op, out_shape)
    kind = layout_generic(op) if name == "linalg.generic" else None
    if kind == "slice":
        offsets = list(ir.DenseI64ArrayAttr(op.attributes[SLICE_OFFSETS]))
        offset, dims = view.offset, []
        for f, off, size in zip(view.dims, offsets, out_shape):
            f = _tidy(f)
            full = 1
            for n, _ in f:
                full *= n
            if size == full and off == 0:
                dims.append(f)
                continue
            if len(f) != 1:
                return None
            offset += off * f[0][1]
            dims.append([(size, f[0][1])])
        return View(dims, offset)
    if kind == "broadcast":
        kept = parse_map(ir.ArrayAttr(op.attributes["indexing_maps"])[0]).results
        dims = [[(n, 0)] for n in out_shape]
        for j, d in enumerate(kept):
            dims[d] = view.dims[j]
        return View(dims, view.offset)
    if name == "linalg.broadcast":
        added = set(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        src = iter(view.dims)
        return View([[(n, 0)] if d in added else next(src) for d, n in enumerate(out_shape)],
                    view.offset)
    return None


def view_backward(view: View, op: ir.Operation) -> View | None:
    """The view of what a bijective layout op (transpose, reshape, a cast) reads, given the
    view of its result."""
    name = op.name
    src_shape = list(ir.RankedTensorType(op.operands[0].type).shape)
    if name == "linalg.transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        dims: list = [None] * len(perm)
        for j, p in enumerate(perm):
            dims[p] = view.dims[j]
        return View(dims, view.offset)
    if name == "tensor.expand_shape":  # the source is the result collapsed
        return _merged(view, op)
    if name == "tensor.collapse_shape":  # the source is the result expanded
        return _expanded(view, op, src_shape)
    if name == "linalg.generic" and layout_generic(op) == "cast" or _is_cast(op):
        return view
    return None


def _is_cast(op: ir.Operation) -> bool:
    return cast_input(op) is not None


def operand_view(value: ir.Value, bases: dict | None = None
                 ) -> tuple[ir.BlockArgument, View] | None:
    """The group input `value` is a layout of, and where its elements lie in it (`bases`:
    block argument number -> the view the argument itself is of its buffer, for a layout
    group that would merge in front)."""
    chain = []
    while not isinstance(value.owner, ir.Block):
        op = value.owner.operation
        if op.name == "linalg.broadcast":
            source = op.operands[0]
        elif op.name in ("tensor.expand_shape", "tensor.collapse_shape", "linalg.transpose") \
                or (op.name == "linalg.generic" and layout_generic(op) in ("slice",
                                                                           "broadcast")):
            source = layout_source(op)[0]  # a slice's gather reads through tensor.extract
        else:
            return None
        chain.append(op)
        value = source
    arg = ir.BlockArgument(value)
    view = (bases or {}).get(arg.arg_number) or \
        View.dense(list(ir.RankedTensorType(value.type).shape))
    for op in reversed(chain):
        view = view_forward(view, op)
        if view is None:
            return None
    return arg, view


@dataclass
class MatrixView:
    """An operand as the kernel reads it: [lead..., rows, cols] with cols contiguous."""

    arg: int  # the group input (block argument position)
    lead: Factors  # the batch x heads index's factors (stride 0: broadcast, GQA)
    rows: tuple  # (size, stride)
    cols: int
    offset: int

    def tma_dims(self) -> list[tuple[int, int, int]]:
        """The map's dims after (cols, rows): (lead factor position, size, stride), the
        broadcast (stride-0) factors left out, innermost first."""
        return [(i, n, st) for i, (n, st) in reversed(list(enumerate(self.lead))) if st]


def matrix_view(value: ir.Value, arg_of, what: str, bases: dict | None = None) -> MatrixView:
    """`value` (rank >= 2) as the kernel reads it, or a CudaCodegenError saying why not."""
    found = operand_view(value, bases)
    if found is None:
        raise CudaCodegenError(f"{what} is not a strided view of a group input")
    arg, view = found
    cols = _tidy(view.dims[-1])
    rows = _tidy(view.dims[-2])
    shape = list(ir.RankedTensorType(value.type).shape)
    if len(cols) != 1 or cols[0][1] != 1:
        raise CudaCodegenError(f"{what}'s last dim is not contiguous")
    if len(rows) > 1:
        raise CudaCodegenError(f"{what}'s rows are not one stride")
    row = rows[0] if rows else (1, shape[-1])  # one row: any stride (only row 0 is read)
    lead = _tidy([f for d in view.dims[:-2] for f in d])
    return MatrixView(arg_of(arg), lead, (shape[-2], row[1]), shape[-1], view.offset)


def match_in(group: ir.Operation):
    """The attention chain of an attention group (passes/fusion/attention.match_group)."""
    try:
        return match_group(group)
    except NotAttention as why:
        raise CudaCodegenError(str(why)) from None


def operand_views(group: ir.Operation, m, bases: dict | None = None
                  ) -> tuple[dict[str, MatrixView], Operands]:
    """Q, K and V as the kernel reads them through TMA (their group inputs, strides and
    batch factors), checked; a CudaCodegenError says why not."""
    args = list(group.regions[0].blocks[0].arguments)

    def position(arg: ir.BlockArgument) -> int:
        for i, a in enumerate(args):
            if a == arg:
                return i
        raise CudaCodegenError("an operand that is not a group input")

    q_val, k_val, v_val = m.qk.operands[0], k_value(m.qk), m.pv.operands[1]
    views = {"Q": matrix_view(q_val, position, "Q", bases),
             "K": matrix_view(k_val, position, "K", bases),
             "V": matrix_view(v_val, position, "V", bases)}
    el = tensor_info(q_val.type)[1]
    types = [tensor_info(v.type)[1] for v in (q_val, k_val, v_val)]
    if len(set(types)) != 1 or el not in INPUTS:
        raise CudaCodegenError(f"Q, K, V of types {', '.join(types)}")
    qv, kv, vv = views["Q"], views["K"], views["V"]
    batch = 1
    for n, _ in qv.lead:
        batch *= n
    out_el = tensor_info(m.out.type)[1]
    o = Operands(qv.arg, kv.arg, vv.arg, batch, qv.rows[0], kv.rows[0], qv.cols, el, out_el)
    if kv.cols != o.d or vv.cols != o.d or vv.rows[0] != o.n:
        raise CudaCodegenError("Q, K and V do not agree")
    if o.d not in HEAD_DIMS:
        raise CudaCodegenError(f"head_dim {o.d} (our kernel takes 64 or 128)")
    if out_el not in ("bf16", "f16", "f32"):
        raise CudaCodegenError(f"an output of type {out_el}")
    eb = ELEMENT_BYTES[el]
    for what, view in views.items():
        dims = view.tma_dims()
        if len(dims) > MAP_RANK - 2:
            raise CudaCodegenError(f"{what} has {len(dims)} batch strides (TMA: 3)")
        if any(st * eb % 16 for _, _, st in dims) or view.rows[1] * eb % 16 or \
                view.offset * eb % 16:
            raise CudaCodegenError(f"{what}'s strides or offset are not multiples of 16 "
                                   f"bytes (TMA)")
    return views, o


def k_value(qk: ir.Operation) -> ir.Value:
    """K as [..., keys, head_dim]: what the swap of Q K^T's last two dims reads."""
    value = qk.operands[1]
    while not isinstance(value.owner, ir.Block):
        op = value.owner.operation
        if op.name == "linalg.transpose":
            return op.operands[0]
        if op.name not in ("tensor.expand_shape", "tensor.collapse_shape"):
            break
        value = op.operands[0]
    raise CudaCodegenError("K^T is not a transpose of K")


@dataclass
class OutputView:
    lead: Factors
    row_stride: int
    offset: int


def output_view(group: ir.Operation, m, after: list[ir.Operation] = ()) -> OutputView:
    """Where O (P V's result, [batch x heads, rows, head_dim]) lies in the group's result:
    backward from the result through the ops after P V (casts, reshapes, a head merge's
    transpose)."""
    body = group.regions[0].blocks[0]
    yielded = list(body.operations)[-1].operands
    if len(yielded) != 1:
        raise CudaCodegenError("an attention group with more than one result")
    value = yielded[0]
    # `after`: a layout group's ops that would merge behind, from its result back.
    start = after[0].results[0] if after else value
    view = View.dense(list(ir.RankedTensorType(start.type).shape))
    for op in after:
        view = view_backward(view, op)
        if view is None:
            raise CudaCodegenError(f"the result's layout through '{op.name}'")
    while value_key(value) != value_key(m.pv.results[0]):
        if isinstance(value.owner, ir.Block):
            raise CudaCodegenError("the attention's result is not P V's")
        op = value.owner.operation
        view = view_backward(view, op)
        if view is None:
            raise CudaCodegenError(f"the attention's result through '{op.name}' is not a "
                                   f"strided view of it")
        value = op.operands[0]
    cols, rows = _tidy(view.dims[-1]), _tidy(view.dims[-2])
    if len(cols) != 1 or cols[0][1] != 1 or len(rows) > 1:
        raise CudaCodegenError("O's rows are not written contiguously")
    lead = _tidy([f for d in view.dims[:-2] for f in d])
    return OutputView(lead, rows[0][1] if rows else 0, view.offset)


def _split_layout_parts(group: ir.Operation) -> bool:
    """A group of several results that only moves data (horizontal fusion's merge of K's and
    V's broadcasts) becomes one group per result, so that each can merge into the attention
    that reads it. False (nothing changed) unless every op is on exactly one result's
    chain of layout ops from a group input."""
    body = group.regions[0].blocks[0]
    chains: list[list[ir.Operation]] = []
    seen: set[int] = set()
    for value in list(body.operations)[-1].operands:
        chain = []
        while not isinstance(value.owner, ir.Block):
            op = value.owner.operation
            found = layout_source(op)
            if found is None or layout_generic(op) == "cast" or op_key(op) in seen:
                return False
            seen.add(op_key(op))
            chain.append(op)
            value = found[0]
        if not chain:
            return False
        chains.append(chain)
    ops = [o.operation for o in body.operations
           if o.operation.name not in CLONED_INTO_GROUPS and o.operation.name != "fusion.yield"]
    if len(ops) != sum(len(c) for c in chains):
        return False
    inline_group(group)
    for chain in chains:
        form_group(chain, "single")
    return True


def absorb_attention_layouts(func: ir.Operation) -> int:
    """Read Q, K and V through the layout groups before an attention group (head split:
    slice, reshape, transpose; GQA's repeat_interleave: a broadcast and a collapse) and
    write O where the layout group after it puts it (head merge), when the TMA maps and the
    store can: those groups merge into the attention group and cost no kernel (nor their
    copies in memory). Returns how many merged."""
    count = 0
    for group in [o.operation for o in func.regions[0].blocks[0].operations
                  if o.operation.name == GROUP_OP and _is_attention(o.operation)]:
        merged = True
        while merged:
            merged = False
            try:
                m = match_in(group)
            except CudaCodegenError:
                break
            for i, operand in enumerate(group.operands):
                producer = operand.owner
                if isinstance(producer, ir.Block):
                    continue
                producer = producer.operation
                if producer.name == GROUP_OP and len(producer.results) > 1 and \
                        _split_layout_parts(producer):
                    merged = True  # the parts are groups of their own now: look again
                    break
                if not _is_layout_group(producer):
                    continue
                uses = list(producer.results[0].uses)
                if not uses or any(use_owner(u) != group for u in uses):
                    continue
                found = _chain_in(producer)
                if found is None or not isinstance(found[1].owner, ir.Block):
                    continue
                chain, source = found
                base = View.dense(list(ir.RankedTensorType(source.type).shape))
                for op in reversed(chain):
                    base = view_forward(base, op) if base is not None else None
                if base is None:
                    continue
                try:
                    operand_views(group, m, {i: base})
                except CudaCodegenError:
                    continue
                group = regroup([producer, group], [], group)
                count += 1
                merged = True
                break
        if len(group.results) != 1:
            continue
        consumer = _only_user(group.results[0])
        if consumer is None or not _is_layout_group(consumer):
            continue
        found = _chain_in(consumer)
        if found is None or any(o.name not in ("tensor.expand_shape", "tensor.collapse_shape",
                                               "linalg.transpose") for o in found[0]):
            continue
        try:
            output_view(group, match_in(group), found[0])
        except CudaCodegenError:
            continue
        regroup([group, consumer], [], group)
        count += 1
    return count
