"""An attention's mask classified at compile time: the key-tile bound of the attention kernels
(the CUDA target's and the CPU's, --fusion-cpu-attention) and the tiles below it that the
mask leaves alone (the CUDA kernel's).

A mask that is a function of (query row, key) only is evaluated here with numpy
(`causal_bound`, `interior_point`, `interior_scale`): on the whole grid where it has up to
MASK_GRID_MAX scores, else by blocks of rows (`_classify_blocks`: interval bounds away from
the diagonal, the band along it point by point). The group's ops are evaluated as they are
(`_np_at`: generics with projection maps, reshapes, broadcasts, fills, constants), the
scores set to sample values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mlir.ir as ir
from fusec.passes.grouping import defining_op, value_key
from fusec.passes.payload import (
    PayloadError,
    constant_array,
    evaluate_payload,
    evaluate_payload_intervals,
)

if TYPE_CHECKING:
    from fusec.passes.fusion.attention import Match


def tensor_info(t: ir.Type) -> tuple[list[int], str]:
    rt = ir.RankedTensorType(t)
    return list(rt.shape), str(rt.element_type)


# The largest score grid classified point by point at compile time (query rows x keys of
# one head); a larger one is classified by blocks of rows (`_classify_blocks`), up to
# MASK_ROWS_MAX rows.
MASK_GRID_MAX = 1 << 20
MASK_ROWS_MAX = 1 << 20
# The rows of a block in `_classify_blocks` (and the keys of its band along the diagonal).
BLOCK = 64


class _Unknown(Exception):
    """The mask is not a function of (row, key) that can be computed here."""


def _np_at(value: ir.Value, idx: list, s_key, s_value, memo: dict, blocks: bool = False):
    """`value` at the index arrays `idx` (numpy, float64), the scores S set to `s_value`:
    the group's ops evaluated here (generics with projection maps, reshapes, broadcasts,
    fills, constants). Raises _Unknown for anything else (a group input: data).

    `blocks`: the rows and keys of `idx` are intervals ((lo, hi) pairs of arrays, one per
    block of the grid) and so is the result: what the block's values lie in
    (`evaluate_payload_intervals`; a tensor constant that is not a splat is not bounded)."""
    import numpy as np

    key = (value_key(value), id(idx))
    if key in memo:
        return memo[key]
    if value_key(value) == s_key:
        s = np.float64(s_value)  # a scalar: only what the masks index is a grid
        return (s, s) if blocks else s
    owner = value.owner
    if isinstance(owner, ir.Block):
        raise _Unknown("a group input")
    op = owner.operation
    shape = tensor_info(value.type)[0]

    def number(attr: ir.Attribute) -> float | int:
        if isinstance(attr, ir.FloatAttr):
            return float(attr.value)
        if isinstance(attr, ir.BoolAttr):
            return int(attr.value)
        v = int(ir.IntegerAttr(attr).value)
        return (1 if v else 0) if blocks and str(attr.type) == "i1" else v

    if op.name == "arith.constant":
        const = constant_array(value)
        if const is None:
            attr = op.attributes["value"]
            if isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
                x = number(attr.get_splat_value())
                return (np.float64(x), np.float64(x)) if blocks else x
            raise _Unknown("a constant numpy cannot read")
        if blocks:  # bounded only where it is one value
            flat = const.astype(np.float64).ravel()
            if flat.size == 0 or not (flat == flat[0]).all():
                raise _Unknown("a tensor constant over blocks")
            return (flat[0], flat[0])
        result = const.astype(np.float64)[tuple(idx)]
    elif op.name == "linalg.fill":
        fill = op.operands[0].owner
        if isinstance(fill, ir.Block) or fill.operation.name != "arith.constant":
            raise _Unknown("a fill of a computed value")
        x = number(fill.operation.attributes["value"])
        result = (np.float64(x), np.float64(x)) if blocks else x
    elif op.name in ("tensor.expand_shape", "tensor.collapse_shape"):
        src_shape = tensor_info(op.operands[0].type)[0]
        # Dims both shapes end with pass through (the scores' rows and keys: only the
        # leading, scalar indices are re-linearised).
        k = 0
        while k < min(len(shape), len(src_shape)) and shape[-1 - k] == src_shape[-1 - k]:
            k += 1
        lead = idx[:len(idx) - k]
        if blocks and any(isinstance(ix, tuple) for ix in lead):
            # Blocks pass through a reshape that only adds or drops unit dims.
            if [d for d in shape if d != 1] != [d for d in src_shape if d != 1]:
                raise _Unknown("a reshape of the blocked dims")
            kept = iter([ix for ix, size in zip(idx, shape) if size != 1])
            src = [np.int64(0) if size == 1 else next(kept) for size in src_shape]
        else:
            lin = 0
            for ix, size in zip(lead, shape[:len(shape) - k]):
                lin = lin * size + ix
            src, rest = [], lin
            for size in reversed(src_shape[:len(src_shape) - k]):
                src.append(rest % size)
                rest = rest // size
            src = list(reversed(src)) + list(idx[len(idx) - k:])
        result = _np_at(op.operands[0], src, s_key, s_value, memo, blocks)
    elif op.name == "linalg.broadcast":
        dims = set(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        result = _np_at(op.operands[0], [ix for j, ix in enumerate(idx) if j not in dims],
                        s_key, s_value, memo, blocks)
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
        if blocks:  # the loops as intervals (a scalar index is a point)
            loops = [ix if isinstance(ix, tuple) else (np.float64(ix), np.float64(ix))
                     for ix in loops]
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
            if blocks:  # operands are indexed by ints where their dims are points
                sub = [int(ix[0]) if isinstance(ix, tuple) and np.ndim(ix[0]) == 0 and
                       ix[0] == ix[1] else ix for ix in sub]
            args.append(_np_at(v, sub, s_key, s_value, memo, blocks))
        try:
            with np.errstate(all="ignore"):
                result = evaluate_payload_intervals(op, args, loops) if blocks else \
                    evaluate_payload(op, args, index=loops)
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
    return _mask_shape(match, q_len, kv_len)[0]


def interior_point(match: "Match", q_len: int, kv_len: int) -> tuple[int, int] | None:
    """Where the mask has a causal bound c (`causal_bound`) and changes nothing below it:
    a (row, key) point at which the score chain X gives, for every S, what it gives at
    every (row, key) with key <= row + c. A kernel evaluates the chain at that point (its
    index arithmetic then folds: no compare and select per score) in the key tiles wholly
    below the diagonal. Checked on the whole grid with the S values `causal_bound` uses
    and two far ones; None where some key at or below the diagonal is masked or scored
    differently (a sliding window, a position bias, a mask read from memory)."""
    return _mask_shape(match, q_len, kv_len)[1]


def interior_scale(match: "Match", q_len: int, kv_len: int) -> float | None:
    """Where `interior_point` has a point: c if the chain there computes X = c S (c > 0,
    in float64, the casts' roundings aside: `computed_scale(m, c)` finds the constant as the
    chain rounds it), else None."""
    return _mask_shape(match, q_len, kv_len)[2]


def _mask_shape(match: "Match", q_len: int, kv_len: int) -> tuple:
    """(causal_bound, interior_point, interior_scale), computed once per mask structure and
    grid."""
    emitter = o = _Scores(match, value_key(match.qk.results[0]), q_len, kv_len)
    if not emitter.match.sides or o.m > MASK_ROWS_MAX:
        return None, None, None
    feeding = _feeding(emitter)
    if not _head_independent(feeding):
        return None, None, None
    # Every layer of a model has the same mask: computed once per structure and grid (a
    # tensor constant in it, not keyed by its bytes here, is evaluated each time).
    named = [[op.attributes[i] for i in range(len(op.attributes))] for op in feeding]
    if any(isinstance(a.attr, ir.DenseElementsAttr) and not a.attr.is_splat
           for attrs in named for a in attrs):
        return _classify(emitter) if o.m * o.n <= MASK_GRID_MAX else (None, None, None)
    key = (o.m, o.n, _structure(feeding))
    if key not in _MASK_CACHE:
        _MASK_CACHE[key] = _classify(emitter) if o.m * o.n <= MASK_GRID_MAX else \
            _classify_blocks(emitter)
    return _MASK_CACHE[key]


_MASK_CACHE: dict = {}


def _structure(ops: list[ir.Operation]) -> tuple:
    """What decides `_classify`'s answer for the score ops `ops`, as a hashable key: each op's
    name, attributes and result types, its operands numbered by first appearance (so two
    layers' masks, whose values differ only in identity, share a key), and the same for the
    ops inside its regions (a mask's diagonal is a constant in a linalg.generic's body: a
    key of the top-level ops alone gave a bottom-right causal mask the top-left one's
    classification, compiled first in the same process), and constants by value wherever
    they are defined."""
    numbers: dict = {}

    def number(value: ir.Value) -> Any:
        producer = defining_op(value)
        if producer is not None and producer.name == "arith.constant":
            # By value: a body reads the function's constants (the diagonal's %c131_i64)
            # without the constant op being among `ops`.
            return ("constant", str(producer.attributes["value"]))
        return numbers.setdefault(value_key(value), len(numbers))

    def describe(op: ir.Operation) -> tuple:
        attributes = tuple(sorted((op.attributes[i].name, str(op.attributes[i].attr))
                                  for i in range(len(op.attributes))))
        entry = (op.name, attributes, tuple(str(r.type) for r in op.results),
                 tuple(number(v) for v in op.operands),
                 tuple(tuple((tuple((number(a), str(a.type)) for a in block.arguments),
                              tuple(describe(inner.operation) for inner in block.operations))
                             for block in region.blocks)
                       for region in op.regions))
        for result in op.results:
            number(result)
        return entry

    return tuple(describe(op) for op in ops)

# S values the grid is evaluated at: (first head, last head).
_NEAR = ((0.0, 1.5), (-2.5,))
# interior_point's far S values (a chain like max(S, -10) agrees with S at the near ones
# only), evaluated along the diagonal, the last row and the first key.
_FAR = (-30000.0, 6500.0)
# S values at which the interior's chain is checked to be X = c S.
_LINEAR = (1.0, -2.5, 1000.0, -30000.0, 0.0)


def _classify(emitter: _Scores) -> tuple:
    """_mask_shape's evaluation on the grid (see causal_bound and interior_point)."""
    import numpy as np

    o = emitter
    score = emitter.match.score
    shape = tensor_info(score.type)[0]
    rows = np.arange(o.m, dtype=np.int64)[:, None]
    cols = np.arange(o.n, dtype=np.int64)[None, :]
    masked = None
    lead_points = [[0] * (len(shape) - 2), [s - 1 for s in shape[:-2]]]
    grids: list = []  # (lead, S, X on the grid)
    try:
        for lead, values in zip(lead_points, _NEAR):
            for s_value in values:
                idx = [np.int64(b) for b in lead] + [rows, cols]
                x = np.broadcast_to(np.asarray(_np_at(score, idx, emitter.s_key, s_value, {}),
                                               dtype=np.float64), (o.m, o.n))
                grids.append((lead, s_value, x))
                now = np.isneginf(x)
                masked = now if masked is None else masked & now
    except _Unknown:
        return None, None, None
    visible = ~masked
    last = np.where(visible.any(axis=1), o.n - 1 - np.argmax(visible[:, ::-1], axis=1), -1)
    c = int(last[0])
    expected = np.minimum(np.arange(o.m) + c, o.n - 1)
    ok_rows = last == expected
    if not ok_rows.all():
        return None, None, None
    # Every key past row + c masked (what skipping assumes); keys before it may be masked
    # too (the kernel still evaluates the mask there, unless interior_point finds none).
    if (visible & (cols > rows + c)).any():
        return None, None, None
    return (c, *_interior(emitter, c, lead_points, grids))


def _interior(emitter: _Scores, c: int, lead_points: list, grids: list) -> tuple:
    """(interior_point, interior_scale): their checks (see there), given causal_bound's
    grids."""
    import numpy as np

    o = emitter
    rep = (o.m - 1, 0)
    if rep[1] > rep[0] + c:
        return None, None
    rows = np.arange(o.m, dtype=np.int64)
    above = np.arange(o.n, dtype=np.int64)[None, :] > rows[:, None] + c

    def at(lead: list, r, k, s_value: float):
        idx = [np.int64(b) for b in lead] + [r, k]
        return np.asarray(_np_at(emitter.match.score, idx, emitter.s_key, s_value, {}),
                          dtype=np.float64)

    def same(x, ref) -> bool:
        ref = float(ref)
        differs = np.isnan(x) != (ref != ref) if ref != ref else x != ref
        return not (differs & ~above if differs.ndim == 2 else differs).any()

    diag = rows[rows + c >= 0]
    keys = np.arange(min(o.n, o.m + c), dtype=np.int64)
    lines = (np.concatenate([diag, np.full(len(keys), o.m - 1), diag]),
             np.concatenate([np.minimum(diag + c, o.n - 1), keys, np.zeros(len(diag), np.int64)]))
    try:
        for lead, s_value, x in grids:
            if not same(x, at(lead, np.int64(rep[0]), np.int64(rep[1]), s_value)):
                return None, None
        for lead in lead_points:
            for s_value in _FAR:
                ref = at(lead, np.int64(rep[0]), np.int64(rep[1]), s_value)
                x = np.broadcast_to(at(lead, lines[0], lines[1], s_value), lines[0].shape)
                if not same(x, ref):
                    return None, None
        rep_at = [float(at(lead_points[0], np.int64(rep[0]), np.int64(rep[1]), s_value))
                  for s_value in _LINEAR]
    except _Unknown:
        return None, None
    return rep, _linear_scale(rep_at)


def _classify_blocks(emitter: _Scores) -> tuple:
    """`_classify` for a grid too large to evaluate point by point, with the same answer
    where it gives one (the tests compare the two), in O(rows x BLOCK) work: c from the
    first row, evaluated key by key; then for each block of BLOCK rows [r0, r1]:

        keys > r1 + c       bounded over the block at once (`_np_at(blocks=True)`): X must
                            be -inf there, surely, for every sample S;
        keys r0 + c ..      (the band the diagonal crosses) evaluated point by point:
             r0 + c + BLOCK    -inf past each row's diagonal;
        keys < r0 + c       (interior_point) bounded at once: X must be the one value X
                            takes at the point, surely;

    and the key min(row + c, N - 1) evaluated for every row: visible. Bounds it cannot
    prove (a window, a bias, a mask the intervals cannot follow) give no bound: the
    kernel then evaluates the mask on every tile, as for an unclassified one."""
    import numpy as np

    o = emitter
    score = emitter.match.score
    shape = tensor_info(score.type)[0]
    lead_points = [[0] * (len(shape) - 2), [s - 1 for s in shape[:-2]]]
    near = [(lead, s) for lead, values in zip(lead_points, _NEAR) for s in values]
    far = [(lead, s) for lead in lead_points for s in _FAR]

    def at(lead: list, r, k, s_value: float, blocks: bool = False):
        idx = [np.int64(b) for b in lead] + [r, k]
        x = _np_at(score, idx, emitter.s_key, s_value, {}, blocks)
        return x if blocks else np.asarray(x, dtype=np.float64)

    rows = np.arange(o.m, dtype=np.int64)
    r0 = np.arange(0, o.m, BLOCK, dtype=np.int64)
    r1 = np.minimum(r0 + BLOCK, o.m) - 1
    try:
        masked = None
        for lead, s_value in near:
            x = np.broadcast_to(at(lead, np.int64(0), np.arange(o.n, dtype=np.int64), s_value),
                                (o.n,))
            masked = np.isneginf(x) if masked is None else masked & np.isneginf(x)
        if masked.all():
            return None, None, None
        c = int(o.n - 1 - np.argmax(~masked[::-1]))
        # The diagonal key of every row visible.
        diag = np.minimum(rows + c, o.n - 1)
        for lead, s_value in near:
            if np.isneginf(np.broadcast_to(at(lead, rows, diag, s_value), (o.m,))).any():
                return None, None, None
        # Past the band: surely -inf.
        above = r1 + c + 1 <= o.n - 1
        span = ((r0.astype(np.float64), r1.astype(np.float64)),
                ((r1 + c + 1).astype(np.float64), np.full(len(r0), o.n - 1.0)))
        for lead, s_value in near:
            _, hi = at(lead, *span, s_value, blocks=True)
            if not np.all(np.broadcast_to(hi, r0.shape)[above] == -np.inf):
                return None, None, None
        # The band, point by point.
        band_r = r0[:, None, None] + np.arange(BLOCK)[None, :, None]
        band_k = r0[:, None, None] + c + np.arange(BLOCK)[None, None, :]
        inside = (band_r <= r1[:, None, None]) & (band_k <= o.n - 1) & (band_k >= 0)
        past = band_k > band_r + c
        band_r, band_k = np.minimum(band_r, o.m - 1), np.clip(band_k, 0, o.n - 1)
        full = (len(r0), BLOCK, BLOCK)
        bands = {}
        for lead, s_value in near + far:
            bands[(id(lead), s_value)] = np.broadcast_to(at(lead, band_r, band_k, s_value), full)
        for lead, s_value in near:
            if (inside & past & ~np.isneginf(bands[(id(lead), s_value)])).any():
                return None, None, None
    except _Unknown:
        return None, None, None
    # interior_point: below the band, bounded to one value; in the band, point by point.
    rep = (o.m - 1, 0)
    below = r0 + c - 1 >= 0
    span = ((r0.astype(np.float64), r1.astype(np.float64)),
            (np.zeros(len(r0)), np.minimum(r0 + c - 1, o.n - 1).astype(np.float64)))
    try:
        for lead, s_value in near + far:
            ref = float(at(lead, np.int64(rep[0]), np.int64(rep[1]), s_value))
            lo, hi = (np.broadcast_to(v, r0.shape)[below]
                      for v in at(lead, *span, s_value, blocks=True))
            band = bands[(id(lead), s_value)][inside & ~past]
            if ref != ref:
                return c, None, None
            if not (np.all(lo == ref) and np.all(hi == ref) and np.all(band == ref)):
                return c, None, None
        rep_at = [float(at(lead_points[0], np.int64(rep[0]), np.int64(rep[1]), s_value))
                  for s_value in _LINEAR]
    except _Unknown:
        return c, None, None
    return (c, rep, _linear_scale(rep_at))


def _linear_scale(rep_at: list[float]) -> float | None:
    """c where the chain's values at _LINEAR's S are c S (c > 0), else None."""
    scale = rep_at[0]
    linear = scale > 0 and all(abs(x - scale * s_value) <= 1e-12 * abs(scale * s_value)
                               for x, s_value in zip(rep_at, _LINEAR))
    return scale if linear else None
