// RUN: fusec-opt %s --fusion-nan-minmax --split-input-file | filecheck %s

// torch-mlir's maximum, minimum and clamp payloads (a compare and a select in one payload)
// become NaN-propagating arith.maximumf / arith.minimumf: maximum(nan, b) was b, and
// clamp(nan, lo, hi) was lo.
// CHECK-LABEL: func.func @torch_minmax
// CHECK: ^bb0(%[[A:.+]]: f32, %[[B:.+]]: f32, %{{.+}}: f32, %{{.+}}: f32, %{{.+}}: f32):
// CHECK-NEXT: %[[MAX:.+]] = arith.maximumf %[[A]], %[[B]] : f32
// CHECK-NEXT: %[[MIN:.+]] = arith.minimumf %[[A]], %[[B]] : f32
// CHECK-NEXT: %[[LO:.+]] = arith.maximumf %[[A]], %{{.+}} : f32
// CHECK-NEXT: %[[HI:.+]] = arith.minimumf %[[LO]], %{{.+}} : f32
// CHECK-NEXT: linalg.yield %[[MAX]], %[[MIN]], %[[HI]] : f32, f32, f32
#id = affine_map<(d0) -> (d0)>
func.func @torch_minmax(%x: tensor<8xf32>, %y: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %lo = arith.constant -0.5 : f32
  %hi = arith.constant 0.5 : f32
  %e = tensor.empty() : tensor<8xf32>
  %r:3 = linalg.generic {indexing_maps = [#id, #id, #id, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %y : tensor<8xf32>, tensor<8xf32>) outs(%e, %e, %e : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  ^bb0(%a: f32, %b: f32, %o0: f32, %o1: f32, %o2: f32):
    %gt = arith.cmpf ogt, %a, %b : f32
    %max = arith.select %gt, %a, %b : f32
    %lt = arith.cmpf olt, %a, %b : f32
    %min = arith.select %lt, %a, %b : f32
    %below = arith.cmpf ult, %a, %lo : f32
    %c1 = arith.select %below, %lo, %a : f32
    %above = arith.cmpf ugt, %c1, %hi : f32
    %c2 = arith.select %above, %hi, %c1 : f32
    linalg.yield %max, %min, %c2 : f32, f32, f32
  } -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %r#0, %r#1, %r#2 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// Negative: ReLU (already passes NaN), a select whose values are not the compare's operands
// in the matching order (a user's choice: where(a > b, b, a)), an integer max, and a compare
// in another payload than its select (a user's `torch.where(a > b, a, b)`, which torch-mlir
// lowers in two payloads) are left alone.
// CHECK-LABEL: func.func @not_minmax
// CHECK-NOT: arith.maximumf
// CHECK-NOT: arith.minimumf
// CHECK: arith.select
#id = affine_map<(d0) -> (d0)>
func.func @not_minmax(%x: tensor<8xf32>, %y: tensor<8xf32>, %n: tensor<8xi32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xi32>, tensor<8xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8xf32>
  %ei = tensor.empty() : tensor<8xi32>
  %eb = tensor.empty() : tensor<8xi1>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %y : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %pos = arith.cmpf ugt, %a, %zero : f32
    %relu = arith.select %pos, %a, %zero : f32
    %gt = arith.cmpf ogt, %a, %b : f32
    %swapped = arith.select %gt, %b, %a : f32
    %s = arith.addf %relu, %swapped : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %i = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%n : tensor<8xi32>) outs(%ei : tensor<8xi32>) {
  ^bb0(%a: i32, %o: i32):
    %c7 = arith.constant 7 : i32
    %gt = arith.cmpi sgt, %a, %c7 : i32
    %m = arith.select %gt, %a, %c7 : i32
    linalg.yield %m : i32
  } -> tensor<8xi32>
  %cmp = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %y : tensor<8xf32>, tensor<8xf32>) outs(%eb : tensor<8xi1>) {
  ^bb0(%a: f32, %b: f32, %o: i1):
    %gt = arith.cmpf ogt, %a, %b : f32
    linalg.yield %gt : i1
  } -> tensor<8xi1>
  %w = linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel"]}
      ins(%cmp, %x, %y : tensor<8xi1>, tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %v = arith.select %c, %a, %b : f32
    linalg.yield %v : f32
  } -> tensor<8xf32>
  return %r, %x, %i, %w : tensor<8xf32>, tensor<8xf32>, tensor<8xi32>, tensor<8xf32>
}

// -----

