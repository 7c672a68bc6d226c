// RUN: fusec-opt %s --fusion-gpu-unit-transposes | filecheck %s

// A transpose that only moves a size-1 dim ([1, 16, 8] -> [16, 1, 8]: batch 1) is the same
// bytes: a collapse to 1-D and an expand, no kernel of its own.
// CHECK-LABEL: func.func @main
// CHECK: fusion.group vertical
// CHECK-NOT: linalg.transpose
// CHECK: tensor.collapse_shape %{{.+}} {{\[\[}}0, 1, 2]] : tensor<1x16x8xf32> into tensor<128xf32>
// CHECK: tensor.expand_shape %{{.+}} {{\[\[}}0, 1, 2]] output_shape [16, 1, 8] : tensor<128xf32> into tensor<16x1x8xf32>
// A transpose that moves data ([4, 16] -> [16, 4]) must stay a transpose.
// CHECK: fusion.group vertical
// CHECK: linalg.transpose ins(%{{.+}} : tensor<4x16xf32>) outs(%{{.+}} : tensor<16x4xf32>) permutation = [1, 0]
// CHECK: return
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%arg0: tensor<1x16x8xf32>, %arg1: tensor<4x16xf32>) -> (tensor<16x1x8xf32>, tensor<16x4xf32>) {
    %0 = fusion.group vertical (%arg2 = %arg0 : tensor<1x16x8xf32>) -> tensor<16x1x8xf32> {
      %cst = arith.constant 2.000000e+00 : f32
      %2 = tensor.empty() : tensor<16x1x8xf32>
      %transposed = linalg.transpose ins(%arg2 : tensor<1x16x8xf32>) outs(%2 : tensor<16x1x8xf32>) permutation = [1, 0, 2] 
      %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%transposed : tensor<16x1x8xf32>) outs(%2 : tensor<16x1x8xf32>) {
      ^bb0(%in: f32, %out: f32):
        %4 = arith.mulf %in, %cst : f32
        linalg.yield %4 : f32
      } -> tensor<16x1x8xf32>
      fusion.yield %3 : tensor<16x1x8xf32>
    }
    %1 = fusion.group vertical (%arg2 = %arg1 : tensor<4x16xf32>) -> tensor<16x4xf32> {
      %cst = arith.constant 2.000000e+00 : f32
      %2 = tensor.empty() : tensor<16x4xf32>
      %transposed = linalg.transpose ins(%arg2 : tensor<4x16xf32>) outs(%2 : tensor<16x4xf32>) permutation = [1, 0] 
      %3 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%transposed : tensor<16x4xf32>) outs(%2 : tensor<16x4xf32>) {
      ^bb0(%in: f32, %out: f32):
        %4 = arith.mulf %in, %cst : f32
        linalg.yield %4 : f32
      } -> tensor<16x4xf32>
      fusion.yield %3 : tensor<16x4xf32>
    }
    return %0, %1 : tensor<16x1x8xf32>, tensor<16x4xf32>
  }
}
