"""fusec.runtime on artifacts built from hand-written C kernels (no codegen involved).

The kernels implement the plan.py ABI `void k(void **buffers, int64_t tile_begin, int64_t
tile_end)`; the plans are written by hand; compiler/artifact.py links them into model.so.
"""

import ctypes
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import fusec.runtime as rt
import numpy as np
import pytest
from fusec.compiler.artifact import build_artifact
from fusec.runtime.plan import Buffer, Launch, Plan

R, C, TILE = 37, 53, 16  # odd sizes: the last tile is partial
N = R * C
GRID = (N + TILE - 1) // TILE
G = 1000  # tiles of the thread-coverage model

KERNELS_C = f"""
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#define R {R}
#define C {C}
#define N {N}
#define TILE {TILE}

/* t = x + y over N elements, TILE per tile */
void k_add(void **b, int64_t t0, int64_t t1) {{
  const float *x = b[0], *y = b[1]; float *t = b[2];
  for (int64_t i = t0 * TILE; i < t1 * TILE && i < N; ++i) t[i] = x[i] + y[i];
}}
/* s[r] = sum_c t[r, c]; one row per tile */
void k_rowsum(void **b, int64_t t0, int64_t t1) {{
  const float *t = b[0]; float *s = b[1];
  for (int64_t r = t0; r < t1; ++r) {{
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) acc += t[r * C + c];
    s[r] = acc;
  }}
}}
/* u = t * t; one row per tile */
void k_square(void **b, int64_t t0, int64_t t1) {{
  const float *t = b[0]; float *u = b[1];
  for (int64_t i = t0 * C; i < t1 * C; ++i) u[i] = t[i] * t[i];
}}

/* Thread coverage: tmp = x; tmp += 1 (not idempotent: a tile run twice shows); o = tmp. */
static _Atomic int64_t next_thread_id = 1;
static __thread int64_t thread_id;
void k_copy(void **b, int64_t t0, int64_t t1) {{
  memcpy((float *)b[1] + t0, (const float *)b[0] + t0, (size_t)(t1 - t0) * sizeof(float));
}}
void k_increment(void **b, int64_t t0, int64_t t1) {{
  float *tmp = b[0]; int64_t *who = b[1];
  if (thread_id == 0) thread_id = atomic_fetch_add(&next_thread_id, 1);
  for (int64_t t = t0; t < t1; ++t) {{
    struct timespec pause = {{0, 20000}};  /* slow tiles: every thread gets some */
    nanosleep(&pause, 0);
    tmp[t] += 1.0f;
    who[t] = thread_id;
  }}
}}

/* bfloat16 bits: g = 2 * h (exact in bfloat16); 64 elements, one tile. */
void k_bf16_double(void **b, int64_t t0, int64_t t1) {{
  const uint16_t *h = b[0]; uint16_t *g = b[1];
  (void)t0; (void)t1;
  for (int i = 0; i < 64; ++i) {{
    uint32_t bits = (uint32_t)h[i] << 16; float f; memcpy(&f, &bits, 4);
    f *= 2.0f; memcpy(&bits, &f, 4); g[i] = (uint16_t)(bits >> 16);
  }}
}}
"""


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


def compile_object(source: str, path: Path) -> Path:
    path.with_suffix(".c").write_text(source)
    subprocess.run(
        ["cc", "-O2", "-fPIC", "-c", str(path.with_suffix(".c")), "-o", str(path)], check=True
    )
    return path


def compile_shared(source: str, path: Path) -> Path:
    path.with_suffix(".c").write_text(source)
    subprocess.run(
        ["cc", "-shared", "-fPIC", str(path.with_suffix(".c")), "-o", str(path)], check=True
    )
    return path


def build(plan: Plan, kernels: Path, path: Path) -> Path:
    """Build model.so at `path`; returns `path`."""
    build_artifact(plan, kernels, path)
    return path


def main_plan(outputs=("s", "u")) -> Plan:
    """x, y -> t = x + y (temp) -> s = rowsum(t), u = t * t."""
    buffers = [
        Buffer(0, "input", "x", [R, C], "float32"),
        Buffer(1, "input", "y", [R, C], "float32"),
        Buffer(2, "temp", "t", [R, C], "float32"),
    ]
    launches = [Launch("k_add", [0, 1, 2], GRID, "vertical", ["arith.addf"], {"tile": TILE})]
    out_ids = []
    if "s" in outputs:
        buffers.append(Buffer(3, "output", "s", [R], "float32"))
        launches.append(Launch("k_rowsum", [2, 3], R, "reduction", ["arith.addf"]))
        out_ids.append(3)
    if "u" in outputs:
        buffers.append(Buffer(4, "output", "u", [R, C], "float32"))
        launches.append(Launch("k_square", [2, 4], R, "single", ["arith.mulf"]))
        out_ids.append(4)
    return Plan("cpu", buffers, launches, inputs=[0, 1], outputs=out_ids)


