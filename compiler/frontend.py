"""The `torch` stage: a PyTorch module becomes linalg-on-tensors MLIR that fusec's MLIR reads.

torch-mlir (`torch_mlir.fx.export_and_import`) does the import and the lowering to
linalg-on-tensors. It carries its own, newer MLIR, so its output is handed over as text in
generic form and re-parsed with fusec's context (MLIR 22). On the way, the weights, which
torch-mlir prints as `dense_resource<...>` handles into a `{-# dialect_resources #-}` blob
section, are inlined as ordinary `dense<...>` attributes, so that every later stage (and the
Python cost model) sees plain `DenseElementsAttr` constants.

The function is named `@main` unless the caller asks otherwise.

`load_model_file` serves `fusec model.py`: the file defines `model()` (an `nn.Module`) and
`example_inputs()` (a tuple of tensors).

torch, torch_mlir and mlir are imported lazily: this module must import without torch, which
is an optional extra.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import sys
import sysconfig
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fusec.compiler.decompositions import decomposition_table, fx_decomposition_table
from fusec.passes import attributes

if TYPE_CHECKING:
    import mlir.ir as ir
    import torch

DEFAULT_FUNC_NAME = "main"


class FrontendError(ValueError):
    """A model could not be loaded or imported; the message says which and why."""


# --------------------------------------------------------------------------------------------
# torch -> MLIR text


def import_torch(
    module: torch.nn.Module,
    *example_inputs: torch.Tensor,
    func_name: str = DEFAULT_FUNC_NAME,
    locations: bool = False,
) -> str:
    """Import `module` called on `example_inputs` as linalg-on-tensors MLIR, in generic form.

    The module is put in eval mode. The result has one public function `@func_name` whose
    arguments are the example inputs (static shapes) and whose weights are inlined dense
    constants; it parses with `fusec.dialects.make_context()`. `locations=True` keeps
    torch-mlir's locations (the Python lines of the model that made each op), so that errors
    can point at the model's source; they are absolute paths, so committed files leave them out.
    """
    imported = import_torch_module(module, *example_inputs, func_name=func_name)
    return imported.module.operation.get_asm(print_generic_op_form=True,
                                             enable_debug_info=locations)


@dataclass
class Imported:
    """A model imported into fusec's MLIR, not printed: `module` (torch-mlir's locations
    kept, the weights dense constants) and `fingerprint`, a hash of everything it holds
    (the import's text without the weights, the weights' bytes, the torch signature), so a
    cache can key on the model without printing its weights."""

    module: Any
    fingerprint: str


def import_torch_module(module: torch.nn.Module, *example_inputs: torch.Tensor,
                        func_name: str = DEFAULT_FUNC_NAME) -> Imported:
    """`import_torch`, with the module handed over as it is (in a fresh fusec context)
    instead of as text: a model's weights are printed and parsed nowhere on the way."""
    (text, signature), weights = _with_weights_dir(
        lambda folder: _torch_mlir_generic_text(module, example_inputs, func_name, folder))
    for k, entry in enumerate(signature.get("state", [])):
        # The state's value at compile time travels with the weights, as bytes.
        name = f"fusec_state_{k}"
        weights[name] = entry["init"].reshape(-1).numpy().tobytes()
        entry["init"] = name
    return _imported(text, signature, weights)


def import_fx_graph(graph: Any, *example_inputs: torch.Tensor,
                    func_name: str = DEFAULT_FUNC_NAME) -> Imported:
    """An FX graph (TorchDynamo's, for `torch.compile(backend="fusec")`; any callable of
    tensors) imported as it is: traced once to aten ops by `make_fx`, functionalized, with
    fusec's decomposition table, and handed to torch-mlir's graph importer. No torch.export
    and no second trace for the decompositions (what `import_torch_module` does for a
    module): Dynamo has already captured the graph, with the module's weights among its
    inputs. Tensors the graph holds (Dynamo's lifted constants) become constants as a
    module's weights do."""
    from fusec.compiler.isolate import IsolatedFailure, run_isolated

    graph_module = trace_fx_graph(graph, example_inputs)

    def lower(folder: str) -> str:
        try:
            return run_isolated(lambda: _lower_with_torch_mlir(
                None, func_name, folder, graph_module=graph_module), "torch-mlir's import")
        except IsolatedFailure as failure:
            raise FrontendError(f"{failure} (importing an FX graph of "
                                f"{len(graph_module.graph.nodes)} nodes)") from None

    text, weights = _with_weights_dir(lower)
    return _imported(text, _graph_signature(graph_module), weights)


def _with_weights_dir(produce: Any) -> tuple[Any, dict[str, Any]]:
    """`produce(folder)` with a temporary folder for torch-mlir's weights (`write_weights`),
    and the weights it left there; the folder is gone afterwards."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="fusec-weights-")
    try:
        result = produce(folder)
        return result, read_weights(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def trace_fx_graph(graph: Any, example_inputs: tuple[Any, ...]) -> Any:
    """`graph` traced to a functional aten graph with fusec's decompositions (fake tensors:
    no op runs), checked and normalised as `export_program` does for torch.export's."""
    import types

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from fusec.compiler.unsigned import read_uint8_unsigned

    table = fx_decomposition_table()
    try:
        # A fake mode of our own, of static shapes: called from Dynamo, its tracing context
        # (a fake mode with symbolic sizes) is still active, and make_fx would take it.
        fake = FakeTensorMode(allow_non_fake_inputs=True, static_shapes=True)
        inputs = [fake.from_tensor(x, static_shapes=True) for x in example_inputs]
        with torch._guards.tracing(None), fake, torch.no_grad(), \
                warnings.catch_warnings(), _torch_logs_quiet(), \
                _composite_overrides(table), torch.fx.traceback.preserve_node_meta():
            warnings.simplefilter("ignore", FutureWarning)
            traced = make_fx(torch.func.functionalize(graph, remove="mutations"),
                             decomposition_table=table, tracing_mode="real")(*inputs)
    except FrontendError:
        raise
    except Exception as error:  # tracing raises many types
        raise FrontendError(f"tracing the graph failed: {type(error).__name__}: "
                            f"{str(error).splitlines()[0] if str(error) else ''}") from error
    # Dead values the decompositions leave (an inference batch norm's empty statistics).
    traced.graph.eliminate_dead_code()
    view = types.SimpleNamespace(graph=traced.graph, graph_module=traced)
    refuse_data_dependent_shapes(view)
    # uint8 values read as unsigned, as for torch.export's graphs: without it Dynamo's
    # `img / 255` read pixel 255 as -1 (-0.0039), and `x.sum()` wrapped.
    read_uint8_unsigned(view, _user_frame)
    normalise_negative_dims(view)
    traced.recompile()
    input_updates_as_outputs(traced)
    return traced


@contextlib.contextmanager
def _composite_overrides(table: dict[Any, Any]) -> Iterator[None]:
    """The entries of `table` for composite ops (CompositeImplicitAutograd: SDPA), in
    force while tracing. make_fx consults its decomposition table only for ops that reach
    the dispatcher's Python modes, and a composite op has been decomposed by its own
    kernel before that (SDPA into torch's math path, whose `_safe_softmax` fusec cannot
    lower); torch.export's `run_decompositions` overrides them the same way (the
    overrides are Python kernels: the Python dispatcher runs them)."""
    import torch
    from torch._dispatch.python import enable_python_dispatcher
    from torch.export.exported_program import _override_composite_implicit_decomp

    key = torch._C.DispatchKey.CompositeImplicitAutograd
    composite = {op: fn for op, fn in table.items()
                 if isinstance(op, torch._ops.OpOverload)
                 and torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key)}
    with _override_composite_implicit_decomp(composite), enable_python_dispatcher():
        yield


