// RUN: fusec-opt %s '--fusion-tile{device=nvidia-h200}' --canonicalize --cse '--fusion-place{device=nvidia-h200}' '--fusion-capacity{device=nvidia-h200}' --split-input-file | filecheck %s

// One block's tile on the H200 (`cost_model.gpu_tile_sizes`), per kernel kind.

// Elementwise: a flat tile of 256 threads x 16 bytes (1024 fp32), innermost dim first.
// CHECK-LABEL: func.func @elementwise
// CHECK: fusion.group single
// CHECK-SAME: fusion.capacity = "fits"
// CHECK-SAME: fusion.grid = 256
// CHECK-SAME: fusion.threads = 256
// CHECK-SAME: fusion.tile_sizes = array<i64: 1, 1024>
// CHECK: scf.forall (%{{.+}}, %{{.+}}) in (64, 4)
// CHECK: linalg.generic {{.*}} ins(%{{.+}} : tensor<1x1024xf32>) {{.*}} {fusion.mem = #fusion.mem<global>}
// CHECK-NEXT: ^bb0
// CHECK-NEXT: math.exp
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @elementwise(%x: tensor<64x4096xf32>) -> tensor<64x4096xf32> {
  %r = fusion.group single (%a = %x : tensor<64x4096xf32>) -> tensor<64x4096xf32> {
    %e = tensor.empty() : tensor<64x4096xf32>
    %y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<64x4096xf32>) outs(%e : tensor<64x4096xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<64x4096xf32>
    fusion.yield %y : tensor<64x4096xf32>
  }
  return %r : tensor<64x4096xf32>
}

// -----

// A row kernel (exp, row sum, divide): one row per block, the reduced dim whole; exp's row
// is read twice (by the sum and the division): kept in shared memory.
// CHECK-LABEL: func.func @row
// CHECK: fusion.group vertical
// CHECK-SAME: fusion.capacity = "fits"
// CHECK-SAME: fusion.grid = 64
// CHECK-SAME: fusion.tile_sizes = array<i64: 1, 0>
// CHECK: scf.forall (%{{.+}}) in (64)
// CHECK: %[[EXP:[0-9]+]] = linalg.generic {{.*}} outs(%{{.+}} : tensor<1x1024xf32>) {{.*}} {fusion.mem = #fusion.mem<shared>}
// CHECK-NEXT: ^bb0
// CHECK-NEXT: math.exp
// CHECK: %[[SUM:[0-9]+]] = linalg.generic {{.*}} ins(%[[EXP]] : tensor<1x1024xf32>) {{.*}} {fusion.mem = #fusion.mem<shared>}
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}} ins(%[[EXP]], %[[SUM]] : {{.*}} {fusion.mem = #fusion.mem<global>}
// CHECK: arith.divf
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row2 = affine_map<(d0, d1) -> (d0)>
func.func @row(%x: tensor<64x1024xf32>) -> tensor<64x1024xf32> {
  %r = fusion.group vertical (%a = %x : tensor<64x1024xf32>) -> tensor<64x1024xf32> {
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

// A matmul with its bias epilogue: 128 x 128 output tiles per block, the K loop inside the
// tile; the operand tiles are reused across the tile: staged in shared memory.
// CHECK-LABEL: func.func @matmul_bias
// CHECK: fusion.group epilogue
// CHECK-SAME: fusion.grid = 4
// CHECK-SAME: fusion.tile_sizes = array<i64: 128, 128>
// CHECK: scf.forall (%{{.+}}, %{{.+}}) in (2, 2)
// CHECK: tensor.extract_slice {{.*}} {fusion.mem = #fusion.mem<shared>} : tensor<256x64xf32> to tensor<128x64xf32>
// CHECK: tensor.extract_slice {{.*}} {fusion.mem = #fusion.mem<shared>} : tensor<64x256xf32> to tensor<64x128xf32>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: linalg.generic {{.*}} outs(%{{.+}} : tensor<128x128xf32>) {{.*}} {fusion.mem = #fusion.mem<global>}
// CHECK: arith.addf
#id3 = affine_map<(d0, d1) -> (d0, d1)>
#col3 = affine_map<(d0, d1) -> (d1)>
func.func @matmul_bias(%x: tensor<256x64xf32>, %w: tensor<64x256xf32>, %b: tensor<256xf32>) -> tensor<256x256xf32> {
  %r = fusion.group epilogue (%a = %x : tensor<256x64xf32>, %bw = %w : tensor<64x256xf32>, %bb = %b : tensor<256xf32>) -> tensor<256x256xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<256x256xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<256x256xf32>) -> tensor<256x256xf32>
    %m = linalg.matmul ins(%a, %bw : tensor<256x64xf32>, tensor<64x256xf32>) outs(%z : tensor<256x256xf32>) -> tensor<256x256xf32>
    %y = linalg.generic {indexing_maps = [#id3, #col3, #id3], iterator_types = ["parallel", "parallel"]}
        ins(%m, %bb : tensor<256x256xf32>, tensor<256xf32>) outs(%e : tensor<256x256xf32>) {
    ^bb0(%in: f32, %bias: f32, %out: f32):
      %s = arith.addf %in, %bias : f32
      linalg.yield %s : f32
    } -> tensor<256x256xf32>
    fusion.yield %y : tensor<256x256xf32>
  }
  return %r : tensor<256x256xf32>
}
