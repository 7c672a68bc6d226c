"""The CUDA target: every `fusion.group` becomes one `gpu.func` kernel, lowered to PTX.

CUDA code generation: every `fusion.group` becomes one `gpu.func` kernel, lowered to PTX.

Input: a module whose entry function holds `fusion.group` ops over linalg-on-tensors (static
shapes), as target cuda's `tiled` stage leaves it (`tiled_passes`; given the fusion stage's
IR, `generate` runs that stage first). Output: a `CudaProgram` = the launch `Plan`
(runtime/plan.py; for cuda, `Launch.grid` = blocks, `Launch.block` = threads per block), the
kernels as `gpu` dialect text, their PTX for `--arch` (default sm_90), where a CUDA toolkit
(ptxas + fatbinary) is found a fatbin holding the sm_90 cubin *and* the PTX (forward
compatibility), and the bytes of the weights. `write_cuda_artifact` embeds all of it with
runtime/shim_cuda.c into `model.so`.

Which path builds each group (`Launch.info["path"]`, and the group's attributes):

  * a tiled group (`fusion.tile_kind` elementwise or row; its tile loop, or the group as one
    tile): the tile emitter (tiles.py, `TileEmitter`), from the tile loop
    itself: grid = the tiles, block = `fusion.block` threads, the cost model's launch shape
    (`info["tiled"]`);
  * `fusion.tile_kind = "thread"`: the fallback path (below), from the stage's tile loop, a
    tile per GPU thread (`info["tiled"]`, the emitters' refusals in `info["why"]`);
  * `fusion.path = "gemm"`: one cuBLASLt call (see below); `"view"`: no kernel, a view of a
    buffer;
  * a group the `tiled` stage left untiled (`fusion.untiled` says why): the group-level
    emitter below (`KernelEmitter`), whose launch shape is the same cost-model functions'
    applied to the whole group; failing that, the data-movement family (movement.py,
    `path: movement`: reshapes, slices, transposes, concats, pads, gathers, windows and
    non-last-axis reductions with their elementwise neighbours; `CudaOptions.movement`);
    failing that, the fallback path, which tiles it itself. A convolution reaches the
    planner's groups as im2col + a matmul (`--fusion-gpu-convs-to-gemm`).

How the group-level emitter makes a kernel. The group's linalg payloads are emitted per
element inside a `gpu.func`: every linalg value of the group is, for one thread, either

  * `Full`:   the thread's elements of a [rows, cols] tensor, kept in registers (SSA values),
  * `Row`:    one scalar per row (a reduction's result, a [rows, 1] tensor), uniform in the block,
  * `Scalar`: a constant or a filled tensor,

and group inputs (and weights: tensor constants become buffers of the artifact) are loaded
lazily from global memory, in 16-byte vectors, at the place the indexing map asks for (the
element, the row, or the column: LayerNorm's weight). Two kernel shapes exist, chosen by the
cost model's pure functions `elementwise_launch_shape` / `row_launch_shape`
(passes/cost_model.py, re-exported here); the tile emitter subclasses this one and runs a
tile's ops the same way:

  * elementwise (no reduction, identity maps): one tile per block; each thread loads `unroll`
    16-byte chunks (all loads first, then the arithmetic, then the stores).
  * row (reductions over the last dimension, broadcasts of rows/columns): one block per row;
    the row stays in registers between passes (softmax reads x once: max, exp, sum, divide).
    Each reduction folds the thread's elements; reductions are scheduled as early as their
    inputs allow and the ready ones are combined across the block together, one barrier per
    round (`flush_reductions`: warp xor-shuffles, a shared-memory slot per warp).

Numerics choices: 16-bit float reductions accumulate in f32 (as PyTorch's do); `x / s` with `s`
one value per row is computed as `x * (1/s)`; the summation order is a tree, not sequential.

What the emitter refuses (a `CudaCodegenError` naming the op): reductions over other than the
last dimension, non-projection indexing maps, rows too long for registers, ops that are not
linalg.generic / linalg.fill / reshapes / scalar arith+math (matmuls, transposes, pads, convs,
pooling), a `linalg.index` in a reduction's live payload other than an argmax's column, and
generics over a domain that is neither the group's, its rows', its last dim (`Col`: an
iota a top-k compares against), trailing dims of its rows (`RowMod`: positions in [B, T,
d]) nor trailing dims of it (a causal mask). A parallel payload's `linalg.index` is its
loop's position: the thread's column, the block id taken apart over the loops (row mod T
for `RowMod`), or, in an elementwise kernel, the element's offset taken apart
(`KernelEmitter.bind_indices`). Such a group goes through the fallback path
(`fallback_kernel`, upstream MLIR: the CPU path's tile-and-fuse and bufferization, one tile
per GPU thread), still one kernel per group; `Launch.info["path"]` says which path built each
kernel ("fast" | "fallback") and, for the fallback, `info["why"]` the emitter's refusal.
`CudaOptions(fallback=False)` turns the fallback off (the refusal is raised).

Matmul-rooted groups (linalg.matmul / batch_matmul) are not kernels of ours: in the `tiled`
stage (`--fusion-gpu-kernels`, running `gpu_rewrites`), `split_matmul_groups` splits each
into [prologue] + one cuBLASLt call (`Launch.launch_kind = "gemm"`, parameters in
`Launch.gemm`, the reason in `info["why"]` and the gemm group's `fusion.why`) + [epilogue],
fusing bias / ReLU / bf16 rounding / (16-bit) GELU into cuBLASLt's epilogue (see the section
comment). Other rewrites before emission, each for the GPU's sake:
transposes that only move size-1 dims become reshapes, static slices become gathers, groups the
emitter refuses are cut at reshapes of computed values, and multi-output groups it refuses are
split one per output, groups that read nothing are computed here (`fold_constant_groups`).
Layout ops (transposes, reshapes, slices, broadcasts) around a cuBLASLt call become its
strided operand / result layouts (batch stride, leading dimension, transpose flag, offset:
attention's head split and merge cost no kernel), and a layout group whose result is a dense
view of its input becomes a plan-level view (`Buffer.view_of`): see the "layout views"
section (`gpu_rewrites` lists every rewrite in order; `CudaOptions(gemm=False)` turns them
off).

Kernel arguments use the bare-pointer convention: one `void*` (device pointer) per memref,
group inputs first, then the group's weights, then group outputs, all flat `memref<NxT>`
(fallback kernels: inputs, outputs, then weights, shaped memrefs; `Launch.buffers` lists
each kernel's buffers in its own argument order).

Its rooms, one path each (module-level imports run down this list, never up; a few
functions import a room further down when they run, e.g. tc_gemm's launch the chosen tile):

  device.py    the device description (`CudaDevice`, `H200`), element tables, the launch
               shapes from the cost model, the index-check status global
  analysis.py  small IR helpers and the group-level analysis (`analyse_group`)
  body.py      what a payload computes (scalar bodies, unary kinds, casts); the one numpy
               interpreter of payloads (`evaluate_payload`)
  lanes.py     indices over a thread's lanes (the data-movement evaluator's)
  built.py     kernel texts already built, by what they are built from (a model's layers)
  emitter.py   the group-level kernel emitter (`KernelEmitter`)
  tiles.py     the tile emitter (`TileEmitter`) and what the `tiled` stage asks of it
               (`tile_refusal`, `tile_for_fallback`)
  options.py   `CudaOptions` (typed, frozen: every field a `--cuda-*` flag)
  ptx.py       the kernels' gpu.module, lowering to PTX / fatbin
  fallback.py  the fallback path (upstream MLIR, a tile per GPU thread)
  layouts.py   strided views: layout ops as cuBLASLt operand layouts and plan-level views
  gemm.py      matmul-rooted groups as cuBLASLt calls (operands, epilogues, launch tables)
  folds.py     what a data-movement kernel's folds read (reductions' and windows' points,
               a reduction's combiner)
  transpose.py the data-movement family's transposing shapes (squares through shared memory)
  movement.py  the data-movement family (`MovementEmitter`: reshapes, slices, transposes,
               concats, pads, gathers, windows, non-last-axis reductions, with their
               elementwise neighbours): direct, transpose and reduce shapes
  wgmma.py     the tensor-core GEMM family (TMA + mbarrier pipeline + wgmma, sm_90a)
  tc_gemm.py   that family in the plan: which matmul groups it takes, its epilogue chain,
               its launch (tensor maps)
  rewrites.py  the IR-to-IR group rewrites the `tiled` stage runs for the GPU
  gemm_pair.py two matmul groups of one A (SwiGLU's gate and up) merged into one pair kernel
  gemm_siblings.py  our GEMM groups of one A that do not read each other (q, k, v) merged
               into one kernel over their concatenated columns
  folding.py   groups that read nothing, folded at compile time
  attention_layouts.py  where an attention kernel's Q, K, V and O live (strided views)
  rewrite_passes.py  the rewrites in order (`REWRITES`), each also a flag of its own
  choose_tiles.py    each tensor-core GEMM's and attention kernel's tile: the tuning cache's
               (`fusec --tune`, runtime/tuning.py) or the cost model's, recorded on the group
  attention.py the attention family (online softmax, both products on wgmma)
  stages.py    the target's pass lists (`tiled_passes`, `cuda_passes`)
  program.py   `generate`: the tiled module -> `CudaProgram` (plan, kernels, PTX, weights)
  artifact.py  `model.so`: the host tables, `write_cuda_artifact`, `build_so`
  dump.py      what runs on the GPU, readable: `--emit cuda`/`ptx`, `--dump-dir`'s kernels

`fusec.passes` does not import this package: it registers what the planner and the tiling
ask of the device (`fusec.passes.targets`) and its rewrite passes when it is imported.
"""

