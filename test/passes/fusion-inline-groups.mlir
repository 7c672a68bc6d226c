// RUN: fusec-opt %s --fusion-inline-groups --split-input-file | filecheck %s
// Round trip: forming singletons then inlining them gives the original program back.
// RUN: fusec-opt %s --fusion-form-singletons --fusion-inline-groups --canonicalize --split-input-file | filecheck %s --check-prefix=ROUND

// The body replaces the group: block arguments become the operands, results the yielded values.
// CHECK-LABEL: func.func @inline
// CHECK-NOT: fusion.group
// CHECK: %[[E:.+]] = linalg.exp ins(%arg0 : tensor<8xf32>)
// CHECK: %[[N:.+]] = linalg.negf ins(%[[E]] : tensor<8xf32>)
// CHECK: return %[[N]]
// ROUND-LABEL: func.func @inline
// ROUND-NOT: fusion.group
// ROUND: %[[E:.+]] = linalg.exp ins(%arg0 : tensor<8xf32>)
// ROUND: %[[N:.+]] = linalg.negf ins(%[[E]] : tensor<8xf32>)
// ROUND: return %[[N]]
func.func @inline(%a: tensor<8xf32>) -> tensor<8xf32> {
  %r = fusion.group vertical (%x = %a : tensor<8xf32>) -> tensor<8xf32> {
    %e = tensor.empty() : tensor<8xf32>
    %0 = linalg.exp ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
    %1 = linalg.negf ins(%0 : tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
    fusion.yield %1 : tensor<8xf32>
  }
  return %r : tensor<8xf32>
}

// -----

// A group with two results: each outside use reads the right yielded value.
// CHECK-LABEL: func.func @two_results
// CHECK-NOT: fusion.group
// CHECK: %[[E:.+]] = linalg.exp
// CHECK: %[[N:.+]] = linalg.negf
// CHECK: return %[[N]], %[[E]]
func.func @two_results(%a: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %r:2 = fusion.group vertical (%x = %a : tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
    %e = tensor.empty() : tensor<8xf32>
    %0 = linalg.exp ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
    %1 = linalg.negf ins(%0 : tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
    fusion.yield %0, %1 : tensor<8xf32>, tensor<8xf32>
  }
  return %r#1, %r#0 : tensor<8xf32>, tensor<8xf32>
}
