"""--fusion-attention: scaled dot-product attention as one group of kind `attention`.

Finds, in the imported graph, the chain

    S = Q @ K^T            (batch_matmul / matmul; K^T a transpose of K's last two dims)
    X = score(S, ...)      (any elementwise ops on S: scale, casts, an additive or `where`
                            mask, computed from indices, constants or inputs)
    P = softmax(X, -1)     (max, subtract, exp, sum, divide over the last dim, as torch-mlir
                            decomposes `softmax`, with casts around it)
    O = P @ V

and wraps it in one `fusion.group attention`, so that a target can build it as one kernel
with an online softmax (FlashAttention's): the N x N scores S, X and P never reach memory.
The group holds Q's, K's and V's layout ops (collapses, K's transpose), the score chain
(`score` ops: their other operands' producers come along when nothing else reads them: a
causal mask computed from indices is evaluated inside the kernel), the softmax, both
contractions and the casts and reshapes after O. Its parameters are recorded in
`fusion.attention` (batch, q_len, kv_len, head_dim, v_dim, score_ops, mask = none |
computed, scale where the score chain is one multiply or divide by a constant).

A target decides whether it can build the group (fusec.passes.targets.attention_refusal);
where it cannot, or the graph is not this chain, the ops are left for the planner and the
reason recorded on the first contraction (`fusion.attention_refused`). Not recognised, with
the reason:
- softmax over another axis than the keys' (`softmax over dim 2, not the last`);
- scores or probabilities used outside the chain (returned, or read by another op: the
  kernel never materialises them);
- a mask or other score operand computed from the scores themselves (not elementwise);
- Q, K or V read through anything but reshapes (and K through its transpose).

Before (naive attention, 14 ops):
    %t = linalg.transpose ins(%k) ... permutation = [0, 1, 3, 2]
    %s = linalg.batch_matmul ins(%qc, %tc) outs(%zero)
    ... scale, max, sub, exp, sum, div ...
    %o = linalg.batch_matmul ins(%pc, %vc) outs(%zero2)
After:
    %o = fusion.group attention (%q, %k, %v) attributes {fusion.attention = {batch = 8,
        head_dim = 32, kv_len = 64, mask = "none", q_len = 64, scale = 0.1767..., ...}} {
      ... the same ops ...
    }

Options: device (the target asked whether it builds the group: nvidia-h200 | cpu).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlir.ir as ir
from fusec.passes import attributes
from fusec.passes.fusion.form_singletons import function_bodies
from fusec.passes.grouping import (
    CASTS,
    CLONED_INTO_GROUPS,
    RESHAPE_OPS,
    cast_input,
    defining_op,
    form_group,
    is_identity,
    op_key,
    use_owner,
)
from fusec.passes.registry import Pass, PassError, register

CONTRACTIONS = ("linalg.batch_matmul", "linalg.matmul")
# Producers of the score chain's other operands that come into the group (evaluated per
# element by the kernel) when nothing outside reads them.
SIDE_OPS = frozenset({"linalg.generic", "linalg.fill", "linalg.broadcast", "linalg.transpose",
                      "tensor.expand_shape", "tensor.collapse_shape", "tensor.extract_slice"})


class NotAttention(Exception):
    """The chain is not (or not only) attention; the message says why."""


def _payload(op: ir.Operation) -> list[ir.Operation]:
    """A generic's payload ops, without the terminator."""
    ops = [o.operation for o in op.regions[0].blocks[0].operations]
    return ops[:-1]


def _core(op: ir.Operation) -> list[str]:
    """A payload's op names without its casts: the same op whether the 16-bit widening
    (`--fusion-gpu-widen-16bit-payloads`) computed it in f32 or not."""
    return [o.name for o in _payload(op) if o.name not in CASTS]


