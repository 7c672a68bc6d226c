"""Real models (small configs, seeded random weights) built here for target cuda and run
on the H200 against float64, fused and unfused: the class of bug a block called alone never
meets (HF's position ids and causal masks, gathers, concats, loop kernels, convolutions).

    python test/gpu/model_zoo.py build DIR [NAME ...]   # here: DIR/<name>-<mode>.so + .npz
    python3 test/gpu/model_zoo.py run DIR [WRAPPER ...]  # there: one line per artifact,
                                                        # each in its own process

`build` records a compile-time refusal as `<name>-<mode>.refused` (the located error; the
compiler process must stay alive: each build runs in a child process). `run` needs only
numpy, ctypes and the driver: fusec.runtime.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

TOLERANCE = 1e-5  # fp32 relative error against float64


def _hf_gpt2(attn: str = "eager", layers: int = 2):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=layers, n_embd=128, n_head=4, vocab_size=1000, n_positions=64,
                     attn_implementation=attn, eos_token_id=0, bos_token_id=0)
    lm = GPT2LMHeadModel(cfg).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, ids):
            return self.lm(input_ids=ids, use_cache=False).logits

    return Logits().eval(), (torch.randint(0, 1000, (1, 32)),)


def _hf_llama():
    import torch
    from transformers import LlamaConfig, LlamaModel

    cfg = LlamaConfig(num_hidden_layers=2, hidden_size=128, intermediate_size=256,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                      max_position_embeddings=64, attn_implementation="eager")
    model = LlamaModel(cfg).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids, use_cache=False).last_hidden_state

    return Hidden().eval(), (torch.randint(0, 1000, (1, 32)),)


def _hf_bert():
    """HF BERT with a padding mask and token types (its position_ids: a non-persistent
    buffer)."""
    import torch
    from transformers import BertConfig, BertModel

    cfg = BertConfig(num_hidden_layers=2, hidden_size=128, intermediate_size=256,
                     num_attention_heads=4, vocab_size=1000, max_position_embeddings=64,
                     attn_implementation="eager")
    model = BertModel(cfg).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids, mask, types):
            return self.model(input_ids=ids, attention_mask=mask,
                              token_type_ids=types).last_hidden_state

    ids = torch.randint(0, 1000, (2, 32))
    mask = torch.ones(2, 32, dtype=torch.int64)
    mask[1, 20:] = 0
    return Hidden().eval(), (ids, mask, torch.randint(0, 2, (2, 32)))


def _hf_vit():
    import torch
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(num_hidden_layers=2, hidden_size=128, intermediate_size=256,
                    num_attention_heads=4, image_size=64, patch_size=8,
                    attn_implementation="eager")
    model = ViTModel(cfg, add_pooling_layer=False).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, pixels):
            return self.model(pixel_values=pixels).last_hidden_state

    return Hidden().eval(), (torch.randn(1, 3, 64, 64),)


def _hf_t5_encoder():
    import torch
    from transformers import T5Config, T5EncoderModel

    cfg = T5Config(num_layers=2, d_model=128, d_ff=256, num_heads=4, d_kv=32, vocab_size=1000)
    model = T5EncoderModel(cfg).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids).last_hidden_state

    return Hidden().eval(), (torch.randint(0, 1000, (1, 32)),)


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


def _resnet18():
    """torchvision's ResNet-18 at half width (the artifacts travel to the device; written
    here: its wheel does not load beside this torch), batch 2, 64x64 images: stride-2
    downsamples reading the previous block's residual."""
    import sys

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    from test_cnn_blocks import BasicBlock

    class ResNet18(torch.nn.Module):
        def __init__(self, width=32):
            super().__init__()
            self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, width, 7, 2, 3, bias=False),
                                            torch.nn.BatchNorm2d(width), torch.nn.ReLU(),
                                            torch.nn.MaxPool2d(3, 2, 1))
            blocks, c = [], width
            for i, w in enumerate([width, 2 * width, 4 * width, 8 * width]):
                blocks += [BasicBlock(c, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)]
                c = w
            self.blocks = torch.nn.Sequential(*blocks)
            self.fc = torch.nn.Linear(c, 10)

        def forward(self, x):
            return self.fc(self.blocks(self.stem(x)).mean((2, 3)))

    return ResNet18().eval(), (torch.randn(2, 3, 64, 64),)


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


def _hf_whisper_encoder():
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = WhisperConfig(encoder_layers=2, d_model=128, encoder_attention_heads=4,
                        encoder_ffn_dim=256, num_mel_bins=16, max_source_positions=32,
                        attn_implementation="eager")
    encoder = WhisperEncoder(cfg).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder

        def forward(self, features):
            return self.encoder(features).last_hidden_state

    return Hidden().eval(), (torch.randn(1, 16, 64),)


