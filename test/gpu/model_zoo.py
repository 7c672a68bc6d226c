"""Real models (small configs, seeded random weights) built here for target cuda and run
on the H200 against float64, fused and unfused: the class of bug a block called alone never
meets (HF's position ids and causal masks, gathers, concats, loop kernels, convolutions).

    python test/gpu/model_zoo.py build DIR [NAME ...]   # here: DIR/<name>-<mode>.so + .npz
    python test/gpu/model_zoo.py build DIR --fused hf   # the HF architectures of
                                                        # bench/hf_architectures.py, fused only
                                                        # (hf16: in bf16; hf1: at one token)
    python3 test/gpu/model_zoo.py run DIR [WRAPPER ...]  # there: one line per artifact,
                                                        # each in its own process

`build` records a compile-time refusal as `<name>-<mode>.refused` (the located error; the
compiler process must stay alive: each build runs in a child process). `run` needs only
numpy, ctypes and the driver: fusec.runtime.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from hf_architectures import ARCHITECTURES  # noqa: E402
from hf_architectures import build as build_architecture  # noqa: E402
from zoo import ZOO  # noqa: E402

TOLERANCE = 1e-5  # fp32 relative error against float64


def _causal_mask_probe():
    """HF's eager causal mask, alone: position comparisons, where, expand to 4-D, added to
    scores, softmax."""
    import torch

    class Mask(torch.nn.Module):
        def forward(self, scores):
            t = scores.shape[-1]
            q = torch.arange(t)[:, None]
            k = torch.arange(t)[None, :]
            mask = torch.where(k <= q, 0.0, torch.finfo(torch.float32).min)
            return (scores + mask[None, None].expand(scores.shape[0], 1, t, t)).softmax(-1)

    return Mask(), (torch.randn(2, 4, 32, 32),)


def _positions_probe():
    """Token and position embeddings, the positions from arange."""
    import torch

    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = torch.nn.Embedding(1000, 64), torch.nn.Embedding(64, 64)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            return self.wte(ids) + self.wpe(pos)

    return Embed().eval(), (torch.randint(0, 1000, (2, 32)),)


def _topk_router_probe():
    """A mixture of experts' router alone: softmax over 8 experts, top-2 (torch-mlir's
    decomposition compares each expert's index, an iota, in the payload), renormalised and
    scattered into dense weights; the indices are an output too."""
    import torch

    class Router(torch.nn.Module):
        def forward(self, logits):
            probs = logits.softmax(-1)
            top, which = probs.topk(2, dim=-1)
            return torch.zeros_like(probs).scatter(-1, which, top / top.sum(-1, True)), which

    return Router(), (torch.randn(4, 37, 8),)


def _index_payloads_probe():
    """Payloads that read their loop's position (`linalg.index`): a column iota in a row
    kernel's softmax, a row iota, and the element's (row, column) in an elementwise kernel."""
    import torch

    class Index(torch.nn.Module):
        def forward(self, x):
            rows, cols = x.shape[-2:]
            a = torch.where(torch.arange(cols) % 3 == 0, x, -x).softmax(-1)
            b = x + (torch.arange(rows)[:, None] * cols + torch.arange(cols)).float() * 1e-3
            c = (x * (torch.arange(rows)[:, None] % 5 + 1).float()).sum(-1)
            return a, b, c

    return Index(), (torch.randn(3, 96, 40),)


def _rotate_half_probe():
    """RoPE's rotate_half: slices and a concat."""
    import torch

    class Rope(torch.nn.Module):
        def forward(self, x, cos, sin):
            x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
            return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    return Rope(), (torch.randn(1, 4, 32, 32), torch.randn(1, 1, 32, 32), torch.randn(1, 1, 32, 32))


def _inverted_residual():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.expand = nn.Sequential(nn.Conv2d(24, 144, 1, bias=False), nn.BatchNorm2d(144), nn.ReLU6())
            self.dw = nn.Sequential(nn.Conv2d(144, 144, 3, 1, 1, groups=144, bias=False), nn.BatchNorm2d(144), nn.ReLU6())
            self.project = nn.Sequential(nn.Conv2d(144, 24, 1, bias=False), nn.BatchNorm2d(24))

        def forward(self, x):
            return x + self.project(self.dw(self.expand(x)))

    return Block().eval(), (torch.randn(2, 24, 28, 28),)


def _resnet_basic():
    return _resnet_basic_channels(32)


def _resnet_basic_big():
    """The issue's ResNet basic block (32x128x56x56, fp32): its inputs are too large to
    travel, so they are drawn on the device and the reference computed there in float64."""
    import torch

    model, _ = _resnet_basic_channels(128)
    return model, (torch.randn(32, 128, 56, 56),)


