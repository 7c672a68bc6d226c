"""The `torch` stage: a PyTorch module becomes linalg-on-tensors MLIR that fusec's MLIR reads.

torch-mlir (`torch_mlir.fx.export_and_import`) does the import and the lowering to
linalg-on-tensors. It carries its own, newer MLIR, so its output is handed over as text in
generic form and re-parsed with fusec's context (MLIR 22). On the way, the weights, which
torch-mlir prints as `dense_resource<...>` handles into a `{-# dialect_resources #-}` blob
section, are inlined as ordinary `dense<...>` attributes, so that every later stage (and the
Python cost model) sees plain `DenseElementsAttr` constants.

The function is named `@main` unless the caller asks otherwise.

`load_model_file` serves `fusec model.py`: the file defines `model()` (an `nn.Module`) and
`example_inputs()` (a tuple of tensors).

torch, torch_mlir and mlir are imported lazily: this module must import without torch, which
is an optional extra.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import mlir.ir as ir
    import torch

DEFAULT_FUNC_NAME = "main"


class FrontendError(ValueError):
    """A model could not be loaded or imported; the message says which and why."""


# --------------------------------------------------------------------------------------------
# torch -> MLIR text


def import_torch(
    module: torch.nn.Module, *example_inputs: torch.Tensor, func_name: str = DEFAULT_FUNC_NAME
) -> str:
    """Import `module` called on `example_inputs` as linalg-on-tensors MLIR, in generic form.

    The module is put in eval mode. The result has one public function `@func_name` whose
    arguments are the example inputs (static shapes) and whose weights are inlined dense
    constants; it parses with `fusec.dialects.make_context()`.
    """
    text = _torch_mlir_generic_text(module, example_inputs, func_name)
    return to_generic(inline_dense_resources(text))


def _torch_mlir_generic_text(
    module: torch.nn.Module, example_inputs: tuple[Any, ...], func_name: str
) -> str:
    """Run torch-mlir and print its module in generic form with torch-mlir's own MLIR."""
    try:
        import torch
        from torch_mlir import fx
        from torch_mlir.compiler_utils import TorchMlirCompilerError
    except ImportError as error:
        raise FrontendError(
            f"importing a PyTorch model needs torch and torch-mlir ({error}); "
            "install them with `pip install fusec[torch]`"
        ) from error
    if not isinstance(module, torch.nn.Module):
        raise FrontendError(f"expected a torch.nn.Module, got {type(module).__name__}")
    for index, value in enumerate(example_inputs):
        if not isinstance(value, torch.Tensor):
            raise FrontendError(
                f"example input {index} is a {type(value).__name__}, not a torch.Tensor"
            )
    module.eval()
    try:
        with warnings.catch_warnings():
            # torch.export's pytree code warns about its own deprecated API on every export.
            warnings.simplefilter("ignore", FutureWarning)
            imported = fx.export_and_import(
                module,
                *example_inputs,
                output_type="linalg-on-tensors",
                func_name=func_name,
            )
    except TorchMlirCompilerError as error:
        raise FrontendError(_describe_torch_mlir_failure(str(error))) from error
    except Exception as error:  # torch.export raises many types (Unsupported, UserError, ...)
        raise FrontendError(
            f"torch.export could not trace the model: {type(error).__name__}: {error}"
        ) from error
    return imported.operation.get_asm(print_generic_op_form=True)


# Patterns torch-mlir's diagnostics use to name the op it could not lower, most specific first.
_UNSUPPORTED_OP_PATTERNS = (
    re.compile(r"failed to legalize operation '([\w.]+)'"),
    re.compile(r"unsupported by backend contract: module contains operation '?([\w.]+)"),
    re.compile(r"found an op that was marked as backend illegal[^\n]*\n[^\n]*?([\w]+\.[\w.]+)"),
    re.compile(r"'(torch\.[\w.]+)' op"),
)


def _describe_torch_mlir_failure(message: str) -> str:
    """A one-paragraph FrontendError message for a failed torch-mlir lowering."""
    for pattern in _UNSUPPORTED_OP_PATTERNS:
        match = pattern.search(message)
        if match:
            return f"torch-mlir cannot lower `{match.group(1)}` to linalg-on-tensors:\n{message}"
    return f"torch-mlir failed to lower the model to linalg-on-tensors:\n{message}"


# --------------------------------------------------------------------------------------------
# Normalising torch-mlir's text for MLIR 22

_RESOURCE_SECTION = re.compile(r"\{-#\s*dialect_resources\s*:.*?#-\}", re.DOTALL)
_RESOURCE_ENTRY = re.compile(r'([\w.$-]+)\s*:\s*"0x([0-9A-Fa-f]*)"')
_RESOURCE_USE = re.compile(r"dense_resource<([\w.$-]+)>(\s*:\s*tensor<([^>]*)>)")


