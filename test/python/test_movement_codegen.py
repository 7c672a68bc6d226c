"""The data-movement kernel family (compiler/targets/cuda/movement.py), here without a GPU:
which groups it takes, which shape it picks, what the PTX reads and writes, what it refuses,
and that `CudaOptions(movement=False)` gives back the fallback path. Numerics run on the
H200 (test/gpu/movement.py, test/gpu/fuzz_movement.py)."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import fusec  # noqa: E402
import fusec.compiler.targets.cuda as cg  # noqa: E402
from fusec.passes import cost_model  # noqa: E402


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _program(fn, *inputs, movement: bool = True, **cuda):
    from fusec.compiler import driver
    from fusec.compiler import pipeline as pl
    from fusec.compiler.frontend import import_torch

    with driver.quiet_torch_logs():
        text = import_torch(_Fn(fn).eval(), *inputs)
    module = driver.parse(text, "<test>")
    options = cg.CudaOptions(cubin=False, movement=movement, **cuda)
    pl.lower(module, pl.CompileOptions(target="cuda", cuda=options), stop_after="tiled")
    program = cg.generate(module, options)
    return program, [k for k in program.plan.launches if k.launch_kind == "kernel"]


def _entry(ptx: str, symbol: str) -> str:
    start = ptx.index(f".entry {symbol}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start:end if end > 0 else len(ptx)]


def test_head_split_is_one_direct_kernel_of_16_byte_vectors() -> None:
    """A fused QKV's slice + head split (0, 2, 1, 3): one kernel, each thread's 8 bf16 lanes
    read and written as 16-byte vectors (the head dim stays contiguous), no scalar access."""
    x = torch.randn(2, 16, 3 * 128).to(torch.bfloat16)
    program, kernels = _program(
        lambda t: t[:, :, 128:256].reshape(2, 16, 2, 64).transpose(1, 2).contiguous(), x)
    assert len(kernels) == 1
    info = kernels[0].info
    assert info["path"] == "movement" and info["shape"] == "direct"
    assert info["launch"]["vec"] == 8 and info["strided_load_bytes_per_thread_pass"] == 0
    body = _entry(program.ptx, kernels[0].symbol)
    assert re.search(r"ld\.global\.v4\.b32", body) and re.search(r"st\.global\.v4\.b32", body)
    assert not re.search(r"ld\.global\.(u16|b16)", body)


def test_a_transpose_goes_through_shared_memory_squares() -> None:
    """K^T (0, 2, 3, 1): the inputs' contiguous dim is not the output's last, so the kernel
    moves 128x128 bf16 squares (256 bytes a side) through 16-byte-aligned shared memory:
    vector reads along p, a barrier, vector reads of the square and vector writes along l."""
    x = torch.randn(4, 512, 8, 512).to(torch.bfloat16)
    program, kernels = _program(lambda t: t.permute(0, 2, 3, 1).contiguous(), x)
    assert len(kernels) == 1
    info = kernels[0].info
    assert info["path"] == "movement" and info["shape"] == "transpose"
    assert info["launch"]["tile"] == 128 and info["launch"]["vec_p"] == 8
    assert info["launch"]["grid"] == 32 * 4 * 4
    body = _entry(program.ptx, kernels[0].symbol)
    assert "bar.sync" in body and re.search(r"ld\.shared\.v4", body)
    assert re.search(r"ld\.global\.v4", body) and re.search(r"st\.global\.v4", body)
    assert re.search(r"\.shared \.align 16 \.b8 __wg_" + kernels[0].symbol, program.ptx)
    # Smaller: 128 x 128 squares would be 4 blocks, each square 64 x 64 full; 32 x 32 ones
    # are 16 blocks (`cost_model.transpose_tile_shape`).
    x = torch.randn(2, 64, 2, 64).to(torch.bfloat16)
    program, kernels = _program(lambda t: t.permute(0, 2, 3, 1).contiguous(), x)
    launch = kernels[0].info["launch"]
    assert (launch["tile"], launch["grid"], launch["vec_p"]) == (32, 16, 8), launch


def test_rope_with_rotate_half_is_one_kernel() -> None:
    """RoPE: q * cos + cat(-q2, q1) * sin. On the GPU the planner fuses the concat with its
    slices and the arithmetic (cost_model.builds_concat_in_kernels), and the kernel chooses
    each 8-lane vector's piece once (the halves are multiples of the vector)."""
    def rope(q, cos, sin):
        half = q.shape[-1] // 2
        return q * cos + torch.cat((-q[..., half:], q[..., :half]), dim=-1) * sin

    args = (torch.randn(2, 4, 16, 64).to(torch.bfloat16), torch.randn(16, 64).to(torch.bfloat16),
            torch.randn(16, 64).to(torch.bfloat16))
    program, kernels = _program(rope, *args)
    assert len(kernels) == 1 and kernels[0].info["path"] == "movement"
    assert "tensor.concat" in kernels[0].ops
    assert kernels[0].info["strided_load_bytes_per_thread_pass"] == 0
    # Without the family: the fallback path, and the concat a kernel of its own again.
    _, old = _program(rope, *args, movement=False)
    assert len(old) > 1 and any(k.info["path"] == "fallback" for k in old)


def test_an_embedding_gather_keeps_its_index_check() -> None:
    """An embedding lookup reads rows at indices from data: one kernel, each row read in
    vectors, and an out-of-range index recorded in the device status by compare-and-swap
    (the runtime reports it after the run), not read silently."""
    ids = torch.randint(0, 100, (32,))
    table = torch.randn(100, 64)
    program, kernels = _program(lambda i, t: F.embedding(i, t), ids, table)
    assert len(kernels) == 1 and kernels[0].info["path"] == "movement"
    assert re.search(r"atom(\.[a-z_]+)*\.cas\.b64\s+\S+\s+\[fusec_index_status\]", program.ptx)
    assert re.search(r"ld\.global\.v4\.(b32|f32|u32)", program.ptx)


