// RUN: fusec-opt %s --split-input-file --fusion-gpu-kernels "--fusion-gpu-choose-tiles{tuning=off}" | filecheck %s --check-prefix=MODEL
// RUN: fusec-opt %s --split-input-file --fusion-gpu-kernels "--fusion-gpu-choose-tiles{tuning=%S/Inputs/tuning-cache.json}" | filecheck %s --check-prefix=CACHE
// RUN: fusec-opt %s --split-input-file --fusion-gpu-kernels "--fusion-gpu-choose-tiles{tuning=off candidate=3}" | filecheck %s --check-prefix=CAND
// RUN: not fusec-opt %s --split-input-file --fusion-gpu-kernels "--fusion-gpu-choose-tiles{tuning=%S/Inputs}" 2>&1 | filecheck %s --check-prefix=BAD

// --fusion-gpu-choose-tiles: the tile of each of our tensor-core GEMMs and attention
// kernels, recorded on its group with where it came from (the cost model, or the tuning
// cache `fusec --tune` wrote: Inputs/tuning-cache.json), the key the cache knows the
// kernel by (its shape, types, epilogue or mask: what its time depends on), how many
// candidate tiles --tune measures and the model's predicted time for its own tile.
// A cache entry for another device, or with a tile this kernel cannot take, is not used;
// a cuBLASLt call has no tile of ours.

// Linear + bias + GELU in bf16: our GEMM, 64 x 128 with 4 stages by the model (its twelve
// 128 x 128 tiles would fill at most half the SMs: gemm_cost.TC_SMALL_GRID_TILE).
// MODEL-LABEL: func.func @linear_gelu
// MODEL: fusion.group epilogue
// MODEL-SAME: fusion.kernel_tile = array<i64: 64, 128, 64, 4>
// MODEL-SAME: fusion.kernel_tile_candidates = 6 : i64
// MODEL-SAME: fusion.kernel_tile_from = "cost model"
// MODEL-SAME: fusion.kernel_tile_predicted_ns = {{[0-9]+}} : i64
// MODEL-SAME: fusion.path = "tc_gemm"
// MODEL-SAME: fusion.tune_key = "tc_gemm m=512 n=384 k=256 a=bf16 out=bf16 b=nk epilogue=cast+bias+gelu"
// The cache's entry for this kernel on the H200 (not the one for "cpu"): 64 x 256, 2 stages.
// CACHE-LABEL: func.func @linear_gelu
// CACHE: fusion.kernel_tile = array<i64: 64, 256, 64, 2>
// CACHE-SAME: fusion.kernel_tile_from = "tuned: 9.5 us measured, the cost model's tile [128, 128, 64, 4] 11.0 us"
// --tune's build of candidate 3: the fourth tile of the candidate list.
// CAND-LABEL: func.func @linear_gelu
// CAND: fusion.kernel_tile = array<i64: 64, 256, 64, 4>
// CAND-SAME: fusion.kernel_tile_from = "candidate 3 (--tune)"
// A cache path that is not a tuning cache is an error, not the model's tiles in silence.
// BAD: error: {{.*}}Inputs: not a fusec tuning cache
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