def inline_dense_resources(text: str) -> str:
    """Replace every `dense_resource<name> : tensor<...>` by the equivalent `dense<...>`.

    The blob section `{-# dialect_resources: { builtin: { name: "0x<align><bytes>" } } #-}` is
    removed. A blob starts with its 4-byte alignment, then the raw little-endian elements,
    which is exactly `dense<"0x...">`'s hex form; i1 blobs (one byte per element) are written
    as a list of booleans instead, since hex i1 data is read bit-packed.
    """
    section = _RESOURCE_SECTION.search(text)
    if section is None:
        if "dense_resource<" in text:
            raise FrontendError("dense_resource attribute without a dialect_resources section")
        return text
    blobs = dict(_RESOURCE_ENTRY.findall(section.group(0)))
    body = text[: section.start()] + text[section.end() :]

    def replace(match: re.Match[str]) -> str:
        name, type_suffix, shape_and_type = match.group(1), match.group(2), match.group(3)
        if name not in blobs:
            raise FrontendError(f"dense_resource<{name}> has no blob in the resource section")
        data = blobs[name][8:]  # drop the 4-byte alignment header
        element_type = shape_and_type.split("x")[-1]
        if element_type == "i1":
            bits = bytes.fromhex(data)
            return "dense<[" + ", ".join("true" if b else "false" for b in bits) + "]>" + type_suffix
        return f'dense<"0x{data}">{type_suffix}'

    return _RESOURCE_USE.sub(replace, body)


def parse_module(text: str, context: ir.Context | None = None) -> ir.Module:
    """Parse MLIR text with fusec's MLIR; a parse error becomes a FrontendError with diagnostics."""
    import mlir.ir as ir

    from fusec.dialects import make_context

    context = context or make_context()
    with context:
        try:
            return ir.Module.parse(text)
        except ir.MLIRError as error:
            raise FrontendError(f"fusec's MLIR cannot parse the imported module: {error}") from error


def to_generic(text: str, context: ir.Context | None = None) -> str:
    """Re-print MLIR text in generic form with fusec's MLIR (after checking that it parses)."""
    module = parse_module(text, context)
    return module.operation.get_asm(print_generic_op_form=True)


# --------------------------------------------------------------------------------------------
# `fusec model.py`

_REQUIRED_FUNCTIONS = ("model", "example_inputs")


def load_model_file(path: str | os.PathLike[str]) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """Load a Python model file: it must define `model()` and `example_inputs()`.

    Returns the module (in eval mode) and the example inputs as a tuple of tensors. Anything
    wrong, including an exception raised inside the file, is a FrontendError naming the file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FrontendError(f"{path}: no such file")
    namespace = _execute_file(path)
    missing = [name for name in _REQUIRED_FUNCTIONS if not callable(getattr(namespace, name, None))]
    if missing:
        raise FrontendError(
            f"{path}: a model file must define "
            + " and ".join(f"`{name}()`" for name in _REQUIRED_FUNCTIONS)
            + "; missing: "
            + ", ".join(f"`{name}()`" for name in missing)
        )
    module = _call_user_function(path, namespace.model)
    inputs = _call_user_function(path, namespace.example_inputs)
    return _check_module(path, module), _check_inputs(path, inputs)


def _execute_file(path: str) -> Any:
    """Import the file as a fresh module (not registered in sys.modules under a shared name)."""
    name = "fusec_user_model_" + re.sub(r"\W", "_", os.path.abspath(path))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FrontendError(f"{path}: not a loadable Python file")
    namespace = importlib.util.module_from_spec(spec)
    # Registered while it runs so that dataclasses and pickling inside the file can find it.
    sys.modules[name] = namespace
    try:
        spec.loader.exec_module(namespace)
    except Exception as error:
        del sys.modules[name]
        raise FrontendError(f"{path}: error while importing: {type(error).__name__}: {error}") from error
    return namespace


def _call_user_function(path: str, function: Any) -> Any:
    try:
        return function()
    except Exception as error:
        raise FrontendError(
            f"{path}: `{function.__name__}()` raised {type(error).__name__}: {error}"
        ) from error


def _check_module(path: str, module: Any) -> torch.nn.Module:
    import torch

    if not isinstance(module, torch.nn.Module):
        raise FrontendError(f"{path}: `model()` returned a {type(module).__name__}, not a torch.nn.Module")
    return module.eval()


def _check_inputs(path: str, inputs: Any) -> tuple[torch.Tensor, ...]:
    import torch

    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)):
        raise FrontendError(
            f"{path}: `example_inputs()` returned a {type(inputs).__name__}, not a tuple of tensors"
        )
    for index, value in enumerate(inputs):
        if not isinstance(value, torch.Tensor):
            raise FrontendError(
                f"{path}: `example_inputs()` item {index} is a {type(value).__name__}, not a tensor"
            )
    return tuple(inputs)
