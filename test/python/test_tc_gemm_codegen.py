"""Our tensor-core GEMM family through the whole CUDA pipeline, built here without a GPU
(numerics and time on the H200: test/gpu/tc_gemm.py): which matmuls the planner gives it,
what it fuses after them, what the artifact tells the runtime (tensor maps, grid, shared
memory), and that the kernel lowers to sm_90a wgmma without spills."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from fusec.compiler import driver  # noqa: E402
from fusec.compiler.frontend import import_torch  # noqa: E402
from fusec.compiler.pipeline import CompileOptions  # noqa: E402
from fusec.compiler.targets.cuda.options import CudaOptions  # noqa: E402


class Wrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _build(fn, shapes, dtype=torch.bfloat16, tc=True, tmp_path=None, **cuda):
    args = [torch.randn(s).to(dtype) for s in shapes]
    with driver.quiet_torch_logs():
        text = import_torch(Wrap(fn).eval(), *args)
    options = CompileOptions(target="cuda", model_name="m",
                             cuda=CudaOptions(tc_gemm=tc, cubin=False, **cuda))
    out = tmp_path / ("tc.so" if tc else "lib.so")
    return driver.compile_text(text, "<test>", options, str(out)), out


def test_linear_bias_gelu_residual_is_one_kernel(tmp_path):
    """bias, the cast to bf16, torch's erf GELU and a residual add run on the accumulator:
    one launch (cuBLASLt takes bias + cast + GELU and leaves the add: two)."""
    fn = lambda x, w, b, r: F.gelu(F.linear(x, w, b)) + r  # noqa: E731
    shapes = [(300, 256), (384, 256), (384,), (300, 384)]
    meta, so = _build(fn, shapes, tmp_path=tmp_path)
    kernels = meta["kernels"]
    assert [k["info"]["path"] for k in kernels] == ["tc_gemm"]
    info = kernels[0]["info"]
    # The residual add of two bf16 values computed in f32, rounded once (as torch adds).
    assert info["epilogue"] == ["bias", "cast", "gelu", "(extf,extf,addf,truncf)"]
    # erf's GELU makes the epilogue compute-bound: 8 row passes per loop iteration, not all
    # 32 (gemm_cost.tc_epilogue_unroll; compile time); a bias + ReLU stays fully unrolled.
    assert info["epilogue_unroll"] == 8
    assert "our tensor-core GEMM" in info["why"] and "cuBLASLt" in info["why"]
    launch = meta["plan"]["launches"][0]
    # Nine 128 x 128 tiles would fill at most half the SMs: 64 x 128 tiles
    # (gemm_cost.TC_SMALL_GRID_TILE), 5 x 3 of them.
    assert info["tile"] == [64, 128, 64, 4]
    # A (300 x 256, K contiguous) and the N x K weight through 128-byte-swizzled TMA maps:
    # [parameter, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank 2, dims innermost first (padded to
    #  5 with 1), byte strides of dims 1..4 (the padding's: the whole matrix), the box
    #  (padded: BK x BM of A, BK x BN of B), CU_TENSOR_MAP_SWIZZLE_128B, byte offset]
    # (wgmma.map_entry).
    assert launch["maps"] == [[0, 9, 2, 256, 300, 1, 1, 1, 512] + [512 * 300] * 3 +
                              [64, 64, 1, 1, 1, 3, 0],
                              [1, 9, 2, 256, 384, 1, 1, 1, 512] + [512 * 384] * 3 +
                              [64, 128, 1, 1, 1, 3, 0]]
    assert launch["grid"] == 5 * 3 and launch["block"] == 128
    assert launch["shared_bytes"] == 4 * (64 + 128) * 64 * 2
    # A, B, D, then the bias and the residual the epilogue reads.
    assert len(launch["buffers"]) == 5
    assert meta["plan"]["metadata"]["arch"] == "sm_90a"
    lib_meta, _ = _build(fn, shapes, tc=False, tmp_path=tmp_path)
    assert [k["info"]["path"] for k in lib_meta["kernels"]] == ["gemm", "fast"]


def test_without_the_family_cublaslt_and_an_epilogue_kernel(tmp_path):
    fn = lambda x, w, b, r: F.linear(x, w, b) + r  # noqa: E731
    meta, _ = _build(fn, [(300, 256), (384, 256), (384,), (300, 384)], tc=False,
                     tmp_path=tmp_path)
    assert [k["info"]["path"] for k in meta["kernels"]] == ["gemm", "fast"]
    assert meta["plan"]["metadata"]["arch"] == "sm_90"
    # Not for other architectures either: sm_80 has no wgmma.
    meta, _ = _build(fn, [(300, 256), (384, 256), (384,), (300, 384)], tmp_path=tmp_path,
                     arch="sm_80")
    assert [k["info"]["path"] for k in meta["kernels"]] == ["gemm", "fast"]


def test_dag_epilogue_and_k_by_n_operand(tmp_path):
    """silu(x @ w) reads x @ w twice (x * sigmoid(x)): the epilogue is a DAG, one kernel.
    w stored K x N is wgmma's transposed B: a box of 64 columns x BK rows."""
    fn = lambda x, w: F.silu(x @ w)  # noqa: E731
    meta, _ = _build(fn, [(256, 192), (192, 320)], tmp_path=tmp_path)
    assert [k["info"]["path"] for k in meta["kernels"]] == ["tc_gemm"]
    launch = meta["plan"]["launches"][0]
    assert launch["info"]["b_layout"] == "kn"
    assert launch["maps"][1] == [1, 9, 2, 320, 192, 1, 1, 1, 640] + [640 * 192] * 3 + \
        [64, 64, 1, 1, 1, 3, 0]