// Causal attention, d 64: 64 query rows, key tiles of 128, 2 stages by the model. The
// cache's tile for it (key tiles of 32) is none of its candidates: the model's stays, and
// the reason is said.
// MODEL-LABEL: func.func @causal_attention
// MODEL: fusion.group attention
// MODEL-SAME: fusion.kernel_tile = array<i64: 64, 128, 2>
// MODEL-SAME: fusion.kernel_tile_candidates = 6 : i64
// MODEL-SAME: fusion.kernel_tile_from = "cost model"
// MODEL-SAME: fusion.tune_key = "attention batch=8 q=256 kv=256 d=64 el=bf16 out=bf16 mask=computed causal=0"
// CACHE-LABEL: func.func @causal_attention
// CACHE: fusion.kernel_tile = array<i64: 64, 128, 2>
// CACHE-SAME: fusion.kernel_tile_from = "cost model (the tuning cache's tile [64, 32, 2] is not one of this kernel's candidates)"
// Six candidates (64 or 128 query rows, key tiles of 128 and 64, two or three stages where
// the keys fill them): --tune's build of candidate 3 gives it two warpgroups of 64 rows.
// CAND-LABEL: func.func @causal_attention
// CAND: fusion.kernel_tile = array<i64: 128, 128, 2>
// CAND-SAME: fusion.kernel_tile_from = "candidate 3 (--tune)"
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map2 = affine_map<(d0) -> (d0)>
#map3 = affine_map<(d0, d1) -> (d0, 0)>
#map4 = affine_map<(d0, d1) -> (0, d1)>
#map5 = affine_map<(d0, d1) -> (d0, d1)>
#map6 = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
#map7 = affine_map<(d0, d1, d2, d3) -> ()>
#map8 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map9 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module attributes {fusion.torch_signature = "{\22inputs\22: [{\22name\22: \22q\22, \22dtype\22: \22bfloat16\22}, {\22name\22: \22k\22, \22dtype\22: \22bfloat16\22}, {\22name\22: \22v\22, \22dtype\22: \22bfloat16\22}], \22outputs\22: [{\22dtype\22: \22bfloat16\22}]}"} {
  func.func @causal_attention(%arg0: tensor<2x4x256x64xbf16>, %arg1: tensor<2x4x256x64xbf16>, %arg2: tensor<2x4x256x64xbf16>) -> tensor<2x4x256x64xbf16> {
    %0 = fusion.group attention (%arg3 = %arg1 : tensor<2x4x256x64xbf16>, %arg4 = %arg0 : tensor<2x4x256x64xbf16>, %arg5 = %arg2 : tensor<2x4x256x64xbf16>) -> tensor<2x4x256x64xbf16> attributes {fusion.attention = {batch = 8 : i64, dtype = "bf16", head_dim = 64 : i64, kv_len = 256 : i64, mask = "computed", masked_rows = "nan", q_len = 256 : i64, score_ops = 3 : i64, v_dim = 64 : i64}, fusion.device = "nvidia-h200", fusion.path = "attention", fusion.reason = "attention: Q K^T, the score ops, softmax and P V in one kernel (online softmax: the scores never reach memory)"} {
      %cst = arith.constant 0xFF800000 : f32
      %c0_i64 = arith.constant 0 : i64
      %cst_0 = arith.constant dense<0xFF80> : tensor<bf16>
      %cst_1 = arith.constant 1.250000e-01 : bf16
      %cst_2 = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<2x4x64x256xbf16>
      %2 = tensor.empty() : tensor<8x256x256xf32>
      %3 = tensor.empty() : tensor<8x256x256xbf16>
      %4 = tensor.empty() : tensor<2x4x256x256xbf16>
      %5 = tensor.empty() : tensor<256xi64>
      %6 = tensor.empty() : tensor<256x256xi1>
      %7 = tensor.empty() : tensor<2x4x256x256xf32>
      %8 = tensor.empty() : tensor<2x4x256xi64>
      %9 = tensor.empty() : tensor<2x4x256xf32>
      %10 = tensor.empty() : tensor<2x4x256x1xf32>
      %11 = tensor.empty() : tensor<8x256x64xf32>
      %12 = tensor.empty() : tensor<8x256x64xbf16>
      %transposed = linalg.transpose ins(%arg3 : tensor<2x4x256x64xbf16>) outs(%1 : tensor<2x4x64x256xbf16>) permutation = [0, 1, 3, 2] 
      %collapsed = tensor.collapse_shape %arg4 [[0, 1], [2], [3]] : tensor<2x4x256x64xbf16> into tensor<8x256x64xbf16>
      %collapsed_3 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<2x4x64x256xbf16> into tensor<8x64x256xbf16>
      %13 = linalg.fill ins(%cst_2 : f32) outs(%2 : tensor<8x256x256xf32>) -> tensor<8x256x256xf32>
      %14 = linalg.batch_matmul ins(%collapsed, %collapsed_3 : tensor<8x256x64xbf16>, tensor<8x64x256xbf16>) outs(%13 : tensor<8x256x256xf32>) -> tensor<8x256x256xf32>
      %15 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%14 : tensor<8x256x256xf32>) outs(%3 : tensor<8x256x256xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %33 = arith.truncf %in : f32 to bf16
        linalg.yield %33 : bf16
      } -> tensor<8x256x256xbf16>
      %expanded = tensor.expand_shape %15 [[0, 1], [2], [3]] output_shape [2, 4, 256, 256] : tensor<8x256x256xbf16> into tensor<2x4x256x256xbf16>
      %16 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<2x4x256x256xbf16>) outs(%4 : tensor<2x4x256x256xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        %33 = arith.mulf %in, %cst_1 : bf16
        linalg.yield %33 : bf16
      } -> tensor<2x4x256x256xbf16>
      %17 = linalg.generic {indexing_maps = [#map2], iterator_types = ["parallel"]} outs(%5 : tensor<256xi64>) {
      ^bb0(%out: i64):
        %33 = linalg.index 0 : index
        %34 = arith.index_cast %33 : index to i64
        linalg.yield %34 : i64
      } -> tensor<256xi64>
      %expanded_4 = tensor.expand_shape %17 [[0, 1]] output_shape [256, 1] : tensor<256xi64> into tensor<256x1xi64>
      %expanded_5 = tensor.expand_shape %17 [[0, 1]] output_shape [1, 256] : tensor<256xi64> into tensor<1x256xi64>
      %18 = linalg.generic {indexing_maps = [#map3, #map4, #map5], iterator_types = ["parallel", "parallel"]} ins(%expanded_4, %expanded_5 : tensor<256x1xi64>, tensor<1x256xi64>) outs(%6 : tensor<256x256xi1>) {
      ^bb0(%in: i64, %in_10: i64, %out: i1):
        %33 = arith.cmpi sge, %in, %in_10 : i64
        linalg.yield %33 : i1
      } -> tensor<256x256xi1>
      %19 = linalg.generic {indexing_maps = [#map6, #map1, #map7, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%18, %16, %cst_0 : tensor<256x256xi1>, tensor<2x4x256x256xbf16>, tensor<bf16>) outs(%4 : tensor<2x4x256x256xbf16>) {
      ^bb0(%in: i1, %in_10: bf16, %in_11: bf16, %out: bf16):
        %33 = arith.select %in, %in_10, %in_11 : bf16
        linalg.yield %33 : bf16
      } -> tensor<2x4x256x256xbf16>
      %20 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%19 : tensor<2x4x256x256xbf16>) outs(%7 : tensor<2x4x256x256xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %33 = arith.extf %in : bf16 to f32
        linalg.yield %33 : f32
      } -> tensor<2x4x256x256xf32>
      %21 = linalg.fill ins(%c0_i64 : i64) outs(%8 : tensor<2x4x256xi64>) -> tensor<2x4x256xi64>
      %22 = linalg.fill ins(%cst : f32) outs(%9 : tensor<2x4x256xf32>) -> tensor<2x4x256xf32>
      %23:2 = linalg.generic {indexing_maps = [#map1, #map8, #map8], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%20 : tensor<2x4x256x256xf32>) outs(%22, %21 : tensor<2x4x256xf32>, tensor<2x4x256xi64>) {
      ^bb0(%in: f32, %out: f32, %out_10: i64):
        %33 = linalg.index 3 : index
        %34 = arith.index_cast %33 : index to i64
        %35 = arith.maximumf %in, %out : f32
        %36 = arith.cmpf ogt, %in, %out : f32
        %37 = arith.select %36, %34, %out_10 : i64
        linalg.yield %35, %37 : f32, i64
      } -> (tensor<2x4x256xf32>, tensor<2x4x256xi64>)
      %expanded_6 = tensor.expand_shape %23#0 [[0], [1], [2, 3]] output_shape [2, 4, 256, 1] : tensor<2x4x256xf32> into tensor<2x4x256x1xf32>
      %24 = linalg.generic {indexing_maps = [#map1, #map9, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%20, %expanded_6 : tensor<2x4x256x256xf32>, tensor<2x4x256x1xf32>) outs(%7 : tensor<2x4x256x256xf32>) {
      ^bb0(%in: f32, %in_10: f32, %out: f32):
        %33 = arith.subf %in, %in_10 : f32
        linalg.yield %33 : f32
      } -> tensor<2x4x256x256xf32>
      %25 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%24 : tensor<2x4x256x256xf32>) outs(%7 : tensor<2x4x256x256xf32>) {
      ^bb0(%in: f32, %out: f32):
        %33 = math.exp %in : f32
        linalg.yield %33 : f32
      } -> tensor<2x4x256x256xf32>
      %26 = linalg.fill ins(%cst_2 : f32) outs(%10 : tensor<2x4x256x1xf32>) -> tensor<2x4x256x1xf32>
      %27 = linalg.generic {indexing_maps = [#map1, #map9], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%25 : tensor<2x4x256x256xf32>) outs(%26 : tensor<2x4x256x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %33 = arith.addf %in, %out : f32
        linalg.yield %33 : f32
      } -> tensor<2x4x256x1xf32>
      %28 = linalg.generic {indexing_maps = [#map1, #map9, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%25, %27 : tensor<2x4x256x256xf32>, tensor<2x4x256x1xf32>) outs(%7 : tensor<2x4x256x256xf32>) {
      ^bb0(%in: f32, %in_10: f32, %out: f32):
        %33 = arith.divf %in, %in_10 : f32
        linalg.yield %33 : f32
      } -> tensor<2x4x256x256xf32>
      %29 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%28 : tensor<2x4x256x256xf32>) outs(%4 : tensor<2x4x256x256xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %33 = arith.truncf %in : f32 to bf16
        linalg.yield %33 : bf16
      } -> tensor<2x4x256x256xbf16>
      %collapsed_7 = tensor.collapse_shape %29 [[0, 1], [2], [3]] : tensor<2x4x256x256xbf16> into tensor<8x256x256xbf16>
      %collapsed_8 = tensor.collapse_shape %arg5 [[0, 1], [2], [3]] : tensor<2x4x256x64xbf16> into tensor<8x256x64xbf16>
      %30 = linalg.fill ins(%cst_2 : f32) outs(%11 : tensor<8x256x64xf32>) -> tensor<8x256x64xf32>
      %31 = linalg.batch_matmul ins(%collapsed_7, %collapsed_8 : tensor<8x256x256xbf16>, tensor<8x256x64xbf16>) outs(%30 : tensor<8x256x64xf32>) -> tensor<8x256x64xf32>
      %32 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%31 : tensor<8x256x64xf32>) outs(%12 : tensor<8x256x64xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %33 = arith.truncf %in : f32 to bf16
        linalg.yield %33 : bf16
      } -> tensor<8x256x64xbf16>
      %expanded_9 = tensor.expand_shape %32 [[0, 1], [2], [3]] output_shape [2, 4, 256, 64] : tensor<8x256x64xbf16> into tensor<2x4x256x64xbf16>
      fusion.yield %expanded_9 : tensor<2x4x256x64xbf16>
    }
    return %0 : tensor<2x4x256x64xbf16>
  }
}

