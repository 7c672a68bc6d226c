"""The one mechanism every fusion pass uses: wrap a set of ops in a `fusion.group`.

Passes decide *which* ops share a kernel; `form_group` does the rewriting. The group's
inputs are the values its ops (and the regions nested in them) use but that are defined
outside the set; its outputs are the results used outside it. Constants and `tensor.empty`
are cloned in: they cost no memory traffic and keep the group isolated from above. The
group takes the place of the set's last op; outside ops in between that depend on the set
move after it, which is legal exactly when the set is convex (checked).
"""

from __future__ import annotations

import functools
from typing import Callable, Iterable

import mlir.ir as ir

from fusec.dialects import _capsule_pointer
from fusec.passes.registry import PassError

# Ops that are free to duplicate into every group that uses them.
CLONED_INTO_GROUPS = frozenset({"arith.constant", "tensor.empty"})

# Tensor ops that compute, and so belong in a kernel (linalg ops all do).
COMPUTE_TENSOR_OPS = frozenset({
    "tensor.pad", "tensor.concat", "tensor.extract_slice", "tensor.insert_slice",
    "tensor.collapse_shape", "tensor.expand_shape", "tensor.reshape", "tensor.generate",
    "tensor.extract", "tensor.splat", "tensor.gather", "tensor.scatter",
})


def is_compute(op: ir.Operation) -> bool:
    """True for ops that do work a kernel must run (linalg ops, computing tensor ops)."""
    name = op.name
    if name.startswith("linalg.") and name not in ("linalg.yield", "linalg.index"):
        return True
    return name in COMPUTE_TENSOR_OPS


