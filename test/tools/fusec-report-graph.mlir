// fusec --report and --graph are derived from the fusion stage's IR: one kernel for this
// exp/sum/div chain, listed with its kind and ops; the graph has one cluster per kernel.
// The report adds the tiled stage's tiling, placement and capacity (CPU target).
// RUN: fusec %s --report | filecheck %s --check-prefix=REPORT
// RUN: fusec %s --report=json | filecheck %s --check-prefix=JSON
// RUN: fusec %s --graph %t.dot && filecheck %s --check-prefix=DOT < %t.dot
// RUN: not fusec %s --graph %t.bmp 2>&1 | filecheck %s --check-prefix=BADFMT

// REPORT: fusion plan for cpu: 1 kernel
// REPORT: 0 vertical
// REPORT-SAME: linalg.generic
// The tiled stage's facts per kernel: too small to tile, so one tile; its values placed.
// REPORT: tiling (tiled stage): 1 kernel
// REPORT: 0 untiled 1 1 4160 0 - 0.50 global=1 register=3 fits
// JSON: "kind": "vertical"
// JSON: "tiling": {
// JSON: "grid": 1,
// JSON: "on_chip_bytes": 4160,
// JSON: "capacity": "fits"
// Nodes say what they compute (a generic's payload, a reduction, the result's shape), and
// the graph shows the model's inputs and outputs.
// DOT: digraph fusion {
// DOT: f0_arg0 [label="input 0\n16x64 f32", shape=ellipse];
// DOT: subgraph cluster_f0_g0 {
// DOT-NEXT: label="kernel 0: vertical"
// DOT: [label="exp\n16x64 f32"];
// DOT: [label="reduce(addf)\n16 f32"];
// DOT: [label="divf\n16x64 f32"];
// DOT-NOT: cluster_f0_g1
// DOT: f0_out0 [label="output 0", shape=ellipse];
// DOT: f0_g0_{{[0-9]+}} -> f0_out0;
// BADFMT: error: --graph: unknown format '.bmp'

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<16x64xf32>) -> tensor<16x64xf32> {
  %zero = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<16x64xf32>
  %e1 = tensor.empty() : tensor<16xf32>
  %exp = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<16x64xf32>) outs(%e2 : tensor<16x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %v = math.exp %in : f32
    linalg.yield %v : f32
  } -> tensor<16x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e1 : tensor<16xf32>) -> tensor<16xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%exp : tensor<16x64xf32>) outs(%init : tensor<16xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  %div = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%exp, %sum : tensor<16x64xf32>, tensor<16xf32>) outs(%e2 : tensor<16x64xf32>) {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %d = arith.divf %a, %b : f32
    linalg.yield %d : f32
  } -> tensor<16x64xf32>
  return %div : tensor<16x64xf32>
}
