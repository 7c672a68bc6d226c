// RUN: fusec-opt %s '--fusion-plan{device=cpu}' --split-input-file | filecheck %s
// RUN: fusec-opt %s '--fusion-plan{device=nvidia-h200}' --split-input-file | filecheck %s --check-prefix=GPU

// The CPU planner around a matmul, where matmuls run on the register-blocked microkernel.

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
// The attention's head merge in front of its output projection: transposed [B, T, H, D]
// and then collapsed to [B*T, H*D], no strided view of memory. Fused, the matmul would
// read A through the transpose as a loop nest of two reduction dims (no microkernel:
// GPT-2's projection at 23 GFLOP/s instead of 60); the transpose stays a kernel of its own,
// a copy, and the collapse, a view, joins the matmul.
// CHECK-LABEL: func.func @head_merge
// CHECK: fusion.group single
// CHECK-NEXT: tensor.empty
// CHECK-NEXT: linalg.transpose
// CHECK: fusion.group epilogue
// CHECK-SAME: matmul-operand: tensor.collapse_shape
// CHECK-NOT: linalg.transpose
// CHECK: linalg.matmul
// On the H200 the matmul is a cuBLASLt call, which reads the transposed operand through a
// layout: there the transpose is no kernel at all (another rule, `gemm-prologue`'s).
// GPU-LABEL: func.func @head_merge
// GPU-NOT: matmul-operand
// GPU: return
func.func @head_merge(%x: tensor<1x4x64x64xf32>, %w: tensor<256x256xf32>, %bias: tensor<256xf32>) -> tensor<64x256xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<1x64x4x64xf32>
  %t = linalg.transpose ins(%x : tensor<1x4x64x64xf32>) outs(%0 : tensor<1x64x4x64xf32>) permutation = [0, 2, 1, 3]
  %c = tensor.collapse_shape %t [[0, 1], [2, 3]] : tensor<1x64x4x64xf32> into tensor<64x256xf32>
  %2 = tensor.empty() : tensor<64x256xf32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<64x256xf32>) -> tensor<64x256xf32>
  %4 = linalg.matmul ins(%c, %w : tensor<64x256xf32>, tensor<256x256xf32>) outs(%3 : tensor<64x256xf32>) -> tensor<64x256xf32>
  %5 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%4, %bias : tensor<64x256xf32>, tensor<256xf32>) outs(%2 : tensor<64x256xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %6 = arith.addf %in, %in_3 : f32
    linalg.yield %6 : f32
  } -> tensor<64x256xf32>
  return %5 : tensor<64x256xf32>
}

// -----

// A transpose the collapse after it keeps a view of (the merged dims stay in order in the
// source: only unit dims moved) is read by the microkernel through strides: it joins the
// matmul's kernel.
// CHECK-LABEL: func.func @unit_transpose_is_a_view
// CHECK-NOT: matmul-operand
// CHECK: fusion.group vertical
// CHECK: linalg.transpose
// CHECK: linalg.matmul
// CHECK-NOT: fusion.group
// CHECK: return
func.func @unit_transpose_is_a_view(%x: tensor<64x1x256xf32>, %w: tensor<256x256xf32>) -> tensor<64x256xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<1x64x256xf32>
  %t = linalg.transpose ins(%x : tensor<64x1x256xf32>) outs(%0 : tensor<1x64x256xf32>) permutation = [1, 0, 2]
  %c = tensor.collapse_shape %t [[0, 1], [2]] : tensor<1x64x256xf32> into tensor<64x256xf32>
  %2 = tensor.empty() : tensor<64x256xf32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<64x256xf32>) -> tensor<64x256xf32>
  %4 = linalg.matmul ins(%c, %w : tensor<64x256xf32>, tensor<256x256xf32>) outs(%3 : tensor<64x256xf32>) -> tensor<64x256xf32>
  return %4 : tensor<64x256xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
// A QKV projection read by three head splits. The splits of Q and K copy the reshape in
// front of their slices (cheap, duplicated); those copies read the projection from outside
// any group, so the projection's value is needed whole and the V split may not take the
// matmul as its prologue: it would compute the whole matmul beside its tile loop (it tiles
// V's third only), on one thread. The matmul and its bias are one kernel of their own,
// with one result; each head split reads it.
// CHECK-LABEL: func.func @qkv_head_splits
// CHECK: fusion.group epilogue
// CHECK-SAME: -> tensor<64x768xf32>
// CHECK: linalg.matmul
// CHECK: fusion.yield %{{.+}} : tensor<64x768xf32>
// CHECK-COUNT-3: fusion.group vertical
// CHECK-NOT: linalg.matmul
// CHECK: return
func.func @qkv_head_splits(%x: tensor<64x256xf32>, %w: tensor<256x768xf32>, %bias: tensor<768xf32>) -> (tensor<1x4x64x64xf32>, tensor<1x4x64x64xf32>, tensor<1x4x64x64xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %2 = tensor.empty() : tensor<64x768xf32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<64x768xf32>) -> tensor<64x768xf32>
  %4 = linalg.matmul ins(%x, %w : tensor<64x256xf32>, tensor<256x768xf32>) outs(%3 : tensor<64x768xf32>) -> tensor<64x768xf32>
  %5 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%4, %bias : tensor<64x768xf32>, tensor<768xf32>) outs(%2 : tensor<64x768xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %6 = arith.addf %in, %in_3 : f32
    linalg.yield %6 : f32
  } -> tensor<64x768xf32>
  %e = tensor.expand_shape %5 [[0, 1], [2]] output_shape [1, 64, 768] : tensor<64x768xf32> into tensor<1x64x768xf32>
  %q = tensor.extract_slice %e[0, 0, 0] [1, 64, 256] [1, 1, 1] : tensor<1x64x768xf32> to tensor<1x64x256xf32>
  %k = tensor.extract_slice %e[0, 0, 256] [1, 64, 256] [1, 1, 1] : tensor<1x64x768xf32> to tensor<1x64x256xf32>
  %v = tensor.extract_slice %e[0, 0, 512] [1, 64, 256] [1, 1, 1] : tensor<1x64x768xf32> to tensor<1x64x256xf32>
  %qh = tensor.expand_shape %q [[0], [1], [2, 3]] output_shape [1, 64, 4, 64] : tensor<1x64x256xf32> into tensor<1x64x4x64xf32>
  %kh = tensor.expand_shape %k [[0], [1], [2, 3]] output_shape [1, 64, 4, 64] : tensor<1x64x256xf32> into tensor<1x64x4x64xf32>
  %vh = tensor.expand_shape %v [[0], [1], [2, 3]] output_shape [1, 64, 4, 64] : tensor<1x64x256xf32> into tensor<1x64x4x64xf32>
  %o = tensor.empty() : tensor<1x4x64x64xf32>
  %qt = linalg.transpose ins(%qh : tensor<1x64x4x64xf32>) outs(%o : tensor<1x4x64x64xf32>) permutation = [0, 2, 1, 3]
  %kt = linalg.transpose ins(%kh : tensor<1x64x4x64xf32>) outs(%o : tensor<1x4x64x64xf32>) permutation = [0, 2, 1, 3]
  %vt = linalg.transpose ins(%vh : tensor<1x64x4x64xf32>) outs(%o : tensor<1x4x64x64xf32>) permutation = [0, 2, 1, 3]
  return %qt, %kt, %vt : tensor<1x4x64x64xf32>, tensor<1x4x64x64xf32>, tensor<1x4x64x64xf32>
}
