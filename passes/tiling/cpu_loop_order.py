"""--fusion-cpu-loop-order: put a contraction's reductions outside its contiguous output dim.

`convert-linalg-to-loops` nests loops in the op's dim order, and torch-mlir's contractions
(matmul, batch_matmul, conv) put the reduction dims last: the innermost loop then walks a
column of B with a loop-carried float sum that LLVM may not vectorize (no reassociation).
With the output's innermost dim innermost instead (i, k, j for a matmul), each inner loop is
`C[i, j] += A[i, k] * B[k, j]` over contiguous j: vectorizable, no loop-carried dependence.
Only the order of the loops changes (`transform.structured.interchange`), not the result.
The policy is `cpu_loop_order`; ops inside kernels are rewritten, on tensors or memrefs.

Before: linalg.generic {iterator_types = ["parallel", "parallel", "reduction"]} (matmul)
After:  linalg.generic {iterator_types = ["parallel", "reduction", "parallel"]}
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes import attributes
from fusec.passes.registry import Pass, register
from mlir import ir
from mlir.dialects.transform import interpreter

TAG = attributes.LOOP_ORDER


def _uses_dim(expr: ir.AffineExpr, position: int) -> bool:
    if isinstance(expr, ir.AffineDimExpr):
        return expr.position == position
    if isinstance(expr, ir.AffineBinaryExpr):
        return _uses_dim(expr.lhs, position) or _uses_dim(expr.rhs, position)
    return False


def cpu_loop_order(iterators: list[str], input_maps: list[ir.AffineMap],
                   output_map: ir.AffineMap, ranges: list[int]) -> list[int] | None:
    """The dim order for a CPU loop nest, or None to keep it.

    When the innermost dim is a reduction and the output's innermost index is a parallel
    dim of more than one iteration, that parallel dim moves innermost, provided every input
    either does not depend on it (read once per inner loop) or depends on it only in its
    innermost index (read contiguously): a matmul becomes (i, k, j), a row reduction stays
    (i, j), since its input would be read down a column. The other dims keep their order.
    """
    if len(iterators) < 2 or iterators[-1] != "reduction" or not len(output_map.results):
        return None
    last = output_map.results[len(output_map.results) - 1]
    if not isinstance(last, ir.AffineDimExpr) or iterators[last.position] != "parallel":
        return None
    inner = last.position
    if ranges[inner] <= 1:
        return None
    for amap in input_maps:
        results = list(amap.results)
        if any(_uses_dim(expr, inner) for expr in results[:-1]):
            return None
    return [d for d in range(len(iterators)) if d != inner] + [inner]


def _iterators(op: ir.Operation) -> list[str]:
    return [str(a).split("<")[-1].rstrip(">") for a in op.attributes["iterator_types"]]


def _ranges(op: ir.Operation, maps: list[ir.AffineMap]) -> list[int]:
    """Loop extents read off operand shapes (1 where no operand indexes the dim directly)."""
    ranges = [1] * maps[0].n_dims
    for operand, amap in zip(op.operands, maps):
        shaped = operand.type
        if not isinstance(shaped, (ir.RankedTensorType, ir.MemRefType)):
            continue
        for expr, extent in zip(amap.results, ir.ShapedType(shaped).shape):
            if isinstance(expr, ir.AffineDimExpr):
                ranges[expr.position] = max(ranges[expr.position], extent)
    return ranges


def _script(orders: list[list[int]]) -> str:
    steps = "".join(
        f"""
    %op{i} = transform.structured.match attributes{{{TAG} = {i} : i64}} in %arg0
      : (!transform.any_op) -> !transform.any_op
    %new{i} = transform.structured.interchange %op{i}
      iterator_interchange = [{", ".join(map(str, order))}]
      : (!transform.any_op) -> !transform.any_op"""
        for i, order in enumerate(orders))
    return f"""
module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%arg0: !transform.any_op {{transform.readonly}}) {{
    {steps}
    transform.yield
  }}
}}"""


@register
@dataclass
class CpuLoopOrderPass(Pass):
    """Interchange contraction loops so the output's contiguous dim is innermost."""

    ARGUMENT = "fusion-cpu-loop-order"

    def run(self, module: ir.Operation) -> None:
        targets: list[tuple[ir.Operation, list[int]]] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name == "linalg.generic":
                maps = [ir.AffineMapAttr(m).value for m in op.attributes["indexing_maps"]]
                n_inputs = len(maps) - len(op.results)
                order = cpu_loop_order(_iterators(op), maps[:n_inputs], maps[-1],
                                       _ranges(op, maps))
                if order is not None and len(op.results) <= 1:
                    targets.append((op.operation, order))
            return ir.WalkResult.ADVANCE

        module.walk(visit)
        if not targets:
            return
        i64 = ir.IntegerType.get_signless(64)
        for i, (op, _) in enumerate(targets):
            op.attributes[TAG] = ir.IntegerAttr.get(i64, i)
        script = ir.Module.parse(_script([order for _, order in targets]))
        interpreter.apply_named_sequence(module, next(iter(script.body.operations)), script)

        def untag(op: ir.Operation) -> ir.WalkResult:
            if TAG in op.attributes:
                del op.attributes[TAG]
            return ir.WalkResult.ADVANCE

        module.walk(untag)
