// RUN: fusec-opt %s --fusion-gpu-slices-to-gathers | filecheck %s

// A static, unit-stride slice (x[:, 2:10]) becomes a gather: out[i, j] = x[i, j + 2]
// (linalg.index + tensor.extract), one element per GPU thread, its offsets recorded.
// CHECK-LABEL: func.func @main
// CHECK: fusion.group vertical
// CHECK-NOT: tensor.extract_slice
// CHECK: linalg.generic
// CHECK-SAME: fusion.slice_offsets = array<i64: 0, 2>
// CHECK: %[[I:.+]] = linalg.index 0 : index
// CHECK: %[[J:.+]] = linalg.index 1 : index
// CHECK: %[[J2:.+]] = arith.addi %[[J]], %{{.+}} : index
// CHECK: tensor.extract %{{.+}}[%[[I]], %[[J2]]] : tensor<8x16xf32>
// A strided slice (x[:, ::2]) is not rewritten.
// CHECK: fusion.group single
// CHECK: tensor.extract_slice %{{.+}}[0, 0] [8, 8] [1, 2]
// CHECK: return
#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%arg0: tensor<8x16xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
    %0 = fusion.group vertical (%arg1 = %arg0 : tensor<8x16xf32>) -> tensor<8x8xf32> {
      %cst = arith.constant 2.000000e+00 : f32
      %3 = tensor.empty() : tensor<8x8xf32>
      %extracted_slice = tensor.extract_slice %arg1[0, 2] [8, 8] [1, 1] : tensor<8x16xf32> to tensor<8x8xf32>
      %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%extracted_slice : tensor<8x8xf32>) outs(%3 : tensor<8x8xf32>) {
      ^bb0(%in: f32, %out: f32):
        %5 = arith.mulf %in, %cst : f32
        linalg.yield %5 : f32
      } -> tensor<8x8xf32>
      fusion.yield %4 : tensor<8x8xf32>
    }
    %1 = fusion.group single (%arg1 = %arg0 : tensor<8x16xf32>) -> tensor<8x8xf32> {
      %extracted_slice = tensor.extract_slice %arg1[0, 0] [8, 8] [1, 2] : tensor<8x16xf32> to tensor<8x8xf32>
      fusion.yield %extracted_slice : tensor<8x8xf32>
    }
    %2 = fusion.group single (%arg1 = %1 : tensor<8x8xf32>) -> tensor<8x8xf32> {
      %cst = arith.constant 1.000000e+00 : f32
      %3 = tensor.empty() : tensor<8x8xf32>
      %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg1 : tensor<8x8xf32>) outs(%3 : tensor<8x8xf32>) {
      ^bb0(%in: f32, %out: f32):
        %5 = arith.addf %in, %cst : f32
        linalg.yield %5 : f32
      } -> tensor<8x8xf32>
      fusion.yield %4 : tensor<8x8xf32>
    }
    return %0, %2 : tensor<8x8xf32>, tensor<8x8xf32>
  }
}
