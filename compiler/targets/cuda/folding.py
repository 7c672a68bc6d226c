"""CUDA target: folding."""

from __future__ import annotations

from typing import Any

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import numel_of, parse_map, tensor_info, value_key
from fusec.compiler.targets.cuda.body import (
    CAST_OPS,
    INT_OPS,
    RESHAPE_OPS,
    evaluate_payload,
    group_body_ops,
)
from fusec.compiler.targets.cuda.device import GROUP_OP, CudaCodegenError
from fusec.compiler.targets.cuda.rewrites import groups_of, regroup, use_owner
from fusec.passes.payload import CONSTANT_DTYPES, CONSTANT_MAX_ELEMENTS, constant_array

# Element types a folded constant may have (numpy dtype names), and the most elements.
FOLD_DTYPES = CONSTANT_DTYPES
FOLD_MAX_ELEMENTS = CONSTANT_MAX_ELEMENTS


# What the folding evaluates (index arithmetic, casts, compares, select, float arithmetic:
# what masks and aranges are made of), with the payload interpreter (body.evaluate_payload).
FOLDED_OPS = frozenset({"linalg.index", "arith.constant", "arith.cmpi", "arith.select",
                        *CAST_OPS, *INT_OPS, "arith.addf", "arith.subf", "arith.mulf",
                        "arith.divf", "arith.maximumf", "arith.minimumf"})


def evaluate_generic(op: ir.Operation, inputs: list[Any]) -> Any:
    """A linalg.generic's value (parallel loops, one result) on numpy `inputs`, computed here;
    None when its body has an op not in FOLDED_OPS."""
    import numpy as np

    shape, elt = tensor_info(op.results[0].type)
    maps = [parse_map(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if elt not in FOLD_DTYPES or numel_of(shape) > FOLD_MAX_ELEMENTS or len(op.results) != 1 \
            or maps[-1].results != tuple(range(len(shape))) or \
            any("parallel" not in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
        return None
    grid = np.indices(shape, dtype=np.int64)
    args = [np.asarray(x)[tuple(grid[d] if d is not None else 0 for d in m.results)]
            for x, m in zip(inputs, maps)]
    try:
        result = evaluate_payload(op, args, index=grid, only=FOLDED_OPS, captured=False)
    except CudaCodegenError:
        return None
    return np.broadcast_to(np.asarray(result), shape).astype(FOLD_DTYPES[elt])


def _constant_array(value: ir.Value) -> Any:
    """The numpy value of a dense (non-resource) tensor constant, or None."""
    return constant_array(value, FOLD_DTYPES, FOLD_MAX_ELEMENTS)


def _known_array(value: ir.Value, known: dict[int, Any] | None) -> Any:
    """The numpy value of `value`: `known` by key (computed here already), or a constant's;
    None otherwise."""
    if known is not None and value_key(value) in known:
        return known[value_key(value)]
    return _constant_array(value)


def _fold_op(op: ir.Operation, known: dict[int, Any] | None = None) -> Any:
    """The value of a reshape or generic whose tensor inputs are all constants (or values
    `known` by key, computed here already), or None."""
    if op.name in RESHAPE_OPS:
        x = _known_array(op.operands[0], known)
        return None if x is None else x.reshape(ir.RankedTensorType(op.results[0].type).shape)
    if op.name != "linalg.generic" or len(op.results) != 1:
        return None
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    inputs = [_known_array(v, known) for v in list(op.operands)[:seg[0]]]
    if any(x is None for x in inputs):
        return None
    return evaluate_generic(op, inputs)


def _replace_by_constant(op: ir.Operation, value: Any) -> None:
    import numpy as np

    result_type = op.results[0].type
    attr = ir.DenseElementsAttr.get(np.ascontiguousarray(value), type=result_type)
    with ir.InsertionPoint(op), op.location:
        constant = ir.Operation.create("arith.constant", results=[result_type],
                                       attributes={"value": attr})
    op.results[0].replace_all_uses_with(constant.results[0])
    op.erase()


def fold_constant_ops(group: ir.Operation) -> int:
    """Inside `group`, compute here each op that reads only constants (a causal mask from an
    arange): it becomes a constant (a weight of the artifact). Returns how many."""
    count = 0
    for op in group_body_ops(group):
        value = _fold_op(op)
        if value is not None:
            _replace_by_constant(op, value)
            count += 1
    return count


def _fold_values(group: ir.Operation) -> list[Any] | None:
    """The values of a group that reads nothing (an arange, and its reshape as a second
    output), each op computed here in turn; or None."""
    if group.operands:
        return None
    known: dict[int, Any] = {}
    for op in group_body_ops(group):
        value = _fold_op(op, known)
        if value is None:
            return None
        known[value_key(op.results[0])] = value
    body = group.regions[0].blocks[0]
    yielded = list(body.operations[len(body.operations) - 1].operands)
    values = [_known_array(v, known) for v in yielded]
    return None if any(v is None for v in values) else values


def fold_constant_groups(func: ir.Operation) -> int:
    """Compute here the groups that read nothing (gpt2's arange for its causal mask): a
    kernel each, for a value known at compile time. The value becomes a constant cloned
    into the groups that read it (a weight buffer of the artifact), where constant reshapes
    of it fold too (`fold_constant_ops`). Returns how many."""
    import numpy as np
    from fusec.passes.grouping import op_key

    count = 0
    gone: set[int] = set()
    for key, group in [(op_key(g), g) for g in groups_of(func)]:
        if key in gone:
            continue
        values = _fold_values(group)
        if values is None or any(use_owner(u).name != GROUP_OP
                                 for r in group.results for u in r.uses):
            continue  # a model output keeps its kernel (the caller owns that buffer)
        users = []
        for result, value in zip(group.results, values):
            with ir.InsertionPoint(group):
                constant = ir.Operation.create(
                    "arith.constant", results=[result.type], attributes={
                        "value": ir.DenseElementsAttr.get(np.ascontiguousarray(value),
                                                          type=result.type)})
            users += [use_owner(u) for u in list(result.uses)]
            result.replace_all_uses_with(constant.results[0])
        group.erase()
        for user in users:
            if user.name == GROUP_OP and op_key(user) not in gone:
                gone.add(op_key(user))
                fold_constant_ops(regroup([user], [], user))
        count += 1
    return count


