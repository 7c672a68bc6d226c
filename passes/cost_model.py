"""The fusion cost model: pure functions of plain numbers and a device description.

The fusion passes ask it whether a fusion pays and whether it is legal on the device; they
never embed thresholds of their own. Everything here is a function of its arguments: no IR,
no state, so it can be tested and read on its own.

Devices: the H200 (the GPU target; figures from design.md: 132 SMs, 227 KB of shared memory
per block, 64K registers per SM, about 50 MB of L2, 4.25 TB/s measured copy bandwidth, a few
microseconds per launch) and the host CPU (2 cores here; per-core L2 as the on-chip level).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    """What the cost model needs to know about a target."""

    name: str
    hbm_bytes_per_s: float  # sustained main-memory bandwidth
    flops_per_s: float  # scalar/vector (non-tensor-core) peak
    matmul_flops_per_s: float  # contraction peak (tensor cores on the GPU)
    launch_s: float  # cost of one kernel launch
    on_chip_bytes: int  # what one tile may keep on chip: shared memory per block / L2 per core
    parallel_units: int  # SMs / cores
    l2_bytes: int
    registers_per_unit: int = 0  # 32-bit registers per SM (GPU only)
    max_registers_per_thread: int = 0
    # Widest extent a contraction may keep untiled in one tile (its accumulator row must stay
    # in registers): beyond it, a producer fused before it is recomputed for every tile.
    max_untiled_contraction_extent: int = 128
    # Tile capacity (GPU only; 0 = no such limit): shared memory a block may use without the
    # opt-in attribute, shared memory per SM, resident threads per SM, threads per block the
    # tiles are given, and the least SM occupancy (resident warps / warp slots) we accept.
    shared_bytes_default_per_block: int = 0
    shared_bytes_per_unit: int = 0
    max_threads_per_unit: int = 0
    threads_per_block: int = 1
    min_occupancy: float = 0.0
    # The most threads one block may have, and the widest global access per thread (GPU).
    max_threads_per_block: int = 1
    vector_bytes: int = 0
    # Matmuls run in a vendor GEMM library (cuBLASLt on the GPU): it reads its operands from
    # memory, looking through casts to f32, a transpose of the last two dims and reshapes,
    # and fuses a bias add / ReLU / GELU into its epilogue; any other prologue op is a kernel
    # of its own before it.
    gemm_library: bool = False
    # Multi-output kernels are only emitted whole by the GPU's fast emitter; one it refuses
    # (a transpose, a slice, a pad, ...) goes to a path with one tile loop per kernel, so code
    # generation splits it into one kernel per output.
    multi_output_needs_fast_emitter: bool = False
    # Matmuls run on a register-blocked microkernel that reads each operand as a strided
    # view of memory with one reduction loop (the CPU's, passes/cpu/cpu_matmul.py): a
    # transpose whose dims a reshape then merges (the attention's head merge in front of
    # its output projection) is no view, and fused it would turn the matmul into a plain
    # loop nest (GPT-2's projection: 23 GFLOP/s instead of 60).
    matmul_microkernel: bool = False


H200 = Device(
    name="nvidia-h200",
    hbm_bytes_per_s=4.25e12,
    flops_per_s=60e12,
    matmul_flops_per_s=679e12,
    launch_s=4e-6,
    on_chip_bytes=227 * 1024,
    parallel_units=132,
    l2_bytes=50 * 1024 * 1024,
    registers_per_unit=65536,
    max_registers_per_thread=255,
    max_untiled_contraction_extent=128,
    shared_bytes_default_per_block=48 * 1024,
    shared_bytes_per_unit=228 * 1024,
    max_threads_per_unit=2048,
    threads_per_block=256,
    min_occupancy=0.25,
    max_threads_per_block=1024,
    vector_bytes=16,  # ld.global.v4.b32
    gemm_library=True,
    multi_output_needs_fast_emitter=True,
)

CPU_HOST = Device(
    name="cpu",
    hbm_bytes_per_s=20e9,
    flops_per_s=100e9,
    matmul_flops_per_s=100e9,
    launch_s=2e-6,
    on_chip_bytes=1024 * 1024,
    parallel_units=2,
    l2_bytes=1024 * 1024,
    max_untiled_contraction_extent=256,
    matmul_microkernel=True,
)

DEVICES = {"nvidia-h200": H200, "h200": H200, "cuda": H200, "cpu": CPU_HOST}


def device_named(name: str) -> Device:
    """The device description for a pass option such as `device=cpu`."""
    try:
        return DEVICES[name]
    except KeyError:
        raise ValueError(f"unknown device '{name}' (known: {', '.join(sorted(DEVICES))})") from None


def roofline_s(bytes_moved: int, flops: int, device: Device, contraction: bool = False) -> float:
    """Lower bound on a kernel's run time: memory time or compute time, whichever is larger."""
    peak = device.matmul_flops_per_s if contraction else device.flops_per_s
    return max(bytes_moved / device.hbm_bytes_per_s, flops / peak)


def kernel_s(bytes_moved: int, flops: int, device: Device, contraction: bool = False) -> float:
    """Predicted time of one kernel: its roofline floor plus one launch."""
    return device.launch_s + roofline_s(bytes_moved, flops, device, contraction)


def arithmetic_intensity(flops: int, bytes_moved: int) -> float:
    """Flops per byte of main-memory traffic."""
    return flops / bytes_moved if bytes_moved else 0.0


@dataclass(frozen=True)
class FusionEstimate:
    """Unfused (one kernel per op) versus fused (one kernel) for a set of ops."""

    bytes_unfused: int
    bytes_fused: int
    launches_saved: int
    time_unfused_s: float
    time_fused_s: float

    @property
    def pays(self) -> bool:
        return self.time_fused_s <= self.time_unfused_s


def estimate(kernels: list[tuple[int, int, bool]], fused_bytes: int, fused_flops: int,
             device: Device) -> FusionEstimate:
    """Compare `kernels` ((bytes, flops, is_contraction) each, run one by one) with one
    kernel moving `fused_bytes` and doing `fused_flops` (recomputation included)."""
    unfused_bytes = sum(b for b, _, _ in kernels)
    unfused_s = sum(kernel_s(b, f, device, c) for b, f, c in kernels)
    contraction = any(c for _, _, c in kernels)
    fused_s = kernel_s(fused_bytes, fused_flops, device, contraction)
    return FusionEstimate(unfused_bytes, fused_bytes, max(0, len(kernels) - 1), unfused_s, fused_s)


def fits_on_chip(working_set_bytes: int, device: Device) -> bool:
    """Whether what one tile must hold on chip (rows kept across a reduction) fits."""
    return working_set_bytes <= device.on_chip_bytes


def reduction_row_fits(row_elements: int, element_bytes: int, device: Device) -> bool:
    """Whether one reduced row can stay on chip until its broadcast consumer reads it again.

    A reduction feeding a consumer that broadcasts its result back over the reduced axis
    needs the whole row twice (once to reduce, once to apply); fused, the row must stay on
    chip or be read again, and a kernel with one huge row per tile has no parallelism left.
    """
    return row_elements * element_bytes <= device.on_chip_bytes


def should_duplicate(bytes_read: int, bytes_written: int, cheap: bool) -> bool:
    """Recompute a producer in a second kernel rather than write it once and read it back.

    Only cheap producers (elementwise, reshape, fill, transpose) qualify, and only when the
    recomputation reads no more than the materialised value would cost to read.
    """
    return cheap and bytes_read <= bytes_written


def contraction_untiled_ok(extent: int, device: Device) -> bool:
    """Whether a contraction may keep a parallel dimension of `extent` whole in one tile
    (as it must when a row-wise producer is fused before it)."""
    return extent <= device.max_untiled_contraction_extent


def tiles_per_kernel(device: Device) -> int:
    """How many tiles a good tiling of a large kernel makes: a few per parallel unit."""
    return 4 * device.parallel_units


def recompute_cost_s(flops: int, bytes_written: int, broadcast: int,
                     device: Device) -> tuple[float, float]:
    """(extra time, saved time) of fusing a producer that every tile along `broadcast`
    tile positions recomputes, instead of writing its `bytes_written` once and reading it
    back. A tile spans many positions, so the recomputation happens at most once per tile."""
    repeats = min(broadcast, tiles_per_kernel(device))
    extra = max(0, repeats - 1) * flops / device.flops_per_s
    saved = device.launch_s + 2 * bytes_written / device.hbm_bytes_per_s
    return extra, saved


def gemm_prologue_is_kernel(absorbed_by_library: bool, device: Device) -> bool:
    """Whether an op before a matmul, in the matmul's group, would run as a kernel of its own
    anyway: on a device whose matmuls are library calls (`gemm_library`) every prologue op
    the library cannot read through (`absorbed_by_library` False) is split off by code
    generation, so fusing it there saves nothing and may take it from a better group (the
    bias add of the matmul before, which the library fuses as that matmul's epilogue)."""
    return device.gemm_library and not absorbed_by_library


def conv_is_gemm(op_name: str, device: Device) -> bool:
    """Whether code generation runs this convolution as a GEMM kernel with an epilogue (the
    CUDA target's `--fusion-gpu-convs-to-gemm`, `compiler/targets/cuda/convs.py`: im2col
    and a GEMM, or the filter times the image), so that what follows it elementwise is best
    in its epilogue (ResNet-50 bf16 on an H100, with the next rule: 1.453 -> 0.763 ms,
    bench/RESULTS.md run 246)."""
    return device.gemm_library and op_name == "linalg.conv_2d_nchw_fchw"


def window_joins_conv_gather(window_points: int, conv_points: int) -> bool:
    """Whether a window op (a pooling) before a GEMM convolution (`conv_is_gemm`) belongs in
    the convolution's im2col gather. The gather reads each image value once per point of the
    filter's window (`conv_points`), and a window op inside it runs again for each of those
    reads, `window_points` reads apiece; as a kernel of its own it reads its window once,
    writes one value and the gather reads that `conv_points` times. ResNet-18's 3x3 max pool
    before layer1's 3x3 convolution is 81 reads per value fused against 19 apart; before a
    1x1 convolution it joins (the gather reads each value once)."""
    return conv_points * window_points <= window_points + 1 + conv_points