// torch-mlir's argmax / argmin payloads: the running value by maximumf / minimumf, the index
// moved by a strict compare against it. The compare becomes "larger (smaller) or NaN, while
// the running value is not NaN yet": the first NaN's index, as torch; ties keep the first.
// CHECK-LABEL: func.func @argmax_argmin
// CHECK: ^bb0(%[[X:.+]]: f32, %[[ACC:.+]]: f32, %[[IDX:.+]]: i64):
// CHECK: %[[I:.+]] = arith.index_cast
// CHECK: %[[V:.+]] = arith.maximumf %[[X]], %[[ACC]] : f32
// CHECK-NEXT: %[[U:.+]] = arith.cmpf ugt, %[[X]], %[[ACC]] : f32
// CHECK-NEXT: %[[O:.+]] = arith.cmpf ord, %[[ACC]], %[[ACC]] : f32
// CHECK-NEXT: %[[C:.+]] = arith.andi %[[U]], %[[O]] : i1
// CHECK-NEXT: %[[S:.+]] = arith.select %[[C]], %[[I]], %[[IDX]] : i64
// CHECK-NEXT: linalg.yield %[[V]], %[[S]] : f32, i64
// CHECK: ^bb0(%[[X2:.+]]: f32, %[[ACC2:.+]]: f32, %{{.+}}: i64):
// CHECK: arith.minimumf %[[X2]], %[[ACC2]] : f32
// CHECK-NEXT: arith.cmpf ult, %[[X2]], %[[ACC2]] : f32
// CHECK-NEXT: arith.cmpf ord, %[[ACC2]], %[[ACC2]] : f32
// CHECK-NOT: arith.cmpf olt
#x = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @argmax_argmin(%x: tensor<4x16xf32>) -> (tensor<4xf32>, tensor<4xi64>, tensor<4xi64>) {
  %ninf = arith.constant 0xFF800000 : f32
  %inf = arith.constant 0x7F800000 : f32
  %c0 = arith.constant 0 : i64
  %ev = tensor.empty() : tensor<4xf32>
  %ei = tensor.empty() : tensor<4xi64>
  %v0 = linalg.fill ins(%ninf : f32) outs(%ev : tensor<4xf32>) -> tensor<4xf32>
  %w0 = linalg.fill ins(%inf : f32) outs(%ev : tensor<4xf32>) -> tensor<4xf32>
  %i0 = linalg.fill ins(%c0 : i64) outs(%ei : tensor<4xi64>) -> tensor<4xi64>
  %r:2 = linalg.generic {indexing_maps = [#x, #row, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x16xf32>) outs(%v0, %i0 : tensor<4xf32>, tensor<4xi64>) {
  ^bb0(%in: f32, %acc: f32, %idx: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %m = arith.maximumf %in, %acc : f32
    %gt = arith.cmpf ogt, %in, %acc : f32
    %s = arith.select %gt, %ii, %idx : i64
    linalg.yield %m, %s : f32, i64
  } -> (tensor<4xf32>, tensor<4xi64>)
  %q:2 = linalg.generic {indexing_maps = [#x, #row, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x16xf32>) outs(%w0, %i0 : tensor<4xf32>, tensor<4xi64>) {
  ^bb0(%in: f32, %acc: f32, %idx: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %m = arith.minimumf %in, %acc : f32
    %lt = arith.cmpf olt, %in, %acc : f32
    %s = arith.select %lt, %ii, %idx : i64
    linalg.yield %m, %s : f32, i64
  } -> (tensor<4xf32>, tensor<4xi64>)
  return %r#0, %r#1, %q#1 : tensor<4xf32>, tensor<4xi64>, tensor<4xi64>
}

// -----

// Negative: an index moved by a compare that does not match the running value's combiner
// (ogt beside minimumf: not torch's argmin), or against another value than that combiner's
// accumulator, is left as written.
// CHECK-LABEL: func.func @not_argmax
// CHECK-NOT: arith.cmpf ord
// CHECK-NOT: arith.andi
// CHECK: arith.cmpf ogt
// CHECK: arith.cmpf ogt
#x = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @not_argmax(%x: tensor<4x16xf32>, %y: tensor<4x16xf32>) -> (tensor<4xi64>, tensor<4xi64>) {
  %inf = arith.constant 0x7F800000 : f32
  %c0 = arith.constant 0 : i64
  %ev = tensor.empty() : tensor<4xf32>
  %ei = tensor.empty() : tensor<4xi64>
  %v0 = linalg.fill ins(%inf : f32) outs(%ev : tensor<4xf32>) -> tensor<4xf32>
  %i0 = linalg.fill ins(%c0 : i64) outs(%ei : tensor<4xi64>) -> tensor<4xi64>
  %r:2 = linalg.generic {indexing_maps = [#x, #row, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x16xf32>) outs(%v0, %i0 : tensor<4xf32>, tensor<4xi64>) {
  ^bb0(%in: f32, %acc: f32, %idx: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %m = arith.minimumf %in, %acc : f32
    %gt = arith.cmpf ogt, %in, %acc : f32
    %s = arith.select %gt, %ii, %idx : i64
    linalg.yield %m, %s : f32, i64
  } -> (tensor<4xf32>, tensor<4xi64>)
  %q:2 = linalg.generic {indexing_maps = [#x, #x, #row, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x, %y : tensor<4x16xf32>, tensor<4x16xf32>) outs(%v0, %i0 : tensor<4xf32>, tensor<4xi64>) {
  ^bb0(%in: f32, %other: f32, %acc: f32, %idx: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %m = arith.maximumf %in, %acc : f32
    %gt = arith.cmpf ogt, %in, %other : f32
    %s = arith.select %gt, %ii, %idx : i64
    linalg.yield %m, %s : f32, i64
  } -> (tensor<4xf32>, tensor<4xi64>)
  return %r#1, %q#1 : tensor<4xi64>, tensor<4xi64>
}

// -----

// Max pooling's index (torch-mlir: the first window element equal to the max, from -1): a
// NaN element takes the index (torch's last NaN; a NaN max equals nothing).
// CHECK-LABEL: func.func @pool_index
// CHECK: %[[EQ:.*]] = arith.cmpf oeq, %[[X:.*]], %{{.*}} : f32
// CHECK: %[[IN:.*]] = arith.select %[[EQ]], %[[I:.*]], %{{.*}} : i64
// CHECK: %[[FIRST:.*]] = arith.select %{{.*}}, %[[IN]], %{{.*}} : i64
// CHECK: %[[NAN:.*]] = arith.cmpf uno, %[[X]], %[[X]] : f32
// CHECK: %[[TAKEN:.*]] = arith.select %[[NAN]], %[[I]], %[[FIRST]] : i64
// CHECK: linalg.yield %[[TAKEN]] : i64
// Not: an index kept from -1 by another compare than "equal to the max" (left alone).
// CHECK-LABEL: func.func @not_pool_index
// CHECK-NOT: cmpf uno
#win = affine_map<(d0, d1) -> (d0, d1)>
#out = affine_map<(d0, d1) -> (d0)>
func.func @pool_index(%x: tensor<4x16xf32>, %m: tensor<4xf32>) -> tensor<4xi64> {
  %neg = arith.constant -1 : i64
  %ei = tensor.empty() : tensor<4xi64>
  %i0 = linalg.fill ins(%neg : i64) outs(%ei : tensor<4xi64>) -> tensor<4xi64>
  %r = linalg.generic {indexing_maps = [#win, #out, #out], iterator_types = ["parallel", "reduction"]}
      ins(%x, %m : tensor<4x16xf32>, tensor<4xf32>) outs(%i0 : tensor<4xi64>) {
  ^bb0(%in: f32, %max: f32, %acc: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %eq = arith.cmpf oeq, %in, %max : f32
    %s = arith.select %eq, %ii, %acc : i64
    %first = arith.cmpi eq, %acc, %neg : i64
    %y = arith.select %first, %s, %acc : i64
    linalg.yield %y : i64
  } -> tensor<4xi64>
  return %r : tensor<4xi64>
}
func.func @not_pool_index(%x: tensor<4x16xf32>, %m: tensor<4xf32>) -> tensor<4xi64> {
  %neg = arith.constant -1 : i64
  %ei = tensor.empty() : tensor<4xi64>
  %i0 = linalg.fill ins(%neg : i64) outs(%ei : tensor<4xi64>) -> tensor<4xi64>
  %r = linalg.generic {indexing_maps = [#win, #out, #out], iterator_types = ["parallel", "reduction"]}
      ins(%x, %m : tensor<4x16xf32>, tensor<4xf32>) outs(%i0 : tensor<4xi64>) {
  ^bb0(%in: f32, %max: f32, %acc: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %eq = arith.cmpf ogt, %in, %max : f32
    %s = arith.select %eq, %ii, %acc : i64
    %first = arith.cmpi eq, %acc, %neg : i64
    %y = arith.select %first, %s, %acc : i64
    linalg.yield %y : i64
  } -> tensor<4xi64>
  return %r : tensor<4xi64>
}
