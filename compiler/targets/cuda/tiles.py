"""CUDA kernels from the tiled form: a group's tile loop becomes the grid, its tile body a block.

The `tiled` stage (`--fusion-tile{device=nvidia-h200}`) leaves each group as

    fusion.group ... attributes {fusion.tile_kind = "row", fusion.block = 128, ...} {
      %e = tensor.empty() : tensor<64x1000xf32>
      %r = scf.forall (%i) in (64) shared_outs(%o = %e) -> (tensor<64x1000xf32>) {
        %x = tensor.extract_slice %arg[%i, 0] [1, 1000] [1, 1] : ... to tensor<1x1000xf32>
        ... linalg.generic ops on tile-sized tensors ...
        scf.forall.in_parallel { tensor.parallel_insert_slice %y into %o[%i, 0] [1, 1000] ... }
      }
      fusion.yield %r
    }

and `TileEmitter` lowers exactly that: block b runs tile b (the forall's induction variables
are `b` delinearized, last dim fastest), the block's `fusion.block` threads share the tile as
the cost model's launch shape says (`cost_model.elementwise_launch_shape` for a flat tile,
`row_launch_shape` for a row tile), every slice of a kernel input is read at its offset (the
slice's offsets, as the tile body computes them, linearised) plus the thread's position in the
tile, and every `parallel_insert_slice` is a store at its offset. Inside the tile a thread
keeps its own elements of every tile value in registers and a reduction's partials are
combined through shared memory (`KernelEmitter.flush_reductions`): the fixed policy that
`--fusion-place` describes for the H200 (`fusion.mem`), which the emitter does not read.

A tile body this emitter cannot take (see `TileEmitter` for what it takes) is refused with a
`CudaCodegenError`; the tiling pass asks first (`tile_refusal`) and undoes such a tiling, the
reason on the group (`fusion.untiled`). A group the group-level emitter takes as it is stays
so; one neither emitter takes is tiled as the fallback path runs it, a tile per GPU thread
(`tile_for_fallback`: `fusion.tile_kind = "thread"`, both refusals in `fusion.fallback`).
"""

from __future__ import annotations

import math
from typing import Any

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import (
    GroupGeometry,
    MapInfo,
    memory_element,
    tensor_info,
    value_key,
)
from fusec.compiler.targets.cuda.device import ELEMENT_BYTES, H200, CudaCodegenError, CudaDevice
from fusec.compiler.targets.cuda.emitter import (
    Empty,
    Full,
    Input,
    KernelEmitter,
    Row,
    Scalar,
    is_weight,
)
from fusec.passes import attributes, cost_model
from fusec.passes.tiling.place import loop_ranges

TILE_KIND_ATTR = attributes.TILE_KIND
BLOCK_ATTR = attributes.BLOCK
# Ops of a tile body that only name or compute indices and views.
INDEX_OPS = ("affine.apply", "arith.constant", "tensor.extract_slice", "tensor.empty")


def built_from_tile(group: ir.Operation) -> bool:
    """Whether the `tiled` stage left `group` as a tile for the tile emitter (tiled, or one
    tile, and accepted), rather than untiled (`fusion.untiled`), a library call, or the
    fallback path's thread tiles."""
    return TILE_KIND_ATTR in group.attributes and attributes.UNTILED not in group.attributes \
        and attributes.PATH not in group.attributes and not thread_tiled(group)


def thread_tiled(group: ir.Operation) -> bool:
    """Whether the `tiled` stage tiled `group` for the fallback path (a tile per thread)."""
    return TILE_KIND_ATTR in group.attributes and \
        str(ir.StringAttr(group.attributes[TILE_KIND_ATTR]).value) == THREAD_KIND


def tile_loop(group: ir.Operation) -> ir.Operation | None:
    """The group's tile loop (`scf.forall`), if it has one."""
    for op in group.regions[0].blocks[0].operations:
        if op.operation.name == "scf.forall":
            return op.operation
    return None


