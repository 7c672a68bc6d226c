"""Models that torch-mlir lowers to its TMTensor ops (scatter, scan, sort, topk), compiled by
fusec for the CPU and compared with torch in float64 on fresh random inputs.

Each TMTensor op becomes one serial loop-nest kernel (--fusion-lower-tm-tensor), together
with the fills (or iota) that only initialise its outputs; the kernel counts below are that
kernel plus what the planner makes of the surrounding linalg.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import fusec  # noqa: E402
from fusec.compiler import driver  # noqa: E402
from fusec.compiler.diagnostics import FusecError  # noqa: E402
from fusec.compiler.frontend import import_torch  # noqa: E402
from fusec.compiler.pipeline import CompileOptions, lower  # noqa: E402

TOLERANCE = 1e-5  # float32 sums of a few terms against float64


def relative_error(out: np.ndarray, ref: torch.Tensor) -> float:
    ref64 = ref.detach().double().numpy()
    return float(np.linalg.norm(np.asarray(out, dtype=np.float64) - ref64)
                 / np.linalg.norm(ref64))


def serial_groups(model: torch.nn.Module, inputs: tuple) -> int:
    """The fusion stage's groups that are a lowered TMTensor op (marked fusion.serial)."""
    text = import_torch(model, *inputs)
    module = driver.parse(text, "<test>")
    lower(module, CompileOptions(target="cpu"), stop_after="fusion")
    return str(module).count("fusion.serial")


def check(model: torch.nn.Module, make_inputs, kernels: int, exact: tuple[int, ...] = ()) -> None:
    """Compile on one draw of inputs, run on a fresh draw; compare every output with the
    model run in float64 (outputs listed in `exact`, indices, must be equal)."""
    compiled = fusec.compile(model, *make_inputs())
    inputs = make_inputs()
    outputs = compiled(*[t.numpy() for t in inputs])
    outputs = outputs if isinstance(outputs, (list, tuple)) else (outputs,)
    reference = model(*[t.double() if t.is_floating_point() else t for t in inputs])
    reference = reference if isinstance(reference, (list, tuple)) else (reference,)
    assert len(outputs) == len(reference)
    for i, (out, ref) in enumerate(zip(outputs, reference)):
        if i in exact:
            np.testing.assert_array_equal(out, ref.numpy())
        else:
            assert relative_error(out, ref) < TOLERANCE, i
    assert len(compiled.kernels) == kernels, compiled.kernels
    assert serial_groups(model, inputs) == 1


class IndexPutAccumulate(torch.nn.Module):
    def forward(self, x, index, values):
        return torch.index_put(x, (index,), values, accumulate=True) * 2.0


class IndexPut(torch.nn.Module):
    def forward(self, x, index, values):
        return torch.index_put(x, (index,), values)


class ScatterAdd(torch.nn.Module):
    def forward(self, x, index, src):
        return torch.scatter_add(x, 1, index, src)


