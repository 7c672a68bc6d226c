"""CUDA target: rewrites."""

from __future__ import annotations

import math
from typing import Any

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import analyse_group, iterators, numel_of, tensor_info, \
    value_key
from fusec.compiler.targets.cuda.body import (
    GEMM_OPS,
    RESHAPE_OPS,
    cast_types,
    defining,
    group_body_ops,
    single_use,
    unary_kind,
)
from fusec.compiler.targets.cuda.device import ELEMENT_BYTES, GROUP_OP, CudaCodegenError
from fusec.compiler.targets.cuda.emitter import KernelEmitter, fast_kernel_text, id_of, is_weight
from fusec.compiler.targets.cuda.gemm import (
    absorb_epilogue,
    bias_add,
    gemm_operand,
    layout_walk,
    plan_gemm_split,
    swaps_last_two,
    view_through,
)
from fusec.compiler.targets.cuda.layouts import (
    SLICE_OFFSETS,
    VIEW_ALIGNMENT,
    VIEW_OFFSET,
    layout_generic,
    layout_source,
    matrix_layout,
    result_view,
)
from fusec.compiler.targets.cuda.options import CudaOptions
from fusec.passes import attributes, cost_model
# Payload ops computed in f32 when their type is 16-bit: one set for the linalg stage's
# accumulator widening and this target's payload widening.
from fusec.passes.linalg.widen_accumulators import HALF as _HALF
from fusec.passes.linalg.widen_accumulators import WIDENABLE as _WIDENABLE
from fusec.passes.grouping import is_attention
from fusec.passes.grouping import use_owner  # noqa: F401 - folding.py imports it here


def unit_transposes_to_reshapes(func: ir.Operation) -> int:
    """Rewrite each linalg.transpose that only moves size-1 dims (batch 1: [1, 16, 512] ->
    [16, 1, 512]) into a collapse_shape to 1-D and an expand_shape: the same bytes, so no
    kernel (cuBLASLt reads through it, the emitter treats it as a view). Returns how many."""
    from fusec.passes.grouping import walk_ops

    count = 0
    for op in walk_ops(func, lambda o: o.name == "linalg.transpose"):
        if op.parent.name == GROUP_OP and _is_attention(op.parent):
            continue  # K^T stays a transpose: the attention kernel reads K through it
        src = op.operands[0]
        src_shape = list(ir.RankedTensorType(src.type).shape)
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        moved = [p for p in perm if src_shape[p] != 1]
        if len(src_shape) < 2 or moved != sorted(moved) or not op.results[0].uses:
            continue
        result_type = op.results[0].type
        numel = math.prod(src_shape)
        elt = ir.RankedTensorType(src.type).element_type
        out_shape = list(ir.RankedTensorType(result_type).shape)
        with ir.InsertionPoint(op), op.location:
            flat = ir.Operation.create(
                "tensor.collapse_shape", results=[ir.RankedTensorType.get([numel], elt)],
                operands=[src], attributes={"reassociation": ir.ArrayAttr.parse(
                    "[[" + ", ".join(str(i) for i in range(len(src_shape))) + "]]")})
            view = ir.Operation.create(
                "tensor.expand_shape", results=[result_type], operands=[flat.results[0]],
                attributes={"reassociation": ir.ArrayAttr.parse(
                    "[[" + ", ".join(str(i) for i in range(len(out_shape))) + "]]"),
                    "static_output_shape": ir.DenseI64ArrayAttr.get(out_shape)})
        op.results[0].replace_all_uses_with(view.results[0])
        op.erase()
        count += 1
    return count


def _cone(value: ir.Value, members: dict[int, ir.Operation]) -> set[int]:
    """Keys of the ops among `members` that `value` depends on (itself included)."""
    from fusec.passes.grouping import walk_ops

    seen: set[int] = set()
    stack = [value]
    while stack:
        producer = defining(stack.pop())
        if producer is None or id_of(producer) not in members or id_of(producer) in seen:
            continue
        seen.add(id_of(producer))
        for inner in walk_ops(producer):
            stack.extend(inner.operands)
    return seen


def group_refusal(group: ir.Operation, options: CudaOptions) -> str | None:
    """Why neither group-level emitter takes `group` as it is (None: one does): the fast
    emitter (`KernelEmitter`) or, where it refuses, the data-movement family (movement.py,
    unless `options.movement` is off)."""
    from fusec.compiler.targets.cuda.movement import movement_refusal

    try:
        geometry = analyse_group(group, options.description, options.row_elements_per_thread,
                                 options.elementwise_unroll)
        weights = [w for w in group.regions[0].blocks[0].operations if is_weight(w)]
        fast_kernel_text(group, "fusec_probe", geometry, weights)
    except CudaCodegenError as refusal:
        if not options.movement:
            return str(refusal)
        moved = movement_refusal(group, options.description)
        return None if moved is None else f"{refusal} (data movement: {moved})"
    return None


def _emittable(group: ir.Operation, options: CudaOptions) -> bool:
    """Whether the fast emitter takes `group` as it is."""
    return group_refusal(group, options) is None


