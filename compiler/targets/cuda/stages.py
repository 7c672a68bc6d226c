"""CUDA target: stages."""

from __future__ import annotations

from typing import Any

from fusec.compiler.targets.cuda.options import CudaOptions
from fusec.compiler.targets.cuda.tc_gemm import TC_ARCHES

# ---------------------------------------------------------------- pipeline entry points


def tuning_path(options: CudaOptions) -> str:
    """The tuning cache the options name, as a pass option."""
    from fusec.compiler.targets import tuning_pass_option

    return tuning_pass_option(options.tuning, "--cuda-tuning")


def tiled_passes(options: CudaOptions | None = None) -> list[str]:
    """Target cuda's `tiled` stage: the GPU's kernels and library calls formed from the
    fusion stage's groups (`--fusion-gpu-kernels`), the tiles of our GEMMs and attention
    kernels (`--fusion-gpu-choose-tiles`: tuned, else the cost model's), then each kernel's block tile from the
    cost model (`--fusion-tile` for the options' device, acting on capacity: re-tiled or
    split, the reason recorded; a tile the tile emitter refuses is undone, the reason in
    `fusion.untiled`), where each value lives (`--fusion-place`) and whether a tile fits
    (`--fusion-capacity`)."""
    options = options or CudaOptions()
    device = options.device
    gemm = "true" if options.gemm else "false"
    tc = "true" if options.tc_gemm and options.arch in TC_ARCHES else "false"
    movement = "true" if options.movement else "false"
    pair = ("" if options.gemm_pair else ",gemm-pair=false") + \
        ("" if options.gemm_siblings else ",gemm-siblings=false")
    tf32 = (",conv-tf32=true" if options.conv_tf32 else "") + \
        (",matmul-tf32=true" if options.matmul_tf32 else "") + \
        (",graph=true" if options.graph else "")
    return [f"fusion-gpu-kernels{{device={device},gemm={gemm},tc-gemm={tc},"
            f"movement={movement}{pair}{tf32}}}",
            f"fusion-gpu-choose-tiles{{device={device},tuning={tuning_path(options)},"
            f"candidate={options.tile_candidate},gemm-schedule={options.gemm_schedule}}}",
            "fusion-normalise-kernels",
            f"fusion-tile{{device={device},fit=true}}",
            # The index checks' reports (deferred by the linalg stage), now the tiles exist.
            "fusion-report-indices",
            f"fusion-place{{device={device}}}",
            f"fusion-capacity{{device={device}}}"]


def cuda_passes(options: Any) -> list[str]:
    """IR passes of the `cuda` stage: none. The CUDA code generator reads the `tiled`
    stage's IR (groups with their tile loops, and the untiled and library groups) and emits
    gpu dialect kernels itself (`generate`); the fallback path runs the CPU path's stages on
    one group at a time."""
    return []


