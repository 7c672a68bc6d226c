// RUN: fusec-opt %s --split-input-file --fusion-gpu-slices-to-gathers --fusion-gpu-absorb-attention-layouts | filecheck %s

// --fusion-gpu-absorb-attention-layouts: an attention group reads Q, K and V through the
// layout groups before it (the head split of one [B, T, 3 d] tensor: slice, expand,
// transpose; GQA's repeat_interleave: a broadcast and a collapse) and writes O through the
// layout group after it (head merge): they merge into it (TMA maps and the store read and
// write the buffers in place). A layout that another kernel also reads stays where it is.

// CHECK-LABEL: func.func @split_merge
// One group reads the [1, 16, 384] input and writes the merged [1, 16, 128] result.
// CHECK-NOT: fusion.group {{(single|vertical|horizontal)}}
// CHECK: fusion.group attention (%{{.*}} = %arg0 : tensor<1x16x384xbf16>) -> tensor<1x16x128xbf16>
// CHECK-NOT: fusion.group
// CHECK: return

#split_merge_map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#split_merge_map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#split_merge_map2 = affine_map<(d0) -> (d0)>
#split_merge_map3 = affine_map<(d0, d1) -> (d0, 0)>
#split_merge_map4 = affine_map<(d0, d1) -> (0, d1)>
#split_merge_map5 = affine_map<(d0, d1) -> (d0, d1)>
#split_merge_map6 = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
#split_merge_map7 = affine_map<(d0, d1, d2, d3) -> ()>
#split_merge_map8 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#split_merge_map9 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @split_merge(%arg0: tensor<1x16x384xbf16>) -> tensor<1x16x128xbf16> {
    %0 = fusion.group vertical (%arg1 = %arg0 : tensor<1x16x384xbf16>) -> tensor<1x2x16x64xbf16> attributes {fusion.bytes_fused = 16384 : i64, fusion.bytes_unfused = 28672 : i64, fusion.device = "nvidia-h200", fusion.flops = 0 : i64, fusion.launches_saved = 2 : i64, fusion.parallel_tiles = 32 : i64, fusion.reason = "3 ops in one kernel: saves 2 launches and 12288 bytes of memory traffic", fusion.refused = ["group@27:0: horizontal: fast-emitter: tensor.extract_slice@26:0: 'tensor.extract_slice' is not emitted by the fast emitter; a multi-output kernel of it would be split per output on nvidia-h200"], fusion.tile_dims = [0, 1, 2], fusion.time_fused_ns = 4004 : i64, fusion.time_unfused_ns = 12007 : i64, fusion.working_set = 0 : i64} {
      %5 = tensor.empty() : tensor<1x2x16x64xbf16>
      %extracted_slice = tensor.extract_slice %arg1[0, 0, 0] [1, 16, 128] [1, 1, 1] : tensor<1x16x384xbf16> to tensor<1x16x128xbf16>
      %expanded = tensor.expand_shape %extracted_slice [[0], [1], [2, 3]] output_shape [1, 16, 2, 64] : tensor<1x16x128xbf16> into tensor<1x16x2x64xbf16>
      %transposed = linalg.transpose ins(%expanded : tensor<1x16x2x64xbf16>) outs(%5 : tensor<1x2x16x64xbf16>) permutation = [0, 2, 1, 3] 
      fusion.yield %transposed : tensor<1x2x16x64xbf16>
    }
    %1 = fusion.group vertical (%arg1 = %arg0 : tensor<1x16x384xbf16>) -> tensor<1x2x16x64xbf16> attributes {fusion.bytes_fused = 16384 : i64, fusion.bytes_unfused = 28672 : i64, fusion.device = "nvidia-h200", fusion.flops = 0 : i64, fusion.launches_saved = 2 : i64, fusion.parallel_tiles = 32 : i64, fusion.reason = "3 ops in one kernel: saves 2 launches and 12288 bytes of memory traffic", fusion.refused = ["group@27:0: input: small-input: a second read of 12288 B costs 0.00 us, less than a launch (4.0 us) on nvidia-h200", "group@27:0: horizontal: fast-emitter: tensor.extract_slice@26:0: 'tensor.extract_slice' is not emitted by the fast emitter; a multi-output kernel of it would be split per output on nvidia-h200"], fusion.tile_dims = [0, 1, 2], fusion.time_fused_ns = 4004 : i64, fusion.time_unfused_ns = 12007 : i64, fusion.working_set = 0 : i64} {
      %5 = tensor.empty() : tensor<1x2x16x64xbf16>
      %extracted_slice = tensor.extract_slice %arg1[0, 0, 256] [1, 16, 128] [1, 1, 1] : tensor<1x16x384xbf16> to tensor<1x16x128xbf16>
      %expanded = tensor.expand_shape %extracted_slice [[0], [1], [2, 3]] output_shape [1, 16, 2, 64] : tensor<1x16x128xbf16> into tensor<1x16x2x64xbf16>
      %transposed = linalg.transpose ins(%expanded : tensor<1x16x2x64xbf16>) outs(%5 : tensor<1x2x16x64xbf16>) permutation = [0, 2, 1, 3] 
      fusion.yield %transposed : tensor<1x2x16x64xbf16>
    }
    %2 = fusion.group vertical (%arg1 = %arg0 : tensor<1x16x384xbf16>) -> tensor<1x2x16x64xbf16> attributes {fusion.bytes_fused = 16384 : i64, fusion.bytes_unfused = 28672 : i64, fusion.device = "nvidia-h200", fusion.flops = 0 : i64, fusion.launches_saved = 2 : i64, fusion.parallel_tiles = 32 : i64, fusion.reason = "3 ops in one kernel: saves 2 launches and 12288 bytes of memory traffic", fusion.refused = ["group@27:0: input: small-input: a second read of 12288 B costs 0.00 us, less than a launch (4.0 us) on nvidia-h200", "group@28:0: horizontal: fast-emitter: tensor.extract_slice@26:0: 'tensor.extract_slice' is not emitted by the fast emitter; a multi-output kernel of it would be split per output on nvidia-h200"], fusion.tile_dims = [0, 1, 2], fusion.time_fused_ns = 4004 : i64, fusion.time_unfused_ns = 12007 : i64, fusion.working_set = 0 : i64} {
      %5 = tensor.empty() : tensor<1x2x16x64xbf16>
      %extracted_slice = tensor.extract_slice %arg1[0, 0, 128] [1, 16, 128] [1, 1, 1] : tensor<1x16x384xbf16> to tensor<1x16x128xbf16>
      %expanded = tensor.expand_shape %extracted_slice [[0], [1], [2, 3]] output_shape [1, 16, 2, 64] : tensor<1x16x128xbf16> into tensor<1x16x2x64xbf16>
      %transposed = linalg.transpose ins(%expanded : tensor<1x16x2x64xbf16>) outs(%5 : tensor<1x2x16x64xbf16>) permutation = [0, 2, 1, 3] 
      fusion.yield %transposed : tensor<1x2x16x64xbf16>
    }
    %3 = fusion.group attention (%arg1 = %2 : tensor<1x2x16x64xbf16>, %arg2 = %0 : tensor<1x2x16x64xbf16>, %arg3 = %1 : tensor<1x2x16x64xbf16>) -> tensor<1x2x16x64xbf16> attributes {fusion.attention = {batch = 2 : i64, dtype = "bf16", head_dim = 64 : i64, kv_len = 16 : i64, mask = "computed", q_len = 16 : i64, score_ops = 3 : i64, v_dim = 64 : i64}, fusion.device = "nvidia-h200", fusion.path = "attention", fusion.reason = "attention: Q K^T, the score ops, softmax and P V in one kernel (online softmax: the scores never reach memory)"} {
      %cst = arith.constant 0xFF800000 : f32
      %c0_i64 = arith.constant 0 : i64
      %cst_0 = arith.constant dense<0xFF80> : tensor<bf16>
      %cst_1 = arith.constant 1.250000e-01 : bf16
      %cst_2 = arith.constant 0.000000e+00 : f32
      %5 = tensor.empty() : tensor<1x2x64x16xbf16>
      %6 = tensor.empty() : tensor<2x16x16xf32>
      %7 = tensor.empty() : tensor<2x16x16xbf16>
      %8 = tensor.empty() : tensor<1x2x16x16xbf16>
      %9 = tensor.empty() : tensor<16xi64>
      %10 = tensor.empty() : tensor<16x16xi1>
      %11 = tensor.empty() : tensor<1x2x16x16xf32>
      %12 = tensor.empty() : tensor<1x2x16xi64>
      %13 = tensor.empty() : tensor<1x2x16xf32>
      %14 = tensor.empty() : tensor<1x2x16x1xf32>
      %15 = tensor.empty() : tensor<2x16x64xf32>
      %16 = tensor.empty() : tensor<2x16x64xbf16>
      %transposed = linalg.transpose ins(%arg1 : tensor<1x2x16x64xbf16>) outs(%5 : tensor<1x2x64x16xbf16>) permutation = [0, 1, 3, 2] 
      %collapsed = tensor.collapse_shape %arg2 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
      %collapsed_3 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x64x16xbf16> into tensor<2x64x16xbf16>
      %17 = linalg.fill ins(%cst_2 : f32) outs(%6 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
      %18 = linalg.batch_matmul ins(%collapsed, %collapsed_3 : tensor<2x16x64xbf16>, tensor<2x64x16xbf16>) outs(%17 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
      %19 = linalg.generic {indexing_maps = [#split_merge_map, #split_merge_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%18 : tensor<2x16x16xf32>) outs(%7 : tensor<2x16x16xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %37 = arith.truncf %in : f32 to bf16
        linalg.yield %37 : bf16
      } -> tensor<2x16x16xbf16>
      %expanded = tensor.expand_shape %19 [[0, 1], [2], [3]] output_shape [1, 2, 16, 16] : tensor<2x16x16xbf16> into tensor<1x2x16x16xbf16>
      %20 = linalg.generic {indexing_maps = [#split_merge_map1, #split_merge_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x16x16xbf16>) outs(%8 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        %37 = arith.mulf %in, %cst_1 : bf16
        linalg.yield %37 : bf16
      } -> tensor<1x2x16x16xbf16>
      %21 = linalg.generic {indexing_maps = [#split_merge_map2], iterator_types = ["parallel"]} outs(%9 : tensor<16xi64>) {
      ^bb0(%out: i64):
        %37 = linalg.index 0 : index
        %38 = arith.index_cast %37 : index to i64
        linalg.yield %38 : i64
      } -> tensor<16xi64>
      %expanded_4 = tensor.expand_shape %21 [[0, 1]] output_shape [16, 1] : tensor<16xi64> into tensor<16x1xi64>
      %expanded_5 = tensor.expand_shape %21 [[0, 1]] output_shape [1, 16] : tensor<16xi64> into tensor<1x16xi64>
      %22 = linalg.generic {indexing_maps = [#split_merge_map3, #split_merge_map4, #split_merge_map5], iterator_types = ["parallel", "parallel"]} ins(%expanded_4, %expanded_5 : tensor<16x1xi64>, tensor<1x16xi64>) outs(%10 : tensor<16x16xi1>) {
      ^bb0(%in: i64, %in_10: i64, %out: i1):
        %37 = arith.cmpi sge, %in, %in_10 : i64
        linalg.yield %37 : i1
      } -> tensor<16x16xi1>
      %23 = linalg.generic {indexing_maps = [#split_merge_map6, #split_merge_map1, #split_merge_map7, #split_merge_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%22, %20, %cst_0 : tensor<16x16xi1>, tensor<1x2x16x16xbf16>, tensor<bf16>) outs(%8 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: i1, %in_10: bf16, %in_11: bf16, %out: bf16):
        %37 = arith.select %in, %in_10, %in_11 : bf16
        linalg.yield %37 : bf16
      } -> tensor<1x2x16x16xbf16>
      %24 = linalg.generic {indexing_maps = [#split_merge_map1, #split_merge_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%23 : tensor<1x2x16x16xbf16>) outs(%11 : tensor<1x2x16x16xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %37 = arith.extf %in : bf16 to f32
        linalg.yield %37 : f32
      } -> tensor<1x2x16x16xf32>
      %25 = linalg.fill ins(%c0_i64 : i64) outs(%12 : tensor<1x2x16xi64>) -> tensor<1x2x16xi64>
      %26 = linalg.fill ins(%cst : f32) outs(%13 : tensor<1x2x16xf32>) -> tensor<1x2x16xf32>
      %27:2 = linalg.generic {indexing_maps = [#split_merge_map1, #split_merge_map8, #split_merge_map8], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%24 : tensor<1x2x16x16xf32>) outs(%26, %25 : tensor<1x2x16xf32>, tensor<1x2x16xi64>) {
      ^bb0(%in: f32, %out: f32, %out_10: i64):
        %37 = linalg.index 3 : index
        %38 = arith.index_cast %37 : index to i64
        %39 = arith.maximumf %in, %out : f32
        %40 = arith.cmpf ogt, %in, %out : f32
        %41 = arith.select %40, %38, %out_10 : i64
        linalg.yield %39, %41 : f32, i64
      } -> (tensor<1x2x16xf32>, tensor<1x2x16xi64>)
      %expanded_6 = tensor.expand_shape %27#0 [[0], [1], [2, 3]] output_shape [1, 2, 16, 1] : tensor<1x2x16xf32> into tensor<1x2x16x1xf32>
      %28 = linalg.generic {indexing_maps = [#split_merge_map1, #split_merge_map9, #split_merge_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%24, %expanded_6 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%11 : tensor<1x2x16x16xf32>) {
      ^bb0(%in: f32, %in_10: f32, %out: f32):
        %37 = arith.subf %in, %in_10 : f32
        linalg.yield %37 : f32
      } -> tensor<1x2x16x16xf32>
      %29 = linalg.generic {indexing_maps = [#split_merge_map1, #split_merge_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%28 : tensor<1x2x16x16xf32>) outs(%11 : tensor<1x2x16x16xf32>) {
      ^bb0(%in: f32, %out: f32):
        %37 = math.exp %in : f32
        linalg.yield %37 : f32
      } -> tensor<1x2x16x16xf32>
      %30 = linalg.fill ins(%cst_2 : f32) outs(%14 : tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
      %31 = linalg.generic {indexing_maps = [#split_merge_map1, #split_merge_map9], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%29 : tensor<1x2x16x16xf32>) outs(%30 : tensor<1x2x16x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %37 = arith.addf %in, %out : f32
        linalg.yield %37 : f32
      } -> tensor<1x2x16x1xf32>
      %32 = linalg.generic {indexing_maps = [#split_merge_map1, #split_merge_map9, #split_merge_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%29, %31 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%11 : tensor<1x2x16x16xf32>) {
      ^bb0(%in: f32, %in_10: f32, %out: f32):
        %37 = arith.divf %in, %in_10 : f32
        linalg.yield %37 : f32
      } -> tensor<1x2x16x16xf32>
      %33 = linalg.generic {indexing_maps = [#split_merge_map1, #split_merge_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%32 : tensor<1x2x16x16xf32>) outs(%8 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %37 = arith.truncf %in : f32 to bf16
        linalg.yield %37 : bf16
      } -> tensor<1x2x16x16xbf16>
      %collapsed_7 = tensor.collapse_shape %33 [[0, 1], [2], [3]] : tensor<1x2x16x16xbf16> into tensor<2x16x16xbf16>
      %collapsed_8 = tensor.collapse_shape %arg3 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
      %34 = linalg.fill ins(%cst_2 : f32) outs(%15 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
      %35 = linalg.batch_matmul ins(%collapsed_7, %collapsed_8 : tensor<2x16x16xbf16>, tensor<2x16x64xbf16>) outs(%34 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
      %36 = linalg.generic {indexing_maps = [#split_merge_map, #split_merge_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%35 : tensor<2x16x64xf32>) outs(%16 : tensor<2x16x64xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %37 = arith.truncf %in : f32 to bf16
        linalg.yield %37 : bf16
      } -> tensor<2x16x64xbf16>
      %expanded_9 = tensor.expand_shape %36 [[0, 1], [2], [3]] output_shape [1, 2, 16, 64] : tensor<2x16x64xbf16> into tensor<1x2x16x64xbf16>
      fusion.yield %expanded_9 : tensor<1x2x16x64xbf16>
    }
    %4 = fusion.group single (%arg1 = %3 : tensor<1x2x16x64xbf16>) -> tensor<1x16x128xbf16> attributes {fusion.bytes_fused = 8192 : i64, fusion.bytes_unfused = 12288 : i64, fusion.device = "nvidia-h200", fusion.flops = 0 : i64, fusion.launches_saved = 1 : i64, fusion.parallel_tiles = 32 : i64, fusion.reason = "2 ops in one kernel: saves 1 launches and 4096 bytes of memory traffic", fusion.tile_dims = [0, 1, 2], fusion.time_fused_ns = 4002 : i64, fusion.time_unfused_ns = 8003 : i64, fusion.working_set = 0 : i64} {
      %5 = tensor.empty() : tensor<1x16x2x64xbf16>
      %transposed = linalg.transpose ins(%arg1 : tensor<1x2x16x64xbf16>) outs(%5 : tensor<1x16x2x64xbf16>) permutation = [0, 2, 1, 3] 
      %collapsed = tensor.collapse_shape %transposed [[0], [1], [2, 3]] : tensor<1x16x2x64xbf16> into tensor<1x16x128xbf16>
      fusion.yield %collapsed : tensor<1x16x128xbf16>
    }
    return %4 : tensor<1x16x128xbf16>
  }
}

// -----

// CHECK-LABEL: func.func @gqa
// K and V (2 heads) are read as they are: the repeat to 4 heads is inside, no kernel copies it.
// CHECK-NOT: fusion.group {{(single|vertical|horizontal)}}
// CHECK: fusion.group attention ({{.*}}tensor<1x2x16x64xbf16>, {{.*}}tensor<1x2x16x64xbf16>, {{.*}}tensor<1x4x16x64xbf16>)
// CHECK-NOT: fusion.group
// CHECK: return

#gqa_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#gqa_map1 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#gqa_map2 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#gqa_map3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#gqa_map4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#gqa_map5 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @gqa(%arg0: tensor<1x4x16x64xbf16>, %arg1: tensor<1x2x16x64xbf16>, %arg2: tensor<1x2x16x64xbf16>) -> tensor<1x4x16x64xbf16> {
    %0:2 = fusion.group horizontal (%arg3 = %arg1 : tensor<1x2x16x64xbf16>, %arg4 = %arg2 : tensor<1x2x16x64xbf16>) -> (tensor<1x2x2x16x64xbf16>, tensor<1x2x2x16x64xbf16>) attributes {fusion.bytes_fused = 24576 : i64, fusion.bytes_unfused = 24576 : i64, fusion.device = "nvidia-h200", fusion.flops = 8192 : i64, fusion.launches_saved = 1 : i64, fusion.parts = ["single", "single"], fusion.reason = "2 independent launch-bound kernels in one launch", fusion.time_fused_ns = 4006 : i64, fusion.time_unfused_ns = 8006 : i64} {
      %2 = tensor.empty() : tensor<1x2x2x16x64xbf16>
      %3 = linalg.generic {indexing_maps = [#gqa_map, #gqa_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%arg3 : tensor<1x2x16x64xbf16>) outs(%2 : tensor<1x2x2x16x64xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        linalg.yield %in : bf16
      } -> tensor<1x2x2x16x64xbf16>
      %4 = linalg.generic {indexing_maps = [#gqa_map, #gqa_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%arg4 : tensor<1x2x16x64xbf16>) outs(%2 : tensor<1x2x2x16x64xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        linalg.yield %in : bf16
      } -> tensor<1x2x2x16x64xbf16>
      fusion.yield %3, %4 : tensor<1x2x2x16x64xbf16>, tensor<1x2x2x16x64xbf16>
    }
    %1 = fusion.group attention (%arg3 = %0#0 : tensor<1x2x2x16x64xbf16>, %arg4 = %arg0 : tensor<1x4x16x64xbf16>, %arg5 = %0#1 : tensor<1x2x2x16x64xbf16>) -> tensor<1x4x16x64xbf16> attributes {fusion.attention = {batch = 4 : i64, dtype = "bf16", head_dim = 64 : i64, kv_len = 16 : i64, mask = "none", q_len = 16 : i64, scale = 1.250000e-01 : f64, score_ops = 2 : i64, v_dim = 64 : i64}, fusion.device = "nvidia-h200", fusion.path = "attention", fusion.reason = "attention: Q K^T, the score ops, softmax and P V in one kernel (online softmax: the scores never reach memory)"} {
      %cst = arith.constant 0xFF800000 : f32
      %c0_i64 = arith.constant 0 : i64
      %cst_0 = arith.constant 1.250000e-01 : bf16
      %cst_1 = arith.constant 0.000000e+00 : f32
      %2 = tensor.empty() : tensor<1x4x64x16xbf16>
      %3 = tensor.empty() : tensor<4x16x16xf32>
      %4 = tensor.empty() : tensor<4x16x16xbf16>
      %5 = tensor.empty() : tensor<1x4x16x16xbf16>
      %6 = tensor.empty() : tensor<1x4x16x16xf32>
      %7 = tensor.empty() : tensor<1x4x16xi64>
      %8 = tensor.empty() : tensor<1x4x16xf32>
      %9 = tensor.empty() : tensor<1x4x16x1xf32>
      %10 = tensor.empty() : tensor<4x16x64xf32>
      %11 = tensor.empty() : tensor<4x16x64xbf16>
      %collapsed = tensor.collapse_shape %arg3 [[0], [1, 2], [3], [4]] : tensor<1x2x2x16x64xbf16> into tensor<1x4x16x64xbf16>
      %transposed = linalg.transpose ins(%collapsed : tensor<1x4x16x64xbf16>) outs(%2 : tensor<1x4x64x16xbf16>) permutation = [0, 1, 3, 2] 
      %collapsed_2 = tensor.collapse_shape %arg4 [[0, 1], [2], [3]] : tensor<1x4x16x64xbf16> into tensor<4x16x64xbf16>
      %collapsed_3 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x4x64x16xbf16> into tensor<4x64x16xbf16>
      %12 = linalg.fill ins(%cst_1 : f32) outs(%3 : tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
      %13 = linalg.batch_matmul ins(%collapsed_2, %collapsed_3 : tensor<4x16x64xbf16>, tensor<4x64x16xbf16>) outs(%12 : tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
      %14 = linalg.generic {indexing_maps = [#gqa_map2, #gqa_map2], iterator_types = ["parallel", "parallel", "parallel"]} ins(%13 : tensor<4x16x16xf32>) outs(%4 : tensor<4x16x16xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %29 = arith.truncf %in : f32 to bf16
        linalg.yield %29 : bf16
      } -> tensor<4x16x16xbf16>
      %expanded = tensor.expand_shape %14 [[0, 1], [2], [3]] output_shape [1, 4, 16, 16] : tensor<4x16x16xbf16> into tensor<1x4x16x16xbf16>
      %15 = linalg.generic {indexing_maps = [#gqa_map3, #gqa_map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x4x16x16xbf16>) outs(%5 : tensor<1x4x16x16xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        %29 = arith.mulf %in, %cst_0 : bf16
        linalg.yield %29 : bf16
      } -> tensor<1x4x16x16xbf16>
      %16 = linalg.generic {indexing_maps = [#gqa_map3, #gqa_map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%15 : tensor<1x4x16x16xbf16>) outs(%6 : tensor<1x4x16x16xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %29 = arith.extf %in : bf16 to f32
        linalg.yield %29 : f32
      } -> tensor<1x4x16x16xf32>
      %17 = linalg.fill ins(%c0_i64 : i64) outs(%7 : tensor<1x4x16xi64>) -> tensor<1x4x16xi64>
      %18 = linalg.fill ins(%cst : f32) outs(%8 : tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
      %19:2 = linalg.generic {indexing_maps = [#gqa_map3, #gqa_map4, #gqa_map4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%16 : tensor<1x4x16x16xf32>) outs(%18, %17 : tensor<1x4x16xf32>, tensor<1x4x16xi64>) {
      ^bb0(%in: f32, %out: f32, %out_8: i64):
        %29 = linalg.index 3 : index
        %30 = arith.index_cast %29 : index to i64
        %31 = arith.maximumf %in, %out : f32
        %32 = arith.cmpf ogt, %in, %out : f32
        %33 = arith.select %32, %30, %out_8 : i64
        linalg.yield %31, %33 : f32, i64
      } -> (tensor<1x4x16xf32>, tensor<1x4x16xi64>)
      %expanded_4 = tensor.expand_shape %19#0 [[0], [1], [2, 3]] output_shape [1, 4, 16, 1] : tensor<1x4x16xf32> into tensor<1x4x16x1xf32>
      %20 = linalg.generic {indexing_maps = [#gqa_map3, #gqa_map5, #gqa_map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%16, %expanded_4 : tensor<1x4x16x16xf32>, tensor<1x4x16x1xf32>) outs(%6 : tensor<1x4x16x16xf32>) {
      ^bb0(%in: f32, %in_8: f32, %out: f32):
        %29 = arith.subf %in, %in_8 : f32
        linalg.yield %29 : f32
      } -> tensor<1x4x16x16xf32>
      %21 = linalg.generic {indexing_maps = [#gqa_map3, #gqa_map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%20 : tensor<1x4x16x16xf32>) outs(%6 : tensor<1x4x16x16xf32>) {
      ^bb0(%in: f32, %out: f32):
        %29 = math.exp %in : f32
        linalg.yield %29 : f32
      } -> tensor<1x4x16x16xf32>
      %22 = linalg.fill ins(%cst_1 : f32) outs(%9 : tensor<1x4x16x1xf32>) -> tensor<1x4x16x1xf32>
      %23 = linalg.generic {indexing_maps = [#gqa_map3, #gqa_map5], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%21 : tensor<1x4x16x16xf32>) outs(%22 : tensor<1x4x16x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %29 = arith.addf %in, %out : f32
        linalg.yield %29 : f32
      } -> tensor<1x4x16x1xf32>
      %24 = linalg.generic {indexing_maps = [#gqa_map3, #gqa_map5, #gqa_map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%21, %23 : tensor<1x4x16x16xf32>, tensor<1x4x16x1xf32>) outs(%6 : tensor<1x4x16x16xf32>) {
      ^bb0(%in: f32, %in_8: f32, %out: f32):
        %29 = arith.divf %in, %in_8 : f32
        linalg.yield %29 : f32
      } -> tensor<1x4x16x16xf32>
      %25 = linalg.generic {indexing_maps = [#gqa_map3, #gqa_map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%24 : tensor<1x4x16x16xf32>) outs(%5 : tensor<1x4x16x16xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %29 = arith.truncf %in : f32 to bf16
        linalg.yield %29 : bf16
      } -> tensor<1x4x16x16xbf16>
      %collapsed_5 = tensor.collapse_shape %25 [[0, 1], [2], [3]] : tensor<1x4x16x16xbf16> into tensor<4x16x16xbf16>
      %collapsed_6 = tensor.collapse_shape %arg5 [[0, 1, 2], [3], [4]] : tensor<1x2x2x16x64xbf16> into tensor<4x16x64xbf16>
      %26 = linalg.fill ins(%cst_1 : f32) outs(%10 : tensor<4x16x64xf32>) -> tensor<4x16x64xf32>
      %27 = linalg.batch_matmul ins(%collapsed_5, %collapsed_6 : tensor<4x16x16xbf16>, tensor<4x16x64xbf16>) outs(%26 : tensor<4x16x64xf32>) -> tensor<4x16x64xf32>
      %28 = linalg.generic {indexing_maps = [#gqa_map2, #gqa_map2], iterator_types = ["parallel", "parallel", "parallel"]} ins(%27 : tensor<4x16x64xf32>) outs(%11 : tensor<4x16x64xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %29 = arith.truncf %in : f32 to bf16
        linalg.yield %29 : bf16
      } -> tensor<4x16x64xbf16>
      %expanded_7 = tensor.expand_shape %28 [[0, 1], [2], [3]] output_shape [1, 4, 16, 64] : tensor<4x16x64xbf16> into tensor<1x4x16x64xbf16>
      fusion.yield %expanded_7 : tensor<1x4x16x64xbf16>
    }
    return %1 : tensor<1x4x16x64xbf16>
  }
}

// -----

// CHECK-LABEL: func.func @shared
// K's head split is also read by `k * 2`: it stays in its own kernel, the attention reads it.
// CHECK: %[[K:.+]]:2 = fusion.group vertical
// CHECK: fusion.group attention ({{.*}}, %{{.*}} = %[[K]]#1 : tensor<1x2x16x64xbf16>)

#shared_map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#shared_map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#shared_map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#shared_map3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @shared(%arg0: tensor<1x16x384xbf16>) -> (tensor<1x2x16x64xbf16>, tensor<1x2x16x64xbf16>) {
    %0 = fusion.group vertical (%arg1 = %arg0 : tensor<1x16x384xbf16>) -> tensor<1x2x16x64xbf16> attributes {fusion.bytes_fused = 16384 : i64, fusion.bytes_unfused = 28672 : i64, fusion.device = "nvidia-h200", fusion.flops = 0 : i64, fusion.launches_saved = 2 : i64, fusion.parallel_tiles = 32 : i64, fusion.reason = "3 ops in one kernel: saves 2 launches and 12288 bytes of memory traffic", fusion.refused = ["group@36:0: horizontal: fast-emitter: tensor.extract_slice@35:0: 'tensor.extract_slice' is not emitted by the fast emitter; a multi-output kernel of it would be split per output on nvidia-h200"], fusion.tile_dims = [0, 1, 2], fusion.time_fused_ns = 4004 : i64, fusion.time_unfused_ns = 12007 : i64, fusion.working_set = 0 : i64} {
      %5 = tensor.empty() : tensor<1x2x16x64xbf16>
      %extracted_slice = tensor.extract_slice %arg1[0, 0, 0] [1, 16, 128] [1, 1, 1] : tensor<1x16x384xbf16> to tensor<1x16x128xbf16>
      %expanded = tensor.expand_shape %extracted_slice [[0], [1], [2, 3]] output_shape [1, 16, 2, 64] : tensor<1x16x128xbf16> into tensor<1x16x2x64xbf16>
      %transposed = linalg.transpose ins(%expanded : tensor<1x16x2x64xbf16>) outs(%5 : tensor<1x2x16x64xbf16>) permutation = [0, 2, 1, 3] 
      fusion.yield %transposed : tensor<1x2x16x64xbf16>
    }
    %1 = fusion.group vertical (%arg1 = %arg0 : tensor<1x16x384xbf16>) -> tensor<1x2x16x64xbf16> attributes {fusion.bytes_fused = 16384 : i64, fusion.bytes_unfused = 28672 : i64, fusion.device = "nvidia-h200", fusion.flops = 0 : i64, fusion.launches_saved = 2 : i64, fusion.parallel_tiles = 32 : i64, fusion.reason = "3 ops in one kernel: saves 2 launches and 12288 bytes of memory traffic", fusion.refused = ["group@36:0: input: small-input: a second read of 12288 B costs 0.00 us, less than a launch (4.0 us) on nvidia-h200", "group@36:0: horizontal: fast-emitter: tensor.extract_slice@35:0: 'tensor.extract_slice' is not emitted by the fast emitter; a multi-output kernel of it would be split per output on nvidia-h200"], fusion.tile_dims = [0, 1, 2], fusion.time_fused_ns = 4004 : i64, fusion.time_unfused_ns = 12007 : i64, fusion.working_set = 0 : i64} {
      %5 = tensor.empty() : tensor<1x2x16x64xbf16>
      %extracted_slice = tensor.extract_slice %arg1[0, 0, 256] [1, 16, 128] [1, 1, 1] : tensor<1x16x384xbf16> to tensor<1x16x128xbf16>
      %expanded = tensor.expand_shape %extracted_slice [[0], [1], [2, 3]] output_shape [1, 16, 2, 64] : tensor<1x16x128xbf16> into tensor<1x16x2x64xbf16>
      %transposed = linalg.transpose ins(%expanded : tensor<1x16x2x64xbf16>) outs(%5 : tensor<1x2x16x64xbf16>) permutation = [0, 2, 1, 3] 
      fusion.yield %transposed : tensor<1x2x16x64xbf16>
    }
    %2:2 = fusion.group vertical (%arg1 = %arg0 : tensor<1x16x384xbf16>) -> (tensor<1x16x128xbf16>, tensor<1x2x16x64xbf16>) attributes {fusion.bytes_fused = 20480 : i64, fusion.bytes_unfused = 28672 : i64, fusion.device = "nvidia-h200", fusion.flops = 0 : i64, fusion.launches_saved = 2 : i64, fusion.parallel_tiles = 32 : i64, fusion.reason = "3 ops in one kernel: saves 2 launches and 8192 bytes of memory traffic", fusion.refused = ["group@36:0: input: small-input: a second read of 12288 B costs 0.00 us, less than a launch (4.0 us) on nvidia-h200", "group@37:0: horizontal: fast-emitter: tensor.extract_slice@35:0: 'tensor.extract_slice' is not emitted by the fast emitter; a multi-output kernel of it would be split per output on nvidia-h200"], fusion.tile_dims = [0, 1, 2], fusion.time_fused_ns = 4005 : i64, fusion.time_unfused_ns = 12007 : i64, fusion.working_set = 0 : i64} {
      %5 = tensor.empty() : tensor<1x2x16x64xbf16>
      %extracted_slice = tensor.extract_slice %arg1[0, 0, 128] [1, 16, 128] [1, 1, 1] : tensor<1x16x384xbf16> to tensor<1x16x128xbf16>
      %expanded = tensor.expand_shape %extracted_slice [[0], [1], [2, 3]] output_shape [1, 16, 2, 64] : tensor<1x16x128xbf16> into tensor<1x16x2x64xbf16>
      %transposed = linalg.transpose ins(%expanded : tensor<1x16x2x64xbf16>) outs(%5 : tensor<1x2x16x64xbf16>) permutation = [0, 2, 1, 3] 
      fusion.yield %extracted_slice, %transposed : tensor<1x16x128xbf16>, tensor<1x2x16x64xbf16>
    }
    %3 = fusion.group attention (%arg1 = %2#1 : tensor<1x2x16x64xbf16>, %arg2 = %0 : tensor<1x2x16x64xbf16>, %arg3 = %1 : tensor<1x2x16x64xbf16>) -> tensor<1x2x16x64xbf16> attributes {fusion.attention = {batch = 2 : i64, dtype = "bf16", head_dim = 64 : i64, kv_len = 16 : i64, mask = "none", q_len = 16 : i64, scale = 1.250000e-01 : f64, score_ops = 2 : i64, v_dim = 64 : i64}, fusion.device = "nvidia-h200", fusion.path = "attention", fusion.reason = "attention: Q K^T, the score ops, softmax and P V in one kernel (online softmax: the scores never reach memory)"} {
      %cst = arith.constant 0xFF800000 : f32
      %c0_i64 = arith.constant 0 : i64
      %cst_0 = arith.constant 1.250000e-01 : bf16
      %cst_1 = arith.constant 0.000000e+00 : f32
      %5 = tensor.empty() : tensor<1x2x64x16xbf16>
      %6 = tensor.empty() : tensor<2x16x16xf32>
      %7 = tensor.empty() : tensor<2x16x16xbf16>
      %8 = tensor.empty() : tensor<1x2x16x16xbf16>
      %9 = tensor.empty() : tensor<1x2x16x16xf32>
      %10 = tensor.empty() : tensor<1x2x16xi64>
      %11 = tensor.empty() : tensor<1x2x16xf32>
      %12 = tensor.empty() : tensor<1x2x16x1xf32>
      %13 = tensor.empty() : tensor<2x16x64xf32>
      %14 = tensor.empty() : tensor<2x16x64xbf16>
      %transposed = linalg.transpose ins(%arg1 : tensor<1x2x16x64xbf16>) outs(%5 : tensor<1x2x64x16xbf16>) permutation = [0, 1, 3, 2] 
      %collapsed = tensor.collapse_shape %arg2 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
      %collapsed_2 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x64x16xbf16> into tensor<2x64x16xbf16>
      %15 = linalg.fill ins(%cst_1 : f32) outs(%6 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
      %16 = linalg.batch_matmul ins(%collapsed, %collapsed_2 : tensor<2x16x64xbf16>, tensor<2x64x16xbf16>) outs(%15 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
      %17 = linalg.generic {indexing_maps = [#shared_map, #shared_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%16 : tensor<2x16x16xf32>) outs(%7 : tensor<2x16x16xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %32 = arith.truncf %in : f32 to bf16
        linalg.yield %32 : bf16
      } -> tensor<2x16x16xbf16>
      %expanded = tensor.expand_shape %17 [[0, 1], [2], [3]] output_shape [1, 2, 16, 16] : tensor<2x16x16xbf16> into tensor<1x2x16x16xbf16>
      %18 = linalg.generic {indexing_maps = [#shared_map1, #shared_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x16x16xbf16>) outs(%8 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        %32 = arith.mulf %in, %cst_0 : bf16
        linalg.yield %32 : bf16
      } -> tensor<1x2x16x16xbf16>
      %19 = linalg.generic {indexing_maps = [#shared_map1, #shared_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%18 : tensor<1x2x16x16xbf16>) outs(%9 : tensor<1x2x16x16xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %32 = arith.extf %in : bf16 to f32
        linalg.yield %32 : f32
      } -> tensor<1x2x16x16xf32>
      %20 = linalg.fill ins(%c0_i64 : i64) outs(%10 : tensor<1x2x16xi64>) -> tensor<1x2x16xi64>
      %21 = linalg.fill ins(%cst : f32) outs(%11 : tensor<1x2x16xf32>) -> tensor<1x2x16xf32>
      %22:2 = linalg.generic {indexing_maps = [#shared_map1, #shared_map2, #shared_map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%19 : tensor<1x2x16x16xf32>) outs(%21, %20 : tensor<1x2x16xf32>, tensor<1x2x16xi64>) {
      ^bb0(%in: f32, %out: f32, %out_7: i64):
        %32 = linalg.index 3 : index
        %33 = arith.index_cast %32 : index to i64
        %34 = arith.maximumf %in, %out : f32
        %35 = arith.cmpf ogt, %in, %out : f32
        %36 = arith.select %35, %33, %out_7 : i64
        linalg.yield %34, %36 : f32, i64
      } -> (tensor<1x2x16xf32>, tensor<1x2x16xi64>)
      %expanded_3 = tensor.expand_shape %22#0 [[0], [1], [2, 3]] output_shape [1, 2, 16, 1] : tensor<1x2x16xf32> into tensor<1x2x16x1xf32>
      %23 = linalg.generic {indexing_maps = [#shared_map1, #shared_map3, #shared_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%19, %expanded_3 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%9 : tensor<1x2x16x16xf32>) {
      ^bb0(%in: f32, %in_7: f32, %out: f32):
        %32 = arith.subf %in, %in_7 : f32
        linalg.yield %32 : f32
      } -> tensor<1x2x16x16xf32>
      %24 = linalg.generic {indexing_maps = [#shared_map1, #shared_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%23 : tensor<1x2x16x16xf32>) outs(%9 : tensor<1x2x16x16xf32>) {
      ^bb0(%in: f32, %out: f32):
        %32 = math.exp %in : f32
        linalg.yield %32 : f32
      } -> tensor<1x2x16x16xf32>
      %25 = linalg.fill ins(%cst_1 : f32) outs(%12 : tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
      %26 = linalg.generic {indexing_maps = [#shared_map1, #shared_map3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%24 : tensor<1x2x16x16xf32>) outs(%25 : tensor<1x2x16x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %32 = arith.addf %in, %out : f32
        linalg.yield %32 : f32
      } -> tensor<1x2x16x1xf32>
      %27 = linalg.generic {indexing_maps = [#shared_map1, #shared_map3, #shared_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%24, %26 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%9 : tensor<1x2x16x16xf32>) {
      ^bb0(%in: f32, %in_7: f32, %out: f32):
        %32 = arith.divf %in, %in_7 : f32
        linalg.yield %32 : f32
      } -> tensor<1x2x16x16xf32>
      %28 = linalg.generic {indexing_maps = [#shared_map1, #shared_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%27 : tensor<1x2x16x16xf32>) outs(%8 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %32 = arith.truncf %in : f32 to bf16
        linalg.yield %32 : bf16
      } -> tensor<1x2x16x16xbf16>
      %collapsed_4 = tensor.collapse_shape %28 [[0, 1], [2], [3]] : tensor<1x2x16x16xbf16> into tensor<2x16x16xbf16>
      %collapsed_5 = tensor.collapse_shape %arg3 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
      %29 = linalg.fill ins(%cst_1 : f32) outs(%13 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
      %30 = linalg.batch_matmul ins(%collapsed_4, %collapsed_5 : tensor<2x16x16xbf16>, tensor<2x16x64xbf16>) outs(%29 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
      %31 = linalg.generic {indexing_maps = [#shared_map, #shared_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%30 : tensor<2x16x64xf32>) outs(%14 : tensor<2x16x64xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %32 = arith.truncf %in : f32 to bf16
        linalg.yield %32 : bf16
      } -> tensor<2x16x64xbf16>
      %expanded_6 = tensor.expand_shape %31 [[0, 1], [2], [3]] output_shape [1, 2, 16, 64] : tensor<2x16x64xbf16> into tensor<1x2x16x64xbf16>
      fusion.yield %expanded_6 : tensor<1x2x16x64xbf16>
    }
    %4 = fusion.group vertical (%arg1 = %2#0 : tensor<1x16x128xbf16>) -> tensor<1x2x16x64xbf16> attributes {fusion.bytes_fused = 8192 : i64, fusion.bytes_unfused = 20480 : i64, fusion.device = "nvidia-h200", fusion.duplicated = 1 : i64, fusion.flops = 2048 : i64, fusion.launches_saved = 2 : i64, fusion.parallel_tiles = 32 : i64, fusion.reason = "3 ops in one kernel: saves 2 launches and 12288 bytes of memory traffic", fusion.refused = ["group@37:0: horizontal: fast-emitter: linalg.transpose@36:0: 'linalg.transpose' is not emitted by the fast emitter; a multi-output kernel of it would be split per output on nvidia-h200"], fusion.tile_dims = [0, 1, 2], fusion.time_fused_ns = 4002 : i64, fusion.time_unfused_ns = 12005 : i64, fusion.working_set = 0 : i64} {
      %cst = arith.constant 2.000000e+00 : bf16
      %5 = tensor.empty() : tensor<1x2x16x64xbf16>
      %expanded = tensor.expand_shape %arg1 [[0], [1], [2, 3]] output_shape [1, 16, 2, 64] : tensor<1x16x128xbf16> into tensor<1x16x2x64xbf16>
      %transposed = linalg.transpose ins(%expanded : tensor<1x16x2x64xbf16>) outs(%5 : tensor<1x2x16x64xbf16>) permutation = [0, 2, 1, 3] 
      %6 = linalg.generic {indexing_maps = [#shared_map1, #shared_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%transposed : tensor<1x2x16x64xbf16>) outs(%5 : tensor<1x2x16x64xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        %7 = arith.mulf %in, %cst : bf16
        linalg.yield %7 : bf16
      } -> tensor<1x2x16x64xbf16>
      fusion.yield %6 : tensor<1x2x16x64xbf16>
    }
    return %3, %4 : tensor<1x2x16x64xbf16>, tensor<1x2x16x64xbf16>
  }
}
