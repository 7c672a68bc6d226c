"""From an input file or text to IR, and from IR to `model.so`: what `fusec` and
`fusec.compile` share."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator

import mlir.ir as ir
from fusec.compiler.diagnostics import FusecError, format_location, from_mlir_error
from fusec.compiler.pipeline import CompileOptions, build_so, lower
from fusec.passes.grouping import model_functions
from fusec.passes.registry import PassError


def parse(text: str, filename: str) -> ir.Module:
    """Parse MLIR text in fusec's context; errors become located FusecErrors."""
    from fusec.dialects import make_context

    context = make_context()
    # torch-mlir's TMTensor ops (generic form) are unregistered; the `fusion` stage lowers
    # those it can, and _check_supported names any other unknown op.
    context.allow_unregistered_dialects = True
    try:
        module = ir.Module.parse(text, context)
    except ir.MLIRError as exc:
        _name_unsupported_op(text, filename)
        raise from_mlir_error(exc, filename)[0] from None
    _check_supported(module, filename)
    return module


def _check_supported(module: ir.Module, filename: str) -> None:
    """Reject unsupported ops, dynamic shapes and dtypes of linalg-on-tensors input up front.

    The `linalg` stage runs the same check; running it here first means a user's input error
    reads as one located line, without a pipeline reproducer meant for compiler bugs.
    """
    from fusec.compiler.pipeline import detect_stage
    from fusec.passes import PassError
    from fusec.passes.linalg.check_supported import CheckSupportedPass

    if detect_stage(module) != "torch":
        return
    try:
        CheckSupportedPass().run(module.operation)
    except PassError as exc:
        raise FusecError(exc.message, format_location(exc.location, filename)) from None
    public = model_functions(module.operation)
    if len(public) != 1:
        raise FusecError(f"expected one public func.func (the model) in the module, found "
                         f"{len(public)}", filename)


def _name_unsupported_op(text: str, filename: str) -> None:
    """An op of a dialect MLIR does not know fails to parse with an obscure message; parse
    again allowing unknown dialects so that the supported-ops check names the op instead."""
    from fusec.dialects import make_context

    context = make_context()
    context.allow_unregistered_dialects = True
    try:
        module = ir.Module.parse(text, context)
    except ir.MLIRError:
        return  # broken for other reasons too: the first parse error stands
    _check_supported(module, filename)


def as_module(source: str | ir.Module, filename: str) -> ir.Module:
    """`load_input`'s MLIR as a module: text is parsed, an imported module checked."""
    if isinstance(source, str):
        return parse(source, filename)
    _check_supported(source, filename)
    return source


def as_text(source: str | ir.Module) -> str:
    """`load_input`'s MLIR as text (generic form, with locations)."""
    if isinstance(source, str):
        return source
    return source.operation.get_asm(print_generic_op_form=True, enable_debug_info=True)


