// RUN: fusec-opt %s --fusion-outline-kernels | filecheck %s

// Each group becomes a private kernel, in order, with the group's kind and attributes; the
// host keeps only the calls. Arguments are read-only to bufferization (kernels write only
// their results) and the host records how many inputs it has (out-params come later).
// CHECK-LABEL: func.func private @fusec_kernel_0
// CHECK-SAME: (%[[A:.+]]: tensor<8xf32> {bufferization.writable = false}) -> tensor<8xf32>
// CHECK-SAME: fusion.grid = 1 : i64, fusion.kind = "single"
// CHECK: %[[Y:.+]] = linalg.exp ins(%[[A]]
// CHECK: return %[[Y]]
// CHECK-LABEL: func.func private @fusec_kernel_1
// CHECK-SAME: fusion.kind = "vertical"
// CHECK: linalg.add
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[X:.+]]: tensor<8xf32> {bufferization.writable = false})
// CHECK-SAME: fusion.num_inputs = 1 : i64
// CHECK-NOT: fusion.group
// CHECK-NOT: linalg.
// CHECK: %[[K0:.+]] = call @fusec_kernel_0(%[[X]])
// CHECK: %[[K1:.+]] = call @fusec_kernel_1(%[[K0]], %[[X]])
// CHECK: return %[[K1]]
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = fusion.group single (%a = %x : tensor<8xf32>) -> tensor<8xf32> attributes {fusion.grid = 1 : i64} {
    %e = tensor.empty() : tensor<8xf32>
    %y = linalg.exp ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
    fusion.yield %y : tensor<8xf32>
  }
  %1 = fusion.group vertical (%a = %0 : tensor<8xf32>, %b = %x : tensor<8xf32>) -> tensor<8xf32> {
    %e = tensor.empty() : tensor<8xf32>
    %y = linalg.add ins(%a, %b : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
    fusion.yield %y : tensor<8xf32>
  }
  return %1 : tensor<8xf32>
}
