// RUN: fusec-opt %s --split-input-file --fusion-gpu-kernels "--fusion-gpu-choose-tiles{tuning=off gemm-schedule=ping-pong}" | filecheck %s --check-prefix=PP
// RUN: fusec-opt %s --split-input-file --fusion-gpu-kernels "--fusion-gpu-choose-tiles{tuning=off gemm-schedule=one-warpgroup}" | filecheck %s --check-prefix=ONE
// RUN: fusec-opt %s --split-input-file --fusion-gpu-kernels "--fusion-gpu-choose-tiles{tuning=off}" | filecheck %s --check-prefix=MODEL

// --fusion-gpu-choose-tiles{gemm-schedule=...} (`--cuda-gemm-schedule`): every GEMM of ours
// takes that schedule's first candidate tile. The persistent ping-pong schedule (a fifth
// value, 1) only where the 128 x 128 tiles at least fill the H200's 132 SMs; elsewhere the
// model's tile, and the reason is said. The model itself (gemm_cost.tc_gemm_tile) takes
// ping-pong where a round of one tile per SM with one exposed fill and epilogue beats the
// one-warpgroup kernel's waves, each with its own, and never with fewer tiles than SMs.

// Linear + bias, 8192 x 768 output (K 3072): 384 tiles. Ping-pong: 128 x 128, 4 stages, schedule 1.
// PP-LABEL: func.func @linear_bias_8192
// PP: fusion.kernel_tile = array<i64: 128, 128, 64, 4, 1>
// PP-SAME: fusion.kernel_tile_from = "--cuda-gemm-schedule ping-pong"
// ONE-LABEL: func.func @linear_bias_8192
// ONE: fusion.kernel_tile = array<i64: 128, 128, 64, 4>
// ONE-SAME: fusion.kernel_tile_from = "--cuda-gemm-schedule one-warpgroup"
// MODEL-LABEL: func.func @linear_bias_8192
// MODEL: fusion.kernel_tile = array<i64: 128, 128, 64, 4, 1>
// MODEL-SAME: fusion.kernel_tile_from = "cost model"
// MODEL-SAME: fusion.why = "matmul-rooted group: our tensor-core GEMM (persistent ping-pong) with the fused epilogue cast+bias
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
module attributes {fusion.torch_signature = "{\22inputs\22: [{\22name\22: \22x\22, \22dtype\22: \22bfloat16\22}, {\22name\22: \22w\22, \22dtype\22: \22bfloat16\22}, {\22name\22: \22b\22, \22dtype\22: \22bfloat16\22}], \22outputs\22: [{\22dtype\22: \22bfloat16\22}]}"} {
  func.func @linear_bias_8192(%arg0: tensor<8192x3072xbf16>, %arg1: tensor<768x3072xbf16>, %arg2: tensor<768xbf16>) -> tensor<8192x768xbf16> {
    %0 = fusion.group epilogue (%arg3 = %arg1 : tensor<768x3072xbf16>, %arg4 = %arg0 : tensor<8192x3072xbf16>, %arg5 = %arg2 : tensor<768xbf16>) -> tensor<8192x768xbf16> attributes {fusion.bytes_fused = 852736 : i64, fusion.bytes_unfused = 5964544 : i64, fusion.device = "nvidia-h200", fusion.flops = 102236160 : i64, fusion.launches_saved = 5 : i64, fusion.parallel_tiles = 196608 : i64, fusion.reason = "6 ops in one kernel: saves 5 launches and 5111808 bytes of memory traffic", fusion.tile_dims = [0, 1], fusion.time_fused_ns = 4201 : i64, fusion.time_unfused_ns = 25403 : i64, fusion.working_set = 0 : i64} {
      %cst = arith.constant 5.000000e-01 : bf16
      %cst_0 = arith.constant 1.000000e+00 : bf16
      %cst_1 = arith.constant 2.000000e+00 : bf16
      %cst_2 = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<3072x768xbf16>
      %2 = tensor.empty() : tensor<8192x768xf32>
      %3 = tensor.empty() : tensor<8192x768xbf16>
      %transposed = linalg.transpose ins(%arg3 : tensor<768x3072xbf16>) outs(%1 : tensor<3072x768xbf16>) permutation = [1, 0] 
      %4 = linalg.fill ins(%cst_2 : f32) outs(%2 : tensor<8192x768xf32>) -> tensor<8192x768xf32>
      %5 = linalg.matmul ins(%arg4, %transposed : tensor<8192x3072xbf16>, tensor<3072x768xbf16>) outs(%4 : tensor<8192x768xf32>) -> tensor<8192x768xf32>
      %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%5 : tensor<8192x768xf32>) outs(%3 : tensor<8192x768xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %9 = arith.truncf %in : f32 to bf16
        linalg.yield %9 : bf16
      } -> tensor<8192x768xbf16>
      %7 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%6, %arg5 : tensor<8192x768xbf16>, tensor<768xbf16>) outs(%3 : tensor<8192x768xbf16>) {
      ^bb0(%in: bf16, %in_3: bf16, %out: bf16):
        %9 = arith.addf %in, %in_3 : bf16
        linalg.yield %9 : bf16
      } -> tensor<8192x768xbf16>
      fusion.yield %7 : tensor<8192x768xbf16>
    }
    return %0 : tensor<8192x768xbf16>
  }
}

