// RUN: fusec-opt %s --fusion-cpu-log1p-expm1 | filecheck %s

// log1p and expm1 written with the correction that keeps them accurate near 0 (math-to-LLVM
// would give log(1 + x) and exp(x) - 1: 0 for x = 1e-10). log1p: u = 1 + x, d = u - 1,
// log(u) * (x / d), x itself where d is 0, +inf passed through.
// CHECK-LABEL: func.func @log1p
// CHECK-NOT: math.log1p
// CHECK: %[[U:.+]] = arith.addf %{{.+}}, %[[X:[^ ]+]] : f32
// CHECK: %[[D:.+]] = arith.subf %[[U]], %{{.+}} : f32
// CHECK: %[[L:.+]] = math.log %[[U]] : f32
// CHECK: %[[R:.+]] = arith.divf %[[X]], %[[D]] : f32
// CHECK: %[[C:.+]] = arith.mulf %[[L]], %[[R]] : f32
// CHECK: %[[TINY:.+]] = arith.cmpf oeq, %[[D]], %{{.+}} : f32
// CHECK: arith.select %[[TINY]], %[[X]], %[[C]] : f32
func.func @log1p(%x: f32) -> f32 {
  %y = math.log1p %x : f32
  return %y : f32
}

// expm1 on vectors (the vectorizer's form): u = exp(x), (u - 1) * (x / log(u)), with x
// where u is 1 and -1 where u - 1 is -1.
// CHECK-LABEL: func.func @expm1
// CHECK-NOT: math.expm1
// CHECK: %[[U:.+]] = math.exp %[[X:[^ ]+]] : vector<16xf64>
// CHECK: %[[D:.+]] = arith.subf %[[U]], %{{.+}} : vector<16xf64>
// CHECK: math.log %[[U]] : vector<16xf64>
// CHECK: arith.cmpf oeq, %[[D]], %{{.+}} : vector<16xf64>
// CHECK: arith.cmpf oeq, %[[U]], %{{.+}} : vector<16xf64>
func.func @expm1(%x: vector<16xf64>) -> vector<16xf64> {
  %y = math.expm1 %x : vector<16xf64>
  return %y : vector<16xf64>
}

// What it leaves: exp and log themselves.
// CHECK-LABEL: func.func @others
// CHECK: math.exp
// CHECK: math.log
// CHECK-NOT: arith.select
func.func @others(%x: f32) -> f32 {
  %a = math.exp %x : f32
  %b = math.log %a : f32
  return %b : f32
}
