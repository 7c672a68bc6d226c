#map = affine_map<(d0) -> (d0)>
"builtin.module"() ({
  "func.func"() <{function_type = (tensor<1048576xf32>) -> tensor<1048576xf32>, sym_name = "main"}> ({
  ^bb0(%arg0: tensor<1048576xf32>):
    %0 = "arith.constant"() <{value = 1.000000e+00 : f32}> : () -> f32
    %1 = "arith.constant"() <{value = 5.000000e-01 : f32}> : () -> f32
    %2 = "arith.constant"() <{value = 2.000000e+00 : f32}> : () -> f32
    %3 = "arith.constant"() <{value = 1.41421354 : f32}> : () -> f32
    %4 = "arith.constant"() <{value = 3.000000e+00 : f32}> : () -> f32
    %5 = "tensor.empty"() : () -> tensor<1048576xf32>
    %6 = "linalg.generic"(%arg0, %5) <{indexing_maps = [#map, #map], iterator_types = [#linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg7: f32, %arg8: f32):
      %17 = "arith.mulf"(%arg7, %2) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%17) : (f32) -> ()
    }) : (tensor<1048576xf32>, tensor<1048576xf32>) -> tensor<1048576xf32>
    %7 = "linalg.generic"(%6, %5) <{indexing_maps = [#map, #map], iterator_types = [#linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg5: f32, %arg6: f32):
      %16 = "arith.addf"(%arg5, %0) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%16) : (f32) -> ()
    }) : (tensor<1048576xf32>, tensor<1048576xf32>) -> tensor<1048576xf32>
    %8 = "linalg.generic"(%7, %5) <{indexing_maps = [#map, #map], iterator_types = [#linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg3: f32, %arg4: f32):
      %11 = "arith.divf"(%arg3, %3) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      %12 = "math.erf"(%11) <{fastmath = #arith.fastmath<none>}> : (f32) -> f32
      %13 = "arith.addf"(%12, %0) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      %14 = "arith.mulf"(%13, %1) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      %15 = "arith.mulf"(%arg3, %14) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%15) : (f32) -> ()
    }) : (tensor<1048576xf32>, tensor<1048576xf32>) -> tensor<1048576xf32>
    %9 = "linalg.generic"(%8, %5) <{indexing_maps = [#map, #map], iterator_types = [#linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg1: f32, %arg2: f32):
      %10 = "arith.mulf"(%arg1, %4) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%10) : (f32) -> ()
    }) : (tensor<1048576xf32>, tensor<1048576xf32>) -> tensor<1048576xf32>
    "func.return"(%9) : (tensor<1048576xf32>) -> ()
  }) : () -> ()
}) {fusion.torch_signature = "{\22inputs\22: [{\22name\22: \22x\22, \22dtype\22: \22float32\22}], \22outputs\22: [{\22dtype\22: \22float32\22}]}"} : () -> ()
