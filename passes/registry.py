"""The pass base class and the one registry that maps command-line flags to passes.

A fusec pass is a dataclass: its typed fields are its options (`--fuse-vertical{max-ops=8}`
sets `max_ops`), `ARGUMENT` is its flag and its docstring is its spec. Passes run inside an
upstream `PassManager` (as Python-defined passes), so they interleave with upstream passes in
one pipeline, and `--mlir-print-ir-after-all` sees them like any other pass.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Callable, ClassVar

import mlir.ir as ir


class PassError(Exception):
    """A pass refused its input; `location` points at the op at fault."""

    def __init__(self, message: str, location: ir.Location | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.location = location


class Pass:
    """Base of fusec's passes. Subclasses are dataclasses and define `run(module)`."""

    ARGUMENT: ClassVar[str] = ""

    def run(self, module: ir.Operation) -> None:  # pragma: no cover - interface
        """Transform `module` (a builtin.module operation) in place."""
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""


REGISTRY: dict[str, type[Pass]] = {}


def register(cls: type[Pass]) -> type[Pass]:
    """Class decorator: make the pass available as `--<ARGUMENT>`."""
    assert cls.ARGUMENT and cls.ARGUMENT not in REGISTRY, cls
    REGISTRY[cls.ARGUMENT] = cls
    return cls


def _convert(value: str, annotation: typing.Any, flag: str, name: str) -> typing.Any:
    if annotation in (bool, "bool"):
        if value.lower() in ("1", "true", "on"):
            return True
        if value.lower() in ("0", "false", "off"):
            return False
        raise ValueError(f"option '{name}' of --{flag} expects true or false, got '{value}'")
    if annotation in (int, "int"):
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"option '{name}' of --{flag} expects an integer, got '{value}'")
    if annotation in (float, "float"):
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"option '{name}' of --{flag} expects a number, got '{value}'")
    return value


def make_pass(flag: str, options: dict[str, str] | None = None) -> Pass:
    """Instantiate the registered pass `flag` with textual options (names use dashes)."""
    cls = REGISTRY[flag]
    fields = {f.name.replace("_", "-"): f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in (options or {}).items():
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise ValueError(f"--{flag} has no option '{key}' (options: {known})")
        field = fields[key]
        kwargs[field.name] = _convert(value, field.type, flag, key)
    return cls(**kwargs)


def as_external_pass(p: Pass) -> tuple[Callable, str, str]:
    """Wrap a fusec pass for `PassManager.add(callable, name=..., argument=...)`.

    Exceptions cannot cross the pass manager, so the wrapper records them on the pass
    object and signals failure; the driver re-raises them after `PassManager.run`.
    """

    def run(op: ir.Operation, external_pass: typing.Any) -> None:
        try:
            p.run(op)
        except Exception as exc:  # re-raised by run_passes
            p._failure = exc  # type: ignore[attr-defined]
            external_pass.signal_pass_failure()

    return run, type(p).__name__, p.ARGUMENT


def split_pipeline(text: str) -> list[str]:
    """Split `a,b{x=1,y=2},func.func(c)` at top-level commas."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def parse_element(element: str) -> tuple[str, dict[str, str]]:
    """`name{a=1,b=2}` -> ("name", {"a": "1", "b": "2"}); options without `=` are "true".
    Options may also be separated by spaces, as MLIR's own pipelines write them."""
    if "{" not in element:
        return element.strip(), {}
    name, _, rest = element.partition("{")
    options = {}
    items = [word for item in split_pipeline(rest.rstrip().removesuffix("}"))
             for word in item.split()]
    for item in items:
        key, eq, value = item.partition("=")
        options[key.strip()] = value.strip() if eq else "true"
    return name.strip(), options


def run_pipeline(module: ir.Module, elements: list[str], print_ir_after_all: bool = False,
                 timing: bool = False) -> None:
    """Run pass-pipeline elements in order: fusec passes by flag, anything else upstream.

    Raises the failing fusec pass's exception, or `ir.MLIRError` for upstream failures,
    or `ValueError` for an unknown pass or option.
    """
    import mlir.passmanager as pm_mod

    with module.context:
        pm = pm_mod.PassManager("builtin.module")
        ours: list[Pass] = []
        for element in elements:
            name, options = parse_element(element)
            if name in REGISTRY:
                p = make_pass(name, options)
                ours.append(p)
                run, pass_name, argument = as_external_pass(p)
                pm.add(run, name=pass_name, argument=argument)
            else:
                try:
                    pm.add(element)
                except (ValueError, ir.MLIRError) as exc:
                    raise ValueError(_pipeline_error(element, str(exc))) from None
        if print_ir_after_all:
            pm.enable_ir_printing(print_after_all=True)
        if timing:
            pm.enable_timing()  # MLIR's per-pass timing report, on stderr
        try:
            pm.run(module.operation)
        except ir.MLIRError:
            for p in ours:
                failure = getattr(p, "_failure", None)
                if failure is not None:
                    raise failure from None
            raise


def _pipeline_error(element: str, text: str) -> str:
    """One line out of MLIR's multi-line pass-parser message."""
    if "does not refer to a registered pass" in text:
        return (f"unknown pass '--{element}' (neither a fusec pass, see "
                "`fusec-opt --list-passes`, nor a registered MLIR pass)")
    lines = [t.strip() for t in text.splitlines() if t.strip() and t.strip() != "^"]
    detail = lines[0].split(": ", 1)[-1] if lines else "invalid"
    return f"bad pass options in '--{element}': {detail}"
