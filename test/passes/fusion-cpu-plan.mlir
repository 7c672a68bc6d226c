// RUN: fusec-opt %s --fusion-cpu-plan | filecheck %s

// The bufferized host function becomes the plan (JSON in `fusion.plan`) and is erased.
// Buffers: the input, the output (an out-parameter), one temporary between the kernels.
// The last kernel wrote a temporary that was then copied into the output: the plan lets it
// write the output directly (buffer 1), so that temporary is gone.
// CHECK: module attributes {fusion.plan =
// CHECK-SAME: \22id\22: 0, \22role\22: \22input\22
// CHECK-SAME: \22id\22: 1, \22role\22: \22output\22
// CHECK-SAME: \22id\22: 2, \22role\22: \22temp\22
// CHECK-NOT: \22id\22: 3
// CHECK-SAME: \22symbol\22: \22fusec_kernel_0\22, \22buffers\22: [0, 2], \22grid\22: 1, \22kind\22: \22single\22
// CHECK-SAME: \22symbol\22: \22fusec_kernel_1\22, \22buffers\22: [2, 0, 1], \22grid\22: 1, \22kind\22: \22vertical\22
// CHECK-SAME: \22inputs\22: [0], \22outputs\22: [1]
// CHECK: func.func private @fusec_kernel_0
// CHECK: func.func private @fusec_kernel_1
// CHECK-NOT: func.func @main
module {
  func.func private @fusec_kernel_0(%arg0: memref<8xf32>, %arg1: memref<8xf32>) attributes {fusion.grid = 1 : i64, fusion.kind = "single"} {
    linalg.exp ins(%arg0 : memref<8xf32>) outs(%arg1 : memref<8xf32>)
    return
  }
  func.func private @fusec_kernel_1(%arg0: memref<8xf32>, %arg1: memref<8xf32>, %arg2: memref<8xf32>) attributes {fusion.kind = "vertical"} {
    linalg.add ins(%arg0, %arg1 : memref<8xf32>, memref<8xf32>) outs(%arg2 : memref<8xf32>)
    return
  }
  func.func @main(%arg0: memref<8xf32>, %arg1: memref<8xf32>) attributes {fusion.num_inputs = 1 : i64} {
    %alloc = memref.alloc() : memref<8xf32>
    call @fusec_kernel_0(%arg0, %alloc) : (memref<8xf32>, memref<8xf32>) -> ()
    %alloc_0 = memref.alloc() : memref<8xf32>
    call @fusec_kernel_1(%alloc, %arg0, %alloc_0) : (memref<8xf32>, memref<8xf32>, memref<8xf32>) -> ()
    memref.copy %alloc_0, %arg1 : memref<8xf32> to memref<8xf32>
    return
  }
}