def test_short_reductions_read_the_physical_layout() -> None:
    """Whether a short reduction (at most 64 points) runs along its input's contiguous dim
    is read from the physical loads (the linear index into the group's input), not from the
    generic's map (issue 16). A transpose followed by a sum of each transposed row reads the
    input's rows across: one direct kernel (enough outputs to fill the GPU: a small one
    splits its points, `test_a_short_fold_on_too_few_threads_splits_its_points`), its lanes
    along the contiguous dim, no strided load. So does an NHWC 7x7 average pool read through a transpose to NCHW (ResNet's
    pool after its GEMM: contiguous C, its [N, C, 1, 1] output vectors along C), and a
    weighted sum over 8 stacked experts (top2_moe: contiguous d). None is the fallback's."""
    bf = torch.bfloat16
    _, kernels = _program(lambda t: t.transpose(1, 2).sum(dim=-1), torch.randn(32, 16, 2048))
    assert [(k.info["path"], k.info["shape"]) for k in kernels] == [("movement", "direct")]
    assert kernels[0].info["strided_load_bytes_per_thread_pass"] == 0
    program, kernels = _program(lambda t: t.permute(0, 3, 1, 2).mean((2, 3), keepdim=True),
                                torch.randn(64, 7, 7, 1024).to(bf))
    assert [(k.info["path"], k.info["shape"]) for k in kernels] == [("movement", "direct")]
    # 65536 outputs of 49 points: vectors narrowed to one element, 256 blocks.
    assert kernels[0].info["launch"]["vec"] == 1 and kernels[0].grid == 64 * 1024 // 256
    assert kernels[0].info["strided_load_bytes_per_thread_pass"] == 0
    assert "iter_args" not in program.kernels_mlir  # unrolled in registers
    experts = [torch.randn(4, 16, 64).to(bf) for _ in range(8)]
    _, kernels = _program(lambda w, *e: (torch.stack(e, -1) * w.unsqueeze(2)).sum(-1),
                          torch.randn(4, 16, 8).to(bf), *experts)
    assert [k.info["path"] for k in kernels] == ["movement"]
    assert kernels[0].info["shape"] == "direct"
    assert kernels[0].info["strided_load_bytes_per_thread_pass"] == 0


def test_a_short_reduction_along_the_physical_rows_is_a_warp_per_output() -> None:
    """An NCHW 7x7 pool whose rows the fast emitter does not take (the rows of 7 of a
    [.., 7, 7] reduced in two dims behind a transpose): its 49 points run along the
    input's contiguous dim, so the "reduce" shape reads them along the rows, with slices
    sized to the points (32, one or two points each) and several outputs per block, not one
    output per block of 256 threads; a long row reduction stays the fast emitter's."""
    bf = torch.bfloat16
    program, kernels = _program(lambda t: t.transpose(0, 1).mean((2, 3)),
                                torch.randn(64, 32, 7, 7).to(bf))
    assert [k.info["path"] for k in kernels] == ["movement"], [k.info for k in kernels]
    info = kernels[0].info
    assert info["shape"] == "reduce"
    assert (info["launch"]["vec"], info["launch"]["slices"]) == (1, 32)
    assert info["launch"]["columns"] > 1 and kernels[0].block == 32 * info["launch"]["columns"]
    assert kernels[0].grid * info["launch"]["columns"] >= 32 * 64
    _, kernels = _program(lambda t: t.sum(-1), torch.randn(64, 1024).to(bf))
    assert [(k.info["path"], k.info["shape"]) for k in kernels] == [("fast", "row")]


def test_a_short_fold_on_too_few_threads_splits_its_points() -> None:
    """ResNet-18's end at batch 1: BatchNorm + ReLU + an NHWC 7x7 average pool (512 outputs
    of 49 points). Unrolled per output it was one block of 64 threads, 392 loads each, an
    11 000-line kernel; now its points split over a block's slices (32: none without a
    point), vectors along C, the slices' partials met in shared memory. At batch 128 every
    SM has blocks of its own, and the fold stays unrolled in registers."""
    bf = torch.bfloat16
    mean, var = torch.randn(512).to(bf), (torch.rand(512) + 0.5).to(bf)

    def end(t):
        return F.relu(F.batch_norm(t.permute(0, 3, 1, 2), mean, var)).mean((2, 3))

    program, kernels = _program(end, torch.randn(1, 7, 7, 512).to(bf))
    assert [(k.info["path"], k.info["shape"]) for k in kernels] == [("movement", "reduce")]
    launch = kernels[0].info["launch"]
    assert (launch["vec"], launch["slices"]) == (8, 32)
    assert kernels[0].grid * launch["columns"] * 8 == 512
    assert kernels[0].info["strided_load_bytes_per_thread_pass"] == 0
    assert re.search(r"scf\.for .* iter_args", program.kernels_mlir)
    assert program.kernels_mlir.count("gpu.barrier") == 1 + 5  # partials, log2(32) rounds
    assert len(program.kernels_mlir.splitlines()) < 1500
    _, kernels = _program(end, torch.randn(128, 7, 7, 512).to(bf))
    assert [(k.info["path"], k.info["shape"]) for k in kernels] == [("movement", "direct")]


def test_folds_fill_the_gpu_before_widening_their_vectors() -> None:
    """The direct shape's parallelism under a fold (`cost_model.movement_launch_shape` with
    `points`): no fold, the elementwise shape (two 16-byte chunks of bf16 per thread); a 3x3
    max pool at batch 1 (64 x 56 x 56 outputs), one chunk and narrower vectors until every
    SM has two blocks; a fold on a large output keeps its 16-byte vectors. Splitting a short
    fold is asked only where even one element per thread leaves SMs idle, and only for
    16 points or more."""
    h200 = cost_model.H200
    plain = cost_model.movement_launch_shape(64 * 56 * 56, 56, 2, h200)
    assert (plain.vec, plain.unroll, plain.grid) == (8, 2, 49)
    pool = cost_model.movement_launch_shape(64 * 56 * 56, 56, 2, h200, points=9)
    assert (pool.vec, pool.unroll) == (2, 1) and pool.grid >= 2 * h200.parallel_units
    big = cost_model.movement_launch_shape(1 << 24, 64, 2, h200, points=9)
    assert (big.vec, big.unroll) == (8, 2)
    tiny = cost_model.movement_launch_shape(96, 96, 2, h200, points=9)
    assert (tiny.vec, tiny.unroll) == (1, 1)
    assert cost_model.fold_prefers_split(512, 512, 2, 49, h200)
    assert not cost_model.fold_prefers_split(512, 512, 2, 8, h200)
    assert not cost_model.fold_prefers_split(1 << 20, 512, 2, 49, h200)
    split = cost_model.split_reduction_shape(512, 512, 2, h200, points=49)
    assert split.slices == 32 and split.block == split.columns * 32


def test_split_reduction_shape_along_rows_is_sized_to_the_points() -> None:
    """The cost model's rows shape: 49 points, 32 slices; 8 outputs of a 256-thread block
    where that leaves every SM two blocks, fewer where not; unknown points, one output per
    block of 256 (BatchNorm's statistics)."""
    h200 = cost_model.H200
    shape = cost_model.split_reduction_shape(1 << 16, 1, 2, h200, along_rows=True, points=49)
    assert (shape.vec, shape.columns, shape.slices, shape.block) == (1, 8, 32, 256)
    assert shape.grid == (1 << 16) // 8
    shape = cost_model.split_reduction_shape(512, 1, 2, h200, along_rows=True, points=49)
    assert shape.slices == 32 and shape.columns == 1 and shape.grid == 512
    shape = cost_model.split_reduction_shape(64, 1, 4, h200, along_rows=True)
    assert (shape.columns, shape.slices, shape.grid) == (1, 256, 64)


