// RUN: fusec-opt %s --fusion-normalise-kernels --split-input-file | filecheck %s
// RUN: fusec-opt %s --fusion-normalise-kernels '--fusion-tile{device=nvidia-h200}' --split-input-file | filecheck %s --check-prefix=TILE
// RUN: fusec-opt %s '--fusion-tile{device=nvidia-h200}' --split-input-file | filecheck %s --check-prefix=RAW

// Each kernel group normalised on its own (target cuda's `tiled` stage) so that tile-and-fuse
// is not cut: softmax's row max, reduced to tensor<8xf32> and expanded to tensor<8x1xf32> for
// its consumer, becomes a reduction into tensor<8x1xf32> read directly.
// CHECK-LABEL: func.func @softmax_max
// CHECK: %[[MAX:[0-9]+]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]{{.*}}outs(%{{.+}} : tensor<8x1xf32>)
// CHECK-NOT: tensor.expand_shape %[[MAX]]
// CHECK: linalg.generic {{.*}}ins(%arg1, %[[MAX]] : tensor<8x16xf32>, tensor<8x1xf32>)
// Then the whole group is one tile loop (one row per block); without the normalisation the
// tile stops at the reshape and the group is built untiled, the reason recorded.
// TILE-LABEL: func.func @softmax_max
// TILE-SAME: {
// TILE-NOT: fusion.untiled
// TILE: fusion.tile_sizes = array<i64: 1, 0>
// TILE: scf.forall
// RAW-LABEL: func.func @softmax_max
// RAW: fusion.untiled = "'linalg.generic' is computed outside the tile loop (a producer the tile did not fuse)"
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#keep = affine_map<(d0, d1) -> (d0, 0)>
func.func @softmax_max(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %r = fusion.group vertical (%a = %x : tensor<8x16xf32>) -> tensor<8x16xf32> {
    %ninf = arith.constant 0xFF800000 : f32
    %e1 = tensor.empty() : tensor<8xf32>
    %e2 = tensor.empty() : tensor<8x16xf32>
    %f = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
    %m = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
        ins(%a : tensor<8x16xf32>) outs(%f : tensor<8xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.maximumf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<8xf32>
    %mx = tensor.expand_shape %m [[0, 1]] output_shape [8, 1] : tensor<8xf32> into tensor<8x1xf32>
    %s = linalg.generic {indexing_maps = [#id, #keep, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a, %mx : tensor<8x16xf32>, tensor<8x1xf32>) outs(%e2 : tensor<8x16xf32>) {
    ^bb0(%in: f32, %mm: f32, %out: f32):
      %t = arith.subf %in, %mm : f32
      linalg.yield %t : f32
    } -> tensor<8x16xf32>
    %y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%s : tensor<8x16xf32>) outs(%e2 : tensor<8x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<8x16xf32>
    fusion.yield %y : tensor<8x16xf32>
  }
  return %r : tensor<8x16xf32>
}

// -----

// A computed value expanded with a size-1 dim for a keepdim reduction (what reshape
// propagation leaves in attention's softmax): the reduction reads the value itself, the
// size-1 dim dropped from its indexing map (`fold_unit_expansions`); nothing is left between
// the producer and its two consumers.
// CHECK-LABEL: func.func @unit_expand
// CHECK: %[[SQ:[0-9]+]] = linalg.generic
// CHECK-NOT: tensor.expand_shape
// CHECK: linalg.generic {indexing_maps = [#{{.+}}, #{{.+}}], iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[SQ]] : tensor<4x16xf32>) outs(%{{.+}} : tensor<4x1xf32>)
// TILE-LABEL: func.func @unit_expand
// TILE-NOT: fusion.untiled
// TILE: scf.forall
#id = affine_map<(d0, d1) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#red3 = affine_map<(d0, d1, d2) -> (d0, d1)>
#keep = affine_map<(d0, d1) -> (d0, 0)>
func.func @unit_expand(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %r = fusion.group vertical (%a = %x : tensor<4x16xf32>) -> tensor<4x16xf32> {
    %zero = arith.constant 0.0 : f32
    %e2 = tensor.empty() : tensor<4x16xf32>
    %e3 = tensor.empty() : tensor<4x1xf32>
    %s = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<4x16xf32>) outs(%e2 : tensor<4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = arith.mulf %in, %in : f32
      linalg.yield %t : f32
    } -> tensor<4x16xf32>
    %se = tensor.expand_shape %s [[0, 1], [2]] output_shape [4, 1, 16] : tensor<4x16xf32> into tensor<4x1x16xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e3 : tensor<4x1xf32>) -> tensor<4x1xf32>
    %sum = linalg.generic {indexing_maps = [#id3, #red3], iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%se : tensor<4x1x16xf32>) outs(%f : tensor<4x1xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<4x1xf32>
    %y = linalg.generic {indexing_maps = [#id, #keep, #id], iterator_types = ["parallel", "parallel"]}
        ins(%s, %sum : tensor<4x16xf32>, tensor<4x1xf32>) outs(%e2 : tensor<4x16xf32>) {
    ^bb0(%in: f32, %m: f32, %out: f32):
      %t = arith.divf %in, %m : f32
      linalg.yield %t : f32
    } -> tensor<4x16xf32>
    fusion.yield %y : tensor<4x16xf32>
  }
  return %r : tensor<4x16xf32>
}

// -----

// A cuBLASLt call (`fusion.path`): its body is what the library call is read from, never
// normalised.
// CHECK-LABEL: func.func @library
// CHECK: fusion.path = "gemm"
// CHECK: tensor.expand_shape
// CHECK-SAME: tensor<4x16xf32> into tensor<4x1x16xf32>
#id = affine_map<(d0, d1) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#red3 = affine_map<(d0, d1, d2) -> (d0, d1)>
#keep = affine_map<(d0, d1) -> (d0, 0)>
func.func @library(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %r = fusion.group vertical (%a = %x : tensor<4x16xf32>) -> tensor<4x16xf32> attributes {fusion.path = "gemm"} {
    %zero = arith.constant 0.0 : f32
    %e2 = tensor.empty() : tensor<4x16xf32>
    %e3 = tensor.empty() : tensor<4x1xf32>
    %s = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<4x16xf32>) outs(%e2 : tensor<4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = arith.mulf %in, %in : f32
      linalg.yield %t : f32
    } -> tensor<4x16xf32>
    %se = tensor.expand_shape %s [[0, 1], [2]] output_shape [4, 1, 16] : tensor<4x16xf32> into tensor<4x1x16xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e3 : tensor<4x1xf32>) -> tensor<4x1xf32>
    %sum = linalg.generic {indexing_maps = [#id3, #red3], iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%se : tensor<4x1x16xf32>) outs(%f : tensor<4x1xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<4x1xf32>
    %y = linalg.generic {indexing_maps = [#id, #keep, #id], iterator_types = ["parallel", "parallel"]}
        ins(%s, %sum : tensor<4x16xf32>, tensor<4x1xf32>) outs(%e2 : tensor<4x16xf32>) {
    ^bb0(%in: f32, %m: f32, %out: f32):
      %t = arith.divf %in, %m : f32
      linalg.yield %t : f32
    } -> tensor<4x16xf32>
    fusion.yield %y : tensor<4x16xf32>
  }
  return %r : tensor<4x16xf32>
}