// -----

// 512 x 384: 12 tiles, fewer than the SMs: no CTA would have a second tile to overlap.
// They fill at most half the SMs: the model's tile is 64 x 128 (gemm_cost.TC_SMALL_GRID_TILE).
// PP-LABEL: func.func @linear_gelu
// PP: fusion.kernel_tile = array<i64: 64, 128, 64, 4>
// PP-SAME: fusion.kernel_tile_from = "cost model (--cuda-gemm-schedule ping-pong: this GEMM has no such tile: fewer tiles than SMs)"
// MODEL-LABEL: func.func @linear_gelu
// MODEL: fusion.kernel_tile = array<i64: 64, 128, 64, 4>
// MODEL-SAME: fusion.kernel_tile_from = "cost model"
// MODEL-SAME: fusion.why = "matmul-rooted group: our tensor-core GEMM (1 CTA per SM)
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
module attributes {fusion.torch_signature = "{\22inputs\22: [{\22name\22: \22x\22, \22dtype\22: \22bfloat16\22}, {\22name\22: \22w\22, \22dtype\22: \22bfloat16\22}, {\22name\22: \22b\22, \22dtype\22: \22bfloat16\22}], \22outputs\22: [{\22dtype\22: \22bfloat16\22}]}"} {
  func.func @linear_gelu(%arg0: tensor<512x256xbf16>, %arg1: tensor<384x256xbf16>, %arg2: tensor<384xbf16>) -> tensor<512x384xbf16> {
    %0 = fusion.group epilogue (%arg3 = %arg1 : tensor<384x256xbf16>, %arg4 = %arg0 : tensor<512x256xbf16>, %arg5 = %arg2 : tensor<384xbf16>) -> tensor<512x384xbf16> attributes {fusion.bytes_fused = 852736 : i64, fusion.bytes_unfused = 5964544 : i64, fusion.device = "nvidia-h200", fusion.flops = 102236160 : i64, fusion.launches_saved = 5 : i64, fusion.parallel_tiles = 196608 : i64, fusion.reason = "6 ops in one kernel: saves 5 launches and 5111808 bytes of memory traffic", fusion.tile_dims = [0, 1], fusion.time_fused_ns = 4201 : i64, fusion.time_unfused_ns = 25403 : i64, fusion.working_set = 0 : i64} {
      %cst = arith.constant 5.000000e-01 : bf16
      %cst_0 = arith.constant 1.000000e+00 : bf16
      %cst_1 = arith.constant 2.000000e+00 : bf16
      %cst_2 = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<256x384xbf16>
      %2 = tensor.empty() : tensor<512x384xf32>
      %3 = tensor.empty() : tensor<512x384xbf16>
      %transposed = linalg.transpose ins(%arg3 : tensor<384x256xbf16>) outs(%1 : tensor<256x384xbf16>) permutation = [1, 0] 
      %4 = linalg.fill ins(%cst_2 : f32) outs(%2 : tensor<512x384xf32>) -> tensor<512x384xf32>
      %5 = linalg.matmul ins(%arg4, %transposed : tensor<512x256xbf16>, tensor<256x384xbf16>) outs(%4 : tensor<512x384xf32>) -> tensor<512x384xf32>
      %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%5 : tensor<512x384xf32>) outs(%3 : tensor<512x384xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %9 = arith.truncf %in : f32 to bf16
        linalg.yield %9 : bf16
      } -> tensor<512x384xbf16>
      %7 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%6, %arg5 : tensor<512x384xbf16>, tensor<384xbf16>) outs(%3 : tensor<512x384xbf16>) {
      ^bb0(%in: bf16, %in_3: bf16, %out: bf16):
        %9 = arith.addf %in, %in_3 : bf16
        linalg.yield %9 : bf16
      } -> tensor<512x384xbf16>
      %8 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%7 : tensor<512x384xbf16>) outs(%3 : tensor<512x384xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        %9 = math.sqrt %cst_1 : bf16
        %10 = arith.divf %in, %9 : bf16
        %11 = math.erf %10 : bf16
        %12 = arith.addf %11, %cst_0 : bf16
        %13 = arith.mulf %12, %cst : bf16
        %14 = arith.mulf %in, %13 : bf16
        linalg.yield %14 : bf16
      } -> tensor<512x384xbf16>
      fusion.yield %8 : tensor<512x384xbf16>
    }
    return %0 : tensor<512x384xbf16>
  }
}

