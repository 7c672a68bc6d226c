// RUN: fusec-opt %s --fusion-reduction --split-input-file | filecheck %s

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
// A row sum and a row max of the same input: one reduction with two results, one read of %x.
// CHECK-LABEL: func.func @sum_and_max
// CHECK: %[[R:[0-9]+]]:2 = linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "reduction"]
// CHECK-SAME: ins(%arg0 : tensor<64x256xf32>)
// CHECK-SAME: fusion.siblings = ["linalg.generic@{{[0-9:]+}}", "linalg.generic@{{[0-9:]+}}"]
// CHECK: arith.addf
// CHECK: arith.maximumf
// CHECK: linalg.yield
// CHECK-NOT: linalg.generic
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @sum_and_max(%x: tensor<64x256xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<64xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<64xf32>) -> tensor<64xf32>
  %n = linalg.fill ins(%ninf : f32) outs(%e : tensor<64xf32>) -> tensor<64xf32>
  %s = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<64x256xf32>) outs(%z : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<64xf32>
  %m = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<64x256xf32>) outs(%n : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.maximumf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<64xf32>
  return %s, %m : tensor<64xf32>, tensor<64xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
// The second reduction reads the first one's result (a variance after its mean): they are
// not siblings, and stay two ops.
// CHECK-LABEL: func.func @dependent
// CHECK-NOT: fusion.siblings
// CHECK-COUNT-3: linalg.generic
// CHECK: return
func.func @dependent(%x: tensor<64x256xf32>) -> tensor<64xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<64xf32>
  %e2 = tensor.empty() : tensor<64x256xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<64xf32>) -> tensor<64xf32>
  %s = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<64x256xf32>) outs(%z : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<64xf32>
  %c = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%x, %s : tensor<64x256xf32>, tensor<64xf32>) outs(%e2 : tensor<64x256xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %0 = arith.subf %in, %in_1 : f32
    %1 = arith.mulf %0, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<64x256xf32>
  %v = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%c : tensor<64x256xf32>) outs(%z : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<64xf32>
  return %v : tensor<64xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
#mapt = affine_map<(d0, d1) -> (d1, d0)>
#map2 = affine_map<(d0, d1) -> (d1)>
// Row sums and column sums of the same input: different iteration spaces, not merged.
// CHECK-LABEL: func.func @rows_and_columns
// CHECK-NOT: fusion.siblings
// CHECK: return
func.func @rows_and_columns(%x: tensor<64x256xf32>) -> (tensor<64xf32>, tensor<256xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<64xf32>
  %e1 = tensor.empty() : tensor<256xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<64xf32>) -> tensor<64xf32>
  %z1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<256xf32>) -> tensor<256xf32>
  %s = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<64x256xf32>) outs(%z : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<64xf32>
  %t = linalg.generic {indexing_maps = [#mapt, #map1], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<64x256xf32>) outs(%z1 : tensor<256xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<256xf32>
  return %s, %t : tensor<64xf32>, tensor<256xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
// A use of the first sum sits between the two: it moves after the merged reduction.
// CHECK-LABEL: func.func @user_between
// CHECK: %[[R:[0-9]+]]:2 = linalg.generic
// CHECK-SAME: fusion.siblings
// CHECK: linalg.exp ins(%[[R]]#0
// CHECK: return
func.func @user_between(%x: tensor<64x256xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<64xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<64xf32>) -> tensor<64xf32>
  %n = linalg.fill ins(%ninf : f32) outs(%e : tensor<64xf32>) -> tensor<64xf32>
  %s = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<64x256xf32>) outs(%z : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<64xf32>
  %u = linalg.exp ins(%s : tensor<64xf32>) outs(%e : tensor<64xf32>) -> tensor<64xf32>
  %m = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<64x256xf32>) outs(%n : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.maximumf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<64xf32>
  return %u, %m : tensor<64xf32>, tensor<64xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
// The variance reads the input and the mean (as elementwise fusion leaves LayerNorm): one
// pass would need a one-pass variance, which changes its precision. Refused, with the reason.
// CHECK-LABEL: func.func @mean_then_variance
// CHECK-NOT: fusion.siblings
// CHECK: %[[S:[0-9]+]] = linalg.generic
// CHECK: linalg.generic {{.*}}ins(%arg0, %[[S]] : {{.*}}fusion.refused = ["linalg.generic@{{[0-9:]+}}: sibling-reduction: reduction-precision: it reads that reduction's result
func.func @mean_then_variance(%x: tensor<64x256xf32>) -> tensor<64xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<64xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<64xf32>) -> tensor<64xf32>
  %s = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<64x256xf32>) outs(%z : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<64xf32>
  %v = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "reduction"]} ins(%x, %s : tensor<64x256xf32>, tensor<64xf32>) outs(%z : tensor<64xf32>) {
  ^bb0(%in: f32, %m: f32, %out: f32):
    %0 = arith.subf %in, %m : f32
    %1 = arith.mulf %0, %0 : f32
    %2 = arith.addf %1, %out : f32
    linalg.yield %2 : f32
  } -> tensor<64xf32>
  return %v : tensor<64xf32>
}
