"""--fusion-horizontal: independent, launch-bound kernels share one launch.

Runs after groups are formed. Kernels whose predicted run time (their roofline floor) is
below the device's launch overhead gain nothing from running alone: a launch costs more than
their work. Such kernels, when no data flows between them, are merged into one group of
kind `horizontal` (its parts keep their own roots; nothing is shared but the launch). A
kernel is only merged with kernels within `window` groups of it, and a merged group holds at
most `max-ops` ops, so the pass is linear in the number of groups; dependence is tracked as
bitsets of ancestor groups.

Before:
    %a = fusion.group vertical (%x = %in0 ...) { ... }    // 3 us of work, 4 us launch
    %b = fusion.group single (%y = %in1 ...) { ... }      // independent of %a
After:
    %r:2 = fusion.group horizontal (%x = %in0, %y = %in1) attributes {fusion.launches_saved = 1} {
      ... both bodies ...
      fusion.yield %a', %b'
    }

Options: device (nvidia-h200 | cpu), window, max-ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlir.ir as ir
from fusec.passes import attributes, cost_model
from fusec.passes.fusion.analysis import CONTRACTION, describe, short_location
from fusec.passes.fusion.form_singletons import function_bodies
from fusec.passes.fusion.producer_fusion import group_attributes, group_bytes, record_group
from fusec.passes.grouping import CLONED_INTO_GROUPS, defining_op, form_group, op_key
from fusec.passes.inline_groups import inline_group
from fusec.passes.registry import Pass, PassError, register
from fusec.passes.targets import kernel_ops


def _group_floor_s(group: ir.Operation, device: cost_model.Device) -> float:
    """The roofline floor of one group, from its IR."""
    flops, contraction = 0, False
    for i, op in enumerate(group.regions[0].blocks[0].operations):
        op = op.operation
        if op.name in ("fusion.yield",) or op.name in CLONED_INTO_GROUPS:
            continue
        facts = describe(op, i)
        flops += facts.flops
        contraction |= facts.category == CONTRACTION
    return cost_model.roofline_s(group_bytes(group), flops, device, contraction)


VIEWS = frozenset({"tensor.expand_shape", "tensor.collapse_shape"})


def _only_views(group: ir.Operation) -> bool:
    """`group` holds reshapes only (and the constants cloned into it)."""
    return all(op.operation.name in VIEWS or op.operation.name in CLONED_INTO_GROUPS
               for op in group.regions[0].blocks[0].operations
               if op.operation.name != "fusion.yield")


def _op_count(group: ir.Operation) -> int:
    return sum(1 for op in group.regions[0].blocks[0].operations
               if op.operation.name != "fusion.yield"
               and op.operation.name not in CLONED_INTO_GROUPS)


def _ancestors(block: ir.Block) -> tuple[list[ir.Operation], list[int]]:
    """The block's groups in order, and for each the bitset of groups it depends on
    (through any chain of ops outside groups)."""
    groups: list[ir.Operation] = []
    index: dict[int, int] = {}
    reach: dict[int, int] = {}  # op key -> bitset of groups it depends on (or is)
    for op in block.operations:
        op = op.operation
        bits = 0
        for operand in op.operands:
            producer = defining_op(operand)
            if producer is not None:
                bits |= reach.get(op_key(producer), 0)
        key = op_key(op)
        if op.name == "fusion.group":
            index[key] = len(groups)
            groups.append(op)
            reach[key] = bits | (1 << index[key])
        else:
            reach[key] = bits
    ancestors = [reach[op_key(g)] & ~(1 << i) for i, g in enumerate(groups)]
    return groups, ancestors


def _merge(members: list[ir.Operation], device: cost_model.Device) -> ir.Operation | None:
    """Inline `members` and wrap all their ops in one horizontal group."""
    refused: list[str] = []
    kinds: list[str] = []
    for g in members:
        kinds.append(ir.StringAttr(g.attributes["kind"]).value)
        if attributes.REFUSED in g.attributes:
            refused += [ir.StringAttr(a).value for a in g.attributes[attributes.REFUSED]]
    ops: list[ir.Operation] = []
    for g in members:
        body_ops = [op.operation for op in g.regions[0].blocks[0].operations][:-1]
        inline_group(g)
        ops += [op for op in body_ops if op.name not in CLONED_INTO_GROUPS]
    try:
        group = form_group(ops, "horizontal")
    except PassError:
        return None  # cannot happen for independent members; leave the ops ungrouped
    attrs = group_attributes(group, device)
    i64 = ir.IntegerType.get_signless(64)
    attrs[attributes.LAUNCHES_SAVED] = ir.IntegerAttr.get(i64, len(members) - 1)
    attrs[attributes.PARTS] = ir.ArrayAttr.get([ir.StringAttr.get(k) for k in kinds])
    record_group(group, attrs, device,
                 f"{len(members)} independent launch-bound kernels in one launch", refused)
    return group


def emitter_refusal_in(group: ir.Operation, device: cost_model.Device) -> str | None:
    """The first op of `group` the device's row/elementwise emitter would refuse, with why
    (None: none); the target says (fusec.passes.targets.kernel_ops)."""
    refusal = kernel_ops(device.name).refusal
    for op in group.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "fusion.yield":
            continue
        why = refusal(op)
        if why is not None:
            return f"{op.name}@{short_location(op)}: {why}"
    return None


def _domain(group: ir.Operation) -> tuple[int, int]:
    """(elements, last dim) of the widest tensor `group` reads or writes: its kernel's
    domain on the GPU (a row sum's input, an elementwise op's result), as rows of the last
    dim."""
    widest = (1, 1)
    for r in list(group.operands) + list(group.results):
        if isinstance(r.type, ir.ShapedType) and ir.ShapedType(r.type).has_static_shape:
            shape = ir.ShapedType(r.type).shape
            if math.prod(shape) > widest[0]:
                widest = (math.prod(shape), shape[-1] if shape else 1)
    return widest


def _one_domain(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether groups over domains `a` and `b` can be one kernel of the fast emitter: the
    same number of elements, or the smaller one a value per row of the larger (BERT's
    [B, 1, 1, T] padding mask beside its embeddings' [B, T, d] LayerNorm)."""
    (big, cols), small = max(a, b), min(a, b)[0]
    return small == big or small * cols == big


