"""--fusion-gpu-kernels: shape the fusion stage's groups into what the GPU builds, before tiling.

The first pass of target cuda's `tiled` stage. On the entry function, in order (each
rewrite's docstring in compiler/targets/cuda/rewrites.py says why; `gpu_rewrites` lists them): size-1
transposes become reshapes, static slices become gathers, matmul-rooted groups are split into
[prologue] + one cuBLASLt call (`fusion.path = "gemm"`, its reason in `fusion.why`, the fused
epilogue in `fusion.gemm_epilogue`) + [epilogue], groups the emitter cannot take whole are
cut at reshapes and multi-output ones split per output, groups that read nothing are folded,
layout groups around cuBLASLt calls become its strided operand/result layouts, and a dense
view of a buffer becomes a view group (`fusion.path = "view"`). Groups with a `fusion.path`
are not kernels of ours: `--fusion-tile{device=nvidia-h200}` leaves them alone.

The gemm notes (one line per cuBLASLt decision) are kept on the function as
`fusion.gemm_notes`; `fusion.gpu_kernels` marks a function done (code generation runs the
tiled stage itself on a function without it).

Refuses (a located error) a model that needs what only the CPU artifact provides: state kept
between calls (an RNG seed) or Python-number results.

Options: `device` (the GPU whose code generator is asked, passes/targets.py; nvidia-h200),
`gemm` (true: the cuBLASLt path and the rewrites; false: one kernel per group, none of the
rewrites), `graph` (true: the artifact is replayed as a CUDA graph, so cuBLASLt's calls are
costed without their host overhead: `--cuda-graph`).
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes import attributes
from fusec.passes.grouping import model_functions
from fusec.passes.registry import Pass, register
from fusec.passes.targets import kernel_builder
from mlir import ir

DONE_ATTR = attributes.GPU_KERNELS
NOTES_ATTR = attributes.GEMM_NOTES


@register
@dataclass
class GpuKernelsPass(Pass):
    """Form the GPU's kernels and library calls from the fusion stage's groups."""

    ARGUMENT = "fusion-gpu-kernels"
    device: str = "nvidia-h200"
    gemm: bool = True
    tc_gemm: bool = True
    movement: bool = True
    gemm_pair: bool = True
    gemm_siblings: bool = True
    conv_tf32: bool = False
    matmul_tf32: bool = False
    graph: bool = False

    def run(self, module: ir.Operation) -> None:
        # The rewrites are the device's code generator's, registered by its target.
        builder = kernel_builder(self.device)
        for func in model_functions(module):
            if DONE_ATTR in func.attributes:
                continue
            builder.refuse_host_features(func)
            notes: list[str] = []
            if self.gemm:
                with func.location:  # the rewrites create ops
                    notes = builder.rewrites(func, {
                        "gemm": True, "tc_gemm": self.tc_gemm, "movement": self.movement,
                        "gemm_pair": self.gemm_pair, "gemm_siblings": self.gemm_siblings,
                        "conv_tf32": self.conv_tf32, "matmul_tf32": self.matmul_tf32,
                        "graph": self.graph})
            if not self.movement:  # read by the tiling's fallback decision
                func.attributes[attributes.NO_MOVEMENT] = ir.UnitAttr.get()
            func.attributes[NOTES_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(n) for n in notes])
            func.attributes[DONE_ATTR] = ir.UnitAttr.get()
