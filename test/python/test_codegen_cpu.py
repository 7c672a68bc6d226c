"""CPU code generation end to end: fusion-stage IR -> object file + plan -> run -> numerics.

Until the artifact (model.so) exists, the harness here links the kernels' object into a bare
shared library and runs the plan itself: buffers are numpy arrays, each launch's tiles are
run in a few chunks, last chunk first, as a thread pool might. Numerics against float64
references by relative norm error; kernel counts and grids are asserted as well.
"""

from __future__ import annotations

import ctypes
import itertools
import subprocess
from pathlib import Path

import numpy as np
import pytest
from fusec.compiler.targets import cpu as codegen_cpu
from fusec.compiler.targets.cpu.options import CpuOptions
from fusec.runtime.plan import Plan
from fusec.dialects import make_context
from fusec.passes import run_pipeline
from fusec.passes.cost_model import cpu_tile_sizes
from mlir import ir

# Small tiles so that these small tests still have many tiles on a 2-core machine; the
# tiling as given (no capacity fit), what these tests were written against.
# The plans here run on this file's own runner (`run_plan`), which has no weights' symbols
# to point constant buffers at: kernels read their weights as globals.
OPTIONS = CpuOptions(threads=4, min_tile_kb=1, fit=False, constant_args=False)


def compile_ir(text: str, tmp_path, options=OPTIONS, singletons: bool = False):
    """Compile fusion-stage IR; returns (plan, path of a shared library of the kernels)."""
    with make_context():
        module = ir.Module.parse(text)
        if singletons:
            run_pipeline(module, ["canonicalize", "cse", "fusion-form-singletons", "canonicalize"])
        obj = str(tmp_path / "kernels.o")
        plan = codegen_cpu.compile_cpu(module, obj, options)
    lib = str(tmp_path / "kernels.so")
    subprocess.run(["cc", "-shared", obj, "-o", lib, "-lm"], check=True)
    return plan, lib


def run_plan(plan: Plan, lib_path: str, inputs: list[np.ndarray], chunks: int = 3):
    """Run the plan's launches in order on numpy buffers; returns the outputs."""
    lib = ctypes.CDLL(lib_path)
    arrays = []
    for b in plan.buffers:
        if b.role == "input":
            arrays.append(np.ascontiguousarray(inputs[plan.inputs.index(b.id)], dtype=b.dtype))
        elif b.dtype.startswith("float"):
            arrays.append(np.full(b.shape, np.nan, dtype=b.dtype))  # unwritten shows as NaN
        else:
            arrays.append(np.full(b.shape, 7, dtype=b.dtype))
    for launch in plan.launches:
        kernel = getattr(lib, launch.symbol)
        kernel.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64, ctypes.c_int64]
        kernel.restype = None
        pointers = (ctypes.c_void_p * len(launch.buffers))(
            *[arrays[i].ctypes.data for i in launch.buffers])
        bounds = np.linspace(0, launch.grid, chunks + 1).astype(int)
        for lo, hi in reversed(list(itertools.pairwise(bounds))):
            if hi > lo:
                kernel(pointers, int(lo), int(hi))
    for b in plan.buffers:  # outputs that copy an input's bytes (the host code's memcpy)
        if b.copy_of is not None:
            arrays[b.id][...] = arrays[b.copy_of].reshape(b.shape)
    return [arrays[i] for i in plan.outputs]


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


def rand(*shape):
    return np.random.default_rng().standard_normal(shape).astype(np.float32)


# --- policy ----------------------------------------------------------------------------------


def test_tile_sizes_split_outer_dim_and_keep_reduction_whole():
    sizes = cpu_tile_sizes([1024, 4096], ["parallel", "reduction"], 4, 1, threads=8)
    assert sizes[1] == 0 and 0 < sizes[0] < 1024
    assert 1024 // sizes[0] >= 8 * 4 - 1  # about tiles_per_thread * threads tiles


def test_tile_sizes_small_problem_is_one_tile():
    assert cpu_tile_sizes([4, 8], ["parallel", "parallel"], 4, 2, threads=8) == [0, 0]


