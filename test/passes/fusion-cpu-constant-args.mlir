// RUN: fusec-opt %s --fusion-cpu-constant-args | filecheck %s
// RUN: fusec-opt %s '--fusion-cpu-constant-args=merge=false' | filecheck %s --check-prefix=NOMERGE

// Two layers' kernels that differ only in the weight they read (two globals): the weights
// become arguments the host reads and passes, the globals public (the host code names them),
// and the two kernels one, called twice. What must not move: a splat global (the kernel may
// fold it). What must not merge: a kernel that computes something else (a subtraction).
// CHECK-DAG: memref.global constant @__constant_4xf32 : memref<4xf32> = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]>
// CHECK-DAG: memref.global constant @__constant_4xf32_0 : memref<4xf32> = dense<[5.000000e+00, 6.000000e+00, 7.000000e+00, 8.000000e+00]>
// CHECK-DAG: memref.global "private" constant @__splat : memref<4xf32> = dense<2.000000e+00>
// CHECK-LABEL: func.func private @fusec_kernel_0(
// CHECK-SAME: %{{.*}}: memref<4xf32>, %{{.*}}: memref<4xf32>, %{{.*}}: memref<4xf32>)
// CHECK-NOT: memref.get_global @__constant
// CHECK: memref.get_global @__splat
// CHECK: arith.addf
// CHECK-NOT: func.func private @fusec_kernel_1(
// CHECK-LABEL: func.func private @fusec_kernel_2(
// CHECK: arith.subf
// CHECK-LABEL: func.func @main
// CHECK: %[[G0:.*]] = memref.get_global @__constant_4xf32 : memref<4xf32>
// CHECK: call @fusec_kernel_0(%arg0, %{{.*}}, %[[G0]])
// CHECK: %[[G1:.*]] = memref.get_global @__constant_4xf32_0 : memref<4xf32>
// CHECK: call @fusec_kernel_0(%{{.*}}, %{{.*}}, %[[G1]])
// CHECK: call @fusec_kernel_2(
// NOMERGE: func.func private @fusec_kernel_1(
// NOMERGE: call @fusec_kernel_1(
module {
  memref.global "private" constant @__constant_4xf32 : memref<4xf32> = dense<[1.0, 2.0, 3.0, 4.0]>
  memref.global "private" constant @__constant_4xf32_0 : memref<4xf32> = dense<[5.0, 6.0, 7.0, 8.0]>
  memref.global "private" constant @__splat : memref<4xf32> = dense<2.0>
  func.func private @fusec_kernel_0(%x: memref<4xf32>, %y: memref<4xf32>) attributes {fusion.kind = "single", fusion.reason = "layer 0 at model.py:3"} {
    %w = memref.get_global @__constant_4xf32 : memref<4xf32>
    %s = memref.get_global @__splat : memref<4xf32>
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x, %w, %s : memref<4xf32>, memref<4xf32>, memref<4xf32>) outs(%y : memref<4xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32, %o: f32):
      %t = arith.addf %a, %b : f32
      %u = arith.mulf %t, %c : f32
      linalg.yield %u : f32
    }
    return
  }
  func.func private @fusec_kernel_1(%x: memref<4xf32>, %y: memref<4xf32>) attributes {fusion.kind = "single", fusion.reason = "layer 1 at model.py:3"} {
    %w = memref.get_global @__constant_4xf32_0 : memref<4xf32>
    %s = memref.get_global @__splat : memref<4xf32>
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x, %w, %s : memref<4xf32>, memref<4xf32>, memref<4xf32>) outs(%y : memref<4xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32, %o: f32):
      %t = arith.addf %a, %b : f32
      %u = arith.mulf %t, %c : f32
      linalg.yield %u : f32
    }
    return
  }
  func.func private @fusec_kernel_2(%x: memref<4xf32>, %y: memref<4xf32>) attributes {fusion.kind = "single"} {
    %w = memref.get_global @__constant_4xf32_0 : memref<4xf32>
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x, %w : memref<4xf32>, memref<4xf32>) outs(%y : memref<4xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %t = arith.subf %a, %b : f32
      linalg.yield %t : f32
    }
    return
  }
  func.func @main(%arg0: memref<4xf32>, %arg1: memref<4xf32>) attributes {fusion.num_inputs = 1 : i64} {
    %a = memref.alloc() : memref<4xf32>
    %b = memref.alloc() : memref<4xf32>
    call @fusec_kernel_0(%arg0, %a) : (memref<4xf32>, memref<4xf32>) -> ()
    call @fusec_kernel_1(%a, %b) : (memref<4xf32>, memref<4xf32>) -> ()
    call @fusec_kernel_2(%b, %arg1) : (memref<4xf32>, memref<4xf32>) -> ()
    return
  }
}
