"""Scalars in models, zero-size contractions and signless uint8 inputs, end to end.

Scalar code in the model function (`int(t)`, `a + b` of numbers, `t.item()`) runs in 0-d
kernels (--fusion-scalars-to-tensors) and scalar results come back as Python numbers; a
contraction over a zero-size dimension is its init (--fusion-fold-empty-iterations); the e2e
tool passes torch.uint8 arrays for torch-mlir's signless i8 inputs unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusec


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))


SCALAR_ARITHMETIC = """
func.func @main(%a: tensor<f64>, %b: tensor<1x1xf64>, %i: tensor<i64>, %j: tensor<i64>)
    -> (f64, i64, i1, f64) {
  %c0 = arith.constant 0 : index
  %x = tensor.extract %a[] : tensor<f64>
  %y = tensor.extract %b[%c0, %c0] : tensor<1x1xf64>
  %s = arith.subf %x, %y : f64
  %d = arith.divf %s, %y : f64
  %r = math.sqrt %d : f64
  %m = tensor.extract %i[] : tensor<i64>
  %n = tensor.extract %j[] : tensor<i64>
  %p = arith.muli %m, %n : i64
  %q = arith.addi %p, %n : i64
  %g = arith.cmpi sgt, %m, %n : i64
  return %r, %q, %g, %y : f64, i64, i1, f64
}
"""


def test_scalar_arithmetic_returns_python_numbers():
    model = fusec.compile(SCALAR_ARITHMETIC)
    rng = np.random.default_rng(0)
    for _ in range(3):
        b = rng.uniform(0.5, 2.0, (1, 1))
        a = np.array(b[0, 0] * rng.uniform(1.5, 4.0))
        i, j = rng.integers(-50, 50, 2)
        r, q, g, y = model(a, b, np.array(i), np.array(j))
        assert (type(r), type(q), type(g), type(y)) == (float, int, bool, float)
        ref = math.sqrt((float(a) - b[0, 0]) / b[0, 0])
        assert abs(r - ref) / abs(ref) < 1e-15
        assert q == int(i) * int(j) + int(j) and g == (i > j) and y == b[0, 0]
    # Metadata marks the scalar outputs; kernels computed them (none is a host copy).
    assert all(o.get("scalar") for o in model.metadata["outputs"])
    assert len(model.kernels) >= 1


CAPTURED = """
func.func @main(%x: tensor<64x32xf32>, %t: tensor<f32>) -> (tensor<64x32xf32>, tensor<f32>) {
  %v = tensor.extract %t[] : tensor<f32>
  %e = math.exp %v : f32
  %k = arith.constant 0.25 : f64
  %h = arith.truncf %k : f64 to f32
  %0 = tensor.empty() : tensor<64x32xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                        affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<64x32xf32>) outs(%0 : tensor<64x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %e : f32
    %n = arith.addf %m, %h : f32
    linalg.yield %n : f32
  } -> tensor<64x32xf32>
  %z = tensor.empty() : tensor<f32>
  %2 = linalg.fill ins(%e : f32) outs(%z : tensor<f32>) -> tensor<f32>
  return %1, %2 : tensor<64x32xf32>, tensor<f32>
}
"""


def test_scalar_captured_by_a_kernel_matches_float64():
    model = fusec.compile(CAPTURED)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    t = np.array(rng.uniform(-1, 1), np.float32)
    out, filled = model(x, t)
    ref = x.astype(np.float64) * math.exp(float(t)) + 0.25
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-6
    # A fill that returns a 0-d tensor stays an array: only scalar results become numbers.
    assert isinstance(filled, np.ndarray) and abs(filled - math.exp(float(t))) < 1e-6


ZERO_K = """
func.func @main(%a: tensor<5x0xf32>, %b: tensor<0x10xf32>, %c: tensor<5x10xf32>)
    -> tensor<5x10xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<5x10xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<5x10xf32>) -> tensor<5x10xf32>
  %m = linalg.matmul ins(%a, %b : tensor<5x0xf32>, tensor<0x10xf32>)
                     outs(%f : tensor<5x10xf32>) -> tensor<5x10xf32>
  %0 = tensor.empty() : tensor<5x10xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                        affine_map<(d0, d1) -> (d0, d1)>,
                                        affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%m, %c : tensor<5x10xf32>, tensor<5x10xf32>) outs(%0 : tensor<5x10xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %s = arith.addf %p, %q : f32
    linalg.yield %s : f32
  } -> tensor<5x10xf32>
  return %r : tensor<5x10xf32>
}
"""


def test_zero_size_contraction_is_its_init():
    model = fusec.compile(ZERO_K)
    c = np.random.default_rng(2).standard_normal((5, 10)).astype(np.float32)
    out = model(np.empty((5, 0), np.float32), np.empty((0, 10), np.float32), c)
    np.testing.assert_array_equal(out, c)  # mm over K = 0 is zeros, plus c
    assert len(model.kernels) == 1
    assert "linalg.matmul" not in model.kernels[0]["ops"]


UINT8_TO_F32 = """
func.func @main(%x: tensor<4x8xi8>) -> tensor<4x8xf32> {
  %0 = tensor.empty() : tensor<4x8xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                        affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xi8>) outs(%0 : tensor<4x8xf32>) {
  ^bb0(%in: i8, %out: f32):
    %f = arith.uitofp %in : i8 to f32
    linalg.yield %f : f32
  } -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}
"""


def test_uint8_arrays_for_signless_i8_inputs():
    from fusec.tools.torch_mlir_e2e import FusecInvoker, signless_inputs

    model = fusec.compile(UINT8_TO_F32)
    x = np.random.default_rng(3).integers(0, 256, (4, 8)).astype(np.uint8)
    # The runtime itself stays exact: an int8 input is not a uint8 array.
    with pytest.raises(ValueError, match="expected dtype int8, got uint8"):
        model(x)
    # The e2e invoker's arrays come from torch tensors: uint8 there means torch.uint8, and
    # torch-mlir's i8 holds its bits; they pass unchanged (values above 127 included).
    out = FusecInvoker(model).AnyName(x)
    np.testing.assert_array_equal(out, x.astype(np.float32))
    assert (x > 127).any()
    # Only uint8 for int8 is reinterpreted; other mismatches still reach the runtime's check.
    passed = signless_inputs((x.astype(np.uint16),), model.signature.inputs)
    assert passed[0].dtype == np.uint16
    with pytest.raises(ValueError, match="expected dtype int8, got uint16"):
        FusecInvoker(model).AnyName(x.astype(np.uint16))
