// A group is isolated from above: using a value defined outside it is rejected.
// RUN: not fusec-opt %s 2>&1 | filecheck %s

func.func @f(%a: f32, %b: f32) -> f32 {
  %r = fusion.group single (%x = %a : f32) -> f32 {
    // CHECK: invalid-capture.mlir:[[@LINE+1]]:10: error: 'arith.addf' op using value defined outside the region
    %s = arith.addf %x, %b : f32
    fusion.yield %s : f32
  }
  return %r : f32
}
