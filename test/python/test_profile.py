"""The CPU runtime's per-launch profile (`Module.profile`, `fusec --profile RUNS`)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import fusec


class LayerNormLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(256)
        self.linear = torch.nn.Linear(256, 512)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(self.norm(x)))


MODEL_PY = """
import torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(256)
        self.linear = torch.nn.Linear(256, 512)
    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(self.norm(x)))
def model():
    return M()
def example_inputs():
    return (torch.randn(64, 256),)
"""


@pytest.fixture(scope="module")
def compiled():
    return fusec.compile(LayerNormLinear().eval(), torch.randn(64, 256), cache=False)


def test_profile_counts_each_launch(compiled):
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    compiled(x)
    compiled.profile(reset=True)
    assert compiled.profile() == []  # no run since the reset
    for _ in range(3):
        compiled(x)
    rows = compiled.profile(reset=False)
    kernels = compiled.kernels
    assert len(kernels) >= 2
    assert [r["symbol"] for r in rows] == [k["symbol"] for k in kernels]
    assert all(r["ms"] > 0 for r in rows)
    assert abs(sum(r["share"] for r in rows) - 1.0) < 1e-9
    # Read without a reset, the counts stay: the same numbers again, then the reset
    # (the default) leaves nothing.
    again = compiled.profile()
    assert [r["ms"] for r in again] == [r["ms"] for r in rows]
    assert compiled.profile() == []


def test_profile_reads_no_more_than_the_metadata(compiled):
    """The shim's slots are per launch in plan order: a count that disagrees with the
    metadata would be a broken artifact, and is an error, not a silent misattribution."""
    x = np.ones((64, 256), np.float32)
    compiled(x)
    rows = compiled.profile()
    assert len(rows) == len(compiled.kernels)


def test_cli_profile_prints_every_launch(tmp_path):
    src = tmp_path / "model.py"
    src.write_text(MODEL_PY)
    out = tmp_path / "m.so"
    result = subprocess.run(
        [sys.executable, "-m", "fusec.tools.fusec", str(src), "-o", str(out), "--profile", "5"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("fusec: profile of 5 runs on "), result.stdout
    kernels = len(fusec.runtime.load(out).kernels)
    table = [line for line in lines[2:] if line.strip()]
    assert len(table) == kernels
    assert sorted(int(line.split()[0]) for line in table) == list(range(kernels))
    times = [float(line.split()[1]) for line in table]
    assert times == sorted(times, reverse=True)  # slowest first


@pytest.mark.parametrize("args,message", [
    (["--profile", "-2"], "the number of runs must be positive"),
    (["--profile", "3", "--target", "cuda"], "--profile times the CPU target's launches"),
    (["--profile", "3", "-o", "-"], "give -o a file"),
])
def test_cli_profile_refuses(args, message, tmp_path):
    src = tmp_path / "model.py"
    src.write_text(MODEL_PY)
    cmd = [sys.executable, "-m", "fusec.tools.fusec", str(src)] + args
    if "-o" not in args:
        cmd += ["-o", str(tmp_path / "m.so")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "m.so").exists()
