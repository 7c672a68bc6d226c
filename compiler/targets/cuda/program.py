"""CUDA target: program."""

from __future__ import annotations

from typing import Any

import dataclasses
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import analyse_group, tensor_info, value_key
from fusec.compiler.targets.cuda.device import DTYPES, GROUP_OP, CudaCodegenError
from fusec.compiler.targets.cuda.emitter import (
    KernelEmitter,
    constant_bytes,
    fast_kernel_text,
    is_weight,
)
from fusec.passes.registry import PassError
from fusec.compiler.targets.cuda.fallback import fallback_launch
from fusec.compiler.targets.cuda.gemm import GEMM_WORKSPACE_BYTES, gemm_launch
from fusec.compiler.targets.cuda.tc_gemm import tc_gemm_launch
from fusec.compiler.targets.cuda.layouts import VIEW_OFFSET
from fusec.compiler.targets.cuda.options import CudaOptions
from fusec.compiler.targets.cuda.ptx import (
    dependent_launch,
    fatbin_from_ptx,
    find_cuda_toolkit,
    kernel_arch,
    kernel_module_text,
    lower_kernels,
)
from fusec.compiler.targets.cuda.rewrites import (
    groups_of,
)
from fusec.compiler.targets.cuda.stages import tiled_passes
from fusec.passes import attributes
from fusec.passes.grouping import defining_op, model_functions, producer_through_reshapes
from fusec.runtime.plan import DTYPE_SIZES, Buffer, Launch, Plan

# ---------------------------------------------------------------- the program


@dataclass
class CudaProgram:
    """Everything `model.so` needs: the plan, the kernels (text, PTX, fatbin)."""

    plan: Plan
    kernels_mlir: str
    ptx: str
    fatbin: bytes | None
    compile_seconds: float
    # Buffers of role "constant" (weights): their bytes, uploaded once by the shim.
    constants: dict[int, bytes] = field(default_factory=dict)


def _entry_function(module: ir.Module) -> ir.Operation:
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if not funcs:
        raise CudaCodegenError("module has no func.func")
    public = model_functions(module.operation)
    return public[0] if public else funcs[0]


# Entry-function attributes of CPU-only features: the CUDA plan and runtime have no model
# state (an RNG seed kept between calls) and return no Python scalars yet.
_CPU_ONLY_FEATURES = {
    attributes.STATE: "keeps state between calls (an RNG seed: torch.rand, dropout, ...; a "
                      "buffer forward updates in place)",
    attributes.SCALAR_RESULTS: "returns Python numbers (scalar results)",
}


def refuse_host_features(func: ir.Operation) -> None:
    """Raise a PassError (located at the model function) if the model needs what only the
    CPU artifact provides."""
    from fusec.passes.registry import PassError

    for attribute, what in _CPU_ONLY_FEATURES.items():
        if attribute in func.attributes:
            raise PassError(f"the model {what}, which the CUDA target does not support yet; "
                            "compile it with --target cpu", func.location)


def gpu_rewrites(func: ir.Operation, options: CudaOptions) -> list[str]:
    """The rewrites of the fusion stage's groups for the GPU, in order (rewrite_passes.REWRITES:
    each one a pass of its own too; its docstring says why); returns the gemm notes of
    `split_matmul_groups`."""
    from fusec.compiler.targets.cuda.rewrite_passes import REWRITES

    notes: list[str] = []
    for rewrite in REWRITES:
        result = rewrite.run(func, options)
        if isinstance(result, list):
            notes = result
    return notes


def yields_only_empty(group: ir.Operation) -> bool:
    """Whether every result of `group` is a `tensor.empty`, through reshapes only (a grouped
    convolution's init, reshaped, made a kernel of its own when fusion is off)."""
    block = group.regions[0].blocks[0]
    terminator = block.operations[len(block.operations) - 1]
    for value in terminator.operands:
        source = producer_through_reshapes(value)
        if source is None or source.name != "tensor.empty":
            return False
    return len(terminator.operands) > 0


class LocatedCodegenError(PassError, CudaCodegenError):
    """A group no path builds, at the place in the user's source it comes from: the driver
    says `file:line:col: error: ...` (a PassError), callers of `generate` still catch a
    CudaCodegenError."""


