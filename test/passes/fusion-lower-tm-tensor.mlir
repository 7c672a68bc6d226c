// RUN: not fusec-opt %s --allow-unregistered-dialect --fusion-lower-tm-tensor --split-input-file 2>/dev/null | filecheck %s
// RUN: not fusec-opt %s --allow-unregistered-dialect --fusion-lower-tm-tensor --split-input-file 2>&1 >/dev/null | filecheck %s --check-prefix=ERR
// RUN: not fusec-opt %s --allow-unregistered-dialect --fusion-lower-tm-tensor --fusion-plan{device=cpu} --split-input-file 2>/dev/null | filecheck %s --check-prefix=PLAN

// scatter_add along dim 1 (index depth 2, dimension_map [0, 1]): one serial kernel, a loop
// over the 12 updates that extracts both index components, adds them to no slice offset
// (scalar updates), and combines with the region (original + update) in place. A negative
// index counts from the end (torch's `y[-1] = v`): index + dim size where it is below 0.
// CHECK-LABEL: func.func @scatter_add
// CHECK: %[[G:.+]] = fusion.group single (%[[U:.+]] = %{{.+}} : tensor<12xf32>, %[[I:.+]] = %{{.+}} : tensor<12x2xi64>, %[[O:.+]] = %{{.+}} : tensor<3x5xf32>) -> tensor<3x5xf32>
// CHECK-SAME: fusion.serial
// CHECK: %[[R:.+]] = scf.for %[[B:.+]] = %{{.+}} to %{{.+}} step %{{.+}} iter_args(%[[T:.+]] = %[[O]]) -> (tensor<3x5xf32>)
// CHECK: %[[UPD:.+]] = tensor.extract %[[U]][%[[B]]]
// CHECK: %[[I0:.+]] = tensor.extract %[[I]][%[[B]], %{{.+}}]
// CHECK: %[[C0:.+]] = arith.index_cast %[[I0]] : i64 to index
// CHECK: %[[N0:.+]] = arith.cmpi slt, %[[C0]], %{{.+}} : index
// CHECK: %[[W0:.+]] = arith.addi %[[C0]], %{{.+}} : index
// CHECK: %[[D0:.+]] = arith.select %[[N0]], %[[W0]], %[[C0]] : index
// CHECK: %[[I1:.+]] = tensor.extract %[[I]][%[[B]], %{{.+}}]
// CHECK: %[[C1:.+]] = arith.index_cast %[[I1]] : i64 to index
// CHECK: %[[D1:.+]] = arith.select %{{.+}}, %{{.+}}, %[[C1]] : index
// CHECK: %[[OLD:.+]] = tensor.extract %[[T]][%[[D0]], %[[D1]]]
// CHECK: %[[NEW:.+]] = arith.addf %[[OLD]], %[[UPD]] : f32
// CHECK: %[[INS:.+]] = tensor.insert %[[NEW]] into %[[T]][%[[D0]], %[[D1]]]
// CHECK: scf.yield %[[INS]]
// CHECK: fusion.yield %[[R]]
// CHECK-NOT: tm_tensor
// CHECK: return %[[G]]
func.func @scatter_add(%upd: tensor<12xf32>, %idx: tensor<12x2xi64>, %orig: tensor<3x5xf32>) -> tensor<3x5xf32> {
  %0 = "tm_tensor.scatter"(%upd, %idx, %orig) <{dimension_map = array<i64: 0, 1>, operandSegmentSizes = array<i32: 2, 1>, unique_indices = false}> ({
  ^bb0(%u: f32, %o: f32):
    %s = arith.addf %o, %u : f32
    "tm_tensor.yield"(%s) : (f32) -> ()
  }) : (tensor<12xf32>, tensor<12x2xi64>, tensor<3x5xf32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}

// -----

// index_put of rows (index depth 1, update slices of 1x4): the slice ivs align with the
// original's trailing dims, and the index is added to the slice offset on dim 0.
// CHECK-LABEL: func.func @index_put_rows
// CHECK: fusion.group single
// CHECK: scf.for %[[B:.+]] = {{.+}} iter_args(%[[T0:.+]] = %{{.+}})
// CHECK: scf.for %[[R:.+]] = {{.+}} iter_args(%[[T1:.+]] = %[[T0]])
// CHECK: scf.for %[[J:.+]] = {{.+}} iter_args(%[[T:.+]] = %[[T1]])
// CHECK: %[[UPD:.+]] = tensor.extract %{{.+}}[%[[B]], %[[R]], %[[J]]]
// CHECK: %[[RAW:.+]] = arith.index_cast
// CHECK: %[[IDX:.+]] = arith.select %{{.+}}, %{{.+}}, %[[RAW]] : index
// CHECK: %[[ROW:.+]] = arith.addi %[[IDX]], %[[R]]
// CHECK: tensor.insert %[[UPD]] into %[[T]][%[[ROW]], %[[J]]]
func.func @index_put_rows(%upd: tensor<3x1x4xf32>, %idx: tensor<3x1xi64>, %orig: tensor<5x4xf32>) -> tensor<5x4xf32> {
  %0 = "tm_tensor.scatter"(%upd, %idx, %orig) <{dimension_map = array<i64: 0>, operandSegmentSizes = array<i32: 2, 1>, unique_indices = false}> ({
  ^bb0(%u: f32, %o: f32):
    "tm_tensor.yield"(%u) : (f32) -> ()
  }) : (tensor<3x1x4xf32>, tensor<3x1xi64>, tensor<5x4xf32>) -> tensor<5x4xf32>
  return %0 : tensor<5x4xf32>
}

// -----

// Inclusive cumsum along dim 1: element 0 copies the input, the others add the previous
// value; the accumulator takes each computed value. Both results are yielded. The running
// value is carried in f64 (as torch's CPU cumsum accumulates), each output rounded once.
// CHECK-LABEL: func.func @cumsum
// CHECK: %[[G:.+]]:2 = fusion.group single
// CHECK: scf.for %[[I:.+]] = {{.+}} iter_args(
// CHECK: scf.for %[[J:.+]] = {{.+}} iter_args(%[[OUT:.+]] = %{{.+}}, %[[ACC:.+]] = %{{.+}}, %[[RV:.+]] = %{{.+}}) -> (tensor<3x5xf32>, tensor<3xf32>, tensor<3xf64>)
// CHECK: %[[FIRST:.+]] = arith.cmpi eq, %[[J]], %{{.+}} : index
// CHECK: scf.if %[[FIRST]]
// CHECK: %[[X:.+]] = tensor.extract %{{.+}}[%[[I]], %[[J]]]
// CHECK: tensor.insert %[[X]] into %[[OUT]][%[[I]], %[[J]]]
// CHECK: %[[X64:.+]] = arith.extf %[[X]] : f32 to f64
// CHECK: tensor.insert %[[X64]] into %[[RV]][%[[I]]]
// CHECK: } else {
// CHECK: %[[Y:.+]] = tensor.extract %{{.+}}[%[[I]], %[[J]]]
// CHECK: %[[PREV:.+]] = tensor.extract %[[RV]][%[[I]]] : tensor<3xf64>
// CHECK: %[[Y64:.+]] = arith.extf %[[Y]] : f32 to f64
// CHECK: %[[S:.+]] = arith.addf %[[PREV]], %[[Y64]] : f64
// CHECK: %[[S32:.+]] = arith.truncf %[[S]] : f64 to f32
// CHECK: tensor.insert %[[S32]] into %[[OUT]][%[[I]], %[[J]]]
// CHECK: tensor.insert %[[S32]] into %[[ACC]][%[[I]]]
// CHECK: tensor.insert %[[S]] into %[[RV]][%[[I]]]
// CHECK: return %[[G]]#0, %[[G]]#1
func.func @cumsum(%x: tensor<3x5xf32>, %out: tensor<3x5xf32>, %acc: tensor<3xf32>) -> (tensor<3x5xf32>, tensor<3xf32>) {
  %0:2 = "tm_tensor.scan"(%x, %out, %acc) <{dimension = 1 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    "tm_tensor.yield"(%s) : (f32) -> ()
  }) : (tensor<3x5xf32>, tensor<3x5xf32>, tensor<3xf32>) -> (tensor<3x5xf32>, tensor<3xf32>)
  return %0#0, %0#1 : tensor<3x5xf32>, tensor<3xf32>
}

