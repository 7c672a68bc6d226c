"""`torch.compile(model, backend="fusec")`: fusec as a TorchDynamo backend.

Registered by entry point (pyproject.toml, group `torch_dynamo_backends`), so that the string
"fusec" works once the package is installed; `fusec_backend` itself may be passed too.
Dynamo hands over each captured FX graph with example inputs; a graph of static shapes is
compiled once (Dynamo's guards call the backend again when shapes or dtypes change), and a
graph Dynamo made dynamic (SymInt sizes: it does so by itself for a frame called again with
new shapes, such as a mixture of experts' per-expert token counts) is compiled once per set
of concrete shapes it is called with, as a static graph. Each goes through `fusec.compile`
for the inputs' device (CUDA tensors: target cuda; CPU tensors: target cpu) unless
`options={"target": ...}` says otherwise, and the compiled callable runs the artifact on the
caller's tensors (no copy of CUDA tensors; CPU results are numpy arrays viewed as tensors,
no copy). Dynamo passes the module's parameters and buffers as graph inputs: the artifact
reads them from the caller at every call (no copy of the weights is made).

What fusec cannot compile runs as Dynamo gave it (eager), and says so: a warning per
distinct reason, and `fallbacks()` lists every graph that fell back with the reason (the
first line of fusec's error). Dynamo's own graph breaks are Dynamo's: each piece between
them is a graph of its own here.

Options (`torch.compile(..., options={...})`): "target" ("cpu", "cuda", "auto"), "graph"
(CUDA graph replay of each call, for CUDA, with kernels chosen for it: CudaOptions.graph),
"fusion" (False: one kernel per op), "cpu" / "cuda" (CpuOptions / CudaOptions), "fallback"
(False: raise instead of running eagerly).

Each graph is imported as Dynamo gave it (`fusec.compiler.api.compile_fx_graph`): traced once
to aten ops with fusec's decompositions and handed to torch-mlir's graph importer, not
exported again with torch.export.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, Callable

OPTION_NAMES = ("target", "graph", "fusion", "cpu", "cuda", "fallback")


@dataclass(frozen=True)
class Fallback:
    graph: str  # the FX graph's name and its op count
    reason: str


_FALLBACKS: list[Fallback] = []
_WARNED: set[str] = set()


def fallbacks() -> list[Fallback]:
    """Every graph that ran eagerly instead of through fusec, with the reason."""
    return list(_FALLBACKS)


def reset() -> None:
    _FALLBACKS.clear()
    _WARNED.clear()


def _check_option_values(options: dict) -> None:
    """A ValueError naming the option, what it takes and what it got (a wrong value ran the
    graph eagerly with a warning, one of them an internal AttributeError)."""
    from fusec.compiler.targets.cpu.options import CpuOptions
    from fusec.compiler.targets.cuda.options import CudaOptions

    wanted = {"target": ((str,), "'cpu' or 'cuda'"), "graph": ((bool,), "a bool"),
              "fusion": ((bool,), "a bool"), "fallback": ((bool,), "a bool"),
              "cpu": ((CpuOptions, type(None)), "a fusec CpuOptions"),
              "cuda": ((CudaOptions, type(None)), "a fusec CudaOptions")}
    for name, value in options.items():
        types, what = wanted[name]
        if not isinstance(value, types) or (name == "target" and value not in ("cpu", "cuda")):
            raise ValueError(f"fusec backend: option {name!r} takes {what}, got {value!r}")


def _fell_back(gm: Any, reason: str) -> Callable[..., Any]:
    nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function" or n.op == "call_method"
                or n.op == "call_module")
    entry = Fallback(f"{type(gm).__name__} ({nodes} ops)", reason)
    _FALLBACKS.append(entry)
    if reason not in _WARNED:
        _WARNED.add(reason)
        warnings.warn(f"fusec: a graph of {nodes} ops runs eagerly: {reason}", stacklevel=3)
    return gm.forward


def _to_torch(value: Any) -> Any:
    """A CPU artifact's numpy output as a tensor (no copy; bfloat16 through its bits)."""
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.name == "bfloat16":
            return torch.from_numpy(value.view(np.uint16)).view(torch.bfloat16)
        return torch.from_numpy(value)
    return torch.tensor(value)