def test_what_the_family_refuses_goes_to_the_fallback_with_both_reasons() -> None:
    """An argmin over rows of 4099 bf16 values, 1024 of them: too long a row for the fast
    emitter's registers (an odd length is read a lane at a time: more than 16 chunks a
    thread), a row reduction to the data-movement kernels (the fast emitter's kind), and
    rows too many for the split into partials; the fallback path's kernel says why, both
    reasons. An argmax over a transposed dim (two results, the maximum and its index) was
    this test's example until the data-movement kernels folded both results together: it
    is theirs now. A softmax over that dim, refused whole by both (its max and sum are read
    back at every element), is cut after each reduction (`split_at_reshapes`) and leaves
    nothing to the fallback."""
    _, kernels = _program(lambda t: torch.argmin(t, dim=-1),
                          torch.randn(1024, 4099).to(torch.bfloat16))
    fallback = [k for k in kernels if k.info["path"] == "fallback"]
    assert fallback, [k.info for k in kernels]
    why = fallback[0].info["why"]
    assert "too long to keep in registers" in why and "data movement: " in why, why
    x = torch.randn(4, 16, 32)
    _, kernels = _program(lambda t: torch.argmax(t.transpose(1, 2), dim=1), x)
    assert [k.info["path"] for k in kernels] == ["movement"], [k.info for k in kernels]
    _, kernels = _program(lambda t: torch.softmax(t.transpose(1, 2), dim=1), x)
    assert "fallback" not in [k.info["path"] for k in kernels], [k.info for k in kernels]


def test_reductions_over_a_non_last_dim() -> None:
    """A sum over 4 rows of a bf16 [4, 256]: each thread owns a vector of columns and folds
    the 4 rows unrolled, in f32 (torch sums 16-bit values in f32), rounded once. A long one
    (mean over 128 rows of B8 T128 D768) is the "reduce" shape: 2 vectors of 8 columns per
    block (enough blocks for two per SM), 128 slices of the rows, each folding its rows in
    an scf.for carrying f32 accumulators, the slices' partials summed by a tree in shared
    memory (a barrier per round). Softmax over a non-last dim: its max and its sum are read
    back at every element, so the group is cut after each (`split_at_reshapes`), no
    fallback kernel."""
    program, kernels = _program(lambda t: t.sum(dim=0), torch.randn(4, 256).to(torch.bfloat16))
    assert [k.info["path"] for k in kernels] == ["movement"]
    body = program.kernels_mlir
    assert "iter_args" not in body and body.count("arith.addf") >= 4
    assert ": f32" in body and "arith.truncf" in body
    program, kernels = _program(lambda t: t.mean(dim=1),
                                torch.randn(8, 128, 768).to(torch.bfloat16))
    assert [(k.info["path"], k.info["shape"]) for k in kernels] == [("movement", "reduce")]
    launch = kernels[0].info["launch"]
    assert (launch["vec"], launch["columns"], launch["slices"]) == (8, 2, 128)
    assert kernels[0].grid == 8 * 768 // (8 * 2)
    body = program.kernels_mlir
    assert re.search(r"scf\.for .* iter_args\(.*\) -> \(f32(, f32){7}\)", body)
    assert body.count("gpu.barrier") == 1 + 7  # the partials, then log2(128) tree rounds
    assert re.search(r"ld\.global\.v4", program.ptx)
    _, kernels = _program(lambda t: torch.softmax(t, dim=1), torch.randn(4, 16, 32))
    assert "fallback" not in [k.info["path"] for k in kernels], [k.info for k in kernels]
    assert [k.info.get("shape") for k in kernels].count("reduce") == 2  # the max, the sum


def test_a_transposed_conv_spreads_its_input_in_a_movement_kernel() -> None:
    """ConvTranspose2d (stride 2): torch-mlir spreads the input over zeros with a strided
    insert_slice, then convolves. The spreading is a data-movement kernel (each output
    element tests its index against the strides), the convolution im2col + a GEMM: no
    fallback kernel (the strided insert was one)."""
    w = torch.randn(8, 4, 4, 4)
    program, kernels = _program(lambda x: F.conv_transpose2d(x, w, None, 2, 1),
                                torch.randn(2, 8, 7, 7))
    assert "fallback" not in [k.info["path"] for k in kernels], [k.info for k in kernels]
    assert any("tensor.insert_slice" in k.ops for k in kernels)
    assert "arith.remui" in program.kernels_mlir  # the stride's test
    assert [k.launch_kind for k in program.plan.launches].count("gemm") == 1


def test_reductions_read_back_are_cut_into_kernels_of_their_own() -> None:
    """GroupNorm (+ SiLU, as diffusion UNets use it) and ConvNeXt's LayerNorm over channels
    behind a permute: their statistics are reductions the group reads back at every
    element, which neither emitter builds whole; cut after each reduction, the statistics
    are data-movement "reduce" kernels and nothing is the fallback's (both were)."""
    gn = torch.nn.GroupNorm(4, 16).eval()
    program, kernels = _program(lambda x: F.silu(gn(x)), torch.randn(2, 16, 8, 8))
    assert [k.info["path"] for k in kernels] == ["movement"] * 4, [k.info for k in kernels]
    assert [k.info["shape"] for k in kernels][:2] == ["reduce", "reduce"]  # mean, variance
    ln = torch.nn.LayerNorm(32).eval()
    _, kernels = _program(lambda x: ln(x.permute(0, 2, 3, 1)), torch.randn(2, 32, 14, 14))
    assert "fallback" not in [k.info["path"] for k in kernels], [k.info for k in kernels]


def test_batchnorm_statistics_are_one_block_per_channel_then_parts() -> None:
    """A mean over N, H, W of NCHW (BatchNorm's statistics): the reduction runs along the
    input's contiguous dim, so the "reduce" shape puts one channel on each block, its 256
    slices reading consecutive elements of the rows. 64 channels would be 64 blocks: the
    rows are split in parts first (`--fusion-gpu-split-long-reductions`: N = 32 into 8
    parts of 4, 512 blocks), their fold and the division a second kernel. A smaller one
    (N = 2, 28 x 28: 1568 points) stays one kernel."""
    program, kernels = _program(lambda t: t.mean(dim=(0, 2, 3)), torch.randn(32, 64, 56, 56))
    assert [(k.info["path"], k.info["shape"]) for k in kernels] == [
        ("movement", "reduce"), ("movement", "direct")]
    launch = kernels[0].info["launch"]
    assert (launch["vec"], launch["columns"], launch["slices"]) == (1, 1, 256)
    assert kernels[0].grid == 64 * 8 and "tensor.expand_shape" in kernels[0].ops
    program, kernels = _program(lambda t: t.mean(dim=(0, 2, 3)), torch.randn(2, 64, 28, 28))
    assert [(k.info["path"], k.info["shape"]) for k in kernels] == [("movement", "reduce")]
    assert kernels[0].grid == 64
    assert program.kernels_mlir.count("gpu.barrier") == 1 + 8


