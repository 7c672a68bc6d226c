"""bench/cpu.py runs one tiny workload end to end and writes well-formed JSON.

No timing is asserted (the machine is shared); what is checked is that every variant ran or
its failure was recorded, that fusec's numbers agree with float64 torch, and that the table
and the JSON carry what the RESULTS.md section is made from.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "cpu.py"


def test_bench_cpu_quick_softmax(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    env = dict(os.environ, FUSEC_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--no-inductor", "--threads", "1",
         "--only", "softmax", "--json", str(out)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| softmax |" in proc.stdout

    data = json.loads(out.read_text())
    info = data["info"]
    assert info["threads"] == 1 and info["copy_bandwidth_GBps"] > 0
    [row] = data["results"]
    assert row["name"] == "softmax"
    assert row["failure"] == {}, row["failure"]
    for variant in ("eager", "fusec", "fusec_out", "fusec_unfused"):
        assert row["ms"][variant] > 0 and row["calls"][variant] >= 2
    assert "inductor" not in row["ms"]
    # fusec's output against float64 torch, on fresh inputs, fused and unfused.
    assert row["err"]["fusec"] < 1e-5 and row["err"]["fusec_unfused"] < 1e-5
    assert row["threads"]["fusec"] == 1
    # softmax is one kernel fused and several unfused (issue 4's target).
    assert row["kernels"]["fusec"] == 1 < row["kernels"]["fusec_unfused"]
    # 64x512 fp32 read and written once.
    assert row["floor_bytes"] == 2 * 64 * 512 * 4


def test_bench_compile_time_one_model(tmp_path: Path) -> None:
    """bench/compile_time.py compiles a zoo model and reports its kernels and the parts the
    time went to (no time asserted)."""
    script = BENCH.parent / "compile_time.py"
    env = dict(os.environ, FUSEC_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, str(script), "--only", "top2_moe", "--repeats", "1", "--stages"],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [row] = [line for line in proc.stdout.splitlines() if line.startswith("| top2_moe |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "12"  # kernels, as test_zoo pins them
    assert float(cells[2]) > 0
    for part in ("import", "linalg", "fusion", "tiled", "bufferized", "cpu", "object"):
        assert f"{part} " in cells[4]
    bad = subprocess.run([sys.executable, str(script), "--only", "no_such_model"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode != 0 and "unknown zoo model" in bad.stderr


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas here")
def test_bench_gemm_epilogue_builds_its_variants(tmp_path: Path) -> None:
    """bench/gemm_epilogue.py builds GPT-2's fc with a GELU epilogue as our GEMM, one kernel,
    at the model's epilogue unroll and at a forced one (a different kernel), and leaves
    the model's unroll as it was."""
    import importlib.util

    from fusec.passes import gemm_cost

    spec = importlib.util.spec_from_file_location("fusec_bench_gemm_epilogue",
                                                  BENCH.parent / "gemm_epilogue.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model_unroll, model_prefer = gemm_cost.tc_epilogue_unroll, gemm_cost.prefer_tc_gemm
    metas = [mod.build(tmp_path / f"u{u}", u, ["gelu"])["gelu"] for u in (0, 2)]
    assert gemm_cost.tc_epilogue_unroll is model_unroll
    assert gemm_cost.prefer_tc_gemm is model_prefer
    for meta in metas:
        assert [k["kind"] for k in meta["kernels"]] == ["epilogue"]
        assert [k["info"]["path"] for k in meta["kernels"]] == ["tc_gemm"]
    images = [(tmp_path / f"u{u}" / f"gelu_u{u}.so").read_bytes() for u in (0, 2)]
    assert images[0] != images[1]