def _resnet_basic_channels(c):
    import torch
    from torch import nn

    class Basic(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)
            self.c2, self.b2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + x)

    return Basic().eval(), (torch.randn(2, c, 16, 16),)


# Models whose inputs and reference are made on the device (too large to carry).
ON_DEVICE = {"resnet_basic_big"}

# The zoo's models (bench/zoo.py, small configs) and probes of the pieces they are made of.
MODELS = {
    **{name: (lambda entry=entry: entry.build("small")) for name, entry in ZOO.items()},
    "resnet_basic_big": _resnet_basic_big,
    "causal_mask": _causal_mask_probe,
    "positions": _positions_probe,
    "topk_router": _topk_router_probe,
    "index_payloads": _index_payloads_probe,
    "rotate_half": _rotate_half_probe,
    "inverted_residual": _inverted_residual,
    "resnet_basic": _resnet_basic,
    # Hugging Face architectures from tiny configs (bench/hf_architectures.py): `hf` names
    # all, `hf16` all in bf16.
    **{f"hf_{name}": (lambda name=name: build_architecture(name)) for name in ARCHITECTURES},
    **{f"hf16_{name}": (lambda name=name: build_architecture(name, dtype="bfloat16"))
       for name in ARCHITECTURES},
    # ... and at one token, batch 1 (the decoding shape): `hf1`.
    **{f"hf1_{name}": (lambda name=name: build_architecture(name, batch=1, seq=1, samples=400))
       for name in ARCHITECTURES},
}

# A 16-bit model passes where its error against float64 is at most this, or twice that of
# torch eager in the same dtype on this machine's CPU, whichever is larger.
TOLERANCE_16 = 1e-2


def build_one(name: str, mode: str, folder: Path) -> None:
    import torch

    import fusec

    torch.manual_seed(0)
    # Exact fp32 convolutions (fusec.compile follows torch's cuDNN setting, TF32 by
    # default): the check is of the kernels against float64 at 1e-5.
    torch.backends.cudnn.allow_tf32 = False
    model, inputs = MODELS[name]()
    stem = folder / f"{name}-{mode}"
    if name in ON_DEVICE:
        try:
            compiled = fusec.compile(model, *inputs, target="cuda", fusion=(mode == "fused"),
                                     cache=False)
        except Exception as error:  # noqa: BLE001
            stem.with_suffix(".refused").write_text(f"{type(error).__name__}: {error}\n")
            return
        os.replace(compiled.path, stem.with_suffix(".so"))
        state = {f"state:{k}": v.numpy() for k, v in model.state_dict().items()}
        np.savez(stem.with_suffix(".npz"), model=np.array(name),
                 shapes=np.array([list(x.shape) for x in inputs]), **state)
        return
    with torch.no_grad():
        # A copy: a model may cache tensors of the dtype it ran in (LeViT's attention
        # biases, in eval mode), which `.float()` would not convert back.
        ref = copy.deepcopy(model).double()(
            *[x.double() if x.is_floating_point() else x for x in inputs])
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    tolerance = TOLERANCE
    if any(x.dtype in (torch.bfloat16, torch.float16) for x in model.parameters()):
        with torch.no_grad():
            eager = model(*inputs)
        eager = eager if isinstance(eager, (tuple, list)) else (eager,)
        worst = max(float(np.linalg.norm(e.double().numpy() - r.numpy()) /
                          np.linalg.norm(r.numpy())) for e, r in zip(eager, refs))
        tolerance = max(TOLERANCE_16, 2 * worst)
    try:
        compiled = fusec.compile(model, *inputs, target="cuda", fusion=(mode == "fused"),
                                 cache=False)
    except Exception as error:  # noqa: BLE001 - a refusal is a result, recorded
        stem.with_suffix(".refused").write_text(f"{type(error).__name__}: {error}\n")
        return
    os.replace(compiled.path, stem.with_suffix(".so"))
    # bf16 inputs travel as float32 (exact) and are cast back there.
    np.savez(stem.with_suffix(".npz"),
             *[x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy() for x in inputs],
             **{f"ref{i}": r.numpy() for i, r in enumerate(refs)},
             tolerance=np.array(tolerance),
             bf16_inputs=np.array([i for i, x in enumerate(inputs)
                                   if x.dtype == torch.bfloat16], dtype=np.int64))


