"""The GPU GEMM's cost model: our tensor-core kernel (compiler/targets/cuda/wgmma.py, three
schedules) against cuBLASLt, the tile and schedule of ours, its epilogue's cost, and whether
a row-normalisation in front of a GEMM is folded into it. Pure functions of plain numbers
and a device description (passes/cost_model.py's `Device`), as the rest of the cost model.
"""

from __future__ import annotations

from fusec.passes.cost_model import Device, kernel_s, roofline_s


# ---------------------------------------------------------------- GEMM: ours or the library's
#
# Measured on the H200 (bench/RESULTS.md runs 45-48, bf16, one process): the tensor-core
# family of compiler/targets/cuda/wgmma.py (128 x 128 tiles, one warpgroup) reaches
# 598-649 TFLOP/s with 4 stages (one CTA per SM) and 631-688 with 3 (two CTAs per SM) on
# 8192-sized problems, against cuBLAS's 663-776; on small and ragged ones it is 1.7-2.4x
# faster than cuBLAS, whose call overhead and tile choice dominate there. The model: our
# kernel runs whole waves of one tile's MMAs at TC_GEMM_EFFICIENCY of the contraction peak
# per SM (`matmul_flops_per_s`, below the H200's real peak: cuBLAS passes it); the library
# runs at LIBRARY_GEMM_EFFICIENCY with no wave quantisation (it picks its tile) plus
# LIBRARY_CALL_S of call overhead beyond a kernel launch; both at least their HBM time.
# LIBRARY_CALL_S fitted on run 42 (H200), 191 and 200 (H100) of bench/RESULTS.md (CUDA-event
# medians, one process): where neither is compute bound (128x128x64 to 1000x520x264) torch.mm
# took 8-16 us longer than our kernel; on GPT-2's projection shapes 10-22 us longer than
# this model with 3 us; our runtime's own cuBLASLt call for GPT-2's QKV 11-22 us longer
# (runs 198, 200).
TC_GEMM_EFFICIENCY = 0.90  # one CTA per SM: ~611 TFLOP/s
LIBRARY_GEMM_EFFICIENCY = 1.05  # ~713 TFLOP/s, the middle of cuBLAS's 663-776
LIBRARY_CALL_S = 10e-6
# An artifact replayed as a CUDA graph (CudaOptions.graph) pays none of that host overhead:
# each cuBLASLt call is its kernel(s) in the graph. Measured on an H100 (RESULTS run 252,
# ResNet-50's 16 GEMMs, 20 calls per graph): torch.mm took 2.6-4.2 us a call, where this
# model with no call overhead (the launch, then compute or HBM time) gives 4.1-4.6.
LIBRARY_GRAPH_CALL_S = 0.0
# Our epilogue's arithmetic runs on the CTA's 128 threads while its tensor cores wait, with
# one or two CTAs per SM to issue it: a fraction of the scalar peak (`flops_per_s`).
# Measured: linear + bias + GELU(tanh) * 0.5 at 4096x4096x1024 (about 25 weighted ops per
# element, TC_EPILOGUE_OP_WEIGHTS) took ~30 us more than the plain GEMM: ~0.2 of the peak.
TC_EPILOGUE_ISSUE = 0.2
# Weighted ops of an epilogue payload op (transcendentals run on the SFU or libdevice; casts
# are folded into loads and stores): what `tc_epilogue_s` counts.
TC_EPILOGUE_OP_WEIGHTS = {"math": 4.0, "arith.extf": 0.0, "arith.truncf": 0.5,
                          "arith.divf": 4.0}


# Row passes of our GEMM's epilogue unrolled per loop iteration: all 32 for a light
# epilogue (its loads must all be in flight at once: it is memory-latency bound), 8 for one
# with more than TC_EPILOGUE_LIGHT_OPS weighted ops per element (compute bound, its loads
# hidden behind the arithmetic; all 32 cost ~0.35 s of ptxas and LLVM time per kernel: a
# GPT-2 block compiled in 2.0 s instead of 1.6).
TC_EPILOGUE_LIGHT_OPS = 8.0


