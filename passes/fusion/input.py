"""--fusion-input: kernels that read the same large input share one kernel, reading it once.

Runs after groups are formed (in `--fusion-plan`: after singletons, before horizontal
fusion). Two kernels that both read a large tensor, and between which no data flows, each
stream it from HBM; merged into one group of kind `input` (XLA's input fusion, a multi-output
fusion over one operand), the input is loaded once per tile and feeds both. The cost model
decides (`cost_model.input_reread_pays`, `cost_model.input_fusion_estimate`): the bytes
saved and the launch saved against what the merged kernel costs.

Refused, with the reason recorded on the later kernel (`fusion.refused`, shown by `fusec
--report`):
- `small-input`: reading the input again costs less than a launch (and it is likely still
  in L2): the merged kernel is not worth its shape; horizontal fusion handles launch-bound
  kernels;
- `dependent`: data flows from one kernel to the other (directly or through other kernels):
  one kernel would have to wait for itself;
- `incompatible-iteration-space`: the readers do not walk the input the same way (one
  reduces rows and the other columns, a transposed or broadcast read, a wider tensor in one
  kernel), or a kernel's result is not computed row by row over the input: one kernel
  tiles its input one way only (`--fusion-tile` tiles the merged kernel's roots together,
  one loop over the input's rows);
- `not-one-kernel`: a kernel holds an op that the code generators do not emit as part of one
  row or elementwise kernel (a contraction, a convolution, a named op): merged, it would run
  on a slower fallback;
- `over-capacity`: the merged kernel's row would not stay on chip;
- `slower`: the cost model predicts no gain.
A merged group holds at most `max-ops` ops; consumers beyond it form the next group.

Before (device=nvidia-h200; %x is 64 MB):
    %e = fusion.group single (%a = %x : tensor<4096x4096xf32>) { exp }
    %s = fusion.group single (%b = %x : tensor<4096x4096xf32>) { sum over dim 1 }
After:
    %r:2 = fusion.group input (%a = %x : tensor<4096x4096xf32>) attributes {
        fusion.shared_input_bytes = 67108864, fusion.parts = ["single", "single"], ...} {
      exp; sum over dim 1
      fusion.yield %exp, %sum
    }

Options: device (nvidia-h200 | cpu), max-ops (group size cap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlir.ir as ir
from fusec.passes import attributes, cost_model
from fusec.passes.fusion.analysis import (
    CONTRACTION,
    FILL,
    RESHAPE,
    OpFacts,
    describe,
    element_bytes,
    short_location,
    tensor_bytes,
    tensor_shape,
)
from fusec.passes.fusion.form_singletons import function_bodies
from fusec.passes.fusion.horizontal import _ancestors
from fusec.passes.fusion.producer_fusion import group_attributes, group_bytes, record_group
from fusec.passes.grouping import CLONED_INTO_GROUPS, form_group, op_key, value_key
from fusec.passes.inline_groups import inline_group
from fusec.passes.registry import Pass, register
from fusec.passes.targets import kernel_ops

KIND = "input"


@dataclass
class Consumer:
    """One kernel reading the shared input."""

    group: ir.Operation
    index: int  # position among the block's groups
    readers: list[tuple[OpFacts, int]]  # (facts, operand number) of its ops reading the input

    @property
    def where(self) -> str:
        return f"group@{short_location(self.group)}"


def _body_ops(group: ir.Operation) -> list[ir.Operation]:
    return [op.operation for op in group.regions[0].blocks[0].operations]


def _op_count(group: ir.Operation) -> int:
    return sum(1 for op in _body_ops(group)
               if op.name != "fusion.yield" and op.name not in CLONED_INTO_GROUPS)


def _readers(group: ir.Operation, value: ir.Value) -> list[tuple[OpFacts, int]]:
    """The group's ops that read `value` (through its block argument), with the operand."""
    body = group.regions[0].blocks[0]
    found = []
    ops = _body_ops(group)
    for arg, operand in zip(body.arguments, group.operands):
        if operand != value:
            continue
        for use in arg.uses:
            owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
            position = next((i for i, op in enumerate(ops) if op == owner), 0)
            found.append((describe(owner, position), use.operand_number))
    return found