def _pieces_at_reshapes(ops: list[ir.Operation],
                        cut_concats: bool = False) -> list[list[ir.Operation]]:
    """`ops` (a group's body, constants left out) cut before every reshape of a value the group
    computes (and, `cut_concats`, around every concat): the connected pieces of the def-use
    graph without those edges, in block order."""
    keys = {id_of(o): i for i, o in enumerate(ops)}
    parent = list(range(len(ops)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, op in enumerate(ops):
        for v in op.operands:
            producer = defining(v)
            if producer is None or id_of(producer) not in keys:
                continue
            # Cut into the first reshape of a chain (reshapes of reshapes stay together).
            if op.name in RESHAPE_OPS and producer.name not in RESHAPE_OPS:
                continue
            if cut_concats and "tensor.concat" in (op.name, producer.name):
                continue
            parent[find(i)] = find(keys[id_of(producer)])
    pieces: dict[int, list[ir.Operation]] = {}
    for i, op in enumerate(ops):
        pieces.setdefault(find(i), []).append(op)
    return list(pieces.values())


def _is_gather(op: ir.Operation) -> bool:
    """A generic whose payload reads by index (tensor.extract) or computes from one, or a
    concat: data movement the fast emitter does not build, beside a reduction the
    data-movement family does not build."""
    return op.name == "tensor.concat" or op.name == "linalg.generic" and any(
        inner.operation.name in ("tensor.extract", "linalg.index")
        for inner in op.regions[0].blocks[0].operations)


def _cone_of(values, members: dict[int, ir.Operation]) -> set[int]:
    """`_cone` of each of `values`, together."""
    cone: set[int] = set()
    for v in values:
        cone |= _cone(v, members)
    return cone


def _cut_at(ops: list[ir.Operation], cone: set[int]) -> list[list[ir.Operation]]:
    """`ops` as [those in `cone`, the rest] (block order kept), or [ops] when either is
    empty."""
    first = [o for o in ops if id_of(o) in cone]
    rest = [o for o in ops if id_of(o) not in cone]
    return [first, rest] if first and rest else [ops]


def _pieces_at_gathered_reduction(ops: list[ir.Operation]) -> list[list[ir.Operation]]:
    """`ops` cut before the first reduction whose inputs are computed from gathers or
    concats (and from no reduction): [what its inputs need, the rest], or [ops] when there
    is none (ViT's class token concatenated to its patches, positions added, then the first
    LayerNorm: a data-movement kernel and a row kernel)."""
    members = {id_of(o): o for o in ops}
    for op in ops:
        if op.name != "linalg.generic" or "reduction" not in iterators(op):
            continue
        n_in = len(op.operands) - len(op.results)
        cone = _cone_of(list(op.operands)[:n_in], members)
        inside = [members[k] for k in cone]
        if not any(_is_gather(o) for o in inside) or any(
                o.name == "linalg.generic" and "reduction" in iterators(o) for o in inside):
            continue
        return _cut_at(ops, cone)
    return [ops]


def _pieces_at_concatenated_reductions(ops: list[ir.Operation]) -> list[list[ir.Operation]]:
    """`ops` cut before the first concat of values computed from reductions: [what its
    operands need, the rest] (a top-k's maxima and their indices concatenated into its
    [..., k] outputs: a row kernel, then a data-movement one; neither group-level emitter
    builds reductions and a concat in one kernel), or [ops] when there is none."""
    members = {id_of(o): o for o in ops}
    for op in ops:
        if op.name != "tensor.concat":
            continue
        cone = _cone_of(op.operands, members)
        if not any(members[k].name == "linalg.generic" and "reduction" in iterators(members[k])
                   for k in cone):
            continue
        return _cut_at(ops, cone)
    return [ops]


def _pieces_at_broadcast_reductions(ops: list[ir.Operation]) -> list[list[ir.Operation]]:
    """`ops` cut after each reduction whose result the piece reads back at more points than
    the reduction has (GroupNorm's mean over a group's channels and pixels, read again by
    its variance's `x - mean` and by the normalisation; a LayerNorm over a permuted, strided
    dim): [the reduction and what it needs, the rest], the rest cut again the same way.
    Neither group-level emitter builds such a group whole: the fast emitter reduces
    contiguous last dims only, and the data-movement family would fold the reduction again
    for every element that reads it. Cut, each reduction is a kernel of the data-movement
    family and the rest reads its result from memory."""
    pieces: list[list[ir.Operation]] = []
    rest = list(ops)
    while True:
        members = {id_of(o): o for o in rest}
        cut = None
        for op in rest:
            if op.name != "linalg.generic" or "reduction" not in iterators(op) or \
                    len(op.results) != 1:
                continue
            if not _read_back(op, members):
                continue
            cone = _cone_of(op.operands, members) | {id_of(op)}
            first = [o for o in rest if id_of(o) in cone]
            later = [o for o in rest if id_of(o) not in cone]
            if not first or not later:
                continue
            small = tensor_info(op.results[0].type)[0]
            if not _reads_only(later, first, op):
                # `later` reads a large value `first` cannot compute again cheaply (the
                # depthwise convolution before ConvNeXt's LayerNorm): not cut. (Writing that
                # value out for both pieces was tried: ConvNeXt's block took 463 us against
                # the fallback kernel's 366 on the H200, bench/RESULTS.md run 155.)
                continue
            cut = (first, later + _views_for(first, later, small))
            break
        if cut is None:
            return pieces + [rest]
        pieces.append(cut[0])
        rest = cut[1]


# Ops the data-movement family computes by reading their input at another index (or a
# constant): cheaper to compute again in a second kernel than to write out and read back.
VIEW_LIKE = frozenset({"linalg.fill", "linalg.transpose", "linalg.broadcast", "linalg.copy",
                       "tensor.extract_slice"})


def _views_for(first: list[ir.Operation], later: list[ir.Operation],
               small: list[int]) -> list[ir.Operation]:
    """Copies, for `later`, of the ops of `first` that `later` reads and can compute again
    (`_copyable`: data movement, elementwise chains of it: the group's input reshaped or
    transposed, a zero accumulator, a softmax's exponentials), so that `first` does not
    write them out as results of its kernel; `later`'s ops read the copies. What cannot be
    copied is of the reduction's shape (`small`, `_reads_only`): read from `first` as it is
    (the reduction's result, an output of its kernel). Returns the copies."""
    in_first = {id_of(o): o for o in first}
    copies: dict[int, ir.Operation] = {}

    def copy_of(op: ir.Operation) -> ir.Operation | None:
        key = id_of(op)
        if key in copies:
            return copies[key]
        if not _copyable(op, in_first, small):
            return None
        sources = []
        for v in op.operands:
            producer = defining(v)
            if producer is not None and id_of(producer) in in_first and \
                    copy_of(producer) is not None:
                sources.append((producer, ir.OpResult(v).result_number))
            else:
                sources.append(None)  # from outside, or of the reduction's shape: read
        copy = op.clone(ir.InsertionPoint(op))
        for i, source in enumerate(sources):
            if source is not None:
                copy.operands[i] = copies[id_of(source[0])].results[source[1]]
        copies[key] = copy
        return copy

    for op in later:
        for i, v in enumerate(list(op.operands)):
            producer = defining(v)
            if producer is None or id_of(producer) not in in_first:
                continue
            copy = copy_of(producer)
            if copy is not None:
                op.operands[i] = copy.results[ir.OpResult(v).result_number]
    return list(copies.values())


def _has_shape(value: ir.Value, shape: list[int]) -> bool:
    return isinstance(value.type, ir.RankedTensorType) and tensor_info(value.type)[0] == shape


def _reads_only(later: list[ir.Operation], first: list[ir.Operation],
                reduction: ir.Operation) -> bool:
    """Whether `later` reads nothing `first` computes but values of `reduction`'s shape
    (its result; GroupNorm's mean beside its variance: outputs of the same kernel) and what
    `_views_for` can compute again: cut there, no intermediate of the group's size is
    written out."""
    from fusec.passes.grouping import walk_ops

    small = tensor_info(reduction.results[0].type)[0]
    in_first = {id_of(o): o for o in first}
    for op in later:
        for inner in walk_ops(op):
            for v in inner.operands:
                producer = defining(v)
                if producer is None or id_of(producer) not in in_first or \
                        _has_shape(v, small):
                    continue
                if id_of(inner) != id_of(op) or not _copyable(producer, in_first, small):
                    return False
    return True


def _copyable(op: ir.Operation, in_first: dict[int, ir.Operation], small: list[int]) -> bool:
    """Whether `op` is data movement or elementwise (a generic without reduced loops), and
    so is every op of `in_first` it reads whose result is not of the `small` shape."""
    from fusec.passes.grouping import RESHAPE_OPS

    if op.name == "linalg.generic":
        if any(k != "parallel" for k in iterators(op)):
            return False
    elif op.name not in VIEW_LIKE and op.name not in RESHAPE_OPS:
        return False
    return all(_has_shape(v, small) or _copyable(defining(v), in_first, small)
               for v in op.operands
               if defining(v) is not None and id_of(defining(v)) in in_first)


def _read_back(reduction: ir.Operation, members: dict[int, ir.Operation]) -> bool:
    """Whether an op among `members` downstream of `reduction` computes more points than the
    reduction's result has (the result broadcast back)."""
    from fusec.passes.grouping import walk_ops

    small = numel_of(tensor_info(reduction.results[0].type)[0])
    consumers = {id_of(o): o for o in members.values() if id_of(o) != id_of(reduction)}
    reached = {id_of(reduction)}
    changed = True
    while changed:
        changed = False
        for key, op in consumers.items():
            if key in reached:
                continue
            if any(defining(v) is not None and id_of(defining(v)) in reached
                   for inner in walk_ops(op) for v in inner.operands):
                reached.add(key)
                changed = True
                if any(isinstance(r.type, ir.RankedTensorType) and
                       numel_of(tensor_info(r.type)[0]) > small for r in op.results):
                    return True
    return False


def _convex(pieces: list[list[ir.Operation]]) -> bool:
    """No path leaves a piece and comes back to it (each piece can be one group)."""
    from fusec.passes.grouping import walk_ops

    piece_of = {id_of(o): n for n, piece in enumerate(pieces) for o in piece}
    # Piece-level dependency graph must be acyclic (uses inside payloads count: a gather's
    # tensor.extract reads a tensor its generic does not take as an operand).
    deps: dict[int, set[int]] = {n: set() for n in range(len(pieces))}
    for n, piece in enumerate(pieces):
        for op in piece:
            for v in [u for inner in walk_ops(op) for u in inner.operands]:
                producer = defining(v)
                if producer is not None and id_of(producer) in piece_of \
                        and piece_of[id_of(producer)] != n:
                    deps[n].add(piece_of[id_of(producer)])
    state: dict[int, int] = {}

    def cyclic(n: int) -> bool:
        if state.get(n) == 1:
            return True
        if state.get(n) == 2:
            return False
        state[n] = 1
        if any(cyclic(d) for d in deps[n]):
            return True
        state[n] = 2
        return False

    return not any(cyclic(n) for n in deps)


def peel_trailing_reshapes(func: ir.Operation) -> int:
    """A row-reduction group whose results include a reshape of its row-shaped value that
    keeps the last dim (a norm's [B, T, K] result collapsed to [B T, K] for a Linear: the
    planner takes the consumer's reshape in) yields that value, and the reshape becomes a
    group of its own, a view (`mark_view_groups`). Tiled by rows of the collapsed result, the
    norm's reduction could not be sliced through the reshape: every tile computed the whole
    norm, and over the registers the group was split into a kernel per op (LLaMA's RMSNorm
    before q, k, v: six kernels instead of one; BERT's LayerNorm yielding its [B, T, d]
    value for the residual beside the collapsed one for the next Linear: nine, in each of
    its 12 layers). Attention and library groups keep theirs. Returns how many."""
    from fusec.passes.grouping import form_group
    from fusec.passes.inline_groups import inline_group

    count = 0
    for group in groups_of(func):
        if attributes.PATH in group.attributes or is_attention(group):
            continue
        ops = [o.operation for o in group.regions[0].blocks[0].operations]
        if not any(o.name == "linalg.generic" and "reduction" in iterators(o) for o in ops):
            continue
        peeled = []
        for value in dict.fromkeys(ops[-1].operands):
            reshape = defining(value)
            if reshape is None or reshape.name not in RESHAPE_OPS or \
                    len(list(reshape.results[0].uses)) != 1:
                continue
            source = defining(reshape.operands[0])  # (None: a reshape of a group input)
            before = list(ir.RankedTensorType(reshape.operands[0].type).shape)
            after = list(ir.RankedTensorType(reshape.results[0].type).shape)
            if source is not None and before and after and before[-1] == after[-1]:
                peeled.append(reshape)
        if not peeled:
            continue
        kind = str(group.attributes["kind"]).strip('"')
        # The planner's reasons stay; its figures (tiles, working set) were the reshaped
        # root's, and the tiling would take them for the rows'.
        kept = {n: group.attributes[n] for n in (attributes.REASON, attributes.REFUSED,
                                                 attributes.DEVICE) if n in group.attributes}
        inline_group(group)
        keys = {id_of(r) for r in peeled}
        members = [o for o in ops[:-1] if id_of(o) not in keys]
        form_group(members, kind, kept)
        for reshape in peeled:
            form_group([reshape], "single")
        count += 1
    return count


def split_at_reshapes(func: ir.Operation, options: CudaOptions) -> int:
    """Split each group the emitters refuse at reshapes of values it computes (and, with
    the data-movement kernels off, around its concats).

    The fallback tiles a group's root and fuses producers into the tile, but cannot slice a
    producer through a reshape: such a producer is computed whole *by every thread* (batch-1
    attention's bias add + head split: 8192 threads x 24K elements). Cut there, each piece
    tiles cleanly (a reshape of a kernel's input is a view), and elementwise pieces go to the
    fast emitter. A group with no such reshape whose row reduction reads gathered values
    (an embedding's lookups, then LayerNorm: neither the fast emitter, which takes no
    gathers, nor the data-movement family, which takes no reduction broadcast back, builds
    it) is cut before that reduction (`_pieces_at_gathered_reduction`). A group with no such
    cut, with the data-movement family on, is cut after every reduction it reads back at
    more points than the reduction has (GroupNorm's statistics, a softmax or LayerNorm over a
    non-contiguous dim: `_pieces_at_broadcast_reductions`), each reduction a kernel of that
    family, the data-movement ops both sides read copied into each (the fallback built
    these whole before). Returns how many groups were split."""
    count = 0
    body = func.regions[0].blocks[0]
    # Rounds: a piece cut off may need cutting again, or be a group an emitter takes whole.
    for _ in range(8):
        split = _split_at_reshapes_once(body, options)
        count += split
        if not split:
            break
    return count


def _split_at_reshapes_once(body: ir.Block, options: CudaOptions) -> int:
    """One round of `split_at_reshapes` over the groups of `body`."""
    from fusec.passes.grouping import CLONED_INTO_GROUPS, form_group
    from fusec.passes.inline_groups import inline_group

    count = 0
    for group in [op.operation for op in body.operations if op.operation.name == GROUP_OP]:
        if attributes.PATH in group.attributes or _emittable(group, options):
            continue
        ops = [o.operation for o in group.regions[0].blocks[0].operations][:-1]
        ops = [o for o in ops if o.name not in CLONED_INTO_GROUPS]
        # Without the data-movement kernels a concat the planner fused (it plans for them)
        # is the fallback's again, alone, as before they existed.
        pieces = [part for piece in _pieces_at_reshapes(ops, cut_concats=not options.movement)
                  for part in _pieces_at_gathered_reduction(piece)]
        reason = "reshape"
        if len(pieces) == 1:
            pieces, reason = _pieces_at_concatenated_reductions(ops), "concat of reductions"
        if len(pieces) == 1 and options.movement:
            # (Pieces cut at reshapes are groups of their own next round: one an emitter
            # takes whole stays whole.)
            pieces, reason = _pieces_at_broadcast_reductions(ops), "reduction read back"
        if len(pieces) < 2 or not _convex(pieces) or _scalar_crosses(pieces):
            continue
        kind = str(group.attributes["kind"]).strip('"')
        inline_group(group)
        for piece in pieces:
            form_group(piece, kind if len(piece) > 1 else "single",
                       {attributes.SPLIT: ir.StringAttr.get(reason)})
        count += 1
    return count


def _scalar_crosses(pieces: list[list[ir.Operation]]) -> bool:
    """Whether a value that is not a tensor (a `tensor.extract`'s element) would pass from
    one piece to another: kernels hand each other tensors only (the e2e suite's nll_loss
    backward 1-D: a group yielding an f32 was an internal error)."""
    from fusec.passes.grouping import op_key

    where = {op_key(op): i for i, piece in enumerate(pieces) for op in piece}

    def piece_of(op: ir.Operation) -> int | None:
        while op is not None and op_key(op) not in where:  # a use nested in a region
            parent = op.parent
            op = parent.operation if parent is not None else None
            if op is not None and op.name in ("func.func", GROUP_OP):
                return None
        return None if op is None else where[op_key(op)]

    for i, piece in enumerate(pieces):
        for op in piece:
            for r in op.results:
                if isinstance(r.type, ir.RankedTensorType):
                    continue
                if any(piece_of(use_owner(u)) not in (i, None) for u in r.uses):
                    return True
    return False


def split_multi_output_groups(func: ir.Operation, options: CudaOptions) -> int:
    """Split each group with several outputs (not a gemm) into one group per output, ops that
    two outputs need cloned into both. A multi-output group has no single tile loop, so the
    fallback runs it in one GPU thread; one output per group gives each its own parallel
    kernel (recomputing a shared bias add costs far less than a serial kernel). Returns how
    many groups were split."""
    from fusec.passes.grouping import CLONED_INTO_GROUPS, form_group
    from fusec.passes.inline_groups import inline_group

    count = 0
    body = func.regions[0].blocks[0]
    for group in [op.operation for op in body.operations if op.operation.name == GROUP_OP]:
        if len(group.results) < 2 or attributes.PATH in group.attributes or \
                _emittable(group, options):
            continue
        ops = [o.operation for o in group.regions[0].blocks[0].operations]
        yielded = list(ops[-1].operands)
        members = {id_of(o): o for o in ops[:-1] if o.name not in CLONED_INTO_GROUPS}
        cones = [_cone(v, members) for v in yielded]
        if any(not c for c in cones) or len({frozenset(c) for c in cones}) != len(cones):
            continue  # an output that is an input, or two outputs of one op
        kind = str(group.attributes["kind"]).strip('"')
        order = [o for o in ops[:-1] if id_of(o) in members]
        inline_group(group)
        # Every clone is made from an untouched original, then each output's versions are
        # wired to each other (a clone of a clone would keep another output's operands).
        operands = {id_of(o): list(o.operands) for o in order}
        claimed: set[int] = set()
        versions: list[dict[int, ir.Operation]] = []
        for cone in cones:
            version = {}
            for op in order:
                key = id_of(op)
                if key not in cone:
                    continue
                if key in claimed:
                    with ir.InsertionPoint(op):
                        version[key] = op.clone()
                else:
                    version[key] = op
            claimed |= cone
            versions.append(version)
        sets: list[list[ir.Operation]] = []
        for version in versions:
            for key, op in version.items():
                for j, v in enumerate(operands[key]):
                    producer = defining(v)
                    if producer is not None and id_of(producer) in version:
                        op.operands[j] = version[id_of(producer)].results[
                            ir.OpResult(v).result_number]
            sets.append(list(version.values()))
        dead = [o for o in order if id_of(o) not in claimed]
        sets[0] += dead
        for chosen in sets:
            form_group(chosen, kind if kind != "horizontal" else "vertical",
                       {attributes.SPLIT: ir.StringAttr.get("output")})
        count += 1
    return count


def extract_slices_to_generics(func: ir.Operation) -> int:
    """Rewrite each static, unit-stride, rank-keeping tensor.extract_slice into a linalg.generic
    that gathers: out[i] = src[i + offset] (linalg.index + tensor.extract). Upstream tiling
    does not tile extract_slice, so a slice group ran in one GPU thread; the generic runs one
    element per thread. (An offset map `d0 + o` would fail linalg's shape check at o = 0.)
    Returns how many."""
    from fusec.passes.grouping import walk_ops
    from mlir.dialects import arith, linalg, tensor

    count = 0
    for op in walk_ops(func, lambda o: o.name == "tensor.extract_slice"):
        if len(op.operands) != 1:
            continue  # dynamic offsets or sizes
        result_type = ir.RankedTensorType(op.results[0].type)
        sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
        strides = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
        offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
        if sizes != list(result_type.shape) or any(st != 1 for st in strides):
            continue
        rank = len(sizes)
        elt = result_type.element_type
        maps = ir.ArrayAttr.get([ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))])
        parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
        index = ir.IndexType.get()
        with ir.InsertionPoint(op), op.location:
            empty = tensor.EmptyOp(sizes, elt)
            gather = linalg.GenericOp([result_type], [], [empty.result], maps,
                                      ir.ArrayAttr.get([parallel] * rank))
            block = gather.regions[0].blocks.append(elt)
            with ir.InsertionPoint(block):
                where = []
                for d, o in enumerate(offsets):
                    i = linalg.IndexOp(ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d))
                    where.append(arith.AddIOp(i.result, arith.ConstantOp(index, o).result).result
                                 if o else i.result)
                value = tensor.ExtractOp(op.operands[0], where)
                linalg.YieldOp([value.result])
        # The offsets, for the layout-view analysis (a gather is a strided view).
        gather.operation.attributes[SLICE_OFFSETS] = ir.DenseI64ArrayAttr.get(offsets)
        op.results[0].replace_all_uses_with(gather.results[0])
        op.erase()
        count += 1
    return count


