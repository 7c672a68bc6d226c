"""--fusion-normalise-kernels: simplify each kernel group, alone, before it is tiled (target cuda).

Tile-and-fuse stops at a reshape between two ops of a group (softmax's row max, reduced to
`tensor<64xf32>` and expanded to `tensor<64x1xf32>` for its consumer) and at chains of
elementwise ops it would fuse one by one. The CPU path normalises its groups for that with
module-wide passes; on the GPU path the same module also holds groups that are not kernels of
ours (`fusion.path`: a cuBLASLt call whose operand layouts are read from its body, a view of a
buffer), whose bodies must stay as `--fusion-gpu-kernels` left them. So each kernel group is
normalised on its own: copied into a module of its own, run through

    fusion-propagate-reshapes, canonicalize, fusion-fence-broadcast-consumers,
    linalg-fuse-elementwise-ops (which also moves reshapes to the group's inputs),
    fusion-unfence, canonicalize

then expansions that only insert size-1 dims are read through by the generics that use them
(`fold_unit_expansions`), and the group is put back in place of the original. Reshapes stay
inside the group (a reshape of a kernel input is a view of its buffer; the tile emitter reads
through it). A group the passes would turn into anything but one group is left as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.grouping import group_alone, splice_alone
from fusec.passes.inline_groups import groups_in
from fusec.passes.registry import Pass, register, run_pipeline
from fusec.passes.tiling.tile import LIBRARY_PATH_ATTR
from mlir import ir

NORMALISE = ["fusion-propagate-reshapes", "canonicalize", "fusion-fence-broadcast-consumers",
             "linalg-fuse-elementwise-ops", "fusion-unfence", "canonicalize"]


def _unit_expansion(op: ir.Operation) -> list[int] | None:
    """For an expand_shape that only inserts size-1 dims: for each source dim, the result
    dim that carries it (the group's one dim of size > 1, else its first); else None."""
    if op.name != "tensor.expand_shape":
        return None
    shape = ir.RankedTensorType(op.results[0].type).shape
    carriers = []
    for group in ir.ArrayAttr(op.attributes["reassociation"]):
        dims = [ir.IntegerAttr(d).value for d in ir.ArrayAttr(group)]
        wide = [d for d in dims if shape[d] != 1]
        if len(wide) > 1:
            return None
        carriers.append(wide[0] if wide else dims[0])
    return carriers


def fold_unit_expansions(group: ir.Operation) -> int:
    """Read through `expand_shape`s that only insert size-1 dims into generics' inputs: each
    user's indexing map drops the inserted dims and reads the source. Such an expansion of a
    computed value (a keepdim reduction's input, after reshape propagation) would otherwise
    stop tile-and-fuse. Returns how many were folded."""
    found = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if _unit_expansion(op.operation) is not None:
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    group.walk(visit)
    folded = 0
    for op in found:
        carriers = _unit_expansion(op)
        uses = [(use.owner, use.operand_number) for use in op.results[0].uses]
        if not uses or any(u.name != "linalg.generic" or
                           n >= len(u.operands) - len(u.results) for u, n in uses):
            continue  # read as an output or by another op: left alone
        if not all(_droppable(user, n, carriers) for user, n in uses):
            continue
        for user, n in uses:
            maps = list(user.attributes["indexing_maps"])
            amap = ir.AffineMapAttr(maps[n]).value
            kept = [amap.results[c] for c in carriers]
            maps[n] = ir.AffineMapAttr.get(ir.AffineMap.get(amap.n_dims, amap.n_symbols, kept))
            user.attributes["indexing_maps"] = ir.ArrayAttr.get(maps)
            user.operands[n] = op.operands[0]
        op.erase()
        folded += 1
    return folded


def _droppable(user: ir.Operation, n: int, carriers: list[int]) -> bool:
    """Whether operand `n`'s map results outside `carriers` can go: constants, or loop dims
    another operand's map still names (every loop must keep an extent)."""
    maps = [ir.AffineMapAttr(m).value for m in user.attributes["indexing_maps"]]
    named = {e.position for k, m in enumerate(maps) if k != n for e in m.results
             if isinstance(e, ir.AffineDimExpr)}
    dropped = [e for k, e in enumerate(maps[n].results) if k not in carriers]
    return all(isinstance(e, ir.AffineConstantExpr) or
               (isinstance(e, ir.AffineDimExpr) and e.position in named) for e in dropped)


def normalise_group(group: ir.Operation) -> ir.Operation:
    """`group` normalised (see the module docstring); returns the group now in its place."""
    mini = group_alone(group)
    run_pipeline(mini, NORMALISE)
    main = next(iter(mini.body.operations))
    for op in main.regions[0].blocks[0].operations:
        if op.operation.name == "fusion.group":
            fold_unit_expansions(op.operation)
    # Not one group any more: keep the original.
    return splice_alone(group, mini) or group


@register
@dataclass
class NormaliseKernelsPass(Pass):
    """Normalise each kernel group on its own (fused elementwise chains, reshapes moved out
    of the way of tile-and-fuse), leaving library and view groups untouched."""

    ARGUMENT = "fusion-normalise-kernels"

    def run(self, module: ir.Operation) -> None:
        for group in groups_in(module):
            if LIBRARY_PATH_ATTR in group.attributes or \
                    group.parent.name != "func.func":
                continue
            normalise_group(group)
