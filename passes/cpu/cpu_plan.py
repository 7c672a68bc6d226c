"""--fusion-cpu-plan: read the host function into the launch plan; keep only the kernels.

After bufferization the host function (the model's entry) is a straight line of
`memref.alloc` (temporaries), reshapes (views), `func.call @fusec_kernel_<n>` (launches)
and copies into its out-parameters. This pass turns it into a `fusec.runtime.plan.Plan`
(target "cpu"), stores the plan as JSON in the module attribute `fusion.plan`, and erases
the host function: from here on the module holds kernels only, and the runtime shim plays
the host's part. Buffer ids: the inputs, then the outputs, then the temporaries. A view
(collapse/expand_shape) is the buffer it views. A copy from a temporary into an output
makes the temporary that output; a copy from an input or another output makes the output
that buffer (the artifact copies).

After:
    module attributes {fusion.plan = "{\"target\": \"cpu\", \"buffers\": [...], ...}"} {
      func.func private @fusec_kernel_0(...) attributes {fusion.grid = 8 : i64, ...}
    }
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
from fusec.passes import attributes
from fusec.passes.cpu.cpu_tile_loops import kernel_functions, tile_loop
from fusec.passes.grouping import value_key
from fusec.passes.linalg.globals_to_state import STATE_ATTRIBUTE
from fusec.passes.linalg.scalars_to_tensors import SCALAR_RESULTS_ATTRIBUTE
from fusec.passes.registry import Pass, PassError, register
from fusec.runtime.plan import Buffer, Launch, Plan, State
from mlir import ir

PLAN_ATTRIBUTE = attributes.PLAN
VIEW_OPS = frozenset({"memref.collapse_shape", "memref.expand_shape", "memref.cast"})
IGNORED_OPS = frozenset({"memref.dealloc", "func.return", "arith.constant"})


def dtype_name(element: ir.Type) -> str:
    """numpy's name for an MLIR element type."""
    text = str(element)
    names = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
             "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "i1": "bool",
             "ui8": "uint8", "index": "int64"}
    if text not in names:
        raise PassError(f"no plan dtype for element type {text}")
    return names[text]


def host_functions(module: ir.Operation) -> list[ir.Operation]:
    """Functions with bodies that are not kernels."""
    return [op.operation for op in module.regions[0].blocks[0].operations
            if op.operation.name == "func.func" and attributes.KIND not in op.operation.attributes
            and len(op.operation.regions[0].blocks)]


