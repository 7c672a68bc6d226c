// RUN: fusec-opt %s --fusion-narrow-contraction-operands --canonicalize --split-input-file | filecheck %s

// A matmul of bf16 / f16 values widened to f32 (fusec's SDPA decomposition, a model that
// upcasts before a product) reads the 16-bit values: a product of two bf16 values is exact
// in f32, and the named op widens its operands to the accumulator's type itself.

// Q K^T as the SDPA decomposition imports: both operands widened, K through its transpose
// and the batch collapse. The product reads the bf16 values through the same layout ops,
// keeps its f32 result, and no extf is left.
// CHECK-LABEL: func.func @scores_in_f32
// CHECK-SAME: (%[[Q:.+]]: tensor<1x2x128x64xbf16>, %[[K:.+]]: tensor<1x2x128x64xbf16>)
// CHECK-NOT: arith.extf
// CHECK-DAG: %[[QC:.+]] = tensor.collapse_shape %[[Q]] {{.*}} into tensor<2x128x64xbf16>
// CHECK-DAG: %[[KT:.+]] = linalg.transpose ins(%[[K]] : tensor<1x2x128x64xbf16>) outs(%{{.+}} : tensor<1x2x64x128xbf16>) permutation = [0, 1, 3, 2]
// CHECK-DAG: %[[KC:.+]] = tensor.collapse_shape %[[KT]] {{.*}} into tensor<2x64x128xbf16>
// CHECK: %[[S:.+]] = linalg.batch_matmul ins(%[[QC]], %[[KC]] : tensor<2x128x64xbf16>, tensor<2x64x128xbf16>) outs(%{{.+}} : tensor<2x128x128xf32>)
// CHECK: return %[[S]] : tensor<2x128x128xf32>
#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @scores_in_f32(%q: tensor<1x2x128x64xbf16>, %k: tensor<1x2x128x64xbf16>) -> tensor<2x128x128xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x2x128x64xf32>
  %qw = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%q : tensor<1x2x128x64xbf16>) outs(%e : tensor<1x2x128x64xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<1x2x128x64xf32>
  %kw = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x128x64xbf16>) outs(%e : tensor<1x2x128x64xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<1x2x128x64xf32>
  %te = tensor.empty() : tensor<1x2x64x128xf32>
  %kt = linalg.transpose ins(%kw : tensor<1x2x128x64xf32>) outs(%te : tensor<1x2x64x128xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %qw [[0, 1], [2], [3]] : tensor<1x2x128x64xf32> into tensor<2x128x64xf32>
  %kc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x2x64x128xf32> into tensor<2x64x128xf32>
  %se = tensor.empty() : tensor<2x128x128xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
  %s = linalg.batch_matmul ins(%qc, %kc : tensor<2x128x64xf32>, tensor<2x64x128xf32>) outs(%sf : tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
  return %s : tensor<2x128x128xf32>
}

// -----

// An f16 matmul whose widened operand is also read elsewhere: the matmul reads the f16
// value, the widening stays for its other reader.
// CHECK-LABEL: func.func @widened_value_kept_for_other_users
// CHECK-SAME: (%[[A:.+]]: tensor<16x32xf16>, %[[B:.+]]: tensor<32x8xf16>)
// CHECK: %[[AW:.+]] = linalg.generic {{.*}} ins(%[[A]] : tensor<16x32xf16>)
// CHECK:   arith.extf
// CHECK: %[[M:.+]] = linalg.matmul ins(%[[A]], %[[B]] : tensor<16x32xf16>, tensor<32x8xf16>) outs(%{{.+}} : tensor<16x8xf32>)
// CHECK: return %[[M]], %[[AW]]
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @widened_value_kept_for_other_users(%a: tensor<16x32xf16>, %b: tensor<32x8xf16>) -> (tensor<16x8xf32>, tensor<16x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %ea = tensor.empty() : tensor<16x32xf32>
  %aw = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x32xf16>) outs(%ea : tensor<16x32xf32>) {
  ^bb0(%in: f16, %out: f32):
    %w = arith.extf %in : f16 to f32
    linalg.yield %w : f32
  } -> tensor<16x32xf32>
  %eb = tensor.empty() : tensor<32x8xf32>
  %bw = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%b : tensor<32x8xf16>) outs(%eb : tensor<32x8xf32>) {
  ^bb0(%in: f16, %out: f32):
    %w = arith.extf %in : f16 to f32
    linalg.yield %w : f32
  } -> tensor<32x8xf32>
  %e = tensor.empty() : tensor<16x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  %m = linalg.matmul ins(%aw, %bw : tensor<16x32xf32>, tensor<32x8xf32>) outs(%f : tensor<16x8xf32>) -> tensor<16x8xf32>
  return %m, %aw : tensor<16x8xf32>, tensor<16x32xf32>
}

