"""The attention kernel family through the whole CUDA pipeline, built here without a GPU
(numerics against float64 and times on the H200: test/gpu/attention.py): what is recognised,
what the artifact tells the runtime (three 3-D tensor maps, grid, shared memory), the causal
tile bound proven at compile time, and that the kernel lowers to sm_90a wgmma."""

from __future__ import annotations

import math
import re
import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from fusec.compiler import driver  # noqa: E402
from fusec.compiler.frontend import import_torch  # noqa: E402
from fusec.compiler.pipeline import CompileOptions  # noqa: E402
from fusec.compiler.targets.cuda.options import CudaOptions  # noqa: E402
from fusec.compiler.targets.cuda.wgmma import map_entry  # noqa: E402


class Wrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _build(fn, shapes, tmp_path, dtype=torch.bfloat16, **cuda):
    args = [torch.randn(s).to(dtype) for s in shapes]
    with driver.quiet_torch_logs():
        text = import_torch(Wrap(fn).eval(), *args)
    options = CompileOptions(target="cuda", model_name="m", dump_dir=str(tmp_path),
                             cuda=CudaOptions(cubin=False, **cuda))
    return driver.compile_text(text, "<test>", options, str(tmp_path / "att.so"))


def _naive(q, k, v):
    s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.matmul(torch.softmax(s, dim=-1), v)


def test_naive_attention_is_one_kernel_with_three_tensor_maps(tmp_path):
    meta = _build(_naive, [(2, 3, 200, 64)] * 3, tmp_path)
    assert [k["info"]["path"] for k in meta["kernels"]] == ["attention"]
    info = meta["kernels"][0]["info"]
    assert info["attention"]["mask"] == "none"
    assert info["attention"]["scale"] == pytest.approx(1 / 8)
    assert info["tile"] == [64, 128, 2]  # D64: 128-key tiles, two stages
    launch = meta["plan"]["launches"][0]
    # Q, K, V as (head_dim, rows, batch x heads), boxes of 64 columns: rows past a head's
    # end read zeros. The kernel's first three parameters are the maps.
    q_map = [0, 9, 3, 64, 200, 6, 1, 1, 128, 128 * 200] + [128 * 200 * 6] * 2 + \
        [64, 64, 1, 1, 1, 3, 0]
    assert launch["maps"][0] == q_map
    assert launch["maps"][1] == [1] + q_map[1:12] + [64, 128, 1, 1, 1, 3, 0]
    # One consumer warpgroup and the producer warpgroup.
    assert launch["grid"] == 6 * 4 and launch["block"] == 256
    # Q and two K/V stages; P stays in registers (the P V MMAs' A).
    assert launch["shared_bytes"] == 64 * 64 * 2 + 2 * 2 * 128 * 64 * 2
    ptx = (tmp_path / "m.ptx").read_text()
    # S = Q K^T: 64 / 16 = 4 MMAs of 128 keys, before the loop (the first tile) and in it
    # (the next tile's, issued before this one's softmax); O += P V: 128 / 16 = 8 of 64, in
    # the loop (the previous tile's, in flight during this one's softmax) and after it (the
    # last tile's).
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16", ptx)) == 2 * 4
    pv = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\S* \{[^}]*\}, "
                    r"(\S+ \S+ \S+ \S+)", ptx)
    assert len(pv) == 2 * 8
    # P V's A is four registers (`{%f1, %f2, %f3, %f4}` of 16-bit pairs), not a descriptor.
    assert all(re.fullmatch(r"\{%r\d+, %r\d+, %r\d+, %r\d+\},", a) for a in pv), pv[:2]
    assert "ex2.approx" in ptx
    # No N x N temporary: the plan's buffers are Q, K, V and O.
    assert sorted(b["role"] for b in meta["plan"]["buffers"]) == \
        ["input", "input", "input", "output"]


def test_causal_tile_bound_is_proven_at_compile_time(tmp_path):
    """SDPA's is_causal mask (aranges and a compare) is evaluated here on the whole grid:
    keys past the row are -inf, so each block stops at its diagonal tile."""
    from fusec.compiler.targets.cuda import attention

    seen = []
    real = attention.causal_bound

    def spy(*args):
        seen.append(real(*args))
        return seen[-1]

    attention.causal_bound = spy
    try:
        fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa
        meta = _build(fn, [(1, 2, 300, 128)] * 3, tmp_path)
        assert seen and seen[-1] == 0
        # Not causal, and a mask read from memory: no bound.
        seen.clear()
        _build(_naive, [(1, 2, 300, 128)] * 3, tmp_path)
        assert seen == [None]
        seen.clear()
        masked = lambda q, k, v, m: torch.matmul(torch.softmax(  # noqa: E731
            torch.matmul(q, k.transpose(-2, -1)) + m, dim=-1), v)
        meta = _build(masked, [(1, 2, 96, 64)] * 3 + [(1, 1, 96, 96)], tmp_path)
        assert seen == [None]
        assert meta["kernels"][0]["info"]["attention"]["mask"] == "computed"
    finally:
        attention.causal_bound = real


