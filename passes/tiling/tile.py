"""--fusion-tile: tile each group's root op with `scf.forall` and fuse the group into it.

Loop-level fusion. In every `fusion.group`, the *root* is the last tileable op (a linalg op
or `tensor.pad`) whose result the group yields. The root is tiled over its outer parallel
dims with `scf.forall`, and the group's other tileable ops are fused into the tile loop
as producers (consumers first), so that intermediates are computed tile by tile and never
leave the tile. The rewriting is upstream MLIR's: a transform-dialect script built per group
(`transform.structured.tile_using_forall`, `transform.structured.fuse_into_containing_op`)
run by the transform interpreter. Tile sizes come from `cpu_tile_sizes` (policy, a pure
function) and are recorded on the group as `fusion.tile_sizes`; the number of tiles as
`fusion.grid`. A group with nothing to tile is left alone (`fusion.grid = 1`).

Options: `threads` (0: this machine's cores), `tiles-per-thread` (load balance),
`min-tile-kb` (the least work, in KB of the root's iteration space, worth a tile),
`max-tile-kb` (the most output per tile: about a core's L2), `device` (cpu: the sizes
above; a GPU description such as nvidia-h200: one block's tile from
`cost_model.gpu_tile_sizes`), `fit` (tile each group and check its capacity at once,
`capacity.tile_to_fit`: a tile over the device's limits is re-tiled with fewer rows, or the
group split, the reason recorded on the group).

A matmul-rooted group on the CPU gets a row tile (the loop of its result's rows, the
matmul's M) of whole microkernel row blocks (option `matmul-rows`, the CPU target's
`--fusion-cpu-matmul{mr}`; 0: the cost model's 6), at least 24 rows where M allows, and dividing M (`matmul_row_tile`); not with `min-tile-kb=0`, the
finest tiles the GPU fallback path asks for (one thread per tile).

A group may carry `fusion.max_tile_rows = N` (set by the capacity fit, or by hand): its
tiles then hold at most N rows (the product of the split dims' tile sizes), the inner split
dims shrunk first.

On a GPU description the tile is what one block runs, and what CUDA code generation builds:
- the group's kind (`fusion.tile_kind`: elementwise, row, contraction; row also for a group
  that reads a broadcast) and the block's threads (`fusion.block`, the cost model's launch
  shape for that tile) are recorded, for a group of one tile too;
- groups that are library calls or buffer views (`fusion.path`, set by
  `--fusion-gpu-kernels`) are not tiled;
- the CUDA tile emitter is asked whether it builds each tiled group
  (the device's `tile_refusal`, passes/targets.py); a tiling it refuses is undone, its reason in
  `fusion.untiled`, and a group neither emitter builds is tiled as the fallback path runs it,
  a tile per thread (its `tile_for_fallback`, `fusion.tile_kind = "thread"`).

Before:
    %0 = fusion.group single (%arg1 = %a : tensor<64x128xf32>) -> tensor<64x128xf32> {
      %1 = linalg.exp ins(%arg1 : ...) outs(%e : ...) -> tensor<64x128xf32>
      fusion.yield %1 : tensor<64x128xf32>
    }
After:
    %0 = fusion.group single (...) -> tensor<64x128xf32> attributes {fusion.grid = 8 : i64,
                                                       fusion.tile_sizes = array<i64: 8, 0>} {
      %1 = scf.forall (%i) in (8) shared_outs(%o = %e) -> (tensor<64x128xf32>) {
        ... linalg.exp on tensor<8x128xf32> slices ...
      }
      fusion.yield %1 : tensor<64x128xf32>
    }
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

from fusec.passes import attributes, cost_model
from fusec.passes.cost_model import cpu_tile_sizes, matmul_row_tile
from fusec.passes.cpu.cpu_conv import conv_loops
from fusec.passes.fusion.analysis import CONTRACTION, describe
from fusec.passes.grouping import (CLONED_INTO_GROUPS, RESHAPE_OPS, defining_op, family_tiled,
                                   form_group, group_alone, is_compute,
                                   memory_element_type, op_key, producer_through_reshapes,
                                   iterator_kinds, projection, split_columns, value_key,
                                   walk_ops)
from fusec.passes.inline_groups import groups_in, inline_group
from fusec.passes.registry import Pass, PassError, register
from fusec.passes.targets import kernel_builder
from mlir import ir
from mlir.dialects import linalg, tensor
from mlir.dialects.transform import interpreter

TILE_TAG = attributes.TILE_OP
MAX_TILE_ROWS_ATTR = attributes.MAX_TILE_ROWS
# Set by CUDA code generation's kernel formation (`--fusion-gpu-kernels`) on groups that are a
# library call (cuBLASLt) or a view of a buffer, not a kernel of ours.
LIBRARY_PATH_ATTR = attributes.PATH
UNTILED_ATTR = attributes.UNTILED  # why a group on a GPU is built untiled
# Producers the tile loop must not fuse (their result leaves the kernel and the tiles read
# only part of it), each with the reason: computed whole before the loop.
WHOLE_ATTR = attributes.WHOLE
# Ops that the transform dialect can tile and fuse (they implement TilingInterface).
TILEABLE_TENSOR_OPS = frozenset({"tensor.pad"})


def limit_tile_rows(sizes: list[int], limit: int) -> list[int]:
    """`sizes` shrunk so that a tile has at most `limit` rows (the product of the split
    dims' sizes), the innermost split dims first; a size never drops below 1."""
    sizes = list(sizes)
    for d in reversed(range(len(sizes))):
        rows = math.prod(x for x in sizes if x)
        if rows <= limit:
            break
        if sizes[d] > 1:
            sizes[d] = max(1, limit // (rows // sizes[d]))
    return sizes


def tile_count(ranges: list[int], sizes: list[int]) -> int:
    """Number of tiles a forall with these tile sizes has."""
    return math.prod(math.ceil(r / s) for r, s in zip(ranges, sizes) if s)


def _is_tileable(op: ir.Operation) -> bool:
    name = op.name
    return (name.startswith("linalg.") and name not in ("linalg.yield", "linalg.index")) or (
        name in TILEABLE_TENSOR_OPS)


def _iteration_space(op: ir.Operation) -> tuple[list[int], list[str]] | None:
    """Static loop ranges and iterator kinds of a tileable op, or None if unknown."""
    if op.name == "tensor.pad":
        shape = ir.RankedTensorType(op.results[0].type).shape
        return list(shape), ["parallel"] * len(shape)
    if "iterator_types" in op.attributes:
        kinds = [str(a).split("<")[-1].rstrip(">") for a in op.attributes["iterator_types"]]
        maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
        return _ranges_from_maps(op, maps), kinds
    return None


def _ranges_from_maps(op: ir.Operation, maps: list[ir.AffineMap]) -> list[int]:
    """Loop ranges from operand shapes through the indexing maps (dims used directly)."""
    n = maps[0].n_dims
    ranges = [0] * n
    for operand, amap in zip(op.operands, maps):
        if not isinstance(operand.type, ir.RankedTensorType):
            continue
        shape = ir.RankedTensorType(operand.type).shape
        for expr, extent in zip(amap.results, shape):
            if isinstance(expr, ir.AffineDimExpr):
                ranges[ir.AffineDimExpr(expr).position] = extent
    return ranges


def reduction_rank_limit(group: ir.Operation) -> int:
    """How many leading dims of the root may be tiled without re-running a reduction.

    A reduction's result is usually broadcast back along the reduced dims (softmax,
    LayerNorm); tiling the root along such a dim would recompute the whole reduction for
    every tile. The reduction's result rank, less trailing unit dims (torch's keepdim),
    bounds the dims it is indexed by.
    """
    limit = 1 << 30
    body = group.regions[0].blocks[0]
    for op in body.operations:
        op = op.operation
        if not _is_tileable(op) or "iterator_types" not in op.attributes:
            continue
        if not any("reduction" in str(a) for a in op.attributes["iterator_types"]):
            continue
        for result in op.results:
            shape = list(ir.RankedTensorType(result.type).shape)
            while shape and shape[-1] == 1:
                shape.pop()
            limit = min(limit, len(shape))
    return limit


def tileable_dims(group: ir.Operation) -> int | list[int]:
    """The root's dims that tiles may split: the fusion planner's `fusion.tile_dims` (loops
    of the group's last op along which nothing is recomputed) when it left them, else the
    `reduction_rank_limit` leading dims."""
    if attributes.TILE_DIMS in group.attributes:
        return [ir.IntegerAttr(d).value for d in ir.ArrayAttr(group.attributes[attributes.TILE_DIMS])]
    return reduction_rank_limit(group)


def _yielded(group: ir.Operation) -> list[ir.Operation]:
    """The tileable ops whose results the group yields (through reshapes), in yield order."""
    terminator = list(group.regions[0].blocks[0].operations)[-1]
    ops = [producer_through_reshapes(value) for value in terminator.operands]
    return [op for op in ops if op is not None and _is_tileable(op)]


def find_root(group: ir.Operation) -> ir.Operation | None:
    """The tileable op whose result the group yields (through reshapes), the last one first."""
    yielded = _yielded(group)
    return yielded[-1] if yielded else None


SPLIT_PAD = ("the padding after the kernel's last op is a kernel of its own: tiled by the "
             "padding, every other op would run before the tile loop, whole, on one thread")


SPLIT_PROLOGUE = ("what a padding or a convolution's window reads in the kernel is a kernel of "
                  "its own: computed before the tile loop, whole, it would run on one thread")


SPLIT_BESIDE = ("what the kernel yields after its root (a transpose or slice of the root's "
                "result) is a kernel of its own: computed beside the tile loop, whole, it would "
                "run on one thread and keep the kernel's tiles on one thread too")


def split_at_pads(group: ir.Operation) -> list[ir.Operation]:
    """On the CPU, `split_trailing_beside`, `split_trailing_pad`, then
    `split_padded_prologue` of what is left."""
    parts = split_trailing_beside(group)
    parts = split_trailing_pad(parts[0]) + parts[1:]
    return split_padded_prologue(parts[0]) + parts[1:]


def split_trailing_beside(group: ir.Operation) -> list[ir.Operation]:
    """On the CPU, the ops of a group that work on its root's result without being the root
    or a view of it (the group yields a transpose or slice of it beside the root's own
    result: LLaMA's query projection, which yields q and the first half of its head-split
    transpose for RoPE's rotate_half) become a kernel of their own, after the rest.

    Tile-and-fuse tiles the root and what it reads; ops after the root stay outside the tile
    loop, computed whole, and as they write the kernel's output there, the runtime cannot
    split the kernel across threads at all (`--fusion-cpu-tile-loops`): the projection ran on
    one core of two (6.4 ms against 2.2 for the same matmul tiled). As a kernel of its own the
    movement is tiled by itself and reads the root's result from memory once."""
    if str(ir.StringAttr(group.attributes["kind"]).value) == "horizontal":
        return [group]  # independent parts: each its own loop already
    # A contraction whose result the group yields is the root here even where the group
    # yields later work too (`rotate_half` written as cat(-q[..., h:], q[..., :h]) makes the
    # negated half the last result): tiled by that work, the contraction ran before the
    # tile loop, whole, on one thread.
    root = _yielded_contraction(group) or find_root(group)
    if root is None:
        return [group]
    body = _body_ops(group)
    head = _producers_in(body, [root])
    # Views of the root's result stay with it (the group yields them as the root's); the
    # body is in order, so one pass finds views of views.
    for op in body:
        if op.name in RESHAPE_OPS and op_key(op) not in head and \
                any(defining_op(v) is not None and op_key(defining_op(v)) in head
                    for v in op.operands):
            head[op_key(op)] = op
    rest = _kernel_ops(op for op in body if op_key(op) not in head)
    if not rest or not any(_is_tileable(op) for op in rest):
        return [group]
    # Only what depends on the root's result: an op independent of it is the planner's
    # business (horizontal fusion), not trailing work.
    after = {op_key(root)} | {k for k, op in head.items() if op.name in RESHAPE_OPS}
    for op in rest:
        if not any(defining_op(v) is not None and op_key(defining_op(v)) in after
                   for v in op.operands):
            return [group]
        after.add(op_key(op))
    first, second = _split_in_two(group, _kernel_ops(op for op in body if op_key(op) in head),
                                  None, SPLIT_BESIDE)
    return [first, second]


def _yielded_contraction(group: ir.Operation) -> ir.Operation | None:
    """The group's contraction when the group yields its result (through reshapes)."""
    body = list(group.regions[0].blocks[0].operations)
    return next((op for op in _yielded(group)
                 if describe(op, body.index(op)).category == CONTRACTION), None)


def split_padded_prologue(group: ir.Operation) -> list[ir.Operation]:
    """On the CPU, the ops of a group that compute what a padding inside it reads (a
    BatchNorm, ReLU and residual add in front of the next convolution's padding) become a
    kernel of their own, before the rest.

    A padding's producers stay outside its tile loop (`_feeds_pad`): computed whole before
    the loop, by one thread, into a buffer of the kernel's (or into the kernel's output, when
    the group also yields them, which then cannot be split across threads at all: ResNet's
    residual sums). As a kernel of their own they are tiled like any elementwise kernel; the
    buffer between the two is the one the loop read anyway."""
    root = find_root(group)
    if root is None:  # (a split's head may have none: a zero-interleaving pad's group)
        return [group]
    body = _body_ops(group)
    pads = [op for op in body if op.name == "tensor.pad" and op != root]
    prologue = _producers_in(body, [defining_op(p.operands[0]) for p in pads]
                             + _windowed_conv_input(body))
    members = _kernel_ops(op for op in body if op_key(op) in prologue)
    if not members or op_key(root) in prologue \
            or not any(_is_tileable(op) for op in members):
        return [group]
    if any(describe(op, i).category == CONTRACTION for i, op in enumerate(members)):
        return [group]  # the group's one contraction is its root's business
    head, core = _split_in_two(group, members, SPLIT_PROLOGUE, None)
    # The prologue may hold a padding of its own (a max pooling's, in front of the one
    # the convolution reads): split again, until no padding reads work of its group.
    return split_padded_prologue(head) + [core]


WINDOW_OPS = ("linalg.depthwise_conv", "linalg.pooling")


def _windowed_conv_input(body: list[ir.Operation]) -> list[ir.Operation]:
    """The producer of the input of a group's one (dense) convolution when a window op
    (a depthwise convolution, a pooling) computes it in the group: MobileNet's depthwise
    3x3 + BatchNorm + ReLU6 in front of the 1x1 projection. The convolution reads it whole
    (its window), so it is computed before the tile loop, as loops, on one thread (0.66 of
    a 0.96 ms MobileNetV2 block); as a kernel of its own it is tiled like the others."""
    convs = [op for op in body if op.name.startswith("linalg.conv_2d")]
    if len(convs) != 1:
        return []
    source = defining_op(convs[0].operands[0])
    producers = _producers_in(body, [source]).values()
    return [source] if any(op.name.startswith(WINDOW_OPS) for op in producers) else []


def _body_ops(group: ir.Operation) -> list[ir.Operation]:
    """A group's ops, its `fusion.yield` left out."""
    return [op.operation for op in group.regions[0].blocks[0].operations][:-1]


def _producers_in(body: list[ir.Operation],
                  seeds: list[ir.Operation | None]) -> dict[tuple, ir.Operation]:
    """`seeds` and every op of `body` they depend on through operands, keyed by `op_key`
    (ops outside `body`, and block arguments' None, are not followed)."""
    in_body = {op_key(op) for op in body}
    found: dict[tuple, ir.Operation] = {}
    pending = list(seeds)
    while pending:
        op = pending.pop()
        if op is None or op_key(op) not in in_body or op_key(op) in found:
            continue
        found[op_key(op)] = op
        pending += [defining_op(v) for v in op.operands]
    return found


def _kernel_ops(ops) -> list[ir.Operation]:
    """The ops a new group is formed of: the compute ops (constants and empties are cloned
    into each group that uses them)."""
    return [op for op in ops if is_compute(op) and op.name not in CLONED_INTO_GROUPS]


def _split_in_two(group: ir.Operation, first: list[ir.Operation], first_split: str | None,
                  second_split: str | None) -> tuple[ir.Operation, ir.Operation]:
    """`group` replaced by two groups in its place: `first` (compute ops of the group), then
    its other compute ops. The part given a reason (`fusion.split`) is a `single` group; the
    other keeps the group's kind and the planner's attributes (its figures and reasons
    describe the kernel as planned)."""
    kind = str(ir.StringAttr(group.attributes["kind"]).value)
    named = [group.attributes[i] for i in range(len(group.attributes))]
    planned = {a.name: a.attr for a in named if a.name != "kind"}
    keys = {op_key(op) for op in first}
    second = _kernel_ops(op for op in _body_ops(group) if op_key(op) not in keys)
    inline_group(group)
    parts = []
    for ops, reason in ((first, first_split), (second, second_split)):
        if reason is None:
            parts.append(form_group(ops, kind, planned))
        else:
            part = form_group(ops, "single")
            part.attributes[attributes.SPLIT] = ir.StringAttr.get(reason)
            parts.append(part)
    return parts[0], parts[1]


def split_trailing_pad(group: ir.Operation) -> list[ir.Operation]:
    """On the CPU, a group whose root is a padding of what an op of its own computes (a
    convolution's epilogue padded for the next layer) becomes two kernels: the group
    without the padding, tiled by its own last op, and the padding, a copy into a bordered
    buffer tiled by itself (`fusion.split` says why).

    Tiled by the padding, the group's other ops would all be computed before the loop,
    whole, on one thread (a padding's producer cannot be fused into its tile loop,
    `_feeds_pad`); kept beside a loop of the producer, the padding would write the kernel's
    output outside its tiles, which cannot be split across threads either. ResNet-18's
    last stages, convolution and epilogue, ran on one core of two. The copy costs one
    pass over a small tensor (7x7 and 14x14 maps)."""
    root = find_root(group)
    if root is None or root.name != "tensor.pad":
        return [group]
    source = defining_op(root.operands[0])
    if source is None or not _is_tileable(source) or source.parent != root.parent:
        return [group]
    if any(use.owner.name != "fusion.yield" for use in root.results[0].uses):
        return [group]  # the padding is read inside the group too: leave it whole
    body = _body_ops(group)
    # Only where the op before the padding has the convolution's output loops (the
    # convolution or an elementwise epilogue of it, no reshape between), which the
    # convolution's tiling then takes (`_conv_dims`). Tiled by another root (Whisper's 1-D
    # convolution reshaped back to 2-D before its GELU) the convolution would be fused
    # into hundreds of small tiles: 20 -> 206 ms.
    convs = [op for op in body if op.name.startswith(("linalg.conv_2d", "linalg.depthwise_conv"))
             or conv_loops(op) is not None]
    if len(convs) != 1 or not (source == convs[0] or _is_elementwise(source)) \
            or list(ir.ShapedType(source.results[0].type).shape) \
            != list(ir.ShapedType(convs[0].results[0].type).shape):
        return [group]
    head, pad = _split_in_two(group, _kernel_ops(op for op in body if op != root), None,
                              SPLIT_PAD)
    return [head, pad]


def _one_per_use(group: ir.Operation, name: str, top_level_only: bool = False) -> None:
    """Clone every `name` op of the group's body for each of its users past the first (of
    the group's own ops only, with `top_level_only`)."""
    body = group.regions[0].blocks[0]
    for op in list(body.operations):
        op = op.operation
        if op.name != name:
            continue
        uses = [(use.owner, use.operand_number) for use in op.results[0].uses]
        for owner, number in uses[1:]:
            owner = owner.operation if hasattr(owner, "operation") else owner
            if owner.name == "fusion.yield" or top_level_only and owner.parent != group:
                continue
            with ir.InsertionPoint(owner):
                clone = op.clone()
            owner.operands[number] = clone.results[0]


def unshare_fills(group: ir.Operation) -> None:
    """Give every op whose init is a `linalg.fill` shared with another op a fill of its own.

    torch-mlir's CSE lets two reductions (two max pools in a row, two sums) start from one
    `fill(-inf)`. Tile-and-fuse fuses that fill into the tile loop once, for its first use;
    the other op then starts from the loop's output slice instead of the fill (the second
    pool of a chain read uninitialised memory on the GPU). One fill per use is what the
    tiles need; a fill costs nothing but its own write.
    """
    _one_per_use(group, "linalg.fill")


def unshare_empties(group: ir.Operation) -> None:
    """Give every op whose init is a `tensor.empty` shared with another op an empty of its own.

    CSE leaves one `tensor.empty` for all ops of a shape: a prologue (a ReLU in front of a
    1x1 convolution) and the root's fill then share one. The root's empty becomes the tile
    loop's shared output, and `fuse_into_containing_op`, fusing the prologue whole into the
    loop, rewires the prologue's init to the loop's shared output too: every tile then writes
    the whole prologue into the kernel's result while other tiles write their part of it
    (wrong numbers, found by the model zoo through torch.compile). An empty per use costs
    nothing: it is only a shape.
    """
    _one_per_use(group, "tensor.empty", top_level_only=True)


def own_root_inits(root: ir.Operation, group: ir.Operation) -> None:
    """Give the root fresh init tensors where its init comes from outside the group's ops.

    The root's init becomes the tile loop's shared output, which bufferizes in place into
    the kernel's result. An init that is a kernel input (read-only) would make bufferization
    copy it whole before the loop; instead, a `linalg.copy` into a `tensor.empty` (or just the
    empty tensor, when the payload never reads the init) is fused into the tiles like any
    producer.
    """
    if root.name != "linalg.generic":
        return
    n_results = len(root.results)
    operands = list(root.operands)
    payload = root.regions[0].blocks[0]
    n_inputs = len(operands) - n_results
    for i in range(n_results):
        init = operands[n_inputs + i]
        producer = defining_op(init)
        if producer is not None and _is_tileable(producer) and producer.parent == group:
            continue
        if producer is not None and producer.name == "tensor.empty":
            continue
        tensor_type = ir.RankedTensorType(init.type)
        with ir.InsertionPoint(root), root.location:
            fresh = tensor.EmptyOp(tensor_type.shape, tensor_type.element_type).result
            if any(True for _ in payload.arguments[n_inputs + i].uses):
                fresh = linalg.copy(init, outs=[fresh])
        root.operands[n_inputs + i] = fresh


def _fuse_producers(forall: str, producer_tags: list[int]) -> str:
    """Script lines fusing the tagged producers into the tile loop `forall`, in order."""
    return "".join(
        f"""
    transform.sequence {forall} : !transform.any_op failures(suppress) {{
    ^bb0(%f: !transform.any_op):
      %p = transform.structured.match attributes{{{TILE_TAG} = {tag} : i64}} in %arg0
        : (!transform.any_op) -> !transform.any_op
      %fused, %new = transform.structured.fuse_into_containing_op %p into %f
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
    }}"""
        for tag in producer_tags
    )


def _sibling_lines(siblings: list[tuple[int, list[int], list[int]]]) -> str:
    """Script lines tiling each sibling root (tag, producer tags, sizes) like the root and
    fusing its tile loop into the root's (`loop.fuse_sibling`): one loop, one pass over the
    tiles, the shared input read once per tile."""
    lines = ""
    current = "%forall"
    for n, (tag, producers, sizes) in enumerate(siblings):
        lines += f"""
    %sib{n} = transform.structured.match attributes{{{TILE_TAG} = {tag} : i64}} in %arg0
      : (!transform.any_op) -> !transform.any_op
    %stiled{n}, %sforall{n} = transform.structured.tile_using_forall %sib{n}
      tile_sizes [{", ".join(str(s) for s in sizes)}]
      : (!transform.any_op) -> (!transform.any_op, !transform.any_op)"""
        lines += _fuse_producers(f"%sforall{n}", producers)
        lines += f"""
    %joined{n} = transform.loop.fuse_sibling %sforall{n} into {current}
      : (!transform.any_op, !transform.any_op) -> !transform.any_op"""
        current = f"%joined{n}"
    return lines


def _transform_script(root_tag: int, producer_tags: list[int], sizes: list[int],
                      siblings: list[tuple[int, list[int], list[int]]] | None = None) -> str:
    """The transform-dialect script: tile the root, then fuse producers, consumers first;
    then tile and join the sibling roots (an `input` group's other kernels), if any."""
    fuse = _fuse_producers("%forall", producer_tags) + _sibling_lines(siblings or [])
    return f"""
module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%arg0: !transform.any_op {{transform.readonly}}) {{
    %root = transform.structured.match attributes{{{TILE_TAG} = {root_tag} : i64}} in %arg0
      : (!transform.any_op) -> !transform.any_op
    %tiled, %forall = transform.structured.tile_using_forall %root
      tile_sizes [{", ".join(str(s) for s in sizes)}]
      : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    {fuse}
    transform.yield
  }}
}}"""


def _element_bytes(op: ir.Operation) -> int:
    element = ir.ShapedType(op.results[0].type).element_type
    width = getattr(element, "width", 32) if hasattr(element, "width") else 32
    return max(1, width // 8)


def _kernel_kind(group: ir.Operation) -> str:
    """contraction (the group holds one: its tiles are the contraction's), row (some op of
    the group reduces, or reads a broadcast: a tile is whole rows) or elementwise."""
    ops = [op.operation for op in group.regions[0].blocks[0].operations if _is_tileable(op)]
    if any(describe(op, i).category == CONTRACTION for i, op in enumerate(ops)):
        return "contraction"
    for op in ops:
        if "iterator_types" in op.attributes and any(
                "reduction" in str(a) for a in op.attributes["iterator_types"]):
            return "row"
    for op in ops:
        if "indexing_maps" not in op.attributes:
            continue
        for amap in (ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]):
            dims = [e for e in amap.results if isinstance(e, ir.AffineDimExpr)]
            if dims and not amap.is_permutation:
                return "row"  # a broadcast operand: rows of the tile share its values
            # (only constants: one value for every point, no row structure)
    return "elementwise"


def _memory_element_bytes(group: ir.Operation) -> int:
    """Bytes of the narrowest element type the kernel reads or writes."""
    element = memory_element_type(group)
    return max(1, getattr(element, "width", 32) // 8)


def _row_dim(root: ir.Operation) -> int | None:
    """The root's loop that indexes its result's rows (the second-to-last dim): in a
    matmul-rooted kernel, the matmul's M whether the root is the matmul, an elementwise
    epilogue or a row reduction after it."""
    if "indexing_maps" not in root.attributes:
        return None
    out_map = ir.AffineMapAttr(list(root.attributes["indexing_maps"])[-len(root.results)]).value
    results = list(out_map.results)
    if len(results) < 2 or not isinstance(results[-2], ir.AffineDimExpr):
        return None
    return ir.AffineDimExpr(results[-2]).position


def stale_dims_shifted(dims: int | list[int], rank: int) -> int | list[int]:
    """The planner's tile dims for a root that has since lost leading unit dims.

    `fusion.tile_dims` names loops of the group's last op as the planner saw it; the tiled
    stage's reshape passes may then collapse that op's leading unit dims (a batch of 1:
    [1, 128, 768] -> [128, 768]), so dims [1, 2] (rows and columns) would name column and
    nothing: GPT-2's MLP on the CPU then tiled its second matmul along the columns only and
    recomputed the GELU in front of it for each of 29 tiles, at 10 GFLOP/s. A dim past the
    root's loops means the loops were shifted by that many collapsed leading dims."""
    if isinstance(dims, int) or not dims or max(dims) < rank:
        return dims
    shift = max(dims) - (rank - 1)
    return [d - shift for d in dims if d >= shift]


def _col_dim(root: ir.Operation) -> int | None:
    """The root's loop that indexes its result's columns (the last dim)."""
    if "indexing_maps" not in root.attributes:
        return None
    out_map = ir.AffineMapAttr(list(root.attributes["indexing_maps"])[-len(root.results)]).value
    results = list(out_map.results)
    if not results or not isinstance(results[-1], ir.AffineDimExpr):
        return None
    return ir.AffineDimExpr(results[-1]).position


# Ops that may sit in front of a matmul whose columns are tiled: nothing of theirs is
# recomputed by each column tile but their views.
_FREE_PROLOGUE = frozenset({"linalg.fill", "tensor.empty", "tensor.expand_shape",
                            "tensor.collapse_shape", "arith.constant"})


def _is_fill(op: ir.Operation) -> bool:
    """A fill, named or generalized (a generic that yields its only, scalar, input)."""
    if op.name == "linalg.fill":
        return True
    if op.name != "linalg.generic" or len(op.operands) != 2:
        return False
    if isinstance(op.operands[0].type, ir.ShapedType):
        return False
    block = op.regions[0].blocks[0]
    last = list(block.operations)[-1]
    return len(last.operands) == 1 and last.operands[0] == block.arguments[0]


def _is_elementwise(op: ir.Operation) -> bool:
    return op.name == "linalg.generic" and all(
        "parallel" in str(a) for a in op.attributes["iterator_types"])


def _payload_flops(op: ir.Operation) -> int:
    """Points of an elementwise op times the ops of its payload."""
    points = math.prod(ir.ShapedType(op.results[0].type).shape)
    return points * max(1, len(list(op.regions[0].blocks[0].operations)) - 1)


@dataclass(frozen=True)
class MatmulTuning:
    """Where a CPU matmul kernel's tiling comes from besides the cost model: the tuning
    cache's entries (runtime/tuning.py) for `device` (the CPU the code is built for), or,
    for `--tune`'s builds, the candidate of index `candidate` (>= 0)."""

    entries: dict
    device: str
    candidate: int = -1


def _tuned_tiling(group: ir.Operation, key: str, candidates: list,
                  predicted_s: float, tuning: MatmulTuning | None):
    """The tiling of a CPU matmul kernel with tuning key `key` (the model's: candidates[0];
    the cache's; or --tune's candidate), recorded on the group as the GPU's tiles are
    (`fusion.kernel_tile` [rows, cols], `fusion.kernel_tile_from`, `fusion.tune_key`...)."""
    from fusec.runtime import tuning as cache

    chosen, source = candidates[0], "cost model"
    if tuning is not None and tuning.candidate >= 0:
        i = min(tuning.candidate, len(candidates) - 1)
        chosen, source = candidates[i], f"candidate {i} (--tune)"
    elif tuning is not None:
        entry = tuning.entries.get(cache.entry_key(tuning.device, key))
        if entry is not None:
            tile = tuple(entry.get("tile") or ())
            found = [c for c in candidates if (c.rows, c.cols) == tile]
            if found:
                chosen = found[0]
                source = (f"tuned: {entry.get('measured_us', 0):.1f} us measured, the cost "
                          f"model's tile {entry.get('model_tile')} "
                          f"{entry.get('model_us', 0):.1f} us")
            else:
                source = (f"cost model (the tuning cache's tile {list(tile)} is not one of "
                          f"this kernel's candidates)")
    i64 = ir.IntegerType.get_signless(64)
    group.attributes[attributes.TUNE_KEY] = ir.StringAttr.get(key)
    group.attributes[attributes.KERNEL_TILE] = ir.DenseI64ArrayAttr.get(
        [chosen.rows, chosen.cols])
    group.attributes[attributes.KERNEL_TILE_FROM] = ir.StringAttr.get(source)
    group.attributes[attributes.KERNEL_TILE_CANDIDATES] = ir.IntegerAttr.get(
        i64, len(candidates))
    group.attributes[attributes.KERNEL_TILE_PREDICTED_NS] = ir.IntegerAttr.get(
        i64, round(predicted_s * 1e9))
    return chosen


def _column_tiles(group: ir.Operation, root: ir.Operation, ranges: list[int],
                  iterators: list[str], sizes: list[int], m: int, dims: int | list[int], threads: int,
                  tiles_per_thread: int, tuning: MatmulTuning | None = None) -> list[int]:
    """The CPU matmul kernel's tiles along its columns (and rows) instead of its rows alone
    where the cost model says so (`cpu_matmul_tiling`): the columns must be a tile dim of
    the plan, and only elementwise ops and views may come before the matmul (a column tile
    recomputes its rows of them; the cost model weighs that)."""
    body = list(group.regions[0].blocks[0].operations)
    contraction = next((op.operation for i, op in enumerate(body) if _is_tileable(op)
                        and describe(op.operation, i).category == CONTRACTION), None)
    if contraction is None:
        return sizes
    # Columns split over loops (a projection's output viewed as heads x head_dim) are tiled
    # by their outer loop, in whole inner rows (`--fusion-cpu-matmul` merges them back).
    n, inner = _col_dim(root), 1
    split = _split_column_loops(contraction) if contraction == root else None
    if split is not None:
        n, inner = split[0], math.prod(ranges[d] for d in split[1:])
    allowed = _allowed_dims(dims, len(ranges))
    if n is None or n == m or n not in allowed or iterators[n] != "parallel":
        return sizes
    cols = ranges[n] * inner
    before = [op.operation for op in body[:[op.operation for op in body].index(contraction)]]
    before = [op for op in before if op.name not in _FREE_PROLOGUE and not _is_fill(op)]
    if any(not _is_elementwise(op) for op in before):
        return sizes
    space = _iteration_space(contraction)
    if space is None:
        return sizes
    depth = math.prod(r for r, kind in zip(*space) if kind == "reduction")
    # Each column tile computes its rows of the prologue whole and keeps them.
    prologue_flops = sum(_payload_flops(op) for op in before)
    prologue_bytes = sum(_element_bytes(op) * math.prod(ir.ShapedType(op.results[0].type).shape)
                         for op in before)
    elem = _element_bytes(contraction)
    quantum = math.lcm(cost_model.CPU_MATMUL_COLUMN_QUANTUM, inner)
    candidates = cost_model.cpu_matmul_tiling_candidates(
        ranges[m], cols, depth, elem, sizes[m], threads,
        prologue_row_bytes=prologue_bytes // ranges[m],
        prologue_row_flops=prologue_flops // ranges[m], tiles_per_thread=tiles_per_thread,
        quantum=quantum)
    flops = 2 * ranges[m] * cols * depth
    key = (f"cpu_matmul m={ranges[m]} n={cols} k={depth} el={elem * 8}b "
           f"prologue={prologue_bytes}B/{prologue_flops}flop threads={threads} "
           f"row_tile={sizes[m]}" + (f" column_quantum={quantum}" if inner > 1 else ""))
    predicted = flops / (threads * cost_model.CPU_HOST.matmul_flops_per_s)
    tiling = _tuned_tiling(group, key, candidates, predicted, tuning)
    if not tiling.cols:
        if tiling.rows != sizes[m]:
            sizes = list(sizes)
            sizes[m] = tiling.rows
        return sizes
    sizes = list(sizes)
    sizes[m], sizes[n] = tiling.rows, tiling.cols // inner
    return sizes


def _split_column_loops(op: ir.Operation) -> list[int] | None:
    """A matmul-like op's column loops, outer first, when they are several
    (`grouping.split_columns`), else None (also for an op that reduces nothing)."""
    if "indexing_maps" not in op.attributes or len(op.operands) != 3 or \
            "reduction" not in iterator_kinds(op):
        return None
    maps = [projection(ir.AffineMapAttr(a).value) for a in op.attributes["indexing_maps"]]
    if any(m is None or None in m for m in maps):
        return None
    return split_columns(*maps)


def _matmul_row_dim(root: ir.Operation) -> int | None:
    """The row loop of a matmul-rooted kernel (`_row_dim`); where the root is a matmul whose
    columns are split over loops (heads x head_dim), the loop before them."""
    split = _split_column_loops(root)
    if split is None:
        return _row_dim(root)
    out_map = projection(ir.AffineMapAttr(list(root.attributes["indexing_maps"])[-1]).value)
    before = out_map[:len(out_map) - len(split)]
    return before[-1] if before else None


def _conv_dims(group: ir.Operation,
               root: ir.Operation) -> tuple[int, int | None, int | None, bool, int | None] | None:
    """The root's (images, output rows, output columns, cheap rows, output channels) loop
    dims where the group's
    contraction is a convolution (`conv_loops`): the root itself, or an epilogue after it
    (BatchNorm, ReLU, a residual add) whose loops are the convolution's output, in order.
    A root that is neither (the next layer's padding) has its images first, and no rows
    the convolution's map to: (0, None, None, _). None: no convolution.

    The last element says whether output-row tiles are exact and cheap whatever the plan's
    `fusion.tile_dims` say: every other op of the group is elementwise, a fill or a
    padding, so a row tile recomputes at most a window's halo of them (the planner leaves
    out rows reached through a window expression, as it must for a reduction or a
    contraction in front of one)."""
    body = [op.operation for op in group.regions[0].blocks[0].operations]
    convs = [(op, c) for op in body if _is_tileable(op) and (c := conv_loops(op)) is not None]
    if len(convs) != 1:
        return None
    conv, c = convs[0]
    cheap = all(op == conv or _is_elementwise(op) or _is_fill(op) or op.name == "tensor.pad"
                for op in body if _is_tileable(op))
    # Output-channel tiles recompute nothing but the gather when the convolution's input is
    # computed before the tile loop anyway: a group argument, or a padding (whose producers
    # stay outside the loop, `_feeds_pad`), and every op after it is elementwise.
    source = defining_op(conv.operands[0])
    whole_input = source is None or source.name == "tensor.pad"
    f = c.f if conv == root else 1
    f = f if cheap and whole_input else None
    if conv == root:
        return c.n, c.oh, c.ow, cheap, f
    out_shape = list(ir.ShapedType(conv.operands[2].type).shape)
    space = _iteration_space(root)
    if space is None or space[0] != out_shape or "indexing_maps" not in root.attributes:
        return 0, None, None, False, None
    out_map = ir.AffineMapAttr(root.attributes["indexing_maps"][len(root.operands) - 1]).value
    if out_map != ir.AffineMap.get_identity(4, root.context):
        return 0, None, None, False, None
    return 0, 2, 3, cheap, f


def _allowed_dims(dims: int | list[int], rank: int) -> set[int]:
    """`tileable_dims`' answer as a set of loop dims (an int n: the first n)."""
    return set(range(min(dims, rank))) if isinstance(dims, int) else set(dims)


def tile_sizes_for(group: ir.Operation, root: ir.Operation, ranges: list[int],
                   iterators: list[str], threads: int, tiles_per_thread: int,
                   min_tile_bytes: int, max_tile_bytes: int,
                   device: cost_model.Device | None, kind: str,
                   matmul_rows: int = 0, conv_builds_as_gemm: bool = False,
                   tuning: MatmulTuning | None = None) -> list[int]:
    """The root's tile sizes on `device` (None: the CPU policy) for a kernel of `kind`
    (`_kernel_kind`), capped by the group's `fusion.max_tile_rows`; a CPU matmul's row tile
    is whole blocks of `matmul_rows` (the microkernel's rows; 0: the cost model's); a CPU
    convolution that `--fusion-cpu-conv` builds (`conv_builds_as_gemm`) is tiled by images
    and output rows (`cost_model.cpu_conv_tile_sizes`)."""
    dims = stale_dims_shifted(tileable_dims(group), len(ranges))
    conv = m = None
    if device is not None and device.threads_per_block > 1:
        allowed = _allowed_dims(dims, len(ranges))
        sizes = cost_model.gpu_tile_sizes(ranges, iterators, _memory_element_bytes(group),
                                          allowed, kind, device)
    else:
        sizes = cpu_tile_sizes(ranges, iterators, _element_bytes(root), dims, threads,
                               tiles_per_thread, min_tile_bytes, max_tile_bytes)
        # Whole microkernel row blocks; not when the caller asked for the finest tiles
        # (min-tile-kb=0: the GPU fallback path, one thread per tile).
        microkernel = min_tile_bytes > 0 and kind == "contraction"
        # (A convolution is a windowed op to the planner, not a "contraction" kernel.)
        conv = _conv_dims(group, root) if min_tile_bytes > 0 and conv_builds_as_gemm else None
        m = _matmul_row_dim(root) if microkernel and conv is None else None
        if conv is not None:
            allowed = _allowed_dims(dims, len(ranges))
            n, oh, ow, rows_free, channels = conv
            if rows_free and oh is not None:
                allowed.add(oh)
            if channels is not None:
                allowed.add(channels)
            sizes = cost_model.cpu_conv_tile_sizes(ranges, n, oh, ow, allowed, threads,
                                                   tiles_per_thread, channels)
        if m is not None:
            sizes[m] = matmul_row_tile(ranges[m], sizes[m],
                                       matmul_rows or cost_model.CPU_MATMUL_ROW_BLOCK)
            sizes = _column_tiles(group, root, ranges, iterators, sizes, m, dims, threads,
                                  tiles_per_thread, tuning)
    if MAX_TILE_ROWS_ATTR in group.attributes:
        limit = ir.IntegerAttr(group.attributes[MAX_TILE_ROWS_ATTR]).value
        if m is not None:
            # A matmul's tile shrinks by whole microkernel blocks, rows first: a column
            # tile narrower than one block is all scalar remainder (a 1024^3 matmul's
            # columns cut from 256 to 20 by the generic shrink ran at 9 GFLOP/s, not 90).
            sizes = cost_model.cpu_matmul_limit_tile(
                ranges, sizes, m, _col_dim(root), limit,
                matmul_rows or cost_model.CPU_MATMUL_ROW_BLOCK)
        else:
            channel_tile = sizes[conv[4]] if conv is not None and conv[4] is not None else 0
            sizes = limit_tile_rows(sizes, limit)
            if channel_tile:
                # A convolution's channel tile is one per thread: the im2col rewrite sizes
                # its own chunks to the L2, and narrower channel tiles would each gather the
                # image again (Whisper's 768-channel 1-D convolution in 512 tiles: 10x).
                sizes[conv[4]] = channel_tile
        if conv is not None and conv[1] is not None and sizes[conv[1]] > 0:
            # Still whole row blocks: a ragged last tile has a dynamic row count, which the
            # convolution's im2col rewrite does not take (its loops ran 10x slower).
            rows = ranges[conv[1]]
            sizes[conv[1]] = max(d for d in range(1, sizes[conv[1]] + 1) if rows % d == 0)
    return sizes


def tile_group(group: ir.Operation, threads: int, tiles_per_thread: int,
               min_tile_bytes: int, max_tile_bytes: int = 256 * 1024,
               device: cost_model.Device | None = None, matmul_rows: int = 0,
               conv_builds_as_gemm: bool = False,
               tuning: MatmulTuning | None = None) -> None:
    """Tile `group`'s root and fuse its producers; record sizes and grid on the group."""
    i64 = ir.IntegerType.get_signless(64)
    group.attributes[attributes.GRID] = ir.IntegerAttr.get(i64, 1)
    _record_op_names(group)
    unshare_fills(group)
    unshare_empties(group)
    _generalize(group)
    for op in group.regions[0].blocks[0].operations:
        if op.operation.name == "linalg.generic":
            materialize_unit_result_dims(op.operation)
    root = find_root(group)
    if root is None:
        return
    space = _iteration_space(root)
    if space is None:
        return
    ranges, iterators = space
    own_root_inits(root, group)
    kind = _kernel_kind(group)
    sizes = tile_sizes_for(group, root, ranges, iterators, threads, tiles_per_thread,
                           min_tile_bytes, max_tile_bytes, device, kind, matmul_rows,
                           conv_builds_as_gemm, tuning)
    if device is not None and device.threads_per_block > 1:
        _record_block(group, kind, sizes, ranges, device)
    if not any(sizes):
        return
    body = group.regions[0].blocks[0]
    others = sibling_roots(group, root, ranges, sizes)
    tileable = [op.operation for op in body.operations if _is_tileable(op.operation)]
    tileable_names = [op.name for op in tileable]
    for i, op in enumerate(tileable):
        op.attributes[TILE_TAG] = ir.IntegerAttr.get(i64, i)

    roots = [next(i for i, op in enumerate(tileable) if op == target)
             for target in [root, *others]]
    kept_whole, outside = inexact_escaping_producers(tileable, roots)

    def producers_of(index: int) -> list[int]:
        return [i for i in reversed(range(index))
                if not _feeds_pad(tileable[i]) and i not in outside]

    siblings = [(index, producers_of(index), sizes) for index in roots[1:]]
    script = _transform_script(roots[0], producers_of(roots[0]), sizes, siblings)
    transform_module = ir.Module.parse(script)
    entry = next(iter(transform_module.body.operations))
    try:
        interpreter.apply_named_sequence(group, entry, transform_module)
    except ir.MLIRError as exc:
        raise PassError(f"tiling the group failed: {exc}", group.location) from None
    _drop_tags(group)
    order_parallel_inserts(group)
    if kept_whole:
        group.attributes[WHOLE_ATTR] = ir.ArrayAttr.get([
            ir.StringAttr.get(f"{tileable_names[i]} (op {i}): its result leaves the kernel but "
                              "the tiles read only part of it (a strided, windowed or "
                              "shifted access); computed whole before the tile loop")
            for i in sorted(kept_whole)])
    fold_reshaped_empties(group)
    group.attributes[attributes.TILE_SIZES] = ir.DenseI64ArrayAttr.get(sizes)
    group.attributes[attributes.GRID] = ir.IntegerAttr.get(i64, tile_count(ranges, sizes))


def _record_block(group: ir.Operation, kind: str, sizes: list[int], ranges: list[int],
                  device: cost_model.Device) -> None:
    """How one GPU block runs a tile (`fusion.tile_kind`, `fusion.block` threads): the cost
    model's launch shape, which code generation builds (compiler/targets/cuda/tiles.py)."""
    points = math.prod(size or extent for size, extent in zip(sizes, ranges))
    threads = cost_model.gpu_block_threads(kind, points, _memory_element_bytes(group), device)
    i64 = ir.IntegerType.get_signless(64)
    group.attributes[attributes.TILE_KIND] = ir.StringAttr.get(kind)
    group.attributes[attributes.BLOCK] = ir.IntegerAttr.get(i64, threads)


def sibling_roots(group: ir.Operation, root: ir.Operation, ranges: list[int],
                  sizes: list[int]) -> list[ir.Operation]:
    """For an `input` group (independent kernels sharing one read), its other yielded roots,
    if they all take the root's tiles (same loop ranges, every tiled loop parallel in them
    too); their inits made their own, like the root's. The root's tile loop then runs all."""
    if ir.StringAttr(group.attributes["kind"]).value != "input":
        return []
    terminator = list(group.regions[0].blocks[0].operations)[-1]
    found: list[ir.Operation] = []
    for value in terminator.operands:
        op = defining_op(value)
        if op is None or op == root or not _is_tileable(op) or any(op == f for f in found):
            continue
        space = _iteration_space(op)
        if space is None or space[0] != ranges or any(
                size and kind != "parallel" for size, kind in zip(sizes, space[1])):
            return []  # tiles that do not line up: the siblings stay whole, beside the loop
        found.append(op)
    for op in found:
        own_root_inits(op, group)
    return found


def _covering_read(consumer: ir.Operation, operand_number: int) -> bool:
    """Whether `consumer`, run over its whole iteration space, reads every element of its
    operand `operand_number`, each through a loop dim of the operand's full extent: a
    projected permutation (identity, transpose, broadcast; a unit dim read at 0) and no
    stride, window or offset.
    """
    if "indexing_maps" not in consumer.attributes:
        return False  # tensor.pad, a reshape: reads through offsets the maps do not show
    maps = [ir.AffineMapAttr(m).value for m in consumer.attributes["indexing_maps"]]
    if operand_number >= len(maps):
        return False
    amap = maps[operand_number]
    ranges = _ranges_from_maps(consumer, maps)
    shape = ir.RankedTensorType(consumer.operands[operand_number].type).shape
    seen: set[int] = set()
    for expr, extent in zip(amap.results, shape):
        if isinstance(expr, ir.AffineConstantExpr) and ir.AffineConstantExpr(expr).value == 0 \
                and extent == 1:
            continue  # torch's keepdim: the one element of a unit dim
        if not isinstance(expr, ir.AffineDimExpr):
            return False  # a stride, a window, an offset
        position = ir.AffineDimExpr(expr).position
        if position in seen or ranges[position] != extent:
            return False  # a diagonal, or a part of the dim
        seen.add(position)
    return True


def inexact_escaping_producers(tileable: list[ir.Operation],
                               roots: list[int]) -> tuple[set[int], set[int]]:
    """The producers (indices into `tileable`) that must stay outside the tile loop: those
    whose result is also used outside it (yielded by the group, or read by an op the loop
    does not hold) while the tiles compute only part of it (the first set, recorded on the
    group), and with them those no op of the loop reads as an operand (the second set holds
    both).

    Fusing a producer into the tile loop computes, per tile, the slice of it the tile reads;
    a result that leaves the loop is then written only where some tile read it. That is the
    whole tensor only if the loop's ops, over all tiles, read all of it: every consumer in
    the loop reads it through a covering map (`_covering_read`) and is itself computed whole
    (a root, a producer kept outside, or a producer read whole in turn). A stride-2
    convolution reading a residual sum, a window of a pooling, a shifted slice do not: such
    a producer is computed whole before the loop (same kernel, exact; not tiled).
    """
    in_loop = {i for i in range(max(roots) + 1) if i in roots or not _feeds_pad(tileable[i])}
    whole: dict[int, bool] = {r: True for r in roots}
    kept: set[int] = set()
    outside: set[int] = set()
    keys = {op_key(op): i for i, op in enumerate(tileable)}
    for i in reversed(range(max(roots) + 1)):
        if i in whole or i not in in_loop:
            continue
        op = tileable[i]
        escapes = False
        exact = True
        consumers = 0
        in_payload = False
        for result in op.results:
            for use in result.uses:
                j = keys.get(op_key(use.owner))
                if j is None and use.owner.name == "tensor.extract":
                    in_payload = True  # a gather's payload reads it, element by element
                if j is None or j not in in_loop or j <= i:
                    escapes = True
                    continue
                consumers += 1
                if not (whole.get(j, False) and _covering_read(tileable[j], use.operand_number)):
                    exact = False
        if not consumers or in_payload:
            # Nothing in the loop reads it as an operand, or a payload's tensor.extract (a
            # gather's) reads it whole: it stays outside, whole. Asked to fuse, the transform
            # clones it into that payload, where it wrote the loop's result buffer per
            # element (fuzz, around-blocks family: a causal mask read by a gather).
            in_loop.discard(i)
            whole[i] = True
            outside.add(i)
        elif escapes and not exact:
            kept.add(i)
            outside.add(i)
            in_loop.discard(i)
            whole[i] = True
        else:
            whole[i] = exact
    return kept, outside


def order_parallel_inserts(group: ir.Operation) -> None:
    """Put each `scf.forall`'s `parallel_insert_slice`s in the order of its shared outputs.

    `fuse_into_containing_op` appends a new shared output for a fused producer whose result
    is also used after the loop, but may place its insert before the others; the
    canonicalizer's folding of a one-iteration loop pairs inserts with results by position,
    so the loop's results would come out swapped (a verifier error, or wrong values where
    the types agree).
    """
    for loop in walk_ops(group, lambda op: op.name == "scf.forall"):
        body = loop.regions[0].blocks[0]
        outs = list(body.arguments)[-len(loop.results):] if len(loop.results) else []
        terminator = list(body.operations)[-1].operation
        inserts = [op.operation for op in terminator.regions[0].blocks[0].operations]
        ordered = sorted(inserts, key=functools.partial(_shared_out_position, outs))
        if ordered == inserts:
            continue
        last = None
        for op in ordered:
            if last is None:
                op.move_before(terminator.regions[0].blocks[0].operations[0])
            else:
                op.move_after(last)
            last = op


def _shared_out_position(outs: list[ir.Value], insert: ir.Operation) -> int:
    """Which of the loop's shared outputs a `parallel_insert_slice` writes (its dest)."""
    dest = insert.operands[1]
    return next((k for k, arg in enumerate(outs) if arg == dest), len(outs))


def _feeds_pad(op: ir.Operation) -> bool:
    """Whether a result of `op` is the source of a tensor.pad.

    Such a producer stays outside the tile loop (computed whole, before it): a fused pad
    reads its source slice inside an `scf.if` (the guard for an all-padding tile), and
    fusing the source's producer through that nested use trips an MLIR assertion (`eraseOp`
    of an op that still has uses) that aborts the process.
    """
    return any(use.owner.name == "tensor.pad" and use.operand_number == 0
               for result in op.results for use in result.uses)


SPLIT_FOR_THREADS = ("ops computed outside the tile loop would be computed whole by every "
                     "thread of the fallback path: one kernel each")


def computes_outside_tiles(group: ir.Operation) -> bool:
    """Whether a tiled group holds compute (a linalg op, a pad) beside its tile loop."""
    ops = [op.operation for op in group.regions[0].blocks[0].operations]
    return any(op.name == "scf.forall" for op in ops) and any(_is_tileable(op) for op in ops)


SPLIT_BEFORE_LOOP = ("ops computed outside the tile loop would be computed whole by every "
                     "thread of the fallback path: they and what they read are a kernel, "
                     "the rest another")
# How many times a part is cut again at what its own tiling leaves outside, before the
# part is split into one kernel per op.
FALLBACK_CUTS = 3


def _cut_before_loop(backup: ir.Operation,
                     tiled: ir.Operation) -> list[list[ir.Operation]] | None:
    """The ops of `backup` that `tiled` computes outside its tile loop, with every op of
    the group they read (directly or through reshapes), as one piece; the rest as the other.
    The first piece holds all it reads, so no path leaves it and comes back: both pieces are
    kernels. None where the two cannot be told apart, or one piece would be everything.

    `tiled` was tiled in a module of its own (`tile_for_fallback`: named ops generalised),
    so an op outside its loop is found in `backup` by what it reads (the group's inputs, or
    ops found before it) and its result types: exactly one op of `backup` must match."""
    body = [op.operation for op in backup.regions[0].blocks[0].operations][:-1]
    compute = [op for op in body if op.name not in CLONED_INTO_GROUPS and is_compute(op)
               and any(True for r in op.results for _ in r.uses)]
    # Another op's result an op reads, as a key: through reshapes (tiling hoists them out of
    # the group), and from a group's input to the value outside that it stands for.
    in_backup = {op_key(op) for op in compute}
    matched: dict[tuple[int, int], tuple[int, int]] = {}  # tiled result -> backup result

    def reads(op: ir.Operation, group: ir.Operation) -> list[tuple[int, int]]:
        keys = []
        for v in op.operands:
            v = _root(v, group)
            producer = defining_op(v)
            if group == tiled and value_key(v) in matched:
                keys.append(matched[value_key(v)])
            elif producer is None or group == backup and op_key(producer) in in_backup or \
                    not _inside(producer, group):
                keys.append(value_key(v))
        return sorted(keys)

    found = []
    for op in [o.operation for o in tiled.regions[0].blocks[0].operations]:
        if op.name == "scf.forall" or not _is_tileable(op):
            continue
        wanted = (reads(op, tiled), [str(r.type) for r in op.results])
        matches = [c for c in compute if wanted[0] and
                   (reads(c, backup), [str(r.type) for r in c.results]) == wanted]
        if len(matches) != 1:
            return None
        found.append(matches[0])
        matched.update((value_key(a), value_key(b))
                       for a, b in zip(op.results, matches[0].results))
    members = {op_key(op) for op in body}
    first = {op_key(op) for op in found}
    stack = list(found)
    while stack:
        for operand in stack.pop().operands:
            producer = defining_op(operand)
            if producer is not None and op_key(producer) in members and \
                    op_key(producer) not in first:
                first.add(op_key(producer))
                stack.append(producer)
    pieces = [[op for op in compute if op_key(op) in first],
              [op for op in compute if op_key(op) not in first]]
    return pieces if all(pieces) else None


def _inside(op: ir.Operation, group: ir.Operation) -> bool:
    parent = op.parent
    while parent is not None and parent != group:
        parent = parent.parent
    return parent is not None


def _root(value: ir.Value, group: ir.Operation) -> ir.Value:
    """`value` through reshapes, and from an argument of `group`'s body to the group's
    operand (and on through reshapes outside)."""
    body = group.regions[0].blocks[0]
    while True:
        producer = defining_op(value)
        if producer is None:
            if value.owner != body:
                return value
            value = group.operands[ir.BlockArgument(value).arg_number]
        elif producer.name in RESHAPE_OPS:
            value = producer.operands[0]
        else:
            return value


def fallback_tiles(group: ir.Operation, tile, accept, tile_for_fallback,
                   cuts: int = FALLBACK_CUTS) -> list[ir.Operation]:
    """Tile `group` for the GPU's fallback path (a tile per thread). A tiling that leaves
    compute beside the tile loop (a producer of a `tensor.pad`, a producer read through a
    window) would have every GPU thread compute that op whole (a stack buffer per thread the
    size of the tensor: the launch fails). The group is cut in two instead: what the tiling
    left outside with all it reads, and the rest (`_cut_before_loop`), each tiled as the
    emitters or the fallback build it, and cut again the same way (`cuts` times); where
    that cannot be done, into one kernel per op (`fusion.split` says which)."""
    backup = group.clone(ip=ir.InsertionPoint(group))
    tiled = tile_for_fallback(group)
    if not computes_outside_tiles(tiled):
        backup.erase()
        return [tiled]
    from fusec.passes.tiling.capacity import tile_accepted

    pieces = _cut_before_loop(backup, tiled) if cuts > 0 else None
    for old, new in zip(tiled.results, backup.results):
        old.replace_all_uses_with(new)
    tiled.erase()
    if pieces is None:
        return _per_op(backup, tile, accept, tile_for_fallback)
    parts = []
    kind = str(backup.attributes["kind"]).strip('"')
    inline_group(backup)
    for piece in pieces:
        part = form_group(piece, kind if len(piece) > 1 else "single",
                          {attributes.SPLIT: ir.StringAttr.get(SPLIT_BEFORE_LOOP)})
        part = tile_accepted(part, tile, accept)
        if not untiled_on_gpu(part):
            parts.append(part)  # an emitter's kernel
        elif len(piece) == 1 or not _only_fallback_builds(part, tile_for_fallback) or \
                not _emitters_build_each_op(part, tile_for_fallback):
            parts += fallback_tiles(part, tile, accept, tile_for_fallback, cuts - 1)
        else:
            # No emitter builds the piece whole, the fallback path (a thread per tile, no
            # vector loads) would, and the emitters build each of its ops: kernels of one
            # op each rather than one fallback kernel.
            parts += _per_op(part, tile, accept, tile_for_fallback)
    return parts


def _per_op(group: ir.Operation, tile, accept, tile_for_fallback) -> list[ir.Operation]:
    """`group` split into one kernel per op (`fusion.split`), each tiled as the emitters or
    the fallback build it."""
    from fusec.passes.tiling.capacity import split_group, tile_accepted

    parts = []
    for part in split_group(group, SPLIT_FOR_THREADS):
        part = tile_accepted(part, tile, accept)
        parts.append(tile_for_fallback(part) if untiled_on_gpu(part) else part)
    return parts


def _emitters_build_each_op(part: ir.Operation, tile_for_fallback) -> bool:
    """Whether every op of `part`, a kernel of its own, is built by a group-level emitter:
    asked of a copy in a module of its own, split as `capacity.split_group` splits (a pad's
    producer and a convolution: the convolution is the fallback's either way, so the piece
    stays whole)."""
    from fusec.passes.tiling.capacity import split_group

    mini = group_alone(part)
    fn = mini.body.operations[0].operation
    copy = next(op.operation for op in fn.regions[0].blocks[0].operations
                if op.operation.name == part.name)
    return not any(_only_fallback_builds(single, tile_for_fallback)
                   for single in split_group(copy, SPLIT_FOR_THREADS))


def _only_fallback_builds(part: ir.Operation, tile_for_fallback) -> bool:
    """Whether the fallback path is what would build `part` (no group-level emitter does,
    and its per-thread tiling leaves nothing beside the loop): asked of a copy."""
    copy = part.clone(ip=ir.InsertionPoint(part))
    tiled = tile_for_fallback(copy)
    kind = str(ir.StringAttr(tiled.attributes[attributes.TILE_KIND]).value) \
        if attributes.TILE_KIND in tiled.attributes else ""
    untiled = str(ir.StringAttr(tiled.attributes[UNTILED_ATTR]).value) \
        if UNTILED_ATTR in tiled.attributes else ""
    fallback = not computes_outside_tiles(tiled) and \
        (kind == "thread" or "the fallback path tiles it" in untiled)
    tiled.erase()
    return fallback


def untiled_on_gpu(part: ir.Operation) -> bool:
    """Whether a GPU group was left untiled (neither tile emitter's); a group the tiling
    gave no kind, having nothing to tile, is marked so, with the reason."""
    if attributes.TILE_KIND not in part.attributes and UNTILED_ATTR not in part.attributes:
        part.attributes[UNTILED_ATTR] = ir.StringAttr.get(
            "nothing to tile: no linalg op (a copy or a reshape of its input)")
    return UNTILED_ATTR in part.attributes


GENERALIZE_SCRIPT = """
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%arg0: !transform.any_op {transform.readonly}) {
    %all = transform.structured.match interface{LinalgOp} in %arg0
      : (!transform.any_op) -> !transform.any_op
    %generic = transform.structured.generalize %all : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}"""


def _record_op_names(group: ir.Operation) -> None:
    """`fusion.ops`: the names of the group's compute ops, before generalization hides them."""
    names = [op.operation.name for op in group.regions[0].blocks[0].operations
             if is_compute(op.operation)]
    group.attributes[attributes.OPS] = ir.ArrayAttr.get([ir.StringAttr.get(n) for n in names])


def _generalize(group: ir.Operation) -> None:
    """Rewrite named linalg ops (matmul, conv, fill, ...) as linalg.generic.

    Tile-size policy reads iteration spaces from `indexing_maps`/`iterator_types`, which only
    linalg.generic spells out; the loops generated later are the same either way.
    """
    script = ir.Module.parse(GENERALIZE_SCRIPT)
    interpreter.apply_named_sequence(group, next(iter(script.body.operations)), script)


def materialize_unit_result_dims(op: ir.Operation) -> None:
    """Give each constant index of a result's indexing map a loop dim of its own.

    torch-mlir writes keepdim reductions as `(d0, d1) -> (d0, 0)` into tensor<Nx1>; the
    tiling interface only tiles ops whose results are indexed by dims (a projected
    permutation). A new parallel dim of extent 1 in place of the constant says the same.
    """
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    n_results = len(op.results)
    n_dims = maps[0].n_dims
    new_maps = []
    added = 0
    for i, amap in enumerate(maps):
        exprs = list(amap.results)
        if i >= len(maps) - n_results:
            for k, expr in enumerate(exprs):
                if isinstance(expr, ir.AffineConstantExpr) and expr.value == 0:
                    exprs[k] = ir.AffineDimExpr.get(n_dims + added)
                    added += 1
        new_maps.append(exprs)
    if not added:
        return
    total = n_dims + added
    op.attributes["indexing_maps"] = ir.ArrayAttr.get(
        [ir.AffineMapAttr.get(ir.AffineMap.get(total, 0, exprs)) for exprs in new_maps])
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    op.attributes["iterator_types"] = ir.ArrayAttr.get(
        list(op.attributes["iterator_types"]) + [parallel] * added)


def fold_reshaped_empties(group: ir.Operation) -> None:
    """`expand_shape(tensor.empty)` -> `tensor.empty` of the expanded type (and collapse).

    A tile loop whose shared output is a reshaped empty tensor bufferizes to a view of a
    kernel-local buffer, which then has to be copied into the kernel's result; an empty
    tensor of the right shape becomes the result buffer itself.
    """
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in RESHAPE_OPS:
            producer = defining_op(op.operands[0])
            if producer is not None and producer.name == "tensor.empty":
                found.append(op.operation)
        return ir.WalkResult.ADVANCE

    group.walk(visit)
    for op in found:
        result_type = ir.RankedTensorType(op.results[0].type)
        if not result_type.has_static_shape:
            continue
        with ir.InsertionPoint(op), op.location:
            empty = tensor.EmptyOp(result_type.shape, result_type.element_type)
        op.results[0].replace_all_uses_with(empty.result)
        op.erase()


def _drop_tags(group: ir.Operation) -> None:
    def visit(op: ir.Operation) -> ir.WalkResult:
        if TILE_TAG in op.attributes:
            del op.attributes[TILE_TAG]
        return ir.WalkResult.ADVANCE

    group.walk(visit)


@register
@dataclass
class TileGroupsPass(Pass):
    """Tile each fusion.group's root with scf.forall and fuse the group's producers into it."""

    ARGUMENT = "fusion-tile"
    threads: int = 0
    tiles_per_thread: int = 4
    min_tile_kb: int = 16
    max_tile_kb: int = 256
    device: str = "cpu"
    fit: bool = False
    # The CPU matmul microkernel's rows (`--fusion-cpu-matmul{mr}`): a matmul's row tile is
    # whole blocks of them; 0: the cost model's CPU_MATMUL_ROWS.
    matmul_rows: int = 0
    # The CPU target builds f32 convolutions as im2col + the matmul microkernel
    # (`--fusion-cpu-conv`): their tiles are then images and output rows, never channels.
    conv_as_gemm: bool = False
    # CPU matmul kernels' tilings: the tuning cache (`fusec --tune` writes it; "off": the
    # cost model's), keyed by `tuning_device` (the CPU built for), and --tune's candidate.
    tuning: str = "off"
    tuning_device: str = "cpu"
    candidate: int = -1

    def run(self, module: ir.Operation) -> None:
        from fusec.runtime import tuning as cache

        threads = self.threads or os.cpu_count() or 1
        device = cost_model.device_named(self.device)
        try:
            entries = cache.load(self.tuning) if self.candidate < 0 else {}
        except ValueError as e:
            raise PassError(str(e)) from None
        tuning = MatmulTuning(entries, self.tuning_device, self.candidate)
        gpu = device.threads_per_block > 1
        # On a GPU, a tile is only worth its loop if code generation builds it: the device's
        # kernel builder is asked (passes/targets.py; the CUDA target's tile emitter); a tile
        # it refuses is undone, the reason recorded.
        accept = tile_for_fallback = whole_refusal = None
        if gpu:
            builder = kernel_builder(self.device)
            accept, tile_for_fallback = builder.tile_refusal, builder.tile_for_fallback
            whole_refusal = builder.whole_refusal

        def tile(group: ir.Operation) -> None:
            tile_group(group, threads, self.tiles_per_thread, self.min_tile_kb * 1024,
                       self.max_tile_kb * 1024, device, self.matmul_rows, self.conv_as_gemm,
                       tuning)

        # Imported here: capacity builds on placement, which runs after tiling.
        from fusec.passes.tiling.capacity import tile_accepted, tile_to_fit

        for whole in groups_in(module):
            if gpu and LIBRARY_PATH_ATTR in whole.attributes:
                continue  # a cuBLASLt call or a view of a buffer: no kernel of ours to tile
            if family_tiled(whole):
                continue  # tiled by its family's own pass (--fusion-cpu-attention)
            parts = []
            # Kernels split at their paddings for the CPU's threads; not for the finest tiles
            # (min-tile-kb=0: the GPU fallback path tiles a group through here, whole).
            split = not gpu and self.min_tile_kb > 0
            for group in split_at_pads(whole) if split else [whole]:
                if self.fit:
                    parts += tile_to_fit(group, device, tile, accept=accept, whole=whole_refusal)
                else:
                    parts.append(tile_accepted(group, tile, accept))
            for part in parts if gpu else []:
                if untiled_on_gpu(part):
                    # Neither emitter's: the fallback path's tiles (one per thread).
                    fallback_tiles(part, tile, accept, tile_for_fallback)
