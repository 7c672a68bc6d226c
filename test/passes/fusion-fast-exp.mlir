// RUN: fusec-opt %s --fusion-fast-exp | filecheck %s

// An f32 exp becomes arithmetic (range reduction, polynomial, exponent bits), no libm call;
// an f64 exp is left alone.
// CHECK-LABEL: func.func @f
// CHECK-SAME: (%[[X:.+]]: f32, %[[Y:.+]]: f64)
// CHECK: %[[UNDER:.+]] = arith.cmpf olt, %[[X]]
// CHECK: arith.maximumf %[[X]]
// CHECK: math.floor
// The polynomial in Estrin's form (r^2 and r^4 first), its pairs marked for FMAs:
// CHECK: %[[R2:.+]] = arith.mulf %[[RR:.+]], %[[RR]] : f32
// CHECK: arith.mulf %[[R2]], %[[R2]] : f32
// CHECK: arith.mulf %{{.+}}, %[[RR]] fastmath<contract> : f32
// CHECK: arith.addf {{.+}} fastmath<contract> : f32
// 2^n as two floats: m = n clamped to [-126, 127] by an integer min and max (the top of
// the range and denormals), 2^(n - m) first:
// CHECK: %[[N:.+]] = arith.fptosi
// CHECK: %[[M1:.+]] = arith.minsi %[[N]]
// CHECK: %[[M:.+]] = arith.maxsi %[[M1]]
// CHECK: arith.subi %[[N]], %[[M]] : i32
// CHECK: arith.bitcast %{{.+}} : i32 to f32
// Below ln(2^-150) the second factor is 0 (2^-127's bits): an exact product, no underflow
// in the multiply (a microcode assist on x86, in every masked lane of a softmax):
// CHECK: arith.select %[[UNDER]], %{{.+}}, %[[M]] : i32
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
