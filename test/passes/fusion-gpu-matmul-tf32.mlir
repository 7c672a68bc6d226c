// RUN: fusec-opt %s --fusion-gpu-matmul-tf32 | filecheck %s
// RUN: fusec-opt %s '--fusion-gpu-kernels{matmul-tf32=true}' | filecheck %s --check-prefix=KERNELS
// RUN: fusec-opt %s --fusion-gpu-kernels | filecheck %s --check-prefix=EXACT

// torch.backends.cuda.matmul.allow_tf32 (CudaOptions.matmul_tf32): every fp32 matmul in a
// group is marked `fusion.tf32`, so the GEMM library computes it with TF32 operands. An
// f64 matmul and a bf16 one (its operands 16-bit, the accumulator f32) are not fp32
// matmuls: left exact.
// CHECK-LABEL: func.func @main
// CHECK: linalg.matmul {fusion.tf32} ins({{.*}} : tensor<64x128xf32>, tensor<128x256xf32>)
// CHECK: linalg.batch_matmul {fusion.tf32} ins({{.*}} : tensor<2x64x128xf32>, tensor<2x128x32xf32>)
// CHECK: linalg.matmul ins({{.*}} : tensor<64x128xf64>
// CHECK: linalg.matmul ins({{.*}} : tensor<64x128xbf16>
// CHECK-NOT: fusion.tf32
//
// Through the tiled stage's first pass, asked for: the fp32 matmuls keep the mark on their
// cuBLASLt calls (gemm.py reads it: CUBLAS_COMPUTE_32F_FAST_TF32).
// KERNELS-LABEL: func.func @main
// KERNELS: fusion.path = "gemm"
// KERNELS: linalg.matmul {fusion.tf32}
// KERNELS: linalg.batch_matmul {fusion.tf32}
// Not asked for (torch's default): exact fp32, nothing marked.
// EXACT-LABEL: func.func @main
// EXACT-NOT: fusion.tf32
// EXACT: return
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @main(%arg0: tensor<64x128xf32>, %arg1: tensor<128x256xf32>, %arg2: tensor<256xf32>, %b0: tensor<2x64x128xf32>, %b1: tensor<2x128x32xf32>, %d0: tensor<64x128xf64>, %d1: tensor<128x32xf64>, %h0: tensor<64x128xbf16>, %h1: tensor<128x32xbf16>) -> (tensor<64x256xf32>, tensor<2x64x32xf32>, tensor<64x32xf64>, tensor<64x32xf32>) {
    %0 = fusion.group epilogue (%arg4 = %arg0 : tensor<64x128xf32>, %arg5 = %arg1 : tensor<128x256xf32>, %arg6 = %arg2 : tensor<256xf32>) -> tensor<64x256xf32> {
      %cst = arith.constant 0.000000e+00 : f32
      %3 = tensor.empty() : tensor<64x256xf32>
      %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<64x256xf32>) -> tensor<64x256xf32>
      %5 = linalg.matmul ins(%arg4, %arg5 : tensor<64x128xf32>, tensor<128x256xf32>) outs(%4 : tensor<64x256xf32>) -> tensor<64x256xf32>
      %6 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%5, %arg6 : tensor<64x256xf32>, tensor<256xf32>) outs(%3 : tensor<64x256xf32>) {
      ^bb0(%in: f32, %in_0: f32, %out: f32):
        %8 = arith.addf %in, %in_0 : f32
        linalg.yield %8 : f32
      } -> tensor<64x256xf32>
      fusion.yield %6 : tensor<64x256xf32>
    }
    %1 = fusion.group single (%a = %b0 : tensor<2x64x128xf32>, %b = %b1 : tensor<2x128x32xf32>) -> tensor<2x64x32xf32> {
      %cst = arith.constant 0.000000e+00 : f32
      %3 = tensor.empty() : tensor<2x64x32xf32>
      %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<2x64x32xf32>) -> tensor<2x64x32xf32>
      %5 = linalg.batch_matmul ins(%a, %b : tensor<2x64x128xf32>, tensor<2x128x32xf32>) outs(%4 : tensor<2x64x32xf32>) -> tensor<2x64x32xf32>
      fusion.yield %5 : tensor<2x64x32xf32>
    }
    %2 = fusion.group single (%a = %d0 : tensor<64x128xf64>, %b = %d1 : tensor<128x32xf64>) -> tensor<64x32xf64> {
      %cst = arith.constant 0.000000e+00 : f64
      %3 = tensor.empty() : tensor<64x32xf64>
      %4 = linalg.fill ins(%cst : f64) outs(%3 : tensor<64x32xf64>) -> tensor<64x32xf64>
      %5 = linalg.matmul ins(%a, %b : tensor<64x128xf64>, tensor<128x32xf64>) outs(%4 : tensor<64x32xf64>) -> tensor<64x32xf64>
      fusion.yield %5 : tensor<64x32xf64>
    }
    %7 = fusion.group single (%a = %h0 : tensor<64x128xbf16>, %b = %h1 : tensor<128x32xbf16>) -> tensor<64x32xf32> {
      %cst = arith.constant 0.000000e+00 : f32
      %3 = tensor.empty() : tensor<64x32xf32>
      %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<64x32xf32>) -> tensor<64x32xf32>
      %5 = linalg.matmul ins(%a, %b : tensor<64x128xbf16>, tensor<128x32xbf16>) outs(%4 : tensor<64x32xf32>) -> tensor<64x32xf32>
      fusion.yield %5 : tensor<64x32xf32>
    }
    return %0, %1, %2, %7 : tensor<64x256xf32>, tensor<2x64x32xf32>, tensor<64x32xf64>, tensor<64x32xf32>
  }
}
