"""CUDA code generation without a GPU: kernels, launch shapes, PTX text, the model.so ABI.

Numerics on the GPU are in test/gpu (run on the H200 through the device tool).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import re
from pathlib import Path

import mlir.ir as ir
import pytest

from fusec.compiler.targets import cuda as cg
from fusec.dialects import make_context
from fusec.passes.grouping import form_group, is_compute

ELEMENTWISE = """
#id = affine_map<(d0) -> (d0)>
func.func @main(%x: tensor<1048576xf32>, %y: tensor<1048576xf32>) -> tensor<1048576xf32> {
  %c2 = arith.constant 2.0 : f32
  %e = tensor.empty() : tensor<1048576xf32>
  %a = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %y : tensor<1048576xf32>, tensor<1048576xf32>) outs(%e : tensor<1048576xf32>) {
  ^bb0(%i: f32, %j: f32, %o: f32):
    %m = arith.mulf %i, %c2 : f32
    %s = arith.addf %m, %j : f32
    linalg.yield %s : f32
  } -> tensor<1048576xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<1048576xf32>) outs(%e : tensor<1048576xf32>) {
  ^bb0(%i: f32, %o: f32):
    %t = math.tanh %i : f32
    linalg.yield %t : f32
  } -> tensor<1048576xf32>
  return %b : tensor<1048576xf32>
}
"""

# softmax over rows of 1000 (not a multiple of the block: the last chunk is partial).
SOFTMAX = """
#map = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<%Rx1000xf32>) -> tensor<%Rx1000xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<%Rxf32>
  %mx0 = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<%Rxf32>) -> tensor<%Rxf32>
  %mx = linalg.generic {indexing_maps = [#map, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<%Rx1000xf32>) outs(%mx0 : tensor<%Rxf32>) {
  ^bb0(%i: f32, %o: f32):
    %m = arith.maximumf %i, %o : f32
    linalg.yield %m : f32
  } -> tensor<%Rxf32>
  %e2 = tensor.empty() : tensor<%Rx1000xf32>
  %ex = linalg.generic {indexing_maps = [#map, #row, #map],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x, %mx : tensor<%Rx1000xf32>, tensor<%Rxf32>) outs(%e2 : tensor<%Rx1000xf32>) {
  ^bb0(%i: f32, %m: f32, %o: f32):
    %d = arith.subf %i, %m : f32
    %v = math.exp %d : f32
    linalg.yield %v : f32
  } -> tensor<%Rx1000xf32>
  %s0 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<%Rxf32>) -> tensor<%Rxf32>
  %s = linalg.generic {indexing_maps = [#map, #row], iterator_types = ["parallel", "reduction"]}
      ins(%ex : tensor<%Rx1000xf32>) outs(%s0 : tensor<%Rxf32>) {
  ^bb0(%i: f32, %o: f32):
    %a = arith.addf %i, %o : f32
    linalg.yield %a : f32
  } -> tensor<%Rxf32>
  %y = linalg.generic {indexing_maps = [#map, #row, #map],
                       iterator_types = ["parallel", "parallel"]}
      ins(%ex, %s : tensor<%Rx1000xf32>, tensor<%Rxf32>) outs(%e2 : tensor<%Rx1000xf32>) {
  ^bb0(%i: f32, %t: f32, %o: f32):
    %q = arith.divf %i, %t : f32
    linalg.yield %q : f32
  } -> tensor<%Rx1000xf32>
  return %y : tensor<%Rx1000xf32>
}
"""

# y = x * w (a column broadcast) and the row sums of x: two outputs, one full and one per row.
SCALE_AND_SUM = """
#map = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<64x4096xf32>, %w: tensor<4096xf32>)
    -> (tensor<64x4096xf32>, tensor<64xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x4096xf32>
  %y = linalg.generic {indexing_maps = [#map, #col, #map],
                      iterator_types = ["parallel", "parallel"]}
      ins(%x, %w : tensor<64x4096xf32>, tensor<4096xf32>) outs(%e : tensor<64x4096xf32>) {
  ^bb0(%i: f32, %j: f32, %o: f32):
    %m = arith.mulf %i, %j : f32
    linalg.yield %m : f32
  } -> tensor<64x4096xf32>
  %e1 = tensor.empty() : tensor<64xf32>
  %s0 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64xf32>) -> tensor<64xf32>
  %s = linalg.generic {indexing_maps = [#map, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<64x4096xf32>) outs(%s0 : tensor<64xf32>) {
  ^bb0(%i: f32, %o: f32):
    %a = arith.addf %i, %o : f32
    linalg.yield %a : f32
  } -> tensor<64xf32>
  return %y, %s : tensor<64x4096xf32>, tensor<64xf32>
}
"""

# A reduction over the first dimension: refused (only last-dimension reductions so far).
COLUMN_SUM = """
#map = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @main(%x: tensor<64x512xf32>) -> tensor<512xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<512xf32>
  %s0 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<512xf32>) -> tensor<512xf32>
  %s = linalg.generic {indexing_maps = [#map, #col], iterator_types = ["reduction", "parallel"]}
      ins(%x : tensor<64x512xf32>) outs(%s0 : tensor<512xf32>) {
  ^bb0(%i: f32, %o: f32):
    %a = arith.addf %i, %o : f32
    linalg.yield %a : f32
  } -> tensor<512xf32>
  return %s : tensor<512xf32>
}
"""

# y = x @ w + bias (bias a constant): refused by the emitter (a matmul).
MATMUL_BIAS = """
#map = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @main(%x: tensor<64x32xf32>, %w: tensor<32x96xf32>) -> tensor<64x96xf32> {
  %zero = arith.constant 0.0 : f32
  %bias = arith.constant dense<[%BIAS]> : tensor<96xf32>
  %e = tensor.empty() : tensor<64x96xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<64x96xf32>) -> tensor<64x96xf32>
  %m = linalg.matmul ins(%x, %w : tensor<64x32xf32>, tensor<32x96xf32>)
                     outs(%z : tensor<64x96xf32>) -> tensor<64x96xf32>
  %y = linalg.generic {indexing_maps = [#map, #col, #map],
                      iterator_types = ["parallel", "parallel"]}
      ins(%m, %bias : tensor<64x96xf32>, tensor<96xf32>) outs(%e : tensor<64x96xf32>) {
  ^bb0(%i: f32, %b: f32, %o: f32):
    %s = arith.addf %i, %b : f32
    linalg.yield %s : f32
  } -> tensor<64x96xf32>
  return %y : tensor<64x96xf32>
}
""".replace("%BIAS", ", ".join(f"{0.25 * i}" for i in range(96)))


def _grouped(text: str, group: bool = True) -> ir.Module:
    module = ir.Module.parse(text)
    if group:
        func = module.body.operations[0]
        ops = [o for o in func.regions[0].blocks[0].operations
               if is_compute(o) or o.operation.name == "linalg.fill"]
        form_group(ops, "vertical")
    return module


@pytest.fixture
def ctx():
    with make_context() as c, ir.Location.unknown(c):
        yield c


def _generate(text: str, gemm: bool = True, movement: bool = True) -> cg.CudaProgram:
    return cg.generate(_grouped(text), cg.CudaOptions(cubin=False, gemm=gemm,
                                                      movement=movement))


def test_elementwise_chain_is_one_vectorized_kernel(ctx) -> None:
    program = _generate(ELEMENTWISE)
    plan = program.plan
    assert [k.symbol for k in plan.launches] == ["fusec_k0"]
    launch = plan.launches[0]
    shape = cg.elementwise_launch_shape(1048576, 4)
    assert (launch.grid, launch.block) == (shape.grid, shape.block)
    assert launch.block * launch.grid * shape.unroll * shape.vec == 1048576
    ptx = program.ptx
    assert ".target sm_90" in ptx
    assert re.search(r"\.visible \.entry fusec_k0\(", ptx)
    # Two inputs and one output, 16 bytes per access, `unroll` chunks each.
    assert len(re.findall(r"ld\.global(\.nc)?\.v4\.(b|f)32", ptx)) == 2 * shape.unroll
    assert len(re.findall(r"st\.global\.v4\.(b|f)32", ptx)) == shape.unroll
    assert "ld.global.b32" not in ptx and "ld.global.f32" not in ptx
    # The intermediate %a never reaches memory: exactly one output buffer in the plan.
    assert [b.role for b in plan.buffers] == ["input", "input", "output"]


def test_softmax_row_reduction_uses_shuffles(ctx) -> None:
    rows = 3
    program = _generate(SOFTMAX.replace("%R", str(rows)))
    launch = program.plan.launches[0]
    shape = cg.row_launch_shape(rows, 1000, 4)
    assert shape.guarded and shape.vec == 4
    assert (launch.grid, launch.block) == (rows, shape.block)
    ptx = program.ptx
    assert "shfl.sync.bfly" in ptx  # warp shuffles for the max and the sum
    assert "bar.sync" in ptx  # one shared-memory step across warps
    assert ptx.count("ld.global.v4") == shape.chunks  # x read once; the row stays in registers
    if cg.find_cuda_toolkit():
        assert "call" not in ptx  # libdevice's expf inlined, no per-element calls


def test_column_broadcast_and_row_output(ctx) -> None:
    program = _generate(SCALE_AND_SUM)
    plan = program.plan
    assert len(plan.launches) == 1
    assert [b.shape for b in plan.buffers if b.role == "output"] == [[64, 4096], [64]]
    launch = plan.launches[0]
    assert launch.grid == 64 and launch.info["shape"] == "row"
    mlir_text = program.kernels_mlir
    assert mlir_text.count("gpu.barrier") == 1  # one block reduction round
    assert mlir_text.count("gpu.shuffle xor") == 5 + 3  # in-warp, then across 8 warps
    # The per-row sum is written by one thread.
    assert "scf.if" in mlir_text and "memref.store" in mlir_text


def test_independent_reductions_share_one_round(ctx) -> None:
    # Row max and row sum of x are independent: one barrier for both. Softmax's max and sum
    # are dependent (the sum reads exp(x - max)): two rounds.
    two = SCALE_AND_SUM.replace("(tensor<64x4096xf32>, tensor<64xf32>)",
                                "(tensor<64xf32>, tensor<64xf32>)")
    two = two.replace("return %y, %s : tensor<64x4096xf32>, tensor<64xf32>",
                      "return %s, %m : tensor<64xf32>, tensor<64xf32>")
    two = two.replace("  return %s, %m", """  %ninf = arith.constant 0xFF800000 : f32
  %m0 = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<64xf32>) -> tensor<64xf32>
  %m = linalg.generic {indexing_maps = [#map, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<64x4096xf32>) outs(%m0 : tensor<64xf32>) {
  ^bb0(%i: f32, %o: f32):
    %a = arith.maximumf %i, %o : f32
    linalg.yield %a : f32
  } -> tensor<64xf32>
  return %s, %m""")
    program = _generate(two)
    assert program.kernels_mlir.count("gpu.barrier") == 1
    assert program.ptx.count("bar.sync") == 1
    softmax = _generate(SOFTMAX.replace("%R", "3").replace("1000", "4000"))
    assert softmax.kernels_mlir.count("gpu.barrier") == 2


def test_refusals_name_the_reason(ctx) -> None:
    # A column sum: the fast emitter's refusal, when the data-movement kernels (which take
    # it: test_movement_codegen.py) are off too.
    with pytest.raises(cg.CudaCodegenError, match="last dimension"):
        cg.generate(_grouped(COLUMN_SUM), cg.CudaOptions(cubin=False, fallback=False,
                                                         movement=False))
    with pytest.raises(cg.CudaCodegenError, match="outside any fusion.group"):
        cg.generate(_grouped(ELEMENTWISE, group=False), cg.CudaOptions(cubin=False))


def test_launch_shapes() -> None:
    shape = cg.row_launch_shape(16384, 4096, 4)
    assert (shape.block, shape.grid, shape.vec, shape.chunks, shape.guarded) == (
        256, 16384, 4, 4, False)
    shape = cg.row_launch_shape(8192, 8192, 4)
    assert shape.block * shape.chunks * shape.vec == 8192
    assert cg.row_launch_shape(2, 1001, 4).vec == 1
    with pytest.raises(cg.CudaCodegenError, match="too long"):
        cg.row_launch_shape(2, 1 << 20, 4)
    shape = cg.elementwise_launch_shape(1000003, 4)
    assert shape.vec == 1 and shape.guarded
    assert shape.grid * shape.block * shape.unroll >= 1000003


def test_model_so_exports_the_abi(ctx, tmp_path) -> None:
    program = _generate(SOFTMAX.replace("%R", "3"))
    path = cg.write_cuda_artifact(program, tmp_path / "model.so")
    meta = cg.load_metadata(path)
    assert meta["target"] == "cuda"
    assert meta["inputs"] == [{"name": "input0", "shape": [3, 1000], "dtype": "float32"}]
    assert meta["kernels"][0]["symbol"] == "fusec_k0"
    lib = ctypes.CDLL(str(path))
    assert lib.fusec_abi_version() == 1
    lib.fusec_last_error.restype = ctypes.c_char_p
    null = (ctypes.c_void_p * 1)(None)
    ok = (ctypes.c_void_p * 1)(16)
    assert lib.fusec_run(null, ok) == 1
    assert b"inputs[0] is NULL" in lib.fusec_last_error()
    if ctypes.util.find_library("cuda") is None:
        assert lib.fusec_run(ok, ok) == 2
        assert b"libcuda.so.1" in lib.fusec_last_error()


def test_refused_group_goes_through_the_fallback(ctx) -> None:
    # A column sum is refused by the fast emitter and, with the data-movement kernels off,
    # compiled by upstream MLIR. The CPU tiling policy splits only parallel dims outside
    # the reductions: here none, so no tile loop and one thread runs it (slow, correct).
    assert _generate(COLUMN_SUM).plan.launches[0].info["path"] == "movement"
    program = _generate(COLUMN_SUM, movement=False)
    (launch,) = program.plan.launches
    assert launch.info["path"] == "fallback"
    assert "last dimension" in launch.info["why"]
    assert launch.info["shape"] == "serial" and (launch.grid, launch.block) == (1, 1)
    assert [program.plan.buffers[b].role for b in launch.buffers] == ["input", "output"]
    assert re.search(r"\.visible \.entry fusec_k0\(", program.ptx)
    assert "bar.sync" not in program.ptx and "call" not in program.ptx
    # A matmul (MLP example's groups) without cuBLASLt: one thread per tile of outputs (the
    # tile sizes are the tiling pass's policy).
    mm = _generate(MATMUL_BIAS, gemm=False)
    (launch,) = mm.plan.launches
    assert launch.info["path"] == "fallback" and "linalg.matmul" in launch.info["why"]
    tiles = launch.info["tiles"]
    assert tiles > 1 and tiles * math.prod(launch.info["tile_sizes"]) >= 64 * 96
    assert (launch.grid, launch.block) == (-(-tiles // cg.FALLBACK_BLOCK), cg.FALLBACK_BLOCK)
    # Inputs, then the output, then the bias (a weight: a constant buffer of the artifact).
    assert [mm.plan.buffers[b].role for b in launch.buffers] == [
        "input", "input", "output", "constant"]
    assert len(mm.constants) == 1


def test_fast_groups_say_so(ctx) -> None:
    launch = _generate(SOFTMAX.replace("%R", "3")).plan.launches[0]
    assert launch.info["path"] == "fast" and "why" not in launch.info


EXAMPLES = sorted(p.parent.name for p in (Path(__file__).resolve().parents[2] / "examples")
                  .glob("*/model.mlir"))


def _count_groups(module: ir.Module) -> int:
    from fusec.passes.inline_groups import groups_in

    return len(groups_in(module.operation))


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_compiles_to_ptx(ctx, name: str) -> None:
    """The fusion stage's groups (planned for the H200), one sm_90 kernel each, either path."""
    from fusec.compiler import pipeline as pl

    root = Path(__file__).resolve().parents[2] / "examples" / name
    module = ir.Module.parse((root / "model.mlir").read_text())
    options = pl.CompileOptions(target="cuda", model_name=name)
    pl.lower(module, options, stop_after="fusion")
    groups = _count_groups(module)
    program = cg.generate(module, cg.CudaOptions(cubin=False))
    kernels = [k for k in program.plan.launches
               if k.symbol != "__copy__" and k.launch_kind == "kernel"]
    gemms = [k for k in program.plan.launches if k.launch_kind == "gemm"]
    # A matmul-rooted group splits into [prologue kernel] + cuBLASLt call + [epilogue kernel].
    # (A group with several outputs splits into one group per output: more kernels.)
    assert len(gemms) <= groups <= len(kernels) + len(gemms)
    assert ".target sm_90" in program.ptx
    for g in gemms:
        assert g.info["path"] == "gemm" and g.info["why"].startswith("matmul-rooted")
        assert len(g.buffers) == 3 + ("bias" in g.gemm["fused"])
    for k in kernels:
        assert re.search(rf"\.visible \.entry {k.symbol}\(", program.ptx), k.symbol
        assert k.grid >= 1 and 1 <= k.block <= 1024
        assert k.info["path"] in ("fast", "movement", "fallback")
        if k.info["path"] == "fallback":
            assert k.info["why"]  # the emitter's refusal, kept for the report
        roles = {program.plan.buffers[b].role for b in k.buffers}
        assert roles <= {"input", "output", "temp", "constant"}
    # Every weight the kernels read is carried with its bytes.
    for b in program.plan.buffers:
        if b.role == "constant":
            assert len(program.constants[b.id]) == b.nbytes
    assert "malloc" not in program.ptx  # tile intermediates live on the thread's stack


def test_fusec_cli_builds_a_cuda_artifact(tmp_path) -> None:
    """`fusec model.mlir --target cuda` (the driver's own context): matmuls via cuBLASLt."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "mlp.so"
    done = subprocess.run([sys.executable, "-m", "fusec.tools.fusec",
                           str(root / "examples" / "mlp" / "model.mlir"), "--target", "cuda",
                           "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    meta = cg.load_metadata(out)
    # Two matmul groups, two cuBLASLt calls: the first one's bias + ReLU (whichever group
    # the planner put them in) fused as its epilogue, the second one's bias likewise.
    assert [k["info"]["path"] for k in meta["kernels"]] == ["gemm", "gemm"]
    assert [k["symbol"] for k in meta["kernels"]] == ["__gemm__", "__gemm__"]
    assert [k["gemm"]["epilogue"] for k in meta["plan"]["launches"]] == ["relu_bias", "bias"]


def test_what_runs_on_the_gpu_is_readable(tmp_path) -> None:
    """`--emit cuda` prints the kernels' gpu.module (not the tiled stage's IR again), `--emit
    ptx` their PTX; `--dump-dir` writes both, one file of each per kernel, and (where ptxas
    is found) the kernels' registers and spills."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    model = str(root / "examples" / "softmax" / "model.mlir")

    def fusec(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fusec.tools.fusec", model, "--target",
                               "cuda", *args], capture_output=True, text=True, timeout=300)

    cuda = fusec("--emit", "cuda")
    assert cuda.returncode == 0, cuda.stderr
    assert "gpu.module @fusec_kernels" in cuda.stdout and "gpu.func @fusec_k0" in cuda.stdout
    assert "fusion.group" not in cuda.stdout  # the kernels, not the tiled stage's groups
    ptx = fusec("--emit", "ptx")
    assert ptx.returncode == 0 and ".visible .entry fusec_k0(" in ptx.stdout
    dump = tmp_path / "dump"
    done = fusec("--dump-dir", str(dump), "-o", str(tmp_path / "softmax.so"))
    assert done.returncode == 0, done.stderr
    assert "gpu.func @fusec_k0" in (dump / "softmax.cuda.mlir").read_text()
    assert ".entry fusec_k0(" in (dump / "softmax.ptx").read_text()
    assert (dump / "softmax.kernels" / "fusec_k0.mlir").read_text().startswith(
        "gpu.func @fusec_k0(")
    kernel_ptx = (dump / "softmax.kernels" / "fusec_k0.ptx").read_text()
    assert ".target sm_90" in kernel_ptx and ".visible .entry fusec_k0(" in kernel_ptx
    if cg.find_cuda_toolkit():
        usage = (dump / "softmax.resources.txt").read_text()
        assert re.search(r"Used \d+ registers", usage) and "spill" in usage


def test_matmul_group_becomes_a_cublaslt_call(ctx) -> None:
    """Linear + bias (MLP): the matmul and its bias add are one cuBLASLt call (epilogue BIAS);
    the weight's transpose is a transpose flag, not a kernel."""
    mm = _generate(MATMUL_BIAS)
    (launch,) = mm.plan.launches
    assert launch.launch_kind == "gemm" and launch.symbol == "__gemm__"
    assert launch.gemm["epilogue"] == "bias" and launch.gemm["fused"] == ["bias"]
    roles = [mm.plan.buffers[b].role for b in launch.buffers]
    assert roles[2] == "output" and len(roles) == 4
    table = cg.gemm_table(launch, None)
    assert len(table) == cg.GEMM_FIELDS
    assert table[13] == cg.CUBLASLT_EPILOGUES["bias"] and table[14] == 1
    assert mm.plan.metadata["cublaslt_workspace_bytes"] == cg.GEMM_WORKSPACE_BYTES


def test_epilogue_bodies_are_recognised_by_value(ctx) -> None:
    """ReLU (cmpf ugt + select), erf-GELU and a bias add are matched by evaluating the body."""
    relu = ir.Module.parse(RELU_GENERIC)
    generic = next(op.operation for op in relu.body.operations[0].regions[0].blocks[0]
                   .operations if op.operation.name == "linalg.generic")
    assert cg.unary_kind(generic) == "relu"


RELU_GENERIC = """
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<4x8xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]}
      ins(%arg0 : tensor<4x8xf32>) outs(%0 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %2 = arith.cmpf ugt, %in, %cst : f32
    %3 = arith.select %2, %in, %cst : f32
    linalg.yield %3 : f32
  } -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}
"""


def _planned(model, *inputs) -> ir.Module:
    """A torch module through fusec's frontend and fusion stage for target cuda."""
    from fusec.compiler import pipeline as pl
    from fusec.compiler.frontend import import_torch

    module = ir.Module.parse(import_torch(model, *inputs))
    pl.lower(module, pl.CompileOptions(target="cuda"), stop_after="fusion")
    return module


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_linear_gelu_through_cublaslt(ctx, dtype: str) -> None:
    """bf16: one cuBLASLt call (bias, rounding and GELU fused; the operand casts and the
    weight transpose absorbed). fp32: cuBLASLt with the bias, GELU in one elementwise kernel
    (cuBLASLt's tanh GELU is ~1e-4 from torch's erf GELU: over the fp32 tolerance)."""
    torch = pytest.importorskip("torch")

    class LinearGelu(torch.nn.Module):
        def forward(self, x, w, b):
            return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))

    dt = getattr(torch, dtype)
    module = _planned(LinearGelu(), torch.randn(64, 32).to(dt), torch.randn(48, 32).to(dt),
                      torch.randn(48).to(dt))
    # bf16 at this size goes to our tensor-core GEMM by default (test_tc_gemm_codegen.py);
    # without it, cuBLASLt.
    plan = cg.generate(module, cg.CudaOptions(cubin=False, tc_gemm=False)).plan
    gemm = plan.launches[0]
    assert gemm.launch_kind == "gemm" and gemm.gemm["trans_b"] and not gemm.gemm["trans_a"]
    assert gemm.gemm["in_dtype"] == gemm.gemm["out_dtype"] == dtype
    if dtype == "bfloat16":
        assert len(plan.launches) == 1
        assert gemm.gemm["fused"] == ["bias", "cast", "gelu"]
        assert gemm.gemm["epilogue"] == "gelu_bias"
    else:
        assert [k.info["path"] for k in plan.launches] == ["gemm", "fast"]
        assert gemm.gemm["epilogue"] == "bias" and "tanh" in gemm.info["why"]


