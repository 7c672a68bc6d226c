"""From an input file or text to IR, and from IR to `model.so`: what `fusec` and
`fusec.compile` share."""

from __future__ import annotations

import os

import mlir.ir as ir

from fusec.compiler.diagnostics import FusecError, from_mlir_error
from fusec.compiler.pipeline import CompileOptions, build_so, lower


def parse(text: str, filename: str) -> ir.Module:
    """Parse MLIR text in fusec's context; errors become located FusecErrors."""
    from fusec.dialects import make_context

    try:
        return ir.Module.parse(text, make_context())
    except ir.MLIRError as exc:
        raise from_mlir_error(exc, filename)[0] from None


def load_input(path: str) -> tuple[str, tuple | None, object | None]:
    """Read `path` (.mlir, or .py defining model()/example_inputs()).

    Returns (MLIR text, example inputs or None, the torch module or None).
    """
    if not os.path.exists(path):
        raise FusecError("no such file", path)
    if os.path.isdir(path):
        raise FusecError("is a directory, expected a .mlir or .py file", path)
    if path.endswith(".py"):
        from fusec.compiler.frontend import FrontendError, import_torch, load_model_file

        try:
            model, inputs = load_model_file(path)
            return import_torch(model, *inputs), inputs, model
        except FrontendError as exc:
            raise FusecError(str(exc), path) from None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), None, None
    except (OSError, UnicodeDecodeError) as exc:
        raise FusecError(f"cannot read input file: {exc}", path) from None


def compile_text(text: str, filename: str, options: CompileOptions, output: str) -> dict:
    """Parse, lower through every stage and write `output`; returns the artifact metadata."""
    module = parse(text, filename)
    lower(module, options, filename=filename)
    return build_so(module, options, output)
