"""--fusion-lower-tm-tensor: torch-mlir's TMTensor ops become serial loop nests on tensors.

torch-mlir lowers a few aten ops that have no linalg form (index_put, scatter, scatter_add,
index_add, cumsum, cumprod, sort, argsort, kthvalue, ...) to its own `tm_tensor` dialect,
which fusec's MLIR does not register: they arrive as unregistered ops in generic form (parse
with `allow_unregistered_dialects`; the `linalg` stage's check lets `LOWERED_OPS` through).
This pass, the first of the `fusion` stage, rewrites each supported one into upstream ops:
nested `scf.for` loops whose `iter_args` carry the tensors being written,
`tensor.extract`/`tensor.insert` for element access, and the op's own region inlined as its
combiner or comparator. The loop nest is wrapped in a `fusion.group single` marked
`fusion.serial`, together with the fills (or iota) that only initialise its outputs: one
kernel, run by one thread, that the planner does not fuse into and that tiling and
horizontal fusion leave alone (its iterations depend on one another through the tensors it
carries). One-shot bufferization turns the nest into loops over memrefs that update the
output in place.

The semantics are those of torch-mlir's scalar implementation of each op:

- `tm_tensor.scatter` ins(updates, indices) outs(original) {dimension_map, unique_indices}:
  for every position `(b, u...)` of `updates`, in order, the target index is `u...` aligned
  to the original's trailing dims, then for each `i < index_depth`
  `target[dimension_map[i]] += indices[b, i]`; `original[target] = region(update, original
  [target])`. Iterating in order makes repeated indices correct whatever `unique_indices`.
- `tm_tensor.scan` ins(input) outs(output, accumulator) {dimension, inclusive}: along
  `dimension`, `output[0] = inclusive ? input[0] : accumulator`, `output[j] =
  region(output[j-1], input[inclusive ? j : j-1])`, and the accumulator receives every value
  computed by the region (so it ends holding the last one).
- `tm_tensor.sort` outs(operands...) {dimension}: all operands sorted together along
  `dimension`; the comparator region takes (a, b) of every operand and says whether a may
  precede b. torch-mlir's lowering is a bubble sort that swaps neighbours when it yields
  false; with the non-strict comparisons torch-mlir emits that is the stable sort, which
  this pass computes with a merge sort (O(n log n), not O(n^2)).
- `tm_tensor.topk` ins(values[, indices]) outs(out_values, out_indices) {dimension}: the
  outputs come pre-filled; every input element is inserted into the K slots, the region
  (candidate, slot) saying whether it goes before the slot's element, ties going to the
  lower index.

Before:
    %r = "tm_tensor.scatter"(%upd, %idx, %orig) <{dimension_map = array<i64: 0>, ...}> ({
    ^bb0(%u: f32, %o: f32):
      %s = "arith.addf"(%o, %u) : (f32, f32) -> f32
      "tm_tensor.yield"(%s) : (f32) -> ()
    }) : (tensor<3x1x4xf32>, tensor<3x1xi64>, tensor<5x4xf32>) -> tensor<5x4xf32>
After:
    %r = fusion.group single (%a = %upd, %b = %idx, %c = %orig) attributes {fusion.serial} {
      %0 = scf.for %i = %c0 to %c3 step %c1 iter_args(%t = %c) -> (tensor<5x4xf32>) {
        ... scf.for over the update slice; tensor.extract, the region's ops, tensor.insert ...
      }
      fusion.yield %0 : tensor<5x4xf32>
    }

Any other `tm_tensor` op (`tm_tensor.attention`, ...) is an error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import mlir.ir as ir
from fusec.passes import attributes
from fusec.passes.grouping import defining_op, form_group, op_key, value_key, walk_ops
from fusec.passes.payload import cmpf_predicate
from fusec.passes.registry import Pass, PassError, register
from mlir.dialects import arith, bufferization, scf, tensor

# The tm_tensor ops this pass lowers (their region terminator is `tm_tensor.yield`).
LOWERED_OPS = frozenset({"tm_tensor.scatter", "tm_tensor.scan", "tm_tensor.sort",
                         "tm_tensor.topk"})
YIELD = "tm_tensor.yield"
# The unit attribute that marks a group as a serial loop nest (one thread, never tiled or
# merged with other groups).
SERIAL_ATTR = attributes.SERIAL

Body = Callable[[list[ir.Value], list[ir.Value]], list[ir.Value]]


# --- building blocks ---------------------------------------------------------------------


def _index(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), value).result


def _shape(value: ir.Value) -> list[int]:
    return list(ir.RankedTensorType(value.type).shape)


def _element_type(value: ir.Value) -> ir.Type:
    return ir.RankedTensorType(value.type).element_type


def loop_nest(bounds: Sequence[int], inits: list[ir.Value], body: Body) -> list[ir.Value]:
    """`scf.for` loops over `bounds` (outermost first) carrying `inits`; returns the results.

    `body(ivs, carried)` builds the innermost body at the current insertion point and
    returns the values to carry on.
    """
    def level(depth: int, ivs: list[ir.Value], carried: list[ir.Value]) -> list[ir.Value]:
        if depth == len(bounds):
            return body(ivs, carried)
        loop = scf.ForOp(_index(0), _index(bounds[depth]), _index(1), carried)
        with ir.InsertionPoint(loop.body):
            results = level(depth + 1, ivs + [loop.induction_variable],
                            list(loop.inner_iter_args))
            scf.YieldOp(results)
        return list(loop.results)

    return level(0, [], list(inits))


def if_else(condition: ir.Value, types: list[ir.Type], then_body: Callable[[], list[ir.Value]],
            else_body: Callable[[], list[ir.Value]]) -> list[ir.Value]:
    """`scf.if` yielding `types`, with both branches built by the callbacks."""
    op = scf.IfOp(condition, types, has_else=True)
    with ir.InsertionPoint(op.then_block):
        scf.YieldOp(then_body())
    with ir.InsertionPoint(op.else_block):
        scf.YieldOp(else_body())
    return list(op.results)


def inline_region(op: ir.Operation, arguments: list[ir.Value]) -> list[ir.Value]:
    """Clone the body of `op`'s region at the insertion point, its block arguments bound to
    `arguments`; returns the values its `tm_tensor.yield` yields (as cloned)."""
    block = op.regions[0].blocks[0]
    mapping: list[tuple[ir.Value, ir.Value]] = list(zip(block.arguments, arguments))

    def mapped(value: ir.Value) -> ir.Value:
        for source, target in mapping:
            if source == value:
                return target
        return value

    for inner in block.operations:
        inner = inner.operation
        if inner.name == YIELD:
            return [mapped(v) for v in inner.operands]
        clone = inner.clone()
        # Remap the clone's operands, and those of ops nested in it, to the new values.
        for nested in walk_ops(clone):
            for i, operand in enumerate(nested.operands):
                replacement = mapped(operand)
                if replacement != operand:
                    nested.operands[i] = replacement
        mapping += list(zip(inner.results, clone.results))
    raise PassError(f"'{op.name}' region has no {YIELD}", op.location)


def _segments(op: ir.Operation) -> tuple[list[ir.Value], list[ir.Value]]:
    """The op's `ins` and `outs` operands (from `operandSegmentSizes`)."""
    sizes = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    operands = list(op.operands)
    return operands[:sizes[0]], operands[sizes[0]:sizes[0] + sizes[1]]


