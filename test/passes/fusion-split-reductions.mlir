// RUN: fusec-opt %s --split-input-file --pass-pipeline='builtin.module(fusion-split-reductions{device=nvidia-h200})' | filecheck %s --check-prefix=GPU
// RUN: fusec-opt %s --split-input-file --pass-pipeline='builtin.module(fusion-split-reductions{device=cpu})' | filecheck %s --check-prefix=CPU
// RUN: fusec-opt %s --split-input-file --pass-pipeline='builtin.module(fusion-split-reductions{device=nvidia-h200},fusion-plan{device=nvidia-h200})' | filecheck %s --check-prefix=PLAN

// A sum of squares over 4 rows of 262144 values. On the H200: 64 partials per row (256
// blocks), each folding 4096 values; the squaring producer is cloned over the cut
// iteration space, so the cut is a view of the input (and the producer still fuses into
// the partials' kernel); the combine folds the 64 partials into the original init.
// GPU-LABEL: func.func @rows_through_producer
// GPU: %[[INIT:.+]] = linalg.fill {{.*}} -> tensor<4xf32>
// GPU: %[[CUT:.+]] = tensor.expand_shape %arg0 {{\[}}[0], [1, 2]] {{.*}} into tensor<4x64x4096xf32>
// GPU: %[[SQ:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel"]} ins(%[[CUT]] : tensor<4x64x4096xf32>)
// GPU: arith.mulf
// GPU: %[[ZERO:.+]] = linalg.fill {{.*}} -> tensor<4x64xf32>
// GPU: %[[P:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[SQ]] : tensor<4x64x4096xf32>) outs(%[[ZERO]] : tensor<4x64xf32>) attrs = {fusion.split_partials = 64 : i64}
// GPU: %[[S:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[P]] : tensor<4x64xf32>) outs(%[[INIT]] : tensor<4xf32>)
// GPU-NEXT: ^bb0(%[[IN:.+]]: f32, %[[ACC:.+]]: f32):
// GPU-NEXT: arith.addf %[[IN]], %[[ACC]] : f32
// GPU: return %[[S]]
// On the CPU (one core, no SMs to fill) 262144 values are 16 partials of 16384, for the
// rounding's sake.
// CPU-LABEL: func.func @rows_through_producer
// CPU: tensor.expand_shape %arg0 {{.*}} into tensor<4x16x16384xf32>
// CPU: fusion.split_partials = 16
// The planner keeps the partials out of their combine's kernel, and says why.
// PLAN-LABEL: func.func @rows_through_producer
// PLAN: %[[P:.+]] = fusion.group
// PLAN: arith.mulf
// PLAN: fusion.split_partials = 64
// PLAN: fusion.yield {{.*}} : tensor<4x64xf32>
// PLAN: fusion.group {{.*}}(%{{.+}} = %[[P]] : tensor<4x64xf32>)
// PLAN-SAME: split-reduction: a split reduction's partials stay a kernel of their own
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @rows_through_producer(%x: tensor<4x262144xf32>) -> tensor<4xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %e2 = tensor.empty() : tensor<4x262144xf32>
  %sq = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x262144xf32>) outs(%e2 : tensor<4x262144xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %a : f32
    linalg.yield %m : f32
  } -> tensor<4x262144xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%sq : tensor<4x262144xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %t = arith.addf %a, %acc : f32
    linalg.yield %t : f32
  } -> tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----

