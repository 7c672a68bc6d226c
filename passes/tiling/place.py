"""--fusion-place: decide where every value of a tiled group lives (`#fusion.mem<...>`).

Runs after `--fusion-tile`. Every tensor value that a group's tile computes (a linalg op or
`tensor.pad`) and every slice of a kernel input that the tile reads gets `fusion.mem` on its
defining op:

- `global`: a group output (it flows into the tile loop's `parallel_insert_slice` or the
  group's `fusion.yield`), a value computed outside the tile loop (a producer that was not
  fused: materialised whole), and a slice of a kernel input that every element of the tile
  reads once (streamed from global memory, never staged);
- `register`: a per-element value: exactly one op of the tile reads it, each element once,
  at the point that produces it (an elementwise chain, the operand of a reduction, an
  accumulator init), so it never needs to be stored;
- kept on chip: a tile-sized value that several ops read, or one op reads repeatedly
  (broadcast: a row kept between a reduction and its consumers, a reduction's result
  broadcast over the row, the tile of a matmul operand). On a GPU description: `register`
  when every reader takes each element once at the point that produced it (the row kept
  between softmax's passes: each thread keeps and reads back its own elements, as the
  tile emitter builds it), else `shared` (its threads exchange it: a reduction's result
  combined across the block and read by all, a matmul operand tile); on the CPU a tile is
  one core's task and the value stays in its registers and L1, written `register`.

On the CPU a matmul's B operand tile (`packed_operand`: read along the output's columns,
not its rows) is `global`, streamed: the microkernel (`--fusion-cpu-matmul`) copies it into
its packed panel one depth block by column block at a time, each element once per tile,
and keeps the panel (at most 256 KB), never the tile. Counted as kept, a K x N operand of
4 MB made the capacity fit cut a 4096 x 1024 x 1024 matmul into tiles of 8 rows, each
re-packing 2 MB of B for 8 rows (78 GFLOP/s; 120 in the 256-row tiles it gets now).

The group gets a summary, `fusion.placement = {global = B, on_chip = B, register = N,
shared = B}`: bytes written to global memory by the whole kernel, bytes one tile keeps on
chip (the values kept), the count of register values, and shared-memory bytes per block (no
liveness: an upper bound). The attributes are discardable; later stages ignore them.

Option: `device` (cpu | h200), whose description decides what "kept on chip" means.

Before (a tile of softmax's tail):
    %s = linalg.generic {... ["parallel", "reduction"]} ins(%rows) outs(%init) -> tensor<4xf32>
    %d = linalg.generic {... ["parallel", "parallel"]} ins(%rows, %s) outs(%o) -> tensor<4x256xf32>
    tensor.parallel_insert_slice %d into ...
After (device=h200):
    %s = linalg.generic {..., fusion.mem = #fusion.mem<shared>} ...   // broadcast over each row
    %d = linalg.generic {..., fusion.mem = #fusion.mem<global>} ...   // the kernel's output
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes import attributes, cost_model
from fusec.passes.fusion.analysis import tensor_bytes
from fusec.passes.cpu.cpu_matmul import is_multiply_accumulate
from fusec.passes.grouping import family_tiled, iterator_kinds, loop_ranges
from fusec.passes.inline_groups import groups_in
from fusec.passes.registry import Pass, register
from mlir import ir

MEM_ATTR = attributes.MEM
PLACEMENT_ATTR = attributes.PLACEMENT
REGISTER, SHARED, GLOBAL = "register", "shared", "global"
# Ops through which a value reaches a group output unchanged (views).
VIEW_OPS = frozenset({"tensor.expand_shape", "tensor.collapse_shape", "tensor.cast",
                      "tensor.insert_slice"})
OUTPUT_USERS = frozenset({"tensor.parallel_insert_slice", "fusion.yield"})
# Named linalg ops (without indexing maps) that read some operand element many times.
REUSING_NAMED_OPS = ("matmul", "matvec", "vecmat", "dot", "conv", "pooling", "broadcast",
                     "contract")


def kept_level(device: cost_model.Device) -> str:
    """Where a value that the threads of a tile share lives on `device`."""
    return SHARED if device.max_registers_per_thread > 0 else REGISTER


def is_placed_op(op: ir.Operation) -> bool:
    """Ops whose tensor result is a value the tile computes (and so gets a placement)."""
    name = op.name
    if name in ("linalg.yield", "linalg.index"):
        return False
    return (name.startswith("linalg.") or name == "tensor.pad") and len(op.results) > 0


def _users(value: ir.Value) -> list[tuple[ir.Operation, int]]:
    return [(use.owner, use.operand_number) for use in value.uses]


def reaches_output(value: ir.Value) -> bool:
    """Whether `value` is (a view of) what the group writes out."""
    for user, _ in _users(value):
        user = user.operation if hasattr(user, "operation") else user
        if user.name in OUTPUT_USERS:
            return True
        if user.name in VIEW_OPS and reaches_output(user.results[0]):
            return True
    return False


def read_once(user: ir.Operation, operand_number: int) -> bool:
    """Whether `user` reads each element of its operand once (no broadcast, no reuse).

    An init (outs) operand is the accumulator, updated in place: read once. An input is read
    once when its indexing map is a projected permutation and every loop of `user` that the
    map leaves out has extent 1. Named ops without indexing maps read each element once
    (pad, copy, elementwise, reduce) unless they are contractions, convolutions, poolings or
    broadcasts.
    """
    if "indexing_maps" not in user.attributes:
        if any(word in user.name for word in REUSING_NAMED_OPS):
            return False
        return user.name.startswith("linalg.") or user.name == "tensor.pad"
    n_inputs = len(user.operands) - len(user.results)
    if operand_number >= n_inputs:
        return True
    amap = ir.AffineMapAttr(user.attributes["indexing_maps"][operand_number]).value
    if not amap.is_projected_permutation:
        return False
    ranges = loop_ranges(user) or []
    used = {ir.AffineDimExpr(e).position for e in amap.results if isinstance(e, ir.AffineDimExpr)}
    return all(extent == 1 for d, extent in enumerate(ranges) if d not in used)


def _is_tile_loop(op: ir.Operation) -> bool:
    return op.name == "scf.forall"


# What the analysis says of a value, before the device turns it into a memory level.
OUTPUT, PER_ELEMENT, KEPT = "output", "per-element", "kept"


def role_of(value: ir.Value, in_tile: bool) -> str:
    """Whether a value the group computes is an output, per-element or kept on chip."""
    if reaches_output(value):
        return OUTPUT
    users = _users(value)
    if not in_tile and feeds_tile_loop(value):
        return OUTPUT  # computed whole outside the tile loop: materialised in global memory
    user_keys = {_key(u) for u, _ in users}
    if len(user_keys) == 1 and all(read_once(_op(u), n) for u, n in users):
        return PER_ELEMENT
    return KEPT


def read_in_place(value: ir.Value) -> bool:
    """Whether every op that reads `value` reads each of its elements once, at the point of
    the tile that produced it (several readers, no broadcast): on a GPU the thread that
    computed an element is then the only one that reads it."""
    return all(read_once(_op(u), n) for u, n in _users(value))


def feeds_tile_loop(value: ir.Value) -> bool:
    """Whether `value` (or a view of it) is read inside a tile loop."""
    for user, _ in _users(value):
        op = _op(user)
        if op.name in VIEW_OPS and feeds_tile_loop(op.results[0]):
            return True
        while op is not None:
            if _is_tile_loop(op):
                return True
            parent = op.parent
            op = parent.operation if parent is not None and hasattr(parent, "operation") else parent
            if op is not None and op.name == "fusion.group":
                break
    return False


def packed_operand(user: ir.Operation, operand_number: int) -> bool:
    """Whether operand `operand_number` of `user` is a matmul's B operand as the CPU matmul
    microkernel reads it: `user` a multiply-accumulate generic of one reduction dim, the
    operand an input indexed by the reduction dim and, last, the output's last (column) dim,
    and not by the output's row dim (the dim before it)."""
    if user.name != "linalg.generic" or "indexing_maps" not in user.attributes:
        return False
    n_inputs = len(user.operands) - len(user.results)
    if n_inputs != 2 or operand_number >= n_inputs:
        return False
    reductions = [d for d, k in enumerate(iterator_kinds(user)) if k == "reduction"]
    if len(reductions) != 1 or not is_multiply_accumulate(user):
        return False
    maps = [ir.AffineMapAttr(m).value for m in user.attributes["indexing_maps"]]
    if not all(m.is_projected_permutation for m in maps):
        return False
    dims = [[ir.AffineDimExpr(e).position for e in m.results] for m in maps]
    out = dims[-1]
    if len(out) < 2:
        return False
    row, col = out[-2], out[-1]
    mine = dims[operand_number]
    return bool(mine) and mine[-1] == col and reductions[0] in mine and row not in mine