def defining_op(value: ir.Value) -> ir.Operation | None:
    """The op that defines `value`, or None for a block argument."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return owner.operation if hasattr(owner, "operation") else owner


def splat_value(value: ir.Value) -> ir.Attribute | None:
    """The element of a splat `arith.constant` tensor `value`, or None."""
    op = defining_op(value)
    if op is None or op.name != "arith.constant":
        return None
    attr = op.attributes["value"]
    if isinstance(attr, ir.DenseElementsAttr) and ir.DenseElementsAttr(attr).is_splat:
        return ir.DenseElementsAttr(attr).get_splat_value()
    return None


def declare_function(module: ir.Operation, name: str, function_type: ir.Type) -> None:
    """`func.func private @name` of `function_type` in `module`, once (at the end of the
    module: a module made for one group, `group_alone`, keeps `main` first); PassError if
    the module has a function of that name and another type."""
    from mlir.dialects import func

    body = module.regions[0].blocks[0]
    for op in body.operations:
        if op.operation.name == "func.func" and \
                ir.StringAttr(op.operation.attributes["sym_name"]).value == name:
            if ir.TypeAttr(op.operation.attributes["function_type"]).value != function_type:
                raise PassError(f"the module's @{name} is not the {function_type} it "
                                "calls")
            return
    with ir.InsertionPoint(body), ir.Location.unknown():
        fn = func.FuncOp(name, function_type)
        fn.attributes["sym_visibility"] = ir.StringAttr.get("private")


def use_owner(use: ir.OpOperand) -> ir.Operation:
    """The op a use belongs to (the bindings give an OpView or an Operation)."""
    return use.owner.operation if hasattr(use.owner, "operation") else use.owner


RESHAPE_OPS = frozenset({"tensor.expand_shape", "tensor.collapse_shape"})


def producer_through_reshapes(value: ir.Value) -> ir.Operation | None:
    """The op that computes `value`, looking through reshapes (None: a block argument)."""
    op = defining_op(value)
    while op is not None and op.name in RESHAPE_OPS:
        op = defining_op(op.operands[0])
    return op


def model_functions(module: ir.Operation) -> list[ir.Operation]:
    """The module's model functions: its public `func.func`s (not the kernels an earlier
    stage outlined, nor declarations)."""
    return [op.operation for op in module.regions[0].blocks[0].operations
            if op.operation.name == "func.func" and len(op.operation.regions[0].blocks)
            and "sym_visibility" not in op.operation.attributes]


def op_key(op: ir.Operation | ir.OpView) -> int:
    """A stable identity for an op: its address.

    `ir.Operation`'s own hash is structural and changes when an operand changes, so
    operations must never be dict keys or set members; their keys can.
    """
    return _capsule_pointer(op.operation._CAPIPtr, b"mlir.ir.Operation._CAPIPtr")


def walk_ops(root: ir.Operation | ir.OpView,
             where: Callable[[ir.Operation], bool] | None = None) -> list[ir.Operation]:
    """`root` and every op nested in it (post-order: an op after the ops nested in it), or
    those for which `where` holds.

    Collected into a list first: rewriting while walking is unsafe, and an exception raised
    inside a walk callback loses its type.
    """
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if where is None or where(op):
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    root.operation.walk(visit)
    return found


def _nested_ops(ops: Iterable[ir.Operation]) -> set[int]:
    """The keys of every op in `ops` and in the regions nested inside them."""
    return {op_key(inner) for op in ops for inner in walk_ops(op)}


def _is_inside(value: ir.Value, nested: set[int]) -> bool:
    op = defining_op(value)
    if op is not None:
        return op_key(op) in nested
    parent = value.owner.owner  # the op owning the argument's block
    return parent is not None and op_key(parent) in nested


def block_order(block: ir.Block) -> dict[int, int]:
    """Op key -> position in `block`."""
    return {op_key(op): i for i, op in enumerate(block.operations)}


def form_group(ops: Iterable[ir.Operation], kind: str,
               attributes: dict[str, ir.Attribute] | None = None) -> ir.Operation:
    """Wrap `ops` (all in one block) in a `fusion.group` of `kind`; returns the group op.

    Raises PassError if the set is not convex (an outside op both depends on the set and
    feeds it): such a set cannot be one kernel.
    """
    from fusec.dialects import ops as fusion_ops

    members = [op.operation for op in ops]
    block = members[0].block
    # Block order through MLIR's own (cached) op order: numbering the whole block here would
    # make forming n groups quadratic in the block's size.
    members.sort(key=functools.cmp_to_key(_block_compare))
    member_set = {op_key(o) for o in members}
    nested = _nested_ops(members)
    first, last = members[0], members[-1]

    # Inputs (in first-use order) and the free ops to clone in. Each operand to redirect is
    # remembered here, so that redirecting costs the group's size, not the number of uses
    # of a shared value (one `tensor.empty` may feed hundreds of ops).
    inputs: list[ir.Value] = []
    clones: list[ir.Operation] = []
    input_index: dict[tuple[int, int], int] = {}
    clone_index: dict[int, int] = {}
    redirects: list[tuple[ir.Operation, int, bool, int, int]] = []
    for op in members:
        for inner in walk_ops(op):
            for i, operand in enumerate(inner.operands):
                if _is_inside(operand, nested):
                    continue
                producer = defining_op(operand)
                # A free op is cloned in unless it reads values (a dynamic tensor.empty's
                # sizes): then its result is an input, as the clone could not read them.
                if producer is not None and producer.name in CLONED_INTO_GROUPS and \
                        not len(producer.operands):
                    key = op_key(producer)
                    if key not in clone_index:
                        clone_index[key] = len(clones)
                        clones.append(producer)
                    result_number = ir.OpResult(operand).result_number
                    redirects.append((inner, i, True, clone_index[key], result_number))
                else:
                    key = value_key(operand)
                    if key not in input_index:
                        input_index[key] = len(inputs)
                        inputs.append(operand)
                    redirects.append((inner, i, False, input_index[key], 0))

    outputs = [r for op in members for r in op.results
               if any(op_key(use.owner) not in nested for use in r.uses)]
    if not outputs:
        raise PassError("a fusion group must produce at least one used result", first.location)

    # Outside ops between first and last that (transitively) use the set must move after the
    # group; if one of them also feeds the set, the set is not convex. They are found by
    # following uses forward from the set (not by scanning the block), so the cost is that of
    # the ops touched.
    movers = _users_before(members, member_set, last, block)
    tainted = {op_key(op) for op in movers}
    for op in members:
        for inner in walk_ops(op):
            for v in inner.operands:
                if (p := defining_op(v)) is not None and op_key(p) in tainted:
                    raise PassError(
                        f"cannot fuse: '{p.name}' outside the group both uses and feeds it",
                        p.location)

    with ir.InsertionPoint(last), last.location:
        group = fusion_ops().GroupOp([v.type for v in outputs], inputs, kind)
        for name, attr in (attributes or {}).items():
            group.operation.attributes[name] = attr
        body = group.body.blocks.append(*[v.type for v in inputs])
    group_op = group.operation

    # Outside uses of the outputs now read the group's results.
    for value, result in zip(outputs, group_op.results):
        for use in list(value.uses):
            if op_key(use.owner) not in nested:
                use.owner.operation.operands[use.operand_number] = result

    with ir.InsertionPoint(body), last.location:
        clone_map = []
        for c in clones:
            clone_map.append((c, c.clone()))
        yield_op = fusion_ops().YieldOp(outputs)
    for op in members:
        op.move_before(yield_op.operation)
    # Inside uses of inputs and cloned ops now read block arguments and clones.
    for inner, i, is_clone, index, result_number in redirects:
        if is_clone:
            inner.operands[i] = clone_map[index][1].results[result_number]
        else:
            inner.operands[i] = body.arguments[index]
    _move_in_order(movers, group_op)
    return group_op


def loop_ranges(op: ir.Operation) -> list[int] | None:
    """Static loop ranges of a linalg op with indexing maps, from its operand shapes."""
    if "indexing_maps" not in op.attributes:
        return None
    maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
    ranges = [0] * maps[0].n_dims
    for operand, amap in zip(op.operands, maps):
        if not isinstance(operand.type, ir.RankedTensorType):
            continue
        for expr, extent in zip(amap.results, ir.RankedTensorType(operand.type).shape):
            if isinstance(expr, ir.AffineDimExpr):
                ranges[ir.AffineDimExpr(expr).position] = extent
    return ranges


def iterator_kinds(op: ir.Operation) -> list[str]:
    """A linalg op's `iterator_types` as strings ("parallel", "reduction")."""
    return [str(a).split("<")[-1].rstrip(">") for a in op.attributes["iterator_types"]]


