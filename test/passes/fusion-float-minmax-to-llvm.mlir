// RUN: fusec-opt %s --fusion-float-minmax-to-llvm | filecheck %s

// Float max/min become LLVM's NaN-propagating intrinsics (a max reduction then vectorizes);
// integer max is left to the usual lowering.
// CHECK-LABEL: func.func @f
// CHECK: llvm.intr.maximum(%arg0, %arg1) : (f32, f32) -> f32
// CHECK: llvm.intr.minimum(%arg2, %arg3) : (f64, f64) -> f64
// CHECK: arith.maxsi
func.func @f(%a: f32, %b: f32, %c: f64, %d: f64, %i: i32, %j: i32) -> (f32, f64, i32) {
  %m = arith.maximumf %a, %b : f32
  %n = arith.minimumf %c, %d : f64
  %k = arith.maxsi %i, %j : i32
  return %m, %n, %k : f32, f64, i32
}
