// RUN: fusec-opt %s --fusion-unfence | filecheck %s

// Fence groups dissolve; the kernel group around them stays.
// CHECK-LABEL: func.func @f
// CHECK: fusion.group epilogue
// CHECK-NOT: fusion.fence
// CHECK: linalg.exp
// CHECK: fusion.yield
// CHECK-NOT: fusion.group
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %r = fusion.group epilogue (%a = %x : tensor<8xf32>) -> tensor<8xf32> {
    %y = fusion.group single (%b = %a : tensor<8xf32>) -> tensor<8xf32> attributes {fusion.fence} {
      %e = tensor.empty() : tensor<8xf32>
      %z = linalg.exp ins(%b : tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
      fusion.yield %z : tensor<8xf32>
    }
    fusion.yield %y : tensor<8xf32>
  }
  return %r : tensor<8xf32>
}
