"""Fuzzing the CPU attention kernel: the H200 fuzzer's random attention programs
(test/gpu/fuzz_attention.py: naive or SDPA, causal top-left or bottom-right from aranges, an
additive mask read from memory with fully masked rows, GQA by repeat_interleave or expand,
Q, K, V packed in one tensor, odd lengths, bf16 and f16, head dims 64 and 128) through the
CPU target, each against float64 on fresh inputs: 1e-2 in relative norm, NaN exactly where
float64 has them, and an attention kernel exactly where the cost model says it pays
(`cost_model.cpu_attention_pays`; below it the planner's kernels)."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fusec  # noqa: E402
from fusec.passes import cost_model  # noqa: E402

PROGRAMS = 24
SEED = 11


def _fuzzer():
    path = Path(__file__).resolve().parents[1] / "gpu" / "fuzz_attention.py"
    spec = importlib.util.spec_from_file_location("fuzz_attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FUZZ = _fuzzer()
rng = random.Random(SEED)
SPECS = [FUZZ.random_spec(rng, i) for i in range(PROGRAMS)]


class Wrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


@pytest.mark.parametrize("spec", SPECS, ids=[s["name"] for s in SPECS])
def test_fuzzed_attention_on_the_cpu(spec):
    fn = FUZZ.program(spec)
    xs = FUZZ.inputs(spec, seed=SEED * 1000 + int(spec["name"][1:]), device="cpu")
    module = fusec.compile(Wrap(fn).eval(), *xs, cache=False)
    out = np.asarray(module(*xs)).astype(np.float64)
    ref = fn(*[x.double() for x in xs]).numpy()
    nan_ref = np.isnan(ref)
    assert (np.isnan(out) == nan_ref).all()
    keep = ~nan_ref
    err = np.linalg.norm(out[keep] - ref[keep]) / max(np.linalg.norm(ref[keep]), 1e-30)
    assert err <= 1e-2, err
    kinds = [k["kind"] for k in module.kernels]
    assert ("attention" in kinds) == cost_model.cpu_attention_pays(spec["m"], spec["n"])
