"""The producer-absorption planner behind --fusion-vertical, --fusion-epilogue and --fusion-plan.

Ops are visited last to first; each op that no group has claimed becomes the *root* (the last
op) of a new candidate group, which then absorbs producers, latest first, while the cost
model agrees. Visiting producers in reverse block order means that when a producer is
considered, every one of its users that will ever join the group already has: so whether
the producer has users outside the group is known exactly, and the decision is final.

What a group may absorb, and why not (each refusal is recorded with its reason code):
- the root's iteration space is what code generation tiles. A *tile dim* is a root loop along
  which every op of the group can be sliced without recomputation: reductions, contractions
  and window ops (pooling) must map it to one of their parallel loops; reshapes that merge
  dimensions keep only the outermost one tileable; a loop read through a window expression
  (a convolution's `oh + kh`) is not tileable. The group records them as `fusion.tile_dims`
  (loops of its last linalg op). Absorbing a producer that leaves no tile dim is refused
  (`no-parallel-tile`).
- a contraction (matmul, batch_matmul, convolution) may keep a parallel loop whole in each
  tile only up to the device's register budget (128 wide on the H200): a row-wise producer
  before it beyond that is refused (`recompute`: it would be recomputed for every column
  tile) and so is a row reduction after it (`reduction-order`: only an online, rescaled
  reduction could fuse it, which changes the summation order). Within the budget both fuse
  (the reduction then sums whole rows, in the original order). When a row reduction cannot
  join a contraction's prologue, the ops that read it are kept out too (`prologue`): the
  row computation stays whole in its own kernel instead of being split.
- one contraction per group (`one-contraction`). Where the cost model says so (the CPU's
  microkernel, whose column tiles each recompute a prologue; the GPU's convolutions, whose
  GEMM epilogue stores the result once), an elementwise op computed from a contraction's
  result only stays out of the next contraction's prologue (`epilogue-first`) and becomes
  the first contraction's epilogue.
- a value read both by a reduction and by another op of the group must stay on chip across
  the reduction: the sum of those rows per tile must fit the device (`over-capacity`), and a
  reduction whose row is broadcast back to its consumer must itself fit (`huge-axis`).
- a cheap producer that tiles would recompute (it is broadcast along tile dims) is refused
  when recomputing costs more than writing it once (`slower`).
- a producer with users outside the group is written out as an extra group result when those
  users come later; when one comes earlier (fusing would not be convex), a cheap producer is
  recomputed in the group (`duplicated`) and an expensive one is refused (`multi-consumer`).
- window ops other than those described, and unknown ops, stay kernels of their own
  (`not-fusible`).
- groups hold at most `max_ops` ops (`size-cap`), which with the bounded fan-in of each
  absorption keeps planning linear in the number of ops.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import mlir.ir as ir
from fusec.passes import attributes, cost_model
from fusec.passes.fusion.analysis import (
    CONTRACTION,
    ELEMENTWISE,
    EXPENSIVE,
    FILL,
    REDUCTION,
    RESHAPE,
    SLICE,
    WINDOW,
    WINDOWED,
    BlockGraph,
    OpFacts,
    analyse_block,
    describe,
    element_bytes,
    tensor_bytes,
    tensor_shape,
)
from fusec.passes.grouping import defining_op, form_group, op_key, walk_ops
from fusec.passes.registry import PassError

# Contractions that code generation sends to a GEMM library on devices that have one.
GEMM_OPS = frozenset({"linalg.matmul", "linalg.batch_matmul"})

# Categories a group may absorb at all (window ops and unknown ops stay kernels of their own).
ABSORBABLE = frozenset({"elementwise", "transpose", "fill", "reshape", "slice", "pad", REDUCTION,
                        CONTRACTION, WINDOW, "concat"})


def _unit_view(op: ir.Operation) -> bool:
    """Whether a reshape only adds or drops dims of extent 1 (the other dims unchanged)."""
    shapes = [ir.ShapedType(op.operands[0].type).shape, ir.ShapedType(op.results[0].type).shape]
    return [d for d in shapes[0] if d != 1] == [d for d in shapes[1] if d != 1]


@dataclass
class Policy:
    """What a planning run may fuse."""

    device: cost_model.Device
    allow_contraction: bool = True
    allow_reduction: bool = True
    max_ops: int = 128
    # Only keep groups that hold a contraction (the epilogue pass).
    require_contraction: bool = False


@dataclass
class Candidate:
    """A group being planned: its members (op keys), and what the tiling analysis knows."""

    root: int
    root_extents: list[int]
    members: list[int] = field(default_factory=list)
    member_set: set[int] = field(default_factory=set)
    duplicated: list[int] = field(default_factory=list)
    dim_map: dict[int, dict[int, int]] = field(default_factory=dict)
    lost: dict[int, set[int]] = field(default_factory=dict)
    tile_dims: set[int] = field(default_factory=set)
    held: list[tuple[int, int]] = field(default_factory=list)  # (producer key, result index)
    refusals: list[str] = field(default_factory=list)
    refused_categories: list[str] = field(default_factory=list)  # of the refused producers
    refused_codes: list[str] = field(default_factory=list)
    # Contractions and the members upstream of them (their prologue).
    prologue: set[int] = field(default_factory=set)
    # Root dims along which a member's loop is covered only in part by the root's
    # iteration: a narrowing slice lies between them (the root reads V's third of a QKV).
    narrowed: dict[int, set[int]] = field(default_factory=dict)

    def add(self, key: int, mapping: dict[int, int], lost: set[int], duplicate: bool,
            narrowed: set[int] | None = None) -> None:
        self.members.append(key)
        self.member_set.add(key)
        self.dim_map[key] = mapping
        self.lost[key] = lost
        self.narrowed[key] = narrowed or set()
        if duplicate:
            self.duplicated.append(key)


Refusal = tuple[str, str] | None  # (reason code, explanation), or None to go on


@dataclass
class Absorption:
    """A producer being considered for a group: how the root's dims reach it, and what the
    checks found (`duplicate`, the tile dims and held rows it would leave)."""

    p: OpFacts
    uses: list[tuple[int, int, int]]
    mapping: dict[int, int]
    lost: set[int]
    partial: set[int]
    in_prologue: bool
    root_position: int
    narrowed: set[int] = field(default_factory=set)
    duplicate: bool = False
    tiles: set[int] = field(default_factory=set)
    held: list[tuple[int, int]] = field(default_factory=list)


def _window_points(f: OpFacts) -> int | None:
    """The points of a convolution's or pooling's window: the product of its second
    operand's trailing two extents (a filter [F, C, kh, kw], a pooling's window [kh, kw]);
    None for other ops (a generic's second operand is no window)."""
    if not f.name.startswith(("linalg.conv_2d", "linalg.pooling_", "linalg.depthwise_conv_2d")):
        return None
    operands = list(f.op.operands)
    shape = tensor_shape(operands[1].type) if len(operands) > 1 else None
    if not shape or len(shape) < 2:
        return None
    return shape[-2] * shape[-1]


def _uses_of(producer: OpFacts, graph: BlockGraph, members: set[int]) -> list[tuple[int, int, int]]:
    """(member key, operand index, result index) for each use of `producer` by a member."""
    found = []
    for ukey in producer.users:
        if ukey not in members:
            continue
        user = graph.facts[ukey]
        for i, operand in enumerate(user.op.operands):
            owner = defining_op(operand)
            if owner is not None and op_key(owner) == producer.key:
                found.append((ukey, i, ir.OpResult(operand).result_number))
    return found


def _map_producer(cand: Candidate, graph: BlockGraph, p: OpFacts,
                  uses: list[tuple[int, int, int]]) -> tuple[dict[int, int], set[int], set[int]]:
    """Root dim -> loop of `p`, through every use of `p` in the group.

    Returns (mapped, lost, partial): `lost` root dims cannot be followed into `p` at all (a
    merged reshape dimension, an opaque operand, conflicting uses); `partial` ones are mapped
    by some uses and broadcast by others.
    """
    n_root = len(cand.root_extents)
    per_use: list[dict[int, int | None]] = []
    lost: set[int] = set()
    for ukey, operand_index, result_index in uses:
        user = graph.facts[ukey]
        u_map, u_lost = cand.dim_map[ukey], cand.lost[ukey]
        in_map = _operand_map(user, operand_index)
        out_map = p.result_maps[result_index] if result_index < len(p.result_maps) else None
        seen: dict[int, int | None] = {}
        for r in range(n_root):
            if r in u_lost:
                lost.add(r)
                continue
            du = u_map.get(r)
            if du is None:
                seen[r] = None
                continue
            if in_map is None or out_map is None or du in user.merged_inner_loops:
                lost.add(r)
                continue
            if du not in in_map:
                if WINDOWED in in_map:
                    lost.add(r)  # the loop may hide in a window expression
                else:
                    seen[r] = None  # the user reads this operand broadcast along the loop
                continue
            t = in_map.index(du)
            dp = out_map[t] if t < len(out_map) else None
            if dp is not None and (dp < 0 or dp in p.merged_inner_loops):
                lost.add(r)
            else:
                seen[r] = dp
        per_use.append(seen)
    mapped: dict[int, int] = {}
    partial: set[int] = set()
    for r in range(n_root):
        if r in lost:
            continue
        values = {use.get(r) for use in per_use}
        loops = {v for v in values if v is not None}
        if len(loops) > 1:
            lost.add(r)
        elif loops:
            mapped[r] = loops.pop()
            if None in values:
                partial.add(r)
    return mapped, lost, partial


def _narrowed(cand: Candidate, graph: BlockGraph,
              uses: list[tuple[int, int, int]]) -> set[int]:
    """Root dims along which the root's iteration covers only part of the producer's
    result: those of its users, and those a user that is a narrowing slice cuts."""
    narrowed: set[int] = set()
    for ukey, operand_index, _ in uses:
        user = graph.facts[ukey]
        narrowed |= cand.narrowed.get(ukey, set())
        if user.category != SLICE or operand_index != 0:
            continue
        source = tensor_shape(user.op.operands[0].type) or []
        result = tensor_shape(user.op.results[0].type) or []
        cut = {d for d, (a, b) in enumerate(zip(source, result)) if a != b}
        narrowed |= {r for r, d in cand.dim_map[ukey].items() if d in cut}
    return narrowed


def _downstream(cand: Candidate, graph: BlockGraph, key: int) -> set[int]:
    """Members that (transitively) use `key`."""
    seen: set[int] = set()
    stack = [u for u in graph.facts[key].users if u in cand.member_set]
    while stack:
        k = stack.pop()
        if k in seen:
            continue
        seen.add(k)
        stack.extend(u for u in graph.facts[k].users if u in cand.member_set and u not in seen)
    return seen


def _row_bytes(cand: Candidate, graph: BlockGraph, key: int, result_index: int,
               tile_dims: set[int], mapping: dict[int, int]) -> int:
    """Bytes of one result of `key` that one tile holds: the whole value divided among the
    tiles of the tile dims it follows."""
    facts = graph.facts[key]
    total = tensor_bytes(facts.op.results[result_index].type)
    out_map = facts.result_maps[result_index] if result_index < len(facts.result_maps) else []
    for r in tile_dims:
        loop = mapping.get(r)
        if loop is not None and loop in out_map:
            total //= max(1, cand.root_extents[r])
    return max(total, 1)


def _result_users(facts: OpFacts, graph: BlockGraph, members: set[int],
                  result_index: int) -> list[int]:
    found = []
    for use in facts.op.results[result_index].uses:
        owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
        k = op_key(owner)
        if k in members and k not in found:
            found.append(k)
    return found


class Planner:
    """Plans the groups of one block (see the module docstring)."""

    def __init__(self, graph: BlockGraph, policy: Policy) -> None:
        self.graph = graph
        self.policy = policy
        self.device = policy.device
        self.assigned: set[int] = set()
        # Users that still read an op's original (not a group's duplicate).
        self.remaining_users: dict[int, set[int]] = {
            k: set(f.users) for k, f in graph.facts.items()}
        self.dead: set[int] = set()
        # Refusals of roots that absorbed nothing: recorded on the op itself.
        self.lone_refusals: list[tuple[int, list[str]]] = []

    # --- the decision for one producer --------------------------------------------------
    def refuse(self, cand: Candidate, p: OpFacts, code: str, detail: str) -> None:
        cand.refusals.append(f"{p.name}@{p.location}: {code}: {detail}")
        cand.refused_categories.append(p.category)
        cand.refused_codes.append(code)

    def consider(self, cand: Candidate, p: OpFacts, root_position: int,
                 strict_prologue: bool = False) -> bool:
        """Absorb `p` into `cand` if the cost model agrees; record why not otherwise."""
        uses = _uses_of(p, self.graph, cand.member_set)
        in_prologue = p.category == CONTRACTION or any(u in cand.prologue for u, _, _ in uses)
        refusal = self._check_kind(cand, p, in_prologue and strict_prologue)
        if refusal is None:
            mapping, lost, partial = _map_producer(cand, self.graph, p, uses)
            step = Absorption(p, uses, mapping, lost, partial, in_prologue, root_position,
                              _narrowed(cand, self.graph, uses))
            for check in (self._check_gemm_prologue, self._check_gemm_epilogue_operand,
                          self._check_epilogue_first, self._check_window_before_gather,
                          self._check_matmul_operand,
                          self._check_outside_users,
                          self._check_tiles,
                          self._check_contractions, self._check_huge_axis,
                          self._check_capacity, self._check_recompute):
                refusal = check(cand, step)
                if refusal is not None:
                    break
        if refusal is not None:
            self.refuse(cand, p, *refusal)
            return False
        cand.add(p.key, step.mapping, step.lost, step.duplicate, step.narrowed)
        cand.tile_dims = step.tiles
        cand.held = step.held
        if in_prologue:
            cand.prologue.add(p.key)
        return True

    # Each check returns None to go on, or the refusal's (code, reason).
    def _check_kind(self, cand: Candidate, p: OpFacts, strict_prologue: bool) -> Refusal:
        if p.category not in ABSORBABLE:
            return "not-fusible", f"{p.category} ops stay kernels of their own"
        if not cost_model.builds_concat_in_kernels(self.device) and "concat" in (
                p.category, self.graph.facts[cand.root].category):
            return ("not-fusible", f"a concat stays a kernel of its own on {self.device.name}: "
                    "its code generator does not tile through it")
        if p.category == CONTRACTION and not self.policy.allow_contraction:
            return "not-fusible", "contractions are fused by --fusion-epilogue"
        if p.category == REDUCTION and not self.policy.allow_reduction:
            return "not-fusible", "reductions are not fused by this pass"
        if attributes.SPLIT_PARTIALS in p.op.attributes:
            return ("split-reduction", "a split reduction's partials stay a kernel of their "
                    "own (`--fusion-split-reductions`): in their combine's kernel every value "
                    "would again be folded by one block per row")
        if p.category in (CONTRACTION, WINDOW) and self._root_is_partials(cand):
            return ("split-reduction", f"a split reduction's partials take no {p.category} "
                    "before them: the partials' reshaped rows would leave it without "
                    "parallel tiles (one thread)")
        if len(cand.members) >= self.policy.max_ops:
            return "size-cap", f"the group already holds {self.policy.max_ops} ops"
        if strict_prologue and p.category != CONTRACTION and not _cheap_prologue(p):
            return ("prologue", "only casts, transposes, reshapes and fills join a contraction "
                    "as its prologue here: the row reduction this op depends on cannot come "
                    "along (`recompute`), and fusing the rest would split the row computation")
        return None

    def _gemm_in(self, cand: Candidate) -> OpFacts | None:
        """The group's matmul if code generation sends it to the device's GEMM library."""
        if not self.device.gemm_library:
            return None
        for k in cand.members:
            f = self.graph.facts[k]
            if f.category == CONTRACTION and f.name in GEMM_OPS:
                return f
        return None

    def _check_epilogue_first(self, cand: Candidate, step: Absorption) -> Refusal:
        """An elementwise op computed from contraction results only belongs to the epilogue
        of the contraction before it, not to the prologue of the one after it, where the
        cost model says so:
        - the CPU's microkernel (`elementwise_after_contraction_is_epilogue`) recomputes a
          prologue once per column tile, an epilogue runs once per element;
        - where convolutions are GEMM kernels (`cost_model.conv_is_gemm`), the BatchNorm,
          ReLU and residual add after a convolution run on its accumulator and are stored
          once, in their own type, where in the next convolution's prologue they would run
          in its im2col gather, after the product went to memory in f32 and came back.
          Other prologues (a pad, an input's normalisation) stay with the gather."""
        p = step.p
        if not (step.in_prologue and p.category == ELEMENTWISE):
            return None
        per_tile = cost_model.elementwise_after_contraction_is_epilogue(self.device)
        if not per_tile and not any(cost_model.conv_is_gemm(self.graph.facts[k].name,
                                                            self.device)
                                    for k in cand.members):
            return None
        source = self._contraction_behind(p)
        if source is None:
            return None
        if per_tile:
            return ("epilogue-first", f"it is computed from {source.name}@{source.location}'s "
                    "result: in that contraction's epilogue it runs once per element, in this "
                    "one's prologue once per column tile")
        return ("epilogue-first", f"it is computed from {source.name}@{source.location}'s "
                f"result: in that contraction's GEMM epilogue on {self.device.name} it is "
                "stored once, where in this convolution's prologue the product would go to "
                "memory first")

    def _check_window_before_gather(self, cand: Candidate, step: Absorption) -> Refusal:
        """A window op (a pooling) in the prologue of a convolution that runs as im2col and a
        GEMM (`cost_model.conv_is_gemm`) would run again for every read of the gather: it
        stays a kernel of its own where the cost model says so
        (`cost_model.window_joins_conv_gather`)."""
        p = step.p
        if not (step.in_prologue and p.category == WINDOW):
            return None
        window = _window_points(p)
        for k in cand.members:
            conv = self.graph.facts[k]
            if not cost_model.conv_is_gemm(conv.name, self.device):
                continue
            points = _window_points(conv)
            if window and points and not cost_model.window_joins_conv_gather(window, points):
                return ("recompute", f"{conv.name}@{conv.location} becomes an im2col gather "
                        f"on {self.device.name} that reads each value {points} times: this "
                        f"{window}-point window op would run {points} times per value")
        return None

    def _contraction_behind(self, p: OpFacts) -> OpFacts | None:
        """The contraction `p` is an elementwise function of (through elementwise ops and
        views that add or drop unit dims, with graph inputs and constants beside it), or
        None: None as well when a reduction or any other op is among its producers (a
        softmax's division stays where it is)."""
        found, stack, seen = None, [p], {p.key}
        while stack:
            for key in stack.pop().producers:
                if key in seen:
                    continue
                seen.add(key)
                q = self.graph.facts[key]
                if q.category == CONTRACTION:
                    found = found or q
                elif q.category == ELEMENTWISE or q.category == RESHAPE and _unit_view(q.op):
                    # (a view that adds or drops unit dims between them: a Linear's [T, N]
                    # result seen as [1, T, N]. A view that splits a dim of the contraction
                    # (Swin's windows x heads) would leave the group's root tiled by loops
                    # the contraction does not have: its batch dim untiled, one thread.)
                    stack.append(q)
                else:
                    return None
        return found

    def _check_gemm_prologue(self, cand: Candidate, step: Absorption) -> Refusal:
        """Where matmuls are library calls, a prologue op the library cannot read through is
        a kernel of its own anyway: leave it to a group that gains from it (a bias add goes
        to the epilogue of the matmul that produces it, which the library fuses)."""
        p = step.p
        gemm = self._gemm_in(cand) if step.in_prologue and p.category != CONTRACTION else None
        if gemm is None:
            return None
        if not cost_model.gemm_prologue_is_kernel(gemm_absorbs(p), self.device):
            return None
        source = _contraction_source(p, self.graph)
        after = (f"; it is the epilogue of {source.name}@{source.location}, whose GEMM kernel "
                 "fuses it" if source is not None else "")
        return ("gemm-prologue", f"{gemm.name}@{gemm.location} is a GEMM kernel of its own on "
                f"{self.device.name} (cuBLASLt's or fusec's tensor-core GEMM), which reads its "
                f"operands from memory: this {p.category} before it would be a kernel of its "
                f"own{after}")

    def _check_gemm_epilogue_operand(self, cand: Candidate, step: Absorption) -> Refusal:
        """Where matmuls are GEMM kernels (the library's or the device's own), their epilogue
        runs on the accumulator's tiles and reads its other operands from memory (a bias row,
        a residual, a folded normalisation's row statistics): a reduction computing one is a
        kernel of its own anyway, and in the matmul's group it would take the epilogue out of
        the GEMM (the group split before it)."""
        p = step.p
        if step.in_prologue or p.category not in (REDUCTION, WINDOW, CONTRACTION):
            return None
        gemm = self._gemm_in(cand)  # (None unless the device's matmuls are GEMM kernels)
        if gemm is None:
            return None
        return ("gemm-epilogue-operand", f"{gemm.name}@{gemm.location} runs as a GEMM kernel "
                f"of {self.device.name} whose epilogue reads its operands from memory: this "
                f"{p.category} computing one would be a kernel of its own")

    def _check_matmul_operand(self, cand: Candidate, step: Absorption) -> Refusal:
        """A transpose whose result a reshape of the prologue merges is no strided view of
        memory: where the matmul runs on a microkernel that reads views, it stays out."""
        p = step.p
        if not step.in_prologue or p.category != "transpose":
            return None
        merging = [self.graph.facts[u] for u, _, _ in step.uses
                   if self.graph.facts[u].category == RESHAPE
                   and not _reshape_keeps_view(self.graph.facts[u].op, p.op)]
        if not merging or not cost_model.transposed_operand_is_kernel(False, self.device):
            return None
        r = merging[0]
        return ("matmul-operand", f"{r.name}@{r.location} merges dims this transpose "
                f"separates: no strided view of memory, so the contraction after it would "
                f"lose {self.device.name}'s matmul microkernel; it is copied once instead "
                f"({p.bytes_written} bytes)")

    def _check_outside_users(self, cand: Candidate, step: Absorption) -> Refusal:
        """Users outside the group: write the value out, recompute it, or refuse."""
        p = step.p
        outside = [u for u in self.remaining_users[p.key] if u not in cand.member_set]
        if not outside:
            return None
        positions = self.graph.positions
        earlier = [u for u in outside if positions.get(u, 1 << 60) < step.root_position]
        # Written out whole, it must be computed whole by the tiles: a tile dim that reaches
        # it through a narrowing slice would leave the rest of it to be computed beside the
        # tile loop, by one thread (a CPU kernel with code outside its loop has one tile).
        # A unit dim of the root has one tile: nothing to follow.
        follows_tiles = all(r in step.mapping and r not in step.partial
                            and r not in step.narrowed
                            for r in cand.tile_dims - step.lost if cand.root_extents[r] > 1)
        if p.category == RESHAPE and self._view_of_input(p):
            step.duplicate = True  # exported, a view of an input would be a copy for nothing
            return None
        # A split reduction's partials write their partials only: their rows are cut from
        # the producer's (a reshape between), and the CUDA kernels build no second output
        # of another shape beside them (GroupNorm after a residual add failed to compile).
        if not earlier and follows_tiles and not self._root_is_partials(cand):
            return None  # exported: the group writes it once for its later users
        if cost_model.should_duplicate(p.bytes_read, p.bytes_written, p.is_cheap):
            step.duplicate = True
            return None
        users = ", ".join(sorted({self.graph.ops[u].name for u in outside}))
        return ("multi-consumer",
                f"also used by {len(outside)} op(s) outside the group ({users}); recomputing "
                f"this {p.category} would cost {p.flops} flops and {p.bytes_read} bytes, so it "
                "is written once")

    def _root_is_partials(self, cand: Candidate) -> bool:
        """`cand`'s root is a split reduction's partials (`--fusion-split-reductions`)."""
        return attributes.SPLIT_PARTIALS in self.graph.facts[cand.root].op.attributes

    def _view_of_input(self, p: OpFacts) -> bool:
        """`p` (a reshape) views a value no op of the block computes (a function input)."""
        source = defining_op(p.op.operands[0])
        return source is None or op_key(source) not in self.graph.facts

    def _check_tiles(self, cand: Candidate, step: Absorption) -> Refusal:
        """The tile dims left once `p` is in: expensive ops must follow every one."""
        p = step.p
        tiles = cand.tile_dims - step.lost
        if p.category in EXPENSIVE:
            tiles = {r for r in tiles if r in step.mapping and r not in step.partial
                     and p.loop_parallel[step.mapping[r]]}
        step.tiles = tiles
        if tiles:
            return None
        return ("no-parallel-tile", f"no loop of the root could be tiled in parallel: this "
                f"{p.category} would be recomputed by every tile")

    def _check_contractions(self, cand: Candidate, step: Absorption) -> Refusal:
        """One contraction per group; none left untiled along a dimension wider than the
        register budget (a tile holds whole rows for a reduction after it, or for a row-wise
        producer before it): past it, the row would need an online reduction, or the
        producer would be recomputed for every tile."""
        p, graph, dev = step.p, self.graph, self.device
        contractions = [k for k in cand.members if graph.facts[k].category == CONTRACTION]
        reduction_after = False
        if p.category == CONTRACTION:
            if contractions:
                return "one-contraction", "the group already holds a contraction"
            after = _downstream(cand, graph, p.key)
            reduction_after = any(graph.facts[k].category in (REDUCTION, WINDOW) for k in after)
            contractions = [p.key]
        for ck in contractions:
            c = graph.facts[ck]
            c_map = step.mapping if ck == p.key else cand.dim_map[ck]
            tiled_loops = {c_map[r] for r in step.tiles if r in c_map}
            for loop, parallel in enumerate(c.loop_parallel):
                extent = c.loop_ranges[loop]
                if not parallel or loop in tiled_loops or cost_model.contraction_untiled_ok(
                        extent, dev):
                    continue
                budget = f"beyond {dev.max_untiled_contraction_extent} on {dev.name}"
                if reduction_after:
                    return ("reduction-order",
                            f"{cost_model.contraction_then_reduction_flag()}: the reduction "
                            f"after it needs loop {loop} ({extent} wide) whole, {budget}: only "
                            "an online (rescaled) reduction over column tiles could fuse it, "
                            "which changes the summation order; left to attention fusion")
                return ("recompute", f"fusing it leaves loop {loop} ({extent} wide) of "
                        f"{c.name}@{c.location} untiled, {budget}: the producer would be "
                        "recomputed for every tile")
        return None

    def _check_huge_axis(self, cand: Candidate, step: Absorption) -> Refusal:
        """A reduction broadcast back over its axis keeps its whole row per tile."""
        p, dev = step.p, self.device
        if p.category != REDUCTION:
            return None
        row = 1
        for loop, parallel in enumerate(p.loop_parallel):
            if not parallel:
                row *= p.loop_ranges[loop]
        ebytes = _input_element_bytes(p)
        broadcast_back = any(self._broadcasts(self.graph.facts[u], i, p) for u, i, _ in step.uses)
        if not broadcast_back or cost_model.reduction_row_fits(row, ebytes, dev):
            return None
        return ("huge-axis", f"reduction over {row} elements feeds a broadcast consumer: its "
                f"{row * ebytes} byte row cannot stay on chip ({dev.on_chip_bytes} bytes per "
                f"tile on {dev.name})")

    def _check_capacity(self, cand: Candidate, step: Absorption) -> Refusal:
        """Rows read both by a reduction and by another op must stay on chip across it."""
        p, graph, dev = step.p, self.graph, self.device
        held = list(cand.held)
        if not step.duplicate:
            for ri in range(len(p.op.results)):
                users = _result_users(p, graph, cand.member_set, ri)
                if len(users) >= 2 and any(graph.facts[u].category in EXPENSIVE for u in users):
                    held.append((p.key, ri))
        step.held = held
        working = sum(_row_bytes(cand, graph, k, ri, step.tiles,
                                 step.mapping if k == p.key else cand.dim_map[k])
                      for k, ri in held)
        if cost_model.fits_on_chip(working, dev):
            return None
        return ("over-capacity", f"the group would keep {working} bytes per tile on chip "
                f"across its reductions, over the {dev.on_chip_bytes} of {dev.name}")

    def _check_recompute(self, cand: Candidate, step: Absorption) -> Refusal:
        """A cheap producer broadcast along tile dims is recomputed by each tile: worth it?"""
        p = step.p
        if not (p.is_cheap and p.flops):
            return None
        if step.in_prologue and self._gemm_in(cand) is not None and \
                cost_model.gemm_operand_view_is_free(gemm_absorbs(p), self.device):
            return None  # the GEMM library reads the operand through it: nothing recomputed
        broadcast = 1
        for r in step.tiles:
            if r not in step.mapping:
                broadcast *= cand.root_extents[r]
        extra, saved = cost_model.recompute_cost_s(p.flops, p.bytes_written, broadcast,
                                                   self.device)
        if extra <= saved:
            return None
        return ("slower", f"recomputing it in each of the {broadcast}-way broadcast tiles "
                f"costs {extra:.2e} s, more than the {saved:.2e} s fusing saves")

    @staticmethod
    def _broadcasts(user: OpFacts, operand_index: int, p: OpFacts) -> bool:
        """Whether `user` reads `p`'s result along fewer of its loops than it has (a
        broadcast of the reduced value back over the reduced axis)."""
        in_map = _operand_map(user, operand_index)
        if in_map is None:
            return True
        covered = {d for d in in_map if d is not None}
        return any(extent > 1 and loop not in covered
                   for loop, extent in enumerate(user.loop_ranges))

    # --- one group --------------------------------------------------------------------
    def grow(self, root: OpFacts, strict_prologue: bool = False) -> Candidate:
        extents = list(root.loop_ranges)
        cand = Candidate(root=root.key, root_extents=extents)
        cand.add(root.key, {r: r for r in range(len(extents))}, set(root.merged_inner_loops), False)
        if root.category == CONTRACTION:
            cand.prologue.add(root.key)
        cand.tile_dims = {r for r, par in enumerate(root.loop_parallel)
                          if par and r not in root.merged_inner_loops}
        heap: list[tuple[int, int]] = []
        queued: set[int] = set()

        def push_producers(f: OpFacts) -> None:
            for pk in f.producers:
                if pk not in queued and pk not in self.assigned and pk not in cand.member_set:
                    queued.add(pk)
                    heapq.heappush(heap, (-self.graph.facts[pk].position, pk))

        push_producers(root)
        while heap:
            _, pk = heapq.heappop(heap)
            p = self.graph.facts[pk]
            if self.consider(cand, p, root.position, strict_prologue):
                if pk not in cand.duplicated:
                    push_producers(p)
        return cand

    def plan(self) -> list[Candidate]:
        groups: list[Candidate] = []
        for key in reversed(self.graph.order):
            if key in self.assigned:
                continue
            f = self.graph.facts[key]
            if not self.remaining_users[key] and f.users:
                self.dead.add(key)  # every user reads a duplicate
                continue
            if f.category not in ABSORBABLE:
                continue
            if f.category == CONTRACTION and not self.policy.allow_contraction:
                continue
            cand = self.grow(f)
            if "recompute" in cand.refused_codes and cand.prologue:
                # A row reduction could not join the contraction: keep its consumers out of
                # the prologue too, so that the row computation stays whole in its own group.
                first = cand
                cand = self.grow(f, strict_prologue=True)
                for text, category, code in zip(first.refusals, first.refused_categories,
                                                first.refused_codes):
                    if code == "recompute":
                        cand.refusals.insert(0, text)
                        cand.refused_categories.insert(0, category)
                        cand.refused_codes.insert(0, code)
            if len(cand.members) < 2:
                if cand.refusals:
                    self.lone_refusals.append((key, cand.refusals))
                continue
            if self.policy.require_contraction and not any(
                    self.graph.facts[k].category == CONTRACTION for k in cand.members):
                # Give back the ops so that later roots may take them; keep only the
                # refusals that concern contractions (this pass's business) on the root.
                kept = [r for r, c in zip(cand.refusals, cand.refused_categories)
                        if c == CONTRACTION]
                if kept:
                    self.lone_refusals.append((key, kept))
                continue
            for k in cand.members:
                if k in cand.duplicated:
                    self.remaining_users[k] -= cand.member_set
                    # The group's copy reads k's producers from outside the group: they
                    # keep a user there (the group, known by its root), later in the block.
                    for pk in self.graph.facts[k].producers:
                        if pk not in cand.member_set:
                            self.remaining_users[pk].add(cand.root)
                else:
                    self.assigned.add(k)
            groups.append(cand)
        return groups


def _permutation(op: ir.Operation) -> list[int] | None:
    """Result dim i of a transpose is source dim perm[i] (None: not a known transpose)."""
    if op.name == "linalg.transpose":
        return list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
    if op.name == "linalg.generic" and len(op.operands) == 2:
        maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
        ins, out = maps
        if not (ins.is_permutation and out.is_permutation):
            return None
        loop_of_in = [ir.AffineDimExpr(e).position for e in ins.results]
        loop_of_out = [ir.AffineDimExpr(e).position for e in out.results]
        return [loop_of_in.index(loop) for loop in loop_of_out]
    return None


def _reshape_keeps_view(reshape: ir.Operation, transpose: ir.Operation) -> bool:
    """Whether `reshape` of `transpose`'s result is still a strided view of the transpose's
    source: every merged group of non-unit dims is consecutive, in order, in the source."""
    if reshape.name == "tensor.expand_shape":
        return True  # splitting a dim of a strided view is a view
    perm = _permutation(transpose)
    shape = tensor_shape(transpose.results[0].type)
    if perm is None or shape is None or "reassociation" not in reshape.attributes:
        return False
    for group in ir.ArrayAttr(reshape.attributes["reassociation"]):
        dims = [ir.IntegerAttr(d).value for d in ir.ArrayAttr(group)]
        source = [perm[d] for d in dims if shape[d] != 1]
        if any(b != a + 1 for a, b in zip(source, source[1:])):
            return False
    return True


def gemm_absorbs(p: OpFacts) -> bool:
    """Whether a GEMM library reads a matmul operand through `p` (what code generation's
    `gemm_operand` walks back over): a fill (the init), a reshape, a transpose of the last
    two dims, or a cast to f32; each with its result used once."""
    results = list(p.op.results)
    if len(results) != 1 or len(list(results[0].uses)) != 1:
        return p.category == FILL
    if p.category in (FILL, RESHAPE):
        return True
    if p.name == "linalg.transpose":
        perm = list(ir.DenseI64ArrayAttr(p.op.attributes["permutation"]))
        n = len(perm)
        return n >= 2 and perm == list(range(n - 2)) + [n - 1, n - 2]
    return p.category == "elementwise" and _is_cast_to_f32(p)


def _is_cast_to_f32(p: OpFacts) -> bool:
    """A linalg.generic of one tensor input whose payload only extends a float to f32."""
    if p.name != "linalg.generic" or _n_tensor_inputs(p) != 1:
        return False
    body = [op.operation for op in p.op.regions[0].blocks[0].operations]
    return (len(body) == 2 and body[0].name == "arith.extf"
            and str(body[0].results[0].type) == "f32")


def _contraction_source(p: OpFacts, graph: BlockGraph) -> OpFacts | None:
    """The contraction whose result `p` reads, directly or through reshapes, if any."""
    stack = list(p.producers)
    seen: set[int] = set()
    while stack:
        k = stack.pop()
        if k in seen:
            continue
        seen.add(k)
        f = graph.facts[k]
        if f.category == CONTRACTION:
            return f
        if f.category == RESHAPE:
            stack.extend(f.producers)
    return None


def _cheap_prologue(p: OpFacts) -> bool:
    """Fills, reshapes, transposes, slices, and elementwise ops of one tensor input (casts,
    scaling): what a contraction may recompute for every tile at no real cost."""
    if p.category in (FILL, RESHAPE, "transpose", "slice", "pad"):
        return True
    n_in = _n_tensor_inputs(p)
    return p.category == "elementwise" and n_in <= 1


def _n_tensor_inputs(p: OpFacts) -> int:
    n_in = len(p.op.operands)
    if p.name.startswith("linalg."):
        n_in -= len(p.op.results)
    return sum(1 for v in list(p.op.operands)[:n_in] if tensor_shape(v.type) is not None)


def _operand_map(user: OpFacts, operand_index: int) -> list | None:
    if operand_index < len(user.operand_maps):
        return user.operand_maps[operand_index]
    return None


def _input_element_bytes(p: OpFacts) -> int:
    for operand in p.op.operands:
        if tensor_shape(operand.type) is not None:
            return element_bytes(ir.RankedTensorType(operand.type).element_type)
    return 4


# --- applying a plan ---------------------------------------------------------------------

def group_kind(cand: Candidate, graph: BlockGraph) -> str:
    """epilogue: a contraction with ops after it; reduction: holds a multi-result reduction
    made of siblings (`--fusion-reduction`); vertical: two or more ops that compute; single:
    one op with its fills and reshapes."""
    real = [k for k in cand.members if graph.facts[k].category not in (FILL, RESHAPE)]
    contraction = [k for k in real if graph.facts[k].category == CONTRACTION]
    if contraction:
        after = _downstream(cand, graph, contraction[0])
        if any(graph.facts[k].category not in (FILL, RESHAPE) for k in after):
            return "epilogue"
    if any(attributes.SIBLINGS in graph.ops[k].attributes for k in real):
        return "reduction"
    return "vertical" if len(real) >= 2 else "single"


def _anchor(cand: Candidate, graph: BlockGraph) -> int:
    """The last member that is not a reshape: the op code generation tiles."""
    for key in sorted(cand.members, key=lambda k: -graph.facts[k].position):
        if graph.facts[key].category != RESHAPE:
            return key
    return cand.root


def _nested_keys(op: ir.Operation) -> set[int]:
    return {op_key(inner) for inner in walk_ops(op)}


def _clone_duplicates(cand: Candidate, graph: BlockGraph) -> list[ir.Operation]:
    """Clone each duplicated producer for the group's members; returns the member ops."""
    members = [graph.ops[k] for k in cand.members if k not in cand.duplicated]
    inside: set[int] = set()
    for m in members:
        inside |= _nested_keys(m)
    for key in sorted(cand.duplicated, key=lambda k: graph.facts[k].position):
        original = graph.ops[key]
        first_user = min((graph.ops[u] for u in graph.facts[key].users if u in cand.member_set),
                         key=lambda o: graph.positions[op_key(o)])
        clone = original.clone(ip=ir.InsertionPoint(first_user))
        for old, new in zip(original.results, clone.results):
            for use in list(old.uses):
                owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
                if op_key(owner) in inside:
                    owner.operands[use.operand_number] = new
        members.append(clone)
        inside |= _nested_keys(clone)
    return members


def _i64(value: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))


