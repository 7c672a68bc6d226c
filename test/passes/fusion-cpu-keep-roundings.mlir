// RUN: fusec-opt %s '--math-extend-to-supported-types=extra-types=f32 target-type=f32' '--arith-emulate-unsupported-floats=source-types=bf16,f16 target-type=f32' --fusion-cpu-keep-roundings --canonicalize --split-input-file | filecheck %s
// RUN: fusec-opt %s '--math-extend-to-supported-types=extra-types=f32 target-type=f32' '--arith-emulate-unsupported-floats=source-types=bf16,f16 target-type=f32' --canonicalize --split-input-file | filecheck %s --check-prefix=UPSTREAM

// --fusion-cpu-keep-roundings: the emulation of 16-bit float ops in f32 marks its extf and
// truncf `contract`, and canonicalization folds extf(truncf(x)) to x. Where an op whose
// result jumps reads the value (an int cast, a compare, floor / round, a remainder), the
// rounding to 16 bits stays, as torch computes (y * 100).to(int) of a bf16 y; a continuous
// consumer (another multiply) still reads the f32 value (not rounded twice).

// CHECK-LABEL: func.func @int_cast
// CHECK: %[[P:.+]] = arith.mulf
// CHECK-NEXT: %[[R:.+]] = arith.truncf %[[P]] fastmath<contract> : f32 to bf16
// CHECK-NEXT: %[[E:.+]] = arith.extf %[[R]] : bf16 to f32
// CHECK-NEXT: arith.fptosi %[[E]] : f32 to i64
// UPSTREAM-LABEL: func.func @int_cast
// UPSTREAM: %[[P:.+]] = arith.mulf
// UPSTREAM-NEXT: arith.fptosi %[[P]] : f32 to i64
func.func @int_cast(%x: bf16) -> i64 {
  %c = arith.constant 1.000000e+02 : bf16
  %m = arith.mulf %x, %c : bf16
  %i = arith.fptosi %m : bf16 to i64
  return %i : i64
}

// -----

// A compare and a floor of f16 values keep the rounding (math ops extended to f32 first, as
// in the CPU pipeline); the multiply between the two
// products does not (no jump there).
// CHECK-LABEL: func.func @compare_and_floor
// CHECK: %[[A:.+]] = arith.mulf
// CHECK-NOT: arith.truncf
// CHECK: %[[B:.+]] = arith.mulf %[[A]]
// CHECK-NEXT: %[[R:.+]] = arith.truncf %[[B]] fastmath<contract> : f32 to f16
// CHECK-NOT: fastmath<contract> : f16 to f32
// CHECK: %[[E:.+]] = arith.extf %[[R]] : f16 to f32
// CHECK: %[[F:.+]] = arith.extf %[[R]] : f16 to f32
// CHECK: arith.cmpf ogt, %[[E]]
// CHECK: math.floor %[[F]] : f32
func.func @compare_and_floor(%x: f16) -> (i1, f16) {
  %c = arith.constant 3.000000e+00 : f16
  %a = arith.mulf %x, %c : f16
  %b = arith.mulf %a, %c : f16
  %t = arith.cmpf ogt, %b, %c : f16
  %f = math.floor %b : f16
  return %t, %f : i1, f16
}

// -----

// f32 values are not touched: nothing to keep.
// CHECK-LABEL: func.func @f32_unchanged
// CHECK-NOT: arith.truncf
// CHECK-NOT: arith.extf
func.func @f32_unchanged(%x: f32) -> i64 {
  %c = arith.constant 1.000000e+02 : f32
  %m = arith.mulf %x, %c : f32
  %i = arith.fptosi %m : f32 to i64
  return %i : i64
}
