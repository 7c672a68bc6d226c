"""--fusion-cpu-matmul: register-blocked, vectorized microkernels for matmuls in CPU kernels.

`convert-linalg-to-loops` turns a matmul into a loop nest that LLVM vectorizes one output
row at a time, loading and storing C for every k: about 30 GFLOP/s on one core here, where
oneDNN does 100 and the core can do 200. This pass rewrites each matmul-like
`linalg.generic` of a bufferized CPU kernel (f32, `C[b.., m, n] += A[b.., m, k] *
B[b.., k, n]` with B and C contiguous along n, as torch-mlir's matmul, batch_matmul and
Linear are after `--fusion-cpu-loop-order`; an epilogue fused after it is another op and
stays as it is) into:

    for b (each batch index)            # batch dims tiled by 1
      for n0 in 0..N step nr            # a column block of B (K x nr) ...
        Bp = copy of B[:, n0:n0+nr]     # ... packed: contiguous, stays in cache
        for m0 in 0..M step mr          # over the rows of the kernel's tile
          acc = C[m0:m0+mr, n0:n0+nr]   # mr x nr accumulators, in vector registers
          for k in 0..K
            acc += broadcast(A[m0+i, k]) * Bp[k, :]   # mr broadcast-FMAs per vector
          C[m0:m0+mr, n0:n0+nr] = acc

Mechanism: upstream MLIR's transform dialect tiles the op (`tile_using_for`), peels the
n and m loops so that every full tile has static sizes (`loop.peel`), packs B
(`structured.promote` into a stack buffer, allocated once at the kernel's entry) when
several row blocks reuse it, and vectorizes the static tiles (`structured.vectorize`, then
`vector.contract` lowered to outer products, i.e. broadcast-FMAs). A remainder tile of
dynamic size (the last rows of a kernel's partial tile) stays a linalg op and becomes
scalar loops later, as before; static remainders are vectorized at their own size. The
accumulator's read and write are hoisted out of the k loop here (a loop-carried vector):
upstream's `hoist_redundant_vector_transfers` refuses when a dynamic remainder tile of
the same buffer sits beside the loop.

Ops that are not such contractions (elementwise, reductions, convolutions, f64, a B read
down a column as in Q @ K^T) are left alone, as is any op whose n extent is below one
vector (8 floats).

Depth blocks: a deep K (GPT-2's 3072 -> 768 projection) is first tiled by `kc`, so that the
packed B block (kc x nr floats) stays in L1 while every row block of A streams past it;
each depth block adds to C what the ones before it left there (the op accumulates into its
buffer). Without it the 3072 x 16 block lives in L2 and is read from there once per row
block.

Options: `mr` (rows per microkernel, default 6), `kc` (depth block: -1 the cost model's
`cpu_matmul_depth_block`, 0 none), `nr` (columns, a multiple of 8; the
pipeline gives two vectors: 16 for AVX2, 32 for AVX-512). A block narrower than nr gets
nr reduced in steps of 8.

Before (a kernel's tile, after bufferization):
    linalg.generic {indexing_maps = [(m, k, n) -> (m, k), (m, k, n) -> (k, n),
                                     (m, k, n) -> (m, n)],
                    iterator_types = ["parallel", "reduction", "parallel"]}
        ins(%a, %b : memref<8x48xf32>, memref<48x80xf32>) outs(%c : memref<8x80xf32>)
After (nr = 16):
    scf.for %n0 = %c0 to %c80 step %c16 {
      %acc0 = vector.transfer_read %c_tile[...] : vector<6x16xf32>
      %acc = scf.for %k = %c0 to %c48 step %c1 iter_args(%acc1 = %acc0) {
        ... 6 x (vector.broadcast, vector.fma) ...
      }
      vector.transfer_write %acc, %c_tile[...] : vector<6x16xf32>
      ... the same for the last 2 rows, vector<2x16xf32> ...
    }
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusec.passes import attributes, cost_model
from fusec.passes.grouping import iterator_kinds, op_key, split_columns
from fusec.passes.registry import Pass, register
from mlir import ir
from mlir.dialects import arith, linalg, memref, scf
from mlir.dialects.transform import interpreter

TAG = attributes.CPU_MATMUL
VECTOR_TAG = attributes.CPU_MATMUL_VECTOR
# f32 lanes in the narrowest vector the microkernel is built from (AVX2: 8).
MIN_VECTOR = 8
# f32 lanes in the narrowest vector a column block's remainder is built from (SSE: 4).
REMAINDER_VECTOR = 4
# Tags of the column blocks `_split_columns` cuts (apart from phase 1's, which they keep).
SPLIT_TAGS = 1 << 20
# The largest B column block packed into a stack buffer (K * nr floats).
PACK_LIMIT_BYTES = 256 * 1024


@dataclass
class Contraction:
    """A matmul-like op's loop dims (positions in its loop nest): batch dims, m, n and the
    reduction dims (`match_contraction` takes one)."""

    batch: list[int]
    m: int
    n: int
    ks: list[int]
    extents: list[int]  # static extent per loop dim, or a negative number when dynamic


def map_dims(amap: ir.AffineMap) -> list[int] | None:
    """The dim of each result of a projected permutation map, or None."""
    dims = []
    for expr in amap.results:
        if not isinstance(expr, ir.AffineDimExpr):
            return None
        dims.append(expr.position)
    return dims


def _contiguous_last(memref: ir.Type) -> bool:
    """Whether a memref's innermost dim has stride 1."""
    if not isinstance(memref, ir.MemRefType):
        return False
    strides, _ = ir.MemRefType(memref).get_strides_and_offset()
    return len(strides) > 0 and strides[-1] == 1


