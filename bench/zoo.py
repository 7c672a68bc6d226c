"""The model zoo: whole models as users bring them, built from configs or architectures with
seeded random weights (never a hub download), each in two sizes.

    small   the configs CI runs on the CPU (test/python/test_zoo.py: against float64, kernel
            counts pinned, and through `torch.compile(backend="fusec")`) and the H200's
            correctness runs use (test/gpu/model_zoo.py)
    full    the real models' sizes (GPT-2-small, BERT-base, ViT-B/16, ResNet-18/50, ...), for
            the benchmarks: `python bench/cpu.py --zoo full` (CPU, against eager and
            Inductor) and `python bench/zoo_gpu.py` (the H200)

    python bench/zoo.py                 # the zoo: name, size, parameters, what it exercises

`ZOO[name].build(size)` returns (model in eval mode, example inputs); `fresh_inputs(entry,
size, seed)` draws new inputs of the same shapes and ranges (token ids below the vocabulary,
padding masks with a padded tail), so that a check never runs on the example's own tensors.

The HF models need `transformers` (the `test` extra pins it). ResNet and MobileNet are
written here from torchvision's architecture (its wheel does not load beside this torch).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SIZES = ("small", "full")


@dataclass(frozen=True)
class Entry:
    name: str
    description: str
    # size -> (model, example inputs); the weights come from torch.manual_seed(0).
    make: Callable[[str], tuple[Any, tuple[Any, ...]]]
    # How each input is drawn afresh: "randn", ("ids", vocab), "mask" (ones, a padded tail).
    kinds: Callable[[str], tuple[Any, ...]]
    needs_transformers: bool = False

    def build(self, size: str = "small") -> tuple[Any, tuple[Any, ...]]:
        import torch

        if size not in SIZES:
            raise ValueError(f"zoo size must be one of {', '.join(SIZES)}, not {size!r}")
        torch.manual_seed(0)
        model, inputs = self.make(size)
        return model.eval(), inputs


def fresh_inputs(entry: Entry, size: str, seed: int) -> tuple[Any, ...]:
    """New inputs with the example's shapes and dtypes, drawn from `seed`."""
    import torch

    _, example = entry.build(size)
    g = torch.Generator().manual_seed(seed)
    out = []
    for x, kind in zip(example, entry.kinds(size)):
        if kind == "randn":
            out.append(torch.randn(x.shape, generator=g, dtype=x.dtype))
        elif kind == "mask":
            mask = torch.ones(x.shape, dtype=x.dtype)
            mask[-1, x.shape[-1] * 2 // 3:] = 0  # the last sequence padded
            out.append(mask)
        else:
            _, high = kind
            out.append(torch.randint(0, high, x.shape, generator=g, dtype=x.dtype))
    return tuple(out)


def _hf(model: Any, field: str, arg_names: tuple[str, ...], **fixed: Any) -> Any:
    """An HF model whose forward takes `arg_names` positionally and returns one tensor: the
    output's `field` (or the first of a tuple)."""
    import torch

    class Out(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(**dict(zip(arg_names, args)), **fixed)
            if field:
                return getattr(out, field)
            return out[0] if isinstance(out, tuple) else out

    return Out().eval()


# ---------------------------------------------------------------- HF transformers


def _gpt2(size: str, attn: str = "eager"):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    if size == "small":
        cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64,
                         attn_implementation=attn, eos_token_id=0, bos_token_id=0)
        seq = 32
    else:  # GPT-2-small: 12 layers, d768, 12 heads, 50257 tokens (124 M parameters)
        cfg, seq = GPT2Config(attn_implementation=attn), 128
    lm = GPT2LMHeadModel(cfg)
    return (_hf(lm, "logits", ("input_ids",), use_cache=False),
            (torch.randint(0, cfg.vocab_size, (1, seq)),))


def _llama(size: str):
    import torch
    from transformers import LlamaConfig, LlamaModel

    if size == "small":
        cfg = LlamaConfig(num_hidden_layers=2, hidden_size=128, intermediate_size=256,
                          num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                          max_position_embeddings=64, attn_implementation="eager")
        seq = 32
    else:  # a 160 M LLaMA: d1024, 8 layers, 16 heads over 4 KV heads (GQA), SwiGLU 2816
        cfg = LlamaConfig(num_hidden_layers=8, hidden_size=1024, intermediate_size=2816,
                          num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                          max_position_embeddings=2048, attn_implementation="eager")
        seq = 128
    return (_hf(LlamaModel(cfg), "last_hidden_state", ("input_ids",), use_cache=False),
            (torch.randint(0, cfg.vocab_size, (1, seq)),))


def _bert(size: str):
    """BERT with a padding mask and token types (its position_ids: a non-persistent buffer)."""
    import torch
    from transformers import BertConfig, BertModel

    if size == "small":
        cfg = BertConfig(num_hidden_layers=2, hidden_size=128, intermediate_size=256,
                         num_attention_heads=4, vocab_size=1000, max_position_embeddings=64,
                         attn_implementation="eager")
        batch, seq = 2, 32
    else:  # BERT-base: 12 layers, d768, 12 heads (110 M parameters)
        cfg, batch, seq = BertConfig(attn_implementation="eager"), 2, 128
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[-1, seq * 2 // 3:] = 0
    model = _hf(BertModel(cfg, add_pooling_layer=False), "last_hidden_state",
                ("input_ids", "attention_mask", "token_type_ids"))
    return model, (ids, mask, torch.randint(0, 2, (batch, seq)))


def _vit(size: str):
    import torch
    from transformers import ViTConfig, ViTModel

    if size == "small":
        cfg = ViTConfig(num_hidden_layers=2, hidden_size=128, intermediate_size=256,
                        num_attention_heads=4, image_size=64, patch_size=8,
                        attn_implementation="eager")
    else:  # ViT-B/16 at 224x224 (86 M parameters)
        cfg = ViTConfig(attn_implementation="eager")
    model = _hf(ViTModel(cfg, add_pooling_layer=False), "last_hidden_state", ("pixel_values",))
    return model, (torch.randn(1, 3, cfg.image_size, cfg.image_size),)


def _t5_encoder(size: str):
    import torch
    from transformers import T5Config, T5EncoderModel

    if size == "small":
        cfg = T5Config(num_layers=2, d_model=128, d_ff=256, num_heads=4, d_kv=32,
                       vocab_size=1000)
        seq = 32
    else:  # t5-small's encoder: 6 layers, d512, 8 heads, relative position buckets
        cfg = T5Config(num_layers=6, d_model=512, d_ff=2048, num_heads=8, d_kv=64,
                       vocab_size=32128)
        seq = 128
    return (_hf(T5EncoderModel(cfg), "last_hidden_state", ("input_ids",)),
            (torch.randint(0, cfg.vocab_size, (1, seq)),))


def _whisper_encoder(size: str):
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    if size == "small":
        cfg = WhisperConfig(encoder_layers=2, d_model=128, encoder_attention_heads=4,
                            encoder_ffn_dim=256, num_mel_bins=16, max_source_positions=32,
                            attn_implementation="eager")
    else:  # whisper-base's encoder: 6 layers, d512, 80 mel bins, 30 s of audio (3000 frames)
        cfg = WhisperConfig(encoder_layers=6, d_model=512, encoder_attention_heads=8,
                            encoder_ffn_dim=2048, num_mel_bins=80, max_source_positions=1500,
                            attn_implementation="eager")
    model = _hf(WhisperEncoder(cfg), "last_hidden_state", ("input_features",))
    return model, (torch.randn(1, cfg.num_mel_bins, 2 * cfg.max_source_positions),)


def _mixtral_moe(size: str):
    """HF's Mixtral sparse MoE block: router softmax, top-2, the experts' SwiGLU."""
    import torch
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    if size == "small":
        cfg, tokens = MixtralConfig(hidden_size=64, intermediate_size=128, num_local_experts=4,
                                    num_experts_per_tok=2), (2, 16)
    else:
        cfg, tokens = MixtralConfig(hidden_size=1024, intermediate_size=3584,
                                    num_local_experts=8, num_experts_per_tok=2), (4, 128)
    block = MixtralSparseMoeBlock(cfg)
    # A block built alone is not a PreTrainedModel: nothing initialises its experts'
    # parameters (torch.empty), so they are drawn here, as Mixtral's _init_weights would.
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, cfg.initializer_range)
    model = _hf(block, "", ("hidden_states",))
    return model, (torch.randn(*tokens, cfg.hidden_size),)


# ---------------------------------------------------------------- written here


def _bn(c: int) -> Any:
    """A BatchNorm with non-trivial statistics and affine (eval mode folds them)."""
    import torch

    bn = torch.nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.3, 0.3)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.3, 0.3)
    return bn