@pytest.mark.parametrize("fn,shapes,dtype,reason", [
    (lambda x, w: F.linear(x, w), [(64, 128), (96, 128)], torch.float32, None),
    (lambda a, b: torch.bmm(a, b), [(4, 64, 128), (4, 128, 96)], torch.bfloat16,
     "a batched matmul"),
    (lambda a, b: a.t() @ b, [(128, 64), (128, 96)], torch.bfloat16, "A is stored K x M"),
    (lambda a, b: a @ b, [(64, 100), (100, 96)], torch.bfloat16,
     "an operand's row stride or offset is not a multiple of 16 bytes"),
])
def test_what_stays_cublaslt(fn, shapes, dtype, reason, tmp_path):
    meta, _ = _build(fn, shapes, dtype=dtype, tmp_path=tmp_path)
    gemm = [k for k in meta["kernels"] if k["info"].get("path") in ("gemm", "tc_gemm")]
    assert [k["info"]["path"] for k in gemm] == ["gemm"]
    if reason is None:  # fp32: not a candidate, and the reason is not cluttered with ours
        assert "tensor-core" not in gemm[0]["info"]["why"]
    else:
        assert f"not our tensor-core GEMM: {reason}" in gemm[0]["info"]["why"]


def test_kernel_ptx_has_the_epilogue_and_no_spills(tmp_path):
    fn = lambda x, w, b, r: torch.relu(F.linear(x, w, b)) * 0.5 + r  # noqa: E731
    args = [torch.randn(s).to(torch.float16) for s in [(200, 128), (136, 128), (136,),
                                                        (200, 136)]]
    with driver.quiet_torch_logs():
        text = import_torch(Wrap(fn).eval(), *args)
    options = CompileOptions(target="cuda", model_name="m", dump_dir=str(tmp_path / "d"),
                             cuda=CudaOptions(cubin=False))
    meta = driver.compile_text(text, "<test>", options, str(tmp_path / "m.so"))
    assert [k["info"]["path"] for k in meta["kernels"]] == ["tc_gemm"]
    assert meta["kernels"][0]["info"]["epilogue_unroll"] == 32
    ptx = (tmp_path / "d" / "m.ptx").read_text()
    assert ".target sm_90a" in ptx
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16", ptx)
    assert ptx.count("cp.async.bulk.tensor.2d") >= 2
    # Each thread's four values: 8-byte loads of the residual (aligned parameters, merged),
    # one 8-byte store per pass of the unrolled epilogue; the bias (the same columns in
    # every pass: the loads are unconditional, clamped) loaded once, out of the loop.
    from fusec.compiler.targets.cuda.wgmma import EPILOGUE_UNROLL, WARPGROUP

    # The tile's row passes (BN / 4 threads a row), all unrolled when there are at most
    # EPILOGUE_UNROLL: 64 x 128 here (two row tiles of 128 would leave most SMs idle).
    bm, bn = meta["kernels"][0]["info"]["tile"][:2]
    assert (bm, bn) == (64, 128)
    passes = min(EPILOGUE_UNROLL, bm // (WARPGROUP // (bn // 4)))
    # The operands are noalias (read-only: `.nc`), so ptxas may issue every pass's load
    # before the first store.
    assert len(re.findall(r"ld\.global\.nc\.v4\.b16", ptx)) == 1
    assert len(re.findall(r"ld\.global\.nc\.v2\.b32", ptx)) == passes
    stores = re.findall(r"st\.global\.(\S+)", ptx)
    assert stores == ["v2.b32"] * passes, stores
    assert not re.search(r"(ld|st)\.global\.b16", ptx)
    if shutil.which("ptxas"):
        out = subprocess.run(["ptxas", "-arch=sm_90a", "-v", "-", "-o", str(tmp_path / "k")],
                             input=ptx, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert "0 bytes spill stores" in out.stderr


def test_two_kernels_share_one_aligned_dynamic_shared_region(tmp_path):
    """Regression (H200, a GPT-2 block with three of these kernels in one module:
    CUDA_ERROR_MISALIGNED_ADDRESS): the dynamic shared memory TMA writes into must be PTX's
    `.extern .shared` region, 1024-byte aligned (the 128-byte swizzle's atom), not the
    zero-sized static variable MLIR's lowering declares, which lands wherever the static
    layout puts it once several kernels share it."""
    fn = lambda x, w1, w2: F.linear(torch.relu(F.linear(x, w1)), w2) + x  # noqa: E731
    args_shapes = [(256, 128), (192, 128), (128, 192)]
    args = [torch.randn(s).to(torch.bfloat16) for s in args_shapes]
    with driver.quiet_torch_logs():
        text = import_torch(Wrap(fn).eval(), *args)
    options = CompileOptions(target="cuda", model_name="m", dump_dir=str(tmp_path / "d"),
                             cuda=CudaOptions(cubin=False))
    meta = driver.compile_text(text, "<test>", options, str(tmp_path / "m.so"))
    assert [k["info"]["path"] for k in meta["kernels"]] == ["tc_gemm", "tc_gemm"]
    ptx = (tmp_path / "d" / "m.ptx").read_text()
    decls = re.findall(r"^.*\.shared.*__dynamic_shmem__\w*.*$", ptx, re.M)
    assert decls == [".extern .shared .align 1024 .b8 __dynamic_shmem__0[];"], decls


def test_an_epilogue_op_that_yields_a_captured_constant(tmp_path):
    """Regression (review): clamp_min(y, nan) imports as a generic whose body only yields a
    constant defined outside it; the epilogue emitted only constants that an op reads, and
    the yield's lookup failed (KeyError) at compile time."""
    fn = lambda x, w: torch.clamp_min(F.linear(x, w), float("nan"))  # noqa: E731
    meta, _ = _build(fn, [(300, 256), (384, 256)], tmp_path=tmp_path)
    assert "tc_gemm" in [k["info"]["path"] for k in meta["kernels"]]


def test_f32_activations_times_a_bf16_weight_is_a_library_call(tmp_path):
    """HF BERT and ViT in bf16 keep some activations in f32 (f32 x bf16 -> f32 linears):
    the weight's cast stays before the call and the matmul is cuBLASLt's in f32, not a
    fallback kernel (found by test/gpu/attention_models.py: six fallback matmuls per BERT)."""
    fn = lambda x, w: F.linear(x, w.float())  # noqa: E731
    args = [torch.randn(64, 256), torch.randn(128, 256).bfloat16()]
    with driver.quiet_torch_logs():
        text = import_torch(Wrap(fn).eval(), *args)
    options = CompileOptions(target="cuda", model_name="m", cuda=CudaOptions(cubin=False))
    meta = driver.compile_text(text, "<test>", options, str(tmp_path / "m.so"))
    paths = [k["info"]["path"] for k in meta["kernels"]]
    assert "fallback" not in paths and "gemm" in paths


@pytest.mark.parametrize("schedule", ["ping-pong", "one-warpgroup", "model", "cooperative"])
def test_gemm_schedule_option(schedule, tmp_path):
    """`--cuda-gemm-schedule`: the persistent ping-pong kernel (a CTA per SM, 384 threads, a
    ring of stages beside each consumer's 64-row f32 buffer) or a CTA per tile (128 threads);
    the epilogue (bias, residual) is the same. The model chooses ping-pong here (GPT-2's
    out-projection: 384 tiles, K 768; measured 1.20x the one-warpgroup kernel, RESULTS run
    200)."""
    fn = lambda x, w, b, r: F.linear(x, w, b) + r  # noqa: E731
    shapes = [(8192, 768), (768, 768), (768,), (8192, 768)]
    meta, _ = _build(fn, shapes, tmp_path=tmp_path, gemm_schedule=schedule)
    (kernel,) = meta["kernels"]
    info = kernel["info"]
    assert info["path"] == "tc_gemm" and info["epilogue"] == ["bias", "cast",
                                                               "(extf,extf,addf,truncf)"]
    launch = meta["plan"]["launches"][0]
    if schedule == "cooperative":
        # 256 x 128 tiles, both consumers on each: 32 x 6 of them, a CTA per SM.
        assert info["tile"] == [256, 128, 64, 4, 2] and info["schedule"] == "cooperative"
        assert info["tile_from"] == "--cuda-gemm-schedule cooperative"
        assert (launch["grid"], launch["block"]) == (132, 384)
        assert launch["shared_bytes"] == 4 * 384 * 64 * 2 + 2 * 32 * 136 * 4
    elif schedule != "one-warpgroup":
        assert info["tile"] == [128, 128, 64, 4, 1] and info["schedule"] == "ping-pong"
        assert info["tile_from"] == ("cost model" if schedule == "model"
                                     else "--cuda-gemm-schedule ping-pong")
        # 384 tiles on the H200's 132 SMs: 132 CTAs of a producer and two consumers.
        assert (launch["grid"], launch["block"]) == (132, 384)
        assert launch["shared_bytes"] == 4 * 256 * 64 * 2 + 2 * 64 * 136 * 4
    else:
        assert len(info["tile"]) == 4 and info["schedule"] == "one warpgroup"
        assert info["tile_from"] == "--cuda-gemm-schedule one-warpgroup"
        assert (launch["grid"], launch["block"]) == (384, 128)


def test_gemm_schedule_ping_pong_needs_tiles_to_fill_the_sms(tmp_path):
    """With fewer tiles than SMs no CTA has a second tile to overlap: the model's tile, and
    the artifact says why."""
    fn = lambda x, w: F.linear(x, w)  # noqa: E731
    meta, _ = _build(fn, [(1000, 256), (512, 256)], tmp_path=tmp_path,
                     gemm_schedule="ping-pong")
    info = meta["kernels"][0]["info"]
    assert len(info["tile"]) == 4 and "fewer tiles than SMs" in info["tile_from"]


def test_gemm_schedule_is_checked():
    from fusec.compiler.diagnostics import FusecError

    with pytest.raises(FusecError, match="--cuda-gemm-schedule: 'pingpong' is not one of"):
        CudaOptions(gemm_schedule="pingpong")


def test_ragged_matmul_without_cublaslt_compiles(tmp_path):
    """`--no-cuda-gemm` sends a matmul to the fallback path, whose ragged tiles have dynamic
    dims: the capacity check counted them with MLIR's dynamic-size sentinel (10^35 registers
    per thread) and stopped with an internal error recording that. The fallback kernel now."""
    fn = lambda x, w: F.linear(x, w)  # noqa: E731
    meta, _ = _build(fn, [(300, 456), (200, 456)], dtype=torch.float16, tmp_path=tmp_path,
                     gemm=False)
    (kernel,) = meta["kernels"]
    assert kernel["info"]["path"] == "fallback"


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_swiglu_gate_and_up_are_one_pair_kernel(layout, tmp_path):
    """SwiGLU's gate and up projections read one A: one kernel of our GEMM computes both
    (each tile 64 columns of each product, B and B2 through their own TMA maps), the SiLU
    and the product in its epilogue; only the joined result is written. With the pair off
    (--no-cuda-gemm-pair), two kernels, the gate's product written and read back. Numerics
    on the GPU: test/gpu/pair_call.sh (the fuzzer's pair programs, RESULTS run 209)."""
    if layout == "nk":
        fn = lambda x, wg, wu: F.silu(F.linear(x, wg)) * F.linear(x, wu)  # noqa: E731
        shapes = [(300, 256), (200, 256), (200, 256)]
    else:
        fn = lambda x, wg, wu: F.silu(x @ wg) * (x @ wu)  # noqa: E731
        shapes = [(300, 256), (256, 192), (256, 192)]
    n = 200 if layout == "nk" else 192
    meta, so = _build(fn, shapes, tmp_path=tmp_path, tuning="off")
    assert [k["info"]["path"] for k in meta["kernels"]] == ["tc_gemm"]
    info = meta["kernels"][0]["info"]
    assert info["pair"] is True and info["b_layout"] == layout
    assert info["flops"] == 2 * 2 * 300 * n * 256
    assert "two matmuls sharing A: our tensor-core GEMM pair" in info["why"]
    assert "paired: predicted" in info["why"]
    launch = meta["plan"]["launches"][0]
    # A, B, B2, D: three tensor maps (parameters 0, 1, 2); an N x K B's boxes are 64 rows
    # (half the tile's 128 columns) of each weight.
    assert [m[0] for m in launch["maps"]] == [0, 1, 2]
    box = [64, 64]  # nk: K 64 x 64 rows of each weight; kn: 64 columns x K 64
    assert [m[12:14] for m in launch["maps"][1:]] == [box, box]
    assert len(launch["buffers"]) == 4
    # 64-row tiles (gemm_cost.TC_SMALL_GRID_TILE: 128 x 128 ones would fill at most half
    # the SMs): 5 row tiles x ceil(N / 64) output column tiles.
    assert info["tile"][:2] == [64, 128]
    assert launch["grid"] == 5 * -(-n // 64)
    apart, _ = _build(fn, shapes, tmp_path=tmp_path, tuning="off", gemm_pair=False)
    assert [k["info"]["path"] for k in apart["kernels"]] == ["tc_gemm", "tc_gemm"]
    assert not any(k["info"].get("pair") for k in apart["kernels"])


def test_what_does_not_pair(tmp_path):
    """Two matmuls of different inputs stay two kernels, as does a pair whose gate product
    the model also returns (it must be written anyway)."""
    different = lambda x, y, wg, wu: F.silu(F.linear(x, wg)) * F.linear(y, wu)  # noqa: E731
    meta, _ = _build(different, [(300, 256), (300, 256), (200, 256), (200, 256)],
                     tmp_path=tmp_path, tuning="off")
    assert [k["info"]["path"] for k in meta["kernels"]] == ["tc_gemm", "tc_gemm"]

    def returned(x, wg, wu):
        g = F.linear(x, wg)
        return F.silu(g) * F.linear(x, wu), g

    meta, _ = _build(returned, [(300, 256), (200, 256), (200, 256)], tmp_path=tmp_path,
                     tuning="off")
    assert not any(k["info"].get("pair") for k in meta["kernels"])


def test_a_merge_that_is_no_pair_is_undone(tmp_path):
    """The gate's product reduced before the join (a row sum, a softmax): the two groups are
    merged, the merged group is no pair kernel (the chain cannot read the gate), so the
    merge is undone: the same kernels as with --no-cuda-gemm-pair."""
    for fn in (lambda x, wg, wu: F.linear(x, wu) * F.silu(F.linear(x, wg)).sum(-1, keepdim=True),
               lambda x, wg, wu: F.linear(x, wu) * torch.softmax(F.linear(x, wg), -1)):
        shapes = [(300, 256), (200, 256), (200, 256)]
        on, _ = _build(fn, shapes, tmp_path=tmp_path, tuning="off")
        off, _ = _build(fn, shapes, tmp_path=tmp_path, tuning="off", gemm_pair=False)
        assert [k["info"]["path"] for k in on["kernels"]] == \
            [k["info"]["path"] for k in off["kernels"]]
        assert not any(k["info"].get("pair") for k in on["kernels"])
        assert len(on["kernels"]) == 3


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_qkv_projections_are_one_sibling_kernel(layout, tmp_path):
    """Three projections of one x (attention's q, k and v, each with its bias; k scaled):
    one kernel of our GEMM over their concatenated columns, each tile in one projection's
    columns, with that projection's B map, epilogue and output; A read once. The ragged
    projection (N 200) goes last. With --no-cuda-gemm-siblings, three kernels. Numerics on
    the GPU: the fuzzer's sibling programs (test/gpu/fuzz_tc_gemm.py --siblings)."""
    if layout == "nk":
        fn = lambda x, wq, bq, wk, bk, wv, bv: (  # noqa: E731
            F.linear(x, wq, bq), F.linear(x, wk, bk) * 0.125, F.linear(x, wv, bv))
        shapes = [(300, 256), (200, 256), (200,), (256, 256), (256,), (384, 256), (384,)]
    else:
        fn = lambda x, wq, bq, wk, bk, wv, bv: (  # noqa: E731
            x @ wq + bq, (x @ wk + bk) * 0.125, x @ wv + bv)
        shapes = [(300, 256), (256, 200), (200,), (256, 256), (256,), (256, 384), (384,)]
    meta, _ = _build(fn, shapes, tmp_path=tmp_path, tuning="off")
    assert [k["info"]["path"] for k in meta["kernels"]] == ["tc_gemm"]
    info = meta["kernels"][0]["info"]
    assert info["siblings"] == [256, 384, 200]  # the ragged N last
    assert info["flops"] == 2 * 300 * (200 + 256 + 384) * 256
    assert "3 sibling GEMMs of one A in one kernel: predicted" in info["why"]
    assert info["epilogue"].count("bias") == 3 and "mulf" in info["epilogue"]
    launch = meta["plan"]["launches"][0]
    # A, then the three Bs in segment order (k, v, q), each its own tensor map.
    assert [m[0] for m in launch["maps"]] == [0, 1, 2, 3]
    widths = [m[4] if layout == "nk" else m[3] for m in launch["maps"][1:]]  # dims: K, N or N, K
    assert widths == [256, 384, 200]
    # A, three Bs, three outputs, three biases: ten buffers, the outputs the kernel's own.
    assert len(launch["buffers"]) == 10
    # Row tiles (64 rows: gemm_cost.TC_SMALL_GRID_TILE) x each segment's column tiles.
    assert launch["grid"] == 5 * (2 + 3 + 2)
    apart, _ = _build(fn, shapes, tmp_path=tmp_path, tuning="off", gemm_siblings=False)
    assert [k["info"]["path"] for k in apart["kernels"]] == ["tc_gemm"] * 3
    assert not any(k["info"].get("siblings") for k in apart["kernels"])


def test_siblings_that_do_not_merge(tmp_path):
    """Projections of different inputs stay apart; of two ragged Ns only one joins (only
    the last segment may be ragged): the other stays a kernel of its own."""
    different = lambda x, y, w1, w2: (F.linear(x, w1), F.linear(y, w2))  # noqa: E731
    meta, _ = _build(different, [(300, 256), (300, 256), (256, 256), (256, 256)],
                     tmp_path=tmp_path, tuning="off")
    assert [k["info"]["path"] for k in meta["kernels"]] == ["tc_gemm", "tc_gemm"]
    assert not any(k["info"].get("siblings") for k in meta["kernels"])
    ragged = lambda x, w1, w2, w3: (F.linear(x, w1), F.linear(x, w2), F.linear(x, w3))  # noqa
    meta, _ = _build(ragged, [(300, 256), (200, 256), (256, 256), (100, 256)],
                     tmp_path=tmp_path, tuning="off")
    siblings = [k["info"].get("siblings") for k in meta["kernels"]]
    assert sorted(map(str, siblings)) == ["None", "[256, 200]"]


def test_a_sibling_that_reads_another_stays_apart(tmp_path):
    """The second projection's epilogue scales by the first one's row maximum (a reduction
    kernel between them): merged, the kernel would read what it writes (the group would
    both feed and use the reduction's: form_group's "outside the group both uses and feeds
    it", which is what compiling gave without the check). They stay apart, three kernels,
    as with the siblings off."""
    def fn(x, w1, w2):
        y1 = F.linear(x, w1)
        s = y1.amax(-1, keepdim=True)
        return y1, F.linear(x, w2) * s

    shapes = [(256, 256), (256, 256), (256, 256)]
    meta, _ = _build(fn, shapes, tmp_path=tmp_path, tuning="off")
    # Both GEMMs store bf16 (a candidate pair of siblings but for the reduction between).
    assert [k["info"]["path"] for k in meta["kernels"]] == ["tc_gemm", "fast", "tc_gemm"]
    assert [k["info"]["epilogue"][0] for k in meta["kernels"][::2]] == ["cast", "cast"]
    assert not any(k["info"].get("siblings") for k in meta["kernels"])



def test_the_epilogue_reads_a_product_regrouped_but_never_rows_mixed_with_columns():
    """`row_split`: where a regrouped M x N product divides into the rows' dims and the
    columns'. A row reshape splits before the last dim, a 1x1 convolution's product [F,
    H*W] seen as [1, F, H, W] after its second; a shape whose dims straddle M (rows mixed
    with columns: [M*N/4, 4] for M = 6) has no such split, and the epilogue chain stops
    there."""
    from fusec.compiler.targets.cuda.tc_gemm import row_split

    assert row_split([2, 64, 768], 128) == 2      # [B*T, N] -> [B, T, N]
    assert row_split([1, 64, 56, 56], 64) == 2    # [F, H*W] -> [1, F, H, W]
    assert row_split([64, 3136], 64) == 1          # the product itself
    assert row_split([1, 1, 7, 7], 1) == 0         # one row: every dim is the column's
    assert row_split([3, 16, 4], 6) is None        # 6 rows of 32: 3 | 16 straddles them
    assert row_split([12, 2], 6) is None


def test_graph_replay_sends_a_small_long_k_gemm_to_cublaslt(tmp_path):
    """--cuda-graph: cuBLASLt's calls costed without their host overhead. GPT-2's down
    projection at 128 tokens (K 3072, 12 tiles of ours) goes to cuBLASLt with the residual
    add a kernel after it (run 253: GPT-2 ran slower with it on ours, under a graph);
    without the option it is ours, the whole chain in one kernel."""
    fn = lambda x, w, b, r: F.linear(x, w, b) + r  # noqa: E731
    shapes = [(128, 3072), (768, 3072), (768,), (128, 768)]
    plain, _ = _build(fn, shapes, tmp_path=tmp_path, tuning="off")
    assert [k["info"]["path"] for k in plain["kernels"]] == ["tc_gemm"]
    graph, _ = _build(fn, shapes, tmp_path=tmp_path, tuning="off", graph=True)
    assert [k["info"]["path"] for k in graph["kernels"]] == ["gemm", "fast"]
    assert "in a CUDA graph" in graph["kernels"][0]["info"]["why"]


def test_split_k_launches_share_one_scratch_and_zeroed_counters(tmp_path, monkeypatch):
    """Two split-K GEMMs in one program (the tile forced here: which GEMMs the model splits
    is test_cost_model's): each launch takes A, B, D, its epilogue's operands, then the
    program's one f32 scratch (a temporary as large as the larger launch needs) and its one
    counter array (a constant of zeros, uploaded once; each launch leaves it zero); the grid
    is tiles x splits."""
    from fusec.passes import gemm_cost

    monkeypatch.setattr(gemm_cost, "tc_gemm_tile",
                        lambda m, n, k, *args, **kwargs: (64, 128, 64, 4, 0, 4 if n == 768
                                                          else 2))
    monkeypatch.setattr(gemm_cost, "prefer_tc_gemm", lambda ours, library: True)
    fn = lambda x, w1, b1, w2: F.linear(torch.relu(F.linear(x, w1, b1)), w2)  # noqa: E731
    meta, _ = _build(fn, [(128, 1024), (768, 1024), (768,), (384, 768)], tmp_path=tmp_path)
    kernels = [k for k in meta["kernels"] if k["info"]["path"] == "tc_gemm"]
    assert [k["info"]["tile"] for k in kernels] == [[64, 128, 64, 4, 0, 4],
                                                    [64, 128, 64, 4, 0, 2]]
    launches = [x for x in meta["plan"]["launches"] if x["info"].get("path") == "tc_gemm"]
    assert [x["grid"] for x in launches] == [2 * 6 * 4, 2 * 3 * 2]
    buffers = meta["plan"]["buffers"]
    scratch = [b for b in buffers if b["name"] == "split_k_scratch"]
    counters = [b for b in buffers if b["name"] == "split_k_counters"]
    assert len(scratch) == len(counters) == 1
    assert scratch[0]["role"] == "temp" and scratch[0]["dtype"] == "float32"
    assert scratch[0]["shape"] == [max(4 * 12, 2 * 6) * 64 * 128]
    assert counters[0]["role"] == "constant" and counters[0]["shape"] == [12]
    for launch in launches:
        assert launch["buffers"][-2:] == [scratch[0]["id"], counters[0]["id"]]
    # A, B, D, the bias, then the scratch and the counters; the second: A, B, D and them.
    assert [len(x["buffers"]) for x in launches] == [6, 5]
