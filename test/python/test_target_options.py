"""The targets' typed options: frozen, hashed into the cache key, a flag per field, and
reaching the passes they configure (no environment variable does)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from fusec.compiler.diagnostics import FusecError
from fusec.compiler.pipeline import CompileOptions, STAGE_PASSES
from fusec.compiler.targets import cpu as cpu_target
from fusec.compiler.targets.cpu.options import CpuOptions
from fusec.compiler.targets.cuda.options import CudaOptions
from fusec.tools import fusec as cli


def test_options_are_frozen_and_keyed():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CpuOptions().threads = 3  # type: ignore[misc]
    keys = {CompileOptions().cache_key(),
            CompileOptions(cpu=CpuOptions(matmul_mr=8)).cache_key(),
            CompileOptions(cuda=CudaOptions(gemm=False)).cache_key(),
            CompileOptions(cuda=CudaOptions(arch="sm_80")).cache_key()}
    assert len(keys) == 4


def test_every_field_is_a_flag():
    args = cli._parse_args(["m.mlir", "--cpu-matmul-mr", "8", "--no-cpu-fit",
                            "--cpu-arch", "x86-64-v3", "--no-cuda-gemm", "--arch", "sm_80",
                            "--cuda-elementwise-unroll", "2"])
    made = cli.target_options(args)
    assert made["cpu"] == CpuOptions(matmul_mr=8, fit=False, arch="x86-64-v3")
    assert made["cuda"] == CudaOptions(gemm=False, arch="sm_80", elementwise_unroll=2)
    assert cli.target_options(cli._parse_args(["m.mlir"])) == {"cpu": CpuOptions(),
                                                                "cuda": CudaOptions()}
    help_text = subprocess.run([sys.executable, "-m", "fusec.tools.fusec", "--help"],
                               capture_output=True, text=True, check=True).stdout
    for cls, prefix in ((CpuOptions, "cpu"), (CudaOptions, "cuda")):
        for f in dataclasses.fields(cls):
            if (prefix, f.name) != ("cuda", "arch"):
                assert f"--{prefix}-{f.name.replace('_', '-')}" in help_text


def test_options_reach_the_passes():
    cuda = CompileOptions(target="cuda", cuda=CudaOptions(gemm=False))
    tiled = STAGE_PASSES["tiled"](cuda)
    assert tiled[0] == "fusion-gpu-kernels{device=nvidia-h200,gemm=false,tc-gemm=true,movement=true}"
    no_tc = STAGE_PASSES["tiled"](CompileOptions(target="cuda", cuda=CudaOptions(tc_gemm=False)))
    assert no_tc[0] == "fusion-gpu-kernels{device=nvidia-h200,gemm=true,tc-gemm=false,movement=true}"
    sm80 = STAGE_PASSES["tiled"](CompileOptions(target="cuda", cuda=CudaOptions(arch="sm_80")))
    assert sm80[0].endswith("tc-gemm=false,movement=true}")  # no wgmma before sm_90
    assert "fusion-tile{device=nvidia-h200,fit=true}" in tiled
    cpu = STAGE_PASSES["tiled"](CompileOptions(cpu=CpuOptions(threads=3, max_tile_kb=64,
                                                              fit=False)))
    (tile,) = [p for p in cpu if p.startswith("fusion-tile{")]
    assert "threads=3," in tile and "max-tile-kb=64," in tile and "fit=false" in tile
    assert not any(p.startswith("fusion-cpu-matmul")
                   for p in STAGE_PASSES["cpu"](CompileOptions(cpu=CpuOptions(matmul=False))))
    assert cpu_target.target_cpu(CompileOptions(cpu=CpuOptions(arch="x86-64-v3"))) == \
        "x86-64-v3"


def test_no_environment_variable_changes_the_passes(monkeypatch):
    before = [STAGE_PASSES[s](CompileOptions()) for s in ("tiled", "cpu")]
    for name in ("FUSEC_CPU", "FUSEC_CPU_MATMUL", "FUSEC_MATMUL_MR", "FUSEC_MATMUL_NR"):
        monkeypatch.setenv(name, "0")
    assert [STAGE_PASSES[s](CompileOptions()) for s in ("tiled", "cpu")] == before


def test_unknown_gpu_is_refused():
    with pytest.raises(FusecError, match="unknown GPU 'a100'.*nvidia-h200"):
        CudaOptions(device="a100")
    with pytest.raises(FusecError, match="unknown GPU 'cpu'"):
        CudaOptions(device="cpu")


def test_unroll_threshold_reaches_opt_and_is_checked(monkeypatch, tmp_path):
    """--cpu-unroll-threshold is `opt`'s -unroll-threshold-aggressive (0: no flag, LLVM's
    own); a negative one is refused with the flag's name."""
    import fusec
    import numpy as np

    seen = []
    real = cpu_target._check_call

    def spy(cmd):
        seen.append(list(cmd))
        return real(cmd)

    monkeypatch.setattr(cpu_target, "_check_call", spy)
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    text = """
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %y = linalg.add ins(%x, %x : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}"""
    for threshold, flag in ((150, "-unroll-threshold-aggressive=150"),
                            (300, "-unroll-threshold-aggressive=300"), (0, None)):
        seen.clear()
        m = fusec.compile(text, cpu=CpuOptions(unroll_threshold=threshold))
        x = np.random.default_rng(threshold).standard_normal((4, 8)).astype(np.float32)
        assert np.allclose(m(x), 2 * x)
        opts = [c for c in seen if c[0].endswith("opt")]
        assert opts and all((flag in c) if flag else
                            not any(a.startswith("-unroll-threshold") for a in c) for c in opts)
    with pytest.raises(FusecError, match="--cpu-unroll-threshold: expected 0 or more"):
        CpuOptions(unroll_threshold=-1)
    assert CpuOptions().unroll_threshold == 150


