"""--fusion-outline-kernels: each `fusion.group` becomes a kernel function, called by its host.

Every group in a function body moves into a new private `func.func @fusec_kernel_<n>` (n
counts groups in module order) whose arguments are the group's inputs and whose results are
its outputs; the group becomes a `func.call`. The host function (the model's entry) is left
with calls, the reshapes between them (views, see --fusion-hoist-reshapes) and its return.
The group's attributes move to the kernel: `fusion.kind` and whatever the tiling recorded
(`fusion.grid`, `fusion.tile_sizes`, `fusion.ops`).

Before:
    func.func @main(%a: tensor<8xf32>) -> tensor<8xf32> {
      %0 = fusion.group single (%arg1 = %a : tensor<8xf32>) -> tensor<8xf32> {
        ...
        fusion.yield %1 : tensor<8xf32>
      }
      return %0 : tensor<8xf32>
    }
After:
    func.func @main(%a: tensor<8xf32>) -> tensor<8xf32> {
      %0 = call @fusec_kernel_0(%a) : (tensor<8xf32>) -> tensor<8xf32>
      return %0 : tensor<8xf32>
    }
    func.func private @fusec_kernel_0(%arg1: tensor<8xf32>) -> tensor<8xf32>
        attributes {fusion.kind = "single"} {
      ...
      return %1 : tensor<8xf32>
    }
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes import attributes
from fusec.passes.fusion.form_singletons import function_bodies
from fusec.passes.registry import Pass, register
from mlir import ir
from mlir.dialects import func, tensor

KERNEL_PREFIX = "fusec_kernel_"


def outline_group(group: ir.Operation, name: str, insert_before: ir.Operation) -> ir.Operation:
    """Move `group`'s body into a new private function `name`; the group becomes a call."""
    body = group.regions[0].blocks[0]
    arg_types = [a.type for a in body.arguments]
    terminator = list(body.operations)[-1]
    # A value yielded twice (CSE merges identical ops after grouping) is returned once: the
    # kernel writes one buffer, and both group results read it. (Returning it twice also
    # crashes MLIR 22's buffer-results-to-out-params.) A yielded `tensor.empty` (CSE shared
    # one destination between this group's loop and other groups, which write it whole) is
    # no result at all: its users outside get an empty tensor of their own. Returned, it
    # would be the buffer the kernel's loop writes in place, returned twice, and the same
    # crash (ResNeXt-50 on the CPU).
    unique: list[ir.Value] = []
    position: list[int | ir.Value] = []
    for value in terminator.operands:
        empty = _static_empty(value)
        if empty is not None:
            with ir.InsertionPoint(group), group.location:
                position.append(tensor.EmptyOp(empty.shape, empty.element_type).result)
            continue
        if value not in unique:
            unique.append(value)
        position.append(unique.index(value))
    result_types = [v.type for v in unique]
    with ir.InsertionPoint(insert_before), group.location:
        kernel = func.FuncOp(name, (arg_types, result_types), visibility="private")
        entry = kernel.add_entry_block()
    kernel.operation.attributes[attributes.KIND] = group.attributes["kind"]
    mark_arguments_read_only(kernel.operation)
    for i in range(len(group.attributes)):
        attr = group.attributes[i]
        if attr.name.startswith("fusion."):
            kernel.operation.attributes[attr.name] = attr.attr
    with ir.InsertionPoint(entry), terminator.location:
        ret = func.ReturnOp(unique)
    for op in list(body.operations)[:-1]:
        op.operation.move_before(ret.operation)
    for old, new in zip(body.arguments, entry.arguments):
        old.replace_all_uses_with(new)
    with ir.InsertionPoint(group), group.location:
        call = func.CallOp(result_types, ir.FlatSymbolRefAttr.get(name), list(group.operands))
    for old, index in zip(group.results, position):
        old.replace_all_uses_with(call.results[index] if isinstance(index, int) else index)
    group.erase()
    return kernel.operation


def _static_empty(value: ir.Value) -> ir.RankedTensorType | None:
    """The type of `value` where it is a `tensor.empty` of static shape, else None."""
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "tensor.empty":
        return None
    kind = value.type
    if not isinstance(kind, ir.RankedTensorType) or not kind.has_static_shape:
        return None
    return kind


def mark_arguments_read_only(function: ir.Operation) -> None:
    """`bufferization.writable = false` on every argument.

    A kernel must not write its inputs: another kernel may read them later, and the
    model's inputs belong to the caller. Without this, one-shot bufferization may update a
    kernel input in place, and then copy it in the host to keep the caller's value.
    """
    read_only = ir.DictAttr.get({"bufferization.writable": ir.BoolAttr.get(False)})
    count = len(ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value).inputs)
    if "arg_attrs" not in function.attributes:
        function.attributes["arg_attrs"] = ir.ArrayAttr.get([read_only] * count)
        return
    merged = []
    for old in ir.ArrayAttr(function.attributes["arg_attrs"]):
        entries = {ir.DictAttr(old)[i].name: ir.DictAttr(old)[i].attr
                   for i in range(len(ir.DictAttr(old)))}
        entries["bufferization.writable"] = ir.BoolAttr.get(False)
        merged.append(ir.DictAttr.get(entries))
    function.attributes["arg_attrs"] = ir.ArrayAttr.get(merged)


@register
@dataclass
class OutlineKernelsPass(Pass):
    """Outline every fusion.group into a private kernel function called from its host."""

    ARGUMENT = "fusion-outline-kernels"

    def run(self, module: ir.Operation) -> None:
        count = 0
        for block in function_bodies(module):
            host = block.owner
            mark_arguments_read_only(host.operation)
            # Bufferization appends the results as arguments; the plan needs the split.
            n_inputs = len(block.arguments)
            host.operation.attributes[attributes.NUM_INPUTS] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), n_inputs)
            for op in list(block.operations):
                if op.operation.name == "fusion.group":
                    outline_group(op.operation, f"{KERNEL_PREFIX}{count}", host)
                    count += 1
