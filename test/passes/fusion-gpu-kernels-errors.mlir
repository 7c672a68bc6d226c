// RUN: not fusec-opt %s --fusion-gpu-kernels 2>&1 | filecheck %s
// RUN: not fusec-opt %s --fusion-gpu-kernels 2>/dev/null | filecheck %s --check-prefix=NOOUT --allow-empty

// A model that keeps state between calls (an RNG seed) has no CUDA artifact yet: refused,
// located at the model function, before anything is rewritten.
// CHECK: fusion-gpu-kernels-errors.mlir:[[@LINE+3]]:1: error: the model keeps state between calls (an RNG seed: torch.rand, dropout, ...; a buffer forward updates in place), which the CUDA target does not support yet; compile it with --target cpu
// Nothing is printed on stdout.
// NOOUT-NOT: {{.}}
func.func @stateful(%x: tensor<4xf32>) -> tensor<4xf32> attributes {fusion.state = []} {
  return %x : tensor<4xf32>
}
