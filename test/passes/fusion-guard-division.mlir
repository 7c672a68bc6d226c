// RUN: fusec-opt %s --fusion-guard-division --split-input-file | filecheck %s
// RUN: fusec-opt %s '--fusion-guard-division{defer=true}' --split-input-file | filecheck %s --check-prefix=DEFER

// An integer division and a remainder by a tensor's values (x // y, x % y): each divisor is
// replaced by 1 where it is 0 (the kernel never traps: SIGFPE on x86) and the failure is
// reported as an index check's is, with a check of its own (the runtime raises
// ZeroDivisionError for its message). A signed division by -1 traps too, for INT_MIN (the
// quotient overflows): it divides by 1 and takes 0 - x instead (wrapping: INT_MIN // -1 is
// INT_MIN, as torch gives), a remainder by -1 is 0. The division by the constant 4 is left
// alone.
// CHECK: module attributes {fusion.index_checks = [{loc = {{.*}}, message = "integer division by {index} (arith.divsi: torch raises ZeroDivisionError)"}, {loc = {{.*}}, message = "integer division by {index} (arith.remsi: torch raises ZeroDivisionError)"}]}
// CHECK-LABEL: func.func @divide
// CHECK: ^bb0(%[[A:.+]]: i64, %[[B:.+]]: i64, %{{.+}}: i64):
// CHECK: %[[M1:.+]] = arith.cmpi eq, %[[B]], %{{.+}} : i64
// CHECK: %[[B1:.+]] = arith.select %[[M1]], %{{.+}}, %[[B]] : i64
// CHECK: %[[NZ:.+]] = arith.cmpi ne, %[[B1]], %[[ZERO:.+]] : i64
// CHECK: scf.if %{{.+}} {
// CHECK: func.call @fusec_index_error(%{{.+}}, %[[B1]]) : (i64, i64) -> ()
// CHECK: %[[SAFE:.+]] = arith.select %[[NZ]], %[[B1]], %{{.+}} : i64
// CHECK: %[[Q0:.+]] = arith.divsi %[[A]], %[[SAFE]] {fusion.guarded} : i64
// CHECK: %[[NEG:.+]] = arith.subi %{{.+}}, %[[A]] : i64
// CHECK: %[[Q:.+]] = arith.select %[[M1]], %[[NEG]], %[[Q0]] : i64
// CHECK: %[[M2:.+]] = arith.cmpi eq, %[[B]], %{{.+}} : i64
// CHECK: %[[B2:.+]] = arith.select %[[M2]], %{{.+}}, %[[B]] : i64
// CHECK: %[[NZ2:.+]] = arith.cmpi ne, %[[B2]], %{{.+}} : i64
// CHECK: func.call @fusec_index_error
// CHECK: %[[SAFE2:.+]] = arith.select %[[NZ2]], %[[B2]], %{{.+}} : i64
// CHECK: %[[R0:.+]] = arith.remsi %[[Q]], %[[SAFE2]] {fusion.guarded} : i64
// CHECK: arith.select %[[M2]], %{{.+}}, %[[R0]] : i64
// CHECK-NOT: fusion.guarded
// CHECK: arith.divsi %{{.+}}, %{{.+}} : i64
// CHECK: func.func private @fusec_index_error(i64, i64)
// Deferred: no report here, the guarded op tagged with its operand and check for
// --fusion-report-indices.
// DEFER-LABEL: func.func @divide
// DEFER-NOT: scf.if
// DEFER: arith.divsi %{{.+}}, %{{.+}} {fusion.guarded, fusion.index_check = array<i64: 1, 0>} : i64
// DEFER: arith.remsi %{{.+}}, %{{.+}} {fusion.guarded, fusion.index_check = array<i64: 1, 1>} : i64
#id = affine_map<(d0) -> (d0)>
func.func @divide(%x: tensor<8xi64>, %y: tensor<8xi64>) -> tensor<8xi64> {
  %c4 = arith.constant 4 : i64
  %e = tensor.empty() : tensor<8xi64>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %y : tensor<8xi64>, tensor<8xi64>) outs(%e : tensor<8xi64>) {
  ^bb0(%a: i64, %b: i64, %out: i64):
    %q = arith.divsi %a, %b : i64
    %m = arith.remsi %q, %b : i64
    %k = arith.divsi %m, %c4 : i64
    linalg.yield %k : i64
  } -> tensor<8xi64>
  return %r : tensor<8xi64>
}

