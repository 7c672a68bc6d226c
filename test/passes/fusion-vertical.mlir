// RUN: fusec-opt %s '--fusion-vertical{device=nvidia-h200}' --split-input-file | filecheck %s

// An elementwise chain becomes one group; no intermediate is left outside.
// CHECK-LABEL: func.func @chain
// CHECK: %[[G:[0-9]+]] = fusion.group vertical
// CHECK-SAME: fusion.launches_saved = 2
// CHECK-SAME: fusion.tile_dims = [0, 1]
// CHECK: linalg.add
// CHECK: linalg.exp
// CHECK: linalg.mul
// CHECK: fusion.yield
// CHECK-NOT: linalg.
// CHECK: return %[[G]]
func.func @chain(%a: tensor<64x128xf32>, %b: tensor<64x128xf32>) -> tensor<64x128xf32> {
  %e = tensor.empty() : tensor<64x128xf32>
  %0 = linalg.add ins(%a, %b : tensor<64x128xf32>, tensor<64x128xf32>) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
  %1 = linalg.exp ins(%0 : tensor<64x128xf32>) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
  %2 = linalg.mul ins(%1, %a : tensor<64x128xf32>, tensor<64x128xf32>) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
  return %2 : tensor<64x128xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
#map2 = affine_map<(d0, d1) -> (d0, 0)>
// Softmax as torch-mlir emits it: max-reduce (with argmax), sub, exp, sum-reduce, div.
// CHECK-LABEL: func.func @softmax
// CHECK: %[[G:[0-9]+]] = fusion.group vertical
// CHECK-SAME: fusion.bytes_fused = 65536
// CHECK-SAME: fusion.tile_dims = [0]
// CHECK-NOT: fusion.refused
// CHECK-COUNT-2: linalg.fill
// CHECK: tensor.expand_shape
// CHECK: math.exp
// CHECK: linalg.fill
// CHECK: arith.addf
// CHECK: arith.divf
// CHECK: fusion.yield
// CHECK-NOT: linalg.
// CHECK: return %[[G]]
func.func @softmax(%arg0: tensor<64x128xf32>) -> tensor<64x128xf32> {
  %c0_i64 = arith.constant 0 : i64
  %cst = arith.constant 0xFF800000 : f32
  %cst_0 = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<64xi64>
  %1 = linalg.fill ins(%c0_i64 : i64) outs(%0 : tensor<64xi64>) -> tensor<64xi64>
  %2 = tensor.empty() : tensor<64xf32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<64xf32>) -> tensor<64xf32>
  %4:2 = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<64x128xf32>) outs(%3, %1 : tensor<64xf32>, tensor<64xi64>) {
  ^bb0(%in: f32, %out: f32, %out_1: i64):
    %12 = linalg.index 1 : index
    %13 = arith.index_cast %12 : index to i64
    %14 = arith.maximumf %in, %out : f32
    %15 = arith.cmpf ogt, %in, %out : f32
    %16 = arith.select %15, %13, %out_1 : i64
    linalg.yield %14, %16 : f32, i64
  } -> (tensor<64xf32>, tensor<64xi64>)
  %expanded = tensor.expand_shape %4#0 [[0, 1]] output_shape [64, 1] : tensor<64xf32> into tensor<64x1xf32>
  %5 = tensor.empty() : tensor<64x128xf32>
  %6 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %expanded : tensor<64x128xf32>, tensor<64x1xf32>) outs(%5 : tensor<64x128xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %12 = arith.subf %in, %in_1 : f32
    linalg.yield %12 : f32
  } -> tensor<64x128xf32>
  %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%6 : tensor<64x128xf32>) outs(%5 : tensor<64x128xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = math.exp %in : f32
    linalg.yield %12 : f32
  } -> tensor<64x128xf32>
  %8 = tensor.empty() : tensor<64x1xf32>
  %9 = linalg.fill ins(%cst_0 : f32) outs(%8 : tensor<64x1xf32>) -> tensor<64x1xf32>
  %10 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%7 : tensor<64x128xf32>) outs(%9 : tensor<64x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = arith.addf %in, %out : f32
    linalg.yield %12 : f32
  } -> tensor<64x1xf32>
  %11 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%7, %10 : tensor<64x128xf32>, tensor<64x1xf32>) outs(%5 : tensor<64x128xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %12 = arith.divf %in, %in_1 : f32
    linalg.yield %12 : f32
  } -> tensor<64x128xf32>
  return %11 : tensor<64x128xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d0, 0)>
