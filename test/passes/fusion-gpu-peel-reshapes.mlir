// RUN: fusec-opt %s --fusion-gpu-peel-reshapes | filecheck %s
// RUN: fusec-opt %s --fusion-gpu-kernels | filecheck %s --check-prefix=KERNELS

// A row-reduction group (an RMSNorm over [2, 64, 32]) whose result is collapsed to [128, 32]
// for a Linear: the group yields the [2, 64, 32] rows and the collapse is a group of its own
// (a view: no kernel), so that the rows tile without a reshape in the way (six kernels of one
// op each for LLaMA's RMSNorm before q, k, v, otherwise). The planner's reason stays.
// CHECK-LABEL: func.func @main
// CHECK: %[[N:.*]] = fusion.group vertical {{.*}} -> tensor<2x64x32xf32> attributes {fusion.reason = "norm"}
// CHECK-NOT: tensor.collapse_shape
// CHECK: fusion.yield %{{.*}} : tensor<2x64x32xf32>
// CHECK: fusion.group single (%{{.*}} = %[[N]] : tensor<2x64x32xf32>) -> tensor<128x32xf32>
// CHECK-NEXT: tensor.collapse_shape
// Not peeled: an elementwise group's trailing reshape (it tiles through it), and a reshape
// that moves the last dim.
// CHECK: fusion.group vertical {{.*}} -> tensor<128x32xf32>
// CHECK: tensor.collapse_shape
// CHECK: fusion.group vertical {{.*}} -> tensor<2x2048xf32>
// CHECK: tensor.collapse_shape
// CHECK: return
//
// Through the tiled stage's first pass: the collapse of the norm's result is a view.
// KERNELS-LABEL: func.func @main
// KERNELS: fusion.group vertical {{.*}} -> tensor<2x64x32xf32>
// KERNELS: fusion.group single {{.*}} -> tensor<128x32xf32> attributes {fusion.path = "view"
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
module {
  func.func @main(%arg0: tensor<2x64x32xf32>) -> (tensor<128x32xf32>, tensor<128x32xf32>, tensor<2x2048xf32>) {
    %0 = fusion.group vertical (%x = %arg0 : tensor<2x64x32xf32>) -> tensor<128x32xf32> attributes {fusion.reason = "norm", fusion.parallel_tiles = 1 : i64} {
      %zero = arith.constant 0.000000e+00 : f32
      %e = tensor.empty() : tensor<2x64x32xf32>
      %e1 = tensor.empty() : tensor<2x64x1xf32>
      %z = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2x64x1xf32>) -> tensor<2x64x1xf32>
      %ss = linalg.generic {indexing_maps = [#map, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<2x64x32xf32>) outs(%z : tensor<2x64x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %p0 = arith.mulf %in, %in : f32
        %p1 = arith.addf %p0, %out : f32
        linalg.yield %p1 : f32
      } -> tensor<2x64x1xf32>
      %n = linalg.generic {indexing_maps = [#map, #row, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %ss : tensor<2x64x32xf32>, tensor<2x64x1xf32>) outs(%e : tensor<2x64x32xf32>) {
      ^bb0(%in: f32, %s: f32, %out: f32):
        %p0 = math.rsqrt %s : f32
        %p1 = arith.mulf %in, %p0 : f32
        linalg.yield %p1 : f32
      } -> tensor<2x64x32xf32>
      %c = tensor.collapse_shape %n [[0, 1], [2]] : tensor<2x64x32xf32> into tensor<128x32xf32>
      fusion.yield %c : tensor<128x32xf32>
    }
    %1 = fusion.group vertical (%x = %arg0 : tensor<2x64x32xf32>) -> tensor<128x32xf32> {
      %e = tensor.empty() : tensor<2x64x32xf32>
      %n = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : tensor<2x64x32xf32>) outs(%e : tensor<2x64x32xf32>) {
      ^bb0(%in: f32, %out: f32):
        %p0 = math.exp %in : f32
        linalg.yield %p0 : f32
      } -> tensor<2x64x32xf32>
      %c = tensor.collapse_shape %n [[0, 1], [2]] : tensor<2x64x32xf32> into tensor<128x32xf32>
      fusion.yield %c : tensor<128x32xf32>
    }
    %2 = fusion.group vertical (%x = %arg0 : tensor<2x64x32xf32>) -> tensor<2x2048xf32> {
      %zero = arith.constant 0.000000e+00 : f32
      %e = tensor.empty() : tensor<2x64x32xf32>
      %e1 = tensor.empty() : tensor<2x64x1xf32>
      %z = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2x64x1xf32>) -> tensor<2x64x1xf32>
      %ss = linalg.generic {indexing_maps = [#map, #row], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<2x64x32xf32>) outs(%z : tensor<2x64x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %p0 = arith.addf %in, %out : f32
        linalg.yield %p0 : f32
      } -> tensor<2x64x1xf32>
      %n = linalg.generic {indexing_maps = [#map, #row, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %ss : tensor<2x64x32xf32>, tensor<2x64x1xf32>) outs(%e : tensor<2x64x32xf32>) {
      ^bb0(%in: f32, %s: f32, %out: f32):
        %p0 = arith.subf %in, %s : f32
        linalg.yield %p0 : f32
      } -> tensor<2x64x32xf32>
      %c = tensor.collapse_shape %n [[0], [1, 2]] : tensor<2x64x32xf32> into tensor<2x2048xf32>
      fusion.yield %c : tensor<2x2048xf32>
    }
    %3 = fusion.group single (%y = %0 : tensor<128x32xf32>) -> tensor<128x32xf32> {
      %e = tensor.empty() : tensor<128x32xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%y : tensor<128x32xf32>) outs(%e : tensor<128x32xf32>) {
      ^bb0(%in: f32, %out: f32):
        %p0 = arith.negf %in : f32
        linalg.yield %p0 : f32
      } -> tensor<128x32xf32>
      fusion.yield %r : tensor<128x32xf32>
    }
    return %3, %1, %2 : tensor<128x32xf32>, tensor<128x32xf32>, tensor<2x2048xf32>
  }

  func.func @value_and_reshape(%arg0: tensor<2x64x32xf32>) -> (tensor<2x64x32xf32>, tensor<128x32xf32>) {
    %0:2 = fusion.group vertical (%x = %arg0 : tensor<2x64x32xf32>) -> (tensor<2x64x32xf32>, tensor<128x32xf32>) {
      %zero = arith.constant 0.000000e+00 : f32
      %e = tensor.empty() : tensor<2x64x32xf32>
      %e1 = tensor.empty() : tensor<2x64x1xf32>
      %z = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2x64x1xf32>) -> tensor<2x64x1xf32>
      %ss = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<2x64x32xf32>) outs(%z : tensor<2x64x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %p0 = arith.mulf %in, %in : f32
        %p1 = arith.addf %p0, %out : f32
        linalg.yield %p1 : f32
      } -> tensor<2x64x1xf32>
      %n = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %ss : tensor<2x64x32xf32>, tensor<2x64x1xf32>) outs(%e : tensor<2x64x32xf32>) {
      ^bb0(%in: f32, %s: f32, %out: f32):
        %p0 = math.rsqrt %s : f32
        %p1 = arith.mulf %in, %p0 : f32
        linalg.yield %p1 : f32
      } -> tensor<2x64x32xf32>
      %c = tensor.collapse_shape %n [[0, 1], [2]] : tensor<2x64x32xf32> into tensor<128x32xf32>
      fusion.yield %n, %c : tensor<2x64x32xf32>, tensor<128x32xf32>
    }
    return %0#0, %0#1 : tensor<2x64x32xf32>, tensor<128x32xf32>
  }
}

// The norm's value yielded twice, as it is (for a residual) and collapsed (for a Linear):
// BERT's LayerNorms, 9 kernels of one op each in every layer before. The collapse is peeled
// all the same; the group yields the value once.
// CHECK-LABEL: func.func @value_and_reshape
// CHECK: %[[N:.*]] = fusion.group vertical {{.*}} -> tensor<2x64x32xf32> {
// CHECK-NOT: tensor.collapse_shape
// CHECK: fusion.yield %{{.*}} : tensor<2x64x32xf32>
// CHECK: %[[C:.*]] = fusion.group single (%{{.*}} = %[[N]] : tensor<2x64x32xf32>) -> tensor<128x32xf32>
// CHECK-NEXT: tensor.collapse_shape
// CHECK: return %[[N]], %[[C]]
