// RUN: fusec-opt %s '--fusion-tile{threads=4,min-tile-kb=1}' --canonicalize --cse '--fusion-place{device=h200}' --split-input-file | filecheck %s --check-prefix=GPU
// RUN: fusec-opt %s '--fusion-tile{threads=4,min-tile-kb=1}' --canonicalize --cse --fusion-place --split-input-file | filecheck %s --check-prefix=CPU

// Softmax over rows, tiled 4 rows per tile. The input row slice is read once per element by
// each reader (streamed from global); the max is broadcast back over its row (kept: shared on
// the GPU); x - max feeds only exp, once per element (register); exp is read by the sum and the
// division, each element once at the point that made it (the row kept between a reduction
// and its consumer): on the GPU each thread keeps its own elements, so registers, not shared
// memory; the sum is broadcast (shared); the division is the output (global); the fills are
// accumulators (register).
// On the CPU every kept value stays in the core's registers/L1: `register`, counted in on_chip.
// GPU-LABEL: func.func @softmax_rows
// GPU: fusion.group reduction
// GPU-SAME: fusion.placement = {global = 65536 : i64, on_chip = 32 : i64, register = 4 : i64, shared = 32 : i64}
// GPU: scf.forall
// GPU: tensor.extract_slice %{{.+}} [4, 256] {{.*}}{fusion.mem = #fusion.mem<global>}
// GPU: %[[FM:.+]] = linalg.generic {{.*}}outs(%{{.+}} : tensor<4xf32>) attrs =  {fusion.mem = #fusion.mem<register>}
// GPU: %[[MAX:.+]] = linalg.generic {{.*}}["parallel", "reduction"]{{.*}}outs(%[[FM]] : tensor<4xf32>) attrs =  {fusion.mem = #fusion.mem<shared>}
// GPU: %[[SUB:.+]] = linalg.generic {{.*}}ins(%{{.+}}, %[[MAX]] : {{.*}}) attrs =  {fusion.mem = #fusion.mem<register>}
// GPU: %[[EXP:.+]] = linalg.generic {{.*}}ins(%[[SUB]] : {{.*}}) attrs =  {fusion.mem = #fusion.mem<register>}
// GPU: %[[SUM:.+]] = linalg.generic {{.*}}ins(%[[EXP]] : {{.*}}) attrs =  {fusion.mem = #fusion.mem<shared>}
// GPU: %[[DIV:.+]] = linalg.generic {{.*}}ins(%[[EXP]], %[[SUM]] : {{.*}}) attrs =  {fusion.mem = #fusion.mem<global>}
// GPU: tensor.parallel_insert_slice %[[DIV]]
// CPU-LABEL: func.func @softmax_rows
// CPU: fusion.placement = {global = 65536 : i64, on_chip = 4128 : i64, register = 6 : i64, shared = 0 : i64}
// CPU-NOT: #fusion.mem<shared>
// CPU: %[[EXP:.+]] = linalg.generic {{.*}}ins(%{{.+}} : tensor<4x256xf32>) outs(%{{.+}} : tensor<4x256xf32>) attrs =  {fusion.mem = #fusion.mem<register>}
// CPU-NEXT: ^bb0
// CPU-NEXT: math.exp
// CPU: linalg.generic {{.*}}ins(%[[EXP]], %{{.+}} : {{.*}}) attrs =  {fusion.mem = #fusion.mem<global>}
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @softmax_rows(%x: tensor<64x256xf32>) -> tensor<64x256xf32> {
  %r = fusion.group reduction (%a = %x : tensor<64x256xf32>) -> tensor<64x256xf32> {
    %ninf = arith.constant 0xFF800000 : f32
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<64xf32>
    %e2 = tensor.empty() : tensor<64x256xf32>
    %fm = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<64xf32>) -> tensor<64xf32>
    %m = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
        ins(%a : tensor<64x256xf32>) outs(%fm : tensor<64xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.maximumf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<64xf32>
    %sub = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a, %m : tensor<64x256xf32>, tensor<64xf32>) outs(%e2 : tensor<64x256xf32>) {
    ^bb0(%in: f32, %mx: f32, %out: f32):
      %t = arith.subf %in, %mx : f32
      linalg.yield %t : f32
    } -> tensor<64x256xf32>
    %exp = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%sub : tensor<64x256xf32>) outs(%e2 : tensor<64x256xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<64x256xf32>
    %fs = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64xf32>) -> tensor<64xf32>
    %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
        ins(%exp : tensor<64x256xf32>) outs(%fs : tensor<64xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<64xf32>
    %d = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
        ins(%exp, %s : tensor<64x256xf32>, tensor<64xf32>) outs(%e2 : tensor<64x256xf32>) {
    ^bb0(%in: f32, %sum: f32, %out: f32):
      %q = arith.divf %in, %sum : f32
      linalg.yield %q : f32
    } -> tensor<64x256xf32>
    fusion.yield %d : tensor<64x256xf32>
  }
  return %r : tensor<64x256xf32>
}

