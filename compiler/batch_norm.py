"""Inference BatchNorms folded before the decompositions: into the convolution or linear
layer before them where they can be, else into one multiply and one add.

An eval-mode BatchNorm is `(x - mean) / sqrt(var + eps) * weight + bias` with four constant
vectors: per channel, `x * alpha + beta` with `alpha = weight / sqrt(var + eps)` and
`beta = bias - mean * alpha`, which is how torch's own CPU kernel computes it. Left to the
decompositions, each BatchNorm was a dozen traced ops (about 7 ms of fake-tensor dispatch
apiece: ResNet-18's 20 took 0.15 s of its import) and as many ops for every later stage.

- **Into the layer before.** Where the BatchNorm reads a convolution (batched, not
  transposed) or a linear layer with a 2-D result, and nothing else reads that layer's
  result, the layer's weight is scaled by `alpha` along its output channels and its bias
  becomes `(bias - mean) * alpha + beta` (computed in float64, stored in the weight's
  dtype): the BatchNorm is gone. This reassociates (the layer's products are scaled before they are
  summed, as every inference compiler's conv-BN folding does): a change within float32's
  rounding, so only float32 and float64 weights are folded this way.
- **Alone.** Otherwise (a BatchNorm after an add, a pre-activation BatchNorm, 16-bit
  weights) it becomes `x * alpha + beta` in the decomposition's computation type (float32
  for 16-bit inputs, rounded back after), `alpha` and `beta` computed as torch computes
  them, op by op in that type.

The folded vectors take the places of the layer's weight and of the BatchNorm's running
mean and variance in the program's state (new tensors: the user's module is not touched).
Each of those must be read by this BatchNorm or layer alone, and every vector must come
from the state (a parameter, a buffer or a constant, not updated by the program), or
nothing is folded. A BatchNorm in training mode
(batch statistics) is left as it is.
"""

from __future__ import annotations

from typing import Any


def fold_batch_norms(program: Any) -> int:
    """Fold `program`'s inference BatchNorms (in place); how many were folded."""
    state = _state_placeholders(program)
    graph = program.graph
    folded = 0
    for node in list(graph.nodes):
        norm = _inference_batch_norm(node)
        if norm is None:
            continue
        x, weight, bias, mean, var, eps = norm
        # The statistics' places are overwritten: this BatchNorm's alone. Its weight and
        # bias are only read.
        if mean is var or not (_own(mean, node, state) and _own(var, node, state)) or any(
                p is not None and p not in state for p in (weight, bias)):
            continue
        tensors = {k: None if p is None else state_tensor(program, state[p])
                   for k, p in (("weight", weight), ("bias", bias), ("mean", mean),
                                ("var", var))}
        if not all(t is None or t.dtype.is_floating_point for t in tensors.values()):
            continue
        if _fold_into_layer(program, state, node, x, mean, tensors, eps) or \
                _fold_alone(program, state, node, x, mean, var, tensors, eps):
            folded += 1
    if folded:
        graph.eliminate_dead_code()
        graph.lint()
        program.graph_module.recompile()
    return folded


def _state_placeholders(program: Any) -> dict[Any, str]:
    """The program's placeholders that hold state (parameters, buffers, constant tensors),
    each with its target, the key of its tensor."""
    from torch.export.graph_signature import InputKind

    kinds = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    mutated = {s.target for s in program.graph_signature.output_specs if s.target}
    return {placeholders[s.arg.name]: s.target for s in program.graph_signature.input_specs
            if s.kind in kinds and s.arg.name in placeholders and s.target not in mutated}


def state_tensor(program: Any, target: str) -> Any:
    """The program's state tensor `target` (a parameter or persistent buffer in its state
    dict, else a constant), detached."""
    return (program.state_dict[target] if target in program.state_dict
            else program.constants[target]).detach()


def _write(program: Any, target: str, value: Any) -> None:
    """`value` in place of the state tensor `target` (a parameter stays a Parameter)."""
    import torch

    if target in program.state_dict:
        old = program.state_dict[target]
        if isinstance(old, torch.nn.Parameter):
            value = torch.nn.Parameter(value, requires_grad=False)
        program.state_dict[target] = value
    else:
        program.constants[target] = value


def _own(node: Any, reader: Any, state: dict[Any, str]) -> bool:
    """`node` is a state placeholder read by `reader` alone."""
    return node in state and set(node.users) == {reader}


def _inference_batch_norm(node: Any) -> tuple | None:
    """(input, weight, bias, mean, var, eps) of an eval-mode `aten.batch_norm` with running
    statistics; None for anything else."""
    import torch

    if node.op != "call_function" or node.target != torch.ops.aten.batch_norm.default:
        return None
    names = ("input", "weight", "bias", "running_mean", "running_var", "training",
             "momentum", "eps", "cudnn_enabled")
    args = dict(zip(names, node.args))
    args.update(node.kwargs)
    if args.get("training", True) is not False or args.get("running_mean") is None or \
            args.get("running_var") is None or not isinstance(args.get("eps"), float):
        return None
    value = node.meta.get("val")
    if value is None or value.dim() < 2:
        return None
    return (args["input"], args.get("weight"), args.get("bias"), args["running_mean"],
            args["running_var"], args["eps"])


_CONVOLUTIONS = ("conv1d", "conv2d", "conv3d")
_BIAS_ARG = 2  # the bias's position in every one of them and in linear


def _is_layer(x: Any, norm: Any) -> bool:
    """`x` is a convolution or linear layer that `norm` alone reads."""
    import torch

    if x.op != "call_function" or set(x.users) != {norm}:
        return False
    aten = torch.ops.aten
    if x.target in [getattr(aten, name).default for name in _CONVOLUTIONS]:
        return True
    if x.target == aten.convolution.default:
        return len(x.args) > 6 and x.args[6] is False
    return x.target == aten.linear.default and x.meta.get("val") is not None and \
        x.meta["val"].dim() == 2


