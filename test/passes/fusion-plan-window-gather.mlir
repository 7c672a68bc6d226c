// RUN: fusec-opt %s '--fusion-plan{device=nvidia-h200}' | filecheck %s
// RUN: fusec-opt %s '--fusion-plan{device=cpu}' | filecheck %s --check-prefix CPU

// Where convolutions are im2col gathers and GEMMs (the CUDA target: `cost_model.conv_is_gemm`),
// a pooling window before a 3x3 convolution stays a kernel of its own: in the gather it would
// run again for each of the 9 reads of every value (`cost_model.window_joins_conv_gather`),
// and the convolution's group says so. Before a 1x1 convolution (one read a value) the pool
// joins the convolution's group; on the CPU, whose convolutions are loop nests, it joins both.
// CHECK-LABEL: func.func @pool_conv3x3
// CHECK: fusion.group vertical
// CHECK: linalg.pooling_nchw_max
// CHECK: fusion.yield
// CHECK: fusion.group vertical
// CHECK-SAME: recompute: linalg.conv_2d_nchw_fchw@{{[0-9]+}}:{{[0-9]+}} becomes an im2col gather on nvidia-h200 that reads each value 9 times: this 9-point window op would run 9 times per value
// CHECK-NOT: linalg.pooling_nchw_max {
// CHECK: linalg.conv_2d_nchw_fchw
// CHECK: fusion.yield
// CHECK-LABEL: func.func @pool_conv1x1
// CHECK: fusion.group vertical
// CHECK-NOT: fusion.yield
// CHECK: linalg.pooling_nchw_max
// CHECK-NOT: fusion.yield
// CHECK: linalg.conv_2d_nchw_fchw
// CHECK: fusion.yield
// CHECK-NOT: fusion.group

// CPU-LABEL: func.func @pool_conv3x3
// CPU: fusion.group vertical
// CPU-NOT: fusion.yield
// CPU: linalg.pooling_nchw_max
// CPU-NOT: fusion.yield
// CPU: linalg.conv_2d_nchw_fchw
// CPU: fusion.yield
// CPU-LABEL: func.func @pool_conv1x1
// CPU: fusion.group vertical
// CPU-NOT: fusion.yield
// CPU: linalg.pooling_nchw_max
// CPU-NOT: fusion.yield
// CPU: linalg.conv_2d_nchw_fchw

module {
  func.func @pool_conv3x3(%arg0: tensor<1x8x8x8xf32>, %w: tensor<8x8x3x3xf32>) -> tensor<1x8x8x8xf32> {
    %ninf = arith.constant 0xFF800000 : f32
    %zero = arith.constant 0.000000e+00 : f32
    %p = tensor.pad %arg0 low[0, 0, 1, 1] high[0, 0, 1, 1] {
    ^bb0(%a: index, %b: index, %c: index, %d: index):
      tensor.yield %ninf : f32
    } : tensor<1x8x8x8xf32> to tensor<1x8x10x10xf32>
    %win = tensor.empty() : tensor<3x3xf32>
    %e = tensor.empty() : tensor<1x8x8x8xf32>
    %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %pool = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%p, %win : tensor<1x8x10x10xf32>, tensor<3x3xf32>) outs(%f : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %p2 = tensor.pad %pool low[0, 0, 1, 1] high[0, 0, 1, 1] {
    ^bb0(%a: index, %b: index, %c: index, %d: index):
      tensor.yield %zero : f32
    } : tensor<1x8x8x8xf32> to tensor<1x8x10x10xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%p2, %w : tensor<1x8x10x10xf32>, tensor<8x8x3x3xf32>) outs(%z : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    return %c : tensor<1x8x8x8xf32>
  }
  func.func @pool_conv1x1(%arg0: tensor<1x8x8x8xf32>, %w: tensor<8x8x1x1xf32>) -> tensor<1x8x8x8xf32> {
    %ninf = arith.constant 0xFF800000 : f32
    %zero = arith.constant 0.000000e+00 : f32
    %p = tensor.pad %arg0 low[0, 0, 1, 1] high[0, 0, 1, 1] {
    ^bb0(%a: index, %b: index, %c: index, %d: index):
      tensor.yield %ninf : f32
    } : tensor<1x8x8x8xf32> to tensor<1x8x10x10xf32>
    %win = tensor.empty() : tensor<3x3xf32>
    %e = tensor.empty() : tensor<1x8x8x8xf32>
    %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %pool = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%p, %win : tensor<1x8x10x10xf32>, tensor<3x3xf32>) outs(%f : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%pool, %w : tensor<1x8x8x8xf32>, tensor<8x8x1x1xf32>) outs(%z : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    return %c : tensor<1x8x8x8xf32>
  }
}
