"""--fusion-fold-constants evaluates on demand: only the ops a scan reads, each once; and the
shared constant reader and bf16 rounding of passes/payload it uses."""

from __future__ import annotations

import numpy as np
from mlir import ir

from fusec.dialects import make_context
from fusec.passes.linalg import fold_constants
from fusec.passes.payload import bf16_bits, constant_array, from_bf16_bits

# Two scans of one arange, and a mask computed from a constant that no scan reads.
MODULE = """
func.func @f() -> (tensor<1x4xi64>, tensor<1x4xi64>, tensor<64x64xi1>) {
  %c0 = arith.constant 0 : i64
  %e = tensor.empty() : tensor<4xi64>
  %ar = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      outs(%e : tensor<4xi64>) {
  ^bb0(%out: i64):
    %i = linalg.index 0 : index
    %v = arith.index_cast %i : index to i64
    linalg.yield %v : i64
  } -> tensor<4xi64>
  %x = tensor.expand_shape %ar [[0, 1]] output_shape [1, 4] : tensor<4xi64> into tensor<1x4xi64>
  %e3 = tensor.empty() : tensor<1x4xi64>
  %f = linalg.fill ins(%c0 : i64) outs(%e3 : tensor<1x4xi64>) -> tensor<1x4xi64>
  %e4 = tensor.empty() : tensor<1xi64>
  %f1 = linalg.fill ins(%c0 : i64) outs(%e4 : tensor<1xi64>) -> tensor<1xi64>
  %s:2 = "tm_tensor.scan"(%x, %f, %f1) <{dimension = 1 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%a: i64, %b: i64):
    %t = arith.addi %a, %b : i64
    "tm_tensor.yield"(%t) : (i64) -> ()
  }) : (tensor<1x4xi64>, tensor<1x4xi64>, tensor<1xi64>) -> (tensor<1x4xi64>, tensor<1xi64>)
  %r:2 = "tm_tensor.scan"(%x, %f, %f1) <{dimension = 1 : i64, inclusive = false, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%a: i64, %b: i64):
    %t = arith.maxsi %a, %b : i64
    "tm_tensor.yield"(%t) : (i64) -> ()
  }) : (tensor<1x4xi64>, tensor<1x4xi64>, tensor<1xi64>) -> (tensor<1x4xi64>, tensor<1xi64>)
  %big = arith.constant dense<3> : tensor<64x64xi64>
  %em = tensor.empty() : tensor<64x64xi1>
  %mask = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                          iterator_types = ["parallel", "parallel"]}
      ins(%big : tensor<64x64xi64>) outs(%em : tensor<64x64xi1>) {
  ^bb0(%in: i64, %out: i1):
    %c = arith.cmpi ne, %in, %c0 : i64
    linalg.yield %c : i1
  } -> tensor<64x64xi1>
  return %s#0, %r#0, %mask : tensor<1x4xi64>, tensor<1x4xi64>, tensor<64x64xi1>
}
"""


def test_only_what_a_scan_reads_is_evaluated_once(monkeypatch) -> None:
    evaluated: list[str] = []
    evaluate = fold_constants.Fold.evaluate

    def counted(self, op):
        evaluated.append(f"{op.name} {op.results[0].type}")
        return evaluate(self, op)

    monkeypatch.setattr(fold_constants.Fold, "evaluate", counted)
    with make_context() as ctx:
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(MODULE)
        fold_constants.FoldConstantsPass().run(module.operation)
        text = str(module)
    assert "tm_tensor.scan" not in text  # both computed
    assert "dense<[[0, 1, 3, 6]]>" in text and "dense<[[0, 0, 1, 2]]>" in text
    # The mask no scan reads is not evaluated; the arange and the expand both scans read
    # are evaluated once.
    assert sorted(evaluated) == sorted([
        "linalg.generic tensor<4xi64>", "tensor.expand_shape tensor<1x4xi64>",
        "linalg.fill tensor<1x4xi64>", "linalg.fill tensor<1xi64>",
        "tm_tensor.scan tensor<1x4xi64>", "tm_tensor.scan tensor<1x4xi64>"]), evaluated
    assert "linalg.generic" in text  # the ops before the scans stay


