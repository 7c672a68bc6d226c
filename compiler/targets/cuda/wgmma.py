"""CUDA target: the tensor-core GEMM family for sm_90a (TMA + mbarrier pipeline + wgmma).

One kernel computes a BM x BN tile of D = A @ B per CTA with one warpgroup (128
threads), written with the upstream `nvgpu` and `nvvm` dialects:

    thread 0: for s < STAGES: expect_tx(bar[s]); TMA A[m0:, k_s] and B[n0:, k_s] -> stage s
    for i < K / BK:                          (every thread)
        wait(bar[i % STAGES], phase (i / STAGES) % 2)
        acc = wgmma(A stage, B stage, acc)   (BK / 16 wgmma.m64nBNk16 per 64 rows, async)
        wgmma.wait_group 1                   (the previous tile's MMAs are done: its stage
        thread 0: refill that stage with k-tile i - 1 + STAGES          is free again)
    wgmma.wait_group 0; acc -> shared memory (f32); one rounding to the output type, one
    coalesced store (rows and columns past M, N are not written; TMA fills out-of-range
    loads with zeros, so K, M and N need not be multiples of the tile). A fused epilogue
    (`Epilogue`: bias, residual, activations, casts: the planner's elementwise chain) runs
    on each thread's four f32 values before that one rounding and store.

The grid is one-dimensional (ceil(M / BM) * ceil(N / BN) CTAs), the tiles taken in groups
of GROUP_ROWS rows of tiles, each group column by column: the CTAs resident together share
a few rows of A and a few columns of B, which stay in L2.

A pair (`GemmProblem.pair`: SwiGLU's gate and up projections, two products of one A) loads
BN / 2 rows of B and the same BN / 2 of B2 into each stage (a third tensor map), so each
tile's accumulator holds BN / 2 columns of each product; its epilogue reads both and
stores BN / 2 output columns (`out_columns`, `b_boxes`).

Sibling GEMMs (`GemmProblem.segments`: q, k and v projections of one A) are one GEMM over
their concatenated columns: each tile lies in one segment (every segment but the last a
multiple of BN), loads that segment's B through its own map (a map per segment), and runs
that segment's epilogue into its own output (`outputs`): an `scf.index_switch` on the
tile's segment around the B loads and the epilogue (`_by_segment`), uniform per tile.

Operands: A is M x K row-major (K contiguous); B is either N x K (K contiguous, a Linear's
weight: `b_layout="nk"`) or K x N (N contiguous: `"kn"`, wgmma's transposed B). Both are
read through TMA descriptors the host encodes (`cuTensorMapEncodeTiled`, 128-byte swizzle):
the kernel's first two parameters are `!llvm.ptr`, which `lower` (and the CUDA target's
`lower_kernels`) turn into 128-byte `__grid_constant__` parameters passed by value
(`GRID_CONSTANT_MAPS`); D and the epilogue's operands are bare pointers.

The shared memory of the pipeline is the kernel's placement of its operand tiles
(`#gpu.address_space<workgroup>`, dynamic shared memory); the accumulator lives in
registers until the epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from fusec.compiler.targets.cuda.device import CudaCodegenError
from fusec.passes.gemm_cost import TC_COOPERATIVE, TC_PINGPONG, tc_epilogue_stride

# Element types wgmma takes from shared memory with f32 accumulation.
MMA_INPUTS = {"bf16": 2, "f16": 2}
# Dynamic shared memory a block may take on sm_90 (227 KB) less the 1 KB of the kernel's
# static shared memory (its mbarriers, aligned).
DYNAMIC_SHARED_LIMIT = 227 * 1024 - 1024
OUTPUTS = {"bf16": 2, "f16": 2, "f32": 4}
WARPGROUP = 128
PINGPONG = TC_PINGPONG  # GemmTile.schedule of the persistent ping-pong kernel
COOPERATIVE = TC_COOPERATIVE  # its cooperative variant: both consumers on one 256-row tile
PERSISTENT = (PINGPONG, COOPERATIVE)  # schedules of `pingpong_kernel_text`
CONSUMERS = 2  # its consumer warpgroups
# Row passes of the epilogue per loop iteration (see kernel_text): all of them. The
# accumulator registers are free by then (the values are in shared memory), so each
# thread's loads of the epilogue's operands are all in flight at once; with 8 passes per
# iteration a bias + residual epilogue doubled the kernel's time at 8192x768x768 on the
# H200 (0.057 ms against 0.028 ms for the plain GEMM: four round trips to memory).
EPILOGUE_UNROLL = 32
# Tiles in groups of this many rows of tiles, each group taken column by column (the CTAs
# at work together then read a few rows of A and a few columns of B, which stay in L2,
# instead of one row of A and every column of B); 1: row by row.
GROUP_ROWS = 8
# The persistent kernels' epilogue: once, in a loop over the accumulator's parts (True), or
# once per part (False).
LOOPED_EPILOGUE = True
# Split-K: the shared-memory word (after the stages or the accumulator) through which the
# CTA's thread 0 tells the others whether it is its tile's last (16 bytes, aligned).
SPLIT_FLAG_BYTES = 16


@dataclass(frozen=True)
class GemmTile:
    """One CTA's tile and pipeline depth (the cost model chooses; these are the defaults)."""

    bm: int = 128
    bn: int = 128
    bk: int = 64
    stages: int = 4
    # 0: one warpgroup per CTA, a CTA per tile (`kernel_text`); 1: persistent, a producer
    # and two consumer warpgroups taking turns (`pingpong_kernel_text`); 2: persistent, the
    # two consumers each taking half of one tile (BM 256) at once (the same function).
    schedule: int = 0
    # Split-K (one warpgroup only): each tile's k-tiles in `splits` ranges, one CTA each; the
    # CTAs write their f32 partial products to a scratch buffer and the last of a tile to
    # arrive (a counter per tile) sums them in split order and runs the epilogue.
    splits: int = 1

    def stage_bytes(self, element_bytes: int) -> int:
        return (self.bm + self.bn) * self.bk * element_bytes

    def epilogue_rows(self, element_bytes: int) -> int:
        """A persistent schedule's consumer takes its accumulator out through shared
        memory 64 rows at a time, or 32 where 64 would not fit beside the stages (the
        cooperative schedule's fourth stage)."""
        stages = self.stages * self.stage_bytes(element_bytes)
        row = tc_epilogue_stride(self.bn) * 4
        return 64 if stages + CONSUMERS * 64 * row <= DYNAMIC_SHARED_LIMIT else 32

    def shared_bytes(self, element_bytes: int) -> int:
        """Dynamic shared memory: the stages, or the f32 accumulator tile if larger (the
        epilogue reuses the stages' memory), plus nothing else (mbarriers are static).
        Ping-pong and cooperative: the stages, then the epilogue's own buffer
        (`epilogue_rows` f32 rows of each consumer's 128 at a time)."""
        if self.schedule in PERSISTENT:
            return self.stages * self.stage_bytes(element_bytes) + \
                CONSUMERS * self.epilogue_rows(element_bytes) * tc_epilogue_stride(self.bn) * 4
        return max(self.stages * self.stage_bytes(element_bytes), self.bm * self.bn * 4) + \
            (SPLIT_FLAG_BYTES if self.splits > 1 else 0)


class Epilogue(Protocol):
    """What runs on the accumulator before the store (compiler/targets/cuda/tc_gemm.py)."""

    def arguments(self) -> list[str]:
        """Kernel parameters after D, as `%name: type` text."""

    def setup(self, emit: Callable[[str], None]) -> None:
        """Emit what the epilogue needs once, at the kernel's start."""

    def begin(self) -> None:
        """A new region of `apply` calls starts (what they emit is visible within it)."""

    def apply(self, emit: Callable[[str], None], row: str, col: str,
              lanes: list[str], lanes2: list[str] | None = None) -> list[str]:
        """Emit the chain for the f32 values `lanes` at (`row`, `col` + lane) (index SSA
        names, the output's row and first column; a pair's: A @ B's values, and A @ B2's at
        the same place in `lanes2`); return the values to store, each of the output's
        element type."""


@dataclass(frozen=True)
class GemmProblem:
    m: int
    n: int
    k: int
    in_type: str = "bf16"
    out_type: str = "bf16"
    b_layout: str = "nk"  # "nk": B is N x K (K contiguous); "kn": K x N
    # Two GEMMs sharing A (SwiGLU's gate and up projections): B and B2 of one shape and
    # layout, each tile's BN accumulator columns BN / 2 of A @ B then the same BN / 2 of
    # A @ B2, which the epilogue joins column by column into a BN / 2 wide output tile
    # (`n` is each GEMM's N, the output's).
    pair: bool = False
    # Sibling GEMMs of one A (q, k and v projections): the N of each, in the order of B's
    # concatenated columns (`n` is their sum). Each has its own B map, output and epilogue;
    # a tile's columns lie in one segment (every segment but the last a multiple of BN).
    segments: tuple[int, ...] = ()


def b_maps(problem: GemmProblem) -> int:
    """The kernel's B maps: B, a pair's B2, or one per segment."""
    return 2 if problem.pair else max(1, len(problem.segments))


def outputs(problem: GemmProblem) -> list[tuple[str, int]]:
    """The kernel's outputs (D parameters), each (its SSA name, its columns)."""
    widths = problem.segments or (problem.n,)
    return [("%d" if s == 0 else f"%d{s}", n) for s, n in enumerate(widths)]


def out_columns(problem: GemmProblem, tile: GemmTile) -> int:
    """The output columns of one tile: BN, or BN / 2 for a pair."""
    return tile.bn // 2 if problem.pair else tile.bn


