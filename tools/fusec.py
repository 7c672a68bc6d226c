"""fusec: compile a PyTorch model (model.py) or linalg-on-tensors MLIR into model.so.

    fusec MODEL.{py,mlir} [-o model.so] [--target cpu|cuda|auto] [--arch sm_90]
          [--emit STAGE] [--dump-dir DIR] [--report[=json]] [--no-fusion] [--check]
          [--verify [--verify-dir DIR]] [--tune] [--debug] [--cpu-FIELD ...] [--cuda-FIELD ...]

A model.py defines `model()` (a torch.nn.Module) and `example_inputs()`. `--emit STAGE` prints
the IR after STAGE (linalg, fusion, tiled, bufferized, cpu) and stops; IR given as input
resumes after the stage it is in. `--check` runs the compiled model on fresh random inputs and
compares it with PyTorch in float64 (model.py inputs only). `--verify` also builds the unfused
program and checks, kernel by kernel, that the fused one agrees with it. `--tune` times the
candidate tiles of our GPU GEMM and attention kernels (or the CPU's matmul kernels) on the
device and keeps the fastest in the tuning cache, which every later compile reads. Errors
print as
`file:line:col: error: ...` with exit code 1. Each target's typed options (CpuOptions,
CudaOptions) are flags, one per field: `fusec --help` lists them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from fusec.compiler.diagnostics import FusecError

# GPU architectures the CUDA target builds for (NVVM targets with the PTX 8.0 features).
SUPPORTED_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
DEFAULT_ARCH = "sm_90"


def _parse_args(argv: list[str]) -> argparse.Namespace:
    import fusec

    parser = argparse.ArgumentParser(prog="fusec", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"fusec {fusec.__version__}")
    parser.add_argument("input", help="model.py (model(), example_inputs()) or a .mlir file")
    parser.add_argument("-o", "--output",
                        help="output .so (default: INPUT's name with .fusec.so, which no "
                             "`import` of the model's module can pick up)")
    parser.add_argument("--target", default="cpu", choices=["cpu", "cuda", "auto"],
                        help="cpu (default), cuda, or auto: cuda where a GPU is present")
    parser.add_argument("--arch", default=None,
                        help=f"GPU architecture for --target cuda: {', '.join(SUPPORTED_ARCHS)} "
                             f"(default {DEFAULT_ARCH}); ignored, with a note, for the CPU")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print each stage's name and time as it runs (on stderr)")
    parser.add_argument("--emit", metavar="STAGE",
                        help="print the IR after STAGE and stop (linalg, fusion, tiled, "
                             "bufferized, cpu; for --target cuda: cuda, the kernels' "
                             "gpu.module, and ptx; torch for the imported IR)")
    parser.add_argument("--dump-dir", metavar="DIR",
                        help="write <model>.<stage>.mlir per stage; for --target cuda also "
                             "the kernels (<model>.cuda.mlir, <model>.ptx, one file of each "
                             "per kernel in <model>.kernels/) and ptxas's resource usage")
    parser.add_argument("--report", action="store_const", const="text",
                        help="print the fusion report (per kernel and refused fusions); "
                             "--report=json for JSON")
    parser.add_argument("--report-format", dest="report_format", choices=["text", "json"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--graph", metavar="FILE",
                        help="draw the op graph with one cluster per kernel: FILE.dot, or "
                             "FILE.svg/.png (needs Graphviz's `dot`)")
    parser.add_argument("--no-fusion", action="store_true", help="one kernel per op (baseline)")
    parser.add_argument("--check", action="store_true",
                        help="run the result and compare with PyTorch in float64 (model.py)")
    parser.add_argument("--verify", action="store_true",
                        help="also build the unfused program and check, on random inputs, "
                             "that every fused kernel agrees with it (names the first that "
                             "does not)")
    parser.add_argument("--verify-dir", dest="verify_dir", metavar="DIR",
                        help="with --verify: keep the check (both programs, the inputs' seed) "
                             "in DIR; `fusec-verify DIR` runs it again, or runs it where the "
                             "GPU is when this machine has none")
    parser.add_argument("--profile", metavar="RUNS", type=int, default=0,
                        help="run the CPU result RUNS times on random inputs (a model.py's "
                             "integer inputs as given) and print each kernel's mean time, "
                             "slowest first")
    parser.add_argument("--tune", action="store_true",
                        help="time each tunable kernel's candidate tiles (our GPU GEMM's and "
                             "attention's, the CPU's matmul kernels') on the device, keep the "
                             "fastest in the tuning cache (--cuda-tuning/--cpu-tuning, "
                             "FUSEC_TUNING_CACHE) and build with them; later compiles read "
                             "the cache without timing")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks")
    _add_target_flags(parser)
    parser.error = _usage_error  # type: ignore[method-assign]
    # `--report=json` (the value joined: a bare `--report` never takes the next word, so
    # `fusec --report model.mlir` reads model.mlir as the input).
    argv = [f"--report-format={a.split('=', 1)[1]}" if a.startswith("--report=") else a
            for a in argv]
    args = parser.parse_args(argv)
    if args.report_format:
        args.report = args.report_format
    return args


# The targets' typed options, a flag per field (`--cpu-threads 8`, `--no-cuda-gemm`); the
# CUDA architecture is `--arch` above.
SKIPPED_FIELDS = {("cuda", "arch")}


def _target_options_classes() -> dict[str, type]:
    from fusec.compiler.targets.cpu.options import CpuOptions
    from fusec.compiler.targets.cuda.options import CudaOptions

    return {"cpu": CpuOptions, "cuda": CudaOptions}


def _add_target_flags(parser: argparse.ArgumentParser) -> None:
    import dataclasses

    for prefix, cls in _target_options_classes().items():
        group = parser.add_argument_group(f"{prefix} target options ({cls.__name__}; "
                                          f"0 or empty: the cost model's choice)")
        for f in dataclasses.fields(cls):
            if (prefix, f.name) in SKIPPED_FIELDS:
                continue
            flag = f"--{prefix}-{f.name.replace('_', '-')}"
            dest = f"{prefix}__{f.name}"
            text = f"{f.metadata.get('help', '')} (default: {f.default!r})".replace("%", "%%")
            if isinstance(f.default, bool):
                group.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction,
                                   default=None, help=text)
            else:
                group.add_argument(flag, dest=dest, type=type(f.default), default=None,
                                   metavar=type(f.default).__name__.upper(), help=text)


def target_options(args: argparse.Namespace) -> dict:
    """{"cpu": CpuOptions, "cuda": CudaOptions} from the flags given (defaults elsewhere)."""
    made = {}
    for prefix, cls in _target_options_classes().items():
        given = {key.split("__", 1)[1]: value for key, value in vars(args).items()
                 if key.startswith(f"{prefix}__") and value is not None}
        if prefix == "cuda":
            given["arch"] = args.arch or DEFAULT_ARCH
        made[prefix] = cls(**given)
    return made


def _usage_error(message: str) -> None:
    """A bad command line, like every other fusec error: one line, exit code 1."""
    print(f"error: {message} (see fusec --help)", file=sys.stderr)
    sys.exit(1)


def _write_text(path: str | None, text: str) -> None:
    if path is None or path == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".fusec-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    from fusec.compiler.artifact import publish, umasked

    os.chmod(tmp, umasked(0o666))
    publish(tmp, path)


def default_output(input_path: str) -> str:
    """INPUT's path with `.fusec.so`: `model.so` beside `model.py` would be what `import
    model` loads (a .so is an extension module) and break the user's own import."""
    return os.path.splitext(input_path)[0] + ".fusec.so"


def run(argv: list[str]) -> int:
    args = _parse_args(argv)
    from fusec.compiler import driver
    from fusec.compiler.pipeline import CompileOptions, emit_text, lower

    name = os.path.splitext(os.path.basename(args.input))[0]
    if name == "model":  # examples/<name>/model.py: name the artifact after the folder
        name = os.path.basename(os.path.dirname(os.path.abspath(args.input))) or name
    if args.arch is not None and args.arch not in SUPPORTED_ARCHS:
        raise FusecError(f"--arch '{args.arch}' is not a GPU architecture fusec builds for "
                         f"(supported: {', '.join(SUPPORTED_ARCHS)})")
    if args.arch is not None and args.target == "cpu":
        print(f"fusec: note: --arch {args.arch} is for --target cuda; ignored for the CPU",
              file=sys.stderr)
    options = CompileOptions(target=args.target, fusion=not args.no_fusion,
                             dump_dir=args.dump_dir, model_name=name, verbose=args.verbose,
                             **target_options(args))
    _check_args(args, options)
    started = time.perf_counter()
    source, inputs, model = driver.load_input(args.input)
    if args.verbose and model is not None:
        print(f"fusec: stage torch: {time.perf_counter() - started:.2f} s", file=sys.stderr)
    if args.emit == "torch":
        _write_text(args.output, driver.as_text(source))
        return 0
    # --verify builds the model again, fused and unfused, from the text of the input.
    text = driver.as_text(source) if args.verify else None
    module = driver.as_module(source, args.input)
    if args.verify:
        from fusec.compiler.verify import require_linalg

        require_linalg(module, args.input, options, run_here=args.verify_dir is None)
    if args.emit:
        _write_text(args.output, emit_text(module, options, args.emit, args.input))
        return 0
    if args.report or args.graph:
        lower(module, options, stop_after="fusion", filename=args.input)
        if args.report:
            _print_report(module, args.report, options)
        if args.graph:
            _write_graph(module, args.graph)
        if not args.output:
            return 0
    output = args.output or default_output(args.input)
    if args.tune:
        from fusec.compiler import tuner

        metadata = tuner.tune(module, args.input, options, output,
                              log=lambda line: print(line, file=sys.stderr))
    else:
        lower(module, options, filename=args.input)
        metadata = driver.build(module, options, output, args.input)
    if args.report == "text" and options.resolved_target() == "cuda":
        print(_built_kernels(metadata))
    elapsed = time.perf_counter() - started
    kernels = len(metadata.get("kernels", []))
    print(f"fusec: wrote {output} ({options.resolved_target()}, {kernels} kernel"
          f"{'s' if kernels != 1 else ''}, compiled in {elapsed:.2f} s)", file=sys.stderr)
    status = _check(output, model, inputs, args.input) if args.check else 0
    if args.profile:
        _profile(output, inputs, args.profile)
    if args.verify:
        _verify(text, args.input, options, inputs, args.verify_dir)
    return status


def _check_args(args: argparse.Namespace, options) -> None:
    """Refuse a bad --emit stage or an unwritable -o before the (slow) import and compile."""
    from fusec.compiler import driver
    from fusec.compiler.pipeline import emit_stages

    if args.emit:
        stages = ["torch", *emit_stages(options.resolved_target())]
        if args.emit not in stages:
            raise FusecError(f"unknown stage '{args.emit}' for --emit; the stages for target "
                             f"'{options.resolved_target()}' are: {', '.join(stages)}")
    if args.dump_dir and os.path.exists(args.dump_dir) and not os.path.isdir(args.dump_dir):
        raise FusecError("--dump-dir: exists and is not a directory", args.dump_dir)
    if args.verify_dir and not args.verify:
        raise FusecError("--verify-dir keeps the check that --verify builds: add --verify")
    if args.check and not args.input.endswith(".py"):
        raise FusecError("--check needs a model.py input (it compares with PyTorch)",
                         args.input)
    from fusec.compiler.pipeline import gpu_present

    if args.check and options.resolved_target() == "cuda" and not gpu_present():
        raise FusecError("--check runs the compiled model, and there is no GPU here "
                         "(libcuda.so.1 and /dev/nvidia0 not found): build without --check "
                         "and run the .so where a GPU is, with fusec.runtime.load(PATH)")
    if args.profile < 0:
        raise FusecError(f"--profile {args.profile}: the number of runs must be positive")
    if args.profile and options.resolved_target() != "cpu":
        raise FusecError("--profile times the CPU target's launches; for cuda use Nsight "
                         "Systems (nsys) on the GPU machine")
    if args.tune and (args.emit or args.output == "-"):
        raise FusecError("--tune builds and runs the artifact: give -o a file (not '-') and "
                         "no --emit")
    if args.profile and args.output == "-":
        raise FusecError("--profile runs the artifact: give -o a file, not '-'")
    if args.graph:
        driver.check_output_path(args.graph)
    if args.output and args.output != "-":
        driver.check_output_path(args.output)
    elif not args.emit and not ((args.report or args.graph) and not args.output):
        driver.check_output_path(default_output(args.input))


def _verify(text: str, path: str, options, inputs, bundle: str | None) -> None:
    """Fused vs unfused, kernel by kernel; raises VerificationError on a mismatch. With
    `bundle`, the check is kept there, and only built where it cannot run (CUDA, no GPU)."""
    from fusec.compiler import verify
    from fusec.compiler.pipeline import gpu_present

    examples = tuple(t.numpy() for t in inputs) if inputs is not None else None
    if bundle is None:
        result = verify.verify(text, path, options, examples=examples)
    else:
        verify.prepare(text, path, options, bundle, examples=examples)
        if options.resolved_target() == "cuda" and not gpu_present():
            print(f"fusec: built the check in {bundle} (fused and unfused programs for "
                  f"cuda); run `fusec-verify {bundle}` where the GPU is", file=sys.stderr)
            return
        result = verify.run_bundle(bundle)
    print("\n".join(result.kernel_lines()))
    print(result.summary())
    verify.check_or_raise(result, path)


def _write_graph(module, path: str) -> None:
    """The fusion plan as a Graphviz graph: DOT text, or rendered by `dot` for .svg/.png."""
    import shutil
    import subprocess

    from fusec.passes.report import fusion_graph_dot

    dot_text = fusion_graph_dot(module)
    extension = os.path.splitext(path)[1].lower()
    if extension in ("", ".dot", ".gv"):
        _write_text(path, dot_text)
        return
    if extension not in (".svg", ".png", ".pdf"):
        raise FusecError(f"--graph: unknown format '{extension}' (use .dot, .svg, .png or .pdf)",
                         path)
    dot = shutil.which("dot")
    if dot is None:
        raise FusecError("--graph: rendering needs Graphviz's `dot` on PATH (apt install "
                         "graphviz); or ask for a .dot file", path)
    rendered = subprocess.run([dot, f"-T{extension[1:]}"], input=dot_text.encode(),
                              capture_output=True)
    if rendered.returncode != 0:
        raise FusecError(f"--graph: dot failed: {rendered.stderr.decode().strip()}", path)
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(rendered.stdout)
    from fusec.compiler.artifact import publish

    publish(tmp, path)


def _built_kernels(metadata: dict) -> str:
    """What each GPU launch of the artifact is, as code generation built it: the path
    (fast, movement, tc_gemm, gemm, fallback) and its shape; a fallback kernel with the
    emitters' refusal, so that a regression to the slow path shows."""
    kernels = metadata.get("kernels", [])
    lines = [f"kernels built ({len(kernels)}):"]
    fallback = 0
    for k in kernels:
        info = k.get("info", {})
        path = info.get("path", "?")
        shape = info.get("shape") or ""
        ops = ", ".join(k.get("ops", [])[:6]) + (", ..." if len(k.get("ops", [])) > 6 else "")
        lines.append(f"  {k.get('symbol', '?'):10s} {path:9s} {shape:16s} {ops}")
        if path == "fallback":
            fallback += 1
            lines.append(f"    why: {info.get('why', '')}")
    lines.append(f"  {fallback} on the fallback path" if fallback else
                 "  none on the fallback path")
    return "\n".join(lines)


def _print_report(module, fmt: str, options) -> None:
    from fusec.passes import report

    device = "h200" if options.resolved_target() == "cuda" else "cpu"
    tiled = _tiled_copy(module, options)
    if fmt == "json":
        import json

        print(json.dumps(report.report_data(module, device=device, tiled=tiled), indent=2))
    else:
        print(report.format_report(module, device=device, tiled=tiled))


def _tiled_copy(module, options):
    """A copy of the fusion-stage `module` lowered through `tiled` (tile sizes, placement and
    capacity for the report), or None where the target has no tiled stage."""
    import dataclasses

    from fusec.compiler.pipeline import emit_stages, lower
    from mlir import ir

    if "tiled" not in emit_stages(options.resolved_target()):
        return None
    with module.context:
        copy = ir.Module.parse(str(module))
    try:
        lower(copy, dataclasses.replace(options, dump_dir=None), stop_after="tiled")
    except FusecError as exc:
        # The plan is reported all the same; the tiling columns are what failed.
        print(f"fusec: note: the report has no tiling: {exc}", file=sys.stderr)
        return None
    return copy


def _check(output: str, model, inputs, path: str) -> int:
    """Run the artifact on fresh random inputs and compare with torch in float64.

    The bar is the model's own precision: 1e-4 for float32, and for a 16-bit model four
    times torch's own error in that dtype against float64 (at least 1e-4): fusec is asked to
    be as close to the exact answer as torch is, not closer."""
    if model is None:
        raise FusecError("--check needs a model.py input (it compares with PyTorch)", path)
    import fusec.runtime as runtime
    import numpy as np
    import torch
    from fusec.tools.fuzz import relative_error

    compiled = runtime.load(output)
    generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    fresh = [torch.randn(tuple(t.shape), generator=generator).to(t.dtype)
             if t.dtype.is_floating_point else t.clone() for t in inputs]
    # Each run on its own copies: a model may update inputs in place (compared below).
    given = [t.clone() for t in fresh]
    outs = _as_list(compiled(*given))
    with torch.no_grad():
        own_in = [t.clone() for t in fresh]
        own = _as_list(model(*own_in))  # torch in the model's own dtype
        ref_in = [a.double() if a.dtype.is_floating_point else a.clone() for a in fresh]
        ref = _as_list(model.double()(*ref_in))
    names = [f"output {i}" for i in range(len(outs))]
    for i, _ in compiled.input_updates:
        updated = given[i].float() if given[i].dtype == torch.bfloat16 else given[i]
        outs, ref, own = outs + [updated.numpy()], ref + [ref_in[i]], own + [own_in[i]]
        names.append(f"input {i} (updated in place)")
    worst = 0.0
    ok = True
    for name, o, r, t in zip(names, outs, ref, own):
        r = r.numpy().astype(np.float64)
        out = np.asarray(o).astype(np.float64)
        err = relative_error(out, r)
        torch_err = relative_error(t.float().numpy(), r)
        low_precision = t.dtype in (torch.float16, torch.bfloat16)
        bar = max(1e-4, 4 * torch_err) if low_precision else 1e-4
        # NaN compares false with everything: it must fail, never vanish in max().
        worst = float("nan") if (err != err or worst != worst) else max(worst, err)
        ok = ok and err < bar
        note = f" (torch's own {str(t.dtype).split('.')[1]}: {torch_err:.2e}; bar {bar:.1e})" \
            if low_precision else ""
        print(f"{name}: shape {tuple(o.shape)} {np.asarray(o).dtype}, relative error vs "
              f"PyTorch (float64) {err:.2e}{note}")
    kernels = len(compiled.kernels)
    print(f"{'OK' if ok else 'MISMATCH'}: {kernels} kernel{'s' if kernels != 1 else ''}, "
          f"worst relative error {worst:.2e}")
    return 0 if ok else 1


def _profile(output: str, inputs, runs: int) -> None:
    """Run the artifact `runs` times (after one warm-up) and print where the time went."""
    import fusec.runtime as runtime
    import numpy as np

    compiled = runtime.load(output)
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    given = [t.numpy() for t in inputs] if inputs is not None else None
    arrays = []
    for i, spec in enumerate(compiled.signature.inputs):
        if spec.dtype in ("float32", "float64", "float16", "bfloat16"):
            arrays.append(rng.standard_normal(spec.shape).astype(spec.numpy_dtype))
        elif given is not None and i < len(given):
            arrays.append(given[i])  # indices, masks: random ones could be out of range
        else:
            arrays.append(np.zeros(spec.shape, spec.numpy_dtype))
    compiled(*arrays)
    compiled.profile(reset=True)
    started = time.perf_counter()
    for _ in range(runs):
        compiled(*arrays)
    wall = (time.perf_counter() - started) / runs * 1e3
    rows = compiled.profile()
    total = sum(r["ms"] for r in rows)
    print(f"fusec: profile of {runs} run{'s' if runs != 1 else ''} on "
          f"{compiled.num_threads} thread{'s' if compiled.num_threads != 1 else ''}: "
          f"{wall:.3f} ms per run, {total:.3f} ms in {len(rows)} launches")
    print(f"{'#':>4} {'ms':>9} {'share':>6} {'grid':>6}  kind          ops")
    order = sorted(range(len(rows)), key=lambda i: -rows[i]["ms"])
    for i in order:
        r = rows[i]
        ops = ",".join(r.get("ops", []))
        ops = ops if len(ops) <= 60 else ops[:57] + "..."
        print(f"{i:>4} {r['ms']:>9.3f} {100 * r['share']:>5.1f}% {r['grid']:>6}  "
              f"{r['kind']:<13} {ops}")


def _as_list(value) -> list:
    """A model's outputs as a flat list, in torch's pytree order (a tensor; tuples, lists,
    dicts and HF ModelOutputs, nested)."""
    from torch.utils import _pytree

    return _pytree.tree_leaves(value)


def main(argv: list[str] | None = None) -> int:
    return command_main("fusec", run, argv)


def command_main(program: str, run, argv: list[str] | None = None) -> int:
    """A command's entry: `run(argv)`'s status; a FusecError is its one located line (exit
    1), an internal error one line naming it, a traceback only with --debug."""
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        return run(argv)
    except FusecError as exc:
        if debug:
            raise
        print(exc, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if debug:
            raise
        first_line = (str(exc).strip().splitlines() or [""])[0]
        print(f"{program}: internal error: {type(exc).__name__}: {first_line} (rerun with "
              "--debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
