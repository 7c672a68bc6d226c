#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
"builtin.module"() ({
  "func.func"() <{function_type = (tensor<2x4x64x32xf32>, tensor<2x4x64x32xf32>, tensor<2x4x64x32xf32>) -> tensor<2x4x64x32xf32>, sym_name = "main"}> ({
  ^bb0(%arg0: tensor<2x4x64x32xf32>, %arg1: tensor<2x4x64x32xf32>, %arg2: tensor<2x4x64x32xf32>):
    %0 = "arith.constant"() <{value = 0.000000e+00 : f32}> : () -> f32
    %1 = "arith.constant"() <{value = 0 : i64}> : () -> i64
    %2 = "arith.constant"() <{value = 0xFF800000 : f32}> : () -> f32
    %3 = "arith.constant"() <{value = 5.6568542494923806 : f64}> : () -> f64
    %4 = "tensor.empty"() : () -> tensor<2x4x32x64xf32>
    %5 = "linalg.transpose"(%arg1, %4) <{permutation = array<i64: 0, 1, 3, 2>}> ({
    ^bb0(%arg34: f32, %arg35: f32):
      "linalg.yield"(%arg34) : (f32) -> ()
    }) : (tensor<2x4x64x32xf32>, tensor<2x4x32x64xf32>) -> tensor<2x4x32x64xf32>
    %6 = "tensor.collapse_shape"(%arg0) <{reassociation = [[0, 1], [2], [3]]}> : (tensor<2x4x64x32xf32>) -> tensor<8x64x32xf32>
    %7 = "tensor.collapse_shape"(%5) <{reassociation = [[0, 1], [2], [3]]}> : (tensor<2x4x32x64xf32>) -> tensor<8x32x64xf32>
    %8 = "tensor.empty"() : () -> tensor<8x64x64xf32>
    %9 = "linalg.fill"(%0, %8) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg32: f32, %arg33: f32):
      "linalg.yield"(%arg32) : (f32) -> ()
    }) : (f32, tensor<8x64x64xf32>) -> tensor<8x64x64xf32>
    %10 = "linalg.batch_matmul"(%6, %7, %9) <{indexing_maps = [#map, #map1, #map2], operandSegmentSizes = array<i32: 2, 1>}> ({
    ^bb0(%arg29: f32, %arg30: f32, %arg31: f32):
      %45 = "arith.mulf"(%arg29, %arg30) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      %46 = "arith.addf"(%arg31, %45) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%46) : (f32) -> ()
    }) : (tensor<8x64x32xf32>, tensor<8x32x64xf32>, tensor<8x64x64xf32>) -> tensor<8x64x64xf32>
    %11 = "tensor.expand_shape"(%10) <{reassociation = [[0, 1], [2], [3]], static_output_shape = array<i64: 2, 4, 64, 64>}> : (tensor<8x64x64xf32>) -> tensor<2x4x64x64xf32>
    %12 = "tensor.empty"() : () -> tensor<2x4x64x64xf32>
    %13 = "linalg.generic"(%11, %12) <{indexing_maps = [#map3, #map3], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg27: f32, %arg28: f32):
      %43 = "arith.truncf"(%3) : (f64) -> f32
      %44 = "arith.divf"(%arg27, %43) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%44) : (f32) -> ()
    }) : (tensor<2x4x64x64xf32>, tensor<2x4x64x64xf32>) -> tensor<2x4x64x64xf32>
    %14 = "tensor.empty"() : () -> tensor<2x4x64xi64>
    %15 = "linalg.fill"(%1, %14) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg25: i64, %arg26: i64):
      "linalg.yield"(%arg25) : (i64) -> ()
    }) : (i64, tensor<2x4x64xi64>) -> tensor<2x4x64xi64>
    %16 = "tensor.empty"() : () -> tensor<2x4x64xf32>
    %17 = "linalg.fill"(%2, %16) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg23: f32, %arg24: f32):
      "linalg.yield"(%arg23) : (f32) -> ()
    }) : (f32, tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
    %18:2 = "linalg.generic"(%13, %17, %15) <{indexing_maps = [#map3, #map2, #map2], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<reduction>], operandSegmentSizes = array<i32: 1, 2>}> ({
    ^bb0(%arg20: f32, %arg21: f32, %arg22: i64):
      %38 = "linalg.index"() <{dim = 3 : i64}> : () -> index
      %39 = "arith.index_cast"(%38) : (index) -> i64
      %40 = "arith.maximumf"(%arg20, %arg21) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      %41 = "arith.cmpf"(%arg20, %arg21) <{fastmath = #arith.fastmath<none>, predicate = 2 : i64}> : (f32, f32) -> i1
      %42 = "arith.select"(%41, %39, %arg22) : (i1, i64, i64) -> i64
      "linalg.yield"(%40, %42) : (f32, i64) -> ()
    }) : (tensor<2x4x64x64xf32>, tensor<2x4x64xf32>, tensor<2x4x64xi64>) -> (tensor<2x4x64xf32>, tensor<2x4x64xi64>)
    %19 = "tensor.expand_shape"(%18#0) <{reassociation = [[0], [1], [2, 3]], static_output_shape = array<i64: 2, 4, 64, 1>}> : (tensor<2x4x64xf32>) -> tensor<2x4x64x1xf32>
    %20 = "linalg.generic"(%13, %19, %12) <{indexing_maps = [#map3, #map4, #map3], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 2, 1>}> ({
    ^bb0(%arg17: f32, %arg18: f32, %arg19: f32):
      %37 = "arith.subf"(%arg17, %arg18) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%37) : (f32) -> ()
    }) : (tensor<2x4x64x64xf32>, tensor<2x4x64x1xf32>, tensor<2x4x64x64xf32>) -> tensor<2x4x64x64xf32>
    %21 = "linalg.generic"(%20, %12) <{indexing_maps = [#map3, #map3], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg15: f32, %arg16: f32):
      %36 = "math.exp"(%arg15) <{fastmath = #arith.fastmath<none>}> : (f32) -> f32
      "linalg.yield"(%36) : (f32) -> ()
    }) : (tensor<2x4x64x64xf32>, tensor<2x4x64x64xf32>) -> tensor<2x4x64x64xf32>
    %22 = "tensor.empty"() : () -> tensor<2x4x64x1xf32>
    %23 = "linalg.fill"(%0, %22) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg13: f32, %arg14: f32):
      "linalg.yield"(%arg13) : (f32) -> ()
    }) : (f32, tensor<2x4x64x1xf32>) -> tensor<2x4x64x1xf32>
    %24 = "linalg.generic"(%21, %23) <{indexing_maps = [#map3, #map4], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<reduction>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg11: f32, %arg12: f32):
      %35 = "arith.addf"(%arg11, %arg12) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%35) : (f32) -> ()
    }) : (tensor<2x4x64x64xf32>, tensor<2x4x64x1xf32>) -> tensor<2x4x64x1xf32>
    %25 = "linalg.generic"(%21, %24, %12) <{indexing_maps = [#map3, #map4, #map3], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 2, 1>}> ({
    ^bb0(%arg8: f32, %arg9: f32, %arg10: f32):
      %34 = "arith.divf"(%arg8, %arg9) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%34) : (f32) -> ()
    }) : (tensor<2x4x64x64xf32>, tensor<2x4x64x1xf32>, tensor<2x4x64x64xf32>) -> tensor<2x4x64x64xf32>
    %26 = "tensor.collapse_shape"(%25) <{reassociation = [[0, 1], [2], [3]]}> : (tensor<2x4x64x64xf32>) -> tensor<8x64x64xf32>
    %27 = "tensor.collapse_shape"(%arg2) <{reassociation = [[0, 1], [2], [3]]}> : (tensor<2x4x64x32xf32>) -> tensor<8x64x32xf32>
    %28 = "tensor.empty"() : () -> tensor<8x64x32xf32>
    %29 = "linalg.fill"(%0, %28) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg6: f32, %arg7: f32):
      "linalg.yield"(%arg6) : (f32) -> ()
    }) : (f32, tensor<8x64x32xf32>) -> tensor<8x64x32xf32>
    %30 = "linalg.batch_matmul"(%26, %27, %29) <{indexing_maps = [#map, #map1, #map2], operandSegmentSizes = array<i32: 2, 1>}> ({
    ^bb0(%arg3: f32, %arg4: f32, %arg5: f32):
      %32 = "arith.mulf"(%arg3, %arg4) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      %33 = "arith.addf"(%arg5, %32) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%33) : (f32) -> ()
    }) : (tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>) -> tensor<8x64x32xf32>
    %31 = "tensor.expand_shape"(%30) <{reassociation = [[0, 1], [2], [3]], static_output_shape = array<i64: 2, 4, 64, 32>}> : (tensor<8x64x32xf32>) -> tensor<2x4x64x32xf32>
    "func.return"(%31) : (tensor<2x4x64x32xf32>) -> ()
  }) : () -> ()
}) {fusion.torch_signature = "{\22inputs\22: [{\22name\22: \22q\22, \22dtype\22: \22float32\22}, {\22name\22: \22k\22, \22dtype\22: \22float32\22}, {\22name\22: \22v\22, \22dtype\22: \22float32\22}], \22outputs\22: [{\22dtype\22: \22float32\22}]}"} : () -> ()
