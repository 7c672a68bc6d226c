// RUN: fusec-opt %s --fusion-materialize-outputs --split-input-file | filecheck %s

// A constant model output gets a linalg.copy, so that a kernel writes the output buffer;
// the computed output is left alone.
// CHECK-LABEL: func.func @zeros_and_sum
// CHECK: %[[CST:.+]] = arith.constant dense<0.000000e+00> : tensor<3x4xf32>
// CHECK: %[[SUM:.+]] = linalg.add
// CHECK: %[[E:.+]] = tensor.empty() : tensor<3x4xf32>
// CHECK: %[[COPY:.+]] = linalg.copy {{.*}}ins(%[[CST]] : tensor<3x4xf32>) outs(%[[E]] : tensor<3x4xf32>)
// CHECK: return %[[COPY]], %[[SUM]]
func.func @zeros_and_sum(%a: tensor<2xf32>) -> (tensor<3x4xf32>, tensor<2xf32>) {
  %cst = arith.constant dense<0.0> : tensor<3x4xf32>
  %e = tensor.empty() : tensor<2xf32>
  %sum = linalg.add ins(%a, %a : tensor<2xf32>, tensor<2xf32>) outs(%e : tensor<2xf32>) -> tensor<2xf32>
  return %cst, %sum : tensor<3x4xf32>, tensor<2xf32>
}

// -----

// An argument returned as is needs no kernel (the artifact copies its bytes): untouched.
// CHECK-LABEL: func.func @identity
// CHECK-NOT: linalg.copy
// CHECK: return %arg0
func.func @identity(%a: tensor<2xf32>) -> tensor<2xf32> {
  return %a : tensor<2xf32>
}
