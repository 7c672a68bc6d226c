// RUN: fusec-opt %s '--fusion-tile{threads=4,min-tile-kb=1}' --canonicalize --cse '--fusion-place{device=h200}' '--fusion-capacity{device=h200}' --split-input-file | filecheck %s --check-prefix=GPU
// RUN: fusec-opt %s '--fusion-tile{threads=4,min-tile-kb=1}' --canonicalize --cse --fusion-place --fusion-capacity --split-input-file | filecheck %s --check-prefix=CPU

// Capacity of a tile against the device: shared memory per block (227 KB with the opt-in on
// the H200, 48 KB without), registers per thread (255), occupancy; on the CPU the per-core L2.

// A row too long to keep on chip: one row per tile already, and exp's row (256 KB) must
// stay between the sum and the division. On the H200 each thread keeps and reads back its
// own elements of the row (registers, not shared memory: only the sum is exchanged): 65536
// fp32 over the tile's 256 threads are 256 registers per thread. No smaller tile helps: the
// refusal says why and what would (the row over more threads, or two kernels).
// GPU-LABEL: func.func @row_too_long
// GPU: fusion.capacity = "over: registers per thread: about 281 > 255; refused: one row needs more registers per thread than nvidia-h200 has; needs the row spread over more threads, or a split into two kernels"
// GPU-SAME: fusion.placement = {global = 1048576 : i64, on_chip = 4 : i64, register = 2 : i64, shared = 4 : i64}
// GPU-SAME: fusion.registers = 281 : i64
// GPU-SAME: fusion.threads = 256 : i64
// GPU-SAME: fusion.tile_sizes = array<i64: 1, 0>
// On the CPU the same 256 KB row fits a core's L2.
// CPU-LABEL: func.func @row_too_long
// CPU: fusion.capacity = "fits"
// CPU-NOT: fusion.registers
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

