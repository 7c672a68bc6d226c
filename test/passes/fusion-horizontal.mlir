// Named ops are generalized first, as torch-mlir's are: the H200's fast emitter takes only
// linalg.generic, and the planner keeps what it refuses out of horizontal groups
// (fusion-plan-gemm.mlir).
// RUN: fusec-opt %s --linalg-generalize-named-ops '--fusion-plan{horizontal=false device=nvidia-h200}' '--fusion-horizontal{device=nvidia-h200}' --split-input-file | filecheck %s

// Two independent chains, each far below a launch's cost in work, over domains of one size
// (the H200's fast emitter builds one domain per kernel): one launch for both.
// CHECK-LABEL: func.func @independent_small
// CHECK: %[[H:[0-9]+]]:2 = fusion.group horizontal
// CHECK-SAME: fusion.launches_saved = 1
// CHECK-SAME: fusion.parts = ["vertical", "vertical"]
// CHECK: math.exp
// CHECK: arith.negf
// CHECK: math.absf
// CHECK: math.exp
// CHECK: fusion.yield
// CHECK-NOT: fusion.group
// CHECK: return %[[H]]#0, %[[H]]#1
func.func @independent_small(%a: tensor<16x32xf32>, %b: tensor<512xf32>) -> (tensor<16x32xf32>, tensor<512xf32>) {
  %e = tensor.empty() : tensor<16x32xf32>
  %0 = linalg.exp ins(%a : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %1 = linalg.negf ins(%0 : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %e2 = tensor.empty() : tensor<512xf32>
  %2 = linalg.abs ins(%b : tensor<512xf32>) outs(%e2 : tensor<512xf32>) -> tensor<512xf32>
  %3 = linalg.exp ins(%2 : tensor<512xf32>) outs(%e2 : tensor<512xf32>) -> tensor<512xf32>
  return %1, %3 : tensor<16x32xf32>, tensor<512xf32>
}

// -----

// The same chains over domains of other sizes (512 and 8 elements, as GPT-2's [T, T] causal
// mask beside its [T, d] embeddings): one kernel of the H200's fast emitter cannot hold both
// (code generation would split it per output again, no launch saved), so they stay apart.
// CHECK-LABEL: func.func @independent_small_other_sizes
// CHECK-NOT: fusion.group horizontal
// CHECK: return
func.func @independent_small_other_sizes(%a: tensor<16x32xf32>, %b: tensor<8xf32>) -> (tensor<16x32xf32>, tensor<8xf32>) {
  %e = tensor.empty() : tensor<16x32xf32>
  %0 = linalg.exp ins(%a : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %1 = linalg.negf ins(%0 : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %e2 = tensor.empty() : tensor<8xf32>
  %2 = linalg.abs ins(%b : tensor<8xf32>) outs(%e2 : tensor<8xf32>) -> tensor<8xf32>
  %3 = linalg.exp ins(%2 : tensor<8xf32>) outs(%e2 : tensor<8xf32>) -> tensor<8xf32>
  return %1, %3 : tensor<16x32xf32>, tensor<8xf32>
}

// -----

// A chain through an op no fusion takes (a concat): three kernels, each depending on the one
// before it; dependent kernels are never merged.
// CHECK-LABEL: func.func @dependent
// CHECK-NOT: fusion.group horizontal
// CHECK: return
func.func @dependent(%x: tensor<8x8xf32>) -> tensor<16x8xf32> {
  %e = tensor.empty() : tensor<8x8xf32>
  %a = linalg.exp ins(%x : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %c = tensor.concat dim(0) %a, %a : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
  %e2 = tensor.empty() : tensor<16x8xf32>
  %b = linalg.negf ins(%c : tensor<16x8xf32>) outs(%e2 : tensor<16x8xf32>) -> tensor<16x8xf32>
  return %b : tensor<16x8xf32>
}

// -----

// Kernels that move 128 MB each (30 us on an H200) are not launch-bound: they keep their own launches.
// CHECK-LABEL: func.func @independent_large
// CHECK-NOT: fusion.group horizontal
// CHECK: return
func.func @independent_large(%a: tensor<4096x4096xf32>, %b: tensor<4096x4096xf32>) -> (tensor<4096x4096xf32>, tensor<4096x4096xf32>) {
  %e = tensor.empty() : tensor<4096x4096xf32>
  %0 = linalg.exp ins(%a : tensor<4096x4096xf32>) outs(%e : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  %1 = linalg.exp ins(%b : tensor<4096x4096xf32>) outs(%e : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  return %0, %1 : tensor<4096x4096xf32>, tensor<4096x4096xf32>
}

// -----

// A group of reshapes alone is a view of its input, no kernel: merged with a small kernel
// beside it, it would become a copy that kernel writes. It stays a group of its own.
// CHECK-LABEL: func.func @view_beside_small
// CHECK: fusion.group single (%{{.+}} = %arg0 : tensor<16x32xf32>) -> tensor<512xf32>
// CHECK-NEXT: tensor.collapse_shape
// CHECK-NEXT: fusion.yield
// CHECK-NOT: fusion.group horizontal
// CHECK: return
func.func @view_beside_small(%a: tensor<16x32xf32>, %b: tensor<8xf32>) -> (tensor<512xf32>, tensor<8xf32>) {
  %v = tensor.collapse_shape %a [[0, 1]] : tensor<16x32xf32> into tensor<512xf32>
  %e2 = tensor.empty() : tensor<8xf32>
  %2 = linalg.abs ins(%b : tensor<8xf32>) outs(%e2 : tensor<8xf32>) -> tensor<8xf32>
  return %v, %2 : tensor<512xf32>, tensor<8xf32>
}
