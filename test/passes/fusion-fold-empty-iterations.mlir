// RUN: fusec-opt %s --fusion-fold-empty-iterations --split-input-file | filecheck %s

// torch.mm of 5x0 by 0x10: no iteration, the result is the zero fill.
// CHECK-LABEL: func.func @zero_k(
// CHECK:         %[[F:.+]] = linalg.fill
// CHECK-NOT:     linalg.matmul
// CHECK:         return %[[F]]
func.func @zero_k(%a: tensor<5x0xf32>, %b: tensor<0x10xf32>) -> tensor<5x10xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<5x10xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<5x10xf32>) -> tensor<5x10xf32>
  %m = linalg.matmul ins(%a, %b : tensor<5x0xf32>, tensor<0x10xf32>)
                     outs(%f : tensor<5x10xf32>) -> tensor<5x10xf32>
  return %m : tensor<5x10xf32>
}

// -----

// The same for a batched contraction written as a generic (a sum over an empty dim).
// CHECK-LABEL: func.func @zero_k_generic(
// CHECK-SAME:      %{{[^:]+}}: tensor<2x3x0xf32>, %[[F:[^:]+]]: tensor<2x3xf32>)
// CHECK-NOT:     linalg.generic
// CHECK:         return %[[F]] : tensor<2x3xf32>
func.func @zero_k_generic(%a: tensor<2x3x0xf32>, %f: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>,
                                        affine_map<(d0, d1, d2) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a : tensor<2x3x0xf32>) outs(%f : tensor<2x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  } -> tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}

// -----

// Non-empty inputs, and a generic whose map is not a projected permutation (a constant
// index may read outside an empty dim's range), are left alone.
// CHECK-LABEL: func.func @kept(
// CHECK:         linalg.matmul
// CHECK:         linalg.generic
func.func @kept(%a: tensor<5x2xf32>, %b: tensor<2x10xf32>, %c: tensor<5x10xf32>,
                %z: tensor<0x4xf32>, %o: tensor<4xf32>) -> (tensor<5x10xf32>, tensor<4xf32>) {
  %m = linalg.matmul ins(%a, %b : tensor<5x2xf32>, tensor<2x10xf32>)
                     outs(%c : tensor<5x10xf32>) -> tensor<5x10xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(d0) -> (0, d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%z : tensor<0x4xf32>) outs(%o : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4xf32>
  return %m, %g : tensor<5x10xf32>, tensor<4xf32>
}

// -----

// An op whose result has no element writes nothing, whatever its maps.
// CHECK-LABEL: func.func @empty_result(
// CHECK-SAME:      %{{[^:]+}}: tensor<2x4xf32>, %[[O:[^:]+]]: tensor<2x0xf32>)
// CHECK-NOT:     linalg.
// CHECK:         return %[[O]] : tensor<2x0xf32>
func.func @empty_result(%a: tensor<2x4xf32>, %o: tensor<2x0xf32>) -> tensor<2x0xf32> {
  %g = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, 0)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<2x4xf32>) outs(%o : tensor<2x0xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x0xf32>
  return %g : tensor<2x0xf32>
}
