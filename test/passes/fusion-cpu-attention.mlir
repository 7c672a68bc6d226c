// RUN: fusec-opt %s '--fusion-cpu-attention=threads=2 block-rows=8 block-keys=8' --split-input-file | filecheck %s
// RUN: fusec-opt %s '--fusion-cpu-attention=threads=2 block-rows=8 block-keys=8' --fusion-tile=threads=2 --fusion-place --split-input-file | filecheck %s --check-prefix=TILE

// --fusion-cpu-attention builds an attention group (--fusion-attention{device=cpu}) as one
// tile loop with an online softmax: a tile per (batch x head, BM query rows), the keys in
// tiles of BN carried through scf.for with the running max, sum and output (f32), the
// group's own score ops cloned onto each key tile (a causal mask computed from indices per
// tile, a mask input read by slices), the products fenced f32 matmul generics, the key tiles
// past a causal mask's diagonal skipped. What it must
// not do: materialise the scores (no 16 x 16 tensor is left in the group), or touch a group
// that is not an attention group.

// Causal SDPA (bf16, 2 heads, 16 x 16, the mask computed from indices): 2 x 2 tiles, two
// key tiles of 8 each.
// Then --fusion-tile must leave the kernel as its family built it (its grid, tile sizes and
// its one tile loop: no second scf.forall), and --fusion-place describes it as any tiled
// group: a placement on the group, and the ops inside the key loop placed (in registers).
// TILE-LABEL: func.func @causal
// TILE: fusion.group attention
// TILE-SAME: fusion.grid = 4 : i64, fusion.path = "attention", fusion.placement = {global = 4096 : i64
// TILE-SAME: fusion.tile_sizes = array<i64: 1, 8, 8>
// TILE: scf.forall (%{{.*}}, %{{.*}}) in (2, 2)
// TILE-NOT: scf.forall
// TILE: scf.for
// TILE-NOT: scf.forall
// TILE: linalg.generic {{.*}}attrs =  {fusion.mem = #fusion.mem<register>}
// TILE-NOT: scf.forall
// TILE: scf.yield
// CHECK-LABEL: func.func @causal
// CHECK: fusion.group attention
// CHECK-SAME: fusion.grid = 4 : i64
// CHECK-SAME: fusion.tile_sizes = array<i64: 1, 8, 8>
// CHECK-NOT: tensor<2x16x16
// CHECK-NOT: tensor<1x2x16x16
// CHECK: scf.forall (%[[B:.*]], %[[I:.*]]) in (2, 2) shared_outs
// The causal bound (proven on the grid: every key past the row masked): the block's key
// tiles end at its diagonal, min(2, ceil((m0 + 8) / 8)):
// CHECK: arith.divsi
// CHECK: %[[TILES:.*]] = arith.minsi %c2
// The key tiles wholly below the block's diagonal come first, min(tiles, (m0 + 1) / 8) of
// them: the mask changes nothing there (attention_mask.interior_point) and the chain is
// S times 0.125 (interior_scale), so they evaluate no mask (no index, no compare) and no
// pass of their own for X: the row max is 0.125 max S and exp(0.125 S - z) is
// 2^(S (0.125 log2 e) - z log2 e), one product and sum (z log2 e once per row), S rounded
// to bf16 as the chain rounds it; 2^t is fast_exp.approx_exp2 (clamp, floor, polynomial):
// CHECK: %[[INNER:.*]] = arith.minsi %[[TILES]]
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[INNER]] step %{{.*}} iter_args({{.*}}) -> (tensor<8xf32>, tensor<8xf32>, tensor<8x64xf32>)
// CHECK-NOT: linalg.index
// CHECK-NOT: arith.cmpi
// CHECK: arith.maximumf %in, %out
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT: arith.extf
// CHECK-NEXT: arith.constant 1.250000e-01 : f32
// CHECK-NEXT: arith.mulf
// CHECK-NEXT: linalg.yield
// CHECK-NOT: linalg.index
// CHECK-NOT: arith.cmpi
// CHECK: arith.constant -1.44269502 : f32
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT: arith.extf
// CHECK-NEXT: arith.constant 0.180336878 : f32
// CHECK-NEXT: arith.mulf {{.*}} fastmath<contract>
// CHECK-NEXT: arith.addf {{.*}} fastmath<contract>
// CHECK-NEXT: arith.constant -1.270000e+02 : f32
// CHECK-NEXT: arith.maximumf
// CHECK: math.floor
// CHECK-NOT: math.exp
// CHECK-NOT: linalg.index
// CHECK-NOT: arith.cmpi
// CHECK: scf.yield
// Then the diagonal tiles, the chain as the graph has it:
// CHECK: scf.for %[[J:.*]] = %[[INNER]] to %[[TILES]] step %{{.*}} iter_args({{.*}}) -> (tensor<8xf32>, tensor<8xf32>, tensor<8x64xf32>)
// The mask's aranges, shifted to the tile's rows and keys:
// CHECK: linalg.index 0
// CHECK-NEXT: arith.addi
// CHECK: linalg.index 0
// CHECK-NEXT: arith.addi
// CHECK: arith.cmpi sge
// Q K^T: Q's rows and K's keys widened to f32, K transposed, then the product:
// CHECK: fusion.group single {{.*}} -> tensor<8x64xf32> attributes {fusion.fence}
// CHECK: arith.extf
// CHECK: fusion.group single {{.*}} -> tensor<64x8xf32> attributes {fusion.fence}
// CHECK: fusion.group single {{.*}} -> tensor<8x8xf32> attributes {fusion.fence}
// CHECK: arith.mulf
// CHECK-NEXT: arith.addf
// S rounded to the type the graph gives it, then the graph's scale and causal select:
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: arith.select
// The online softmax: the tile's row max, the new max, exp, the rescaled sum and output:
// CHECK: arith.maximumf %in, %out
// CHECK: arith.maximumf
// CHECK: math.floor
// CHECK: math.floor
// P rounded to bf16, as P V reads it:
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT: arith.extf
// CHECK: fusion.group single {{.*}} -> tensor<8x64xf32> attributes {fusion.fence}
// CHECK: scf.yield
// O = acc / l, cast as the graph casts P V's result, written into the tile's rows:
// CHECK: arith.divf
// CHECK-NOT: arith.select
// CHECK: arith.truncf
// CHECK: tensor.parallel_insert_slice %{{.*}} into %{{.*}}[%[[B]], %{{.*}}, 0] [1, 8, 64]
// CHECK: tensor.expand_shape
// CHECK-SAME: into tensor<1x2x16x64xbf16>
// CHECK: fusion.yield