// The same row over 2^20 elements: the reduced row (4 MB) cannot stay on chip until the
// broadcast consumer reads it again, so the sum is not fused into the division.
// CHECK-LABEL: func.func @softmax_huge_row
// CHECK: %[[SUM:[0-9]+]] = fusion.group vertical
// CHECK: arith.addf
// CHECK: fusion.yield
// CHECK: fusion.group vertical ({{.*}}%[[SUM]] : tensor<4x1xf32>)
// CHECK-SAME: fusion.duplicated = 1
// CHECK-SAME: fusion.refused = ["linalg.generic@{{[0-9:]+}}: huge-axis: reduction over 1048576 elements feeds a broadcast consumer
// CHECK: math.exp
// CHECK: arith.divf
func.func @softmax_huge_row(%x: tensor<4x1048576xf32>) -> tensor<4x1048576xf32> {
  %cst_0 = arith.constant 0.000000e+00 : f32
  %5 = tensor.empty() : tensor<4x1048576xf32>
  %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x1048576xf32>) outs(%5 : tensor<4x1048576xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = math.exp %in : f32
    linalg.yield %12 : f32
  } -> tensor<4x1048576xf32>
  %8 = tensor.empty() : tensor<4x1xf32>
  %9 = linalg.fill ins(%cst_0 : f32) outs(%8 : tensor<4x1xf32>) -> tensor<4x1xf32>
  %10 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%7 : tensor<4x1048576xf32>) outs(%9 : tensor<4x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = arith.addf %in, %out : f32
    linalg.yield %12 : f32
  } -> tensor<4x1xf32>
  %11 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%7, %10 : tensor<4x1048576xf32>, tensor<4x1xf32>) outs(%5 : tensor<4x1048576xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %12 = arith.divf %in, %in_1 : f32
    linalg.yield %12 : f32
  } -> tensor<4x1048576xf32>
  return %11 : tensor<4x1048576xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d0, 0)>
// Two rows of 40000 f32 (156 KB each) are each read by a reduction and again after it: each
// fits in 227 KB of shared memory, both together do not.
// CHECK-LABEL: func.func @two_rows_over_capacity
// CHECK: %[[EXP:[0-9]+]] = linalg.generic
// CHECK: math.exp
// CHECK: fusion.group vertical ({{.*}}%[[EXP]] : tensor<8x40000xf32>)
// CHECK-SAME: fusion.refused = ["linalg.generic@{{[0-9:]+}}: over-capacity: the group would keep 320004 bytes per tile
// CHECK-SAME: fusion.working_set = 160004
func.func @two_rows_over_capacity(%x: tensor<8x40000xf32>) -> tensor<8x40000xf32> {
  %cst_0 = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x40000xf32>
  %a = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<8x40000xf32>) outs(%e : tensor<8x40000xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = math.exp %in : f32
    linalg.yield %12 : f32
  } -> tensor<8x40000xf32>
  %b = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<8x40000xf32>) outs(%e : tensor<8x40000xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = math.sin %in : f32
    linalg.yield %12 : f32
  } -> tensor<8x40000xf32>
  %r0 = tensor.empty() : tensor<8x1xf32>
  %z = linalg.fill ins(%cst_0 : f32) outs(%r0 : tensor<8x1xf32>) -> tensor<8x1xf32>
  %sa = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<8x40000xf32>) outs(%z : tensor<8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = arith.addf %in, %out : f32
    linalg.yield %12 : f32
  } -> tensor<8x1xf32>
  %sb = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%b : tensor<8x40000xf32>) outs(%z : tensor<8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = arith.addf %in, %out : f32
    linalg.yield %12 : f32
  } -> tensor<8x1xf32>
  %y = linalg.generic {indexing_maps = [#map, #map2, #map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%a, %sa, %b, %sb : tensor<8x40000xf32>, tensor<8x1xf32>, tensor<8x40000xf32>, tensor<8x1xf32>) outs(%e : tensor<8x40000xf32>) {
  ^bb0(%in: f32, %in_1: f32, %in_2: f32, %in_3: f32, %out: f32):
    %12 = arith.divf %in, %in_1 : f32
    %13 = arith.divf %in_2, %in_3 : f32
    %14 = arith.addf %12, %13 : f32
    linalg.yield %14 : f32
  } -> tensor<8x40000xf32>
  return %y : tensor<8x40000xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d0, 0)>