def _resnet(size: str, depth: int, groups: int = 1):
    """torchvision's ResNet-18 (basic blocks) or ResNet-50 (bottlenecks), v1.5 (the stride
    on the 3x3); with `groups`, ResNeXt-50 (32x4d: the bottleneck's 3x3 in 32 groups, 4
    channels per group in the first stage, 8, 16, 32 after; small: 8 groups, the same
    channels per group)."""
    import torch
    from torch import nn

    class Basic(nn.Module):
        expansion = 1

        def __init__(self, cin, w, stride):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, w, 3, stride, 1, bias=False), _bn(w)
            self.conv2, self.bn2 = nn.Conv2d(w, w, 3, 1, 1, bias=False), _bn(w)
            self.downsample = (nn.Sequential(nn.Conv2d(cin, w, 1, stride, bias=False), _bn(w))
                               if stride != 1 or cin != w else None)

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return torch.relu(out + (x if self.downsample is None else self.downsample(x)))

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, w, stride):
            super().__init__()
            # torchvision's width: planes * (width_per_group / 64) * groups (ResNeXt-50
            # 32x4d: twice the planes; small: 8 groups of 4 planes per 16).
            inner = w if groups == 1 else 2 * w
            self.conv1, self.bn1 = nn.Conv2d(cin, inner, 1, bias=False), _bn(inner)
            self.conv2, self.bn2 = (nn.Conv2d(inner, inner, 3, stride, 1, groups=groups,
                                              bias=False), _bn(inner))
            self.conv3, self.bn3 = nn.Conv2d(inner, 4 * w, 1, bias=False), _bn(4 * w)
            self.downsample = (nn.Sequential(nn.Conv2d(cin, 4 * w, 1, stride, bias=False),
                                             _bn(4 * w))
                               if stride != 1 or cin != 4 * w else None)

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            out = torch.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return torch.relu(out + (x if self.downsample is None else self.downsample(x)))

    block, layers = {18: (Basic, [2, 2, 2, 2]), 50: (Bottleneck, [3, 4, 6, 3])}[depth]
    # small: half width (ResNet-50: a quarter) and one block per stage past the first.
    width, classes, image, batch = ((64, 1000, 224, 1) if size == "full" else
                                    (32 if depth == 18 else 16, 10, 64, 2))
    if size == "small" and depth == 50:
        layers = [1, 1, 1, 1]

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), _bn(width),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            stages, cin = [], width
            for i, n in enumerate(layers):
                w = width * 2 ** i
                for j in range(n):
                    stages.append(block(cin, w, 2 if (i > 0 and j == 0) else 1))
                    cin = w * block.expansion
            self.stages = nn.Sequential(*stages)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(
                self.stages(self.stem(x)), 1), 1))

    return ResNet(), (torch.randn(batch, 3, image, image),)


