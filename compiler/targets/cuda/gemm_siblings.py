"""CUDA target: sibling matmuls of one A become one kernel (`--fusion-gpu-sibling-gemms`).

Attention's q, k and v projections (three Linears of one input: BERT, ViT, LLaMA, T5,
Whisper), and any GEMMs over one A that do not read each other's results, reach here as
groups of their own, each our tensor-core GEMM with its epilogue (bias, scale, casts, a
folded norm's row scale). One kernel computes them all (`wgmma.GemmProblem.segments`): its
columns are the siblings' Ns concatenated, each tile in one sibling's columns, reading that
sibling's B through its own TMA map and running that sibling's epilogue into its own output
(an `scf.index_switch` on the tile's segment). A is read once for all, the tiles of all of
them share one grid (three small GEMMs of a wave each become one wave) and two launches go.

Groups S1..Sn join when

- each is our tensor-core GEMM whole (`fusion.path = "tc_gemm"`, one matmul, no pair);
- they read the same A the same way, with B matrices of one K, type and layout
  (`tc_gemm.sibling_refusal`), and store one type;
- none reads another's result, directly or through other ops (the merged group would
  depend on itself);
- the segments fit a tile (every N but the last a multiple of BN: `wgmma.refusal`;
  `tc_gemm.segment_order` puts one ragged N last, and a second ragged sibling stays out);
- and the cost model predicts the one kernel faster than the kernels apart
  (`tc_gemm.siblings_s` against the sum of each one's own prediction, `ours_s`).

The merged group keeps the first sibling's attributes, both predictions in `fusion.why` and
`fusion.gemm_siblings`. Runs after `--fusion-gpu-split-matmuls` (which chose each
sibling's kernel); `--no-cuda-gemm-siblings` keeps them apart.

Before:
    %q = fusion.group epilogue (%a = %x, %w = %wq, %b = %bq) {fusion.path = "tc_gemm"} {
      linalg.matmul ins(%a, %w^T); bias }
    %k = fusion.group epilogue (%a = %x, %w = %wk, %b = %bk) {fusion.path = "tc_gemm"} {...}
After:
    %q, %k = fusion.group epilogue (%a = %x, ...) {fusion.path = "tc_gemm",
                                                   fusion.gemm_siblings = "..."} {
      linalg.matmul ins(%a, %wq^T); bias; linalg.matmul ins(%a, %wk^T); bias }
"""

from __future__ import annotations

import mlir.ir as ir
from fusec.compiler.targets.cuda.device import GROUP_OP
from fusec.compiler.targets.cuda.options import CudaOptions
from fusec.compiler.targets.cuda.tc_gemm import (TcSplit, ours_s, out_type_of,
                                                 plan_tc_siblings, plan_tc_split,
                                                 segment_order, sibling_refusal, siblings_s)
from fusec.passes import attributes, cost_model
from fusec.passes.grouping import CLONED_INTO_GROUPS, form_group, op_key, use_owner, value_key


def _candidate(group: ir.Operation) -> TcSplit | None:
    """The plan of a group that is our tensor-core GEMM whole (one matmul, no pair), or
    None. (Groups split-matmuls gave to cuBLASLt are not candidates: at a decode step's few
    rows the model predicts three of them merged into ours faster, 35 against 66 us for
    LLaMA-7B's q, k, v, but measured, RESULTS run 220, ours streams the weights at 55% of
    the bandwidth: 1.34x three cuBLASLt calls at one row, 0.82x at 16.)"""
    if group.name != GROUP_OP or attributes.PATH not in group.attributes or \
            ir.StringAttr(group.attributes[attributes.PATH]).value != "tc_gemm" or \
            attributes.GEMM_SIBLINGS in group.attributes or len(group.results) != 1:
        return None
    tc = plan_tc_split(group)
    if isinstance(tc, str) or tc.pair is not None or tc.split.prologue or tc.split.epilogue:
        return None
    return tc


def _outer(group: ir.Operation, value: ir.Value) -> ir.Value | None:
    """The function-level value a group's block argument `value` stands for."""
    if not isinstance(value.owner, ir.Block):
        return None
    return group.operands[ir.BlockArgument(value).arg_number]