def decompose_program(program: Any) -> Any:
    """`program` with fusec's decompositions (`decomposition_table`), functional, each
    in-place update of a buffer, parameter or input one more output before the user's, as
    `run_decompositions` gives it, in one trace of the exported graph with make_fx
    (`trace_fx_graph`) instead of run_decompositions' two (metadata, then graph), which
    took 0.7-1.5 s of a small model's 3-6 s compile. What that trace cannot take (a
    non-tensor input or output, a data-dependent value) goes through run_decompositions."""
    try:
        return _retrace(program)
    except Exception:  # noqa: BLE001 - any failure: torch's own path decides
        return program.run_decompositions(decomposition_table())


def _retrace(program: Any) -> Any:
    import torch

    from fusec.compiler.batch_norm import state_tensor
    from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec,
                                              OutputKind, OutputSpec, TensorArgument)

    signature = program.graph_signature
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    kinds = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR,
             InputKind.USER_INPUT)
    if len(placeholders) != len(signature.input_specs) or any(
            s.kind not in kinds or not isinstance(s.arg, TensorArgument)
            for s in signature.input_specs) or any(
            s.kind != OutputKind.USER_OUTPUT or not isinstance(s.arg, TensorArgument)
            for s in signature.output_specs):
        raise ValueError("not a plain inference program")
    inputs = []
    for node, spec in zip(placeholders, signature.input_specs):
        if spec.kind == InputKind.USER_INPUT:
            value = node.meta["val"]
            inputs.append(torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                              device=value.device))
        else:
            # Detached: a weight that requires grad changes how torch decomposes a matmul
            # (folded to one mm through a copy of a strided input, not a bmm).
            inputs.append(state_tensor(program, spec.target))

    interpreter = torch.fx.Interpreter(program.graph_module)
    traced = trace_fx_graph(lambda *args: tuple(interpreter.run(*args)), tuple(inputs))
    # A decomposition that updates its own intermediate in place (adaptive pooling's
    # `as_strided_`) runs below the functionalization: torch's path functionalizes it.
    if any(isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
           for n in traced.graph.nodes if n.op == "call_function"):
        raise ValueError("an in-place op is left after functionalization")
    new_placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    # The exported program's names (the user's argument names, p_/b_/c_ for the state),
    # kept as torch.export sets them (FX's own renaming would make `input` `input_1`).
    taken = {n.name for n in traced.graph.nodes if n.op != "placeholder"}
    if taken & {n.name for n in placeholders}:
        raise ValueError("a placeholder's name is taken in the trace")
    namespace = traced.graph._graph_namespace
    for new, old in zip(new_placeholders, placeholders):
        new.name = new.target = old.name
        namespace._used_names.add(old.name)  # a node added later takes another name
    output = next(n for n in traced.graph.nodes if n.op == "output")
    results = list(output.args[0])
    users = len(signature.output_specs)
    if len(results) != users + len(traced.meta.get(UPDATES_META, [])):
        raise ValueError("outputs changed in the trace")
    mutated, mutation_specs = [], []
    mutation_of = {InputKind.BUFFER: OutputKind.BUFFER_MUTATION,
                   InputKind.PARAMETER: OutputKind.PARAMETER_MUTATION,
                   InputKind.USER_INPUT: OutputKind.USER_INPUT_MUTATION}
    for index, position in traced.meta.pop(UPDATES_META, []):
        spec = signature.input_specs[index]
        value = results[position]
        mutated.append(value)
        mutation_specs.append(OutputSpec(
            kind=mutation_of[spec.kind], arg=TensorArgument(name=value.name),
            target=spec.target if spec.kind != InputKind.USER_INPUT
            else new_placeholders[index].name))
    user_results = results[:users]
    output.args = (tuple(mutated + user_results),)
    traced.graph.lint()
    traced.recompile()
    new_signature = ExportGraphSignature(
        input_specs=[InputSpec(kind=s.kind, arg=TensorArgument(name=n.name), target=s.target,
                               persistent=s.persistent)
                     for s, n in zip(signature.input_specs, new_placeholders)],
        output_specs=mutation_specs + [
            OutputSpec(kind=OutputKind.USER_OUTPUT, arg=TensorArgument(name=r.name), target=None)
            for r in user_results])
    return program._update(traced, new_signature)


UPDATES_META = "fusec_input_updates"  # graph_module.meta: [(input, output)] to copy back


def input_updates_as_outputs(graph_module: Any) -> None:
    """Functionalized, an in-place update of a graph input (Dynamo passes a module's
    buffers as inputs: a step counter, a cache) ends the graph as `copy_(input, value)`,
    which torch-mlir cannot lower. Each such copy becomes one more output after the graph's
    own, recorded as (input position, output position) in `meta[UPDATES_META]` (and in the
    signature as "updates") for the caller to copy back."""
    import torch

    graph = graph_module.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    output = next(n for n in graph.nodes if n.op == "output")
    results = output.args[0]
    single = not isinstance(results, (tuple, list))
    results = [results] if single else list(results)
    updates = []
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten.copy_.default and \
                node.args[0] in placeholders and not node.users:
            updates.append((placeholders.index(node.args[0]), len(results)))
            results.append(node.args[1])
            graph.erase_node(node)
    if not updates:
        return
    output.args = (tuple(results),)
    graph_module.meta[UPDATES_META] = updates
    graph.lint()
    graph_module.recompile()


def _graph_signature(graph_module: Any) -> dict:
    """`torch_signature` for a traced graph: its placeholders' names and dtypes, its outputs'
    dtypes."""
    nodes = list(graph_module.graph.nodes)
    inputs = [{"name": n.name, "dtype": _node_dtype(n)} for n in nodes if n.op == "placeholder"]
    output = next(n for n in nodes if n.op == "output").args[0]
    results = output if isinstance(output, (tuple, list)) else [output]
    signature = {"inputs": inputs, "outputs": [{"dtype": _node_dtype(r)} for r in results]}
    if graph_module.meta.get(UPDATES_META):
        signature["updates"] = [list(u) for u in graph_module.meta[UPDATES_META]]
    return signature


def _node_dtype(node: Any) -> str | None:
    """The dtype of an FX node's value (`meta["val"]`) without "torch.", or None."""
    value = node.meta.get("val") if hasattr(node, "meta") else None
    return str(value.dtype).removeprefix("torch.") if hasattr(value, "dtype") else None


def _imported(text: str, signature: dict, weights: dict[str, Any]) -> Imported:
    """The module parsed into a fresh fusec context, its weights attached as bytes, and its
    fingerprint (the text, the weights' bytes, the signature)."""
    import hashlib

    from fusec.dialects import make_context

    digest = hashlib.sha256(text.encode())
    for name in sorted(weights):
        digest.update(name.encode() + b"\0")
        digest.update(weights[name])
    digest.update(json.dumps(signature, sort_keys=True).encode())
    if "dialect_resources" in text:
        text = inline_dense_resources(text)
    context = make_context()
    check_dialects(text, context)
    module_ir = parse_module(text, context)
    attach_weights(module_ir, weights)
    attach_state(module_ir, signature, weights)
    # What torch knows of the signature and MLIR does not (argument names, unsigned
    # integers: torch-mlir's i8 is signless) travels with the IR to the artifact.
    module_ir.operation.attributes[SIGNATURE_ATTR] = ir_string(json.dumps(signature), context)
    return Imported(module_ir, digest.hexdigest())


