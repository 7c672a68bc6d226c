"""Run example artifacts once each and check them; meant to run under compute-sanitizer:

    compute-sanitizer --tool memcheck --error-exitcode 9 \
        python3 test/gpu/sanitize_examples.py DIR mlp attention
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
for name in sys.argv[2:]:
    spec = importlib.util.spec_from_file_location(f"example_{name}",
                                                  ROOT / "examples" / name / "model.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    model = bench.FusecModel(folder / f"example_{name}.so")
    xs = [x.cuda() for x in example.example_inputs()]
    outs = model.outputs_like("cuda")
    model.bind(xs, outs)()
    torch.cuda.synchronize()
    with torch.no_grad():
        ref = example.model().double().cuda()(*[x.double() for x in xs])
    err = bench.rel_err(outs[0], ref)
    print(f"example {name}: {model.kernels} kernels, relative error {err:.2e}", flush=True)
    assert err < 1e-5
print("sanitize_examples: all ran")
