"""`fusec.compile`: import (if needed), compile and load in one call, with a compile cache."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from typing import Any

from fusec.compiler.pipeline import CompileOptions
from fusec.compiler.targets.cpu.options import CpuOptions
from fusec.compiler.targets.cuda.options import CudaOptions
from fusec.runtime.specs import cache_dir


_FINGERPRINT: str | None = None


def compiler_fingerprint() -> str:
    """A hash of fusec's own sources and dialect library: a changed compiler never reuses an
    artifact that an older one cached."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        import fusec

        root = os.path.dirname(os.path.abspath(fusec.__file__))
        digest = hashlib.sha256(fusec.__version__.encode())
        for folder in ("compiler", "passes", "dialects", "runtime"):
            top = os.path.join(root, folder)
            for directory, _, files in sorted(os.walk(top)):
                for name in sorted(files):
                    if name.endswith((".py", ".c", ".h", ".td", ".cpp", ".so")):
                        with open(os.path.join(directory, name), "rb") as f:
                            digest.update(name.encode() + f.read())
        _FINGERPRINT = digest.hexdigest()
    return _FINGERPRINT


def _codegen_environment() -> str:
    """What changes the generated code besides the options: the CPU level the kernels are
    built for when the options name none (this machine's)."""
    from fusec.compiler.targets.cpu import default_cpu

    return default_cpu()


def compile(model: Any, *example_inputs: Any, target: str = "cpu", fusion: bool = True,
            arch: str | None = None, cache: bool = True, dump_dir: str | None = None,
            verify: bool = False, cpu: CpuOptions | None = None,
            cuda: CudaOptions | None = None, tune: bool = False) -> Any:
    """Compile `model` (a torch.nn.Module with example inputs, given separately or as one
    tuple, or linalg-on-tensors MLIR text) and return the loaded `fusec.runtime.Module`.

    The artifact is cached under `cache_dir()`, keyed on the input IR and the options, so a
    second call with the same model and options only loads it.

    `cpu`, `cuda`: the targets' typed options (`CpuOptions`, `CudaOptions`; `fusec --help`
    lists their fields as flags); `arch` sets `cuda.arch`. Without `cuda`, a torch
    module's fp32 convolutions and matmuls follow torch's own settings
    (`default_cuda_options`: convolutions on TF32 unless `torch.backends.cudnn.allow_tf32`
    is off, matmuls where `torch.backends.cuda.matmul.allow_tf32` is on).

    `verify=True` also builds the unfused program and checks, on random inputs, that every
    fused kernel agrees with it (`fusec.compiler.verify`); a mismatch raises
    `VerificationError` (a `FusecError`) naming the first kernel that differs.

    `tune=True` (on the machine that runs the model: the GPU's for target cuda) times the
    candidate tiles of our GPU GEMM and attention kernels, or of the CPU's matmul kernels,
    and keeps the fastest in the tuning cache (`fusec.compiler.tuner`); every compile reads
    that cache, tuned or not.
    """
    from fusec.compiler import driver

    imported = None
    if isinstance(model, str):
        if example_inputs:
            raise TypeError("example inputs are only for torch modules; MLIR text has its "
                            "signature")
        text, filename = model, "<text>"
    else:
        from fusec.compiler.frontend import import_torch_module

        # torch.export's style, one tuple of inputs, is accepted as well as separate inputs.
        if len(example_inputs) == 1 and isinstance(example_inputs[0], (tuple, list)):
            example_inputs = tuple(example_inputs[0])
        driver.check_example_inputs(example_inputs, "<torch>")
        with driver.quiet_torch_logs():
            # The module as imported (its weights never printed): the key is the import's
            # fingerprint, not its text.
            imported, filename = import_torch_module(model, *example_inputs), "<torch>"
        # --verify builds the model again, fused and unfused, from its text.
        text = driver.as_text(imported.module) if verify else None
        cuda = cuda or default_cuda_options()
    return _compile_imported(imported, text, filename, example_inputs, target, fusion, arch,
                             cache, dump_dir, verify, cpu, cuda, tune)