def is_multiply_accumulate(op: ir.Operation) -> bool:
    """Whether the payload is exactly `out + in0 * in1` (either operand order)."""
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if [o.name for o in ops] != ["arith.mulf", "arith.addf", "linalg.yield"]:
        return False
    mul, add, yield_ = ops
    a, b, out = block.arguments
    if not ((mul.operands[0] == a and mul.operands[1] == b)
            or (mul.operands[0] == b and mul.operands[1] == a)):
        return False
    if not ((add.operands[0] == out and add.operands[1] == mul.results[0])
            or (add.operands[1] == out and add.operands[0] == mul.results[0])):
        return False
    return yield_.operands[0] == add.results[0]


def memref_strides(t: ir.Type) -> tuple[list[int], int]:
    """A memref type's strides and offset (dynamic ones as MLIR's sentinel)."""
    return ir.MemRefType(t).get_strides_and_offset()


def identity_layout(t: ir.Type) -> bool:
    """Whether a memref type has the identity (row-major, offset 0) layout."""
    layout = ir.MemRefType(t).layout
    if not isinstance(layout, ir.AffineMapAttr):
        return False
    amap = layout.value
    return amap == ir.AffineMap.get_identity(amap.n_dims, amap.context)


def collapsible(t: ir.Type, groups: list[list[int]]) -> bool:
    """Whether each group of dims is one contiguous run of memory (static strides)."""
    shape = ir.MemRefType(t).shape
    strides, _ = memref_strides(t)
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    for group in groups:
        for outer, inner in zip(group, group[1:]):
            if strides[inner] == dynamic or shape[inner] < 0 \
                    or strides[outer] != strides[inner] * shape[inner]:
                return False
    return True


