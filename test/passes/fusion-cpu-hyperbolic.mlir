// RUN: fusec-opt %s --fusion-cpu-hyperbolic | filecheck %s

// f32 tanh: below |x| = 1/4 the odd Taylor series (x + x^3 P(x^2): no cancellation, tanh(1e-8)
// is 1e-8, where (1 - e^-2x) / (1 + e^-2x) gave 0), above it that quotient of exp(-2|x|)
// with x's sign by a select (-0.0 and NaN kept). An f64 tanh becomes a call to the C
// library's `tanh` (declared once per module), not the upstream expansion (which lost
// tanh(1e-17) to 0 in f64 too).
// CHECK-LABEL: func.func @tanh_f32_f64
// CHECK-SAME: (%[[X:.+]]: f32, %[[Y:.+]]: f64)
// CHECK: %[[A:.+]] = math.absf %[[X]] : f32
// CHECK: %[[E:.+]] = math.exp
// CHECK: %[[Q:.+]] = arith.divf
// CHECK: %[[SMALL:.+]] = arith.cmpf olt, %[[A]]
// CHECK: arith.constant -0.333333343 : f32
// CHECK: %[[SERIES:.+]] = arith.addf %[[X]], %{{.+}} : f32
// CHECK: %[[NEG:.+]] = arith.cmpf olt, %[[X]]
// CHECK: %[[SIGNED:.+]] = arith.select %[[NEG]], %{{.+}}, %[[Q]] : f32
// CHECK: %[[T:.+]] = arith.select %[[SMALL]], %[[SERIES]], %[[SIGNED]] : f32
// tanh(-0.0) is -0.0: x itself at a zero.
// CHECK: %[[ZERO:.+]] = arith.cmpf oeq, %[[X]]
// CHECK: %[[R:.+]] = arith.select %[[ZERO]], %[[X]], %[[T]] : f32
// CHECK: %[[D:.+]] = call @tanh(%[[Y]]) : (f64) -> f64
// CHECK-NOT: math.tanh
// CHECK: return %[[R]], %[[D]]
func.func @tanh_f32_f64(%x: f32, %y: f64) -> (f32, f64) {
  %a = math.tanh %x : f32
  %b = math.tanh %y : f64
  return %a, %b : f32, f64
}

// asinh: log1p of |x| + x^2 / (1 + sqrt(1 + x^2)) (accurate near 0), log|x| + ln 2 above
// 2^12 (x^2 would overflow at 1.8e19), x's sign by a select: log(x + sqrt(x^2 + 1)) of a
// negative x cancelled to -inf at -1e4.
// CHECK-LABEL: func.func @asinh
// CHECK: math.sqrt
// CHECK: %[[NEAR:.+]] = math.log1p
// CHECK: %[[BIG:.+]] = arith.cmpf ogt, %{{.+}}, %{{.+}} : f32
// CHECK: math.log
// CHECK: %[[M:.+]] = arith.select %[[BIG]], %{{.+}}, %[[NEAR]] : f32
// CHECK: arith.select %{{.+}}, %{{.+}}, %[[M]] : f32
// CHECK-NOT: math.asinh
func.func @asinh(%x: f32) -> f32 {
  %a = math.asinh %x : f32
  return %a : f32
}

// cosh and sinh: h = exp(|x|) / 2, taken as exp(|x| - 88) e^88 / 2 above 88, so that they
// reach FLT_MAX at 89.4 as torch's do (exp alone overflows at 88.72).
// CHECK-LABEL: func.func @cosh
// CHECK: %[[HIGH:.+]] = arith.cmpf ogt, %{{.+}}, %{{.+}} : f32
// CHECK: arith.select %[[HIGH]]
// CHECK: arith.constant 8.25818133E+37 : f32
// CHECK: math.exp
// CHECK: arith.divf
// CHECK: arith.addf
// CHECK-NOT: math.cosh
func.func @cosh(%x: f32) -> f32 {
  %a = math.cosh %x : f32
  return %a : f32
}

// Each f64 function declared once, however many calls; f16 is left alone (the CPU
// pipeline has extended it to f32 before this pass).
// CHECK-LABEL: func.func @f64_calls
// CHECK: call @sinh({{.*}}) : (f64) -> f64
// CHECK: call @sinh({{.*}}) : (f64) -> f64
// CHECK: call @acosh({{.*}}) : (f64) -> f64
// CHECK: math.tanh {{.*}} : f16
func.func @f64_calls(%x: f64, %y: f64, %h: f16) -> (f64, f64, f64, f16) {
  %a = math.sinh %x : f64
  %b = math.sinh %y : f64
  %c = math.acosh %x : f64
  %d = math.tanh %h : f16
  return %a, %b, %c, %d : f64, f64, f64, f16
}
// CHECK-DAG: func.func private @tanh(f64) -> f64
// CHECK-DAG: func.func private @sinh(f64) -> f64
// CHECK-DAG: func.func private @acosh(f64) -> f64
// CHECK-NOT: func.func private @sinh
