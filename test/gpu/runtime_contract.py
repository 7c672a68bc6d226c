"""The runtime's contract with the caller, on the H200: an input the model updates in place
(a KV cache the caller owns) is written back after each call, and nested outputs come back
nested, for every kind of array the CUDA runtime takes (numpy: copied in and out; torch CUDA
tensors and CuPy arrays: device pointers, no copy).

    python test/gpu/runtime_contract.py build DIR    here: DIR/rt/<case>.so
    python3 test/gpu/runtime_contract.py run DIR     the H200: each case twice on fresh
                                                     inputs, each array kind, against float64

Exit 1 on a cache not equal to the float64 reference's (a pure copy: exactly), an output over
its tolerance (fp32 1e-5, bf16 1e-2), an output tree of the wrong shape, or a caller's array
left unchanged.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn


class KVCacheWrite(nn.Module):
    """One decode step: this step's keys and values written into caches the caller owns at
    position `pos`, then one query row attends over the whole cache."""

    def __init__(self, pos: int) -> None:
        super().__init__()
        self.pos = pos

    def forward(self, k_cache, v_cache, k, v, q):
        k_cache[:, :, self.pos:self.pos + 1] = k
        v_cache[:, :, self.pos:self.pos + 1] = v
        scores = q @ k_cache.transpose(-1, -2) * (q.shape[-1] ** -0.5)
        return torch.softmax(scores.float(), -1).to(q.dtype) @ v_cache


class Nested(nn.Module):
    def forward(self, x, y):
        s = x + y
        return s, [torch.relu(s), {"a": s.sum(-1), "b": (x * y,)}]


def _cases():
    B, H, S, D = 4, 8, 256, 64
    for dtype, name in ((torch.float32, "kv_f32"), (torch.bfloat16, "kv_bf16")):
        yield name, KVCacheWrite(100), [
            ((B, H, S, D), dtype), ((B, H, S, D), dtype), ((B, H, 1, D), dtype),
            ((B, H, 1, D), dtype), ((B, H, 1, D), dtype)]
    yield "nested", Nested(), [((64, 128), torch.float32), ((64, 128), torch.float32)]


def _draw(specs, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).to(dtype) for shape, dtype in specs]


def build(folder: Path) -> None:
    import fusec

    out = folder / "rt"
    out.mkdir(parents=True, exist_ok=True)
    for name, model, specs in _cases():
        compiled = fusec.compile(model.eval(), *_draw(specs, 0), target="cuda", cache=False)
        shutil.copy(compiled.path, out / f"{name}.so")
        print(name, "updates", compiled.input_updates, "kernels", len(compiled.kernels))


def _leaves(tree):
    if isinstance(tree, (tuple, list)):
        return [leaf for t in tree for leaf in _leaves(t)]
    if isinstance(tree, dict):
        return [leaf for k in sorted(tree) for leaf in _leaves(tree[k])]
    return [tree]


def _shape(tree):
    if isinstance(tree, (tuple, list)):
        return (type(tree).__name__, [_shape(t) for t in tree])
    if isinstance(tree, dict):
        return ("dict", {k: _shape(v) for k, v in sorted(tree.items())})
    return "leaf"


def _to_host(a) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        return a.detach().double().cpu().numpy()
    if type(a).__module__.startswith("cupy"):
        a = a.get()
    a = np.asarray(a)
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def _rel(a, ref) -> float:
    ref = ref.detach().double().cpu().numpy()
    a = _to_host(a)
    return float(np.linalg.norm(a - ref) / max(np.linalg.norm(ref), 1e-30))


def run(folder: Path) -> int:
    import fusec.runtime

    try:
        import cupy
    except ImportError:
        cupy = None
    bad = 0
    for name, model, specs in _cases():
        module = fusec.runtime.load(folder / "rt" / f"{name}.so")
        kinds = ["torch", "numpy"] + (["cupy"] if cupy is not None else [])
        bf16 = any(d == torch.bfloat16 for _, d in specs)
        for kind in kinds:
            if kind != "torch" and bf16:
                continue  # numpy and CuPy have no bfloat16
            for seed in (1, 2):
                xs = _draw(specs, seed)
                refs = [x.double() for x in xs]
                with torch.no_grad():
                    want = model(*refs)
                if kind == "torch":
                    given = [x.cuda() for x in xs]
                elif kind == "numpy":
                    given = [x.numpy().copy() for x in xs]
                else:
                    given = [cupy.asarray(x.numpy()) for x in xs]
                before = [_to_host(g).copy() for g in given]
                got = module(*given)
                torch.cuda.synchronize()
                msgs = []
                if _shape(got) != _shape(want):
                    msgs.append(f"tree {_shape(got)} != {_shape(want)}")
                tol = 1e-2 if bf16 else 1e-5
                errs = [_rel(g, w) for g, w in zip(_leaves(got), _leaves(want))]
                if not errs or max(errs) > tol:
                    msgs.append(f"outputs {errs}")
                for i, _ in module.input_updates:
                    e = _rel(given[i], refs[i])
                    changed = not np.array_equal(_to_host(given[i]), before[i])
                    if e != 0.0 or not changed:
                        msgs.append(f"input {i} written back: error {e}, changed {changed}")
                if name.startswith("kv") and not module.input_updates:
                    msgs.append("no input_updates in the artifact")
                status = "ok" if not msgs else "FAIL " + "; ".join(msgs)
                bad += bool(msgs)
                print(f"{name} {kind} seed {seed}: updates {module.input_updates} "
                      f"worst output error {max(errs) if errs else None:.2e} {status}")
    print("runtime contract:", "FAILED" if bad else "all ok")
    return 1 if bad else 0


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    sys.exit(build(folder) if mode == "build" else run(folder))