CASTS = ("arith.extf", "arith.truncf")


def cast_input(op: ir.Operation | None) -> ir.Value | None:
    """The input of a one-input elementwise `linalg.generic` whose payload only casts it
    (one extf or truncf; identity maps), or None."""
    if op is None or op.name != "linalg.generic" or len(op.operands) != 2 or \
            len(op.results) != 1 or any(k != "parallel" for k in iterator_kinds(op)):
        return None
    body = [o.operation for o in op.regions[0].blocks[0].operations][:-1]
    if len(body) != 1 or body[0].name not in CASTS:
        return None
    if not all(is_identity(ir.AffineMapAttr(a).value)
               for a in ir.ArrayAttr(op.attributes["indexing_maps"])):
        return None
    return op.operands[0]


def is_identity(amap: ir.AffineMap) -> bool:
    """(d0, ..., dn) -> (d0, ..., dn)."""
    return amap.n_dims == len(amap.results) and all(
        isinstance(e, ir.AffineDimExpr) and ir.AffineDimExpr(e).position == i
        for i, e in enumerate(amap.results))


def projection(amap: ir.AffineMap) -> list[int | None] | None:
    """An indexing map's results as the loops they read (None: the constant 0), or None
    where a result is anything else (a sum of dims, another constant)."""
    out: list[int | None] = []
    for expr in amap.results:
        if isinstance(expr, ir.AffineDimExpr):
            out.append(expr.position)
        elif isinstance(expr, ir.AffineConstantExpr) and expr.value == 0:
            out.append(None)
        else:
            return None
    return out


def split_columns(a_dims: list[int], b_dims: list[int], c_dims: list[int]) -> list[int] | None:
    """The loops of a matmul-like op's columns (C += A * B; each operand's map as the loops it
    reads) when they are split over several loops, outer first: the loops C and B read and A
    does not, standing side by side in the same order at the end of both B's and C's maps.
    torch-mlir's head split after a projection gives C[b, t, h, d] += A[b, t, k] * B[k, h, d]:
    columns (h, d). None when the columns are one loop (or not such a run)."""
    ns = [d for d in c_dims if d in b_dims and d not in a_dims]
    if len(ns) < 2 or c_dims[-len(ns):] != ns or b_dims[-len(ns):] != ns:
        return None
    return ns


