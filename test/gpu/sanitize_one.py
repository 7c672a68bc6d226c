"""Run every small CUDA artifact once and check it; meant to run under compute-sanitizer:

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/sanitize_one.py DIR
"""

import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("fusec_bench_gpu", ROOT / "bench" / "gpu.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

folder = Path(sys.argv[1])
for name in [n for n in bench.ALL if "small" in n]:
    model = bench.FusecModel(folder / f"{name}.so")
    xs = bench.inputs_for(name, "cuda", seed=3)
    outs = model.outputs_like("cuda")
    model.bind(xs, outs)()
    torch.cuda.synchronize()
    fn = bench.FUNCTIONS[bench.ALL[name][0]]
    err = bench.rel_err(outs[0], fn(*[x.double() for x in xs]))
    print(f"{name}: relative error {err:.2e}", flush=True)
    assert err < bench.tolerance(name)
print("sanitize_one: all ran")
