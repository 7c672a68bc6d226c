// RUN: fusec-opt %s --fusion-materialize-outputs --split-input-file | filecheck %s

// A constant model output gets a kernel that writes it: a fill for a splat (zeros, ones,
// full; also 0-d), a copy otherwise; the computed output is left alone.
// CHECK-LABEL: func.func @zeros_and_sum
// CHECK: %[[SUM:.+]] = linalg.add
// CHECK: %[[E:.+]] = tensor.empty() : tensor<3x4xf32>
// CHECK: %[[Z:.+]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[FILL:.+]] = linalg.fill ins(%[[Z]] : f32) outs(%[[E]] : tensor<3x4xf32>)
// CHECK: %[[E0:.+]] = tensor.empty() : tensor<f32>
// CHECK: %[[THREE:.+]] = arith.constant 3.000000e+00 : f32
// CHECK: %[[SCALAR:.+]] = linalg.fill ins(%[[THREE]] : f32) outs(%[[E0]] : tensor<f32>)
// CHECK: %[[E2:.+]] = tensor.empty() : tensor<2xf32>
// CHECK: %[[COPY:.+]] = linalg.copy {{.*}}ins(%[[RAMP:.+]] : tensor<2xf32>) outs(%[[E2]] : tensor<2xf32>)
// CHECK: return %[[FILL]], %[[SUM]], %[[SCALAR]], %[[COPY]]
func.func @zeros_and_sum(%a: tensor<2xf32>) -> (tensor<3x4xf32>, tensor<2xf32>, tensor<f32>, tensor<2xf32>) {
  %cst = arith.constant dense<0.0> : tensor<3x4xf32>
  %three = arith.constant dense<3.0> : tensor<f32>
  %ramp = arith.constant dense<[0.0, 1.0]> : tensor<2xf32>
  %e = tensor.empty() : tensor<2xf32>
  %sum = linalg.add ins(%a, %a : tensor<2xf32>, tensor<2xf32>) outs(%e : tensor<2xf32>) -> tensor<2xf32>
  return %cst, %sum, %three, %ramp : tensor<3x4xf32>, tensor<2xf32>, tensor<f32>, tensor<2xf32>
}

// -----

// An argument returned as is needs no kernel (the artifact copies its bytes): untouched.
// CHECK-LABEL: func.func @identity
// CHECK-NOT: linalg.copy
// CHECK: return %arg0
func.func @identity(%a: tensor<2xf32>) -> tensor<2xf32> {
  return %a : tensor<2xf32>
}

// -----

// A constant output with no element (`torch.triu_indices(0, 0)`) needs no writer: an empty
// tensor, and no kernel that would take a zero-size buffer.
// CHECK-LABEL: func.func @no_elements
// CHECK: %[[E:.+]] = tensor.empty() : tensor<2x0xi64>
// CHECK-NOT: linalg.
// CHECK: return %[[E]]
func.func @no_elements() -> tensor<2x0xi64> {
  %cst = arith.constant dense<> : tensor<2x0xi64>
  return %cst : tensor<2x0xi64>
}
