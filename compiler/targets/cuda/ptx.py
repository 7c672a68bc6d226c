"""CUDA target: ptx."""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import mlir.ir as ir
from fusec.compiler.targets.cuda.device import (
    INDEX_STATUS,
    INDEX_STATUS_GLOBAL,
    KERNEL_MODULE,
    CudaCodegenError,
)
from fusec.compiler.targets.cuda.dependent_launch import (
    add_dependent_launch,
    supports_dependent_launch,
)
from fusec.compiler.targets.cuda.options import CudaOptions
from mlir.passmanager import PassManager

# ---------------------------------------------------------------- lowering to PTX


def find_cuda_toolkit() -> str | None:
    """A CUDA toolkit folder with bin/ptxas and nvvm/libdevice (None if there is none).

    Order: $FUSEC_CUDA_TOOLKIT, $CUDA_HOME / $CUDA_PATH, /usr/local/cuda*, the PyPI
    `nvidia-cuda-nvcc` wheel (nvidia/cu13). libdevice gives math.exp/erf/...; ptxas and
    fatbinary give the cubin.
    """
    candidates = [os.environ.get("FUSEC_CUDA_TOOLKIT"), os.environ.get("CUDA_HOME"),
                  os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    candidates += sorted((str(p) for p in Path("/usr/local").glob("cuda-*")), reverse=True)
    try:
        import nvidia  # type: ignore

        for root in getattr(nvidia, "__path__", []):
            candidates += [str(p) for p in sorted(Path(root).glob("cu1*"), reverse=True)]
            candidates.append(str(Path(root) / "cuda_nvcc"))
    except ImportError:
        pass
    for c in candidates:
        if c and (Path(c) / "nvvm" / "libdevice" / "libdevice.10.bc").exists():
            return c
    return None


def has_tensor_core_kernels(text: str) -> bool:
    """Whether kernels of the tensor-core GEMM family (wgmma.py) are in `text`."""
    from fusec.compiler.targets.cuda.wgmma import GRID_CONSTANT_MAPS

    return GRID_CONSTANT_MAPS in text


def kernel_arch(kernels: list[str], options: CudaOptions) -> str:
    """The chip the kernel module is built for: the options' arch, or its arch-specific
    variant (sm_90 -> sm_90a: wgmma and TMA) when a kernel of the tensor-core family is in
    it. Such an image runs on sm_90 devices only."""
    if options.arch == "sm_90" and any(has_tensor_core_kernels(k) for k in kernels):
        return "sm_90a"
    return options.arch


def dependent_launch(options: CudaOptions) -> bool:
    """Whether the kernels start with griddepcontrol and launch with the programmatic
    stream serialization attribute (dependent_launch.py)."""
    return options.dependent_launch != "off" and supports_dependent_launch(options.arch)


def kernel_module_text(kernels: list[str], options: CudaOptions) -> str:
    target = (f'#nvvm.target<O = {options.opt_level}, chip = "{kernel_arch(kernels, options)}", '
              f'features = "{options.features}">')
    # The index-check status (see INDEX_STATUS), once, when a kernel records failures in it.
    status = [INDEX_STATUS_GLOBAL] if any(f"@{INDEX_STATUS}" in k for k in kernels) else []
    return ("module attributes {gpu.container_module} {\n"
            f"  gpu.module @{KERNEL_MODULE} [{target}] {{\n"
            + "\n".join(status + kernels) + "\n  }\n}\n")


WORKGROUP_ALIGNMENT = 16  # bytes: one vector load or store of shared memory


def align_workgroup_buffers(module: ir.Module) -> int:
    """Align every workgroup attribution's `.shared` global to 16 bytes. MLIR lowers one
    to a global aligned to its element (2 bytes for bf16), and the data-movement family's
    transpose squares are read back in 16-byte vectors (`ld.shared.v4`): misaligned
    otherwise, wherever the static layout puts the buffer. Returns how many changed."""
    count = 0

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal count
        if op.name == "llvm.mlir.global" and \
                ir.StringAttr(op.attributes["sym_name"]).value.startswith("__wg_"):
            old = ir.IntegerAttr(op.attributes["alignment"]).value \
                if "alignment" in op.attributes else 0
            if old < WORKGROUP_ALIGNMENT:
                op.attributes["alignment"] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), WORKGROUP_ALIGNMENT)
                count += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return count


