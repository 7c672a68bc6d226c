// RUN: fusec-opt %s --allow-unregistered-dialect --fusion-fold-constants --split-input-file | filecheck %s

// A decoder's packed-sequence check: an arange, a compare, a cumsum (tm_tensor.scan, a
// serial loop kernel if it stayed): the scan is computed here and becomes a constant; the
// op after it stays (it fuses into a kernel of its consumers), and so do the ops before it
// that nothing else reads, until canonicalize erases them.
// CHECK-LABEL: func.func @arange_cumsum(
// CHECK-NOT:     tm_tensor.scan
// CHECK:         %[[C:.+]] = arith.constant dense<{{\[}}[0, 1, 2, 3]]> : tensor<1x4xi64>
// CHECK-NOT:     tm_tensor.scan
// CHECK:         %[[P:.+]] = linalg.generic {{.*}} ins(%[[C]] : tensor<1x4xi64>)
// CHECK:         return %[[P]]
func.func @arange_cumsum() -> tensor<1x4xi64> {
  %c0 = arith.constant 0 : i64
  %e = tensor.empty() : tensor<4xi64>
  %ar = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      outs(%e : tensor<4xi64>) {
  ^bb0(%out: i64):
    %i = linalg.index 0 : index
    %v = arith.index_cast %i : index to i64
    linalg.yield %v : i64
  } -> tensor<4xi64>
  %x = tensor.expand_shape %ar [[0, 1]] output_shape [1, 4] : tensor<4xi64> into tensor<1x4xi64>
  %e2 = tensor.empty() : tensor<1x4xi1>
  %ne = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                        iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<1x4xi64>) outs(%e2 : tensor<1x4xi1>) {
  ^bb0(%in: i64, %out: i1):
    %c = arith.cmpi ne, %in, %c0 : i64
    linalg.yield %c : i1
  } -> tensor<1x4xi1>
  %e3 = tensor.empty() : tensor<1x4xi64>
  %w = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%ne : tensor<1x4xi1>) outs(%e3 : tensor<1x4xi64>) {
  ^bb0(%in: i1, %out: i64):
    %z = arith.extui %in : i1 to i64
    linalg.yield %z : i64
  } -> tensor<1x4xi64>
  %f = linalg.fill ins(%c0 : i64) outs(%e3 : tensor<1x4xi64>) -> tensor<1x4xi64>
  %e4 = tensor.empty() : tensor<1xi64>
  %f1 = linalg.fill ins(%c0 : i64) outs(%e4 : tensor<1xi64>) -> tensor<1xi64>
  %s:2 = "tm_tensor.scan"(%w, %f, %f1) <{dimension = 1 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%a: i64, %b: i64):
    %t = arith.addi %a, %b : i64
    "tm_tensor.yield"(%t) : (i64) -> ()
  }) : (tensor<1x4xi64>, tensor<1x4xi64>, tensor<1xi64>) -> (tensor<1x4xi64>, tensor<1xi64>)
  %one = arith.constant 1 : i64
  %p = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%s#0 : tensor<1x4xi64>) outs(%e3 : tensor<1x4xi64>) {
  ^bb0(%in: i64, %out: i64):
    %q = arith.addi %in, %one : i64
    linalg.yield %q : i64
  } -> tensor<1x4xi64>
  return %p : tensor<1x4xi64>
}

// -----

