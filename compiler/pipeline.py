"""The ordered stages of fusec, in one place.

    torch -> linalg -> fusion -> tiled -> bufferized -> cpu -> so      (target cpu)
    torch -> linalg -> fusion -> tiled -> cuda -> so                   (target cuda)

Each IR stage is a flat list of passes (`STAGE_PASSES[stage](options)`), run by
`fusec.passes.run_pipeline`, so that a failing stage can be reproduced with one `fusec-opt`
command. `torch` (import) and `so` (object code + host plan + shim -> shared library) are the
two ends that are not IR-to-IR. The `cpu` stage runs the same list, its per-kernel passes over
parts of the kernels side by side (compiler/targets/cpu/parts.py): the module it gives, and
the command that reproduces a failure, are the serial list's.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

import mlir.ir as ir
from fusec.compiler.diagnostics import FusecError, format_location, from_mlir_error
from fusec.compiler.frontend import read_torch_signature

# The targets: each owns its pass lists and code generation; importing the CUDA target
# registers what the tiling asks of the GPU (fusec.passes.targets).
from fusec.compiler.targets import cpu as cpu_target
from fusec.compiler.targets import cuda as cuda_target
from fusec.compiler.targets.cpu.options import CpuOptions
from fusec.compiler.targets.cuda.options import CudaOptions
from fusec.passes import attributes
from fusec.runtime import gpu_present  # noqa: F401 - the compiler's callers name it here
from fusec.runtime.plan import apply_torch_signature

STAGES = ("torch", "linalg", "fusion", "tiled", "bufferized", "cpu", "cuda", "so")
TARGETS = ("cpu", "cuda", "auto")


@dataclass
class CompileOptions:
    """What the user chose; every field has a command-line flag of the same name, and each
    target's typed options a flag per field (`--cpu-<field>`, `--cuda-<field>`; `--arch` is
    `--cuda-arch`)."""

    target: str = "cpu"  # cpu | cuda | auto (cuda when a GPU is present)
    fusion: bool = True  # False: one kernel per op (the unfused baseline)
    dump_dir: str | None = None
    model_name: str = "model"
    verbose: bool = False  # print each stage's name and time on stderr
    cpu: CpuOptions = field(default_factory=CpuOptions)
    cuda: CudaOptions = field(default_factory=CudaOptions)

    def resolved_target(self) -> str:
        if self.target not in TARGETS:
            raise FusecError(f"unknown target '{self.target}'; expected one of: cpu, cuda, auto")
        if self.target == "auto":
            return "cuda" if gpu_present() else "cpu"
        return self.target

    def cache_key(self) -> str:
        data = dataclasses.asdict(self)
        data.pop("dump_dir")
        data.pop("verbose")
        return repr(sorted(data.items()))




# --- the passes of each IR stage ------------------------------------------------------------


def _device(options: CompileOptions) -> str:
    """The cost model's device for the target."""
    return "nvidia-h200" if options.resolved_target() == "cuda" else "cpu"


def linalg_passes(options: CompileOptions) -> list[str]:
    # Normalise what torch-mlir gives: fold and deduplicate before deciding fusion.
    # Model globals (RNG seeds) and host scalar code move into kernels before the checks.
    # Indices read from data (gathers, embeddings) are bounds-checked first: out of range, a
    # kernel reads index 0 and reports the op and the index (the CPU runtime's
    # fusec_index_error; on the GPU a device flag the runtime reads after the run). The
    # reports go in after tiling (`fusion-report-indices`): a call in a payload would keep
    # tile-and-fuse from erasing or merging the producers it clones into the tiles.
    # So are integer divisions by a value that may be zero (torch raises; x86 traps).
    # First of all, torch-mlir's compare-and-select min/max/clamps become NaN-propagating
    # min/max ops, while each payload is still one torch op's.
    return ["fusion-nan-minmax",
            "fusion-guard-indices{defer=true}", "fusion-guard-division{defer=true}",
            "fusion-drop-asserts", "fusion-globals-to-state",
            "fusion-scalars-to-tensors", "fusion-check-supported",
            # Sums of bf16/f16 tensors accumulate in f32 and round once, as torch's do
            # (torch-mlir folds them in the 16-bit type).
            "fusion-widen-accumulators",
            # Matmuls of bf16/f16 values widened to f32 read the 16-bit values (the products
            # are exact in f32): no f32 copies, and the tensor-core and attention kernels.
            "fusion-narrow-contraction-operands",
            # 1-D convolutions as 2-D ones of unit height: the convolution family's.
            "fusion-conv1d-as-conv2d",
            # A contraction over a zero-size dimension is its init (no kernel can take it).
            "fusion-fold-empty-iterations",
            # What is computed from constants alone (a decoder's mask from aranges) is
            # computed here: no kernel runs for it; so is what a model computes from its
            # parameters alone (BatchNorm's 1 / sqrt(var + eps)), once, not at every call.
            "fusion-fold-constants", "fusion-fold-parameters", "canonicalize", "cse",
            # What is left of the parameters' arithmetic computes in the shape its reader
            # reads it in (BatchNorm's [C] -> [1, C, 1, 1]): no reshape between it and the
            # reader to cut a kernel at.
            "fusion-reshape-parameters", "canonicalize"]


