"""--fusion-cpu-tile-loops: a CPU kernel runs a range of its tiles, [tile_begin, tile_end).

Every kernel function (`fusion.kind` set) gets two trailing `index` arguments, tile_begin
and tile_end. When the kernel's body is one tile loop (`scf.forall` with static bounds) and
otherwise only side-effect-free setup (constants, globals, views), the forall becomes an
`scf.for` over the linearized tile range (work outside it on buffers the call allocates
itself is allowed: each call redoes it); the forall's induction variables are recovered by
delinearizing the tile number (row-major: the last forall dim varies fastest). The runtime
splits [0, grid) across threads, so this is where tiles meet threads. Any other kernel is
one tile: `fusion.grid` becomes 1 and its body runs whole (its foralls become serial loops
later, `--scf-forall-to-for`).

Before:
    func.func private @fusec_kernel_0(%a: memref<64x128xf32>, %o: memref<64x128xf32>)
        attributes {fusion.grid = 8 : i64, ...} {
      scf.forall (%i) in (8) { ... }
      return
    }
After:
    func.func private @fusec_kernel_0(%a: memref<64x128xf32>, %o: memref<64x128xf32>,
                                      %b: index, %e: index) attributes {fusion.grid = 8 : i64} {
      scf.for %t = %b to %e step %c1 {
        ... (%i = %t) ...
      }
      return
    }
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusec.passes import attributes
from fusec.passes.registry import Pass, PassError, register
from mlir import ir
from mlir.dialects import arith, scf

# Top-level ops that may sit beside the tile loop: they compute nothing a tile could race on.
SETUP_OPS = frozenset({
    "arith.constant", "memref.get_global", "memref.subview", "memref.expand_shape",
    "memref.collapse_shape", "memref.cast", "memref.reinterpret_cast", "affine.apply",
    "func.return",
})


def kernel_functions(module: ir.Operation) -> list[ir.Operation]:
    """The module's kernel functions (those with a `fusion.kind`), in module order."""
    return [op.operation for op in module.regions[0].blocks[0].operations
            if op.operation.name == "func.func" and attributes.KIND in op.operation.attributes]


def _static(op: ir.Operation, name: str) -> list[int] | None:
    values = list(ir.DenseI64ArrayAttr(op.attributes[name]))
    return None if any(v == ir.ShapedType.get_dynamic_size() for v in values) else values


def forall_bounds(forall: ir.Operation) -> tuple[list[int], list[int], list[int]] | None:
    """(lower bounds, upper bounds, steps) of a forall, or None if any is dynamic."""
    bounds = [_static(forall, n) for n in ("staticLowerBound", "staticUpperBound", "staticStep")]
    if any(b is None for b in bounds):
        return None
    return bounds[0], bounds[1], bounds[2]


VIEW_OPS = frozenset({"memref.subview", "memref.expand_shape", "memref.collapse_shape",
                      "memref.cast", "memref.reinterpret_cast"})


def _is_local(value: ir.Value) -> bool:
    """True if `value` is (a view of) a buffer this kernel call allocates for itself."""
    while True:
        owner = value.owner
        if isinstance(owner, ir.Block):
            return False
        name = owner.name
        if name in ("memref.alloc", "memref.alloca"):
            return True
        if name not in VIEW_OPS:
            return False
        value = owner.operands[0]


def _written(op: ir.Operation) -> list[ir.Value] | None:
    """The memrefs a top-level op writes, or None if this pass cannot tell."""
    if op.name == "memref.copy":
        return [op.operands[1]]
    if op.name.startswith("linalg.") and "operandSegmentSizes" in op.attributes:
        n_inputs, n_outputs = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        return list(op.operands)[n_inputs:n_inputs + n_outputs]
    if op.name in ("memref.alloc", "memref.alloca", "memref.dealloc"):
        return []
    return None


