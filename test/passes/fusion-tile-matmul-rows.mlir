// RUN: fusec-opt %s '--fusion-tile{threads=2,min-tile-kb=1}' --split-input-file | filecheck %s --check-prefix=ROWS6
// RUN: fusec-opt %s '--fusion-tile{threads=2,min-tile-kb=1,matmul-rows=8}' --split-input-file | filecheck %s --check-prefix=ROWS8

// `matmul-rows`: the CPU matmul microkernel's rows (`--fusion-cpu-matmul{mr}`, CpuOptions
// matmul_mr; 0: the cost model's 6), which a matmul's row tile is made of. 240 rows in 8
// tiles (2 threads x 4): 30-row tiles (5 blocks of 6) by default, 40 (5 blocks of 8) with
// matmul-rows=8.
// ROWS6-LABEL: func.func @matmul_rows
// ROWS6: fusion.tile_sizes = array<i64: 30, 0, 0>
// ROWS8-LABEL: func.func @matmul_rows
// ROWS8: fusion.tile_sizes = array<i64: 40, 0, 0>
func.func @matmul_rows(%a: tensor<240x32xf32>, %b: tensor<32x64xf32>) -> tensor<240x64xf32> {
  %r = fusion.group single (%x = %a : tensor<240x32xf32>, %y = %b : tensor<32x64xf32>) -> tensor<240x64xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<240x64xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<240x64xf32>) -> tensor<240x64xf32>
    %m = linalg.matmul ins(%x, %y : tensor<240x32xf32>, tensor<32x64xf32>) outs(%f : tensor<240x64xf32>) -> tensor<240x64xf32>
    fusion.yield %m : tensor<240x64xf32>
  }
  return %r : tensor<240x64xf32>
}

// -----

// Not a matmul: the option must not change its tiles (the policy's 30 rows in both runs).
// ROWS6-LABEL: func.func @not_a_matmul
// ROWS6: fusion.tile_sizes = array<i64: 30, 0>
// ROWS8-LABEL: func.func @not_a_matmul
// ROWS8: fusion.tile_sizes = array<i64: 30, 0>
func.func @not_a_matmul(%a: tensor<240x64xf32>) -> tensor<240x64xf32> {
  %r = fusion.group single (%x = %a : tensor<240x64xf32>) -> tensor<240x64xf32> {
    %e = tensor.empty() : tensor<240x64xf32>
    %y = linalg.exp ins(%x : tensor<240x64xf32>) outs(%e : tensor<240x64xf32>) -> tensor<240x64xf32>
    fusion.yield %y : tensor<240x64xf32>
  }
  return %r : tensor<240x64xf32>
}