def _fold_into_layer(program: Any, state: dict[Any, str], norm: Any, x: Any, mean: Any,
                     tensors: dict[str, Any], eps: float) -> bool:
    import torch

    layer = x
    if not _is_layer(layer, norm) or len(layer.args) < 2:  # (a keyword weight: not folded)
        return False
    weight = layer.args[1]
    bias = layer.args[_BIAS_ARG] if len(layer.args) > _BIAS_ARG else layer.kwargs.get("bias")
    if not _own(weight, layer, state) or (bias is not None and bias not in state):
        return False
    w = state_tensor(program, state[weight])
    source = layer.args[0].meta.get("val") if hasattr(layer.args[0], "meta") else None
    if layer.target != torch.ops.aten.linear.default and (
            source is None or source.dim() != w.dim()):
        return False  # an unbatched convolution: its channels are dim 0, not the BatchNorm's
    if w.dtype not in (torch.float32, torch.float64) or any(
            t is not None and t.dtype != w.dtype for t in tensors.values()):
        return False
    channels = w.shape[0]
    if not _per_channel(tensors, channels):
        return False
    wide = torch.float64
    alpha = 1 / torch.sqrt(tensors["var"].to(wide) + eps)
    if tensors["weight"] is not None:
        alpha = alpha * tensors["weight"].to(wide)
    shift = -tensors["mean"].to(wide)
    if bias is not None:
        shift = shift + state_tensor(program, state[bias]).to(wide)
    new_bias = shift * alpha
    if tensors["bias"] is not None:
        new_bias = new_bias + tensors["bias"].to(wide)
    scaled = w.to(wide) * alpha.reshape([channels] + [1] * (w.dim() - 1))
    _write(program, state[weight], scaled.to(w.dtype).contiguous())
    # The running mean's place (read by this BatchNorm alone) holds the layer's new bias.
    _write(program, state[mean], new_bias.to(w.dtype).contiguous())
    args = list(layer.args)
    if len(args) > _BIAS_ARG:
        args[_BIAS_ARG] = mean
    else:  # (the weight positional: the bias is the next argument)
        args.append(mean)
        layer.kwargs = {k: v for k, v in layer.kwargs.items() if k != "bias"}
    layer.args = tuple(args)
    _replace(program, norm, layer)
    return True


def _fold_alone(program: Any, state: dict[Any, str], norm: Any, x: Any, mean: Any,
                var: Any, tensors: dict[str, Any], eps: float) -> bool:
    import torch

    value = norm.meta["val"]
    channels = value.shape[1]
    if not _per_channel(tensors, channels) or any("val" not in n.meta for n in (x, mean, var)):
        return False
    half = value.dtype in (torch.float16, torch.bfloat16)
    wide = torch.float32 if half else value.dtype
    # As torch's CPU kernel: alpha = (1 / sqrt(var + eps)) * weight, beta = bias - mean *
    # alpha, each op rounded in the computation type.
    invstd = 1 / torch.sqrt(tensors["var"].to(wide) + eps)
    alpha = invstd * tensors["weight"].to(wide) if tensors["weight"] is not None else invstd
    product = tensors["mean"].to(wide) * alpha
    beta = tensors["bias"].to(wide) - product if tensors["bias"] is not None else -product
    _write(program, state[var], alpha.contiguous())
    _write(program, state[mean], beta.contiguous())
    for placeholder, tensor in ((var, alpha), (mean, beta)):
        _retype(placeholder, tensor)
    aten = torch.ops.aten
    graph = program.graph
    shape = [channels] + [1] * (value.dim() - 2)
    with graph.inserting_before(norm):
        source = x
        if x.meta["val"].dtype != wide:
            source = _call(graph, aten._to_copy.default, (x,), {"dtype": wide},
                           x.meta["val"].to(wide))
        scale = _call(graph, aten.reshape.default, (var, shape), {},
                      var.meta["val"].reshape(shape))
        offset = _call(graph, aten.reshape.default, (mean, shape), {},
                       mean.meta["val"].reshape(shape))
        product = _call(graph, aten.mul.Tensor, (source, scale), {},
                        source.meta["val"] * scale.meta["val"])
        out = _call(graph, aten.add.Tensor, (product, offset), {},
                    product.meta["val"] + offset.meta["val"])
        if out.meta["val"].dtype != value.dtype:
            out = _call(graph, aten._to_copy.default, (out,), {"dtype": value.dtype},
                        out.meta["val"].to(value.dtype))
    _replace(program, norm, out)
    return True


def _per_channel(tensors: dict[str, Any], channels: int) -> bool:
    """Every one of the BatchNorm's vectors there is has `channels` entries."""
    return all(t is None or t.shape == (channels,) for t in tensors.values())


def _replace(program: Any, norm: Any, node: Any) -> None:
    """`node` in place of the BatchNorm `norm`: its uses, and its name in the program's
    outputs where it is one."""
    norm.replace_all_uses_with(node)
    program.graph.erase_node(norm)
    for spec in program.graph_signature.output_specs:
        if getattr(spec.arg, "name", None) == norm.name:
            spec.arg.name = node.name


def _retype(placeholder: Any, tensor: Any) -> None:
    """The placeholder's fake value given `tensor`'s dtype (its shape is unchanged)."""
    old = placeholder.meta.get("val")
    if old is None or old.dtype == tensor.dtype:
        return
    placeholder.meta["val"] = old.to(tensor.dtype)


def _call(graph: Any, target: Any, args: tuple, kwargs: dict, value: Any) -> Any:
    node = graph.call_function(target, args, kwargs)
    node.meta["val"] = value
    return node
