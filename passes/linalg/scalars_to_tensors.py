"""--fusion-scalars-to-tensors: the model function's scalar code becomes 0-d tensor code.

torch-mlir leaves scalar code in the model function itself: `tensor.extract` of an element
(`t.item()`, `int(t)`), arithmetic on the extracted numbers (`a + b` of Python numbers, the
update of a random seed), scalars captured by linalg bodies, and scalars returned as results.
Kernels read and write buffers only, so the host has nowhere to run such code. This pass
moves it into kernels: every scalar the host computes becomes a 0-d tensor computed by a 0-d
`linalg.generic`, a linalg body that captured it reads it as one more (broadcast) input, and
a scalar result becomes a 0-d tensor result listed in `fusion.scalar_results`, so that the
runtime returns it as a Python number. Scalars computed from constants only are cloned into
the bodies that use them instead (LLVM folds them there).

Before:
    func.func @f(%a: tensor<i64>, %b: tensor<i64>) -> i64 {
      %x = tensor.extract %a[] : tensor<i64>
      %y = tensor.extract %b[] : tensor<i64>
      %s = arith.addi %x, %y : i64
      return %s : i64
    }
After:
    func.func @f(%a: tensor<i64>, %b: tensor<i64>) -> tensor<i64>
        attributes {fusion.scalar_results = array<i64: 0>} {
      %e = tensor.empty() : tensor<i64>
      %s = linalg.generic {indexing_maps = [() -> (), () -> (), () -> ()], iterator_types = []}
          ins(%a, %b : tensor<i64>, tensor<i64>) outs(%e : tensor<i64>) {
      ^bb0(%x: i64, %y: i64, %out: i64):
        %0 = arith.addi %x, %y : i64
        linalg.yield %0 : i64
      } -> tensor<i64>
      return %s : tensor<i64>
    }

A padding value computed from constants (`tensor.pad`'s body) is computed in the body, as
in a loop nest's. What it cannot move (a scalar that sizes a tensor, an extract at a
computed index, a scalar consumed by an op other than those above) stays a located error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import mlir.ir as ir
from fusec.passes import attributes
from fusec.passes.fusion.form_loop_kernels import LOOP_OPS
from fusec.passes.grouping import defining_op, model_functions, op_key, walk_ops
from fusec.passes.registry import Pass, PassError, register
from mlir.dialects import arith, linalg, tensor

SCALAR_RESULTS_ATTRIBUTE = attributes.SCALAR_RESULTS
SCALAR_DIALECTS = ("arith", "math")


def is_scalar(t: ir.Type) -> bool:
    return isinstance(t, (ir.IntegerType, ir.FloatType, ir.IndexType))


def _is_host_scalar_op(op: ir.Operation) -> bool:
    """A top-level op of the model function that computes scalars (not a constant)."""
    if op.name == "arith.constant" or len(op.results) == 0 or len(op.regions):
        return False
    if not all(is_scalar(r.type) for r in op.results):
        return False
    return op.name == "tensor.extract" or op.name.split(".", 1)[0] in SCALAR_DIALECTS


class _Rewriter:
    """Rewrites one function body; 0-d tensors are made on demand and memoised."""

    def __init__(self, function: ir.Operation) -> None:
        self.function = function
        self.block = function.regions[0].blocks[0]
        self.host_ops = [op.operation for op in self.block.operations
                         if _is_host_scalar_op(op.operation)]
        self.host_keys = {op_key(op) for op in self.host_ops}
        self.tensors: dict[tuple[int, int], ir.Value] = {}
        self.constant_only: dict[int, bool] = {}

    # -- classification ------------------------------------------------------------------

    def is_host_scalar(self, value: ir.Value) -> bool:
        owner = defining_op(value)
        return owner is not None and op_key(owner) in self.host_keys

    def is_constant_only(self, op: ir.Operation) -> bool:
        """Computed from arith.constant values only (no tensor read)."""
        key = op_key(op)
        if key not in self.constant_only:
            result = op.name != "tensor.extract"
            for operand in op.operands:
                owner = defining_op(operand)
                if owner is None or not (owner.name == "arith.constant" or (
                        op_key(owner) in self.host_keys and self.is_constant_only(owner))):
                    result = False
            self.constant_only[key] = result
        return self.constant_only[key]

    # -- 0-d tensors -----------------------------------------------------------------------

    def tensor_of(self, value: ir.Value) -> ir.Value:
        """The 0-d tensor holding scalar `value` (a constant or a host scalar)."""
        owner = defining_op(value)
        if owner is None:
            raise PassError("a scalar argument has no place in a fusec model",
                            self.function.location)
        if owner.name != "arith.constant" and op_key(owner) not in self.host_keys:
            raise PassError(f"a scalar result of '{owner.name}' in the model function: fusec "
                            "moves only arithmetic on constants and extracted elements into "
                            "kernels", owner.location)
        key = (op_key(owner), value.result_number)
        if key in self.tensors:
            return self.tensors[key]
        with ir.InsertionPoint.after(owner), owner.location:
            t0 = ir.RankedTensorType.get([], value.type)
            if owner.name == "arith.constant":
                made = arith.ConstantOp(t0, ir.DenseElementsAttr.get_splat(
                    t0, owner.attributes["value"])).result
            elif owner.name == "tensor.extract":
                made = self.extract(owner, t0)
            else:
                made = self.elementwise(owner, value, t0)
        self.tensors[key] = made
        return made

    def extract(self, op: ir.Operation, t0: ir.Type) -> ir.Value:
        source = op.operands[0]
        indices = []
        for index in list(op.operands)[1:]:
            owner = defining_op(index)
            if owner is None or owner.name != "arith.constant":
                raise PassError("'tensor.extract' at a computed index in the model function: "
                                "fusec moves only extracts at constant indices into kernels",
                                op.location)
            indices.append(ir.IntegerAttr(owner.attributes["value"]).value)
        if not indices:
            return source
        maps = [ir.AffineMap.get(0, 0, [ir.AffineConstantExpr.get(i) for i in indices]),
                ir.AffineMap.get(0, 0, [])]
        return self.generic([source], maps, t0, lambda args: args[0])

    def elementwise(self, op: ir.Operation, value: ir.Value, t0: ir.Type) -> ir.Value:
        """`op` computed on 0-d tensors: its non-constant operands become inputs."""
        operands = list(op.operands)
        inputs = [i for i, v in enumerate(operands)
                  if not (defining_op(v) is not None and defining_op(v).name == "arith.constant")]
        sources = [self.tensor_of(operands[i]) for i in inputs]
        maps = [ir.AffineMap.get(0, 0, [])] * (len(sources) + 1)

        def body(args: list[ir.Value]) -> ir.Value:
            clone = op.clone()
            for arg, i in zip(args, inputs):
                clone.operands[i] = arg
            return clone.results[value.result_number]

        return self.generic(sources, maps, t0, body)

    def generic(self, sources: list[ir.Value], maps: list[ir.AffineMap], t0: ir.Type,
                body: Callable[[list[ir.Value]], ir.Value]) -> ir.Value:
        """A 0-d linalg.generic reading `sources` through `maps`; `body` builds its yield."""
        empty = tensor.EmptyOp([], ir.RankedTensorType(t0).element_type)
        op = linalg.GenericOp([t0], sources, [empty.result],
                              ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                              ir.ArrayAttr.get([]))
        types = [ir.RankedTensorType(s.type).element_type for s in sources]
        block = op.regions[0].blocks.append(*types, ir.RankedTensorType(t0).element_type)
        with ir.InsertionPoint(block):
            linalg.YieldOp([body(list(block.arguments)[:-1])])
        return op.results[0]

    # -- uses ----------------------------------------------------------------------------

    def run(self) -> None:
        if not self.host_ops and not self.scalar_results():
            return
        for op in [o.operation for o in self.block.operations]:
            if op.name == "linalg.fill" and self.is_host_scalar(op.operands[0]):
                op = self.fill_to_generic(op)
            if op.name == "linalg.generic":
                self.capture(op)
            elif op.name in LOOP_OPS:
                self.capture_in_loop(op)
            elif op.name == "tensor.pad" and self.pads_with_a_constant(op):
                # A padding value computed from constants (a bf16 pad of 1.1: the f64 -> bf16
                # truncf, inexact, is not folded upstream) is computed in the pad's body.
                self.capture_in_loop(op)
        self.rewrite_return()
        for op in list(self.block.operations):
            op = op.operation
            if op.name == "tensor.insert" and self.is_host_scalar(op.operands[0]):
                self.insert(op)
        for op in reversed(self.host_ops):
            for result in op.results:
                for use in result.uses:
                    user = use.owner
                    if op_key(user) not in self.host_keys:
                        raise PassError(
                            f"a scalar computed in the model function is used by "
                            f"'{user.name}'; fusec moves scalars into kernels only for linalg "
                            "bodies, linalg.fill, 0-d tensor.insert and results", user.location)
            op.erase()

    def scalar_results(self) -> list[int]:
        terminator = list(self.block.operations)[-1].operation
        return [i for i, v in enumerate(terminator.operands) if is_scalar(v.type)]

    def fill_to_generic(self, fill: ir.Operation) -> ir.Operation:
        """A fill of a host scalar: a generic that yields the (captured) scalar."""
        init = fill.operands[1]
        rank = ir.RankedTensorType(init.type).rank
        identity = ir.AffineMap.get_identity(rank)
        parallel = [ir.Attribute.parse("#linalg.iterator_type<parallel>")] * rank
        with ir.InsertionPoint(fill), fill.location:
            op = linalg.GenericOp([init.type], [], [init],
                                  ir.ArrayAttr.get([ir.AffineMapAttr.get(identity)]),
                                  ir.ArrayAttr.get(parallel))
            block = op.regions[0].blocks.append(ir.RankedTensorType(init.type).element_type)
            with ir.InsertionPoint(block):
                linalg.YieldOp([fill.operands[0]])
        fill.results[0].replace_all_uses_with(op.results[0])
        fill.erase()
        return op.operation

    def capture(self, generic: ir.Operation) -> None:
        """Host scalars used in `generic`'s body: cloned in (constant-only) or new inputs."""
        captured: list[ir.Value] = []
        ops = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            ops.append(op.operation)
            return ir.WalkResult.ADVANCE

        generic.walk(visit)
        ops = [op for op in ops if op_key(op) != op_key(generic)]
        for op in ops:
            for operand in op.operands:
                if self.is_host_scalar(operand) and not any(operand == c for c in captured):
                    captured.append(operand)
        if not captured:
            return
        body = generic.regions[0].blocks[0]
        cloned = [v for v in captured if self.is_constant_only(defining_op(v))]
        for value in cloned:
            self.clone_into(value, body, ops)
        inputs = [v for v in captured if not self.is_constant_only(defining_op(v))]
        if inputs:
            self.add_inputs(generic, inputs, ops)

    def pads_with_a_constant(self, pad: ir.Operation) -> bool:
        """The host scalars `pad`'s body reads are all computed from constants."""
        read = [v for op in walk_ops(pad) if op_key(op) != op_key(pad) for v in op.operands
                if self.is_host_scalar(v)]
        return bool(read) and all(self.is_constant_only(defining_op(v)) for v in read)

    def capture_in_loop(self, loop: ir.Operation) -> None:
        """Host scalars used in a loop nest (which --fusion-form-loop-kernels makes a kernel):
        each use reads the scalar's 0-d tensor, or a clone of its constant-only chain."""
        users = [op.operation for op in walk_ops(loop) if op_key(op) != op_key(loop)]
        for user in users:
            for i, operand in enumerate(list(user.operands)):
                if not self.is_host_scalar(operand):
                    continue
                owner = defining_op(operand)
                with ir.InsertionPoint(user), user.location:
                    if self.is_constant_only(owner):
                        self.clone_into(operand, None, [user], before=user)
                    else:
                        read = tensor.ExtractOp(self.tensor_of(operand), []).result
                        user.operands[i] = read

    def clone_into(self, value: ir.Value, body: ir.Block | None, ops: list[ir.Operation],
                   before: ir.Operation | None = None) -> None:
        """Clone `value`'s constant-only chain before `before` (default: `body`'s first op)
        and make `ops` use the clone."""
        mapping: list[tuple[ir.Value, ir.Value]] = []
        first = before if before is not None else list(body.operations)[0]

        def clone(v: ir.Value) -> ir.Value:
            for old, new in mapping:
                if old == v:
                    return new
            owner = defining_op(v)
            if owner.name == "arith.constant":
                return v  # form_group clones constants into groups anyway
            # Operands first: each clone goes right before the body's original first op.
            operands = [clone(operand) for operand in owner.operands]
            copy = owner.clone(ir.InsertionPoint(first))
            for i, operand in enumerate(operands):
                copy.operands[i] = operand
            mapping.append((v, copy.results[v.result_number]))
            return mapping[-1][1]

        new = clone(value)
        for op in ops:
            for i, operand in enumerate(op.operands):
                if operand == value:
                    op.operands[i] = new

    def add_inputs(self, old: ir.Operation, values: list[ir.Value],
                   ops: list[ir.Operation]) -> None:
        """Rebuild `old` with the 0-d tensors of `values` as extra broadcast inputs."""
        generic = old.opview
        n_in = len(generic.inputs)
        maps = list(ir.ArrayAttr(old.attributes["indexing_maps"]))
        rank = ir.AffineMapAttr(maps[0]).value.n_dims
        extra = [ir.AffineMapAttr.get(ir.AffineMap.get(rank, 0, []))] * len(values)
        tensors = [self.tensor_of(v) for v in values]
        with ir.InsertionPoint(old), old.location:
            new = linalg.GenericOp([r.type for r in old.results],
                                   list(generic.inputs) + tensors, list(generic.outputs),
                                   ir.ArrayAttr.get(maps[:n_in] + extra + maps[n_in:]),
                                   old.attributes["iterator_types"])
        old_block = old.regions[0].blocks[0]
        types = [a.type for a in old_block.arguments]
        types[n_in:n_in] = [v.type for v in values]
        with old.location:
            block = new.regions[0].blocks.append(*types)
        args = list(block.arguments)
        for i, a in enumerate(old_block.arguments):
            a.replace_all_uses_with(args[i if i < n_in else i + len(values)])
        for op in ops:
            for i, operand in enumerate(op.operands):
                for k, v in enumerate(values):
                    if operand == v:
                        op.operands[i] = args[n_in + k]
        for op in list(old_block.operations):
            block.append(op.operation)
        for a, b in zip(old.results, new.results):
            a.replace_all_uses_with(b)
        old.erase()

    def insert(self, op: ir.Operation) -> None:
        """`tensor.insert %s into %t[]` of a 0-d tensor is the 0-d tensor of %s."""
        if ir.RankedTensorType(op.operands[1].type).rank != 0:
            raise PassError("'tensor.insert' of a computed scalar into a tensor of rank > 0: "
                            "fusec cannot move it into a kernel", op.location)
        op.results[0].replace_all_uses_with(self.tensor_of(op.operands[0]))
        op.erase()

    def rewrite_return(self) -> None:
        indices = self.scalar_results()
        if not indices:
            return
        terminator = list(self.block.operations)[-1].operation
        for i in indices:
            terminator.operands[i] = self.tensor_of(terminator.operands[i])
        function_type = ir.FunctionType(ir.TypeAttr(self.function.attributes["function_type"])
                                        .value)
        results = [v.type for v in terminator.operands]
        self.function.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(list(function_type.inputs), results))
        self.function.attributes[SCALAR_RESULTS_ATTRIBUTE] = ir.DenseI64ArrayAttr.get(indices)


@register
@dataclass
class ScalarsToTensorsPass(Pass):
    """Move the model function's scalar code into 0-d kernels; mark scalar results."""

    ARGUMENT = "fusion-scalars-to-tensors"

    def run(self, module: ir.Operation) -> None:
        for function in model_functions(module):
            _Rewriter(function).run()
