"""CUDA target: emitter."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import mlir.ir as ir
from fusec.passes.constants import dense_bytes
from fusec.passes.grouping import op_key
from fusec.passes.payload import arg_reduction
from fusec.compiler.targets.cuda.built import FAST, PROBE_SYMBOL, body_text, renamed
from fusec.compiler.targets.cuda.analysis import (
    GroupGeometry,
    MapInfo,
    iterators,
    needed_ops,
    numel_of,
    op_name,
    parse_map,
    reports_failed_check,
    tensor_info,
    value_key,
)
from fusec.compiler.targets.cuda.device import (
    COMBINERS,
    ELEMENT_BYTES,
    MEMORY_ELEMENT,
    PAYLOAD_DIALECTS,
    CudaCodegenError,
    ElementwiseShape,
    RowShape,
    SIGNED_COMBINERS,
    shuffle_type,
)

# ---------------------------------------------------------------- kernel emission


@dataclass
class Full:
    names: list[str]  # one SSA name per (chunk, lane) of this thread
    type: str


@dataclass
class Col(Full):
    """A value per column of the row, the thread's columns as a `Full` value's positions:
    a generic over the row's trailing dim alone ([cols] or [1, ..., 1, cols]: an iota of the
    experts a top-k compares against), read back through a broadcast along the rows."""


@dataclass
class Row:
    name: str
    type: str


@dataclass
class RowMod(Row):
    """A value per row that repeats every `period` rows: a generic over trailing dims of
    the rows alone ([T] in a [B, T, d] row kernel: positions from an arange), computed at
    the row's own position within them (row mod period), read back through those dims."""

    period: int = 1


@dataclass
class Scalar:
    name: str
    type: str


@dataclass
class Empty:
    type: str


@dataclass
class Input:
    index: int  # kernel argument position
    type: str
    numel: int
    loads: dict = field(default_factory=dict)  # access kind -> Full | Row | Scalar
    base: str = ""  # a slice of the argument (tile emitter): its offset, an index SSA name
    contiguous: bool = True  # the slice is one contiguous run of the argument


@dataclass
class PendingReduction:
    """A reduction's per-thread partial, waiting to be combined across the block
    (`KernelEmitter.flush_reductions`)."""

    key: int  # the reduction result's value key
    partial: str
    combiner: str  # e.g. arith.addf
    wide: str  # the type it is combined in (f32 for 16-bit floats)
    type: str  # the result's element type
    init: str  # the reduction's initial value (combined in once, at the end)

    @property
    def keys(self) -> tuple:
        return (self.key,)

    def part_types(self) -> list[str]:
        return [shuffle_type(self.wide)]

    def parts(self, em: "KernelEmitter") -> list[str]:
        """The partial in the type the block combines it in (`shuffle_type`)."""
        wide = shuffle_type(self.wide)
        if wide == self.wide:
            return [self.partial]
        ext = "extsi" if COMBINERS[self.combiner] in SIGNED_COMBINERS else "extui"
        name = em.fresh("h")
        em.emit(f"{name} = arith.{ext} {self.partial} : {self.wide} to {wide}")
        return [name]

    def combine(self, em: "KernelEmitter", a: list[str], b: list[str]) -> list[str]:
        name = em.fresh("h")
        em.emit(f"{name} = {self.combiner} {a[0]}, {b[0]} : {self.part_types()[0]}")
        return [name]

    def finish(self, em: "KernelEmitter", values: list[str]) -> None:
        """The block's value combined with the init, rounded to the result's type."""
        value = values[0]
        if shuffle_type(self.wide) != self.wide:
            value = em.fresh("h")
            em.emit(f"{value} = arith.trunci {values[0]} : {shuffle_type(self.wide)} to "
                    f"{self.wide}")
        init = self.init
        if self.wide != self.type:
            init = em.fresh("w")
            em.emit(f"{init} = arith.extf {self.init} : {self.type} to {self.wide}")
        final = em.fresh("r")
        em.emit(f"{final} = {self.combiner} {value}, {init} : {self.wide}")
        if self.wide != self.type:
            narrow = em.fresh("r")
            em.emit(f"{narrow} = arith.truncf {final} : {self.wide} to {self.type}")
            final = narrow
        em.values[self.key] = Row(em.uniform_name(final), self.type)


# An argmax's / argmin's compare in the tree: the value that wins outright.
ARG_BETTER = {"max": "ogt", "min": "olt"}


@dataclass
class PendingArgReduction:
    """An argmax / argmin (torch-mlir's payload after `--fusion-nan-minmax`: the running
    value by maximumf / minimumf, the index moved while the value is larger or the first
    NaN) as per-thread (value, index) partials. Each thread folds its columns in order with
    the payload itself; the block combines pairs by the order the payload's sequential fold
    defines: a NaN first, then the larger (smaller) value, ties to the smaller index; the
    init pair is folded in last by the payload's own rule. The index travels as i32 (a
    column of the row), the value as f32 for 16-bit floats (max / min are exact in it)."""

    keys: tuple  # value keys of the (value, index) results; None where the result is dead
    value: str
    index: str  # i32
    kind: str  # "max" | "min"
    type: str  # the value's element type
    index_type: str  # the index result's type (i64)
    init: tuple  # (value, index) of the outs operands

    def part_types(self) -> list[str]:
        return [shuffle_type(self.type), "i32"]

    def parts(self, em: "KernelEmitter") -> list[str]:
        value = self.value
        if shuffle_type(self.type) != self.type:
            value = em.fresh("h")
            em.emit(f"{value} = arith.extf {self.value} : {self.type} to f32")
        return [value, self.index]

    def combine(self, em: "KernelEmitter", a: list[str], b: list[str]) -> list[str]:
        t = self.part_types()[0]

        def cmp(pred: str, x: str, y: str, type_: str = t) -> str:
            name = em.fresh("h")
            em.emit(f"{name} = arith.{'cmpi' if type_ == 'i32' else 'cmpf'} {pred}, {x}, {y}"
                    f" : {type_}")
            return name

        def logic(op: str, x: str, y: str) -> str:
            name = em.fresh("h")
            em.emit(f"{name} = arith.{op} {x}, {y} : i1")
            return name

        better = cmp(ARG_BETTER[self.kind], b[0], a[0])
        b_nan, a_num = cmp("uno", b[0], b[0]), cmp("ord", a[0], a[0])
        same = logic("ori", cmp("oeq", b[0], a[0]),
                     logic("andi", b_nan, cmp("uno", a[0], a[0])))
        first = logic("andi", same, cmp("slt", b[1], a[1], "i32"))
        take = logic("ori", logic("ori", better, logic("andi", b_nan, a_num)), first)
        out = []
        for x, y, type_ in ((b[0], a[0], t), (b[1], a[1], "i32")):
            out.append(em.fresh("h"))
            em.emit(f"{out[-1]} = arith.select {take}, {x}, {y} : {type_}")
        return out

    def finish(self, em: "KernelEmitter", values: list[str]) -> None:
        value, index = values
        if shuffle_type(self.type) != self.type:
            narrow = em.fresh("r")
            em.emit(f"{narrow} = arith.truncf {value} : f32 to {self.type}")
            value = narrow
        wide_index = em.fresh("r")
        em.emit(f"{wide_index} = arith.extsi {index} : i32 to {self.index_type}")
        init_value, init_index = self.init
        # The payload's rule, the block's pair as the element: it moves the init while the
        # init's value is a number and the pair's is larger (smaller) or NaN.
        moved, ordered, take = em.fresh("r"), em.fresh("r"), em.fresh("r")
        em.emit(f"{moved} = arith.cmpf {'ugt' if self.kind == 'max' else 'ult'}, {value}, "
                f"{init_value} : {self.type}")
        em.emit(f"{ordered} = arith.cmpf ord, {init_value}, {init_value} : {self.type}")
        em.emit(f"{take} = arith.andi {moved}, {ordered} : i1")
        finals = []
        for x, y, type_ in ((value, init_value, self.type),
                            (wide_index, init_index, self.index_type)):
            finals.append(em.fresh("r"))
            em.emit(f"{finals[-1]} = arith.select {take}, {x}, {y} : {type_}")
        for key, final, type_ in zip(self.keys, finals, (self.type, self.index_type)):
            if key is not None:
                em.values[key] = Row(em.uniform_name(final), type_)