def conv_reads_image_as_columns(images: int, kh: int, kw: int, strides: list[int],
                                same_size: bool, row_bytes: int) -> bool:
    """Whether the CUDA target builds an NCHW convolution as the filter times the image
    itself, [F, C] @ [C, H*W] (its product already NCHW, its BatchNorm and ReLU in the
    GEMM's epilogue, no gather and no transpose), rather than as im2col with the channels
    last and a transpose back. Only a 1x1 convolution of stride 1 over one image reads its
    image as the columns; TMA and cuBLASLt's aligned kernels need each row of H*W values
    16-byte aligned (`row_bytes`). Measured on an H100 (bench/RESULTS.md runs 244-246,
    bf16, CUDA graphs): with every convolution this way (3x3 ones through a K-major gather,
    col[c, kh, kw, oh, ow]), MobileNetV2 0.567 -> 0.371 ms but ResNet-18 0.320 -> 0.567 (the
    gather's windows read x at odd offsets, no 16-byte access); with unaligned rows too
    (14 x 14, 7 x 7 bf16: cuBLASLt's align1 kernels) ResNet-50 0.867 ms against 0.763 with
    this rule. MobileNetV2's 0.371 against 0.474 there was the channels-last gather's launch
    shape, not this form: with that fixed (`transpose.lanes_dim`, run 249) this rule gives
    0.371 too."""
    return (images == 1 and kh == kw == 1 and list(strides) == [1, 1] and same_size
            and row_bytes % 16 == 0)


def elementwise_after_contraction_is_epilogue(device: Device) -> bool:
    """Whether elementwise ops computed from a contraction's result only (a bias add, GELU,
    SiLU times another matmul) and read by a second contraction go to the first one's
    epilogue, not the second one's prologue. On the CPU the microkernel's column tiles each
    recompute their prologue (GPT-2's MLP: tanh-GELU 4 times per element as c_proj's
    prologue, 4.98 ms for c_proj against 3.35 for c_fc alone, 2 threads); as an epilogue it
    is computed once per element. On the GPU a GEMM library call takes no such prologue
    (`gemm_prologue_is_kernel` already keeps it out)."""
    return device.matmul_microkernel


def transposed_operand_is_kernel(is_view: bool, device: Device) -> bool:
    """Whether a transpose in front of a contraction stays a kernel of its own: where the
    matmul microkernel needs views, a transpose that a reshape merges (no view) costs one
    copy of the operand, far less than the microkernel it would cost the matmul."""
    return device.matmul_microkernel and not is_view


def gemm_operand_view_is_free(absorbed_by_library: bool, device: Device) -> bool:
    """Whether a cast / last-two-dims transpose / reshape of a matmul operand costs nothing
    however many tiles use it: the GEMM library reads its operand through it (no
    recomputation, no extra pass over memory), so the planner must not weigh it as a
    recomputed producer."""
    return device.gemm_library and absorbed_by_library


def multi_output_kernel_ok(fast_emitter_takes_it: bool, device: Device) -> bool:
    """Whether a kernel with several outputs stays one kernel on `device`: on the GPU only
    when the fast emitter takes all its ops (otherwise code generation splits it per output,
    and the launch the planner counted as saved is not)."""
    return fast_emitter_takes_it or not device.multi_output_needs_fast_emitter


def occupancy(parallel_tiles: int, device: Device) -> float:
    """Fraction of the device's parallel units a kernel with `parallel_tiles` tiles can use."""
    if parallel_tiles <= 0:
        return 0.0
    return min(1.0, parallel_tiles / device.parallel_units)


# Numerics flags: the reasons a fusion would change results, not just speed.
REORDERS_REDUCTION = "reorders-reduction"


def contraction_then_reduction_flag() -> str:
    """A row reduction fused after a contraction that is tiled along the reduced axis must
    combine partial results per tile (an online, rescaled reduction as in FlashAttention):
    the summation order and the rounding of every partial result change."""
    return REORDERS_REDUCTION


# --- tile capacity: what one tile keeps on chip against what the device has ----------------

# Registers every GPU thread needs besides the tile's values: indices, pointers, loop bounds.
BASE_REGISTERS_PER_THREAD = 24
MAX_BLOCKS_PER_UNIT = 32
WARP = 32


def tile_threads(tile_points: int, device: Device) -> int:
    """Threads a tile of `tile_points` output points runs on: the device's block size, fewer
    (whole warps) for a small tile; one on the CPU, where a tile is one task of one core."""
    if device.threads_per_block <= 1:
        return 1
    warps = max(1, math.ceil(tile_points / WARP))
    return min(device.threads_per_block, warps * WARP)


def value_registers(points: int, element_bytes: int, threads: int) -> int:
    """32-bit registers per thread for a tile value of `points` elements spread over the
    block's `threads` (each thread holds its share, as in a Triton block)."""
    return math.ceil(points * element_bytes / 4 / max(threads, 1))


def registers_per_thread(live_value_registers: int) -> int:
    """Estimated registers per thread: the base plus the peak of the register-placed tile
    values live at once (`live_value_registers`, summed `value_registers`)."""
    return BASE_REGISTERS_PER_THREAD + live_value_registers


