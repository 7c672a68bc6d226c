"""The CPU matmul microkernels (--fusion-cpu-matmul) end to end: torch model -> model.so.

Each case is compiled with fusec (CPU target), run on fresh random inputs and compared with
the same model in float64 torch by relative norm error. The kernel counts are asserted, and
the `cpu` stage must hold the microkernel's vector FMAs (so that a case cannot pass on the
scalar loop path without the pass having fired). Sizes are chosen not to be multiples of
the microkernel (6 rows x 16 or 32 columns): partial row and column blocks, a column
remainder narrower than a vector, and K not a multiple of anything.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import fusec
from fusec.compiler.targets import cpu as codegen_cpu
from fusec.compiler.targets.cpu.options import CpuOptions

TOLERANCE = 1e-5
VECTOR_FMA = re.compile(r"llvm\.intr\.fmuladd.*vector<\d+xf32>")


class MatMul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


class BatchMatMul(torch.nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)


class LinearGelu(torch.nn.Module):
    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(k, n)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x))


def rel_err(out: np.ndarray, ref: torch.Tensor) -> float:
    ref64 = ref.detach().numpy()
    return float(np.linalg.norm(np.asarray(out, np.float64) - ref64) / np.linalg.norm(ref64))


def compile_and_check(model: torch.nn.Module, shapes: list[tuple[int, ...]], tmp_path,
                      kernels: int, cpu: CpuOptions | None = None) -> str:
    """Compile, run on fresh data, check numerics and kernel count; returns the cpu IR."""
    model = model.eval()
    example = [torch.randn(s) for s in shapes]
    compiled = fusec.compile(model, *example, cache=False, dump_dir=str(tmp_path), cpu=cpu)
    assert len(compiled.kernels) == kernels
    inputs = [torch.randn(s) for s in shapes]  # not the example's tensors
    out = compiled(*[x.numpy() for x in inputs])
    with torch.no_grad():
        ref = model.double()(*[x.double() for x in inputs])
    assert rel_err(out, ref) < TOLERANCE
    return (tmp_path / "model.cpu.mlir").read_text()


@pytest.mark.parametrize("m,k,n", [(37, 53, 19), (64, 48, 80), (13, 9, 100), (130, 64, 96),
                                   (1, 64, 64), (4, 16, 40), (5, 1, 9)])
def test_matmul(m, k, n, tmp_path):
    cpu_ir = compile_and_check(MatMul(), [(m, k), (k, n)], tmp_path, kernels=1)
    assert VECTOR_FMA.search(cpu_ir)


def test_batch_matmul(tmp_path):
    cpu_ir = compile_and_check(BatchMatMul(), [(3, 37, 19), (3, 19, 53)], tmp_path, kernels=1)
    assert VECTOR_FMA.search(cpu_ir)


@pytest.mark.parametrize("shape,k,n", [((4, 32, 64), 64, 96), ((3, 29, 53), 53, 37)])
def test_linear_bias_gelu(shape, k, n, tmp_path):
    """Linear (torch-mlir: transposed weight folded, matmul) + bias + GELU: one kernel."""
    cpu_ir = compile_and_check(LinearGelu(k, n), [shape], tmp_path, kernels=1)
    assert VECTOR_FMA.search(cpu_ir)


def test_narrow_output_keeps_the_loop_path(tmp_path):
    """Fewer than 8 output columns: no vector microkernel, the scalar loops still agree."""
    cpu_ir = compile_and_check(MatMul(), [(37, 53), (53, 5)], tmp_path, kernels=1)
    assert not VECTOR_FMA.search(cpu_ir)


def test_pass_can_be_turned_off(tmp_path):
    """CpuOptions(matmul=False) (`--no-cpu-matmul`): the plain loop path, same numbers."""
    cpu_ir = compile_and_check(MatMul(), [(37, 53), (53, 19)], tmp_path, kernels=1,
                               cpu=CpuOptions(matmul=False))
    assert not VECTOR_FMA.search(cpu_ir)


def test_microkernel_rows_reach_the_tiling(tmp_path):
    """`matmul_mr` sets the microkernel's rows and the tiling's row blocks alike (the tiling
    used to keep 6-row blocks whatever the microkernel was); the numbers still agree."""
    passes = codegen_cpu.tiled_passes(CpuOptions(matmul_mr=8))
    assert any(p.startswith("fusion-tile{") and "matmul-rows=8" in p for p in passes)
    assert "fusion-cpu-matmul{mr=8," in " ".join(
        codegen_cpu._matmul_passes(CpuOptions(arch="x86-64-v3", matmul_mr=8)))
    # 240 rows in 8 tiles (2 threads x 4): 30-row tiles with 6-row blocks, 40 with 8.
    cpu_ir = compile_and_check(MatMul(), [(240, 64), (64, 96)], tmp_path, kernels=1,
                               cpu=CpuOptions(arch="x86-64-v3", matmul_mr=8, threads=2))
    assert VECTOR_FMA.search(cpu_ir)
    tiled = (tmp_path / "model.tiled.mlir").read_text()
    sizes = re.search(r"fusion.tile_sizes = array<i64: (\d+)", tiled)
    assert sizes and int(sizes.group(1)) == 40, sizes


def test_microkernel_shape_follows_the_cpu():
    """AVX-512 targets get 64-column microkernels (24 of their 32 registers accumulate),
    AVX2 targets 16 (12 of 16), others none."""
    for arch, expected in (("x86-64-v4", "fusion-cpu-matmul{mr=6,nr=64}"),
                           ("x86-64-v3", "fusion-cpu-matmul{mr=6,nr=16}")):
        assert codegen_cpu._matmul_passes(CpuOptions(arch=arch))[0] == expected
    assert codegen_cpu._matmul_passes(CpuOptions(arch="generic")) == []
    assert codegen_cpu._matmul_passes(CpuOptions(arch="x86-64-v3", matmul=False)) == []


class GeluLinear(torch.nn.Module):
    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(k, n)

    def forward(self, x):
        return self.linear(torch.nn.functional.gelu(x, approximate="tanh"))


def _tile_sizes(tmp_path) -> list[int]:
    tiled = (tmp_path / "model.tiled.mlir").read_text()
    found = re.search(r"fusion.tile_sizes = array<i64: ([\d, ]+)>", tiled)
    assert found, "no tiled kernel"
    return [int(s) for s in found.group(1).split(",")]


@pytest.mark.parametrize("model,shape,expected", [
    # B 2 MB, over a core's L2: 8 column tiles of 128 (2 threads x 4), all rows each.
    (LinearGelu(512, 1024), (1, 64, 512), [0, 128]),
    # N = 2083 has no 32-multiple divisor: ragged tiles of 256 columns, the last narrower.
    (LinearGelu(256, 2083), (1, 64, 256), [0, 256]),
    # A GELU before the matmul: each column tile recomputes its rows of it (cheap here).
    (GeluLinear(640, 1024), (1, 48, 640), [0, 128]),
])
def test_column_tiles_with_deep_k(model, shape, expected, tmp_path):
    """Few rows, a B larger than L2: the kernel tiles its columns (each tile reads its
    columns of B once) and the microkernel blocks the depth (K > 128 for nr = 16); the
    numbers agree with float64 whatever the tile widths and remainders."""
    cpu_ir = compile_and_check(model, [shape], tmp_path, kernels=1,
                               cpu=CpuOptions(arch="x86-64-v3", threads=2))
    assert VECTOR_FMA.search(cpu_ir)
    sizes = _tile_sizes(tmp_path)
    # Only the columns are tiled (the rows and a unit batch dim are whole: 0).
    assert sorted(set(sizes)) == sorted({0, expected[1]}), sizes


class HeadsProjection(torch.nn.Module):
    """A Q projection split into heads and rotated as LLaMA's RoPE does (`rotate_half`): the
    head split reaches the matmul (its columns become two loops, heads x head_dim)."""

    def __init__(self, d: int, heads: int, inline: bool = False) -> None:
        super().__init__()
        self.q = torch.nn.Linear(d, d, bias=False)
        self.heads = heads
        self.inline = inline

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        q = self.q(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
        half = d // self.heads // 2
        if self.inline:  # the second half sliced first
            rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
        else:  # LLaMA's rotate_half
            x1, x2 = q[..., :half], q[..., half:]
            rotated = torch.cat((-x2, x1), dim=-1)
        return q * cos + rotated * sin


@pytest.mark.parametrize("inline", [False, True], ids=["rotate-half", "inline-slices"])
def test_projection_split_into_heads(inline, tmp_path):
    """The matmul whose columns are heads x head_dim is tiled by whole heads, all its rows in
    each tile (it was tiled by rows with the heads taken for them: each tile packed all of
    B; LLaMA's Q projection at 44 GFLOP/s, 1.45x more with B packed through gathers), and
    the microkernel takes it, merged into one column loop, reading B through linear
    indices (no collapse_shape left for LLVM to delinearize into gathers). With the second
    half sliced first, the negated half was the group's last result and the matmul ran
    before its tile loop on one thread; it is the kernel's root all the same now."""
    cpu = CpuOptions(arch="x86-64-v3", threads=2)
    shapes = [(1, 64, 768), (1, 1, 64, 64), (1, 1, 64, 64)]
    compile_and_check(HeadsProjection(768, 12, inline), shapes, tmp_path, kernels=5, cpu=cpu)
    tiled = (tmp_path / "model.tiled.mlir").read_text()
    key = re.search(r'fusion.tune_key = "cpu_matmul m=64 n=768 k=768 [^"]*column_quantum=64"',
                    tiled)
    assert key, "the split projection is not tiled as a matmul"
    bufferized = (tmp_path / "model.bufferized.mlir").read_text()
    assert "memref<768x12x64xf32>" in bufferized  # the weight reaches the kernel split
    sizes = _tile_sizes(tmp_path)
    assert sizes[1] == 0 and sizes[2] > 0, sizes  # all rows (t), whole heads per tile
