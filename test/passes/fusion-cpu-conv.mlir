// RUN: fusec-opt %s --fusion-cpu-conv --split-input-file | filecheck %s
// RUN: fusec-opt %s '--fusion-cpu-conv{max-col-kb=16}' --split-input-file | filecheck %s --check-prefix=LIMIT

// A 3x3 convolution tile as the CPU's tiled stage leaves it (generalised, loops ordered
// (n, f, oh, c, kh, kw, ow) by --fusion-cpu-loop-order), on an input the kernel padded:
// an im2col gather into a [n, c, kh, kw, oh, ow] buffer of its own, viewed as
// [n, K = 8*3*3, P = 8*8], and one matmul generic (filter [F, K] shared by the images,
// col, the output viewed as [n, F, P]) that --fusion-cpu-matmul builds. No 7-deep
// convolution loop nest is left.
// CHECK-DAG: #[[GATHER:.+]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2 + d4, d3 + d5)>
// CHECK-DAG: #[[A:.+]] = affine_map<(d0, d1, d2, d3) -> (d1, d3)>
// CHECK-DAG: #[[B:.+]] = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
// CHECK-DAG: #[[C:.+]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @conv3x3
// CHECK: %[[COL:.+]] = memref.alloc() {alignment = 64 : i64} : memref<2x8x3x3x8x8xf32>
// CHECK: linalg.generic {indexing_maps = [#[[GATHER]], #{{.+}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%{{.+}} : memref<2x8x10x10xf32>) outs(%[[COL]] :
// CHECK: %[[BV:.+]] = memref.collapse_shape %[[COL]] {{\[\[}}0], [1, 2, 3], [4, 5]] : memref<2x8x3x3x8x8xf32> into memref<2x72x64xf32>
// CHECK: %[[AV:.+]] = memref.collapse_shape %{{.+}} {{\[\[}}0], [1, 2, 3]] : memref<16x8x3x3xf32> into memref<16x72xf32>
// CHECK: %[[CV:.+]] = memref.collapse_shape %{{.+}} {{\[\[}}0], [1], [2, 3]] : memref<2x16x8x8xf32> into memref<2x16x64xf32>
// CHECK: linalg.generic {indexing_maps = [#[[A]], #[[B]], #[[C]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[AV]], %[[BV]] : {{.+}}) outs(%[[CV]] : {{.+}}) attrs =  {fusion.cpu_conv = "8x3x3 window, stride [1, 1], dilation [1, 1]: im2col [72, 64] per image, matmul [16, 72] @ [72, 64]"}
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK-NOT: linalg.generic
// Under a 16 KB limit its 36.9 KB col buffer is refused and the convolution stays.
// LIMIT-LABEL: func.func @conv3x3
// LIMIT-NOT: memref.alloc
// LIMIT: linalg.generic {{.+}} iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction", "parallel"]
func.func @conv3x3(%x: memref<2x8x10x10xf32>, %w: memref<16x8x3x3xf32>, %y: memref<2x16x8x8xf32>) {
  linalg.generic {indexing_maps = [affine_map<(n, f, oh, c, kh, kw, ow) -> (n, c, oh + kh, kw + ow)>, affine_map<(n, f, oh, c, kh, kw, ow) -> (f, c, kh, kw)>, affine_map<(n, f, oh, c, kh, kw, ow) -> (n, f, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%x, %w : memref<2x8x10x10xf32>, memref<16x8x3x3xf32>) outs(%y : memref<2x16x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m fastmath<reassoc> : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Stride 2 and dilation 2, read at an offset of 1 into the input (a pad the kernel did not
// materialise around the tile): the gather's map keeps all three.
// CHECK-DAG: #[[STRIDED:.+]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d4 * 2 + d2 * 2 + 1, d5 * 2 + d3 * 2 + 1)>
// CHECK-LABEL: func.func @strided_dilated
// CHECK: memref.alloc() {{.+}} : memref<1x4x3x3x4x4xf32>
// CHECK: linalg.generic {indexing_maps = [#[[STRIDED]],
// CHECK: fusion.cpu_conv = "4x3x3 window, stride [2, 2], dilation [2, 2]: im2col [36, 16] per image, matmul [8, 36] @ [36, 16]"
func.func @strided_dilated(%x: memref<1x4x16x16xf32>, %w: memref<8x4x3x3xf32>, %y: memref<1x8x4x4xf32>) {
  linalg.generic {indexing_maps = [affine_map<(n, f, oh, ow, c, kh, kw) -> (n, c, oh * 2 + kh * 2 + 1, ow * 2 + kw * 2 + 1)>, affine_map<(n, f, oh, ow, c, kh, kw) -> (f, c, kh, kw)>, affine_map<(n, f, oh, ow, c, kh, kw) -> (n, f, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%x, %w : memref<1x4x16x16xf32>, memref<8x4x3x3xf32>) outs(%y : memref<1x8x4x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A partial tile of output channels (dynamic F) reading its rows of the filter through a
// strided view: the filter's rows are still contiguous, so the matmul reads them in place.
// Its 5x5 = 25 pixels are padded to 32 columns (whole vectors for the microkernel): col is
// [n, c, kh, kw, 32] with the 7 pad columns zeroed and the gather's pixel index split by
// floordiv/mod; the matmul writes a staging buffer that takes the output's values first and
// gives its first 25 columns back after.
// CHECK-DAG: #[[SPLIT:.+]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4 floordiv 5 + d2, d4 mod 5 + d3)>
// CHECK-LABEL: func.func @channel_tile
// CHECK: %[[F:.+]] = memref.dim %{{.+}}, %c1 : memref<1x?x5x5xf32>
// CHECK: %[[COL:.+]] = memref.alloc() {{.+}} : memref<1x8x1x1x32xf32>
// CHECK: %[[PAD:.+]] = memref.subview %[[COL]][0, 0, 0, 0, 25] [1, 8, 1, 1, 7]
// CHECK: linalg.fill ins(%{{.+}} : f32) outs(%[[PAD]] :
// CHECK: %[[VALID:.+]] = memref.subview %[[COL]][0, 0, 0, 0, 0] [1, 8, 1, 1, 25]
// CHECK: linalg.generic {indexing_maps = [#[[SPLIT]], {{.+}}]{{.+}} outs(%[[VALID]] :
// CHECK: %[[B:.+]] = memref.collapse_shape %[[COL]] {{\[\[}}0], [1, 2, 3], [4]] : memref<1x8x1x1x32xf32> into memref<1x8x32xf32>
// CHECK: memref.collapse_shape %{{.+}} {{\[\[}}0], [1, 2, 3]] : memref<?x8x1x1xf32, strided<[8, 1, 1, 1], offset: ?>> into memref<?x8xf32, strided<[8, 1], offset: ?>>
// CHECK: %[[OUT:.+]] = memref.collapse_shape %{{.+}} {{\[\[}}0], [1], [2, 3]] : memref<1x?x5x5xf32> into memref<1x?x25xf32>
// CHECK: %[[STAGE:.+]] = memref.alloc(%[[F]]) {{.+}} : memref<1x?x32xf32>
// CHECK: %[[STAGED:.+]] = memref.subview %[[STAGE]][0, 0, 0] [1, %[[F]], 25]
// CHECK: linalg.copy {{.+}} ins(%[[OUT]] : {{.+}}) outs(%[[STAGED]] :
// CHECK: linalg.generic {{.+}} ins(%{{.+}}, %[[B]] : {{.+}}) outs(%[[STAGE]] : {{.+}}) attrs =  {fusion.cpu_conv = "8x1x1 window, stride [1, 1], dilation [1, 1]: im2col [8, 25] per image, matmul [?, 8] @ [8, 25] (pixels padded to 32)"}
// CHECK: linalg.copy {{.+}} ins(%[[STAGED]] : {{.+}}) outs(%[[OUT]] :
func.func @channel_tile(%x: memref<1x8x5x5xf32>, %w: memref<?x8x1x1xf32, strided<[8, 1, 1, 1], offset: ?>>, %y: memref<1x?x5x5xf32>) {
  linalg.generic {indexing_maps = [affine_map<(n, f, oh, c, kh, kw, ow) -> (n, c, oh + kh, kw + ow)>, affine_map<(n, f, oh, c, kh, kw, ow) -> (f, c, kh, kw)>, affine_map<(n, f, oh, c, kh, kw, ow) -> (n, f, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%x, %w : memref<1x8x5x5xf32>, memref<?x8x1x1xf32, strided<[8, 1, 1, 1], offset: ?>>) outs(%y : memref<1x?x5x5xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Must not: a tile narrower than the output's rows (its pixels are not one contiguous run,
// so they cannot be the matmul's columns), an f64 convolution (the microkernel is f32), a
// depthwise convolution (one filter per channel: no shared K), and a sum pooling (no
// multiply-accumulate). Each stays as it was.
// CHECK-LABEL: func.func @narrow_tile
// CHECK-NOT: memref.alloc
// CHECK: linalg.generic {{.+}} iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction", "parallel"]
// CHECK-NOT: fusion.cpu_conv
func.func @narrow_tile(%x: memref<1x8x8x8xf32>, %w: memref<16x8x3x3xf32>, %y: memref<1x16x6x3xf32, strided<[576, 36, 6, 1], offset: ?>>) {
  linalg.generic {indexing_maps = [affine_map<(n, f, oh, c, kh, kw, ow) -> (n, c, oh + kh, kw + ow)>, affine_map<(n, f, oh, c, kh, kw, ow) -> (f, c, kh, kw)>, affine_map<(n, f, oh, c, kh, kw, ow) -> (n, f, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%x, %w : memref<1x8x8x8xf32>, memref<16x8x3x3xf32>) outs(%y : memref<1x16x6x3xf32, strided<[576, 36, 6, 1], offset: ?>>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// CHECK-LABEL: func.func @f64
// CHECK-NOT: memref.alloc
// CHECK-NOT: fusion.cpu_conv
func.func @f64(%x: memref<1x8x8x8xf64>, %w: memref<16x8x3x3xf64>, %y: memref<1x16x6x6xf64>) {
  linalg.generic {indexing_maps = [affine_map<(n, f, oh, c, kh, kw, ow) -> (n, c, oh + kh, kw + ow)>, affine_map<(n, f, oh, c, kh, kw, ow) -> (f, c, kh, kw)>, affine_map<(n, f, oh, c, kh, kw, ow) -> (n, f, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%x, %w : memref<1x8x8x8xf64>, memref<16x8x3x3xf64>) outs(%y : memref<1x16x6x6xf64>) {
  ^bb0(%a: f64, %b: f64, %acc: f64):
    %m = arith.mulf %a, %b : f64
    %s = arith.addf %acc, %m : f64
    linalg.yield %s : f64
  }
  return
}

// CHECK-LABEL: func.func @depthwise
// CHECK-NOT: memref.alloc
// CHECK-NOT: fusion.cpu_conv
func.func @depthwise(%x: memref<1x8x8x8xf32>, %w: memref<8x3x3xf32>, %y: memref<1x8x6x6xf32>) {
  linalg.generic {indexing_maps = [affine_map<(n, c, oh, ow, kh, kw) -> (n, c, oh + kh, ow + kw)>, affine_map<(n, c, oh, ow, kh, kw) -> (c, kh, kw)>, affine_map<(n, c, oh, ow, kh, kw) -> (n, c, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%x, %w : memref<1x8x8x8xf32>, memref<8x3x3xf32>) outs(%y : memref<1x8x6x6xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// CHECK-LABEL: func.func @sum_pool
// CHECK-NOT: memref.alloc
// CHECK-NOT: fusion.cpu_conv
func.func @sum_pool(%x: memref<1x8x8x8xf32>, %w: memref<16x8x3x3xf32>, %y: memref<1x16x6x6xf32>) {
  linalg.generic {indexing_maps = [affine_map<(n, f, oh, c, kh, kw, ow) -> (n, c, oh + kh, kw + ow)>, affine_map<(n, f, oh, c, kh, kw, ow) -> (f, c, kh, kw)>, affine_map<(n, f, oh, c, kh, kw, ow) -> (n, f, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%x, %w : memref<1x8x8x8xf32>, memref<16x8x3x3xf32>) outs(%y : memref<1x16x6x6xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A grouped 3x3 convolution (torch-mlir's conv_2d_ngchw_gfchw generalised, loops
// (n, g, f, oh, c, kh, kw, ow): ResNeXt's), a tile of 2 groups of 4 channels: the group is a
// second batch dim everywhere: col [n, g, c, kh, kw, oh, ow] viewed as [n, g, K = 4*3*3, P],
// the filter [g, F, K] (each group's filter its own A), the output [n, g, F, P], one matmul
// batched over (n, g). It ran as LLVM's loops before (ResNeXt-50 0.26x eager on the CPU).
// CHECK-DAG: #[[GG:.+]] = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3 + d5, d4 + d6)>
// CHECK-DAG: #[[GA:.+]] = affine_map<(d0, d1, d2, d3, d4) -> (d1, d2, d4)>
// CHECK-DAG: #[[GB:.+]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
// CHECK-DAG: #[[GC:.+]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
// CHECK-LABEL: func.func @grouped3x3
// CHECK: %[[COL:.+]] = memref.alloc() {alignment = 64 : i64} : memref<1x2x4x3x3x8x8xf32>
// CHECK: linalg.generic {indexing_maps = [#[[GG]], #{{.+}}], {{.*}} ins(%{{.+}} : memref<1x2x4x10x10xf32>) outs(%[[COL]] :
// CHECK: %[[BV:.+]] = memref.collapse_shape %[[COL]] {{\[\[}}0], [1], [2, 3, 4], [5, 6]] : memref<1x2x4x3x3x8x8xf32> into memref<1x2x36x64xf32>
// CHECK: %[[AV:.+]] = memref.collapse_shape %{{.+}} {{\[\[}}0], [1], [2, 3, 4]] : memref<2x4x4x3x3xf32> into memref<2x4x36xf32>
// CHECK: %[[CV:.+]] = memref.collapse_shape %{{.+}} {{\[\[}}0], [1], [2], [3, 4]] : memref<1x2x4x8x8xf32> into memref<1x2x4x64xf32>
// CHECK: linalg.generic {indexing_maps = [#[[GA]], #[[GB]], #[[GC]]], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[AV]], %[[BV]] : {{.+}}) outs(%[[CV]] : {{.+}}) attrs =  {fusion.cpu_conv = "4x3x3 window, stride [1, 1], dilation [1, 1]: im2col [36, 64] per image per group, matmul [4, 36] @ [36, 64]"}
// CHECK-NOT: linalg.generic
func.func @grouped3x3(%x: memref<1x2x4x10x10xf32>, %w: memref<2x4x4x3x3xf32>, %y: memref<1x2x4x8x8xf32>) {
  linalg.generic {indexing_maps = [affine_map<(n, g, f, oh, c, kh, kw, ow) -> (n, g, c, oh + kh, ow + kw)>, affine_map<(n, g, f, oh, c, kh, kw, ow) -> (g, f, c, kh, kw)>, affine_map<(n, g, f, oh, c, kh, kw, ow) -> (n, g, f, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%x, %w : memref<1x2x4x10x10xf32>, memref<2x4x4x3x3xf32>) outs(%y : memref<1x2x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m fastmath<reassoc> : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Left alone: a grouped convolution whose input is not indexed by its group (the group dim
// read from another place: not a convolution of groups), nothing rewritten.
// CHECK-LABEL: func.func @grouped_wrong_input
// CHECK-NOT: memref.alloc
// CHECK-NOT: fusion.cpu_conv
func.func @grouped_wrong_input(%x: memref<1x4x4x10x10xf32>, %w: memref<2x4x4x3x3xf32>, %y: memref<1x2x4x8x8xf32>) {
  linalg.generic {indexing_maps = [affine_map<(n, g, f, oh, c, kh, kw, ow) -> (n, f, c, oh + kh, ow + kw)>, affine_map<(n, g, f, oh, c, kh, kw, ow) -> (g, f, c, kh, kw)>, affine_map<(n, g, f, oh, c, kh, kw, ow) -> (n, g, f, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%x, %w : memref<1x4x4x10x10xf32>, memref<2x4x4x3x3xf32>) outs(%y : memref<1x2x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m fastmath<reassoc> : f32
    linalg.yield %s : f32
  }
  return
}
