// Round trip: the custom syntax prints back as it was parsed, and the generic form agrees.
// RUN: fusec-opt %s --split-input-file | fusec-opt --split-input-file | filecheck %s
// RUN: fusec-opt %s --split-input-file --mlir-print-op-generic | fusec-opt --split-input-file | filecheck %s

// CHECK-LABEL: func.func @single_input
// CHECK: %[[R:.+]] = fusion.group vertical (%[[X:.+]] = %arg0 : tensor<8xf32>) -> tensor<8xf32> {
// CHECK:   %[[E:.+]] = linalg.exp ins(%[[X]] : tensor<8xf32>)
// CHECK:   fusion.yield %[[E]] : tensor<8xf32>
// CHECK: return %[[R]]
func.func @single_input(%a: tensor<8xf32>) -> tensor<8xf32> {
  %r = fusion.group vertical (%x = %a : tensor<8xf32>) -> tensor<8xf32> {
    %e = tensor.empty() : tensor<8xf32>
    %0 = linalg.exp ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
    fusion.yield %0 : tensor<8xf32>
  }
  return %r : tensor<8xf32>
}

// -----

// Several inputs and results, and the cost model's numbers as attributes.
// CHECK-LABEL: func.func @multi
// CHECK: %[[R:.+]]:2 = fusion.group reduction (%{{.+}} = %arg0 : tensor<4x8xf32>, %{{.+}} = %arg1 : tensor<4xf32>) -> (tensor<4xf32>, tensor<4x8xf32>) attributes {fusion.bytes = 160 : i64}
// CHECK: fusion.yield %{{.+}}, %{{.+}} : tensor<4xf32>, tensor<4x8xf32>
func.func @multi(%a: tensor<4x8xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<4x8xf32>) {
  %r:2 = fusion.group reduction (%x = %a : tensor<4x8xf32>, %y = %b : tensor<4xf32>) -> (tensor<4xf32>, tensor<4x8xf32>) attributes {fusion.bytes = 160 : i64} {
    fusion.yield %y, %x : tensor<4xf32>, tensor<4x8xf32>
  }
  return %r#0, %r#1 : tensor<4xf32>, tensor<4x8xf32>
}

// -----

// Every kind in the closed set parses; so does a group without inputs.
// CHECK-LABEL: func.func @kinds
// CHECK: fusion.group single ()
// CHECK: fusion.group horizontal
// CHECK: fusion.group input
// CHECK: fusion.group epilogue
// CHECK: fusion.group attention
func.func @kinds(%a: f32) -> (f32, f32, f32, f32, f32) {
  %0 = fusion.group single () -> f32 {
    %c = arith.constant 1.0 : f32
    fusion.yield %c : f32
  }
  %1 = fusion.group horizontal (%x = %a : f32) -> f32 {
    fusion.yield %x : f32
  }
  %2 = fusion.group input (%x = %a : f32) -> f32 {
    fusion.yield %x : f32
  }
  %3 = fusion.group epilogue (%x = %a : f32) -> f32 {
    fusion.yield %x : f32
  }
  %4 = fusion.group attention (%x = %a : f32) -> f32 {
    fusion.yield %x : f32
  }
  return %0, %1, %2, %3, %4 : f32, f32, f32, f32, f32
}