def _collapse_subview(value: ir.Value, groups: list[list[int]]) -> ir.Value | None:
    """`value`, a unit-stride `memref.subview` taking every dim of a group but the first
    whole, as a subview of its source collapsed by `groups` (the first dim's offset scaled by
    the inner extents), or None where it is no such view.

    A load through a collapsed view is folded into the source's indices by delinearizing
    (a division and a remainder per index): LLVM then sees no consecutive addresses, and a
    B panel's packing copy ran as 8-lane gathers (LLaMA's Q projection 1.45x the time of
    the same matmul without the head split). Through the collapsed source, the indices of
    a tile's view are linear."""
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "memref.subview":
        return None
    sub = owner.operation.opview
    source = sub.source
    src_shape = ir.MemRefType(source.type).shape
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    offsets, sizes, strides = (list(sub.static_offsets), list(sub.static_sizes),
                               list(sub.static_strides))
    if len(sizes) != len(src_shape) or ir.MemRefType(value.type).rank != len(src_shape) \
            or any(st != 1 for st in strides) or any(sz < 0 for sz in sizes):
        return None
    for group in groups:
        if any(offsets[d] != 0 or sizes[d] != src_shape[d] for d in group[1:]):
            return None
    if not collapsible(source.type, groups):
        return None
    base = collapse_view(source, groups, linear=True)
    dynamic_offsets = iter(sub.offsets)
    values = [next(dynamic_offsets) if o == dynamic else None for o in offsets]
    new_static, new_dynamic, new_sizes = [], [], []
    index = ir.IndexType.get()
    for group in groups:
        inner = math.prod(src_shape[d] for d in group[1:])
        first = group[0]
        if values[first] is None:
            new_static.append(offsets[first] * inner)
        else:
            scaled = values[first]
            if inner != 1:
                scaled = arith.MulIOp(scaled, arith.ConstantOp(index, inner).result).result
            new_static.append(dynamic)
            new_dynamic.append(scaled)
        new_sizes.append(math.prod(sizes[d] for d in group))
    base_strides, base_offset = memref_strides(base.type)
    offset = dynamic
    if base_offset != dynamic and dynamic not in new_static:
        offset = base_offset + sum(o * st for o, st in zip(new_static, base_strides))
    element = ir.MemRefType(value.type).element_type
    result = ir.MemRefType.get(new_sizes, element,
                               ir.StridedLayoutAttr.get(offset, base_strides))
    static = ir.DenseI64ArrayAttr.get
    return memref.SubViewOp(result, base, new_dynamic, [], [], static(new_static),
                            static(new_sizes), static([1] * len(new_sizes))).result


def collapse_view(value: ir.Value, groups: list[list[int]], linear: bool = False) -> ir.Value:
    """`memref.collapse_shape` of `value` by `groups` (checked with `collapsible`). With
    `linear`, a view whose loads keep linear indices where one can be had: a tile's subview
    of a collapsed source (`_collapse_subview`), a whole buffer reinterpreted."""
    if linear:
        view = _collapse_subview(value, groups)
        if view is not None:
            return view
    t = ir.MemRefType(value.type)
    if linear and identity_layout(value.type) and t.has_static_shape:
        # A whole buffer (a kernel argument) reinterpreted: its loads keep linear indices
        # (`fold-memref-alias-ops` would delinearize them through a collapse_shape).
        shape = [math.prod(t.shape[d] for d in g) for g in groups]
        strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
        static = ir.DenseI64ArrayAttr.get
        return memref.ReinterpretCastOp(ir.MemRefType.get(shape, t.element_type), value, [], [],
                                        [], static([0]), static(shape), static(strides)).result
    t = ir.MemRefType(value.type)
    shape = list(t.shape)
    result_shape = []
    for group in groups:
        extent = 1
        for d in group:
            extent = -1 if extent < 0 or shape[d] < 0 else extent * shape[d]
        result_shape.append(extent if extent >= 0 else ir.ShapedType.get_dynamic_size())
    if identity_layout(value.type):
        result = ir.MemRefType.get(result_shape, t.element_type)
    else:
        strides, offset = memref_strides(value.type)
        layout = ir.StridedLayoutAttr.get(offset, [strides[g[-1]] for g in groups])
        result = ir.MemRefType.get(result_shape, t.element_type, layout)
    i64 = ir.IntegerType.get_signless(64)
    reassociation = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in g])
                                      for g in groups])
    return memref.CollapseShapeOp(result, value, reassociation).result


def affine_map_attr(n_dims: int, exprs: list[ir.AffineExpr]) -> ir.AffineMapAttr:
    """An indexing map attribute over `n_dims` loop dims."""
    return ir.AffineMapAttr.get(ir.AffineMap.get(n_dims, 0, exprs))


def iterator_types_attr(kinds: list[str]) -> ir.ArrayAttr:
    """linalg.generic's `iterator_types` ("parallel", "reduction") as an attribute."""
    return ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{k}>") for k in kinds])


def is_f32_memref_generic(op: ir.Operation) -> bool:
    """Whether `op` is a bufferized `linalg.generic` of two f32 inputs and one f32 output
    (the shape of every op the microkernel takes)."""
    if op.name != "linalg.generic" or len(op.operands) != 3 or len(op.results):
        return False
    types = [v.type for v in op.operands]
    return all(isinstance(t, ir.MemRefType) and str(ir.MemRefType(t).element_type) == "f32"
               for t in types)


