"""--fusion-widen-accumulators: a reduction into a bf16/f16 result accumulates in f32.

torch sums, means and products of 16-bit tensors in f32 and rounds the result once;
torch-mlir writes them as a `linalg.generic` whose accumulator is the 16-bit result itself,
so every step of the fold rounds to 8 (bf16) or 11 (f16) bits. A bf16 `x.sum(-1)` over 2048
values near 1 then stops growing at 256 or so (a relative error of 0.75 where torch's is
2e-3), and a mean over an image's pixels (MobileNet's and ResNet's pooling) is off by
several times torch's own error. Here each such generic gets an f32 accumulator: its init
widened (a fill of the same value in f32, or an `extf` of whatever it was), its payload's
16-bit arithmetic computed in f32 (16-bit operands extended where they are read), and one
`truncf` of the result after it, where torch rounds. Reductions whose payload never does
arithmetic that rounds (a max, a min, a select: exact in any width) are left alone, as are
parallel-only generics (an elementwise op rounds once already) and named ops.

Before (a bf16 row sum):
    %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<64xbf16>) -> tensor<64xbf16>
    %s = linalg.generic {... ["parallel", "reduction"]} ins(%x : tensor<64x2048xbf16>)
           outs(%f : tensor<64xbf16>) { ^bb0(%in: bf16, %acc: bf16):
             %t = arith.addf %in, %acc : bf16 ; linalg.yield %t : bf16 }
After:
    %f = linalg.fill ins(%zero32 : f32) outs(%e32 : tensor<64xf32>) -> tensor<64xf32>
    %s32 = linalg.generic {...} ins(%x : tensor<64x2048xbf16>) outs(%f : tensor<64xf32>) {
           ^bb0(%in: bf16, %acc: f32): %w = arith.extf %in : bf16 to f32
             %t = arith.addf %w, %acc : f32 ; linalg.yield %t : f32 }
    %s = linalg.generic {... ["parallel"]} ins(%s32) outs(%e : tensor<64xbf16>) { truncf }
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from mlir.dialects import arith, linalg, tensor

from fusec.passes.grouping import defining_op, value_key, walk_ops
from fusec.passes.registry import Pass, register

HALF = ("bf16", "f16")
# Payload ops computed in f32 when they touch a 16-bit value (same op, wider type); the CUDA
# target's widening of elementwise payloads uses the same set.
WIDENABLE = frozenset({
    "arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.remf", "arith.negf",
    "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf", "arith.cmpf",
    "arith.select", "math.exp", "math.exp2", "math.expm1", "math.log", "math.log1p",
    "math.log2", "math.tanh", "math.erf", "math.sqrt", "math.rsqrt", "math.sin", "math.cos",
    "math.absf", "math.powf", "math.fma", "math.floor", "math.ceil", "math.round",
    "math.roundeven", "math.trunc", "math.atan", "math.atan2", "math.tan", "math.sinh",
    "math.cosh", "math.asin", "math.acos", "math.copysign"})
# Arithmetic whose result a 16-bit accumulator would round (max, min and select do not).
ROUNDING = frozenset({"arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.remf",
                      "math.fma", "math.powf", "math.exp", "math.log", "math.sqrt"})


def is_half(t: ir.Type) -> bool:
    """bf16 or f16."""
    return str(t) in HALF


def _element(value: ir.Value) -> ir.Type:
    return ir.RankedTensorType(value.type).element_type


def _accumulators(generic: ir.Operation, narrow: tuple[str, ...] = HALF) -> list[int]:
    """The outputs of a reduction generic that fold into a value of a `narrow` type (16-bit
    by default) by rounding steps."""
    kinds = [str(k) for k in ir.ArrayAttr(generic.attributes["iterator_types"])]
    if not any("reduction" in k for k in kinds):
        return []
    view = generic.opview
    n_in = len(view.inputs)
    block = generic.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if not any(o.name in ROUNDING for o in ops):
        return []
    found = []
    for i, out in enumerate(view.outputs):
        if not isinstance(out.type, ir.RankedTensorType) or str(_element(out)) not in narrow:
            continue
        if any(True for _ in block.arguments[n_in + i].uses):  # it reads its accumulator
            found.append(i)
    return found


def _wide_init(init: ir.Value, wide: ir.Type, at: ir.Operation) -> ir.Value:
    """`init` as a tensor of the `wide` type (f32, or f64 for `widen`'s `wide`): a fill of
    the same value, or an elementwise extf."""
    shape = ir.RankedTensorType(init.type).shape
    producer = defining_op(init)
    with ir.InsertionPoint(at), at.location:
        empty = tensor.EmptyOp(shape, wide).result
        if producer is not None and producer.name == "linalg.fill":
            scalar = producer.operands[0]
            value = arith.ExtFOp(wide, scalar).result if scalar.type != wide else scalar
            return linalg.fill(value, outs=[empty])
        return _elementwise(init, empty, lambda v: arith.ExtFOp(wide, v).result)


def _elementwise(source: ir.Value, dest: ir.Value, body) -> ir.Value:
    rank = ir.RankedTensorType(source.type).rank
    identity = ir.AffineMap.get_identity(rank)
    op = linalg.GenericOp(
        [dest.type], [source], [dest],
        ir.ArrayAttr.get([ir.AffineMapAttr.get(identity)] * 2),
        ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")] * rank))
    block = op.regions[0].blocks.append(_element(source), _element(dest))
    with ir.InsertionPoint(block):
        linalg.YieldOp([body(block.arguments[0])])
    return op.result


def _attributes(op: ir.Operation) -> dict:
    return {op.attributes[i].name: op.attributes[i].attr for i in range(len(op.attributes))}


class Widener:
    """Clones payload ops at the insertion point with their 16-bit arithmetic in f32.

    `narrow` maps an old value to its new value of the old type, `wide` an old 16-bit value
    to its f32 twin; a 16-bit value is extended where an f32 op reads it and rounded where
    an op that stays narrow (a cast, an integer op, a store) reads its f32 twin."""

    def __init__(self, context: ir.Context, wide: ir.Type | None = None,
                 narrow: tuple[str, ...] = HALF) -> None:
        # The wide type (f32) and the narrow types computed in it (bf16, f16); a scan's
        # f32 running value is carried in f64 the same way (`lower_tm_tensor.lower_scan`).
        self.wide_type = wide or ir.F32Type.get(context)
        self.narrow_types = narrow
        self.narrow: dict = {}
        self.wide: dict = {}

    def is_narrow(self, t: ir.Type) -> bool:
        return str(t) in self.narrow_types

    def wide_of(self, v: ir.Value) -> ir.Value:
        key = value_key(v)
        if key in self.wide:
            return self.wide[key]
        value = self.narrow.get(key, v)  # a value from above the payload stays as it is
        if not self.is_narrow(value.type):
            return value
        self.wide[key] = arith.ExtFOp(self.wide_type, value).result
        return self.wide[key]

    def narrow_of(self, v: ir.Value) -> ir.Value:
        key = value_key(v)
        if key in self.narrow:
            return self.narrow[key]
        if key in self.wide:
            self.narrow[key] = arith.TruncFOp(v.type, self.wide[key]).result
            return self.narrow[key]
        return v

    def clone(self, op: ir.Operation) -> None:
        touches_half = any(self.is_narrow(v.type) for v in list(op.operands) + list(op.results))
        if op.name in WIDENABLE and touches_half:
            clone = ir.Operation.create(
                op.name,
                results=[self.wide_type if self.is_narrow(r.type) else r.type for r in op.results],
                operands=[self.wide_of(v) for v in op.operands], attributes=_attributes(op))
            for old, res in zip(op.results, clone.results):
                (self.wide if self.is_narrow(old.type) else self.narrow)[value_key(old)] = res
            return
        if op.name == "arith.extf" and value_key(op.operands[0]) in self.wide and \
                op.results[0].type == self.wide_type:
            self.narrow[value_key(op.results[0])] = self.wide[value_key(op.operands[0])]
            return
        clone = ir.Operation.create(op.name, results=[r.type for r in op.results],
                                    operands=[self.narrow_of(v) for v in op.operands],
                                    attributes=_attributes(op))
        for old, res in zip(op.results, clone.results):
            self.narrow[value_key(old)] = res


def widen(generic: ir.Operation, wide: ir.Type | None = None,
          narrow: tuple[str, ...] = HALF) -> bool:
    """Give `generic`'s 16-bit accumulators f32 (see the module's docstring); with `wide`
    and `narrow`, accumulators of the `narrow` types the `wide` type (a long f32 fold's
    combine in f64: `--fusion-split-reductions`)."""
    wide_outs = _accumulators(generic, narrow)
    if not wide_outs:
        return False
    wide_type = wide or ir.F32Type.get(generic.context)
    view = generic.opview
    inputs, outputs = list(view.inputs), list(view.outputs)
    n_in = len(inputs)
    new_outs = [(_wide_init(o, wide_type, generic) if i in wide_outs else o)
                for i, o in enumerate(outputs)]
    with ir.InsertionPoint(generic), generic.location:
        new = linalg.GenericOp([o.type for o in new_outs], inputs, new_outs,
                               generic.attributes["indexing_maps"],
                               generic.attributes["iterator_types"])
    old_block = generic.regions[0].blocks[0]
    with generic.location:
        block = new.regions[0].blocks.append(
            *[_element(v) if isinstance(v.type, ir.RankedTensorType) else v.type
              for v in inputs + new_outs])
    widener = Widener(generic.context, wide_type, narrow)
    for i, arg in enumerate(old_block.arguments):
        if i >= n_in and i - n_in in wide_outs:
            widener.wide[value_key(arg)] = block.arguments[i]
        else:
            widener.narrow[value_key(arg)] = block.arguments[i]
    with ir.InsertionPoint(block), generic.location:
        for op in [o.operation for o in old_block.operations]:
            if op.name == "linalg.yield":
                linalg.YieldOp([widener.wide_of(v) if i in wide_outs else widener.narrow_of(v)
                                for i, v in enumerate(op.operands)])
            else:
                widener.clone(op)
    # One rounding per accumulator, after the fold; other results are as they were.
    with ir.InsertionPoint(generic), generic.location:
        for i, old in enumerate(generic.results):
            if i in wide_outs:
                narrow_type = _element(outputs[i])
                empty = tensor.EmptyOp(ir.RankedTensorType(old.type).shape, narrow_type).result
                rounded = _elementwise(new.results[i], empty,
                                       lambda v, t=narrow_type: arith.TruncFOp(t, v).result)
                old.replace_all_uses_with(rounded)
            else:
                old.replace_all_uses_with(new.results[i])
    generic.erase()
    return True


@register
@dataclass
class WidenAccumulatorsPass(Pass):
    """Reductions into bf16/f16 results accumulate in f32 and round once, as torch's do."""

    ARGUMENT = "fusion-widen-accumulators"

    def run(self, module: ir.Operation) -> None:
        for generic in walk_ops(module, lambda op: op.name == "linalg.generic"):
            widen(generic)
