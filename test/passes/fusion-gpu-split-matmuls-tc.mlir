// RUN: fusec-opt %s --fusion-gpu-split-matmuls | filecheck %s
// RUN: fusec-opt %s "--fusion-gpu-kernels{tc-gemm=false}" | filecheck %s --check-prefix=LIB

// Our tensor-core GEMM (fusion.path = "tc_gemm") against cuBLASLt (fusion.path = "gemm"),
// per matmul, by the cost model's prediction both ways (in fusion.why).
//
// linear + bias, cast to bf16, + residual: cuBLASLt fuses the bias and the cast, not the
// residual add (a kernel after it); ours runs the whole chain on the accumulator: one group.
// CHECK-LABEL: func.func @linear_bias_residual
// CHECK-SAME: fusion.gemm_notes = ["matmul-rooted group: our tensor-core GEMM ({{[12]}} CTA{{s?}} per SM) with the fused epilogue bias+cast+addf (predicted {{[0-9.]+}} us, cuBLASLt {{[0-9.]+}} us with the kernel after it)"]
// CHECK: %[[G:.+]] = fusion.group epilogue
// CHECK-SAME: fusion.gemm_epilogue = "bias+cast+addf"
// CHECK-SAME: fusion.path = "tc_gemm"
// CHECK: linalg.matmul
// CHECK: arith.addf {{.+}} : f32
// CHECK: arith.truncf
// CHECK: arith.addf {{.+}} : bf16
// CHECK: fusion.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[G]]
// Without our family (tc-gemm=false): cuBLASLt, and the residual add is a kernel of its own
// (its bf16 add computed in f32 and rounded once: --fusion-gpu-widen-16bit-payloads).
// LIB-LABEL: func.func @linear_bias_residual
// LIB: fusion.group epilogue
// LIB-SAME: fusion.path = "gemm"
// LIB: fusion.group single
// LIB-SAME: fusion.split = "epilogue"
// LIB: arith.addf {{.+}} : f32
// LIB-NEXT: arith.truncf {{.+}} : f32 to bf16
//
// What must not become ours, each with its reason: A stored K x M (a.t() @ b) ...
// CHECK-LABEL: func.func @a_transposed
// CHECK-SAME: not our tensor-core GEMM: A is stored K x M
// CHECK: fusion.path = "gemm"
// ... a problem where cuBLASLt is predicted faster (1024 x 1024 outputs, K 16384: 64 of our
// tiles for 132 SMs, each a long K loop; its epilogue takes bias+cast) ...
// CHECK-LABEL: func.func @few_tiles_long_k
// CHECK-SAME: cuBLASLt predicted {{[0-9.]+}} us, our tensor-core GEMM {{[0-9.]+}} us
// CHECK: fusion.path = "gemm"
// ... a batched matmul ...
// CHECK-LABEL: func.func @batched
// CHECK-SAME: not our tensor-core GEMM: a batched matmul
// CHECK: fusion.path = "gemm"
// ... and a result read twice (y * y, y.sum(-1)) ends the chain at the cast: the product
// and the sum stay kernels after ours, reading its one result.
// CHECK-LABEL: func.func @result_read_twice
// CHECK: %[[T:.+]] = fusion.group epilogue
// CHECK-SAME: fusion.gemm_epilogue = "cast"
// CHECK-SAME: fusion.path = "tc_gemm"
// CHECK-NOT: arith.mulf
// CHECK: fusion.yield
// CHECK: fusion.group single (%{{.+}} = %[[T]] : tensor<64x96xbf16>)
// CHECK: arith.mulf
// CHECK: fusion.group single (%{{.+}} = %[[T]] : tensor<64x96xbf16>)
// CHECK: arith.addf
#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d1)>
#map3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map4 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @linear_bias_residual(%arg0: tensor<256x128xbf16>, %arg1: tensor<192x128xbf16>, %arg2: tensor<192xbf16>, %arg3: tensor<256x192xbf16>) -> tensor<256x192xbf16> {
    %0 = fusion.group epilogue (%arg4 = %arg1 : tensor<192x128xbf16>, %arg5 = %arg2 : tensor<192xbf16>, %arg6 = %arg0 : tensor<256x128xbf16>, %arg7 = %arg3 : tensor<256x192xbf16>) -> tensor<256x192xbf16> {
      %cst = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<128x192xbf16>
      %2 = tensor.empty() : tensor<192xf32>
      %3 = tensor.empty() : tensor<256x128xf32>
      %4 = tensor.empty() : tensor<128x192xf32>
      %5 = tensor.empty() : tensor<256x192xf32>
      %6 = tensor.empty() : tensor<256x192xbf16>
      %transposed = linalg.transpose ins(%arg4 : tensor<192x128xbf16>) outs(%1 : tensor<128x192xbf16>) permutation = [1, 0] 
      %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg5 : tensor<192xbf16>) outs(%2 : tensor<192xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %15 = arith.extf %in : bf16 to f32
        linalg.yield %15 : f32
      } -> tensor<192xf32>
      %8 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%arg6 : tensor<256x128xbf16>) outs(%3 : tensor<256x128xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %15 = arith.extf %in : bf16 to f32
        linalg.yield %15 : f32
      } -> tensor<256x128xf32>
      %9 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%transposed : tensor<128x192xbf16>) outs(%4 : tensor<128x192xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %15 = arith.extf %in : bf16 to f32
        linalg.yield %15 : f32
      } -> tensor<128x192xf32>
      %10 = linalg.fill ins(%cst : f32) outs(%5 : tensor<256x192xf32>) -> tensor<256x192xf32>
      %11 = linalg.matmul ins(%8, %9 : tensor<256x128xf32>, tensor<128x192xf32>) outs(%10 : tensor<256x192xf32>) -> tensor<256x192xf32>
      %12 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel"]} ins(%11, %7 : tensor<256x192xf32>, tensor<192xf32>) outs(%5 : tensor<256x192xf32>) {
      ^bb0(%in: f32, %in_0: f32, %out: f32):
        %15 = arith.addf %in, %in_0 : f32
        linalg.yield %15 : f32
      } -> tensor<256x192xf32>
      %13 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%12 : tensor<256x192xf32>) outs(%6 : tensor<256x192xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %15 = arith.truncf %in : f32 to bf16
        linalg.yield %15 : bf16
      } -> tensor<256x192xbf16>
      %14 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%13, %arg7 : tensor<256x192xbf16>, tensor<256x192xbf16>) outs(%6 : tensor<256x192xbf16>) {
      ^bb0(%in: bf16, %in_0: bf16, %out: bf16):
        %15 = arith.addf %in, %in_0 : bf16
        linalg.yield %15 : bf16
      } -> tensor<256x192xbf16>
      fusion.yield %14 : tensor<256x192xbf16>
    }
    return %0 : tensor<256x192xbf16>
  }
  func.func @a_transposed(%arg0: tensor<128x64xbf16>, %arg1: tensor<128x96xbf16>) -> tensor<64x96xbf16> {
    %0 = fusion.group epilogue (%arg2 = %arg0 : tensor<128x64xbf16>, %arg3 = %arg1 : tensor<128x96xbf16>) -> tensor<64x96xbf16> {
      %cst = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<64x128xbf16>
      %2 = tensor.empty() : tensor<64x96xf32>
      %3 = tensor.empty() : tensor<64x96xbf16>
      %transposed = linalg.transpose ins(%arg2 : tensor<128x64xbf16>) outs(%1 : tensor<64x128xbf16>) permutation = [1, 0] 
      %4 = linalg.fill ins(%cst : f32) outs(%2 : tensor<64x96xf32>) -> tensor<64x96xf32>
      %5 = linalg.matmul ins(%transposed, %arg3 : tensor<64x128xbf16>, tensor<128x96xbf16>) outs(%4 : tensor<64x96xf32>) -> tensor<64x96xf32>
      %6 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%5 : tensor<64x96xf32>) outs(%3 : tensor<64x96xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %7 = arith.truncf %in : f32 to bf16
        linalg.yield %7 : bf16
      } -> tensor<64x96xbf16>
      fusion.yield %6 : tensor<64x96xbf16>
    }
    return %0 : tensor<64x96xbf16>
  }
  func.func @few_tiles_long_k(%arg0: tensor<1024x16384xbf16>, %arg1: tensor<1024x16384xbf16>, %arg2: tensor<1024xbf16>) -> tensor<1024x1024xbf16> {
    %0 = fusion.group epilogue (%arg3 = %arg1 : tensor<1024x16384xbf16>, %arg4 = %arg2 : tensor<1024xbf16>, %arg5 = %arg0 : tensor<1024x16384xbf16>) -> tensor<1024x1024xbf16> {
      %cst = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<16384x1024xbf16>
      %2 = tensor.empty() : tensor<1024xf32>
      %3 = tensor.empty() : tensor<1024x16384xf32>
      %e = tensor.empty() : tensor<16384x1024xf32>
      %o = tensor.empty() : tensor<1024x1024xf32>
      %ob = tensor.empty() : tensor<1024x1024xbf16>
      %transposed = linalg.transpose ins(%arg3 : tensor<1024x16384xbf16>) outs(%1 : tensor<16384x1024xbf16>) permutation = [1, 0] 
      %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg4 : tensor<1024xbf16>) outs(%2 : tensor<1024xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %11 = arith.extf %in : bf16 to f32
        linalg.yield %11 : f32
      } -> tensor<1024xf32>
      %5 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%arg5 : tensor<1024x16384xbf16>) outs(%3 : tensor<1024x16384xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %11 = arith.extf %in : bf16 to f32
        linalg.yield %11 : f32
      } -> tensor<1024x16384xf32>
      %6 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%transposed : tensor<16384x1024xbf16>) outs(%e : tensor<16384x1024xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %11 = arith.extf %in : bf16 to f32
        linalg.yield %11 : f32
      } -> tensor<16384x1024xf32>
      %7 = linalg.fill ins(%cst : f32) outs(%o : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
      %8 = linalg.matmul ins(%5, %6 : tensor<1024x16384xf32>, tensor<16384x1024xf32>) outs(%7 : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
      %9 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel"]} ins(%8, %4 : tensor<1024x1024xf32>, tensor<1024xf32>) outs(%o : tensor<1024x1024xf32>) {
      ^bb0(%in: f32, %in_0: f32, %out: f32):
        %11 = arith.addf %in, %in_0 : f32
        linalg.yield %11 : f32
      } -> tensor<1024x1024xf32>
      %10 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%9 : tensor<1024x1024xf32>) outs(%ob : tensor<1024x1024xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %11 = arith.truncf %in : f32 to bf16
        linalg.yield %11 : bf16
      } -> tensor<1024x1024xbf16>
      fusion.yield %10 : tensor<1024x1024xbf16>
    }
    return %0 : tensor<1024x1024xbf16>
  }
  func.func @batched(%arg0: tensor<4x64x128xbf16>, %arg1: tensor<4x128x96xbf16>) -> tensor<4x64x96xbf16> {
    %0 = fusion.group epilogue (%arg2 = %arg0 : tensor<4x64x128xbf16>, %arg3 = %arg1 : tensor<4x128x96xbf16>) -> tensor<4x64x96xbf16> {
      %cst = arith.constant 0.000000e+00 : f32
      %1 = tensor.empty() : tensor<4x64x96xf32>
      %2 = tensor.empty() : tensor<4x64x96xbf16>
      %3 = linalg.fill ins(%cst : f32) outs(%1 : tensor<4x64x96xf32>) -> tensor<4x64x96xf32>
      %4 = linalg.batch_matmul ins(%arg2, %arg3 : tensor<4x64x128xbf16>, tensor<4x128x96xbf16>) outs(%3 : tensor<4x64x96xf32>) -> tensor<4x64x96xf32>
      %5 = linalg.generic {indexing_maps = [#map3, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%4 : tensor<4x64x96xf32>) outs(%2 : tensor<4x64x96xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %6 = arith.truncf %in : f32 to bf16
        linalg.yield %6 : bf16
      } -> tensor<4x64x96xbf16>
      fusion.yield %5 : tensor<4x64x96xbf16>
    }
    return %0 : tensor<4x64x96xbf16>
  }
  func.func @result_read_twice(%arg0: tensor<64x128xbf16>, %arg1: tensor<96x128xbf16>) -> (tensor<64x96xbf16>, tensor<64xbf16>) {
    %0:2 = fusion.group epilogue (%arg2 = %arg1 : tensor<96x128xbf16>, %arg3 = %arg0 : tensor<64x128xbf16>) -> (tensor<64x96xbf16>, tensor<64x96xbf16>) {
      %cst = arith.constant 0.000000e+00 : f32
      %2 = tensor.empty() : tensor<128x96xbf16>
      %3 = tensor.empty() : tensor<64x96xf32>
      %4 = tensor.empty() : tensor<64x96xbf16>
      %transposed = linalg.transpose ins(%arg2 : tensor<96x128xbf16>) outs(%2 : tensor<128x96xbf16>) permutation = [1, 0] 
      %5 = linalg.fill ins(%cst : f32) outs(%3 : tensor<64x96xf32>) -> tensor<64x96xf32>
      %6 = linalg.matmul ins(%arg3, %transposed : tensor<64x128xbf16>, tensor<128x96xbf16>) outs(%5 : tensor<64x96xf32>) -> tensor<64x96xf32>
      %7 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%6 : tensor<64x96xf32>) outs(%4 : tensor<64x96xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %9 = arith.truncf %in : f32 to bf16
        linalg.yield %9 : bf16
      } -> tensor<64x96xbf16>
      %8 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%7, %7 : tensor<64x96xbf16>, tensor<64x96xbf16>) outs(%4 : tensor<64x96xbf16>) {
      ^bb0(%in: bf16, %in_0: bf16, %out: bf16):
        %9 = arith.mulf %in, %in_0 : bf16
        linalg.yield %9 : bf16
      } -> tensor<64x96xbf16>
      fusion.yield %7, %8 : tensor<64x96xbf16>, tensor<64x96xbf16>
    }
    %1 = fusion.group single (%arg2 = %0#0 : tensor<64x96xbf16>) -> tensor<64xbf16> {
      %cst = arith.constant 0.000000e+00 : bf16
      %2 = tensor.empty() : tensor<64xbf16>
      %3 = linalg.fill ins(%cst : bf16) outs(%2 : tensor<64xbf16>) -> tensor<64xbf16>
      %4 = linalg.generic {indexing_maps = [#map1, #map4], iterator_types = ["parallel", "reduction"]} ins(%arg2 : tensor<64x96xbf16>) outs(%3 : tensor<64xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        %5 = arith.addf %in, %out : bf16
        linalg.yield %5 : bf16
      } -> tensor<64xbf16>
      fusion.yield %4 : tensor<64xbf16>
    }
    return %0#1, %1 : tensor<64x96xbf16>, tensor<64xbf16>
  }
}

