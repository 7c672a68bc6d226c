// RUN: fusec-opt %s '--fusion-tile{device=nvidia-h200}' --canonicalize --cse '--fusion-place{device=nvidia-h200}' '--fusion-capacity{device=nvidia-h200}' --split-input-file | filecheck %s

// One block's tile on the H200 (`cost_model.gpu_tile_sizes`), per kernel kind.

// Elementwise: a flat tile of 256 threads x 16 bytes (1024 fp32), innermost dim first.
// CHECK-LABEL: func.func @elementwise
// CHECK: fusion.group single
// CHECK-SAME: fusion.block = 256
// CHECK-SAME: fusion.capacity = "fits"
// CHECK-SAME: fusion.grid = 256
// CHECK-SAME: fusion.threads = 256
// CHECK-SAME: fusion.tile_kind = "elementwise"
// CHECK-SAME: fusion.tile_sizes = array<i64: 1, 1024>
// CHECK: scf.forall (%{{.+}}, %{{.+}}) in (64, 4)
// CHECK: linalg.generic {{.*}} ins(%{{.+}} : tensor<1x1024xf32>) {{.*}} {fusion.mem = #fusion.mem<global>}
// CHECK-NEXT: ^bb0
// CHECK-NEXT: math.exp
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @elementwise(%x: tensor<64x4096xf32>) -> tensor<64x4096xf32> {
  %r = fusion.group single (%a = %x : tensor<64x4096xf32>) -> tensor<64x4096xf32> {
    %e = tensor.empty() : tensor<64x4096xf32>
    %y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<64x4096xf32>) outs(%e : tensor<64x4096xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<64x4096xf32>
    fusion.yield %y : tensor<64x4096xf32>
  }
  return %r : tensor<64x4096xf32>
}

// -----

