"""2-D convolutions on the CPU as im2col + the matmul microkernel (--fusion-cpu-conv), end to
end: torch model -> model.so, run on fresh random inputs, compared with float64 torch by
relative norm error, kernel counts pinned.

The `cpu` stage must hold the microkernel's vector FMAs (LLVM's own vectorizer runs later,
so a convolution left as loops has none there): each case checks that the pass fired, and
the same case with `CpuOptions(conv=False)` checks that the probe can fail. Shapes cover
what the rewrite handles differently: pixels a multiple of 8 (col as is) or not (padded to
16 with a staging output), stride, dilation, padding, non-square images, 1x1 and 7x7
windows, batches (tiles by image), epilogues (bias, BatchNorm, ReLU, residual), and grouped
convolutions (im2col per group, the microkernel batched over the groups).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch import nn

import fusec
from fusec.compiler.targets.cpu.options import CpuOptions

TOLERANCE = 1e-5
VECTOR_FMA = re.compile(r"llvm\.intr\.fmuladd.*vector<\d+xf32>")


def _bn(c: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return bn


class ConvBnRelu(nn.Module):
    def __init__(self, cin, cout, k, stride=1, padding=0, dilation=1, groups=1, bias=False):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, padding, dilation, groups, bias=bias)
        self.bn = _bn(cout)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class BasicBlock(nn.Module):
    """ResNet's basic block: conv-BN-ReLU-conv-BN, + x, ReLU."""

    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, 1, 1, bias=False), _bn(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), _bn(c)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + x)


CASES = {
    # name: (model, input shape, kernels)
    # (the padding, the convolution and its epilogue are one kernel; the basic block's second
    # convolution reads the first's padded output: two)
    "3x3-pad1-batch2": (lambda: ConvBnRelu(8, 16, 3, padding=1), (2, 8, 12, 12), 1),
    "stride2-dilation2-odd": (lambda: ConvBnRelu(8, 12, 3, 2, 2, 2), (1, 8, 15, 13), 1),
    "1x1-14x14-padded": (lambda: ConvBnRelu(64, 48, 1), (1, 64, 14, 14), 1),
    "7x7-stride2-bias": (lambda: ConvBnRelu(3, 16, 7, 2, 3, bias=True), (1, 3, 32, 32), 1),
    "3x3-7x7-image": (lambda: ConvBnRelu(64, 96, 3, padding=1), (1, 64, 7, 7), 1),
    "basic-block": (lambda: BasicBlock(16), (2, 16, 10, 10), 2),
}


def _compile_and_check(make, shape, kernels, tmp_path, cpu=None) -> str:
    torch.manual_seed(0)
    model = make().eval()
    compiled = fusec.compile(model, torch.randn(shape), cache=False, dump_dir=str(tmp_path),
                             cpu=cpu)
    assert len(compiled.kernels) == kernels
    x = torch.randn(shape)  # not the example's tensor
    out = np.asarray(compiled(x.numpy()), np.float64)
    with torch.no_grad():
        ref = model.double()(x.double()).numpy()
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < TOLERANCE
    return (tmp_path / "model.cpu.mlir").read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv_as_im2col_matmul(name, tmp_path):
    make, shape, kernels = CASES[name]
    assert VECTOR_FMA.search(_compile_and_check(make, shape, kernels, tmp_path))


def test_without_the_pass_the_probe_finds_no_microkernel(tmp_path):
    make, shape, kernels = CASES["3x3-pad1-batch2"]
    cpu_ir = _compile_and_check(make, shape, kernels, tmp_path, cpu=CpuOptions(conv=False))
    assert not VECTOR_FMA.search(cpu_ir)


GROUPED = {
    # name: (model, input shape, kernels): grouped convolutions as im2col per group and the
    # microkernel batched over (image, group): ResNeXt's 3x3 (pixels a multiple of 16, and
    # not: 14x14 and 7x7 images pad to whole vectors), strides, a batch of 2, and groups whose
    # filters have 4 output channels (the microkernel's static 4-row remainder).
    "groups2-9x9": (lambda: ConvBnRelu(8, 8, 3, padding=1, groups=2), (1, 8, 9, 9), 2),
    "groups8-28x28": (lambda: ConvBnRelu(64, 64, 3, padding=1, groups=8), (1, 64, 28, 28), 2),
    "groups32-14x14-stride2": (lambda: ConvBnRelu(128, 128, 3, 2, 1, groups=32),
                               (1, 128, 28, 28), 2),
    "groups4-7x7-batch2-bias": (lambda: ConvBnRelu(32, 48, 3, padding=1, groups=4, bias=True),
                                (2, 32, 7, 7), 2),
    "groups4-dilation2": (lambda: ConvBnRelu(16, 16, 3, 1, 2, 2, groups=4), (1, 16, 12, 12), 2),
}


@pytest.mark.parametrize("name", sorted(GROUPED))
def test_grouped_conv_as_im2col_matmul_per_group(name, tmp_path):
    """Grouped convolutions (ResNeXt's: 75% of its CPU time when they were LLVM's loops,
    0.26x eager) build as the microkernel too, and stay right."""
    make, shape, kernels = GROUPED[name]
    assert VECTOR_FMA.search(_compile_and_check(make, shape, kernels, tmp_path))


def test_grouped_without_the_pass_the_probe_finds_no_microkernel(tmp_path):
    make, shape, kernels = GROUPED["groups8-28x28"]
    cpu_ir = _compile_and_check(make, shape, kernels, tmp_path, cpu=CpuOptions(conv=False))
    assert not VECTOR_FMA.search(cpu_ir)