def test_pad_and_strided_slice_are_data_movement() -> None:
    x = torch.randn(2, 3, 10, 12)
    _, kernels = _program(lambda t: F.pad(t, (1, 2, 3, 0)), x)
    assert [k.info["path"] for k in kernels] == ["movement"]
    _, kernels = _program(lambda t: t[:, ::2].contiguous(), torch.randn(64, 64))
    assert [k.info["path"] for k in kernels] == ["movement"]


def test_launch_shapes_are_the_cost_models() -> None:
    """The vector runs along the output's last dim only, so its width divides that dim; a
    transpose square is two 128-byte lines on each side (halved until the kernel's outputs'
    squares fit in static shared memory), moved by 512 threads."""
    assert cost_model.movement_launch_shape(8 * 1024 * 768, 64, 2).vec == 8
    assert cost_model.movement_launch_shape(999 * 1000, 999, 4).vec == 1
    assert cost_model.movement_launch_shape(1000 * 6, 6, 2).vec == 2
    sq = cost_model.transpose_tile_shape(8192, 8192, 1, 2)
    assert (sq.tile, sq.vec_p, sq.vec_l, sq.block, sq.grid) == (128, 8, 8, 512, 64 * 64)
    assert sq.shared_bytes == 128 * 128 * 2
    sq = cost_model.transpose_tile_shape(999, 1000, 3, 4)
    assert (sq.tile, sq.vec_p, sq.vec_l) == (64, 1, 4) and sq.grid == 3 * 16 * 16
    assert sq.shared_bytes == 64 * 64 * 4
    # Two bf16 outputs: each square must fit in half of the 48 KB, so a 128-byte side.
    sq = cost_model.transpose_tile_shape(8192, 8192, 1, 2, shared_bytes=24 * 1024)
    assert sq.tile == 64 and sq.shared_bytes == 8 * 1024
    # Smaller squares where 128 x 128 ones would be mostly empty or too few for the GPU's
    # SMs: a CNN's product [196, 256] back to NCHW [256, 14, 14] (p = 256 channels, l = 14,
    # 14 rows) was 28 blocks of squares 14 wide; now 32 x 32 squares, 112 blocks of 128
    # threads. Never under 64 bytes a side.
    sq = cost_model.transpose_tile_shape(256, 14, 14, 2)
    assert (sq.tile, sq.block, sq.grid) == (32, 128, 14 * 8), sq
    sq = cost_model.transpose_tile_shape(64, 56, 56, 2)
    assert (sq.tile, sq.grid) == (32, 56 * 2 * 2), sq
    assert cost_model.transpose_tile_shape(128, 49, 1, 4).tile == 16


def test_a_conv_block_is_im2col_a_gemm_and_movement_kernels() -> None:
    """conv3x3 (padding 1) + BatchNorm + ReLU: the convolution becomes im2col + a matmul
    (`--fusion-gpu-convs-to-gemm`): the pad and the gather one data-movement kernel, the
    matmul a cuBLASLt call, the transpose back to NCHW with BatchNorm and ReLU one more; no
    fallback. With the family off, the fallback path as before."""
    w = torch.randn(8, 4, 3, 3)
    mean, var = torch.randn(8), torch.rand(8) + 0.5
    fn = lambda x: F.relu(F.batch_norm(F.conv2d(x, w, None, 1, 1), mean, var))  # noqa: E731
    x = torch.randn(2, 4, 10, 10)
    program, kernels = _program(fn, x)
    gemms = [k for k in program.plan.launches if k.launch_kind == "gemm"]
    assert len(gemms) == 1 and gemms[0].gemm["m"] * gemms[0].gemm["n"] == 2 * 10 * 10 * 8
    assert [k.info["path"] for k in kernels] == ["movement", "movement"]
    assert kernels[1].info["shape"] == "transpose"  # [N*OH*OW, F] back to NCHW
    _, old = _program(fn, x, movement=False)
    assert any(k.info["path"] == "fallback" for k in old)


def test_a_bf16_pointwise_conv_block_is_one_gemm_with_its_batchnorm_in_the_epilogue() -> None:
    """bf16 at batch 1, as a CNN runs for latency: a 1x1 convolution (stride 1) + BatchNorm
    + ReLU is one kernel, our tensor-core GEMM reading the image itself as its B ([C, H*W],
    as stored) and running the BatchNorm and the ReLU on the accumulator (its product [F,
    H*W] seen as [1, F, H, W] by the epilogue: a column reshape that keeps row-major
    order). A 3x3 convolution stays im2col with the channels last: its gather, the GEMM
    and the transpose back with BatchNorm and ReLU."""
    mean, var = torch.randn(64).bfloat16(), (torch.rand(64) + 0.5).bfloat16()
    x = torch.randn(1, 32, 16, 16).bfloat16()
    w = torch.randn(64, 32, 1, 1).bfloat16()
    program, kernels = _program(
        lambda t: F.relu(F.batch_norm(F.conv2d(t, w), mean, var)), x)
    assert [k.launch_kind for k in program.plan.launches] == ["kernel"]
    assert [k.info["path"] for k in kernels] == ["tc_gemm"]
    # BatchNorm's x * alpha + beta in f32 (fusec.compiler.batch_norm), the ReLU.
    epilogue = kernels[0].info["epilogue"]
    assert {"mulf", "addf", "relu"} <= set(epilogue), epilogue
    assert kernels[0].info["b_layout"] == "kn"  # the image's channels are B's rows
    w3 = torch.randn(64, 32, 3, 3).bfloat16()
    program, kernels = _program(
        lambda t: F.relu(F.batch_norm(F.conv2d(t, w3, None, 1, 1), mean, var)), x)
    assert [k.info["path"] for k in kernels] == ["movement", "tc_gemm", "movement"]


def test_a_transposing_kernel_writes_along_its_last_dim_that_is_not_1() -> None:
    """The im2col of a 1x1 convolution that keeps the channels-last route (7 x 7 bf16 rows,
    98 bytes: not 16-byte aligned) is [n, oh, ow, c, 1, 1]: written along the channels, in
    squares of a pixel dim by the channels. Along its last dim (1) the squares were all but
    empty: 14,336 blocks of 512 threads for a 400 KB transpose in ResNet-50 (60 us on an
    H100, bench/RESULTS.md run 243's profile)."""
    x = torch.randn(1, 2048, 7, 7).bfloat16()
    w = torch.randn(512, 2048, 1, 1).bfloat16()
    program, kernels = _program(lambda t: F.conv2d(t, w), x)
    gather = kernels[0]
    assert gather.ops == ["linalg.generic"], gather.ops  # the 6-D im2col
    assert gather.info["path"] == "movement" and gather.info["shape"] == "transpose"
    launch = gather.info["launch"]  # oh (7) x ow (7 of a square) x 2048 / 32 channels
    assert launch["p_dim"] == 2 and launch["vec_l"] == 8, launch
    assert (launch["tile"], launch["grid"]) == (32, 7 * 64), launch
    # A transposing output whose last dims are 1 is written along its last dim that is
    # not: K^T's squares with two unit dims after them, 16 blocks with 16-byte vectors both
    # ways (along the unit dim: 256 blocks, one element per lane).
    y = torch.randn(2, 64, 2, 64).to(torch.bfloat16)
    program, kernels = _program(
        lambda t: t.permute(0, 2, 3, 1).contiguous()[..., None, None] * 2, y)
    assert len(kernels) == 1 and kernels[0].info["shape"] == "transpose"
    launch = kernels[0].info["launch"]
    assert launch["p_dim"] == 2 and launch["grid"] == 16, launch
    assert launch["vec_p"] == 8 and launch["vec_l"] == 8, launch


