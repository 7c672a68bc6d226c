"""Hugging Face architectures beyond the zoo (bench/hf_architectures.py), tiny configs on the
CPU against float64 on fresh inputs: those whose import once failed or came out wrong
(RWKV's time shift, a negative pad torch-mlir folded away; Swin's relative-position
table indexed by a buffer, which torch-mlir's importer refused), and one of each family
the sweep covers that the zoo does not (ALiBi, multi-query attention, a state-space scan)."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_mlir")
pytest.importorskip("transformers")

_spec = importlib.util.spec_from_file_location(
    "fusec_bench_hf_architectures",
    Path(__file__).resolve().parents[2] / "bench" / "hf_architectures.py")
hf = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = hf
_spec.loader.exec_module(hf)

# Kernel launches of fusec's CPU plan today, pinned as the zoo's are. (Mamba: the
# elementwise work computed from its projection is one tiled kernel, not recomputed in each
# of the scan's steps, `epilogue-first`; Swin: a matmul its group yields beside later work
# is a kernel of its own, `split_trailing_beside`.)
KERNELS = {"rwkv": 70, "swin": 24, "bloom": 18, "gpt_bigcode": 14, "mamba": 64}


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("model_type", sorted(KERNELS))
def test_architecture_matches_float64(model_type):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        row = hf.check(model_type)
    assert row["status"] == "OK", row
    assert row["error"] < hf.TOLERANCE
    assert row["kernels"] == KERNELS[model_type]
