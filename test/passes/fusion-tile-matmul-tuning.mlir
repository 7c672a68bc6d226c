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