def tiles_plan() -> Plan:
    return Plan(
        "cpu",
        [
            Buffer(0, "input", "x", [G], "float32"),
            Buffer(1, "temp", "tmp", [G], "float32"),
            Buffer(2, "output", "o", [G], "float32"),
            Buffer(3, "output", "who", [G], "int64"),
        ],
        [
            Launch("k_copy", [0, 1], G),
            Launch("k_increment", [1, 3], G),
            Launch("k_copy", [1, 2], G),
        ],
        inputs=[0],
        outputs=[2, 3],
    )


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> Path:
    return compile_object(KERNELS_C, tmp_path_factory.mktemp("kernels") / "kernels.o")


@pytest.fixture(scope="module")
def model_path(kernels, tmp_path_factory) -> Path:
    return build(main_plan(), kernels, tmp_path_factory.mktemp("model") / "model.so")


@pytest.fixture(scope="module")
def tiles_path(kernels, tmp_path_factory) -> Path:
    return build(tiles_plan(), kernels, tmp_path_factory.mktemp("tiles") / "tiles.so")


def random_inputs(seed=None):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((R, C)).astype(np.float32),
        rng.standard_normal((R, C)).astype(np.float32),
    )


def reference(x, y):
    t = x.astype(np.float64) + y.astype(np.float64)
    return t.sum(axis=1), t * t


def run_python(code: str, env_extra: dict | None = None) -> dict:
    """Run `code` in a fresh interpreter; it prints one JSON line, returned parsed."""
    env = {k: v for k, v in os.environ.items() if k != "FUSEC_NUM_THREADS"}
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- running


def test_two_outputs_match_float64(model_path):
    m = rt.load(model_path)
    x, y = random_inputs()
    s, u = m(x, y)
    s_ref, u_ref = reference(x, y)
    assert s.dtype == np.float32 and s.shape == (R,)
    assert u.dtype == np.float32 and u.shape == (R, C)
    assert rel_err(s, s_ref) < 1e-5
    assert rel_err(u, u_ref) < 1e-6
    # Fresh data again: temporaries are reused across calls.
    x, y = random_inputs()
    s, u = m(x, y)
    assert rel_err(s, reference(x, y)[0]) < 1e-5


def test_signature_kernels_metadata(model_path):
    m = rt.load(model_path)
    assert [str(t) for t in m.signature.inputs] == [
        f"x: float32[{R}, {C}]",
        f"y: float32[{R}, {C}]",
    ]
    assert m.signature.outputs == (
        rt.TensorSpec("s", (R,), "float32"),
        rt.TensorSpec("u", (R, C), "float32"),
    )
    assert [k["symbol"] for k in m.kernels] == ["k_add", "k_rowsum", "k_square"]
    assert m.kernels[0] == {
        "symbol": "k_add",
        "kind": "vertical",
        "ops": ["arith.addf"],
        "grid": GRID,
        "info": {"tile": TILE},
    }
    meta = m.metadata
    assert meta["abi_version"] == rt.ABI_VERSION and meta["target"] == "cpu"
    assert meta["temp_bytes"] == 4 * N + (-4 * N) % 64
    meta["kernels"].clear()  # a copy: the module's view is unchanged
    assert len(m.kernels) == 3
    assert "3 kernel(s)" in repr(m)


def test_single_output_is_an_array(kernels, tmp_path):
    m = rt.load(build(main_plan(outputs=("s",)), kernels, tmp_path / "one.so"))
    x, y = random_inputs()
    s = m(x, y)
    assert isinstance(s, np.ndarray)
    assert rel_err(s, reference(x, y)[0]) < 1e-5


def test_non_contiguous_inputs_are_copied(model_path):
    m = rt.load(model_path)
    x, y = random_inputs()
    xt = np.asfortranarray(x)  # same values, column-major
    strided = np.repeat(y, 2, axis=1)[:, ::2]  # same values, stride 2
    assert not xt.flags.c_contiguous and not strided.flags.c_contiguous
    s, u = m(xt, strided)
    s_ref, u_ref = reference(x, y)
    assert rel_err(s, s_ref) < 1e-5 and rel_err(u, u_ref) < 1e-6


