// RUN: not fusec-opt %s --fusion-scalars-to-tensors --split-input-file 2>/dev/null | filecheck %s
// RUN: not fusec-opt %s --fusion-scalars-to-tensors --split-input-file 2>&1 | filecheck %s --check-prefix=ERR

// Scalar arithmetic on extracted numbers (torch's `int(a) + int(b)`) becomes a 0-d kernel;
// the scalar result becomes a 0-d tensor result, listed in fusion.scalar_results.
// CHECK-LABEL: func.func @add_int(
// CHECK-SAME:      %[[A:[^:]+]]: tensor<i64>, %[[B:[^:]+]]: tensor<i64>) -> tensor<i64>
// CHECK-SAME:      fusion.scalar_results = array<i64: 0>
// CHECK-NOT:     tensor.extract
// CHECK:         %[[R:.+]] = linalg.generic {{.*}}iterator_types = []} ins(%[[A]], %[[B]] : tensor<i64>, tensor<i64>)
// CHECK:           arith.addi
// CHECK:         return %[[R]] : tensor<i64>
func.func @add_int(%a: tensor<i64>, %b: tensor<i64>) -> i64 {
  %x = tensor.extract %a[] : tensor<i64>
  %y = tensor.extract %b[] : tensor<i64>
  %s = arith.addi %x, %y : i64
  return %s : i64
}

// -----

// An element at constant indices is read by a 0-d generic with a constant indexing map;
// constants returned as numbers become 0-d constants. Tensor results stay as they are.
// CHECK:       #[[$AT:.+]] = affine_map<() -> (0, 1)>
// CHECK-LABEL: func.func @element(
// CHECK-SAME:      -> (tensor<2x2xf64>, tensor<f64>, tensor<i1>)
// CHECK-SAME:      fusion.scalar_results = array<i64: 1, 2>
// CHECK-DAG:     %[[T:.+]] = arith.constant dense<true> : tensor<i1>
// CHECK-DAG:     %[[E:.+]] = linalg.generic {indexing_maps = [#[[$AT]], {{.*}}], iterator_types = []}
// CHECK:         return %{{.+}}, %[[E]], %[[T]]
func.func @element(%a: tensor<2x2xf64>) -> (tensor<2x2xf64>, f64, i1) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %true = arith.constant true
  %x = tensor.extract %a[%c0, %c1] : tensor<2x2xf64>
  return %a, %x, %true : tensor<2x2xf64>, f64, i1
}

// -----

// A linalg body that captured a computed scalar (the RNG's updated seed) reads it as a
// broadcast input; one computed from constants only is cloned into the body instead.
// CHECK:       #[[$BCAST:.+]] = affine_map<(d0) -> ()>
// CHECK-LABEL: func.func @captured(
// CHECK:         %[[SEED:.+]] = linalg.generic {{.*}}iterator_types = []}
// CHECK:           arith.muli
// CHECK:         linalg.generic {indexing_maps = [#[[$BCAST]], {{.*}}]{{.*}} ins(%[[SEED]] : tensor<i64>)
// CHECK-NEXT:    ^bb0(%[[IN:.+]]: i64, %{{.+}}: f32):
// CHECK-NEXT:      %[[H:.+]] = arith.truncf
// CHECK:           arith.addi %{{.+}}, %[[IN]]
// CHECK:           arith.mulf %{{.+}}, %[[H]]
func.func @captured(%s: tensor<i64>) -> tensor<8xf32> {
  %k = arith.constant 6364136223846793005 : i64
  %half = arith.constant 0.5 : f64
  %v = tensor.extract %s[] : tensor<i64>
  %seed = arith.muli %v, %k : i64
  %h = arith.truncf %half : f64 to f32
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      outs(%e : tensor<8xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %j = arith.index_cast %i : index to i64
    %m = arith.addi %j, %seed : i64
    %f = arith.uitofp %m : i64 to f32
    %g = arith.mulf %f, %h : f32
    linalg.yield %g : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// A fill of a computed scalar becomes a broadcast of its 0-d tensor.
// CHECK-LABEL: func.func @fill(
// CHECK-NOT:     linalg.fill
// CHECK:         %[[X:.+]] = linalg.generic {{.*}}iterator_types = []}
// CHECK:         linalg.generic {{.*}}ins(%[[X]] : tensor<f32>) outs(%{{.+}} : tensor<3x4xf32>)
func.func @fill(%a: tensor<f32>) -> tensor<3x4xf32> {
  %x = tensor.extract %a[] : tensor<f32>
  %y = math.exp %x : f32
  %e = tensor.empty() : tensor<3x4xf32>
  %r = linalg.fill ins(%y : f32) outs(%e : tensor<3x4xf32>) -> tensor<3x4xf32>
  return %r : tensor<3x4xf32>
}

// -----

// A loop (a serial kernel later) that used a computed scalar reads its 0-d tensor; one
// computed from constants only is cloned before its use.
// CHECK-LABEL: func.func @loop_capture(
// CHECK:         %[[SEED:.+]] = linalg.generic {{.*}}iterator_types = []}
// CHECK:         scf.for
// CHECK:           %[[S:.+]] = tensor.extract %[[SEED]][] : tensor<i64>
// CHECK:           arith.addi %{{.+}}, %[[S]]
// CHECK:           %[[H:.+]] = arith.truncf
// CHECK:           arith.mulf %{{.+}}, %[[H]]
func.func @loop_capture(%s: tensor<i64>) -> tensor<4xf32> {
  %k = arith.constant 3 : i64
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %half = arith.constant 0.5 : f64
  %v = tensor.extract %s[] : tensor<i64>
  %seed = arith.muli %v, %k : i64
  %h = arith.truncf %half : f64 to f32
  %e = tensor.empty() : tensor<4xf32>
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%t = %e) -> (tensor<4xf32>) {
    %j = arith.index_cast %i : index to i64
    %m = arith.addi %j, %seed : i64
    %f = arith.sitofp %m : i64 to f32
    %g = arith.mulf %f, %h : f32
    %u = tensor.insert %g into %t[%i] : tensor<4xf32>
    scf.yield %u : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// An element at a computed index cannot move into a kernel: refused, located.
func.func @computed_index(%a: tensor<4xf32>, %i: tensor<index>) -> f32 {
  %j = tensor.extract %i[] : tensor<index>
  // ERR: fusion-scalars-to-tensors.mlir:[[@LINE+1]]:8: error: 'tensor.extract' at a computed index in the model function
  %x = tensor.extract %a[%j] : tensor<4xf32>
  return %x : f32
}

// -----

// A scalar that sizes a tensor has no kernel to move to: refused, located at its user.
func.func @sizes_a_tensor(%a: tensor<index>) -> tensor<?xf32> {
  %n = tensor.extract %a[] : tensor<index>
  // ERR: fusion-scalars-to-tensors.mlir:[[@LINE+1]]:8: error: a scalar computed in the model function is used by 'tensor.empty'
  %e = tensor.empty(%n) : tensor<?xf32>
  return %e : tensor<?xf32>
}

// -----

// A scalar a loop computes in the model function is not moved: refused, located at the loop.
func.func @loop_result(%a: tensor<i64>) -> i64 {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %init = arith.constant 0 : i64
  // ERR: fusion-scalars-to-tensors.mlir:[[@LINE+1]]:8: error: a scalar result of 'scf.for' in the model function
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %init) -> (i64) {
    %n = arith.addi %acc, %init : i64
    scf.yield %n : i64
  }
  return %r : i64
}
