"""The CPU target's options: one frozen dataclass, hashed into the cache key, every field a
`fusec` flag (`--cpu-<field>`, underscores as dashes; tools/fusec.py makes them).

Nothing else configures the CPU code generator: no environment variable is read while its
pass lists are built.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CpuOptions:
    """How the CPU target tiles and generates code (0 or "": the cost model's choice)."""

    threads: int = field(default=0, metadata={"help": (
        "Tile count the tiling aims at (`--fusion-tile{threads}`); 0: this machine's "
        "cores.")})
    tiles_per_thread: int = field(default=4, metadata={"help": (
        "Tiles per thread, so that uneven tiles balance (`tiles-per-thread`).")})
    min_tile_kb: int = field(default=16, metadata={"help": (
        "The least work worth a tile, in KB of the root's iteration space (`min-tile-kb`).")})
    max_tile_kb: int = field(default=256, metadata={"help": (
        "The most output per tile, in KB: about a core's L2 (`max-tile-kb`).")})
    fit: bool = field(default=True, metadata={"help": (
        "Act on capacity: a tile over the limits is re-tiled smaller or its group "
        "split.")})
    arch: str = field(default="", metadata={"help": (
        "LLVM CPU the kernels are built for (e.g. x86-64-v3 to run on an AVX2 machine); "
        "\"\": the highest x86-64 level this machine runs (`default_cpu`).")})
    matmul: bool = field(default=True, metadata={"help": (
        "Matmuls as register-blocked FMA microkernels (`--fusion-cpu-matmul`); False: "
        "loops.")})
    conv: bool = field(default=True, metadata={"help": (
        "f32 2-D convolutions as im2col + the matmul microkernel (`--fusion-cpu-conv`; "
        "with `matmul`); False: loops.")})
    vectorize: bool = field(default=True, metadata={"help": (
        "Elementwise and windowed ops (depthwise convolutions, pooling) vectorized along "
        "their contiguous dim in MLIR (`--fusion-cpu-vectorize`); False: left to LLVM's "
        "loop vectorizer.")})
    attention: bool = field(default=True, metadata={"help": (
        "Attention chains as one kernel each, with an online softmax over key tiles "
        "(`--fusion-attention`, `--fusion-cpu-attention`); False: the planner's kernels.")})
    constant_args: bool = field(default=True, metadata={"help": (
        "Weights as kernel arguments, and kernels that then are the same (a model's "
        "layers) one kernel, compiled once (`--fusion-cpu-constant-args`); False: each "
        "kernel reads its weights as globals of its own.")})
    matmul_mr: int = field(default=0, metadata={"help": (
        "The microkernel's rows; 0: the cost model's (CPU_MATMUL_ROWS). The tiling "
        "reads them too (a matmul's row tile is whole blocks of them).")})
    matmul_nr: int = field(default=0, metadata={"help": (
        "The microkernel's columns; 0: the cost model's for the CPU's vector width "
        "(cpu_matmul_columns).")})
    tuning: str = field(default="", metadata={"help": (
        "The tuning cache the matmul kernels' tilings are read from (`fusec --tune` writes "
        "it): \"\": $FUSEC_TUNING_CACHE, else tuning.json in the compile cache's folder; "
        "\"off\": the cost model's tilings only.")})
    unroll_threshold: int = field(default=150, metadata={"help": (
        "The size up to which `opt -O3` unrolls a loop whole (`-unroll-threshold-"
        "aggressive`; LLVM's own at -O3 is 300): 150 compiles MobileNetV2's kernels in "
        "half the time at the same speed within this machine's noise (bench/NOTES.md "
        "session 36).")})
    tile_candidate: int = field(default=-1, metadata={"help": (
        "Tuning: every matmul kernel takes its candidate tiling of this index (0: the cost "
        "model's; -1: the cache's or the model's). `--tune` sets it.")})

    def __post_init__(self) -> None:
        if self.unroll_threshold < 0:
            from fusec.compiler.diagnostics import FusecError

            raise FusecError(f"--cpu-unroll-threshold: expected 0 or more (0: LLVM's own), "
                             f"got {self.unroll_threshold}")


# The CUDA fallback's tiling of a group through the CPU path's `tiled` stage: as many (small)
# tiles as it allows, one GPU thread each; capacity is the GPU tiling's business (no fit).
FINEST_TILES = CpuOptions(threads=1 << 24, tiles_per_thread=1, min_tile_kb=0, max_tile_kb=0,
                          attention=False,
                          fit=False, tuning="off")
