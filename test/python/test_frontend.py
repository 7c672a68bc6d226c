"""The torch frontend: examples import, parse with fusec's MLIR, compute what PyTorch computes.

Numerics run the imported linalg through a plain upstream lowering (bufferize, loops, LLVM,
ExecutionEngine) that belongs to this test only: it checks the import, not fusec's codegen.
"""

from __future__ import annotations

import copy
import ctypes
import functools
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import mlir.ir as ir  # noqa: E402
from mlir.execution_engine import ExecutionEngine  # noqa: E402
from mlir.passmanager import PassManager  # noqa: E402
from mlir.runtime import get_ranked_memref_descriptor  # noqa: E402

from fusec.compiler.frontend import (  # noqa: E402
    FrontendError,
    check_dialects,
    import_torch,
    inline_dense_resources,
    load_model_file,
    parse_module,
)
from fusec.dialects import make_context  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples")
EXAMPLE_NAMES = sorted(
    name
    for name in os.listdir(EXAMPLES)
    if os.path.isfile(os.path.join(EXAMPLES, name, "model.py"))
)
ELEMENT_TYPES = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.bool: "i1"}


@functools.cache
def exported(name: str) -> str:
    """A fresh export of examples/<name>/model.py (cached: several tests read it)."""
    module, inputs = load_model_file(os.path.join(EXAMPLES, name, "model.py"))
    return import_torch(module, *inputs)


def main_function(module: ir.Module) -> ir.Operation:
    functions = [op.operation for op in module.body.operations if op.operation.name == "func.func"]
    assert len(functions) == 1, [f.attributes["sym_name"] for f in functions]
    assert ir.StringAttr(functions[0].attributes["sym_name"]).value == "main"
    return functions[0]


def signature(function: ir.Operation) -> tuple[list, list]:
    """([(shape, element type)] of the arguments, the same of the results)."""
    function_type = ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value)

    def describe(types: list[ir.Type]) -> list[tuple[list[int], str]]:
        tensors = [ir.RankedTensorType(t) for t in types]
        return [(list(t.shape), str(t.element_type)) for t in tensors]

    return describe(function_type.inputs), describe(function_type.results)


def op_counts(module: ir.Module) -> dict[str, int]:
    counts: dict[str, int] = {}

    def count(op: ir.Operation) -> ir.WalkResult:
        counts[op.name] = counts.get(op.name, 0) + 1
        return ir.WalkResult.ADVANCE

    for op in module.body.operations:
        op.operation.walk(count)
    return counts


# --------------------------------------------------------------------------------------------
# Examples


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_signature_matches_inputs(name: str) -> None:
    module, inputs = load_model_file(os.path.join(EXAMPLES, name, "model.py"))
    with torch.no_grad():
        output = module(*inputs)
    parsed = parse_module(exported(name))
    arguments, results = signature(main_function(parsed))
    assert arguments == [(list(x.shape), ELEMENT_TYPES[x.dtype]) for x in inputs]
    assert results == [(list(output.shape), ELEMENT_TYPES[output.dtype])]


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_committed_example_mlir_is_up_to_date(name: str) -> None:
    path = os.path.join(EXAMPLES, name, "model.mlir")
    with open(path) as file:
        committed = file.read()
    assert committed == exported(name), f"{path} is stale: run python examples/export.py {name}"


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_has_no_resource_blobs_or_foreign_ops(name: str) -> None:
    text = exported(name)
    assert "dense_resource" not in text and "dialect_resources" not in text
    counts = op_counts(parse_module(text))
    allowed = ("linalg.", "tensor.", "arith.", "math.", "func.")
    assert [op for op in counts if not op.startswith(allowed)] == []


