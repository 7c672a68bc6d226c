"""--fusion-reshape-parameters: an elementwise op on parameters, read through a reshape,
computes in the shape it is read in.

BatchNorm's weight and bias (and, with parameters passed as inputs, as the torch.compile
backend gets them, its whole per-channel arithmetic) are [C] vectors: torch-mlir widens
them (bf16 -> f32) and combines them in [C], then expands the result to [1, C, 1, 1] for the
normalisation to read. A reshape between two ops of a kernel stops tile-and-fuse, and the
GPU target cuts its groups there (`fusion-gpu-split-at-reshapes`): each [C] op became a
kernel of its own of C threads, 22 of the 92 kernels of the small ResNet-18 in bf16 with
its parameters as inputs. The reshape commutes with an elementwise op, so this pass moves it
up, onto the parameters: an expand of a function argument or a constant is a view. The op
then fuses into its reader as any broadcast producer does.

Moved: `tensor.expand_shape` whose source is an elementwise op (all loops parallel,
identity maps, no `linalg.index`: `grouping.is_elementwise`) read by nothing else, whose
tensor operands are parameters: function arguments, constants, empty inits, or elementwise
ops on parameters in turn; and whose result has at most PARAMETER_ELEMENTS elements (a
per-channel vector, never an activation: what the planner plans around an activation's
reshapes is not changed here). Repeated until nothing moves, so a chain moves whole.

Before:
    %w = linalg.generic {identity maps} ins(%gamma : tensor<32xbf16>) -> tensor<32xf32> {extf}
    %v = tensor.expand_shape %w [[0, 1, 2, 3]] : tensor<32xf32> into tensor<1x32x1x1xf32>
After:
    %g = tensor.expand_shape %gamma [[0, 1, 2, 3]] : tensor<32xbf16> into tensor<1x32x1x1xbf16>
    %v = linalg.generic {identity maps} ins(%g : tensor<1x32x1x1xbf16>) -> tensor<1x32x1x1xf32>
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlir.ir as ir
from mlir.dialects import tensor

from fusec.passes.grouping import (defining_op, is_elementwise, op_key, retype_elementwise,
                                   walk_ops)
from fusec.passes.linalg.fold_parameters import PARAMETER_ELEMENTS
from fusec.passes.registry import Pass, register

EXPAND = "tensor.expand_shape"


def _parameter(value: ir.Value) -> bool:
    """A function argument, a constant, an empty init, or an elementwise op on those."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        op = defining_op(v)
        if op is None:
            continue  # a block argument: the function's (ops in bodies are not asked)
        if op_key(op) in seen or op.name in ("arith.constant", "tensor.empty"):
            continue
        if not is_elementwise(op):
            return False
        seen.add(op_key(op))
        stack.extend(x for x in op.operands if isinstance(x.type, ir.RankedTensorType))
    return True


def expand_up(expand: ir.Operation) -> list[ir.Operation] | None:
    """expand(elementwise(params)) -> elementwise(expand(params)): the new expands, or None
    where nothing moved."""
    producer = defining_op(expand.operands[0])
    if producer is None or not is_elementwise(producer) or \
            sum(1 for _ in producer.results[0].uses) != 1:
        return None
    result = ir.RankedTensorType(expand.results[0].type)
    if math.prod(result.shape) > PARAMETER_ELEMENTS or \
            not all(_parameter(v) for v in producer.operands
                    if isinstance(v.type, ir.RankedTensorType)):
        return None
    reassociation = expand.attributes["reassociation"]
    static_shape = expand.attributes["static_output_shape"]
    operands, expands = [], []
    with ir.InsertionPoint(producer), expand.location:
        for v in producer.operands:
            if not isinstance(v.type, ir.RankedTensorType):
                operands.append(v)
                continue
            element = ir.RankedTensorType(v.type).element_type
            source = defining_op(v)
            if source is not None and source.name == "tensor.empty":
                operands.append(tensor.EmptyOp(result.shape, element).result)
                continue
            expands.append(tensor.ExpandShapeOp(
                ir.RankedTensorType.get(result.shape, element), v, reassociation, [],
                static_shape).operation)
            operands.append(expands[-1].results[0])
    retype_elementwise(producer, operands, result)
    expand.results[0].replace_all_uses_with(producer.results[0])
    expand.erase()
    return expands


def reshape_parameters(module: ir.Operation) -> int:
    """Move every such expand up until none moves. Returns how many moves."""
    moved = 0
    work = walk_ops(module, lambda o: o.name == EXPAND)
    while work:
        new = expand_up(work.pop())
        if new is not None:
            moved += 1
            work.extend(new)  # a chain moves on from the parameters' ops it reaches
    return moved


@register
@dataclass
class ReshapeParametersPass(Pass):
    """Move expands of parameters' elementwise results onto the parameters."""

    ARGUMENT = "fusion-reshape-parameters"

    def run(self, module: ir.Operation) -> None:
        reshape_parameters(module)