// -----

// Matmul with a fused ReLU producer and a bias epilogue, 32 rows of M per tile (the CPU
// row tile of a matmul-rooted kernel: at least 24 rows, dividing M). The ReLU'd
// A tile is read by every column of the matmul (reuse: the tile of a matmul operand is
// shared); the accumulator and the matmul result are read once (register); the bias slice
// is streamed (global); the epilogue's result is the output (global).
// GPU-LABEL: func.func @relu_matmul_bias
// GPU: fusion.placement = {global = 16384 : i64, on_chip = 4096 : i64, register = 2 : i64, shared = 4096 : i64}
// GPU: %[[RELU:.+]] = linalg.generic {{.*}}outs(%{{.+}} : tensor<32x32xf32>) attrs =  {fusion.mem = #fusion.mem<shared>}
// GPU-NEXT: ^bb0
// GPU-NEXT: arith.maximumf
// GPU: %[[ACC:.+]] = linalg.generic {{.*}}outs(%{{.+}} : tensor<32x64xf32>) attrs =  {fusion.mem = #fusion.mem<register>}
// GPU: %[[MM:.+]] = linalg.generic {{.*}}ins(%[[RELU]], %{{.+}} : tensor<32x32xf32>, tensor<32x64xf32>) outs(%[[ACC]] : tensor<32x64xf32>) attrs =  {fusion.mem = #fusion.mem<register>}
// GPU: %[[BIAS:.+]] = tensor.extract_slice {{.*}}{fusion.mem = #fusion.mem<global>}
// GPU: linalg.generic {{.*}}ins(%[[MM]], %[[BIAS]] : {{.*}}) attrs =  {fusion.mem = #fusion.mem<global>}
// CPU-LABEL: func.func @relu_matmul_bias
// CPU: fusion.placement = {global = 16384 : i64, on_chip = 4096 : i64, register = 3 : i64, shared = 0 : i64}
func.func @relu_matmul_bias(%a: tensor<64x32xf32>, %b: tensor<32x64xf32>, %bias: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %r = fusion.group epilogue (%x = %a : tensor<64x32xf32>, %y = %b : tensor<32x64xf32>, %z = %bias : tensor<64x64xf32>) -> tensor<64x64xf32> {
    %zero = arith.constant 0.0 : f32
    %ea = tensor.empty() : tensor<64x32xf32>
    %relu = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
        ins(%x : tensor<64x32xf32>) outs(%ea : tensor<64x32xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = arith.maximumf %in, %zero : f32
      linalg.yield %t : f32
    } -> tensor<64x32xf32>
    %e = tensor.empty() : tensor<64x64xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
    %m = linalg.matmul ins(%relu, %y : tensor<64x32xf32>, tensor<32x64xf32>) outs(%f : tensor<64x64xf32>) -> tensor<64x64xf32>
    %o = linalg.add ins(%m, %z : tensor<64x64xf32>, tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
    fusion.yield %o : tensor<64x64xf32>
  }
  return %r : tensor<64x64xf32>
}

// -----

// Negative: a group too small to tile is one tile; its values are still placed. exp is read
// by one op (twice, at the same point): register; only the output goes to global memory.
// GPU-LABEL: func.func @too_small
// GPU: fusion.placement = {global = 128 : i64, on_chip = 0 : i64, register = 1 : i64, shared = 0 : i64}
// GPU-NOT: scf.forall
// GPU: %[[EXP:.+]] = linalg.generic {{.*}}attrs =  {fusion.mem = #fusion.mem<register>}
// GPU: linalg.generic {{.*}}ins(%[[EXP]], %[[EXP]] : {{.*}}) attrs =  {fusion.mem = #fusion.mem<global>}
func.func @too_small(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = fusion.group vertical (%a = %x : tensor<4x8xf32>) -> tensor<4x8xf32> {
    %e = tensor.empty() : tensor<4x8xf32>
    %y = linalg.exp ins(%a : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %z = linalg.mul ins(%y, %y : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    fusion.yield %z : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}