def _hf_mixtral_moe():
    """HF's Mixtral sparse MoE block (router softmax, top-2, experts' SwiGLU)."""
    import torch
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    cfg = MixtralConfig(hidden_size=64, intermediate_size=128, num_local_experts=4,
                        num_experts_per_tok=2)
    block = MixtralSparseMoeBlock(cfg).eval()

    class Out(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = block

        def forward(self, x):
            out = self.block(x)
            return out[0] if isinstance(out, tuple) else out

    return Out().eval(), (torch.randn(2, 16, 64),)


def _top2_moe():
    """A top-2 MoE layer written as users write it: every expert on every token, weighted by
    the renormalised top-2 router probabilities (a scatter of the top-k into a dense mask)."""
    import torch
    from torch import nn

    class Top2(nn.Module):
        def __init__(self, d=64, experts=4):
            super().__init__()
            self.router = nn.Linear(d, experts, bias=False)
            self.up = nn.ModuleList(nn.Linear(d, 2 * d) for _ in range(experts))
            self.down = nn.ModuleList(nn.Linear(2 * d, d) for _ in range(experts))

        def forward(self, x):
            probs = torch.softmax(self.router(x), dim=-1)
            top, which = probs.topk(2, dim=-1)
            weights = torch.zeros_like(probs).scatter(-1, which, top / top.sum(-1, True))
            outs = torch.stack([d(torch.nn.functional.gelu(u(x)))
                                for u, d in zip(self.up, self.down)], dim=-1)
            return (outs * weights.unsqueeze(-2)).sum(-1)

    return Top2().eval(), (torch.randn(2, 16, 64),)


def _mobilenet_v3_small_like():
    """MobileNetV3-small's blocks (torchvision is not a dependency): hardswish stem, depthwise
    3x3 with squeeze-excite (hardsigmoid), an inverted residual, pooled classifier."""
    import torch
    from torch import nn

    class SE(nn.Module):
        def __init__(self, c, r=4):
            super().__init__()
            self.a, self.b = nn.Conv2d(c, c // r, 1), nn.Conv2d(c // r, c, 1)

        def forward(self, x):
            s = x.mean((2, 3), keepdim=True)
            return x * nn.functional.hardsigmoid(self.b(torch.relu(self.a(s))))

    class Block(nn.Module):
        def __init__(self, cin, cexp, cout, stride, se):
            super().__init__()
            self.expand = nn.Sequential(nn.Conv2d(cin, cexp, 1, bias=False),
                                        nn.BatchNorm2d(cexp), nn.Hardswish())
            self.dw = nn.Sequential(nn.Conv2d(cexp, cexp, 3, stride, 1, groups=cexp,
                                              bias=False), nn.BatchNorm2d(cexp), nn.Hardswish())
            self.se = SE(cexp) if se else nn.Identity()
            self.project = nn.Sequential(nn.Conv2d(cexp, cout, 1, bias=False),
                                         nn.BatchNorm2d(cout))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.project(self.se(self.dw(self.expand(x))))
            return x + y if self.residual else y

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False),
                                      nn.BatchNorm2d(16), nn.Hardswish())
            self.blocks = nn.Sequential(Block(16, 16, 16, 2, True), Block(16, 72, 24, 2, False),
                                        Block(24, 88, 24, 1, False), Block(24, 96, 40, 2, True))
            self.head = nn.Linear(40, 10)

        def forward(self, x):
            return self.head(self.blocks(self.stem(x)).mean((2, 3)))

    net = Net().eval()
    with torch.no_grad():  # non-trivial BatchNorm statistics
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    return net, (torch.randn(2, 3, 64, 64),)


# Models whose inputs and reference are made on the device (too large to carry).
ON_DEVICE = {"resnet_basic_big"}

MODELS = {
    "resnet_basic_big": _resnet_basic_big,
    "resnet18": _resnet18,
    "hf_gpt2": lambda: _hf_gpt2("eager"),
    "hf_gpt2_l0": lambda: _hf_gpt2("eager", layers=0),
    "hf_gpt2_l1": lambda: _hf_gpt2("eager", layers=1),
    "hf_gpt2_sdpa": lambda: _hf_gpt2("sdpa"),
    "hf_llama": _hf_llama,
    "hf_bert": _hf_bert,
    "hf_vit": _hf_vit,
    "hf_t5_encoder": _hf_t5_encoder,
    "hf_whisper_encoder": _hf_whisper_encoder,
    "hf_mixtral_moe": _hf_mixtral_moe,
    "top2_moe": _top2_moe,
    "mobilenet_v3_small": _mobilenet_v3_small_like,
    "causal_mask": _causal_mask_probe,
    "positions": _positions_probe,
    "rotate_half": _rotate_half_probe,
    "inverted_residual": _inverted_residual,
    "resnet_basic": _resnet_basic,
}


def build_one(name: str, mode: str, folder: Path) -> None:
    import torch

    import fusec

    torch.manual_seed(0)
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
        ref = model.double()(*[x.double() if x.is_floating_point() else x for x in inputs])
        model.float()
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    try:
        compiled = fusec.compile(model, *inputs, target="cuda", fusion=(mode == "fused"),
                                 cache=False)
    except Exception as error:  # noqa: BLE001 - a refusal is a result, recorded
        stem.with_suffix(".refused").write_text(f"{type(error).__name__}: {error}\n")
        return
    os.replace(compiled.path, stem.with_suffix(".so"))
    np.savez(stem.with_suffix(".npz"), *[x.numpy() for x in inputs],
             **{f"ref{i}": r.numpy() for i, r in enumerate(refs)})


def build(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names or list(MODELS):
        for mode in ("fused", "unfused"):
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
    try:
        model = rt.load(path)
        outs = model(*cuda_inputs)
        torch.cuda.synchronize()
        outs = [o.cpu().numpy() for o in (outs if isinstance(outs, tuple) else (outs,))]
    except Exception as error:  # noqa: BLE001 - a failure is a result, printed
        print(f"{path.stem}: ERROR {type(error).__name__}: {str(error).splitlines()[0][:300]}",
              flush=True)
        return 1
    errs = [float(np.linalg.norm(o.astype(np.float64) - r) / np.linalg.norm(r))
            for o, r in zip(outs, refs)]
    ok = all(e < TOLERANCE for e in errs)
    print(f"{path.stem}: {'ok' if ok else 'WRONG'} rel err "
          f"{', '.join(f'{e:.2e}' for e in errs)}; {len(model.kernels)} kernels", flush=True)
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
