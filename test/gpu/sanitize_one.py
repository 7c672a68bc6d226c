"""Run every small CUDA artifact once and check it; meant to run under compute-sanitizer:

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/sanitize_one.py DIR

Also the TransformerEncoderLayer at batch 1 (small: launch-bound), plainly and through its
CUDA graph (`fusec_run_graph`). Artifacts that were not built are skipped, and said so.
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
names = [n for n in bench.ALL if "small" in n] + ["transformer_b1"]
for name in names:
    if not (folder / f"{name}.so").exists():
        print(f"{name}: not built, skipped", flush=True)
        continue
    model = bench.FusecModel(folder / f"{name}.so")
    xs = bench.inputs_for(name, "cuda", seed=3)
    if bench.ALL[name][0] == "tel":
        ref = bench.function_for(name, "cuda", torch.float64)(xs[0].double())
    else:
        ref = bench.FUNCTIONS[bench.ALL[name][0]](*[x.double() for x in xs])
    for graph in (False, True) if name == "transformer_b1" else (False,):
        outs = model.outputs_like("cuda")
        model.bind(xs, outs, graph=graph)()
        torch.cuda.synchronize()
        err = bench.rel_err(outs[0], ref)
        print(f"{name}{' (graph)' if graph else ''}: {model.kernels} launches, relative error "
              f"{err:.2e}", flush=True)
        assert err < bench.tolerance(name)
print("sanitize_one: all ran")
