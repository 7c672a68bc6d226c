// fusec-opt takes pass options as mlir-opt does, times passes, and lists each pass's options.
// RUN: fusec-opt %s --canonicalize=max-iterations=3 | filecheck %s
// RUN: fusec-opt %s '--pass-pipeline=builtin.module(canonicalize{max-iterations=3})' | filecheck %s
// RUN: fusec-opt %s --mlir-timing --canonicalize 2>&1 >/dev/null | filecheck %s --check-prefix=TIMING
// RUN: fusec-opt --list-passes | filecheck %s --check-prefix=LIST
// RUN: fusec-opt %s '--fusion-plan{horizontal=false device=cpu}' | filecheck %s --check-prefix=SPACES

// CHECK-LABEL: func.func @add_zero
// CHECK-NOT: arith.addi
// CHECK: return %arg0
// TIMING: Execution time report
// TIMING: Canonicalizer
// LIST: --fusion-plan
// LIST-NEXT: device str (default cpu)
// LIST: --fusion-tile
// LIST-NEXT: threads int (default 0)
// SPACES-LABEL: func.func @add_zero
func.func @add_zero(%a: i32) -> i32 {
  %z = arith.constant 0 : i32
  %r = arith.addi %a, %z : i32
  return %r : i32
}
