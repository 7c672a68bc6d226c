// A yield whose types differ from the group's results is rejected, located at the group.
// RUN: not fusec-opt %s 2>&1 | filecheck %s

func.func @f(%a: tensor<8xf32>) -> tensor<8xf16> {
  // CHECK: invalid-yield-types.mlir:[[@LINE+1]]:8: error: 'fusion.group' op yields ('tensor<8xf32>') but its results are ('tensor<8xf16>')
  %r = fusion.group single (%x = %a : tensor<8xf32>) -> tensor<8xf16> {
    fusion.yield %x : tensor<8xf32>
  }
  return %r : tensor<8xf16>
}