class Cumsum(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum(x, 1)


class Sort(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.sort(x, dim=1, descending=True)
        return values, indices


class Argsort(torch.nn.Module):
    def forward(self, x):
        return torch.argsort(x, dim=0)


class TopK(torch.nn.Module):
    def __init__(self, k: int = 10):
        super().__init__()
        self.k = k

    def forward(self, x):
        values, indices = torch.topk(x, self.k, dim=1)
        return values, indices


class Router(torch.nn.Module):
    """A mixture of experts' top-2 routing: topk, then the weights scattered back."""

    def forward(self, x):
        top, which = x.topk(2, dim=-1)
        return torch.zeros_like(x).scatter(-1, which, top / top.sum(-1, True)), which


def test_index_put_accumulate_repeated_indices():
    # Repeated row indices: every update must be added, in a serial loop; the * 2 is a
    # kernel of its own (nothing is fused into a serial loop nest).
    check(IndexPutAccumulate(),
          lambda: (torch.randn(6, 4), torch.randint(0, 6, (9,)), torch.randn(9, 4)),
          kernels=2)


def test_index_put_overwrites():
    check(IndexPut(),
          lambda: (torch.randn(6, 4), torch.randperm(6)[:3], torch.randn(3, 4)),
          kernels=1)


def test_scatter_add():
    # torch-mlir builds the (row, column) index pairs with linalg ops: 3 kernels before it,
    # and one more moves negative indices out of the lowering's count-from-the-end, so that
    # they raise IndexError as in torch (test_semantics).
    check(ScatterAdd(),
          lambda: (torch.randn(3, 5), torch.randint(0, 5, (3, 4)), torch.randn(3, 4)),
          kernels=5)


def test_cumsum():
    # The zero fills of the output and accumulator run inside the scan's kernel.
    check(Cumsum(), lambda: (torch.randn(4, 7),), kernels=1)


def test_long_cumsum_compiles_and_runs_its_sum_in_f64():
    """A scan over 2^18 values or more failed to compile on the CPU (found by probing,
    2026-12-04): its kernel's tile went over the L2 capacity, the capacity check split the
    group into one kernel per op, and the scan's loop was left in the host code. The
    running value is carried in f64, as torch's CPU cumsum does: folded in f32 a cumsum of
    100 000 values was 4.8e-6 from float64 (torch's 2.4e-8)."""
    for shape in ((1, 262144), (4, 100000)):
        inputs = lambda: (torch.rand(*shape) + 0.5,)  # noqa: E731
        compiled = fusec.compile(Cumsum(), *inputs())
        x, = inputs()
        assert relative_error(compiled(x.numpy()), Cumsum()(x.double())) < 1e-7
        assert len(compiled.kernels) == 1


def test_sort_values_and_indices():
    # The iota of indices runs inside the sort's kernel.
    check(Sort(), lambda: (torch.randn(4, 9),), kernels=1, exact=(1,))


def test_argsort():
    check(Argsort(), lambda: (torch.randn(6, 3),), kernels=1, exact=(0,))


def test_topk_values_and_indices():
    # More than SMALL_SELECTION: torch-mlir sorts the row, then slices the first k: the sort,
    # one kernel for the slices.
    check(TopK(), lambda: (torch.randn(4, 16),), kernels=2, exact=(1,))


def test_a_few_winners_are_row_maxima_not_a_serial_loop():
    """topk of a few (decompositions._small_topk) and a scatter of a few indices per row
    (`_small_scatter`) are row maxima and selects the planner fuses: no serial group; the
    values and indices exactly torch's, ties to the lower index."""
    for model, shape in ((TopK(3), (4, 8)), (Router(), (64, 8))):
        assert serial_groups(model, (torch.randn(shape),)) == 0
        compiled = fusec.compile(model, torch.randn(shape))
        x = torch.randn(shape)
        outputs = compiled(x.numpy())
        reference = model(x.double())
        np.testing.assert_array_equal(outputs[1], reference[1].numpy())
        assert relative_error(outputs[0], reference[0]) < TOLERANCE
    x = torch.tensor([[1.0, 5.0, 3.0, 5.0, 5.0, 0.0, 2.0, 3.0]])
    compiled = fusec.compile(TopK(4), x)
    values, indices = compiled(x.numpy())
    np.testing.assert_array_equal(indices, [[1, 3, 4, 2]])
    np.testing.assert_array_equal(values, [[5.0, 5.0, 5.0, 3.0]])


class KthValue(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.kthvalue(x, 3, dim=1)
        return values, indices


def test_kthvalue_topk():
    # torch-mlir's tm_tensor.topk keeps the 3 smallest; the 3rd is then picked by linalg.
    check(KthValue(), lambda: (torch.randn(4, 9),), kernels=2, exact=(1,))


def test_unsupported_tm_tensor_op_is_a_located_error():
    text = """func.func @main(%q: tensor<4x8xf32>, %o: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "tm_tensor.attention"(%q, %q, %q, %o) <{operandSegmentSizes = array<i32: 3, 1>}>
    : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}"""
    with pytest.raises(FusecError, match=r"^<text>:2:8: error: unsupported op "
                                         r"'tm_tensor\.attention'"):
        fusec.compile(text)


class SortInts(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.sort(x, 1, descending=True)
        return values, indices


def test_sort_is_stable_with_ties():
    # Many equal keys in rows of 37 (6 merge passes, odd run lengths): equal keys keep their
    # order, as torch's stable sort does.
    model = SortInts()
    compiled = fusec.compile(model, torch.randint(0, 5, (3, 37)))
    x = torch.randint(0, 5, (3, 37))
    values, indices = compiled(x.numpy())
    reference = torch.sort(x, dim=1, descending=True, stable=True)
    np.testing.assert_array_equal(values, reference.values.numpy())
    np.testing.assert_array_equal(indices, reference.indices.numpy())