// -----

// The fills that only initialise the scan's output and accumulator join its kernel; a fill
// that something else also reads stays outside (an input of the group).
// CHECK-LABEL: func.func @fills_join_the_kernel
// CHECK: %[[SHARED:.+]] = linalg.fill
// CHECK: fusion.group single (%[[X:.+]] = %{{.+}} : tensor<3x5xf32>, %[[S:.+]] = %[[SHARED]] : tensor<3x5xf32>)
// CHECK: %[[ACC:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<3xf32>)
// CHECK-NOT: linalg.fill
// CHECK: scf.for {{.+}} iter_args(%{{.+}} = %[[S]], %{{.+}} = %[[ACC]],
// CHECK: fusion.yield
// CHECK: linalg.add
func.func @fills_join_the_kernel(%x: tensor<3x5xf32>) -> (tensor<3x5xf32>, tensor<3x5xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<3x5xf32>
  %out = linalg.fill ins(%zero : f32) outs(%e : tensor<3x5xf32>) -> tensor<3x5xf32>
  %ea = tensor.empty() : tensor<3xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%ea : tensor<3xf32>) -> tensor<3xf32>
  %0:2 = "tm_tensor.scan"(%x, %out, %acc) <{dimension = 1 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    "tm_tensor.yield"(%s) : (f32) -> ()
  }) : (tensor<3x5xf32>, tensor<3x5xf32>, tensor<3xf32>) -> (tensor<3x5xf32>, tensor<3xf32>)
  %1 = linalg.add ins(%0#0, %out : tensor<3x5xf32>, tensor<3x5xf32>) outs(%e : tensor<3x5xf32>) -> tensor<3x5xf32>
  return %0#0, %1 : tensor<3x5xf32>, tensor<3x5xf32>
}

