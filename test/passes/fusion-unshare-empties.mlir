// RUN: fusec-opt %s --fusion-unshare-empties | filecheck %s

// After CSE, the `tensor.empty`s of one type are one value: here the init of work computed
// beside the tile loop (read by the loop) and the loop's shared output. Bufferized so, the
// work outside would write the kernel's output buffer, and a kernel that writes its output
// outside its tile loop cannot be split across threads. Each use gets an empty of its own.
// CHECK-LABEL: func.func @shared
// CHECK: fusion.group
// CHECK: %[[E:.+]] = tensor.empty() : tensor<8x64xf32>
// CHECK: %[[E2:.+]] = tensor.empty() : tensor<8x64xf32>
// CHECK: linalg.generic {{.+}} outs(%[[E2]] : tensor<8x64xf32>)
// CHECK: scf.forall {{.+}} shared_outs(%{{.+}} = %[[E]])
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1, d0)>
module {
  func.func @shared(%arg0: tensor<8x64xf32>) -> tensor<8x64xf32> {
    %0 = fusion.group single (%arg1 = %arg0 : tensor<8x64xf32>) -> tensor<8x64xf32> {
      %e = tensor.empty() : tensor<8x64xf32>
      %w = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg1 : tensor<8x64xf32>) outs(%e : tensor<8x64xf32>) {
      ^bb0(%in: f32, %out: f32):
        %x = arith.addf %in, %in : f32
        linalg.yield %x : f32
      } -> tensor<8x64xf32>
      %r = scf.forall (%i) in (2) shared_outs(%o = %e) -> (tensor<8x64xf32>) {
        %off = affine.apply affine_map<(d0) -> (d0 * 4)>(%i)
        %s = tensor.extract_slice %w[%off, 0] [4, 64] [1, 1] : tensor<8x64xf32> to tensor<4x64xf32>
        %d = tensor.extract_slice %o[%off, 0] [4, 64] [1, 1] : tensor<8x64xf32> to tensor<4x64xf32>
        %t = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%s : tensor<4x64xf32>) outs(%d : tensor<4x64xf32>) {
        ^bb0(%in: f32, %out: f32):
          %x = arith.mulf %in, %in : f32
          linalg.yield %x : f32
        } -> tensor<4x64xf32>
        scf.forall.in_parallel {
          tensor.parallel_insert_slice %t into %o[%off, 0] [4, 64] [1, 1] : tensor<4x64xf32> into tensor<8x64xf32>
        }
      }
      fusion.yield %r : tensor<8x64xf32>
    }
    return %0 : tensor<8x64xf32>
  }
}
