"""--fusion-cpu-abi: export each kernel as `void <symbol>(void **buffers, i64 begin, i64 end)`.

Runs on the LLVM dialect, after `convert-func-to-llvm{use-bare-ptr-memref-call-conv}`, so a
kernel `@fusec_kernel_<n>` takes one bare pointer per buffer and then tile_begin and
tile_end. The kernel is renamed `@fusec_kernel_<n>_body` (internal linkage, so LLVM may
inline it) and a wrapper of the kernel's name, the plan's `Launch.symbol`, loads pointer i
from `buffers[i]` and calls it: the uniform ABI the runtime's thread pool calls
(`fusec.runtime.plan`). The kernels to wrap are the plan's launches (`fusion.plan`).

After:
    llvm.func internal @fusec_kernel_0_body(%a: !llvm.ptr, %o: !llvm.ptr, %b: i64, %e: i64)
    llvm.func @fusec_kernel_0(%buffers: !llvm.ptr, %b: i64, %e: i64) {
      %0 = llvm.getelementptr %buffers[0] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
      %1 = llvm.load %0 : !llvm.ptr -> !llvm.ptr
      ...
      llvm.call @fusec_kernel_0_body(%1, %3, %b, %e) : (!llvm.ptr, !llvm.ptr, i64, i64) -> ()
      llvm.return
    }
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fusec.passes.cpu.cpu_plan import read_plan
from fusec.passes.registry import Pass, PassError, register
from mlir import ir

BODY_SUFFIX = "_body"


def wrapper_text(symbol: str, n_buffers: int) -> str:
    """The LLVM-dialect wrapper of kernel `symbol` taking `n_buffers` pointers."""
    lines = [f"llvm.func @{symbol}(%buffers: !llvm.ptr, %begin: i64, %end: i64) {{"]
    for i in range(n_buffers):
        lines.append(f"  %a{i} = llvm.getelementptr %buffers[{i}] : (!llvm.ptr) -> !llvm.ptr, "
                     "!llvm.ptr")
        lines.append(f"  %p{i} = llvm.load %a{i} : !llvm.ptr -> !llvm.ptr")
    args = ", ".join([f"%p{i}" for i in range(n_buffers)] + ["%begin", "%end"])
    types = ", ".join(["!llvm.ptr"] * n_buffers + ["i64", "i64"])
    lines.append(f"  llvm.call @{symbol}{BODY_SUFFIX}({args}) : ({types}) -> ()")
    lines.append("  llvm.return")
    lines.append("}")
    return "\n".join(lines)


def _llvm_functions(module: ir.Operation) -> dict[str, ir.Operation]:
    return {ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
            for op in module.regions[0].blocks[0].operations if op.operation.name == "llvm.func"}


def wrap_kernel(module: ir.Operation, kernel: ir.Operation, symbol: str, n_buffers: int) -> None:
    """Rename `kernel` to its body name and add the exported wrapper after it."""
    kernel.attributes["sym_name"] = ir.StringAttr.get(symbol + BODY_SUFFIX)
    kernel.attributes["linkage"] = ir.Attribute.parse("#llvm.linkage<internal>")
    if "sym_visibility" in kernel.attributes:
        del kernel.attributes["sym_visibility"]
    # The scratch module declares the body so that the wrapper's call verifies; only the
    # wrapper moves over.
    types = ", ".join(["!llvm.ptr"] * n_buffers + ["i64", "i64"])
    declaration = f"llvm.func @{symbol}{BODY_SUFFIX}({types})\n"
    scratch = ir.Module.parse(declaration + wrapper_text(symbol, n_buffers))
    list(scratch.body.operations)[-1].operation.move_after(kernel)


@register
@dataclass
class CpuAbiPass(Pass):
    """Export every planned kernel through the uniform (buffers, begin, end) wrapper.
    `partial`: the module holds a part of the plan's kernels (the `cpu` stage run over parts
    side by side, compiler/targets/cpu/parts.py): those it holds are wrapped."""

    ARGUMENT = "fusion-cpu-abi"
    partial: bool = field(default=False)

    def run(self, module: ir.Operation) -> None:
        functions = _llvm_functions(module)
        for symbol in dict.fromkeys(launch.symbol for launch in read_plan(module).launches):
            kernel = functions.get(symbol)
            if kernel is None and self.partial:
                continue
            if kernel is None:
                raise PassError(f"kernel '{symbol}' of the plan is not in the module")
            wrap_kernel(module, kernel, symbol, _argument_count(kernel) - 2)


def _argument_count(function: ir.Operation) -> int:
    body = function.regions[0].blocks
    if not len(body):
        raise PassError("a kernel has no body")
    return len(body[0].arguments)
