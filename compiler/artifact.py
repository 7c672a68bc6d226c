"""Plan + kernels' object file -> a self-contained `model.so`.

`build_artifact(plan, "kernels.o", "model.so")` checks the plan, generates the host code
(`plan.c`: the buffer table, the temporaries packed into one arena by lifetime, the launches in
order, the metadata JSON), and links

    cc -O2 -shared -fPIC shim.c plan.c kernels.o -o model.so -lpthread -lm

with runtime/shim.c (the fixed entry points and thread pool; its docstring is the C ABI;
compiled once and kept in the cache folder, `shim_object`). The result needs only libc, libm
and libpthread and is loaded by `fusec.runtime.load`.

The plan's states (`Plan.states`: model globals such as torch-mlir's RNG seed) live in static
storage of plan.c, initialised from the global's value: the generated entry point builds the
full input and output tables from the caller's pointers and that storage, and copies each
state's new value back after the run. The caller's ABI lists the other inputs and outputs
only, so the seed persists across calls of one loaded library. The link
writes a temporary file next to the destination and renames it into place, so a failure
leaves the destination as it was.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import fusec
from fusec.runtime.plan import DTYPE_SIZES, Buffer, Plan
from fusec.runtime import ABI_VERSION, ARTIFACT_FORMAT

SHIM_PATH = Path(fusec.runtime.__file__).with_name("shim.c")

# Every temporary starts on a cache line (and on any vector width the kernels may assume).
TEMP_ALIGNMENT = 64

EXPORTED_SYMBOLS = (
    "fusec_abi_version",
    "fusec_metadata",
    "fusec_last_error",
    "fusec_run",
    "fusec_run_stream",
    "fusec_num_threads",
    "fusec_profile",
)
# Names the shim and plan.c use; a kernel may not take them.
_RESERVED_SYMBOLS = set(EXPORTED_SYMBOLS) | {
    "fusec_plan_metadata",
    "fusec_plan_num_inputs",
    "fusec_plan_num_outputs",
    "fusec_plan_input_bytes",
    "fusec_plan_output_bytes",
    "fusec_plan_temp_bytes",
    "fusec_plan_execute",
    "fusec_parallel_for",
    "fusec_set_error",
}
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ROLES = ("input", "output", "temp", "constant")


class PlanError(ValueError):
    """The plan breaks the contract of fusec/runtime/plan.py; the message says where."""


class ArtifactBuildError(RuntimeError):
    """The C compiler or linker failed; carries the command and its output."""

    def __init__(self, message: str, command: Sequence[str] = (), output: str = "") -> None:
        super().__init__(message)
        self.command = list(command)
        self.output = output


@dataclasses.dataclass(frozen=True)
class TempSlot:
    """Where a temporary lives in the arena, and the launches (first, last) that use it."""

    buffer_id: int
    offset: int
    nbytes: int
    first: int
    last: int


# ---------------------------------------------------------------- plan checks


def validate_plan(plan: Plan) -> None:
    """Raise PlanError unless `plan` is one that plan.c can be generated for."""
    if plan.target != "cpu":
        raise PlanError(f"target {plan.target!r}: only 'cpu' artifacts can be built so far")
    by_id = _check_buffers(plan.buffers)
    _check_io(plan, by_id)
    _check_launches(plan, by_id)
    _check_states(plan, by_id)


def _check_buffers(buffers: Sequence[Buffer]) -> dict[int, Buffer]:
    by_id: dict[int, Buffer] = {}
    for b in buffers:
        where = f"buffer {b.id!r} ({b.name!r})"
        if not isinstance(b.id, int) or b.id < 0:
            raise PlanError(f"{where}: id must be a non-negative integer")
        if b.id in by_id:
            raise PlanError(f"{where}: duplicate id")
        if b.role not in _ROLES:
            raise PlanError(f"{where}: role {b.role!r} is not one of {_ROLES}")
        if b.dtype not in DTYPE_SIZES:
            raise PlanError(f"{where}: unknown dtype {b.dtype!r}")
        if not all(isinstance(d, int) and d >= 0 for d in b.shape):
            raise PlanError(f"{where}: shape {b.shape!r} must be non-negative integers")
        if b.role == "constant" and (not isinstance(b.symbol, str) or
                                     not _C_IDENTIFIER.match(b.symbol)):
            raise PlanError(f"{where}: a constant buffer needs its global's symbol, a C "
                            f"identifier (got {b.symbol!r})")
        by_id[b.id] = b
    return by_id


def _check_io(plan: Plan, by_id: dict[int, Buffer]) -> None:
    for kind, ids, roles in (
        ("input", plan.inputs, ("input",)),
        ("output", plan.outputs, ("output", "input")),
    ):
        for i, bid in enumerate(ids):
            if bid not in by_id:
                raise PlanError(f"{kind} {i}: unknown buffer id {bid!r}")
            if by_id[bid].role not in roles:
                raise PlanError(f"{kind} {i}: buffer {bid} has role {by_id[bid].role!r}")
    if len(set(plan.inputs)) != len(plan.inputs):
        raise PlanError(f"inputs {plan.inputs} list a buffer twice")
    used = {bid for launch in plan.launches for bid in launch.buffers}
    for b in by_id.values():
        if b.role == "input" and b.id not in plan.inputs:
            raise PlanError(f"buffer {b.id} ({b.name!r}) has role 'input' but is not an input")
        # An output the plan replaced by an input or another output (a host-side copy) is left
        # unlisted and unused; one that a launch writes must be listed, or it has no storage.
        if b.role == "output" and b.id not in plan.outputs and b.id in used:
            raise PlanError(f"buffer {b.id} ({b.name!r}) is written but is not an output")
    for i, bid in enumerate(plan.outputs):
        b = by_id[bid]
        if b.role == "output" and bid not in used and b.nbytes > 0 and b.copy_of is None:
            raise PlanError(f"output {i} ({b.name!r}) is written by no launch")


def _check_launches(plan: Plan, by_id: dict[int, Buffer]) -> None:
    for k, launch in enumerate(plan.launches):
        where = f"launch {k} ({launch.symbol!r})"
        if not _C_IDENTIFIER.match(launch.symbol) or launch.symbol in _RESERVED_SYMBOLS:
            raise PlanError(f"{where}: symbol is not a usable C identifier")
        if not isinstance(launch.grid, int) or not 0 <= launch.grid < 2**62:
            raise PlanError(f"{where}: grid {launch.grid!r} must be a non-negative integer")
        for bid in launch.buffers:
            if bid not in by_id:
                raise PlanError(f"{where}: unknown buffer id {bid!r}")


def _check_states(plan: Plan, by_id: dict[int, Buffer]) -> None:
    inputs = [s.input for s in plan.states]
    outputs = [s.output for s in plan.states if s.output is not None]
    if len(set(inputs)) != len(inputs) or len(set(outputs)) != len(outputs):
        raise PlanError("two states share an input or an output")
    for s in plan.states:
        where = f"state {s.name!r}"
        if not 0 <= s.input < len(plan.inputs):
            raise PlanError(f"{where}: input position {s.input} is out of range")
        buffer = by_id[plan.inputs[s.input]]
        if s.output is not None:
            if not 0 <= s.output < len(plan.outputs):
                raise PlanError(f"{where}: output position {s.output} is out of range")
            out = by_id[plan.outputs[s.output]]
            if (out.shape, out.dtype) != (buffer.shape, buffer.dtype):
                raise PlanError(f"{where}: its output is {out.dtype}{out.shape}, its input "
                                f"{buffer.dtype}{buffer.shape}")
        try:
            init = bytes.fromhex(s.init)
        except ValueError:
            raise PlanError(f"{where}: init is not hex") from None
        if len(init) != buffer.nbytes:
            raise PlanError(f"{where}: init has {len(init)} bytes, the buffer {buffer.nbytes}")
    for i in plan.scalar_outputs:
        if not 0 <= i < len(plan.outputs) or by_id[plan.outputs[i]].shape != []:
            raise PlanError(f"scalar output {i} is not a 0-d output")


# ---------------------------------------------------------------- temporaries


def _align(n: int) -> int:
    return (n + TEMP_ALIGNMENT - 1) // TEMP_ALIGNMENT * TEMP_ALIGNMENT


def plan_temporaries(plan: Plan) -> tuple[list[TempSlot], int]:
    """Pack the temporaries into one arena: two share bytes only if no launch uses both.

    Launches run one after another, so a temporary is live from the first launch that names it
    to the last. Greedy first-fit, largest first. Returns the slots and the arena size.
    """
    live: dict[int, list[int]] = {}
    for k, launch in enumerate(plan.launches):
        for bid in launch.buffers:
            span = live.setdefault(bid, [k, k])
            span[1] = k
    temps = [b for b in plan.buffers if b.role == "temp" and b.id in live and b.nbytes > 0]
    temps.sort(key=lambda b: (-b.nbytes, b.id))
    slots: list[TempSlot] = []
    for b in temps:
        first, last = live[b.id]
        size = _align(b.nbytes)
        overlapping = sorted(
            (s for s in slots if s.first <= last and first <= s.last), key=lambda s: s.offset
        )
        offset = 0
        for s in overlapping:
            if offset + size <= s.offset:
                break
            offset = max(offset, s.offset + _align(s.nbytes))
        slots.append(TempSlot(b.id, offset, b.nbytes, first, last))
    arena = max((s.offset + _align(s.nbytes) for s in slots), default=0)
    return sorted(slots, key=lambda s: s.buffer_id), arena


# ---------------------------------------------------------------- metadata and plan.c


def _tensor(b: Buffer) -> dict:
    return {"name": b.name, "shape": list(b.shape), "dtype": b.dtype}


def artifact_metadata(plan: Plan) -> dict:
    """The JSON object `fusec_metadata()` returns (see runtime/shim.c)."""
    by_id = {b.id: b for b in plan.buffers}
    outputs = []
    for i in plan.user_outputs():
        entry = _tensor(by_id[plan.outputs[i]])
        if i in plan.scalar_outputs:
            entry["scalar"] = True  # the model returns a Python number here
        outputs.append(entry)
    return {
        "format": ARTIFACT_FORMAT,
        "abi_version": ABI_VERSION,
        "fusec_version": fusec.__version__,
        "target": plan.target,
        "inputs": [_tensor(by_id[plan.inputs[i]]) for i in plan.user_inputs()],
        "outputs": outputs,
        "states": [{**_tensor(by_id[plan.inputs[s.input]]), "name": s.name}
                   for s in plan.states],
        "kernels": [
            {"symbol": k.symbol, "kind": k.kind, "ops": list(k.ops), "grid": k.grid, "info": k.info}
            for k in plan.launches
        ],
        "temp_bytes": plan_temporaries(plan)[1],
        # What each index check of the kernels reports (`{index}`: the bad index).
        "index_checks": list(plan.metadata.get("index_checks", [])),
        # "dict": the model returned a dict; the runtime returns one, keyed by output name.
        "outputs_as": plan.metadata.get("outputs_as", "tuple"),
        # How the model returned its outputs, nested (`frontend.output_tree`); the runtime
        # returns them so.
        "outputs_tree": plan.metadata.get("outputs_tree"),
        # [input, output] positions: the output is the input's new value, written back into
        # the caller's array by the runtime (the model updates that input in place).
        "input_updates": plan.metadata.get("input_updates", []),
        # The LLVM CPU of the kernels (x86-64-v4 needs AVX-512): checked by the runtime.
        "cpu": plan.metadata.get("cpu"),
        "plan": plan.to_json_dict(),
    }


def umasked(mode: int) -> int:
    """`mode` less this process's umask: the mode a plain open() would give a new file
    (mkstemp makes its files 0600, which suits the temporary, not the result)."""
    mask = os.umask(0)
    os.umask(mask)
    return mode & ~mask


def publish(partial: str, path: str) -> None:
    """Put the finished `partial` file at `path` in one step (a reader never sees half a file).

    A `path` that exists and is not a regular file (`-o /dev/null`, a named pipe) is written
    through instead: renaming over it would replace the device with a file.
    """
    import shutil
    import stat

    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        special = False
    if special:
        with open(partial, "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.unlink(partial)
        return
    os.replace(partial, path)


def _c_bytes(data: bytes, per_line: int = 16) -> str:
    """A C initializer for `data` plus a terminating NUL (no string-literal escaping issues)."""
    values = [f"0x{c:02x}" for c in data + b"\0"]
    lines = (", ".join(values[i : i + per_line]) for i in range(0, len(values), per_line))
    return "{\n  " + ",\n  ".join(lines) + "\n}"


def _c_string(text: str) -> str:
    """A C string literal for `text`: UTF-8 bytes, every one outside a plain set as an octal
    escape (no quoting, backslash or trigraph pitfalls)."""
    plain = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;_-()[]<>{}=+")
    return '"' + "".join(chr(b) if b in plain else f"\\{b:03o}" for b in text.encode()) + '"'


def _c_int64_array(values: Sequence[int]) -> str:
    # A C array may not be empty; the count next to it says how many are meaningful.
    return "{" + ", ".join(str(v) for v in (values or [0])) + "}"


def _describe(b: Buffer) -> str:
    shape = "x".join(str(d) for d in b.shape) or "scalar"
    return f"{b.role} {b.name!r} {b.dtype}[{shape}]".replace("*/", "* /")


def generate_host_code(plan: Plan) -> str:
    """The C source of plan.c for `plan` (checked first with validate_plan)."""
    validate_plan(plan)
    by_id = {b.id: b for b in plan.buffers}
    slots, arena_bytes = plan_temporaries(plan)
    try:
        metadata = json.dumps(artifact_metadata(plan), sort_keys=True).encode()
    except (TypeError, ValueError) as e:
        raise PlanError(f"the plan is not JSON-serialisable (launch info?): {e}") from None
    symbols = list(dict.fromkeys(k.symbol for k in plan.launches))
    # The messages of the kernels' index checks (--fusion-guard-indices), by number.
    checks = [str(c) for c in plan.metadata.get("index_checks", [])]
    in_bytes = [by_id[plan.inputs[i]].nbytes for i in plan.user_inputs()]
    out_bytes = [by_id[plan.outputs[i]].nbytes for i in plan.user_outputs()]

    out = [
        "/* Generated by fusec.compiler.artifact from a fusec Plan; do not edit. */",
        "#include <stdint.h>",
        "#include <string.h>",
        "",
        "typedef void (*fusec_kernel_fn)(void **buffers, int64_t tile_begin, int64_t tile_end);",
        "void fusec_parallel_for(fusec_kernel_fn fn, void **buffers, int64_t grid);",
        "",
    ]
    out += [
        f"extern void {s}(void **buffers, int64_t tile_begin, int64_t tile_end);" for s in symbols
    ]
    # The weights the kernels take as arguments: globals of the kernels' object.
    out += [f'extern const unsigned char {b.symbol}[] __attribute__((visibility("hidden")));'
            for b in plan.buffers if b.role == "constant"]
    out += [
        "",
        f"const char fusec_plan_metadata[] = {_c_bytes(metadata)};",
        f"const int fusec_plan_num_inputs = {len(in_bytes)};",
        f"const int64_t fusec_plan_input_bytes[] = {_c_int64_array(in_bytes)};",
        f"const int fusec_plan_num_outputs = {len(out_bytes)};",
        f"const int64_t fusec_plan_output_bytes[] = {_c_int64_array(out_bytes)};",
        f"const int64_t fusec_plan_temp_bytes = {arena_bytes};",
        f"const int fusec_plan_num_checks = {len(checks)};",
        "const char *const fusec_plan_checks[] = {"
        + ", ".join(_c_string(c) for c in (checks or [""])) + "};",
        "",
    ]
    out += _state_storage(plan, by_id)
    if plan.states:
        out += [
            "int fusec_plan_execute(void **user_inputs, void **user_outputs, char *temps, "
            "void *stream) {",
            "  (void)user_inputs; (void)user_outputs; (void)temps; (void)stream;",
        ]
        out += _state_io(plan)
    else:
        out += [
            "int fusec_plan_execute(void **inputs, void **outputs, char *temps, void *stream) {",
            "  (void)inputs; (void)outputs; (void)temps; (void)stream;",
        ]
    out += _buffer_table(plan, by_id, slots)
    for k, launch in enumerate(plan.launches):
        args = ", ".join(f"b{bid}" for bid in launch.buffers) or "0"
        out.append(f"  /* launch {k}: {launch.kind}, grid {launch.grid} */")
        out.append(
            f"  {{ void *args[] = {{{args}}}; "
            f"fusec_parallel_for({launch.symbol}, args, {launch.grid}); }}"
        )
    out += _output_copies(plan, by_id)
    for k, state in enumerate(plan.states):
        if state.output is not None:
            nbytes = by_id[plan.inputs[state.input]].nbytes
            out.append(f"  memcpy(fusec_state{k}, fusec_state{k}_next, {nbytes}); "
                       "/* the state's value for the next run */")
    out += ["  return 0;", "}", ""]
    return "\n".join(out)


def _state_storage(plan: Plan, by_id: dict[int, Buffer]) -> list[str]:
    """Static storage of each state (initialised) and of its next value."""
    lines = []
    for k, state in enumerate(plan.states):
        nbytes = max(1, by_id[plan.inputs[state.input]].nbytes)
        init = bytes.fromhex(state.init)
        values = ", ".join(f"0x{c:02x}" for c in init) or "0"
        lines.append(f"static unsigned char fusec_state{k}[{nbytes}] "
                     f"__attribute__((aligned({TEMP_ALIGNMENT}))) = {{{values}}};")
        if state.output is not None:
            lines.append(f"static unsigned char fusec_state{k}_next[{nbytes}] "
                         f"__attribute__((aligned({TEMP_ALIGNMENT})));")
    return lines + ([""] if lines else [])


def _state_io(plan: Plan) -> list[str]:
    """The full input and output tables: the caller's pointers, and the states' storage."""
    inputs = [f"user_inputs[{i}]" for i in range(len(plan.user_inputs()))]
    outputs = [f"user_outputs[{i}]" for i in range(len(plan.user_outputs()))]
    for k, state in sorted(enumerate(plan.states), key=lambda x: x[1].input):
        inputs.insert(state.input, f"fusec_state{k}")
    for k, state in sorted(enumerate(plan.states), key=lambda x: x[1].output or 0):
        if state.output is not None:
            outputs.insert(state.output, f"fusec_state{k}_next")
    return [
        f"  void *inputs[] = {{{', '.join(inputs) or '0'}}};",
        f"  void *outputs[] = {{{', '.join(outputs) or '0'}}};",
        "  (void)inputs; (void)outputs;",
    ]


def _buffer_table(plan: Plan, by_id: dict[int, Buffer], slots: list[TempSlot]) -> list[str]:
    """`void *b<id> = ...;` for every buffer a launch names."""
    lines = []
    used = {bid for launch in plan.launches for bid in launch.buffers}
    offsets = {s.buffer_id: s.offset for s in slots}
    first_output: dict[int, int] = {}
    for i, bid in enumerate(plan.outputs):
        first_output.setdefault(bid, i)
    for b in plan.buffers:
        if b.id not in used:
            continue
        if b.role == "input":
            where = f"inputs[{plan.inputs.index(b.id)}]"
        elif b.role == "output":
            where = f"outputs[{first_output[b.id]}]"
        elif b.role == "constant":
            where = f"(void *){b.symbol}"
        elif b.id in offsets:
            where = f"temps + {offsets[b.id]}"
        else:  # an empty temporary: no storage, never dereferenced
            where = "0"
        lines.append(f"  void *b{b.id} = {where}; /* {_describe(b)} */")
    return lines


def _output_copies(plan: Plan, by_id: dict[int, Buffer]) -> list[str]:
    """Outputs that are inputs, or that repeat another output, are copied at the end (after
    every launch, so the output copied from may come later in the list)."""
    lines = []
    first_output: dict[int, int] = {}
    for i, bid in enumerate(plan.outputs):
        b = by_id[bid]
        if b.nbytes and b.copy_of is None and b.role != "input":
            first_output.setdefault(bid, i)
    for i, bid in enumerate(plan.outputs):
        b = by_id[bid]
        if b.nbytes == 0:
            continue
        if b.copy_of is not None:
            source = by_id[b.copy_of]
            if source.nbytes != b.nbytes:
                raise PlanError(f"output {i} copies buffer {source.id}, which has "
                                f"{source.nbytes} bytes, not {b.nbytes}")
            if b.copy_of in plan.inputs:
                src = f"inputs[{plan.inputs.index(b.copy_of)}]"
            elif b.copy_of in first_output:
                src = f"outputs[{first_output[b.copy_of]}]"
            else:
                raise PlanError(f"output {i} copies buffer {source.id}, which is neither an "
                                "input nor an output a kernel writes")
        elif b.role == "input":
            src = f"inputs[{plan.inputs.index(bid)}]"
        elif first_output[bid] != i:
            src = f"outputs[{first_output[bid]}]"
        else:
            continue
        lines.append(f"  memcpy(outputs[{i}], {src}, {b.nbytes}); /* {_describe(b)} */")
    return lines


def _version_script() -> str:
    names = "".join(f" {s};" for s in EXPORTED_SYMBOLS)
    return f"{{\n  global:{names}\n  local: *;\n}};\n"


# ---------------------------------------------------------------- build


def default_cc() -> str:
    """The C compiler: $CC if set, else `cc`."""
    return os.environ.get("CC") or "cc"


def _c_flags(extra_flags: Sequence[str] = ()) -> list[str]:
    """How the shim and plan.c are compiled."""
    return ["-O2", "-std=gnu11", "-fPIC", "-fvisibility=hidden", "-DFUSEC_TARGET_CPU",
            f"-DFUSEC_EXPECTED_ABI_VERSION={ABI_VERSION}", *extra_flags]


def link_command(
    sources: Sequence[str | os.PathLike],
    objects: Sequence[str | os.PathLike],
    output: str | os.PathLike,
    version_script: str | os.PathLike,
    cc: str | None = None,
    extra_flags: Sequence[str] = (),
) -> list[str]:
    """The `cc` command line that links model.so."""
    return [
        cc or default_cc(),
        "-shared",
        *_c_flags(extra_flags),
        *(os.fspath(s) for s in sources),
        *(os.fspath(o) for o in objects),
        "-o",
        os.fspath(output),
        f"-Wl,--version-script={os.fspath(version_script)}",
        # A kernel symbol missing from the object is a build error, not a dlopen error later.
        "-Wl,--no-undefined",
        "-lpthread",
        "-lm",
    ]


def shim_object(cc: str | None = None, extra_flags: Sequence[str] = (), *,
                source: Path = SHIM_PATH, flags: Sequence[str] | None = None) -> Path | None:
    """A runtime shim (default runtime/shim.c, compiled with `_c_flags(extra_flags)`; `flags`
    replaces those, as for the CUDA target's runtime/shim_cuda.c) compiled once per shim text,
    C compiler and flags, and kept in the cache folder (`<cache>/shim/<key>.o`): every link
    reuses it instead of compiling the shim again (0.15-0.2 s of each compile). The key holds
    the runtime's headers too (shim_cuda.h is the layout of the tables the generated code
    defines: a stale object would read them wrong). None where it cannot be built or kept
    there (the link then compiles the shim itself, and says why if that fails)."""
    import hashlib

    from fusec.runtime.specs import cache_dir

    cmd = [cc or default_cc(), *(_c_flags(extra_flags) if flags is None else flags), "-c",
           os.fspath(source)]
    texts = [p.read_text() for p in [source, *sorted(source.parent.glob("*.h"))]]
    key = hashlib.sha256("\0".join([*texts, *cmd]).encode()).hexdigest()
    folder = Path(cache_dir()) / "shim"
    path = folder / f"{key[:24]}.o"
    if path.is_file():
        return path
    partial = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(prefix=".shim-", suffix=".o", dir=folder)
        os.close(fd)
        done = subprocess.run([*cmd, "-o", partial], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            return None
        os.replace(partial, path)  # another process's copy of the same bytes is as good
        return path
    except OSError:
        return None
    finally:
        if partial and os.path.exists(partial):
            os.unlink(partial)


def build_artifact(
    plan: Plan,
    object_path: str | os.PathLike | Sequence[str | os.PathLike],
    out_path: str | os.PathLike,
    *,
    cc: str | None = None,
    work_dir: str | os.PathLike | None = None,
    extra_flags: Sequence[str] = (),
) -> dict:
    """Build `out_path` (model.so) from `plan` and the kernels in `object_path` (one or several
    object files). Returns the artifact's metadata: the JSON object `fusec_metadata()` returns.

    `work_dir`: where plan.c and the version script are written (and kept, for debugging);
    default a temporary folder removed afterwards. Raises PlanError for a malformed plan and
    ArtifactBuildError when the compiler fails; then `out_path` is untouched.
    """
    objects = [object_path] if isinstance(object_path, (str, os.PathLike)) else list(object_path)
    for obj in objects:
        if not Path(obj).is_file():
            raise ArtifactBuildError(f"kernel object file {os.fspath(obj)!r} does not exist")
    host_code = generate_host_code(plan)  # validates the plan
    metadata = artifact_metadata(plan)
    out = Path(out_path).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    if work_dir is not None:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        _link(host_code, objects, out, Path(work_dir), cc, extra_flags)
    else:
        with tempfile.TemporaryDirectory(prefix="fusec-artifact-") as tmp:
            _link(host_code, objects, out, Path(tmp), cc, extra_flags)
    return metadata


def _link(
    host_code: str,
    objects: list,
    out: Path,
    work: Path,
    cc: str | None,
    extra_flags: Sequence[str],
) -> None:
    plan_c = work / "plan.c"
    plan_c.write_text(host_code)
    script = work / "exports.map"
    script.write_text(_version_script())
    fd, partial = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    os.close(fd)
    try:
        shim = shim_object(cc, extra_flags)
        sources = [plan_c] if shim else [SHIM_PATH, plan_c]
        cmd = link_command(sources, ([shim] if shim else []) + objects, partial, script, cc,
                           extra_flags)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as e:
            raise ArtifactBuildError(f"cannot run the C compiler {cmd[0]!r}: {e}", cmd) from e
        if proc.returncode != 0:
            raise ArtifactBuildError(
                f"building {out} failed (exit {proc.returncode}):\n  {' '.join(cmd)}\n"
                f"{proc.stderr.strip()}",
                cmd,
                proc.stderr,
            )
        os.chmod(partial, umasked(0o777))  # the mode a linker's output has
        publish(partial, out)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
