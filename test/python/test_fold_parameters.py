"""--fusion-fold-parameters: what a model computes from its parameters alone is computed at
compile time, bit for bit as a kernel would (IEEE's rounding op by op), and no kernel of
the plan reads only constants."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fusec
from fusec.dialects import make_context
from fusec.passes.constants import dense_floats
from fusec.passes.linalg.fold_parameters import fold_parameters
from fusec.passes.payload import bf16_bits, from_bf16_bits
from mlir import ir

_spec = importlib.util.spec_from_file_location(
    "fusec_bench_zoo_fp", Path(__file__).resolve().parents[2] / "bench" / "zoo.py")
zoo = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = zoo
_spec.loader.exec_module(zoo)

SCALE = """
#id = affine_map<(d0) -> (d0)>
func.func @f() -> tensor<{n}xf32> {{
  %var = arith.constant dense<"0x{hex}"> : tensor<{n}xbf16>
  %eps = arith.constant 1.000000e-05 : f64
  %one = arith.constant 1.000000e+00 : f32
  %e = tensor.empty() : tensor<{n}xf32>
  %w = linalg.generic {{indexing_maps = [#id, #id], iterator_types = ["parallel"]}}
      ins(%var : tensor<{n}xbf16>) outs(%e : tensor<{n}xf32>) {{
  ^bb0(%in: bf16, %o: f32):
    %f = arith.extf %in : bf16 to f32
    linalg.yield %f : f32
  }} -> tensor<{n}xf32>
  %r = linalg.generic {{indexing_maps = [#id, #id], iterator_types = ["parallel"]}}
      ins(%w : tensor<{n}xf32>) outs(%e : tensor<{n}xf32>) {{
  ^bb0(%in: f32, %o: f32):
    %t = arith.truncf %eps : f64 to f32
    %a = arith.addf %in, %t : f32
    %s = math.sqrt %a : f32
    %d = arith.divf %one, %s : f32
    %m = arith.mulf %d, %in : f32
    %x = arith.subf %m, %t : f32
    linalg.yield %x : f32
  }} -> tensor<{n}xf32>
  return %r : tensor<{n}xf32>
}}
"""


def test_folded_values_are_float32_arithmetic_bit_for_bit():
    """Each op of the body rounded to f32, as the kernel computes it: numpy's float32
    sequence of the same ops, compared by bits, over 4096 random variances (tiny to large:
    the roundings of add, sqrt, divide, multiply and subtract all exercised)."""
    rng = np.random.default_rng(7)
    n = 4096
    var = np.exp(rng.uniform(-12, 12, n)).astype(np.float32)
    bits = bf16_bits(var)
    text = SCALE.format(n=n, hex=bits.astype("<u2").tobytes().hex().upper())
    with make_context():
        module = ir.Module.parse(text)
        assert fold_parameters(module.operation) == 1  # (the widening is kept, read through)
        ret = [op for op in module.body.operations[0].regions[0].blocks[0].operations][-1]
        folded = dense_floats(ret.operands[0].owner.attributes["value"]).astype(np.float32)
    v = from_bf16_bits(bits).astype(np.float32)
    eps = np.float32(1e-5)
    d = np.float32(1) / np.sqrt(v + eps)
    expected = d * v - eps
    assert folded.view(np.uint32).tolist() == expected.view(np.uint32).tolist()


class ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(16)
        with torch.no_grad():  # running statistics far from 0 and 1
            self.bn.running_mean.uniform_(-2, 2)
            self.bn.running_var.uniform_(0.05, 4)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-1, 1)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv_batchnorm_matches_float64_with_its_parameters_folded(dtype, tmp_path):
    torch.manual_seed(0)
    model = ConvBN().eval().to(dtype)
    x = torch.randn(2, 8, 12, 12, generator=torch.Generator().manual_seed(3)).to(dtype)
    compiled = fusec.compile(model, x, cache=False, dump_dir=str(tmp_path))
    with torch.no_grad():
        ref = model.double()(x.double()).numpy()
        ours_torch = model.to(dtype)(x).double().numpy()
    out = compiled(x)
    out = out.double().numpy() if isinstance(out, torch.Tensor) else np.asarray(out, np.float64)
    err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    torch_err = np.linalg.norm(ours_torch - ref) / np.linalg.norm(ref)
    assert err < (1e-5 if dtype == torch.float32 else max(1e-2, 1.25 * torch_err)), err
    # The BatchNorm's scale is a constant of the linalg stage: no generic computes it.
    linalg = (tmp_path / "model.linalg.mlir").read_text()
    assert "math.sqrt" not in linalg


def test_no_gpu_kernel_reads_only_constants():
    """The small ResNet-18 in bf16 for the H200: its 20 BatchNorms' parameter arithmetic
    (the variances widened and 1 / sqrt(var + eps), the means, weights and biases widened)
    was a kernel per op of 32-512 threads, cut from its reader at the [C] -> [1, C, 1, 1]
    reshape: 113 kernels. The arithmetic is folded, the widenings fuse into their readers
    (`fusion-reshape-parameters`): 69 kernels, none under 4 KB; 66 since each BatchNorm
    joins the epilogue of the convolution before it instead of the next convolution's
    gather (`cost_model.conv_is_gemm`); 64 since the max pool stays out of layer1's 3x3
    gathers (`cost_model.window_joins_conv_gather`). Pinned: a change of plan shows."""
    model, inputs = zoo.ZOO["resnet18"].build("small")
    model = model.eval().to(torch.bfloat16)
    inputs = tuple(i.to(torch.bfloat16) for i in inputs)
    compiled = fusec.compile(model, inputs, target="cuda", cache=False)
    small = [k for k in compiled.kernels if k.get("info", {}).get("bytes", 1 << 30) < 4096]
    assert len(compiled.kernels) == 64, [k["ops"] for k in compiled.kernels]
    assert small == [], small


def test_a_linear_bias_stays_in_the_library_epilogue():
    """A bf16 Linear's bias is widened to f32 before the add: left as it is (not folded into
    an f32 constant), cuBLASLt takes it in its epilogue."""

    class LNLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(256)
            self.proj = torch.nn.Linear(256, 512)

        def forward(self, x):
            return self.proj(self.norm(x))

    torch.manual_seed(0)
    model = LNLinear().eval().to(torch.bfloat16)
    x = torch.randn(2048, 256).to(torch.bfloat16)
    compiled = fusec.compile(model, x, target="cuda", cache=False)
    why = [k["info"]["why"] for k in compiled.kernels if "why" in k.get("info", {})]
    assert len(compiled.kernels) == 2 and len(why) == 1, compiled.kernels
    # Ours is chosen at this size, with the bias in its epilogue; cuBLASLt, weighed beside
    # it, takes the bias in its own (with the bias folded to f32 it needed "the kernel after
    # it": at 16384 x 4096 -> 4096, where cuBLASLt wins, that was a third kernel).
    assert "epilogue bias" in why[0] and "kernel after it" not in why[0], why[0]


def test_parameters_as_inputs_fuse_into_their_readers():
    """The same ResNet-18 with its parameters as inputs of the artifact (as the torch.compile
    backend and bench/zoo_gpu.py pass them): BatchNorm's weight and bias cannot be folded,
    but their arithmetic computes in the [1, C, 1, 1] shape the normalisation reads
    (`fusion-reshape-parameters`), so it fuses there: 92 kernels before, 22 of them one op on
    a [C] vector; then 70, none under 4 KB (the classifier's bias is cuBLASLt's epilogue
    here); 67 since each BatchNorm is the epilogue of the convolution before it; 65 since
    the max pool stays out of layer1's 3x3 gathers."""
    wrap = importlib.util.spec_from_file_location(
        "fusec_bench_zoo_gpu_fp", Path(__file__).resolve().parents[2] / "bench" / "zoo_gpu.py")
    zoo_gpu = importlib.util.module_from_spec(wrap)
    sys.modules[wrap.name] = zoo_gpu
    wrap.loader.exec_module(zoo_gpu)
    model, inputs = zoo.ZOO["resnet18"].build("small")
    model = model.eval().to(torch.bfloat16)
    inputs = tuple(i.to(torch.bfloat16) for i in inputs)
    params = dict(model.named_parameters())
    wrapped = zoo_gpu.weights_as_inputs(model, list(params))
    with torch.no_grad():
        compiled = fusec.compile(wrapped, *[p.detach() for p in params.values()], *inputs,
                                 target="cuda", cache=False)
    small = [k for k in compiled.kernels if k.get("info", {}).get("bytes", 1 << 30) < 4096]
    assert len(compiled.kernels) == 65, [k["ops"] for k in compiled.kernels]
    assert small == [], small