def fusec_backend(gm: Any, example_inputs: list[Any], options: dict | None = None,
                  **_: Any) -> Callable[..., Any]:
    """The Dynamo backend: `gm` compiled by fusec for `example_inputs`' shapes.

    A graph Dynamo made dynamic (it does so by itself when a frame is called again with new
    shapes: SymInt inputs, tensors of symbolic sizes) is compiled once per set of concrete
    shapes it is called with, each as a static graph (fusec's kernels are shape-specialised).
    """
    import torch

    from fusec.compiler.diagnostics import FusecError

    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise ValueError(f"fusec backend: unknown option(s) {', '.join(unknown)} (known: "
                         f"{', '.join(OPTION_NAMES)})")
    _check_option_values(options)
    allow_fallback = options.get("fallback", True)

    def refuse(reason: str) -> Callable[..., Any]:
        if not allow_fallback:
            raise FusecError(f"fusec backend: {reason}")
        return _fell_back(gm, reason)

    others = sorted({type(x).__name__ for x in example_inputs
                     if not isinstance(x, (torch.Tensor, torch.SymInt, int))})
    if others:
        return refuse(f"inputs that are neither tensors nor sizes ({', '.join(others)})")
    if not any(isinstance(x, torch.Tensor) for x in example_inputs):
        return refuse("a graph without tensor inputs")
    if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                       for x in example_inputs):
        # The artifact computes the forward pass only: a backward through it would not
        # reach the parameters.
        return refuse("autograd: fusec compiles inference graphs (run the model under "
                      "torch.no_grad() or torch.inference_mode())")
    if any(n.op == "call_function" and n.target is torch._C._set_grad_enabled and
           n.args and n.args[0] is True for n in gm.graph.nodes):
        # `with torch.enable_grad():` inside forward: eager's outputs there require grad
        # (a backward through them must reach the parameters); the artifact's would not.
        return refuse("autograd: the graph turns gradients on (torch.enable_grad()); fusec "
                      "compiles inference graphs")
    devices = {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}
    if len(devices) > 1:
        return refuse(f"inputs on several devices ({', '.join(sorted(devices))})")
    target = options.get("target") or ("cuda" if "cuda" in devices else "cpu")
    if target == "cuda" and devices != {"cuda"}:
        return refuse("target cuda needs CUDA tensors")
    statistics = _training_statistics(gm)
    if statistics:
        # fusec compiles inference: a batch norm that normalises by its batch's statistics
        # and updates running ones came out wrong (0.06-0.09 from eager, the running mean
        # 0.5 off), with no fallback said.
        return refuse(f"{statistics} in training mode (batch statistics and running-stat "
                      "updates): fusec compiles inference graphs; call model.eval()")
    gm.eval()  # Dynamo's graph has the ops it traced; the flag only silences a note.
    _python_scalars_as_tensors(gm)
    _tensor_indices_as_gathers(gm)
    if not _symbolic(example_inputs):
        compiled = _compile_static(gm, list(example_inputs), target, options)
        return refuse(compiled) if isinstance(compiled, str) else compiled

    # One static artifact per set of concrete shapes (and size arguments) seen at run time.
    by_shape: dict[tuple, Callable[..., Any]] = {}

    def run_specialised(*args: Any) -> Any:
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else int(a)
                    for a in args)
        runner = by_shape.get(key)
        if runner is None:
            compiled = _compile_static(gm, list(args), target, options)
            if isinstance(compiled, str):
                compiled = refuse(f"{compiled} (shapes {_shapes(args)})")
            runner = by_shape[key] = compiled
        return runner(*args)

    return run_specialised


# Binary arithmetic that takes a tensor for a Python scalar, with the same result.
_ARITHMETIC = ("add", "sub", "mul", "truediv", "div", "pow", "floordiv", "mod", "remainder",
               "rsub", "maximum", "minimum", "fmod")


