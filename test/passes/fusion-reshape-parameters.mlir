// RUN: fusec-opt %s --fusion-reshape-parameters --canonicalize --split-input-file | filecheck %s

// BatchNorm's weight passed as an input (as the torch.compile backend gets it): widened to
// f32 and scaled by 1 / sqrt(var + eps) in [C], then expanded to [1, C, 1, 1] for the
// normalisation. The expand moves up onto the argument (a view) through both ops: no
// reshape is left between the parameters' arithmetic and its reader.
// CHECK-LABEL: func.func @batchnorm_weight
// CHECK: %[[G:.+]] = tensor.expand_shape %arg1 {{\[\[}}0, 1, 2, 3]] output_shape [1, 4, 1, 1] : tensor<4xbf16> into tensor<1x4x1x1xbf16>
// CHECK: %[[W:.+]] = linalg.generic {{.*}} ins(%[[G]] : tensor<1x4x1x1xbf16>) outs({{.*}} : tensor<1x4x1x1xf32>)
// CHECK: arith.extf
// CHECK: %[[S:.+]] = linalg.generic {{.*}} ins(%[[W]], %{{.+}} : tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>) outs({{.*}} : tensor<1x4x1x1xf32>)
// CHECK: arith.mulf
// CHECK: linalg.generic {{.*}} ins(%arg0, %[[S]] : tensor<2x4x3x3xf32>, tensor<1x4x1x1xf32>)
// CHECK-NOT: tensor.expand_shape
// CHECK: return
#id = affine_map<(d0) -> (d0)>
#c4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#ch = affine_map<(d0, d1, d2, d3) -> (0, d1, 0, 0)>
func.func @batchnorm_weight(%x: tensor<2x4x3x3xf32>, %gamma: tensor<4xbf16>) -> tensor<2x4x3x3xf32> {
  %scale = arith.constant dense<[1.5, 0.25, 2.0, 0.75]> : tensor<4xf32>
  %e = tensor.empty() : tensor<4xf32>
  %w = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%gamma : tensor<4xbf16>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: bf16, %o: f32):
    %f = arith.extf %in : bf16 to f32
    linalg.yield %f : f32
  } -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]} ins(%w, %scale : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<4xf32>
  %v = tensor.expand_shape %s [[0, 1, 2, 3]] output_shape [1, 4, 1, 1] : tensor<4xf32> into tensor<1x4x1x1xf32>
  %e4 = tensor.empty() : tensor<2x4x3x3xf32>
  %y = linalg.generic {indexing_maps = [#c4, #ch, #c4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x, %v : tensor<2x4x3x3xf32>, tensor<1x4x1x1xf32>) outs(%e4 : tensor<2x4x3x3xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<2x4x3x3xf32>
  return %y : tensor<2x4x3x3xf32>
}

// -----

// What must stay: an op with another reader besides the expand (it would be computed in
// two shapes); an op on a computed value (a row's sum, not a parameter); a result over
// PARAMETER_ELEMENTS (an activation-sized tensor: the planner plans around its reshapes).
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-3: tensor.expand_shape %{{[0-9]+}}
// CHECK-NOT: tensor.expand_shape
// CHECK: return
#id = affine_map<(d0) -> (d0)>
#rd = affine_map<(d0, d1) -> (d0, d1)>
#r0 = affine_map<(d0, d1) -> (d0)>
func.func @kept(%p: tensor<4xf32>, %m: tensor<4x8xf32>, %big: tensor<8192xf32>) -> (tensor<1x4xf32>, tensor<4xf32>, tensor<1x4xf32>, tensor<2x4096xf32>) {
  %e = tensor.empty() : tensor<4xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%p : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%i: f32, %o: f32):
    %n = arith.negf %i : f32
    linalg.yield %n : f32
  } -> tensor<4xf32>
  %va = tensor.expand_shape %a [[0, 1]] output_shape [1, 4] : tensor<4xf32> into tensor<1x4xf32>
  %zero = arith.constant 0.000000e+00 : f32
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %sum = linalg.generic {indexing_maps = [#rd, #r0], iterator_types = ["parallel", "reduction"]} ins(%m : tensor<4x8xf32>) outs(%acc : tensor<4xf32>) {
  ^bb0(%i: f32, %o: f32):
    %t = arith.addf %i, %o : f32
    linalg.yield %t : f32
  } -> tensor<4xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%sum : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%i: f32, %o: f32):
    %n = arith.negf %i : f32
    linalg.yield %n : f32
  } -> tensor<4xf32>
  %vb = tensor.expand_shape %b [[0, 1]] output_shape [1, 4] : tensor<4xf32> into tensor<1x4xf32>
  %eb = tensor.empty() : tensor<8192xf32>
  %c = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%big : tensor<8192xf32>) outs(%eb : tensor<8192xf32>) {
  ^bb0(%i: f32, %o: f32):
    %n = arith.negf %i : f32
    linalg.yield %n : f32
  } -> tensor<8192xf32>
  %vc = tensor.expand_shape %c [[0, 1]] output_shape [2, 4096] : tensor<8192xf32> into tensor<2x4096xf32>
  return %va, %a, %vb, %vc : tensor<1x4xf32>, tensor<4xf32>, tensor<1x4xf32>, tensor<2x4096xf32>
}