def _linear_then(fn):
    torch = pytest.importorskip("torch")

    class Model(torch.nn.Module):
        def forward(self, x, w, b):
            return fn(torch.nn.functional.linear(x, w, b))

    return Model()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_linear_tanh_gelu_through_cublaslt(ctx, dtype: str) -> None:
    """GPT-2's GELU (the tanh form): after the cast to f32 it is a DAG of a dozen ops (x
    feeds x^3 and the final product), no one of them GELU; recognised as a whole
    (`body.gelu_cone`), it is cuBLASLt's own GELU epilogue in bf16: one call, as erf-GELU
    is. fp32: not fused (cuBLASLt's GELU rounds differently from torch's at fp32's 1e-5)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    dt = getattr(torch, dtype)
    module = _planned(_linear_then(lambda y: F.gelu(y, approximate="tanh")),
                      torch.randn(64, 32).to(dt), torch.randn(48, 32).to(dt),
                      torch.randn(48).to(dt))
    plan = cg.generate(module, cg.CudaOptions(cubin=False, tc_gemm=False)).plan
    gemm = plan.launches[0]
    assert gemm.launch_kind == "gemm"
    if dtype == "bfloat16":
        assert len(plan.launches) == 1
        assert gemm.gemm["fused"] == ["bias", "cast", "gelu"]
        assert gemm.gemm["epilogue"] == "gelu_bias"
    else:
        assert len(plan.launches) == 2 and gemm.gemm["epilogue"] == "bias"


@pytest.mark.parametrize("case", ["pre_activation_returned", "not_gelu"])
def test_a_dag_epilogue_that_is_not_gelu_alone_stays_out_of_cublaslt(ctx, case: str) -> None:
    """What the GELU recognition must not take: a tanh GELU whose input is also a result
    (cuBLASLt would write the GELU only), and a DAG of the same ops that computes something
    else (x * tanh(x))."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    bf16 = torch.bfloat16
    if case == "pre_activation_returned":
        fn = lambda y: (F.gelu(y, approximate="tanh"), y)  # noqa: E731
    else:
        fn = lambda y: (y.float() * torch.tanh(y.float())).to(bf16)  # noqa: E731
    module = _planned(_linear_then(fn), torch.randn(64, 32).to(bf16),
                      torch.randn(48, 32).to(bf16), torch.randn(48).to(bf16))
    plan = cg.generate(module, cg.CudaOptions(cubin=False, tc_gemm=False)).plan
    gemms = [k for k in plan.launches if k.launch_kind == "gemm"]
    assert len(gemms) == 1 and "gelu" not in gemms[0].gemm["fused"]
    assert len(plan.launches) == 2


