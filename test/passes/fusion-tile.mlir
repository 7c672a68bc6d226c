// RUN: fusec-opt %s '--fusion-tile{threads=4,min-tile-kb=1}' --canonicalize --cse --split-input-file | filecheck %s

// A row reduction and its consumer: the root (the division) is tiled over rows only, so
// each tile holds whole rows; the reduction is fused into the tile loop, nothing is left
// outside it, and the tile sizes and tile count are recorded on the group.
// CHECK-LABEL: func.func @row_softmax_tail
// CHECK: fusion.group reduction
// CHECK-SAME: fusion.grid = 16 : i64
// CHECK-SAME: fusion.ops = ["linalg.fill", "linalg.reduce", "linalg.generic"]
// CHECK-SAME: fusion.tile_sizes = array<i64: 4, 0>
// CHECK-NOT: linalg.
// CHECK: %[[LOOP:.+]] = scf.forall (%{{.+}}) in (16) shared_outs
// CHECK: %[[ROWS:.+]] = tensor.extract_slice %{{.+}} [4, 256] [1, 1] : tensor<64x256xf32> to tensor<4x256xf32>
// CHECK: %[[SUM:.+]] = linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}} ins(%[[ROWS]] : tensor<4x256xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[ROWS]], %[[SUM]] : tensor<4x256xf32>, tensor<4xf32>)
// CHECK: scf.forall.in_parallel
// CHECK-NOT: linalg.
// CHECK: fusion.yield %[[LOOP]]
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @row_softmax_tail(%x: tensor<64x256xf32>) -> tensor<64x256xf32> {
  %r = fusion.group reduction (%a = %x : tensor<64x256xf32>) -> tensor<64x256xf32> {
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<64xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64xf32>) -> tensor<64xf32>
    %s = linalg.reduce ins(%a : tensor<64x256xf32>) outs(%f : tensor<64xf32>) dimensions = [1]
      (%in: f32, %acc: f32) {
        %t = arith.addf %in, %acc : f32
        linalg.yield %t : f32
      }
    %e2 = tensor.empty() : tensor<64x256xf32>
    %d = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a, %s : tensor<64x256xf32>, tensor<64xf32>) outs(%e2 : tensor<64x256xf32>) {
    ^bb0(%in: f32, %sum: f32, %out: f32):
      %q = arith.divf %in, %sum : f32
      linalg.yield %q : f32
    } -> tensor<64x256xf32>
    fusion.yield %d : tensor<64x256xf32>
  }
  return %r : tensor<64x256xf32>
}

// -----