@pytest.mark.parametrize("fn,shapes,dtype,why", [
    (_naive, [(1, 2, 64, 64)] * 3, torch.float32, "attention on f32"),
    (_naive, [(1, 2, 64, 96)] * 3, torch.bfloat16, "head_dim 96"),
])
def test_what_the_kernel_does_not_take_stays_unfused_with_the_reason(fn, shapes, dtype, why,
                                                                     tmp_path):
    meta = _build(fn, shapes, tmp_path, dtype=dtype)
    assert "attention" not in [k["info"].get("path") for k in meta["kernels"]]
    fusion = (tmp_path / "m.fusion.mlir").read_text()
    assert f'fusion.attention_refused = "{why}' in fusion


def test_attention_off_by_option(tmp_path):
    meta = _build(_naive, [(1, 2, 64, 64)] * 3, tmp_path, attention=False)
    assert "attention" not in [k["info"].get("path") for k in meta["kernels"]]


def test_tensor_map_rows_pad_to_rank_5():
    assert map_entry(1, 9, [256, 300], [512], [64, 128], 3, 16) == \
        [1, 9, 2, 256, 300, 1, 1, 1, 512] + [512 * 300] * 3 + [64, 128, 1, 1, 1, 3, 16]
    with pytest.raises(Exception, match="rank 6"):
        map_entry(0, 9, [1, 2, 3, 4, 5, 6], [2, 4, 8, 16, 32], [1] * 6, 3, 0)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas here")
def test_kernel_has_no_spills(tmp_path):
    _build(_naive, [(2, 2, 256, 128)] * 3, tmp_path)
    out = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(tmp_path / "m.ptx"), "-o",
                          str(tmp_path / "m.cubin")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "0 bytes spill stores" in out.stderr