def _reduced_input_dims(facts: OpFacts, operand: int, rank: int) -> set[int] | None:
    """The input dims `facts` reduces over, or None when it does not read the input as one
    row kernel would (every loop following one input dim, in order)."""
    if operand >= len(facts.operand_maps) or facts.operand_maps[operand] is None:
        return None
    dims = facts.operand_maps[operand]
    if len(dims) != rank or any(d is None or d < 0 for d in dims):
        return None
    if list(dims) != sorted(dims) or len(facts.loop_ranges) != rank:
        return None  # a transposed read, or loops the input does not follow (a broadcast)
    return {i for i, loop in enumerate(dims) if not facts.loop_parallel[loop]}


def _own_problem(member: Consumer, shape: list[int],
                 device: cost_model.Device) -> tuple[str, str] | None:
    """(code, reason) why `member` cannot be part of any one row/elementwise kernel over the
    input, or None."""
    numel = math.prod(shape)
    for op in _body_ops(member.group):
        # What one row or elementwise kernel is made of: the target's answer.
        if op.name not in kernel_ops(device.name).ops and op.name != "fusion.yield":
            return ("not-one-kernel", f"{member.where} holds '{op.name}': the code generator "
                    f"emits a merged group with it on its one-thread-per-tile fallback")
        for value in list(op.operands) + list(op.results):
            other = tensor_shape(value.type)
            if other is not None and math.prod(other) > numel:
                return ("incompatible-iteration-space", f"{member.where} computes a tensor "
                        f"of {other}, wider than the shared input {shape}: another "
                        f"iteration space")
    for facts, operand in member.readers:
        if _reduced_input_dims(facts, operand, len(shape)) is None:
            return ("incompatible-iteration-space", f"{member.where} reads the input "
                    f"through {facts.name}@{facts.location} transposed or broadcast: not "
                    f"one tile order")
    # The merged kernel tiles its roots (the ops whose results leave it) together, one loop
    # over the input's rows: each root must iterate over the input's shape (what it reduces
    # counts with the readers', `_reduced`).
    for facts in _roots(member.group):
        if facts.loop_ranges != shape:
            return ("incompatible-iteration-space", f"{member.where} ends in "
                    f"{facts.name}@{facts.location} over loops {facts.loop_ranges}: its tiles "
                    f"do not line up with the rows of the input {shape}")
    return None


def _roots(group: ir.Operation) -> list[OpFacts]:
    """The facts of the ops whose results the group yields."""
    ops = _body_ops(group)
    found = []
    for value in ops[-1].operands:
        owner = value.owner
        if isinstance(owner, ir.Block):
            continue
        owner = owner.operation if hasattr(owner, "operation") else owner
        if owner.name in ("tensor.expand_shape", "tensor.collapse_shape"):
            continue  # a view of a root: the root itself is checked through its own result
        position = next((i for i, op in enumerate(ops) if op == owner), 0)
        found.append(describe(owner, position))
    return found


def _reduced(member: Consumer, rank: int) -> set[int]:
    """The input dims the member's readers and roots reduce over (all read it in order)."""
    dims: set[int] = set()
    for facts, operand in member.readers:
        dims |= _reduced_input_dims(facts, operand, rank) or set()
    for facts in _roots(member.group):  # over the input's loops (checked)
        dims |= {d for d, parallel in enumerate(facts.loop_parallel) if not parallel}
    return dims


def _joint_problem(reduced: set[int], shape: list[int], elem: int,
                   device: cost_model.Device) -> tuple[str, str] | None:
    """Why readers reducing `reduced` input dims together are not one row kernel, or None."""
    if reduced - {len(shape) - 1}:
        return ("incompatible-iteration-space", f"the readers reduce input dims "
                f"{sorted(reduced)} of {shape}: one kernel walks the input in rows "
                f"(reductions over the last dim only)")
    # A row kernel keeps each row on chip while it is reduced: it must fit.
    if reduced and not cost_model.reduction_row_fits(shape[-1], elem, device):
        return ("over-capacity", f"a row of {shape[-1]} x {elem} B does not stay on chip on "
                f"{device.name} ({device.on_chip_bytes} B)")
    return None


def _kernel(group: ir.Operation) -> tuple[int, int, bool]:
    """(bytes, flops, is_contraction) of one group as its own kernel."""
    flops, contraction = 0, False
    for i, op in enumerate(_body_ops(group)):
        if op.name == "fusion.yield" or op.name in CLONED_INTO_GROUPS:
            continue
        facts = describe(op, i)
        if facts.category not in (FILL, RESHAPE):
            flops += facts.flops
        contraction |= facts.category == CONTRACTION
    return group_bytes(group), flops, contraction


