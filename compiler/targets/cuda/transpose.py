"""CUDA target: the data-movement family's transposing shapes (see movement.py).

When the inputs' contiguous dim is another output dim p (a 2-D transpose, K^T's (0, 2, 3,
1)), each block moves a square of (p, l) (the cost model's `transpose_tile_shape`): phase 1
reads vectors along p and keeps them in shared memory (the chunks XOR-swizzled by row, so
neither phase has bank conflicts), one barrier, phase 2 reads the square's columns in
vectors along l and writes along l.

- `emit_transpose`: the outputs are evaluated in phase 1 and kept in the squares.
- `emit_staged_transpose`: for inputs that disagree on the contiguous dim (`x.t() + y`: x
  contiguous along p, y along l), the squares keep the *reads* contiguous along p; the
  outputs are evaluated in phase 2, the other inputs read along l there. A read is named by
  the path of values from the output to it (`MovementEmitter.path`), the same in both
  phases as long as evaluation never branches per lane (`staged_refusal`).

`TransposeShapes` is a mixin of `MovementEmitter`: its methods use the emitter's evaluator
(`at`, `load`), index arithmetic and output stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import iterators, numel_of, reports_failed_check, \
    tensor_info
from fusec.compiler.targets.cuda.device import (
    ELEMENT_BYTES,
    MEMORY_ELEMENT,
    PAYLOAD_DIALECTS,
    STATIC_SHARED_BYTES,
    CudaCodegenError,
)
from fusec.compiler.targets.cuda.emitter import Input
from fusec.compiler.targets.cuda.lanes import Ix
from fusec.passes import cost_model


class TransposeShapes:
    """The transposing shapes of `MovementEmitter` (a mixin: see the module docstring)."""

    def staged_load(self, inp: Input, lin: Ix) -> list[str] | None:
        """A read in the staged transpose (None: read it from memory as usual). Phase 1
        (lanes along p): a read contiguous along p is made and recorded for shared memory;
        one that is not is phase 2's (zeros stand in: what phase 1 computes from them is
        never stored). Phase 2 (lanes along l): a read phase 1 recorded comes from its
        square."""
        leaf = tuple(self.path)
        if self.phase == 2:
            if leaf not in self.squares:
                return None
            smem, smem_type, elt = self.squares[leaf]
            row, col = self.square_at
            vec = self.fresh("w")
            self.emit(f"{vec} = vector.load {smem}[{row}, {col}] : {smem_type}, "
                      f"vector<{self.V}x{elt}>")
            return self.vector_lanes(vec, self.V, elt, "w")
        if lin.step == 0 and not lin.names:
            return None  # one value for all lanes: as cheap in either phase
        if lin.names or lin.step != 1:
            zero = "0.0" if inp.type.startswith(("f", "bf")) else "0"
            return [self.const(zero, inp.type)] * self.V
        if inp.type in MEMORY_ELEMENT:
            raise CudaCodegenError("a staged transpose of bools")
        self.phase = 0
        try:
            lanes = self.load(inp, [inp.numel], [lin])
        finally:
            self.phase = 1
        self.recorded.append((leaf, lanes, inp.type))
        return lanes

    def square(self, eb: int, squares: int) -> "_Square":
        """The transpose shape's geometry: the cost model's square for `squares` squares of
        `eb`-byte elements in static shared memory, this block's corner (p0, l0) and its
        coordinates along the other dims."""
        out = self.out_shape
        p_dim, l_dim = self.mode.p, lanes_dim(out)
        others = [d for d in range(len(out)) if d not in (p_dim, l_dim)]
        P, L = out[p_dim], out[l_dim]
        shape = cost_model.transpose_tile_shape(P, L, numel_of([out[d] for d in others]), eb,
                                                self.device,
                                                STATIC_SHARED_BYTES // max(1, squares))
        self.shape = shape
        t = shape.tile
        coords = self.delinearize(Ix("%bid", 0, 1), [out[d] for d in others] +
                                  [-(-P // t), -(-L // t)])
        return _Square(shape, p_dim, l_dim, P, L, dict(zip(others, coords[:-2])),
                       self.ix_mul(coords[-2], t).name, self.ix_mul(coords[-1], t).name)

    def swizzled(self, sq: "_Square", row: str, chunk: str) -> str:
        """Chunk `chunk` of a square's row `row`, XOR-swizzled by row (no bank conflicts in
        either phase)."""
        nch = sq.shape.tile // sq.shape.vec_l
        key = self.arith("remui", self.arith("divui", row, self.index(sq.shape.vec_p)),
                         self.index(nch))
        return self.arith("xori", chunk, key)

    def phase1_points(self, sq: "_Square") -> tuple[str, list[tuple[str, list[Ix]]]]:
        """Phase 1's positions: this thread's chunk along p (`pc`) and, per pass, its row of
        the square along l and the output index there (lanes along p; clamped in bounds)."""
        t, vp, block = sq.shape.tile, sq.shape.vec_p, sq.shape.block
        chunks_p = t // vp
        rows1 = block // chunks_p
        pc = self.arith("remui", "%tid", self.index(chunks_p))
        lr0 = self.arith("divui", "%tid", self.index(chunks_p))
        points = []
        for j in range(max(1, t // rows1)):
            lr = lr0 if j == 0 else self.arith("addi", lr0, self.index(j * rows1))
            p = self.arith("addi", sq.p0, self.arith("muli", pc, self.index(vp)))
            p = self.arith("minui", p, self.index(sq.P - vp))
            l_ = self.arith("minui", self.arith("addi", sq.l0, lr), self.index(sq.L - 1))
            idx = [sq.other_ix.get(d) for d in range(len(self.out_shape))]
            idx[sq.p_dim] = Ix(p, 1, vp)
            idx[sq.l_dim] = Ix(l_, 0, 1)
            points.append((lr, idx))
        return pc, points

    def store_square(self, sq: "_Square", pc: str, lr: str, square: tuple, lanes: list[str]):
        """Phase 1's lanes (along p, at row `lr` along l) into `square`'s rows p."""
        vl = sq.shape.vec_l
        smem, smem_type = square[:2]
        chunk = self.arith("divui", lr, self.index(vl))
        within = self.arith("remui", lr, self.index(vl))
        for k in range(sq.shape.vec_p):
            row = self.arith("addi", self.arith("muli", pc, self.index(sq.shape.vec_p)),
                             self.index(k))
            col = self.arith("addi", self.arith("muli", self.swizzled(sq, row, chunk),
                                                self.index(vl)), within)
            self.emit(f"memref.store {lanes[k]}, {smem}[{row}, {col}] : {smem_type}")

    def phase2_points(self, sq: "_Square") -> list[tuple[str, str, str, list[Ix]]]:
        """Phase 2's positions per pass: the square's row `pr`, the column of this thread's
        vector there (swizzled), whether the output position is in bounds, and the output
        index (lanes along l)."""
        t, vl, block = sq.shape.tile, sq.shape.vec_l, sq.shape.block
        chunks_l = t // vl
        rows2 = block // chunks_l
        lc = self.arith("remui", "%tid", self.index(chunks_l))
        pr0 = self.arith("divui", "%tid", self.index(chunks_l))
        points = []
        for j in range(max(1, t // rows2)):
            pr = pr0 if j == 0 else self.arith("addi", pr0, self.index(j * rows2))
            col = self.arith("muli", self.swizzled(sq, pr, lc), self.index(vl))
            p = self.arith("addi", sq.p0, pr)
            l_ = self.arith("addi", sq.l0, self.arith("muli", lc, self.index(vl)))
            ok = self.arith("andi", self.arith("cmpi ult,", p, self.index(sq.P)),
                            self.arith("cmpi ult,", l_, self.index(sq.L)), "i1")
            idx = [sq.other_ix.get(d) for d in range(len(self.out_shape))]
            idx[sq.p_dim], idx[sq.l_dim] = Ix(p, 0, 1), Ix(l_, 1, vl)
            points.append((pr, col, ok, idx))
        return points

    def emit_transpose(self) -> tuple[int, int]:
        elts = [tensor_info(v.type)[1] for v in self.outputs]
        if any(e in MEMORY_ELEMENT for e in elts):
            raise CudaCodegenError("a transposing kernel of bools")
        sq = self.square(self.eb, len(elts))
        if len(elts) * sq.shape.shared_bytes > STATIC_SHARED_BYTES:
            raise CudaCodegenError(f"{len(elts)} outputs' squares exceed static shared memory")
        t, vp, vl = sq.shape.tile, sq.shape.vec_p, sq.shape.vec_l
        squares = []  # one square of shared memory per output
        for i, elt in enumerate(elts):
            squares.append((f"%tile_smem{i}",
                            f"memref<{t}x{t}x{elt}, #gpu.address_space<workgroup>>", elt))
            self.workgroup.append(squares[-1][:2])
        # Phase 1: read along p (vectors of vp), write the square's rows p into shared memory.
        self.V = vp
        pc, points = self.phase1_points(sq)
        pending = [(lr, [self.at(v, idx) for v in self.outputs]) for lr, idx in points]
        for lr, values in pending:
            for square, lanes in zip(squares, values):
                self.store_square(sq, pc, lr, square, lanes)
        self.emit("gpu.barrier")
        # Phase 2: read the square's columns l in vectors of vl, write along l.
        for pr, col, ok, idx in self.phase2_points(sq):
            read = []
            for smem, smem_type, elt in squares:
                vec = self.fresh("w")
                self.emit(f"{vec} = vector.load {smem}[{pr}, {col}] : {smem_type}, "
                          f"vector<{vl}x{elt}>")
                read.append(self.vector_lanes(vec, vl, elt, "w"))
            self.emit(f"scf.if {ok} {{")
            self.indent += 1
            self.V = 1
            off = self.linearize(idx, self.out_shape)
            for i, lanes in enumerate(read):
                self.store_lanes(self.num_inputs + i, off.name, lanes)
            self.indent -= 1
            self.emit("}")
        return sq.shape.block, sq.shape.grid

    def emit_staged_transpose(self) -> tuple[int, int]:
        """The transpose shape for a group whose inputs disagree on the contiguous dim
        (`x.t() + y`): each input read in the phase that suits it. Phase 1 (lanes along p)
        evaluates the outputs only to reach their reads: those contiguous along p are made
        and kept in shared memory, one square per read (XOR-swizzled, as `emit_transpose`'s);
        after one barrier, phase 2 (lanes along l) evaluates the outputs for real, the kept
        reads from their squares, the others (contiguous along l) from memory, and stores
        along l. Only groups whose evaluation never branches per lane (`staged_refusal`)."""
        refusal = staged_refusal(self.group)
        if refusal:
            raise CudaCodegenError(refusal)
        inputs = [t for _, t in self.arg_types[:self.num_inputs]]
        reads = max(1, self.num_inputs)
        sq = self.square(max([self.eb] + [ELEMENT_BYTES.get(e, 4) for e in inputs]), reads)
        t, vp, vl = sq.shape.tile, sq.shape.vec_p, sq.shape.vec_l
        # Phase 1: the reads along p, into their squares (rows p, columns l).
        self.phase, self.V = 1, vp
        pc, points = self.phase1_points(sq)
        pending = []
        for lr, idx in points:
            self.recorded = []
            self.memo.append({})
            for v in self.outputs:
                self.at(v, idx)
            self.memo.pop()
            pending.append((lr, self.recorded))
        if not any(recorded for _, recorded in pending):
            raise CudaCodegenError("no read is contiguous along the transposed dim")
        for lr, recorded in pending:
            for leaf, lanes, elt in recorded:
                if leaf not in self.squares:
                    if len(self.squares) == reads:
                        raise CudaCodegenError("more staged reads than squares budgeted")
                    smem = f"%stage_smem{len(self.squares)}"
                    smem_type = f"memref<{t}x{t}x{elt}, #gpu.address_space<workgroup>>"
                    self.workgroup.append((smem, smem_type))
                    self.squares[leaf] = (smem, smem_type, elt)
                self.store_square(sq, pc, lr, self.squares[leaf], lanes)
        self.emit("gpu.barrier")
        # Phase 2: the outputs along l, in bounds only (the squares' rows past P and the
        # columns past L hold clamped reads).
        self.phase, self.V = 2, vl
        for pr, col, ok, idx in self.phase2_points(sq):
            self.emit(f"scf.if {ok} {{")
            self.indent += 1
            self.memo.append({})
            self.square_at = (pr, col)
            values = [self.at(v, idx) for v in self.outputs]
            off = self.linearize(idx, self.out_shape)
            for i, lanes in enumerate(values):
                self.store_lanes(self.num_inputs + i, off.name, lanes)
            self.memo.pop()
            self.indent -= 1
            self.emit("}")
        self.phase = 0
        return sq.shape.block, sq.shape.grid


def lanes_dim(shape: list[int]) -> int:
    """The output dim a transposing kernel writes along: the last that is not 1 (the
    dims after it are unit, so it is contiguous). An im2col of a 1x1 convolution,
    [n, oh, ow, c, 1, 1], is written along c; squares along its last dim (1) were all
    but empty: 14,336 blocks for a 400 KB transpose in ResNet-50, 60 us."""
    return next((d for d in reversed(range(len(shape))) if shape[d] != 1), len(shape) - 1)


@dataclass
class _Square:
    """A transposing kernel's square: its shape, the output dims p (read contiguously) and l
    (the last), their extents, this block's coordinates along the other dims and its corner
    (p0, l0: SSA names)."""

    shape: Any
    p_dim: int
    l_dim: int
    P: int
    L: int
    other_ix: dict
    p0: str
    l0: str


# What a staged transpose evaluates: ops whose evaluation never branches per lane, so that
# both phases walk the same reads (`MovementEmitter.path` names each).
STAGED_OPS = frozenset({"linalg.generic", "linalg.fill", "linalg.transpose", "linalg.broadcast",
                        "linalg.copy", "tensor.expand_shape", "tensor.collapse_shape",
                        "tensor.extract_slice", "tensor.empty", "arith.constant"})


def staged_refusal(group: ir.Operation) -> str | None:
    """Why a staged transpose does not take `group` (None: it does): a concat, pad, insert,
    window or reduction (they branch or fold per lane), a payload reading `linalg.index` or
    `tensor.extract` (a gather: its index is data), a check to report."""
    for op in group.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "fusion.yield" or op.name.startswith(PAYLOAD_DIALECTS):
            continue
        if op.name not in STAGED_OPS:
            return f"'{op.name}' in a staged transpose"
        if op.name == "linalg.generic":
            if any(k != "parallel" for k in iterators(op)):
                return "a reduction in a staged transpose"
            for inner in op.regions[0].blocks[0].operations:
                if inner.operation.name in ("linalg.index", "tensor.extract") or \
                        reports_failed_check(inner.operation, deferred=True):
                    return "a gather or a check in a staged transpose"
    return None