// A max over a whole 4096x4096 tensor, to one value: on the H200, 512 partials (the outer
// dim cut 512 x 8); the combine gets a unit parallel loop (one row of 512, one block) over
// views of the 0-d init and result. On the CPU a max is exact in any order: left alone.
// GPU-LABEL: func.func @to_one_value
// GPU: %[[INIT:.+]] = linalg.fill {{.*}} -> tensor<f32>
// GPU: tensor.expand_shape %arg0 {{\[}}[0, 1], [2]] {{.*}} into tensor<512x8x4096xf32>
// GPU: %[[P:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction", "reduction"]} {{.*}} outs(%{{.+}} : tensor<512xf32>)
// GPU: %[[ONE:.+]] = tensor.expand_shape %[[INIT]] [] output_shape [1] : tensor<f32> into tensor<1xf32>
// GPU: %[[ROW:.+]] = tensor.expand_shape %[[P]] {{\[}}[0, 1]] output_shape [1, 512]
// GPU: %[[M:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[ROW]] : tensor<1x512xf32>) outs(%[[ONE]] : tensor<1xf32>)
// GPU: arith.maximumf
// GPU: %[[R:.+]] = tensor.collapse_shape %[[M]] [] : tensor<1xf32> into tensor<f32>
// GPU: return %[[R]]
// CPU-LABEL: func.func @to_one_value
// CPU-NOT: fusion.split_partials
// CPU: return
func.func @to_one_value(%x: tensor<4096x4096xf32>) -> tensor<f32> {
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %m = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> ()>], iterator_types = ["reduction", "reduction"]}
      ins(%x : tensor<4096x4096xf32>) outs(%f : tensor<f32>) {
  ^bb0(%a: f32, %acc: f32):
    %t = arith.maximumf %a, %acc : f32
    linalg.yield %t : f32
  } -> tensor<f32>
  return %m : tensor<f32>
}

// -----

// Two reduced dims (GroupNorm's channels of a group and pixels): the outer one (64) becomes
// partials whole, the inner one is cut by 4: 256 partials per row, collapsed to one dim for
// the combine (a view between the two kernels).
// GPU-LABEL: func.func @two_reduced_dims
// GPU: tensor.expand_shape %arg0 {{\[}}[0], [1], [2, 3]] {{.*}} into tensor<2x64x4x16384xf32>
// GPU: %[[P:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} {{.*}} outs(%{{.+}} : tensor<2x64x4xf32>)
// GPU: %[[C:.+]] = tensor.collapse_shape %[[P]] {{\[}}[0], [1, 2]] : tensor<2x64x4xf32> into tensor<2x256xf32>
// GPU: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[C]] : tensor<2x256xf32>)
func.func @two_reduced_dims(%x: tensor<2x64x65536xf32>) -> tensor<2xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2xf32>) -> tensor<2xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0)>], iterator_types = ["parallel", "reduction", "reduction"]}
      ins(%x : tensor<2x64x65536xf32>) outs(%f : tensor<2xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %t = arith.addf %a, %acc : f32
    linalg.yield %t : f32
  } -> tensor<2xf32>
  return %s : tensor<2xf32>
}

// -----

