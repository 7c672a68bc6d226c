"""The data-movement kernel family (compiler/targets/cuda/movement.py) through fusec's whole
pipeline on the H200: transposes, head split / merge, concats, slices, pads, gathers and
repeat_interleave, alone and inside real blocks, against eager and Inductor, with the HBM
floor beside them.

    python test/gpu/movement.py build DIR [CASE ...]   here: DIR/mv/<case>.so, and for the
                                                        blocks <case>.fb.so (the family off:
                                                        what the fallback path made of them),
                                                        DIR/mv/cases.json
    python3 test/gpu/movement.py run DIR [CASE ...]     the H200: numerics on fresh random
                                                        inputs against float64 (twice), the
                                                        kernel counts, then times (CUDA events,
                                                        medians) and the HBM floor
    python3 test/gpu/movement.py check DIR [CASE ...]   numerics only (compute-sanitizer)

Exit 1 when a case's error is over its tolerance (pure data movement: exactly 0; bf16
arithmetic: 1e-2, blocks: 1.25x torch's own bf16 error; fp32: 1e-6) or when a build's kernels
are not all off the fallback path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
bf16, f32 = torch.bfloat16, torch.float32


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rms(x, w):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h.to(x.dtype)


def llama_block(x, w_in, wq, wk, wv, wo, w_post, wg, wu, wd, cos, sin):
    """A LLaMA decoder layer as HF writes it (RMSNorm in f32, RoPE with rotate_half's cat,
    GQA by repeat_interleave, SDPA causal, SwiGLU), weights as inputs."""
    b, t, d = x.shape
    heads, kv, hd = 16, 4, 64
    h = _rms(x, w_in)
    q = F.linear(h, wq).view(b, t, heads, hd).transpose(1, 2)
    k = F.linear(h, wk).view(b, t, kv, hd).transpose(1, 2)
    v = F.linear(h, wv).view(b, t, kv, hd).transpose(1, 2)
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    k = k.repeat_interleave(heads // kv, dim=1)
    v = v.repeat_interleave(heads // kv, dim=1)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + F.linear(y.transpose(1, 2).reshape(b, t, d), wo)
    h = _rms(x, w_post)
    return x + F.linear(F.silu(F.linear(h, wg)) * F.linear(h, wu), wd)


def _bn(x, mean, var, w, b):
    return F.batch_norm(x, mean, var, w, b, training=False)


def resnet_basic(x, w1, m1, v1, g1, b1, w2, m2, v2, g2, b2):
    """ResNet-18's basic block (layer1): conv3x3-BN-ReLU-conv3x3-BN + x, ReLU."""
    y = F.relu(_bn(F.conv2d(x, w1, None, 1, 1), m1, v1, g1, b1))
    return F.relu(_bn(F.conv2d(y, w2, None, 1, 1), m2, v2, g2, b2) + x)


def bottleneck(x, w1, m1, v1, g1, b1, w2, m2, v2, g2, b2, w3, m3, v3, g3, b3):
    """ResNet-50's bottleneck (layer1): 1x1 256->64, 3x3 64->64, 1x1 64->256, + x."""
    y = F.relu(_bn(F.conv2d(x, w1), m1, v1, g1, b1))
    y = F.relu(_bn(F.conv2d(y, w2, None, 1, 1), m2, v2, g2, b2))
    return F.relu(_bn(F.conv2d(y, w3), m3, v3, g3, b3) + x)


def inverted_residual(x, w1, m1, v1, g1, b1, w2, m2, v2, g2, b2, w3, m3, v3, g3, b3):
    """MobileNetV2's inverted residual (t=6): 1x1 expand, depthwise 3x3, 1x1 project, + x."""
    y = F.relu6(_bn(F.conv2d(x, w1), m1, v1, g1, b1))
    y = F.relu6(_bn(F.conv2d(y, w2, None, 1, 1, 1, y.shape[1]), m2, v2, g2, b2))
    return _bn(F.conv2d(y, w3), m3, v3, g3, b3) + x


def _conv_specs(x, convs, dtype):
    specs = [(x, dtype)]
    for w in convs:
        specs.append((w, dtype))
        specs += [((w[0],), dtype)] * 4  # mean, var, weight, bias
    return specs


