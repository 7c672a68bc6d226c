"""The fusion report, derived from the IR alone (`fusec --report`, `--report=json`).

Per kernel (one `fusion.group`): its kind, its ops, its predicted HBM bytes (inputs and
tensor constants read once, results written once), flops, arithmetic intensity and roofline
floor time on a device; with the `tiled` stage's IR, per kernel its tile sizes, grid (tiles
per tiled dim), block (threads per tile), on-chip and shared bytes, estimated registers per
thread, occupancy, placements, capacity verdict, and why the capacity check re-tiled or split
it; then every refused fusion with its reason, from the `fusion.refused`
attributes that the fusion passes leave on groups (and on ops that absorbed nothing). Nothing
comes from a side table: a plan saved as MLIR and reloaded gives the same report.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import mlir.ir as ir
from fusec.passes import attributes, cost_model
from fusec.passes.fusion.analysis import CONTRACTION, describe
from fusec.passes.fusion.producer_fusion import group_bytes
from fusec.passes.grouping import value_key
from fusec.passes.inline_groups import groups_in

_FREE = ("fusion.yield", "arith.constant", "tensor.empty")


@dataclass
class KernelReport:
    """One kernel of the plan."""

    index: int
    kind: str
    ops: list[str]
    hbm_bytes: int
    flops: int
    arithmetic_intensity: float
    floor_us: float
    bytes_unfused: int | None = None
    tile_dims: list[int] = field(default_factory=list)
    tiling: TilingReport | None = None


@dataclass
class TilingReport:
    """Loop-level facts of one kernel, from the `tiled` stage's IR (`--fusion-tile`,
    `--fusion-place`, `--fusion-capacity` attributes on its group)."""

    tile_sizes: list[int]
    grid: int
    threads: int | None
    registers: int | None  # per thread (GPU descriptions only)
    occupancy: float | None
    on_chip_bytes: int | None  # what one tile keeps on chip
    shared_bytes: int | None  # shared memory per block
    global_bytes: int | None  # what the kernel writes to global memory
    register_values: int | None  # values placed in registers
    placements: dict[str, int] = field(default_factory=dict)  # level -> values placed there
    capacity: str | None = None
    grid_shape: list[int] = field(default_factory=list)  # tiles per tiled dim (the forall's)
    kind: str = ""
    retiled: str | None = None  # why the capacity check re-tiled it (fewer rows per tile)
    split: str | None = None  # why it is one part of a group the capacity check split
    # What builds it (target cuda): "tile" (the tile emitter, from this tile loop, or the
    # group as one tile), "fallback" (upstream MLIR, from this tile loop, a tile per thread;
    # why in `fallback`), "untiled" (the reason in `untiled`), "cuBLASLt", "view"; "" on the
    # CPU.
    built: str = ""
    untiled: str | None = None
    fallback: str | None = None


@dataclass
class FusionReport:
    """Kernels in program order, and every refused fusion."""

    device: str
    kernels: list[KernelReport]
    refused: list[str]
    # The tiled stage's kernels, in order: the same as `kernels` unless the capacity check
    # split a group (then each part is a kernel of its own).
    tiled_kernels: list[TilingReport] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def to_text(self) -> str:
        count = len(self.kernels)
        lines = [f"fusion plan for {self.device}: {count} kernel{'' if count == 1 else 's'}"]
        lines.append(f"{'#':>3} {'kind':<10} {'HBM bytes':>12} {'flops':>12} {'AI':>7} "
                     f"{'floor us':>9}  ops")
        for k in self.kernels:
            lines.append(f"{k.index:>3} {k.kind:<10} {k.hbm_bytes:>12} {k.flops:>12} "
                         f"{k.arithmetic_intensity:>7.2f} {k.floor_us:>9.3f}  {', '.join(k.ops)}")
        tiled = self.tiled_kernels
        if tiled:
            lines.append(f"tiling (tiled stage): {len(tiled)} kernel"
                         f"{'' if len(tiled) == 1 else 's'}"
                         + ("" if len(tiled) == len(self.kernels) else
                            f" (the fusion stage's {len(self.kernels)} split for the "
                            f"device: kernel formation, capacity)"))
            lines.append(f"{'#':>3} {'tile sizes':<16} {'grid':>12} {'block':>5} "
                         f"{'on-chip B':>10} {'shared B':>9} {'regs':>5} {'occ':>5}  "
                         f"placement (values)  capacity")
            lines.extend(_tiling_line(i, t) for i, t in enumerate(tiled))
            for i, t in enumerate(tiled):
                if t.retiled:
                    lines.append(f"  kernel {i} re-tiled: {t.retiled}")
                if t.split:
                    lines.append(f"  kernel {i} split: {t.split}")
                if t.untiled:
                    lines.append(f"  kernel {i} untiled: {t.untiled}")
                if t.fallback:
                    lines.append(f"  kernel {i} fallback path (a tile per thread): {t.fallback}")
        lines.append(f"refused fusions: {len(self.refused)}")
        lines.extend(f"  {r}" for r in self.refused)
        return "\n".join(lines)


def _dash(value: object, fmt: str = "") -> str:
    return "-" if value is None else format(value, fmt)


def _tiling_line(index: int, t: TilingReport) -> str:
    sizes = "[" + ",".join(str(x) for x in t.tile_sizes) + "]" if t.tile_sizes else \
        {"tile": "one tile", "cuBLASLt": "cuBLASLt", "view": "view"}.get(t.built, "untiled")
    places = " ".join(f"{level}={n}" for level, n in sorted(t.placements.items())) or "-"
    grid = "x".join(str(n) for n in t.grid_shape) if len(t.grid_shape) > 1 else str(t.grid)
    return (f"{index:>3} {sizes:<16} {grid:>12} {_dash(t.threads):>5} "
            f"{_dash(t.on_chip_bytes):>10} {_dash(t.shared_bytes):>9} {_dash(t.registers):>5} "
            f"{_dash(t.occupancy, '.2f'):>5}  {places:<18}  {t.capacity or '-'}")


def _int_attr(attrs, name: str) -> int | None:
    return ir.IntegerAttr(attrs[name]).value if name in attrs else None


def _str_attr(attrs, name: str) -> str | None:
    return ir.StringAttr(attrs[name]).value if name in attrs else None


def _grid_shape(group: ir.Operation) -> list[int]:
    """Tiles per tiled dim: the trip counts of the group's tile loop (empty when untiled)."""
    from fusec.passes.cpu.cpu_tile_loops import forall_bounds

    for op in group.regions[0].blocks[0].operations:
        if op.operation.name == "scf.forall":
            bounds = forall_bounds(op.operation)
            if bounds is None:
                return []
            return [-(-(u - lo) // st) for lo, u, st in zip(*bounds)]
    return []


def tiling_report(group: ir.Operation) -> TilingReport:
    """The loop-level facts recorded on a group by the `tiled` stage."""
    from fusec.passes.tiling.place import PLACEMENT_ATTR, placements

    attrs = group.attributes
    sizes = list(ir.DenseI64ArrayAttr(attrs[attributes.TILE_SIZES])) \
        if attributes.TILE_SIZES in attrs else []
    summary = {}
    if PLACEMENT_ATTR in attrs:
        summary = {n.name: ir.IntegerAttr(n.attr).value for n in ir.DictAttr(attrs[PLACEMENT_ATTR])}
    counts: dict[str, int] = {}
    for _, level in placements(group):
        counts[level] = counts.get(level, 0) + 1
    occupancy = ir.FloatAttr(attrs[attributes.OCCUPANCY]).value \
        if attributes.OCCUPANCY in attrs else None
    path = _str_attr(attrs, attributes.PATH)
    untiled = _str_attr(attrs, attributes.UNTILED)
    if path is not None:
        built = {"gemm": "cuBLASLt"}.get(path, path)
    elif attributes.FALLBACK in attrs:
        built = "fallback"  # one tile per GPU thread
        untiled = None
    elif untiled is not None:
        built = "untiled"
    else:
        built = "tile" if attributes.TILE_KIND in attrs else ""
    return TilingReport(
        built=built, untiled=untiled, fallback=_str_attr(attrs, attributes.FALLBACK),
        grid_shape=_grid_shape(group), kind=ir.StringAttr(attrs["kind"]).value,
        retiled=_str_attr(attrs, attributes.RETILED), split=_str_attr(attrs, attributes.SPLIT),
        tile_sizes=sizes, grid=_int_attr(attrs, attributes.GRID) or 1,
        threads=_int_attr(attrs, attributes.THREADS) or _int_attr(attrs, attributes.BLOCK),
        registers=_int_attr(attrs, attributes.REGISTERS),
        occupancy=occupancy, on_chip_bytes=summary.get("on_chip"),
        shared_bytes=summary.get("shared"), global_bytes=summary.get("global"),
        register_values=summary.get("register"), placements=counts,
        capacity=ir.StringAttr(attrs[attributes.CAPACITY]).value
        if attributes.CAPACITY in attrs else None,
    )


def refusals_in(module: ir.Operation) -> list[str]:
    """Every `fusion.refused` entry in the module, on groups and on ops, deduplicated."""
    found: list[str] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if attributes.REFUSED in op.attributes:
            for entry in op.attributes[attributes.REFUSED]:
                text = ir.StringAttr(entry).value
                if text not in found:
                    found.append(text)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found


def kernel_report(group: ir.Operation, index: int, device: cost_model.Device) -> KernelReport:
    """The report line of one group, from its IR."""
    ops, flops, contraction = [], 0, False
    for i, op in enumerate(group.regions[0].blocks[0].operations):
        op = op.operation
        if op.name in _FREE:
            continue
        facts = describe(op, i)
        ops.append(op.name)
        flops += facts.flops
        contraction |= facts.category == CONTRACTION
    hbm = group_bytes(group)
    attrs = group.attributes
    unfused = attrs[attributes.BYTES_UNFUSED].value if attributes.BYTES_UNFUSED in attrs else None
    tiles = []
    if attributes.TILE_DIMS in attrs:
        tiles = [ir.IntegerAttr(a).value for a in attrs[attributes.TILE_DIMS]]
    return KernelReport(
        index=index, kind=ir.StringAttr(attrs["kind"]).value, ops=ops, hbm_bytes=hbm, flops=flops,
        arithmetic_intensity=cost_model.arithmetic_intensity(flops, hbm),
        floor_us=cost_model.roofline_s(hbm, flops, device, contraction) * 1e6,
        bytes_unfused=unfused, tile_dims=tiles,
    )


def fusion_report(module: ir.Operation, device: str = "nvidia-h200",
                  tiled: ir.Operation | None = None) -> FusionReport:
    """The report of a module whose functions have been grouped (after `--fusion-plan`);
    with `tiled` (the same module after the `tiled` stage), each kernel's tiling too."""
    dev = cost_model.device_named(device)
    groups = groups_in(module)
    kernels = [kernel_report(g, i, dev) for i, g in enumerate(groups)]
    tiling: list[TilingReport] = []
    if tiled is not None:
        tiling = [tiling_report(g) for g in groups_in(tiled)]
        # The tiled stage keeps the groups and their order unless the capacity check split
        # one; then the parts are listed on their own (`tiled_kernels`) and none is matched.
        if len(tiling) == len(groups):
            for kernel, t in zip(kernels, tiling):
                kernel.tiling = t
    return FusionReport(device=dev.name, kernels=kernels, refused=refusals_in(module),
                        tiled_kernels=tiling)


def _operation(module: ir.Module | ir.Operation) -> ir.Operation:
    return module.operation if isinstance(module, ir.Module) else module


def _tiled_operation(tiled: ir.Module | ir.Operation | None) -> ir.Operation | None:
    return None if tiled is None else _operation(tiled)


def report_data(module: ir.Module | ir.Operation, device: str = "nvidia-h200",
                tiled: ir.Module | ir.Operation | None = None) -> dict:
    """The report as JSON-serialisable data (`fusec --report=json`)."""
    return asdict(fusion_report(_operation(module), device, _tiled_operation(tiled)))


def format_report(module: ir.Module | ir.Operation, device: str = "nvidia-h200",
                  tiled: ir.Module | ir.Operation | None = None) -> str:
    """The report as text (`fusec --report`)."""
    return fusion_report(_operation(module), device, _tiled_operation(tiled)).to_text()


KIND_COLOURS = {
    "single": "#d9d9d9", "vertical": "#a6cee3", "epilogue": "#b2df8a", "reduction": "#fdbf6f",
    "horizontal": "#cab2d6", "input": "#fb9a99", "attention": "#ffff99",
}


# Payload ops too common to say what a generic computes.
_PAYLOAD_NOISE = frozenset({"linalg.yield", "linalg.index", "arith.constant", "arith.index_cast",
                            "arith.truncf", "arith.extf"})


def _type_text(t: ir.Type) -> str:
    """`64x512 f32` for a ranked tensor (`scalar f32` for 0-d); the type itself otherwise."""
    if not isinstance(t, ir.RankedTensorType):
        return str(t)
    return ("x".join(str(d) for d in t.shape) or "scalar") + f" {t.element_type}"


def node_label(op: ir.Operation) -> str:
    """What an op computes, for a graph node: a generic's payload (`exp, add`), a named op's
    name (`matmul`), and the result's shape (`64x512 f32`)."""
    short = op.name.split(".", 1)[-1]
    if op.name == "linalg.generic" and len(op.regions) and len(op.regions[0].blocks):
        payload = [inner.operation.name.split(".", 1)[-1]
                   for inner in op.regions[0].blocks[0].operations
                   if inner.operation.name not in _PAYLOAD_NOISE]
        reduces = any("reduction" in str(a) for a in op.attributes["iterator_types"])
        short = ", ".join(dict.fromkeys(payload)) or "copy"
        if len(short) > 40:
            short = short[:37] + "..."
        if reduces:
            short = f"reduce({short})"
    if len(op.results) and isinstance(op.results[0].type, ir.RankedTensorType):
        short += f"\\n{_type_text(op.results[0].type)}"
    return short.replace('"', "'")


def _add_node(name: str, op: ir.Operation, indent: str, lines: list[str],
              node_of: dict, edges: list) -> None:
    """One DOT node for `op`; its results map to it, and edges come from its operands."""
    lines.append(f'{indent}{name} [label="{node_label(op)}"];')
    for r in op.results:
        node_of[value_key(r)] = name
    edges.extend((value_key(v), name) for v in op.operands)


def fusion_graph_dot(module: ir.Module | ir.Operation) -> str:
    """The op graph as Graphviz DOT, one cluster per kernel coloured by its kind, edges
    following the data (through group boundaries); derived from the IR alone."""
    root = _operation(module)
    lines = ["digraph fusion {", "  rankdir=TB; node [shape=box, style=filled, fillcolor=white];"]
    node_of: dict[tuple[int, int], str] = {}  # value -> node that produces it
    edges: list[tuple[tuple[int, int], str]] = []
    for f_index, func in enumerate(root.regions[0].blocks[0].operations):
        func = func.operation
        if func.name != "func.func" or not len(func.regions[0].blocks):
            continue
        block = func.regions[0].blocks[0]
        for a_index, arg in enumerate(block.arguments):
            name = f"f{f_index}_arg{a_index}"
            lines.append(f'  {name} [label="input {a_index}\\n{_type_text(arg.type)}", '
                         'shape=ellipse];')
            node_of[value_key(arg)] = name
        kernel = 0
        for g_index, op in enumerate(block.operations):
            op = op.operation
            if op.name != "fusion.group":
                if op.name == "func.return":
                    for r_index, value in enumerate(op.operands):
                        out = f"f{f_index}_out{r_index}"
                        lines.append(f'  {out} [label="output {r_index}", shape=ellipse];')
                        edges.append((value_key(value), out))
                    continue
                if op.name in _FREE:
                    continue
                _add_node(f"f{f_index}_op{g_index}", op, "  ", lines, node_of, edges)
                continue
            kind = ir.StringAttr(op.attributes["kind"]).value
            body = op.regions[0].blocks[0]
            lines.append(f"  subgraph cluster_f{f_index}_g{g_index} {{")
            lines.append(f'    label="kernel {kernel}: {kind}"; style=filled; '
                         f'fillcolor="{KIND_COLOURS.get(kind, "#eeeeee")}";')
            for arg, outer in zip(body.arguments, op.operands):
                node_of[value_key(arg)] = node_of.get(value_key(outer), "")
            for i, inner in enumerate(body.operations):
                inner = inner.operation
                if inner.name == "fusion.yield":
                    for result, value in zip(op.results, inner.operands):
                        node_of[value_key(result)] = node_of.get(value_key(value), "")
                    continue
                if inner.name in _FREE:
                    continue
                _add_node(f"f{f_index}_g{g_index}_{i}", inner, "    ", lines, node_of, edges)
            lines.append("  }")
            kernel += 1
    seen = set()
    for value, target in edges:
        source = node_of.get(value)
        if source and (source, target) not in seen:
            seen.add((source, target))
            lines.append(f"  {source} -> {target};")
    lines.append("}")
    return "\n".join(lines)