def _int_attr(op: ir.Operation, name: str) -> int:
    return ir.IntegerAttr(op.attributes[name]).value


# --- the four ops ------------------------------------------------------------------------


def lower_scatter(op: ir.Operation) -> list[ir.Value]:
    """Scatter as a loop over every element of `updates`, in order."""
    (updates, indices), (original,) = _segments(op)
    dimension_map = list(ir.DenseI64ArrayAttr(op.attributes["dimension_map"]))
    update_shape, original_shape = _shape(updates), _shape(original)
    rank = len(original_shape)
    depth = _shape(indices)[-1]
    index_type = ir.IndexType.get()

    def body(ivs: list[ir.Value], carried: list[ir.Value]) -> list[ir.Value]:
        (target,) = carried
        update = tensor.ExtractOp(updates, ivs).result
        # The update slice's dims align with the original's trailing dims; the indices
        # then add their offsets to the dims that dimension_map names.
        starts: list[ir.Value | None] = [None] * rank
        slice_ivs = ivs[1:]
        for k, iv in enumerate(slice_ivs):
            starts[rank - len(slice_ivs) + k] = iv
        for i in range(depth):
            raw = tensor.ExtractOp(indices, [ivs[0], _index(i)]).result
            offset = arith.IndexCastOp(index_type, raw).result
            dim = dimension_map[i]
            # A negative index counts from the end, as torch's `y[i] = v` takes it (the
            # index checks then see the wrapped one).
            offset = arith.SelectOp(
                arith.CmpIOp(arith.CmpIPredicate.slt, offset, _index(0)).result,
                arith.AddIOp(offset, _index(original_shape[dim])).result, offset).result
            starts[dim] = offset if starts[dim] is None else arith.AddIOp(offset,
                                                                          starts[dim]).result
        if any(s is None for s in starts):
            raise PassError("tm_tensor.scatter leaves a dim of the original unindexed",
                            op.location)
        current = tensor.ExtractOp(target, starts).result
        (combined,) = inline_region(op, [update, current])
        return [tensor.InsertOp(combined, target, starts).result]

    return loop_nest(update_shape, [original], body)


