// RUN: fusec-opt %s '--fusion-cpu-matmul{mr=6,nr=16}' --split-input-file | filecheck %s --check-prefix=NR16
// RUN: fusec-opt %s '--fusion-cpu-matmul{mr=6,nr=64}' --split-input-file | filecheck %s --check-prefix=NR64

// Column blocks are whole vectors of a power-of-two width: a vector<6x12xf32> or
// vector<6x48xf32> is no register shape (LLVM legalizes such rows through the stack: 4.6
// GFLOP/s against 123 for 32 + 16 on one core). 60 columns with nr = 16: three blocks of
// 16, then the 12 left are cut into 8 and 4; with nr = 64 the op is narrower than a block:
// 32 (nr halved until it fits), then 16, 8 and 4 from the 28 left.
// NR16-LABEL: func.func @ragged_columns
// NR16: scf.for {{.+}} step %c16
// NR16: vector.transfer_write {{.+}} vector<6x16xf32>
// NR16: vector.transfer_write {{.+}} vector<6x8xf32>
// NR16: vector.transfer_write {{.+}} vector<6x4xf32>
// NR16-NOT: vector<6x12xf32>
// NR16-NOT: linalg.generic
// NR64-LABEL: func.func @ragged_columns
// NR64: vector.transfer_write {{.+}} vector<6x32xf32>
// NR64: vector.transfer_write {{.+}} vector<6x16xf32>
// NR64: vector.transfer_write {{.+}} vector<6x8xf32>
// NR64: vector.transfer_write {{.+}} vector<6x4xf32>
// NR64-NOT: vector<6x60xf32>
// NR64-NOT: vector<6x28xf32>
// NR64-NOT: vector<6x12xf32>
// NR64-NOT: linalg.generic
func.func @ragged_columns(%a: memref<6x8xf32>, %b: memref<8x60xf32>, %c: memref<6x60xf32>) {
  linalg.generic {indexing_maps = [affine_map<(i, k, j) -> (i, k)>, affine_map<(i, k, j) -> (k, j)>, affine_map<(i, k, j) -> (i, j)>], iterator_types = ["parallel", "reduction", "parallel"]} ins(%a, %b : memref<6x8xf32>, memref<8x60xf32>) outs(%c : memref<6x60xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m fastmath<reassoc> : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// What must not change: a width under one 4-lane vector after the cuts stays scalar (the
// 3 columns left of 63 - 60), and a power-of-two block is never cut.
// NR16-LABEL: func.func @tail_under_a_vector
// NR16: vector<6x4xf32>
// NR16: linalg.generic
// NR16-SAME: memref<8x3xf32
// NR64-LABEL: func.func @tail_under_a_vector
// NR64: vector<6x32xf32>
// NR64: linalg.generic
// NR64-SAME: memref<8x3xf32
func.func @tail_under_a_vector(%a: memref<6x8xf32>, %b: memref<8x63xf32>, %c: memref<6x63xf32>) {
  linalg.generic {indexing_maps = [affine_map<(i, k, j) -> (i, k)>, affine_map<(i, k, j) -> (k, j)>, affine_map<(i, k, j) -> (i, j)>], iterator_types = ["parallel", "reduction", "parallel"]} ins(%a, %b : memref<6x8xf32>, memref<8x63xf32>) outs(%c : memref<6x63xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m fastmath<reassoc> : f32
    linalg.yield %s : f32
  }
  return
}
