// An unknown kind is rejected, and the message lists the closed set.
// RUN: not fusec-opt %s 2>&1 | filecheck %s

func.func @f(%a: f32) -> f32 {
  // CHECK: invalid-kind.mlir:[[@LINE+1]]:8: error: 'fusion.group' op has unknown kind 'diagonal'; expected one of: single, vertical, horizontal, input, reduction, epilogue, attention
  %r = fusion.group diagonal (%x = %a : f32) -> f32 {
    fusion.yield %x : f32
  }
  return %r : f32
}