# The weights cross from torch-mlir's process to fusec's as raw bytes (one file and its index),
# not as the hex of a `dialect_resources` section: printing, scanning and parsing 2 bytes of
# text per byte of weight was most of a large model's import.
WEIGHTS_DATA, WEIGHTS_INDEX = "weights.bin", "weights.json"


def write_weights(folder: str, blobs: dict[str, Any]) -> None:
    """Write `blobs` (resource name -> numpy array) as one file of bytes and its index."""
    index, offset = {}, 0
    with open(os.path.join(folder, WEIGHTS_DATA), "wb") as f:
        for name, array in blobs.items():
            data = memoryview(array.reshape(-1).view("u1"))
            f.write(data)
            index[name] = [offset, len(data)]
            offset += len(data)
    with open(os.path.join(folder, WEIGHTS_INDEX), "w") as f:
        json.dump(index, f)


def read_weights(folder: str) -> dict[str, bytes]:
    """What `write_weights` wrote: resource name -> bytes ({} if nothing was written)."""
    path = os.path.join(folder, WEIGHTS_INDEX)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        index = json.load(f)
    with open(os.path.join(folder, WEIGHTS_DATA), "rb") as f:
        data = f.read()
    view = memoryview(data)
    return {name: view[offset:offset + size] for name, (offset, size) in index.items()}


def attach_weights(module: ir.Module, weights: dict[str, Any]) -> None:
    """Give every constant whose value is `dense_resource<name>` with `name` in `weights`
    the equivalent `dense<...>` (from the bytes, without text)."""
    if not weights:
        return
    import mlir.ir as ir
    import numpy as np


    def visit(op: Any) -> Any:
        # (A dense constant is not one of them: not printed, it may be large.)
        if op.name == "arith.constant" and \
                not isinstance(op.attributes["value"], ir.DenseElementsAttr):
            text = str(op.attributes["value"])
            if text.startswith("dense_resource<"):
                name = text[len("dense_resource<"):text.index(">")]
                if name in weights:
                    op.attributes["value"] = _dense_from_bytes(
                        weights[name], ir.RankedTensorType(op.results[0].type), op.context)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


