"""Models users brought that fusec got wrong or could not take (2026-12-01), each against
float64 on fresh random inputs, with its kernel count: top-2 routing with `scatter(-1, ...)`,
RoPE tables registered as non-persistent buffers, uint8 images and masks, bf16 weights."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")
nn = torch.nn
F = torch.nn.functional

import fusec  # noqa: E402


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))


def rel_err(out: np.ndarray, ref: torch.Tensor) -> float:
    ref = ref.detach().double().numpy()
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


class Top2Router(nn.Module):
    """Mixture-of-experts routing as it is usually written: top-2 of a softmax, the
    weights scattered back along the last dim (`scatter(-1, ...)` killed the process in
    torch-mlir's TMTensor conversion), the experts mixed by them."""

    def __init__(self, d: int = 16, experts: int = 4) -> None:
        super().__init__()
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(experts))

    def forward(self, x):
        probs = self.gate(x).softmax(-1)
        top, idx = probs.topk(2, dim=-1)
        weights = torch.zeros_like(probs).scatter(-1, idx, top / top.sum(-1, keepdim=True))
        outs = torch.stack([e(x) for e in self.experts], dim=-1)
        return (outs * weights.unsqueeze(-2)).sum(-1)


class RotaryTables(nn.Module):
    """RoPE with its inverse frequencies registered `persistent=False` (HF LLaMA's
    `inv_freq`): torch.export keeps them among its constants."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2) / dim)),
                             persistent=False)
        self.register_buffer("position_ids", torch.arange(8).unsqueeze(0), persistent=False)

    def forward(self, x):
        angles = self.position_ids[0, :, None].float() * self.inv_freq[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        rotated = torch.cat((-x2, x1), dim=-1)
        return x * emb.cos() + rotated * emb.sin()


def test_top2_router_scatter_last_dim():
    torch.manual_seed(0)
    model = Top2Router().eval()
    x = torch.randn(6, 16)
    compiled = fusec.compile(model, x)
    with torch.no_grad():
        ref = model.double()(x.double())
    assert rel_err(compiled(x.numpy()), ref) < 1e-5
    assert 1 <= len(compiled.kernels) <= 12


def test_non_persistent_buffers():
    torch.manual_seed(0)
    model = RotaryTables().eval()
    x = torch.randn(2, 8, 16)
    compiled = fusec.compile(model, x)
    ref = model.double()(x.double())
    assert rel_err(compiled(x.numpy()), ref) < 1e-5
    assert len(compiled.kernels) == 3


def test_uint8_in_and_out():
    """torch.uint8 in and out (images, masks): torch-mlir's i8 is signless; the artifact
    says uint8, takes uint8 arrays and returns values above 127 as they are."""

    class Scale(nn.Module):
        def forward(self, image, gain):
            return (image.float() * gain).clamp(0, 255).to(torch.uint8), image // 2

    image = torch.randint(0, 256, (3, 8), dtype=torch.uint8)
    image[0, 0] = 255
    gain = torch.rand(3, 8) * 2
    compiled = fusec.compile(Scale(), image, gain)
    inputs, outputs = compiled.signature.inputs, compiled.signature.outputs
    assert [s.dtype for s in inputs] == ["uint8", "float32"]
    assert [s.dtype for s in outputs] == ["uint8", "uint8"]
    assert [s.name for s in inputs] == ["image", "gain"]
    scaled, halved = compiled(image.numpy(), gain.numpy())
    ref_scaled, ref_halved = Scale()(image, gain)
    assert scaled.dtype == np.uint8 and halved.dtype == np.uint8
    assert np.array_equal(halved, ref_halved.numpy()) and halved[0, 0] == 127
    # float -> uint8 truncation of values within one ulp of an integer may differ by 1.
    assert np.abs(scaled.astype(int) - ref_scaled.numpy().astype(int)).max() <= 1
    with pytest.raises(ValueError, match=r"input 0 \('image'\): expected dtype uint8, got int8"):
        compiled(image.numpy().astype(np.int8), gain.numpy())


def test_bf16_weights_import():
    """A bf16 model with weights (torch-mlir needs ml_dtypes for them, now a dependency)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.GELU()).to(torch.bfloat16).eval()
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    compiled = fusec.compile(model, x)
    out = np.asarray(compiled(x), dtype=np.float32)
    ref = model.double()(x.double())
    assert rel_err(out, ref) < 2e-2  # bf16 rounding of the output: 2^-8 relative


