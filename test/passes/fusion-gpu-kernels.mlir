// RUN: fusec-opt %s --fusion-gpu-kernels --split-input-file | filecheck %s
// RUN: fusec-opt %s '--fusion-gpu-kernels{gemm=false}' --split-input-file | filecheck %s --check-prefix=NOGEMM
// RUN: fusec-opt %s --fusion-gpu-kernels --fusion-gpu-kernels --split-input-file | filecheck %s --check-prefix=TWICE

// The GPU's kernels and library calls, formed from the fusion stage's groups (first pass of
// target cuda's `tiled` stage). A matmul-rooted group with its bias add becomes one cuBLASLt
// call with the bias in its epilogue: `fusion.path = "gemm"` and why, the decision also in
// the function's notes; the elementwise group after it stays a kernel of ours (no path).
// CHECK-LABEL: func.func @linear
// CHECK-SAME: fusion.gemm_notes = ["matmul-rooted group: cuBLASLt with the fused epilogue bias"]
// CHECK-SAME: fusion.gpu_kernels
// CHECK: fusion.group epilogue
// CHECK-SAME: fusion.gemm_epilogue = "bias"
// CHECK-SAME: fusion.path = "gemm"
// CHECK-SAME: fusion.why = "matmul-rooted group: cuBLASLt with the fused epilogue bias"
// CHECK: linalg.matmul
// CHECK: fusion.group single
// CHECK-NOT: fusion.path
// CHECK: math.exp
// Without the library (gemm=false): no rewrite, no path; the function is marked done.
// NOGEMM-LABEL: func.func @linear
// NOGEMM-SAME: fusion.gemm_notes = []
// NOGEMM-NOT: fusion.path
// NOGEMM: return
// Run twice, the second run changes nothing (the function is marked done).
// TWICE-LABEL: func.func @linear
// TWICE-COUNT-1: fusion.path = "gemm"
// TWICE-NOT: fusion.path
// TWICE: return
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @linear(%x: tensor<64x128xf32>, %w: tensor<128x256xf32>, %b: tensor<256xf32>) -> tensor<64x256xf32> {
  %r = fusion.group epilogue (%a = %x : tensor<64x128xf32>, %ww = %w : tensor<128x256xf32>, %bb = %b : tensor<256xf32>) -> tensor<64x256xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<64x256xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<64x256xf32>) -> tensor<64x256xf32>
    %m = linalg.matmul ins(%a, %ww : tensor<64x128xf32>, tensor<128x256xf32>) outs(%f : tensor<64x256xf32>) -> tensor<64x256xf32>
    %y = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
        ins(%m, %bb : tensor<64x256xf32>, tensor<256xf32>) outs(%e : tensor<64x256xf32>) {
    ^bb0(%in: f32, %bias: f32, %out: f32):
      %t = arith.addf %in, %bias : f32
      linalg.yield %t : f32
    } -> tensor<64x256xf32>
    fusion.yield %y : tensor<64x256xf32>
  }
  %s = fusion.group single (%a = %r : tensor<64x256xf32>) -> tensor<64x256xf32> {
    %e = tensor.empty() : tensor<64x256xf32>
    %y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<64x256xf32>) outs(%e : tensor<64x256xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<64x256xf32>
    fusion.yield %y : tensor<64x256xf32>
  }
  return %s : tensor<64x256xf32>
}