def lower_kernels(text: str, options: CudaOptions, context: ir.Context,
                  fmt: str = "isa") -> bytes:
    """gpu dialect text -> PTX (fmt="isa") or fatbin (fmt="fatbin") bytes."""
    toolkit = options.toolkit or find_cuda_toolkit()
    binary_opts = f"format={fmt}"
    if toolkit:
        binary_opts += f" toolkit={toolkit}"
    # The tensor-core family's ops (TMA, mbarriers, wgmma: nvgpu, and the nvvm ops they
    # become) lower first; its vector views of shared memory need their strided metadata
    # expanded. Modules without such kernels get exactly the passes they always had.
    tc = has_tensor_core_kernels(text)
    to_llvm = (
        "builtin.module("
        # fpowi with a constant exponent (x.pow(2)) becomes multiplications, not a
        # libdevice call per element.
        f"gpu.module({'convert-nvgpu-to-nvvm,expand-strided-metadata,' if tc else ''}"
        "canonicalize,math-expand-ops{ops=fpowi},"
        # math on bf16/f16 (erf, exp, ...) runs in f32: libdevice has no bf16 functions.
        "math-extend-to-supported-types,convert-scf-to-cf,"
        # Bare pointers: a static memref argument is one device pointer, as the shim passes.
        "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},"
        f"{'convert-nvvm-to-llvm,' if tc else ''}"
        # What NVVM's patterns leave of math (integer math.absi: T5's relative position
        # buckets) becomes LLVM intrinsics NVPTX selects (abs.s64); float math is libdevice's
        # by now.
        "convert-math-to-llvm),"
        "reconcile-unrealized-casts)")
    to_binary = f"builtin.module(gpu-module-to-binary{{{binary_opts}}})"
    pipeline = f"{to_llvm[:-1]},{to_binary[len('builtin.module('):]}"
    with context:
        module = ir.Module.parse(text)
        try:
            PassManager.parse(to_llvm).run(module.operation)
            align_workgroup_buffers(module)
            if dependent_launch(options):
                add_dependent_launch(module, options.dependent_launch)
            if tc:  # grid-constant maps, aligned dynamic shared memory (see wgmma.py)
                from fusec.compiler.targets.cuda.wgmma import finish_lowered_kernels

                finish_lowered_kernels(module)
            PassManager.parse(to_binary).run(module.operation)
        except Exception as e:  # noqa: BLE001 - re-raised with the reproducer
            path = Path(tempfile.gettempdir()) / "fusec_cuda_failed.mlir"
            path.write_text(text)
            raise CudaCodegenError(
                f"lowering to {fmt} failed: {e}\nreproduce: mlir-opt {path} "
                f"--pass-pipeline='{pipeline}'") from e
        from mlir.dialects import gpu

        for op in module.body.operations:
            if op.operation.name == "gpu.binary":
                return bytes(gpu.ObjectAttr(op.attributes["objects"][0]).object)
    raise CudaCodegenError("gpu-module-to-binary produced no gpu.binary")


@functools.lru_cache(maxsize=None)
def _ptxas_split(ptxas: str) -> tuple[str, ...]:
    """ptxas's kernels compiled on all cores where it can (`--split-compile 0`, CUDA 12.x
    and later): the same SASS (checked on the GPT-2 block's 302 KB of PTX), a quarter less
    wall time on this 2-core machine."""
    import subprocess

    done = subprocess.run([ptxas, "--help"], capture_output=True, text=True)
    return ("--split-compile", "0") if "--split-compile" in done.stdout else ()


def fatbin_from_ptx(ptx: str, arch: str, options: CudaOptions) -> bytes | None:
    """The fatbin (cubin + PTX) of `ptx` with the toolkit's ptxas and fatbinary: what
    `gpu-module-to-binary{format=fatbin}` makes, without running LLVM's NVPTX back end a
    second time (half of a CUDA compile's time for a module with the tensor-core family's
    unrolled epilogues). None where the toolkit lacks either tool."""
    import subprocess

    toolkit = options.toolkit or find_cuda_toolkit()
    if not toolkit:
        return None
    ptxas, fatbinary = Path(toolkit) / "bin" / "ptxas", Path(toolkit) / "bin" / "fatbinary"
    if not (ptxas.exists() and fatbinary.exists()):
        return None
    sm = arch.removeprefix("sm_")
    with tempfile.TemporaryDirectory(prefix="fusec_fatbin_") as tmp:
        src, cubin, out = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin", Path(tmp) / "k.fatbin"
        src.write_text(ptx)
        for cmd in ([str(ptxas), f"-arch={arch}", f"-O{options.opt_level}",
                     *_ptxas_split(str(ptxas)), str(src), "-o", str(cubin)],
                    [str(fatbinary), "-64", f"--create={out}",
                     f"--image3=kind=elf,sm={sm},file={cubin}",
                     f"--image3=kind=ptx,sm={sm},file={src}"]):
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise CudaCodegenError(f"{Path(cmd[0]).name} failed: "
                                       f"{(done.stderr or done.stdout).strip()[:2000]}")
        return out.read_bytes()