def _python_scalars_as_tensors(gm: Any) -> None:
    """A Python float argument that Dynamo made dynamic (it does so by itself when a frame is
    called again with another value) arrives as a 0-d float64 tensor read by `.item()`:
    tracing that read is data-dependent, so such graphs ran eagerly. Where every use of the
    value is binary arithmetic with a tensor (`x * a`, `a - x`, `x ** a`), the value is used
    as a tensor instead, converted to the dtype the arithmetic computes in
    (`torch.result_type` of the tensor and a Python scalar): the result's dtype and values
    are those of the scalar form, and the artifact reads the value at every call. Other uses
    (the value in Python arithmetic, a shape) are left, and fall back as before."""
    import torch

    for node in list(gm.graph.nodes):
        item = node.op == "call_method" and node.target == "item" or (
            node.op == "call_function" and node.target in (
                torch.ops.aten._local_scalar_dense.default, torch.Tensor.item))
        if not item or not node.args or not isinstance(node.args[0], torch.fx.Node):
            continue
        source = node.args[0]
        value = source.meta.get("example_value")
        if not isinstance(value, torch.Tensor) or value.dim() != 0 or \
                not value.dtype.is_floating_point:
            continue
        rewrites = []
        for user in node.users:
            name = getattr(user.target, "__name__", str(user.target)).strip("_")
            operands = list(user.args) + list(user.kwargs.values())
            others = [a for a in operands if isinstance(a, torch.fx.Node) and a is not node]
            if user.op not in ("call_function", "call_method") or name not in _ARITHMETIC \
                    or operands.count(node) != 1 or len(others) != 1:
                break
            other = others[0].meta.get("example_value")
            if not isinstance(other, torch.Tensor):
                break
            rewrites.append((user, others[0], other.dtype, torch.result_type(other, 1.5)))
        else:
            # The value as it is where `.item()` reads it: the tensor may be updated in place
            # before the arithmetic (`a = s.item(); s.add_(1); x * a`: x * 3 where eager
            # gives x * 2, a probe's find).
            with gm.graph.inserting_before(node):
                snapshot = gm.graph.call_method("clone", (source,))
            snapshot.meta["example_value"] = value
            for user, other, other_dtype, result in rewrites:
                # torch computes 16-bit floats with a scalar in float32 (its "opmath" type),
                # an integer tensor with a float scalar in the result's dtype: both operands
                # in that type, the result rounded once.
                compute = torch.float32 if result in (torch.float16, torch.bfloat16) \
                    else result
                with gm.graph.inserting_before(user):
                    user.replace_input_with(node, _cast(gm, snapshot, value, compute))
                    if other_dtype != compute:
                        user.replace_input_with(other, _cast(
                            gm, other, other.meta["example_value"], compute))
                if compute != result:
                    with gm.graph.inserting_after(user):
                        back = gm.graph.call_method("to", (user, result))
                    user.replace_all_uses_with(back, delete_user_cb=lambda n: n is not back)
                    back.meta["example_value"] = user.meta["example_value"].to(result) \
                        if "example_value" in user.meta else None
            gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()