def compile_fx_graph(graph: Any, *example_inputs: Any, target: str = "cpu",
                     fusion: bool = True, cache: bool = True,
                     cpu: CpuOptions | None = None, cuda: CudaOptions | None = None) -> Any:
    """`compile` for an FX graph as TorchDynamo hands it to a backend (or any callable of
    tensors): imported as it is (`frontend.import_fx_graph`: one trace to aten ops, no
    torch.export), then compiled, cached and loaded as `compile` does. Inputs the graph
    updates in place are written back by each call (the module's `input_updates`)."""
    from fusec.compiler import driver
    from fusec.compiler.frontend import import_fx_graph

    driver.check_example_inputs(example_inputs, "<torch.fx>")
    with driver.quiet_torch_logs():
        imported = import_fx_graph(graph, *example_inputs)
    return _compile_imported(imported, None, "<torch.fx>", example_inputs, target, fusion,
                             None, cache, None, False, cpu, cuda or default_cuda_options())


def _artifact_path(options: CompileOptions, source_key: str) -> str:
    """Where the compile cache keeps the artifact of `source_key` built with `options`."""
    from fusec.runtime import tuning

    # The tiles the tuning cache gives are part of the code.
    target = options.cuda if options.target == "cuda" else options.cpu
    tuned = tuning.fingerprint(tuning.resolve(target.tuning))
    key = hashlib.sha256((compiler_fingerprint() + options.cache_key() + _codegen_environment()
                          + tuned + source_key).encode()).hexdigest()[:32]
    return os.path.join(cache_dir(), f"{key}.so")


def default_cuda_options() -> CudaOptions:
    """The CUDA options `compile` (of a torch module) and the torch.compile backend use when
    none are given: CudaOptions' defaults, with fp32 convolutions and matmuls as torch runs
    its own at the time of the call: convolutions on TF32 where
    `torch.backends.cudnn.allow_tf32` (torch's default: on), matmuls where
    `torch.backends.cuda.matmul.allow_tf32` (default off; on after
    `torch.set_float32_matmul_precision("high")`), exact fp32 otherwise. (MLIR text and the
    command line have no torch setting to follow: exact.)"""
    import torch

    return CudaOptions(conv_tf32=bool(torch.backends.cudnn.allow_tf32),
                       matmul_tf32=bool(torch.backends.cuda.matmul.allow_tf32))


def _compile_imported(imported: Any, text: str | None, filename: str,
                      example_inputs: tuple[Any, ...], target: str, fusion: bool,
                      arch: str | None, cache: bool, dump_dir: str | None, verify: bool,
                      cpu: CpuOptions | None, cuda: CudaOptions | None,
                      tune: bool = False) -> Any:
    """The artifact of an imported module (or of MLIR `text`, `imported` None), built unless
    the cache has it, verified if asked, loaded."""
    import fusec.runtime as runtime
    from fusec.compiler import driver

    cuda = cuda or CudaOptions()
    if arch is not None:
        cuda = dataclasses.replace(cuda, arch=arch)
    options = CompileOptions(target=target, fusion=fusion, dump_dir=dump_dir,
                             cpu=cpu or CpuOptions(), cuda=cuda)
    options.target = options.resolved_target()
    source_key = "torch:" + imported.fingerprint if imported is not None else text
    if tune:
        from fusec.compiler import tuner

        os.makedirs(cache_dir(), exist_ok=True)
        source = imported.module if imported is not None else driver.parse(text, filename)
        fd, built = tempfile.mkstemp(prefix=".tuned-", suffix=".so", dir=cache_dir())
        os.close(fd)
        try:
            tuner.tune(source, filename, options, built)
        except BaseException:
            os.unlink(built)
            raise
        # Keyed after tuning: the cache now holds the tiles it was built with.
        path = _artifact_path(options, source_key)
        os.replace(built, path)
    else:
        path = _artifact_path(options, source_key)
    if not tune and not (cache and os.path.exists(path)):
        os.makedirs(cache_dir(), exist_ok=True)
        if imported is not None:
            driver.compile_module(imported.module, filename, options, path)
        else:
            driver.compile_text(text, filename, options, path)
    if verify:
        from fusec.compiler import verify as verifier

        examples = tuple(t.detach().numpy() for t in example_inputs) if example_inputs else None
        verifier.check_or_raise(verifier.verify(text, filename, options, examples=examples),
                                filename)
    return runtime.load(path)
