// RUN: fusec-opt %s --fusion-cpu-abi | filecheck %s

// Each kernel of the plan is renamed to its body (internal) and exported through a wrapper
// of its name: pointer i is loaded from buffers[i], then the tile range is passed on.
// CHECK-LABEL: llvm.func internal @fusec_kernel_0_body
// CHECK-SAME: (%{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: i64, %{{.+}}: i64)
// CHECK-LABEL: llvm.func @fusec_kernel_0
// CHECK-SAME: (%[[BUF:.+]]: !llvm.ptr, %[[B:.+]]: i64, %[[E:.+]]: i64)
// CHECK: %[[A0:.+]] = llvm.getelementptr %[[BUF]][0] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK: %[[P0:.+]] = llvm.load %[[A0]] : !llvm.ptr -> !llvm.ptr
// CHECK: %[[A1:.+]] = llvm.getelementptr %[[BUF]][1]
// CHECK: %[[P1:.+]] = llvm.load %[[A1]]
// CHECK: llvm.call @fusec_kernel_0_body(%[[P0]], %[[P1]], %[[B]], %[[E]])
// CHECK: llvm.return
module attributes {fusion.plan = "{\22target\22: \22cpu\22, \22buffers\22: [{\22id\22: 0, \22role\22: \22input\22, \22name\22: \22input0\22, \22shape\22: [8], \22dtype\22: \22float32\22}, {\22id\22: 1, \22role\22: \22output\22, \22name\22: \22output0\22, \22shape\22: [8], \22dtype\22: \22float32\22}], \22launches\22: [{\22symbol\22: \22fusec_kernel_0\22, \22buffers\22: [0, 1], \22grid\22: 1, \22kind\22: \22single\22, \22ops\22: [], \22info\22: {}, \22block\22: 0, \22shared_bytes\22: 0}], \22inputs\22: [0], \22outputs\22: [1], \22metadata\22: {}}"} {
  llvm.func @fusec_kernel_0(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: i64, %arg3: i64) {
    %0 = llvm.load %arg0 : !llvm.ptr -> f32
    llvm.store %0, %arg1 : f32, !llvm.ptr
    llvm.return
  }
}