def test_array_likes_are_accepted(model_path):
    m = rt.load(model_path)
    x, y = random_inputs()
    s, _ = m(memoryview(x), memoryview(y))  # lists would be float64: refused
    assert rel_err(s, reference(x, y)[0]) < 1e-5


def test_out_arrays(model_path):
    m = rt.load(model_path)
    x, y = random_inputs()
    s_out = np.empty(R, np.float32)
    u_out = np.empty((R, C), np.float32)
    s, u = m(x, y, out=(s_out, u_out))
    assert s is s_out and u is u_out
    s_ref, u_ref = reference(x, y)
    assert rel_err(s_out, s_ref) < 1e-5 and rel_err(u_out, u_ref) < 1e-6


def test_out_errors(model_path):
    m = rt.load(model_path)
    x, y = random_inputs()
    with pytest.raises(ValueError, match=r"out\[0\] \('s'\): expected shape \(37,\), got \(36,\)"):
        m(x, y, out=(np.empty(R - 1, np.float32), np.empty((R, C), np.float32)))
    with pytest.raises(ValueError, match="2 outputs, out= gave 1"):
        m(x, y, out=np.empty(R, np.float32))
    with pytest.raises(ValueError, match=r"out\[1\] \('u'\): overlaps input 0"):
        m(x, y, out=(np.empty(R, np.float32), x))
    with pytest.raises(ValueError, match=r"out\[1\] \('u'\): must be C-contiguous"):
        m(x, y, out=(np.empty(R, np.float32), np.empty((C, R), np.float32).T))


def test_input_errors_name_the_input(model_path):
    m = rt.load(model_path)
    x, y = random_inputs()
    with pytest.raises(ValueError,
                       match=r"the compiled model takes 2 inputs \(x, y\), got 1 \(artifact /"):
        m(x)
    with pytest.raises(ValueError, match=r"takes 2 inputs \(x, y\), got 3"):
        m(x, y, y)
    with pytest.raises(ValueError, match=r"input 0 \('x'\): expected dtype float32, got float64"):
        m(x.astype(np.float64), y)
    with pytest.raises(
        ValueError, match=r"input 1 \('y'\): expected shape \(37, 53\), got \(37, 52\)"
    ):
        m(x, y[:, :-1])
    with pytest.raises(ValueError, match=r"input 1 \('y'\): expected dtype float32, got int64"):
        m(x, [[1] * C] * R)


def test_run_pointers(model_path):
    m = rt.load(model_path)
    x, y = random_inputs()
    s, u = np.empty(R, np.float32), np.empty((R, C), np.float32)
    m.run_pointers([x.ctypes.data, y.ctypes.data], [s.ctypes.data, u.ctypes.data])
    s_ref, u_ref = reference(x, y)
    assert rel_err(s, s_ref) < 1e-5 and rel_err(u, u_ref) < 1e-6
    with pytest.raises(ValueError, match="takes 2 input and 2 output pointers, got 1 and 2"):
        m.run_pointers([x.ctypes.data], [s.ctypes.data, u.ctypes.data])
    with pytest.raises(RuntimeError, match="stream must be NULL"):
        m.run_pointers([x.ctypes.data, y.ctypes.data], [s.ctypes.data, u.ctypes.data], stream=1)