RESNET = _conv_specs((8, 64, 56, 56), [(64, 64, 3, 3), (64, 64, 3, 3)], f32)
BOTTLENECK = _conv_specs((8, 256, 56, 56), [(64, 256, 1, 1), (64, 64, 3, 3), (256, 64, 1, 1)],
                         bf16)
MOBILENET = _conv_specs((8, 32, 28, 28), [(192, 32, 1, 1), (192, 1, 3, 3), (32, 192, 1, 1)],
                        f32)

_D, _FF = 1024, 2816
LLAMA = [((4, 512, _D), bf16), ((_D,), bf16), ((_D, _D), bf16), ((256, _D), bf16),
         ((256, _D), bf16), ((_D, _D), bf16), ((_D,), bf16), ((_FF, _D), bf16),
         ((_FF, _D), bf16), ((_D, _FF), bf16), ((512, 64), bf16), ((512, 64), bf16)]


def _gpt2_block():
    spec = importlib.util.spec_from_file_location("fusec_tc_gemm", ROOT / "test" / "gpu" /
                                                  "tc_gemm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.gpt2_block, [(s, bf16) for s in mod.GPT2_SHAPES]


# name: (function, [(shape, dtype) or ("ids", shape, high)], tolerance, what it is)
CASES = {
    "transpose_8192": (lambda x: x.t().contiguous(), [((8192, 8192), bf16)], 0.0,
                       "transpose 8192x8192 bf16"),
    "transpose_add_f32": (lambda x, y: x.t() + y, [((4096, 4096), f32), ((4096, 4096), f32)],
                          1e-6, "x.t() + y fp32 4096"),
    # Inputs that disagree on the contiguous dim: the staged transpose (transpose.py).
    "transpose_add_bf16": (lambda x, y: x.t() + y, [((4096, 4096), bf16), ((4096, 4096), bf16)],
                           None, "x.t() + y bf16 4096 (staged)"),
    "transpose_add_ragged": (lambda x, y: x.t() * 2 + y, [((999, 1000), f32), ((1000, 999), f32)],
                             1e-6, "x.t() * 2 + y fp32 1000x999 (staged, partial squares)"),
    "permute_residual": (lambda x, r: x.permute(0, 2, 3, 1) + r,
                         [((8, 64, 32, 32), f32), ((8, 32, 32, 64), f32)], 1e-6,
                         "NCHW -> NHWC + residual fp32 (staged)"),
    "transpose_bias_mul": (lambda x, y, b: (x.transpose(1, 2) + b) * y,
                           [((16, 512, 384), f32), ((16, 384, 512), f32), ((512,), f32)], 1e-6,
                           "(x.transpose(1, 2) + bias) * y fp32 (staged, a broadcast read)"),
    "transpose_slice_add": (lambda x, y: x[:, 8:520].t() + y,
                            [((600, 1024), f32), ((512, 600), f32)], 1e-6,
                            "x[:, 8:520].t() + y fp32 (the slice is a gather: not staged)"),
    "self_transpose_add": (lambda x: x + x.t() * 2, [((2048, 2048), f32)], 1e-6,
                           "x + x.t() * 2 fp32 (one input read both ways: staged)"),
    "two_transposes_add": (lambda x, y, z: x.t() + y.t() + z, [((2048, 2048), f32)] * 3, 1e-6,
                           "x.t() + y.t() + z fp32 (two staged reads)"),
    "transpose_ragged": (lambda x: x.t().contiguous(), [((1000, 999), f32)], 0.0,
                         "transpose 1000x999 fp32 (partial squares, scalar vectors)"),
    "concat_last": (lambda a, b: torch.cat([a, b], dim=-1),
                    [((16384, 4096), bf16), ((16384, 4096), bf16)], 0.0,
                    "concat of two 16384x4096 bf16 (last dim)"),
    "concat_rows": (lambda a, b: torch.cat([a, b], dim=0),
                    [((16384, 4096), bf16), ((16384, 4096), bf16)], 0.0,
                    "concat of two 16384x4096 bf16 (rows)"),
    "embedding": (lambda ids, table: F.embedding(ids, table),
                  [("ids", (16384,), 50257), ((50257, 768), bf16)], 0.0,
                  "embedding gather 50257x768 bf16, 16384 tokens"),
    "head_split": (lambda x: x.view(8, 1024, 12, 64).transpose(1, 2).contiguous(),
                   [((8, 1024, 768), bf16)], 0.0, "head split (0,2,1,3) B8 T1024 H12 D64"),
    "k_transpose": (lambda x: x.view(8, 1024, 12, 64).permute(0, 2, 3, 1).contiguous(),
                    [((8, 1024, 768), bf16)], 0.0, "K^T (0,2,3,1) B8 T1024 H12 D64"),
    "head_merge": (lambda y: y.transpose(1, 2).reshape(8, 1024, 768),
                   [((8, 12, 1024, 64), bf16)], 0.0, "head merge B8 H12 T1024 D64"),
    "qkv_slice": (lambda x: x[:, :, 768:1536].reshape(8, 1024, 12, 64).transpose(1, 2)
                  .contiguous(), [((8, 1024, 2304), bf16)], 0.0,
                  "slice of a fused QKV + head split"),
    "rope": (lambda q, cos, sin: q * cos + _rotate_half(q) * sin,
             [((4, 16, 512, 64), bf16), ((512, 64), bf16), ((512, 64), bf16)], 1e-2,
             "RoPE with rotate_half's cat, B4 H16 T512 D64"),
    "repeat_kv": (lambda k: k.repeat_interleave(4, dim=1), [((4, 4, 512, 64), bf16)], 0.0,
                  "GQA repeat_interleave 4 -> 16 heads"),
    "pad": (lambda x: F.pad(x, (1, 1, 1, 1)), [((32, 64, 56, 56), f32)], 0.0,
            "zero pad 1 of 32x64x56x56 fp32"),
    "strided_slice": (lambda x: x[:, ::2].contiguous(), [((4096, 4096), f32)], 0.0,
                      "every other column, 4096x4096 fp32"),
    "mean_seq_bf16": (lambda x: x.mean(dim=1), [((8, 1024, 768), bf16)], 1e-2,
                      "mean over the sequence B8 T1024 D768 bf16 (f32 sums)"),
    "colsum": (lambda x: x.sum(dim=0), [((16384, 1024), f32)], 1e-6,
               "column sums of 16384x1024 fp32"),
    "bn_mean": (lambda x: x.mean(dim=(0, 2, 3)), [((32, 64, 56, 56), f32)], 1e-6,
                "BatchNorm's mean over N, H, W of 32x64x56x56 fp32"),
    # Issue 16: short pools decided by the physical layout (movement.py, eval_reduction).
    "pool_nhwc_bf16": (lambda x: x.permute(0, 3, 1, 2).mean((2, 3), keepdim=True),
                       [((32, 7, 7, 2048), bf16)], 1e-2,
                       "ResNet-50's pool: NHWC B32 7x7 C2048 read through a transpose, bf16 "
                       "(direct, vectors along C)"),
    "pool_nchw_rows_bf16": (lambda x: torch.relu(x.transpose(0, 1)).mean((2, 3)),
                            [((1280, 32, 7, 7), bf16)], 1e-2,
                            "a 7x7 mean along NCHW rows behind a transpose, 32x1280 outputs, "
                            "bf16 (reduce shape: 32 slices a row)"),
    "resnet_end_b1_bf16": (lambda x, m, v: torch.relu(
        (x.permute(0, 3, 1, 2) - m[:, None, None]) * torch.rsqrt(v.abs()[:, None, None] + 1e-5)
    ).mean((2, 3)), [((1, 7, 7, 512), bf16), ((512,), bf16), ((512,), bf16)], 1e-2,
        "ResNet-18's end at batch 1: BatchNorm + ReLU + NHWC 7x7 pool, 512 outputs of 49 "
        "points, bf16 (reduce shape: the short fold split over 32 slices)"),
    "stem_pool_b1_bf16": (lambda x: F.max_pool2d(torch.relu(x), 3, 2, 1),
                          [((1, 64, 112, 112), bf16)], 0.0,
                          "ReLU + max-pool 3x3 s2 p1 at batch 1, 1x64x112x112 bf16 (direct, "
                          "vectors narrowed until every SM has two blocks)"),
    # Windows longer than the family unrolls (64 points): split over a block's slices.
    "maxpool_spp_k13": (lambda x: F.max_pool2d(x, 13, 1, 6), [((8, 256, 20, 20), f32)], 0.0,
                        "YOLO's SPP max-pool 13x13 stride 1 pad 6, 8x256x20x20 fp32 (169 "
                        "points: reduce shape)"),
    "avgpool_14_bf16": (lambda x: F.avg_pool2d(x, 14), [((32, 1024, 14, 14), bf16)], 1e-2,
                        "a fixed 14x14 average pool over a whole plane, 32x1024 bf16 (196 "
                        "points along NCHW rows)"),
    "dwconv_13_bf16": (lambda x, w: F.conv2d(x, w, None, 1, 6, 1, 256),
                       [((8, 256, 28, 28), bf16), ((256, 1, 13, 13), bf16)], 1e-2,
                       "a large-kernel depthwise conv 13x13 (RepLKNet), B8 C256 28x28 bf16 "
                       "(169 points, f32 sums)"),
    "grouped_conv_8": (lambda x, w: F.relu(F.conv2d(x, w, None, 1, 1, 1, 32)),
                       [((8, 256, 28, 28), f32), ((256, 8, 3, 3), f32)], 1e-5,
                       "ResNeXt's grouped 3x3 conv, 32 groups of 8 channels, B8 28x28 fp32 "
                       "(im2col + batched GEMM) + ReLU"),
    "grouped_conv_16_s2_bf16": (lambda x, w: F.conv2d(x, w, None, 2, 1, 1, 32),
                                [((8, 512, 28, 28), bf16), ((512, 16, 3, 3), bf16)], None,
                                "a grouped 3x3 conv, stride 2, 32 groups of 16 channels, B8 "
                                "28x28 bf16 (im2col + batched GEMM)"),
    # Reductions read back at every element: cut after each (split_at_reshapes).
    "groupnorm_silu": (lambda x, w, b: F.silu(F.group_norm(x, 32, w, b)),
                       [((8, 256, 32, 32), f32), ((256,), f32), ((256,), f32)], 1e-5,
                       "GroupNorm(32 groups) + SiLU, B8 C256 32x32 fp32 (a diffusion UNet's)"),
    "groupnorm_silu_bf16": (lambda x, w, b: F.silu(F.group_norm(x, 32, w, b)),
                            [((8, 256, 32, 32), bf16), ((256,), bf16), ((256,), bf16)], None,
                            "GroupNorm(32 groups) + SiLU, B8 C256 32x32 bf16"),
    "layernorm_channels": (lambda x, w, b: F.layer_norm(x.permute(0, 2, 3, 1), (96,), w, b),
                           [((8, 96, 56, 56), f32), ((96,), f32), ((96,), f32)], 1e-5,
                           "ConvNeXt's LayerNorm over channels behind a permute, B8 C96 "
                           "56x56 fp32"),
    # A transposed convolution: its input spread over zeros (a strided insert_slice), then
    # a convolution (im2col + GEMM).
    "conv_transpose": (lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1),
                       [((8, 64, 28, 28), f32), ((64, 32, 4, 4), f32), ((32,), f32)], 1e-5,
                       "ConvTranspose2d 64 -> 32, k4 s2 p1, B8 28x28 fp32 (upsampling)"),
    "conv_transpose_op_bf16": (lambda x, w: F.conv_transpose2d(x, w, None, 2, 1, 1),
                               [((8, 64, 28, 28), bf16), ((64, 32, 3, 3), bf16)], None,
                               "ConvTranspose2d k3 s2 p1 output_padding 1, bf16"),
    "softmax_dim1": (lambda x: torch.softmax(x, dim=1), [((64, 512, 256), f32)], 1e-5,
                     "softmax over a non-last dim, 64x512x256 fp32"),
    "experts_sum_bf16": (lambda w, *e: (torch.stack(e, -1) * w.unsqueeze(2)).sum(-1),
                         [((4, 128, 8), bf16)] + [((4, 128, 1024), bf16)] * 8, 1e-2,
                         "top2_moe's weighted sum of 8 experts [4, 128, 1024] bf16 (direct)"),
    "bool_transpose": (lambda x: (x.t() > 0).float(), [((1024, 768), f32)], 0.0,
                       "a transposed comparison (bool inside, direct shape)"),
    "where_transpose": (lambda x: torch.where(x.t() > 0, x.t(), 0.0), [((1000, 384), f32)],
                        0.0, "where over a transpose (transpose shape, ragged)"),
    "f64_permute": (lambda x: x.permute(2, 0, 1).contiguous(), [((30, 50, 70), torch.float64)],
                    0.0, "fp64 permute (2, 0, 1): 16x16 squares"),
    "flip_odd": (lambda x: x.flip(-1), [((1000, 333), f32)], 0.0,
                 "flip of the last dim, odd length (lanes apart)"),
    "maxpool_stem": (lambda x: F.max_pool2d(x, 3, 2, 1), [((8, 64, 112, 112), f32)], 0.0,
                     "ResNet stem max-pool 3x3 s2 p1, 8x64x112x112 fp32"),
    "resnet_basic": (resnet_basic, RESNET, 1e-5, "ResNet-18 basic block B8 C64 56x56 fp32"),
    "resnet_basic_bf16": (resnet_basic, [(s, bf16) for s, _ in RESNET], None,
                          "ResNet-18 basic block B8 C64 56x56 bf16"),
    "bottleneck_bf16": (bottleneck, BOTTLENECK, None,
                        "ResNet-50 bottleneck B8 256-64-256 56x56 bf16"),
    "mobilenet_block": (inverted_residual, MOBILENET, 1e-5,
                        "MobileNetV2 inverted residual B8 32-192-32 28x28 fp32"),
    "mobilenet_block_bf16": (inverted_residual, [(s, bf16) for s, _ in MOBILENET], None,
                             "MobileNetV2 inverted residual B8 32-192-32 28x28 bf16"),
    "bottleneck": (bottleneck, [(s, f32) for s, _ in BOTTLENECK], 1e-5,
                   "ResNet-50 bottleneck B8 256-64-256 56x56 fp32"),
    "resnet_basic_tf32": (resnet_basic, RESNET, None,
                          "ResNet-18 basic block fp32, --cuda-conv-tf32 (torch's default)"),
    "bottleneck_tf32": (bottleneck, [(s, f32) for s, _ in BOTTLENECK], None,
                        "ResNet-50 bottleneck fp32, --cuda-conv-tf32"),
    # Long reductions over few rows (`--fusion-split-reductions`): partials, then a combine.
    "sumsq_rows_f32": (lambda x: (x * x).sum(-1), [((8, 2097152), f32)], 1e-5,
                       "sum of squares, 8 rows of 2 M fp32"),
    "abs_mean_all_f32": (lambda x: x.abs().mean(), [((4096, 4096), f32)], 1e-5,
                         "mean of |x| over 16 M fp32 (one value)"),
    "abs_mean_all_bf16": (lambda x: x.abs().mean(), [((4096, 4096), bf16)], 1e-2,
                          "mean of |x| over 16 M bf16 (one value)"),
    "groupnorm_b1_f32": (lambda x, w, b: F.group_norm(x, 32, w, b),
                         [((1, 512, 128, 128), f32), ((512,), f32), ((512,), f32)], 1e-5,
                         "GroupNorm(32, 512) batch 1, 128x128 fp32 (a VAE decoder's)"),
    "groupnorm_b1_bf16": (lambda x, w, b: F.group_norm(x, 32, w, b),
                          [((1, 512, 128, 128), bf16), ((512,), bf16), ((512,), bf16)], None,
                          "GroupNorm(32, 512) batch 1, 128x128 bf16"),
    "llama_block": (llama_block, LLAMA, None, "LLaMA block B4 T512 d1024 (GQA, RoPE, SwiGLU)"),
    "gpt2_block": (None, None, None, "GPT-2 block B8 T1024 d768 (SDPA causal)"),
}
BLOCKS = {"llama_block", "gpt2_block"}
REDUCTIONS = {"mean_seq_bf16", "colsum", "bn_mean", "pool_nhwc_bf16", "pool_nchw_rows_bf16",
              "experts_sum_bf16"}  # also built with the family off, to compare