from __future__ import annotations

from fusec.compiler.targets.cuda.analysis import analyse_group
from fusec.compiler.targets.cuda.artifact import (
    EXPORTED,
    build_so,
    host_code,
    load_metadata,
    options_from,
    write_cuda_artifact,
)
from fusec.compiler.targets.cuda.body import unary_kind
from fusec.compiler.targets.cuda.device import (
    ELEMENT_BYTES,
    H200,
    CudaCodegenError,
    CudaDevice,
    elementwise_launch_shape,
    row_launch_shape,
)
from fusec.compiler.targets.cuda.fallback import FALLBACK_BLOCK, fallback_kernel
from fusec.compiler.targets.cuda.gemm import (
    CUBLASLT_EPILOGUES,
    GEMM_FIELDS,
    GEMM_WORKSPACE_BYTES,
    gemm_launch,
    gemm_table,
)
from fusec.compiler.targets.cuda.layouts import (
    MatrixLayout,
    StridedView,
    matrix_layout,
    merged_stride,
)
from fusec.compiler.targets.cuda.program import CudaProgram, generate, gpu_rewrites
from fusec.compiler.targets.cuda.options import CudaOptions
from fusec.compiler.targets.cuda.ptx import find_cuda_toolkit, lower_kernels
from fusec.compiler.targets.cuda.rewrites import (
    extract_slices_to_generics,
    group_refusal,
    unit_transposes_to_reshapes,
)
from fusec.compiler.targets.cuda.stages import cuda_passes, tiled_passes

