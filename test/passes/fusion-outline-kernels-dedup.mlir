// RUN: fusec-opt %s --fusion-outline-kernels | filecheck %s

// A value the group yields twice (CSE merged two identical fills) is returned once by the
// kernel; both results of the group read it.
// CHECK-LABEL: func.func private @fusec_kernel_0() -> tensor<4xf32>
// CHECK: return %{{.+}} : tensor<4xf32>
// CHECK-LABEL: func.func @yield_twice
// CHECK: %[[K:.+]] = call @fusec_kernel_0() : () -> tensor<4xf32>
// CHECK: return %[[K]], %[[K]]
func.func @yield_twice() -> (tensor<4xf32>, tensor<4xf32>) {
  %0:2 = fusion.group horizontal () -> (tensor<4xf32>, tensor<4xf32>) {
    %c = arith.constant 3.0 : f32
    %e = tensor.empty() : tensor<4xf32>
    %f = linalg.fill ins(%c : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
    fusion.yield %f, %f : tensor<4xf32>, tensor<4xf32>
  }
  return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
}
