// RUN: fusec-opt %s '--fusion-tile{device=nvidia-h200,fit=true}' --canonicalize --cse '--fusion-place{device=h200}' '--fusion-capacity{device=h200}' --split-input-file | filecheck %s --check-prefix=GPU
// RUN: fusec-opt %s '--fusion-tile{threads=4,min-tile-kb=1,max-tile-kb=4096,fit=true}' --canonicalize --cse --fusion-place --fusion-capacity --split-input-file | filecheck %s --check-prefix=CPU

// Acting on capacity (`--fusion-tile{fit=true}`): a group whose tile would not fit the
// device is re-tiled with fewer rows, or split, and the reason is recorded on the result.

// softmax's tail over rows of 65536 fp32: exp's row (256 KB) must stay on chip between the
// sum and the division.
// On the H200 the row stays in its block's registers (each thread keeps and reads back its
// own elements): 65536 fp32 over the 1024 threads of the row's block are 64 registers per
// value, about 96 per thread, 98304 per block > 64K per SM: the block could not launch. One
// row per block is already the least: the group is split, one kernel per op (the fill with
// its sum), the row through global memory; every part fits.
// GPU-LABEL: func.func @row_too_long
// GPU: fusion.group single
// GPU-SAME: fusion.capacity = "fits"
// GPU-SAME: fusion.split = "registers per block: about 98304 > 65536 per SM (1024 threads) with 1 row per tile on nvidia-h200, and no fewer rows fit: split into one kernel per op
// GPU: math.exp
// GPU: fusion.group single
// GPU-SAME: fusion.capacity = "fits"
// GPU-SAME: fusion.split = "registers per block
// GPU: arith.addf
// GPU: fusion.group single
// GPU-SAME: fusion.capacity = "fits"
// GPU-SAME: fusion.split = "registers per block
// GPU: arith.divf
// GPU-NOT: fusion.group
// GPU: return
// On the CPU one row per tile (256 KB kept) fits a core's L2: unchanged.
// CPU-LABEL: func.func @row_too_long
// CPU: fusion.group reduction
// CPU-NOT: fusion.split
// CPU-NOT: fusion.retiled
// CPU-SAME: fusion.capacity = "fits"
// CPU-NOT: fusion.group
// CPU: return
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @row_too_long(%x: tensor<4x65536xf32>) -> tensor<4x65536xf32> {
  %r = fusion.group reduction (%a = %x : tensor<4x65536xf32>) -> tensor<4x65536xf32> {
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<4xf32>
    %e2 = tensor.empty() : tensor<4x65536xf32>
    %exp = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<4x65536xf32>) outs(%e2 : tensor<4x65536xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<4x65536xf32>
    %fs = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
    %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
        ins(%exp : tensor<4x65536xf32>) outs(%fs : tensor<4xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<4xf32>
    %d = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
        ins(%exp, %s : tensor<4x65536xf32>, tensor<4xf32>) outs(%e2 : tensor<4x65536xf32>) {
    ^bb0(%in: f32, %sum: f32, %out: f32):
      %q = arith.divf %in, %sum : f32
      linalg.yield %q : f32
    } -> tensor<4x65536xf32>
    fusion.yield %d : tensor<4x65536xf32>
  }
  return %r : tensor<4x65536xf32>
}


// -----

// 64 such rows: the CPU policy (max-tile-kb=4096) puts four rows in a tile, 1 MB kept, just
// over a core's L2: three fit, and the group keeps its one kernel with 3 rows per tile.
// CPU-LABEL: func.func @rows_over_l2
// CPU: fusion.group reduction
// CPU-SAME: fusion.capacity = "fits"
// CPU-SAME: fusion.grid = 22
// CPU-SAME: fusion.max_tile_rows = 3
// CPU-SAME: fusion.retiled = "on-chip bytes per tile (L2 per core): 1048592 B > 1048576 B with 4 rows per tile on cpu: re-tiled to 3"
// CPU-SAME: fusion.tile_sizes = array<i64: 3, 0>
// CPU-NOT: fusion.group
// CPU: return
// GPU-LABEL: func.func @rows_over_l2
// GPU-COUNT-3: fusion.split = "registers per block: about 98304 > 65536 per SM (1024 threads) with 1 row per tile
// GPU: return
#id3 = affine_map<(d0, d1) -> (d0, d1)>
#row3 = affine_map<(d0, d1) -> (d0)>
func.func @rows_over_l2(%x: tensor<64x65536xf32>) -> tensor<64x65536xf32> {
  %r = fusion.group reduction (%a = %x : tensor<64x65536xf32>) -> tensor<64x65536xf32> {
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<64xf32>
    %e2 = tensor.empty() : tensor<64x65536xf32>
    %exp = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<64x65536xf32>) outs(%e2 : tensor<64x65536xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<64x65536xf32>
    %fs = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64xf32>) -> tensor<64xf32>
    %s = linalg.generic {indexing_maps = [#id3, #row3], iterator_types = ["parallel", "reduction"]}
        ins(%exp : tensor<64x65536xf32>) outs(%fs : tensor<64xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<64xf32>
    %d = linalg.generic {indexing_maps = [#id3, #row3, #id3], iterator_types = ["parallel", "parallel"]}
        ins(%exp, %s : tensor<64x65536xf32>, tensor<64xf32>) outs(%e2 : tensor<64x65536xf32>) {
    ^bb0(%in: f32, %sum: f32, %out: f32):
      %q = arith.divf %in, %sum : f32
      linalg.yield %q : f32
    } -> tensor<64x65536xf32>
    fusion.yield %d : tensor<64x65536xf32>
  }
  return %r : tensor<64x65536xf32>
}

// -----

// The same over rows of 1024: every tile fits on both devices, and nothing changes.
// GPU-LABEL: func.func @fits
// GPU: fusion.group reduction
// GPU-NOT: fusion.split
// GPU-NOT: fusion.retiled
// GPU-SAME: fusion.capacity = "fits"
// GPU-SAME: fusion.tile_sizes = array<i64: 1, 0>
// GPU-NOT: fusion.group
// GPU: return
// CPU-LABEL: func.func @fits
// CPU: fusion.group reduction
// CPU-NOT: fusion.split
// CPU-NOT: fusion.retiled
// CPU-SAME: fusion.capacity = "fits"
// CPU-NOT: fusion.group
// CPU: return
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row2 = affine_map<(d0, d1) -> (d0)>
func.func @fits(%x: tensor<64x1024xf32>) -> tensor<64x1024xf32> {
  %r = fusion.group reduction (%a = %x : tensor<64x1024xf32>) -> tensor<64x1024xf32> {
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<64xf32>
    %e2 = tensor.empty() : tensor<64x1024xf32>
    %exp = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<64x1024xf32>) outs(%e2 : tensor<64x1024xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<64x1024xf32>
    %fs = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64xf32>) -> tensor<64xf32>
    %s = linalg.generic {indexing_maps = [#id2, #row2], iterator_types = ["parallel", "reduction"]}
        ins(%exp : tensor<64x1024xf32>) outs(%fs : tensor<64xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<64xf32>
    %d = linalg.generic {indexing_maps = [#id2, #row2, #id2], iterator_types = ["parallel", "parallel"]}
        ins(%exp, %s : tensor<64x1024xf32>, tensor<64xf32>) outs(%e2 : tensor<64x1024xf32>) {
    ^bb0(%in: f32, %sum: f32, %out: f32):
      %q = arith.divf %in, %sum : f32
      linalg.yield %q : f32
    } -> tensor<64x1024xf32>
    fusion.yield %d : tensor<64x1024xf32>
  }
  return %r : tensor<64x1024xf32>
}

// -----

// A plain matmul 4096 x 1024 x 1024 on the host (B's tile, K x columns, is no tile the core
// keeps): the microkernel packs it one depth block by column block at a time, each element
// once per tile (place.packed_operand: `global`, streamed), so it does not count against
// the L2. The A tile does (re-read once per column block): 256 rows of 1024 fit. Counted
// as kept, B's 2 MB made the fit cut the rows to 8 (each tile re-packing 2 MB of B for 8
// rows: 78 GFLOP/s against 120 in 256-row tiles, one thread, 2026-12-05).
// CPU-LABEL: func.func @matmul_b_streamed
// CPU: fusion.capacity = "fits"
// CPU-SAME: fusion.tile_sizes = array<i64: 256, 512, 0>
// CPU: tensor.extract_slice %{{.+}}[%{{.+}}, 0] [256, 1024] [1, 1] {fusion.mem = #fusion.mem<register>}
// CPU: tensor.extract_slice %{{.+}}[0, %{{.+}}] [1024, 512] [1, 1] {fusion.mem = #fusion.mem<global>}
func.func @matmul_b_streamed(%a: tensor<4096x1024xf32>, %b: tensor<1024x1024xf32>) -> tensor<4096x1024xf32> {
  %r = fusion.group single (%x = %a : tensor<4096x1024xf32>, %y = %b : tensor<1024x1024xf32>) -> tensor<4096x1024xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4096x1024xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4096x1024xf32>) -> tensor<4096x1024xf32>
    %m = linalg.matmul ins(%x, %y : tensor<4096x1024xf32>, tensor<1024x1024xf32>) outs(%f : tensor<4096x1024xf32>) -> tensor<4096x1024xf32>
    fusion.yield %m : tensor<4096x1024xf32>
  }
  return %r : tensor<4096x1024xf32>
}
