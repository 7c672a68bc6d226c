"""CUDA target: artifact."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import mlir.ir as ir
from fusec.compiler.artifact import shim_object
from fusec.compiler.frontend import read_torch_signature
from fusec.compiler.targets.cuda.device import INDEX_STATUS, CudaCodegenError
from fusec.compiler.targets.cuda.gemm import gemm_table
from fusec.compiler.targets.cuda.program import CudaProgram, generate
from fusec.compiler.targets.cuda.options import CudaOptions
from fusec.runtime.plan import Plan, apply_torch_signature, name_user_outputs

# ---------------------------------------------------------------- model.so


SHIM_CUDA = Path(__file__).resolve().parents[3] / "runtime" / "shim_cuda.c"  # fusec/runtime
SHIM_CUDA_H = SHIM_CUDA.with_suffix(".h")
# How both the shim's object and the generated code are compiled.
C_FLAGS = ("-O2", "-fPIC", "-std=gnu11")


def _c_bytes(data: bytes) -> str:
    rows = []
    for i in range(0, len(data), 24):
        rows.append(",".join(str(b) for b in data[i:i + 24]))
    return ",\n".join(rows)


def _c_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid C string literal for ASCII text


def _c_blob(name: str, data: bytes, blob_dir: Path | None) -> str:
    """A 64-byte aligned constant byte array `name`: inline C bytes, or (with `blob_dir`) the
    bytes written to a file there and pulled in by the assembler's .incbin, which keeps the
    C compiler from parsing megabytes of weights as text."""
    if blob_dir is None:
        return (f"static const unsigned char {name}[{len(data)}] "
                f"__attribute__((aligned(64))) = {{\n{_c_bytes(data)}\n}};")
    path = Path(blob_dir) / f"{name}.bin"
    path.write_bytes(data)
    return (f'__asm__(".section .rodata\\n.balign 64\\n.type {name}, @object\\n{name}:\\n'
            f'.incbin \\"{path}\\"\\n.size {name}, {len(data)}\\n.previous");\n'
            f"extern const unsigned char {name}[{len(data)}];")


def host_code(program: CudaProgram, blob_dir: Path | None = None) -> str:
    """The generated C part of a CUDA `model.so`: tables that runtime/shim_cuda.c runs (it
    includes only runtime/shim_cuda.h; the shim is linked in as an object)."""
    plan = program.plan
    image = program.fatbin if program.fatbin is not None else program.ptx.encode() + b"\0"
    symbols = sorted({k.symbol for k in plan.launches
                      if k.symbol != "__copy__" and k.launch_kind != "gemm"})
    lines = [f'#include "{SHIM_CUDA_H}"', ""]
    lines.append(_c_blob("fusec_image", image, blob_dir))
    lines.append("static const char *const fusec_symbols[] = {"
                 + ", ".join(_c_string(s) for s in symbols) + "};")
    for k, launch in enumerate(plan.launches):
        lines.append(f"static const int fusec_launch{k}_buffers[] = {{"
                     + ", ".join(str(b) for b in launch.buffers) + "};")
        if launch.launch_kind == "gemm":
            lines.append(f"static const long long fusec_launch{k}_gemm[] = {{"
                         + ", ".join(str(v) for v in gemm_table(launch, None)) + "};")
        if launch.maps:
            lines.append(f"static const long long fusec_launch{k}_maps[] = {{"
                         + ", ".join(str(v) for m in launch.maps for v in m) + "};")
    lines.append("static const fusec_cuda_launch fusec_launches[] = {")
    for k, launch in enumerate(plan.launches):
        gemm = "0"
        if launch.launch_kind == "gemm":
            kernel, gemm = -2, f"fusec_launch{k}_gemm"
        else:
            kernel = -1 if launch.symbol == "__copy__" else symbols.index(launch.symbol)
        maps = f"{len(launch.maps)}, fusec_launch{k}_maps" if launch.maps else "0, 0"
        lines.append(f"  {{{kernel}, {launch.grid}, {launch.block}, {launch.shared_bytes}, "
                     f"{len(launch.buffers)}, fusec_launch{k}_buffers, {gemm}, {maps}}},")
    lines.append("};")
    roles = {"input": 0, "output": 1, "temp": 2, "constant": 3}
    for bid, data in program.constants.items():
        lines.append(_c_blob(f"fusec_constant{bid}", data, blob_dir))
    slot = {}
    for role, idlist in (("input", plan.inputs), ("output", plan.outputs)):
        for i, bid in enumerate(idlist):
            slot[bid] = i
    lines.append("static const fusec_cuda_buffer fusec_buffers[] = {")
    for b in plan.buffers:
        data = f"fusec_constant{b.id}" if b.id in program.constants else "0"
        view = -1 if b.view_of is None else b.view_of
        lines.append(f"  {{{roles[b.role]}, {slot.get(b.id, -1)}, {b.nbytes}ULL, {data}, "
                     f"{view}, {b.view_offset}ULL}},")
    lines.append("};")
    metadata = _metadata(plan)
    lines.append(f"static const char fusec_metadata_json[] = {_c_string(json.dumps(metadata))};")
    checks = [str(c) for c in plan.metadata.get("index_checks", [])]
    if f"@{INDEX_STATUS}" not in program.kernels_mlir:
        # Every check's guard was folded away (indices provably in range): no kernel records
        # a failure, the PTX has no status global, the runtime has nothing to read.
        checks = []
    lines.append("static const char *const fusec_index_messages[] = {"
                 + ", ".join(_c_string(c) for c in checks + [""]) + "};")
    lines.append("static const fusec_cuda_program fusec_the_program = {")
    lines.append(f"  fusec_image, sizeof(fusec_image), {int(program.fatbin is not None)},")
    lines.append(f"  fusec_symbols, {len(symbols)},")
    lines.append(f"  fusec_launches, {len(plan.launches)},")
    lines.append(f"  fusec_buffers, {len(plan.buffers)},")
    lines.append(f"  {len(plan.inputs)}, {len(plan.outputs)}, fusec_metadata_json,")
    lines.append(f"  {plan.metadata.get('cublaslt_workspace_bytes', 0)}ULL,")
    lines.append(f"  fusec_index_messages, {len(checks)},")
    lines.append(f"  {int(bool(plan.metadata.get('dependent_launch')))},")
    lines.append("};")
    lines.append("const fusec_cuda_program *fusec_program(void) { return &fusec_the_program; }")
    return "\n".join(lines) + "\n"


def _metadata(plan: Plan) -> dict:
    """The same JSON object as the CPU artifact's `fusec_metadata()` (compiler/artifact.py)."""
    try:
        from fusec.compiler.artifact import artifact_metadata

        return artifact_metadata(plan)
    except Exception:  # noqa: BLE001 - the CPU artifact module may reject cuda-only launches
        by_id = {b.id: b for b in plan.buffers}
        tensor = lambda b: {"name": b.name, "shape": list(b.shape), "dtype": b.dtype}  # noqa
        return {"format": "fusec-artifact", "abi_version": 1, "target": "cuda",
                "inputs": [tensor(by_id[i]) for i in plan.inputs],
                "outputs": [tensor(by_id[i]) for i in plan.outputs],
                "kernels": [{"symbol": k.symbol, "kind": k.kind, "ops": k.ops, "grid": k.grid,
                             "info": k.info} for k in plan.launches],
                "temp_bytes": sum(b.nbytes for b in plan.buffers if b.role == "temp"),
                "plan": plan.to_json_dict()}