def _record_refusal(group: ir.Operation, text: str) -> None:
    old = [ir.StringAttr(a).value for a in group.attributes[attributes.REFUSED]] \
        if attributes.REFUSED in group.attributes else []
    group.attributes[attributes.REFUSED] = ir.ArrayAttr.get(
        [ir.StringAttr.get(r) for r in old + [text]])


def _has_partner(i: int, candidates: list[bool], ancestors: list[int], window: int) -> bool:
    """Whether another launch-bound group within `window` of group `i` is independent of it
    (so that a refusal to merge them is worth recording)."""
    for j in range(max(0, i - window), min(len(candidates), i + window + 1)):
        if j != i and candidates[j] and not (ancestors[j] >> i) & 1 \
                and not (ancestors[i] >> j) & 1:
            return True
    return False


def plan_horizontal(groups: list[ir.Operation], ancestors: list[int], device: cost_model.Device,
                    window: int, max_ops: int) -> list[list[int]]:
    """Buckets of group indices to merge: launch-bound, independent, within the window."""
    # A serial loop nest (fusion.serial, a lowered tm_tensor op) runs on one thread: merged
    # with a tiled part, every tile would run it again.
    # A group of reshapes alone is a view, no kernel: merged, it would become a copy.
    small = [_group_floor_s(g, device) < device.launch_s and
             ir.StringAttr(g.attributes["kind"]).value not in ("horizontal", "attention") and
             attributes.SERIAL not in g.attributes and not _only_views(g) for g in groups]
    candidates = list(small)
    for i, g in enumerate(groups):
        # A horizontal group has one output per part: on the GPU, one the fast emitter
        # refuses is split per output again by code generation (no launch saved).
        if not small[i] or cost_model.multi_output_kernel_ok(False, device):
            continue
        why = emitter_refusal_in(g, device)
        if why is None:
            continue
        small[i] = False
        if _has_partner(i, candidates, ancestors, window):
            _record_refusal(g, f"group@{short_location(g)}: horizontal: fast-emitter: {why}; "
                            f"a multi-output kernel of it would be split per output on "
                            f"{device.name}")
    # The fast emitter builds one domain per kernel, fixed by its widest tensor: parts over
    # domains of other sizes (GPT-2's [T, T] causal mask beside its [T, d] embeddings) would
    # be split per output again; a row sum beside an elementwise op over the same rows is one
    # row kernel.
    one_domain = not cost_model.multi_output_kernel_ok(False, device)
    domains = [_domain(g) for g in groups]
    sizes = [_op_count(g) for g in groups]
    taken: set[int] = set()
    buckets: list[list[int]] = []
    for i in range(len(groups)):
        if not small[i] or i in taken:
            continue
        bucket, mask, ops = [i], 1 << i, sizes[i]
        for j in range(i + 1, min(len(groups), i + 1 + window)):
            if not small[j] or j in taken or ops + sizes[j] > max_ops or \
                    one_domain and not _one_domain(domains[i], domains[j]):
                continue
            # independent both ways: j does not depend on the bucket (the bucket, being
            # earlier, cannot depend on j)
            if ancestors[j] & mask:
                continue
            bucket.append(j)
            mask |= 1 << j
            ops += sizes[j]
        if len(bucket) > 1:
            buckets.append(bucket)
            taken.update(bucket)
    return buckets


@register
@dataclass
class FuseHorizontalPass(Pass):
    """Merge independent launch-bound groups into one horizontal group."""

    ARGUMENT = "fusion-horizontal"
    device: str = "cpu"  # the default target of `fusec` too; nvidia-h200 for the GPU
    window: int = 8
    max_ops: int = 128

    def run(self, module: ir.Operation) -> None:
        device = cost_model.device_named(self.device)
        for block in function_bodies(module):
            groups, ancestors = _ancestors(block)
            for bucket in plan_horizontal(groups, ancestors, device, self.window, self.max_ops):
                _merge([groups[i] for i in bucket], device)
