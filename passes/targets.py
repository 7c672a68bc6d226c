"""What a target's code generator tells the target-independent passes: the policy handed to
the mechanism (as IREE's DispatchCreation takes control functions).

Nothing under `fusec.passes` imports a target. A target that builds GPU kernels registers a
`KernelBuilder` for its device here when it is imported (`fusec.compiler.targets.cuda` does,
for "nvidia-h200"); `--fusion-gpu-kernels` and `--fusion-tile{device=...}` ask it:

- `refuse_host_features(func)`: raise `PassError` (located) for what the device cannot run;
- `rewrites(func, flags)`: the device's group rewrites (library calls or the device's own
  GEMM kernels, layout views, splits), under the pass's switches (`flags`: gemm, tc_gemm,
  movement, conv_tf32, matmul_tf32), returning one note per decision;
- `tile_refusal(group)`: why code generation would not build this tiled group (None: it does);
- `tile_for_fallback(group)`: tile a group no emitter builds as the fallback path runs it;
- `whole_refusal(group)` (optional): why no group-level kernel family builds this untiled
  group whole (None: one does); a group over the device's limits once tiled that one builds
  is kept whole, untiled, instead of split into one kernel per op (`capacity.tile_to_fit`).

A target with an attention kernel registers what it takes (`register_attention`):
`--fusion-attention` asks `attention_refusal(device, parameters)` before it forms a group.
A target with a GEMM kernel of its own (one that runs an epilogue on its accumulator)
registers what it takes (`register_gemm_kernel`): `--fusion-fold-norm-prologue` asks
`gemm_kernel_refusal(device, problem)` before it moves a normalisation into an epilogue.

Every target also says what one of its row or elementwise kernels can be made of
(`KernelOps`, registered by `fusec.compiler.targets.cpu` and `.cuda` when imported): the
planner's input and horizontal fusion ask `kernel_ops(device)` instead of keeping a copy of
the emitter's list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fusec.passes.registry import PassError
from mlir import ir


@dataclass(frozen=True)
class KernelBuilder:
    """A device's answers to the passes (see the module docstring)."""

    device: str
    refuse_host_features: Callable[[ir.Operation], None]
    rewrites: Callable[[ir.Operation, dict[str, bool]], list[str]]
    tile_refusal: Callable[[ir.Operation], str | None]
    tile_for_fallback: Callable[[ir.Operation], ir.Operation]
    whole_refusal: Callable[[ir.Operation], str | None] | None = None


_BUILDERS: dict[str, KernelBuilder] = {}


def _registered(table: dict, device: str, missing: str, target: str):
    """`table[device]`; a PassError saying what is `missing` and which target to import."""
    if device not in table:
        known = ", ".join(sorted(table)) or "none"
        raise PassError(f"{missing} for device '{device}' (registered: {known}); import its "
                        f"target, e.g. fusec.compiler.targets.{target}")
    return table[device]


def register_kernel_builder(builder: KernelBuilder) -> None:
    """Make `builder` the one the passes ask for `builder.device` (a later one replaces it)."""
    _BUILDERS[builder.device] = builder


def kernel_builder(device: str) -> KernelBuilder:
    """The registered builder of `device`; a PassError when no target registered one."""
    return _registered(_BUILDERS, device, "no code generator is registered", "cuda")


@dataclass(frozen=True)
class KernelOps:
    """What one row or elementwise kernel of a device's code generator is made of."""

    device: str
    # Op names such a kernel takes (besides scalar arith/math ops and the group terminator).
    ops: frozenset[str]
    # Why the code generator's row/elementwise emitter would refuse an op (None: it takes it).
    refusal: Callable[[ir.Operation], str | None]


_KERNEL_OPS: dict[str, KernelOps] = {}


def register_kernel_ops(kernel_ops: KernelOps) -> None:
    """Make `kernel_ops` the answer for `kernel_ops.device` (a later one replaces it)."""
    _KERNEL_OPS[kernel_ops.device] = kernel_ops


def kernel_ops(device: str) -> KernelOps:
    """What `device`'s row/elementwise kernels take; a PassError when no target said."""
    return _registered(_KERNEL_OPS, device, "no target has said what a kernel takes", "cpu")


_ATTENTION: dict[str, Callable[[dict], str | None]] = {}


def register_attention(device: str, refusal: Callable[[dict], str | None]) -> None:
    """`refusal(parameters)`: why `device`'s attention kernel cannot take an attention with
    these parameters (`fusion.attention`'s entries as Python values), None where it can."""
    _ATTENTION[device] = refusal


def attention_refusal(device: str, parameters: dict) -> str | None:
    """Why `device` builds no attention kernel for `parameters` (None: it does)."""
    if device not in _ATTENTION:
        return f"no attention kernel for device '{device}' yet"
    return _ATTENTION[device](parameters)


_GEMM: dict[str, Callable[[dict], str | None]] = {}


def register_gemm_kernel(device: str, refusal: Callable[[dict], str | None]) -> None:
    """`refusal(problem)`: why `device`'s own GEMM kernel cannot take the matmul `problem`
    (m, n, k, in_type, out_type, b_layout: "nk" for B stored N x K, else "kn"), None where
    it can."""
    _GEMM[device] = refusal


def gemm_kernel_refusal(device: str, problem: dict) -> str | None:
    """Why `device` builds no GEMM kernel of its own for `problem` (None: it does)."""
    if device not in _GEMM:
        return f"no GEMM kernel for device '{device}'"
    return _GEMM[device](problem)
