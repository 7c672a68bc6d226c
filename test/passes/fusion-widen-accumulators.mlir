// RUN: fusec-opt %s --fusion-widen-accumulators --canonicalize --split-input-file | filecheck %s

// torch-mlir folds a sum of bf16/f16 values in the 16-bit type; torch accumulates in f32 and
// rounds once. The pass gives such reductions an f32 accumulator and one truncf after.
// A bf16 row sum from a zero fill: the fill is an f32 zero, the payload extends the input
// and adds in f32, and one truncf follows the reduction.
// CHECK-LABEL: func.func @bf16_row_sum
// CHECK: %[[ZERO:.+]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[FILL:.+]] = linalg.fill ins(%[[ZERO]] : f32) outs(%{{.+}} : tensor<64xf32>)
// CHECK: %[[SUM:.+]] = linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}} outs(%[[FILL]] : tensor<64xf32>)
// CHECK: ^bb0(%[[IN:.+]]: bf16, %[[ACC:.+]]: f32):
// CHECK:   %[[W:.+]] = arith.extf %[[IN]] : bf16 to f32
// CHECK:   %[[T:.+]] = arith.addf %[[W]], %[[ACC]] : f32
// CHECK:   linalg.yield %[[T]] : f32
// CHECK: %[[R:.+]] = linalg.generic {{.*}} ins(%[[SUM]] : tensor<64xf32>) outs(%{{.+}} : tensor<64xbf16>)
// CHECK:   arith.truncf %{{.+}} : f32 to bf16
// CHECK: return %[[R]] : tensor<64xbf16>
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @bf16_row_sum(%x: tensor<64x2048xbf16>) -> tensor<64xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<64xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<64xbf16>) -> tensor<64xbf16>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<64x2048xbf16>) outs(%f : tensor<64xbf16>) {
  ^bb0(%in: bf16, %acc: bf16):
    %t = arith.addf %in, %acc : bf16
    linalg.yield %t : bf16
  } -> tensor<64xbf16>
  return %s : tensor<64xbf16>
}

// -----

// An f16 init read from an argument is extended elementwise; every 16-bit op of the payload
// runs in f32 (the input extended once for both uses).
// CHECK-LABEL: func.func @f16_sum_of_squares_from_an_input_init
// CHECK: %[[INIT:.+]] = linalg.generic {{.*}} ins(%arg1 : tensor<8xf16>) outs(%{{.+}} : tensor<8xf32>)
// CHECK:   arith.extf %{{.+}} : f16 to f32
// CHECK: linalg.generic {{.*}} outs(%[[INIT]] : tensor<8xf32>)
// CHECK:   %[[W:.+]] = arith.extf %{{.+}} : f16 to f32
// CHECK-NOT: arith.extf
// CHECK:   %[[SQ:.+]] = arith.mulf %[[W]], %[[W]] : f32
// CHECK:   arith.addf %[[SQ]], %{{.+}} : f32
// CHECK:   arith.truncf %{{.+}} : f32 to f16
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @f16_sum_of_squares_from_an_input_init(%x: tensor<8x16xf16>, %init: tensor<8xf16>) -> tensor<8xf16> {
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x16xf16>) outs(%init : tensor<8xf16>) {
  ^bb0(%in: f16, %acc: f16):
    %sq = arith.mulf %in, %in : f16
    %t = arith.addf %sq, %acc : f16
    linalg.yield %t : f16
  } -> tensor<8xf16>
  return %s : tensor<8xf16>
}

// -----

// Negative: a max is exact in bf16 (nothing rounds): left alone.
// CHECK-LABEL: func.func @bf16_max_is_exact
// CHECK-NOT: f32
// CHECK: arith.maximumf %{{.+}}, %{{.+}} : bf16
// CHECK-NOT: arith.truncf
// CHECK: return
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @bf16_max_is_exact(%x: tensor<64x2048xbf16>, %init: tensor<64xbf16>) -> tensor<64xbf16> {
  %m = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<64x2048xbf16>) outs(%init : tensor<64xbf16>) {
  ^bb0(%in: bf16, %acc: bf16):
    %t = arith.maximumf %in, %acc : bf16
    linalg.yield %t : bf16
  } -> tensor<64xbf16>
  return %m : tensor<64xbf16>
}

// -----

// Negative: an f32 sum already accumulates in f32, and an elementwise bf16 op rounds once:
// both are left alone.
// CHECK-LABEL: func.func @f32_sum_and_bf16_elementwise
// CHECK-NOT: arith.extf
// CHECK-NOT: arith.truncf
// CHECK: arith.addf %{{.+}}, %{{.+}} : bf16
// CHECK-NOT: arith.truncf
// CHECK: return
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @f32_sum_and_bf16_elementwise(%x: tensor<64x2048xf32>, %init: tensor<64xf32>, %y: tensor<64x2048xbf16>) -> (tensor<64xf32>, tensor<64x2048xbf16>) {
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<64x2048xf32>) outs(%init : tensor<64xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %t = arith.addf %in, %acc : f32
    linalg.yield %t : f32
  } -> tensor<64xf32>
  %e = tensor.empty() : tensor<64x2048xbf16>
  %d = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : tensor<64x2048xbf16>) outs(%e : tensor<64x2048xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %t = arith.addf %in, %in : bf16
    linalg.yield %t : bf16
  } -> tensor<64x2048xbf16>
  return %s, %d : tensor<64xf32>, tensor<64x2048xbf16>
}
