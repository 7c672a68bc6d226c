"""The norm fold (`fusion-fold-norm-prologue`) on the GPU: LayerNorm / RMSNorm + Linears with
constant weights, folded and not, against float64, eager and Inductor.

    python test/gpu/norm_fold.py build DIR     (here, no GPU): DIR/<case>.<fold|plain>.so,
                                               DIR/<case>.pt (the module's weights)
    python3 test/gpu/norm_fold.py run DIR      (the GPU): per case and mode, the error
                                               against float64 beside torch's own bf16
                                               error, kernels, and the times of fusec (both
                                               modes), eager and Inductor
    python3 test/gpu/norm_fold.py check DIR CASE   one folded call (for compute-sanitizer)

Cases (bf16, weights as the module's parameters, so fusec compiles them as constants):
LayerNorm(2048) + Linear(2048 -> 512) + GELU on 8192 rows (2 kernels folded, 2 plain: the
LayerNorm's and cuBLASLt's); LLaMA's RMSNorm(1024) read by q, k, v (1024 -> 1024, 256, 256;
GQA's widths) on 2 x 4096 rows (4 kernels folded: the statistics and three GEMMs whose
epilogues read them through a reshape; 9 plain). Exit 1 if an error is over max(1e-2,
1.25x torch's own bf16 error) or a folded build did not fold.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[2]


class LlamaRMSNorm(nn.Module):
    def __init__(self, k: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(k))

    def forward(self, h):
        dtype = h.dtype
        h = h.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(dtype)


class LayerNormDown(nn.Module):
    def __init__(self, k: int = 2048, n: int = 512):
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(k), nn.Linear(k, n)

    def forward(self, x):
        return nn.functional.gelu(self.fc(self.norm(x)))


class RMSNormQKV(nn.Module):
    def __init__(self, k: int = 1024, kv: int = 256):
        super().__init__()
        self.norm = LlamaRMSNorm(k)
        self.q = nn.Linear(k, k, bias=False)
        self.k = nn.Linear(k, kv, bias=False)
        self.v = nn.Linear(k, kv, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return self.q(h), self.k(h), self.v(h)


CASES = {"layernorm_down": (LayerNormDown, (8192, 2048)),
         "rmsnorm_qkv": (RMSNormQKV, (2, 4096, 1024))}
MODES = {"fold": True, "plain": False}


def _model(name: str) -> nn.Module:
    cls, _ = CASES[name]
    torch.manual_seed(0)
    model = cls().eval()
    with torch.no_grad():  # the norms' affine parameters away from their init
        for p in model.norm.parameters():
            p.normal_(1.0, 0.3)
    return model


def _bench():
    spec = importlib.util.spec_from_file_location("fusec_bench_gpu", ROOT / "bench" / "gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def build(out_dir: Path) -> int:
    from fusec.compiler import driver, pipeline as pl
    from fusec.compiler.frontend import import_torch
    from fusec.compiler.targets.cuda import CudaOptions

    out_dir.mkdir(parents=True, exist_ok=True)
    bad = 0
    for name, (_, shape) in CASES.items():
        model = _model(name).to(torch.bfloat16)
        torch.save(model.state_dict(), out_dir / f"{name}.pt")
        with driver.quiet_torch_logs():
            text = import_torch(model, torch.randn(shape).to(torch.bfloat16))
        for mode, fold in MODES.items():
            module = driver.parse(text, "<norm_fold>")
            options = pl.CompileOptions(target="cuda", model_name=name,
                                        cuda=CudaOptions(norm_prologue=fold))
            pl.lower(module, options)
            meta = pl.build_so(module, options, str(out_dir / f"{name}.{mode}.so"))
            launches = meta["plan"]["launches"]
            epilogues = [k["info"].get("epilogue") for k in launches
                         if k["info"].get("path") == "tc_gemm"]
            folded = sum(1 for e in epilogues if e and "norm" in e)
            print(name, mode, [k["info"].get("path") for k in launches], epilogues, flush=True)
            bad += fold and folded == 0
    return 1 if bad else 0


def _inputs(name: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(CASES[name][1], generator=g).to(torch.bfloat16).cuda()


def run(art_dir: Path) -> int:
    bench = _bench()
    bad = 0
    for name in CASES:
        model = _model(name).to(torch.bfloat16)
        model.load_state_dict(torch.load(art_dir / f"{name}.pt"))
        model = model.cuda()
        x = _inputs(name, 1)
        with torch.no_grad():
            ref = model.double()(x.double())
            model.to(torch.bfloat16)
            eager = model(x)
        ref = ref if isinstance(ref, tuple) else (ref,)
        eager = eager if isinstance(eager, tuple) else (eager,)
        torch_err = max(bench.rel_err(e, r) for e, r in zip(eager, ref))
        compiled = torch.compile(model)
        with torch.no_grad():
            compiled(x)
        row = {"case": name, "err_torch": torch_err}
        for mode in MODES:
            fm = bench.FusecModel(art_dir / f"{name}.{mode}.so")
            outs = fm.outputs_like("cuda")
            call = fm.bind([x], outs)
            call()
            torch.cuda.synchronize()
            err = max(bench.rel_err(o, r) for o, r in zip(outs, ref))
            ok = err <= max(1e-2, 1.25 * torch_err)
            bad += not ok
            row[f"err_{mode}"], row[f"ok_{mode}"] = err, ok
            row[f"kernels_{mode}"] = fm.kernels
            row[f"{mode}_ms"] = round(bench.time_ms(call, 50, warmup=5), 4)
        with torch.no_grad():
            row["eager_ms"] = round(bench.time_ms(lambda: model(x), 50, warmup=5), 4)
            row["inductor_ms"] = round(bench.time_ms(lambda: compiled(x), 50, warmup=5), 4)
        row["fold_vs_plain"] = round(row["plain_ms"] / row["fold_ms"], 3)
        row["fold_vs_best_of_eager_inductor"] = round(
            min(row["eager_ms"], row["inductor_ms"]) / row["fold_ms"], 3)
        print(json.dumps(row), flush=True)
    return 1 if bad else 0


def check(art_dir: Path, name: str) -> int:
    bench = _bench()
    fm = bench.FusecModel(art_dir / f"{name}.fold.so")
    outs = fm.outputs_like("cuda")
    fm.bind([_inputs(name, 2)], outs)()
    torch.cuda.synchronize()
    print(name, "ran", [tuple(o.shape) for o in outs])
    return 0


if __name__ == "__main__":
    mode, where = sys.argv[1], Path(sys.argv[2])
    if mode == "build":
        sys.exit(build(where))
    if mode == "check":
        sys.exit(check(where, sys.argv[3]))
    sys.exit(run(where))