def test_dict_outputs_come_back_as_a_dict():
    """A model returning {name: tensor} gets a dict back, keyed the same, on both targets'
    artifacts (the names are in the signature)."""

    class Heads(nn.Module):
        def forward(self, x):
            return {"logits": x * 2, "score": x.sum(-1)}

    x = torch.randn(4, 8)
    compiled = fusec.compile(Heads().eval(), x)
    out = compiled(x.numpy())
    assert isinstance(out, dict) and list(out) == ["logits", "score"]
    ref = Heads()(x.double())
    assert rel_err(out["logits"], ref["logits"]) < 1e-6
    assert rel_err(out["score"], ref["score"]) < 1e-6
    gpu = fusec.compile(Heads().eval(), x, target="cuda")  # built here, no GPU needed
    assert [s.name for s in gpu.signature.outputs] == ["logits", "score"]


def test_cuda_outputs_are_named_like_the_cpus():
    """CUDA outputs were named after the kernel that wrote them (`fusec_k0_out0`)."""
    gpu = fusec.compile(nn.Softmax(-1), torch.randn(4, 8), target="cuda")
    assert [s.name for s in gpu.signature.outputs] == ["output0"]
    assert [s.name for s in gpu.signature.inputs] == ["input"]


class TimeShift(nn.Module):
    """RWKV's time shift, `ZeroPad2d((0, 0, 1, -1))`: a pad of 1 and a crop of 1 on the
    sequence, and a crop and pad on both sides of the features. torch-mlir folded the
    first, whose result has its input's shape, away as the identity (RWKV's outputs were
    95% wrong)."""

    def __init__(self) -> None:
        super().__init__()
        self.shift = nn.ZeroPad2d((0, 0, 1, -1))

    def forward(self, x):
        shifted = self.shift(x)
        return x * 0.5 + shifted, nn.functional.pad(x, (2, -3, -1, 1), value=0.25)


def test_negative_pads_crop():
    x = torch.randn(2, 6, 8)
    compiled = fusec.compile(TimeShift().eval(), x)
    fresh = torch.randn(2, 6, 8)
    mixed, cropped = compiled(fresh.numpy())
    ref_mixed, ref_cropped = TimeShift()(fresh.double())
    assert mixed.shape == (2, 6, 8) and cropped.shape == (2, 6, 7)
    assert rel_err(mixed, ref_mixed) < 1e-6
    assert rel_err(cropped, ref_cropped) < 1e-6
    assert len(compiled.kernels) == 1  # both read x: one horizontal kernel


class RelativePositionBias(nn.Module):
    """Swin's and LeViT's relative-position bias: a learned table indexed by a buffer of
    indices, the buffer itself inside `index.Tensor`'s list (torch-mlir's importer refused
    it: "Heterogeneous lists are not supported")."""

    def __init__(self, window: int = 4, heads: int = 2, persistent: bool = True) -> None:
        super().__init__()
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window),
                                            indexing="ij")).flatten(1)
        relative = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window - 1
        index = relative[..., 0] * (2 * window - 1) + relative[..., 1]
        self.table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads))
        self.register_buffer("index", index, persistent=persistent)

    def forward(self, scores):
        bias = self.table[self.index].permute(2, 0, 1)
        return (scores + bias).softmax(-1)


@pytest.mark.parametrize("persistent", [True, False])
def test_buffer_as_an_index_in_a_list(persistent):
    torch.manual_seed(0)
    model = RelativePositionBias(persistent=persistent).eval()
    scores = torch.randn(3, 2, 16, 16)
    compiled = fusec.compile(model, scores)
    fresh = torch.randn(3, 2, 16, 16)
    with torch.no_grad():
        ref = model.double()(fresh.double())
    assert rel_err(compiled(fresh.numpy()), ref) < 1e-6
    assert len(compiled.kernels) == 1


