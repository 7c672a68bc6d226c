"""Standard CNN blocks on the CPU target, against float64: the shapes where tile-and-fuse
meets strided, padded and windowed reads and residual joins between them.

Found on a hand-written ResNet-18 (2026-12-01): a residual sum yielded by its group and read
by the next block's stride-2 1x1 downsample convolution was fused into the convolution's tile
loop, so only the sampled pixels of the sum were ever written (relative error 1.2e-1, NaN on a
fresh cache); at batch 1 the tile loop's results came out swapped (a verifier error).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")
nn = torch.nn

import fusec  # noqa: E402


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))


def _bn(c: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c)
    bn.running_mean.uniform_(-0.3, 0.3)
    bn.running_var.uniform_(0.5, 1.5)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.uniform_(-0.3, 0.3)
    return bn


class ResidualIntoStridedConv(nn.Module):
    """relu(a + b) read by a stride-2 1x1 convolution and by a 3x3 one, both returned: the
    sum leaves the downsample's kernel and that kernel reads every other pixel of it."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.down = nn.Conv2d(c, 2 * c, 1, 2, bias=False)
        self.conv = nn.Conv2d(c, c, 3, 1, 1, bias=False)

    def forward(self, a, b):
        r = torch.relu(a + b)
        return self.down(r), self.conv(r)


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block, with a stride-2 downsample when asked."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), _bn(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), _bn(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _bn(cout))

    def forward(self, x):
        out = torch.relu(self.b1(self.c1(x)))
        out = self.b2(self.c2(out))
        out += x if self.down is None else self.down(x)
        return torch.relu(out)


class TwoStages(nn.Module):
    """Two basic blocks, the second downsampling the first's output (ResNet's stage join)."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.a, self.b = BasicBlock(c, c, 1), BasicBlock(c, 2 * c, 2)

    def forward(self, x):
        return self.b(self.a(x))


class Bottleneck(nn.Module):
    """ResNet-50's bottleneck: 1x1 reduce, 3x3 (stride 2), 1x1 expand, projected shortcut."""

    def __init__(self, cin: int = 32, mid: int = 8, stride: int = 2) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, mid, 1, bias=False), _bn(mid)
        self.c2, self.b2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False), _bn(mid)
        self.c3, self.b3 = nn.Conv2d(mid, 4 * mid, 1, bias=False), _bn(4 * mid)
        self.down = nn.Sequential(nn.Conv2d(cin, 4 * mid, 1, stride, bias=False), _bn(4 * mid))

    def forward(self, x):
        out = torch.relu(self.b1(self.c1(x)))
        out = torch.relu(self.b2(self.c2(out)))
        out = self.b3(self.c3(out))
        return torch.relu(out + self.down(x))


class DepthwiseSE(nn.Module):
    """MobileNetV3's inverted residual: 1x1 expand, hardswish, 5x5 depthwise stride 2,
    squeeze-excite (global pool, two 1x1s, hardsigmoid), 1x1 project."""

    def __init__(self, cin: int = 16, exp: int = 32, cout: int = 24) -> None:
        super().__init__()
        self.expand, self.b1 = nn.Conv2d(cin, exp, 1, bias=False), _bn(exp)
        self.dw, self.b2 = nn.Conv2d(exp, exp, 5, 2, 2, groups=exp, bias=False), _bn(exp)
        self.se1, self.se2 = nn.Conv2d(exp, 8, 1), nn.Conv2d(8, exp, 1)
        self.project, self.b3 = nn.Conv2d(exp, cout, 1, bias=False), _bn(cout)

    def forward(self, x):
        y = nn.functional.hardswish(self.b1(self.expand(x)))
        y = nn.functional.hardswish(self.b2(self.dw(y)))
        s = y.mean((2, 3), keepdim=True)
        s = nn.functional.hardsigmoid(self.se2(torch.relu(self.se1(s))))
        return self.b3(self.project(y * s))


class PoolJoin(nn.Module):
    """A sum read by a max pool (3x3, stride 2, padded) and returned itself."""

    def forward(self, a, b):
        r = a * b + a
        return r, nn.functional.max_pool2d(r, 3, 2, 1)


class AudioFrontEnd(nn.Module):
    """Whisper's front end: two 1-D convolutions (the second strided) with GELUs, then a
    dilated one (`linalg.conv_1d_ncw_fcw`, rewritten to a 2-D convolution of height 1)."""

    def __init__(self, mels: int = 16, width: int = 32) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(mels, width, 3, padding=1)
        self.c2 = nn.Conv1d(width, width, 3, stride=2, padding=1)
        self.c3 = nn.Conv1d(width, width, 5, padding=4, dilation=2, bias=False)

    def forward(self, x):
        y = nn.functional.gelu(self.c2(nn.functional.gelu(self.c1(x))))
        return self.c3(y) + y


def _inputs(shapes, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in shapes]


# (model, input shapes, kernels): the kernel counts are fusec's plan on the CPU today; a
# change of plan shows up here as well as in the numbers. A convolution's kernel is split at
# its paddings (`tile.split_at_pads`: what a padding reads, and a trailing padding, are
# kernels of their own, so that the convolution's tiles are never beside whole-tensor work);
# a BatchNorm + ReLU between two convolutions is the first one's epilogue (`epilogue-first`).
CASES = [
    pytest.param(ResidualIntoStridedConv, [(2, 16, 16, 16)] * 2, 3, id="residual-strided-b2"),
    pytest.param(ResidualIntoStridedConv, [(1, 16, 16, 16)] * 2, 3, id="residual-strided-b1"),
    pytest.param(ResidualIntoStridedConv, [(3, 16, 15, 15)] * 2, 3, id="residual-strided-odd"),
    pytest.param(lambda: BasicBlock(16, 16, 1), [(2, 16, 12, 12)], 2, id="basic"),
    pytest.param(lambda: BasicBlock(16, 32, 2), [(2, 16, 12, 12)], 3, id="basic-down"),
    pytest.param(TwoStages, [(1, 16, 16, 16)], 5, id="two-stages-b1"),
    pytest.param(TwoStages, [(2, 16, 16, 16)], 5, id="two-stages-b2"),
    pytest.param(Bottleneck, [(2, 32, 12, 12)], 4, id="bottleneck"),
    pytest.param(DepthwiseSE, [(2, 16, 16, 16)], 6, id="depthwise-se"),
    pytest.param(PoolJoin, [(2, 8, 13, 13)] * 2, 2, id="pool-join"),
    pytest.param(AudioFrontEnd, [(2, 16, 101)], 3, id="conv1d-audio"),
]


@pytest.mark.parametrize("make, shapes, kernels", CASES)
@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
def test_cnn_block_matches_float64(make, shapes, kernels, fusion):
    torch.manual_seed(0)
    with torch.no_grad():
        model = make().eval()
        inputs = _inputs(shapes, seed=len(shapes) * 7 + shapes[0][0])
        compiled = fusec.compile(model, *inputs, fusion=fusion)
        outs = compiled(*[x.numpy() for x in inputs])
        refs = model.double()(*[x.double() for x in inputs])
    outs = outs if isinstance(outs, (tuple, list)) else [outs]
    refs = refs if isinstance(refs, (tuple, list)) else [refs]
    assert len(outs) == len(refs)
    for out, ref in zip(outs, refs):
        ref = ref.numpy()
        assert out.shape == ref.shape
        err = np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref)
        assert err < 1e-5, f"relative error {err:.2e}"
    if fusion:
        assert len(compiled.kernels) == kernels
    if not fusion:
        assert len(compiled.kernels) >= len(refs)
