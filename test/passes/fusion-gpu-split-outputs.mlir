// RUN: fusec-opt %s --fusion-gpu-split-outputs | filecheck %s

// A two-output group neither group-level emitter takes (it transposes, so the fast emitter
// refuses it; its outputs differ in shape, so the data-movement kernels do): no single tile
// loop, so one GPU thread would run it; split, one group per output, the shared transpose +
// add cloned into both. The single-output group after it is left alone.
// CHECK-LABEL: func.func @main
// CHECK: %[[A:.+]] = fusion.group vertical (%{{.+}} = %arg0 : tensor<64x32xf32>) -> tensor<32x64xf32>
// CHECK-SAME: fusion.split = "output"
// CHECK: linalg.transpose
// CHECK: %[[B:.+]] = fusion.group vertical (%{{.+}} = %arg0 : tensor<64x32xf32>) -> tensor<2048xf32>
// CHECK-SAME: fusion.split = "output"
// CHECK: linalg.transpose
// CHECK: %[[C:.+]] = fusion.group vertical (%{{.+}} = %[[A]] : tensor<32x64xf32>) -> tensor<32x64xf32> {
// CHECK-NOT: fusion.split
// CHECK: return %[[B]], %[[C]]
#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%arg0: tensor<64x32xf32>) -> (tensor<2048xf32>, tensor<32x64xf32>) {
    %0:2 = fusion.group vertical (%arg1 = %arg0 : tensor<64x32xf32>) -> (tensor<32x64xf32>, tensor<2048xf32>) {
      %cst = arith.constant 2.000000e+00 : f32
      %cst_0 = arith.constant 1.000000e+00 : f32
      %2 = tensor.empty() : tensor<32x64xf32>
      %transposed = linalg.transpose ins(%arg1 : tensor<64x32xf32>) outs(%2 : tensor<32x64xf32>) permutation = [1, 0] 
      %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%transposed : tensor<32x64xf32>) outs(%2 : tensor<32x64xf32>) {
      ^bb0(%in: f32, %out: f32):
        %5 = arith.addf %in, %cst_0 : f32
        linalg.yield %5 : f32
      } -> tensor<32x64xf32>
      %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%3 : tensor<32x64xf32>) outs(%2 : tensor<32x64xf32>) {
      ^bb0(%in: f32, %out: f32):
        %5 = arith.mulf %in, %cst : f32
        linalg.yield %5 : f32
      } -> tensor<32x64xf32>
      %c = tensor.collapse_shape %4 [[0, 1]] : tensor<32x64xf32> into tensor<2048xf32>
      fusion.yield %transposed, %c : tensor<32x64xf32>, tensor<2048xf32>
    }
    %1 = fusion.group vertical (%arg1 = %0#0 : tensor<32x64xf32>) -> tensor<32x64xf32> {
      %cst = arith.constant 1.000000e+00 : f32
      %2 = tensor.empty() : tensor<32x64xf32>
      %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg1 : tensor<32x64xf32>) outs(%2 : tensor<32x64xf32>) {
      ^bb0(%in: f32, %out: f32):
        %5 = arith.addf %in, %cst : f32
        linalg.yield %5 : f32
      } -> tensor<32x64xf32>
      %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%3 : tensor<32x64xf32>) outs(%2 : tensor<32x64xf32>) {
      ^bb0(%in: f32, %out: f32):
        %5 = math.exp %in : f32
        linalg.yield %5 : f32
      } -> tensor<32x64xf32>
      fusion.yield %4 : tensor<32x64xf32>
    }
    return %0#1, %1 : tensor<2048xf32>, tensor<32x64xf32>
  }
}