__all__ = [
    "CUBLASLT_EPILOGUES", "ELEMENT_BYTES", "EXPORTED", "FALLBACK_BLOCK", "GEMM_FIELDS",
    "GEMM_WORKSPACE_BYTES", "H200", "CudaCodegenError", "CudaDevice", "CudaOptions",
    "CudaProgram", "MatrixLayout", "StridedView", "analyse_group", "build_so", "cuda_passes",
    "elementwise_launch_shape", "extract_slices_to_generics", "fallback_kernel",
    "find_cuda_toolkit", "gemm_launch", "gemm_table", "generate", "gpu_rewrites",
    "group_refusal", "host_code", "load_metadata", "lower_kernels", "matrix_layout",
    "merged_stride", "options_from", "row_launch_shape", "tiled_passes", "unary_kind",
    "unit_transposes_to_reshapes", "write_cuda_artifact",
]


def _register() -> None:
    """Tell the target-independent passes what this target builds (passes/targets.py)."""
    from fusec.compiler.targets.cuda.analysis import FAST_EMITTER_OPS, emitter_refusal
    from fusec.compiler.targets.cuda.attention import refusal as attention_refusal
    from fusec.compiler.targets.cuda.program import refuse_host_features
    from fusec.compiler.targets.cuda.tiles import tile_for_fallback, tile_refusal, whole_refusal
    from fusec.passes.targets import (
        KernelBuilder,
        KernelOps,
        register_attention,
        register_gemm_kernel,
        register_kernel_builder,
        register_kernel_ops,
    )

    device = CudaOptions().device
    register_kernel_builder(KernelBuilder(
        device=device,
        refuse_host_features=refuse_host_features,
        rewrites=lambda func, flags: gpu_rewrites(func, CudaOptions(device=device, **flags)),
        tile_refusal=tile_refusal,
        tile_for_fallback=tile_for_fallback,
        whole_refusal=whole_refusal,
    ))
    register_kernel_ops(KernelOps(device=device, ops=FAST_EMITTER_OPS, refusal=emitter_refusal))
    register_attention(device, attention_refusal)
    register_gemm_kernel(device, _gemm_refusal)


def _gemm_refusal(problem: dict) -> str | None:
    from fusec.compiler.targets.cuda import wgmma

    return wgmma.refusal(wgmma.GemmProblem(problem["m"], problem["n"], problem["k"],
                                           problem["in_type"], problem["out_type"],
                                           problem["b_layout"]))


_register()
from fusec.compiler.targets.cuda import rewrite_passes  # noqa: E402,F401 - registers the flags
from fusec.compiler.targets.cuda import choose_tiles  # noqa: E402,F401 - registers its flag