class StepCounter(nn.Module):
    """A buffer updated in place by `forward` (a step counter; a cache is the same)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5))
        self.register_buffer("steps", torch.zeros(5))

    def forward(self, x):
        self.steps.add_(1.0)
        return x * self.weight + self.steps


def test_buffer_updated_in_place_is_state_kept_between_calls(capfd):
    """torch.export returns the updated buffer as an output before the user's: the caller
    got a tuple whose first element was the buffer. Now it is model state, as in torch."""
    torch.manual_seed(0)
    model = StepCounter().eval()
    reference = StepCounter().eval()
    reference.load_state_dict(model.state_dict())
    compiled = fusec.compile(model, torch.randn(5))
    assert "forward updates buffer 'steps' in place" in capfd.readouterr().err
    assert [s.name for s in compiled.signature.inputs] == ["x"]
    assert len(compiled.signature.outputs) == 1 and len(compiled.kernels) == 1
    for _ in range(3):
        x = torch.randn(5)
        out = compiled(x.numpy())
        assert isinstance(out, np.ndarray)
        with torch.no_grad():
            assert rel_err(out, reference.double()(x.double())) < 1e-6


def test_each_compile_of_a_stateful_model_has_its_own_state(tmp_path, monkeypatch):
    """A second fusec.compile of a fresh, identical model takes the first's cached artifact;
    both loaded the same library, so the second model's counter went on from the first's
    (4, 5, 6 where eager gives 1, 2, 3). Each load of a model with state is now an instance
    of its own; one without state still shares its library."""
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    model = StepCounter().eval()
    x = torch.randn(5)
    first = fusec.compile(model, x)
    outs = [first(x.numpy()) for _ in range(3)]
    second = fusec.compile(model, x)  # the same model and weights: the cached artifact
    assert second.path == first.path
    for step, out in enumerate(outs, start=1):
        expected = x.double() * model.weight.double() + step
        assert rel_err(out, expected) < 1e-6
        assert rel_err(second(x.numpy()), expected) < 1e-6  # from 1 again, not 4
    again = fusec.runtime.load(first.path)
    assert rel_err(again(x.numpy()), x.double() * model.weight.double() + 1) < 1e-6
    assert rel_err(first(x.numpy()), x.double() * model.weight.double() + 4) < 1e-6


def test_parameter_updated_in_place_is_not_an_output(capfd):
    """RWKV rescales its weights in place on its first call in eval mode (the compiled model
    returned the weights first). Each call computes from the weights at compile time; the
    caller gets the model's one output."""

    class Rescale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(6))

        def forward(self, x):
            with torch.no_grad():
                self.weight.div_(2.0)
            return x * self.weight

    torch.manual_seed(0)
    model = Rescale().eval()
    before = model.weight.detach().clone()
    compiled = fusec.compile(model, torch.randn(6))
    assert "forward updates parameter 'weight' in place" in capfd.readouterr().err
    assert torch.equal(model.weight.detach(), before)  # compiling ran nothing for real
    assert compiled.input_updates == []
    for _ in range(2):
        x = torch.randn(6)
        out = compiled(x.numpy())
        assert isinstance(out, np.ndarray)
        assert rel_err(out, x.double() * before.double() / 2.0) < 1e-6


class KVCacheWrite(nn.Module):
    """A decode step that writes this step's keys into a cache the caller owns, then attends
    over it: the cache is an input updated in place (it was computed on but never written
    back: the caller's cache kept its old rows)."""

    def forward(self, cache, k, q):
        cache[:, 3:5] = k
        return torch.softmax(q @ cache.transpose(-1, -2) * 0.25, -1) @ cache


@pytest.mark.parametrize("as_torch", [False, True])
def test_input_updated_in_place_is_written_back(as_torch, capfd):
    torch.manual_seed(0)
    cache, k, q = torch.randn(2, 8, 16), torch.randn(2, 2, 16), torch.randn(2, 1, 16)
    compiled = fusec.compile(KVCacheWrite(), cache.clone(), k, q)
    assert "in place" not in capfd.readouterr().err  # nothing is lost, nothing to say
    assert compiled.input_updates == [(0, 1)]
    assert len(compiled.signature.outputs) == 2  # the C ABI writes the cache's new value
    for _ in range(2):
        cache, k, q = torch.randn(2, 8, 16), torch.randn(2, 2, 16), torch.randn(2, 1, 16)
        ref_cache = cache.double()
        with torch.no_grad():
            ref = KVCacheWrite()(ref_cache, k.double(), q.double())
        given = cache.clone() if as_torch else cache.numpy().copy()
        out = compiled(given, k if as_torch else k.numpy(), q if as_torch else q.numpy())
        assert isinstance(out, np.ndarray) and out.shape == (2, 1, 16)  # one output, as torch
        assert rel_err(out, ref) < 1e-6
        assert rel_err(np.asarray(given), ref_cache) == 0.0
        assert not np.array_equal(np.asarray(given), cache.numpy())


def test_input_updated_in_place_through_out_and_strided_arrays():
    """`out=` names the returned outputs only; a Fortran-order input (copied in) is still
    written back; a read-only array is refused before running, naming the input."""

    class AddInto(nn.Module):
        def forward(self, x, y):
            x += y
            return x * 3

    torch.manual_seed(0)
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    compiled = fusec.compile(AddInto(), x.clone(), y)
    given = np.asfortranarray(x.numpy().copy())
    out = np.empty((4, 6), np.float32)
    assert compiled(given, y.numpy(), out=out) is out
    assert rel_err(out, (x.double() + y.double()) * 3) < 1e-6
    assert rel_err(given, x.double() + y.double()) < 1e-7
    frozen = x.numpy().copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match=r"input 0 \('x'\): the model updates it in place"):
        compiled(frozen, y.numpy())
    assert np.array_equal(frozen, x.numpy())


