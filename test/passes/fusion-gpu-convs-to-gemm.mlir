// RUN: fusec-opt %s --fusion-gpu-convs-to-gemm | filecheck %s

// A 2-D convolution (NCHW, FCHW filter, stride 2, dilation 1; its bias as the init) inside
// a group becomes im2col + one matmul: the gather col[n, oh, ow, c, kh, kw] = x[n, c,
// oh * 2 + kh, ow * 2 + kw], collapsed to [N*OH*OW, C*KH*KW], times the filter as a
// [C*KH*KW, F] matrix, expanded and transposed back to NCHW, plus the init. The group says
// what was rewritten (`fusion.conv_as_gemm`).
// CHECK-LABEL: func.func @conv
// CHECK: fusion.group epilogue
// CHECK-SAME: fusion.conv_as_gemm = "linalg.conv_2d_nchw_fchw 2x4x9x9 * 8x4x3x3 as im2col [32, 36] @ [36, 8] (stride [2, 2], dilation [1, 1])"
// CHECK-NOT: linalg.conv_2d_nchw_fchw
// CHECK: linalg.generic {indexing_maps = [#[[WIN:.+]], #{{.+}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]}
// CHECK: tensor.collapse_shape {{.*}} {{\[}}[0, 1, 2], [3, 4, 5]] : tensor<2x4x4x4x3x3xf32> into tensor<32x36xf32>
// CHECK: tensor.collapse_shape {{.*}} : tensor<8x4x3x3xf32> into tensor<8x36xf32>
// CHECK: linalg.transpose {{.*}} permutation = [1, 0]
// CHECK: linalg.matmul ins({{.*}} : tensor<32x36xf32>, tensor<36x8xf32>)
// CHECK: tensor.expand_shape {{.*}} into tensor<2x4x4x8xf32>
// CHECK: linalg.transpose {{.*}} permutation = [0, 3, 1, 2]
// CHECK: arith.addf
// CHECK: math.tanh
//
// A grouped convolution is a different op: left alone (the data-movement kernels unroll
// small windows of it; larger ones stay the fallback's).
// CHECK-LABEL: func.func @grouped
// CHECK: linalg.conv_2d_ngchw_gfchw
// CHECK-NOT: linalg.matmul
func.func @conv(%x: tensor<2x4x9x9xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32> {
  %g = fusion.group epilogue (%a = %x : tensor<2x4x9x9xf32>, %f = %w : tensor<8x4x3x3xf32>, %i = %b : tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32> {
    %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%a, %f : tensor<2x4x9x9xf32>, tensor<8x4x3x3xf32>) outs(%i : tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32>
    %e = tensor.empty() : tensor<2x8x4x4xf32>
    %t = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c : tensor<2x8x4x4xf32>) outs(%e : tensor<2x8x4x4xf32>) {
    ^bb0(%in: f32, %o: f32):
      %h = math.tanh %in : f32
      linalg.yield %h : f32
    } -> tensor<2x8x4x4xf32>
    fusion.yield %t : tensor<2x8x4x4xf32>
  }
  return %g : tensor<2x8x4x4xf32>
}

func.func @grouped(%x: tensor<2x2x2x6x6xf32>, %w: tensor<2x3x2x3x3xf32>, %b: tensor<2x2x3x4x4xf32>) -> tensor<2x2x3x4x4xf32> {
  %g = fusion.group single (%a = %x : tensor<2x2x2x6x6xf32>, %f = %w : tensor<2x3x2x3x3xf32>, %i = %b : tensor<2x2x3x4x4xf32>) -> tensor<2x2x3x4x4xf32> {
    %c = linalg.conv_2d_ngchw_gfchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%a, %f : tensor<2x2x2x6x6xf32>, tensor<2x3x2x3x3xf32>) outs(%i : tensor<2x2x3x4x4xf32>) -> tensor<2x2x3x4x4xf32>
    fusion.yield %c : tensor<2x2x3x4x4xf32>
  }
  return %g : tensor<2x2x3x4x4xf32>
}
