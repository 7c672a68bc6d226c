// RUN: fusec-opt %s --fusion-gpu-convs-to-gemm | filecheck %s
// RUN: fusec-opt %s --fusion-gpu-convs-to-gemm | filecheck %s --check-prefix MAPS

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
// A 1x1 convolution of stride 1 over one image (rows of 6 x 6 f32, 144 bytes: 16-byte
// aligned), its init a fill (zero): no gather and no transpose. The filter as stored times
// the image as its own columns, [F, C] @ [C, H*W]; the product accumulates into a fill of
// the same value (nothing added after it) and is NCHW by a reshape alone.
// CHECK-LABEL: func.func @pointwise
// CHECK: fusion.conv_as_gemm = "linalg.conv_2d_nchw_fchw 1x16x6x6 * 32x16x1x1 as [32, 16] @ [16, 36]: the image as its columns"
// CHECK-NOT: linalg.conv_2d_nchw_fchw
// CHECK: tensor.collapse_shape {{.*}} {{\[}}[0, 1], [2, 3]] : tensor<1x16x6x6xf32> into tensor<16x36xf32>
// CHECK: tensor.collapse_shape {{.*}} : tensor<32x16x1x1xf32> into tensor<32x16xf32>
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<32x36xf32>)
// CHECK: linalg.matmul ins({{.*}} : tensor<32x16xf32>, tensor<16x36xf32>)
// CHECK: tensor.expand_shape {{.*}} into tensor<1x32x6x6xf32>
// CHECK-NOT: linalg.transpose
// CHECK-NOT: arith.addf
// CHECK: fusion.yield
//
// What keeps the im2col route: a stride (the columns would be a gather), two images, rows
// not 16-byte aligned (7 x 7 f32: 196 bytes).
// CHECK-LABEL: func.func @pointwise_strided
// CHECK: fusion.conv_as_gemm = "linalg.conv_2d_nchw_fchw 1x16x6x6 * 32x16x1x1 as im2col [9, 16] @ [16, 32]
// CHECK-LABEL: func.func @pointwise_two_images
// CHECK: fusion.conv_as_gemm = "linalg.conv_2d_nchw_fchw 2x16x6x6 * 32x16x1x1 as im2col [72, 16] @ [16, 32]
// CHECK-LABEL: func.func @pointwise_unaligned
// CHECK: fusion.conv_as_gemm = "linalg.conv_2d_nchw_fchw 1x16x7x7 * 32x16x1x1 as im2col [49, 16] @ [16, 32]
// A grouped convolution whose window is small enough for the data-movement kernels to
// unroll per output (2 channels per group x 3 x 3 = 18 points, at most 64): left alone.
// CHECK-LABEL: func.func @grouped
// CHECK: linalg.conv_2d_ngchw_gfchw
// CHECK-NOT: linalg.matmul
// CHECK-NOT: linalg.batch_matmul
//
// A larger one (ResNeXt's 8 channels per group x 3 x 3 = 72 points; dilation 2): im2col
// with the groups leading, col[g, n, oh, ow, c, kh, kw] = x[n, g, c, oh + 2 kh, ow + 2 kw],
// one batched matmul over the 4 groups, [4, N*OH*OW, C*KH*KW] x [4, C*KH*KW, F], and the
// transpose back to the convolution's N, G, F, OH, OW.
// CHECK-LABEL: func.func @grouped_wide
// CHECK: fusion.conv_as_gemm = "linalg.conv_2d_ngchw_gfchw 2x4x8x9x9 * 4x6x8x3x3 as im2col [4, 50, 72] @ [4, 72, 6] (stride [1, 1], dilation [2, 2])"
// CHECK-NOT: linalg.conv_2d_ngchw_gfchw
// CHECK: linalg.generic {indexing_maps = [#[[GWIN:.+]], #{{.+}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]}
// CHECK: tensor.collapse_shape {{.*}} {{\[}}[0], [1, 2, 3], [4, 5, 6]] : tensor<4x2x5x5x8x3x3xf32> into tensor<4x50x72xf32>
// CHECK: tensor.collapse_shape {{.*}} : tensor<4x6x8x3x3xf32> into tensor<4x6x72xf32>
// CHECK: linalg.transpose {{.*}} permutation = [0, 2, 1]
// CHECK: linalg.batch_matmul ins({{.*}} : tensor<4x50x72xf32>, tensor<4x72x6xf32>)
// CHECK: tensor.expand_shape {{.*}} into tensor<4x2x5x5x6xf32>
// CHECK: linalg.transpose {{.*}} permutation = [1, 0, 4, 2, 3]
// CHECK: arith.addf
// The gather's map (printed at the top of the module): group d0, batch d1, input channel
// d4, rows d2 + 2 d5, columns d3 + 2 d6.
// MAPS: affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d0, d4, d2 + d5 * 2, d3 + d6 * 2)>
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