def test_an_input_updated_in_place_must_not_share_memory_with_another():
    """The same array passed for two inputs, or overlapping views, where the model updates
    one in place: eager reads the other through the alias after the update, the artifact
    before it (a + b gave 1 where eager gives 2). Refused, naming both inputs; disjoint
    views of one array are fine."""
    class AddInto(nn.Module):
        def forward(self, a, b):
            a.add_(1)
            return a + b

    compiled = fusec.compile(AddInto(), torch.zeros(2, 3), torch.zeros(2, 3), cache=False)
    x = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match=r"input 1 \('b'\) shares memory with input 0 "
                       r"\('a'\), which the model updates in place"):
        compiled(x[:2], x[:2])
    t = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="shares memory with input 0"):
        compiled(t[:2], t[1:3])
    out = compiled(x[:2], x[2:])  # disjoint halves of one array
    assert np.array_equal(out, np.ones((2, 3))) and np.array_equal(x[:2], np.ones((2, 3)))


def test_cuda_refuses_state_with_its_reason():
    from fusec.compiler.diagnostics import FusecError

    with pytest.raises(FusecError, match="keeps state between calls .*a buffer forward updates"):
        fusec.compile(StepCounter().eval(), torch.randn(5), target="cuda")


class TrigramEmbedding(nn.Module):
    """MobileBERT's trigram input: each token beside its neighbours, `x[:, 1:]` and
    `x[:, :-1]` padded back. At one token both slices are empty; their views failed to
    verify after bufferization ("offset 1 is out-of-bounds")."""

    def forward(self, x):
        f = nn.functional
        return torch.cat([f.pad(x[:, 1:], [0, 0, 0, 1]), x, f.pad(x[:, :-1], [0, 0, 1, 0])],
                         dim=2) * 2.0


@pytest.mark.parametrize("tokens", [1, 5])
def test_empty_slices_of_a_one_token_sequence(tokens):
    compiled = fusec.compile(TrigramEmbedding(), torch.randn(2, tokens, 8))
    fresh = torch.randn(2, tokens, 8)
    out = compiled(fresh.numpy())
    assert out.shape == (2, tokens, 24)
    assert rel_err(out, TrigramEmbedding()(fresh.double())) < 1e-6
    assert 1 <= len(compiled.kernels) <= 3


class CyclicShift(nn.Module):
    """Swin's shifted windows: `torch.roll` over H and W (and back), and a roll of the
    flattened tensor. torch-mlir typed a roll's slices with dynamic sizes ("fusec compiles
    static shapes only") and refused a roll without dims; fusec writes a roll as slices
    and a concat per dim."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.randn(channels))

    def forward(self, x):
        shifted = torch.roll(x, shifts=(-2, -3), dims=(1, 2)) * self.scale
        return torch.roll(shifted, shifts=(2, 3), dims=(1, 2)) + torch.roll(x, 7)


def test_roll_is_slices_and_a_concat():
    model = CyclicShift().eval()
    x = torch.randn(2, 7, 6, 8)
    compiled = fusec.compile(model, x)
    fresh = torch.randn(2, 7, 6, 8)
    out = compiled(fresh.numpy())
    assert out.shape == (2, 7, 6, 8)
    assert rel_err(out, model.double()(fresh.double())) < 1e-6
    # On the CPU a concat is a kernel of its own (`cost_model.builds_concat_in_kernels`), and
    # so are the slices it reads: 5 concats, 10 kernels; the GPU's plan is one data-movement
    # kernel (test_movement_codegen).
    assert len(compiled.kernels) == 10
    assert sum(k["ops"].count("tensor.concat") for k in compiled.kernels) == 5


class NanMinMax(nn.Module):
    """torch's min/max ops propagate NaN; torch-mlir lowers them as `a > b ? a : b` (a
    clamp as `x <u lo ? lo : x`), which returned the other operand, or the bound, for a
    NaN (found by probing, 2026-12-04: maximum, minimum, clamp, clamp_min/max, ReLU6,
    hardtanh, hardsigmoid all silently dropped a NaN input; `--fusion-nan-minmax`)."""

    def forward(self, a, b):
        return (torch.maximum(a, b), torch.minimum(a, b), torch.clamp(a, -0.5, 0.5),
                a.clamp_min(0.1), a.clamp_max(0.1), nn.functional.relu6(a * 4),
                nn.functional.hardtanh(a), torch.clamp(a, b, b + 1),
                nn.functional.hardsigmoid(a), torch.relu(a), a.amax(-1))


def test_min_max_and_clamps_propagate_nan():
    model = NanMinMax().eval()
    compiled = fusec.compile(model, torch.randn(3, 8), torch.randn(3, 8))
    a, b = torch.randn(3, 8), torch.randn(3, 8)
    a[0, 0] = a[1, 3] = b[0, 1] = b[2, 5] = float("nan")
    a[1, 1] = b[1, 1] = float("nan")  # both (a's row 2 has none: amax's is a number)
    outs = compiled(a.numpy(), b.numpy())
    refs = model.double()(a.double(), b.double())
    for i, (out, ref) in enumerate(zip(outs, refs)):
        nan = ref.isnan().numpy()
        assert nan.any(), i  # every output has a NaN to keep
        assert np.array_equal(np.isnan(out), nan), (i, out, ref)
        assert rel_err(np.where(nan, 0, out), torch.where(ref.isnan(), 0, ref)) < 1e-6, i
    assert len(compiled.kernels) == 2  # the elementwise outputs, and amax with its reads


class ArgExtremes(nn.Module):
    """torch's argmax / argmin (and max / min over a dim) give the first NaN's index in a row
    with a NaN; torch-mlir's payload moved the index by `x > acc` (false for a NaN), so the
    index stayed the largest number's before it (found 2026-12-05: [1, nan, 3] gave 2)."""

    def forward(self, x):
        mx, mn = x.max(-1), x.min(1)
        return x.argmax(-1), x.argmin(-1), mx.values, mx.indices, mn.indices, x.argmax(0)