def _dense_from_bytes(data: Any, shaped: Any, context: Any) -> Any:
    """A `dense<...>` attribute of type `shaped` (a ranked tensor type) holding the
    row-major `data` (bytes, one byte per i1)."""
    import mlir.ir as ir
    import numpy as np

    element = shaped.element_type
    width = ir.FloatType(element).width if isinstance(element, ir.FloatType) else \
        ir.IntegerType(element).width
    unsigned = {1: np.bool_, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
    array = np.frombuffer(data, dtype=unsigned[width])
    return ir.DenseElementsAttr.get(array, type=element, shape=list(shaped.shape),
                                    context=context)


def attach_state(module: ir.Module, signature: dict, weights: dict[str, Any]) -> None:
    """Record the buffers the model updates in place (`signature["state"]`, from
    `separate_mutations`) as the model function's `fusion.state`, the form
    --fusion-globals-to-state gives a global: argument, result and initial value (the
    bytes `weights[entry["init"]]`), kept by the artifact between calls."""
    import mlir.ir as ir

    from fusec.passes.grouping import model_functions
    from fusec.passes.linalg.globals_to_state import add_states, state_entry

    entries = signature.get("state")
    if not entries:
        return
    function = model_functions(module.operation)[0]
    arguments = function.regions[0].blocks[0].arguments
    add_states(function, [
        state_entry(entry["name"], entry["input"], entry["output"], _dense_from_bytes(
            weights[entry["init"]], ir.RankedTensorType(arguments[entry["input"]].type),
            module.context))
        for entry in entries])


SIGNATURE_ATTR = attributes.TORCH_SIGNATURE


def read_torch_signature(module: ir.Module) -> dict:
    """The `torch_signature` that `import_torch` recorded on the module, or {} for IR that
    did not come from torch."""
    attrs = module.operation.attributes
    if SIGNATURE_ATTR not in attrs:
        return {}
    import mlir.ir as mlir_ir

    return json.loads(mlir_ir.StringAttr(attrs[SIGNATURE_ATTR]).value)


def ir_string(text: str, context: Any) -> Any:
    import mlir.ir as mlir_ir

    return mlir_ir.StringAttr.get(text, context=context)


def torch_signature(program: Any) -> dict:
    """The user inputs' names and dtypes and the user outputs' dtypes of an exported
    program, in the order of the imported function's arguments and results."""
    from torch.export.graph_signature import InputKind, OutputKind

    nodes = {n.name: n for n in program.graph.nodes}

    def dtype(name: str) -> str | None:
        return _node_dtype(nodes.get(name))

    signature = program.graph_signature
    arguments = [spec for spec in signature.input_specs if spec.kind == InputKind.USER_INPUT]
    inputs = [{"name": spec.arg.name, "dtype": dtype(spec.arg.name)}
              for spec in arguments if spec.target is None]
    outputs = [{"dtype": dtype(spec.arg.name) if hasattr(spec.arg, "name") else None}
               for spec in signature.output_specs if spec.kind == OutputKind.USER_OUTPUT]
    result = {"inputs": inputs, "outputs": outputs}
    # Buffers forward updates in place (`separate_mutations`): an argument and a result each.
    updated = [spec.target for spec in signature.output_specs
               if spec.kind == OutputKind.BUFFER_MUTATION]
    if updated:
        result["state"] = [
            {"name": target,
             "input": next(i for i, spec in enumerate(arguments) if spec.target == target),
             "output": next(i for i, spec in enumerate(signature.output_specs)
                            if spec.kind == OutputKind.BUFFER_MUTATION and spec.target == target)}
            for target in updated]
    # Inputs forward updates in place: outputs after the user's, copied back by the runtime.
    updates = [list(u) for u in program.graph_module.meta.get(UPDATES_META, [])]
    if updates:
        result["updates"] = updates
    returned = len(outputs) - len(updates)
    # A model returning a flat dict of tensors: the keys name the outputs, and the runtime
    # returns a dict again.
    spec = getattr(getattr(program, "call_spec", None), "out_spec", None)
    if spec is not None and spec.type is dict and len(spec.context) == returned and \
            spec.num_leaves == returned and all(isinstance(k, str) for k in spec.context):
        for entry, key in zip(outputs, spec.context):
            entry["name"] = key
        result["outputs_as"] = "dict"
    if spec is not None and spec.num_leaves == returned:
        tree = output_tree(spec)
        # One tensor, or a flat tuple of two or more, is what the runtime returns anyway.
        if tree != (0 if returned == 1 else {"tuple": list(range(returned))}):
            result["outputs_tree"] = tree
    return result


def output_tree(spec: Any) -> Any:
    """The structure of a model's outputs (a pytree `TreeSpec`) as JSON the runtime rebuilds
    without torch: an output's position for a leaf, else {"tuple": [...]}, {"list": [...]}
    or {"dict": [[key, ...], ...]} (a dict, or a dict-like such as HF's ModelOutput; a
    namedtuple comes back as a tuple)."""
    leaves = iter(range(spec.num_leaves))

    def walk(node: Any) -> Any:
        if node.is_leaf():
            return next(leaves)
        children = [walk(node.child(i)) for i in range(node.num_children)]
        keys = node.context
        if isinstance(node.type, type) and issubclass(node.type, dict) and \
                isinstance(keys, (list, tuple)) and len(keys) == len(children) and \
                all(_json_key(k) is not None for k in keys):
            return {"dict": [[_json_key(k), c] for k, c in zip(keys, children)]}
        return {"list" if node.type is list else "tuple": children}

    return walk(spec)


def _json_key(key: Any) -> Any:
    """A dict key as JSON the runtime turns back into it (`runtime._key`): a str, int,
    float, bool or None as itself, a tuple of those as {"tuple": [...]}; None for a key
    that cannot be written (the dict then comes back as a tuple)."""
    if key is None or isinstance(key, (str, int, float, bool)):
        return {"none": None} if key is None else key
    if isinstance(key, tuple):
        parts = [_json_key(k) for k in key]
        return None if any(p is None for p in parts) else {"tuple": parts}
    return None


def _torch_mlir_generic_text(
    module: torch.nn.Module, example_inputs: tuple[Any, ...], func_name: str,
    weights_dir: str | None = None,
) -> tuple[str, dict]:
    """Run torch-mlir and print its module in generic form with torch-mlir's own MLIR; also
    the program's `torch_signature`. With `weights_dir`, the weights are written there
    (`write_weights`) and left out of the text's resource section."""
    try:
        import torch

        # torch-mlir's native libraries are loaded here, in this process, before the import
        # runs in a child: loaded first in a child of a process that already holds fusec's
        # LLVM (the ExecutionEngine's), their command-line options clash and LLVM aborts.
        from torch_mlir import fx  # noqa: F401
        from torch_mlir.extras.fx_importer import FxImporter  # noqa: F401
    except ImportError as error:
        raise FrontendError(
            f"importing a PyTorch model needs torch and torch-mlir ({error}); "
            "install them with `pip install fusec[torch]`"
        ) from error
    if not isinstance(module, torch.nn.Module):
        raise FrontendError(f"expected a torch.nn.Module, got {type(module).__name__}")
    for index, value in enumerate(example_inputs):
        if not isinstance(value, torch.Tensor):
            raise FrontendError(
                f"example input {index} is a {type(value).__name__}, not a torch.Tensor"
            )
    _note_training(module)
    # Exported in eval mode; the user's module is given back in the modes it came in (a
    # training loop that compiles a copy for evaluation must not lose dropout after it).
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with warnings.catch_warnings(), _torch_logs_quiet():
            # torch.export's pytree code warns about its own deprecated API on every export.
            warnings.simplefilter("ignore", FutureWarning)
            program = export_program(module, example_inputs)
    except FrontendError:
        raise
    except Exception as error:  # torch.export raises many types (Unsupported, UserError, ...)
        raise _export_failure(error) from error
    finally:
        for m, training in modes:
            m.training = training
    for note in program.graph_module.meta.get(NOTES_META, []):
        print(f"fusec: note: {type(module).__name__}: {note}", file=sys.stderr)
    signature = torch_signature(program)
    for entry, value in zip(signature.get("state", []), state_values(program)):
        entry["init"] = value.detach().cpu().contiguous()  # bytes in import_torch_module
    # torch-mlir's C++ can abort, crash or grow without bound on some graphs, killing the
    # user's process: it runs in a child, watched (compiler/isolate.py).
    from fusec.compiler.isolate import IsolatedFailure, run_isolated

    try:
        text = run_isolated(lambda: _lower_with_torch_mlir(program, func_name, weights_dir),
                            "torch-mlir's import")
    except IsolatedFailure as failure:
        where = _model_source(module)
        raise FrontendError(f"{where + ': ' if where else ''}{failure} (importing "
                            f"{type(module).__name__}; fusec cannot compile this model as "
                            "written)") from None
    return text, signature


_TRAINING_NOTED: set = set()


def _note_training(module) -> None:
    """Dropout and BatchNorm's batch statistics are training behaviour; fusec compiles
    inference: a note on stderr when the module or any submodule is in training mode (a
    BatchNorm left in train() under an eval() model too: probe 9 found it compiled in eval
    mode without a word). Said once per module object and set of modules in training mode,
    so that a loop compiling the same model each step is not flooded."""
    training = [repr(name) if name else type(module).__name__
                for name, m in module.named_modules()
                if m.training]
    if not training:
        return
    key = (id(module), tuple(training))
    if key in _TRAINING_NOTED:
        return
    _TRAINING_NOTED.add(key)
    if module.training:
        what = f"{type(module).__name__} is in training mode"
    else:
        shown = ", ".join(training[:3]) + (f" and {len(training) - 3} more"
                                            if len(training) > 3 else "")
        what = (f"{type(module).__name__} is in eval mode but {len(training)} of its "
                f"submodules {'is' if len(training) == 1 else 'are'} in training mode "
                f"({shown})")
    print(f"fusec: note: {what}; compiling it in eval mode (model.eval())", file=sys.stderr)


_EXPORTING = threading.RLock()


class _torch_logs_quiet:
    """torch's loggers at ERROR while exporting: a failed guard logs warnings and prints
    the FX graph (twice) before torch.export raises; the exception says what matters.

    One thread at a time (a process-wide lock): the redirection of sys.stdout and
    sys.stderr is process-wide, and two threads' interleaved enter and exit left them
    pointing at a dead buffer (every later print lost: a probe's find); torch.export itself
    fails when two threads trace at once."""

    def __enter__(self) -> None:
        import contextlib
        import io
        import logging

        _EXPORTING.acquire()

        # torch prints the graph of a failed guard with print(): kept, not shown.
        self._redirects = contextlib.ExitStack()
        self._redirects.enter_context(contextlib.redirect_stdout(io.StringIO()))
        self._redirects.enter_context(contextlib.redirect_stderr(io.StringIO()))
        self._levels = {}
        for name in ("torch", "torch.fx.experimental.symbolic_shapes", "torch.export",
                     "torch._dynamo", "torch._subclasses.fake_tensor"):
            logger = logging.getLogger(name)
            self._levels[name] = logger.level
            logger.setLevel(logging.CRITICAL)

    def __exit__(self, *exc: object) -> None:
        import logging

        try:
            for name, level in self._levels.items():
                logging.getLogger(name).setLevel(level)
            self._redirects.close()
        finally:
            _EXPORTING.release()


def _is_ours(path: str) -> bool:
    """Whether `path` is torch's, torch-mlir's or fusec's own code (not a library the model
    comes from): by the packages' directories, not by a name in the path (a clone named
    `fusec` holds its virtual environment, transformers included)."""
    import torch

    roots = [os.path.dirname(torch.__file__)]
    try:
        import torch_mlir  # a namespace package: no __file__

        roots += [os.path.abspath(p) for p in getattr(torch_mlir, "__path__", [])]
    except ImportError:
        pass
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # fusec's package
    if re.search(r"[/\\](site|dist)-packages[/\\](torch|torch_mlir|fusec)[/\\]", path):
        return True  # installed: the package's directory comes right after site-packages
    path = os.path.abspath(path)
    if any(path.startswith(root + os.sep) for root in roots):
        return True
    inside = path.startswith(here + os.sep)
    return inside and not any(part in ("site-packages", "dist-packages")
                              for part in path[len(here):].split(os.sep))


def _export_failure(error: Exception) -> FrontendError:
    """torch.export's failure as one line at the user's source line. Control flow on a
    tensor's value (`if x.sum() > 0:`) gets the reason and the way out."""
    from fusec.compiler.diagnostics import python_frames

    text = str(error)
    frames, user = python_frames(text)
    # The user's line; in a model from a library (a HuggingFace block), the library's line
    # that torch stopped at (not torch's own frames).
    stdlib = sysconfig.get_paths()["stdlib"]
    outside_torch = [f for f in frames if not f[0].startswith(stdlib) and not _is_ours(f[0])]
    at = user[-1] if user else outside_torch[-1] if outside_torch else None
    where = f"{at[0]}:{at[1]}: " if at else ""
    if "data-dependent" in text or type(error).__name__ == "GuardOnDataDependentSymNode":
        return FrontendError(
            f"{where}control flow depends on a tensor's value (torch.export cannot trace a "
            "Python `if` or `while` on tensor data, nor `.item()` used as a Python number); "
            "write it with torch.where or torch.cond, or make the condition a Python value")
    first = text.strip().splitlines()[0] if text.strip() else ""
    return FrontendError(f"{where}torch.export failed: {type(error).__name__}: {first}")


def _model_source(module: Any) -> str:
    """`file:line` of the model's `forward`, or ''."""
    import inspect

    try:
        forward = type(module).forward
        return f"{inspect.getsourcefile(forward)}:{inspect.getsourcelines(forward)[1]}"
    except (TypeError, OSError, AttributeError):
        return ""


def _lower_with_torch_mlir(program: Any, func_name: str, weights_dir: str | None = None,
                           graph_module: Any = None) -> str:
    """torch-mlir's import and lowering to linalg-on-tensors of an exported program (or of
    a traced, functional `graph_module`), printed in generic form with torch-mlir's own
    MLIR; with `weights_dir`, the weights' bytes go there instead of into the text."""
    from torch_mlir import fx
    from torch_mlir.compiler_utils import TorchMlirCompilerError
    from torch_mlir.extras.fx_importer import FxImporter

    context, errors, handler = _torch_mlir_context()
    hooks = _literal_hooks()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            if graph_module is not None:
                importer = FxImporter(context=context, hooks=hooks)
                importer.import_graph_module(graph_module, func_name=func_name)
                imported = importer.module
            else:
                # The decompositions ran in export_program: an empty table skips torch-mlir's.
                imported = fx.export_and_import(
                    program,
                    func_name=func_name,
                    decomposition_table={},
                    fx_importer=FxImporter(context=context, hooks=hooks),
                )
        _lower_to_linalg(imported)
        if weights_dir is not None and hooks.blobs:
            # Every resource blob left is one of the weights (else: printed as they are).
            smallest = min(a.nbytes for a in hooks.blobs.values())
            text = imported.operation.get_asm(print_generic_op_form=True,
                                              enable_debug_info=True,
                                              large_resource_limit=smallest - 1)
            if set(_RESOURCE_NAME.findall(text)) <= set(hooks.blobs):
                write_weights(weights_dir, hooks.blobs)
                return text
        return imported.operation.get_asm(print_generic_op_form=True, enable_debug_info=True)
    except TorchMlirCompilerError as error:
        raise FrontendError(_describe_torch_mlir_failure(errors, str(error))) from error
    except Exception as error:
        raise FrontendError(
            f"torch-mlir's importer failed: {type(error).__name__}: {error}"
        ) from error
    finally:
        handler.detach()


# torch-mlir's own lowering of an imported program (torch_mlir.fx's, for the
# linalg-on-tensors output type), run here: its wrapper prints the whole module, weights
# included, for a reproducer before each pipeline (10 s of GPT-2-small's import).
_TORCH_MLIR_PIPELINES = (
    ("Lowering TorchFX IR -> Torch Backend IR",
     "builtin.module(func.func(torch-match-quantized-custom-ops), "
     "torchdynamo-export-to-torch-backend-pipeline{ extra-library=})"),
    ("Lowering Torch Backend IR -> Linalg-on-Tensors Backend IR",
     "builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline"
     "{allow-non-finites=True})"),
)


def _lower_to_linalg(module: Any) -> None:
    """torch-mlir's two pipelines, torch dialect -> linalg-on-tensors, in place; a failure
    raises TorchMlirCompilerError as torch-mlir's wrapper does (the diagnostics are collected
    by the context's handler)."""
    from torch_mlir.compiler_utils import TorchMlirCompilerError
    from torch_mlir.passmanager import PassManager

    for description, pipeline in _TORCH_MLIR_PIPELINES:
        with module.context as context:
            context.emit_error_diagnostics = True
            try:
                PassManager.parse(pipeline).run(module.operation)
            except Exception as error:  # noqa: BLE001 - torch-mlir's MLIRError
                raise TorchMlirCompilerError(
                    f"{description} failed with the following diagnostics:\n{error}") from None


def _literal_hooks() -> Any:
    """torch-mlir's importer hooks with a fast path for weights (frozen parameters and
    buffers, lifted tensor constants).

    torch-mlir's default literal import converts a tensor to a nested Python list and back
    to numpy (`np.array(tensor.tolist())`, written for fake tensors): 15 of the 19 s of
    ResNet-18's import here. A real tensor's bytes are handed over as they are instead, as a
    `DenseResourceElementsAttr` blob of a name of its own (uniqued per tensor as torch-mlir
    does), kept in `blobs` so that they can cross to fusec's process as bytes; a fake tensor,
    a one-element tensor (a splat) or a dtype without a numpy view goes the default way.
    """
    import numpy as np
    import torch
    from torch_mlir.extras.fx_importer import FxImporterHooks
    from torch_mlir.ir import DenseResourceElementsAttr, Operation

    views = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
             torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16,
             torch.int8: np.int8, torch.uint8: np.uint8}
    try:
        import ml_dtypes

        views[torch.bfloat16] = ml_dtypes.bfloat16
    except ImportError:
        pass

    class Hooks(FxImporterHooks):
        def __init__(self) -> None:
            self.blobs: dict[str, Any] = {}  # resource name -> the weight's bytes (numpy)

        def resolve_literal(self, gni: Any, literal: Any, info: Any) -> Any:
            if not isinstance(literal, torch.Tensor) or literal.dtype not in views or \
                    literal.numel() <= 1 or isinstance(literal, torch._subclasses.FakeTensor):
                return None
            cc = gni._cc
            mapping = cc._py_attr_tracker.track(literal)
            if mapping.is_empty:
                tensor = literal.detach().cpu().contiguous()
                if tensor.dtype == torch.bfloat16:
                    array = tensor.view(torch.int16).numpy().view(views[torch.bfloat16])
                else:
                    array = tensor.numpy()
                # A name of its own per weight: MLIR renames a clash, which would break
                # the name -> bytes map.
                name = f"fusec_weight_{len(self.blobs)}"
                from torch_mlir.extras.fx_importer import create_mlir_tensor_type

                mapping.value = DenseResourceElementsAttr.get_from_buffer(
                    array, name, create_mlir_tensor_type(tensor))
                self.blobs[name] = array
            return Operation.create(name="torch.vtensor.literal",
                                    results=[cc.tensor_to_vtensor_type(literal)],
                                    attributes={"value": mapping.value}).result

    return Hooks()


