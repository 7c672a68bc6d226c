"""A sweep of Hugging Face architectures through `fusec.compile` on the CPU: each built from
its config at a tiny size with seeded random weights (never a hub download), compiled,
and compared with the model run in float64 on fresh inputs.

    python bench/hf_architectures.py                 # every architecture below
    python bench/hf_architectures.py rwkv swin       # some of them
    python bench/hf_architectures.py --json out.json

It answers a user's first question ("does fusec take my model?") for the architectures
people run, beyond the zoo (bench/zoo.py), whose models are benchmarked at full size. Each
line: OK (relative error under 1e-5), BAD (a wrong result: a bug), FAIL (fusec refused it
or crashed: the error's first line), with the kernel count and the wall time of build +
compile + run. test/python/test_hf_architectures.py runs some of them in CI.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from typing import Any

TOLERANCE = 1e-5

# Tiny sizes for the text models: attribute names as HF configs map them.
_TEXT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=128, vocab_size=512, max_position_embeddings=128)
_GQA = dict(_TEXT, num_key_value_heads=2)
_PATCHES = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=128, image_size=32, patch_size=8)
_STAGES = dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1])
_WAVE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=128, conv_dim=[16, 16], conv_stride=[5, 2], conv_kernel=[10, 3],
             num_feat_extract_layers=2, num_conv_pos_embeddings=16,
             num_conv_pos_embedding_groups=4)

# model_type -> (inputs: "text", "image" or "audio"; config fields)
ARCHITECTURES: dict[str, tuple[str, dict[str, Any]]] = {
    # decoders
    "gpt_neo": ("text", dict(_TEXT, attention_types=[[["global", "local"], 1]], window_size=16)),
    "gpt_neox": ("text", _TEXT),
    "gptj": ("text", dict(_TEXT, rotary_dim=8)),
    "codegen": ("text", dict(_TEXT, rotary_dim=8, n_ctx=128)),
    "opt": ("text", dict(_TEXT, ffn_dim=128, word_embed_proj_dim=64)),
    "bloom": ("text", _TEXT),  # ALiBi
    "falcon": ("text", _TEXT),
    "mpt": ("text", dict(d_model=64, n_heads=4, n_layers=2, vocab_size=512)),
    "gpt_bigcode": ("text", _TEXT),  # multi-query attention
    "biogpt": ("text", _TEXT),
    "llama": ("text", _GQA),
    "mistral": ("text", _GQA),
    "qwen2": ("text", _GQA),
    "qwen3": ("text", dict(_GQA, head_dim=16)),  # q/k RMSNorm
    "phi": ("text", _TEXT),  # partial rotary
    "phi3": ("text", dict(_GQA, pad_token_id=0)),
    "gemma": ("text", dict(_TEXT, num_key_value_heads=1, head_dim=16)),
    "gemma2": ("text", dict(_GQA, head_dim=16)),  # soft-capping, sliding window
    "olmo": ("text", _TEXT),
    "granite": ("text", _GQA),
    "cohere": ("text", _GQA),
    "starcoder2": ("text", _GQA),
    "persimmon": ("text", _TEXT),
    "nemotron": ("text", _GQA),
    "rwkv": ("text", dict(_TEXT, attention_hidden_size=64, context_length=64)),  # time shift
    "mamba": ("text", dict(_TEXT, state_size=8)),  # selective scan, depthwise conv1d
    "falcon_mamba": ("text", dict(_TEXT, state_size=8)),
    # encoders
    "roberta": ("text", _TEXT),
    "xlm-roberta": ("text", _TEXT),
    "camembert": ("text", _TEXT),
    "distilbert": ("text", _TEXT),
    "albert": ("text", dict(_TEXT, embedding_size=32)),  # shared layers
    "electra": ("text", dict(_TEXT, embedding_size=32)),
    "deberta-v2": ("text", _TEXT),  # disentangled relative attention
    "mpnet": ("text", _TEXT),
    "convbert": ("text", dict(_TEXT, embedding_size=64)),  # span-based dynamic convolution
    "squeezebert": ("text", dict(_TEXT, embedding_size=64)),  # grouped 1x1 convolutions
    "mobilebert": ("text", dict(_TEXT, embedding_size=32, intra_bottleneck_size=32,
                                true_hidden_size=32)),
    # encoder-decoders (the decoder fed the inputs)
    "bart": ("text", dict(d_model=64, encoder_layers=1, decoder_layers=1, vocab_size=512,
                          encoder_attention_heads=4, decoder_attention_heads=4,
                          encoder_ffn_dim=128, decoder_ffn_dim=128)),
    "t5": ("text", dict(d_model=64, d_ff=128, num_layers=1, num_heads=4, d_kv=16,
                        vocab_size=512, decoder_start_token_id=0)),
    # vision
    "vit": ("image", _PATCHES),
    "deit": ("image", _PATCHES),
    "beit": ("image", _PATCHES),  # relative position bias
    "dinov2": ("image", _PATCHES),
    "dpt": ("image", _PATCHES),
    "yolos": ("image", dict(_PATCHES, image_size=[32, 32])),
    "clip_vision_model": ("image", _PATCHES),
    "siglip_vision_model": ("image", _PATCHES),
    "swin": ("image", dict(image_size=32, patch_size=2, embed_dim=16, depths=[1, 1],
                           num_heads=[2, 2], window_size=4)),  # shifted windows, rolls
    "focalnet": ("image", dict(image_size=32, embed_dim=16, depths=[1, 1],
                               hidden_sizes=[16, 32])),
    "levit": ("image", dict(image_size=64)),  # attention biases indexed by a buffer
    "convnext": ("image", _STAGES),
    "convnextv2": ("image", _STAGES),
    "poolformer": ("image", _STAGES),
    "segformer": ("image", dict(_STAGES, num_attention_heads=[1, 1, 2, 2],
                                decoder_hidden_size=32)),
    "resnet": ("image", dict(_STAGES, embedding_size=16)),
    "regnet": ("image", dict(_STAGES, embedding_size=16, groups_width=8)),
    "bit": ("image", dict(_STAGES, embedding_size=16, num_groups=8)),  # weight standardisation
    "mobilenet_v1": ("image", dict(image_size=64, depth_multiplier=0.35)),
    "mobilenet_v2": ("image", dict(image_size=64, depth_multiplier=0.35)),
    "cvt": ("image", dict(embed_dim=[16, 32, 64], num_heads=[1, 2, 4], depth=[1, 2, 3])),
    # audio
    "wav2vec2": ("audio", _WAVE),  # feature convolutions, group norm, conv positions
    "hubert": ("audio", _WAVE),
}


def build(model_type: str, batch: int = 2, seq: int = 24, samples: int = 800,
          dtype: str = "float32") -> tuple[Any, tuple[Any, ...]]:
    """(model in eval mode returning its first output, example inputs of `batch` rows:
    `seq` tokens, an image of the config's size or `samples` audio samples); seeded;
    weights and float inputs in `dtype`."""
    import torch
    import transformers

    kind, fields = ARCHITECTURES[model_type]
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **fields)
    config._attn_implementation = "eager"
    model = transformers.AutoModel.from_config(config).eval()
    if kind == "text":
        inputs = (torch.randint(1, 500, (batch, seq)),)
    elif kind == "audio":
        inputs = (torch.randn(batch, samples),)
    else:
        size = getattr(config, "image_size", 64)
        size = size[0] if isinstance(size, (list, tuple)) else size
        inputs = (torch.randn(batch, getattr(config, "num_channels", 3), size, size),)
    if dtype != "float32":
        model = model.to(getattr(torch, dtype))
        inputs = tuple(x.to(getattr(torch, dtype)) if x.is_floating_point() else x
                       for x in inputs)
    t5 = model_type == "t5"

    class FirstOutput(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x):
            extra = {"decoder_input_ids": x} if t5 else {}
            return self.model(x, return_dict=False, **extra)[0]

    return FirstOutput().eval(), inputs


def fresh(inputs: tuple[Any, ...], seed: int = 1) -> tuple[Any, ...]:
    """New inputs like `inputs` (token ids in the same range)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(1, 500, x.shape, generator=g) if not x.is_floating_point()
                 else torch.randn(x.shape, generator=g) for x in inputs)