// Left alone on both targets: many rows (4096 blocks already; 4096 values each), an argmax
// (its index is a compare-and-select on the accumulator, and a second result), a payload
// reading its position (linalg.index), a length with no divisor near the partials wanted
// (a prime).
// GPU-LABEL: func.func @left_alone
// GPU-NOT: fusion.split_partials
// GPU: return
// CPU-LABEL: func.func @left_alone
// CPU-NOT: fusion.split_partials
// CPU: return
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row2 = affine_map<(d0, d1) -> (d0)>
func.func @left_alone(%x: tensor<4096x4096xf32>, %y: tensor<2x1000003xf32>, %n: tensor<2x1048576xi64>)
    -> (tensor<4096xf32>, tensor<2xf32>, tensor<2xi64>, tensor<2xf32>, tensor<2xi64>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %i0 = arith.constant 0 : i64
  %e = tensor.empty() : tensor<4096xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4096xf32>) -> tensor<4096xf32>
  %rows = linalg.generic {indexing_maps = [#id2, #row2], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4096x4096xf32>) outs(%f : tensor<4096xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %t = arith.addf %a, %acc : f32
    linalg.yield %t : f32
  } -> tensor<4096xf32>
  %e2 = tensor.empty() : tensor<2xf32>
  %ei = tensor.empty() : tensor<2xi64>
  %mx = linalg.fill ins(%ninf : f32) outs(%e2 : tensor<2xf32>) -> tensor<2xf32>
  %ix = linalg.fill ins(%i0 : i64) outs(%ei : tensor<2xi64>) -> tensor<2xi64>
  %am:2 = linalg.generic {indexing_maps = [#id2, #row2, #row2], iterator_types = ["parallel", "reduction"]}
      ins(%n : tensor<2x1048576xi64>) outs(%mx, %ix : tensor<2xf32>, tensor<2xi64>) {
  ^bb0(%a: i64, %m: f32, %i: i64):
    %j = linalg.index 1 : index
    %ji = arith.index_cast %j : index to i64
    %af = arith.sitofp %a : i64 to f32
    %gt = arith.cmpf ogt, %af, %m : f32
    %nm = arith.maximumf %af, %m : f32
    %ni = arith.select %gt, %ji, %i : i64
    linalg.yield %nm, %ni : f32, i64
  } -> (tensor<2xf32>, tensor<2xi64>)
  %z2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2xf32>) -> tensor<2xf32>
  %prime = linalg.generic {indexing_maps = [#id2, #row2], iterator_types = ["parallel", "reduction"]}
      ins(%y : tensor<2x1000003xf32>) outs(%z2 : tensor<2xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %t = arith.addf %a, %acc : f32
    linalg.yield %t : f32
  } -> tensor<2xf32>
  %iz = linalg.fill ins(%i0 : i64) outs(%ei : tensor<2xi64>) -> tensor<2xi64>
  %isum = linalg.generic {indexing_maps = [#id2, #row2], iterator_types = ["parallel", "reduction"]}
      ins(%n : tensor<2x1048576xi64>) outs(%iz : tensor<2xi64>) {
  ^bb0(%a: i64, %acc: i64):
    %j = linalg.index 1 : index
    %t = arith.addi %a, %acc : i64
    linalg.yield %t : i64
  } -> tensor<2xi64>
  return %rows, %am#0, %am#1, %prime, %isum : tensor<4096xf32>, tensor<2xf32>, tensor<2xi64>, tensor<2xf32>, tensor<2xi64>
}

// -----

// An integer sum of 2 rows of 1 M values: exact in any order, so the CPU leaves it; the
// H200 splits it for its SMs (256 partials per row, from 0, the sum's neutral value).
// GPU-LABEL: func.func @integer_sum
// GPU: linalg.fill ins(%{{.+}} : i64) {{.*}} -> tensor<2x256xi64>
// GPU: fusion.split_partials = 256
// GPU: arith.addi
// CPU-LABEL: func.func @integer_sum
// CPU-NOT: fusion.split_partials
// CPU: return
func.func @integer_sum(%n: tensor<2x1048576xi64>) -> tensor<2xi64> {
  %i0 = arith.constant 0 : i64
  %ei = tensor.empty() : tensor<2xi64>
  %iz = linalg.fill ins(%i0 : i64) outs(%ei : tensor<2xi64>) -> tensor<2xi64>
  %isum = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%n : tensor<2x1048576xi64>) outs(%iz : tensor<2xi64>) {
  ^bb0(%a: i64, %acc: i64):
    %t = arith.addi %a, %acc : i64
    linalg.yield %t : i64
  } -> tensor<2xi64>
  return %isum : tensor<2xi64>
}

// -----

// A sum over a matmul's long rows: the partials take no contraction before them (their
// reshaped rows would leave it untiled); the matmul stays a group of its own.
// PLAN-LABEL: func.func @after_a_matmul
// PLAN: %[[MM:.+]] = fusion.group {{.*}} -> tensor<4x262144xf32>
// PLAN: linalg.matmul
// PLAN: fusion.group {{.*}}(%{{.+}} = %[[MM]] : tensor<4x262144xf32>)
// PLAN-SAME: split-reduction: a split reduction's partials take no contraction before them
// PLAN: fusion.split_partials = 64
func.func @after_a_matmul(%a: tensor<4x64xf32>, %b: tensor<64x262144xf32>) -> tensor<4xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x262144xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x262144xf32>) -> tensor<4x262144xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x64xf32>, tensor<64x262144xf32>) outs(%z : tensor<4x262144xf32>) -> tensor<4x262144xf32>
  %e1 = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%m : tensor<4x262144xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %t = arith.addf %x, %acc : f32
    linalg.yield %t : f32
  } -> tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----

// A column sum (the reduced loop leads; BatchNorm's statistics, a batch mean). On the
// CPU, 64 partials of 16384 rows each, for the rounding's sake; the partials' result is [kept
// loop, partial loop], and the combine writes through the original map. On the CPU the
// combine folds the f32 partials in f64 and rounds once (its partial sums are large: in f32
// each step rounded at their magnitude; GroupNorm(1, 3) of `randn + 1000` over 1021 x 1021
// images was 1.7e-4 from float64 for torch's 1.3e-5, now 1.3e-5). On the H200 it is
// left to the data-movement family's "reduce" shape (256 slices and a tree per output:
// short folds already) and the CUDA target's `--fusion-gpu-split-long-reductions`.
// CPU-LABEL: func.func @column_sum
// CPU: %[[CUT:.+]] = tensor.expand_shape %arg0 {{\[}}[0, 1], [2]] {{.*}} into tensor<64x16384x2xf32>
// CPU: %[[P:.+]] = linalg.generic {indexing_maps = [#{{.+}}, #{{.+}}], iterator_types = ["parallel", "reduction", "parallel"]} ins(%[[CUT]] : tensor<64x16384x2xf32>) outs(%{{.+}} : tensor<2x64xf32>) attrs = {fusion.split_partials = 64 : i64}
// CPU: %[[INIT:.+]] = linalg.fill ins(%{{.+}} : f64) outs(%{{.+}} : tensor<2xf64>)
// CPU: %[[C:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[P]] : tensor<2x64xf32>) outs(%[[INIT]] : tensor<2xf64>)
// CPU: arith.extf %{{.+}} : f32 to f64
// CPU: arith.addf %{{.+}}, %{{.+}} : f64
// CPU: linalg.generic {{.*}} ins(%[[C]] : tensor<2xf64>) outs(%{{.+}} : tensor<2xf32>)
// CPU: arith.truncf %{{.+}} : f64 to f32
// GPU-LABEL: func.func @column_sum
// GPU-NOT: fusion.split_partials
// GPU: return
func.func @column_sum(%z: tensor<1048576x2xf32>) -> tensor<2xf32> {
  %zero = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<2xf32>
  %z2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2xf32>) -> tensor<2xf32>
  %cols = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]}
      ins(%z : tensor<1048576x2xf32>) outs(%z2 : tensor<2xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %t = arith.addf %a, %acc : f32
    linalg.yield %t : f32
  } -> tensor<2xf32>
  return %cols : tensor<2xf32>
}

