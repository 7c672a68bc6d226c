// RUN: fusec-opt %s '--fusion-plan{device=nvidia-h200}' --split-input-file | filecheck %s --check-prefix=GPU
// RUN: fusec-opt %s '--fusion-plan{device=cpu}' --split-input-file | filecheck %s --check-prefix=CPU

// Where matmuls are GEMM library calls (cuBLASLt on the H200), the planner plans what code
// generation can run: a bias add stays with the matmul that produces it (cuBLASLt fuses it
// as that GEMM's epilogue); an op before a matmul that the library cannot read through is a
// kernel of its own (`gemm-prologue`); casts and transposes it reads through stay with a
// large matmul however many tiles it has. On the CPU, an elementwise op computed from a
// matmul's result goes to that matmul's epilogue too (`epilogue-first`: the next matmul's
// column tiles would each recompute it as a prologue); one that also depends on a reduction
// (a softmax's division) stays where the planner puts it.

#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
// The bias add between two matmuls: with the first (an epilogue group) on both targets, and
// the second records why it did not take it.
// GPU-LABEL: func.func @bias_stays_with_its_matmul
// GPU: %[[H:[0-9]+]] = fusion.group epilogue
// GPU: linalg.matmul
// GPU: arith.addf
// GPU: fusion.yield
// GPU: fusion.group single (%{{.+}} = %[[H]] : tensor<64x256xf32>
// GPU-SAME: fusion.refused = ["linalg.generic@{{[0-9:]+}}: gemm-prologue: linalg.matmul@{{[0-9:]+}} is a GEMM kernel of its own on nvidia-h200 (cuBLASLt's or fusec's tensor-core GEMM), which reads its operands from memory: this elementwise before it would be a kernel of its own; it is the epilogue of linalg.matmul@{{[0-9:]+}}, whose GEMM kernel fuses it"]
// GPU-NOT: arith.addf
// GPU: linalg.matmul
// GPU: return
// CPU-LABEL: func.func @bias_stays_with_its_matmul
// CPU: %[[H:[0-9]+]] = fusion.group epilogue
// CPU: linalg.matmul
// CPU: arith.addf
// CPU: fusion.yield
// CPU: fusion.group single (%{{.+}} = %[[H]] : tensor<64x256xf32>
// CPU-SAME: fusion.refused = ["linalg.generic@{{[0-9:]+}}: epilogue-first: it is computed from linalg.matmul@{{[0-9:]+}}'s result: in that contraction's epilogue it runs once per element, in this one's prologue once per column tile"]
// CPU-NOT: arith.addf
// CPU: linalg.matmul
// CPU: return
func.func @bias_stays_with_its_matmul(%x: tensor<64x128xf32>, %w1: tensor<128x256xf32>, %b1: tensor<256xf32>, %w2: tensor<256x64xf32>) -> tensor<64x64xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e1 = tensor.empty() : tensor<64x256xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<64x256xf32>) -> tensor<64x256xf32>
  %m1 = linalg.matmul ins(%x, %w1 : tensor<64x128xf32>, tensor<128x256xf32>) outs(%f1 : tensor<64x256xf32>) -> tensor<64x256xf32>
  %h = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]} ins(%m1, %b1 : tensor<64x256xf32>, tensor<256xf32>) outs(%e1 : tensor<64x256xf32>) {
  ^bb0(%in: f32, %b: f32, %out: f32):
    %s = arith.addf %in, %b : f32
    linalg.yield %s : f32
  } -> tensor<64x256xf32>
  %e2 = tensor.empty() : tensor<64x64xf32>
  %f2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %m2 = linalg.matmul ins(%h, %w2 : tensor<64x256xf32>, tensor<256x64xf32>) outs(%f2 : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %m2 : tensor<64x64xf32>
}