def _absorbable_group(group: ir.Operation) -> bool:
    """A group of only what cuBLASLt absorbs in an operand: casts to f32, transposes of the
    last two dims, reshapes (the planner leaves these apart from a large matmul's group)."""
    from fusec.passes.grouping import CLONED_INTO_GROUPS

    if len(group.results) != 1:
        return False
    for op in [o.operation for o in group.regions[0].blocks[0].operations][:-1]:
        if op.name in CLONED_INTO_GROUPS or op.name in RESHAPE_OPS:
            continue
        if op.name == "linalg.transpose" and swaps_last_two(op):
            continue
        if op.name == "linalg.generic" and unary_kind(op) == "cast" \
                and cast_types(op)[1] == "f32":
            continue
        return False
    return True


def _merge_operand_producers(group: ir.Operation) -> ir.Operation:
    """Pull into a matmul group the groups that only cast/transpose/reshape its operands, so
    that cuBLASLt reads the operands as they are (bf16, transposed) instead of a materialised
    f32 copy. Returns the (possibly new) group."""
    from fusec.passes.grouping import form_group
    from fusec.passes.inline_groups import inline_group

    body = group.regions[0].blocks[0]
    mm = next(o.operation for o in body.operations if o.operation.name in GEMM_OPS)
    producers = []
    for operand in list(mm.operands)[:2]:
        source = gemm_operand(operand).source
        if not isinstance(source.owner, ir.Block) or not single_use(source):
            continue
        outer = group.operands[ir.BlockArgument(source).arg_number]
        producer = defining(outer)
        if producer is not None and producer.name == GROUP_OP and single_use(outer) \
                and _absorbable_group(producer):
            producers.append(producer)
    # The zero fill the matmul accumulates into, when the planner left it a group of its own
    # (shared by several matmuls, even): a copy of it joins this group.
    init = mm.operands[2]
    extra: list[ir.Operation] = []
    if isinstance(init.owner, ir.Block) and single_use(init):
        argno = ir.BlockArgument(init).arg_number
        producer = defining(group.operands[argno])
        if producer is not None and producer.name == GROUP_OP and \
                len(producer.results) == 1 and \
                [o.name for o in group_body_ops(producer)] == ["linalg.fill"]:
            from fusec.passes.inline_groups import inline_group

            with ir.InsertionPoint(group):
                clone = producer.clone()
            fill = list(clone.regions[0].blocks[0].operations)[-1].operands[0]
            extra = [o.operation for o in list(clone.regions[0].blocks[0].operations)[:-1]]
            inline_group(clone)
            group.operands[argno] = fill
    if not producers and not extra:
        return group
    kind, kept_attributes = group_style(group)
    ops = list(extra)
    for g in producers + [group]:
        ops += [o.operation for o in g.regions[0].blocks[0].operations][:-1]
        inline_group(g)
    from fusec.passes.grouping import CLONED_INTO_GROUPS

    ops = [o for o in ops if o.name not in CLONED_INTO_GROUPS]
    return form_group(ops, kind, kept_attributes)