def _packed(causal: bool, naive: bool):
    def fn(x):
        b, t, d3 = x.shape
        q, k, v = x.split(d3 // 3, dim=2)
        q, k, v = (z.view(b, t, d3 // 192, 64).transpose(1, 2) for z in (q, k, v))
        if naive:
            s = torch.matmul(q, k.transpose(-2, -1)) / 8.0
            keep = torch.ones(t, t, dtype=torch.bool).tril()
            y = torch.matmul(torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1), v)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return y.transpose(1, 2).reshape(b, t, d3 // 3)
    return fn


@pytest.mark.parametrize("t,causal,naive", [(1, False, False), (64, True, True)])
def test_fuzz_regressions_packed_heads(t, causal, naive, tmp_path):
    """Found by test/gpu/fuzz_attention.py (seed 1): one query row and one key (K^T is a
    transpose of unit dims, which the unit-transpose rewrite had turned into reshapes inside
    the attention group: no attention chain left), and a `tril` of a bool constant (its
    `true` printed as `arith.constant true : i1`, which MLIR does not parse). Both one
    kernel, Q, K, V read from the packed [B, T, 3 d] input and O written merged."""
    meta = _build(_packed(causal, naive), [(2, t, 3 * 256)], tmp_path)
    assert [k["info"]["path"] for k in meta["kernels"]] == ["attention"]
    roles = sorted(b["role"] for b in meta["plan"]["buffers"])
    assert roles.count("input") == 1 and roles.count("output") == 1


def test_sdpa_with_a_bool_mask_writes_zeros_for_fully_masked_rows(tmp_path):
    """torch's SDPA decomposition with attn_mask ends in where(rowmax == -inf, 0, P): found
    in HF GPT-2 (SDPA) and BERT; one kernel that writes zeros there (masked_rows = zero),
    the softmax recognised through the 16-bit widening's casts."""
    fn = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa
    args = [torch.randn(1, 2, 96, 64).bfloat16() for _ in range(3)] + \
        [torch.rand(1, 1, 96, 96) > 0.5]
    with driver.quiet_torch_logs():
        text = import_torch(Wrap(fn).eval(), *args)
    options = CompileOptions(target="cuda", model_name="m", cuda=CudaOptions(cubin=False))
    meta = driver.compile_text(text, "<test>", options, str(tmp_path / "m.so"))
    assert [k["info"]["path"] for k in meta["kernels"]] == ["attention"]
    assert meta["kernels"][0]["info"]["attention"]["masked_rows"] == "zero"


def test_16bit_constants_printed_as_numbers_are_read():
    """BERT's and LLaMA's inline bf16 tables print as `dense<[1.0, 0.75, ...]>` (numpy has
    no bf16 buffer): read as MLIR stored them, inf and NaN printed as their bits."""
    import numpy as np
    from mlir import ir

    from fusec.passes.constants import _dense_16bit
    from fusec.dialects import make_context

    with make_context():
        bf = ir.Attribute.parse("dense<[[1.0, 7.5e-01], [-2.5, 0xFF80]]> : tensor<2x2xbf16>")
        half = ir.Attribute.parse("dense<[1.5, 0x7C00]> : tensor<2xf16>")
        splat = ir.Attribute.parse("dense<3.0> : tensor<3xbf16>")
        assert list(np.frombuffer(_dense_16bit(bf), np.uint16)) == \
            [0x3F80, 0x3F40, 0xC020, 0xFF80]
        assert list(np.frombuffer(_dense_16bit(half), np.uint16)) == [0x3E00, 0x7C00]
        assert list(np.frombuffer(_dense_16bit(splat), np.uint16)) == [0x4040] * 3


def test_factored_views_compose_head_split_and_gqa_repeat():
    """The views Q, K, V are read through (attention_layouts): a head split of one
    [B, T, 3 d] tensor is strides (T * 3d, 64, 3d, 1) from the slice's offset; GQA's
    repeat_interleave is a stride-0 factor inside the heads' dim, which the TMA map leaves
    out (tma_dims), reading each K/V head where it is."""
    from fusec.compiler.targets.cuda.attention_layouts import View, _split, _tidy

    # [2, 100, 3 * 512] -> slice at 512 (K) -> [2, 100, 8, 64] -> transpose (0, 2, 1, 3).
    packed = View.dense([2, 100, 1536])
    k = View([packed.dims[0], packed.dims[1], [(512, 1)]], 512)
    heads = _split(k.dims[2], [8, 64])
    assert heads == [[(8, 64)], [(64, 1)]]
    k_view = View([k.dims[0], heads[0], k.dims[1], heads[1]], k.offset)
    assert [_tidy(d) for d in k_view.dims] == [[(2, 153600)], [(8, 64)], [(100, 1536)],
                                               [(64, 1)]]
    # GQA 2 -> 8 heads: [B, 2, 4 (stride 0), N, D] collapsed to B x 8 heads keeps the
    # repeat as its own factor (batch and KV heads merge: they are one row-major dim).
    kv = View([[(2, 2 * 300 * 64)], [(2, 300 * 64)], [(4, 0)], [(300, 64)], [(64, 1)]], 0)
    merged = _tidy([f for d in kv.dims[:3] for f in d])
    assert merged == [(4, 19200), (4, 0)]
    # A split the factors cannot take: 6 = 4 x 1.5.
    assert _split([(6, 1)], [4, 2]) is None
    # Row-major merges: [(2, 12800), (4, 3200)] is one dim of 8 x 3200.
    assert _tidy([(2, 12800), (4, 3200)]) == [(8, 3200)]


def test_model_tile_two_warpgroups_where_blocks_read_many_key_tiles():
    """Head dim 128 leaves one warpgroup 64-key tiles; where a block reads 4 key tiles of
    128 or more on average (half the keys under a causal mask), two warpgroups share
    128-key tiles (BM 128): from S1024 and causal S2048 up (run 223), not at causal S512 or
    S256 (2), not for decoding (one row). At head dim 64 (one warpgroup already takes
    128-key tiles; two there measured 0.95-1.05x at S4096, 0.84x causal: runs 221-222) only
    persistent, from 4 to 16 key tiles a block (GPT-2's T1024, causal S4096: run 228);
    past 16 one warpgroup with three K/V stages (run 223), below 4 with two."""
    from fusec.passes import cost_model
    from fusec.compiler.targets.cuda.device import H200

    def tile(d, q, n, causal):
        t = cost_model.attention_tile(d, 2, H200, q, n, causal)
        return (t.bm, t.bn, t.stages)

    assert tile(128, 4096, 4096, False) == (128, 128, 2)
    assert tile(128, 4096, 4096, True) == (128, 128, 2)
    assert tile(128, 32768, 32768, True) == (128, 128, 2)
    assert tile(128, 2048, 2048, True) == (128, 128, 2)
    assert tile(128, 1024, 1024, False) == (128, 128, 2)
    assert tile(128, 1024, 1024, True) == (128, 128, 2)
    assert tile(128, 512, 512, True) == (64, 64, 2)
    assert tile(128, 256, 256, False) == (64, 64, 2)
    assert tile(128, 1, 8192, False) == (64, 64, 2)
    assert tile(64, 32768, 32768, False) == (64, 128, 3)
    assert tile(64, 4096, 4096, False) == (64, 128, 3)
    # Head dim 64, 4 to 16 key tiles a block: two warpgroups, persistent (run 228).
    assert tile(64, 4096, 4096, True) == (128, 128, 2)
    assert tile(64, 1024, 1024, True) == (128, 128, 2)
    assert tile(64, 2048, 2048, False) == (128, 128, 2)
    assert tile(64, 512, 512, True) == (64, 128, 2)
    assert tile(64, 64, 1024, False) == (64, 128, 2)
    assert tile(64, 1, 8192, False) == (64, 128, 2)
    # The model's tile is the first candidate --tune measures; each candidate fits the SM.
    cands = cost_model.attention_tile_candidates(128, 2, 4096, 4096, H200, causal=False)
    assert (cands[0].bm, cands[0].bn) == (128, 128)
    assert all(t.shared_bytes(2) + 1024 <= H200.shared_bytes_per_unit for t in cands)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas here")
def test_two_warpgroup_tile_builds_consumers_and_a_producer(tmp_path, monkeypatch):
    """Candidate (128, 128, 2) at head dim 128: one CTA of two consumer warpgroups sharing
    each K/V tile and a producer warpgroup (384 threads) whose first thread issues the loads
    as the consumers release each stage; Q and the K/V stages in shared memory, P in
    registers. The producer gives its registers to the consumers (setmaxnreg 24 / 240), and
    the key-tile loop has no block-wide barrier and no warpgroup barrier. S_j+1 would not fit
    beside S_j, O and P (224 words): S_j is issued in step j and waited for (`wait_group 1`)
    before its softmax, and the warpgroups take turns to issue their MMAs. ptxas spills
    nothing (with S_j+1 ahead it spilled 168 bytes, 1.24x slower: run 221). Not the
    persistent schedule (the model's at 3 key tiles a block): forced off."""
    from fusec.passes import cost_model
    from fusec.compiler.targets.cuda.device import H200

    monkeypatch.setattr(cost_model, "ATTENTION_PERSISTENT", False)
    cands = [(t.bm, t.bn, t.stages)
             for t in cost_model.attention_tile_candidates(128, 2, 300, 300, H200)]
    meta = _build(_naive, [(1, 2, 300, 128)] * 3, tmp_path,
                  tile_candidate=cands.index((128, 128, 2)))
    launch = meta["plan"]["launches"][0]
    assert meta["kernels"][0]["info"]["tile"] == [128, 128, 2]
    assert launch["block"] == 384 and launch["grid"] == 2 * 3  # 300 rows in blocks of 128
    assert launch["shared_bytes"] == 128 * 128 * 2 + 2 * 2 * 128 * 128 * 2
    ptx = (tmp_path / "m.ptx").read_text()
    assert re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32\s+(\d+)", ptx) == \
        [("dec", "24"), ("inc", "240")]
    assert len(re.findall(r"bar\.sync\s+0;", ptx)) == 1  # the setup's, before the loop
    assert not re.search(r"bar\.sync\s+%r\d+, 128;", ptx)
    assert len(re.findall(r"bar\.sync\s+%r\d+, 256;", ptx)) == 2
    assert len(re.findall(r"bar\.arrive\s+%r\d+, 256;", ptx)) == 2
    # S = Q K^T (128 / 16 = 8 MMAs) only in the loop; the softmax waits for it alone.
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\S* \{[^}]*\}, %rd",
                          ptx)) == 8
    assert re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)
    out = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(tmp_path / "m.ptx"), "-o",
                          str(tmp_path / "m.cubin")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "0 bytes spill stores" in out.stderr, out.stderr


