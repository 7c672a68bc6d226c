// A group body needs its terminator, and fusion.yield only lives in a group.
// RUN: not fusec-opt %s --split-input-file 2>&1 | filecheck %s

func.func @f(%a: f32) -> f32 {
  // CHECK: invalid-terminator.mlir:[[@LINE+2]]:10: error: block with no terminator
  %r = fusion.group single (%x = %a : f32) -> f32 {
    %y = arith.addf %x, %x : f32
  }
  return %r : f32
}

// -----

func.func @g(%a: f32) {
  // CHECK: invalid-terminator.mlir:[[@LINE+1]]:3: error: 'fusion.yield' op expects parent op 'fusion.group'
  fusion.yield %a : f32
}
