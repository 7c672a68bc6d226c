"""--fusion-cpu-attention: an attention group as a tile loop with an online softmax, on the CPU.

An attention group (`--fusion-attention{device=cpu}`: Q K^T, the score ops, softmax over
the keys, P V) becomes one kernel whose tiles are BM query rows of one (batch, head); each
tile streams the keys and values in tiles of BN (FlashAttention's online softmax), so the
scores never exist beyond a BM x BN tile and memory is O(N):

    scf.forall (b, i) in (batch, ceil(M / BM))          the kernel's tiles (threads)
      q = Q[b, i BM : +bm, :]                            (f32)
      m = -inf, l = 0, acc = 0                           (bm; bm; bm x Dv, f32)
      scf.for each key tile [n0, n0 + bn)                (BN; the last one N mod BN, static)
        s  = q K[b, n0 : +bn, :]^T                        (a matmul generic, f32)
        x  = score(s)                                     (the group's own score ops cloned
                                                           onto the tile: casts, scale, masks
                                                           read or computed from indices)
        m' = max(m, rowmax x);  z = m' == -inf ? 0 : m'
        p  = exp(x - z);  l = l e^(m - z) + rowsum p;  acc = acc e^(m - z) + p V[b, n0 : +bn]
      (a causal mask: the key tiles past the block's diagonal skipped, proven on the grid at
       compile time, passes/fusion/attention_mask.causal_bound)
      O[b, rows] = acc / l                               (0 where l = 0 for masked_rows =
                                                           zero; 0 / 0 = NaN otherwise, as the
                                                           unfused softmax gives)

Where the chain is X = c S on a tile (c > 0), X is not computed: the row max is c max S and
exp reads c S - z, in the same pass (`_scales`). That is every tile of a chain without masks
(SDPA's scale), and, where a causal mask changes nothing below the diagonal
(`attention_mask.interior_point`, `interior_scale`: not a sliding window, a position bias or
a masked key), the key tiles wholly below the block's diagonal: those come first, in a loop
of their own, and only the diagonal tiles after them evaluate the mask (as the CUDA kernel
splits them):

      scf.for key tiles [0, min(tiles, (m0 + c + 1) / BN))   S, the scale folded into exp
      scf.for key tiles [that, tiles)                        the chain, mask and all

The products accumulate in f32 (16-bit operands widened in the tile: one copy of a K or V
tile per BM rows), S and P are rounded to the types the graph gives them (S to the first
product's result type, P to the second product's operand type), and the result goes
through the graph's casts after P V. The score ops are cloned onto each tile
(`passes/tiling/tile_slices.Slicer`): a causal mask from indices is computed per tile,
never as an N x N tensor. The matmuls are fenced (nested `fusion.fence` groups,
`--fusion-unfence` removes them) so that elementwise fusion does not recompute P in them;
`--fusion-cpu-matmul` builds them as microkernels. The group is tiled here: `fusion.grid`
and `fusion.tile_sizes = [1, BM, BN]` are recorded and `--fusion-tile` leaves it alone.

Options: `block-rows`, `block-keys` (0: `cost_model.cpu_attention_tile`).

Before:
    %o = fusion.group attention (...) attributes {fusion.attention = {...},
                                                  fusion.path = "attention"} {
      ... linalg.batch_matmul, score ops, softmax, linalg.batch_matmul ...
    }
After:
    %o = fusion.group attention (...) attributes {fusion.grid = 6 : i64,
                                                  fusion.tile_sizes = array<i64: 1, 64, 128>} {
      %0 = scf.forall (%b, %i) in (2, 3) shared_outs(%out = %empty) -> (tensor<2x192x64xf32>) {
        %1:3 = scf.for %j = %c0 to %c3 step %c1 iter_args(%m = ..., %l = ..., %acc = ...) {...}
        ...
      }
    }
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusec.passes import attributes, cost_model
from fusec.passes.cpu.fast_exp import LOG2E, approx_exp2, fma_contract
from fusec.passes.fusion.attention import NotAttention, computed_scale, match_group
from fusec.passes.fusion.attention_mask import causal_bound, interior_point, interior_scale
from fusec.passes.grouping import (RESHAPE_OPS, cast_input, defining_op, form_group,
                                   is_attention, use_owner, walk_ops)
from fusec.passes.inline_groups import groups_in
from fusec.passes.registry import Pass, PassError, register
from fusec.passes.tiling.fence_broadcast_consumers import FENCE
from fusec.passes.tiling.tile_slices import Index, Slicer, empty, extract, index, static_shape
from mlir import ir
from mlir.dialects import arith, linalg, scf, tensor

F32_NEG_INF = float("-inf")


def _tensor(value: ir.Value) -> ir.RankedTensorType:
    return ir.RankedTensorType(value.type)


def _affine(text: str) -> ir.AffineMap:
    return ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<{text}>")).value


def _iterators(*kinds: str) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{k}>") for k in kinds])


def _generic(results: list[ir.Type], ins: list[ir.Value], outs: list[ir.Value],
             maps: list[str], kinds: list[str], body) -> ir.Operation:
    """A linalg.generic whose payload `body(*block_arguments)` returns the yielded values."""
    op = linalg.GenericOp(results, ins, outs,
                          ir.ArrayAttr.get([ir.AffineMapAttr.get(_affine(m)) for m in maps]),
                          _iterators(*kinds))
    block = op.regions[0].blocks.append(
        *[ir.RankedTensorType(v.type).element_type if isinstance(v.type, ir.RankedTensorType)
          else v.type for v in [*ins, *outs]])
    with ir.InsertionPoint(block):
        linalg.YieldOp(body(*block.arguments))
    return op.operation


def _f32() -> ir.Type:
    return ir.F32Type.get()


def _convert(value: ir.Value, target: ir.Type) -> ir.Value:
    """A scalar float `value` converted to float type `target` (extf or truncf)."""
    source = value.type
    if source == target:
        return value
    if ir.FloatType(source).width < ir.FloatType(target).width:
        return arith.ExtFOp(target, value).result
    return arith.TruncFOp(target, value).result


def _update(state: ir.Value, fn, *others: tuple[ir.Value, str]) -> ir.Value:
    """state = fn(state, *others) in place (the payload reads its output, so the loop's
    buffer is written where it is: scf.for's yields stay equivalent to its iter_args)."""
    rank = len(_tensor(state).shape)
    dims = ", ".join(f"d{i}" for i in range(rank))
    ins = [o for o, _ in others]
    maps = [*[m for _, m in others], f"({dims}) -> ({dims})"]
    return _generic([state.type], ins, [state], maps, ["parallel"] * rank,
                    lambda *a: [fn(a[-1], *a[:-1])]).results[0]


def _elementwise(value: ir.Value, target: ir.Type, sizes: list[Index], fn,
                 *others: tuple[ir.Value, str]) -> ir.Value:
    """A 2-D (or 1-D) elementwise generic over `value`'s shape: fn(x, *other scalars),
    `others` read through their own maps (e.g. a row statistic as (i, j) -> (i))."""
    rank = len(sizes)
    dims = ", ".join(f"d{i}" for i in range(rank))
    identity = f"({dims}) -> ({dims})"
    ins = [value, *[o for o, _ in others]]
    maps = [identity, *[m for _, m in others], identity]
    out = empty(sizes, target)
    return _generic([ir.RankedTensorType.get(static_shape(sizes), target)], ins, [out], maps,
                    ["parallel"] * rank,
                    lambda *a: [fn(*a[:len(ins)])]).results[0]


# Tags the ops `build` puts in fence groups once the loop is built (a group needs its result
# read, and the reader comes after the op).
FENCE_LATER = "fusion.fence_later"


def _fenced(op: ir.Operation) -> ir.Operation:
    """`op`, to be put in a fence group (elementwise fusion merges no producer into it, nor
    it into a consumer)."""
    op.attributes[FENCE_LATER] = ir.UnitAttr.get()
    return op


def _matmul(a: ir.Value, b: ir.Value, acc: ir.Value) -> ir.Value:
    """acc[i, j] += sum_k a[i, k] b[k, j] (f32), as a matmul generic."""
    def body(x, y, c):
        return [arith.AddFOp(c, arith.MulFOp(x, y).result).result]

    op = _generic([acc.type], [a, b], [acc],
                  ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)",
                   "(d0, d1, d2) -> (d0, d1)"], ["parallel", "parallel", "reduction"], body)
    return _fenced(op).results[0]