def test_the_gelu_cone_at_gpt2s_fc_goes_to_cublaslt(ctx) -> None:
    """At GPT-2's fc (8192 x 768 -> 3072, bf16, tanh GELU) the planner predicts cuBLASLt
    with its GELU epilogue faster than our GEMM with the GELU fused (run 231, H200: the same
    cuBLASLt call for erf-GELU 67.9 us, ours 94.3)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    bf16 = torch.bfloat16
    module = _planned(_linear_then(lambda y: F.gelu(y, approximate="tanh")),
                      torch.randn(8192, 768).to(bf16), torch.randn(3072, 768).to(bf16),
                      torch.randn(3072).to(bf16))
    plan = cg.generate(module, cg.CudaOptions(cubin=False)).plan
    assert [k.info["path"] for k in plan.launches] == ["gemm"]
    assert plan.launches[0].gemm["epilogue"] == "gelu_bias"


def test_batch1_transformer_has_no_one_thread_kernels(ctx) -> None:
    """TransformerEncoderLayer at batch 1: the head split/merge (unit-dim transposes, slices,
    multi-output groups) must not leave a kernel that runs in one GPU thread."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.0,
                                             batch_first=True).eval()
    module = _planned(layer, torch.randn(1, 8, 64))
    plan = cg.generate(module, cg.CudaOptions(cubin=False)).plan
    paths = [k.info.get("path") for k in plan.launches]
    assert paths.count("gemm") == 6  # in-proj, QK^T, PV, out-proj, two feed-forward
    assert all(k.info.get("shape") != "serial" for k in plan.launches), paths
    # The head split / merge are cuBLASLt layouts and the biases (+ ReLU) its epilogues: the
    # softmax and the two residual + LayerNorm rows are the only kernels (Inductor: 10).
    assert paths == ["gemm", "gemm", "fast", "gemm", "gemm", "fast", "gemm", "gemm", "fast"]


SLICE_AND_UNIT_TRANSPOSE = """
func.func @main(%arg0: tensor<3x16x8xf32>, %arg1: tensor<1x16x8xf32>)
    -> (tensor<1x16x8xf32>, tensor<16x1x8xf32>) {
  %0 = tensor.extract_slice %arg0[2, 0, 0] [1, 16, 8] [1, 1, 1]
      : tensor<3x16x8xf32> to tensor<1x16x8xf32>
  %e = tensor.empty() : tensor<16x1x8xf32>
  %1 = linalg.transpose ins(%arg1 : tensor<1x16x8xf32>) outs(%e : tensor<16x1x8xf32>)
      permutation = [1, 0, 2]
  return %0, %1 : tensor<1x16x8xf32>, tensor<16x1x8xf32>
}
"""


def test_slices_become_gathers_and_unit_transposes_views(ctx) -> None:
    module = ir.Module.parse(SLICE_AND_UNIT_TRANSPOSE)
    func = module.body.operations[0]
    assert cg.unit_transposes_to_reshapes(func) == 1
    assert cg.extract_slices_to_generics(func) == 1
    text = str(module)
    assert "linalg.transpose" not in text and "tensor.extract_slice" not in text
    assert "linalg.index 0" in text and "tensor.extract %" in text
    assert module.operation.verify()


# ---------------------------------------------------------------- strided layouts and views
#
# What the shim asks of cuBLASLt, replayed in numpy from the plan alone (gemm_table's column-
# major numbers, byte offsets, plan-level views): a plan of only cuBLASLt calls and views can
# be checked without a GPU.


