"""fusec: a kernel-fusion compiler for PyTorch models, built on MLIR.

The compiler side (`fusec.compile`, `fusec.import_torch`) imports MLIR lazily, so that
`import fusec.runtime` in a deployment process never loads it.
"""

from typing import Any

__version__ = "0.1.0"


def compile(model: Any, *example_inputs: Any, **options: Any) -> Any:
    """Import (if needed), compile and load a model; returns a `fusec.runtime.Module`.

    `model` is a `torch.nn.Module` (with `example_inputs`) or linalg-on-tensors MLIR text.
    Options: `target` ("cpu", "cuda", "auto"), `fusion`, `arch`, `cache`, `dump_dir`,
    `verify`, and the targets' typed options `cpu=fusec.CpuOptions(...)`,
    `cuda=fusec.CudaOptions(...)` (see `fusec.compiler.api.compile`).
    """
    from fusec.compiler.api import compile as _compile

    return _compile(model, *example_inputs, **options)


def import_torch(module: Any, *example_inputs: Any) -> str:
    """Return the linalg-on-tensors MLIR text of a `torch.nn.Module` via torch-mlir."""
    from fusec.compiler.frontend import import_torch as _import_torch

    return _import_torch(module, *example_inputs)


def __getattr__(name: str) -> Any:
    """`fusec.CpuOptions`, `fusec.CudaOptions`: the targets' options, imported when asked."""
    if name == "CpuOptions":
        from fusec.compiler.targets.cpu.options import CpuOptions

        return CpuOptions
    if name == "CudaOptions":
        from fusec.compiler.targets.cuda.options import CudaOptions

        return CudaOptions
    raise AttributeError(f"module 'fusec' has no attribute '{name}'")
