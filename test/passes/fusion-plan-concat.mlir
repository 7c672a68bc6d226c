// RUN: fusec-opt %s '--fusion-plan{device=cpu}' | filecheck %s --check-prefix=CPU
// RUN: fusec-opt %s '--fusion-plan{device=nvidia-h200}' | filecheck %s --check-prefix=GPU

// A concat between a slice + negation and a multiply-add (RoPE's rotate_half). On the CPU,
// whose tiling cannot slice a concat, it stays a kernel of its own (`single`) and its
// consumers record why (not-fusible); what no fusion takes still becomes a kernel. On the
// H200 everything is one kernel: the data-movement kernels choose each element's piece.
// CPU-LABEL: func.func @rotate_half
// CPU: fusion.group single
// CPU-NOT: fusion.group
// CPU: tensor.concat
// CPU: fusion.group single
// CPU: fusion.refused = ["tensor.concat@{{[0-9:]+}}: not-fusible: a concat stays a kernel of its own on cpu
// GPU-LABEL: func.func @rotate_half
// GPU: fusion.group vertical
// GPU: tensor.extract_slice
// GPU: tensor.concat
// GPU: arith.mulf
// GPU-NOT: fusion.group
// GPU: return
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @rotate_half(%q: tensor<16x64xf32>, %sin: tensor<16x64xf32>) -> tensor<16x64xf32> {
  %hi = tensor.extract_slice %q[0, 32] [16, 32] [1, 1] : tensor<16x64xf32> to tensor<16x32xf32>
  %lo = tensor.extract_slice %q[0, 0] [16, 32] [1, 1] : tensor<16x64xf32> to tensor<16x32xf32>
  %e = tensor.empty() : tensor<16x32xf32>
  %neg = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%hi : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %n = arith.negf %a : f32
    linalg.yield %n : f32
  } -> tensor<16x32xf32>
  %c = tensor.concat dim(1) %neg, %lo : (tensor<16x32xf32>, tensor<16x32xf32>) -> tensor<16x64xf32>
  %e2 = tensor.empty() : tensor<16x64xf32>
  %r = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%c, %sin : tensor<16x64xf32>, tensor<16x64xf32>) outs(%e2 : tensor<16x64xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<16x64xf32>
  return %r : tensor<16x64xf32>
}