EXPORTED = ("fusec_abi_version", "fusec_metadata", "fusec_last_error", "fusec_run",
            "fusec_run_stream", "fusec_num_threads", "fusec_run_graph",
            "fusec_graph_captures_count", "fusec_index_status", "fusec_profile",
            "fusec_profile_enable")


def write_cuda_artifact(program: CudaProgram, path: str | os.PathLike) -> Path:
    """Build `model.so` (links only libc + libdl; libcuda.so.1 is opened at run time): the
    generated code linked with runtime/shim_cuda.c's object from the cache folder
    (`shim_object`), or, where that cannot be kept there, with shim_cuda.c compiled again."""
    path = Path(path)
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    shim = shim_object(cc, source=SHIM_CUDA, flags=C_FLAGS)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "plan_cuda.c"
        src.write_text(host_code(program, Path(tmp)))
        script = Path(tmp) / "exports.map"
        script.write_text("{\n  global: " + " ".join(f"{s};" for s in EXPORTED)
                          + "\n  local: *;\n};\n")
        out = Path(tmp) / "model.so"
        sources = [src, shim] if shim else [SHIM_CUDA, src]
        cmd = [cc, "-shared", *C_FLAGS, *(str(s) for s in sources), "-o", str(out),
               f"-Wl,--version-script={script}", "-ldl", "-lpthread"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise CudaCodegenError(f"{' '.join(cmd)} failed:\n{done.stderr}")
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(out), str(path))
    return path


def options_from(compile_options: Any) -> CudaOptions:
    """The CudaOptions of fusec.compiler.pipeline.CompileOptions (its `cuda`), or of None."""
    return getattr(compile_options, "cuda", None) or CudaOptions()


def build_so(module: ir.Module, compile_options: Any, output: str | os.PathLike,
             index_checks: list[str] = ()) -> dict:
    """The `so` stage for target cuda: fusion-stage module -> model.so; returns its metadata.
    `index_checks`: the messages of the module's index checks (pipeline.index_check_messages)."""
    signature = read_torch_signature(module)
    program = generate(module, options_from(compile_options))
    program.plan.metadata["index_checks"] = list(index_checks)
    name_user_outputs(program.plan)
    apply_torch_signature(program.plan, signature)
    write_cuda_artifact(program, output)
    if getattr(compile_options, "dump_dir", None):
        from fusec.compiler.targets.cuda.dump import write_dump

        write_dump(program, compile_options.dump_dir,
                   getattr(compile_options, "model_name", "model"),
                   program.plan.metadata.get("arch", options_from(compile_options).arch))
    return _metadata(program.plan)


def load_metadata(path: str | os.PathLike) -> dict:
    """The metadata JSON of a CUDA `model.so` (works without a GPU)."""
    lib = ctypes.CDLL(str(path))
    lib.fusec_metadata.restype = ctypes.c_char_p
    return json.loads(lib.fusec_metadata().decode())