def export_program(module: torch.nn.Module, example_inputs: tuple[Any, ...]) -> Any:
    """`torch.export` the module, checked and normalised for torch-mlir, decomposed.

    Before torch-mlir sees the graph: a shape that depends on the data (boolean-mask
    indexing, `nonzero`, `masked_select`) is refused, located at the user's line (torch-mlir
    would grow without bound trying); inference BatchNorms are folded into the layer before
    them or into a multiply and an add (`fusec.compiler.batch_norm`); buffers registered
    with `persistent=False` (RoPE's tables, BERT's `position_ids`), which torch.export keeps
    among its constants, are handed to torch-mlir's importer with the others (it looks for
    buffers in the state dict only);
    after the decompositions, uint8 values are read as unsigned (`fusec.compiler.unsigned`:
    torch-mlir reads them as signed) and a negative `dim` argument is made positive
    (torch-mlir's scatter lowering crashes the process on `dim=-1`).
    """
    import torch

    from fusec.compiler.batch_norm import fold_batch_norms
    from fusec.compiler.unsigned import read_uint8_unsigned

    program = torch.export.export(module, tuple(example_inputs), strict=False)
    select_by_tensor_index(program.graph)
    refuse_data_dependent_shapes(program)
    refuse_none_outputs(program, type(module).__name__)
    fold_batch_norms(program)
    program = decompose_program(program)
    read_uint8_unsigned(program, _user_frame)
    normalise_negative_dims(program)
    _keep_non_persistent_buffers(program)
    view_state_in_lists(program)
    separate_mutations(program)
    return program


