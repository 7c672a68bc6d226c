// Body arguments are bound to operands one to one, with the same types.
// RUN: not fusec-opt %s 2>&1 | filecheck %s

func.func @f(%a: f32) -> f32 {
  // CHECK: invalid-arguments.mlir:[[@LINE+1]]:8: error: 'fusion.group' op input #0 has type 'f32' but body argument #0 has type 'f16'
  %r = "fusion.group"(%a) <{kind = "single"}> ({
  ^bb0(%x: f16):
    %y = arith.extf %x : f16 to f32
    fusion.yield %y : f32
  }) : (f32) -> f32
  return %r : f32
}
