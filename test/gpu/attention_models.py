"""HF transformers models (configs with seeded random weights, bf16, head dim 64) through
fusec's CUDA target, checked on the H200 against the same model in float64: the attention
as each model writes it (GPT-2 eager and SDPA, LLaMA's GQA + RoPE, BERT's padding mask,
ViT, Whisper's encoder) must become attention kernels and stay correct in the whole model.

    python test/gpu/attention_models.py build DIR [NAME ...]   here: DIR/attm/<name>.so
    python3 test/gpu/attention_models.py run DIR [NAME ...]     the H200 (the inputs and the
                                                                 float64 reference come from
                                                                 the build: DIR/attm/*.npz)

Tolerance: max(1e-2, 1.5x torch's own bf16 error) in relative norm against float64. Exit 1
on a miss or when a model has no attention kernel.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
SEQ = 128


def _text(model_fn):
    def make():
        torch.manual_seed(0)
        lm = model_fn().eval()

        class Out(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lm = lm

            def forward(self, ids):
                out = self.lm(input_ids=ids)
                return out.logits if hasattr(out, "logits") else out.last_hidden_state
        return Out(), [("ids", (2, SEQ), 1000)]
    return make


def gpt2(attn):
    from transformers import GPT2Config, GPT2LMHeadModel

    return _text(lambda: GPT2LMHeadModel(GPT2Config(
        n_layer=2, n_embd=256, n_head=4, vocab_size=1000, n_positions=SEQ,
        attn_implementation=attn, eos_token_id=0, bos_token_id=0)))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return _text(lambda: LlamaForCausalLM(LlamaConfig(
        num_hidden_layers=2, hidden_size=512, intermediate_size=1024, num_attention_heads=8,
        num_key_value_heads=2, vocab_size=1000, max_position_embeddings=SEQ,
        attn_implementation="sdpa")))


def bert():
    from transformers import BertConfig, BertModel

    def make():
        torch.manual_seed(0)
        m = BertModel(BertConfig(num_hidden_layers=2, hidden_size=256, intermediate_size=512,
                                 num_attention_heads=4, vocab_size=1000,
                                 max_position_embeddings=SEQ, attn_implementation="sdpa"),
                      add_pooling_layer=False).eval()

        class Out(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, ids, mask):
                return self.m(input_ids=ids, attention_mask=mask).last_hidden_state
        return Out(), [("ids", (2, SEQ), 1000), ("mask", (2, SEQ))]
    return make


def vit():
    from transformers import ViTConfig, ViTModel

    def make():
        torch.manual_seed(0)
        m = ViTModel(ViTConfig(num_hidden_layers=2, hidden_size=256, intermediate_size=512,
                               num_attention_heads=4, image_size=64, patch_size=8,
                               attn_implementation="sdpa"), add_pooling_layer=False).eval()

        class Out(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, pixels):
                return self.m(pixel_values=pixels).last_hidden_state
        return Out(), [("x", (2, 3, 64, 64))]
    return make


MODELS = {"hf_gpt2_eager": gpt2("eager"), "hf_gpt2_sdpa": gpt2("sdpa"), "hf_llama": llama(),
          "hf_bert": bert(), "hf_vit": vit()}


def _inputs(specs, seed: int, device: str, dtype=torch.bfloat16) -> list[torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(seed)
    out = []
    for spec in specs:
        if spec[0] == "ids":
            out.append(torch.randint(0, spec[2], spec[1], device=device, generator=g))
        elif spec[0] == "mask":  # padding: the second sequence's last quarter
            mask = torch.ones(spec[1], dtype=torch.int64, device=device)
            mask[1, -spec[1][1] // 4:] = 0
            out.append(mask)
        else:
            out.append(torch.randn(spec[1], device=device, generator=g).to(dtype))
    return out


def build(out_dir: Path, names: list[str]) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from fusec.compiler import driver
    from fusec.compiler.frontend import import_torch
    from fusec.compiler.pipeline import CompileOptions

    folder = out_dir / "attm"
    folder.mkdir(parents=True, exist_ok=True)
    report = {}
    for name in names:
        model, specs = MODELS[name]()
        model = model.to(torch.bfloat16)
        with driver.quiet_torch_logs():
            text = import_torch(model, *_inputs(specs, 0, "cpu"))
        t0 = time.perf_counter()
        meta = driver.compile_text(text, f"<{name}>", CompileOptions(target="cuda",
                                                                     model_name=name),
                                   str(folder / f"{name}.so"))
        paths = [k["info"].get("path") for k in meta["kernels"]]
        report[name] = {"kernels": len(paths), "attention": paths.count("attention"),
                        "fallback": paths.count("fallback"),
                        "compile_s": round(time.perf_counter() - t0, 2)}
        # The reference here (the device needs no transformers): inputs from a fresh seed,
        # the model in float64 and torch's own bf16 on them.
        seed = int(time.time_ns() % 2**31)
        xs = _inputs(specs, seed, "cpu")
        with torch.no_grad():
            ours_torch = model(*xs).float()
            ref = model.double()(*[x.double() if x.is_floating_point() else x for x in xs])
        arrays = {f"x{i}": (x.float() if x.is_floating_point() else x).numpy()
                  for i, x in enumerate(xs)}
        np.savez(folder / f"{name}.npz", ref=ref.numpy(), torch_bf16=ours_torch.numpy(),
                 **arrays)
        report[name]["input_seed"] = seed
        print(name, json.dumps(report[name]), flush=True)
    (folder / "models.json").write_text(json.dumps(report, indent=1))


def run(art_dir: Path, names: list[str]) -> int:
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu as bench

    built = json.loads((art_dir / "attm" / "models.json").read_text())
    ok = True
    for name in names:
        data = np.load(art_dir / "attm" / f"{name}.npz")
        n_in = sum(1 for k in data.files if k.startswith("x"))
        xs = []
        for i in range(n_in):
            x = torch.from_numpy(data[f"x{i}"]).cuda()
            xs.append(x.to(torch.bfloat16) if x.is_floating_point() else x)
        fusec = bench.FusecModel(art_dir / "attm" / f"{name}.so")
        outs = fusec.outputs_like("cuda")
        fusec.bind(xs, outs)()
        torch.cuda.synchronize()
        ref = torch.from_numpy(data["ref"]).cuda()
        err = bench.rel_err(outs[0], ref)
        torch_err = bench.rel_err(torch.from_numpy(data["torch_bf16"]).cuda(), ref)
        tol = max(1e-2, 1.5 * torch_err)
        row = {"name": name, "err": err, "torch_bf16_err_cpu": torch_err, "tol": tol,
               **built[name]}
        row["ok"] = err <= tol and built[name]["attention"] > 0
        ok = ok and row["ok"]
        print(json.dumps(row), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    names = sys.argv[3:] or list(MODELS)
    if mode == "build":
        build(folder, names)
        sys.exit(0)
    sys.exit(run(folder, names))