def tc_gemm_enabled(options: CudaOptions | None) -> bool:
    """Whether our tensor-core GEMM family is a candidate (the options and the arch)."""
    from fusec.compiler.targets.cuda.tc_gemm import TC_ARCHES

    return options is not None and options.tc_gemm and options.arch in TC_ARCHES


def split_matmul_groups(func: ir.Operation, options: CudaOptions | None = None) -> list[str]:
    """Split every matmul-rooted group of `func` (in place): [prologue] + the matmul as a
    cuBLASLt call (`plan_gemm_split`: with the epilogue cuBLASLt fuses) or as our
    tensor-core GEMM (`tc_gemm.plan_tc_split`: with the whole elementwise chain after it),
    whichever the cost model predicts faster (`tc_gemm.choose`, the reason in `fusion.why`)
    + [epilogue: what neither took].

    Returns one line per matmul group: what was done, or why it stays one kernel.
    """
    from fusec.compiler.targets.cuda.tc_gemm import TcSplit, choose, plan_tc_split

    from fusec.passes.grouping import form_group
    from fusec.passes.inline_groups import inline_group

    body = func.regions[0].blocks[0]
    notes = []
    groups = [op.operation for op in body.operations if op.operation.name == GROUP_OP]
    for group in groups:
        names = [o.operation.name for o in group.regions[0].blocks[0].operations]
        paired = attributes.GEMM_PAIR in group.attributes  # gemm_pair.pair_gemm_groups
        if names.count("linalg.matmul") + names.count("linalg.batch_matmul") != \
                (2 if paired else 1):
            continue
        if not paired:
            group = _merge_operand_producers(group)
        split = plan_gemm_split(group)
        path = "gemm"
        if tc_gemm_enabled(options):
            tc = plan_tc_split(group)
            if isinstance(tc, TcSplit):
                ours, why = choose(tc, split, options.description, options.graph)
                if ours:
                    split, path = tc.split, "tc_gemm"
                    split.why = why
                    if paired:  # the pairing's two predictions (gemm_pair.py)
                        note = ir.StringAttr(group.attributes[attributes.GEMM_PAIR]).value
                        split.why += f"; {note}"
                elif not isinstance(split, str):
                    split.why += f"; {why}"
            elif not isinstance(split, str) and _sixteen_bit(group):
                split.why += f"; not our tensor-core GEMM: {tc}"
        if isinstance(split, str):
            notes.append(f"not cuBLASLt: {split}")
            continue
        kind = str(group.attributes["kind"]).strip('"') if "kind" in group.attributes else "single"
        inline_group(group)
        s = ir.StringAttr.get
        if split.prologue:
            form_group(split.prologue, "vertical" if len(split.prologue) > 1 else "single",
                       {attributes.SPLIT: s("prologue")})
        form_group(split.gemm, "epilogue" if split.fused else "single",
                   {attributes.PATH: s(path), attributes.WHY: s(split.why),
                    attributes.GEMM_EPILOGUE: s("+".join(split.fused) or "none"),
                    attributes.SPLIT_OF: s(kind)})
        if split.epilogue:
            form_group(split.epilogue, "vertical" if len(split.epilogue) > 1 else "single",
                       {attributes.SPLIT: s("epilogue")})
        notes.append(split.why)
    return notes