def build(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    modes = ("fused", "unfused")
    if "--fused" in names:
        names, modes = [n for n in names if n != "--fused"], ("fused",)
    for family in ("hf", "hf16", "hf1"):
        if family in names:
            names = [n for n in names if n != family] + [
                n for n in MODELS if n.startswith(family + "_")]
    for name in names or list(MODELS):
        for mode in modes:
            # A child per artifact: an abort inside MLIR must not end the whole build.
            done = subprocess.run([sys.executable, __file__, "build-one", str(folder), name, mode],
                                  capture_output=True, text=True)
            status = "ok" if done.returncode == 0 else f"compiler died ({done.returncode})"
            if done.returncode != 0:
                (folder / f"{name}-{mode}.refused").write_text(
                    f"the compiler process died ({done.returncode}): "
                    f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ''}\n")
            refused = (folder / f"{name}-{mode}.refused")
            print(f"{name}-{mode}: {status}"
                  + (f" refused: {refused.read_text().strip()[:300]}" if refused.exists() else ""),
                  flush=True)


def run(folder: Path, wrap: list[str]) -> int:
    """Each artifact in a process of its own (a fault poisons the CUDA context), under
    `wrap` (e.g. compute-sanitizer) when given."""
    failures = 0
    for refused in sorted(folder.glob("*.refused")):
        print(f"{refused.stem}: REFUSED at compile time: {refused.read_text().strip()[:200]}")
    for path in sorted(folder.glob("*.so")):
        done = subprocess.run([*wrap, sys.executable, __file__, "run-one", str(path)],
                              capture_output=True, text=True)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith(path.stem)]
        print(lines[-1] if lines else f"{path.stem}: DIED ({done.returncode})", flush=True)
        if wrap:
            errors = [ln for ln in done.stdout.splitlines() + done.stderr.splitlines()
                      if "ERROR SUMMARY" in ln or "Invalid" in ln or " at fusec_" in ln]
            for line in errors[:4]:
                print("    " + line.strip(), flush=True)
        failures += done.returncode != 0
    return failures


def run_one(path: Path) -> int:
    """Run one artifact on torch CUDA tensors (torch makes the context the runtime launches
    in) and print its relative errors; 1 when wrong or failed."""
    import torch

    import fusec.runtime as rt

    data = np.load(path.with_suffix(".npz"))
    if "model" in data.files:  # drawn here: the weights travelled, the reference is made here
        reference, _ = MODELS[str(data["model"])]()
        reference.load_state_dict({k[len("state:"):]: torch.from_numpy(data[k])
                                   for k in data.files if k.startswith("state:")})
        generator = torch.Generator(device="cuda").manual_seed(1)
        cuda_inputs = [torch.randn(*shape, generator=generator, device="cuda")
                       for shape in data["shapes"].tolist()]
        with torch.no_grad():
            ref = reference.double().cuda()(*[x.double() for x in cuda_inputs])
        refs = [r.cpu().numpy() for r in (ref if isinstance(ref, tuple) else (ref,))]
    else:
        inputs = [data[k] for k in data.files if k.startswith("arr_")]
        refs = [data[k] for k in sorted(k for k in data.files if k.startswith("ref"))]
        cuda_inputs = [torch.from_numpy(x).cuda() for x in inputs]
        for i in (data["bf16_inputs"].tolist() if "bf16_inputs" in data.files else []):
            cuda_inputs[i] = cuda_inputs[i].to(torch.bfloat16)
    try:
        model = rt.load(path)
        outs = model(*cuda_inputs)
        torch.cuda.synchronize()
        outs = [o.float().cpu().numpy() for o in (outs if isinstance(outs, tuple) else (outs,))]
    except Exception as error:  # noqa: BLE001 - a failure is a result, printed
        print(f"{path.stem}: ERROR {type(error).__name__}: {str(error).splitlines()[0][:300]}",
              flush=True)
        return 1
    errs = [float(np.linalg.norm(o.astype(np.float64) - r) / np.linalg.norm(r))
            for o, r in zip(outs, refs)]
    tolerance = float(data["tolerance"]) if "tolerance" in data.files else TOLERANCE
    ok = all(e < tolerance for e in errs)
    print(f"{path.stem}: {'ok' if ok else 'WRONG'} rel err "
          f"{', '.join(f'{e:.2e}' for e in errs)} (tolerance {tolerance:.1e}); "
          f"{len(model.kernels)} kernels", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    command, folder = sys.argv[1], Path(sys.argv[2])
    if command == "build":
        build(folder, sys.argv[3:])
    elif command == "build-one":
        build_one(sys.argv[3], sys.argv[4], folder)
    elif command == "run-one":
        sys.exit(1 if run_one(folder) else 0)
    else:
        sys.exit(1 if run(folder, sys.argv[3:]) else 0)
