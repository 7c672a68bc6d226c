"""--fusion-conv1d-as-conv2d: a 1-D convolution becomes a 2-D one of height 1.

torch-mlir writes `nn.Conv1d` (groups 1) as `linalg.conv_1d_ncw_fcw`, which no kernel family
of fusec takes: on the GPU it fell to the fallback path (Whisper's encoder, whose two
convolutions over 3000 frames made it 2.6x slower than Inductor), while the 2-D convolution
family (implicit GEMM on the tensor cores, its epilogues, the CPU's loop nests) takes
`linalg.conv_2d_nchw_fchw`. The rewrite is exact: the input, filter and result get a unit
height (`tensor.expand_shape`, a view), the strides and dilations a unit first entry, and the
result is collapsed back. torch-mlir already writes grouped 1-D convolutions as 2-D ones.
Upstream's `linalg` decomposition goes the other way (a 2-D convolution of unit height to
1-D) and fusec does not run it.

Before:
    %r = linalg.conv_1d_ncw_fcw {dilations = dense<1>, strides = dense<2>}
           ins(%x, %w : tensor<1x80x3002xf32>, tensor<512x80x3xf32>)
           outs(%init : tensor<1x512x1500xf32>) -> tensor<1x512x1500xf32>
After:
    %x4 = tensor.expand_shape %x [[0], [1], [2, 3]] ... into tensor<1x80x1x3002xf32>
    %w4 = tensor.expand_shape %w [[0], [1], [2, 3]] ... into tensor<512x80x1x3xf32>
    %i4 = tensor.expand_shape %init [[0], [1], [2, 3]] ... into tensor<1x512x1x1500xf32>
    %r4 = linalg.conv_2d_nchw_fchw {dilations = dense<[1, 1]>, strides = dense<[1, 2]>}
            ins(%x4, %w4) outs(%i4) -> tensor<1x512x1x1500xf32>
    %r = tensor.collapse_shape %r4 [[0], [1], [2, 3]] : ... into tensor<1x512x1500xf32>
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from mlir.dialects import linalg, tensor

from fusec.passes.grouping import walk_ops
from fusec.passes.registry import Pass, register

REASSOCIATION = [[0], [1], [2, 3]]


def _with_unit_height(value: ir.Value) -> ir.Value:
    t = ir.RankedTensorType(value.type)
    shape = [t.shape[0], t.shape[1], 1, t.shape[2]]
    return tensor.expand_shape(ir.RankedTensorType.get(shape, t.element_type), value,
                               REASSOCIATION, [], shape)


def _pair(op: ir.Operation, name: str) -> ir.Attribute:
    """The 1-D op's stride or dilation as the 2-D op's [1, value]."""
    value = int(list(ir.DenseIntElementsAttr(op.attributes[name]))[0]) \
        if name in op.attributes else 1
    return ir.Attribute.parse(f"dense<[1, {value}]> : vector<2xi64>")


def rewrite(op: ir.Operation) -> None:
    view = op.opview
    (source, filter_), (init,) = list(view.inputs), list(view.outputs)
    if not all(ir.RankedTensorType(v.type).has_static_shape for v in (source, filter_, init)):
        return
    with ir.InsertionPoint(op), op.location:
        x, w, i = (_with_unit_height(v) for v in (source, filter_, init))
        conv = linalg.conv_2d_nchw_fchw(x, w, outs=[i])
        conv_op = conv.owner
        conv_op.attributes["strides"] = _pair(op, "strides")
        conv_op.attributes["dilations"] = _pair(op, "dilations")
        result = tensor.collapse_shape(op.results[0].type, conv, REASSOCIATION)
    op.results[0].replace_all_uses_with(result)
    op.erase()


@register
@dataclass
class Conv1dAsConv2dPass(Pass):
    """1-D convolutions (NCW, FCW) as 2-D ones of unit height, for the 2-D family."""

    ARGUMENT = "fusion-conv1d-as-conv2d"

    def run(self, module: ir.Operation) -> None:
        for op in walk_ops(module, lambda o: o.name == "linalg.conv_1d_ncw_fcw"):
            rewrite(op)