def _row_reduce(x: ir.Value, init: ir.Value, combine: str) -> ir.Value:
    """init[i] combine= x[i, j] over j."""
    def body(v, acc):
        return [ir.Operation.create(combine, results=[v.type], operands=[v, acc]).results[0]]

    return _generic([init.type], [x], [init], ["(d0, d1) -> (d0, d1)", "(d0, d1) -> (d0)"],
                    ["parallel", "reduction"], body).results[0]


def _fill(value: float, sizes: list[Index]) -> ir.Value:
    f32 = _f32()
    return linalg.fill(arith.ConstantOp(f32, value).result, outs=[empty(sizes, f32)])


def _lead(shape: list[int]) -> list[int]:
    return list(shape[:-2])


def _linearize(coords: list[Index], shape: list[int]) -> Index:
    """The row-major position of `coords` in `shape` (the Value itself for one dim)."""
    flat: Index = 0
    for c, n in zip(coords, shape):
        if isinstance(flat, int) and flat == 0:
            flat = c
        elif isinstance(flat, int) and isinstance(c, int):
            flat = flat * n + c
        else:
            flat = arith.AddIOp(arith.MulIOp(index(flat), index(n)).result, index(c)).result
    return flat


def _delinearize(flat: ir.Value, shape: list[int]) -> list[Index]:
    """The coordinates of row-major position `flat` in `shape` (index Values; 0 for unit
    dims)."""
    coords: list[Index] = []
    for i, n in enumerate(shape):
        stride = math.prod(shape[i + 1:])
        if n == 1:
            coords.append(0)
            continue
        q = flat if stride == 1 else arith.DivUIOp(flat, index(stride)).result
        coords.append(q if i == 0 else arith.RemUIOp(q, index(n)).result)
    return coords


