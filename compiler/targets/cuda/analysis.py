"""CUDA target: analysis."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import mlir.ir as ir
from fusec.compiler.targets.cuda.device import (
    ELEMENT_BYTES,
    H200,
    CudaCodegenError,
    CudaDevice,
    elementwise_launch_shape,
    row_launch_shape,
)
from fusec.passes.grouping import (iterator_kinds, op_key, producer_through_reshapes,
                                   projection)
from fusec.passes.payload import arg_reduction

# ---------------------------------------------------------------- what the group emitter takes


# What the group emitter (emitter.py, `KernelEmitter`) takes: linalg.generic, linalg.fill,
# reshapes and the scalar ops and constants around them. The one list: `analyse_group`
# accepts exactly these, and the planner predicts the emitter's refusals from them (it asks
# through fusec.passes.targets.kernel_ops; the target registers this list there).
FAST_EMITTER_OPS = frozenset({"linalg.generic", "linalg.fill", "tensor.expand_shape",
                               "tensor.collapse_shape", "tensor.empty", "arith.constant"})


def emitter_refusal(op: ir.Operation) -> str | None:
    """Why the group emitter would refuse `op` (None: it takes it): an op it has no
    emission for (transposes, matmuls, slices, pads, convolutions, pooling), a reduction over
    other than the last loop, or a live `linalg.index` in a reduction's payload other than an
    argmax's column (a parallel generic's is its loop's position, `KernelEmitter.bind_indices`)."""
    name = op.name
    if name not in FAST_EMITTER_OPS:
        if name.startswith(("arith.", "math.")):
            return None
        return f"'{name}' is not emitted by the fast emitter"
    if name != "linalg.generic":
        return None
    kinds = ["reduction" in str(a) for a in op.attributes["iterator_types"]]
    if any(kinds[:-1]):
        return "a reduction over other than the last loop"
    if "reduction" in kinds and arg_reduction(op) is None and _live_index(op):
        return "linalg.index in a reduction's payload (other than an argmax's / argmin's column)"
    return None


def _live_index(op: ir.Operation) -> bool:
    """Whether a `linalg.index` of `op`'s payload reaches a result something reads (torch's
    top-k keeps the value of a min-with-index and drops its index)."""
    block = op.regions[0].blocks[0]
    yielded = list(block.operations[len(block.operations) - 1].operands)
    needed = needed_ops(block, [v for v, r in zip(yielded, op.results)
                                if any(True for _ in r.uses)])
    return any(inner.operation.name == "linalg.index" and op_key(inner) in needed
               for inner in block.operations)


def needed_ops(block: ir.Block, wanted: list[ir.Value]) -> set[int]:
    """Keys (`op_key`) of the payload ops of `block` that `wanted` depends on."""
    producers = {}
    for inner in block.operations:
        for r in inner.results:
            producers[value_key(r)] = inner
    needed: set[int] = set()
    stack = list(wanted)
    while stack:
        v = stack.pop()
        op = producers.get(value_key(v))
        if op is None or op_key(op) in needed:
            continue
        needed.add(op_key(op))
        stack.extend(op.operands)
    return needed


# ---------------------------------------------------------------- small IR helpers


def value_key(value: ir.Value) -> int:
    from fusec.dialects import _capsule_pointer

    return _capsule_pointer(value._CAPIPtr, b"mlir.ir.Value._CAPIPtr")


def op_name(value: ir.Value) -> str | None:
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return owner.operation.name


def tensor_info(t: ir.Type) -> tuple[list[int], str]:
    """(shape, element type text) of a ranked static tensor type."""
    rt = ir.RankedTensorType(t)
    if not rt.has_static_shape:
        raise CudaCodegenError(f"dynamic shape {t} is not supported")
    return list(rt.shape), str(rt.element_type)


def numel_of(shape: Iterable[int]) -> int:
    return math.prod(shape)


@dataclass(frozen=True)
class MapInfo:
    """A projection-like affine map: `dims` it reads (positions), constants must be 0."""

    num_dims: int
    results: tuple  # each: int (dim position) or None (the constant 0)


def parse_map(attr: ir.Attribute) -> MapInfo:
    """The projection an indexing map is (from the map itself, not its text): each result a
    loop dim or the constant 0; anything else is refused."""
    amap = ir.AffineMapAttr(attr).value
    results = projection(amap)
    if results is None:
        raise CudaCodegenError(f"indexing map {amap} is not a projection")
    return MapInfo(amap.n_dims, tuple(results))


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


# A linalg op's iterator kinds ("parallel", "reduction"): the one reader, grouping's.
iterators = iterator_kinds