// -----

// Exclusive scan: element 0 is the accumulator's value, the others combine the previous
// output with the previous input.
// CHECK-LABEL: func.func @exclusive_scan
// CHECK: scf.for %[[J:.+]] = {{.+}} iter_args(%[[OUT:.+]] = %{{.+}}, %[[ACC:.+]] = %{{.+}})
// CHECK: scf.if
// CHECK: %[[A:.+]] = tensor.extract %[[ACC]][]
// CHECK: tensor.insert %[[A]] into %[[OUT]][%[[J]]]
// CHECK: } else {
// CHECK: %[[PJ:.+]] = arith.subi %[[J]]
// CHECK: tensor.extract %[[OUT]][%[[PJ]]]
// CHECK: tensor.extract %{{.+}}[%[[PJ]]]
// CHECK: arith.muli
func.func @exclusive_scan(%x: tensor<6xi64>, %out: tensor<6xi64>, %acc: tensor<i64>) -> tensor<6xi64> {
  %0:2 = "tm_tensor.scan"(%x, %out, %acc) <{dimension = 0 : i64, inclusive = false, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%a: i64, %b: i64):
    %s = arith.muli %a, %b : i64
    "tm_tensor.yield"(%s) : (i64) -> ()
  }) : (tensor<6xi64>, tensor<6xi64>, tensor<i64>) -> (tensor<6xi64>, tensor<i64>)
  return %0#0 : tensor<6xi64>
}

// -----