// A causal mask from positions, gathered through `tensor.extract` at computed indices, then
// `where(mask, 0, -inf)` in bf16: computable here, and kept: computed from indices inside
// the attention kernel it costs registers, not a read per score, and the kernel classifies
// it (its causal bound).
// CHECK-LABEL: func.func @bf16_mask(
// CHECK:         linalg.generic
// CHECK:           tensor.extract
// CHECK:           arith.select
func.func @bf16_mask() -> tensor<3x3xbf16> {
  %pos = arith.constant dense<[0, 1, 2]> : tensor<3xi64>
  %zero = arith.constant 0.0 : bf16
  %ninf = arith.constant 0xFF80 : bf16
  %e = tensor.empty() : tensor<3x3xbf16>
  %m = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      outs(%e : tensor<3x3xbf16>) {
  ^bb0(%out: bf16):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %pi = tensor.extract %pos[%i] : tensor<3xi64>
    %pj = tensor.extract %pos[%j] : tensor<3xi64>
    %keep = arith.cmpi sle, %pj, %pi : i64
    %v = arith.select %keep, %zero, %ninf : bf16
    linalg.yield %v : bf16
  } -> tensor<3x3xbf16>
  return %m : tensor<3x3xbf16>
}

// -----

// What must stay: a generic reading an argument, float arithmetic on f32 (one rounding per
// op is not reproduced by the evaluation here), a weight held as a resource.
// CHECK-LABEL: func.func @kept(
// CHECK-COUNT-2: linalg.generic
// CHECK:         linalg.matmul
func.func @kept(%x: tensor<4xf32>, %a: tensor<2x4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<2x3xf32>) {
  %c = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %e = tensor.empty() : tensor<4xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%x, %c : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %t = arith.addf %in, %in2 : f32
    linalg.yield %t : f32
  } -> tensor<4xf32>
  %third = arith.constant 0.333333343 : f32
  %g = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%c : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.mulf %in, %third : f32
    linalg.yield %t : f32
  } -> tensor<4xf32>
  %w = arith.constant dense_resource<w> : tensor<4x3xf32>
  %z = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<2x3xf32>
  %f = linalg.fill ins(%z : f32) outs(%e2 : tensor<2x3xf32>) -> tensor<2x3xf32>
  %mm = linalg.matmul ins(%a, %w : tensor<2x4xf32>, tensor<4x3xf32>) outs(%f : tensor<2x3xf32>) -> tensor<2x3xf32>
  return %s, %g, %mm : tensor<4xf32>, tensor<4xf32>, tensor<2x3xf32>
}

{-#
  dialect_resources: {
    builtin: {
      w: "0x040000000000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F"
    }
  }
#-}

// -----

// A transpose of a weight (a dense constant, of any size) is the transposed constant,
// moved bit for bit here (upstream's elementwise fusion folded it later, element by
// element: seconds for a tied LM head). A bf16 weight (no numpy dtype) and a transpose of
// an input are left alone.
// CHECK-LABEL: func.func @weight_transposes
// CHECK-DAG: %[[T:.+]] = arith.constant dense<{{\[}}[1.000000e+00, 4.000000e+00], [2.000000e+00, 5.000000e+00], [3.000000e+00, 6.000000e+00]]> : tensor<3x2xf32>
// CHECK-DAG: %[[B:.+]] = linalg.transpose ins(%{{.+}} : tensor<2x3xbf16>)
// CHECK-DAG: %[[X:.+]] = linalg.transpose ins(%arg0 : tensor<2x3xf32>)
// CHECK: return %[[T]], %[[B]], %[[X]]
func.func @weight_transposes(%x: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<3x2xbf16>, tensor<3x2xf32>) {
  %w = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %wb = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xbf16>
  %e = tensor.empty() : tensor<3x2xf32>
  %eb = tensor.empty() : tensor<3x2xbf16>
  %t = linalg.transpose ins(%w : tensor<2x3xf32>) outs(%e : tensor<3x2xf32>) permutation = [1, 0]
  %tb = linalg.transpose ins(%wb : tensor<2x3xbf16>) outs(%eb : tensor<3x2xbf16>) permutation = [1, 0]
  %tx = linalg.transpose ins(%x : tensor<2x3xf32>) outs(%e : tensor<3x2xf32>) permutation = [1, 0]
  return %t, %tb, %tx : tensor<3x2xf32>, tensor<3x2xbf16>, tensor<3x2xf32>
}
