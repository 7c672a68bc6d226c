"""Programmatic dependent launch on the GPU (compiler/targets/cuda/dependent_launch.py): a
kernel that launches while the one before it finishes must still see everything that one
wrote. A missing or misplaced wait shows as a result that changes from call to call, so each
case is run many times, back to back, and every call's outputs are compared bit for bit with
the first call's; then through a CUDA graph (the launches captured with their attribute
become programmatic edges), which must give the same bits; then against a build without
dependent launch (`MOVEMENT_CUDA_OPTIONS='{"dependent_launch": false}'`), whose kernels are
the same but for the prologue.

    python3 test/gpu/dependent_launch.py ON_DIR OFF_DIR [CASE ...]

ON_DIR and OFF_DIR are `test/gpu/movement.py build` folders. One JSON line per case; exit 1
on any difference, or when ON_DIR's build did not ask for dependent launch.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import movement  # noqa: E402  (test/gpu/movement.py)

CALLS = int(os.environ.get("DEPENDENT_LAUNCH_CALLS", "200"))


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(a, b))


def main(argv: list[str]) -> int:
    on_dir, off_dir = Path(argv[0]), Path(argv[1])
    names = argv[2:] or sorted(movement.BLOCKS)
    bench = movement._bench()
    ok = True
    for name in names:
        on_so, off_so = on_dir / "mv" / f"{name}.so", off_dir / "mv" / f"{name}.so"
        if not (on_so.exists() and off_so.exists()):
            continue
        xs = movement._inputs(name, 7)
        on, off = bench.FusecModel(on_so), bench.FusecModel(off_so)
        asked = bool(on.meta["plan"]["metadata"].get("dependent_launch"))
        out_off = off.outputs_like("cuda")
        off.bind(xs, out_off)()
        out = on.outputs_like("cuda")
        call = on.bind(xs, out)
        call()
        torch.cuda.synchronize()
        first = [o.clone() for o in out]
        changed = 0
        for _ in range(CALLS):
            for o in out:
                o.fill_(float("nan")) if o.is_floating_point() else o.fill_(-1)
            call()
            torch.cuda.synchronize()
            changed += not _same(out, first)
        graph_out = on.outputs_like("cuda")
        replay = on.bind(xs, graph_out, graph=True)
        graph_changed = 0
        for _ in range(CALLS // 4):
            for o in graph_out:
                o.fill_(float("nan")) if o.is_floating_point() else o.fill_(-1)
            replay()
            torch.cuda.synchronize()
            graph_changed += not _same(graph_out, first)
        row_ok = asked and changed == 0 and graph_changed == 0 and _same(first, out_off)
        ok = ok and row_ok
        print(json.dumps({"name": name, "ok": row_ok, "dependent_launch": asked,
                          "kernels": len(on.meta["plan"]["launches"]),
                          "calls_differing": changed, "graph_replays_differing": graph_changed,
                          "same_as_without": _same(first, out_off)}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