def _mobilenet_v2(size: str):
    """torchvision's MobileNetV2: inverted residuals (1x1 expand, ReLU6, 3x3 depthwise,
    linear 1x1 project), width 1.0."""
    import torch
    from torch import nn

    def conv_bn(cin, cout, k, stride, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), _bn(cout)]
        return nn.Sequential(*layers, *([nn.ReLU6()] if act else []))

    class Inverted(nn.Module):
        def __init__(self, cin, cout, stride, t):
            super().__init__()
            hidden = cin * t
            self.residual = stride == 1 and cin == cout
            self.conv = nn.Sequential(*([conv_bn(cin, hidden, 1, 1)] if t != 1 else []),
                                      conv_bn(hidden, hidden, 3, stride, groups=hidden),
                                      conv_bn(hidden, cout, 1, 1, act=False))

        def forward(self, x):
            return x + self.conv(x) if self.residual else self.conv(x)

    # (expansion t, channels c, repeats n, stride s), torchvision's table.
    table = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
             (6, 160, 3, 2), (6, 320, 1, 1)]
    image, classes, last = 224, 1000, 1280
    if size == "small":  # the first four rows, one or two repeats, 64x64
        table, image, classes, last = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 1, 2)], 64, 10, 128

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            blocks, cin = [conv_bn(3, 32, 3, 2)], 32
            for t, c, n, s in table:
                for i in range(n):
                    blocks.append(Inverted(cin, c, s if i == 0 else 1, t))
                    cin = c
            blocks.append(conv_bn(cin, last, 1, 1))
            self.features = nn.Sequential(*blocks)
            self.classifier = nn.Linear(last, classes)

        def forward(self, x):
            return self.classifier(self.features(x).mean((2, 3)))

    return Net(), (torch.randn(1, 3, image, image),)


