"""Bad input, catalogued: one row per case, for `fusec`, `fusec.compile` and `fusec.runtime`.

Every compile-time case must give exactly one line `LOCATION: error: MESSAGE` on stderr,
exit code 1, no traceback, and leave nothing behind (no output, no temporary file next to
it). Run-time cases must raise the right exception type with a message naming the problem.
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import fusec.runtime as rt
import fusec.runtime.library as rt_library
import numpy as np
import pytest
from fusec.compiler.diagnostics import FusecError
from fusec.tools.fusec import main as fusec_main

ADD_MLIR = """\
func.func @main(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %0 = linalg.add ins(%a, %b : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
"""


def _unary(op_line: str, arg: str = "tensor<4xf32>", result: str = "tensor<4xf32>") -> str:
    return (f"func.func @main(%a: {arg}) -> {result} {{\n  {op_line}\n"
            f"  return %0 : {result}\n}}\n")


# --------------------------------------------------------------------------- compile time
# (case id, files to write {name: text}, extra arguments, expected location, message regex).
# The input is the first file; `{out}` in the arguments is the output path.

CLI_CASES = [
    ("missing-file", {}, ["nope.mlir", "-o", "{out}"], "nope.mlir", r"no such file$"),
    ("directory-input", {"adir/": ""}, ["adir", "-o", "{out}"], "adir",
     r"is a directory, expected a \.mlir or \.py file"),
    ("empty-file", {"empty.mlir": ""}, ["empty.mlir", "-o", "{out}"], "empty.mlir",
     r"expected one public func.func \(the model\) in the module, found 0"),
    ("parse-error", {"bad.mlir": _unary("%0 = arith.addf %a, %b : tensor<4xf32>")},
     ["bad.mlir", "-o", "{out}"], "bad.mlir:2:23", r"use of undeclared SSA value name"),
    ("unknown-dialect-op", {"op.mlir": _unary('%0 = "foo.bar"(%a) : (tensor<4xf32>) -> '
                                              "tensor<4xf32>")},
     ["op.mlir", "-o", "{out}"], "op.mlir:2:8",
     r"unsupported op 'foo.bar'; fusec supports ops of the dialects arith, math, linalg"),
    ("unsupported-dialect-op", {"tosa.mlir": _unary("%0 = tosa.abs %a : (tensor<4xf32>) -> "
                                                    "tensor<4xf32>")},
     ["tosa.mlir", "-o", "{out}"], "tosa.mlir:2:8",
     r"unsupported op 'tosa.abs'; fusec supports ops of the dialects"),
    ("unlowerable-linalg-op", {"sm.mlir": _unary(
        "%e = tensor.empty() : tensor<4x8xf32>\n  %0 = linalg.softmax dimension(1) "
        "ins(%a : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>",
        "tensor<4x8xf32>", "tensor<4x8xf32>")},
     ["sm.mlir", "-o", "{out}"], "sm.mlir:3:8", r"unsupported op 'linalg.softmax'"),
    ("dynamic-shape", {"dyn.mlir": "func.func @main(%a: tensor<?xf32>) -> tensor<?xf32> {\n"
                                   "  return %a : tensor<?xf32>\n}\n"},
     ["dyn.mlir", "-o", "{out}"], "dyn.mlir:1:1",
     r"argument 0 of @main has dynamic shape tensor<\?xf32>; fusec compiles static shapes"),
    ("complex-dtype", {"c.mlir": _unary("%0 = arith.constant dense<(1.0, 2.0)> : "
                                        "tensor<4xcomplex<f32>>", "tensor<4xcomplex<f32>>",
                                        "tensor<4xcomplex<f32>>")},
     ["c.mlir", "-o", "{out}"], "c.mlir:2:8",
     (r"result 0 of 'arith.constant' has element type complex<f32>, which fusec does not "
     r"support \(supported: f64, f32")),
    ("complex-argument", {"c.mlir": "func.func @main(%a: tensor<4xcomplex<f32>>) -> "
                                    "tensor<4xcomplex<f32>> {\n"
                                    "  return %a : tensor<4xcomplex<f32>>\n}\n"},
     ["c.mlir", "-o", "{out}"], "c.mlir:1:1",
     r"argument 0 of @main has element type complex<f32>, which fusec does not support"),
    ("f8-dtype-inside", {"f8.mlir": _unary("%0 = arith.truncf %a : tensor<4xf32> to "
                                           "tensor<4xf8E4M3FN>", result="tensor<4xf8E4M3FN>")},
     ["f8.mlir", "-o", "{out}"], "f8.mlir:2:8",
     r"result 0 of 'arith.truncf' has element type f8E4M3FN, which fusec does not support"),
    ("output-dir-missing", {"add.mlir": ADD_MLIR}, ["add.mlir", "-o", "missing/dir/m.so"],
     "missing/dir/m.so", r"cannot write output: directory .*missing/dir does not exist"),
    ("output-is-directory", {"add.mlir": ADD_MLIR}, ["add.mlir", "-o", "out"], "out",
     r"cannot write output: it is a directory"),
    ("emit-unknown-stage", {"add.mlir": ADD_MLIR}, ["add.mlir", "--emit", "bogus"], None,
     (r"unknown stage 'bogus' for --emit; the stages for target 'cpu' are: torch, linalg, "
     r"fusion, tiled, bufferized, cpu")),
    ("emit-after-input-stage", {"add.mlir": ADD_MLIR}, ["add.mlir", "--emit", "so"], None,
     r"unknown stage 'so' for --emit"),
    ("verify-needs-linalg", {"g.mlir": (
        "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %0 = fusion.group single (%x = %a : tensor<4xf32>) -> tensor<4xf32> {\n"
        "    %e = tensor.empty() : tensor<4xf32>\n"
        "    %1 = linalg.exp ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>\n"
        "    fusion.yield %1 : tensor<4xf32>\n  }\n  return %0 : tensor<4xf32>\n}\n")},
     ["g.mlir", "-o", "{out}", "--verify"], "g.mlir",
     r"--verify needs linalg-on-tensors input .* this input is at stage 'fusion'"),
    ("binary-input", {"model.onnx": "\udcb8"}, ["model.onnx", "-o", "{out}"], "model.onnx",
     r"not a text file: fusec reads MLIR text \(\.mlir\) or a model\.py"),
    ("dump-dir-is-a-file", {"add.mlir": ADD_MLIR, "f.txt": "x"},
     ["add.mlir", "-o", "{out}", "--dump-dir", "f.txt"], "f.txt",
     r"--dump-dir: exists and is not a directory"),
    ("unknown-target", {"add.mlir": ADD_MLIR}, ["add.mlir", "--target", "tpu"], None,
     (r"argument --target: invalid choice: 'tpu' \(choose from 'cpu', 'cuda', 'auto'\) "
     r"\(see fusec --help\)")),
    ("no-input", {}, [], None, r"the following arguments are required: input"),
    ("verify-cuda-needs-a-gpu-or-a-dir", {"add.mlir": ADD_MLIR},
     ["add.mlir", "-o", "{out}", "--verify", "--target", "cuda"], "add.mlir",
     (r"--verify runs the fused and the unfused program, and there is no GPU here .*: add "
      r"--verify-dir DIR to build the check, and run `fusec-verify DIR` where the GPU is")),
    ("model-py-without-model", {"m.py": "import torch\ndef example_inputs():\n"
                                        "    return (torch.randn(4),)\n"},
     ["m.py", "-o", "{out}"], "m.py",
     r"a model file must define `model\(\)` and `example_inputs\(\)`; missing: `model\(\)`$"),
    ("model-py-without-example-inputs", {"m.py": "import torch\ndef model():\n"
                                                 "    return torch.nn.ReLU()\n"},
     ["m.py", "-o", "{out}"], "m.py", r"missing: `example_inputs\(\)`$"),
    ("model-py-raises", {"m.py": "import torch\ndef model():\n    raise RuntimeError('boom')\n"
                                 "def example_inputs():\n    return (torch.randn(4),)\n"},
     ["m.py", "-o", "{out}"], "m.py", r"`model\(\)` raised RuntimeError: boom$"),
    ("model-py-syntax-error", {"m.py": "def model(:\n"}, ["m.py", "-o", "{out}"], "m.py",
     r"SyntaxError"),
    ("model-py-shape-mismatch", {"m.py": "import torch\ndef model():\n"
                                         "    return torch.nn.Linear(4, 3)\n"
                                         "def example_inputs():\n"
                                         "    return (torch.randn(2, 5),)\n"},
     ["m.py", "-o", "{out}"], "m.py",
     (r"torch.export failed: RuntimeError: a and b must have same "
     r"reduction dim")),
    ("model-py-complex-input", {"m.py": "import torch\ndef model():\n"
                                        "    return torch.nn.ReLU()\ndef example_inputs():\n"
                                        "    return (torch.randn(4, dtype=torch.complex64),)\n"},
     ["m.py", "-o", "{out}"], "m.py",
     r"example input 0 has dtype torch.complex64, which fusec does not support"),
    ("model-py-inputs-not-tensors", {"m.py": "import torch\ndef model():\n"
                                             "    return torch.nn.ReLU()\n"
                                             "def example_inputs():\n    return (3,)\n"},
     ["m.py", "-o", "{out}"], "m.py", r"`example_inputs\(\)` item 0 is a int, not a tensor"),
    ("cuda-model-with-rng-state", {"m.py": "import torch\nclass M(torch.nn.Module):\n"
                                           "    def forward(self, x):\n"
                                           "        return x + torch.rand(4)\n"
                                           "def model():\n    return M()\n"
                                           "def example_inputs():\n    return (torch.randn(4),)\n"},
     ["m.py", "--target", "cuda", "-o", "{out}"], "m.py:4:0",
     r"the model keeps state between calls \(an RNG seed.*compile it with --target cpu"),
    # A Python `if` on a tensor's value: one located line (torch printed its log and the FX
    # graph twice, and the error was cut before its hint).
    ("model-py-data-dependent-if", {"m.py": "import torch\nclass M(torch.nn.Module):\n"
                                            "    def forward(self, x):\n"
                                            "        if x.sum() > 0:\n"
                                            "            return x * 2\n"
                                            "        return x - 1\n"
                                            "def model():\n    return M()\n"
                                            "def example_inputs():\n"
                                            "    return (torch.randn(4),)\n"},
     ["m.py", "-o", "{out}"], "m.py:4",
     r"control flow depends on a tensor's value .* torch\.where or torch\.cond"),
    # A None among the outputs: named (torch-mlir's refusal named `!torch.none` only).
    ("none-output", {"m.py": "import torch\n"
                             "class M(torch.nn.Module):\n"
                             "    def forward(self, x):\n"
                             "        return x * 2, None\n"
                             "def model():\n    return M()\n"
                             "def example_inputs():\n"
                             "    return (torch.randn(4),)\n"},
     ["m.py", "-o", "{out}"], "m.py", r"M's output 1 is None; fusec compiles models whose outputs"),
    # A string among the outputs: named (torch-mlir's refusal was a legalization dump).
    ("string-output", {"m.py": "import torch\n"
                               "class M(torch.nn.Module):\n"
                               "    def forward(self, x):\n"
                               "        return x * 2, 'tag'\n"
                               "def model():\n    return M()\n"
                               "def example_inputs():\n"
                               "    return (torch.randn(4),)\n"},
     ["m.py", "-o", "{out}"], "m.py",
     r"M's output 1 is a str \('tag'\); fusec compiles models whose outputs"),
    # --arch is checked before anything runs (it used to abort inside LLVM, exit 134).
    ("arch-bogus", {"add.mlir": ADD_MLIR}, ["add.mlir", "--target", "cuda", "--arch", "bogus",
                                            "-o", "{out}"], "",
     r"--arch 'bogus' is not a GPU architecture fusec builds for \(supported: sm_80, .*sm_90a\)"),
    ("arch-number", {"add.mlir": ADD_MLIR}, ["add.mlir", "--target", "cuda", "--arch", "90",
                                             "-o", "{out}"], "", r"--arch '90' is not a GPU"),
    # --check on IR: refused before the .so is written (it used to write it, then refuse).
    ("check-on-mlir", {"add.mlir": ADD_MLIR}, ["add.mlir", "--check", "-o", "{out}"], "add.mlir",
     r"--check needs a model\.py input"),
    ("graph-into-missing-dir", {"add.mlir": ADD_MLIR}, ["add.mlir", "--graph", "no/dir/g.dot"],
     "no/dir/g.dot", r"cannot write output: directory .*no/dir does not exist"),
]
if not os.path.exists("/dev/nvidia0"):
    CLI_CASES.append(
        ("check-cuda-without-gpu", {"m.py": "import torch\ndef model():\n"
                                            "    return torch.nn.ReLU()\n"
                                            "def example_inputs():\n"
                                            "    return (torch.randn(4),)\n"},
         ["m.py", "--target", "cuda", "--check", "-o", "{out}"], "",
         r"--check runs the compiled model, and there is no GPU here .*fusec\.runtime\.load"))


def _write_files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        if name.endswith("/"):
            (root / name).mkdir()
        else:  # surrogateescape: "\udcb8" writes the byte 0xb8, which is not UTF-8
            (root / name).write_bytes(text.encode("utf-8", "surrogateescape"))


@pytest.mark.parametrize("case", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_fusec_bad_input(case, tmp_path, monkeypatch, capsys):
    name, files, args, location, message = case
    if name == "verify-cuda-needs-a-gpu-or-a-dir":
        from fusec.compiler.pipeline import gpu_present

        if gpu_present():
            pytest.skip("with a GPU here, --verify for cuda runs (test/gpu/verify_cuda.py)")
    monkeypatch.chdir(tmp_path)
    _write_files(tmp_path, files)
    (tmp_path / "out").mkdir()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    argv = [a.replace("{out}", "out/m.so") for a in args]

    try:
        status = fusec_main(argv)
    except SystemExit as exit:  # a command-line usage error exits from argparse
        status = exit.code

    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 1, err
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    assert "Traceback" not in err
    prefix = f"{location}: error: " if location else "error: "
    assert lines[0].startswith(prefix), lines[0]
    assert re.search(message, lines[0][len(prefix):]), lines[0]
    # Nothing half-written: no output, no temporary next to it, no folder created.
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("compiler, message", [
    ("missing", r"cannot run the C compiler '.*missing-cc': .*No such file"),
    ("failing", r"building .*m\.so failed \(exit 1\): plan\.c:1:1: error: pretend failure"),
])
def test_c_compiler_failure(compiler, message, tmp_path, monkeypatch, capsys):
    """No C compiler, or one that fails: one line naming the cause, nothing half-written."""
    cc = tmp_path / f"{compiler}-cc"
    if compiler == "failing":
        cc.write_text('#!/bin/sh\necho "plan.c:1:1: error: pretend failure" >&2\nexit 1\n')
        cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    (tmp_path / "add.mlir").write_text(ADD_MLIR)
    out = tmp_path / "out"
    out.mkdir()
    assert fusec_main([str(tmp_path / "add.mlir"), "-o", str(out / "m.so")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and re.search(message, lines[0]), lines
    assert lines[0].startswith(f"{out / 'm.so'}: error: ")
    assert list(out.iterdir()) == []


def test_fusec_debug_shows_the_traceback(tmp_path):
    """--debug re-raises, so a user can see where an error came from."""
    with pytest.raises(FusecError, match="no such file"):
        fusec_main([str(tmp_path / "nope.mlir"), "--debug"])


def test_fusec_command_line_exit_code(tmp_path):
    """The installed command, as a new user runs it: exit 1, one line, no traceback."""
    bad = tmp_path / "bad.mlir"
    bad.write_text(_unary('%0 = "foo.bar"(%a) : (tensor<4xf32>) -> tensor<4xf32>'))
    proc = subprocess.run([sys.executable, "-m", "fusec.tools.fusec", str(bad), "-o",
                           str(tmp_path / "m.so")], capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        (f"{bad}:2:8: error: unsupported op 'foo.bar'; fusec supports ops of the dialects "
        "arith, math, linalg, tensor, func, fusion, ml_program, scf, affine, complex "
        "(linalg-on-tensors as torch-mlir emits it)")]
    assert sorted(os.listdir(tmp_path)) == ["bad.mlir"]


# (case id, call, exception type, message regex) for fusec.compile.
API_CASES = [
    ("text-does-not-parse", lambda f: f.compile("this is not MLIR"), FusecError,
     r"^<text>:1:1: error: "),
    ("unsupported-op", lambda f: f.compile(_unary('%0 = "foo.bar"(%a) : (tensor<4xf32>) -> '
                                                  "tensor<4xf32>")),
     FusecError, r"^<text>:2:8: error: unsupported op 'foo.bar'"),
    ("dynamic-shape", lambda f: f.compile("func.func @main(%a: tensor<?xf32>) -> "
                                          "tensor<?xf32> {\n  return %a : tensor<?xf32>\n}\n"),
     FusecError, r"dynamic shape"),
    ("unknown-target", lambda f: f.compile(ADD_MLIR, target="tpu"), FusecError,
     r"unknown target 'tpu'"),
    ("example-inputs-with-text", lambda f: f.compile(ADD_MLIR, np.zeros(3)), TypeError,
     r"example inputs are only for torch modules"),
]


@pytest.mark.parametrize("case", API_CASES, ids=[c[0] for c in API_CASES])
def test_compile_api_bad_input(case, tmp_path, monkeypatch):
    _, call, error_type, message = case
    import fusec

    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    with pytest.raises(error_type, match=message):
        call(fusec)
    assert [p for p in tmp_path.iterdir() if p.suffix == ".so" or p.name.startswith(".")] == []


# --------------------------------------------------------------------------- run time


@pytest.fixture(scope="module")
def add_model(tmp_path_factory):
    """A real artifact: z = a + b over 4x8 float32."""
    path = tmp_path_factory.mktemp("add") / "add.mlir"
    path.write_text(ADD_MLIR)
    assert fusec_main([str(path), "-o", str(path.with_suffix(".so"))]) == 0
    return rt.load(path.with_suffix(".so"))


def _rand(*shape, dtype=np.float32):
    return np.random.default_rng().standard_normal(shape).astype(dtype)


A, B = _rand(4, 8), _rand(4, 8)

# (case id, inputs, message regex): every one a ValueError.
RUN_CASES = [
    ("too-few-inputs", (A,), r"takes 2 inputs \(input0, input1\), got 1"),
    ("too-many-inputs", (A, B, A), r"takes 2 inputs \(input0, input1\), got 3"),
    ("wrong-shape", (A, _rand(8, 4)),
     r"input 1 \('input1'\): expected shape \(4, 8\), got \(8, 4\)"),
    ("wrong-rank", (A, _rand(32)), r"input 1 \('input1'\): expected shape \(4, 8\), got \(32,\)"),
    ("wrong-dtype", (A, B.astype(np.float64)),
     r"input 1 \('input1'\): expected dtype float32, got float64"),
    ("integer-for-float", (A.astype(np.int32), B),
     r"input 0 \('input0'\): expected dtype float32, got int32"),
    ("not-an-array", ("hello", B), r"input 0 \('input0'\): expected dtype float32"),
]


@pytest.mark.parametrize("case", RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_runtime_bad_inputs(case, add_model):
    _, inputs, message = case
    with pytest.raises(ValueError, match=message):
        add_model(*inputs)


def test_runtime_tensor_on_another_device(add_model):
    """A tensor that is not in host memory (a GPU's; here torch's `meta` device, which has
    no data at all) is refused naming the input; a host tensor is accepted."""
    import torch

    with pytest.raises(ValueError, match=r"input 1 \('input1'\): cannot be read as a host "
                                         r"array: .*meta device"):
        add_model(A, torch.empty(4, 8, device="meta"))
    out = add_model(torch.from_numpy(A), torch.from_numpy(B))
    assert np.allclose(out, A + B)


@pytest.mark.parametrize("layout", ["transposed-view", "strided-slice", "fortran-order"])
def test_runtime_non_contiguous_inputs_are_copied(layout, add_model):
    """A non-contiguous input is accepted by copy, and the result is still right."""
    a = {"transposed-view": _rand(8, 4).T,
         "strided-slice": _rand(8, 16)[::2, ::2],
         "fortran-order": np.asfortranarray(_rand(4, 8))}[layout]
    b = _rand(4, 8)
    assert not a.flags.c_contiguous
    out = add_model(a, b)
    ref = a.astype(np.float64) + b.astype(np.float64)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-6


FAKE_ARTIFACT_C = """
int fusec_abi_version(void) {{ return {abi}; }}
const char *fusec_metadata(void) {{ return "{meta}"; }}
int fusec_run(void **i, void **o) {{ return 0; }}
int fusec_run_stream(void **i, void **o, void *s) {{ return 0; }}
const char *fusec_last_error(void) {{ return ""; }}
int fusec_num_threads(void) {{ return 1; }}
"""


def _fake_artifact(path: Path, abi: int = rt.ABI_VERSION, target: str = "cpu",
                   meta_abi: int = rt.ABI_VERSION, symbols: bool = True,
                   cpu: str = "generic") -> Path:
    """A shared library with the artifact's entry points and crafted metadata."""
    meta = (f'{{\\"format\\": \\"fusec-artifact\\", \\"abi_version\\": {meta_abi}, '
            f'\\"target\\": \\"{target}\\", \\"fusec_version\\": \\"0.0.0\\", '
            f'\\"cpu\\": \\"{cpu}\\", '
            '\\"inputs\\": [], \\"outputs\\": [], \\"kernels\\": []}')
    source = path.with_suffix(".c")
    source.write_text(FAKE_ARTIFACT_C.format(abi=abi, meta=meta) if symbols
                      else "int not_fusec(void) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", str(source), "-o", str(path)], check=True)
    return path


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _truncated(path: Path, real: Path) -> Path:
    data = real.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


# (case id, make(tmp_path, real artifact path) -> path, message regex): every one ArtifactError.
ARTIFACT_CASES = [
    ("missing", lambda d, real: d / "nope.so", r"nope.so: no such file"),
    ("directory", lambda d, real: d, r"not a regular file"),
    ("empty", lambda d, real: _write(d / "e.so", b""), r"not a shared library \(no ELF header\)"),
    ("text-file", lambda d, real: _write(d / "t.so", b"hello"),
     r"not a shared library \(no ELF header\)"),
    ("truncated", lambda d, real: _truncated(d / "half.so", real),
     r"truncated or corrupt|truncated: a segment ends past"),
    ("not-a-fusec-artifact", lambda d, real: _fake_artifact(d / "other.so", symbols=False),
     r"not a fusec artifact \(no fusec_abi_version\)"),
    ("other-abi-version", lambda d, real: _fake_artifact(d / "abi.so", abi=rt.ABI_VERSION + 1),
     rf"built for fusec ABI version {rt.ABI_VERSION + 1}; this runtime runs {rt.ABI_VERSION}"),
    ("metadata-abi-mismatch",
     lambda d, real: _fake_artifact(d / "mabi.so", meta_abi=rt.ABI_VERSION + 1),
     rf"metadata says ABI version {rt.ABI_VERSION + 1}"),
    ("other-target", lambda d, real: _fake_artifact(d / "tpu.so", target="tpu"),
     r"built for target 'tpu'; this runtime runs \['cpu', 'cuda'\]"),
]


def test_runtime_refuses_an_artifact_for_a_newer_cpu(tmp_path, monkeypatch):
    """Kernels built for AVX-512 would die of SIGILL on a CPU without it: refused at load."""
    path = _fake_artifact(tmp_path / "v4.so", cpu="x86-64-v4")
    monkeypatch.setattr(rt_library, "host_cpu_flags", lambda: {"sse2", "avx2", "fma"})
    with pytest.raises(rt.ArtifactError, match=r"built for CPU x86-64-v4, which needs avx512f"):
        rt.load(path)
    monkeypatch.setattr(rt_library, "host_cpu_flags", lambda: set(rt.CPU_LEVEL_FLAGS["x86-64-v4"]))
    assert rt.load(path).target == "cpu"


def test_runtime_other_fusec_version_same_abi_loads(tmp_path):
    """By design the ABI version, not the fusec version, decides: an artifact from another
    fusec release with the same ABI loads (its version is in the metadata)."""
    module = rt.load(_fake_artifact(tmp_path / "old.so"))
    assert module.metadata["fusec_version"] == "0.0.0"


@pytest.mark.parametrize("case", ARTIFACT_CASES, ids=[c[0] for c in ARTIFACT_CASES])
def test_runtime_bad_artifacts(case, tmp_path, add_model):
    _, make, message = case
    path = make(tmp_path, add_model.path)
    with pytest.raises(rt.ArtifactError, match=message):
        rt.load(path)


def test_runtime_cuda_artifact_checks_arguments_before_the_driver(tmp_path):
    """An artifact for the GPU loads here (metadata only); a wrong call is refused by the
    argument checks, before any CUDA driver call (there is no driver here). Calling a real
    CUDA artifact without a driver: test_runtime.py."""
    module = rt.load(_fake_artifact(tmp_path / "gpu.so", target="cuda"))
    assert module.target == "cuda"
    with pytest.raises(ValueError, match=r"takes 0 inputs \(\), got 1"):
        module(np.ones(3, np.float32))


def test_runtime_imports_no_mlir_when_rejecting(tmp_path):
    """Rejecting a bad artifact needs no compiler: the runtime alone, in a fresh process."""
    bad = tmp_path / "bad.so"
    bad.write_text("not a library")
    code = textwrap.dedent(f"""
        import sys, fusec.runtime as rt
        try:
            rt.load({str(bad)!r})
        except rt.ArtifactError as e:
            print(e)
        assert not any(m == "mlir" or m.startswith("mlir.") for m in sys.modules)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{bad}: not a shared library (no ELF header)"


# --------------------------------------------------------------------------- indices out of range
# torch raises IndexError for an embedding, gather or index_select index out of range; a
# fusec kernel reads the tensor at that index unchecked would read garbage, or crash the
# calling process (token 10**9 did). Each case: the op, the bad index, and the message.


class _Indexing:
    """An embedding, a gather and a scatter whose indices come from the inputs."""

    @staticmethod
    def model():
        import torch

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.table = torch.nn.Embedding(1000, 8)

            def forward(self, tokens, x, idx):
                gathered = torch.gather(x, 1, idx)
                scattered = torch.zeros(6, 7).scatter(1, idx, gathered)
                return self.table(tokens) * 2, gathered, scattered

        return Model().eval()


@pytest.fixture(scope="module")
def indexing_model(tmp_path_factory):
    import fusec
    import torch

    torch.manual_seed(0)
    model = _Indexing.model()
    tokens = torch.randint(0, 1000, (4, 5))
    x = torch.randn(6, 7)
    idx = torch.randint(0, 7, (6, 3))
    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("FUSEC_CACHE_DIR")
    os.environ["FUSEC_CACHE_DIR"] = str(cache)
    try:
        compiled = fusec.compile(model, tokens, x, idx)
    finally:
        if old is None:
            del os.environ["FUSEC_CACHE_DIR"]
        else:
            os.environ["FUSEC_CACHE_DIR"] = old
    return model, compiled, (tokens, x, idx)


def test_indices_in_range_match_torch(indexing_model):
    model, compiled, inputs = indexing_model
    outs = compiled(*[t.numpy() for t in inputs])
    refs = model(*inputs)
    for out, ref in zip(outs, refs):
        assert np.array_equal(out, ref.detach().numpy())


INDEX_CASES = [
    # (id, input number, position, bad value, message regex)
    ("embedding-just-past-the-end", 0, (1, 2), 1000, r"index 1000 is out of range for "
     r"dimension 0 of size 1000 \(an indexed read of tensor<1000x8xf32>"),
    ("embedding-far-past-the-end", 0, (1, 2), 5000, r"index 5000 is out of range"),
    ("embedding-would-segfault", 0, (3, 4), 10**9, r"index 1000000000 is out of range"),
    ("embedding-negative", 0, (0, 0), -1, r"index -1 is out of range for dimension 0"),
    ("gather-past-the-row", 2, (5, 1), 7, r"index 7 is out of range for dimension 1 of size 7"),
    ("gather-huge-negative", 2, (2, 0), -2**40, r"index -1099511627776 is out of range"),
]


@pytest.mark.parametrize("case", INDEX_CASES, ids=[c[0] for c in INDEX_CASES])
def test_index_out_of_range_raises(case, indexing_model):
    """An IndexError naming the source line, the op and the index, as torch raises one; the
    process lives, the caller's `out` arrays are left untouched, and the next call with good
    indices is right again."""
    _, which, position, value, message = case
    model, compiled, inputs = indexing_model
    arrays = [t.numpy().copy() for t in inputs]
    arrays[which][position] = value
    import torch

    with pytest.raises((IndexError, RuntimeError)):
        model(*[torch.from_numpy(a) for a in arrays])  # torch refuses it too
    sentinel = [np.full(s.shape, 7.0, np.float32) for s in compiled.signature.outputs]
    with pytest.raises(IndexError, match=r"test_bad_input\.py:\d+:\d+: " + message):
        compiled(*arrays, out=sentinel)
    assert all(np.all(s == 7.0) for s in sentinel)
    good = compiled(*[t.numpy() for t in inputs])
    assert np.array_equal(good[0], model(*inputs)[0].detach().numpy())


def test_index_out_of_range_in_a_scatter_write(tmp_path, monkeypatch):
    """A scatter into a tensor at an index read from the input: the write is checked."""
    import fusec
    import torch

    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))

    class Scatter(torch.nn.Module):
        def forward(self, src, idx):
            return torch.zeros(3, 10).scatter_add(1, idx, src)

    src, idx = torch.randn(3, 4), torch.randint(0, 10, (3, 4))
    compiled = fusec.compile(Scatter(), src, idx)
    assert np.allclose(compiled(src.numpy(), idx.numpy()), Scatter()(src, idx).numpy(),
                       atol=1e-6)
    bad = idx.numpy().copy()
    bad[2, 3] = 10
    with pytest.raises(IndexError, match=r"index 10 is out of range for dimension 1 of size 10"):
        compiled(src.numpy(), bad)


def test_fusec_manners(tmp_path, monkeypatch, capsys):
    """--version; --report before the input; -v names each stage with its time; --arch for
    the CPU is said to be ignored; the default output does not shadow the model's module;
    outputs respect the umask."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "add.mlir").write_text(ADD_MLIR)
    with pytest.raises(SystemExit) as version:
        fusec_main(["--version"])
    assert version.value.code == 0 and re.match(r"fusec \d+\.\d+", capsys.readouterr().out)
    assert fusec_main(["--report", "add.mlir"]) == 0
    assert "fusion plan for cpu: 1 kernel" in capsys.readouterr().out
    assert fusec_main(["--report=json", "add.mlir"]) == 0
    assert '"kernels"' in capsys.readouterr().out
    old = os.umask(0o022)
    try:
        assert fusec_main(["-v", "--arch", "sm_90", "add.mlir"]) == 0
        assert fusec_main(["add.mlir", "--emit", "linalg", "-o", "add.linalg.mlir"]) == 0
    finally:
        os.umask(old)
    err = capsys.readouterr().err
    assert "fusec: note: --arch sm_90 is for --target cuda; ignored for the CPU" in err
    for stage in ("linalg", "fusion", "tiled", "bufferized", "cpu"):
        assert re.search(rf"^fusec: stage {stage}: \d+\.\d\d s$", err, re.M), err
    assert (tmp_path / "add.fusec.so").exists() and not (tmp_path / "add.so").exists()
    assert (tmp_path / "add.fusec.so").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "add.linalg.mlir").stat().st_mode & 0o777 == 0o644


def test_training_mode_is_said_once(tmp_path, monkeypatch, capsys):
    import fusec
    import torch

    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    class Noted(torch.nn.Sequential):
        pass

    model = Noted(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    assert model.training
    fusec.compile(model, torch.randn(2, 4))
    fusec.compile(model, torch.randn(2, 4))  # the same model again (a loop): not again
    err = capsys.readouterr().err
    assert err.count("Noted is in training mode; compiling it in eval mode") == 1
    # A submodule left in training mode under an eval() model (probe 9: compiled in eval
    # mode without a word) is said too, naming it.
    mixed = Noted(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).eval()
    mixed[1].train()
    fusec.compile(mixed, torch.randn(2, 4))
    err = capsys.readouterr().err
    assert "Noted is in eval mode but 1 of its submodules is in training mode ('1'); " \
        "compiling it in eval mode" in err, err
    assert mixed[1].training and not mixed.training  # given back in the modes it came in


def test_a_stage_reproducer_is_one_shell_command(tmp_path):
    """The command printed on a stage's failure survives a POSIX shell: nested pipelines'
    parentheses and options' braces are quoted (an unquoted `--func.func(...)` was a shell
    syntax error)."""
    import shlex

    from fusec.compiler.pipeline import CompileOptions, _reproducer

    passes = ["func.func(buffer-loop-hoisting)", "fusion-tile{threads=1,fit=true}", "cse"]
    command = _reproducer("module {}", "cpu", passes, CompileOptions(dump_dir=str(tmp_path)))
    argv = shlex.split(command)
    assert argv[0] == "fusec-opt" and argv[1] == str(tmp_path / "model.before-cpu.mlir")
    assert argv[2:] == [f"--{p}" for p in passes]
