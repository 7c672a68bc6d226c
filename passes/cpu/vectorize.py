"""--fusion-cpu-vectorize: elementwise and windowed loops vectorized in MLIR, along their
contiguous dim.

What `--fusion-cpu-matmul` leaves (elementwise epilogues, BatchNorm + ReLU, depthwise
convolutions, pooling windows, paddings' copies) becomes scalar loops that LLVM's loop
vectorizer is left to widen. At -O3 LLVM fully unrolls a short inner loop (a 28- or 32-wide
image row) *before* it vectorizes, and then vectorizes the loop around it instead: along
channels, 9 to 900 floats apart, as `vgatherqps`/`vscatterqps` (a 28 x 28 depthwise 3x3 ran
3-4x slower per point than a 56 x 56 one; a LLaMA kernel became 512 unrolled masked scatters
and 0.4 s of `llc`). This pass makes the choice itself: each such `linalg.generic` of a
bufferized CPU kernel is tiled (upstream `structured.tile_using_for`) to one vector of its
innermost loop dim by one element of every other dim, the windows' reduction dims inside the
vector loop, its unit dims dropped (`fold_unit_extent_dims_via_slices`), and the 1-D op left
vectorized (`structured.vectorize`, `lanes` wide, masked where the row is not a whole number
of vectors: one masked load or store per row end, as AVX-512 and AVX2 have).

Transposes (a plain copy whose output's contiguous dim is not its input's: attention's K^T
tile, `x.t()`, a permute moving the last dim) are tiled into squares of 16 x 16 (AVX-512)
or 8 x 8 floats (`transpose_plan`: both extents whole multiples), each read as rows of the
input, transposed in registers (`vector.transpose`, lowered to unpacks and lane shuffles)
and written as rows of the output. LLVM's loop vectorizer gathered them one element per
lane (`vgatherqps`: the copy of K^T was 9% of the CPU attention kernel's time).

Taken: every operand f32; the last loop dim parallel, of static extent at least half a
vector, and read or written only as the last index of an operand (`w` or `w + kw`: unit
stride, the memref's last stride 1); windows of at most MAX_WINDOW points in their reduction
dims; a payload of arith ops and the math ops LLVM has as vector instructions. Left to LLVM
as before: transposes no square block divides, strided windows (stride-2
depthwise), row reductions (the last dim a reduction: LLVM vectorizes those with
`--fusion-reassociate-reductions`), `exp`/`erf`/`tanh` payloads (`--fusion-fast-exp` expands
scalar ones later), matmuls (the microkernel's), ops with index checks (a call in the payload).

Before (a depthwise 3x3's window, loops n, oh, c, kh, kw, ow):
    linalg.generic {indexing_maps = [(n, oh, c, kh, kw, ow) -> (n, c, oh + kh, ow + kw), ...]}
        ins(%in, %w : memref<1x24x30x30xf32, ...>, ...) outs(%acc : memref<1x24x28x28xf32>)
After (lanes = 16): loops n, oh, c, ow step 16, kh, kw around
    %m = vector.create_mask %len : vector<16xi1>
    %x = vector.mask %m { vector.transfer_read %in_row[...] } : vector<16xf32>
    %acc = vector.mask %m { vector.transfer_read %acc_row[...] } ...
    ... arith.mulf, arith.addf on vector<16xf32> ...
    vector.mask %m { vector.transfer_write ... }
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes import attributes
from fusec.passes.cpu.cpu_matmul import _walk as walk
from fusec.passes.cpu.cpu_matmul import apply_script, iterator_kinds, patterns_script
from fusec.passes.registry import Pass, register
from mlir import ir

TAG = attributes.CPU_VECTORIZE
LOOP_TAG = TAG + "_loop"
TRANSPOSE_TAG = TAG + "_transpose"
TRANSPOSE_LOOP_TAG = TAG + "_transpose_loop"
# The most points a window's reduction dims may have (a 7x7 kernel is 49): above, the op is
# a contraction, the matmul microkernel's or LLVM's.
MAX_WINDOW = 64
# Payload ops that have vector forms LLVM lowers to vector instructions (no libm call).
_MATH = {"math.absf", "math.sqrt", "math.fma", "math.floor", "math.ceil", "math.copysign",
         "math.roundeven", "math.trunc", "math.rsqrt"}


def _last_dim_uses(expr: ir.AffineExpr, dim: int) -> tuple[int, bool]:
    """(coefficient of `dim` in `expr`, whether `expr` is a sum of dims and constants with
    every coefficient 1 except possibly `dim`'s)."""
    if isinstance(expr, ir.AffineDimExpr):
        return (1 if expr.position == dim else 0), True
    if isinstance(expr, ir.AffineConstantExpr):
        return 0, True
    if isinstance(expr, ir.AffineAddExpr):
        a, ok_a = _last_dim_uses(expr.lhs, dim)
        b, ok_b = _last_dim_uses(expr.rhs, dim)
        return a + b, ok_a and ok_b
    return 0, False


def _uses_dim(expr: ir.AffineExpr, dim: int) -> bool:
    """Whether loop dim `dim` appears anywhere in `expr`."""
    if isinstance(expr, ir.AffineDimExpr):
        return expr.position == dim
    if isinstance(expr, ir.AffineBinaryExpr):
        return _uses_dim(expr.lhs, dim) or _uses_dim(expr.rhs, dim)
    return False


def plan(op: ir.Operation, lanes: int) -> tuple[list[int], list[int], int] | None:
    """(tile sizes, interchange, position of the vector loop in the tiled nest) for
    vectorizing `op` along its last loop dim, or None."""
    if op.name != "linalg.generic" or len(op.results):
        return None
    for value in op.operands:
        t = value.type
        element = ir.MemRefType(t).element_type if isinstance(t, ir.MemRefType) else t
        if str(element) != "f32":
            return None
    kinds = iterator_kinds(op)
    w = len(kinds) - 1
    if w < 0 or kinds[w] != "parallel":
        return None
    maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
    extents = _static_extents(op, maps)
    if extents is None or extents[w] < max(2, lanes // 2):
        return None
    window = 1
    for d, kind in enumerate(kinds):
        if kind == "reduction":
            window *= extents[d]
    if window > MAX_WINDOW:
        return None
    for value, amap in zip(op.operands, maps):
        results = list(amap.results)
        for i, expr in enumerate(results):
            if not _uses_dim(expr, w):
                continue
            coefficient, ok = _last_dim_uses(expr, w)
            if not ok or coefficient != 1 or i != len(results) - 1:
                return None
        if results and _uses_dim(results[-1], w):
            strides, _ = ir.MemRefType(value.type).get_strides_and_offset()
            if strides[-1] != 1:
                return None
    # The output must be indexed by the vector dim (a broadcast store is no vector store).
    out_map = maps[-1]
    if not out_map.results or not _uses_dim(list(out_map.results)[-1], w):
        return None
    body = op.regions[0].blocks[0]
    for inner in body.operations:
        name = inner.operation.name
        if not (name.startswith("arith.") or name in _MATH or name == "linalg.yield"):
            return None
    sizes = [1] * len(kinds)
    sizes[w] = lanes
    parallel = [d for d, k in enumerate(kinds) if k == "parallel"]
    reduction = [d for d, k in enumerate(kinds) if k == "reduction"]
    return sizes, parallel + reduction, len(parallel) - 1


def transpose_plan(op: ir.Operation, lanes: int) -> tuple[list[int], list[int], int] | None:
    """(tile sizes, interchange, square block) for a copy whose output's contiguous dim is
    not its input's (a transpose: K^T in attention, `x.t()`, a permute that moves the last
    dim), or None. The copy is tiled into `block` x `block` squares (16 on AVX-512, 8 on
    AVX2, both extents whole multiples of it), each read as `block` rows along the input's
    contiguous dim and transposed in registers (`vector.transpose`, lowered to shuffles):
    LLVM, left with the scalar loops, gathers one element per lane (`vgatherqps`)."""
    if op.name != "linalg.generic" or len(op.results) or len(op.operands) != 2:
        return None
    if any(k != "parallel" for k in iterator_kinds(op)):
        return None
    for value in op.operands:
        if not isinstance(value.type, ir.MemRefType) or \
                str(ir.MemRefType(value.type).element_type) != "f32":
            return None
        strides, _ = ir.MemRefType(value.type).get_strides_and_offset()
        if not strides or strides[-1] != 1:
            return None
    body = list(op.regions[0].blocks[0].operations)
    if len(body) != 1 or body[0].operands[0] != op.regions[0].blocks[0].arguments[0]:
        return None  # a plain copy of the input
    maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
    dims = []
    for amap in maps:
        if not amap.is_permutation:
            return None
        dims.append([ir.AffineDimExpr(e).position for e in amap.results])
    a, w = dims[0][-1], dims[1][-1]
    if a == w:
        return None  # the contiguous dims agree: the elementwise plan's (or LLVM's)
    extents = _static_extents(op, maps)
    if extents is None:
        return None
    block = 16 if lanes >= 16 else 8
    while block >= 8 and (extents[a] % block or extents[w] % block):
        block //= 2
    if block < 8 or block > lanes:
        return None
    n = len(extents)
    sizes = [1] * n
    sizes[a] = sizes[w] = block
    outer = [d for d in range(n) if d not in (a, w)]
    return sizes, outer + [a, w], block


def _static_extents(op: ir.Operation, maps: list[ir.AffineMap]) -> list[int] | None:
    """Each loop dim's extent, read off an operand indexed by that dim alone, or None."""
    n = maps[0].n_dims
    extents = [-1] * n
    for value, amap in zip(op.operands, maps):
        if not isinstance(value.type, ir.MemRefType):
            continue
        shape = ir.MemRefType(value.type).shape
        for expr, size in zip(amap.results, shape):
            if isinstance(expr, ir.AffineDimExpr) and size >= 0 and extents[expr.position] < 0:
                extents[expr.position] = size
    return extents if all(e > 0 for e in extents) else None


def _script(i: int, sizes: list[int], interchange: list[int], vector_loop: int,
            loop_tag: str = LOOP_TAG) -> str:
    """Tile op `i`; mark its vector loop (the `vector_loop`-th of the nest, outermost 0),
    which the unit-dim folding leaves as it is, where the op itself is rebuilt untagged."""
    any_op = "!transform.any_op"
    loops = sum(1 for s in sizes if s)
    return (f"%t{i} = transform.structured.match attributes{{{TAG} = {i} : i64}} in %root "
            f": ({any_op}) -> {any_op}\n"
            f"    %t{i}_tiled, %t{i}_loops:{loops} = transform.structured.tile_using_for "
            f"%t{i} tile_sizes {sizes} interchange = {interchange} "
            f": ({any_op}) -> ({', '.join([any_op] * (loops + 1))})\n"
            f'    transform.annotate %t{i}_loops#{vector_loop} "{loop_tag}" : {any_op}')


_FOLD_UNIT_DIMS = patterns_script("funcs", "linalg.fold_unit_extent_dims_via_slices")
_TRANSFER_PATTERNS = patterns_script("vfuncs", "vector.transfer_permutation_patterns")
# A transposed read becomes a read of rows and a vector.transpose; 16x16 and 8x8 blocks
# are lowered to shuffles within and across lanes (unpack, then permutes), not to one
# extract and insert per element.
_TRANSPOSE_PATTERNS = patterns_script(
    "tfuncs", "vector.transfer_permutation_patterns",
    'vector.lower_transpose lowering_strategy = "shuffle_16x16" avx2_lowering_strategy = true')


@register
@dataclass
class CpuVectorizePass(Pass):
    """Vectorize elementwise and windowed generics of CPU kernels along their last dim."""

    ARGUMENT = "fusion-cpu-vectorize"
    lanes: int = 16

    def run(self, module: ir.Operation) -> None:
        if self.lanes < 2 or self.lanes & (self.lanes - 1):
            raise ValueError(f"fusion-cpu-vectorize: lanes={self.lanes} must be a power of "
                             "two, at least 2")
        scripts = []
        blocks: set[int] = set()  # the transposes' square block sizes
        for op in walk(module, "linalg.generic"):
            choice = plan(op, self.lanes)
            transpose = None if choice is not None else transpose_plan(op, self.lanes)
            if choice is None and transpose is None:
                continue
            i = len(scripts)
            op.attributes[TAG] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i)
            if choice is not None:
                scripts.append(_script(i, *choice))
            else:
                sizes, interchange, block = transpose
                blocks.add(block)
                scripts.append(_script(i, sizes, interchange, len(sizes) - 1,
                                       f"{TRANSPOSE_LOOP_TAG}{block}"))
        if not scripts:
            return
        apply_script(module, "\n    ".join(scripts + [_FOLD_UNIT_DIMS]))
        vectorize = (f"%v = transform.structured.match attributes{{{TAG}}} in %root "
                     ": (!transform.any_op) -> !transform.any_op\n"
                     f"    transform.structured.vectorize %v vector_sizes [{self.lanes}] "
                     ": !transform.any_op\n"
                     # A broadcast read (a scalar operand) as a read and a vector.broadcast:
                     # LLVM's lowering takes minor-identity transfers only.
                     f"    {_TRANSFER_PATTERNS}")
        # Each vector loop holds its op's tile, left 1-D by the folding (else not taken).
        tagged = 0
        for loop in walk(module, "scf.for"):
            if LOOP_TAG not in loop.attributes:
                continue
            del loop.attributes[LOOP_TAG]
            inner = walk(loop, "linalg.generic")
            if len(inner) == 1 and len(iterator_kinds(inner[0])) == 1:
                inner[0].attributes[TAG] = ir.UnitAttr.get()
                tagged += 1
        if tagged:
            apply_script(module, vectorize)
        self._transposes(module, sorted(blocks))
        for op in walk(module, "linalg.generic"):
            if TAG in op.attributes:
                del op.attributes[TAG]

    def _transposes(self, module: ir.Operation, blocks: list[int]) -> None:
        """Vectorize the transposes' squares (each tiled to one block x block square in its
        innermost loop) as reads of rows and in-register transposes."""
        scripts = []
        for block in blocks:
            tag = f"{TRANSPOSE_TAG}{block}"
            found = False
            for loop in walk(module, "scf.for"):
                if f"{TRANSPOSE_LOOP_TAG}{block}" not in loop.attributes:
                    continue
                del loop.attributes[f"{TRANSPOSE_LOOP_TAG}{block}"]
                inner = walk(loop, "linalg.generic")
                if len(inner) == 1 and len(iterator_kinds(inner[0])) == 2:
                    inner[0].attributes[tag] = ir.UnitAttr.get()
                    found = True
            if found:
                scripts.append(
                    f"%x{block} = transform.structured.match attributes{{{tag}}} in %root "
                    ": (!transform.any_op) -> !transform.any_op\n"
                    f"    transform.structured.vectorize %x{block} vector_sizes [{block}, "
                    f"{block}] : !transform.any_op")
        if scripts:
            apply_script(module, "\n    ".join(scripts + [_TRANSPOSE_PATTERNS]))