def multiply_accumulate(a: ir.Value, b: ir.Value, c: ir.Value, maps: list[ir.AffineMapAttr],
                        iterators: list[str]) -> linalg.GenericOp:
    """A `linalg.generic` `c += a * b` (f32, on memrefs) with these indexing maps and loop
    kinds: the payload the microkernel matches (`is_multiply_accumulate`)."""
    f32 = ir.F32Type.get()
    generic = linalg.GenericOp([], [a, b], [c], ir.ArrayAttr.get(maps),
                               iterator_types_attr(iterators))
    body = generic.regions[0].blocks.append(f32, f32, f32)
    with ir.InsertionPoint(body):
        product = arith.MulFOp(body.arguments[0], body.arguments[1]).result
        linalg.YieldOp([arith.AddFOp(body.arguments[2], product).result])
    return generic


def _run_in(dims: list[int], group: list[int]) -> list[int] | None:
    """The positions of `group`'s dims in `dims` when they stand there side by side in
    `group`'s order, else None."""
    if group[0] not in dims:
        return None
    first = dims.index(group[0])
    positions = list(range(first, first + len(group)))
    if [dims[i] for i in positions if i < len(dims)] != group:
        return None
    return positions


def _reassociation(rank: int, runs: list[list[int]]) -> list[list[int]]:
    """Groups of positions 0..rank-1: each run one group, every other position its own."""
    groups, i = [], 0
    starts = {run[0]: run for run in runs}
    while i < rank:
        run = starts.get(i)
        groups.append(run if run else [i])
        i += len(run) if run else 1
    return groups


def merge_split_dims(op: ir.Operation) -> ir.Operation | None:
    """A matmul-like generic whose columns or depth are split over several loop dims, as
    one with each merged into one dim (the operands viewed through `memref.collapse_shape`),
    or None when there is nothing to merge or a view would not be contiguous.

    torch-mlir's attention projections split them: Q = x @ Wq followed by the head split
    becomes, once tiled with it, C[b, t, h, d] += A[b, t, k] * B[k, h, d] (columns (h, d)),
    and the output projection A[b, t, h, d] * B[h, d, n] (depth (h, d)). The microkernel
    takes one column and one depth loop: its matcher read such a C's `h` as the rows, and
    the projections ran as 2-row matmuls (BERT's Q, K and V kernels: 12 GFLOP/s)."""
    if not is_f32_memref_generic(op):
        return None
    types = [v.type for v in op.operands]
    if not is_multiply_accumulate(op):
        return None
    iterators = iterator_kinds(op)
    maps = [map_dims(ir.AffineMapAttr(m).value) for m in op.attributes["indexing_maps"]]
    if any(m is None for m in maps):
        return None
    a_dims, b_dims, c_dims = maps
    ks = [d for d in a_dims if iterators[d] == "reduction"]
    ns = split_columns(a_dims, b_dims, c_dims)
    runs: list[tuple[list[int], list[list[int] | None]]] = []
    if ns is not None:
        runs.append((ns, [None, _run_in(b_dims, ns), _run_in(c_dims, ns)]))
    if len(ks) > 1 and set(ks) == {d for d, it in enumerate(iterators) if it == "reduction"}:
        runs.append((ks, [_run_in(a_dims, ks), _run_in(b_dims, ks), None]))
    runs = [(group, places) for group, places in runs
            if all(p is not None for i, p in enumerate(places) if group[0] in maps[i])]
    if not runs:
        return None
    groups = [_reassociation(len(maps[i]), [p for _, places in runs
                                            if (p := places[i]) is not None])
              for i in range(3)]
    if not all(collapsible(t, g) for t, g in zip(types, groups)):
        return None
    # New loop dims: each merged group becomes its first dim; the others keep their order.
    merged_away = {d for group, _ in runs for d in group[1:]}
    new_index = {}
    for d in range(len(iterators)):
        if d not in merged_away:
            new_index[d] = len(new_index)
    ctx = op.context
    new_dims = [ir.AffineDimExpr.get(i, ctx) for i in range(len(new_index))]
    with ir.InsertionPoint(op), op.location:
        views = [v if len(g) == len(m) else collapse_view(v, g, linear=True)
                 for v, g, m in zip(op.operands, groups, maps)]
        new_maps = [affine_map_attr(len(new_index), [new_dims[new_index[m[g[0]]]] for g in grp])
                    for m, grp in zip(maps, groups)]
        generic = multiply_accumulate(views[0], views[1], views[2], new_maps,
                                      [iterators[d] for d in new_index])
    for named in [op.attributes[i] for i in range(len(op.attributes))]:
        if named.name not in ("indexing_maps", "iterator_types", "operandSegmentSizes"):
            generic.operation.attributes[named.name] = named.attr
    op.erase()
    return generic.operation


