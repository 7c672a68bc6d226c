// RUN: fusec-opt %s --fusion-fold-empty-iterations --split-input-file | filecheck %s

// torch.mm of 5x0 by 0x10: no iteration, the result is the zero fill.
// CHECK-LABEL: func.func @zero_k(
// CHECK:         %[[F:.+]] = linalg.fill
// CHECK-NOT:     linalg.matmul
// CHECK:         return %[[F]]
func.func @zero_k(%a: tensor<5x0xf32>, %b: tensor<0x10xf32>) -> tensor<5x10xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<5x10xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<5x10xf32>) -> tensor<5x10xf32>
  %m = linalg.matmul ins(%a, %b : tensor<5x0xf32>, tensor<0x10xf32>)
                     outs(%f : tensor<5x10xf32>) -> tensor<5x10xf32>
  return %m : tensor<5x10xf32>
}

// -----

// The same for a batched contraction written as a generic (a sum over an empty dim).
// CHECK-LABEL: func.func @zero_k_generic(
// CHECK-SAME:      %{{[^:]+}}: tensor<2x3x0xf32>, %[[F:[^:]+]]: tensor<2x3xf32>)
// CHECK-NOT:     linalg.generic
// CHECK:         return %[[F]] : tensor<2x3xf32>
func.func @zero_k_generic(%a: tensor<2x3x0xf32>, %f: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>,
                                        affine_map<(d0, d1, d2) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a : tensor<2x3x0xf32>) outs(%f : tensor<2x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  } -> tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}

// -----

// Non-empty inputs, and a generic whose map is not a projected permutation (a constant
// index may read outside an empty dim's range), are left alone.
// CHECK-LABEL: func.func @kept(
// CHECK:         linalg.matmul
// CHECK:         linalg.generic
func.func @kept(%a: tensor<5x2xf32>, %b: tensor<2x10xf32>, %c: tensor<5x10xf32>,
                %z: tensor<0x4xf32>, %o: tensor<4xf32>) -> (tensor<5x10xf32>, tensor<4xf32>) {
  %m = linalg.matmul ins(%a, %b : tensor<5x2xf32>, tensor<2x10xf32>)
                     outs(%c : tensor<5x10xf32>) -> tensor<5x10xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(d0) -> (0, d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%z : tensor<0x4xf32>) outs(%o : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4xf32>
  return %m, %g : tensor<5x10xf32>, tensor<4xf32>
}

// -----

// An op whose result has no element writes nothing, whatever its maps.
// CHECK-LABEL: func.func @empty_result(
// CHECK-SAME:      %{{[^:]+}}: tensor<2x4xf32>, %[[O:[^:]+]]: tensor<2x0xf32>)
// CHECK-NOT:     linalg.
// CHECK:         return %[[O]] : tensor<2x0xf32>
func.func @empty_result(%a: tensor<2x4xf32>, %o: tensor<2x0xf32>) -> tensor<2x0xf32> {
  %g = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, 0)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<2x4xf32>) outs(%o : tensor<2x0xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x0xf32>
  return %g : tensor<2x0xf32>
}

// -----

// MobileBERT's trigram embedding of a one-token sequence: x[:, 1:] and x[:, :-1] have no
// elements, each padded back to one token (torch-mlir gives the offset 1 as a value). The
// slices become tensor.empty (once the 1 is folded, a view at offset 1 of a size-1 dim does not
// verify: the bufferized stage failed), the pads fills of the pad value.
// CHECK-LABEL: func.func @one_token_trigram(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<1x1x8xf32>
// CHECK-NOT:     tensor.extract_slice
// CHECK-NOT:     tensor.pad
// CHECK:         %[[E1:.+]] = tensor.empty() : tensor<1x1x8xf32>
// CHECK:         %[[F1:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%[[E1]] : tensor<1x1x8xf32>)
// CHECK:         %[[E2:.+]] = tensor.empty() : tensor<1x1x8xf32>
// CHECK:         %[[F2:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%[[E2]] : tensor<1x1x8xf32>)
// CHECK:         tensor.concat dim(2) %[[F1]], %[[X]], %[[F2]]
func.func @one_token_trigram(%x: tensor<1x1x8xf32>) -> tensor<1x1x24xf32> {
  %cst = arith.constant 0.0 : f32
  %c1 = arith.constant 1 : index
  %next = tensor.extract_slice %x[0, %c1, 0] [1, 0, 8] [1, 1, 1] : tensor<1x1x8xf32> to tensor<1x0x8xf32>
  %a = tensor.pad %next low[0, 0, 0] high[0, 1, 0] {
  ^bb0(%i: index, %j: index, %k: index):
    tensor.yield %cst : f32
  } : tensor<1x0x8xf32> to tensor<1x1x8xf32>
  %prev = tensor.extract_slice %x[0, 0, 0] [1, 0, 8] [1, 1, 1] : tensor<1x1x8xf32> to tensor<1x0x8xf32>
  %b = tensor.pad %prev low[0, 1, 0] high[0, 0, 0] {
  ^bb0(%i: index, %j: index, %k: index):
    tensor.yield %cst : f32
  } : tensor<1x0x8xf32> to tensor<1x1x8xf32>
  %c = tensor.concat dim(2) %a, %x, %b : (tensor<1x1x8xf32>, tensor<1x1x8xf32>, tensor<1x1x8xf32>) -> tensor<1x1x24xf32>
  return %c : tensor<1x1x24xf32>
}

// -----

// Inserting nothing leaves the destination; a slice with elements and a pad whose value is
// computed in its body (per index) are left as they are.
// CHECK-LABEL: func.func @insert_nothing_and_what_stays(
// CHECK-SAME:      %[[D:[^:]+]]: tensor<4x8xf32>
// CHECK-NOT:     tensor.insert_slice
// CHECK:         tensor.extract_slice %[[D]][0, 0] [2, 8]
// CHECK:         tensor.pad
// CHECK:         arith.index_cast
// CHECK:         return %[[D]]
func.func @insert_nothing_and_what_stays(%d: tensor<4x8xf32>, %n: tensor<0x8xf32>) -> (tensor<4x8xf32>, tensor<2x8xf32>, tensor<1x8xf32>) {
  %r = tensor.insert_slice %n into %d[1, 0] [0, 8] [1, 1] : tensor<0x8xf32> into tensor<4x8xf32>
  %s = tensor.extract_slice %d[0, 0] [2, 8] [1, 1] : tensor<4x8xf32> to tensor<2x8xf32>
  %p = tensor.pad %n low[1, 0] high[0, 0] {
  ^bb0(%i: index, %j: index):
    %v = arith.index_cast %j : index to i64
    %f = arith.sitofp %v : i64 to f32
    tensor.yield %f : f32
  } : tensor<0x8xf32> to tensor<1x8xf32>
  return %r, %s, %p : tensor<4x8xf32>, tensor<2x8xf32>, tensor<1x8xf32>
}