class _PlanBuilder:
    """Walks a host function once; values map to plan buffer ids."""

    def __init__(self, host: ir.Operation, kernels: dict[str, ir.Operation]) -> None:
        self.host = host
        self.kernels = kernels
        self.buffers: list[Buffer] = []
        self.ids: dict[tuple, int] = {}
        self.globals: dict[str, int] = {}  # a constant global's symbol -> its buffer
        self.launches: list[Launch] = []

    def add_buffer(self, value: ir.Value, role: str, name: str) -> int:
        memref = ir.MemRefType(value.type)
        buffer = Buffer(len(self.buffers), role, name, list(memref.shape),
                        dtype_name(memref.element_type))
        self.buffers.append(buffer)
        self.ids[value_key(value)] = buffer.id
        return buffer.id

    def id_of(self, value: ir.Value, at: ir.Operation) -> int:
        key = value_key(value)
        if key not in self.ids:
            raise PassError(f"the plan has no buffer for an operand of '{at.name}'", at.location)
        return self.ids[key]

    def build(self) -> Plan:
        body = self.host.regions[0].blocks[0]
        n_inputs = ir.IntegerAttr(self.host.attributes[attributes.NUM_INPUTS]).value
        args = list(body.arguments)
        inputs = [self.add_buffer(a, "input", f"input{i}") for i, a in enumerate(args[:n_inputs])]
        outputs = [self.add_buffer(a, "output", f"output{i}")
                   for i, a in enumerate(args[n_inputs:])]
        temps = 0
        for op in body.operations:
            op = op.operation
            if op.name == "memref.alloc":
                self.add_buffer(op.results[0], "temp", f"temp{temps}")
                temps += 1
            elif op.name == "memref.get_global":
                # A weight the kernels read as an argument (--fusion-cpu-constant-args):
                # the host code points the buffer at the global's symbol.
                symbol = ir.FlatSymbolRefAttr(op.attributes["name"]).value
                if symbol in self.globals:  # read again for another launch: one buffer
                    self.ids[value_key(op.results[0])] = self.globals[symbol]
                else:
                    bid = self.add_buffer(op.results[0], "constant", symbol)
                    self.buffers[bid].symbol = symbol
                    self.globals[symbol] = bid
            elif op.name in VIEW_OPS:
                self.ids[value_key(op.results[0])] = self.id_of(op.operands[0], op)
            elif op.name == "func.call":
                launch = self.launch(op)
                # A kernel that computes nothing (its buffers hold no element: a cumsum over
                # a zero-size dim; or its body is empty: a sum over one, after its fill) is
                # not launched, and its function goes (CpuPlanPass.run).
                kernel = self.kernels.get(launch.symbol)
                empty = kernel is not None and all(
                    o.operation.name == "func.return"
                    for o in kernel.regions[0].blocks[0].operations)
                if not empty and any(0 not in self.buffers[b].shape for b in launch.buffers):
                    self.launches.append(launch)
            elif op.name == "memref.copy":
                self.copy(op, outputs)
            elif op.name not in IGNORED_OPS:
                raise PassError(f"'{op.name}' in the host function has no place in a CPU plan "
                                "(only kernel calls, allocations, views and copies)", op.location)
        plan = self.renumbered(Plan("cpu", self.buffers, self.launches, inputs, outputs))
        plan.states = host_states(self.host, plan)
        if SCALAR_RESULTS_ATTRIBUTE in self.host.attributes:
            plan.scalar_outputs = list(ir.DenseI64ArrayAttr(
                self.host.attributes[SCALAR_RESULTS_ATTRIBUTE]))
        return plan

    @staticmethod
    def renumbered(plan: Plan) -> Plan:
        """Drop temporaries that no launch uses (aliased away); ids become list positions."""
        used = {b for launch in plan.launches for b in launch.buffers}
        kept = [b for b in plan.buffers if b.role != "temp" or b.id in used]
        new_id = {b.id: i for i, b in enumerate(kept)}
        for b in kept:
            b.id = new_id[b.id]
            if b.copy_of is not None:
                b.copy_of = new_id[b.copy_of]
        for launch in plan.launches:
            launch.buffers = [new_id[b] for b in launch.buffers]
        return Plan(plan.target, kept, plan.launches, [new_id[b] for b in plan.inputs],
                    [new_id[b] for b in plan.outputs], plan.metadata, plan.states,
                    plan.scalar_outputs)

    def launch(self, call: ir.Operation) -> Launch:
        symbol = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        if symbol not in self.kernels:
            raise PassError(f"the host calls '{symbol}', which is not a kernel", call.location)
        kernel = self.kernels[symbol]
        _, grid = tile_loop(kernel)
        attrs = kernel.attributes
        ops = [ir.StringAttr(a).value for a in ir.ArrayAttr(attrs[attributes.OPS])] if (
            attributes.OPS in attrs) else []
        info = {}
        if attributes.TILE_SIZES in attrs:
            info["tile_sizes"] = list(ir.DenseI64ArrayAttr(attrs[attributes.TILE_SIZES]))
        for name in (attributes.BYTES, attributes.BYTES_SAVED, attributes.LAUNCHES_SAVED):
            if name in attrs and isinstance(attrs[name], ir.IntegerAttr):
                info[name.removeprefix("fusion.")] = ir.IntegerAttr(attrs[name]).value
        # A matmul kernel's tiling and where it came from (the tile pass's record): `--tune`
        # times each kernel by its key.
        info.update(attributes.tuning_info(attrs))
        if attributes.KERNEL_TILE in attrs:
            info["tile"] = list(ir.DenseI64ArrayAttr(attrs[attributes.KERNEL_TILE]))
        return Launch(symbol, [self.id_of(v, call) for v in call.operands], grid,
                      ir.StringAttr(attrs[attributes.KIND]).value, ops, info)

    def copy(self, op: ir.Operation, outputs: list[int]) -> None:
        source, target = self.id_of(op.operands[0], op), self.id_of(op.operands[1], op)
        if target not in outputs:
            raise PassError("a copy in the host function must fill a model output", op.location)
        if self.buffers[source].role == "temp":
            # The temporary is the output: every launch that wrote it writes the output.
            for launch in self.launches:
                launch.buffers = [target if b == source else b for b in launch.buffers]
            self.ids = {k: (target if v == source else v) for k, v in self.ids.items()}
        else:
            # An input (or a view of one) returned as is: the output keeps its own shape and
            # the host code copies the bytes (a view has the same bytes, row-major).
            self.buffers[target].copy_of = source