def _private_to_the_call(op: ir.Operation) -> bool:
    """Setup, or work on buffers the call allocated itself.

    Such an op outside the tile loop is redone by every call (every thread's tile range):
    wasted work, but no race, since each call has its own buffers. Writing a kernel
    argument outside the tile loop is a race (a copy of the whole result would read other
    threads' unfinished tiles): such a kernel cannot be split.
    """
    if op.name in SETUP_OPS:
        return True
    written = _written(op)
    return written is not None and all(_is_local(v) for v in written)


def tile_loop(kernel: ir.Operation) -> tuple[ir.Operation | None, int]:
    """The kernel's tile loop and its number of tiles, or (None, 1) if it has none."""
    body = kernel.regions[0].blocks[0]
    foralls = [op.operation for op in body.operations if op.operation.name == "scf.forall"]
    others = [op.operation for op in body.operations
              if op.operation.name != "scf.forall" and not _private_to_the_call(op.operation)]
    if len(foralls) != 1 or others:
        return None, 1
    bounds = forall_bounds(foralls[0])
    if bounds is None:
        return None, 1
    counts = [math.ceil((ub - lb) / st) for lb, ub, st in zip(*bounds)]
    return foralls[0], math.prod(counts)


def _append_tile_arguments(kernel: ir.Operation) -> tuple[ir.Value, ir.Value]:
    body = kernel.regions[0].blocks[0]
    index = ir.IndexType.get()
    begin = body.add_argument(index, kernel.location)
    end = body.add_argument(index, kernel.location)
    ftype = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
    kernel.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get(list(ftype.inputs) + [index, index], list(ftype.results)))
    if "arg_attrs" in kernel.attributes:
        attrs = list(ir.ArrayAttr(kernel.attributes["arg_attrs"]))
        kernel.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs + [ir.DictAttr.get({})] * 2)
    return begin, end


def _constant(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), value).result


def forall_to_tile_range(forall: ir.Operation, begin: ir.Value, end: ir.Value) -> None:
    """Replace `forall` by a loop over tiles [begin, end) of its linearized iteration space."""
    lbs, ubs, steps = forall_bounds(forall)
    counts = [math.ceil((ub - lb) / st) for lb, ub, st in zip(lbs, ubs, steps)]
    body = forall.regions[0].blocks[0]
    with ir.InsertionPoint(forall), forall.location:
        loop = scf.ForOp(begin, end, _constant(1))
    with ir.InsertionPoint(loop.body), forall.location:
        remaining = loop.induction_variable
        ivs: list[ir.Value] = [None] * len(counts)  # type: ignore[list-item]
        for d in reversed(range(len(counts))):
            index = remaining  # the outermost dim takes what is left
            if d:
                count = _constant(counts[d])
                index = arith.RemUIOp(remaining, count).result
                remaining = arith.DivUIOp(remaining, count).result
            if lbs[d] or steps[d] != 1:
                index = arith.AddIOp(arith.MulIOp(index, _constant(steps[d])).result,
                                     _constant(lbs[d])).result
            ivs[d] = index
        terminator = scf.YieldOp([])
    for arg, iv in zip(body.arguments, ivs):
        arg.replace_all_uses_with(iv)
    ops = list(body.operations)
    if list(ops[-1].regions[0].blocks[0].operations):
        raise PassError("a bufferized tile loop still has parallel inserts", forall.location)
    for op in ops[:-1]:
        op.operation.move_before(terminator.operation)
    forall.erase()


@register
@dataclass
class CpuTileLoopsPass(Pass):
    """Give each kernel tile_begin/tile_end arguments and run only that range of tiles."""

    ARGUMENT = "fusion-cpu-tile-loops"

    def run(self, module: ir.Operation) -> None:
        i64 = ir.IntegerType.get_signless(64)
        for kernel in kernel_functions(module):
            forall, grid = tile_loop(kernel)
            begin, end = _append_tile_arguments(kernel)
            kernel.attributes[attributes.GRID] = ir.IntegerAttr.get(i64, grid)
            if forall is not None:
                forall_to_tile_range(forall, begin, end)