def test_pooling_and_depthwise_windows_are_unrolled() -> None:
    """Max-pool 3x3 stride 2 and a depthwise conv 3x3 (bf16: its products summed in f32,
    rounded once): one data-movement kernel each, the window's points unrolled."""
    program, kernels = _program(lambda x: F.max_pool2d(x, 3, 2, 1), torch.randn(2, 8, 15, 15))
    assert [k.info["path"] for k in kernels] == ["movement"]
    assert "linalg.pooling_nchw_max" in kernels[0].ops
    assert program.kernels_mlir.count("arith.maximumf") == 9 * kernels[0].info["launch"]["vec"] \
        * kernels[0].info["launch"]["unroll"]
    w = torch.randn(16, 1, 3, 3).to(torch.bfloat16)
    program, kernels = _program(lambda x: F.conv2d(x, w, None, 1, 1, 1, 16),
                                torch.randn(2, 16, 12, 12).to(torch.bfloat16))
    conv = [k for k in kernels if "linalg.depthwise_conv_2d_nchw_chw" in k.ops]
    assert len(conv) == 1 and conv[0].info["path"] == "movement"
    assert "arith.mulf" in program.kernels_mlir and ": f32" in program.kernels_mlir
    assert "arith.truncf" in program.kernels_mlir


def test_a_grouped_conv_wider_than_the_window_is_a_batched_gemm() -> None:
    """ResNeXt's grouped 3x3 convolutions: 32 groups of 4 input channels (36 points per
    output) stay the data-movement family's unrolled window, one kernel; 32 groups of 8 or
    16 (72, 144 points: the fallback's before) become im2col and one batched cuBLASLt
    matmul, a batch per group, with no fallback kernel."""
    for per_group, gemms in ((4, []), (8, [(32, 2 * 14 * 14, 8, 72)]),
                             (16, [(32, 2 * 7 * 7, 16, 144)])):
        w = torch.randn(32 * per_group, per_group, 3, 3)
        stride = 2 if per_group == 16 else 1
        program, kernels = _program(lambda x: F.relu(F.conv2d(x, w, None, stride, 1, 1, 32)),
                                    torch.randn(2, 32 * per_group, 14, 14))
        found = [(k.gemm["batch"], k.gemm["m"], k.gemm["n"], k.gemm["k"])
                 for k in program.plan.launches if k.launch_kind == "gemm"]
        assert found == gemms, per_group
        assert all(k.info["path"] != "fallback" for k in kernels), [k.info for k in kernels]


def test_a_window_too_large_to_unroll_is_split_over_a_blocks_slices() -> None:
    """Windows of more than 64 points (a grouped convolution with 32 input channels per
    group and the GEMM path off, 288 points; YOLO's 13x13 SPP max-pool; a 13x13 depthwise
    convolution in bf16; a 14x14 average pool along NCHW rows) are long reductions: the
    "reduce" shape, each slice folding every S-th point in an scf.for from the combiner's
    neutral element, the partials met in shared memory; no fallback kernel."""
    grouped, depthwise = torch.randn(8, 32, 3, 3), torch.randn(8, 1, 13, 13).bfloat16()
    cases = [
        (lambda x: F.conv2d(x, grouped, None, 1, 1, 1, 2),
         torch.randn(1, 64, 6, 6), {"gemm": False}, "linalg.conv_2d_ngchw_gfchw", 288),
        (lambda x: F.max_pool2d(x, 13, 1, 6), torch.randn(2, 8, 20, 20), {},
         "linalg.pooling_nchw_max", 169),
        (lambda x: F.conv2d(x, depthwise, None, 1, 6, 1, 8),
         torch.randn(2, 8, 14, 14).bfloat16(), {}, "linalg.depthwise_conv_2d_nchw_chw", 169),
        (lambda x: F.avg_pool2d(x, 14), torch.randn(2, 64, 14, 14), {},
         "linalg.pooling_nchw_sum", 196),
    ]
    for fn, x, options, op, points in cases:
        program, kernels = _program(fn, x, **options)
        assert all(k.info["path"] != "fallback" for k in kernels), [k.info for k in kernels]
        window = [k for k in kernels if op in k.ops]
        assert len(window) == 1 and window[0].info["shape"] == "reduce", op
        launch = window[0].info["launch"]
        assert 1 < launch["slices"] <= points, (op, launch)
        step = re.search(r"scf\.for %k\d+ = %\w+ to (%c\d+) step (%c\d+)", program.kernels_mlir)
        assert step, op
        consts = dict(re.findall(r"(%c\d+) = arith\.constant (\d+) : index",
                                 program.kernels_mlir))
        assert int(consts[step.group(1)]) == points and \
            int(consts[step.group(2)]) == launch["slices"], op
        if op.endswith("nchw_chw"):
            assert ": f32" in program.kernels_mlir  # bf16 products summed in f32


def test_swins_cyclic_shift_is_one_kernel() -> None:
    """`torch.roll` (Swin's shifted windows, written as slices and a concat per rolled dim
    by the frontend) and the arithmetic between the rolls: one direct data-movement
    kernel."""
    scale = torch.randn(8)

    def shift(x):
        shifted = torch.roll(x, shifts=(-2, -3), dims=(1, 2)) * scale
        return torch.roll(shifted, shifts=(2, 3), dims=(1, 2)) + torch.roll(x, 7)

    _, kernels = _program(shift, torch.randn(2, 7, 6, 8))
    assert [(k.info["path"], k.info["shape"]) for k in kernels] == [("movement", "direct")]
    assert kernels[0].ops.count("tensor.concat") == 5


def test_a_long_window_over_many_outputs_is_a_loop_nest_per_thread() -> None:
    """Where the outputs fill the GPU (YOLO's SPP max-pool 13x13 at 8x256x20x20), a long
    window stays the direct shape, one thread per output vector folding the window in two
    nested scf.for loops (kh, kw: no division per point), not split over slices."""
    program, kernels = _program(lambda x: F.max_pool2d(x, 13, 1, 6),
                                torch.randn(8, 256, 20, 20))
    assert [(k.info["path"], k.info["shape"]) for k in kernels] == [("movement", "direct")]
    consts = dict(re.findall(r"(%c\d+) = arith\.constant (\d+) : index", program.kernels_mlir))
    loops = re.findall(r"scf\.for %k\d+ = (%c\d+) to (%c\d+) step (%c\d+)",
                       program.kernels_mlir)
    assert [tuple(int(consts[c]) for c in loop) for loop in loops] == [(0, 13, 1)] * 2 * \
        kernels[0].info["launch"]["unroll"]