def lower_scan(op: ir.Operation) -> list[ir.Value]:
    """Scan along `dimension`: each element from the previous output and an input.

    A 16-bit scan (a bf16 cumsum) carries its running value in f32 beside the outputs and
    rounds each output once, as torch does (torch-mlir's region folds in bf16: a cumsum of
    2048 values near 1 stalled, 65% off). An f32 scan carries it in f64, as torch's CPU
    kernels do (folded in f32, a cumsum of 100 000 values was 5e-6 from float64, torch's
    2e-8; a scan is one thread's loop: the wider add costs nothing that shows)."""
    from fusec.passes.linalg.widen_accumulators import Widener, is_half

    (source,), (output, accumulator) = _segments(op)
    dim = _int_attr(op, "dimension")
    inclusive = ir.BoolAttr(op.attributes["inclusive"]).value
    element = _element_type(output)
    running_type = ir.F32Type.get() if is_half(element) else \
        ir.F64Type.get() if str(element) == "f32" else None
    wide = running_type is not None
    inits = [output, accumulator]
    if wide:
        inits.append(tensor.EmptyOp(_shape(accumulator), running_type).result)
    types = [v.type for v in inits]

    def body(ivs: list[ir.Value], carried: list[ir.Value]) -> list[ir.Value]:
        out, acc = carried[:2]
        acc_ivs = ivs[:dim] + ivs[dim + 1:]
        first = arith.CmpIOp(arith.CmpIPredicate.eq, ivs[dim], _index(0)).result

        def start() -> list[ir.Value]:
            value = (tensor.ExtractOp(source, ivs) if inclusive
                     else tensor.ExtractOp(acc, acc_ivs)).result
            started = [tensor.InsertOp(value, out, ivs).result, acc]
            if wide:
                started.append(tensor.InsertOp(arith.ExtFOp(running_type, value).result, carried[2],
                                               acc_ivs).result)
            return started

        def step() -> list[ir.Value]:
            previous = ivs[:dim] + [arith.SubIOp(ivs[dim], _index(1)).result] + ivs[dim + 1:]
            if not wide:
                before = tensor.ExtractOp(out, previous).result
                x = tensor.ExtractOp(source, ivs if inclusive else previous).result
                (value,) = inline_region(op, [before, x])
                return [tensor.InsertOp(value, out, ivs).result,
                        tensor.InsertOp(value, acc, acc_ivs).result]
            x = tensor.ExtractOp(source, ivs if inclusive else previous).result
            running = tensor.ExtractOp(carried[2], acc_ivs).result
            block = op.regions[0].blocks[0]
            widener = Widener(running_type.context, running_type, (str(element),))
            widener.wide[value_key(block.arguments[0])] = running
            widener.narrow[value_key(block.arguments[1])] = x
            for inner in [o.operation for o in block.operations]:
                if inner.name == YIELD:
                    value_wide = widener.wide_of(inner.operands[0])
                    break
                widener.clone(inner)
            value = arith.TruncFOp(element, value_wide).result
            return [tensor.InsertOp(value, out, ivs).result,
                    tensor.InsertOp(value, acc, acc_ivs).result,
                    tensor.InsertOp(value_wide, carried[2], acc_ivs).result]

        return if_else(first, types, start, step)

    return loop_nest(_shape(source), inits, body)[:2]