def test_decomposition_overrides_reach_the_ir() -> None:
    """The frontend's decompositions replace torch-mlir's f64 variance, cf.assert, fpowi,
    and torch's i1 safe-softmax reduction."""
    gpt2 = exported("gpt2_block")
    for name in ("layernorm_mlp", "transformer", "gpt2_block"):
        assert "xf64>" not in exported(name), name  # scalar f64 constants are fine
    assert "cf.assert" not in exported("cnn")
    assert "math.fpowi" not in exported("rmsnorm")
    assert "math.fpowi" not in gpt2
    # The causal mask is the only i1 tensor left, produced and consumed elementwise.
    assert op_counts(parse_module(gpt2)).get("arith.andi", 0) == 0
    counts = op_counts(parse_module(gpt2))
    assert counts["linalg.batch_matmul"] == 2  # Q K^T and P V: attention stays recognisable
    assert counts["linalg.matmul"] == 4  # QKV, output projection, two MLP layers


# A plain CPU lowering for checking numbers. linalg-fuse-elementwise-ops runs first because
# MLIR 22's finalize-memref-to-llvm aborts the process on i1 memrefs (gpt2_block's causal
# mask is an i1 tensor until it is fused into its consumer); fusion also drops the dead
# argmax result that torch-mlir's max reductions carry.
REFERENCE_LOWERING = (
    "builtin.module(linalg-fuse-elementwise-ops,func.func(math-expand-ops{ops=fpowi}),"
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map},"
    "buffer-results-to-out-params{modify-public-functions=true},"
    "func.func(convert-linalg-to-loops),expand-strided-metadata,lower-affine,convert-scf-to-cf,"
    "convert-math-to-llvm,convert-math-to-libm,convert-arith-to-llvm,convert-cf-to-llvm,"
    "finalize-memref-to-llvm,convert-func-to-llvm,reconcile-unrealized-casts)"
)
C_RUNNER_UTILS = os.path.join(os.path.dirname(ir.__file__), "lib", "libmlir_c_runner_utils.so")


def run_reference_lowering(text: str, inputs: list[np.ndarray], output_shape: tuple) -> np.ndarray:
    with make_context():
        module = ir.Module.parse(text)
        main_function(module).attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        PassManager.parse(REFERENCE_LOWERING).run(module.operation)
        engine = ExecutionEngine(module, opt_level=2, shared_libs=[C_RUNNER_UTILS])
        output = np.zeros(output_shape, np.float32)
        arguments = [np.ascontiguousarray(x) for x in inputs] + [output]
        engine.invoke(
            "main",
            *[ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))) for a in arguments],
        )
    return output


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_numerics_match_float64_pytorch(name: str) -> None:
    module, inputs = load_model_file(os.path.join(EXAMPLES, name, "model.py"))
    seed = random.randrange(2**31)
    generator = torch.Generator().manual_seed(seed)
    fresh = [torch.randn(x.shape, generator=generator, dtype=x.dtype) for x in inputs]
    reference_model = copy.deepcopy(module).double()
    with torch.no_grad():
        reference = reference_model(*[x.double() for x in fresh]).numpy()
    output = run_reference_lowering(exported(name), [x.numpy() for x in fresh], reference.shape)
    error = np.linalg.norm(output - reference) / np.linalg.norm(reference)
    assert error < 1e-5, f"{name}: relative error {error:.3g} (seed {seed})"


# --------------------------------------------------------------------------------------------
# Attention decomposition, beyond the examples


class Attention(torch.nn.Module):
    def __init__(self, **options: object) -> None:
        super().__init__()
        self.options = options

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor
    ) -> torch.Tensor:
        options = dict(self.options)
        mask = options.pop("mask", None)
        if mask == "bool":
            options["attn_mask"] = m > 0.0
        elif mask == "float":
            options["attn_mask"] = m
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, **options)