def reports_failed_check(op: ir.Operation, deferred: bool = False) -> bool:
    """Whether `op` is a payload's report of a failed check: `scf.if %bad { func.call
    @fusec_index_error(check, value) }` (an index out of range, `--fusion-guard-indices`; an
    integer division by zero, `--fusion-guard-division`); with `deferred`, also an op whose
    report `--fusion-report-indices` has yet to insert (tagged `fusion.index_check`)."""
    from fusec.passes import attributes
    from fusec.passes.linalg.guard_indices import ERROR_FUNCTION

    if deferred and attributes.INDEX_CHECK in op.attributes:
        return True
    return op.name == "scf.if" and any(
        inner.operation.name == "func.call" and
        ir.FlatSymbolRefAttr(inner.operation.attributes["callee"]).value == ERROR_FUNCTION
        for inner in op.regions[0].blocks[0].operations)


def analyse_group(group: ir.Operation, device: CudaDevice = H200,
                  row_elements_per_thread: int = 0, unroll: int = 0) -> GroupGeometry:
    """Classify a group as elementwise or row and pick its launch shape."""
    body = group.regions[0].blocks[0]
    for op in body.operations:
        name = op.operation.name
        # One list of what the group emitter takes (the planner asks for it, kernel_ops).
        if name in FAST_EMITTER_OPS or name == "fusion.yield":
            continue
        raise CudaCodegenError(f"'{name}' is not supported by the CUDA code generator yet")
    generics = _generics(group)
    for op in generics:
        # An identity map on an operand of another shape (a slice at offset 0, left by
        # extract_slices_to_generics) is not elementwise over one domain.
        parallel = all("parallel" in str(t) for t in iterators(op))
        domain = tensor_info(op.results[0].type)[0] if len(op.results) and parallel else None
        for v, m in zip(op.operands, (parse_map(a) for a in op.attributes["indexing_maps"])):
            if m.results == tuple(range(m.num_dims)) and domain is not None and \
                    m.num_dims == len(domain) and tensor_info(v.type)[0] != domain:
                raise CudaCodegenError("an operand read through an identity map has another "
                                       "shape than the loop domain (a slice)")
    if not generics:
        # Only fills (the unfused baseline makes a kernel of each): a broadcast store.
        shapes = [tensor_info(v.type) for v in body.operations[len(body.operations) - 1].operands]
        numel = max(numel_of(sh) for sh, _ in shapes)
        if len({numel_of(sh) for sh, _ in shapes}) > 1:
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
            shape, elt = tensor_info(v.type)
            if numel_of(shape) > numel_of(full_shape or [0]):
                full_shape, element = shape, elt
    # The narrowest element type in memory fixes the vector width (16 bytes of it per access).
    element = memory_element(group) or element
    has_reduction = any("reduction" in iterators(op) for op in generics)
    identity_only = all(
        all(m.results == tuple(range(m.num_dims)) or not any(r is not None for r in m.results)
            for m in (parse_map(a) for a in op.attributes["indexing_maps"]))
        for op in generics)
    numel = numel_of(full_shape)
    ebytes = ELEMENT_BYTES.get(element, 4)
    yielded = list(body.operations[len(body.operations) - 1].operands)
    # Every result, and every value the group yields (a copy of an input of its own size
    # beside a generic: a horizontal group of two copies), must span the one domain.
    same_domain = all(numel_of(tensor_info(r.type)[0]) == numel for op in generics
                      for r in op.results) and \
        all(numel_of(tensor_info(v.type)[0]) == numel for v in yielded)
    if not has_reduction and identity_only and not same_domain:
        # Generics over domains of other sizes (a horizontal group's [1, 1, 1] part beside
        # a [129, 129, 2] one, found by test/gpu/fuzz_cuda.py): not one elementwise space.
        raise CudaCodegenError("elementwise generics over domains of different sizes")
    if not has_reduction and identity_only:
        return GroupGeometry("elementwise", 1, numel, element,
                             elementwise_launch_shape(numel, ebytes, device, unroll))
    for v in yielded:
        # A group output copied from an input (a weight's reshape beside a [1, 8, 1, 1] sum,
        # found by test/gpu/fuzz_cuda.py) is stored at the domain's positions: it must span
        # the domain, or the copy stops short of its end.
        source = producer_through_reshapes(v)
        computed = source is not None and source.name in ("linalg.generic", "linalg.fill")
        if not computed and numel_of(tensor_info(v.type)[0]) != numel:
            raise CudaCodegenError(
                f"a group output copied from an input has {numel_of(tensor_info(v.type)[0])} "
                f"elements, not the {numel} of the group's domain")
    cols = full_shape[-1]
    rows = numel // cols
    return GroupGeometry("row", rows, cols, element,
                         row_launch_shape(rows, cols, ebytes, device, row_elements_per_thread),
                         tuple(full_shape))


