// RUN: fusec-opt %s '--fusion-cpu-attention=threads=1 block-rows=16 block-keys=16' --split-input-file | filecheck %s

// The causal bound of a mask is classified once per mask structure in a process (every layer
// of a model has the same mask): the structure must include the diagonal's constant. Three
// attention groups in one fusec-opt process, identical but for that constant: naive
// attention over 64 query rows and 128 keys, masked by triu(d) (key j visible to row i where
// j < i + d): top-left (d = 1, bound c = 0), bottom-right (a KV-cache decoder's, d = 65,
// c = 64), then top-left again (the cached answer). Each block of 16 rows m0 reads the key
// tiles up to its last row's bound, (m0 + 16 - 1 + c) / 16 rounded up, and the tiles wholly
// below its diagonal, (m0 + c + 1) / 16, without evaluating the mask. What it must not do:
// give the bottom-right mask the top-left one's bound (keys 1..64 past each row dropped: the
// classification keyed without the constant did, 0.98 off), or the other way round.

// CHECK-LABEL: func.func @top_left
// CHECK: fusion.group attention
// CHECK: %[[END:.*]] = arith.addi %{{.*}}, %c16{{.*}} : index
// CHECK-NEXT: %[[C:.*]] = arith.constant -1 : index
// CHECK-NEXT: arith.addi %[[END]], %[[C]] : index
// CHECK: %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT: arith.addi %{{.*}}, %[[ONE]] : index
// CHECK-NOT: arith.constant 63 : index
// CHECK-NOT: arith.constant 65 : index

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0) -> (d0)>
#map2 = affine_map<(d0, d1) -> (0, d1)>
#map3 = affine_map<(d0, d1) -> (d0, 0)>
#map4 = affine_map<(d0, d1) -> (d0, d1)>
#map5 = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
#map6 = affine_map<(d0, d1, d2, d3) -> ()>
#map7 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map8 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @top_left(%arg0: tensor<1x2x64x32xf32>, %arg1: tensor<1x2x128x32xf32>, %arg2: tensor<1x2x128x32xf32>) -> tensor<1x2x64x32xf32> {
    %0 = fusion.group attention (%arg3 = %arg1 : tensor<1x2x128x32xf32>, %arg4 = %arg0 : tensor<1x2x64x32xf32>, %arg5 = %arg2 : tensor<1x2x128x32xf32>) -> tensor<1x2x64x32xf32> attributes {fusion.attention = {batch = 2 : i64, dtype = "f32", head_dim = 32 : i64, kv_len = 128 : i64, mask = "computed", masked_rows = "nan", q_len = 64 : i64, score_ops = 2 : i64, v_dim = 32 : i64}, fusion.device = "cpu", fusion.path = "attention", fusion.reason = "attention: Q K^T, the score ops, softmax and P V in one kernel (online softmax: the scores never reach memory)"} {
      %cst = arith.constant 0xFF800000 : f32
      %c0_i64 = arith.constant 0 : i64
      %cst_0 = arith.constant dense<0xFF800000> : tensor<f32>
      %cst_1 = arith.constant dense<true> : tensor<64x128xi1>
      %c1_i64 = arith.constant 1 : i64
      %cst_2 = arith.constant 2.500000e-01 : f32
      %cst_3 = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<1x2x32x128xf32>
      %2 = tensor.empty() : tensor<2x64x128xf32>
      %3 = tensor.empty() : tensor<1x2x64x128xf32>
      %4 = tensor.empty() : tensor<128xi64>
      %5 = tensor.empty() : tensor<64xi64>
      %6 = tensor.empty() : tensor<64x128xi64>
      %7 = tensor.empty() : tensor<64x128xi1>
      %8 = tensor.empty() : tensor<1x2x64xi64>
      %9 = tensor.empty() : tensor<1x2x64xf32>
      %10 = tensor.empty() : tensor<1x2x64x1xf32>
      %11 = tensor.empty() : tensor<2x64x32xf32>
      %transposed = linalg.transpose ins(%arg3 : tensor<1x2x128x32xf32>) outs(%1 : tensor<1x2x32x128xf32>) permutation = [0, 1, 3, 2] 
      %collapsed = tensor.collapse_shape %arg4 [[0, 1], [2], [3]] : tensor<1x2x64x32xf32> into tensor<2x64x32xf32>
      %collapsed_4 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x32x128xf32> into tensor<2x32x128xf32>
      %12 = linalg.fill ins(%cst_3 : f32) outs(%2 : tensor<2x64x128xf32>) -> tensor<2x64x128xf32>
      %13 = linalg.batch_matmul ins(%collapsed, %collapsed_4 : tensor<2x64x32xf32>, tensor<2x32x128xf32>) outs(%12 : tensor<2x64x128xf32>) -> tensor<2x64x128xf32>
      %expanded = tensor.expand_shape %13 [[0, 1], [2], [3]] output_shape [1, 2, 64, 128] : tensor<2x64x128xf32> into tensor<1x2x64x128xf32>
      %14 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x64x128xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: f32, %out: f32):
        %31 = arith.mulf %in, %cst_2 : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %15 = linalg.generic {indexing_maps = [#map1], iterator_types = ["parallel"]} outs(%4 : tensor<128xi64>) {
      ^bb0(%out: i64):
        %31 = linalg.index 0 : index
        %32 = arith.index_cast %31 : index to i64
        linalg.yield %32 : i64
      } -> tensor<128xi64>
      %expanded_5 = tensor.expand_shape %15 [[0, 1]] output_shape [1, 128] : tensor<128xi64> into tensor<1x128xi64>
      %16 = linalg.generic {indexing_maps = [#map1], iterator_types = ["parallel"]} outs(%5 : tensor<64xi64>) {
      ^bb0(%out: i64):
        %31 = linalg.index 0 : index
        %32 = arith.index_cast %31 : index to i64
        linalg.yield %32 : i64
      } -> tensor<64xi64>
      %expanded_6 = tensor.expand_shape %16 [[0, 1]] output_shape [64, 1] : tensor<64xi64> into tensor<64x1xi64>
      %17 = linalg.generic {indexing_maps = [#map2, #map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%expanded_5, %expanded_6 : tensor<1x128xi64>, tensor<64x1xi64>) outs(%6 : tensor<64x128xi64>) {
      ^bb0(%in: i64, %in_11: i64, %out: i64):
        %31 = arith.subi %in, %in_11 : i64
        linalg.yield %31 : i64
      } -> tensor<64x128xi64>
      %18 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%17 : tensor<64x128xi64>) outs(%7 : tensor<64x128xi1>) {
      ^bb0(%in: i64, %out: i1):
        %31 = arith.cmpi sge, %in, %c1_i64 : i64
        linalg.yield %31 : i1
      } -> tensor<64x128xi1>
      %19 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%18, %cst_1 : tensor<64x128xi1>, tensor<64x128xi1>) outs(%7 : tensor<64x128xi1>) {
      ^bb0(%in: i1, %in_11: i1, %out: i1):
        %31 = arith.andi %in, %in_11 : i1
        linalg.yield %31 : i1
      } -> tensor<64x128xi1>
      %20 = linalg.generic {indexing_maps = [#map5, #map6, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%19, %cst_0, %14 : tensor<64x128xi1>, tensor<f32>, tensor<1x2x64x128xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: i1, %in_11: f32, %in_12: f32, %out: f32):
        %31 = arith.select %in, %in_11, %in_12 : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %21 = linalg.fill ins(%c0_i64 : i64) outs(%8 : tensor<1x2x64xi64>) -> tensor<1x2x64xi64>
      %22 = linalg.fill ins(%cst : f32) outs(%9 : tensor<1x2x64xf32>) -> tensor<1x2x64xf32>
      %23:2 = linalg.generic {indexing_maps = [#map, #map7, #map7], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%20 : tensor<1x2x64x128xf32>) outs(%22, %21 : tensor<1x2x64xf32>, tensor<1x2x64xi64>) {
      ^bb0(%in: f32, %out: f32, %out_11: i64):
        %31 = linalg.index 3 : index
        %32 = arith.index_cast %31 : index to i64
        %33 = arith.maximumf %in, %out : f32
        %34 = arith.cmpf ugt, %in, %out : f32
        %35 = arith.cmpf ord, %out, %out : f32
        %36 = arith.andi %34, %35 : i1
        %37 = arith.select %36, %32, %out_11 : i64
        linalg.yield %33, %37 : f32, i64
      } -> (tensor<1x2x64xf32>, tensor<1x2x64xi64>)
      %expanded_7 = tensor.expand_shape %23#0 [[0], [1], [2, 3]] output_shape [1, 2, 64, 1] : tensor<1x2x64xf32> into tensor<1x2x64x1xf32>
      %24 = linalg.generic {indexing_maps = [#map, #map8, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%20, %expanded_7 : tensor<1x2x64x128xf32>, tensor<1x2x64x1xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: f32, %in_11: f32, %out: f32):
        %31 = arith.subf %in, %in_11 : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %25 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%24 : tensor<1x2x64x128xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: f32, %out: f32):
        %31 = math.exp %in : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %26 = linalg.fill ins(%cst_3 : f32) outs(%10 : tensor<1x2x64x1xf32>) -> tensor<1x2x64x1xf32>
      %27 = linalg.generic {indexing_maps = [#map, #map8], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%25 : tensor<1x2x64x128xf32>) outs(%26 : tensor<1x2x64x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %31 = arith.addf %in, %out : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x1xf32>
      %28 = linalg.generic {indexing_maps = [#map, #map8, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%25, %27 : tensor<1x2x64x128xf32>, tensor<1x2x64x1xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: f32, %in_11: f32, %out: f32):
        %31 = arith.divf %in, %in_11 : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %collapsed_8 = tensor.collapse_shape %28 [[0, 1], [2], [3]] : tensor<1x2x64x128xf32> into tensor<2x64x128xf32>
      %collapsed_9 = tensor.collapse_shape %arg5 [[0, 1], [2], [3]] : tensor<1x2x128x32xf32> into tensor<2x128x32xf32>
      %29 = linalg.fill ins(%cst_3 : f32) outs(%11 : tensor<2x64x32xf32>) -> tensor<2x64x32xf32>
      %30 = linalg.batch_matmul ins(%collapsed_8, %collapsed_9 : tensor<2x64x128xf32>, tensor<2x128x32xf32>) outs(%29 : tensor<2x64x32xf32>) -> tensor<2x64x32xf32>
      %expanded_10 = tensor.expand_shape %30 [[0, 1], [2], [3]] output_shape [1, 2, 64, 32] : tensor<2x64x32xf32> into tensor<1x2x64x32xf32>
      fusion.yield %expanded_10 : tensor<1x2x64x32xf32>
    }
    return %0 : tensor<1x2x64x32xf32>
  }
}

// -----

// CHECK-LABEL: func.func @bottom_right
// CHECK: fusion.group attention
// CHECK: %[[END:.*]] = arith.addi %{{.*}}, %c16{{.*}} : index
// CHECK-NEXT: %[[C:.*]] = arith.constant 63 : index
// CHECK-NEXT: arith.addi %[[END]], %[[C]] : index
// CHECK: %[[INNER:.*]] = arith.constant 65 : index
// CHECK-NEXT: arith.addi %{{.*}}, %[[INNER]] : index
// CHECK-NOT: arith.constant -1 : index

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0) -> (d0)>
#map2 = affine_map<(d0, d1) -> (0, d1)>
#map3 = affine_map<(d0, d1) -> (d0, 0)>
#map4 = affine_map<(d0, d1) -> (d0, d1)>
#map5 = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
#map6 = affine_map<(d0, d1, d2, d3) -> ()>
#map7 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map8 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @bottom_right(%arg0: tensor<1x2x64x32xf32>, %arg1: tensor<1x2x128x32xf32>, %arg2: tensor<1x2x128x32xf32>) -> tensor<1x2x64x32xf32> {
    %0 = fusion.group attention (%arg3 = %arg1 : tensor<1x2x128x32xf32>, %arg4 = %arg0 : tensor<1x2x64x32xf32>, %arg5 = %arg2 : tensor<1x2x128x32xf32>) -> tensor<1x2x64x32xf32> attributes {fusion.attention = {batch = 2 : i64, dtype = "f32", head_dim = 32 : i64, kv_len = 128 : i64, mask = "computed", masked_rows = "nan", q_len = 64 : i64, score_ops = 2 : i64, v_dim = 32 : i64}, fusion.device = "cpu", fusion.path = "attention", fusion.reason = "attention: Q K^T, the score ops, softmax and P V in one kernel (online softmax: the scores never reach memory)"} {
      %cst = arith.constant 0xFF800000 : f32
      %c0_i64 = arith.constant 0 : i64
      %cst_0 = arith.constant dense<0xFF800000> : tensor<f32>
      %cst_1 = arith.constant dense<true> : tensor<64x128xi1>
      %c65_i64 = arith.constant 65 : i64
      %cst_2 = arith.constant 2.500000e-01 : f32
      %cst_3 = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<1x2x32x128xf32>
      %2 = tensor.empty() : tensor<2x64x128xf32>
      %3 = tensor.empty() : tensor<1x2x64x128xf32>
      %4 = tensor.empty() : tensor<128xi64>
      %5 = tensor.empty() : tensor<64xi64>
      %6 = tensor.empty() : tensor<64x128xi64>
      %7 = tensor.empty() : tensor<64x128xi1>
      %8 = tensor.empty() : tensor<1x2x64xi64>
      %9 = tensor.empty() : tensor<1x2x64xf32>
      %10 = tensor.empty() : tensor<1x2x64x1xf32>
      %11 = tensor.empty() : tensor<2x64x32xf32>
      %transposed = linalg.transpose ins(%arg3 : tensor<1x2x128x32xf32>) outs(%1 : tensor<1x2x32x128xf32>) permutation = [0, 1, 3, 2] 
      %collapsed = tensor.collapse_shape %arg4 [[0, 1], [2], [3]] : tensor<1x2x64x32xf32> into tensor<2x64x32xf32>
      %collapsed_4 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x32x128xf32> into tensor<2x32x128xf32>
      %12 = linalg.fill ins(%cst_3 : f32) outs(%2 : tensor<2x64x128xf32>) -> tensor<2x64x128xf32>
      %13 = linalg.batch_matmul ins(%collapsed, %collapsed_4 : tensor<2x64x32xf32>, tensor<2x32x128xf32>) outs(%12 : tensor<2x64x128xf32>) -> tensor<2x64x128xf32>
      %expanded = tensor.expand_shape %13 [[0, 1], [2], [3]] output_shape [1, 2, 64, 128] : tensor<2x64x128xf32> into tensor<1x2x64x128xf32>
      %14 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x64x128xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: f32, %out: f32):
        %31 = arith.mulf %in, %cst_2 : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %15 = linalg.generic {indexing_maps = [#map1], iterator_types = ["parallel"]} outs(%4 : tensor<128xi64>) {
      ^bb0(%out: i64):
        %31 = linalg.index 0 : index
        %32 = arith.index_cast %31 : index to i64
        linalg.yield %32 : i64
      } -> tensor<128xi64>
      %expanded_5 = tensor.expand_shape %15 [[0, 1]] output_shape [1, 128] : tensor<128xi64> into tensor<1x128xi64>
      %16 = linalg.generic {indexing_maps = [#map1], iterator_types = ["parallel"]} outs(%5 : tensor<64xi64>) {
      ^bb0(%out: i64):
        %31 = linalg.index 0 : index
        %32 = arith.index_cast %31 : index to i64
        linalg.yield %32 : i64
      } -> tensor<64xi64>
      %expanded_6 = tensor.expand_shape %16 [[0, 1]] output_shape [64, 1] : tensor<64xi64> into tensor<64x1xi64>
      %17 = linalg.generic {indexing_maps = [#map2, #map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%expanded_5, %expanded_6 : tensor<1x128xi64>, tensor<64x1xi64>) outs(%6 : tensor<64x128xi64>) {
      ^bb0(%in: i64, %in_11: i64, %out: i64):
        %31 = arith.subi %in, %in_11 : i64
        linalg.yield %31 : i64
      } -> tensor<64x128xi64>
      %18 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%17 : tensor<64x128xi64>) outs(%7 : tensor<64x128xi1>) {
      ^bb0(%in: i64, %out: i1):
        %31 = arith.cmpi sge, %in, %c65_i64 : i64
        linalg.yield %31 : i1
      } -> tensor<64x128xi1>
      %19 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%18, %cst_1 : tensor<64x128xi1>, tensor<64x128xi1>) outs(%7 : tensor<64x128xi1>) {
      ^bb0(%in: i1, %in_11: i1, %out: i1):
        %31 = arith.andi %in, %in_11 : i1
        linalg.yield %31 : i1
      } -> tensor<64x128xi1>
      %20 = linalg.generic {indexing_maps = [#map5, #map6, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%19, %cst_0, %14 : tensor<64x128xi1>, tensor<f32>, tensor<1x2x64x128xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: i1, %in_11: f32, %in_12: f32, %out: f32):
        %31 = arith.select %in, %in_11, %in_12 : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %21 = linalg.fill ins(%c0_i64 : i64) outs(%8 : tensor<1x2x64xi64>) -> tensor<1x2x64xi64>
      %22 = linalg.fill ins(%cst : f32) outs(%9 : tensor<1x2x64xf32>) -> tensor<1x2x64xf32>
      %23:2 = linalg.generic {indexing_maps = [#map, #map7, #map7], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%20 : tensor<1x2x64x128xf32>) outs(%22, %21 : tensor<1x2x64xf32>, tensor<1x2x64xi64>) {
      ^bb0(%in: f32, %out: f32, %out_11: i64):
        %31 = linalg.index 3 : index
        %32 = arith.index_cast %31 : index to i64
        %33 = arith.maximumf %in, %out : f32
        %34 = arith.cmpf ugt, %in, %out : f32
        %35 = arith.cmpf ord, %out, %out : f32
        %36 = arith.andi %34, %35 : i1
        %37 = arith.select %36, %32, %out_11 : i64
        linalg.yield %33, %37 : f32, i64
      } -> (tensor<1x2x64xf32>, tensor<1x2x64xi64>)
      %expanded_7 = tensor.expand_shape %23#0 [[0], [1], [2, 3]] output_shape [1, 2, 64, 1] : tensor<1x2x64xf32> into tensor<1x2x64x1xf32>
      %24 = linalg.generic {indexing_maps = [#map, #map8, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%20, %expanded_7 : tensor<1x2x64x128xf32>, tensor<1x2x64x1xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: f32, %in_11: f32, %out: f32):
        %31 = arith.subf %in, %in_11 : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %25 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%24 : tensor<1x2x64x128xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: f32, %out: f32):
        %31 = math.exp %in : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %26 = linalg.fill ins(%cst_3 : f32) outs(%10 : tensor<1x2x64x1xf32>) -> tensor<1x2x64x1xf32>
      %27 = linalg.generic {indexing_maps = [#map, #map8], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%25 : tensor<1x2x64x128xf32>) outs(%26 : tensor<1x2x64x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %31 = arith.addf %in, %out : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x1xf32>
      %28 = linalg.generic {indexing_maps = [#map, #map8, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%25, %27 : tensor<1x2x64x128xf32>, tensor<1x2x64x1xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: f32, %in_11: f32, %out: f32):
        %31 = arith.divf %in, %in_11 : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %collapsed_8 = tensor.collapse_shape %28 [[0, 1], [2], [3]] : tensor<1x2x64x128xf32> into tensor<2x64x128xf32>
      %collapsed_9 = tensor.collapse_shape %arg5 [[0, 1], [2], [3]] : tensor<1x2x128x32xf32> into tensor<2x128x32xf32>
      %29 = linalg.fill ins(%cst_3 : f32) outs(%11 : tensor<2x64x32xf32>) -> tensor<2x64x32xf32>
      %30 = linalg.batch_matmul ins(%collapsed_8, %collapsed_9 : tensor<2x64x128xf32>, tensor<2x128x32xf32>) outs(%29 : tensor<2x64x32xf32>) -> tensor<2x64x32xf32>
      %expanded_10 = tensor.expand_shape %30 [[0, 1], [2], [3]] output_shape [1, 2, 64, 32] : tensor<2x64x32xf32> into tensor<1x2x64x32xf32>
      fusion.yield %expanded_10 : tensor<1x2x64x32xf32>
    }
    return %0 : tensor<1x2x64x32xf32>
  }
}

// -----

// CHECK-LABEL: func.func @top_left_again
// CHECK: fusion.group attention
// CHECK: %[[END:.*]] = arith.addi %{{.*}}, %c16{{.*}} : index
// CHECK-NEXT: %[[C:.*]] = arith.constant -1 : index
// CHECK-NEXT: arith.addi %[[END]], %[[C]] : index
// CHECK-NOT: arith.constant 63 : index
// CHECK-NOT: arith.constant 65 : index

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0) -> (d0)>
#map2 = affine_map<(d0, d1) -> (0, d1)>
#map3 = affine_map<(d0, d1) -> (d0, 0)>
#map4 = affine_map<(d0, d1) -> (d0, d1)>
#map5 = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
#map6 = affine_map<(d0, d1, d2, d3) -> ()>
#map7 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map8 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @top_left_again(%arg0: tensor<1x2x64x32xf32>, %arg1: tensor<1x2x128x32xf32>, %arg2: tensor<1x2x128x32xf32>) -> tensor<1x2x64x32xf32> {
    %0 = fusion.group attention (%arg3 = %arg1 : tensor<1x2x128x32xf32>, %arg4 = %arg0 : tensor<1x2x64x32xf32>, %arg5 = %arg2 : tensor<1x2x128x32xf32>) -> tensor<1x2x64x32xf32> attributes {fusion.attention = {batch = 2 : i64, dtype = "f32", head_dim = 32 : i64, kv_len = 128 : i64, mask = "computed", masked_rows = "nan", q_len = 64 : i64, score_ops = 2 : i64, v_dim = 32 : i64}, fusion.device = "cpu", fusion.path = "attention", fusion.reason = "attention: Q K^T, the score ops, softmax and P V in one kernel (online softmax: the scores never reach memory)"} {
      %cst = arith.constant 0xFF800000 : f32
      %c0_i64 = arith.constant 0 : i64
      %cst_0 = arith.constant dense<0xFF800000> : tensor<f32>
      %cst_1 = arith.constant dense<true> : tensor<64x128xi1>
      %c1_i64 = arith.constant 1 : i64
      %cst_2 = arith.constant 2.500000e-01 : f32
      %cst_3 = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<1x2x32x128xf32>
      %2 = tensor.empty() : tensor<2x64x128xf32>
      %3 = tensor.empty() : tensor<1x2x64x128xf32>
      %4 = tensor.empty() : tensor<128xi64>
      %5 = tensor.empty() : tensor<64xi64>
      %6 = tensor.empty() : tensor<64x128xi64>
      %7 = tensor.empty() : tensor<64x128xi1>
      %8 = tensor.empty() : tensor<1x2x64xi64>
      %9 = tensor.empty() : tensor<1x2x64xf32>
      %10 = tensor.empty() : tensor<1x2x64x1xf32>
      %11 = tensor.empty() : tensor<2x64x32xf32>
      %transposed = linalg.transpose ins(%arg3 : tensor<1x2x128x32xf32>) outs(%1 : tensor<1x2x32x128xf32>) permutation = [0, 1, 3, 2] 
      %collapsed = tensor.collapse_shape %arg4 [[0, 1], [2], [3]] : tensor<1x2x64x32xf32> into tensor<2x64x32xf32>
      %collapsed_4 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x32x128xf32> into tensor<2x32x128xf32>
      %12 = linalg.fill ins(%cst_3 : f32) outs(%2 : tensor<2x64x128xf32>) -> tensor<2x64x128xf32>
      %13 = linalg.batch_matmul ins(%collapsed, %collapsed_4 : tensor<2x64x32xf32>, tensor<2x32x128xf32>) outs(%12 : tensor<2x64x128xf32>) -> tensor<2x64x128xf32>
      %expanded = tensor.expand_shape %13 [[0, 1], [2], [3]] output_shape [1, 2, 64, 128] : tensor<2x64x128xf32> into tensor<1x2x64x128xf32>
      %14 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x64x128xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: f32, %out: f32):
        %31 = arith.mulf %in, %cst_2 : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %15 = linalg.generic {indexing_maps = [#map1], iterator_types = ["parallel"]} outs(%4 : tensor<128xi64>) {
      ^bb0(%out: i64):
        %31 = linalg.index 0 : index
        %32 = arith.index_cast %31 : index to i64
        linalg.yield %32 : i64
      } -> tensor<128xi64>
      %expanded_5 = tensor.expand_shape %15 [[0, 1]] output_shape [1, 128] : tensor<128xi64> into tensor<1x128xi64>
      %16 = linalg.generic {indexing_maps = [#map1], iterator_types = ["parallel"]} outs(%5 : tensor<64xi64>) {
      ^bb0(%out: i64):
        %31 = linalg.index 0 : index
        %32 = arith.index_cast %31 : index to i64
        linalg.yield %32 : i64
      } -> tensor<64xi64>
      %expanded_6 = tensor.expand_shape %16 [[0, 1]] output_shape [64, 1] : tensor<64xi64> into tensor<64x1xi64>
      %17 = linalg.generic {indexing_maps = [#map2, #map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%expanded_5, %expanded_6 : tensor<1x128xi64>, tensor<64x1xi64>) outs(%6 : tensor<64x128xi64>) {
      ^bb0(%in: i64, %in_11: i64, %out: i64):
        %31 = arith.subi %in, %in_11 : i64
        linalg.yield %31 : i64
      } -> tensor<64x128xi64>
      %18 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%17 : tensor<64x128xi64>) outs(%7 : tensor<64x128xi1>) {
      ^bb0(%in: i64, %out: i1):
        %31 = arith.cmpi sge, %in, %c1_i64 : i64
        linalg.yield %31 : i1
      } -> tensor<64x128xi1>
      %19 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%18, %cst_1 : tensor<64x128xi1>, tensor<64x128xi1>) outs(%7 : tensor<64x128xi1>) {
      ^bb0(%in: i1, %in_11: i1, %out: i1):
        %31 = arith.andi %in, %in_11 : i1
        linalg.yield %31 : i1
      } -> tensor<64x128xi1>
      %20 = linalg.generic {indexing_maps = [#map5, #map6, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%19, %cst_0, %14 : tensor<64x128xi1>, tensor<f32>, tensor<1x2x64x128xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: i1, %in_11: f32, %in_12: f32, %out: f32):
        %31 = arith.select %in, %in_11, %in_12 : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %21 = linalg.fill ins(%c0_i64 : i64) outs(%8 : tensor<1x2x64xi64>) -> tensor<1x2x64xi64>
      %22 = linalg.fill ins(%cst : f32) outs(%9 : tensor<1x2x64xf32>) -> tensor<1x2x64xf32>
      %23:2 = linalg.generic {indexing_maps = [#map, #map7, #map7], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%20 : tensor<1x2x64x128xf32>) outs(%22, %21 : tensor<1x2x64xf32>, tensor<1x2x64xi64>) {
      ^bb0(%in: f32, %out: f32, %out_11: i64):
        %31 = linalg.index 3 : index
        %32 = arith.index_cast %31 : index to i64
        %33 = arith.maximumf %in, %out : f32
        %34 = arith.cmpf ugt, %in, %out : f32
        %35 = arith.cmpf ord, %out, %out : f32
        %36 = arith.andi %34, %35 : i1
        %37 = arith.select %36, %32, %out_11 : i64
        linalg.yield %33, %37 : f32, i64
      } -> (tensor<1x2x64xf32>, tensor<1x2x64xi64>)
      %expanded_7 = tensor.expand_shape %23#0 [[0], [1], [2, 3]] output_shape [1, 2, 64, 1] : tensor<1x2x64xf32> into tensor<1x2x64x1xf32>
      %24 = linalg.generic {indexing_maps = [#map, #map8, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%20, %expanded_7 : tensor<1x2x64x128xf32>, tensor<1x2x64x1xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: f32, %in_11: f32, %out: f32):
        %31 = arith.subf %in, %in_11 : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %25 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%24 : tensor<1x2x64x128xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: f32, %out: f32):
        %31 = math.exp %in : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %26 = linalg.fill ins(%cst_3 : f32) outs(%10 : tensor<1x2x64x1xf32>) -> tensor<1x2x64x1xf32>
      %27 = linalg.generic {indexing_maps = [#map, #map8], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%25 : tensor<1x2x64x128xf32>) outs(%26 : tensor<1x2x64x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %31 = arith.addf %in, %out : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x1xf32>
      %28 = linalg.generic {indexing_maps = [#map, #map8, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%25, %27 : tensor<1x2x64x128xf32>, tensor<1x2x64x1xf32>) outs(%3 : tensor<1x2x64x128xf32>) {
      ^bb0(%in: f32, %in_11: f32, %out: f32):
        %31 = arith.divf %in, %in_11 : f32
        linalg.yield %31 : f32
      } -> tensor<1x2x64x128xf32>
      %collapsed_8 = tensor.collapse_shape %28 [[0, 1], [2], [3]] : tensor<1x2x64x128xf32> into tensor<2x64x128xf32>
      %collapsed_9 = tensor.collapse_shape %arg5 [[0, 1], [2], [3]] : tensor<1x2x128x32xf32> into tensor<2x128x32xf32>
      %29 = linalg.fill ins(%cst_3 : f32) outs(%11 : tensor<2x64x32xf32>) -> tensor<2x64x32xf32>
      %30 = linalg.batch_matmul ins(%collapsed_8, %collapsed_9 : tensor<2x64x128xf32>, tensor<2x128x32xf32>) outs(%29 : tensor<2x64x32xf32>) -> tensor<2x64x32xf32>
      %expanded_10 = tensor.expand_shape %30 [[0, 1], [2], [3]] output_shape [1, 2, 64, 32] : tensor<2x64x32xf32> into tensor<1x2x64x32xf32>
      fusion.yield %expanded_10 : tensor<1x2x64x32xf32>
    }
    return %0 : tensor<1x2x64x32xf32>
  }
}