// -----

// An f32 matmul is a cuBLASLt call: no tile of ours, nothing to tune.
// MODEL-LABEL: func.func @f32_matmul
// MODEL: fusion.path = "gemm"
// MODEL-NOT: fusion.kernel_tile
// MODEL: return
module attributes {fusion.torch_signature = "{\22inputs\22: [{\22name\22: \22x\22, \22dtype\22: \22float32\22}, {\22name\22: \22w\22, \22dtype\22: \22float32\22}], \22outputs\22: [{\22dtype\22: \22float32\22}]}"} {
  func.func @f32_matmul(%arg0: tensor<128x64xf32>, %arg1: tensor<64x96xf32>) -> tensor<128x96xf32> {
    %0 = fusion.group single (%arg2 = %arg0 : tensor<128x64xf32>, %arg3 = %arg1 : tensor<64x96xf32>) -> tensor<128x96xf32> attributes {fusion.bytes_fused = 106496 : i64, fusion.bytes_unfused = 204800 : i64, fusion.device = "nvidia-h200", fusion.flops = 1572864 : i64, fusion.launches_saved = 1 : i64, fusion.parallel_tiles = 12288 : i64, fusion.reason = "2 ops in one kernel: saves 1 launches and 98304 bytes of memory traffic", fusion.tile_dims = [0, 1], fusion.time_fused_ns = 4025 : i64, fusion.time_unfused_ns = 8048 : i64, fusion.working_set = 0 : i64} {
      %cst = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<128x96xf32>
      %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<128x96xf32>) -> tensor<128x96xf32>
      %3 = linalg.matmul ins(%arg2, %arg3 : tensor<128x64xf32>, tensor<64x96xf32>) outs(%2 : tensor<128x96xf32>) -> tensor<128x96xf32>
      fusion.yield %3 : tensor<128x96xf32>
    }
    return %0 : tensor<128x96xf32>
  }
}