def streamed_through_pack(op: ir.Operation) -> bool:
    """Whether the slice `op` is read only as a matmul's packed B operand (`packed_operand`)."""
    users = [(_op(u), n) for u, n in _users(op.results[0])]
    return bool(users) and all(packed_operand(u, n) for u, n in users)


def input_slice_role(op: ir.Operation) -> str | None:
    """A slice, read inside the tile, of a kernel input or of a value computed outside the
    tile loop: kept (staged on chip) when an op reuses its elements (a matmul operand tile),
    else an output-like global read streamed from memory; None for other slices (views of
    the tile's own storage)."""
    if not _from_outside_tile(op.operands[0]):
        return None
    users = [(_op(u), n) for u, n in _users(op.results[0])]
    if not users:
        return None
    return OUTPUT if all(read_once(u, n) for u, n in users) else KEPT


def _from_outside_tile(source: ir.Value) -> bool:
    if isinstance(source.owner, ir.Block):
        return source.owner.owner.name == "fusion.group"
    producer = _op(source.owner)
    if producer.name in ("tensor.empty", "arith.constant"):
        return False
    return producer.parent is not None and _op(producer.parent).name == "fusion.group"


def level_of(role: str, device: cost_model.Device) -> str:
    """The memory level of a role on `device`."""
    return {OUTPUT: GLOBAL, PER_ELEMENT: REGISTER, KEPT: kept_level(device)}[role]