def test_tile_sizes_spill_to_inner_dim_when_outer_is_short():
    sizes = cpu_tile_sizes([2, 65536], ["parallel", "parallel"], 4, 2, threads=8)
    assert sizes[0] == 1 and 0 < sizes[1] < 65536


def test_tile_sizes_follow_an_explicit_dim_set():
    sizes = cpu_tile_sizes([64, 65536], ["parallel", "parallel"], 4, [1], threads=8)
    assert sizes[0] == 0 and 0 < sizes[1] < 65536


def test_tile_sizes_bound_tile_output_to_cache():
    # 8 MB of output: even with one thread, tiles stay within 256 KB each.
    sizes = cpu_tile_sizes([2048, 1024], ["parallel", "parallel"], 4, 2, threads=1)
    assert sizes[0] * 1024 * 4 <= 256 * 1024


def test_tile_sizes_respect_tileable_dims():
    sizes = cpu_tile_sizes([2, 65536], ["parallel", "parallel"], 4, 1, threads=8)
    assert sizes == [1, 0]


# --- hand-grouped IR -------------------------------------------------------------------------

ELEMENTWISE = """
func.func @main(%a: tensor<256x512xf32>, %b: tensor<256x512xf32>) -> tensor<256x512xf32> {
  %r = fusion.group vertical (%x = %a : tensor<256x512xf32>, %y = %b : tensor<256x512xf32>)
      -> tensor<256x512xf32> {
    %e = tensor.empty() : tensor<256x512xf32>
    %s = linalg.add ins(%x, %y : tensor<256x512xf32>, tensor<256x512xf32>)
                    outs(%e : tensor<256x512xf32>) -> tensor<256x512xf32>
    %m = linalg.mul ins(%s, %x : tensor<256x512xf32>, tensor<256x512xf32>)
                    outs(%e : tensor<256x512xf32>) -> tensor<256x512xf32>
    %x2 = linalg.exp ins(%m : tensor<256x512xf32>) outs(%e : tensor<256x512xf32>)
        -> tensor<256x512xf32>
    fusion.yield %x2 : tensor<256x512xf32>
  }
  return %r : tensor<256x512xf32>
}
"""


def test_elementwise_chain_one_kernel(tmp_path):
    plan, lib = compile_ir(ELEMENTWISE, tmp_path)
    assert len(plan.launches) == 1 and plan.launches[0].grid > 1
    assert plan.launches[0].kind == "vertical"
    assert plan.launches[0].ops == ["linalg.add", "linalg.mul", "linalg.exp"]
    a, b = rand(256, 512) * 0.5, rand(256, 512) * 0.5
    (out,) = run_plan(plan, lib, [a, b])
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert rel_err(out, np.exp((a64 + b64) * a64)) < 1e-5


