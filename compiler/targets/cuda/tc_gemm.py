"""CUDA target: the tensor-core GEMM family in the plan (the kernel itself: wgmma.py).

A matmul-rooted group becomes our tensor-core kernel, not a cuBLASLt call, when

- its operands are what wgmma reads through TMA (`tc_operands`): bf16 or f16, A stored
  M x K with K contiguous, B stored N x K or K x N, 16-byte aligned strides and offsets,
  one matrix (no batch); the layout ops between the operands and their buffers (casts to
  f32, a weight's transpose, reshapes, slices) are absorbed as for cuBLASLt;
- and the cost model predicts it faster (`gemm_cost.prefer_tc_gemm`): our kernel with the
  whole elementwise chain after the matmul fused (`tc_chain`) against cuBLASLt with the
  epilogue it can fuse plus the kernel the rest of the chain would need.

The chain (`ChainEpilogue`) runs on the accumulator's f32 values in registers before the one
store: any elementwise `linalg.generic` whose other operands are group inputs or weights
read through projections (a bias row, a residual, a per-row scale), or are computed from
them by elementwise generics, broadcasts or transposes that nothing else reads (a bias's
cast to f32), and reshapes that keep the last dim (rows split into batch x sequence). The
payloads are the group's own ops, emitted as they are (a 16-bit payload stays 16-bit, as
the fast emitter's). What stops the chain stays in a kernel after it.

A group of two matmuls of one A (merged by gemm_pair.py) is a pair (`TcSplit.pair`): one
kernel computes both products, the chain reads both (`ChainEpilogue.pair`) and leaves one
value. A group of sibling matmuls of one A (merged by gemm_siblings.py,
`fusion.gemm_siblings`) is one TcSplit per matmul (`plan_tc_siblings`), each its own chain
and output: one kernel over their concatenated columns (`siblings_problem`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import mlir.ir as ir
from fusec.compiler.targets.cuda.built import PROBE_SYMBOL, TC_GEMM, body_text, renamed
from fusec.compiler.targets.cuda import wgmma
from fusec.compiler.targets.cuda.wgmma import map_entry
from fusec.compiler.targets.cuda.analysis import parse_map, tensor_info, value_key
from fusec.compiler.targets.cuda.body import GEMM_OPS, RESHAPE_OPS, defining
from fusec.compiler.targets.cuda.device import (
    DTYPES,
    ELEMENT_BYTES,
    PAYLOAD_DIALECTS,
    CudaCodegenError,
)
from fusec.compiler.targets.cuda.emitter import (
    id_of,
    is_weight,
    payload_op_text,
)
from fusec.compiler.targets.cuda.gemm import (
    GemmOperand,
    GemmSplit,
    gemm_operand,
    operand_buffers,
    split_around,
    zero_filled,
)
from fusec.compiler.targets.cuda.layouts import MatrixLayout, matrix_layout
from fusec.passes import attributes, cost_model, gemm_cost
from fusec.passes.grouping import CLONED_INTO_GROUPS
from fusec.runtime.plan import Launch

# Architectures with wgmma and TMA (the kernel module is then built for sm_90a).
TC_ARCHES = ("sm_90", "sm_90a")
# CUtensorMapDataType values (cuda.h) and CU_TENSOR_MAP_SWIZZLE_128B.
TENSOR_MAP_TYPES = {"bf16": 9, "f16": 6}
SWIZZLE_128B = 3
TILE = wgmma.GemmTile()
# Ops an epilogue operand is read through, from their one source (a reshape: a folded norm's
# [B, T, 1] statistics per row of the [B T, N] product, at the same flat offset).
ONE_SOURCE_OPS = ("linalg.broadcast", "linalg.transpose", *RESHAPE_OPS)


@dataclass
class TcOperands:
    mm: ir.Operation
    a: GemmOperand
    b: GemmOperand
    la: MatrixLayout
    lb: MatrixLayout
    m: int
    n: int
    k: int


def tc_operands(mm: ir.Operation) -> TcOperands | str:
    """What the kernel reads for `mm`, or why it cannot read it."""
    acc = str(ir.RankedTensorType(mm.results[0].type).element_type)
    if acc not in ("f32", "bf16", "f16"):
        return f"a matmul accumulating in {acc} (the kernel accumulates in f32)"
    if not zero_filled(mm):
        return "the matmul does not start from a zero fill"
    a_shape = list(ir.RankedTensorType(mm.operands[0].type).shape)
    b_shape = list(ir.RankedTensorType(mm.operands[1].type).shape)
    if math.prod(a_shape[:-2]) != 1:
        return "a batched matmul"
    a, b = gemm_operand(mm.operands[0]), gemm_operand(mm.operands[1])
    for operand in (a, b):
        producer = defining(operand.source)
        if producer is not None and producer.name == "arith.constant" and \
                not is_weight(producer):
            return "an operand is a splat constant (no buffer for TMA to read)"
    if a.element != b.element or a.element not in wgmma.MMA_INPUTS:
        return f"operands of type {a.element} x {b.element} (wgmma here takes bf16, f16)"
    eb = wgmma.MMA_INPUTS[a.element]
    la, lb = matrix_layout(a.view, eb), matrix_layout(b.view, eb)
    if la is None or lb is None:
        return "an operand is not one strided matrix"
    if la.transposed:
        return "A is stored K x M (the kernel reads A with K contiguous)"
    if any((x * eb) % 16 for x in (la.ld, la.offset, lb.ld, lb.offset)):
        return "an operand's row stride or offset is not a multiple of 16 bytes (TMA)"
    m, k = a_shape[-2:]
    n = b_shape[-1]
    return TcOperands(mm, a, b, la, lb, m, n, k)


def _problem(ops: TcOperands, out_type: str, pair: bool = False) -> wgmma.GemmProblem:
    return wgmma.GemmProblem(ops.m, ops.n, ops.k, ops.a.element, out_type,
                             "nk" if ops.lb.transposed else "kn", pair)


def pair_refusal(first: TcOperands, second: TcOperands) -> str | None:
    """Why one kernel cannot compute both GEMMs as a pair (None: it can): they must read
    the same A the same way and B matrices of one shape and layout."""
    if value_key(first.a.source) != value_key(second.a.source) or \
            (first.la.ld, first.la.offset) != (second.la.ld, second.la.offset):
        return "the two matmuls read different A operands"
    if (first.m, first.n, first.k) != (second.m, second.n, second.k):
        return "the two matmuls' shapes differ"
    if first.b.element != second.b.element or first.lb.transposed != second.lb.transposed:
        return "the two matmuls' B operands differ in type or layout"
    return None


# ---------------------------------------------------------------- the epilogue chain


def _users(value: ir.Value) -> list[ir.Operation]:
    return [u.owner.operation if hasattr(u.owner, "operation") else u.owner for u in value.uses]


def _payload_ok(op: ir.Operation) -> bool:
    """Every live payload op is arith/math without regions, reading block arguments, its
    own results or scalar constants (no linalg.index, no init read)."""
    block = op.regions[0].blocks[0]
    inits = len(op.results)
    init_keys = {value_key(a) for a in list(block.arguments)[len(block.arguments) - inits:]}
    inner = {value_key(r) for o in block.operations for r in o.results}
    args = {value_key(a) for a in block.arguments}
    for o in block.operations:
        o = o.operation
        if o.name == "linalg.yield":
            continue
        if not o.name.startswith(PAYLOAD_DIALECTS) or len(o.regions):
            return False
        for v in o.operands:
            key = value_key(v)
            if key in init_keys:
                return False
            if key in inner or key in args:
                continue
            producer = defining(v)
            if producer is None or producer.name != "arith.constant" or \
                    isinstance(producer.attributes["value"], ir.DenseElementsAttr):
                return False
    yielded = list(block.operations)[-1].operands
    return all(value_key(v) not in init_keys for v in yielded)


def elementwise(op: ir.Operation) -> bool:
    """An all-parallel one-result generic whose payload the epilogue can run."""
    if op.name != "linalg.generic" or len(op.results) != 1:
        return False
    its = [str(ir.StringAttr(a).value) if isinstance(a, ir.StringAttr) else str(a)
           for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    if any("parallel" not in t for t in its):
        return False
    try:
        maps = [parse_map(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    except CudaCodegenError:
        return False
    out = maps[-1]
    return out.results == tuple(range(out.num_dims)) and _payload_ok(op)


def _splat(op: ir.Operation | None) -> bool:
    return op is not None and op.name == "arith.constant" and \
        isinstance(op.attributes["value"], ir.DenseElementsAttr) and \
        ir.DenseElementsAttr(op.attributes["value"]).is_splat


def _source_ops(value: ir.Value, members: set[int], banned: set[int], depth: int = 0
                ) -> list[ir.Operation] | None:
    """The ops computing `value` in the epilogue from group inputs and weights (none for an
    input, a weight or a splat); None if it cannot be computed there (it depends on the
    epilogue's own values, `members`, or on an op in `banned`)."""
    if value_key(value) in members:
        return None
    if isinstance(value.owner, ir.Block):
        # Not bools: a bool buffer holds bytes (device.MEMORY_ELEMENT), which the epilogue's
        # loads do not widen.
        element = str(ir.RankedTensorType(value.type).element_type)
        return [] if element in DTYPES and element != "i1" else None
    op = defining(value)
    if op is None or depth > 8 or id_of(op) in banned:
        return None
    if _splat(op):
        return []
    if is_weight(op):
        return [] if str(ir.RankedTensorType(value.type).element_type) != "i1" else None
    if op.name in ONE_SOURCE_OPS:
        inputs = [op.operands[0]]
    elif elementwise(op):
        inputs = list(op.operands)[:len(op.operands) - 1]
    else:
        return None
    found = [op]
    for v in inputs:
        inner = _source_ops(v, members, banned, depth + 1)
        if inner is None:
            return None
        found += inner
    return found


def row_split(shape: list[int], m: int) -> int | None:
    """Where `shape`, an M x N product regrouped, divides into the rows' dims and the
    columns' (the first k dims' product is M), or None if no dim boundary does: a row
    reshape ([B*T, N] -> [B, T, N]) splits before the last dim, a convolution's product
    [F, OH*OW] seen as [1, F, OH, OW] after its second."""
    for k in range(len(shape) + 1):
        if math.prod(shape[:k]) == m:
            return k
        if math.prod(shape[:k]) > m:
            return None
    return None


def _regrouping(op: ir.Operation, m: int, n: int) -> bool:
    """A reshape that regroups the rows and the columns each among themselves (row-major
    both: the flat offset row * N + col is the same value's)."""
    shape = list(ir.RankedTensorType(op.results[0].type).shape)
    return bool(shape) and math.prod(shape) == m * n and row_split(shape, m) is not None


def tc_chain(mm: ir.Operation | list[ir.Operation], m: int, n: int
             ) -> tuple[list[ir.Operation], list[ir.Operation], str]:
    """The epilogue ops after `mm` the kernel runs (in block order: a DAG of elementwise ops
    and row reshapes over the matmul's result, with one result leaving it), the ops
    computing their other operands, and why it stops where it does. `mm` may be a pair of
    matmuls (a list, in block order): the chain then reads both results."""
    mms = mm if isinstance(mm, list) else [mm]
    banned: set[int] = set()
    for _ in range(4):
        chain, sources, why = _grow_chain(mms, m, n, banned)
        inside = {id_of(o) for o in chain + sources}
        shared = {id_of(o) for o in sources
                  if any(id_of(u) not in inside for u in _users(o.results[0]))}
        if not shared:
            return chain, sources, why
        banned |= shared
    return [], [], "an epilogue operand is also read elsewhere"


def _epilogue_outputs(mms: list[ir.Operation], chain: list[ir.Operation]) -> list[ir.Value]:
    inside = {id_of(o) for o in chain}
    values = [mm.results[0] for mm in mms] + [o.results[0] for o in chain]
    return [v for v in values if any(id_of(u) not in inside for u in _users(v))]


def _grow_chain(mms: list[ir.Operation], m: int, n: int, banned: set[int]
                ) -> tuple[list[ir.Operation], list[ir.Operation], str]:
    members = {value_key(mm.results[0]) for mm in mms}
    chain: list[ir.Operation] = []
    why = ""
    after = False
    for op in mms[0].block.operations:
        op = op.operation
        if not after:
            after = any(op == mm for mm in mms)
            continue
        if op.name == "fusion.yield":
            break
        reads = [v for v in op.operands if value_key(v) in members]
        if not reads:
            continue
        if op.name in RESHAPE_OPS:
            if _regrouping(op, m, n):
                chain.append(op)
                members.add(value_key(op.results[0]))
            else:
                why = why or f"{op.name} mixes the rows with the columns"
            continue
        if not elementwise(op):
            why = why or f"{op.name} is not elementwise"
            continue
        maps = [parse_map(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
        ok = True
        for v, mp in zip(list(op.operands)[:len(op.operands) - 1], maps):
            if value_key(v) in members:
                ok = ok and mp.results == tuple(range(mp.num_dims))
            else:
                ok = ok and _source_ops(v, members, banned) is not None
        if not ok:
            why = why or "an operand of an op after it is computed where the epilogue cannot"
            continue
        chain.append(op)
        members.add(value_key(op.results[0]))
    # One value leaves the epilogue, of one of the kernel's store types: drop ops from the
    # end until it does.
    while True:
        outs = _epilogue_outputs(mms, chain)
        last = outs[0] if len(outs) == 1 else None
        if last is not None and str(ir.RankedTensorType(last.type).element_type) in \
                wgmma.OUTPUTS and (not chain or value_key(last) ==
                                   value_key(chain[-1].results[0])):
            break
        if not chain:
            break
        chain.pop()
        why = "more than one value leaves the epilogue" if len(outs) > 1 else \
            "the epilogue's result is not a store type"
    members = {value_key(mm.results[0]) for mm in mms} | \
        {value_key(o.results[0]) for o in chain}
    sources: list[ir.Operation] = []
    seen: set[int] = set()
    for op in chain:
        if op.name != "linalg.generic":
            continue
        for v in list(op.operands)[:len(op.operands) - 1]:
            if value_key(v) in members:
                continue
            for src in _source_ops(v, members, banned) or []:
                if id_of(src) not in seen:
                    seen.add(id_of(src))
                    sources.append(src)
    return chain, sources, why


def out_type_of(mm: ir.Operation, chain: list[ir.Operation]) -> str:
    last = chain[-1].results[0] if chain else mm.results[0]
    return str(ir.RankedTensorType(last.type).element_type)


# ---------------------------------------------------------------- planning


@dataclass
class TcSplit:
    split: GemmSplit
    operands: TcOperands
    chain: list[ir.Operation]  # the epilogue ops the kernel runs, in order
    pair: TcOperands | None = None  # a pair's second GEMM (its B is the kernel's B2)

    @property
    def result(self) -> ir.Value:
        return self.chain[-1].results[0] if self.chain else self.operands.mm.results[0]

    @property
    def b_operands(self) -> list[TcOperands]:
        """The GEMMs whose B the kernel reads, in its maps' order: B, then a pair's B2."""
        return [self.operands] + ([self.pair] if self.pair else [])

    @property
    def n_computed(self) -> int:
        """The accumulator's columns: N, or 2 N for a pair."""
        return self.operands.n * (2 if self.pair else 1)


def plan_tc_split(group: ir.Operation) -> TcSplit | str:
    """The split of `group` with our tensor-core kernel, or why it is not one. A group of two
    matmuls is a pair (`pair_refusal`): their epilogue chain must read both results and
    leave one value."""
    body = group.regions[0].blocks[0]
    ops = [o.operation for o in body.operations][:-1]
    mms = [o for o in ops if o.name in GEMM_OPS]
    if len(mms) not in (1, 2):
        return f"{len(mms)} matmuls in the group"
    founds = [tc_operands(mm) for mm in mms]
    for found in founds:
        if isinstance(found, str):
            return found
    found = founds[0]
    pair = founds[1] if len(founds) == 2 else None
    if pair is not None:
        why = pair_refusal(found, pair)
        if why is not None:
            return why
    chain, sources, stop = tc_chain(mms, found.m, found.n)
    if pair is not None and (not chain or [value_key(v) for v in _epilogue_outputs(
            mms, chain)] != [value_key(chain[-1].results[0])]):
        return f"the pair's epilogue does not join both products into one value ({stop})"
    problem = _problem(found, out_type_of(mms[0], chain), pair is not None)
    why = wgmma.refusal(problem, TILE)
    if why is not None:
        return why
    gemm: list[ir.Operation] = []
    for f in founds:
        for op in f.a.ops + f.b.ops + [defining(f.mm.operands[2]), f.mm]:
            if not any(op == o for o in gemm):
                gemm.append(op)
    gemm += sources + chain
    prologue, epilogue = split_around(ops, gemm)
    fused = [_step_name(o) for o in chain if o.name == "linalg.generic"]
    return TcSplit(GemmSplit(prologue, gemm, epilogue, fused, ""), found, chain, pair)


def sibling_refusal(first: TcOperands, other: TcOperands, same_a: bool = False
                    ) -> str | None:
    """Why one kernel cannot compute two GEMMs as segments of one B (None: it can): they
    must read the same A the same way (`same_a`: the caller knows the source is one), with
    B matrices of one K, type and layout."""
    if (not same_a and value_key(first.a.source) != value_key(other.a.source)) or \
            (first.la.ld, first.la.offset) != (other.la.ld, other.la.offset):
        return "the matmuls read different A operands"
    if (first.m, first.k) != (other.m, other.k):
        return "the matmuls' M or K differ"
    if first.b.element != other.b.element or first.lb.transposed != other.lb.transposed:
        return "the matmuls' B operands differ in type or layout"
    return None


def segment_order(parts: list[TcSplit]) -> list[TcSplit]:
    """Sibling GEMMs in the kernel's segment order: as they come, those whose N is not a
    multiple of 128 (the widest tile's columns) last (only the last segment may be
    ragged)."""
    return sorted(parts, key=lambda part: part.operands.n % 128 != 0)


def plan_tc_siblings(group: ir.Operation) -> list[TcSplit] | str:
    """The parts of a group of sibling GEMMs (`fusion.gemm_siblings`, gemm_siblings.py):
    one TcSplit per matmul, each with its own epilogue chain, in segment order; or why the
    group is not one kernel of our GEMM (`wgmma.GemmProblem.segments`)."""
    body = group.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    mms = [o for o in ops if o.name in GEMM_OPS]
    if len(mms) < 2:
        return f"{len(mms)} matmuls in a group of siblings"
    parts: list[TcSplit] = []
    covered: set[int] = set()
    for mm in mms:
        found = tc_operands(mm)
        if isinstance(found, str):
            return found
        if parts:
            why = sibling_refusal(parts[0].operands, found)
            if why is not None:
                return why
        chain, sources, _ = tc_chain(mm, found.m, found.n)
        gemm = found.a.ops + found.b.ops + [defining(mm.operands[2]), mm] + sources + chain
        covered |= {id_of(o) for o in gemm}
        fused = [_step_name(o) for o in chain if o.name == "linalg.generic"]
        parts.append(TcSplit(GemmSplit([], gemm, [], fused, ""), found, chain))
    if any(id_of(o) not in covered for o in ops[:-1] if o.name not in CLONED_INTO_GROUPS):
        return "an op of the group is in no sibling's GEMM or epilogue"
    yielded = [value_key(v) for v in ops[-1].operands]
    if sorted(yielded) != sorted(value_key(part.result) for part in parts):
        return "the group's results are not its siblings' epilogue results"
    parts = segment_order(parts)
    outs = {out_type_of(part.operands.mm, part.chain) for part in parts}
    if len(outs) != 1:
        return f"the siblings store different types ({', '.join(sorted(outs))})"
    why = wgmma.refusal(siblings_problem(parts), TILE)
    return parts if why is None else why


def tc_parts(group: ir.Operation) -> list[TcSplit]:
    """The GEMMs of a tc_gemm group as its kernel computes them: its siblings
    (`fusion.gemm_siblings`: `plan_tc_siblings`), else its one split (`plan_tc_split`)."""
    siblings = attributes.GEMM_SIBLINGS in group.attributes
    planned = plan_tc_siblings(group) if siblings else plan_tc_split(group)
    if isinstance(planned, str):
        raise CudaCodegenError(f"tensor-core GEMM group: {planned}")
    return planned if siblings else [planned]


def siblings_problem(parts: list[TcSplit]) -> wgmma.GemmProblem:
    """The kernel's problem for sibling GEMMs (in segment order): their Ns concatenated."""
    found = parts[0].operands
    segments = tuple(part.operands.n for part in parts)
    return wgmma.GemmProblem(found.m, sum(segments), found.k, found.a.element,
                             out_type_of(found.mm, parts[0].chain),
                             "nk" if found.lb.transposed else "kn", segments=segments)


def _siblings_epilogue_s(parts: list[TcSplit], device: cost_model.Device) -> float:
    return sum(epilogue_seconds(p.operands, p.chain, device) for p in parts)


def siblings_tiles(parts: list[TcSplit], device: cost_model.Device,
                   epilogue: float | None = None) -> list[tuple[int, ...]]:
    """The candidate tiles of a sibling kernel (the model's first): those of one GEMM of
    all their columns the segments allow (`epilogue`: their epilogues' time, if known)."""
    found = parts[0].operands
    problem = siblings_problem(parts)
    if epilogue is None:
        epilogue = _siblings_epilogue_s(parts, device)
    candidates = gemm_cost.tc_gemm_tile_candidates(
        found.m, problem.n, found.k, ELEMENT_BYTES[found.a.element], problem.b_layout == "kn",
        device, epilogue)
    return [t for t in candidates if wgmma.refusal(problem, wgmma.GemmTile(*t)) is None]


def siblings_s(parts: list[TcSplit], device: cost_model.Device
               ) -> tuple[float, list[tuple[int, ...]]] | None:
    """The cost model's time for one kernel of sibling GEMMs on the first of its candidate
    tiles, and the candidates (`siblings_tiles`; None: no tile fits the segments)."""
    epilogue = _siblings_epilogue_s(parts, device)
    tiles = siblings_tiles(parts, device, epilogue)
    if not tiles:
        return None
    found = parts[0].operands
    generics = [o for p in parts for o in p.chain if o.name == "linalg.generic"]
    moved = _bytes([found.a.source] + [p.operands.b.source for p in parts]) + \
        _bytes(_external(generics)) + _bytes([p.result for p in parts])
    n = sum(p.operands.n for p in parts)
    return gemm_cost.tc_gemm_tile_s(found.m, n, found.k, moved, device, tiles[0],
                                    epilogue), tiles


def _step_name(op: ir.Operation) -> str:
    from fusec.compiler.targets.cuda.body import unary_kind
    from fusec.compiler.targets.cuda.gemm import bias_add

    if attributes.NORM_FOLD in op.attributes:
        return "norm"  # a LayerNorm / RMSNorm folded into the weights (norm_prologue.py)
    ins = list(op.operands)[:len(op.operands) - 1]
    if len(ins) == 2 and any(bias_add(op, v) is not None for v in ins):
        return "bias"
    kind = unary_kind(op) if len(ins) == 1 else None
    if kind:
        return kind
    names = [o.operation.name.split(".")[-1] for o in op.regions[0].blocks[0].operations
             if o.operation.name != "linalg.yield"]
    return "(" + ",".join(names) + ")" if len(names) > 1 else (names[0] if names else "copy")


def _bytes(values: list[ir.Value]) -> int:
    total = 0
    for v in values:
        shape, elt = tensor_info(v.type)
        total += math.prod(shape) * ELEMENT_BYTES.get(elt, 4)
    return total


def _external(ops: list[ir.Operation]) -> list[ir.Value]:
    """Values the ops read from outside themselves (inputs, weights), once each."""
    inside = {value_key(r) for o in ops for r in o.results}
    seen: dict[int, ir.Value] = {}
    for o in ops:
        n_in = len(o.operands) - (len(o.results) if o.name.startswith("linalg.") else 0)
        for v in list(o.operands)[:n_in]:
            key = value_key(v)
            if key in inside or key in seen:
                continue
            p = defining(v)
            if p is not None and (p.name in ("tensor.empty",) or _splat(p)):
                continue
            seen[key] = v
    return list(seen.values())


def epilogue_ops(chain: list[ir.Operation]) -> float:
    """Weighted payload ops per output element of the epilogue (gemm_cost's weights)."""
    total = 0.0
    weights = gemm_cost.TC_EPILOGUE_OP_WEIGHTS
    for op in chain:
        if op.name != "linalg.generic":
            continue
        for inner in op.regions[0].blocks[0].operations:
            name = inner.operation.name
            if name in ("linalg.yield", "arith.constant"):
                continue
            total += weights.get(name, weights.get(name.split(".")[0], 1.0))
    return total


def epilogue_seconds(found: TcOperands, chain: list[ir.Operation],
                     device: cost_model.Device) -> float:
    """The cost model's time for the epilogue's arithmetic on the M x N accumulator."""
    return gemm_cost.tc_epilogue_s(found.m * found.n, epilogue_ops(chain), device)


def model_tile(found: TcOperands, epilogue_s: float, device: cost_model.Device,
               pair: bool = False) -> tuple[int, ...]:
    """The cost model's tile (and schedule) for this GEMM with its epilogue; a pair's is that
    of one GEMM of twice the columns (its tiles hold BN / 2 columns of each product: every
    tile the model chooses has BN 128)."""
    return gemm_cost.tc_gemm_tile(found.m, found.n * (2 if pair else 1), found.k,
                                  ELEMENT_BYTES[found.a.element], device, epilogue_s,
                                  splits=not pair)


def ours_s(tc: TcSplit, device: cost_model.Device) -> tuple[float, tuple[int, ...]]:
    """The cost model's time for our kernel of `tc` (with its model tile), and that tile."""
    found = tc.operands
    generics = [o for o in tc.chain if o.name == "linalg.generic"]
    ab = _bytes([found.a.source] + [f.b.source for f in tc.b_operands])
    epilogue = epilogue_seconds(found, tc.chain, device)
    tile = model_tile(found, epilogue, device, tc.pair is not None)
    return gemm_cost.tc_gemm_tile_s(found.m, tc.n_computed, found.k, ab + _bytes(
        _external(generics)) + _bytes([tc.result]), device, tile, epilogue), tile


def library_s(tc: TcSplit, library: GemmSplit, device: cost_model.Device,
              graph: bool = False) -> tuple[float, bool]:
    """The cost model's time for cuBLASLt's call with the epilogue it fuses plus the kernel
    for the rest of the chain (one matmul), and whether there is such a kernel; `graph`:
    replayed as a CUDA graph (`gemm_cost.library_gemm_s`)."""
    found = tc.operands
    generics = [o for o in tc.chain if o.name == "linalg.generic"]
    lib_keys = {id_of(o) for o in library.gemm}
    absorbed = [o for o in generics if id_of(o) in lib_keys]
    lib_out = absorbed[-1].results[0] if absorbed else found.mm.results[0]
    lib = gemm_cost.library_gemm_s(found.m, found.n, found.k, _bytes(
        [found.a.source, found.b.source, lib_out]), device, graph)
    rest = [o for o in generics if id_of(o) not in lib_keys]
    if rest:
        rest_in = [v for v in _external(rest) if value_key(v) != value_key(lib_out)]
        lib += cost_model.kernel_s(_bytes([lib_out, tc.result]) + _bytes(rest_in), 0, device)
    return lib, bool(rest)


def choose(tc: TcSplit, library: GemmSplit | str, device: cost_model.Device,
           graph: bool = False) -> tuple[bool, str]:
    """Ours or cuBLASLt for one matmul group (the cost model's prediction both ways), and
    the reason, for the IR; `graph`: the artifact is replayed as a CUDA graph, where
    cuBLASLt's call costs no host time (CudaOptions.graph)."""
    found = tc.operands
    m, n = found.m, tc.n_computed
    ours, tile = ours_s(tc, device)
    fused = "+".join(tc.split.fused)
    code = gemm_cost.tile_schedule(tile)
    if code:
        schedule = "persistent " + gemm_cost.SCHEDULE_NAMES[code]
    else:
        ctas = gemm_cost.tc_gemm_ctas_per_sm(-(-m // tile[0]) * -(-n // tile[1]), device)
        schedule = f"{ctas} CTA{'s' if ctas > 1 else ''} per SM"
    ours_text = (f"our tensor-core GEMM ({schedule})"
                 f"{' with the fused epilogue ' + fused if fused else ''}")
    if tc.pair is not None:
        return True, (f"two matmuls sharing A: {ours_text.replace('GEMM', 'GEMM pair', 1)} "
                      f"(predicted {ours * 1e6:.1f} us)")
    if isinstance(library, str):
        return True, (f"matmul-rooted group: {ours_text} (predicted {ours * 1e6:.1f} us; "
                      f"not cuBLASLt: {library})")
    lib, rest = library_s(tc, library, device, graph)
    lib_text = f"{lib * 1e6:.1f} us" + (" with the kernel after it" if rest else "") + \
        (" in a CUDA graph" if graph else "")
    if gemm_cost.prefer_tc_gemm(ours, lib):
        return True, (f"matmul-rooted group: {ours_text} (predicted {ours * 1e6:.1f} us, "
                      f"cuBLASLt {lib_text})")
    return False, f"cuBLASLt predicted {lib_text}, our tensor-core GEMM {ours * 1e6:.1f} us"


# ---------------------------------------------------------------- code generation


@dataclass
class ChainEpilogue:
    """The epilogue of one tc_gemm group: its chain's payloads on the accumulator values,
    the other operands read from kernel parameters (flat memrefs, after D)."""

    mm: ir.Operation
    chain: list[ir.Operation]
    m: int
    n: int
    bases: list[ir.Value] = field(default_factory=list)  # kernel parameters after D
    counter: int = 0
    # Parameters known 16-byte aligned (runtime/shim_cuda.c checks the inputs and outputs
    # of such launches; a view's offset is known here): their loads may merge.
    aligned: set[int] = field(default_factory=set)
    pair: ir.Operation | None = None  # a pair's second matmul (its values: `apply`'s lanes2)
    # Its SSA names' prefix (after %e / %ep): a sibling segment's own, so that the kernel's
    # epilogues (one per segment) do not share names.
    prefix: str = ""

    def __post_init__(self) -> None:
        self.base_index: dict[int, int] = {}
        for op in self.chain:
            if op.name != "linalg.generic":
                continue
            for v in list(op.operands)[:len(op.operands) - 1]:
                self._collect(v)

    def _collect(self, value: ir.Value) -> None:
        own = [self.mm] + ([self.pair] if self.pair is not None else []) + self.chain
        if value_key(value) in {value_key(r) for o in own for r in o.results}:
            return
        op = None if isinstance(value.owner, ir.Block) else defining(value)
        if op is None or is_weight(op):
            if value_key(value) not in self.base_index:
                self.base_index[value_key(value)] = len(self.bases)
                self.bases.append(value)
            return
        if _splat(op):
            return
        inputs = [op.operands[0]] if op.name in ONE_SOURCE_OPS \
            else list(op.operands)[:len(op.operands) - 1]
        for v in inputs:
            self._collect(v)

    def arguments(self) -> list[str]:
        out = []
        for i, v in enumerate(self.bases):
            shape, elt = tensor_info(v.type)
            out.append(f"%e{self.prefix}{i}: memref<{max(1, math.prod(shape))}x{elt}>")
        return out

    def setup(self, emit: Callable[[str], None]) -> None:
        for i in sorted(self.aligned):
            shape, elt = tensor_info(self.bases[i].type)
            emit(f"%e{self.prefix}{i}a = memref.assume_alignment %e{self.prefix}{i}, 16 : "
                 f"memref<{max(1, math.prod(shape))}x{elt}>")

    # -- emission helpers

    def fresh(self, hint: str) -> str:
        self.counter += 1
        return f"%ep{self.prefix}_{hint}{self.counter}"

    def begin(self) -> None:
        self.consts: dict[tuple[str, str], str] = {}
        self.memo: dict[tuple, str] = {}
        self.row_dims: dict[tuple, list[str]] = {}

    def apply(self, emit: Callable[[str], None], row: str, col: str,
              lanes: list[str], lanes2: list[str] | None = None) -> list[str]:
        self.emit = emit
        mm_elt = str(ir.RankedTensorType(self.mm.results[0].type).element_type)
        out = []
        for j, lane in enumerate(lanes):
            colj = col if j == 0 else self._index_op("addi", col, self._const(j, "index"))
            products = [(self.mm, lane)]
            if self.pair is not None:
                products.append((self.pair, lanes2[j]))
            self.env = {}
            for mm, value in products:
                if mm_elt != "f32":
                    value = self._emit_op(f"arith.truncf {value} : f32 to {mm_elt}")
                self.env[value_key(mm.results[0])] = value
            for op in self.chain:
                if op.name in RESHAPE_OPS:
                    self.env[value_key(op.results[0])] = self.env[value_key(op.operands[0])]
                    continue
                shape = list(ir.RankedTensorType(op.results[0].type).shape)
                idx = self._domain_index(row, colj, shape)
                self.env[value_key(op.results[0])] = self._generic(op, idx, in_chain=True)
            out.append(self.env[value_key(self.chain[-1].results[0] if self.chain
                                          else self.mm.results[0])])
        return out

    def _const(self, value: Any, type_: str) -> str:
        key = (str(value), type_)
        if key not in self.consts:
            name = self.fresh("c")
            self.emit(f"{name} = arith.constant {value} : {type_}")
            self.consts[key] = name
        return self.consts[key]

    def _emit_op(self, text: str) -> str:
        name = self.fresh("v")
        self.emit(f"{name} = {text}")
        return name

    def _index_op(self, op: str, a: str, b: str) -> str:
        key = (op, a, b)
        if key not in self.memo:
            self.memo[key] = self._emit_op(f"arith.{op} {a}, {b} : index")
        return self.memo[key]

    def _domain_index(self, row: str, col: str, shape: list[int]) -> list[str]:
        """Index names for each dim of `shape` at output (row, col): the rows' dims from
        the row, the columns' from the column (row-major both; `row_split`)."""
        k = row_split(shape, self.m)
        if k is None or k == len(shape):
            raise CudaCodegenError(f"tensor-core GEMM epilogue: {shape} is not the "
                                   f"{self.m} x {self.n} product regrouped")
        lead = shape[:k]
        key = (row, tuple(lead))
        if key not in self.row_dims:
            self.row_dims[key] = self._unflatten(row, lead)
        cols = [col] if k == len(shape) - 1 else self._unflatten(col, shape[k:])
        return self.row_dims[key] + cols

    def _read(self, value: ir.Value, idx: list[str]) -> str:
        """`value` at index `idx` (one name per dim of its shape)."""
        key = (value_key(value), tuple(idx))
        if key in self.memo:
            return self.memo[key]
        op = None if isinstance(value.owner, ir.Block) else defining(value)
        shape, elt = tensor_info(value.type)
        if op is not None and _splat(op):
            attr = ir.DenseElementsAttr(op.attributes["value"]).get_splat_value()
            name = self._emit_op(f'"arith.constant"() {{value = {attr}}} : () -> {elt}')
        elif op is None or is_weight(op):
            arg = self.base_index[value_key(value)]
            offset = self._offset(shape, idx)
            ref = f"%e{self.prefix}{arg}" + ("a" if arg in self.aligned else "")
            name = self._emit_op(f"memref.load {ref}[{offset}] : "
                                 f"memref<{max(1, math.prod(shape))}x{elt}>")
        elif op.name in RESHAPE_OPS:  # row-major both: the source at the same flat offset
            src_shape, _ = tensor_info(op.operands[0].type)
            name = self._read(op.operands[0], self._unflatten(self._offset(shape, idx),
                                                              src_shape))
        elif op.name == "linalg.broadcast":
            dims = set(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
            name = self._read(op.operands[0], [x for d, x in enumerate(idx) if d not in dims])
        elif op.name == "linalg.transpose":
            perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
            inner = [""] * len(perm)
            for i, p in enumerate(perm):
                inner[p] = idx[i]
            name = self._read(op.operands[0], inner)
        else:
            name = self._generic(op, idx)
        self.memo[key] = name
        return name

    def _unflatten(self, flat: str, shape: list[int]) -> list[str]:
        """The index of row-major flat offset `flat` in `shape`, one name per dim (a row's
        leading dims; a reshape's source)."""
        names = []
        for d, extent in enumerate(shape):
            inner = math.prod(shape[d + 1:])
            x = flat if inner == 1 else self._index_op("divui", flat,
                                                       self._const(inner, "index"))
            if d > 0:
                x = self._index_op("remui", x, self._const(extent, "index"))
            names.append(x if extent != 1 else self._const(0, "index"))
        return names

    def _offset(self, shape: list[int], idx: list[str]) -> str:
        terms = []
        stride = 1
        for d in range(len(shape) - 1, -1, -1):
            if shape[d] != 1 and idx[d] != self._const(0, "index"):
                terms.append(idx[d] if stride == 1 else
                             self._index_op("muli", idx[d], self._const(stride, "index")))
            stride *= shape[d]
        if not terms:
            return self._const(0, "index")
        total = terms[0]
        for t in terms[1:]:
            total = self._index_op("addi", total, t)
        return total

    def _generic(self, op: ir.Operation, idx: list[str], in_chain: bool = False) -> str:
        """The elementwise generic `op` at domain index `idx`; operands that are the
        epilogue's own values (`in_chain`) come from this lane's `env`."""
        maps = [parse_map(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
        block = op.regions[0].blocks[0]
        ins = list(op.operands)[:len(op.operands) - 1]
        env: dict[int, str] = {}
        for arg, v, mp in zip(block.arguments, ins, maps):
            if in_chain and value_key(v) in self.env:
                env[value_key(arg)] = self.env[value_key(v)]
            else:
                env[value_key(arg)] = self._read(
                    v, [idx[r] if r is not None else self._const(0, "index")
                        for r in mp.results])
        def name_of(v: ir.Value) -> str:
            key = value_key(v)
            if key not in env:  # a captured scalar constant (`_payload_ok` allows no other)
                c = defining(v)
                env[key] = self._emit_op(
                    f'"arith.constant"() {{value = {c.attributes["value"]}}} : () -> {v.type}')
            return env[key]

        for inner in block.operations:
            inner = inner.operation
            if inner.name == "linalg.yield":
                # May yield a captured constant itself (clamp_min(x, nan) yields NaN).
                return name_of(inner.operands[0])
            operands = [name_of(v) for v in inner.operands]
            names = [self.fresh("p") for _ in inner.results]
            self.emit(payload_op_text(inner, operands, names))
            for r, nm in zip(inner.results, names):
                env[value_key(r)] = nm
        raise CudaCodegenError("a payload without linalg.yield")


def tc_gemm_launch(group: ir.Operation, symbol: str, operands: list[int],
                   weight_buffer: Any, result_buffers: Any, module_asm: Any,
                   misaligned: Callable[[int], bool] = lambda b: False,
                   device: cost_model.Device = cost_model.H200,
                   split_buffers: Callable[[int, int], tuple[int, int]] | None = None
                   ) -> tuple[str, Launch]:
    """The kernel text and the launch of one tc_gemm group (formed by split_matmul_groups,
    or sibling GEMMs merged by gemm_siblings.py); `misaligned(buffer)`: a plan buffer that
    is a view at an offset not a multiple of 16; `split_buffers(floats, counters)`: the plan
    buffers of split-K's f32 scratch and zeroed i32 counters, at least that large (shared
    by every split-K launch: they run one after another, and each leaves the counters
    zero)."""
    body = group.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    siblings = attributes.GEMM_SIBLINGS in group.attributes
    parts = tc_parts(group)
    yielded = [value_key(v) for v in ops[-1].operands]
    if len(group.results) != len(parts) or \
            any(value_key(part.result) not in yielded for part in parts):
        raise CudaCodegenError("tensor-core GEMM group: its results are not its chains' ends")
    found = parts[0].operands
    pair = parts[0].pair
    out_type = out_type_of(found.mm, parts[0].chain)
    problem = siblings_problem(parts) if siblings else _problem(found, out_type,
                                                                 pair is not None)
    epilogues = [ChainEpilogue(part.operands.mm, part.chain, found.m, part.operands.n,
                               pair=pair.mm if pair is not None else None,
                               prefix=f"s{i}_" if siblings else "")
                 for i, part in enumerate(parts)]
    buffer_of = operand_buffers(group, operands, weight_buffer, module_asm,
                                "tensor-core GEMM")

    results = result_buffers()
    outputs = [results[yielded.index(value_key(part.result))] for part in parts]
    b_operands = [f for part in parts for f in part.b_operands]
    buffers = [buffer_of(found.a.source)] + [buffer_of(f.b.source) for f in b_operands] + \
        outputs
    if any(misaligned(b) for b in outputs):
        raise CudaCodegenError("tensor-core GEMM group: its result is a misaligned view")
    for epilogue in epilogues:
        bases = [buffer_of(v) for v in epilogue.bases]
        epilogue.aligned = {i for i, b in enumerate(bases) if not misaligned(b)}
        buffers += bases
    from fusec.compiler.targets.cuda.choose_tiles import recorded_tile, tuning_info

    recorded = recorded_tile(group)
    if recorded:
        tile = recorded
    elif siblings:
        tile = siblings_tiles(parts, device)[0]
    else:
        tile = model_tile(found, epilogue_seconds(found, parts[0].chain, device), device,
                          pair is not None)
    t = wgmma.GemmTile(*tile)
    unroll = gemm_cost.tc_epilogue_unroll(max(epilogue_ops(p.chain) for p in parts))
    # Built once per body, problem, tile, unroll, aligned operands and SM count (built.py):
    # a model's layers have the same GEMMs.
    units = device.parallel_units
    key = (body_text(group), repr(problem), repr(t), unroll,
           tuple(tuple(sorted(e.aligned)) for e in epilogues), units)
    text = renamed(TC_GEMM.get(key, lambda: wgmma.build_kernel_text(
        PROBE_SYMBOL, problem, t, units, epilogues, unroll)), symbol)
    grid, block, shared = wgmma.launch_geometry(problem, t, units)
    if t.splits > 1:
        if split_buffers is None:
            raise CudaCodegenError("tensor-core GEMM: split-K without scratch buffers")
        buffers += list(split_buffers(*wgmma.split_scratch(problem, t)))
    eb = wgmma.MMA_INPUTS[found.a.element]
    dtype = TENSOR_MAP_TYPES[found.a.element]
    maps = [map_entry(0, dtype, [found.k, found.m], [found.la.ld * eb], [t.bk, t.bm],
                      SWIZZLE_128B, found.la.offset * eb)]
    per_map = 2 if pair is not None else 1  # a pair's tile: BN / 2 rows of each B
    for param, f in enumerate(b_operands, start=1):
        if problem.b_layout == "nk":
            maps.append(map_entry(param, dtype, [f.k, f.n], [f.lb.ld * eb],
                                  [t.bk, t.bn // per_map], SWIZZLE_128B, f.lb.offset * eb))
        else:
            maps.append(map_entry(param, dtype, [f.n, f.k], [f.lb.ld * eb], [64, t.bk],
                                  SWIZZLE_128B, f.lb.offset * eb))
    fused = [_step_name(o) for part in parts for o in part.chain if o.name == "linalg.generic"]
    info = {"path": "tc_gemm", "why": str(ir.StringAttr(group.attributes[attributes.WHY]).value),
            "flops": 2 * found.m * sum(p.n_computed for p in parts) * found.k,
            "epilogue": fused,
            "tile": [t.bm, t.bn, t.bk, t.stages] + ([t.schedule] if t.schedule or t.splits > 1
                                                     else []) +
                    ([t.splits] if t.splits > 1 else []),
            "schedule": {wgmma.PINGPONG: "ping-pong", wgmma.COOPERATIVE: "cooperative"}.get(
                t.schedule, "one warpgroup"),
            "b_layout": problem.b_layout,
            "epilogue_unroll": unroll, **({"pair": True} if pair is not None else {}),
            **({"siblings": list(problem.segments)} if siblings else {}),
            **tuning_info(group)}
    kind = str(group.attributes["kind"]).strip('"')
    ops_in = [o.name for o in ops if o.name.startswith("linalg.")]
    launch = Launch(symbol=symbol, buffers=buffers, grid=grid, kind=kind,
                    ops=ops_in, info=info, block=block,
                    shared_bytes=shared, launch_kind="kernel", maps=maps)
    return text, launch


__all__ = ["TC_ARCHES", "ChainEpilogue", "TcSplit", "choose", "plan_tc_siblings", "plan_tc_split",
           "siblings_s", "tc_chain", "tc_gemm_launch", "tc_operands", "tc_parts"]