def test_p_in_registers_where_the_fragments_fit():
    """P V reads P from registers where S_j, O and P_j-1 fit the budget, and S_j+1 is
    issued ahead of S_j's softmax where it fits too (one warpgroup's tiles, two at head dim
    64; not the (128, 128) tile at head dim 128: 224 words spilled, run 221). A head dim of
    256 (not a kernel today) would put P in shared memory."""
    from fusec.passes import cost_model
    from fusec.passes.cost_model import AttentionTile

    regs, ahead = cost_model.attention_p_in_registers, cost_model.attention_scores_ahead
    for tile in (AttentionTile(64, 128, 2, 64), AttentionTile(64, 64, 2, 128),
                 AttentionTile(128, 128, 2, 64), AttentionTile(128, 64, 2, 128)):
        assert regs(tile) and ahead(tile)
    wide = AttentionTile(128, 128, 2, 128)
    assert regs(wide) and not ahead(wide)
    assert not regs(AttentionTile(128, 128, 2, 256)) and ahead(AttentionTile(128, 128, 2, 256))
    assert AttentionTile(64, 128, 2, 64).shared_bytes(2) == 64 * 64 * 2 + 2 * 2 * 128 * 64 * 2
    assert wide.shared_bytes(2) == 128 * 128 * 2 + 2 * 2 * 128 * 128 * 2
    assert AttentionTile(128, 128, 2, 256).shared_bytes(2) == \
        128 * 256 * 2 + 2 * 2 * 128 * 256 * 2 + 2 * 128 * 128 * 2


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas here")
def test_two_warpgroups_with_p_in_registers(tmp_path):
    """Candidate (128, 64, 2) at head dim 128: P in registers (no P buffer, no warpgroup
    barrier per step), and the warpgroups take turns to issue their MMAs: in the loop each
    waits for its turn (named barrier 8 + w, 256 threads) and passes it on; before the loop
    the last one lets the first go, after it the first takes the last one's last turn.
    ptxas spills nothing."""
    from fusec.passes import cost_model
    from fusec.compiler.targets.cuda.device import H200

    cands = [(t.bm, t.bn, t.stages)
             for t in cost_model.attention_tile_candidates(128, 2, 300, 300, H200)]
    meta = _build(_naive, [(1, 2, 300, 128)] * 3, tmp_path,
                  tile_candidate=cands.index((128, 64, 2)))
    launch = meta["plan"]["launches"][0]
    assert launch["shared_bytes"] == 128 * 128 * 2 + 2 * 2 * 64 * 128 * 2
    ptx = (tmp_path / "m.ptx").read_text()
    assert not re.search(r"bar\.sync\s+%r\d+, 128;", ptx)
    assert len(re.findall(r"bar\.sync\s+%r\d+, 256;", ptx)) == 2
    assert len(re.findall(r"bar\.arrive\s+%r\d+, 256;", ptx)) == 2
    pv = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\S* \{[^}]*\}, (\{[^}]*\}),", ptx)
    assert len(pv) == 2 * 4  # 64 keys / 16, in the loop and after it
    out = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(tmp_path / "m.ptx"), "-o",
                          str(tmp_path / "m.cubin")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "0 bytes spill stores" in out.stderr, out.stderr