def _fused_bytes(members: list[Consumer]) -> int:
    """HBM bytes of the merged kernel: each distinct input once, every result once."""
    seen: list[ir.Value] = []
    total = 0
    for member in members:
        for v in member.group.operands:
            if not any(v == s for s in seen):
                seen.append(v)
                total += tensor_bytes(v.type)
        total += sum(tensor_bytes(r.type) for r in member.group.results)
        for op in _body_ops(member.group):
            if op.name == "arith.constant" and len(op.results):
                total += tensor_bytes(op.results[0].type)
    return total


def _refuse(consumer: Consumer, other: Consumer, code: str, detail: str) -> None:
    text = f"{other.where}: input: {code}: {detail}"
    attrs = consumer.group.attributes
    old = [ir.StringAttr(a).value for a in attrs[attributes.REFUSED]] \
        if attributes.REFUSED in attrs else []
    if text not in old:
        attrs[attributes.REFUSED] = ir.ArrayAttr.get([ir.StringAttr.get(t) for t in old + [text]])


def _merge(members: list[Consumer], shared_bytes: int, device: cost_model.Device,
           estimate: cost_model.FusionEstimate) -> ir.Operation:
    """Inline the members and wrap all their ops in one `input` group."""
    refused: list[str] = []
    kinds: list[str] = []
    for m in members:
        kinds.append(ir.StringAttr(m.group.attributes["kind"]).value)
        if attributes.REFUSED in m.group.attributes:
            refused += [ir.StringAttr(a).value for a in m.group.attributes[attributes.REFUSED]]
    ops: list[ir.Operation] = []
    for m in members:
        body_ops = _body_ops(m.group)[:-1]
        inline_group(m.group)
        ops += [op for op in body_ops if op.name not in CLONED_INTO_GROUPS]
    # The members are independent (checked): the set is convex and form_group cannot fail.
    group = form_group(ops, KIND)
    attrs = group_attributes(group, device)
    i64 = ir.IntegerType.get_signless(64)
    attrs[attributes.PARTS] = ir.ArrayAttr.get([ir.StringAttr.get(k) for k in kinds])
    attrs[attributes.SHARED_INPUT_BYTES] = ir.IntegerAttr.get(i64, shared_bytes)
    saved = estimate.bytes_unfused - estimate.bytes_fused
    record_group(group, attrs, device,
                 f"{len(members)} kernels read one input of {shared_bytes} B: read once, saves "
                 f"{saved} B and {len(members) - 1} launch{'es' if len(members) > 2 else ''} "
                 f"({estimate.time_unfused_s * 1e6:.1f} -> {estimate.time_fused_s * 1e6:.1f} us)",
                 refused)
    return group


def _consumers_by_value(groups: list[ir.Operation]
                        ) -> list[tuple[tuple[int, int], ir.Value, list[int]]]:
    """Each tensor value read by two or more groups (its key, the value, the readers' indices
    in order)."""
    found: dict[tuple[int, int], tuple[ir.Value, list[int]]] = {}
    for i, group in enumerate(groups):
        if ir.StringAttr(group.attributes["kind"]).value == "attention":
            continue  # a kernel family of its own (--fusion-attention): never merged
        for v in group.operands:
            if tensor_shape(v.type) is None:
                continue
            entry = found.setdefault(value_key(v), (v, []))
            if not entry[1] or entry[1][-1] != i:
                entry[1].append(i)
    return [(key, v, readers) for key, (v, readers) in found.items() if len(readers) > 1]


