"""CUDA target: the attention kernel family (FlashAttention's online softmax) for sm_90a.

An attention group (`--fusion-attention`, kind `attention`, `fusion.path = "attention"`)
is one kernel: each CTA (a warpgroup of 128 threads per 64 query rows) takes BM query rows
of one (batch, head) and streams the keys and values through shared memory in tiles of BN
(`cost_model.attention_tile`); the warpgroups of a CTA share each K/V tile:

    thread 0: TMA Q (once), K and V tiles 0..STAGES-1 (each its own mbarrier)
    m = -inf, l = 0, O = 0                          (per row, in registers; O f32)
    S_0 = Q K_0^T;  thread 0: K_STAGES into K_0's stage
    for j < key tiles (or the causal bound):
        [two or more warpgroups: wait for this warpgroup's turn]
        issue S_j+1 = Q K_j+1^T       (wgmma m64nBNk16 from shared memory, f32)
        issue O += P_j-1 V_j-1        (wgmma m64nDk16, A = P_j-1 in registers or in shared
                                       memory, B = V read N-major; at j = 0 a P of zeros)
                                      both run on the tensor cores while this tile's
                                      softmax runs (FlashAttention-3's intra-warpgroup
                                      overlap)
        [pass the turn to the next warpgroup: its MMAs follow while this one's softmax
         runs (FlashAttention-3's ping-pong)]
        X = score(S_j)                (the group's own score ops, per element, with the
                                       row / key index: scale, casts, masks; keys past
                                       the end are -inf; in f32 throughout: the graph's
                                       16-bit roundings between them are skipped, as
                                       FlashAttention never rounds S)
        m' = max(m, rowmax X);  P_j = exp2((X - m') log2 e);  l = l e^(m - m') + rowsum P_j
        P_j -> registers              (16-bit pairs: the scores' fragment is the next
                                       MMA's A fragment), or where the thread's fragments
                                       would not fit (`cost_model.attention_p_in_registers`)
                                       P buffer j % 2 (the 128-byte swizzle wgmma reads)
        wait for both MMAs;  O *= e^(m - m')
        thread 0: K_j+1+STAGES into K_j+1's stage (a whole step before it is read),
                  V_j-1+STAGES into V_j-1's
    O += P_last V_last

Where S_j+1 would not fit the registers beside S_j, O and P_j-1
(`cost_model.attention_scores_ahead`: two warpgroups at head dim 128), step j issues S_j
itself and P_j-1 V_j-1, waits for S_j alone (`wait_group 1`) and releases K_j's stage before
the softmax (FlashAttention-3's order: the softmax overlaps P_j-1 V_j-1 and the other
warpgroup's MMAs); there is no S_0 before the loop. Either way S, X and P never reach
memory, and there are no temporaries. P V with A in registers is not in MLIR's
`nvvm.wgmma.mma_async` (A from shared memory only): it is that instruction as inline PTX
(`wgmma_rs`). The scores' fragment is read in registers (`nvvm.wgmma.mma_async` on an
`!llvm.struct` of f32, the accumulator layout of PTX's wgmma: thread t of warp w holds rows
16 w + t / 4 (+ 8) and columns 8 c + 2 (t % 4) (+ 1)); the row statistics are combined over
the four threads of a row with two shuffles. The score ops are evaluated by the
data-movement family's evaluator (`MovementEmitter.at`), two consecutive keys at a time (one
at a time for an odd key count), with the scores bound to the fragment's values: whatever
elementwise ops the graph has there (a causal `where` from indices, an additive mask read
from memory, a scale, torch's casts) run as they are. A mask that is a function of (row,
key) only is classified at compile time (`causal_bound`): where every key past row + c is
masked, each block stops at its diagonal tile, and the blocks with the most key tiles start
first. Where the mask also changes nothing below the diagonal (`interior_point`: no window,
no position bias), the key tiles wholly below it evaluate the chain at one point (its index
compares fold away) or, where the chain is then S times a constant (`interior_scale`), not
at all: the constant folds into exp2 as for an unmasked scale, and only the diagonal tiles
run the mask.

A fully masked row has l = 0 and gives 0 / 0 = NaN, as the unfused softmax does; torch's
SDPA with a mask says 0 there (`where(rowmax == -inf, 0, P)`, `masked_rows = "zero"`), and
so does the kernel then.

Q, K and V are read through tensor maps of up to rank 5 (head_dim, rows, then the batch and
head factors of their strided views: `operand_views`; 128-byte swizzle, one 64-column box
per 64 of head_dim), so rows past the end of a head read zeros and GQA's repeated heads
(stride-0 factors) are read where they are; O is stored two columns at a time through the
view the ops after it give (`_output_view`: a head merge), any mask operand through plain
pointers. `absorb_attention_layouts` (a tiled-stage rewrite) merges the layout groups around
the attention group into it so that these views reach the model's own buffers.
"""

from __future__ import annotations

from typing import Any, Callable

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import tensor_info, value_key
from fusec.compiler.targets.cuda.device import ELEMENT_BYTES, H200, CudaDevice
from fusec.compiler.targets.cuda.emitter import KernelEmitter
from fusec.compiler.targets.cuda.movement import Ix, MovementEmitter, Stats, _Mode
from fusec.compiler.targets.cuda.attention_layouts import (
    HEAD_DIMS,
    INPUTS,
    Factors,
    MatrixView,
    match_in,
    operand_views,
    output_view,
)
from fusec.compiler.targets.cuda.choose_tiles import recorded_tile, tuning_info
from fusec.compiler.targets.cuda.wgmma import GRID_CONSTANT_MAPS, WARPGROUP, map_entry
from fusec.compiler.targets.cuda.wgmma import accumulator_struct, descriptor_base
from fusec.passes import attributes, cost_model
from fusec.passes.fusion.attention import computed_scale
from fusec.passes.fusion.attention_mask import causal_bound, interior_point, interior_scale
from fusec.runtime.plan import Launch
TENSOR_MAP_TYPES = {"bf16": 9, "f16": 6}
SWIZZLE_128B = 3
LOG2E = 1.4426950408889634
# A producer warpgroup after the consumer warpgroups (FlashAttention-3's warp
# specialisation): its first thread issues every K / V load as soon as the consumers release
# the stage (an "empty" mbarrier per stage, one arrival per consumer warp), so that the
# consumer warpgroups never wait for each other: no block-wide barrier per key tile (each
# warpgroup syncs its own 128 threads for its P tile). The producer gives its registers to
# the consumers (setmaxnreg). Off: thread 0 issues the loads after a block-wide barrier per
# key tile.
PRODUCER_WARPGROUP = True
PRODUCER_REGISTERS = 24  # setmaxnreg's floor
# Persistent, the producer also walks the CTA's blocks (their coordinates, Q's loads, the
# ring's position): ptxas spilled 32-60 bytes at 24 registers, 12 at 40 (GPT-2's heads).
PERSISTENT_PRODUCER_REGISTERS = 48
# The persistent kernel's CTAs: None, one per SM slot (SMs x CTAs an SM); a number (the
# fuzzer's few), so that each CTA runs many blocks.
PERSISTENT_SLOTS: int | None = None
# The producer warpgroup for one consumer warpgroup too (two such CTAs per SM, each launched
# with 128 registers a thread and the consumer raised to 232). H100 run 185, A/B twice:
# D64 S4096 1.29 -> 1.24 ms, GPT-2's T1024 0.0625 -> 0.0608, D128 S1024 0.170 -> 0.155,
# causal S1024 0.112 -> 0.105, decode unchanged.
PRODUCER_ONE_WARPGROUP = True
# Consumer warpgroups take turns to issue their MMAs (FlashAttention-3's ping-pong; see
# `build`), where P is in registers ("always": with P in shared memory too). False: each
# issues as soon as its data is in. Run 222 (H100), two warpgroups at head dim 64 with P in
# registers: S4096 1.519 -> 1.385 ms with the turns.
WARPGROUP_PINGPONG: bool | str = True
# How far (in log2 units) a row's max may pass the reference its P is taken against before
# the reference moves and O is rescaled: P stays at most 2^8.
RESCALE_LOG2 = 8.0
WS = "#gpu.address_space<workgroup>"


def refusal(params: dict) -> str | None:
    """Why this family cannot build an attention with `params` (`fusion.attention`)."""
    if params.get("dtype") not in INPUTS:
        return f"attention on {params.get('dtype')} (our kernel takes bf16, f16)"
    if params.get("head_dim") not in HEAD_DIMS or params.get("v_dim") != params.get("head_dim"):
        return (f"head_dim {params.get('head_dim')}, v_dim {params.get('v_dim')} (our kernel "
                f"takes equal head dims of 64 or 128)")
    return None