// Negative: too little work for more than one tile. Nothing is tiled; the group is one tile.
// CHECK-LABEL: func.func @too_small
// CHECK: fusion.group single
// CHECK-SAME: fusion.grid = 1 : i64
// CHECK-NOT: fusion.tile_sizes
// CHECK-NOT: scf.forall
// CHECK: fusion.yield
func.func @too_small(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = fusion.group single (%a = %x : tensor<4x8xf32>) -> tensor<4x8xf32> {
    %e = tensor.empty() : tensor<4x8xf32>
    %y = linalg.exp ins(%a : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    fusion.yield %y : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// -----

// The root's init is a group input (read-only in the kernel): the root gets a fresh init,
// and the copy of the input is fused into the tiles instead of being done whole up front.
// CHECK-LABEL: func.func @matmul_init_from_input
// CHECK-SAME: %{{.+}}: tensor<64x32xf32>, %{{.+}}: tensor<32x64xf32>, %[[C:.+]]: tensor<64x64xf32>
// CHECK: fusion.group single (%{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}, %[[Z:.+]] = %[[C]] : tensor<64x64xf32>)
// CHECK: %[[E:.+]] = tensor.empty() : tensor<64x64xf32>
// CHECK: scf.forall (%{{.+}}) in (2) shared_outs(%{{.+}} = %[[E]])
// CHECK: %[[INIT:.+]] = tensor.extract_slice %[[Z]]
// CHECK: %[[COPY:.+]] = linalg.copy {{.*}}ins(%[[INIT]] : tensor<32x64xf32>)
// CHECK: linalg.generic {{.*}} outs(%[[COPY]] : tensor<32x64xf32>)
func.func @matmul_init_from_input(%a: tensor<64x32xf32>, %b: tensor<32x64xf32>, %c: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %r = fusion.group single (%x = %a : tensor<64x32xf32>, %y = %b : tensor<32x64xf32>, %z = %c : tensor<64x64xf32>) -> tensor<64x64xf32> {
    %m = linalg.matmul ins(%x, %y : tensor<64x32xf32>, tensor<32x64xf32>) outs(%z : tensor<64x64xf32>) -> tensor<64x64xf32>
    fusion.yield %m : tensor<64x64xf32>
  }
  return %r : tensor<64x64xf32>
}

// -----

// The fusion planner's `fusion.tile_dims` says which loops of the group's last op may be
// split (here only the columns): the tiles follow it.
// CHECK-LABEL: func.func @planner_tile_dims
// CHECK: fusion.tile_sizes = array<i64: 0, {{[0-9]+}}>
// CHECK: scf.forall
func.func @planner_tile_dims(%x: tensor<64x256xf32>) -> tensor<64x256xf32> {
  %r = fusion.group single (%a = %x : tensor<64x256xf32>) -> tensor<64x256xf32> attributes {fusion.tile_dims = [1 : i64]} {
    %e = tensor.empty() : tensor<64x256xf32>
    %y = linalg.exp ins(%a : tensor<64x256xf32>) outs(%e : tensor<64x256xf32>) -> tensor<64x256xf32>
    fusion.yield %y : tensor<64x256xf32>
  }
  return %r : tensor<64x256xf32>
}

// -----

// A matmul-rooted kernel on the CPU: its row tile is made of whole 6-row microkernel blocks
// (`--fusion-cpu-matmul`, mr = 6), at least 24 rows, and divides M so that every tile's row
// count is static (a dynamic remainder would run as scalar loops): 96 rows in 4 tiles of 24
// where the policy alone gives 16 tiles of 6.
// CHECK-LABEL: func.func @matmul_row_tile
// CHECK: fusion.group single
// CHECK-SAME: fusion.grid = 4 : i64
// CHECK-SAME: fusion.tile_sizes = array<i64: 24, 0, 0>
// CHECK: scf.forall (%{{.+}}) in (4)
func.func @matmul_row_tile(%a: tensor<96x32xf32>, %b: tensor<32x64xf32>) -> tensor<96x64xf32> {
  %r = fusion.group single (%x = %a : tensor<96x32xf32>, %y = %b : tensor<32x64xf32>) -> tensor<96x64xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<96x64xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<96x64xf32>) -> tensor<96x64xf32>
    %m = linalg.matmul ins(%x, %y : tensor<96x32xf32>, tensor<32x64xf32>) outs(%f : tensor<96x64xf32>) -> tensor<96x64xf32>
    fusion.yield %m : tensor<96x64xf32>
  }
  return %r : tensor<96x64xf32>
}

// -----

// A prime row count (ViT's 197 tokens) has no divisor to make row tiles of: one tile would
// leave every thread but one idle (a Linear 768 -> 3072 at 197 rows: 6.8 ms in one tile,
// 3.3 ms in eight on two threads), so the columns are split, in whole 32-column quanta,
// although B fits in L2: here 256 columns make no 16 tiles (threads x tiles-per-thread) of
// whole quanta, so one per thread. It must not stay one tile (@short_matmul below stays
// one: its 2.6 MFLOP are too little work for four threads).
// CHECK-LABEL: func.func @matmul_prime_rows
// CHECK: fusion.group single
// CHECK-SAME: fusion.grid = 4 : i64
// CHECK-SAME: fusion.tile_sizes = array<i64: 0, 64, 0>
// CHECK: scf.forall (%{{.+}}) in (4)
func.func @matmul_prime_rows(%a: tensor<97x256xf32>, %b: tensor<256x256xf32>) -> tensor<97x256xf32> {
  %r = fusion.group single (%x = %a : tensor<97x256xf32>, %y = %b : tensor<256x256xf32>) -> tensor<97x256xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<97x256xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<97x256xf32>) -> tensor<97x256xf32>
    %m = linalg.matmul ins(%x, %y : tensor<97x256xf32>, tensor<256x256xf32>) outs(%f : tensor<97x256xf32>) -> tensor<97x256xf32>
    fusion.yield %m : tensor<97x256xf32>
  }
  return %r : tensor<97x256xf32>
}

// -----