def test_argmax_argmin_take_the_first_nan_and_the_first_tie():
    model = ArgExtremes().eval()
    compiled = fusec.compile(model, torch.randn(6, 300))
    for seed in (0, 1):
        x = torch.randn(6, 300, generator=torch.Generator().manual_seed(seed))
        x[0, 17] = x[0, 250] = float("nan")  # two NaNs: the first one's index
        x[1, 299] = float("nan")  # the last element
        x[2, 5] = x[2, 200] = x[2].abs().max() + 1  # tied maxima: the first
        x[2, 7] = x[2, 150] = -x[2].abs().max() - 1  # tied minima: the first
        x[3] = float("-inf")  # all -inf: index 0, as torch
        x[4, 0] = float("nan")  # the first element
        outs = compiled(x.numpy())
        refs = model(x)
        for i, (out, ref) in enumerate(zip(outs, refs)):
            if ref.dtype == torch.int64:
                assert np.array_equal(out, ref.numpy()), (seed, i, out, ref)
            else:
                nan = ref.isnan().numpy()
                assert np.array_equal(np.isnan(out), nan), (seed, i)
                assert np.array_equal(out[~nan], ref.numpy()[~nan]), (seed, i)


class PoolIndices(nn.Module):
    """Max pooling's indices with NaNs in a window (probe 9, 2026-12-05: the index was -1,
    and max_unpool then wrote the value at the end of its output)."""

    def forward(self, x):
        v, i = F.max_pool2d(x, 2, return_indices=True)
        a = F.adaptive_max_pool2d(x, (3, 2), return_indices=True)[1]
        o = F.max_pool1d(x.flatten(2), 3, stride=2, return_indices=True)[1]
        return v, i, a, o, F.max_unpool2d(v, i, 2)


def test_max_pool_indices_take_the_last_nan_and_the_first_tie():
    model = PoolIndices().eval()
    compiled = fusec.compile(model, torch.randn(2, 3, 6, 8))
    for seed in (0, 1):
        x = torch.randn(2, 3, 6, 8, generator=torch.Generator().manual_seed(seed))
        x[0, 0, 0, 1] = float("nan")  # one NaN in a window
        x[0, 1, 2, 2] = x[0, 1, 3, 3] = float("nan")  # two: the last one's index
        x[1, 2, 4, 4] = x[1, 2, 4, 5] = x[1, 2].abs().max() + 1  # tied maxima: the first
        x[1, 0] = float("-inf")  # a plane of -inf: each window's first
        outs = compiled(x.numpy())
        refs = model(x)
        assert len(outs) == len(refs) == 5
        for i, (out, ref) in enumerate(zip(outs, refs)):
            if ref.dtype == torch.int64:
                assert np.array_equal(out, ref.numpy()), (seed, i, out, ref)
            else:
                nan = ref.isnan().numpy()
                assert nan.any(), i
                assert np.array_equal(np.isnan(out), nan), (seed, i)
                assert np.array_equal(out[~nan], ref.numpy()[~nan]), (seed, i)


class PadValues(nn.Module):
    """A constant pad whose value the tensor's type does not hold exactly (probe 9,
    2026-12-05: bf16 with value 1.1 failed to compile: the inexact f64 -> bf16 cast of the
    value stayed a host scalar)."""

    def forward(self, x, h):
        return F.pad(x, (1, 2, 0, 1), value=1.1), nn.ConstantPad2d(2, -0.3)(x), \
            F.pad(h, (3, 0), value=0.7)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_pad_values_rounded_to_the_type(dtype):
    dtype = getattr(torch, dtype)
    x, h = torch.randn(2, 3, 5, 7, dtype=dtype), torch.randn(4, 6, dtype=dtype)
    model = PadValues().eval()
    compiled = fusec.compile(model, x, h)
    assert len(compiled.kernels) == 1  # the three pads of two inputs: one kernel
    x, h = torch.randn(2, 3, 5, 7, dtype=dtype), torch.randn(4, 6, dtype=dtype)
    outs = compiled(x, h)
    for out, ref in zip(outs, model(x, h)):
        out = torch.from_numpy(np.asarray(out).view(np.int16)).view(dtype)
        assert torch.equal(out, ref)  # a copy and the value rounded as torch rounds it


