// RUN: fusec-opt %s '--fusion-tile{threads=2,conv-as-gemm=true}' --split-input-file | filecheck %s
// RUN: fusec-opt %s '--fusion-tile{threads=2,conv-as-gemm=true,min-tile-kb=0}' --split-input-file | filecheck %s --check-prefix=FINEST

// A ResNet layer as the planner leaves it for the CPU: the previous block's ReLU, the
// padding the convolution reads, the convolution and its ReLU, and the next layer's
// padding, one group. A padding's producers stay outside its tile loop, computed whole by
// one thread, and a padding as the root leaves everything before it outside: so on the CPU
// the group becomes three kernels: what the first padding reads (`fusion.split` says why),
// the convolution with its epilogue, tiled by its own last op, and the trailing padding.
// At batch 1 with 7x7 outputs (under the pixels an im2col chunk wants), the convolution's
// 16 output channels are split into two tiles of 8, one per thread.
// CHECK-LABEL: func.func @layer
// CHECK: fusion.group single
// CHECK-SAME: fusion.split = "what a padding or a convolution's window reads in the kernel is a kernel of its own
// CHECK: linalg.generic
// CHECK: fusion.group vertical
// CHECK-SAME: fusion.tile_sizes = array<i64: 0, 8, 0, 0>
// CHECK: scf.forall ({{.+}}) in (2)
// CHECK: tensor.pad
// CHECK: fusion.group single
// CHECK-SAME: fusion.split = "the padding after the kernel's last op is a kernel of its own
// CHECK: tensor.pad
// What must not happen: the GPU fallback's finest tiles (min-tile-kb=0) tile the group as
// it is, one group.
// FINEST-LABEL: func.func @layer
// FINEST-COUNT-1: fusion.group
// FINEST-NOT: fusion.split
#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @layer(%arg0: tensor<1x8x7x7xf32>) -> tensor<1x16x9x9xf32> {
    %0 = fusion.group vertical (%arg1 = %arg0 : tensor<1x8x7x7xf32>) -> tensor<1x16x9x9xf32> attributes {fusion.device = "cpu", fusion.tile_dims = [0, 1, 2, 3]} {
      %w = arith.constant dense<1.000000e-01> : tensor<16x8x3x3xf32>
      %zero = arith.constant 0.000000e+00 : f32
      %e8 = tensor.empty() : tensor<1x8x7x7xf32>
      %e16 = tensor.empty() : tensor<1x16x7x7xf32>
      %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg1 : tensor<1x8x7x7xf32>) outs(%e8 : tensor<1x8x7x7xf32>) {
      ^bb0(%in: f32, %out: f32):
        %m = arith.maximumf %in, %zero : f32
        linalg.yield %m : f32
      } -> tensor<1x8x7x7xf32>
      %p = tensor.pad %r low[0, 0, 1, 1] high[0, 0, 1, 1] {
      ^bb0(%i: index, %j: index, %k: index, %l: index):
        tensor.yield %zero : f32
      } : tensor<1x8x7x7xf32> to tensor<1x8x9x9xf32>
      %f = linalg.fill ins(%zero : f32) outs(%e16 : tensor<1x16x7x7xf32>) -> tensor<1x16x7x7xf32>
      %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%p, %w : tensor<1x8x9x9xf32>, tensor<16x8x3x3xf32>) outs(%f : tensor<1x16x7x7xf32>) -> tensor<1x16x7x7xf32>
      %y = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c : tensor<1x16x7x7xf32>) outs(%e16 : tensor<1x16x7x7xf32>) {
      ^bb0(%in: f32, %out: f32):
        %m = arith.maximumf %in, %zero : f32
        linalg.yield %m : f32
      } -> tensor<1x16x7x7xf32>
      %q = tensor.pad %y low[0, 0, 1, 1] high[0, 0, 1, 1] {
      ^bb0(%i: index, %j: index, %k: index, %l: index):
        tensor.yield %zero : f32
      } : tensor<1x16x7x7xf32> to tensor<1x16x9x9xf32>
      fusion.yield %q : tensor<1x16x9x9xf32>
    }
    return %0 : tensor<1x16x9x9xf32>
  }
}

// -----

