"""The graph-level fusion plan (--fusion-plan) on torch-mlir output and on a long chain.

Asserts kernel counts (one `fusion.group` = one kernel), that every compute op ends up in a
group, that the predicted HBM bytes of the memory-bound examples are the minimum (inputs
read once, outputs written once), and that planning stays fast.
"""

from __future__ import annotations

import time

import mlir.ir as ir
import pytest

# The targets say what their kernels take (the planner asks them): imported here, so that
# this file runs alone as it runs among the others.
import fusec.compiler.targets.cpu  # noqa: E402,F401
import fusec.compiler.targets.cuda  # noqa: E402,F401
from fusec.dialects import make_context
from fusec.passes import run_pipeline
from fusec.passes.grouping import is_compute
from fusec.passes.report import fusion_report, refusals_in

torch = pytest.importorskip("torch")
fx = pytest.importorskip("torch_mlir.fx")
nn = torch.nn


def import_linalg(model: "nn.Module", *inputs: "torch.Tensor") -> str:
    module = fx.export_and_import(model.eval(), *inputs, output_type="linalg-on-tensors")
    return module.operation.get_asm(print_generic_op_form=True)


def plan(text: str, device: str = "nvidia-h200") -> tuple[ir.Operation, list[ir.Operation], float]:
    context = make_context()
    module = ir.Module.parse(text, context)
    start = time.perf_counter()
    run_pipeline(module, [f"fusion-plan{{device={device}}}"])
    elapsed = time.perf_counter() - start
    module.operation.verify()
    body = module.body.operations[0].regions[0].blocks[0]
    groups = [op.operation for op in body.operations if op.operation.name == "fusion.group"]
    loose = [op.operation.name for op in body.operations if is_compute(op.operation)]
    assert not loose, f"compute ops outside any group: {loose}"
    return module.operation, groups, elapsed


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, -1)


class ResidualLayerNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(256)

    def forward(self, x, r):
        return self.norm(x + r)


class RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(256))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class GeluChain(nn.Module):
    def forward(self, x):
        return nn.functional.gelu(x * 2 + 1) * 3


class LinearBiasGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(256, 512)

    def forward(self, x):
        return nn.functional.gelu(self.linear(x))


class NaiveAttention(nn.Module):
    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) / 8.0, -1) @ v


def _x(*shape):
    return torch.randn(*shape)


# (model, inputs, kernels, memory-bound: predicted bytes must be the minimum)
CASES = {
    "softmax": (Softmax, (_x(64, 128),), 1, True),
    "residual_layernorm": (ResidualLayerNorm, (_x(4, 128, 256), _x(4, 128, 256)), 1, True),
    "rmsnorm": (RMSNorm, (_x(4, 128, 256),), 1, True),
    "gelu_chain": (GeluChain, (_x(1024, 1024),), 1, True),
    "linear_bias_gelu": (LinearBiasGelu, (_x(4, 128, 256),), 1, False),
    "naive_attention": (NaiveAttention, tuple(_x(2, 4, 64, 32) for _ in range(3)), 2, False),
}


def _minimum_bytes(inputs, outputs_bytes: int, constants_bytes: int) -> int:
    return sum(t.numel() * t.element_size() for t in inputs) + outputs_bytes + constants_bytes


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_counts_on_torch_mlir_output(name):
    model_cls, inputs, kernels, memory_bound = CASES[name]
    model = model_cls()
    text = import_linalg(model, *inputs)
    _, groups, elapsed = plan(text)
    assert len(groups) == kernels, [g.attributes["kind"] for g in groups]
    for group in groups:
        _assert_single_root(group)
    assert elapsed < 1.0
    if memory_bound:
        (group,) = groups
        out = model(*inputs)
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        minimum = _minimum_bytes(inputs, out.numel() * out.element_size(), params)
        predicted = group.attributes["fusion.bytes_fused"].value
        assert minimum <= predicted <= 1.1 * minimum, (predicted, minimum)
        assert group.attributes["fusion.bytes_unfused"].value > predicted


