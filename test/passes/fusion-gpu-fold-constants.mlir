// RUN: fusec-opt %s --fusion-gpu-fold-constants | filecheck %s

// A group that reads nothing (an arange, as GPT-2's positions) is computed at compile time:
// its value becomes a constant cloned into the group that reads it, and the kernel is gone.
// A group that reads an input is not folded.
// CHECK-LABEL: func.func @main
// CHECK-NOT: fusion.group single () ->
// CHECK: %[[Y:.+]] = fusion.group single (%{{.+}} = %arg0 : tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK: arith.constant dense<[0.000000e+00, 1.000000e+00, 2.000000e+00, {{.*}} 1.500000e+01]> : tensor<16xf32>
// CHECK: arith.addf
// CHECK: %[[Z:.+]] = fusion.group single (%{{.+}} = %arg0 : tensor<4x16xf32>) -> tensor<16xf32>
// CHECK: linalg.generic
// CHECK: return %[[Y]], %[[Z]]
#id = affine_map<(d0) -> (d0)>
#mm = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @main(%x: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<16xf32>) {
  %pos = fusion.group single () -> tensor<16xf32> {
    %e = tensor.empty() : tensor<16xf32>
    %r = linalg.generic {indexing_maps = [#id], iterator_types = ["parallel"]} outs(%e : tensor<16xf32>) {
    ^bb0(%o: f32):
      %i = linalg.index 0 : index
      %n = arith.index_cast %i : index to i64
      %f = arith.sitofp %n : i64 to f32
      linalg.yield %f : f32
    } -> tensor<16xf32>
    fusion.yield %r : tensor<16xf32>
  }
  %y = fusion.group single (%a = %x : tensor<4x16xf32>, %p = %pos : tensor<16xf32>) -> tensor<4x16xf32> {
    %e = tensor.empty() : tensor<4x16xf32>
    %r = linalg.generic {indexing_maps = [#mm, #col, #mm], iterator_types = ["parallel", "parallel"]} ins(%a, %p : tensor<4x16xf32>, tensor<16xf32>) outs(%e : tensor<4x16xf32>) {
    ^bb0(%i: f32, %j: f32, %o: f32):
      %s = arith.addf %i, %j : f32
      linalg.yield %s : f32
    } -> tensor<4x16xf32>
    fusion.yield %r : tensor<4x16xf32>
  }
  %z = fusion.group single (%a = %x : tensor<4x16xf32>) -> tensor<16xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<16xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16xf32>) -> tensor<16xf32>
    %r = linalg.generic {indexing_maps = [#mm, #col], iterator_types = ["reduction", "parallel"]} ins(%a : tensor<4x16xf32>) outs(%f : tensor<16xf32>) {
    ^bb0(%i: f32, %o: f32):
      %s = arith.addf %i, %o : f32
      linalg.yield %s : f32
    } -> tensor<16xf32>
    fusion.yield %r : tensor<16xf32>
  }
  return %y, %z : tensor<4x16xf32>, tensor<16xf32>
}
