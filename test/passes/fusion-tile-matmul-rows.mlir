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

// -----

// Few rows and a B far larger than a core's L2 (a Linear at batch 1, seq 128: B is 9.4 MB):
// row tiles would each stream all of B from memory, so the columns are tiled instead, in
// 8 tiles of 384 (whole 32-column quanta dividing N). Each tile reads A (0.4 MB) and its
// columns of B once.
// ROWS6-LABEL: func.func @linear_columns
// ROWS6: fusion.grid = 8
// ROWS6-SAME: fusion.tile_sizes = array<i64: 0, 384, 0>
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

// A vocabulary projection (N = 50257, no 32-multiple divides it): column tiles of a ragged
// width (6272: the last tile is narrower), still far fewer reads of B than row tiles.
// ROWS6-LABEL: func.func @lm_head_ragged_columns
// ROWS6: fusion.tile_sizes = array<i64: 0, 6272, 0>
func.func @lm_head_ragged_columns(%a: tensor<128x768xf32>, %b: tensor<768x50257xf32>) -> tensor<128x50257xf32> {
  %r = fusion.group single (%x = %a : tensor<128x768xf32>, %y = %b : tensor<768x50257xf32>) -> tensor<128x50257xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<128x50257xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<128x50257xf32>) -> tensor<128x50257xf32>
    %m = linalg.matmul ins(%x, %y : tensor<128x768xf32>, tensor<768x50257xf32>) outs(%f : tensor<128x50257xf32>) -> tensor<128x50257xf32>
    fusion.yield %m : tensor<128x50257xf32>
  }
  return %r : tensor<128x50257xf32>
}

// -----

// An elementwise prologue on A (GPT-2's GELU before its 3072 -> 768 projection): a column
// tile recomputes its rows of the GELU and keeps them, and all 128 rows of it (1.5 MB) do
// not fit a core's L2: rows and columns are both tiled (64 rows x 192 columns, 8 tiles),
// B read twice instead of four times.
// ROWS6-LABEL: func.func @prologue_rows_and_columns
// ROWS6: fusion.tile_sizes = array<i64: 64, 192, 0>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @prologue_rows_and_columns(%a: tensor<128x3072xf32>, %b: tensor<3072x768xf32>) -> tensor<128x768xf32> {
  %r = fusion.group epilogue (%x = %a : tensor<128x3072xf32>, %y = %b : tensor<3072x768xf32>) -> tensor<128x768xf32> {
    %zero = arith.constant 0.0 : f32
    %ea = tensor.empty() : tensor<128x3072xf32>
    %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<128x3072xf32>) outs(%ea : tensor<128x3072xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.tanh %in : f32
      %p = arith.mulf %in, %t : f32
      linalg.yield %p : f32
    } -> tensor<128x3072xf32>
    %e = tensor.empty() : tensor<128x768xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<128x768xf32>) -> tensor<128x768xf32>
    %m = linalg.matmul ins(%g, %y : tensor<128x3072xf32>, tensor<3072x768xf32>) outs(%f : tensor<128x768xf32>) -> tensor<128x768xf32>
    fusion.yield %m : tensor<128x768xf32>
  }
  return %r : tensor<128x768xf32>
}

// -----

// Not with a reduction in front of the matmul (a column tile would recompute it whole):
// the rows stay the tiles, though B is large.
// ROWS6-LABEL: func.func @reduction_prologue_keeps_rows
// ROWS6: fusion.tile_sizes = array<i64: 32, 0, 0>
#id = affine_map<(d0, d1) -> (d0, d1)>
#rows = affine_map<(d0, d1) -> (d0)>
func.func @reduction_prologue_keeps_rows(%a: tensor<128x768xf32>, %b: tensor<768x3072xf32>) -> tensor<128x3072xf32> {
  %r = fusion.group epilogue (%x = %a : tensor<128x768xf32>, %y = %b : tensor<768x3072xf32>) -> tensor<128x3072xf32> {
    %zero = arith.constant 0.0 : f32
    %es = tensor.empty() : tensor<128xf32>
    %fs = linalg.fill ins(%zero : f32) outs(%es : tensor<128xf32>) -> tensor<128xf32>
    %s = linalg.generic {indexing_maps = [#id, #rows], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<128x768xf32>) outs(%fs : tensor<128xf32>) {
    ^bb0(%in: f32, %out: f32):
      %p = arith.addf %in, %out : f32
      linalg.yield %p : f32
    } -> tensor<128xf32>
    %ea = tensor.empty() : tensor<128x768xf32>
    %n = linalg.generic {indexing_maps = [#id, #rows, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %s : tensor<128x768xf32>, tensor<128xf32>) outs(%ea : tensor<128x768xf32>) {
    ^bb0(%in: f32, %t: f32, %out: f32):
      %p = arith.mulf %in, %t : f32
      linalg.yield %p : f32
    } -> tensor<128x768xf32>
    %e = tensor.empty() : tensor<128x3072xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<128x3072xf32>) -> tensor<128x3072xf32>
    %m = linalg.matmul ins(%n, %y : tensor<128x768xf32>, tensor<768x3072xf32>) outs(%f : tensor<128x3072xf32>) -> tensor<128x3072xf32>
    fusion.yield %m : tensor<128x3072xf32>
  }
  return %r : tensor<128x3072xf32>
}

// -----

// A capacity bound (`fusion.max_tile_rows`, as --fusion-capacity leaves it) on a matmul the
// policy tiles by rows and columns ([512, 256] for 1024^3 with B over a core's L2): the tile
// shrinks by whole microkernel blocks, rows first to a divisor of M (32: 8192 points, under
// 10485), and keeps its 256 columns. It must not shrink the columns to a width under one
// 32-column block (the generic shrink gave [512, 20]: all scalar remainder, 9 GFLOP/s).
// ROWS6-LABEL: func.func @matmul_capacity
// ROWS6: fusion.tile_sizes = array<i64: 32, 256, 0>
func.func @matmul_capacity(%a: tensor<1024x1024xf32>, %b: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %r = fusion.group single (%x = %a : tensor<1024x1024xf32>, %y = %b : tensor<1024x1024xf32>) -> tensor<1024x1024xf32> attributes {fusion.max_tile_rows = 10485 : i64} {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<1024x1024xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    %m = linalg.matmul ins(%x, %y : tensor<1024x1024xf32>, tensor<1024x1024xf32>) outs(%f : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    fusion.yield %m : tensor<1024x1024xf32>
  }
  return %r : tensor<1024x1024xf32>
}
