"""CUDA code generation: every `fusion.group` becomes one `gpu.func` kernel, lowered to PTX.

Input: a module whose entry function holds `fusion.group` ops over linalg-on-tensors (static
shapes), as target cuda's `tiled` stage leaves it (`tiled_passes`; given the fusion stage's
IR, `generate` runs that stage first). Output: a `CudaProgram` = the launch `Plan`
(compiler/plan.py; for cuda, `Launch.grid` = blocks, `Launch.block` = threads per block), the
kernels as `gpu` dialect text, their PTX for `--arch` (default sm_90), where a CUDA toolkit
(ptxas + fatbinary) is found a fatbin holding the sm_90 cubin *and* the PTX (forward
compatibility), and the bytes of the weights. `write_cuda_artifact` embeds all of it with
runtime/shim_cuda.c into `model.so`.

Which path builds each group (`Launch.info["path"]`, and the group's attributes):

  * a tiled group (`fusion.tile_kind` elementwise or row; its tile loop, or the group as one
    tile): the tile emitter (compiler/cuda_tiles.py, `TileEmitter`), from the tile loop
    itself: grid = the tiles, block = `fusion.block` threads, the cost model's launch shape
    (`info["tiled"]`);
  * `fusion.tile_kind = "thread"`: the fallback path (below), from the stage's tile loop, a
    tile per GPU thread (`info["tiled"]`, the emitters' refusals in `info["why"]`);
  * `fusion.path = "gemm"`: one cuBLASLt call (see below); `"view"`: no kernel, a view of a
    buffer;
  * a group the `tiled` stage left untiled (`fusion.untiled` says why): the group-level
    emitter below (`KernelEmitter`), whose launch shape is the same cost-model functions'
    applied to the whole group; failing that, the fallback path, which tiles it itself.

How the group-level emitter makes a kernel. The group's linalg payloads are emitted per
element inside a `gpu.func`: every linalg value of the group is, for one thread, either

  * `Full`:   the thread's elements of a [rows, cols] tensor, kept in registers (SSA values),
  * `Row`:    one scalar per row (a reduction's result, a [rows, 1] tensor), uniform in the block,
  * `Scalar`: a constant or a filled tensor,

and group inputs (and weights: tensor constants become buffers of the artifact) are loaded
lazily from global memory, in 16-byte vectors, at the place the indexing map asks for (the
element, the row, or the column: LayerNorm's weight). Two kernel shapes exist, chosen by the
cost model's pure functions `elementwise_launch_shape` / `row_launch_shape`
(passes/cost_model.py, re-exported here); the tile emitter subclasses this one and runs a
tile's ops the same way:

  * elementwise (no reduction, identity maps): one tile per block; each thread loads `unroll`
    16-byte chunks (all loads first, then the arithmetic, then the stores).
  * row (reductions over the last dimension, broadcasts of rows/columns): one block per row;
    the row stays in registers between passes (softmax reads x once: max, exp, sum, divide).
    Each reduction folds the thread's elements; reductions are scheduled as early as their
    inputs allow and the ready ones are combined across the block together, one barrier per
    round (`flush_reductions`: warp xor-shuffles, a shared-memory slot per warp).

Numerics choices: 16-bit float reductions accumulate in f32 (as PyTorch's do); `x / s` with `s`
one value per row is computed as `x * (1/s)`; the summation order is a tree, not sequential.

What the emitter refuses (a `CudaCodegenError` naming the op): reductions over other than the
last dimension, non-projection indexing maps, rows too long for registers, ops that are not
linalg.generic / linalg.fill / reshapes / scalar arith+math (matmuls, transposes, pads, convs,
pooling), and `linalg.index` in a live payload. Such a group goes through the fallback path
(`fallback_kernel`, upstream MLIR: the CPU path's tile-and-fuse and bufferization, one tile
per GPU thread), still one kernel per group; `Launch.info["path"]` says which path built each
kernel ("fast" | "fallback") and, for the fallback, `info["why"]` the emitter's refusal.
`CudaOptions(fallback=False)` turns the fallback off (the refusal is raised).

Matmul-rooted groups (linalg.matmul / batch_matmul) are not kernels of ours: in the `tiled`
stage (`--fusion-gpu-kernels`, running `gpu_rewrites`), `split_matmul_groups` splits each
into [prologue] + one cuBLASLt call (`Launch.launch_kind = "gemm"`, parameters in
`Launch.gemm`, the reason in `info["why"]` and the gemm group's `fusion.why`) + [epilogue],
fusing bias / ReLU / bf16 rounding / (16-bit) GELU into cuBLASLt's epilogue (see the section
comment). Other rewrites before emission, each for the GPU's sake:
transposes that only move size-1 dims become reshapes, static slices become gathers, groups the
emitter refuses are cut at reshapes of computed values, and multi-output groups it refuses are
split one per output, groups that read nothing are computed here (`fold_constant_groups`).
Layout ops (transposes, reshapes, slices, broadcasts) around a cuBLASLt call become its
strided operand / result layouts (batch stride, leading dimension, transpose flag, offset:
attention's head split and merge cost no kernel), and a layout group whose result is a dense
view of its input becomes a plan-level view (`Buffer.view_of`): see the "layout views"
section (`gpu_rewrites` lists every rewrite in order; `CudaOptions(gemm=False)` turns them
off).

Kernel arguments use the bare-pointer convention: one `void*` (device pointer) per memref,
group inputs first, then the group's weights, then group outputs, all flat `memref<NxT>`
(fallback kernels: inputs, outputs, then weights, shaped memrefs; `Launch.buffers` lists
each kernel's buffers in its own argument order).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import mlir.ir as ir
from mlir.passmanager import PassManager

from fusec.compiler.frontend import read_torch_signature
from fusec.compiler.plan import (DTYPE_SIZES, Buffer, Launch, Plan, apply_torch_signature,
                                 name_user_outputs)
from fusec.passes import cost_model

GROUP_OP = "fusion.group"
DEFAULT_ARCH = "sm_90"
DEFAULT_FEATURES = "+ptx80"
KERNEL_MODULE = "fusec_kernels"

# numpy dtype names of the MLIR element types we handle.
DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
          "i64": "int64", "i32": "int32", "i8": "int8", "i1": "bool"}
ELEMENT_BYTES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i8": 1, "i1": 1}
# Element types held in memory as a wider type: i1 as one byte per value.
MEMORY_ELEMENT = {"i1": "i8"}

# A reduction's combining op (the op whose operand is the accumulator) -> gpu.all_reduce kind.
COMBINERS = {
    "arith.addf": "add", "arith.mulf": "mul", "arith.maximumf": "maximumf",
    "arith.minimumf": "minimumf", "arith.maxnumf": "maxnumf", "arith.minnumf": "minnumf",
    "arith.addi": "add", "arith.muli": "mul", "arith.maxsi": "maxsi", "arith.minsi": "minsi",
}
# Payload ops emitted as they stand (scalar, region-free, pure).
PAYLOAD_DIALECTS = ("arith.", "math.")


class CudaCodegenError(Exception):
    """A group cannot be compiled for CUDA; the message names the op and the reason."""


# ---------------------------------------------------------------- device and launch shapes


@dataclass(frozen=True)
class CudaDevice:
    """What the launch-shape functions need to know about the GPU."""

    name: str = "H200"
    sms: int = 132
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    vector_bytes: int = 16  # widest global load/store per thread (ld.global.v4.b32)
    threads_per_block: int = 256  # an elementwise tile's block (the cost model's)


H200 = CudaDevice()


# The launch shapes are the cost model's (one source of truth with the tiling of the `tiled`
# stage): re-exported here under the names the emitter and its tests use.
ElementwiseShape = cost_model.ElementwiseShape
RowShape = cost_model.RowShape
MAX_CHUNKS_PER_THREAD = cost_model.MAX_CHUNKS_PER_THREAD
ROW_BYTES_PER_THREAD = cost_model.ROW_BYTES_PER_THREAD


def elementwise_launch_shape(numel: int, element_bytes: int,
                             device: CudaDevice = H200, unroll: int = 0) -> ElementwiseShape:
    """`cost_model.elementwise_launch_shape` for `device`."""
    return cost_model.elementwise_launch_shape(numel, element_bytes, device, unroll)


def row_launch_shape(rows: int, cols: int, element_bytes: int,
                     device: CudaDevice = H200,
                     elements_per_thread: int = 0) -> RowShape:
    """`cost_model.row_launch_shape` for `device`; a row too long for registers is refused."""
    shape = cost_model.row_launch_shape(rows, cols, element_bytes, device, elements_per_thread)
    if shape is None:
        vec = cost_model.vector_width(cols, element_bytes, device)
        raise CudaCodegenError(
            f"row of {cols} elements is too long to keep in registers (more than "
            f"{MAX_CHUNKS_PER_THREAD} chunks of {vec} per thread); needs a multi-pass kernel")
    return shape


# ---------------------------------------------------------------- small IR helpers


def _value_key(value: ir.Value) -> int:
    from fusec.dialects import _capsule_pointer

    return _capsule_pointer(value._CAPIPtr, b"mlir.ir.Value._CAPIPtr")


def _op_name(value: ir.Value) -> str | None:
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return owner.operation.name


def _tensor_info(t: ir.Type) -> tuple[list[int], str]:
    """(shape, element type text) of a ranked static tensor type."""
    rt = ir.RankedTensorType(t)
    if not rt.has_static_shape:
        raise CudaCodegenError(f"dynamic shape {t} is not supported")
    return list(rt.shape), str(rt.element_type)


def _numel(shape: Iterable[int]) -> int:
    return math.prod(shape)


_MAP_RE = re.compile(r"^\(([^)]*)\)(?:\[[^\]]*\])?\s*->\s*\(([^)]*)\)$")


@dataclass(frozen=True)
class MapInfo:
    """A projection-like affine map: `dims` it reads (positions), constants must be 0."""

    num_dims: int
    results: tuple  # each: int (dim position) or None (the constant 0)


def _parse_map(attr: ir.Attribute) -> MapInfo:
    text = str(ir.AffineMapAttr(attr).value)
    m = _MAP_RE.match(text.strip())
    if not m:
        raise CudaCodegenError(f"indexing map {text} is not a projection")
    dims = [d.strip() for d in m.group(1).split(",") if d.strip()]
    results = []
    for r in (x.strip() for x in m.group(2).split(",") if x.strip()):
        if re.fullmatch(r"d\d+", r):
            results.append(int(r[1:]))
        elif r == "0":
            results.append(None)
        else:
            raise CudaCodegenError(f"indexing map {text} is not a projection")
    return MapInfo(len(dims), tuple(results))


# ---------------------------------------------------------------- group analysis


@dataclass
class GroupGeometry:
    """How a group's iteration space maps onto one launch."""

    kind: str  # "elementwise" | "row"
    rows: int
    cols: int
    element: str  # element type of the widest full tensor (for vector width)
    shape: Any  # ElementwiseShape | RowShape
    full_shape: tuple = ()  # the group's iteration domain (row groups)


def memory_element(group: ir.Operation) -> str | None:
    """The narrowest element type (MLIR spelling) the group reads or writes."""
    from fusec.passes.grouping import memory_element_type

    element = memory_element_type(group)
    return None if element is None else str(element)


def _generics(group: ir.Operation) -> list[ir.Operation]:
    body = group.regions[0].blocks[0]
    return [op for op in body.operations if op.operation.name == "linalg.generic"]


def _iterators(op: ir.Operation) -> list[str]:
    return [str(a).split("<")[-1].rstrip(">").strip() for a in op.attributes["iterator_types"]]


def analyse_group(group: ir.Operation, device: CudaDevice = H200,
                  row_elements_per_thread: int = 0, unroll: int = 0) -> GroupGeometry:
    """Classify a group as elementwise or row and pick its launch shape."""
    body = group.regions[0].blocks[0]
    for op in body.operations:
        name = op.operation.name
        if name in ("linalg.generic", "linalg.fill", "tensor.empty", "fusion.yield",
                    "tensor.expand_shape", "tensor.collapse_shape", "arith.constant"):
            continue
        raise CudaCodegenError(f"'{name}' is not supported by the CUDA code generator yet")
    generics = _generics(group)
    for op in generics:
        # An identity map on an operand of another shape (a slice at offset 0, left by
        # extract_slices_to_generics) is not elementwise over one domain.
        parallel = all("parallel" in str(t) for t in _iterators(op))
        domain = _tensor_info(op.results[0].type)[0] if len(op.results) and parallel else None
        for v, m in zip(op.operands, (_parse_map(a) for a in op.attributes["indexing_maps"])):
            if m.results == tuple(range(m.num_dims)) and domain is not None and \
                    m.num_dims == len(domain) and _tensor_info(v.type)[0] != domain:
                raise CudaCodegenError("an operand read through an identity map has another "
                                       "shape than the loop domain (a slice)")
    if not generics:
        # Only fills (the unfused baseline makes a kernel of each): a broadcast store.
        shapes = [_tensor_info(v.type) for v in body.operations[len(body.operations) - 1].operands]
        numel = max(_numel(sh) for sh, _ in shapes)
        if len({_numel(sh) for sh, _ in shapes}) > 1:
            # Outputs of other sizes (two copies of a horizontal group, a 50- and a 4-element
            # one, found by test/gpu/fuzz_cuda.py): one store space would overrun the small one.
            raise CudaCodegenError("group outputs of different sizes in one elementwise space")
        elt = min((e for _, e in shapes), key=lambda e: ELEMENT_BYTES.get(e, 4))
        return GroupGeometry("elementwise", 1, numel, elt,
                             elementwise_launch_shape(numel, ELEMENT_BYTES.get(elt, 4), device))
    # The widest tensor the group touches fixes [rows, cols].
    full_shape: list[int] = []
    element = "f32"
    for op in generics:
        for v in list(op.operands) + list(op.results):
            shape, elt = _tensor_info(v.type)
            if _numel(shape) > _numel(full_shape or [0]):
                full_shape, element = shape, elt
    # The narrowest element type in memory fixes the vector width (16 bytes of it per access).
    element = memory_element(group) or element
    has_reduction = any("reduction" in _iterators(op) for op in generics)
    identity_only = all(
        all(m.results == tuple(range(m.num_dims)) or not any(r is not None for r in m.results)
            for m in (_parse_map(a) for a in op.attributes["indexing_maps"]))
        for op in generics)
    numel = _numel(full_shape)
    ebytes = ELEMENT_BYTES.get(element, 4)
    yielded = list(body.operations[len(body.operations) - 1].operands)
    # Every result, and every value the group yields (a copy of an input of its own size
    # beside a generic: a horizontal group of two copies), must span the one domain.
    same_domain = all(_numel(_tensor_info(r.type)[0]) == numel for op in generics
                      for r in op.results) and \
        all(_numel(_tensor_info(v.type)[0]) == numel for v in yielded)
    if not has_reduction and identity_only and not same_domain:
        # Generics over domains of other sizes (a horizontal group's [1, 1, 1] part beside
        # a [129, 129, 2] one, found by test/gpu/fuzz_cuda.py): not one elementwise space.
        raise CudaCodegenError("elementwise generics over domains of different sizes")
    if not has_reduction and identity_only:
        return GroupGeometry("elementwise", 1, numel, element,
                             elementwise_launch_shape(numel, ebytes, device, unroll))
    cols = full_shape[-1]
    rows = numel // cols
    return GroupGeometry("row", rows, cols, element,
                         row_launch_shape(rows, cols, ebytes, device, row_elements_per_thread),
                         tuple(full_shape))


# ---------------------------------------------------------------- kernel emission


@dataclass
class Full:
    names: list[str]  # one SSA name per (chunk, lane) of this thread
    type: str


@dataclass
class Row:
    name: str
    type: str


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
    """A reduction's per-thread partial, waiting to be combined across the block."""

    key: int  # the reduction result's value key
    partial: str
    combiner: str  # e.g. arith.addf
    wide: str  # the type it is combined in (f32 for 16-bit floats)
    type: str  # the result's element type
    init: str  # the reduction's initial value (combined in once, at the end)


