// RUN: fusec-opt %s --fusion-gpu-merge-epilogues | filecheck %s

// The planner left a matmul's bias add in a group of its own: the consumer starts with
// what cuBLASLt's epilogue runs, so it merges into the matmul group (the split after it
// keeps the exp as the epilogue kernel). A consumer that starts with an exp (no epilogue
// op) stays a group of its own.
// CHECK-LABEL: func.func @main
// CHECK: %[[M:.+]] = fusion.group single (%{{.+}} = %arg0 : tensor<64x128xf32>, %{{.+}} = %arg1 : tensor<128x256xf32>, %{{.+}} = %arg2 : tensor<256xf32>)
// CHECK: linalg.matmul
// CHECK: arith.addf
// CHECK: math.exp
// CHECK: fusion.yield
// CHECK: %[[M2:.+]] = fusion.group single (%{{.+}} = %arg0 : tensor<64x128xf32>, %{{.+}} = %arg1 : tensor<128x256xf32>)
// CHECK: linalg.matmul
// CHECK-NOT: math.exp
// CHECK: fusion.yield
// CHECK: %[[E:.+]] = fusion.group single (%{{.+}} = %[[M2]] : tensor<64x256xf32>)
// CHECK: math.exp
// CHECK: return %[[M]], %[[E]]
#mm = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @main(%x: tensor<64x128xf32>, %w: tensor<128x256xf32>, %b: tensor<256xf32>) -> (tensor<64x256xf32>, tensor<64x256xf32>) {
  %m = fusion.group single (%a = %x : tensor<64x128xf32>, %c = %w : tensor<128x256xf32>) -> tensor<64x256xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<64x256xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<64x256xf32>) -> tensor<64x256xf32>
    %r = linalg.matmul ins(%a, %c : tensor<64x128xf32>, tensor<128x256xf32>) outs(%f : tensor<64x256xf32>) -> tensor<64x256xf32>
    fusion.yield %r : tensor<64x256xf32>
  }
  %y = fusion.group single (%a = %m : tensor<64x256xf32>, %c = %b : tensor<256xf32>) -> tensor<64x256xf32> {
    %e = tensor.empty() : tensor<64x256xf32>
    %s = linalg.generic {indexing_maps = [#mm, #row, #mm], iterator_types = ["parallel", "parallel"]} ins(%a, %c : tensor<64x256xf32>, tensor<256xf32>) outs(%e : tensor<64x256xf32>) {
    ^bb0(%i: f32, %j: f32, %o: f32):
      %v = arith.addf %i, %j : f32
      linalg.yield %v : f32
    } -> tensor<64x256xf32>
    %r = linalg.generic {indexing_maps = [#mm, #mm], iterator_types = ["parallel", "parallel"]} ins(%s : tensor<64x256xf32>) outs(%e : tensor<64x256xf32>) {
    ^bb0(%i: f32, %o: f32):
      %t = math.exp %i : f32
      linalg.yield %t : f32
    } -> tensor<64x256xf32>
    fusion.yield %r : tensor<64x256xf32>
  }
  %m2 = fusion.group single (%a = %x : tensor<64x128xf32>, %c = %w : tensor<128x256xf32>) -> tensor<64x256xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<64x256xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<64x256xf32>) -> tensor<64x256xf32>
    %r = linalg.matmul ins(%a, %c : tensor<64x128xf32>, tensor<128x256xf32>) outs(%f : tensor<64x256xf32>) -> tensor<64x256xf32>
    fusion.yield %r : tensor<64x256xf32>
  }
  %y2 = fusion.group single (%a = %m2 : tensor<64x256xf32>) -> tensor<64x256xf32> {
    %e = tensor.empty() : tensor<64x256xf32>
    %r = linalg.generic {indexing_maps = [#mm, #mm], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<64x256xf32>) outs(%e : tensor<64x256xf32>) {
    ^bb0(%i: f32, %o: f32):
      %t = math.exp %i : f32
      linalg.yield %t : f32
    } -> tensor<64x256xf32>
    fusion.yield %r : tensor<64x256xf32>
  }
  return %y, %y2 : tensor<64x256xf32>, tensor<64x256xf32>
}