def tc_epilogue_unroll(weighted_ops: float) -> int:
    return 32 if weighted_ops <= TC_EPILOGUE_LIGHT_OPS else 8


def tc_epilogue_s(elements: int, weighted_ops: float, device: Device) -> float:
    """Predicted time our GEMM spends on its fused epilogue's arithmetic."""
    return elements * weighted_ops / (device.flops_per_s * TC_EPILOGUE_ISSUE)


def norm_prologue_fold_pays(m: int, ns: list[int], k: int, element_bytes: int,
                            row_values: int, row_terms: list[int], device: Device) -> bool:
    """Folding a per-row affine prologue (LayerNorm, RMSNorm: fusion-fold-norm-prologue) into
    the weights and epilogues of the GEMMs reading it (`ns`: their widths; `row_terms`: each
    one's terms). Unfolded: the normalised [m, k] operand is written once (its statistics
    are read from X either way), and each GEMM runs as the faster of ours and cuBLASLt.
    Folded: each GEMM runs ours with the epilogue (per output element a multiply per row
    value, a multiply-add per term; the row values and the terms' columns read), or
    cuBLASLt and a kernel for the epilogue, whichever is faster."""
    unfolded = roofline_s(m * k * element_bytes, 0, device)
    folded = 0.0
    for n, terms in zip(ns, row_terms):
        moved = (m * k + k * n + m * n) * element_bytes
        ours = tc_gemm_tile_s(m, n, k, moved, device,
                              tc_gemm_tile(m, n, k, element_bytes, device))
        library = library_gemm_s(m, n, k, moved, device)
        unfolded += min(ours, library)
        vectors = 4 * (m * (row_values + terms) + n * terms)
        epilogue = tc_epilogue_s(m * n, row_values + 2 * terms, device)
        ours = tc_gemm_tile_s(m, n, k, moved, device,
                              tc_gemm_tile(m, n, k, element_bytes, device, epilogue),
                              epilogue) + roofline_s(vectors, 0, device)
        library += kernel_s(2 * 4 * m * n + vectors, 0, device)
        folded += min(ours, library)
    return folded < unfolded


# Two CTAs per SM (3 stages, 97 KB of shared memory each) against one (4 stages, 129 KB):
# the two share the SM, each at half speed, but one's epilogue and pipeline fill run beside
# the other's main loop: measured (RESULTS.md run 47) 0.93-0.95x the time per wave-pair on
# 8192-sized problems, and worse where the tiles make fewer than two full waves.
TWO_CTA_WAVE_FACTOR = 0.94


