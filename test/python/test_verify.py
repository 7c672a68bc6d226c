"""`fusec --verify`: fused vs unfused, kernel by kernel.

Good examples must pass with every fused kernel compared; deliberately wrong fused modules
(a group body edited after the fusion stage) must fail, naming the kernel where the
difference starts.
"""

import functools
import re
from pathlib import Path

import numpy as np
import pytest
from fusec.compiler import verify
from fusec.tools.fusec import main as fusec_main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _text(name: str) -> str:
    return (EXAMPLES / name / "model.mlir").read_text()


def _edit_group(index: int, old: str, new: str):
    """A mutation: in the `index`-th fusion.group of the fused module, replace the first
    `old` with `new` (a hand-made wrong kernel)."""

    def mutate(text: str) -> str:
        starts = [m.start() for m in re.finditer(r"fusion\.group ", text)]
        start = starts[index]
        end = starts[index + 1] if index + 1 < len(starts) else len(text)
        body = text[start:end]
        assert old in body, f"group {index} has no {old!r}"
        return text[:start] + body.replace(old, new, 1) + text[end:]

    return mutate


@pytest.mark.parametrize("name", ["softmax", "layernorm_mlp", "attention"])
def test_good_examples_pass(name, tmp_path, monkeypatch):
    import fusec

    result = verify.verify(_text(name), f"{name}.mlir")
    assert result.ok, result.summary()
    fused, unfused = result.kernels
    assert 0 < fused < unfused  # really fused vs really unfused
    # The fused program checked has the kernels of the one fusec builds.
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    assert fused == len(fusec.compile(_text(name)).kernels)
    assert len(result.groups) == fused
    assert all(g.errors and g.unmatched == 0 for g in result.groups)  # every kernel compared
    assert all(e <= 1e-4 for e in result.output_errors)
    verify.check_or_raise(result, name)  # does not raise


# (case id, example, mutation, kernel expected to be named)
WRONG_CASES = [
    ("softmax-divide-becomes-multiply", "softmax", _edit_group(0, "arith.divf", "arith.mulf"), 0),
    ("layernorm-first-kernel", "layernorm_mlp", _edit_group(0, "arith.subf", "arith.addf"), 0),
    ("mlp-second-kernel", "mlp", _edit_group(1, "arith.addf", "arith.subf"), 1),
]


@pytest.mark.parametrize("case", WRONG_CASES, ids=[c[0] for c in WRONG_CASES])
def test_wrong_fused_module_names_the_kernel(case):
    _, name, mutate, expected = case
    result = verify.verify(_text(name), f"{name}.mlir", mutate_fused=mutate)
    assert not result.ok
    assert result.first_bad is not None and result.first_bad.index == expected
    # Kernels before the named one agreed: the difference starts there.
    assert all(e <= 1e-4 for g in result.groups[:expected] for e in g.errors)
    with pytest.raises(verify.VerificationError,
                       match=rf"kernel {expected} \(fusec_kernel_{expected}, "):
        verify.check_or_raise(result, name)


@pytest.mark.parametrize("init, caught", [("4.000000e-02", True), ("1.000000e-06", False)])
def test_tolerance(init, caught):
    """Softmax's fused kernel with its sum started at `init` instead of 0: the sums are about
    40, so 0.04 is a relative error of about 1e-3 (caught at float32's 1e-4) and 1e-6 one
    of about 2e-8 (within tolerance: the check does not cry wolf)."""
    mutate = _edit_group(0, "arith.constant 0.000000e+00 : f32", f"arith.constant {init} : f32")
    result = verify.verify(_text("softmax"), "softmax.mlir", mutate_fused=mutate)
    assert result.ok is not caught
    assert result.groups[0].errors[0] > 0.0  # the edit did change the kernel


def test_relative_error():
    ref = np.array([1.0, 2.0, 3.0], np.float32)
    assert verify.relative_error(ref, ref) == 0.0
    assert verify.relative_error(ref * (1 + 1e-3), ref) == pytest.approx(1e-3, rel=1e-2)
    nan = np.array([1.0, np.nan, 3.0], np.float32)
    assert np.isnan(verify.relative_error(nan, ref))  # NaN where there was none: fails
    assert verify.relative_error(nan, nan) == 0.0  # NaN in both, in the same place: agree
    ints = np.array([1, 2, 3])
    assert verify.relative_error(np.array([1, 2, 4]), ints) == pytest.approx(1 / 3)


def test_cli_verify_passes(tmp_path, capsys):
    assert fusec_main([str(EXAMPLES / "softmax" / "model.mlir"), "-o",
                       str(tmp_path / "m.so"), "--verify"]) == 0
    assert "verify OK" in capsys.readouterr().out


def test_cli_verify_fails_with_one_located_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(verify, "verify", functools.partial(
        verify.verify, mutate_fused=_edit_group(0, "arith.divf", "arith.mulf")))
    status = fusec_main([str(EXAMPLES / "softmax" / "model.mlir"), "-o",
                         str(tmp_path / "m.so"), "--verify"])
    assert status == 1
    err = [line for line in capsys.readouterr().err.splitlines()
           if not line.startswith("fusec: wrote")]
    assert len(err) == 1 and "Traceback" not in err[0]
    assert re.match(r".*model\.mlir:\d+:\d+: error: --verify: kernel 0 \(fusec_kernel_0, "
                    r"vertical: .*\) differs from the unfused program: output 0 of the kernel "
                    r"has relative error .* \(tolerance 1e-04\)$", err[0]), err[0]


