// RUN: fusec-opt %s '--fusion-epilogue{device=nvidia-h200}' --split-input-file | filecheck %s

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
#map2 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// Linear + bias + GELU as torch-mlir emits it: the weight transpose, the accumulator fill,
// the matmul, the bias add, a reshape and the GELU in one epilogue group.
// CHECK-LABEL: func.func @linear_bias_gelu
// CHECK: %[[G:[0-9]+]] = fusion.group epilogue
// CHECK-SAME: fusion.tile_dims = [0, 2]
// CHECK: tensor.collapse_shape
// CHECK: linalg.transpose
// CHECK: linalg.fill
// CHECK: linalg.matmul
// CHECK: arith.addf
// CHECK: tensor.expand_shape
// CHECK: math.erf
// CHECK: fusion.yield
// CHECK-NOT: linalg.
// CHECK: return %[[G]]
func.func @linear_bias_gelu(%arg0: tensor<4x8x16xf32>, %w: tensor<32x16xf32>, %bias: tensor<32xf32>) -> tensor<4x8x32xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %cst_0 = arith.constant 1.000000e+00 : f32
  %cst_1 = arith.constant 5.000000e-01 : f32
  %cst_4 = arith.constant 1.41421354 : f32
  %collapsed = tensor.collapse_shape %arg0 [[0, 1], [2]] : tensor<4x8x16xf32> into tensor<32x16xf32>
  %0 = tensor.empty() : tensor<16x32xf32>
  %transposed = linalg.transpose ins(%w : tensor<32x16xf32>) outs(%0 : tensor<16x32xf32>) permutation = [1, 0]
  %1 = tensor.empty() : tensor<32x32xf32>
  %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<32x32xf32>) -> tensor<32x32xf32>
  %3 = linalg.matmul ins(%collapsed, %transposed : tensor<32x16xf32>, tensor<16x32xf32>) outs(%2 : tensor<32x32xf32>) -> tensor<32x32xf32>
  %4 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%3, %bias : tensor<32x32xf32>, tensor<32xf32>) outs(%1 : tensor<32x32xf32>) {
  ^bb0(%in: f32, %in_5: f32, %out: f32):
    %7 = arith.addf %in, %in_5 : f32
    linalg.yield %7 : f32
  } -> tensor<32x32xf32>
  %expanded = tensor.expand_shape %4 [[0, 1], [2]] output_shape [4, 8, 32] : tensor<32x32xf32> into tensor<4x8x32xf32>
  %5 = tensor.empty() : tensor<4x8x32xf32>
  %6 = linalg.generic {indexing_maps = [#map2, #map2], iterator_types = ["parallel", "parallel", "parallel"]} ins(%expanded : tensor<4x8x32xf32>) outs(%5 : tensor<4x8x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %7 = arith.divf %in, %cst_4 : f32
    %8 = math.erf %7 : f32
    %9 = arith.addf %8, %cst_0 : f32
    %10 = arith.mulf %9, %cst_1 : f32
    %11 = arith.mulf %in, %10 : f32
    linalg.yield %11 : f32
  } -> tensor<4x8x32xf32>
  return %6 : tensor<4x8x32xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d0, 0)>
// Scores then a row sum over 512 columns: a tile cannot hold whole rows of the matmul (the
// register budget allows 128), so fusing the sum would need an online reduction over column
// tiles, which changes the summation order: refused.
// CHECK-LABEL: func.func @matmul_then_row_sum
// CHECK: %[[M:[0-9]+]] = fusion.group single
// CHECK: linalg.matmul
// CHECK: fusion.yield
// CHECK: linalg.generic {{.*}} ins(%[[M]] : tensor<64x512xf32>) {{.*}}fusion.refused = ["linalg.matmul@{{[0-9:]+}}: reduction-order: reorders-reduction: the reduction after it needs loop 1 (512 wide) whole
func.func @matmul_then_row_sum(%q: tensor<64x32xf32>, %k: tensor<32x512xf32>) -> tensor<64x512xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %s8 = arith.constant 8.000000e+00 : f32
  %e = tensor.empty() : tensor<64x512xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<64x512xf32>) -> tensor<64x512xf32>
  %m = linalg.matmul ins(%q, %k : tensor<64x32xf32>, tensor<32x512xf32>) outs(%f : tensor<64x512xf32>) -> tensor<64x512xf32>
  %r0 = tensor.empty() : tensor<64x1xf32>
  %z = linalg.fill ins(%cst : f32) outs(%r0 : tensor<64x1xf32>) -> tensor<64x1xf32>
  %s = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%m : tensor<64x512xf32>) outs(%z : tensor<64x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = arith.addf %in, %out : f32
    linalg.yield %12 : f32
  } -> tensor<64x1xf32>
  %y = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%m, %s : tensor<64x512xf32>, tensor<64x1xf32>) outs(%e : tensor<64x512xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %12 = arith.divf %in, %in_1 : f32
    linalg.yield %12 : f32
  } -> tensor<64x512xf32>
  return %y : tensor<64x512xf32>
}

// -----

// A matmul read by two consumers, the first of which comes before the other's kernel: the
// matmul is not recomputed for the later one; the first consumer's group writes it out.
// CHECK-LABEL: func.func @matmul_two_consumers
// CHECK: %[[G:[0-9]+]]:2 = fusion.group epilogue
// CHECK: linalg.matmul
// CHECK: linalg.exp
// CHECK: fusion.yield
// CHECK: linalg.tanh {fusion.refused = ["linalg.matmul@{{[0-9:]+}}: multi-consumer: also used by 1 op(s) outside the group (linalg.exp); recomputing this contraction
// CHECK-SAME: ins(%[[G]]#0
func.func @matmul_two_consumers(%a: tensor<64x32xf32>, %b: tensor<32x16xf32>) -> (tensor<64x16xf32>, tensor<64x16xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<64x16xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<64x16xf32>) -> tensor<64x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<64x32xf32>, tensor<32x16xf32>) outs(%f : tensor<64x16xf32>) -> tensor<64x16xf32>
  %r = linalg.exp ins(%m : tensor<64x16xf32>) outs(%e : tensor<64x16xf32>) -> tensor<64x16xf32>
  %t = linalg.tanh ins(%m : tensor<64x16xf32>) outs(%e : tensor<64x16xf32>) -> tensor<64x16xf32>
  return %r, %t : tensor<64x16xf32>, tensor<64x16xf32>
}
