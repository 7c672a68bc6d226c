#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
#map2 = affine_map<(d0, d1) -> (d0, 0)>
"builtin.module"() ({
  "func.func"() <{function_type = (tensor<64x512xf32>) -> tensor<64x512xf32>, sym_name = "main"}> ({
  ^bb0(%arg0: tensor<64x512xf32>):
    %0 = "arith.constant"() <{value = 0 : i64}> : () -> i64
    %1 = "arith.constant"() <{value = 0xFF800000 : f32}> : () -> f32
    %2 = "arith.constant"() <{value = 0.000000e+00 : f32}> : () -> f32
    %3 = "tensor.empty"() : () -> tensor<64xi64>
    %4 = "linalg.fill"(%0, %3) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg18: i64, %arg19: i64):
      "linalg.yield"(%arg18) : (i64) -> ()
    }) : (i64, tensor<64xi64>) -> tensor<64xi64>
    %5 = "tensor.empty"() : () -> tensor<64xf32>
    %6 = "linalg.fill"(%1, %5) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg16: f32, %arg17: f32):
      "linalg.yield"(%arg16) : (f32) -> ()
    }) : (f32, tensor<64xf32>) -> tensor<64xf32>
    %7:2 = "linalg.generic"(%arg0, %6, %4) <{indexing_maps = [#map, #map1, #map1], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<reduction>], operandSegmentSizes = array<i32: 1, 2>}> ({
    ^bb0(%arg13: f32, %arg14: f32, %arg15: i64):
      %20 = "linalg.index"() <{dim = 1 : i64}> : () -> index
      %21 = "arith.index_cast"(%20) : (index) -> i64
      %22 = "arith.maximumf"(%arg13, %arg14) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      %23 = "arith.cmpf"(%arg13, %arg14) <{fastmath = #arith.fastmath<none>, predicate = 2 : i64}> : (f32, f32) -> i1
      %24 = "arith.select"(%23, %21, %arg15) : (i1, i64, i64) -> i64
      "linalg.yield"(%22, %24) : (f32, i64) -> ()
    }) : (tensor<64x512xf32>, tensor<64xf32>, tensor<64xi64>) -> (tensor<64xf32>, tensor<64xi64>)
    %8 = "tensor.expand_shape"(%7#0) <{reassociation = [[0, 1]], static_output_shape = array<i64: 64, 1>}> : (tensor<64xf32>) -> tensor<64x1xf32>
    %9 = "tensor.empty"() : () -> tensor<64x512xf32>
    %10 = "linalg.generic"(%arg0, %8, %9) <{indexing_maps = [#map, #map2, #map], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 2, 1>}> ({
    ^bb0(%arg10: f32, %arg11: f32, %arg12: f32):
      %19 = "arith.subf"(%arg10, %arg11) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%19) : (f32) -> ()
    }) : (tensor<64x512xf32>, tensor<64x1xf32>, tensor<64x512xf32>) -> tensor<64x512xf32>
    %11 = "linalg.generic"(%10, %9) <{indexing_maps = [#map, #map], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg8: f32, %arg9: f32):
      %18 = "math.exp"(%arg8) <{fastmath = #arith.fastmath<none>}> : (f32) -> f32
      "linalg.yield"(%18) : (f32) -> ()
    }) : (tensor<64x512xf32>, tensor<64x512xf32>) -> tensor<64x512xf32>
    %12 = "tensor.empty"() : () -> tensor<64x1xf32>
    %13 = "linalg.fill"(%2, %12) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg6: f32, %arg7: f32):
      "linalg.yield"(%arg6) : (f32) -> ()
    }) : (f32, tensor<64x1xf32>) -> tensor<64x1xf32>
    %14 = "linalg.generic"(%11, %13) <{indexing_maps = [#map, #map2], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<reduction>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg4: f32, %arg5: f32):
      %17 = "arith.addf"(%arg4, %arg5) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%17) : (f32) -> ()
    }) : (tensor<64x512xf32>, tensor<64x1xf32>) -> tensor<64x1xf32>
    %15 = "linalg.generic"(%11, %14, %9) <{indexing_maps = [#map, #map2, #map], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 2, 1>}> ({
    ^bb0(%arg1: f32, %arg2: f32, %arg3: f32):
      %16 = "arith.divf"(%arg1, %arg2) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%16) : (f32) -> ()
    }) : (tensor<64x512xf32>, tensor<64x1xf32>, tensor<64x512xf32>) -> tensor<64x512xf32>
    "func.return"(%15) : (tensor<64x512xf32>) -> ()
  }) : () -> ()
}) {fusion.torch_signature = "{\22inputs\22: [{\22name\22: \22x\22, \22dtype\22: \22float32\22}], \22outputs\22: [{\22dtype\22: \22float32\22}]}"} : () -> ()