def host_states(host: ir.Operation, plan: Plan) -> list[State]:
    """The plan's states from the host's `fusion.state` (--fusion-globals-to-state)."""
    if STATE_ATTRIBUTE not in host.attributes:
        return []
    states = []
    for entry in ir.ArrayAttr(host.attributes[STATE_ATTRIBUTE]):
        entry = ir.DictAttr(entry)
        position = ir.IntegerAttr(entry["input"]).value
        output = ir.IntegerAttr(entry["output"]).value
        buffer = plan.buffers[plan.inputs[position]]
        init = _initial_bytes(entry["init"], buffer)
        states.append(State(ir.StringAttr(entry["name"]).value, position,
                            None if output < 0 else output, init.hex()))
    return states


def _initial_bytes(attr: ir.Attribute, buffer: Buffer) -> bytes:
    """The row-major bytes of a global's initial value, as the buffer's dtype lays them out."""
    dtype = np.dtype("uint8" if buffer.dtype == "bool" else buffer.dtype)
    if buffer.dtype == "bfloat16":
        raise PassError("a bfloat16 model global is not supported yet")
    dense = ir.DenseElementsAttr(attr)
    count = int(np.prod(buffer.shape, dtype=np.int64))
    if dense.is_splat:
        value = dense.get_splat_value()
        scalar = value.value if hasattr(value, "value") else float(value)
        if buffer.dtype == "bool":
            scalar = bool(scalar)
        return np.full(count, scalar, dtype).tobytes()
    return np.array(dense, dtype=dtype).reshape(-1).tobytes()


def extract_plan(module: ir.Operation) -> Plan:
    """The CPU plan of a bufferized module with one host function."""
    hosts = host_functions(module)
    if len(hosts) != 1:
        raise PassError(f"expected one host function, found {len(hosts)}")
    kernels = {ir.StringAttr(k.attributes["sym_name"]).value: k for k in kernel_functions(module)}
    return _PlanBuilder(hosts[0], kernels).build()


def read_plan(module: ir.Operation) -> Plan:
    """The plan stored by this pass in the module's `fusion.plan` attribute."""
    if PLAN_ATTRIBUTE not in module.attributes:
        raise PassError("the module has no fusion.plan (run --fusion-cpu-plan)")
    return Plan.from_json_dict(json.loads(ir.StringAttr(module.attributes[PLAN_ATTRIBUTE]).value))


@register
@dataclass
class CpuPlanPass(Pass):
    """Turn the bufferized host function into the launch plan (module attribute fusion.plan)."""

    ARGUMENT = "fusion-cpu-plan"

    def run(self, module: ir.Operation) -> None:
        plan = extract_plan(module)
        module.attributes[PLAN_ATTRIBUTE] = ir.StringAttr.get(json.dumps(plan.to_json_dict()))
        for host in host_functions(module):
            host.erase()
        launched = {launch.symbol for launch in plan.launches}
        for kernel in kernel_functions(module):  # (a kernel of empty buffers: not launched)
            if ir.StringAttr(kernel.attributes["sym_name"]).value not in launched:
                kernel.erase()
