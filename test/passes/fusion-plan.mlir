// RUN: fusec-opt %s '--fusion-plan{device=nvidia-h200}' --split-input-file | filecheck %s

#map = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d0, 0)>
// A row normalisation feeding a 512-wide matmul, on the H200: the matmul is a cuBLASLt call,
// which reads its operands from memory, so the division before it is refused as its prologue
// (`gemm-prologue`: it would be a kernel of its own anyway) and the normalisation stays whole
// in its own kernel. (On the CPU the refusal is `recompute`: fusion-plan-gemm.mlir.) Every
// compute op ends in a group.
// CHECK-LABEL: func.func @norm_then_wide_matmul
// CHECK: %[[N:[0-9]+]] = fusion.group vertical
// CHECK: arith.addf
// CHECK: arith.divf
// CHECK: fusion.yield
// CHECK: fusion.group single ({{.*}}%[[N]] : tensor<64x128xf32>,
// CHECK-SAME: fusion.refused = ["linalg.generic@{{[0-9:]+}}: gemm-prologue: linalg.matmul@{{[0-9:]+}} is a GEMM kernel of its own on nvidia-h200
// CHECK: linalg.fill
// CHECK: linalg.matmul
// CHECK: fusion.yield
// CHECK-NOT: linalg.
// CHECK: return
func.func @norm_then_wide_matmul(%x: tensor<64x128xf32>, %w: tensor<128x512xf32>) -> tensor<64x512xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<64x128xf32>
  %r0 = tensor.empty() : tensor<64x1xf32>
  %z = linalg.fill ins(%cst : f32) outs(%r0 : tensor<64x1xf32>) -> tensor<64x1xf32>
  %s = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<64x128xf32>) outs(%z : tensor<64x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = arith.addf %in, %out : f32
    linalg.yield %12 : f32
  } -> tensor<64x1xf32>
  %n = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%x, %s : tensor<64x128xf32>, tensor<64x1xf32>) outs(%e : tensor<64x128xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %12 = arith.divf %in, %in_1 : f32
    linalg.yield %12 : f32
  } -> tensor<64x128xf32>
  %me = tensor.empty() : tensor<64x512xf32>
  %f = linalg.fill ins(%cst : f32) outs(%me : tensor<64x512xf32>) -> tensor<64x512xf32>
  %m = linalg.matmul ins(%n, %w : tensor<64x128xf32>, tensor<128x512xf32>) outs(%f : tensor<64x512xf32>) -> tensor<64x512xf32>
  return %m : tensor<64x512xf32>
}

// -----

// A pad is cheap to recompute: it joins its consumers.
// CHECK-LABEL: func.func @leftover_pad
// CHECK: fusion.group vertical
// CHECK: tensor.pad
// CHECK: linalg.exp
// CHECK: linalg.negf
// CHECK: fusion.yield
// CHECK-NOT: linalg.
func.func @leftover_pad(%x: tensor<8x8xf32>) -> tensor<10x10xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %p = tensor.pad %x low[1, 1] high[1, 1] {
  ^bb0(%i: index, %j: index):
    tensor.yield %cst : f32
  } : tensor<8x8xf32> to tensor<10x10xf32>
  %e = tensor.empty() : tensor<10x10xf32>
  %0 = linalg.exp ins(%p : tensor<10x10xf32>) outs(%e : tensor<10x10xf32>) -> tensor<10x10xf32>
  %1 = linalg.negf ins(%0 : tensor<10x10xf32>) outs(%e : tensor<10x10xf32>) -> tensor<10x10xf32>
  return %1 : tensor<10x10xf32>
}

// -----

// On the H200 a concat joins its consumers (the data-movement kernels evaluate it element
// by element): one kernel; on the CPU it stays a kernel of its own (fusion-plan-concat.mlir).
// CHECK-LABEL: func.func @leftover_concat
// CHECK: fusion.group vertical
// CHECK-NOT: fusion.refused
// CHECK: tensor.concat
// CHECK: linalg.exp
// CHECK: linalg.negf
// CHECK-NOT: fusion.group
func.func @leftover_concat(%x: tensor<8x8xf32>, %y: tensor<8x8xf32>) -> tensor<16x8xf32> {
  %c = tensor.concat dim(0) %x, %y : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
  %e = tensor.empty() : tensor<16x8xf32>
  %0 = linalg.exp ins(%c : tensor<16x8xf32>) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  %1 = linalg.negf ins(%0 : tensor<16x8xf32>) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  return %1 : tensor<16x8xf32>
}
