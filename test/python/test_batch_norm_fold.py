"""Inference BatchNorms folded before the decompositions (fusec.compiler.batch_norm): into
the convolution or linear layer before them, or alone into a multiply and an add; and
where they must not be."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import fusec
from fusec.compiler.batch_norm import fold_batch_norms

aten = torch.ops.aten


def _bn(kind, c, affine=True):
    bn = kind(c, affine=affine)
    with torch.no_grad():  # statistics far from 0 and 1
        bn.running_mean.uniform_(-2, 2)
        bn.running_var.uniform_(0.05, 4)
        if affine:
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-1, 1)
    return bn


class ConvBN(torch.nn.Module):
    def __init__(self, bias=False, dims=2):
        super().__init__()
        conv = {1: torch.nn.Conv1d, 2: torch.nn.Conv2d, 3: torch.nn.Conv3d}[dims]
        norm = {1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm2d, 3: torch.nn.BatchNorm3d}[dims]
        self.conv = conv(8, 16, 3, padding=1, bias=bias)
        self.bn = _bn(norm, 16)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class LinearBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 24)
        self.bn = _bn(torch.nn.BatchNorm1d, 24)

    def forward(self, x):
        return self.bn(self.fc(x))


class ResidualBN(torch.nn.Module):
    """The convolution's result is read twice: its BatchNorm folds alone."""

    def __init__(self, c=8):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = _bn(torch.nn.BatchNorm2d, c)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y) + y


class SharedWeight(torch.nn.Module):
    """One convolution applied twice: its weight cannot take either BatchNorm's scale."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn1 = _bn(torch.nn.BatchNorm2d, 8)
        self.bn2 = _bn(torch.nn.BatchNorm2d, 8)

    def forward(self, x):
        return self.bn2(self.conv(self.bn1(self.conv(x))))


class PreActivation(torch.nn.Module):
    """BatchNorm, ReLU, convolution (a pre-activation block, BatchNorm without affine)."""

    def __init__(self):
        super().__init__()
        self.bn = _bn(torch.nn.BatchNorm2d, 8, affine=False)
        self.conv = torch.nn.ConvTranspose2d(8, 8, 3, padding=1)
        self.bn2 = _bn(torch.nn.BatchNorm2d, 8)

    def forward(self, x):
        return self.bn2(self.conv(torch.relu(self.bn(x))))


def _inputs(model):
    shape = {LinearBN: (6, 32)}.get(type(model))
    if shape is None:
        dims = len(model.conv.weight.shape) - 2
        shape = (2, 8) + (9,) * dims
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(11)),)


def _export(model, inputs):
    return torch.export.export(model.eval(), inputs, strict=False)


def _targets(program):
    return [n.target for n in program.graph.nodes if n.op == "call_function"]


def _relative(out, ref):
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def _reference(model, inputs):
    with torch.no_grad():  # (a copy: .double() converts a module in place)
        return copy.deepcopy(model).double()(*(i.double() for i in inputs)).numpy()


@pytest.mark.parametrize("make", [lambda: ConvBN(), lambda: ConvBN(bias=True),
                                  lambda: ConvBN(dims=1), lambda: ConvBN(dims=3), LinearBN],
                         ids=["conv2d", "conv2d-bias", "conv1d", "conv3d", "linear"])
def test_folded_into_the_layer_before(make):
    """The BatchNorm is gone: the layer's weight scaled, its bias the running mean's place;
    the program computes what the model does (float64 reference, 1e-6)."""
    torch.manual_seed(0)
    model = make().eval()
    inputs = _inputs(model)
    program = _export(model, inputs)
    assert aten.batch_norm.default in _targets(program)
    assert fold_batch_norms(program) == 1
    targets = _targets(program)
    assert aten.batch_norm.default not in targets
    assert aten.mul.Tensor not in targets and aten.add.Tensor not in targets
    layer = next(n for n in program.graph.nodes
                 if n.target in (aten.conv1d.default, aten.conv2d.default,
                                 aten.conv3d.default, aten.linear.default))
    assert layer.args[2].name == "b_bn_running_mean"
    with torch.no_grad():
        out = program.module()(*inputs).double().numpy()
    assert _relative(out, _reference(model, inputs)) < 1e-6


@pytest.mark.parametrize("make", [ResidualBN, SharedWeight, PreActivation],
                         ids=["result-read-twice", "shared-weight", "pre-activation"])
def test_folded_alone_where_the_layer_cannot_take_it(make):
    """Not into the layer (its result read twice, its weight shared, a transposed
    convolution, no layer before): each BatchNorm one multiply and one add."""
    torch.manual_seed(0)
    model = make().eval()
    inputs = _inputs(model)
    program = _export(model, inputs)
    norms = _targets(program).count(aten.batch_norm.default)
    assert fold_batch_norms(program) == norms
    targets = _targets(program)
    assert aten.batch_norm.default not in targets
    assert targets.count(aten.mul.Tensor) == norms
    with torch.no_grad():
        out = program.module()(*inputs).double().numpy()
    assert _relative(out, _reference(model, inputs)) < 1e-6


def test_training_mode_and_updated_statistics_are_left_alone():
    """A BatchNorm in training mode normalises by the batch and updates its statistics:
    nothing to fold."""
    model = ConvBN().train()
    inputs = _inputs(model)
    program = torch.export.export(model, inputs, strict=False)
    before = _targets(program)
    assert fold_batch_norms(program) == 0
    assert _targets(program) == before


def test_16_bit_weights_fold_alone_in_float32():
    """bf16: the convolution keeps its weight (folding would round the scaled weights to
    bf16); the BatchNorm is computed in float32 and rounded once, as torch computes it."""
    model = ConvBN().eval().to(torch.bfloat16)
    inputs = tuple(i.to(torch.bfloat16) for i in _inputs(ConvBN()))
    program = _export(model, inputs)
    weight = program.state_dict["conv.weight"].clone()
    assert fold_batch_norms(program) == 1
    assert torch.equal(program.state_dict["conv.weight"], weight)
    assert program.state_dict["bn.running_var"].dtype == torch.float32
    with torch.no_grad():
        out = program.module()(*inputs)
        eager = model(*inputs)
    assert out.dtype == torch.bfloat16
    ref = _reference(model, inputs)
    assert _relative(out.double().numpy(), ref) <= 1.01 * _relative(eager.double().numpy(), ref)


def test_compiled_model_matches_and_the_user_module_is_untouched():
    """Through fusec.compile: one kernel, float64 within 1e-5 on fresh inputs, and the
    user's parameters and buffers bit for bit as they were."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(ConvBN(bias=True), ResidualBN(16)).eval()
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    (x,) = _inputs(model[0])
    compiled = fusec.compile(model, x, cache=False)
    for k, v in model.state_dict().items():
        assert torch.equal(v, saved[k]), k
    fresh = torch.randn(x.shape, generator=torch.Generator().manual_seed(5))
    out = compiled(fresh)
    out = out.double().numpy() if isinstance(out, torch.Tensor) else np.asarray(out, np.float64)
    assert _relative(out, _reference(model, (fresh,))) < 1e-5
    assert len(compiled.kernels) == 2, [k["ops"] for k in compiled.kernels]