// FINEST-LABEL: func.func @retiled
// A capacity re-tile (`fusion.max_tile_rows`, set by the fit when the kernel's footprint is
// over the L2) leaves a convolution's channel tile at one per thread: the im2col rewrite
// sizes its own chunks to the L2, and narrower channel tiles would each gather the image
// again (Whisper's 768-channel 1-D convolution went to 512 tiles and ran 10x slower).
// CHECK-LABEL: func.func @retiled
// CHECK: fusion.tile_sizes = array<i64: 0, 16, 0, 0, 0, 0, 0>
// CHECK: scf.forall ({{.+}}) in (2)
func.func @retiled(%arg0: tensor<1x8x1x30xf32>) -> tensor<1x32x1x28xf32> {
  %0 = fusion.group vertical (%arg1 = %arg0 : tensor<1x8x1x30xf32>) -> tensor<1x32x1x28xf32> attributes {fusion.device = "cpu", fusion.tile_dims = [0, 1, 2, 3], fusion.max_tile_rows = 2 : i64} {
    %w = arith.constant dense<1.000000e-01> : tensor<32x8x1x3xf32>
    %zero = arith.constant 0.000000e+00 : f32
    %e = tensor.empty() : tensor<1x32x1x28xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x32x1x28xf32>) -> tensor<1x32x1x28xf32>
    %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%arg1, %w : tensor<1x8x1x30xf32>, tensor<32x8x1x3xf32>) outs(%f : tensor<1x32x1x28xf32>) -> tensor<1x32x1x28xf32>
    fusion.yield %c : tensor<1x32x1x28xf32>
  }
  return %0 : tensor<1x32x1x28xf32>
}

// -----

// MobileNet's depthwise 3x3 (+ its ReLU) in front of the 1x1 projection, one group: the
// projection reads the depthwise result through its own window, so it would be computed
// before the tile loop, whole, as loops (0.66 of a 0.96 ms MobileNetV2 block). It becomes a
// kernel of its own, tiled like the others; the projection keeps the group's plan.
// CHECK-LABEL: func.func @depthwise_then_pointwise
// CHECK: fusion.group single
// CHECK-SAME: fusion.ops = ["linalg.fill", "linalg.depthwise_conv_2d_nchw_chw", "linalg.generic"]
// CHECK-SAME: fusion.split = "what a padding or a convolution's window reads in the kernel is a kernel of its own
// CHECK: fusion.group vertical
// CHECK-SAME: fusion.ops = ["linalg.fill", "linalg.conv_2d_nchw_fchw"]
// FINEST-LABEL: func.func @depthwise_then_pointwise
// FINEST-COUNT-1: fusion.group
#mapd = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @depthwise_then_pointwise(%arg0: tensor<1x16x9x9xf32>) -> tensor<1x8x7x7xf32> {
  %0 = fusion.group vertical (%arg1 = %arg0 : tensor<1x16x9x9xf32>) -> tensor<1x8x7x7xf32> attributes {fusion.device = "cpu", fusion.tile_dims = [0, 1, 2, 3]} {
    %dw = arith.constant dense<1.000000e-01> : tensor<16x3x3xf32>
    %pw = arith.constant dense<2.000000e-01> : tensor<8x16x1x1xf32>
    %zero = arith.constant 0.000000e+00 : f32
    %e16 = tensor.empty() : tensor<1x16x7x7xf32>
    %e8 = tensor.empty() : tensor<1x8x7x7xf32>
    %f16 = linalg.fill ins(%zero : f32) outs(%e16 : tensor<1x16x7x7xf32>) -> tensor<1x16x7x7xf32>
    %d = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%arg1, %dw : tensor<1x16x9x9xf32>, tensor<16x3x3xf32>) outs(%f16 : tensor<1x16x7x7xf32>) -> tensor<1x16x7x7xf32>
    %r = linalg.generic {indexing_maps = [#mapd, #mapd], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%d : tensor<1x16x7x7xf32>) outs(%e16 : tensor<1x16x7x7xf32>) {
    ^bb0(%in: f32, %out: f32):
      %m = arith.maximumf %in, %zero : f32
      linalg.yield %m : f32
    } -> tensor<1x16x7x7xf32>
    %f8 = linalg.fill ins(%zero : f32) outs(%e8 : tensor<1x8x7x7xf32>) -> tensor<1x8x7x7xf32>
    %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%r, %pw : tensor<1x16x7x7xf32>, tensor<8x16x1x1xf32>) outs(%f8 : tensor<1x8x7x7xf32>) -> tensor<1x8x7x7xf32>
    fusion.yield %c : tensor<1x8x7x7xf32>
  }
  return %0 : tensor<1x8x7x7xf32>
}

// -----