def check_output_path(path: str) -> None:
    """Fail before compiling if `path` cannot be written: its folder must exist, be writable,
    and `path` itself must not be a folder."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise FusecError("cannot write output: it is a directory (give a file path)", path)
    if not os.path.isdir(directory):
        raise FusecError(f"cannot write output: directory {directory} does not exist", path)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise FusecError(f"cannot write output: directory {directory} is not writable", path)


def load_input(path: str) -> tuple[str | ir.Module, tuple | None, object | None]:
    """Read `path` (.mlir, or .py defining model()/example_inputs()).

    Returns (the MLIR: text for a .mlir, the imported module for a .py, whose weights are
    never printed on the way; `as_module` and `as_text` take either), example inputs or
    None, the torch module or None).
    """
    if not os.path.exists(path):
        raise FusecError("no such file", path)
    if os.path.isdir(path):
        raise FusecError("is a directory, expected a .mlir or .py file", path)
    if path.endswith(".py"):
        from fusec.compiler.frontend import FrontendError, import_torch_module, load_model_file

        try:
            model, inputs = load_model_file(path)
            check_example_inputs(inputs, path)
            with quiet_torch_logs():
                return import_torch_module(model, *inputs).module, inputs, model
        except FrontendError as exc:
            raise _one_line(str(exc), path) from None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), None, None
    except UnicodeDecodeError:
        raise FusecError("not a text file: fusec reads MLIR text (.mlir) or a model.py that "
                         "defines model() and example_inputs()", path) from None
    except OSError as exc:
        raise FusecError(f"cannot read input file: {exc.strerror}", path) from None


# torch dtypes that torch-mlir's import cannot turn into anything fusec compiles; some abort
# the whole process inside MLIR (complex), so they are refused before the import.
_UNSUPPORTED_TORCH_DTYPES = ("complex", "float8", "quint", "qint")


def check_example_inputs(inputs: tuple, path: str | None = None) -> None:
    """Refuse example inputs of dtypes fusec does not support, naming the input."""
    for i, value in enumerate(inputs):
        dtype = str(getattr(value, "dtype", ""))
        if any(kind in dtype for kind in _UNSUPPORTED_TORCH_DTYPES):
            raise FusecError(f"example input {i} has dtype {dtype}, which fusec does not "
                             "support (supported: float32, float64, float16, bfloat16, int64, "
                             "int32, int16, int8, bool)", path)


@contextlib.contextmanager
def quiet_torch_logs() -> Iterator[None]:
    """torch.export logs a failing op's Python traceback at ERROR level before raising; the
    exception carries the reason, and fusec's errors are one line."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _one_line(message: str, path: str) -> FusecError:
    """A FrontendError's text as one located line: torch-mlir's failures come as a summary
    line followed by its own diagnostics, whose first `error:` locates the failure in `path`."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    summary = lines[0] if lines else "cannot import the model"
    # The frontend names the file itself; the location prefix already does.
    if summary.startswith(f"{path}: "):
        summary = summary[len(path) + 2:]
    # A message that starts with a source line (`/abs/model.py:4: ...`, the user's line that
    # made the op): that is the location.
    located = re.match(r"^(\S+?\.py):(\d+): (.*)$", summary)
    if located:
        name, line, rest = located.groups()
        if os.path.abspath(name) == os.path.abspath(path):
            name = path
        return FusecError(rest, f"{name}:{line}")
    detail = next((line for line in lines[1:] if "error:" in line), None)
    if detail is None:
        return FusecError(summary, path)
    location = format_location(detail) or path
    absolute = os.path.abspath(path)
    if location.startswith(absolute + ":"):
        location = path + location[len(absolute):]
    # MLIR appends the failing op in generic form (`: %0 = "torch..."`): long, and not needed.
    reason = detail.split("error:", 1)[1].split(": %", 1)[0].strip()
    return FusecError(f"{summary.rstrip(':')}: {reason}", location)


def compile_text(text: str, filename: str, options: CompileOptions, output: str) -> dict:
    """Parse, lower through every stage and write `output`; returns the artifact metadata.
    (The output path is checked before the parse too: a bad -o fails fast.)"""
    check_output_path(output)
    return compile_module(parse(text, filename), filename, options, output)


def compile_module(module: ir.Module, filename: str, options: CompileOptions,
                   output: str) -> dict:
    """`compile_text` for a module already in fusec's MLIR (lowered in place)."""
    check_output_path(output)
    module = as_module(module, filename)
    lower(module, options, filename=filename)
    return build(module, options, output, filename)


def build(module: ir.Module, options: CompileOptions, output: str,
          filename: str | None = None) -> dict:
    """The `so` stage, after checking that code generation lowered everything: LLVM
    translation of a leftover cast fails hard (it can crash the process)."""
    leftovers: list[str] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "builtin.unrealized_conversion_cast":
            leftovers.append(op.name)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if leftovers:
        raise FusecError("code generation left an op it could not lower to LLVM "
                         f"({len(leftovers)} unresolved type conversion(s)); rerun with "
                         "--dump-dir DIR and look for 'unrealized_conversion_cast' in the cpu "
                         "stage", filename)
    from fusec.compiler.artifact import ArtifactBuildError

    try:
        return build_so(module, options, output, filename)
    except PassError as exc:  # code generation refused the model (located)
        raise FusecError(exc.message, format_location(exc.location, filename)) from None
    except ArtifactBuildError as exc:
        # The full command and compiler output are in the exception (--debug shows them).
        summary = str(exc).splitlines()[0].rstrip(":")
        lines = [line.strip() for line in exc.output.splitlines()]
        detail = next((line for line in lines if "undefined reference" in line), None) or next(
            (line for line in lines if "error" in line and "collect2" not in line), "")
        raise FusecError(f"{summary}{': ' + detail if detail else ''} (set CC to choose the C "
                         "compiler; --debug shows the command)", output) from exc