#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map2 = affine_map<(d0) -> (d0)>
#map3 = affine_map<(d0, d1) -> (d0, 0)>
#map4 = affine_map<(d0, d1) -> (0, d1)>
#map5 = affine_map<(d0, d1) -> (d0, d1)>
#map6 = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
#map7 = affine_map<(d0, d1, d2, d3) -> ()>
#map8 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map9 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @causal(%arg0: tensor<1x2x16x64xbf16>, %arg1: tensor<1x2x16x64xbf16>, %arg2: tensor<1x2x16x64xbf16>) -> tensor<1x2x16x64xbf16> {
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 0xFF800000 : f32
    %cst_1 = arith.constant dense<0xFF80> : tensor<bf16>
    %cst_2 = arith.constant 1.250000e-01 : bf16
    %0 = tensor.empty() : tensor<1x2x64x16xbf16>
    %1 = tensor.empty() : tensor<2x16x16xf32>
    %2 = tensor.empty() : tensor<2x16x16xbf16>
    %3 = tensor.empty() : tensor<1x2x16x16xbf16>
    %4 = tensor.empty() : tensor<16xi64>
    %5 = tensor.empty() : tensor<16x16xi1>
    %6 = tensor.empty() : tensor<1x2x16x16xf32>
    %7 = tensor.empty() : tensor<1x2x16xi64>
    %8 = tensor.empty() : tensor<1x2x16xf32>
    %9 = tensor.empty() : tensor<1x2x16x1xf32>
    %10 = tensor.empty() : tensor<2x16x64xf32>
    %11 = tensor.empty() : tensor<2x16x64xbf16>
    %12 = fusion.group attention (%arg3 = %arg1 : tensor<1x2x16x64xbf16>, %arg4 = %arg0 : tensor<1x2x16x64xbf16>, %arg5 = %arg2 : tensor<1x2x16x64xbf16>) -> tensor<1x2x16x64xbf16> attributes {fusion.attention = {batch = 2 : i64, dtype = "bf16", head_dim = 64 : i64, kv_len = 16 : i64, mask = "computed", masked_rows = "nan", q_len = 16 : i64, score_ops = 3 : i64, v_dim = 64 : i64}, fusion.device = "cpu", fusion.path = "attention", fusion.reason = "attention: Q K^T, the score ops, softmax and P V in one kernel (online softmax: the scores never reach memory)"} {
      %13 = tensor.empty() : tensor<1x2x64x16xbf16>
      %cst_3 = arith.constant 0.000000e+00 : f32
      %14 = tensor.empty() : tensor<2x16x16xf32>
      %15 = tensor.empty() : tensor<2x16x16xbf16>
      %cst_4 = arith.constant 1.250000e-01 : bf16
      %16 = tensor.empty() : tensor<1x2x16x16xbf16>
      %17 = tensor.empty() : tensor<16xi64>
      %18 = tensor.empty() : tensor<16x16xi1>
      %cst_5 = arith.constant dense<0xFF80> : tensor<bf16>
      %19 = tensor.empty() : tensor<1x2x16x16xf32>
      %c0_i64_6 = arith.constant 0 : i64
      %20 = tensor.empty() : tensor<1x2x16xi64>
      %cst_7 = arith.constant 0xFF800000 : f32
      %21 = tensor.empty() : tensor<1x2x16xf32>
      %22 = tensor.empty() : tensor<1x2x16x1xf32>
      %23 = tensor.empty() : tensor<2x16x64xf32>
      %24 = tensor.empty() : tensor<2x16x64xbf16>
      %transposed = linalg.transpose ins(%arg3 : tensor<1x2x16x64xbf16>) outs(%13 : tensor<1x2x64x16xbf16>) permutation = [0, 1, 3, 2] 
      %collapsed = tensor.collapse_shape %arg4 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
      %collapsed_8 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x64x16xbf16> into tensor<2x64x16xbf16>
      %25 = linalg.fill ins(%cst_3 : f32) outs(%14 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
      %26 = linalg.batch_matmul ins(%collapsed, %collapsed_8 : tensor<2x16x64xbf16>, tensor<2x64x16xbf16>) outs(%25 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
      %27 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%26 : tensor<2x16x16xf32>) outs(%15 : tensor<2x16x16xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %45 = arith.truncf %in : f32 to bf16
        linalg.yield %45 : bf16
      } -> tensor<2x16x16xbf16>
      %expanded = tensor.expand_shape %27 [[0, 1], [2], [3]] output_shape [1, 2, 16, 16] : tensor<2x16x16xbf16> into tensor<1x2x16x16xbf16>
      %28 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x16x16xbf16>) outs(%16 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        %45 = arith.mulf %in, %cst_4 : bf16
        linalg.yield %45 : bf16
      } -> tensor<1x2x16x16xbf16>
      %29 = linalg.generic {indexing_maps = [#map2], iterator_types = ["parallel"]} outs(%17 : tensor<16xi64>) {
      ^bb0(%out: i64):
        %45 = linalg.index 0 : index
        %46 = arith.index_cast %45 : index to i64
        linalg.yield %46 : i64
      } -> tensor<16xi64>
      %expanded_9 = tensor.expand_shape %29 [[0, 1]] output_shape [16, 1] : tensor<16xi64> into tensor<16x1xi64>
      %expanded_10 = tensor.expand_shape %29 [[0, 1]] output_shape [1, 16] : tensor<16xi64> into tensor<1x16xi64>
      %30 = linalg.generic {indexing_maps = [#map3, #map4, #map5], iterator_types = ["parallel", "parallel"]} ins(%expanded_9, %expanded_10 : tensor<16x1xi64>, tensor<1x16xi64>) outs(%18 : tensor<16x16xi1>) {
      ^bb0(%in: i64, %in_15: i64, %out: i1):
        %45 = arith.cmpi sge, %in, %in_15 : i64
        linalg.yield %45 : i1
      } -> tensor<16x16xi1>
      %31 = linalg.generic {indexing_maps = [#map6, #map1, #map7, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%30, %28, %cst_5 : tensor<16x16xi1>, tensor<1x2x16x16xbf16>, tensor<bf16>) outs(%16 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: i1, %in_15: bf16, %in_16: bf16, %out: bf16):
        %45 = arith.select %in, %in_15, %in_16 : bf16
        linalg.yield %45 : bf16
      } -> tensor<1x2x16x16xbf16>
      %32 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%31 : tensor<1x2x16x16xbf16>) outs(%19 : tensor<1x2x16x16xf32>) {
      ^bb0(%in: bf16, %out: f32):
        %45 = arith.extf %in : bf16 to f32
        linalg.yield %45 : f32
      } -> tensor<1x2x16x16xf32>
      %33 = linalg.fill ins(%c0_i64_6 : i64) outs(%20 : tensor<1x2x16xi64>) -> tensor<1x2x16xi64>
      %34 = linalg.fill ins(%cst_7 : f32) outs(%21 : tensor<1x2x16xf32>) -> tensor<1x2x16xf32>
      %35:2 = linalg.generic {indexing_maps = [#map1, #map8, #map8], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%32 : tensor<1x2x16x16xf32>) outs(%34, %33 : tensor<1x2x16xf32>, tensor<1x2x16xi64>) {
      ^bb0(%in: f32, %out: f32, %out_15: i64):
        %45 = linalg.index 3 : index
        %46 = arith.index_cast %45 : index to i64
        %47 = arith.maximumf %in, %out : f32
        %48 = arith.cmpf ogt, %in, %out : f32
        %49 = arith.select %48, %46, %out_15 : i64
        linalg.yield %47, %49 : f32, i64
      } -> (tensor<1x2x16xf32>, tensor<1x2x16xi64>)
      %expanded_11 = tensor.expand_shape %35#0 [[0], [1], [2, 3]] output_shape [1, 2, 16, 1] : tensor<1x2x16xf32> into tensor<1x2x16x1xf32>
      %36 = linalg.generic {indexing_maps = [#map1, #map9, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%32, %expanded_11 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%19 : tensor<1x2x16x16xf32>) {
      ^bb0(%in: f32, %in_15: f32, %out: f32):
        %45 = arith.subf %in, %in_15 : f32
        linalg.yield %45 : f32
      } -> tensor<1x2x16x16xf32>
      %37 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%36 : tensor<1x2x16x16xf32>) outs(%19 : tensor<1x2x16x16xf32>) {
      ^bb0(%in: f32, %out: f32):
        %45 = math.exp %in : f32
        linalg.yield %45 : f32
      } -> tensor<1x2x16x16xf32>
      %38 = linalg.fill ins(%cst_3 : f32) outs(%22 : tensor<1x2x16x1xf32>) -> tensor<1x2x16x1xf32>
      %39 = linalg.generic {indexing_maps = [#map1, #map9], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%37 : tensor<1x2x16x16xf32>) outs(%38 : tensor<1x2x16x1xf32>) {
      ^bb0(%in: f32, %out: f32):
        %45 = arith.addf %in, %out : f32
        linalg.yield %45 : f32
      } -> tensor<1x2x16x1xf32>
      %40 = linalg.generic {indexing_maps = [#map1, #map9, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%37, %39 : tensor<1x2x16x16xf32>, tensor<1x2x16x1xf32>) outs(%19 : tensor<1x2x16x16xf32>) {
      ^bb0(%in: f32, %in_15: f32, %out: f32):
        %45 = arith.divf %in, %in_15 : f32
        linalg.yield %45 : f32
      } -> tensor<1x2x16x16xf32>
      %41 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%40 : tensor<1x2x16x16xf32>) outs(%16 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %45 = arith.truncf %in : f32 to bf16
        linalg.yield %45 : bf16
      } -> tensor<1x2x16x16xbf16>
      %collapsed_12 = tensor.collapse_shape %41 [[0, 1], [2], [3]] : tensor<1x2x16x16xbf16> into tensor<2x16x16xbf16>
      %collapsed_13 = tensor.collapse_shape %arg5 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
      %42 = linalg.fill ins(%cst_3 : f32) outs(%23 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
      %43 = linalg.batch_matmul ins(%collapsed_12, %collapsed_13 : tensor<2x16x16xbf16>, tensor<2x16x64xbf16>) outs(%42 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
      %44 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%43 : tensor<2x16x64xf32>) outs(%24 : tensor<2x16x64xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %45 = arith.truncf %in : f32 to bf16
        linalg.yield %45 : bf16
      } -> tensor<2x16x64xbf16>
      %expanded_14 = tensor.expand_shape %44 [[0, 1], [2], [3]] output_shape [1, 2, 16, 64] : tensor<2x16x64xbf16> into tensor<1x2x16x64xbf16>
      fusion.yield %expanded_14 : tensor<1x2x16x64xbf16>
    }
    return %12 : tensor<1x2x16x64xbf16>
  }
}

// -----

// SDPA with a bool mask input: the mask read by key-tile slices, fully masked rows 0
// (masked_rows = "zero": l = 0 gives 0, not 0 / 0).
// CHECK-LABEL: func.func @masked_sdpa
// CHECK: fusion.group attention
// CHECK-SAME: masked_rows = "zero"
// CHECK: scf.forall
// A mask read from memory proves no bound: every key tile is visited.
// CHECK-NOT: arith.minsi
// CHECK: scf.for %{{.*}} = %{{.*}} to %c2 step
// CHECK: tensor.extract_slice %{{.*}}[0, 0, %{{.*}}, %{{.*}}] [1, 1, 8, 8] [1, 1, 1, 1] : tensor<1x1x16x16xi1> to tensor<1x1x8x8xi1>
// CHECK: scf.yield
// Nor is any tile's mask known to change nothing: one loop, the mask read on every tile.
// CHECK-NOT: scf.for
// CHECK: arith.divf
// CHECK: arith.cmpf oeq
// CHECK: arith.select
// CHECK: tensor.parallel_insert_slice

#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#map3 = affine_map<(d0, d1, d2, d3) -> ()>
#map4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map5 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module {
  func.func @masked_sdpa(%arg0: tensor<1x2x16x64xbf16>, %arg1: tensor<1x2x16x64xbf16>, %arg2: tensor<1x2x16x64xbf16>, %arg3: tensor<1x1x16x16xi1>) -> tensor<1x2x16x64xbf16> {
    %cst = arith.constant 0.000000e+00 : f32
    %c0_i64 = arith.constant 0 : i64
    %cst_0 = arith.constant 0xFF80 : bf16
    %cst_1 = arith.constant 0.000000e+00 : bf16
    %cst_2 = arith.constant dense<0.000000e+00> : tensor<bf16>
    %cst_3 = arith.constant dense<0xFF80> : tensor<bf16>
    %cst_4 = arith.constant 0xFFF0000000000000 : f64
    %cst_5 = arith.constant 1.250000e-01 : bf16
    %0 = tensor.empty() : tensor<1x2x64x16xbf16>
    %1 = tensor.empty() : tensor<2x16x16xf32>
    %2 = tensor.empty() : tensor<2x16x16xbf16>
    %3 = tensor.empty() : tensor<1x2x16x16xbf16>
    %4 = tensor.empty() : tensor<1x2x16xi64>
    %5 = tensor.empty() : tensor<1x2x16xbf16>
    %6 = tensor.empty() : tensor<1x2x16x1xbf16>
    %7 = tensor.empty() : tensor<1x2x16x1xi1>
    %8 = tensor.empty() : tensor<2x16x64xf32>
    %9 = tensor.empty() : tensor<2x16x64xbf16>
    %10 = fusion.group attention (%arg4 = %arg1 : tensor<1x2x16x64xbf16>, %arg5 = %arg0 : tensor<1x2x16x64xbf16>, %arg6 = %arg3 : tensor<1x1x16x16xi1>, %arg7 = %arg2 : tensor<1x2x16x64xbf16>) -> tensor<1x2x16x64xbf16> attributes {fusion.attention = {batch = 2 : i64, dtype = "bf16", head_dim = 64 : i64, kv_len = 16 : i64, mask = "computed", masked_rows = "zero", q_len = 16 : i64, score_ops = 3 : i64, v_dim = 64 : i64}, fusion.device = "cpu", fusion.path = "attention", fusion.reason = "attention: Q K^T, the score ops, softmax and P V in one kernel (online softmax: the scores never reach memory)"} {
      %11 = tensor.empty() : tensor<1x2x64x16xbf16>
      %cst_6 = arith.constant 0.000000e+00 : f32
      %12 = tensor.empty() : tensor<2x16x16xf32>
      %13 = tensor.empty() : tensor<2x16x16xbf16>
      %cst_7 = arith.constant 1.250000e-01 : bf16
      %14 = tensor.empty() : tensor<1x2x16x16xbf16>
      %cst_8 = arith.constant dense<0xFF80> : tensor<bf16>
      %c0_i64_9 = arith.constant 0 : i64
      %15 = tensor.empty() : tensor<1x2x16xi64>
      %cst_10 = arith.constant 0xFF80 : bf16
      %16 = tensor.empty() : tensor<1x2x16xbf16>
      %cst_11 = arith.constant 0.000000e+00 : bf16
      %17 = tensor.empty() : tensor<1x2x16x1xbf16>
      %cst_12 = arith.constant 0xFFF0000000000000 : f64
      %18 = tensor.empty() : tensor<1x2x16x1xi1>
      %cst_13 = arith.constant dense<0.000000e+00> : tensor<bf16>
      %19 = tensor.empty() : tensor<2x16x64xf32>
      %20 = tensor.empty() : tensor<2x16x64xbf16>
      %transposed = linalg.transpose ins(%arg4 : tensor<1x2x16x64xbf16>) outs(%11 : tensor<1x2x64x16xbf16>) permutation = [0, 1, 3, 2] 
      %collapsed = tensor.collapse_shape %arg5 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
      %collapsed_14 = tensor.collapse_shape %transposed [[0, 1], [2], [3]] : tensor<1x2x64x16xbf16> into tensor<2x64x16xbf16>
      %21 = linalg.fill ins(%cst_6 : f32) outs(%12 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
      %22 = linalg.batch_matmul ins(%collapsed, %collapsed_14 : tensor<2x16x64xbf16>, tensor<2x64x16xbf16>) outs(%21 : tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
      %23 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%22 : tensor<2x16x16xf32>) outs(%13 : tensor<2x16x16xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %39 = arith.truncf %in : f32 to bf16
        linalg.yield %39 : bf16
      } -> tensor<2x16x16xbf16>
      %expanded = tensor.expand_shape %23 [[0, 1], [2], [3]] output_shape [1, 2, 16, 16] : tensor<2x16x16xbf16> into tensor<1x2x16x16xbf16>
      %24 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x2x16x16xbf16>) outs(%14 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        %39 = arith.mulf %in, %cst_7 : bf16
        linalg.yield %39 : bf16
      } -> tensor<1x2x16x16xbf16>
      %25 = linalg.generic {indexing_maps = [#map2, #map1, #map3, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg6, %24, %cst_8 : tensor<1x1x16x16xi1>, tensor<1x2x16x16xbf16>, tensor<bf16>) outs(%14 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: i1, %in_19: bf16, %in_20: bf16, %out: bf16):
        %39 = arith.select %in, %in_19, %in_20 : bf16
        linalg.yield %39 : bf16
      } -> tensor<1x2x16x16xbf16>
      %26 = linalg.fill ins(%c0_i64_9 : i64) outs(%15 : tensor<1x2x16xi64>) -> tensor<1x2x16xi64>
      %27 = linalg.fill ins(%cst_10 : bf16) outs(%16 : tensor<1x2x16xbf16>) -> tensor<1x2x16xbf16>
      %28:2 = linalg.generic {indexing_maps = [#map1, #map4, #map4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%25 : tensor<1x2x16x16xbf16>) outs(%27, %26 : tensor<1x2x16xbf16>, tensor<1x2x16xi64>) {
      ^bb0(%in: bf16, %out: bf16, %out_19: i64):
        %39 = linalg.index 3 : index
        %40 = arith.index_cast %39 : index to i64
        %41 = arith.maximumf %in, %out : bf16
        %42 = arith.cmpf ogt, %in, %out : bf16
        %43 = arith.select %42, %40, %out_19 : i64
        linalg.yield %41, %43 : bf16, i64
      } -> (tensor<1x2x16xbf16>, tensor<1x2x16xi64>)
      %expanded_15 = tensor.expand_shape %28#0 [[0], [1], [2, 3]] output_shape [1, 2, 16, 1] : tensor<1x2x16xbf16> into tensor<1x2x16x1xbf16>
      %29 = linalg.generic {indexing_maps = [#map1, #map5, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%25, %expanded_15 : tensor<1x2x16x16xbf16>, tensor<1x2x16x1xbf16>) outs(%14 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: bf16, %in_19: bf16, %out: bf16):
        %39 = arith.subf %in, %in_19 : bf16
        linalg.yield %39 : bf16
      } -> tensor<1x2x16x16xbf16>
      %30 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%29 : tensor<1x2x16x16xbf16>) outs(%14 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        %39 = math.exp %in : bf16
        linalg.yield %39 : bf16
      } -> tensor<1x2x16x16xbf16>
      %31 = linalg.fill ins(%cst_11 : bf16) outs(%17 : tensor<1x2x16x1xbf16>) -> tensor<1x2x16x1xbf16>
      %32 = linalg.generic {indexing_maps = [#map1, #map5], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%30 : tensor<1x2x16x16xbf16>) outs(%31 : tensor<1x2x16x1xbf16>) {
      ^bb0(%in: bf16, %out: bf16):
        %39 = arith.addf %in, %out : bf16
        linalg.yield %39 : bf16
      } -> tensor<1x2x16x1xbf16>
      %33 = linalg.generic {indexing_maps = [#map1, #map5, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%30, %32 : tensor<1x2x16x16xbf16>, tensor<1x2x16x1xbf16>) outs(%14 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: bf16, %in_19: bf16, %out: bf16):
        %39 = arith.divf %in, %in_19 : bf16
        linalg.yield %39 : bf16
      } -> tensor<1x2x16x16xbf16>
      %34 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded_15 : tensor<1x2x16x1xbf16>) outs(%18 : tensor<1x2x16x1xi1>) {
      ^bb0(%in: bf16, %out: i1):
        %39 = arith.extf %in : bf16 to f64
        %40 = arith.cmpf oeq, %39, %cst_12 : f64
        linalg.yield %40 : i1
      } -> tensor<1x2x16x1xi1>
      %35 = linalg.generic {indexing_maps = [#map5, #map3, #map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%34, %cst_13, %33 : tensor<1x2x16x1xi1>, tensor<bf16>, tensor<1x2x16x16xbf16>) outs(%14 : tensor<1x2x16x16xbf16>) {
      ^bb0(%in: i1, %in_19: bf16, %in_20: bf16, %out: bf16):
        %39 = arith.select %in, %in_19, %in_20 : bf16
        linalg.yield %39 : bf16
      } -> tensor<1x2x16x16xbf16>
      %collapsed_16 = tensor.collapse_shape %35 [[0, 1], [2], [3]] : tensor<1x2x16x16xbf16> into tensor<2x16x16xbf16>
      %collapsed_17 = tensor.collapse_shape %arg7 [[0, 1], [2], [3]] : tensor<1x2x16x64xbf16> into tensor<2x16x64xbf16>
      %36 = linalg.fill ins(%cst_6 : f32) outs(%19 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
      %37 = linalg.batch_matmul ins(%collapsed_16, %collapsed_17 : tensor<2x16x16xbf16>, tensor<2x16x64xbf16>) outs(%36 : tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
      %38 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%37 : tensor<2x16x64xf32>) outs(%20 : tensor<2x16x64xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %39 = arith.truncf %in : f32 to bf16
        linalg.yield %39 : bf16
      } -> tensor<2x16x64xbf16>
      %expanded_18 = tensor.expand_shape %38 [[0, 1], [2], [3]] output_shape [1, 2, 16, 64] : tensor<2x16x64xbf16> into tensor<1x2x16x64xbf16>
      fusion.yield %expanded_18 : tensor<1x2x16x64xbf16>
    }
    return %10 : tensor<1x2x16x64xbf16>
  }
}

// -----

// Not an attention group: left as it is.
// CHECK-LABEL: func.func @not_attention
// CHECK: fusion.group single
// CHECK-NOT: fusion.grid
// CHECK-NOT: scf.forall
// CHECK: linalg.exp
func.func @not_attention(%arg0: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %0 = fusion.group single (%arg1 = %arg0 : tensor<16x16xf32>) -> tensor<16x16xf32> {
    %1 = tensor.empty() : tensor<16x16xf32>
    %2 = linalg.exp ins(%arg1 : tensor<16x16xf32>) outs(%1 : tensor<16x16xf32>) -> tensor<16x16xf32>
    fusion.yield %2 : tensor<16x16xf32>
  }
  return %0 : tensor<16x16xf32>
}