// Not a matmul: the same iteration space keeps the policy's 6-row tiles.
// CHECK-LABEL: func.func @elementwise_row_tile
// CHECK: fusion.group single
// CHECK-SAME: fusion.tile_sizes = array<i64: 6, 0>
func.func @elementwise_row_tile(%a: tensor<96x64xf32>) -> tensor<96x64xf32> {
  %r = fusion.group single (%x = %a : tensor<96x64xf32>) -> tensor<96x64xf32> {
    %e = tensor.empty() : tensor<96x64xf32>
    %y = linalg.exp ins(%x : tensor<96x64xf32>) outs(%e : tensor<96x64xf32>) -> tensor<96x64xf32>
    fusion.yield %y : tensor<96x64xf32>
  }
  return %r : tensor<96x64xf32>
}

// -----

// A matmul with fewer than 24 rows: whole, one tile.
// CHECK-LABEL: func.func @short_matmul
// CHECK: fusion.group single
// CHECK-SAME: fusion.grid = 1 : i64
// CHECK-NOT: scf.forall
// CHECK: return
func.func @short_matmul(%a: tensor<20x256xf32>, %b: tensor<256x256xf32>) -> tensor<20x256xf32> {
  %r = fusion.group single (%x = %a : tensor<20x256xf32>, %y = %b : tensor<256x256xf32>) -> tensor<20x256xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<20x256xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<20x256xf32>) -> tensor<20x256xf32>
    %m = linalg.matmul ins(%x, %y : tensor<20x256xf32>, tensor<256x256xf32>) outs(%f : tensor<20x256xf32>) -> tensor<20x256xf32>
    fusion.yield %m : tensor<20x256xf32>
  }
  return %r : tensor<20x256xf32>
}

// -----

