// RUN: fusec-opt %s --fusion-fast-exp | filecheck %s

// An f32 exp becomes arithmetic (range reduction, polynomial, exponent bits), no libm call;
// an f64 exp is left alone.
// CHECK-LABEL: func.func @f
// CHECK-SAME: (%[[X:.+]]: f32, %[[Y:.+]]: f64)
// CHECK: arith.maximumf %[[X]]
// CHECK: math.floor
// The polynomial in Estrin's form (r^2 and r^4 first), its pairs marked for FMAs:
// CHECK: %[[R2:.+]] = arith.mulf %[[RR:.+]], %[[RR]] : f32
// CHECK: arith.mulf %[[R2]], %[[R2]] : f32
// CHECK: arith.mulf %{{.+}}, %[[RR]] fastmath<contract> : f32
// CHECK: arith.addf {{.+}} fastmath<contract> : f32
// n = 128 by a min, not a compare and two selects:
// CHECK: arith.minimumf %{{.+}}, %{{.+}} : f32
// CHECK: arith.fptosi
// CHECK: arith.shli
// CHECK: arith.bitcast %{{.+}} : i32 to f32
// CHECK-NOT: arith.select
// CHECK: %[[OVER:.+]] = arith.cmpf ogt, %[[X]]
// CHECK: %[[R:.+]] = arith.select %[[OVER]], %{{.+}}, %{{.+}} : f32
// CHECK: %[[D:.+]] = math.exp %[[Y]] : f64
// CHECK: return %[[R]], %[[D]]
func.func @f(%x: f32, %y: f64) -> (f32, f64) {
  %a = math.exp %x : f32
  %b = math.exp %y : f64
  return %a, %b : f32, f64
}
