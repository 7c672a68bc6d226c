"""Every example, end to end on the CPU: PyTorch model -> fusec.compile -> model.so -> numbers.

Each is compared with PyTorch in float64 on fresh random inputs (relative norm error), and
its kernel count is pinned: a change in the fusion plan shows up here as well as in the
numbers. Inductor's counts on the H200 (design.md) are the bar for the two big models.
"""

import importlib.util
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import fusec  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")

# example -> kernels fusec launches on the CPU (Inductor: transformer 10, GPT-2 block 13,
# ResNet-ish 9). GPT-2's block has 10 since its QKV projection is a kernel of its own (it used
# to be computed beside V's head-split tile loop, on one thread) and its head merge a copy in
# front of the output projection (which keeps the matmul microkernel): 0.583 -> 0.507 ms.
KERNELS = {
    "elementwise": 1, "softmax": 1, "rmsnorm": 1, "layernorm_mlp": 1, "mlp": 2,
    "attention": 1, "cnn": 2, "transformer": 6, "gpt2_block": 10,
}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(
        f"example_{name}", os.path.join(EXAMPLES, name, "model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.model().eval(), module.example_inputs()


def _fresh(inputs, generator):
    return [torch.randn(x.shape, generator=generator, dtype=x.dtype)
            if x.dtype.is_floating_point else x.clone() for x in inputs]


def _relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_example_matches_torch_float64(name):
    model, inputs = _load(name)
    compiled = fusec.compile(model, *inputs, target="cpu")
    assert len(compiled.kernels) == KERNELS[name]
    generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    fresh = _fresh(inputs, generator)
    with torch.no_grad():
        ref = model.double()(*[x.double() if x.dtype.is_floating_point else x for x in fresh])
    out = compiled(*[x.numpy() for x in fresh])
    assert out.shape == tuple(ref.shape)
    err = _relative_error(out, ref.numpy())
    assert err < 1e-5, f"{name}: relative error {err:.2e}"


def test_embedding_gather_with_dropped_bounds_check():
    """torch-mlir guards the lookup with cf.assert; the linalg stage drops it, and the gather,
    the linear layer and the ReLU become one kernel."""

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.embed = torch.nn.Embedding(50, 16)
            self.linear = torch.nn.Linear(16, 8)

        def forward(self, idx):
            return torch.relu(self.linear(self.embed(idx)))

    model = Model().eval()
    idx = torch.randint(0, 50, (4, 7))
    compiled = fusec.compile(model, idx, target="cpu")
    assert len(compiled.kernels) == 1
    fresh = torch.randint(0, 50, (4, 7))
    with torch.no_grad():
        ref = model.double()(fresh).numpy()
    assert _relative_error(compiled(fresh.numpy()), ref) < 1e-5


def test_constant_outputs_are_written_by_a_kernel():
    """torch.zeros / torch.full / torch.ones fold to constants that no op computes; each still
    comes back (they used to fail in the plan: found by torch-mlir's e2e suite)."""

    class Model(torch.nn.Module):
        def forward(self, x):
            return (torch.zeros(3, 4), torch.full((2, 3), 7.5), torch.ones(4, dtype=torch.int64),
                    torch.tensor(3.0), torch.arange(6, dtype=torch.float32), x * 2)

    x = torch.randn(5)
    compiled = fusec.compile(Model(), x, target="cpu")
    zeros, full, ones, scalar, ramp, doubled = compiled(x.numpy())
    assert scalar.shape == () and float(scalar) == 3.0
    assert np.array_equal(ramp, np.arange(6, dtype=np.float32))
    assert np.array_equal(zeros, np.zeros((3, 4), np.float32))
    assert np.array_equal(full, np.full((2, 3), 7.5, np.float32))
    assert ones.dtype == np.int64 and np.array_equal(ones, np.ones(4, np.int64))
    assert np.array_equal(doubled, x.numpy() * 2)