// A row kernel (exp, row sum, divide): one row per block, the reduced dim whole, 64 threads
// (16 fp32 of the row each: `cost_model.row_launch_shape`); exp's row is read twice (by the
// sum and the division), each element where it was made: kept in the threads' registers; the
// sum, combined across the block and read by every thread: shared.
// CHECK-LABEL: func.func @row
// CHECK: fusion.group vertical
// CHECK-SAME: fusion.block = 64
// CHECK-SAME: fusion.capacity = "fits"
// CHECK-SAME: fusion.grid = 64
// CHECK-SAME: fusion.tile_kind = "row"
// CHECK-SAME: fusion.tile_sizes = array<i64: 1, 0>
// CHECK: scf.forall (%{{.+}}) in (64)
// CHECK: %[[EXP:[0-9]+]] = linalg.generic {{.*}} outs(%{{.+}} : tensor<1x1024xf32>) {{.*}} {fusion.mem = #fusion.mem<register>}
// CHECK-NEXT: ^bb0
// CHECK-NEXT: math.exp
// CHECK: %[[SUM:[0-9]+]] = linalg.generic {{.*}} ins(%[[EXP]] : tensor<1x1024xf32>) {{.*}} {fusion.mem = #fusion.mem<shared>}
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}} ins(%[[EXP]], %[[SUM]] : {{.*}} {fusion.mem = #fusion.mem<global>}
// CHECK: arith.divf
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row2 = affine_map<(d0, d1) -> (d0)>
func.func @row(%x: tensor<64x1024xf32>) -> tensor<64x1024xf32> {
  %r = fusion.group vertical (%a = %x : tensor<64x1024xf32>) -> tensor<64x1024xf32> {
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<64xf32>
    %e2 = tensor.empty() : tensor<64x1024xf32>
    %exp = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<64x1024xf32>) outs(%e2 : tensor<64x1024xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<64x1024xf32>
    %fs = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64xf32>) -> tensor<64xf32>
    %s = linalg.generic {indexing_maps = [#id2, #row2], iterator_types = ["parallel", "reduction"]}
        ins(%exp : tensor<64x1024xf32>) outs(%fs : tensor<64xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<64xf32>
    %d = linalg.generic {indexing_maps = [#id2, #row2, #id2], iterator_types = ["parallel", "parallel"]}
        ins(%exp, %s : tensor<64x1024xf32>, tensor<64xf32>) outs(%e2 : tensor<64x1024xf32>) {
    ^bb0(%in: f32, %sum: f32, %out: f32):
      %q = arith.divf %in, %sum : f32
      linalg.yield %q : f32
    } -> tensor<64x1024xf32>
    fusion.yield %d : tensor<64x1024xf32>
  }
  return %r : tensor<64x1024xf32>
}

// -----

// A matmul with its bias epilogue that is not a library call (no `fusion.path`): the cost
// model's block tile would be 128 x 128 with the K loop inside, but the CUDA code generator
// builds no contraction tile of its own (matmuls are cuBLASLt calls, or the fallback path):
// that tiling is undone, and the group is tiled as the fallback path runs it, one tile (here
// one output element) per GPU thread, 128 threads per block, both refusals recorded. Never a
// tile that code generation does not build.
// CHECK-LABEL: func.func @matmul_bias
// CHECK: fusion.group epilogue
// CHECK-SAME: fusion.block = 128
// CHECK-SAME: fusion.fallback = "'linalg.matmul' is not supported by the CUDA code generator yet (data movement: 'linalg.matmul' is not a data-movement op) (tile emitter: a contraction tile is not a block of the fast emitter)"
// CHECK-SAME: fusion.grid = 65536
// CHECK-SAME: fusion.tile_kind = "thread"
// CHECK-SAME: fusion.tile_sizes = array<i64: 1, 1>
// CHECK-NOT: fusion.placement
// CHECK: scf.forall (%{{.+}}, %{{.+}}) in (256, 256)
// CHECK: linalg.generic {{.*}}["parallel", "parallel", "reduction"]{{.*}} outs(%{{.+}} : tensor<1x1xf32>)
// CHECK: return
#id3 = affine_map<(d0, d1) -> (d0, d1)>
#col3 = affine_map<(d0, d1) -> (d1)>
func.func @matmul_bias(%x: tensor<256x64xf32>, %w: tensor<64x256xf32>, %b: tensor<256xf32>) -> tensor<256x256xf32> {
  %r = fusion.group epilogue (%a = %x : tensor<256x64xf32>, %bw = %w : tensor<64x256xf32>, %bb = %b : tensor<256xf32>) -> tensor<256x256xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<256x256xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<256x256xf32>) -> tensor<256x256xf32>
    %m = linalg.matmul ins(%a, %bw : tensor<256x64xf32>, tensor<64x256xf32>) outs(%z : tensor<256x256xf32>) -> tensor<256x256xf32>
    %y = linalg.generic {indexing_maps = [#id3, #col3, #id3], iterator_types = ["parallel", "parallel"]}
        ins(%m, %bb : tensor<256x256xf32>, tensor<256xf32>) outs(%e : tensor<256x256xf32>) {
    ^bb0(%in: f32, %bias: f32, %out: f32):
      %s = arith.addf %in, %bias : f32
      linalg.yield %s : f32
    } -> tensor<256x256xf32>
    fusion.yield %y : tensor<256x256xf32>
  }
  return %r : tensor<256x256xf32>
}

// -----

// A cuBLASLt call (`fusion.path = "gemm"`, set by --fusion-gpu-kernels): not tiled, placed
// or checked: no kernel of ours.
// CHECK-LABEL: func.func @library_call
// CHECK: fusion.group epilogue
// CHECK-NOT: fusion.tile_sizes
// CHECK-NOT: fusion.placement
// CHECK-NOT: fusion.mem
// CHECK: return
func.func @library_call(%x: tensor<256x64xf32>, %w: tensor<64x256xf32>) -> tensor<256x256xf32> {
  %r = fusion.group epilogue (%a = %x : tensor<256x64xf32>, %b = %w : tensor<64x256xf32>) -> tensor<256x256xf32> attributes {fusion.path = "gemm"} {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<256x256xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<256x256xf32>) -> tensor<256x256xf32>
    %m = linalg.matmul ins(%a, %b : tensor<256x64xf32>, tensor<64x256xf32>) outs(%f : tensor<256x256xf32>) -> tensor<256x256xf32>
    fusion.yield %m : tensor<256x256xf32>
  }
  return %r : tensor<256x256xf32>
}

// -----

// A bias broadcast along the rows: a row tile (the last dim whole), the bias read by every
// row: its slice is the whole bias, read at the thread's columns.
// CHECK-LABEL: func.func @broadcast_rows
// CHECK: fusion.group single
// CHECK-SAME: fusion.block = 64
// CHECK-SAME: fusion.grid = 64
// CHECK-SAME: fusion.tile_kind = "row"
// CHECK-SAME: fusion.tile_sizes = array<i64: 1, 0>
// CHECK: scf.forall (%{{.+}}) in (64)
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %{{.+}} : tensor<1x1000xf32>, tensor<1000xf32>)
#bid = affine_map<(d0, d1) -> (d0, d1)>
#bcol = affine_map<(d0, d1) -> (d1)>
func.func @broadcast_rows(%x: tensor<64x1000xf32>, %b: tensor<1000xf32>) -> tensor<64x1000xf32> {
  %r = fusion.group single (%a = %x : tensor<64x1000xf32>, %c = %b : tensor<1000xf32>) -> tensor<64x1000xf32> {
    %e = tensor.empty() : tensor<64x1000xf32>
    %y = linalg.generic {indexing_maps = [#bid, #bcol, #bid], iterator_types = ["parallel", "parallel"]}
        ins(%a, %c : tensor<64x1000xf32>, tensor<1000xf32>) outs(%e : tensor<64x1000xf32>) {
    ^bb0(%in: f32, %bias: f32, %out: f32):
      %t = arith.addf %in, %bias : f32
      linalg.yield %t : f32
    } -> tensor<64x1000xf32>
    fusion.yield %y : tensor<64x1000xf32>
  }
  return %r : tensor<64x1000xf32>
}

// -----

// A transpose: no block of the tile emitter reads a transposed tile (its threads read and
// write the same positions), so the tiling is undone (the reason in `fusion.untiled`) and the
// group stays whole for the data-movement kernels (movement.py: squares through shared
// memory); it must not become the fallback's thread tiles.
// CHECK-LABEL: func.func @transpose
// CHECK: fusion.group single
// CHECK-SAME: fusion.untiled = "access pattern
// CHECK-NOT: fusion.fallback
// CHECK-NOT: scf.forall
// CHECK: return
#tin = affine_map<(d0, d1) -> (d1, d0)>
#tout = affine_map<(d0, d1) -> (d0, d1)>
func.func @transpose(%x: tensor<512x256xf32>) -> tensor<256x512xf32> {
  %r = fusion.group single (%a = %x : tensor<512x256xf32>) -> tensor<256x512xf32> {
    %e = tensor.empty() : tensor<256x512xf32>
    %y = linalg.generic {indexing_maps = [#tin, #tout], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<512x256xf32>) outs(%e : tensor<256x512xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<256x512xf32>
    fusion.yield %y : tensor<256x512xf32>
  }
  return %r : tensor<256x512xf32>
}

// -----

// A prime extent (1000003): no tile size divides it, tiles of 1024 leave a partial last tile,
// which the tile emitter does not build: undone, the reason recorded (built untiled by the
// group-level emitter, its grid-stride loop guarding the end).
// CHECK-LABEL: func.func @prime
// CHECK: fusion.group single
// CHECK-SAME: fusion.untiled = "a slice of dynamic size in a tile (a partial tile)"
// CHECK-NOT: scf.forall
// CHECK: return
#pid = affine_map<(d0) -> (d0)>
func.func @prime(%x: tensor<1000003xf32>) -> tensor<1000003xf32> {
  %r = fusion.group single (%a = %x : tensor<1000003xf32>) -> tensor<1000003xf32> {
    %e = tensor.empty() : tensor<1000003xf32>
    %y = linalg.generic {indexing_maps = [#pid, #pid], iterator_types = ["parallel"]}
        ins(%a : tensor<1000003xf32>) outs(%e : tensor<1000003xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<1000003xf32>
    fusion.yield %y : tensor<1000003xf32>
  }
  return %r : tensor<1000003xf32>
}

// -----

// A small group (37 values): one tile, no tile loop, one block of 64 threads.
// CHECK-LABEL: func.func @one_tile
// CHECK: fusion.group single
// CHECK-SAME: fusion.block = 64
// CHECK-SAME: fusion.grid = 1
// CHECK-SAME: fusion.tile_kind = "elementwise"
// CHECK-NOT: fusion.untiled
// CHECK-NOT: scf.forall
// CHECK: return
#oid = affine_map<(d0, d1) -> (d0, d1)>
func.func @one_tile(%x: tensor<37x1xf32>) -> tensor<37x1xf32> {
  %r = fusion.group single (%a = %x : tensor<37x1xf32>) -> tensor<37x1xf32> {
    %e = tensor.empty() : tensor<37x1xf32>
    %y = linalg.generic {indexing_maps = [#oid, #oid], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<37x1xf32>) outs(%e : tensor<37x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<37x1xf32>
    fusion.yield %y : tensor<37x1xf32>
  }
  return %r : tensor<37x1xf32>
}

// -----

// A reduction shorter than the tile's row (each row scaled by the sum of 12 other values):
// the tile emitter folds a row at its threads' positions, so it must not take a 12-value
// reduction in a 1000-value row tile: refused, neither emitter builds it, the fallback's
// thread tiles. (Found by review: the tile emitter used to fold 1000 values.)
// CHECK-LABEL: func.func @short_reduction
// CHECK: fusion.group vertical
// CHECK-SAME: fusion.fallback = "{{.*}}(tile emitter: a reduction of 12 values in a tile whose row has 1000)"
// CHECK-SAME: fusion.tile_kind = "thread"
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row2 = affine_map<(d0, d1) -> (d0)>
func.func @short_reduction(%x: tensor<64x1000xf32>, %w: tensor<64x12xf32>) -> tensor<64x1000xf32> {
  %r = fusion.group vertical (%a = %x : tensor<64x1000xf32>, %b = %w : tensor<64x12xf32>) -> tensor<64x1000xf32> {
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<64xf32>
    %e2 = tensor.empty() : tensor<64x1000xf32>
    %fs = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64xf32>) -> tensor<64xf32>
    %s = linalg.generic {indexing_maps = [#id2, #row2], iterator_types = ["parallel", "reduction"]}
        ins(%b : tensor<64x12xf32>) outs(%fs : tensor<64xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<64xf32>
    %d = linalg.generic {indexing_maps = [#id2, #row2, #id2], iterator_types = ["parallel", "parallel"]}
        ins(%a, %s : tensor<64x1000xf32>, tensor<64xf32>) outs(%e2 : tensor<64x1000xf32>) {
    ^bb0(%in: f32, %sum: f32, %out: f32):
      %q = arith.mulf %in, %sum : f32
      linalg.yield %q : f32
    } -> tensor<64x1000xf32>
    fusion.yield %d : tensor<64x1000xf32>
  }
  return %r : tensor<64x1000xf32>
}

// -----

// A result written through a transposing map: the threads store at their own positions, so a
// transpose on the way out is refused by the tile emitter; the group stays untiled for the
// data-movement kernels, not the fallback's thread tiles.
// CHECK-LABEL: func.func @transposed_output
// CHECK: fusion.group single
// CHECK-SAME: fusion.untiled = "an output written through {{.*}} (a transpose) in a tile"
// CHECK-NOT: fusion.tile_kind = "thread"
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#tr = affine_map<(d0, d1, d2) -> (d0, d2, d1)>
func.func @transposed_output(%x: tensor<64x32x32xf32>) -> tensor<64x32x32xf32> {
  %r = fusion.group single (%a = %x : tensor<64x32x32xf32>) -> tensor<64x32x32xf32> {
    %e = tensor.empty() : tensor<64x32x32xf32>
    %y = linalg.generic {indexing_maps = [#id, #tr], iterator_types = ["parallel", "parallel", "parallel"]}
        ins(%a : tensor<64x32x32xf32>) outs(%e : tensor<64x32x32xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<64x32x32xf32>
    fusion.yield %y : tensor<64x32x32xf32>
  }
  return %r : tensor<64x32x32xf32>
}

// -----

// The fallback path (a tile per thread) with a producer of a tensor.pad: the tiling keeps
// the producer beside the tile loop (computed whole), which on a GPU every thread would do,
// in a stack buffer the size of the tensor (the launch of a MobileNetV2 block failed with
// CUDA_ERROR_INVALID_VALUE). The group is cut there: what the tiling left outside (the exp)
// with what it reads is a kernel, the rest (the pad, now of a kernel input, and the conv)
// another, tiled with the pad of each thread's window in its loop. Not one kernel per op.
// CHECK-LABEL: func.func @pad_of_a_producer_before_a_conv
// CHECK: fusion.group single
// CHECK-SAME: fusion.split = "ops computed outside the tile loop would be computed whole by every thread of the fallback path: they and what they read are a kernel, the rest another"
// CHECK: math.exp
// CHECK: fusion.group vertical
// CHECK-SAME: fusion.split
// CHECK-SAME: fusion.tile_kind = "thread"
// CHECK: scf.forall
// CHECK: tensor.pad
// CHECK: linalg.generic {{.*}}"reduction"
// CHECK-NOT: fusion.group
// CHECK: return
#nchw = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @pad_of_a_producer_before_a_conv(%x: tensor<1x8x16x16xf32>, %w: tensor<8x8x3x3xf32>)
    -> tensor<1x8x16x16xf32> {
  %r = fusion.group vertical (%a = %x : tensor<1x8x16x16xf32>, %k = %w : tensor<8x8x3x3xf32>)
      -> tensor<1x8x16x16xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<1x8x16x16xf32>
    %act = linalg.generic {indexing_maps = [#nchw, #nchw],
        iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
        ins(%a : tensor<1x8x16x16xf32>) outs(%e : tensor<1x8x16x16xf32>) {
    ^bb0(%p: f32, %o: f32):
      %t = math.exp %p : f32
      linalg.yield %t : f32
    } -> tensor<1x8x16x16xf32>
    %padded = tensor.pad %act low[0, 0, 1, 1] high[0, 0, 1, 1] {
    ^bb0(%i: index, %j: index, %k2: index, %l: index):
      tensor.yield %zero : f32
    } : tensor<1x8x16x16xf32> to tensor<1x8x18x18xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x8x16x16xf32>) -> tensor<1x8x16x16xf32>
    %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
        ins(%padded, %k : tensor<1x8x18x18xf32>, tensor<8x8x3x3xf32>) outs(%f : tensor<1x8x16x16xf32>) -> tensor<1x8x16x16xf32>
    fusion.yield %c : tensor<1x8x16x16xf32>
  }
  return %r : tensor<1x8x16x16xf32>
}

// -----

// The same cut where the conv's init is a fill of a reshaped empty tensor (ViT's softmax
// rows, `tensor<1x4x65x1xf32>` expanded from an empty `1x4x65`): the reshape of an empty is
// an empty tensor of the new shape, cloned into the fill's kernel; it must not become a
// kernel of its own (one that yields an empty tensor: nothing any emitter can build).
// CHECK-LABEL: func.func @split_with_a_reshaped_empty_init
// CHECK: fusion.group single
// CHECK: math.exp
// CHECK-NOT: tensor.expand_shape
// CHECK: fusion.group vertical
// CHECK: %[[E:.+]] = tensor.empty() : tensor<1x8x16x16xf32>
// CHECK: scf.forall {{.*}} shared_outs(%{{.+}} = %[[E]])
// CHECK: tensor.pad
// CHECK: linalg.generic {{.*}}"reduction"
// CHECK-NOT: tensor.expand_shape
// CHECK-NOT: fusion.group
// CHECK: return
#nchw = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @split_with_a_reshaped_empty_init(%x: tensor<1x8x16x16xf32>, %w: tensor<8x8x3x3xf32>)
    -> tensor<1x8x16x16xf32> {
  %r = fusion.group vertical (%a = %x : tensor<1x8x16x16xf32>, %k = %w : tensor<8x8x3x3xf32>)
      -> tensor<1x8x16x16xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<1x8x16x16xf32>
    %flat = tensor.empty() : tensor<1x8x256xf32>
    %act = linalg.generic {indexing_maps = [#nchw, #nchw],
        iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
        ins(%a : tensor<1x8x16x16xf32>) outs(%e : tensor<1x8x16x16xf32>) {
    ^bb0(%p: f32, %o: f32):
      %t = math.exp %p : f32
      linalg.yield %t : f32
    } -> tensor<1x8x16x16xf32>
    %padded = tensor.pad %act low[0, 0, 1, 1] high[0, 0, 1, 1] {
    ^bb0(%i: index, %j: index, %k2: index, %l: index):
      tensor.yield %zero : f32
    } : tensor<1x8x16x16xf32> to tensor<1x8x18x18xf32>
    %init = tensor.expand_shape %flat [[0], [1], [2, 3]] output_shape [1, 8, 16, 16]
        : tensor<1x8x256xf32> into tensor<1x8x16x16xf32>
    %f = linalg.fill ins(%zero : f32) outs(%init : tensor<1x8x16x16xf32>) -> tensor<1x8x16x16xf32>
    %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
        ins(%padded, %k : tensor<1x8x18x18xf32>, tensor<8x8x3x3xf32>) outs(%f : tensor<1x8x16x16xf32>) -> tensor<1x8x16x16xf32>
    fusion.yield %c : tensor<1x8x16x16xf32>
  }
  return %r : tensor<1x8x16x16xf32>
}
