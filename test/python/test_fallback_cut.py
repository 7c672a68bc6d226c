"""Groups no group-level emitter builds whole, on the GPU: cut where the emitters can take
the pieces, not split into one kernel per op, and not left to the fallback path (a thread per
tile) where the emitters build every op. ViT's embedding (patches transposed, the class
token concatenated, positions added, then the first LayerNorm) was a kernel per op: the
small ViT in bf16 for the H200 had 44 kernels; cut before the LayerNorm's first reduction
(`rewrites._pieces_at_gathered_reduction`, a concat as a gather), it is a data-movement
kernel and a row kernel: 33."""

from __future__ import annotations

import collections
import importlib.util
import sys
from pathlib import Path

import torch

import fusec
from fusec.passes.tiling.tile import SPLIT_FOR_THREADS

_spec = importlib.util.spec_from_file_location(
    "fusec_bench_zoo_fc", Path(__file__).resolve().parents[2] / "bench" / "zoo.py")
zoo = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = zoo
_spec.loader.exec_module(zoo)


def test_vit_embedding_is_a_movement_kernel_and_a_row_kernel(tmp_path):
    model, inputs = zoo.ZOO["vit"].build("small")
    model = model.eval().to(torch.bfloat16)
    inputs = tuple(i.to(torch.bfloat16) for i in inputs)
    compiled = fusec.compile(model, inputs, target="cuda", cache=False, dump_dir=str(tmp_path))
    tiled = (tmp_path / "model.tiled.mlir").read_text()
    assert SPLIT_FOR_THREADS not in tiled
    paths = collections.Counter(k["info"].get("path") for k in compiled.kernels)
    assert "fallback" not in paths, paths
    at = [i for i, k in enumerate(compiled.kernels) if "tensor.concat" in k["ops"]]
    assert len(at) == 1 and compiled.kernels[at[0]]["info"]["path"] == "movement", at
    norm = compiled.kernels[at[0] + 1]["info"]  # the LayerNorm, reading the embedding
    assert (norm["path"], norm.get("shape")) == ("fast", "row"), norm
    # 29: each layer's q, k and v projections one kernel of sibling GEMMs (33 apart).
    assert len(compiled.kernels) == 29, [k["ops"] for k in compiled.kernels]
