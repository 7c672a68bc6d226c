"""An attention's mask classified at compile time: the key-tile bound of the attention kernels
(the CUDA target's and the CPU's, --fusion-cpu-attention).

A mask that is a function of (query row, key) only is evaluated here with numpy on the whole
grid (`causal_bound`); where every key past row + c is masked, a kernel stops each block of
rows at its diagonal tile. The group's ops are evaluated as they are (`_np_at`: generics
with projection maps, reshapes, broadcasts, fills, constants), the scores set to sample
values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import mlir.ir as ir
from fusec.passes.grouping import value_key
from fusec.passes.payload import PayloadError, constant_array, evaluate_payload

if TYPE_CHECKING:
    from fusec.passes.fusion.attention import Match


def tensor_info(t: ir.Type) -> tuple[list[int], str]:
    rt = ir.RankedTensorType(t)
    return list(rt.shape), str(rt.element_type)


# The largest score grid classified at compile time (query rows x keys of one head).
MASK_GRID_MAX = 1 << 25


class _Unknown(Exception):
    """The mask is not a function of (row, key) that can be computed here."""


def _np_at(value: ir.Value, idx: list, s_key, s_value, memo: dict):
    """`value` at the index arrays `idx` (numpy, float64), the scores S set to `s_value`:
    the group's ops evaluated here (generics with projection maps, reshapes, broadcasts,
    fills, constants). Raises _Unknown for anything else (a group input: data)."""
    import numpy as np

    key = (value_key(value), id(idx))
    if key in memo:
        return memo[key]
    if value_key(value) == s_key:
        return np.float64(s_value)  # a scalar: only what the masks index is a grid
    owner = value.owner
    if isinstance(owner, ir.Block):
        raise _Unknown("a group input")
    op = owner.operation
    shape = tensor_info(value.type)[0]
    if op.name == "arith.constant":
        const = constant_array(value)
        if const is None:
            attr = op.attributes["value"]
            if isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
                splat = attr.get_splat_value()
                return float(ir.FloatAttr(splat).value) if "f" in str(splat.type) else \
                    int(ir.IntegerAttr(splat).value)
            raise _Unknown("a constant numpy cannot read")
        result = const.astype(np.float64)[tuple(idx)]
    elif op.name == "linalg.fill":
        fill = op.operands[0].owner
        if isinstance(fill, ir.Block) or fill.operation.name != "arith.constant":
            raise _Unknown("a fill of a computed value")
        attr = fill.operation.attributes["value"]
        result = float(ir.FloatAttr(attr).value) if isinstance(attr, ir.FloatAttr) \
            else int(ir.IntegerAttr(attr).value)
    elif op.name in ("tensor.expand_shape", "tensor.collapse_shape"):
        src_shape = tensor_info(op.operands[0].type)[0]
        # Dims both shapes end with pass through (the scores' rows and keys: only the
        # leading, scalar indices are re-linearised).
        k = 0
        while k < min(len(shape), len(src_shape)) and shape[-1 - k] == src_shape[-1 - k]:
            k += 1
        lin = 0
        for ix, size in zip(idx[:len(idx) - k], shape[:len(shape) - k]):
            lin = lin * size + ix
        src, rest = [], lin
        for size in reversed(src_shape[:len(src_shape) - k]):
            src.append(rest % size)
            rest = rest // size
        src = list(reversed(src)) + list(idx[len(idx) - k:])
        result = _np_at(op.operands[0], src, s_key, s_value, memo)
    elif op.name == "linalg.broadcast":
        dims = set(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        result = _np_at(op.operands[0], [ix for j, ix in enumerate(idx) if j not in dims],
                        s_key, s_value, memo)
    elif op.name == "linalg.generic" and len(op.results) == 1 and \
            all("parallel" in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
        maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
        out_map = maps[-1]
        loops: list = [None] * out_map.n_dims
        for e, ix in zip(out_map.results, idx):
            if not isinstance(e, ir.AffineDimExpr):
                raise _Unknown("an output map that is not a projection")
            loops[ir.AffineDimExpr(e).position] = ix
        if any(x is None for x in loops):
            raise _Unknown("a loop the output does not index")
        args = []
        n_in = len(op.operands) - 1
        for v, m in zip(list(op.operands)[:n_in], maps):
            sub = []
            for e in m.results:
                if isinstance(e, ir.AffineDimExpr):
                    sub.append(loops[ir.AffineDimExpr(e).position])
                elif isinstance(e, ir.AffineConstantExpr):
                    sub.append(np.int64(ir.AffineConstantExpr(e).value))
                else:
                    raise _Unknown("an input map that is not a projection")
            args.append(_np_at(v, sub, s_key, s_value, memo))
        try:
            with np.errstate(all="ignore"):
                result = evaluate_payload(op, args, index=loops)
        except PayloadError as e:
            raise _Unknown(str(e)) from e
    else:
        raise _Unknown(f"'{op.name}'")
    memo[key] = result
    return result


@dataclass(frozen=True)
class _Scores:
    """The attention whose mask is classified: its chain, S's key, M rows, N keys."""

    match: "Match"
    s_key: tuple
    m: int
    n: int


