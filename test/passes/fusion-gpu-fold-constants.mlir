// RUN: fusec-opt %s --fusion-gpu-fold-constants | filecheck %s

// A group that reads nothing (an arange, as GPT-2's positions) is computed at compile time:
// its value becomes a constant cloned into the group that reads it, and the kernel is gone.
// A group that reads an input is not folded.
// CHECK-LABEL: func.func @main
// CHECK-NOT: fusion.group single () ->
// CHECK: %[[Y:.+]] = fusion.group single (%{{.+}} = %arg0 : tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK: arith.constant dense<[0.000000e+00, 1.000000e+00, 2.000000e+00, {{.*}} 1.500000e+01]> : tensor<16xf32>
// CHECK: arith.addf
// CHECK: %[[Z:.+]] = fusion.group single (%{{.+}} = %arg0 : tensor<4x16xf32>) -> tensor<16xf32>
// CHECK: linalg.generic
// CHECK: return %[[Y]], %[[Z]]
#id = affine_map<(d0) -> (d0)>
#mm = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @main(%x: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<16xf32>) {
  %pos = fusion.group single () -> tensor<16xf32> {
    %e = tensor.empty() : tensor<16xf32>
    %r = linalg.generic {indexing_maps = [#id], iterator_types = ["parallel"]} outs(%e : tensor<16xf32>) {
    ^bb0(%o: f32):
      %i = linalg.index 0 : index
      %n = arith.index_cast %i : index to i64
      %f = arith.sitofp %n : i64 to f32
      linalg.yield %f : f32
    } -> tensor<16xf32>
    fusion.yield %r : tensor<16xf32>
  }
  %y = fusion.group single (%a = %x : tensor<4x16xf32>, %p = %pos : tensor<16xf32>) -> tensor<4x16xf32> {
    %e = tensor.empty() : tensor<4x16xf32>
    %r = linalg.generic {indexing_maps = [#mm, #col, #mm], iterator_types = ["parallel", "parallel"]} ins(%a, %p : tensor<4x16xf32>, tensor<16xf32>) outs(%e : tensor<4x16xf32>) {
    ^bb0(%i: f32, %j: f32, %o: f32):
      %s = arith.addf %i, %j : f32
      linalg.yield %s : f32
    } -> tensor<4x16xf32>
    fusion.yield %r : tensor<4x16xf32>
  }
  %z = fusion.group single (%a = %x : tensor<4x16xf32>) -> tensor<16xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<16xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16xf32>) -> tensor<16xf32>
    %r = linalg.generic {indexing_maps = [#mm, #col], iterator_types = ["reduction", "parallel"]} ins(%a : tensor<4x16xf32>) outs(%f : tensor<16xf32>) {
    ^bb0(%i: f32, %o: f32):
      %s = arith.addf %i, %o : f32
      linalg.yield %s : f32
    } -> tensor<16xf32>
    fusion.yield %r : tensor<16xf32>
  }
  return %y, %z : tensor<4x16xf32>, tensor<16xf32>
}

// An arange and its reshape as two outputs of one group (GPT-2's positions once the fast
// emitter takes a `linalg.index`, so that the group is no longer cut at the reshape): both
// are computed here, each output a constant in the group that reads it. A group that reads
// nothing but computes what the folding does not evaluate (math.exp) keeps its kernel.
// CHECK-LABEL: func.func @two_outputs
// CHECK-NOT: fusion.group single () -> (tensor<8xi64>
// CHECK: fusion.group single (%{{.+}} = %arg0 : tensor<2x8xi64>) -> tensor<2x8xi64>
// CHECK-DAG: arith.constant dense<[0, 1, 2, 3, 4, 5, 6, 7]> : tensor<8xi64>
// CHECK-DAG: arith.constant dense<{{\[\[}}0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>
// CHECK: %[[EXP:.+]] = fusion.group single () -> tensor<8xf32>
// CHECK: math.exp
// CHECK: fusion.group single (%{{.+}} = %[[EXP]] : tensor<8xf32>)
#i1 = affine_map<(d0) -> (d0)>
#b2 = affine_map<(d0, d1) -> (d0, d1)>
#r2 = affine_map<(d0, d1) -> (d1)>
#u2 = affine_map<(d0, d1) -> (0, d1)>
func.func @two_outputs(%x: tensor<2x8xi64>) -> (tensor<2x8xi64>, tensor<8xf32>) {
  %pos:2 = fusion.group single () -> (tensor<8xi64>, tensor<1x8xi64>) {
    %e = tensor.empty() : tensor<8xi64>
    %r = linalg.generic {indexing_maps = [#i1], iterator_types = ["parallel"]} outs(%e : tensor<8xi64>) {
    ^bb0(%o: i64):
      %i = linalg.index 0 : index
      %n = arith.index_cast %i : index to i64
      linalg.yield %n : i64
    } -> tensor<8xi64>
    %x2 = tensor.expand_shape %r [[0, 1]] output_shape [1, 8] : tensor<8xi64> into tensor<1x8xi64>
    fusion.yield %r, %x2 : tensor<8xi64>, tensor<1x8xi64>
  }
  %y = fusion.group single (%a = %x : tensor<2x8xi64>, %p = %pos#0 : tensor<8xi64>, %q = %pos#1 : tensor<1x8xi64>) -> tensor<2x8xi64> {
    %e = tensor.empty() : tensor<2x8xi64>
    %r = linalg.generic {indexing_maps = [#b2, #r2, #u2, #b2], iterator_types = ["parallel", "parallel"]} ins(%a, %p, %q : tensor<2x8xi64>, tensor<8xi64>, tensor<1x8xi64>) outs(%e : tensor<2x8xi64>) {
    ^bb0(%i: i64, %j: i64, %k: i64, %o: i64):
      %s = arith.addi %i, %j : i64
      %t = arith.addi %s, %k : i64
      linalg.yield %t : i64
    } -> tensor<2x8xi64>
    fusion.yield %r : tensor<2x8xi64>
  }
  %z = fusion.group single () -> tensor<8xf32> {
    %e = tensor.empty() : tensor<8xf32>
    %r = linalg.generic {indexing_maps = [#i1], iterator_types = ["parallel"]} outs(%e : tensor<8xf32>) {
    ^bb0(%o: f32):
      %i = linalg.index 0 : index
      %n = arith.index_cast %i : index to i64
      %f = arith.sitofp %n : i64 to f32
      %g = math.exp %f : f32
      linalg.yield %g : f32
    } -> tensor<8xf32>
    fusion.yield %r : tensor<8xf32>
  }
  %w = fusion.group single (%c = %z : tensor<8xf32>) -> tensor<8xf32> {
    %e = tensor.empty() : tensor<8xf32>
    %r = linalg.generic {indexing_maps = [#i1, #i1], iterator_types = ["parallel"]} ins(%c : tensor<8xf32>) outs(%e : tensor<8xf32>) {
    ^bb0(%i: f32, %o: f32):
      %h = arith.mulf %i, %i : f32
      linalg.yield %h : f32
    } -> tensor<8xf32>
    fusion.yield %r : tensor<8xf32>
  }
  return %y, %w : tensor<2x8xi64>, tensor<8xf32>
}
