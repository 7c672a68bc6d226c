// RUN: fusec-opt %s --fusion-reassociate-reductions | filecheck %s

// The add into the accumulator of a reduction may be reassociated (vectorized partial
// sums); the rest of the payload keeps strict semantics.
// CHECK-LABEL: func.func @row_sum_of_squares
// CHECK: %[[SQ:.+]] = arith.mulf %{{.+}}, %{{.+}} : f32
// CHECK: arith.addf %[[SQ]], %{{.+}} fastmath<reassoc> : f32
func.func @row_sum_of_squares(%a: tensor<8x16xf32>, %c: tensor<8xf32>) -> tensor<8xf32> {
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<8x16xf32>) outs(%c : tensor<8xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %sq = arith.mulf %x, %x : f32
    %s = arith.addf %sq, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// Negative: an elementwise op (no reduction) is untouched.
// CHECK-LABEL: func.func @elementwise
// CHECK-NOT: fastmath
func.func @elementwise(%a: tensor<8xf32>, %c: tensor<8xf32>) -> tensor<8xf32> {
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]} ins(%a : tensor<8xf32>) outs(%c : tensor<8xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %x, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