def _plan_one(value: ir.Value, indices: list[int], groups: list[ir.Operation],
              ancestors: list[int], device: cost_model.Device,
              max_ops: int) -> tuple[list[Consumer], cost_model.FusionEstimate] | None:
    """The first bucket of consumers of `value` worth merging, recording every refusal."""
    shape = tensor_shape(value.type) or []
    shared = tensor_bytes(value.type)
    elem = element_bytes(ir.RankedTensorType(value.type).element_type)
    # A kernel already at the size cap takes no more: the first with room starts the bucket.
    sizes = {i: _op_count(groups[i]) for i in indices}
    indices = [i for i in indices if sizes[i] < max_ops]
    if len(indices) < 2:
        return None
    consumers = [Consumer(groups[i], i, _readers(groups[i], value)) for i in indices]
    first = consumers[0]
    if not cost_model.input_reread_pays(shared, device):
        for c in consumers[1:]:
            _refuse(c, first, "small-input",
                    f"a second read of {shared} B costs "
                    f"{shared / device.hbm_bytes_per_s * 1e6:.2f} us, less than a launch "
                    f"({device.launch_s * 1e6:.1f} us) on {device.name}")
        return None
    problems = [_own_problem(c, shape, device) for c in consumers]
    first = next((c for c, p in zip(consumers, problems) if p is None), None)
    if first is None:
        for c, problem in zip(consumers[1:], problems[1:]):
            _refuse(c, consumers[0], *problem)
        return None
    bucket, mask, ops = [first], 1 << first.index, sizes[first.index]
    reduced = _reduced(first, len(shape))
    for c, problem in zip(consumers, problems):
        if c is first:
            continue
        # Groups are in block order: a later one may depend on the bucket, never the reverse.
        if c.index > first.index and ancestors[c.index] & mask:
            _refuse(c, first, "dependent", "data flows from that kernel to this one: merged, "
                    "the kernel would wait for itself")
            continue
        if problem is not None:
            _refuse(c, first, *problem)
            continue
        joint = reduced | _reduced(c, len(shape))
        problem = _joint_problem(joint, shape, elem, device)
        if problem is not None:
            _refuse(c, first, *problem)
            continue
        if ops + sizes[c.index] > max_ops:
            continue  # the size cap: not a refusal, a later bucket takes it
        bucket.append(c)
        mask, ops, reduced = mask | (1 << c.index), ops + sizes[c.index], joint
    if len(bucket) < 2:
        return None
    estimate = cost_model.input_fusion_estimate([_kernel(m.group) for m in bucket],
                                                _fused_bytes(bucket), device)
    if not estimate.pays:
        _refuse(bucket[-1], first, "slower",
                f"predicted {estimate.time_fused_s * 1e6:.1f} us merged against "
                f"{estimate.time_unfused_s * 1e6:.1f} us apart")
        return None
    return bucket, estimate


def fuse_inputs(block: ir.Block, device: cost_model.Device, max_ops: int) -> int:
    """Merge the consumers of shared large inputs in `block`; returns the merges made.

    One scan over the values plans and merges every bucket that is unrelated (no path either
    way) to the buckets merged before it in the scan: joining it cannot close a cycle
    through them. A bucket that is related is left for the next scan, which starts from the
    merged groups' new dependences. Values whose consumers were planned and not merged are
    settled: a merge only joins kernels and adds dependences, so their plan cannot change.
    """
    merges = 0
    settled: set[tuple[int, int]] = set()
    while True:
        groups, ancestors = _ancestors(block)
        merged_mask = merged_ancestors = 0
        erased: set[int] = set()  # keys of the groups merged (erased) in this scan
        again = False
        for key, value, indices in _consumers_by_value(groups):
            if key in settled:
                continue
            if key[0] in erased:
                again = True  # a result of a merged group: the value is gone; next scan
                continue
            live = [i for i in indices if not merged_mask >> i & 1]
            if len(live) < len(indices):
                again = True  # a consumer was merged this scan: plan the rest next scan
                continue
            planned = _plan_one(value, live, groups, ancestors, device, max_ops)
            if planned is None:
                settled.add(key)
                continue
            bucket, estimate = planned
            mask = sum(1 << m.index for m in bucket)
            reach = 0
            for m in bucket:
                reach |= ancestors[m.index]
            if reach & merged_mask or merged_ancestors & mask:
                again = True
                continue
            erased.update(op_key(m.group) for m in bucket)
            _merge(bucket, tensor_bytes(value.type), device, estimate)
            merges += 1
            merged_mask |= mask
            merged_ancestors |= reach
            again = True  # consumers beyond the size cap may form another kernel
        if not again:
            return merges


@register
@dataclass
class FuseInputPass(Pass):
    """Merge independent kernels that read one large input into one `input` group."""

    ARGUMENT = "fusion-input"
    device: str = "cpu"  # the default target of `fusec` too; nvidia-h200 for the GPU
    max_ops: int = 128

    def run(self, module: ir.Operation) -> None:
        device = cost_model.device_named(self.device)
        for block in function_bodies(module):
            fuse_inputs(block, device, self.max_ops)
