// RUN: fusec-opt %s --fusion-form-loop-kernels --split-input-file | filecheck %s

// A loop on tensors in the model function (torch-mlir's multinomial) becomes one serial
// kernel; the tensors it reads are the group's inputs (an empty init is cloned in).
// CHECK-LABEL: func.func @loop(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<8xf32>
// CHECK:         %[[G:.+]] = fusion.group single (%[[B:.+]] = %[[X]] : tensor<8xf32>) -> tensor<8xf32>
// CHECK-SAME:        fusion.serial
// CHECK:           %[[E:.+]] = tensor.empty() : tensor<8xf32>
// CHECK:           %[[R:.+]] = scf.for {{.*}} iter_args(%{{.+}} = %[[E]])
// CHECK:             tensor.extract %[[B]]
// CHECK:           fusion.yield %[[R]]
// CHECK:         return %[[G]]
func.func @loop(%x: tensor<8xf32>) -> tensor<8xf32> {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c1 = arith.constant 1 : index
  %e = tensor.empty() : tensor<8xf32>
  %r = scf.for %i = %c0 to %c8 step %c1 iter_args(%t = %e) -> (tensor<8xf32>) {
    %v = tensor.extract %x[%i] : tensor<8xf32>
    %w = arith.addf %v, %v : f32
    %u = tensor.insert %w into %t[%i] : tensor<8xf32>
    scf.yield %u : tensor<8xf32>
  }
  return %r : tensor<8xf32>
}

// -----

// A loop that yields scalars is left alone (no kernel can return them).
// CHECK-LABEL: func.func @scalar_loop(
// CHECK-NOT:     fusion.group
// CHECK:         scf.for
func.func @scalar_loop(%x: tensor<8xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %r = scf.for %i = %c0 to %c8 step %c1 iter_args(%s = %z) -> (f32) {
    %v = tensor.extract %x[%i] : tensor<8xf32>
    %w = arith.addf %s, %v : f32
    scf.yield %w : f32
  }
  return %r : f32
}
