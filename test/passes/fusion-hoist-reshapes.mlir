// RUN: fusec-opt %s --fusion-hoist-reshapes --split-input-file | filecheck %s

// Reshapes of a group input and of the group's result move to the host, where they are
// views; the group keeps the compute and is no longer blocked from tiling by them.
// CHECK-LABEL: func.func @edges
// CHECK: %[[C:.+]] = tensor.collapse_shape %arg0
// CHECK-NOT: tensor.empty
// CHECK: %[[G:.+]] = fusion.group single (%[[A:.+]] = %[[C]] : tensor<32xf32>) -> tensor<32xf32> {
// CHECK-NOT: tensor.collapse_shape
// CHECK: linalg.exp ins(%[[A]]
// CHECK-NOT: tensor.expand_shape
// CHECK: fusion.yield
// CHECK: %[[O:.+]] = tensor.expand_shape %[[G]]
// CHECK: return %[[O]]
func.func @edges(%x: tensor<4x8xf32>) -> tensor<2x16xf32> {
  %r = fusion.group single (%a = %x : tensor<4x8xf32>) -> tensor<2x16xf32> {
    %c = tensor.collapse_shape %a [[0, 1]] : tensor<4x8xf32> into tensor<32xf32>
    %e = tensor.empty() : tensor<32xf32>
    %y = linalg.exp ins(%c : tensor<32xf32>) outs(%e : tensor<32xf32>) -> tensor<32xf32>
    %o = tensor.expand_shape %y [[0, 1]] output_shape [2, 16] : tensor<32xf32> into tensor<2x16xf32>
    fusion.yield %o : tensor<2x16xf32>
  }
  return %r : tensor<2x16xf32>
}

// -----

// A group that only reshapes disappears: no kernel, just a view.
// CHECK-LABEL: func.func @only_a_reshape
// CHECK-NOT: fusion.group
// CHECK: %[[C:.+]] = tensor.collapse_shape %arg0
// CHECK: return %[[C]]
func.func @only_a_reshape(%x: tensor<4x8xf32>) -> tensor<32xf32> {
  %r = fusion.group single (%a = %x : tensor<4x8xf32>) -> tensor<32xf32> {
    %c = tensor.collapse_shape %a [[0, 1]] : tensor<4x8xf32> into tensor<32xf32>
    fusion.yield %c : tensor<32xf32>
  }
  return %r : tensor<32xf32>
}

// -----

// Negative: a reshape of a constant stays in the kernel (a global there); in the host it
// would be a constant buffer, which the plan cannot hold.
// CHECK-LABEL: func.func @reshape_of_constant
// CHECK: fusion.group single
// CHECK: arith.constant
// CHECK: tensor.expand_shape
// CHECK: fusion.yield
func.func @reshape_of_constant() -> tensor<4x1xf32> {
  %r = fusion.group single () -> tensor<4x1xf32> {
    %k = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
    %o = tensor.expand_shape %k [[0, 1]] output_shape [4, 1] : tensor<4xf32> into tensor<4x1xf32>
    fusion.yield %o : tensor<4x1xf32>
  }
  return %r : tensor<4x1xf32>
}
