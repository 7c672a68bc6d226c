"""--fusion-narrow-contraction-operands: a matmul reads 16-bit operands, not their f32 copies.

A model that upcasts before a product, `q.float() @ k.float().transpose(-2, -1)` with q
and k in bf16 (fusec's own SDPA decomposition does, to keep the scores in f32 as torch's
fused kernels do; so do models that compute attention or a head "in f32"), imports as
widening generics (`arith.extf` bf16 -> f32) feeding an f32 `linalg.matmul` /
`linalg.batch_matmul`, through K's transpose and the batch reshapes. A named contraction
already extends its operands to its accumulator's type, and a product of two bf16 (or two
f16) values is exact in f32, so the same contraction reading the 16-bit values computes
the same sums: here it does. The f32 copies of the operands are not written (nor read)
any more, the GPU's GEMM and attention kernels take the operands in their 16-bit types
(tensor cores, TMA of half the bytes), and the attention kernels keep the scores in f32
with no rounding between the product and the softmax.

Each input of the contraction is followed back through layout ops (`tensor.collapse_shape`,
`tensor.expand_shape`, `linalg.transpose`) to an elementwise generic whose payload is one
`arith.extf` from bf16 or f16 to f32, with identity maps; the layout ops are rebuilt on the
16-bit value. Only when every input narrows to the same 16-bit type (a product of bf16 by
f32 is left as it is: the kernels take one operand type) and the result is f32.

Not narrowed: an f64 (or any non-f32) result; a cast that does anything but widen (a
truncf, a widening with arithmetic after it in the same payload, a broadcast map); a
contraction with operands of two 16-bit types; a transpose of dynamic sizes on the way;
other contractions than matmul and batch_matmul (convolutions keep their own operand
rules).

Before:
    %qw = linalg.generic {...} ins(%q : tensor<2x128x64xbf16>) outs(...) { arith.extf }
    %kw = linalg.generic {...} ins(%k : tensor<2x128x64xbf16>) outs(...) { arith.extf }
    %kt = linalg.transpose ins(%kw : tensor<2x128x64xf32>) ... permutation = [0, 2, 1]
    %s = linalg.batch_matmul ins(%qw, %kt : tensor<2x128x64xf32>, tensor<2x64x128xf32>) ...
After:
    %kt = linalg.transpose ins(%k : tensor<2x128x64xbf16>) ... permutation = [0, 2, 1]
    %s = linalg.batch_matmul ins(%q, %kt : tensor<2x128x64xbf16>, tensor<2x64x128xbf16>)
           outs(... : tensor<2x128x128xf32>)
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from mlir.dialects import linalg, tensor

from fusec.passes.grouping import cast_input, defining_op, walk_ops
from fusec.passes.registry import Pass, register

CONTRACTIONS = {"linalg.matmul": linalg.matmul, "linalg.batch_matmul": linalg.batch_matmul}
LAYOUT = ("tensor.collapse_shape", "tensor.expand_shape", "linalg.transpose")
HALF = ("bf16", "f16")


def _element(value: ir.Value) -> str:
    return str(ir.RankedTensorType(value.type).element_type)


def _widened(op: ir.Operation | None) -> ir.Value | None:
    """The 16-bit input of an elementwise generic that only widens it to f32."""
    source = cast_input(op)
    if source is None or op.regions[0].blocks[0].operations[0].name != "arith.extf" or \
            _element(source) not in HALF or _element(op.results[0]) != "f32":
        return None
    return source


def _narrow_source(value: ir.Value) -> tuple[ir.Value, list[ir.Operation]] | None:
    """The widened 16-bit value behind contraction input `value`, and the layout ops on the
    way (innermost last), or None."""
    layout: list[ir.Operation] = []
    while True:
        op = defining_op(value)
        if op is not None and op.name in LAYOUT:
            if op.name == "linalg.transpose" and \
                    not ir.RankedTensorType(op.results[0].type).has_static_shape:
                return None  # (its 16-bit copy's tensor.empty would need the sizes)
            layout.append(op)
            value = op.operands[0]
            continue
        source = _widened(op)
        return None if source is None else (source, layout)


def _rebuild(source: ir.Value, layout: list[ir.Operation], at: ir.Operation) -> ir.Value:
    """`layout` (outermost first in the list's reverse) applied to `source`, before `at`."""
    element = ir.RankedTensorType(source.type).element_type
    value = source
    with ir.InsertionPoint(at), at.location:
        for op in reversed(layout):
            shape = list(ir.RankedTensorType(op.results[0].type).shape)
            result_type = ir.RankedTensorType.get(shape, element)
            if op.name == "linalg.transpose":
                init = tensor.EmptyOp(shape, element)
                permutation = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
                value = _result(linalg.transpose(value, outs=[init.result],
                                                 permutation=permutation))
                continue
            clone = op.clone(ir.InsertionPoint(at))
            clone.operands[0] = value
            clone.results[0].set_type(result_type)
            value = clone.results[0]
    return value


def _result(built: ir.Value | ir.OpView) -> ir.Value:
    """A builder's result (the bindings give the value or the op, by version)."""
    return built if isinstance(built, ir.Value) else built.results[0]


def narrow(contraction: ir.Operation) -> bool:
    """Rebuild `contraction` on the 16-bit sources of its widened inputs; True if it was."""
    if len(contraction.operands) != 3:
        return False
    a, b, init = contraction.operands
    if _element(init) != "f32":
        return False
    found = [_narrow_source(v) for v in (a, b)]
    if any(f is None for f in found) or len({_element(f[0]) for f in found}) != 1:
        return False
    inputs = [_rebuild(source, layout, contraction) for source, layout in found]
    with ir.InsertionPoint(contraction), contraction.location:
        new = CONTRACTIONS[contraction.name](*inputs, outs=[init])
    new_op = _result(new).owner
    for name in list(contraction.attributes):  # its maps (a transposed variant's) and marks
        if name != "operandSegmentSizes":
            new_op.attributes[name] = contraction.attributes[name]
    contraction.results[0].replace_all_uses_with(new_op.results[0])
    contraction.erase()
    return True


@register
@dataclass
class NarrowContractionOperandsPass(Pass):
    """Matmuls of widened 16-bit operands read the 16-bit values (exact: their products fit
    f32)."""

    ARGUMENT = "fusion-narrow-contraction-operands"

    def run(self, module: ir.Operation) -> None:
        for op in walk_ops(module, lambda o: o.name in CONTRACTIONS):
            narrow(op)