// Sort of values and their indices along dim 1 (5 per row): a stable merge sort, 3 passes
// of merging runs of 1, 2, 4 into fresh tensors in turns, the first reading the operands.
// A merge step compares the heads of both runs with the comparator region and takes from
// the left run when it says so (or the right run is done), in both operands.
// CHECK-LABEL: func.func @sort
// CHECK: %[[G:.+]]:2 = fusion.group single (%[[X:.+]] = %{{.+}} : tensor<3x5xf32>, %[[I:.+]] = %{{.+}} : tensor<3x5xi64>)
// CHECK: scf.for %[[ROW:.+]] = %{{.+}} to %{{.+}} step %{{.+}} iter_args(
// CHECK: %[[P0:.+]]:2 = scf.for %[[RN:.+]] = %{{.+}} to %{{.+}} step
// CHECK: %[[LO:.+]] = arith.muli %[[RN]], %[[C2:.+]] : index
// CHECK: scf.for %[[K:.+]] = %[[LO]] to %[[HI:.+]] step %{{.+}} iter_args(%[[DV:.+]] = %{{.+}}, %[[DI:.+]] = %{{.+}}, %[[L:.+]] = %[[LO]], %[[R:.+]] = %[[MID:.+]]) -> (tensor<3x5xf32>, tensor<3x5xi64>, index, index)
// CHECK: %[[A:.+]] = tensor.extract %[[X]][%[[ROW]], %{{.+}}]
// CHECK: %[[KA:.+]] = tensor.extract %[[I]][%[[ROW]], %{{.+}}]
// CHECK: %[[B:.+]] = tensor.extract %[[X]][%[[ROW]], %{{.+}}]
// CHECK: %[[KB:.+]] = tensor.extract %[[I]][%[[ROW]], %{{.+}}]
// A descending sort's `a >= b` takes a NaN as the greatest (`or a is NaN`: torch puts NaNs
// first descending; an ordered compare is false for them and left them in place).
// CHECK: %[[GE:.+]] = arith.cmpf oge, %[[A]], %[[B]]
// CHECK: %[[ANAN:.+]] = arith.cmpf uno, %[[A]], %[[A]]
// CHECK: %[[ORDER:.+]] = arith.ori %[[GE]], %[[ANAN]]
// CHECK: %[[OPEN:.+]] = arith.cmpi slt, %[[L]], %[[MID]]
// CHECK: %[[DONE:.+]] = arith.cmpi sge, %[[R]], %[[HI]]
// CHECK: %[[EITHER:.+]] = arith.ori %[[DONE]], %[[ORDER]]
// CHECK: %[[LEFT:.+]] = arith.andi %[[OPEN]], %[[EITHER]]
// CHECK: %[[V:.+]] = arith.select %[[LEFT]], %[[A]], %[[B]]
// CHECK: tensor.insert %[[V]] into %[[DV]][%[[ROW]], %[[K]]]
// CHECK: %[[W:.+]] = arith.select %[[LEFT]], %[[KA]], %[[KB]]
// CHECK: tensor.insert %[[W]] into %[[DI]][%[[ROW]], %[[K]]]
// The second and third passes read what the pass before wrote.
// CHECK: %[[P1:.+]]:2 = scf.for
// CHECK: tensor.extract %[[P0]]#0
// CHECK: scf.for
// CHECK: tensor.extract %[[P1]]#0
// CHECK: return %[[G]]#0, %[[G]]#1
func.func @sort(%x: tensor<3x5xf32>, %i: tensor<3x5xi64>) -> (tensor<3x5xf32>, tensor<3x5xi64>) {
  %0:2 = "tm_tensor.sort"(%x, %i) <{dimension = 1 : i64, operandSegmentSizes = array<i32: 0, 2>}> ({
  ^bb0(%a: f32, %b: f32, %c: i64, %d: i64):
    %keep = arith.cmpf oge, %a, %b : f32
    "tm_tensor.yield"(%keep) : (i1) -> ()
  }) : (tensor<3x5xf32>, tensor<3x5xi64>) -> (tensor<3x5xf32>, tensor<3x5xi64>)
  return %0#0, %0#1 : tensor<3x5xf32>, tensor<3x5xi64>
}

// -----

// Top-2 of each row: every element (index from its position) goes through the 2 slots,
// the region applied both ways, ties to the lower index.
// CHECK-LABEL: func.func @topk
// CHECK: fusion.group single
// CHECK: scf.for %[[I:.+]] = {{.+}} iter_args(
// CHECK: scf.for %[[J:.+]] = {{.+}} iter_args(
// CHECK: %[[X:.+]] = tensor.extract %{{.+}}[%[[I]], %[[J]]]
// CHECK: %[[XI:.+]] = arith.index_cast %[[J]] : index to i32
// CHECK: scf.for %[[S:.+]] = %{{.+}} to %{{.+}} step %{{.+}} iter_args(%[[OV:.+]] = %{{.+}}, %[[OI:.+]] = %{{.+}}, %[[CV:.+]] = %[[X]], %[[CI:.+]] = %[[XI]])
// CHECK: %[[SV:.+]] = tensor.extract %[[OV]][%[[I]], %[[S]]]
// CHECK: %[[SI:.+]] = tensor.extract %[[OI]][%[[I]], %[[S]]]
// CHECK: %[[BEFORE:.+]] = arith.cmpf ogt, %[[CV]], %[[SV]]
// CHECK: %[[AFTER:.+]] = arith.cmpf ogt, %[[SV]], %[[CV]]
// CHECK: arith.cmpi eq, %[[BEFORE]], %[[AFTER]]
// CHECK: arith.cmpi slt, %[[CI]], %[[SI]]
// CHECK: arith.select %[[BEFORE]], %[[CV]], %[[SV]]
func.func @topk(%x: tensor<3x5xf32>, %ov: tensor<3x2xf32>, %oi: tensor<3x2xi32>) -> (tensor<3x2xf32>, tensor<3x2xi32>) {
  %0:2 = "tm_tensor.topk"(%x, %ov, %oi) <{dimension = 1 : i64, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%a: f32, %b: f32):
    %gt = arith.cmpf ogt, %a, %b : f32
    "tm_tensor.yield"(%gt) : (i1) -> ()
  }) : (tensor<3x5xf32>, tensor<3x2xf32>, tensor<3x2xi32>) -> (tensor<3x2xf32>, tensor<3x2xi32>)
  return %0#0, %0#1 : tensor<3x2xf32>, tensor<3x2xi32>
}