DEPTHWISE_TRANSPOSED = [
    (nn.ConvTranspose2d(4, 4, 3, groups=4), (2, 4, 5, 5)),
    (nn.ConvTranspose1d(4, 4, 3, groups=4, stride=2), (2, 4, 9)),
    (nn.ConvTranspose2d(6, 6, (3, 2), groups=6, stride=(2, 3), padding=(1, 0),
                        output_padding=(1, 2), dilation=(2, 1), bias=False), (1, 6, 7, 5)),
]
# (3-D: the depthwise Conv3d it becomes is refused by torch-mlir, as a depthwise Conv3d is.)


@pytest.mark.parametrize("case", range(len(DEPTHWISE_TRANSPOSED)))
def test_depthwise_conv_transpose(case):
    """A transposed convolution with one channel per group (probe 9, 2026-12-05: torch-mlir's
    lowering failed on an invalid collapse_shape): the regular convolution of the input with
    zeros inserted and the kernel flipped (`decompositions._depthwise_conv_transpose`)."""
    torch.manual_seed(case)
    conv, shape = DEPTHWISE_TRANSPOSED[case]
    conv = conv.eval()
    compiled = fusec.compile(conv, torch.randn(shape))
    x = torch.randn(shape)
    with torch.no_grad():
        want = conv.double()(x.double())
        conv.float()
    out = np.asarray(compiled(x))
    assert out.shape == tuple(want.shape)
    assert rel_err(out, want) < 1e-6
    assert len(compiled.kernels) <= 3


class Uint8Scalars(nn.Module):
    """uint8 with Python integers out of its range, abs, and a sum into int16 (probe 10,
    2026-12-05: `x > -1` was all true, `x // -3` divided by -3, abs and the int16 sum read
    the signed byte; torch reads the integer as uint8 and the value as unsigned)."""

    def forward(self, x):
        return (x > -1, x < 300, x == 256, x // -3, x.abs(), x.sum(-1, dtype=torch.int16),
                x + 300, x[:, :2] > 3)


def test_uint8_with_integers_out_of_its_range():
    model = Uint8Scalars().eval()
    x = torch.tensor([[0, 1, 127, 128, 200, 255], [3, 250, 9, 130, 77, 5]], dtype=torch.uint8)
    compiled = fusec.compile(model, x)
    x = torch.randint(0, 256, (2, 6), dtype=torch.uint8)
    x[0, :2] = torch.tensor([0, 255], dtype=torch.uint8)
    for out, ref in zip(compiled(x), model(x)):
        assert np.array_equal(np.asarray(out), ref.numpy()), (out, ref)


class StatisticsEdges(nn.Module):
    """var / std with a correction at least the count (torch: inf; fusec gave a negative
    variance and a NaN std), round(x, decimals) of 16-bit floats (scaled in the 16-bit
    type: 60000 with 2 decimals was inf): probe 10, 2026-12-05."""

    def forward(self, x, h, b):
        return (torch.var(x, -1, correction=5), torch.std(x, -1, correction=4),
                torch.var(x, 0, correction=1), torch.round(h, decimals=2),
                torch.round(b, decimals=1), torch.round(b, decimals=-1))


def test_statistics_edges():
    model = StatisticsEdges().eval()
    x = torch.randn(4, 3)
    h = torch.tensor([60000.0, 1000.0, 655.0, 1.2305, -3.14159]).to(torch.float16)
    b = torch.tensor([11840.0, 22.625, 249.0, 44.0, -0.37]).to(torch.bfloat16)
    compiled = fusec.compile(model, x, h, b)
    x = torch.randn(4, 3)
    for i, (out, ref) in enumerate(zip(compiled(x, h, b), model(x, h, b))):
        out = np.asarray(out).astype(np.float64)
        ref = ref.double().numpy()
        assert np.array_equal(np.isinf(out), np.isinf(ref)), (i, out, ref)
        finite = np.isfinite(ref)
        assert np.allclose(out[finite], ref[finite], rtol=1e-6, atol=0), (i, out, ref)


class FmaxFmin(nn.Module):
    """fmax / fmin with broadcasting or a 0-d operand (probe 10, 2026-12-05: refused with
    MLIR's verifier message about a tensor.cast), NaN on either side, integers, mixed types."""

    def forward(self, a, b, c, d):
        return (torch.fmax(a, b), torch.fmin(a, c), torch.fmax(d, d.t()),
                torch.fmin(a.to(torch.float16), b))


