"""Long reductions over few rows (`--fusion-split-reductions`): fold in partials, then combine.

Found 2026-12-04: a whole-tensor mean of 16 M fp32 values was 5.3e-4 from float64 on the
CPU (torch's 3.6e-8), a sum of squares of 4 M values 1.8e-5, GroupNorm at batch 1 (4 groups
of 4 M values) 5.7e-5: each folded its values in one order. On the H200 the same `x.sum()`
was one thread's loop (the fallback path) and GroupNorm at batch 1 ran one block per group.
Numerics here on the CPU against float64; the GPU's plan checked without a GPU (numerics
and times on the H200: test/gpu/movement.py's `sumsq_rows_f32`, `abs_mean_all_*`,
`groupnorm_b1_*`)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")
F = torch.nn.functional

import fusec  # noqa: E402
from fusec.passes import cost_model  # noqa: E402


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))


def rel_err(out: np.ndarray, ref: torch.Tensor) -> float:
    ref = ref.detach().double().numpy()
    return float(np.linalg.norm(np.asarray(out, dtype=np.float64) - ref) / np.linalg.norm(ref))


class LongSums(torch.nn.Module):
    def forward(self, x, y):
        return ((x * x).sum(-1), y.abs().mean(),
                F.group_norm(y.reshape(1, 64, 512, 512), 4))


def test_long_sums_on_the_cpu_round_like_torch():
    model = LongSums().eval()
    compiled = fusec.compile(model, torch.rand(2, 1 << 22), torch.rand(4096, 4096))
    x, y = torch.rand(2, 1 << 22), torch.randn(4096, 4096) + 0.5
    outs = compiled(x.numpy(), y.numpy())
    refs = model(x.double(), y.double())
    # Before: 1.8e-5, 5.3e-4 and 5.7e-5; torch's own fp32: 6e-8, 4e-8, 5e-8.
    for out, ref in zip(outs, refs):
        assert rel_err(out, ref) < 5e-7
    # The sum of squares: 256 partials of 16384 per row, then their combine; the mean: one
    # combine of 1024 partials; GroupNorm: the mean's and the variance's partials and
    # combines, the normalisation: 7 kernels (12 before: each long fold its own loop nest).
    assert len(compiled.kernels) == 7, [k["ops"] for k in compiled.kernels]


class Norm(torch.nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x):
        if self.kind == "layer":
            return F.layer_norm(x, list(x.shape[1:]))
        if self.kind == "group":
            return F.group_norm(x, 1)
        return F.instance_norm(x)


@pytest.mark.parametrize("kind,shape", [("layer", (2, 509, 509)), ("group", (1, 3, 509, 509)),
                                        ("instance", (1, 4, 509, 509))])
def test_norms_over_several_awkward_dims_on_values_far_from_zero(kind, shape):
    """Found by a probe at scale (2026-12-04), inputs `randn + 1000`: a norm's statistics over
    several dims of awkward (prime) extents were not split (no factor of 509 near what was
    wanted) and folded 259081 to 777243 values in one order: LayerNorm 3.1e-3 from float64,
    GroupNorm(1, 3) 8.2e-2, instance_norm 2.4e-3 (torch: 2e-5 to 3e-5; at 1021 x 1021, 0.33
    to 0.46). Now the outer dim is taken whole (509 partials of 509 values): 5e-5 to 2e-4
    over twelve draws (the mean's last bits, times the 1000 it is taken from); torch's
    cascade sums 2e-5 to 3e-5."""
    model = Norm(kind).eval()
    compiled = fusec.compile(model, torch.randn(*shape) + 1000)
    x = torch.randn(*shape) + 1000
    assert rel_err(compiled(x.numpy()), model(x.double())) < 1e-3


@pytest.mark.parametrize("kind,shape", [("layer", (2, 509, 509)), ("instance", (1, 4, 509, 509)),
                                        ("group", (1, 3, 1021, 1021))])
def test_norms_far_from_zero_at_torchs_error(kind, shape):
    """The combine of a long f32 fold's partials adds in f64 on the CPU and rounds once: its
    partial sums are large (a 1000-offset sum of 3 M values is 3e9, whose f32 ulp is 256),
    and every f32 step of the combine rounded at that magnitude. Inputs `randn + 1000`,
    three fresh draws: at most 3x torch fp32's own error from float64 (+1e-6). Before
    (2026-12-05, six draws): LayerNorm 3-9e-5 against torch's 1-2e-5, instance_norm 4-7e-5
    against 1.4-2.7e-5, GroupNorm(1, 3) at 1021 x 1021 1.2-3.0e-4 against 1e-6 to 6.5e-5;
    after, each within 1.8x of torch's, most equal to it."""
    model = Norm(kind).eval()
    compiled = fusec.compile(model, torch.randn(*shape) + 1000)
    assert len(compiled.kernels) >= 3  # partials, a combine, the normalisation
    for seed in range(3):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(100 + seed)) + 1000
        ref = model(x.double())
        ours = rel_err(compiled(x.numpy()), ref)
        torchs = rel_err(model(x).numpy(), ref)
        assert ours <= 3 * torchs + 1e-6, (seed, ours, torchs)


