"""--fusion-globals-to-state: a model's mutable globals become state carried across runs.

torch-mlir keeps the seed of its random-number ops (rand, randn, dropout in training mode,
bernoulli, ...) in an `ml_program.global`, loaded and stored by the model function on every
call. A kernel has no globals of its own, so this pass makes the global explicit: each
global the public function touches becomes one more argument (its value when the run
starts) and, if the function stores it, one more result (its value when the run ends). The
function records which ones in `fusion.state`, and the artifact keeps their bytes between
runs, starting from the global's initial value (compiler/artifact.py): the caller never sees
them. Loads after a store read the stored value, as the global would.

Before:
    ml_program.global private mutable @global_seed(dense<0> : tensor<i64>) : tensor<i64>
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %s = ml_program.global_load @global_seed : tensor<i64>
      ...
      ml_program.global_store @global_seed = %n : tensor<i64>
      return %r : tensor<4xf32>
    }
After:
    func.func @f(%x: tensor<4xf32>, %s: tensor<i64>) -> (tensor<4xf32>, tensor<i64>)
        attributes {fusion.state = [{name = "global_seed", input = 1 : i64, output = 1 : i64,
                                     init = dense<0> : tensor<i64>}]} {
      ...
      return %r, %n : tensor<4xf32>, tensor<i64>
    }

`output` is the position among the results, or -1 for a global the function only reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir
from fusec.passes import attributes
from fusec.passes.grouping import model_functions, op_key, walk_ops
from fusec.passes.registry import Pass, PassError, register
from mlir.dialects import func, scf

STATE_ATTRIBUTE = attributes.STATE
GLOBAL_OPS = ("ml_program.global_load", "ml_program.global_store")


def _symbol(op: ir.Operation) -> str:
    return ir.FlatSymbolRefAttr(op.attributes["global"]).value


def _globals(module: ir.Operation) -> dict[str, ir.Operation]:
    return {ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
            for op in module.regions[0].blocks[0].operations
            if op.operation.name == "ml_program.global"}


def _check_nesting(function: ir.Operation) -> list[ir.Operation]:
    """The function's loads and stores, in order; each must sit at the top level or in
    `scf.for` bodies (a loop can carry the value; other regions have no single order)."""
    accesses = walk_ops(function, lambda op: op.name in GLOBAL_OPS)
    for op in accesses:
        parent = op.parent
        while parent is not None and op_key(parent) != op_key(function):
            if parent.name != "scf.for":
                raise PassError(f"'{op.name}' inside '{parent.name}': fusec handles model "
                                "globals only at the top level of the model function and in "
                                "scf.for loops", op.location)
            parent = parent.parent
    # walk_ops is post-order: nested accesses come in program order, loops after their body.
    return accesses


def _thread(block: ir.Block, current: dict[str, ir.Value], stored: list[str]) -> None:
    """Replace the accesses in `block` by the values they read and write, in order."""
    for op in [o.operation for o in block.operations]:
        if op.name == "ml_program.global_load":
            op.results[0].replace_all_uses_with(current[_symbol(op)])
            op.erase()
        elif op.name == "ml_program.global_store":
            current[_symbol(op)] = op.operands[0]
            if _symbol(op) not in stored:
                stored.append(_symbol(op))
            op.erase()
        elif op.name == "scf.for" and walk_ops(op, lambda o: o.name in GLOBAL_OPS):
            _thread_loop(op, current, stored)


def _thread_loop(loop: ir.Operation, current: dict[str, ir.Value], stored: list[str]) -> None:
    """Rebuild `loop` carrying each global it accesses as one more iter_arg."""
    names = list(dict.fromkeys(_symbol(o) for o in walk_ops(loop, lambda o: o.name in GLOBAL_OPS)))
    old = loop.opview
    old_inits = list(old.initArgs)
    with ir.InsertionPoint(loop), loop.location:
        new = scf.ForOp(old.lowerBound, old.upperBound, old.step,
                        old_inits + [current[n] for n in names])
    old_body, body = old.body, new.body
    for a, b in zip(old_body.arguments, body.arguments):
        a.replace_all_uses_with(b)
    for op in list(old_body.operations):
        body.append(op.operation)
    inner = dict(current)
    for k, name in enumerate(names):
        inner[name] = body.arguments[1 + len(old_inits) + k]
    _thread(body, inner, stored)
    terminator = list(body.operations)[-1].operation
    with ir.InsertionPoint(terminator), terminator.location:
        scf.YieldOp(list(terminator.operands) + [inner[n] for n in names])
    terminator.erase()
    for a, b in zip(loop.results, new.results):
        a.replace_all_uses_with(b)
    for k, name in enumerate(names):
        current[name] = new.results[len(old_inits) + k]
    loop.erase()


def _rewrite(function: ir.Operation, globals_: dict[str, ir.Operation]) -> None:
    block = function.regions[0].blocks[0]
    accesses = _check_nesting(function)
    if not accesses:
        return
    arguments: dict[str, ir.Value] = {}
    for op in accesses:
        name = _symbol(op)
        if name not in globals_:
            raise PassError(f"'{op.name}' of an unknown global @{name}", op.location)
        if name not in arguments:
            declared = ir.TypeAttr(globals_[name].attributes["type"]).value
            arguments[name] = block.add_argument(declared, globals_[name].location)
    current = dict(arguments)
    stored: list[str] = []
    _thread(block, current, stored)
    _append_results(function, block, [current[n] for n in stored])
    n_results = len(ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value)
                    .results) - len(stored)
    entries = []
    for name, argument in arguments.items():
        output = n_results + stored.index(name) if name in stored else -1
        entries.append(state_entry(name, argument.arg_number, output,
                                   globals_[name].attributes["value"]))
    add_states(function, entries)


def state_entry(name: str, input: int, output: int, init: ir.Attribute) -> ir.DictAttr:
    """One `fusion.state` entry: the state's argument position, its result position (-1:
    only read) and its initial value."""
    i64 = ir.IntegerType.get_signless(64, init.context)
    return ir.DictAttr.get({
        "name": ir.StringAttr.get(name, init.context),
        "input": ir.IntegerAttr.get(i64, input),
        "output": ir.IntegerAttr.get(i64, output),
        "init": init,
    }, context=init.context)


def add_states(function: ir.Operation, entries: list[ir.DictAttr]) -> None:
    """Append `entries` to the function's `fusion.state` (after any it has: the buffers
    the frontend found updated in place come before the globals of this pass)."""
    if STATE_ATTRIBUTE in function.attributes:
        entries = list(ir.ArrayAttr(function.attributes[STATE_ATTRIBUTE])) + entries
    function.attributes[STATE_ATTRIBUTE] = ir.ArrayAttr.get(entries, context=function.context)


def _append_results(function: ir.Operation, block: ir.Block, values: list[ir.Value]) -> None:
    """Return `values` after the function's results; the signature follows the block."""
    terminator = list(block.operations)[-1].operation
    if values:
        with ir.InsertionPoint(terminator), terminator.location:
            func.ReturnOp(list(terminator.operands) + values)
        terminator.erase()
    results = [v.type for v in list(block.operations)[-1].operation.operands]
    inputs = [a.type for a in block.arguments]
    function.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))
    for name, count in (("arg_attrs", len(inputs)), ("res_attrs", len(results))):
        if name in function.attributes:
            old = list(ir.ArrayAttr(function.attributes[name]))
            padded = old + [ir.DictAttr.get({})] * (count - len(old))
            function.attributes[name] = ir.ArrayAttr.get(padded)


@register
@dataclass
class GlobalsToStatePass(Pass):
    """Turn the model's ml_program globals into state arguments/results (fusion.state)."""

    ARGUMENT = "fusion-globals-to-state"

    def run(self, module: ir.Operation) -> None:
        globals_ = _globals(module)
        if not globals_:
            return
        for function in model_functions(module):
            _rewrite(function, globals_)
        # Every access is gone: the declarations would only be bufferized into dead globals.
        for op in globals_.values():
            op.erase()