// -----

// An argmax over 8 rows of 50257 logits (greedy decoding), in `--fusion-nan-minmax`'s form.
// On the H200: 29 chunks of 1733 (50257 = 29 x 1733); the partials fold (value, position in
// the chunk) from (-inf, 0) with the payload itself (its linalg.index now the inner loop's);
// the combine meets the chunks in order and moves the index, chunk * 1733 + local, by the
// same rule (the first NaN or the first maximum wins, as in torch). On the CPU a max is
// exact and one thread's fold is no slower: left alone. An argmax inside a kernel formed
// already (an attention group's) is never split.
// GPU-LABEL: func.func @argmax_vocabulary
// GPU: %[[X:.+]] = tensor.expand_shape %arg0 {{\[}}[0], [1, 2]] {{.*}} into tensor<8x29x1733xf32>
// GPU: %[[P:.+]]:2 = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[X]] : tensor<8x29x1733xf32>) outs(%{{.+}}, %{{.+}} : tensor<8x29xf32>, tensor<8x29xi64>) attrs = {fusion.split_partials = 29 : i64}
// GPU: linalg.index 2 : index
// GPU: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[P]]#0, %[[P]]#1 : tensor<8x29xf32>, tensor<8x29xi64>) outs(%{{.+}}, %{{.+}} : tensor<8xf32>, tensor<8xi64>)
// GPU: ^bb0(%[[V:.+]]: f32, %[[L:.+]]: i64, %[[ACC:.+]]: f32, %[[IDX:.+]]: i64):
// GPU: %[[C:.+]] = linalg.index 1 : index
// GPU: %[[CI:.+]] = arith.index_cast %[[C]] : index to i64
// GPU: %[[OFF:.+]] = arith.muli %[[CI]], %{{.+}} : i64
// GPU: %[[POS:.+]] = arith.addi %[[OFF]], %[[L]] : i64
// GPU: arith.maximumf %[[V]], %[[ACC]] : f32
// GPU: arith.cmpf ugt, %[[V]], %[[ACC]] : f32
// GPU: arith.cmpf ord, %[[ACC]], %[[ACC]] : f32
// GPU: arith.select %{{.+}}, %[[POS]], %[[IDX]] : i64
// CPU-LABEL: func.func @argmax_vocabulary
// CPU-NOT: fusion.split_partials
// CPU: return
func.func @argmax_vocabulary(%x: tensor<8x50257xf32>) -> tensor<8xi64> {
  %ninf = arith.constant 0xFF800000 : f32
  %c0 = arith.constant 0 : i64
  %ev = tensor.empty() : tensor<8xf32>
  %ei = tensor.empty() : tensor<8xi64>
  %v0 = linalg.fill ins(%ninf : f32) outs(%ev : tensor<8xf32>) -> tensor<8xf32>
  %i0 = linalg.fill ins(%c0 : i64) outs(%ei : tensor<8xi64>) -> tensor<8xi64>
  %r:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x50257xf32>) outs(%v0, %i0 : tensor<8xf32>, tensor<8xi64>) {
  ^bb0(%in: f32, %acc: f32, %idx: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %m = arith.maximumf %in, %acc : f32
    %u = arith.cmpf ugt, %in, %acc : f32
    %o = arith.cmpf ord, %acc, %acc : f32
    %c = arith.andi %u, %o : i1
    %s = arith.select %c, %ii, %idx : i64
    linalg.yield %m, %s : f32, i64
  } -> (tensor<8xf32>, tensor<8xi64>)
  return %r#1 : tensor<8xi64>
}

