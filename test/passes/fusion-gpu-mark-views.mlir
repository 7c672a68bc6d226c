// RUN: fusec-opt %s --fusion-gpu-mark-views | filecheck %s

// A layout group whose result is its input's bytes (a reshape) is a view of the input
// buffer, no kernel (fusion.path = "view" at element offset 0). The same reshape returned
// by the model keeps its kernel: the caller owns an output's buffer.
// CHECK-LABEL: func.func @main
// CHECK: %[[V:.+]] = fusion.group single (%{{.+}} = %arg0 : tensor<16x16xf32>) -> tensor<4x64xf32>
// CHECK-SAME: fusion.path = "view"
// CHECK-SAME: fusion.view_offset = 0
// CHECK: %[[Y:.+]] = fusion.group single (%{{.+}} = %[[V]] : tensor<4x64xf32>)
// CHECK: math.exp
// CHECK: %[[O:.+]] = fusion.group single (%{{.+}} = %arg0 : tensor<16x16xf32>) -> tensor<4x64xf32> {
// CHECK-NOT: fusion.path
// CHECK: return %[[Y]], %[[O]]
#mm = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%x: tensor<16x16xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %v = fusion.group single (%a = %x : tensor<16x16xf32>) -> tensor<4x64xf32> {
    %r = tensor.collapse_shape %a [[0, 1]] : tensor<16x16xf32> into tensor<256xf32>
    %s = tensor.expand_shape %r [[0, 1]] output_shape [4, 64] : tensor<256xf32> into tensor<4x64xf32>
    fusion.yield %s : tensor<4x64xf32>
  }
  %y = fusion.group single (%a = %v : tensor<4x64xf32>) -> tensor<4x64xf32> {
    %e = tensor.empty() : tensor<4x64xf32>
    %r = linalg.generic {indexing_maps = [#mm, #mm], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4x64xf32>) outs(%e : tensor<4x64xf32>) {
    ^bb0(%i: f32, %o: f32):
      %t = math.exp %i : f32
      linalg.yield %t : f32
    } -> tensor<4x64xf32>
    fusion.yield %r : tensor<4x64xf32>
  }
  %out = fusion.group single (%a = %x : tensor<16x16xf32>) -> tensor<4x64xf32> {
    %r = tensor.collapse_shape %a [[0, 1]] : tensor<16x16xf32> into tensor<256xf32>
    %s = tensor.expand_shape %r [[0, 1]] output_shape [4, 64] : tensor<256xf32> into tensor<4x64xf32>
    fusion.yield %s : tensor<4x64xf32>
  }
  return %y, %out : tensor<4x64xf32>, tensor<4x64xf32>
}
