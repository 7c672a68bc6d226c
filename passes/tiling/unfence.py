"""--fusion-unfence: remove the fences of --fusion-fence-broadcast-consumers.

Every `fusion.group` marked `fusion.fence` is dissolved into its enclosing block (as
--fusion-inline-groups does for all groups); other groups are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir

from fusec.passes.tiling.fence_broadcast_consumers import FENCE
from fusec.passes.inline_groups import groups_in, inline_group
from fusec.passes.registry import Pass, register


@register
@dataclass
class UnfencePass(Pass):
    """Dissolve the fence groups, keeping every other group."""

    ARGUMENT = "fusion-unfence"

    def run(self, module: ir.Operation) -> None:
        for group in reversed(groups_in(module)):
            if FENCE in group.attributes:
                inline_group(group)