def match_contraction(op: ir.Operation, min_columns: int = MIN_VECTOR) -> Contraction | None:
    """The dims of a matmul-like f32 `linalg.generic` on memrefs at least `min_columns`
    wide (when static), or None."""
    if not is_f32_memref_generic(op):
        return None
    types = [v.type for v in op.operands]
    iterators = iterator_kinds(op)
    reductions = [d for d, it in enumerate(iterators) if it == "reduction"]
    # One reduction dim: with K split in two (torch-mlir's heads x head_dim projection) the
    # tiled contraction keeps two unit reduction dims, which the outer-product lowering
    # does not take (it emits a scalar dot product per element, slower than the loops).
    if len(reductions) != 1 or len(iterators) < 3:
        return None
    maps = [map_dims(ir.AffineMapAttr(m).value) for m in op.attributes["indexing_maps"]]
    if any(m is None for m in maps):
        return None
    a_dims, b_dims, c_dims = maps
    ks = set(reductions)
    if len(c_dims) < 2 or len(set(c_dims)) != len(c_dims) or ks & set(c_dims):
        return None
    m, n = c_dims[-2], c_dims[-1]
    batch = c_dims[:-2]
    # B and C are read along n with stride 1 (vector loads); A supplies one scalar per row.
    # A batch dim may be missing from A or B (one operand shared by every batch).
    if b_dims[-1] != n or set(a_dims) - set(batch) != {m} | ks:
        return None
    if set(b_dims) - set(batch) != {n} | ks or len(iterators) != len(batch) + 2 + len(ks):
        return None
    if len(a_dims) != len(set(a_dims)) or len(b_dims) != len(set(b_dims)):
        return None
    if not (_contiguous_last(types[1]) and _contiguous_last(types[2])):
        return None
    if not is_multiply_accumulate(op):
        return None
    extents = [-1] * len(iterators)
    for value, dims in zip(op.operands, maps):
        for extent, d in zip(ir.ShapedType(value.type).shape, dims):
            if extent >= 0:
                extents[d] = extent
    if 0 <= extents[n] < min_columns:
        return None
    return Contraction(batch, m, n, reductions, extents)


def _tile_sizes(n_loops: int, sizes: dict[int, int]) -> str:
    return "[" + ", ".join(str(sizes.get(d, 0)) for d in range(n_loops)) + "]"


def _needs_peel(extent: int, tile: int) -> bool:
    # transform.loop.peel fails on a loop that is already divisible.
    return extent < 0 or extent % tile != 0


def _tile_steps(i: int, n_loops: int, steps: list[tuple[str, dict[int, int]]],
                peels: list[str], promote: bool = False) -> str:
    """Transform IR for op `i`: tile it once per step (one loop each, outermost first),
    optionally copy its B operand into a local buffer first (`promote`), then peel the
    named steps' loops, whose last iteration is a partial tile."""
    any_op = "!transform.any_op"
    lines = [f"%t{i}_ = transform.structured.match attributes{{{TAG} = {i} : i64}} in %root"
             f" : ({any_op}) -> {any_op}"]
    current = f"%t{i}_"
    if promote:
        lines.append(f"%t{i}_p = transform.structured.promote {current} "
                     f"{{operands_to_promote = [1], use_alloca}} : ({any_op}) -> {any_op}")
        current = f"%t{i}_p"
    for name, sizes in steps:
        lines.append(f"%t{i}_{name}, %l{i}_{name} = transform.structured.tile_using_for "
                     f"{current} tile_sizes {_tile_sizes(n_loops, sizes)}"
                     f" : ({any_op}) -> ({any_op}, {any_op})")
        current = f"%t{i}_{name}"
    # Innermost first: peeling a loop clones its body, which would invalidate the handle
    # of a loop nested in it (a deep K peeled by `kc` around columns peeled by `nr`).
    for name in reversed(peels):
        lines.append(f"%f{i}_{name} = transform.cast %l{i}_{name} : {any_op} to "
                     f'!transform.op<"scf.for">')
        lines.append(f"%p{i}_{name}, %r{i}_{name} = transform.loop.peel %f{i}_{name} "
                     f'  : (!transform.op<"scf.for">) -> ({any_op}, {any_op})')
    return "\n    ".join(lines)


