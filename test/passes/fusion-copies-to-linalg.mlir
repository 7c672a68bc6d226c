// RUN: fusec-opt %s --fusion-copies-to-linalg | filecheck %s

// A strided memref.copy would need MLIR's runtime (memrefCopy); linalg.copy becomes loops.
// CHECK-LABEL: func.func @strided
// CHECK-NOT: memref.copy
// CHECK: linalg.copy {{.*}}ins(%arg0 : memref<2x3xf32>) outs(%arg1 : memref<2x3xf32, strided<[8, 1], offset: 4>>)
func.func @strided(%a: memref<2x3xf32>, %b: memref<2x3xf32, strided<[8, 1], offset: 4>>) {
  memref.copy %a, %b : memref<2x3xf32> to memref<2x3xf32, strided<[8, 1], offset: 4>>
  return
}