// A reduction read by two consumers, one of which comes first: recomputing a reduction in
// the second consumer's kernel costs a full pass, so it is written once by the first.
// CHECK-LABEL: func.func @shared_reduction
// CHECK: %[[S:[0-9]+]] = fusion.group single
// CHECK: linalg.fill
// CHECK: arith.addf
// CHECK: fusion.yield
// CHECK: linalg.generic {{.*}} ins(%[[S]] : tensor<64x1xf32>) {{.*}}fusion.refused = ["linalg.generic@{{[0-9:]+}}: multi-consumer
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[S]] : {{.*}}fusion.refused = ["linalg.generic@{{[0-9:]+}}: multi-consumer: also used by 1 op(s) outside the group (linalg.generic); recomputing this reduction
func.func @shared_reduction(%x: tensor<64x128xf32>) -> (tensor<64x128xf32>, tensor<64x128xf32>) {
  %cst_0 = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<64x128xf32>
  %r0 = tensor.empty() : tensor<64x1xf32>
  %z = linalg.fill ins(%cst_0 : f32) outs(%r0 : tensor<64x1xf32>) -> tensor<64x1xf32>
  %s = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<64x128xf32>) outs(%z : tensor<64x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = arith.addf %in, %out : f32
    linalg.yield %12 : f32
  } -> tensor<64x1xf32>
  %c2 = linalg.generic {indexing_maps = [#map2, #map], iterator_types = ["parallel", "parallel"]} ins(%s : tensor<64x1xf32>) outs(%e : tensor<64x128xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = math.exp %in : f32
    linalg.yield %12 : f32
  } -> tensor<64x128xf32>
  %c1 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%x, %s : tensor<64x128xf32>, tensor<64x1xf32>) outs(%e : tensor<64x128xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %12 = arith.divf %in, %in_1 : f32
    linalg.yield %12 : f32
  } -> tensor<64x128xf32>
  return %c2, %c1 : tensor<64x128xf32>, tensor<64x128xf32>
}

// -----

// A cheap producer read by two kernels is recomputed in the later one instead of being
// written and read back.
// CHECK-LABEL: func.func @shared_cheap
// CHECK: %[[G:[0-9]+]]:2 = fusion.group vertical
// CHECK: linalg.exp
// CHECK: linalg.mul
// CHECK: linalg.add
// CHECK: linalg.add
// CHECK: fusion.yield
// CHECK: return %[[G]]#0, %[[G]]#1
func.func @shared_cheap(%a: tensor<64x128xf32>, %w: tensor<64x128xf32>) -> (tensor<64x128xf32>, tensor<64x128xf32>) {
  %e = tensor.empty() : tensor<64x128xf32>
  %0 = linalg.exp ins(%a : tensor<64x128xf32>) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
  %1 = linalg.mul ins(%0, %w : tensor<64x128xf32>, tensor<64x128xf32>) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
  %2 = linalg.add ins(%0, %w : tensor<64x128xf32>, tensor<64x128xf32>) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
  %3 = linalg.add ins(%2, %1 : tensor<64x128xf32>, tensor<64x128xf32>) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
  return %1, %3 : tensor<64x128xf32>, tensor<64x128xf32>
}

// -----

// Contractions are left to --fusion-epilogue.
// CHECK-LABEL: func.func @matmul_left_alone
// CHECK-NOT: fusion.group
// CHECK: linalg.matmul
// CHECK: linalg.exp {fusion.refused = ["linalg.matmul@{{[0-9:]+}}: not-fusible: contractions are fused by --fusion-epilogue"]}
func.func @matmul_left_alone(%a: tensor<64x32xf32>, %b: tensor<32x16xf32>) -> tensor<64x16xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<64x16xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<64x16xf32>) -> tensor<64x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<64x32xf32>, tensor<32x16xf32>) outs(%f : tensor<64x16xf32>) -> tensor<64x16xf32>
  %r = linalg.exp ins(%m : tensor<64x16xf32>) outs(%e : tensor<64x16xf32>) -> tensor<64x16xf32>
  return %r : tensor<64x16xf32>
}