def test_concurrent_calls_are_serialised(model_path):
    m = rt.load(model_path)
    errors = []

    def worker(seed):
        for i in range(20):
            x, y = random_inputs(seed * 100 + i)
            s, u = m(x, y)
            s_ref, u_ref = reference(x, y)
            errors.append(max(rel_err(s, s_ref), rel_err(u, u_ref)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 60 and max(errors) < 1e-5


def test_bfloat16_as_uint16_bits(kernels, tmp_path):
    plan = Plan(
        "cpu",
        [Buffer(0, "input", "h", [64], "bfloat16"), Buffer(1, "output", "g", [64], "bfloat16")],
        [Launch("k_bf16_double", [0, 1], 1)],
        inputs=[0],
        outputs=[1],
    )
    m = rt.load(build(plan, kernels, tmp_path / "bf16.so"))
    rng = np.random.default_rng()
    f = rng.standard_normal(64).astype(np.float32)
    bits = (f.view(np.uint32) >> 16).astype(np.uint16)  # truncate to bfloat16
    g = m(bits)
    widened = (g.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    ref = 2.0 * (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    assert rel_err(widened, ref) == 0.0
    assert g.dtype == m.signature.outputs[0].numpy_dtype
    with pytest.raises(ValueError, match=r"input 0 \('h'\): expected dtype bfloat16"):
        m(f)


# ---------------------------------------------------------------- threads


def test_every_tile_runs_once_on_three_threads(tiles_path):
    result = run_python(
        f"""
        import json, numpy as np, fusec.runtime as rt
        m = rt.load({str(tiles_path)!r})
        x = np.random.default_rng().standard_normal({G}).astype(np.float32)
        o, who = m(x)
        print(json.dumps({{"threads": m.num_threads,
                           "exact": bool(np.array_equal(o, x + np.float32(1))),
                           "wrong_tiles": int(np.count_nonzero(o != x + np.float32(1))),
                           "owners": sorted(set(who.tolist()))}}))
        """,
        {"FUSEC_NUM_THREADS": "3"},
    )
    assert result["threads"] == 3
    assert result["wrong_tiles"] == 0 and result["exact"]
    assert result["owners"] == [1, 2, 3]  # each of the 3 threads ran tiles, none else did


def test_default_thread_count_is_the_available_cores(tiles_path):
    result = run_python(
        f"""
        import json, fusec.runtime as rt
        print(json.dumps({{"threads": rt.load({str(tiles_path)!r}).num_threads}}))
        """
    )
    assert result["threads"] == min(os.cpu_count(), len(os.sched_getaffinity(0)))


def test_invalid_thread_count_is_a_runtime_error(model_path):
    result = run_python(
        f"""
        import json, numpy as np, fusec.runtime as rt
        m = rt.load({str(model_path)!r})
        x = np.ones(({R}, {C}), np.float32)
        try:
            m(x, x)
            message = None
        except RuntimeError as e:
            message = str(e)
        print(json.dumps({{"message": message}}))
        """,
        {"FUSEC_NUM_THREADS": "zero"},
    )
    assert result["message"] is not None
    assert "FUSEC_NUM_THREADS='zero' is not an integer" in result["message"]
    assert str(model_path) in result["message"]


def test_runs_after_fork(tiles_path):
    result = run_python(
        f"""
        import json, os, numpy as np, fusec.runtime as rt
        m = rt.load({str(tiles_path)!r})
        x = np.arange({G}, dtype=np.float32)
        first = bool(np.array_equal(m(x)[0], x + 1))  # starts the pool in the parent
        pid = os.fork()
        if pid == 0:
            o, who = m(x)
            os._exit(0 if np.array_equal(o, x + 1) else 3)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({{"first": first, "child": os.waitstatus_to_exitcode(status)}}))
        """,
        {"FUSEC_NUM_THREADS": "3"},
    )
    assert result == {"first": True, "child": 0}


def test_runtime_imports_no_mlir_and_no_compiler(model_path):
    result = run_python(
        f"""
        import json, sys, numpy as np
        import fusec.runtime as rt
        m = rt.load({str(model_path)!r})
        x = np.random.default_rng().standard_normal(({R}, {C})).astype(np.float32)
        s, u = m(x, x)
        heavy = sorted(k for k in sys.modules
                       if k.split(".")[0] in ("mlir", "torch", "torch_mlir")
                       or k.startswith(("fusec.compiler", "fusec.passes", "fusec.dialects")))
        print(json.dumps({{"heavy": heavy, "ok": bool(np.isfinite(s).all()),
                           "mlir": "mlir" in sys.modules}}))
        """
    )
    assert result == {"heavy": [], "ok": True, "mlir": False}


# ---------------------------------------------------------------- the C ABI directly


def test_c_abi_errors(model_path):
    lib = ctypes.CDLL(str(model_path))
    lib.fusec_last_error.restype = ctypes.c_char_p
    lib.fusec_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.fusec_run_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    assert lib.fusec_abi_version() == rt.ABI_VERSION
    assert lib.fusec_run(None, None) == 1
    assert b"inputs is NULL" in lib.fusec_last_error()
    x, y = random_inputs()
    ins = (ctypes.c_void_p * 2)(x.ctypes.data, None)
    assert lib.fusec_run(ins, None) == 1
    assert lib.fusec_last_error() == b"inputs[1] is NULL"
    s, u = np.empty(R, np.float32), np.empty((R, C), np.float32)
    ins = (ctypes.c_void_p * 2)(x.ctypes.data, y.ctypes.data)
    outs = (ctypes.c_void_p * 2)(s.ctypes.data, u.ctypes.data)
    assert lib.fusec_run_stream(ins, outs, 1) == 1
    assert b"stream must be NULL" in lib.fusec_last_error()
    assert lib.fusec_run_stream(ins, outs, None) == 0
    assert lib.fusec_last_error() == b""
    assert rel_err(s, reference(x, y)[0]) < 1e-5


# ---------------------------------------------------------------- loading


def test_load_twice(model_path):
    a, b = rt.load(model_path), rt.load(str(model_path))
    x, y = random_inputs()
    assert rel_err(a(x, y)[0], reference(x, y)[0]) < 1e-5
    assert rel_err(b(x, y)[1], reference(x, y)[1]) < 1e-6


def test_rebuilt_file_is_reloaded(kernels, tmp_path):
    path = tmp_path / "model.so"
    first = rt.load(build(main_plan(outputs=("s",)), kernels, path))
    x, y = random_inputs()
    assert first(x, y).shape == (R,)
    second = rt.load(build(main_plan(outputs=("u",)), kernels, path))
    assert [o.name for o in second.signature.outputs] == ["u"]
    assert rel_err(second(x, y), reference(x, y)[1]) < 1e-6
    assert rel_err(first(x, y), reference(x, y)[0]) < 1e-5  # the old one still runs


def test_missing_file(tmp_path):
    with pytest.raises(rt.ArtifactError, match="no such file") as e:
        rt.load(tmp_path / "absent.so")
    assert e.value.path == str(tmp_path / "absent.so")


def test_directory(tmp_path):
    with pytest.raises(rt.ArtifactError, match="not a regular file"):
        rt.load(tmp_path)


def test_other_machine(model_path, tmp_path):
    data = bytearray(model_path.read_bytes())
    data[18:20] = (183 if data[18] != 183 else 62).to_bytes(2, "little")  # e_machine
    path = tmp_path / "foreign.so"
    path.write_bytes(bytes(data))
    with pytest.raises(rt.ArtifactError, match="built for ELF machine"):
        rt.load(path)


def test_not_an_elf_file(tmp_path):
    path = tmp_path / "model.so"
    path.write_text("not a library\n")
    with pytest.raises(rt.ArtifactError, match=r"model\.so: not a shared library"):
        rt.load(path)


@pytest.mark.parametrize("fraction", [0.02, 0.5, 0.98])
def test_truncated_artifact(model_path, tmp_path, fraction):
    data = model_path.read_bytes()
    path = tmp_path / "truncated.so"
    path.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(rt.ArtifactError, match="truncated") as e:
        rt.load(path)
    assert str(path) in str(e.value)


def test_corrupt_metadata(model_path, tmp_path):
    data = model_path.read_bytes()
    key = b'{"abi_version": 1,'  # the start of the embedded metadata JSON
    assert data.count(key) == 1
    path = tmp_path / "corrupt.so"
    path.write_bytes(data.replace(key, b'{"abi_version"\xff 1,'))
    with pytest.raises(rt.ArtifactError, match="corrupt metadata"):
        rt.load(path)


def test_not_a_fusec_library(tmp_path):
    lib = compile_shared("int answer(void) { return 42; }\n", tmp_path / "libanswer.so")
    with pytest.raises(rt.ArtifactError, match="not a fusec artifact"):
        rt.load(lib)


def test_libm_is_not_a_fusec_artifact():
    candidates = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib/aarch64-linux-gnu/libm.so.6",
        "/usr/lib64/libm.so.6",
        "/lib64/libm.so.6",
    ]
    libm = next((p for p in candidates if os.path.exists(p)), None)
    if libm is None:
        pytest.skip("no libm.so.6 at a known path")
    with pytest.raises(rt.ArtifactError, match="not a fusec artifact") as e:
        rt.load(libm)
    assert e.value.path == libm


FAKE_ARTIFACT_C = """
int fusec_abi_version(void) {{ return {abi}; }}
const char *fusec_metadata(void) {{ return "{meta}"; }}
"""


def _fake(tmp_path, name, abi, meta):
    text = json.dumps(meta).replace('"', '\\"')
    return compile_shared(FAKE_ARTIFACT_C.format(abi=abi, meta=text), tmp_path / name)


def test_other_abi_version(tmp_path):
    path = _fake(tmp_path, "abi.so", 999, {"format": "fusec-artifact", "abi_version": 999})
    with pytest.raises(rt.ArtifactError, match="ABI version 999; this runtime runs 1"):
        rt.load(path)


def test_other_target(tmp_path):
    meta = {
        "format": "fusec-artifact",
        "abi_version": rt.ABI_VERSION,
        "target": "rocm",
        "inputs": [],
        "outputs": [],
        "kernels": [],
    }
    path = _fake(tmp_path, "rocm.so", rt.ABI_VERSION, meta)
    with pytest.raises(
        rt.ArtifactError, match=r"target 'rocm'; this runtime runs \['cpu', 'cuda'\]"
    ):
        rt.load(path)


FAKE_CUDA_C = """
#include <stddef.h>
int fusec_abi_version(void) {{ return {abi}; }}
const char *fusec_metadata(void) {{ return "{meta}"; }}
static const char *message = "";
const char *fusec_last_error(void) {{ return message; }}
int fusec_num_threads(void) {{ return 1; }}
int fusec_run_stream(void **in, void **out, void *stream) {{
  (void)in; (void)out; (void)stream;
  message = "CUDA driver not found";
  return 2;
}}
int fusec_run(void **in, void **out) {{ return fusec_run_stream(in, out, NULL); }}
"""


def test_cuda_artifact_runs_only_on_pointers(tmp_path):
    meta = {
        "format": "fusec-artifact",
        "abi_version": rt.ABI_VERSION,
        "target": "cuda",
        "inputs": [{"name": "x", "shape": [4], "dtype": "float32"}],
        "outputs": [{"name": "y", "shape": [4], "dtype": "float32"}],
        "kernels": [],
    }
    text = json.dumps(meta).replace('"', '\\"')
    m = rt.load(
        compile_shared(FAKE_CUDA_C.format(abi=rt.ABI_VERSION, meta=text), tmp_path / "c.so")
    )
    assert m.target == "cuda" and m.signature.inputs[0].shape == (4,)
    # Module.__call__ copies numpy arrays to the GPU: here there is no driver to do it.
    with pytest.raises(RuntimeError, match="libcuda.so.1"):
        m(np.ones(4, np.float32))
    with pytest.raises(RuntimeError, match=r"fusec_run_stream failed \(status 2\): CUDA driver"):
        m.run_pointers([0x1000], [0x2000], stream=None)


def test_missing_entry_point(tmp_path):
    meta = {
        "format": "fusec-artifact",
        "abi_version": rt.ABI_VERSION,
        "target": "cpu",
        "inputs": [],
        "outputs": [],
        "kernels": [],
    }
    path = _fake(tmp_path, "partial.so", rt.ABI_VERSION, meta)  # no fusec_run
    with pytest.raises(rt.ArtifactError, match=r"not a fusec artifact \(no fusec_run\)"):
        rt.load(path)


def test_not_fusec_metadata(tmp_path):
    path = _fake(tmp_path, "other.so", rt.ABI_VERSION, {"format": "something-else"})
    with pytest.raises(rt.ArtifactError, match="not of format 'fusec-artifact'"):
        rt.load(path)


def test_public_names():
    assert set(rt.__all__) == {
        "ABI_VERSION",
        "ARTIFACT_FORMAT",
        "SUPPORTED_TARGETS",
        "HOST_TARGETS",
        "ArtifactError",
        "Module",
        "Signature",
        "TensorSpec",
        "load",
    }
    assert all(hasattr(rt, name) for name in rt.__all__)
    assert issubclass(rt.ArtifactError, ValueError)


@pytest.mark.parametrize(
    "inputs, message",
    [
        ([{"name": "x", "dtype": "float32"}], r"metadata input 0 is malformed"),
        ([{"name": "x", "shape": [2], "dtype": "complex64"}], r"input 0 \('x'\) has unknown dtype"),
    ],
)
def test_malformed_signature(tmp_path, inputs, message):
    meta = {
        "format": "fusec-artifact",
        "abi_version": rt.ABI_VERSION,
        "target": "cpu",
        "inputs": inputs,
        "outputs": [],
        "kernels": [],
    }
    path = _fake(tmp_path, "malformed.so", rt.ABI_VERSION, meta)
    with pytest.raises(rt.ArtifactError, match=message):
        rt.load(path)
    with pytest.raises(rt.ArtifactError, match=message):  # refused again, not cached
        rt.load(path)
