// RUN: fusec-opt %s --fusion-attention --split-input-file | filecheck %s
// RUN: fusec-opt %s --fusion-attention=device=cpu --split-input-file | filecheck %s --check-prefix=CPU
// RUN: fusec-opt %s --fusion-attention=device=nowhere --split-input-file | filecheck %s --check-prefix=NONE

// --fusion-attention wraps Q K^T -> score ops -> softmax(-1) -> P V in one attention group
// (its parameters in fusion.attention, path "attention"), or records why not on the first
// contraction. Cases: the naive form (scale by a divide), SDPA causal (a mask computed from
// indices: mask = "computed", no scale), a head split whose K^T the canonicaliser composed
// ((0, 2, 3, 1): split into K's transpose outside and the swap inside), softmax over another
// axis (refused), probabilities also returned (refused), and a device with no attention
// kernel (refused, the ops left alone). The CPU refuses these for their size (16 x 16 scores:
// the planner's kernels are faster there; its kernel, --fusion-cpu-attention, takes larger).

// CHECK-LABEL: func.func @naive
// CHECK: fusion.group attention
// CHECK-SAME: fusion.attention = {batch = 2 : i64, dtype = "bf16", head_dim = 64 : i64, kv_len = 16 : i64, mask = "none", masked_rows = "nan", q_len = 16 : i64, scale = 1.250000e-01 : f64
// CHECK-SAME: fusion.path = "attention"
// CHECK: linalg.batch_matmul
// CHECK: math.exp
// CHECK: linalg.batch_matmul
// CHECK: fusion.yield
// CHECK-NOT: linalg.batch_matmul
// CHECK: return
// CPU-LABEL: func.func @naive
// CPU-NOT: fusion.group
// CPU: linalg.batch_matmul {fusion.attention_refused = "16 x 16 scores per head: fewer than the CPU attention kernel pays for (4096); the planner's kernels"}
// NONE-LABEL: func.func @naive
// NONE-NOT: fusion.group
// NONE: linalg.batch_matmul {fusion.attention_refused = "no attention kernel for device 'nowhere' yet"}

