// RUN: fusec-opt %s --fusion-gpu-merge-epilogues | filecheck %s

// Where our tensor-core GEMM can take the matmul (bf16 operands, A with K contiguous), any
// elementwise consumer merges into the matmul group, not only what cuBLASLt's epilogue runs:
// here an exp and a residual add (the split after it decides ours or cuBLASLt, by cost).
// CHECK-LABEL: func.func @elementwise_consumer
// CHECK: %[[M:.+]] = fusion.group single (%{{.+}} = %arg0 : tensor<256x128xbf16>, %{{.+}} = %arg1 : tensor<128x192xbf16>, %{{.+}} = %arg2 : tensor<256x192xf32>)
// CHECK: linalg.matmul
// CHECK: math.exp
// CHECK: arith.addf
// CHECK: fusion.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[M]]
//
// What must not merge: a consumer that starts with a reduction (a row sum), even for a
// matmul our kernel takes.
// CHECK-LABEL: func.func @reduction_consumer
// CHECK: %[[M2:.+]] = fusion.group single (%{{.+}} = %arg0 : tensor<256x128xbf16>, %{{.+}} = %arg1 : tensor<128x192xbf16>)
// CHECK: linalg.matmul
// CHECK-NOT: arith.addf
// CHECK: fusion.yield
// CHECK: fusion.group reduction (%{{.+}} = %[[M2]] : tensor<256x192xf32>)
// CHECK: arith.addf
#mm = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
func.func @elementwise_consumer(%x: tensor<256x128xbf16>, %w: tensor<128x192xbf16>, %r: tensor<256x192xf32>) -> tensor<256x192xf32> {
  %m = fusion.group single (%a = %x : tensor<256x128xbf16>, %c = %w : tensor<128x192xbf16>) -> tensor<256x192xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<256x192xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<256x192xf32>) -> tensor<256x192xf32>
    %p = linalg.matmul ins(%a, %c : tensor<256x128xbf16>, tensor<128x192xbf16>) outs(%f : tensor<256x192xf32>) -> tensor<256x192xf32>
    fusion.yield %p : tensor<256x192xf32>
  }
  %y = fusion.group single (%a = %m : tensor<256x192xf32>, %b = %r : tensor<256x192xf32>) -> tensor<256x192xf32> {
    %e = tensor.empty() : tensor<256x192xf32>
    %x1 = linalg.generic {indexing_maps = [#mm, #mm], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<256x192xf32>) outs(%e : tensor<256x192xf32>) {
    ^bb0(%in: f32, %out: f32):
      %v = math.exp %in : f32
      linalg.yield %v : f32
    } -> tensor<256x192xf32>
    %x2 = linalg.generic {indexing_maps = [#mm, #mm, #mm], iterator_types = ["parallel", "parallel"]} ins(%x1, %b : tensor<256x192xf32>, tensor<256x192xf32>) outs(%e : tensor<256x192xf32>) {
    ^bb0(%in: f32, %in2: f32, %out: f32):
      %v = arith.addf %in, %in2 : f32
      linalg.yield %v : f32
    } -> tensor<256x192xf32>
    fusion.yield %x2 : tensor<256x192xf32>
  }
  return %y : tensor<256x192xf32>
}
func.func @reduction_consumer(%x: tensor<256x128xbf16>, %w: tensor<128x192xbf16>) -> tensor<256xf32> {
  %m = fusion.group single (%a = %x : tensor<256x128xbf16>, %c = %w : tensor<128x192xbf16>) -> tensor<256x192xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<256x192xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<256x192xf32>) -> tensor<256x192xf32>
    %p = linalg.matmul ins(%a, %c : tensor<256x128xbf16>, tensor<128x192xbf16>) outs(%f : tensor<256x192xf32>) -> tensor<256x192xf32>
    fusion.yield %p : tensor<256x192xf32>
  }
  %s = fusion.group reduction (%a = %m : tensor<256x192xf32>) -> tensor<256xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<256xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<256xf32>) -> tensor<256xf32>
    %t = linalg.generic {indexing_maps = [#mm, #red], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<256x192xf32>) outs(%f : tensor<256xf32>) {
    ^bb0(%in: f32, %out: f32):
      %v = arith.addf %in, %out : f32
      linalg.yield %v : f32
    } -> tensor<256xf32>
    fusion.yield %t : tensor<256xf32>
  }
  return %s : tensor<256xf32>
}
