// RUN: fusec-opt %s '--fusion-cpu-abi{partial=true}' | filecheck %s
// RUN: not fusec-opt %s --fusion-cpu-abi 2>&1 | filecheck %s --check-prefix=WHOLE

// A part of a model's kernels (the `cpu` stage run over parts side by side,
// compiler/targets/cpu/parts.py): the plan names two kernels, the module holds one. With
// `partial` the kernel it holds is wrapped and the other is not looked for; without it the
// missing kernel is an error, as in a whole module.
// CHECK-NOT: @fusec_kernel_0
// CHECK-LABEL: llvm.func internal @fusec_kernel_1_body
// CHECK-LABEL: llvm.func @fusec_kernel_1
// CHECK-SAME: (%[[BUF:.+]]: !llvm.ptr, %[[B:.+]]: i64, %[[E:.+]]: i64)
// CHECK: llvm.call @fusec_kernel_1_body
// CHECK-NOT: @fusec_kernel_0
// WHOLE: kernel 'fusec_kernel_0' of the plan is not in the module
module attributes {fusion.plan = "{\22target\22: \22cpu\22, \22buffers\22: [{\22id\22: 0, \22role\22: \22input\22, \22name\22: \22input0\22, \22shape\22: [8], \22dtype\22: \22float32\22}, {\22id\22: 1, \22role\22: \22intermediate\22, \22name\22: \22t0\22, \22shape\22: [8], \22dtype\22: \22float32\22}, {\22id\22: 2, \22role\22: \22output\22, \22name\22: \22output0\22, \22shape\22: [8], \22dtype\22: \22float32\22}], \22launches\22: [{\22symbol\22: \22fusec_kernel_0\22, \22buffers\22: [0, 1], \22grid\22: 1, \22kind\22: \22single\22, \22ops\22: [], \22info\22: {}, \22block\22: 0, \22shared_bytes\22: 0}, {\22symbol\22: \22fusec_kernel_1\22, \22buffers\22: [1, 2], \22grid\22: 1, \22kind\22: \22single\22, \22ops\22: [], \22info\22: {}, \22block\22: 0, \22shared_bytes\22: 0}], \22inputs\22: [0], \22outputs\22: [2], \22metadata\22: {}}"} {
  llvm.func @fusec_kernel_1(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: i64, %arg3: i64) {
    %0 = llvm.load %arg0 : !llvm.ptr -> f32
    llvm.store %0, %arg1 : f32, !llvm.ptr
    llvm.return
  }
}
