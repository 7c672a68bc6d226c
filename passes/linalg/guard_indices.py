"""--fusion-guard-indices: bounds-check every index a kernel reads from data.

An embedding, a gather, an index_select, a scatter or an index_put reads or writes at an index
that comes from a tensor's values. torch raises `IndexError` for an index out of range; a
kernel that uses it unchecked reads or writes outside the tensor (garbage, or a crash of the
calling process). This pass guards each such access:

- `tensor.extract %t[..., %i, ...]` where `%i` is computed from data (a payload's block
  argument, or a value read by another `tensor.extract`): the index is checked against its
  dimension (`0 <= i < dim`), an index out of range is replaced by 0 (never an access outside
  the tensor), and, with `report=true`, the failure is reported through
  `func.call @fusec_index_error(check, index)` under an `scf.if`;
- `tensor.insert %v into %t[..., %i, ...]` likewise: out of range, the insert is skipped (the
  tensor passes through unchanged) and reported.

Each check has a number, its position in the module's `fusion.index_checks` (a message and
the op's location); the runtime (runtime/shim.c) keeps the first failure of a run and
`fusec_run` returns an error naming the op, its location and the index. torch-mlir's own
`cf.assert`s on these indices are then redundant: `--fusion-drop-asserts` removes them.

Indices computed from loop positions only (`linalg.index`, constants, loop induction
variables) are in range by construction and are not checked. An access already guarded
(`fusion.guarded`) is left alone, so the pass can run again after a later pass adds loops.

Options: `report` (true: report failures; false: only make the access safe); `defer`
(true: a read's report is not inserted here; the read is tagged `fusion.index_check = N`
and `--fusion-report-indices` inserts the report after tiling: a call in a payload has
effects, so a payload holding one is neither erased when dead nor merged with its copies,
and tile-and-fuse would leave every fused producer computed whole beside its tile loop).
A write (`tensor.insert`, in the loop kernels of a scatter) is always reported here.

Before:
    %i = arith.index_cast %in : i64 to index
    %v = tensor.extract %table[%i, %j] : tensor<1000x8xf32>
After:
    %i = arith.index_cast %in : i64 to index
    %ok = ... 0 <= %i < 1000 ...
    %safe = arith.select %ok, %i, %c0 : index
    scf.if %bad { func.call @fusec_index_error(%c3_i64, %i_i64) : (i64, i64) -> () }
    %v = tensor.extract %table[%safe, %j] {fusion.guarded} : tensor<1000x8xf32>
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes import attributes
from fusec.passes.grouping import declare_function, op_key, walk_ops
from fusec.passes.registry import Pass, register
from mlir import ir
from mlir.dialects import arith, func, scf, tensor

ERROR_FUNCTION = "fusec_index_error"
CHECKS_ATTR = attributes.INDEX_CHECKS
GUARDED_ATTR = attributes.GUARDED
CHECK_ATTR = attributes.INDEX_CHECK  # a read whose report --fusion-report-indices inserts
# Ops whose results are data: an index computed from them may be anything.
_DATA_READS = frozenset({"tensor.extract", "memref.load"})
# Ops whose results are in range by construction (loop positions).
_POSITIONS = frozenset({"linalg.index", "arith.constant", "affine.apply"})


def data_derived(value: ir.Value, memo: dict[int, bool] | None = None) -> bool:
    """Whether `value` is computed from tensor data (not only from loop positions)."""
    memo = {} if memo is None else memo
    owner = value.owner
    if isinstance(owner, ir.Block):
        parent = owner.owner
        name = parent.name if parent is not None else ""
        # A linalg payload's arguments are tensor elements; an scf.for's iter_args may
        # carry data (its induction variable is the first argument and does not).
        if name.startswith("linalg."):
            return True
        if name == "scf.for":
            return ir.BlockArgument(value).arg_number > 0
        return False
    op = owner.operation if hasattr(owner, "operation") else owner
    key = op_key(op)
    if key in memo:
        return memo[key]
    if op.name in _DATA_READS:
        memo[key] = True
        return True
    if op.name in _POSITIONS:
        memo[key] = False
        return False
    memo[key] = False  # cycles cannot occur in SSA outside graph regions; be safe anyway
    result = any(data_derived(v, memo) for v in op.operands
                 if isinstance(v.type, (ir.IndexType, ir.IntegerType)))
    memo[key] = result
    return result


def module_checks(module: ir.Operation) -> list[ir.DictAttr]:
    """The module's checks so far (`fusion.index_checks`): a new one's number is its
    position."""
    return [ir.DictAttr(a) for a in module.attributes[CHECKS_ATTR]] \
        if CHECKS_ATTR in module.attributes else []


def add_check(checks: list[ir.DictAttr], message: str, op: ir.Operation) -> int:
    """Append the check of `op` (its message, its location) to `checks`; its number."""
    checks.append(ir.DictAttr.get({"message": ir.StringAttr.get(message),
                                   "loc": ir.StringAttr.get(str(op.location))}))
    return len(checks) - 1


def store_checks(module: ir.Operation, checks: list[ir.DictAttr]) -> None:
    """`checks` as the module's, and the error function the reports call declared."""
    _error_function(module)
    module.attributes[CHECKS_ATTR] = ir.ArrayAttr.get(checks)


