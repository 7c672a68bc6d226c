"""The attention kernel family (compiler/targets/cuda/attention.py) on the H200: numerics
against float64 on fresh random inputs, and times against SDPA (torch's best backend),
eager and Inductor in the same process.

    python test/gpu/attention.py build DIR [CASE ...]   here: DIR/att/<case>.so, cases.json
                                                         (ATTENTION_TILE=bm,bn,stages: that
                                                         tile where it is a candidate;
                                                         ATTENTION_PRODUCER=1 / 0 / all:
                                                         the producer warpgroup on / off /
                                                         for one warpgroup too;
                                                         ATTENTION_P_REGISTERS=1 / 0,
                                                         ATTENTION_PINGPONG=1 / 0 / always:
                                                         P in registers, warpgroups taking
                                                         turns, on / off (always: with P
                                                         in shared memory too);
                                                         ATTENTION_PERSISTENT=1 / 0: a
                                                         CTA per SM slot looping over the
                                                         row blocks, or not;
                                                         ATTENTION_AHEAD=1 / 0: S_j+1
                                                         before S_j's softmax or not)
    python3 test/gpu/attention.py run DIR [CASE ...]     the H200: numerics (twice), kernels,
                                                          times (CUDA events, medians)
    python3 test/gpu/attention.py check DIR [CASE ...]   numerics only (compute-sanitizer)
    python3 test/gpu/attention.py profile DIR CASE       fusec's kernel twice, then SDPA
                                                          twice (under ncu)

Tolerances: 1e-2 (bf16 / f16 operands, fp32 accumulation) against float64, and no worse
than 1.5x torch's own error in the same dtype; fully masked rows must be NaN where the
float64 reference is (the unfused softmax's 0 / 0). Exit 1 on any miss, or when a case is not
one attention kernel.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
bf16, f16 = torch.bfloat16, torch.float16


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def naive(q, k, v):
    s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.matmul(torch.softmax(s, dim=-1), v)


def masked(q, k, v, mask):
    """An additive mask read from memory (a padding mask broadcast over heads)."""
    s = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1])) + mask
    return torch.matmul(torch.softmax(s.float(), dim=-1).to(q.dtype), v)


def gqa_repeat(q, k, v):
    """LLaMA's GQA: K and V heads repeated by repeat_interleave, then SDPA causal."""
    rep = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, dim=1),
                                          v.repeat_interleave(rep, dim=1), is_causal=True)


def gqa_expand(q, k, v):
    """GQA through expand + reshape (HF's repeat_kv)."""
    b, hkv, n, d = k.shape
    rep = q.shape[1] // hkv
    k = k[:, :, None].expand(b, hkv, rep, n, d).reshape(b, hkv * rep, n, d)
    v = v[:, :, None].expand(b, hkv, rep, n, d).reshape(b, hkv * rep, n, d)
    return F.scaled_dot_product_attention(q, k, v)


