// RUN: fusec-opt %s --fusion-gpu-absorb-operand-layouts | filecheck %s

// Attention's head split (view + transpose) before a batched matmul is one strided
// cuBLASLt layout of the inputs: the gemm group now reads the function's arguments (the
// layout groups stay until --fusion-gpu-erase-dead-groups). An operand computed by a kernel
// (exp(x) before x @ w) is not a layout: the gemm keeps reading that kernel's result.
// CHECK-LABEL: func.func @main
// CHECK: fusion.group single (%{{.+}} = %arg1 : tensor<1x16x32xf32>, %{{.+}} = %arg0 : tensor<1x16x32xf32>) -> tensor<1x4x16x16xf32>
// CHECK-SAME: fusion.path = "gemm"
// CHECK: linalg.batch_matmul
// CHECK: %[[EXP:.+]] = fusion.group single (%{{.+}} = %arg2 : tensor<8x16xf32>)
// CHECK: math.exp
// CHECK: fusion.group single (%{{.+}} = %[[EXP]] : tensor<8x16xf32>, %{{.+}} = %arg3 : tensor<16x8xf32>)
// CHECK-SAME: fusion.path = "gemm"
// CHECK: return
#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%arg0: tensor<1x16x32xf32>, %arg1: tensor<1x16x32xf32>, %arg2: tensor<8x16xf32>, %arg3: tensor<16x8xf32>) -> (tensor<1x4x16x16xf32>, tensor<8x8xf32>) attributes {fusion.gemm_notes = ["matmul-rooted group: cuBLASLt", "matmul-rooted group: cuBLASLt"]} {
    %0 = fusion.group single (%arg4 = %arg0 : tensor<1x16x32xf32>) -> tensor<1x4x16x8xf32> {
      %7 = tensor.empty() : tensor<1x4x16x8xf32>
      %expanded = tensor.expand_shape %arg4 [[0], [1], [2, 3]] output_shape [1, 16, 4, 8] : tensor<1x16x32xf32> into tensor<1x16x4x8xf32>
      %transposed = linalg.transpose ins(%expanded : tensor<1x16x4x8xf32>) outs(%7 : tensor<1x4x16x8xf32>) permutation = [0, 2, 1, 3] 
      fusion.yield %transposed : tensor<1x4x16x8xf32>
    }
    %1 = fusion.group single (%arg4 = %arg1 : tensor<1x16x32xf32>) -> tensor<1x4x8x16xf32> {
      %7 = tensor.empty() : tensor<1x4x8x16xf32>
      %expanded = tensor.expand_shape %arg4 [[0], [1], [2, 3]] output_shape [1, 16, 4, 8] : tensor<1x16x32xf32> into tensor<1x16x4x8xf32>
      %transposed = linalg.transpose ins(%expanded : tensor<1x16x4x8xf32>) outs(%7 : tensor<1x4x8x16xf32>) permutation = [0, 2, 3, 1] 
      fusion.yield %transposed : tensor<1x4x8x16xf32>
    }
    %cst = arith.constant 0.000000e+00 : f32
    %2 = tensor.empty() : tensor<4x16x16xf32>
    %3 = fusion.group single (%arg4 = %0 : tensor<1x4x16x8xf32>, %arg5 = %1 : tensor<1x4x8x16xf32>) -> tensor<1x4x16x16xf32> attributes {fusion.gemm_epilogue = "none", fusion.path = "gemm", fusion.split_of = "single", fusion.why = "matmul-rooted group: cuBLASLt"} {
      %cst_1 = arith.constant 0.000000e+00 : f32
      %7 = tensor.empty() : tensor<4x16x16xf32>
      %collapsed = tensor.collapse_shape %arg4 [[0, 1], [2], [3]] : tensor<1x4x16x8xf32> into tensor<4x16x8xf32>
      %collapsed_2 = tensor.collapse_shape %arg5 [[0, 1], [2], [3]] : tensor<1x4x8x16xf32> into tensor<4x8x16xf32>
      %8 = linalg.fill ins(%cst_1 : f32) outs(%7 : tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
      %9 = linalg.batch_matmul ins(%collapsed, %collapsed_2 : tensor<4x16x8xf32>, tensor<4x8x16xf32>) outs(%8 : tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
      %expanded = tensor.expand_shape %9 [[0, 1], [2], [3]] output_shape [1, 4, 16, 16] : tensor<4x16x16xf32> into tensor<1x4x16x16xf32>
      fusion.yield %expanded : tensor<1x4x16x16xf32>
    }
    %4 = fusion.group single (%arg4 = %arg2 : tensor<8x16xf32>) -> tensor<8x16xf32> {
      %7 = tensor.empty() : tensor<8x16xf32>
      %8 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg4 : tensor<8x16xf32>) outs(%7 : tensor<8x16xf32>) {
      ^bb0(%in: f32, %out: f32):
        %9 = math.exp %in : f32
        linalg.yield %9 : f32
      } -> tensor<8x16xf32>
      fusion.yield %8 : tensor<8x16xf32>
    }
    %cst_0 = arith.constant 0.000000e+00 : f32
    %5 = tensor.empty() : tensor<8x8xf32>
    %6 = fusion.group single (%arg4 = %4 : tensor<8x16xf32>, %arg5 = %arg3 : tensor<16x8xf32>) -> tensor<8x8xf32> attributes {fusion.gemm_epilogue = "none", fusion.path = "gemm", fusion.split_of = "single", fusion.why = "matmul-rooted group: cuBLASLt"} {
      %cst_1 = arith.constant 0.000000e+00 : f32
      %7 = tensor.empty() : tensor<8x8xf32>
      %8 = linalg.fill ins(%cst_1 : f32) outs(%7 : tensor<8x8xf32>) -> tensor<8x8xf32>
      %9 = linalg.matmul ins(%arg4, %arg5 : tensor<8x16xf32>, tensor<16x8xf32>) outs(%8 : tensor<8x8xf32>) -> tensor<8x8xf32>
      fusion.yield %9 : tensor<8x8xf32>
    }
    return %3, %6 : tensor<1x4x16x16xf32>, tensor<8x8xf32>
  }
}
