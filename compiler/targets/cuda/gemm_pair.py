"""CUDA target: two matmuls that read the same A become one kernel (`--fusion-gpu-pair-gemms`).

SwiGLU's gate and up projections, `silu(x @ Wg) * (x @ Wu)`, GEGLU's, and any two GEMMs over
one input whose products meet in an elementwise epilogue, reach the GPU rewrites as two
groups: the first product's, then the second's with the join in its epilogue, which reads
the first product back from memory (in f32, where the planner cut before its rounding). Our
tensor-core GEMM computes both in one kernel (`wgmma.GemmProblem.pair`: each tile holds BN / 2
columns of each product, A loaded once for both), the epilogue joins them in registers, and
only the joined result is written.

A group G1 joins the group G2 that reads its result when

- each has one matmul our tensor-core GEMM takes (`tc_gemm.plan_tc_split`), G1 is that one
  kernel whole (no prologue or epilogue left over) and only G2 reads its result;
- both read the same A the same way, with B matrices of one shape and layout
  (`tc_gemm.pair_refusal`), and the merged group is one pair kernel: its epilogue chain
  reads both products and leaves one value;
- and the cost model predicts the pair faster than the two kernels apart: each the faster of
  ours and cuBLASLt, plus the first product's way to memory and back, in full (the roofline
  of each kernel alone hides it behind the MMAs; measured on an H100, RESULTS run 209, the
  LLaMA block's gate and up projections took 0.094 ms apart against 0.052 paired, where
  the kernels' own predictions were 52.6 us and 47.4).

The merged group records both predictions in `fusion.gemm_pair`; `--fusion-gpu-split-matmuls`
then makes it our GEMM pair. Matmuls over different inputs, of different shapes, or whose
first product is also read elsewhere (it is written anyway) stay apart.

Before (G1: the gate's product; G2: the up projection, the join in its epilogue):
    %g = fusion.group vertical (%a = %x, ...) { linalg.matmul ins(%a, %wg^T) ... }
    %r = fusion.group epilogue (%a = %g, %b = %x) { silu(%a); linalg.matmul ins(%b, %wu^T);
                                                    mulf }
After:
    %r = fusion.group epilogue (%b = %x) attributes {fusion.gemm_pair = "..."} {
      linalg.matmul ins(%b, %wg^T); silu; linalg.matmul ins(%b, %wu^T); mulf }
"""

from __future__ import annotations

import mlir.ir as ir
from fusec.compiler.targets.cuda.body import defining
from fusec.compiler.targets.cuda.device import GROUP_OP
from fusec.compiler.targets.cuda.emitter import id_of
from fusec.compiler.targets.cuda.gemm import plan_gemm_split
from fusec.compiler.targets.cuda.options import CudaOptions
from fusec.compiler.targets.cuda.tc_gemm import (TcSplit, _bytes, library_s, ours_s,
                                                 plan_tc_split)
from fusec.passes import attributes, cost_model
from fusec.passes.grouping import CLONED_INTO_GROUPS, form_group, use_owner, value_key


def _one_matmul(group: ir.Operation) -> bool:
    from fusec.compiler.targets.cuda.rewrites import _matmuls

    return group.name == GROUP_OP and len(group.results) == 1 and \
        attributes.PATH not in group.attributes and \
        attributes.GEMM_PAIR not in group.attributes and len(_matmuls(group)) == 1


def _outer(group: ir.Operation, value: ir.Value) -> ir.Value | None:
    """The function-level value a group's block argument `value` stands for."""
    if not isinstance(value.owner, ir.Block):
        return None
    return group.operands[ir.BlockArgument(value).arg_number]


def _best_s(tc: TcSplit, group: ir.Operation, device: cost_model.Device) -> float:
    """The faster of our kernel and cuBLASLt's call (with what it leaves) for one group."""
    ours, _ = ours_s(tc, device)
    library = plan_gemm_split(group)
    return ours if isinstance(library, str) else min(ours, library_s(tc, library, device)[0])


def _body(group: ir.Operation) -> list[ir.Operation]:
    return [o.operation for o in group.regions[0].blocks[0].operations][:-1]


def _try_pair(first: ir.Operation, second: ir.Operation, device: cost_model.Device) -> bool:
    """Merge `first` (whose result only `second` reads) into `second` where that makes one
    pair kernel the cost model predicts faster; returns whether it did."""
    from fusec.compiler.targets.cuda.rewrites import (_merge_operand_producers, group_style,
                                                      regroup)
    from fusec.passes.inline_groups import inline_group

    first = _merge_operand_producers(first)
    second = _merge_operand_producers(second)
    t1, t2 = plan_tc_split(first), plan_tc_split(second)
    if isinstance(t1, str) or isinstance(t2, str) or t1.split.prologue or t1.split.epilogue:
        return False
    a1, a2 = _outer(first, t1.operands.a.source), _outer(second, t2.operands.a.source)
    if a1 is None or a2 is None or value_key(a1) != value_key(a2):
        return False
    if (t1.operands.n, t1.operands.k) != (t2.operands.n, t2.operands.k):
        return False
    between = _bytes([first.results[0]])  # written by the first, read by the second
    apart = _best_s(t1, first, device) + _best_s(t2, second, device) + \
        2 * between / device.hbm_bytes_per_s
    saved = [(group_style(g), [o for o in _body(g) if o.name not in CLONED_INTO_GROUPS])
             for g in (first, second)]
    merged = regroup([first, second], [], second)
    tc = plan_tc_split(merged)
    paired = ours_s(tc, device)[0] if isinstance(tc, TcSplit) and tc.pair is not None \
        else None
    if paired is not None and paired < apart:  # (plan_tc_split checked pair_refusal)
        merged.attributes[attributes.GEMM_PAIR] = ir.StringAttr.get(
            f"paired: predicted {paired * 1e6:.1f} us against {apart * 1e6:.1f} us apart")
        return True
    inline_group(merged)  # not one pair kernel, or no faster: the two groups again
    for (kind, kept), ops in saved:
        form_group(ops, kind, kept)
    return False


def pair_gemm_groups(func: ir.Operation, options: CudaOptions | None = None) -> int:
    """Merge each matmul group into the matmul group that reads its result where the two
    are one pair kernel of our tensor-core GEMM, faster than apart (module docstring).
    Returns how many pairs were formed."""
    from fusec.compiler.targets.cuda.rewrites import _matmuls, groups_of, tc_gemm_enabled

    if not tc_gemm_enabled(options) or not options.gemm_pair:
        return 0
    device = options.description
    count = 0
    tried: set[tuple[int, int]] = set()  # by their matmuls: the groups are formed anew
    while True:
        found = None
        for second in groups_of(func):
            if not _one_matmul(second):
                continue
            for operand in second.operands:
                first = defining(operand)
                if first is None or not _one_matmul(first) or \
                        any(use_owner(u) != second for u in first.results[0].uses):
                    continue
                key = (id_of(_matmuls(first)[0]), id_of(_matmuls(second)[0]))
                if key not in tried:
                    found = first, second, key
                    break
            if found:
                break
        if found is None:
            return count
        first, second, key = found
        tried.add(key)
        if _try_pair(first, second, device):
            count += 1