def test_a_short_or_wide_reduction_is_left_alone():
    """Many rows or short ones: no partials (the kernel count of a softmax, a row sum)."""
    class Rows(torch.nn.Module):
        def forward(self, x):
            return x.softmax(-1), x.sum(-1)

    model = Rows().eval()
    compiled = fusec.compile(model, torch.randn(512, 4096))
    x = torch.randn(512, 4096)
    outs = compiled(x.numpy())
    for out, ref in zip(outs, model(x.double())):
        assert rel_err(out, ref) < 1e-6
    assert len(compiled.kernels) == 1


def test_partials_the_cost_model_asks_for():
    h200, cpu = cost_model.device_named("nvidia-h200"), cost_model.device_named("cpu")
    # One row of 16 M on the H200: four blocks per SM (528), each folding 32768 values.
    assert cost_model.reduction_partials(1, 1 << 24, False, h200) == 528
    assert cost_model.factor_partials([1 << 24], 528) == (0, 512)
    # GroupNorm's [channels of a group, pixels]: the channels whole, the pixels cut.
    assert cost_model.factor_partials([16, 16384], 528) == (1, 32)
    # Rows enough for the GPU, or a max on the CPU (exact in any order): none.
    assert cost_model.reduction_partials(4096, 4096, False, h200) == 1
    assert cost_model.reduction_partials(1, 1 << 24, True, cpu) == 1
    # A float sum on the CPU: chunks of at most 16384 values.
    assert cost_model.reduction_partials(1, 1 << 24, False, cpu) == 1024
    # A prime length: no divisor at all, no split; two prime dims: the outer one whole,
    # however far from what is wanted (two levels of folding either way).
    assert cost_model.factor_partials([1000003], 24) == (0, 1)
    assert cost_model.factor_partials([1021, 1021], 64) == (1, 1)
    # On the H200 a reduction over leading dims is the data-movement family's (its slices
    # and tree keep each thread's fold short): no partials asked for.
    assert cost_model.reduction_partials(64, 1 << 20, False, h200, trailing=False) == 1


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _cuda_kernels(fn, *inputs):
    """The launches the CUDA target builds for `fn` (no GPU needed: PTX only)."""
    import fusec.compiler.targets.cuda as cg
    from fusec.compiler import driver
    from fusec.compiler import pipeline as pl
    from fusec.compiler.frontend import import_torch

    with driver.quiet_torch_logs():
        text = import_torch(_Fn(fn).eval(), *inputs)
    module = driver.parse(text, "<test>")
    options = cg.CudaOptions(cubin=False)
    pl.lower(module, pl.CompileOptions(target="cuda", cuda=options), stop_after="tiled")
    program = cg.generate(module, options)
    return [k for k in program.plan.launches if k.launch_kind == "kernel"]


def _path(kernel) -> str | None:
    return (getattr(kernel, "info", None) or {}).get("path")


def _blocks(kernel) -> int:
    grid = kernel.grid
    return int(np.prod(grid)) if isinstance(grid, (tuple, list)) else int(grid)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_whole_tensor_sum_fills_the_gpu(dtype):
    """x.sum() over 16 M values: 512 partial rows (was: one thread's loop, the fallback),
    then one block combines them."""
    x = torch.rand(1, 1 << 24).to(dtype)
    kernels = _cuda_kernels(lambda t: t.sum(), x)
    assert all(_path(k) != "fallback" for k in kernels)
    assert _blocks(kernels[0]) >= 2 * 132
    assert [_blocks(k) for k in kernels[1:]] == [1] * (len(kernels) - 1)


def test_cuda_groupnorm_at_batch_one_fills_the_gpu():
    """GroupNorm(32, 512) at batch 1: the statistics' partials run 512 blocks (were 32, one
    per group); no kernel on the fallback path, none that copies a view of the input."""
    w, b = torch.randn(512), torch.randn(512)
    x = torch.randn(1, 512, 64, 64)
    kernels = _cuda_kernels(lambda t, w, b: F.group_norm(t, 32, w, b), x, w, b)
    assert all(_path(k) != "fallback" for k in kernels)
    assert max(_blocks(k) for k in kernels[:2]) >= 2 * 132


@pytest.mark.parametrize("batch", [1, 2])
def test_cuda_groupnorm_after_a_residual_add_compiles(batch):
    """GroupNorm after an elementwise op (a UNet block's residual add, SiLU): the statistics'
    partials took the add with them and also wrote its result, through torch-mlir's
    reshapes, as a second output of another shape, which no CUDA kernel builds ("cannot
    compile this kernel for cuda", found building probes for the H200 without one). The
    partials now write their partials only; the add is recomputed where it is needed."""
    kernels = _cuda_kernels(lambda t: F.silu(F.group_norm(F.silu(t) + 1, 32)),
                            torch.randn(batch, 256, 64, 64))
    assert all(_path(k) != "fallback" for k in kernels)