@dataclass
class _Parts:
    """What the tile loop reads, and what the graph's types say."""

    q: ir.Value          # [lead.., M, D]
    k: ir.Value          # [lead.., N, D] (K, before its transpose)
    v: ir.Value          # [lead.., N, Dv]
    score: ir.Value      # X, the softmax's input [lead.., M, N]
    s: ir.Value          # S, the first product's result [lead.., M, N]
    s_type: ir.Type      # S's element type
    p_type: ir.Type      # P's element type as P V reads it
    pv_shape: list[int]  # P V's result shape [lead.., M, Dv]
    casts: list[ir.Type]  # the element types after P V (its own, then each cast's)
    reshapes: list[ir.Operation]  # the reshapes after P V, in order
    out: ir.Value        # the group's value the chain ends in
    zero_rows: bool
    causal: int | None   # every key past row + c masked (attention_mask.causal_bound)
    scale: float | None  # X = scale S on every key tile (no mask: `computed_scale`)
    inner: float | None  # X = inner S on the key tiles wholly below the causal diagonal
    batch: int
    m: int
    n: int
    d: int
    dv: int


def parts_of(group: ir.Operation) -> _Parts:
    """The attention group's operands and types; PassError where the tile loop cannot read
    them."""
    try:
        m = match_group(group)
    except NotAttention as why:
        raise PassError(str(why), group.location) from None
    kt = defining_op(m.qk.operands[1])
    while kt is not None and kt.name in RESHAPE_OPS:
        kt = defining_op(kt.operands[0])
    if kt is None or kt.name != "linalg.transpose":
        raise PassError("K^T is not a transpose in the group", group.location)
    q, k, v = m.qk.operands[0], kt.operands[0], m.pv.operands[1]
    s = m.qk.results[0]
    shape = list(_tensor(s).shape)
    batch, mm, nn = math.prod(_lead(shape)), shape[-2], shape[-1]
    d = _tensor(q).shape[-1]
    pv_shape = list(_tensor(m.pv.results[0]).shape)
    dv = pv_shape[-1]
    checks = [(q, [mm, d]), (k, [nn, d]), (v, [nn, dv]), (m.score, [mm, nn])]
    for value, tail in checks:
        vs = list(_tensor(value).shape)
        if vs[-2:] != tail or math.prod(vs[:-2]) != batch:
            raise PassError(f"an attention operand of shape {vs}, not [{batch} batch, {tail}]",
                            group.location)
    casts = [_tensor(m.pv.results[0]).element_type]
    reshapes = []
    value = m.pv.results[0]
    while value != m.out:
        user = use_owner(next(iter(value.uses)))
        if user.name in RESHAPE_OPS:
            reshapes.append(user)
        elif cast_input(user) is not None:
            casts.append(_tensor(user.results[0]).element_type)
        else:
            raise PassError(f"'{user.name}' after the attention's P V", group.location)
        value = user.results[0]
    causal = causal_bound(m, mm, nn)
    return _Parts(q, k, v, m.score, s, _tensor(s).element_type,
                  _tensor(m.pv.operands[0]).element_type, pv_shape, casts, reshapes, m.out,
                  m.zero_masked_rows, causal, *_scales(m, mm, nn, causal),
                  batch, mm, nn, d, dv)