def _downstream(group: ir.Operation) -> set[int]:
    """The ops of the function that read `group`'s results, directly or through others."""
    seen: set[int] = set()
    stack = [group]
    while stack:
        op = stack.pop()
        for result in op.results:
            for use in result.uses:
                user = use_owner(use)  # a function-level op (groups read block arguments)
                if op_key(user) in seen:
                    continue
                seen.add(op_key(user))
                stack.append(user)
    return seen


def _independent(groups: list[ir.Operation]) -> list[ir.Operation]:
    """The longest prefix-greedy set of `groups` none of which reads another's result."""
    chosen: list[ir.Operation] = []
    below: set[int] = set()
    for g in groups:
        after = _downstream(g)
        if op_key(g) in below or any(op_key(c) in after for c in chosen):
            continue
        chosen.append(g)
        below |= after
    return chosen


def _body(group: ir.Operation) -> list[ir.Operation]:
    return [o.operation for o in group.regions[0].blocks[0].operations][:-1]


def _merge(groups: list[ir.Operation], plans: list[TcSplit],
           device: cost_model.Device) -> bool:
    """Merge `groups` into one sibling group where the cost model predicts it faster and the
    merged group is one kernel of our GEMM; returns whether it did."""
    from fusec.compiler.targets.cuda.rewrites import group_style, regroup
    from fusec.passes.inline_groups import inline_group

    ordered = segment_order(plans)
    merged_s = siblings_s(ordered, device)
    apart = sum(ours_s(p, device)[0] for p in plans)
    if merged_s is None or merged_s[0] >= apart:
        return False
    saved = [(group_style(g), [o for o in _body(g) if o.name not in CLONED_INTO_GROUPS])
             for g in groups]
    merged = regroup(groups, [], groups[0])
    note = (f"{len(groups)} sibling GEMMs of one A in one kernel: predicted "
            f"{merged_s[0] * 1e6:.1f} us against {apart * 1e6:.1f} us apart")
    if isinstance(plan_tc_siblings(merged), list):
        merged.attributes[attributes.GEMM_SIBLINGS] = ir.StringAttr.get(note)
        merged.attributes[attributes.WHY] = ir.StringAttr.get(note)
        return True
    inline_group(merged)
    for (kind, kept), ops in saved:
        form_group(ops, kind, kept)
    return False


def merge_sibling_gemms(func: ir.Operation, options: CudaOptions | None = None) -> int:
    """Merge the tensor-core GEMM groups of `func` that read one A into one kernel each, where
    the module docstring's conditions hold. Returns how many groups were merged away."""
    from fusec.compiler.targets.cuda.rewrites import groups_of, tc_gemm_enabled

    if not tc_gemm_enabled(options) or not options.gemm_siblings:
        return 0
    device = options.description
    by_a: dict[int, list[tuple[ir.Operation, TcSplit]]] = {}
    for group in groups_of(func):
        tc = _candidate(group)
        if tc is None:
            continue
        a = _outer(group, tc.operands.a.source)
        if a is not None:
            by_a.setdefault(value_key(a), []).append((group, tc))
    count = 0
    for found in by_a.values():
        if len(found) < 2:
            continue
        first = found[0][1].operands
        # (The same A: grouped by it; each group's own block argument stands for it.)
        alike = [(g, tc) for g, tc in found
                 if sibling_refusal(first, tc.operands, same_a=True) is None and
                 _same_store(found[0][1], tc)]
        # One sibling whose N is no multiple of the tile's columns may join, as the last.
        ragged = [g for g, tc in alike if tc.operands.n % 128]
        alike = [(g, tc) for g, tc in alike if not tc.operands.n % 128 or g == ragged[0]]
        chosen = _independent([g for g, _ in alike])
        if len(chosen) < 2:
            continue
        plans = [tc for g, tc in alike if any(g == c for c in chosen)]
        if _merge(chosen, plans, device):
            count += len(chosen) - 1
    return count


def _same_store(a: TcSplit, b: TcSplit) -> bool:
    return out_type_of(a.operands.mm, a.chain) == out_type_of(b.operands.mm, b.chain)