def _outer_script(i: int, c: Contraction, nr: int, kc: int) -> str:
    """Phase 1 for op `i`: batch dims tiled by 1, k by `kc` when deeper (0: not), n by
    `nr` (each peeled when partial)."""
    steps = [(f"b{j}", {d: 1}) for j, d in enumerate(c.batch)]
    peels = []
    k = c.ks[0]
    if kc and (c.extents[k] < 0 or c.extents[k] > kc):
        steps.append(("kc", {k: kc}))
        if _needs_peel(c.extents[k], kc):
            peels.append("kc")
    steps.append(("n", {c.n: nr}))
    if _needs_peel(c.extents[c.n], nr):
        peels.append("n")
    return _tile_steps(i, len(c.extents), steps, peels)


def _inner_script(i: int, c: Contraction, mr: int, pack: bool) -> str:
    """Phase 2 for a column block `i`: B packed (`pack`), m tiled by `mr` (peeled when
    partial), k by 1."""
    steps = [("m", {c.m: mr})] + [(f"k{j}", {k: 1}) for j, k in enumerate(c.ks)]
    peels = ["m"] if _needs_peel(c.extents[c.m], mr) else []
    return _tile_steps(i, len(c.extents), steps, peels, promote=pack)


def _split_columns(module: ir.Operation) -> None:
    """Cut each column block whose static width is no power of two (a remainder of `nr`,
    or an op narrower than it) into power-of-two blocks, widest first
    (`cost_model.cpu_matmul_column_piece`): one more tile-and-peel per piece. Each cut gets
    a tag of its own (the pieces keep theirs: a reused tag would match them again)."""
    next_tag = SPLIT_TAGS
    for _ in range(8):  # a piece per round; widths under 2^8 * 4 need no more
        scripts = []
        for op in _walk(module, "linalg.generic"):
            if TAG not in op.attributes:
                continue
            c = match_contraction(op, REMAINDER_VECTOR)
            width = c.extents[c.n] if c is not None else -1
            if width < 0 or width & (width - 1) == 0:
                continue
            piece = cost_model.cpu_matmul_column_piece(width)
            _tag(op, next_tag)
            scripts.append(_tile_steps(next_tag, len(c.extents), [("s", {c.n: piece})], ["s"]))
            next_tag += 1
        if not scripts:
            return
        apply_script(module, "\n    ".join(scripts + [_CANONICALIZE]))


def _sequence(body: str) -> str:
    return f"""
module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{
    {body}
    transform.yield
  }}
}}"""


def patterns_script(handle: str, *patterns: str) -> str:
    """A transform sequence's lines applying upstream `patterns` (names after
    `transform.apply_patterns.`) to every func.func, matched into `%handle` (a name of its
    own within the sequence)."""
    lines = "\n".join(f"      transform.apply_patterns.{p}" for p in patterns)
    return (f'%{handle} = transform.structured.match ops{{["func.func"]}} in %root\n'
            f"      : (!transform.any_op) -> !transform.any_op\n"
            f"    transform.apply_patterns to %{handle} {{\n{lines}\n    }} : !transform.any_op")


_CANONICALIZE = patterns_script("all", "canonicalization")

_VECTORIZE = f"""%v = transform.structured.match attributes{{{VECTOR_TAG}}} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.structured.vectorize %v : !transform.any_op
    %funcs = transform.structured.match ops{{["func.func"]}} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %funcs {{
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.transfer_permutation_patterns
    }} : !transform.any_op
    transform.apply_patterns to %funcs {{
      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.lower_outerproduct
    }} : !transform.any_op"""


def apply_script(module: ir.Operation, body: str) -> None:
    """Run a transform-dialect sequence body (`%root` is `module`) on `module`."""
    script = ir.Module.parse(_sequence(body))
    interpreter.apply_named_sequence(module, next(iter(script.body.operations)), script)


