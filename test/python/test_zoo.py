"""The model zoo's small configs (bench/zoo.py) on the CPU: each whole model compiles, matches
float64 on fresh inputs (fp32 relative error under 1e-5) with its number of kernel launches
pinned, and does the same through `torch.compile(model, backend="fusec")`; the model fusec
refuses (Mixtral's data-dependent expert loop) is refused at the model's line, and runs
through torch.compile, the loop's pieces compiled shape by shape."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")
pytest.importorskip("transformers")

import fusec  # noqa: E402
from fusec.compiler import dynamo  # noqa: E402
from fusec.compiler.frontend import FrontendError  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "fusec_bench_zoo", Path(__file__).resolve().parents[2] / "bench" / "zoo.py")
zoo = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = zoo  # its dataclasses look their module up
_spec.loader.exec_module(zoo)

TOLERANCE = 1e-5

# Kernel launches per call of fusec's CPU plan for each small model today: a change of plan
# shows here as well as in the numbers. (The CNNs' convolution kernels are split at their
# paddings, so that every part has tiles for every thread: `tile.split_at_pads`; LLaMA's
# query and key projections have the head-split slice RoPE reads as a kernel of its own:
# `tile.split_trailing_beside`. The decoders' packed-sequence cumsum over their positions
# is computed at compile time: `fusion-fold-constants`, three launches fewer each; the
# top-2 router's topk and scatter are row maxima and selects: `decompositions._small_topk`.
# A BatchNorm + ReLU between two convolutions is the first one's epilogue, not the second
# one's prologue: `epilogue-first`, through the reshapes between them.)
LAUNCHES = {
    "gpt2": 16, "gpt2_sdpa": 16, "bert": 18, "llama": 29, "vit": 20, "t5_encoder": 17,
    "whisper_encoder": 19, "resnet18": 24, "resnet50": 19, "resnext50": 20, "mobilenet_v2": 18,
    "mobilenet_v3_small": 23, "top2_moe": 12,
}
REFUSED = {"mixtral_moe": "control flow depends on a tensor's value"}
# Kernel launches of the H200 plan (target cuda, built here: no GPU needed) for each small
# model in bf16, weights as constants: a change of the GPU plan shows here too. (ResNet-18
# was 113 before its BatchNorms' parameter arithmetic was folded, `fusion-fold-parameters`;
# ViT 44 before its embedding was cut before the LayerNorm, not split per op; the top-2 MoE
# 34 before its router's softmax and top-k, an expert iota compared in the payload, were one
# row kernel; LLaMA 42 before its first RMSNorm's groups went to the fast emitter as one
# horizontal row kernel, session 52.)
# LLaMA 37: each layer's SwiGLU gate and up projections one GEMM pair (41 apart).
# BERT 32, LLaMA 35, ViT 29, T5 26, Whisper 28: each layer's q, k and v projections one
# kernel of sibling GEMMs (36, 37, 33, 30, 32 apart; GPT-2's QKV is one Linear already).
# The CNNs' BatchNorms in the epilogue of the convolution before them, and a 1x1 stride-1
# convolution one GEMM with no transposes (2026-12-07): ResNet-18 69 -> 66, ResNet-50 56 ->
# 53, ResNeXt-50 52 -> 50, MobileNetV2 28 -> 20, MobileNetV3 44 -> 35. ResNet-18 66 -> 64: its
# max pool a kernel of its own, not recomputed in layer1's 3x3 gathers (session 65).
CUDA_BF16_LAUNCHES = {
    "gpt2": 24, "gpt2_sdpa": 24, "bert": 32, "llama": 35, "vit": 29, "t5_encoder": 26,
    "whisper_encoder": 28, "resnet18": 64, "resnet50": 53, "resnext50": 50,
    "mobilenet_v2": 20, "mobilenet_v3_small": 35, "top2_moe": 12,
}


def test_every_zoo_model_is_covered():
    assert set(LAUNCHES) | set(REFUSED) == set(zoo.ZOO)
    assert set(CUDA_BF16_LAUNCHES) == set(LAUNCHES)


@pytest.mark.parametrize("name", sorted(CUDA_BF16_LAUNCHES))
def test_zoo_model_gpu_plan(name):
    model, example = zoo.ZOO[name].build("small")
    model = model.eval().to(torch.bfloat16)
    example = tuple(x.to(torch.bfloat16) if x.is_floating_point() else x for x in example)
    compiled = fusec.compile(model, *example, target="cuda")
    assert compiled.target == "cuda"
    paths = [k.get("info", {}).get("path") for k in compiled.kernels]
    assert "fallback" not in paths, paths  # every kernel an emitter's or a library call
    assert len(compiled.kernels) == CUDA_BF16_LAUNCHES[name], [k["ops"] for k in compiled.kernels]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()
    dynamo.reset()
    yield
    torch._dynamo.reset()


def _reference(model, inputs) -> np.ndarray:
    import copy

    with torch.no_grad():
        return copy.deepcopy(model).double()(
            *[x.double() if x.is_floating_point() else x for x in inputs]).numpy()


def _rel(out, ref: np.ndarray) -> float:
    out = out.detach().double().numpy() if isinstance(out, torch.Tensor) else out
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_zoo_model_matches_float64(name):
    entry = zoo.ZOO[name]
    model, example = entry.build("small")
    compiled = fusec.compile(model, *example)
    fresh = zoo.fresh_inputs(entry, "small", seed=1)
    ref = _reference(model, fresh)
    assert np.isfinite(ref).all() and np.abs(ref).max() > 0
    assert _rel(compiled(*[x.numpy() for x in fresh]), ref) < TOLERANCE, name
    assert len(compiled.kernels) == LAUNCHES[name], [k["ops"] for k in compiled.kernels]


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_zoo_model_through_torch_compile(name):
    """Dynamo's graphs (the weights as graph inputs) through fusec: no graph falls back."""
    entry = zoo.ZOO[name]
    model, _ = entry.build("small")
    fresh = zoo.fresh_inputs(entry, "small", seed=2)
    ref = _reference(model, fresh)
    with torch.no_grad():
        out = torch.compile(model, backend="fusec")(*fresh)
    assert _rel(out, ref) < TOLERANCE, name
    assert dynamo.fallbacks() == [], dynamo.fallbacks()


