"""fusec-opt: the mlir-opt of fusec. Runs fusec's passes and upstream MLIR passes on a file.

    fusec-opt FILE [-o OUT] [--PASS[{opt=val,...}] ...] [--pass-pipeline=PIPELINE]
              [--split-input-file] [--mlir-print-ir-after-all] [--mlir-print-debuginfo]
              [--mlir-print-op-generic] [--list-passes] [--debug]

Passes run in the order given; a flag that is not a fusec pass is handed to MLIR's pass
registry (`--canonicalize`, `--one-shot-bufferize{bufferize-function-boundaries}`).
`-` (or no FILE) reads stdin. Errors are printed `file:line:col: error: ...`, exit code 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from fusec.compiler.diagnostics import FusecError, format_location, from_mlir_error

SPLIT_MARKER = "// -----"


def _split_chunks(text: str) -> list[tuple[int, str]]:
    """(first line index, text) of each `// -----`-separated chunk."""
    chunks, current, start = [], [], 0
    for i, line in enumerate(text.splitlines(keepends=True)):
        if line.strip() == SPLIT_MARKER:
            chunks.append((start, "".join(current)))
            current, start = [], i + 1
        else:
            current.append(line)
    chunks.append((start, "".join(current)))
    return chunks


def _parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="fusec-opt",
        description="Run fusec and MLIR passes on an MLIR file.",
        epilog="Any other --FLAG is a pass: fusec's (see --list-passes) or MLIR's.",
    )
    parser.add_argument("input", nargs="?", default="-", help="input .mlir file, - for stdin")
    parser.add_argument("-o", dest="output", default="-", help="output file (default stdout)")
    parser.add_argument("--pass-pipeline", default=None,
                        help="textual pipeline, e.g. 'builtin.module(canonicalize,cse)'")
    parser.add_argument("--split-input-file", action="store_true",
                        help="process each '// -----' chunk on its own")
    parser.add_argument("--mlir-print-ir-after-all", action="store_true")
    parser.add_argument("--mlir-print-debuginfo", action="store_true")
    parser.add_argument("--mlir-print-op-generic", action="store_true")
    parser.add_argument("--allow-unregistered-dialect", action="store_true",
                        help="parse ops of unknown dialects (torch-mlir's tm_tensor ops)")
    parser.add_argument("--mlir-timing", action="store_true",
                        help="print each pass's time (MLIR's timing report, on stderr)")
    parser.add_argument("--list-passes", action="store_true",
                        help="list fusec's passes with their options")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks")
    args, rest = parser.parse_known_args(argv)
    passes = []
    for item in rest:
        if not item.startswith("--") or len(item) <= 2:
            parser.error(f"unexpected argument '{item}'")
        name, eq, options = item[2:].partition("=")
        # mlir-opt's spelling of options, `--canonicalize=max-iterations=3`, is the
        # pipeline's `canonicalize{max-iterations=3}`.
        mlir_opt_style = eq and "{" not in name
        passes.append(f"{name}{{{options}}}" if mlir_opt_style else item[2:])
    return args, passes


def _pipeline_elements(args: argparse.Namespace, passes: list[str]) -> list[str]:
    from fusec.passes.registry import split_pipeline

    elements = list(passes)
    if args.pass_pipeline:
        text = args.pass_pipeline.strip()
        if text.startswith("builtin.module(") and text.endswith(")"):
            text = text[len("builtin.module("):-1]
        elements += split_pipeline(text)
    return elements


def _process(text: str, filename: str, elements: list[str], args: argparse.Namespace) -> str:
    """Parse, run the passes and print one chunk; raises FusecError on failure."""
    import mlir.ir as ir
    from fusec.dialects import make_context
    from fusec.passes import PassError, run_pipeline

    _load_targets()

    context = make_context()
    context.allow_unregistered_dialects = args.allow_unregistered_dialect
    try:
        module = ir.Module.parse(text, context)
    except ir.MLIRError as exc:
        raise from_mlir_error(exc, filename)[0] from None
    try:
        run_pipeline(module, elements, print_ir_after_all=args.mlir_print_ir_after_all,
                     timing=args.mlir_timing)
    except PassError as exc:
        raise FusecError(exc.message, format_location(exc.location, filename)) from None
    except ir.MLIRError as exc:
        raise from_mlir_error(exc, filename)[0] from None
    except ValueError as exc:
        raise FusecError(str(exc)) from None
    return module.operation.get_asm(
        enable_debug_info=args.mlir_print_debuginfo,
        print_generic_op_form=args.mlir_print_op_generic,
    )


def _write_output(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        return
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".fusec-opt-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        from fusec.compiler.artifact import publish, umasked

        os.chmod(tmp, umasked(0o666))
        publish(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _load_targets() -> None:
    """Import the targets: each registers what its kernels take, the CUDA target also its
    kernel builder and its passes."""
    import fusec.compiler.targets.cpu  # noqa: F401
    import fusec.compiler.targets.cuda  # noqa: F401


def run(argv: list[str]) -> int:
    args, passes = _parse_args(argv)
    if args.list_passes:
        import dataclasses

        import fusec.passes as fp

        _load_targets()

        for flag, cls in sorted(fp.REGISTRY.items()):
            print(f"  --{flag:32s} {cls.summary()}")
            for field in dataclasses.fields(cls):
                default = field.default if field.default is not dataclasses.MISSING else ""
                kind = getattr(field.type, "__name__", field.type)
                print(f"      {field.name.replace('_', '-'):30s} {kind} (default {default})")
        return 0
    filename = "<stdin>" if args.input == "-" else args.input
    try:
        if args.input == "-":
            text = sys.stdin.read()
        else:
            with open(args.input) as f:
                text = f.read()
    except OSError as exc:
        raise FusecError(f"cannot read input file: {exc.strerror}", filename) from None
    except UnicodeDecodeError:
        raise FusecError("not a text file: fusec-opt reads MLIR text", filename) from None
    if args.output != "-":
        from fusec.compiler.driver import check_output_path

        check_output_path(args.output)
    elements = _pipeline_elements(args, passes)
    chunks = _split_chunks(text) if args.split_input_file else [(0, text)]
    outputs, failed = [], False
    for start, chunk in chunks:
        # Pad with newlines so locations keep the line numbers of the whole file.
        try:
            outputs.append(_process("\n" * start + chunk, filename, elements, args))
        except FusecError as exc:
            if not args.split_input_file:
                raise
            print(exc, file=sys.stderr)
            failed = True
    _write_output(args.output, (SPLIT_MARKER + "\n").join(outputs))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        code = run(argv)
    except FusecError as exc:
        print(exc, file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:  # an internal error: say so, traceback only on request
        if debug:
            raise
        print(f"fusec-opt: internal error: {type(exc).__name__}: {exc} (rerun with --debug "
              "for the traceback)", file=sys.stderr)
        code = 1
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
