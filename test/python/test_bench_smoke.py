"""bench/cpu.py runs one tiny workload end to end and writes well-formed JSON.

No timing is asserted (the machine is shared); what is checked is that every variant ran or
its failure was recorded, that fusec's numbers agree with float64 torch, and that the table
and the JSON carry what the RESULTS.md section is made from.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

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