def test_fmax_fmin_broadcast():
    model = FmaxFmin().eval()
    args = [torch.randn(5, 1), torch.randn(1, 5), torch.tensor(0.5), torch.randint(0, 9, (4, 4))]
    compiled = fusec.compile(model, *args)
    args = [torch.randn(5, 1), torch.randn(1, 5), torch.tensor(-0.25),
            torch.randint(-9, 9, (4, 4))]
    args[0][1] = args[1][0, 2] = float("nan")
    for out, ref in zip(compiled(*args), model(*args)):
        out = np.asarray(out)
        assert out.dtype == ref.numpy().dtype
        assert np.array_equal(out.astype(np.float64), ref.double().numpy(), equal_nan=True)


class ZeroSizeDim(nn.Module):
    """Scans and reductions over a zero-size dim (probe 10, 2026-12-05: an internal "kernel
    of the plan is not in the module": a kernel that computes nothing lost its body)."""

    def forward(self, x):
        return x.cumsum(1), x.cumsum(0), x * 2, x.sum(1), x.mean(1), x.prod(1)


def test_zero_size_dim():
    model = ZeroSizeDim().eval()
    compiled = fusec.compile(model, torch.randn(3, 0))
    x = torch.randn(3, 0)
    outs, refs = compiled(x), model(x)
    assert len(outs) == len(refs) == 6
    for out, ref in zip(outs, refs):
        assert np.asarray(out).shape == tuple(ref.shape)
        assert np.array_equal(np.asarray(out), ref.numpy(), equal_nan=True)


class ShiftsAndXlogy(nn.Module):
    """`a << b`, `a >> 2` (torch-mlir refused `__lshift__` by that name while
    `bitwise_left_shift` worked) and xlogy with a Python number (refused naming
    `prims.scalar_tensor`): probe 10, 2026-12-05."""

    def forward(self, a, b, x):
        return (a << b, a >> 2, a << 3, a >> b, torch.xlogy(x, 2.0), torch.xlogy(x, 0.0),
                torch.xlogy(x, -1.0), torch.xlogy(x, float("nan")))


def test_shift_operators_and_xlogy_of_a_number():
    model = ShiftsAndXlogy().eval()
    a = torch.tensor([1, -8, 3, 100, -1], dtype=torch.int32)
    b = torch.tensor([1, 2, 40, 0, 31], dtype=torch.int32)
    x = torch.tensor([0.0, 1.5, -2.0, float("nan"), 3.0])
    compiled = fusec.compile(model, a, b, x)
    a = torch.tensor([7, -9, 5, -100, 2], dtype=torch.int32)
    for out, ref in zip(compiled(a, b, x), model(a, b, x)):
        out = np.asarray(out)
        assert out.dtype == ref.numpy().dtype
        assert np.array_equal(out, ref.numpy(), equal_nan=True), (out, ref)


class IntegerDivisions(nn.Module):
    """Integer `//`, `div(rounding_mode=...)`, `%` and `fmod` by a tensor (found by probing,
    2026-12-04: a zero divisor killed the calling process with SIGFPE, and the floor
    division, computed by torch-mlir in f64, returned a number for it and was inexact
    above 2^53)."""

    def forward(self, x, y):
        return (x // y, torch.div(x, y, rounding_mode="floor"), x % y,
                torch.div(x, y, rounding_mode="trunc"), torch.fmod(x, y),
                x.int() // y.int())


def test_integer_division_is_exact_and_a_zero_divisor_raises():
    model = IntegerDivisions().eval()
    shape = (4, 64)
    compiled = fusec.compile(model, torch.ones(shape, dtype=torch.long),
                             torch.ones(shape, dtype=torch.long))
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-10**6, 10**6, shape, generator=g)
    y = torch.randint(-50, 50, shape, generator=g)
    y[y == 0] = 7
    x[0, :4] = torch.tensor([2**60 + 1, -(2**60) - 3, 2**62, -7])
    y[0, :4] = torch.tensor([3, 5, -7, 2])
    for out, ref in zip(compiled(x.numpy(), y.numpy()), model(x, y)):
        assert out.dtype == ref.numpy().dtype and np.array_equal(out, ref.numpy())
    y[2, 9] = 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        model(x, y)
    with pytest.raises(ZeroDivisionError, match=r"test_model_regressions\.py:\d+:\d+: "
                       r"integer division by 0 \(arith\.\w+: torch raises"):
        compiled(x.numpy(), y.numpy())


