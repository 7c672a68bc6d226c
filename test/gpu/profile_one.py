"""Run one CUDA artifact a few times (for ncu): python3 test/gpu/profile_one.py DIR NAME"""

import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("fusec_bench_gpu", ROOT / "bench" / "gpu.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

folder, name = Path(sys.argv[1]), sys.argv[2]
model = bench.FusecModel(folder / f"{name}.so")
xs = bench.inputs_for(name, "cuda", seed=5)
outs = model.outputs_like("cuda")
call = model.bind(xs, outs)
for _ in range(3):
    call()
torch.cuda.synchronize()
print(name, "ran")