def _error_function(module: ir.Operation) -> None:
    """Declare `func.func private @fusec_index_error(i64, i64)` once."""
    i64 = ir.IntegerType.get_signless(64)
    declare_function(module, ERROR_FUNCTION, ir.FunctionType.get([i64, i64], []))


def _in_range(value: ir.Value, tensor_value: ir.Value, dim: int, zero: ir.Value) -> ir.Value:
    """`0 <= value < size of dim` (an i1), at the current insertion point."""
    tensor_type = ir.RankedTensorType(tensor_value.type)
    index = ir.IndexType.get()
    if tensor_type.is_dynamic_dim(dim):
        size = tensor.DimOp(tensor_value, arith.ConstantOp(index, dim)).result
    else:
        size = arith.ConstantOp(index, tensor_type.shape[dim]).result
    return arith.AndIOp(arith.CmpIOp(arith.CmpIPredicate.sge, value, zero).result,
                        arith.CmpIOp(arith.CmpIPredicate.slt, value, size).result).result


def _report_unless(ok: ir.Value, check: int, value: ir.Value) -> None:
    """`scf.if !ok { fusec_index_error(check, value) }`, at the current insertion point."""
    i64 = ir.IntegerType.get_signless(64)
    bad = arith.XOrIOp(ok, arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result).result
    branch = scf.IfOp(bad)
    with ir.InsertionPoint(branch.then_block):
        func.CallOp([], ERROR_FUNCTION, [arith.ConstantOp(i64, check).result,
                                         _as_i64(value)])
        scf.YieldOp([])


def _as_i64(value: ir.Value) -> ir.Value:
    """An index or integer `value` as i64 (what the error function reports)."""
    i64 = ir.IntegerType.get_signless(64)
    if isinstance(value.type, ir.IndexType):
        return arith.IndexCastOp(i64, value).result
    width = ir.IntegerType(value.type).width
    if width == 64:
        return value
    return (arith.ExtSIOp(i64, value) if width > 1 else arith.ExtUIOp(i64, value)).result


def _describe(op: ir.Operation, tensor_type: ir.RankedTensorType, dim: int) -> str:
    """The check's message; the runtime puts the bad index in place of `{index}`."""
    access = "read" if op.name == "tensor.extract" else "write"
    size = "?" if tensor_type.is_dynamic_dim(dim) else tensor_type.shape[dim]
    return (f"index {{index}} is out of range for dimension {dim} of size {size} (an indexed "
            f"{access} of {tensor_type}: an embedding, gather, index_select, scatter or "
            "index_put)")


def _tag_check(op: ir.Operation, operand: int, check: int) -> None:
    """Record on `op` that its index operand `operand` (an `arith.select` of the in-range
    condition, the index and 0) is check number `check`, reported later."""
    tags = list(ir.DenseI64ArrayAttr(op.attributes[CHECK_ATTR])) \
        if CHECK_ATTR in op.attributes else []
    op.attributes[CHECK_ATTR] = ir.DenseI64ArrayAttr.get(tags + [operand, check])