SOFTMAX = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<96x1000xf32>) -> tensor<96x1000xf32> {
  %r = fusion.group reduction (%a = %x : tensor<96x1000xf32>) -> tensor<96x1000xf32> {
    %ninf = arith.constant 0xFF800000 : f32
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<96xf32>
    %f1 = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<96xf32>) -> tensor<96xf32>
    %mx = linalg.reduce ins(%a : tensor<96x1000xf32>) outs(%f1 : tensor<96xf32>) dimensions = [1]
      (%in: f32, %acc: f32) {
        %m = arith.maximumf %in, %acc : f32
        linalg.yield %m : f32
      }
    %e2 = tensor.empty() : tensor<96x1000xf32>
    %ex = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a, %mx : tensor<96x1000xf32>, tensor<96xf32>) outs(%e2 : tensor<96x1000xf32>) {
    ^bb0(%in: f32, %m: f32, %out: f32):
      %s = arith.subf %in, %m : f32
      %e = math.exp %s : f32
      linalg.yield %e : f32
    } -> tensor<96x1000xf32>
    %f2 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<96xf32>) -> tensor<96xf32>
    %sm = linalg.reduce ins(%ex : tensor<96x1000xf32>) outs(%f2 : tensor<96xf32>) dimensions = [1]
      (%in: f32, %acc: f32) {
        %s = arith.addf %in, %acc : f32
        linalg.yield %s : f32
      }
    %dv = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
        ins(%ex, %sm : tensor<96x1000xf32>, tensor<96xf32>) outs(%e2 : tensor<96x1000xf32>) {
    ^bb0(%in: f32, %s: f32, %out: f32):
      %d = arith.divf %in, %s : f32
      linalg.yield %d : f32
    } -> tensor<96x1000xf32>
    fusion.yield %dv : tensor<96x1000xf32>
  }
  return %r : tensor<96x1000xf32>
}
"""


def test_softmax_one_group_one_kernel_rows_whole(tmp_path):
    plan, lib = compile_ir(SOFTMAX, tmp_path)
    assert len(plan.launches) == 1
    launch = plan.launches[0]
    assert launch.grid > 1 and launch.info["tile_sizes"][1] == 0  # whole rows per tile
    assert [b.role for b in plan.buffers] == ["input", "output"]  # no temporaries
    x = rand(96, 1000) * 3
    (out,) = run_plan(plan, lib, [x])
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    assert rel_err(out, e / e.sum(1, keepdims=True)) < 1e-5


MATMUL_BIAS_RELU = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @main(%x: tensor<128x64xf32>, %w: tensor<64x96xf32>, %bias: tensor<96xf32>)
    -> tensor<128x96xf32> {
  %r = fusion.group epilogue (%a = %x : tensor<128x64xf32>, %b = %w : tensor<64x96xf32>,
                              %c = %bias : tensor<96xf32>) -> tensor<128x96xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<128x96xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<128x96xf32>) -> tensor<128x96xf32>
    %mm = linalg.matmul ins(%a, %b : tensor<128x64xf32>, tensor<64x96xf32>)
                        outs(%f : tensor<128x96xf32>) -> tensor<128x96xf32>
    %y = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
        ins(%mm, %c : tensor<128x96xf32>, tensor<96xf32>) outs(%e : tensor<128x96xf32>) {
    ^bb0(%v: f32, %bb: f32, %out: f32):
      %s = arith.addf %v, %bb : f32
      %z = arith.maximumf %s, %zero : f32
      linalg.yield %z : f32
    } -> tensor<128x96xf32>
    fusion.yield %y : tensor<128x96xf32>
  }
  return %r : tensor<128x96xf32>
}
"""


def test_matmul_bias_relu_one_kernel(tmp_path):
    plan, lib = compile_ir(MATMUL_BIAS_RELU, tmp_path)
    assert len(plan.launches) == 1 and plan.launches[0].grid > 1
    assert "linalg.matmul" in plan.launches[0].ops
    x, w, b = rand(128, 64), rand(64, 96), rand(96)
    (out,) = run_plan(plan, lib, [x, w, b])
    ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b, 0)
    assert rel_err(out, ref) < 1e-5


