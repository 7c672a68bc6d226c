"""Attention kernel variants against each other in one process (the H200): each timed case of
test/gpu/attention.py, built into several folders (for example with ATTENTION_P_REGISTERS,
ATTENTION_PINGPONG or ATTENTION_TILE set differently), checked against float64 and timed
interleaved with SDPA (`bench/gpu.py`'s `interleaved_ms`: rounds taking the variants in turn,
the order reversed every other round).

    python3 test/gpu/attention_ab.py LABEL=DIR LABEL=DIR ... [-- CASE ...]

Each line of output is one case as JSON: per variant its error, kernels and time, and the
ratio to SDPA. A case missing from a folder (a tile that is not its candidate) is left out
of that folder's column. Exit 1 when a variant's numbers miss the tolerance.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attention  # noqa: E402  (test/gpu/attention.py)


def main(argv: list[str]) -> int:
    split = argv.index("--") if "--" in argv else len(argv)
    folders = dict(a.split("=", 1) for a in argv[:split])
    names = argv[split + 1:] or [n for n, c in attention.CASES.items() if c[3]]
    bench = attention._bench()
    ok = True
    for name in names:
        row: dict = {"name": name}
        variants = {}
        xs = attention._inputs(name, 1)
        q, k, v, mask, causal = attention.sdpa_operands(name, xs)
        for label, folder in folders.items():
            so = Path(folder) / "att" / f"{name}.so"
            if not so.exists():
                continue
            checked = attention.check(Path(folder), [name])[0]
            ok = ok and checked["ok"]
            row[label] = {"err": checked["err"], "ok": checked["ok"],
                          "kernels": checked["kernels"]}
            model = bench.FusecModel(so)
            variants[label] = model.bind(xs, model.outputs_like("cuda"))
        variants["sdpa"] = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                   is_causal=causal)
        times = bench.interleaved_ms(variants, 20)
        for label, ms in times.items():
            row.setdefault(label, {})["ms"] = round(ms, 4)
            if label != "sdpa":
                row[label]["vs_sdpa"] = round(times["sdpa"] / ms, 3)
        print(json.dumps(row), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