def _static(op: ir.Operation, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


DYNAMIC = ir.ShapedType.get_dynamic_size()


class TileEmitter(KernelEmitter):
    """Emits one `gpu.func` from a tiled group (see the module docstring).

    Takes: one static `scf.forall` (the tile loop) whose body is slices of the group's inputs
    (and weights), tile-sized linalg.generic ops (elementwise, broadcasts, reductions over the
    row), reshapes, index arithmetic (`affine.apply`) and `parallel_insert_slice`s of its
    results; outside the loop only constants, empty tensors and reshapes of inputs (views).
    Or a group with no tile loop: one tile, one block. A tile is either flat (a contiguous run
    of the tensor: `fusion.tile_kind = elementwise`) or one row (one dim longer than 1:
    `row`).
    """

    def __init__(self, group: ir.Operation, symbol: str, device: CudaDevice = H200,
                 unroll: int = 0, row_elements_per_thread: int = 0) -> None:
        forall = tile_loop(group)
        body = group.regions[0].blocks[0]
        if forall is not None:
            bounds = [_static(forall, n) for n in ("staticLowerBound", "staticUpperBound",
                                                   "staticStep")]
            if any(DYNAMIC in b for b in bounds):
                raise CudaCodegenError("the tile loop has dynamic bounds")
            for op in body.operations:
                name = op.operation.name
                if name not in ("scf.forall", "arith.constant", "tensor.empty", "fusion.yield",
                                "tensor.expand_shape", "tensor.collapse_shape"):
                    raise CudaCodegenError(f"'{name}' is computed outside the tile loop "
                                           f"(a producer the tile did not fuse)")
            ops = list(forall.regions[0].blocks[0].operations)
            self.tile_ops = ops[:-1]
            self.inserts = [op.operation for op in ops[-1].regions[0].blocks[0].operations]
            if any(op.name != "tensor.parallel_insert_slice" for op in self.inserts):
                raise CudaCodegenError("the tile loop's terminator holds more than insertions")
            if any(DYNAMIC in _static(op.operation, "static_sizes") for op in
                   self.tile_ops + self.inserts if "static_sizes" in op.operation.attributes):
                raise CudaCodegenError("a slice of dynamic size in a tile (a partial tile)")
        else:  # the group is one tile (one block): its body is the tile's
            bounds = [[], [], []]
            self.tile_ops = []
            self.inserts = []
        self.forall = forall
        self.bounds = bounds
        self.counts = [-(-(ub - lb) // st) for lb, ub, st in zip(*bounds)]
        kind = str(ir.StringAttr(group.attributes[TILE_KIND_ATTR]).value) \
            if TILE_KIND_ATTR in group.attributes else "elementwise"
        if kind not in ("elementwise", "row"):
            raise CudaCodegenError(f"a {kind} tile is not a block of the fast emitter")
        self.tile_shape = self._tile_shape(group)
        self.tile_numel = math.prod(self.tile_shape)
        element = memory_element(group) or "f32"
        ebytes = ELEMENT_BYTES.get(element, 4)
        grid = math.prod(self.counts)
        if kind == "row":
            long = [e for e in self.tile_shape if e != 1]
            if len(long) > 1:
                raise CudaCodegenError(f"a row tile of shape {self.tile_shape} holds more "
                                       f"than one row")
            cols = long[0] if long else 1
            shape = cost_model.row_launch_shape(1, cols, ebytes, device,
                                                row_elements_per_thread)
            if shape is None:
                raise CudaCodegenError(f"row of {cols} elements is too long to keep in "
                                       f"registers; needs a multi-pass kernel")
            shape = cost_model.RowShape(shape.block, grid, shape.vec, shape.chunks,
                                        shape.guarded)
            # rows: one per tile (the plan's `info` reads it; the emission never does).
            geometry = GroupGeometry("row", grid, cols, element, shape, tuple(self.tile_shape))
        else:
            shape = cost_model.elementwise_launch_shape(self.tile_numel, ebytes, device,
                                                        unroll)
            shape = cost_model.ElementwiseShape(shape.block, grid, shape.vec, shape.unroll,
                                                shape.tiles, shape.guarded)
            geometry = GroupGeometry("elementwise", 1, self.tile_numel, element, shape)
        weights = [w for w in body.operations if is_weight(w)]
        super().__init__(group, symbol, geometry, weights)
        # Kernel outputs: the group's results, in order, each a result of the tile loop.
        self.output_of_shared: dict[int, list[int]] = {}  # a result yielded twice: two
        if forall is not None:
            results = {value_key(r): k for k, r in enumerate(forall.results)}
            for j, v in enumerate(self.outputs):
                if value_key(v) not in results:
                    raise CudaCodegenError("a group result is not a result of the tile loop")
                self.output_of_shared.setdefault(results[value_key(v)], []).append(
                    self.num_inputs + j)
        self.current_ranges: list[int] = []

    # -- the tile

    def _tile_shape(self, group: ir.Operation) -> list[int]:
        """The shape of one tile: the largest loop space of the tile's generics (a row
        reduction's is its row, wider than the one value per row it writes) or output."""
        ops = self.tile_ops or list(group.regions[0].blocks[0].operations)
        spaces = [self._ranges(op.operation) for op in ops
                  if op.operation.name == "linalg.generic"]
        if self.forall is not None:
            spaces += [tensor_info(op.operands[0].type)[0] for op in self.inserts]
        else:
            spaces += [tensor_info(r.type)[0] for r in group.results]
        return max(spaces, key=math.prod)

    def _delinearize(self) -> None:
        """The tile loop's induction variables from the block index (last dim fastest)."""
        if self.forall is None:
            return
        args = list(self.forall.regions[0].blocks[0].arguments)
        ivs = args[:len(self.counts)]
        rest = "%bid"
        digits = []
        for count in reversed(self.counts):
            digits.append(self.arith("remui", rest, self.index(count)))
            rest = self.arith("divui", rest, self.index(count))
        digits.reverse()
        for iv, digit, lb, st in zip(ivs, digits, self.bounds[0], self.bounds[2]):
            value = self.arith("addi", self.index(lb), self.arith("muli", digit, self.index(st)))
            self.values[value_key(iv)] = Scalar(self.uniform_name(value), "index")
        for shared in args[len(self.counts):]:
            self.values[value_key(shared)] = Empty(str(shared.type))

    # -- index arithmetic and slices

    def _offset(self, op: ir.Operation, parent_shape: list[int]) -> str:
        """The linear offset of the slice `op` (extract or insert) in its parent tensor."""
        offsets = _static(op, "static_offsets")
        if any(s != 1 for s in _static(op, "static_strides")):
            raise CudaCodegenError("a strided slice in a tile")
        dynamic = iter(self._dynamic_offsets(op))  # in dim order
        names = [next(dynamic) if off == DYNAMIC else off for off in offsets]
        strides = [math.prod(parent_shape[d + 1:]) for d in range(len(parent_shape))]
        total = None
        for name, stride in zip(names, strides):
            if name == 0:
                continue
            term = self.index(name * stride) if isinstance(name, int) else \
                self.arith("muli", name, self.index(stride))
            total = term if total is None else self.arith("addi", total, term)
        return total if total is not None else self.index(0)

    def _dynamic_offsets(self, op: ir.Operation) -> list[str]:
        """The SSA names of the slice's dynamic offsets (its sizes are static: `__init__`)."""
        count = sum(1 for o in _static(op, "static_offsets") if o == DYNAMIC)
        # Operands: source (and, for an insertion, destination), then the dynamic offsets.
        fixed = 1 if op.name == "tensor.extract_slice" else 2
        names = []
        for v in list(op.operands)[fixed:fixed + count]:
            rep = self.lookup(v)
            if not isinstance(rep, Scalar):
                raise CudaCodegenError("a slice offset that is not an index")
            names.append(rep.name)
        return names

    @staticmethod
    def _contiguous(sizes: list[int], parent: list[int]) -> bool:
        """Whether a slice of `sizes` is one contiguous run of its (row-major) parent: 1 on
        every dim before its first larger one, every dim after that one whole."""
        larger = [d for d, size in enumerate(sizes) if size != 1]
        return not larger or all(sizes[d] == parent[d] for d in range(larger[0] + 1, len(sizes)))

    def eval_apply(self, op: ir.Operation) -> None:
        amap = ir.AffineMapAttr(op.attributes["map"]).value
        operands = []
        for v in op.operands:
            rep = self.lookup(v)
            if not isinstance(rep, Scalar):
                raise CudaCodegenError("affine.apply of a value that is not an index")
            operands.append(rep.name)
        if len(amap.results) != 1:
            raise CudaCodegenError("affine.apply with several results")
        name = self._affine(amap.results[0], operands[:amap.n_dims], operands[amap.n_dims:])
        self.values[value_key(op.results[0])] = Scalar(self.uniform_name(name), "index")

    def _affine(self, expr: Any, dims: list[str], symbols: list[str]) -> str:
        if isinstance(expr, ir.AffineDimExpr):
            return dims[expr.position]
        if isinstance(expr, ir.AffineSymbolExpr):
            return symbols[expr.position]
        if isinstance(expr, ir.AffineConstantExpr):
            return self.index(expr.value)
        for kind, op in ((ir.AffineAddExpr, "addi"), (ir.AffineMulExpr, "muli"),
                         (ir.AffineModExpr, "remui"), (ir.AffineFloorDivExpr, "divui")):
            if isinstance(expr, kind):
                return self.arith(op, self._affine(expr.lhs, dims, symbols),
                                  self._affine(expr.rhs, dims, symbols))
        raise CudaCodegenError(f"affine expression {expr} in a tile offset")

    def eval_slice(self, op: ir.Operation) -> None:
        source = self.lookup(op.operands[0])
        sizes = _static(op, "static_sizes")
        if isinstance(source, Empty):
            self.values[value_key(op.results[0])] = Empty(str(op.results[0].type))
            return
        if not isinstance(source, Input):
            raise CudaCodegenError("a slice of a value the tile computes")
        parent = tensor_info(op.operands[0].type)[0]
        base = self._offset(op, parent)
        if source.base != "":
            base = self.arith("addi", source.base, base)
        piece = Input(source.index, source.type, math.prod(sizes))
        piece.base = self.uniform_name(base)
        piece.contiguous = source.contiguous and self._contiguous(sizes, parent)
        self.values[value_key(op.results[0])] = piece

    # -- evaluation (KernelEmitter's, with the tile's ops)

    def body_ops(self) -> list[ir.Operation]:
        body = self.group.regions[0].blocks[0]
        outside = [op for op in body.operations
                   if op.operation.name not in ("fusion.yield", "scf.forall")]
        return outside + self.tile_ops

    def eval_op(self, op: ir.Operation) -> None:
        name = op.operation.name
        if name == "affine.apply":
            self.eval_apply(op)
        elif name == "tensor.extract_slice":
            self.eval_slice(op)
        elif name == "linalg.generic":
            self.current_ranges = self._ranges(op)
            super().eval_op(op)
        elif name in ("arith.constant", "tensor.empty", "linalg.fill", "tensor.expand_shape",
                      "tensor.collapse_shape"):
            super().eval_op(op)
        elif name == "linalg.copy":  # an init made the tile's own: the same values
            self.values[value_key(op.results[0])] = self.lookup(op.operands[0])
        else:
            raise CudaCodegenError(f"'{name}' in a tile is not supported by the CUDA "
                                   f"code generator")

    @staticmethod
    def _ranges(op: ir.Operation) -> list[int]:
        """The generic's loop extents (1 for a loop no shaped operand names)."""
        return [extent or 1 for extent in loop_ranges(op) or []]

    def check_reduction(self, iters: list[str]) -> None:
        """One reduction dim, the tile's row: every dim after it has extent 1 here, and it
        folds exactly the tile's row (the thread's positions are the row's), no shorter one."""
        dims = [d for d, kind in enumerate(iters) if kind == "reduction"]
        if len(dims) != 1 or any(e != 1 for e in self.current_ranges[dims[0] + 1:]):
            raise CudaCodegenError("only a reduction over the tile's row is supported")
        if self.current_ranges[dims[0]] != self.tile_numel:
            raise CudaCodegenError(f"a reduction of {self.current_ranges[dims[0]]} values in a "
                                   f"tile whose row has {self.tile_numel}")

    def access_maps(self, op: ir.Operation, maps: list[MapInfo]) -> list[MapInfo]:
        """As they are: `access` here classifies a map over the tile's own loop ranges."""
        return maps

    def loop_position(self, ranges: list[int], d: int, p: int, domain: str) -> str:
        """A tile's loops are offset by the tile's position (upstream's tiling moves a
        `linalg.index` by it): not built here; the group-level emitter takes such a group."""
        raise CudaCodegenError("linalg.index in a tile")

    def check_output_map(self, m: MapInfo) -> None:
        """A result is stored at the thread's positions: its map must keep the order of the
        loop's dims longer than 1 (no transpose on the way out)."""
        ranges = self.current_ranges or [1] * m.num_dims
        long = [r for r in m.results if r is not None and ranges[r] > 1]
        if long != sorted(long):
            raise CudaCodegenError(f"an output written through {m} (a transpose) in a tile")

    def generic_domain(self, op: ir.Operation, reduction: bool) -> str:
        out_numel = math.prod(tensor_info(op.results[0].type)[0])
        if reduction:
            if out_numel != 1:
                raise CudaCodegenError("a reduction in a tile that keeps more than one row")
            return "full"
        if out_numel == self.tile_numel:
            return "full"
        if out_numel == 1:
            return "row"
        raise CudaCodegenError(f"a tile value of {out_numel} elements in a tile of "
                               f"{self.tile_numel}")

    def access(self, value: Any, m: MapInfo, domain: str) -> tuple[str, Any]:
        """What `value` read through `m` is for this thread: its elements at the thread's
        positions in the tile ("full"), or one value for the whole tile ("row"/"scalar")."""
        ranges = self.current_ranges or [1] * m.num_dims
        nonunit = [d for d, e in enumerate(ranges) if e > 1]
        dims = [r for r in m.results if r is not None]
        read = [d for d in dims if d in nonunit]
        if not read:
            kind = "row" if dims else "scalar"
        elif domain != "full" or read != nonunit or \
                [r for r in m.results if r is not None and ranges[r] > 1] != nonunit:
            raise CudaCodegenError(f"access pattern {m} is not an element or a broadcast of "
                                   f"the tile")
        else:
            kind = "full"
        if isinstance(value, Input):
            if kind == "full" and not value.contiguous:
                raise CudaCodegenError("a tile reads a slice that is not contiguous")
            return kind, self.load_input(value, kind)
        if isinstance(value, Full) and kind != "full":
            raise CudaCodegenError(f"a full tile value is read as a {kind}")
        return kind, value

    def load_input(self, inp: Input, access: str) -> Any:
        if access in inp.loads:
            return inp.loads[access]
        base = inp.base or self.index(0)
        if access == "full":
            names: list[str] = []
            for off in self.full_offsets:
                names += self.load_vector(inp.index, self.arith("addi", base, off), self.vec)
            result: Any = Full(names, inp.type)
        else:
            result = Row(self.uniform_name(self.load_vector(inp.index, base, 1)[0]), inp.type)
        inp.loads[access] = result
        return result

    # -- outputs: the tile loop's insertions

    def store_outputs(self) -> None:
        for value, arg, base, sizes, parent in self._writes():
            self._store(value, arg, base, sizes, parent)

    def _writes(self) -> list[tuple[ir.Value, int, str, list[int], list[int]]]:
        """(value, output argument, offset, slice sizes, output shape) of each write: the
        tile loop's insertions, or the group's results when the group is one tile."""
        if self.forall is None:
            return [(v, self.num_inputs + j, self.index(0), tensor_info(v.type)[0],
                     tensor_info(v.type)[0]) for j, v in enumerate(self.outputs)]
        shared = list(self.forall.regions[0].blocks[0].arguments)[len(self.counts):]
        shared_index = {value_key(a): k for k, a in enumerate(shared)}
        writes = []
        for op in self.inserts:
            k = shared_index.get(value_key(op.operands[1]))
            if k is None or k not in self.output_of_shared:
                raise CudaCodegenError("a tile insertion into something else than an output")
            parent = tensor_info(op.operands[1].type)[0]
            base = self._offset(op, parent)
            for arg in self.output_of_shared[k]:
                writes.append((op.operands[0], arg, base, _static(op, "static_sizes"), parent))
        return writes

    def _store(self, value: ir.Value, arg: int, base: str, sizes: list[int],
               parent: list[int]) -> None:
        rep = self.lookup(value)
        if isinstance(rep, Input):
            if math.prod(sizes) > 1 and not rep.contiguous:
                raise CudaCodegenError("a tile output copies a slice that is not contiguous")
            rep = self.load_input(rep, "full" if math.prod(sizes) > 1 else "row")
        if isinstance(rep, Scalar):
            if math.prod(sizes) not in (1, self.tile_numel):
                raise CudaCodegenError("a filled tile output that is neither the tile nor "
                                       "one value")
            rep = Full([rep.name] * (len(self.full_offsets) * self.vec), rep.type) \
                if math.prod(sizes) == self.tile_numel else Row(rep.name, rep.type)
        if isinstance(rep, Full) and (math.prod(sizes) != self.tile_numel or
                                      not self._contiguous(sizes, parent)):
            raise CudaCodegenError("a tile output that is not one contiguous tile")
        self.store_value(arg, rep, [self.arith("addi", base, off) for off in self.full_offsets]
                         if isinstance(rep, Full) else [], base)

    # -- the kernel: the thread's positions in its block's tile

    def emit_row_kernel(self, shape: cost_model.RowShape) -> None:
        self._delinearize()
        self.row_index = self.index(0)
        # Positions in the tile (its one row); each slice adds its own offset.
        self.full_offsets = self.col_offsets = self.row_columns(shape)
        self.run_body()
        self.store_outputs()

    def emit_elementwise_kernel(self, shape: cost_model.ElementwiseShape) -> None:
        self._delinearize()
        pass_elems = shape.block * shape.unroll * shape.vec
        looped = shape.tiles > 1
        if looped:  # a tile larger than one pass of the block: the block walks it
            self.emit(f"scf.for %pass = {self.index(0)} to {self.index(shape.tiles)} "
                      f"step {self.index(1)} {{")
            self.indent += 1
            start = self.arith("muli", "%pass", self.index(pass_elems))
        else:
            start = self.index(0)
        lane = self.arith("addi", start, self.arith("muli", "%tid", self.index(shape.vec)))
        self.full_offsets = [self.arith("addi", lane, self.index(c * shape.block * shape.vec))
                             for c in range(shape.unroll)]
        self.col_offsets = self.full_offsets
        self.row_index = self.index(0)
        self.run_chunks(shape, self.tile_numel)
        if looped:
            self.indent -= 1
            self.emit("}")


def tile_refusal(group: ir.Operation, device: CudaDevice = H200) -> str | None:
    """Why `TileEmitter` cannot lower the tiled `group` (None: it can)."""
    try:
        TileEmitter(group, "fusec_probe", device).build()
    except CudaCodegenError as refusal:
        return str(refusal)
    return None


def whole_refusal(group: ir.Operation) -> str | None:
    """Why the data-movement family does not build the untiled `group` whole (None: it
    does; also refused where the function has the movement kernels off). Asked before a
    group over the device's limits once tiled is split into a kernel per op: the family
    evaluates each output vector lazily from the inputs, so a tile's registers do not bound
    it (MobileNet's BatchNorm + ReLU6 + 7x7 mean, read through a transpose)."""
    from fusec.compiler.targets.cuda.movement import movement_refusal

    func = group.parent
    while func is not None and func.name != "func.func":
        func = func.parent
    if func is not None and attributes.NO_MOVEMENT in func.attributes:
        return "the data-movement kernels are off"
    return movement_refusal(group)


THREAD_KIND = "thread"  # `fusion.tile_kind` of a fallback kernel's tiles: one per GPU thread
FALLBACK_ATTR = attributes.FALLBACK  # why a group is the fallback path's (the emitters' refusal)


def tile_for_fallback(group: ir.Operation) -> ir.Operation:
    """A group the `tiled` stage left untiled that the group-level emitter does not build
    either goes to the fallback path (upstream MLIR, one GPU thread per tile): tile it here as
    the fallback does (`FINEST_TILES`: the CPU path's tiled stage, finest tiles),
    so that the stage shows the tiles the kernel runs, `fusion.tile_kind = "thread"`. When
    that tiling does not leave one group (reshapes hoisted out of it), the group stays
    untiled and the fallback tiles it when it builds it (said in `fusion.untiled`). Returns
    the group now in its place."""
    from fusec.compiler.targets import cpu as codegen_cpu
    from fusec.compiler.targets.cpu.options import FINEST_TILES
    from fusec.compiler.targets.cuda.fallback import FALLBACK_BLOCK
    from fusec.compiler.targets.cuda.options import CudaOptions
    from fusec.compiler.targets.cuda.rewrites import group_refusal
    from fusec.passes import run_pipeline
    from fusec.passes.grouping import group_alone, splice_alone

    func = group.parent
    while func is not None and func.name != "func.func":
        func = func.parent
    movement = func is None or attributes.NO_MOVEMENT not in func.attributes
    refusal = group_refusal(group, CudaOptions(movement=movement))
    if refusal is None:
        return group  # the group-level emitter builds it
    untiled = str(ir.StringAttr(group.attributes[attributes.UNTILED]).value) \
        if attributes.UNTILED in group.attributes else ""
    reason = f"{refusal} (tile emitter: {untiled})" if untiled else refusal
    mini = group_alone(group)
    run_pipeline(mini, codegen_cpu.tiled_passes(FINEST_TILES))
    tiled = splice_alone(group, mini)
    if tiled is None:
        group.attributes[attributes.UNTILED] = ir.StringAttr.get(
            f"{untiled}; the fallback path tiles it when it builds it (its tiling moves "
            f"reshapes out of the group)")
        return group
    for name in (attributes.UNTILED, attributes.PLACEMENT, attributes.CAPACITY, attributes.THREADS,
                 attributes.OCCUPANCY, attributes.REGISTERS):
        if name in tiled.attributes:
            del tiled.attributes[name]
    tiled.attributes[FALLBACK_ATTR] = ir.StringAttr.get(reason)
    tiled.attributes[TILE_KIND_ATTR] = ir.StringAttr.get(THREAD_KIND)
    tiled.attributes[BLOCK_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                      FALLBACK_BLOCK)

    def drop_mem(op: ir.Operation) -> ir.WalkResult:
        if attributes.MEM in op.attributes:  # the CPU's placement, not a GPU thread's
            del op.attributes[attributes.MEM]
        return ir.WalkResult.ADVANCE

    tiled.walk(drop_mem)
    return tiled