def value_key(value: ir.Value) -> tuple[int, int]:
    """A stable identity for a value: its defining op's key and result number, or for a block
    argument the (negated) key of the op that owns the block and the argument number."""
    producer = defining_op(value)
    if producer is not None:
        return (op_key(producer), ir.OpResult(value).result_number)
    return (-op_key(value.owner.owner), ir.BlockArgument(value).arg_number)


def _block_compare(a: ir.Operation, b: ir.Operation) -> int:
    if op_key(a) == op_key(b):
        return 0
    return -1 if a.is_before_in_block(b) else 1


def _top_level(op: ir.Operation, block: ir.Block) -> ir.Operation | None:
    """The ancestor of `op` (or `op`) that sits directly in `block`."""
    while op is not None:
        if op.block == block:
            return op
        parent = op.parent
        op = parent.operation if parent is not None else None
    return None


def _users_before(members: list[ir.Operation], member_set: set[int], last: ir.Operation,
                  block: ir.Block) -> list[ir.Operation]:
    """Ops of `block` outside the set and before `last` that (transitively) use the set,
    in block order."""
    found: dict[int, ir.Operation] = {}
    frontier = list(members)
    while frontier:
        op = frontier.pop()
        for result in op.results:
            for use in result.uses:
                owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
                top = _top_level(owner, block)
                if top is None:
                    continue
                key = op_key(top)
                if key in member_set or key in found or not top.is_before_in_block(last):
                    continue
                found[key] = top
                frontier.append(top)
    return sorted(found.values(), key=functools.cmp_to_key(_block_compare))


def _move_in_order(movers: list[ir.Operation], anchor: ir.Operation) -> None:
    previous = anchor
    for mover in movers:
        mover.move_after(previous)
        previous = mover


def group_alone(group: ir.Operation) -> ir.Module:
    """A module whose `main` runs a copy of `group` on its arguments (to run passes on one
    group in isolation)."""
    from mlir.dialects import func

    with group.location:
        mini = ir.Module.create()
        with ir.InsertionPoint(mini.body):
            fn = func.FuncOp("main", ([v.type for v in group.operands],
                                      [r.type for r in group.results]))
            entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            copy = group.clone()
            for i, arg in enumerate(entry.arguments):
                copy.operands[i] = arg
            func.ReturnOp(list(copy.results))
        # The functions the group calls (the runtime's `fusec_index_error`) are declared
        # after `main`, which stays the first function.
        with ir.InsertionPoint(mini.body):
            for declaration in _callee_declarations(group):
                declaration.clone()
    return mini


def _callee_declarations(group: ir.Operation) -> list[ir.Operation]:
    """The body-less `func.func`s of `group`'s module that ops inside `group` call."""
    callees = {ir.FlatSymbolRefAttr(op.attributes["callee"]).value
               for op in walk_ops(group, lambda o: o.name == "func.call")}
    if not callees:
        return []
    module = group.parent
    while module is not None and module.name != "builtin.module":
        module = module.parent
    if module is None:
        return []
    return [op.operation for op in module.regions[0].blocks[0].operations
            if op.operation.name == "func.func" and not op.operation.regions[0].blocks
            and ir.StringAttr(op.operation.attributes["sym_name"]).value in callees]


def splice_alone(group: ir.Operation, mini: ir.Module) -> ir.Operation | None:
    """Put the group that `mini` (made by `group_alone`, then transformed) holds in the place
    of `group`; returns it, or None (nothing changed) when `mini`'s function is no longer
    exactly one group whose results it returns."""
    main = next(iter(mini.body.operations))
    ops = [op.operation for op in main.regions[0].blocks[0].operations]
    if len(ops) != 2 or ops[0].name != "fusion.group" or \
            list(ops[1].operands) != list(ops[0].results):
        return None
    new = ops[0]
    new.move_before(group)
    for i, operand in enumerate(group.operands):
        new.operands[i] = operand
    for old, result in zip(group.results, new.results):
        old.replace_all_uses_with(result)
    group.erase()
    return new


