"""CUDA target: stages."""

from __future__ import annotations

from typing import Any

# ---------------------------------------------------------------- pipeline entry points


def tiled_passes(gemm: bool = True) -> list[str]:
    """Target cuda's `tiled` stage: the GPU's kernels and library calls formed from the
    fusion stage's groups (`--fusion-gpu-kernels`), then each kernel's block tile from the
    cost model (`--fusion-tile` for the H200, acting on capacity: re-tiled or split, the
    reason recorded; a tile the tile emitter refuses is undone, the reason in
    `fusion.untiled`), where each value lives (`--fusion-place`) and whether a tile fits
    (`--fusion-capacity`)."""
    return [f"fusion-gpu-kernels{{gemm={'true' if gemm else 'false'}}}",
            "fusion-normalise-kernels",
            "fusion-tile{device=nvidia-h200,fit=true}",
            # The index checks' reports (deferred by the linalg stage), now the tiles exist.
            "fusion-report-indices",
            "fusion-place{device=nvidia-h200}",
            "fusion-capacity{device=nvidia-h200}"]


def cuda_passes(options: Any) -> list[str]:
    """IR passes of the `cuda` stage: none. The CUDA code generator reads the `tiled`
    stage's IR (groups with their tile loops, and the untiled and library groups) and emits
    gpu dialect kernels itself (`generate`); the fallback path runs the CPU path's stages on
    one group at a time."""
    return []


