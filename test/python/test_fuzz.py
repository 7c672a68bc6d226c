"""Differential fuzzing in CI: a few random graphs, fusion on and off, against float64.

A fixed, derandomized set of hypothesis examples (the generator is `fusec.tools.fuzz`), small
enough to stay well under a minute on two cores; `python -m fusec.tools.fuzz --examples 500`
runs as many as you like. Found failures are kept in test_fuzz_regressions.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from fusec.tools import fuzz

pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

EXAMPLES = 6


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Compile into a fresh cache: a stale artifact must not hide a compiler change."""
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))


@settings(derandomize=True, max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(fuzz.programs(max_ops=6))
def test_random_graphs_fused_and_unfused_match_float64(program):
    summary = fuzz.check_program(program)
    assert summary["kernels"]["fused"] <= summary["kernels"]["unfused"]


def test_check_program_catches_wrong_numbers(monkeypatch):
    """The oracle can fail: a compiled result that is off by 1e-3 is reported."""
    import fusec

    real_compile = fusec.compile

    class Skewed:
        def __init__(self, compiled):
            self.compiled, self.kernels = compiled, compiled.kernels

        def __call__(self, *inputs):
            return self.compiled(*inputs) * np.float32(1.001)

    monkeypatch.setattr(fusec, "compile", lambda *a, **k: Skewed(real_compile(*a, **k)))
    program = fuzz.Program(inputs=((4, 8),), ops=(("tanh", (0,), ()),), outputs=(1,))
    with pytest.raises(fuzz.FuzzFailure, match="numerics"):
        fuzz.check_program(program)


def test_generated_programs_are_valid_and_bounded():
    """Every generated program has consistent shapes and a reproducer that parses."""
    seen = []

    @settings(derandomize=True, max_examples=50, deadline=None, database=None)
    @given(fuzz.programs())
    def collect(program):
        shapes = fuzz.value_shapes(program)  # raises if an op does not fit its operands
        assert len(shapes) == len(program.inputs) + len(program.ops)
        assert all(0 <= i < len(shapes) for i in program.outputs)
        compile(fuzz.to_python(program), "<reproducer>", "exec")  # the reproducer is Python
        seen.append(program)

    collect()
    assert len(seen) == 50