def _feeding(emitter: _Scores) -> list[ir.Operation]:
    """The ops the score X is computed from, X first (not the softmax after it)."""
    feeding, stack, seen = [], [emitter.match.score], set()
    while stack:
        owner = stack.pop().owner
        if isinstance(owner, ir.Block) or value_key(owner.operation.results[0]) in seen:
            continue
        seen.add(value_key(owner.operation.results[0]))
        feeding.append(owner.operation)
        if value_key(owner.operation.results[0]) != emitter.s_key:
            stack += list(owner.operation.operands)
    return feeding


def _head_independent(feeding: list[ir.Operation]) -> bool:
    """Whether the score ops' masks cannot vary with batch or head: no `linalg.index` in an
    op of rank above 2 (an arange or a 2-D compare may index; the rank-4 score ops may not),
    and no constant with a leading dim above 1 before the last two."""
    for op in feeding:
        if op.name == "arith.constant" and isinstance(op.results[0].type, ir.RankedTensorType):
            shape = list(ir.RankedTensorType(op.results[0].type).shape)
            if any(d != 1 for d in shape[:-2]):
                return False
        if op.name == "linalg.generic" and \
                len(ir.ArrayAttr(op.attributes["iterator_types"])) > 2 and \
                any(inner.operation.name == "linalg.index"
                    for inner in op.regions[0].blocks[0].operations):
            return False
    return True


def causal_bound(match: "Match", q_len: int, kv_len: int) -> int | None:
    """The key-tile bound of a mask that is a function of (query row, key) only and masks
    every key past row + c (causal, c = 0 top-left aligned, N - M bottom-right): returns c,
    checked on the whole (row, key) grid here (X is -inf wherever it is for S = 0 and 1.5 at
    the first head and S = -2.5 at the last, and nothing in the mask reads a batch or
    head index or a constant that varies with them: `_head_independent`), so that the
    kernel stops at the tile holding key m0 + BM - 1 + c. None where there is no such bound
    (no mask, a mask read from memory, or one whose visible keys do not end at row + c)."""
    emitter = o = _Scores(match, value_key(match.qk.results[0]), q_len, kv_len)
    if not emitter.match.sides or o.m * o.n > MASK_GRID_MAX:
        return None
    feeding = _feeding(emitter)
    if not _head_independent(feeding):
        return None
    # Every layer of a model has the same mask: computed once per structure and grid (a
    # tensor constant in it, not keyed by its bytes here, is evaluated each time).
    named = [[op.attributes[i] for i in range(len(op.attributes))] for op in feeding]
    if any(isinstance(a.attr, ir.DenseElementsAttr) and not a.attr.is_splat
           for attrs in named for a in attrs):
        return _classify(emitter)
    key = (o.m, o.n, tuple((op.name, str(op.results[0].type) if len(op.results) else "",
                            tuple(sorted((a.name, str(a.attr)) for a in attrs)))
                           for op, attrs in zip(feeding, named)))
    if key not in _CAUSAL_CACHE:
        _CAUSAL_CACHE[key] = _classify(emitter)
    return _CAUSAL_CACHE[key]


_CAUSAL_CACHE: dict = {}


def _classify(emitter: _Scores) -> int | None:
    """causal_bound's evaluation on the grid (see there)."""
    import numpy as np

    o = emitter
    score = emitter.match.score
    shape = tensor_info(score.type)[0]
    rows = np.arange(o.m, dtype=np.int64)[:, None]
    cols = np.arange(o.n, dtype=np.int64)[None, :]
    masked = None
    lead_points = [[0] * (len(shape) - 2), [s - 1 for s in shape[:-2]]]
    try:
        for lead, values in zip(lead_points, ((0.0, 1.5), (-2.5,))):
            for s_value in values:
                idx = [np.int64(b) for b in lead] + [rows, cols]
                x = np.broadcast_to(np.asarray(_np_at(score, idx, emitter.s_key, s_value, {}),
                                               dtype=np.float64), (o.m, o.n))
                now = np.isneginf(x)
                masked = now if masked is None else masked & now
    except _Unknown:
        return None
    visible = ~masked
    last = np.where(visible.any(axis=1), o.n - 1 - np.argmax(visible[:, ::-1], axis=1), -1)
    c = int(last[0])
    expected = np.minimum(np.arange(o.m) + c, o.n - 1)
    ok_rows = last == expected
    if not ok_rows.all():
        return None
    # Every key past row + c masked (what skipping assumes); keys before it may be masked
    # too (the kernel still evaluates the mask there).
    if (visible & (cols > rows + c)).any():
        return None
    return c