def _contractions(module: ir.Operation,
                  tagged: bool = False) -> list[tuple[ir.Operation, Contraction]]:
    """The module's matmul-like generics (only those tagged by the previous phase, untagged
    now, when `tagged`). A tagged op may be a column block's remainder (a convolution's
    196 pixels are six blocks of 32 and 4 more): down to one 4-lane vector wide, it is
    still a microkernel's (4 columns left to scalar loops cost a 14x14 convolution 85% of
    its time)."""
    found = []
    for op in _walk(module, "linalg.generic"):
        if tagged:
            if TAG not in op.attributes:
                continue
            del op.attributes[TAG]
        c = match_contraction(op, REMAINDER_VECTOR if tagged else MIN_VECTOR)
        if c is not None:
            found.append((op, c))
    return found


def _tag(op: ir.Operation, i: int) -> None:
    op.attributes[TAG] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i)


def _to_function_entry(op: ir.Operation) -> None:
    """Move a static alloca to the start of its function: allocated once, not per loop
    iteration (an alloca in a loop grows the stack every iteration)."""
    func = op.parent
    while func is not None and func.name != "func.func":
        func = func.parent
    if func is None:
        return
    entry = func.regions[0].blocks[0]
    op.move_before(next(iter(entry.operations)).operation)


def _all_static(op: ir.Operation) -> bool:
    return all(ir.ShapedType(v.type).has_static_shape for v in op.operands)


