// RUN: fusec-opt %s --fusion-form-singletons --split-input-file | filecheck %s

// Every compute op gets its own `single` group; constants and tensor.empty are cloned in,
// so each group is isolated, and the function returns the last group's result.
// CHECK-LABEL: func.func @chain
// CHECK: %[[G0:.+]] = fusion.group single (%[[A:.+]] = %arg0 : tensor<8xf32>, %[[B:.+]] = %arg1 : tensor<8xf32>) -> tensor<8xf32> {
// CHECK:   %[[E0:.+]] = tensor.empty() : tensor<8xf32>
// CHECK:   %[[ADD:.+]] = linalg.add ins(%[[A]], %[[B]] : {{.*}}) outs(%[[E0]] : tensor<8xf32>)
// CHECK:   fusion.yield %[[ADD]]
// CHECK: %[[G1:.+]] = fusion.group single (%[[X:.+]] = %[[G0]] : tensor<8xf32>) -> tensor<8xf32> {
// CHECK:   %[[C:.+]] = arith.constant 2.0
// CHECK:   linalg.generic
// CHECK:     arith.mulf %{{.+}}, %[[C]]
// CHECK:   fusion.yield
// CHECK: return %[[G1]]
// No compute op is left outside a group:
// CHECK-NOT: linalg.
// CHECK: }
func.func @chain(%a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  %cst = arith.constant 2.0 : f32
  %e = tensor.empty() : tensor<8xf32>
  %0 = linalg.add ins(%a, %b : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%0 : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %cst : f32
    linalg.yield %m : f32
  } -> tensor<8xf32>
  return %1 : tensor<8xf32>
}

// -----

// A reduction with its linalg.fill init: two ops, two kernels (no fusion here); a reshape
// is a compute op too.
// CHECK-LABEL: func.func @reduce
// CHECK: fusion.group single {{.*}} -> tensor<4xf32> {
// CHECK:   linalg.fill
// CHECK: fusion.group single {{.*}} -> tensor<4xf32> {
// CHECK:   linalg.reduce
// CHECK: fusion.group single {{.*}} -> tensor<2x2xf32> {
// CHECK:   tensor.expand_shape
func.func @reduce(%a: tensor<4x8xf32>) -> tensor<2x2xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %r = linalg.reduce ins(%a : tensor<4x8xf32>) outs(%f : tensor<4xf32>) dimensions = [1]
    (%in: f32, %acc: f32) {
      %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32
    }
  %x = tensor.expand_shape %r [[0, 1]] output_shape [2, 2] : tensor<4xf32> into tensor<2x2xf32>
  return %x : tensor<2x2xf32>
}

// -----

// Ops already in a group are left alone; a function without compute gets no group.
// CHECK-LABEL: func.func @already_grouped
// CHECK: fusion.group vertical
// CHECK-NOT: fusion.group single
// CHECK-LABEL: func.func @no_compute
// CHECK-NOT: fusion.group
// CHECK: return
func.func @already_grouped(%a: tensor<8xf32>) -> tensor<8xf32> {
  %r = fusion.group vertical (%x = %a : tensor<8xf32>) -> tensor<8xf32> {
    %e = tensor.empty() : tensor<8xf32>
    %0 = linalg.exp ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
    fusion.yield %0 : tensor<8xf32>
  }
  return %r : tensor<8xf32>
}
func.func @no_compute(%a: tensor<8xf32>) -> tensor<8xf32> {
  return %a : tensor<8xf32>
}
