"""--fusion-widen-i1-memrefs: store booleans as bytes, `memref<...xi1>` -> `memref<...xi8>`.

MLIR 22's memref-to-LLVM lowering asserts on stores of sub-byte integers, and a plan's
`bool` buffer is numpy's: one byte per element, 0 or 1. Runs after linalg is lowered to
loops: every memref value of i1 elements (function arguments, allocations, globals, views)
becomes i8; `memref.load` then yields i8, truncated back to i1 for its users, and
`memref.store` widens its i1 value with `arith.extui`.

Before:
    %v = memref.load %m[%i] : memref<4xi1>
After:
    %w = memref.load %m[%i] : memref<4xi8>
    %v = arith.trunci %w : i8 to i1
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fusec.passes.registry import Pass, register
from mlir import ir
from mlir.dialects import arith

_I1_ELEMENT = re.compile(r"(?<=[x<])i1(?=[,>])")


def _widened(t: ir.Type) -> ir.Type | None:
    """The i8 twin of an i1 memref type, or None for any other type."""
    if not isinstance(t, ir.MemRefType) or str(ir.MemRefType(t).element_type) != "i1":
        return None
    return ir.Type.parse(_I1_ELEMENT.sub("i8", str(t), count=1))


def _widen_function_type(op: ir.Operation) -> None:
    ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
    inputs = [_widened(t) or t for t in ftype.inputs]
    results = [_widened(t) or t for t in ftype.results]
    op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))
    if len(op.regions[0].blocks):
        for arg in op.regions[0].blocks[0].arguments:
            if (wide := _widened(arg.type)) is not None:
                arg.set_type(wide)


def _widen_global(op: ir.Operation) -> None:
    memref_type = ir.TypeAttr(op.attributes["type"]).value
    wide = _widened(memref_type)
    if wide is None:
        return
    op.attributes["type"] = ir.TypeAttr.get(wide)
    if "initial_value" in op.attributes and isinstance(op.attributes["initial_value"],
                                                       ir.DenseElementsAttr):
        text = str(op.attributes["initial_value"]).replace("true", "1").replace("false", "0")
        shape = "x".join(str(d) for d in ir.MemRefType(wide).shape)
        op.attributes["initial_value"] = ir.Attribute.parse(
            re.sub(r":\s*tensor<.*>$", f": tensor<{shape + 'x' if shape else ''}i8>", text))


def _widen_op(op: ir.Operation) -> None:
    # Judged by the scalar's type: the memref operand may already be widened.
    if op.name == "memref.load" and str(op.results[0].type) == "i1":
        result = op.results[0]
        with ir.InsertionPoint.after(op), op.location:
            narrow = arith.TruncIOp(ir.IntegerType.get_signless(1), result)
        result.replace_all_uses_with(narrow.result)
        narrow.operation.operands[0] = result
        result.set_type(ir.IntegerType.get_signless(8))
    elif op.name == "memref.store" and str(op.operands[0].type) == "i1":
        with ir.InsertionPoint(op), op.location:
            wide = arith.ExtUIOp(ir.IntegerType.get_signless(8), op.operands[0])
        op.operands[0] = wide.result
    for result in op.results:
        if (wide := _widened(result.type)) is not None:
            result.set_type(wide)


@register
@dataclass
class WidenI1MemrefsPass(Pass):
    """Turn memrefs of i1 into memrefs of i8 (loads truncate, stores extend)."""

    ARGUMENT = "fusion-widen-i1-memrefs"

    def run(self, module: ir.Operation) -> None:
        for op in module.regions[0].blocks[0].operations:
            op = op.operation
            if op.name == "func.func":
                _widen_function_type(op)
            elif op.name == "memref.global":
                _widen_global(op)
        found: list[ir.Operation] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            found.append(op.operation)
            return ir.WalkResult.ADVANCE

        module.walk(visit)
        for op in found:
            if op.name != "func.func":
                _widen_op(op)