def _mobilenet_v3_small(size: str):
    """torchvision's MobileNetV3-small: hardswish, depthwise 3x3/5x5 with squeeze-excite
    (hardsigmoid), inverted residuals, a pooled classifier."""
    import torch
    from torch import nn

    def make_divisible(v):
        return max(8, int(v + 4) // 8 * 8)

    class SE(nn.Module):
        def __init__(self, c):
            super().__init__()
            squeeze = make_divisible(c // 4)
            self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)

        def forward(self, x):
            s = x.mean((2, 3), keepdim=True)
            return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))

    class Block(nn.Module):
        def __init__(self, cin, k, exp, cout, se, hs, stride):
            super().__init__()
            act = nn.Hardswish if hs else nn.ReLU
            layers = []
            if exp != cin:
                layers += [nn.Conv2d(cin, exp, 1, bias=False), _bn(exp), act()]
            layers += [nn.Conv2d(exp, exp, k, stride, k // 2, groups=exp, bias=False), _bn(exp),
                       act()]
            if se:
                layers.append(SE(exp))
            layers += [nn.Conv2d(exp, cout, 1, bias=False), _bn(cout)]
            self.block = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.block(x)
            return x + y if self.residual else y

    # (in, kernel, expanded, out, SE, hardswish, stride): torchvision's mobilenet_v3_small.
    table = [(16, 3, 16, 16, True, False, 2), (16, 3, 72, 24, False, False, 2),
             (24, 3, 88, 24, False, False, 1), (24, 5, 96, 40, True, True, 2),
             (40, 5, 240, 40, True, True, 1), (40, 5, 240, 40, True, True, 1),
             (40, 5, 120, 48, True, True, 1), (48, 5, 144, 48, True, True, 1),
             (48, 5, 288, 96, True, True, 2), (96, 5, 576, 96, True, True, 1),
             (96, 5, 576, 96, True, True, 1)]
    image, classes, head = 224, 1000, 1024
    if size == "small":
        table, image, classes, head = table[:4], 64, 10, 128

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            last = table[-1][3]
            self.features = nn.Sequential(
                nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), _bn(16), nn.Hardswish()),
                *(Block(*row) for row in table),
                nn.Sequential(nn.Conv2d(last, 6 * last, 1, bias=False), _bn(6 * last),
                              nn.Hardswish()))
            self.classifier = nn.Sequential(nn.Linear(6 * last, head), nn.Hardswish(),
                                            nn.Linear(head, classes))

        def forward(self, x):
            return self.classifier(self.features(x).mean((2, 3)))

    return Net(), (torch.randn(1, 3, image, image),)