def test_one_warpgroup_tile_has_a_producer_and_two_ctas_per_sm(tmp_path):
    """A tile of one consumer warpgroup (64 rows) has the producer warpgroup too (256
    threads), and two such CTAs share an SM: each thread starts at 128 registers
    (`.minnctapersm 2`), the consumer rises to 232; nothing spills."""
    meta = _build(_naive, [(1, 2, 256, 64)] * 3, tmp_path)
    assert meta["kernels"][0]["info"]["tile"][0] == 64
    assert meta["plan"]["launches"][0]["block"] == 256
    ptx = (tmp_path / "m.ptx").read_text()
    assert re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32\s+(\d+)", ptx) == \
        [("dec", "24"), ("inc", "232")]
    assert re.search(r"\.minnctapersm 2", ptx)
    if shutil.which("ptxas"):
        out = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(tmp_path / "m.ptx"), "-o",
                              str(tmp_path / "m.cubin")], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert "0 bytes spill stores" in out.stderr and "Used 128 registers" in out.stderr


def test_warps_past_the_last_row_skip_the_softmax(tmp_path):
    """Decoding's one query row: warps 1-3 of the block hold no row, and branch around the
    softmax (its exp2 count is the same, but behind a branch on the warp's first row); a
    block whose rows all exist has no such branch."""
    (tmp_path / "one").mkdir()
    (tmp_path / "full").mkdir()
    _build(_naive, [(1, 2, 1, 64), (1, 2, 256, 64), (1, 2, 256, 64)], tmp_path / "one")
    _build(_naive, [(1, 2, 128, 64)] * 3, tmp_path / "full")
    one = (tmp_path / "one" / "m.cuda.mlir").read_text()
    full = (tmp_path / "full" / "m.cuda.mlir").read_text()
    # (m, l and alpha per row half, the warp's vote, and P's 128 / 4 words: zeros where skipped)
    branch = r"scf\.if %\S+ -> \(f32, f32, f32, f32, f32, f32, i1(, i32){32}\)"
    assert re.search(branch, one)
    assert not re.search(branch, full)
    # The lazy rescale: O is multiplied only on a warp's vote, in both.
    assert "nvvm.vote.sync any" in one and "nvvm.vote.sync any" in full


def test_scores_stay_f32_from_the_accumulator_to_the_softmax(tmp_path):
    """The graph rounds S to bf16 (the matmul's result) and again after its bf16 scale;
    the kernel takes each op's f32 value before the rounding, as FlashAttention does: no
    16-bit conversion or multiply on the softmax's path, one per score for the scale. The
    only 16-bit conversions left are P's (packed, two scores at a time) and O's."""
    _build(_naive, [(2, 3, 200, 64)] * 3, tmp_path)
    ptx = (tmp_path / "m.ptx").read_text()
    assert "mul.rn.bf16" not in ptx and "cvt.f32.bf16" not in ptx
    assert "cvt.rn.bf16.f32" not in ptx  # P and O are converted in pairs
    # A 64 x 128 tile over 128 threads: 64 scores a thread, each scaled once in f32 and
    # passed through one ex2.
    assert len(re.findall(r"\bex2\.approx\.ftz\.f32\b", ptx)) >= 64
    assert len(re.findall(r"\bcvt\.rn\.bf16x2\.f32\b", ptx)) >= 32


def _f32_hex(x: float) -> str:
    import struct

    return "0f" + struct.pack(">f", x).hex().upper()


@pytest.mark.parametrize("form, d, scale", [
    # SDPA: S times 1 / sqrt(d), a Python number the graph applies in f32 (torch's opmath
    # for a bf16 tensor; it was rounded to bf16 first, 0.08837890625, before session 47).
    ("sdpa", 128, 1 / math.sqrt(128)),
    # The naive form: S / sqrt(d), a divide by 8: S times 1 / 8.
    ("naive", 64, 0.125),
])
def test_a_scale_folds_into_exp2(form, d, scale, tmp_path):
    """Where the score chain is S times a positive constant (no mask), X is not computed:
    the row max is c max S and c folds into exp2's multiplier (c log2 e), with c as the
    chain computes it (rounded by its casts)."""
    fn = _naive if form == "naive" else (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v))  # noqa: E731
    _build(fn, [(2, 3, 256, d)] * 3, tmp_path)
    ptx = (tmp_path / "m.ptx").read_text()
    step = _f32_hex(scale * math.log2(math.e))
    # One FMA by c log2 e per score of a step: key tiles of 64 or 128, 32 or 64 a thread.
    assert len(re.findall(rf"fma\.rn\.f32\s+[^;]*{step}", ptx)) >= 32
    # No score is multiplied by c on its own: c appears for the row maxes only.
    assert len(re.findall(rf"mul\.rn\.f32\s+[^;]*{_f32_hex(scale)}", ptx)) <= 2 * 2