// -----

// A serial loop nest is one kernel of its own: the fusion planner neither fuses its
// elementwise consumer into it nor merges it horizontally with an independent small kernel
// (which would run it again in every tile of that kernel).
// PLAN-LABEL: func.func @serial_stays_alone
// PLAN: fusion.group single
// PLAN-SAME: fusion.serial
// PLAN-NOT: linalg.
// PLAN: fusion.yield
// PLAN: fusion.group horizontal
// PLAN-NOT: scf.for
// PLAN: linalg.negf
// PLAN: linalg.exp
func.func @serial_stays_alone(%x: tensor<3x5xf32>, %out: tensor<3x5xf32>, %acc: tensor<3xf32>, %y: tensor<4xf32>) -> (tensor<3x5xf32>, tensor<4xf32>) {
  %0:2 = "tm_tensor.scan"(%x, %out, %acc) <{dimension = 1 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    "tm_tensor.yield"(%s) : (f32) -> ()
  }) : (tensor<3x5xf32>, tensor<3x5xf32>, tensor<3xf32>) -> (tensor<3x5xf32>, tensor<3xf32>)
  %e = tensor.empty() : tensor<3x5xf32>
  %n = linalg.negf ins(%0#0 : tensor<3x5xf32>) outs(%e : tensor<3x5xf32>) -> tensor<3x5xf32>
  %e2 = tensor.empty() : tensor<4xf32>
  %ex = linalg.exp ins(%y : tensor<4xf32>) outs(%e2 : tensor<4xf32>) -> tensor<4xf32>
  return %n, %ex : tensor<3x5xf32>, tensor<4xf32>
}

// -----

// A TMTensor op fusec does not lower is an error naming it, at its location.
func.func @attention(%q: tensor<1x4x8xf32>, %k: tensor<1x4x8xf32>, %v: tensor<1x4x8xf32>, %o: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
  // ERR: lower-tm-tensor.mlir:[[@LINE+1]]:8: error: unsupported op 'tm_tensor.attention'; fusec lowers only tm_tensor.scan, tm_tensor.scatter, tm_tensor.sort, tm_tensor.topk of torch-mlir's TMTensor dialect
  %0 = "tm_tensor.attention"(%q, %k, %v, %o) <{operandSegmentSizes = array<i32: 3, 1>}> : (tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  return %0 : tensor<1x4x8xf32>
}

// -----

// A bf16 cumsum: the running value is carried in f32 beside the outputs (an f32 tensor of the
// accumulator's shape), each step adds in f32 and rounds the output once; torch-mlir's
// bf16 region folded in bf16 (65% off over 2048 values near 1).
// CHECK-LABEL: func.func @cumsum_bf16
// CHECK: %[[TOTAL:.+]] = tensor.empty() : tensor<3xf32>
// CHECK: scf.for {{.+}} iter_args({{.+}}, %{{.+}} = %[[TOTAL]])
// CHECK: scf.if
// CHECK: arith.extf %{{.+}} : bf16 to f32
// CHECK: } else {
// CHECK: %[[PREV:.+]] = tensor.extract %{{.+}} : tensor<3xf32>
// CHECK: %[[W:.+]] = arith.extf %{{.+}} : bf16 to f32
// CHECK: %[[S:.+]] = arith.addf %[[PREV]], %[[W]] : f32
// CHECK: %[[R:.+]] = arith.truncf %[[S]] : f32 to bf16
// CHECK: tensor.insert %[[R]] into
// CHECK: tensor.insert %[[R]] into
// CHECK: tensor.insert %[[S]] into
func.func @cumsum_bf16(%x: tensor<3x5xbf16>, %out: tensor<3x5xbf16>, %acc: tensor<3xbf16>) -> (tensor<3x5xbf16>, tensor<3xbf16>) {
  %0:2 = "tm_tensor.scan"(%x, %out, %acc) <{dimension = 1 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%a: bf16, %b: bf16):
    %s = arith.addf %a, %b : bf16
    "tm_tensor.yield"(%s) : (bf16) -> ()
  }) : (tensor<3x5xbf16>, tensor<3x5xbf16>, tensor<3xbf16>) -> (tensor<3x5xbf16>, tensor<3xbf16>)
  return %0#0, %0#1 : tensor<3x5xbf16>, tensor<3xbf16>
}
