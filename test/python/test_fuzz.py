"""Differential fuzzing in CI: a few random graphs, fusion on and off, against float64.

A fixed, derandomized set of hypothesis examples (the generator is `fusec.tools.fuzz`), small
enough to stay well under a minute on two cores; `python -m fusec.tools.fuzz --examples 500`
runs as many as you like. Found failures are kept in test_fuzz_regressions.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from fusec.tools import fuzz
from hypothesis import HealthCheck, example, given, settings

pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

EXAMPLES = 10


def example_each(programs):
    """Apply hypothesis's @example for each program."""

    def decorate(test):
        for program in programs:
            test = example(program)(test)
        return test

    return decorate


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Compile into a fresh cache: a stale artifact must not hide a compiler change."""
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))


# Derandomized hypothesis starts with the simplest programs; these explicit ones make sure CI
# always covers the patterns where fusion is hardest (reduce-then-broadcast, contraction
# epilogues, normalisation before a contraction, views), at sizes that the CPU code tiles.
P = fuzz.Program
PATTERNS = [
    # manual softmax over rows: amax, sub (broadcast), exp, sum, div
    P(inputs=((65, 33),), ops=(("amax", (0,), (1, True)), ("sub", (0, 1), ()),
                                ("exp", (2,), ()), ("sum", (3,), (1, True)),
                                ("mul", (3, 4), ())), outputs=(5,)),
    # layernorm then linear then gelu, with the normalised value as a second output
    P(inputs=((17, 129), (129, 16), (16,)), ops=(("layernorm", (0,), ()),
                                                 ("linear", (3, 1, 2), ()),
                                                 ("gelu", (4,), ())), outputs=(5, 3)),
    # batched matmul, transpose, reshape, mean over an axis without keepdim
    P(inputs=((4, 16, 8), (4, 8, 33)), ops=(("matmul", (0, 1), ()),
                                           ("transpose", (2,), (1, 2)),
                                           ("reshape", (3,), ((4, 33 * 16),)),
                                           ("mean", (4,), (0, False))), outputs=(5,)),
    # elementwise chain with a broadcast input and a max reduction to a 0-d tensor
    P(inputs=((257, 8), (8,)), ops=(("div", (0, 1), ()), ("tanh", (2,), ()),
                                    ("maximum", (3, 1), ()), ("amax", (4,), (0, False)),
                                    ("amin", (5,), (0, False))), outputs=(6, 4)),
    # a 0-d graph input broadcast against reductions to 0-d (the harness once crashed here:
    # numpy gives scalars, not arrays, for 0-d shapes)
    P(inputs=((1, 1), ()), ops=(("sum", (0,), (0, False)), ("sum", (2,), (0, False)),
                                ("neg", (3,), ()), ("add", (4, 1), ())), outputs=(5,)),
]


@settings(derandomize=True, max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(fuzz.programs(max_ops=6))
@example_each(PATTERNS)
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
