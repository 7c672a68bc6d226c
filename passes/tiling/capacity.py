"""--fusion-capacity: check what each tile keeps on chip against the device; record why not.

Runs after `--fusion-place`. Per group, from the IR alone (the placement summary, the
`fusion.mem` of its values, its tile loop):

- on-chip bytes per tile: the values placed as kept (`fusion.placement`'s `on_chip`): shared
  memory per block on a GPU (227 KB with the opt-in on the H200, 48 KB without), the
  per-core L2 on the CPU;
- registers per thread (GPU): a base plus the peak, over the tile's ops in order, of the
  register-placed values live at once, each spread over the block's threads
  (`cost_model.value_registers`), against 255;
- occupancy: resident warps per SM for those registers and that shared memory (GPU), against
  the device's wanted minimum; on the CPU the fraction of cores the grid can use.

Recorded on the group: `fusion.threads` (per tile), `fusion.registers` (GPU),
`fusion.occupancy`, and `fusion.capacity`: "fits", "fits: <condition>", or "over: <limits
exceeded>; <remedy>". The remedy is smaller tiles when some number of the tile's rows fits
(the count is named; the re-tiling itself is `--fusion-tile`'s), else a refusal: a row too
long to keep on chip needs an online reduction over row tiles or a split into two kernels.
The pure rules are `cost_model.check_tile` and `cost_model.largest_fitting_share`.

Acting on it (`tile_to_fit`, run by `--fusion-tile{fit=true}` for each group): the group
is tiled, placed and checked at once (an untiled copy kept aside); over a hard limit (on-chip bytes,
registers) the group is re-tiled with the most rows that fit (`fusion.max_tile_rows`,
honoured by `--fusion-tile`; the reason in `fusion.retiled`), or, when not even one row fits,
split into one kernel per op (each records the reason in `fusion.split`): every
intermediate that would not stay on chip goes through global memory instead. An
occupancy shortfall alone is recorded, not acted on: such a kernel launches.

Option: `device` (cpu | h200).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from fusec.passes import attributes, cost_model
from fusec.passes.grouping import CLONED_INTO_GROUPS, form_group, is_compute
from fusec.passes.inline_groups import groups_in, inline_group
from fusec.passes.tiling.tile import fold_reshaped_empties
from fusec.passes.registry import Pass, PassError, register
from fusec.passes.tiling.place import (
    GLOBAL,
    MEM_ATTR,
    PLACEMENT_ATTR,
    REGISTER,
    block_tiled,
    place_group,
    value_bytes,
)
from mlir import ir
from mlir.passmanager import PassManager

CAPACITY_ATTR = attributes.CAPACITY
RETILED_ATTR = attributes.RETILED
SPLIT_ATTR = attributes.SPLIT
MAX_TILE_ROWS_ATTR = attributes.MAX_TILE_ROWS  # read by --fusion-tile
UNTILED_ATTR = attributes.UNTILED  # why a tiling was undone (code generation refused it)
BLOCK_ATTR = attributes.BLOCK  # threads per block of a GPU tile (set by --fusion-tile)


def tile_block(group: ir.Operation) -> tuple[ir.Block, bool]:
    """The block one tile runs (the tile loop's body, or the group's when untiled)."""
    body = group.regions[0].blocks[0]
    for op in body.operations:
        if op.operation.name == "scf.forall":
            return op.operation.regions[0].blocks[0], True
    return body, False


def tile_points(group: ir.Operation) -> int:
    """Output points of one tile: the largest slice the tile loop inserts, or the largest
    group result when the group is one tile."""
    block, tiled = tile_block(group)
    shapes = []
    if tiled:
        for op in block.operations:
            if op.operation.name == "scf.forall.in_parallel":
                for inner in op.operation.regions[0].blocks[0].operations:
                    shapes.append(ir.RankedTensorType(inner.operation.operands[0].type).shape)
    else:
        shapes = [ir.RankedTensorType(r.type).shape for r in group.results
                  if isinstance(r.type, ir.RankedTensorType)]
    return max((_points(s) for s in shapes), default=1)


def _points(shape: list[int]) -> int:
    """Elements of a tile value of `shape`. A dynamic dim (a ragged tile's slice, `?`) is
    the tile's remainder, at most the tile: counted as the largest static dim of the shape
    (its product with MLIR's dynamic-size sentinel gave 10^35 registers, then an internal
    error recording it)."""
    static = [d for d in shape if d >= 0]
    widest = max(static, default=1)
    return math.prod(d if d >= 0 else widest for d in shape)


def _level(op: ir.Operation) -> str | None:
    if MEM_ATTR not in op.attributes:
        return None
    return str(op.attributes[MEM_ATTR]).split("<")[-1].rstrip(">")


def live_value_registers(block: ir.Block, threads: int) -> int:
    """Peak registers per thread of the block's register-placed values live at once.

    A value is live from its defining op to its last user (the user's ancestor in `block`);
    an init (outs) operand ends before its user, whose result takes its registers.
    """
    ops = [op.operation for op in block.operations]
    index = {id_: i for i, id_ in enumerate(_addresses(ops))}
    intervals: list[tuple[int, int, int]] = []
    for i, op in enumerate(ops):
        if _level(op) != REGISTER or not op.results:
            continue
        value = op.results[0]
        last = i
        for use in value.uses:
            user = _ancestor_in_block(use.owner, block)
            if user is None:
                continue
            position = index.get(_address(user), i)
            # An init is the accumulator its user updates in place: it becomes the result.
            last = max(last, position - 1 if _is_init(use.owner, use.operand_number) else position)
        element = ir.ShapedType(value.type).element_type
        width = max(1, getattr(element, "width", 32) // 8) if hasattr(element, "width") else 4
        points = _points(ir.ShapedType(value.type).shape)
        intervals.append((i, last, cost_model.value_registers(points, width, threads)))
    peak = 0
    for i in range(len(ops)):
        peak = max(peak, sum(r for start, end, r in intervals if start <= i <= end))
    return peak


def _is_init(user, operand_number: int) -> bool:
    op = user.operation if hasattr(user, "operation") else user
    if not op.name.startswith("linalg."):
        return False
    return operand_number >= len(op.operands) - len(op.results)


def _address(op) -> int:
    from fusec.passes.grouping import op_key

    return op_key(op.operation if hasattr(op, "operation") else op)


def _addresses(ops: list[ir.Operation]) -> list[int]:
    return [_address(op) for op in ops]


def _ancestor_in_block(user, block: ir.Block) -> ir.Operation | None:
    op = user.operation if hasattr(user, "operation") else user
    while op is not None and op.block != block:
        parent = op.parent
        op = parent.operation if parent is not None and hasattr(parent, "operation") else parent
    return op


def tile_units(group: ir.Operation) -> int:
    """How many rows (tile positions along the tiled dims) one tile has: 1 when untiled."""
    if attributes.TILE_SIZES not in group.attributes:
        return 1
    sizes = list(ir.DenseI64ArrayAttr(group.attributes[attributes.TILE_SIZES]))
    return math.prod(s for s in sizes if s) or 1


def remedy(group: ir.Operation, verdict: cost_model.CapacityVerdict, on_chip: int,
           value_registers: int, device: cost_model.Device) -> str:
    """What to do about a tile over a limit: how many of its rows fit, or why none does."""
    units = tile_units(group)
    if all(o.startswith("occupancy") for o in verdict.over):
        return "launches, but slowly: fewer live values or less shared memory per block"
    fit = cost_model.largest_fitting_share(math.ceil(on_chip / units),
                                           math.ceil(value_registers / units), units, device)
    if fit >= 1 and fit < units:
        return f"re-tile: at most {fit} of the tile's {units} rows fit"
    if attributes.TILE_SIZES not in group.attributes:
        return (f"refused: the group is one untiled tile, over {device.name}'s limits; needs "
                f"tiling, or a split into two kernels")
    per_row = math.ceil(on_chip / units)
    if cost_model.check_tile(per_row, 0, device.threads_per_block, device).over:
        return (f"refused: one row keeps {per_row} B on chip, more than {device.name} holds "
                f"per tile; needs an online reduction over row tiles, or a split into two "
                f"kernels")
    return (f"refused: one row needs more registers per thread than {device.name} has; needs "
            f"the row spread over more threads, or a split into two kernels")


def check_group(group: ir.Operation, device: cost_model.Device) -> cost_model.CapacityVerdict:
    """Check one placed group and record the verdict on it."""
    summary = group.attributes[PLACEMENT_ATTR]
    on_chip = ir.IntegerAttr(ir.DictAttr(summary)["on_chip"]).value
    threads = ir.IntegerAttr(group.attributes[BLOCK_ATTR]).value \
        if BLOCK_ATTR in group.attributes else cost_model.tile_threads(tile_points(group), device)
    block, _ = tile_block(group)
    gpu = device.max_registers_per_thread > 0
    registers = live_value_registers(block, threads) if gpu else 0
    verdict = cost_model.check_tile(on_chip, registers, threads, device)
    i64 = ir.IntegerType.get_signless(64)
    group.attributes[attributes.THREADS] = ir.IntegerAttr.get(i64, threads)
    occupancy = verdict.occupancy
    if gpu:
        group.attributes[attributes.REGISTERS] = ir.IntegerAttr.get(i64, verdict.registers)
    else:
        grid = ir.IntegerAttr(group.attributes[attributes.GRID]).value \
            if attributes.GRID in group.attributes else 1
        occupancy = cost_model.occupancy(grid, device)
    group.attributes[attributes.OCCUPANCY] = ir.FloatAttr.get_f64(round(occupancy, 4))
    if verdict.over:
        advice = remedy(group, verdict, on_chip, registers, device)
        text = "over: " + "; ".join(verdict.over) + "; " + advice
    elif verdict.notes:
        text = "fits: " + "; ".join(verdict.notes)
    else:
        text = "fits"
    group.attributes[CAPACITY_ATTR] = ir.StringAttr.get(text)
    return verdict


def _hard_limits(verdict: cost_model.CapacityVerdict) -> list[str]:
    """The limits a kernel cannot launch (or cannot keep its tile on chip) beyond."""
    return [o for o in verdict.over if not o.startswith("occupancy")]


@dataclass
class Trial:
    """What tiling a group showed."""

    verdict: cost_model.CapacityVerdict
    rows: int  # rows per tile of that tiling
    fitting_rows: int  # how many of them fit (0: not even one)
    input_kept_bytes: int  # of the on-chip bytes, the staged slices of kernel inputs


def check_tiled(group: ir.Operation, device: cost_model.Device) -> Trial:
    """Place and check a freshly tiled `group`; the placement attributes are removed again
    (`--fusion-place` places the final tile bodies)."""
    # What the stage runs between tiling and placement: without it, a producer fused for
    # each of its users is counted once per user, as per-element values.
    PassManager.parse("fusion.group(canonicalize,cse)").run(group)
    place_group(group, device)
    verdict = check_group(group, device)
    rows = tile_units(group)
    summary = ir.DictAttr(group.attributes[PLACEMENT_ATTR])
    on_chip = ir.IntegerAttr(summary["on_chip"]).value
    registers = 0
    if device.max_registers_per_thread > 0:
        registers = max(0, verdict.registers - cost_model.BASE_REGISTERS_PER_THREAD)
    fitting = cost_model.largest_fitting_share(math.ceil(on_chip / rows),
                                               math.ceil(registers / rows), rows, device)
    input_kept = _input_kept_bytes(group)
    _clear_placement(group)
    return Trial(verdict, rows, fitting, input_kept)


def _input_kept_bytes(group: ir.Operation) -> int:
    """On-chip bytes of a tile that are slices of kernel inputs it reuses (a matmul's
    operand tiles): splitting the group does not make them smaller."""
    block, _ = tile_block(group)
    total = 0
    for op in block.operations:
        op = op.operation
        # Placed slices are input slices (`input_slice_role`): kept unless placed global
        # (streamed: read once, or a CPU matmul's packed B operand).
        if op.name == "tensor.extract_slice" and MEM_ATTR in op.attributes \
                and str(op.attributes[MEM_ATTR]) != f"#fusion.mem<{GLOBAL}>":
            total += value_bytes(op.results[0])
    return total


def _clear_placement(group: ir.Operation) -> None:
    for name in (PLACEMENT_ATTR, CAPACITY_ATTR, attributes.THREADS, attributes.REGISTERS,
                 attributes.OCCUPANCY):
        if name in group.attributes:
            del group.attributes[name]

    def visit(op: ir.Operation) -> ir.WalkResult:
        if MEM_ATTR in op.attributes:
            del op.attributes[MEM_ATTR]
        return ir.WalkResult.ADVANCE

    group.walk(visit)


def _restore(tiled: ir.Operation, backup: ir.Operation) -> ir.Operation:
    """Put the untiled `backup` in the place of `tiled`."""
    for old, new in zip(tiled.results, backup.results):
        old.replace_all_uses_with(new)
    tiled.erase()
    return backup


def _sole_user(op: ir.Operation) -> ir.Operation | None:
    users = [use.owner.operation if hasattr(use.owner, "operation") else use.owner
             for r in op.results for use in r.uses]
    return users[0] if users and all(u == users[0] for u in users) else None


def split_group(group: ir.Operation, reason: str) -> list[ir.Operation]:
    """One `single` group per compute op of `group` (a fill goes with the op it initialises),
    each recording `reason`."""
    # A reshape of an empty tensor (an `outs` operand, never read) would be a part of its own
    # with nothing to compute: an empty tensor of its shape instead, cloned into its users.
    fold_reshaped_empties(group)
    body_ops = [op.operation for op in group.regions[0].blocks[0].operations][:-1]
    inline_group(group)
    members: list[list[ir.Operation]] = []
    pending_fills: list[ir.Operation] = []
    for op in body_ops:
        if op.name in CLONED_INTO_GROUPS or not is_compute(op):
            continue
        if not any(True for r in op.results for _ in r.uses):
            continue
        user = _sole_user(op)
        if op.name == "linalg.fill" and user is not None and any(user == o for o in body_ops):
            pending_fills.append(op)
            continue
        mine = [f for f in pending_fills if _sole_user(f) == op]
        pending_fills = [f for f in pending_fills if not _sole_user(f) == op]
        members.append(mine + [op])
    members += [[f] for f in pending_fills]
    parts = []
    for ops in members:
        part = form_group(ops, "single")
        part.attributes[SPLIT_ATTR] = ir.StringAttr.get(reason)
        parts.append(part)
    return parts


Acceptance = Callable[[ir.Operation], "str | None"]


def _undo(group: ir.Operation, backup: ir.Operation, reason: str) -> ir.Operation:
    group = _restore(group, backup)
    group.attributes[UNTILED_ATTR] = ir.StringAttr.get(reason)
    return group


def tile_accepted(group: ir.Operation, tile: Callable[[ir.Operation], None],
                  accept: Acceptance | None = None) -> ir.Operation:
    """Tile `group`; when `accept` (code generation, asked whether it builds the tile) gives
    a reason not to, put the untiled group back with the reason in `fusion.untiled`."""
    if accept is None:
        tile(group)
        return group
    backup = group.clone(ip=ir.InsertionPoint(group))
    try:
        tile(group)
    except Exception:
        backup.erase()
        raise
    # What the stage runs after tiling: the producers fused into the tile leave dead copies.
    PassManager.parse("fusion.group(canonicalize,cse)").run(group)
    reason = accept(group)
    if reason is None:
        backup.erase()
        return group
    return _undo(group, backup, reason)


def tile_to_fit(group: ir.Operation, device: cost_model.Device,
                tile: Callable[[ir.Operation], None], attempts: int = 3,
                accept: Acceptance | None = None,
                whole: Acceptance | None = None) -> list[ir.Operation]:
    """Tile `group` with `tile` so that every tile fits `device`: over a hard limit, tile it
    again with the most rows that fit (`fusion.max_tile_rows`, reason in `fusion.retiled`),
    or split it into one kernel per op (reason in `fusion.split`) when not even one row
    fits. A tiling that `accept` refuses is undone (`tile_accepted`). A group that `whole`
    (a group-level kernel family, asked of the untiled group) builds is never split: it is
    left untiled, the capacity reason in `fusion.untiled`. Returns the groups (the group,
    or its parts)."""
    for _ in range(attempts):
        backup = group.clone(ip=ir.InsertionPoint(group))
        try:
            tile(group)
        except Exception:
            backup.erase()  # no stray copy left behind the error
            raise
        try:
            result = check_tiled(group, device)
        except (PassError, ir.MLIRError):  # unplaceable: the stage's own passes say why
            reason = accept(group) if accept is not None else None
            if reason is not None:
                return [_undo(group, backup, reason)]
            backup.erase()
            return [group]
        hard = _hard_limits(result.verdict)
        if not hard:
            reason = accept(group) if accept is not None else None
            if reason is not None:
                return [_undo(group, backup, reason)]
            backup.erase()
            return [group]
        group = _restore(group, backup)
        limits = "; ".join(hard)
        if 1 <= result.fitting_rows < result.rows:
            i64 = ir.IntegerType.get_signless(64)
            group.attributes[MAX_TILE_ROWS_ATTR] = ir.IntegerAttr.get(i64, result.fitting_rows)
            group.attributes[RETILED_ATTR] = ir.StringAttr.get(
                f"{limits} with {result.rows} rows per tile on {device.name}: re-tiled to "
                f"{result.fitting_rows}")
            continue
        ops = sum(1 for op in group.regions[0].blocks[0].operations
                  if is_compute(op.operation))
        # A serial loop nest (a lowered scan, sort, scatter) is one kernel whatever it keeps:
        # split, its loop would be left in the host code, which runs kernels only.
        if ops <= 1 or attributes.SERIAL in group.attributes or \
                result.input_kept_bytes > device.on_chip_bytes \
                or result.verdict.on_chip_bytes == result.input_kept_bytes and \
                not any(o.startswith("registers") for o in hard):
            # Nothing to split, or what is over is the inputs' own tiles, which a split
            # keeps just the same: the capacity check records the group as over.
            break
        if whole is not None and whole(group) is None:
            # A kernel family that builds the group whole (the data-movement family: each
            # output vector evaluated from the inputs) is not bounded by the tile's limits.
            group.attributes[UNTILED_ATTR] = ir.StringAttr.get(
                f"{limits} with {result.rows} row{'s' if result.rows != 1 else ''} per tile "
                f"on {device.name}: kept whole for a group-level kernel")
            return [group]
        parts = split_group(group, f"{limits} with {result.rows} row"
                            f"{'s' if result.rows != 1 else ''} per tile on {device.name}, "
                            f"and no fewer rows fit: split into one kernel per op, "
                            f"intermediates through global memory")
        return [tile_accepted(part, tile, accept) for part in parts]
    return [tile_accepted(group, tile, accept)]


@register
@dataclass
class CapacityPass(Pass):
    """Check each tile's on-chip bytes, registers and occupancy against the device."""

    ARGUMENT = "fusion-capacity"
    device: str = "cpu"

    def run(self, module: ir.Operation) -> None:
        device = cost_model.device_named(self.device)
        for group in groups_in(module):
            if block_tiled(group) and PLACEMENT_ATTR in group.attributes:
                check_group(group, device)