def select_by_tensor_index(graph: Any) -> None:
    """`x[i]` with a 0-d integer tensor `i`: torch.export reads i as a number
    (`aten.item`, an unbacked size) and selects with it, which fusec cannot lower (a scalar
    read from data used as a slice offset: refused with an internal error). It becomes a
    gather of one row, `index_select(x, d, i)` squeezed, with i wrapped as torch wraps a
    negative index; an index out of range is then reported as any gather's is."""
    import torch

    aten = torch.ops.aten
    reads = (aten.item.default, aten._local_scalar_dense.default)
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.select.int:
            continue
        x, dim, index = node.args
        source = index.args[0] if isinstance(index, torch.fx.Node) and \
            index.op == "call_function" and index.target in reads else None
        x_val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        i_val = source.meta.get("val") if source is not None else None
        if not isinstance(x_val, torch.Tensor) or not isinstance(i_val, torch.Tensor) or \
                i_val.dim() != 0 or i_val.dtype.is_floating_point or \
                not isinstance(x_val.shape[dim], int):
            continue
        size = x_val.shape[dim]
        fake = x_val.fake_mode
        with graph.inserting_before(node), fake:
            negative = graph.call_function(aten.lt.Scalar, (source, 0))
            wrapped = graph.call_function(aten.add.Scalar, (source, size))
            chosen = graph.call_function(aten.where.self, (negative, wrapped, source))
            row = graph.call_function(aten.reshape.default, (chosen, [1]))
            row64 = graph.call_function(aten._to_copy.default, (row,), {"dtype": torch.int64})
            gathered = graph.call_function(aten.index_select.default, (x, dim, row64))
            result = graph.call_function(aten.squeeze.dim, (gathered, dim))
            for new in (negative, wrapped, chosen, row, row64, gathered, result):
                args = torch.fx.node.map_arg(new.args, lambda n: n.meta["val"])
                kwargs = torch.fx.node.map_arg(new.kwargs, lambda n: n.meta["val"])
                new.meta["val"] = new.target(*args, **kwargs)
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        if not index.users:
            graph.erase_node(index)
    graph.lint()


def _user_frame(node: Any) -> str:
    """`file:line` of the user's code that made an FX node (the last frame outside installed
    packages in its stack trace), or '' when it has none."""
    from fusec.compiler.diagnostics import python_frames

    frames, user = python_frames(node.meta.get("stack_trace") or "")
    name, line = (user or frames or [("", "")])[-1]
    return f"{name}:{line}" if name else ""


def refuse_none_outputs(program: Any, model: str) -> None:
    """A FrontendError naming an output that is None or another constant that is not a
    number (a string): torch-mlir refused it as `!torch.none` / `!torch.str` in a function
    type, which named no output. (A number is returned as it is.)"""
    import torch

    outputs = [spec for spec in program.graph_signature.output_specs
               if spec.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT]
    for k, spec in enumerate(outputs):
        if not isinstance(spec.arg, torch.export.graph_signature.ConstantArgument):
            continue
        value = spec.arg.value
        if value is None or not isinstance(value, (bool, int, float)):
            # A string (a tag, a mode name) went to torch-mlir as `!torch.str`, refused
            # with a legalization dump.
            what = "None" if value is None else f"a {type(value).__name__} ({value!r:.40})"
            raise FrontendError(
                f"{model}'s output {k} is {what}; fusec compiles models whose outputs are "
                "tensors or numbers (leave it out of the outputs)")


def refuse_data_dependent_shapes(program: Any) -> None:
    """A FrontendError, located, for the first node with a result whose shape depends on the
    values of a tensor (an unbacked symbolic size): fusec compiles static shapes."""
    import torch

    for node in program.graph.nodes:
        value = node.meta.get("val")
        results = value if isinstance(value, (tuple, list)) else [value]
        dynamic = [r for r in results if isinstance(r, torch.Tensor)
                   and any(not isinstance(d, int) for d in r.shape)]
        if not dynamic:
            continue
        where = _user_frame(node)
        shape = "x".join(str(d) for d in dynamic[0].shape)
        op = getattr(node.target, "__name__", str(node.target))
        raise FrontendError(
            f"{where + ': ' if where else ''}'{op}' has a result whose shape ({shape}) "
            "depends on the values of its input (boolean-mask indexing, nonzero, "
            "masked_select, unique); fusec compiles static shapes only: use "
            "torch.where(mask, x, 0) or a fixed-size form instead")


def _keep_non_persistent_buffers(program: Any) -> None:
    """Put the buffers torch.export kept among its constants (`persistent=False`) into the
    state dict, where torch-mlir's importer looks for every buffer."""
    signature = program.graph_signature
    for name in getattr(signature, "non_persistent_buffers", []) or []:
        if name not in program.state_dict and name in program.constants:
            program.state_dict[name] = program.constants[name]


NOTES_META = "fusec_notes"  # graph_module.meta: what the export changed, said on stderr


