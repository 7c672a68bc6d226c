"""Kernel texts already built, by what they are built from.

The `tiled` stage asks the group-level families whether they take a group (the GPU
rewrites, the fallback's tiling) and code generation then builds it; a model's repeated
layers hand the same group to each family once per layer. Each family's kernel depends on
the group's body (its ops, types and constants; the group is isolated from above) and a
few parameters the family names in its key, never on the group's own attributes (the
stages' notes) or its SSA names; so a text is built once, under a probe name, and handed
out under each caller's symbol. Refusals are kept as their type and arguments only: an
exception keeps its traceback's frames, and with them Python objects of ops that later
passes erase (the bindings then hand a stale object to an op allocated at the same address).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

import mlir.ir as ir
from fusec.compiler.targets.cuda.device import CudaCodegenError

PROBE_SYMBOL = "fusec_built_probe"
CACHE_SIZE = 256


def body_text(group: ir.Operation) -> str:
    """`group` as text without its result names and its own attributes: its kind, operand
    and result types, and its body (local SSA numbering; non-splat constants elided: they
    are buffers of the artifact, never values in a kernel's text)."""
    text = group.operation.get_asm(large_elements_limit=16, use_local_scope=True)
    head, _, body = text.partition("\n")
    head = head[head.find("fusion.group"):]
    cut = head.find(" attributes {")
    return (head[:cut] if cut >= 0 else head) + "\n" + body


def renamed(text: str, symbol: str) -> str:
    """A text built under PROBE_SYMBOL, its function named `symbol`."""
    return text.replace(f"gpu.func @{PROBE_SYMBOL}(", f"gpu.func @{symbol}(", 1)


class Built:
    """Results by key (least recently used dropped past CACHE_SIZE): a value, or a refusal
    (a CudaCodegenError) raised again for each caller."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self.entries: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any, build: Callable[[], Any]) -> Any:
        hit = self.entries.get(key)
        if hit is None:
            try:
                hit = build()
            except CudaCodegenError as refusal:
                hit = _Refusal(type(refusal), refusal.args)
            self.entries[key] = hit
            if len(self.entries) > self.size:
                self.entries.popitem(last=False)
        else:
            self.entries.move_to_end(key)
        if isinstance(hit, _Refusal):
            raise hit.kind(*hit.args)
        return hit


class _Refusal:
    def __init__(self, kind: type, args: tuple) -> None:
        self.kind, self.args = kind, args


# The fast emitter's texts (KernelEmitter: key = body, launch geometry, weight count).
FAST = Built()
# The tensor-core GEMM family's texts (key = body, problem, tile, epilogue unroll and the
# epilogue operands known aligned).
TC_GEMM = Built()