// -----

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// The same through a view: a Linear's [B*T, N] result seen as [B, T, N] by the activation
// (GPT-2's MLP, full size: its tanh-GELU was the second matmul's prologue, recomputed by each
// of its column tiles, 112 GFLOP/s against 150 for the first). On the CPU the activation and
// the view go to the first matmul's epilogue; the second matmul is alone.
// CPU-LABEL: func.func @activation_through_a_view
// CPU: %[[H:[0-9]+]] = fusion.group epilogue
// CPU: linalg.matmul
// CPU: tensor.expand_shape
// CPU: math.tanh
// CPU: fusion.yield
// CPU: fusion.group single (%{{.+}} = %[[H]] : tensor<1x64x256xf32>
// CPU-SAME: epilogue-first
// CPU-NOT: math.tanh
// CPU: linalg.matmul
// CPU: return
func.func @activation_through_a_view(%x: tensor<64x128xf32>, %w1: tensor<128x256xf32>, %w2: tensor<256x64xf32>) -> tensor<64x64xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e1 = tensor.empty() : tensor<64x256xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<64x256xf32>) -> tensor<64x256xf32>
  %m1 = linalg.matmul ins(%x, %w1 : tensor<64x128xf32>, tensor<128x256xf32>) outs(%f1 : tensor<64x256xf32>) -> tensor<64x256xf32>
  %v = tensor.expand_shape %m1 [[0, 1], [2]] output_shape [1, 64, 256] : tensor<64x256xf32> into tensor<1x64x256xf32>
  %e3 = tensor.empty() : tensor<1x64x256xf32>
  %g = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<1x64x256xf32>) outs(%e3 : tensor<1x64x256xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = math.tanh %in : f32
    %s = arith.mulf %in, %t : f32
    linalg.yield %s : f32
  } -> tensor<1x64x256xf32>
  %c = tensor.collapse_shape %g [[0, 1], [2]] : tensor<1x64x256xf32> into tensor<64x256xf32>
  %e2 = tensor.empty() : tensor<64x64xf32>
  %f2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %m2 = linalg.matmul ins(%c, %w2 : tensor<64x256xf32>, tensor<256x64xf32>) outs(%f2 : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %m2 : tensor<64x64xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
// bf16 operands cast to f32, the second one transposed, before a 4096^3 matmul. Each cast is
// broadcast along the other operand's dim, so as a recomputed producer it would cost more
// than it saves (`slower`) and was split off; cuBLASLt reads the bf16 operands through the
// casts and the transpose, so on the H200 they are one group with the matmul, unrefused.
// GPU-LABEL: func.func @casts_join_a_large_matmul
// GPU: fusion.group vertical
// GPU-NOT: fusion.refused
// GPU: arith.extf
// GPU: arith.extf
// GPU: linalg.transpose
// GPU: linalg.matmul
// GPU: fusion.yield
// GPU-NOT: fusion.group
// GPU: return
func.func @casts_join_a_large_matmul(%a: tensor<4096x4096xbf16>, %b: tensor<4096x4096xbf16>) -> tensor<4096x4096xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %ea = tensor.empty() : tensor<4096x4096xf32>
  %fa = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4096x4096xbf16>) outs(%ea : tensor<4096x4096xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %c = arith.extf %in : bf16 to f32
    linalg.yield %c : f32
  } -> tensor<4096x4096xf32>
  %eb = tensor.empty() : tensor<4096x4096xf32>
  %fb = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%b : tensor<4096x4096xbf16>) outs(%eb : tensor<4096x4096xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %c = arith.extf %in : bf16 to f32
    linalg.yield %c : f32
  } -> tensor<4096x4096xf32>
  %et = tensor.empty() : tensor<4096x4096xf32>
  %bt = linalg.transpose ins(%fb : tensor<4096x4096xf32>) outs(%et : tensor<4096x4096xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<4096x4096xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  %m = linalg.matmul ins(%fa, %bt : tensor<4096x4096xf32>, tensor<4096x4096xf32>) outs(%f : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  return %m : tensor<4096x4096xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
// The same cast, also returned: cuBLASLt cannot read through a value that is used twice
// (the cast must be written out anyway), so on the H200 it is refused as the matmul's
// prologue and is a kernel of its own.
// GPU-LABEL: func.func @cast_used_twice
// GPU: %[[C:[0-9]+]] = fusion.group single
// GPU: arith.extf
// GPU: fusion.group single (%{{.+}} = %[[C]] : tensor<4096x4096xf32>
// GPU-SAME: "linalg.generic@{{[0-9:]+}}: gemm-prologue: linalg.matmul@{{[0-9:]+}} is a GEMM kernel of its own on nvidia-h200 (cuBLASLt's or fusec's tensor-core GEMM), which reads its operands from memory: this elementwise before it would be a kernel of its own"
// GPU-NOT: arith.extf
// GPU: linalg.matmul
func.func @cast_used_twice(%a: tensor<4096x4096xbf16>, %b: tensor<4096x4096xf32>) -> (tensor<4096x4096xf32>, tensor<4096x4096xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %ea = tensor.empty() : tensor<4096x4096xf32>
  %fa = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4096x4096xbf16>) outs(%ea : tensor<4096x4096xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %c = arith.extf %in : bf16 to f32
    linalg.yield %c : f32
  } -> tensor<4096x4096xf32>
  %e = tensor.empty() : tensor<4096x4096xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  %m = linalg.matmul ins(%fa, %b : tensor<4096x4096xf32>, tensor<4096x4096xf32>) outs(%f : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  return %m, %fa : tensor<4096x4096xf32>, tensor<4096x4096xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d0, 0)>
// A row normalisation feeding a 512-wide matmul. On the CPU (own matmul loops, 256 columns
// kept whole at most) fusing the row sum would recompute it for every column tile
// (`recompute`), and the division is refused as a prologue so that the row computation
// stays whole. On the H200 the division is refused because cuBLASLt reads its A from
// memory (`gemm-prologue`): fused, it would be a kernel of its own anyway.
// CPU-LABEL: func.func @norm_then_wide_matmul
// CPU: fusion.group vertical
// CPU: arith.divf
// CPU: fusion.group single
// CPU-SAME: fusion.refused = ["linalg.generic@{{[0-9:]+}}: recompute: fusing it leaves loop 1 (512 wide) of linalg.matmul
// CPU-SAME: "linalg.generic@{{[0-9:]+}}: prologue:
// CPU: linalg.matmul
// GPU-LABEL: func.func @norm_then_wide_matmul
// GPU: fusion.group vertical
// GPU: arith.divf
// GPU: fusion.group single
// GPU-SAME: fusion.refused = ["linalg.generic@{{[0-9:]+}}: gemm-prologue:
// GPU: linalg.matmul
func.func @norm_then_wide_matmul(%x: tensor<64x128xf32>, %w: tensor<128x512xf32>) -> tensor<64x512xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<64x128xf32>
  %r0 = tensor.empty() : tensor<64x1xf32>
  %z = linalg.fill ins(%cst : f32) outs(%r0 : tensor<64x1xf32>) -> tensor<64x1xf32>
  %s = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<64x128xf32>) outs(%z : tensor<64x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %12 = arith.addf %in, %out : f32
    linalg.yield %12 : f32
  } -> tensor<64x1xf32>
  %n = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%x, %s : tensor<64x128xf32>, tensor<64x1xf32>) outs(%e : tensor<64x128xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %12 = arith.divf %in, %in_1 : f32
    linalg.yield %12 : f32
  } -> tensor<64x128xf32>
  %me = tensor.empty() : tensor<64x512xf32>
  %f = linalg.fill ins(%cst : f32) outs(%me : tensor<64x512xf32>) -> tensor<64x512xf32>
  %m = linalg.matmul ins(%n, %w : tensor<64x128xf32>, tensor<128x512xf32>) outs(%f : tensor<64x512xf32>) -> tensor<64x512xf32>
  return %m : tensor<64x512xf32>
}