def b_boxes(problem: GemmProblem, tile: GemmTile) -> list[tuple[int, int, int]]:
    """B's TMA boxes of a stage, each (its map: 0 for B, 1 for a pair's B2; its first column
    past the tile's first output column; its byte offset in the stage, after A): one box of
    BN (a pair: BN / 2 each) rows x BK for an N x K B; boxes of BK rows x 64 columns (128
    bytes) for a K x N one."""
    eb = MMA_INPUTS[problem.in_type]
    operands = 2 if problem.pair else 1
    width = tile.bn // operands
    if problem.b_layout == "nk":
        return [(j, 0, j * width * tile.bk * eb) for j in range(operands)]
    per = max(1, width // 64)
    return [(j // per, 64 * (j % per), j * tile.bk * 64 * eb) for j in range(tile.bn // 64)]


def refusal(problem: GemmProblem, tile: GemmTile = GemmTile()) -> str | None:
    """Why this family cannot build `problem` (None: it can)."""
    if problem.in_type not in MMA_INPUTS:
        return f"operands of type {problem.in_type} (wgmma here takes bf16, f16)"
    if problem.out_type not in OUTPUTS:
        return f"output of type {problem.out_type}"
    if problem.b_layout not in ("nk", "kn"):
        return f"B layout '{problem.b_layout}'"
    eb = MMA_INPUTS[problem.in_type]
    # TMA: global strides are multiples of 16 bytes.
    inner_b = problem.k if problem.b_layout == "nk" else problem.n
    if (problem.k * eb) % 16 or (inner_b * eb) % 16:
        return "a row of A or B is not a multiple of 16 bytes (TMA strides)"
    if problem.n % 4:
        return "N is not a multiple of 4 (the epilogue's vector stores)"
    if tile.bk * eb != 128 or tile.bm % 64 or tile.bn % 8 or tile.bn > 256:
        return f"tile {tile} (BK must fill one 128-byte swizzle row, BM a multiple of 64)"
    if problem.pair and tile.bn % 128:
        return "a GEMM pair needs BN a multiple of 128 (64 columns of each at least)"
    if tile.splits > 1:
        k_tiles = -(-problem.k // tile.bk)
        if tile.schedule or problem.pair or problem.segments:
            return "split-K is built for one GEMM on the one-warpgroup schedule"
        if tile.splits > k_tiles:
            return (f"split-K into {tile.splits} leaves a split without k-tiles "
                    f"({k_tiles} k-tiles of {tile.bk})")
    if problem.segments:
        if problem.pair or sum(problem.segments) != problem.n:
            return "sibling segments of a pair, or not adding up to N"
        if any(n % out_columns(problem, tile) for n in problem.segments[:-1]):
            return (f"a sibling GEMM of N not a multiple of BN {out_columns(problem, tile)} "
                    f"before the last (N: {list(problem.segments)})")
        if any(n % 4 or (problem.b_layout == "kn" and (n * eb) % 16)
               for n in problem.segments):
            return "a sibling GEMM's N is not a multiple of 4 (or 8, for a K x N B's TMA)"
    return None


MAP_RANK = 5


def map_entry(param: int, dtype: int, dims: list[int], strides: list[int], box: list[int],
              swizzle: int, offset: int) -> list[int]:
    """One tensor-map row of a launch (runtime/shim_cuda.c, FUSEC_MAP_FIELDS): the kernel
    parameter it replaces, CUtensorMapDataType, the rank, the dims and the box innermost
    first, the byte strides of dims 1.., CUtensorMapSwizzle and the operand's byte offset;
    padded to MAP_RANK dims."""
    rank = len(dims)
    if rank > MAP_RANK or len(strides) != rank - 1 or len(box) != rank:
        raise CudaCodegenError(f"a tensor map of rank {rank}")
    dims = dims + [1] * (MAP_RANK - rank)
    last = strides[-1] * dims[rank - 1] if strides else 0
    strides = strides + [last] * (MAP_RANK - 1 - len(strides))
    box = box + [1] * (MAP_RANK - rank)
    return [param, dtype, rank, *dims, *strides, *box, swizzle, offset]


def tiles(problem: GemmProblem, tile: GemmTile = GemmTile()) -> int:
    """Output tiles."""
    return -(-problem.m // tile.bm) * -(-problem.n // out_columns(problem, tile))


def grid(problem: GemmProblem, tile: GemmTile = GemmTile()) -> int:
    """CTAs of the one-dimensional grid: a CTA per tile and split."""
    return tiles(problem, tile) * tile.splits


def split_scratch(problem: GemmProblem, tile: GemmTile) -> tuple[int, int]:
    """Split-K's f32 partials (floats: a BM x BN tile per split and tile) and counters (i32,
    one per tile), or (0, 0) without split-K."""
    if tile.splits <= 1:
        return 0, 0
    return tile.splits * tiles(problem, tile) * tile.bm * tile.bn, tiles(problem, tile)


def launch_geometry(problem: GemmProblem, tile: GemmTile, units: int) -> tuple[int, int, int]:
    """(grid, block, dynamic shared bytes) of the kernel `build_kernel_text` gives for `tile`
    on a device of `units` SMs."""
    eb = MMA_INPUTS[problem.in_type]
    if tile.schedule in PERSISTENT:
        return pingpong_grid(problem, tile, units), PINGPONG_BLOCK, tile.shared_bytes(eb)
    return grid(problem, tile), WARPGROUP, tile.shared_bytes(eb)


def build_kernel_text(name: str, problem: GemmProblem, tile: GemmTile, units: int,
                      epilogue: Epilogue | None = None, unroll: int = EPILOGUE_UNROLL,
                      group_rows: int = GROUP_ROWS) -> str:
    """The kernel of `tile`'s schedule."""
    if tile.schedule in PERSISTENT:
        return pingpong_kernel_text(name, problem, tile, pingpong_grid(problem, tile, units),
                                    epilogue, unroll, group_rows=group_rows)
    return kernel_text(name, problem, tile, epilogue, unroll, group_rows)


def _operand_types(p: GemmProblem, t: GemmTile) -> tuple[str, str, str, str, str, list[int]]:
    """The TMA maps' descriptor types of A and B, their shared-memory boxes' memref types,
    B's box shape and the byte offsets of B's boxes in a stage (after A): one box of BN rows
    (N) x BK (K) for an N x K B (a pair: one of BN / 2 rows of each B), BN / 64 boxes of BK
    rows (K) x 64 columns (N, 128 bytes) for a K x N one (`b_boxes`)."""
    ws = "#gpu.address_space<workgroup>"
    el = p.in_type
    tm_a = (f"!nvgpu.tensormap.descriptor<tensor = memref<{t.bm}x{t.bk}x{el}, 3>, "
            f"swizzle = swizzle_128b, l2promo = l2promo_256b, oob = zero, interleave = none>")
    b_box = f"{t.bn // (2 if p.pair else 1)}x{t.bk}" if p.b_layout == "nk" else f"{t.bk}x64"
    b_offsets = [offset for _, _, offset in b_boxes(p, t)]
    tm_b = (f"!nvgpu.tensormap.descriptor<tensor = memref<{b_box}x{el}, 3>, "
            f"swizzle = swizzle_128b, l2promo = l2promo_256b, oob = zero, interleave = none>")
    return (tm_a, tm_b, f"memref<{t.bm}x{t.bk}x{el}, {ws}>", f"memref<{b_box}x{el}, {ws}>",
            b_box, b_offsets)


def kernel_text(name: str, problem: GemmProblem, tile: GemmTile = GemmTile(),
                epilogue: Epilogue | None = None, unroll: int = EPILOGUE_UNROLL,
                group_rows: int = GROUP_ROWS) -> str:
    """The kernel as a `gpu.func` (text), for a gpu.module whose target is sm_90a;
    `unroll`: row passes of the epilogue per loop iteration (at most EPILOGUE_UNROLL)."""
    why = refusal(problem, tile)
    if why is not None:
        raise CudaCodegenError(f"tensor-core GEMM: {why}")
    p, t = problem, tile
    eb = MMA_INPUTS[p.in_type]
    el = p.in_type
    k_tiles = -(-p.k // t.bk)
    split = t.splits > 1
    # Split s takes k-tiles [s * K_t / S, (s + 1) * K_t / S): each floor or ceil of K_t / S.
    stages = min(t.stages, -(-k_tiles // t.splits))
    a_bytes = t.bm * t.bk * eb
    b_bytes = t.bn * t.bk * eb
    stage_bytes = a_bytes + b_bytes
    ws = "#gpu.address_space<workgroup>"
    bar = f"!nvgpu.mbarrier.group<memorySpace = {ws}, num_barriers = {stages}>"
    tm_a, tm_b, a_tile, b_tile, b_box, _ = _operand_types(p, t)
    boxes = b_boxes(p, t)
    n_base = "%n0l" if p.segments else "%n0"  # the tile's first column in its B
    b_loads = [(mi, f"%n0_{col}" if col else n_base, offset) for mi, col, offset in boxes]
    epilogues = _epilogues(epilogue, p)
    # The MMA's view of the B stage is K x N whatever the layout: wgmma's B operand is K-major
    # (its bytes are the N x K box, K contiguous) unless transposed (the K x N boxes).
    b_mma = f"memref<{t.bk}x{t.bn}x{el}, {ws}>"
    transpose = "transposeB, " if p.b_layout == "kn" else ""
    lines: list[str] = []
    emit = lines.append

    def load_stage(indent: str, stage: str, ktile: str, u: str) -> None:
        """Thread 0: expect the stage's bytes, then its TMA loads (coordinates innermost
        first); `u` makes the SSA names of this copy unique."""
        emit(f"{indent}%sa_{u} = arith.muli {stage}, %c_stage_bytes : index")
        emit(f"{indent}%k0_{u} = arith.muli {ktile}, %c_bk : index")
        emit(f"{indent}%va_{u} = memref.view %smem[%sa_{u}][] : memref<?xi8, {ws}> "
             f"to {a_tile}")
        emit(f"{indent}nvgpu.mbarrier.arrive.expect_tx %bar[{stage}], %c_tx : {bar}")
        emit(f"{indent}nvgpu.tma.async.load %tma_a[%k0_{u}, %m0], %bar[{stage}] to "
             f"%va_{u} : {tm_a}, {bar} -> {a_tile}")
        for j, (mi, n_coord, _) in enumerate(b_loads):
            emit(f"{indent}%sb{j}_{u} = arith.addi %sa_{u}, %c_b_off{j} : index")
            emit(f"{indent}%vb{j}_{u} = memref.view %smem[%sb{j}_{u}][] : "
                 f"memref<?xi8, {ws}> to {b_tile}")
            coords = f"%k0_{u}, {n_coord}" if p.b_layout == "nk" else f"{n_coord}, %k0_{u}"

            def load(s: int, ind: str, j=j, mi=mi, coords=coords) -> None:
                emit(f"{ind}nvgpu.tma.async.load %tma_{_b_map(s or mi)}[{coords}], "
                     f"%bar[{stage}] to %vb{j}_{u} : {tm_b}, {bar} -> {b_tile}")
            _by_segment(emit, indent, p, seg, load)

    scratch, counters = split_scratch(p, t)
    split_parameters = f", %sk_ws: memref<{scratch}xf32>, %sk_cnt: memref<{counters}xi32>"
    _kernel_head(emit, name, p, epilogues, tm_a, tm_b,
                 f"known_block_size = array<i32: {WARPGROUP}, 1, 1>",
                 split_parameters if split else "")
    consts = {"c0": 0, "c1": 1, "c2": 2, "c4": 4, "c_bk": t.bk,
              "c_bm": t.bm, "c_bn": t.bn, "c_stages": stages, "c_k_tiles": k_tiles,
              "c_stage_bytes": stage_bytes, "c_tx": stage_bytes, "c_m": p.m, "c_n": p.n,
              "c_ticks": 10000000, "c_n_tiles": -(-p.n // out_columns(p, t)),
              "c_tile_n": out_columns(p, t)}
    for j, (_, _, offset) in enumerate(b_loads):
        consts[f"c_b_off{j}"] = a_bytes + offset
    for cname, value in consts.items():
        emit(f"  %{cname} = arith.constant {value} : index")
    emit("  %tid = gpu.thread_id x")
    emit("  %bid = gpu.block_id x")
    # The k-tiles of this CTA: all, or its split's (k_count of them from k_begin).
    k_count, prologue = "%c_k_tiles", "%c_stages"
    if split:
        emit(f"  %sk_c_tiles_total = arith.constant {counters} : index")
        emit(f"  %sk_c_splits = arith.constant {t.splits} : index")
        emit("  %sk_split = arith.divui %bid, %sk_c_tiles_total : index")
        emit("  %sk_tbid = arith.remui %bid, %sk_c_tiles_total : index")
        emit("  %sk_kb_num = arith.muli %sk_split, %c_k_tiles : index")
        emit("  %sk_k_begin = arith.divui %sk_kb_num, %sk_c_splits : index")
        emit("  %sk_ke_num = arith.addi %sk_kb_num, %c_k_tiles : index")
        emit("  %sk_k_end = arith.divui %sk_ke_num, %sk_c_splits : index")
        emit("  %sk_k_count = arith.subi %sk_k_end, %sk_k_begin : index")
        emit("  %sk_k_prologue = arith.minui %sk_k_count, %c_stages : index")
        k_count, prologue = "%sk_k_count", "%sk_k_prologue"
    _tile_coordinates(emit, "  ", "%sk_tbid" if split else "%bid", "", p, t, group_rows)
    emit("  %m0 = arith.muli %by, %c_bm : index")
    emit("  %n0 = arith.muli %bx, %c_tile_n : index")
    seg = _segment_of(emit, "  ", p, "%n0", "")[0] if p.segments else None
    for col in sorted({col for _, col, _ in boxes} - {0}):
        emit(f"  %c_n{col} = arith.constant {col} : index")
        emit(f"  %n0_{col} = arith.addi {n_base}, %c_n{col} : index")
    emit(f"  %smem = gpu.dynamic_shared_memory : memref<?xi8, {ws}>")
    emit(f"  %bar = nvgpu.mbarrier.create -> {bar}")
    emit("  %first = arith.cmpi eq, %tid, %c0 : index")
    emit("  scf.if %first {")
    for s in range(stages):
        emit(f"    %cs{s} = arith.constant {s} : index")
        emit(f"    nvgpu.mbarrier.init %bar[%cs{s}], %c1 : {bar}")
    _prefetch_maps(emit, p, tm_a, tm_b)
    emit("  }")
    emit("  gpu.barrier")
    # Prologue: the first `stages` k-tiles in flight.
    emit("  scf.if %first {")
    emit(f"    scf.for %ps = %c0 to {prologue} step %c1 {{")
    if split:
        emit("      %sk_gps = arith.addi %ps, %sk_k_begin : index")
    load_stage("      ", "%ps", "%sk_gps" if split else "%ps", "1")
    emit("    }")
    emit("  }")
    # The MMAs of one k-tile. nvgpu's wgmma expansion steps B's descriptor for an N-major
    # (transposed) B only, so a K-major B is given one call per 64 rows and 16 of K, each at
    # its own shared-memory offset (+32 bytes per 16 of K inside the 128-byte swizzle row,
    # +64 rows of 128 bytes per m64 block of A): one wgmma instruction per call, no stepping.
    # An N-major B is given one call per 64 rows, nvgpu stepping K inside it. Either way each
    # 64 rows have their own accumulator: nvgpu's store of one accumulator of several m64
    # blocks puts block i at row i * BN / 2, right for BN 128 only (BM 128, BN 64 gave
    # relative errors of 0.7-1.1 on an H100, RESULTS run 252).
    if p.b_layout == "nk":
        parts = [(mh, kk) for mh in range(t.bm // 64) for kk in range(t.bk // 16)]
    else:
        parts = [(mh, None) for mh in range(t.bm // 64)]
    accs = [f"!nvgpu.warpgroup.accumulator<fragmented = vector<64x{t.bn}xf32>>"] * (t.bm // 64)
    groups = len(parts)  # commit groups per k-tile
    for h, ty in enumerate(accs):
        emit(f"  %acc0_{h} = nvgpu.warpgroup.mma.init.accumulator -> {ty}")
    names = ", ".join(f"%a{h} = %acc0_{h}" for h in range(len(accs)))
    emit(f"  %acc:{len(accs)} = scf.for %i = %c0 to {k_count} step %c1 iter_args({names}) "
         f"-> ({', '.join(accs)}) {{")
    emit("    %s = arith.remui %i, %c_stages : index")
    emit("    %round = arith.divui %i, %c_stages : index")
    emit("    %parity_i = arith.remui %round, %c2 : index")
    emit("    %parity_w = arith.index_cast %parity_i : index to i32")
    emit("    %parity = arith.trunci %parity_w : i32 to i1")
    emit(f"    nvgpu.mbarrier.try_wait.parity %bar[%s], %parity, %c_ticks : {bar}")
    emit("    %off_a = arith.muli %s, %c_stage_bytes : index")
    emit("    %off_b = arith.addi %off_a, %c_b_off0 : index")
    current = [f"%a{h}" for h in range(len(accs))]
    for q, (mh, kk) in enumerate(parts):
        if kk is None:
            a_ty, b_ty, frag = f"memref<64x{t.bk}x{el}, {ws}>", b_mma, f"vector<64x{t.bn}xf32>"
            emit(f"    %c_pa{q} = arith.constant {mh * 64 * t.bk * eb} : index")
            emit(f"    %oa{q} = arith.addi %off_a, %c_pa{q} : index")
            emit(f"    %ta{q} = memref.view %smem[%oa{q}][] : memref<?xi8, {ws}> to {a_ty}")
            emit(f"    %tb{q} = memref.view %smem[%off_b][] : memref<?xi8, {ws}> to {b_ty}")
            h = mh
        else:
            a_ty = f"memref<64x16x{el}, {ws}>"
            b_ty = f"memref<16x{t.bn}x{el}, {ws}>"
            frag = f"vector<64x{t.bn}xf32>"
            emit(f"    %c_pa{q} = arith.constant {mh * 64 * t.bk * eb + kk * 16 * eb} : index")
            emit(f"    %c_pb{q} = arith.constant {kk * 16 * eb} : index")
            emit(f"    %oa{q} = arith.addi %off_a, %c_pa{q} : index")
            emit(f"    %ob{q} = arith.addi %off_b, %c_pb{q} : index")
            emit(f"    %ta{q} = memref.view %smem[%oa{q}][] : memref<?xi8, {ws}> to {a_ty}")
            emit(f"    %tb{q} = memref.view %smem[%ob{q}][] : memref<?xi8, {ws}> to {b_ty}")
            h = mh
        emit(f"    %da{q} = nvgpu.warpgroup.generate.descriptor %ta{q}, %tma_a : {a_ty}, {tm_a} "
             f"-> !nvgpu.warpgroup.descriptor<tensor = {a_ty}>")
        emit(f"    %db{q} = nvgpu.warpgroup.generate.descriptor %tb{q}, %tma_b : {b_ty}, {tm_b} "
             f"-> !nvgpu.warpgroup.descriptor<tensor = {b_ty}>")
        # Each call commits one group; up to a k-tile's groups stay in flight (nvgpu's
        # default waits for all but one after every call, which serialises the calls).
        emit(f"    %mma{q} = nvgpu.warpgroup.mma %da{q}, %db{q}, {current[h]} "
             f"{{{transpose}waitGroup = {len(parts)} : i64}} : "
             f"<tensor = {a_ty}>, <tensor = {b_ty}>, <fragmented = {frag}> -> "
             f"<fragmented = {frag}>")
        current[h] = f"%mma{q}"
    # The previous k-tile's MMAs are done (at most this tile's groups are in flight): its
    # stage takes the tile STAGES ahead of it.
    emit(f"    nvvm.wgmma.wait.group.sync.aligned {groups}")
    emit("    %has_prev = arith.cmpi uge, %i, %c1 : index")
    emit("    %prev = arith.subi %i, %c1 : index")
    emit("    %refill = arith.addi %prev, %c_stages : index")
    emit(f"    %in_range = arith.cmpi ult, %refill, {k_count} : index")
    emit("    %do0 = arith.andi %has_prev, %in_range : i1")
    emit("    %do = arith.andi %do0, %first : i1")
    emit("    scf.if %do {")
    emit("      %rs = arith.remui %prev, %c_stages : index")
    if split:
        emit("      %sk_grefill = arith.addi %refill, %sk_k_begin : index")
    load_stage("      ", "%rs", "%sk_grefill" if split else "%refill", "2")
    emit("    }")
    emit(f"    scf.yield {', '.join(current)} : {', '.join(accs)}")
    emit("  }")
    emit("  nvvm.wgmma.wait.group.sync.aligned 0")
    emit("  gpu.barrier")
    # The accumulator through shared memory (f32), then the epilogue and the store.
    emit(f"  %accs = memref.view %smem[%c0][] : memref<?xi8, {ws}> to "
         f"memref<{t.bm}x{t.bn}xf32, {ws}>")
    for h, ty in enumerate(accs):
        rows = t.bm // len(accs)
        emit(f"  %c_acc_off{h} = arith.constant {h * rows * t.bn * 4} : index")
        emit(f"  %accs{h} = memref.view %smem[%c_acc_off{h}][] : memref<?xi8, {ws}> to "
             f"memref<{rows}x{t.bn}xf32, {ws}>")
        emit(f"  nvgpu.warpgroup.mma.store %acc#{h}, %accs{h} : <fragmented = "
             f"vector<{rows}x{t.bn}xf32>> to memref<{rows}x{t.bn}xf32, {ws}>")
    emit("  gpu.barrier")
    indent = "  "
    if split:
        _split_fixup(emit, t, scratch, counters, stages * stage_bytes)
        indent = "    "
    _by_segment(emit, indent, p, seg, lambda s, ind: _emit_epilogue(
        emit, p, t, epilogues[s], unroll, "%accs", f"memref<{t.bm}x{t.bn}xf32, {ws}>",
        rows=t.bm, buffer_row0=None, out_row0="%m0", tid="%tid", n0=n_base, indent=ind,
        segment=s, tag=f"_s{s}" if p.segments else ""))
    if split:
        emit("  }")
    emit("  gpu.return")
    emit("}")
    return "\n".join(lines)


def _split_fixup(emit: Callable[[str], None], t: GemmTile, scratch: int, counters: int,
                 stages_bytes: int) -> None:
    """Split-K, after the CTA's partial product is in shared memory (%accs, f32): the partial
    out to its place in %sk_ws (split-major, a BM x BN tile each); a fence; thread 0 counts
    the CTA in at its tile's counter, and the last of the tile's splits to arrive (it resets
    the counter for the next launch) sums the tile's partials in split order (the result
    does not depend on which CTA was last) back into %accs. Opens `scf.if %sk_last {` for
    the epilogue, which the caller closes. The threadFenceReduction pattern: every thread's
    stores, a gpu-scope fence, the block's barrier, then the atomic (thread 0's acquire
    fence right after it, every thread's again after the barrier that shares the flag). The
    counters must be zero when a launch starts: the artifact's runs are one at a time (its
    temporaries are shared too), and every launch leaves them zero."""
    ws = "#gpu.address_space<workgroup>"
    elems = t.bm * t.bn
    flag_offset = max(stages_bytes, elems * 4)
    scratch_type, counter_type = f"memref<{scratch}xf32>", f"memref<{counters}xi32>"
    emit(f"  %sk_ws_al = memref.assume_alignment %sk_ws, 16 : {scratch_type}")
    emit(f"  %sk_c_tile_elems = arith.constant {elems} : index")
    emit(f"  %sk_c_elem_step = arith.constant {WARPGROUP * 4} : index")
    emit(f"  %sk_accf = memref.view %smem[%c0][] : memref<?xi8, {ws}> to memref<{elems}xf32, {ws}>")
    emit("  %sk_e0 = arith.muli %tid, %c4 : index")
    emit("  %sk_w_row = arith.muli %sk_split, %sk_c_tiles_total : index")
    emit("  %sk_w_tile = arith.addi %sk_w_row, %sk_tbid : index")
    emit("  %sk_w_base = arith.muli %sk_w_tile, %sk_c_tile_elems : index")
    emit("  scf.for %sk_e = %sk_e0 to %sk_c_tile_elems step %sk_c_elem_step {")
    emit(f"    %sk_pv = vector.load %sk_accf[%sk_e] : memref<{elems}xf32, {ws}>, vector<4xf32>")
    emit("    %sk_we = arith.addi %sk_w_base, %sk_e : index")
    emit(f"    vector.store %sk_pv, %sk_ws_al[%sk_we] : {scratch_type}, vector<4xf32>")
    emit("  }")
    emit('  llvm.fence syncscope("device") release')
    emit("  gpu.barrier")
    emit(f"  %sk_c_flag_off = arith.constant {flag_offset} : index")
    emit(f"  %sk_flagv = memref.view %smem[%sk_c_flag_off][] : memref<?xi8, {ws}> to "
         f"memref<1xi32, {ws}>")
    emit("  scf.if %first {")
    emit("    %sk_one_i32 = arith.constant 1 : i32")
    emit("    %sk_arrived = memref.atomic_rmw addi %sk_one_i32, %sk_cnt[%sk_tbid] : "
         f"(i32, {counter_type}) -> i32")
    emit(f"    %sk_c_last_i32 = arith.constant {t.splits - 1} : i32")
    emit('    llvm.fence syncscope("device") acquire')  # the atomic's acquire side
    emit("    %sk_is_last = arith.cmpi eq, %sk_arrived, %sk_c_last_i32 : i32")
    emit("    %sk_flag_i32 = arith.extui %sk_is_last : i1 to i32")
    emit(f"    memref.store %sk_flag_i32, %sk_flagv[%c0] : memref<1xi32, {ws}>")
    emit("    scf.if %sk_is_last {")
    emit("      %sk_zero_i32 = arith.constant 0 : i32")
    emit(f"      memref.store %sk_zero_i32, %sk_cnt[%sk_tbid] : {counter_type}")
    emit("    }")
    emit("  }")
    emit("  gpu.barrier")
    emit(f"  %sk_flag_r = memref.load %sk_flagv[%c0] : memref<1xi32, {ws}>")
    emit("  %sk_zero_flag = arith.constant 0 : i32")
    emit("  %sk_last = arith.cmpi ne, %sk_flag_r, %sk_zero_flag : i32")
    emit("  scf.if %sk_last {")
    emit('    llvm.fence syncscope("device") acquire')
    emit("    %sk_z4 = arith.constant dense<0.0> : vector<4xf32>")
    emit("    scf.for %sk_e = %sk_e0 to %sk_c_tile_elems step %sk_c_elem_step {")
    emit("      %sk_sum = scf.for %sk_sp = %c0 to %sk_c_splits step %c1 iter_args(%sk_a = %sk_z4) "
         "-> (vector<4xf32>) {")
    emit("        %sk_r_row = arith.muli %sk_sp, %sk_c_tiles_total : index")
    emit("        %sk_r_tile = arith.addi %sk_r_row, %sk_tbid : index")
    emit("        %sk_r_base = arith.muli %sk_r_tile, %sk_c_tile_elems : index")
    emit("        %sk_re = arith.addi %sk_r_base, %sk_e : index")
    emit(f"        %sk_rv = vector.load %sk_ws_al[%sk_re] : {scratch_type}, vector<4xf32>")
    emit("        %sk_a2 = arith.addf %sk_a, %sk_rv : vector<4xf32>")
    emit("        scf.yield %sk_a2 : vector<4xf32>")
    emit("      }")
    emit(f"      vector.store %sk_sum, %sk_accf[%sk_e] : memref<{elems}xf32, {ws}>, vector<4xf32>")
    emit("    }")
    emit("    gpu.barrier")


def _tile_coordinates(emit: Callable[[str], None], ind: str, index: str, u: str,
                      p: GemmProblem, t: GemmTile, group_rows: int) -> None:
    """%bx{u}, %by{u}: the column and row of tile `index` (an SSA name), row by row, or in
    groups of `group_rows` rows of tiles, each group column by column (GROUP_ROWS)."""
    n_tiles = -(-p.n // out_columns(p, t))
    m_tiles = -(-p.m // t.bm)
    if group_rows <= 1 or m_tiles <= 1:
        emit(f"{ind}%bx{u} = arith.remui {index}, %c_n_tiles : index")
        emit(f"{ind}%by{u} = arith.divui {index}, %c_n_tiles : index")
        return
    emit(f"{ind}%c_grp_rows{u} = arith.constant {group_rows} : index")
    emit(f"{ind}%c_grp_tiles{u} = arith.constant {group_rows * n_tiles} : index")
    emit(f"{ind}%c_m_tiles{u} = arith.constant {m_tiles} : index")
    emit(f"{ind}%grp{u} = arith.divui {index}, %c_grp_tiles{u} : index")
    emit(f"{ind}%grp_m0{u} = arith.muli %grp{u}, %c_grp_rows{u} : index")
    emit(f"{ind}%grp_left{u} = arith.subi %c_m_tiles{u}, %grp_m0{u} : index")
    # The last group may have fewer rows: its tiles are the rest, still a whole column each.
    emit(f"{ind}%grp_h{u} = arith.minui %grp_left{u}, %c_grp_rows{u} : index")
    emit(f"{ind}%grp_i{u} = arith.remui {index}, %c_grp_tiles{u} : index")
    emit(f"{ind}%grp_r{u} = arith.remui %grp_i{u}, %grp_h{u} : index")
    emit(f"{ind}%by{u} = arith.addi %grp_m0{u}, %grp_r{u} : index")
    emit(f"{ind}%bx{u} = arith.divui %grp_i{u}, %grp_h{u} : index")


def _b_map(j: int) -> str:
    """The name of B map `j` (0: B; 1: a pair's B2 or the second segment's B; ...)."""
    return "b" if j == 0 else f"b{j + 1}"


def _map_parameters(p: GemmProblem) -> str:
    """The kernel's tensor-map parameters (A, then its B maps), first."""
    return ", ".join(f"%map_{x}: !llvm.ptr" for x in ["a"] + [_b_map(j) for j in
                                                           range(b_maps(p))])


def _maps_attribute(p: GemmProblem) -> str:
    """The kernel attribute marking its tensor-map parameters (`mark_grid_constant_maps`)."""
    maps = 1 + b_maps(p)
    return GRID_CONSTANT_MAPS if maps == 2 else f"{GRID_CONSTANT_MAPS} = {maps} : i64"


def _output_parameters(p: GemmProblem) -> str:
    """D (or each segment's D) as kernel parameters."""
    return ", ".join(f"{d}: memref<{p.m}x{n}x{p.out_type}>" for d, n in outputs(p))


def _align_outputs(emit: Callable[[str], None], p: GemmProblem) -> None:
    """%d_al (and each segment's %d<s>_al): D known 16-byte aligned."""
    for d, n in outputs(p):
        emit(f"  {d}_al = memref.assume_alignment {d}, 16 : memref<{p.m}x{n}x{p.out_type}>")


def _kernel_head(emit: Callable[[str], None], name: str, p: GemmProblem, epilogues: list,
                 tm_a: str, tm_b: str, attributes: str, tail: str = "") -> None:
    """The `gpu.func` line (maps, outputs, the epilogues' parameters; `attributes` and the
    maps' mark; `tail`: parameters after the epilogues', split-K's scratch and counters),
    the maps as descriptors, the outputs' alignment and the epilogues' setup.
    The maps arrive as pointers (the descriptor type has no kernel-argument lowering before
    outlining); the casts fold away once nvgpu's types are LLVM's. D is 16-byte aligned (a
    temporary of the runtime's, or an output it checked), so each thread's four values are
    one vector store."""
    extra = "".join(f", {a}" for e in epilogues if e for a in e.arguments()) + tail
    emit(f"gpu.func @{name}({_map_parameters(p)}, {_output_parameters(p)}{extra}) kernel "
         f"attributes {{{attributes}, {_maps_attribute(p)}}} {{")
    _cast_maps(emit, p, tm_a, tm_b)
    _align_outputs(emit, p)
    for e in epilogues:
        if e is not None:
            e.setup(lambda line: emit("  " + line))


def _cast_maps(emit: Callable[[str], None], p: GemmProblem, tm_a: str, tm_b: str) -> None:
    """The map parameters as nvgpu's descriptors: %tma_a, %tma_b (%tma_b2, ...)."""
    emit(f"  %tma_a = builtin.unrealized_conversion_cast %map_a : !llvm.ptr to {tm_a}")
    for j in range(b_maps(p)):
        x = _b_map(j)
        emit(f"  %tma_{x} = builtin.unrealized_conversion_cast %map_{x} : !llvm.ptr to {tm_b}")


def _prefetch_maps(emit: Callable[[str], None], p: GemmProblem, tm_a: str, tm_b: str) -> None:
    emit("    nvgpu.tma.prefetch.descriptor %tma_a : " + tm_a)
    for j in range(b_maps(p)):
        emit(f"    nvgpu.tma.prefetch.descriptor %tma_{_b_map(j)} : " + tm_b)


def _segment_of(emit: Callable[[str], None], ind: str, p: GemmProblem, n0: str, u: str
                ) -> tuple[str, str]:
    """The segment of the tile whose first (global) column is `n0`, and that column in its
    segment: %seg{u}, %n0l{u} (segments only)."""
    seg, start = "%c0", "%c0"
    first = 0
    for s, n in enumerate(p.segments[:-1], start=1):
        first += n
        emit(f"{ind}%c_seg{s}{u} = arith.constant {s} : index")
        emit(f"{ind}%c_start{s}{u} = arith.constant {first} : index")
        emit(f"{ind}%in{s}{u} = arith.cmpi uge, {n0}, %c_start{s}{u} : index")
        emit(f"{ind}%seg{s}{u} = arith.select %in{s}{u}, %c_seg{s}{u}, {seg} : index")
        emit(f"{ind}%start{s}{u} = arith.select %in{s}{u}, %c_start{s}{u}, {start} : index")
        seg, start = f"%seg{s}{u}", f"%start{s}{u}"
    emit(f"{ind}%n0l{u} = arith.subi {n0}, {start} : index")
    return seg, f"%n0l{u}"


def _by_segment(emit: Callable[[str], None], ind: str, p: GemmProblem, seg: str | None,
                body: Callable[[int, str], None]) -> None:
    """`body(s, indent)` for the tile's segment `seg` (an scf.index_switch; segment 0 in
    its default region), or `body(0, ind)` without segments."""
    if not p.segments:
        body(0, ind)
        return
    emit(f"{ind}scf.index_switch {seg}")
    for s in list(range(1, len(p.segments))) + [0]:
        emit(f"{ind}case {s} {{" if s else f"{ind}default {{")
        body(s, ind + "  ")
        emit(f"{ind}  scf.yield")
        emit(f"{ind}}}")


def _epilogues(epilogue: "Epilogue | list | None", p: GemmProblem) -> list:
    """One epilogue (or None) per output."""
    found = list(epilogue) if isinstance(epilogue, (list, tuple)) else [epilogue]
    if len(found) != len(outputs(p)):
        raise CudaCodegenError(f"tensor-core GEMM: {len(found)} epilogues for "
                               f"{len(outputs(p))} outputs")
    return found


# The persistent, warp-specialised schedule (`pingpong_kernel_text`): a producer warpgroup
# and two consumer warpgroups, each consumer a whole BM x BN tile, the two taking turns.
PINGPONG_BLOCK = (CONSUMERS + 1) * WARPGROUP
PRODUCER_REGISTERS = 40  # the producer's one thread issues TMA only (at 24 its index math spilled)


def descriptor_base(lbo: int) -> int:
    """A wgmma shared-memory matrix descriptor without its start address: 128-byte swizzle,
    8-row groups 1024 bytes apart, `lbo` bytes between 64-element column blocks (used where
    the matrix is read N-major)."""
    return (1 << 62) | ((1024 >> 4) << 32) | ((lbo >> 4) << 16)


def accumulator_struct(n: int) -> str:
    """The `!llvm.struct` of a thread's `n` f32 accumulator values (nvvm.wgmma.mma_async)."""
    return "!llvm.struct<(" + ", ".join(["f32"] * n) + ")>"


def pingpong_grid(problem: GemmProblem, tile: GemmTile, units: int) -> int:
    """One CTA per SM (`units`), or fewer where there are fewer tiles."""
    return max(1, min(grid(problem, tile), units))


def pingpong_kernel_text(name: str, problem: GemmProblem, tile: GemmTile, ctas: int,
                         epilogue: Epilogue | None = None,
                         unroll: int = EPILOGUE_UNROLL, setmaxnreg: bool = True,
                         group_rows: int = GROUP_ROWS,
                         looped_epilogue: bool = LOOPED_EPILOGUE) -> str:
    """The GEMM as a persistent kernel of `ctas` CTAs (CUTLASS's "ping-pong" schedule):

        producer warpgroup (its first thread), for each of the CTA's tiles i, each k-tile:
            wait until the stage is empty (its previous k-tile released), expect_tx, TMA
        consumer warpgroup w (of 2) takes the CTA's tiles i = w, w + 2, ...:
            for each k-tile: wait for its stage, wgmma, release the previous k-tile's stage
            the accumulator -> shared memory (64 rows at a time) -> epilogue -> D

    The stages are one ring over the CTA's tiles, consumed in order, so one consumer's
    epilogue runs while the other's MMAs do (the tensor cores are not idle between tiles),
    and the producer loads the next tile's first k-tiles during the last ones of this one.
    Mbarriers: `full` per stage (the producer's expect_tx), `empty` per stage (one arrival
    per warp of the consumer that read it), and the consumers' `turn` (tile i's main loop
    after tile i - 1's). The producer gives its registers to the consumers (setmaxnreg).
    The consumers issue `nvvm.wgmma.mma_async` on `!llvm.struct` accumulators (two m64
    halves of the BM x BN tile), the first k-tile of each tile with scale-d zero, and store
    their fragments to the epilogue buffer themselves.

    Cooperative (`tile.schedule` COOPERATIVE, BM 256): both consumers take every tile of
    the CTA, consumer w its rows 128 w .. 128 w + 127, from the same stages (each stage
    released by both: eight warps), so there is no turn; a 256 x 128 tile loads a quarter
    less of A and B per MMA than two 128 x 128 ones, but the epilogues are not hidden."""
    why = refusal(problem, tile)
    if why is not None:
        raise CudaCodegenError(f"tensor-core GEMM: {why}")
    p, t = problem, tile
    coop = t.schedule == COOPERATIVE
    if t.bm != (256 if coop else 128):
        raise CudaCodegenError(f"tensor-core GEMM: the {'cooperative' if coop else 'ping-pong'}"
                               f" schedule takes BM = {256 if coop else 128}, not {t.bm}")
    eb = MMA_INPUTS[p.in_type]
    el = p.in_type
    k_tiles = -(-p.k // t.bk)
    stages = t.stages
    a_bytes = t.bm * t.bk * eb
    b_bytes = t.bn * t.bk * eb
    stage_bytes = a_bytes + b_bytes
    m_tiles, n_tiles = -(-p.m // t.bm), -(-p.n // out_columns(p, t))
    tiles = m_tiles * n_tiles
    ws = "#gpu.address_space<workgroup>"
    # full and empty per stage, then the consumers' turn (see below).
    bar = f"!nvgpu.mbarrier.group<memorySpace = {ws}, num_barriers = {2 * stages + 1}>"
    tm_a, tm_b, a_tile, b_tile, _, _ = _operand_types(p, t)
    boxes = b_boxes(p, t)
    epilogues = _epilogues(epilogue, p)
    lines: list[str] = []
    emit = lines.append

    def tile_origin(ind: str, i: str, u: str) -> tuple[str, list[str], str | None]:
        """The CTA's `i`-th tile: its first row, per B box its first column (in its
        segment's B), and its segment (None without segments)."""
        emit(f"{ind}%ti_{u} = arith.muli {i}, %c_ctas : index")
        emit(f"{ind}%t_{u} = arith.addi %bid, %ti_{u} : index")
        _tile_coordinates(emit, ind, f"%t_{u}", f"_{u}", p, t, group_rows)
        emit(f"{ind}%m0_{u} = arith.muli %by_{u}, %c_bm : index")
        emit(f"{ind}%n0_{u} = arith.muli %bx_{u}, %c_tile_n : index")
        seg, base = None, f"%n0_{u}"
        if p.segments:
            seg, base = _segment_of(emit, ind, p, f"%n0_{u}", f"_{u}")
        n0s = []
        for _, col, _ in boxes:
            if col and f"%n0_{u}_{col}" not in n0s:
                emit(f"{ind}%n0_{u}_{col} = arith.addi {base}, %c_n{col} : index")
            n0s.append(f"%n0_{u}_{col}" if col else base)
        return f"%m0_{u}", n0s, seg

    def parity(ind: str, count: str, u: str) -> str:
        emit(f"{ind}%pr_{u} = arith.remui {count}, %c2 : index")
        emit(f"{ind}%pw_{u} = arith.index_cast %pr_{u} : index to i32")
        emit(f"{ind}%pb_{u} = arith.trunci %pw_{u} : i32 to i1")
        return f"%pb_{u}"

    _kernel_head(emit, name, p, epilogues, tm_a, tm_b,
                 f"known_block_size = array<i32: {PINGPONG_BLOCK}, 1, 1>, "
                 f"known_grid_size = array<i32: {ctas}, 1, 1>, nvvm.minctasm = 1 : i32")
    consts = {"c0": 0, "c1": 1, "c2": 2, "c4": 4, "c_bk": t.bk, "c_bm": t.bm, "c_bn": t.bn,
              "c_stages": stages, "c_k_tiles": k_tiles, "c_stage_bytes": stage_bytes,
              "c_tx": stage_bytes, "c_m": p.m, "c_n": p.n, "c_ticks": 10000000,
              "c_n_tiles": n_tiles, "c_tiles": tiles, "c_ctas": ctas,
              "c_consumers": CONSUMERS * WARPGROUP, "c_wg": WARPGROUP, "c_warp": 32,
              "c_epi": stages * stage_bytes, "c_tile_n": out_columns(p, t)}
    for j, (_, _, offset) in enumerate(boxes):
        consts[f"c_b_off{j}"] = a_bytes + offset
    for col in sorted({col for _, col, _ in boxes} - {0}):
        consts[f"c_n{col}"] = col
    for cname, value in consts.items():
        emit(f"  %{cname} = arith.constant {value} : index")
    emit("  %tid = gpu.thread_id x")
    emit("  %bid = gpu.block_id x")
    # The warpgroup's index, made warp-uniform by a shuffle from lane 0 (ptxas then knows
    # each role's branch is uniform: wgmma in a branch it deems divergent is serialised).
    emit("  %wg_raw = arith.divui %tid, %c_wg : index")
    emit("  %wg_i32 = arith.index_cast %wg_raw : index to i32")
    emit("  %c0_i32 = arith.constant 0 : i32")
    emit("  %c32_i32 = arith.constant 32 : i32")
    emit("  %wg_sh, %wg_ok = gpu.shuffle idx %wg_i32, %c0_i32, %c32_i32 : i32")
    emit("  %wg = arith.index_cast %wg_sh : i32 to index")
    # The CTA's tiles: bid, bid + ctas, ... below the tile count.
    emit("  %left = arith.subi %c_tiles, %bid : index")
    emit("  %left1 = arith.addi %left, %c_ctas : index")
    emit("  %left2 = arith.subi %left1, %c1 : index")
    emit("  %my_tiles = arith.divui %left2, %c_ctas : index")
    emit(f"  %smem = gpu.dynamic_shared_memory : memref<?xi8, {ws}>")
    emit(f"  %bar = nvgpu.mbarrier.create -> {bar}")
    emit("  %first = arith.cmpi eq, %tid, %c0 : index")
    emit("  scf.if %first {")
    emit(f"    %c_release = arith.constant {8 if coop else 4} : index")
    for s_ in range(stages):
        emit(f"    %cf{s_} = arith.constant {s_} : index")
        emit(f"    nvgpu.mbarrier.init %bar[%cf{s_}], %c1 : {bar}")
        emit(f"    %ce{s_} = arith.constant {stages + s_} : index")
        # Released by a consumer's 4 warps (cooperative: both consumers', 8).
        emit(f"    nvgpu.mbarrier.init %bar[%ce{s_}], %c_release : {bar}")
    emit(f"    %c_turn = arith.constant {2 * stages} : index")
    emit(f"    nvgpu.mbarrier.init %bar[%c_turn], %c1 : {bar}")
    _prefetch_maps(emit, p, tm_a, tm_b)
    emit("  }")
    emit("  gpu.barrier")
    # The producer warpgroup (after the consumers).
    emit(f"  %c_producer_wg = arith.constant {CONSUMERS} : index")
    emit("  %is_producer = arith.cmpi eq, %wg, %c_producer_wg : index")
    emit("  scf.if %is_producer {")
    if setmaxnreg:
        emit(f"    nvvm.setmaxregister decrease {PRODUCER_REGISTERS}")
    emit("    %loader = arith.cmpi eq, %tid, %c_consumers : index")
    emit("    scf.if %loader {")
    emit("      scf.for %pi = %c0 to %my_tiles step %c1 {")
    m0, n0s, seg_p = tile_origin("        ", "%pi", "p")
    emit("        %pg0 = arith.muli %pi, %c_k_tiles : index")
    emit("        scf.for %pk = %c0 to %c_k_tiles step %c1 {")
    ind = "          "
    emit(f"{ind}%pg = arith.addi %pg0, %pk : index")
    emit(f"{ind}%ps = arith.remui %pg, %c_stages : index")
    emit(f"{ind}%again = arith.cmpi uge, %pg, %c_stages : index")
    emit(f"{ind}scf.if %again {{")
    emit(f"{ind}  %pround = arith.divui %pg, %c_stages : index")
    emit(f"{ind}  %pround1 = arith.addi %pround, %c1 : index")
    released = parity(ind + "  ", "%pround1", "e")
    emit(f"{ind}  %pe = arith.addi %ps, %c_stages : index")
    emit(f"{ind}  nvgpu.mbarrier.try_wait.parity %bar[%pe], {released}, %c_ticks : {bar}")
    emit(f"{ind}}}")
    emit(f"{ind}%sa = arith.muli %ps, %c_stage_bytes : index")
    emit(f"{ind}%k0 = arith.muli %pk, %c_bk : index")
    emit(f"{ind}%va = memref.view %smem[%sa][] : memref<?xi8, {ws}> to {a_tile}")
    emit(f"{ind}nvgpu.mbarrier.arrive.expect_tx %bar[%ps], %c_tx : {bar}")
    emit(f"{ind}nvgpu.tma.async.load %tma_a[%k0, {m0}], %bar[%ps] to %va : {tm_a}, {bar} "
         f"-> {a_tile}")
    for j, (n_coord, (mi, _, _)) in enumerate(zip(n0s, boxes)):
        emit(f"{ind}%sb{j} = arith.addi %sa, %c_b_off{j} : index")
        emit(f"{ind}%vb{j} = memref.view %smem[%sb{j}][] : memref<?xi8, {ws}> to {b_tile}")
        coords = f"%k0, {n_coord}" if p.b_layout == "nk" else f"{n_coord}, %k0"

        def load(s: int, li: str, j=j, mi=mi, coords=coords) -> None:
            emit(f"{li}nvgpu.tma.async.load %tma_{_b_map(s or mi)}[{coords}], %bar[%ps] to "
                 f"%vb{j} : {tm_b}, {bar} -> {b_tile}")
        _by_segment(emit, ind, p, seg_p, load)
    emit("        }")
    emit("      }")
    emit("    }")
    emit("  }")
    # The consumers.
    regs = min(240, (65536 - WARPGROUP * PRODUCER_REGISTERS) // (CONSUMERS * WARPGROUP)
               // 8 * 8)
    emit("  %is_consumer = arith.cmpi ult, %wg, %c_producer_wg : index")
    emit("  scf.if %is_consumer {")
    if setmaxnreg:
        emit(f"    nvvm.setmaxregister increase {regs}")
    emit("    %ltid = arith.remui %tid, %c_wg : index")
    emit("    %wlane = arith.remui %tid, %c_warp : index")
    emit("    %warp_lead = arith.cmpi eq, %wlane, %c0 : index")
    emit("    %w1 = arith.addi %wg, %c1 : index")
    emit("    %wbar = arith.index_cast %w1 : index to i32")
    emit("    %c_wg_i32 = arith.constant 128 : i32")
    # The epilogue buffer: `er` f32 rows per consumer (rows er w ..), written from the
    # accumulator's fragment (thread t of warp v holds rows 16 (v % 4) + t / 4 (+ 8), columns
    # 8 c + 2 (t % 4) (+ 1)) and read back a row at a time by `_emit_epilogue`; with 32 rows,
    # an m64 half goes out in two parts, warps 0-1's rows then warps 2-3's.
    er = t.epilogue_rows(eb)
    parts = 64 // er
    # Rows padded (`tc_epilogue_stride`): the fragments' stores free of bank conflicts.
    ebuf_type = f"memref<{CONSUMERS * er}x{tc_epilogue_stride(t.bn)}xf32, {ws}>"
    emit(f"    %c_half_rows = arith.constant {er} : index")
    emit("    %erow0 = arith.muli %wg, %c_half_rows : index")
    emit(f"    %ebuf = memref.view %smem[%c_epi][] : memref<?xi8, {ws}> to {ebuf_type}")
    emit("    %wtid = arith.divui %ltid, %c_warp : index")
    emit("    %c16 = arith.constant 16 : index")
    emit("    %c8 = arith.constant 8 : index")
    if parts > 1:
        emit("    %wpart = arith.divui %wtid, %c2 : index")  # the part of its rows
        emit("    %wrow16 = arith.remui %wtid, %c2 : index")
        emit("    %frow0 = arith.muli %wrow16, %c16 : index")
    else:
        emit("    %frow0 = arith.muli %wtid, %c16 : index")
    emit("    %lq = arith.divui %wlane, %c4 : index")
    emit("    %lr = arith.remui %wlane, %c4 : index")
    emit("    %frow1 = arith.addi %frow0, %lq : index")
    emit("    %frow = arith.addi %frow1, %erow0 : index")
    emit("    %frow8 = arith.addi %frow, %c8 : index")
    emit("    %fcol0 = arith.muli %lr, %c2 : index")
    # Shared-memory byte addresses for the wgmma descriptors.
    emit(f"    %sptr = memref.extract_aligned_pointer_as_index %smem : memref<?xi8, {ws}> "
         f"-> index")
    emit("    %sbase = arith.index_cast %sptr : index to i64")
    emit("    %c4_i64 = arith.constant 4 : i64")
    emit("    %c3fff_i64 = arith.constant 16383 : i64")
    emit(f"    %desc_k = arith.constant {descriptor_base(0)} : i64")
    b_lbo = 0 if p.b_layout == "nk" else t.bk * 128
    emit(f"    %desc_b = arith.constant {descriptor_base(b_lbo)} : i64")
    if coop:
        # This consumer's half of A in each stage: descriptor units (16 bytes) past the
        # stage's start.
        emit("    %wg_i64 = arith.index_cast %wg : index to i64")
        emit(f"    %c_a_half = arith.constant {(128 * t.bk * eb) >> 4} : i64")
        emit("    %a_half = arith.muli %wg_i64, %c_a_half : i64")
        emit("    %c128 = arith.constant 128 : index")
        emit("    %wrow = arith.muli %wg, %c128 : index")
        emit("    scf.for %ci = %c0 to %my_tiles step %c1 {")
    else:
        emit("    scf.for %ci = %wg to %my_tiles step %c2 {")
    ind = "      "
    m0, n0s_c, seg_c = tile_origin(ind, "%ci", "c")
    if coop:
        emit(f"{ind}%m0w = arith.addi {m0}, %wrow : index")
        m0 = "%m0w"
    emit(f"{ind}%cg0 = arith.muli %ci, %c_k_tiles : index")
    # The consumers' turn: tile i's main loop starts once tile i - 1's has waited for all
    # its stages (the `turn` mbarrier completes phase j when tile j's main loop is done).
    # An mbarrier's parity wait tells the phase it waits for from the one after it only, so
    # a consumer must never wait for a stage more than one phase ahead of it: without the
    # turn, the second consumer's first wait (tile 1, a later round of the ring) passed at
    # once on the first round's barrier. The turn also keeps the two consumers' MMAs apart:
    # one's epilogue runs beside the other's main loop (CUTLASS's ordered math barrier).
    if not coop:
        emit(f"{ind}%c_turn_i = arith.constant {2 * stages} : index")
        emit(f"{ind}%not_first = arith.cmpi uge, %ci, %c1 : index")
        emit(f"{ind}scf.if %not_first {{")
        emit(f"{ind}  %prev_tile = arith.subi %ci, %c1 : index")
        turn = parity(ind + "  ", "%prev_tile", "t")
        emit(f"{ind}  nvgpu.mbarrier.try_wait.parity %bar[%c_turn_i], {turn}, %c_ticks : "
             f"{bar}")
        emit(f"{ind}}}")
    halves = 2  # m64 halves of the consumer's 128 rows
    st = accumulator_struct(t.bn // 2)
    b_order = "col" if p.b_layout == "nk" else "row"
    # A k-step of 16 is +32 bytes in the 128-byte swizzle row of a K-major operand, or 16
    # rows of 128 bytes of an N-major B.
    b_step = 32 if p.b_layout == "nk" else 16 * 128

    def ktile_mmas(ind: str, g: str, accs: list[str], first: bool, u: str) -> list[str]:
        """Wait for k-tile `g`'s stage, issue its MMAs (committed, not waited for); the
        first k-tile of a tile starts the accumulators (scale-d zero: no register writes
        before the first wgmma, which would make ptxas serialise them)."""
        emit(f"{ind}%s{u} = arith.remui {g}, %c_stages : index")
        emit(f"{ind}%round{u} = arith.divui {g}, %c_stages : index")
        full = parity(ind, f"%round{u}", f"f{u}")
        emit(f"{ind}nvgpu.mbarrier.try_wait.parity %bar[%s{u}], {full}, %c_ticks : {bar}")
        emit(f"{ind}%off{u} = arith.muli %s{u}, %c_stage_bytes : index")
        emit(f"{ind}%offi{u} = arith.index_cast %off{u} : index to i64")
        emit(f"{ind}%addr{u} = arith.addi %sbase, %offi{u} : i64")
        emit(f"{ind}%sh{u} = arith.shrui %addr{u}, %c4_i64 : i64")
        emit(f"{ind}%st{u} = arith.andi %sh{u}, %c3fff_i64 : i64")
        if coop:
            emit(f"{ind}%sta{u} = arith.addi %st{u}, %a_half : i64")
            emit(f"{ind}%da{u} = arith.ori %sta{u}, %desc_k : i64")
        else:
            emit(f"{ind}%da{u} = arith.ori %st{u}, %desc_k : i64")
        emit(f"{ind}%c_boff{u} = arith.constant {a_bytes >> 4} : i64")
        emit(f"{ind}%stb{u} = arith.addi %st{u}, %c_boff{u} : i64")
        emit(f"{ind}%db{u} = arith.ori %stb{u}, %desc_b : i64")
        emit(f"{ind}nvvm.wgmma.fence.aligned")
        out = list(accs)
        for mh in range(halves):
            for kk in range(t.bk // 16):
                da, db = f"%da{u}", f"%db{u}"
                a_off = (mh * 64 * t.bk * eb + kk * 32) >> 4
                b_off = (kk * b_step) >> 4
                if a_off:
                    emit(f"{ind}%ca{u}_{mh}_{kk} = arith.constant {a_off} : i64")
                    emit(f"{ind}%da{u}_{mh}_{kk} = arith.addi %da{u}, %ca{u}_{mh}_{kk} : i64")
                    da = f"%da{u}_{mh}_{kk}"
                if b_off:
                    emit(f"{ind}%cb{u}_{mh}_{kk} = arith.constant {b_off} : i64")
                    emit(f"{ind}%db{u}_{mh}_{kk} = arith.addi %db{u}, %cb{u}_{mh}_{kk} : i64")
                    db = f"%db{u}_{mh}_{kk}"
                scale_d = "zero" if first and kk == 0 else "one"
                nxt = f"%m{u}_{mh}_{kk}"
                emit(f"{ind}{nxt} = nvvm.wgmma.mma_async {da}, {db}, {out[mh]}, <m = 64, "
                     f"n = {t.bn}, k = 16>, D[<f32>, <{scale_d}>, <wrapped>], "
                     f"A[<{el}>, <one>, <row>], B[<{el}>, <one>, <{b_order}>] : "
                     f"{st} -> {st}")
                out[mh] = nxt
        emit(f"{ind}nvvm.wgmma.commit.group.sync.aligned")
        return out

    for h in range(halves):
        emit(f"{ind}%undef{h} = llvm.mlir.undef : {st}")
    first_accs = ktile_mmas(ind, "%cg0", [f"%undef{h}" for h in range(halves)], True, "0")
    names = ", ".join(f"%a{h} = {first_accs[h]}" for h in range(halves))
    emit(f"{ind}%acc:{halves} = scf.for %k = %c1 to %c_k_tiles step %c1 iter_args({names}) "
         f"-> ({', '.join([st] * halves)}) {{")
    ind2 = ind + "  "
    emit(f"{ind2}%g = arith.addi %cg0, %k : index")
    current = ktile_mmas(ind2, "%g", [f"%a{h}" for h in range(halves)], False, "1")
    # The previous k-tile's MMAs are done: each warp's first lane releases its stage.
    emit(f"{ind2}nvvm.wgmma.wait.group.sync.aligned 1")
    emit(f"{ind2}scf.if %warp_lead {{")
    emit(f"{ind2}  %gp = arith.subi %g, %c1 : index")
    emit(f"{ind2}  %sp = arith.remui %gp, %c_stages : index")
    emit(f"{ind2}  %ep = arith.addi %sp, %c_stages : index")
    emit(f"{ind2}  %tok = nvgpu.mbarrier.arrive %bar[%ep] : {bar} -> !nvgpu.mbarrier.token")
    emit(f"{ind2}}}")
    emit(f"{ind2}scf.yield {', '.join(current)} : {', '.join([st] * halves)}")
    emit(f"{ind}}}")
    if not coop:
        # This main loop has seen all its stages: the other consumer's turn.
        emit(f"{ind}%turn_lead = arith.cmpi eq, %ltid, %c0 : index")
        emit(f"{ind}scf.if %turn_lead {{")
        emit(f"{ind}  %tokt = nvgpu.mbarrier.arrive %bar[%c_turn_i] : {bar} -> "
             f"!nvgpu.mbarrier.token")
        emit(f"{ind}}}")
    emit(f"{ind}nvvm.wgmma.wait.group.sync.aligned 0")
    emit(f"{ind}scf.if %warp_lead {{")
    emit(f"{ind}  %gl0 = arith.addi %cg0, %c_k_tiles : index")
    emit(f"{ind}  %gl = arith.subi %gl0, %c1 : index")
    emit(f"{ind}  %sl = arith.remui %gl, %c_stages : index")
    emit(f"{ind}  %el = arith.addi %sl, %c_stages : index")
    emit(f"{ind}  %tokl = nvgpu.mbarrier.arrive %bar[%el] : {bar} -> !nvgpu.mbarrier.token")
    emit(f"{ind}}}")
    def store_fragments(sind: str, h: int, x: str) -> None:
        """This thread's values of m64 half `h` of the accumulator into the buffer."""
        for c in range(t.bn // 8):
            emit(f"{sind}%fc{x}_{c} = arith.constant {8 * c} : index")
            emit(f"{sind}%fcol{x}_{c} = arith.addi %fcol0, %fc{x}_{c} : index")
            for half_row, row in ((0, "%frow"), (2, "%frow8")):
                pair = []
                for j in range(2):
                    v = f"%fv{x}_{c}_{half_row + j}"
                    emit(f"{sind}{v} = llvm.extractvalue %acc#{h}[{4 * c + half_row + j}] "
                         f": {st}")
                    pair.append(v)
                emit(f"{sind}%fp{x}_{c}_{half_row} = vector.from_elements {pair[0]}, "
                     f"{pair[1]} : vector<2xf32>")
                emit(f"{sind}vector.store %fp{x}_{c}_{half_row}, %ebuf[{row}, "
                     f"%fcol{x}_{c}] : {ebuf_type}, vector<2xf32>")

    if looped_epilogue:
        # One epilogue in a loop over the halves' parts (the fragments' store picked by the
        # half): its code once, not once per part (NVPTX's time on it).
        emit(f"{ind}%c_ep_parts = arith.constant {halves * parts} : index")
        emit(f"{ind}%c_parts = arith.constant {parts} : index")
        emit(f"{ind}%c_er = arith.constant {er} : index")
        emit(f"{ind}%c64 = arith.constant 64 : index")
        emit(f"{ind}scf.for %ep_i = %c0 to %c_ep_parts step %c1 {{")
        li = ind + "  "
        emit(f"{li}%ep_h = arith.divui %ep_i, %c_parts : index")
        emit(f"{li}%ep_q = arith.remui %ep_i, %c_parts : index")
        emit(f"{li}nvvm.barrier id = %wbar number_of_threads = %c_wg_i32")
        sind = li
        if parts > 1:
            emit(f"{li}%mine = arith.cmpi eq, %wpart, %ep_q : index")
            emit(f"{li}scf.if %mine {{")
            sind = li + "  "
        emit(f"{sind}%ep_h0 = arith.cmpi eq, %ep_h, %c0 : index")
        emit(f"{sind}scf.if %ep_h0 {{")
        store_fragments(sind + "  ", 0, "0")
        emit(f"{sind}}} else {{")
        store_fragments(sind + "  ", 1, "1")
        emit(f"{sind}}}")
        if parts > 1:
            emit(f"{li}}}")
        emit(f"{li}nvvm.barrier id = %wbar number_of_threads = %c_wg_i32")
        emit(f"{li}%ep_r0 = arith.muli %ep_h, %c64 : index")
        emit(f"{li}%ep_r1 = arith.muli %ep_q, %c_er : index")
        emit(f"{li}%ep_r = arith.addi %ep_r0, %ep_r1 : index")
        emit(f"{li}%orow = arith.addi {m0}, %ep_r : index")
        _by_segment(emit, li, p, seg_c, lambda s, si: _emit_epilogue(
            emit, p, t, epilogues[s], unroll, "%ebuf", ebuf_type, rows=er,
            buffer_row0="%erow0", out_row0="%orow", tid="%ltid", n0=n0s_c[0], indent=si,
            tag=f"_l{s}" if p.segments else "_l", segment=s))
        emit(f"{ind}}}")
    for h in range(0 if looped_epilogue else halves):
        for q in range(parts):
            x = f"{h}" if parts == 1 else f"{h}_{q}"
            # The buffer is free (this warpgroup's reads of the last part are done), then
            # full.
            emit(f"{ind}nvvm.barrier id = %wbar number_of_threads = %c_wg_i32")
            sind = ind
            if parts > 1:
                emit(f"{ind}%c_part{x} = arith.constant {q} : index")
                emit(f"{ind}%mine{x} = arith.cmpi eq, %wpart, %c_part{x} : index")
                emit(f"{ind}scf.if %mine{x} {{")
                sind = ind + "  "
            store_fragments(sind, h, x)
            if parts > 1:
                emit(f"{ind}}}")
            emit(f"{ind}nvvm.barrier id = %wbar number_of_threads = %c_wg_i32")
            emit(f"{ind}%c_h{x} = arith.constant {h * 64 + q * er} : index")
            emit(f"{ind}%orow{x} = arith.addi {m0}, %c_h{x} : index")
            _by_segment(emit, ind, p, seg_c, lambda s, si, x=x: _emit_epilogue(
                emit, p, t, epilogues[s], unroll, "%ebuf", ebuf_type, rows=er,
                buffer_row0="%erow0", out_row0=f"%orow{x}", tid="%ltid", n0=n0s_c[0],
                indent=si, tag=f"_h{x}" + (f"s{s}" if p.segments else ""), segment=s))
    emit("    }")
    emit("  }")
    emit("  gpu.return")
    emit("}")
    return "\n".join(lines)


def _emit_epilogue(emit: Callable[[str], None], p: GemmProblem, t: GemmTile,
                   epilogue: Epilogue | None, unroll: int, buffer: str, buffer_type: str,
                   rows: int, buffer_row0: str | None, out_row0: str, tid: str, n0: str,
                   indent: str, tag: str = "", segment: int = 0) -> None:
    """The accumulator's `rows` rows from shared memory (`buffer`, f32, rows from
    `buffer_row0`) through the epilogue to D (rows from `out_row0`), by the warpgroup's 128
    threads (`tid` in 0..127): BN / 4 threads a row, each four columns (a float4).
    `tag` makes the SSA names of this copy unique. A pair's threads each read four columns
    of A @ B and the same four of A @ B2 (BN / 2 columns further) and store four.
    `segment`: the output (D, or a sibling segment's) it stores to, `n0` its first column
    there."""
    out = p.out_type
    d, n_out = outputs(p)[segment]
    d_type = f"memref<{p.m}x{n_out}x{out}>"
    if p.pair and epilogue is None:
        raise CudaCodegenError("tensor-core GEMM: a GEMM pair without the epilogue joining it")
    lanes = out_columns(p, t) // 4  # threads per row (float4 each)
    rows_per_pass = WARPGROUP // lanes
    x = tag
    ind = indent
    emit(f"{ind}%c_lanes{x} = arith.constant {lanes} : index")
    emit(f"{ind}%c_rows_step{x} = arith.constant {rows_per_pass} : index")
    emit(f"{ind}%lane{x} = arith.remui {tid}, %c_lanes{x} : index")
    emit(f"{ind}%row0{x} = arith.divui {tid}, %c_lanes{x} : index")
    emit(f"{ind}%col{x} = arith.muli %lane{x}, %c4 : index")
    if p.pair:
        emit(f"{ind}%c_half_n{x} = arith.constant {t.bn // 2} : index")
        emit(f"{ind}%col2{x} = arith.addi %col{x}, %c_half_n{x} : index")
    emit(f"{ind}%gcol{x} = arith.addi {n0}, %col{x} : index")
    c_n = "%c_n"
    if p.segments:
        c_n = f"%c_nout{x}"
        emit(f"{ind}{c_n} = arith.constant {n_out} : index")
    # Every tile starts at a multiple of BM rows and of its output columns (a sibling
    # segment's too, the ones before it being multiples): where those divide the output,
    # no store is out of bounds.
    rows_exact = p.m % t.bm == 0
    cols_exact = n_out % out_columns(p, t) == 0
    if not (rows_exact and cols_exact):
        emit(f"{ind}%col_ok{x} = arith.cmpi ult, %gcol{x}, {c_n} : index")
        emit(f"{ind}%d_pi{x} = memref.extract_aligned_pointer_as_index {d}_al : "
             f"{d_type} -> index")
        emit(f"{ind}{d}_ptr{x} = arith.index_cast %d_pi{x} : index to i64")
    # EPILOGUE_UNROLL passes of rows per loop iteration, their loads unconditional (row and
    # column clamped into the matrix: a thread past M or N computes a value it does not
    # store), so that the loads of all of them are in flight together: with one or two CTAs
    # per SM there are no other warps to hide a global load's latency behind.
    passes = rows // rows_per_pass
    unroll = max(u for u in range(1, min(unroll, passes) + 1) if passes % u == 0)
    emit(f"{ind}%c_group_rows{x} = arith.constant {rows_per_pass * unroll} : index")
    bound = "%c_bm" if rows == t.bm and not x else f"%c_rows{x}"
    if bound != "%c_bm":
        emit(f"{ind}{bound} = arith.constant {rows} : index")
    emit(f"{ind}%c_last_row{x} = arith.constant {p.m - 1} : index")
    emit(f"{ind}%c_last_col{x} = arith.constant {n_out - 4} : index")
    emit(f"{ind}%gcol_c{x} = arith.minui %gcol{x}, %c_last_col{x} : index")
    emit(f"{ind}scf.for %rg{x} = %row0{x} to {bound} step %c_group_rows{x} {{")
    if epilogue is not None:
        epilogue.begin()
    ind2 = ind + "  "
    for u in range(unroll):
        emit(f"{ind2}%c_pass{u}{x} = arith.constant {u * rows_per_pass} : index")
        emit(f"{ind2}%r{u}{x} = arith.addi %rg{x}, %c_pass{u}{x} : index")
        buffer_row = f"%r{u}{x}"
        if buffer_row0 is not None:
            buffer_row = f"%rb{u}{x}"
            emit(f"{ind2}{buffer_row} = arith.addi {buffer_row0}, %r{u}{x} : index")
        emit(f"{ind2}%grow{u}{x} = arith.addi {out_row0}, %r{u}{x} : index")
        emit(f"{ind2}%v{u}{x} = vector.load {buffer}[{buffer_row}, %col{x}] : {buffer_type}, "
             f"vector<4xf32>")
        stored = f"%v{u}{x}"
        if epilogue is not None:
            emit(f"{ind2}%grow_c{u}{x} = arith.minui %grow{u}{x}, %c_last_row{x} : index")
            values_in = []
            for j in range(4):
                emit(f"{ind2}%v{u}{x}_{j} = vector.extract %v{u}{x}[{j}] : f32 from "
                     f"vector<4xf32>")
                values_in.append(f"%v{u}{x}_{j}")
            values_in2 = None
            if p.pair:
                emit(f"{ind2}%w{u}{x} = vector.load {buffer}[{buffer_row}, %col2{x}] : "
                     f"{buffer_type}, vector<4xf32>")
                values_in2 = []
                for j in range(4):
                    emit(f"{ind2}%w{u}{x}_{j} = vector.extract %w{u}{x}[{j}] : f32 from "
                         f"vector<4xf32>")
                    values_in2.append(f"%w{u}{x}_{j}")
            values = epilogue.apply(lambda line: emit(ind2 + line), f"%grow_c{u}{x}",
                                    f"%gcol_c{x}", values_in, values_in2)
            emit(f"{ind2}%vo{u}{x} = vector.from_elements {', '.join(values)} : "
                 f"vector<4x{out}>")
            stored = f"%vo{u}{x}"
        elif out != "f32":
            emit(f"{ind2}%vo{u}{x} = arith.truncf %v{u}{x} : vector<4xf32> to vector<4x{out}>")
            stored = f"%vo{u}{x}"
        # Each pass's store right after it: the pointers are `noalias` (MAP_KERNEL_POINTER),
        # so ptxas moves the later passes' loads above it as far as registers allow (all
        # loads first, by hand, took a GELU(tanh) epilogue to 255 registers and spills).
        # No branch around it: a branch ends the basic block, and LLVM sinks the pass's
        # chain into it, so that the passes ran one after the other (latency-bound).
        if rows_exact and cols_exact:
            emit(f"{ind2}vector.store {stored}, {d}_al[%grow{u}{x}, %gcol{x}] "
                 f"{{alignment = {4 * OUTPUTS[out]}}} : {d_type}, vector<4x{out}>")
            continue
        ok = f"%col_ok{x}"
        if not rows_exact:
            emit(f"{ind2}%row_ok{u}{x} = arith.cmpi ult, %grow{u}{x}, %c_m : index")
            ok = f"%ok{u}{x}"
            emit(f"{ind2}{ok} = arith.andi %row_ok{u}{x}, %col_ok{x} : i1")
        _predicated_store(emit, ind2, f"{u}{x}", stored, out, f"{d}_ptr{x}", n_out,
                          f"%grow{u}{x}", f"%gcol{x}", ok)
    emit(f"{ind}}}")


def _predicated_store(emit: Callable[[str], None], ind: str, x: str, value: str, out: str,
                      base: str, n_out: int, row: str, col: str, ok: str) -> None:
    """Store the vector<4x`out`> `value` at D[`row`, `col`] (`base`: D's address, i64) if
    `ok`, as one predicated PTX store: no branch, so the epilogue's passes stay in one
    basic block for ptxas to interleave (a thread past M or N computes an address it does
    not store to)."""
    words = OUTPUTS[out]  # four values of that many bytes: that many 32-bit words
    emit(f"{ind}%sw{x} = llvm.bitcast {value} : vector<4x{out}> to vector<{words}xi32>")
    names = []
    for w in range(words):
        emit(f"{ind}%sw{x}_{w} = vector.extract %sw{x}[{w}] : i32 from vector<{words}xi32>")
        names.append(f"%sw{x}_{w}")
    emit(f"{ind}%sn{x} = arith.constant {n_out} : index")
    emit(f"{ind}%sro{x} = arith.muli {row}, %sn{x} : index")
    emit(f"{ind}%sel{x} = arith.addi %sro{x}, {col} : index")
    emit(f"{ind}%sel64{x} = arith.index_cast %sel{x} : index to i64")
    emit(f"{ind}%seb{x} = arith.constant {OUTPUTS[out]} : i64")
    emit(f"{ind}%sby{x} = arith.muli %sel64{x}, %seb{x} : i64")
    emit(f"{ind}%sad{x} = arith.addi {base}, %sby{x} : i64")
    emit(f"{ind}%sok{x} = arith.extui {ok} : i1 to i32")
    regs = ", ".join(f"${w + 2}" for w in range(words))
    ptx = (f"{{ .reg .pred p; setp.ne.b32 p, $0, 0; @p st.global.v{words}.b32 [$1], "
           f"{{{regs}}}; }}")
    constraints = ",".join(["r", "l"] + ["r"] * words)
    emit(f"{ind}llvm.inline_asm has_side_effects asm_dialect = att \"{ptx}\", "
         f"\"{constraints}\" %sok{x}, %sad{x}, {', '.join(names)} : "
         f"({', '.join(['i32', 'i64'] + ['i32'] * words)}) -> ()")


def gpu_module_text(kernels: list[str], opt_level: int = 3) -> str:
    target = f'#nvvm.target<O = {opt_level}, chip = "sm_90a", features = "+ptx80">'
    return ("module attributes {gpu.container_module} {\n"
            f"  gpu.module @fusec_tc [{target}] {{\n" + "\n".join(kernels) + "\n  }\n}\n")


# gpu.module -> NVVM for the nvgpu ops (TMA, mbarriers, wgmma) and the vector epilogue;
# then the maps become by-value parameters (`mark_grid_constant_maps`), then PTX.
TO_NVVM = ("gpu.module(convert-nvgpu-to-nvvm,expand-strided-metadata,lower-affine,"
           "convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},"
           "convert-nvvm-to-llvm,convert-math-to-llvm,canonicalize,cse),"
           "reconcile-unrealized-casts")
TO_BINARY = "gpu-module-to-binary{format=isa}"
# Kernel attribute naming the functions whose first two parameters are tensor maps.
GRID_CONSTANT_MAPS = "fusec.tensor_maps"
MAP_PARAMETER = "{llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}"
# The other parameters: D and the epilogue's operands, distinct buffers (D is the kernel's
# own result; the runtime binds one buffer per output). Without it, a load after a store to
# D cannot move above it: a bias + residual epilogue then took twice the plain GEMM's time
# at 8192x768x768 (0.057 against 0.028 ms on the H200: a round trip to memory per pass).
MAP_KERNEL_POINTER = "{llvm.noalias}"


# What TMA with the 128-byte swizzle needs of a shared-memory box: 1024-byte alignment.
DYNAMIC_SHARED_ALIGNMENT = 1024


def extern_dynamic_shared_memory(module) -> int:
    """Make `gpu.dynamic_shared_memory`'s global what PTX calls dynamic shared memory: an
    `.extern .shared .align 1024 .b8 name[]`. MLIR's lowering declares it internal (a
    zero-sized *static* `.shared` variable): the dynamic region then starts wherever the
    static layout puts that variable, and with several kernels in one module (the variable
    shared between them) no longer on a 128-byte boundary: CUDA_ERROR_MISALIGNED_ADDRESS
    from TMA (found on the H200: a GPT-2 block with three tensor-core GEMMs). Returns how
    many globals were changed."""
    from mlir import ir

    count = 0

    def visit(op):
        nonlocal count
        if op.name == "llvm.mlir.global" and \
                ir.StringAttr(op.attributes["sym_name"]).value.startswith("__dynamic_shmem__"):
            op.attributes["linkage"] = ir.Attribute.parse("#llvm.linkage<external>")
            op.attributes["alignment"] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), DYNAMIC_SHARED_ALIGNMENT)
            count += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return count


def mark_grid_constant_maps(module) -> int:
    """Give the map parameters (the first two, or the attribute's count) of every kernel marked
    `GRID_CONSTANT_MAPS` the by-value,
    grid-constant attributes (a 128-byte, 64-byte aligned `.param` the kernel reads in
    place: what `cuTensorMapEncodeTiled` writes and TMA reads), and its pointers
    `noalias` (MAP_KERNEL_POINTER). NVVM's verifier takes them
    only on an `llvm.func` kernel, hence after convert-gpu-to-nvvm. Returns how many."""
    from mlir import ir

    count = 0

    def visit(op):
        nonlocal count
        if op.name == "llvm.func" and GRID_CONSTANT_MAPS in op.attributes:
            params = len(op.regions[0].blocks[0].arguments)
            marked = op.attributes[GRID_CONSTANT_MAPS]
            try:
                n_maps = ir.IntegerAttr(marked).value
            except (TypeError, ValueError):
                n_maps = 2  # a unit attribute: the GEMM's two maps
            old = list(ir.ArrayAttr(op.attributes["arg_attrs"])) \
                if "arg_attrs" in op.attributes else [ir.DictAttr.get({})] * params
            rest = []
            for attr in old[n_maps:]:
                entries = {a.name: a.attr for a in ir.DictAttr(attr)}
                entries["llvm.noalias"] = ir.UnitAttr.get()
                rest.append(ir.DictAttr.get(entries))
            op.attributes["arg_attrs"] = ir.ArrayAttr.get(
                [ir.Attribute.parse(MAP_PARAMETER)] * n_maps + rest)
            count += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return count


def finish_lowered_kernels(module) -> None:
    """What the family's kernels need between NVVM and the binary, which no pass does: the
    maps as grid constants, the dynamic shared memory extern and aligned."""
    mark_grid_constant_maps(module)
    extern_dynamic_shared_memory(module)


def lower(text: str) -> str:
    """gpu.module text -> PTX (for sm_90a)."""
    from fusec.dialects import make_context
    from mlir import ir
    from mlir.dialects import gpu
    from mlir.passmanager import PassManager

    with make_context():
        module = ir.Module.parse(text)
        PassManager.parse(f"builtin.module({TO_NVVM})").run(module.operation)
        finish_lowered_kernels(module)
        PassManager.parse(f"builtin.module({TO_BINARY})").run(module.operation)
        for op in module.body.operations:
            if op.operation.name == "gpu.binary":
                return bytes(gpu.ObjectAttr(op.attributes["objects"][0]).object).decode()
    raise CudaCodegenError("gpu-module-to-binary produced no gpu.binary")