def _walk(module: ir.Operation, name: str) -> list[ir.Operation]:
    """The ops named `name` (all ops for "") in and under `module`, innermost first."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == name or not name:
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found


def _defined_outside(value: ir.Value, loop: ir.Operation) -> bool:
    owner = value.owner
    op = owner.owner if isinstance(owner, ir.Block) else owner.operation
    while op is not None:
        if op == loop:
            return False
        op = op.parent
    return True


def _same_values(a: list[ir.Value], b: list[ir.Value]) -> bool:
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


def _hoistable_pair(loop: ir.Operation) -> tuple[ir.Operation, ir.Operation] | None:
    """The accumulator's (transfer_read, transfer_write) pair in a k loop, or None.

    Both on the same buffer value and indices, defined outside the loop; no other op of the
    loop uses that buffer. A and B never alias C: bufferization gave the op's output a
    buffer that its inputs do not overlap."""
    body = loop.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    writes = [o for o in ops if o.name == "vector.transfer_write"]
    if len(loop.results) or len(writes) != 1:
        return None
    write = writes[0]
    base = write.operands[1]
    rank = ir.MemRefType(base.type).rank if isinstance(base.type, ir.MemRefType) else -1
    if len(write.operands) != 2 + rank:
        return None  # a masked write (or a tensor): leave it
    indices = list(write.operands[2:])
    if not _defined_outside(base, loop) or not all(_defined_outside(v, loop) for v in indices):
        return None
    reads = [o for o in ops if o.name == "vector.transfer_read" and o.operands[0] == base
             and len(o.operands) == 2 + rank  # base, indices, padding: no mask
             and _same_values(list(o.operands[1:len(indices) + 1]), indices)
             and o.results[0].type == write.operands[0].type]
    if len(reads) != 1:
        return None
    read = reads[0]
    # Any other use, at any depth (a view, a nested op), may touch the accumulator.
    users = []
    for top in ops:
        users += [u for u in _walk(top, "") if any(v == base for v in u.operands)]
    if len(users) != 2:
        return None
    return read, write


def hoist_accumulator(loop: ir.Operation) -> bool:
    """Carry the accumulator of a k loop in registers: read it before, write it after."""
    pair = _hoistable_pair(loop)
    if pair is None:
        return False
    read, write = pair
    read.move_before(loop)
    lower, upper, step = loop.operands[0], loop.operands[1], loop.operands[2]
    with ir.InsertionPoint(loop), loop.location:
        new_loop = scf.ForOp(lower, upper, step, [read.results[0]])
    old_body = loop.regions[0].blocks[0]
    new_body = new_loop.body
    old_body.arguments[0].replace_all_uses_with(new_body.arguments[0])
    read.results[0].replace_all_uses_except(new_body.arguments[1], new_loop.operation)
    with ir.InsertionPoint(new_body), loop.location:
        new_yield = scf.YieldOp([write.operands[0]])
    for op in [o.operation for o in old_body.operations]:
        if op.name == "scf.yield":
            continue
        op.move_before(new_yield.operation)
    write.move_after(new_loop.operation)
    write.operands[0] = new_loop.results[0]
    loop.erase()
    return True


@register
@dataclass
class CpuMatmulPass(Pass):
    """Tile, vectorize and register-block matmul-like generics in bufferized CPU kernels."""

    ARGUMENT = "fusion-cpu-matmul"
    mr: int = cost_model.CPU_MATMUL_ROWS
    nr: int = 16
    kc: int = -1  # depth block; -1: the cost model's, 0: none

    def run(self, module: ir.Operation) -> None:
        if self.nr % MIN_VECTOR or self.mr < 1:
            raise ValueError(f"fusion-cpu-matmul: nr={self.nr} must be a multiple of "
                             f"{MIN_VECTOR}, mr={self.mr} positive")
        # Columns or depth split over several loops (attention's head split and merge,
        # tiled with the projection) are merged first: one column and one depth loop.
        for op in _walk(module, "linalg.generic"):
            merge_split_dims(op)
        # Phase 1: batch and column blocks.
        scripts = []
        for i, (op, c) in enumerate(_contractions(module)):
            _tag(op, i)
            # A narrower op gets a narrower microkernel rather than none (halved: column
            # blocks stay whole vectors of a power-of-two width).
            nr = self.nr
            while c.extents[c.n] >= 0 and nr > MIN_VECTOR and c.extents[c.n] < nr:
                nr = max(MIN_VECTOR, nr // 2)
            kc = self.kc if self.kc >= 0 else cost_model.cpu_matmul_depth_block(nr)
            scripts.append(_outer_script(i, c, nr, kc))
        if not scripts:
            return
        # Canonicalized, a peeled loop's full tiles have static sizes (the affine.min folds).
        apply_script(module, "\n    ".join(scripts + [_CANONICALIZE]))
        _split_columns(module)
        # Phase 2: each column block's B packed, row blocks, k loop.
        scripts = []
        allocas = {op_key(op) for op in _walk(module, "memref.alloca")}
        for i, (op, c) in enumerate(_contractions(module, tagged=True)):
            _tag(op, i)
            scripts.append(_inner_script(i, c, self.mr, self._packs(op, c)))
        if scripts:
            apply_script(module, "\n    ".join(scripts + [_CANONICALIZE]))
        for op in _walk(module, "memref.alloca"):
            if op_key(op) not in allocas:
                _to_function_entry(op)
        # Phase 3: full tiles vectorized, their accumulators kept in registers.
        vectorized = 0
        for op in _walk(module, "linalg.generic"):
            if TAG in op.attributes:
                if _all_static(op):
                    op.attributes[VECTOR_TAG] = ir.UnitAttr.get()
                    vectorized += 1
                del op.attributes[TAG]
        if not vectorized:
            return
        apply_script(module, _VECTORIZE)
        for loop in _walk(module, "scf.for"):
            hoist_accumulator(loop)

    def _packs(self, op: ir.Operation, c: Contraction) -> bool:
        """Whether a column block's B (K x nr) is copied into a contiguous local buffer.

        B's rows are N floats apart: for N a multiple of 1024 bytes every row of the block
        falls into the same few cache sets and its own page, and the block does not stay
        in cache while the rows of A stream past it. Packed, it is K * nr contiguous
        floats. Worth its copy when several row blocks reuse it, and kept small enough
        for the stack."""
        m, n = c.extents[c.m], c.extents[c.n]
        if any(c.extents[d] < 0 for d in c.ks):
            return False
        k = 1
        for d in c.ks:
            k *= c.extents[d]
        if n < 0 or 4 * k * n > PACK_LIMIT_BYTES:
            return False
        b = op.operands[1]
        # Only a view can be promoted; a B whose rows are already nr floats apart is packed.
        if isinstance(b.owner, ir.Block) or b.owner.name != "memref.subview":
            return False
        strides, _ = ir.MemRefType(b.type).get_strides_and_offset()
        if len(strides) < 2 or strides[-2] == n:
            return False
        return m < 0 or m >= 2 * self.mr
