// RUN: fusec-opt %s --fusion-distinct-outputs --split-input-file | filecheck %s

// A value returned twice: the second position gets its own buffer, a copy of the first
// (zero-size outputs that share one tensor.empty too); the first position is untouched.
// CHECK-LABEL: func.func @twice
// CHECK: %[[SUM:.+]] = linalg.add
// CHECK: %[[E:.+]] = tensor.empty() : tensor<0xf32>
// CHECK: %[[C1:.+]] = bufferization.alloc_tensor() copy(%[[SUM]]) : tensor<4xf32>
// CHECK: %[[C2:.+]] = bufferization.alloc_tensor() copy(%[[E]]) : tensor<0xf32>
// CHECK: return %[[SUM]], %[[C1]], %[[E]], %[[C2]] :
func.func @twice(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<0xf32>, tensor<0xf32>) {
  %i = tensor.empty() : tensor<4xf32>
  %0 = linalg.add ins(%a, %a : tensor<4xf32>, tensor<4xf32>) outs(%i : tensor<4xf32>) -> tensor<4xf32>
  %e = tensor.empty() : tensor<0xf32>
  return %0, %0, %e, %e : tensor<4xf32>, tensor<4xf32>, tensor<0xf32>, tensor<0xf32>
}

// -----

// Must not: distinct outputs (and an argument returned once) stay as they are.
// CHECK-LABEL: func.func @distinct
// CHECK-NOT: bufferization.alloc_tensor
// CHECK: return %arg0, %{{.+}} :
func.func @distinct(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %i = tensor.empty() : tensor<4xf32>
  %0 = linalg.add ins(%a, %a : tensor<4xf32>, tensor<4xf32>) outs(%i : tensor<4xf32>) -> tensor<4xf32>
  return %a, %0 : tensor<4xf32>, tensor<4xf32>
}
