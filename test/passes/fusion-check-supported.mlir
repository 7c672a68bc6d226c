// RUN: not fusec-opt %s --fusion-check-supported --split-input-file 2>&1 | filecheck %s
// RUN: not fusec-opt %s --fusion-check-supported --split-input-file 2>/dev/null | filecheck %s --check-prefix=OK

// Supported linalg-on-tensors passes through unchanged.
// OK-LABEL: func.func @fine
// OK: linalg.exp
func.func @fine(%a: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %0 = linalg.exp ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// An op of a dialect fusec does not compile: named, located, with the supported list.
func.func @gpu_op() -> index {
  // CHECK: fusion-check-supported.mlir:[[@LINE+1]]:8: error: unsupported op 'gpu.thread_id'; fusec supports ops of the dialects arith, math, linalg, tensor
  %0 = gpu.thread_id x
  return %0 : index
}

// -----

// Dynamic shapes are rejected at the function, naming the argument.
// CHECK: fusion-check-supported.mlir:[[@LINE+1]]:1: error: argument 0 of @dynamic has dynamic shape tensor<?x4xf32>; fusec compiles static shapes only
func.func @dynamic(%a: tensor<?x4xf32>) -> tensor<?x4xf32> {
  return %a : tensor<?x4xf32>
}

// -----

// Element types outside the supported set are rejected.
// CHECK: fusion-check-supported.mlir:[[@LINE+1]]:1: error: argument 0 of @complex_arg has element type complex<f32>, which fusec does not support
func.func @complex_arg(%a: tensor<4xcomplex<f32>>) -> tensor<4xcomplex<f32>> {
  return %a : tensor<4xcomplex<f32>>
}

// -----

// The model's arguments are tensors: a scalar argument has no buffer in the artifact.
// CHECK: fusion-check-supported.mlir:[[@LINE+1]]:1: error: argument 0 of @scalar_argument is a scalar i64; fusec models take tensors only
func.func @scalar_argument(%a: i64) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  return %e : tensor<4xf32>
}

// -----

// A result is a tensor or a number (--fusion-scalars-to-tensors makes a number a 0-d
// output); an index result would be dropped, so it is refused.
// CHECK: fusion-check-supported.mlir:[[@LINE+1]]:1: error: result 0 of @index_result is index; fusec models return tensors and numbers only
func.func @index_result(%a: tensor<4xf32>) -> index {
  %c = arith.constant 1 : index
  return %c : index
}

// -----

// A number result passes the check.
// OK-LABEL: func.func @number_result
func.func @number_result(%a: tensor<4xf32>) -> f64 {
  %c = arith.constant 1.5 : f64
  return %c : f64
}