def separate_mutations(program: Any) -> None:
    """Make what `forward` updates in place explicit in the exported program.

    torch.export returns each in-place update of a buffer, a parameter or a user input as
    one more output, before the user's outputs; imported as they are, a caller expecting
    one tensor got a tuple whose first element was the updated buffer. Now:
    - a buffer updated in place (a step counter, a cache) is model state, as torch keeps
      it: its placeholder becomes a function argument after the user's inputs (its input
      spec a USER_INPUT with the buffer's name as target, which `torch_signature` lists
      under "state") and its new value a result after the user's outputs; the artifact
      keeps it between calls, starting from its value at compile time;
    - a user input updated in place (a KV cache the caller passes, `x.add_(1)`) is one more
      output after the user's, recorded in `meta[UPDATES_META]` as (input, output)
      positions: the runtime writes it back into the caller's array, as eager would;
    - a parameter updated in place (RWKV rescales its weights once, on the first call in
      eval mode) is computed from its value at compile time on every call, the update not
      kept (said on stderr).
    """
    from torch.export.graph_signature import InputKind, InputSpec, OutputKind, OutputSpec

    signature = program.graph_signature
    output = next(n for n in program.graph.nodes if n.op == "output")
    values = list(output.args[0])
    if len(values) != len(signature.output_specs):
        return
    kept, updated, state, dropped = [], [], [], []
    for value, spec in zip(values, signature.output_specs):
        if spec.kind == OutputKind.BUFFER_MUTATION:
            state.append((value, spec))
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            updated.append((value, spec))
        elif spec.kind == OutputKind.PARAMETER_MUTATION:
            dropped.append(spec)
        else:
            kept.append((value, spec))
    if not state and not dropped and not updated:
        return
    # Said by the caller (stderr is not shown while torch.export runs).
    notes = program.graph_module.meta.setdefault(NOTES_META, [])
    for spec in dropped:
        notes.append(f"forward updates parameter '{spec.target}' in place; every call of the "
                     "compiled model computes from its value at compile time and the update "
                     "is not kept")
    user_inputs = [s.arg.name for s in signature.input_specs if s.kind == InputKind.USER_INPUT]
    program.graph_module.meta[UPDATES_META] = [
        (user_inputs.index(spec.target), len(kept) + k) for k, (_, spec) in enumerate(updated)]
    # Plain outputs to torch-mlir (which would import an input mutation as an overwrite of
    # a non-value tensor argument).
    kept += [(value, OutputSpec(kind=OutputKind.USER_OUTPUT, arg=spec.arg, target=None))
             for value, spec in updated]
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    inputs = list(signature.input_specs)
    moved = []
    for _, spec in state:
        index = next(i for i, s in enumerate(inputs)
                     if s.kind == InputKind.BUFFER and s.target == spec.target)
        buffer = inputs.pop(index)
        moved.append(InputSpec(kind=InputKind.USER_INPUT, arg=buffer.arg, target=buffer.target,
                               persistent=None))
        notes.append(f"forward updates buffer '{spec.target}' in place; the compiled model "
                     "keeps it between calls, starting from its value at compile time")
    last = [n for n in program.graph.nodes if n.op == "placeholder"][-1]
    for spec in reversed(moved):
        last.append(placeholders[spec.arg.name])
    signature.input_specs[:] = inputs + moved
    signature.output_specs[:] = [s for _, s in kept] + [s for _, s in state]
    output.args = (tuple(v for v, _ in kept) + tuple(v for v, _ in state),)
    program.graph.lint()
    program.graph_module.recompile()


def state_values(program: Any) -> list[Any]:
    """The values at compile time of the buffers `separate_mutations` made state, in the
    order of their arguments."""
    from torch.export.graph_signature import InputKind

    values = []
    for spec in program.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT and spec.target is not None:
            values.append(program.state_dict.get(spec.target, program.constants.get(spec.target)))
    return values


def view_state_in_lists(program: Any) -> None:
    """Give each weight, buffer or lifted constant that an op takes inside a list (the
    indices of `aten.index.Tensor`: Swin's and LeViT's relative-position tables indexed by
    a buffer) a view of itself, and put the view in the list.

    torch-mlir's importer of an exported program replaces those placeholders with their
    tensors, which it can import as an op's argument but not as a list element ("Heterogeneous
    lists are not supported"); a view of the same shape is a node, imports as a
    literal's reshape, and folds away.
    """
    import torch

    signature = program.graph_signature
    state = (set(signature.inputs_to_buffers) | set(signature.inputs_to_parameters)
             | set(getattr(signature, "inputs_to_lifted_tensor_constants", {}) or {}))
    graph = program.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue

        def replace(argument: Any, node: Any = node) -> Any:
            nonlocal changed
            if not isinstance(argument, (list, tuple)):
                return argument
            items = []
            for item in argument:
                if isinstance(item, torch.fx.Node) and item.op == "placeholder" and \
                        item.name in state:
                    value = item.meta.get("val")
                    with graph.inserting_before(node):
                        item_view = graph.call_function(torch.ops.aten.view.default,
                                                        (item, list(value.shape)))
                    item_view.meta = dict(item.meta)
                    changed = True
                    item = item_view
                items.append(item)
            return type(argument)(items)

        node.args = tuple(replace(a) for a in node.args)
        node.kwargs = {k: replace(v) for k, v in node.kwargs.items()}
    if changed:
        program.graph_module.recompile()


# Ops whose `dim` names a dim of their first tensor argument (so -1 is rank - 1; not
# unsqueeze's, whose range is one longer) and that torch-mlir lowers to TMTensor loops.
_DIM_OF_SELF_OPS = frozenset({
    "scatter", "scatter_add", "scatter_reduce", "gather", "index_select", "index_add",
    "index_copy", "index_fill", "index_reduce", "cumsum", "cumprod", "sort", "argsort", "topk",
})


def normalise_negative_dims(program: Any) -> None:
    """Rewrite the negative `dim` argument (an int) of the ops in `_DIM_OF_SELF_OPS` as
    `dim + rank`, the rank of their first tensor argument."""
    import torch

    for node in program.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None:
            continue
        if schema.name.split("::")[-1] not in _DIM_OF_SELF_OPS:
            continue
        args = list(node.args)
        kwargs = dict(node.kwargs)
        first = next((a for a in args if isinstance(a, torch.fx.Node)), None)
        value = first.meta.get("val") if first is not None else None
        if not isinstance(value, torch.Tensor):
            continue
        rank = max(value.dim(), 1)
        changed = False
        for position, argument in enumerate(schema.arguments):
            if argument.name != "dim" or str(argument.type) != "int":
                continue
            if position < len(args) and isinstance(args[position], int) and args[position] < 0:
                args[position] += rank
                changed = True
            elif isinstance(kwargs.get("dim"), int) and kwargs["dim"] < 0:
                kwargs["dim"] += rank
                changed = True
        if changed:
            node.args, node.kwargs = tuple(args), kwargs
    program.graph_module.recompile()


def _torch_mlir_context() -> tuple[Any, list[str], Any]:
    """A torch-mlir context whose error diagnostics are collected instead of printed.

    torch-mlir's C++ diagnostics go straight to stderr, not into its exception; collecting them
    lets the FrontendError name the op that failed.
    """
    from torch_mlir import ir as torch_mlir_ir
    from torch_mlir.dialects import torch as torch_dialect

    context = torch_mlir_ir.Context()
    torch_dialect.register_dialect(context)
    errors: list[str] = []

    def collect(diagnostic: Any) -> bool:
        if diagnostic.severity != torch_mlir_ir.DiagnosticSeverity.ERROR:
            return False
        notes = "".join(f"\n  note: {note.message}" for note in diagnostic.notes)
        errors.append(f"{diagnostic.location}: error: {diagnostic.message}{notes}")
        return True

    return context, errors, context.attach_diagnostic_handler(collect)


# Patterns torch-mlir's diagnostics use to name the op it could not lower, most specific first.
_UNSUPPORTED_OP_PATTERNS = (
    re.compile(r'"torch\.operator"[^\n]*name = "torch\.([\w.]+)"'),
    re.compile(r"failed to legalize operation '(torch\.aten\.[\w.]+)'"),
    re.compile(r"'(torch\.aten\.[\w.]+)' op"),
    re.compile(r"failed to legalize operation '([\w.]+)'"),
)


def _describe_torch_mlir_failure(errors: list[str], message: str) -> str:
    """The FrontendError message for a failed torch-mlir lowering: the op, then the diagnostics."""
    diagnostics = "\n".join(errors)
    for pattern in _UNSUPPORTED_OP_PATTERNS:
        match = pattern.search(diagnostics)
        if match:
            op = match.group(1).removeprefix("torch.")
            return f"torch-mlir cannot lower `{op}` to linalg-on-tensors:\n{diagnostics}"
    summary = message.strip().splitlines()[0] if message.strip() else "no message"
    return f"torch-mlir failed ({summary}):\n{diagnostics or message}"


