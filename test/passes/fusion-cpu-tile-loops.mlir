// RUN: fusec-opt %s --fusion-cpu-tile-loops --split-input-file | filecheck %s

// The tile loop runs tiles [begin, end) of the 4x8 forall, row-major: the inner forall
// index is the tile number mod 8, the outer one the quotient.
// CHECK-LABEL: func.func private @fusec_kernel_0
// CHECK-SAME: (%[[A:.+]]: memref<8x64xf32>, %[[O:.+]]: memref<8x64xf32>, %[[B:.+]]: index, %[[E:.+]]: index)
// CHECK-SAME: fusion.grid = 32 : i64
// CHECK-NOT: scf.forall
// CHECK: scf.for %[[T:.+]] = %[[B]] to %[[E]] step %{{.+}} {
// CHECK: %[[C8:.+]] = arith.constant 8 : index
// CHECK: %[[J:.+]] = arith.remui %[[T]], %[[C8]]
// CHECK: %[[I:.+]] = arith.divui %[[T]], %[[C8]]
// CHECK: memref.load %[[A]][%[[I]], %[[J]]]
// CHECK: memref.store %{{.+}}, %[[O]][%[[I]], %[[J]]]
func.func private @fusec_kernel_0(%a: memref<8x64xf32>, %o: memref<8x64xf32>) attributes {fusion.grid = 32 : i64, fusion.kind = "single"} {
  %c0 = arith.constant 0 : index
  scf.forall (%i, %j) in (4, 8) {
    %v = memref.load %a[%i, %j] : memref<8x64xf32>
    memref.store %v, %o[%i, %j] : memref<8x64xf32>
  }
  return
}

// -----

// Negative: work outside the forall (the copy) would be redone, racing, by every thread's
// tile range; the kernel is one tile (grid 1) and its forall stays, to become serial loops.
// CHECK-LABEL: func.func private @fusec_kernel_0
// CHECK-SAME: %{{.+}}: index, %{{.+}}: index)
// CHECK-SAME: fusion.grid = 1 : i64
// CHECK: linalg.copy
// CHECK: scf.forall
// CHECK-NOT: scf.for
func.func private @fusec_kernel_0(%a: memref<8xf32>, %o: memref<8xf32>) attributes {fusion.grid = 8 : i64, fusion.kind = "single"} {
  linalg.copy ins(%a : memref<8xf32>) outs(%o : memref<8xf32>)
  scf.forall (%i) in (8) {
    %v = memref.load %a[%i] : memref<8xf32>
    memref.store %v, %o[%i] : memref<8xf32>
  }
  return
}

// -----

// Work outside the tile loop on a buffer the call allocates itself is redone by every call
// but races with nothing: the kernel is still split into tiles.
// CHECK-LABEL: func.func private @fusec_kernel_0
// CHECK-SAME: fusion.grid = 8 : i64
// CHECK: %[[T:.+]] = memref.alloc
// CHECK: linalg.copy {{.*}}outs(%[[T]]
// CHECK: scf.for
// CHECK-NOT: scf.forall
func.func private @fusec_kernel_0(%a: memref<8xf32>, %o: memref<8xf32>) attributes {fusion.grid = 8 : i64, fusion.kind = "single"} {
  %t = memref.alloc() : memref<8xf32>
  linalg.copy ins(%a : memref<8xf32>) outs(%t : memref<8xf32>)
  scf.forall (%i) in (8) {
    %v = memref.load %t[%i] : memref<8xf32>
    memref.store %v, %o[%i] : memref<8xf32>
  }
  return
}