// -----

// The same attention at T1024 (GPT-2's): a block of 64 rows would read 4 key tiles of 128
// on average under the mask, where the model takes two warpgroups of 64 rows on 128-key
// tiles, persistent (bench/RESULTS.md run 228: 0.0587 -> 0.0521 ms on an H100); at T256
// above (1 key tile a block) one warpgroup stays.
// MODEL-LABEL: func.func @causal_attention_t1024
// MODEL: fusion.group attention
// MODEL-SAME: fusion.kernel_tile = array<i64: 128, 128, 2>
// MODEL-SAME: fusion.kernel_tile_from = "cost model"
// MODEL-SAME: fusion.tune_key = "attention batch=8 q=1024 kv=1024 d=64 el=bf16 out=bf16 mask=computed causal=0"
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map2 = affine_map<(d0) -> (d0)>
#map3 = affine_map<(d0, d1) -> (d0, 0)>
#map4 = affine_map<(d0, d1) -> (0, d1)>
#map5 = affine_map<(d0, d1) -> (d0, d1)>
#map6 = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
#map7 = affine_map<(d0, d1, d2, d3) -> ()>
#map8 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map9 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module attributes {fusion.torch_signature = "{\22inputs\22: [{\22name\22: \22q\22, \22dtype\22: \22bfloat16\22}, {\22name\22: \22k\22, \22dtype\22: \22bfloat16\22}, {\22name\22: \22v\22, \22dtype\22: \22bfloat16\22}], \22outputs\22: [{\22dtype\22: \22bfloat16\22}]}"} {
  func.func @causal_attention_t1024(%arg0: tensor<2x4x1024x64xbf16>, %arg1: tensor<2x4x1024x64xbf16>, %arg2: tensor<2x4x1024x64xbf16>) -> tensor<2x4x1024x64xbf16> {
    %0 = fusion.group attention (%arg3 = %arg1 : tensor<2x4x1024x64xbf16>, %arg4 = %arg0 : tensor<2x4x1024x64xbf16>, %arg5 = %arg2 : tensor<2x4x1024x64xbf16>) -> tensor<2x4x1024x64xbf16> attributes {fusion.attention = {batch = 8 : i64, dtype = "bf16", head_dim = 64 : i64, kv_len = 1024 : i64, mask = "computed", masked_rows = "nan", q_len = 1024 : i64, score_ops = 3 : i64, v_dim = 64 : i64}, fusion.device = "nvidia-h200", fusion.path = "attention", fusion.reason = "attention: Q K^T, the score ops, softmax and P V in one kernel (online softmax: the scores never reach memory)"} {
      %cst = arith.constant 0xFF800000 : f32
      %c0_i64 = arith.constant 0 : i64
      %cst_0 = arith.constant dense<0xFF80> : tensor<bf16>
      %cst_1 = arith.constant 1.250000e-01 : bf16
      %cst_2 = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<2x4x64x1024xbf16>
      %2 = tensor.empty() : tensor<8x1024x1024xf32>
      %3 = tensor.empty() : tensor<8x1024x1024xbf16>
      %4 = tensor.empty() : tensor<2x4x1024x1024xbf16>
      %5 = tensor.empty() : tensor<1024xi64>
      %6 = tensor.empty() : tensor<1024x1024xi1>
      %7 = tensor.empty() : tensor<2x4x1024x1024xf32>
      %8 = tensor.empty() : tensor<2x4x1024xi64>
      %9 = tensor.empty() : tensor<2x4x1024xf32>
      %10 = tensor.empty() : tensor<2x4x1024x1xf32>
      %11 = tensor.empty() : tensor<8x1024x64xf32>
      %12 = tensor.empty() : tensor<8x1024x64xbf16>
      %transposed = linalg.transpose ins(%arg3 : tensor<2x4x1024x64xbf16>) outs(%1 : tensor<2x4x64x1024xbf16>) permutation = [0, 1, 3, 2] 
      %collapsed = tensor.collapse_shape %arg4 [[0, 1], [2], [3]] : tensor<2x4x1024x64xbf16> into tensor<8x1024x64xbf16>
      %collapsed_3 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<2x4x64x1024xbf16> into tensor<8x64x1024xbf16>
      %13 = linalg.fill ins(%cst_2 : f32) outs(%2 : tensor<8x1024x1024xf32>) -> tensor<8x1024x1024xf32>
      %14 = linalg.batch_matmul ins(%collapsed, %collapsed_3 : tensor<8x1024x64xbf16>, tensor<8x64x1024xbf16>) outs(%13 : tensor<8x1024x1024xf32>) -> tensor<8x1024x1024xf32>
      %15 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%14 : tensor<8x1024x1024xf32>) outs(%3 : tensor<8x1024x1024xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %33 = arith.truncf %in : f32 to bf16
        linalg.yield %33 : bf16
      } -> tensor<8x1024x1024xbf16>
      %expanded = tensor.expand_shape %15 [[0, 1], [2], [3]] output_shape [2, 4, 1024, 1024] : tensor<8x1024x1024xbf16> into tensor<2x4x1024x1024xbf16>
      %16 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<2x4x1024x1024xbf16>) outs(%4 : tensor<2x4x1024x1024xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        %33 = arith.mulf %in, %cst_1 : bf16
        linalg.yield %33 : bf16
      } -> tensor<2x4x1024x1024xbf16>
      %17 = linalg.generic {indexing_maps = [#map2], iterator_types = ["parallel"]} outs(%5 : tensor<1024xi64>) {
      ^bb0(%out: i64):
        %33 = linalg.index 0 : index
        %34 = arith.index_cast %33 : index to i64
        linalg.yield %34 : i64
      } -> tensor<1024xi64>
      %expanded_4 = tensor.expand_shape %17 [[0, 1]] output_shape [1024, 1] : tensor<1024xi64> into tensor<1024x1xi64>
      %expanded_5 = tensor.expand_shape %17 [[0, 1]] output_shape [1, 1024] : tensor<1024xi64> into tensor<1x1024xi64>
      %18 = linalg.generic {indexing_maps = [#map3, #map4, #map5], iterator_types = ["parallel", "parallel"]} ins(%expanded_4, %expanded_5 : tensor<1024x1xi64>, tensor<1x1024xi64>) outs(%6 : tensor<1024x1024xi1>) {
      ^bb0(%in: i64, %in_10: i64, %out: i1):
        %33 = arith.cmpi sge, %in, %in_10 : i64
        linalg.yield %33 : i1
      } -> tensor<1024x1024xi1>
      %19 = linalg.generic {indexing_maps = [#map6, #map1, #map7, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%18, %16, %cst_0 : tensor<1024x1024xi1>, tensor<2x4x1024x1024xbf16>, tensor<bf16>) outs(%4 : tensor<2x4x1024x1024xbf16>) {
      ^bb0(%in: i1, %in_10: bf16, %in_11: bf16, %out: bf16):
        %33 = arith.select %in, %in_10, %in_11 : bf16
        linalg.yield %33 : bf16
      } -> tensor<2x4x1024x1024xbf16>
      %20 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%19 : tensor<2x4x1024x1024xbf16>) outs(%7 : tensor<2x4x1024x1024xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %33 = arith.extf %in : bf16 to f32
        linalg.yield %33 : f32
      } -> tensor<2x4x1024x1024xf32>
      %21 = linalg.fill ins(%c0_i64 : i64) outs(%8 : tensor<2x4x1024xi64>) -> tensor<2x4x1024xi64>
      %22 = linalg.fill ins(%cst : f32) outs(%9 : tensor<2x4x1024xf32>) -> tensor<2x4x1024xf32>
      %23:2 = linalg.generic {indexing_maps = [#map1, #map8, #map8], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%20 : tensor<2x4x1024x1024xf32>) outs(%22, %21 : tensor<2x4x1024xf32>, tensor<2x4x1024xi64>) {
      ^bb0(%in: f32, %out: f32, %out_10: i64):
        %33 = linalg.index 3 : index
        %34 = arith.index_cast %33 : index to i64
        %35 = arith.maximumf %in, %out : f32
        %36 = arith.cmpf ogt, %in, %out : f32
        %37 = arith.select %36, %34, %out_10 : i64
        linalg.yield %35, %37 : f32, i64
      } -> (tensor<2x4x1024xf32>, tensor<2x4x1024xi64>)
      %expanded_6 = tensor.expand_shape %23#0 [[0], [1], [2, 3]] output_shape [2, 4, 1024, 1] : tensor<2x4x1024xf32> into tensor<2x4x1024x1xf32>
      %24 = linalg.generic {indexing_maps = [#map1, #map9, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%20, %expanded_6 : tensor<2x4x1024x1024xf32>, tensor<2x4x1024x1xf32>) outs(%7 : tensor<2x4x1024x1024xf32>) {
      ^bb0(%in: f32, %in_10: f32, %out: f32):
        %33 = arith.subf %in, %in_10 : f32
        linalg.yield %33 : f32
      } -> tensor<2x4x1024x1024xf32>
      %25 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%24 : tensor<2x4x1024x1024xf32>) outs(%7 : tensor<2x4x1024x1024xf32>) {
      ^bb0(%in: f32, %out: f32):
        %33 = math.exp %in : f32
        linalg.yield %33 : f32
      } -> tensor<2x4x1024x1024xf32>
      %26 = linalg.fill ins(%cst_2 : f32) outs(%10 : tensor<2x4x1024x1xf32>) -> tensor<2x4x1024x1xf32>
      %27 = linalg.generic {indexing_maps = [#map1, #map9], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%25 : tensor<2x4x1024x1024xf32>) outs(%26 : tensor<2x4x1024x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %33 = arith.addf %in, %out : f32
        linalg.yield %33 : f32
      } -> tensor<2x4x1024x1xf32>
      %28 = linalg.generic {indexing_maps = [#map1, #map9, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%25, %27 : tensor<2x4x1024x1024xf32>, tensor<2x4x1024x1xf32>) outs(%7 : tensor<2x4x1024x1024xf32>) {
      ^bb0(%in: f32, %in_10: f32, %out: f32):
        %33 = arith.divf %in, %in_10 : f32
        linalg.yield %33 : f32
      } -> tensor<2x4x1024x1024xf32>
      %29 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%28 : tensor<2x4x1024x1024xf32>) outs(%4 : tensor<2x4x1024x1024xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %33 = arith.truncf %in : f32 to bf16
        linalg.yield %33 : bf16
      } -> tensor<2x4x1024x1024xbf16>
      %collapsed_7 = tensor.collapse_shape %29 [[0, 1], [2], [3]] : tensor<2x4x1024x1024xbf16> into tensor<8x1024x1024xbf16>
      %collapsed_8 = tensor.collapse_shape %arg5 [[0, 1], [2], [3]] : tensor<2x4x1024x64xbf16> into tensor<8x1024x64xbf16>
      %30 = linalg.fill ins(%cst_2 : f32) outs(%11 : tensor<8x1024x64xf32>) -> tensor<8x1024x64xf32>
      %31 = linalg.batch_matmul ins(%collapsed_7, %collapsed_8 : tensor<8x1024x1024xbf16>, tensor<8x1024x64xbf16>) outs(%30 : tensor<8x1024x64xf32>) -> tensor<8x1024x64xf32>
      %32 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%31 : tensor<8x1024x64xf32>) outs(%12 : tensor<8x1024x64xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %33 = arith.truncf %in : f32 to bf16
        linalg.yield %33 : bf16
      } -> tensor<8x1024x64xbf16>
      %expanded_9 = tensor.expand_shape %32 [[0, 1], [2], [3]] output_shape [2, 4, 1024, 64] : tensor<8x1024x64xbf16> into tensor<2x4x1024x64xbf16>
      fusion.yield %expanded_9 : tensor<2x4x1024x64xbf16>
    }
    return %0 : tensor<2x4x1024x64xbf16>
  }
}
