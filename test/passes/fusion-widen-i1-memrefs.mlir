// RUN: fusec-opt %s --fusion-widen-i1-memrefs | filecheck %s

// Booleans in memory are bytes: i1 memrefs become i8, loads truncate, stores extend.
// CHECK-LABEL: func.func @mask
// CHECK-SAME: (%[[A:.+]]: memref<4xf32>, %[[M:.+]]: memref<4xi8>, %[[I:.+]]: index)
// CHECK: %[[V:.+]] = memref.subview %[[M]][0] [2] [1] : memref<4xi8> to memref<2xi8, strided<[1]>>
// CHECK: %[[W:.+]] = memref.load %[[V]][%[[I]]] : memref<2xi8, strided<[1]>>
// CHECK: %[[B:.+]] = arith.trunci %[[W]] : i8 to i1
// CHECK: %[[N:.+]] = arith.xori %[[B]]
// CHECK: %[[X:.+]] = arith.extui %[[N]] : i1 to i8
// CHECK: memref.store %[[X]], %[[M]][%[[I]]] : memref<4xi8>
// CHECK-NOT: i1>
func.func @mask(%a: memref<4xf32>, %m: memref<4xi1>, %i: index) {
  %true = arith.constant true
  %v = memref.subview %m[0] [2] [1] : memref<4xi1> to memref<2xi1, strided<[1]>>
  %b = memref.load %v[%i] : memref<2xi1, strided<[1]>>
  %n = arith.xori %b, %true : i1
  memref.store %n, %m[%i] : memref<4xi1>
  return
}
