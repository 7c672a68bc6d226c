// RUN: fusec-opt %s '--fusion-cpu-vectorize{lanes=16}' --split-input-file | filecheck %s
// RUN: fusec-opt %s '--fusion-cpu-vectorize{lanes=8}' --split-input-file | filecheck %s --check-prefix=AVX2

// An elementwise epilogue (BatchNorm's scale + ReLU6) over 28-wide rows: one row at a time
// in vectors of 16, the second masked (12 of 16), the per-channel scale broadcast. LLVM,
// left with the scalar loops, unrolled the row and vectorized across channels (gathers).
// CHECK-LABEL: func.func @epilogue_rows
// CHECK: scf.for {{.+}} to %c24 step %c1
// CHECK: scf.for {{.+}} to %c28 step %c1
// CHECK: scf.for {{.+}} to %c28 step %c16
// CHECK: vector.create_mask {{.+}} : vector<16xi1>
// CHECK: vector.mask {{.+}} vector.transfer_read {{.+}} vector<16xf32>
// CHECK: arith.mulf {{.+}} : vector<16xf32>
// CHECK: arith.select {{.+}} : vector<16xi1>, vector<16xf32>
// CHECK: vector.mask {{.+}} vector.transfer_write
// CHECK-NOT: linalg.generic
// AVX2-LABEL: func.func @epilogue_rows
// AVX2: scf.for {{.+}} to %c28 step %c8
// AVX2: arith.mulf {{.+}} : vector<8xf32>
func.func @epilogue_rows(%x: memref<1x24x28x28xf32>, %s: memref<24x1x1xf32>, %y: memref<1x24x28x28xf32, strided<[150528, 784, 28, 1], offset: ?>>) {
  %zero = arith.constant 0.0 : f32
  %six = arith.constant 6.0 : f32
  linalg.generic {indexing_maps = [affine_map<(n, c, h, w) -> (n, c, h, w)>, affine_map<(n, c, h, w) -> (c, 0, 0)>, affine_map<(n, c, h, w) -> (n, c, h, w)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x, %s : memref<1x24x28x28xf32>, memref<24x1x1xf32>) outs(%y : memref<1x24x28x28xf32, strided<[150528, 784, 28, 1], offset: ?>>) {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %m = arith.mulf %a, %b : f32
    %p = arith.cmpf ogt, %m, %zero : f32
    %r = arith.select %p, %m, %zero : f32
    %q = arith.cmpf olt, %six, %r : f32
    %c = arith.select %q, %six, %r : f32
    linalg.yield %c : f32
  }
  return
}

// -----

// A depthwise 3x3 window (loops n, oh, c, kh, kw, ow; `--fusion-cpu-loop-order`'s order):
// the vector loop over ow goes inside c, the window's kh and kw loops inside it, each a
// vector FMA-shaped update of the same accumulator vector (the input row read at ow + kw,
// unit stride, the weight broadcast).
// CHECK-LABEL: func.func @depthwise_window
// CHECK: scf.for {{.+}} to %c24 step %c1
// CHECK: scf.for {{.+}} to %c28 step %c16
// CHECK: scf.for {{.+}} to %c3 step %c1
// CHECK: scf.for {{.+}} to %c3 step %c1
// CHECK: memref.load {{.+}} : memref<f32, {{.+}}>
// CHECK: vector.broadcast {{.+}} : f32 to vector<16xf32>
// CHECK: arith.mulf {{.+}} : vector<16xf32>
// CHECK: arith.addf {{.+}} : vector<16xf32>
// CHECK-NOT: linalg.generic
func.func @depthwise_window(%in: memref<1x24x30x30xf32>, %w: memref<24x3x3xf32>, %acc: memref<1x24x28x28xf32>) {
  linalg.generic {indexing_maps = [affine_map<(n, oh, c, kh, kw, ow) -> (n, c, oh + kh, ow + kw)>, affine_map<(n, oh, c, kh, kw, ow) -> (c, kh, kw)>, affine_map<(n, oh, c, kh, kw, ow) -> (n, c, oh, ow)>], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "parallel"]} ins(%in, %w : memref<1x24x30x30xf32>, memref<24x3x3xf32>) outs(%acc : memref<1x24x28x28xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %o, %m fastmath<reassoc> : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// What it leaves to LLVM, unchanged (transposes: @transposes_left_alone below): a stride-2
// window, a row sum (the last dim a reduction), an exp (expanded later, scalar,
// by --fusion-fast-exp), f64, rows shorter than half a vector, a window over 64 points (a
// contraction), a payload with a call (an index check's report).
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: vector.
// CHECK-COUNT-7: linalg.generic
// CHECK-NOT: vector.
func.func private @report(i64)
func.func @left_alone(%a: memref<32x32xf32>, %b: memref<32x32xf32>, %in: memref<8x30xf32>, %k: memref<3xf32>, %win: memref<8x14xf32>, %r: memref<32xf32>, %d: memref<32x32xf64>, %short: memref<32x4xf32>, %deep: memref<128x32xf32>) {
  linalg.generic {indexing_maps = [affine_map<(h, kw, w) -> (h, 2 * w + kw)>, affine_map<(h, kw, w) -> (kw)>, affine_map<(h, kw, w) -> (h, w)>], iterator_types = ["parallel", "reduction", "parallel"]} ins(%in, %k : memref<8x30xf32>, memref<3xf32>) outs(%win : memref<8x14xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types = ["parallel", "reduction"]} ins(%a : memref<32x32xf32>) outs(%r : memref<32xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.addf %o, %x : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%a : memref<32x32xf32>) outs(%b : memref<32x32xf32>) {
  ^bb0(%x: f32, %o: f32):
    %e = math.exp %x : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} outs(%d : memref<32x32xf64>) {
  ^bb0(%o: f64):
    %t = arith.addf %o, %o : f64
    linalg.yield %t : f64
  }
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} outs(%short : memref<32x4xf32>) {
  ^bb0(%o: f32):
    %t = arith.addf %o, %o : f32
    linalg.yield %t : f32
  }
  linalg.generic {indexing_maps = [affine_map<(i, k, j) -> (k, j)>, affine_map<(i, k, j) -> (i, j)>], iterator_types = ["parallel", "reduction", "parallel"]} ins(%deep : memref<128x32xf32>) outs(%b : memref<32x32xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.addf %o, %x : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} outs(%b : memref<32x32xf32>) {
  ^bb0(%o: f32):
    %i = arith.constant 7 : i64
    func.call @report(%i) : (i64) -> ()
    linalg.yield %o : f32
  }
  return
}

// -----

// A transpose (attention's K^T tile: the output's contiguous dim is the input's rows): in
// squares of 16 x 16 (AVX-512) or 8 x 8 (AVX2), each read as rows along the input's
// contiguous dim and transposed in registers by shuffles. LLVM, left with the scalar loops,
// gathered one element per lane.
// CHECK-LABEL: func.func @transpose_blocks
// CHECK: scf.for {{.+}} to %c64 step %c16
// CHECK: scf.for {{.+}} to %c128 step %c16
// CHECK: vector.transfer_read {{.+}} : memref<16x16xf32, strided<[64, 1], offset: ?>>, vector<16x16xf32>
// CHECK: vector.shuffle {{.+}} : vector<16xf32>, vector<16xf32>
// CHECK: vector.transfer_write {{.+}} : vector<16x16xf32>, memref<16x16xf32, strided<[128, 1], offset: ?>>
// CHECK-NOT: linalg.generic
// AVX2-LABEL: func.func @transpose_blocks
// AVX2: scf.for {{.+}} to %c64 step %c8
// AVX2: scf.for {{.+}} to %c128 step %c8
// AVX2: vector.transfer_read {{.+}} vector<8x8xf32>
// AVX2: vector.shuffle {{.+}} : vector<8xf32>, vector<8xf32>
// AVX2-NOT: linalg.generic
func.func @transpose_blocks(%in: memref<128x64xf32, strided<[64, 1], offset: ?>>, %out: memref<64x128xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%in : memref<128x64xf32, strided<[64, 1], offset: ?>>) outs(%out : memref<64x128xf32>) {
  ^bb0(%a: f32, %b: f32):
    linalg.yield %a : f32
  }
  return
}