def test_a_masked_chain_does_not_fold(tmp_path):
    """An additive mask is part of X: the chain is evaluated, X then exp2's FMA by log2 e."""
    fn = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa
    _build(fn, [(2, 2, 128, 64)] * 3 + [(2, 1, 128, 128)], tmp_path)
    ptx = (tmp_path / "m.ptx").read_text()
    assert _f32_hex(0.125 * math.log2(math.e)) not in ptx
    assert _f32_hex(float.fromhex("0x1.715476p+0")) in ptx  # log2 e


def _interior_of(fn, shapes, tmp_path):
    """(causal_bound, interior_point, interior_scale) as the kernel's build sees them."""
    from fusec.compiler.targets.cuda import attention

    seen = []
    real = attention.interior_point

    def spy(m, q_len, kv_len):
        from fusec.passes.fusion import attention_mask

        seen.append((attention_mask.causal_bound(m, q_len, kv_len), real(m, q_len, kv_len),
                     attention_mask.interior_scale(m, q_len, kv_len)))
        return seen[-1][1]

    attention.interior_point = spy
    try:
        _build(fn, shapes, tmp_path)
    finally:
        attention.interior_point = real
    return seen[-1] if seen else None


def _masked_naive(keep):
    def fn(q, k, v):
        s = torch.matmul(q, k.transpose(-2, -1)) * 0.125
        m, n = s.shape[-2:]
        rows = torch.arange(m)[:, None]
        cols = torch.arange(n)[None, :]
        s = s.masked_fill(~keep(rows, cols), float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)
    return fn


def test_tiles_below_the_diagonal_skip_the_causal_mask(tmp_path):
    """SDPA's causal mask changes nothing below its diagonal: those key tiles evaluate no
    compare and select per score, and the scale folds into exp2 there (S itself is the max
    and exp2's FMA multiplies by c log2 e). Below the diagonal the branch yields the scores
    as the accumulator holds them; on the diagonal, S where key <= row and -inf past it: one
    compare and one select a score, nothing of the chain's arithmetic (its index clamps,
    roundings, the scale and its inverse: about two interior tiles' instructions, run
    226)."""
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa
    assert _interior_of(fn, [(1, 2, 512, 128)] * 3, tmp_path) == (0, (511, 0), 0.125 / 2 ** 0.5)
    text = (tmp_path / "m.cuda.mlir").read_text()
    branch = re.search(r"(%xs\d+):32 = scf\.if", text)
    assert branch, "no split at the diagonal"
    inner = text[branch.end():text.index("} else {", branch.end())]
    assert "arith.select" not in inner and "arith.cmpi" not in inner and \
        "arith.mulf" not in inner
    start = text.index("} else {", branch.end())
    diagonal = text[start:text.index("scf.yield", start)]
    assert len(re.findall(r"arith\.cmpi sle", diagonal)) == 32
    assert len(re.findall(r"arith\.select", diagonal)) == 32
    assert not re.search(r"arith\.(mulf|divf|extf|truncf|minui)", diagonal)
    ptx = (tmp_path / "m.ptx").read_text()
    assert len(re.findall(rf"fma\.rn\.f32\s+[^;]*{_f32_hex(math.log2(math.e) / math.sqrt(128))}",
                          ptx)) >= 32


@pytest.mark.parametrize("keep, what", [
    # A sliding window: keys far below the diagonal are masked too.
    (lambda r, c: (c <= r) & (c > r - 100), "window"),
    # A key masked below the diagonal (the first key of every row past the first).
    (lambda r, c: (c <= r) & ((c > 0) | (r == 0)), "a hole"),
])
def test_masks_that_change_scores_below_the_diagonal_keep_the_chain(keep, what, tmp_path):
    """The diagonal bound holds (every key past the row is masked) but the mask also acts
    below it: no interior point, every tile evaluates the chain."""
    bound, point, scale = _interior_of(_masked_naive(keep), [(1, 2, 256, 64)] * 3, tmp_path)
    assert bound == 0 and point is None and scale is None, what
    assert not re.search(r"%xs\d+:\d+ = scf\.if", (tmp_path / "m.cuda.mlir").read_text())


def test_a_position_bias_below_the_diagonal_is_not_a_scale(tmp_path):
    """A causal ALiBi-like bias (S c + (key - row) / 8) is not the same everywhere below the
    diagonal: no interior point."""
    def fn(q, k, v):
        s = torch.matmul(q, k.transpose(-2, -1)) * 0.125
        m, n = s.shape[-2:]
        rel = (torch.arange(n)[None, :] - torch.arange(m)[:, None]).to(s.dtype) / 8
        s = (s + rel).masked_fill(torch.ones(m, n, dtype=torch.bool).triu(1), float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)

    bound, point, scale = _interior_of(fn, [(1, 2, 256, 64)] * 3, tmp_path)
    assert bound == 0 and point is None