def _located_error(group: ir.Operation, error: Exception) -> Exception:
    """A refusal (no emitter, and not the fallback) located at the group's first op from the
    user's source: a `file:line:col: error`, not an internal error."""
    ops = [o.operation for o in group.regions[0].blocks[0].operations]
    where = next((o.location for o in ops if "loc(" in str(o.location) and
                  ":" in str(o.location)), group.location)
    return LocatedCodegenError(f"cannot compile this kernel for cuda: {error}", where)


def _located(group: ir.Operation, build: Any) -> Any:
    """`build()`, its CudaCodegenError located (`_located_error`)."""
    try:
        return build()
    except CudaCodegenError as e:
        raise _located_error(group, e) from e


def _yields_only_a_weight(group: ir.Operation) -> ir.Operation | None:
    """The tensor constant (not a splat) that `group` does nothing but yield, if so."""
    ops = [o.operation for o in group.regions[0].blocks[0].operations]
    if len(ops) != 2 or len(ops[1].operands) != 1 or not is_weight(ops[0]) or \
            ops[1].operands[0] != ops[0].results[0]:
        return None
    return ops[0]


_GPU_FUNC = re.compile(r"gpu\.func @([A-Za-z_][A-Za-z0-9_$.]*)\(")


def share_identical_kernels(kernels: list[str], launches: list[Launch]) -> list[str]:
    """`kernels` with each kernel that is another's text under another name left out, and
    the launches of the dropped ones pointed at the kept one: a model's repeated layers
    (GPT-2's twelve blocks, a ResNet stage's blocks) build the same kernels, and lowering
    and assembling each copy again was most of a CUDA compile (weights and activations are
    kernel arguments, so the same layer is the same text). A text that defines more or
    less than one function is kept as it is."""
    kept: list[str] = []
    first: dict[str, str] = {}  # the text with its name taken out -> the name kept
    renamed: dict[str, str] = {}
    for text in kernels:
        names = _GPU_FUNC.findall(text)
        if len(names) != 1:
            kept.append(text)
            continue
        name = names[0]
        anonymous = re.sub(rf"@{re.escape(name)}\b", "@__kernel__", text)
        if anonymous in first:
            renamed[name] = first[anonymous]
            continue
        first[anonymous] = name
        kept.append(text)
    for launch in launches:
        if launch.symbol in renamed:
            launch.symbol = renamed[launch.symbol]
    return kept