// Negative: a producer whose result leaves the group (the residual sum, yielded) and is read
// by the root only through a stride-2 window (a 1x1 downsample convolution) is not fused into
// the tile loop: the tiles would compute only the sampled pixels (rows and columns 0..14 of
// 16), and the group's result would be written only there. It is computed whole before the
// loop, the reason recorded in `fusion.whole`, and the loop yields only the convolution.
// CHECK-LABEL: func.func @strided_read_of_a_yielded_sum
// CHECK: fusion.group vertical
// CHECK-SAME: fusion.whole = ["linalg.generic (op 0): its result leaves the kernel but the tiles read only part of it
// CHECK: %[[SUM:.+]] = linalg.generic {{.*}} ins(%{{.+}}, %{{.+}} : tensor<2x16x16x16xf32>, tensor<2x16x16x16xf32>)
// CHECK: %[[LOOP:.+]] = scf.forall (%{{.+}}) in (2) shared_outs(%{{.+}} = %{{.+}}) -> (tensor<2x32x8x8xf32>)
// CHECK: tensor.extract_slice %[[SUM]]
// CHECK-NOT: tensor.parallel_insert_slice {{.*}} into {{.*}} tensor<2x16x16x16xf32>
// CHECK: fusion.yield %[[SUM]], %[[LOOP]]
#nchw = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @strided_read_of_a_yielded_sum(%a: tensor<2x16x16x16xf32>, %b: tensor<2x16x16x16xf32>,
    %w: tensor<32x16x1x1xf32>) -> (tensor<2x16x16x16xf32>, tensor<2x32x8x8xf32>) {
  %r:2 = fusion.group vertical (%x = %a : tensor<2x16x16x16xf32>, %y = %b : tensor<2x16x16x16xf32>,
      %k = %w : tensor<32x16x1x1xf32>) -> (tensor<2x16x16x16xf32>, tensor<2x32x8x8xf32>)
      attributes {fusion.tile_dims = [0]} {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<2x16x16x16xf32>
    %sum = linalg.generic {indexing_maps = [#nchw, #nchw, #nchw],
        iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
        ins(%x, %y : tensor<2x16x16x16xf32>, tensor<2x16x16x16xf32>) outs(%e : tensor<2x16x16x16xf32>) {
    ^bb0(%p: f32, %q: f32, %o: f32):
      %s = arith.addf %p, %q : f32
      linalg.yield %s : f32
    } -> tensor<2x16x16x16xf32>
    %e2 = tensor.empty() : tensor<2x32x8x8xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2x32x8x8xf32>) -> tensor<2x32x8x8xf32>
    %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
        ins(%sum, %k : tensor<2x16x16x16xf32>, tensor<32x16x1x1xf32>) outs(%f : tensor<2x32x8x8xf32>) -> tensor<2x32x8x8xf32>
    fusion.yield %sum, %c : tensor<2x16x16x16xf32>, tensor<2x32x8x8xf32>
  }
  return %r#0, %r#1 : tensor<2x16x16x16xf32>, tensor<2x32x8x8xf32>
}

// -----

// The same sum read by an elementwise root through the identity map is fused: the tiles
// cover it exactly, so the loop computes it tile by tile and yields it as a second shared
// output. The loop's inserts are in the order of its shared outputs (fuse_into_containing_op
// puts the new one first; a one-tile loop folded by the canonicalizer pairs them by
// position), so the group's results are not swapped.
// CHECK-LABEL: func.func @identity_read_of_a_yielded_sum
// CHECK: fusion.group vertical
// CHECK-NOT: fusion.whole
// CHECK: %[[LOOP:.+]]:2 = scf.forall (%{{.+}}) in (2) shared_outs(%[[O0:.+]] = %{{.+}}, %[[O1:.+]] = %{{.+}})
// CHECK: scf.forall.in_parallel
// CHECK-NEXT: tensor.parallel_insert_slice %{{.+}} into %[[O0]]
// CHECK-NEXT: tensor.parallel_insert_slice %{{.+}} into %[[O1]]
// CHECK: fusion.yield %[[LOOP]]#1, %[[LOOP]]#0
#nchw = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @identity_read_of_a_yielded_sum(%a: tensor<2x16x16x16xf32>, %b: tensor<2x16x16x16xf32>)
    -> (tensor<2x16x16x16xf32>, tensor<2x16x16x16xf32>) {
  %r:2 = fusion.group vertical (%x = %a : tensor<2x16x16x16xf32>, %y = %b : tensor<2x16x16x16xf32>)
      -> (tensor<2x16x16x16xf32>, tensor<2x16x16x16xf32>) attributes {fusion.tile_dims = [0]} {
    %e = tensor.empty() : tensor<2x16x16x16xf32>
    %sum = linalg.generic {indexing_maps = [#nchw, #nchw, #nchw],
        iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
        ins(%x, %y : tensor<2x16x16x16xf32>, tensor<2x16x16x16xf32>) outs(%e : tensor<2x16x16x16xf32>) {
    ^bb0(%p: f32, %q: f32, %o: f32):
      %s = arith.addf %p, %q : f32
      linalg.yield %s : f32
    } -> tensor<2x16x16x16xf32>
    %e2 = tensor.empty() : tensor<2x16x16x16xf32>
    %relu = linalg.generic {indexing_maps = [#nchw, #nchw],
        iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
        ins(%sum : tensor<2x16x16x16xf32>) outs(%e2 : tensor<2x16x16x16xf32>) {
    ^bb0(%p: f32, %o: f32):
      %z = arith.constant 0.0 : f32
      %m = arith.maximumf %p, %z : f32
      linalg.yield %m : f32
    } -> tensor<2x16x16x16xf32>
    fusion.yield %sum, %relu : tensor<2x16x16x16xf32>, tensor<2x16x16x16xf32>
  }
  return %r#0, %r#1 : tensor<2x16x16x16xf32>, tensor<2x16x16x16xf32>
}

// -----

// Two max pools in a row starting from one shared fill(-inf) (torch-mlir's CSE): each gets
// a fill of its own before tiling, so the second pool starts from -inf in every tile, not
// from the loop's output slice (it read uninitialised memory on the GPU).
// CHECK-LABEL: func.func @pools_sharing_a_fill
// CHECK: scf.forall
// CHECK: %[[F1:.+]] = linalg.generic {{.*}} outs(%{{.+}} : tensor<1x4x8x8xf32>)
// CHECK: %[[P1:.+]] = linalg.generic {{.*}}"reduction"{{.*}} outs(%[[F1]] : tensor<1x4x8x8xf32>)
// CHECK: %[[F2:.+]] = linalg.generic {{.*}} outs(%{{.+}} : tensor<1x4x8x8xf32>)
// CHECK: linalg.generic {{.*}}"reduction"{{.*}} ins(%[[P1]], %{{.+}} : {{.*}}) outs(%[[F2]] : tensor<1x4x8x8xf32>)
func.func @pools_sharing_a_fill(%x: tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %r = fusion.group vertical (%a = %x : tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
      attributes {fusion.tile_dims = [0, 1]} {
    %ninf = arith.constant 0xFF800000 : f32
    %e = tensor.empty() : tensor<2x4x8x8xf32>
    %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
    %w = tensor.empty() : tensor<1x1xf32>
    %p1 = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
        ins(%a, %w : tensor<2x4x8x8xf32>, tensor<1x1xf32>) outs(%f : tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
    %p2 = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
        ins(%p1, %w : tensor<2x4x8x8xf32>, tensor<1x1xf32>) outs(%f : tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
    fusion.yield %p2 : tensor<2x4x8x8xf32>
  }
  return %r : tensor<2x4x8x8xf32>
}

// -----

// A prologue (a ReLU in front of a 1x1 convolution, the convolution reading all channels)
// sharing one tensor.empty with the root's fill, as CSE leaves them: the prologue is fused
// whole into the tile loop, and must write a tensor of its own, never the loop's shared
// output (every tile would overwrite the other tiles' results with the ReLU). Found by the
// model zoo's MobileNetV3 through torch.compile (weights as inputs).
// CHECK-LABEL: func.func @prologue_shares_the_roots_empty
// CHECK: %[[EMPTY:.+]] = tensor.empty() : tensor<1x16x16x16xf32>
// CHECK: scf.forall (%{{.+}}) in (16) shared_outs(%[[OUT:.+]] = %[[EMPTY]])
// CHECK-NOT: outs(%[[OUT]] : tensor<1x16x16x16xf32>)
// CHECK: %[[RELU:.+]] = linalg.generic {{.*}} outs(%[[EMPTY]] : tensor<1x16x16x16xf32>)
// CHECK: tensor.extract_slice %[[OUT]]
// CHECK: linalg.generic {{.*}} ins(%[[RELU]],
// CHECK: tensor.parallel_insert_slice
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @prologue_shares_the_roots_empty(%x: tensor<1x16x16x16xf32>, %w: tensor<16x16x1x1xf32>) -> tensor<1x16x16x16xf32> {
  %r = fusion.group vertical (%a = %x : tensor<1x16x16x16xf32>, %b = %w : tensor<16x16x1x1xf32>) -> tensor<1x16x16x16xf32> {
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<1x16x16x16xf32>
    %relu = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
        ins(%a : tensor<1x16x16x16xf32>) outs(%e : tensor<1x16x16x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %m = arith.maximumf %in, %zero : f32
      linalg.yield %m : f32
    } -> tensor<1x16x16x16xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x16x16x16xf32>) -> tensor<1x16x16x16xf32>
    %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
        ins(%relu, %b : tensor<1x16x16x16xf32>, tensor<16x16x1x1xf32>) outs(%f : tensor<1x16x16x16xf32>) -> tensor<1x16x16x16xf32>
    fusion.yield %c : tensor<1x16x16x16xf32>
  }
  return %r : tensor<1x16x16x16xf32>
}

// -----

// The planner's `fusion.tile_dims` named the loops of a [1, 64, 256] op (rows 1, columns 2);
// the reshape passes have since collapsed its unit batch, so the root is [64, 256]: the dims
// are shifted with it (rows 0, columns 1) and the rows are tiled, as the planner meant (read
// as [1, 2] they allowed the columns only, and a prologue was recomputed in every column tile).
// CHECK-LABEL: func.func @tile_dims_after_a_collapsed_batch
// CHECK: fusion.group vertical
// CHECK-SAME: fusion.tile_sizes = array<i64: {{[1-9][0-9]*}}, 0>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @tile_dims_after_a_collapsed_batch(%x: tensor<64x256xf32>) -> tensor<64x256xf32> {
  %r = fusion.group vertical (%a = %x : tensor<64x256xf32>) -> tensor<64x256xf32> attributes {fusion.tile_dims = [1, 2]} {
    %e = tensor.empty() : tensor<64x256xf32>
    %y = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<64x256xf32>) outs(%e : tensor<64x256xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.tanh %in : f32
      linalg.yield %t : f32
    } -> tensor<64x256xf32>
    fusion.yield %y : tensor<64x256xf32>
  }
  return %r : tensor<64x256xf32>
}