def _nan_greatest(op: ir.Operation) -> None:
    """The sort's float comparisons with NaN as the greatest value, as torch sorts (NaNs last
    ascending, first descending): an ordered `a <= b` is false whenever a NaN is compared,
    so NaNs stayed where they were and split the order around them. `a <= b` becomes
    `a <= b or b is NaN`, `a >= b` becomes `a >= b or a is NaN` (a NaN may precede a NaN:
    still a total preorder, so the merge stays stable)."""
    block = op.regions[0].blocks[0]
    for cmp in [o.operation for o in block.operations if o.operation.name == "arith.cmpf"]:
        # torch-mlir's "may precede": ordered a <= b ascending, a >= b descending.
        predicate = cmpf_predicate(cmp)
        if predicate not in ("ole", "oge"):
            continue
        a, b = cmp.operands[0], cmp.operands[1]
        nan_side = b if predicate == "ole" else a
        with ir.InsertionPoint.after(cmp), cmp.location:
            is_nan = arith.CmpFOp(arith.CmpFPredicate.UNO, nan_side, nan_side).result
            either = arith.OrIOp(cmp.results[0], is_nan)
        cmp.results[0].replace_all_uses_except(either.result, either.operation)


def lower_sort(op: ir.Operation) -> list[ir.Value]:
    """Stable bottom-up merge sort along `dimension`, all operands permuted together.

    torch-mlir's own lowering is a bubble sort (n passes of neighbour compare-and-swap,
    O(n^2)); for a comparator that is a total preorder ("may precede", which torch-mlir
    emits: `oge`/`ole`/`sge`/`sle`) both give the unique stable order, and a merge that takes
    from the left run whenever the comparator allows it is stable too. Each row is sorted
    by ceil(log2 n) passes that merge runs of width 1, 2, 4, ... from one tensor into the
    other; the first pass reads the operands themselves, and the last writes the results.
    """
    inputs, operands = _segments(op)
    if inputs:
        raise PassError("tm_tensor.sort with `ins` operands is not supported", op.location)
    _nan_greatest(op)
    dim = _int_attr(op, "dimension")
    shape = _shape(operands[0])
    n = shape[dim]
    passes = max(0, (n - 1).bit_length())  # ceil(log2 n)
    if passes == 0:  # one element per row: already sorted
        return loop_nest([1], list(operands), lambda ivs, carried: carried)
    row_shape = shape[:dim] + shape[dim + 1:]
    # Passes alternate between the results and a one-row scratch per operand, the last one
    # writing the results. Both are `alloc_tensor`s, not `tensor.empty`s: CSE merges equal
    # empties, and one-shot bufferization then gives two of them one buffer (a pass would
    # overwrite its own input).
    results = [bufferization.AllocTensorOp(v.type, []).result for v in operands]

    def row(ivs: list[ir.Value], carried: list[ir.Value]) -> list[ir.Value]:
        scratch = [bufferization.AllocTensorOp(
            ir.RankedTensorType.get([n], _element_type(v)), []).result for v in operands]
        slots = {"out": Run(carried, ivs, dim), "other": Run(scratch, [], 0)}
        source = Run(list(operands), ivs, dim)
        for p in range(passes):
            name = "out" if (passes - 1 - p) % 2 == 0 else "other"
            slots[name] = merge_pass(op, source, slots[name], n, 1 << p)
            source = slots[name]
        return slots["out"].tensors

    return loop_nest(row_shape or [1], results,
                     row if row_shape else (lambda ivs, carried: row([], carried)))