def _library_call(group: ir.Operation) -> bool:
    """A cuBLASLt call's group (the only groups that read and write through strided layouts;
    our tensor-core GEMM reads through TMA maps of what it was planned with)."""
    return attributes.PATH in group.attributes and \
        ir.StringAttr(group.attributes[attributes.PATH]).value == "gemm"


def _sixteen_bit(group: ir.Operation) -> bool:
    """The group's matmul reads 16-bit floats (through its casts): our family's operands."""
    mm = _matmuls(group)[0]
    return gemm_operand(mm.operands[0]).element in ("bf16", "f16")


def groups_of(func: ir.Operation) -> list[ir.Operation]:
    """The function's groups that the rewrites may change: all but the attention groups
    (`fusion.path = "attention"`: one kernel of their own family, built as formed)."""
    return [op.operation for op in func.regions[0].blocks[0].operations
            if op.operation.name == GROUP_OP and not _is_attention(op.operation)]


_is_attention = is_attention


def _kind(group: ir.Operation) -> str:
    return str(group.attributes["kind"]).strip('"') if "kind" in group.attributes else "single"


def group_style(group: ir.Operation) -> tuple[str, dict[str, ir.Attribute]]:
    """A group's kind and its other attributes: what forming its ops again needs."""
    return _kind(group), {name: group.attributes[name] for name in group.attributes
                          if name != "kind"}


def _only_user(value: ir.Value) -> ir.Operation | None:
    if not single_use(value):
        return None
    owner = next(iter(value.uses)).owner
    return owner.operation if hasattr(owner, "operation") else owner


def regroup(groups: list[ir.Operation], extra: list[ir.Operation], like: ir.Operation
             ) -> ir.Operation:
    """Inline `groups` and form one group of their ops and `extra` (ops already in the
    function body), with `like`'s kind and attributes (`like` is one of `groups`)."""
    from fusec.passes.grouping import CLONED_INTO_GROUPS, form_group
    from fusec.passes.inline_groups import inline_group

    kind, kept_attributes = group_style(like)
    ops = list(extra)
    for g in groups:
        ops += [o.operation for o in list(g.regions[0].blocks[0].operations)[:-1]]
        inline_group(g)
    return form_group([o for o in ops if o.name not in CLONED_INTO_GROUPS], kind, kept_attributes)


def _matmuls(group: ir.Operation) -> list[ir.Operation]:
    return [o for o in group_body_ops(group) if o.name in GEMM_OPS]


def merge_epilogue_consumers(func: ir.Operation, options: CudaOptions | None = None) -> int:
    """Merge into each one-matmul group the group that consumes its only result when that
    consumer starts with what cuBLASLt's epilogue runs (a bias add, ReLU, a cast, GELU, or a
    reshape on the way), or, where our tensor-core GEMM is a candidate for the matmul
    (`tc_gemm.tc_operands`), with any elementwise op (a residual add, a scale, an
    activation: what its epilogue runs). The planner may leave a bias add in a group of its
    own, which then costs a kernel. The split that follows keeps the rest of the consumer
    as the epilogue kernel. Returns how many."""
    from fusec.compiler.targets.cuda.tc_gemm import elementwise, tc_operands
    from fusec.passes.grouping import op_key

    tc = tc_gemm_enabled(options)
    count = 0
    gone: set[int] = set()
    for key, group in [(op_key(g), g) for g in groups_of(func)]:
        if key in gone:
            continue
        candidate = tc and len(_matmuls(group)) == 1 and \
            not isinstance(tc_operands(_matmuls(group)[0]), str)
        # Again after each merge: bias, then ReLU, may each have been left a group.
        while _ends_in_epilogue(group, candidate):
            consumer = _only_user(group.results[0])
            if consumer is None or consumer.name != GROUP_OP or \
                    attributes.PATH in consumer.attributes or _matmuls(consumer):
                break
            arg = next(a for a, v in zip(consumer.regions[0].blocks[0].arguments,
                                         consumer.operands)
                       if value_key(v) == value_key(group.results[0]))
            user = _only_user(arg)
            if user is None or (user.name not in RESHAPE_OPS and (
                    user.name != "linalg.generic" or (
                        bias_add(user, arg) is None and
                        unary_kind(user) not in ("relu", "cast", "gelu") and
                        not (candidate and elementwise(user))))):
                break
            gone.add(op_key(consumer))
            group = regroup([group, consumer], [], group)
            count += 1
    return count


