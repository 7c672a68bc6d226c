// RUN: fusec-opt %s --fusion-conv1d-as-conv2d --split-input-file | filecheck %s

// A strided, dilated 1-D convolution (NCW, FCW) becomes a 2-D one of unit height: the
// operands are viewed with a height of 1, the stride and dilation get a leading 1, and the
// result is collapsed back to the 1-D op's type.
// CHECK-LABEL: func.func @conv1d
// CHECK-NOT: linalg.conv_1d
// CHECK: %[[X:.+]] = tensor.expand_shape %arg0 {{\[}}[0], [1], [2, 3]] output_shape [1, 80, 1, 3002] : tensor<1x80x3002xf32> into tensor<1x80x1x3002xf32>
// CHECK: %[[W:.+]] = tensor.expand_shape %arg1 {{\[}}[0], [1], [2, 3]] {{.*}} into tensor<64x80x1x3xf32>
// CHECK: %[[I:.+]] = tensor.expand_shape %arg2 {{\[}}[0], [1], [2, 3]] {{.*}} into tensor<1x64x1x750xf32>
// CHECK: %[[C:.+]] = linalg.conv_2d_nchw_fchw {dilations = dense<[1, 2]> : vector<2xi64>, strides = dense<[1, 4]> : vector<2xi64>} ins(%[[X]], %[[W]] : {{.*}}) outs(%[[I]] : tensor<1x64x1x750xf32>)
// CHECK: %[[R:.+]] = tensor.collapse_shape %[[C]] {{\[}}[0], [1], [2, 3]] : tensor<1x64x1x750xf32> into tensor<1x64x750xf32>
// CHECK: return %[[R]]
func.func @conv1d(%x: tensor<1x80x3002xf32>, %w: tensor<64x80x3xf32>, %init: tensor<1x64x750xf32>) -> tensor<1x64x750xf32> {
  %r = linalg.conv_1d_ncw_fcw {dilations = dense<2> : vector<1xi64>, strides = dense<4> : vector<1xi64>}
      ins(%x, %w : tensor<1x80x3002xf32>, tensor<64x80x3xf32>) outs(%init : tensor<1x64x750xf32>) -> tensor<1x64x750xf32>
  return %r : tensor<1x64x750xf32>
}

// -----

// Negative: channels-last 1-D convolutions (NWC) and 2-D ones are left as they are.
// CHECK-LABEL: func.func @others_untouched
// CHECK: linalg.conv_1d_nwc_wcf
// CHECK: linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
// CHECK-NOT: tensor.expand_shape
func.func @others_untouched(%x: tensor<1x10x8xf32>, %w: tensor<3x8x4xf32>, %i: tensor<1x8x4xf32>,
                            %a: tensor<1x8x6x6xf32>, %b: tensor<4x8x3x3xf32>, %c: tensor<1x4x4x4xf32>) -> (tensor<1x8x4xf32>, tensor<1x4x4x4xf32>) {
  %r = linalg.conv_1d_nwc_wcf {dilations = dense<1> : vector<1xi64>, strides = dense<1> : vector<1xi64>}
      ins(%x, %w : tensor<1x10x8xf32>, tensor<3x8x4xf32>) outs(%i : tensor<1x8x4xf32>) -> tensor<1x8x4xf32>
  %s = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%a, %b : tensor<1x8x6x6xf32>, tensor<4x8x3x3xf32>) outs(%c : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  return %r, %s : tensor<1x8x4xf32>, tensor<1x4x4x4xf32>
}