@dataclass
class Run:
    """Tensors holding one row to sort: the row's element k is at `row[:dim] + [k] +
    row[dim:]` (the operands and results: `row` is the ivs of the other dims; a one-row
    scratch: no `row`)."""

    tensors: list[ir.Value]
    row: list[ir.Value]
    dim: int

    def at(self, k: ir.Value) -> list[ir.Value]:
        return self.row[:self.dim] + [k] + self.row[self.dim:]


def merge_pass(op: ir.Operation, source: Run, target: Run, n: int, width: int) -> Run:
    """Merge the runs of `width` of `source` pairwise into `target`; returns the new target."""
    last = _index(n - 1)

    def runs(ivs: list[ir.Value], carried: list[ir.Value]) -> list[ir.Value]:
        (start,) = ivs
        lo = arith.MulIOp(start, _index(2 * width)).result
        mid = arith.MinSIOp(arith.AddIOp(lo, _index(width)).result, _index(n)).result
        hi = arith.MinSIOp(arith.AddIOp(lo, _index(2 * width)).result, _index(n)).result
        loop = scf.ForOp(lo, hi, _index(1), list(carried) + [lo, mid])
        with ir.InsertionPoint(loop.body):
            k = loop.induction_variable
            *dest, i, j = list(loop.inner_iter_args)
            # Clamped reads: an exhausted run's element is read but never taken.
            left_at = source.at(arith.MinSIOp(i, last).result)
            right_at = source.at(arith.MinSIOp(j, last).result)
            left = [tensor.ExtractOp(v, left_at).result for v in source.tensors]
            right = [tensor.ExtractOp(v, right_at).result for v in source.tensors]
            (in_order,) = inline_region(op, [x for pair in zip(left, right) for x in pair])
            left_open = arith.CmpIOp(arith.CmpIPredicate.slt, i, mid).result
            right_done = arith.CmpIOp(arith.CmpIPredicate.sge, j, hi).result
            take_left = arith.AndIOp(left_open,
                                     arith.OrIOp(right_done, in_order).result).result
            written = [tensor.InsertOp(arith.SelectOp(take_left, a, b).result, d,
                                       target.at(k)).result
                       for d, a, b in zip(dest, left, right)]
            one = _index(1)
            next_i = arith.SelectOp(take_left, arith.AddIOp(i, one).result, i).result
            next_j = arith.SelectOp(take_left, j, arith.AddIOp(j, one).result).result
            scf.YieldOp(written + [next_i, next_j])
        return list(loop.results)[:len(carried)]

    tensors = loop_nest([-(-n // (2 * width))], target.tensors, runs)
    return Run(tensors, target.row, target.dim)


def lower_topk(op: ir.Operation) -> list[ir.Value]:
    """Insert every element into the K pre-filled output slots, in order."""
    inputs, (out_values, out_indices) = _segments(op)
    values, indices = inputs[0], (inputs[1] if len(inputs) > 1 else None)
    dim = _int_attr(op, "dimension")
    k = _shape(out_values)[dim]
    index_element = _element_type(out_indices)

    def body(ivs: list[ir.Value], carried: list[ir.Value]) -> list[ir.Value]:
        candidate = tensor.ExtractOp(values, ivs).result
        if indices is not None:
            candidate_index = tensor.ExtractOp(indices, ivs).result
        else:
            candidate_index = arith.IndexCastOp(index_element, ivs[dim]).result

        def slot(inner: list[ir.Value], state: list[ir.Value]) -> list[ir.Value]:
            (s,) = inner
            out_v, out_i, carry_v, carry_i = state
            at = ivs[:dim] + [s] + ivs[dim + 1:]
            slot_v = tensor.ExtractOp(out_v, at).result
            slot_i = tensor.ExtractOp(out_i, at).result
            (before,) = inline_region(op, [carry_v, slot_v])
            (after,) = inline_region(op, [slot_v, carry_v])
            # Neither before the other: equal keys, the lower index first.
            tie = arith.AndIOp(arith.CmpIOp(arith.CmpIPredicate.eq, before, after).result,
                               arith.CmpIOp(arith.CmpIPredicate.slt, carry_i, slot_i).result)
            index_first = arith.OrIOp(before, tie.result).result
            new_v = arith.SelectOp(before, carry_v, slot_v).result
            new_i = arith.SelectOp(index_first, carry_i, slot_i).result
            return [tensor.InsertOp(new_v, out_v, at).result,
                    tensor.InsertOp(new_i, out_i, at).result,
                    arith.SelectOp(before, slot_v, carry_v).result,
                    arith.SelectOp(index_first, slot_i, carry_i).result]

        out_v, out_i, _, _ = loop_nest([k], carried + [candidate, candidate_index], slot)
        return [out_v, out_i]

    return loop_nest(_shape(values), [out_values, out_indices], body)


LOWERINGS: dict[str, Callable[[ir.Operation], list[ir.Value]]] = {
    "tm_tensor.scatter": lower_scatter,
    "tm_tensor.scan": lower_scan,
    "tm_tensor.sort": lower_sort,
    "tm_tensor.topk": lower_topk,
}


def _check_static(op: ir.Operation) -> None:
    for value in list(op.operands) + list(op.results):
        t = value.type
        if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape:
            raise PassError(f"'{op.name}' has an operand or result of type {t}; fusec lowers "
                            "it for static tensor shapes only", op.location)


@register
@dataclass
class LowerTMTensorPass(Pass):
    """Rewrite tm_tensor scatter/scan/sort/topk into serial scf.for nests on tensors."""

    ARGUMENT = "fusion-lower-tm-tensor"

    def run(self, module: ir.Operation) -> None:
        for op in walk_ops(module, lambda o: o.name.startswith("tm_tensor.")):
            if op.name == YIELD:
                continue
            if op.name not in LOWERINGS:
                raise PassError(
                    f"unsupported op '{op.name}'; fusec lowers only "
                    f"{', '.join(sorted(LOWERED_OPS))} of torch-mlir's TMTensor dialect",
                    op.location)
        for op in walk_ops(module, lambda o: o.name in LOWERINGS):
            lower_op(op)


def init_producers(op: ir.Operation) -> list[ir.Operation]:
    """The ops that only make `op`'s `outs` (a `linalg.fill`, or a `linalg.generic` with no
    inputs such as sort's iota of indices) and have no other user.

    They join the loop nest's kernel: they read nothing, so the kernel's cost is unchanged,
    and their tensors then never go through memory between two kernels.
    """
    _, outs = _segments(op)
    producers: list[ir.Operation] = []
    for value in outs:
        producer = defining_op(value)
        if producer is None or producer.block != op.block:
            continue
        if producer.name == "linalg.fill":
            reads_nothing = True
        elif producer.name == "linalg.generic":
            reads_nothing = _segments(producer)[0] == []
        else:
            reads_nothing = False
        users = [use.owner for result in producer.results for use in result.uses]
        if reads_nothing and len(users) == 1 and op_key(users[0]) == op_key(op):
            producers.append(producer)
    return producers


def lower_op(op: ir.Operation) -> None:
    """Replace one supported tm_tensor op by its loop nest, grouped as one serial kernel
    (with the ops that only make its `outs`)."""
    _check_static(op)
    name = op.name
    parent = op.parent
    producers = init_producers(op) if parent is not None and parent.name == "func.func" else []
    block = op.block
    before = {op_key(o) for o in block.operations}
    with ir.InsertionPoint(op), op.location:
        results = LOWERINGS[name](op)
    # The loop nest and what it needs before it (bounds, the sort's buffers).
    created = [o.operation for o in block.operations if op_key(o) not in before]
    for old, new in zip(op.results, results):
        old.replace_all_uses_with(new)
    op.erase()
    if parent is not None and parent.name == "func.func":
        group = form_group(producers + created, "single")
        group.attributes[SERIAL_ATTR] = ir.UnitAttr.get()
        group.attributes[attributes.REASON] = ir.StringAttr.get(
            f"{name} as a serial loop nest (never tiled or merged)")