def _ends_in_epilogue(group: ir.Operation, tc_candidate: bool = False) -> bool:
    """A one-matmul, one-result group (not yet split) whose result is the matmul's or the
    last of what cuBLASLt's epilogue would absorb after it (`tc_candidate`: or of what our
    tensor-core GEMM's would, `tc_gemm.tc_chain`)."""
    if len(_matmuls(group)) != 1 or len(group.results) != 1 or attributes.PATH in group.attributes:
        return False
    mm = _matmuls(group)[0]
    yielded = list(group.regions[0].blocks[0].operations)[-1].operands[0]
    if value_key(yielded) == value_key(mm.results[0]):
        return True
    in_type = gemm_operand(mm.operands[0]).element
    absorbed, _, _ = absorb_epilogue(mm, in_type, allow_bias=True)
    if absorbed and value_key(absorbed[-1].results[0]) == value_key(yielded):
        return True
    if tc_candidate:
        from fusec.compiler.targets.cuda.tc_gemm import tc_chain

        shape = list(ir.RankedTensorType(mm.results[0].type).shape)
        chain, _, _ = tc_chain(mm, math.prod(shape[:-1]), shape[-1])
        return bool(chain) and value_key(chain[-1].results[0]) == value_key(yielded)
    return False


def _is_layout_group(group: ir.Operation) -> bool:
    """A group of one result whose ops all move data without arithmetic (no casts)."""
    if group.name != GROUP_OP or attributes.PATH in group.attributes or len(group.results) != 1:
        return False
    ops = group_body_ops(group)
    return bool(ops) and all(layout_source(o) is not None and layout_generic(o) != "cast"
                             for o in ops)


def _chain_in(group: ir.Operation) -> tuple[list[ir.Operation], ir.Value] | None:
    """A layout group's ops from its result back to what it reads (a block argument or a
    weight), every op on that one chain; None otherwise."""
    body = group.regions[0].blocks[0]
    value = list(body.operations)[-1].operands[0]
    chain: list[ir.Operation] = []
    while not isinstance(value.owner, ir.Block):
        op = defining(value)
        src = layout_source(op)
        if src is None:
            if is_weight(op):
                break
            return None
        chain.append(op)
        value = src[0]
    if len(chain) != len(group_body_ops(group)) or not chain:
        return None
    return chain, value


def absorb_operand_layouts(func: ir.Operation) -> int:
    """Read each matmul operand through the layout groups before it (head split: slice,
    reshape, transpose; a broadcast weight), when the whole chain is one cuBLASLt layout
    from an earlier buffer: the chain's groups are cloned into the matmul group (their
    originals go when nothing else reads them, `erase_dead_groups`). Returns how many
    operands now read further back."""
    count = 0
    for group in groups_of(func):
        if len(_matmuls(group)) != 1 or not _library_call(group):
            continue  # only cuBLASLt calls read operands through a layout
        for index in (0, 1):
            mm = _matmuls(group)[0]
            chain = layout_walk(mm.operands[index])
            start = layout_source(chain[-1])[0] if chain else mm.operands[index]
            if not isinstance(start.owner, ir.Block) or not single_use(start):
                continue
            argno = ir.BlockArgument(start).arg_number
            outer = group.operands[argno]
            element = ELEMENT_BYTES.get(str(ir.RankedTensorType(start.type).element_type), 4)
            ops = list(chain)  # mm operand outward-in
            crossed: list[ir.Operation] = []
            best = 0
            while True:
                producer = defining(outer)
                if producer is None or not _is_layout_group(producer):
                    break
                found = _chain_in(producer)
                if found is None:
                    break
                ops += found[0]
                base = found[1]
                crossed.append((producer, ir.BlockArgument(base).arg_number
                                if isinstance(base.owner, ir.Block) else 0))
                view = view_through(base, list(reversed(ops)))
                if view is not None and matrix_layout(view, element) is not None:
                    best = len(crossed)
                if isinstance(base.owner, ir.Block):
                    outer = producer.operands[ir.BlockArgument(base).arg_number]
                else:
                    break  # a weight
            if not best:
                continue
            previous = None
            extra: list[ir.Operation] = []
            for layout, data in reversed(crossed[:best]):
                with ir.InsertionPoint(group):
                    clone = layout.clone()
                if previous is not None:
                    clone.operands[data] = previous
                previous = list(clone.regions[0].blocks[0].operations)[-1].operands[0]
                extra += [o.operation for o in list(clone.regions[0].blocks[0].operations)[:-1]]
                from fusec.passes.inline_groups import inline_group

                inline_group(clone)
            group.operands[argno] = previous
            group = regroup([group], extra, group)
            count += 1
    return count


def erase_dead_groups(func: ir.Operation) -> int:
    """Erase groups none of whose results is used (groups compute tensors, nothing else)."""
    count = 0
    changed = True
    while changed:
        changed = False
        for group in reversed(groups_of(func)):
            if all(not list(r.uses) for r in group.results):
                group.erase()
                count += 1
                changed = True
    return count


def absorb_result_layouts(func: ir.Operation) -> int:
    """Let each cuBLASLt call write its result where the layout group after it (head merge:
    reshape + transpose) puts it, when that is one cuBLASLt layout: the layout group merges
    into the gemm group and costs no kernel. Returns how many."""
    from fusec.passes.grouping import op_key

    count = 0
    gone: set[int] = set()
    for key, group in [(op_key(g), g) for g in groups_of(func)]:
        if key in gone:
            continue
        while _library_call(group) and len(group.results) == 1:
            consumer = _only_user(group.results[0])
            if consumer is None or not _is_layout_group(consumer):
                break
            found = _chain_in(consumer)
            if found is None or not isinstance(found[1].owner, ir.Block) or any(
                    o.name not in RESHAPE_OPS and o.name != "linalg.transpose"
                    for o in found[0]):
                break
            view = result_view(group, found[0])
            out = str(ir.RankedTensorType(group.results[0].type).element_type)
            if view is None or matrix_layout(view, ELEMENT_BYTES.get(out, 4), output=True) \
                    is None:
                break
            gone.add(op_key(consumer))
            group = regroup([group, consumer], [], group)
            count += 1
    return count


