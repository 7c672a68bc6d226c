// An unknown memory level is rejected with the list of levels.
// RUN: not fusec-opt %s 2>&1 | filecheck %s

// CHECK: invalid-mem.mlir:[[@LINE+1]]:52: error: unknown memory level 'hbm3'; expected one of: register, shared, l2, global
func.func @f() attributes {fusion.mem = #fusion.mem<hbm3>} {
  return
}