def memory_element_type(group: ir.Operation) -> ir.Type | None:
    """The narrowest element type among the tensors `group` reads and writes (its global
    accesses are 16 bytes of it); None when it has no shaped operand or result."""
    values = list(group.regions[0].blocks[0].arguments) + list(group.results)
    types = [ir.ShapedType(v.type).element_type for v in values
             if isinstance(v.type, ir.ShapedType)]
    return min(types, key=lambda t: getattr(t, "width", 32), default=None)


def family_tiled(group: ir.Operation) -> bool:
    """Whether `group` is a kernel its family's own pass built and tiled (a `fusion.path`
    and a `fusion.grid`: the CPU attention kernel, --fusion-cpu-attention), which
    `--fusion-tile` leaves alone and placement and capacity describe as any tiled group."""
    from fusec.passes import attributes

    return attributes.PATH in group.attributes and attributes.GRID in group.attributes


def is_attention(group: ir.Operation) -> bool:
    """Whether `group` is an attention group (`--fusion-attention`: `fusion.path =
    "attention"`), which each target builds with its own attention kernel."""
    from fusec.passes import attributes

    return attributes.PATH in group.attributes and \
        ir.StringAttr(group.attributes[attributes.PATH]).value == "attention"


def _has_index_op(op: ir.Operation) -> bool:
    return bool(walk_ops(op, lambda inner: inner.name == "linalg.index"))


# Named linalg ops that are elementwise over operands of one shape (implicit identity maps).
NAMED_ELEMENTWISE = frozenset(
    f"linalg.{name}" for name in (
        "add", "sub", "mul", "div", "div_unsigned", "max", "min", "powf", "exp", "log", "abs",
        "ceil", "floor", "negf", "reciprocal", "round", "rsqrt", "sqrt", "square", "tanh",
        "erf", "select", "copy"))


def is_elementwise(op: ir.Operation) -> bool:
    """A one-result linalg.generic, all loops parallel, identity maps on tensor operands,
    or a named elementwise op whose tensor operands all have the result's shape."""
    if op.name in NAMED_ELEMENTWISE and len(op.results) == 1:
        shape = ir.RankedTensorType(op.results[0].type).shape
        return all(ir.RankedTensorType(v.type).shape == shape for v in op.operands
                   if isinstance(v.type, ir.RankedTensorType))
    if op.name != "linalg.generic" or len(op.results) != 1:
        return False
    kinds = [str(a).split("<")[-1].rstrip(">") for a in op.attributes["iterator_types"]]
    if any(k != "parallel" for k in kinds):
        return False
    rank = len(kinds)
    identity = ir.AffineMap.get_identity(rank)
    for operand, attr in zip(op.operands, op.attributes["indexing_maps"]):
        amap = ir.AffineMapAttr(attr).value
        if isinstance(operand.type, ir.RankedTensorType):
            if amap != identity:
                return False
        elif len(amap.results):
            return False
    return not _has_index_op(op)


def retype_elementwise(op: ir.Operation, new_operands: list[ir.Value],
                       result_type: ir.Type) -> None:
    """Point the elementwise `op` at operands of `result_type`'s shape; update its maps."""
    rank = ir.RankedTensorType(result_type).rank
    identity = ir.AffineMap.get_identity(rank)
    scalar = ir.AffineMap.get(rank, 0, [])
    for i, value in enumerate(new_operands):
        op.operands[i] = value
    op.results[0].set_type(result_type)
    if op.name != "linalg.generic":
        return  # named ops: their maps are implicit
    maps = []
    for value in new_operands:
        tensor_operand = isinstance(value.type, ir.RankedTensorType)
        maps.append(ir.AffineMapAttr.get(identity if tensor_operand else scalar))
    op.attributes["indexing_maps"] = ir.ArrayAttr.get(maps)
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    op.attributes["iterator_types"] = ir.ArrayAttr.get([parallel] * rank)
