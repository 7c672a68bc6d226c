// RUN: fusec-opt %s '--fusion-plan{device=nvidia-h200}' --split-input-file | filecheck %s
// RUN: fusec-opt %s '--fusion-plan{device=cpu}' --split-input-file | filecheck %s --check-prefix=CPU
// RUN: fusec-opt %s '--fusion-plan{device=nvidia-h200}' '--fusion-tile{threads=2}' --split-input-file | filecheck %s --check-prefix=TILE
// The pass alone, on singleton groups (what the planner gives it): the same merge.
// RUN: fusec-opt %s --fusion-form-singletons '--fusion-input{device=nvidia-h200}' --split-input-file | filecheck %s --check-prefix=ALONE

// A row sum of %x and an elementwise exp of %x: independent kernels that both stream the
// 64 MB input. One `input` kernel reads it once.
// ALONE-LABEL: func.func @sum_and_exp
// ALONE: fusion.group input
// ALONE-SAME: fusion.shared_input_bytes = 67108864
// ALONE-NOT: fusion.group
// ALONE: return
// CHECK-LABEL: func.func @sum_and_exp
// CHECK: %[[G:[0-9]+]]:2 = fusion.group input
// CHECK-SAME: fusion.parts = [{{.*}}]
// CHECK-SAME: fusion.shared_input_bytes = 67108864
// CHECK-DAG: math.exp
// CHECK-DAG: arith.addf
// CHECK: fusion.yield
// CHECK-NOT: fusion.group
// CHECK: return
// Tiled, the two roots share one tile loop: each tile reads its rows of %x once.
// TILE-LABEL: func.func @sum_and_exp
// TILE: fusion.group input
// TILE: scf.forall {{.*}} -> (tensor<4096xf32>, tensor<4096x4096xf32>)
// TILE: %[[ROWS:.+]] = tensor.extract_slice %arg1
// TILE-DAG: ins(%[[ROWS]] : tensor<{{[0-9]+}}x4096xf32>) outs({{.*}}) {
// TILE-DAG: ins(%[[ROWS]] : tensor<{{[0-9]+}}x4096xf32>) outs({{.*}}) {
// TILE: tensor.parallel_insert_slice
// TILE: tensor.parallel_insert_slice
// TILE-NOT: scf.forall
// TILE: fusion.yield
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @sum_and_exp(%x: tensor<4096x4096xf32>) -> (tensor<4096xf32>, tensor<4096x4096xf32>) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<4096xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4096xf32>) -> tensor<4096xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4096x4096xf32>) outs(%init : tensor<4096xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %0 = arith.addf %a, %acc : f32
    linalg.yield %0 : f32
  } -> tensor<4096xf32>
  %e2 = tensor.empty() : tensor<4096x4096xf32>
  %y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4096x4096xf32>) outs(%e2 : tensor<4096x4096xf32>) {
  ^bb0(%a: f32, %o: f32):
    %0 = math.exp %a : f32
    linalg.yield %0 : f32
  } -> tensor<4096x4096xf32>
  return %s, %y : tensor<4096xf32>, tensor<4096x4096xf32>
}

// -----

// Two reductions of %x over rows: the sum, and the max of exp(x) (exp fused into its own
// kernel first): different inputs to the reductions, one shared large read.
// CHECK-LABEL: func.func @two_reductions
// CHECK: fusion.group input
// CHECK-NOT: fusion.group
// CHECK: return
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row2 = affine_map<(d0, d1) -> (d0)>
func.func @two_reductions(%x: tensor<4096x4096xf32>) -> (tensor<4096xf32>, tensor<4096xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e1 = tensor.empty() : tensor<4096xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4096xf32>) -> tensor<4096xf32>
  %minit = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<4096xf32>) -> tensor<4096xf32>
  %s = linalg.generic {indexing_maps = [#id2, #row2], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4096x4096xf32>) outs(%init : tensor<4096xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %0 = arith.addf %a, %acc : f32
    linalg.yield %0 : f32
  } -> tensor<4096xf32>
  %e2 = tensor.empty() : tensor<4096x4096xf32>
  %y = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4096x4096xf32>) outs(%e2 : tensor<4096x4096xf32>) {
  ^bb0(%a: f32, %o: f32):
    %0 = math.exp %a : f32
    linalg.yield %0 : f32
  } -> tensor<4096x4096xf32>
  %m = linalg.generic {indexing_maps = [#id2, #row2], iterator_types = ["parallel", "reduction"]}
      ins(%y : tensor<4096x4096xf32>) outs(%minit : tensor<4096xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %0 = arith.maximumf %a, %acc : f32
    linalg.yield %0 : f32
  } -> tensor<4096xf32>
  return %s, %m : tensor<4096xf32>, tensor<4096xf32>
}

// -----

// The same two kernels over a 64 KB input: a second read costs less than a launch (and hits
// L2): no input fusion, the reason recorded. Being launch-bound, the two kernels still
// share one launch, as a `horizontal` kernel.
// CHECK-LABEL: func.func @small_input
// CHECK-NOT: fusion.group input
// CHECK: fusion.group horizontal
// CHECK-SAME: input: small-input: a second read of 65536 B costs
// CHECK: return
#id3 = affine_map<(d0, d1) -> (d0, d1)>
#row3 = affine_map<(d0, d1) -> (d0)>
func.func @small_input(%x: tensor<128x128xf32>) -> (tensor<128xf32>, tensor<128x128xf32>) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e1 : tensor<128xf32>) -> tensor<128xf32>
  %s = linalg.generic {indexing_maps = [#id3, #row3], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<128x128xf32>) outs(%init : tensor<128xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %0 = arith.addf %a, %acc : f32
    linalg.yield %0 : f32
  } -> tensor<128xf32>
  %e2 = tensor.empty() : tensor<128x128xf32>
  %y = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<128x128xf32>) outs(%e2 : tensor<128x128xf32>) {
  ^bb0(%a: f32, %o: f32):
    %0 = math.exp %a : f32
    linalg.yield %0 : f32
  } -> tensor<128x128xf32>
  return %s, %y : tensor<128xf32>, tensor<128x128xf32>
}

