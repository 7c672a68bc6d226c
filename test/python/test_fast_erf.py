"""f32 erf through --fusion-fast-erf: accurate everywhere, and one vectorizable kernel."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import fusec  # noqa: E402


class Erf(torch.nn.Module):
    def forward(self, x):
        return torch.erf(x)


def test_fast_erf_matches_float64_erf_on_a_dense_grid_and_specials(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    n = 1 << 16
    grid = np.linspace(-6.0, 6.0, n - 8).astype(np.float32)
    specials = np.array([0.0, -0.0, 1e-30, -1e-30, np.inf, -np.inf, np.nan, 4.0],
                        dtype=np.float32)
    x = np.concatenate([grid, specials])
    compiled = fusec.compile(Erf(), torch.from_numpy(x.copy()))
    assert len(compiled.kernels) == 1
    out = compiled(x)
    ref = np.array([math.erf(float(v)) if not math.isnan(v) else math.nan for v in x])
    finite = ~np.isnan(ref)
    assert np.array_equal(np.isnan(out), np.isnan(ref))  # NaN stays NaN, nowhere else
    assert np.max(np.abs(out[finite] - ref[finite])) < 5e-7
    assert np.linalg.norm(out[finite] - ref[finite]) / np.linalg.norm(ref[finite]) < 1e-6
    # Tiny inputs keep their relative accuracy (erf(x) ~ 2x/sqrt(pi)).
    tiny = np.abs(x) == np.float32(1e-30)
    assert np.allclose(out[tiny], ref[tiny], rtol=1e-6, atol=0)
