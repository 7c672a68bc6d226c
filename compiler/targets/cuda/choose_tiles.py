"""CUDA target: each tensor-core GEMM's and attention kernel's tile, from the tuning cache
where `--tune` measured one, else from the cost model (`--fusion-gpu-choose-tiles`).

For every group the GPU rewrites made our GEMM (`fusion.path = "tc_gemm"`) or an attention
kernel (`"attention"`), the pass records on the group:

- `fusion.tune_key`: what the kernel's time depends on (the tuning cache's key, with the
  device): for a GEMM M, N, K, the element types, B's layout and the fused epilogue's steps;
  for attention batch x heads, the query and key lengths, the head dim and the mask;
- `fusion.kernel_tile`: the tile code generation builds (GEMM: BM, BN, BK, stages;
  attention: BM, BN, stages);
- `fusion.kernel_tile_from`: "cost model", or "tuned: ..." with the measured time of the
  winner and of the model's tile (`fusec --tune` wrote it, runtime/tuning.py);
- `fusion.kernel_tile_candidates`: how many tiles `--tune` measures for it
  (`gemm_cost.tc_gemm_tile_candidates`, `attention_tile_candidates`; the model's first);
- `fusion.kernel_tile_predicted_ns`: the cost model's time for its own tile (`--tune`
  reports it beside the measured times, so the model can be corrected from the gap).

Options: `tuning` (a cache file; "off": the cost model only), `candidate` (>= 0: every
such kernel takes its candidate of that index, the last where it has fewer; `--tune` builds
one program per index and times them all at once) and `gemm-schedule` ("ping-pong",
"cooperative", "one-warpgroup": each GEMM takes that schedule's first candidate; "model").
A cache entry whose tile this kernel cannot take (another fusec's candidates) is not used,
and the reason is said.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from fusec.runtime import tuning
from fusec.compiler.targets.cuda.device import ELEMENT_BYTES, GROUP_OP, CudaCodegenError
from fusec.passes import attributes, cost_model, gemm_cost
from fusec.passes.grouping import model_functions
from fusec.passes.registry import Pass, PassError, register


@dataclass
class KernelTiles:
    """One kernel's tuning key, the model's prediction for its tile and the candidates."""

    key: str
    candidates: list[tuple[int, ...]]
    predicted_us: float


def gemm_tiles(group: ir.Operation, device: cost_model.Device) -> KernelTiles:
    from fusec.compiler.targets.cuda import wgmma
    from fusec.compiler.targets.cuda.tc_gemm import (_bytes, _problem, _step_name,
                                                     epilogue_seconds, out_type_of,
                                                     siblings_s, tc_parts)

    ops = [o.operation for o in group.regions[0].blocks[0].operations]
    siblings = attributes.GEMM_SIBLINGS in group.attributes
    parts = tc_parts(group)
    tc = parts[0]
    found, chain = tc.operands, tc.chain
    out = out_type_of(found.mm, chain)
    steps = "|".join("+".join(_step_name(o) for o in p.chain if o.name == "linalg.generic")
                     or "none" for p in parts)
    b = "nk" if found.lb.transposed else "kn"
    n_text = ",".join(str(p.operands.n) for p in parts)
    key = (f"tc_gemm m={found.m} n={n_text} k={found.k} a={found.a.element} out={out} "
           f"b={b} epilogue={steps}" + (" pair" if tc.pair else "") +
           (" siblings" if siblings else ""))
    if siblings:
        predicted = siblings_s(parts, device)
        return KernelTiles(key, predicted[1] if predicted else [],
                           (predicted[0] if predicted else 0.0) * 1e6)
    eb = ELEMENT_BYTES[found.a.element]
    epilogue = epilogue_seconds(found, chain, device)
    n = tc.n_computed
    candidates = gemm_cost.tc_gemm_tile_candidates(found.m, n, found.k, eb, b == "kn",
                                                    device, epilogue, splits=not tc.pair)
    if tc.pair:  # the tiles the pair kernel takes (64 columns of each product at least)
        problem = _problem(found, out, pair=True)
        candidates = [t for t in candidates
                      if wgmma.refusal(problem, wgmma.GemmTile(*t)) is None]
    ab = _bytes([found.a.source] + [f.b.source for f in tc.b_operands]) + \
        _bytes([ops[-1].operands[0]])
    predicted = gemm_cost.tc_gemm_tile_s(found.m, n, found.k, ab, device, candidates[0],
                                          epilogue)
    return KernelTiles(key, candidates, predicted * 1e6)


def attention_tiles(group: ir.Operation, device: cost_model.Device) -> KernelTiles:
    from fusec.compiler.targets.cuda.attention_layouts import match_in, operand_views
    from fusec.passes.fusion.attention_mask import causal_bound

    m = match_in(group)
    _, o = operand_views(group, m)
    causal = causal_bound(m, o.m, o.n)
    mask = "none"
    if attributes.ATTENTION in group.attributes:
        params = ir.DictAttr(group.attributes[attributes.ATTENTION])
        if "mask" in params:
            mask = ir.StringAttr(params["mask"]).value
    key = (f"attention batch={o.batch} q={o.m} kv={o.n} d={o.d} el={o.el} out={o.out_el} "
           f"mask={mask} causal={'none' if causal is None else causal}")
    eb = ELEMENT_BYTES[o.el]
    tiles = cost_model.attention_tile_candidates(o.d, eb, o.m, o.n, device, causal is not None)
    candidates = [(t.bm, t.bn, t.stages) for t in tiles]
    predicted = cost_model.attention_s(o.batch, o.m, o.n, o.d, causal is not None, device)
    return KernelTiles(key, candidates, predicted * 1e6)


def kernel_tiles(group: ir.Operation, device: cost_model.Device) -> KernelTiles | None:
    """The tuning key and candidates of a tunable group (None: not one)."""
    if attributes.PATH not in group.attributes:
        return None
    path = ir.StringAttr(group.attributes[attributes.PATH]).value
    if path == "tc_gemm":
        return gemm_tiles(group, device)
    if path == "attention":
        return attention_tiles(group, device)
    return None


def _from_cache(entry: dict, tiles: KernelTiles) -> tuple[tuple[int, ...] | None, str]:
    tile = tuple(entry.get("tile") or ())
    if tile not in tiles.candidates:
        return None, (f"cost model (the tuning cache's tile {list(tile)} is not one of this "
                      f"kernel's candidates)")
    measured, model_us = entry.get("measured_us"), entry.get("model_us")
    text = f"tuned: {measured:.1f} us measured" if isinstance(measured, (int, float)) \
        else "tuned"
    if isinstance(model_us, (int, float)):
        text += f", the cost model's tile {entry.get('model_tile')} {model_us:.1f} us"
    return tile, text


def choose_tiles(func: ir.Operation, device_name: str, cache_path: str,
                 candidate: int, gemm_schedule: str = "model") -> int:
    """Record the tile of every tunable group of `func`; returns how many there are.
    `gemm_schedule` ("ping-pong", "cooperative", "one-warpgroup"; "model": as chosen)
    restricts a GEMM's tile to that schedule's first candidate (the model's choice where it
    is one)."""
    device = cost_model.device_named(device_name)
    entries = tuning.load(cache_path) if candidate < 0 else {}
    count = 0
    for op in func.regions[0].blocks[0].operations:
        group = op.operation
        if group.name != GROUP_OP:
            continue
        try:
            tiles = kernel_tiles(group, device)
        except CudaCodegenError:
            continue  # code generation says why, located
        if tiles is None:
            continue
        count += 1
        tile, source = tiles.candidates[0], "cost model"
        forced = _schedule_tile(tiles, gemm_schedule)
        if forced is not None:
            tile, source = forced
        elif candidate >= 0:
            tile = tiles.candidates[min(candidate, len(tiles.candidates) - 1)]
            source = f"candidate {min(candidate, len(tiles.candidates) - 1)} (--tune)"
        else:
            entry = entries.get(tuning.entry_key(device.name, tiles.key))
            if entry is not None:
                chosen, source = _from_cache(entry, tiles)
                tile = chosen or tile
        i64 = ir.IntegerType.get_signless(64)
        group.attributes[attributes.TUNE_KEY] = ir.StringAttr.get(tiles.key)
        group.attributes[attributes.KERNEL_TILE] = ir.DenseI64ArrayAttr.get(list(tile))
        group.attributes[attributes.KERNEL_TILE_FROM] = ir.StringAttr.get(source)
        group.attributes[attributes.KERNEL_TILE_CANDIDATES] = ir.IntegerAttr.get(
            i64, len(tiles.candidates))
        group.attributes[attributes.KERNEL_TILE_PREDICTED_NS] = ir.IntegerAttr.get(
            i64, round(tiles.predicted_us * 1e3))
    return count


def recorded_tile(group: ir.Operation) -> list[int] | None:
    """The tile `--fusion-gpu-choose-tiles` recorded on `group` (None: not run)."""
    if attributes.KERNEL_TILE not in group.attributes:
        return None
    return list(ir.DenseI64ArrayAttr(group.attributes[attributes.KERNEL_TILE]))


def tuning_info(group: ir.Operation) -> dict:
    """What this pass recorded on `group`, for the launch's info (runtime/tuning.py)."""
    return attributes.tuning_info(group.attributes)


