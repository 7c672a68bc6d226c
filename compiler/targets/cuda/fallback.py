"""CUDA target: fallback."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import value_key
from fusec.compiler.targets.cuda.device import INDEX_STATUS, INDEX_STATUS_GLOBAL, CudaCodegenError
from fusec.compiler.targets.cuda.emitter import constant_bytes
from fusec.passes import attributes, cost_model
from fusec.runtime.plan import Launch

# ---------------------------------------------------------------- the fallback path (upstream MLIR)
#
# A group the emitter above refuses (matmul, transpose, pad, conv, pooling, reductions over
# other dims, ...) is compiled by upstream MLIR instead, reusing the CPU path's loop-level
# stages: the group alone in a module, its root tiled with scf.forall and the rest of the
# group fused into the tiles (`tiled`), outlined and bufferized (`bufferized`), linalg lowered
# to loops. The tile loop then becomes the kernel's thread index space: each GPU thread runs
# one tile, serially (tiles as small as the tile-and-fuse allows, so threads are many). A
# group whose kernel is not one tile loop runs in one thread. Correct first; the launch
# shape and the schedule inside a tile are where speed would come from.

FALLBACK_BLOCK = cost_model.FALLBACK_THREADS_PER_BLOCK  # the cost model's policy
# Tile intermediates up to this size live in each thread's stack (local memory).
FALLBACK_STACK_BYTES = 1 << 20
# CUDA's default device-malloc heap (cuCtxGetLimit(CU_LIMIT_MALLOC_HEAP_SIZE)): what the
# fallback's threads may hold at once in the buffers larger than FALLBACK_STACK_BYTES.
DEVICE_HEAP_BYTES = 8 << 20


@dataclass
class FallbackKernel:
    """One refused group compiled by the fallback path.

    `args` says what each kernel argument is: ("input", i) the group's operand i,
    ("output", j) its result j, ("weight", k) `weights[k]` (a tensor constant of the group).
    """

    text: str  # the gpu.func
    args: list[tuple[str, int]]
    weights: list[tuple[list[int], str, bytes]]  # (shape, MLIR element type, data)
    grid: int
    block: int
    tiles: int
    tile_sizes: list[int]
    serial: bool  # one thread runs the whole group (no single tile loop)


def fallback_lowering_passes(serial: bool) -> list[str]:
    """bufferized kernel -> loops over memrefs (no linalg), before it becomes a gpu.func."""
    passes = ["fusion-copies-to-linalg"]
    if serial:
        # One thread walks every tile: the tiles' buffers can move out of the loops.
        passes += ["scf-forall-to-for", "func.func(buffer-loop-hoisting)"]
    return passes + [
        # A tile's intermediates are the thread's own: stack (local memory), not malloc.
        (f"func.func(promote-buffers-to-stack{{max-alloc-size-in-bytes="
         f"{FALLBACK_STACK_BYTES} max-rank-of-allocated-memref=8}})"),
        "convert-linalg-to-loops",
        "fusion-widen-i1-memrefs",
        "fold-memref-alias-ops",
        "expand-strided-metadata",
        "lower-affine",
        "canonicalize",
        "cse",
    ]


def _group_module(group: ir.Operation) -> ir.Module:
    """A module whose `main` is `group` alone (a copy), its operands the function's arguments."""
    from fusec.passes.grouping import group_alone

    return group_alone(group)


def _find_func(module: ir.Module, pred) -> list[ir.Operation]:
    return [op.operation for op in module.body.operations
            if op.operation.name == "func.func" and pred(op.operation)]


def _kernel_arg_roles(main: ir.Operation) -> list[tuple[str, int]]:
    """What each argument of the one call in `main` (after bufferization) is, as group terms.

    `main(inputs..., outputs...)` allocates the kernel's results, calls it, and copies them
    to its out-parameters; reshapes between are views of dense buffers (same pointer).
    """
    body = main.regions[0].blocks[0]
    n_inputs = ir.IntegerAttr(main.attributes[attributes.NUM_INPUTS]).value
    root: dict[int, tuple[str, int]] = {}
    for i, arg in enumerate(body.arguments):
        root[value_key(arg)] = ("input", i) if i < n_inputs else ("output", i - n_inputs)
    allocs: dict[tuple[str, int], tuple[str, int]] = {}
    calls = []
    for op in body.operations:
        op = op.operation
        if op.name == "memref.alloc":
            root[value_key(op.results[0])] = ("alloc", len(allocs))
            allocs[("alloc", len(allocs))] = ("alloc", len(allocs))
        elif op.name in ("memref.expand_shape", "memref.collapse_shape", "memref.cast"):
            root[value_key(op.results[0])] = root[value_key(op.operands[0])]
        elif op.name == "memref.copy":
            src = root[value_key(op.operands[0])]
            dst = root[value_key(op.operands[1])]
            if src[0] != "alloc" or dst[0] != "output":
                raise CudaCodegenError(f"fallback: the group's host code copies {src} to {dst}")
            allocs[src] = dst
        elif op.name == "func.call":
            calls.append(op)
        elif op.name not in ("func.return", "arith.constant", "memref.dealloc"):
            raise CudaCodegenError(f"fallback: '{op.name}' in the group's host code")
    if len(calls) != 1:
        raise CudaCodegenError(f"fallback: the group became {len(calls)} kernel calls, not one")
    roles = []
    for v in calls[0].operands:
        role = root[value_key(v)]
        role = allocs.get(role, role)
        if role[0] == "alloc":
            raise CudaCodegenError("fallback: a kernel argument is a buffer of the host code")
        roles.append(role)
    return roles


