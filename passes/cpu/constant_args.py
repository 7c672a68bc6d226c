"""--fusion-cpu-constant-args: weights become kernel arguments, and identical kernels one.

After bufferization each kernel reads its constants (weights, biases, tables) through
`memref.get_global @__constant_...` of its own: twelve transformer layers are twelve kernels
that differ only in the globals they name, and LLVM compiles each. This pass makes every
non-splat constant global a kernel reads an argument of the kernel instead: the host reads
the global (`memref.get_global` before the call; the launch plan names the global's symbol
as a `constant` buffer) and passes it, and the global becomes public so that the host code
can name it. Then kernels whose bodies, types and launch attributes are the same (their
descriptive attributes aside: reasons naming source lines, the cost model's figures) are one
kernel: the calls of the others call it, and they are erased.

Left alone: splat globals (the kernel may fold them) and i1 globals (bytes in memory, bits
in MLIR: see --fusion-widen-i1-memrefs).

Before:
    memref.global "private" constant @__constant_4x4xf32_0 : memref<4x4xf32> = dense<...>
    func.func private @fusec_kernel_0(%x: memref<4x4xf32>, %y: memref<4x4xf32>) {
      %w = memref.get_global @__constant_4x4xf32_0 : memref<4x4xf32>
      ...
    }
    func.func @main(...) { call @fusec_kernel_0(%a, %b) ... }
After:
    memref.global constant @__constant_4x4xf32_0 : memref<4x4xf32> = dense<...>
    func.func private @fusec_kernel_0(%x: memref<4x4xf32>, %y: memref<4x4xf32>,
                                      %w: memref<4x4xf32>) { ... }
    func.func @main(...) {
      %w = memref.get_global @__constant_4x4xf32_0 : memref<4x4xf32>
      call @fusec_kernel_0(%a, %b, %w) ...
    }
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes import attributes
from fusec.passes.registry import Pass, register
from mlir import ir
from mlir.dialects import func, memref

# The attributes of a kernel that later passes and the launch plan act on (the others
# describe it: reasons naming source lines, the cost model's figures, counts).
ACTED_ON = frozenset({"function_type", "arg_attrs", "res_attrs", "sym_visibility",
                      attributes.KIND, attributes.GRID, attributes.TILE_SIZES,
                      attributes.TILE_DIMS, attributes.OPS})


def _constant_globals(module: ir.Operation) -> dict[str, ir.Operation]:
    """Non-splat, non-i1 constant memref.globals with an initial value, by name."""
    found = {}
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name != "memref.global" or "constant" not in op.attributes or \
                "initial_value" not in op.attributes:
            continue
        value = op.attributes["initial_value"]
        if not isinstance(value, ir.DenseElementsAttr) and \
                not str(value).startswith("dense_resource<"):
            continue  # uninitialised
        if isinstance(value, ir.DenseElementsAttr) and value.is_splat:
            continue
        element = str(ir.MemRefType(ir.TypeAttr(op.attributes["type"]).value).element_type)
        if element == "i1":
            continue
        found[ir.StringAttr(op.attributes["sym_name"]).value] = op
    return found


def _calls(module: ir.Operation) -> dict[str, list[ir.Operation]]:
    calls: dict[str, list[ir.Operation]] = {}

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "func.call":
            calls.setdefault(ir.FlatSymbolRefAttr(op.attributes["callee"]).value, []).append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return calls


def _reads(kernel: ir.Operation, constants: dict[str, ir.Operation]) -> list[ir.Operation]:
    reads = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "memref.get_global" and \
                ir.FlatSymbolRefAttr(op.attributes["name"]).value in constants:
            reads.append(op)
        return ir.WalkResult.ADVANCE

    kernel.walk(visit)
    return reads


def _add_arguments(kernel: ir.Operation, reads: list[ir.Operation]
                   ) -> tuple[list[str], list[ir.Type]]:
    """One new argument per global `reads` name (in order of first read); the reads use
    it and are erased. Returns the globals' names and types, in argument order."""
    entry = kernel.regions[0].blocks[0]
    names: list[str] = []
    arguments: dict[str, ir.Value] = {}
    for read in reads:
        name = ir.FlatSymbolRefAttr(read.attributes["name"]).value
        if name not in arguments:
            arguments[name] = entry.add_argument(read.results[0].type, read.location)
            names.append(name)
        read.results[0].replace_all_uses_with(arguments[name])
        read.erase()
    ftype = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
    kernel.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        list(ftype.inputs) + [arguments[n].type for n in names], list(ftype.results)))
    if "arg_attrs" in kernel.attributes:
        read_only = ir.DictAttr.get({"bufferization.writable": ir.BoolAttr.get(False)})
        kernel.attributes["arg_attrs"] = ir.ArrayAttr.get(
            list(ir.ArrayAttr(kernel.attributes["arg_attrs"])) + [read_only] * len(names))
    return names, [arguments[n].type for n in names]


def _pass_globals(call: ir.Operation, names: list[str], types: list[ir.Type]) -> ir.Operation:
    """Replace `call` by one that also passes the globals `names` (read just before it)."""
    with ir.InsertionPoint(call), call.location:
        extra = [memref.GetGlobalOp(t, n).result for n, t in zip(names, types)]
        new = func.CallOp([r.type for r in call.results],
                          ir.FlatSymbolRefAttr(call.attributes["callee"]).value,
                          list(call.operands) + extra)
    for old, result in zip(call.results, new.results):
        old.replace_all_uses_with(result)
    call.erase()
    return new.operation


def kernel_signature(kernel: ir.Operation) -> str:
    """What a kernel computes and how it is launched, as text: its body, its type and the
    attributes that are acted on (`ACTED_ON`); two kernels with the same signature are one
    (the launch plan's per-launch figures are then the first one's)."""
    clone = kernel.clone()
    for name in [clone.attributes[i].name for i in range(len(clone.attributes))]:
        if name not in ACTED_ON:
            del clone.attributes[name]
    text = clone.get_asm(enable_debug_info=False, print_generic_op_form=True)
    clone.erase()
    return text


@register
@dataclass
class ConstantArgsPass(Pass):
    """Kernels' constant globals become arguments; identical kernels are merged."""

    ARGUMENT = "fusion-cpu-constant-args"
    DESCRIPTION = "weights become kernel arguments; kernels that are the same are one"
    merge: bool = True

    def run(self, module: ir.Operation) -> None:
        from fusec.passes.cpu.cpu_tile_loops import kernel_functions

        constants = _constant_globals(module)
        calls = _calls(module)
        kernels = kernel_functions(module)
        with module.context:
            for kernel in kernels:
                reads = _reads(kernel, constants)
                if not reads:
                    continue
                names, types = _add_arguments(kernel, reads)
                symbol = ir.StringAttr(kernel.attributes["sym_name"]).value
                calls[symbol] = [_pass_globals(c, names, types) for c in calls.get(symbol, [])]
                for name in names:
                    if "sym_visibility" in constants[name].attributes:
                        del constants[name].attributes["sym_visibility"]
            if not self.merge:
                return
            first: dict[str, str] = {}
            for kernel in kernels:
                symbol = ir.StringAttr(kernel.attributes["sym_name"]).value
                signature = kernel_signature(kernel)
                if signature not in first:
                    first[signature] = symbol
                    continue
                for call in calls.get(symbol, []):
                    call.attributes["callee"] = ir.FlatSymbolRefAttr.get(first[signature])
                kernel.erase()
