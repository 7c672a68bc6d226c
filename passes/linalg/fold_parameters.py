"""--fusion-fold-parameters: what a model computes from its parameters alone is computed here,
once, not by a kernel at every call.

BatchNorm in eval mode reads four per-channel vectors and, as torch-mlir decomposes it,
computes `1 / sqrt(var + eps)` from them at every call; in a bf16 model each vector is also
widened to f32 first. Those are elementwise generics on constants. Fused into the
normalisation they cost a few operations per element; on the GPU, where the consumer reads
the vector through a reshape (`[C]` expanded to `[1, C, 1, 1]`) and the group is cut there,
each became a kernel of its own of C threads: four launches per BatchNorm, 59 of the 113
kernels of the small bf16 ResNet-18.

Folded: a `linalg.generic` whose inputs are all known here (dense constants of any type
the bindings or the printed form give, bf16 and f16 included, or ops on them that
`fusion-fold-constants`' evaluator computes: reshapes, broadcasts, generics before it),
with parallel loops and projection maps, one float result of at most FOLD_MAX_ELEMENTS
elements, and a body of payload ops. Each body op is evaluated in float64 and rounded to its
result type (`payload.round_to_element`): +, -, *, / and sqrt as IEEE rounds them, bit for
bit what a kernel computes; the transcendentals correctly rounded, where a kernel's are
within a few ulp of that.

Not folded (each a lit test):
- a generic that only widens its input's element type (a bf16 parameter to f32) read by
  generics of parallel loops or as an init (through reshapes and broadcasts): it costs
  nothing there, and a consumer's pattern reads it as it is (cuBLASLt's bias epilogue takes
  a bf16 bias widened, not an f32 constant: folded, a Linear's bias became a kernel of its
  own); what is computed from it is folded through it. Read otherwise (a contraction's
  operand), it is folded;
- a body reading `linalg.index` or `tensor.extract`: a mask or a position computed from
  indices costs nothing in registers, and the attention kernels classify it from its form;
- a result with more elements than its largest input: a parameter broadcast to the
  activation's shape would become a constant that large, read from memory at every call;
- a result larger in bytes than its largest input, beyond PARAMETER_ELEMENTS elements (a
  bf16 weight widened to f32 would be read at twice its bytes: it is read as stored);
- an op reading a function argument, or a reduction.

Before:
    %v = linalg.generic {...} ins(%var : tensor<32xbf16>) outs(%e : tensor<32xf32>) {
      extf; addf eps; sqrt; divf 1.0 }
After:
    %v = arith.constant dense<[...]> : tensor<32xf32>
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import mlir.ir as ir

from fusec.passes.constants import FLOATS, dense_attr, dense_floats
from fusec.passes.fusion.analysis import tensor_bytes
from fusec.passes.grouping import defining_op, iterator_kinds, use_owner, value_key, walk_ops
from fusec.passes.linalg.fold_constants import FOLD_MAX_ELEMENTS, Fold, read_constant
from fusec.passes.payload import CAST_OPS
from fusec.passes.registry import Pass, register

# A result up to this many elements is folded whatever its bytes against its inputs' (a
# per-channel vector widened to f32: a few KB).
PARAMETER_ELEMENTS = 4096
# Body ops that make a value a function of where it is, not of the parameters alone.
_INDEXED = ("linalg.index", "tensor.extract")


def _shape(t: ir.Type) -> tuple[list[int], str] | None:
    if not isinstance(t, ir.RankedTensorType) or not ir.RankedTensorType(t).has_static_shape:
        return None
    rt = ir.RankedTensorType(t)
    return list(rt.shape), str(rt.element_type)


def read_parameter(v: ir.Value) -> Any:
    """`read_constant`, and the 16-bit float constants it cannot read (numpy has no bf16)."""
    x = read_constant(v)
    if x is not None:
        return x
    op = defining_op(v)
    if op is None or op.name != "arith.constant":
        return None
    t = _shape(op.results[0].type)
    if t is None or math.prod(t[0]) > FOLD_MAX_ELEMENTS:
        return None
    return dense_floats(op.attributes["value"])


# Ops through which an input is still the parameters it moves (a view, a copy, a splat).
_MOVES = frozenset({"tensor.expand_shape", "tensor.collapse_shape", "linalg.broadcast",
                    "linalg.transpose", "tensor.extract_slice", "tensor.concat"})


def _roots(v: ir.Value) -> list[ir.Operation] | None:
    """The constants `v` moves (through _MOVES ops; a fill of a scalar counts as a splat
    constant), or None where it is computed from anything else."""
    roots, stack, seen = [], [v], set()
    while stack:
        w = stack.pop()
        op = defining_op(w)
        if op is None:
            return None  # a function argument
        if value_key(w) in seen:
            continue
        seen.add(value_key(w))
        if op.name == "arith.constant":
            roots.append(op)
        elif op.name == "linalg.fill":
            if defining_op(op.operands[0]) is None or \
                    defining_op(op.operands[0]).name != "arith.constant":
                return None
            roots.append(op)
        elif op.name in _MOVES:
            stack.extend([op.operands[0]] if op.name != "tensor.concat" else op.operands)
        elif _converts(op):
            stack.extend(_ins(op))
        else:
            return None
    return roots


def _ins(op: ir.Operation) -> list[ir.Value]:
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    return list(op.operands)[:seg[0]]


def _converts(op: ir.Operation) -> bool:
    """A generic that only widens its one input's element type (bf16 -> f32), read where
    it fuses (`_fuses`): kept as it is, where a consumer's pattern reads it (cuBLASLt's bias
    epilogue takes a bf16 bias widened, not an f32 constant); the ops on it are folded
    through it."""
    if op.name != "linalg.generic" or len(op.results) != 1 or len(_ins(op)) != 1:
        return False
    body = [inner.operation for inner in op.regions[0].blocks[0].operations]
    if tensor_bytes(op.results[0].type) <= tensor_bytes(_ins(op)[0].type) or \
            not _fuses(op.results[0]):
        # A narrowing (f32 -> bf16) is folded: a smaller constant. So is a widening read
        # where no cast is free (a contraction's operand).
        return False
    return all(inner.name in CAST_OPS for inner in body[:-1]) and len(body) > 1 and \
        all(isinstance(e, ir.AffineDimExpr) for m in op.attributes["indexing_maps"]
            for e in ir.AffineMapAttr(m).value.results) and \
        len({str(m) for m in op.attributes["indexing_maps"]}) == 1


def _splat(op: ir.Operation) -> bool:
    if op.name == "linalg.fill":
        return True
    attr = op.attributes["value"]
    return not isinstance(attr, ir.DenseElementsAttr) or attr.is_splat


def foldable(op: ir.Operation) -> bool:
    """Whether `op` is a generic on parameters of the form this pass folds (see the module
    docstring), before its inputs are read."""
    if op.name != "linalg.generic" or len(op.results) != 1:
        return False
    t = _shape(op.results[0].type)
    if t is None or t[1] not in FLOATS or math.prod(t[0]) > FOLD_MAX_ELEMENTS:
        return False
    body = op.regions[0].blocks[0]
    if any(inner.operation.name in _INDEXED for inner in body.operations) or _converts(op):
        return False
    ins = _ins(op)
    if not ins:
        return False  # what reads nothing but indices or constants of its body
    roots = [_roots(v) for v in ins]
    if any(r is None for r in roots):
        return False
    tensors = [r.results[0] for rs in roots for r in rs if not _splat(r)]
    if not tensors:
        return True  # a number everywhere: a splat constant
    numel = math.prod(t[0])
    if numel > max(math.prod(_shape(v.type)[0]) for v in tensors):
        return False
    return numel <= PARAMETER_ELEMENTS or \
        tensor_bytes(op.results[0].type) <= max(tensor_bytes(v.type) for v in tensors)


def _fuses(value: ir.Value) -> bool:
    """Whether every reader of `value` (through reshapes and broadcasts) is a generic of
    parallel loops (a bias added to every row), which computes a cast of what it reads for
    free, or reads it as an init."""
    for use in value.uses:
        owner = use_owner(use)
        if owner.name in ("tensor.expand_shape", "tensor.collapse_shape", "linalg.broadcast"):
            if not _fuses(owner.results[0]):
                return False
        elif not _parallel(owner) and not _init_of(owner, use.operand_number):
            return False
    return True


def _parallel(op: ir.Operation) -> bool:
    """A generic with parallel loops only: it reads a [C] vector broadcast per element."""
    return op.name == "linalg.generic" and all(k == "parallel" for k in iterator_kinds(op))


def _init_of(op: ir.Operation, number: int) -> bool:
    """Whether operand `number` of `op` is an init (a Linear's bias broadcast into its
    matmul's accumulator: the GEMMs take it as their bias epilogue)."""
    return "operandSegmentSizes" in op.attributes and number >= len(_ins(op))


def _constant(value: Any, t: ir.Type) -> ir.Operation:
    import numpy as np

    x = np.asarray(value)
    if x.size and np.all(x == x.flat[0]) and not np.isnan(x.flat[0]):
        element = ir.RankedTensorType(t).element_type
        attr = ir.DenseElementsAttr.get_splat(t, ir.FloatAttr.get(element, float(x.flat[0])))
    else:
        attr = dense_attr(x, t)
    return ir.Operation.create("arith.constant", results=[t], attributes={"value": attr})


def fold_parameters(module: ir.Operation) -> int:
    """Replace each generic `foldable` whose inputs are known by its value. Returns how
    many."""
    fold = Fold(read_parameter, rounded=True)
    count = 0
    # In program order, each asked when it is reached: a generic on one folded just before
    # it (1 / sqrt(var + eps) of the widened var) reads a constant by then.
    for op in walk_ops(module, lambda o: o.name == "linalg.generic"):
        if not foldable(op):
            continue
        values = fold.results(op)
        if values is None or values[0] is None:
            continue
        result = op.results[0]
        with ir.InsertionPoint(op), op.location:
            constant = _constant(values[0], result.type)
        result.replace_all_uses_with(constant.results[0])
        op.erase()
        count += 1
    return count


@register
@dataclass
class FoldParametersPass(Pass):
    """Compute here the elementwise ops on parameters alone (see the module docstring)."""

    ARGUMENT = "fusion-fold-parameters"

    def run(self, module: ir.Operation) -> None:
        fold_parameters(module)