def _tensor_indices_as_gathers(gm: Any) -> None:
    """`x[i]` with a 0-d integer tensor `i` (a token id, a position): tracing it reads i as a
    number (data-dependent: the graph ran eagerly). It becomes a gather of one row,
    `index_select(x, 0, i)` squeezed, with i wrapped as torch wraps a negative index. Not
    where the row is updated in place (`x[i].add_(1)`: eager's x[i] is a view of x, the
    gather a copy, and the update was lost): that graph runs eagerly, as before."""
    import operator

    import torch

    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not operator.getitem:
            continue
        x, index = node.args
        x_val = x.meta.get("example_value") if isinstance(x, torch.fx.Node) else None
        i_val = index.meta.get("example_value") if isinstance(index, torch.fx.Node) else None
        if not isinstance(x_val, torch.Tensor) or not isinstance(i_val, torch.Tensor) or \
                i_val.dim() != 0 or i_val.dtype.is_floating_point or i_val.dtype == torch.bool \
                or x_val.dim() == 0:
            continue
        if any(_in_place(user) and user.args and user.args[0] is node for user in node.users):
            continue
        size = x_val.shape[0]
        graph = gm.graph
        with graph.inserting_before(node):
            wrapped = graph.call_function(torch.where, (
                graph.call_function(operator.lt, (index, 0)),
                graph.call_function(operator.add, (index, size)), index))
            row = graph.call_method("reshape", (graph.call_method("long", (wrapped,)), 1))
            gathered = graph.call_function(torch.index_select, (x, 0, row))
            result = graph.call_method("squeeze", (gathered, 0))
        result.meta["example_value"] = node.meta.get("example_value")
        node.replace_all_uses_with(result)
        graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()


def _number_type(value: Any) -> Any:
    """int, float or bool for a graph output Dynamo traced as a (symbolic) number, else
    None."""
    import torch

    example = value.meta.get("example_value") if isinstance(value, torch.fx.Node) else None
    for symbolic, kind in ((torch.SymBool, bool), (torch.SymInt, int), (torch.SymFloat, float),
                           (bool, bool), (int, int), (float, float)):
        if isinstance(example, symbolic):
            return kind
    return None


# Tensor methods and functions whose result is always a view of their first argument.
_VIEW_METHODS = ("view", "t", "transpose", "permute", "unsqueeze", "squeeze", "expand",
                 "narrow", "select", "diagonal", "unfold", "as_strided", "view_as", "swapaxes",
                 "movedim", "unbind", "split", "chunk", "view_as_real")
# ...and those whose result is a view of their first argument where torch can make one (a
# reshape of a contiguous tensor, `contiguous()` of a contiguous one, a cast to its own
# dtype: the tensor itself): replayed on the caller's tensor, they give what eager gives.
_MAYBE_VIEW_METHODS = ("reshape", "flatten", "contiguous", "detach", "to", "type", "float",
                       "double", "half", "bfloat16", "int", "long", "bool")
_INDEX_KINDS = (int, slice, type(None), type(Ellipsis))


def _op_name(node: Any) -> str:
    """A call's name: the method's, or the function's (`torch.reshape` is "reshape")."""
    if node.op == "call_method":
        return node.target
    return getattr(node.target, "__name__", "") if node.op == "call_function" else ""


_IN_PLACE_OPERATORS = ("iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow",
                       "iand", "ior", "ixor", "ilshift", "irshift")


def _in_place(node: Any) -> bool:
    """Whether `node` updates its first argument in place and returns it (`x.add_(y)`,
    `x += y` as operator.iadd, `torch.relu_(x)`)."""
    import operator

    name = _op_name(node)
    if node.op == "call_function" and name in _IN_PLACE_OPERATORS:
        return node.target is getattr(operator, name)
    return name.endswith("_") and not name.startswith("_")


def _view_outputs(gm: Any, result: Any) -> dict:
    """Outputs of `gm` that are views of an input or of another output, found through
    always-view ops (`x[1:]`, `x.t()`, `y.view(-1)` of an output y): output position ->
    (input position or ("out", k), the chain of nodes from there)."""
    import operator

    import torch

    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    found = {}
    for k, node in enumerate(outputs):
        chain = []
        current = node
        while isinstance(current, torch.fx.Node):
            if current in placeholders or (current is not node and current in outputs):
                break
            if _in_place(current) and current.args and \
                    isinstance(current.args[0], torch.fx.Node):
                # `x.add_(1)` is x, updated (the runtime writes the update back into x).
                current = current.args[0]
                continue
            name = _op_name(current)
            if current.op == "call_function" and current.target is operator.getitem:
                index = current.args[1]
                parts = index if isinstance(index, tuple) else (index,)
                if not all(isinstance(p, _INDEX_KINDS) for p in parts) or \
                        not all(_sizes_known(p, placeholders) for p in parts):
                    break
            elif current.op not in ("call_method", "call_function") or \
                    name not in _VIEW_METHODS + _MAYBE_VIEW_METHODS:
                break
            elif any(isinstance(a, torch.fx.Node) for a in list(current.args[1:]) +
                     list(current.kwargs.values())):
                break
            chain.append(current)
            current = current.args[0]
        if not isinstance(current, torch.fx.Node) or \
                (not chain and current is node and current not in placeholders):
            continue
        if current in placeholders:
            found[k] = (placeholders.index(current), list(reversed(chain)))
        elif current in outputs:
            found[k] = (("out", outputs.index(current)), list(reversed(chain)))
    return found


