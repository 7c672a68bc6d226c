// RUN: fusec-opt %s --split-input-file '--fusion-fold-norm-prologue{device=nvidia-h200}' | filecheck %s

// A LayerNorm (as torch-mlir decomposes it, bf16 in, f32 inside) in front of a Linear: the
// matmul reads x itself and W' = gamma * W (a new bf16 constant, transposed as W was); its
// accumulator goes through an epilogue reading the row statistics (rstd, mean: [M, 1], as
// the LayerNorm read them) and the terms' column vectors: with gamma 1.5, beta 0.25 and W
// 1/32, W' = 0.046875, -(gamma @ W) = -3 and beta @ W = 0.5 (from W' as stored, divided by
// gamma):  y0 * rstd + (u0 * mean) * rstd + u1.
// The normalised tensor and the ops computing it are gone; the statistics' reductions stay.
// CHECK-LABEL: func.func @layernorm_linear
// CHECK: math.rsqrt
// CHECK-NOT: tensor<4096x64xbf16> -> tensor<4096x64xbf16>
// CHECK: %[[W:.*]] = arith.constant dense<4.687500e-02> : tensor<64x64xbf16>
// CHECK: %[[WT:.*]] = linalg.transpose ins(%[[W]] : tensor<64x64xbf16>)
// CHECK-DAG: arith.constant dense<-3.000000e+00> : tensor<64xf32>
// CHECK-DAG: arith.constant dense<5.000000e-01> : tensor<64xf32>
// CHECK: %[[Y0:.*]] = linalg.matmul ins(%arg0, %[[WT]] : tensor<4096x64xbf16>, tensor<64x64xbf16>)
// CHECK: %[[Y:.*]] = linalg.generic {{.*}} ins(%[[Y0]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<4096x64xf32>, tensor<4096x1xf32>, tensor<4096x1xf32>, tensor<64xf32>, tensor<64xf32>) {{.*}} {fusion.norm_fold = "2 row values, 2 terms"}
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: linalg.yield
// CHECK: ins(%[[Y]], %{{.*}} : tensor<4096x64xf32>, tensor<64xf32>)
#map = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0, 0)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @layernorm_linear(%arg0: tensor<4096x64xbf16>) -> tensor<4096x64xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %n = arith.constant 6.400000e+01 : f32
  %eps = arith.constant 1.000000e-05 : f32
  %gamma = arith.constant dense<1.500000e+00> : tensor<64xbf16>
  %beta = arith.constant dense<2.500000e-01> : tensor<64xbf16>
  %w = arith.constant dense<3.125000e-02> : tensor<64x64xbf16>
  %bias = arith.constant dense<1.000000e+00> : tensor<64xf32>
  %e = tensor.empty() : tensor<4096x64xf32>
  %x = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<4096x64xbf16>) outs(%e : tensor<4096x64xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %0 = arith.extf %in : bf16 to f32
    linalg.yield %0 : f32
  } -> tensor<4096x64xf32>
  %e1 = tensor.empty() : tensor<4096x1xf32>
  %z1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4096x1xf32>) -> tensor<4096x1xf32>
  %sum = linalg.generic {indexing_maps = [#map, #row], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4096x64xf32>) outs(%z1 : tensor<4096x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<4096x1xf32>
  %mean = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%sum : tensor<4096x1xf32>) outs(%e1 : tensor<4096x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.divf %in, %n : f32
    linalg.yield %0 : f32
  } -> tensor<4096x1xf32>
  %d = linalg.generic {indexing_maps = [#map, #row, #map], iterator_types = ["parallel", "parallel"]} ins(%x, %mean : tensor<4096x64xf32>, tensor<4096x1xf32>) outs(%e : tensor<4096x64xf32>) {
  ^bb0(%in: f32, %m: f32, %out: f32):
    %0 = arith.subf %in, %m : f32
    linalg.yield %0 : f32
  } -> tensor<4096x64xf32>
  %sq = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%d : tensor<4096x64xf32>) outs(%e : tensor<4096x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.mulf %in, %in : f32
    linalg.yield %0 : f32
  } -> tensor<4096x64xf32>
  %ss = linalg.generic {indexing_maps = [#map, #row], iterator_types = ["parallel", "reduction"]} ins(%sq : tensor<4096x64xf32>) outs(%z1 : tensor<4096x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<4096x1xf32>
  %rstd = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%ss : tensor<4096x1xf32>) outs(%e1 : tensor<4096x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.divf %in, %n : f32
    %1 = arith.addf %0, %eps : f32
    %2 = math.rsqrt %1 : f32
    linalg.yield %2 : f32
  } -> tensor<4096x1xf32>
  %xn = linalg.generic {indexing_maps = [#map, #row, #map], iterator_types = ["parallel", "parallel"]} ins(%d, %rstd : tensor<4096x64xf32>, tensor<4096x1xf32>) outs(%e : tensor<4096x64xf32>) {
  ^bb0(%in: f32, %r: f32, %out: f32):
    %0 = arith.mulf %in, %r : f32
    linalg.yield %0 : f32
  } -> tensor<4096x64xf32>
  %g = linalg.generic {indexing_maps = [#map, #col, #map], iterator_types = ["parallel", "parallel"]} ins(%xn, %gamma : tensor<4096x64xf32>, tensor<64xbf16>) outs(%e : tensor<4096x64xf32>) {
  ^bb0(%in: f32, %c: bf16, %out: f32):
    %0 = arith.extf %c : bf16 to f32
    %1 = arith.mulf %in, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<4096x64xf32>
  %b = linalg.generic {indexing_maps = [#map, #col, #map], iterator_types = ["parallel", "parallel"]} ins(%g, %beta : tensor<4096x64xf32>, tensor<64xbf16>) outs(%e : tensor<4096x64xf32>) {
  ^bb0(%in: f32, %c: bf16, %out: f32):
    %0 = arith.extf %c : bf16 to f32
    %1 = arith.addf %in, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<4096x64xf32>
  %eh = tensor.empty() : tensor<4096x64xbf16>
  %a = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%b : tensor<4096x64xf32>) outs(%eh : tensor<4096x64xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %0 = arith.truncf %in : f32 to bf16
    linalg.yield %0 : bf16
  } -> tensor<4096x64xbf16>
  %ew = tensor.empty() : tensor<64x64xbf16>
  %wt = linalg.transpose ins(%w : tensor<64x64xbf16>) outs(%ew : tensor<64x64xbf16>) permutation = [1, 0]
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<4096x64xf32>) -> tensor<4096x64xf32>
  %y = linalg.matmul ins(%a, %wt : tensor<4096x64xbf16>, tensor<64x64xbf16>) outs(%acc : tensor<4096x64xf32>) -> tensor<4096x64xf32>
  %out = linalg.generic {indexing_maps = [#map, #col, #map], iterator_types = ["parallel", "parallel"]} ins(%y, %bias : tensor<4096x64xf32>, tensor<64xf32>) outs(%e : tensor<4096x64xf32>) {
  ^bb0(%in: f32, %c: f32, %o: f32):
    %0 = arith.addf %in, %c : f32
    linalg.yield %0 : f32
  } -> tensor<4096x64xf32>
  return %out : tensor<4096x64xf32>
}

// -----

// LLaMA's RMSNorm (x * rsqrt(mean(x^2) + eps), cast back to bf16, times a bf16 weight) on a
// [B, T, K] input, read by two matmuls through one collapse of its leading dims: both read
// the collapsed x with their own W' (K x N, stored as K x N here); their epilogues multiply by
// rstd, collapsed to [M, 1] (x and rstd collapsed once for both). No term: nothing is added.
// CHECK-LABEL: func.func @rmsnorm_two_matmuls
// CHECK-DAG: %[[X:.*]] = tensor.collapse_shape %arg0 {{\[}}[0, 1], [2]] : tensor<2x2048x64xbf16> into tensor<4096x64xbf16>
// CHECK-DAG: %[[R:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0, 1], [2]] : tensor<2x2048x1xf32> into tensor<4096x1xf32>
// CHECK: %[[Q:.*]] = linalg.matmul ins(%[[X]], %{{.*}} : tensor<4096x64xbf16>, tensor<64x64xbf16>)
// CHECK: linalg.generic {{.*}} ins(%[[Q]], %[[R]] : tensor<4096x64xf32>, tensor<4096x1xf32>) {{.*}} {fusion.norm_fold = "1 row value, 0 terms"}
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.mulf
// CHECK-NEXT: linalg.yield
// CHECK: %[[V:.*]] = linalg.matmul ins(%[[X]], %{{.*}} : tensor<4096x64xbf16>, tensor<64x64xbf16>)
// CHECK: linalg.generic {{.*}} ins(%[[V]], %[[R]] : tensor<4096x64xf32>, tensor<4096x1xf32>)
#map3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#col3 = affine_map<(d0, d1, d2) -> (d2)>
func.func @rmsnorm_two_matmuls(%arg0: tensor<2x2048x64xbf16>) -> (tensor<4096x64xf32>, tensor<4096x64xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %n = arith.constant 6.400000e+01 : f32
  %eps = arith.constant 1.000000e-06 : f32
  %gamma = arith.constant dense<1.250000e+00> : tensor<64xbf16>
  %wq = arith.constant dense<3.125000e-02> : tensor<64x64xbf16>
  %wv = arith.constant dense<-6.250000e-02> : tensor<64x64xbf16>
  %e = tensor.empty() : tensor<2x2048x64xf32>
  %x = linalg.generic {indexing_maps = [#map3, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0 : tensor<2x2048x64xbf16>) outs(%e : tensor<2x2048x64xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %0 = arith.extf %in : bf16 to f32
    linalg.yield %0 : f32
  } -> tensor<2x2048x64xf32>
  %sq = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %x : tensor<2x2048x64xf32>, tensor<2x2048x64xf32>) outs(%e : tensor<2x2048x64xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %0 = arith.mulf %in, %in2 : f32
    linalg.yield %0 : f32
  } -> tensor<2x2048x64xf32>
  %e1 = tensor.empty() : tensor<2x2048x1xf32>
  %z1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2x2048x1xf32>) -> tensor<2x2048x1xf32>
  %ss = linalg.generic {indexing_maps = [#map3, #row3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%sq : tensor<2x2048x64xf32>) outs(%z1 : tensor<2x2048x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<2x2048x1xf32>
  %rstd = linalg.generic {indexing_maps = [#map3, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%ss : tensor<2x2048x1xf32>) outs(%e1 : tensor<2x2048x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.divf %in, %n : f32
    %1 = arith.addf %0, %eps : f32
    %2 = math.rsqrt %1 : f32
    linalg.yield %2 : f32
  } -> tensor<2x2048x1xf32>
  %xn = linalg.generic {indexing_maps = [#map3, #row3, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %rstd : tensor<2x2048x64xf32>, tensor<2x2048x1xf32>) outs(%e : tensor<2x2048x64xf32>) {
  ^bb0(%in: f32, %r: f32, %out: f32):
    %0 = arith.mulf %in, %r : f32
    linalg.yield %0 : f32
  } -> tensor<2x2048x64xf32>
  %eh = tensor.empty() : tensor<2x2048x64xbf16>
  %h = linalg.generic {indexing_maps = [#map3, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%xn : tensor<2x2048x64xf32>) outs(%eh : tensor<2x2048x64xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %0 = arith.truncf %in : f32 to bf16
    linalg.yield %0 : bf16
  } -> tensor<2x2048x64xbf16>
  %a3 = linalg.generic {indexing_maps = [#col3, #map3, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%gamma, %h : tensor<64xbf16>, tensor<2x2048x64xbf16>) outs(%eh : tensor<2x2048x64xbf16>) {
  ^bb0(%c: bf16, %in: bf16, %out: bf16):
    %0 = arith.mulf %c, %in : bf16
    linalg.yield %0 : bf16
  } -> tensor<2x2048x64xbf16>
  %a = tensor.collapse_shape %a3 [[0, 1], [2]] : tensor<2x2048x64xbf16> into tensor<4096x64xbf16>
  %e2 = tensor.empty() : tensor<4096x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4096x64xf32>) -> tensor<4096x64xf32>
  %q = linalg.matmul ins(%a, %wq : tensor<4096x64xbf16>, tensor<64x64xbf16>) outs(%acc : tensor<4096x64xf32>) -> tensor<4096x64xf32>
  %v = linalg.matmul ins(%a, %wv : tensor<4096x64xbf16>, tensor<64x64xbf16>) outs(%acc : tensor<4096x64xf32>) -> tensor<4096x64xf32>
  return %q, %v : tensor<4096x64xf32>, tensor<4096x64xf32>
}

// -----

// Not folded: the normalised tensor is also returned (written anyway: nothing to gain).
// CHECK-LABEL: func.func @normalised_tensor_returned
// CHECK: %[[A:.*]] = linalg.generic
// CHECK: linalg.matmul ins(%[[A]], %{{.*}} : tensor<4096x64xbf16>, tensor<64x64xbf16>)
// CHECK-NOT: linalg.generic
// CHECK: return
#m = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0, 0)>
func.func @normalised_tensor_returned(%arg0: tensor<4096x64xbf16>, %s: tensor<4096x1xf32>) -> (tensor<4096x64xf32>, tensor<4096x64xbf16>) {
  %zero = arith.constant 0.000000e+00 : f32
  %w = arith.constant dense<3.125000e-02> : tensor<64x64xbf16>
  %eh = tensor.empty() : tensor<4096x64xbf16>
  %a = linalg.generic {indexing_maps = [#m, #r, #m], iterator_types = ["parallel", "parallel"]} ins(%arg0, %s : tensor<4096x64xbf16>, tensor<4096x1xf32>) outs(%eh : tensor<4096x64xbf16>) {
  ^bb0(%in: bf16, %r: f32, %out: bf16):
    %0 = arith.extf %in : bf16 to f32
    %1 = arith.mulf %0, %r : f32
    %2 = arith.truncf %1 : f32 to bf16
    linalg.yield %2 : bf16
  } -> tensor<4096x64xbf16>
  %e = tensor.empty() : tensor<4096x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<4096x64xf32>) -> tensor<4096x64xf32>
  %y = linalg.matmul ins(%a, %w : tensor<4096x64xbf16>, tensor<64x64xbf16>) outs(%acc : tensor<4096x64xf32>) -> tensor<4096x64xf32>
  return %y, %a : tensor<4096x64xf32>, tensor<4096x64xbf16>
}

// -----

// Not folded: the weight is an input (no W' can be made here), A is not affine in x
// (x * x), A's source is f32 (no 16-bit matrix for the GEMM to read), and a problem where
// the cost model predicts cuBLASLt on the normalised tensor faster than our GEMM with the
// epilogue (256 x 256 outputs, K 16384: 8 of our 64 x 128 tiles, split-K's 8 ways 64 CTAs
// for 132 SMs, 20.7 us against cuBLASLt's 18.0), and cuBLASLt with a kernel for the
// epilogue (4.1 us) dearer than writing the normalised tensor (2.0 us). At 512 x 512 split-K
// now makes ours the faster and the fold pays; at 16384 x 4096 x 4096 the cooperative
// schedule does.
// CHECK-LABEL: func.func @not_folded
// CHECK-COUNT-4: linalg.matmul ins(%{{[0-9]+}},
// CHECK-NOT: linalg.matmul ins(%arg
#m = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0, 0)>
func.func @not_folded(%arg0: tensor<4096x64xbf16>, %s: tensor<4096x1xf32>, %win: tensor<64x64xbf16>, %xf: tensor<4096x64xf32>, %big: tensor<256x16384xbf16>, %sb: tensor<256x1xf32>) -> (tensor<4096x64xf32>, tensor<4096x64xf32>, tensor<4096x64xf32>, tensor<256x256xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %w = arith.constant dense<3.125000e-02> : tensor<64x64xbf16>
  %eh = tensor.empty() : tensor<4096x64xbf16>
  %a = linalg.generic {indexing_maps = [#m, #r, #m], iterator_types = ["parallel", "parallel"]} ins(%arg0, %s : tensor<4096x64xbf16>, tensor<4096x1xf32>) outs(%eh : tensor<4096x64xbf16>) {
  ^bb0(%in: bf16, %r: f32, %out: bf16):
    %0 = arith.extf %in : bf16 to f32
    %1 = arith.mulf %0, %r : f32
    %2 = arith.truncf %1 : f32 to bf16
    linalg.yield %2 : bf16
  } -> tensor<4096x64xbf16>
  %sq = linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<4096x64xbf16>) outs(%eh : tensor<4096x64xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %0 = arith.mulf %in, %in : bf16
    linalg.yield %0 : bf16
  } -> tensor<4096x64xbf16>
  %fromf = linalg.generic {indexing_maps = [#m, #r, #m], iterator_types = ["parallel", "parallel"]} ins(%xf, %s : tensor<4096x64xf32>, tensor<4096x1xf32>) outs(%eh : tensor<4096x64xbf16>) {
  ^bb0(%in: f32, %r: f32, %out: bf16):
    %1 = arith.mulf %in, %r : f32
    %2 = arith.truncf %1 : f32 to bf16
    linalg.yield %2 : bf16
  } -> tensor<4096x64xbf16>
  %es = tensor.empty() : tensor<256x16384xbf16>
  %as = linalg.generic {indexing_maps = [#m, #r, #m], iterator_types = ["parallel", "parallel"]} ins(%big, %sb : tensor<256x16384xbf16>, tensor<256x1xf32>) outs(%es : tensor<256x16384xbf16>) {
  ^bb0(%in: bf16, %r: f32, %out: bf16):
    %0 = arith.extf %in : bf16 to f32
    %1 = arith.mulf %0, %r : f32
    %2 = arith.truncf %1 : f32 to bf16
    linalg.yield %2 : bf16
  } -> tensor<256x16384xbf16>
  %e = tensor.empty() : tensor<4096x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<4096x64xf32>) -> tensor<4096x64xf32>
  %y1 = linalg.matmul ins(%a, %win : tensor<4096x64xbf16>, tensor<64x64xbf16>) outs(%acc : tensor<4096x64xf32>) -> tensor<4096x64xf32>
  %y2 = linalg.matmul ins(%sq, %w : tensor<4096x64xbf16>, tensor<64x64xbf16>) outs(%acc : tensor<4096x64xf32>) -> tensor<4096x64xf32>
  %y3 = linalg.matmul ins(%fromf, %w : tensor<4096x64xbf16>, tensor<64x64xbf16>) outs(%acc : tensor<4096x64xf32>) -> tensor<4096x64xf32>
  %wb = arith.constant dense<1.562500e-02> : tensor<16384x256xbf16>
  %e64 = tensor.empty() : tensor<256x256xf32>
  %acc64 = linalg.fill ins(%zero : f32) outs(%e64 : tensor<256x256xf32>) -> tensor<256x256xf32>
  %y4 = linalg.matmul ins(%as, %wb : tensor<256x16384xbf16>, tensor<16384x256xbf16>) outs(%acc64 : tensor<256x256xf32>) -> tensor<256x256xf32>
  return %y1, %y2, %y3, %y4 : tensor<4096x64xf32>, tensor<4096x64xf32>, tensor<4096x64xf32>, tensor<256x256xf32>
}