def _strings(values: list[str]) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.StringAttr.get(v) for v in values])


def group_attributes(group: ir.Operation, device: cost_model.Device) -> dict[str, ir.Attribute]:
    """The cost model's numbers for a formed group, computed from its IR alone."""
    body = group.regions[0].blocks[0]
    kernels = []
    flops = 0
    real = 0
    for i, op in enumerate(body.operations):
        op = op.operation
        if op.name in ("fusion.yield", "arith.constant", "tensor.empty"):
            continue
        f = describe(op, i)
        kernels.append((f.bytes_read + f.bytes_written, f.flops, f.category == CONTRACTION))
        flops += f.flops
        if f.category not in (FILL, RESHAPE):
            real += 1
    fused_bytes = group_bytes(group)
    est = cost_model.estimate(kernels, fused_bytes, flops, device)
    return {
        attributes.BYTES_UNFUSED: _i64(est.bytes_unfused),
        attributes.BYTES_FUSED: _i64(est.bytes_fused),
        attributes.LAUNCHES_SAVED: _i64(est.launches_saved),
        attributes.FLOPS: _i64(flops),
        attributes.TIME_UNFUSED_NS: _i64(round(est.time_unfused_s * 1e9)),
        attributes.TIME_FUSED_NS: _i64(round(est.time_fused_s * 1e9)),
    }


