// RUN: fusec-opt %s --fusion-gpu-split-at-reshapes | filecheck %s

// A group neither group-level emitter takes (it transposes, then sums each transposed row:
// the fast emitter takes no transpose, the data-movement kernels no reduction over their
// input's contiguous dim) with a reshape of a value it computes (exp, then a head split): the fallback
// could not slice the exp through the reshape and every thread would compute it whole, so
// the group is cut at the reshape. A group the fast emitter builds (tanh then a reshape) and
// one the data-movement kernels build (exp, head split, transpose: no reduction) are left
// whole.
// CHECK-LABEL: func.func @main
// CHECK: %[[A:.+]] = fusion.group single (%{{.+}} = %arg0 : tensor<16x32xf32>) -> tensor<16x32xf32>
// CHECK-SAME: fusion.split = "reshape"
// CHECK: math.exp
// CHECK-NOT: linalg.transpose
// CHECK: %[[B:.+]] = fusion.group vertical (%{{.+}} = %[[A]] : tensor<16x32xf32>) -> tensor<4x16xf32>
// CHECK-SAME: fusion.split = "reshape"
// CHECK: tensor.expand_shape
// CHECK: linalg.transpose
// CHECK: arith.addf
// CHECK: %[[C:.+]] = fusion.group vertical (%{{.+}} = %arg0 : tensor<16x32xf32>) -> tensor<16x4x8xf32> {
// CHECK: math.tanh
// CHECK: tensor.expand_shape
// CHECK: %[[D:.+]] = fusion.group vertical (%{{.+}} = %arg0 : tensor<16x32xf32>) -> tensor<4x16x8xf32> {
// CHECK-NOT: fusion.split
// CHECK: math.exp
// CHECK: tensor.expand_shape
// CHECK: linalg.transpose
// CHECK: return %[[B]], %[[C]], %[[D]]
#mm = affine_map<(d0, d1) -> (d0, d1)>
#m3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#r3 = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @main(%x: tensor<16x32xf32>) -> (tensor<4x16xf32>, tensor<16x4x8xf32>, tensor<4x16x8xf32>) {
  %g = fusion.group vertical (%a = %x : tensor<16x32xf32>) -> tensor<4x16xf32> {
    %e = tensor.empty() : tensor<16x32xf32>
    %ex = linalg.generic {indexing_maps = [#mm, #mm], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) {
    ^bb0(%i: f32, %o: f32):
      %t = math.exp %i : f32
      linalg.yield %t : f32
    } -> tensor<16x32xf32>
    %r = tensor.expand_shape %ex [[0], [1, 2]] output_shape [16, 4, 8] : tensor<16x32xf32> into tensor<16x4x8xf32>
    %e2 = tensor.empty() : tensor<4x16x8xf32>
    %t = linalg.transpose ins(%r : tensor<16x4x8xf32>) outs(%e2 : tensor<4x16x8xf32>) permutation = [1, 0, 2]
    %z = arith.constant 0.0 : f32
    %e3 = tensor.empty() : tensor<4x16xf32>
    %f = linalg.fill ins(%z : f32) outs(%e3 : tensor<4x16xf32>) -> tensor<4x16xf32>
    %s = linalg.generic {indexing_maps = [#m3, #r3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t : tensor<4x16x8xf32>) outs(%f : tensor<4x16xf32>) {
    ^bb0(%i: f32, %o: f32):
      %p = arith.addf %i, %o : f32
      linalg.yield %p : f32
    } -> tensor<4x16xf32>
    fusion.yield %s : tensor<4x16xf32>
  }
  %h = fusion.group vertical (%a = %x : tensor<16x32xf32>) -> tensor<16x4x8xf32> {
    %e = tensor.empty() : tensor<16x32xf32>
    %ex = linalg.generic {indexing_maps = [#mm, #mm], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) {
    ^bb0(%i: f32, %o: f32):
      %t = math.tanh %i : f32
      linalg.yield %t : f32
    } -> tensor<16x32xf32>
    %r = tensor.expand_shape %ex [[0], [1, 2]] output_shape [16, 4, 8] : tensor<16x32xf32> into tensor<16x4x8xf32>
    fusion.yield %r : tensor<16x4x8xf32>
  }
  %k = fusion.group vertical (%a = %x : tensor<16x32xf32>) -> tensor<4x16x8xf32> {
    %e = tensor.empty() : tensor<16x32xf32>
    %ex = linalg.generic {indexing_maps = [#mm, #mm], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) {
    ^bb0(%i: f32, %o: f32):
      %t = math.exp %i : f32
      linalg.yield %t : f32
    } -> tensor<16x32xf32>
    %r = tensor.expand_shape %ex [[0], [1, 2]] output_shape [16, 4, 8] : tensor<16x32xf32> into tensor<16x4x8xf32>
    %e2 = tensor.empty() : tensor<4x16x8xf32>
    %t = linalg.transpose ins(%r : tensor<16x4x8xf32>) outs(%e2 : tensor<4x16x8xf32>) permutation = [1, 0, 2]
    fusion.yield %t : tensor<4x16x8xf32>
  }
  return %g, %h, %k : tensor<4x16xf32>, tensor<16x4x8xf32>, tensor<4x16x8xf32>
}