#naive_map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#naive_map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#naive_map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#naive_map3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @naive(%arg0: tensor<1x2x16x64xbf16>, %arg1: tensor<1x2x16x64xbf16>, %arg2: tensor<1x2x16x64xbf16>) -> tensor<1x2x16x64xbf16> {
    %cst = arith.constant 0.000000e+00 : f32
    %c0_i64 = arith.constant 0 : i64
    %cst_0 = arith.constant 0xFF800000 : f32
    %cst_1 = arith.constant 8.000000e+00 : bf16
    %0 = tensor.empty() : tensor<1x2x64x16xbf16>
    %transposed = linalg.transpose ins(%arg1 : tensor<1x2x16x64xbf16>) outs(%0 : tensor<1x2x64x16xbf16>) permutation = [0, 1, 3, 2] 
    %collapsed = tensor.collapse_shape %arg0 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
    %collapsed_2 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x64x16xbf16> into tensor<2x64x16xbf16>
    %1 = tensor.empty() : tensor<2x16x16xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
    %3 = linalg.batch_matmul ins(%collapsed, %collapsed_2 : tensor<2x16x64xbf16>, tensor<2x64x16xbf16>) outs(%2 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
    %4 = tensor.empty() : tensor<2x16x16xbf16>
    %5 = linalg.generic {indexing_maps = [#naive_map, #naive_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%3 : tensor<2x16x16xf32>) outs(%4 : tensor<2x16x16xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %27 = arith.truncf %in : f32 to bf16
      linalg.yield %27 : bf16
    } -> tensor<2x16x16xbf16>
    %expanded = tensor.expand_shape %5 [[0, 1], [2], [3]] output_shape [1, 2, 16, 16] : tensor<2x16x16xbf16> into tensor<1x2x16x16xbf16>
    %6 = tensor.empty() : tensor<1x2x16x16xbf16>
    %7 = linalg.generic {indexing_maps = [#naive_map1, #naive_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x16x16xbf16>) outs(%6 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      %27 = arith.divf %in, %cst_1 : bf16
      linalg.yield %27 : bf16
    } -> tensor<1x2x16x16xbf16>
    %8 = tensor.empty() : tensor<1x2x16x16xf32>
    %9 = linalg.generic {indexing_maps = [#naive_map1, #naive_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%7 : tensor<1x2x16x16xbf16>) outs(%8 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %27 = arith.extf %in : bf16 to f32
      linalg.yield %27 : f32
    } -> tensor<1x2x16x16xf32>
    %10 = tensor.empty() : tensor<1x2x16xi64>
    %11 = linalg.fill ins(%c0_i64 : i64) outs(%10 : tensor<1x2x16xi64>) -> tensor<1x2x16xi64>
    %12 = tensor.empty() : tensor<1x2x16xf32>
    %13 = linalg.fill ins(%cst_0 : f32) outs(%12 : tensor<1x2x16xf32>) -> tensor<1x2x16xf32>
    %14:2 = linalg.generic {indexing_maps = [#naive_map1, #naive_map2, #naive_map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%9 : tensor<1x2x16x16xf32>) outs(%13, %11 : tensor<1x2x16xf32>, tensor<1x2x16xi64>) {
    ^bb0(%in: f32, %out: f32, %out_7: i64):
      %27 = linalg.index 3 : index
      %28 = arith.index_cast %27 : index to i64
      %29 = arith.maximumf %in, %out : f32
      %30 = arith.cmpf ogt, %in, %out : f32
      %31 = arith.select %30, %28, %out_7 : i64
      linalg.yield %29, %31 : f32, i64
    } -> (tensor<1x2x16xf32>, tensor<1x2x16xi64>)
    %expanded_3 = tensor.expand_shape %14#0 [[0], [1], [2, 3]] output_shape [1, 2, 16, 1] : tensor<1x2x16xf32> into tensor<1x2x16x1xf32>
    %15 = linalg.generic {indexing_maps = [#naive_map1, #naive_map3, #naive_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%9, %expanded_3 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%8 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %in_7: f32, %out: f32):
      %27 = arith.subf %in, %in_7 : f32
      linalg.yield %27 : f32
    } -> tensor<1x2x16x16xf32>
    %16 = linalg.generic {indexing_maps = [#naive_map1, #naive_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%15 : tensor<1x2x16x16xf32>) outs(%8 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %27 = math.exp %in : f32
      linalg.yield %27 : f32
    } -> tensor<1x2x16x16xf32>
    %17 = tensor.empty() : tensor<1x2x16x1xf32>
    %18 = linalg.fill ins(%cst : f32) outs(%17 : tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
    %19 = linalg.generic {indexing_maps = [#naive_map1, #naive_map3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%16 : tensor<1x2x16x16xf32>) outs(%18 : tensor<1x2x16x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %27 = arith.addf %in, %out : f32
      linalg.yield %27 : f32
    } -> tensor<1x2x16x1xf32>
    %20 = linalg.generic {indexing_maps = [#naive_map1, #naive_map3, #naive_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%16, %19 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%8 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %in_7: f32, %out: f32):
      %27 = arith.divf %in, %in_7 : f32
      linalg.yield %27 : f32
    } -> tensor<1x2x16x16xf32>
    %21 = linalg.generic {indexing_maps = [#naive_map1, #naive_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%20 : tensor<1x2x16x16xf32>) outs(%6 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %27 = arith.truncf %in : f32 to bf16
      linalg.yield %27 : bf16
    } -> tensor<1x2x16x16xbf16>
    %collapsed_4 = tensor.collapse_shape %21 [[0, 1], [2], [3]] : tensor<1x2x16x16xbf16> into tensor<2x16x16xbf16>
    %collapsed_5 = tensor.collapse_shape %arg2 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
    %22 = tensor.empty() : tensor<2x16x64xf32>
    %23 = linalg.fill ins(%cst : f32) outs(%22 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %24 = linalg.batch_matmul ins(%collapsed_4, %collapsed_5 : tensor<2x16x16xbf16>, tensor<2x16x64xbf16>) outs(%23 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %25 = tensor.empty() : tensor<2x16x64xbf16>
    %26 = linalg.generic {indexing_maps = [#naive_map, #naive_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%24 : tensor<2x16x64xf32>) outs(%25 : tensor<2x16x64xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %27 = arith.truncf %in : f32 to bf16
      linalg.yield %27 : bf16
    } -> tensor<2x16x64xbf16>
    %expanded_6 = tensor.expand_shape %26 [[0, 1], [2], [3]] output_shape [1, 2, 16, 64] : tensor<2x16x64xbf16> into tensor<1x2x16x64xbf16>
    return %expanded_6 : tensor<1x2x16x64xbf16>
  }
}

// -----

// CHECK-LABEL: func.func @causal
// CHECK: fusion.group attention
// CHECK-SAME: mask = "computed"
// CHECK-NOT: scale =
// CHECK-SAME: fusion.path = "attention"
// The causal mask's arange and compare come inside (evaluated per element by the kernel).
// CHECK: linalg.index
// CHECK: arith.cmpi sge
// CHECK: fusion.yield
// CHECK-NOT: linalg.batch_matmul

#causal_map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#causal_map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#causal_map2 = affine_map<(d0) -> (d0)>
#causal_map3 = affine_map<(d0, d1) -> (d0, 0)>
#causal_map4 = affine_map<(d0, d1) -> (0, d1)>
#causal_map5 = affine_map<(d0, d1) -> (d0, d1)>
#causal_map6 = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
#causal_map7 = affine_map<(d0, d1, d2, d3) -> ()>
#causal_map8 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#causal_map9 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @causal(%arg0: tensor<1x2x16x64xbf16>, %arg1: tensor<1x2x16x64xbf16>, %arg2: tensor<1x2x16x64xbf16>) -> tensor<1x2x16x64xbf16> {
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 0xFF800000 : f32
    %cst_1 = arith.constant dense<0xFF80> : tensor<bf16>
    %cst_2 = arith.constant 1.250000e-01 : bf16
    %0 = tensor.empty() : tensor<1x2x64x16xbf16>
    %transposed = linalg.transpose ins(%arg1 : tensor<1x2x16x64xbf16>) outs(%0 : tensor<1x2x64x16xbf16>) permutation = [0, 1, 3, 2] 
    %collapsed = tensor.collapse_shape %arg0 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
    %collapsed_3 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x64x16xbf16> into tensor<2x64x16xbf16>
    %1 = tensor.empty() : tensor<2x16x16xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
    %3 = linalg.batch_matmul ins(%collapsed, %collapsed_3 : tensor<2x16x64xbf16>, tensor<2x64x16xbf16>) outs(%2 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
    %4 = tensor.empty() : tensor<2x16x16xbf16>
    %5 = linalg.generic {indexing_maps = [#causal_map, #causal_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%3 : tensor<2x16x16xf32>) outs(%4 : tensor<2x16x16xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %32 = arith.truncf %in : f32 to bf16
      linalg.yield %32 : bf16
    } -> tensor<2x16x16xbf16>
    %expanded = tensor.expand_shape %5 [[0, 1], [2], [3]] output_shape [1, 2, 16, 16] : tensor<2x16x16xbf16> into tensor<1x2x16x16xbf16>
    %6 = tensor.empty() : tensor<1x2x16x16xbf16>
    %7 = linalg.generic {indexing_maps = [#causal_map1, #causal_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x16x16xbf16>) outs(%6 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      %32 = arith.mulf %in, %cst_2 : bf16
      linalg.yield %32 : bf16
    } -> tensor<1x2x16x16xbf16>
    %8 = tensor.empty() : tensor<16xi64>
    %9 = linalg.generic {indexing_maps = [#causal_map2], iterator_types = ["parallel"]} outs(%8 : tensor<16xi64>) {
    ^bb0(%out: i64):
      %32 = linalg.index 0 : index
      %33 = arith.index_cast %32 : index to i64
      linalg.yield %33 : i64
    } -> tensor<16xi64>
    %expanded_4 = tensor.expand_shape %9 [[0, 1]] output_shape [16, 1] : tensor<16xi64> into tensor<16x1xi64>
    %expanded_5 = tensor.expand_shape %9 [[0, 1]] output_shape [1, 16] : tensor<16xi64> into tensor<1x16xi64>
    %10 = tensor.empty() : tensor<16x16xi1>
    %11 = linalg.generic {indexing_maps = [#causal_map3, #causal_map4, #causal_map5], iterator_types = ["parallel", "parallel"]} ins(%expanded_4, %expanded_5 : tensor<16x1xi64>, tensor<1x16xi64>) outs(%10 : tensor<16x16xi1>) {
    ^bb0(%in: i64, %in_10: i64, %out: i1):
      %32 = arith.cmpi sge, %in, %in_10 : i64
      linalg.yield %32 : i1
    } -> tensor<16x16xi1>
    %12 = linalg.generic {indexing_maps = [#causal_map6, #causal_map1, #causal_map7, #causal_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%11, %7, %cst_1 : tensor<16x16xi1>, tensor<1x2x16x16xbf16>, tensor<bf16>) outs(%6 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: i1, %in_10: bf16, %in_11: bf16, %out: bf16):
      %32 = arith.select %in, %in_10, %in_11 : bf16
      linalg.yield %32 : bf16
    } -> tensor<1x2x16x16xbf16>
    %13 = tensor.empty() : tensor<1x2x16x16xf32>
    %14 = linalg.generic {indexing_maps = [#causal_map1, #causal_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%12 : tensor<1x2x16x16xbf16>) outs(%13 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %32 = arith.extf %in : bf16 to f32
      linalg.yield %32 : f32
    } -> tensor<1x2x16x16xf32>
    %15 = tensor.empty() : tensor<1x2x16xi64>
    %16 = linalg.fill ins(%c0_i64 : i64) outs(%15 : tensor<1x2x16xi64>) -> tensor<1x2x16xi64>
    %17 = tensor.empty() : tensor<1x2x16xf32>
    %18 = linalg.fill ins(%cst_0 : f32) outs(%17 : tensor<1x2x16xf32>) -> tensor<1x2x16xf32>
    %19:2 = linalg.generic {indexing_maps = [#causal_map1, #causal_map8, #causal_map8], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%14 : tensor<1x2x16x16xf32>) outs(%18, %16 : tensor<1x2x16xf32>, tensor<1x2x16xi64>) {
    ^bb0(%in: f32, %out: f32, %out_10: i64):
      %32 = linalg.index 3 : index
      %33 = arith.index_cast %32 : index to i64
      %34 = arith.maximumf %in, %out : f32
      %35 = arith.cmpf ogt, %in, %out : f32
      %36 = arith.select %35, %33, %out_10 : i64
      linalg.yield %34, %36 : f32, i64
    } -> (tensor<1x2x16xf32>, tensor<1x2x16xi64>)
    %expanded_6 = tensor.expand_shape %19#0 [[0], [1], [2, 3]] output_shape [1, 2, 16, 1] : tensor<1x2x16xf32> into tensor<1x2x16x1xf32>
    %20 = linalg.generic {indexing_maps = [#causal_map1, #causal_map9, #causal_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%14, %expanded_6 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%13 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %in_10: f32, %out: f32):
      %32 = arith.subf %in, %in_10 : f32
      linalg.yield %32 : f32
    } -> tensor<1x2x16x16xf32>
    %21 = linalg.generic {indexing_maps = [#causal_map1, #causal_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%20 : tensor<1x2x16x16xf32>) outs(%13 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %32 = math.exp %in : f32
      linalg.yield %32 : f32
    } -> tensor<1x2x16x16xf32>
    %22 = tensor.empty() : tensor<1x2x16x1xf32>
    %23 = linalg.fill ins(%cst : f32) outs(%22 : tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
    %24 = linalg.generic {indexing_maps = [#causal_map1, #causal_map9], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%21 : tensor<1x2x16x16xf32>) outs(%23 : tensor<1x2x16x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %32 = arith.addf %in, %out : f32
      linalg.yield %32 : f32
    } -> tensor<1x2x16x1xf32>
    %25 = linalg.generic {indexing_maps = [#causal_map1, #causal_map9, #causal_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%21, %24 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%13 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %in_10: f32, %out: f32):
      %32 = arith.divf %in, %in_10 : f32
      linalg.yield %32 : f32
    } -> tensor<1x2x16x16xf32>
    %26 = linalg.generic {indexing_maps = [#causal_map1, #causal_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%25 : tensor<1x2x16x16xf32>) outs(%6 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %32 = arith.truncf %in : f32 to bf16
      linalg.yield %32 : bf16
    } -> tensor<1x2x16x16xbf16>
    %collapsed_7 = tensor.collapse_shape %26 [[0, 1], [2], [3]] : tensor<1x2x16x16xbf16> into tensor<2x16x16xbf16>
    %collapsed_8 = tensor.collapse_shape %arg2 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
    %27 = tensor.empty() : tensor<2x16x64xf32>
    %28 = linalg.fill ins(%cst : f32) outs(%27 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %29 = linalg.batch_matmul ins(%collapsed_7, %collapsed_8 : tensor<2x16x16xbf16>, tensor<2x16x64xbf16>) outs(%28 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %30 = tensor.empty() : tensor<2x16x64xbf16>
    %31 = linalg.generic {indexing_maps = [#causal_map, #causal_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%29 : tensor<2x16x64xf32>) outs(%30 : tensor<2x16x64xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %32 = arith.truncf %in : f32 to bf16
      linalg.yield %32 : bf16
    } -> tensor<2x16x64xbf16>
    %expanded_9 = tensor.expand_shape %31 [[0, 1], [2], [3]] output_shape [1, 2, 16, 64] : tensor<2x16x64xbf16> into tensor<1x2x16x64xbf16>
    return %expanded_9 : tensor<1x2x16x64xbf16>
  }
}

// -----

// CHECK-LABEL: func.func @head_split
// K's head split stays outside as a transpose of its own; K^T inside is the swap.
// CHECK: linalg.transpose {{.*}} permutation = [0, 2, 1, 3]
// CHECK: fusion.group attention
// CHECK: linalg.transpose {{.*}} permutation = [0, 1, 3, 2]
// CHECK-NOT: permutation = [0, 2, 3, 1]
// CHECK: fusion.yield

#head_split_map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#head_split_map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#head_split_map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#head_split_map3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @head_split(%arg0: tensor<1x16x384xbf16>) -> tensor<1x2x16x64xbf16> {
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 0xFF800000 : f32
    %cst_1 = arith.constant 1.250000e-01 : bf16
    %extracted_slice = tensor.extract_slice %arg0[0, 0, 0] [1, 16, 128] [1, 1, 1] : tensor<1x16x384xbf16> to tensor<1x16x128xbf16>
    %extracted_slice_2 = tensor.extract_slice %arg0[0, 0, 128] [1, 16, 128] [1, 1, 1] : tensor<1x16x384xbf16> to tensor<1x16x128xbf16>
    %extracted_slice_3 = tensor.extract_slice %arg0[0, 0, 256] [1, 16, 128] [1, 1, 1] : tensor<1x16x384xbf16> to tensor<1x16x128xbf16>
    %expanded = tensor.expand_shape %extracted_slice [[0], [1], [2, 3]] output_shape [1, 16, 2, 64] : tensor<1x16x128xbf16> into tensor<1x16x2x64xbf16>
    %0 = tensor.empty() : tensor<1x2x16x64xbf16>
    %transposed = linalg.transpose ins(%expanded : tensor<1x16x2x64xbf16>) outs(%0 : tensor<1x2x16x64xbf16>) permutation = [0, 2, 1, 3] 
    %expanded_4 = tensor.expand_shape %extracted_slice_2 [[0], [1], [2, 3]] output_shape [1, 16, 2, 64] : tensor<1x16x128xbf16> into tensor<1x16x2x64xbf16>
    %expanded_5 = tensor.expand_shape %extracted_slice_3 [[0], [1], [2, 3]] output_shape [1, 16, 2, 64] : tensor<1x16x128xbf16> into tensor<1x16x2x64xbf16>
    %transposed_6 = linalg.transpose ins(%expanded_5 : tensor<1x16x2x64xbf16>) outs(%0 : tensor<1x2x16x64xbf16>) permutation = [0, 2, 1, 3] 
    %1 = tensor.empty() : tensor<1x2x64x16xbf16>
    %transposed_7 = linalg.transpose ins(%expanded_4 : tensor<1x16x2x64xbf16>) outs(%1 : tensor<1x2x64x16xbf16>) permutation = [0, 2, 3, 1] 
    %collapsed = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
    %collapsed_8 = tensor.collapse_shape %transposed_7 [[0, 1], [2], [3]] : tensor<1x2x64x16xbf16> into tensor<2x64x16xbf16>
    %2 = tensor.empty() : tensor<2x16x16xf32>
    %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
    %4 = linalg.batch_matmul ins(%collapsed, %collapsed_8 : tensor<2x16x64xbf16>, tensor<2x64x16xbf16>) outs(%3 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
    %5 = tensor.empty() : tensor<2x16x16xbf16>
    %6 = linalg.generic {indexing_maps = [#head_split_map, #head_split_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%4 : tensor<2x16x16xf32>) outs(%5 : tensor<2x16x16xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %28 = arith.truncf %in : f32 to bf16
      linalg.yield %28 : bf16
    } -> tensor<2x16x16xbf16>
    %expanded_9 = tensor.expand_shape %6 [[0, 1], [2], [3]] output_shape [1, 2, 16, 16] : tensor<2x16x16xbf16> into tensor<1x2x16x16xbf16>
    %7 = tensor.empty() : tensor<1x2x16x16xbf16>
    %8 = linalg.generic {indexing_maps = [#head_split_map1, #head_split_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded_9 : tensor<1x2x16x16xbf16>) outs(%7 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      %28 = arith.mulf %in, %cst_1 : bf16
      linalg.yield %28 : bf16
    } -> tensor<1x2x16x16xbf16>
    %9 = tensor.empty() : tensor<1x2x16x16xf32>
    %10 = linalg.generic {indexing_maps = [#head_split_map1, #head_split_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%8 : tensor<1x2x16x16xbf16>) outs(%9 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %28 = arith.extf %in : bf16 to f32
      linalg.yield %28 : f32
    } -> tensor<1x2x16x16xf32>
    %11 = tensor.empty() : tensor<1x2x16xi64>
    %12 = linalg.fill ins(%c0_i64 : i64) outs(%11 : tensor<1x2x16xi64>) -> tensor<1x2x16xi64>
    %13 = tensor.empty() : tensor<1x2x16xf32>
    %14 = linalg.fill ins(%cst_0 : f32) outs(%13 : tensor<1x2x16xf32>) -> tensor<1x2x16xf32>
    %15:2 = linalg.generic {indexing_maps = [#head_split_map1, #head_split_map2, #head_split_map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%10 : tensor<1x2x16x16xf32>) outs(%14, %12 : tensor<1x2x16xf32>, tensor<1x2x16xi64>) {
    ^bb0(%in: f32, %out: f32, %out_14: i64):
      %28 = linalg.index 3 : index
      %29 = arith.index_cast %28 : index to i64
      %30 = arith.maximumf %in, %out : f32
      %31 = arith.cmpf ogt, %in, %out : f32
      %32 = arith.select %31, %29, %out_14 : i64
      linalg.yield %30, %32 : f32, i64
    } -> (tensor<1x2x16xf32>, tensor<1x2x16xi64>)
    %expanded_10 = tensor.expand_shape %15#0 [[0], [1], [2, 3]] output_shape [1, 2, 16, 1] : tensor<1x2x16xf32> into tensor<1x2x16x1xf32>
    %16 = linalg.generic {indexing_maps = [#head_split_map1, #head_split_map3, #head_split_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%10, %expanded_10 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%9 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %in_14: f32, %out: f32):
      %28 = arith.subf %in, %in_14 : f32
      linalg.yield %28 : f32
    } -> tensor<1x2x16x16xf32>
    %17 = linalg.generic {indexing_maps = [#head_split_map1, #head_split_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%16 : tensor<1x2x16x16xf32>) outs(%9 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %28 = math.exp %in : f32
      linalg.yield %28 : f32
    } -> tensor<1x2x16x16xf32>
    %18 = tensor.empty() : tensor<1x2x16x1xf32>
    %19 = linalg.fill ins(%cst : f32) outs(%18 : tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
    %20 = linalg.generic {indexing_maps = [#head_split_map1, #head_split_map3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%17 : tensor<1x2x16x16xf32>) outs(%19 : tensor<1x2x16x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %28 = arith.addf %in, %out : f32
      linalg.yield %28 : f32
    } -> tensor<1x2x16x1xf32>
    %21 = linalg.generic {indexing_maps = [#head_split_map1, #head_split_map3, #head_split_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%17, %20 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%9 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %in_14: f32, %out: f32):
      %28 = arith.divf %in, %in_14 : f32
      linalg.yield %28 : f32
    } -> tensor<1x2x16x16xf32>
    %22 = linalg.generic {indexing_maps = [#head_split_map1, #head_split_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%21 : tensor<1x2x16x16xf32>) outs(%7 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %28 = arith.truncf %in : f32 to bf16
      linalg.yield %28 : bf16
    } -> tensor<1x2x16x16xbf16>
    %collapsed_11 = tensor.collapse_shape %22 [[0, 1], [2], [3]] : tensor<1x2x16x16xbf16> into tensor<2x16x16xbf16>
    %collapsed_12 = tensor.collapse_shape %transposed_6 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
    %23 = tensor.empty() : tensor<2x16x64xf32>
    %24 = linalg.fill ins(%cst : f32) outs(%23 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %25 = linalg.batch_matmul ins(%collapsed_11, %collapsed_12 : tensor<2x16x16xbf16>, tensor<2x16x64xbf16>) outs(%24 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %26 = tensor.empty() : tensor<2x16x64xbf16>
    %27 = linalg.generic {indexing_maps = [#head_split_map, #head_split_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%25 : tensor<2x16x64xf32>) outs(%26 : tensor<2x16x64xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %28 = arith.truncf %in : f32 to bf16
      linalg.yield %28 : bf16
    } -> tensor<2x16x64xbf16>
    %expanded_13 = tensor.expand_shape %27 [[0, 1], [2], [3]] output_shape [1, 2, 16, 64] : tensor<2x16x64xbf16> into tensor<1x2x16x64xbf16>
    return %expanded_13 : tensor<1x2x16x64xbf16>
  }
}

// -----

// CHECK-LABEL: func.func @other_axis
// CHECK-NOT: fusion.group
// CHECK: linalg.batch_matmul {fusion.attention_refused = "softmax over dim 2, not the last"}

#other_axis_map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#other_axis_map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#other_axis_map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#other_axis_map3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
module {
  func.func @other_axis(%arg0: tensor<1x2x16x64xbf16>, %arg1: tensor<1x2x16x64xbf16>, %arg2: tensor<1x2x16x64xbf16>) -> tensor<1x2x16x64xbf16> {
    %cst = arith.constant 0.000000e+00 : f32
    %c0_i64 = arith.constant 0 : i64
    %cst_0 = arith.constant 0xFF800000 : f32
    %0 = tensor.empty() : tensor<1x2x64x16xbf16>
    %transposed = linalg.transpose ins(%arg1 : tensor<1x2x16x64xbf16>) outs(%0 : tensor<1x2x64x16xbf16>) permutation = [0, 1, 3, 2] 
    %collapsed = tensor.collapse_shape %arg0 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
    %collapsed_1 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x64x16xbf16> into tensor<2x64x16xbf16>
    %1 = tensor.empty() : tensor<2x16x16xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
    %3 = linalg.batch_matmul ins(%collapsed, %collapsed_1 : tensor<2x16x64xbf16>, tensor<2x64x16xbf16>) outs(%2 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
    %4 = tensor.empty() : tensor<2x16x16xbf16>
    %5 = linalg.generic {indexing_maps = [#other_axis_map, #other_axis_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%3 : tensor<2x16x16xf32>) outs(%4 : tensor<2x16x16xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %26 = arith.truncf %in : f32 to bf16
      linalg.yield %26 : bf16
    } -> tensor<2x16x16xbf16>
    %expanded = tensor.expand_shape %5 [[0, 1], [2], [3]] output_shape [1, 2, 16, 16] : tensor<2x16x16xbf16> into tensor<1x2x16x16xbf16>
    %6 = tensor.empty() : tensor<1x2x16x16xf32>
    %7 = linalg.generic {indexing_maps = [#other_axis_map1, #other_axis_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x16x16xbf16>) outs(%6 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %26 = arith.extf %in : bf16 to f32
      linalg.yield %26 : f32
    } -> tensor<1x2x16x16xf32>
    %8 = tensor.empty() : tensor<1x2x16xi64>
    %9 = linalg.fill ins(%c0_i64 : i64) outs(%8 : tensor<1x2x16xi64>) -> tensor<1x2x16xi64>
    %10 = tensor.empty() : tensor<1x2x16xf32>
    %11 = linalg.fill ins(%cst_0 : f32) outs(%10 : tensor<1x2x16xf32>) -> tensor<1x2x16xf32>
    %12:2 = linalg.generic {indexing_maps = [#other_axis_map1, #other_axis_map2, #other_axis_map2], iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%7 : tensor<1x2x16x16xf32>) outs(%11, %9 : tensor<1x2x16xf32>, tensor<1x2x16xi64>) {
    ^bb0(%in: f32, %out: f32, %out_6: i64):
      %26 = linalg.index 2 : index
      %27 = arith.index_cast %26 : index to i64
      %28 = arith.maximumf %in, %out : f32
      %29 = arith.cmpf ogt, %in, %out : f32
      %30 = arith.select %29, %27, %out_6 : i64
      linalg.yield %28, %30 : f32, i64
    } -> (tensor<1x2x16xf32>, tensor<1x2x16xi64>)
    %expanded_2 = tensor.expand_shape %12#0 [[0], [1, 2], [3]] output_shape [1, 2, 1, 16] : tensor<1x2x16xf32> into tensor<1x2x1x16xf32>
    %13 = linalg.generic {indexing_maps = [#other_axis_map1, #other_axis_map3, #other_axis_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%7, %expanded_2 : tensor<1x2x16x16xf32>, tensor<1x2x1x16xf32>) outs(%6 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %in_6: f32, %out: f32):
      %26 = arith.subf %in, %in_6 : f32
      linalg.yield %26 : f32
    } -> tensor<1x2x16x16xf32>
    %14 = linalg.generic {indexing_maps = [#other_axis_map1, #other_axis_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%13 : tensor<1x2x16x16xf32>) outs(%6 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %26 = math.exp %in : f32
      linalg.yield %26 : f32
    } -> tensor<1x2x16x16xf32>
    %15 = tensor.empty() : tensor<1x2x1x16xf32>
    %16 = linalg.fill ins(%cst : f32) outs(%15 : tensor<1x2x1x16xf32>) -> tensor<1x2x1x16xf32>
    %17 = linalg.generic {indexing_maps = [#other_axis_map1, #other_axis_map3], iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%14 : tensor<1x2x16x16xf32>) outs(%16 : tensor<1x2x1x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %26 = arith.addf %in, %out : f32
      linalg.yield %26 : f32
    } -> tensor<1x2x1x16xf32>
    %18 = linalg.generic {indexing_maps = [#other_axis_map1, #other_axis_map3, #other_axis_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%14, %17 : tensor<1x2x16x16xf32>, tensor<1x2x1x16xf32>) outs(%6 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %in_6: f32, %out: f32):
      %26 = arith.divf %in, %in_6 : f32
      linalg.yield %26 : f32
    } -> tensor<1x2x16x16xf32>
    %19 = tensor.empty() : tensor<1x2x16x16xbf16>
    %20 = linalg.generic {indexing_maps = [#other_axis_map1, #other_axis_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%18 : tensor<1x2x16x16xf32>) outs(%19 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %26 = arith.truncf %in : f32 to bf16
      linalg.yield %26 : bf16
    } -> tensor<1x2x16x16xbf16>
    %collapsed_3 = tensor.collapse_shape %20 [[0, 1], [2], [3]] : tensor<1x2x16x16xbf16> into tensor<2x16x16xbf16>
    %collapsed_4 = tensor.collapse_shape %arg2 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
    %21 = tensor.empty() : tensor<2x16x64xf32>
    %22 = linalg.fill ins(%cst : f32) outs(%21 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %23 = linalg.batch_matmul ins(%collapsed_3, %collapsed_4 : tensor<2x16x16xbf16>, tensor<2x16x64xbf16>) outs(%22 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %24 = tensor.empty() : tensor<2x16x64xbf16>
    %25 = linalg.generic {indexing_maps = [#other_axis_map, #other_axis_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%23 : tensor<2x16x64xf32>) outs(%24 : tensor<2x16x64xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %26 = arith.truncf %in : f32 to bf16
      linalg.yield %26 : bf16
    } -> tensor<2x16x64xbf16>
    %expanded_5 = tensor.expand_shape %25 [[0, 1], [2], [3]] output_shape [1, 2, 16, 64] : tensor<2x16x64xbf16> into tensor<1x2x16x64xbf16>
    return %expanded_5 : tensor<1x2x16x64xbf16>
  }
}

// -----

// CHECK-LABEL: func.func @escapes
// CHECK-NOT: fusion.group
// CHECK: linalg.batch_matmul {fusion.attention_refused = "'linalg.generic' of the attention is also read outside it

#escapes_map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#escapes_map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#escapes_map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @escapes(%arg0: tensor<1x2x16x64xf32>, %arg1: tensor<1x2x16x64xf32>, %arg2: tensor<1x2x16x64xf32>) -> (tensor<1x2x16x64xf32>, tensor<1x2x16x16xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    %c0_i64 = arith.constant 0 : i64
    %cst_0 = arith.constant 0xFF800000 : f32
    %0 = tensor.empty() : tensor<1x2x64x16xf32>
    %transposed = linalg.transpose ins(%arg1 : tensor<1x2x16x64xf32>) outs(%0 : tensor<1x2x64x16xf32>) permutation = [0, 1, 3, 2] 
    %collapsed = tensor.collapse_shape %arg0 [[0, 1], [2], [3]] : tensor<1x2x16x64xf32> into tensor<2x16x64xf32>
    %collapsed_1 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x64x16xf32> into tensor<2x64x16xf32>
    %1 = tensor.empty() : tensor<2x16x16xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
    %3 = linalg.batch_matmul ins(%collapsed, %collapsed_1 : tensor<2x16x64xf32>, tensor<2x64x16xf32>) outs(%2 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
    %expanded = tensor.expand_shape %3 [[0, 1], [2], [3]] output_shape [1, 2, 16, 16] : tensor<2x16x16xf32> into tensor<1x2x16x16xf32>
    %4 = tensor.empty() : tensor<1x2x16xi64>
    %5 = linalg.fill ins(%c0_i64 : i64) outs(%4 : tensor<1x2x16xi64>) -> tensor<1x2x16xi64>
    %6 = tensor.empty() : tensor<1x2x16xf32>
    %7 = linalg.fill ins(%cst_0 : f32) outs(%6 : tensor<1x2x16xf32>) -> tensor<1x2x16xf32>
    %8:2 = linalg.generic {indexing_maps = [#escapes_map, #escapes_map1, #escapes_map1], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%expanded : tensor<1x2x16x16xf32>) outs(%7, %5 : tensor<1x2x16xf32>, tensor<1x2x16xi64>) {
    ^bb0(%in: f32, %out: f32, %out_6: i64):
      %19 = linalg.index 3 : index
      %20 = arith.index_cast %19 : index to i64
      %21 = arith.maximumf %in, %out : f32
      %22 = arith.cmpf ogt, %in, %out : f32
      %23 = arith.select %22, %20, %out_6 : i64
      linalg.yield %21, %23 : f32, i64
    } -> (tensor<1x2x16xf32>, tensor<1x2x16xi64>)
    %expanded_2 = tensor.expand_shape %8#0 [[0], [1], [2, 3]] output_shape [1, 2, 16, 1] : tensor<1x2x16xf32> into tensor<1x2x16x1xf32>
    %9 = tensor.empty() : tensor<1x2x16x16xf32>
    %10 = linalg.generic {indexing_maps = [#escapes_map, #escapes_map2, #escapes_map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded, %expanded_2 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%9 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %in_6: f32, %out: f32):
      %19 = arith.subf %in, %in_6 : f32
      linalg.yield %19 : f32
    } -> tensor<1x2x16x16xf32>
    %11 = linalg.generic {indexing_maps = [#escapes_map, #escapes_map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%10 : tensor<1x2x16x16xf32>) outs(%9 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %19 = math.exp %in : f32
      linalg.yield %19 : f32
    } -> tensor<1x2x16x16xf32>
    %12 = tensor.empty() : tensor<1x2x16x1xf32>
    %13 = linalg.fill ins(%cst : f32) outs(%12 : tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
    %14 = linalg.generic {indexing_maps = [#escapes_map, #escapes_map2], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%11 : tensor<1x2x16x16xf32>) outs(%13 : tensor<1x2x16x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %19 = arith.addf %in, %out : f32
      linalg.yield %19 : f32
    } -> tensor<1x2x16x1xf32>
    %15 = linalg.generic {indexing_maps = [#escapes_map, #escapes_map2, #escapes_map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%11, %14 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%9 : tensor<1x2x16x16xf32>) {
    ^bb0(%in: f32, %in_6: f32, %out: f32):
      %19 = arith.divf %in, %in_6 : f32
      linalg.yield %19 : f32
    } -> tensor<1x2x16x16xf32>
    %collapsed_3 = tensor.collapse_shape %15 [[0, 1], [2], [3]] : tensor<1x2x16x16xf32> into tensor<2x16x16xf32>
    %collapsed_4 = tensor.collapse_shape %arg2 [[0, 1], [2], [3]] : tensor<1x2x16x64xf32> into tensor<2x16x64xf32>
    %16 = tensor.empty() : tensor<2x16x64xf32>
    %17 = linalg.fill ins(%cst : f32) outs(%16 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %18 = linalg.batch_matmul ins(%collapsed_3, %collapsed_4 : tensor<2x16x16xf32>, tensor<2x16x64xf32>) outs(%17 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %expanded_5 = tensor.expand_shape %18 [[0, 1], [2], [3]] output_shape [1, 2, 16, 64] : tensor<2x16x64xf32> into tensor<1x2x16x64xf32>
    return %expanded_5, %15 : tensor<1x2x16x64xf32>, tensor<1x2x16x16xf32>
  }
}

// -----

// CHECK-LABEL: func.func @masked_sdpa
// SDPA with a bool attn_mask as torch decomposes it: a `where` from the mask before the
// softmax, and where(rowmax == -inf, 0, P) after it (a fully masked row gives zeros): both
// inside, recorded as masked_rows = "zero".
// CHECK: fusion.group attention
// CHECK-SAME: mask = "computed", masked_rows = "zero"
// CHECK: arith.cmpf oeq
// CHECK: fusion.yield
// CHECK-NOT: linalg.batch_matmul

#masked_sdpa_map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#masked_sdpa_map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#masked_sdpa_map2 = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#masked_sdpa_map3 = affine_map<(d0, d1, d2, d3) -> ()>
#masked_sdpa_map4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#masked_sdpa_map5 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @masked_sdpa(%arg0: tensor<1x2x16x64xbf16>, %arg1: tensor<1x2x16x64xbf16>, %arg2: tensor<1x2x16x64xbf16>, %arg3: tensor<1x1x16x16xi1>) -> tensor<1x2x16x64xbf16> {
    %cst = arith.constant 0.000000e+00 : f32
    %c0_i64 = arith.constant 0 : i64
    %cst_0 = arith.constant 0xFF80 : bf16
    %cst_1 = arith.constant 0.000000e+00 : bf16
    %cst_2 = arith.constant dense<0.000000e+00> : tensor<bf16>
    %cst_3 = arith.constant dense<0xFF80> : tensor<bf16>
    %cst_4 = arith.constant 0xFFF0000000000000 : f64
    %cst_5 = arith.constant 1.250000e-01 : bf16
    %0 = tensor.empty() : tensor<1x2x64x16xbf16>
    %transposed = linalg.transpose ins(%arg1 : tensor<1x2x16x64xbf16>) outs(%0 : tensor<1x2x64x16xbf16>) permutation = [0, 1, 3, 2] 
    %collapsed = tensor.collapse_shape %arg0 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
    %collapsed_6 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x64x16xbf16> into tensor<2x64x16xbf16>
    %1 = tensor.empty() : tensor<2x16x16xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
    %3 = linalg.batch_matmul ins(%collapsed, %collapsed_6 : tensor<2x16x64xbf16>, tensor<2x64x16xbf16>) outs(%2 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
    %4 = tensor.empty() : tensor<2x16x16xbf16>
    %5 = linalg.generic {indexing_maps = [#masked_sdpa_map, #masked_sdpa_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%3 : tensor<2x16x16xf32>) outs(%4 : tensor<2x16x16xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %28 = arith.truncf %in : f32 to bf16
      linalg.yield %28 : bf16
    } -> tensor<2x16x16xbf16>
    %expanded = tensor.expand_shape %5 [[0, 1], [2], [3]] output_shape [1, 2, 16, 16] : tensor<2x16x16xbf16> into tensor<1x2x16x16xbf16>
    %6 = tensor.empty() : tensor<1x2x16x16xbf16>
    %7 = linalg.generic {indexing_maps = [#masked_sdpa_map1, #masked_sdpa_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x16x16xbf16>) outs(%6 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      %28 = arith.mulf %in, %cst_5 : bf16
      linalg.yield %28 : bf16
    } -> tensor<1x2x16x16xbf16>
    %8 = linalg.generic {indexing_maps = [#masked_sdpa_map2, #masked_sdpa_map1, #masked_sdpa_map3, #masked_sdpa_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg3, %7, %cst_3 : tensor<1x1x16x16xi1>, tensor<1x2x16x16xbf16>, tensor<bf16>) outs(%6 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: i1, %in_11: bf16, %in_12: bf16, %out: bf16):
      %28 = arith.select %in, %in_11, %in_12 : bf16
      linalg.yield %28 : bf16
    } -> tensor<1x2x16x16xbf16>
    %9 = tensor.empty() : tensor<1x2x16xi64>
    %10 = linalg.fill ins(%c0_i64 : i64) outs(%9 : tensor<1x2x16xi64>) -> tensor<1x2x16xi64>
    %11 = tensor.empty() : tensor<1x2x16xbf16>
    %12 = linalg.fill ins(%cst_0 : bf16) outs(%11 : tensor<1x2x16xbf16>) -> tensor<1x2x16xbf16>
    %13:2 = linalg.generic {indexing_maps = [#masked_sdpa_map1, #masked_sdpa_map4, #masked_sdpa_map4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%8 : tensor<1x2x16x16xbf16>) outs(%12, %10 : tensor<1x2x16xbf16>, tensor<1x2x16xi64>) {
    ^bb0(%in: bf16, %out: bf16, %out_11: i64):
      %28 = linalg.index 3 : index
      %29 = arith.index_cast %28 : index to i64
      %30 = arith.maximumf %in, %out : bf16
      %31 = arith.cmpf ogt, %in, %out : bf16
      %32 = arith.select %31, %29, %out_11 : i64
      linalg.yield %30, %32 : bf16, i64
    } -> (tensor<1x2x16xbf16>, tensor<1x2x16xi64>)
    %expanded_7 = tensor.expand_shape %13#0 [[0], [1], [2, 3]] output_shape [1, 2, 16, 1] : tensor<1x2x16xbf16> into tensor<1x2x16x1xbf16>
    %14 = linalg.generic {indexing_maps = [#masked_sdpa_map1, #masked_sdpa_map5, #masked_sdpa_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%8, %expanded_7 : tensor<1x2x16x16xbf16>, tensor<1x2x16x1xbf16>) outs(%6 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: bf16, %in_11: bf16, %out: bf16):
      %28 = arith.subf %in, %in_11 : bf16
      linalg.yield %28 : bf16
    } -> tensor<1x2x16x16xbf16>
    %15 = linalg.generic {indexing_maps = [#masked_sdpa_map1, #masked_sdpa_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%14 : tensor<1x2x16x16xbf16>) outs(%6 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      %28 = math.exp %in : bf16
      linalg.yield %28 : bf16
    } -> tensor<1x2x16x16xbf16>
    %16 = tensor.empty() : tensor<1x2x16x1xbf16>
    %17 = linalg.fill ins(%cst_1 : bf16) outs(%16 : tensor<1x2x16x1xbf16>) -> tensor<1x2x16x1xbf16>
    %18 = linalg.generic {indexing_maps = [#masked_sdpa_map1, #masked_sdpa_map5], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%15 : tensor<1x2x16x16xbf16>) outs(%17 : tensor<1x2x16x1xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      %28 = arith.addf %in, %out : bf16
      linalg.yield %28 : bf16
    } -> tensor<1x2x16x1xbf16>
    %19 = linalg.generic {indexing_maps = [#masked_sdpa_map1, #masked_sdpa_map5, #masked_sdpa_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%15, %18 : tensor<1x2x16x16xbf16>, tensor<1x2x16x1xbf16>) outs(%6 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: bf16, %in_11: bf16, %out: bf16):
      %28 = arith.divf %in, %in_11 : bf16
      linalg.yield %28 : bf16
    } -> tensor<1x2x16x16xbf16>
    %20 = tensor.empty() : tensor<1x2x16x1xi1>
    %21 = linalg.generic {indexing_maps = [#masked_sdpa_map1, #masked_sdpa_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded_7 : tensor<1x2x16x1xbf16>) outs(%20 : tensor<1x2x16x1xi1>) {
    ^bb0(%in: bf16, %out: i1):
      %28 = arith.extf %in : bf16 to f64
      %29 = arith.cmpf oeq, %28, %cst_4 : f64
      linalg.yield %29 : i1
    } -> tensor<1x2x16x1xi1>
    %22 = linalg.generic {indexing_maps = [#masked_sdpa_map5, #masked_sdpa_map3, #masked_sdpa_map1, #masked_sdpa_map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%21, %cst_2, %19 : tensor<1x2x16x1xi1>, tensor<bf16>, tensor<1x2x16x16xbf16>) outs(%6 : tensor<1x2x16x16xbf16>) {
    ^bb0(%in: i1, %in_11: bf16, %in_12: bf16, %out: bf16):
      %28 = arith.select %in, %in_11, %in_12 : bf16
      linalg.yield %28 : bf16
    } -> tensor<1x2x16x16xbf16>
    %collapsed_8 = tensor.collapse_shape %22 [[0, 1], [2], [3]] : tensor<1x2x16x16xbf16> into tensor<2x16x16xbf16>
    %collapsed_9 = tensor.collapse_shape %arg2 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
    %23 = tensor.empty() : tensor<2x16x64xf32>
    %24 = linalg.fill ins(%cst : f32) outs(%23 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %25 = linalg.batch_matmul ins(%collapsed_8, %collapsed_9 : tensor<2x16x16xbf16>, tensor<2x16x64xbf16>) outs(%24 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %26 = tensor.empty() : tensor<2x16x64xbf16>
    %27 = linalg.generic {indexing_maps = [#masked_sdpa_map, #masked_sdpa_map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%25 : tensor<2x16x64xf32>) outs(%26 : tensor<2x16x64xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %28 = arith.truncf %in : f32 to bf16
      linalg.yield %28 : bf16
    } -> tensor<2x16x64xbf16>
    %expanded_10 = tensor.expand_shape %27 [[0, 1], [2], [3]] output_shape [1, 2, 16, 64] : tensor<2x16x64xbf16> into tensor<1x2x16x64xbf16>
    return %expanded_10 : tensor<1x2x16x64xbf16>
  }
}

// -----

// Negative: a matmul whose left operand is divided by a 0-d value (DeBERTa v1 scales Q by
// `1 / sqrt(tensor(d) * factor)` computed in the graph) is not P V: the division is no
// softmax's e / sum(e), the 0-d divisor no reduction. Left alone (it crashed the pass).
// CHECK-LABEL: func.func @divide_by_0d
// CHECK-NOT: fusion.group
// CHECK: linalg.matmul
#div0d_id = affine_map<(d0, d1) -> (d0, d1)>
#div0d_scalar = affine_map<(d0, d1) -> ()>
#div0d_none = affine_map<() -> ()>
func.func @divide_by_0d(%a: tensor<5x6xf32>, %v: tensor<6x3xf32>) -> tensor<5x3xf32> {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<f32>
  %s = linalg.generic {indexing_maps = [#div0d_none], iterator_types = []} outs(%e0 : tensor<f32>) {
  ^bb0(%out: f32):
    %c = arith.constant 18.0 : f32
    %r = math.sqrt %c : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  %e = tensor.empty() : tensor<5x6xf32>
  %d = linalg.generic {indexing_maps = [#div0d_id, #div0d_scalar, #div0d_id], iterator_types = ["parallel", "parallel"]}
      ins(%a, %s : tensor<5x6xf32>, tensor<f32>) outs(%e : tensor<5x6xf32>) {
  ^bb0(%x: f32, %y: f32, %out: f32):
    %q = arith.divf %x, %y : f32
    linalg.yield %q : f32
  } -> tensor<5x6xf32>
  %eo = tensor.empty() : tensor<5x3xf32>
  %f = linalg.fill ins(%zero : f32) outs(%eo : tensor<5x3xf32>) -> tensor<5x3xf32>
  %mm = linalg.matmul ins(%d, %v : tensor<5x6xf32>, tensor<6x3xf32>) outs(%f : tensor<5x3xf32>) -> tensor<5x3xf32>
  return %mm : tensor<5x3xf32>
}