class ArgExtremes(torch.nn.Module):
    def forward(self, x, y):
        return x.argmax(-1), x.min(-1), y.argmax(), y.argmin()


def _arg_inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 50257, generator=g)
    y = torch.randn(1021, 1024, generator=g)
    top = x.abs().max() + 1
    x[0, 100] = x[0, 40000] = float("nan")  # the first NaN, in another chunk than the second
    x[1, 50256] = float("nan")  # the last element
    x[2, 1733 * 3 + 5] = x[2, 1733 * 20] = top  # tied maxima in two chunks: the first
    x[3, 1733 * 7 - 1] = x[3, 1733 * 7] = -top  # tied minima across a chunk boundary
    x[4] = float("-inf")  # no element moves the index: 0
    x[5] = 0.5  # all tied: 0
    if seed % 2:
        y[700, 3] = float("nan")
    y[17, 5] = y[900, 1] = y.abs().max() + 1
    return x, y


def test_argmax_split_into_partials_keeps_torchs_answer():
    """A row argmax / argmin too long for one GPU block's registers (greedy decoding's argmax
    over a 50257-token vocabulary, found 2026-12-05 on the fallback path) is split into
    partials (value, position in the chunk) and a combine that meets the chunks in order.
    The split the H200's cost model asks for, compiled here for the CPU: indices equal
    torch's with NaNs (the first), ties within and across chunks (the first), rows of -inf
    and whole-tensor argmax / argmin."""
    from fusec.compiler import driver
    from fusec.compiler.frontend import import_torch
    from fusec.passes.registry import run_pipeline

    model = ArgExtremes().eval()
    with driver.quiet_torch_logs():
        text = import_torch(model, *_arg_inputs(0))
    module = driver.parse(text, "<test>")
    run_pipeline(module, ["fusion-nan-minmax", "fusion-split-reductions{device=nvidia-h200}"])
    split_text = str(module)
    assert split_text.count("linalg.index") == 8  # 4 partials' positions, 4 combines' chunks
    compiled = fusec.compile(split_text)
    for seed in (1, 2):
        x, y = _arg_inputs(seed)
        outs = compiled(x.numpy(), y.numpy())
        refs = model(x, y)
        # Nested as the model returns them: max's (values, indices) a tuple of its own.
        assert isinstance(outs[1], tuple) and len(outs[1]) == 2
        outs = [outs[0], *outs[1], outs[2], outs[3]]
        refs = [refs[0], refs[1].values, refs[1].indices, refs[2], refs[3]]
        assert len(outs) == len(refs)
        for i, (out, ref) in enumerate(zip(outs, refs)):
            assert np.array_equal(np.asarray(out), ref.numpy(), equal_nan=True), (seed, i)


def test_cuda_vocabulary_argmax_leaves_the_fallback():
    """argmax over 8 rows of 50257 logits: partials over 29 chunks of 1733 (50257 = 29 x
    1733: 232 blocks, every SM busy), then a combine: two row kernels of the fast emitter
    (was one fallback kernel, a thread per row)."""
    kernels = _cuda_kernels(lambda t: t.argmax(-1), torch.randn(8, 50257))
    assert [_path(k) for k in kernels] == ["fast", "fast"]
    assert _blocks(kernels[0]) >= 132


def test_cuda_decode_attention_stays_one_kernel():
    """A decode step's SDPA (B8 H32, one query row, 8192 keys): its softmax's reductions are
    256 rows of 8192, which the split asks partials for. Split before the attention
    recogniser ran (session 42's pipeline), the softmax was no softmax to it: six kernels
    on the H200 instead of the attention kernel (found on the H200, 2026-12-05, run 168).
    The split now runs after the attention chains are groups."""
    q = torch.randn(8, 32, 1, 128).to(torch.bfloat16)
    k, v = (torch.randn(8, 32, 8192, 128).to(torch.bfloat16) for _ in range(2))
    kernels = _cuda_kernels(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v)
    assert [_path(k) for k in kernels] == ["attention"]


def test_cpu_attention_over_long_keys_stays_one_kernel():
    """The same on the CPU, whose split asks partials of float sums longer than 16384: an
    SDPA over 32768 keys stays the attention kernel, within 1e-5 of float64."""
    q, k, v = torch.randn(1, 2, 4, 32), torch.randn(1, 2, 32768, 32), torch.randn(1, 2, 32768, 32)
    compiled = fusec.compile(_Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v)).eval(),
                             q, k, v)
    assert [kernel.get("kind") for kernel in compiled.metadata["kernels"]] == ["attention"]
    out = compiled(q.numpy(), k.numpy(), v.numpy())
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert rel_err(out, ref) < 1e-5
