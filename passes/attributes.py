"""The `fusion.*` attribute vocabulary: every decision the passes record in the IR, named once.

Decisions live in the IR (FileCheck sees them, reloading the IR loses nothing); this module
is the one list of their names, each with what it means and who writes it. Code reads and
writes them through these constants (`attributes.UNTILED`), never a spelled-out string, so a
name is changed in one place and `grep` finds every reader. The op names (`fusion.group`,
`fusion.yield`) are the dialect's (dialects/FusionOps.td), not attributes.
"""

from __future__ import annotations

# --- module attributes -------------------------------------------------------------------
TORCH_SIGNATURE = "fusion.torch_signature"  # frontend: input names, dtypes, dict outputs
INDEX_CHECKS = "fusion.index_checks"  # --fusion-guard-indices: one message per bounds check
ASSERTS_DROPPED = "fusion.asserts_dropped"  # --fusion-drop-asserts: how many cf.asserts went
STATE = "fusion.state"  # --fusion-globals-to-state: the model keeps state (an RNG seed)
SCALAR_RESULTS = "fusion.scalar_results"  # --fusion-scalars-to-tensors: results are numbers
PLAN = "fusion.plan"  # --fusion-cpu-plan: the CPU launch plan (JSON), read by the artifact

# --- linalg stage: on ops ----------------------------------------------------------------
GUARDED = "fusion.guarded"  # an indexed access already bounds-checked
INDEX_CHECK = "fusion.index_check"  # a checked read whose report --fusion-report-indices adds

# --fusion-fold-norm-prologue: on the epilogue generic after a matmul, what it applies (the
# folded normalisation's row values and column terms); our GEMM's reports name it "norm"
NORM_FOLD = "fusion.norm_fold"

# --- fusion stage: on groups (the planner's decision and its numbers) --------------------
DEVICE = "fusion.device"  # the device the planner weighed the group for
REASON = "fusion.reason"  # why these ops share a kernel
REFUSED = "fusion.refused"  # fusions refused, each "op@loc: kind: reason"
PARTS = "fusion.parts"  # the kinds of the groups a horizontal/input group merged
SIBLINGS = "fusion.siblings"  # reductions over one input merged by --fusion-reduction
# --fusion-split-reductions: a reduction's partials (how many per row); never fused into
# their combine
SPLIT_PARTIALS = "fusion.split_partials"
BYTES_FUSED = "fusion.bytes_fused"  # HBM bytes of the group as one kernel
BYTES_UNFUSED = "fusion.bytes_unfused"  # HBM bytes of its ops as separate kernels
BYTES = "fusion.bytes"  # HBM bytes a kernel moves (the plan's figure)
BYTES_SAVED = "fusion.bytes_saved"  # BYTES_UNFUSED - BYTES_FUSED
LAUNCHES_SAVED = "fusion.launches_saved"  # kernels the fusion saves
FLOPS = "fusion.flops"  # floating-point operations of the group
TIME_FUSED_NS = "fusion.time_fused_ns"  # the cost model's estimate, fused
TIME_UNFUSED_NS = "fusion.time_unfused_ns"  # and unfused
DUPLICATED = "fusion.duplicated"  # producers recomputed in more than one group
PARALLEL_TILES = "fusion.parallel_tiles"  # tiles the group's root offers the device
WORKING_SET = "fusion.working_set"  # bytes one tile keeps on chip
SHARED_INPUT_BYTES = "fusion.shared_input_bytes"  # --fusion-input: the input read once
SERIAL = "fusion.serial"  # a loop kernel (scan, scatter, sort): one thread, never fused