// -----

// Linear + bias, 8192 x 4096 x 4096: 32 x 32 tiles of 256 x 128, more than the SMs, and a
// long K. The model takes the cooperative schedule (a fifth value, 2: 256 x 128 tiles, both
// consumers on each, 4 stages; measured 0.98x cuBLAS on an H100) over ping-pong and one
// warpgroup; forced schedules take theirs.
// MODEL-LABEL: func.func @linear_bias_large
// MODEL: fusion.kernel_tile = array<i64: 256, 128, 64, 4, 2>
// MODEL-SAME: fusion.kernel_tile_from = "cost model"
// MODEL-SAME: fusion.why = "matmul-rooted group: our tensor-core GEMM (persistent cooperative) with the fused epilogue cast+bias
// PP-LABEL: func.func @linear_bias_large
// PP: fusion.kernel_tile = array<i64: 128, 128, 64, 4, 1>
// ONE-LABEL: func.func @linear_bias_large
// ONE: fusion.kernel_tile = array<i64: 128, 128, 64, 3>
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
module attributes {fusion.torch_signature = "{\22inputs\22: [{\22name\22: \22x\22, \22dtype\22: \22bfloat16\22}, {\22name\22: \22w\22, \22dtype\22: \22bfloat16\22}, {\22name\22: \22b\22, \22dtype\22: \22bfloat16\22}], \22outputs\22: [{\22dtype\22: \22bfloat16\22}]}"} {
  func.func @linear_bias_large(%arg0: tensor<8192x4096xbf16>, %arg1: tensor<4096x4096xbf16>, %arg2: tensor<4096xbf16>) -> tensor<8192x4096xbf16> {
    %0 = fusion.group epilogue (%arg3 = %arg1 : tensor<4096x4096xbf16>, %arg4 = %arg0 : tensor<8192x4096xbf16>, %arg5 = %arg2 : tensor<4096xbf16>) -> tensor<8192x4096xbf16> attributes {fusion.bytes_fused = 852736 : i64, fusion.bytes_unfused = 5964544 : i64, fusion.device = "nvidia-h200", fusion.flops = 102236160 : i64, fusion.launches_saved = 5 : i64, fusion.parallel_tiles = 196608 : i64, fusion.reason = "6 ops in one kernel: saves 5 launches and 5111808 bytes of memory traffic", fusion.tile_dims = [0, 1], fusion.time_fused_ns = 4201 : i64, fusion.time_unfused_ns = 25403 : i64, fusion.working_set = 0 : i64} {
      %cst = arith.constant 5.000000e-01 : bf16
      %cst_0 = arith.constant 1.000000e+00 : bf16
      %cst_1 = arith.constant 2.000000e+00 : bf16
      %cst_2 = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<4096x4096xbf16>
      %2 = tensor.empty() : tensor<8192x4096xf32>
      %3 = tensor.empty() : tensor<8192x4096xbf16>
      %transposed = linalg.transpose ins(%arg3 : tensor<4096x4096xbf16>) outs(%1 : tensor<4096x4096xbf16>) permutation = [1, 0] 
      %4 = linalg.fill ins(%cst_2 : f32) outs(%2 : tensor<8192x4096xf32>) -> tensor<8192x4096xf32>
      %5 = linalg.matmul ins(%arg4, %transposed : tensor<8192x4096xbf16>, tensor<4096x4096xbf16>) outs(%4 : tensor<8192x4096xf32>) -> tensor<8192x4096xf32>
      %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%5 : tensor<8192x4096xf32>) outs(%3 : tensor<8192x4096xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %9 = arith.truncf %in : f32 to bf16
        linalg.yield %9 : bf16
      } -> tensor<8192x4096xbf16>
      %7 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%6, %arg5 : tensor<8192x4096xbf16>, tensor<4096xbf16>) outs(%3 : tensor<8192x4096xbf16>) {
      ^bb0(%in: bf16, %in_3: bf16, %out: bf16):
        %9 = arith.addf %in, %in_3 : bf16
        linalg.yield %9 : bf16
      } -> tensor<8192x4096xbf16>
      fusion.yield %7 : tensor<8192x4096xbf16>
    }
    return %0 : tensor<8192x4096xbf16>
  }
}
