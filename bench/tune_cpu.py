"""`fusec --tune` on the CPU (this machine), untuned against tuned in one process.

    python bench/tune_cpu.py [NAME ...]     [--cache FILE] [--runs N]

For each workload: tune (compiler/tuner.py: every candidate tiling of its matmul kernels
timed in child processes, two rounds), then load the untuned artifact (the cost model's
tilings, the cache off) and the tuned one and time them alternately (ROUNDS x CALLS calls
each, the median per call), with torch eager on one process's threads beside them;
numerics against float64. Run alone: on a 2-core machine anything beside it is in the
figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F


class LmHead(torch.nn.Module):
    """GPT-2's LM head: the tied embedding's transpose (a 50257 x 768 weight)."""

    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Parameter(torch.randn(50257, 768) * 0.02)

    def forward(self, h):
        return h @ self.wte.t()


class Mlp(torch.nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.fc = torch.nn.Linear(d, hidden)
        self.proj = torch.nn.Linear(hidden, d)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


# name: (module factory, input shape, what)
WORKLOADS = {
    "lm_head": (LmHead, (128, 768), "GPT-2 LM head, 128 tokens x 768 -> 50257"),
    "gpt2_mlp": (lambda: Mlp(768, 3072), (128, 768), "GPT-2 MLP, 128 tokens"),
    "vit_mlp": (lambda: Mlp(768, 3072), (197, 768), "ViT-B MLP, 197 tokens"),
    "linear_4096": (lambda: torch.nn.Linear(4096, 4096), (64, 4096),
                    "Linear 4096 -> 4096, 64 rows"),
}
ROUNDS, CALLS = 9, 5


def _time(fn) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        fn()
    return (time.perf_counter() - started) / CALLS * 1e3


def main(argv: list[str]) -> int:
    from fusec.compiler import driver, tuner
    from fusec.compiler.frontend import import_torch
    from fusec.compiler.pipeline import CompileOptions
    from fusec.runtime import load
    from fusec.runtime.timing import relative_error

    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--cache", default=None)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="fusec-tune-cpu-"))
    cache = args.cache or str(tmp / "tuning.json")
    torch.manual_seed(0)
    for name in args.names:
        factory, shape, what = WORKLOADS[name]
        model = factory().eval()
        x = torch.randn(shape)
        with driver.quiet_torch_logs():
            text = import_torch(model, x)
        base = CompileOptions(target="cpu", model_name=name)
        tuned_options = dataclasses.replace(base, cpu=dataclasses.replace(base.cpu,
                                                                          tuning=cache))
        untuned_options = dataclasses.replace(base, cpu=dataclasses.replace(base.cpu,
                                                                            tuning="off"))
        lines: list[str] = []
        started = time.perf_counter()
        tuner.tune(text, name, tuned_options, str(tmp / f"{name}.tuned.so"),
                   log=lines.append, runs=args.runs)
        tune_s = time.perf_counter() - started
        driver.compile_text(text, name, untuned_options, str(tmp / f"{name}.untuned.so"))
        tuned, untuned = load(tmp / f"{name}.tuned.so"), load(tmp / f"{name}.untuned.so")
        xs = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            want = model.double()(torch.from_numpy(xs).double()).numpy()
        errors = {"untuned": relative_error(untuned(xs), want),
                  "tuned": relative_error(tuned(xs), want)}
        xt = torch.from_numpy(xs)
        model = model.float()
        ms = {"untuned": [], "tuned": [], "eager": []}
        for _ in range(ROUNDS):
            ms["untuned"].append(_time(lambda: untuned(xs)))
            ms["tuned"].append(_time(lambda: tuned(xs)))
            with torch.no_grad():
                ms["eager"].append(_time(lambda: model(xt)))
        med = {k: statistics.median(v) for k, v in ms.items()}
        print(f"== {name}: {what} (tuned in {tune_s:.1f} s)")
        for line in lines:
            print("  " + line.removeprefix("fusec: tune: "))
        print(f"  untuned {med['untuned']:.3f} ms, tuned {med['tuned']:.3f} ms "
              f"({med['untuned'] / med['tuned']:.2f}x), eager {med['eager']:.3f} ms "
              f"(tuned {med['eager'] / med['tuned']:.2f}x eager); errors "
              f"{errors['untuned']:.1e} / {errors['tuned']:.1e}; torch threads "
              f"{torch.get_num_threads()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