class AttentionEmitter(MovementEmitter):
    """One attention group's kernel (see the module docstring)."""

    def __init__(self, group: ir.Operation, symbol: str, constants: list[ir.Operation] = (),
                 device: CudaDevice = H200) -> None:
        KernelEmitter.__init__(self, group, symbol, None, constants)
        self.device = device
        self.mode = _Mode("direct")
        self.stats = Stats()
        self.memo = [{}]
        self.V = 2
        self.m = match_in(group)
        self.views, self.ops = operand_views(group, self.m)
        o = self.ops
        el = o.el
        self.out_view = output_view(group, self.m)
        recorded = recorded_tile(group)
        self.tile = cost_model.AttentionTile(recorded[0], recorded[1], recorded[2], o.d) \
            if recorded else cost_model.attention_tile(
                o.d, ELEMENT_BYTES[el], device, o.m, o.n,
                causal_bound(self.m, o.m, o.n) is not None)
        self.s_key = value_key(self.m.qk.results[0])
        self.bound: list[str] | None = None
        # A 16-bit rounding of an f32 score lane -> the lane before it (`eval_payload_op`).
        self.unrounded: dict[str, str] = {}

    # The scores are the fragment's values: the chain reads S elementwise (identity maps
    # through reshapes), so whatever index it asks at is the current element's.
    def at(self, value: ir.Value, idx: list[Ix]) -> list[str]:
        if value_key(value) == self.s_key:
            return self.bound
        return super().at(value, idx)

    # The scores stay f32 from the accumulator to the softmax, as FlashAttention and cuDNN's
    # SDPA keep them: where the graph rounds a score to 16 bits between two of its ops (the
    # matmul's bf16 result, a scale computed in bf16: each op widened to f32 and rounded
    # where it yields), the next op's widening takes the f32 value before the rounding. The
    # scores are then nearer float64 than the unfused graph's, never farther, and the
    # softmax's path loses three conversions and a 16-bit multiply per score.
    def eval_payload_op(self, inner: ir.Operation, dom: list[Ix], get: Any) -> list[Any]:
        if inner.name == "arith.extf" and str(inner.results[0].type) == "f32":
            lanes = get(inner.operands[0])
            if isinstance(lanes, list) and lanes and all(v in self.unrounded for v in lanes):
                return [[self.unrounded[v] for v in lanes]]
        out = super().eval_payload_op(inner, dom, get)
        if inner.name == "arith.truncf" and str(inner.operands[0].type) == "f32":
            source = get(inner.operands[0])
            if isinstance(source, list) and len(source) == len(out[0]):
                self.unrounded.update(zip(out[0], source))
        return out

    # -- small emitters

    def f32(self, value: float) -> str:
        return self.const(repr(float(value)) if value == value and abs(value) != float("inf")
                          else ("0xFF800000" if value < 0 else "0x7F800000"), "f32")

    def fop(self, op: str, *args: str, type_: str = "f32") -> str:
        name = self.fresh("f")
        self.emit(f"{name} = {op} {', '.join(args)} : {type_}")
        return name

    def extract(self, struct: str, i: int, n: int) -> str:
        name = self.fresh("e")
        self.emit(f"{name} = llvm.extractvalue {struct}[{i}] : {accumulator_struct(n)}")
        return name

    def insert(self, struct: str, value: str, i: int, n: int) -> str:
        name = self.fresh("o")
        self.emit(f"{name} = llvm.insertvalue {value}, {struct}[{i}] : {accumulator_struct(n)}")
        return name

    def zeros(self, n: int) -> str:
        s = self.fresh("z")
        self.emit(f"{s} = llvm.mlir.undef : {accumulator_struct(n)}")
        zero = self.f32(0.0)
        for i in range(n):
            s = self.insert(s, zero, i, n)
        return s

    def i64(self, value: int) -> str:
        return self.const(value, "i64")

    def smem_address(self, offset: int) -> str:
        """The shared-memory byte address (i64) of dynamic shared memory + `offset`."""
        return self.arith("addi", self.smem_base, self.i64(offset), "i64")

    def descriptor(self, address: str, lbo: int) -> str:
        """A wgmma matrix descriptor for the tile at shared `address` (i64 bytes)."""
        start = self.arith("andi", self.arith("shrui", address, self.i64(4), "i64"),
                           self.i64(0x3FFF), "i64")
        return self.arith("ori", start, self.i64(descriptor_base(lbo)), "i64")

    def wgmma_rs(self, acc: str, n_acc: int, a: list[str], b_desc: str, n: int,
                 el: str) -> str:
        """acc += A B, one m64nNk16 wgmma with A in registers (`a`: the thread's four words
        of 16-bit pairs, PTX's A fragment: rows 16 w + t / 4 (+ 8), columns 2 (t % 4) (+ 8))
        and B (N-major, transposed) through `b_desc`; issued, not committed. MLIR's
        `nvvm.wgmma.mma_async` reads A from shared memory only: this is its instruction with
        register A, as inline PTX."""
        values = [self.extract(acc, i, n_acc) for i in range(n_acc)]
        outs = ", ".join(f"${i}" for i in range(n_acc))
        ins = ", ".join(f"${2 * n_acc + i}" for i in range(4))
        ptx = (f"{{ .reg .pred p; setp.ne.b32 p, 1, 0; wgmma.mma_async.sync.aligned."
               f"m64n{n}k16.f32.{el}.{el} {{{outs}}}, {{{ins}}}, ${2 * n_acc + 4}, p, 1, 1, 1; }}")
        constraints = ",".join(["=f"] * n_acc + [str(i) for i in range(n_acc)] + ["r"] * 4
                               + ["l"])
        out = self.fresh("acc")
        types = ", ".join(["f32"] * n_acc + ["i32"] * 4 + ["i64"])
        self.emit(f"{out} = llvm.inline_asm has_side_effects asm_dialect = att \"{ptx}\", "
                  f"\"{constraints}\" {', '.join(values + list(a) + [b_desc])} : ({types}) -> "
                  f"{accumulator_struct(n_acc)}")
        return out

    def pack_p(self, lo: str, hi: str, el: str) -> str:
        """Two f32 probabilities as one word of 16-bit values (`lo` in the low half): one
        cvt.rn.{el}x2.f32."""
        pair = self.fresh("pp")
        self.emit(f"{pair} = vector.from_elements {lo}, {hi} : vector<2xf32>")
        narrow = self.fop("arith.truncf", pair, type_=f"vector<2xf32> to vector<2x{el}>")
        word = self.fresh("pw")
        self.emit(f"{word} = llvm.bitcast {narrow} : vector<2x{el}> to i32")
        return word

    def exp2(self, x: str) -> str:
        """2^x flushing subnormal results to 0: one MUFU.EX2 (math.exp2 lowers to PTX's
        ex2.approx.f32, which scales around it to keep subnormals: four instructions). A P
        under 2^-126 of its row's max is 0 either way at 16 bits."""
        name = self.fresh("x2")
        self.emit(f'{name} = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"({x}) : (f32) -> f32')
        return name

    def tree(self, values: list[str], combine: str) -> str:
        """`values` combined pairwise (a dependence chain of log2 n, not n: the warp
        scheduler has two warps to hide latency with)."""
        while len(values) > 1:
            pairs = [self.fop(combine, a, b) for a, b in zip(values[::2], values[1::2])]
            values = pairs + ([values[-1]] if len(values) % 2 else [])
        return values[0]

    def shuffle_xor(self, value: str, mask: int, combine: str) -> str:
        other = self.fresh("sh")
        ok = self.fresh("ok")
        self.emit(f"{other}, {ok} = gpu.shuffle xor {value}, {self.const(mask, 'i32')}, "
                  f"{self.const(32, 'i32')} : f32")
        return self.fop(combine, value, other)

    # -- the kernel

    def build(self) -> str:
        o, t = self.ops, self.tile
        self.prologue: list[str] = []
        eb = ELEMENT_BYTES[o.el]
        d_boxes = o.d // 64
        q_bytes = t.bm * o.d * eb
        kv_bytes = t.bn * o.d * eb  # one K (or V) tile
        q_off = 0
        k_off = [q_bytes + s * 2 * kv_bytes for s in range(t.stages)]
        v_off = [k + kv_bytes for k in k_off]
        p_regs = cost_model.attention_p_in_registers(t)
        p_bytes = 0 if p_regs else t.bm * t.bn * eb
        p_off = [q_bytes + t.stages * 2 * kv_bytes + b * p_bytes for b in range(2)]
        self.shared = p_off[1] + p_bytes
        assert self.shared == t.shared_bytes(eb)
        m_tiles = -(-o.m // t.bm)
        n_tiles = -(-o.n // t.bn)
        stages = min(t.stages, n_tiles)
        self.grid = o.batch * m_tiles
        consumers = WARPGROUP * (t.bm // 64)  # a warpgroup per 64 query rows
        producer = PRODUCER_WARPGROUP and (consumers >= 2 * WARPGROUP or PRODUCER_ONE_WARPGROUP)
        self.block = consumers + (WARPGROUP if producer else 0)
        # With the producer and two CTAs an SM, ptxas must start each thread at the
        # registers both CTAs leave it (`.minnctapersm`).
        ctas = cost_model.attention_ctas_per_sm(t, eb, self.device)
        self.min_ctas = ctas if producer and ctas > 1 else None
        el = o.el
        self.causal = causal_bound(self.m, self.ops.m, self.ops.n)
        # Persistent: a CTA per SM slot runs work units b, b + grid, ...: a row block, or
        # under a causal bound a pair of them (the longest with the shortest, the same key
        # tiles in every pair); each unit's blocks one after the other, the producer's K/V
        # ring and Q running on across them.
        persistent = cost_model.attention_persistent(
            t, producer, cost_model.attention_key_tiles(o.n, self.causal is not None))
        ahead = cost_model.attention_scores_ahead(t, persistent)
        pairs = persistent and self.causal is not None and m_tiles > 1
        per_bh = -(-m_tiles // 2) if pairs else m_tiles  # units of one batch x head
        if persistent:
            slots = PERSISTENT_SLOTS or self.device.parallel_units * ctas
            self.grid = min(o.batch * per_bh, slots)
        # mbarriers: Q; K and V full per stage; with the producer warp, K and V empty too;
        # persistent, Q empty (the consumers' last S of a block done).
        nbar = 1 + (4 if producer else 2) * stages + (1 if persistent else 0)
        k_empty, v_empty = 1 + 2 * stages, 1 + 3 * stages
        q_empty = nbar - 1
        bar = f"!nvgpu.mbarrier.group<memorySpace = {WS}, num_barriers = {nbar}>"
        tms, boxes = {}, {}
        for what, rows_box in (("Q", t.bm), ("K", t.bn), ("V", t.bn)):
            ones = "1x" * len(self.views[what].tma_dims())
            tms[what] = (f"!nvgpu.tensormap.descriptor<tensor = memref<{ones}{rows_box}x64x{el}, "
                         f"3>, swizzle = swizzle_128b, l2promo = l2promo_256b, oob = zero, "
                         f"interleave = none>")
            boxes[what] = f"memref<{ones}{rows_box}x64x{el}, {WS}>"
        tm_q, tm_k, tm_v = tms["Q"], tms["K"], tms["V"]
        box_q = boxes["Q"]
        emit = self.emit
        emit(f"%tma_q = builtin.unrealized_conversion_cast %map_q : !llvm.ptr to {tm_q}")
        emit(f"%tma_k = builtin.unrealized_conversion_cast %map_k : !llvm.ptr to {tm_k}")
        emit(f"%tma_v = builtin.unrealized_conversion_cast %map_v : !llvm.ptr to {tm_v}")
        emit("%tid = gpu.thread_id x")
        emit("%bid = gpu.block_id x")
        idx = self.index
        if not persistent:
            bh = self.arith("divui", "%bid", idx(m_tiles))
            mt = self.arith("remui", "%bid", idx(m_tiles))
            if self.causal is not None:
                # Under a causal bound a block's work grows with its row tile: the longest
                # go first (blocks start in index order), so the last wave is of short ones.
                mt = self.arith("subi", idx(m_tiles - 1), mt)
            m0 = self.arith("muli", mt, idx(t.bm))

        def lead_coords(lead: Factors) -> list[str]:
            """The batch x heads index `bh` as coordinates over an operand's lead factors."""
            coords, rest = [], bh
            for n, _ in reversed(lead):
                coords.append(self.arith("remui", rest, idx(n)))
                rest = self.arith("divui", rest, idx(n))
            return list(reversed(coords))

        def coordinates() -> dict[str, str]:
            """Each operand's TMA coordinates past its two inner ones, for `bh`."""
            out = {}
            for what, v in self.views.items():
                c = lead_coords(v.lead)
                out[what] = ", ".join(c[i] for i, _, _ in v.tma_dims())
            return out

        if not persistent:
            tma_coords = coordinates()
        warp = self.arith("divui", "%tid", idx(32))
        lane = self.arith("remui", "%tid", idx(32))
        quad_row = self.arith("divui", lane, idx(4))
        quad_col = self.arith("muli", self.arith("remui", lane, idx(4)), idx(2))
        # Warp w of the block: warpgroup w / 4 takes rows 64 (w / 4) ..; its wgmma fragment
        # rows are 16 (w % 4) + lane / 4 (+ 8). Rows are counted in the block's tile.
        row0 = self.arith("addi", self.arith("muli", warp, idx(16)), quad_row)
        wg_rows = self.arith("muli", self.arith("divui", warp, idx(4)), idx(64))
        # The warpgroup's own named barrier (1, 2, ...; 0 is the block's).
        wg_barrier = self.fresh("wgb")
        emit(f"{wg_barrier} = arith.index_cast "
             f"{self.arith('addi', self.arith('divui', warp, idx(4)), idx(1))} : index to i32")
        rows = [row0, self.arith("addi", row0, idx(8))]
        emit(f"%smem = gpu.dynamic_shared_memory : memref<?xi8, {WS}>")
        ptr = self.fresh("p")
        emit(f"{ptr} = memref.extract_aligned_pointer_as_index %smem : memref<?xi8, {WS}> "
             f"-> index")
        self.smem_base = self.fresh("sb")
        emit(f"{self.smem_base} = arith.index_cast {ptr} : index to i64")
        emit(f"%bar = nvgpu.mbarrier.create -> {bar}")
        first = self.arith("cmpi eq,", "%tid", idx(0))

        def view(offset: int, box: str) -> str:
            name = self.fresh("vw")
            emit(f"{name} = memref.view %smem[{idx(offset)}][] : memref<?xi8, {WS}> to {box}")
            return name

        def load(which: str, stage: int | str, tile: str) -> None:
            """Thread 0: K's or V's tile `tile` into `stage` (its own mbarrier)."""
            n0 = self.arith("muli", tile, idx(t.bn))
            tm, b0, offs = ("%tma_k", 1, k_off) if which == "K" else ("%tma_v", 1 + stages, v_off)
            tm_type, box = tms[which], boxes[which]
            lead = f", {tma_coords[which]}" if tma_coords[which] else ""
            if isinstance(stage, str):
                b = self.arith("addi", idx(b0), stage)
                base = self.arith("addi", idx(offs[0]), self.arith("muli", stage,
                                                                   idx(2 * kv_bytes)))
            else:
                b, base = idx(b0 + stage), idx(offs[stage])
            emit(f"nvgpu.mbarrier.arrive.expect_tx %bar[{b}], {idx(kv_bytes)} : {bar}")
            for j in range(d_boxes):
                off = self.arith("addi", base, idx(j * t.bn * 128))
                vw = self.fresh("vw")
                emit(f"{vw} = memref.view %smem[{off}][] : memref<?xi8, {WS}> to {box}")
                emit(f"nvgpu.tma.async.load {tm}[{idx(64 * j)}, {n0}{lead}], %bar[{b}] to "
                     f"{vw} : {tm_type}, {bar} -> {box}")

        def load_if(cond: str, which: str, stage: int | str, tile: str) -> None:
            emit(f"scf.if {cond} {{")
            self.indent += 1
            load(which, stage, tile)
            self.indent -= 1
            emit("}")

        emit(f"scf.if {first} {{")
        self.indent += 1
        for b in range(nbar):
            count = consumers // 32 if b >= k_empty else 1  # empty: one per consumer warp
            emit(f"nvgpu.mbarrier.init %bar[{idx(b)}], {idx(count)} : {bar}")
        emit(f"nvgpu.tma.prefetch.descriptor %tma_k : {tm_k}")
        emit(f"nvgpu.tma.prefetch.descriptor %tma_v : {tm_v}")
        self.indent -= 1
        emit("}")
        consumer = self.arith("cmpi ult,", "%tid", idx(consumers))
        if not p_regs:
            # P buffer 1 starts as zeros: the first step's P V (of a tile -1) adds nothing.
            p_mem = f"memref<{2 * t.bm * t.bn}x{el}, {WS}>"
            pv = self.fresh("pm")
            emit(f"{pv} = memref.view %smem[{idx(p_off[0])}][] : memref<?xi8, {WS}> to "
                 f"{p_mem}")
            zvec = self.fresh("zv")
            emit(f"{zvec} = arith.constant dense<0.0> : vector<8x{el}>")
            if producer:
                emit(f"scf.if {consumer} {{")
            for i in range(t.bm * t.bn // (8 * consumers)):
                elem = self.arith("addi", idx(t.bm * t.bn + 8 * consumers * i),
                                  self.arith("muli", "%tid", idx(8)))
                emit(f"vector.store {zvec}, {pv}[{elem}] : {p_mem}, vector<8x{el}>")
            if producer:
                emit("}")
        emit("nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, "
             "space = #nvvm.shared_space<cta>}")
        emit("gpu.barrier")

        def load_q() -> None:
            """Q's row block m0 into its buffer (mbarrier 0)."""
            emit(f"nvgpu.mbarrier.arrive.expect_tx %bar[{idx(0)}], {idx(q_bytes)} : {bar}")
            for j in range(d_boxes):
                vw = view(q_off + j * t.bm * 128, box_q)
                lead = f", {tma_coords['Q']}" if tma_coords["Q"] else ""
                emit(f"nvgpu.tma.async.load %tma_q[{idx(64 * j)}, {m0}{lead}], %bar[{idx(0)}] "
                     f"to {vw} : {tm_q}, {bar} -> {box_q}")

        def key_tiles() -> str:
            """The key tiles row block m0 reads: all, or (a causal bound c: keys past row +
            c are masked) up to the tile of key m0 + BM - 1 + c."""
            if self.causal is None:
                return idx(n_tiles)
            last = self.arith("maxsi", self.arith("addi", m0, idx(t.bm - 1 + self.causal)),
                              idx(-1))
            return self.arith("minui", self.arith("divui", self.arith("addi", last, idx(t.bn)),
                                                  idx(t.bn)), idx(n_tiles))

        def units_begin(role: str) -> None:
            """Persistent: open the loops over this CTA's units and their row blocks (each
            role keeps its K/V ring position `%<role>g` and its count of blocks `%<role>q`),
            and set `bh`, `m0`, `tma_coords` and `hi` to the block's."""
            nonlocal bh, m0, tma_coords, hi
            g, q = f"%{role}g", f"%{role}q"
            unit = f"%{role}u"
            zero_ = idx(0)
            emit(f"%{role}outer:2 = scf.for {unit} = %bid to {idx(o.batch * per_bh)} step "
                 f"{idx(self.grid)} iter_args({g}0 = {zero_}, {q}0 = {zero_}) -> "
                 f"(index, index) {{")
            self.indent += 1
            bh = self.arith("divui", unit, idx(per_bh))
            p_ = self.arith("remui", unit, idx(per_bh))
            if pairs:
                # Row blocks m_tiles - 1 - p (first: the longest) and p; one where they meet.
                long_ = self.arith("subi", idx(m_tiles - 1), p_)
                count = self.fop("arith.select", self.arith("cmpi ult,", p_, long_), idx(2),
                                 idx(1), type_="index")
            else:
                long_, count = p_, idx(1)
            emit(f"%{role}inner:2 = scf.for %{role}k = {idx(0)} to {count} step {idx(1)} "
                 f"iter_args({g} = {g}0, {q} = {q}0) -> (index, index) {{")
            self.indent += 1
            mt_ = long_
            if pairs:
                is_first = self.arith("cmpi eq,", f"%{role}k", idx(0))
                mt_ = self.fop("arith.select", is_first, long_, p_, type_="index")
            m0 = self.arith("muli", mt_, idx(t.bm))
            tma_coords = coordinates()
            hi = key_tiles()
            self.memo.append({})

        def units_end(role: str) -> None:
            """Close `units_begin`'s loops: the ring `hi` tiles on, one more block."""
            g, q = f"%{role}g", f"%{role}q"
            self.memo.pop()
            emit(f"scf.yield {self.arith('addi', g, hi)}, {self.arith('addi', q, idx(1))} : "
                 f"index, index")
            self.indent -= 1
            emit("}")
            emit(f"scf.yield %{role}inner#0, %{role}inner#1 : index, index")
            self.indent -= 1
            emit("}")

        if persistent:
            bh = m0 = hi = None
            tma_coords = {}
        else:
            emit(f"scf.if {first} {{")
            self.indent += 1
            load_q()
            self.indent -= 1
            emit("}")
            hi = key_tiles()
        def parity_of(count: str) -> str:
            """`count` % 2 as the i1 an mbarrier wait takes."""
            parity, wide = self.fresh("par"), self.fresh("pw")
            emit(f"{wide} = arith.index_cast {self.arith('remui', count, idx(2))} : index to i32")
            emit(f"{parity} = arith.trunci {wide} : i32 to i1")
            return parity

        def ring(tile: str, base: str) -> str:
            """Key tile `tile`'s place in the ring of K/V stages (persistent: counted on
            across the CTA's blocks, from the role's `base`, `%pg` or `%cg`)."""
            return self.arith("addi", base, tile) if persistent else tile

        def wait_if(cond: str, barrier: str, parity: str) -> None:
            emit(f"scf.if {cond} {{")
            emit(f"  nvgpu.mbarrier.try_wait.parity %bar[{barrier}], {parity}, "
                 f"{idx(10000000)} : {bar}")
            emit("}")

        if producer:
            # The producer warp's first lane: K_u, then V_u-1 (V_t's stage is free a step
            # after K_t+1's: each wait is for the step the next K waits for anyway), each
            # past the first STAGES once its stage's previous tile is released.
            emit(f"scf.if {self.arith('cmpi uge,', '%tid', idx(consumers))} {{")
            self.indent += 1
            producer_regs = PERSISTENT_PRODUCER_REGISTERS if persistent else PRODUCER_REGISTERS
            emit(f"nvvm.setmaxregister decrease {producer_regs}")
            emit(f"scf.if {self.arith('cmpi eq,', '%tid', idx(consumers))} {{")
            self.indent += 1
            if persistent:
                units_begin("p")
            emit(f"scf.for %u = {idx(0)} to {self.arith('addi', hi, idx(1))} step {idx(1)} {{")
            self.indent += 1
            for which, tile, empty in (("K", "%u", k_empty), ("V", None, v_empty)):
                if tile is None:
                    tile = self.arith("subi", "%u", idx(1))
                    cond = self.arith("cmpi uge,", "%u", idx(1))
                else:
                    cond = self.arith("cmpi ult,", tile, hi)
                emit(f"scf.if {cond} {{")
                self.indent += 1
                place = ring(tile, "%pg")
                stage = self.arith("remui", place, idx(stages))
                again = self.arith("cmpi uge,", place, idx(stages))
                emit(f"scf.if {again} {{")
                released = parity_of(self.arith("addi", self.arith("divui", place,
                                                                   idx(stages)), idx(1)))
                slot = self.arith("addi", stage, idx(empty))
                emit(f"  nvgpu.mbarrier.try_wait.parity %bar[{slot}], {released}, "
                     f"{idx(10000000)} : {bar}")
                emit("}")
                load(which, stage, tile)
                self.indent -= 1
                emit("}")
                if persistent and which == "K":
                    # The block's Q after its K_0 (which waits only for a stage of the
                    # block before), once the consumers' last S of that block is done.
                    emit(f"scf.if {self.arith('cmpi eq,', '%u', idx(0))} {{")
                    self.indent += 1
                    # Block q waits for the consumers' release of block q - 1: parity
                    # (q - 1) % 2, written (q + 1) % 2.
                    wait_if(self.arith("cmpi uge,", "%pq", idx(1)), idx(q_empty),
                            parity_of(self.arith("addi", "%pq", idx(1))))
                    load_q()
                    self.indent -= 1
                    emit("}")
            self.indent -= 1
            emit("}")
            if persistent:
                units_end("p")
            self.indent -= 1
            emit("}")
            self.indent -= 1
            emit("}")
            # The consumer warpgroups: everything below, with the producer's registers.
            emit(f"scf.if {consumer} {{")
            self.indent += 1
            # The CTA's registers are what its launch got (ptxas: the SM's file over the
            # threads of `ctas` CTAs, in multiples of 8 a thread), not the SM's share: a
            # setmaxnreg increase past them waits forever (48 + 2 x 232 did).
            pool = self.device.registers_per_unit // (ctas * self.block) // 8 * 8 * self.block
            regs = min(240, (pool - WARPGROUP * producer_regs) // consumers // 8 * 8)
            emit(f"nvvm.setmaxregister increase {regs}")
        else:
            for s in range(stages):
                go = self.arith("andi", first, self.arith("cmpi ult,", idx(s), hi), "i1")
                emit(f"scf.if {go} {{")
                self.indent += 1
                load("K", s, idx(s))
                load("V", s, idx(s))
                self.indent -= 1
                emit("}")

        warp_lead = self.arith("cmpi eq,", lane, idx(0))

        def arrive(cond: str, barrier: Callable[[], str]) -> None:
            """Each consumer warp's first lane arrives (where `cond`) on the mbarrier whose
            index `barrier()` emits, inside the branch."""
            go = self.arith("andi", warp_lead, cond, "i1")
            emit(f"scf.if {go} {{")
            emit(f"  {self.fresh('tok')} = nvgpu.mbarrier.arrive %bar[{barrier()}] : {bar} -> "
                 f"!nvgpu.mbarrier.token")
            emit("}")

        def release(cond: str, empty: int, tile: str) -> None:
            """`tile`'s K or V stage is read (its MMAs waited for): the producer may load
            into it."""
            arrive(cond, lambda: self.arith("addi", self.arith("remui", ring(tile, "%cg"),
                                                                idx(stages)), idx(empty)))

        ns = t.bn // 2  # the scores' fragment: f32 values per thread
        no = o.d // 2  # the output's
        o0 = self.zeros(no)
        ninf = self.f32(float("-inf"))
        zero = self.f32(0.0)
        if persistent:
            units_begin("c")
        # Q is waited for once a block; descriptors of Q's boxes are loop invariant.
        q_parity = parity_of("%cq") if persistent else self.const(0, "i1")
        emit(f"nvgpu.mbarrier.try_wait.parity %bar[{idx(0)}], {q_parity}, "
             f"{idx(10000000)} : {bar}")
        # A (Q, P): this warpgroup's 64 rows of each 64-column box (128 bytes a row).
        wg_off = self.fop("arith.index_cast", self.arith("muli", wg_rows, idx(128 >> 4)),
                          type_="index to i64")
        q_desc = self.arith("addi", self.descriptor(self.smem_address(q_off), 0), wg_off, "i64")
        p_descs = None if p_regs else [
            self.arith("addi", self.descriptor(self.smem_address(p_off[b]), 0), wg_off, "i64")
            for b in range(2)]
        k_desc0 = self.descriptor(self.smem_address(k_off[0]), 0)
        v_desc0 = self.descriptor(self.smem_address(v_off[0]), t.bn * 128)
        st_o = accumulator_struct(no)
        st_s = accumulator_struct(ns)

        def stage_of(tile: str) -> tuple[str, str, str, str]:
            """(stage, the wait parity, K's and V's descriptors) of key tile `tile`."""
            place = ring(tile, "%cg")
            stage = self.arith("remui", place, idx(stages))
            parity = parity_of(self.arith("divui", place, idx(stages)))
            # Stage s's tiles are 2 s kv_bytes further (the descriptor's start address is
            # in 16-byte units, and shared memory below 256 KB keeps it in its 14 bits).
            step = self.arith("muli", stage, idx((2 * kv_bytes) >> 4))
            step = self.fop("arith.index_cast", step, type_="index to i64")
            k_desc = self.arith("addi", k_desc0, step, "i64")
            v_desc = self.arith("addi", v_desc0, step, "i64")
            return stage, parity, k_desc, v_desc

        def issue_scores(k_desc: str) -> str:
            """S = Q K^T, issued (committed, not waited for): head_dim / 16 MMAs (A: Q's box
            kk / 4 at +32 bytes per 16 of K; B: K's)."""
            emit("nvvm.wgmma.fence.aligned")
            s_acc = self.fresh("su")
            emit(f"{s_acc} = llvm.mlir.undef : {st_s}")
            for kk in range(o.d // 16):
                da = self.arith("addi", q_desc, self.i64(
                    ((kk // 4) * t.bm * 128 + (kk % 4) * 32) >> 4), "i64")
                db = self.arith("addi", k_desc, self.i64(
                    ((kk // 4) * t.bn * 128 + (kk % 4) * 32) >> 4), "i64")
                nxt = self.fresh("s")
                scale_d = "zero" if kk == 0 else "one"
                emit(f"{nxt} = nvvm.wgmma.mma_async {da}, {db}, {s_acc}, <m = 64, n = {t.bn}, "
                     f"k = 16>, D[<f32>, <{scale_d}>, <wrapped>], A[<{el}>, <one>, <row>], "
                     f"B[<{el}>, <one>, <col>] : {st_s} -> {st_s}")
                s_acc = nxt
            emit("nvvm.wgmma.commit.group.sync.aligned")
            return s_acc

        def issue_pv(acc: str, p: str | list[str], stage: str, parity: str,
                     v_desc: str) -> str:
            """O += P V, issued (committed, not waited for) once V's tile in `stage` is in:
            BN / 16 MMAs (B: V N-major, 16 key rows of 128 bytes per step, its 64-column
            boxes BN * 128 bytes apart). A: P in registers (`p`: the thread's BN / 4 words
            of 16-bit pairs, four per MMA: `pack_p`), or P buffer `p`'s box kk / 4 at +32
            bytes."""
            vb = self.arith("addi", stage, idx(1 + stages))
            emit(f"nvgpu.mbarrier.try_wait.parity %bar[{vb}], {parity}, {idx(10000000)} : "
                 f"{bar}")
            if not p_regs:
                is1 = self.arith("cmpi eq,", p, idx(1))
                p_desc = self.fop("arith.select", is1, p_descs[1], p_descs[0], type_="i64")
            emit("nvvm.wgmma.fence.aligned")
            for kk in range(t.bn // 16):
                if p_regs:
                    db = self.arith("addi", v_desc, self.i64((kk * 16 * 128) >> 4), "i64")
                    acc = self.wgmma_rs(acc, no, p[4 * kk:4 * kk + 4], db, o.d, el)
                    continue
                da = self.arith("addi", p_desc, self.i64(
                    ((kk // 4) * t.bm * 128 + (kk % 4) * 32) >> 4), "i64")
                db = self.arith("addi", v_desc, self.i64((kk * 16 * 128) >> 4), "i64")
                nxt = self.fresh("acc")
                emit(f"{nxt} = nvvm.wgmma.mma_async {da}, {db}, {acc}, <m = 64, n = {o.d}, "
                     f"k = 16>, D[<f32>, <one>, <wrapped>], A[<{el}>, <one>, <row>], "
                     f"B[<{el}>, <one>, <row>] : {st_o} -> {st_o}")
                acc = nxt
            emit("nvvm.wgmma.commit.group.sync.aligned")
            return acc

        # The first tile's scores before the loop; in the loop, tile j + 1's are issued
        # before tile j's softmax, so that the tensor cores compute them meanwhile. The last
        # iteration issues them again for a tile already in shared memory (one wasted MMA
        # batch per block, never read): no scf.if around an MMA in flight, whose results
        # would be moved between registers before it completes.
        # Where S_j+1 beside S_j, O and P_j-1 would not fit the registers
        # (`cost_model.attention_scores_ahead`), S_j is issued in step j instead and waited
        # for before its softmax (FlashAttention-3's order): the softmax overlaps P_j-1 V_j-1
        # and the other warpgroups' MMAs only.
        if not ahead and not producer:
            raise NotImplementedError("the attention kernel issues S_j in step j with the "
                                      "producer warpgroup only")
        s_first = None
        if ahead:
            _, par0, k0_desc, _ = stage_of(idx(0))
            wait_if(self.arith("cmpi ult,", idx(0), hi), idx(1), par0)
            s_first = issue_scores(k0_desc)
            emit("nvvm.wgmma.wait.group.sync.aligned 0")
            # K_0 is read: its stage takes K_STAGES now, a step before S_STAGES is issued.
            if producer:
                release(self.arith("cmpi ult,", idx(0), hi), k_empty, idx(0))
            else:
                emit("gpu.barrier")
                load_if(self.arith("andi", first, self.arith("cmpi ult,", idx(stages), hi),
                                   "i1"), "K", 0, idx(stages))
        # P in registers: the thread's BN / 4 words, carried from one step to the next.
        n_p = t.bn // 4 if p_regs else 0
        p_zero = self.const(0, "i32")
        p_args = "".join(f", %pr{i} = {p_zero}" for i in range(n_p))
        p_types = ", i32" * n_p
        # Ping-pong (FlashAttention-3's warpgroup scheduling): with two or more consumer
        # warpgroups, each issues its step's MMAs only after the previous warpgroup issued
        # its own (named barrier 8 + w: its 128 threads wait, the previous warpgroup's
        # arrive), so that one's softmax runs while the other's MMAs use the tensor cores.
        # With P in shared memory (S ahead) it is built only where asked for
        # (`WARPGROUP_PINGPONG = "always"`): it gained nothing there (run 222: 2.135 against
        # 2.120 ms at S4096 D128) and has not been fuzzed.
        pingpong = producer and consumers >= 2 * WARPGROUP and (
            WARPGROUP_PINGPONG == "always" or (WARPGROUP_PINGPONG and p_regs))
        if pingpong:
            n_wg = consumers // WARPGROUP
            wg = self.arith("divui", warp, idx(4))
            pair = self.const(2 * WARPGROUP, "i32")

            def turn_barrier(of: str) -> str:
                return self.fop("arith.index_cast", self.arith("addi", of, idx(8)),
                                type_="index to i32")

            my_turn = turn_barrier(wg)
            next_turn = turn_barrier(self.arith("remui", self.arith("addi", wg, idx(1)),
                                                idx(n_wg)))
            # The last warpgroup lets the first one go first.
            emit(f"scf.if {self.arith('cmpi eq,', wg, idx(n_wg - 1))} {{")
            emit(f"  nvvm.barrier.arrive id = {next_turn} number_of_threads = {pair}")
            emit("}")
        s_arg, s_type = (f", %s_cur = {s_first}", f", {st_s}") if ahead else ("", "")
        p_first = 6 if ahead else 5  # P's words among the loop's results
        emit(f"%loop:{p_first + n_p} = scf.for %j = {idx(0)} to {hi} step {idx(1)} iter_args("
             f"%acc = {o0}, %mx0 = {ninf}, %mx1 = {ninf}, %l0 = {zero}, %l1 = {zero}"
             f"{s_arg}{p_args}) -> ({st_o}, f32, f32, f32, f32{s_type}{p_types}) {{")
        self.indent += 1
        self.memo.append({})
        following = self.arith("addi", "%j", idx(1))
        # The scores this step issues: S_j+1 (ahead; past the last tile, again a tile in
        # shared memory), or S_j.
        k_stage, k_parity, k_desc, _ = stage_of(following if ahead else "%j")
        if ahead:
            wait_if(self.arith("cmpi ult,", following, hi),
                    self.arith("addi", k_stage, idx(1)), k_parity)
        else:
            emit(f"nvgpu.mbarrier.try_wait.parity %bar[{self.arith('addi', k_stage, idx(1))}],"
                 f" {k_parity}, {idx(10000000)} : {bar}")
        if pingpong:
            emit(f"nvvm.barrier id = {my_turn} number_of_threads = {pair}")
        s_issued = issue_scores(k_desc)
        # O += P_j-1 V_j-1, issued now so that the tensor cores run it (after S_j+1) while
        # this tile's softmax runs. The first step has no tile -1: P is zeros (in registers,
        # or P buffer 1) and V_0 stands in (waited for, so that it holds finite values): it
        # adds 0.
        prev = self.arith("subi", self.arith("maxui", "%j", idx(1)), idx(1))
        p_in = [f"%pr{i}" for i in range(n_p)] if p_regs else \
            self.arith("remui", following, idx(2))
        p_stage, p_parity, _, p_v_desc = stage_of(prev)
        acc = issue_pv("%acc", p_in, p_stage, p_parity, p_v_desc)
        if pingpong:
            emit(f"nvvm.barrier.arrive id = {next_turn} number_of_threads = {pair}")
        if ahead:
            s_acc = "%s_cur"
        else:
            # S_j (the older of the two groups in flight) is done; K_j's stage is read.
            emit("nvvm.wgmma.wait.group.sync.aligned 1")
            release(self.const(1, "i1"), k_empty, "%j")
            s_acc = s_issued
        # A warp whose 16 rows are all past the last query row (decoding's one row, a
        # ragged last block) skips its softmax: its rows of P and O are never stored.
        skip_dead = -(-o.m // t.bm) * t.bm - o.m >= 16
        if skip_dead:
            live = self.arith("cmpi ult,", self.arith("addi", m0, self.arith(
                "muli", warp, idx(16))), idx(o.m))
            soft = self.fresh("sm")
            emit(f"{soft}:{7 + n_p} = scf.if {live} -> (f32, f32, f32, f32, f32, f32, i1"
                 f"{p_types}) {{")
            self.indent += 1
            self.memo.append({})
        # X = score(S), two consecutive keys at a time. Where the chain is S times a
        # positive constant c (the match's `scale`: no mask, casts aside) and no key tile
        # runs past the last key, X is not computed: the row max is c max S (c > 0 keeps
        # the order) and c folds into exp2's multiplier, P = 2^(S c log2 e - m log2 e).
        scale = computed_scale(self.m) if o.n % t.bn == 0 else None
        scale = scale if scale is not None and scale > 0 else None
        n0 = self.arith("muli", "%j", idx(t.bn))
        score_shape = tensor_info(self.m.score.type)[0]
        lead = self.delinearize(Ix(bh, 0, 1), score_shape[:-2]) if len(score_shape) > 2 else []
        def row_ix(name: str) -> Ix:
            return Ix(name, 0, 1)

        def score_values(point: tuple[int, int] | None) -> list[list[str]]:
            """The thread's X values per row half: the chain at each score's (row, key), or
            at `point` for every score (a tile below the diagonal, `interior_point`)."""
            key_ix = self.ix_const(point[1]) if point is not None else None
            xs: list[list[str]] = [[], []]
            for r in range(2):
                grow = self.arith("addi", m0, rows[r])
                grow_c = self.arith("minui", grow, idx(o.m - 1))
                if point is not None:  # a tile below the diagonal: the chain at the point
                    grow_c = self.ix_const(point[0])
                for c in range(t.bn // 8):
                    col = self.arith("addi", n0, self.arith("addi", quad_col, idx(8 * c)))
                    scores = [self.extract(s_acc, 4 * c + 2 * r + e, ns) for e in range(2)]
                    if o.n % 2 == 0:
                        # Both keys at once (a pair never straddles the last key: clamped
                        # whole, a pair past the end is masked below).
                        col_c = self.arith("minui", col, idx(o.n - 2))
                        self.bound = scores
                        self.memo.append({})
                        values = self.at(self.m.score, [*lead, row_ix(grow_c), Ix(col_c, 1, 2)]
                                         if point is None else [*lead, grow_c, key_ix])
                        self.memo.pop()
                    else:
                        # An odd key count: the last pair straddles the end; each key alone,
                        # at its own (clamped) index (found by fuzz_attention.py: a causal
                        # mask evaluated one key early at T = 7).
                        values = []
                        self.V = 1
                        for e in range(2):
                            key_c = self.arith("minui", self.arith("addi", col, idx(e)),
                                               idx(o.n - 1))
                            self.bound = [scores[e]]
                            self.memo.append({})
                            values += self.at(self.m.score, [*lead, row_ix(grow_c),
                                                             Ix(key_c, 0, 1)]
                                              if point is None else [*lead, grow_c, key_ix])
                            self.memo.pop()
                        self.V = 2
                    x_el = tensor_info(self.m.score.type)[1]
                    for e, x in enumerate(values):
                        if x_el != "f32":
                            x = self.unrounded.get(x) or self.fop("arith.extf", x,
                                                                  type_=f"{x_el} to f32")
                        if o.n % t.bn:
                            key = self.arith("addi", col, idx(e))
                            inside = self.arith("cmpi ult,", key, idx(o.n))
                            x = self.fop("arith.select", inside, x, ninf)
                        xs[r].append(x)
            return xs

        def diagonal_scores() -> list[list[str]]:
            """A diagonal tile's X / c where the chain below the diagonal is X = c S: S
            itself where key <= row + c, -inf past it (`causal_bound`: the chain gives -inf
            there, and `interior_point`: c S at and below it). One compare and select a
            score, against the key's offset in the thread's columns: key - row <= c is
            8 i + e <= row + c - n0 - the thread's first column."""
            got = []
            for r in range(2):
                limit = self.arith("subi", self.arith("addi", self.arith(
                    "addi", m0, rows[r]), idx(self.causal)), self.arith("addi", n0, quad_col))
                row_xs = []
                for c in range(t.bn // 8):
                    for e in range(2):
                        keep = self.arith("cmpi sle,", idx(8 * c + e), limit)
                        row_xs.append(self.fop("arith.select", keep, self.extract(
                            s_acc, 4 * c + 2 * r + e, ns), ninf))
                got.append(row_xs)
            return got

        # Key tiles wholly below the diagonal (every key <= the block's first row + c) see
        # the mask change nothing (`interior_point`): there the chain is evaluated at one
        # point, and its index compares and selects fold away.
        # Where the chain there is X = c S, those tiles give S itself and c folds into
        # exp2's multiplier as above; the diagonal tiles give S where key <= row + c and
        # -inf past it (`diagonal_scores`): the chain's own value there, X = c S, and its
        # -inf past the bound, without the chain's index arithmetic and conversions per
        # score (run 226: a block's one diagonal tile cost about two interior tiles'
        # instructions that way).
        point = interior_point(self.m, o.m, o.n) if self.causal is not None else None
        inner_scale = None
        if scale is None and point is not None and o.n % t.bn == 0:
            linear = interior_scale(self.m, o.m, o.n)
            inner_scale = computed_scale(self.m, linear) if linear is not None else None
        if scale is None and point is not None:
            below = self.arith("maxsi", self.arith("addi", m0, idx(self.causal + 1)), idx(0))
            full = self.arith("divui", below, idx(t.bn))
            inner = self.arith("cmpi ult,", "%j", full)
            branch = self.fresh("xs")
            emit(f"{branch}:{ns} = scf.if {inner} -> ({', '.join(['f32'] * ns)}) {{")
            for variant in (point, None):
                self.indent += 1
                self.memo.append({})
                if inner_scale is None:
                    got = score_values(variant)
                elif variant is not None:
                    got = [[self.extract(s_acc, 4 * c + 2 * r + e, ns)
                            for c in range(t.bn // 8) for e in range(2)] for r in range(2)]
                else:
                    got = diagonal_scores()
                emit(f"scf.yield {', '.join(got[0] + got[1])} : {', '.join(['f32'] * ns)}")
                self.memo.pop()
                self.indent -= 1
                emit("} else {" if variant is not None else "}")
            xs = [[f"{branch}#{i}" for i in range(ns // 2)],
                  [f"{branch}#{i}" for i in range(ns // 2, ns)]]
            scale = inner_scale
        elif scale is None:
            xs = score_values(None)
        else:  # S itself, the thread's values in the same order
            xs = [[self.extract(s_acc, 4 * c + 2 * r + e, ns) for c in range(t.bn // 8)
                   for e in range(2)] for r in range(2)]
        # Online softmax per row half, with a lazy reference max (FlashAttention-4's
        # conditional rescaling): the max P is taken against moves only when a row's new
        # max passes it by more than RESCALE_LOG2 (in log2 units: P <= 2^RESCALE_LOG2, exact
        # in f32 and 16-bit), and O is rescaled only in the steps where some row of the warp
        # moved (the warp agrees by a vote); O / l is the same for any reference.
        log2e = self.f32(LOG2E)
        maxes = []
        moved = None
        for r, m_old in enumerate(("%mx0", "%mx1")):
            mx = self.tree(xs[r], "arith.maximumf")
            mx = self.shuffle_xor(mx, 1, "arith.maximumf")
            mx = self.shuffle_xor(mx, 2, "arith.maximumf")
            if scale is not None:
                mx = self.fop("arith.mulf", mx, self.f32(scale))
            maxes.append(mx)
            past = self.fop("arith.cmpf ogt,", mx, self.fop(
                "arith.addf", m_old, self.f32(RESCALE_LOG2 / LOG2E)))
            moved = past if moved is None else self.arith("ori", moved, past, "i1")
        warp_moved = self.fresh("mv")
        emit(f"{warp_moved} = nvvm.vote.sync any {self.const(-1, 'i32')}, {moved} -> i1")
        new_m, alphas, psums, probs = [], [], [], [[], []]
        for r, (m_old, l_old) in enumerate((("%mx0", "%l0"), ("%mx1", "%l1"))):
            m_new = self.fop("arith.select", warp_moved,
                             self.fop("arith.maximumf", m_old, maxes[r]), m_old)
            dead = self.fop("arith.cmpf oeq,", m_new, ninf)
            m_use = self.fop("arith.select", dead, zero, m_new)
            neg = self.fop("arith.mulf", m_use, self.f32(-LOG2E))
            alpha = self.exp2(self.fop("math.fma", m_old, log2e, neg))
            step = log2e if scale is None else self.f32(scale * LOG2E)
            for x in xs[r]:
                probs[r].append(self.exp2(self.fop("math.fma", x, step, neg)))
            total = self.tree(probs[r], "arith.addf")
            new_m.append(m_new)
            alphas.append(alpha)
            psums.append(self.fop("arith.addf", self.fop("arith.mulf", l_old, alpha), total))
        # P_j in registers: for MMA kk (keys 16 kk ..), the A fragment's four words are the
        # scores fragment's pairs 2 kk and 2 kk + 1 of each row half (columns 8 c + 2 (t % 4)
        # of rows t / 4 and t / 4 + 8), in the order row 0 / row 8 / row 0 + 8 columns / row
        # 8 + 8 columns.
        p_out = [self.pack_p(probs[r][2 * c], probs[r][2 * c + 1], el)
                 for kk in range(n_p // 4) for c in (2 * kk, 2 * kk + 1) for r in range(2)]
        # Else P_j -> P buffer j % 2 (buffer (j - 1) % 2 is the P V in flight's A), 16-bit,
        # as wgmma's A reads it (K-major, 128-byte swizzle: 16-byte chunk c of row r at
        # chunk c ^ (r % 8)).
        p_base = self.arith("muli", self.arith("remui", "%j", idx(2)), idx(t.bm * t.bn))
        for r in range(0 if p_regs else 2):
            swz = self.arith("remui", rows[r], idx(8))
            for c in range(t.bn // 8):
                box, chunk = divmod(c, 8)
                sw_chunk = self.arith("xori", idx(chunk), swz)
                elem = self.arith("addi", self.arith("muli", rows[r], idx(64)),
                                  self.arith("muli", sw_chunk, idx(8)))
                elem = self.arith("addi", elem, self.arith("addi", quad_col,
                                                           idx(box * t.bm * 64)))
                elem = self.arith("addi", elem, p_base)
                lo = self.fop("arith.truncf", probs[r][2 * c], type_=f"f32 to {el}")
                hi_ = self.fop("arith.truncf", probs[r][2 * c + 1], type_=f"f32 to {el}")
                vec = self.fresh("pv")
                emit(f"{vec} = vector.from_elements {lo}, {hi_} : vector<2x{el}>")
                emit(f"vector.store {vec}, {pv}[{elem}] : {p_mem}, vector<2x{el}>")
        if skip_dead:
            p_yield = "".join(f", {w}" for w in p_out)
            emit(f"scf.yield {new_m[0]}, {new_m[1]}, {psums[0]}, {psums[1]}, {alphas[0]}, "
                 f"{alphas[1]}, {warp_moved}{p_yield} : f32, f32, f32, f32, f32, f32, i1"
                 f"{p_types}")
            self.memo.pop()
            self.indent -= 1
            emit("} else {")
            one, no_move = self.f32(1.0), self.const(0, "i1")
            emit(f"  scf.yield %mx0, %mx1, %l0, %l1, {one}, {one}, {no_move}"
                 f"{f', {p_zero}' * n_p} : f32, f32, f32, f32, f32, f32, i1{p_types}")
            emit("}")
            new_m, psums = [f"{soft}#0", f"{soft}#1"], [f"{soft}#2", f"{soft}#3"]
            alphas, warp_moved = [f"{soft}#4", f"{soft}#5"], f"{soft}#6"
            p_out = [f"{soft}#{7 + i}" for i in range(n_p)]
        # S_j+1 and P_j-1 V_j-1 done: O *= alpha (row half of output value i: (i / 2) % 2).
        emit("nvvm.wgmma.wait.group.sync.aligned 0")
        scaled = self.fresh("sc")
        emit(f"{scaled} = scf.if {warp_moved} -> ({st_o}) {{")
        self.indent += 1
        rescaled = acc
        for i in range(no):
            v = self.extract(rescaled, i, no)
            rescaled = self.insert(rescaled, self.fop("arith.mulf", v, alphas[(i // 2) % 2]),
                                   i, no)
        emit(f"scf.yield {rescaled} : {st_o}")
        self.indent -= 1
        emit("} else {")
        emit(f"  scf.yield {acc} : {st_o}")
        emit("}")
        acc = scaled
        if not p_regs:
            emit("nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, "
                 "space = #nvvm.shared_space<cta>}")
        if producer:
            # This warpgroup's P_j is in its registers, or in shared memory for its own P V
            # (its warps synced); the K_j+1 and V_j-1 stages it read are released to the
            # producer (the other warpgroup may be a step away).
            if not p_regs:
                emit(f"nvvm.barrier id = {wg_barrier} number_of_threads = "
                     f"{self.const(WARPGROUP, 'i32')}")
            if ahead:
                release(self.arith("cmpi ult,", following, hi), k_empty, following)
            release(self.arith("cmpi uge,", "%j", idx(1)), v_empty, prev)
        else:
            emit("gpu.barrier")
            # Freed: K_j+1's stage (S_j+1 just waited for) takes K_j+1+STAGES, issued a
            # whole step before it is read (S_j+1+STAGES is issued at the start of step
            # j + STAGES); V_j-1's (P V just waited for) takes V_j-1+STAGES (V_1 ..
            # V_STAGES-1 came before the loop), read at step j + STAGES.
            k_tile = self.arith("addi", following, idx(stages))
            load_if(self.arith("andi", first, self.arith("cmpi ult,", k_tile, hi), "i1"),
                    "K", self.arith("remui", following, idx(stages)), k_tile)
            v_tile = self.arith("addi", "%j", idx(stages - 1))
            v_go = self.arith("andi", self.arith("cmpi uge,", "%j", idx(1)),
                              self.arith("cmpi ult,", v_tile, hi), "i1")
            load_if(self.arith("andi", first, v_go, "i1"), "V",
                    self.arith("remui", v_tile, idx(stages)), v_tile)
        self.memo.pop()
        s_yield = f", {s_issued}" if ahead else ""
        emit(f"scf.yield {acc}, {new_m[0]}, {new_m[1]}, {psums[0]}, {psums[1]}{s_yield}"
             f"{''.join(f', {w}' for w in p_out)} : {st_o}, f32, f32, f32, f32{s_type}"
             f"{p_types}")
        self.indent -= 1
        emit("}")
        if pingpong:
            # The last warpgroup's last arrive (or its first, where the block reads no key
            # tile): the first warpgroup takes it, so that no arrival is left pending.
            emit(f"scf.if {self.arith('cmpi eq,', wg, idx(0))} {{")
            emit(f"  nvvm.barrier id = {my_turn} number_of_threads = {pair}")
            emit("}")
        if persistent:
            # Every S of this block is done (waited for in the loop): Q's buffer is the
            # producer's for the next block (an arrival per consumer warp). After the turns'
            # last barrier: a warpgroup's first turn of the next block waits for the other's
            # arrival of this one.
            arrive(self.const(1, "i1"), lambda: idx(q_empty))
        # The last tile's P V (none where the block reads no key tile).
        last = self.arith("subi", self.arith("maxui", hi, idx(1)), idx(1))
        l_stage, l_parity, _, l_v_desc = stage_of(last)
        emit(f"%final = scf.if {self.arith('cmpi ugt,', hi, idx(0))} -> ({st_o}) {{")
        self.indent += 1
        last_p = [f"%loop#{p_first + i}" for i in range(n_p)] if p_regs else \
            self.arith("remui", last, idx(2))
        out = issue_pv("%loop#0", last_p, l_stage, l_parity, l_v_desc)
        emit("nvvm.wgmma.wait.group.sync.aligned 0")
        emit(f"scf.yield {out} : {st_o}")
        self.indent -= 1
        emit("} else {")
        emit(f"  scf.yield %loop#0 : {st_o}")
        emit("}")
        if persistent:
            # ... and the last V's stage, read by that P V (waited for), the producer's.
            release(self.arith("cmpi ugt,", hi, idx(0)), v_empty, last)
        # O / l, stored two columns at a time; rows past the end are not written.
        out_arg = self.num_inputs
        out_base = idx(self.out_view.offset)
        for c, (_, st) in zip(lead_coords(self.out_view.lead), self.out_view.lead):
            out_base = self.arith("addi", out_base, self.arith("muli", c, idx(st)))
        for r in range(2):
            total = f"%loop#{3 + r}"
            total = self.shuffle_xor(total, 1, "arith.addf")
            total = self.shuffle_xor(total, 2, "arith.addf")
            inv = self.fop("arith.divf", self.f32(1.0), total)
            grow = self.arith("addi", m0, rows[r])
            ok = self.arith("cmpi ult,", grow, idx(o.m))
            base = self.arith("addi", out_base, self.arith("muli", grow,
                                                          idx(self.out_view.row_stride)))
            emit(f"scf.if {ok} {{")
            self.indent += 1
            if self.m.zero_masked_rows:
                # torch's SDPA with a mask: a fully masked row (its max -inf) gives zeros.
                dead = self.fop("arith.cmpf oeq,", f"%loop#{1 + r}", ninf)
                inv = self.fop("arith.select", dead, zero, inv)
            for c in range(o.d // 8):
                lanes = []
                for e in range(2):
                    v = self.extract("%final", 4 * c + 2 * r + e, no)
                    v = self.fop("arith.mulf", v, inv)
                    if o.out_el != "f32":
                        v = self.fop("arith.truncf", v, type_=f"f32 to {o.out_el}")
                    lanes.append(v)
                off = self.arith("addi", base, self.arith("addi", quad_col, idx(8 * c)))
                self.store_vector(out_arg, off, lanes)
            self.indent -= 1
            emit("}")
        if persistent:
            units_end("c")
        if producer:
            self.indent -= 1
            emit("}")
        return self.function_text(self.block, self.grid)

    def function_text(self, block: int, grid: int) -> str:
        args = ", ".join(f"%arg{i}: {self.memref(i)}" for i in range(len(self.arg_types)))
        head = [f"    gpu.func @{self.symbol}(%map_q: !llvm.ptr, %map_k: !llvm.ptr, "
                f"%map_v: !llvm.ptr, {args}) kernel attributes "
                f"{{known_block_size = array<i32: {block}, 1, 1>, "
                f"known_grid_size = array<i32: {grid}, 1, 1>, {GRID_CONSTANT_MAPS} = 3 : i64"
                + (f", nvvm.minctasm = {self.min_ctas} : i32" if self.min_ctas else "")
                + "} {"]
        head += ["      " + line for line in self.prologue]
        return "\n".join(head + self.lines + ["      gpu.return", "    }"])


def attention_launch(group: ir.Operation, symbol: str, operands: list[int],
                     weights: list[ir.Operation], kernel_args: Callable[[], list[int]],
                     device: CudaDevice = H200) -> tuple[str, Launch]:
    """The kernel text and the launch of an attention group: `weights` its tensor
    constants, `kernel_args()` the plan buffers of its inputs, weights and results (the
    group-level kernels' arguments, program.generate's)."""
    emitter = AttentionEmitter(group, symbol, weights, device)
    text = emitter.build()
    o, t = emitter.ops, emitter.tile
    buffers = [operands[o.q], operands[o.k], operands[o.v]] + kernel_args()
    eb = ELEMENT_BYTES[o.el]
    dtype = TENSOR_MAP_TYPES[o.el]

    def tensor_map(param: int, view: MatrixView, box_rows: int) -> list[int]:
        dims = view.tma_dims()
        return map_entry(param, dtype, [view.cols, view.rows[0]] + [n for _, n, _ in dims],
                         [view.rows[1] * eb] + [st * eb for _, _, st in dims],
                         [64, box_rows] + [1] * len(dims), SWIZZLE_128B, view.offset * eb)

    views = emitter.views
    maps = [tensor_map(0, views["Q"], t.bm), tensor_map(1, views["K"], t.bn),
            tensor_map(2, views["V"], t.bn)]
    params = _params(group)
    info = {"path": "attention", "tile": [t.bm, t.bn, t.stages],
            "flops": 4 * o.batch * o.m * o.n * o.d, "attention": params,
            "shared_bytes": emitter.shared, **tuning_info(group)}
    launch = Launch(symbol=symbol, buffers=buffers, grid=emitter.grid, kind="attention",
                    ops=[op.operation.name for op in group.regions[0].blocks[0].operations
                         if op.operation.name.startswith("linalg.")],
                    info=info, block=emitter.block, shared_bytes=emitter.shared,
                    launch_kind="kernel", maps=maps)
    return text, launch


def _params(group: ir.Operation) -> dict:
    from fusec.passes.fusion.attention import _plain

    if attributes.ATTENTION not in group.attributes:
        return {}
    return {a.name: _plain(a.attr) for a in ir.DictAttr(group.attributes[attributes.ATTENTION])}