LAYERNORM = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @main(%x: tensor<64x256xf32>, %g: tensor<256xf32>, %bt: tensor<256xf32>)
    -> tensor<64x256xf32> {
  %r = fusion.group reduction (%a = %x : tensor<64x256xf32>, %gamma = %g : tensor<256xf32>,
                               %beta = %bt : tensor<256xf32>) -> tensor<64x256xf32> {
    %zero = arith.constant 0.0 : f64
    %n = arith.constant 256.0 : f64
    %eps = arith.constant 1.0e-5 : f64
    %er = tensor.empty() : tensor<64xf64>
    %z = linalg.fill ins(%zero : f64) outs(%er : tensor<64xf64>) -> tensor<64xf64>
    %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
        ins(%a : tensor<64x256xf32>) outs(%z : tensor<64xf64>) {
    ^bb0(%in: f32, %acc: f64):
      %w = arith.extf %in : f32 to f64
      %s = arith.addf %w, %acc : f64
      linalg.yield %s : f64
    } -> tensor<64xf64>
    %var = linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "reduction"]}
        ins(%a, %sum : tensor<64x256xf32>, tensor<64xf64>) outs(%z : tensor<64xf64>) {
    ^bb0(%in: f32, %s: f64, %acc: f64):
      %w = arith.extf %in : f32 to f64
      %mean = arith.divf %s, %n : f64
      %d = arith.subf %w, %mean : f64
      %sq = arith.mulf %d, %d : f64
      %t = arith.addf %sq, %acc : f64
      linalg.yield %t : f64
    } -> tensor<64xf64>
    %e = tensor.empty() : tensor<64x256xf32>
    %y = linalg.generic {indexing_maps = [#id, #row, #row, #col, #col, #id],
                         iterator_types = ["parallel", "parallel"]}
        ins(%a, %sum, %var, %gamma, %beta : tensor<64x256xf32>, tensor<64xf64>, tensor<64xf64>,
            tensor<256xf32>, tensor<256xf32>) outs(%e : tensor<64x256xf32>) {
    ^bb0(%in: f32, %s: f64, %v: f64, %gg: f32, %bb: f32, %out: f32):
      %w = arith.extf %in : f32 to f64
      %mean = arith.divf %s, %n : f64
      %vv = arith.divf %v, %n : f64
      %ve = arith.addf %vv, %eps : f64
      %rs = math.rsqrt %ve : f64
      %d = arith.subf %w, %mean : f64
      %nrm = arith.mulf %d, %rs : f64
      %nf = arith.truncf %nrm : f64 to f32
      %sc = arith.mulf %nf, %gg : f32
      %o = arith.addf %sc, %bb : f32
      linalg.yield %o : f32
    } -> tensor<64x256xf32>
    fusion.yield %y : tensor<64x256xf32>
  }
  return %r : tensor<64x256xf32>
}
"""


def test_layernorm_group_with_f64_statistics(tmp_path):
    plan, lib = compile_ir(LAYERNORM, tmp_path)
    assert len(plan.launches) == 1 and plan.launches[0].grid > 1
    assert plan.launches[0].info["tile_sizes"][1] == 0
    x, g, b = rand(64, 256) * 2 + 1, rand(256), rand(256)
    (out,) = run_plan(plan, lib, [x, g, b])
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * g + b
    assert rel_err(out, ref) < 1e-5


TRANSPOSE_BROADCAST = """
func.func @main(%x: tensor<64x48xf32>, %v: tensor<64xf32>) -> tensor<48x64xf32> {
  %r = fusion.group vertical (%a = %x : tensor<64x48xf32>, %b = %v : tensor<64xf32>)
      -> tensor<48x64xf32> {
    %e = tensor.empty() : tensor<48x64xf32>
    %t = linalg.transpose ins(%a : tensor<64x48xf32>) outs(%e : tensor<48x64xf32>)
        permutation = [1, 0]
    %bc = linalg.broadcast ins(%b : tensor<64xf32>) outs(%e : tensor<48x64xf32>) dimensions = [0]
    %s = linalg.sub ins(%t, %bc : tensor<48x64xf32>, tensor<48x64xf32>)
                    outs(%e : tensor<48x64xf32>) -> tensor<48x64xf32>
    fusion.yield %s : tensor<48x64xf32>
  }
  return %r : tensor<48x64xf32>
}
"""


def test_transpose_broadcast_group(tmp_path):
    plan, lib = compile_ir(TRANSPOSE_BROADCAST, tmp_path)
    assert len(plan.launches) == 1 and plan.launches[0].grid > 1
    x, v = rand(64, 48), rand(64)
    (out,) = run_plan(plan, lib, [x, v])
    assert rel_err(out, x.T.astype(np.float64) - v[None, :]) < 1e-6


MULTI_GROUP = """
func.func @main(%x: tensor<32x16x64xf32>, %y: tensor<512x64xf32>) -> (tensor<512x64xf32>, tensor<32x16x64xf32>) {
  %0 = fusion.group single (%a = %x : tensor<32x16x64xf32>) -> tensor<32x16x64xf32> {
    %e = tensor.empty() : tensor<32x16x64xf32>
    %t = linalg.exp ins(%a : tensor<32x16x64xf32>) outs(%e : tensor<32x16x64xf32>)
        -> tensor<32x16x64xf32>
    fusion.yield %t : tensor<32x16x64xf32>
  }
  %1 = fusion.group single (%a = %0 : tensor<32x16x64xf32>, %b = %y : tensor<512x64xf32>)
      -> tensor<512x64xf32> {
    %c = tensor.collapse_shape %a [[0, 1], [2]] : tensor<32x16x64xf32> into tensor<512x64xf32>
    %e = tensor.empty() : tensor<512x64xf32>
    %m = linalg.mul ins(%c, %b : tensor<512x64xf32>, tensor<512x64xf32>)
                    outs(%e : tensor<512x64xf32>) -> tensor<512x64xf32>
    fusion.yield %m : tensor<512x64xf32>
  }
  return %1, %x : tensor<512x64xf32>, tensor<32x16x64xf32>
}
"""


def test_multi_group_temp_view_and_identity_output(tmp_path):
    plan, lib = compile_ir(MULTI_GROUP, tmp_path)
    assert len(plan.launches) == 2
    roles = [b.role for b in plan.buffers]
    assert roles.count("temp") == 1  # exp's result; the collapse_shape is a view of it
    temp = roles.index("temp")
    assert temp in plan.launches[0].buffers and temp in plan.launches[1].buffers
    # `return %x`: the output keeps its own buffer and copies the input's bytes.
    assert plan.buffers[plan.outputs[1]].copy_of == plan.inputs[0]
    x, y = rand(32, 16, 64), rand(512, 64)
    out, same = run_plan(plan, lib, [x, y])
    assert rel_err(out, np.exp(x.astype(np.float64)).reshape(512, 64) * y) < 1e-6
    assert np.array_equal(same, x)


# --- torch-mlir output, one kernel per op ----------------------------------------------------


def _torch_ir(model, *inputs) -> str:
    fx = pytest.importorskip("torch_mlir.fx")
    module = fx.export_and_import(model, *inputs, output_type="linalg-on-tensors")
    return module.operation.get_asm(print_generic_op_form=True)


def _check_torch(model, inputs, tmp_path, tol=1e-5):

    plan, lib = compile_ir(_torch_ir(model, *inputs), tmp_path, singletons=True)
    outs = run_plan(plan, lib, [t.numpy() for t in inputs])
    refs = model.double()(*[t.double() for t in inputs])
    refs = refs if isinstance(refs, tuple) else (refs,)
    assert len(outs) == len(refs)
    for out, ref in zip(outs, refs):
        ref = ref.detach().numpy()
        if ref.dtype == bool:
            assert np.array_equal(out.astype(bool), ref)
        else:
            assert rel_err(out, ref) < tol
    assert any(launch.grid > 1 for launch in plan.launches)
    return plan


def test_torch_mlp_layernorm_softmax(tmp_path):
    torch = pytest.importorskip("torch")

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.ln = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32)
            self.l2 = torch.nn.Linear(32, 8)

        def forward(self, x):
            return torch.softmax(self.l2(torch.relu(self.ln(self.l1(x)))), -1)

    plan = _check_torch(Model().eval(), [torch.randn(4, 6, 16)], tmp_path)
    assert len(plan.launches) >= 10  # unfused baseline: one kernel per torch-mlir op
    assert any(b.dtype == "float64" for b in plan.buffers)  # LayerNorm's variance


def test_torch_conv_pool_bmm_pad_bool(tmp_path):
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)

        def forward(self, x, a, b):
            y = functional.avg_pool2d(functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2), 2)
            z = torch.bmm(a, b.transpose(1, 2))
            return y, z, functional.pad(a, (1, 2)) * 2.0, a.sum(-1) > 0, functional.gelu(a)

    inputs = [torch.randn(2, 3, 16, 16), torch.randn(3, 5, 7), torch.randn(3, 4, 7)]
    plan = _check_torch(Model().eval(), inputs, tmp_path)
    ops = {op for launch in plan.launches for op in launch.ops}
    assert {"linalg.conv_2d_nchw_fchw", "linalg.pooling_nchw_max", "linalg.batch_matmul",
            "tensor.pad"} <= ops


EXP_1D = """
func.func @main(%x: tensor<4096xf32>) -> tensor<4096xf32> {
  %r = fusion.group single (%a = %x : tensor<4096xf32>) -> tensor<4096xf32> {
    %e = tensor.empty() : tensor<4096xf32>
    %y = linalg.exp ins(%a : tensor<4096xf32>) outs(%e : tensor<4096xf32>) -> tensor<4096xf32>
    fusion.yield %y : tensor<4096xf32>
  }
  return %r : tensor<4096xf32>
}
"""


def test_fast_exp_accuracy_and_specials(tmp_path):
    plan, lib = compile_ir(EXP_1D, tmp_path)
    x = np.linspace(-87.0, 88.0, 4096).astype(np.float32)
    x[:6] = [-np.inf, np.inf, np.nan, 0.0, -100.0, 100.0]
    x[-3:] = [88.5, 88.7, 88.72]  # near the top of the float range
    (out,) = run_plan(plan, lib, [x])
    assert out[0] == 0.0 and out[1] == np.inf and np.isnan(out[2]) and out[3] == 1.0
    assert out[4] == np.float32(np.exp(-100.0)) > 0 and out[5] == np.inf  # a denormal
    ref = np.exp(x[6:].astype(np.float64))
    assert np.max(np.abs(out[6:] - ref) / ref) < 1e-6  # per element, about 1 ulp


def test_fast_exp_gives_denormals_as_torch_does(tmp_path):
    """exp between ln(2^-150) and ln(FLT_MIN) is a denormal (torch's and libm's); the
    polynomial flushed it to 0 below -88.37. Below -103.97 it rounds to 0."""
    plan, lib = compile_ir(EXP_1D, tmp_path)
    x = np.linspace(-103.9, -87.0, 4096).astype(np.float32)
    x[:4] = [-103.98, -104.0, -1e30, -103.97]
    (out,) = run_plan(plan, lib, [x])
    assert list(out[:3]) == [0.0, 0.0, 0.0] and out[3] == np.float32(2.0 ** -149)
    want = np.exp(x.astype(np.float64)).astype(np.float32)  # correctly rounded
    ulps = np.abs(out.view(np.int32) - want.view(np.int32))
    assert ulps.max() <= 1, x[np.argmax(ulps)]
    assert (out[4:] > 0).all()


HORIZONTAL_AND_SCALAR = """
func.func @main(%x: tensor<256x512xf32>, %w: tensor<64x128xf32>)
    -> (tensor<256x512xf32>, tensor<256x512xf32>, tensor<f32>) {
  %r:2 = fusion.group horizontal (%a = %x : tensor<256x512xf32>)
      -> (tensor<256x512xf32>, tensor<256x512xf32>) {
    %e = tensor.empty() : tensor<256x512xf32>
    %y = linalg.exp ins(%a : tensor<256x512xf32>) outs(%e : tensor<256x512xf32>)
        -> tensor<256x512xf32>
    %z = linalg.add ins(%y, %a : tensor<256x512xf32>, tensor<256x512xf32>)
                    outs(%e : tensor<256x512xf32>) -> tensor<256x512xf32>
    fusion.yield %y, %z : tensor<256x512xf32>, tensor<256x512xf32>
  }
  %s = fusion.group reduction (%a = %w : tensor<64x128xf32>) -> tensor<f32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<f32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
    %t = linalg.reduce ins(%a : tensor<64x128xf32>) outs(%f : tensor<f32>) dimensions = [0, 1]
      (%in: f32, %acc: f32) {
        %q = arith.addf %in, %acc : f32
        linalg.yield %q : f32
      }
    fusion.yield %t : tensor<f32>
  }
  return %r#0, %r#1, %s : tensor<256x512xf32>, tensor<256x512xf32>, tensor<f32>
}
"""


def test_two_output_group_stays_tiled_and_full_reduction_is_one_tile(tmp_path):
    plan, lib = compile_ir(HORIZONTAL_AND_SCALAR, tmp_path)
    assert len(plan.launches) == 2
    assert plan.launches[0].grid > 1  # the yielded intermediate is written tile by tile
    assert plan.launches[1].grid == 1  # nothing parallel to split in a full reduction
    assert plan.buffers[plan.outputs[2]].shape == []
    x, w = rand(256, 512), rand(64, 128) + 0.5
    y, z, s = run_plan(plan, lib, [x, w])
    x64 = x.astype(np.float64)
    assert rel_err(y, np.exp(x64)) < 1e-6 and rel_err(z, np.exp(x64) + x64) < 1e-6
    assert rel_err(s, np.array(w.astype(np.float64).sum())) < 1e-5


def test_torch_large_weights_leave_the_llvm_ir(tmp_path):
    torch = pytest.importorskip("torch")
    # 256x512 f32 weights (512 KB) are placed in the object by .incbin, not as IR literals.
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 64))
    plan = _check_torch(model.eval(), [torch.randn(32, 256)], tmp_path)
    assert len(plan.launches) >= 4
    symbols = subprocess.run([codegen_cpu.llvm_tool("llvm-nm"), str(tmp_path / "kernels.o")],
                             capture_output=True, text=True, check=True).stdout
    assert " R __constant_" in symbols  # the weights are read-only data of the object


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_large_16bit_weights_leave_the_llvm_ir(tmp_path, monkeypatch, dtype):
    """16-bit weights (no numpy view in the bindings) are read from the attribute's hex and
    placed by .incbin like any other: they were left in the LLVM IR as literals."""
    torch = pytest.importorskip("torch")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import fusec

    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    torch_dtype = getattr(torch, dtype)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 64)).to(torch_dtype).eval()
    x = torch.randn(32, 256).to(torch_dtype)
    compiled = fusec.compile(model, x)
    symbols = subprocess.run([codegen_cpu.llvm_tool("llvm-nm"), str(compiled.path)],
                             capture_output=True, text=True, check=True).stdout
    assert " r __constant_256x512x" in symbols.lower() or " R __constant_" in symbols
    view = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    got = np.asarray(compiled(x.view(torch.int16).numpy().view(view)), dtype=np.float64)
    own = model(x).double().detach().numpy()
    ref = model.double()(x.double()).detach().numpy()
    assert rel_err(got, ref) < max(1e-2, 4 * rel_err(own, ref))


def test_many_kernels_are_compiled_in_parts(tmp_path, monkeypatch):
    """Unfused, the transformer example is 50 distinct kernels: compiled in parts (one per core, at
    least KERNELS_PER_PART kernels each), every kernel in exactly one part, the parts joined
    into one object; the model computes what it computes in one part."""
    import fusec
    from fusec.compiler import driver
    from fusec.compiler.pipeline import CompileOptions, lower

    text = (Path(__file__).resolve().parents[2] / "examples" / "transformer" /
            "model.mlir").read_text()
    module = driver.parse(text, "transformer.mlir")
    lower(module, CompileOptions(fusion=False))
    parts = codegen_cpu.kernel_parts(module, cores=4)
    names = [name for part in parts for name in part]
    assert len(parts) == 4 and len(names) == len(set(names)) >= 4 * codegen_cpu.KERNELS_PER_PART
    assert all(name.startswith("fusec_kernel_") and not name.endswith("_body") for name in names)
    assert codegen_cpu.kernel_parts(module, cores=1) == [set(names)]
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    outputs = []
    for cores in (1, 4):
        monkeypatch.setattr(codegen_cpu.os, "cpu_count", lambda cores=cores: cores)
        compiled = fusec.compile(text, fusion=False, cache=False)
        assert len({k["symbol"] for k in compiled.kernels}) == len(names)
        rng = np.random.default_rng(3)
        inputs = [rng.standard_normal(s.shape).astype(s.numpy_dtype)
                  for s in compiled.signature.inputs]
        outputs.append(compiled(*inputs))
    assert np.array_equal(outputs[0], outputs[1])


def test_layers_differing_only_in_weights_are_one_kernel(tmp_path, monkeypatch):
    """Four Linear + LayerNorm + GELU layers of the same shape: their kernels differ only in
    the weights they read, which are kernel arguments (constant buffers naming the weights'
    globals), so the middle layers' kernels are one, launched per layer (the first reads
    the model's input and the last writes its output: kernels of their own)."""
    torch = pytest.importorskip("torch")
    import fusec

    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.GELU()) for _ in range(4)])
    model = model.eval()
    x = torch.randn(8, 64)
    compiled = fusec.compile(model, x)
    symbols = [k["symbol"] for k in compiled.kernels]
    assert len(symbols) == 4 and len(set(symbols)) == 3
    plan = compiled.metadata["plan"]
    constants = [b for b in plan["buffers"] if b["role"] == "constant"]
    assert len({b["symbol"] for b in constants}) >= 4 * 2  # each layer's weight and bias
    got = compiled(x.numpy())
    ref = model.double()(x.double()).detach().numpy()
    assert rel_err(got, ref) < 1e-5
