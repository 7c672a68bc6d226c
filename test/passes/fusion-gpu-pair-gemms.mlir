// RUN: fusec-opt %s --fusion-gpu-pair-gemms | filecheck %s
// RUN: fusec-opt %s --fusion-gpu-kernels | filecheck %s --check-prefix=SPLIT
// RUN: fusec-opt %s "--fusion-gpu-kernels{gemm-pair=false}" | filecheck %s --check-prefix=APART

// SwiGLU's gate, silu(x Wg^T) * (x Wu^T), as the planner leaves it: the gate's product in a
// group of its own (written in f32), the up projection's group reading it back for the join.
// The two matmuls read one A: the gate's group joins the up projection's, one group with
// both matmuls and the whole chain, the cost model's two predictions recorded.
// CHECK-LABEL: func.func @swiglu_pair
// CHECK: %[[G:.+]] = fusion.group epilogue
// CHECK-SAME: fusion.gemm_pair = "paired: predicted {{[0-9.]+}} us against {{[0-9.]+}} us apart"
// CHECK: linalg.matmul ins(%[[A:[a-z0-9]+]], %transposed :
// CHECK: math.exp
// CHECK: linalg.matmul ins(%[[A]], %transposed_{{[0-9]+}} :
// CHECK: arith.mulf {{.+}} : bf16
// CHECK: fusion.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[G]]
// It becomes one kernel of our tensor-core GEMM, the pair (the chain its epilogue) ...
// SPLIT-LABEL: func.func @swiglu_pair
// SPLIT-SAME: fusion.gemm_notes = ["two matmuls sharing A: our tensor-core GEMM pair ({{.+}}) with the fused epilogue cast+cast+(negf,exp,addf,divf)+mulf+cast+cast+mulf (predicted {{[0-9.]+}} us); paired: predicted
// SPLIT: fusion.group epilogue
// SPLIT-SAME: fusion.path = "tc_gemm"
// SPLIT: linalg.matmul
// SPLIT: linalg.matmul
// SPLIT: fusion.yield
// SPLIT-NOT: fusion.group
// SPLIT: return
// ... and with --no-cuda-gemm-pair two, the gate's product between them.
// APART-LABEL: func.func @swiglu_pair
// APART-NOT: fusion.gemm_pair
// APART: fusion.group {{.+}} -> tensor<256x192xf32>
// APART-SAME: fusion.path = "tc_gemm"
// APART: fusion.group epilogue
// APART-SAME: fusion.path = "tc_gemm"
//
// What must not pair: matmuls of different inputs (x Wg^T, y Wu^T: no A to share) ...
// CHECK-LABEL: func.func @different_a
// CHECK-NOT: fusion.gemm_pair
// CHECK: fusion.group vertical
// CHECK: linalg.matmul
// CHECK: fusion.group epilogue
// CHECK: linalg.matmul
// CHECK: return
// ... and a gate product the model also returns (it is written whatever the kernel: the
// planner's group after it yields it beside the join).
// CHECK-LABEL: func.func @gate_read_twice
// CHECK-NOT: fusion.gemm_pair
// CHECK: fusion.group vertical
// CHECK: fusion.group epilogue
// CHECK: return
#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @swiglu_pair(%arg0: tensor<256x128xbf16>, %arg1: tensor<192x128xbf16>, %arg2: tensor<192x128xbf16>) -> tensor<256x192xbf16> {
    %0 = fusion.group vertical (%arg3 = %arg1 : tensor<192x128xbf16>, %arg4 = %arg0 : tensor<256x128xbf16>) -> tensor<256x192xf32> attributes {fusion.bytes_fused = 311296 : i64, fusion.bytes_unfused = 802816 : i64, fusion.device = "nvidia-h200", fusion.flops = 12582912 : i64, fusion.launches_saved = 2 : i64, fusion.parallel_tiles = 49152 : i64, fusion.reason = "3 ops in one kernel: saves 2 launches and 491520 bytes of memory traffic", fusion.tile_dims = [0, 1], fusion.time_fused_ns = 4073 : i64, fusion.time_unfused_ns = 12189 : i64, fusion.working_set = 0 : i64} {
      %cst = arith.constant 0.000000e+00 : f32
      %2 = tensor.empty() : tensor<128x192xbf16>
      %3 = tensor.empty() : tensor<256x192xf32>
      %transposed = linalg.transpose ins(%arg3 : tensor<192x128xbf16>) outs(%2 : tensor<128x192xbf16>) permutation = [1, 0] 
      %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<256x192xf32>) -> tensor<256x192xf32>
      %5 = linalg.matmul ins(%arg4, %transposed : tensor<256x128xbf16>, tensor<128x192xbf16>) outs(%4 : tensor<256x192xf32>) -> tensor<256x192xf32>
      fusion.yield %5 : tensor<256x192xf32>
    }
    %1 = fusion.group epilogue (%arg3 = %0 : tensor<256x192xf32>, %arg4 = %arg2 : tensor<192x128xbf16>, %arg5 = %arg0 : tensor<256x128xbf16>) -> tensor<256x192xbf16> attributes {fusion.bytes_fused = 409600 : i64, fusion.bytes_unfused = 3260416 : i64, fusion.device = "nvidia-h200", fusion.duplicated = 1 : i64, fusion.flops = 13074432 : i64, fusion.launches_saved = 9 : i64, fusion.parallel_tiles = 49152 : i64, fusion.reason = "10 ops in one kernel: saves 9 launches and 2850816 bytes of memory traffic", fusion.refused = ["linalg.matmul@5:0: one-contraction: the group already holds a contraction", "group@5:0: input: small-input: a second read of 65536 B costs 0.02 us, less than a launch (4.0 us) on nvidia-h200"], fusion.tile_dims = [0, 1], fusion.time_fused_ns = 4096 : i64, fusion.time_unfused_ns = 40767 : i64, fusion.working_set = 0 : i64} {
      %cst = arith.constant 0.000000e+00 : f32
      %cst_0 = arith.constant 1.000000e+00 : f32
      %2 = tensor.empty() : tensor<256x192xbf16>
      %3 = tensor.empty() : tensor<256x192xf32>
      %4 = tensor.empty() : tensor<128x192xbf16>
      %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg3 : tensor<256x192xf32>) outs(%2 : tensor<256x192xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %14 = arith.truncf %in : f32 to bf16
        linalg.yield %14 : bf16
      } -> tensor<256x192xbf16>
      %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%5 : tensor<256x192xbf16>) outs(%3 : tensor<256x192xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %14 = arith.extf %in : bf16 to f32
        linalg.yield %14 : f32
      } -> tensor<256x192xf32>
      %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%6 : tensor<256x192xf32>) outs(%3 : tensor<256x192xf32>) {
      ^bb0(%in: f32, %out: f32):
        %14 = arith.negf %in : f32
        %15 = math.exp %14 : f32
        %16 = arith.addf %15, %cst_0 : f32
        %17 = arith.divf %cst_0, %16 : f32
        linalg.yield %17 : f32
      } -> tensor<256x192xf32>
      %8 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%6, %7 : tensor<256x192xf32>, tensor<256x192xf32>) outs(%3 : tensor<256x192xf32>) {
      ^bb0(%in: f32, %in_1: f32, %out: f32):
        %14 = arith.mulf %in, %in_1 : f32
        linalg.yield %14 : f32
      } -> tensor<256x192xf32>
      %9 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%8 : tensor<256x192xf32>) outs(%2 : tensor<256x192xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %14 = arith.truncf %in : f32 to bf16
        linalg.yield %14 : bf16
      } -> tensor<256x192xbf16>
      %transposed = linalg.transpose ins(%arg4 : tensor<192x128xbf16>) outs(%4 : tensor<128x192xbf16>) permutation = [1, 0] 
      %10 = linalg.fill ins(%cst : f32) outs(%3 : tensor<256x192xf32>) -> tensor<256x192xf32>
      %11 = linalg.matmul ins(%arg5, %transposed : tensor<256x128xbf16>, tensor<128x192xbf16>) outs(%10 : tensor<256x192xf32>) -> tensor<256x192xf32>
      %12 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%11 : tensor<256x192xf32>) outs(%2 : tensor<256x192xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %14 = arith.truncf %in : f32 to bf16
        linalg.yield %14 : bf16
      } -> tensor<256x192xbf16>
      %13 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%9, %12 : tensor<256x192xbf16>, tensor<256x192xbf16>) outs(%2 : tensor<256x192xbf16>) {
      ^bb0(%in: bf16, %in_1: bf16, %out: bf16):
        %14 = arith.mulf %in, %in_1 : bf16
        linalg.yield %14 : bf16
      } -> tensor<256x192xbf16>
      fusion.yield %13 : tensor<256x192xbf16>
    }
    return %1 : tensor<256x192xbf16>
  }
  func.func @different_a(%arg0: tensor<256x128xbf16>, %arg1: tensor<256x128xbf16>, %arg2: tensor<192x128xbf16>, %arg3: tensor<192x128xbf16>) -> tensor<256x192xbf16> {
    %0 = fusion.group vertical (%arg4 = %arg2 : tensor<192x128xbf16>, %arg5 = %arg0 : tensor<256x128xbf16>) -> tensor<256x192xf32> attributes {fusion.bytes_fused = 311296 : i64, fusion.bytes_unfused = 802816 : i64, fusion.device = "nvidia-h200", fusion.flops = 12582912 : i64, fusion.launches_saved = 2 : i64, fusion.parallel_tiles = 49152 : i64, fusion.reason = "3 ops in one kernel: saves 2 launches and 491520 bytes of memory traffic", fusion.tile_dims = [0, 1], fusion.time_fused_ns = 4073 : i64, fusion.time_unfused_ns = 12189 : i64, fusion.working_set = 0 : i64} {
      %cst = arith.constant 0.000000e+00 : f32
      %2 = tensor.empty() : tensor<128x192xbf16>
      %3 = tensor.empty() : tensor<256x192xf32>
      %transposed = linalg.transpose ins(%arg4 : tensor<192x128xbf16>) outs(%2 : tensor<128x192xbf16>) permutation = [1, 0] 
      %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<256x192xf32>) -> tensor<256x192xf32>
      %5 = linalg.matmul ins(%arg5, %transposed : tensor<256x128xbf16>, tensor<128x192xbf16>) outs(%4 : tensor<256x192xf32>) -> tensor<256x192xf32>
      fusion.yield %5 : tensor<256x192xf32>
    }
    %1 = fusion.group epilogue (%arg4 = %0 : tensor<256x192xf32>, %arg5 = %arg3 : tensor<192x128xbf16>, %arg6 = %arg1 : tensor<256x128xbf16>) -> tensor<256x192xbf16> attributes {fusion.bytes_fused = 409600 : i64, fusion.bytes_unfused = 3260416 : i64, fusion.device = "nvidia-h200", fusion.duplicated = 1 : i64, fusion.flops = 13074432 : i64, fusion.launches_saved = 9 : i64, fusion.parallel_tiles = 49152 : i64, fusion.reason = "10 ops in one kernel: saves 9 launches and 2850816 bytes of memory traffic", fusion.refused = ["linalg.matmul@5:0: one-contraction: the group already holds a contraction"], fusion.tile_dims = [0, 1], fusion.time_fused_ns = 4096 : i64, fusion.time_unfused_ns = 40767 : i64, fusion.working_set = 0 : i64} {
      %cst = arith.constant 0.000000e+00 : f32
      %cst_0 = arith.constant 1.000000e+00 : f32
      %2 = tensor.empty() : tensor<256x192xbf16>
      %3 = tensor.empty() : tensor<256x192xf32>
      %4 = tensor.empty() : tensor<128x192xbf16>
      %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg4 : tensor<256x192xf32>) outs(%2 : tensor<256x192xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %14 = arith.truncf %in : f32 to bf16
        linalg.yield %14 : bf16
      } -> tensor<256x192xbf16>
      %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%5 : tensor<256x192xbf16>) outs(%3 : tensor<256x192xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %14 = arith.extf %in : bf16 to f32
        linalg.yield %14 : f32
      } -> tensor<256x192xf32>
      %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%6 : tensor<256x192xf32>) outs(%3 : tensor<256x192xf32>) {
      ^bb0(%in: f32, %out: f32):
        %14 = arith.negf %in : f32
        %15 = math.exp %14 : f32
        %16 = arith.addf %15, %cst_0 : f32
        %17 = arith.divf %cst_0, %16 : f32
        linalg.yield %17 : f32
      } -> tensor<256x192xf32>
      %8 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%6, %7 : tensor<256x192xf32>, tensor<256x192xf32>) outs(%3 : tensor<256x192xf32>) {
      ^bb0(%in: f32, %in_1: f32, %out: f32):
        %14 = arith.mulf %in, %in_1 : f32
        linalg.yield %14 : f32
      } -> tensor<256x192xf32>
      %9 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%8 : tensor<256x192xf32>) outs(%2 : tensor<256x192xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %14 = arith.truncf %in : f32 to bf16
        linalg.yield %14 : bf16
      } -> tensor<256x192xbf16>
      %transposed = linalg.transpose ins(%arg5 : tensor<192x128xbf16>) outs(%4 : tensor<128x192xbf16>) permutation = [1, 0] 
      %10 = linalg.fill ins(%cst : f32) outs(%3 : tensor<256x192xf32>) -> tensor<256x192xf32>
      %11 = linalg.matmul ins(%arg6, %transposed : tensor<256x128xbf16>, tensor<128x192xbf16>) outs(%10 : tensor<256x192xf32>) -> tensor<256x192xf32>
      %12 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%11 : tensor<256x192xf32>) outs(%2 : tensor<256x192xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %14 = arith.truncf %in : f32 to bf16
        linalg.yield %14 : bf16
      } -> tensor<256x192xbf16>
      %13 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%9, %12 : tensor<256x192xbf16>, tensor<256x192xbf16>) outs(%2 : tensor<256x192xbf16>) {
      ^bb0(%in: bf16, %in_1: bf16, %out: bf16):
        %14 = arith.mulf %in, %in_1 : bf16
        linalg.yield %14 : bf16
      } -> tensor<256x192xbf16>
      fusion.yield %13 : tensor<256x192xbf16>
    }
    return %1 : tensor<256x192xbf16>
  }
  func.func @gate_read_twice(%arg0: tensor<256x128xbf16>, %arg1: tensor<192x128xbf16>, %arg2: tensor<192x128xbf16>) -> (tensor<256x192xbf16>, tensor<256x192xbf16>) {
    %0 = fusion.group vertical (%arg3 = %arg1 : tensor<192x128xbf16>, %arg4 = %arg0 : tensor<256x128xbf16>) -> tensor<256x192xf32> attributes {fusion.bytes_fused = 311296 : i64, fusion.bytes_unfused = 802816 : i64, fusion.device = "nvidia-h200", fusion.flops = 12582912 : i64, fusion.launches_saved = 2 : i64, fusion.parallel_tiles = 49152 : i64, fusion.reason = "3 ops in one kernel: saves 2 launches and 491520 bytes of memory traffic", fusion.tile_dims = [0, 1], fusion.time_fused_ns = 4073 : i64, fusion.time_unfused_ns = 12189 : i64, fusion.working_set = 0 : i64} {
      %cst = arith.constant 0.000000e+00 : f32
      %2 = tensor.empty() : tensor<128x192xbf16>
      %3 = tensor.empty() : tensor<256x192xf32>
      %transposed = linalg.transpose ins(%arg3 : tensor<192x128xbf16>) outs(%2 : tensor<128x192xbf16>) permutation = [1, 0] 
      %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<256x192xf32>) -> tensor<256x192xf32>
      %5 = linalg.matmul ins(%arg4, %transposed : tensor<256x128xbf16>, tensor<128x192xbf16>) outs(%4 : tensor<256x192xf32>) -> tensor<256x192xf32>
      fusion.yield %5 : tensor<256x192xf32>
    }
    %1:2 = fusion.group epilogue (%arg3 = %0 : tensor<256x192xf32>, %arg4 = %arg2 : tensor<192x128xbf16>, %arg5 = %arg0 : tensor<256x128xbf16>) -> (tensor<256x192xbf16>, tensor<256x192xbf16>) attributes {fusion.bytes_fused = 507904 : i64, fusion.bytes_unfused = 3260416 : i64, fusion.device = "nvidia-h200", fusion.duplicated = 1 : i64, fusion.flops = 13074432 : i64, fusion.launches_saved = 9 : i64, fusion.parallel_tiles = 49152 : i64, fusion.reason = "10 ops in one kernel: saves 9 launches and 2752512 bytes of memory traffic", fusion.refused = ["linalg.matmul@5:0: one-contraction: the group already holds a contraction", "group@5:0: input: small-input: a second read of 65536 B costs 0.02 us, less than a launch (4.0 us) on nvidia-h200"], fusion.tile_dims = [0, 1], fusion.time_fused_ns = 4120 : i64, fusion.time_unfused_ns = 40767 : i64, fusion.working_set = 0 : i64} {
      %cst = arith.constant 0.000000e+00 : f32
      %cst_0 = arith.constant 1.000000e+00 : f32
      %2 = tensor.empty() : tensor<256x192xbf16>
      %3 = tensor.empty() : tensor<256x192xf32>
      %4 = tensor.empty() : tensor<128x192xbf16>
      %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg3 : tensor<256x192xf32>) outs(%2 : tensor<256x192xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %14 = arith.truncf %in : f32 to bf16
        linalg.yield %14 : bf16
      } -> tensor<256x192xbf16>
      %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%5 : tensor<256x192xbf16>) outs(%3 : tensor<256x192xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %14 = arith.extf %in : bf16 to f32
        linalg.yield %14 : f32
      } -> tensor<256x192xf32>
      %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%6 : tensor<256x192xf32>) outs(%3 : tensor<256x192xf32>) {
      ^bb0(%in: f32, %out: f32):
        %14 = arith.negf %in : f32
        %15 = math.exp %14 : f32
        %16 = arith.addf %15, %cst_0 : f32
        %17 = arith.divf %cst_0, %16 : f32
        linalg.yield %17 : f32
      } -> tensor<256x192xf32>
      %8 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%6, %7 : tensor<256x192xf32>, tensor<256x192xf32>) outs(%3 : tensor<256x192xf32>) {
      ^bb0(%in: f32, %in_1: f32, %out: f32):
        %14 = arith.mulf %in, %in_1 : f32
        linalg.yield %14 : f32
      } -> tensor<256x192xf32>
      %9 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%8 : tensor<256x192xf32>) outs(%2 : tensor<256x192xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %14 = arith.truncf %in : f32 to bf16
        linalg.yield %14 : bf16
      } -> tensor<256x192xbf16>
      %transposed = linalg.transpose ins(%arg4 : tensor<192x128xbf16>) outs(%4 : tensor<128x192xbf16>) permutation = [1, 0] 
      %10 = linalg.fill ins(%cst : f32) outs(%3 : tensor<256x192xf32>) -> tensor<256x192xf32>
      %11 = linalg.matmul ins(%arg5, %transposed : tensor<256x128xbf16>, tensor<128x192xbf16>) outs(%10 : tensor<256x192xf32>) -> tensor<256x192xf32>
      %12 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%11 : tensor<256x192xf32>) outs(%2 : tensor<256x192xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %14 = arith.truncf %in : f32 to bf16
        linalg.yield %14 : bf16
      } -> tensor<256x192xbf16>
      %13 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%9, %12 : tensor<256x192xbf16>, tensor<256x192xbf16>) outs(%2 : tensor<256x192xbf16>) {
      ^bb0(%in: bf16, %in_1: bf16, %out: bf16):
        %14 = arith.mulf %in, %in_1 : bf16
        linalg.yield %14 : bf16
      } -> tensor<256x192xbf16>
      fusion.yield %5, %13 : tensor<256x192xbf16>, tensor<256x192xbf16>
    }
    return %1#1, %1#0 : tensor<256x192xbf16>, tensor<256x192xbf16>
  }
}