def _sizes_known(part: Any, placeholders: list[Any]) -> bool:
    """Whether an index part's bounds are numbers or sizes the graph takes as inputs (a
    dynamic graph's `x[:n]`), which `_replay` reads from the call."""
    import torch

    if not isinstance(part, slice):
        return True
    return all(not isinstance(b, torch.fx.Node) or b in placeholders
               for b in (part.start, part.stop, part.step))


def _replay(chain: list[Any], value: Any, sizes: dict | None = None) -> Any:
    """The view ops of `chain` applied to `value`, eagerly; `sizes` gives the call's value
    of each size input a slice bound names."""
    import torch

    def bound(b: Any) -> Any:
        return sizes[b] if isinstance(b, torch.fx.Node) else b

    for node in chain:
        if node.op == "call_method":
            value = getattr(value, node.target)(*node.args[1:], **node.kwargs)
        else:
            args = node.args[1:]
            if args and isinstance(args[0], (slice, tuple)):  # getitem: resolve its bounds
                parts = args[0] if isinstance(args[0], tuple) else (args[0],)
                parts = tuple(slice(bound(p.start), bound(p.stop), bound(p.step))
                              if isinstance(p, slice) else p for p in parts)
                args = (parts if isinstance(args[0], tuple) else parts[0],) + args[1:]
            value = node.target(value, *args, **node.kwargs)
    return value


def _cast(gm: Any, value: Any, example: Any, dtype: Any) -> Any:
    cast = gm.graph.call_method("to", (value, dtype))
    cast.meta["example_value"] = example.to(dtype)
    return cast


# Normalisations whose `training` argument (the 6th) makes them use and update batch
# statistics.
_STATISTICS = ("batch_norm", "instance_norm")


def _training_statistics(gm: Any) -> str:
    """The name of the first normalisation of `gm` called with training=True, or ''."""
    for node in gm.graph.nodes:
        name = getattr(node.target, "__name__", str(node.target))
        if node.op != "call_function" or name not in _STATISTICS:
            continue
        training = node.kwargs.get("training", node.args[5] if len(node.args) > 5 else False)
        if training is True:
            return name
    return ""


def _symbolic(inputs: list[Any]) -> bool:
    import torch

    return any(isinstance(x, torch.SymInt) or (
        isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape))
        for x in inputs)


def _shapes(args: Any) -> str:
    return ", ".join("x".join(map(str, a.shape)) if hasattr(a, "shape") else str(a)
                     for a in args)