def _iterators(op: ir.Operation) -> list[str]:
    return [str(a).split("<")[-1].rstrip(">")
            for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def _maps(op: ir.Operation) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _shape(value: ir.Value) -> list[int]:
    return list(ir.RankedTensorType(value.type).shape)


def _elementwise(op: ir.Operation | None) -> bool:
    return op is not None and op.name == "linalg.generic" and \
        all(i == "parallel" for i in _iterators(op)) and len(op.results) == 1


@dataclass
class Walk:
    """Values walked through on the way back (reshapes, casts): they join the group."""

    ops: list[ir.Operation] = field(default_factory=list)

    def back(self, value: ir.Value, casts: bool = True) -> ir.Value:
        """`value` through reshapes (and casts), recording the ops passed."""
        while True:
            op = defining_op(value)
            if op is not None and op.name in RESHAPE_OPS:
                self.ops.append(op)
                value = op.operands[0]
                continue
            source = cast_input(op) if casts else None
            if source is not None:
                self.ops.append(op)
                value = source
                continue
            return value


def _reduction_over_last(op: ir.Operation | None, combiner: str) -> bool:
    """A generic reducing its last loop only with `combiner` (the softmax's max or sum)."""
    if op is None or op.name != "linalg.generic":
        return False
    iters = _iterators(op)
    if not iters or iters[-1] != "reduction" or any(i != "parallel" for i in iters[:-1]):
        return False
    return any(o.name == combiner for o in _payload(op))


@dataclass
class Match:
    qk: ir.Operation
    pv: ir.Operation
    q: ir.Value
    k: ir.Value
    v: ir.Value
    score: ir.Value  # the softmax's input X
    chain: list[ir.Operation]  # ops computing X from S (S's own reshapes and casts included)
    sides: list[ir.Value]  # the score chain's other operands (masks, constants)
    members: list[ir.Operation]
    out: ir.Value
    scale: float | None
    zero_masked_rows: bool = False  # P = where(rowmax == -inf, 0, softmax): 0, not NaN


def _is_neg_inf_constant(value: ir.Value) -> bool:
    op = defining_op(value)
    if op is None or op.name != "arith.constant":
        return False
    attr = op.attributes["value"]
    return isinstance(attr, ir.FloatAttr) and ir.FloatAttr(attr).value == float("-inf")


def _is_zero(value: ir.Value) -> bool:
    op = defining_op(value)
    if op is None or op.name != "arith.constant":
        return False
    attr = op.attributes["value"]
    if isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
        attr = attr.get_splat_value()
    return isinstance(attr, ir.FloatAttr) and ir.FloatAttr(attr).value == 0.0


def _safe_rows(p: ir.Value, walk: Walk) -> tuple[ir.Value, ir.Value | None]:
    """torch's SDPA decomposition with a mask ends in where(rowmax == -inf, 0, P): a fully
    masked row gives zeros, not the NaN of 0 / 0. Returns (P, the tested row max) when the
    select is there (its ops join the walk), else (p, None)."""
    op = defining_op(p)
    if not _elementwise(op) or len(op.operands) != 4:
        return p, None
    if _core(op) != ["arith.select"]:
        return p, None
    block = op.regions[0].blocks[0]
    sel = next(o for o in _payload(op) if o.name == "arith.select")
    args = list(block.arguments)

    def arg_of(v: ir.Value) -> ir.Value:
        inner = defining_op(v)
        return inner.operands[0] if inner is not None and inner.name in CASTS else v

    if [arg_of(v) for v in sel.operands] != args[:3]:
        return p, None
    cond, zero, inner = op.operands[0], op.operands[1], op.operands[2]
    if not _is_zero(zero):
        return p, None
    test = defining_op(cond)
    if not _elementwise(test) or len(test.operands) != 2:
        return p, None
    names = [o.name for o in _payload(test)]
    cmp = [o for o in _payload(test) if o.name == "arith.cmpf"]
    if not cmp or any(n not in ("arith.extf", "arith.cmpf") for n in names) or \
            ir.IntegerAttr(cmp[0].attributes["predicate"]).value != 1:  # oeq
        return p, None
    if not any(_is_neg_inf_constant(v) for v in cmp[0].operands):
        return p, None
    walk.ops += [op, test]
    return inner, test.operands[0]


def _row_max(p: ir.Value) -> ir.Value:
    """The max reduction's result the softmax subtracts (for P = e / sum(e))."""
    div = defining_op(p)
    e = div.operands[0]
    while True:
        op = defining_op(e)
        if op is not None and (op.name in RESHAPE_OPS or cast_input(op) is not None):
            e = op.operands[0]
            continue
        break
    exp_op = defining_op(e)
    sub = exp_op if _core(exp_op) == ["arith.subf", "math.exp"] else \
        defining_op(Walk().back(exp_op.operands[0]))
    return sub.operands[1]


def _softmax_input(p: ir.Value, walk: Walk) -> ir.Value:
    """X, for P = softmax(X, -1) as torch-mlir decomposes it (e / sum(e), e = exp(X -
    max(X))); raises NotAttention otherwise."""
    div = defining_op(p)
    if not _elementwise(div) or _core(div) != ["arith.divf"] or \
            len(div.operands) != 3:
        raise NotAttention("P @ V's P is not a softmax's division e / sum(e)")
    walk.ops.append(div)
    e, total = div.operands[0], walk.back(div.operands[1])
    reducer = defining_op(total)
    if not _reduction_over_last(reducer, "arith.addf"):
        if reducer is not None and reducer.name == "linalg.generic" and \
                "reduction" in _iterators(reducer):
            raise NotAttention(f"softmax over dim {_iterators(reducer).index('reduction')}, "
                               f"not the last")
        raise NotAttention("the softmax's sum is not a reduction over the last dim")
    walk.ops += [reducer, *(o for o in (defining_op(reducer.operands[1]),) if o is not None)]
    if walk.back(reducer.operands[0]) != walk.back(e):
        raise NotAttention("the softmax sums another tensor than it divides")
    exp_op = defining_op(walk.back(e))
    if not _elementwise(exp_op) or not any(o.name == "math.exp" for o in _payload(exp_op)):
        raise NotAttention("the softmax's numerator is not an exp")
    walk.ops.append(exp_op)
    names = _core(exp_op)
    if names == ["math.exp"]:
        sub = defining_op(walk.back(exp_op.operands[0]))
        if not _elementwise(sub) or _core(sub) != ["arith.subf"]:
            raise NotAttention("the softmax's exp is not of x - max(x)")
        walk.ops.append(sub)
    elif names == ["arith.subf", "math.exp"]:
        sub = exp_op
    else:
        raise NotAttention("the softmax's exp is not of x - max(x)")
    x, mx = sub.operands[0], walk.back(sub.operands[1])
    maxer = defining_op(mx)
    if not _reduction_over_last(maxer, "arith.maximumf"):
        raise NotAttention("the softmax's max is not a reduction over the last dim")
    # torch-mlir's max also yields the argmax; nothing may read it.
    if any(len(list(r.uses)) for r in list(maxer.results)[1:]):
        raise NotAttention("the softmax's argmax is used")
    walk.ops += [maxer, *(o for o in (defining_op(v) for v in
                                      list(maxer.operands)[1:]) if o is not None)]
    if walk.back(maxer.operands[0]) != walk.back(x):
        raise NotAttention("the softmax's max is of another tensor")
    return walk.back(x)


def _score_chain(x: ir.Value, s: ir.Value) -> tuple[list[ir.Operation], list[ir.Value]]:
    """The elementwise ops computing X from S (S = the first contraction's result) and their
    other operands; raises NotAttention where X is not elementwise in S."""
    chain: list[ir.Operation] = []
    sides: list[ir.Value] = []
    seen: dict[int, bool] = {}

    def depends(value: ir.Value) -> bool:
        if value == s:
            return True
        op = defining_op(value)
        if op is None:
            return False
        key = op_key(op)
        if key not in seen:
            seen[key] = False
            if op.name in RESHAPE_OPS or op.name == "linalg.generic":
                seen[key] = any(depends(v) for v in op.operands)
        return seen[key]

    def visit(value: ir.Value) -> None:
        if value == s:
            return
        op = defining_op(value)
        if op is None or any(o == op for o in chain):
            return
        if op.name in RESHAPE_OPS:
            chain.append(op)
            visit(op.operands[0])
            return
        if not _elementwise(op):
            raise NotAttention(f"'{op.name}' between the scores and the softmax is not "
                               f"elementwise")
        chain.append(op)
        n_in = len(op.operands) - 1
        for v, m in zip(list(op.operands)[:n_in], _maps(op)):
            if depends(v):
                if not is_identity(m):
                    raise NotAttention("the scores are read through a broadcast or transpose "
                                       "in the score chain")
                visit(v)
            elif not any(v == w for w in sides):
                sides.append(v)

    if not depends(x):
        raise NotAttention("the softmax's input does not depend on Q @ K^T")
    visit(x)
    return chain, sides


def _scale_of(chain: list[ir.Operation], sides: list[ir.Value]) -> float | None:
    """The constant the scores are multiplied by, where the chain is one such multiply or
    divide (with casts and reshapes around it)."""
    if sides:
        return None
    found = None
    for op in chain:
        if op.name in RESHAPE_OPS or cast_input(op) is not None:
            continue
        body = _payload(op)
        arith = [o for o in body if o.name in ("arith.mulf", "arith.divf")]
        if len(arith) != 1 or found is not None:
            return None
        const = [defining_op(v) for v in arith[0].operands]
        value = None
        for c in const:
            if c is not None and c.name == "arith.constant":
                value = float(ir.FloatAttr(c.attributes["value"]).value)
            elif c is not None and c.name in CASTS:
                inner = defining_op(c.operands[0])
                if inner is not None and inner.name == "arith.constant":
                    value = float(ir.FloatAttr(inner.attributes["value"]).value)
        if value is None or value == 0.0:
            return None
        found = value if arith[0].name == "arith.mulf" else 1.0 / value
    return found


def computed_scale(m: Match, masks_pass: float | None = None) -> float | None:
    """`m.scale` as the score chain computes it: the constant rounded by the casts between
    it and its multiply (SDPA's 1 / sqrt(d), an f64 constant, multiplies bf16 scores as
    bf16: 0.0883883... is 0.08837890625), inverted for a divide (x / c is x * (1 / c) in
    f32, rounded once); None where the chain is not one such multiply or a cast's rounding
    is not certain here.

    `masks_pass`: where the chain has masks, the scale X / S that the whole chain was
    found (in float64) to compute where they let every score through (a kernel's tiles
    below a causal diagonal: `attention_mask.interior_scale`). The ops reading a mask are
    then passed over, and the constant found must be that scale to a 16-bit rounding (a
    mask op that also scales is not passed over unseen)."""
    import struct

    def rounded(x: float, type_: str) -> float | None:
        if type_ == "f64":
            return x
        single = struct.unpack("<f", struct.pack("<f", x))[0]
        if type_ == "f32":
            return single
        if type_ == "bf16":  # the nearest of the bf16 values around x, ties to even
            top = struct.unpack("<I", struct.pack("<f", single))[0] & 0xFFFF0000
            near = [(abs(struct.unpack("<f", struct.pack("<I", b))[0] - x), (b >> 16) & 1, b)
                    for b in (top - 0x10000, top, top + 0x10000)
                    if 0 <= b <= 0xFFFFFFFF and (b ^ top) >> 31 == 0]
            return struct.unpack("<f", struct.pack("<I", min(near)[2]))[0]
        if type_ == "f16":
            try:
                return struct.unpack("<e", struct.pack("<e", x))[0]
            except OverflowError:
                return None
        return None

    def through_casts(value: ir.Value) -> tuple[ir.Value, list[str]]:
        casts = []
        source = defining_op(value)
        while source is not None and source.name in CASTS:
            casts.append(str(source.results[0].type))
            value = source.operands[0]
            source = defining_op(value)
        return value, casts

    if m.sides and masks_pass is None:
        return None
    found: float | None = None
    for op in m.chain:
        if op.name in RESHAPE_OPS or cast_input(op) is not None:
            continue
        if masks_pass is not None and _reads_mask(op, m):
            continue
        body = [o for o in _payload(op) if o.name != "linalg.yield"]
        arith = [o for o in body if o.name in ("arith.mulf", "arith.divf")]
        if found is not None or len(arith) != 1 or any(
                o.name not in (*CASTS, "arith.constant", "arith.mulf", "arith.divf")
                for o in body):
            return None  # more than S times a constant
        (scores, _), (constant, casts) = (through_casts(v) for v in arith[0].operands)
        if arith[0].name == "arith.mulf" and isinstance(scores, ir.OpResult):
            # c * S: the constant's casts are the first operand's.
            (constant, casts), (scores, _) = (through_casts(v) for v in arith[0].operands)
        source = defining_op(constant)
        if not isinstance(scores, ir.BlockArgument) or source is None or \
                source.name != "arith.constant":
            return None
        value: float | None = float(ir.FloatAttr(source.attributes["value"]).value)
        for type_ in reversed(casts):
            value = None if value is None else rounded(value, type_)
        if value is None or value == 0.0:
            return None
        found = rounded(1.0 / value, "f32") if arith[0].name == "arith.divf" else value
    if masks_pass is not None and (found is None or
                                   abs(found - masks_pass) > abs(masks_pass) * 2.0 ** -7):
        return None
    return found


def _reads_mask(op: ir.Operation, m: Match) -> bool:
    """Whether a score-chain op reads one of the chain's side values (a mask, a mask's
    constant) or an index (a mask computed in its payload)."""
    return any(v == w for v in op.operands for w in m.sides) or \
        any(o.name == "linalg.index" for o in _payload(op))


def _split_transpose(t: ir.Operation) -> ir.Operation:
    """K^T = transpose(X, p) with p not the swap of the last two dims (the canonicaliser
    composed K's head split into it: (0, 2, 3, 1) of [B, T, H, D]) becomes
    K = transpose(X, p') (p with its last two entries swapped: K as [..., N, D]) and
    K^T = transpose(K, swap); returns the new K^T transpose."""
    from mlir.dialects import linalg, tensor

    perm = list(ir.DenseI64ArrayAttr(t.attributes["permutation"]))
    rank = len(perm)
    inner = perm[:-2] + [perm[-1], perm[-2]]
    src = t.operands[0]
    src_type = ir.RankedTensorType(src.type)
    k_shape = [src_type.shape[p] for p in inner]
    with ir.InsertionPoint(t), t.location:
        if inner != list(range(rank)):
            init = tensor.EmptyOp(k_shape, src_type.element_type)
            k = linalg.transpose(src, outs=[init.result], permutation=inner).result
        else:
            k = src
        init = tensor.EmptyOp(list(ir.RankedTensorType(t.results[0].type).shape),
                              src_type.element_type)
        swap = linalg.transpose(k, outs=[init.result],
                                permutation=[*range(rank - 2), rank - 1, rank - 2])
    t.results[0].replace_all_uses_with(swap.results[0])
    t.erase()
    return swap.operation


def match(pv: ir.Operation) -> Match:
    """The attention ending in contraction `pv`; raises NotAttention with the reason."""
    walk = Walk()
    if len(_shape(pv.results[0])) not in (2, 3):
        raise NotAttention("not a (batch) matmul")
    p, zero_rows = _safe_rows(walk.back(pv.operands[0]), walk)
    x = _softmax_input(p, walk)
    if zero_rows is not None and walk.back(zero_rows) != walk.back(_row_max(p)):
        raise NotAttention("the fully-masked-row test is of another max than the softmax's")
    # S: the first contraction's result, through the chain.
    qk = None
    candidates = [x]
    seen: set[int] = set()
    while candidates:
        value = candidates.pop()
        op = defining_op(value)
        if op is None or op_key(op) in seen:
            continue
        seen.add(op_key(op))
        if op.name in CONTRACTIONS:
            if qk is not None and qk != op:
                raise NotAttention("the scores depend on two contractions")
            qk = op
            continue
        if op.name in RESHAPE_OPS or _elementwise(op):
            candidates += list(op.operands)[:len(op.operands) - (0 if op.name in RESHAPE_OPS
                                                                  else 1)]
    if qk is None or qk.name != pv.name:
        raise NotAttention("no Q @ K^T of the same rank before the softmax")
    chain, sides = _score_chain(x, qk.results[0])
    for init in (qk.operands[2], pv.operands[2]):
        fill = defining_op(init)
        if fill is None or fill.name != "linalg.fill":
            raise NotAttention("a contraction that accumulates into a tensor, not zeros")
        walk.ops.append(fill)
    operands = Walk()
    q = operands.back(qk.operands[0], casts=False)
    kt = operands.back(qk.operands[1], casts=False)
    t = defining_op(kt)
    rank = len(_shape(kt))
    swap = [*range(rank - 2), rank - 1, rank - 2]
    if t is None or t.name != "linalg.transpose":
        raise NotAttention("K^T is not a transpose of K")
    if list(ir.DenseI64ArrayAttr(t.attributes["permutation"])) != swap:
        if t.parent.name == "fusion.group":
            raise NotAttention("K^T is not a transpose of K's last two dims")
        t = _split_transpose(t)
    operands.ops.append(t)
    k = operands.back(t.operands[0], casts=False)
    v = operands.back(pv.operands[1], casts=False)
    # O: through reshapes and casts that nothing else reads.
    out = pv.results[0]
    tail: list[ir.Operation] = []
    while True:
        users = list(out.uses)
        if len(users) != 1:
            break
        user = use_owner(users[0])
        if user.name in RESHAPE_OPS or cast_input(user) is not None:
            tail.append(user)
            out = user.results[0]
            continue
        break
    members = [qk, pv, *chain, *walk.ops, *operands.ops, *tail]
    return Match(qk, pv, q, k, v, x, chain, sides, members, out, _scale_of(chain, sides),
                 zero_rows is not None)


def match_group(group: ir.Operation) -> Match:
    """The attention chain of an attention group (the first contraction that `match`es);
    raises NotAttention when it holds none."""
    for op in group.regions[0].blocks[0].operations:
        op = op.operation
        if op.name in CONTRACTIONS:
            try:
                return match(op)
            except NotAttention:
                continue
    raise NotAttention("the attention group holds no attention chain")


def _dedupe(ops: list[ir.Operation]) -> list[ir.Operation]:
    seen, out = set(), []
    for op in ops:
        if op_key(op) not in seen:
            seen.add(op_key(op))
            out.append(op)
    return out


def _users(op: ir.Operation) -> list[ir.Operation]:
    out = []
    for r in op.results:
        for use in r.uses:
            out.append(use_owner(use))
    return out


def _private_fill(fill: ir.Operation, keys: set[int]) -> ir.Operation:
    """A copy of `fill` for the members' uses of it, when ops outside read it too (CSE merges
    equal fills): the group's accumulator must be its own."""
    clone = fill.clone(ir.InsertionPoint(fill))
    for r, c in zip(fill.results, clone.results):
        for use in list(r.uses):
            owner = use_owner(use)
            if op_key(owner) in keys:
                owner.operands[use.operand_number] = c
    return clone


def _closed(members: list[ir.Operation], m: Match) -> list[ir.Operation]:
    """`members` plus the producers of the score chain's other operands that nothing else
    reads (a mask from indices), minus the layout ops of Q, K and V that are also read
    outside (their results become the group's inputs); fills shared with other ops are
    copied. Raises NotAttention when an intermediate of the chain is read outside."""
    keys = {op_key(o) for o in members}
    frontier = list(m.sides)
    while frontier:
        op = defining_op(frontier.pop())
        if op is None or op_key(op) in keys or op.name in CLONED_INTO_GROUPS:
            continue
        if op.name not in SIDE_OPS or (op.name == "linalg.generic" and not all(
                i == "parallel" for i in _iterators(op))):
            continue
        if any(op_key(u) not in keys | {op_key(op)} for u in _users(op)):
            continue
        keys.add(op_key(op))
        members.append(op)
        frontier += list(op.operands)
    for i, op in enumerate(members):
        if op.name == "linalg.fill" and any(op_key(u) not in keys for u in _users(op)):
            members[i] = _private_fill(op, keys)
            keys.discard(op_key(op))
            keys.add(op_key(members[i]))
    # Layout ops of the operands read outside stay outside (to a fixpoint: a transpose
    # whose collapse left goes too).
    layout = {op_key(o) for o in members if o.name in RESHAPE_OPS or o.name == "linalg.transpose"}
    core = {op_key(o) for o in [*m.chain, m.qk, m.pv]}
    changed = True
    while changed:
        changed = False
        for op in list(members):
            key = op_key(op)
            if key in layout and key not in core and \
                    any(op_key(u) not in keys for u in _users(op)) and op.results[0] != m.out:
                members.remove(op)
                keys.discard(key)
                changed = True
    if not any(o.name == "linalg.transpose" for o in members):
        raise NotAttention("K^T is also read outside the attention")
    for op in members:
        if op.results and any(r == m.out for r in op.results):
            continue
        if any(op_key(u) not in keys for u in _users(op)):
            raise NotAttention(f"'{op.name}' of the attention is also read outside it (the "
                               f"kernel never materialises the scores or probabilities)")
    return members


def parameters(m: Match) -> dict[str, ir.Attribute]:
    i64 = ir.IntegerType.get_signless(64)
    s_shape = _shape(m.qk.results[0])
    o_shape = _shape(m.pv.results[0])
    batch = 1
    for d in s_shape[:-2]:
        batch *= d
    scores = [o for o in m.chain if o.name not in RESHAPE_OPS]
    params: dict[str, ir.Attribute] = {
        "batch": ir.IntegerAttr.get(i64, batch),
        "q_len": ir.IntegerAttr.get(i64, s_shape[-2]),
        "kv_len": ir.IntegerAttr.get(i64, s_shape[-1]),
        "head_dim": ir.IntegerAttr.get(i64, _shape(m.qk.operands[0])[-1]),
        "v_dim": ir.IntegerAttr.get(i64, o_shape[-1]),
        "score_ops": ir.IntegerAttr.get(i64, len(scores)),
        "mask": ir.StringAttr.get("computed" if m.sides else "none"),
        "dtype": ir.StringAttr.get(str(ir.RankedTensorType(m.qk.operands[0].type).element_type)),
    }
    if m.scale is not None:
        params["scale"] = ir.FloatAttr.get(ir.F64Type.get(), m.scale)
    params["masked_rows"] = ir.StringAttr.get("zero" if m.zero_masked_rows else "nan")
    return params


ATTENTION = attributes.ATTENTION
REFUSED = attributes.ATTENTION_REFUSED


@register
@dataclass
class FuseAttentionPass(Pass):
    """Wrap each attention chain (Q K^T, score ops, softmax, P V) in one attention group."""

    ARGUMENT = "fusion-attention"
    device: str = "nvidia-h200"

    def run(self, module: ir.Operation) -> None:
        from fusec.passes.targets import attention_refusal

        for block in function_bodies(module):
            for op in [o.operation for o in block.operations]:
                if op.name not in CONTRACTIONS or op.parent.name == "fusion.group":
                    continue
                try:
                    with op.location:
                        m = match(op)
                        members = _dedupe(_closed(_dedupe(m.members), m))
                except NotAttention as why:
                    first = _first_contraction(op)
                    if first is not None and "is not a softmax" not in str(why):
                        first.attributes[REFUSED] = ir.StringAttr.get(str(why))
                    continue
                with op.location:
                    params = parameters(m)
                refusal = attention_refusal(self.device, {k: _plain(a) for k, a in
                                                          params.items()})
                if refusal is not None:
                    m.qk.attributes[REFUSED] = ir.StringAttr.get(refusal)
                    continue
                try:
                    with op.location:
                        form_group(members, "attention", {
                            ATTENTION: ir.DictAttr.get(params),
                            attributes.REASON: ir.StringAttr.get(
                                "attention: Q K^T, the score ops, softmax and P V in one "
                                "kernel (online softmax: the scores never reach memory)"),
                            attributes.DEVICE: ir.StringAttr.get(self.device),
                            attributes.PATH: ir.StringAttr.get("attention")})
                except PassError as e:
                    m.qk.attributes[REFUSED] = ir.StringAttr.get(f"not one kernel: {e.message}")
                    continue


def _first_contraction(pv: ir.Operation) -> ir.Operation | None:
    """The contraction before `pv`'s softmax, if any (where a refusal is recorded)."""
    seen: set[int] = set()
    stack = [pv.operands[0]]
    while stack:
        op = defining_op(stack.pop())
        if op is None or op_key(op) in seen:
            continue
        seen.add(op_key(op))
        if op.name in CONTRACTIONS:
            return op
        if op.name in RESHAPE_OPS or op.name == "linalg.generic":
            stack += list(op.operands)
    return None


def _plain(attr: ir.Attribute):
    if isinstance(attr, ir.IntegerAttr):
        return attr.value
    if isinstance(attr, ir.FloatAttr):
        return attr.value
    return ir.StringAttr(attr).value