@pytest.mark.parametrize("f", [lambda x: x // 0, lambda x: torch.remainder(x, 0),
                               lambda x: torch.div(x, 0, rounding_mode="trunc"),
                               lambda x: x // torch.zeros_like(x)],
                         ids=["floordiv", "remainder", "trunc", "zeros_like"])
def test_integer_division_by_a_constant_zero_raises(f):
    """A divisor known to be 0 at compile time: the guard's report was deferred on the
    division, which canonicalization then folded away (x // 0 returned x, x % 0 zeros)."""
    class M(nn.Module):
        def forward(self, x):
            return f(x)

    x = torch.arange(1, 6)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        M()(x)
    compiled = fusec.compile(M().eval(), x, cache=False)
    with pytest.raises(ZeroDivisionError, match="integer division by 0"):
        compiled(x.numpy())
    with pytest.raises(RuntimeError, match="integer division by 0"):  # as eager raises it
        compiled(x.numpy())


class ScaledByComputedScalar(nn.Module):
    """HF DeBERTa v1's query scaling: divided by a 0-d tensor computed in the graph, then a
    matmul (the attention recogniser took the division for a softmax's and crashed the
    fusion stage, 2026-12-04)."""

    def forward(self, q, k):
        scale = torch.sqrt(torch.tensor(q.size(-1), dtype=torch.float) * 3)
        return torch.softmax((q / scale) @ k.transpose(-1, -2), dim=-1)


def test_a_matmul_of_a_value_divided_by_a_computed_scalar():
    model = ScaledByComputedScalar().eval()
    compiled = fusec.compile(model, torch.randn(2, 5, 6), torch.randn(2, 7, 6))
    q, k = torch.randn(2, 5, 6), torch.randn(2, 7, 6)
    assert rel_err(compiled(q.numpy(), k.numpy()), model(q.double(), k.double())) < 1e-6
    assert len(compiled.kernels) == 1


def test_nested_outputs_come_back_nested():
    """A model returning a list inside a tuple, a dict of tuples, a one-element tuple or a
    list got a flat tuple (or a bare array for the one-element tuple): outputs now come back
    as the model nested them (a namedtuple as a tuple)."""
    from collections import namedtuple

    Pair = namedtuple("Pair", "a b")

    class Nested(nn.Module):
        def forward(self, x):
            return (x + 1, [x * 2, {"a": x - 1, "b": (x * x,)}])

    class OneTuple(nn.Module):
        def forward(self, x):
            return (x + 1,)

    class AList(nn.Module):
        def forward(self, x):
            return [x + 1, x * 2]

    class Named(nn.Module):
        def forward(self, x):
            return Pair(x + 1, x * 2)

    class OtherKeys(nn.Module):  # came back as a flat tuple (a probe's find)
        def forward(self, x):
            return {("a", 1): x * 2, 3: x + 1, None: x - 1, 2.5: [x, (x * 3,)]}

    torch.manual_seed(0)
    x = torch.randn(3, 5)
    for model in (Nested(), OneTuple(), AList(), Named(), OtherKeys()):
        compiled = fusec.compile(model.eval(), x)
        fresh = torch.randn(3, 5)
        got, want = compiled(fresh.numpy()), model(fresh.double())

        def same(g, w):
            if isinstance(w, torch.Tensor):
                assert isinstance(g, np.ndarray) and g.shape == tuple(w.shape)
                assert rel_err(g, w) < 1e-6
            elif isinstance(w, dict):
                assert isinstance(g, dict) and list(g) == list(w)
                for key in w:
                    same(g[key], w[key])
            else:
                assert type(g) is (list if isinstance(w, list) else tuple), type(g)
                assert len(g) == len(w)
                for a, b in zip(g, w):
                    same(a, b)

        same(got, want)


@pytest.mark.parametrize("options,kernels", [({}, 8), ({"num_layers": 2}, 15),
                                             ({"bidirectional": True}, 10),
                                             ({"proj_size": 8}, 18)],
                         ids=["one-layer", "two-layers", "bidirectional", "projection"])
def test_lstm_compiles_and_matches_float64(options, kernels):
    """nn.LSTM was refused: torch's decomposition of aten.lstm emits `mkldnn_rnn_layer` on
    the CPU, which torch-mlir cannot lower (run 173). With oneDNN off while decomposing it is
    the cells' matmuls and gates, step by step; output, h and c against float64."""
    torch.manual_seed(0)
    model = nn.LSTM(16, 32, batch_first=True, **options).eval()
    compiled = fusec.compile(model, torch.randn(2, 5, 16))
    assert len(compiled.kernels) == kernels
    x = torch.randn(2, 5, 16)
    out, (h, c) = compiled(x.numpy())
    with torch.no_grad():
        ref, (ref_h, ref_c) = model.double()(x.double())
    for got, want in ((out, ref), (h, ref_h), (c, ref_c)):
        assert got.shape == tuple(want.shape)
        assert rel_err(got, want) < 1e-6