// -----

// Not narrowed: only one operand is widened (the other is f32 data: a bf16 x f32 product
// is not what the kernels take), so the widening stays.
// CHECK-LABEL: func.func @one_side_widened
// CHECK: arith.extf
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<16x32xf32>, tensor<32x8xf32>)
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @one_side_widened(%a: tensor<16x32xbf16>, %b: tensor<32x8xf32>) -> tensor<16x8xf32> {
  %zero = arith.constant 0.0 : f32
  %ea = tensor.empty() : tensor<16x32xf32>
  %aw = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x32xbf16>) outs(%ea : tensor<16x32xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<16x32xf32>
  %e = tensor.empty() : tensor<16x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  %m = linalg.matmul ins(%aw, %b : tensor<16x32xf32>, tensor<32x8xf32>) outs(%f : tensor<16x8xf32>) -> tensor<16x8xf32>
  return %m : tensor<16x8xf32>
}

// -----

// Not narrowed: operands of two 16-bit types (bf16 and f16), an f64 product (the kernels'
// accumulator is f32), and a "widening" that also computes (extf then a multiply: the
// operand is not the 16-bit value).
// CHECK-LABEL: func.func @not_plain_widenings
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<16x32xf32>, tensor<32x8xf32>)
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<16x32xf64>, tensor<32x8xf64>)
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<16x32xf32>, tensor<32x8xf32>)
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @not_plain_widenings(%a: tensor<16x32xbf16>, %b: tensor<32x8xf16>, %c: tensor<32x8xbf16>) -> (tensor<16x8xf32>, tensor<16x8xf64>, tensor<16x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %zero64 = arith.constant 0.0 : f64
  %two = arith.constant 2.0 : f32
  %ea = tensor.empty() : tensor<16x32xf32>
  %aw = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x32xbf16>) outs(%ea : tensor<16x32xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<16x32xf32>
  %eb = tensor.empty() : tensor<32x8xf32>
  %bw = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%b : tensor<32x8xf16>) outs(%eb : tensor<32x8xf32>) {
  ^bb0(%in: f16, %out: f32):
    %w = arith.extf %in : f16 to f32
    linalg.yield %w : f32
  } -> tensor<32x8xf32>
  %e = tensor.empty() : tensor<16x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  %mixed = linalg.matmul ins(%aw, %bw : tensor<16x32xf32>, tensor<32x8xf32>) outs(%f : tensor<16x8xf32>) -> tensor<16x8xf32>
  %ea64 = tensor.empty() : tensor<16x32xf64>
  %aw64 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x32xbf16>) outs(%ea64 : tensor<16x32xf64>) {
  ^bb0(%in: bf16, %out: f64):
    %w = arith.extf %in : bf16 to f64
    linalg.yield %w : f64
  } -> tensor<16x32xf64>
  %eb64 = tensor.empty() : tensor<32x8xf64>
  %cw64 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%c : tensor<32x8xbf16>) outs(%eb64 : tensor<32x8xf64>) {
  ^bb0(%in: bf16, %out: f64):
    %w = arith.extf %in : bf16 to f64
    linalg.yield %w : f64
  } -> tensor<32x8xf64>
  %e64 = tensor.empty() : tensor<16x8xf64>
  %f64 = linalg.fill ins(%zero64 : f64) outs(%e64 : tensor<16x8xf64>) -> tensor<16x8xf64>
  %wide = linalg.matmul ins(%aw64, %cw64 : tensor<16x32xf64>, tensor<32x8xf64>) outs(%f64 : tensor<16x8xf64>) -> tensor<16x8xf64>
  %cs = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%c : tensor<32x8xbf16>) outs(%eb : tensor<32x8xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    %s = arith.mulf %w, %two : f32
    linalg.yield %s : f32
  } -> tensor<32x8xf32>
  %scaled = linalg.matmul ins(%aw, %cs : tensor<16x32xf32>, tensor<32x8xf32>) outs(%f : tensor<16x8xf32>) -> tensor<16x8xf32>
  return %mixed, %wide, %scaled : tensor<16x8xf32>, tensor<16x8xf64>, tensor<16x8xf32>
}
