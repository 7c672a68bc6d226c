// RUN: fusec-opt %s --fusion-gpu-split-matmuls | filecheck %s

// exp(x @ w + b): the matmul and its bias become one cuBLASLt call (fusion.path = "gemm",
// the bias in its epilogue), the exp an epilogue kernel after it. An f64 matmul is no
// cuBLASLt pair: it stays one kernel of ours, and the note says why.
// CHECK-LABEL: func.func @main
// CHECK-SAME: fusion.gemm_notes = ["matmul-rooted group: cuBLASLt with the fused epilogue bias", "not cuBLASLt: operand types f64 x f64 are not a cuBLASLt pair"]
// CHECK: %[[G:.+]] = fusion.group epilogue
// CHECK-SAME: fusion.gemm_epilogue = "bias"
// CHECK-SAME: fusion.path = "gemm"
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<64x128xf32>, tensor<128x256xf32>)
// CHECK: fusion.group single (%{{.+}} = %[[G]] : tensor<64x256xf32>)
// CHECK-SAME: fusion.split = "epilogue"
// CHECK: math.exp
// CHECK: fusion.group single
// CHECK-NOT: fusion.path
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<64x128xf64>, tensor<128x32xf64>)
// CHECK: return
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @main(%arg0: tensor<64x128xf32>, %arg1: tensor<128x256xf32>, %arg2: tensor<256xf32>, %arg3: tensor<128x32xf32>) -> (tensor<64x256xf32>, tensor<64x32xf64>) {
    %0 = fusion.group epilogue (%arg4 = %arg0 : tensor<64x128xf32>, %arg5 = %arg1 : tensor<128x256xf32>, %arg6 = %arg2 : tensor<256xf32>) -> tensor<64x256xf32> {
      %cst = arith.constant 0.000000e+00 : f32
      %3 = tensor.empty() : tensor<64x256xf32>
      %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<64x256xf32>) -> tensor<64x256xf32>
      %5 = linalg.matmul ins(%arg4, %arg5 : tensor<64x128xf32>, tensor<128x256xf32>) outs(%4 : tensor<64x256xf32>) -> tensor<64x256xf32>
      %6 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%5, %arg6 : tensor<64x256xf32>, tensor<256xf32>) outs(%3 : tensor<64x256xf32>) {
      ^bb0(%in: f32, %in_0: f32, %out: f32):
        %8 = arith.addf %in, %in_0 : f32
        linalg.yield %8 : f32
      } -> tensor<64x256xf32>
      %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%6 : tensor<64x256xf32>) outs(%3 : tensor<64x256xf32>) {
      ^bb0(%in: f32, %out: f32):
        %8 = math.exp %in : f32
        linalg.yield %8 : f32
      } -> tensor<64x256xf32>
      fusion.yield %7 : tensor<64x256xf32>
    }
    %1:2 = fusion.group horizontal (%arg4 = %arg0 : tensor<64x128xf32>, %arg5 = %arg3 : tensor<128x32xf32>) -> (tensor<64x128xf64>, tensor<128x32xf64>) {
      %3 = tensor.empty() : tensor<64x128xf64>
      %4 = tensor.empty() : tensor<128x32xf64>
      %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg4 : tensor<64x128xf32>) outs(%3 : tensor<64x128xf64>) {
      ^bb0(%in: f32, %out: f64):
        %7 = arith.extf %in : f32 to f64
        linalg.yield %7 : f64
      } -> tensor<64x128xf64>
      %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg5 : tensor<128x32xf32>) outs(%4 : tensor<128x32xf64>) {
      ^bb0(%in: f32, %out: f64):
        %7 = arith.extf %in : f32 to f64
        linalg.yield %7 : f64
      } -> tensor<128x32xf64>
      fusion.yield %5, %6 : tensor<64x128xf64>, tensor<128x32xf64>
    }
    %2 = fusion.group single (%arg4 = %1#0 : tensor<64x128xf64>, %arg5 = %1#1 : tensor<128x32xf64>) -> tensor<64x32xf64> {
      %cst = arith.constant 0.000000e+00 : f64
      %3 = tensor.empty() : tensor<64x32xf64>
      %4 = linalg.fill ins(%cst : f64) outs(%3 : tensor<64x32xf64>) -> tensor<64x32xf64>
      %5 = linalg.matmul ins(%arg4, %arg5 : tensor<64x128xf64>, tensor<128x32xf64>) outs(%4 : tensor<64x32xf64>) -> tensor<64x32xf64>
      fusion.yield %5 : tensor<64x32xf64>
    }
    return %0, %2 : tensor<64x256xf32>, tensor<64x32xf64>
  }
}