def record_group(group: ir.Operation, attrs: dict[str, ir.Attribute],
                 device: cost_model.Device, reason: str, refused: list[str]) -> None:
    """Set on a formed group its cost-model `attrs` (`group_attributes`, plus the caller's),
    the device it was planned for, why it was formed, and the fusions refused around it."""
    attrs[attributes.DEVICE] = ir.StringAttr.get(device.name)
    attrs[attributes.REASON] = ir.StringAttr.get(reason)
    if refused:
        attrs[attributes.REFUSED] = _strings(refused)
    for name, attr in attrs.items():
        group.attributes[name] = attr


def group_bytes(group: ir.Operation) -> int:
    """HBM bytes of one fused kernel: its tensor inputs and the tensor constants it holds
    read once, its results written once."""
    total = sum(tensor_bytes(v.type) for v in group.operands)
    total += sum(tensor_bytes(r.type) for r in group.results)
    for op in group.regions[0].blocks[0].operations:
        if op.operation.name == "arith.constant" and len(op.operation.results):
            total += tensor_bytes(op.operation.results[0].type)
    return total


def apply_plan(cands: list[Candidate], graph: BlockGraph, device: cost_model.Device,
               planner: Planner) -> list[ir.Operation]:
    """Form the planned groups, then erase originals that only duplicates read."""
    groups = []
    for cand in cands:
        kind = group_kind(cand, graph)
        anchor = _anchor(cand, graph)
        anchor_map = cand.dim_map[anchor]
        tile_loops = sorted({anchor_map[r] for r in cand.tile_dims if r in anchor_map})
        working = sum(_row_bytes(cand, graph, k, ri, cand.tile_dims, cand.dim_map[k])
                      for k, ri in cand.held)
        tiles = 1
        for r in cand.tile_dims:
            tiles *= cand.root_extents[r]
        members = _clone_duplicates(cand, graph)
        try:
            group = form_group(members, kind)
        except PassError as exc:
            where = graph.facts[cand.root].location
            cand.refusals.append(f"group@{where}: not-convex: {exc.message}")
            continue
        attrs = group_attributes(group, device)
        attrs[attributes.TILE_DIMS] = ir.ArrayAttr.get([_i64(d) for d in tile_loops])
        attrs[attributes.PARALLEL_TILES] = _i64(tiles)
        attrs[attributes.WORKING_SET] = _i64(working)
        saved = attrs[attributes.BYTES_UNFUSED].value - attrs[attributes.BYTES_FUSED].value
        if cand.duplicated:
            attrs[attributes.DUPLICATED] = _i64(len(cand.duplicated))
        record_group(group, attrs, device,
                     f"{len(members)} ops in one kernel: saves "
                     f"{attrs['fusion.launches_saved'].value} launches and {saved} bytes of "
                     f"memory traffic", cand.refusals)
        groups.append(group)
    for key, refusals in planner.lone_refusals:
        graph.ops[key].attributes[attributes.REFUSED] = _strings(refusals)
    for key in sorted(planner.dead | {k for c in cands for k in c.duplicated},
                      key=lambda k: -graph.facts[k].position):
        op = graph.ops[key]
        if all(not list(r.uses) for r in op.results):
            op.erase()
    return groups


def fuse_block(block: ir.Block, policy: Policy) -> list[ir.Operation]:
    """Plan and form the groups of one function body; returns the new groups."""
    graph = analyse_block(block)
    planner = Planner(graph, policy)
    return apply_plan(planner.plan(), graph, policy.device, planner)