def _global_data(global_op: ir.Operation, module_asm: Any) -> bytes:
    """The bytes of a memref.global's initial value (dense, splat or dense_resource)."""
    import numpy as np

    attr = global_op.attributes["initial_value"]
    memref = ir.MemRefType(ir.TypeAttr(global_op.attributes["type"]).value)
    if isinstance(attr, ir.DenseElementsAttr) and str(memref.element_type) == "i1":
        return np.array(attr).astype(np.uint8).tobytes()
    if isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
        try:
            return np.ascontiguousarray(np.broadcast_to(np.array(attr), memref.shape)).tobytes()
        except Exception:  # noqa: BLE001 - bf16/f16: no numpy buffer; read the hex below
            pass
    return constant_bytes(global_op, module_asm, "initial_value")


def _weights_to_arguments(kernel: ir.Operation, module: ir.Module,
                          module_asm: Any) -> list[tuple[list[int], str, bytes]]:
    """Each memref.get_global in `kernel` becomes a trailing argument; returns their data.

    Weights are buffers of the artifact (uploaded once), as the emitter's are, rather than
    device globals in the PTX.
    """
    globals_ = {ir.StringAttr(op.attributes["sym_name"]).value: op.operation
                for op in module.body.operations if op.operation.name == "memref.global"}
    body = kernel.regions[0].blocks[0]
    weights = []
    slots: dict[str, ir.Value] = {}
    for op in list(body.operations):
        op = op.operation
        if op.name != "memref.get_global":
            continue
        name = ir.FlatSymbolRefAttr(op.attributes["name"]).value
        if name not in slots:
            g = globals_[name]
            memref = ir.MemRefType(op.results[0].type)
            weights.append((list(memref.shape), str(memref.element_type),
                            _global_data(g, module_asm)))
            slots[name] = body.add_argument(op.results[0].type, op.location)
        op.results[0].replace_all_uses_with(slots[name])
        op.erase()
    ftype = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
    kernel.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in body.arguments], list(ftype.results)))
    if "arg_attrs" in kernel.attributes:
        del kernel.attributes["arg_attrs"]
    return weights


def _index_op(name: str, dim: str = "x") -> ir.Value:
    return ir.Operation.create(name, results=[ir.IndexType.get()],
                               attributes={"dimension": ir.Attribute.parse(f"#gpu<dim {dim}>")}
                               ).results[0]