// -----

// Negative: float division (no trap: torch gives inf / nan) and divisions by non-zero
// constants are not guarded; nothing is declared.
// CHECK-NOT: fusion.index_checks
// CHECK-LABEL: func.func @no_guard
// CHECK-NOT: arith.cmpi
// CHECK-NOT: fusion.guarded
// CHECK-NOT: fusec_index_error
#id = affine_map<(d0) -> (d0)>
func.func @no_guard(%x: tensor<8xf32>, %y: tensor<8xf32>, %n: tensor<8xi32>) -> (tensor<8xf32>, tensor<8xi32>) {
  %c3 = arith.constant -3 : i32
  %e = tensor.empty() : tensor<8xf32>
  %ei = tensor.empty() : tensor<8xi32>
  %f = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %y : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %q = arith.divf %a, %b : f32
    linalg.yield %q : f32
  } -> tensor<8xf32>
  %i = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%n : tensor<8xi32>) outs(%ei : tensor<8xi32>) {
  ^bb0(%a: i32, %out: i32):
    %q = arith.floordivsi %a, %c3 : i32
    %r = arith.remsi %q, %c3 : i32
    linalg.yield %r : i32
  } -> tensor<8xi32>
  return %f, %i : tensor<8xf32>, tensor<8xi32>
}

// -----

// A division by the constant -1 (`x // -1`): no zero to report, but INT_MIN would trap: the
// divisor becomes 1 and the quotient 0 - x. No check is declared.
// CHECK-NOT: fusion.index_checks
// CHECK-LABEL: func.func @by_minus_one
// CHECK: %[[M:.+]] = arith.cmpi eq, %{{.+}}, %{{.+}} : i32
// CHECK: %[[ONE:.+]] = arith.select %[[M]], %{{.+}}, %{{.+}} : i32
// CHECK: %[[Q:.+]] = arith.floordivsi %{{.+}}, %[[ONE]] {fusion.guarded} : i32
// CHECK: arith.select %[[M]], %{{.+}}, %[[Q]] : i32
// CHECK-NOT: fusec_index_error
#id = affine_map<(d0) -> (d0)>
func.func @by_minus_one(%x: tensor<8xi32>) -> tensor<8xi32> {
  %m1 = arith.constant -1 : i32
  %e = tensor.empty() : tensor<8xi32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<8xi32>) outs(%e : tensor<8xi32>) {
  ^bb0(%a: i32, %out: i32):
    %q = arith.floordivsi %a, %m1 : i32
    linalg.yield %q : i32
  } -> tensor<8xi32>
  return %r : tensor<8xi32>
}

// -----

// A divisor read from a constant tensor of zeros (`x // 0` as torch-mlir imports it) reports
// at once even when deferred: canonicalization folds x // select(0 != 0, 0, 1) to x, and a
// deferred tag on the division was folded away with it (x // 0 returned x, no error).
// CHECK-LABEL: func.func @by_constant_zero
// CHECK: func.call @fusec_index_error
// DEFER-LABEL: func.func @by_constant_zero
// DEFER: scf.if
// DEFER: func.call @fusec_index_error
// DEFER: arith.divsi %{{.+}}, %{{.+}} {fusion.guarded} : i64
// DEFER-NOT: fusion.index_check =
#zid = affine_map<(d0) -> (d0)>
#zscalar = affine_map<(d0) -> ()>
func.func @by_constant_zero(%x: tensor<8xi64>) -> tensor<8xi64> {
  %zero = arith.constant dense<0> : tensor<i64>
  %e = tensor.empty() : tensor<8xi64>
  %r = linalg.generic {indexing_maps = [#zid, #zscalar, #zid], iterator_types = ["parallel"]}
      ins(%x, %zero : tensor<8xi64>, tensor<i64>) outs(%e : tensor<8xi64>) {
  ^bb0(%a: i64, %b: i64, %out: i64):
    %q = arith.divsi %a, %b : i64
    linalg.yield %q : i64
  } -> tensor<8xi64>
  return %r : tensor<8xi64>
}