def _scales(m, q_len: int, kv_len: int, causal: int | None) -> tuple:
    """(scale, inner): the constant c where the score chain is X = c S (c > 0), on every key
    tile (a chain without masks: SDPA's scale alone) or only on those wholly below a causal
    diagonal (`interior_point`: the mask changes nothing there, and `interior_scale`: the
    chain there is c S). There the kernel skips the chain: the row max is c max S (c > 0
    keeps the order) and c folds into exp's argument, so that the tile costs no pass of
    its own over the scores, nor the mask's index compares and selects."""
    def positive(c: float | None) -> float | None:
        return c if c is not None and c > 0 else None

    if not m.sides:
        return positive(computed_scale(m)), None
    if causal is None or interior_point(m, q_len, kv_len) is None:
        return None, None
    linear = interior_scale(m, q_len, kv_len)
    return None, positive(computed_scale(m, linear) if linear is not None else None)


def build(group: ir.Operation, parts: _Parts, bm_tile: int, bn_tile: int) -> None:
    """Replace the group's attention chain by the tile loop (see the module docstring)."""
    f32 = _f32()
    p = parts
    blocks = math.ceil(p.m / bm_tile)
    out_type = p.casts[-1]
    anchor = defining_op(p.out)
    with ir.InsertionPoint(anchor), group.location:
        init = empty(p.pv_shape, out_type)
        forall = scf.ForallOp([0, 0], [p.batch, blocks], [1, 1], [init])
        body = forall.body
        with ir.InsertionPoint(body):
            b, i = body.arguments[0], body.arguments[1]
            shared = body.arguments[2]
            m0 = arith.MulIOp(i, index(bm_tile)).result
            if p.m % bm_tile:
                rows: Index = _min(index(bm_tile), arith.SubIOp(index(p.m), m0).result)
            else:
                rows = bm_tile
            q_tile = _widened(_rows(p.q, b, m0, rows), f32, [rows, p.d])
            state = [_fill(F32_NEG_INF, [rows]), _fill(0.0, [rows]), _fill(0.0, [rows, p.dv])]
            full, rest = divmod(p.n, bn_tile)
            step = _KeyTile(p, b, m0, rows, q_tile)
            # A causal bound c (every key past row + c masked): the block's last key is
            # m0 + rows - 1 + c, and the key tiles after it are skipped.
            last = None
            if p.causal is not None:
                last = arith.AddIOp(arith.AddIOp(m0, index(rows)).result,
                                    index(p.causal - 1)).result
            if full:
                tiles = index(full)
                if last is not None:  # min(full, ceil((last + 1) / BN)), at least 0
                    needed = arith.MaxSIOp(arith.AddIOp(last, index(bn_tile)).result,
                                           index(0)).result
                    tiles = arith.MinSIOp(tiles, arith.DivSIOp(
                        needed, index(bn_tile)).result).result
                start: Index = 0
                if p.inner is not None:  # the tiles below the block's diagonal first
                    start = _interior_tiles(m0, p.causal, bn_tile, tiles)
                    state = _tile_loop(step, 0, start, bn_tile, state, p.inner)
                state = _tile_loop(step, start, tiles, bn_tile, state, p.scale)
            if rest and last is None:
                state = step(full * bn_tile, rest, state, p.scale)
            elif rest:
                reached = arith.CmpIOp(arith.CmpIPredicate.sge, last,
                                       index(full * bn_tile)).result
                branch = scf.IfOp(reached, [v.type for v in state], has_else=True)
                with ir.InsertionPoint(branch.then_block):
                    scf.YieldOp(step(full * bn_tile, rest, state))
                with ir.InsertionPoint(branch.else_block):
                    scf.YieldOp(state)
                state = list(branch.results)
            _, total, acc = state
            zero_rows = p.zero_rows

            def normalise(a, l_):
                value = arith.DivFOp(a, l_).result
                if zero_rows:
                    empty_row = arith.CmpFOp(arith.CmpFPredicate.OEQ, l_,
                                             arith.ConstantOp(f32, 0.0).result).result
                    value = arith.SelectOp(empty_row, arith.ConstantOp(f32, 0.0).result,
                                           value).result
                for t in p.casts:
                    value = _convert(value, t)
                return value

            o = _elementwise(acc, out_type, [rows, p.dv], normalise,
                             (total, "(d0, d1) -> (d0)"))
            coords = _delinearize(b, _lead(p.pv_shape))
            in_parallel = scf.InParallelOp()
            with ir.InsertionPoint(in_parallel.region.blocks[0]):
                lead = len(coords)
                offsets = [*coords, m0, 0]
                sizes = [1] * lead + [rows, p.dv]
                tensor.ParallelInsertSliceOp(
                    o, shared, [x for x in offsets if not isinstance(x, int)],
                    [x for x in sizes if not isinstance(x, int)], [],
                    static_shape(offsets), static_shape(sizes), [1] * len(sizes))
        result = forall.results[0]
        for reshape in p.reshapes:
            attrs = {name: reshape.attributes[name] for name in reshape.attributes}
            shape = _tensor(reshape.results[0]).shape
            result = ir.Operation.create(
                reshape.name, results=[ir.RankedTensorType.get(shape, out_type)],
                operands=[result], attributes=attrs).results[0]
    p.out.replace_all_uses_with(result)
    _erase_dead(group)
    for op in reversed(walk_ops(group, lambda o: FENCE_LATER in o.attributes)):
        del op.attributes[FENCE_LATER]
        if any(list(r.uses) for r in op.results):
            form_group([op], "single", {FENCE: ir.UnitAttr.get()})
        else:  # a Q tile the key tiles read through other offsets
            op.erase()
    i64 = ir.IntegerType.get_signless(64)
    group.attributes[attributes.GRID] = ir.IntegerAttr.get(i64, p.batch * blocks)
    group.attributes[attributes.TILE_SIZES] = ir.DenseI64ArrayAttr.get([1, bm_tile, bn_tile])


