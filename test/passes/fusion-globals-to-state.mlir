// RUN: not fusec-opt %s --fusion-globals-to-state --split-input-file 2>/dev/null | filecheck %s
// RUN: not fusec-opt %s --fusion-globals-to-state --split-input-file 2>&1 | filecheck %s --check-prefix=ERR

// torch-mlir's RNG seed: loaded, updated, stored. The global becomes an argument (the value
// when the run starts) and a result (the value it leaves), recorded in fusion.state with its
// initial value; the declaration goes.
// CHECK-NOT: ml_program.global
// CHECK-LABEL: func.func @seed(
// CHECK-SAME:      %[[X:.+]]: tensor<4xf32>, %[[S:.+]]: tensor<i64>) -> (tensor<4xf32>, tensor<i64>)
// CHECK-SAME:      fusion.state = [{init = dense<7> : tensor<i64>, input = 1 : i64, name = "global_seed", output = 1 : i64}]
// CHECK-NOT:     ml_program
// CHECK:         %[[V:.+]] = tensor.extract %[[S]][]
// CHECK:         %[[N:.+]] = arith.addi %[[V]]
// CHECK:         %[[I:.+]] = tensor.insert %[[N]] into %[[S]][]
// CHECK:         return %[[X]], %[[I]] : tensor<4xf32>, tensor<i64>
ml_program.global private mutable @global_seed(dense<7> : tensor<i64>) : tensor<i64>
func.func @seed(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c1 = arith.constant 1 : i64
  %s = ml_program.global_load @global_seed : tensor<i64>
  %v = tensor.extract %s[] : tensor<i64>
  %n = arith.addi %v, %c1 : i64
  %i = tensor.insert %n into %s[] : tensor<i64>
  ml_program.global_store @global_seed = %i : tensor<i64>
  return %x : tensor<4xf32>
}

// -----

// A load after the store reads the stored value; a global only read has output -1.
// CHECK-LABEL: func.func @order(
// CHECK-SAME:      %[[A:[^:]+]]: tensor<2xf32>, %[[B:[^:]+]]: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
// CHECK-SAME:      {init = dense<1.000000e+00> : tensor<2xf32>, input = 0 : i64, name = "a", output = 1 : i64}
// CHECK-SAME:      {init = dense<2.000000e+00> : tensor<2xf32>, input = 1 : i64, name = "b", output = -1 : i64}
// CHECK:         return %[[B]], %[[B]]
ml_program.global private mutable @a(dense<1.0> : tensor<2xf32>) : tensor<2xf32>
ml_program.global private mutable @b(dense<2.0> : tensor<2xf32>) : tensor<2xf32>
func.func @order() -> tensor<2xf32> {
  %old = ml_program.global_load @a : tensor<2xf32>
  %b = ml_program.global_load @b : tensor<2xf32>
  ml_program.global_store @a = %b : tensor<2xf32>
  %new = ml_program.global_load @a : tensor<2xf32>
  return %new : tensor<2xf32>
}

// -----

// An scf.for that loads and stores the global carries its value as one more iter_arg.
// CHECK-LABEL: func.func @in_loop(
// CHECK-SAME:      %[[N:[^:]+]]: tensor<i64>, %[[G:[^:]+]]: tensor<i64>) -> (tensor<i64>, tensor<i64>)
// CHECK:         %[[R:.+]]:2 = scf.for {{.*}} iter_args(%[[ACC:.+]] = %[[N]], %[[CUR:.+]] = %[[G]])
// CHECK:           %[[NEXT:.+]] = arith.addi
// CHECK:           %[[NEW:.+]] = tensor.from_elements %[[NEXT]]
// CHECK:           scf.yield %[[CUR]], %[[NEW]] : tensor<i64>, tensor<i64>
// CHECK:         return %[[R]]#0, %[[R]]#1 : tensor<i64>, tensor<i64>
ml_program.global private mutable @g(dense<0> : tensor<i64>) : tensor<i64>
func.func @in_loop(%n: tensor<i64>) -> tensor<i64> {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i64
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %n) -> (tensor<i64>) {
    %g = ml_program.global_load @g : tensor<i64>
    %v = tensor.extract %g[] : tensor<i64>
    %w = arith.addi %v, %one : i64
    %t = tensor.from_elements %w : tensor<i64>
    ml_program.global_store @g = %t : tensor<i64>
    scf.yield %g : tensor<i64>
  }
  return %r : tensor<i64>
}

// -----

// Accesses under an scf.if have no single order to follow: refused, located.
ml_program.global private mutable @h(dense<0> : tensor<i64>) : tensor<i64>
func.func @in_if(%n: tensor<i64>, %c: i1) -> tensor<i64> {
  %r = scf.if %c -> (tensor<i64>) {
    // ERR: fusion-globals-to-state.mlir:[[@LINE+1]]:10: error: 'ml_program.global_load' inside 'scf.if': fusec handles model globals only at the top level
    %g = ml_program.global_load @h : tensor<i64>
    scf.yield %g : tensor<i64>
  } else {
    scf.yield %n : tensor<i64>
  }
  return %r : tensor<i64>
}
