"""The CUDA target's options: one frozen dataclass, hashed into the cache key, every field a
`fusec` flag (`--cuda-<field>`, underscores as dashes; tools/fusec.py makes them; the
architecture is `--arch`).

The `tiled` stage's passes get the fields they act on as pass options (`stages.py`), so the
IR of a stage is what these options made it, and `fusec-opt` reproduces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fusec.compiler.diagnostics import FusecError
from fusec.compiler.targets.cuda.device import DEFAULT_ARCH, DEFAULT_FEATURES
from fusec.passes import cost_model, gemm_cost


GEMM_SCHEDULES = ("model", *gemm_cost.GEMM_SCHEDULES)
DEPENDENT_LAUNCH = ("implicit", "at-exit", "after-wait", "at-start", "off")


@dataclass(frozen=True)
class CudaOptions:
    """What the CUDA target builds, for which GPU (0: the cost model's choice)."""

    arch: str = field(default=DEFAULT_ARCH, metadata={"help": (
        "The PTX target: sm_90, sm_90a, sm_80... (the flag is `--arch`).")})
    features: str = field(default=DEFAULT_FEATURES, metadata={"help": (
        "NVVM target features (the PTX ISA version).")})
    opt_level: int = field(default=3, metadata={"help": "NVVM optimisation level."})
    device: str = field(default="nvidia-h200", metadata={"help": (
        "The device description the tiling, placement and launch shapes use "
        "(cost_model.DEVICES).")})
    toolkit: str = field(default="", metadata={"help": (
        "A CUDA toolkit folder (bin/ptxas, nvvm/libdevice); \"\": found "
        "(find_cuda_toolkit).")})
    cubin: bool = field(default=True, metadata={"help": (
        "Also build a fatbin (cubin + PTX) when ptxas is found; False: PTX only (the "
        "driver JITs).")})
    row_elements_per_thread: int = field(default=0, metadata={"help": (
        "Row kernels: elements per thread (0: ROW_BYTES_PER_THREAD's worth, "
        "row_launch_shape).")})
    elementwise_unroll: int = field(default=0, metadata={"help": (
        "Elementwise kernels: chunks per thread per tile (0: "
        "elementwise_launch_shape's).")})
    fallback: bool = field(default=True, metadata={"help": (
        "Groups the group emitter refuses go through upstream MLIR (`fallback_kernel`); "
        "False: refuse them (a located error).")})
    gemm: bool = field(default=True, metadata={"help": (
        "Matmul-rooted groups: the matmul through cuBLASLt (split_matmul_groups); "
        "False: one kernel per group (the fallback's one thread per output element).")})
    graph: bool = field(default=False, metadata={"help": (
        "The artifact will be replayed as a CUDA graph (`fusec.runtime`'s graph=True): "
        "kernels are chosen for GPU time alone, cuBLASLt's host call overhead not counted "
        "(a small GEMM then goes to cuBLASLt where our kernel is predicted slower on the "
        "GPU). Under graphs the nine zoo models took 0.83-1.03 of the time without it on an "
        "H100 (RESULTS runs 254-255). `torch.compile(..., options={'graph': True})` "
        "sets it.")})
    tc_gemm: bool = field(default=True, metadata={"help": (
        "Matmuls with bf16/f16 operands: our tensor-core GEMM kernel (TMA + wgmma, the "
        "elementwise chain after it fused) where the cost model predicts it faster than "
        "cuBLASLt (sm_90/sm_90a only); False: always cuBLASLt.")})
    norm_prologue: bool = field(default=True, metadata={"help": (
        "A LayerNorm / RMSNorm (any per-row affine map) in front of matmuls with bf16/f16 "
        "operands and a constant weight: folded into the weight and our GEMM's epilogue "
        "(fusion-fold-norm-prologue), so the normalised tensor is never written; False: "
        "normalised in a kernel of its own.")})
    gemm_pair: bool = field(default=True, metadata={"help": (
        "Two matmuls of one input whose products meet elementwise (SwiGLU's gate and up "
        "projections): one kernel of our tensor-core GEMM computing both, A read once, "
        "where the cost model predicts it faster (gemm_pair.py); False: two kernels.")})
    gemm_siblings: bool = field(default=True, metadata={"help": (
        "Matmuls of one input that do not read each other (attention's q, k and v "
        "projections): one kernel of our tensor-core GEMM over their concatenated columns, "
        "A read once, each its own epilogue and output, where the cost model predicts it "
        "faster (gemm_siblings.py); False: a kernel each.")})

    movement: bool = field(default=True, metadata={"help": (
        "Groups of data movement (reshapes, slices, transposes, concats, pads, gathers) "
        "and the elementwise ops around them: the data-movement kernels (movement.py); "
        "False: the fallback path.")})

    attention: bool = field(default=True, metadata={"help": (
        "Attention chains (Q K^T, score ops, softmax, P V) as one kernel of our attention "
        "family (online softmax, sm_90/sm_90a; attention.py); False: the ops as the "
        "planner groups them (the scores in memory).")})

    dependent_launch: str = field(default="implicit", metadata={"help": (
        "Hopper's programmatic dependent launch (sm_90+; dependent_launch.py): every kernel "
        "waits for the one before it (griddepcontrol.wait) before it touches global memory and "
        "is launched with the programmatic stream serialization attribute, so that the launch "
        "of the next kernel is not left to the end of this one. Where each kernel lets the next "
        "one launch: \"implicit\" (as each CTA completes: the kernels never overlap, only the "
        "launch does), \"at-exit\" (as each CTA's threads return), \"after-wait\" (first "
        "thing after the wait), \"at-start\" (before the wait); \"off\": ordinary "
        "launches.")})

    conv_tf32: bool = field(default=False, metadata={"help": (
        "fp32 convolutions' GEMMs with TF32 operands, as torch runs its convolutions by "
        "default (torch.backends.cudnn.allow_tf32 = True); False: exact fp32. The command "
        "line and CudaOptions() default to exact; fusec.compile and the torch.compile "
        "backend, given no CudaOptions, take torch's own setting at the call (TF32 unless "
        "the user turned it off). fp32 matmuls follow `matmul_tf32`.")})

    matmul_tf32: bool = field(default=False, metadata={"help": (
        "fp32 matmuls (Linear, bmm, @) on the GEMM library with TF32 operands, as torch runs "
        "them where torch.backends.cuda.matmul.allow_tf32 is on (or "
        "torch.set_float32_matmul_precision('high')); False (torch's default and fusec's): "
        "exact fp32. fusec.compile and the torch.compile backend, given no CudaOptions, take "
        "torch's setting at the call.")})

    tuning: str = field(default="", metadata={"help": (
        "The tuning cache our GEMM and attention kernels' tiles are read from (`fusec "
        "--tune` writes it): \"\": $FUSEC_TUNING_CACHE, else tuning.json in the compile "
        "cache's folder; \"off\": the cost model's tiles only.")})
    gemm_schedule: str = field(default="model", metadata={"help": (
        "Our tensor-core GEMMs' schedule: \"model\" (the cost model's or the tuning cache's "
        "tile), \"ping-pong\" (persistent, a producer and two consumer warpgroups taking "
        "tiles in turn, where the tiles fill the SMs), \"cooperative\" (persistent, the "
        "two consumers on each 256 x 128 tile) or \"one-warpgroup\" (a CTA per tile).")})
    tile_candidate: int = field(default=-1, metadata={"help": (
        "Tuning: every tunable kernel takes its candidate tile of this index (0: the cost "
        "model's; -1: the cache's or the model's). `--tune` sets it.")})

    def __post_init__(self) -> None:
        if self.dependent_launch not in DEPENDENT_LAUNCH:
            raise FusecError(f"--cuda-dependent-launch: '{self.dependent_launch}' is not one of "
                             f"{', '.join(DEPENDENT_LAUNCH)}")
        if self.gemm_schedule not in GEMM_SCHEDULES:
            raise FusecError(f"--cuda-gemm-schedule: '{self.gemm_schedule}' is not one of "
                             f"{', '.join(GEMM_SCHEDULES)}")
        if self.device not in cost_model.DEVICES or \
                cost_model.DEVICES[self.device].threads_per_block <= 1:
            known = ", ".join(sorted(n for n, d in cost_model.DEVICES.items()
                                     if d.threads_per_block > 1))
            raise FusecError(f"--cuda-device: unknown GPU '{self.device}' (known: {known})")

    @property
    def description(self) -> cost_model.Device:
        """The device description named by `device`."""
        return cost_model.device_named(self.device)