def test_rope_after_a_projection_compiles_with_the_family_off() -> None:
    """With `--no-cuda-movement`, a group of RoPE after a projection's head split is cut at
    its reshapes and concats; a piece that reads another through a gather's
    `tensor.extract` (inside a payload) depends on it too, so the cut must see it: it did
    not, and the block failed to compile ('cannot fuse: tensor.concat outside the group
    both uses and feeds it', a LLaMA block)."""
    w = torch.randn(128, 64)

    def fn(x, cos, sin):
        q = F.linear(x, w).view(2, 16, 2, 64).transpose(1, 2)
        half = 32
        return q * cos + torch.cat((-q[..., half:], q[..., :half]), dim=-1) * sin

    args = (torch.randn(2, 16, 64), torch.randn(16, 64), torch.randn(16, 64))
    for movement in (True, False):
        program, kernels = _program(fn, *args, movement=movement)
        assert kernels


def test_a_collapse_to_rank_0_reads_index_0() -> None:
    """A one-element softmax of a softmax, bf16 (fuzz_cuda seed 12, p066): a collapse of a
    [1] tensor to rank 0 has no reassociation group; its unit dim is read at index 0 (it
    crashed the compile: 'NoneType' object has no attribute 'key')."""
    def fn(x):
        return torch.softmax(torch.softmax(x, -1), -1), torch.maximum(x, x)

    program, kernels = _program(fn, torch.randn(1).to(torch.bfloat16))
    # maximum(x, x) is x (NaN too): the plan copies the input (`__copy__`, no kernel).
    built = [k for k in kernels if k.symbol != "__copy__"]
    assert built and all(k.info["path"] in ("fast", "movement") for k in built)


def test_a_fallback_kernel_that_would_exhaust_the_device_heap_is_refused_located() -> None:
    """RoPE on a LLaMA block's query heads (B4 T512, 16 heads of 64) with the family off: its
    fallback kernel would malloc 12 MB per GPU thread for 32768 threads; malloc returned NULL
    and the kernel wrote through it (an illegal address on the H200). Refused at compile
    time, at the op in the user's source. (The whole LLaMA block no longer has this kernel:
    since our GEMM's epilogue takes the head split's column reshape, its pieces are split
    per op.)"""
    from fusec.compiler.targets.cuda.program import LocatedCodegenError

    def rope(x, cos, sin):
        q = x.view(4, 512, 16, 64).transpose(1, 2)
        rot = torch.cat((-q[..., 32:], q[..., :32]), dim=-1)
        return (q * cos + rot * sin).transpose(1, 2).reshape(4, 512, 1024)

    args = [torch.randn(4, 512, 1024).bfloat16(), torch.randn(512, 64).bfloat16(),
            torch.randn(512, 64).bfloat16()]
    with pytest.raises(LocatedCodegenError, match="bytes per GPU thread on the device heap"):
        _program(rope, *args, movement=False)


def test_fp32_convolutions_are_exact_unless_tf32_is_asked_for() -> None:
    """fusec's fp32 convolution GEMMs are exact fp32 (CUBLAS_COMPUTE_32F); torch's default
    for convolutions is TF32 (cudnn.allow_tf32), which `--cuda-conv-tf32` asks for: the
    matmul is marked `fusion.tf32` and cuBLASLt computes with CUBLAS_COMPUTE_32F_FAST_TF32.
    A plain fp32 matmul (a Linear) is never TF32 here."""
    w = torch.randn(8, 4, 3, 3)
    x = torch.randn(2, 4, 10, 10)
    for tf32, compute in ((False, cg.gemm.CUBLAS_COMPUTE_32F),
                          (True, cg.gemm.CUBLAS_COMPUTE_32F_FAST_TF32)):
        program, _ = _program(lambda t: F.conv2d(t, w, None, 1, 1), x, conv_tf32=tf32)
        (launch,) = [k for k in program.plan.launches if k.launch_kind == "gemm"]
        assert cg.gemm_table(launch, None)[15] == compute
    lw = torch.randn(16, 32)
    program, _ = _program(lambda t: F.linear(t, lw), torch.randn(8, 32), conv_tf32=True)
    (launch,) = [k for k in program.plan.launches if k.launch_kind == "gemm"]
    assert cg.gemm_table(launch, None)[15] == cg.gemm.CUBLAS_COMPUTE_32F


def test_fp32_matmuls_are_exact_unless_matmul_tf32_is_asked_for() -> None:
    """fp32 matmuls (a Linear, a bmm) follow `matmul_tf32` (torch's
    torch.backends.cuda.matmul.allow_tf32): exact CUBLAS_COMPUTE_32F by default, TF32 when
    asked; a convolution's GEMM follows `conv_tf32` alone, and a bf16 matmul is untouched."""
    exact, tf32 = cg.gemm.CUBLAS_COMPUTE_32F, cg.gemm.CUBLAS_COMPUTE_32F_FAST_TF32

    def computes(fn, *xs, **options):
        program, _ = _program(fn, *xs, **options)
        return [cg.gemm_table(k, None)[15] for k in program.plan.launches
                if k.launch_kind == "gemm"]

    lw, lb = torch.randn(48, 64), torch.randn(48)
    x = torch.randn(40, 64)
    assert computes(lambda t: F.linear(t, lw, lb).relu(), x) == [exact]
    assert computes(lambda t: F.linear(t, lw, lb).relu(), x, matmul_tf32=True) == [tf32]
    a, b = torch.randn(3, 40, 64), torch.randn(3, 64, 24)
    assert computes(torch.bmm, a, b, matmul_tf32=True) == [tf32]
    assert computes(torch.bmm, a, b) == [exact]
    w = torch.randn(8, 4, 3, 3)
    conv = torch.randn(2, 4, 10, 10)
    assert computes(lambda t: F.conv2d(t, w, None, 1, 1), conv, matmul_tf32=True) == [exact]
    assert computes(lambda t: F.conv2d(t, w, None, 1, 1), conv, conv_tf32=True) == [tf32]
    half = torch.randn(40, 64).to(torch.bfloat16)
    lw16 = lw.to(torch.bfloat16)
    program, _ = _program(lambda t: F.linear(t, lw16), half, matmul_tf32=True)
    assert [k.gemm.get("compute") for k in program.plan.launches
            if k.launch_kind == "gemm"] in ([], [None])