// Eight 32 KB rows per tile, in registers: over 255 registers per thread, but seven rows fit:
// re-tile.
// GPU-LABEL: func.func @rows_too_many
// GPU: fusion.capacity = "over: registers per thread: about 281 > 255; re-tile: at most 7 of the tile's 8 rows fit"
// GPU-SAME: fusion.tile_sizes = array<i64: 8, 0>
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @rows_too_many(%x: tensor<128x8192xf32>) -> tensor<128x8192xf32> {
  %r = fusion.group reduction (%a = %x : tensor<128x8192xf32>) -> tensor<128x8192xf32> {
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<128xf32>
    %e2 = tensor.empty() : tensor<128x8192xf32>
    %exp = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<128x8192xf32>) outs(%e2 : tensor<128x8192xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<128x8192xf32>
    %fs = linalg.fill ins(%zero : f32) outs(%e1 : tensor<128xf32>) -> tensor<128xf32>
    %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
        ins(%exp : tensor<128x8192xf32>) outs(%fs : tensor<128xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<128xf32>
    %d = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
        ins(%exp, %s : tensor<128x8192xf32>, tensor<128xf32>) outs(%e2 : tensor<128x8192xf32>) {
    ^bb0(%in: f32, %sum: f32, %out: f32):
      %q = arith.divf %in, %sum : f32
      linalg.yield %q : f32
    } -> tensor<128x8192xf32>
    fusion.yield %d : tensor<128x8192xf32>
  }
  return %r : tensor<128x8192xf32>
}

// -----

// Four 16 KB rows per tile, each thread's share in its registers, the sums (16 B) exchanged
// through shared memory: fits.
// GPU-LABEL: func.func @opt_in
// GPU: fusion.capacity = "fits"
// GPU-SAME: fusion.placement = {global = 1048576 : i64, on_chip = 16 : i64, register = 2 : i64, shared = 16 : i64}
// CPU-LABEL: func.func @opt_in
// CPU: fusion.capacity = "fits"
// CPU-SAME: fusion.occupancy = 1.000000e+00 : f64
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @opt_in(%x: tensor<64x4096xf32>) -> tensor<64x4096xf32> {
  %r = fusion.group reduction (%a = %x : tensor<64x4096xf32>) -> tensor<64x4096xf32> {
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<64xf32>
    %e2 = tensor.empty() : tensor<64x4096xf32>
    %exp = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<64x4096xf32>) outs(%e2 : tensor<64x4096xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<64x4096xf32>
    %fs = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64xf32>) -> tensor<64xf32>
    %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
        ins(%exp : tensor<64x4096xf32>) outs(%fs : tensor<64xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<64xf32>
    %d = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
        ins(%exp, %s : tensor<64x4096xf32>, tensor<64xf32>) outs(%e2 : tensor<64x4096xf32>) {
    ^bb0(%in: f32, %sum: f32, %out: f32):
      %q = arith.divf %in, %sum : f32
      linalg.yield %q : f32
    } -> tensor<64x4096xf32>
    fusion.yield %d : tensor<64x4096xf32>
  }
  return %r : tensor<64x4096xf32>
}

// -----

// A 2 MB row exceeds a core's L2 (1 MB) on the host; refused, with the reason.
// CPU-LABEL: func.func @cpu_row_too_long
// CPU: fusion.capacity = "over: on-chip bytes per tile (L2 per core): 2097156 B > 1048576 B; refused: one row keeps 2097156 B on chip
// CPU-SAME: fusion.placement = {global = 4194304 : i64, on_chip = 2097156 : i64, register = 3 : i64, shared = 0 : i64}
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @cpu_row_too_long(%x: tensor<2x524288xf32>) -> tensor<2x524288xf32> {
  %r = fusion.group reduction (%a = %x : tensor<2x524288xf32>) -> tensor<2x524288xf32> {
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<2xf32>
    %e2 = tensor.empty() : tensor<2x524288xf32>
    %exp = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<2x524288xf32>) outs(%e2 : tensor<2x524288xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<2x524288xf32>
    %fs = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2xf32>) -> tensor<2xf32>
    %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
        ins(%exp : tensor<2x524288xf32>) outs(%fs : tensor<2xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<2xf32>
    %d = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
        ins(%exp, %s : tensor<2x524288xf32>, tensor<2xf32>) outs(%e2 : tensor<2x524288xf32>) {
    ^bb0(%in: f32, %sum: f32, %out: f32):
      %q = arith.divf %in, %sum : f32
      linalg.yield %q : f32
    } -> tensor<2x524288xf32>
    fusion.yield %d : tensor<2x524288xf32>
  }
  return %r : tensor<2x524288xf32>
}

// -----

// A per-element chain over 16 rows of 4096 per tile: exp's values, spread over 256 threads,
// need about 280 registers per thread (> 255); 14 rows would fit: re-tile.
// GPU-LABEL: func.func @registers
// GPU: fusion.capacity = "over: registers per thread: about 280 > 255; re-tile: at most 14 of the tile's 16 rows fit"
// GPU-SAME: fusion.placement = {global = 8388608 : i64, on_chip = 0 : i64, register = 1 : i64, shared = 0 : i64}
// GPU-SAME: fusion.registers = 280 : i64
// CPU-LABEL: func.func @registers
// CPU: fusion.capacity = "fits"
func.func @registers(%x: tensor<512x4096xf32>) -> tensor<512x4096xf32> {
  %r = fusion.group vertical (%a = %x : tensor<512x4096xf32>) -> tensor<512x4096xf32> {
    %e = tensor.empty() : tensor<512x4096xf32>
    %y = linalg.exp ins(%a : tensor<512x4096xf32>) outs(%e : tensor<512x4096xf32>) -> tensor<512x4096xf32>
    %z = linalg.mul ins(%y, %y : tensor<512x4096xf32>, tensor<512x4096xf32>) outs(%e : tensor<512x4096xf32>) -> tensor<512x4096xf32>
    fusion.yield %z : tensor<512x4096xf32>
  }
  return %r : tensor<512x4096xf32>
}

// -----

// A contraction's tile shares its operand tiles between the block's threads: shared memory.
// 32 rows of A (8192 fp32 each: 1 MB) are over 227 KB, seven rows fit: re-tile.
// GPU-LABEL: func.func @contraction
// GPU: fusion.capacity = "over: shared memory per block: 1048576 B > 232448 B; re-tile: at most 7 of the tile's 32 rows fit"
// GPU-SAME: fusion.placement = {global = 1024 : i64, on_chip = 1048576 : i64, register = 1 : i64, shared = 1048576 : i64}
// GPU: tensor.extract_slice {{.*}} {fusion.mem = #fusion.mem<shared>} : tensor<64x8192xf32> to tensor<32x8192xf32>
// On the CPU the tile (1 MB) fits a core's L2.
// CPU-LABEL: func.func @contraction
// CPU: fusion.capacity = "fits"
func.func @contraction(%a: tensor<64x8192xf32>, %b: tensor<8192x4xf32>) -> tensor<64x4xf32> {
  %r = fusion.group single (%x = %a : tensor<64x8192xf32>, %y = %b : tensor<8192x4xf32>) -> tensor<64x4xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<64x4xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<64x4xf32>) -> tensor<64x4xf32>
    %m = linalg.matmul ins(%x, %y : tensor<64x8192xf32>, tensor<8192x4xf32>) outs(%f : tensor<64x4xf32>) -> tensor<64x4xf32>
    fusion.yield %m : tensor<64x4xf32>
  }
  return %r : tensor<64x4xf32>
}

// -----

// 50 KB of A's rows per block: fits the H200, but only with the shared-memory opt-in (over
// 48 KB).
// GPU-LABEL: func.func @opt_in_contraction
// GPU: fusion.capacity = "fits: shared memory 51200 B > 49152 B default: needs the opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize)"
// GPU-SAME: fusion.occupancy = 2.500000e-01 : f64
// CPU-LABEL: func.func @opt_in_contraction
// CPU: fusion.capacity = "fits"
func.func @opt_in_contraction(%a: tensor<64x400xf32>, %b: tensor<400x4xf32>) -> tensor<64x4xf32> {
  %r = fusion.group single (%x = %a : tensor<64x400xf32>, %y = %b : tensor<400x4xf32>) -> tensor<64x4xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<64x4xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<64x4xf32>) -> tensor<64x4xf32>
    %m = linalg.matmul ins(%x, %y : tensor<64x400xf32>, tensor<400x4xf32>) outs(%f : tensor<64x4xf32>) -> tensor<64x4xf32>
    fusion.yield %m : tensor<64x4xf32>
  }
  return %r : tensor<64x4xf32>
}
