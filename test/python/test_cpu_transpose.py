"""Transposes on the CPU: square blocks read as rows and transposed in registers.

`--fusion-cpu-vectorize` takes a copy whose output's contiguous dim is not its input's
(`x.t()`, a permute that moves the last dim, attention's K^T) as 16 x 16 blocks on
AVX-512 and 8 x 8 on AVX2 (`vectorize.transpose_plan`); without it LLVM gathers one
element per lane. The values must be the input's exactly (a copy), for every block size
and for the extents no block divides (left to LLVM's loops).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fusec
from fusec.compiler.targets.cpu import vector_bits
from fusec.compiler.targets.cpu.options import CpuOptions
from fusec.runtime import CPU_LEVEL_FLAGS


class _Permute(torch.nn.Module):
    def __init__(self, dims: tuple[int, ...]):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.permute(*self.dims).contiguous()


def _host_has(level: str) -> bool:
    flags = open("/proc/cpuinfo").read().split()
    return all(f in flags for f in CPU_LEVEL_FLAGS[level])


LEVELS = [level for level in ("x86-64-v4", "x86-64-v3") if _host_has(level)]

# (shape, permutation, whether a block divides both moved extents at 8 lanes)
CASES = [
    ((128, 64), (1, 0), True),             # attention's K^T shape
    ((3, 40, 48), (0, 2, 1), True),        # 8 x 8 blocks only
    ((2, 3, 48, 32), (0, 3, 1, 2), True),  # NCHW -> NHWC-like: the last dim moves outward
    ((30, 20), (1, 0), False),             # no block divides: LLVM's loops
]


@pytest.mark.skipif(not LEVELS, reason="needs an AVX2 or AVX-512 host")
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shape,dims,blocked", CASES)
def test_transpose_values_and_blocks(level, shape, dims, blocked, tmp_path):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
    module = fusec.compile(_Permute(dims).eval(), x, cache=False,
                           cpu=CpuOptions(arch=level), dump_dir=str(tmp_path))
    out = np.asarray(module(x))
    expected = x.permute(*dims).contiguous().numpy()
    assert out.shape == expected.shape
    assert np.array_equal(out, expected)  # a copy: bit-exact
    assert len(module.kernels) == 1
    bufferized = (tmp_path / "model.bufferized.mlir").read_text()
    assert "linalg.generic" in bufferized
    cpu_ir = (tmp_path / "model.cpu.mlir").read_text()
    lanes = vector_bits(level) // 32
    if blocked:
        # Rows read whole and shuffled, never gathered element by element.
        assert "llvm.shufflevector" in cpu_ir
        assert "masked.gather" not in cpu_ir
        moved = (shape[-1], shape[dims[-1]])  # the input's and the output's contiguous dims
        block = 16 if lanes == 16 and all(e % 16 == 0 for e in moved) else 8
        assert f"vector<{block}xf32>" in cpu_ir
    else:
        assert "llvm.shufflevector" not in cpu_ir