func.func @pointwise(%x: tensor<1x16x6x6xf32>, %w: tensor<32x16x1x1xf32>) -> tensor<1x32x6x6xf32> {
  %g = fusion.group single (%a = %x : tensor<1x16x6x6xf32>, %f = %w : tensor<32x16x1x1xf32>) -> tensor<1x32x6x6xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<1x32x6x6xf32>
    %i = linalg.fill ins(%zero : f32) outs(%e : tensor<1x32x6x6xf32>) -> tensor<1x32x6x6xf32>
    %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%a, %f : tensor<1x16x6x6xf32>, tensor<32x16x1x1xf32>) outs(%i : tensor<1x32x6x6xf32>) -> tensor<1x32x6x6xf32>
    fusion.yield %c : tensor<1x32x6x6xf32>
  }
  return %g : tensor<1x32x6x6xf32>
}

func.func @pointwise_strided(%x: tensor<1x16x6x6xf32>, %w: tensor<32x16x1x1xf32>) -> tensor<1x32x3x3xf32> {
  %g = fusion.group single (%a = %x : tensor<1x16x6x6xf32>, %f = %w : tensor<32x16x1x1xf32>) -> tensor<1x32x3x3xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<1x32x3x3xf32>
    %i = linalg.fill ins(%zero : f32) outs(%e : tensor<1x32x3x3xf32>) -> tensor<1x32x3x3xf32>
    %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%a, %f : tensor<1x16x6x6xf32>, tensor<32x16x1x1xf32>) outs(%i : tensor<1x32x3x3xf32>) -> tensor<1x32x3x3xf32>
    fusion.yield %c : tensor<1x32x3x3xf32>
  }
  return %g : tensor<1x32x3x3xf32>
}

func.func @pointwise_two_images(%x: tensor<2x16x6x6xf32>, %w: tensor<32x16x1x1xf32>) -> tensor<2x32x6x6xf32> {
  %g = fusion.group single (%a = %x : tensor<2x16x6x6xf32>, %f = %w : tensor<32x16x1x1xf32>) -> tensor<2x32x6x6xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<2x32x6x6xf32>
    %i = linalg.fill ins(%zero : f32) outs(%e : tensor<2x32x6x6xf32>) -> tensor<2x32x6x6xf32>
    %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%a, %f : tensor<2x16x6x6xf32>, tensor<32x16x1x1xf32>) outs(%i : tensor<2x32x6x6xf32>) -> tensor<2x32x6x6xf32>
    fusion.yield %c : tensor<2x32x6x6xf32>
  }
  return %g : tensor<2x32x6x6xf32>
}

func.func @pointwise_unaligned(%x: tensor<1x16x7x7xf32>, %w: tensor<32x16x1x1xf32>) -> tensor<1x32x7x7xf32> {
  %g = fusion.group single (%a = %x : tensor<1x16x7x7xf32>, %f = %w : tensor<32x16x1x1xf32>) -> tensor<1x32x7x7xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<1x32x7x7xf32>
    %i = linalg.fill ins(%zero : f32) outs(%e : tensor<1x32x7x7xf32>) -> tensor<1x32x7x7xf32>
    %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%a, %f : tensor<1x16x7x7xf32>, tensor<32x16x1x1xf32>) outs(%i : tensor<1x32x7x7xf32>) -> tensor<1x32x7x7xf32>
    fusion.yield %c : tensor<1x32x7x7xf32>
  }
  return %g : tensor<1x32x7x7xf32>
}

func.func @grouped(%x: tensor<2x2x2x6x6xf32>, %w: tensor<2x3x2x3x3xf32>, %b: tensor<2x2x3x4x4xf32>) -> tensor<2x2x3x4x4xf32> {
  %g = fusion.group single (%a = %x : tensor<2x2x2x6x6xf32>, %f = %w : tensor<2x3x2x3x3xf32>, %i = %b : tensor<2x2x3x4x4xf32>) -> tensor<2x2x3x4x4xf32> {
    %c = linalg.conv_2d_ngchw_gfchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%a, %f : tensor<2x2x2x6x6xf32>, tensor<2x3x2x3x3xf32>) outs(%i : tensor<2x2x3x4x4xf32>) -> tensor<2x2x3x4x4xf32>
    fusion.yield %c : tensor<2x2x3x4x4xf32>
  }
  return %g : tensor<2x2x3x4x4xf32>
}

func.func @grouped_wide(%x: tensor<2x4x8x9x9xf32>, %w: tensor<4x6x8x3x3xf32>, %b: tensor<2x4x6x5x5xf32>) -> tensor<2x4x6x5x5xf32> {
  %g = fusion.group single (%a = %x : tensor<2x4x8x9x9xf32>, %f = %w : tensor<4x6x8x3x3xf32>, %i = %b : tensor<2x4x6x5x5xf32>) -> tensor<2x4x6x5x5xf32> {
    %c = linalg.conv_2d_ngchw_gfchw {dilations = dense<2> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%a, %f : tensor<2x4x8x9x9xf32>, tensor<4x6x8x3x3xf32>) outs(%i : tensor<2x4x6x5x5xf32>) -> tensor<2x4x6x5x5xf32>
    fusion.yield %c : tensor<2x4x6x5x5xf32>
  }
  return %g : tensor<2x4x6x5x5xf32>
}
