// RUN: fusec-opt %s --fusion-gpu-split-long-reductions | filecheck %s

// Column sums of 16384 x 1024 fp32, then a scale: the reduce shape would put 2 of the 256
// output vectors on a block (128 blocks for 132 SMs), so the 16384 rows become 4 parts of
// 4096 (an expand_shape of the input, a kernel of its own: 512 blocks), then the parts'
// fold (4 points, unrolled) joins the scale in the second kernel.
// CHECK-LABEL: func.func @colsum
// CHECK: %[[P:.+]] = fusion.group vertical
// CHECK-SAME: fusion.split = "reduction"
// CHECK: tensor.expand_shape {{.*}} : tensor<16384x1024xf32> into tensor<4x4096x1024xf32>
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction", "parallel", "parallel"]
// CHECK: -> tensor<4x1024xf32>
// CHECK: fusion.group vertical (%{{.+}} = %[[P]] : tensor<4x1024xf32>)
// CHECK: iterator_types = ["parallel", "reduction"]
// CHECK: arith.addf
// CHECK: arith.mulf
//
// A bf16 sum (its f32 accumulator rounds once; parts would round each) and a short one are
// left alone.
// CHECK-LABEL: func.func @bf16_left
// CHECK-NOT: fusion.split
// CHECK-LABEL: func.func @short_left
// CHECK-NOT: fusion.split
#in = affine_map<(d0, d1) -> (d0, d1)>
#out = affine_map<(d0, d1) -> (d1)>
#id = affine_map<(d0) -> (d0)>
func.func @colsum(%x: tensor<16384x1024xf32>) -> tensor<1024xf32> {
  %g = fusion.group vertical (%a = %x : tensor<16384x1024xf32>) -> tensor<1024xf32> {
    %z = arith.constant 0.0 : f32
    %h = arith.constant 0.5 : f32
    %e = tensor.empty() : tensor<1024xf32>
    %f = linalg.fill ins(%z : f32) outs(%e : tensor<1024xf32>) -> tensor<1024xf32>
    %s = linalg.generic {indexing_maps = [#in, #out], iterator_types = ["reduction", "parallel"]} ins(%a : tensor<16384x1024xf32>) outs(%f : tensor<1024xf32>) {
    ^bb0(%i: f32, %o: f32):
      %r = arith.addf %i, %o : f32
      linalg.yield %r : f32
    } -> tensor<1024xf32>
    %m = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%s : tensor<1024xf32>) outs(%e : tensor<1024xf32>) {
    ^bb0(%i: f32, %o: f32):
      %r = arith.mulf %i, %h : f32
      linalg.yield %r : f32
    } -> tensor<1024xf32>
    fusion.yield %m : tensor<1024xf32>
  }
  return %g : tensor<1024xf32>
}
func.func @bf16_left(%x: tensor<16384x1024xbf16>) -> tensor<1024xbf16> {
  %g = fusion.group single (%a = %x : tensor<16384x1024xbf16>) -> tensor<1024xbf16> {
    %z = arith.constant 0.0 : bf16
    %e = tensor.empty() : tensor<1024xbf16>
    %f = linalg.fill ins(%z : bf16) outs(%e : tensor<1024xbf16>) -> tensor<1024xbf16>
    %s = linalg.generic {indexing_maps = [#in, #out], iterator_types = ["reduction", "parallel"]} ins(%a : tensor<16384x1024xbf16>) outs(%f : tensor<1024xbf16>) {
    ^bb0(%i: bf16, %o: bf16):
      %r = arith.addf %i, %o : bf16
      linalg.yield %r : bf16
    } -> tensor<1024xbf16>
    fusion.yield %s : tensor<1024xbf16>
  }
  return %g : tensor<1024xbf16>
}
func.func @short_left(%x: tensor<64x1024xf32>) -> tensor<1024xf32> {
  %g = fusion.group single (%a = %x : tensor<64x1024xf32>) -> tensor<1024xf32> {
    %z = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<1024xf32>
    %f = linalg.fill ins(%z : f32) outs(%e : tensor<1024xf32>) -> tensor<1024xf32>
    %s = linalg.generic {indexing_maps = [#in, #out], iterator_types = ["reduction", "parallel"]} ins(%a : tensor<64x1024xf32>) outs(%f : tensor<1024xf32>) {
    ^bb0(%i: f32, %o: f32):
      %r = arith.addf %i, %o : f32
      linalg.yield %r : f32
    } -> tensor<1024xf32>
    fusion.yield %s : tensor<1024xf32>
  }
  return %g : tensor<1024xf32>
}