def _external_reads(op: ir.Operation) -> list[int]:
    """Keys of the values `op` (and its regions) read that are defined outside it."""
    inside: set[int] = set()
    reads: list[int] = []

    def visit(inner: ir.Operation) -> ir.WalkResult:
        for region in inner.regions:
            for block in region.blocks:
                inside.update(_value_key(a) for a in block.arguments)
        inside.update(_value_key(r) for r in inner.results)
        reads.extend(_value_key(v) for v in inner.operands)
        return ir.WalkResult.ADVANCE

    op.operation.walk(visit)
    return [k for k in dict.fromkeys(reads) if k not in inside]


class KernelEmitter:
    """Emits one `gpu.func` for one group as MLIR text (see the module docstring)."""

    def __init__(self, group: ir.Operation, symbol: str, geometry: GroupGeometry,
                 constants: list[ir.Operation] = ()) -> None:
        self.group = group
        self.symbol = symbol
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
            shape, elt = _tensor_info(arg.type)
            self.values[_value_key(arg)] = Input(i, elt, _numel(shape))
            self.arg_types.append((_numel(shape), elt))
        # Tensor constants (weights) are kernel arguments after the inputs.
        for op in constants:
            shape, elt = _tensor_info(op.results[0].type)
            self.values[_value_key(op.results[0])] = Input(len(self.arg_types), elt, _numel(shape))
            self.arg_types.append((_numel(shape), elt))
        yield_op = body.operations[len(body.operations) - 1]
        self.outputs = list(yield_op.operands)
        self.num_inputs = len(self.arg_types)
        for v in self.outputs:
            shape, elt = _tensor_info(v.type)
            self.arg_types.append((_numel(shape), elt))

    # -- text helpers

    def fresh(self, hint: str = "v") -> str:
        self.counter += 1
        return f"%{hint}{self.counter}"

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.indent + line)

    def const(self, value: Any, type_: str) -> str:
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
        lanes = []
        for lane in range(vec):
            name = self.fresh("x")
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
        key = _value_key(value)
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
            pending = {r.key for r in self.pending}
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
            self.values[_value_key(op.results[0])] = Empty(str(op.results[0].type))
        elif name == "linalg.fill":
            value = self.lookup(op.operands[0])
            if not isinstance(value, Scalar):
                raise CudaCodegenError("linalg.fill of a non-scalar value")
            self.values[_value_key(op.results[0])] = value
        elif name in ("tensor.expand_shape", "tensor.collapse_shape"):
            self.values[_value_key(op.results[0])] = self.lookup(op.operands[0])
        elif name == "linalg.generic":
            self.eval_generic(op)

    def flush_reductions(self) -> None:
        """Combine every pending per-thread partial across the block, in one round.

        Per value: 5 xor-shuffles within the warp; lane 0 of each warp writes its warp's
        value to a shared-memory slot of its own (one buffer per value, so rounds never
        overwrite what another warp still reads); one barrier; then every warp loads the
        per-warp values (lane l the value of warp l mod warps) and combines them with
        xor-shuffles again, so every thread holds the result with no second barrier.
        """
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        block = self.geo.shape.block
        warps = max(1, block // 32)
        width = min(block, 32)
        partials = []
        for r in pending:
            partials.append(self.warp_reduce(r.partial, r, width))
        if warps > 1:
            lane = self.lane_index()
            warp = self.warp_index()
            is_lane0 = self.fresh("i")
            self.emit(f"{is_lane0} = arith.cmpi eq, {lane}, {self.index(0)} : index")
            self.emit(f"scf.if {is_lane0} {{")
            self.indent += 1
            buffers = []
            for r, value in zip(pending, partials):
                buf = f"%wg{len(self.workgroup)}"
                mtype = f"memref<{warps}x{r.wide}, #gpu.address_space<workgroup>>"
                self.workgroup.append((buf, mtype))
                buffers.append((buf, mtype))
                self.emit(f"memref.store {value}, {buf}[{warp}] : {mtype}")
            self.indent -= 1
            self.emit("}")
            self.emit("gpu.barrier")
            # Lane l reads warp (l mod warps)'s value: every group of `warps` consecutive
            # lanes holds all of them once, so a butterfly over `warps` lanes leaves the
            # block's total in *every* lane (warps is a power of two).
            slot = self.arith("remui", lane, self.index(warps))
            combined = []
            for r, (buf, mtype) in zip(pending, buffers):
                loaded = self.fresh("z")
                self.emit(f"{loaded} = memref.load {buf}[{slot}] : {mtype}")
                combined.append(self.warp_reduce(loaded, r, warps))
            partials = combined
        for r, value in zip(pending, partials):
            init = r.init
            if r.wide != r.type:
                init = self.fresh("w")
                self.emit(f"{init} = arith.extf {r.init} : {r.type} to {r.wide}")
            final = self.fresh("r")
            self.emit(f"{final} = {r.combiner} {value}, {init} : {r.wide}")
            if r.wide != r.type:
                narrow = self.fresh("r")
                self.emit(f"{narrow} = arith.truncf {final} : {r.wide} to {r.type}")
                final = narrow
            self.values[r.key] = Row(self.uniform_name(final), r.type)

    def warp_reduce(self, value: str, r: "PendingReduction", width: int) -> str:
        """Butterfly (xor) reduction over the first `width` lanes of each warp (a power of 2)."""
        offset = 1
        while offset < width:
            other = self.fresh("h")
            self.emit(f"{other}, %{other[1:]}ok = gpu.shuffle xor {value}, "
                      f"{self.const(offset, 'i32')}, {self.const(32, 'i32')} : {r.wide}")
            combined = self.fresh("h")
            self.emit(f"{combined} = {r.combiner} {value}, {other} : {r.wide}")
            value = combined
            offset *= 2
        return value

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
        if _value_key(result) in self.values:  # a weight passed as a kernel argument
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
            self.values[_value_key(result)] = Scalar(self.const(_attr_value(splat), elt), elt)
            return
        type_ = str(result.type)
        self.values[_value_key(result)] = Scalar(self.const(_attr_value(attr), type_), type_)

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
        else:
            raise CudaCodegenError(f"access pattern {m} is not an element, row or column")
        if isinstance(value, Input):
            return kind, self.load_input(value, kind)
        if isinstance(value, Full) and kind not in ("full",):
            raise CudaCodegenError(f"a full tensor is read as a {kind}")
        return kind, value

    def _suffix_op(self, op: ir.Operation, out_shape: list[int]) -> bool:
        """A parallel generic over the group domain's trailing dims (a causal mask [T, T] in
        a [B, H, T, T] softmax), every read a row/column/suffix of its own domain: computed
        for every element of the group's domain (`suffix_access`), its result read back
        through the trailing-dims map as a full value (`seen_through`)."""
        full = list(self.geo.full_shape)
        k = len(out_shape)
        if self.geo.kind != "row" or not 2 <= k < len(full) or full[-k:] != out_shape or \
                len(op.results) != 1 or "reduction" in _iterators(op) or \
                any(_value_key(v) == _value_key(op.results[0]) for v in self.outputs):
            return False  # (a group output must be stored in its own shape)
        self.suffix_values[_value_key(op.results[0])] = k
        return True

    def suffix_access(self, value: ir.Value, m: MapInfo, out_shape: list[int]) -> Any:
        """An input of a suffix-domain generic (`_suffix_op`) for the group's domain."""
        rep = self.lookup(value)
        k = len(out_shape)
        dims = [r for r in m.results if r is not None]
        if not dims:
            return self.access(rep, m, "full")[1]
        if not isinstance(rep, Input):
            raise CudaCodegenError("a suffix-domain generic reads a computed tensor")
        if dims == list(range(k)):
            return self.load_input(rep, f"suffix:{_numel(out_shape[:-1])}")
        if dims == [k - 1]:
            return self.load_input(rep, "col")
        if dims == list(range(dims[0], k - 1)):
            return self.load_input(rep, f"rowmod:{_numel(out_shape[dims[0]:k - 1])}")
        raise CudaCodegenError(f"access pattern {m} of a suffix-domain generic")

    def seen_through(self, value: ir.Value, m: MapInfo) -> MapInfo:
        """`m`, or the identity when it reads a suffix-domain result through its trailing
        dims (the value is already per element of the group's domain)."""
        k = self.suffix_values.get(_value_key(value))
        if k is not None and m.results == tuple(range(m.num_dims - k, m.num_dims)):
            return MapInfo(m.num_dims, tuple(range(m.num_dims)))
        if k is not None:
            raise CudaCodegenError(f"a suffix-domain result read through {m}")
        return m

    def eval_generic(self, op: ir.Operation) -> None:
        iters = _iterators(op)
        maps = [_parse_map(a) for a in op.attributes["indexing_maps"]]
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
        out_shape = _tensor_info(op.results[0].type)[0]
        if domain == "suffix":
            operands_in = [self.suffix_access(v, m, out_shape) for v, m in zip(ins, maps)]
            domain = "full"  # computed for every element of the group's domain
        else:
            if domain == "row":
                self.check_row_reads(op, ins, maps)
            operands_in = [self.access(self.lookup(v), self.seen_through(v, m), domain)[1]
                           for v, m in zip(ins, maps)]
        out_vals = [self.lookup(v) for v in outs]
        positions = len(self.full_offsets) * self.vec if domain == "full" else 1
        terminator = block.operations[len(block.operations) - 1]
        yielded = list(terminator.operands)

        if not reduction:
            results: list[list[str]] = [[] for _ in op.results]
            for p in range(positions):
                env: dict[int, str] = {}
                for arg, val in zip(list(block.arguments)[:n_in], operands_in):
                    env[_value_key(arg)] = _element(val, p)
                for j, (arg, val) in enumerate(zip(list(block.arguments)[n_in:], out_vals)):
                    if not isinstance(val, Empty):
                        env[_value_key(arg)] = _element(
                            self.access(val, maps[n_in + j], domain)[1], p)
                outs_p = self.emit_payload(block, env, [yielded[j] for j in live])
                for j, name in zip(live, outs_p):
                    results[j].append(name)
            for j in live:
                type_ = _tensor_info(op.results[j].type)[1]
                if domain == "full":
                    rep: Any = Full(results[j], type_)
                else:
                    rep = Row(self.uniform_name(results[j][0]), type_)
                self.values[_value_key(op.results[j])] = rep
            return

        # Reduction over the last dimension: fold this thread's elements, then the block.
        # 16-bit floats accumulate in f32 (as PyTorch's reductions do): the payload up to the
        # combiner runs as written, the combining runs in f32, the result is rounded once.
        combiners, wide, folded = {}, {}, {}
        for j in live:
            acc_arg = block.arguments[n_in + j]
            combiners[j] = _combiner(yielded[j], acc_arg)
            type_ = _tensor_info(op.results[j].type)[1]
            wide[j] = "f32" if type_ in ("bf16", "f16") else type_
            if wide[j] != type_:
                others = [v for v in yielded[j].owner.operands
                          if _value_key(v) != _value_key(acc_arg)]
                folded[j] = others[0]
        accs = {}
        for j in live:
            accs[j] = self.const(_neutral(combiners[j], wide[j]), wide[j])
        for p in range(positions):
            env = {}
            for arg, val in zip(list(block.arguments)[:n_in], operands_in):
                env[_value_key(arg)] = _element(val, p)
            for j in live:
                if j not in folded:
                    env[_value_key(block.arguments[n_in + j])] = accs[j]
            wanted = [folded.get(j, yielded[j]) for j in live]
            outs_p = self.emit_payload(block, env, wanted)
            mask = self.masks.get(p // self.vec) if domain == "full" else None
            for j, name in zip(live, outs_p):
                if j in folded:
                    narrow = _tensor_info(op.results[j].type)[1]
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
            type_ = _tensor_info(op.results[j].type)[1]
            init = self.access(out_vals[j], maps[n_in + j], "full")[1]
            if isinstance(init, Empty):
                raise CudaCodegenError("reduction into an uninitialised tensor")
            # Combined across the block later, together with every other reduction that is
            # ready by then (one barrier per round): see flush_reductions.
            self.pending.append(PendingReduction(
                _value_key(op.results[j]), accs[j], combiners[j], wide[j], type_,
                _element(init, 0)))

    def check_row_reads(self, op: ir.Operation, ins: list[ir.Value], maps: list[MapInfo]) -> None:
        """A generic computing one value per row reads each tensor operand at the row's own
        index (block b: element b): its map must be the identity on the loops longer than 1,
        over an operand of as many elements. A bias read along one of several row dims
        ((d0, d1) -> (d1) over [17, 17] rows) is not element b: refused (found by
        test/gpu/fuzz_cuda.py)."""
        from fusec.passes.place_intermediates import loop_ranges

        ranges = loop_ranges(op) or []
        long = [d for d, e in enumerate(ranges) if e > 1]
        points = math.prod(e or 1 for e in ranges)
        for v, m in zip(ins, maps):
            if not isinstance(v.type, ir.RankedTensorType):
                continue
            numel = _numel(_tensor_info(v.type)[0])
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
            from fusec.passes.place_intermediates import loop_ranges

            ranges = loop_ranges(op) or []
            iters = _iterators(op)
            reduced = math.prod(e for e, k in zip(ranges, iters) if k == "reduction")
            kept = math.prod(e for e, k in zip(ranges, iters) if k != "reduction")
            if self.geo.kind == "row" and (reduced != self.geo.cols or kept != self.geo.rows):
                raise CudaCodegenError(f"a reduction of {reduced} values per row over "
                                       f"{kept} rows does not fit the group's "
                                       f"{self.geo.rows}x{self.geo.cols} rows")
            return "full"
        if self.geo.kind == "elementwise":
            return "full"
        out_shape, _ = _tensor_info(op.results[0].type)
        numel = _numel(out_shape)
        if numel == self.geo.rows * self.geo.cols and (not out_shape or
                                                        out_shape[-1] == self.geo.cols):
            return "full"
        if numel == self.geo.rows or numel == 1:
            return "row"
        if self._suffix_op(op, out_shape):
            return "suffix"
        raise CudaCodegenError(f"linalg.generic of shape {out_shape} does not fit "
                               f"the group's {self.geo.rows}x{self.geo.cols} rows")

    def emit_payload(self, block: ir.Block, env: dict[int, str],
                     wanted: list[ir.Value]) -> list[str]:
        """Emit the payload ops needed for `wanted` (dead ops skipped); return their names."""
        needed = _needed_ops(block, wanted)
        for inner in block.operations:
            if inner.operation.name == "linalg.yield" or id_of(inner) not in needed:
                continue
            if inner.operation.name == "linalg.index":
                raise CudaCodegenError("linalg.index in a live payload is not supported yet")
            if not inner.operation.name.startswith(PAYLOAD_DIALECTS) or len(inner.regions):
                raise CudaCodegenError(f"payload op '{inner.operation.name}' is not supported")
            operands = []
            for v in inner.operands:
                key = _value_key(v)
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
                env[_value_key(inner.results[0])] = name
                continue
            attrs = inner.attributes
            attr_text = ", ".join(f"{attrs[i].name} = {attrs[i].attr}" for i in range(len(attrs)))
            attr_text = f" {{{attr_text}}}" if attr_text else ""
            in_types = ", ".join(str(v.type) for v in inner.operands)
            out_types = ", ".join(str(r.type) for r in inner.results)
            names = [self.fresh("p") for _ in inner.results]
            lhs = f"{', '.join(names)} = " if names else ""
            self.emit(f'{lhs}"{inner.operation.name}"({", ".join(operands)}){attr_text} : '
                      f"({in_types}) -> ({out_types})")
            for r, n in zip(inner.results, names):
                env[_value_key(r)] = n
            if operands and all(o in self.uniform for o in operands):
                self.uniform.update(names)  # computed from row values and constants only
        out = []
        for v in wanted:
            key = _value_key(v)
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
        header_args = ", ".join(f"%arg{i}: {self.memref(i)}" for i in range(len(self.arg_types)))
        self.tid = "%tid"
        self.emit("%tid = gpu.thread_id x")
        self.emit("%bid = gpu.block_id x")
        if self.geo.kind == "row":
            self.emit_row_kernel(shape)
        else:
            self.emit_elementwise_kernel(shape)
        workgroup = ""
        if self.workgroup:
            workgroup = " workgroup(" + ", ".join(f"{n} : {t}" for n, t in self.workgroup) + ")"
        head = [f"    gpu.func @{self.symbol}({header_args}){workgroup} kernel attributes "
                f"{{known_block_size = array<i32: {shape.block}, 1, 1>, "
                f"known_grid_size = array<i32: {shape.grid}, 1, 1>}} {{"]
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


def id_of(op: ir.Operation) -> int:
    from fusec.passes.grouping import op_key

    return op_key(op)


def _needed_ops(block: ir.Block, wanted: list[ir.Value]) -> set[int]:
    """Keys of the payload ops that `wanted` depends on (within the block)."""
    producers = {}
    for inner in block.operations:
        for r in inner.results:
            producers[_value_key(r)] = inner
    needed: set[int] = set()
    stack = list(wanted)
    while stack:
        v = stack.pop()
        op = producers.get(_value_key(v))
        if op is None or id_of(op) in needed:
            continue
        needed.add(id_of(op))
        stack.extend(op.operands)
    return needed


def _live_results(op: ir.Operation, emitter: KernelEmitter) -> list[int]:
    """Result positions of `op` that something reads (dead results are not computed)."""
    yielded = {_value_key(v) for v in emitter.outputs}
    live = []
    for j, r in enumerate(op.results):
        if _value_key(r) in yielded or any(True for _ in r.uses):
            live.append(j)
    return live


def _combiner(yielded: ir.Value, acc: ir.BlockArgument) -> str:
    """The combining op of a reduction payload: it yields combiner(..., accumulator)."""
    name = _op_name(yielded)
    owner = yielded.owner
    if name not in COMBINERS or _value_key(acc) not in {_value_key(v) for v in owner.operands}:
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
    text = str(attr)
    m = _RESOURCE_RE.match(text)
    if m:
        asm = module_asm()
        found = re.search(re.escape(m.group(1)) + r'\s*:\s*"0x([0-9A-Fa-f]*)"', asm)
        if not found:
            raise CudaCodegenError(f"resource {m.group(1)} not found in the module")
        return bytes.fromhex(found.group(1))[4:]  # the blob starts with its alignment (u32)
    try:
        import numpy as np

        return np.array(attr).tobytes()
    except Exception:  # noqa: BLE001 - bf16/f16 have no Python buffer
        hexdata = re.match(r'dense<"0x([0-9A-Fa-f]*)">', text)
        if hexdata:
            return bytes.fromhex(hexdata.group(1))
    raise CudaCodegenError(f"cannot read the data of constant {text[:80]}")


# ---------------------------------------------------------------- lowering to PTX


def find_cuda_toolkit() -> str | None:
    """A CUDA toolkit folder with bin/ptxas and nvvm/libdevice (None if there is none).

    Order: $FUSEC_CUDA_TOOLKIT, $CUDA_HOME / $CUDA_PATH, /usr/local/cuda*, the PyPI
    `nvidia-cuda-nvcc` wheel (nvidia/cu13). libdevice gives math.exp/erf/...; ptxas and
    fatbinary give the cubin.
    """
    candidates = [os.environ.get("FUSEC_CUDA_TOOLKIT"), os.environ.get("CUDA_HOME"),
                  os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    candidates += sorted((str(p) for p in Path("/usr/local").glob("cuda-*")), reverse=True)
    try:
        import nvidia  # type: ignore

        for root in getattr(nvidia, "__path__", []):
            candidates += [str(p) for p in sorted(Path(root).glob("cu1*"), reverse=True)]
            candidates.append(str(Path(root) / "cuda_nvcc"))
    except ImportError:
        pass
    for c in candidates:
        if c and (Path(c) / "nvvm" / "libdevice" / "libdevice.10.bc").exists():
            return c
    return None


@dataclass
class CudaOptions:
    arch: str = DEFAULT_ARCH
    features: str = DEFAULT_FEATURES
    opt_level: int = 3
    toolkit: str | None = None  # None: find_cuda_toolkit()
    cubin: bool = True  # also build a fatbin (cubin + PTX) when ptxas is found
    device: CudaDevice = H200
    row_elements_per_thread: int = 0  # 0: ROW_BYTES_PER_THREAD's worth (row_launch_shape)
    elementwise_unroll: int = 0  # chunks per thread per tile; 0: elementwise_launch_shape's
    # Groups the emitter refuses go through upstream MLIR (`fallback_kernel`); False: refuse.
    fallback: bool = True
    # Matmul-rooted groups: the matmul through cuBLASLt (split_matmul_groups); False: one
    # kernel per group (the fallback's one thread per output element).
    gemm: bool = True


def kernel_module_text(kernels: list[str], options: CudaOptions) -> str:
    target = (f'#nvvm.target<O = {options.opt_level}, chip = "{options.arch}", '
              f'features = "{options.features}">')
    # The index-check status (see INDEX_STATUS), once, when a kernel records failures in it.
    status = [INDEX_STATUS_GLOBAL] if any(f"@{INDEX_STATUS}" in k for k in kernels) else []
    return ("module attributes {gpu.container_module} {\n"
            f"  gpu.module @{KERNEL_MODULE} [{target}] {{\n"
            + "\n".join(status + kernels) + "\n  }\n}\n")


def lower_kernels(text: str, options: CudaOptions, context: ir.Context,
                  fmt: str = "isa") -> bytes:
    """gpu dialect text -> PTX (fmt="isa") or fatbin (fmt="fatbin") bytes."""
    toolkit = options.toolkit or find_cuda_toolkit()
    binary_opts = f"format={fmt}"
    if toolkit:
        binary_opts += f" toolkit={toolkit}"
    pipeline = (
        "builtin.module("
        # fpowi with a constant exponent (x.pow(2)) becomes multiplications, not a
        # libdevice call per element.
        "gpu.module(canonicalize,math-expand-ops{ops=fpowi},"
        # math on bf16/f16 (erf, exp, ...) runs in f32: libdevice has no bf16 functions.
        "math-extend-to-supported-types,convert-scf-to-cf,"
        # Bare pointers: a static memref argument is one device pointer, as the shim passes.
        "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},"
        # What NVVM's patterns leave of math (integer math.absi: T5's relative position
        # buckets) becomes LLVM intrinsics NVPTX selects (abs.s64); float math is libdevice's
        # by now.
        "convert-math-to-llvm),"
        "reconcile-unrealized-casts,"
        f"gpu-module-to-binary{{{binary_opts}}})")
    with context:
        module = ir.Module.parse(text)
        pm = PassManager.parse(pipeline)
        try:
            pm.run(module.operation)
        except Exception as e:  # noqa: BLE001 - re-raised with the reproducer
            path = Path(tempfile.gettempdir()) / "fusec_cuda_failed.mlir"
            path.write_text(text)
            raise CudaCodegenError(
                f"lowering to {fmt} failed: {e}\nreproduce: mlir-opt {path} "
                f"--pass-pipeline='{pipeline}'") from e
        from mlir.dialects import gpu

        for op in module.body.operations:
            if op.operation.name == "gpu.binary":
                return bytes(gpu.ObjectAttr(op.attributes["objects"][0]).object)
    raise CudaCodegenError("gpu-module-to-binary produced no gpu.binary")


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
    for f in funcs:
        if "sym_visibility" not in f.attributes:
            return f
    return funcs[0]


# Entry-function attributes of CPU-only features: the CUDA plan and runtime have no model
# state (an RNG seed kept between calls) and return no Python scalars yet.
_CPU_ONLY_FEATURES = {
    "fusion.state": "keeps state between calls (an RNG seed: torch.rand, dropout, ...)",
    "fusion.scalar_results": "returns Python numbers (scalar results)",
}


def _refuse_host_features(func: ir.Operation) -> None:
    """Raise a PassError (located at the model function) if the model needs what only the
    CPU artifact provides."""
    from fusec.passes.registry import PassError

    for attribute, what in _CPU_ONLY_FEATURES.items():
        if attribute in func.attributes:
            raise PassError(f"the model {what}, which the CUDA target does not support yet; "
                            "compile it with --target cpu", func.location)


def gpu_rewrites(func: ir.Operation, options: CudaOptions) -> list[str]:
    """The rewrites of the fusion stage's groups for the GPU, in order (each one's docstring
    says why); returns the gemm notes of `split_matmul_groups`."""
    unit_transposes_to_reshapes(func)
    extract_slices_to_generics(func)
    merge_epilogue_consumers(func)
    notes = split_matmul_groups(func)
    split_at_reshapes(func, options)
    split_multi_output_groups(func, options)
    fold_constant_groups(func)  # after the splits: they can leave a group that reads nothing
    # Layout groups around cuBLASLt calls become strided operand / result layouts, and what
    # is left of them that is a dense view of its input becomes a plan-level view.
    absorb_operand_layouts(func)
    erase_dead_groups(func)
    absorb_result_layouts(func)
    mark_view_groups(func)
    return notes


def generate(module: ir.Module, options: CudaOptions | None = None) -> CudaProgram:
    """Compile every `fusion.group` of the entry function to a kernel or a cuBLASLt call;
    build the plan. The module is rewritten in place first (matmul splits and the other
    GPU rewrites named in the module docstring)."""
    options = options or CudaOptions()
    start = time.perf_counter()
    func = _entry_function(module)
    _refuse_host_features(func)
    body = func.regions[0].blocks[0]
    buffers: list[Buffer] = []
    ids: dict[int, int] = {}

    def add_buffer(value: ir.Value, role: str, name: str) -> int:
        shape, elt = _tensor_info(value.type)
        if elt not in DTYPES:
            raise CudaCodegenError(f"element type {elt} is not supported")
        b = Buffer(len(buffers), role, name, shape, DTYPES[elt])
        buffers.append(b)
        ids[_value_key(value)] = b.id
        return b.id

    inputs = [add_buffer(a, "input", f"input{i}") for i, a in enumerate(body.arguments)]
    from fusec.compiler.cuda_tiles import TileEmitter, built_from_tile, thread_tiled
    from fusec.passes.gpu_kernels import DONE_ATTR, NOTES_ATTR

    if DONE_ATTR not in func.attributes:
        # The fusion stage's IR: run target cuda's `tiled` stage first (kernel formation,
        # tiling, placement), as the pipeline does. The caller's context need not be the
        # default one (the fusec driver's is not).
        from fusec.compiler.cuda_tiles import tile_loop
        from fusec.passes import run_pipeline

        if any(tile_loop(g) is not None for g in _groups(func)):
            raise CudaCodegenError("the input was tiled for another target (its groups hold "
                                   "tile loops): give target cuda the fusion stage's IR")

        with module.context, func.location:
            run_pipeline(module, tiled_passes(options.gemm))
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

    ret = body.operations[len(body.operations) - 1]
    returned = {_value_key(v) for v in ret.operands}
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
        operands = []
        for v in op.operands:
            if _value_key(v) not in ids:
                raise CudaCodegenError("a group operand is a tensor constant outside the group")
            operands.append(ids[_value_key(v)])

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

        def result_buffers() -> list[int]:
            return [add_buffer(r, "output" if _value_key(r) in returned else "temp",
                               f"{symbol}_out{j}") for j, r in enumerate(op.results)]

        path = str(ir.StringAttr(op.attributes["fusion.path"]).value) \
            if "fusion.path" in op.attributes else ""
        if path == "view":
            base = buffers[operands[0]]
            offset = ir.IntegerAttr(op.attributes[VIEW_OFFSET]).value * \
                DTYPE_SIZES[base.dtype]
            view = buffers[add_buffer(op.results[0], "temp", f"view{len(buffers)}")]
            view.view_of = base.id if base.view_of is None else base.view_of
            view.view_offset = offset + (base.view_offset if base.view_of is not None else 0)
            continue
        if path == "gemm":
            launches.append(gemm_launch(op, operands, weight_buffer, result_buffers, asm))
            launches[-1].info["bytes"] = sum(buffers[b].nbytes for b in launches[-1].buffers)
            continue
        weights = [w for w in op.regions[0].blocks[0].operations if is_weight(w)]
        if "fusion.ops" in op.attributes:  # recorded by the tiling, before it nests them
            ops_in = [ir.StringAttr(a).value for a in op.attributes["fusion.ops"]]
        from_tile = built_from_tile(op)
        if thread_tiled(op):
            # Neither emitter's: the fallback path, from the stage's thread tiles.
            why = ir.StringAttr(op.attributes["fusion.fallback"]).value
            if not options.fallback:
                raise CudaCodegenError(why)
            launches.append(_fallback_launch(op, symbol, why, operands, weight_buffer,
                                             result_buffers, kernels, kind, ops_in))
            launches[-1].info["bytes"] = sum(buffers[b].nbytes for b in launches[-1].buffers)
            launches[-1].info["tiled"] = True
            continue
        if from_tile:
            # Tiled by the `tiled` stage, which asked the tile emitter first: built as tiled.
            try:
                emitter: KernelEmitter = TileEmitter(op, symbol, options.device,
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
                geometry = analyse_group(op, options.device, options.row_elements_per_thread,
                                         options.elementwise_unroll)
                kernels.append(KernelEmitter(op, symbol, geometry, weights).build())
        except CudaCodegenError as refusal:
            if not options.fallback:
                raise
            launches.append(_fallback_launch(op, symbol, str(refusal), operands,
                                             weight_buffer, result_buffers, kernels,
                                             kind, ops_in))
            launches[-1].info["bytes"] = sum(buffers[b].nbytes for b in launches[-1].buffers)
            continue
        args = list(operands)
        for w in weights:
            shape, elt = _tensor_info(w.results[0].type)
            args.append(weight_buffer(shape, elt, constant_bytes(w, asm)))
        args += result_buffers()
        shape = geometry.shape
        info = {"path": "fast", "shape": geometry.kind, "launch": dataclasses.asdict(shape),
                "rows": geometry.rows, "cols": geometry.cols,
                "bytes": sum(buffers[b].nbytes for b in args),
                # Built from the tile loop of the `tiled` stage, or from the whole group
                # (the reason the tiling was undone in `untiled`).
                "tiled": from_tile}
        if "fusion.untiled" in op.attributes:
            info["untiled"] = ir.StringAttr(op.attributes["fusion.untiled"]).value
        if info["tiled"]:  # no sizes: the group is one tile
            info["tile_sizes"] = list(ir.DenseI64ArrayAttr(op.attributes["fusion.tile_sizes"])) \
                if "fusion.tile_sizes" in op.attributes else []
        launches.append(Launch(symbol=symbol, buffers=args, grid=shape.grid, kind=kind,
                               ops=ops_in, info=info, block=shape.block, shared_bytes=0))
    for v in ret.operands:
        if _value_key(v) not in ids:
            raise CudaCodegenError("a returned value is not an input or a group result")
        outputs.append(ids[_value_key(v)])
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
    plan = Plan(target="cuda", buffers=buffers, launches=launches, inputs=inputs,
                outputs=outputs, metadata={"arch": options.arch})
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
        fatbin = lower_kernels(text, options, context, "fatbin")
    seconds = time.perf_counter() - start
    plan.metadata["compile_seconds"] = round(seconds, 4)
    plan.metadata["image"] = "fatbin" if fatbin else "ptx"
    return CudaProgram(plan, text, ptx, fatbin, seconds, constants)


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

FALLBACK_BLOCK = 128  # threads per block of a fallback kernel
# Tile intermediates up to this size live in each thread's stack (local memory).
FALLBACK_STACK_BYTES = 1 << 20


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


def fallback_tiling_options() -> dict:
    """The CPU tiling stage's options, set for a GPU: as many (small) tiles as it allows."""
    return {"threads": 1 << 24, "tiles_per_thread": 1, "min_tile_kb": 0, "max_tile_kb": 0}


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
    n_inputs = ir.IntegerAttr(main.attributes["fusion.num_inputs"]).value
    root: dict[int, tuple[str, int]] = {}
    for i, arg in enumerate(body.arguments):
        root[_value_key(arg)] = ("input", i) if i < n_inputs else ("output", i - n_inputs)
    allocs: dict[tuple[str, int], tuple[str, int]] = {}
    calls = []
    for op in body.operations:
        op = op.operation
        if op.name == "memref.alloc":
            root[_value_key(op.results[0])] = ("alloc", len(allocs))
            allocs[("alloc", len(allocs))] = ("alloc", len(allocs))
        elif op.name in ("memref.expand_shape", "memref.collapse_shape", "memref.cast"):
            root[_value_key(op.results[0])] = root[_value_key(op.operands[0])]
        elif op.name == "memref.copy":
            src = root[_value_key(op.operands[0])]
            dst = root[_value_key(op.operands[1])]
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
        role = root[_value_key(v)]
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
    from mlir.dialects import arith, scf

    from fusec.passes.cpu_tile_loops import forall_bounds

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


# A failed index check on the GPU (--fusion-guard-indices): the kernel cannot call the host,
# so the first failure of a run is recorded in this device global, [check + 1, index], which
# the runtime reads after the run (runtime/shim_cuda.c, fusec_index_status) and clears.
INDEX_STATUS = "fusec_index_status"
INDEX_STATUS_GLOBAL = (f'memref.global @{INDEX_STATUS} : memref<2xi64> = dense<0>')


def report_index_errors_on_device(gfunc: ir.Operation) -> bool:
    """Each `func.call @fusec_index_error(check, index)` in `gfunc` becomes a compare-and-swap
    of `check + 1` into word 0 of the device status (only where it is still 0: the first
    failure wins) and, by the winner, a store of `index` into word 1. Returns whether any."""
    from mlir.dialects import arith, memref, scf

    from fusec.passes.grouping import walk_ops
    from fusec.passes.guard_indices import ERROR_FUNCTION

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
    from fusec.passes import run_pipeline
    from fusec.passes.cpu_tile_loops import tile_loop
    from fusec.compiler import codegen_cpu

    from fusec.compiler.cuda_tiles import thread_tiled

    mini = _group_module(group)
    # Tiled by the `tiled` stage already (`cuda_tiles.tile_for_fallback`), or tiled here.
    tiling = [] if thread_tiled(group) else codegen_cpu.tiled_passes(fallback_tiling_options())
    run_pipeline(mini, tiling + codegen_cpu.bufferized_passes())
    kernels = _find_func(mini, lambda f: "fusion.kind" in f.attributes)
    if len(kernels) != 1:
        raise CudaCodegenError(f"fallback: the group became {len(kernels)} kernels, not one")
    kernel = kernels[0]
    main = _find_func(mini, lambda f: "fusion.kind" not in f.attributes)[0]
    roles = _kernel_arg_roles(main)
    forall, _ = tile_loop(kernel)
    serial = forall is None
    tile_sizes = []
    if "fusion.tile_sizes" in kernel.attributes:
        tile_sizes = list(ir.DenseI64ArrayAttr(kernel.attributes["fusion.tile_sizes"]))
    run_pipeline(mini, fallback_lowering_passes(serial))
    kernel = _find_func(mini, lambda f: "fusion.kind" in f.attributes)[0]
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
    return FallbackKernel(text=str(gfunc), args=roles, weights=weights,
                          grid=-(-tiles // block), block=block, tiles=tiles,
                          tile_sizes=tile_sizes, serial=serial)


def _fallback_launch(group: ir.Operation, symbol: str, refusal: str, operands: list[int],
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


# ---------------------------------------------------------------- model.so


SHIM_CUDA = Path(__file__).resolve().parent.parent / "runtime" / "shim_cuda.c"


def _c_bytes(data: bytes) -> str:
    rows = []
    for i in range(0, len(data), 24):
        rows.append(",".join(str(b) for b in data[i:i + 24]))
    return ",\n".join(rows)


def _c_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid C string literal for ASCII text


def _c_blob(name: str, data: bytes, blob_dir: Path | None) -> str:
    """A 64-byte aligned constant byte array `name`: inline C bytes, or (with `blob_dir`) the
    bytes written to a file there and pulled in by the assembler's .incbin, which keeps the
    C compiler from parsing megabytes of weights as text."""
    if blob_dir is None:
        return (f"static const unsigned char {name}[{len(data)}] "
                f"__attribute__((aligned(64))) = {{\n{_c_bytes(data)}\n}};")
    path = Path(blob_dir) / f"{name}.bin"
    path.write_bytes(data)
    return (f'__asm__(".section .rodata\\n.balign 64\\n.type {name}, @object\\n{name}:\\n'
            f'.incbin \\"{path}\\"\\n.size {name}, {len(data)}\\n.previous");\n'
            f"extern const unsigned char {name}[{len(data)}];")


def host_code(program: CudaProgram, blob_dir: Path | None = None) -> str:
    """The generated C part of a CUDA `model.so`: tables that runtime/shim_cuda.c runs."""
    plan = program.plan
    image = program.fatbin if program.fatbin is not None else program.ptx.encode() + b"\0"
    symbols = sorted({k.symbol for k in plan.launches
                      if k.symbol != "__copy__" and k.launch_kind != "gemm"})
    lines = [f'#include "{SHIM_CUDA}"', ""]
    lines.append(_c_blob("fusec_image", image, blob_dir))
    lines.append("static const char *const fusec_symbols[] = {"
                 + ", ".join(_c_string(s) for s in symbols) + "};")
    for k, launch in enumerate(plan.launches):
        lines.append(f"static const int fusec_launch{k}_buffers[] = {{"
                     + ", ".join(str(b) for b in launch.buffers) + "};")
        if launch.launch_kind == "gemm":
            lines.append(f"static const long long fusec_launch{k}_gemm[] = {{"
                         + ", ".join(str(v) for v in gemm_table(launch, None)) + "};")
    lines.append("static const fusec_cuda_launch fusec_launches[] = {")
    for k, launch in enumerate(plan.launches):
        gemm = "0"
        if launch.launch_kind == "gemm":
            kernel, gemm = -2, f"fusec_launch{k}_gemm"
        else:
            kernel = -1 if launch.symbol == "__copy__" else symbols.index(launch.symbol)
        lines.append(f"  {{{kernel}, {launch.grid}, {launch.block}, {launch.shared_bytes}, "
                     f"{len(launch.buffers)}, fusec_launch{k}_buffers, {gemm}}},")
    lines.append("};")
    roles = {"input": 0, "output": 1, "temp": 2, "constant": 3}
    for bid, data in program.constants.items():
        lines.append(_c_blob(f"fusec_constant{bid}", data, blob_dir))
    slot = {}
    for role, idlist in (("input", plan.inputs), ("output", plan.outputs)):
        for i, bid in enumerate(idlist):
            slot[bid] = i
    lines.append("static const fusec_cuda_buffer fusec_buffers[] = {")
    for b in plan.buffers:
        data = f"fusec_constant{b.id}" if b.id in program.constants else "0"
        view = -1 if b.view_of is None else b.view_of
        lines.append(f"  {{{roles[b.role]}, {slot.get(b.id, -1)}, {b.nbytes}ULL, {data}, "
                     f"{view}, {b.view_offset}ULL}},")
    lines.append("};")
    metadata = _metadata(plan)
    lines.append(f"static const char fusec_metadata_json[] = {_c_string(json.dumps(metadata))};")
    checks = [str(c) for c in plan.metadata.get("index_checks", [])]
    lines.append("static const char *const fusec_index_messages[] = {"
                 + ", ".join(_c_string(c) for c in checks + [""]) + "};")
    lines.append("static const fusec_cuda_program fusec_the_program = {")
    lines.append(f"  fusec_image, sizeof(fusec_image), {int(program.fatbin is not None)},")
    lines.append(f"  fusec_symbols, {len(symbols)},")
    lines.append(f"  fusec_launches, {len(plan.launches)},")
    lines.append(f"  fusec_buffers, {len(plan.buffers)},")
    lines.append(f"  {len(plan.inputs)}, {len(plan.outputs)}, fusec_metadata_json,")
    lines.append(f"  {plan.metadata.get('cublaslt_workspace_bytes', 0)}ULL,")
    lines.append(f"  fusec_index_messages, {len(checks)},")
    lines.append("};")
    lines.append("static const fusec_cuda_program *fusec_program(void) "
                 "{ return &fusec_the_program; }")
    return "\n".join(lines) + "\n"


def _metadata(plan: Plan) -> dict:
    """The same JSON object as the CPU artifact's `fusec_metadata()` (compiler/artifact.py)."""
    try:
        from fusec.compiler.artifact import artifact_metadata

        return artifact_metadata(plan)
    except Exception:  # noqa: BLE001 - the CPU artifact module may reject cuda-only launches
        by_id = {b.id: b for b in plan.buffers}
        tensor = lambda b: {"name": b.name, "shape": list(b.shape), "dtype": b.dtype}  # noqa
        return {"format": "fusec-artifact", "abi_version": 1, "target": "cuda",
                "inputs": [tensor(by_id[i]) for i in plan.inputs],
                "outputs": [tensor(by_id[i]) for i in plan.outputs],
                "kernels": [{"symbol": k.symbol, "kind": k.kind, "ops": k.ops, "grid": k.grid,
                             "info": k.info} for k in plan.launches],
                "temp_bytes": sum(b.nbytes for b in plan.buffers if b.role == "temp"),
                "plan": plan.to_json_dict()}


EXPORTED = ("fusec_abi_version", "fusec_metadata", "fusec_last_error", "fusec_run",
            "fusec_run_stream", "fusec_num_threads", "fusec_run_graph",
            "fusec_graph_captures_count", "fusec_index_status")


def write_cuda_artifact(program: CudaProgram, path: str | os.PathLike) -> Path:
    """Build `model.so` (links only libc + libdl; libcuda.so.1 is opened at run time)."""
    path = Path(path)
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "plan_cuda.c"
        src.write_text(host_code(program, Path(tmp)))
        script = Path(tmp) / "exports.map"
        script.write_text("{\n  global: " + " ".join(f"{s};" for s in EXPORTED)
                          + "\n  local: *;\n};\n")
        out = Path(tmp) / "model.so"
        cmd = [cc, "-O2", "-shared", "-fPIC", "-std=gnu11", str(src), "-o", str(out),
               f"-Wl,--version-script={script}", "-ldl", "-lpthread"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise CudaCodegenError(f"{' '.join(cmd)} failed:\n{done.stderr}")
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(out), str(path))
    return path


# ---------------------------------------------------------------- pipeline entry points


def tiled_passes(gemm: bool = True) -> list[str]:
    """Target cuda's `tiled` stage: the GPU's kernels and library calls formed from the
    fusion stage's groups (`--fusion-gpu-kernels`), then each kernel's block tile from the
    cost model (`--fusion-tile` for the H200, acting on capacity: re-tiled or split, the
    reason recorded; a tile the tile emitter refuses is undone, the reason in
    `fusion.untiled`), where each value lives (`--fusion-place`) and whether a tile fits
    (`--fusion-capacity`)."""
    return [f"fusion-gpu-kernels{{gemm={'true' if gemm else 'false'}}}",
            "fusion-normalise-kernels",
            "fusion-tile{device=nvidia-h200,fit=true}",
            # The index checks' reports (deferred by the linalg stage), now the tiles exist.
            "fusion-report-indices",
            "fusion-place{device=nvidia-h200}",
            "fusion-capacity{device=nvidia-h200}"]


def cuda_passes(options: Any) -> list[str]:
    """IR passes of the `cuda` stage: none. The CUDA code generator reads the `tiled`
    stage's IR (groups with their tile loops, and the untiled and library groups) and emits
    gpu dialect kernels itself (`generate`); the fallback path runs the CPU path's stages on
    one group at a time."""
    return []


def options_from(compile_options: Any) -> CudaOptions:
    """CudaOptions from fusec.compiler.pipeline.CompileOptions (its `arch`, `extra`)."""
    extra = dict(getattr(compile_options, "extra", {}) or {})
    return CudaOptions(arch=getattr(compile_options, "arch", DEFAULT_ARCH) or DEFAULT_ARCH,
                       toolkit=extra.get("cuda_toolkit"),
                       cubin=bool(extra.get("cubin", True)))


def build_so(module: ir.Module, compile_options: Any, output: str | os.PathLike,
             index_checks: list[str] = ()) -> dict:
    """The `so` stage for target cuda: fusion-stage module -> model.so; returns its metadata.
    `index_checks`: the messages of the module's index checks (pipeline.index_check_messages)."""
    signature = read_torch_signature(module)
    program = generate(module, options_from(compile_options))
    program.plan.metadata["index_checks"] = list(index_checks)
    name_user_outputs(program.plan)
    apply_torch_signature(program.plan, signature)
    write_cuda_artifact(program, output)
    return _metadata(program.plan)


def load_metadata(path: str | os.PathLike) -> dict:
    """The metadata JSON of a CUDA `model.so` (works without a GPU)."""
    lib = ctypes.CDLL(str(path))
    lib.fusec_metadata.restype = ctypes.c_char_p
    return json.loads(lib.fusec_metadata().decode())


# ---------------------------------------------------------------- matmul-rooted groups: cuBLASLt
#
# A group whose root is a matmul / batch_matmul is split, before code generation, into up to
# three groups: a *prologue* (whatever the matmul's operands need that cuBLASLt cannot absorb,
# through the emitter or the fallback), the *gemm* (one cuBLASLt call: transposes of the last
# two dims become transpose flags, contiguous reshapes and bf16/f16->f32 casts of operands are
# free, and the first elementwise ops on the result become cuBLASLt's fused epilogue when they
# match it: + bias row vector, ReLU, f32->bf16/f16 rounding, GELU), and an *epilogue* (the
# rest, one fused elementwise kernel of the emitter). The decision and its reason live in the
# IR (`fusion.path = "gemm"`, `fusion.why`, `fusion.gemm_epilogue` on the gemm group).
#
# GELU: torch's default GELU is the erf form, cuBLASLt's the tanh approximation (they differ
# by up to 4.7e-4 absolute, about 1e-4 relative on normal data): above fp32's 1e-5 tolerance,
# far below bf16/f16 rounding (2^-8 relative). So GELU goes into cuBLASLt only when the
# output is 16-bit; in fp32 it stays in the elementwise epilogue kernel.

GEMM_OPS = ("linalg.matmul", "linalg.batch_matmul")
RESHAPE_OPS = ("tensor.collapse_shape", "tensor.expand_shape")
# cudaDataType values (library_types.h).
CUDA_DATA_TYPES = {"f32": 0, "f16": 2, "bf16": 14}
CUBLAS_COMPUTE_32F = 68
# cublasLtEpilogue_t values.
CUBLASLT_EPILOGUES = {"default": 1, "relu": 2, "bias": 4, "relu_bias": 6, "gelu": 32,
                      "gelu_bias": 36}
# Bytes of cuBLASLt workspace the shim allocates once (NVIDIA recommends 32 MiB on Hopper).
GEMM_WORKSPACE_BYTES = 32 << 20


# ---------------------------------------------------------------- layout views
#
# Transposes, reshapes, static slices (the gathers of `extract_slices_to_generics`, marked
# `fusion.slice_offsets`) and broadcasts do no arithmetic: each output element is one input
# element at an affine position. A chain of them from a buffer is a *strided view* of it:
# element idx lives at offset + sum(idx[d] * strides[d]) elements. cuBLASLt reads its operands
# and writes its result through such a view when it is one batch stride, one leading
# dimension and a unit stride (`matrix_layout`): the head split / merge of attention then costs
# no kernel (`absorb_operand_layouts`, `absorb_result_layouts`). A layout group whose view is
# dense (a reshape, a slice of whole rows) is a plan-level view of its input buffer
# (`mark_view_groups`: `Buffer.view_of`), no kernel either.

SLICE_OFFSETS = "fusion.slice_offsets"
VIEW_OFFSET = "fusion.view_offset"
# The byte alignment a view's offset needs: the widest access a kernel makes (16-byte vectors).
VIEW_ALIGNMENT = 16


@dataclass(frozen=True)
class StridedView:
    """Where each element of a tensor lives in a buffer (in elements)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @staticmethod
    def dense(shape: Iterable[int]) -> "StridedView":
        shape = tuple(shape)
        strides, s = [], 1
        for d in reversed(shape):
            strides.append(s)
            s *= d
        return StridedView(shape, tuple(reversed(strides)), 0)

    def is_dense(self) -> bool:
        """Row-major contiguous from `offset`: the bytes of a buffer of this shape."""
        expected = StridedView.dense(self.shape).strides
        return all(n == 1 or s == e for n, s, e in zip(self.shape, self.strides, expected))


def _reassociation(op: ir.Operation) -> list[list[int]]:
    return [[ir.IntegerAttr(x).value for x in ir.ArrayAttr(g)]
            for g in ir.ArrayAttr(op.attributes["reassociation"])]


def _merged_stride(sizes: list[int], strides: list[int]) -> int | None:
    """The stride of `sizes` merged into one row-major dim, or None if they are not contiguous."""
    live = [(n, s) for n, s in zip(sizes, strides) if n != 1]
    if not live:
        return 1
    for (_, s0), (n1, s1) in zip(live, live[1:]):
        if s0 != s1 * n1:
            return None
    return live[-1][1]


def _layout_generic(op: ir.Operation) -> str | None:
    """'slice' (a marked gather), 'broadcast' (a pure copy with a projected input map) or
    'cast' (extf/truncf to f32) for a linalg.generic that moves no arithmetic; else None."""
    if op.name != "linalg.generic" or len(op.results) != 1:
        return None
    if SLICE_OFFSETS in op.attributes:
        return "slice"
    if len(op.operands) != 2:
        return None
    if _unary_kind(op) == "cast":
        return "cast" if _cast_types(op)[1] == "f32" else None
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if len(ops) != 1 or _value_key(ops[0].operands[0]) != _value_key(block.arguments[0]):
        return None
    try:
        maps = [_parse_map(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    except CudaCodegenError:
        return None
    dims = maps[0].results
    if maps[1].results != tuple(range(maps[1].num_dims)) or None in dims or \
            len(set(dims)) != len(dims) or list(dims) != sorted(dims):
        return None
    return "broadcast"


def layout_source(op: ir.Operation) -> tuple[ir.Value, ir.Operation, int] | None:
    """For a layout op (no arithmetic): (the value it reads, the op that reads it, which
    operand); None for any other op. A gather reads its source through a tensor.extract."""
    name = op.name
    if name in RESHAPE_OPS or name == "linalg.transpose":
        return op.operands[0], op, 0
    kind = _layout_generic(op)
    if kind in ("cast", "broadcast"):
        return op.operands[0], op, 0
    if kind == "slice":
        from fusec.passes.grouping import walk_ops

        extracts = walk_ops(op, lambda o: o.name == "tensor.extract")
        if len(extracts) == 1:
            return extracts[0].operands[0], extracts[0], 0
    return None


def view_forward(view: StridedView, op: ir.Operation) -> StridedView | None:
    """The view of `op`'s result given the view of what it reads (`layout_source`); None when
    the result is not a strided view of the same buffer (a collapse of non-contiguous dims)."""
    name = op.name
    out_shape = tuple(ir.RankedTensorType(op.results[0].type).shape)
    if name == "linalg.transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        return StridedView(out_shape, tuple(view.strides[p] for p in perm), view.offset)
    if name == "tensor.collapse_shape":
        strides = []
        for group in _reassociation(op):
            s = _merged_stride([view.shape[d] for d in group], [view.strides[d] for d in group])
            if s is None:
                return None
            strides.append(s)
        return StridedView(out_shape, tuple(strides), view.offset)
    if name == "tensor.expand_shape":
        out = [0] * len(out_shape)
        for d, group in enumerate(_reassociation(op)):
            s = view.strides[d]
            for o in reversed(group):
                out[o] = s
                s *= out_shape[o]
        return StridedView(out_shape, tuple(out), view.offset)
    kind = _layout_generic(op)
    if kind == "cast":
        return StridedView(out_shape, view.strides, view.offset)
    if kind == "slice":
        offsets = list(ir.DenseI64ArrayAttr(op.attributes[SLICE_OFFSETS]))
        return StridedView(out_shape, view.strides,
                           view.offset + sum(o * s for o, s in zip(offsets, view.strides)))
    if kind == "broadcast":
        dims = _parse_map(ir.ArrayAttr(op.attributes["indexing_maps"])[0]).results
        out = [0] * len(out_shape)
        for j, d in enumerate(dims):
            out[d] = view.strides[j]
        return StridedView(out_shape, tuple(out), view.offset)
    return None


def view_backward(view: StridedView, op: ir.Operation) -> StridedView | None:
    """The view of what a *bijective* layout op (transpose, reshape) reads, given the view of
    its result: where a gemm must write so that the op's result needs no kernel."""
    src = tuple(ir.RankedTensorType(op.operands[0].type).shape)
    name = op.name
    if name == "linalg.transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        strides = [0] * len(perm)
        for d, p in enumerate(perm):
            strides[p] = view.strides[d]
        return StridedView(src, tuple(strides), view.offset)
    if name in RESHAPE_OPS:
        groups = _reassociation(op)
        if name == "tensor.expand_shape":  # the source is the result collapsed
            strides = []
            for group in groups:
                s = _merged_stride([view.shape[d] for d in group],
                                   [view.strides[d] for d in group])
                if s is None:
                    return None
                strides.append(s)
            return StridedView(src, tuple(strides), view.offset)
        out = [0] * len(src)  # collapse: the source is the result expanded
        for d, group in enumerate(groups):
            s = view.strides[d]
            for o in reversed(group):
                out[o] = s
                s *= src[o]
        return StridedView(src, tuple(out), view.offset)
    return None


@dataclass(frozen=True)
class MatrixLayout:
    """One cuBLASLt operand in row-major terms: [batch,] rows x cols, stored transposed or not,
    leading dimension `ld`, `batch_stride` and `offset` in elements."""

    transposed: bool
    ld: int
    batch_stride: int
    offset: int


def matrix_layout(view: StridedView, element_bytes: int, output: bool = False
                  ) -> MatrixLayout | None:
    """The cuBLASLt layout of a [batch,] rows x cols view, or None if it has none: one unit
    stride among the last two dims, a leading dimension that covers the other, one batch
    stride (0: broadcast, operands only). A view that is not dense must keep 16-byte aligned
    strides and offset (what cuBLASLt's fast kernels assume)."""
    if len(view.shape) not in (2, 3) or any(s < 0 for s in view.strides):
        return None
    r, c = view.shape[-2:]
    sr, sc = view.strides[-2:]
    batch = view.shape[0] if len(view.shape) == 3 else 1
    batch_stride = view.strides[0] if batch > 1 else 0
    if (sc == 1 or c == 1) and (r == 1 or sr >= c):
        layout = MatrixLayout(False, sr if r > 1 else c, batch_stride, view.offset)
    elif not output and (sr == 1 or r == 1) and (c == 1 or sc >= r):
        layout = MatrixLayout(True, sc if c > 1 else r, batch_stride, view.offset)
    else:
        return None
    if output and batch > 1 and batch_stride == 0:
        return None
    if not (view.is_dense() and view.offset == 0):
        if any((x * element_bytes) % 16 for x in (layout.ld, layout.batch_stride,
                                                   layout.offset)):
            return None
    return layout


def _defining(value: ir.Value) -> ir.Operation | None:
    from fusec.passes.grouping import defining_op

    return defining_op(value)


def _single_use(value: ir.Value) -> bool:
    return len(list(value.uses)) == 1


def _scalar_body(op: ir.Operation) -> tuple[list[ir.Value], list[ir.Operation], ir.Value] | None:
    """A linalg.generic's block arguments, its ops and its one yielded value."""
    if op.name != "linalg.generic" or len(op.results) != 1:
        return None
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if ops[-1].name != "linalg.yield" or len(ops[-1].operands) != 1:
        return None
    return list(block.arguments), ops[:-1], ops[-1].operands[0]


_CMP = {"ogt": ">", "ugt": ">", "oge": ">=", "uge": ">=", "olt": "<", "ult": "<",
        "ole": "<=", "ule": "<="}


def evaluate_body(op: ir.Operation, args: list[Any]) -> Any:
    """The value a linalg.generic's scalar body yields for `args` (numpy float64 arrays).

    Recognising an epilogue by what it computes, not by how torch-mlir spelled it, makes the
    match independent of the op order in the body; any op not listed here means no match.
    """
    import numpy as np

    parsed = _scalar_body(op)
    if parsed is None:
        raise CudaCodegenError("not a one-result linalg.generic")
    block_args, ops, yielded = parsed
    env: dict[int, Any] = {_value_key(a): x for a, x in zip(block_args, args)}

    def get(v: ir.Value) -> Any:
        key = _value_key(v)
        if key in env:
            return env[key]
        producer = _defining(v)
        if producer is not None and producer.name == "arith.constant":
            attr = producer.attributes["value"]
            if isinstance(attr, ir.FloatAttr):
                return float(attr.value)
        raise CudaCodegenError("the body reads a value it does not define")

    from math import erf

    verf = np.vectorize(erf)
    unary = {"math.erf": verf, "math.sqrt": np.sqrt, "math.tanh": np.tanh, "math.exp": np.exp,
             "arith.negf": np.negative, "arith.extf": lambda x: x, "arith.truncf": lambda x: x}
    binary = {"arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply,
              "arith.divf": np.divide, "arith.maximumf": np.maximum,
              "arith.maxnumf": np.maximum, "arith.minimumf": np.minimum,
              "arith.minnumf": np.minimum}
    for o in ops:
        name = o.name
        if name == "arith.constant":
            continue
        xs = [get(v) for v in o.operands]
        if name in unary:
            r = unary[name](xs[0])
        elif name in binary:
            r = binary[name](xs[0], xs[1])
        elif name == "arith.cmpf":
            raw = str(o.attributes["predicate"])
            pred = ({"2": "ogt", "3": "oge", "4": "olt", "5": "ole", "9": "ugt", "10": "uge",
                     "11": "ult", "12": "ule"}.get(raw.split(":")[0].strip(), "")
                    if raw[:1].isdigit() else re.sub(r"[^a-z]", " ", raw).split()[-1])
            if pred not in _CMP:
                raise CudaCodegenError(f"cmpf {pred}")
            r = eval(f"xs[0] {_CMP[pred]} xs[1]")  # noqa: S307 - operator from a fixed table
        elif name == "arith.select":
            r = np.where(xs[0], xs[1], xs[2])
        else:
            raise CudaCodegenError(f"'{name}' in an epilogue body")
        env[_value_key(o.results[0])] = r
    return get(yielded)


def _samples() -> Any:
    import numpy as np

    return np.linspace(-4.0, 4.0, 81)


def _is_elementwise_1(op: ir.Operation) -> bool:
    """One input, one output, identity maps, all parallel."""
    if op.name != "linalg.generic" or len(op.operands) != 2:
        return False
    maps = [_parse_map(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    return all(m.results == tuple(range(m.num_dims)) for m in maps) and all(
        "parallel" in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"]))


def _unary_kind(op: ir.Operation) -> str | None:
    """'cast' (extf/truncf only), 'relu', 'gelu' (erf form) or None, by evaluation."""
    import numpy as np

    if not _is_elementwise_1(op):
        return None
    parsed = _scalar_body(op)
    if parsed is None:
        return None
    names = [o.name for o in parsed[1] if o.name != "arith.constant"]
    if names in (["arith.extf"], ["arith.truncf"]):
        return "cast"
    x = _samples()
    try:
        y = evaluate_body(op, [x, np.zeros_like(x)])
    except CudaCodegenError:
        return None
    from math import erf

    gelu = 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2.0)))
    if np.allclose(y, np.maximum(x, 0), rtol=1e-6, atol=1e-6):
        return "relu"
    # bf16 constants (sqrt(2) rounded) move the value by ~2^-8 relative: still erf-GELU.
    if np.allclose(y, gelu, rtol=1e-2, atol=1e-2):
        return "gelu"
    return None


def _cast_types(op: ir.Operation) -> tuple[str, str]:
    ins = ir.RankedTensorType(op.operands[0].type).element_type
    outs = ir.RankedTensorType(op.results[0].type).element_type
    return str(ins), str(outs)


def _bias_add(op: ir.Operation, result: ir.Value) -> ir.Value | None:
    """If `op` is `result + bias[col]` (bias a row vector over the last dim), the bias."""
    import numpy as np

    if op.name != "linalg.generic" or len(op.operands) != 3:
        return None
    maps = [_parse_map(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if maps[0].num_dims != 2 or maps[2].results != (0, 1):
        return None
    ins = list(op.operands[:2])
    if _value_key(ins[0]) == _value_key(result) and maps[0].results == (0, 1) \
            and maps[1].results == (1,):
        bias = ins[1]
    elif _value_key(ins[1]) == _value_key(result) and maps[1].results == (0, 1) \
            and maps[0].results == (1,):
        bias = ins[0]
    else:
        return None
    a, b = _samples(), _samples()[::-1] * 0.37
    try:
        y = evaluate_body(op, [a, b, np.zeros_like(a)])
    except CudaCodegenError:
        return None
    return bias if np.allclose(y, a + b, rtol=1e-12, atol=0) else None


def _swaps_last_two(op: ir.Operation) -> bool:
    perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
    n = len(perm)
    return n >= 2 and perm == list(range(n - 2)) + [n - 1, n - 2]


@dataclass
class GemmOperand:
    """What cuBLASLt reads for one matmul operand: `source` (a group input or a weight) through
    `view` (where each operand element lives in the source's buffer), the layout ops between
    (`ops`: transposes, reshapes, slices, broadcasts, casts to f32) absorbed."""

    source: ir.Value
    view: StridedView
    element: str  # element type of `source` (cuBLASLt's input type)
    ops: list[ir.Operation]

    @property
    def transposed(self) -> bool:
        layout = matrix_layout(self.view, ELEMENT_BYTES.get(self.element, 4))
        return bool(layout and layout.transposed)


def _layout_walk(value: ir.Value) -> list[ir.Operation]:
    """The layout ops (`layout_source`) from `value` back, each result used once."""
    chain: list[ir.Operation] = []
    while True:
        op = _defining(value)
        if op is None or not _single_use(value):
            return chain
        src = layout_source(op)
        if src is None:
            return chain
        chain.append(op)
        value = src[0]


def _view_through(source: ir.Value, ops_outward: list[ir.Operation]) -> StridedView | None:
    """The view of the last op's result in `source`'s dense buffer (ops from source outward)."""
    view: StridedView | None = StridedView.dense(ir.RankedTensorType(source.type).shape)
    for op in ops_outward:
        view = view_forward(view, op)
        if view is None:
            return None
    return view


def gemm_operand(value: ir.Value, matrix: bool = True) -> GemmOperand:
    """Walk back from a matmul operand over the layout ops cuBLASLt absorbs (each result used
    once) and stop at the farthest value through which the operand is still one cuBLASLt
    matrix layout (`matrix_layout`; `matrix=False`: a dense vector, for the bias)."""
    chain = _layout_walk(value)
    for n in range(len(chain), -1, -1):
        source = value if n == 0 else layout_source(chain[n - 1])[0]
        element = str(ir.RankedTensorType(source.type).element_type)
        view = _view_through(source, list(reversed(chain[:n])))
        if view is None:
            continue
        if matrix and matrix_layout(view, ELEMENT_BYTES.get(element, 4)) is None:
            continue
        if not matrix and not (view.is_dense() and view.offset == 0):
            continue
        return GemmOperand(source, view, element, chain[:n])
    raise CudaCodegenError("unreachable: the operand itself is a dense view")


def _operand_ok(operand: GemmOperand) -> bool:
    producer = _defining(operand.source)
    if producer is not None and producer.name == "arith.constant" and not is_weight(producer):
        return False  # a splat tensor constant has no buffer
    return operand.element in CUDA_DATA_TYPES


@dataclass
class GemmSplit:
    """How one matmul-rooted group splits (see the section comment)."""

    prologue: list[ir.Operation]
    gemm: list[ir.Operation]
    epilogue: list[ir.Operation]
    fused: list[str]  # epilogue ops absorbed by cuBLASLt: "bias", "relu", "cast", "gelu"
    why: str


def plan_gemm_split(group: ir.Operation) -> GemmSplit | str:
    """The split of `group`, or the reason it is not a cuBLASLt group."""
    from fusec.passes.grouping import CLONED_INTO_GROUPS, walk_ops

    body = group.regions[0].blocks[0]
    ops = [o.operation for o in body.operations][:-1]
    mms = [o for o in ops if o.name in GEMM_OPS]
    if len(mms) != 1:
        return f"{len(mms)} matmuls in the group"
    mm = mms[0]
    fill = _defining(mm.operands[2])
    if fill is None or fill.name != "linalg.fill" or not _single_use(mm.operands[2]):
        return "the matmul does not start from a zero fill"
    zero = _defining(fill.operands[0])
    if zero is None or zero.name != "arith.constant" or \
            float(ir.FloatAttr(zero.attributes["value"]).value) != 0.0:
        return "the matmul accumulates into a non-zero init"
    a, b = gemm_operand(mm.operands[0]), gemm_operand(mm.operands[1])
    if not (_operand_ok(a) and _operand_ok(b)) or a.element != b.element:
        return f"operand types {a.element} x {b.element} are not a cuBLASLt pair"
    if str(ir.RankedTensorType(mm.results[0].type).element_type) != "f32" and \
            a.element != str(ir.RankedTensorType(mm.results[0].type).element_type):
        return "the matmul's result type differs from its operands'"
    core = a.ops + b.ops + [fill, mm]
    absorbed, fused, out_type = _absorb_epilogue(mm, a.element, allow_bias=True)
    if absorbed is None:
        absorbed, fused, out_type = _absorb_epilogue(mm, a.element, allow_bias=False)
    gemm = core + absorbed
    gemm_keys = {id_of(o) for o in gemm}
    # Prologue: what the gemm ops need, transitively, inside the group.
    by_key = {id_of(o): o for o in ops}
    needed: set[int] = set()
    stack = [o for o in gemm]
    while stack:
        op = stack.pop()
        for inner in walk_ops(op):
            for v in inner.operands:
                p = _defining(v)
                if p is None:
                    continue
                k = id_of(p)
                if k in by_key and k not in gemm_keys and k not in needed \
                        and p.name not in CLONED_INTO_GROUPS:
                    needed.add(k)
                    stack.append(p)
    prologue = [o for o in ops if id_of(o) in needed]
    epilogue = [o for o in ops if id_of(o) not in needed and id_of(o) not in gemm_keys
                and o.name not in CLONED_INTO_GROUPS]
    why = "matmul-rooted group: cuBLASLt"
    if fused:
        why += f" with the fused epilogue {'+'.join(fused)}"
    if any(_unary_kind(o) == "gelu" for o in epilogue if o.name == "linalg.generic") \
            and out_type == "f32":
        why += ("; GELU stays in the elementwise kernel (cuBLASLt's GELU is the tanh "
                "approximation, ~1e-4 from torch's erf GELU: over fp32's 1e-5 tolerance)")
    return GemmSplit(prologue, gemm, epilogue, fused, why)


def _is_zero_splat(value: ir.Value) -> bool:
    op = _defining(value)
    if op is None or op.name != "arith.constant":
        return False
    attr = op.attributes["value"]
    if not (isinstance(attr, ir.DenseElementsAttr) and attr.is_splat):
        return False
    try:
        return float(ir.FloatAttr(attr.get_splat_value()).value) == 0.0
    except Exception:  # noqa: BLE001 - not a float splat
        return False


def _absorb_epilogue(mm: ir.Operation, in_type: str, allow_bias: bool
                     ) -> tuple[list[ir.Operation] | None, list[str], str]:
    """The elementwise ops after `mm` that cuBLASLt's epilogue runs, in order:
    [+ bias] [relu] [round f32 to the operands' 16-bit type] [relu | gelu (16-bit only)].
    Returns (ops, their names, output element type); ops None when the bias's type would
    differ from the output's (cuBLASLt reads the bias in the output's type)."""
    rank = ir.RankedTensorType(mm.results[0].type).rank
    out_type = str(ir.RankedTensorType(mm.results[0].type).element_type)
    value = mm.results[0]
    ops: list[ir.Operation] = []
    fused: list[str] = []
    bias_type = None
    reshaped = False
    while _single_use(value):
        user = next(iter(value.uses)).owner
        user = user.operation if hasattr(user, "operation") else user
        if user.name in RESHAPE_OPS:
            # A reshape of the result is where cuBLASLt writes (the D view), not an op:
            # `[16, 2048] + bias -> [1, 16, 2048] -> ReLU` stays one cuBLASLt call.
            ops.append(user)
            value = user.results[0]
            reshaped = True
            continue
        if user.name != "linalg.generic":
            break
        kind = _unary_kind(user)
        cast = _cast_types(user) if kind == "cast" else None
        bias = _bias_add(user, value) if allow_bias and not fused and not reshaped \
            and rank == 2 else None
        if bias is not None and _is_zero_splat(bias):
            # + zeros (torch's default in-projection bias): the identity, no epilogue step.
            ops.append(user)
            value = user.results[0]
            continue
        if bias is not None:
            bias_op = gemm_operand(bias, matrix=False)
            if not _operand_ok(bias_op):
                break
            ops += bias_op.ops
            bias_type = bias_op.element
            step = "bias"
        elif cast and "cast" not in fused and cast[0] == "f32" and cast[1] == in_type \
                and in_type in ("bf16", "f16"):
            out_type = cast[1]
            step = "cast"
        elif kind == "relu" and not {"relu", "gelu"} & set(fused):
            step = "relu"
        elif kind == "gelu" and not {"relu", "gelu"} & set(fused) and out_type != "f32":
            step = "gelu"
        else:
            break
        fused.append(step)
        ops.append(user)
        value = user.results[0]
    if bias_type is not None and bias_type != out_type:
        return None, [], out_type
    return ops, fused, out_type


def unit_transposes_to_reshapes(func: ir.Operation) -> int:
    """Rewrite each linalg.transpose that only moves size-1 dims (batch 1: [1, 16, 512] ->
    [16, 1, 512]) into a collapse_shape to 1-D and an expand_shape: the same bytes, so no
    kernel (cuBLASLt reads through it, the emitter treats it as a view). Returns how many."""
    from fusec.passes.grouping import walk_ops

    count = 0
    for op in walk_ops(func, lambda o: o.name == "linalg.transpose"):
        src = op.operands[0]
        src_shape = list(ir.RankedTensorType(src.type).shape)
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        moved = [p for p in perm if src_shape[p] != 1]
        if len(src_shape) < 2 or moved != sorted(moved) or not op.results[0].uses:
            continue
        result_type = op.results[0].type
        numel = math.prod(src_shape)
        elt = ir.RankedTensorType(src.type).element_type
        out_shape = list(ir.RankedTensorType(result_type).shape)
        with ir.InsertionPoint(op), op.location:
            flat = ir.Operation.create(
                "tensor.collapse_shape", results=[ir.RankedTensorType.get([numel], elt)],
                operands=[src], attributes={"reassociation": ir.ArrayAttr.parse(
                    "[[" + ", ".join(str(i) for i in range(len(src_shape))) + "]]")})
            view = ir.Operation.create(
                "tensor.expand_shape", results=[result_type], operands=[flat.results[0]],
                attributes={"reassociation": ir.ArrayAttr.parse(
                    "[[" + ", ".join(str(i) for i in range(len(out_shape))) + "]]"),
                    "static_output_shape": ir.DenseI64ArrayAttr.get(out_shape)})
        op.results[0].replace_all_uses_with(view.results[0])
        op.erase()
        count += 1
    return count


def _cone(value: ir.Value, members: dict[int, ir.Operation]) -> set[int]:
    """Keys of the ops among `members` that `value` depends on (itself included)."""
    from fusec.passes.grouping import walk_ops

    seen: set[int] = set()
    stack = [value]
    while stack:
        producer = _defining(stack.pop())
        if producer is None or id_of(producer) not in members or id_of(producer) in seen:
            continue
        seen.add(id_of(producer))
        for inner in walk_ops(producer):
            stack.extend(inner.operands)
    return seen


def group_refusal(group: ir.Operation, options: CudaOptions) -> str | None:
    """Why the group-level emitter does not take `group` as it is (None: it does)."""
    try:
        geometry = analyse_group(group, options.device, options.row_elements_per_thread,
                                 options.elementwise_unroll)
        weights = [w for w in group.regions[0].blocks[0].operations if is_weight(w)]
        KernelEmitter(group, "fusec_probe", geometry, weights).build()
    except CudaCodegenError as refusal:
        return str(refusal)
    return None


def _emittable(group: ir.Operation, options: CudaOptions) -> bool:
    """Whether the fast emitter takes `group` as it is."""
    return group_refusal(group, options) is None


def _pieces_at_reshapes(ops: list[ir.Operation]) -> list[list[ir.Operation]]:
    """`ops` (a group's body, constants left out) cut before every reshape of a value the group
    computes: the connected pieces of the def-use graph without those edges, in block order."""
    keys = {id_of(o): i for i, o in enumerate(ops)}
    parent = list(range(len(ops)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, op in enumerate(ops):
        for v in op.operands:
            producer = _defining(v)
            if producer is None or id_of(producer) not in keys:
                continue
            # Cut into the first reshape of a chain (reshapes of reshapes stay together).
            if op.name in RESHAPE_OPS and producer.name not in RESHAPE_OPS:
                continue
            parent[find(i)] = find(keys[id_of(producer)])
    pieces: dict[int, list[ir.Operation]] = {}
    for i, op in enumerate(ops):
        pieces.setdefault(find(i), []).append(op)
    return list(pieces.values())


def _convex(pieces: list[list[ir.Operation]]) -> bool:
    """No path leaves a piece and comes back to it (each piece can be one group)."""
    piece_of = {id_of(o): n for n, piece in enumerate(pieces) for o in piece}
    # Piece-level dependency graph must be acyclic.
    deps: dict[int, set[int]] = {n: set() for n in range(len(pieces))}
    for n, piece in enumerate(pieces):
        for op in piece:
            for v in op.operands:
                producer = _defining(v)
                if producer is not None and id_of(producer) in piece_of \
                        and piece_of[id_of(producer)] != n:
                    deps[n].add(piece_of[id_of(producer)])
    state: dict[int, int] = {}

    def cyclic(n: int) -> bool:
        if state.get(n) == 1:
            return True
        if state.get(n) == 2:
            return False
        state[n] = 1
        if any(cyclic(d) for d in deps[n]):
            return True
        state[n] = 2
        return False

    return not any(cyclic(n) for n in deps)


def split_at_reshapes(func: ir.Operation, options: CudaOptions) -> int:
    """Split each group the emitter refuses at reshapes of values it computes.

    The fallback tiles a group's root and fuses producers into the tile, but cannot slice a
    producer through a reshape: such a producer is computed whole *by every thread* (batch-1
    attention's bias add + head split: 8192 threads x 24K elements). Cut there, each piece
    tiles cleanly (a reshape of a kernel's input is a view), and elementwise pieces go to the
    fast emitter. Returns how many groups were split."""
    from fusec.passes.grouping import CLONED_INTO_GROUPS, form_group
    from fusec.passes.inline_groups import inline_group

    count = 0
    body = func.regions[0].blocks[0]
    for group in [op.operation for op in body.operations if op.operation.name == GROUP_OP]:
        if "fusion.path" in group.attributes or _emittable(group, options):
            continue
        ops = [o.operation for o in group.regions[0].blocks[0].operations][:-1]
        ops = [o for o in ops if o.name not in CLONED_INTO_GROUPS]
        pieces = _pieces_at_reshapes(ops)
        if len(pieces) < 2 or not _convex(pieces):
            continue
        kind = str(group.attributes["kind"]).strip('"')
        inline_group(group)
        for piece in pieces:
            form_group(piece, kind if len(piece) > 1 else "single",
                       {"fusion.split": ir.StringAttr.get("reshape")})
        count += 1
    return count


def split_multi_output_groups(func: ir.Operation, options: CudaOptions) -> int:
    """Split each group with several outputs (not a gemm) into one group per output, ops that
    two outputs need cloned into both. A multi-output group has no single tile loop, so the
    fallback runs it in one GPU thread; one output per group gives each its own parallel
    kernel (recomputing a shared bias add costs far less than a serial kernel). Returns how
    many groups were split."""
    from fusec.passes.grouping import CLONED_INTO_GROUPS, form_group
    from fusec.passes.inline_groups import inline_group

    count = 0
    body = func.regions[0].blocks[0]
    for group in [op.operation for op in body.operations if op.operation.name == GROUP_OP]:
        if len(group.results) < 2 or "fusion.path" in group.attributes or \
                _emittable(group, options):
            continue
        ops = [o.operation for o in group.regions[0].blocks[0].operations]
        yielded = list(ops[-1].operands)
        members = {id_of(o): o for o in ops[:-1] if o.name not in CLONED_INTO_GROUPS}
        cones = [_cone(v, members) for v in yielded]
        if any(not c for c in cones) or len({frozenset(c) for c in cones}) != len(cones):
            continue  # an output that is an input, or two outputs of one op
        kind = str(group.attributes["kind"]).strip('"')
        order = [o for o in ops[:-1] if id_of(o) in members]
        inline_group(group)
        # Every clone is made from an untouched original, then each output's versions are
        # wired to each other (a clone of a clone would keep another output's operands).
        operands = {id_of(o): list(o.operands) for o in order}
        claimed: set[int] = set()
        versions: list[dict[int, ir.Operation]] = []
        for cone in cones:
            version = {}
            for op in order:
                key = id_of(op)
                if key not in cone:
                    continue
                if key in claimed:
                    with ir.InsertionPoint(op):
                        version[key] = op.clone()
                else:
                    version[key] = op
            claimed |= cone
            versions.append(version)
        sets: list[list[ir.Operation]] = []
        for version in versions:
            for key, op in version.items():
                for j, v in enumerate(operands[key]):
                    producer = _defining(v)
                    if producer is not None and id_of(producer) in version:
                        op.operands[j] = version[id_of(producer)].results[
                            ir.OpResult(v).result_number]
            sets.append(list(version.values()))
        dead = [o for o in order if id_of(o) not in claimed]
        sets[0] += dead
        for chosen in sets:
            form_group(chosen, kind if kind != "horizontal" else "vertical",
                       {"fusion.split": ir.StringAttr.get("output")})
        count += 1
    return count


def extract_slices_to_generics(func: ir.Operation) -> int:
    """Rewrite each static, unit-stride, rank-keeping tensor.extract_slice into a linalg.generic
    that gathers: out[i] = src[i + offset] (linalg.index + tensor.extract). Upstream tiling
    does not tile extract_slice, so a slice group ran in one GPU thread; the generic runs one
    element per thread. (An offset map `d0 + o` would fail linalg's shape check at o = 0.)
    Returns how many."""
    from mlir.dialects import arith, linalg, tensor

    from fusec.passes.grouping import walk_ops

    count = 0
    for op in walk_ops(func, lambda o: o.name == "tensor.extract_slice"):
        if len(op.operands) != 1:
            continue  # dynamic offsets or sizes
        result_type = ir.RankedTensorType(op.results[0].type)
        sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
        strides = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
        offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
        if sizes != list(result_type.shape) or any(st != 1 for st in strides):
            continue
        rank = len(sizes)
        elt = result_type.element_type
        maps = ir.ArrayAttr.get([ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))])
        parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
        index = ir.IndexType.get()
        with ir.InsertionPoint(op), op.location:
            empty = tensor.EmptyOp(sizes, elt)
            gather = linalg.GenericOp([result_type], [], [empty.result], maps,
                                      ir.ArrayAttr.get([parallel] * rank))
            block = gather.regions[0].blocks.append(elt)
            with ir.InsertionPoint(block):
                where = []
                for d, o in enumerate(offsets):
                    i = linalg.IndexOp(ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d))
                    where.append(arith.AddIOp(i.result, arith.ConstantOp(index, o).result).result
                                 if o else i.result)
                value = tensor.ExtractOp(op.operands[0], where)
                linalg.YieldOp([value.result])
        # The offsets, for the layout-view analysis (a gather is a strided view).
        gather.operation.attributes[SLICE_OFFSETS] = ir.DenseI64ArrayAttr.get(offsets)
        op.results[0].replace_all_uses_with(gather.results[0])
        op.erase()
        count += 1
    return count


def _absorbable_group(group: ir.Operation) -> bool:
    """A group of only what cuBLASLt absorbs in an operand: casts to f32, transposes of the
    last two dims, reshapes (the planner leaves these apart from a large matmul's group)."""
    from fusec.passes.grouping import CLONED_INTO_GROUPS

    if len(group.results) != 1:
        return False
    for op in [o.operation for o in group.regions[0].blocks[0].operations][:-1]:
        if op.name in CLONED_INTO_GROUPS or op.name in RESHAPE_OPS:
            continue
        if op.name == "linalg.transpose" and _swaps_last_two(op):
            continue
        if op.name == "linalg.generic" and _unary_kind(op) == "cast" \
                and _cast_types(op)[1] == "f32":
            continue
        return False
    return True


def _merge_operand_producers(group: ir.Operation) -> ir.Operation:
    """Pull into a matmul group the groups that only cast/transpose/reshape its operands, so
    that cuBLASLt reads the operands as they are (bf16, transposed) instead of a materialised
    f32 copy. Returns the (possibly new) group."""
    from fusec.passes.grouping import form_group
    from fusec.passes.inline_groups import inline_group

    body = group.regions[0].blocks[0]
    mm = next(o.operation for o in body.operations if o.operation.name in GEMM_OPS)
    producers = []
    for operand in list(mm.operands)[:2]:
        source = gemm_operand(operand).source
        if not isinstance(source.owner, ir.Block) or not _single_use(source):
            continue
        outer = group.operands[ir.BlockArgument(source).arg_number]
        producer = _defining(outer)
        if producer is not None and producer.name == GROUP_OP and _single_use(outer) \
                and _absorbable_group(producer):
            producers.append(producer)
    # The zero fill the matmul accumulates into, when the planner left it a group of its own
    # (shared by several matmuls, even): a copy of it joins this group.
    init = mm.operands[2]
    extra: list[ir.Operation] = []
    if isinstance(init.owner, ir.Block) and _single_use(init):
        argno = ir.BlockArgument(init).arg_number
        producer = _defining(group.operands[argno])
        if producer is not None and producer.name == GROUP_OP and \
                len(producer.results) == 1 and \
                [o.name for o in _body_ops(producer)] == ["linalg.fill"]:
            from fusec.passes.inline_groups import inline_group

            with ir.InsertionPoint(group):
                clone = producer.clone()
            fill = list(clone.regions[0].blocks[0].operations)[-1].operands[0]
            extra = [o.operation for o in list(clone.regions[0].blocks[0].operations)[:-1]]
            inline_group(clone)
            group.operands[argno] = fill
    if not producers and not extra:
        return group
    attributes = {name: group.attributes[name] for name in group.attributes}
    kind = str(group.attributes["kind"]).strip('"')
    ops = list(extra)
    for g in producers + [group]:
        ops += [o.operation for o in g.regions[0].blocks[0].operations][:-1]
        inline_group(g)
    from fusec.passes.grouping import CLONED_INTO_GROUPS

    ops = [o for o in ops if o.name not in CLONED_INTO_GROUPS]
    attributes.pop("kind", None)
    return form_group(ops, kind, attributes)


def split_matmul_groups(func: ir.Operation) -> list[str]:
    """Split every matmul-rooted group of `func` (in place) as `plan_gemm_split` says.

    Returns one line per matmul group: what was done, or why it stays one kernel.
    """
    from fusec.passes.grouping import form_group
    from fusec.passes.inline_groups import inline_group

    body = func.regions[0].blocks[0]
    notes = []
    groups = [op.operation for op in body.operations if op.operation.name == GROUP_OP]
    for group in groups:
        names = [o.operation.name for o in group.regions[0].blocks[0].operations]
        if names.count("linalg.matmul") + names.count("linalg.batch_matmul") != 1:
            continue
        group = _merge_operand_producers(group)
        split = plan_gemm_split(group)
        if isinstance(split, str):
            notes.append(f"not cuBLASLt: {split}")
            continue
        kind = str(group.attributes["kind"]).strip('"') if "kind" in group.attributes else "single"
        inline_group(group)
        s = ir.StringAttr.get
        if split.prologue:
            form_group(split.prologue, "vertical" if len(split.prologue) > 1 else "single",
                       {"fusion.split": s("prologue")})
        form_group(split.gemm, "epilogue" if split.fused else "single",
                   {"fusion.path": s("gemm"), "fusion.why": s(split.why),
                    "fusion.gemm_epilogue": s("+".join(split.fused) or "none"),
                    "fusion.split_of": s(kind)})
        if split.epilogue:
            form_group(split.epilogue, "vertical" if len(split.epilogue) > 1 else "single",
                       {"fusion.split": s("epilogue")})
        notes.append(split.why)
    return notes


def _groups(func: ir.Operation) -> list[ir.Operation]:
    return [op.operation for op in func.regions[0].blocks[0].operations
            if op.operation.name == GROUP_OP]


def _body_ops(group: ir.Operation) -> list[ir.Operation]:
    """A group's ops without the terminator and the constants/empties cloned into groups."""
    from fusec.passes.grouping import CLONED_INTO_GROUPS

    return [o.operation for o in list(group.regions[0].blocks[0].operations)[:-1]
            if o.operation.name not in CLONED_INTO_GROUPS]


def _kind(group: ir.Operation) -> str:
    return str(group.attributes["kind"]).strip('"') if "kind" in group.attributes else "single"


def _owner(use: Any) -> ir.Operation:
    return use.owner.operation if hasattr(use.owner, "operation") else use.owner


def _only_user(value: ir.Value) -> ir.Operation | None:
    if not _single_use(value):
        return None
    owner = next(iter(value.uses)).owner
    return owner.operation if hasattr(owner, "operation") else owner


def _regroup(groups: list[ir.Operation], extra: list[ir.Operation], like: ir.Operation
             ) -> ir.Operation:
    """Inline `groups` and form one group of their ops and `extra` (ops already in the
    function body), with `like`'s kind and attributes (`like` is one of `groups`)."""
    from fusec.passes.grouping import CLONED_INTO_GROUPS, form_group
    from fusec.passes.inline_groups import inline_group

    attributes = {name: like.attributes[name] for name in like.attributes if name != "kind"}
    kind = _kind(like)
    ops = list(extra)
    for g in groups:
        ops += [o.operation for o in list(g.regions[0].blocks[0].operations)[:-1]]
        inline_group(g)
    return form_group([o for o in ops if o.name not in CLONED_INTO_GROUPS], kind, attributes)


def _matmuls(group: ir.Operation) -> list[ir.Operation]:
    return [o for o in _body_ops(group) if o.name in GEMM_OPS]


def merge_epilogue_consumers(func: ir.Operation) -> int:
    """Merge into each one-matmul group the group that consumes its only result when that
    consumer starts with what cuBLASLt's epilogue runs (a bias add, ReLU, a cast, GELU, or a
    reshape on the way): the planner may leave a bias add in a group of its own, which then
    costs a kernel. The
    split that follows keeps the rest of the consumer as the epilogue kernel. Returns how
    many."""
    from fusec.passes.grouping import op_key

    count = 0
    gone: set[int] = set()
    for key, group in [(op_key(g), g) for g in _groups(func)]:
        if key in gone:
            continue
        # Again after each merge: bias, then ReLU, may each have been left a group.
        while _ends_in_epilogue(group):
            consumer = _only_user(group.results[0])
            if consumer is None or consumer.name != GROUP_OP or \
                    "fusion.path" in consumer.attributes or _matmuls(consumer):
                break
            arg = next(a for a, v in zip(consumer.regions[0].blocks[0].arguments,
                                         consumer.operands)
                       if _value_key(v) == _value_key(group.results[0]))
            user = _only_user(arg)
            if user is None or (user.name not in RESHAPE_OPS and (
                    user.name != "linalg.generic" or (
                        _bias_add(user, arg) is None and
                        _unary_kind(user) not in ("relu", "cast", "gelu")))):
                break
            gone.add(op_key(consumer))
            group = _regroup([group, consumer], [], group)
            count += 1
    return count


def _ends_in_epilogue(group: ir.Operation) -> bool:
    """A one-matmul, one-result group (not yet split) whose result is the matmul's or the
    last of what cuBLASLt's epilogue would absorb after it."""
    if len(_matmuls(group)) != 1 or len(group.results) != 1 or "fusion.path" in group.attributes:
        return False
    mm = _matmuls(group)[0]
    yielded = list(group.regions[0].blocks[0].operations)[-1].operands[0]
    if _value_key(yielded) == _value_key(mm.results[0]):
        return True
    in_type = gemm_operand(mm.operands[0]).element
    absorbed, _, _ = _absorb_epilogue(mm, in_type, allow_bias=True)
    return bool(absorbed) and _value_key(absorbed[-1].results[0]) == _value_key(yielded)


def _is_layout_group(group: ir.Operation) -> bool:
    """A group of one result whose ops all move data without arithmetic (no casts)."""
    if group.name != GROUP_OP or "fusion.path" in group.attributes or len(group.results) != 1:
        return False
    ops = _body_ops(group)
    return bool(ops) and all(layout_source(o) is not None and _layout_generic(o) != "cast"
                             for o in ops)


def _chain_in(group: ir.Operation) -> tuple[list[ir.Operation], ir.Value] | None:
    """A layout group's ops from its result back to what it reads (a block argument or a
    weight), every op on that one chain; None otherwise."""
    body = group.regions[0].blocks[0]
    value = list(body.operations)[-1].operands[0]
    chain: list[ir.Operation] = []
    while not isinstance(value.owner, ir.Block):
        op = _defining(value)
        src = layout_source(op)
        if src is None:
            if is_weight(op):
                break
            return None
        chain.append(op)
        value = src[0]
    if len(chain) != len(_body_ops(group)) or not chain:
        return None
    return chain, value


def absorb_operand_layouts(func: ir.Operation) -> int:
    """Read each matmul operand through the layout groups before it (head split: slice,
    reshape, transpose; a broadcast weight), when the whole chain is one cuBLASLt layout
    from an earlier buffer: the chain's groups are cloned into the matmul group (their
    originals go when nothing else reads them, `erase_dead_groups`). Returns how many
    operands now read further back."""
    count = 0
    for group in _groups(func):
        if len(_matmuls(group)) != 1 or "fusion.path" not in group.attributes:
            continue  # only cuBLASLt calls read operands through a layout
        for index in (0, 1):
            mm = _matmuls(group)[0]
            chain = _layout_walk(mm.operands[index])
            start = layout_source(chain[-1])[0] if chain else mm.operands[index]
            if not isinstance(start.owner, ir.Block) or not _single_use(start):
                continue
            argno = ir.BlockArgument(start).arg_number
            outer = group.operands[argno]
            element = ELEMENT_BYTES.get(str(ir.RankedTensorType(start.type).element_type), 4)
            ops = list(chain)  # mm operand outward-in
            crossed: list[ir.Operation] = []
            best = 0
            while True:
                producer = _defining(outer)
                if producer is None or not _is_layout_group(producer):
                    break
                found = _chain_in(producer)
                if found is None:
                    break
                ops += found[0]
                base = found[1]
                crossed.append((producer, ir.BlockArgument(base).arg_number
                                if isinstance(base.owner, ir.Block) else 0))
                view = _view_through(base, list(reversed(ops)))
                if view is not None and matrix_layout(view, element) is not None:
                    best = len(crossed)
                if isinstance(base.owner, ir.Block):
                    outer = producer.operands[ir.BlockArgument(base).arg_number]
                else:
                    break  # a weight
            if not best:
                continue
            previous = None
            extra: list[ir.Operation] = []
            for layout, data in reversed(crossed[:best]):
                with ir.InsertionPoint(group):
                    clone = layout.clone()
                if previous is not None:
                    clone.operands[data] = previous
                previous = list(clone.regions[0].blocks[0].operations)[-1].operands[0]
                extra += [o.operation for o in list(clone.regions[0].blocks[0].operations)[:-1]]
                from fusec.passes.inline_groups import inline_group

                inline_group(clone)
            group.operands[argno] = previous
            group = _regroup([group], extra, group)
            count += 1
    return count


def erase_dead_groups(func: ir.Operation) -> int:
    """Erase groups none of whose results is used (groups compute tensors, nothing else)."""
    count = 0
    changed = True
    while changed:
        changed = False
        for group in reversed(_groups(func)):
            if all(not list(r.uses) for r in group.results):
                group.erase()
                count += 1
                changed = True
    return count


def _result_chain(group: ir.Operation) -> tuple[ir.Operation, list[ir.Operation]] | None:
    """A gemm group's matmul and the ops from its yielded value back to the matmul's result
    (epilogue generics and layout ops), each op's matmul-side operand followed."""
    body = group.regions[0].blocks[0]
    mm = next((o for o in _body_ops(group) if o.name in GEMM_OPS), None)
    if mm is None:
        return None
    value = list(body.operations)[-1].operands[0]
    chain: list[ir.Operation] = []
    while _value_key(value) != _value_key(mm.results[0]):
        op = _defining(value)
        if op is None:
            return None
        if op.name in RESHAPE_OPS or op.name == "linalg.transpose":
            value = op.operands[0]
        elif op.name == "linalg.generic":
            shape = list(ir.RankedTensorType(op.results[0].type).shape)
            inits = len(op.results)
            candidates = [v for v in list(op.operands)[:len(op.operands) - inits]
                          if list(ir.RankedTensorType(v.type).shape) == shape
                          and _defining(v) is not None and _defining(v).name != "arith.constant"]
            if len(candidates) != 1:
                return None
            value = candidates[0]
        else:
            return None
        chain.append(op)
    return mm, chain


def result_view(group: ir.Operation, extra: list[ir.Operation] = ()) -> StridedView | None:
    """Where a gemm group's matmul result lives in the buffer of the group's result (after
    `extra`, bijective layout ops that would follow, result side first)."""
    found = _result_chain(group)
    if found is None:
        return None
    mm, chain = found
    last = extra[0].results[0] if extra else group.results[0]
    view: StridedView | None = StridedView.dense(ir.RankedTensorType(last.type).shape)
    for op in list(extra) + chain:
        if op.name == "linalg.generic":
            continue  # elementwise: the same positions
        view = view_backward(view, op)
        if view is None:
            return None
    return view


def absorb_result_layouts(func: ir.Operation) -> int:
    """Let each cuBLASLt call write its result where the layout group after it (head merge:
    reshape + transpose) puts it, when that is one cuBLASLt layout: the layout group merges
    into the gemm group and costs no kernel. Returns how many."""
    from fusec.passes.grouping import op_key

    count = 0
    gone: set[int] = set()
    for key, group in [(op_key(g), g) for g in _groups(func)]:
        if key in gone:
            continue
        while "fusion.path" in group.attributes and len(group.results) == 1:
            consumer = _only_user(group.results[0])
            if consumer is None or not _is_layout_group(consumer):
                break
            found = _chain_in(consumer)
            if found is None or not isinstance(found[1].owner, ir.Block) or any(
                    o.name not in RESHAPE_OPS and o.name != "linalg.transpose"
                    for o in found[0]):
                break
            view = result_view(group, found[0])
            out = str(ir.RankedTensorType(group.results[0].type).element_type)
            if view is None or matrix_layout(view, ELEMENT_BYTES.get(out, 4), output=True) \
                    is None:
                break
            gone.add(op_key(consumer))
            group = _regroup([group, consumer], [], group)
            count += 1
    return count


def mark_view_groups(func: ir.Operation) -> int:
    """Mark each layout group whose result is its input's bytes from an offset (a reshape, a
    slice of whole rows) `fusion.path = "view"` with `fusion.view_offset` (elements): the
    plan makes its result a view of the input buffer (`Buffer.view_of`), no kernel. A
    model result keeps its kernel (the caller owns that buffer), and so does a view whose
    byte offset is not a multiple of `VIEW_ALIGNMENT`. Returns how many."""
    ret = list(func.regions[0].blocks[0].operations)[-1]
    returned = {_value_key(v) for v in ret.operands}
    count = 0
    for group in _groups(func):
        if not _is_layout_group(group) or len(group.operands) != 1 or \
                _value_key(group.results[0]) in returned:
            continue
        found = _chain_in(group)
        if found is None or not isinstance(found[1].owner, ir.Block):
            continue
        view = _view_through(found[1], list(reversed(found[0])))
        if view is None or not view.is_dense():
            continue
        element_bytes = ELEMENT_BYTES.get(_tensor_info(group.operands[0].type)[1], 4)
        if (view.offset * element_bytes) % VIEW_ALIGNMENT:
            # Kernels read their buffers 16 bytes at a time from the base: a view starting
            # off that alignment (x[:, 1:] of int64) would be read misaligned. It stays a
            # kernel that copies the slice into a buffer of its own.
            continue
        group.attributes["fusion.path"] = ir.StringAttr.get("view")
        group.attributes[VIEW_OFFSET] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                           view.offset)
        count += 1
    return count


# Element types a folded constant may have (numpy dtype names).
_FOLD_DTYPES = {"f32": "float32", "f64": "float64", "i64": "int64", "i32": "int32"}
_FOLD_INT = {"arith.addi": "add", "arith.subi": "subtract", "arith.muli": "multiply",
             "arith.maxsi": "maximum", "arith.minsi": "minimum"}
_FOLD_FLOAT = {"arith.addf": "add", "arith.subf": "subtract", "arith.mulf": "multiply",
               "arith.divf": "divide", "arith.maximumf": "maximum", "arith.minimumf": "minimum"}
_FOLD_CASTS = ("arith.index_cast", "arith.extsi", "arith.trunci", "arith.sitofp", "arith.extf",
               "arith.truncf")
FOLD_MAX_ELEMENTS = 1 << 16


_CMPI = {0: "equal", 1: "not_equal", 2: "less", 3: "less_equal", 4: "greater",
         5: "greater_equal", 6: "less", 7: "less_equal", 8: "greater", 9: "greater_equal"}


def evaluate_generic(op: ir.Operation, inputs: list[Any]) -> Any:
    """A linalg.generic's value (parallel loops, one result) on numpy `inputs`, computed here;
    None when its body has an op not listed here (index arithmetic, casts, compares, select,
    float arithmetic: what masks and aranges are made of)."""
    import numpy as np

    shape, elt = _tensor_info(op.results[0].type)
    maps = [_parse_map(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if elt not in _FOLD_DTYPES or _numel(shape) > FOLD_MAX_ELEMENTS or len(op.results) != 1 \
            or maps[-1].results != tuple(range(len(shape))) or \
            any("parallel" not in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
        return None
    grid = np.indices(shape, dtype=np.int64)
    block = op.regions[0].blocks[0]
    env: dict[int, Any] = {}
    for arg, x, m in zip(block.arguments, inputs, maps):
        env[_value_key(arg)] = np.asarray(x)[tuple(grid[d] if d is not None else 0
                                                     for d in m.results)]
    body = [o.operation for o in block.operations]
    for inner in body[:-1]:
        name = inner.name
        args = [env.get(_value_key(v)) for v in inner.operands]
        if any(a is None for a in args):
            return None
        if name == "linalg.index":
            value = grid[ir.IntegerAttr(inner.attributes["dim"]).value]
        elif name == "arith.constant":
            attr = inner.attributes["value"]
            if isinstance(attr, ir.FloatAttr):
                value = np.float64(attr.value)
            elif isinstance(attr, ir.IntegerAttr):
                value = np.int64(attr.value)
            else:
                return None
        elif name in _FOLD_CASTS:
            to = str(inner.results[0].type)
            value = np.asarray(args[0]).astype(np.float64 if to.startswith("f") else np.int64)
        elif name in _FOLD_INT:
            value = getattr(np, _FOLD_INT[name])(args[0], args[1])
        elif name in _FOLD_FLOAT:
            value = getattr(np, _FOLD_FLOAT[name])(args[0], args[1])
        elif name == "arith.cmpi":
            pred = ir.IntegerAttr(inner.attributes["predicate"]).value
            if pred not in _CMPI:
                return None
            value = getattr(np, _CMPI[pred])(args[0], args[1])
        elif name == "arith.select":
            value = np.where(args[0], args[1], args[2])
        else:
            return None
        env[_value_key(inner.results[0])] = value
    result = env.get(_value_key(body[-1].operands[0]))
    if result is None:
        return None
    return np.broadcast_to(np.asarray(result), shape).astype(_FOLD_DTYPES[elt])


def _constant_array(value: ir.Value) -> Any:
    """The numpy value of a dense (non-resource) tensor constant, or None."""
    import numpy as np

    op = _defining(value)
    if op is None or op.name != "arith.constant" or \
            not isinstance(op.results[0].type, ir.RankedTensorType):
        return None
    shape, elt = _tensor_info(op.results[0].type)
    attr = op.attributes["value"]
    if elt not in _FOLD_DTYPES or not isinstance(attr, ir.DenseElementsAttr) or \
            _numel(shape) > FOLD_MAX_ELEMENTS:
        return None
    try:
        if attr.is_splat:
            splat = attr.get_splat_value()
            scalar = ir.FloatAttr(splat).value if elt.startswith("f") else \
                ir.IntegerAttr(splat).value
            return np.full(shape, scalar, dtype=_FOLD_DTYPES[elt])
        return np.array(attr).reshape(shape).astype(_FOLD_DTYPES[elt])
    except Exception:  # noqa: BLE001 - an attribute numpy cannot read: not folded
        return None


def _fold_op(op: ir.Operation) -> Any:
    """The value of a reshape or generic whose tensor inputs are all constants, or None."""
    if op.name in RESHAPE_OPS:
        x = _constant_array(op.operands[0])
        return None if x is None else x.reshape(ir.RankedTensorType(op.results[0].type).shape)
    if op.name != "linalg.generic" or len(op.results) != 1:
        return None
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    inputs = [_constant_array(v) for v in list(op.operands)[:seg[0]]]
    if any(x is None for x in inputs):
        return None
    return evaluate_generic(op, inputs)


def _replace_by_constant(op: ir.Operation, value: Any) -> None:
    import numpy as np

    result_type = op.results[0].type
    attr = ir.DenseElementsAttr.get(np.ascontiguousarray(value), type=result_type)
    with ir.InsertionPoint(op), op.location:
        constant = ir.Operation.create("arith.constant", results=[result_type],
                                       attributes={"value": attr})
    op.results[0].replace_all_uses_with(constant.results[0])
    op.erase()


def fold_constant_ops(group: ir.Operation) -> int:
    """Inside `group`, compute here each op that reads only constants (a causal mask from an
    arange): it becomes a constant (a weight of the artifact). Returns how many."""
    count = 0
    for op in _body_ops(group):
        value = _fold_op(op)
        if value is not None:
            _replace_by_constant(op, value)
            count += 1
    return count


def _fold_value(group: ir.Operation) -> Any:
    """The value of a group that reads nothing (an arange), computed here; or None."""
    ops = _body_ops(group)
    if group.operands or len(group.results) != 1 or len(ops) != 1:
        return None
    return _fold_op(ops[0])


def fold_constant_groups(func: ir.Operation) -> int:
    """Compute here the groups that read nothing (gpt2's arange for its causal mask): a
    kernel each, for a value known at compile time. The value becomes a constant cloned
    into the groups that read it (a weight buffer of the artifact), where constant reshapes
    of it fold too (`fold_constant_ops`). Returns how many."""
    import numpy as np

    from fusec.passes.grouping import op_key

    count = 0
    gone: set[int] = set()
    for key, group in [(op_key(g), g) for g in _groups(func)]:
        if key in gone:
            continue
        value = _fold_value(group)
        if value is None or any(_owner(u).name != GROUP_OP for u in group.results[0].uses):
            continue  # a model output keeps its kernel (the caller owns that buffer)
        result_type = group.results[0].type
        with ir.InsertionPoint(group):
            constant = ir.Operation.create(
                "arith.constant", results=[result_type], attributes={
                    "value": ir.DenseElementsAttr.get(np.ascontiguousarray(value),
                                                      type=result_type)})
        users = [_owner(u) for u in list(group.results[0].uses)]
        group.results[0].replace_all_uses_with(constant.results[0])
        group.erase()
        for user in users:
            if user.name == GROUP_OP and op_key(user) not in gone:
                gone.add(op_key(user))
                fold_constant_ops(_regroup([user], [], user))
        count += 1
    return count


def _gemm_epilogue_code(fused: list[str]) -> str:
    act = "relu" if "relu" in fused else "gelu" if "gelu" in fused else ""
    if "bias" in fused:
        return f"{act}_bias" if act else "bias"
    return act or "default"


def gemm_launch(group: ir.Operation, operands: list[int], weight_buffer: Any,
                result_buffers: Any, module_asm: Any) -> Launch:
    """The cuBLASLt launch of a gemm group (formed by `split_matmul_groups`).

    `Launch.buffers` = [A, B, D] (+ [bias]) in row-major terms: D[b] = A[b] @ B[b] with A
    [M, K] (or its transpose stored [K, M] when `trans_a`), B [K, N] (or [N, K]). The shim
    calls cuBLASLt in column-major terms (D^T = B^T A^T); host_code derives those numbers.
    """
    body = group.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    mm = next(o for o in ops if o.name in GEMM_OPS)
    args = {_value_key(a): i for i, a in enumerate(body.arguments)}

    def buffer_of(value: ir.Value) -> int:
        key = _value_key(value)
        if key in args:
            return operands[args[key]]
        producer = _defining(value)
        if producer is not None and is_weight(producer):
            shape, elt = _tensor_info(value.type)
            return weight_buffer(shape, elt, constant_bytes(producer, module_asm))
        raise CudaCodegenError("a gemm operand is neither a group input nor a weight")

    a, b = gemm_operand(mm.operands[0]), gemm_operand(mm.operands[1])
    fused = str(ir.StringAttr(group.attributes["fusion.gemm_epilogue"]).value).split("+")
    fused = [f for f in fused if f != "none"]
    bias = None
    value = mm.results[0]
    for op in ops:  # the bias add reads the matmul's result directly (plan_gemm_split)
        if op.name == "linalg.generic" and len(op.operands) == 3 and any(
                _value_key(v) == _value_key(value) for v in op.operands[:2]):
            bias = _bias_add(op, value)
    a_shape = list(ir.RankedTensorType(mm.operands[0].type).shape)
    b_shape = list(ir.RankedTensorType(mm.operands[1].type).shape)
    batch = math.prod(a_shape[:-2]) if len(a_shape) > 2 else 1
    m, k = a_shape[-2:]
    n = b_shape[-1]
    results = result_buffers()
    if len(results) != 1:
        raise CudaCodegenError(f"a gemm group has {len(results)} results, not one")
    buffers = [buffer_of(a.source), buffer_of(b.source), results[0]]
    if "bias" in fused:
        if bias is None:
            raise CudaCodegenError("the gemm group's bias add was not found")
        buffers.append(buffer_of(gemm_operand(bias, matrix=False).source))
    out_elt = str(ir.RankedTensorType(group.results[0].type).element_type)
    la = matrix_layout(a.view, ELEMENT_BYTES[a.element])
    lb = matrix_layout(b.view, ELEMENT_BYTES[b.element])
    d_view = result_view(group)
    ld = matrix_layout(d_view, ELEMENT_BYTES[out_elt], output=True) if d_view else None
    if la is None or lb is None or ld is None:
        raise CudaCodegenError(f"a gemm operand or result has no cuBLASLt layout: A {a.view}, "
                               f"B {b.view}, D {d_view}")
    gemm = {"library": "cublasLt", "op": mm.name, "batch": batch, "m": m, "n": n, "k": k,
            "trans_a": la.transposed, "trans_b": lb.transposed, "in_dtype": DTYPES[a.element],
            "out_dtype": DTYPES[out_elt], "epilogue": _gemm_epilogue_code(fused),
            "fused": fused,
            # Row-major strided layouts (elements): leading dims, batch strides, offsets.
            "lda": la.ld, "ldb": lb.ld, "ldd": ld.ld, "stride_a": la.batch_stride,
            "stride_b": lb.batch_stride, "stride_d": ld.batch_stride, "offset_a": la.offset,
            "offset_b": lb.offset, "offset_d": ld.offset}
    info = {"path": "gemm", "why": str(ir.StringAttr(group.attributes["fusion.why"]).value),
            "flops": 2 * batch * m * n * k}
    ops_in = [o.name for o in ops if o.name.startswith("linalg.")]
    kind = str(group.attributes["kind"]).strip('"')
    return Launch(symbol="__gemm__", buffers=buffers, grid=0, kind=kind, ops=ops_in, info=info,
                  block=0, shared_bytes=0, launch_kind="gemm", gemm=gemm)


def gemm_table(launch: Launch, element_of: Any) -> list[int]:
    """The shim's GEMM_FIELDS numbers for one gemm launch (column-major cuBLASLt terms).

    cuBLASLt's A is our B, its B our A: D^T[N, M] = B^T[N, K] A^T[K, M], where a row-major
    [r, c] matrix with leading dimension ld is a column-major [c, r] one with the same ld.
    Fields: in/out type, op A, op B, rows/cols/ld of A, of B, rows/cols of D, batch,
    epilogue, has bias, compute type, batch strides of cuBLASLt's A, B, D (elements), ld of
    D, then byte offsets of *our* A, B, D into their buffers (strided views).
    """
    g = launch.gemm
    m, n, k = g["m"], g["n"], g["k"]
    op_a = 1 if g["trans_b"] else 0   # cuBLASLt A = our B: stored [K, N] (N) or [N, K] (T)
    op_b = 1 if g["trans_a"] else 0   # cuBLASLt B = our A: stored [M, K] (N) or [K, M] (T)
    rows_a, cols_a = (k, n) if op_a else (n, k)
    rows_b, cols_b = (m, k) if op_b else (k, m)
    in_elt = {v: k_ for k_, v in DTYPES.items()}[g["in_dtype"]]
    out_elt = {v: k_ for k_, v in DTYPES.items()}[g["out_dtype"]]
    batched = g["batch"] > 1
    return [CUDA_DATA_TYPES[in_elt], CUDA_DATA_TYPES[out_elt], op_a, op_b,
            rows_a, cols_a, g.get("ldb", rows_a), rows_b, cols_b, g.get("lda", rows_b),
            n, m, g["batch"], CUBLASLT_EPILOGUES[g["epilogue"]],
            int("bias" in g["fused"]), CUBLAS_COMPUTE_32F,
            g.get("stride_b", rows_a * cols_a if batched else 0),
            g.get("stride_a", rows_b * cols_b if batched else 0),
            g.get("stride_d", n * m if batched else 0), g.get("ldd", n),
            g.get("offset_a", 0) * ELEMENT_BYTES[in_elt],
            g.get("offset_b", 0) * ELEMENT_BYTES[in_elt],
            g.get("offset_d", 0) * ELEMENT_BYTES[out_elt]]


GEMM_FIELDS = 23
