// RUN: fusec-opt %s --fusion-propagate-reshapes --canonicalize --split-input-file | filecheck %s

// torch's linear on a 3-D activation: collapse -> matmul -> expand, elementwise ops on the
// 3-D side. The collapse moves up through the elementwise chain to the group input and the
// expand down through the residual add to the yield: every reshape ends at an edge.
// CHECK-LABEL: func.func @linear_3d
// CHECK: fusion.group epilogue (%[[X:.+]] = %arg0 : tensor<4x8x16xf32>, %[[W:.+]] = %arg1 : tensor<16x32xf32>, %[[R:.+]] = %arg2 : tensor<4x8x32xf32>)
// CHECK: %[[XC:.+]] = tensor.collapse_shape %[[X]] {{.*}} into tensor<32x16xf32>
// CHECK: %[[E:.+]] = linalg.exp ins(%[[XC]] : tensor<32x16xf32>)
// CHECK: %[[G:.+]] = linalg.generic {{.*}} ins(%[[E]] : tensor<32x16xf32>)
// CHECK: %[[M:.+]] = linalg.matmul ins(%[[G]], %[[W]]
// CHECK: %[[RC:.+]] = tensor.collapse_shape %[[R]] {{.*}} into tensor<32x32xf32>
// CHECK: %[[Y:.+]] = linalg.generic {{.*}} ins(%[[M]], %[[RC]] : tensor<32x32xf32>, tensor<32x32xf32>)
// CHECK: %[[YE:.+]] = tensor.expand_shape %[[Y]]
// CHECK: fusion.yield %[[YE]] : tensor<4x8x32xf32>
func.func @linear_3d(%x: tensor<4x8x16xf32>, %w: tensor<16x32xf32>, %r: tensor<4x8x32xf32>) -> tensor<4x8x32xf32> {
  %0 = fusion.group epilogue (%a = %x : tensor<4x8x16xf32>, %b = %w : tensor<16x32xf32>, %c = %r : tensor<4x8x32xf32>) -> tensor<4x8x32xf32> {
    %zero = arith.constant 0.0 : f32
    %e3 = tensor.empty() : tensor<4x8x16xf32>
    %g = linalg.exp ins(%a : tensor<4x8x16xf32>) outs(%e3 : tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
    %gg = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%g : tensor<4x8x16xf32>) outs(%e3 : tensor<4x8x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = arith.addf %in, %in : f32
      linalg.yield %t : f32
    } -> tensor<4x8x16xf32>
    %col = tensor.collapse_shape %gg [[0, 1], [2]] : tensor<4x8x16xf32> into tensor<32x16xf32>
    %e2 = tensor.empty() : tensor<32x32xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e2 : tensor<32x32xf32>) -> tensor<32x32xf32>
    %m = linalg.matmul ins(%col, %b : tensor<32x16xf32>, tensor<16x32xf32>) outs(%f : tensor<32x32xf32>) -> tensor<32x32xf32>
    %ex = tensor.expand_shape %m [[0, 1], [2]] output_shape [4, 8, 32] : tensor<32x32xf32> into tensor<4x8x32xf32>
    %eo = tensor.empty() : tensor<4x8x32xf32>
    %y = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%ex, %c : tensor<4x8x32xf32>, tensor<4x8x32xf32>) outs(%eo : tensor<4x8x32xf32>) {
    ^bb0(%in: f32, %in2: f32, %out: f32):
      %t = arith.addf %in, %in2 : f32
      linalg.yield %t : f32
    } -> tensor<4x8x32xf32>
    fusion.yield %y : tensor<4x8x32xf32>
  }
  return %0 : tensor<4x8x32xf32>
}

// -----

// Negative: a reduction is not elementwise; the collapse of its result stays where it is.
// CHECK-LABEL: func.func @after_reduction
// CHECK: linalg.reduce
// CHECK: tensor.collapse_shape
// CHECK: linalg.exp
func.func @after_reduction(%x: tensor<4x8x16xf32>) -> tensor<32xf32> {
  %0 = fusion.group reduction (%a = %x : tensor<4x8x16xf32>) -> tensor<32xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4x8xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %s = linalg.reduce ins(%a : tensor<4x8x16xf32>) outs(%f : tensor<4x8xf32>) dimensions = [2]
      (%in: f32, %acc: f32) {
        %t = arith.addf %in, %acc : f32
        linalg.yield %t : f32
      }
    %c = tensor.collapse_shape %s [[0, 1]] : tensor<4x8xf32> into tensor<32xf32>
    %e1 = tensor.empty() : tensor<32xf32>
    %y = linalg.exp ins(%c : tensor<32xf32>) outs(%e1 : tensor<32xf32>) -> tensor<32xf32>
    fusion.yield %y : tensor<32xf32>
  }
  return %0 : tensor<32xf32>
}