def _interior_tiles(m0: ir.Value, causal: int, bn: int, tiles: ir.Value) -> ir.Value:
    """How many of the block's first key tiles lie wholly below its diagonal: every key of
    the tile at or before m0 + c, the first row's last visible key (so for every row of the
    block), min(tiles, max(m0 + c + 1, 0) / BN)."""
    below = arith.MaxSIOp(arith.AddIOp(m0, index(causal + 1)).result, index(0)).result
    return arith.MinSIOp(tiles, arith.DivSIOp(below, index(bn)).result).result


def _tile_loop(step: "_KeyTile", start: Index, stop: Index, bn: int, state: list[ir.Value],
               scale: float | None) -> list[ir.Value]:
    """The key tiles [start, stop) of BN keys each, `step` carrying the state through."""
    loop = scf.ForOp(index(start), index(stop), index(1), state)
    with ir.InsertionPoint(loop.body):
        n0 = arith.MulIOp(loop.induction_variable, index(bn)).result
        scf.YieldOp(step(n0, bn, list(loop.inner_iter_args), scale))
    return list(loop.results)


def _min(a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.MinUIOp(a, b).result


def _rows(value: ir.Value, b: ir.Value, start: Index, count: Index) -> ir.Value:
    """value[b, start : start + count, :] of a [lead.., rows, cols] tensor, as 2-D."""
    shape = list(_tensor(value).shape)
    coords = _delinearize(b, _lead(shape))
    offsets = [*coords, start, 0]
    sizes = [1] * len(coords) + [count, shape[-1]]
    return extract(value, offsets, sizes, [count, shape[-1]])


def _widened(value: ir.Value, f32: ir.Type, sizes: list[Index]) -> ir.Value:
    if _tensor(value).element_type == f32:
        return value
    return _fenced(defining_op(_elementwise(value, f32, sizes, lambda x: _convert(x, f32)))
                   ).results[0]


class _KeyTile:
    """One key tile's step of the online softmax: (m, l, acc) -> (m', l', acc')."""

    def __init__(self, parts: _Parts, b: ir.Value, m0: ir.Value, rows: Index,
                 q_tile: ir.Value) -> None:
        self.p, self.b, self.m0, self.rows, self.q = parts, b, m0, rows, q_tile

    def product(self, flat: ir.Value, m0: Index, rows: Index, n0: Index,
                bn: int) -> ir.Value:
        """Q K^T of (batch, head) `flat`, rows [m0, m0 + rows) and keys [n0, n0 + bn), as
        [rows, bn] of S's type (the products in f32)."""
        p, f32 = self.p, _f32()
        q_tile = self.q if (flat == self.b and m0 == self.m0 and rows == self.rows) \
            else _widened(_rows(p.q, flat, m0, rows), f32, [rows, p.d])
        # K's tile transposed into f32 (B as the matmul microkernel reads it, contiguous
        # along the keys). Measured: K^T as a kernel of its own, transposed once instead of
        # once per block of rows, saves 3% at S1024-2048 and loses at S512 (64-row blocks).
        k_tile = _rows(p.k, flat, n0, bn)  # [bn, D]
        kt_tile = _fenced(_generic(
            [ir.RankedTensorType.get([p.d, bn], f32)], [k_tile], [empty([p.d, bn], f32)],
            ["(d0, d1) -> (d1, d0)", "(d0, d1) -> (d0, d1)"], ["parallel", "parallel"],
            lambda x, _o: [_convert(x, f32)])).results[0]
        s = _matmul(q_tile, kt_tile, _fill(0.0, [rows, bn]))
        if p.s_type != f32:
            s = _elementwise(s, p.s_type, [rows, bn], lambda x: _convert(x, p.s_type))
        return s

    def scores(self, offsets: list[Index], sizes: list[Index]) -> ir.Value | None:
        """S[offsets : offsets + sizes] = Q K^T there (f32 products, then S's type), of S's
        rank; None unless one (batch, head) is asked for."""
        p = self.p
        lead = len(offsets) - 2
        if any(s != 1 for s in sizes[:lead]) or not isinstance(sizes[-1], int):
            return None
        flat = _linearize(offsets[:lead], _lead(list(_tensor(p.s).shape)))
        s = self.product(index(flat), offsets[-2], sizes[-2], offsets[-1], sizes[-1])
        if not lead:
            return s
        groups = [list(range(lead + 1)), [lead + 1]]
        return tensor.ExpandShapeOp(
            ir.RankedTensorType.get(static_shape(sizes), p.s_type), s,
            ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), d) for d in g]) for g in groups]),
            [x for x in sizes if not isinstance(x, int)], static_shape(sizes)).result

    def chain(self, n0: Index, bn: int) -> ir.Value:
        """X on the tile's [rows, bn]: the group's score ops cloned onto it."""
        p = self.p

        def leaf(value, offsets, sizes):
            return self.scores(offsets, sizes) if value == p.s else None

        x_shape = list(_tensor(p.score).shape)
        x_lead = _delinearize(self.b, _lead(x_shape))
        x = Slicer(leaf).slice(p.score, [*x_lead, self.m0, n0],
                               [1] * len(x_lead) + [self.rows, bn])
        if not x_lead:
            return x
        groups = [list(range(len(x_lead) + 1)), [len(x_lead) + 1]]
        return tensor.CollapseShapeOp(
            ir.RankedTensorType.get(static_shape([self.rows, bn]), _tensor(x).element_type), x,
            ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), d) for d in g]) for g in groups])).result

    def __call__(self, n0: Index, bn: int, state: list[ir.Value],
                 scale: float | None = None) -> list[ir.Value]:
        """The step for keys [n0, n0 + bn): X the group's score chain on the tile or, given
        `scale` (X = scale S there, `_scales`), S itself with the scale folded into the row
        max and exp's argument (no pass over the tile for X)."""
        p, f32, rows = self.p, _f32(), self.rows
        if scale is None:
            x = self.chain(n0, bn)
        else:
            x = self.product(self.b, self.m0, rows, n0, bn)
        x = _elementwise(x, f32, [rows, bn], lambda v: _convert(v, f32)) if \
            _tensor(x).element_type != f32 else x
        # The state is updated in place (scf.for's buffers carried from tile to tile), m
        # last: e^(m - z) reads the old one.
        m_old, l_old, acc_old = state
        tile_max = _row_reduce(x, _fill(F32_NEG_INF, [rows]), "arith.maximumf")
        x_type = _tensor(p.score).element_type

        def rounded(v):
            """S as the chain has it: rounded to X's type where that computes in 16 bits."""
            return _convert(_convert(v, x_type), f32) if x_type != f32 else v

        def scaled(v):
            """scale S (S rounded as the chain rounds it)."""
            if scale is None:
                return v
            return arith.MulFOp(rounded(v), arith.ConstantOp(f32, scale).result).result

        def log2_exponent(v, c):
            """(X - z) log2 e as one product and sum (`c` = -z log2 e, per row): exp(X - z)
            is then 2^that, with `scale` folded into the product's constant."""
            if scale is None:
                base, factor = v, LOG2E
            else:
                base, factor = rounded(v), scale * LOG2E
            return fma_contract(base, arith.ConstantOp(f32, factor).result, c)

        if scale is not None:  # max X = scale max S: rounding keeps the order (scale > 0)
            tile_max = _elementwise(tile_max, f32, [rows], scaled)
        m_new = _elementwise(m_old, f32, [rows], lambda v, t: arith.MaximumFOp(v, t).result,
                             (tile_max, "(d0) -> (d0)"))
        neg_inf = arith.ConstantOp(f32, F32_NEG_INF).result
        zero = arith.ConstantOp(f32, 0.0).result

        def safe(v):
            return arith.SelectOp(arith.CmpFOp(arith.CmpFPredicate.OEQ, v, neg_inf).result,
                                  zero, v).result

        z = _elementwise(m_new, f32, [rows], safe)
        row = "(d0, d1) -> (d0)"
        # exp(X - z) = 2^((X - z) log2 e), the short form (`approx_exp2`: the probabilities'
        # denormals are below the row sum's rounding).
        z_log2 = _elementwise(z, f32, [rows], lambda v: arith.MulFOp(
            v, arith.ConstantOp(f32, -LOG2E).result).result)
        probs = _elementwise(x, f32, [rows, bn],
                             lambda v, c: approx_exp2(log2_exponent(v, c)), (z_log2, row))
        alpha = _elementwise(m_old, f32, [rows], lambda v, c: approx_exp2(
            fma_contract(v, arith.ConstantOp(f32, LOG2E).result, c)), (z_log2, "(d0) -> (d0)"))
        l_scaled = _update(l_old, lambda v, a: arith.MulFOp(v, a).result,
                           (alpha, "(d0) -> (d0)"))
        l_new = _row_reduce(probs, l_scaled, "arith.addf")
        acc_scaled = _update(acc_old, lambda v, a: arith.MulFOp(v, a).result, (alpha, row))
        if p.p_type != f32:
            probs = _elementwise(probs, f32, [rows, bn],
                                 lambda v: _convert(_convert(v, p.p_type), f32))
        v_tile = _widened(_rows(p.v, self.b, n0, bn), f32, [bn, p.dv])
        acc_new = _matmul(probs, v_tile, acc_scaled)
        m_kept = _update(m_old, lambda v, t: arith.MaximumFOp(v, t).result,
                         (tile_max, "(d0) -> (d0)"))
        return [m_kept, l_new, acc_new]


def _erase_dead(group: ir.Operation) -> None:
    """Erase the group's ops whose results nothing reads (the unfused chain), last first."""
    body = group.regions[0].blocks[0]
    changed = True
    while changed:
        changed = False
        for op in reversed([o.operation for o in body.operations]):
            if op.name in ("fusion.yield",) or not op.results:
                continue
            if all(not list(r.uses) for r in op.results):
                op.erase()
                changed = True


@register
@dataclass
class CpuAttentionPass(Pass):
    """Build each attention group as an online-softmax tile loop (see the module docstring)."""

    ARGUMENT = "fusion-cpu-attention"
    block_rows: int = 0
    block_keys: int = 0
    threads: int = 0

    def run(self, module: ir.Operation) -> None:
        import os

        threads = self.threads or os.cpu_count() or 1
        for group in groups_in(module):
            if not is_attention(group) or attributes.GRID in group.attributes:
                continue
            parts = parts_of(group)
            tile = cost_model.cpu_attention_tile(parts.batch, parts.m, parts.n, parts.d,
                                                 parts.dv, threads,
                                                 causal=parts.causal is not None)
            build(group, parts, self.block_rows or tile[0], self.block_keys or tile[1])
