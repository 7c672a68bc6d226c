// #fusion.mem<level> round-trips for every level, as an attribute anywhere.
// RUN: fusec-opt %s | fusec-opt | filecheck %s

// CHECK-LABEL: func.func @levels
// CHECK-SAME: fusion.levels = [#fusion.mem<register>, #fusion.mem<shared>, #fusion.mem<l2>, #fusion.mem<global>]
func.func @levels() attributes {fusion.levels = [#fusion.mem<register>, #fusion.mem<shared>, #fusion.mem<l2>, #fusion.mem<global>]} {
  return
}

// CHECK-LABEL: func.func @on_a_value
// CHECK: tensor.empty() {fusion.mem = #fusion.mem<shared>}
func.func @on_a_value() -> tensor<4xf32> {
  %e = tensor.empty() {fusion.mem = #fusion.mem<shared>} : tensor<4xf32>
  return %e : tensor<4xf32>
}
