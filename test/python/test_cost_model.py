"""The fusion cost model's pure functions, on numbers worked out by hand."""

from __future__ import annotations

import pytest

from fusec.passes import cost_model
from fusec.passes.cost_model import CPU_HOST, H200


def test_roofline_is_memory_or_compute_bound():
    # 4.25 GB over 4.25 TB/s is 1 ms; 1 GFLOP at 60 TFLOP/s is far less.
    assert cost_model.roofline_s(4_250_000_000, 10**9, H200) == pytest.approx(1e-3)
    # 679 TFLOP on tensor cores is one second, whatever the bytes.
    assert cost_model.roofline_s(1000, 679 * 10**12, H200, contraction=True) == pytest.approx(1.0)
    assert cost_model.kernel_s(0, 0, H200) == H200.launch_s


def test_fusing_three_elementwise_kernels_pays():
    mb = 1 << 20
    # three unary kernels over 1 MB each (read + write), fused: read once, write once
    est = cost_model.estimate([(2 * mb, mb // 4, False)] * 3, 2 * mb, 3 * mb // 4, H200)
    assert est.bytes_unfused == 6 * mb and est.bytes_fused == 2 * mb
    assert est.launches_saved == 2
    assert est.pays and est.time_fused_s < est.time_unfused_s


def test_on_chip_capacity_boundaries():
    assert cost_model.fits_on_chip(227 * 1024, H200)
    assert not cost_model.fits_on_chip(227 * 1024 + 1, H200)
    # a 64K-element f32 row is 256 KB: over an H200 block's shared memory, within 1 MB of L2
    assert not cost_model.reduction_row_fits(65536, 4, H200)
    assert cost_model.reduction_row_fits(65536, 4, CPU_HOST)


def test_duplicate_only_cheap_producers_that_read_no_more_than_they_write():
    assert cost_model.should_duplicate(100, 100, cheap=True)
    assert not cost_model.should_duplicate(200, 100, cheap=True)
    assert not cost_model.should_duplicate(100, 100, cheap=False)


def test_recompute_is_bounded_by_the_tile_count():
    # a 1M-way broadcast is recomputed once per tile (4 per SM), not once per position
    extra, saved = cost_model.recompute_cost_s(10**6, 4 * 10**6, 10**6, H200)
    assert extra == pytest.approx((4 * 132 - 1) * 10**6 / H200.flops_per_s)
    assert saved == pytest.approx(H200.launch_s + 8 * 10**6 / H200.hbm_bytes_per_s)
    assert cost_model.recompute_cost_s(10**6, 1, 1, H200)[0] == 0


def test_untiled_contraction_budget_and_occupancy():
    assert cost_model.contraction_untiled_ok(128, H200)
    assert not cost_model.contraction_untiled_ok(129, H200)
    assert cost_model.occupancy(66, H200) == pytest.approx(0.5)
    assert cost_model.occupancy(10**6, H200) == 1.0


def test_devices_by_name():
    assert cost_model.device_named("h200") is H200
    assert cost_model.device_named("cpu") is CPU_HOST
    with pytest.raises(ValueError):
        cost_model.device_named("tpu")


def test_cpu_matmul_with_prime_rows_is_split_by_columns():
    # ViT's 197 tokens: no row divisor in range, so one row tile; its columns go to the
    # threads (8 tiles of 384 of 3072), not one tile on one core of two.
    tiling = cost_model.cpu_matmul_tiling(197, 3072, 768, 4, 0, threads=2)
    assert tiling.rows == 0 and tiling.cols == 384
    # A small one (64 x 64 x 32, about a microsecond of work per thread) stays one tile.
    small = cost_model.cpu_matmul_tiling(64, 64, 32, 4, 0, threads=4)
    assert small.cols == 0
    # Row tiles enough for the threads, B in L2: kept as the row policy gave them.
    assert cost_model.cpu_matmul_tiling(192, 256, 256, 4, 48, threads=2).cols == 0


def test_a_window_joins_a_convolution_gather_only_where_read_once():
    # A 3x3 pool in a 3x3 convolution's gather: 81 reads per value against 9 + 1 + 9.
    assert not cost_model.window_joins_conv_gather(9, 9)
    assert not cost_model.window_joins_conv_gather(4, 9)
    # Before a 1x1 convolution the gather reads each value once: the pool joins it.
    assert cost_model.window_joins_conv_gather(9, 1)
    assert cost_model.window_joins_conv_gather(49, 1)


def test_gemm_tile_of_a_grid_that_fills_at_most_half_the_sms():
    """64 x 128 tiles (TC_SMALL_GRID_TILE) where 128 x 128 ones fill at most half the SMs
    and the model predicts them faster (ResNet-50's batch-1 GEMMs: 0.66-0.84 of the time on
    an H100); 128 x 128 (or a persistent schedule) once they fill more. Every tile takes
    either B layout: BN 64 over a K x N B, wrong in RESULTS run 252 (nvgpu's store of a
    128-row accumulator), is a candidate again since each 64 rows have their own."""
    from fusec.compiler.targets.cuda import wgmma
    from fusec.passes import gemm_cost

    small = gemm_cost.TC_SMALL_GRID_TILE
    for m, n, k in ((196, 256, 1024), (49, 2048, 512), (3136, 64, 576), (512, 384, 256)):
        assert gemm_cost.tc_gemm_tile(m, n, k, 2, H200) == small
        assert gemm_cost.tc_gemm_tile_s(m, n, k, 0, H200, small) < \
            gemm_cost.tc_gemm_tile_s(m, n, k, 0, H200, (128, 128, 64, 4))
    # 128 tiles of 128 x 128 (the H200's SMs: 132): the 64-row tile is not a candidate.
    assert gemm_cost.tc_gemm_tile(2048, 1024, 1024, 2, H200)[:2] == (128, 128)
    assert gemm_cost.tc_gemm_tile(8192, 768, 3072, 2, H200)[:2] == (128, 128)
    kn = gemm_cost.tc_gemm_tile_candidates(512, 784, 128, 2, True, H200)
    nk = gemm_cost.tc_gemm_tile_candidates(512, 784, 128, 2, False, H200)
    assert kn == nk and any(t[:2] == (128, 64) for t in kn)
    problem = wgmma.GemmProblem(512, 784, 128, out_type="f32", b_layout="kn")
    assert wgmma.refusal(problem, wgmma.GemmTile(128, 64)) is None
    assert wgmma.refusal(problem, wgmma.GemmTile(64, 128)) is None
    nk_problem = wgmma.GemmProblem(196, 1024, 256, out_type="f32", b_layout="nk")
    assert wgmma.refusal(nk_problem, wgmma.GemmTile(128, 64)) is None


def test_library_gemm_in_a_graph_has_no_call_overhead():
    from fusec.passes import gemm_cost

    plain = gemm_cost.library_gemm_s(196, 256, 1024, 1 << 20, H200)
    graph = gemm_cost.library_gemm_s(196, 256, 1024, 1 << 20, H200, graph=True)
    assert plain - graph == pytest.approx(gemm_cost.LIBRARY_CALL_S -
                                          gemm_cost.LIBRARY_GRAPH_CALL_S)
    assert graph >= H200.launch_s


def test_split_k_tiles_for_small_grids_with_long_k(monkeypatch):
    """Split-K (wgmma.GemmTile.splits) is offered where 128 x 128 tiles fill at most half the
    SMs: splits that keep the CTAs in one wave, each split at least TC_SPLIT_MIN_K_TILES
    k-tiles. TC_SPLIT_K off: neither the model nor --tune's candidates have a split tile."""
    from fusec.passes import gemm_cost

    down = (128, 768, 3072)  # GPT-2's down projection at 128 tokens: 12 tiles of 64 x 128
    assert gemm_cost.TC_SPLIT_K
    monkeypatch.setattr(gemm_cost, "TC_SPLIT_K", False)
    assert all(len(t) < 6 for t in gemm_cost.tc_gemm_tile_candidates(*down, 2, False, H200))
    assert len(gemm_cost.tc_gemm_tile(*down, 2, H200)) == 4
    monkeypatch.setattr(gemm_cost, "TC_SPLIT_K", True)
    splits = gemm_cost.tc_split_tiles(*down, H200)
    assert [gemm_cost.tile_splits(t) for t in splits] == [2, 4, 8]
    assert all(12 * gemm_cost.tile_splits(t) <= H200.parallel_units for t in splits)
    chosen = gemm_cost.tc_gemm_tile(*down, 2, H200)
    assert gemm_cost.tile_splits(chosen) > 1 and gemm_cost.tile_schedule(chosen) == 0
    assert gemm_cost.tc_gemm_tile_s(*down, 0, H200, chosen) < \
        gemm_cost.tc_gemm_tile_s(*down, 0, H200, gemm_cost.TC_SMALL_GRID_TILE)
    # Not for a pair (its kernel has no split-K), nor where K is short or the tiles many.
    assert len(gemm_cost.tc_gemm_tile(*down, 2, H200, splits=False)) == 4
    assert gemm_cost.tc_split_tiles(128, 768, 448, H200) == []  # 7 k-tiles: < 2 x 4
    assert [gemm_cost.tile_splits(t) for t in gemm_cost.tc_split_tiles(128, 768, 512, H200)] \
        == [2]
    assert gemm_cost.tile_splits(gemm_cost.tc_gemm_tile(4096, 4096, 4096, 2, H200)) == 1
    assert gemm_cost.tc_split_tiles(1024, 2048, 4096, H200) == []  # 256 tiles of 64 x 128
    candidates = gemm_cost.tc_gemm_tile_candidates(*down, 2, False, H200)
    assert {gemm_cost.tile_splits(t) for t in candidates} >= {1, 2, 4, 8}
    # Every split tile the model offers, the kernel builds (a second reader found split 8
    # offered at K = 2112, whose 33 k-tiles the first cut into ranges of 5 left one empty).
    from fusec.compiler.targets.cuda import wgmma

    for k in range(64, 8193, 64):
        for tile in gemm_cost.tc_split_tiles(128, 768, k, H200):
            assert wgmma.refusal(wgmma.GemmProblem(128, 768, k), wgmma.GemmTile(*tile)) is None
    # The model: a split's k-tiles and the partials' way through L2, per CTA.
    one = gemm_cost.tc_gemm_s(*down, 0, H200, 64, 128, 64)
    four = gemm_cost.tc_gemm_s(*down, 0, H200, 64, 128, 64, splits=4)
    compute = 2 * 64 * 128 * 3072 / (H200.matmul_flops_per_s * gemm_cost.TC_GEMM_EFFICIENCY /
                                     H200.parallel_units)
    fixup = gemm_cost.TC_SPLIT_FIXUP_S + 5 * 64 * 128 * 4 / gemm_cost.TC_SPLIT_SM_BYTES_PER_S
    assert abs((one - four) - (compute * 3 / 4 - fixup)) < 1e-9