def test_a_clamp_that_agrees_near_zero_is_caught_far_away(tmp_path):
    """max(S c, -10) below the diagonal agrees with S c at the near sample scores but not at
    the far ones: the interior is not S c, and no scale is folded."""
    def fn(q, k, v):
        s = torch.matmul(q, k.transpose(-2, -1)) * 0.125
        m, n = s.shape[-2:]
        floor = torch.where(torch.arange(n)[None, :] <= torch.arange(m)[:, None] - 3,
                            torch.tensor(-10.0), torch.tensor(float("-inf"))).to(s.dtype)
        s = torch.maximum(s, floor)
        s = s.masked_fill(torch.ones(m, n, dtype=torch.bool).triu(1), float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)

    bound, point, scale = _interior_of(fn, [(1, 2, 256, 64)] * 3, tmp_path)
    assert bound == 0 and point is None and scale is None


def _bottom_right(q, k, v):
    s = torch.matmul(q, k.transpose(-2, -1)) / 8
    m, n = s.shape[-2:]
    keep = torch.arange(n)[None, :] <= torch.arange(m)[:, None] + (n - m)
    return torch.matmul(torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1), v)


def _bias(q, k, v):
    s = torch.matmul(q, k.transpose(-2, -1)) * 0.125
    m, n = s.shape[-2:]
    rel = (torch.arange(n)[None, :] - torch.arange(m)[:, None]).to(s.dtype) / 8
    s = (s + rel).masked_fill(torch.ones(m, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


@pytest.mark.parametrize("fn, shapes", [
    (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     [(1, 2, 300, 64)] * 3),
    (_bottom_right, [(1, 2, 200, 64), (1, 2, 330, 64), (1, 2, 330, 64)]),
    (_masked_naive(lambda r, c: (c <= r) & (c > r - 100)), [(1, 2, 256, 64)] * 3),
    (_masked_naive(lambda r, c: (c <= r) & ((c > 0) | (r == 0))), [(1, 2, 256, 64)] * 3),
    (_masked_naive(lambda r, c: c <= r + 3), [(1, 2, 250, 64)] * 3),
    (_masked_naive(lambda r, c: c != r), [(1, 2, 128, 64)] * 3),
    (_bias, [(1, 2, 256, 64)] * 3),
])
def test_blocks_classify_masks_as_the_whole_grid_does(fn, shapes, tmp_path):
    """Grids over MASK_GRID_MAX scores are classified by blocks of rows (intervals past and
    below the diagonal band, the band point by point): on grids small enough for both,
    the two give the same bound, interior point and scale (or the blocks, proving less,
    none where the grid has one; never another)."""
    from fusec.compiler.targets.cuda import attention
    from fusec.passes.fusion import attention_mask as am

    seen = []  # classified in the spy, while the module lives
    real = attention.causal_bound

    def spy(m, q_len, kv_len):
        scores = am._Scores(m, am.value_key(m.qk.results[0]), q_len, kv_len)
        seen.append((am._classify(scores), am._classify_blocks(scores)))
        return real(m, q_len, kv_len)

    attention.causal_bound = spy
    try:
        _build(fn, shapes, tmp_path)
    finally:
        attention.causal_bound = real
    whole, blocks = seen[-1]
    assert blocks == whole, (whole, blocks)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas here")
@pytest.mark.parametrize("causal, slots, grid", [
    # Causal: units are pairs of row blocks (the longest with the shortest): 8 blocks of 128
    # rows a head, 4 pairs, 2 heads. A CTA per unit where the SMs outnumber them.
    (True, None, 8),
    # Three CTAs walk the 8 units: b, b + 3, b + 6.
    (True, 3, 3),
    # Without a mask a unit is one row block: 16 of them.
    (False, None, 16),
])
def test_persistent_attention_walks_blocks(causal, slots, grid, tmp_path, monkeypatch):
    """The persistent schedule (ATTENTION_PERSISTENT) on the (128, 128, 2) tile: at most a
    CTA per SM slot, each looping over its work units; the producer thread loads each
    block's Q once the consumers' last S of the block before is done (a Q-empty mbarrier,
    one arrival per consumer warp), its K/V ring counted on across blocks; the producer
    keeps 48 registers and the consumers 224 (the CTA's 168 x 384 at launch: 232 asked for
    more than that, and setmaxnreg would have waited forever); ptxas spills nothing."""
    from fusec.compiler.targets.cuda import attention
    from fusec.passes import cost_model

    monkeypatch.setattr(cost_model, "ATTENTION_PERSISTENT", True)
    monkeypatch.setattr(attention, "PERSISTENT_SLOTS", slots)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa
    meta = _build(fn, [(1, 2, 1024, 128)] * 3, tmp_path)
    assert meta["kernels"][0]["info"]["tile"] == [128, 128, 2]
    launch = meta["plan"]["launches"][0]
    assert launch["grid"] == grid and launch["block"] == 384
    ptx = (tmp_path / "m.ptx").read_text()
    assert re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32\s+(\d+)", ptx) == \
        [("dec", "48"), ("inc", "224")]
    # Q; K and V full and empty per stage; Q empty.
    assert len(re.findall(r"mbarrier\.init\.shared\S*", ptx)) == 1 + 4 * 2 + 1
    text = (tmp_path / "m.cuda.mlir").read_text()
    assert text.count(f"step %") >= 2 and re.search(r"scf\.for %pu = %\S+ to ", text) and \
        re.search(r"scf\.for %cu = %\S+ to ", text)
    out = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(tmp_path / "m.ptx"), "-o",
                          str(tmp_path / "m.cubin")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "0 bytes spill stores" in out.stderr, out.stderr


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas here")
def test_the_models_attention_at_gpt2s_shape_is_persistent(tmp_path):
    """Unforced, GPT-2's attention (T1024, head dim 64, causal: 4 key tiles of 128 a block
    on average) is the persistent two-warpgroup kernel (run 228: 0.0587 -> 0.0521 ms): a
    CTA per SM slot over the causal pairs of row blocks, the producer at 48 registers and
    the Q-empty mbarrier; ptxas spills nothing."""
    from fusec.compiler.targets.cuda.device import H200

    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa
    meta = _build(fn, [(2, 12, 1024, 64)] * 3, tmp_path)
    assert meta["kernels"][0]["info"]["tile"] == [128, 128, 2]
    launch = meta["plan"]["launches"][0]
    # 24 heads x 4 pairs of 128-row blocks = 96 units: fewer than the SMs, a CTA each.
    assert launch["block"] == 384 and launch["grid"] == min(24 * 4, H200.parallel_units)
    ptx = (tmp_path / "m.ptx").read_text()
    assert re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32\s+(\d+)", ptx) == \
        [("dec", "48"), ("inc", "224")]
    assert len(re.findall(r"mbarrier\.init\.shared\S*", ptx)) == 1 + 4 * 2 + 1  # Q empty
    out = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(tmp_path / "m.ptx"), "-o",
                          str(tmp_path / "m.cubin")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "0 bytes spill stores" in out.stderr, out.stderr


def test_persistent_attention_takes_the_producer_and_fa3_order(monkeypatch):
    """Persistent only where the producer warpgroup loads across blocks and P is in
    registers, and then S_j is issued in step j (S_j+1 ahead would read a stage the
    producer may be refilling for the next block). By the model: two warpgroups' tiles
    whose blocks read at most 16 key tiles of 128 on average (run 228), not 32 (slower
    there), not one warpgroup's tiles (slower persistent), not where S_j+1 ahead is forced."""
    from fusec.passes import cost_model
    from fusec.passes.cost_model import AttentionTile

    wide, narrow = AttentionTile(128, 128, 2, 128), AttentionTile(64, 128, 2, 64)
    wide64 = AttentionTile(128, 128, 2, 64)
    persistent = cost_model.attention_persistent
    assert persistent(wide, True, 16) and persistent(wide64, True, 4)
    assert persistent(wide, True, cost_model.attention_key_tiles(4096, causal=True))
    assert not persistent(wide, True, cost_model.attention_key_tiles(4096, causal=False))
    assert not persistent(wide, False, 4) and not persistent(narrow, True, 4)
    # S_j+1 ahead fits the registers of the (128, 128) tile at head dim 64; persistent,
    # the kernel takes FlashAttention-3's order instead.
    assert cost_model.attention_scores_ahead(wide64)
    assert not cost_model.attention_scores_ahead(wide64, persistent=True)
    monkeypatch.setattr(cost_model, "ATTENTION_SCORES_AHEAD", True)
    assert not persistent(wide64, True, 4)
    monkeypatch.setattr(cost_model, "ATTENTION_SCORES_AHEAD", None)
    # Forced (A/B): on wherever the producer is, one warpgroup's tiles too; off everywhere.
    monkeypatch.setattr(cost_model, "ATTENTION_PERSISTENT", True)
    assert persistent(narrow, True, 64) and not persistent(wide, False, 4)
    monkeypatch.setattr(cost_model, "ATTENTION_PERSISTENT", False)
    assert not persistent(wide, True, 4)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas here")
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("shape", [(1, 2, 1024, 128), (1, 2, 1024, 64)])
def test_setmaxnreg_stays_within_the_launch(persistent, shape, tmp_path, monkeypatch):
    """The producer's setmaxnreg decrease and the consumers' increase never ask for more
    than the registers the CTA was launched with (ptxas's count a thread x the block): an
    increase past them waits forever (48 + 2 x 232 on the (128, 128) tile did, found by
    review before it ran)."""
    from fusec.passes import cost_model

    monkeypatch.setattr(cost_model, "ATTENTION_PERSISTENT", persistent)
    monkeypatch.setattr(cost_model, "ATTENTION_SCORES_AHEAD", False if persistent else None)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa
    meta = _build(fn, [shape] * 3, tmp_path)
    block = meta["plan"]["launches"][0]["block"]
    ptx = (tmp_path / "m.ptx").read_text()
    (_, dec), (_, inc) = re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32\s+(\d+)", ptx)
    out = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(tmp_path / "m.ptx"), "-o",
                          str(tmp_path / "m.cubin")], capture_output=True, text=True)
    launched = int(re.search(r"Used (\d+) registers", out.stderr).group(1))
    assert 128 * int(dec) + (block - 128) * int(inc) <= launched * block
    assert "0 bytes spill stores" in out.stderr, out.stderr