// -----

// Two independent, launch-bound transposes. The H200's fast emitter has no transpose: a
// horizontal (two-output) kernel of them would be split per output again by code generation,
// so each stays alone with the reason; on the CPU they share a launch.
// GPU-LABEL: func.func @two_small_transposes
// GPU: fusion.group single
// GPU-SAME: horizontal: fast-emitter: linalg.transpose@{{[0-9:]+}}: 'linalg.transpose' is not emitted by the fast emitter; a multi-output kernel of it would be split per output on nvidia-h200
// GPU: fusion.group single
// GPU-SAME: horizontal: fast-emitter
// GPU-NOT: fusion.group horizontal
// CPU-LABEL: func.func @two_small_transposes
// CPU: fusion.group horizontal
// CPU: linalg.transpose
// CPU: linalg.transpose
func.func @two_small_transposes(%a: tensor<16x32xf32>, %b: tensor<8x64xf32>) -> (tensor<32x16xf32>, tensor<64x8xf32>) {
  %ea = tensor.empty() : tensor<32x16xf32>
  %ta = linalg.transpose ins(%a : tensor<16x32xf32>) outs(%ea : tensor<32x16xf32>) permutation = [1, 0]
  %eb = tensor.empty() : tensor<64x8xf32>
  %tb = linalg.transpose ins(%b : tensor<8x64xf32>) outs(%eb : tensor<64x8xf32>) permutation = [1, 0]
  return %ta, %tb : tensor<32x16xf32>, tensor<64x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
// Two independent, launch-bound elementwise kernels the fast emitter takes: one launch on
// the H200 too.
// GPU-LABEL: func.func @two_small_exps
// GPU: fusion.group horizontal
// GPU-NOT: fast-emitter
// GPU: math.exp
// GPU: math.exp
func.func @two_small_exps(%a: tensor<16x32xf32>, %b: tensor<8x64xf32>) -> (tensor<16x32xf32>, tensor<8x64xf32>) {
  %ea = tensor.empty() : tensor<16x32xf32>
  %xa = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<16x32xf32>) outs(%ea : tensor<16x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %x = math.exp %in : f32
    linalg.yield %x : f32
  } -> tensor<16x32xf32>
  %eb = tensor.empty() : tensor<8x64xf32>
  %xb = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%b : tensor<8x64xf32>) outs(%eb : tensor<8x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %x = math.exp %in : f32
    linalg.yield %x : f32
  } -> tensor<8x64xf32>
  return %xa, %xb : tensor<16x32xf32>, tensor<8x64xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#red = affine_map<(d0, d1) -> (d0, 0)>
