// RUN: fusec-opt %s '--fusion-tile{threads=2,min-tile-kb=0}' | filecheck %s

// Regression (ConvolutionBackwardModule2DStatic_basic): a producer whose result a
// tensor.pad reads stays outside the tile loop. Fusing it too aborted the process: the
// fused pad reads its source slice inside an scf.if, and fuse_into_containing_op through
// that nested use hit MLIR's `eraseOp` assertion. The pad and the root are still tiled.

#id = affine_map<(d0, d1) -> (d0, d1)>

// CHECK-LABEL: func.func @pad_source
// CHECK:         fusion.group {{.*}}fusion.tile_sizes = array<i64: 2, 0>
// CHECK:           %[[T:.+]] = linalg.generic
// CHECK:           scf.forall
// CHECK:             tensor.extract_slice %[[T]]
// CHECK:             tensor.pad
// CHECK:             linalg.generic
// CHECK:             arith.mulf
// CHECK:             scf.forall.in_parallel
func.func @pad_source(%a: tensor<8x16xf32>) -> tensor<16x10xf32> {
  %0 = fusion.group vertical (%x = %a : tensor<8x16xf32>) -> tensor<16x10xf32> {
    %cst = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<16x8xf32>
    %t = linalg.transpose ins(%x : tensor<8x16xf32>) outs(%e : tensor<16x8xf32>) permutation = [1, 0]
    %p = tensor.pad %t low[0, 1] high[0, 1] {
    ^bb0(%i: index, %j: index):
      tensor.yield %cst : f32
    } : tensor<16x8xf32> to tensor<16x10xf32>
    %e2 = tensor.empty() : tensor<16x10xf32>
    %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%p : tensor<16x10xf32>) outs(%e2 : tensor<16x10xf32>) {
    ^bb0(%in: f32, %out: f32):
      %m = arith.mulf %in, %in : f32
      linalg.yield %m : f32
    } -> tensor<16x10xf32>
    fusion.yield %r : tensor<16x10xf32>
  }
  return %0 : tensor<16x10xf32>
}