class Unbatched(torch.nn.Module):
    """An unbatched convolution ([C, L] in, [C_out, L] out): its channels are dim 0, the
    BatchNorm's dim 1 (here as many: a second reader found it folded on the wrong axis)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 6, 1)
        self.bn = _bn(torch.nn.BatchNorm1d, 6)

    def forward(self, x):
        return self.bn(self.conv(x))


def test_an_unbatched_convolution_keeps_its_weight():
    torch.manual_seed(0)
    model = Unbatched().eval()
    inputs = (torch.randn(4, 6, generator=torch.Generator().manual_seed(2)),)
    program = _export(model, inputs)
    weight = program.state_dict["conv.weight"].clone()
    assert fold_batch_norms(program) == 1
    assert torch.equal(program.state_dict["conv.weight"], weight)
    with torch.no_grad():
        out = program.module()(*inputs).double().numpy()
    assert _relative(out, _reference(model, inputs)) < 1e-6


@pytest.mark.parametrize("make", [ConvBN, ResidualBN], ids=["into-layer", "alone"])
def test_a_batch_norm_that_is_the_output_keeps_the_signature_right(make):
    """The program's output names the node that took the BatchNorm's place."""

    class Last(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = make()

        def forward(self, x):
            return self.inner.bn(self.inner.conv(x))

    model = Last().eval()
    inputs = _inputs(model.inner)
    program = _export(model, inputs)
    assert fold_batch_norms(program) == 1
    names = {n.name for n in program.graph.nodes}
    output = next(n for n in program.graph.nodes if n.op == "output")
    assert [s.arg.name for s in program.graph_signature.output_specs] == \
        [a.name for a in output.args[0]]
    assert all(s.arg.name in names for s in program.graph_signature.output_specs)