def test_attention_refuses_reduction_after_contraction():
    _, inputs, _, _ = CASES["naive_attention"]
    text = import_linalg(NaiveAttention(), *inputs)
    module, groups, _ = plan(text, device="cpu")
    refused = refusals_in(module)
    # Q @ K^T and P @ V are in kernels of their own; on the CPU the scale between Q @ K^T
    # and the softmax is Q @ K^T's epilogue (`epilogue-first`), so the softmax's group
    # never reaches Q @ K^T; elsewhere its group refuses it (`one-contraction`).
    assert any(("one-contraction" in r or "reduction-order" in r or "epilogue-first" in r)
               and "linalg.batch_matmul" in r for r in refused), refused
    for g in groups:
        ops = [op.operation.name for op in g.regions[0].blocks[0].operations]
        assert ops.count("linalg.batch_matmul") <= 1, ops
    # On the H200 the P @ V matmul is a cuBLASLt call that reads P from memory: the softmax
    # before it is refused as its prologue (it stays with Q @ K^T, as that GEMM's epilogue).
    module, _, _ = plan(text)
    refused = refusals_in(module)
    assert any("gemm-prologue" in r and "linalg.batch_matmul" in r for r in refused), refused


def _chain(n: int, shape: str = "64x128") -> str:
    t = f"tensor<{shape}xf32>"
    lines = [f"func.func @chain(%a: {t}, %b: {t}) -> {t} {{",
             f"  %e = tensor.empty() : {t}",
             f"  %v0 = linalg.add ins(%a, %b : {t}, {t}) outs(%e : {t}) -> {t}"]
    for i in range(1, n):
        op = ("linalg.exp", "linalg.negf", "linalg.abs")[i % 3]
        lines.append(f"  %v{i} = {op} ins(%v{i - 1} : {t}) outs(%e : {t}) -> {t}")
    lines.append(f"  return %v{n - 1} : {t}\n}}")
    return "\n".join(lines)


def test_two_thousand_op_chain_plans_fast_and_respects_the_size_cap():
    _, groups, elapsed = plan(_chain(2000))
    assert elapsed < 10.0, elapsed
    # 128 ops per group at most: 2000 ops need 16 groups.
    sizes = [sum(1 for op in g.regions[0].blocks[0].operations if is_compute(op.operation))
             for g in groups]
    assert max(sizes) <= 128 and sum(sizes) == 2000
    assert len(groups) == 16


def test_cpu_device_changes_the_capacity_decision():
    """A 300 KB row is over the H200's 227 KB of shared memory per block but within the
    CPU's 1 MB of L2: the H200 plan splits the softmax, the CPU plan does not."""
    text = import_linalg(Softmax(), _x(4, 75000))
    gpu_module, gpu_groups, _ = plan(text, "nvidia-h200")
    _, cpu_groups, _ = plan(text, "cpu")
    assert len(cpu_groups) == 1
    assert len(gpu_groups) > 1
    refused = refusals_in(gpu_module)
    assert any("huge-axis" in r for r in refused), refused


def test_report_is_derived_from_the_ir():
    model, inputs = LinearBiasGelu(), (_x(4, 128, 256),)
    module, groups, _ = plan(import_linalg(model, *inputs))
    report = fusion_report(module)
    (kernel,) = report.kernels
    assert kernel.kind == "epilogue"
    assert "linalg.matmul" in kernel.ops and kernel.ops.count("linalg.generic") == 2
    # Reading the printed plan back gives the same report.
    again = ir.Module.parse(str(module), make_context())
    assert fusion_report(again.operation).to_json() == report.to_json()
    assert kernel.hbm_bytes == groups[0].attributes["fusion.bytes_fused"].value
    assert kernel.flops >= 2 * 512 * 512 * 256 and kernel.floor_us > 0


# End to end through the CPU code generation: the planner's groups compile and match torch.
# (example, kernels with the planner on)
END_TO_END = {"layernorm_mlp": 1, "attention": 1, "cnn": 2, "transformer": 6}


def _load_example(name: str):
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", name, "model.py")
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.model().eval(), module.example_inputs()


@pytest.mark.parametrize("name", sorted(END_TO_END))
def test_planned_examples_match_torch(name):
    import numpy as np

    import fusec

    model, inputs = _load_example(name)
    compiled = fusec.compile(model, *inputs, target="cpu", cache=False)
    assert len(compiled.kernels) == END_TO_END[name]
    fresh = [torch.randn_like(x) for x in inputs]
    out = compiled(*[x.numpy() for x in fresh])
    out = out[0] if isinstance(out, tuple) else out
    with torch.no_grad():
        ref = model.double()(*[x.double() for x in fresh])
    ref = (ref[0] if isinstance(ref, tuple) else ref).numpy()
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


def test_graph_has_one_cluster_per_kernel():
    from fusec.passes.report import fusion_graph_dot

    _, inputs, _, _ = CASES["naive_attention"]
    module, groups, _ = plan(import_linalg(NaiveAttention(), *inputs))
    dot = fusion_graph_dot(module)
    assert dot.count("subgraph cluster_") == len(groups) == 2
    # the scores flow from the first kernel into the second: an edge between clusters
    # (node names are f<function>_g<group position>_<op position>)
    edges = [line.strip().rstrip(";").split(" -> ") for line in dot.splitlines() if "->" in line]
    cluster = lambda node: node.split("_")[1]  # noqa: E731
    assert any(a.startswith("f0_g") and cluster(a) != cluster(b) for a, b in edges)


