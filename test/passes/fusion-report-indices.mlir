// RUN: fusec-opt %s '--fusion-guard-indices{defer=true}' --split-input-file | filecheck %s --check-prefix=DEFER
// RUN: fusec-opt %s '--fusion-guard-indices{defer=true}' --fusion-report-indices --split-input-file | filecheck %s
// RUN: fusec-opt %s '--fusion-guard-indices{defer=true}' --fusion-report-indices --fusion-report-indices --split-input-file | filecheck %s --check-prefix=TWICE

// Deferred: the read is made safe (the clamped index) and its check recorded, but no call
// is inserted: the payload stays free of effects (tile-and-fuse may erase and merge it).
// DEFER: module attributes {fusion.index_checks = [{loc = {{.*}}, message = "index {index} is out of range for dimension 0 of size 1000
// DEFER-NOT: fusec_index_error
// DEFER-LABEL: func.func @embedding
// DEFER: %[[OK:.+]] = arith.andi
// DEFER-NOT: scf.if
// DEFER: %[[CLAMPED:.+]] = arith.select %[[OK]]
// DEFER: tensor.extract %{{.+}}[%[[CLAMPED]], %{{.+}}] {fusion.guarded, fusion.index_check = array<i64: 1, 0>}

// Reported: before the tagged read, the call under `!ok`, with the unclamped index and the
// check's number; the tag is gone; the declaration is added once.
// CHECK: module attributes {fusion.index_checks
// CHECK-LABEL: func.func @embedding
// CHECK: %[[ROW:.+]] = arith.index_cast
// CHECK: %[[OK:.+]] = arith.andi
// CHECK: %[[CLAMPED:.+]] = arith.select %[[OK]], %[[ROW]], %{{.+}} : index
// CHECK: %[[BAD:.+]] = arith.xori %[[OK]], %{{.+}} : i1
// CHECK: scf.if %[[BAD]] {
// CHECK: %[[CHECK:.+]] = arith.constant 0 : i64
// CHECK: %[[WIDE:.+]] = arith.index_cast %[[ROW]] : index to i64
// CHECK: func.call @fusec_index_error(%[[CHECK]], %[[WIDE]]) : (i64, i64) -> ()
// CHECK: tensor.extract %{{.+}}[%[[CLAMPED]], %{{.+}}] {fusion.guarded} : tensor<1000x8xf32>
// CHECK: func.func private @fusec_index_error(i64, i64)

// Run twice: nothing is reported twice (one call, one declaration).
// TWICE-COUNT-1: func.call @fusec_index_error
// TWICE-NOT: func.call @fusec_index_error
// TWICE-COUNT-1: func.func private @fusec_index_error
// TWICE-NOT: func.func private @fusec_index_error
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

// Negative: without --fusion-guard-indices's tag (a read at the loop's positions, or a read
// guarded and reported already), the pass changes nothing and declares nothing.
// CHECK-NOT: fusec_index_error
// CHECK-LABEL: func.func @positions_only
// CHECK-NOT: scf.if
// CHECK: tensor.extract %{{.+}}[%{{.+}}, %{{.+}}] : tensor<8x4xf32>
// CHECK-NOT: fusec_index_error
#t = affine_map<(d0, d1) -> (d0, d1)>
func.func @positions_only(%x: tensor<8x4xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %r = linalg.generic {indexing_maps = [#t], iterator_types = ["parallel", "parallel"]}
      outs(%e : tensor<4x8xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %v = tensor.extract %x[%j, %i] : tensor<8x4xf32>
    linalg.yield %v : f32
  } -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

// A tagged read whose guard was folded since (canonicalize proved the index in range: the
// select became the index itself): nothing to report, the tag is dropped, nothing declared.
// CHECK-LABEL: func.func @guard_folded_away
// CHECK-NOT: scf.if
// CHECK: tensor.extract %{{.+}}[%{{.+}}] {fusion.guarded} : tensor<8xf32>
// CHECK-NOT: fusec_index_error
#m1 = affine_map<(d0) -> (d0)>
func.func @guard_folded_away(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [#m1], iterator_types = ["parallel"]}
      outs(%e : tensor<8xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %v = tensor.extract %x[%i] {fusion.guarded, fusion.index_check = array<i64: 1, 0>} : tensor<8xf32>
    linalg.yield %v : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
