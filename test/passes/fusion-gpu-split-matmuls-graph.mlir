// RUN: fusec-opt %s --fusion-gpu-kernels | filecheck %s
// RUN: fusec-opt %s "--fusion-gpu-kernels{graph=true}" | filecheck %s --check-prefix=GRAPH

// --fusion-gpu-kernels{graph=true} (`--cuda-graph`, CudaOptions.graph): the
// artifact is replayed as a CUDA graph, so a cuBLASLt call costs its kernels and none of the
// host call overhead (gemm_cost.LIBRARY_GRAPH_CALL_S against LIBRARY_CALL_S).
//
// GPT-2's down projection at 128 tokens (128 x 768 x 3072, bias, cast, residual): without
// graphs ours, the whole chain on its accumulator; in a graph cuBLASLt (bias and cast in
// its epilogue, the residual add a kernel after it), predicted faster there.
// CHECK-LABEL: func.func @down_projection
// CHECK-SAME: fusion.gemm_notes = ["matmul-rooted group: our tensor-core GEMM (1 CTA per SM) with the fused epilogue bias+cast+addf (predicted {{[0-9.]+}} us, cuBLASLt {{[0-9.]+}} us with the kernel after it)"]
// CHECK: fusion.path = "tc_gemm"
// GRAPH-LABEL: func.func @down_projection
// GRAPH-SAME: fusion.gemm_notes = ["matmul-rooted group: cuBLASLt with the fused epilogue bias+cast; cuBLASLt predicted {{[0-9.]+}} us with the kernel after it in a CUDA graph, our tensor-core GEMM {{[0-9.]+}} us"]
// GRAPH: fusion.path = "gemm"
// GRAPH: fusion.split = "epilogue"
//
// What the option must not do: send a GEMM to cuBLASLt where ours is faster on the GPU too
// (4096 x 4096 x 1024, 1024 tiles: the persistent ping-pong kernel, its epilogue fused).
// CHECK-LABEL: func.func @large
// CHECK: fusion.path = "tc_gemm"
// GRAPH-LABEL: func.func @large
// GRAPH-SAME: fusion.gemm_notes = ["matmul-rooted group: our tensor-core GEMM (persistent ping-pong) with the fused epilogue bias+cast+addf (predicted {{[0-9.]+}} us, cuBLASLt {{[0-9.]+}} us with the kernel after it in a CUDA graph)"]
// GRAPH: fusion.path = "tc_gemm"
// GRAPH-NOT: fusion.path = "gemm"
#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d1)>
#map3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map4 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @down_projection(%arg0: tensor<128x3072xbf16>, %arg1: tensor<768x3072xbf16>, %arg2: tensor<768xbf16>, %arg3: tensor<128x768xbf16>) -> tensor<128x768xbf16> {
    %0 = fusion.group epilogue (%arg4 = %arg1 : tensor<768x3072xbf16>, %arg5 = %arg2 : tensor<768xbf16>, %arg6 = %arg0 : tensor<128x3072xbf16>, %arg7 = %arg3 : tensor<128x768xbf16>) -> tensor<128x768xbf16> {
      %cst = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<3072x768xbf16>
      %2 = tensor.empty() : tensor<768xf32>
      %3 = tensor.empty() : tensor<128x3072xf32>
      %4 = tensor.empty() : tensor<3072x768xf32>
      %5 = tensor.empty() : tensor<128x768xf32>
      %6 = tensor.empty() : tensor<128x768xbf16>
      %transposed = linalg.transpose ins(%arg4 : tensor<768x3072xbf16>) outs(%1 : tensor<3072x768xbf16>) permutation = [1, 0] 
      %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg5 : tensor<768xbf16>) outs(%2 : tensor<768xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %15 = arith.extf %in : bf16 to f32
        linalg.yield %15 : f32
      } -> tensor<768xf32>
      %8 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%arg6 : tensor<128x3072xbf16>) outs(%3 : tensor<128x3072xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %15 = arith.extf %in : bf16 to f32
        linalg.yield %15 : f32
      } -> tensor<128x3072xf32>
      %9 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%transposed : tensor<3072x768xbf16>) outs(%4 : tensor<3072x768xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %15 = arith.extf %in : bf16 to f32
        linalg.yield %15 : f32
      } -> tensor<3072x768xf32>
      %10 = linalg.fill ins(%cst : f32) outs(%5 : tensor<128x768xf32>) -> tensor<128x768xf32>
      %11 = linalg.matmul ins(%8, %9 : tensor<128x3072xf32>, tensor<3072x768xf32>) outs(%10 : tensor<128x768xf32>) -> tensor<128x768xf32>
      %12 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel"]} ins(%11, %7 : tensor<128x768xf32>, tensor<768xf32>) outs(%5 : tensor<128x768xf32>) {
      ^bb0(%in: f32, %in_0: f32, %out: f32):
        %15 = arith.addf %in, %in_0 : f32
        linalg.yield %15 : f32
      } -> tensor<128x768xf32>
      %13 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%12 : tensor<128x768xf32>) outs(%6 : tensor<128x768xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %15 = arith.truncf %in : f32 to bf16
        linalg.yield %15 : bf16
      } -> tensor<128x768xbf16>
      %14 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%13, %arg7 : tensor<128x768xbf16>, tensor<128x768xbf16>) outs(%6 : tensor<128x768xbf16>) {
      ^bb0(%in: bf16, %in_0: bf16, %out: bf16):
        %15 = arith.addf %in, %in_0 : bf16
        linalg.yield %15 : bf16
      } -> tensor<128x768xbf16>
      fusion.yield %14 : tensor<128x768xbf16>
    }
    return %0 : tensor<128x768xbf16>
  }
  func.func @large(%arg0: tensor<4096x1024xbf16>, %arg1: tensor<4096x1024xbf16>, %arg2: tensor<4096xbf16>, %arg3: tensor<4096x4096xbf16>) -> tensor<4096x4096xbf16> {
    %0 = fusion.group epilogue (%arg4 = %arg1 : tensor<4096x1024xbf16>, %arg5 = %arg2 : tensor<4096xbf16>, %arg6 = %arg0 : tensor<4096x1024xbf16>, %arg7 = %arg3 : tensor<4096x4096xbf16>) -> tensor<4096x4096xbf16> {
      %cst = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<1024x4096xbf16>
      %2 = tensor.empty() : tensor<4096xf32>
      %3 = tensor.empty() : tensor<4096x1024xf32>
      %4 = tensor.empty() : tensor<1024x4096xf32>
      %5 = tensor.empty() : tensor<4096x4096xf32>
      %6 = tensor.empty() : tensor<4096x4096xbf16>
      %transposed = linalg.transpose ins(%arg4 : tensor<4096x1024xbf16>) outs(%1 : tensor<1024x4096xbf16>) permutation = [1, 0] 
      %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg5 : tensor<4096xbf16>) outs(%2 : tensor<4096xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %15 = arith.extf %in : bf16 to f32
        linalg.yield %15 : f32
      } -> tensor<4096xf32>
      %8 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%arg6 : tensor<4096x1024xbf16>) outs(%3 : tensor<4096x1024xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %15 = arith.extf %in : bf16 to f32
        linalg.yield %15 : f32
      } -> tensor<4096x1024xf32>
      %9 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%transposed : tensor<1024x4096xbf16>) outs(%4 : tensor<1024x4096xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %15 = arith.extf %in : bf16 to f32
        linalg.yield %15 : f32
      } -> tensor<1024x4096xf32>
      %10 = linalg.fill ins(%cst : f32) outs(%5 : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
      %11 = linalg.matmul ins(%8, %9 : tensor<4096x1024xf32>, tensor<1024x4096xf32>) outs(%10 : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
      %12 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel"]} ins(%11, %7 : tensor<4096x4096xf32>, tensor<4096xf32>) outs(%5 : tensor<4096x4096xf32>) {
      ^bb0(%in: f32, %in_0: f32, %out: f32):
        %15 = arith.addf %in, %in_0 : f32
        linalg.yield %15 : f32
      } -> tensor<4096x4096xf32>
      %13 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%12 : tensor<4096x4096xf32>) outs(%6 : tensor<4096x4096xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %15 = arith.truncf %in : f32 to bf16
        linalg.yield %15 : bf16
      } -> tensor<4096x4096xbf16>
      %14 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%13, %arg7 : tensor<4096x4096xbf16>, tensor<4096x4096xbf16>) outs(%6 : tensor<4096x4096xbf16>) {
      ^bb0(%in: bf16, %in_0: bf16, %out: bf16):
        %15 = arith.addf %in, %in_0 : bf16
        linalg.yield %15 : bf16
      } -> tensor<4096x4096xbf16>
      fusion.yield %14 : tensor<4096x4096xbf16>
    }
    return %0 : tensor<4096x4096xbf16>
  }
}