// A matmul whose group also yields a slice of its result's head-split transpose (LLaMA's
// query projection: q, and the first half of its heads for RoPE's rotate_half). Tiled by
// the matmul, the transpose and slice would run after the tile loop, whole, writing the
// kernel's output there: the runtime could not split the kernel across threads. On the CPU
// they become a kernel of their own (`fusion.split` says why), and the matmul's kernel is
// tiled by its rows. What must not happen: the finest tiles (the GPU fallback) split it.
// CHECK-LABEL: func.func @projection_and_head_slice
// CHECK: fusion.group epilogue
// CHECK-SAME: fusion.grid = 2 : i64
// CHECK: scf.forall ({{.+}}) in (2)
// CHECK: linalg.generic {{.+}} iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: fusion.group single
// CHECK-SAME: fusion.split = "what the kernel yields after its root
// CHECK: linalg.generic
// CHECK: tensor.extract_slice
// FINEST-LABEL: func.func @projection_and_head_slice
// FINEST-COUNT-1: fusion.group
// FINEST-NOT: fusion.split
module {
  func.func @projection_and_head_slice(%x: tensor<64x128xf32>) -> (tensor<1x64x4x32xf32>, tensor<1x4x64x16xf32>) {
    %0:2 = fusion.group epilogue (%arg1 = %x : tensor<64x128xf32>) -> (tensor<1x64x4x32xf32>, tensor<1x4x64x16xf32>) attributes {fusion.device = "cpu", fusion.tile_dims = [0, 1]} {
      %w = arith.constant dense<1.000000e-01> : tensor<128x128xf32>
      %zero = arith.constant 0.000000e+00 : f32
      %e = tensor.empty() : tensor<64x128xf32>
      %et = tensor.empty() : tensor<1x4x64x32xf32>
      %f = linalg.fill ins(%zero : f32) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
      %m = linalg.matmul ins(%arg1, %w : tensor<64x128xf32>, tensor<128x128xf32>) outs(%f : tensor<64x128xf32>) -> tensor<64x128xf32>
      %q = tensor.expand_shape %m [[0, 1], [2, 3]] output_shape [1, 64, 4, 32] : tensor<64x128xf32> into tensor<1x64x4x32xf32>
      %t = linalg.transpose ins(%q : tensor<1x64x4x32xf32>) outs(%et : tensor<1x4x64x32xf32>) permutation = [0, 2, 1, 3]
      %h = tensor.extract_slice %t[0, 0, 0, 0] [1, 4, 64, 16] [1, 1, 1, 1] : tensor<1x4x64x32xf32> to tensor<1x4x64x16xf32>
      fusion.yield %q, %h : tensor<1x64x4x32xf32>, tensor<1x4x64x16xf32>
    }
    return %0#0, %0#1 : tensor<1x64x4x32xf32>, tensor<1x4x64x16xf32>
  }
}

// -----

// The same with the trailing work yielded last and ending in an elementwise op (rotate_half
// written as cat(-q[..., h:], q[..., :h]): the negated second half). The group's last
// result is then the negation's, and tiled by it the matmul ran before the tile loop, whole,
// on one thread (the kernel's grid was 1). The matmul whose result the group yields is the
// root all the same: the negated slice is a kernel of its own after it.
// CHECK-LABEL: func.func @projection_and_negated_half
// CHECK: fusion.group epilogue
// CHECK-SAME: fusion.grid = 2 : i64
// CHECK: scf.forall ({{.+}}) in (2)
// CHECK: linalg.generic {{.+}} iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: fusion.group single
// CHECK-SAME: fusion.split = "what the kernel yields after its root
// CHECK: tensor.extract_slice
// CHECK: arith.negf
// FINEST-LABEL: func.func @projection_and_negated_half
// FINEST-COUNT-1: fusion.group
// FINEST-NOT: fusion.split
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @projection_and_negated_half(%x: tensor<64x128xf32>) -> (tensor<1x64x4x32xf32>, tensor<1x4x64x16xf32>) {
    %0:2 = fusion.group epilogue (%arg1 = %x : tensor<64x128xf32>) -> (tensor<1x64x4x32xf32>, tensor<1x4x64x16xf32>) attributes {fusion.device = "cpu", fusion.tile_dims = [0, 1]} {
      %w = arith.constant dense<1.000000e-01> : tensor<128x128xf32>
      %zero = arith.constant 0.000000e+00 : f32
      %e = tensor.empty() : tensor<64x128xf32>
      %et = tensor.empty() : tensor<1x4x64x32xf32>
      %en = tensor.empty() : tensor<1x4x64x16xf32>
      %f = linalg.fill ins(%zero : f32) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
      %m = linalg.matmul ins(%arg1, %w : tensor<64x128xf32>, tensor<128x128xf32>) outs(%f : tensor<64x128xf32>) -> tensor<64x128xf32>
      %q = tensor.expand_shape %m [[0, 1], [2, 3]] output_shape [1, 64, 4, 32] : tensor<64x128xf32> into tensor<1x64x4x32xf32>
      %t = linalg.transpose ins(%q : tensor<1x64x4x32xf32>) outs(%et : tensor<1x4x64x32xf32>) permutation = [0, 2, 1, 3]
      %h = tensor.extract_slice %t[0, 0, 0, 16] [1, 4, 64, 16] [1, 1, 1, 1] : tensor<1x4x64x32xf32> to tensor<1x4x64x16xf32>
      %n = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%h : tensor<1x4x64x16xf32>) outs(%en : tensor<1x4x64x16xf32>) {
      ^bb0(%in: f32, %out: f32):
        %neg = arith.negf %in : f32
        linalg.yield %neg : f32
      } -> tensor<1x4x64x16xf32>
      fusion.yield %q, %n : tensor<1x64x4x32xf32>, tensor<1x4x64x16xf32>
    }
    return %0#0, %0#1 : tensor<1x64x4x32xf32>, tensor<1x4x64x16xf32>
  }
}