def _with_sizes(gm: Any, args: list[Any]) -> Any:
    """`gm` with its size arguments fixed to `args`' values: a module of its tensors only."""
    import torch

    sizes = {i: int(a) for i, a in enumerate(args) if not isinstance(a, torch.Tensor)}

    class Specialised(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gm = gm

        def forward(self, *tensors: Any) -> Any:
            it = iter(tensors)
            return self.gm(*[sizes[i] if i in sizes else next(it) for i in range(len(args))])

    return Specialised().eval()


def _compile_static(gm: Any, args: list[Any], target: str,
                    options: dict) -> Callable[..., Any] | str:
    """The artifact for `args`' concrete shapes and the runner that calls it, or the reason
    fusec could not compile it."""
    import torch

    from fusec.compiler.api import compile_fx_graph
    from fusec.compiler.diagnostics import FusecError
    from fusec.runtime import aliased_update

    tensors = [a.detach() for a in args if isinstance(a, torch.Tensor)]
    tensor_positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    model = gm if len(tensors) == len(args) else _with_sizes(gm, args)
    kwargs = {k: options[k] for k in ("fusion", "cpu", "cuda") if k in options}
    if target == "cuda" and options.get("graph", False):
        # Replayed as a CUDA graph: cuBLASLt's calls cost no host time (CudaOptions.graph).
        from fusec.compiler.api import default_cuda_options

        kwargs["cuda"] = dataclasses.replace(kwargs.get("cuda") or default_cuda_options(),
                                             graph=True)
    try:
        module = compile_fx_graph(model, *tensors, target=target, **kwargs)
    except FusecError as error:
        return str(error).splitlines()[0]
    except Exception as error:  # noqa: BLE001 - the graph still runs, eagerly, and says why
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    # Dynamo's graphs return a tuple (or list) of tensors; fusec's artifact returns one
    # value or a tuple: the wrapper returns what the graph would.
    result = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    as_tuple, as_list = isinstance(result, tuple), isinstance(result, list)
    graph = bool(options.get("graph", False)) and target == "cuda"
    updated = [i for i, _ in module.input_updates]
    # Outputs the graph computes as numbers (a size of a dynamic graph, `x.shape[0] + 1`):
    # the caller gets the number, as from eager (they came back as 0-d tensors).
    kinds = [_number_type(r) for r in (result if isinstance(result, (tuple, list))
                                       else [result])]
    numbers = {k: kind for k, kind in enumerate(kinds) if kind is not None}

    views = _view_outputs(gm, result)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    # A cast or reshape that copies (another dtype, a non-contiguous input) of an input the
    # graph also updates in place read the input before or after the update, as the graph
    # orders them: its value is the artifact's, not a replay after the update.
    written = {tensor_positions[i] for i in updated}
    views = {k: (base, chain) for k, (base, chain) in views.items()
             if not (base in written and any(_op_name(n) in _MAYBE_VIEW_METHODS
                                             for n in chain))}

    aliased_seen = False

    def run(*call_args: Any) -> Any:
        nonlocal aliased_seen
        sizes = dict(zip(placeholders, call_args))
        if updated and aliased_update([call_args[i] for i in tensor_positions],
                                      updated) is not None:
            # An input the graph updates in place shares memory with another (f(x, x[0])):
            # eager reads the other through the alias after the update, the artifact
            # before it. This call runs as Dynamo gave it.
            if not aliased_seen:
                aliased_seen = True
                _fell_back(gm, "an input updated in place shares memory with another "
                           "input (those calls run eagerly)")
            return gm(*call_args)
        inputs = [call_args[i].contiguous() for i in tensor_positions]
        if target == "cuda":
            outs = module(*inputs, graph=graph)
        else:
            outs = module(*[a.detach() for a in inputs])
        outs = outs if isinstance(outs, tuple) else (outs,)
        outs = [numbers[k](o.item() if hasattr(o, "item") else o) if k in numbers
                else _to_torch(o) for k, o in enumerate(outs)]
        # What the graph updated in place (a buffer) the runtime wrote back into `inputs`;
        # into the caller's tensor too where `contiguous()` made a copy.
        for i in updated:
            original = call_args[tensor_positions[i]]
            if inputs[i] is not original:
                with torch.no_grad():
                    original.copy_(inputs[i])
        for k, (base, chain) in views.items():
            # A view of an input (or of another output) is that view, as in eager: writing
            # into it writes into its base (it came back as a copy); an input updated in
            # place and returned (`return x.add_(1)`, `self.buf += x`) is that input.
            value = call_args[base] if isinstance(base, int) else outs[base[1]]
            outs[k] = _replay(chain, value, sizes)
        if as_list:
            return outs
        if as_tuple:
            return tuple(outs)
        return outs[0]

    return run