def test_compile_api_verify(tmp_path, monkeypatch):
    import fusec

    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    module = fusec.compile(_text("softmax"), verify=True)
    x = np.random.default_rng().standard_normal((64, 512)).astype(np.float32)
    ref = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    assert np.linalg.norm(module(x) - ref) / np.linalg.norm(ref) < 1e-5
    monkeypatch.setattr(verify, "verify", functools.partial(
        verify.verify, mutate_fused=_edit_group(0, "arith.divf", "arith.mulf")))
    with pytest.raises(verify.VerificationError, match="kernel 0"):
        fusec.compile(_text("softmax"), verify=True)


def test_bundle_is_built_once_and_run_again(tmp_path, capsys):
    """--verify-dir keeps the check: fusec-verify runs it again on the same inputs (the
    bundle's seed), and reaches the same numbers."""
    from fusec.tools.verify import main as verify_main

    bundle = tmp_path / "check"
    assert fusec_main([str(EXAMPLES / "softmax" / "model.mlir"), "-o", str(tmp_path / "m.so"),
                       "--verify", "--verify-dir", str(bundle)]) == 0
    first = capsys.readouterr().out
    assert sorted(p.name for p in bundle.iterdir()) == ["fused.so", "unfused.so", "verify.json"]
    assert verify_main([str(bundle)]) == 0
    again = capsys.readouterr().out
    assert "verify OK (cpu)" in again and first.splitlines()[-1] == again.splitlines()[-1]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".fusec-verify")]


def test_bundle_of_a_wrong_program_names_the_kernel(tmp_path, capsys):
    from fusec.tools.verify import main as verify_main

    bundle = str(tmp_path / "check")
    verify.prepare(_text("mlp"), "mlp.mlir", None, bundle,
                   mutate_fused=_edit_group(1, "arith.addf", "arith.subf"))
    assert verify_main([bundle]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.match(r"mlp\.mlir:\d+:\d+: error: --verify: kernel 1 "
                                      r"\(fusec_kernel_1, ", err[0]), err


def test_cuda_check_is_built_here_and_refused_to_run_without_a_gpu(tmp_path, capsys):
    """No GPU here: --verify for the CUDA target needs --verify-dir (refused before any
    compile, no artifact written); with it, both CUDA programs are built, and fusec-verify
    says where the check can run."""
    from fusec.compiler.pipeline import gpu_present
    from fusec.tools.verify import main as verify_main

    if gpu_present():
        pytest.skip("this machine has a GPU: the check runs here (test/gpu/verify_cuda.py)")
    source, out = str(EXAMPLES / "softmax" / "model.mlir"), tmp_path / "m.so"
    assert fusec_main([source, "--target", "cuda", "-o", str(out), "--verify"]) == 1
    assert "add --verify-dir DIR" in capsys.readouterr().err and not out.exists()
    bundle = tmp_path / "check"
    assert fusec_main([source, "--target", "cuda", "-o", str(out), "--verify",
                       "--verify-dir", str(bundle)]) == 0
    assert f"run `fusec-verify {bundle}` where the GPU is" in capsys.readouterr().err
    import json

    description = json.loads((bundle / "verify.json").read_text())
    assert description["target"] == "cuda" and len(description["groups"]) == 1
    from fusec.compiler.targets import cuda as cg

    fused, unfused = (len(cg.load_metadata(bundle / n)["kernels"])
                      for n in ("fused.so", "unfused.so"))
    assert fused == 1 and unfused > 1
    assert verify_main([str(bundle)]) == 1
    assert "no GPU here" in capsys.readouterr().err


def test_verify_dir_is_refused_where_it_would_replace_something(tmp_path, capsys):
    source, out = str(EXAMPLES / "softmax" / "model.mlir"), str(tmp_path / "m.so")
    assert fusec_main([source, "-o", out, "--verify-dir", str(tmp_path / "d")]) == 1
    assert "add --verify" in capsys.readouterr().err
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    assert fusec_main([source, "-o", out, "--verify", "--verify-dir", str(busy)]) == 1
    assert "not empty" in capsys.readouterr().err
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]


def test_a_bundle_runs_where_mlir_is_not(tmp_path):
    """fusec-verify needs numpy and the runtime only: the H200's image has no MLIR bindings.
    Here in a child process whose `import mlir` (and torch) fails."""
    import json
    import subprocess
    import sys

    bundle = str(tmp_path / "check")
    verify.prepare(_text("softmax"), "softmax.mlir", None, bundle)
    code = (
        "import sys\n"
        "sys.modules.update({'mlir': None, 'torch': None, 'torch_mlir': None})\n"
        "from fusec.tools.verify import main\n"
        f"status = main([{bundle!r}])\n"
        "import json\n"
        "heavy = [m for m in sys.modules if m.startswith(('fusec.passes', 'fusec.dialects'))]\n"
        "print(json.dumps({'status': status, 'heavy': heavy}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "verify OK (cpu)" in done.stdout
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"status": 0, "heavy": []}
