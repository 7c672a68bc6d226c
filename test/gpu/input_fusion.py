"""An `input` fusion group on the GPU: test/passes/fusion-input.mlir's @sum_and_exp (a row sum
and an elementwise exp of one 4096x4096 tensor, planned as ONE kernel that reads x once).

    python test/gpu/input_fusion.py build DIR    here: fusec's pipeline for target cuda ->
                                                 DIR/input_sum_and_exp.so (+ .json: groups,
                                                 launches)
    python3 test/gpu/input_fusion.py run DIR     the H200: both outputs vs float64 torch on
                                                 fresh random data (twice), then fusec vs
                                                 eager (sum + exp: two kernels) timed with
                                                 CUDA events, and the HBM floor (x read once,
                                                 exp(x) and the sums written).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = "input_sum_and_exp"


def case_text() -> str:
    text = (ROOT / "test" / "passes" / "fusion-input.mlir").read_text()
    case = next(c for c in text.split("// -----") if "func.func @sum_and_exp" in c)
    return "\n".join(line for line in case.splitlines() if not line.startswith("//"))


def build(out_dir: Path) -> dict:
    import mlir.ir as ir

    from fusec.compiler import pipeline as pl
    from fusec.dialects import make_context
    from fusec.passes.inline_groups import groups_in

    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with make_context() as ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(case_text())
        options = pl.CompileOptions(target="cuda", model_name=NAME)
        pl.lower(module, options, stop_after="fusion")
        kinds = [str(g.attributes["kind"]).strip('"') for g in groups_in(module.operation)]
        pl.lower(module, options)
        meta = pl.build_so(module, options, str(out_dir / f"{NAME}.so"))
    report = {"group_kinds": kinds, "launches": [[k["symbol"], k["grid"], k["block"],
                                                  k["info"].get("path")]
                                                 for k in meta["plan"]["launches"]],
              "compile_s": round(time.perf_counter() - start, 3)}
    (out_dir / f"{NAME}.json").write_text(json.dumps(report))
    return report


def _bench():
    spec = importlib.util.spec_from_file_location("fusec_bench_gpu", ROOT / "bench" / "gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def check(art_dir: Path) -> tuple[list, object, list]:
    """Run the artifact twice on fresh data: [(sum error, exp error)], the model, its
    last inputs and outputs."""
    import torch

    bench = _bench()
    model = bench.FusecModel(art_dir / f"{NAME}.so")
    errs = []
    for trial in range(2):
        g = torch.Generator(device="cuda").manual_seed(int(time.time_ns() % 2**31) + trial)
        x = torch.randn(4096, 4096, device="cuda", generator=g)
        outs = model.outputs_like("cuda")
        model.bind([x], outs)()
        torch.cuda.synchronize()
        xd = x.double()
        errs.append((bench.rel_err(outs[0], xd.sum(1)), bench.rel_err(outs[1], xd.exp())))
    return errs, model, [x, outs]


def run(art_dir: Path) -> int:
    bench = _bench()
    report = json.loads((art_dir / f"{NAME}.json").read_text())
    errs, model, (x, outs) = check(art_dir)
    ok = all(e < 1e-5 for pair in errs for e in pair)
    call = model.bind([x], outs)
    fusec_ms = bench.time_ms(call, 50)
    eager_ms = bench.time_ms(lambda: (x.sum(1), x.exp()), 50)
    bandwidth = bench.copy_bandwidth()
    floor_ms = (4096 * 4096 * 4 * 2 + 4096 * 4) / bandwidth * 1e3
    print(f"{NAME}: groups {report['group_kinds']}, launches {report['launches']}; "
          f"relative errors (sum, exp) {[(f'{a:.1e}', f'{b:.1e}') for a, b in errs]}; "
          f"fusec {fusec_ms:.3f} ms ({model.kernels} kernel), eager {eager_ms:.3f} ms "
          f"(2 kernels), floor {floor_ms:.3f} ms ({100 * floor_ms / fusec_ms:.0f}% of it)",
          flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    if mode == "build":
        print(build(folder))
        sys.exit(0)
    sys.exit(run(folder))