// What epilogue-first leaves alone (CPU plans): an elementwise op that also reads a row
// reduction of the matmul's result (a softmax-like division by the row sum) is no function
// of the matmul alone: it stays in the second matmul's group with the reduction, as before.
// CPU-LABEL: func.func @row_division_stays_a_prologue
// CPU: fusion.group vertical
// CPU-NOT: epilogue-first
// CPU: arith.divf
// CPU: linalg.matmul
// CPU: return
func.func @row_division_stays_a_prologue(%x: tensor<64x128xf32>, %w1: tensor<128x256xf32>, %w2: tensor<256x64xf32>) -> tensor<64x64xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e1 = tensor.empty() : tensor<64x256xf32>
  %f1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<64x256xf32>) -> tensor<64x256xf32>
  %m1 = linalg.matmul ins(%x, %w1 : tensor<64x128xf32>, tensor<128x256xf32>) outs(%f1 : tensor<64x256xf32>) -> tensor<64x256xf32>
  %er = tensor.empty() : tensor<64xf32>
  %fr = linalg.fill ins(%cst : f32) outs(%er : tensor<64xf32>) -> tensor<64xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%m1 : tensor<64x256xf32>) outs(%fr : tensor<64xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  %d = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%m1, %sum : tensor<64x256xf32>, tensor<64xf32>) outs(%e1 : tensor<64x256xf32>) {
  ^bb0(%in: f32, %s: f32, %out: f32):
    %q = arith.divf %in, %s : f32
    linalg.yield %q : f32
  } -> tensor<64x256xf32>
  %e2 = tensor.empty() : tensor<64x64xf32>
  %f2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %m2 = linalg.matmul ins(%d, %w2 : tensor<64x256xf32>, tensor<256x64xf32>) outs(%f2 : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %m2 : tensor<64x64xf32>
}

// -----

// A row statistic read by the matmul's epilogue (a folded norm's rstd): on the H200 the
// reduction computing it stays a kernel of its own (`gemm-epilogue-operand`: the GEMM's
// epilogue reads its operands from memory; in the matmul's group the tiled stage would
// split the epilogue off the GEMM), and the epilogue's multiply stays with the matmul. On
// the CPU the planner may take it in (no GEMM library).
// GPU-LABEL: func.func @row_statistic_for_the_epilogue
// GPU: %[[S:[0-9]+]] = fusion.group
// GPU: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
// GPU: fusion.group epilogue (%{{.+}} = %[[S]] : tensor<64x1xf32>{{.*}}fusion.refused = [{{.*}}gemm-epilogue-operand: linalg.matmul@{{[0-9:]+}} runs as a GEMM kernel of nvidia-h200 whose epilogue reads its operands from memory: this reduction computing one would be a kernel of its own
// GPU: linalg.matmul
// GPU: arith.mulf
// GPU: return
// CPU-LABEL: func.func @row_statistic_for_the_epilogue
// CPU-NOT: gemm-epilogue-operand
// CPU: return
#id = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0, 0)>
func.func @row_statistic_for_the_epilogue(%x: tensor<64x128xbf16>, %w: tensor<128x256xbf16>, %s: tensor<64x128xf32>) -> tensor<64x256xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e1 = tensor.empty() : tensor<64x1xf32>
  %z1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<64x1xf32>) -> tensor<64x1xf32>
  %sum = linalg.generic {indexing_maps = [#id, #r], iterator_types = ["parallel", "reduction"]} ins(%s : tensor<64x128xf32>) outs(%z1 : tensor<64x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.mulf %in, %in : f32
    %1 = arith.addf %0, %out : f32
    linalg.yield %1 : f32
  } -> tensor<64x1xf32>
  %e = tensor.empty() : tensor<64x256xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<64x256xf32>) -> tensor<64x256xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<64x128xbf16>, tensor<128x256xbf16>) outs(%f : tensor<64x256xf32>) -> tensor<64x256xf32>
  %y = linalg.generic {indexing_maps = [#id, #r, #id], iterator_types = ["parallel", "parallel"]} ins(%mm, %sum : tensor<64x256xf32>, tensor<64x1xf32>) outs(%e : tensor<64x256xf32>) {
  ^bb0(%in: f32, %r: f32, %out: f32):
    %0 = arith.mulf %in, %r : f32
    linalg.yield %0 : f32
  } -> tensor<64x256xf32>
  return %y : tensor<64x256xf32>
}
