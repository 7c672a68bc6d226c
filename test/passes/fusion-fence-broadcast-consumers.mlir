// RUN: fusec-opt %s --fusion-fence-broadcast-consumers --split-input-file | filecheck %s

// The matmul reads the tanh result through a broadcast (each element N times): it is fenced,
// so elementwise fusion cannot put the tanh inside the matmul's loops. The bias add reads
// the matmul through an identity map: no fence.
// CHECK-LABEL: func.func @gelu_matmul
// CHECK: %[[T:.+]] = linalg.generic
// CHECK: math.tanh
// CHECK: fusion.group single (%[[A:.+]] = %[[T]] : tensor<8x16xf32>
// CHECK-SAME: fusion.fence
// CHECK: linalg.matmul ins(%[[A]]
// CHECK: fusion.yield
// CHECK-NOT: fusion.fence
// CHECK: linalg.generic
// CHECK: arith.addf
func.func @gelu_matmul(%x: tensor<8x16xf32>, %w: tensor<16x4xf32>) -> tensor<8x4xf32> {
  %r = fusion.group epilogue (%a = %x : tensor<8x16xf32>, %b = %w : tensor<16x4xf32>) -> tensor<8x4xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<8x16xf32>
    %t = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %h = math.tanh %in : f32
      linalg.yield %h : f32
    } -> tensor<8x16xf32>
    %e2 = tensor.empty() : tensor<8x4xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e2 : tensor<8x4xf32>) -> tensor<8x4xf32>
    %m = linalg.matmul ins(%t, %b : tensor<8x16xf32>, tensor<16x4xf32>) outs(%f : tensor<8x4xf32>) -> tensor<8x4xf32>
    %y = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%m : tensor<8x4xf32>) outs(%e2 : tensor<8x4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %s = arith.addf %in, %in : f32
      linalg.yield %s : f32
    } -> tensor<8x4xf32>
    fusion.yield %y : tensor<8x4xf32>
  }
  return %r : tensor<8x4xf32>
}
