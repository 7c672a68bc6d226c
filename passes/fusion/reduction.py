"""--fusion-reduction: sibling reductions over the same input become one multi-result reduction.

Two `linalg.generic` reductions with the same iteration space (loop ranges and iterator
types) that read a common tensor through the same indexing map, and that do not depend on
each other, are merged into one `linalg.generic` with both results (XLA's multi-output
reduction fusion): the shared input is read once, in one pass, by one kernel. The bodies are
concatenated unchanged, so each result is computed exactly as before (same order, same
precision). The merged op records the ops it replaces as `fusion.siblings`; the groups the
planner forms around it are of kind `reduction`.

Ops between the two that use the first one's results move after the merged op (none of them
feeds the second). Not merged, with the reason recorded on the later op (`fusion.refused`):
a "sibling" that reads the other's result (`reduction-precision`: one pass would need a
Welford or sum-of-squares rewrite, which changes precision). Bodies with nested regions
are left alone.

Before:
    %s = linalg.generic {... ["parallel", "reduction"]} ins(%x) outs(%zero) { addf }
    %m = linalg.generic {... ["parallel", "reduction"]} ins(%x) outs(%ninf) { maximumf }
After:
    %r:2 = linalg.generic {... ["parallel", "reduction"]} ins(%x) outs(%zero, %ninf)
        attrs = {fusion.siblings = [...]} { addf; maximumf }

Options: window (how many following ops are searched for a sibling).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from fusec.passes import attributes
from fusec.passes.fusion.analysis import REDUCTION, describe, short_location
from fusec.passes.fusion.form_singletons import function_bodies
from fusec.passes.grouping import defining_op, op_key, walk_ops
from fusec.passes.registry import Pass, register
from mlir.dialects import linalg


def _is_reduction_generic(op: ir.Operation) -> bool:
    return op.name == "linalg.generic" and any(
        "reduction" in str(a) for a in op.attributes["iterator_types"])


def _ins_outs(op: ir.Operation) -> tuple[list[ir.Value], list[ir.Value]]:
    n_out = len(op.results)
    operands = list(op.operands)
    return operands[:len(operands) - n_out], operands[len(operands) - n_out:]


def _maps(op: ir.Operation) -> list[ir.Attribute]:
    return list(op.attributes["indexing_maps"])


def _shares_input(a: ir.Operation, b: ir.Operation) -> bool:
    a_ins, _ = _ins_outs(a)
    b_ins, _ = _ins_outs(b)
    a_maps, b_maps = _maps(a), _maps(b)
    for i, v in enumerate(a_ins):
        for j, w in enumerate(b_ins):
            if v == w and str(a_maps[i]) == str(b_maps[j]):
                return True
    return False


def _descendants_between(earlier: ir.Operation, later: ir.Operation,
                         positions: dict[int, int],
                         block_ops: list[ir.Operation]) -> list[ir.Operation]:
    """The ops from just after `earlier` up to `later` included that (transitively) use
    `earlier`, in block order."""
    start, end = positions[op_key(earlier)], positions[op_key(later)]
    tainted = {op_key(earlier)}
    found = []
    for op in block_ops[start + 1:end + 1]:
        if any((p := defining_op(v)) is not None and op_key(p) in tainted
               for inner in walk_ops(op) for v in inner.operands):
            tainted.add(op_key(op))
            found.append(op)
    return found


def _has_nested_regions(op: ir.Operation) -> bool:
    return any(len(inner.operation.regions) for inner in op.regions[0].blocks[0].operations)


def merge_siblings(a: ir.Operation, b: ir.Operation) -> ir.Operation:
    """One generic computing `a`'s and `b`'s results, placed at `b`; `a` and `b` erased."""
    a_ins, a_outs = _ins_outs(a)
    b_ins, b_outs = _ins_outs(b)
    a_maps, b_maps = _maps(a), _maps(b)
    n_a_in = len(a_ins)
    # inputs: a's, then b's that a does not already read through the same map
    inputs, in_maps, b_in_index = list(a_ins), a_maps[:n_a_in], []
    for j, w in enumerate(b_ins):
        found = next((i for i, v in enumerate(inputs)
                      if v == w and str(in_maps[i]) == str(b_maps[j])), None)
        if found is None:
            inputs.append(w)
            in_maps.append(b_maps[j])
            found = len(inputs) - 1
        b_in_index.append(found)
    outputs = a_outs + b_outs
    maps = in_maps + a_maps[n_a_in:] + b_maps[len(b_ins):]
    result_types = [r.type for r in a.results] + [r.type for r in b.results]
    with ir.InsertionPoint(b), b.location:
        merged = linalg.GenericOp(result_types, inputs, outputs, ir.ArrayAttr.get(maps),
                                  a.attributes["iterator_types"])
    arg_types = [ir.RankedTensorType(v.type).element_type for v in inputs + outputs]
    with b.location:
        body = merged.regions[0].blocks.append(*arg_types)
    n_in = len(inputs)
    a_args = [body.arguments[i] for i in range(n_a_in)]
    a_args += [body.arguments[n_in + k] for k in range(len(a_outs))]
    b_args = [body.arguments[i] for i in b_in_index]
    b_args += [body.arguments[n_in + len(a_outs) + k] for k in range(len(b_outs))]
    yielded = clone_body(a, a_args, body) + clone_body(b, b_args, body)
    with ir.InsertionPoint(body), b.location:
        linalg.YieldOp(yielded)
    merged_op = merged.operation
    siblings = [f"{op.name}@{short_location(op)}" for op in (a, b)]
    merged_op.attributes[attributes.SIBLINGS] = ir.ArrayAttr.get(
        [ir.StringAttr.get(s) for s in siblings])
    for op in (a, b):  # partials of split reductions stay partials (kept from their combine)
        if attributes.SPLIT_PARTIALS in op.attributes:
            merged_op.attributes[attributes.SPLIT_PARTIALS] = op.attributes[
                attributes.SPLIT_PARTIALS]
    for old, new in zip(list(a.results) + list(b.results), merged_op.results):
        old.replace_all_uses_with(new)
    b.erase()
    a.erase()
    return merged_op


def clone_body(op: ir.Operation, args: list[ir.Value], target: ir.Block) -> list[ir.Value]:
    """Clone `op`'s payload into `target` reading `args`; returns the values it yields."""
    source = op.regions[0].blocks[0]
    mapping: dict[tuple[int, int], ir.Value] = {}

    def mapped(value: ir.Value) -> ir.Value | None:
        owner = value.owner
        if isinstance(owner, ir.Block):
            if owner == source:
                return args[ir.BlockArgument(value).arg_number]
            return None
        return mapping.get((op_key(owner), ir.OpResult(value).result_number))

    yielded: list[ir.Value] = []
    for inner in source.operations:
        inner = inner.operation
        if inner.name == "linalg.yield":
            yielded = [mapped(v) or v for v in inner.operands]
            break
        clone = inner.clone(ip=ir.InsertionPoint(target))
        for i, v in enumerate(clone.operands):
            new = mapped(v)
            if new is not None:
                clone.operands[i] = new
        for k, (old, new) in enumerate(zip(inner.results, clone.results)):
            mapping[(op_key(inner), k)] = new
    return yielded