// -----

// Negative: torch-mlir's argmax before `--fusion-nan-minmax` (its index moved by `ogt`,
// which skips a NaN: no parallel order reproduces that fold) is left alone on both targets.
// GPU-LABEL: func.func @argmax_not_nan_first
// GPU-NOT: fusion.split_partials
// GPU: return
func.func @argmax_not_nan_first(%x: tensor<8x50257xf32>) -> tensor<8xi64> {
  %ninf = arith.constant 0xFF800000 : f32
  %c0 = arith.constant 0 : i64
  %ev = tensor.empty() : tensor<8xf32>
  %ei = tensor.empty() : tensor<8xi64>
  %v0 = linalg.fill ins(%ninf : f32) outs(%ev : tensor<8xf32>) -> tensor<8xf32>
  %i0 = linalg.fill ins(%c0 : i64) outs(%ei : tensor<8xi64>) -> tensor<8xi64>
  %r:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x50257xf32>) outs(%v0, %i0 : tensor<8xf32>, tensor<8xi64>) {
  ^bb0(%in: f32, %acc: f32, %idx: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %m = arith.maximumf %in, %acc : f32
    %gt = arith.cmpf ogt, %in, %acc : f32
    %s = arith.select %gt, %ii, %idx : i64
    linalg.yield %m, %s : f32, i64
  } -> (tensor<8xf32>, tensor<8xi64>)
  return %r#1 : tensor<8xi64>
}
