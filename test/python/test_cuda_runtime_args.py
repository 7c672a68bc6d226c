"""fusec.runtime's argument checks for a CUDA artifact, on a machine without a GPU.

A CUDA model.so loads anywhere (libcuda.so.1 is opened only when it runs); every check below
fails before any driver call, with a ValueError that names the argument. The GPU side (torch,
CuPy, DLPack, numpy copies, out=, stream=, graph=True) is tested in test/gpu on the H200.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ir = pytest.importorskip("mlir.ir")

from fusec import runtime  # noqa: E402
from fusec.compiler.targets import cuda as cg  # noqa: E402
from fusec.compiler import pipeline as pl  # noqa: E402
from fusec.dialects import make_context  # noqa: E402

LINEAR_RELU = """
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @main(%x: tensor<8x16xf32>, %w: tensor<32x16xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e0 = tensor.empty() : tensor<16x32xf32>
  %e1 = tensor.empty() : tensor<8x32xf32>
  %wt = linalg.transpose ins(%w : tensor<32x16xf32>) outs(%e0 : tensor<16x32xf32>) permutation = [1, 0]
  %f = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm = linalg.matmul ins(%x, %wt : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  %biased = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%mm, %b : tensor<8x32xf32>, tensor<32xf32>) outs(%e1 : tensor<8x32xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %s = arith.addf %in, %in_0 : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  %relu = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%biased : tensor<8x32xf32>) outs(%e1 : tensor<8x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.cmpf ugt, %in, %zero : f32
    %r = arith.select %c, %in, %zero : f32
    linalg.yield %r : f32
  } -> tensor<8x32xf32>
  return %relu : tensor<8x32xf32>
}
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("cuda") / "linear_relu.so"
    with make_context() as ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(LINEAR_RELU)
        options = pl.CompileOptions(target="cuda", model_name="linear_relu")
        pl.lower(module, options)
        pl.build_so(module, options, str(path))
    return runtime.load(path)


def test_the_linear_relu_is_one_cublaslt_call(model) -> None:
    (launch,) = model.kernels
    assert launch["info"]["path"] == "gemm"
    assert model.metadata["plan"]["launches"][0]["gemm"]["epilogue"] == "relu_bias"
    assert model.target == "cuda"


def test_cpu_torch_tensor_is_refused_by_name(model) -> None:
    x, w, b = torch.randn(8, 16), torch.randn(32, 16), torch.randn(32)
    with pytest.raises(ValueError, match=r"input 0 \('input0'\): a torch tensor on cpu"):
        model(x, w, b)
    with pytest.raises(ValueError, match=r"out\[0\]: a torch tensor on cpu"):
        model(np.zeros((8, 16), np.float32), np.zeros((32, 16), np.float32),
              np.zeros(32, np.float32), out=torch.empty(8, 32))


def test_count_dtype_and_shape_errors_name_the_argument(model) -> None:
    x = np.ones((8, 16), np.float32)
    w = np.ones((32, 16), np.float32)
    b = np.ones(32, np.float32)
    with pytest.raises(ValueError, match=r"takes 3 inputs"):
        model(x, w)
    with pytest.raises(ValueError, match=r"input 1 \('input1'\): expected dtype float32"):
        model(x, w.astype(np.float64), b)
    with pytest.raises(ValueError, match=r"input 2 \('input2'\): expected shape \(32,\)"):
        model(x, w, b[:31])


class FakeCudaArray:
    """Just enough of __cuda_array_interface__ for the checks made before any driver call."""

    def __init__(self, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (0, False), "version": 3}


def test_cuda_array_interface_checks(model) -> None:
    w, b = FakeCudaArray((32, 16)), FakeCudaArray((32,))
    with pytest.raises(ValueError, match=r"input 0 .*expected dtype float32, got float64"):
        model(FakeCudaArray((8, 16), "<f8"), w, b)
    with pytest.raises(ValueError, match=r"input 0 .*expected shape \(8, 16\)"):
        model(FakeCudaArray((16, 8)), w, b)
    with pytest.raises(ValueError, match=r"input 0 .*not C-contiguous"):
        model(FakeCudaArray((8, 16), strides=(4, 32)), w, b)


def test_stream_and_cpu_only_arguments(model, tmp_path) -> None:
    x = np.ones((8, 16), np.float32)
    with pytest.raises(ValueError, match=r"stream: expected a CUstream"):
        model(x, np.ones((32, 16), np.float32), np.ones(32, np.float32), stream="default")
    cpu = tmp_path / "cpu.so"
    with make_context() as ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(NEGATE)
        options = pl.CompileOptions(target="cpu", model_name="cpu")
        pl.lower(module, options)
        pl.build_so(module, options, str(cpu))
    with pytest.raises(ValueError, match=r"stream= and graph= are for cuda artifacts"):
        runtime.load(cpu)(x, graph=True)


NEGATE = """
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %e = tensor.empty() : tensor<8x16xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %n = arith.negf %in : f32
    linalg.yield %n : f32
  } -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
"""


def test_gemm_table_is_column_major(model) -> None:
    """D^T = B^T A^T: cuBLASLt's A is the weight, stored [N, K] and transposed (op T)."""
    from fusec.runtime.plan import Plan

    launch = Plan.from_json_dict(model.metadata["plan"]).launches[0]
    t = cg.gemm_table(launch, None)
    # in/out type f32, op A = T (weight [32, 16] is col-major [16, 32]), op B = N.
    assert t[:4] == [0, 0, 1, 0]
    assert t[4:7] == [16, 32, 16] and t[7:10] == [16, 8, 16] and t[10:12] == [32, 8]
    assert t[13] == cg.CUBLASLT_EPILOGUES["relu_bias"] and t[14] == 1


def test_numpy_inputs_make_a_context_current_before_allocating(model, monkeypatch) -> None:
    """numpy alone in a fresh process: no context is current until the runtime makes device
    0's primary one current, which must come before its first cuMemAlloc (the e2e suite on the
    H200 found CUDA_ERROR_INVALID_CONTEXT)."""
    from fusec.runtime import cuda as rt_cuda

    calls = []

    class Stop(Exception):
        pass

    def current_device(cls=None):
        calls.append("context")
        return 0

    def alloc(nbytes):
        calls.append("alloc")
        raise Stop

    monkeypatch.setattr(rt_cuda._Driver, "current_device", classmethod(lambda cls: current_device()))
    monkeypatch.setattr(rt_cuda._Driver, "alloc", classmethod(lambda cls, n: alloc(n)))
    monkeypatch.setattr(rt_cuda._Driver, "free", classmethod(lambda cls, p: None))
    x = np.random.rand(8, 16).astype(np.float32)
    w = np.random.rand(32, 16).astype(np.float32)
    b = np.random.rand(32).astype(np.float32)
    with pytest.raises(Stop):
        model(x, w, b)
    assert calls[:2] == ["context", "alloc"]
