"""Run one artifact of test/gpu/movement.py's cases on fresh inputs once (for
compute-sanitizer, to name the kernel that faults):

    python3 test/gpu/run_one.py DIR CASE [SUFFIX]     e.g. llama_block .fb
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


if __name__ == "__main__":
    folder, name = Path(sys.argv[1]), sys.argv[2]
    suffix = sys.argv[3] if len(sys.argv) > 3 else ""
    mv = _load("fusec_movement", ROOT / "test" / "gpu" / "movement.py")
    bench = mv._bench()
    model = bench.FusecModel(folder / "mv" / f"{name}{suffix}.so")
    xs = mv._inputs(name, 1)
    outs = model.outputs_like("cuda")
    model.bind(xs, outs)()
    torch.cuda.synchronize()
    print(name + suffix, "ran", model.kernels, "kernels")
