"""fusec's passes, one per file; importing this package registers them all.

`REGISTRY` maps each flag (`--fusion-form-singletons`) to its pass class.
"""

from fusec.passes.registry import REGISTRY, Pass, PassError, register, run_pipeline

# One import per pass file; the import registers the pass.
from fusec.passes import form_singletons  # noqa: F401,E402
from fusec.passes import inline_groups  # noqa: F401,E402

__all__ = ["REGISTRY", "Pass", "PassError", "register", "run_pipeline"]