def _external_reads(op: ir.Operation) -> list[int]:
    """Keys of the values `op` (and its regions) read that are defined outside it."""
    inside: set[int] = set()
    reads: list[int] = []

    def visit(inner: ir.Operation) -> ir.WalkResult:
        for region in inner.regions:
            for block in region.blocks:
                inside.update(value_key(a) for a in block.arguments)
        inside.update(value_key(r) for r in inner.results)
        reads.extend(value_key(v) for v in inner.operands)
        return ir.WalkResult.ADVANCE

    op.operation.walk(visit)
    return [k for k in dict.fromkeys(reads) if k not in inside]


class KernelEmitter:
    """Emits one `gpu.func` for one group as MLIR text (see the module docstring)."""

    def __init__(self, group: ir.Operation, symbol: str, geometry: GroupGeometry,
                 constants: list[ir.Operation] = ()) -> None:
        self.group = group
        self.symbol = symbol
        self.signatures: dict = {}  # payload_op_text's cache, for this build
        self.geo = geometry
        self.lines: list[str] = []
        self.indent = 3
        self.counter = 0
        self.values: dict[int, Any] = {}
        self.consts: dict[tuple[str, str], str] = {}
        self.uniform: set[str] = set()
        self.reciprocals: dict[str, str] = {}
        self.pending: list[PendingReduction] = []
        self.workgroup: list[tuple[str, str]] = []  # shared-memory buffers (name, type)
        self.cache: dict[str, str] = {}
        # Results of suffix-domain generics (`_suffix_op`): value key -> trailing dims.
        self.suffix_values: dict[int, int] = {}
        body = group.regions[0].blocks[0]
        self.arg_types: list[tuple[int, str]] = []  # (numel, element type) per kernel argument
        for i, arg in enumerate(body.arguments):
            shape, elt = tensor_info(arg.type)
            self.values[value_key(arg)] = Input(i, elt, numel_of(shape))
            self.arg_types.append((numel_of(shape), elt))
        # Tensor constants (weights) are kernel arguments after the inputs.
        for op in constants:
            shape, elt = tensor_info(op.results[0].type)
            self.values[value_key(op.results[0])] = Input(len(self.arg_types), elt, numel_of(shape))
            self.arg_types.append((numel_of(shape), elt))
        yield_op = body.operations[len(body.operations) - 1]
        self.outputs = list(yield_op.operands)
        self.num_inputs = len(self.arg_types)
        for v in self.outputs:
            shape, elt = tensor_info(v.type)
            self.arg_types.append((numel_of(shape), elt))

    # -- text helpers

    def fresh(self, hint: str = "v") -> str:
        self.counter += 1
        return f"%{hint}{self.counter}"

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.indent + line)

    def const(self, value: Any, type_: str) -> str:
        if type_ == "i1" and str(value) in ("true", "false"):
            value = 1 if str(value) == "true" else 0  # `arith.constant true` has no type
        key = (str(value), type_)
        if key not in self.consts:
            name = self.fresh("c")
            self.consts[key] = name
            self.prologue.append(f"{name} = arith.constant {value} : {type_}")
            self.uniform.add(name)
        return self.consts[key]

    def uniform_name(self, name: str) -> str:
        """Record that `name` has one value for the whole block (a row value or constant)."""
        self.uniform.add(name)
        return name

    def reciprocal(self, name: str, type_: str) -> str:
        """1 / `name` for a uniform divisor, computed once (x / s becomes x * (1/s))."""
        if name not in self.reciprocals:
            one = self.const("1.0", type_)
            r = self.fresh("q")
            self.emit(f"{r} = arith.divf {one}, {name} : {type_}")
            self.reciprocals[name] = self.uniform_name(r)
        return self.reciprocals[name]

    def index(self, n: int) -> str:
        return self.const(n, "index")

    def arith(self, op: str, a: str, b: str, type_: str = "index") -> str:
        name = self.fresh("i")
        self.emit(f"{name} = arith.{op} {a}, {b} : {type_}")
        return name

    def memref(self, arg: int) -> str:
        numel, elt = self.arg_types[arg]
        return f"memref<{numel}x{MEMORY_ELEMENT.get(elt, elt)}>"

    # -- memory access

    def load_vector(self, arg: int, offset: str, vec: int) -> list[str]:
        elt = self.arg_types[arg][1]
        if elt in MEMORY_ELEMENT:
            # A bool is a byte in every buffer (the plan's "bool", the fallback's widened
            # i1): read bytes and narrow; a vector of i1 in memory would be packed bits.
            wide = MEMORY_ELEMENT[elt]
            names = []
            for lane in self._load_lanes(arg, offset, vec, wide):
                name = self.fresh("x")
                self.emit(f"{name} = arith.trunci {lane} : {wide} to {elt}")
                names.append(name)
            return names
        return self._load_lanes(arg, offset, vec, elt)

    def _load_lanes(self, arg: int, offset: str, vec: int, elt: str) -> list[str]:
        if vec == 1:
            name = self.fresh("x")
            self.emit(f"{name} = memref.load %arg{arg}[{offset}] : {self.memref(arg)}")
            return [name]
        vname = self.fresh("x")
        align = vec * ELEMENT_BYTES.get(elt, 4)
        self.emit(f"{vname} = vector.load %arg{arg}[{offset}] {{alignment = {align} : i64}} : "
                  f"{self.memref(arg)}, vector<{vec}x{elt}>")
        return self.vector_lanes(vname, vec, elt, "x")

    def vector_lanes(self, vname: str, vec: int, elt: str, hint: str) -> list[str]:
        """The `vec` elements of vector value `vname`, one SSA name each."""
        lanes = []
        for lane in range(vec):
            name = self.fresh(hint)
            self.emit(f"{name} = vector.extract {vname}[{lane}] : {elt} from vector<{vec}x{elt}>")
            lanes.append(name)
        return lanes

    def store_vector(self, arg: int, offset: str, lanes: list[str]) -> None:
        elt = self.arg_types[arg][1]
        if elt in MEMORY_ELEMENT:  # bools are stored as bytes (see load_vector)
            wide = MEMORY_ELEMENT[elt]
            widened = []
            for lane in lanes:
                name = self.fresh("y")
                self.emit(f"{name} = arith.extui {lane} : {elt} to {wide}")
                widened.append(name)
            lanes, elt = widened, wide
        vec = len(lanes)
        if vec == 1:
            self.emit(f"memref.store {lanes[0]}, %arg{arg}[{offset}] : {self.memref(arg)}")
            return
        vname = self.fresh("y")
        self.emit(f"{vname} = vector.from_elements {', '.join(lanes)} : vector<{vec}x{elt}>")
        align = vec * ELEMENT_BYTES.get(elt, 4)
        self.emit(f"vector.store {vname}, %arg{arg}[{offset}] {{alignment = {align} : i64}} : "
                  f"{self.memref(arg)}, vector<{vec}x{elt}>")

    # -- geometry: offsets of this thread's chunks

    def load_input(self, inp: Input, access: str) -> Any:
        if access in inp.loads:
            return inp.loads[access]
        if access == "full":
            names: list[str] = []
            for off in self.full_offsets:
                names += self.load_vector(inp.index, off, self.vec)
            result: Any = Full(names, inp.type)
        elif access == "col":
            names = []
            for off in self.col_offsets:
                names += self.load_vector(inp.index, off, self.vec)
            result = Full(names, inp.type)
        elif access == "row":
            result = Row(self.uniform_name(self.load_vector(inp.index, self.row_index, 1)[0]),
                         inp.type)
        elif access.startswith("suffix:"):  # rows (bid mod m) of an [m, cols] tensor
            base = self.arith("muli", self.arith("remui", self.row_index,
                                                 self.index(int(access[7:]))),
                              self.index(self.geo.cols))
            names = []
            for off in self.col_offsets:
                names += self.load_vector(inp.index, self.arith("addi", base, off), self.vec)
            result = Full(names, inp.type)
        elif access.startswith("rowmod:"):  # one value per row: element (bid mod m)
            where = self.arith("remui", self.row_index, self.index(int(access[7:])))
            result = Row(self.uniform_name(self.load_vector(inp.index, where, 1)[0]), inp.type)
        else:  # scalar
            result = Scalar(self.uniform_name(self.load_vector(inp.index, self.index(0), 1)[0]),
                            inp.type)
        inp.loads[access] = result
        return result

    # -- evaluation of the group's ops

    def lookup(self, value: ir.Value) -> Any:
        key = value_key(value)
        if key not in self.values:
            raise CudaCodegenError(f"value {value.get_name()} is defined outside the group")
        return self.values[key]

    def run_body(self) -> None:
        """Evaluate the group's ops in dependence order, reductions as early as possible.

        An op waits while it reads a reduction that is not combined across the block yet;
        when every remaining op waits, all pending reductions are combined in one round
        (LayerNorm's f32 mean and f64 mean share a round: 2 barriers instead of 6).
        """
        todo = self.body_ops()
        reads = {id_of(op): _external_reads(op) for op in todo}
        while todo:
            pending = {k for r in self.pending for k in r.keys}
            for k, op in enumerate(todo):
                keys = reads[id_of(op)]
                if all(key in self.values and key not in pending for key in keys):
                    todo.pop(k)
                    self.eval_op(op)
                    break
            else:
                if not self.pending:
                    raise CudaCodegenError("group ops read values defined nowhere")
                self.flush_reductions()
        self.flush_reductions()

    def body_ops(self) -> list[ir.Operation]:
        """The ops the kernel evaluates: the group's (the tile emitter: its tile's)."""
        body = self.group.regions[0].blocks[0]
        return [op for op in body.operations if op.operation.name != "fusion.yield"]

    def eval_op(self, op: ir.Operation) -> None:
        name = op.operation.name
        if name == "arith.constant":
            self.eval_constant(op)
        elif name == "tensor.empty":
            self.values[value_key(op.results[0])] = Empty(str(op.results[0].type))
        elif name == "linalg.fill":
            value = self.lookup(op.operands[0])
            if not isinstance(value, Scalar):
                raise CudaCodegenError("linalg.fill of a non-scalar value")
            self.values[value_key(op.results[0])] = value
        elif name in ("tensor.expand_shape", "tensor.collapse_shape"):
            self.values[value_key(op.results[0])] = self.lookup(op.operands[0])
        elif name == "linalg.generic":
            self.eval_generic(op)

    def flush_reductions(self) -> None:
        """Combine every pending per-thread partial across the block, in one round.

        Per value: 5 xor-shuffles within the warp; lane 0 of each warp writes its warp's
        value to a shared-memory slot of its own (one buffer per value, so rounds never
        overwrite what another warp still reads); one barrier; then every warp loads the
        per-warp values (lane l the value of warp l mod warps) and combines them with
        xor-shuffles again, so every thread holds the result with no second barrier. A
        pending item is one value (`PendingReduction`) or several combined together (an
        argmax's value and index, `PendingArgReduction`).
        """
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        block = self.geo.shape.block
        warps = max(1, block // 32)
        width = min(block, 32)
        partials = [self.warp_reduce(r.parts(self), r, width) for r in pending]
        if warps > 1:
            lane = self.lane_index()
            warp = self.warp_index()
            is_lane0 = self.fresh("i")
            self.emit(f"{is_lane0} = arith.cmpi eq, {lane}, {self.index(0)} : index")
            self.emit(f"scf.if {is_lane0} {{")
            self.indent += 1
            buffers = []
            for r, values in zip(pending, partials):
                bufs = []
                for value, type_ in zip(values, r.part_types()):
                    buf = f"%wg{len(self.workgroup)}"
                    mtype = f"memref<{warps}x{type_}, #gpu.address_space<workgroup>>"
                    self.workgroup.append((buf, mtype))
                    bufs.append((buf, mtype))
                    self.emit(f"memref.store {value}, {buf}[{warp}] : {mtype}")
                buffers.append(bufs)
            self.indent -= 1
            self.emit("}")
            self.emit("gpu.barrier")
            # Lane l reads warp (l mod warps)'s value: every group of `warps` consecutive
            # lanes holds all of them once, so a butterfly over `warps` lanes leaves the
            # block's total in *every* lane (warps is a power of two).
            slot = self.arith("remui", lane, self.index(warps))
            combined = []
            for r, bufs in zip(pending, buffers):
                loaded = []
                for buf, mtype in bufs:
                    loaded.append(self.fresh("z"))
                    self.emit(f"{loaded[-1]} = memref.load {buf}[{slot}] : {mtype}")
                combined.append(self.warp_reduce(loaded, r, warps))
            partials = combined
        for r, values in zip(pending, partials):
            r.finish(self, values)

    def warp_reduce(self, values: list[str], r: Any, width: int) -> list[str]:
        """Butterfly (xor) reduction over the first `width` lanes of each warp (a power of 2)
        of a pending item's parts (`r.part_types()`), combined by `r.combine`."""
        offset = 1
        while offset < width:
            others = []
            for value, type_ in zip(values, r.part_types()):
                other = self.fresh("h")
                self.emit(f"{other}, %{other[1:]}ok = gpu.shuffle xor {value}, "
                          f"{self.const(offset, 'i32')}, {self.const(32, 'i32')} : {type_}")
                others.append(other)
            values = r.combine(self, values, others)
            offset *= 2
        return values

    def lane_index(self) -> str:
        if "lane" not in self.cache:
            self.cache["lane"] = self.arith("remui", "%tid", self.index(32))
        return self.cache["lane"]

    def warp_index(self) -> str:
        if "warp" not in self.cache:
            self.cache["warp"] = self.arith("divui", "%tid", self.index(32))
        return self.cache["warp"]

    def eval_constant(self, op: ir.Operation) -> None:
        result = op.results[0]
        if value_key(result) in self.values:  # a weight passed as a kernel argument
            return
        attr = op.attributes["value"]
        if isinstance(result.type, ir.RankedTensorType):
            dense = attr if isinstance(attr, ir.DenseElementsAttr) else None
            if dense is None or not dense.is_splat:
                raise CudaCodegenError(
                    "tensor constant (weights) inside a group is not supported yet: "
                    "pass it as an input")
            splat = dense.get_splat_value()
            elt = str(splat.type)
            self.values[value_key(result)] = Scalar(self.const(_attr_value(splat), elt), elt)
            return
        type_ = str(result.type)
        self.values[value_key(result)] = Scalar(self.const(_attr_value(attr), type_), type_)

    def access(self, value: Any, m: MapInfo, domain: str) -> tuple[str, Any]:
        """What `value` read through map `m` is in a `domain` ("full"/"row") iteration."""
        dims = [r for r in m.results if r is not None]
        if not dims or (isinstance(value, Input) and value.numel == 1):
            kind = "scalar"  # one element: index 0, whatever the map (a [1, 1, 1] input)
        elif domain == "row":
            kind = "row"
        elif dims == list(range(m.num_dims)):
            kind = "full"
        elif dims == list(range(m.num_dims - 1)):
            kind = "row"
        elif dims == [m.num_dims - 1]:
            kind = "col"
        elif self.geo.kind == "row" and dims == list(range(dims[0], m.num_dims - 1)) and \
                isinstance(value, (Input, RowMod)):
            # Trailing dims of the rows alone: the value at (row mod its element count).
            if isinstance(value, Input):
                return "row", self.load_input(value, f"rowmod:{value.numel}")
            return "row", value
        else:
            raise CudaCodegenError(f"access pattern {m} is not an element, row or column")
        if isinstance(value, Input):
            return kind, self.load_input(value, kind)
        if isinstance(value, Col) and kind != "col":
            raise CudaCodegenError(f"a per-column value is read as a {kind}")
        if isinstance(value, Full) and not isinstance(value, Col) and kind not in ("full",):
            raise CudaCodegenError(f"a full tensor is read as a {kind}")
        if isinstance(value, Row) and kind not in ("row", "scalar"):
            # One value per row (a [rows] vector, or a [1, cols] one the emitter computed
            # per row because it has as many elements): not the column a map asks for.
            raise CudaCodegenError(f"a row value is read as a {kind}")
        return kind, value

    def _row_suffix(self, op: ir.Operation, out_shape: list[int]) -> bool:
        """Whether a parallel generic runs over trailing dims of the rows alone (`RowMod`):
        its shape, unit dims aside, is a proper suffix of the rows' dims'."""
        rows = [e for e in self.geo.full_shape[:-1] if e != 1]
        own = [e for e in out_shape if e != 1]
        return self.geo.kind == "row" and "reduction" not in iterators(op) and \
            0 < len(own) < len(rows) and rows[-len(own):] == own and \
            not any(value_key(v) == value_key(r) for v in self.outputs for r in op.results)

    def rowmod_access(self, value: Any, m: MapInfo, period: int) -> Any:
        """An operand of a per-row-position generic (`RowMod`): a scalar, a value of the
        same period, or an input of one value per position read in order."""
        dims = [r for r in m.results if r is not None]
        if isinstance(value, Scalar) or not dims or \
                (isinstance(value, Input) and value.numel == 1):
            return self.access(value, m, "full")[1]
        if dims != sorted(dims):
            raise CudaCodegenError(f"a per-row-position generic reads an operand through {m}")
        if isinstance(value, Input) and value.numel == period:
            return self.load_input(value, f"rowmod:{period}")
        if isinstance(value, RowMod) and value.period == period:
            return value
        raise CudaCodegenError(f"a per-row-position generic reads a {type(value).__name__}")

    def _suffix_op(self, op: ir.Operation, out_shape: list[int]) -> bool:
        """A parallel generic over the group domain's trailing dims (a causal mask [T, T] in
        a [B, H, T, T] softmax), every read a row/column/suffix of its own domain: computed
        for every element of the group's domain (`suffix_access`), its result read back
        through the trailing-dims map as a full value (`seen_through`)."""
        full = list(self.geo.full_shape)
        k = len(out_shape)
        if self.geo.kind != "row" or not 2 <= k < len(full) or full[-k:] != out_shape or \
                len(op.results) != 1 or "reduction" in iterators(op) or \
                any(value_key(v) == value_key(op.results[0]) for v in self.outputs):
            return False  # (a group output must be stored in its own shape)
        self.suffix_values[value_key(op.results[0])] = k
        return True

    def suffix_access(self, value: ir.Value, m: MapInfo, out_shape: list[int]) -> Any:
        """An input of a suffix-domain generic (`_suffix_op`) for the group's domain."""
        rep = self.lookup(value)
        k = len(out_shape)
        dims = [r for r in m.results if r is not None]
        if not dims or isinstance(rep, Scalar):
            return self.access(rep, m, "full")[1]
        if dims == list(range(k)) and self.suffix_values.get(value_key(value)) == k:
            return rep  # another generic's over the same trailing dims, in order
        if dims == [k - 1] and isinstance(rep, Col):
            return rep  # computed per column: the thread's columns
        if dims and dims == list(range(dims[0], k - 1)) and isinstance(rep, RowMod) and \
                rep.period == numel_of(out_shape[dims[0]:k - 1]):
            return rep  # computed at the row's position in those dims
        if not isinstance(rep, Input):
            raise CudaCodegenError("a suffix-domain generic reads a computed tensor")
        if dims == list(range(k)):
            return self.load_input(rep, f"suffix:{numel_of(out_shape[:-1])}")
        if dims == [k - 1]:
            return self.load_input(rep, "col")
        if dims == list(range(dims[0], k - 1)):
            return self.load_input(rep, f"rowmod:{numel_of(out_shape[dims[0]:k - 1])}")
        raise CudaCodegenError(f"access pattern {m} of a suffix-domain generic")

    def seen_through(self, value: ir.Value, m: MapInfo) -> MapInfo:
        """`m`, or the identity when it reads a suffix-domain result through its trailing
        dims (the value is already per element of the group's domain)."""
        k = self.suffix_values.get(value_key(value))
        if k is not None and m.results == tuple(range(m.num_dims - k, m.num_dims)):
            return MapInfo(m.num_dims, tuple(range(m.num_dims)))
        if k is not None:
            raise CudaCodegenError(f"a suffix-domain result read through {m}")
        return m

    def eval_generic(self, op: ir.Operation) -> None:
        if any(reports_failed_check(o.operation, deferred=True)
               for o in op.regions[0].blocks[0].operations):
            # Its payload would drop the report (no result needs it): the data-movement
            # family evaluates each check (`MovementEmitter.report_index_error`).
            raise CudaCodegenError("a payload that reports a failed check (an index out of "
                                   "range, an integer division by zero)")
        iters = iterators(op)
        maps = [parse_map(a) for a in op.attributes["indexing_maps"]]
        reads = self.access_maps(op, maps)
        seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        n_in = seg[0]
        ins, outs = list(op.operands)[:n_in], list(op.operands)[n_in:]
        block = op.regions[0].blocks[0]
        live = _live_results(op, self)
        reduction = "reduction" in iters
        if reduction:
            self.check_reduction(iters)
        for m in maps[n_in:]:
            self.check_output_map(m)
        domain = self.generic_domain(op, reduction)
        out_shape = tensor_info(op.results[0].type)[0]
        column_domain = domain == "col"
        if domain == "suffix":
            operands_in = [self.suffix_access(v, m, out_shape) for v, m in zip(ins, maps)]
            domain = "full"  # computed for every element of the group's domain
        elif column_domain:
            operands_in = [self.column_access(self.lookup(v), m) for v, m in zip(ins, maps)]
            domain = "full"  # computed at each of the thread's columns
        elif domain == "rowmod":
            period = numel_of(out_shape)
            operands_in = [self.rowmod_access(self.lookup(v), m, period)
                           for v, m in zip(ins, maps)]
        else:
            if domain == "row":
                self.check_row_reads(op, ins, maps)
            operands_in = [self.access(self.lookup(v), self.seen_through(v, m), domain)[1]
                           for v, m in zip(ins, reads)]
        out_vals = [self.lookup(v) for v in outs]
        positions = len(self.full_offsets) * self.vec if domain == "full" else 1
        terminator = block.operations[len(block.operations) - 1]
        yielded = list(terminator.operands)

        if not reduction:
            results: list[list[str]] = [[] for _ in op.results]
            wanted = [yielded[j] for j in live]
            indices = self.live_indices(op, block, wanted)
            for p in range(positions):
                env: dict[int, str] = {}
                for arg, val in zip(list(block.arguments)[:n_in], operands_in):
                    env[value_key(arg)] = _element(val, p)
                for j, (arg, val) in enumerate(zip(list(block.arguments)[n_in:], out_vals)):
                    if not isinstance(val, Empty):
                        if column_domain or domain == "rowmod":
                            raise CudaCodegenError("a per-column or per-row-position generic "
                                                   "reads its init")
                        env[value_key(arg)] = _element(
                            self.access(val, reads[n_in + j], domain)[1], p)
                self.bind_indices(indices, env, p, "col" if column_domain else domain)
                outs_p = self.emit_payload(block, env, wanted)
                for j, name in zip(live, outs_p):
                    results[j].append(name)
            for j in live:
                type_ = tensor_info(op.results[j].type)[1]
                if column_domain:
                    rep: Any = Col(results[j], type_)
                elif domain == "rowmod":
                    rep = RowMod(self.uniform_name(results[j][0]), type_, numel_of(out_shape))
                elif domain == "full":
                    rep = Full(results[j], type_)
                else:
                    rep = Row(self.uniform_name(results[j][0]), type_)
                self.values[value_key(op.results[j])] = rep
            return

        arg = arg_reduction(op)
        if arg is not None:
            self.fold_arg_pair(op, arg, operands_in, out_vals, reads, positions, domain)
            return

        # Reduction over the last dimension: fold this thread's elements, then the block.
        # 16-bit floats accumulate in f32 (as PyTorch's reductions do): the payload up to the
        # combiner runs as written, the combining runs in f32, the result is rounded once.
        combiners, wide, folded = {}, {}, {}
        for j in live:
            acc_arg = block.arguments[n_in + j]
            combiners[j] = _combiner(yielded[j], acc_arg)
            type_ = tensor_info(op.results[j].type)[1]
            wide[j] = "f32" if type_ in ("bf16", "f16") else type_
            if wide[j] != type_:
                others = [v for v in yielded[j].owner.operands
                          if value_key(v) != value_key(acc_arg)]
                folded[j] = others[0]
        accs = {}
        for j in live:
            accs[j] = self.const(_neutral(combiners[j], wide[j]), wide[j])
        wanted = [folded.get(j, yielded[j]) for j in live]
        indices = self.live_indices(op, block, wanted)
        for p in range(positions):
            env = {}
            for arg, val in zip(list(block.arguments)[:n_in], operands_in):
                env[value_key(arg)] = _element(val, p)
            for j in live:
                if j not in folded:
                    env[value_key(block.arguments[n_in + j])] = accs[j]
            self.bind_indices(indices, env, p, domain)
            outs_p = self.emit_payload(block, env, wanted)
            mask = self.masks.get(p // self.vec) if domain == "full" else None
            for j, name in zip(live, outs_p):
                if j in folded:
                    narrow = tensor_info(op.results[j].type)[1]
                    ext = self.fresh("w")
                    self.emit(f"{ext} = arith.extf {name} : {narrow} to {wide[j]}")
                    name = self.fresh("w")
                    self.emit(f"{name} = {combiners[j]} {ext}, {accs[j]} : {wide[j]}")
                if mask is not None:
                    kept = self.fresh("s")
                    self.emit(f"{kept} = arith.select {mask}, {name}, {accs[j]} : {wide[j]}")
                    name = kept
                accs[j] = name
        for j in live:
            type_ = tensor_info(op.results[j].type)[1]
            init = self.access(out_vals[j], reads[n_in + j], "full")[1]
            if isinstance(init, Empty):
                raise CudaCodegenError("reduction into an uninitialised tensor")
            # Combined across the block later, together with every other reduction that is
            # ready by then (one barrier per round): see flush_reductions.
            self.pending.append(PendingReduction(
                value_key(op.results[j]), accs[j], combiners[j], wide[j], type_,
                _element(init, 0)))

    def fold_arg_pair(self, op: ir.Operation, arg: tuple, operands_in: list, out_vals: list,
                      maps: list[MapInfo], positions: int, domain: str) -> None:
        """An argmax / argmin over the row (`payload.arg_reduction`): this thread's columns folded in
        order by the payload itself from (the neutral value, 0), then a pending pair
        (`PendingArgReduction`). The payload's `linalg.index` of the reduced loop is the
        column."""
        jv, ji, kind, index_op = arg
        n_in = len(operands_in)
        block = op.regions[0].blocks[0]
        yielded = list(block.operations[len(block.operations) - 1].operands)
        if self.geo.kind != "row" or domain != "full":
            raise CudaCodegenError("an argmax / argmin outside a row kernel")
        vtype = tensor_info(op.results[jv].type)[1]
        itype = tensor_info(op.results[ji].type)[1]
        acc_v = self.const(_neutral("arith.maximumf" if kind == "max" else "arith.minimumf",
                                    vtype), vtype)
        acc_i = self.const(0, itype)
        for p in range(positions):
            env = {}
            for a, val in zip(list(block.arguments)[:n_in], operands_in):
                env[value_key(a)] = _element(val, p)
            env[value_key(block.arguments[n_in + jv])] = acc_v
            env[value_key(block.arguments[n_in + ji])] = acc_i
            column = self.col_offsets[p // self.vec]
            if p % self.vec:
                column = self.arith("addi", column, self.index(p % self.vec))
            env[value_key(index_op.results[0])] = column
            new_v, new_i = self.emit_payload(block, env, [yielded[jv], yielded[ji]])
            mask = self.masks.get(p // self.vec)
            if mask is not None:
                kept_v, kept_i = self.fresh("s"), self.fresh("s")
                self.emit(f"{kept_v} = arith.select {mask}, {new_v}, {acc_v} : {vtype}")
                self.emit(f"{kept_i} = arith.select {mask}, {new_i}, {acc_i} : {itype}")
                new_v, new_i = kept_v, kept_i
            acc_v, acc_i = new_v, new_i
        narrow = self.fresh("w")
        self.emit(f"{narrow} = arith.trunci {acc_i} : {itype} to i32")
        inits = tuple(_element(self.access(out_vals[j], maps[n_in + j], "full")[1], 0)
                      for j in (jv, ji))
        if any(isinstance(out_vals[j], Empty) for j in (jv, ji)):
            raise CudaCodegenError("reduction into an uninitialised tensor")
        live = _live_results(op, self)
        keys = tuple(value_key(op.results[j]) if j in live else None for j in (jv, ji))
        self.pending.append(PendingArgReduction(keys, acc_v, narrow, kind, vtype, itype,
                                                inits))

    def check_row_reads(self, op: ir.Operation, ins: list[ir.Value], maps: list[MapInfo]) -> None:
        """A generic computing one value per row reads each tensor operand at the row's own
        index (block b: element b): its map must be the identity on the loops longer than 1,
        over an operand of as many elements. A bias read along one of several row dims
        ((d0, d1) -> (d1) over [17, 17] rows) is not element b: refused (found by
        test/gpu/fuzz_cuda.py)."""
        from fusec.passes.tiling.place import loop_ranges

        ranges = loop_ranges(op) or []
        long = [d for d, e in enumerate(ranges) if e > 1]
        points = math.prod(e or 1 for e in ranges)
        for v, m in zip(ins, maps):
            if not isinstance(v.type, ir.RankedTensorType):
                continue
            numel = numel_of(tensor_info(v.type)[0])
            if numel == 1 or not any(r is not None for r in m.results):
                continue  # one value for every row
            read = [r for r in m.results if r is not None and ranges[r] > 1]
            if read != long or numel != points:
                raise CudaCodegenError(f"a per-row value reads an operand through {m}, "
                                       f"not at the row's own index")

    def check_output_map(self, m: MapInfo) -> None:
        """A result is stored at the thread's positions of the group's domain: its map must
        keep the loops' order (no transpose on the way out)."""
        dims = [r for r in m.results if r is not None]
        if dims != sorted(dims):
            raise CudaCodegenError(f"an output written through {m} (a transpose)")

    def check_reduction(self, iters: list[str]) -> None:
        """Refuse a reduction this emitter cannot combine (only over the last dim)."""
        if iters[-1] != "reduction" or iters.count("reduction") != 1:
            raise CudaCodegenError("only reductions over the last dimension are supported")

    def generic_domain(self, op: ir.Operation, reduction: bool) -> str:
        """How a generic's elements map onto this thread: "full" (the thread's elements of
        the group's domain), "row" (one value per row) or "suffix" (`_suffix_op`)."""
        if reduction:
            # Each block folds its own row: the reduced loop must be the row (cols) and the
            # others the rows. A reduction over values of several rows (a degenerate [1, 3]
            # sum in a [3, 1] group, found by test/gpu/fuzz_cuda.py) is refused.
            from fusec.passes.tiling.place import loop_ranges

            ranges = loop_ranges(op) or []
            iters = iterators(op)
            reduced = math.prod(e for e, k in zip(ranges, iters) if k == "reduction")
            kept = math.prod(e for e, k in zip(ranges, iters) if k != "reduction")
            if self.geo.kind == "row" and (reduced != self.geo.cols or kept != self.geo.rows):
                raise CudaCodegenError(f"a reduction of {reduced} values per row over "
                                       f"{kept} rows does not fit the group's "
                                       f"{self.geo.rows}x{self.geo.cols} rows")
            return "full"
        if self.geo.kind == "elementwise":
            return "full"
        out_shape, _ = tensor_info(op.results[0].type)
        numel = numel_of(out_shape)
        if numel == self.geo.rows * self.geo.cols and (not out_shape or
                                                        out_shape[-1] == self.geo.cols):
            return "full"
        if numel == self.geo.rows or numel == 1:
            return "row"
        if self.geo.kind == "row" and numel == self.geo.cols and out_shape[-1] == self.geo.cols \
                and "reduction" not in iterators(op):
            return "col"  # over the row's trailing dim alone: a value per column
        if self._row_suffix(op, out_shape):
            return "rowmod"
        if self._suffix_op(op, out_shape):
            return "suffix"
        raise CudaCodegenError(f"linalg.generic of shape {out_shape} does not fit "
                               f"the group's {self.geo.rows}x{self.geo.cols} rows")

    def access_maps(self, op: ir.Operation, maps: list[MapInfo]) -> list[MapInfo]:
        """`maps` as `access` classifies them: over the op's loops longer than 1 but the last
        (a keepdim reduction's loop of extent 1, [2, 16, 1, 4] -> [2, 16, 1], reads its input
        through (d0, d1, d3): an element of the [32, 4] rows)."""
        from fusec.passes.tiling.place import loop_ranges

        ranges = loop_ranges(op) or []
        # The last loop is the row's column whatever its extent: a [.., 3, 2, 1] broadcast
        # (repeat_interleave of a [.., 3, 1]) squeezed of it would read (d0, d1, d2) as a row.
        unit = {d for d, e in enumerate(ranges[:-1]) if e == 1}
        if not unit:
            return maps
        kept = {d: i for i, d in enumerate(d for d in range(len(ranges)) if d not in unit)}
        return [MapInfo(len(kept), tuple(None if r is None or r in unit else kept[r]
                                         for r in m.results)) for m in maps]

    def column_access(self, value: Any, m: MapInfo) -> Any:
        """An operand of a per-column generic (`Col`) at the thread's columns: a scalar, a
        per-column value, or an input of one value per column read along the column."""
        dims = [r for r in m.results if r is not None]
        if isinstance(value, Scalar) or not dims or \
                (isinstance(value, Input) and value.numel == 1):
            return self.access(value, m, "full")[1]
        if dims != [m.num_dims - 1]:
            raise CudaCodegenError(f"a per-column generic reads an operand through {m}")
        if isinstance(value, Input) and value.numel == self.geo.cols:
            return self.load_input(value, "col")
        if isinstance(value, Col):
            return value
        raise CudaCodegenError(f"a per-column generic reads a {type(value).__name__} value")

    def live_indices(self, op: ir.Operation, block: ir.Block,
                     wanted: list[ir.Value]) -> tuple[list[int], list[tuple[int, int]]]:
        """The live `linalg.index` ops of `op`'s payload, as (op's loop ranges, [(result key,
        dim)]): asked once per op, bound per position by `bind_indices`. The loops must be
        the op's result dims in order (an identity output map)."""
        needed = needed_ops(block, wanted)
        indices = [(value_key(inner.results[0]), ir.IntegerAttr(inner.attributes["dim"]).value)
                   for inner in block.operations
                   if inner.operation.name == "linalg.index" and id_of(inner) in needed]
        if not indices:
            return [], []
        from fusec.passes.tiling.place import loop_ranges

        ranges = list(loop_ranges(op) or [])
        out = parse_map(list(op.attributes["indexing_maps"])[len(op.operands) - len(op.results)])
        if not ranges or any(not isinstance(e, int) or e < 1 for e in ranges) or \
                ("reduction" not in iterators(op) and out.results != tuple(range(out.num_dims))):
            raise CudaCodegenError("linalg.index in a generic whose loops are not its result's "
                                   "dims in order")
        return ranges, indices

    def bind_indices(self, live: tuple[list[int], list[tuple[int, int]]], env: dict[int, str],
                     p: int, domain: str) -> None:
        """Give each live `linalg.index` (`live_indices`) its loop's position at this thread's
        position `p`: the column for the row's trailing loop, the row's index (or, in an
        elementwise kernel, the element's) taken apart over the op's loop ranges for the
        others."""
        ranges, indices = live
        for key, d in indices:
            cached = ("index", tuple(ranges), d, p, domain)
            if cached not in self.cache:
                self.cache[cached] = self.loop_position(ranges, d, p, domain)
            env[key] = self.cache[cached]

    def loop_position(self, ranges: list[int], d: int, p: int, domain: str) -> str:
        """Loop `d`'s position (an index value) at thread position `p` (see bind_indices)."""
        if ranges[d] == 1:
            return self.index(0)
        if self.geo.kind == "row" and domain in ("full", "col") and d == len(ranges) - 1:
            if domain == "full" and numel_of(ranges) != self.geo.rows * self.geo.cols or \
                    ranges[-1] != self.geo.cols:
                raise CudaCodegenError(f"linalg.index over loops {ranges} in a "
                                       f"{self.geo.rows}x{self.geo.cols} row kernel")
            column = self.col_offsets[p // self.vec]
            return self.arith("addi", column, self.index(p % self.vec)) if p % self.vec \
                else column
        if self.geo.kind == "row" and domain == "col":
            raise CudaCodegenError(f"linalg.index over loops {ranges} of a per-column generic")
        if domain == "rowmod":
            linear, within = self.arith("remui", self.row_index,
                                        self.index(numel_of(ranges))), ranges
        elif self.geo.kind == "row":
            outer = ranges[:-1] if domain == "full" else ranges
            if numel_of(outer) != self.geo.rows:
                raise CudaCodegenError(f"linalg.index over loops {ranges} in a "
                                       f"{self.geo.rows}x{self.geo.cols} row kernel")
            linear, within = self.row_index, outer
        else:  # an elementwise kernel: the element's position
            if numel_of(ranges) != self.geo.cols * self.geo.rows:
                raise CudaCodegenError(f"linalg.index over loops {ranges} in an elementwise "
                                       f"kernel of {self.geo.cols} elements")
            linear = self.full_offsets[p // self.vec]
            if p % self.vec:
                linear = self.arith("addi", linear, self.index(p % self.vec))
            within = ranges
        stride = numel_of(within[d + 1:])
        if stride > 1:
            linear = self.arith("divui", linear, self.index(stride))
        if d > 0:
            linear = self.arith("remui", linear, self.index(within[d]))
        return linear

    def emit_payload(self, block: ir.Block, env: dict[int, str],
                     wanted: list[ir.Value]) -> list[str]:
        """Emit the payload ops needed for `wanted` (dead ops skipped); return their names."""
        needed = needed_ops(block, wanted)
        for inner in block.operations:
            if inner.operation.name == "linalg.yield" or id_of(inner) not in needed:
                continue
            if inner.operation.name == "linalg.index":
                if value_key(inner.results[0]) in env:
                    continue  # given (an argmax's column: `fold_arg_pair`)
                raise CudaCodegenError("linalg.index in a live payload is not supported yet")
            if not inner.operation.name.startswith(PAYLOAD_DIALECTS) or len(inner.regions):
                raise CudaCodegenError(f"payload op '{inner.operation.name}' is not supported")
            operands = []
            for v in inner.operands:
                key = value_key(v)
                if key in env:
                    operands.append(env[key])
                else:
                    rep = self.lookup(v)
                    if not isinstance(rep, Scalar):
                        raise CudaCodegenError(
                            f"payload of '{inner.operation.name}' reads a tensor")
                    operands.append(rep.name)
            if (inner.operation.name == "arith.divf" and operands[1] in self.uniform
                    and operands[0] not in self.uniform):
                # Dividing every element by one row value: one division per thread, then
                # multiplications (<= 1 ulp more rounding; division costs ~10 instructions).
                type_ = str(inner.results[0].type)
                name = self.fresh("p")
                self.emit(f"{name} = arith.mulf {operands[0]}, "
                          f"{self.reciprocal(operands[1], type_)} : {type_}")
                env[value_key(inner.results[0])] = name
                continue
            names = [self.fresh("p") for _ in inner.results]
            self.emit(payload_op_text(inner.operation, operands, names, self.signatures))
            for r, n in zip(inner.results, names):
                env[value_key(r)] = n
            if operands and all(o in self.uniform for o in operands):
                self.uniform.update(names)  # computed from row values and constants only
        out = []
        for v in wanted:
            key = value_key(v)
            if key in env:
                out.append(env[key])
            else:
                rep = self.lookup(v)
                out.append(_element(rep, 0))
        return out

    # -- outputs

    def store_outputs(self) -> None:
        for i, v in enumerate(self.outputs):
            arg = self.num_inputs + i
            rep = self.lookup(v)
            if isinstance(rep, Col):
                raise CudaCodegenError("a per-column value as a group output")
            if isinstance(rep, Input):
                rep = self.load_input(rep, "full")
            if isinstance(rep, Scalar):  # a filled tensor: broadcast the value
                numel = self.arg_types[arg][0]
                if numel == self.geo.rows * self.geo.cols:
                    rep = Full([rep.name] * (len(self.full_offsets) * self.vec), rep.type)
                elif numel == self.geo.rows:
                    rep = Row(rep.name, rep.type)
            if self.arg_types[arg][0] == 1 and self.geo.rows > 1 and isinstance(rep, Row):
                # One value for the whole kernel (a horizontal group's scalar part): written
                # once, by block 0, at index 0 (every block computes it).
                first = self.fresh("i")
                self.emit(f"{first} = arith.cmpi eq, %bid, {self.index(0)} : index")
                self.emit(f"scf.if {first} {{")
                self.indent += 1
                self.store_value(arg, rep, [], self.index(0))
                self.indent -= 1
                self.emit("}")
                continue
            self.store_value(arg, rep, self.full_offsets, self.row_index)

    def store_value(self, arg: int, rep: Any, offsets: list[str], row_offset: str) -> None:
        """Store `rep` into kernel argument `arg`: a `Full` value's chunks at `offsets`
        (masked where the chunk is partial), a `Row` value by thread 0 at `row_offset`."""
        if isinstance(rep, Full):
            for c, off in enumerate(offsets):
                lanes = rep.names[c * self.vec:(c + 1) * self.vec]
                if c in self.masks:
                    self.emit(f"scf.if {self.masks[c]} {{")
                    self.indent += 1
                    self.store_vector(arg, off, lanes)
                    self.indent -= 1
                    self.emit("}")
                else:
                    self.store_vector(arg, off, lanes)
        elif isinstance(rep, Row):
            # One thread writes the row's value.
            cond = self.fresh("i")
            self.emit(f"{cond} = arith.cmpi eq, {self.tid}, {self.index(0)} : index")
            self.emit(f"scf.if {cond} {{")
            self.indent += 1
            self.store_vector(arg, row_offset, [rep.name])
            self.indent -= 1
            self.emit("}")
        else:
            raise CudaCodegenError(f"group output of kind {type(rep).__name__} "
                                   "is not supported")

    # -- whole kernel

    def build(self) -> str:
        """The `gpu.func` text."""
        self.prologue: list[str] = []
        self.masks: dict[int, str] = {}  # chunk -> i1 "in bounds" (partial last chunk)
        shape = self.geo.shape
        self.vec = shape.vec
        self.tid = "%tid"
        self.emit("%tid = gpu.thread_id x")
        self.emit("%bid = gpu.block_id x")
        if self.geo.kind == "row":
            self.emit_row_kernel(shape)
        else:
            self.emit_elementwise_kernel(shape)
        return self.function_text(shape.block, shape.grid)

    def function_text(self, block: int, grid: int) -> str:
        """The `gpu.func` around the emitted lines: the arguments, the shared-memory
        buffers, the launch shape it was built for, the constants first."""
        header_args = ", ".join(f"%arg{i}: {self.memref(i)}" for i in range(len(self.arg_types)))
        workgroup = ""
        if self.workgroup:
            workgroup = " workgroup(" + ", ".join(f"{n} : {t}" for n, t in self.workgroup) + ")"
        head = [f"    gpu.func @{self.symbol}({header_args}){workgroup} kernel attributes "
                f"{{known_block_size = array<i32: {block}, 1, 1>, "
                f"known_grid_size = array<i32: {grid}, 1, 1>}} {{"]
        head += ["      " + line for line in self.prologue]
        return "\n".join(head + self.lines + ["      gpu.return", "    }"])

    def row_columns(self, shape: RowShape) -> list[str]:
        """The first column of each of this thread's chunks of a row of `self.geo.cols`; a
        partial last chunk is clamped to a valid vector and its use masked (`self.masks`)."""
        cols = self.geo.cols
        columns = []
        for c in range(shape.chunks):
            col = self.arith("addi", "%tid", self.index(c * shape.block))
            col = self.arith("muli", col, self.index(shape.vec))
            if shape.guarded and c == shape.chunks - 1:
                # Past the row's end: load a valid (clamped) vector, mask its use.
                inb = self.fresh("m")
                self.emit(f"{inb} = arith.cmpi ult, {col}, {self.index(cols)} : index")
                self.masks[c] = inb
                col = self.arith("minui", col, self.index(cols - shape.vec))
            columns.append(col)
        return columns

    def emit_row_kernel(self, shape: RowShape) -> None:
        self.row_index = "%bid"
        row_base = self.arith("muli", "%bid", self.index(self.geo.cols))
        self.col_offsets = self.row_columns(shape)
        self.full_offsets = [self.arith("addi", row_base, col) for col in self.col_offsets]
        self.run_body()
        self.store_outputs()

    def emit_elementwise_kernel(self, shape: ElementwiseShape) -> None:
        tile_elems = shape.block * shape.unroll * shape.vec
        self.emit(f"scf.for %tile = %bid to {self.index(shape.tiles)} "
                  f"step {self.index(shape.grid)} {{")
        self.indent += 1
        base = self.arith("muli", "%tile", self.index(tile_elems))
        lane = self.arith("muli", "%tid", self.index(shape.vec))
        base = self.arith("addi", base, lane)
        self.full_offsets = [self.arith("addi", base, self.index(c * shape.block * shape.vec))
                             for c in range(shape.unroll)]
        self.col_offsets = []
        self.row_index = self.index(0)
        self.run_chunks(shape, self.geo.cols)
        self.indent -= 1
        self.emit("}")

    def run_chunks(self, shape: ElementwiseShape, numel: int) -> None:
        """Evaluate and store this thread's chunks at `self.full_offsets`; with a partial
        last tile (`shape.guarded`), only where the first chunk starts below `numel`."""
        if shape.guarded:
            cond = self.fresh("i")
            self.emit(f"{cond} = arith.cmpi ult, {self.full_offsets[0]}, "
                      f"{self.index(numel)} : index")
            self.emit(f"scf.if {cond} {{")
            self.indent += 1
        self.run_body()
        self.store_outputs()
        if shape.guarded:
            self.indent -= 1
            self.emit("}")


def payload_op_text(op: ir.Operation, operands: list[str], names: list[str],
                    signatures: dict | None = None) -> str:
    """A payload op in generic form, its operands and results renamed (SSA names).
    `signatures`: a cache of ops' attribute and type text by op key, for an emitter that
    prints the same payload op for many lanes and loop points (an unrolled reduction's: the
    printing was 7 of ResNet-18's 42 s of compile for cuda); valid while the ops live."""
    key = op_key(op) if signatures is not None else None
    signature = signatures.get(key) if signatures is not None else None
    if signature is None:
        attrs = op.attributes
        attr_text = ", ".join(f"{attrs[i].name} = {attrs[i].attr}" for i in range(len(attrs)))
        attr_text = f" {{{attr_text}}}" if attr_text else ""
        in_types = ", ".join(str(v.type) for v in op.operands)
        out_types = ", ".join(str(r.type) for r in op.results)
        signature = (f'"{op.name}"(', f"){attr_text} : ({in_types}) -> ({out_types})")
        if signatures is not None:
            signatures[key] = signature
    lhs = f"{', '.join(names)} = " if names else ""
    return f"{lhs}{signature[0]}{', '.join(operands)}{signature[1]}"


def id_of(op: ir.Operation) -> int:
    return op_key(op)


def _live_results(op: ir.Operation, emitter: KernelEmitter) -> list[int]:
    """Result positions of `op` that something reads (dead results are not computed)."""
    yielded = {value_key(v) for v in emitter.outputs}
    live = []
    for j, r in enumerate(op.results):
        if value_key(r) in yielded or any(True for _ in r.uses):
            live.append(j)
    return live


def _combiner(yielded: ir.Value, acc: ir.BlockArgument) -> str:
    """The combining op of a reduction payload: it yields combiner(..., accumulator)."""
    name = op_name(yielded)
    owner = yielded.owner
    if name not in COMBINERS or value_key(acc) not in {value_key(v) for v in owner.operands}:
        raise CudaCodegenError(
            f"reduction payload does not end in a known combiner of its accumulator ({name})")
    return name


def _neutral(combiner: str, type_: str) -> str:
    floating = type_.startswith(("f", "bf"))
    kind = COMBINERS[combiner]
    if kind == "add":
        return "0.0" if floating else "0"
    if kind == "mul":
        return "1.0" if floating else "1"
    if kind in ("maximumf", "maxnumf"):
        return {"f32": "0xFF800000", "f64": "0xFFF0000000000000", "f16": "0xFC00",
                "bf16": "0xFF80"}[type_]
    if kind in ("minimumf", "minnumf"):
        return {"f32": "0x7F800000", "f64": "0x7FF0000000000000", "f16": "0x7C00",
                "bf16": "0x7F80"}[type_]
    if kind in ("or", "xor", "maxui"):
        return "0"
    if kind in ("and", "minui"):
        return "-1"  # all ones (`true` for i1)
    bits = int(type_[1:])
    if kind == "maxsi":
        return str(-(1 << (bits - 1)))
    if kind == "minsi":
        return str((1 << (bits - 1)) - 1)
    raise CudaCodegenError(f"no neutral element for {combiner}")


def _attr_value(attr: ir.Attribute) -> str:
    """The literal of a scalar attribute as `arith.constant` accepts it (`1.0 : f32` -> `1.0`)."""
    text = str(attr)
    return text.rsplit(" : ", 1)[0]


def _element(rep: Any, p: int) -> str:
    if isinstance(rep, Full):
        return rep.names[p]
    if isinstance(rep, (Row, Scalar)):
        return rep.name
    raise CudaCodegenError(f"cannot read an element of a {type(rep).__name__}")


def is_weight(op: ir.Operation) -> bool:
    """A tensor constant that is not a splat: its data becomes a buffer of the artifact."""
    if op.operation.name != "arith.constant":
        return False
    result = op.results[0]
    if not isinstance(result.type, ir.RankedTensorType):
        return False
    attr = op.attributes["value"]
    return not (isinstance(attr, ir.DenseElementsAttr) and attr.is_splat)


_RESOURCE_RE = re.compile(r"dense_resource<([^>]+)>")


def constant_bytes(op: ir.Operation, module_asm: Any, attribute: str = "value") -> bytes:
    """The raw little-endian data of a tensor constant (inline dense or dense_resource)."""
    attr = op.attributes[attribute]
    data = dense_bytes(attr)
    if data is not None:
        return data
    text = str(attr)  # not a dense constant (those are not printed here: they may be large)
    m = _RESOURCE_RE.match(text)
    if m:
        asm = module_asm()
        found = re.search(re.escape(m.group(1)) + r'\s*:\s*"0x([0-9A-Fa-f]*)"', asm)
        if not found:
            raise CudaCodegenError(f"resource {m.group(1)} not found in the module")
        return bytes.fromhex(found.group(1))[4:]  # the blob starts with its alignment (u32)
    raise CudaCodegenError(f"cannot read the data of constant {text[:80]}")






def fast_kernel_text(group: ir.Operation, symbol: str, geometry: GroupGeometry,
                     weights: list[ir.Operation]) -> str:
    """`KernelEmitter(group, symbol, geometry, weights).build()`, built once per group body,
    geometry and weight count (built.FAST): the GPU rewrites ask it of every candidate
    group and code generation builds the kept ones again, once per layer of a model."""
    text = FAST.get((body_text(group), repr(geometry), len(weights)),
                    lambda: KernelEmitter(group, PROBE_SYMBOL, geometry, weights).build())
    return renamed(text, symbol)
