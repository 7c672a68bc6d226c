// RUN: fusec-opt %s '--fusion-tile{threads=2,min-tile-kb=1}' --split-input-file | filecheck %s --check-prefix=MODEL
// RUN: fusec-opt %s '--fusion-tile{threads=2,min-tile-kb=1,tuning=%S/Inputs/tuning-cache.json,tuning-device=cpu-test}' --split-input-file | filecheck %s --check-prefix=CACHE
// RUN: fusec-opt %s '--fusion-tile{threads=2,min-tile-kb=1,tuning=%S/Inputs/tuning-cache.json,tuning-device=cpu-other}' --split-input-file | filecheck %s --check-prefix=MODEL
// RUN: fusec-opt %s '--fusion-tile{threads=2,min-tile-kb=1,candidate=1}' --split-input-file | filecheck %s --check-prefix=CAND

// --fusion-tile's CPU matmul tilings and the tuning cache: a matmul kernel whose columns may
// be tiled records its tiling (`fusion.kernel_tile`: rows, columns per tile; 0 = whole),
// where it came from, its tuning key (shape, prologue, threads, the row policy's tile) and
// its candidates' count (`cost_model.cpu_matmul_tiling_candidates`, the model's first).
// The cache's entry for the CPU the code is built for (`tuning-device`) replaces the
// model's tiling; an entry for another CPU does not.
// MODEL-LABEL: func.func @linear_columns
// MODEL: fusion.kernel_tile = array<i64: 0, 384>
// MODEL-SAME: fusion.kernel_tile_candidates = 5 : i64
// MODEL-SAME: fusion.kernel_tile_from = "cost model"
// MODEL-SAME: fusion.tile_sizes = array<i64: 0, 384, 0>
// MODEL-SAME: fusion.tune_key = "cpu_matmul m=128 n=3072 k=768 el=32b prologue=0B/0flop threads=2 row_tile=32"
// The cache's tiling: 16 column tiles of 192.
// CACHE-LABEL: func.func @linear_columns
// CACHE: fusion.grid = 16
// CACHE-SAME: fusion.kernel_tile = array<i64: 0, 192>
// CACHE-SAME: fusion.kernel_tile_from = "tuned: 2100.0 us measured, the cost model's tile [0, 384] 2500.0 us"
// CACHE-SAME: fusion.tile_sizes = array<i64: 0, 192, 0>
// --tune's candidate 1: the row policy's tiles alone (32 rows, all columns).
// CAND-LABEL: func.func @linear_columns
// CAND: fusion.kernel_tile = array<i64: 32, 0>
// CAND-SAME: fusion.kernel_tile_from = "candidate 1 (--tune)"
// CAND-SAME: fusion.tile_sizes = array<i64: 32, 0, 0>
func.func @linear_columns(%a: tensor<128x768xf32>, %b: tensor<768x3072xf32>) -> tensor<128x3072xf32> {
  %r = fusion.group single (%x = %a : tensor<128x768xf32>, %y = %b : tensor<768x3072xf32>) -> tensor<128x3072xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<128x3072xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<128x3072xf32>) -> tensor<128x3072xf32>
    %m = linalg.matmul ins(%x, %y : tensor<128x768xf32>, tensor<768x3072xf32>) outs(%f : tensor<128x3072xf32>) -> tensor<128x3072xf32>
    fusion.yield %m : tensor<128x3072xf32>
  }
  return %r : tensor<128x3072xf32>
}

// -----


// -----

// A projection whose columns are split into heads (C[b, t, h, d] += A[b, t, k] * B[k, h, d],
// torch-mlir's head split propagated into the matmul): its rows are t, not h, and its
// columns h x d are tiled by whole heads (2 of 64 = 128 columns), never inside a head.
// Before, the row policy took h for the rows and cut t into tiles of 16, each packing all
// of B (LLaMA's Q projection at 44 GFLOP/s).
// MODEL-LABEL: func.func @heads_split_projection
// MODEL: fusion.kernel_tile = array<i64: 0, 128>
// MODEL-SAME: fusion.tile_sizes = array<i64: 0, 0, 2, 0, 0>
// MODEL-SAME: fusion.tune_key = "cpu_matmul m=128 n=1024 k=1024 el=32b prologue=0B/0flop threads=2 row_tile=32 column_quantum=64"
func.func @heads_split_projection(%a: tensor<1x128x1024xf32>, %b: tensor<1024x16x64xf32>) -> tensor<1x128x16x64xf32> {
  %r = fusion.group epilogue (%x = %a : tensor<1x128x1024xf32>, %y = %b : tensor<1024x16x64xf32>) -> tensor<1x128x16x64xf32> attributes {fusion.tile_dims = [1, 2]} {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<1x128x16x64xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x128x16x64xf32>) -> tensor<1x128x16x64xf32>
    %m = linalg.generic {indexing_maps = [affine_map<(b, t, h, d, k) -> (b, t, k)>, affine_map<(b, t, h, d, k) -> (k, h, d)>, affine_map<(b, t, h, d, k) -> (b, t, h, d)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%x, %y : tensor<1x128x1024xf32>, tensor<1024x16x64xf32>) outs(%f : tensor<1x128x16x64xf32>) {
    ^bb0(%p: f32, %q: f32, %acc: f32):
      %mul = arith.mulf %p, %q : f32
      %s = arith.addf %acc, %mul : f32
      linalg.yield %s : f32
    } -> tensor<1x128x16x64xf32>
    fusion.yield %m : tensor<1x128x16x64xf32>
  }
  return %r : tensor<1x128x16x64xf32>
}

// -----

// Not a matmul: nothing to tune, nothing recorded.
// MODEL-LABEL: func.func @not_a_matmul
// MODEL-NOT: fusion.kernel_tile
// MODEL-NOT: fusion.tune_key
// MODEL: return
// CACHE-LABEL: func.func @not_a_matmul
// CACHE-NOT: fusion.kernel_tile
// CACHE: return
func.func @not_a_matmul(%a: tensor<240x64xf32>) -> tensor<240x64xf32> {
  %r = fusion.group single (%x = %a : tensor<240x64xf32>) -> tensor<240x64xf32> {
    %e = tensor.empty() : tensor<240x64xf32>
    %y = linalg.exp ins(%x : tensor<240x64xf32>) outs(%e : tensor<240x64xf32>) -> tensor<240x64xf32>
    fusion.yield %y : tensor<240x64xf32>
  }
  return %r : tensor<240x64xf32>
}
