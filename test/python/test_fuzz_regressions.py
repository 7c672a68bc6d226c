"""Failures found by the differential fuzzer (`python -m fusec.tools.fuzz`), shrunk, kept.

Each case is the shrunk program hypothesis printed, checked exactly as the fuzzer checks it
(fusion on and off, against float64, kernel counts). A case not fixed yet is marked
xfail(strict=True) with its cause: the suite stays green, and the fix shows up as an XPASS
that fails the run until the mark is removed.
"""

from __future__ import annotations

import pytest
from fusec.tools import fuzz

pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

Program = fuzz.Program


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))


OUTPUT_VIEW_OF_INPUT = (
    "an output that is only a reshape (tensor.collapse_shape/expand_shape) of a graph input is "
    "planned as the input buffer itself: the artifact's output has the input's shape "
    "(plan outputs=[input buffer]; passes/cpu_plan.py). Also seen in torch-mlir's e2e suite: "
    "CollapseStaticModule_basic."
)

CASES = [
    # Found by `python -m fusec.tools.fuzz --examples 300 --seed 100` (2026-11-29), shrunk:
    #     def forward(self, x0):            # x0: (1,)
    #         return x0.reshape((1, 1))     # fusec returns shape (1,)
    pytest.param(
        Program(inputs=((1,),), ops=(("reshape", (0,), ((1, 1),)),), outputs=(1,)),
        id="reshape-of-input-as-output-expand",
        marks=pytest.mark.xfail(strict=True, raises=fuzz.FuzzFailure,
                                reason=OUTPUT_VIEW_OF_INPUT),
    ),
    # The same bug through collapse_shape, as in the e2e suite's CollapseStaticModule_basic:
    #     return x0.reshape((2, 12))        # x0: (2, 3, 4); fusec returns shape (2, 3, 4)
    pytest.param(
        Program(inputs=((2, 3, 4),), ops=(("reshape", (0,), ((2, 12),)),), outputs=(1,)),
        id="reshape-of-input-as-output-collapse",
        marks=pytest.mark.xfail(strict=True, raises=fuzz.FuzzFailure,
                                reason=OUTPUT_VIEW_OF_INPUT),
    ),
]


@pytest.mark.parametrize("program", CASES)
def test_fuzz_regression(program):
    fuzz.check_program(program)