def check_dialects(text: str, context: ir.Context | None = None) -> None:
    """Raise a FrontendError naming the ops of `text` that fusec's MLIR does not know.

    torch-mlir's linalg-on-tensors output can contain its own TMTensor ops (`tm_tensor.sort`,
    `tm_tensor.scan`, `tm_tensor.attention`, ...) for aten ops with no linalg lowering; those
    that `--fusion-lower-tm-tensor` lowers are accepted (they parse as unregistered ops).
    """
    from fusec.dialects import make_context
    from fusec.passes.fusion.lower_tm_tensor import LOWERED_OPS, YIELD

    context = context or make_context()
    names = sorted(set(_GENERIC_OP_NAME.findall(text)))
    lowered = [name for name in names if name in LOWERED_OPS]
    unknown = [name for name in names if not context.is_registered_operation(name)
               and name not in LOWERED_OPS and not (name == YIELD and lowered)]
    # A region terminator (tm_tensor.yield) says nothing the op that holds it doesn't.
    unknown = [name for name in unknown if not name.endswith(".yield")] or unknown
    if unknown:
        raise FrontendError(
            "torch-mlir lowered part of the model to ops outside linalg-on-tensors, which fusec "
            "cannot compile: " + ", ".join(f"`{name}`" for name in unknown)
        )


_GENERIC_OP_NAME = re.compile(r'^\s*(?:%[^=]*=\s*)?"([\w$]+\.[\w.$]+)"\(', re.MULTILINE)


# --------------------------------------------------------------------------------------------
# Normalising torch-mlir's text for MLIR 22

_RESOURCE_SECTION = re.compile(r"\{-#\s*dialect_resources\s*:.*?#-\}", re.DOTALL)
_RESOURCE_ENTRY = re.compile(r'([\w.$-]+)\s*:\s*"0x([0-9A-Fa-f]*)"')
_RESOURCE_NAME = re.compile(r"dense_resource<([\w.$-]+)>")
_RESOURCE_USE = re.compile(r"dense_resource<([\w.$-]+)>(\s*:\s*tensor<([^>]*)>)")


def inline_dense_resources(text: str) -> str:
    """Replace every `dense_resource<name> : tensor<...>` by the equivalent `dense<...>`.

    The blob section `{-# dialect_resources: { builtin: { name: "0x<align><bytes>" } } #-}` is
    removed. A blob starts with its 4-byte alignment, then the raw little-endian elements,
    which is exactly `dense<"0x...">`'s hex form; i1 blobs (one byte per element) are written
    as a list of booleans instead, since hex i1 data is read bit-packed.
    """
    section = _RESOURCE_SECTION.search(text)
    if section is None:
        if "dense_resource<" in text:
            raise FrontendError("dense_resource attribute without a dialect_resources section")
        return text
    blobs = dict(_RESOURCE_ENTRY.findall(section.group(0)))
    body = text[: section.start()] + text[section.end() :]

    def replace(match: re.Match[str]) -> str:
        name, type_suffix, shape_and_type = match.group(1), match.group(2), match.group(3)
        if name not in blobs:
            raise FrontendError(f"dense_resource<{name}> has no blob in the resource section")
        data = blobs[name][8:]  # drop the 4-byte alignment header
        element_type = shape_and_type.split("x")[-1]
        if element_type == "i1":
            bits = bytes.fromhex(data)
            literal = ", ".join("true" if b else "false" for b in bits)
            return f"dense<[{literal}]>{type_suffix}"
        return f'dense<"0x{data}">{type_suffix}'

    return _RESOURCE_USE.sub(replace, body)


def parse_module(text: str, context: ir.Context | None = None) -> ir.Module:
    """Parse MLIR text with fusec's MLIR; a parse error becomes a FrontendError with diagnostics."""
    import mlir.ir as ir
    from fusec.dialects import make_context

    context = context or make_context()
    # torch-mlir's TMTensor ops are unregistered in fusec's MLIR (check_dialects has refused
    # those fusec cannot lower).
    context.allow_unregistered_dialects = True
    with context:
        try:
            return ir.Module.parse(text)
        except ir.MLIRError as error:
            message = f"fusec's MLIR cannot parse the imported module: {error}"
            raise FrontendError(message) from error


def to_generic(text: str, context: ir.Context | None = None, locations: bool = False) -> str:
    """Re-print MLIR text in generic form with fusec's MLIR (after checking that it parses)."""
    module = parse_module(text, context)
    return module.operation.get_asm(print_generic_op_form=True, enable_debug_info=locations)


# --------------------------------------------------------------------------------------------
# `fusec model.py`

_REQUIRED_FUNCTIONS = ("model", "example_inputs")


def load_model_file(
    path: str | os.PathLike[str],
) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """Load a Python model file: it must define `model()` and `example_inputs()`.

    Returns the module (in eval mode) and the example inputs as a tuple of tensors. Anything
    wrong, including an exception raised inside the file, is a FrontendError naming the file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FrontendError(f"{path}: no such file")
    namespace = _execute_file(path)
    missing = [name for name in _REQUIRED_FUNCTIONS if not callable(getattr(namespace, name, None))]
    if missing:
        raise FrontendError(
            f"{path}: a model file must define "
            + " and ".join(f"`{name}()`" for name in _REQUIRED_FUNCTIONS)
            + "; missing: "
            + ", ".join(f"`{name}()`" for name in missing)
        )
    module = _call_user_function(path, namespace.model)
    inputs = _call_user_function(path, namespace.example_inputs)
    return _check_module(path, module), _check_inputs(path, inputs)


def _execute_file(path: str) -> Any:
    """Import the file as a fresh module (not registered in sys.modules under a shared name)."""
    name = "fusec_user_model_" + re.sub(r"\W", "_", os.path.abspath(path))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FrontendError(f"{path}: not a loadable Python file")
    namespace = importlib.util.module_from_spec(spec)
    # Registered while it runs so that dataclasses and pickling inside the file can find it.
    sys.modules[name] = namespace
    try:
        spec.loader.exec_module(namespace)
    except Exception as error:
        del sys.modules[name]
        message = f"{path}: error while importing: {type(error).__name__}: {error}"
        raise FrontendError(message) from error
    return namespace


def _call_user_function(path: str, function: Any) -> Any:
    try:
        return function()
    except Exception as error:
        raise FrontendError(
            f"{path}: `{function.__name__}()` raised {type(error).__name__}: {error}"
        ) from error


def _check_module(path: str, module: Any) -> torch.nn.Module:
    import torch

    if not isinstance(module, torch.nn.Module):
        raise FrontendError(
            f"{path}: `model()` returned a {type(module).__name__}, not a torch.nn.Module"
        )
    return module.eval()


def _check_inputs(path: str, inputs: Any) -> tuple[torch.Tensor, ...]:
    import torch

    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)):
        raise FrontendError(
            f"{path}: `example_inputs()` returned a {type(inputs).__name__}, not a tuple of tensors"
        )
    for index, value in enumerate(inputs):
        if not isinstance(value, torch.Tensor):
            raise FrontendError(
                f"{path}: `example_inputs()` item {index} is a {type(value).__name__}, not a tensor"
            )
    return tuple(inputs)