// -----

// A permute that moves the last dim outward, extents 40 and 48: 16 divides only one, so
// blocks of 8 even at 16 lanes; the untouched dims are loops of one.
// CHECK-LABEL: func.func @permute_blocks_of_8
// CHECK: scf.for {{.+}} to %c2 step %c1
// CHECK: scf.for {{.+}} to %c3 step %c1
// CHECK: scf.for {{.+}} to %c40 step %c8
// CHECK: scf.for {{.+}} to %c48 step %c8
// CHECK: vector.transfer_read {{.+}} vector<8x8xf32>
// CHECK: vector.shuffle {{.+}} : vector<8xf32>, vector<8xf32>
// CHECK-NOT: linalg.generic
// AVX2-LABEL: func.func @permute_blocks_of_8
// AVX2: vector.transfer_read {{.+}} vector<8x8xf32>
// AVX2-NOT: linalg.generic
func.func @permute_blocks_of_8(%in: memref<2x3x48x40xf32>, %out: memref<2x40x3x48xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d2, d3, d1)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%in : memref<2x3x48x40xf32>) outs(%out : memref<2x40x3x48xf32>) {
  ^bb0(%a: f32, %b: f32):
    linalg.yield %a : f32
  }
  return
}

// -----

// What must stay as it is: a transpose no block divides (30 x 20: LLVM's loops), and a
// transpose that computes (x * 2: not a plain copy; left to LLVM as before).
// CHECK-LABEL: func.func @transposes_left_alone
// CHECK-NOT: vector.
// CHECK: linalg.generic
// CHECK-NOT: vector.
// CHECK: linalg.generic
// CHECK-NOT: vector.
// CHECK: return
// AVX2-LABEL: func.func @transposes_left_alone
// AVX2-COUNT-2: linalg.generic
func.func @transposes_left_alone(%in: memref<30x20xf32>, %out: memref<20x30xf32>, %a: memref<64x64xf32>, %b: memref<64x64xf32>) {
  %two = arith.constant 2.0 : f32
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%in : memref<30x20xf32>) outs(%out : memref<20x30xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  }
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a : memref<64x64xf32>) outs(%b : memref<64x64xf32>) {
  ^bb0(%x: f32, %y: f32):
    %m = arith.mulf %x, %two : f32
    linalg.yield %m : f32
  }
  return
}