def mark_view_groups(func: ir.Operation) -> int:
    """Mark each layout group whose result is its input's bytes from an offset (a reshape, a
    slice of whole rows) `fusion.path = "view"` with `fusion.view_offset` (elements): the
    plan makes its result a view of the input buffer (`Buffer.view_of`), no kernel. A
    model result keeps its kernel (the caller owns that buffer), and so does a view whose
    byte offset is not a multiple of `VIEW_ALIGNMENT`. Returns how many."""
    ret = list(func.regions[0].blocks[0].operations)[-1]
    returned = {value_key(v) for v in ret.operands}
    count = 0
    for group in groups_of(func):
        if not _is_layout_group(group) or len(group.operands) != 1 or \
                value_key(group.results[0]) in returned:
            continue
        found = _chain_in(group)
        if found is None or not isinstance(found[1].owner, ir.Block):
            continue
        view = view_through(found[1], list(reversed(found[0])))
        if view is None or not view.is_dense():
            continue
        element_bytes = ELEMENT_BYTES.get(tensor_info(group.operands[0].type)[1], 4)
        if (view.offset * element_bytes) % VIEW_ALIGNMENT:
            # Kernels read their buffers 16 bytes at a time from the base: a view starting
            # off that alignment (x[:, 1:] of int64) would be read misaligned. It stays a
            # kernel that copies the slice into a buffer of its own.
            continue
        group.attributes[attributes.PATH] = ir.StringAttr.get("view")
        group.attributes[VIEW_OFFSET] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                           view.offset)
        count += 1
    return count


MATMUL_OPS = ("linalg.matmul", "linalg.batch_matmul")


def matmuls_to_tf32(func: ir.Operation, options: CudaOptions | None = None) -> int:
    """Mark every fp32 matmul in `func`'s groups `fusion.tf32` when the options ask for TF32
    matmuls (`CudaOptions.matmul_tf32`: torch's `torch.backends.cuda.matmul.allow_tf32`, off
    by default): where the matmul becomes a cuBLASLt call it computes with TF32 operands
    (CUBLAS_COMPUTE_32F_FAST_TF32), as torch's do under that setting. Matmuls our own
    kernels compute (the SIMT emitter's, attention's) stay exact fp32, which is more exact
    than asked. Runs before convolutions become matmuls: theirs follow `conv_tf32` alone.
    16-bit and integer matmuls are untouched. Returns how many matmuls were marked."""
    from fusec.passes.grouping import walk_ops

    if options is None or not options.matmul_tf32:
        return 0
    count = 0
    for mm in walk_ops(func, lambda o: o.name in MATMUL_OPS):
        parent = mm.parent
        if parent is None or parent.name != GROUP_OP:
            continue
        types = [ir.ShapedType(v.type).element_type for v in mm.operands]
        if types and all(str(t) == "f32" for t in types):
            mm.attributes[attributes.TF32] = ir.UnitAttr.get()
            count += 1
    return count


def widen_16bit_payloads(func: ir.Operation) -> int:
    """Compute each payload's bf16/f16 arithmetic in f32 (row reductions excepted: the
    fast emitter accumulates them in f32 itself), rounding once where the payload
    yields (or where a value leaves the chain of arithmetic: an explicit cast, a store), as
    torch computes one op (its `sigmoid` in f32, rounded once); torch-mlir writes such an op
    as one generic whose payload runs op by op in bf16 (negf, exp, addf, divf), which on the
    GPU rounded four times (a fuzzed program differed from torch by 2.7%: bench/RESULTS.md
    run 22). Values between generics stay what the IR says (16-bit). Returns how many
    payloads changed."""
    from fusec.passes.grouping import walk_ops
    from mlir.dialects import arith

    f32 = ir.F32Type.get(func.context)
    count = 0
    for generic in walk_ops(func, lambda o: o.name == "linalg.generic"):
        kinds = iterators(generic)
        if kinds and kinds[-1] == "reduction" and all(k == "parallel" for k in kinds[:-1]):
            # A row reduction: the fast emitter folds it in f32 itself (its combiner must be
            # the payload's last op, on the accumulator); widened, it no longer recognised
            # it and bf16 row sums and maxima left the row kernels.
            continue
        block = generic.regions[0].blocks[0]
        ops = [o.operation for o in block.operations]

        def half(t: ir.Type) -> bool:
            return str(t) in _HALF

        todo = [o for o in ops if o.name in _WIDENABLE and
                any(half(v.type) for v in list(o.operands) + list(o.results))]
        if not todo:
            continue
        wide: dict[int, ir.Value] = {}  # 16-bit value -> its f32 twin

        def f32_of(v: ir.Value, before: ir.Operation) -> ir.Value:
            if not half(v.type):
                return v
            key = value_key(v)
            if key not in wide:
                with ir.InsertionPoint(before), before.location:
                    wide[key] = arith.ExtFOp(f32, v).result
            return wide[key]

        for op in todo:
            operands = [f32_of(v, op) for v in op.operands]
            results = [f32 if half(r.type) else r.type for r in op.results]
            with ir.InsertionPoint(op), op.location:
                new = ir.Operation.create(op.name, results=results, operands=operands,
                                          attributes={op.attributes[i].name: op.attributes[i].attr
                                                      for i in range(len(op.attributes))})
                for old, res in zip(op.results, new.results):
                    if not half(old.type):
                        old.replace_all_uses_with(res)
                        continue
                    rounded = arith.TruncFOp(old.type, res).result
                    old.replace_all_uses_with(rounded)
                    wide[value_key(rounded)] = res
            op.erase()
        count += 1
    return count


