// RUN: fusec-opt %s --fusion-gpu-erase-dead-groups | filecheck %s

// A group none of whose results is used (what an absorbed layout leaves) is erased; a used
// one stays.
// CHECK-LABEL: func.func @main
// CHECK-NOT: math.exp
// CHECK: %[[U:.+]] = fusion.group single
// CHECK: math.tanh
// CHECK: return %[[U]]
#id = affine_map<(d0) -> (d0)>
func.func @main(%x: tensor<16xf32>) -> tensor<16xf32> {
  %unused = fusion.group single (%a = %x : tensor<16xf32>) -> tensor<16xf32> {
    %e = tensor.empty() : tensor<16xf32>
    %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%a : tensor<16xf32>) outs(%e : tensor<16xf32>) {
    ^bb0(%i: f32, %o: f32):
      %t = math.exp %i : f32
      linalg.yield %t : f32
    } -> tensor<16xf32>
    fusion.yield %r : tensor<16xf32>
  }
  %used = fusion.group single (%a = %x : tensor<16xf32>) -> tensor<16xf32> {
    %e = tensor.empty() : tensor<16xf32>
    %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%a : tensor<16xf32>) outs(%e : tensor<16xf32>) {
    ^bb0(%i: f32, %o: f32):
      %t = math.tanh %i : f32
      linalg.yield %t : f32
    } -> tensor<16xf32>
    fusion.yield %r : tensor<16xf32>
  }
  return %used : tensor<16xf32>
}