def check(model_type: str, **shape: int) -> dict[str, Any]:
    """Compile one architecture (`shape`: `build`'s batch, seq, samples), run it on fresh
    inputs against float64: a result row."""
    import numpy as np
    import torch

    import fusec

    started = time.perf_counter()
    row: dict[str, Any] = {"model": model_type}
    model, inputs = build(model_type, **shape)
    run = fresh(inputs)
    with torch.no_grad():
        reference = copy.deepcopy(model).double()(
            *[x.double() if x.is_floating_point() else x for x in run]).numpy()
    try:
        compiled = fusec.compile(model, *inputs)
        out = np.asarray(compiled(*[x.numpy() for x in run]), dtype=np.float64)
    except Exception as error:  # noqa: BLE001 (a sweep reports every failure and goes on)
        row.update(status="FAIL", error=f"{type(error).__name__}: "
                   f"{str(error).strip().splitlines()[0][:300]}")
    else:
        error = float(np.linalg.norm(out - reference) / np.linalg.norm(reference))
        row.update(status="OK" if error < TOLERANCE else "BAD", error=error,
                   kernels=len(compiled.kernels))
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def main(argv: list[str] | None = None) -> int:
    import argparse
    import warnings

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", help="model types (default: all)")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--batch", type=int, default=2, help="rows per input (default 2)")
    p.add_argument("--seq", type=int, default=24, help="tokens per row (default 24)")
    p.add_argument("--samples", type=int, default=800,
                   help="audio samples per row (default 800)")
    args = p.parse_args(argv)
    unknown = [m for m in args.models if m not in ARCHITECTURES]
    if unknown:
        p.error(f"unknown model type(s) {', '.join(unknown)}; known: "
                f"{', '.join(ARCHITECTURES)}")
    warnings.simplefilter("ignore")
    rows = []
    for model_type in args.models or ARCHITECTURES:
        row = check(model_type, batch=args.batch, seq=args.seq, samples=args.samples)
        rows.append(row)
        detail = (f"error {row['error']:.2e}  kernels {row['kernels']:3d}"
                  if row["status"] != "FAIL" else row["error"])
        print(f"{model_type:20s} {row['status']:4s} {detail}  {row['seconds']:.1f} s",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r["model"] for r in rows if r["status"] != "OK"]
    print(f"{len(rows) - len(bad)} of {len(rows)} OK" + (f"; not: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
