"""The CUDA model.so's runtime shim (runtime/shim_cuda.c) is compiled once into the cache
folder and linked as an object, as the CPU shim is (test_artifact.py); without a GPU.

A compile of a real model spent ~0.2 s compiling the shim's 1,000 lines again each time.
"""

from __future__ import annotations

import shutil
import subprocess

import mlir.ir as ir
import pytest

from fusec.compiler.targets import cuda as cg
from fusec.compiler.targets.cuda.artifact import EXPORTED, SHIM_CUDA, host_code
from fusec.dialects import make_context
from fusec.passes.grouping import form_group, is_compute

DOUBLE = """
#id = affine_map<(d0) -> (d0)>
func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {
  %e = tensor.empty() : tensor<1024xf32>
  %y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<1024xf32>) outs(%e : tensor<1024xf32>) {
  ^bb0(%i: f32, %o: f32):
    %s = arith.addf %i, %i : f32
    linalg.yield %s : f32
  } -> tensor<1024xf32>
  return %y : tensor<1024xf32>
}
"""


@pytest.fixture(scope="module")
def program() -> cg.CudaProgram:
    with make_context() as ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(DOUBLE)
        func = module.body.operations[0]
        form_group([o for o in func.regions[0].blocks[0].operations if is_compute(o)],
                   "vertical")
        return cg.generate(module, cg.CudaOptions(cubin=False))


@pytest.fixture
def commands(monkeypatch) -> list[list[str]]:
    """Every command the build runs, as run."""
    ran: list[list[str]] = []
    run = subprocess.run

    def recording(cmd, *args, **kwargs):
        ran.append([str(c) for c in cmd])
        return run(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", recording)
    return ran


def test_the_generated_code_includes_only_the_header(program) -> None:
    text = host_code(program)
    assert f'#include "{SHIM_CUDA.with_suffix(".h")}"' in text
    assert "shim_cuda.c" not in text


def test_the_shim_is_compiled_once_and_kept(program, tmp_path, monkeypatch, commands) -> None:
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    first = cg.write_cuda_artifact(program, tmp_path / "a.so")
    (shim,) = (tmp_path / "cache" / "shim").iterdir()
    assert shim.suffix == ".o"
    assert any(str(SHIM_CUDA) in cmd and "-c" in cmd for cmd in commands)
    stamp = shim.stat().st_mtime_ns
    commands.clear()
    second = cg.write_cuda_artifact(program, tmp_path / "b.so")
    (link,) = commands  # the link alone: no compile of the shim
    assert str(shim) in link and not any("shim_cuda.c" in arg for arg in link)
    assert list((tmp_path / "cache" / "shim").iterdir()) == [shim]
    assert shim.stat().st_mtime_ns == stamp
    for path in (first, second):
        assert cg.load_metadata(path)["outputs"][0]["shape"] == [1024]


def test_a_cache_folder_that_cannot_be_written_still_links(program, tmp_path, monkeypatch,
                                                           commands) -> None:
    """Where the cache folder cannot be made (a file stands there), the link compiles
    shim_cuda.c itself."""
    (tmp_path / "cache").write_text("not a folder")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    path = cg.write_cuda_artifact(program, tmp_path / "m.so")
    assert str(SHIM_CUDA) in commands[-1]
    assert cg.load_metadata(path)["target"] == "cuda"


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_the_library_exports_exactly_the_abi(program, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    path = cg.write_cuda_artifact(program, tmp_path / "model.so")
    listing = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True,
                             text=True, check=True).stdout
    assert sorted(line.split()[-1] for line in listing.splitlines()) == sorted(EXPORTED)


def test_a_failed_link_names_the_command_and_leaves_no_file(program, tmp_path,
                                                            monkeypatch) -> None:
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\necho 'no compiler here' >&2\nexit 1\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    with pytest.raises(cg.CudaCodegenError, match="no compiler here") as failed:
        cg.write_cuda_artifact(program, tmp_path / "out" / "model.so")
    assert str(cc) in str(failed.value) and str(SHIM_CUDA) in str(failed.value)
    assert not (tmp_path / "out").exists()