def test_a_torch_models_fp32_convolutions_follow_torchs_tf32_setting(monkeypatch) -> None:
    """`fusec.compile` of a torch module (and the torch.compile backend), given no
    CudaOptions, runs fp32 convolutions as torch runs its own: TF32 while
    torch.backends.cudnn.allow_tf32 is on (torch's default), exact fp32 once the user turns
    it off. CudaOptions() itself (the command line, MLIR text) stays exact."""
    from fusec.compiler import api

    seen = []
    monkeypatch.setattr(api, "_compile_imported", lambda *args: seen.append(args[11]))
    model = torch.nn.Conv2d(4, 8, 3).eval()
    x = torch.randn(1, 4, 10, 10)
    for flag in (True, False):
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", flag)
        assert api.default_cuda_options().conv_tf32 is flag
        fusec.compile(model, x, target="cuda", cache=False)
        assert seen[-1].conv_tf32 is flag
        assert seen[-1].matmul_tf32 is torch.backends.cuda.matmul.allow_tf32
    # Matmuls follow torch's matmul setting, which set_float32_matmul_precision moves.
    before = torch.get_float32_matmul_precision()
    try:
        for precision, flag in (("high", True), ("highest", False)):
            torch.set_float32_matmul_precision(precision)
            fusec.compile(model, x, target="cuda", cache=False)
            assert seen[-1].matmul_tf32 is flag
    finally:
        torch.set_float32_matmul_precision(before)
    assert cg.CudaOptions().matmul_tf32 is False
    fusec.compile(model, x, target="cuda", cache=False, cuda=cg.CudaOptions(conv_tf32=False))
    assert seen[-1].conv_tf32 is False
    assert cg.CudaOptions().conv_tf32 is False


def test_bf16_row_reductions_stay_the_fast_emitters() -> None:
    """A bf16 row max and row sum (a payload on bf16, the reduction over the last loop):
    the 16-bit widening leaves their payloads alone, since the fast emitter folds them in f32
    itself; widened, its combiner was no longer recognised and they became data-movement
    reduce kernels (slower: one row per block, 2-byte loads). A max over a non-last dim is
    the family's."""
    x = torch.randn(64, 256).to(torch.bfloat16)
    for fn in (lambda t: t.amax(-1), lambda t: t.sum(-1)):
        _, kernels = _program(fn, x)
        assert [(k.info["path"], k.info["shape"]) for k in kernels] == [("fast", "row")]
    _, kernels = _program(lambda t: t.amax(0), x)
    assert [k.info["path"] for k in kernels] == ["movement"]


def test_embedding_then_layernorm_is_cut_before_the_reduction(tmp_path):
    """HF GPT-2's and LLaMA's first group (token + position lookups, their sum, LayerNorm)
    is neither emitter's (the fast one takes no gathers, the data-movement one no reduction
    broadcast back): cut before the reduction, the lookups are a data-movement kernel and
    the LayerNorm a row kernel, none on the fallback path (found by attention_models.py)."""
    import torch

    from fusec.compiler import driver
    from fusec.compiler.frontend import import_torch
    from fusec.compiler.pipeline import CompileOptions
    from fusec.compiler.targets.cuda.options import CudaOptions

    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Embedding(1000, 256)
            self.wpe = torch.nn.Embedding(128, 256)
            self.ln = torch.nn.LayerNorm(256)

        def forward(self, ids):
            h = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
            return h, self.ln(h)

    torch.manual_seed(0)
    model = Embed().eval()
    with driver.quiet_torch_logs():
        text = import_torch(model, torch.randint(0, 1000, (2, 128)))
    options = CompileOptions(target="cuda", model_name="m", cuda=CudaOptions(cubin=False))
    meta = driver.compile_text(text, "<test>", options, str(tmp_path / "m.so"))
    paths = [k["info"]["path"] for k in meta["kernels"]]
    assert "fallback" not in paths and "movement" in paths and "fast" in paths, paths


def test_an_insert_slice_split_inside_a_vector_reads_each_lanes_own_destination() -> None:
    """slice_scatter of one column into an [6, 8] f32 tensor (torch-mlir's e2e
    SliceScatterStaticModule_basic, wrong on the H200): the slice boundary falls inside each
    thread's 4-lane vector, so the lanes choose apart, and each lane outside the slice must read
    the destination at its own column (the bug: every lane read lane 0's)."""
    x, src = torch.randn(6, 8), torch.randn(6, 1)
    program, kernels = _program(
        lambda a, b: torch.ops.aten.slice_scatter(a, b, dim=1, start=0, end=1, step=1), x, src)
    assert len(kernels) == 1 and kernels[0].info["path"] == "movement"
    branches = re.findall(r"arith\.cmpi ult, (%\w+), %\w+ : index\n\s*%\w+ = scf\.if [^\n]*\n"
                          r"(.*?)\} else \{(.*?)scf\.yield", program.kernels_mlir, re.S)
    assert len(branches) == 4  # one per lane
    lanes = set()
    for column, _, outside in branches:
        read = re.search(r"arith\.addi (%\w+), %\w+ : index", outside)
        assert read and read.group(1) == column, (column, outside)
        lanes.add(column)
    assert len(lanes) == 4


def test_each_movement_group_is_built_once_per_compile(monkeypatch) -> None:
    """The `tiled` stage asks the family whether it takes a group (the GPU rewrites, the
    fallback's tiling) and code generation builds it: one build per distinct group, the
    answers reused (`movement._BUILT`, keyed by the group's body, not its notes or its
    SSA names). Three different transposes are three builds and three kernels, each under
    its own symbol; the same group in a later compile is built from the cache: the same
    kernel under that compile's symbol."""
    from fusec.compiler.targets.cuda import movement
    from fusec.compiler.targets.cuda.built import PROBE_SYMBOL

    built: list[str] = []
    build = movement._build_movement_kernel

    bodies: list[str] = []

    def counting(group, symbol, constants, device):
        built.append(symbol)
        bodies.append(movement.body_text(group))
        return build(group, symbol, constants, device)

    monkeypatch.setattr(movement, "_build_movement_kernel", counting)
    monkeypatch.setattr(movement, "_BUILT", type(movement._BUILT)())
    x, y = torch.randn(6, 40, 24), torch.randn(6, 40, 24)
    program, kernels = _program(
        lambda a, b: (a.permute(0, 2, 1).contiguous() * 2, b.permute(1, 0, 2).contiguous() + 1,
                      torch.tanh(b.permute(0, 2, 1).contiguous()) * 3), x, y)
    paths = [k.info["path"] for k in kernels]
    assert paths.count("movement") == 3, paths
    # No group built twice (the stage also asks about candidate pieces it does not keep).
    assert len(bodies) == len(set(bodies)) >= 3 and set(built) == {PROBE_SYMBOL}
    symbols = [k.symbol for k in kernels]
    assert len(set(symbols)) == 3
    for symbol in symbols:
        assert f".entry {symbol}(" in program.ptx
    assert PROBE_SYMBOL not in program.ptx
    # Built again from the cache: same text under another symbol, refusals re-raised.
    before = len(built)
    program2, kernels2 = _program(lambda a: a.permute(0, 2, 1).contiguous() * 2, x)
    assert len(built) == before and len(kernels2) == 1
    def body(ptx: str, symbol: str) -> str:
        entry = _entry(ptx, symbol)
        return entry[:entry.index("\n}\n")].replace(symbol, "K")

    assert body(program2.ptx, kernels2[0].symbol) == body(program.ptx, kernels[0].symbol)