def split_long_reductions(func: ir.Operation, options: CudaOptions | None = None) -> int:
    """Split a long reduction over few outputs in two kernels, so that enough blocks run:
    the data-movement family's reduce shape puts a few output vectors (or one output, for a
    reduction along the rows) on a block, and BatchNorm's statistics (64 channels) or column
    sums (256 vectors) leave most SMs idle. The reduction's outermost reduced loop of extent
    E becomes P parallel parts of E / P (P a power of two that gives every SM two blocks):

        part[p, out...] = fold over (p * E/P + e', the other reduced loops) from the neutral
        out[out...] = init (+) fold over p of part[p, out...]   (P <= 64 points: unrolled)

    The first is a kernel of its own (its producers with it), the second joins the ops after
    the reduction. Only for accumulators that are not 16-bit (an f32 sum of a bf16 tensor
    rounds only once at the end; the parts would round), and only with the data-movement
    kernels on. Returns how many reductions were split."""
    from fusec.compiler.targets.cuda.emitter import _combiner, _neutral
    from fusec.passes.fusion.reduction import clone_body
    from fusec.passes.grouping import CLONED_INTO_GROUPS, form_group
    from fusec.passes.inline_groups import inline_group
    from mlir.dialects import arith, linalg, tensor

    if options is None or not options.movement:
        return 0
    device = options.description
    count = 0
    body = func.regions[0].blocks[0]
    for group in [op.operation for op in body.operations if op.operation.name == GROUP_OP]:
        if attributes.PATH in group.attributes:
            continue
        gops = [o.operation for o in group.regions[0].blocks[0].operations][:-1]
        reductions = [o for o in gops if o.name == "linalg.generic" and len(o.results) == 1
                      and any("reduction" in str(a) for a in o.attributes["iterator_types"])]
        if len(reductions) != 1 or any(o.name in GEMM_OPS or o.name.startswith("linalg.conv")
                                       for o in gops):
            continue
        red = reductions[0]
        plan = _reduction_split_plan(red, device)
        if plan is None:
            continue
        d, extent, parts = plan
        n_in = len(red.operands) - 1
        block = red.regions[0].blocks[0]
        try:
            combiner = _combiner(block.operations[len(block.operations) - 1].operands[0],
                                 block.arguments[n_in])
        except CudaCodegenError:
            continue
        init = red.operands[n_in]
        shape, elt_text = tensor_info(init.type)
        elt = ir.RankedTensorType(init.type).element_type
        ctx = red.context
        maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(red.attributes["indexing_maps"])]
        nd = maps[0].n_dims
        p_dim = ir.AffineDimExpr.get(nd, ctx)
        inner = extent // parts

        # Each input that reads loop d as a dim of its own gets that dim expanded to
        # [P, E / P] (linalg needs every loop as a plain dim of some operand); an input
        # reading d inside an expression cannot be split so.
        new_inputs, new_maps, ok = [], [], True
        for v, m in zip(list(red.operands[:n_in]), maps[:n_in]):
            results = list(m.results)
            pure = [j for j, e in enumerate(results)
                    if isinstance(e, ir.AffineDimExpr) and e.position == d]
            if any(not isinstance(e, (ir.AffineDimExpr, ir.AffineConstantExpr)) for e in results):
                ok = False
                break
            if not pure:
                new_inputs.append(v)
                new_maps.append(ir.AffineMap.get(nd + 1, 0, results, ctx))
                continue
            j = pure[0]
            vshape, _ = tensor_info(v.type)
            groups, k = [], 0
            for i in range(len(vshape)):
                groups.append([k, k + 1] if i == j else [k])
                k += 2 if i == j else 1
            expanded_shape = vshape[:j] + [parts, inner] + vshape[j + 1:]
            new_inputs.append((v, groups, expanded_shape))
            new_maps.append(ir.AffineMap.get(
                nd + 1, 0, results[:j] + [p_dim, ir.AffineDimExpr.get(d, ctx)] +
                results[j + 1:], ctx))
        if not ok:
            continue

        out_map = maps[n_in]
        part_map = ir.AffineMap.get(nd + 1, 0, [p_dim] + list(out_map.results), ctx)
        iters = list(ir.ArrayAttr(red.attributes["iterator_types"]))
        parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>", ctx)
        reduction = ir.Attribute.parse("#linalg.iterator_type<reduction>", ctx)
        with ir.InsertionPoint(red), red.location:
            neutral = arith.ConstantOp(elt, ir.Attribute.parse(
                f"{_neutral(combiner, elt_text)} : {elt_text}", ctx)).result
            part_init = linalg.fill(neutral, outs=[tensor.EmptyOp([parts] + shape, elt).result])
            operands = []
            for item in new_inputs:
                if isinstance(item, tuple):
                    v, groups, expanded_shape = item
                    velt = ir.RankedTensorType(v.type).element_type
                    item = tensor.ExpandShapeOp(
                        ir.RankedTensorType.get(expanded_shape, velt), v,
                        ir.ArrayAttr.get([ir.ArrayAttr.get(
                            [ir.IntegerAttr.get(ir.IntegerType.get_signless(64, ctx), i)
                             for i in g]) for g in groups]),
                        [], expanded_shape).result
                operands.append(item)
            part = linalg.GenericOp(
                [ir.RankedTensorType.get([parts] + shape, elt)], operands, [part_init],
                ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps] +
                                 [ir.AffineMapAttr.get(part_map)]),
                ir.ArrayAttr.get(iters + [parallel]))
            new_block = part.regions[0].blocks.append(*[a.type for a in block.arguments])
            yielded = clone_body(red, list(new_block.arguments), new_block)
            with ir.InsertionPoint(new_block):
                linalg.YieldOp(yielded)
            rank = len(shape)
            fold_maps = [ir.AffineMap.get(rank + 1, 0, [ir.AffineDimExpr.get(rank, ctx)] +
                                          [ir.AffineDimExpr.get(i, ctx) for i in range(rank)],
                                          ctx),
                         ir.AffineMap.get(rank + 1, 0, [ir.AffineDimExpr.get(i, ctx)
                                                        for i in range(rank)], ctx)]
            total = linalg.GenericOp([init.type], [part.results[0]], [init],
                                     ir.ArrayAttr.get([ir.AffineMapAttr.get(m)
                                                       for m in fold_maps]),
                                     ir.ArrayAttr.get([parallel] * rank + [reduction]))
            tb = total.regions[0].blocks.append(elt, elt)
            with ir.InsertionPoint(tb):
                folded = ir.Operation.create(combiner, results=[elt],
                                             operands=[tb.arguments[0], tb.arguments[1]])
                linalg.YieldOp([folded.results[0]])
        red.results[0].replace_all_uses_with(total.results[0])
        red.erase()
        # Two kernels: the parts with what they read; the total with what follows.
        ops = [o.operation for o in group.regions[0].blocks[0].operations][:-1]
        ops = [o for o in ops if o.name not in CLONED_INTO_GROUPS]
        first = _cone(part.results[0], {id_of(o): o for o in ops})
        piece_a = [o for o in ops if id_of(o) in first]
        piece_b = [o for o in ops if id_of(o) not in first]
        if not _convex([piece_a, piece_b]) or any(
                defining(v) is not None and id_of(defining(v)) in first and
                value_key(v) != value_key(part.results[0])
                for o in piece_b for v in o.operands):
            continue  # one kernel, unsplit: still correct (the reduce shape)
        kind = str(group.attributes["kind"]).strip('"') if "kind" in group.attributes else "single"
        inline_group(group)
        s = ir.StringAttr.get
        form_group(piece_a, "vertical" if len(piece_a) > 1 else "single",
                   {attributes.SPLIT: s("reduction")})
        form_group(piece_b, kind if len(piece_b) > 1 else "single",
                   {attributes.SPLIT: s("reduction")})
        count += 1
    return count


def _reduction_split_plan(red: ir.Operation, device: Any) -> tuple[int, int, int] | None:
    """(the reduced loop to split, its extent, the parts) for a long reduction whose reduce
    shape would not give every SM two blocks; None where it does, or nothing divides."""
    from fusec.compiler.targets.cuda.folds import MAX_WINDOW_POINTS, loop_ranges

    try:
        ranges = loop_ranges(red)
    except CudaCodegenError:
        return None
    iters = [str(a) for a in red.attributes["iterator_types"]]
    reduced = [i for i, t in enumerate(iters) if "reduction" in t]
    shape, elt = tensor_info(red.results[0].type)
    if elt in ("bf16", "f16") or not reduced or reduced == [len(iters) - 1]:
        return None  # (a reduction over the last loop alone: the fast emitter's row kernel)
    total = math.prod(ranges[i] for i in reduced)
    if total <= MAX_WINDOW_POINTS * 64:
        return None
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(red.attributes["indexing_maps"])]
    along_rows = any(isinstance(m.results[len(m.results) - 1], ir.AffineDimExpr) and
                     m.results[len(m.results) - 1].position in reduced
                     for m in maps[:-1] if len(m.results))
    numel = math.prod(shape)
    eb = ELEMENT_BYTES.get(elt, 4)
    grid = cost_model.split_reduction_shape(numel, shape[-1] if shape else 1, eb, device,
                                            along_rows=along_rows).grid
    want = 2 * device.parallel_units
    if grid >= want:
        return None
    d = reduced[0]
    extent = ranges[d]
    parts = 1
    while parts * 2 <= MAX_WINDOW_POINTS and extent % (parts * 2) == 0 and grid * parts < want:
        parts *= 2
    return (d, extent, parts) if parts > 1 else None
