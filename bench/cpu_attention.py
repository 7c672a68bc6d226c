"""The CPU attention kernel against torch eager's SDPA (issue 15's CPU target).

    FUSEC_NUM_THREADS=1 python bench/cpu_attention.py                 # the three cases
    python bench/cpu_attention.py --cases causal --shape 1 8 2048 64 --threads 1

Cases, B H S D fp32 (default B1 H8 S2048 D64):
- causal: `F.scaled_dot_product_attention(q, k, v, is_causal=True)`;
- plain: the same without a mask;
- additive: `attn_mask` a float [1, 1, S, S] tensor read from memory (random, not causal).

Each case: one `fusec.compile` (cache off), then fusec and eager take turns, `--calls`
calls each per round, the minimum per variant over `--rounds` rounds; error against the
same function in float64 (relative norm) on the inputs timed. Threads: FUSEC_NUM_THREADS
and torch.set_num_threads set to `--threads` before anything is loaded. Comparing two
trees: run this script under each (PYTHONPATH pointing at a directory whose `fusec` is the
tree), alternating; `fusec` prints the path it was imported from.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def _cases(shape: list[int]):
    import torch
    F = torch.nn.functional
    b, h, s, d = shape

    def causal(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def plain(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    def additive(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    qkv = [(b, h, s, d)] * 3
    return {"causal": (causal, qkv), "plain": (plain, qkv),
            "additive": (additive, qkv + [(1, 1, s, s)])}


def _module(fn):
    """`fn` as an nn.Module (fusec.compile takes modules)."""
    import torch

    class Wrap(torch.nn.Module):
        def forward(self, *args):
            return fn(*args)

    return Wrap().eval()


def _min_ms(fn, args, calls: int) -> float:
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def _error(out, ref) -> float:
    import numpy as np

    out = np.asarray(out[0] if isinstance(out, (list, tuple)) else out, dtype=np.float64)
    ref = ref.numpy()
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["causal", "plain", "additive"])
    parser.add_argument("--shape", nargs=4, type=int, default=[1, 8, 2048, 64])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-eager", action="store_true")
    args = parser.parse_args()
    os.environ["FUSEC_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    import fusec

    for name in args.cases:
        fn, shapes = _cases(args.shape)[name]
        torch.manual_seed(0)
        inputs = [torch.randn(s) for s in shapes]
        start = time.perf_counter()
        module = fusec.compile(_module(fn), *inputs, cache=False, target="cpu")
        compile_s = time.perf_counter() - start
        ref = fn(*[x.double() for x in inputs])
        error = _error(module(*inputs), ref)
        variants = {"fusec": module}
        if not args.no_eager:
            variants["eager"] = fn
        times: dict[str, float] = {k: float("inf") for k in variants}
        for _ in range(args.rounds):
            with torch.no_grad():
                for key, call in variants.items():
                    times[key] = min(times[key], _min_ms(call, inputs, args.calls))
        print(json.dumps({"case": name, "shape": args.shape, "threads": args.threads,
                          "fusec_from": os.path.dirname(fusec.__file__),
                          "kernels": [k["kind"] for k in module.kernels],
                          **{f"{k}_ms": round(v, 2) for k, v in times.items()},
                          "error": float(f"{error:.2e}"), "compile_s": round(compile_s, 1)}),
              flush=True)


if __name__ == "__main__":
    main()
