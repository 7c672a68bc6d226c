"""Errors as users see them: `file:line:col: error: message`, MLIR style.

Every user-facing failure in fusec becomes a `FusecError` (one line, located where a location
is known); the command-line tools print it and exit 1, and show the Python traceback only
with `--debug`.
"""

from __future__ import annotations

import os
import re
import sysconfig

_FILE_LOC = re.compile(r'"([^"]*)":(\d+):(\d+)')


class FusecError(Exception):
    """A user-facing error, with an optional `file:line:col` location."""

    def __init__(self, message: str, location: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.location = location

    def __str__(self) -> str:
        prefix = f"{self.location}: " if self.location else ""
        return f"{prefix}error: {self.message}"


def format_location(location: object, filename: str | None = None) -> str | None:
    """`loc("a.mlir":3:5)` (or any location naming a file position) -> `a.mlir:3:5`.

    Parsing from a string names the buffer "-" (or "<unknown>"): `filename` replaces it, and
    so does the absolute path of `filename` (say it as the user did). A call-site location
    (torch-mlir's, for an op inside `nn.Linear.forward` called from model.py) names the first
    frame outside installed packages: the user's line, not torch's.
    """
    matches = _FILE_LOC.findall(str(location))
    if not matches:
        return filename
    name, line, col = next((m for m in matches if not _is_library(m[0])), matches[0])
    if filename and (name in ("-", "<unknown>", "")
                     or os.path.abspath(filename) == os.path.abspath(name)):
        name = filename
    return f"{name}:{line}:{col}"


_PYTHON_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def python_frames(text: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The (file, line) frames of a Python traceback in `text`: all of them, and those of
    the user's code (not installed packages or the standard library)."""
    frames = _PYTHON_FRAME.findall(text)
    return frames, [f for f in frames if not _is_library(f[0])]


def _is_library(path: str) -> bool:
    """Whether `path` is installed code (torch's modules, the standard library)."""
    return ("site-packages" in path or "dist-packages" in path
            or path.startswith(sysconfig.get_paths()["stdlib"]))


def from_mlir_error(exc: Exception, filename: str | None = None) -> list[FusecError]:
    """The diagnostics of an `mlir.ir.MLIRError` as located `FusecError`s (errors only)."""
    diagnostics = getattr(exc, "error_diagnostics", None) or []
    errors = []
    for diag in diagnostics:
        message = str(diag.message).strip().splitlines()[0] if str(diag.message).strip() else ""
        errors.append(FusecError(message or "unknown error", format_location(diag.location,
                                                                            filename)))
    if not errors:
        text = str(exc).strip().splitlines()
        # "Failure while executing pass pipeline:" is followed by "error: <loc>: message".
        detail = next((t for t in text if "error:" in t), text[-1] if text else "MLIR error")
        errors.append(FusecError(detail.split("error:", 1)[-1].strip(), filename))
    return errors