def _distribute_tiles(gfunc: ir.Operation, forall: ir.Operation | None, block: int) -> int:
    """Thread t of the grid runs tile t of `forall` (delinearized, last dim fastest).

    Without a forall, thread 0 runs the body. Returns the number of tiles.
    """
    from fusec.passes.cpu.cpu_tile_loops import forall_bounds
    from mlir.dialects import arith, scf

    body = gfunc.regions[0].blocks[0]
    ops = list(body.operations)
    terminator = ops[-1]
    index = ir.IndexType.get()
    if forall is None:
        bounds, tiles, moved = ([], [], []), 1, ops[:-1]
    else:
        bounds = forall_bounds(forall)
        counts = [-(-(ub - lb) // st) for lb, ub, st in zip(*bounds)]
        tiles = math.prod(counts)
        moved = list(forall.regions[0].blocks[0].operations)[:-1]  # not scf.forall.in_parallel
    anchor = forall if forall is not None else ops[0]
    with ir.InsertionPoint(anchor), anchor.location:
        c = lambda v: arith.ConstantOp(index, v).result  # noqa: E731
        thread = arith.AddIOp(arith.MulIOp(_index_op("gpu.block_id"), c(block)).result,
                              _index_op("gpu.thread_id")).result
        inside = arith.CmpIOp(arith.CmpIPredicate.ult, thread, c(tiles)).result
        branch = scf.IfOp(inside)
        with ir.InsertionPoint(branch.then_block):
            yield_op = scf.YieldOp([])
        with ir.InsertionPoint(yield_op):
            rest = thread
            ivs = []
            for lb, count, st in reversed(list(zip(bounds[0], counts if forall else [],
                                                   bounds[2]))):
                digit = arith.RemUIOp(rest, c(count)).result
                rest = arith.DivUIOp(rest, c(count)).result
                ivs.append(arith.AddIOp(c(lb), arith.MulIOp(digit, c(st)).result).result)
            ivs.reverse()
    if forall is not None:
        for arg, iv in zip(forall.regions[0].blocks[0].arguments, ivs):
            arg.replace_all_uses_with(iv)
    for op in moved:
        op.operation.move_before(yield_op)
    if forall is not None:
        forall.erase()
    assert terminator.operation.name == "gpu.return"
    return tiles


def report_index_errors_on_device(gfunc: ir.Operation) -> bool:
    """Each `func.call @fusec_index_error(check, index)` in `gfunc` becomes a compare-and-swap
    of `check + 1` into word 0 of the device status (only where it is still 0: the first
    failure wins) and, by the winner, a store of `index` into word 1. Returns whether any."""
    from fusec.passes.grouping import walk_ops
    from fusec.passes.linalg.guard_indices import ERROR_FUNCTION
    from mlir.dialects import arith, memref, scf

    calls = walk_ops(gfunc, lambda o: o.name == "func.call" and
                     ir.FlatSymbolRefAttr(o.attributes["callee"]).value == ERROR_FUNCTION)
    i64 = ir.IntegerType.get_signless(64)
    index = ir.IndexType.get()
    status_type = ir.MemRefType.get([2], i64)
    for call in calls:
        check, bad = call.operands[0], call.operands[1]
        with ir.InsertionPoint(call), call.location:
            status = memref.GetGlobalOp(status_type, INDEX_STATUS).result
            zero, one = arith.ConstantOp(i64, 0).result, arith.ConstantOp(i64, 1).result
            mark = arith.AddIOp(check, one).result
            rmw = memref.GenericAtomicRMWOp(i64, status, [arith.ConstantOp(index, 0).result])
            block = rmw.regions[0].blocks.append(i64)
            with ir.InsertionPoint(block):
                free = arith.CmpIOp(arith.CmpIPredicate.eq, block.arguments[0], zero).result
                memref.AtomicYieldOp(arith.SelectOp(free, mark, block.arguments[0]).result)
            won = arith.CmpIOp(arith.CmpIPredicate.eq, rmw.result, zero).result
            branch = scf.IfOp(won)
            with ir.InsertionPoint(branch.then_block):
                memref.StoreOp(bad, status, [arith.ConstantOp(index, 1).result])
                scf.YieldOp([])
        call.erase()
    return bool(calls)


def fallback_kernel(group: ir.Operation, symbol: str,
                    block: int = FALLBACK_BLOCK) -> FallbackKernel:
    """Compile a group through upstream MLIR (see the section comment) to one `gpu.func`."""
    from fusec.compiler.targets import cpu as codegen_cpu
    from fusec.compiler.targets.cpu.options import FINEST_TILES
    from fusec.compiler.targets.cuda.tiles import thread_tiled
    from fusec.passes import run_pipeline
    from fusec.passes.cpu.cpu_tile_loops import tile_loop

    mini = _group_module(group)
    # Tiled by the `tiled` stage already (`cuda_tiles.tile_for_fallback`), or tiled here.
    tiling = [] if thread_tiled(group) else codegen_cpu.tiled_passes(FINEST_TILES)
    run_pipeline(mini, tiling + codegen_cpu.bufferized_passes())
    kernels = _find_func(mini, lambda f: attributes.KIND in f.attributes)
    if len(kernels) != 1:
        raise CudaCodegenError(f"fallback: the group became {len(kernels)} kernels, not one")
    kernel = kernels[0]
    main = _find_func(mini, lambda f: attributes.KIND not in f.attributes)[0]
    roles = _kernel_arg_roles(main)
    forall, _ = tile_loop(kernel)
    serial = forall is None
    tile_sizes = []
    if attributes.TILE_SIZES in kernel.attributes:
        tile_sizes = list(ir.DenseI64ArrayAttr(kernel.attributes[attributes.TILE_SIZES]))
    run_pipeline(mini, fallback_lowering_passes(serial))
    kernel = _find_func(mini, lambda f: attributes.KIND in f.attributes)[0]
    asm_cache: list[str] = []

    def asm() -> str:
        if not asm_cache:
            asm_cache.append(mini.operation.get_asm())
        return asm_cache[0]

    weights = _weights_to_arguments(kernel, mini, asm)
    roles += [("weight", k) for k in range(len(weights))]
    body = kernel.regions[0].blocks[0]
    foralls = [op.operation for op in body.operations if op.operation.name == "scf.forall"]
    if serial and foralls:
        raise CudaCodegenError("fallback: a serial kernel kept an scf.forall")
    if not serial and len(foralls) != 1:
        raise CudaCodegenError("fallback: the tile loop did not survive the lowering")
    # Every argument is a distinct buffer of the plan, or a read-only one (inputs, weights,
    # possibly the same weight twice): noalias lets LLVM keep a tile's accumulator in a
    # register instead of re-reading the output through memory at every step.
    arg_types = ", ".join(f"%a{i}: {a.type} {{llvm.noalias}}"
                          for i, a in enumerate(body.arguments))
    holder = ir.Module.parse(
        "module attributes {gpu.container_module} { gpu.module @fallback {\n"
        f"  gpu.func @{symbol}({arg_types}) kernel {{ gpu.return }}\n}} }}")
    gmodule = holder.body.operations[0]
    gfunc = gmodule.regions[0].blocks[0].operations[0]
    gbody = gfunc.regions[0].blocks[0]
    for old, new in zip(body.arguments, gbody.arguments):
        old.replace_all_uses_with(new)
    gret = list(gbody.operations)[-1]
    for op in list(body.operations)[:-1]:  # not func.return
        op.operation.move_before(gret)
    if report_index_errors_on_device(gfunc):
        with ir.InsertionPoint.at_block_begin(gmodule.regions[0].blocks[0]):
            ir.Operation.parse(INDEX_STATUS_GLOBAL)
    forall = next((op.operation for op in gbody.operations
                   if op.operation.name == "scf.forall"), None)
    tiles = _distribute_tiles(gfunc, forall, block)
    if serial:
        block = 1
    heap = _heap_bytes(gfunc)
    if heap and heap * min(tiles, -(-tiles // block) * block) > DEVICE_HEAP_BYTES:
        # Each thread would malloc its buffer on the device heap; when they cannot all fit,
        # malloc returns NULL and the kernel writes through it (an illegal address on the
        # H200: a LLaMA block with --no-cuda-movement). Refused here instead.
        raise CudaCodegenError(
            f"the fallback kernel needs {heap} bytes per GPU thread on the device heap for "
            f"{tiles} threads, more than its {DEVICE_HEAP_BYTES >> 20} MiB (a value the "
            f"tile computes whole)")
    return FallbackKernel(text=str(gfunc), args=roles, weights=weights,
                          grid=-(-tiles // block), block=block, tiles=tiles,
                          tile_sizes=tile_sizes, serial=serial)


def _heap_bytes(gfunc: ir.Operation) -> int:
    """Bytes one thread of `gfunc` allocates on the heap (memref.alloc left after the
    promotion of small buffers to the stack)."""
    from fusec.compiler.targets.cuda.analysis import numel_of
    from fusec.compiler.targets.cuda.device import ELEMENT_BYTES
    from fusec.passes.grouping import walk_ops

    total = 0
    for alloc in walk_ops(gfunc, lambda o: o.name == "memref.alloc"):
        mtype = ir.MemRefType(alloc.results[0].type)
        if not mtype.has_static_shape:
            return 1 << 40  # unknown: assume it does not fit
        total += numel_of(mtype.shape) * ELEMENT_BYTES.get(str(mtype.element_type), 8)
    return total


def fallback_launch(group: ir.Operation, symbol: str, refusal: str, operands: list[int],
                     weight_buffer: Any, result_buffers: Any, kernels: list[str],
                     kind: str, ops_in: list[str]) -> Launch:
    """The launch of a group the emitter refused, compiled by `fallback_kernel`."""
    try:
        # The caller's context need not be the default one (the fusec driver's is not).
        with group.context, group.location:
            fb = fallback_kernel(group, symbol)
    except CudaCodegenError as e:
        raise CudaCodegenError(f"{refusal}; and the fallback path failed: {e}") from e
    except Exception as e:  # noqa: BLE001 - an upstream pass failed: say which group and why
        raise CudaCodegenError(f"{refusal}; and the fallback path failed: "
                               f"{type(e).__name__}: {str(e)[:2000]}") from e
    kernels.append(fb.text)
    weights = [weight_buffer(shape, elt, data) for shape, elt, data in fb.weights]
    results = result_buffers()
    args = []
    for role, i in fb.args:
        args.append({"input": operands, "output": results, "weight": weights}[role][i])
    info = {"path": "fallback", "why": refusal,
            "shape": "serial" if fb.serial else "tile-per-thread", "tiles": fb.tiles,
            "tile_sizes": fb.tile_sizes}
    return Launch(symbol=symbol, buffers=args, grid=fb.grid, kind=kind, ops=ops_in,
                  info=info, block=fb.block, shared_bytes=0)