def head_split(x):
    """GPT-2's attention between its projections: Q, K, V split from one [B, T, 3 d] tensor
    and merged back: read and written in place."""
    b, t, d3 = x.shape
    d = d3 // 3
    q, k, v = (z.view(b, t, d // 64, 64).transpose(1, 2) for z in x.split(d, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(b, t, d)


def _qkv(b, h, m, n, d, dtype):
    return [((b, h, m, d), dtype), ((b, h, n, d), dtype), ((b, h, n, d), dtype)]


# name: (function, input specs, description, time it)
CASES = {
    "sdpa_odd_d64": (sdpa, _qkv(2, 3, 200, 200, 64, bf16), "SDPA B2 H3 S200 D64 bf16", False),
    "sdpa_causal_odd_d64": (sdpa_causal, _qkv(2, 3, 200, 200, 64, bf16),
                            "SDPA causal B2 H3 S200 D64 bf16", False),
    "naive_cross_d128": (naive, _qkv(2, 2, 100, 300, 128, bf16),
                         "naive, Q 100 rows, K/V 300, D128 bf16", False),
    "sdpa_f16_d128": (sdpa, _qkv(1, 4, 256, 256, 128, f16), "SDPA B1 H4 S256 D128 f16", False),
    "masked_d64": (masked, _qkv(2, 2, 128, 192, 64, bf16) + [((2, 1, 128, 192), bf16)],
                   "additive padding mask input, some rows fully masked, D64 bf16", False),
    "gqa_repeat_d64": (gqa_repeat, [((2, 8, 192, 64), bf16), ((2, 2, 192, 64), bf16),
                                    ((2, 2, 192, 64), bf16)],
                       "GQA 8/2 heads by repeat_interleave, causal, D64 bf16", False),
    "gqa_expand_d128": (gqa_expand, [((2, 8, 130, 128), bf16), ((2, 4, 250, 128), bf16),
                                     ((2, 4, 250, 128), bf16)],
                        "GQA 8/4 heads by expand + reshape, Q 130 / K,V 250, D128", False),
    "head_split_d64": (head_split, [((2, 100, 3 * 512), bf16)],
                       "Q, K, V split from [B, T, 3 d], merged back, causal, D64", False),
    "head_split_t7": (head_split, [((3, 7, 3 * 256), bf16)],
                      "the split and merge at T = 7, causal (fuzz_attention seed 7: the "
                      "mask of an odd key count's last key was evaluated one key early)",
                      False),
    "decode_b8_h32": (sdpa, _qkv(8, 32, 1, 8192, 128, bf16),
                      "decode: B8 H32, 1 query row, 8192 keys, D128 bf16", True),
    "long_causal_s32768": (sdpa_causal, _qkv(1, 32, 32768, 32768, 128, bf16),
                           "SDPA causal B1 H32 S32768 D128 bf16", True),
    "gpt2_attention_t1024": (head_split, [((8, 1024, 3 * 768), bf16)],
                             "GPT-2's attention B8 T1024 H12 D64 (split, causal, merged)",
                             True),
    "sdpa_s4096_d128": (sdpa, _qkv(8, 16, 4096, 4096, 128, bf16),
                        "SDPA B8 H16 S4096 D128 bf16", True),
    "sdpa_causal_s4096_d128": (sdpa_causal, _qkv(8, 16, 4096, 4096, 128, bf16),
                               "SDPA causal B8 H16 S4096 D128 bf16", True),
    "bert_masked_s128": (masked, _qkv(2, 12, 128, 128, 64, bf16) + [((2, 1, 128, 128), bf16)],
                         "BERT-base's attention: B2 H12 S128 D64, a padding mask", True),
    "vit_s197": (sdpa, _qkv(2, 12, 197, 197, 64, bf16), "ViT-B/16's attention: B2 H12 S197 "
                 "D64", True),
    "sdpa_s2048_d128": (sdpa, _qkv(8, 16, 2048, 2048, 128, bf16),
                        "SDPA B8 H16 S2048 D128 bf16", True),
    "sdpa_causal_s2048_d128": (sdpa_causal, _qkv(8, 16, 2048, 2048, 128, bf16),
                               "SDPA causal B8 H16 S2048 D128 bf16", True),
    "sdpa_s1024_d128": (sdpa, _qkv(8, 16, 1024, 1024, 128, bf16),
                        "SDPA B8 H16 S1024 D128 bf16", True),
    "sdpa_causal_s1024_d128": (sdpa_causal, _qkv(8, 16, 1024, 1024, 128, bf16),
                               "SDPA causal B8 H16 S1024 D128 bf16", True),
    "sdpa_s4096_d64": (sdpa, _qkv(8, 16, 4096, 4096, 64, bf16),
                       "SDPA B8 H16 S4096 D64 bf16", True),
    "sdpa_causal_s4096_d64": (sdpa_causal, _qkv(8, 16, 4096, 4096, 64, bf16),
                              "SDPA causal B8 H16 S4096 D64 bf16", True),
    "naive_s4096_d128": (naive, _qkv(8, 16, 4096, 4096, 128, bf16),
                         "naive B8 H16 S4096 D128 bf16", True),
}


def _bench():
    spec = importlib.util.spec_from_file_location("fusec_bench_gpu", ROOT / "bench" / "gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _inputs(name: str, seed: int, device: str = "cuda") -> list[torch.Tensor]:
    fn, specs, _, _ = CASES[name]
    g = torch.Generator(device=device).manual_seed(seed)
    out = []
    for i, (shape, dtype) in enumerate(specs):
        if i == 3:  # the additive mask: 0 or -inf, the first 8 query rows fully masked
            keep = torch.rand(shape, device=device, generator=g) > 0.3
            keep[..., :8, :] = False
            x = torch.zeros(shape, device=device).masked_fill(~keep, float("-inf"))
        else:
            x = torch.randn(shape, device=device, generator=g)
        out.append(x.to(dtype))
    return out


def build(out_dir: Path, only: list[str] | None = None) -> dict:
    from fusec.compiler import driver
    from fusec.compiler.frontend import import_torch
    from fusec.compiler.pipeline import CompileOptions
    from fusec.compiler.targets.cuda.options import CudaOptions

    from fusec.compiler.targets.cuda.device import H200
    from fusec.passes import cost_model

    # The attention tile: the model's (or the tuning cache's), or ATTENTION_TILE=bm,bn,stages
    # where it is one of the case's candidates (cost_model.attention_tile_candidates, built
    # as `fusec --cuda-tile-candidate i`; a case without it is not built).
    want = tuple(int(x) for x in os.environ["ATTENTION_TILE"].split(",")) \
        if os.environ.get("ATTENTION_TILE") else None
    if os.environ.get("ATTENTION_PRODUCER"):  # 1 / 0 / all: the producer warpgroup on /
        from fusec.compiler.targets.cuda import attention  # off / for one warpgroup too
        attention.PRODUCER_WARPGROUP = os.environ["ATTENTION_PRODUCER"] in ("1", "all")
        attention.PRODUCER_ONE_WARPGROUP = os.environ["ATTENTION_PRODUCER"] == "all"
    if os.environ.get("ATTENTION_P_REGISTERS"):  # 1 / 0: P V reads P from registers / from
        cost_model.ATTENTION_P_IN_REGISTERS = os.environ["ATTENTION_P_REGISTERS"] == "1"
    if os.environ.get("ATTENTION_AHEAD"):  # 1 / 0: S_j+1 issued before S_j's softmax or not
        cost_model.ATTENTION_SCORES_AHEAD = os.environ["ATTENTION_AHEAD"] == "1"
    if os.environ.get("ATTENTION_PERSISTENT"):  # 1 / 0: a CTA per SM slot over the blocks
        cost_model.ATTENTION_PERSISTENT = os.environ["ATTENTION_PERSISTENT"] == "1"
    if os.environ.get("ATTENTION_PINGPONG"):  # 1 / 0: consumer warpgroups take turns or not
        from fusec.compiler.targets.cuda import attention
        attention.WARPGROUP_PINGPONG = {"1": True, "0": False, "always": "always"}[
            os.environ["ATTENTION_PINGPONG"]]

    Wrap = _bench().Wrap
    folder = out_dir / "att"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cases.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    for name in CASES:
        if only and name not in only:
            continue
        fn, specs, desc, _ = CASES[name]
        args = [torch.zeros(s, dtype=d) for s, d in specs]
        candidate = -1
        if want:
            if len(specs) == 1:  # [B, T, 3 d], heads of 64
                m = n = specs[0][0][1]
                d = 64
            else:
                m, d, n = specs[0][0][2], specs[0][0][3], specs[1][0][2]
            causal = fn in (sdpa_causal, gqa_repeat, head_split)  # as choose_tiles sees it
            tiles = [(t.bm, t.bn, t.stages) for t in
                     cost_model.attention_tile_candidates(d, 2, m, n, H200, causal)]
            if want not in tiles:
                continue
            candidate = tiles.index(want)
        with driver.quiet_torch_logs():
            text = import_torch(Wrap(fn), *args)
        t0 = time.perf_counter()
        meta = driver.compile_text(text, f"<attention {name}>",
                                   CompileOptions(target="cuda", model_name=name,
                                                  cuda=CudaOptions(tile_candidate=candidate)),
                                   str(folder / f"{name}.so"))
        entry = {"description": desc, "compile_s": round(time.perf_counter() - t0, 3),
                 "kernels": len(meta["kernels"]),
                 "paths": [k["info"].get("path") for k in meta["kernels"]],
                 "tiles": [k["info"].get("tile") for k in meta["kernels"]
                           if k["info"].get("path") == "attention"]}
        report[name] = entry
        print(name, json.dumps(entry), flush=True)
    path.write_text(json.dumps(report, indent=1))
    return report


def _errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, bool]:
    """(relative norm error over the rows the reference defines, NaN rows agree)."""
    nan_ref = torch.isnan(ref)
    nan_out = torch.isnan(out.double())
    same_nans = bool(torch.equal(nan_ref, nan_out))
    keep = ~nan_ref
    o, r = out.double()[keep], ref[keep]
    return float(torch.linalg.norm(o - r) / torch.linalg.norm(r)), same_nans


def check(art_dir: Path, names: list[str]) -> list[dict]:
    bench = _bench()
    rows = []
    for name in names:
        fn, _, _, timed = CASES[name]
        row = {"name": name}
        model = bench.FusecModel(art_dir / "att" / f"{name}.so")
        errs, nans = [], True
        for trial in range(1 if timed else 2):
            xs = _inputs(name, int(time.time_ns() % 2**31) + trial)
            outs = model.outputs_like("cuda")
            for o in outs:
                o.fill_(float("nan"))
            model.bind(xs, outs)()
            torch.cuda.synchronize()
            if timed and len(xs) == 3:  # float64 over all heads does not fit: a few
                heads = 1 if xs[0].shape[2] > 8192 else 8
                xs = [x[:1, :heads] for x in xs]
                outs = [o[:1, :heads] for o in outs]
            elif timed:  # [B, T, 3 d] -> [B, T, d]: the first batch
                xs = [x[:1] for x in xs]
                outs = [o[:1] for o in outs]
            ref = fn(*[x.double() for x in xs])
            err, same = _errors(outs[0], ref)
            errs.append(err)
            nans = nans and same
            if os.environ.get("FUSEC_TORCH_REFERENCE", "1") != "0":
                # torch's own error in the same dtype (under racecheck, leave its kernels
                # out: FUSEC_TORCH_REFERENCE=0; cuDNN's SDPA reports hazards of its own)
                t_err, _ = _errors(fn(*xs), ref)
                row["torch_err"] = max(row.get("torch_err", 0.0), t_err)
            else:
                row["torch_err"] = 0.0
        row["err"] = max(errs)
        row["nan_rows_agree"] = nans
        row["tol"] = max(1e-2, 1.5 * row["torch_err"]) if row["torch_err"] < 1e-2 else 1e-2
        row["kernels"] = model.kernels
        row["ok"] = row["err"] <= row["tol"] and nans
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def sdpa_operands(name: str, xs: list[torch.Tensor]) -> tuple:
    """(q, k, v, attn_mask, is_causal) for SDPA on case `name`'s inputs: an additive mask
    is SDPA's attn_mask; Q, K and V split from [B, T, 3 d] become contiguous heads of 64,
    causal."""
    mask = xs[3] if len(xs) > 3 else None
    if len(xs) >= 3:
        return (*xs[:3], mask, "causal" in name)
    b, t, d3 = xs[0].shape
    q, k, v = (z.view(b, t, d3 // 192, 64).transpose(1, 2).contiguous()
               for z in xs[0].split(d3 // 3, dim=2))
    return q, k, v, mask, True


def profile(art_dir: Path, name: str) -> int:
    """Launch fusec's kernel for `name` twice, then SDPA's twice: for ncu, with no timing
    or checking around them."""
    bench = _bench()
    xs = _inputs(name, 1)
    model = bench.FusecModel(art_dir / "att" / f"{name}.so")
    call = model.bind(xs, model.outputs_like("cuda"))
    q, k, v, mask, causal = sdpa_operands(name, xs)
    for _ in range(2):
        call()
    for _ in range(2):
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    torch.cuda.synchronize()
    return 0


def run(art_dir: Path, names: list[str]) -> int:
    bench = _bench()
    built = json.loads((art_dir / "att" / "cases.json").read_text())
    rows = check(art_dir, names)
    ok = all(r["ok"] and built[r["name"]]["paths"] == ["attention"] for r in rows)
    for row in rows:
        name = row["name"]
        fn, _, _, timed = CASES[name]
        if not timed:
            continue
        xs = _inputs(name, 1)
        model = bench.FusecModel(art_dir / "att" / f"{name}.so")
        out = model.outputs_like("cuda")
        # ATTENTION_COMPARE=sdpa: against SDPA alone (tile variants; no Inductor compiles).
        full = os.environ.get("ATTENTION_COMPARE", "all") != "sdpa"
        ind = torch.compile(fn) if full else None
        if full:
            ind(*xs)
        q, k, v, mask, causal = sdpa_operands(name, xs)
        times = {"fusec": bench.time_ms(model.bind(xs, out), 20),
                 "sdpa": bench.time_ms(lambda: F.scaled_dot_product_attention(
                     q, k, v, attn_mask=mask, is_causal=causal), 20)}
        if full:
            times.update({"eager": bench.time_ms(lambda: fn(*xs), 10),
                          "inductor": bench.time_ms(lambda: ind(*xs), 20)})
        b, h, m, d = q.shape
        flops = 4 * b * h * m * k.shape[2] * d * (0.5 if causal and m > 1 else 1.0)
        moved = sum(x.numel() * x.element_size() for x in xs) + \
            sum(o.numel() * o.element_size() for o in out)
        row["hbm_floor_ms"] = round(moved / bench.copy_bandwidth() * 1e3, 4)
        row.update({"ms": {key: round(val, 4) for key, val in times.items()},
                    "tflops_fusec": round(flops / times["fusec"] / 1e9, 1),
                    "vs_sdpa": round(times["sdpa"] / times["fusec"], 3),
                    "gpu_kernels_fusec": bench.count_kernels(model.bind(xs, out))})
        if full:
            row.update({"vs_inductor": round(times["inductor"] / times["fusec"], 3),
                        "kernels_inductor": bench.count_kernels(lambda: ind(*xs))})
        print(json.dumps(row), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    names = sys.argv[3:] or list(CASES)
    if mode == "build":
        build(folder, sys.argv[3:] or None)
        sys.exit(0)
    if mode == "check":
        rows = check(folder, names)
        sys.exit(0 if all(r["ok"] for r in rows) else 1)
    if mode == "profile":
        sys.exit(profile(folder, names[0]))
    sys.exit(run(folder, names))