def _top2_moe(size: str):
    """A top-2 mixture-of-experts layer written as users write it densely: every expert on
    every token, weighted by the renormalised top-2 router probabilities (a scatter of the
    top-k into a dense mask)."""
    import torch
    from torch import nn

    d, experts, tokens = (64, 4, (2, 16)) if size == "small" else (1024, 8, (4, 128))

    class Top2(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(d, experts, bias=False)
            self.up = nn.ModuleList(nn.Linear(d, 2 * d) for _ in range(experts))
            self.down = nn.ModuleList(nn.Linear(2 * d, d) for _ in range(experts))

        def forward(self, x):
            probs = torch.softmax(self.router(x), dim=-1)
            top, which = probs.topk(2, dim=-1)
            weights = torch.zeros_like(probs).scatter(-1, which, top / top.sum(-1, True))
            outs = torch.stack([dn(nn.functional.gelu(up(x)))
                                for up, dn in zip(self.up, self.down)], dim=-1)
            return (outs * weights.unsqueeze(-2)).sum(-1)

    return Top2(), (torch.randn(*tokens, d),)


def _ids(vocab_small: int, vocab_full: int):
    return lambda size: (("ids", vocab_small if size == "small" else vocab_full),)


def _randn(n: int = 1):
    return lambda size: ("randn",) * n


ZOO: dict[str, Entry] = {e.name: e for e in [
    Entry("gpt2", "HF GPT-2 LM (logits): learned positions, causal mask, tied lm_head",
          _gpt2, _ids(1000, 50257), True),
    Entry("gpt2_sdpa", "HF GPT-2 LM with attn_implementation='sdpa'",
          lambda s: _gpt2(s, "sdpa"), _ids(1000, 50257), True),
    Entry("bert", "HF BERT encoder: padding mask, token types",
          _bert, lambda size: (("ids", 1000 if size == "small" else 30522), "mask", ("ids", 2)),
          True),
    Entry("llama", "HF LLaMA: RMSNorm, RoPE, GQA, SwiGLU", _llama, _ids(1000, 32000), True),
    Entry("vit", "HF ViT: patch convolution, class token, encoder", _vit, _randn(), True),
    Entry("t5_encoder", "HF T5 encoder: relative position buckets, RMSNorm, no biases",
          _t5_encoder, _ids(1000, 32128), True),
    Entry("whisper_encoder", "HF Whisper encoder: two 1-D convolutions, GELU, sinusoids",
          _whisper_encoder, _randn(), True),
    Entry("mixtral_moe", "HF Mixtral sparse MoE block: top-2 routing, SwiGLU experts",
          _mixtral_moe, _randn(), True),
    Entry("resnet18", "ResNet-18 (torchvision's architecture)", lambda s: _resnet(s, 18),
          _randn()),
    Entry("resnet50", "ResNet-50 (torchvision's architecture, bottlenecks)",
          lambda s: _resnet(s, 50), _randn()),
    Entry("resnext50", "ResNeXt-50 32x4d (torchvision's architecture, grouped 3x3s)",
          lambda s: _resnet(s, 50, groups=32 if s == "full" else 8), _randn()),
    Entry("mobilenet_v2", "MobileNetV2 (torchvision's architecture)", _mobilenet_v2, _randn()),
    Entry("mobilenet_v3_small", "MobileNetV3-small (torchvision's architecture)",
          _mobilenet_v3_small, _randn()),
    Entry("top2_moe", "a dense top-2 mixture of experts (router, topk, scatter, GELU experts)",
          _top2_moe, _randn()),
]}


def parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=SIZES, action="append")
    args = p.parse_args(argv)
    for size in args.size or SIZES:
        for entry in ZOO.values():
            model, inputs = entry.build(size)
            shapes = ", ".join(f"{tuple(x.shape)} {str(x.dtype).removeprefix('torch.')}"
                               for x in inputs)
            print(f"{entry.name:20s} {size:5s} {parameters(model) / 1e6:8.2f} M  {shapes}  "
                  f"{entry.description}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
