"""fusec's passes, one per file; importing this package registers them all.

`REGISTRY` maps each flag (`--fusion-form-singletons`) to its pass class.
"""

from fusec.passes.registry import REGISTRY, Pass, PassError, register, run_pipeline

# One import per pass file; the import registers the pass.
from fusec.passes import form_singletons  # noqa: F401,E402
from fusec.passes import inline_groups  # noqa: F401,E402
from fusec.passes import check_supported  # noqa: F401,E402
from fusec.passes import drop_asserts  # noqa: F401,E402
from fusec.passes import guard_indices  # noqa: F401,E402
from fusec.passes import report_indices  # noqa: F401,E402
from fusec.passes import globals_to_state  # noqa: F401,E402
from fusec.passes import scalars_to_tensors  # noqa: F401,E402
from fusec.passes import fold_empty_iterations  # noqa: F401,E402
from fusec.passes import form_loop_kernels  # noqa: F401,E402
from fusec.passes import materialize_outputs  # noqa: F401,E402
from fusec.passes import distinct_outputs  # noqa: F401,E402
from fusec.passes import hoist_reshapes  # noqa: F401,E402
from fusec.passes import outline_kernels  # noqa: F401,E402
from fusec.passes import tile_groups  # noqa: F401,E402
from fusec.passes import cpu_loop_order  # noqa: F401,E402
from fusec.passes import cpu_matmul  # noqa: F401,E402
from fusec.passes import cpu_tile_loops  # noqa: F401,E402
from fusec.passes import cpu_plan  # noqa: F401,E402
from fusec.passes import cpu_abi  # noqa: F401,E402
from fusec.passes import widen_i1_memrefs  # noqa: F401,E402
from fusec.passes import copies_to_linalg  # noqa: F401,E402
from fusec.passes import fast_exp  # noqa: F401,E402
from fusec.passes import fast_erf  # noqa: F401,E402
from fusec.passes import fence_broadcast_consumers  # noqa: F401,E402
from fusec.passes import unfence  # noqa: F401,E402
from fusec.passes import propagate_reshapes  # noqa: F401,E402
from fusec.passes import reassociate_reductions  # noqa: F401,E402
from fusec.passes import float_minmax_to_llvm  # noqa: F401,E402
from fusec.passes import fuse_vertical  # noqa: F401,E402
from fusec.passes import fuse_epilogue  # noqa: F401,E402
from fusec.passes import plan_fusion  # noqa: F401,E402
from fusec.passes import fuse_horizontal  # noqa: F401,E402
from fusec.passes import fuse_reduction  # noqa: F401,E402
from fusec.passes import place_intermediates  # noqa: F401,E402
from fusec.passes import capacity  # noqa: F401,E402
from fusec.passes import lower_tm_tensor  # noqa: F401,E402
from fusec.passes import gpu_kernels  # noqa: F401,E402
from fusec.passes import normalise_kernels  # noqa: F401,E402

__all__ = ["REGISTRY", "Pass", "PassError", "register", "run_pipeline"]