def test_opt_pipeline_is_o3_without_the_dropped_passes(monkeypatch, tmp_path):
    """The kernels' `opt` runs -O3's own pipeline (as opt prints it) without
    OPT_DROPPED_PASSES: with none dropped, the printed pipeline gives the very bitcode -O3
    gives; with loop-load-elim dropped, that pass is gone and nothing else is."""
    import subprocess

    flags = (f"-mtriple={cpu_target.host_triple()}", f"-mcpu={cpu_target.target_cpu(None)}")
    monkeypatch.setattr(cpu_target, "OPT_DROPPED_PASSES", ())
    cpu_target.opt_pipeline.cache_clear()
    assert cpu_target.opt_pipeline(3, flags) == "-O3"
    opt = cpu_target.llvm_tool("opt")
    full = subprocess.run([opt, "-O3", *flags, "-print-pipeline-passes", "-disable-output",
                           "-"], input="", capture_output=True, text=True, check=True)
    printed = full.stdout.strip()
    assert ",loop-load-elim," in printed
    source = tmp_path / "k.ll"
    source.write_text("""
define void @k(ptr %a, ptr %b, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %pa = getelementptr float, ptr %a, i64 %i
  %x = load float, ptr %pa
  %i1 = add i64 %i, 1
  %pb = getelementptr float, ptr %b, i64 %i1
  %y = fadd float %x, 1.0
  store float %y, ptr %pb
  %done = icmp eq i64 %i1, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
""")
    outputs = []
    for how in (["-O3"], [f"-passes={printed}"]):
        out = tmp_path / f"k{len(outputs)}.bc"
        subprocess.run([opt, *how, *flags, str(source), "-o", str(out)], check=True)
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    monkeypatch.setattr(cpu_target, "OPT_DROPPED_PASSES", ("loop-load-elim",))
    cpu_target.opt_pipeline.cache_clear()
    dropped = cpu_target.opt_pipeline(3, flags)
    assert dropped.startswith("-passes=") and "loop-load-elim" not in dropped
    assert dropped[len("-passes="):] == printed.replace(",loop-load-elim,", ",")
    cpu_target.opt_pipeline.cache_clear()
