// RUN: fusec-opt %s --fusion-guard-indices --split-input-file | filecheck %s
// RUN: fusec-opt %s '--fusion-guard-indices{report=false}' --split-input-file | filecheck %s --check-prefix=NOREPORT

// An embedding lookup: the row index comes from the input's values. It is checked against
// the table's 1000 rows, replaced by 0 when out of range, and the failure reported with the
// check's number (its position in fusion.index_checks). The column index is the loop's own
// position (linalg.index): in range by construction, not checked.
// CHECK: module attributes {fusion.index_checks = [{loc = {{.*}}, message = "index {index} is out of range for dimension 0 of size 1000 (an indexed read of tensor<1000x8xf32>
// CHECK-LABEL: func.func @embedding
// CHECK: ^bb0(%[[IN:.+]]: i64, %{{.+}}: f32):
// CHECK: %[[ROW:.+]] = arith.index_cast %[[IN]] : i64 to index
// CHECK: %[[COL:.+]] = linalg.index 2 : index
// CHECK: %[[GE:.+]] = arith.cmpi sge, %[[ROW]], %[[ZERO:.+]] : index
// CHECK: %[[LT:.+]] = arith.cmpi slt, %[[ROW]], %{{.+}} : index
// CHECK: %[[OK:.+]] = arith.andi %[[GE]], %[[LT]] : i1
// CHECK: %[[BAD:.+]] = arith.xori %[[OK]], %{{.+}} : i1
// CHECK: scf.if %[[BAD]] {
// CHECK: func.call @fusec_index_error(%{{.+}}, %{{.+}}) : (i64, i64) -> ()
// CHECK: %[[CLAMPED:.+]] = arith.select %[[OK]], %[[ROW]], %[[ZERO]] : index
// CHECK: tensor.extract %{{.+}}[%[[CLAMPED]], %[[COL]]] {fusion.guarded} : tensor<1000x8xf32>
// CHECK: func.func private @fusec_index_error(i64, i64)
// NOREPORT-NOT: fusion.index_checks
// NOREPORT-NOT: fusec_index_error
// NOREPORT-LABEL: func.func @embedding
// NOREPORT: %[[OK:.+]] = arith.andi
// NOREPORT-NOT: scf.if
// NOREPORT: %[[CLAMPED:.+]] = arith.select %[[OK]]
// NOREPORT: tensor.extract %{{.+}}[%[[CLAMPED]], %{{.+}}] {fusion.guarded}
#map = affine_map<(d0, d1, d2) -> (d0, d1)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @embedding(%tokens: tensor<4x5xi64>, %table: tensor<1000x8xf32>) -> tensor<4x5x8xf32> {
  %e = tensor.empty() : tensor<4x5x8xf32>
  %r = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%tokens : tensor<4x5xi64>) outs(%e : tensor<4x5x8xf32>) {
  ^bb0(%in: i64, %out: f32):
    %i = arith.index_cast %in : i64 to index
    %j = linalg.index 2 : index
    %v = tensor.extract %table[%i, %j] : tensor<1000x8xf32>
    linalg.yield %v : f32
  } -> tensor<4x5x8xf32>
  return %r : tensor<4x5x8xf32>
}

// -----

// Negative: a read at the loop's own positions (a transpose written with tensor.extract) and
// an access already guarded are left alone; no check, no declaration.
// CHECK-NOT: fusion.index_checks
// CHECK-NOT: fusec_index_error
// CHECK-LABEL: func.func @positions_only
// CHECK-NOT: arith.cmpi
// CHECK: tensor.extract %{{.+}}[%{{.+}}, %{{.+}}] : tensor<8x4xf32>
// CHECK-NOT: arith.cmpi
// CHECK: tensor.extract %{{.+}}[%{{.+}}, %{{.+}}] {fusion.guarded} : tensor<8x4xf32>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @positions_only(%x: tensor<8x4xf32>, %idx: tensor<4x8xi64>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %e = tensor.empty() : tensor<4x8xf32>
  %t = linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]} outs(%e : tensor<4x8xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %v = tensor.extract %x[%j, %i] : tensor<8x4xf32>
    linalg.yield %v : f32
  } -> tensor<4x8xf32>
  %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%idx : tensor<4x8xi64>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: i64, %out: f32):
    %i = arith.index_cast %in : i64 to index
    %j = linalg.index 0 : index
    %v = tensor.extract %x[%i, %j] {fusion.guarded} : tensor<8x4xf32>
    linalg.yield %v : f32
  } -> tensor<4x8xf32>
  return %t, %g : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// A write at an index read from data (a scatter's loop, as --fusion-lower-tm-tensor builds
// it): out of range, the insert is skipped (the tensor passes through) and reported.
// CHECK-LABEL: func.func @scatter_loop
// CHECK: scf.for %{{.+}} = %{{.+}} to %{{.+}} step %{{.+}} iter_args(%[[ACC:.+]] = %{{.+}})
// CHECK: %[[I:.+]] = arith.index_cast
// CHECK: %[[OK:.+]] = arith.andi
// CHECK: scf.if %{{.+}} {
// CHECK: func.call @fusec_index_error
// CHECK: %[[NEW:.+]] = scf.if %[[OK]] -> (tensor<10xf32>) {
// CHECK: %[[INS:.+]] = tensor.insert %{{.+}} into %[[ACC]][%[[I]]] {fusion.guarded} : tensor<10xf32>
// CHECK: scf.yield %[[INS]] : tensor<10xf32>
// CHECK: } else {
// CHECK: scf.yield %[[ACC]] : tensor<10xf32>
// CHECK: scf.yield %[[NEW]] : tensor<10xf32>
func.func @scatter_loop(%dst: tensor<10xf32>, %idx: tensor<3xi64>, %src: tensor<3xf32>) -> tensor<10xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %r = scf.for %k = %c0 to %c3 step %c1 iter_args(%acc = %dst) -> (tensor<10xf32>) {
    %raw = tensor.extract %idx[%k] : tensor<3xi64>
    %i = arith.index_cast %raw : i64 to index
    %v = tensor.extract %src[%k] : tensor<3xf32>
    %n = tensor.insert %v into %acc[%i] : tensor<10xf32>
    scf.yield %n : tensor<10xf32>
  }
  return %r : tensor<10xf32>
}