@pytest.mark.parametrize(
    "options, kv_heads, kv_length",
    [
        ({"is_causal": True}, 4, 24),  # causal with more keys than queries: top-left aligned
        ({"mask": "bool"}, 4, 16),  # includes a fully masked row: torch gives zeros
        ({"mask": "float", "scale": 0.3}, 4, 16),
        ({"is_causal": True, "enable_gqa": True}, 2, 16),
    ],
)
def test_attention_decomposition_numerics(options: dict, kv_heads: int, kv_length: int) -> None:
    generator = torch.Generator().manual_seed(random.randrange(2**31))
    q = torch.randn(1, 4, 16, 8, generator=generator)
    k, v = (torch.randn(1, kv_heads, kv_length, 8, generator=generator) for _ in range(2))
    m = torch.randn(16, kv_length, generator=generator)
    m[3] = -1.0  # with the bool mask, row 3 is fully masked
    model = Attention(**options)
    text = import_torch(model, q, k, v, m)
    assert "xf64>" not in text and "tm_tensor" not in text
    with torch.no_grad():
        reference = model(*(x.double() for x in (q, k, v, m))).numpy()
    output = run_reference_lowering(text, [x.numpy() for x in (q, k, v, m)], reference.shape)
    assert np.isfinite(output).all()
    assert np.linalg.norm(output - reference) / np.linalg.norm(reference) < 1e-5


# --------------------------------------------------------------------------------------------
# Errors


def test_unsupported_op_is_named() -> None:
    # tm_tensor.sort/scan/scatter/topk are lowered by --fusion-lower-tm-tensor; others are not.
    text = ('%0 = "tm_tensor.attention"(%q, %k, %v, %o) : (tensor<2x4xf32>, tensor<2x4xf32>, '
            'tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>\n'
            '%1:2 = "tm_tensor.sort"(%a, %b) <{dimension = 0 : i64}> ({\n'
            '  "tm_tensor.yield"(%c) : (i1) -> ()\n})')
    with pytest.raises(FrontendError, match=r"compile: `tm_tensor\.attention`$"):
        check_dialects(text)