# --- tiled stage: on groups (the tiling, the placement, the GPU's paths) -----------------
TILE_SIZES = "fusion.tile_sizes"  # the root's tile (0: not tiled in that dim)
TILE_DIMS = "fusion.tile_dims"  # the tile loop's extents
TILE_KIND = "fusion.tile_kind"  # GPU: elementwise | row | thread (the fallback's tiles)
TILE_OP = "fusion.tile_op"  # --fusion-tile's tag on the root while it tiles (removed)
UNTILED = "fusion.untiled"  # why a group is built untiled
WHOLE = "fusion.whole"  # a producer computed whole before the tile loop, and why
RETILED = "fusion.retiled"  # --fusion-capacity re-tiled the group smaller, and why
SPLIT = "fusion.split"  # the group was split into one kernel per op, and why
SPLIT_OF = "fusion.split_of"  # the kind of the group a part was split from
MAX_TILE_ROWS = "fusion.max_tile_rows"  # --fusion-capacity's bound for --fusion-tile
MEM = "fusion.mem"  # on values: #fusion.mem<register|shared|global>
PLACEMENT = "fusion.placement"  # on groups: values per memory level
CAPACITY = "fusion.capacity"  # fits | over (and by how much)
BLOCK = "fusion.block"  # GPU: threads per block
GRID = "fusion.grid"  # GPU: blocks (CPU: tiles)
THREADS = "fusion.threads"  # GPU: threads the tile uses
REGISTERS = "fusion.registers"  # GPU: estimated registers per thread
OCCUPANCY = "fusion.occupancy"  # GPU: resident warps / warp slots
OPS = "fusion.ops"  # the group's op names, recorded before tiling nests them
FALLBACK = "fusion.fallback"  # GPU: why the emitters refused it (the fallback path builds it)
ATTENTION = "fusion.attention"  # --fusion-attention: an attention group's parameters
ATTENTION_REFUSED = "fusion.attention_refused"  # on a contraction: why it is not attention
PATH = "fusion.path"  # GPU: gemm (a cuBLASLt call) | view (a buffer view, no kernel)
WHY = "fusion.why"  # GPU: why a matmul group is a cuBLASLt call
GEMM_EPILOGUE = "fusion.gemm_epilogue"  # GPU: the ops fused into cuBLASLt's epilogue
GEMM_PAIR = "fusion.gemm_pair"  # GPU: two matmuls sharing A in one kernel, and why
GEMM_SIBLINGS = "fusion.gemm_siblings"  # GPU: sibling matmuls of one A in one kernel, and why
VIEW_OFFSET = "fusion.view_offset"  # GPU: a view's element offset into its buffer
SLICE_OFFSETS = "fusion.slice_offsets"  # GPU: a static slice rewritten as a gather
GPU_KERNELS = "fusion.gpu_kernels"  # on the function: --fusion-gpu-kernels has run
GEMM_NOTES = "fusion.gemm_notes"  # on the function: the GPU rewrites' decisions
NO_MOVEMENT = "fusion.no_movement"  # on the function: the data-movement kernels are off
TF32 = "fusion.tf32"  # GPU: a convolution's matmul runs with TF32 operands (conv_tf32)
CONV_AS_GEMM = "fusion.conv_as_gemm"  # GPU: a convolution rewritten as im2col + matmul
FENCE = "fusion.fence"  # --fusion-fence-broadcast-consumers' mark (removed by --fusion-unfence)
# --fusion-gpu-choose-tiles: a tensor-core GEMM's or attention kernel's tile, where it came
# from ("cost model" or "tuned: ..." with the measured times), the tuning cache's key for
# the kernel, how many candidates `--tune` measures for it and the model's prediction.
KERNEL_TILE = "fusion.kernel_tile"
KERNEL_TILE_FROM = "fusion.kernel_tile_from"
TUNE_KEY = "fusion.tune_key"
KERNEL_TILE_CANDIDATES = "fusion.kernel_tile_candidates"
KERNEL_TILE_PREDICTED_NS = "fusion.kernel_tile_predicted_ns"  # the model's time for its tile
LOOP_ORDER = "fusion.loop_order"  # --fusion-cpu-loop-order has ordered this op's loops

# --- bufferized and cpu stages: on kernel functions and ops ------------------------------
KIND = "fusion.kind"  # an outlined kernel function: its group's kind
NUM_INPUTS = "fusion.num_inputs"  # the host function: how many of its arguments are inputs
CPU_MATMUL = "fusion.cpu_matmul"  # --fusion-cpu-matmul's tag on a matmul it rewrites
CPU_MATMUL_VECTOR = "fusion.cpu_matmul_vector"  # and on its microkernel's vector ops
CPU_VECTORIZE = "fusion.cpu_vectorize"  # --fusion-cpu-vectorize's tag on an op it vectorizes
CPU_CONV = "fusion.cpu_conv"  # --fusion-cpu-conv's note on the matmul a convolution became
CPU_CONV_CHUNK = "fusion.cpu_conv_chunk"  # --fusion-cpu-conv: a convolution to cut in row chunks

NAMES = frozenset(v for k, v in dict(globals()).items() if k.isupper() and k != "NAMES")


def tuning_info(attrs) -> dict:
    """What the tile passes recorded on a kernel (`fusion.tune_key` and its kin), as the
    launch's info in the artifact's metadata: `--tune` times each kernel by its key, and the
    report shows where each tile came from."""
    import mlir.ir as ir

    out = {}
    for name, key in ((TUNE_KEY, "tune_key"),
                      (KERNEL_TILE_FROM, "tile_from")):
        if name in attrs:
            out[key] = ir.StringAttr(attrs[name]).value
    if KERNEL_TILE_CANDIDATES in attrs:
        out["tile_candidates"] = ir.IntegerAttr(attrs[KERNEL_TILE_CANDIDATES]).value
    if KERNEL_TILE_PREDICTED_NS in attrs:
        out["predicted_us"] = ir.IntegerAttr(
            attrs[KERNEL_TILE_PREDICTED_NS]).value / 1e3
    return out