def _random_graph(n: int, seed: int) -> str:
    """A random DAG of elementwise ops, row reductions with broadcast consumers and matmuls,
    with values shared between many consumers (the shapes planning must stay linear on)."""
    import random

    rng = random.Random(seed)
    t, v = "tensor<16x32xf32>", "tensor<16x1xf32>"
    lines = ["#m = affine_map<(d0, d1) -> (d0, d1)>", "#r = affine_map<(d0, d1) -> (d0, 0)>",
             f"func.func @f(%a: {t}, %b: {t}) -> ({t}, {t}) {{",
             "  %w = arith.constant dense<1.0> : tensor<32x32xf32>",
             "  %zero = arith.constant 0.0 : f32", f"  %e = tensor.empty() : {t}",
             f"  %ev = tensor.empty() : {v}",
             f"  %z = linalg.fill ins(%zero : f32) outs(%ev : {v}) -> {v}"]
    full, rows = ["%a", "%b"], []
    for i in range(n):
        k, x = rng.random(), rng.choice(full[-6:])
        if k < 0.15:
            lines.append(
                f"  %v{i} = linalg.generic {{indexing_maps = [#m, #r], iterator_types = "
                f"[\"parallel\", \"reduction\"]}} ins({x} : {t}) outs(%z : {v}) {{\n"
                "  ^bb0(%in: f32, %out: f32):\n    %0 = arith.addf %in, %out : f32\n"
                f"    linalg.yield %0 : f32\n  }} -> {v}")
            rows.append(f"%v{i}")
            continue
        if k < 0.3 and rows:
            lines.append(
                f"  %v{i} = linalg.generic {{indexing_maps = [#m, #r, #m], iterator_types = "
                f"[\"parallel\", \"parallel\"]}} ins({x}, {rng.choice(rows[-4:])} : {t}, {v}) "
                f"outs(%e : {t}) {{\n  ^bb0(%in: f32, %in1: f32, %out: f32):\n"
                f"    %0 = arith.subf %in, %in1 : f32\n    linalg.yield %0 : f32\n  }} -> {t}")
        elif k < 0.4:
            lines.append(f"  %v{i} = linalg.matmul ins({x}, %w : {t}, tensor<32x32xf32>) "
                         f"outs(%e : {t}) -> {t}")
        else:
            op = rng.choice(["linalg.add", "linalg.mul", "linalg.sub"])
            y = rng.choice(full[-8:])
            lines.append(f"  %v{i} = {op} ins({x}, {y} : {t}, {t}) outs(%e : {t}) -> {t}")
        full.append(f"%v{i}")
    lines.append(f"  return {full[-1]}, {full[len(full) // 2]} : {t}, {t}\n}}")
    return "\n".join(lines)


@pytest.mark.parametrize("n, seed", [(200, 1), (200, 2), (200, 3), (2000, 0)])
def test_random_graphs_plan_fast_and_group_every_live_op(n, seed):
    context = make_context()
    module = ir.Module.parse(_random_graph(n, seed), context)
    start = time.perf_counter()
    run_pipeline(module, ["fusion-plan{device=nvidia-h200}"])
    assert time.perf_counter() - start < 10.0
    module.operation.verify()
    body = module.body.operations[0].regions[0].blocks[0]
    loose = [op.operation.name for op in body.operations if is_compute(op.operation)
             and any(True for r in op.operation.results for _ in r.uses)]
    assert not loose
    assert not [r for r in refusals_in(module.operation) if "not-convex" in r]
    for group in body.operations:
        if group.operation.name == "fusion.group" and group.operation.attributes["kind"].value \
                != "horizontal":
            _assert_single_root(group.operation)


def _assert_single_root(group: ir.Operation) -> None:
    """Code generation tiles a group's last op and fuses the rest into it as producers:
    every compute op of a (non-horizontal) group must feed the last one."""
    from fusec.passes.grouping import defining_op, op_key

    ops = [op.operation for op in group.regions[0].blocks[0].operations if is_compute(op.operation)]
    feeding, stack = set(), [ops[-1]]
    while stack:
        op = stack.pop()
        if op_key(op) in feeding:
            continue
        feeding.add(op_key(op))
        stack += [p for v in op.operands if (p := defining_op(v)) is not None]
    assert all(op_key(op) in feeding for op in ops), group.attributes["kind"]