def _schedule_tile(tiles: KernelTiles, schedule: str) -> tuple[tuple[int, ...], str] | None:
    """The first GEMM candidate of `schedule` (None: "model", not a GEMM, or none of that
    schedule: then the model's tile, said in the source)."""
    if schedule == "model" or not tiles.key.startswith("tc_gemm"):
        return None
    want = gemm_cost.GEMM_SCHEDULES[schedule]
    for tile in tiles.candidates:
        if gemm_cost.tile_schedule(tile) == want:
            return tile, f"--cuda-gemm-schedule {schedule}"
    return tiles.candidates[0], (f"cost model (--cuda-gemm-schedule {schedule}: this GEMM "
                                 f"has no such tile: fewer tiles than SMs)")


@register
@dataclass
class ChooseTilesPass(Pass):
    """Each tensor-core GEMM's and attention kernel's tile: tuned (the cache) or the cost
    model's; the key, the source and the candidates' count recorded on the group."""

    ARGUMENT = "fusion-gpu-choose-tiles"
    device: str = "nvidia-h200"
    tuning: str = "off"
    candidate: int = -1
    gemm_schedule: str = "model"

    def run(self, module: ir.Operation) -> None:
        try:
            for func in model_functions(module):
                choose_tiles(func, self.device, self.tuning, self.candidate,
                             self.gemm_schedule)
        except ValueError as e:
            raise PassError(str(e)) from None
