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

Option: `device` (cpu | h200).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusec.passes import cost_model
from fusec.passes.inline_groups import groups_in
from fusec.passes.place_intermediates import MEM_ATTR, PLACEMENT_ATTR, REGISTER
from fusec.passes.registry import Pass, register
from mlir import ir

CAPACITY_ATTR = "fusion.capacity"


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
    return max((math.prod(s) for s in shapes), default=1)


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
        points = math.prod(ir.ShapedType(value.type).shape)
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
    if "fusion.tile_sizes" not in group.attributes:
        return 1
    sizes = list(ir.DenseI64ArrayAttr(group.attributes["fusion.tile_sizes"]))
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
    if "fusion.tile_sizes" not in group.attributes:
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
    threads = cost_model.tile_threads(tile_points(group), device)
    block, _ = tile_block(group)
    gpu = device.max_registers_per_thread > 0
    registers = live_value_registers(block, threads) if gpu else 0
    verdict = cost_model.check_tile(on_chip, registers, threads, device)
    i64 = ir.IntegerType.get_signless(64)
    group.attributes["fusion.threads"] = ir.IntegerAttr.get(i64, threads)
    occupancy = verdict.occupancy
    if gpu:
        group.attributes["fusion.registers"] = ir.IntegerAttr.get(i64, verdict.registers)
    else:
        grid = ir.IntegerAttr(group.attributes["fusion.grid"]).value \
            if "fusion.grid" in group.attributes else 1
        occupancy = cost_model.occupancy(grid, device)
    group.attributes["fusion.occupancy"] = ir.FloatAttr.get_f64(round(occupancy, 4))
    if verdict.over:
        advice = remedy(group, verdict, on_chip, registers, device)
        text = "over: " + "; ".join(verdict.over) + "; " + advice
    elif verdict.notes:
        text = "fits: " + "; ".join(verdict.notes)
    else:
        text = "fits"
    group.attributes[CAPACITY_ATTR] = ir.StringAttr.get(text)
    return verdict


@register
@dataclass
class CheckCapacityPass(Pass):
    """Check each tile's on-chip bytes, registers and occupancy against the device."""

    ARGUMENT = "fusion-capacity"
    device: str = "cpu"

    def run(self, module: ir.Operation) -> None:
        device = cost_model.device_named(self.device)
        for group in groups_in(module):
            if PLACEMENT_ATTR in group.attributes:
                check_group(group, device)

