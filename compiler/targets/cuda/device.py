"""CUDA target: device."""

from __future__ import annotations

from fusec.passes import cost_model

GROUP_OP = "fusion.group"
DEFAULT_ARCH = "sm_90"
DEFAULT_FEATURES = "+ptx80"
KERNEL_MODULE = "fusec_kernels"

# numpy dtype names of the MLIR element types we handle.
DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
          "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "i1": "bool"}
ELEMENT_BYTES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1,
                 "i1": 1}
# Element types held in memory as a wider type: i1 as one byte per value.
MEMORY_ELEMENT = {"i1": "i8"}
STATIC_SHARED_BYTES = 48 * 1024  # what a kernel may declare statically

# A reduction's combining op (the op whose operand is the accumulator) -> gpu.all_reduce kind.
COMBINERS = {
    "arith.addf": "add", "arith.mulf": "mul", "arith.maximumf": "maximumf",
    "arith.minimumf": "minimumf", "arith.maxnumf": "maxnumf", "arith.minnumf": "minnumf",
    "arith.addi": "add", "arith.muli": "mul", "arith.maxsi": "maxsi", "arith.minsi": "minsi",
    "arith.maxui": "maxui", "arith.minui": "minui", "arith.andi": "and", "arith.ori": "or",
    "arith.xori": "xor",
}
# Integers narrower than a shuffle's 32 bits are combined across threads in i32: extended
# by sign for the signed combiners, by zero for the others (an i1 `any` / `all` is 0 / 1),
# then truncated back (the low bits of a sum or product do not depend on the extension).
SIGNED_COMBINERS = frozenset({"maxsi", "minsi"})


def shuffle_type(type_: str) -> str:
    """The type a block combines values of `type_` in (gpu.shuffle and the per-warp slots
    take 32 and 64 bits): i32 for narrower integers, f32 for 16-bit floats."""
    if type_.startswith("i") and type_ != "index" and int(type_[1:]) < 32:
        return "i32"
    return "f32" if type_ in ("bf16", "f16") else type_
# Payload ops emitted as they stand (scalar, region-free, pure).
PAYLOAD_DIALECTS = ("arith.", "math.")


class CudaCodegenError(Exception):
    """A group cannot be compiled for CUDA; the message names the op and the reason."""


# ---------------------------------------------------------------- device and launch shapes


# One description of the GPU, the cost model's (passes/cost_model.py): the planner, the
# tiling and the launch shapes read the same numbers.
CudaDevice = cost_model.Device
H200 = cost_model.H200


# The launch shapes are the cost model's (one source of truth with the tiling of the `tiled`
# stage): re-exported here under the names the emitter and its tests use.
ElementwiseShape = cost_model.ElementwiseShape
RowShape = cost_model.RowShape
MAX_CHUNKS_PER_THREAD = cost_model.MAX_CHUNKS_PER_THREAD
ROW_BYTES_PER_THREAD = cost_model.ROW_BYTES_PER_THREAD


def elementwise_launch_shape(numel: int, element_bytes: int,
                             device: CudaDevice = H200, unroll: int = 0) -> ElementwiseShape:
    """`cost_model.elementwise_launch_shape` for `device`."""
    return cost_model.elementwise_launch_shape(numel, element_bytes, device, unroll)


def row_launch_shape(rows: int, cols: int, element_bytes: int,
                     device: CudaDevice = H200,
                     elements_per_thread: int = 0) -> RowShape:
    """`cost_model.row_launch_shape` for `device`; a row too long for registers is refused."""
    shape = cost_model.row_launch_shape(rows, cols, element_bytes, device, elements_per_thread)
    if shape is None:
        vec = cost_model.vector_width(cols, element_bytes, device)
        raise CudaCodegenError(
            f"row of {cols} elements is too long to keep in registers (more than "
            f"{MAX_CHUNKS_PER_THREAD} chunks of {vec} per thread); needs a multi-pass kernel")
    return shape


# A failed index check on the GPU (--fusion-guard-indices): the kernel cannot call the host,
# so the first failure of a run is recorded in this device global, [check + 1, index], which
# the runtime reads after the run (runtime/shim_cuda.c, fusec_index_status) and clears.
INDEX_STATUS = "fusec_index_status"
INDEX_STATUS_GLOBAL = (f'memref.global @{INDEX_STATUS} : memref<2xi64> = dense<0>')


