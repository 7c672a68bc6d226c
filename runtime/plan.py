"""The contract between code generation and the artifact: what `model.so` runs, in order.

Code generation (compiler/targets/cpu, compiler/targets/cuda) produces a `Plan` and an
object file of kernels; compiler/artifact.py turns the plan into the C host code that, with
runtime/shim.c and the kernels, links into `model.so`. The plan is also embedded in the
artifact as JSON (`fusec_metadata()`), which is all the runtime needs to know.

Kernel ABI on the CPU: each kernel is an exported function

    void <symbol>(void **buffers, int64_t tile_begin, int64_t tile_end);

`buffers[i]` is the data pointer of the plan buffer `launch.buffers[i]` (dense, row-major,
static shape); the kernel runs tiles [tile_begin, tile_end) of its `grid` tiles, and tiles are
independent, so the shim splits them across threads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# dtype names as numpy spells them; the element size in bytes.
DTYPE_SIZES = {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
}
# Unsigned dtypes torch has and MLIR's signless integers do not say.
UNSIGNED_DTYPES = frozenset({"uint8"})


@dataclass
class Buffer:
    """One dense buffer: a model input, a model output, or a temporary between kernels."""

    id: int
    # "input" | "output" | "temp"; "constant": a weight. On the GPU its bytes are embedded
    # in the artifact (CudaProgram.constants) and uploaded once; on the CPU it is a global
    # of the kernels' object, `symbol`, that the host code points the buffer at.
    role: str
    name: str
    shape: list[int]
    dtype: str
    # An output whose bytes are those of another buffer (an input, or a reshape of one):
    # the host code copies them at the end of the run instead of a kernel writing them.
    copy_of: int | None = None
    # cuda only: a buffer that is bytes of another (a reshape, a slice of whole rows): it
    # starts `view_offset` bytes into buffer `view_of` and has no storage of its own.
    view_of: int | None = None
    view_offset: int = 0
    # cpu only: the symbol of a `constant` buffer's global.
    symbol: str | None = None

    @property
    def nbytes(self) -> int:
        n = DTYPE_SIZES[self.dtype]
        for d in self.shape:
            n *= d
        return n


@dataclass
class Launch:
    """One kernel launch: `symbol` over `grid` tiles, reading/writing `buffers` (plan ids)."""

    symbol: str
    buffers: list[int]
    grid: int
    kind: str = "single"
    ops: list[str] = field(default_factory=list)
    # Report data (predicted bytes, tile sizes, ...); free-form, JSON-serialisable.
    info: dict[str, Any] = field(default_factory=dict)
    # GPU only: block size and dynamic shared memory bytes.
    block: int = 0
    shared_bytes: int = 0
    # GPU only: "kernel" (a generated kernel, or the "__copy__" output copy) or "gemm" (a
    # library call, cuBLASLt; `gemm` holds its parameters, compiler/codegen_cuda.gemm_launch).
    launch_kind: str = "kernel"
    gemm: dict[str, Any] = field(default_factory=dict)
    # GPU only: tensor-map parameters the runtime encodes for this launch (the tensor-core
    # GEMM family's operands), FUSEC_MAP_FIELDS numbers each (runtime/shim_cuda.c).
    maps: list[list[int]] = field(default_factory=list)


@dataclass
class State:
    """Bytes the artifact keeps from one run to the next (a model global: an RNG seed).

    The model reads them as input `plan.inputs[input]` and, if `output` is not None, leaves
    their next value in output `plan.outputs[output]`; the caller sees neither: the host code
    passes its own storage, initialised to `init` (hex), and copies the output back after
    each run.
    """

    name: str
    input: int
    output: int | None
    init: str


@dataclass
class Plan:
    """Everything the host side of `model.so` does, in order."""

    target: str  # "cpu" | "cuda"
    buffers: list[Buffer]
    launches: list[Launch]
    # Output i is buffer `outputs[i]`; inputs likewise. An output may also be an input
    # (identity) — the host code copies it.
    inputs: list[int]
    outputs: list[int]
    metadata: dict[str, Any] = field(default_factory=dict)
    # Positions in `inputs`/`outputs` that are the artifact's own state, not the caller's.
    states: list[State] = field(default_factory=list)
    # Positions in `outputs` whose 0-d value the runtime returns as a Python number.
    scalar_outputs: list[int] = field(default_factory=list)

    def user_inputs(self) -> list[int]:
        """Positions in `inputs` that the caller passes (all but the states)."""
        hidden = {s.input for s in self.states}
        return [i for i in range(len(self.inputs)) if i not in hidden]

    def user_outputs(self) -> list[int]:
        """Positions in `outputs` that the caller receives (all but the states' next values)."""
        hidden = {s.output for s in self.states}
        return [i for i in range(len(self.outputs)) if i not in hidden]

    def to_json_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_json_dict(data: dict[str, Any]) -> "Plan":
        return Plan(
            target=data["target"],
            buffers=[Buffer(**b) for b in data["buffers"]],
            launches=[Launch(**k) for k in data["launches"]],
            inputs=list(data["inputs"]),
            outputs=list(data["outputs"]),
            metadata=dict(data.get("metadata", {})),
            states=[State(**x) for x in data.get("states", [])],
            scalar_outputs=list(data.get("scalar_outputs", [])),
        )


def apply_torch_signature(plan: Plan, signature: dict) -> None:
    """Give the plan's user inputs the names of the model's `forward` arguments, and its
    user inputs and outputs torch's unsigned dtype where MLIR's signless integer of the same
    width hid it (torch.uint8 is `i8` in torch-mlir's IR). `signature` is the frontend's
    `torch_signature`; one of another arity (not this program's) changes nothing."""
    by_id = {b.id: b for b in plan.buffers}
    for kind, positions, ids in (("inputs", plan.user_inputs(), plan.inputs),
                                 ("outputs", plan.user_outputs(), plan.outputs)):
        entries = signature.get(kind, [])
        if len(entries) != len(positions):
            continue
        for entry, position in zip(entries, positions):
            buffer = by_id[ids[position]]
            wanted = entry.get("dtype")
            same_width = DTYPE_SIZES.get(wanted) == DTYPE_SIZES.get(buffer.dtype)
            if wanted in UNSIGNED_DTYPES and same_width and buffer.dtype.startswith("int"):
                buffer.dtype = wanted
            name = entry.get("name")
            if name and (kind == "outputs" or name.isidentifier()):
                buffer.name = name
    if signature.get("outputs_as") == "dict":
        plan.metadata["outputs_as"] = "dict"
    if "outputs_tree" in signature:
        plan.metadata["outputs_tree"] = signature["outputs_tree"]
    if signature.get("updates") and len(signature.get("outputs", [])) == \
            len(plan.user_outputs()):
        # (input, output) positions: the model updates these inputs in place; the runtime
        # copies the outputs back into the caller's arrays and returns the others.
        plan.metadata["input_updates"] = [list(u) for u in signature["updates"]]


def name_user_outputs(plan: Plan) -> None:
    """`output0`, `output1`, ... for the caller's outputs, as the CPU plan names them (the
    CUDA code generator names buffers after the kernel that writes them)."""
    by_id = {b.id: b for b in plan.buffers}
    for i, position in enumerate(plan.user_outputs()):
        buffer = by_id[plan.outputs[position]]
        if buffer.role == "output":
            buffer.name = f"output{i}"