def fusion_passes(options: CompileOptions) -> list[str]:
    from fusec.passes import REGISTRY

    # The planner weighs fusion against the target's device (on-chip capacity, launch cost).
    device = _device(options)
    plan = [f"fusion-plan{{device={device}}}"] if options.fusion and "fusion-plan" in REGISTRY else []
    # Attention chains first, where the target has an attention kernel (the CPU; CUDA on
    # sm_90): one group each, which the planner then leaves alone.
    from fusec.compiler.targets.cuda.tc_gemm import TC_ARCHES

    if plan and (device == "nvidia-h200" and options.cuda.attention and
                 options.cuda.arch in TC_ARCHES or device == "cpu" and options.cpu.attention):
        plan = [f"fusion-attention{{device={device}}}"] + plan
    # First, torch-mlir's TMTensor ops (scatter, scan, sort, topk) become serial loop nests,
    # each a kernel of its own from the start (the planner never fuses into them); loops
    # torch-mlir left in the model function (multinomial) too; constant outputs get a writer.
    # Last, whatever the planner left (or everything, without fusion) becomes a kernel of its
    # own; canonicalize then drops the constants that were cloned into groups.
    # The loop kernels' writes at indices read from data (scatter, index_put) are guarded
    # like the reads were in `linalg`.
    # A long reduction over few rows folds in partials, then combines them: the GPU's SMs
    # all busy, and no fold rounding over millions of values in one order. After the
    # attention chains are groups (a decode step's softmax over 8192 keys, split, was no
    # softmax to the recogniser: six kernels instead of one), before the planner; with or
    # without fusion (it is also numerics).
    # (canonicalize and cse after it: what the split leaves dead, the producers it cloned
    # over the cut space, must not reach the planner as groups of their own.)
    split = [f"fusion-split-reductions{{device={device}}}", "canonicalize", "cse"]
    if plan and plan[0].startswith("fusion-attention"):
        plan = plan[:1] + split + plan[1:]
    else:
        plan = split + plan
    # A LayerNorm / RMSNorm before matmuls our tensor-core GEMM takes goes into their
    # weights and epilogues before anything is grouped (its elementwise ops erased; its
    # statistics stay, for the planner).
    norm = [f"fusion-fold-norm-prologue{{device={device}}}"] \
        if plan and device == "nvidia-h200" and options.cuda.tc_gemm and \
        options.cuda.norm_prologue and options.cuda.arch in TC_ARCHES else []
    return (norm + ["fusion-lower-tm-tensor",
             "fusion-guard-indices",
             "fusion-form-loop-kernels", "fusion-materialize-outputs"]
            + plan
            + ["fusion-form-singletons", "canonicalize", "cse"])


def tiled_passes(options: CompileOptions) -> list[str]:
    if options.resolved_target() == "cuda":
        return gpu_tiled_passes(options)
    return cpu_target.tiled_passes(options)


def gpu_tiled_passes(options: CompileOptions) -> list[str]:
    """`tiled` for target cuda: the GPU's kernels formed, each kernel's block tile, placement
    and capacity for the H200 (`targets.cuda.tiled_passes`); the CUDA code generator builds
    the kernels from these tile loops."""
    return cuda_target.tiled_passes(options.cuda)


