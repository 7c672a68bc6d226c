"""fusion-fold-norm-prologue: a LayerNorm / RMSNorm in front of Linears folded into their
weights and epilogues (issue 14's GEMM prologue).

The rewritten graph is plain linalg, so its numerics are checked here on the CPU target
(the pass runs in the CUDA pipeline only: the CPU's matmul kernels fuse no epilogue of
this kind), against float64 on fresh random inputs; the CUDA pipeline's kernels (the
statistics' row kernel, our tensor-core GEMM with the epilogue) are checked from the plan,
which needs no GPU."""

from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")
nn = torch.nn

import fusec  # noqa: E402
from fusec.compiler import driver, pipeline  # noqa: E402
from fusec.compiler.frontend import import_torch_module  # noqa: E402
from fusec.passes.registry import run_pipeline  # noqa: E402
from mlir import ir  # noqa: E402


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))


class LlamaRMSNorm(nn.Module):
    """As HF's LLaMA writes it: in f32, cast back, times the weight in the model's type."""

    def __init__(self, k: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k))

    def forward(self, h):
        dtype = h.dtype
        h = h.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(dtype)


NORMS = {"layernorm": nn.LayerNorm, "rmsnorm": nn.RMSNorm, "llama_rmsnorm": LlamaRMSNorm}


class NormLinears(nn.Module):
    """A norm read by one Linear (with bias, then GELU) or by two (q, v: summed)."""

    def __init__(self, norm: str, k: int, n: int, two: bool):
        super().__init__()
        self.norm = NORMS[norm](k)
        self.q = nn.Linear(k, n)
        self.v = nn.Linear(k, n, bias=False) if two else None
        with torch.no_grad():  # affine parameters away from their init
            for p in self.norm.parameters():
                p.normal_(1.0, 0.5)

    def forward(self, x):
        h = self.norm(x)
        y = self.q(h) + self.v(h) if self.v is not None else nn.functional.gelu(self.q(h))
        return y.float()


def _rel(a, b) -> float:
    a = torch.as_tensor(np.asarray(a, dtype=np.float64))
    return float((a - b).norm() / b.norm())


def _folded_text(model, x, folds: list | None = None) -> tuple[str, str]:
    """The model at the `linalg` stage, and after the fold (then canonicalize, cse);
    `folds` gets the number of matmuls folded per normalised tensor."""
    from fusec.passes.fusion.norm_prologue import FoldNormProloguePass

    imported = import_torch_module(model, x)
    module = driver.parse(driver.as_text(imported.module), "<test>")
    pipeline.run_stage(module, "linalg", pipeline.CompileOptions(), "<test>")
    before = str(module)
    fold = FoldNormProloguePass(device="nvidia-h200")
    with module.context, ir.Location.unknown():
        fold.run(module.operation)
    run_pipeline(module, ["canonicalize", "cse"])
    if folds is not None:
        folds.extend(fold.folded)
    return before, str(module)


# K 256 against N 64: where the cost model folds (the normalised tensor, M x K, is what the
# fold saves; each output element's epilogue, M x N per GEMM, what it costs).
CASES = [(norm, shape, two, dtype)
         for norm in NORMS
         for shape, two in (((4096, 256), False), ((2, 2048, 256), True))
         for dtype in ("bfloat16", "float16")]


@pytest.mark.parametrize("norm,shape,two,dtype", CASES)
def test_fold_matches_float64(norm, shape, two, dtype):
    dtype = getattr(torch, dtype)
    torch.manual_seed(0)
    model = NormLinears(norm, 256, 64, two).to(dtype).eval()
    reference = NormLinears(norm, 256, 64, two)
    reference.load_state_dict(model.state_dict())
    reference = reference.double().eval()
    x = torch.randn(*shape).to(dtype)
    before, after = _folded_text(model, x)
    # The matmuls read the model's input itself (through one collapse of [B, T]).
    def reading_the_input(text: str) -> int:
        found = re.search(r"(%\w+) = tensor.collapse_shape %arg0 ", text)
        source = "%arg0" if len(shape) == 2 else found.group(1) if found else None
        return text.count(f"linalg.matmul ins({source},") if source else 0

    assert reading_the_input(before) == 0
    assert reading_the_input(after) == (2 if two else 1), after
    compiled = fusec.compile(after, cache=False)
    for scale, shift in ((1.0, 0.0), (0.3, 40.0)):  # and a large mean, a small spread
        x = (torch.randn(*shape, dtype=torch.float64) * scale + shift).to(dtype)
        with torch.no_grad():
            want = reference(x.double())
            torch_error = _rel(model.float()(x.float()), want) if dtype == torch.float16 \
                else _rel(model(x), want)
            model.to(dtype)
        error = _rel(compiled(x), want)
        # bf16 / f16 output: its rounding is the error (torch's own, within 25%).
        assert error < 1e-2 and error < 1.25 * max(torch_error, 4e-4), \
            (scale, shift, error, torch_error)


def test_fold_on_the_cuda_target_is_two_kernels():
    """LayerNorm + Linear + bias + GELU: the statistics' row kernel and our GEMM with the
    fold's epilogue; without the fold, the LayerNorm's kernel writes the normalised tensor."""
    from fusec.compiler.targets.cuda.options import CudaOptions

    torch.manual_seed(1)
    model = NormLinears("layernorm", 256, 64, False).to(torch.bfloat16).eval()
    x = torch.randn(4096, 256, dtype=torch.bfloat16)
    plans = {}
    for fold in (True, False):
        compiled = fusec.compile(model, x, target="cuda", cache=False,
                                 cuda=CudaOptions(arch="sm_90a", norm_prologue=fold))
        plans[fold] = [(k["kind"], k["info"]) for k in compiled.kernels]
    folded, plain = plans[True], plans[False]
    assert [i["path"] for _, i in folded] == ["fast", "tc_gemm"], folded
    assert [i["path"] for _, i in plain] == ["fast", "tc_gemm"], plain
    # The row kernel reads x and writes two [M] vectors, not the [M, K] tensor.
    assert folded[0][1]["bytes"] < plain[0][1]["bytes"] / 1.9
    assert folded[1][1]["epilogue"] == ["norm", "bias", "cast", "gelu", "cast"], folded[1][1]
    assert plain[1][1]["epilogue"] == ["bias", "cast", "gelu", "cast"], plain[1][1]