def _op(user) -> ir.Operation:
    return user.operation if hasattr(user, "operation") else user


def _key(user) -> int:
    from fusec.passes.grouping import op_key

    return op_key(_op(user))


def _mem_attr(level: str) -> ir.Attribute:
    return ir.Attribute.parse(f"#fusion.mem<{level}>")


def value_bytes(value: ir.Value) -> int:
    return tensor_bytes(value.type) if isinstance(value.type, ir.RankedTensorType) else 0


def place_group(group: ir.Operation, device: cost_model.Device) -> dict[str, int]:
    """Annotate the group's values with `fusion.mem`; return and record the summary."""
    counts = {GLOBAL: 0, "on_chip": 0, REGISTER: 0, SHARED: 0}
    placed: list[tuple[ir.Operation, str]] = []

    def visit_block(block: ir.Block, in_tile: bool) -> None:
        for op in block.operations:
            op = op.operation
            if _is_tile_loop(op) or (in_tile and op.name == "scf.for"):
                # A loop inside the tile (the attention kernel's key tiles) is the tile's.
                visit_block(op.regions[0].blocks[0], True)
                continue
            if is_placed_op(op):
                role = role_of(op.results[0], in_tile)
                if tiled and not in_tile and role == KEPT:
                    role = OUTPUT  # a whole tensor outside the tile loop: not one tile's
                if role == KEPT and gpu and in_tile and read_in_place(op.results[0]):
                    # Each GPU thread computes, keeps and reads back its own elements of it
                    # (a row between a reduction and its consumers): its registers.
                    role = PER_ELEMENT
                placed.append((op, role))
            elif op.name == "tensor.extract_slice" and in_tile:
                role = input_slice_role(op)
                if role == KEPT and not gpu and streamed_through_pack(op):
                    role = OUTPUT  # the microkernel keeps a panel of it, not the tile
                if role is not None:
                    placed.append((op, role))

    body = group.regions[0].blocks[0]
    tiled = any(_is_tile_loop(op.operation) for op in body.operations)
    gpu = device.max_registers_per_thread > 0
    visit_block(body, False)
    for op, role in placed:
        level = level_of(role, device)
        op.attributes[MEM_ATTR] = _mem_attr(level)
        size = value_bytes(op.results[0])
        counts[REGISTER] += level == REGISTER
        counts[SHARED] += size if level == SHARED else 0
        counts["on_chip"] += size if role == KEPT else 0
    counts[GLOBAL] = sum(value_bytes(r) for r in group.results)
    i64 = ir.IntegerType.get_signless(64)
    group.attributes[PLACEMENT_ATTR] = ir.DictAttr.get(
        {k: ir.IntegerAttr.get(i64, int(v)) for k, v in counts.items()})
    return counts


def block_tiled(group: ir.Operation) -> bool:
    """Whether `group` is a kernel whose tile (or whole body) one block of threads runs, the
    unit placement and capacity describe: a kernel its family's pass tiled (`family_tiled`),
    not, on target cuda, a library call or a view (`fusion.path`), a group code generation
    builds untiled (`fusion.untiled`), or the
    fallback path's tiles, one per thread (`fusion.fallback`)."""
    if family_tiled(group):
        return True
    return not any(name in group.attributes
                   for name in (attributes.PATH, attributes.UNTILED, attributes.FALLBACK))


def placements(group: ir.Operation) -> list[tuple[ir.Operation, str]]:
    """The (op, level) pairs `--fusion-place` left in `group`, in program order."""
    found: list[tuple[ir.Operation, str]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if MEM_ATTR in op.attributes:
            text = str(op.attributes[MEM_ATTR])
            found.append((op, text.split("<")[-1].rstrip(">")))
        return ir.WalkResult.ADVANCE

    group.walk(visit)
    return found


@register
@dataclass
class PlaceIntermediatesPass(Pass):
    """Place every value of a tiled group in registers, shared memory or global memory."""

    ARGUMENT = "fusion-place"
    device: str = "cpu"

    def run(self, module: ir.Operation) -> None:
        device = cost_model.device_named(self.device)
        for group in groups_in(module):
            if not block_tiled(group):
                continue
            place_group(group, device)
