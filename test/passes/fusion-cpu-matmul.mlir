// RUN: fusec-opt %s '--fusion-cpu-matmul{mr=6,nr=16}' --split-input-file | filecheck %s

// A matmul tile as --fusion-cpu-loop-order leaves it (i, k, j), 14x32 @ 32x32: column
// blocks of 16 (no remainder), row blocks of 6 (two full, one remainder of 2, static and so
// vectorized too), and for each a k loop carrying the 6x16 accumulator in registers:
// read before the loop, broadcast-FMAs inside, written after it. B (stride 32 floats) is
// packed into a contiguous 32x16 stack buffer, allocated once at the function's entry.
// CHECK-LABEL: func.func @matmul
// CHECK: %[[PACK:.+]] = memref.alloca() : memref<2048xi8>
// CHECK: scf.for %[[N:.+]] = %{{.+}} to %{{.+}} step %c16
// CHECK:   memref.view %[[PACK]]
// CHECK:   linalg.copy
// CHECK:   scf.for %[[M:.+]] = %{{.+}} to %{{.+}} step %c6
// CHECK:     %[[ACC0:.+]] = vector.transfer_read {{.+}} vector<6x16xf32>
// CHECK:     %[[ACC:.+]] = scf.for %{{.+}} iter_args(%[[X:.+]] = %[[ACC0]]) -> (vector<6x16xf32>)
// CHECK-NOT:   vector.transfer_write
// CHECK:       vector.broadcast {{.+}} : f32 to vector<16xf32>
// CHECK:       vector.fma
// CHECK:       scf.yield
// CHECK:     vector.transfer_write %[[ACC]], {{.+}} vector<6x16xf32>
// CHECK:   vector.transfer_read {{.+}} vector<2x16xf32>
// CHECK:   vector.transfer_write {{.+}} vector<2x16xf32>
// CHECK-NOT: linalg.generic
func.func @matmul(%a: memref<14x32xf32>, %b: memref<32x32xf32>, %c: memref<14x32xf32>) {
  linalg.generic {indexing_maps = [affine_map<(i, k, j) -> (i, k)>, affine_map<(i, k, j) -> (k, j)>, affine_map<(i, k, j) -> (i, j)>], iterator_types = ["parallel", "reduction", "parallel"]} ins(%a, %b : memref<14x32xf32>, memref<32x32xf32>) outs(%c : memref<14x32xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m fastmath<reassoc> : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A dynamic row count (a kernel's last, partial tile): the row loop is peeled, the full
// 6-row blocks are vectorized and the remainder rows stay a linalg.generic (scalar loops
// later). 19 columns: one 16-column block, then a 3-column remainder, too narrow for a
// vector, also left a linalg.generic.
// CHECK-LABEL: func.func @dynamic_rows
// CHECK: scf.for {{.+}} step %c6
// CHECK: vector.fma
// CHECK: scf.for {{.+}} step %c6
// CHECK: linalg.generic
// CHECK: linalg.generic
func.func @dynamic_rows(%a: memref<?x8xf32>, %b: memref<8x19xf32>, %c: memref<?x19xf32>) {
  linalg.generic {indexing_maps = [affine_map<(i, k, j) -> (i, k)>, affine_map<(i, k, j) -> (k, j)>, affine_map<(i, k, j) -> (i, j)>], iterator_types = ["parallel", "reduction", "parallel"]} ins(%a, %b : memref<?x8xf32>, memref<8x19xf32>) outs(%c : memref<?x19xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A batch matmul (b, i, k, j): the batch dim becomes a loop of single matmuls.
// CHECK-LABEL: func.func @bmm
// CHECK: scf.for {{.+}} step %c1
// CHECK: vector.fma
func.func @bmm(%a: memref<2x12x8xf32>, %b: memref<2x8x16xf32>, %c: memref<2x12x16xf32>) {
  linalg.generic {indexing_maps = [affine_map<(b, i, k, j) -> (b, i, k)>, affine_map<(b, i, k, j) -> (b, k, j)>, affine_map<(b, i, k, j) -> (b, i, j)>], iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%a, %b : memref<2x12x8xf32>, memref<2x8x16xf32>) outs(%c : memref<2x12x16xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Negative: elementwise generics, a row sum, and a matmul reading B down a column (B
// transposed, (j, k)) are not this pass's contractions: left untouched.
// CHECK-LABEL: func.func @not_contractions
// CHECK-NOT: vector.
// CHECK-NOT: scf.for
// CHECK: linalg.generic
// CHECK: linalg.generic
// CHECK: linalg.generic
func.func @not_contractions(%a: memref<16x16xf32>, %b: memref<16x16xf32>, %c: memref<16x16xf32>, %r: memref<16xf32>) {
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%a, %b : memref<16x16xf32>, memref<16x16xf32>) outs(%c : memref<16x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types = ["parallel", "reduction"]} ins(%a : memref<16x16xf32>) outs(%r : memref<16xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %acc, %x : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (i, k)>, affine_map<(i, j, k) -> (j, k)>, affine_map<(i, j, k) -> (i, j)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%a, %b : memref<16x16xf32>, memref<16x16xf32>) outs(%c : memref<16x16xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A deep K (512 > the depth block of 128 for nr = 16: an 8 KB packed block, kept in L1):
// K is tiled first, then the columns; each depth block packs its 128 x 16 part of B and
// adds into C what the blocks before it left there. A K within one block (the matmul
// above, K = 32) gets no depth loop.
// CHECK-LABEL: func.func @deep_k
// CHECK: %[[PACK:.+]] = memref.alloca() : memref<8192xi8>
// CHECK: scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c128
// CHECK:   scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c16
// CHECK:     linalg.copy
// CHECK:     scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c6
// CHECK:       vector.fma
func.func @deep_k(%a: memref<12x512xf32>, %b: memref<512x32xf32>, %c: memref<12x32xf32>) {
  linalg.generic {indexing_maps = [affine_map<(i, k, j) -> (i, k)>, affine_map<(i, k, j) -> (k, j)>, affine_map<(i, k, j) -> (i, j)>], iterator_types = ["parallel", "reduction", "parallel"]} ins(%a, %b : memref<12x512xf32>, memref<512x32xf32>) outs(%c : memref<12x32xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m fastmath<reassoc> : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A deep K that the depth block does not divide (700 = 5 x 128 + 60: the kc loop is
// peeled) around columns that nr does not divide (40 = 2 x 16 + 8: the n loop is peeled
// inside it). The inner loop is peeled first: peeling the kc loop clones its body, and the
// n loop's handle would not survive it (the transform sequence failed, an internal error of
// the `cpu` stage for any such Linear, e.g. a convolution's 147-deep im2col over 784 pixels).
// CHECK-LABEL: func.func @deep_and_ragged
// CHECK: scf.for {{.+}} step %c128
// CHECK: vector.fma
// CHECK: vector<6x8xf32>
// CHECK-NOT: linalg.generic {{.+}} ins({{.+}} : memref<14x700xf32>
func.func @deep_and_ragged(%a: memref<14x700xf32>, %b: memref<700x40xf32>, %c: memref<14x40xf32>) {
  linalg.generic {indexing_maps = [affine_map<(i, k, j) -> (i, k)>, affine_map<(i, k, j) -> (k, j)>, affine_map<(i, k, j) -> (i, j)>], iterator_types = ["parallel", "reduction", "parallel"]} ins(%a, %b : memref<14x700xf32>, memref<700x40xf32>) outs(%c : memref<14x40xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Columns split over two loops (a projection tiled with attention's head split: two heads
// of 64 in this tile, C[t, h, d] += A[t, k] * B[k, h, d]): merged into one column loop of 128
// through collapse_shape views of B and C, then the microkernel as for any matmul. Without
// the merge its matcher read `h` as the rows (2-row matmuls, 12 GFLOP/s).
// CHECK-LABEL: func.func @split_columns
// A view of unknown offset is collapsed; a whole buffer (C here) is reinterpreted instead,
// so that its loads keep linear indices (through a collapse_shape, fold-memref-alias-ops
// delinearizes each index: a division and a remainder, and LLVM packs B with gathers).
// CHECK-DAG: memref.collapse_shape %{{.+}} {{\[\[}}0], [1, 2]] : memref<96x2x64xf32, strided<[768, 64, 1], offset: ?>> into memref<96x128xf32, strided<[768, 1], offset: ?>>
// CHECK-DAG: memref.reinterpret_cast %{{.+}} to offset: [0], sizes: [30, 128], strides: [128, 1] : memref<30x2x64xf32> to memref<30x128xf32>
// CHECK: vector.fma
// CHECK: vector.transfer_write {{.+}} vector<6x16xf32>
func.func @split_columns(%a: memref<30x96xf32>, %b: memref<96x2x64xf32, strided<[768, 64, 1], offset: ?>>, %c: memref<30x2x64xf32>) {
  linalg.generic {indexing_maps = [affine_map<(t, h, k, d) -> (t, k)>, affine_map<(t, h, k, d) -> (k, h, d)>, affine_map<(t, h, k, d) -> (t, h, d)>], iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%a, %b : memref<30x96xf32>, memref<96x2x64xf32, strided<[768, 64, 1], offset: ?>>) outs(%c : memref<30x2x64xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Depth split over two loops (attention's output projection reading the heads merged:
// C[t, n] += A[t, h, d] * B[h, d, n]): one depth loop of 2 x 64.
// CHECK-LABEL: func.func @split_depth
// CHECK-DAG: memref.reinterpret_cast %{{.+}} to offset: [0], sizes: [30, 128], strides: [128, 1] : memref<30x2x64xf32> to memref<30x128xf32>
// CHECK-DAG: memref.reinterpret_cast %{{.+}} to offset: [0], sizes: [128, 48], strides: [48, 1] : memref<2x64x48xf32> to memref<128x48xf32>
// CHECK: vector.fma
func.func @split_depth(%a: memref<30x2x64xf32>, %b: memref<2x64x48xf32>, %c: memref<30x48xf32>) {
  linalg.generic {indexing_maps = [affine_map<(t, h, d, n) -> (t, h, d)>, affine_map<(t, h, d, n) -> (h, d, n)>, affine_map<(t, h, d, n) -> (t, n)>], iterator_types = ["parallel", "reduction", "reduction", "parallel"]} ins(%a, %b : memref<30x2x64xf32>, memref<2x64x48xf32>) outs(%c : memref<30x48xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Must not merge: the column loops' C is not one contiguous run per row (a tile of 32 of a
// head's 64 columns: stride 64 between heads, 32 wide), so no collapse_shape view exists;
// the op is left as it was (its `h` read as rows, as before).
// CHECK-LABEL: func.func @split_columns_gap
// CHECK-NOT: memref.collapse_shape
func.func @split_columns_gap(%a: memref<30x96xf32>, %b: memref<96x2x32xf32, strided<[768, 64, 1], offset: ?>>, %c: memref<30x2x32xf32, strided<[128, 64, 1], offset: ?>>) {
  linalg.generic {indexing_maps = [affine_map<(t, h, k, d) -> (t, k)>, affine_map<(t, h, k, d) -> (k, h, d)>, affine_map<(t, h, k, d) -> (t, h, d)>], iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%a, %b : memref<30x96xf32>, memref<96x2x32xf32, strided<[768, 64, 1], offset: ?>>) outs(%c : memref<30x2x32xf32, strided<[128, 64, 1], offset: ?>>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A kernel's column tile of a weight split into heads (its tile takes heads %h and %h + 1,
// each whole): the tile is viewed in the whole weight merged, at column %h * 64, so that the
// packing copy reads rows of consecutive floats. A view that cuts into a head (its columns
// 32.. of each) cannot be merged at all: the op is left to the loops.
// CHECK-LABEL: func.func @split_columns_tile
// CHECK: %[[W:.+]] = memref.reinterpret_cast %{{.+}} to offset: [0], sizes: [96, 1024], strides: [1024, 1] : memref<96x16x64xf32> to memref<96x1024xf32>
// CHECK: %[[COL:.+]] = arith.muli %{{.+}}, %c64 : index
// CHECK: memref.subview %[[W]][0, %[[COL]]] [96, 128] [1, 1] : memref<96x1024xf32> to memref<96x128xf32, strided<[1024, 1], offset: ?>>
// CHECK-NOT: memref.collapse_shape
// CHECK: vector.fma
// CHECK-LABEL: func.func @split_columns_cut_head
// CHECK-NOT: vector.fma
// CHECK: linalg.generic
func.func @split_columns_tile(%a: memref<30x96xf32>, %w: memref<96x16x64xf32>, %c: memref<30x2x64xf32>, %h: index) {
  %b = memref.subview %w[0, %h, 0] [96, 2, 64] [1, 1, 1] : memref<96x16x64xf32> to memref<96x2x64xf32, strided<[1024, 64, 1], offset: ?>>
  linalg.generic {indexing_maps = [affine_map<(t, h, k, d) -> (t, k)>, affine_map<(t, h, k, d) -> (k, h, d)>, affine_map<(t, h, k, d) -> (t, h, d)>], iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%a, %b : memref<30x96xf32>, memref<96x2x64xf32, strided<[1024, 64, 1], offset: ?>>) outs(%c : memref<30x2x64xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}
func.func @split_columns_cut_head(%a: memref<30x96xf32>, %w: memref<96x16x64xf32>, %c: memref<30x2x32xf32>, %h: index) {
  %b = memref.subview %w[0, %h, 32] [96, 2, 32] [1, 1, 1] : memref<96x16x64xf32> to memref<96x2x32xf32, strided<[1024, 64, 1], offset: ?>>
  linalg.generic {indexing_maps = [affine_map<(t, h, k, d) -> (t, k)>, affine_map<(t, h, k, d) -> (k, h, d)>, affine_map<(t, h, k, d) -> (t, h, d)>], iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%a, %b : memref<30x96xf32>, memref<96x2x32xf32, strided<[1024, 64, 1], offset: ?>>) outs(%c : memref<30x2x32xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}
