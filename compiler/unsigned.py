"""uint8 values read as unsigned where torch-mlir would read them as signed.

torch-mlir lowers `ui8` to MLIR's signless `i8`, and the ops that interpret the values as
signed: on [10, 200, 255], `x * 0.5` gave [5, -28, -0.5], `x > 200` was true for 128,
`x.sum()` wrapped, `sort` put 255 first. Its dtype conversions know the type is unsigned,
and so do the ops whose result is uint8 again with wrapping arithmetic (`+`, `*`, `-x`,
bitwise ops, shifts, `where`: the same bits either way). So in the FX graph, before
torch-mlir:
- an op that reads a uint8 value into a result of another type (a float, a bool, int32 or
  wider: promotions, comparisons, sums) reads it converted to int32 first;
- an op that orders uint8 values into a uint8 result (sort, topk, max / min, clamp, floor
  division, remainder) is refused, located: computed as signed it would be wrong, and
  computed in int32 then narrowed, torch-mlir's importer crashed. Convert first
  (`x.int()`, `x.long()`);
- a reduction into a narrow type it names (`x.sum(-1, dtype=torch.int16)`) reads the value
  converted too (its result type is the one named: it was the signed i8 reading summed);
- a Python integer operand out of uint8's range is wrapped into it, as torch reads it
  (`x > -1` is `x > 255`; it was compared as -1); `abs` of uint8 is the value itself (it
  was the signed reading's).
Found by probe 10 (2026-12-05).
"""

from __future__ import annotations

from typing import Any

# Ops left reading the uint8 value itself (their lowering knows it is unsigned, or they
# only assert its dtype).
_AS_IS = ("convert_element_type", "_to_copy", "_assert_tensor_metadata", "to.dtype", "getitem")

# Ops whose uint8 result depends on the order of uint8 values.
ORDERED = ("sort", "topk", "max", "min", "amax", "amin", "maximum", "minimum", "clamp",
           "floor_divide", "remainder", "fmod", "div", "median", "kthvalue", "mode", "cummax",
           "cummin", "argsort")


# Ops whose second operand, a Python integer, is a value read in the tensor's type (not a
# dim, a size or an index).
SCALAR_VALUE_OPS = ("eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "rsub", "mul",
                    "floor_divide", "remainder", "bitwise_and", "bitwise_or", "bitwise_xor")


def _dtypes(node: Any) -> list[Any]:
    value = node.meta.get("val") if hasattr(node, "meta") else None
    values = value if isinstance(value, (tuple, list)) else [value]
    return [getattr(v, "dtype", None) for v in values]


def _convert(graph: Any, source: Any, dtype: Any) -> Any:
    import torch

    node = graph.call_function(torch.ops.prims.convert_element_type.default, (source, dtype))
    value = source.meta["val"]
    with value.fake_mode:
        node.meta["val"] = torch.empty_strided(value.shape, value.stride(), dtype=dtype,
                                               device=value.device)
    return node


def read_uint8_unsigned(program: Any, where: Any = None) -> None:
    """Rewrite `program`'s graph in place (see the module's docstring); `where(node)` names
    the user's line of a node, for the refusal."""
    import torch

    from fusec.compiler.frontend import FrontendError

    graph = program.graph
    u8 = torch.uint8
    narrow = (torch.uint8, torch.int8, torch.int16)
    if not any(u8 in _dtypes(n) for n in graph.nodes):
        return
    widened: dict[Any, Any] = {}

    def widen(value: Any) -> Any:
        if _dtypes(value) != [u8]:
            return value
        if value not in widened:
            with graph.inserting_after(value):
                widened[value] = _convert(graph, value, torch.int32)
        return widened[value]

    def wrapped(value: Any) -> Any:
        # A Python integer beside a uint8 tensor is read as uint8 by torch (`x > -1` is
        # `x > 255`, `x // -3` is `x // 253`), not as the number it is.
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < 256:
            return value % 256
        return value

    for node in list(graph.nodes):
        name = str(node.target)
        if node.op != "call_function" or any(key in name for key in _AS_IS) or \
                not any(_dtypes(a) == [u8] for a in node.all_input_nodes):
            continue
        op = name.split(".")[-2] if name.count(".") >= 2 else name  # aten.<op>.<overload>
        if op in SCALAR_VALUE_OPS and len(node.args) > 1 and _dtypes(node.args[0]) == [u8]:
            node.args = (node.args[0], wrapped(node.args[1])) + tuple(node.args[2:])
        if op == "abs" and _dtypes(node) == [u8]:
            node.replace_all_uses_with(node.args[0])  # unsigned: its own absolute value
            graph.erase_node(node)
            continue
        if any(d in narrow for d in _dtypes(node)) and node.kwargs.get("dtype") is None:
            if op in ORDERED:
                line = where(node) if where else ""
                raise FrontendError(
                    f"{line + ': ' if line else ''}'{op}' of a uint8 tensor: torch-mlir "
                    "orders uint8 values as signed (255 before 0); convert it first "
                    "(x.int() or x.long())")
            continue  # a uint8 result of wrapping arithmetic: the same bits either way
        node.args = torch.fx.node.map_arg(node.args, widen)
        node.kwargs = torch.fx.node.map_arg(node.kwargs, widen)
    graph.lint()