CNN = {"resnet_basic", "resnet_basic_bf16", "bottleneck_bf16", "bottleneck", "mobilenet_block",
       "mobilenet_block_bf16", "resnet_basic_tf32", "bottleneck_tf32"}
OPTIONS = {"resnet_basic_tf32": {"conv_tf32": True}, "bottleneck_tf32": {"conv_tf32": True}}


def case(name: str):
    fn, specs, tol, desc = CASES[name]
    if name == "gpt2_block":
        fn, specs = _gpt2_block()
    return fn, specs, tol, desc


def _bench():
    spec = importlib.util.spec_from_file_location("fusec_bench_gpu", ROOT / "bench" / "gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _inputs(name: str, seed: int, device: str = "cuda") -> list[torch.Tensor]:
    fn, specs, _, _ = case(name)
    g = torch.Generator(device=device).manual_seed(seed)
    out = []
    for i, spec in enumerate(specs):
        if spec[0] == "ids":
            out.append(torch.randint(0, spec[2], spec[1], device=device, generator=g))
            continue
        shape, dtype = spec
        x = torch.randn(shape, device=device, generator=g)
        if name in CNN:
            if len(shape) == 1:  # BatchNorm: mean, var (positive), weight, bias
                k = (i - 2) % 5
                x = torch.rand(shape, device=device, generator=g) + 0.5 if k == 1 else \
                    x * 0.1 + (1.0 if k == 2 else 0.0)
            elif i > 0:  # a filter: 1 / sqrt(fan_in)
                x = x / (shape[1] * shape[2] * shape[3]) ** 0.5
        elif name in BLOCKS:
            if len(shape) == 1:  # norm weights near 1, biases small
                x = x * 0.1 + (1.0 if name == "llama_block" or i in (1, 7) else 0.0)
            elif len(shape) == 2 and name == "llama_block" and i >= 10:
                x = torch.cos(x)  # cos / sin tables: in [-1, 1]
            elif len(shape) == 2:
                x = x / shape[-1] ** 0.5
        out.append(x.to(dtype))
    return out


def build(out_dir: Path, only: list[str] | None = None) -> dict:
    from fusec.compiler import driver
    from fusec.compiler.frontend import import_torch
    from fusec.compiler.pipeline import CompileOptions
    from fusec.compiler.targets.cuda.options import CudaOptions

    Wrap = _bench().Wrap
    folder = out_dir / "mv"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cases.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    # MOVEMENT_CUDA_OPTIONS='{"field": value}': every case built with these CudaOptions too
    # (an A/B of one option against a default build).
    extra = json.loads(os.environ.get("MOVEMENT_CUDA_OPTIONS", "{}"))
    for name in CASES:
        if only and name not in only:
            continue
        fn, _, _, desc = case(name)
        args = _inputs(name, 0, "cpu")
        with driver.quiet_torch_logs():
            text = import_torch(Wrap(fn), *args)
        entry = {"description": desc}
        for suffix, on in (("", True), (".fb", False)):
            if not on and (name not in BLOCKS | CNN | REDUCTIONS or name in OPTIONS):
                continue
            t0 = time.perf_counter()
            options = CompileOptions(target="cuda", model_name=name, cuda=CudaOptions(
                movement=on, **{**OPTIONS.get(name, {}), **extra}))
            try:
                meta = driver.compile_text(text, f"<movement {name}>", options,
                                           str(folder / f"{name}{suffix}.so"))
            except Exception as e:  # noqa: BLE001 - the family off: a refusal, recorded
                if on:
                    raise
                entry["fb"] = {"refused": str(e).splitlines()[0][:300]}
                (folder / f"{name}{suffix}.so").unlink(missing_ok=True)  # no stale build
                continue
            entry["fb" if suffix else "mv"] = {
                "compile_s": round(time.perf_counter() - t0, 3),
                "kernels": len(meta["kernels"]),
                "paths": [k["info"].get("path") for k in meta["kernels"]],
                "shapes": [k["info"].get("shape") for k in meta["kernels"]
                           if k["info"].get("path") == "movement"]}
        report[name] = entry
        print(name, json.dumps(entry), flush=True)
    path.write_text(json.dumps(report, indent=1))
    return report


def _tolerance(name: str, torch_err: float) -> float:
    tol = case(name)[2]
    return max(1e-2, 1.25 * torch_err) if tol is None else tol


def check(art_dir: Path, names: list[str]) -> list[dict]:
    bench = _bench()
    rows = []
    for name in names:
        fn = case(name)[0]
        row = {"name": name}
        model = bench.FusecModel(art_dir / "mv" / f"{name}.so")
        errs = []
        for trial in range(2):
            xs = _inputs(name, int(time.time_ns() % 2**31) + trial)
            outs = model.outputs_like("cuda")
            for o in outs:
                o.fill_(float("nan"))
            model.bind(xs, outs)()
            torch.cuda.synchronize()
            ref = fn(*[x.double() if x.is_floating_point() else x for x in xs])
            errs.append(bench.rel_err(outs[0], ref))
            row["torch_err"] = max(row.get("torch_err", 0.0), bench.rel_err(fn(*xs), ref))
        row["err"] = max(errs)
        row["tol"] = _tolerance(name, row["torch_err"])
        row["kernels"] = model.kernels
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def run(art_dir: Path, names: list[str]) -> int:
    bench = _bench()
    built = json.loads((art_dir / "mv" / "cases.json").read_text())
    rows = check(art_dir, names)
    ok = True
    for row in rows:
        name = row["name"]
        paths = built[name]["mv"]["paths"]
        row_ok = row["err"] <= row["tol"] and "fallback" not in paths and \
            row["kernels"] == built[name]["mv"]["kernels"]
        ok = ok and row_ok
        fn = case(name)[0]
        xs = _inputs(name, 1)
        mv = bench.FusecModel(art_dir / "mv" / f"{name}.so")
        out = mv.outputs_like("cuda")
        ind = torch.compile(fn)
        ind(*xs)
        reps = 20 if name in BLOCKS | CNN else 50
        # In interleaved rounds (bench/gpu.py's interleaved_ms): a GPU under sustained load
        # slows down, so a fixed order favours whatever runs first.
        times = bench.interleaved_ms({"fusec": mv.bind(xs, out), "eager": lambda: fn(*xs),
                                      "inductor": lambda: ind(*xs)}, reps)
        if name in BLOCKS | CNN | REDUCTIONS and (art_dir / "mv" / f"{name}.fb.so").exists():
            fb = bench.FusecModel(art_dir / "mv" / f"{name}.fb.so")
            fb_out = fb.outputs_like("cuda")
            row["kernels_fallback_build"] = fb.kernels
            try:
                times["fusec_fallback"] = bench.time_ms(fb.bind(xs, fb_out), 3, warmup=1)
            except RuntimeError as e:  # the fallback path's own failures, reported
                row["fallback_error"] = str(e)[:200]
        moved = sum(x.numel() * x.element_size() for x in xs) + \
            sum(o.numel() * o.element_size() for o in out)
        floor = moved / bench.copy_bandwidth() * 1e3
        row["gpu_kernels_fusec"] = bench.count_kernels(mv.bind(xs, out))
        row["kernels_eager"] = bench.count_kernels(lambda: fn(*xs))
        row["kernels_inductor"] = bench.count_kernels(lambda: ind(*xs))
        row.update({"ms": {k: round(v, 4) for k, v in times.items()},
                    "hbm_floor_ms": round(floor, 4),
                    "floor_fraction": round(floor / times["fusec"], 3),
                    "vs_best_of_eager_inductor": round(
                        min(times["eager"], times["inductor"]) / times["fusec"], 3),
                    "paths": paths, "shapes": built[name]["mv"]["shapes"], "ok": row_ok})
        if "fusec_fallback" in times:
            row["vs_fallback"] = round(times["fusec_fallback"] / times["fusec"], 1)
        print(json.dumps(row), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    names = sys.argv[3:] or list(CASES)
    if mode == "build":
        build(folder, sys.argv[3:] or None)
        sys.exit(0)
    if mode == "check":
        rows = check(folder, names)
        sys.exit(0 if all(r["err"] <= r["tol"] for r in rows) else 1)
    sys.exit(run(folder, names))
