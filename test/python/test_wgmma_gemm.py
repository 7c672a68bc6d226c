"""The tensor-core GEMM family (compiler/targets/cuda/wgmma.py), built here without a GPU:
the kernel lowers to sm_90a PTX with one wgmma per 64 rows x 16 of K per k-tile and TMA
loads, ptxas takes it without spills, and what the family cannot build is refused with the
reason. Numerics and time are measured on the H200 (bench/tc_gemm.py, RESULTS.md run 42)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from fusec.compiler.targets.cuda import wgmma
from fusec.compiler.targets.cuda.device import CudaCodegenError


def _ptx(problem: wgmma.GemmProblem, tile: wgmma.GemmTile = wgmma.GemmTile()) -> str:
    return wgmma.lower(wgmma.gpu_module_text([wgmma.kernel_text("k", problem, tile)]))


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_kernel_lowers_to_wgmma_and_tma(layout, tmp_path):
    ptx = _ptx(wgmma.GemmProblem(1000, 520, 264, b_layout=layout))
    assert ".target sm_90a" in ptx
    # BM=128 (two m64 blocks) x BK=64 (four k16 steps): 8 wgmma m64n128k16 per k-tile (LLVM
    # may unroll the k loop: a multiple of 8).
    mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.f32\.bf16\.bf16", ptx)
    assert set(mmas) == {"m64n128k16"} and len(mmas) % 8 == 0, mmas
    assert "cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait.parity" in ptx
    # The two tensor maps are by-value grid constants (128 bytes, 64-byte aligned), read in
    # place (cvta.param), not pointers.
    assert ptx.count(".param .align 64 .b8 k_param_") == 2 and "cvta.param" in ptx
    # TMA writes the dynamic shared region: PTX's extern one, at the swizzle's alignment.
    assert ".extern .shared .align 1024 .b8 __dynamic_shmem__0[];" in ptx
    assert re.search(r"\.param \.u64 \.ptr[^\n]*k_param_2", ptx)
    # wgmma's imm-trans-b (the last immediate) follows B's layout: K-major for a Linear's
    # N x K weight, N-major (transposed) for a K x N matrix.
    flags = set(re.findall(r"p, 1,\s*1, 0,\s*(\d);", ptx))
    assert flags == ({"0"} if layout == "nk" else {"1"}), flags
    # Rows and columns past M, N are not stored (the epilogue's guards).
    assert "setp.lt.u64" in ptx or "setp.gt.u64" in ptx or "setp.ge.u64" in ptx
    if shutil.which("ptxas"):
        out = subprocess.run(["ptxas", "-arch=sm_90a", "-v", "-", "-o", str(tmp_path / "k")],
                             input=ptx, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert "0 bytes spill stores" in out.stderr


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("bm,bn", [(128, 64), (128, 128), (64, 256), (64, 128), (192, 128),
                                   (128, 192)])
def test_each_64_rows_of_the_accumulator_land_in_their_rows(layout, bm, bn):
    """The accumulator goes to shared memory (f32, BN floats a row) with every thread's
    values at rows r, r + 8 of each 64-row block: blocks at rows 0, 64, 128, ... Upstream's
    store of one accumulator of several m64 blocks puts block i at row i * BN / 2, right for
    BN 128 only; the K x N kernel used it and its 128 x 64 tile was wrong on an H100
    (RESULTS run 252). Each 64 rows now have their own accumulator, on both layouts."""
    ptx = _ptx(wgmma.GemmProblem(512, 768, 256, out_type="f32", b_layout=layout),
               wgmma.GemmTile(bm, bn, stages=2))
    offsets = {int(o or 0) for o in
               re.findall(r"st\.shared\.v2\.b32\s+\[%rd\d+\+?(\d*)\]", ptx)}
    rows = sorted({o // (bn * 4) for o in offsets})
    assert rows == [r + d for r in range(0, bm, 64) for d in (0, 8)], rows


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_split_k_kernel(layout, tmp_path):
    """Split-K: a CTA per tile and split (grid x splits), each over its share of the
    k-tiles (48 in 5 splits: [s * 48 / 5, (s + 1) * 48 / 5), 9 or 10 each); the partial out
    to the scratch, a gpu-scope fence, one atomic per CTA on its tile's counter, acquire
    fences after it (thread 0's, then every thread's) before the partials are read back.
    Without splits none of that."""
    problem = wgmma.GemmProblem(128, 768, 3072, b_layout=layout)
    tile = wgmma.GemmTile(64, 128, stages=4, splits=5)
    assert wgmma.refusal(problem, tile) is None
    assert wgmma.grid(problem, tile) == 2 * 6 * 5
    assert wgmma.split_scratch(problem, tile) == (5 * 12 * 64 * 128, 12)
    assert tile.shared_bytes(2) == 4 * (64 + 128) * 64 * 2 + wgmma.SPLIT_FLAG_BYTES
    text = wgmma.kernel_text("k", problem, tile)
    assert "%sk_cnt: memref<12xi32>" in text and "memref.atomic_rmw addi" in text
    ptx = _ptx(problem, tile)
    assert ptx.count("atom.global.add.u32") == 1
    assert ptx.count("fence.acq_rel.gpu") == 3
    assert "%sk_k_begin = arith.divui %sk_kb_num, %sk_c_splits" in text
    mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)
    assert set(mmas) == {"m64n128k16"}
    plain = _ptx(problem, wgmma.GemmTile(64, 128, stages=4))
    assert "atom." not in plain and "fence.acq_rel" not in plain
    if shutil.which("ptxas"):
        out = subprocess.run(["ptxas", "-arch=sm_90a", "-v", "-", "-o", str(tmp_path / "k")],
                             input=ptx, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert "0 bytes spill stores" in out.stderr


@pytest.mark.parametrize("problem,tile,reason", [
    (wgmma.GemmProblem(128, 768, 256), wgmma.GemmTile(64, 128, splits=4),
     "leaves a split without k-tiles"),  # 4 k-tiles in 4 splits: fine; 3 in 4 not
    (wgmma.GemmProblem(128, 768, 3072, pair=True), wgmma.GemmTile(64, 128, splits=2),
     "one GEMM on the one-warpgroup schedule"),
    (wgmma.GemmProblem(128, 768, 3072), wgmma.GemmTile(128, 128, splits=2,
                                                        schedule=wgmma.PINGPONG),
     "one GEMM on the one-warpgroup schedule"),
])
def test_split_k_refusals(problem, tile, reason):
    if "k-tiles" in reason:
        assert wgmma.refusal(problem, tile) is None
        problem = wgmma.GemmProblem(128, 768, 192)
    assert reason in wgmma.refusal(problem, tile)


def test_pipeline_depth_follows_k():
    """A K of one tile gets one stage (one barrier), not four."""
    text = wgmma.kernel_text("k", wgmma.GemmProblem(128, 128, 64))
    assert "num_barriers = 1" in text
    text = wgmma.kernel_text("k", wgmma.GemmProblem(128, 128, 4096))
    assert "num_barriers = 4" in text


@pytest.mark.parametrize("problem,reason", [
    (wgmma.GemmProblem(64, 64, 64, in_type="f32"), "operands of type f32"),
    (wgmma.GemmProblem(64, 64, 60), "multiple of 16 bytes"),
    (wgmma.GemmProblem(64, 66, 64), "N is not a multiple of 4"),
    (wgmma.GemmProblem(64, 64, 64, b_layout="mk"), "B layout"),
])
def test_refusals_name_the_reason(problem, reason):
    assert reason in wgmma.refusal(problem)
    with pytest.raises(CudaCodegenError, match=reason):
        wgmma.kernel_text("k", problem)


# ---------------------------------------------------------------- the ping-pong schedule

PINGPONG = wgmma.GemmTile(stages=4, schedule=wgmma.PINGPONG)


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_pingpong_kernel(layout, tmp_path):
    problem = wgmma.GemmProblem(1000, 520, 264, b_layout=layout)
    grid, block, shared = wgmma.launch_geometry(problem, PINGPONG, 132)
    # Persistent: at most a CTA per SM (40 tiles here: 40 CTAs), a producer and two
    # consumer warpgroups, four stages and a 64-row f32 buffer per consumer (rows padded
    # to 136 floats: gemm_cost.tc_epilogue_stride).
    assert (grid, block) == (40, 384)
    assert shared == 4 * (128 + 128) * 64 * 2 + 2 * 64 * 136 * 4
    assert wgmma.launch_geometry(wgmma.GemmProblem(8192, 768, 768), PINGPONG, 132)[0] == 132
    text = wgmma.build_kernel_text("k", problem, PINGPONG, 132)
    # A full and an empty mbarrier per stage (the empty one counts a consumer's four
    # warps), and the consumers' turn.
    assert "num_barriers = 9" in text and text.count("nvgpu.mbarrier.init") == 9
    ptx = wgmma.lower(wgmma.gpu_module_text([text]))
    mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.f32\.bf16\.bf16", ptx)
    assert set(mmas) <= {"m64n128k16", "m64n128k64"} and mmas, mmas
    # The consumers' epilogue barriers are their own (ids 1, 2 of 128 threads), not the
    # block's; the consumers release each stage with an arrive, the producer waits for it.
    assert re.search(r"bar\.sync\s+(%r\d+|1), 128;", ptx)
    assert "mbarrier.arrive.shared.b64" in ptx and "mbarrier.arrive.expect_tx" in ptx
    _ptxas_clean(ptx, tmp_path)


def _ptxas_clean(ptx: str, tmp_path) -> None:
    """ptxas (where installed) takes the kernel without spills, and issues the MMAs of a
    k-tile back to back: no wgmma left in a branch it deems divergent (C7520:
    "serialized"), no arrive injected for registers written before them (C7519: the first
    k-tile starts the accumulators with scale-d zero)."""
    if shutil.which("ptxas"):
        out = subprocess.run(["ptxas", "-arch=sm_90a", "-v", "-", "-o", str(tmp_path / "k")],
                             input=ptx, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert "0 bytes spill stores" in out.stderr
        assert "C7520" not in out.stderr and "C7519" not in out.stderr, out.stderr


COOPERATIVE = wgmma.GemmTile(256, 128, 64, 4, wgmma.COOPERATIVE)


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_cooperative_kernel(layout, tmp_path):
    """The cooperative variant: 256 x 128 tiles, both consumers on each (consumer w its
    rows 128 w ..): every stage released by both consumers' eight warps, no turn between
    them, each consumer's A descriptor half a stage's A further for w = 1. Four stages
    leave room for 32-row epilogue buffers only: each m64 half goes out in two parts."""
    problem = wgmma.GemmProblem(1000, 520, 264, b_layout=layout)
    grid, block, shared = wgmma.launch_geometry(problem, COOPERATIVE, 132)
    assert (grid, block) == (4 * 5, 384)  # 4 x 5 tiles of 256 x 128
    assert shared == 4 * (256 + 128) * 64 * 2 + 2 * 32 * 136 * 4
    assert shared <= 227 * 1024 - 1024
    three = wgmma.GemmTile(256, 128, 64, 3, wgmma.COOPERATIVE)
    assert three.epilogue_rows(2) == 64
    assert wgmma.launch_geometry(problem, three, 132)[2] == 3 * 384 * 64 * 2 + 2 * 64 * 136 * 4
    text = wgmma.build_kernel_text("k", problem, COOPERATIVE, 132)
    assert "%c_release = arith.constant 8 : index" in text
    assert "%c_turn_i]" not in text  # no consumer waits for or arrives at the turn
    assert "scf.for %ci = %c0 to %my_tiles step %c1" in text
    assert f"%c_a_half = arith.constant {128 * 64 * 2 // 16} : i64" in text
    # 2 halves x 2 parts of 32 rows: one epilogue in a loop of four, each part stored by
    # the warps whose rows it holds (`looped_epilogue=False`: a copy per part).
    assert "scf.for %ep_i = %c0 to %c_ep_parts" in text and text.count("scf.if %mine") == 1
    assert "%c_ep_parts = arith.constant 4 : index" in text
    unrolled = wgmma.pingpong_kernel_text("k", problem, COOPERATIVE, 132,
                                          looped_epilogue=False)
    assert unrolled.count("scf.if %mine") == 4 and "%ep_i" not in unrolled
    assert "scf.if %mine" not in wgmma.build_kernel_text("k", problem, three, 132)
    pp = wgmma.build_kernel_text("k", problem, PINGPONG, 132)
    assert "%c_release = arith.constant 4 : index" in pp and "%c_turn_i]" in pp
    _ptxas_clean(wgmma.lower(wgmma.gpu_module_text([text])), tmp_path)
    with pytest.raises(CudaCodegenError, match="cooperative schedule takes BM = 256"):
        wgmma.build_kernel_text("k", problem, wgmma.GemmTile(128, 128, 64, 3,
                                                             wgmma.COOPERATIVE), 132)


def test_pingpong_refuses_other_tile_heights():
    with pytest.raises(CudaCodegenError, match="BM = 128"):
        wgmma.pingpong_kernel_text("k", wgmma.GemmProblem(512, 512, 512),
                                   wgmma.GemmTile(64, 128, 64, 4, wgmma.PINGPONG), 132)


def test_the_model_chooses_a_persistent_schedule_where_its_rounds_beat_the_waves():
    """The cost model's schedule for 16-bit GEMMs whose tiles fill the SMs, measured on an
    H100 (RESULTS runs 200, 203, 205): ping-pong on GPT-2's projections (1.14-1.31x the
    one-warpgroup kernel; its rounds of 128 x 128 tiles quantise better, and a consumer's
    epilogue runs beside the other's MMAs, so a GELU there costs little), cooperative on
    4096- and 8192-sized problems (751-763 TFLOP/s with 4 stages, 1.20-1.25x one warpgroup,
    0.98-1.01x cuBLAS); `--tune` measures the others next. Fewer tiles than SMs never take
    either, nor do fp32 (tf32) inputs, which the GPU suites have not run on them."""
    from fusec.passes import cost_model, gemm_cost

    h200 = cost_model.H200
    gelu = gemm_cost.tc_epilogue_s(8192 * 3072, 25.0, h200)  # c_fc's bias + GELU(tanh)
    for m, n, k, epilogue in ((8192, 768, 3072, 0.0), (8192, 768, 768, 0.0),
                              (8192, 3072, 768, gelu), (8192, 2304, 768, 0.0)):
        tiles = gemm_cost.tc_gemm_tile_candidates(m, n, k, 2, False, h200, epilogue)
        assert tiles[0] == (128, 128, 64, 4, wgmma.PINGPONG), (m, n, k)
        assert gemm_cost.tc_gemm_tile(m, n, k, 2, h200, epilogue) == tiles[0]
        assert sum(t[4:] == (wgmma.PINGPONG,) for t in tiles) == 1
        assert tiles[1][:3] == (128, 128, 64)
        pp, one = (gemm_cost.tc_gemm_tile_s(m, n, k, 0, h200, t, epilogue) for t in tiles[:2])
        assert pp < one
    # The ping-pong schedule hides the GELU: with it, c_fc's prediction grows less for
    # ping-pong than for the cooperative schedule, whose epilogues are exposed.
    pp_tile, co_tile = (128, 128, 64, 4, wgmma.PINGPONG), (256, 128, 64, 4, wgmma.COOPERATIVE)
    grow = [gemm_cost.tc_gemm_tile_s(8192, 3072, 768, 0, h200, t, gelu) -
            gemm_cost.tc_gemm_tile_s(8192, 3072, 768, 0, h200, t) for t in (pp_tile, co_tile)]
    assert grow[0] < 0.2 * grow[1]
    for m, n, k in ((8192, 8192, 8192), (8192, 4096, 4096), (16384, 4096, 4096)):
        tiles = gemm_cost.tc_gemm_tile_candidates(m, n, k, 2, False, h200)
        assert tiles[0] == co_tile, (m, n, k)
        assert tiles[1] == (128, 128, 64, 3) and tiles[2] == pp_tile
        assert wgmma.GemmTile(*tiles[0]).epilogue_rows(2) == 32  # 4 stages: 32-row buffers
    half = gemm_cost.tc_gemm_tile_candidates(4096, 768, 3072, 2, False, h200)
    # 32 x 6 tiles of 128 x 128, but 16 x 6 of 256 x 128: fewer than the SMs.
    assert pp_tile in half and co_tile not in half
    tf32 = gemm_cost.tc_gemm_tile_candidates(8192, 768, 3072, 4, False, h200)
    assert len(tf32[0]) == 4 and any(len(t) > 4 for t in tf32)
    small = gemm_cost.tc_gemm_tile_candidates(1000, 520, 264, 2, False, h200)
    assert all(len(t) == 4 for t in small)  # 40 tiles: fewer than the 132 SMs


class _Product:
    """A pair's epilogue for the kernel alone: the two products' values multiplied."""

    def __init__(self):
        self.count = 0

    def arguments(self):
        return []

    def setup(self, emit):
        pass

    def begin(self):
        pass

    def apply(self, emit, row, col, lanes, lanes2=None):
        out = []
        for a, b in zip(lanes, lanes2):
            self.count += 1
            emit(f"%pp{self.count} = arith.mulf {a}, {b} : f32")
            emit(f"%pt{self.count} = arith.truncf %pp{self.count} : f32 to bf16")
            out.append(f"%pt{self.count}")
        return out


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("tile", [wgmma.GemmTile(), PINGPONG, COOPERATIVE,
                                  wgmma.GemmTile(64, 256, 64, 3)])
def test_pair_kernel(layout, tile, tmp_path):
    """A GEMM pair (two products of one A) on every schedule: three by-value tensor maps,
    each stage's B boxes split between B and B2 (the same bytes in a stage as one B's),
    BN / 2 output columns per tile, no spills; a BN under 128 is refused."""
    problem = wgmma.GemmProblem(1000, 520, 264, b_layout=layout, pair=True)
    boxes = wgmma.b_boxes(problem, tile)
    assert sorted({mi for mi, _, _ in boxes}) == [0, 1]
    # The boxes tile B's part of the stage: BN x BK elements, each 2 bytes, no overlap.
    box_bytes = tile.bn * tile.bk * 2 // len(boxes)
    assert [offset for _, _, offset in boxes] == [j * box_bytes for j in range(len(boxes))]
    grid, _, _ = wgmma.launch_geometry(problem, tile, 132)
    tiles = -(-1000 // tile.bm) * -(-520 // (tile.bn // 2))
    assert grid == (min(tiles, 132) if tile.schedule else tiles)
    text = wgmma.build_kernel_text("k", problem, tile, 132, _Product())
    assert "%map_b2: !llvm.ptr" in text and "fusec.tensor_maps = 3 : i64" in text
    ptx = wgmma.lower(wgmma.gpu_module_text([text]))
    assert ptx.count(".param .align 64 .b8 k_param_") == 3
    _ptxas_clean(ptx, tmp_path)
    with pytest.raises(CudaCodegenError, match="pair needs BN a multiple of 128"):
        wgmma.kernel_text("k", problem, wgmma.GemmTile(128, 64, 64, 4))
    with pytest.raises(CudaCodegenError, match="without the epilogue joining it"):
        wgmma.kernel_text("k", problem, wgmma.GemmTile())


@pytest.mark.parametrize("tile", [wgmma.GemmTile(), PINGPONG, COOPERATIVE])
def test_tiles_in_groups_of_rows(tile):
    """Every schedule takes its tiles in groups of GROUP_ROWS rows of tiles, each group
    column by column (the last group the rows that are left: `minui`); group_rows 1 is the
    row-by-row order (PTX byte-identical to the kernels before the groups)."""
    problem = wgmma.GemmProblem(8192, 22016, 4096)
    m_tiles, n_tiles = 8192 // tile.bm, 22016 // tile.bn
    text = wgmma.build_kernel_text("k", problem, tile, 132)
    assert f"arith.constant {wgmma.GROUP_ROWS * n_tiles} : index" in text
    assert f"arith.constant {m_tiles} : index" in text
    copies = 2 if tile.schedule else 1  # the producer's and the consumers' (persistent)
    assert text.count("arith.minui %grp_left") == copies
    rows = wgmma.build_kernel_text("k", problem, tile, 132, group_rows=1)
    assert "%grp" not in rows


def test_the_persistent_epilogue_is_emitted_once(tmp_path):
    """The persistent kernels run their epilogue in a loop over the accumulator's parts
    (the fragments' store chosen by the half): its code once, not once per part. The
    ping-pong kernel's PTX shrinks and ptxas still spills nothing."""
    problem = wgmma.GemmProblem(8192, 3072, 768)
    looped = wgmma.lower(wgmma.gpu_module_text([wgmma.pingpong_kernel_text(
        "k", problem, PINGPONG, 132)]))
    unrolled = wgmma.lower(wgmma.gpu_module_text([wgmma.pingpong_kernel_text(
        "k", problem, PINGPONG, 132, looped_epilogue=False)]))
    assert len(looped) < len(unrolled)
    assert looped.count("st.global") * 2 == unrolled.count("st.global")
    _ptxas_clean(looped, tmp_path)


@pytest.mark.parametrize("shape", [(8192, 3072, 768), (1000, 520, 264)])
@pytest.mark.parametrize("tile", [wgmma.GemmTile(), PINGPONG, COOPERATIVE])
def test_the_epilogue_passes_are_one_basic_block(shape, tile, tmp_path):
    """The epilogue's unrolled row passes and their stores lie in one basic block, for
    ptxas to interleave (a branch around each store let LLVM sink each pass's chain into
    it: the passes then ran one after the other, latency-bound). Where the tiles divide D
    the stores are plain; where they do not (M and N ragged) each is one predicated PTX
    store."""
    problem = wgmma.GemmProblem(*shape)
    text = wgmma.build_kernel_text("k", problem, tile, 132, _Bias("b"), unroll=8)
    ptx = wgmma.lower(wgmma.gpu_module_text([text]))
    lines = [line.strip() for line in ptx.splitlines()]
    stores = [i for i, line in enumerate(lines) if "st.global" in line]
    assert len(stores) >= 8, len(stores)
    between = lines[stores[0]:stores[-1] + 1]
    assert not [line for line in between if line.startswith("$L__") or " bra" in line]
    exact = shape[0] % tile.bm == 0 and shape[1] % tile.bn == 0
    predicated = [line for line in between if "@p st.global" in line]
    assert (not predicated) if exact else len(predicated) >= 8
    _ptxas_clean(ptx, tmp_path)


def _fragment_store_conflict(stride: int) -> int:
    """The most 4-byte words of one warp's accumulator-fragment store (thread t: row t / 4,
    columns 8 c + 2 (t % 4) and + 1) that fall in one shared-memory bank, over c."""
    worst = 0
    for c in range(16):
        banks: dict[int, int] = {}
        for t in range(32):
            word = (t // 4) * stride + 8 * c + 2 * (t % 4)
            for w in (word, word + 1):
                banks[w % 32] = banks.get(w % 32, 0) + 1
        worst = max(worst, max(banks.values()))
    return worst


def test_the_epilogue_buffer_rows_are_padded_against_bank_conflicts():
    """A persistent consumer stores its accumulator fragments into rows padded by
    `tc_epilogue_stride`: 64 words a warp in 32 banks, two each, the least there can be;
    unpadded 128-float rows put all eight rows of a warp's store on the same eight banks
    (8-way, ncu's excessive shared wavefronts on GPT-2's fc GEMM)."""
    from fusec.passes.gemm_cost import tc_epilogue_stride

    assert _fragment_store_conflict(128) == 8
    for bn in range(8, 257, 8):
        stride = tc_epilogue_stride(bn)
        assert bn <= stride < bn + 32 and stride % 32 == 8
        assert _fragment_store_conflict(stride) == 2, bn
    text = wgmma.build_kernel_text("k", wgmma.GemmProblem(8192, 3072, 768), PINGPONG, 132)
    assert "memref<128x136xf32, #gpu.address_space<workgroup>>" in text


class _Bias:
    """A sibling segment's epilogue: its own bias (its own parameter and SSA names)."""

    def __init__(self, tag: str) -> None:
        self.tag, self.count = tag, 0

    def arguments(self) -> list[str]:
        return [f"%{self.tag}: memref<1024xbf16>"]

    def setup(self, emit) -> None:
        pass

    def begin(self) -> None:
        pass

    def apply(self, emit, row, col, lanes, lanes2=None):
        out = []
        for lane in lanes:
            self.count += 1
            n = f"%{self.tag}_{self.count}"
            emit(f"{n}b = memref.load %{self.tag}[{col}] : memref<1024xbf16>")
            emit(f"{n}f = arith.extf {n}b : bf16 to f32")
            emit(f"{n}s = arith.addf {lane}, {n}f : f32")
            emit(f"{n} = arith.truncf {n}s : f32 to bf16")
            out.append(n)
        return out


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("tile", [wgmma.GemmTile(), PINGPONG, COOPERATIVE])
def test_sibling_segments_kernel(layout, tile, tmp_path):
    """Sibling GEMMs (q, k, v of one A): B's columns in segments, each with its own B map,
    output and epilogue, chosen by the tile's segment (every N but the last a multiple of
    BN; the last ragged). One kernel on every schedule, no spills; a ragged segment before
    the last is refused."""
    problem = wgmma.GemmProblem(1000, 768 + 256 + 200, 264, b_layout=layout,
                                segments=(768, 256, 200))
    assert wgmma.refusal(problem, tile) is None
    grid, _, _ = wgmma.launch_geometry(problem, tile, 132)
    tiles = -(-1000 // tile.bm) * (6 + 2 + 2)  # each segment's own column tiles
    assert grid == (min(tiles, 132) if tile.schedule else tiles)
    text = wgmma.build_kernel_text("k", problem, tile, 132,
                                   [_Bias("bq"), _Bias("bk"), _Bias("bv")])
    # Four maps (A and three Bs), three outputs of their own widths, three biases.
    assert "%map_b3: !llvm.ptr" in text and "fusec.tensor_maps = 4 : i64" in text
    for d, n in (("%d", 768), ("%d1", 256), ("%d2", 200)):
        assert f"{d}: memref<1000x{n}xbf16>" in text
    # Each B box's load (per copy of the stage's loads: the prologue's and the refill's in
    # the one-warpgroup kernel, the producer's in the persistent ones) and the epilogue
    # are an scf.index_switch on the tile's segment.
    boxes = len(wgmma.b_boxes(problem, tile))
    assert text.count("scf.index_switch") == (1 if tile.schedule else 2) * boxes + 1
    for m in ("%tma_b[", "%tma_b2[", "%tma_b3["):
        assert m in text
    ptx = wgmma.lower(wgmma.gpu_module_text([text]))
    assert ptx.count(".param .align 64 .b8 k_param_") == 4
    _ptxas_clean(ptx, tmp_path)
    ragged_first = wgmma.GemmProblem(1000, 200 + 768, 264, b_layout=layout,
                                     segments=(200, 768))
    assert "sibling GEMM of N not a multiple of BN" in wgmma.refusal(ragged_first, tile)
    with pytest.raises(CudaCodegenError, match="3 epilogues for 2 outputs"):
        wgmma.build_kernel_text("k", wgmma.GemmProblem(1000, 1024, 264, b_layout=layout,
                                                       segments=(768, 256)), tile, 132,
                                [_Bias("a"), _Bias("b"), _Bias("c")])
