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

// A yielded `tensor.empty` (CSE shared one destination between the group's loop and another
// group that writes it whole) is not returned: the kernel returns the loop's result alone,
// and the other group gets an empty tensor of its own in the host. Returned, both results
// would bufferize to the one buffer the loop writes in place (ResNeXt-50's grouped
// convolutions on the CPU; upstream's buffer-results-to-out-params then crashed).
// CHECK-LABEL: func.func private @fusec_kernel_1(%{{.+}}: tensor<4xf32> {bufferization.writable = false}) -> tensor<4xf32>
// CHECK: %[[OWN:.+]] = tensor.empty() : tensor<4xf32>
// CHECK: linalg.generic {{.*}} outs(%[[OWN]] : tensor<4xf32>)
// CHECK: return %{{.+}} : tensor<4xf32>
// CHECK-LABEL: func.func @yield_empty
// CHECK: %[[E:.+]] = tensor.empty() : tensor<4xf32>
// CHECK-NEXT: %[[K:.+]] = call @fusec_kernel_1(%{{.+}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT: %[[C:.+]] = call @fusec_kernel_2(%[[E]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK: return %[[K]], %[[C]]
//
// Must not: drop a yielded empty of dynamic shape (its sizes are the group's values).
// CHECK-LABEL: func.func private @fusec_kernel_3(%{{.+}}: index {bufferization.writable = false}) -> tensor<?xf32>
// CHECK: %[[D:.+]] = tensor.empty(%{{.+}}) : tensor<?xf32>
// CHECK: return %[[D]] : tensor<?xf32>
func.func @yield_empty(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0:2 = fusion.group single (%a = %x : tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
    %e = tensor.empty() : tensor<4xf32>
    %g = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%a : tensor<4xf32>) outs(%e : tensor<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %n = arith.negf %in : f32
      linalg.yield %n : f32
    } -> tensor<4xf32>
    fusion.yield %e, %g : tensor<4xf32>, tensor<4xf32>
  }
  %1 = fusion.group single (%d = %0#0 : tensor<4xf32>) -> tensor<4xf32> {
    %c = arith.constant 2.0 : f32
    %f = linalg.fill ins(%c : f32) outs(%d : tensor<4xf32>) -> tensor<4xf32>
    fusion.yield %f : tensor<4xf32>
  }
  return %0#1, %1 : tensor<4xf32>, tensor<4xf32>
}

func.func @yield_dynamic_empty(%n: index) -> tensor<?xf32> {
  %0 = fusion.group single (%m = %n : index) -> tensor<?xf32> {
    %e = tensor.empty(%m) : tensor<?xf32>
    fusion.yield %e : tensor<?xf32>
  }
  return %0 : tensor<?xf32>
}