def bufferized_passes(options: CompileOptions) -> list[str]:

    return cpu_target.bufferized_passes(options)


def cpu_passes(options: CompileOptions) -> list[str]:

    return cpu_target.cpu_passes(options)


def cuda_passes(options: CompileOptions) -> list[str]:
    return cuda_target.cuda_passes(options)


STAGE_PASSES: dict[str, Callable[[CompileOptions], list[str]]] = {
    "linalg": linalg_passes,
    "fusion": fusion_passes,
    "tiled": tiled_passes,
    "bufferized": bufferized_passes,
    "cpu": cpu_passes,
    "cuda": cuda_passes,
}


def emit_stages(target: str) -> list[str]:
    """The stages `--emit` accepts for `target`: its IR stages, in order; for cuda, `cuda`
    (the kernels' gpu.module as it goes to NVVM) and `ptx` after `tiled`."""
    return ir_stages(target) + (["ptx"] if target == "cuda" else [])


def emit_text(module: ir.Module, options: CompileOptions, stage: str,
              filename: str | None = None) -> str:
    """What `fusec --emit STAGE` prints: the IR after `stage`; for target cuda's `cuda` and
    `ptx`, the kernels the code generator builds from the `tiled` stage (targets/cuda/dump.py
    says what `--dump-dir` writes of them)."""
    if options.resolved_target() == "cuda" and stage in ("cuda", "ptx"):
        lower(module, options, stop_after="tiled", filename=filename)
        cuda_options = dataclasses.replace(options.cuda, cubin=False)
        program = cuda_target.generate(module, cuda_options)
        return program.kernels_mlir if stage == "cuda" else program.ptx
    lower(module, options, stop_after=stage, filename=filename)
    return str(module)


def ir_stages(target: str) -> list[str]:
    """The IR-to-IR stages for `target`, in order.

    The CUDA code generator reads the `tiled` stage's groups (tile loops on tensors) and
    emits gpu dialect kernels itself, so `bufferized` is the CPU path's stage only.
    """
    if target == "cuda":
        return ["linalg", "fusion", "tiled", "cuda"]
    return ["linalg", "fusion", "tiled", "bufferized", "cpu"]


def detect_stage(module: ir.Module) -> str:
    """The last stage whose output `module` looks like (IR given as input resumes after it)."""
    text_ops: set[str] = set()

    def visit(op: ir.Operation) -> ir.WalkResult:
        text_ops.add(op.name)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if "gpu.module" in text_ops or "gpu.binary" in text_ops:
        return "cuda"
    if any(name.startswith("llvm.") for name in text_ops):
        return "cpu"
    if any(name.startswith("memref.") for name in text_ops):
        return "bufferized"
    if any(attributes.GPU_KERNELS in op.attributes for op in module.body.operations):
        return "tiled"  # target cuda's: possibly no tile loop at all (library calls only)
    if "fusion.group" in text_ops and "scf.forall" in text_ops:
        return "tiled"
    if "fusion.group" in text_ops:
        return "fusion"
    return "torch"  # linalg-on-tensors, as torch-mlir emits it: next is `linalg`


# --- running stages --------------------------------------------------------------------------


def _reproducer(module_text: str, stage: str, passes: list[str], options: CompileOptions) -> str:
    """Write the stage's input IR to a file; return the fusec-opt command that fails on it."""
    directory = options.dump_dir or tempfile.gettempdir()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{options.model_name}.before-{stage}.mlir")
    with open(path, "w") as f:
        f.write(module_text)
    # Quoted for a POSIX shell: options' braces and nested pipelines' parentheses
    # (`--func.func(buffer-loop-hoisting)`) are shell syntax.
    flags = " ".join(shlex.quote(f"--{p}") for p in passes)
    return f"fusec-opt {shlex.quote(path)} {flags}"