def tc_gemm_ctas_per_sm(tiles: int, device: Device) -> int:
    """1 (4 stages) or 2 (3 stages) CTAs of our GEMM per SM, by whole waves."""
    units = device.parallel_units
    one = -(-tiles // units)
    two = 2 * -(-tiles // (2 * units)) * TWO_CTA_WAVE_FACTOR
    return 2 if two < one else 1


# Our GEMM's tile shapes (BM x BN, BK = one 128-byte swizzle row of 16-bit elements): one
# warpgroup holds the BM x BN f32 accumulator in registers, BM * BN / 128 per thread, so at
# most 128 x 128 (128 registers; 128 x 256 would spill).
TC_GEMM_TILES = ((128, 128), (64, 256), (128, 64), (64, 128))
TC_PINGPONG = 1  # the schedule value of compiler/targets/cuda/wgmma.py's ping-pong kernel
TC_COOPERATIVE = 2  # and of its cooperative variant (BM 256: both consumers on each tile)
TC_COOPERATIVE_STAGES = 4  # beside 32-row epilogue buffers (3 beside 64-row ones: run 205)
# The schedules by name (`--cuda-gemm-schedule`, `fusion.why`) and value.
GEMM_SCHEDULES = {"one-warpgroup": 0, "ping-pong": TC_PINGPONG, "cooperative": TC_COOPERATIVE}
SCHEDULE_NAMES = {value: name for name, value in GEMM_SCHEDULES.items()}
TC_GEMM_MAX_ACCUMULATOR = 128 * 128


def tc_epilogue_stride(bn: int) -> int:
    """f32 values per row of a persistent GEMM's epilogue buffer for a BN-wide tile: BN
    padded to 8 more than a multiple of 32 (rows 8 banks apart), so that a warp's store of
    its accumulator fragment (8 rows x 4 threads x 2 floats) takes the two wavefronts its
    256 bytes need; rows of exactly 128 floats all start at bank 0 and the store was 8-way
    conflicted (ncu on GPT-2's fc GEMM, H200: 21% of the kernel's shared wavefronts
    excessive)."""
    return bn + (8 - bn) % 32


def tc_pingpong_fits(m: int, n: int, element_bytes: int, device: Device) -> bool:
    """The persistent ping-pong schedule (128 x 128 tiles, a ring of four stages over the
    CTA's tiles beside a 64-row f32 buffer per consumer) takes this output: at least as
    many tiles as SMs (with fewer, no CTA has a second tile to overlap with) and its shared
    memory within the SM's."""
    bk = 128 // element_bytes
    budget = device.shared_bytes_per_unit - 2048  # the block's reserved shared memory
    return -(-m // 128) * -(-n // 128) >= device.parallel_units and \
        4 * (128 + 128) * bk * element_bytes + 2 * 64 * tc_epilogue_stride(128) * 4 <= budget


def tc_cooperative_fits(m: int, n: int, element_bytes: int, device: Device) -> bool:
    """The persistent cooperative schedule (256 x 128 tiles, both consumers on each,
    TC_COOPERATIVE_STAGES stages beside the consumers' 32-row f32 buffers at least) takes
    this output: at least as many of its tiles as SMs, and its shared memory within the
    SM's."""
    bk = 128 // element_bytes
    budget = device.shared_bytes_per_unit - 2048
    return -(-m // 256) * -(-n // 128) >= device.parallel_units and \
        TC_COOPERATIVE_STAGES * (256 + 128) * bk * element_bytes + \
        2 * 32 * tc_epilogue_stride(128) * 4 <= budget


def tile_schedule(tile: tuple[int, ...]) -> int:
    """The schedule of a tile (BM, BN, BK, stages[, schedule[, splits]]): 0 without a fifth
    value."""
    return tile[4] if len(tile) > 4 else 0


def tile_splits(tile: tuple[int, ...]) -> int:
    """Split-K's splits of a tile: 1 without a sixth value."""
    return tile[5] if len(tile) > 5 else 1


def _tc_one_warpgroup_tile(m: int, n: int, device: Device) -> tuple[int, ...]:
    tiles = -(-m // 128) * -(-n // 128)
    return (128, 128, 64, 3 if tc_gemm_ctas_per_sm(tiles, device) == 2 else 4)


# A GEMM whose 128 x 128 tiles fill at most half the SMs takes 64 x 128 tiles where the
# model predicts them faster: twice the CTAs, still one wave, each half the MMAs. Measured
# on an H100 (RESULTS run 252, ResNet-50's 16 GEMMs at batch 1, 4 to 50 tiles of 128 x 128,
# per launch in a CUDA graph): 64 x 128 took 0.69-0.84 of 128 x 128's time on every one
# (8.67 -> 6.45 us at 196 x 256 x 1024); on the H200 (bench/tuning-h200.json) 0.76 at
# 1000 x 520 x 264 (40 tiles), 1.00 at 2048 x 1024 x 1024 (128 tiles: not taken there).
TC_SMALL_GRID_TILE = (64, 128, 64, 4)
# Split-K (wgmma.GemmTile.splits), for GEMMs whose tiles fill at most half the SMs: TC_SPLITS
# tried, each split at least TC_SPLIT_MIN_K_TILES k-tiles (its pipeline's stages and then
# some). Each CTA writes its f32 partial tile and the tile's last CTA reads all of them
# back, at TC_SPLIT_SM_BYTES_PER_S (one SM's share of L2: the partials stay there), plus
# TC_SPLIT_FIXUP_S for the fence, the counter's atomic and the barriers. Fitted on an H100
# (RESULTS run 258: six GEMMs of 1-196 rows and K = 2304-4608, each at 1, 2, 4 and 8
# splits, per launch in a CUDA graph): the model's gain over one split against the
# measured one within 0.6 us on 13 of 18 (1 us on 15), the best split (4) the model's on
# all six; at 16 x 4096 x 4096 it overestimates the gain (6.1 us predicted, 3.3 measured).
TC_SPLIT_K = True
TC_SPLITS = (2, 4, 8)
TC_SPLIT_MIN_K_TILES = 4
TC_SPLIT_SM_BYTES_PER_S = 50e9
TC_SPLIT_FIXUP_S = 1.5e-6


def _small_grid(m: int, n: int, device: Device) -> bool:
    """128 x 128 tiles would fill at most half the SMs (TC_SMALL_GRID_TILE's and split-K's
    rule)."""
    return 2 * -(-m // 128) * -(-n // 128) <= device.parallel_units


def tc_split_tiles(m: int, n: int, k: int, device: Device) -> list[tuple[int, ...]]:
    """Split-K tiles (BM, BN, BK, stages, 0, splits) of TC_SMALL_GRID_TILE's shape: each
    split of TC_SPLITS that keeps the CTAs within one wave and every split at least
    TC_SPLIT_MIN_K_TILES k-tiles."""
    bm, bn, bk, stages = TC_SMALL_GRID_TILE
    tiles = -(-m // bm) * -(-n // bn)
    k_tiles = -(-k // bk)
    return [(bm, bn, bk, stages, 0, s) for s in TC_SPLITS
            if tiles * s <= device.parallel_units and k_tiles >= s * TC_SPLIT_MIN_K_TILES]


def tc_gemm_tile(m: int, n: int, k: int, element_bytes: int, device: Device,
                 epilogue_s: float = 0.0, splits: bool = True) -> tuple[int, ...]:
    """The model's tile (BM, BN, BK, stages[, schedule]) for an M x N x K GEMM: 128 x 128,
    one warpgroup with 4 stages (one CTA per SM) or 3 (two CTAs), by whole waves
    (`tc_gemm_ctas_per_sm`); 64 x 128 (TC_SMALL_GRID_TILE) where 128 x 128 fills at most
    half the SMs and the model predicts it faster; or, for 16-bit inputs, a persistent
    schedule (a fifth value: TC_PINGPONG, 128 x 128 tiles; TC_COOPERATIVE, 256 x 128) where
    its tiles fill the SMs and `tc_gemm_s` predicts it the fastest with the epilogue's
    arithmetic (`epilogue_s`); with `splits` (one GEMM, not a pair) and TC_SPLIT_K, split-K
    tiles (`tc_split_tiles`, a sixth value) where 128 x 128 tiles fill at most half the SMs."""
    tiles = [_tc_one_warpgroup_tile(m, n, device)]
    if _small_grid(m, n, device):
        tiles.append(TC_SMALL_GRID_TILE)
        if splits and TC_SPLIT_K:
            tiles += tc_split_tiles(m, n, k, device)
    if element_bytes == 2 and tc_pingpong_fits(m, n, element_bytes, device):
        tiles.append((128, 128, 64, 4, TC_PINGPONG))
    if element_bytes == 2 and tc_cooperative_fits(m, n, element_bytes, device):
        tiles.append((256, 128, 64, TC_COOPERATIVE_STAGES, TC_COOPERATIVE))
    return min(tiles, key=lambda tile: tc_gemm_tile_s(m, n, k, 0, device, tile, epilogue_s))


def tc_gemm_tile_candidates(m: int, n: int, k: int, element_bytes: int, n_major_b: bool,
                            device: Device, epilogue_s: float = 0.0,
                            splits: bool = True) -> list[tuple[int, ...]]:
    """The tiles `--tune` measures for our GEMM, the model's choice first, then the other
    schedules' tiles (below), then split-K's (`splits`: one GEMM, not a pair; with
    TC_SPLIT_K), then each shape of TC_GEMM_TILES with the deepest pipeline that fits one
    CTA per SM and the deepest that fits two, no tile wider than the problem needs, no
    pipeline deeper than K's tiles (`n_major_b`: B is K x N; every tile takes either
    layout)."""
    first = tc_gemm_tile(m, n, k, element_bytes, device, epilogue_s, splits)
    out = [first]
    bk = 128 // element_bytes
    k_tiles = max(1, -(-k // bk))
    budget = device.shared_bytes_per_unit - 1024  # the block's reserved shared memory
    # The other schedules next: the one-warpgroup tile where the model chose a persistent
    # one, then the ping-pong and cooperative tiles where they fit (measured against each
    # other on an H100, RESULTS runs 200-205: ping-pong 1.14-1.31x one warpgroup on GPT-2's
    # projections; cooperative 1.20-1.29x on 4096- and 8192-sized problems).
    if tile_schedule(first):
        out.append(_tc_one_warpgroup_tile(m, n, device))
    for tile, fits in (((128, 128, bk, 4, TC_PINGPONG), tc_pingpong_fits),
                       ((256, 128, bk, TC_COOPERATIVE_STAGES, TC_COOPERATIVE),
                        tc_cooperative_fits)):
        if tile not in out and fits(m, n, element_bytes, device):
            out.append(tile)
    if splits and TC_SPLIT_K and _small_grid(m, n, device):
        out += [tile for tile in tc_split_tiles(m, n, k, device) if tile not in out]
    for bm, bn in TC_GEMM_TILES:
        if bm * bn > TC_GEMM_MAX_ACCUMULATOR or (bm > 64 and m <= 64) or \
                (bn > 64 and n <= 64):
            continue
        stage = (bm + bn) * bk * element_bytes
        for ctas in (1, 2):
            stages = min((budget // ctas - 1024) // stage, 8, k_tiles)
            if stages < 2 or ctas * max(stages * stage, bm * bn * 4) > budget:
                continue
            tile = (bm, bn, bk, stages)
            if tile not in out:
                out.append(tile)
    return out


# What one wave of our GEMM leaves exposed beyond its tiles' MMAs: the pipeline's fill and
# the accumulator's store and epilogue, per wave of one-warpgroup CTAs at one CTA per SM (at
# two, per pair of waves: the other CTA's MMAs run beside), once for the ping-pong kernel
# (its consumers' epilogues run beside each other's MMAs, its ring loads the next tile's
# stages during this one's). Fitted on an H100 (RESULTS run 200): the one-warpgroup kernel
# took 1.04-1.40x the wave model without it on GPT-2's four projection shapes, the
# ping-pong 0.89-1.07x with it; at 8192^3 both the model and the device put one warpgroup
# at two CTAs per SM 1.07x ahead.
TC_GEMM_EXPOSED_S = 2e-6
# The cooperative schedule's tiles (256 x 128, both consumers on each, 4 stages) run their
# MMAs at this fraction of `matmul_flops_per_s` (the one-warpgroup kernel's 128 x 128 tiles
# at TC_GEMM_EFFICIENCY), each round of one tile per SM with TC_COOPERATIVE_EXPOSED_S
# exposed (its accumulator's way out through shared memory; the epilogue's arithmetic is
# not hidden either). Fitted on an H100 (RESULTS run 205): 8192^3 at 751 TFLOP/s,
# 8192x4096x4096 and 16384x4096x4096 at 757-763, GPT-2's K = 768 shapes at 471-535: this
# model within 4% on all five.
TC_COOPERATIVE_EFFICIENCY = 1.20
TC_COOPERATIVE_EXPOSED_S = 3e-6
# The ping-pong schedule's tiles: measured on GPT-2's four projection shapes (3-12 rounds,
# runs 200 and 203) at 0.95-1.05 of this model; at 8192^3 (32 rounds of 128 x 128 tiles,
# bound by L2's bandwidth into the SMs) 1.27x slower than it, where the cooperative
# schedule is predicted (and measured) faster anyway.
TC_PINGPONG_EFFICIENCY = 0.97


def tc_gemm_s(m: int, n: int, k: int, bytes_moved: int, device: Device, tile_m: int = 128,
              tile_n: int = 128, tile_k: int = 64, schedule: int = 0,
              epilogue_s: float = 0.0, splits: int = 1) -> float:
    """Predicted time of our tensor-core GEMM kernel (with its epilogue's traffic in
    `bytes_moved` and its arithmetic's time, `tc_epilogue_s`, in `epilogue_s`): whole waves
    of whole tiles (the persistent schedules: rounds of one tile per SM) with what each
    leaves exposed, or the HBM time, plus one launch. The ping-pong schedule hides a tile's
    epilogue behind the other consumer's MMAs of the next, up to their time. Split-K
    (`splits`): a CTA per tile and split, each over its share of the k-tiles, then the
    partials' way through L2 and the last CTA's sum (TC_SPLIT_*)."""
    tiles = -(-m // tile_m) * -(-n // tile_n) * splits
    units = device.parallel_units
    efficiency = {TC_COOPERATIVE: TC_COOPERATIVE_EFFICIENCY,
                  TC_PINGPONG: TC_PINGPONG_EFFICIENCY}.get(schedule, TC_GEMM_EFFICIENCY)
    k_tiles = -(-k // tile_k)
    k_tiles = -(-k_tiles // splits)  # of each CTA (the largest split's)
    per_tile = 2 * tile_m * tile_n * (k_tiles * tile_k) / (
        device.matmul_flops_per_s * efficiency / units)
    if splits > 1:
        per_tile += TC_SPLIT_FIXUP_S + (splits + 1) * tile_m * tile_n * 4 / \
            TC_SPLIT_SM_BYTES_PER_S
    rounds = -(-tiles // units)
    if schedule == TC_COOPERATIVE:
        busy = rounds * (per_tile + TC_COOPERATIVE_EXPOSED_S) + epilogue_s
    elif schedule == TC_PINGPONG:
        epilogue_tile = epilogue_s / rounds
        busy = rounds * max(per_tile, epilogue_tile) + epilogue_tile + TC_GEMM_EXPOSED_S
    elif tc_gemm_ctas_per_sm(tiles, device) == 2:
        pairs = -(-tiles // (2 * units))
        busy = 2 * pairs * TWO_CTA_WAVE_FACTOR * per_tile + pairs * TC_GEMM_EXPOSED_S + \
            epilogue_s
    else:
        busy = rounds * (per_tile + TC_GEMM_EXPOSED_S) + epilogue_s
    return device.launch_s + max(busy, bytes_moved / device.hbm_bytes_per_s)


def tc_gemm_tile_s(m: int, n: int, k: int, bytes_moved: int, device: Device,
                   tile: tuple[int, ...], epilogue_s: float = 0.0) -> float:
    """`tc_gemm_s` for a tile as `tc_gemm_tile` gives it."""
    return tc_gemm_s(m, n, k, bytes_moved, device, tile[0], tile[1], tile[2],
                     tile_schedule(tile), epilogue_s, tile_splits(tile))


def library_gemm_s(m: int, n: int, k: int, bytes_moved: int, device: Device,
                   graph: bool = False) -> float:
    """Predicted time of one cuBLASLt call (its own epilogue included); `graph`: in an
    artifact replayed as a CUDA graph (no host call overhead)."""
    flops = 2 * m * n * k
    call = LIBRARY_GRAPH_CALL_S if graph else LIBRARY_CALL_S
    return device.launch_s + call + max(
        flops / (device.matmul_flops_per_s * LIBRARY_GEMM_EFFICIENCY),
        bytes_moved / device.hbm_bytes_per_s)


def prefer_tc_gemm(ours_s: float, library_s: float) -> bool:
    """Our kernel (with the epilogue it fuses) against the library's call plus the kernels
    that it leaves: ours when predicted faster."""
    return ours_s < library_s