// -----

// A row sum and a column sum of %x: one would tile rows, the other columns. Refused.
// CHECK-LABEL: func.func @rows_and_columns
// CHECK-NOT: fusion.group input
// CHECK: input: incompatible-iteration-space: the readers reduce input dims [0, 1]
// CHECK: return
#id4 = affine_map<(d0, d1) -> (d0, d1)>
#row4 = affine_map<(d0, d1) -> (d0)>
#col4 = affine_map<(d0, d1) -> (d1)>
func.func @rows_and_columns(%x: tensor<4096x4096xf32>) -> (tensor<4096xf32>, tensor<4096xf32>) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<4096xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4096xf32>) -> tensor<4096xf32>
  %s = linalg.generic {indexing_maps = [#id4, #row4], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4096x4096xf32>) outs(%init : tensor<4096xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %0 = arith.addf %a, %acc : f32
    linalg.yield %0 : f32
  } -> tensor<4096xf32>
  %c = linalg.generic {indexing_maps = [#id4, #col4], iterator_types = ["reduction", "parallel"]}
      ins(%x : tensor<4096x4096xf32>) outs(%init : tensor<4096xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %0 = arith.addf %a, %acc : f32
    linalg.yield %0 : f32
  } -> tensor<4096xf32>
  return %s, %c : tensor<4096xf32>, tensor<4096xf32>
}

// -----

// %x feeds a row sum, and (through a matmul of that sum's broadcast, a kernel of its own) a
// second consumer: a dependency path between the two readers of %x. Merging them would
// make a kernel wait for itself.
// CHECK-LABEL: func.func @dependent
// CHECK-NOT: fusion.group input
// CHECK: input: dependent: data flows from that kernel to this one
// CHECK: return
#id5 = affine_map<(d0, d1) -> (d0, d1)>
#row5 = affine_map<(d0, d1) -> (d0, 0)>
func.func @dependent(%x: tensor<4096x4096xf32>, %w: tensor<1x4096xf32>) -> tensor<4096x4096xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<4096x1xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4096x1xf32>) -> tensor<4096x1xf32>
  %s = linalg.generic {indexing_maps = [#id5, #row5], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4096x4096xf32>) outs(%init : tensor<4096x1xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %0 = arith.addf %a, %acc : f32
    linalg.yield %0 : f32
  } -> tensor<4096x1xf32>
  %e2 = tensor.empty() : tensor<4096x4096xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  %p = linalg.matmul ins(%s, %w : tensor<4096x1xf32>, tensor<1x4096xf32>) outs(%z : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  %y = linalg.generic {indexing_maps = [#id5, #id5, #id5], iterator_types = ["parallel", "parallel"]}
      ins(%x, %p : tensor<4096x4096xf32>, tensor<4096x4096xf32>) outs(%e2 : tensor<4096x4096xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %0 = arith.addf %a, %b : f32
    linalg.yield %0 : f32
  } -> tensor<4096x4096xf32>
  return %y : tensor<4096x4096xf32>
}

// -----

// Two projections of one large %x (attention's Q and K): each a contraction kernel. A merged
// group would not be one row or elementwise kernel (the CUDA code generator would run it
// on its one-thread-per-tile fallback): refused.
// CHECK-LABEL: func.func @two_matmuls
// CHECK-NOT: fusion.group input
// CHECK: input: not-one-kernel: group@{{[0-9:]+}} holds 'linalg.matmul'
// CHECK: return
func.func @two_matmuls(%x: tensor<8192x2048xf32>, %wq: tensor<2048x2048xf32>, %wk: tensor<2048x2048xf32>) -> (tensor<8192x2048xf32>, tensor<8192x2048xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8192x2048xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<8192x2048xf32>) -> tensor<8192x2048xf32>
  %q = linalg.matmul ins(%x, %wq : tensor<8192x2048xf32>, tensor<2048x2048xf32>) outs(%z : tensor<8192x2048xf32>) -> tensor<8192x2048xf32>
  %k = linalg.matmul ins(%x, %wk : tensor<8192x2048xf32>, tensor<2048x2048xf32>) outs(%z : tensor<8192x2048xf32>) -> tensor<8192x2048xf32>
  return %q, %k : tensor<8192x2048xf32>, tensor<8192x2048xf32>
}

// -----

// The CPU description decides the same (its tiles run both roots in one loop too).
// CPU-LABEL: func.func @on_the_cpu
// CPU: fusion.group input
// CPU-NOT: fusion.group
// CPU: return
// CHECK-LABEL: func.func @on_the_cpu
// CHECK: fusion.group input
#id7 = affine_map<(d0, d1) -> (d0, d1)>
#row7 = affine_map<(d0, d1) -> (d0)>
func.func @on_the_cpu(%x: tensor<4096x4096xf32>) -> (tensor<4096xf32>, tensor<4096x4096xf32>) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<4096xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4096xf32>) -> tensor<4096xf32>
  %s = linalg.generic {indexing_maps = [#id7, #row7], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4096x4096xf32>) outs(%init : tensor<4096xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %0 = arith.addf %a, %acc : f32
    linalg.yield %0 : f32
  } -> tensor<4096xf32>
  %e2 = tensor.empty() : tensor<4096x4096xf32>
  %y = linalg.generic {indexing_maps = [#id7, #id7], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4096x4096xf32>) outs(%e2 : tensor<4096x4096xf32>) {
  ^bb0(%a: f32, %o: f32):
    %0 = math.exp %a : f32
    linalg.yield %0 : f32
  } -> tensor<4096x4096xf32>
  return %s, %y : tensor<4096xf32>, tensor<4096x4096xf32>
}

// -----

// The row sum of the merged kernel is read by two later kernels: after the merge the
// planner looks at its result again (a regression: reading the erased group's result
// crashed), and refuses that 16 KB input as small.
// CHECK-LABEL: func.func @merged_result_read_twice
// CHECK: %[[G:[0-9]+]]:2 = fusion.group input
// CHECK: fusion.group single ({{.*}}%[[G]]#0 : tensor<4096xf32>)
// CHECK: fusion.group single ({{.*}}%[[G]]#0 : tensor<4096xf32>)
// CHECK-SAME: input: small-input: a second read of 16384 B
// CHECK: return
#id8 = affine_map<(d0, d1) -> (d0, d1)>
#row8 = affine_map<(d0, d1) -> (d0)>
func.func @merged_result_read_twice(%x: tensor<4096x4096xf32>, %y: tensor<4096x4096xf32>, %z: tensor<4096x4096xf32>) -> (tensor<4096x4096xf32>, tensor<4096x4096xf32>, tensor<4096x4096xf32>) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<4096xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4096xf32>) -> tensor<4096xf32>
  %s = linalg.generic {indexing_maps = [#id8, #row8], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4096x4096xf32>) outs(%init : tensor<4096xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %0 = arith.addf %a, %acc : f32
    linalg.yield %0 : f32
  } -> tensor<4096xf32>
  %e2 = tensor.empty() : tensor<4096x4096xf32>
  %ex = linalg.generic {indexing_maps = [#id8, #id8], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4096x4096xf32>) outs(%e2 : tensor<4096x4096xf32>) {
  ^bb0(%a: f32, %o: f32):
    %0 = math.exp %a : f32
    linalg.yield %0 : f32
  } -> tensor<4096x4096xf32>
  %u = linalg.generic {indexing_maps = [#id8, #row8, #id8], iterator_types = ["parallel", "parallel"]}
      ins(%y, %s : tensor<4096x4096xf32>, tensor<4096xf32>) outs(%e2 : tensor<4096x4096xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %0 = arith.mulf %a, %b : f32
    linalg.yield %0 : f32
  } -> tensor<4096x4096xf32>
  %v = linalg.generic {indexing_maps = [#id8, #row8, #id8], iterator_types = ["parallel", "parallel"]}
      ins(%z, %s : tensor<4096x4096xf32>, tensor<4096xf32>) outs(%e2 : tensor<4096x4096xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %0 = arith.addf %a, %b : f32
    linalg.yield %0 : f32
  } -> tensor<4096x4096xf32>
  return %ex, %u, %v : tensor<4096x4096xf32>, tensor<4096x4096xf32>, tensor<4096x4096xf32>
}
