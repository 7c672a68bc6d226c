"""test/gpu/e2e_cuda.py's judge, here (the runs are on the H200): the suite's rules for a
result against its golden value: tensors by shape, dtype and allclose (rtol 1e-3, atol
1e-7, NaN equal), one-element tuples unwrapped, floats to 1e-4 relative, ints exactly."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

_spec = importlib.util.spec_from_file_location(
    "e2e_cuda", Path(__file__).resolve().parents[1] / "gpu" / "e2e_cuda.py")
e2e_cuda = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(e2e_cuda)
mismatch = e2e_cuda.mismatch


def test_tensors_close_shape_dtype_and_nans():
    g = torch.tensor([1.0, 2.0, float("nan")])
    assert mismatch(g * (1 + 5e-4), g) is None
    assert "not close" in mismatch(g * (1 + 5e-3), g)
    assert "shape" in mismatch(g[:2], g)
    assert "dtype" in mismatch(g.double(), g)
    assert mismatch((g,), g) is None  # a one-element tuple is its element
    assert "[1]" in mismatch((g, g + 1), (g, g))


def test_scalars():
    assert mismatch(1.00005, 1.0) is None
    assert mismatch(1.001, 1.0) is not None
    assert mismatch(3, 3) is None and mismatch(3, 4) is not None
    assert mismatch(True, True) is None and mismatch(1, True) is not None
    assert mismatch(1.0, 1) is not None