def test_a_refusal_is_remembered_with_its_reason(monkeypatch) -> None:
    """A group the family refuses is refused again from `_BUILT` with the same message and
    exception type, without a second build."""
    from fusec.compiler.targets.cuda import movement
    from fusec.compiler.targets.cuda.device import CudaCodegenError

    calls: list[int] = []

    def refusing(group, symbol, constants, device):
        calls.append(1)
        raise CudaCodegenError("not this one")

    monkeypatch.setattr(movement, "_build_movement_kernel", refusing)
    monkeypatch.setattr(movement, "_BUILT", type(movement._BUILT)())
    x = torch.randn(6, 40, 24)
    program, kernels = _program(lambda a: a.permute(0, 2, 1).contiguous() * 2, x)
    assert [k.info["path"] for k in kernels] == ["fallback"]
    assert "not this one" in kernels[0].info["why"]
    assert len(calls) == 1


def test_identical_layers_share_one_kernel() -> None:
    """Two identical blocks (weights are arguments, so the same layer is the same text)
    lower one kernel per distinct text: the launches of the second block call the first
    block's functions, and the PTX defines each function once."""
    from fusec.compiler.targets.cuda.program import share_identical_kernels
    from fusec.runtime.plan import Launch

    def block(x, w):
        return torch.exp(x) / torch.exp(x).sum() * w  # a total: two kernels a block

    x, w1, w2 = torch.randn(4, 40, 40), torch.randn(40), torch.randn(40)
    program, kernels = _program(lambda a, u, v: block(block(a, u), v), x, w1, w2)
    symbols = [k.symbol for k in kernels]
    entries = re.findall(r"\.entry (\w+)\(", program.ptx)
    assert len(entries) == len(set(entries)) == len(set(symbols)) < len(symbols)
    assert set(symbols) == set(entries)
    # The sharing itself: a text under another name is dropped, its launch renamed.
    text = "gpu.func @k1(%a: memref<4xf32>) kernel { gpu.return }"
    kept = share_identical_kernels(
        [text, text.replace("@k1", "@k2"), text.replace("4xf32", "8xf32").replace("@k1", "@k3")],
        launches := [Launch("k1", [], 1), Launch("k2", [], 1), Launch("k3", [], 1)])
    assert len(kept) == 2 and [k.symbol for k in launches] == ["k1", "k1", "k3"]


def test_fast_kernels_are_built_once_per_body(monkeypatch) -> None:
    """The fast emitter's texts are reused the same way (built.FAST): within a compile no
    group body is built twice by the plain emitter (the GPU rewrites' questions and code
    generation), and compiling the same program again builds nothing new."""
    from fusec.compiler.targets.cuda import built, emitter

    monkeypatch.setattr(built, "FAST", built.Built())
    plain: list[str] = []
    build = emitter.KernelEmitter.build

    def counting(self):
        if type(self) is emitter.KernelEmitter:
            plain.append(built.body_text(self.group))
        return build(self)

    monkeypatch.setattr(emitter.KernelEmitter, "build", counting)

    def model(a, u, v):
        def block(x, w):
            return F.layer_norm(x, (64,), w).sum(0, keepdim=True) + x
        return block(block(a, u), v)

    inputs = (torch.randn(32, 64), torch.randn(64), torch.randn(64))
    first, kernels = _program(model, *inputs)
    assert plain and len(plain) == len(set(plain))
    before = len(plain)
    second, again = _program(model, *inputs)
    assert len(plain) == before
    assert [k.info["path"] for k in again] == [k.info["path"] for k in kernels]
    assert second.ptx == first.ptx


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inputs_that_disagree_on_the_contiguous_dim_are_read_in_their_own_phase(dtype):
    """`x.t() + y`: x is contiguous along the output's rows, y along its columns. The plain
    transpose read y a lane at a time (0.51x Inductor on the H200, bench/RESULTS.md run
    168); the staged transpose reads x along p into a shared-memory square, then after one
    barrier y along l beside the square's vectors: no strided read, every global access a
    16-byte vector, one square (the output is never staged)."""
    x, y = torch.randn(512, 256).to(dtype), torch.randn(256, 512).to(dtype)
    program, kernels = _program(lambda a, b: a.t() * 2 + b, x, y)
    assert len(kernels) == 1
    info = kernels[0].info
    assert info["path"] == "movement" and info["shape"] == "transpose"
    assert info["launch"]["staged"] and info["strided_load_bytes_per_thread_pass"] == 0
    body = _entry(program.ptx, kernels[0].symbol)
    assert body.count("bar.sync") == 1 and re.search(r"ld\.shared\.v(2|4)", body)
    assert not re.search(r"ld\.global(\.nc)?\.(u16|b16|f32|b32) ", body)  # no scalar reads
    # A plain transpose (one input, its contiguous dim p) stays the unstaged shape.
    _, plain = _program(lambda a: (a.t() * 2).contiguous(), x)
    assert plain[0].info["shape"] == "transpose" and not plain[0].info["launch"]["staged"]


def test_a_gather_beside_a_transpose_is_not_staged() -> None:
    """A staged transpose evaluates its outputs twice and finds each read again by the path
    to it; a gather (an index read from data) or a concat (a choice per lane) would walk
    other reads in the two phases: such groups keep the plain transpose shape."""
    x, y = torch.randn(256, 256), torch.randn(256, 512)
    _, kernels = _program(lambda a, b: torch.cat([a.t(), b[:, :256]], dim=1), x, y)
    assert all(not k.info.get("launch", {}).get("staged") for k in kernels)


def test_a_channel_argmax_folds_value_and_index_together() -> None:
    """A segmentation head's `logits.argmax(1)` over NCHW classes: each output pixel folds
    its classes with the payload itself, the value and the index carried together, in
    order (torch's first extreme, first NaN), unrolled up to 64 classes and in a loop nest
    beyond (150 classes: one scf.for carrying both accumulators). It was a fallback kernel
    ("a reduction with several results")."""
    for classes, loops in ((21, 0), (150, 1)):
        program, kernels = _program(lambda t: t.argmax(1), torch.randn(2, classes, 32, 32))
        assert len(kernels) == 1
        info = kernels[0].info
        assert info["path"] == "movement" and info["shape"] == "direct"
        text = program.kernels_mlir
        assert len(re.findall(r"scf\.for .* -> \(f32, i64\)", text)) == loops
        assert text.count('"arith.select"') >= (1 if loops else classes)
