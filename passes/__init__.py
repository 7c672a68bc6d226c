"""fusec's passes, one per file, in one folder per IR stage; importing this package registers
them all.

    passes/linalg/      the `linalg` stage: torch-mlir's output normalised for the planner
    passes/fusion/      the `fusion` stage: loop kernels, the planner and its fusions
    passes/tiling/      the `tiled` stage: tile-and-fuse, placement, capacity, GPU kernels
    passes/bufferized/  the `bufferized` stage: outputs and kernel outlining
    passes/cpu/         the `cpu` stage: launch plan, tile loops, microkernel, kernel ABI
    passes/*.py         what they share: the registry, the grouping mechanism, the cost
                        model, the report, what a target tells the passes (targets.py)

A file is named after its flag (`--fusion-tile` is tiling/tile.py); `REGISTRY` maps each flag
to its pass class; compiler/pipeline.py lists every stage's passes in order.
"""

from fusec.passes.registry import REGISTRY, Pass, PassError, register, run_pipeline

# One import per pass file, stage by stage; the import registers the pass.
from fusec.passes import inline_groups  # noqa: F401,E402
from fusec.passes.linalg import check_supported  # noqa: F401,E402
from fusec.passes.linalg import conv1d_as_conv2d  # noqa: F401,E402
from fusec.passes.linalg import drop_asserts  # noqa: F401,E402
from fusec.passes.linalg import fold_constants  # noqa: F401,E402
from fusec.passes.linalg import fold_parameters  # noqa: F401,E402
from fusec.passes.linalg import reshape_parameters  # noqa: F401,E402
from fusec.passes.linalg import fold_empty_iterations  # noqa: F401,E402
from fusec.passes.linalg import globals_to_state  # noqa: F401,E402
from fusec.passes.linalg import guard_indices  # noqa: F401,E402
from fusec.passes.linalg import guard_division  # noqa: F401,E402
from fusec.passes.linalg import nan_minmax  # noqa: F401,E402
from fusec.passes.linalg import narrow_contraction_operands  # noqa: F401,E402
from fusec.passes.linalg import split_reductions  # noqa: F401,E402
from fusec.passes.linalg import scalars_to_tensors  # noqa: F401,E402
from fusec.passes.linalg import widen_accumulators  # noqa: F401,E402
from fusec.passes.fusion import attention  # noqa: F401,E402
from fusec.passes.fusion import epilogue  # noqa: F401,E402
from fusec.passes.fusion import form_loop_kernels  # noqa: F401,E402
from fusec.passes.fusion import form_singletons  # noqa: F401,E402
from fusec.passes.fusion import horizontal  # noqa: F401,E402
from fusec.passes.fusion import input  # noqa: F401,E402
from fusec.passes.fusion import lower_tm_tensor  # noqa: F401,E402
from fusec.passes.fusion import materialize_outputs  # noqa: F401,E402
from fusec.passes.fusion import norm_prologue  # noqa: F401,E402
from fusec.passes.fusion import plan  # noqa: F401,E402
from fusec.passes.fusion import reduction  # noqa: F401,E402
from fusec.passes.fusion import vertical  # noqa: F401,E402
from fusec.passes.tiling import capacity  # noqa: F401,E402
from fusec.passes.tiling import cpu_attention  # noqa: F401,E402
from fusec.passes.tiling import cpu_loop_order  # noqa: F401,E402
from fusec.passes.tiling import fence_broadcast_consumers  # noqa: F401,E402
from fusec.passes.tiling import gpu_kernels  # noqa: F401,E402
from fusec.passes.tiling import hoist_reshapes  # noqa: F401,E402
from fusec.passes.tiling import normalise_kernels  # noqa: F401,E402
from fusec.passes.tiling import place  # noqa: F401,E402
from fusec.passes.tiling import propagate_reshapes  # noqa: F401,E402
from fusec.passes.tiling import reassociate_reductions  # noqa: F401,E402
from fusec.passes.tiling import report_indices  # noqa: F401,E402
from fusec.passes.tiling import tile  # noqa: F401,E402
from fusec.passes.tiling import unfence  # noqa: F401,E402
from fusec.passes.tiling import unshare_empties  # noqa: F401,E402
from fusec.passes.bufferized import distinct_outputs  # noqa: F401,E402
from fusec.passes.bufferized import outline_kernels  # noqa: F401,E402
from fusec.passes.cpu import constant_args  # noqa: F401,E402
from fusec.passes.cpu import copies_to_linalg  # noqa: F401,E402
from fusec.passes.cpu import cpu_abi  # noqa: F401,E402
from fusec.passes.cpu import cpu_conv  # noqa: F401,E402
from fusec.passes.cpu import cpu_matmul  # noqa: F401,E402
from fusec.passes.cpu import cpu_plan  # noqa: F401,E402
from fusec.passes.cpu import cpu_tile_loops  # noqa: F401,E402
from fusec.passes.cpu import fast_erf  # noqa: F401,E402
from fusec.passes.cpu import fast_exp  # noqa: F401,E402
from fusec.passes.cpu import log1p_expm1  # noqa: F401,E402
from fusec.passes.cpu import hyperbolic  # noqa: F401,E402
from fusec.passes.cpu import keep_roundings  # noqa: F401,E402
from fusec.passes.cpu import float_minmax_to_llvm  # noqa: F401,E402
from fusec.passes.cpu import vectorize  # noqa: F401,E402
from fusec.passes.cpu import widen_i1_memrefs  # noqa: F401,E402

__all__ = ["REGISTRY", "Pass", "PassError", "register", "run_pipeline"]
