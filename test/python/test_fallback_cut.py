"""The GPU's fallback path (a tile per thread) and a group whose tiling leaves ops beside the
tile loop: the group is cut in two there (`tile._cut_before_loop`), not split into one
kernel per op. ViT's embedding (patches transposed, the class token concatenated, positions
added, then the first LayerNorm) was a kernel per op: the small ViT in bf16 for the H200 had
44 kernels, now 34."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

import fusec
from fusec.passes.tiling.tile import SPLIT_BEFORE_LOOP, SPLIT_FOR_THREADS

_spec = importlib.util.spec_from_file_location(
    "fusec_bench_zoo_fc", Path(__file__).resolve().parents[2] / "bench" / "zoo.py")
zoo = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = zoo
_spec.loader.exec_module(zoo)


def test_vit_embedding_is_cut_in_two_not_split_per_op(tmp_path):
    model, inputs = zoo.ZOO["vit"].build("small")
    model = model.eval().to(torch.bfloat16)
    inputs = tuple(i.to(torch.bfloat16) for i in inputs)
    compiled = fusec.compile(model, inputs, target="cuda", cache=False, dump_dir=str(tmp_path))
    tiled = (tmp_path / "model.tiled.mlir").read_text()
    assert SPLIT_FOR_THREADS not in tiled
    # The movement (transpose, concat) and the rows after it: two kernels.
    assert tiled.count(f'fusion.split = "{SPLIT_BEFORE_LOOP}"') == 2
    assert len(compiled.kernels) == 34, [k["ops"] for k in compiled.kernels]