def test_fold_keeps_the_bias_of_a_zero_gamma_row():
    """LayerNorm weight zero on some channels (their W' rows are zero): the bias's term is
    beta @ W from W itself, not from W' (it would have lost those channels' bias)."""
    torch.manual_seed(2)
    model = NormLinears("layernorm", 256, 64, False).to(torch.float16).eval()
    with torch.no_grad():
        model.norm.weight[:64] = 0
        model.norm.bias.normal_(0.0, 2.0)
    reference = NormLinears("layernorm", 256, 64, False)
    reference.load_state_dict(model.state_dict())
    reference = reference.double().eval()
    x = torch.randn(4096, 256).to(torch.float16)
    _, after = _folded_text(model, x)
    assert "linalg.matmul ins(%arg0," in after
    compiled = fusec.compile(after, cache=False)
    x = torch.randn(4096, 256).to(torch.float16)
    want = reference(x.double())
    assert _rel(compiled(x), want) < 1e-3


def test_fold_in_the_small_llama_matches_float64():
    """The zoo's small LLaMA in bf16 (GQA, RoPE, SwiGLU, RMSNorms before the projections):
    the RMSNorms that the cost model folds (q, k, v read x itself) keep the model within
    torch's own bf16 error of float64."""
    pytest.importorskip("transformers")
    import importlib.util
    import sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "fusec_bench_zoo", Path(__file__).resolve().parents[2] / "bench" / "zoo.py")
    zoo = sys.modules.get(spec.name)
    if zoo is None:
        zoo = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = zoo
        spec.loader.exec_module(zoo)
    model, inputs = zoo.ZOO["llama"].build("small")
    model = model.to(torch.bfloat16).eval()
    folds: list[int] = []
    _, after = _folded_text(model, *inputs, folds=folds)
    # Each layer's two RMSNorms: before q, k, v and before the MLP's gate and up (the final
    # norm's LM head, 1000 columns against K = 128, is left: its epilogue would cost more
    # than the normalised tensor saved).
    assert folds == [3, 2, 3, 2], folds
    compiled = fusec.compile(after, cache=False)
    ids = torch.randint(0, 64, tuple(inputs[0].shape))
    with torch.no_grad():
        torch_bf16 = model(ids).float().double()
        want = model.double()(ids)
    error = _rel(compiled(ids), want)
    assert error < 1.25 * _rel(torch_bf16.numpy(), want), error


def test_rmsnorm_before_three_projections_is_two_kernels_on_cuda():
    """LLaMA's RMSNorm on [B, T, K] read by q, k, v: the statistics' row kernel and three
    GEMMs (one kernel of siblings) whose epilogues read the [B, T, 1] statistics per row of
    their [B T, N] products
    (through the reshape: tc_gemm's epilogue reads a reshape at its source's flat offset);
    unfolded, the norm's kernels write the normalised tensor."""
    from fusec.compiler.targets.cuda.options import CudaOptions

    class QKV(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = LlamaRMSNorm(1024)
            self.q, self.k, self.v = (nn.Linear(1024, n, bias=False) for n in (1024, 256, 256))

        def forward(self, x):
            h = self.norm(x)
            return self.q(h), self.k(h), self.v(h)

    torch.manual_seed(3)
    model = QKV().to(torch.bfloat16).eval()
    x = torch.randn(2, 4096, 1024, dtype=torch.bfloat16)
    compiled = fusec.compile(model, x, target="cuda", cache=False,
                             cuda=CudaOptions(arch="sm_90a"))
    paths = [k["info"]["path"] for k in compiled.kernels]
    # The three GEMMs read one x: one kernel of sibling GEMMs (gemm_siblings.py), each
    # projection's epilogue the norm's statistics and the cast (four kernels apart).
    assert paths == ["fast", "tc_gemm"], paths
    gemm = compiled.kernels[1]["info"]
    assert gemm["siblings"] == [1024, 256, 256]
    assert gemm["epilogue"] == ["norm", "cast"] * 3
    apart = fusec.compile(model, x, target="cuda", cache=False,
                          cuda=CudaOptions(arch="sm_90a", gemm_siblings=False))
    assert [k["info"]["path"] for k in apart.kernels] == ["fast", "tc_gemm", "tc_gemm",
                                                          "tc_gemm"]
    assert all(k["info"]["epilogue"] == ["norm", "cast"] for k in apart.kernels[1:])
    # Unfolded: the norm one row kernel too (its result's collapse for the Linears a view,
    # `--fusion-gpu-peel-reshapes`: it was six kernels of one op each), then the GEMMs (one
    # kernel of siblings).
    plain = fusec.compile(model, x, target="cuda", cache=False,
                          cuda=CudaOptions(arch="sm_90a", norm_prologue=False))
    kernels = [(k["info"]["path"], len(k["ops"])) for k in plain.kernels]
    assert len(kernels) == 2 and kernels[0] == ("fast", 6), kernels
    assert plain.kernels[0]["info"]["bytes"] > 1.9 * compiled.kernels[0]["info"]["bytes"]
