// RUN: fusec-opt %s --fusion-drop-asserts --canonicalize --split-input-file | filecheck %s

// torch-mlir's bounds check inside an embedding-style gather is dropped (a kernel cannot
// report it); the count is recorded on the module, and the gather itself is untouched.
// CHECK: module attributes {fusion.asserts_dropped = 1 : i64}
// CHECK-LABEL: func.func @gather
// CHECK-NOT: cf.assert
// CHECK: linalg.generic
// CHECK: tensor.extract
func.func @gather(%table: tensor<50x16xf32>, %idx: tensor<4xi64>) -> tensor<4x16xf32> {
  %c50 = arith.constant 50 : i64
  %e = tensor.empty() : tensor<4x16xf32>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%idx : tensor<4xi64>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%i: i64, %out: f32):
    %ok = arith.cmpi slt, %i, %c50 : i64
    cf.assert %ok, "index must be smaller than dim size"
    %row = arith.index_cast %i : i64 to index
    %col = linalg.index 1 : index
    %v = tensor.extract %table[%row, %col] : tensor<50x16xf32>
    linalg.yield %v : f32
  } -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

// Nothing to drop: the module is left as it was, with no attribute.
// CHECK-NOT: fusion.asserts_dropped
// CHECK-LABEL: func.func @none
func.func @none(%a: tensor<4xf32>) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}