def test_data_dependent_shape_is_refused_at_the_users_line() -> None:
    """torch.unique's result size depends on the data: refused before torch-mlir sees it
    (torch-mlir's import of such shapes can grow without bound), at the model's line."""
    class Unique(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.unique(x)

    with pytest.raises(FrontendError, match=r"test_frontend\.py:\d+: '_unique2\.default' has "
                                            r"a result whose shape \(u\d+\) depends on the "
                                            r"values of its input"):
        import_torch(Unique(), torch.randn(4, 8))


@pytest.mark.parametrize("body", ["return x[x > 0].sum()", "return torch.nonzero(x).float()",
                                  "return torch.masked_select(x, x > 0)"],
                         ids=["boolean-mask", "nonzero", "masked-select"])
def test_data_dependent_shapes_fail_fast(body) -> None:
    """Boolean-mask indexing took torch-mlir's import to 20 GB over minutes: now a located
    error in about a second."""
    import time

    namespace: dict = {}
    exec(f"def forward(self, x):\n    {body}\n", {"torch": torch}, namespace)
    model = type("M", (torch.nn.Module,), {"forward": namespace["forward"]})()
    start = time.monotonic()
    with pytest.raises(FrontendError, match=r"depends on the values of its input"):
        import_torch(model, torch.randn(4, 8))
    assert time.monotonic() - start < 30


def test_negative_dims_of_scatter_and_gather_import() -> None:
    """`scatter(-1, ...)` killed the process inside torch-mlir (top-2 routing written the
    usual way); the dim is normalised before the import."""
    class Route(torch.nn.Module):
        def forward(self, p, idx, val):
            routed = torch.zeros_like(p).scatter(-1, idx, val)
            return routed + torch.gather(p, -1, idx).sum(-1, keepdim=True)

    p, idx, val = torch.randn(4, 6), torch.randint(0, 6, (4, 2)), torch.randn(4, 2)
    text = import_torch(Route(), p, idx, val)
    assert "tensor<4x6xf32>" in text


def test_non_persistent_buffers_import() -> None:
    """Buffers registered with persistent=False (RoPE tables, BERT's position_ids) are kept
    by torch.export among its constants, where torch-mlir's importer did not look."""
    class Rope(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("inv_freq", torch.arange(8.0) / 8, persistent=False)

        def forward(self, x):
            return x * torch.cos(self.inv_freq)

    text = import_torch(Rope(), torch.randn(3, 8))
    assert "math.cos" in text or "cos" in text


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_weights_cross_from_torch_mlir_as_bytes(dtype) -> None:
    """The weights leave torch-mlir's process as bytes (not as a resource section's hex)
    and come back as dense constants equal, bit for bit, to the model's tensors, of every
    element type a model holds (floats of its dtype, int64 and bool buffers)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(24, 40)
            self.register_buffer("index", torch.randperm(40)[:16])
            self.register_buffer("keep", torch.rand(16) > 0.5)

        def forward(self, x):
            y = torch.index_select(self.linear(x), 1, self.index)
            return torch.where(self.keep, y, -y)

    model = Model().to(dtype).eval()
    text = import_torch(model, torch.randn(5, 24, dtype=dtype))
    assert "dense_resource" not in text and "dialect_resources" not in text
    module = parse_module(text)
    constants = {}
    for op in module.body.operations[0].regions[0].blocks[0].operations:
        if op.operation.name == "arith.constant" and \
                isinstance(op.attributes["value"], ir.DenseElementsAttr):
            value = op.attributes["value"]
            shape = tuple(ir.ShapedType(value.type).shape)
            if not value.is_splat and len(shape) >= 1 and np.prod(shape) > 1:
                constants.setdefault(shape, []).append(value)
    if dtype != torch.bfloat16:  # (the bindings give no numpy view of bf16 attributes)
        weight = model.linear.weight.detach().numpy()
        found = [np.array(v) for v in constants.get((40, 24), []) + constants.get((24, 40), [])]
        assert any(np.array_equal(f, weight) or np.array_equal(f, weight.T) for f in found)
    assert any(np.array_equal(np.array(v), model.index.numpy())
               for v in constants.get((16,), [])
               if str(ir.ShapedType(v.type).element_type) == "i64")
    # And the numbers: the compiled model against float64.
    import fusec

    compiled = fusec.compile(model, torch.randn(5, 24, dtype=dtype), cache=False)
    x = torch.randn(5, 24).to(dtype)
    got = np.asarray(compiled(x.numpy() if dtype != torch.bfloat16 else
                              x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)),
                     dtype=np.float64)
    ref = model.double()(x.double()).detach().numpy()
    bar = 1e-6 if dtype == torch.float32 else 1e-2
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < bar


def test_import_torch_rejects_non_tensor_inputs() -> None:
    with pytest.raises(FrontendError, match="example input 0 is a tuple"):
        import_torch(torch.nn.ReLU(), (torch.randn(2),))


def write_model_file(tmp_path, body: str) -> str:
    path = tmp_path / "user_model.py"
    path.write_text("import torch\n" + textwrap.dedent(body))
    return str(path)


def test_load_model_file_missing_functions(tmp_path) -> None:
    path = write_model_file(tmp_path, "def model():\n    return torch.nn.ReLU()\n")
    with pytest.raises(FrontendError) as error:
        load_model_file(path)
    message = str(error.value)
    assert path in message and "missing: `example_inputs()`" in message
    assert "`model()`," not in message


def test_load_model_file_reports_exceptions_with_the_file_name(tmp_path) -> None:
    path = write_model_file(tmp_path, "raise RuntimeError('broken on purpose')\n")
    with pytest.raises(FrontendError, match="broken on purpose") as error:
        load_model_file(path)
    assert path in str(error.value) and isinstance(error.value.__cause__, RuntimeError)

    path = write_model_file(
        tmp_path,
        """
        def model():
            return torch.nn.ReLU()
        def example_inputs():
            return torch.randn(2, 3).view(5)
        """,
    )
    with pytest.raises(FrontendError, match=r"`example_inputs\(\)` raised RuntimeError") as error:
        load_model_file(path)
    assert path in str(error.value)


def test_load_model_file_checks_return_types(tmp_path) -> None:
    path = write_model_file(
        tmp_path,
        """
        def model():
            return lambda x: x
        def example_inputs():
            return (torch.randn(2),)
        """,
    )
    with pytest.raises(FrontendError, match="not a torch.nn.Module"):
        load_model_file(path)
    path = write_model_file(
        tmp_path,
        """
        def model():
            return torch.nn.Dropout(0.5).train()
        def example_inputs():
            return torch.randn(2)
        """,
    )
    module, inputs = load_model_file(path)
    assert not module.training and isinstance(inputs, tuple) and len(inputs) == 1


def test_load_model_file_missing_file(tmp_path) -> None:
    with pytest.raises(FrontendError, match="no such file"):
        load_model_file(str(tmp_path / "absent.py"))
    assert issubclass(FrontendError, ValueError)


# --------------------------------------------------------------------------------------------
# Text normalisation and lazy imports


def test_inline_dense_resources() -> None:
    text = textwrap.dedent(
        """\
        "func.func"() <{function_type = () -> (tensor<2xf32>, tensor<3xi1>), sym_name = "f"}> ({
          %0 = "arith.constant"() <{value = dense_resource<w.1> : tensor<2xf32>}>
            : () -> tensor<2xf32>
          %1 = "arith.constant"() <{value = dense_resource<m> : tensor<3xi1>}> : () -> tensor<3xi1>
          "func.return"(%0, %1) : (tensor<2xf32>, tensor<3xi1>) -> ()
        }) : () -> ()
        {-#
          dialect_resources: {
            builtin: {
              w.1: "0x040000000000803F000000C0",
              m: "0x01000000010001"
            }
          }
        #-}
        """
    )
    inlined = inline_dense_resources(text)
    assert "dense_resource" not in inlined and "{-#" not in inlined
    module = parse_module(inlined)  # held: its ops die with it
    body = module.body.operations[0].regions[0].blocks[0]
    constants = [op for op in body.operations if op.operation.name == "arith.constant"]
    values = [np.array(ir.DenseElementsAttr(op.attributes["value"])) for op in constants]
    np.testing.assert_array_equal(values[0], np.array([1.0, -2.0], np.float32))
    np.testing.assert_array_equal(values[1], np.array([True, False, True]))


def test_frontend_imports_without_torch() -> None:
    """fusec.compiler.frontend must import (and fail clearly) where torch is not installed."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # makes `import torch` raise ImportError
        sys.modules["torch_mlir"] = None
        from fusec.compiler import frontend
        try:
            frontend.import_torch(object())
        except frontend.FrontendError as error:
            assert "fusec[torch]" in str(error), error
            print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_control_flow_in_a_library_model_is_located_at_the_librarys_line() -> None:
    """A model from a library (HF's Mixtral block branches on a tensor's value in
    transformers' own file) has no frame of the user's: the error points at the library's
    line torch stopped at, not at torch's frames (it had no location at all)."""
    from fusec.compiler.frontend import _export_failure

    class GuardOnDataDependentSymNode(Exception):
        pass

    text = ("Could not guard on data-dependent expression Eq(u0, 4)\n"
            '  File "/env/lib/python3.11/site-packages/transformers/models/mixtral/'
            'modeling_mixtral.py", line 80, in forward\n'
            '  File "/env/lib/python3.11/site-packages/torch/_dynamo/variables/tensor.py", '
            "line 1200, in evaluate_expr\n")
    error = _export_failure(GuardOnDataDependentSymNode(text))
    assert str(error).startswith("/env/lib/python3.11/site-packages/transformers/models/"
                                 "mixtral/modeling_mixtral.py:80: control flow depends on a "
                                 "tensor's value"), str(error)


def test_a_library_frame_inside_a_clone_named_fusec_is_the_models():
    """torch.export's failure is located at the model library's line; a clone named `fusec`
    (README's `git clone`) holds its virtual environment, so a transformers frame there has
    `/fusec/` in its path and must still count as the model's, not fusec's."""
    import os

    import torch

    from fusec.compiler import frontend

    root = os.path.dirname(os.path.dirname(os.path.abspath(frontend.__file__)))
    venv = os.path.join(root, ".venv", "lib", "python3.11", "site-packages")
    assert not frontend._is_ours(os.path.join(venv, "transformers", "models", "mixtral",
                                              "modeling_mixtral.py"))
    assert not frontend._is_ours("/home/u/fusec/model.py")
    assert frontend._is_ours(os.path.join(root, "compiler", "frontend.py"))
    assert frontend._is_ours(os.path.join(os.path.dirname(torch.__file__), "export",
                                          "_trace.py"))


# --------------------------------------------------------------------------------------------
# One trace for the decompositions (`decompose_program`)


class _Stateful(torch.nn.Module):
    """What the retrace must carry: a buffer updated in place (state), an input updated in
    place, attention through SDPA (a composite op fusec decomposes itself), a matmul of a
    transposed 3-D input by a weight (torch folds it to one mm only through a copy), a
    non-persistent buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.register_buffer("steps", torch.zeros(()))
        self.register_buffer("scale", torch.full((8,), 0.5), persistent=False)

    def forward(self, x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        q.mul_(2)
        h = self.proj(x.transpose(0, 1)) * self.scale
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        return h.sum() + a.sum() * self.steps


def _ops(program) -> set[str]:
    return {str(n.target) for n in program.graph.nodes if n.op == "call_function"}


def test_one_trace_decomposes_as_run_decompositions_does() -> None:
    from fusec.compiler import frontend

    torch.manual_seed(0)
    model = _Stateful().eval()
    x, q = torch.randn(5, 3, 8), torch.randn(2, 4, 6, 8)
    # Two exports: each program's buffers are its own (a run updates `steps` in place).
    reference = torch.export.export(copy.deepcopy(model), (x, q.clone()), strict=False
                                    ).run_decompositions(frontend.decomposition_table())
    program = torch.export.export(copy.deepcopy(model), (x, q.clone()), strict=False)
    retraced = frontend._retrace(program)  # raises if the one-trace path cannot take it
    # The same signature: names, kinds, targets; mutations first, as torch orders them.
    describe = (lambda p: ([(s.kind.name, s.arg.name, s.target)
                            for s in p.graph_signature.input_specs],
                           [(s.kind.name, s.target) for s in p.graph_signature.output_specs]))
    assert describe(retraced)[0] == describe(reference)[0]
    assert describe(retraced)[1] == describe(reference)[1]
    assert [k for k, _ in describe(retraced)[1]] == [
        "BUFFER_MUTATION", "USER_INPUT_MUTATION", "USER_OUTPUT"]
    # fusec's own attention decomposition (no `_safe_softmax` and its `all`), no in-place op,
    # and the matmul as torch's path gives it (a bmm of the strided input, no copy and mm).
    ops = _ops(retraced)
    assert "aten.all.dim" not in ops and "aten._softmax.default" in ops
    assert not any(op.endswith("_.default") or op.endswith("_.Tensor") for op in ops)
    assert ("aten.bmm.default" in ops) == ("aten.bmm.default" in _ops(reference))
    # The same values as the model's, the state's second step included.
    a_module, b_module = reference.module(), retraced.module()
    for _ in range(2):
        x2, q2 = torch.randn(5, 3, 8), torch.randn(2, 4, 6, 8)
        with torch.no_grad():
            want = model(x2, q2.clone())
            a, b = a_module(x2, q2.clone()), b_module(x2, q2.clone())
        assert torch.allclose(a, want, rtol=1e-5, atol=1e-5)
        assert torch.allclose(b, want, rtol=1e-5, atol=1e-5)


def test_an_in_place_op_left_by_a_decomposition_goes_torchs_way() -> None:
    """Adaptive pooling's decomposition restrides its own result in place (`as_strided_`),
    which the one trace cannot functionalize: the program goes through
    run_decompositions, and what comes out has no in-place op."""
    from fusec.compiler import frontend

    class Pool(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.adaptive_avg_pool1d(x.transpose(1, 2), 1) + 1

    program = torch.export.export(Pool(), (torch.randn(2, 5, 4),), strict=False)
    with pytest.raises(ValueError, match="in-place"):
        frontend._retrace(program)
    decomposed = frontend.decompose_program(program)
    assert "aten.as_strided_.default" not in _ops(decomposed)
    x = torch.randn(2, 5, 4)
    assert torch.allclose(decomposed.module()(x), Pool()(x))