def run_stage(module: ir.Module, stage: str, options: CompileOptions,
              filename: str | None = None) -> None:
    """Run one IR stage in place; on failure raise a FusecError with a reproducer command."""
    from fusec.passes import PassError, run_pipeline

    passes = STAGE_PASSES[stage](options)
    # The reproducer's input, printed only if the stage fails: a clone shares the module's
    # (uniqued) attributes, so it costs nothing like printing the weights at every stage.
    before = module.operation.clone()
    started = time.perf_counter()
    try:
        if stage == "cpu":  # the same passes, over parts of the kernels side by side
            cpu_target.stage_cpu(module, options)
        else:
            run_pipeline(module, passes)
    except (PassError, ir.MLIRError, Exception) as exc:
        if isinstance(exc, PassError):
            error = FusecError(exc.message, format_location(exc.location, filename))
        elif isinstance(exc, ir.MLIRError):
            error = from_mlir_error(exc, filename)[0]
        elif isinstance(exc, FusecError):
            error = exc
        else:
            error = FusecError(f"internal error in stage '{stage}': {type(exc).__name__}: {exc}",
                               filename)
        command = _reproducer(before.get_asm(enable_debug_info=True), stage, passes, options)
        error.message += f" [stage '{stage}'; reproduce with: {command}]"
        raise error from exc
    if options.verbose:
        print(f"fusec: stage {stage}: {time.perf_counter() - started:.2f} s", file=sys.stderr)
    if options.dump_dir:
        _dump(module, stage, options)


def _dump(module: ir.Module, stage: str, options: CompileOptions) -> None:
    os.makedirs(options.dump_dir, exist_ok=True)
    path = os.path.join(options.dump_dir, f"{options.model_name}.{stage}.mlir")
    with open(path, "w") as f:
        f.write(str(module))


def lower(module: ir.Module, options: CompileOptions, stop_after: str | None = None,
          filename: str | None = None) -> str:
    """Run the IR stages after the one `module` is in, up to `stop_after`; returns the last."""
    target = options.resolved_target()
    stages = ir_stages(target)
    current = detect_stage(module)
    start = stages.index(current) + 1 if current in stages else 0
    if stop_after is not None and stop_after not in stages:
        raise FusecError(f"stage '{stop_after}' is not an IR stage for target '{target}' "
                         f"(stages: {', '.join(stages)})")
    if stop_after is not None and stop_after == current:
        return current  # already there (`--report` on the fusion stage's IR)
    if stop_after is not None and stages.index(stop_after) < start:
        raise FusecError(f"the input is already past stage '{stop_after}' (it is at "
                         f"'{current}')", filename)
    last = current
    for stage in stages[start:]:
        run_stage(module, stage, options, filename)
        last = stage
        if stage == stop_after:
            break
    return last


def index_check_messages(module: ir.Module, filename: str | None = None) -> list[str]:
    """The module's index checks (`--fusion-guard-indices`), as the runtime reports them:
    `file:line:col: <message>`, with `{index}` where the bad index goes."""
    attrs = module.operation.attributes
    if attributes.INDEX_CHECKS not in attrs:
        return []
    messages = []
    for check in attrs[attributes.INDEX_CHECKS]:
        check = ir.DictAttr(check)
        where = format_location(ir.StringAttr(check["loc"]).value, filename)
        text = ir.StringAttr(check["message"]).value
        messages.append(f"{where}: {text}" if where else text)
    return messages


def build_so(module: ir.Module, options: CompileOptions, output: str,
             filename: str | None = None) -> dict:
    """The `so` stage: kernels to an object file, host plan + shim linked into `output`.

    `module` must be lowered through the target's last IR stage. The result is written
    atomically: a failure leaves nothing at `output`. Returns the artifact's metadata.
    """
    if options.resolved_target() == "cuda":
        return cuda_target.build_so(module, options, output,
                                     index_check_messages(module, filename))
    from fusec.compiler import artifact


    workdir = tempfile.mkdtemp(prefix="fusec-so-")
    try:

        checks = index_check_messages(module, filename)
        signature = read_torch_signature(module)
        plan = cpu_target.take_plan(module)
        plan.metadata["index_checks"] = checks
        apply_torch_signature(plan, signature)
        obj = os.path.join(workdir, "kernels.o")
        cpu = cpu_target.target_cpu(options)
        cpu_target.emit_object(module, obj, options)
        plan.metadata["cpu"] = cpu  # the runtime refuses to run it on a CPU that lacks it
        return artifact.build_artifact(plan, obj, output)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