def generate(module: ir.Module, options: CudaOptions | None = None) -> CudaProgram:
    """Compile every `fusion.group` of the entry function to a kernel or a cuBLASLt call;
    build the plan. The module is rewritten in place first (matmul splits and the other
    GPU rewrites named in the module docstring)."""
    options = options or CudaOptions()
    start = time.perf_counter()
    func = _entry_function(module)
    refuse_host_features(func)
    body = func.regions[0].blocks[0]
    buffers: list[Buffer] = []
    ids: dict[int, int] = {}

    def add_buffer(value: ir.Value, role: str, name: str) -> int:
        shape, elt = tensor_info(value.type)
        if elt not in DTYPES:
            raise CudaCodegenError(f"element type {elt} is not supported")
        b = Buffer(len(buffers), role, name, shape, DTYPES[elt])
        buffers.append(b)
        ids[value_key(value)] = b.id
        return b.id

    inputs = [add_buffer(a, "input", f"input{i}") for i, a in enumerate(body.arguments)]
    from fusec.compiler.targets.cuda.tiles import TileEmitter, built_from_tile, thread_tiled
    from fusec.compiler.targets.cuda.movement import movement_kernel
    from fusec.passes.tiling.gpu_kernels import DONE_ATTR, NOTES_ATTR

    if DONE_ATTR not in func.attributes:
        # The fusion stage's IR: run target cuda's `tiled` stage first (kernel formation,
        # tiling, placement), as the pipeline does. The caller's context need not be the
        # default one (the fusec driver's is not).
        from fusec.compiler.targets.cuda.tiles import tile_loop
        from fusec.passes import run_pipeline

        if any(tile_loop(g) is not None for g in groups_of(func)):
            raise CudaCodegenError("the input was tiled for another target (its groups hold "
                                   "tile loops): give target cuda the fusion stage's IR")

        with module.context, func.location:
            run_pipeline(module, tiled_passes(options))
    gemm_notes = [ir.StringAttr(a).value for a in func.attributes[NOTES_ATTR]] \
        if NOTES_ATTR in func.attributes else []
    launches: list[Launch] = []
    kernels: list[str] = []
    outputs: list[int] = []
    constants: dict[int, bytes] = {}
    weight_ids: dict[int, int] = {}
    asm_cache: list[str] = []

    def asm() -> str:
        if not asm_cache:
            asm_cache.append(module.operation.get_asm())
        return asm_cache[0]

    split_ids: list[int] = []

    def split_buffers(floats: int, counters: int) -> tuple[int, int]:
        """Split-K's f32 scratch (a temporary) and i32 counters (a constant of zeros,
        uploaded once: every launch leaves them zero), one pair for the whole program, as
        large as its largest split-K launch needs."""
        if not split_ids:
            split_ids.append(len(buffers))
            buffers.append(Buffer(len(buffers), "temp", "split_k_scratch", [0], "float32"))
            split_ids.append(len(buffers))
            buffers.append(Buffer(len(buffers), "constant", "split_k_counters", [0], "int32"))
        scratch, count = (buffers[i] for i in split_ids)
        scratch.shape[0] = max(scratch.shape[0], floats)
        count.shape[0] = max(count.shape[0], counters)
        constants[count.id] = bytes(count.nbytes)
        return scratch.id, count.id

    ret = body.operations[len(body.operations) - 1]
    returned = {value_key(v) for v in ret.operands}
    for op in body.operations:
        name = op.operation.name
        if name in ("arith.constant", "tensor.empty", "func.return"):
            continue
        if name != GROUP_OP:
            raise CudaCodegenError(
                f"'{name}' is outside any fusion.group: run the fusion stage first")
        symbol = f"fusec_k{len(launches)}"
        kind = str(op.attributes["kind"]).strip('"') if "kind" in op.attributes else "single"
        ops_in = [o.operation.name for o in op.regions[0].blocks[0].operations
                  if o.operation.name.startswith("linalg.")]

        def weight_buffer(shape: list[int], elt: str, data: bytes) -> int:
            digest = (hash(data), tuple(shape), elt)
            if digest not in weight_ids:
                b = Buffer(len(buffers), "constant", f"weight{len(weight_ids)}", shape,
                           DTYPES[elt])
                if b.nbytes != len(data):
                    raise CudaCodegenError(f"constant of {b.nbytes} bytes has {len(data)}")
                buffers.append(b)
                constants[b.id] = data
                weight_ids[digest] = b.id
            return weight_ids[digest]

        operands = []
        for v in op.operands:
            producer = defining_op(v)
            if value_key(v) not in ids and producer is not None and \
                    producer.name == "arith.constant" and \
                    isinstance(v.type, ir.RankedTensorType):
                # A tensor constant the group reads from outside (torch-mlir's reflection
                # pads' index tables): a constant buffer, like a weight.
                shape, elt = tensor_info(v.type)
                ids[value_key(v)] = weight_buffer(shape, elt, constant_bytes(producer, asm))
            if value_key(v) not in ids:
                raise CudaCodegenError("a group operand is computed outside every kernel")
            operands.append(ids[value_key(v)])

        def result_buffers() -> list[int]:
            return [add_buffer(r, "output" if value_key(r) in returned else "temp",
                               f"{symbol}_out{j}") for j, r in enumerate(op.results)]

        path = str(ir.StringAttr(op.attributes[attributes.PATH]).value) \
            if attributes.PATH in op.attributes else ""
        if path == "view":
            base = buffers[operands[0]]
            offset = ir.IntegerAttr(op.attributes[VIEW_OFFSET]).value * \
                DTYPE_SIZES[base.dtype]
            view = buffers[add_buffer(op.results[0], "temp", f"view{len(buffers)}")]
            view.view_of = base.id if base.view_of is None else base.view_of
            view.view_offset = offset + (base.view_offset if base.view_of is not None else 0)
            continue
        constant = _yields_only_a_weight(op)
        if constant is not None and value_key(op.results[0]) not in returned:
            # A group that yields a weight (a folded transpose or reshape of one, a conv's
            # filter as a matrix): its buffer is the weight's, no kernel copies it.
            shape, elt = tensor_info(constant.results[0].type)
            ids[value_key(op.results[0])] = weight_buffer(shape, elt,
                                                          constant_bytes(constant, asm))
            continue
        if yields_only_empty(op):
            # An empty tensor (an `outs` operand: its contents are undefined until written),
            # reshaped perhaps: a buffer, no kernel.
            result_buffers()
            continue
        if path == "gemm":
            launches.append(gemm_launch(op, operands, weight_buffer, result_buffers, asm))
            launches[-1].info["bytes"] = sum(buffers[b].nbytes for b in launches[-1].buffers)
            continue
        if path == "tc_gemm":
            text, launch = tc_gemm_launch(
                op, symbol, operands, weight_buffer, result_buffers, asm,
                lambda b: buffers[b].view_of is not None and buffers[b].view_offset % 16 != 0,
                options.description, split_buffers)
            kernels.append(text)
            # (Split-K's shared scratch and counters are not this launch's traffic.)
            launch.info["bytes"] = sum(buffers[b].nbytes for b in launch.buffers
                                       if b not in split_ids)
            launches.append(launch)
            continue
        weights = [w for w in op.regions[0].blocks[0].operations if is_weight(w)]

        def kernel_args() -> list[int]:
            """A group-level kernel's arguments: its inputs, its weights, its results."""
            args = list(operands)
            for w in weights:
                shape, elt = tensor_info(w.results[0].type)
                args.append(weight_buffer(shape, elt, constant_bytes(w, asm)))
            return args + result_buffers()
        if path == "attention":
            from fusec.compiler.targets.cuda.attention import attention_launch

            text, launch = _located(op, lambda: attention_launch(
                op, symbol, operands, weights, kernel_args, options.description))
            kernels.append(text)
            launch.info["bytes"] = sum(buffers[b].nbytes for b in launch.buffers[3:])
            launches.append(launch)
            continue
        if attributes.OPS in op.attributes:  # recorded by the tiling, before it nests them
            ops_in = [ir.StringAttr(a).value for a in op.attributes[attributes.OPS]]
        from_tile = built_from_tile(op)
        if thread_tiled(op):
            # Neither emitter's: the fallback path, from the stage's thread tiles.
            why = ir.StringAttr(op.attributes[attributes.FALLBACK]).value
            if not options.fallback:
                raise _located_error(op, CudaCodegenError(why))
            launches.append(_located(op, lambda: fallback_launch(
                op, symbol, why, operands, weight_buffer, result_buffers, kernels, kind,
                ops_in)))
            launches[-1].info["bytes"] = sum(buffers[b].nbytes for b in launches[-1].buffers)
            launches[-1].info["tiled"] = True
            continue
        if from_tile:
            # Tiled by the `tiled` stage, which asked the tile emitter first: built as tiled.
            try:
                emitter: KernelEmitter = TileEmitter(op, symbol, options.description,
                                                     options.elementwise_unroll,
                                                     options.row_elements_per_thread)
                kernels.append(emitter.build())
            except CudaCodegenError as refusal:
                # The stage asked with the cost model's launch shapes; only an override of
                # them (CudaOptions' experiment knobs) can make the emitter refuse here.
                raise CudaCodegenError(
                    f"the launch-shape options (elementwise_unroll="
                    f"{options.elementwise_unroll}, row_elements_per_thread="
                    f"{options.row_elements_per_thread}) do not fit the tile the `tiled` "
                    f"stage chose: {refusal}") from refusal
            geometry = emitter.geo
        try:
            if not from_tile:
                geometry = analyse_group(op, options.description, options.row_elements_per_thread,
                                         options.elementwise_unroll)
                kernels.append(fast_kernel_text(op, symbol, geometry, weights))
        except CudaCodegenError as refusal:
            moved = None
            if options.movement:
                try:
                    moved = movement_kernel(op, symbol, weights, options.description)
                except CudaCodegenError as not_moved:
                    refusal = CudaCodegenError(f"{refusal} (data movement: {not_moved})")
            if moved is not None:
                kernels.append(moved.text)
                args = kernel_args()
                info = dict(moved.info, bytes=sum(buffers[b].nbytes for b in args),
                            tiled=False)
                if attributes.UNTILED in op.attributes:
                    info["untiled"] = ir.StringAttr(op.attributes[attributes.UNTILED]).value
                launches.append(Launch(symbol=symbol, buffers=args, grid=moved.grid, kind=kind,
                                       ops=moved.ops, info=info, block=moved.block,
                                       shared_bytes=0))
                continue
            if not options.fallback:
                raise _located_error(op, refusal) from refusal
            reason = str(refusal)
            launches.append(_located(op, lambda: fallback_launch(
                op, symbol, reason, operands, weight_buffer, result_buffers, kernels,
                kind, ops_in)))
            launches[-1].info["bytes"] = sum(buffers[b].nbytes for b in launches[-1].buffers)
            continue
        args = kernel_args()
        shape = geometry.shape
        info = {"path": "fast", "shape": geometry.kind, "launch": dataclasses.asdict(shape),
                "rows": geometry.rows, "cols": geometry.cols,
                "bytes": sum(buffers[b].nbytes for b in args),
                # Built from the tile loop of the `tiled` stage, or from the whole group
                # (the reason the tiling was undone in `untiled`).
                "tiled": from_tile}
        if attributes.UNTILED in op.attributes:
            info["untiled"] = ir.StringAttr(op.attributes[attributes.UNTILED]).value
        if info["tiled"]:  # no sizes: the group is one tile
            info["tile_sizes"] = list(ir.DenseI64ArrayAttr(op.attributes[attributes.TILE_SIZES])) \
                if attributes.TILE_SIZES in op.attributes else []
        launches.append(Launch(symbol=symbol, buffers=args, grid=shape.grid, kind=kind,
                               ops=ops_in, info=info, block=shape.block, shared_bytes=0))
    for k, v in enumerate(ret.operands):
        producer = defining_op(v)
        if value_key(v) not in ids and producer is not None and producer.name == "tensor.empty":
            # An output no kernel writes (torch.empty's contents are undefined; mostly the
            # zero-size results of native_batch_norm or embedding_bag): its buffer alone
            # (found by the e2e suite: 13 tests refused here).
            add_buffer(v, "output", f"output{k}")
        if value_key(v) not in ids:
            what = f"'{producer.name}'" if producer is not None else "a block argument"
            raise LocatedCodegenError(f"cannot compile this model for cuda: result {k} is "
                                      f"computed outside every kernel ({what})",
                                      (producer or ret).location)
        outputs.append(ids[value_key(v)])
    # A returned input, and a value returned a second time, needs an output buffer of its
    # own, copied on the device after the kernels: the caller binds one buffer per output (a
    # buffer returned twice would be bound twice, the first binding lost: found by
    # test/gpu/fuzz_cuda.py, `return v, v`). A group result also used by later groups keeps
    # its one buffer.
    bound: set[int] = set()
    for k, bid in enumerate(outputs):
        if buffers[bid].role == "input" or bid in bound:
            b = buffers[bid]
            copy = Buffer(len(buffers), "output", f"output{k}", list(b.shape), b.dtype)
            buffers.append(copy)
            outputs[k] = copy.id
            launches.append(Launch(symbol="__copy__", buffers=[bid, copy.id], grid=0))
        bound.add(bid)
    kernels = share_identical_kernels(kernels, launches)
    arch = kernel_arch(kernels, options)
    plan = Plan(target="cuda", buffers=buffers, launches=launches, inputs=inputs,
                outputs=outputs, metadata={"arch": arch})
    if dependent_launch(options):
        plan.metadata["dependent_launch"] = options.dependent_launch
    if gemm_notes:
        plan.metadata["gemm"] = gemm_notes
    if any(k.launch_kind == "gemm" for k in launches):
        plan.metadata["cublaslt_workspace_bytes"] = GEMM_WORKSPACE_BYTES
    text = kernel_module_text(kernels, options)
    context = module.context
    ptx = lower_kernels(text, options, context, "isa").decode()
    fatbin = None
    toolkit = options.toolkit or find_cuda_toolkit()
    if options.cubin and toolkit and (Path(toolkit) / "bin" / "ptxas").exists():
        fatbin = fatbin_from_ptx(ptx, arch, options)
        if fatbin is None:  # no fatbinary: MLIR's own serializer
            fatbin = lower_kernels(text, options, context, "fatbin")
    # The time is the program's (`CudaProgram.seconds`), not the artifact's: two builds of one
    # model with one tuning cache are the same bytes.
    seconds = time.perf_counter() - start
    plan.metadata["image"] = "fatbin" if fatbin else "ptx"
    return CudaProgram(plan, text, ptx, fatbin, seconds, constants)


