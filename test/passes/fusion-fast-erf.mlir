// RUN: fusec-opt %s --fusion-fast-erf --split-input-file | filecheck %s

// An f32 erf becomes a clamped rational polynomial in arith ops: no call remains.
// CHECK-LABEL: func.func @erf_f32
// CHECK-NOT: math.erf
// CHECK: arith.maximumf
// CHECK: arith.minimumf
// CHECK: arith.divf
// CHECK: return
func.func @erf_f32(%x: f32) -> f32 {
  %y = math.erf %x : f32
  return %y : f32
}

// -----

// f64 erf is left to libm (the polynomial is only accurate to f32).
// CHECK-LABEL: func.func @erf_f64
// CHECK: math.erf %{{.*}} : f64
// CHECK-NOT: arith.divf
func.func @erf_f64(%x: f64) -> f64 {
  %y = math.erf %x : f64
  return %y : f64
}