def test_refused_model_is_located_and_runs_through_torch_compile():
    entry = zoo.ZOO["mixtral_moe"]
    model, example = entry.build("small")
    with pytest.raises(FrontendError) as refusal:
        fusec.compile(model, *example)
    message = str(refusal.value)
    # Located at the library's line that branches on data, not at fusec's.
    assert "modeling_mixtral.py:" in message.splitlines()[0]
    assert REFUSED["mixtral_moe"] in message

    fresh = zoo.fresh_inputs(entry, "small", seed=3)
    ref = _reference(model, fresh)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' note on the experts' implementation
        out = torch.compile(model, backend="fusec")(*fresh)
    assert _rel(out, ref) < TOLERANCE
    # The experts' loop gives Dynamo graphs of data-dependent token counts, which it makes
    # dynamic: each is compiled per concrete shape, none runs eagerly.
    assert dynamo.fallbacks() == [], dynamo.fallbacks()


def test_fresh_inputs_are_new_and_in_range():
    entry = zoo.ZOO["bert"]
    _, example = entry.build("small")
    fresh = zoo.fresh_inputs(entry, "small", seed=5)
    ids, mask, types = fresh
    assert [x.shape for x in fresh] == [x.shape for x in example]
    assert not torch.equal(ids, example[0]) and int(ids.max()) < 1000
    assert set(mask.unique().tolist()) == {0, 1} and set(types.unique().tolist()) <= {0, 1}