def fuse_sibling_reductions(block: ir.Block, window: int) -> int:
    """Merge sibling reductions in `block`; returns how many merges were made."""
    merges = 0
    start = 0
    while True:
        block_ops = [op.operation for op in block.operations]
        positions = {op_key(op): i for i, op in enumerate(block_ops)}
        merged_at = _find_and_merge(block_ops, positions, start, window)
        if merged_at is None:
            return merges
        merges += 1
        start = merged_at  # the merged op may take a third sibling; earlier ops are done


def _find_and_merge(block_ops: list[ir.Operation], positions: dict[int, int], start: int,
                    window: int) -> int | None:
    """Merge the first sibling pair at or after `start`; returns the first one's position."""
    for i in range(start, len(block_ops)):
        a = block_ops[i]
        if not _is_reduction_generic(a) or _has_nested_regions(a):
            continue
        fa = describe(a, i)
        for b in block_ops[i + 1:i + 1 + window]:
            if not _is_reduction_generic(b) or _has_nested_regions(b):
                continue
            fb = describe(b, positions[op_key(b)])
            if (fa.category != REDUCTION or fb.category != REDUCTION
                    or fa.loop_ranges != fb.loop_ranges
                    or fa.loop_parallel != fb.loop_parallel or not _shares_input(a, b)):
                continue
            between = _descendants_between(a, b, positions, block_ops)
            if between and between[-1] == b:
                _refuse(b, a, "reduction-precision: it reads that reduction's result; one "
                        "pass over the shared input would need a one-pass (Welford or "
                        "sum-of-squares) rewrite of this reduction, which changes its "
                        "precision: kept as two passes")
                continue
            merged = merge_siblings(a, b)
            # Users of the first sibling that sat between the two follow the merged op; none
            # of them feeds the second (it does not depend on the first), so this is legal.
            anchor = merged
            for op in between:
                op.move_after(anchor)
                anchor = op
            return i
    return None


def _refuse(op: ir.Operation, other: ir.Operation, reason: str) -> None:
    text = f"{other.name}@{short_location(other)}: sibling-reduction: {reason}"
    old = [ir.StringAttr(a).value for a in op.attributes[attributes.REFUSED]] \
        if attributes.REFUSED in op.attributes else []
    if text not in old:
        op.attributes[attributes.REFUSED] = ir.ArrayAttr.get(
            [ir.StringAttr.get(t) for t in old + [text]])


@register
@dataclass
class FuseReductionPass(Pass):
    """Merge sibling reductions over a shared input into one multi-result reduction."""

    ARGUMENT = "fusion-reduction"
    window: int = 16

    def run(self, module: ir.Operation) -> None:
        for block in function_bodies(module):
            fuse_sibling_reductions(block, self.window)