def sm_occupancy(threads: int, registers: int, shared_bytes: int, device: Device) -> float:
    """Resident warps / warp slots of one SM for blocks of `threads` threads using
    `registers` registers per thread and `shared_bytes` of shared memory; on the CPU (no
    such limits) 1.0. Registers are allocated per thread in units of 8."""
    if device.max_threads_per_unit == 0:
        return 1.0
    limits = [MAX_BLOCKS_PER_UNIT, device.max_threads_per_unit // max(threads, 1)]
    if registers:
        allocated = math.ceil(registers / 8) * 8
        limits.append(device.registers_per_unit // (allocated * max(threads, 1)))
    if shared_bytes:
        limits.append(device.shared_bytes_per_unit // shared_bytes)
    blocks = max(0, min(limits))
    return min(1.0, blocks * threads / device.max_threads_per_unit)


@dataclass(frozen=True)
class CapacityVerdict:
    """What one tile needs on chip, and why it does not fit (empty: it fits)."""

    on_chip_bytes: int
    registers: int  # per thread; 0 where the device has no register limit (CPU)
    occupancy: float
    over: tuple[str, ...]  # limits exceeded, each a sentence
    notes: tuple[str, ...]  # fits, but with a condition (the shared-memory opt-in)


def check_tile(on_chip_bytes: int, live_value_registers: int, threads: int,
               device: Device) -> CapacityVerdict:
    """Check what one tile keeps on chip (shared memory per block on the GPU, cache per core
    on the CPU) and its registers per thread against `device`'s limits and its wanted
    occupancy."""
    over, notes = [], []
    gpu = device.max_registers_per_thread > 0
    registers = registers_per_thread(live_value_registers) if gpu else 0
    where = "shared memory per block" if gpu else "on-chip bytes per tile (L2 per core)"
    if on_chip_bytes > device.on_chip_bytes:
        over.append(f"{where}: {on_chip_bytes} B > {device.on_chip_bytes} B")
    elif gpu and on_chip_bytes > device.shared_bytes_default_per_block:
        notes.append(f"shared memory {on_chip_bytes} B > {device.shared_bytes_default_per_block}"
                     f" B default: needs the opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize)")
    if gpu and registers > device.max_registers_per_thread:
        over.append(f"registers per thread: about {registers} > {device.max_registers_per_thread}")
    occupancy = sm_occupancy(threads, min(registers, device.max_registers_per_thread),
                             min(on_chip_bytes, device.on_chip_bytes), device)
    if gpu and not over and occupancy == 0:
        # Not one block fits an SM: the launch itself would fail.
        allocated = math.ceil(registers / 8) * 8
        over.append(f"registers per block: about {allocated * threads} > "
                    f"{device.registers_per_unit} per SM ({threads} threads)")
    if gpu and not over and occupancy < device.min_occupancy:
        over.append(f"occupancy {occupancy:.2f} < {device.min_occupancy:.2f} wanted")
    return CapacityVerdict(on_chip_bytes, registers, occupancy, tuple(over), tuple(notes))


def largest_fitting_share(bytes_per_unit: int, registers_per_unit: int, units: int,
                          device: Device) -> int:
    """The most units (rows, tile positions) of a tile that needs `bytes_per_unit` on chip
    and `registers_per_unit` value registers per unit fit in one tile, at most `units`; 0 if
    not even one fits (then the tile must be split along its kept axis or the group split)."""
    best = 0
    for n in range(1, units + 1):
        verdict = check_tile(n * bytes_per_unit, n * registers_per_unit,
                             device.threads_per_block, device)
        if any(not o.startswith("occupancy") for o in verdict.over):
            break
        best = n
    return best


# --- input fusion: consumers of one large input share its read ------------------------------


def input_reread_pays(shared_bytes: int, device: Device) -> bool:
    """Whether reading `shared_bytes` once more costs at least one launch: below that the
    second read is cheaper than what reshaping kernels around it is worth (and a small
    input is likely still in L2); horizontal fusion, not input fusion, is then the tool."""
    return shared_bytes / device.hbm_bytes_per_s >= device.launch_s


def input_fusion_estimate(kernels: list[tuple[int, int, bool]], fused_bytes: int,
                          device: Device) -> FusionEstimate:
    """`kernels` ((bytes, flops, is_contraction) of each consumer kernel, each reading the
    shared input) run one by one, against one kernel moving `fused_bytes` (the shared input
    read once) and doing all their flops."""
    unfused_bytes = sum(b for b, _, _ in kernels)
    unfused_s = sum(kernel_s(b, f, device, c) for b, f, c in kernels)
    contraction = any(c for _, _, c in kernels)
    fused_s = kernel_s(fused_bytes, sum(f for _, f, _ in kernels), device, contraction)
    return FusionEstimate(unfused_bytes, fused_bytes, max(0, len(kernels) - 1), unfused_s,
                          fused_s)


# --- GPU tiles: what one block of the H200 computes ------------------------------------------

# Block tile of a contraction's two output dims (M, N): the K loop runs inside the tile,
# staged through shared memory; 128 x 128 fp32 accumulators over 256 threads are 64
# registers per thread.
CONTRACTION_BLOCK_TILE = 128


def gpu_tile_sizes(ranges: list[int], iterators: list[str], element_bytes: int,
                   allowed: set[int], kind: str, device: Device) -> list[int]:
    """Tile sizes (0 = the whole dim in every tile) of a group's root for one GPU block.

    `kind` is the kernel's: "contraction" (its root is one), "row" (it reduces), or
    "elementwise".
    - a row kernel: one row per block, the row kept on chip between its passes and reduced
      across the block's threads: size 1 on every tileable parallel dim but the last (the
      row: reduced, or the dim a broadcast operand runs along);
    - a contraction: CONTRACTION_BLOCK_TILE square block tiles of its last two parallel
      dims, 1 on leading (batch) dims, the reduction (K) loop inside the tile;
    - elementwise: a contiguous tile of about `elementwise_tile_points` (one pass of the
      block's threads, 16 bytes each, `elementwise_launch_shape`), taken from the innermost
      dims outwards (coalesced accesses): whole trailing dims, then a divisor of the next
      dim (so that every tile is the same: no partial tile), then 1 on the dims before it.
    Only dims in `allowed` are split (the planner's `fusion.tile_dims`: dims along which
    nothing would be recomputed); reduction dims never are.
    """
    sizes = [0] * len(ranges)
    parallel = [d for d, kind in enumerate(iterators) if kind == "parallel" and d in allowed]
    if not parallel:
        return sizes
    if kind == "contraction":
        # The root's last two parallel loops are the output's M and N (the root is the
        # contraction or its epilogue); loops before them are batch loops.
        outer = [d for d, kind in enumerate(iterators) if kind == "parallel"][-2:]
        for d in parallel:
            sizes[d] = min(ranges[d], CONTRACTION_BLOCK_TILE) if d in outer else 1
        return sizes
    if kind == "row" or "reduction" in iterators:
        # The root's last loop is the row (reduced, or the dim its broadcasts run along).
        for d in parallel:
            sizes[d] = 1 if d != len(ranges) - 1 else 0
        return sizes
    return _flat_tile(ranges, parallel, elementwise_tile_points(element_bytes, device))


def _flat_tile(ranges: list[int], parallel: list[int], points: int) -> list[int]:
    """A contiguous tile of about `points` points (see `gpu_tile_sizes`)."""
    sizes = [0] * len(ranges)
    inner = 1
    for d in reversed(range(len(ranges))):
        if d not in parallel:
            inner *= ranges[d]  # kept whole: part of every tile
            continue
        if inner * ranges[d] <= points:
            inner *= ranges[d]  # whole
            continue
        want = max(1, points // inner)
        # The largest divisor of the dim within [want / 2, want]: tiles all alike. None (a
        # prime extent): the whole dim when that is at most four block passes, else `want`
        # with a partial last tile (which the tile emitter refuses: built untiled).
        size = next((s for s in range(want, max(1, want // 2) - 1, -1) if ranges[d] % s == 0),
                    None)
        if size is None:
            size = ranges[d] if ranges[d] * inner <= 4 * points else want
        sizes[d] = size if size < ranges[d] else 0
        for outer in parallel:
            if outer < d:
                sizes[outer] = 1
        return sizes
    return sizes  # the whole iteration space is one tile


# --- GPU launch shapes: how one block's threads run a tile ----------------------------------


@dataclass(frozen=True)
class ElementwiseShape:
    """Elementwise kernel: `grid` blocks of `block` threads walk `tiles` tiles.

    A tile is `block * unroll` chunks of `vec` elements; chunk c of a tile starts at
    `tile * block * unroll * vec + c * block * vec + thread * vec` (coalesced 16-byte accesses).
    """

    block: int
    grid: int
    vec: int
    unroll: int
    tiles: int
    guarded: bool  # the last tile is partial: every chunk is bounds-checked (unroll == 1)


@dataclass(frozen=True)
class RowShape:
    """One block of `block` threads per row; each thread holds `chunks` chunks of `vec` columns.

    Chunk c of thread t covers columns [(c * block + t) * vec, ... + vec).
    """

    block: int
    grid: int
    vec: int
    chunks: int
    guarded: bool = False  # the last chunk is partial: loads clamped, stores and folds masked


def vector_width(count: int, element_bytes: int, device: Device) -> int:
    """The widest power-of-two vector (at most device.vector_bytes) that divides `count`."""
    vec = max(1, device.vector_bytes // element_bytes)
    while vec > 1 and count % vec:
        vec //= 2
    return vec


def elementwise_unroll(element_bytes: int) -> int:
    """16-byte chunks per thread per pass: two for 16-bit elements, else one. Measured at 64M
    elements (bench/RESULTS.md): fp32 one chunk 0.131 ms, two 0.134, four 0.135; bf16 two
    chunks 0.078, one 0.087 (bf16 GELU is instruction-bound: more independent work helps)."""
    return 2 if element_bytes < 4 else 1


def elementwise_tile_points(element_bytes: int, device: Device) -> int:
    """Points of one elementwise tile: one pass of a block's threads, `elementwise_unroll`
    chunks of 16 bytes each."""
    vec = max(1, device.vector_bytes // max(1, element_bytes))
    return device.threads_per_block * elementwise_unroll(element_bytes) * vec


def elementwise_launch_shape(numel: int, element_bytes: int, device: Device = H200,
                             unroll: int = 0) -> ElementwiseShape:
    """How a block runs an elementwise tile of `numel` points (or, `grid` > 1, the blocks a
    whole tensor): 256 threads (fewer, whole warps, for a small tile), `unroll` chunks of 16
    bytes per thread per pass (0: `elementwise_unroll`). A grid of one "wave" walking tiles
    in a loop measured 0.159 ms against 0.131 for a block per tile (two uneven waves); grids
    above 2^20 blocks walk tiles in a grid-stride loop.
    """
    unroll = unroll or elementwise_unroll(element_bytes)
    vec = vector_width(numel, element_bytes, device)
    chunks = -(-numel // vec)
    block = min(device.threads_per_block, WARP * -(-chunks // WARP))
    unroll = unroll if chunks % (block * unroll) == 0 else 1
    tiles = -(-chunks // (block * unroll))
    guarded = chunks % (block * unroll) != 0
    grid = min(tiles, 1 << 20)
    return ElementwiseShape(block, grid, vec, unroll, tiles, guarded)


def builds_concat_in_kernels(device: Device) -> bool:
    """Whether a concat can share a kernel with its neighbours on `device`: on a GPU, whose
    data-movement kernels evaluate the output element by element (each element chooses its
    piece); not on a CPU, whose tiling (upstream tile-and-fuse) cannot slice a concat."""
    return device.threads_per_block > 1


def movement_launch_shape(numel: int, last_dim: int, element_bytes: int, device: Device = H200,
                          unroll: int = 0, points: int = 1) -> ElementwiseShape:
    """How a data-movement kernel (a gather of the output's elements through reshapes,
    slices, transposes that keep the last dim, concats, pads) walks its output: as an
    elementwise kernel does (`elementwise_launch_shape`), but each thread's vector runs along
    the output's last dimension only, so its width must divide that dimension (a 64-wide
    head dim of bf16: 8 elements, 16 bytes; an odd one: 1).

    `points`: the most input points one output element folds (a pooling window, a short
    reduction, unrolled). Where it is more than one, a thread's work is `points` times an
    elementwise thread's, and filling the GPU comes first: the unroll drops to one, then the
    vector halves (narrower loads stay coalesced across the warp), until every SM has two
    blocks or the vector is one element (ResNet-18's 3x3 max pool at batch 1 had 49 blocks
    of 16 outputs per thread for 132 SMs)."""
    unroll = unroll or elementwise_unroll(element_bytes)
    vec = vector_width(math.gcd(numel, last_dim), element_bytes, device)
    while True:
        chunks = -(-numel // vec)
        block = min(device.threads_per_block, WARP * -(-chunks // WARP))
        unroll = unroll if chunks % (block * unroll) == 0 else 1
        tiles = -(-chunks // (block * unroll))
        if points <= 1 or tiles >= 2 * device.parallel_units or (unroll == 1 and vec == 1):
            break
        if unroll > 1:
            unroll = 1
        else:
            vec //= 2
    guarded = chunks % (block * unroll) != 0
    return ElementwiseShape(block, min(tiles, 1 << 20), vec, unroll, tiles, guarded)


SPLIT_FOLD_POINTS = 16  # a short fold worth splitting over a block's slices (`fold_prefers_split`)


def fold_prefers_split(numel: int, last_dim: int, element_bytes: int, points: int,
                       device: Device = H200) -> bool:
    """Whether a fold (a short reduction, or a window too long to unroll) should split its
    points over a block's slices instead of one thread folding them (the "reduce" shape): where even one
    output element per thread leaves SMs without a block, and each element folds at least
    SPLIT_FOLD_POINTS points (ResNet-18's final BatchNorm + ReLU + 7x7 average pool at batch
    1: 512 outputs of 49 points, one block of 64 threads in the direct shape)."""
    if points < SPLIT_FOLD_POINTS:
        return False
    shape = movement_launch_shape(numel, last_dim, element_bytes, device, points=points)
    return shape.tiles < device.parallel_units


@dataclass(frozen=True)
class SplitReductionShape:
    """A long reduction over a non-last dim: each block owns `columns` output vectors of
    `vec` elements (a 128-byte line of a row) and splits the reduced points over `slices`
    slices of its `block` threads; `grid` blocks."""

    vec: int
    columns: int
    slices: int
    block: int
    grid: int


def split_reduction_shape(numel: int, last_dim: int, element_bytes: int,
                          device: Device = H200, along_rows: bool = False,
                          points: int | None = None) -> SplitReductionShape:
    """As many output vectors per block as keep two blocks per SM busy, from one 128-byte
    line of a row (8 vectors of 16 bytes) down to one 32-byte sector (reads stay whole
    sectors); the rest of the 256 threads are slices of the reduction. `along_rows` (the
    reduction runs along the inputs' contiguous dim): output elements of one each, the
    slices reading consecutive elements of a row; as many slices as the reduction's
    `points` fill (the largest power of two not above them, at most the block: a 7x7 pool's
    49 points, 32 slices, each reading one or two points), the block's other threads
    further outputs (`columns`), fewer where that would leave an SM without two blocks;
    `points` unknown: one output per block of 256 slices. Not along rows, `points` (where
    given) caps the slices at the largest power of two not above it."""
    if along_rows:
        block = device.threads_per_block
        if points is None:
            return SplitReductionShape(1, 1, block, block, numel)
        slices = 1
        while slices * 2 <= min(points, block):
            slices *= 2
        columns = max(1, block // slices)
        while columns > 1 and -(-numel // columns) < 2 * device.parallel_units:
            columns //= 2
        return SplitReductionShape(1, columns, slices, columns * slices, -(-numel // columns))
    vec = vector_width(math.gcd(numel, last_dim), element_bytes, device)
    nvec = numel // vec
    columns = max(1, TRANSPOSE_TILE_BYTES // (vec * element_bytes))
    fewest = max(1, SECTOR_BYTES // (vec * element_bytes))
    while columns > fewest and -(-nvec // columns) < 2 * device.parallel_units:
        columns //= 2
    while columns > 1 and columns > nvec:
        columns //= 2
    block = device.threads_per_block
    slices = max(1, block // columns)
    while points is not None and slices > max(1, points):
        slices //= 2  # no slice without a point (a short fold: `fold_prefers_split`)
    return SplitReductionShape(vec, columns, slices, columns * slices, -(-nvec // columns))


@dataclass(frozen=True)
class TransposeTileShape:
    """A transposing data-movement kernel: each block moves a `tile` x `tile` square of the
    output's dims (p, l) through shared memory, reading it in vectors of `vec_p` along p (the
    inputs' contiguous dim), writing it in vectors of `vec_l` along l (the output's last);
    `grid` blocks (the squares times the other dims), `block` threads."""

    tile: int
    vec_p: int
    vec_l: int
    block: int
    grid: int
    shared_bytes: int


TRANSPOSE_TILE_BYTES = 128  # a split reduction's columns: one 128-byte line
SECTOR_BYTES = 32  # the GPU's memory transaction granularity
# A transposing kernel's square: two 128-byte lines on a side, 512 threads. Measured on the
# H200 (bench/RESULTS.md run 115, transpose 8192^2 bf16, CUDA-event medians): one line a
# side with 256 threads 0.0716 ms (0.88-0.89 of the HBM floor), two lines with 256 threads
# 0.0708 (0.90), with 512 0.0694 (0.915), with 1024 0.0693 (0.917); blocks in the order of
# the inputs' rows instead of the output's 0.0745 / 0.0723 (worse).
TRANSPOSE_SQUARE_BYTES = 256
TRANSPOSE_BLOCK_THREADS = 512


def transpose_tile_shape(p: int, l: int, others: int, element_bytes: int,
                         device: Device = H200,
                         shared_bytes: int = 48 * 1024) -> TransposeTileShape:
    """The square of a transposing data-movement kernel: TRANSPOSE_SQUARE_BYTES on each side
    (128x128 bf16, 64x64 fp32: 32 and 16 KB of shared memory), halved until it fits in
    `shared_bytes` (a kernel's static shared memory over its outputs' squares), so both the
    reads along p and the writes along l move whole lines; halved again, down to 64 bytes,
    where both extents fit in half a side or the squares would be under two per SM
    (measured on an H100, bench/RESULTS.md run 250: the CNNs 1.03-1.12x faster, the
    transformers unchanged); TRANSPOSE_BLOCK_THREADS threads (fewer where a square has
    fewer vectors), each with several loads in flight."""
    side = TRANSPOSE_SQUARE_BYTES
    while side > SECTOR_BYTES and (side // element_bytes) ** 2 * element_bytes > shared_bytes:
        side //= 2
    tile = max(1, side // element_bytes)
    # Smaller squares where the big ones would be mostly empty (both extents at most half
    # a side) or too few to fill the GPU (a CNN's [F, 14 x 14] product back to NCHW: 28
    # blocks of 128 x 128 squares, each 14 wide, on 132 SMs); never under two sectors a
    # side (a block of 128 bf16 or 64 fp32 threads).
    smallest = max(1, 2 * SECTOR_BYTES // element_bytes)
    while tile > smallest and (max(p, l) <= tile // 2 or
                               others * -(-p // tile) * -(-l // tile) < 2 * device.parallel_units):
        tile //= 2
    vec_p = vector_width(math.gcd(p, tile), element_bytes, device)
    vec_l = vector_width(math.gcd(l, tile), element_bytes, device)
    block = min(TRANSPOSE_BLOCK_THREADS, device.max_threads_per_block,
                tile * tile // max(vec_p, vec_l))
    grid = others * -(-p // tile) * -(-l // tile)
    return TransposeTileShape(tile, vec_p, vec_l, block, grid, tile * tile * element_bytes)


MAX_CHUNKS_PER_THREAD = 16  # 64 fp32 values of one row in registers per thread at most
# Bytes of a row each thread aims to hold: 64 (4 chunks of 16 bytes: 16 fp32 or 32 bf16
# values). Measured on the H200 (bench/RESULTS.md, run 4): LayerNorm fp32 with 32 bytes per
# thread 0.211 ms against 0.188 with 64; bf16 LayerNorm / softmax with 32 bytes per thread
# 0.129 / 0.077 ms against 0.111 / 0.069 with 64 (fewer rows in flight per SM).
ROW_BYTES_PER_THREAD = 64


def row_launch_shape(rows: int, cols: int, element_bytes: int, device: Device = H200,
                     elements_per_thread: int = 0) -> RowShape | None:
    """How blocks run row tiles: one block per row, aiming at ROW_BYTES_PER_THREAD (64)
    bytes of the row per thread (16 fp32, 32 bf16 values) so the row sits in registers with
    room to spare: the smallest power-of-two block of 32..1024 threads that covers the row in
    that many chunks. When the block does not divide the row, the last chunk is partial
    (`guarded`). None: the row is too long to keep in registers (more than
    MAX_CHUNKS_PER_THREAD chunks per thread).
    """
    vec = vector_width(cols, element_bytes, device)
    vecs = cols // vec
    elements = elements_per_thread or max(1, ROW_BYTES_PER_THREAD // element_bytes)
    per_thread = max(1, elements // vec)  # chunks aimed at
    wanted = -(-vecs // per_thread)
    block = WARP
    while block < wanted and block < device.max_threads_per_block:
        block *= 2
    chunks = -(-vecs // block)
    if chunks > MAX_CHUNKS_PER_THREAD:
        return None
    return RowShape(block, rows, vec, chunks, vecs % block != 0)


# Split reductions (`--fusion-split-reductions`). A GPU row reduction runs one block per row:
# with fewer rows than blocks the GPU holds, most SMs idle (GroupNorm at batch 1: 32 rows;
# a whole-tensor sum: one), and every thread folds thousands of values one after another.
SPLIT_BLOCKS_PER_UNIT = 4  # partial rows aimed at per SM (a 256-thread block each)
SPLIT_MIN_CHUNK = 4096  # the fewest values a partial folds (16 per thread of 256)
# The most values one partial of a float sum or product folds: rounding grows with the
# values folded in order (a sum of 16 M fp32 values in one order: 7e-5 from float64; torch's
# 1e-7); folded in chunks of at most this many and the chunks summed, it stays near 1e-6.
# (A GPU partial's values are folded by 256 threads and a tree: 256 each in order at most.)
SPLIT_MAX_CHUNK = {"nvidia-h200": 65536, "cpu": 16384}
SPLIT_MAX_PARTIALS = 4096  # what the combining reduction folds per row, at most


def reduction_partials(rows: int, length: int, exact: bool, device: Device,
                       trailing: bool = True) -> int:
    """How many partial results each of `rows` reductions of `length` values is split into
    (1: not split). On the GPU, only a reduction over the trailing loops (`trailing`: the
    row kernels'; one over leading loops is the data-movement family's "reduce" shape,
    whose 256 slices and tree already keep each thread's fold short, and whose blocks the
    CUDA target's own `--fusion-gpu-split-long-reductions` multiplies): enough partials for
    SPLIT_BLOCKS_PER_UNIT blocks per SM, each folding at least SPLIT_MIN_CHUNK values. For a
    float sum or product (not `exact`): at most SPLIT_MAX_CHUNK values per partial. The
    result is a target: the pass realises it from the reduction's extents
    (`factor_partials`)."""
    partials = 1
    if device.name == "nvidia-h200" and not trailing:
        return 1
    if device.name == "nvidia-h200" and rows < SPLIT_BLOCKS_PER_UNIT * device.parallel_units:
        partials = min(-(-SPLIT_BLOCKS_PER_UNIT * device.parallel_units // rows),
                       length // SPLIT_MIN_CHUNK)
    if not exact:
        partials = max(partials, -(-length // SPLIT_MAX_CHUNK.get(device.name, 4096)))
    partials = min(partials, SPLIT_MAX_PARTIALS, length // 2)
    return partials if partials >= 2 else 1


def factor_partials(extents: list[int], wanted: int) -> tuple[int, int]:
    """Realise `wanted` partials over reduced dims of `extents` (outermost first): the
    first `whole` dims become partial dims, and the next is split by `factor` (1: not
    split), so that the partials are prod(extents[:whole]) * factor and some values stay to
    fold: the count nearest `wanted` within half to twice it, else the nearest of any up to
    SPLIT_MAX_PARTIALS (a 1021 x 1021 reduction: 1021 partials of 1021 values; two levels
    of folding, however uneven, round like two short folds). (0, 1): none (a prime length)."""
    best, best_key = (0, 1), None
    lead = 1
    for i, extent in enumerate(extents):
        rest = math.prod(extents[i + 1:])
        for factor in range(1, min(extent, SPLIT_MAX_PARTIALS // lead) + 1):
            if extent % factor or (factor == extent and rest == 1):
                continue
            partials = lead * factor
            if partials < 2:
                continue
            err = abs(math.log(partials / wanted))
            key = (not wanted / 2 <= partials <= 2 * wanted, round(err, 9))
            if best_key is None or key < best_key:
                best, best_key = ((i + 1, 1) if factor == extent else (i, factor)), key
        lead *= extent
        if lead > SPLIT_MAX_PARTIALS:
            break
    return best


def gpu_block_threads(kind: str, tile_points: int, element_bytes: int, device: Device) -> int:
    """Threads of the block that runs one tile of `tile_points` points (for a row tile, its
    row): the launch shape's (`row_launch_shape` for a row tile, `elementwise_launch_shape`
    otherwise); `tile_threads` where no shape fits."""
    if kind == "row":
        shape = row_launch_shape(1, tile_points, element_bytes, device)
        if shape is not None:
            return shape.block
        return tile_threads(tile_points, device)
    if kind == "elementwise":
        return elementwise_launch_shape(tile_points, element_bytes, device).block
    return tile_threads(tile_points, device)


# --- policy the code generators apply (kept here, beside the rest of the cost model) -----

# The CPU matmul microkernel's shape: 6 rows and two vectors of columns, 12 accumulators, 2 B
# vectors and a broadcast in AVX2's 16 registers (AVX-512 has 32 registers of twice the width).
CPU_MATMUL_ROWS = 6


# The bytes of B's packed block (kc x nr floats) the CPU matmul microkernel keeps in L1
# (a quarter of a 32 KB L1d: the rows of A stream through the rest; measured on this
# machine, noisy: 8 KB panels 4.0-5.3 ms for a Linear 3072 -> 768 at seq 128, 16 KB 5.7-6.2,
# 64 KB 5.6, none 11.3).
CPU_MATMUL_PANEL_BYTES = 8 * 1024


def cpu_matmul_depth_block(nr: int, elem_bytes: int = 4) -> int:
    """The depth block of the CPU matmul microkernel for `nr` columns: the packed B block
    fills `CPU_MATMUL_PANEL_BYTES`, in whole 64-deep steps."""
    return max(64, CPU_MATMUL_PANEL_BYTES // (nr * elem_bytes) // 64 * 64)


# The fewest output pixels an im2col chunk of a CPU convolution is given (measured on
# ResNet's 3x3 layers, one thread: 28-pixel chunks of a 14x14 layer ran 30x slower than
# the whole image, 224-pixel chunks of a 56x56 layer 1.2x faster).
CPU_CONV_MIN_CHUNK_PIXELS = 256


def cpu_conv_rows(out_h: int, out_w: int, depth: int, elem_bytes: int = 4,
                  device: Device = CPU_HOST) -> int:
    """Output rows per im2col chunk of a CPU convolution (`--fusion-cpu-conv`): the most rows
    whose col buffer (`depth` = C * KH * KW rows of `rows * out_w` pixels) fits in half a
    core's L2, so that the matmul reads back from cache what the gather just wrote. A
    divisor of `out_h`: every chunk then has the same static shape (a dynamic last chunk
    would leave the microkernel's columns to scalar loops). At least one row."""
    budget = device.l2_bytes // 2
    row_bytes = max(1, depth * out_w * elem_bytes)
    divisors = [rows for rows in range(1, out_h + 1) if out_h % rows == 0]
    best = max([rows for rows in divisors if rows * row_bytes <= budget], default=1)
    if best * out_w < CPU_CONV_MIN_CHUNK_PIXELS:
        # Narrow chunks starve the microkernel (few column blocks per packed filter
        # panel): a larger chunk from L3 is faster than a narrow one from L2.
        best = min([rows for rows in divisors if rows * out_w >= CPU_CONV_MIN_CHUNK_PIXELS],
                   default=out_h)
    return best


# The pixels of a CPU convolution's im2col are padded to whole multiples of this many
# (the matmul microkernel's AVX-512 vector): a 7x7 layer's 49 columns were a 32-column block
# and a 17-wide remainder, 9x slower than an 8x8 layer of the same channels (measured,
# ResNet-18's 512-channel 3x3, one thread: 21 ms against 2.4).
CPU_CONV_PIXEL_MULTIPLE = 16


def cpu_conv_padded_pixels(pixels: int) -> int:
    """The columns of a CPU convolution's im2col matmul for `pixels` output pixels: the
    next multiple of CPU_CONV_PIXEL_MULTIPLE (extra columns are zeros, their results
    dropped), unless the remainder is already a whole 8-lane vector."""
    if pixels % 8 == 0:
        return pixels
    return -(-pixels // CPU_CONV_PIXEL_MULTIPLE) * CPU_CONV_PIXEL_MULTIPLE


def cpu_conv_tile_sizes(ranges: list[int], n: int, oh: int | None, ow: int | None,
                        allowed: Collection[int], threads: int,
                        tiles_per_thread: int = 4, f: int | None = None) -> list[int]:
    """Tile sizes (0 = not tiled) for a CPU kernel whose root is a convolution that
    `--fusion-cpu-conv` builds as im2col + the matmul microkernel (loop dims `n`, `oh`,
    `ow` of `ranges`): images first, then output rows, each tile a divisor of the rows (a
    static shape) of at least `CPU_CONV_MIN_CHUNK_PIXELS` pixels. Never output channels: a
    tile of channels gathers the whole image's im2col again (ResNet-18's 64-channel layers
    in 8 channel tiles: 8 gathers, 15x the time of one), nor the width (a tile's pixels
    would not be one contiguous run of the output). `oh` None: the root's loops are not
    the convolution's output (a padding after it), so images only.

    The one exception to "never channels": when images and rows give fewer tiles than
    `threads` (batch 1, a 7x7 or 14x14 layer whose rows are under the pixels a chunk
    needs), the output channels `f` are split into `threads` tiles (a divisor of them, at
    least a microkernel's rows): each thread gathers the image again, at the same time as
    the others, and does its share of the GEMM (ResNet-18's last stages ran on one core of
    two)."""
    sizes = [0] * len(ranges)
    want = max(1, threads * tiles_per_thread)
    if n in allowed and ranges[n] > 1:
        sizes[n] = 1
        want = math.ceil(want / ranges[n])
    if want > 1 and oh is not None and ow is not None and oh in allowed and ranges[oh] > 1:
        out_h, out_w = ranges[oh], ranges[ow]
        fits = [rows for rows in range(1, out_h) if out_h % rows == 0
                and rows * out_w >= CPU_CONV_MIN_CHUNK_PIXELS and out_h // rows <= want]
        if fits:
            sizes[oh] = min(fits)
    tiles = math.prod(math.ceil(r / s) for r, s in zip(ranges, sizes) if s)
    if threads > 1 and tiles < threads and f is not None and f in allowed:
        split = math.ceil(threads / tiles)
        channels = [c for c in range(CPU_MATMUL_ROWS, ranges[f])
                    if ranges[f] % c == 0 and ranges[f] // c <= split]
        if channels:
            sizes[f] = min(channels)
    return sizes


def cpu_matmul_columns(f32_lanes: int) -> int:
    """The microkernel's columns for a CPU with `f32_lanes`-wide vectors: as many vectors
    as keep `CPU_MATMUL_ROWS` rows of accumulators, the B vectors and a broadcast in the
    register file (AVX-512's 32 registers: 6 x 4 + 4 + 1; AVX2's 16: 6 x 2 + 2 + 1).
    Measured on one core here (2026-12-03, 6 rows): 4 vectors of 16 against 2, 64x576 @
    576x3136 109 -> 123 GFLOP/s, 1024^3 93 -> 110."""
    vectors = 4 if f32_lanes >= 16 else 2
    return vectors * f32_lanes


def cpu_matmul_column_piece(width: int) -> int:
    """The widest power-of-two column block in a static block `width` wide: a block of
    another width is cut into such pieces, widest first (48 = 32 + 16). A
    vector<6x48xf32> is no register shape: LLVM legalizes its rows through the stack (4.6
    GFLOP/s, against 123 as 32 + 16)."""
    return 1 << (width.bit_length() - 1)


# Threads per block of a GPU fallback kernel (a tile per thread).
FALLBACK_THREADS_PER_BLOCK = 128


def gelu_in_gemm_epilogue(out_type: str) -> bool:
    """Whether cuBLASLt's GELU epilogue may replace torch's: torch's default GELU is the erf
    form, cuBLASLt's the tanh approximation (up to 4.7e-4 absolute apart, about 1e-4 relative
    on normal data): above fp32's 1e-5 tolerance, far below bf16/f16 rounding (2^-8). So only
    when the output is 16-bit."""
    return out_type != "f32"


# The tensor-core GEMM's cost model (ours or cuBLASLt, our schedules, their tiles) is
# passes/gemm_cost.py.


def cpu_tile_sizes(ranges: list[int], iterators: list[str], elem_bytes: int,
                   tileable_dims: int | Collection[int], threads: int, tiles_per_thread: int = 4,
                   min_tile_bytes: int = 16 * 1024,
                   max_tile_bytes: int = 256 * 1024) -> list[int]:
    """Tile sizes (0 = not tiled) for a root op with loop `ranges` and `iterators`.

    Policy for a CPU with `threads` cores: aim for `threads * tiles_per_thread` tiles so that
    the thread pool balances, but no tile smaller than `min_tile_bytes` of the root's
    iteration space (`elem_bytes` per point), since a tile's fixed cost must stay small; and
    enough tiles that a tile's output (its parallel extent) stays within `max_tile_bytes`,
    about a core's L2, so that the fused ops' passes over a tile hit cache.
    Only parallel dims among `tileable_dims` (a set of dims, or n for the first n) are
    split, outer dims first; reduction dims are never split, so a row reduction keeps its
    whole row in one tile. Inner dims are split only when the outer ones are too short.
    """
    if isinstance(tileable_dims, int):
        allowed = set(range(min(tileable_dims, len(ranges))))
    else:
        allowed = set(tileable_dims)
    sizes = [0] * len(ranges)
    total_bytes = elem_bytes * math.prod(ranges)
    output_bytes = elem_bytes * math.prod(
        r for r, kind in zip(ranges, iterators) if kind == "parallel")
    want = min(threads * tiles_per_thread, total_bytes // max(min_tile_bytes, 1))
    want = max(want, math.ceil(output_bytes / max(max_tile_bytes, 1)))
    if want <= 1:
        return sizes
    remaining = want
    for d, (extent, kind) in enumerate(zip(ranges, iterators)):
        if remaining <= 1:
            break
        if kind != "parallel" or d not in allowed:
            continue
        if extent >= remaining:
            sizes[d] = math.ceil(extent / remaining)
            break
        sizes[d] = 1
        remaining = math.ceil(remaining / extent)
    return sizes


# The CPU matmul microkernel's row block (`--fusion-cpu-matmul`'s `mr`, the CPU target's
# `matmul_mr`: CPU_MATMUL_ROWS) and the fewest rows a matmul tile should have: a tile of 8
# rows is one 6-row block and a 2-row remainder that runs as scalar loops, and every tile
# re-packs B.
CPU_MATMUL_ROW_BLOCK = CPU_MATMUL_ROWS
CPU_MATMUL_MIN_ROWS = 24


def matmul_row_tile(extent: int, size: int, row_block: int = CPU_MATMUL_ROW_BLOCK,
                    min_rows: int = CPU_MATMUL_MIN_ROWS) -> int:
    """The row tile (0 = whole) for a matmul-rooted kernel whose M loop of `extent` rows the
    CPU policy split into tiles of `size` rows: the smallest divisor of `extent` of at least
    `size` and `min_rows` rows, a multiple of `row_block` where one lies below twice that.

    A divisor, because a tile size that does not divide M makes every tile's row count
    dynamic (`affine.min`), and the microkernel's dynamic remainder runs as scalar loops
    (measured: gpt2_block 0.25 -> 0.39 ms with 36-row tiles over 64 rows); a static
    remainder block (64 = 10 x 6 + 4) is vectorized at its own size."""
    if size <= 0 or size >= extent:
        return size
    least = max(size, min(min_rows, extent))
    divisors = [r for r in range(least, extent + 1) if extent % r == 0]
    blocked = [r for r in divisors if r % row_block == 0 and r < 2 * least]
    rows = (blocked or divisors)[0]
    return 0 if rows >= extent else rows


# Column tiles of a CPU matmul are whole multiples of the widest microkernel block (two
# AVX-512 vectors), and divide N where they can: a tile narrower than one block is all
# remainder, which the microkernel leaves to scalar loops (GPT-2's MLP in 29 tiles of 27
# columns: 10 GFLOP/s).
CPU_MATMUL_COLUMN_QUANTUM = 32
# The narrowest column tile of a width that does not divide N: eight quanta, so that the
# dynamic remainder is a small part of the last tile only.
CPU_MATMUL_MIN_RAGGED_COLUMNS = 8 * CPU_MATMUL_COLUMN_QUANTUM


def _column_width(cols: int, tiles: int, quantum: int = CPU_MATMUL_COLUMN_QUANTUM) -> int:
    """The widest column tile giving at least `tiles` tiles: whole quanta dividing N, else
    a ragged width of whole quanta (0: none)."""
    q = quantum
    if tiles <= 1:
        return cols
    widths = [w for w in range(q, cols, q) if cols % w == 0 and cols // w >= tiles]
    if widths:
        return widths[-1]
    if cols // tiles >= CPU_MATMUL_MIN_RAGGED_COLUMNS:
        # No such divisor (a vocabulary of 50257): tiles of a dynamic width, whose whole
        # column blocks the microkernel still runs vectorized (its n loop is peeled), and
        # only the last tile's last block at its own size. Measured: a Linear 768 -> 50257
        # at seq 128, 2 threads: 162 ms in 4 row tiles, 84 ms in 9 column tiles of 5568.
        return (cols // tiles) // q * q
    return 0


def cpu_matmul_limit_tile(ranges: list[int], sizes: list[int], m: int, n: int | None,
                          limit: int, row_block: int = CPU_MATMUL_ROW_BLOCK) -> list[int]:
    """`sizes` (a CPU matmul kernel's tile: row dim `m`, column dim `n`; 0 = whole) shrunk
    until its split dims' product is at most `limit` (the capacity check's rows), by whole
    microkernel blocks: rows first, to a divisor of the rows (a static row count), in whole
    `row_block`s where such a divisor fits, then columns in whole CPU_MATMUL_COLUMN_QUANTUM widths
    (dividing N where one does). Never below one block of each: what still does not fit
    stays over, as the generic shrink leaves a tile of one row."""
    sizes = list(sizes)

    def others(d: int) -> int:
        return math.prod(x for i, x in enumerate(sizes) if x and i != d)

    def points() -> int:
        return math.prod(x for x in sizes if x)

    if points() <= limit:
        return sizes
    if sizes[m]:
        allowed = max(1, limit // others(m))
        divisors = [r for r in range(row_block, min(sizes[m], allowed) + 1)
                    if ranges[m] % r == 0]
        blocks = [r for r in divisors if r % row_block == 0]
        # Whole blocks if a divisor has them, else any divisor (its static remainder rows
        # are vectorized at their own size), else one block.
        sizes[m] = max(blocks or divisors or [min(sizes[m], row_block)])
    q = CPU_MATMUL_COLUMN_QUANTUM
    if points() > limit and n is not None and sizes[n] > q:
        allowed = max(q, limit // others(n) // q * q)
        divisors = [w for w in range(q, allowed + 1, q) if ranges[n] % w == 0]
        sizes[n] = max(divisors) if divisors else allowed
    return sizes


@dataclass(frozen=True)
class MatmulTiling:
    """A CPU matmul kernel's tiles: rows and columns per tile (0: whole)."""

    rows: int
    cols: int


# The least work per thread, in launches' time, for which a CPU matmul kernel of too few row
# tiles is split by its columns as well.
MATMUL_MIN_TILE_LAUNCHES = 10


def cpu_matmul_tiling(rows: int, cols: int, depth: int, elem_bytes: int, row_tile: int,
                      threads: int, prologue_row_bytes: int = 0, prologue_row_flops: int = 0,
                      tiles_per_thread: int = 4, device: Device = CPU_HOST,
                      quantum: int = CPU_MATMUL_COLUMN_QUANTUM) -> MatmulTiling:
    """Rows and columns per tile of a CPU matmul kernel C[rows, cols] = A[rows, depth]
    B[depth, cols] (with an elementwise prologue on A of `prologue_row_bytes` and
    `prologue_row_flops` per row) that the row policy gave tiles of `row_tile` rows.

    Each row tile packs and reads all of B; each column tile reads its rows of A and
    recomputes their prologue. With few rows and a B larger than a core's L2 (a Linear at
    batch 1, seq 128: B is 7-9 MB, A 0.4 MB), row tiles stream B from memory once per
    tile; column tiles (or both) read it fewer times. The choice: the fewest bytes read
    among tilings of at least `threads * tiles_per_thread` tiles whose prologue stays on
    chip and is recomputed for at most 1/16 of the matmul's work. Measured (2 threads,
    seq 128): a Linear 768 -> 3072 8.3 -> 5.5 ms; GPT-2-small 500 -> 402 ms. Column tiles
    are whole `quantum`s (a multiple of the head size where the columns are heads x
    head_dim loops)."""
    b_bytes = depth * cols * elem_bytes
    a_bytes = rows * depth * elem_bytes
    row_tiles_now = math.ceil(rows / row_tile) if row_tile else 1
    keep = MatmulTiling(row_tile, 0)
    flops = 2 * rows * cols * depth
    # Fewer row tiles than threads (rows with no divisor in range: ViT's 197 tokens) leaves
    # cores idle, which no saving of bytes makes up for: then columns are split even where B
    # fits in L2, if each thread's share is worth MATMUL_MIN_TILE_LAUNCHES launches. Measured
    # (2 threads): a Linear 768 -> 3072 over 197 rows 6.8 ms in one tile, 3.3 ms in eight.
    worth_threads = flops / threads / device.matmul_flops_per_s >= \
        MATMUL_MIN_TILE_LAUNCHES * device.launch_s

    def starved(tiles: int) -> bool:
        return worth_threads and tiles < threads

    if b_bytes <= device.l2_bytes and not starved(row_tiles_now):
        return keep
    want = threads * tiles_per_thread
    options = {rows} | {r for r in range(CPU_MATMUL_MIN_ROWS, rows) if rows % r == 0}
    # Ordered by (too few tiles for the threads, bytes read).
    best, best_key = keep, (starved(row_tiles_now), row_tiles_now * b_bytes + a_bytes)
    for r in sorted(options, reverse=True):
        row_tiles = rows // r
        if prologue_row_bytes * r > device.on_chip_bytes:
            continue
        # As many tiles as the pool balances, else at least one per thread.
        width = _column_width(cols, math.ceil(want / row_tiles), quantum) or \
            _column_width(cols, math.ceil(threads / row_tiles), quantum)
        if not width or width >= cols:
            continue
        col_tiles = math.ceil(cols / width)
        if prologue_row_flops * rows * col_tiles * 16 > flops:
            continue
        key = (starved(row_tiles * col_tiles), row_tiles * b_bytes + col_tiles * a_bytes)
        if key < best_key:
            best, best_key = MatmulTiling(0 if r == rows else r, width), key
    return best


def cpu_matmul_tiling_candidates(rows: int, cols: int, depth: int, elem_bytes: int,
                                 row_tile: int, threads: int, prologue_row_bytes: int = 0,
                                 prologue_row_flops: int = 0, tiles_per_thread: int = 4,
                                 device: Device = CPU_HOST,
                                 quantum: int = CPU_MATMUL_COLUMN_QUANTUM) -> list[MatmulTiling]:
    """The tilings `--tune` measures for a CPU matmul kernel, the model's
    (`cpu_matmul_tiling`) first: the row tiles alone, then whole rows in column tiles for
    1, 2, 4 and 8 tiles per thread, each whose prologue stays on chip and is recomputed for
    at most 1/16 of the matmul's work. A kernel of less work per thread than
    MATMUL_MIN_TILE_LAUNCHES launches has the model's alone."""
    first = cpu_matmul_tiling(rows, cols, depth, elem_bytes, row_tile, threads,
                              prologue_row_bytes, prologue_row_flops, tiles_per_thread,
                              device, quantum)
    out = [first]
    flops = 2 * rows * cols * depth
    if flops / threads / device.matmul_flops_per_s < MATMUL_MIN_TILE_LAUNCHES * device.launch_s:
        return out  # microseconds of work: not worth measuring
    keep = MatmulTiling(row_tile, 0)
    if row_tile and keep not in out:
        out.append(keep)
    if prologue_row_bytes * rows > device.on_chip_bytes:
        return out
    for per_thread in (1, 2, 4, 8):
        width = _column_width(cols, threads * per_thread, quantum)
        if not width or width >= cols:
            continue
        if prologue_row_flops * rows * math.ceil(cols / width) * 16 > flops:
            continue
        tiling = MatmulTiling(0, width)
        if tiling not in out:
            out.append(tiling)
    return out


# The CPU attention kernel's tiles (passes/tiling/cpu_attention.py): at most 128 query rows,
# key tiles whose f32 K^T and V tiles take at most 128 KB (half a core's L2 beside the
# scores' tile and the accumulator). A tile's own work (K^T transposed and packed per row
# block, the accumulator rescaled per key tile) shrinks with both; a causal diagonal tile
# computes BM x BN scores of which half are masked, so a causal kernel's key tiles are no
# wider than its row blocks. Measured (2026-12-05, this 2-core AVX-512 machine, one thread,
# B1 H8 D64 fp32, one process, min of 12 calls), rows x keys: S2048 64x128 83.5 ms,
# 128x128 84.2, 64x256 82.0, 128x256 76.6 (eager's SDPA 72.0); causal 64x128 44.5,
# 128x128 43.5, 128x256 44.8, 64x256 47.1 (eager 47.1); S1024 64x128 22.3, 128x256 19.8
# (eager 19.2), causal 11.6, 128x128 11.5, 128x256 12.2 (eager 13.4).
CPU_ATTENTION_MAX_ROWS = 128
CPU_ATTENTION_KV_TILE_BYTES = 128 * 1024


# The least scores per (batch, head) worth the CPU attention kernel: below, the whole attention
# is microseconds of work and the planner's kernels (which fuse the head split and merge
# around it) are faster. Measured on this 2-core machine (2026-12-02, one process, medians):
# a transformer layer with 16 x 16 scores 0.341 ms as an attention kernel against 0.266 ms
# planned; attention alone at 64 x 64 0.120 against 0.193, at 256 x 256 4.5 against 7.9.
CPU_ATTENTION_MIN_SCORES = 64 * 64


def cpu_attention_pays(q_len: int, kv_len: int) -> bool:
    """Whether an attention with these lengths is worth the CPU attention kernel."""
    return q_len * kv_len >= CPU_ATTENTION_MIN_SCORES


def cpu_attention_tile(batch: int, q_len: int, kv_len: int, head_dim: int, v_dim: int,
                       threads: int, tiles_per_thread: int = 4,
                       causal: bool = False) -> tuple[int, int]:
    """(query rows, keys) per tile of the CPU attention kernel. Keys: the widest of 256,
    128, 64, 32, 16 whose f32 K^T and V tiles fit CPU_ATTENTION_KV_TILE_BYTES (not above
    kv_len; for a `causal` mask, not above the rows either). Rows: a divisor of q_len (a
    dynamic row count runs the microkernel's scalar remainder), a multiple of
    CPU_MATMUL_ROWS where one divides, at most CPU_ATTENTION_MAX_ROWS, the most rows that
    still give every thread `tiles_per_thread` tiles (fewer rows only down to one row
    block); no divisor in range: the most rows, the last tile short."""
    bn = 16
    for keys in (256, 128, 64, 32, 16):
        if 4 * keys * (head_dim + v_dim) <= CPU_ATTENTION_KV_TILE_BYTES:
            bn = keys
            break
    bn = min(bn, kv_len)
    if q_len <= CPU_MATMUL_ROWS:
        return q_len, bn
    rows = _attention_rows(batch, q_len, threads, tiles_per_thread)
    if causal:
        while bn > 16 and bn > rows:
            bn //= 2
    return rows, bn


def _attention_rows(batch: int, q_len: int, threads: int, tiles_per_thread: int) -> int:
    """The CPU attention kernel's query rows per tile (`cpu_attention_tile`)."""
    wanted = threads * tiles_per_thread
    candidates = [r for r in range(min(q_len, CPU_ATTENTION_MAX_ROWS), 0, -1)
                  if q_len % r == 0 and r >= CPU_MATMUL_ROWS]
    blocked = [r for r in candidates if r % CPU_MATMUL_ROWS == 0] or candidates
    for rows in blocked:
        if batch * (q_len // rows) >= wanted:
            return rows
    if blocked and batch * (q_len // blocked[-1]) >= threads:
        return blocked[-1]
    # No divisor gives every thread a tile (a prime q_len): row blocks of the microkernel's
    # rows, enough of them, the last tile short.
    per_batch = -(-wanted // batch)
    rows = -(-q_len // per_batch)
    rows = -(-rows // CPU_MATMUL_ROWS) * CPU_MATMUL_ROWS
    return max(1, min(q_len, CPU_ATTENTION_MAX_ROWS, rows))


# --- attention (compiler/targets/cuda/attention.py) ------------------------------------------


@dataclass(frozen=True)
class AttentionTile:
    """One CTA of the attention kernel: `bm` query rows (a warpgroup per 64, m64 MMAs), key/value
    tiles of `bn` keys streamed through `stages` shared-memory stages."""

    bm: int
    bn: int
    stages: int
    head_dim: int

    def shared_bytes(self, element_bytes: int) -> int:
        q = self.bm * self.head_dim * element_bytes
        kv = 2 * self.stages * self.bn * self.head_dim * element_bytes
        # P double-buffered (P_j-1 V_j-1 in flight), unless P V reads P from registers.
        p = 0 if attention_p_in_registers(self) else 2 * self.bm * self.bn * element_bytes
        return q + kv + p


# P V reads P from the softmax's registers (wgmma with A in registers: the scores'
# accumulator fragment, rounded to 16 bits two at a time, is the A fragment of the next
# product, FlashAttention-3's layout identity) where the thread's live fragments fit, else
# from two P buffers in shared memory. During the softmax of S_j a thread holds S_j (bn / 2
# f32), O (head_dim / 2) and P_j-1 (bn / 4 words), and S_j+1 (bn / 2) where the kernel
# issues it ahead (`attention_scores_ahead`), at most ATTENTION_P_REGISTER_WORDS in all.
# Measured (run 221, H100, against P in shared memory): one-warpgroup tiles 1.04-1.07x
# (GPT-2's T1024 D64 0.0610 -> 0.0582 ms, S4096 D64 1.397 -> 1.346, S1024 D128 0.157 ->
# 0.147); the (128, 128) tile at head dim 128 with S_j+1 ahead (224 words) spilled and took
# 1.24x as long. None: this rule; True / False: forced (A/B).
ATTENTION_P_IN_REGISTERS: bool | None = None
ATTENTION_P_REGISTER_WORDS = 192


def _attention_live_words(tile: "AttentionTile", ahead: bool) -> int:
    """Words a consumer thread holds during the softmax with P in registers: S_j (and S_j+1
    where `ahead`), O and P_j-1."""
    return tile.bn // 2 * (2 if ahead else 1) + tile.head_dim // 2 + tile.bn // 4


def attention_p_in_registers(tile: "AttentionTile") -> bool:
    """Whether the attention kernel of `tile` keeps P in registers (see above)."""
    if ATTENTION_P_IN_REGISTERS is not None:
        return ATTENTION_P_IN_REGISTERS
    return _attention_live_words(tile, ahead=False) <= ATTENTION_P_REGISTER_WORDS


def attention_scores_ahead(tile: "AttentionTile", persistent: bool = False) -> bool:
    """Whether the kernel issues S_j+1 before S_j's softmax (the softmax overlaps both
    products), or S_j in step j (FlashAttention-3's order: the softmax overlaps P_j-1 V_j-1
    and the other warpgroups' MMAs) where S_j+1 would not fit beside P in registers, or
    where the kernel is `persistent` (S_j+1 ahead would read a stage the producer may be
    refilling for the next block). With P in shared memory, always ahead."""
    if not attention_p_in_registers(tile):
        return True
    if persistent:
        return False
    if ATTENTION_SCORES_AHEAD is not None:
        return ATTENTION_SCORES_AHEAD
    return _attention_live_words(tile, ahead=True) <= ATTENTION_P_REGISTER_WORDS


# None: `attention_scores_ahead`'s rule; True / False: forced where P is in registers (A/B).
ATTENTION_SCORES_AHEAD: bool | None = None


def attention_key_tiles(kv_len: int, causal: bool) -> float:
    """Key tiles of 128 an attention block reads, on average (half of them under a causal
    mask): what the attention tile's and schedule's rules are stated in."""
    return -(-kv_len // 128) / (2 if causal else 1)


def attention_persistent(tile: "AttentionTile", producer: bool, key_tiles: float) -> bool:
    """Whether the attention kernel is persistent: a CTA per SM slot looping over work units
    (a block of query rows, or under a causal mask a pair of them whose key tiles add up to
    the same count for every pair), so that the next block's first K/V tiles load during
    this one's last tiles and its Q during this one's last P V and O store, which each
    block would otherwise pay exposed (run 222: about 3.5 us a block at head dim 128). It
    takes the producer warpgroup (its one thread loads across blocks), P in registers, and
    FlashAttention-3's order (`attention_scores_ahead` is off for it). Chosen where a block
    reads at most ATTENTION_PERSISTENT_MAX_TILES key tiles of 128 on average (`key_tiles`),
    where the fixed cost is a large part of a block's time, on two warpgroups' tiles (one
    warpgroup's, two CTAs an SM, measured slower persistent: below)."""
    if not (producer and attention_p_in_registers(tile)):
        return False
    if ATTENTION_PERSISTENT is not None:
        return ATTENTION_PERSISTENT
    return tile.bm >= 128 and key_tiles <= ATTENTION_PERSISTENT_MAX_TILES and \
        ATTENTION_SCORES_AHEAD is not True


# Measured (run 228, H100, B8 H16 bf16, one process, against the same tile not persistent,
# (128, 128, 2) with the producer warpgroup): head dim 128, causal S1024 (4 key tiles a
# block) 0.1006 -> 0.0930 ms, S1024 (8) 0.1371 -> 0.1340, causal S2048 (8) 0.2891 ->
# 0.2737, S2048 (16) 0.4835 -> 0.4565, causal S4096 (16) 1.065 -> 1.045, S4096 (32) 1.869 ->
# 1.920 (slower: not taken). At head dim 64 the persistent (128, 128, 2) against one
# warpgroup's (64, 128): GPT-2's T1024 causal (4) 0.0587 -> 0.0521, causal S4096 (16)
# 0.762 -> 0.710, S4096 (32) 1.320 -> 1.310 (even); persistent (64, 128, 3) was slower
# (1.545, 0.831). The same kernel measured twice in that run differed by up to 3%.
ATTENTION_PERSISTENT_MAX_TILES = 16


# None: `attention_persistent`'s rule; True / False: forced where it can be built (A/B).
ATTENTION_PERSISTENT: bool | None = None


# Key tiles of 128 a block must read, on average, before two warpgroups sharing each K/V
# tile (BM 128, with the producer warpgroup) beat one warpgroup on 64-key tiles at head dim
# 128: the block's fixed costs (Q's load, the pipeline's fill, the last P V and the store)
# are paid once per 128 rows instead of 64, and K and V are read from L2 half as often. Run
# 184 (H100, B8 H16, bf16, the producer warpgroup on): S4096 non-causal (32 tiles a block)
# 1.874 ms against 2.312; causal S4096 (16) 0.987 against 1.166. Before the producer (run
# 133) the causal S4096 point went the other way (1.59 against 1.46), and the bound was 32.
# With P in registers and FlashAttention-3's order on that tile (run 223): S1024 (8 tiles)
# 0.1449 -> 0.1356 ms, causal S1024 (4) 0.1066 -> 0.1013, causal S2048 (8) 0.3184 ->
# 0.2902: the bound is 4 (fewer was not measured).
ATTENTION_WIDE_MIN_TILES = 4


def attention_ctas_per_sm(tile: AttentionTile, element_bytes: int, device: Device) -> int:
    """Attention blocks of `tile` an SM holds: two of one warpgroup (64 rows) where their
    shared memory fits (the second CTA's MMAs run while the first computes its softmax),
    else one."""
    fits_two = 2 * (tile.shared_bytes(element_bytes) + 1024) <= device.shared_bytes_per_unit
    return 2 if tile.bm == 64 and fits_two else 1


def attention_tile(head_dim: int, element_bytes: int, device: Device, q_len: int = 0,
                   kv_len: int = 0, causal: bool = False) -> AttentionTile:
    """The attention kernel's tile: 64 query rows (one warpgroup) and two K/V stages, with the
    widest key tile (128, else 64) that keeps two CTAs resident per SM (the second CTA's
    MMAs run while the first one computes its softmax), the register budget (the scores'
    fragment is bn / 2 f32 per thread beside the output's head_dim / 2) at most 128. Where
    that leaves 64-key tiles (head dim 128) and a block reads ATTENTION_WIDE_MIN_TILES key
    tiles of 128 or more on average (half the keys under a causal mask), two warpgroups of
    64 rows share 128-key tiles in one CTA instead: each K/V tile is read once for 128 rows,
    and the warpgroups take turns at the tensor cores. Not at head dim 64, where one
    warpgroup has 128-key tiles already: two warpgroups there (P in registers, taking turns)
    measured 1.05x at S4096 in run 221, 0.95x in run 222, and 0.84x causal (0.865 against
    0.730 ms) unless persistent: where a block reads ATTENTION_WIDE_MIN_TILES to
    ATTENTION_PERSISTENT_MAX_TILES key tiles, the persistent (128, 128, 2) (run 228: GPT-2's
    T1024 0.0587 -> 0.0521 ms, causal S4096 0.762 -> 0.710). Past that, where a block reads
    ATTENTION_DEEP_MIN_TILES key tiles of 128 or more (more than 64 query rows), one
    warpgroup takes three K/V stages, still two CTAs an SM (P in registers left the room):
    run 223, S4096 D64 1.329 -> 1.241 ms, causal 0.819 -> 0.754; below the wide tile's
    bound, one warpgroup and two stages."""
    for bn in (128, 64):
        tile = AttentionTile(64, bn, 2, head_dim)
        registers = bn // 2 + head_dim // 2
        if attention_ctas_per_sm(tile, element_bytes, device) == 2 and registers <= 128:
            break
    else:
        return AttentionTile(64, 64, ATTENTION_STAGES[0], head_dim)
    tiles = attention_key_tiles(kv_len, causal)
    wide = AttentionTile(128, 128, 2, head_dim)
    wide_fits = q_len > 64 and head_dim // 2 + 64 <= 128 and \
        wide.shared_bytes(element_bytes) + 1024 <= device.shared_bytes_per_unit
    if tile.bn == 64 and wide_fits and tiles >= ATTENTION_WIDE_MIN_TILES:
        return wide
    if tile.bn == 128 and wide_fits and \
            ATTENTION_WIDE_MIN_TILES <= tiles <= ATTENTION_PERSISTENT_MAX_TILES:
        return wide  # persistent (`attention_persistent`)
    if tile.bn == 128 and q_len > 64:
        deep = AttentionTile(64, 128, 3, head_dim)
        if tiles >= ATTENTION_DEEP_MIN_TILES and \
                attention_ctas_per_sm(deep, element_bytes, device) == 2:
            return deep
    return tile


# Key tiles of 128 a block must read, on average, before a one-warpgroup tile of 128 keys
# takes three K/V stages (`attention_tile`; measured at 4 (no), 16 and 32 (yes), run 223).
ATTENTION_DEEP_MIN_TILES = 16


# K/V pipeline depths `--tune` tries for the attention kernel. One stage is not tried (it
# hung in run 126, before the loads were reordered, and no load could overlap an MMA
# there); three stages, wrong in run
# 127 while the stage bookkeeping was written for two, are right since run 130 and slower
# there (one CTA per SM instead of two).
ATTENTION_STAGES = (2, 3)


def attention_tile_candidates(head_dim: int, element_bytes: int, q_len: int, kv_len: int,
                              device: Device, causal: bool = False) -> list[AttentionTile]:
    """The tiles `--tune` measures for the attention kernel, the model's first: 64 or 128
    query rows (one warpgroup, or two sharing each K/V tile), key tiles of 128 and 64 with
    ATTENTION_STAGES K/V stages, each fitting the SM's shared memory, the scores' fragment
    and the output's in at most 128 registers per thread."""
    first = attention_tile(head_dim, element_bytes, device, q_len, kv_len, causal)
    out = [first]
    for bm, bn in ((64, 128), (64, 64), (128, 128), (128, 64)):
        if bn // 2 + head_dim // 2 > 128 or (bn == 128 and kv_len <= 64) or \
                (bm == 128 and q_len <= 64):
            continue
        for stages in ATTENTION_STAGES:
            tile = AttentionTile(bm, bn, stages, head_dim)
            if stages > 1 and (stages - 1) * bn >= kv_len:
                continue
            if tile.shared_bytes(element_bytes) + 1024 <= device.shared_bytes_per_unit and \
                    tile not in out:
                out.append(tile)
    return out


def attention_s(batch: int, q_len: int, kv_len: int, head_dim: int, causal: bool,
                device: Device, efficiency: float = 0.45) -> float:
    """Predicted time of the attention kernel: both products' FLOPs (half of them where the
    causal tiles are skipped) at a fraction of the tensor-core peak, or the HBM time of Q, K,
    V and O once, plus one launch."""
    flops = 4 * batch * q_len * kv_len * head_dim * (0.5 if causal else 1.0)
    bytes_moved = 2 * batch * (2 * q_len + 2 * kv_len) * head_dim
    return device.launch_s + max(flops / (device.matmul_flops_per_s * efficiency),
                                 bytes_moved / device.hbm_bytes_per_s)
