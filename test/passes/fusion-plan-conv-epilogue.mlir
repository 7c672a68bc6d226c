// RUN: fusec-opt %s '--fusion-plan{device=nvidia-h200}' | filecheck %s
// RUN: fusec-opt %s '--fusion-plan{device=cpu}' | filecheck %s --check-prefix CPU

// Where convolutions are GEMM kernels (the CUDA target: `cost_model.conv_is_gemm`), the
// elementwise ops after a convolution (here x * 2 + 1 and a ReLU, as a BatchNorm folds to)
// are that convolution's epilogue, stored once in its type, and not the next convolution's
// prologue (where its product would first go to memory in f32): the second group starts at
// the second convolution, and says why it took nothing before it. What must stay: the
// input's own scaling (x * 0.5 - 1, computed from no contraction) and the pad, which the
// first convolution's im2col gather reads through.
// CHECK-LABEL: func.func @conv_bn_relu_conv
// CHECK: fusion.group epilogue
// CHECK: arith.mulf
// CHECK: arith.subf
// CHECK: tensor.pad
// CHECK: linalg.conv_2d_nchw_fchw
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: arith.select
// CHECK: fusion.yield
// CHECK: fusion.group epilogue
// CHECK-SAME: epilogue-first: it is computed from linalg.conv_2d_nchw_fchw
// CHECK-NOT: arith.mulf
// CHECK: linalg.conv_2d_nchw_fchw
// CHECK: arith.select
// CHECK: fusion.yield
//
// The CPU's matmul microkernel recomputes a prologue per column tile: its planner keeps the
// same split for its own reason.
// CPU: fusion.group epilogue
// CPU: linalg.conv_2d_nchw_fchw
// CPU: arith.select
// CPU: fusion.group epilogue
// CPU-NOT: arith.mulf
// CPU: linalg.conv_2d_nchw_fchw

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @conv_bn_relu_conv(%arg0: tensor<1x3x8x8xf32>, %cst_1: tensor<8x3x3x3xf32>, %cst_0: tensor<8x8x1x1xf32>) -> tensor<1x8x8x8xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_2 = arith.constant 5.000000e-01 : f32
    %cst_3 = arith.constant 1.000000e+00 : f32
    %cst_4 = arith.constant 2.000000e+00 : f32
    %0 = tensor.empty() : tensor<1x3x8x8xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg0 : tensor<1x3x8x8xf32>) outs(%0 : tensor<1x3x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %11 = arith.mulf %in, %cst_2 : f32
      linalg.yield %11 : f32
    } -> tensor<1x3x8x8xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1 : tensor<1x3x8x8xf32>) outs(%0 : tensor<1x3x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %11 = arith.subf %in, %cst_3 : f32
      linalg.yield %11 : f32
    } -> tensor<1x3x8x8xf32>
    %padded = tensor.pad %2 low[0, 0, 1, 1] high[0, 0, 1, 1] {
    ^bb0(%arg1: index, %arg2: index, %arg3: index, %arg4: index):
      tensor.yield %cst : f32
    } : tensor<1x3x8x8xf32> to tensor<1x3x10x10xf32>
    %3 = tensor.empty() : tensor<1x8x8x8xf32>
    %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %5 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%padded, %cst_1 : tensor<1x3x10x10xf32>, tensor<8x3x3x3xf32>) outs(%4 : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%5 : tensor<1x8x8x8xf32>) outs(%3 : tensor<1x8x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %11 = arith.mulf %in, %cst_4 : f32
      linalg.yield %11 : f32
    } -> tensor<1x8x8x8xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%6 : tensor<1x8x8x8xf32>) outs(%3 : tensor<1x8x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %11 = arith.addf %in, %cst_3 : f32
      linalg.yield %11 : f32
    } -> tensor<1x8x8x8xf32>
    %8 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%7 : tensor<1x8x8x8xf32>) outs(%3 : tensor<1x8x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %11 = arith.cmpf ugt, %in, %cst : f32
      %12 = arith.select %11, %in, %cst : f32
      linalg.yield %12 : f32
    } -> tensor<1x8x8x8xf32>
    %9 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%8, %cst_0 : tensor<1x8x8x8xf32>, tensor<8x8x1x1xf32>) outs(%4 : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%9 : tensor<1x8x8x8xf32>) outs(%3 : tensor<1x8x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %11 = arith.cmpf ugt, %in, %cst : f32
      %12 = arith.select %11, %in, %cst : f32
      linalg.yield %12 : f32
    } -> tensor<1x8x8x8xf32>
    return %10 : tensor<1x8x8x8xf32>
  }
}