def test_constant_array_reads_splats_i1_and_scalars() -> None:
    with make_context():
        module = ir.Module.parse("""
func.func @f() -> (tensor<2xbf16>, tensor<2xbf16>, tensor<3xi1>, tensor<2xi1>, f32, i1) {
  %a = arith.constant dense<1.5> : tensor<2xbf16>
  %b = arith.constant dense<[1.5, 2.0]> : tensor<2xbf16>
  %c = arith.constant dense<[true, false, true]> : tensor<3xi1>
  %d = arith.constant dense<true> : tensor<2xi1>
  %e = arith.constant 0.25 : f32
  %g = arith.constant true
  return %a, %b, %c, %d, %e, %g : tensor<2xbf16>, tensor<2xbf16>, tensor<3xi1>, tensor<2xi1>, f32, i1
}""")
        ret = list(module.body.operations[0].regions[0].blocks[0].operations)[-1]
        a, b, c, d, e, g = ret.operands
        dtypes = fold_constants.READ_DTYPES
        read = [constant_array(v, dtypes, scalars=True) for v in (a, b, c, d, e, g)]
        np.testing.assert_array_equal(read[0], [1.5, 1.5])
        assert read[1] is None  # numpy has no bf16 buffer
        np.testing.assert_array_equal(read[2], [True, False, True])
        np.testing.assert_array_equal(read[3], [True, True])
        assert read[4] == 0.25 and read[4].dtype == np.float64
        assert read[5] == np.True_
        # Scalars only when asked for; element types only those of `dtypes`.
        assert constant_array(e, dtypes) is None
        assert constant_array(a) is None


def test_bf16_bits_round_to_nearest_even() -> None:
    assert int(bf16_bits(1.0)) == 0x3F80
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to the even one, 1.
    np.testing.assert_array_equal(bf16_bits([1 + 2**-8, 1 + 3 * 2**-8, -2.5, np.inf, np.nan]),
                                  [0x3F80, 0x3F82, 0xC020, 0x7F80, 0x7FC0])
    assert from_bf16_bits(bf16_bits(0.1)) == 0.10009765625  # 0x3DCD


def test_a_long_chain_before_a_scan_is_walked_without_recursion() -> None:
    """The walk back from a scan is a loop, not Python recursion: 1,500 reshapes deep."""
    lines = ["  %x0 = arith.constant dense<[[1, 1, 1, 1]]> : tensor<1x4xi64>"]
    for i in range(1500):
        lines.append(f"  %y{i} = tensor.collapse_shape %x{i} [[0, 1]] : tensor<1x4xi64> into "
                     "tensor<4xi64>")
        lines.append(f"  %x{i + 1} = tensor.expand_shape %y{i} [[0, 1]] output_shape [1, 4] : "
                     "tensor<4xi64> into tensor<1x4xi64>")
    body = "\n".join(lines)
    with make_context() as ctx:
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(f"""
func.func @f() -> tensor<1x4xi64> {{
{body}
  %c0 = arith.constant dense<0> : tensor<1xi64>
  %s:2 = "tm_tensor.scan"(%x1500, %x0, %c0) <{{dimension = 1 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}}> ({{
  ^bb0(%a: i64, %b: i64):
    %t = arith.addi %a, %b : i64
    "tm_tensor.yield"(%t) : (i64) -> ()
  }}) : (tensor<1x4xi64>, tensor<1x4xi64>, tensor<1xi64>) -> (tensor<1x4xi64>, tensor<1xi64>)
  return %s#0 : tensor<1x4xi64>
}}""")
        fold_constants.FoldConstantsPass().run(module.operation)
        assert "dense<[[1, 2, 3, 4]]>" in str(module)
