// RUN: fusec-opt %s --fusion-gpu-widen-16bit-payloads | filecheck %s

// torch-mlir's bf16 sigmoid times x: one payload of negf, exp, addf, divf, mulf on bf16.
// Computed in f32 from the loads, rounded once where the payload yields, as torch computes
// the op (one bf16 rounding, not five). An explicit cast keeps its rounding: the value the
// payload truncates to bf16 is what it extends again.
// CHECK-LABEL: func.func @sigmoid_mul
// CHECK: ^bb0(%[[X:.+]]: bf16, %{{.+}}: bf16):
// CHECK: %[[W:.+]] = arith.extf %[[X]] : bf16 to f32
// CHECK: arith.negf %[[W]] : f32
// CHECK: math.exp {{.+}} : f32
// CHECK: arith.addf {{.+}} : f32
// CHECK: arith.divf {{.+}} : f32
// CHECK: arith.mulf {{.+}}, %[[W]] : f32
// CHECK: %[[R:.+]] = arith.truncf {{.+}} : f32 to bf16
// CHECK: linalg.yield %[[R]] : bf16
// CHECK-LABEL: func.func @explicit_cast
// CHECK: %[[S:.+]] = arith.addf {{.+}} : f32
// CHECK: %[[T:.+]] = arith.truncf %[[S]] : f32 to bf16
// CHECK: arith.extf %[[T]] : bf16 to f32
// An f32 payload is left as it is, and so is a bf16 row reduction's (the fast emitter
// folds it in f32 itself, recognising `maximumf(in, acc)` as its combiner).
// CHECK-LABEL: func.func @f32_untouched
// CHECK-NOT: arith.extf
// CHECK-NOT: arith.truncf
// CHECK-LABEL: func.func @bf16_row_max
// CHECK: arith.maximumf {{.+}} : bf16
// CHECK-NOT: arith.extf
#m = affine_map<(d0) -> (d0)>
func.func @sigmoid_mul(%x: tensor<64xbf16>) -> tensor<64xbf16> {
  %g = fusion.group single (%a = %x : tensor<64xbf16>) -> tensor<64xbf16> {
    %one = arith.constant 1.0 : bf16
    %e = tensor.empty() : tensor<64xbf16>
    %r = linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]} ins(%a : tensor<64xbf16>) outs(%e : tensor<64xbf16>) {
    ^bb0(%i: bf16, %o: bf16):
      %n = arith.negf %i : bf16
      %p = math.exp %n : bf16
      %s = arith.addf %p, %one : bf16
      %q = arith.divf %one, %s : bf16
      %y = arith.mulf %q, %i : bf16
      linalg.yield %y : bf16
    } -> tensor<64xbf16>
    fusion.yield %r : tensor<64xbf16>
  }
  return %g : tensor<64xbf16>
}
func.func @explicit_cast(%x: tensor<64xbf16>) -> tensor<64xf32> {
  %g = fusion.group single (%a = %x : tensor<64xbf16>) -> tensor<64xf32> {
    %e = tensor.empty() : tensor<64xf32>
    %r = linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]} ins(%a : tensor<64xbf16>) outs(%e : tensor<64xf32>) {
    ^bb0(%i: bf16, %o: f32):
      %s = arith.addf %i, %i : bf16
      %w = arith.extf %s : bf16 to f32
      linalg.yield %w : f32
    } -> tensor<64xf32>
    fusion.yield %r : tensor<64xf32>
  }
  return %g : tensor<64xf32>
}
func.func @f32_untouched(%x: tensor<64xf32>) -> tensor<64xf32> {
  %g = fusion.group single (%a = %x : tensor<64xf32>) -> tensor<64xf32> {
    %e = tensor.empty() : tensor<64xf32>
    %r = linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]} ins(%a : tensor<64xf32>) outs(%e : tensor<64xf32>) {
    ^bb0(%i: f32, %o: f32):
      %s = arith.addf %i, %i : f32
      linalg.yield %s : f32
    } -> tensor<64xf32>
    fusion.yield %r : tensor<64xf32>
  }
  return %g : tensor<64xf32>
}
func.func @bf16_row_max(%x: tensor<4x64xbf16>) -> tensor<4xbf16> {
  %g = fusion.group single (%a = %x : tensor<4x64xbf16>) -> tensor<4xbf16> {
    %ninf = arith.constant 0xFF80 : bf16
    %e = tensor.empty() : tensor<4xbf16>
    %f = linalg.fill ins(%ninf : bf16) outs(%e : tensor<4xbf16>) -> tensor<4xbf16>
    %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<4x64xbf16>) outs(%f : tensor<4xbf16>) {
    ^bb0(%i: bf16, %o: bf16):
      %m = arith.maximumf %i, %o : bf16
      linalg.yield %m : bf16
    } -> tensor<4xbf16>
    fusion.yield %r : tensor<4xbf16>
  }
  return %g : tensor<4xbf16>
}
