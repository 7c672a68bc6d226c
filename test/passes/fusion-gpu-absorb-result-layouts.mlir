// RUN: fusec-opt %s --fusion-gpu-absorb-result-layouts | filecheck %s

// The head merge after a batched matmul (transpose + reshape to [1, 16, 32]) is where
// cuBLASLt writes its result: the layout group merges into the gemm group, no kernel. A
// consumer that computes (exp of a transpose) is not a layout: it stays a kernel.
// CHECK-LABEL: func.func @main
// CHECK: %[[G:.+]] = fusion.group single ({{.*}}) -> tensor<1x16x32xf32>
// CHECK-SAME: fusion.path = "gemm"
// CHECK: linalg.batch_matmul
// CHECK: %[[M:.+]] = fusion.group single ({{.*}}) -> tensor<8x8xf32>
// CHECK-SAME: fusion.path = "gemm"
// CHECK: %[[E:.+]] = fusion.group vertical (%{{.+}} = %[[M]] : tensor<8x8xf32>)
// CHECK: math.exp
// CHECK: return %[[G]], %[[E]]
#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%arg0: tensor<1x4x16x16xf32>, %arg1: tensor<1x16x32xf32>, %arg2: tensor<8x16xf32>, %arg3: tensor<16x8xf32>) -> (tensor<1x16x32xf32>, tensor<8x8xf32>) attributes {fusion.gemm_notes = ["matmul-rooted group: cuBLASLt", "matmul-rooted group: cuBLASLt"]} {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4x16x8xf32>
    %1 = tensor.empty() : tensor<1x16x4x8xf32>
    %2 = tensor.empty() : tensor<1x4x16x8xf32>
    %cst_0 = arith.constant 0.000000e+00 : f32
    %3 = tensor.empty() : tensor<4x16x8xf32>
    %4 = fusion.group single (%arg4 = %arg1 : tensor<1x16x32xf32>, %arg5 = %arg0 : tensor<1x4x16x16xf32>) -> tensor<1x4x16x8xf32> attributes {fusion.gemm_epilogue = "none", fusion.path = "gemm", fusion.split_of = "epilogue", fusion.why = "matmul-rooted group: cuBLASLt"} {
      %9 = tensor.empty() : tensor<1x4x16x8xf32>
      %cst_2 = arith.constant 0.000000e+00 : f32
      %10 = tensor.empty() : tensor<4x16x8xf32>
      %expanded = tensor.expand_shape %arg4 [[0], [1], [2, 3]] output_shape [1, 16, 4, 8] : tensor<1x16x32xf32> into tensor<1x16x4x8xf32>
      %transposed = linalg.transpose ins(%expanded : tensor<1x16x4x8xf32>) outs(%9 : tensor<1x4x16x8xf32>) permutation = [0, 2, 1, 3] 
      %collapsed = tensor.collapse_shape %arg5 [[0, 1], [2], [3]] : tensor<1x4x16x16xf32> into tensor<4x16x16xf32>
      %collapsed_3 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x4x16x8xf32> into tensor<4x16x8xf32>
      %11 = linalg.fill ins(%cst_2 : f32) outs(%10 : tensor<4x16x8xf32>) -> tensor<4x16x8xf32>
      %12 = linalg.batch_matmul ins(%collapsed, %collapsed_3 : tensor<4x16x16xf32>, tensor<4x16x8xf32>) outs(%11 : tensor<4x16x8xf32>) -> tensor<4x16x8xf32>
      %expanded_4 = tensor.expand_shape %12 [[0, 1], [2], [3]] output_shape [1, 4, 16, 8] : tensor<4x16x8xf32> into tensor<1x4x16x8xf32>
      fusion.yield %expanded_4 : tensor<1x4x16x8xf32>
    }
    %5 = fusion.group vertical (%arg4 = %4 : tensor<1x4x16x8xf32>) -> tensor<1x16x32xf32> attributes {fusion.split = "epilogue"} {
      %9 = tensor.empty() : tensor<1x16x4x8xf32>
      %transposed = linalg.transpose ins(%arg4 : tensor<1x4x16x8xf32>) outs(%9 : tensor<1x16x4x8xf32>) permutation = [0, 2, 1, 3] 
      %collapsed = tensor.collapse_shape %transposed [[0], [1], [2, 3]] : tensor<1x16x4x8xf32> into tensor<1x16x32xf32>
      fusion.yield %collapsed : tensor<1x16x32xf32>
    }
    %cst_1 = arith.constant 0.000000e+00 : f32
    %6 = tensor.empty() : tensor<8x8xf32>
    %7 = fusion.group single (%arg4 = %arg2 : tensor<8x16xf32>, %arg5 = %arg3 : tensor<16x8xf32>) -> tensor<8x8xf32> attributes {fusion.gemm_epilogue = "none", fusion.path = "gemm", fusion.split_of = "epilogue", fusion.why = "matmul-rooted group: cuBLASLt"} {
      %cst_2 = arith.constant 0.000000e+00 : f32
      %9 = tensor.empty() : tensor<8x8xf32>
      %10 = linalg.fill ins(%cst_2 : f32) outs(%9 : tensor<8x8xf32>) -> tensor<8x8xf32>
      %11 = linalg.matmul ins(%arg4, %arg5 : tensor<8x16xf32>, tensor<16x8xf32>) outs(%10 : tensor<8x8xf32>) -> tensor<8x8xf32>
      fusion.yield %11 : tensor<8x8xf32>
    }
    %8 = fusion.group vertical (%arg4 = %7 : tensor<8x8xf32>) -> tensor<8x8xf32> attributes {fusion.split = "epilogue"} {
      %9 = tensor.empty() : tensor<8x8xf32>
      %transposed = linalg.transpose ins(%arg4 : tensor<8x8xf32>) outs(%9 : tensor<8x8xf32>) permutation = [1, 0] 
      %10 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%transposed : tensor<8x8xf32>) outs(%9 : tensor<8x8xf32>) {
      ^bb0(%in: f32, %out: f32):
        %11 = math.exp %in : f32
        linalg.yield %11 : f32
      } -> tensor<8x8xf32>
      fusion.yield %10 : tensor<8x8xf32>
    }
    return %5, %8 : tensor<1x16x32xf32>, tensor<8x8xf32>
  }
}
