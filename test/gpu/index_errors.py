"""Indices out of range on the GPU: an embedding, a gather and a scatter built here for
target cuda, run on the H200. In range, each is correct against float64; out of range
(5000, 10**9 and -1 for a 1000-row table), the call raises IndexError naming the op's
source line and the bad index, with no access outside a tensor (run it under
compute-sanitizer memcheck), and the next call in range is correct again (the device's record
of the failure was cleared). Likewise integer divisions (`//`, `%`) by a tensor: exact with
no zero divisor, ZeroDivisionError naming the line with one (`--fusion-guard-division`).

    python test/gpu/index_errors.py build DIR     # here
    python3 test/gpu/index_errors.py run DIR      # there (torch with CUDA)
"""

from __future__ import annotations

import sys
from pathlib import Path

TOLERANCE = 1e-5


def models():
    import torch
    from torch import nn

    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Embedding(1000, 64)
            self.norm = nn.LayerNorm(64)

        def forward(self, ids):
            return self.norm(self.table(ids))

    class Gather(nn.Module):
        def forward(self, x, idx):
            return torch.gather(x, 1, idx) * 2.0

    class Scatter(nn.Module):
        def forward(self, x, idx, v):
            return x.index_put((idx,), v, accumulate=True)

    class Divide(nn.Module):
        def forward(self, x, idx):  # idx: the divisor
            return x // idx + x % idx

    torch.manual_seed(0)
    return {
        "embed": (Embed().eval(), (torch.randint(0, 1000, (4, 32)),), 1000),
        "gather": (Gather(), (torch.randn(8, 1000), torch.randint(0, 1000, (8, 16))), 1000),
        "scatter": (Scatter(), (torch.randn(1000, 4), torch.randint(0, 1000, (64,)),
                                torch.randn(64, 4)), 1000),
        "divide": (Divide(), (torch.randint(-10**6, 10**6, (8, 1000)),
                              torch.randint(1, 1000, (8, 1000))), 1000),
    }


def build(folder: Path) -> None:
    import shutil

    import fusec

    folder.mkdir(parents=True, exist_ok=True)
    for name, (model, inputs, _) in models().items():
        compiled = fusec.compile(model, *inputs, target="cuda", cache=False)
        shutil.copy(compiled.path, folder / f"{name}.so")
        print(name, "built:", len(compiled._lib.metadata["index_checks"]), "checks")


def run(folder: Path) -> int:
    import torch

    import fusec.runtime

    failures = 0
    for name, (model, inputs, rows) in models().items():
        compiled = fusec.runtime.load(folder / f"{name}.so")
        index_arg = 0 if name == "embed" else 1
        divide = name == "divide"
        error_type = ZeroDivisionError if divide else IndexError
        for trial, bad in enumerate((None, 0, None) if divide else (None, 5000, 10**9, -1, None)):
            torch.manual_seed(100 + trial)
            if divide:  # dividends of both signs; divisors too, none zero
                xs = [torch.randint(-10**6, 10**6, inputs[0].shape),
                      torch.randint(1, rows, inputs[1].shape) *
                      (torch.randint(0, 2, inputs[1].shape) * 2 - 1)]
            else:
                xs = [torch.randn_like(x) if x.is_floating_point() else
                      torch.randint(0, rows, x.shape) for x in inputs]
            if bad is not None:
                xs[index_arg].view(-1)[3] = bad
            try:
                out = compiled(*[x.cuda() for x in xs])
                torch.cuda.synchronize()
            except error_type as error:
                text = str(error)
                ok = bad is not None and str(bad) in text and "index_errors.py" in text
                print(f"{name} {'divisor' if divide else 'index'} {bad}: "
                      f"{error_type.__name__} {'as expected' if ok else 'WRONG'}: {text[:160]}")
                failures += not ok
                continue
            if bad is not None:
                print(f"{name} index {bad}: no error raised: WRONG")
                failures += 1
                continue
            with torch.no_grad():
                ref = model.double()(*[x.double() if x.is_floating_point() else x for x in xs])
                model.float()
            if divide:
                exact = torch.equal(out.cpu(), ref)
                print(f"{name} (trial {trial}): {'exact' if exact else 'WRONG'}")
                failures += not exact
                continue
            err = ((out.double().cpu() - ref).norm() / ref.norm()).item()
            print(f"{name} in range (trial {trial}): relative error {err:.2e}")
            failures += not err < TOLERANCE
    print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(Path(sys.argv[2]))
    else:
        sys.exit(run(Path(sys.argv[2])))
