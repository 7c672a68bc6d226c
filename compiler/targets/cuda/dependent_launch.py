"""Programmatic dependent launch (Hopper, sm_90+): a kernel starts while the one before it in
the stream finishes, and waits for it on the GPU, not behind the launch queue.

Between two dependent kernels the GPU otherwise idles for the launch: the second kernel's
CTAs are placed only once the first kernel has completed and its writes are flushed (about
1-2 us each time, eight times in a transformer block). With the launch attribute
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (the runtime sets it, shim_cuda.c), the
second kernel may launch as soon as every CTA of the first has executed
`griddepcontrol.launch_dependents` (the trigger) or completed; its CTAs then run up to
`griddepcontrol.wait`, which returns once the first grid has completed and its memory is
visible.

Every kernel fusec emits starts with the wait, before any access to global memory: its reads
of the producer's output and its writes over what the kernel before reads all come after it,
in every family, with no analysis of what the prologue touches. A kernel of another library
launched between ours (cuBLASLt) is a primary that triggers when it likes, which is safe for
the same reason.

Where the trigger goes is the option (`CudaOptions.dependent_launch`), because it decides
when and where the next kernel's CTAs are placed:
- "implicit" (the default): no trigger, so each CTA triggers as it completes. The next
  kernel is launched as the last CTA finishes, not after the grid's completion (its memory
  flush included) has been signalled to the stream; the wait covers the flush. The kernels
  never overlap, only the launch does.
- "at-exit": before each `return` of the kernel (a warp-specialised kernel's producer
  returns first: once its last loads are issued);
- "after-wait": first thing after the wait (the next kernel's CTAs placed, waiting, while
  this one runs: at most one kernel ahead);
- "at-start": before the wait (a cascade: kernel after kernel launches as soon as the one
  before has placed its CTAs, so the whole sequence may sit resident, waiting).

Measured on an H100 (bench/RESULTS.md, session 62), each placement against ordinary
launches in one process: "implicit" was the fastest on every one of six blocks (GPT-2's
0.2767 -> 0.2677 ms, LLaMA's 0.1337 -> 0.1199, a MobileNet block 0.0678 -> 0.0618). The
earlier triggers place the next kernel's CTAs while this one runs, on whatever SMs have room
then, and that placement can cost more than the launch saves: the MobileNet block took
0.0965 ms at-start, the GPT-2 block 0.2841 at-exit.

The instructions are inline assembly with a memory clobber, so that no load or store is moved
above the wait.
"""

from __future__ import annotations

from mlir import ir

WAIT = "griddepcontrol.wait;"
TRIGGER = "griddepcontrol.launch_dependents;"
# What each kernel starts with, and what it executes before each return, by placement.
PLACEMENTS = {
    "at-exit": ([WAIT], [TRIGGER]),
    "after-wait": ([WAIT, TRIGGER], []),
    "at-start": ([TRIGGER, WAIT], []),
    "implicit": ([WAIT], []),
}


def supports_dependent_launch(arch: str) -> bool:
    """Whether kernels built for `arch` (sm_90, sm_90a, sm_80...) may use griddepcontrol."""
    digits = "".join(ch for ch in arch.removeprefix("sm_") if ch.isdigit())
    return bool(digits) and int(digits) >= 90


def add_dependent_launch(module: ir.Module, placement: str) -> int:
    """Put the wait (and the trigger, where `placement` says) in every kernel (an `llvm.func`
    marked `nvvm.kernel`: after convert-gpu-to-nvvm) of `module`. Returns how many kernels."""
    from mlir.dialects import llvm

    entry_asm, exit_asm = PLACEMENTS[placement]
    kernels = []

    def visit(op):
        if op.name == "llvm.func" and "nvvm.kernel" in op.attributes and op.regions[0].blocks:
            kernels.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)

    def emit(lines: list[str], location) -> None:
        llvm.InlineAsmOp(None, [], "\n\t".join(lines), "~{memory}", has_side_effects=True,
                         loc=location)

    for op in kernels:
        returns = []

        def find(inner):
            if inner.name == "llvm.return":
                returns.append(inner)
            return ir.WalkResult.ADVANCE

        if exit_asm:
            op.walk(find)
        for ret in returns:
            with ir.InsertionPoint(ret):
                emit(exit_asm, ret.location)
        with ir.InsertionPoint.at_block_begin(op.regions[0].blocks[0]):
            emit(entry_asm, op.location)
    return len(kernels)