def _emulate(program: cg.CudaProgram, inputs: list) -> list:
    import numpy as np

    plan = program.plan
    by_id = {b.id: b for b in plan.buffers}
    flat: dict[int, np.ndarray] = {}
    for b in plan.buffers:
        if b.view_of is None:
            flat[b.id] = np.full(b.nbytes // 4, np.nan, dtype=np.float32)
    for bid, data in program.constants.items():
        flat[bid] = np.frombuffer(data, dtype=np.float32).copy()
    for bid, x in zip(plan.inputs, inputs):
        flat[bid] = np.ascontiguousarray(x, dtype=np.float32).ravel().copy()

    def memory(bid: int) -> tuple[np.ndarray, int]:
        b = by_id[bid]
        if b.view_of is None:
            return flat[bid], 0
        base, offset = memory(b.view_of)
        return base, offset + b.view_offset // 4

    def matrix(mem, off, rows, cols, ld, batch, stride):
        """Column-major rows x cols matrices, `batch` of them `stride` apart (elements)."""
        i, j, k = np.meshgrid(np.arange(rows), np.arange(cols), np.arange(batch), indexing="ij")
        return off + k * stride + i + j * ld

    for launch in plan.launches:
        assert launch.launch_kind == "gemm", f"not emulated: {launch.symbol} {launch.info}"
        t = cg.gemm_table(launch, None)
        (mem_a, va), (mem_b, vb), (mem_d, vd) = (memory(x) for x in launch.buffers[:3])
        batch = t[12]
        # cuBLASLt's A is our B (buffer 1), its B our A (buffer 0).
        ia = matrix(mem_b, vb + t[21] // 4, t[4], t[5], t[6], batch, t[16])
        ib = matrix(mem_a, va + t[20] // 4, t[7], t[8], t[9], batch, t[17])
        a = mem_b[ia].astype(np.float64)
        b = mem_a[ib].astype(np.float64)
        a = a.transpose(1, 0, 2) if t[2] else a
        b = b.transpose(1, 0, 2) if t[3] else b
        d = np.einsum("ikb,kjb->ijb", a, b)
        if t[14]:
            bias, boff = memory(launch.buffers[3])
            d = d + bias[boff:boff + t[10]].astype(np.float64)[:, None, None]
        if t[13] in (cg.CUBLASLT_EPILOGUES["relu"], cg.CUBLASLT_EPILOGUES["relu_bias"]):
            d = np.maximum(d, 0)
        idx = matrix(mem_d, vd + t[22] // 4, t[10], t[11], t[19], batch, t[18])
        assert len(np.unique(idx)) == idx.size, "D overlaps itself"
        mem_d[idx] = d
    outs = []
    for bid in plan.outputs:
        mem, off = memory(bid)
        b = by_id[bid]
        outs.append(mem[off:off + b.nbytes // 4].reshape(b.shape))
    return outs


def _attention_heads(seq: int, heads: int, dim: int):
    torch = pytest.importorskip("torch")

    class Heads(torch.nn.Module):
        """Attention without the softmax: only matmuls and layout (head split / merge)."""

        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(heads * dim, 3 * heads * dim)
            self.out = torch.nn.Linear(heads * dim, heads * dim)

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            q, k, v = (t.reshape(1, seq, heads, dim).transpose(1, 2) for t in (q, k, v))
            o = (q @ k.transpose(-1, -2)) @ v
            return torch.relu(self.out(o.transpose(1, 2).reshape(1, seq, heads * dim)))

    torch.manual_seed(0)
    return Heads().eval()


@pytest.mark.parametrize("fusion", [True, False])
def test_head_split_and_merge_are_cublaslt_layouts(ctx, fusion: bool) -> None:
    """Batch-1 attention's head split (chunk, reshape, transpose: q, k^T, v read in place
    with a batch stride and a leading dimension) and head merge (the PV gemm writes where
    the transpose puts it) cost no kernel, nor do the biases and the ReLU (cuBLASLt
    epilogues), however the planner grouped them (fusion off: every op its own group); the
    plan, replayed in numpy as the shim calls cuBLASLt, matches torch."""
    torch = pytest.importorskip("torch")
    import numpy as np

    from fusec.compiler import pipeline as pl
    from fusec.compiler.frontend import import_torch

    model = _attention_heads(8, 4, 16)
    x = torch.randn(1, 8, 64)
    module = ir.Module.parse(import_torch(model, x))
    pl.lower(module, pl.CompileOptions(target="cuda", fusion=fusion), stop_after="fusion")
    program = cg.generate(module, cg.CudaOptions(cubin=False))
    launches = program.plan.launches
    assert [k.launch_kind for k in launches] == ["gemm"] * 4, [k.info for k in launches]
    qk, pv = launches[1].gemm, launches[2].gemm
    assert qk["batch"] == 4 and qk["trans_b"] and qk["lda"] == 3 * 64 and qk["stride_a"] == 16
    assert qk["offset_b"] == 64 and pv["offset_b"] == 128  # k and v: chunks of the qkv buffer
    assert pv["ldd"] == 64 and pv["stride_d"] == 16  # written straight into [seq, heads*dim]
    for _ in range(2):
        x = torch.randn(1, 8, 64)
        (out,) = _emulate(program, [x.numpy()])
        with torch.no_grad():
            ref = model.double()(x.double()).numpy()
        model.float()
        err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
        assert err < 1e-5, err


def test_strided_view_algebra(ctx) -> None:
    """Transposes permute strides, expands split them, collapses merge contiguous dims only."""
    v = cg.StridedView.dense((16, 1536))
    assert v.strides == (1536, 1) and v.is_dense()
    assert cg.merged_stride([8, 64], [64, 1]) == 1
    assert cg.merged_stride([2, 4], [384, 32]) is None  # batch 2 x 4 heads: not one stride
    layout = cg.matrix_layout(cg.StridedView((8, 64, 16), (64, 1, 1536), 512), 4)
    assert layout == cg.MatrixLayout(True, 1536, 64, 512)
    assert cg.matrix_layout(cg.StridedView((8, 16, 64), (64, 1536, 1), 2), 4) is None  # 8 B
    assert cg.matrix_layout(cg.StridedView((4, 8, 8), (0, 8, 1), 0), 4, output=True) is None


SLICE_THEN_TANH = """
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%arg0: tensor<3x16x8xf32>) -> (tensor<16x8xf32>, tensor<1x16x8xf32>) {
  %0 = tensor.extract_slice %arg0[1, 0, 0] [1, 16, 8] [1, 1, 1]
      : tensor<3x16x8xf32> to tensor<1x16x8xf32>
  %1 = tensor.collapse_shape %0 [[0, 1], [2]] : tensor<1x16x8xf32> into tensor<16x8xf32>
  %e = tensor.empty() : tensor<16x8xf32>
  %2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%1 : tensor<16x8xf32>) outs(%e : tensor<16x8xf32>) {
  ^bb0(%i: f32, %o: f32):
    %t = math.tanh %i : f32
    linalg.yield %t : f32
  } -> tensor<16x8xf32>
  %3 = tensor.extract_slice %arg0[2, 0, 0] [1, 16, 8] [1, 1, 1]
      : tensor<3x16x8xf32> to tensor<1x16x8xf32>
  return %2, %3 : tensor<16x8xf32>, tensor<1x16x8xf32>
}
"""


def test_slice_of_whole_rows_is_a_plan_view(ctx) -> None:
    """A slice of whole rows and a reshape (each its own group, as the planner may leave
    them) are bytes of the input from an offset: a plan-level view, no kernel; the tanh
    kernel reads the view. A slice the model returns keeps its kernel (the caller owns
    that buffer)."""
    module = ir.Module.parse(SLICE_THEN_TANH)
    func = module.body.operations[0]
    for op in [o for o in func.regions[0].blocks[0].operations if is_compute(o)]:
        form_group([op], "single")
    program = cg.generate(module, cg.CudaOptions(cubin=False))
    plan = program.plan
    views = [b for b in plan.buffers if b.view_of is not None]
    assert len(views) == 2  # the slice and its reshape, both views of the input
    assert all(b.view_of == plan.inputs[0] and b.view_offset == 16 * 8 * 4 for b in views)
    tanh, returned = plan.launches
    assert tanh.info["path"] == "fast" and tanh.buffers[0] in {b.id for b in views}
    assert plan.buffers[returned.buffers[-1]].role == "output"
    assert f"{plan.inputs[0]}, {16 * 8 * 4}ULL}}" in cg.host_code(program)


MISALIGNED_SLICE = """
func.func @main(%arg0: tensor<33xi64>) -> tensor<32xi64> {
  %0 = tensor.extract_slice %arg0[1] [32] [1] : tensor<33xi64> to tensor<32xi64>
  %e = tensor.empty() : tensor<32xi64>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
      iterator_types = ["parallel"]} ins(%0 : tensor<32xi64>) outs(%e : tensor<32xi64>) {
  ^bb0(%in: i64, %out: i64):
    %c1 = arith.constant 1 : i64
    %s = arith.addi %in, %c1 : i64
    linalg.yield %s : i64
  } -> tensor<32xi64>
  return %1 : tensor<32xi64>
}
"""


def test_a_slice_off_16_byte_alignment_is_not_a_view(ctx) -> None:
    """HF GPT-2's `cache_position[1:]` (int64, 8 bytes in): as a view, the kernel reading it
    made 16-byte loads 8 bytes off alignment (cudaErrorMisalignedAddress on the H200). The
    slice stays a kernel of its own; no buffer is a view at an offset off 16 bytes."""
    module = ir.Module.parse(MISALIGNED_SLICE)
    func = module.body.operations[0]
    for op in [o for o in func.regions[0].blocks[0].operations if is_compute(o)]:
        form_group([op], "single")
    plan = cg.generate(module, cg.CudaOptions(cubin=False)).plan
    assert all(b.view_offset % 16 == 0 for b in plan.buffers if b.view_of is not None)
    assert not any(b.view_of is not None for b in plan.buffers)
    assert len([k for k in plan.launches if k.symbol != "__copy__"]) == 2


BOOL_MASK = """
func.func @main(%mask: tensor<64x64xi1>, %x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %e = tensor.empty() : tensor<64x64xf32>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
      affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
      iterator_types = ["parallel", "parallel"]}
      ins(%mask, %x : tensor<64x64xi1>, tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) {
  ^bb0(%m: i1, %v: f32, %o: f32):
    %z = arith.constant -3.0e38 : f32
    %s = arith.select %m, %v, %z : f32
    linalg.yield %s : f32
  } -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}
"""


def test_bool_buffers_are_read_as_bytes(ctx) -> None:
    """A bool buffer holds a byte per value (the plan's "bool", the fallback's widened i1):
    the fast emitter read it as `vector<16xi1>`, which LLVM packs as bits, so a causal mask
    made by one kernel and read by another (HF GPT-2's second layer) came out wrong (relative
    error 3e-1 on the H200). It is loaded as bytes and narrowed."""
    module = ir.Module.parse(BOOL_MASK)
    func = module.body.operations[0]
    for op in [o for o in func.regions[0].blocks[0].operations if is_compute(o)]:
        form_group([op], "single")
    program = cg.generate(module, cg.CudaOptions(cubin=False))
    text = program.kernels_mlir
    assert "xi1>" not in text  # no i1 memref, no vector of i1
    assert "memref<4096xi8>" in text and "arith.trunci" in text
    assert program.plan.buffers[program.plan.inputs[0]].dtype == "bool"


def test_gpt2_block_has_no_one_thread_kernel(ctx) -> None:
    """GPT-2's causal softmax: the arange group (reads nothing) is computed here, and the
    [T, T] mask inside the [B, H, T, T] row softmax is computed per element of the row kernel
    (row index mod T against the column): a fast row kernel, not the fallback's one thread."""
    from fusec.compiler import pipeline as pl

    root = Path(__file__).resolve().parents[2]
    module = ir.Module.parse((root / "examples" / "gpt2_block" / "model.mlir").read_text())
    pl.lower(module, pl.CompileOptions(target="cuda"), stop_after="fusion")
    plan = cg.generate(module, cg.CudaOptions(cubin=False)).plan
    paths = [k.info.get("path") for k in plan.launches]
    assert all(k.info.get("shape") != "serial" for k in plan.launches), paths
    assert "fallback" not in paths and paths.count("gemm") == 6, paths
    softmax = next(k for k in plan.launches if k.info.get("rows") == 4 * 64)
    assert softmax.info["shape"] == "row" and softmax.info["cols"] == 64
    assert any(plan.buffers[b].dtype == "int64" and plan.buffers[b].role == "constant"
               for b in softmax.buffers)  # the folded arange


def test_cublaslt_calls_do_not_depend_on_the_grouping(ctx) -> None:
    """With fusion off (every op its own group: the weight transposes, the zero fills shared
    by several matmuls, the bias adds, the head split each apart) the six matmuls of a batch-1
    TransformerEncoderLayer are still six cuBLASLt calls, and no kernel runs in one thread."""
    torch = pytest.importorskip("torch")
    from fusec.compiler import pipeline as pl
    from fusec.compiler.frontend import import_torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.0,
                                             batch_first=True).eval()
    module = ir.Module.parse(import_torch(layer, torch.randn(1, 8, 64)))
    pl.lower(module, pl.CompileOptions(target="cuda", fusion=False), stop_after="fusion")
    plan = cg.generate(module, cg.CudaOptions(cubin=False)).plan
    paths = [k.info.get("path") for k in plan.launches]
    assert paths.count("gemm") == 6, plan.metadata.get("gemm")
    assert all(k.info.get("shape") != "serial" for k in plan.launches)


# --- finds of test/gpu/fuzz_cuda.py (differential fuzzing on the H200), kept as regressions ---

RETURNED_TWICE = """
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%x: tensor<257x68xf32>) -> (tensor<257x68xf32>, tensor<257x68xf32>) {
  %e = tensor.empty() : tensor<257x68xf32>
  %a = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<257x68xf32>) outs(%e : tensor<257x68xf32>) {
  ^bb0(%i: f32, %o: f32):
    %r = math.absf %i : f32
    linalg.yield %r : f32
  } -> tensor<257x68xf32>
  return %a, %a : tensor<257x68xf32>, tensor<257x68xf32>
}
"""


def test_a_value_returned_twice_gets_two_output_buffers(ctx) -> None:
    """`return v, v`: the caller binds one buffer per output; with one buffer for both, the
    first binding was lost and the first output never written (errors 1.0 on the H200)."""
    plan = _generate(RETURNED_TWICE).plan
    first, second = plan.outputs
    assert first != second
    assert plan.buffers[second].role == "output"
    (copy,) = [k for k in plan.launches if k.symbol == "__copy__"]
    assert copy.buffers == [first, second]
    assert plan.launches[-1] is copy  # after the kernel that writes the value


DEGENERATE_ROWS = """
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#red3 = affine_map<(d0, d1, d2) -> (d0, d1)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#red2 = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<1x3x1xf32>) -> tensor<1xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e3 = tensor.empty() : tensor<1x3xf32>
  %e1 = tensor.empty() : tensor<1xf32>
  %f3 = linalg.fill ins(%ninf : f32) outs(%e3 : tensor<1x3xf32>) -> tensor<1x3xf32>
  %m = linalg.generic {indexing_maps = [#id3, #red3],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<1x3x1xf32>) outs(%f3 : tensor<1x3xf32>) {
  ^bb0(%i: f32, %o: f32):
    %r = arith.maximumf %i, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x3xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<1xf32>) -> tensor<1xf32>
  %s = linalg.generic {indexing_maps = [#id2, #red2], iterator_types = ["parallel", "reduction"]}
      ins(%m : tensor<1x3xf32>) outs(%f1 : tensor<1xf32>) {
  ^bb0(%i: f32, %o: f32):
    %r = arith.addf %i, %o : f32
    linalg.yield %r : f32
  } -> tensor<1xf32>
  return %s : tensor<1xf32>
}
"""


def test_a_sum_across_the_rows_of_a_row_kernel_is_refused(ctx) -> None:
    """In a group whose widest tensor is [1, 3, 1] (3 rows of 1), a sum over a [1, 3] tensor
    adds values of three rows: one block per row cannot (wrong by 0.6 on the H200). The
    fast emitter refuses it; without the data-movement kernels the fallback path builds it,
    with them it is a data-movement kernel (issue 16: its 3 points are a short fold whose
    loads stay uniform in the physical layout, no longer refused for the generic's map)."""
    with pytest.raises(cg.CudaCodegenError, match="does not fit the group's 3x1 rows"):
        cg.generate(_grouped(DEGENERATE_ROWS),
                    cg.CudaOptions(cubin=False, fallback=False, movement=False))
    (launch,) = _generate(DEGENERATE_ROWS, movement=False).plan.launches
    assert launch.info["path"] == "fallback"
    (launch,) = _generate(DEGENERATE_ROWS).plan.launches
    assert (launch.info["path"], launch.info["shape"]) == ("movement", "direct")


# --- finds of a review of the tile emitter, kept as regressions ---

YIELDED_TWICE = """#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @f(%x: tensor<64x4096xf32>) -> (tensor<64x4096xf32>, tensor<64x4096xf32>) {
  %r:2 = fusion.group single (%a = %x : tensor<64x4096xf32>) -> (tensor<64x4096xf32>, tensor<64x4096xf32>) {
    %e = tensor.empty() : tensor<64x4096xf32>
    %y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<64x4096xf32>) outs(%e : tensor<64x4096xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<64x4096xf32>
    fusion.yield %y, %y : tensor<64x4096xf32>, tensor<64x4096xf32>
  }
  return %r#0, %r#1 : tensor<64x4096xf32>, tensor<64x4096xf32>
}
"""


def test_a_tile_result_yielded_twice_is_stored_twice(ctx) -> None:
    """A group yielding one tile-loop result twice has two kernel outputs: both written (the
    second used to replace the first)."""
    module = ir.Module.parse(YIELDED_TWICE)
    program = cg.generate(module, cg.CudaOptions(cubin=False))
    (launch,) = program.plan.launches
    assert launch.info["tiled"]
    stored = [part.split("[")[0].split(", ")[1]
              for part in program.kernels_mlir.split("vector.store")[1:]]
    assert sorted(stored) == ["%arg1", "%arg2"]  # input %arg0, one store per output


def test_launch_shape_overrides_that_do_not_fit_the_tile_say_so(ctx) -> None:
    """The tiled stage asks the tile emitter with the cost model's launch shapes; an
    experiment's override that the tile cannot take is an error naming the options."""
    text = SOFTMAX.replace("%R", "3").replace("1000", "4096")
    with pytest.raises(cg.CudaCodegenError, match="row_elements_per_thread=256"):
        cg.generate(_grouped(text), cg.CudaOptions(cubin=False, row_elements_per_thread=256))


HORIZONTAL_WITH_A_SCALAR = """#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (0, 0, 0)>
module {
  func.func @main(%arg0: tensor<129x129x2xf32>, %arg1: tensor<1x1x1xf32>) -> (tensor<1x1x1xf32>, tensor<129x129x2xf32>) {
    %0:2 = fusion.group horizontal (%arg2 = %arg0 : tensor<129x129x2xf32>, %arg3 = %arg1 : tensor<1x1x1xf32>) -> (tensor<129x129x2xf32>, tensor<1x1x1xf32>) attributes {fusion.bytes_fused = 266264 : i64, fusion.bytes_unfused = 266284 : i64, fusion.device = "nvidia-h200", fusion.flops = 66568 : i64, fusion.launches_saved = 1 : i64, fusion.parts = ["single", "vertical"], fusion.reason = "2 independent launch-bound kernels in one launch", fusion.refused = ["group@4:0: input: small-input: a second read of 4 B costs 0.00 us, less than a launch (4.0 us) on nvidia-h200"], fusion.time_fused_ns = 4063 : i64, fusion.time_unfused_ns = 16063 : i64} {
      %cst = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<129x129x2xf32>
      %2 = tensor.empty() : tensor<1x1x1xf32>
      %3 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg2, %arg3 : tensor<129x129x2xf32>, tensor<1x1x1xf32>) outs(%1 : tensor<129x129x2xf32>) {
      ^bb0(%in: f32, %in_0: f32, %out: f32):
        %7 = arith.cmpf ogt, %in, %in_0 : f32
        %8 = arith.select %7, %in, %in_0 : f32
        linalg.yield %8 : f32
      } -> tensor<129x129x2xf32>
      %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg3 : tensor<1x1x1xf32>) outs(%2 : tensor<1x1x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %7 = arith.negf %in : f32
        linalg.yield %7 : f32
      } -> tensor<1x1x1xf32>
      %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%4 : tensor<1x1x1xf32>) outs(%2 : tensor<1x1x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %7 = math.absf %in : f32
        linalg.yield %7 : f32
      } -> tensor<1x1x1xf32>
      %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%5 : tensor<1x1x1xf32>) outs(%2 : tensor<1x1x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %7 = arith.cmpf ugt, %in, %cst : f32
        %8 = arith.select %7, %in, %cst : f32
        linalg.yield %8 : f32
      } -> tensor<1x1x1xf32>
      fusion.yield %3, %6 : tensor<129x129x2xf32>, tensor<1x1x1xf32>
    }
    return %0#1, %0#0 : tensor<1x1x1xf32>, tensor<129x129x2xf32>
  }
}
"""


def test_a_horizontal_group_with_a_one_element_part_is_split(ctx) -> None:
    """One launch for a [129, 129, 2] max and a [1, 1, 1] abs chain (the planner's horizontal
    fusion) was built as one elementwise space, the one-element output written with the
    big one's vectors (out of bounds under memcheck, found by test/gpu/fuzz_cuda.py). The
    group-level emitter refuses it; the GPU kernel formation splits it per output, and each
    part is built from its own tile."""
    module = ir.Module.parse(HORIZONTAL_WITH_A_SCALAR)
    func = module.body.operations[0]
    group = next(op for op in func.regions[0].blocks[0].operations
                 if op.operation.name == "fusion.group")
    with pytest.raises(cg.CudaCodegenError, match="domains of different sizes"):
        cg.analyse_group(group.operation)
    plan = cg.generate(module, cg.CudaOptions(cubin=False)).plan
    assert [k.info["path"] for k in plan.launches] == ["fast", "fast"]
    assert all(k.info["tiled"] for k in plan.launches)
    sizes = sorted(plan.buffers[k.buffers[-1]].nbytes for k in plan.launches)
    assert sizes == [4, 129 * 129 * 2 * 4]


ROWS_READ_ALONG_ONE_DIM = """#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d0, d1)>
#map3 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @main(%arg0: tensor<17x17x1xf32>, %arg1: tensor<17xf32>) -> tensor<17x17xf32> {
    %0 = fusion.group vertical (%arg2 = %arg0 : tensor<17x17x1xf32>, %arg3 = %arg1 : tensor<17xf32>) -> tensor<17x17xf32> attributes {fusion.bytes_fused = 2380 : i64, fusion.bytes_unfused = 16252 : i64, fusion.device = "nvidia-h200", fusion.flops = 2601 : i64, fusion.launches_saved = 4 : i64, fusion.parallel_tiles = 289 : i64, fusion.reason = "5 ops in one kernel: saves 4 launches and 13872 bytes of memory traffic", fusion.tile_dims = [0, 1], fusion.time_fused_ns = 4001 : i64, fusion.time_unfused_ns = 20004 : i64, fusion.working_set = 0 : i64} {
      %cst = arith.constant 5.000000e-01 : f32
      %cst_0 = arith.constant 1.000000e+00 : f32
      %cst_1 = arith.constant 1.41421354 : f32
      %cst_2 = arith.constant 0xFF800000 : f32
      %c0_i64 = arith.constant 0 : i64
      %1 = tensor.empty() : tensor<17x17xi64>
      %2 = tensor.empty() : tensor<17x17xf32>
      %3 = linalg.fill ins(%c0_i64 : i64) outs(%1 : tensor<17x17xi64>) -> tensor<17x17xi64>
      %4 = linalg.fill ins(%cst_2 : f32) outs(%2 : tensor<17x17xf32>) -> tensor<17x17xf32>
      %5:2 = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "parallel", "reduction"]} ins(%arg2 : tensor<17x17x1xf32>) outs(%4, %3 : tensor<17x17xf32>, tensor<17x17xi64>) {
      ^bb0(%in: f32, %out: f32, %out_3: i64):
        %8 = arith.maximumf %in, %out : f32
        %9 = arith.cmpf ogt, %in, %out : f32
        %10 = arith.select %9, %c0_i64, %out_3 : i64
        linalg.yield %8, %10 : f32, i64
      } -> (tensor<17x17xf32>, tensor<17x17xi64>)
      %6 = linalg.generic {indexing_maps = [#map2, #map2], iterator_types = ["parallel", "parallel"]} ins(%5#0 : tensor<17x17xf32>) outs(%2 : tensor<17x17xf32>) {
      ^bb0(%in: f32, %out: f32):
        %8 = arith.divf %in, %cst_1 : f32
        %9 = math.erf %8 : f32
        %10 = arith.addf %9, %cst_0 : f32
        %11 = arith.mulf %10, %cst : f32
        %12 = arith.mulf %in, %11 : f32
        linalg.yield %12 : f32
      } -> tensor<17x17xf32>
      %7 = linalg.generic {indexing_maps = [#map3, #map2, #map2], iterator_types = ["parallel", "parallel"]} ins(%arg3, %6 : tensor<17xf32>, tensor<17x17xf32>) outs(%2 : tensor<17x17xf32>) {
      ^bb0(%in: f32, %in_3: f32, %out: f32):
        %8 = arith.addf %in, %in_3 : f32
        linalg.yield %8 : f32
      } -> tensor<17x17xf32>
      fusion.yield %7 : tensor<17x17xf32>
    }
    return %0 : tensor<17x17xf32>
  }
}
"""


def test_a_per_row_value_reading_a_bias_along_one_row_dim_is_refused(ctx) -> None:
    """x1[17] + gelu(amax(x0[17, 17, 1], -1)): the group-level emitter saw 289 rows of one
    column and read x1 at the row index (element b of 17: wrong by 0.88 on the H200, found
    by test/gpu/fuzz_cuda.py). It refuses; without the data-movement kernels the fallback
    path builds the group, with them a data-movement kernel does (issue 16: the amax over a
    unit dim is a 1-point fold whose loads are vectors in the physical layout)."""
    module = ir.Module.parse(ROWS_READ_ALONG_ONE_DIM)
    func = module.body.operations[0]
    group = next(op for op in func.regions[0].blocks[0].operations
                 if op.operation.name == "fusion.group")
    assert cg.group_refusal(group.operation, cg.CudaOptions(movement=False)).startswith(
        "a per-row value reads an operand through")
    (launch,) = cg.generate(module, cg.CudaOptions(cubin=False, movement=False)).plan.launches
    assert launch.info["path"] == "fallback"
    module = ir.Module.parse(ROWS_READ_ALONG_ONE_DIM)
    (launch,) = cg.generate(module, cg.CudaOptions(cubin=False)).plan.launches
    assert launch.info["path"] == "movement"


def test_group_outputs_of_different_sizes_are_not_one_store_space(ctx) -> None:
    """A grouped convolution's two input reshapes (a 50- and a 4-element copy) planned as
    one horizontal group were stored over one 50-element space: the 4-element output was
    written out of bounds (memcheck on the H200, fuzz_cuda seed 21 p044). No kernel now
    writes outputs of different sizes in one elementwise space; the copies become views."""
    torch = pytest.importorskip("torch")
    from fusec.compiler import pipeline as pl
    from fusec.compiler.frontend import import_torch

    class Grouped(torch.nn.Module):
        def forward(self, x, w):
            return torch.nn.functional.conv2d(x, w, None, 2, 0, 1, 2)

    module = ir.Module.parse(import_torch(Grouped(), torch.randn(1, 2, 5, 5),
                                          torch.randn(4, 1, 1, 1)))
    pl.lower(module, pl.CompileOptions(target="cuda"), stop_after="tiled")
    plan = cg.generate(module, cg.CudaOptions(cubin=False)).plan
    assert sorted(b.view_of for b in plan.buffers if b.view_of is not None) == plan.inputs
    # The grouped convolution itself (one point per output) is a data-movement kernel.
    assert [k.info.get("path") for k in plan.launches] == ["movement"]


# An embedding feeding a LayerNorm, then a gather: every index read from data is checked.
EMBED_NORM_GATHER = """
#ids = affine_map<(d0, d1, d2) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @main(%ids: tensor<4x16xi64>, %idx: tensor<4x16x64xi64>) -> tensor<4x16x64xf32> {
  %table = arith.constant dense<1.5> : tensor<1000x64xf32>
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 64.0 : f32
  %e = tensor.empty() : tensor<4x16x64xf32>
  %e2 = tensor.empty() : tensor<4x16xf32>
  %emb = linalg.generic {indexing_maps = [#ids, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids : tensor<4x16xi64>) outs(%e : tensor<4x16x64xf32>) {
  ^bb0(%i: i64, %o: f32):
    %r = arith.index_cast %i : i64 to index
    %c = linalg.index 2 : index
    %v = tensor.extract %table[%r, %c] : tensor<1000x64xf32>
    linalg.yield %v : f32
  } -> tensor<4x16x64xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %sum = linalg.generic {indexing_maps = [#id3, #row], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%emb : tensor<4x16x64xf32>) outs(%z : tensor<4x16xf32>) {
  ^bb0(%i: f32, %o: f32):
    %s = arith.addf %i, %o : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  %centred = linalg.generic {indexing_maps = [#id3, #row, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%emb, %sum : tensor<4x16x64xf32>, tensor<4x16xf32>) outs(%e : tensor<4x16x64xf32>) {
  ^bb0(%i: f32, %s: f32, %o: f32):
    %m = arith.divf %s, %n : f32
    %d = arith.subf %i, %m : f32
    linalg.yield %d : f32
  } -> tensor<4x16x64xf32>
  %g = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%idx : tensor<4x16x64xi64>) outs(%e : tensor<4x16x64xf32>) {
  ^bb0(%i: i64, %o: f32):
    %a = linalg.index 0 : index
    %b = arith.index_cast %i : i64 to index
    %c = linalg.index 2 : index
    %v = tensor.extract %centred[%a, %b, %c] : tensor<4x16x64xf32>
    linalg.yield %v : f32
  } -> tensor<4x16x64xf32>
  return %g : tensor<4x16x64xf32>
}
"""


def test_index_checks_report_through_a_device_status() -> None:
    """On the GPU an index read from data out of range reads index 0 and records the first
    failure (check + 1, index) in the device global `fusec_index_status` by compare-and-swap,
    which the runtime reads after the run; the reports go in after tiling, so the embedding
    still fuses into its consumers' tiles (as many kernels as without the checks)."""
    from fusec.compiler import pipeline as pl

    with make_context():
        module = ir.Module.parse(EMBED_NORM_GATHER)
        options = pl.CompileOptions(target="cuda")
        pl.lower(module, options, stop_after="tiled")
        checks = pl.index_check_messages(module)
        program = cg.generate(module, cg.CudaOptions(cubin=False))
    assert len(checks) == 2 and all("{index} is out of range" in c for c in checks)
    kernels = [k for k in program.plan.launches if k.launch_kind == "kernel"]
    # One kernel for the embedding and its normalisation, one for the gather: the report
    # in the embedding's payload did not leave it computed whole beside the tile loop.
    assert len(kernels) == 2, [k.info for k in kernels]
    assert not any("fusion.split" in str(k.info) for k in kernels)
    assert re.search(r"\.global \.align \d+ \.b8 fusec_index_status\[16\]", program.ptx)
    assert re.search(r"atom(\.[a-z_]+)*\.cas\.b64\s+\S+\s+\[fusec_index_status\]", program.ptx)
    assert "fusec_index_error" not in program.ptx  # no host call left in a kernel


def _cuda_program(model, *inputs, fusion: bool = True):
    """A torch model through fusec's frontend and target cuda's stages to its CudaProgram."""
    from fusec.compiler import driver
    from fusec.compiler import pipeline as pl
    from fusec.compiler.frontend import import_torch

    with driver.quiet_torch_logs():
        text = import_torch(model, *inputs)
    module = driver.parse(text, "<test>")
    pl.lower(module, pl.CompileOptions(target="cuda", fusion=fusion), stop_after="tiled")
    return cg.generate(module, cg.CudaOptions(cubin=False))


def test_a_value_computed_per_row_is_never_read_as_a_column() -> None:
    """A [1, 17] value (x1 * 0.5) beside a [17, 17] `where` in one row kernel: the emitter
    computes it once per row (it has as many elements as rows), so a consumer that reads it
    through a column map (x1 broadcast over rows) would get x1[row] for x1[col] (fuzz_cuda
    seed 41, p203: relative error 0.58 on the H200). The emitter refuses that read; the
    group is split, each part built as what it is."""
    import torch

    class Model(torch.nn.Module):
        def forward(self, x0, x1, x2):
            return x2 - x1, torch.where(x0 > x1, x0, x1 * 0.5)

    program = _cuda_program(Model(), torch.randn(17, 17), torch.randn(1, 17), torch.randn(1))
    kernels = [k for k in program.plan.launches if k.launch_kind == "kernel"]
    x1 = program.plan.inputs[1]
    for k in kernels:
        text = program.kernels_mlir.split(f"gpu.func @{k.symbol}(")[1].split("gpu.return")[0]
        if k.info.get("shape") == "row" and x1 in k.buffers:
            arg = k.buffers.index(x1)
            # x1 is read at its column (the thread's position), never at the row (block id).
            assert not re.search(rf"memref\.load %arg{arg}\[%bid\]", text), text


def test_a_copied_output_spans_its_kernel() -> None:
    """A horizontal group of a weight's reshape (16 elements, a copy of an input) and a
    [1, 8, 1, 1] sum: a row kernel over the sum's 8 rows copied only the first 8 of the
    weight's 16 elements (fuzz_cuda seed 51, p173/p174: grouped-convolution outputs 0.65 off
    on the H200). Every kernel that writes a buffer now covers all of it; here the reshape is
    a view of the input (no copy at all)."""
    import torch
    import torch.nn.functional as F

    class Model(torch.nn.Module):
        def forward(self, x, w, b, c):
            return b + c, F.conv2d(x, w, None, 2, 0, 1, 8)

    program = _cuda_program(Model(), torch.randn(3, 8, 3, 9), torch.randn(16, 1, 1, 1),
                            torch.randn(1, 8, 1, 1), torch.randn(1, 1))
    plan = program.plan
    weight = [b for b in plan.buffers if b.shape == [8, 2, 1, 1, 1]]
    assert weight, [b.shape for b in plan.buffers]
    for b in weight:
        writers = [k for k in plan.launches if k.launch_kind == "kernel" and
                   k.buffers and b.id in k.buffers[-len(k.buffers):] and
                   k.info.get("path") == "fast" and k.info.get("shape") == "row"]
        for k in writers:
            rows, cols = k.info["rows"], k.info["cols"]
            assert rows * cols >= 16, (k.symbol, k.info)
        assert b.view_of == plan.inputs[1] or not writers


def test_a_group_of_an_empty_tensor_is_a_buffer_not_a_kernel() -> None:
    """Without fusion, a grouped convolution's init (an empty tensor, reshaped) is a group of
    its own: it computes nothing and gets a buffer, no kernel (it was refused: 'group output
    of kind Empty', fuzz_cuda seed 41 p039 and 31 CNN programs of seed 51, unfused)."""
    import torch
    import torch.nn.functional as F

    class Model(torch.nn.Module):
        def forward(self, x, w):
            return F.conv2d(x, w, None, 1, 1, 1, 8)

    program = _cuda_program(Model(), torch.randn(2, 8, 5, 7), torch.randn(16, 1, 2, 2),
                            fusion=False)
    kernels = [k for k in program.plan.launches if k.launch_kind == "kernel"]
    assert kernels and all(k.ops for k in kernels), [k.ops for k in kernels]


def test_checks_whose_guards_folded_away_leave_nothing_to_read() -> None:
    """A gather at reversed-arange indices: its guard folds away (the index is provably in
    range), so no kernel records a failure and the PTX has no status global; the artifact's
    table then lists no check, and the runtime looks for no global (it failed with
    CUDA_ERROR_NOT_FOUND on the H200: fuzz_cuda seed 41, p200-p202)."""
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.gather(x, -1, (x.shape[-1] - 1 - torch.arange(x.shape[-1]))
                                .expand(x.shape)) * 2.0

    program = _cuda_program(Model(), torch.randn(1))
    program.plan.metadata["index_checks"] = ["<test>: index {index} is out of range"]
    assert "fusec_index_status" not in program.ptx
    assert "fusec_index_messages, 0," in cg.host_code(program)


def test_an_output_no_kernel_writes_gets_its_buffer() -> None:
    """native_batch_norm in eval returns two zero-size tensors (tensor.empty, no kernel writes
    them): each gets an output buffer of its own, as on the CPU (the e2e suite's
    NativeBatchNorm*, embedding_bag and tril_indices tests were refused: 'a returned value is
    not an input or a group result')."""
    import torch

    class Model(torch.nn.Module):
        def forward(self, x, w, b, mean, var):
            return torch.ops.aten.native_batch_norm(x, w, b, mean, var, training=False,
                                                    momentum=0.1, eps=1e-5)

    program = _cuda_program(Model(), torch.rand(2, 5, 3), torch.rand(5), torch.rand(5),
                            torch.rand(5), torch.rand(5) + 0.5)
    plan = program.plan
    shapes = [plan.buffers[b].shape for b in plan.outputs]
    assert shapes == [[2, 5, 3], [0], [0]]
    assert len(set(plan.outputs)) == 3  # the value returned twice: two buffers


def test_a_tensor_constant_read_from_outside_a_group_is_a_constant_buffer(tmp_path) -> None:
    """torch-mlir's own import of reflection_pad2d (the e2e suite's ReflectionPad2dModule_
    Bottom) leaves the pad's index table as a tensor constant outside the kernels that read
    it: a constant buffer, as a weight is (it was refused: 'a group operand is a tensor
    constant outside the group')."""
    import torch
    from torch_mlir import fx

    from fusec.compiler import driver
    from fusec.compiler.frontend import check_dialects, inline_dense_resources, to_generic
    from fusec.compiler.pipeline import CompileOptions

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.ops.aten.reflection_pad2d(x, (0, 0, 0, 5))

    program = torch.export.export(Model(), (torch.rand(2, 3, 10, 10),), strict=True)
    module = fx.export_and_import(program, output_type="linalg-on-tensors", func_name="main")
    text = inline_dense_resources(module.operation.get_asm(print_generic_op_form=True))
    context = make_context()
    check_dialects(text, context)
    text = to_generic(text, context)
    meta = driver.compile_text(text, "<test>", CompileOptions(target="cuda"),
                               str(tmp_path / "pad.so"))
    roles = [b["role"] for b in meta["plan"]["buffers"]]
    assert "constant" in roles


def test_int16_tensors_build_for_cuda() -> None:
    """i16 element types (the e2e suite's Int16 tests were refused: 'element type i16 is not
    supported'): buffers of int16, the kernel built."""
    import torch

    class Model(torch.nn.Module):
        def forward(self, a, b):
            return torch.clamp(a + b, -100, 100)

    a = torch.randint(-300, 300, (4, 8), dtype=torch.int16)
    program = _cuda_program(Model(), a, a.clone())
    assert {b.dtype for b in program.plan.buffers} == {"int16"}
    assert "xi16" in program.kernels_mlir


def test_a_group_is_not_split_where_a_scalar_would_cross() -> None:
    """nll_loss backward on 1-D input (the e2e suite's NllLossModuleBackward1D*): the split at
    reshapes would have cut the scatter's serial group where an extracted f32 passes between
    the pieces, leaving a group that yields a scalar (an internal error in the tiled stage);
    kernels hand each other tensors only, so the group stays whole."""
    import torch

    class Model(torch.nn.Module):
        def forward(self, g, x, t, tw):
            return torch.ops.aten.nll_loss_backward(g, x, target=t, weight=None, reduction=0,
                                                    ignore_index=10, total_weight=tw)

    program = _cuda_program(Model(), torch.rand(1), torch.rand(3), torch.tensor(2),
                            torch.tensor(3.0))
    assert program.plan.launches


INT_MATMUL = """
func.func @main(%a: tensor<16x24xi64>, %b: tensor<24x8xi64>) -> tensor<16x8xi64> {
  %c0 = arith.constant 0 : i64
  %e = tensor.empty() : tensor<16x8xi64>
  %z = linalg.fill ins(%c0 : i64) outs(%e : tensor<16x8xi64>) -> tensor<16x8xi64>
  %m = linalg.matmul ins(%a, %b : tensor<16x24xi64>, tensor<24x8xi64>)
      outs(%z : tensor<16x8xi64>) -> tensor<16x8xi64>
  return %m : tensor<16x8xi64>
}
"""


def test_integer_matmul_is_built_not_an_internal_error(tmp_path) -> None:
    """torch.mm of int64 tensors (the suite's AtenIntMM, BmmInt): no GEMM kernel takes
    integers, so the matmul goes to the fallback path, with the reason; it was an internal
    error (the GEMM recognisers read the zero fill's value as a float)."""
    import subprocess
    import sys

    source, out = tmp_path / "int_mm.mlir", tmp_path / "int_mm.so"
    source.write_text(INT_MATMUL)
    done = subprocess.run([sys.executable, "-m", "fusec.tools.fusec", str(source), "--target",
                           "cuda", "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (kernel,) = cg.load_metadata(out)["kernels"]
    assert kernel["info"]["path"] == "fallback" and "linalg.matmul" in kernel["info"]["why"]


def test_conv1d_takes_the_convolution_family_not_the_fallback(ctx) -> None:
    """Whisper's front end (1-D convolutions, one strided): each `linalg.conv_1d_ncw_fcw` is
    a 2-D convolution of height 1 by the linalg stage (--fusion-conv1d-as-conv2d), so the
    GPU builds it as the 2-D family does (an im2col gather and a GEMM); it was a fallback
    kernel (the H200's Whisper encoder: 2.6x slower than Inductor)."""
    torch = pytest.importorskip("torch")

    class FrontEnd(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv1d(16, 64, 3, padding=1)
            self.c2 = torch.nn.Conv1d(64, 64, 3, stride=2, padding=1)

        def forward(self, x):
            return torch.nn.functional.gelu(self.c2(torch.nn.functional.gelu(self.c1(x))))

    torch.manual_seed(0)
    module = _planned(FrontEnd().eval(), torch.randn(1, 16, 600))
    plan = cg.generate(module, cg.CudaOptions(cubin=False)).plan
    paths = [k.info.get("path") for k in plan.launches]
    assert "fallback" not in paths, paths
    assert sum(p in ("gemm", "tc_gemm") for p in paths) == 2, paths


ARGMAX = """
#x = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<64x1000xf32>) -> (tensor<64xf32>, tensor<64xi64>) {
  %ninf = arith.constant 0xFF800000 : f32
  %c0 = arith.constant 0 : i64
  %ev = tensor.empty() : tensor<64xf32>
  %ei = tensor.empty() : tensor<64xi64>
  %v0 = linalg.fill ins(%ninf : f32) outs(%ev : tensor<64xf32>) -> tensor<64xf32>
  %i0 = linalg.fill ins(%c0 : i64) outs(%ei : tensor<64xi64>) -> tensor<64xi64>
  %r:2 = linalg.generic {indexing_maps = [#x, #row, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<64x1000xf32>) outs(%v0, %i0 : tensor<64xf32>, tensor<64xi64>) {
  ^bb0(%in: f32, %acc: f32, %idx: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %m = arith.maximumf %in, %acc : f32
    %u = arith.cmpf ugt, %in, %acc : f32
    %o = arith.cmpf ord, %acc, %acc : f32
    %c = arith.andi %u, %o : i1
    %s = arith.select %c, %ii, %idx : i64
    linalg.yield %m, %s : f32, i64
  } -> (tensor<64xf32>, tensor<64xi64>)
  return %r#0, %r#1 : tensor<64xf32>, tensor<64xi64>
}
"""

ANY_ROWS = """
#x = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<64x1000xf32>) -> tensor<64xi1> {
  %t = arith.constant 3.5 : f32
  %false = arith.constant false
  %eb = tensor.empty() : tensor<64x1000xi1>
  %e = tensor.empty() : tensor<64xi1>
  %gt = linalg.generic {indexing_maps = [#x, #x], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<64x1000xf32>) outs(%eb : tensor<64x1000xi1>) {
  ^bb0(%a: f32, %o: i1):
    %c = arith.cmpf ogt, %a, %t : f32
    linalg.yield %c : i1
  } -> tensor<64x1000xi1>
  %z = linalg.fill ins(%false : i1) outs(%e : tensor<64xi1>) -> tensor<64xi1>
  %any = linalg.generic {indexing_maps = [#x, #row], iterator_types = ["parallel", "reduction"]}
      ins(%gt : tensor<64x1000xi1>) outs(%z : tensor<64xi1>) {
  ^bb0(%a: i1, %o: i1):
    %r = arith.ori %a, %o : i1
    linalg.yield %r : i1
  } -> tensor<64xi1>
  return %any : tensor<64xi1>
}
"""


def test_row_argmax_folds_value_and_index_pairs(ctx) -> None:
    """torch's argmax (after `--fusion-nan-minmax`) on the row emitter: each thread folds its
    columns with the payload itself (the column as linalg.index), then the block combines
    (value, index) pairs: both shuffled in every butterfly step (the index as i32), the NaN
    and first-index rule as selects, one shared-memory round. It was a fallback kernel, one
    thread per row."""
    program = _generate(ARGMAX)
    launch = program.plan.launches[0]
    assert launch.info["path"] == "fast" and launch.info["shape"] == "row"
    text = program.kernels_mlir
    assert text.count("gpu.barrier") == 1
    shuffles = re.findall(r"gpu\.shuffle xor .* : (\w+)", text)
    assert shuffles.count("f32") == shuffles.count("i32") > 0  # value and index together
    assert "arith.cmpf uno" in text and "arith.cmpi slt" in text  # NaN first, first index
    assert ".visible .entry fusec_k0(" in program.ptx


def test_row_any_folds_bools_in_i32(ctx) -> None:
    """`any(-1)` (an i1 or-fold) on the row emitter: bools cross the block as i32 (the
    shuffles and the per-warp slots take no i1), truncated back once; it was a fallback
    kernel ("no known combiner")."""
    program = _generate(ANY_ROWS)
    launch = program.plan.launches[0]
    assert launch.info["path"] == "fast" and launch.info["shape"] == "row"
    text = program.kernels_mlir
    assert set(re.findall(r"gpu\.shuffle xor .* : (\w+)", text)) == {"i32"}
    assert "arith.extui" in text and "arith.trunci" in text
    assert re.search(r"arith\.ori .* : i32", text)


INDEX_ROWS = """
#c1 = affine_map<(d0) -> (d0)>
#x3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2) -> (d2)>
#pos = affine_map<(d0, d1, d2) -> (d1)>
#row = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @main(%x: tensor<4x8x16xf32>) -> (tensor<4x8x16xf32>, tensor<4x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %ec = tensor.empty() : tensor<16xi64>
  %col = linalg.generic {indexing_maps = [#c1], iterator_types = ["parallel"]}
      outs(%ec : tensor<16xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %n = arith.index_cast %i : index to i64
    linalg.yield %n : i64
  } -> tensor<16xi64>
  %ep = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [#c1], iterator_types = ["parallel"]}
      outs(%ep : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %n = arith.index_cast %i : index to i64
    linalg.yield %n : i64
  } -> tensor<8xi64>
  %e = tensor.empty() : tensor<4x8x16xf32>
  %z = linalg.generic {indexing_maps = [#x3, #col, #pos, #x3],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %col, %pos : tensor<4x8x16xf32>, tensor<16xi64>, tensor<8xi64>)
      outs(%e : tensor<4x8x16xf32>) {
  ^bb0(%a: f32, %c: i64, %p: i64, %o: f32):
    %cf = arith.sitofp %c : i64 to f32
    %pf = arith.sitofp %p : i64 to f32
    %i0 = linalg.index 0 : index
    %i1 = linalg.index 1 : index
    %i2 = linalg.index 2 : index
    %c128 = arith.constant 128 : index
    %c16 = arith.constant 16 : index
    %l0 = arith.muli %i0, %c128 : index
    %l1 = arith.muli %i1, %c16 : index
    %l01 = arith.addi %l0, %l1 : index
    %l = arith.addi %l01, %i2 : index
    %li = arith.index_cast %l : index to i64
    %lf = arith.sitofp %li : i64 to f32
    %m = arith.mulf %a, %cf : f32
    %s = arith.addf %m, %pf : f32
    %t = arith.addf %s, %lf : f32
    linalg.yield %t : f32
  } -> tensor<4x8x16xf32>
  %er = tensor.empty() : tensor<4x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%er : tensor<4x8xf32>) -> tensor<4x8xf32>
  %sum = linalg.generic {indexing_maps = [#x3, #row], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%z : tensor<4x8x16xf32>) outs(%f : tensor<4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %z, %sum : tensor<4x8x16xf32>, tensor<4x8xf32>
}
"""


def test_payloads_reading_their_loop_position_are_one_row_kernel(ctx) -> None:
    """`linalg.index` in a row kernel (`KernelEmitter.bind_indices`): an iota over the row's
    last dim (a top-k's expert index: a value per column, `Col`), one over trailing dims of
    the rows (positions in [B, T, d]: `RowMod`, at block id mod T), and a payload reading all
    three of its loops' positions, are computed in the kernel from the thread's column and
    the block id, never read from memory (no i64 buffer). Before, a live `linalg.index`
    outside an argmax sent such a group to the data-movement family or split it per op (the
    top-2 MoE router: 22 one-op kernels)."""
    program = _generate(INDEX_ROWS)
    launches = [k for k in program.plan.launches if k.launch_kind == "kernel"]
    assert len(launches) == 1
    assert launches[0].info["path"] == "fast" and launches[0].info["shape"] == "row"
    text = program.kernels_mlir
    assert "i64>" not in text.split("kernel attributes")[0]  # the arguments: f32 only
    assert re.search(r"arith\.remui %bid, %c\d+ : index", text)  # position mod 8
    assert re.search(r"arith\.divui %bid, %c\d+ : index", text)  # the batch: bid / 8
    assert ".visible .entry fusec_k0(" in program.ptx


INDEX_ELEMENTWISE = """
#x2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%x: tensor<8x20xf32>) -> tensor<8x20xf32> {
  %e = tensor.empty() : tensor<8x20xf32>
  %y = linalg.generic {indexing_maps = [#x2, #x2], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x20xf32>) outs(%e : tensor<8x20xf32>) {
  ^bb0(%a: f32, %o: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %jj = arith.index_cast %j : index to i64
    %c = arith.cmpi sge, %ii, %jj : i64
    %n = arith.negf %a : f32
    %s = arith.select %c, %a, %n : f32
    linalg.yield %s : f32
  } -> tensor<8x20xf32>
  return %y : tensor<8x20xf32>
}
"""


def test_an_elementwise_payload_reads_its_position_from_the_element_offset(ctx) -> None:
    """In an elementwise kernel a `linalg.index` is the element's linear offset taken apart
    over the loop ranges (i = offset / 20, j = offset mod 20)."""
    program = _generate(INDEX_ELEMENTWISE)
    launch = program.plan.launches[0]
    assert launch.info["path"] == "fast" and launch.info["shape"] == "elementwise"
    text = program.kernels_mlir
    assert re.search(r"arith\.divui %\w+, %c\d+ : index", text)
    assert re.search(r"arith\.remui %\w+, %c\d+ : index", text)


def test_a_per_column_value_is_never_a_group_output(ctx) -> None:
    """A value computed per column (`Col`) exists at the thread's columns of one row: it is
    never stored as a group output (its buffer has a row's elements, not the domain's); the
    fast emitter refuses the group, which another path builds."""
    from fusec.compiler.targets.cuda.rewrites import group_refusal

    text = INDEX_ROWS.replace("-> (tensor<4x8x16xf32>, tensor<4x8xf32>) {",
                              "-> (tensor<4x8x16xf32>, tensor<4x8xf32>, tensor<16xi64>) {")
    text = text.replace("return %z, %sum : tensor<4x8x16xf32>, tensor<4x8xf32>",
                        "return %z, %sum, %col : tensor<4x8x16xf32>, tensor<4x8xf32>, "
                        "tensor<16xi64>")
    module = _grouped(text)
    group = next(o.operation for o in module.body.operations[0].regions[0].blocks[0].operations
                 if o.operation.name == "fusion.group")
    refusal = group_refusal(group, cg.CudaOptions(cubin=False, movement=False))
    assert refusal is not None and "per-column value as a group output" in refusal


def test_a_broadcast_over_a_unit_last_dim_is_not_read_as_rows() -> None:
    """`repeat_interleave(2, dim=2)` of a [55, 64, 3, 1] tensor: a broadcast generic over
    [55, 64, 3, 2, 1] reading its input through (d0, d1, d2, d4). Classifying maps over the
    loops longer than 1 (`access_maps`, for a keepdim reduction's unit loop) must keep the
    last loop, the row's column, even of extent 1: squeezed, the read became (d0, d1, d2) of
    four loops, "a value per row", and the fast emitter's kernel copied garbage (fuzz_movement
    p168 on the H100, session 52: 1.9e18 from an exact copy). It is the data-movement
    family's kernel, as before."""
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return x.repeat_interleave(2, dim=2)

    program = _cuda_program(Model(), torch.randn(55, 64, 3, 1).to(torch.bfloat16))
    kernels = [k for k in program.plan.launches if k.launch_kind == "kernel"]
    assert [k.info["path"] for k in kernels] == ["movement"], [k.info for k in kernels]