def insert_deferred_reports(root: ir.Operation) -> int:
    """The reports `defer` left out: before each tagged read, `scf.if !ok {
    fusec_index_error(check, index) }` from the `arith.select` that guards its index; the
    tag is dropped. Returns how many checks were reported."""
    tagged = walk_ops(root, lambda o: CHECK_ATTR in o.attributes)
    reported = 0
    for op in tagged:
        tags = list(ir.DenseI64ArrayAttr(op.attributes[CHECK_ATTR]))
        for operand, check in zip(tags[0::2], tags[1::2]):
            select = op.operands[operand].owner
            if not isinstance(select, ir.OpView) or select.operation.name != "arith.select":
                # Folded since: the condition was known (the index provably in range, as a
                # gather's reversed arange), or the index a constant. Nothing to report.
                continue
            with ir.InsertionPoint(op), op.location:
                _report_unless(select.operands[0], check, select.operands[1])
            reported += 1
        del op.attributes[CHECK_ATTR]
    if reported:
        module = root
        while module.name != "builtin.module":
            module = module.parent
        _error_function(module)
    return reported


@register
@dataclass
class GuardIndicesPass(Pass):
    """Bounds-check indices computed from data (gather, embedding, scatter); report failures."""

    ARGUMENT = "fusion-guard-indices"
    report: bool = True
    defer: bool = False

    def run(self, module: ir.Operation) -> None:
        accesses = walk_ops(module, lambda op: op.name in ("tensor.extract", "tensor.insert")
                            and GUARDED_ATTR not in op.attributes)
        checks = module_checks(module)
        memo: dict[int, bool] = {}
        guarded = False
        for op in accesses:
            first_index = 1 if op.name == "tensor.extract" else 2
            indices = list(op.operands)[first_index:]
            dims = [d for d, v in enumerate(indices) if data_derived(v, memo)]
            if not dims:
                continue
            tensor_value = op.operands[first_index - 1]
            tensor_type = ir.RankedTensorType(tensor_value.type)
            oks = []
            with ir.InsertionPoint(op), op.location:
                zero = arith.ConstantOp(ir.IndexType.get(), 0).result
                for d in dims:
                    ok = _in_range(indices[d], tensor_value, d, zero)
                    oks.append(ok)
                    if self.report:
                        add_check(checks, _describe(op, tensor_type, d), op)
                    deferred = self.report and self.defer and op.name == "tensor.extract"
                    if self.report and not deferred:
                        _report_unless(ok, len(checks) - 1, indices[d])
                    if op.name == "tensor.extract":
                        op.operands[first_index + d] = arith.SelectOp(ok, indices[d], zero).result
                    if deferred:
                        _tag_check(op, first_index + d, len(checks) - 1)
            if op.name == "tensor.insert":
                self._guard_insert(op, oks)
            else:
                op.attributes[GUARDED_ATTR] = ir.UnitAttr.get()
            guarded = True
        if guarded and self.report:
            store_checks(module, checks)

    @staticmethod
    def _guard_insert(op: ir.Operation, oks: list[ir.Value]) -> None:
        """`tensor.insert` only where every checked index is in range; else the destination
        passes through unchanged."""
        with ir.InsertionPoint(op), op.location:
            ok = oks[0]
            for more in oks[1:]:
                ok = arith.AndIOp(ok, more).result
            dest = op.operands[1]
            branch = scf.IfOp(ok, [dest.type], has_else=True)
            with ir.InsertionPoint(branch.then_block):
                inner = op.clone()
                inner.attributes[GUARDED_ATTR] = ir.UnitAttr.get()
                scf.YieldOp([inner.results[0]])
            with ir.InsertionPoint(branch.else_block):
                scf.YieldOp([dest])
        op.results[0].replace_all_uses_with(branch.results[0])
        op.erase()

