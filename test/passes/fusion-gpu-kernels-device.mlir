// RUN: fusec-opt %s '--fusion-gpu-kernels{device=nvidia-h200}' | filecheck %s
// RUN: not fusec-opt %s '--fusion-gpu-kernels{device=cpu}' 2>&1 | filecheck %s --check-prefix=NOGPU

// `device`: whose code generator forms the kernels (CudaOptions.device reaches it through
// the CUDA target's `tiled` stage). The H200's marks the function done.
// CHECK: func.func @f
// CHECK-SAME: fusion.gpu_kernels
// A device with no GPU code generator registered is refused, naming the registered ones;
// nothing is rewritten with another device's rules.
// NOGPU: error: no code generator is registered for device 'cpu' (registered: nvidia-h200)
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
