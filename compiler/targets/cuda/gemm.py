"""CUDA target: gemm."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import mlir.ir as ir
from fusec.compiler.targets.cuda.analysis import parse_map, tensor_info, value_key
from fusec.compiler.targets.cuda.body import (
    GEMM_OPS,
    RESHAPE_OPS,
    cast_types,
    defining,
    evaluate_body,
    gelu_cone,
    samples,
    single_use,
    unary_kind,
)
from fusec.compiler.targets.cuda.device import DTYPES, ELEMENT_BYTES, CudaCodegenError
from fusec.compiler.targets.cuda.emitter import constant_bytes, id_of, is_weight
from fusec.compiler.targets.cuda.layouts import (
    StridedView,
    layout_generic,
    layout_source,
    matrix_layout,
    result_view,
    view_forward,
)
from fusec.passes import attributes, cost_model
from fusec.runtime.plan import Launch

# cudaDataType values (library_types.h).
CUDA_DATA_TYPES = {"f32": 0, "f16": 2, "bf16": 14}
CUBLAS_COMPUTE_32F = 68
CUBLAS_COMPUTE_32F_FAST_TF32 = 77  # fp32 operands rounded to TF32 on the tensor cores
# cublasLtEpilogue_t values.
CUBLASLT_EPILOGUES = {"default": 1, "relu": 2, "bias": 4, "relu_bias": 6, "gelu": 32,
                      "gelu_bias": 36}
# Bytes of cuBLASLt workspace the shim allocates once (NVIDIA recommends 32 MiB on Hopper).
GEMM_WORKSPACE_BYTES = 32 << 20


def bias_add(op: ir.Operation, result: ir.Value) -> ir.Value | None:
    """If `op` is `result + bias[col]` (bias a row vector over the last dim), the bias."""
    import numpy as np

    if op.name != "linalg.generic" or len(op.operands) != 3:
        return None
    maps = [parse_map(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if maps[0].num_dims != 2 or maps[2].results != (0, 1):
        return None
    ins = list(op.operands[:2])
    if value_key(ins[0]) == value_key(result) and maps[0].results == (0, 1) \
            and maps[1].results == (1,):
        bias = ins[1]
    elif value_key(ins[1]) == value_key(result) and maps[1].results == (0, 1) \
            and maps[0].results == (1,):
        bias = ins[0]
    else:
        return None
    a, b = samples(), samples()[::-1] * 0.37
    try:
        y = evaluate_body(op, [a, b, np.zeros_like(a)])
    except CudaCodegenError:
        return None
    return bias if np.allclose(y, a + b, rtol=1e-12, atol=0) else None


def swaps_last_two(op: ir.Operation) -> bool:
    perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
    n = len(perm)
    return n >= 2 and perm == list(range(n - 2)) + [n - 1, n - 2]


@dataclass
class GemmOperand:
    """What cuBLASLt reads for one matmul operand: `source` (a group input or a weight) through
    `view` (where each operand element lives in the source's buffer), the layout ops between
    (`ops`: transposes, reshapes, slices, broadcasts, casts to f32) absorbed."""

    source: ir.Value
    view: StridedView
    element: str  # element type of `source` (cuBLASLt's input type)
    ops: list[ir.Operation]

    @property
    def transposed(self) -> bool:
        layout = matrix_layout(self.view, ELEMENT_BYTES.get(self.element, 4))
        return bool(layout and layout.transposed)


def layout_walk(value: ir.Value, casts: bool = True) -> list[ir.Operation]:
    """The layout ops (`layout_source`) from `value` back, each result used once (casts
    among them unless `casts` is False)."""
    chain: list[ir.Operation] = []
    while True:
        op = defining(value)
        if op is None or not single_use(value):
            return chain
        src = layout_source(op)
        if src is None or (not casts and layout_generic(op) == "cast"):
            return chain
        chain.append(op)
        value = src[0]


def view_through(source: ir.Value, ops_outward: list[ir.Operation]) -> StridedView | None:
    """The view of the last op's result in `source`'s dense buffer (ops from source outward)."""
    view: StridedView | None = StridedView.dense(ir.RankedTensorType(source.type).shape)
    for op in ops_outward:
        view = view_forward(view, op)
        if view is None:
            return None
    return view


def gemm_operand(value: ir.Value, matrix: bool = True, casts: bool = True) -> GemmOperand:
    """Walk back from a matmul operand over the layout ops cuBLASLt absorbs (each result used
    once) and stop at the farthest value through which the operand is still one cuBLASLt
    matrix layout (`matrix_layout`; `matrix=False`: a dense vector, for the bias; `casts`
    False: not through a cast to f32, which then stays before the call)."""
    chain = layout_walk(value, casts)
    for n in range(len(chain), -1, -1):
        source = value if n == 0 else layout_source(chain[n - 1])[0]
        element = str(ir.RankedTensorType(source.type).element_type)
        view = view_through(source, list(reversed(chain[:n])))
        if view is None:
            continue
        if matrix and matrix_layout(view, ELEMENT_BYTES.get(element, 4)) is None:
            continue
        if not matrix and not (view.is_dense() and view.offset == 0):
            continue
        return GemmOperand(source, view, element, chain[:n])
    raise CudaCodegenError("unreachable: the operand itself is a dense view")


def _operand_ok(operand: GemmOperand) -> bool:
    producer = defining(operand.source)
    if producer is not None and producer.name == "arith.constant" and not is_weight(producer):
        return False  # a splat tensor constant has no buffer
    return operand.element in CUDA_DATA_TYPES


@dataclass
class GemmSplit:
    """How one matmul-rooted group splits (see the section comment)."""

    prologue: list[ir.Operation]
    gemm: list[ir.Operation]
    epilogue: list[ir.Operation]
    fused: list[str]  # epilogue ops absorbed by cuBLASLt: "bias", "relu", "cast", "gelu"
    why: str


def split_around(ops: list[ir.Operation], gemm: list[ir.Operation]
                 ) -> tuple[list[ir.Operation], list[ir.Operation]]:
    """The group's `ops` other than the `gemm` kernel's: the prologue (what the gemm ops
    need, transitively, inside the group) and the epilogue (the rest), in block order."""
    from fusec.passes.grouping import CLONED_INTO_GROUPS, walk_ops

    gemm_keys = {id_of(o) for o in gemm}
    by_key = {id_of(o): o for o in ops}
    needed: set[int] = set()
    stack = list(gemm)
    while stack:
        op = stack.pop()
        for inner in walk_ops(op):
            for v in inner.operands:
                p = defining(v)
                if p is None:
                    continue
                k = id_of(p)
                if k in by_key and k not in gemm_keys and k not in needed \
                        and p.name not in CLONED_INTO_GROUPS:
                    needed.add(k)
                    stack.append(p)
    prologue = [o for o in ops if id_of(o) in needed]
    epilogue = [o for o in ops if id_of(o) not in needed and id_of(o) not in gemm_keys
                and o.name not in CLONED_INTO_GROUPS]
    return prologue, epilogue


def zero_filled(mm: ir.Operation) -> bool:
    """Whether `mm` accumulates into a `linalg.fill` of zero (float or integer) that only it
    reads: the GEMM kernels start from zero and write the result once."""
    fill = defining(mm.operands[2])
    if fill is None or fill.name != "linalg.fill" or not single_use(mm.operands[2]):
        return False
    zero = defining(fill.operands[0])
    if zero is None or zero.name != "arith.constant":
        return False
    value = zero.attributes["value"]
    if isinstance(value, ir.FloatAttr):
        return float(value.value) == 0.0
    return isinstance(value, ir.IntegerAttr) and value.value == 0


def plan_gemm_split(group: ir.Operation) -> GemmSplit | str:
    """The split of `group`, or the reason it is not a cuBLASLt group."""
    body = group.regions[0].blocks[0]
    ops = [o.operation for o in body.operations][:-1]
    mms = [o for o in ops if o.name in GEMM_OPS]
    if len(mms) != 1:
        return f"{len(mms)} matmuls in the group"
    mm = mms[0]
    if not zero_filled(mm):
        return "the matmul does not start from a zero fill"
    fill = defining(mm.operands[2])
    a, b = gemm_operand(mm.operands[0]), gemm_operand(mm.operands[1])
    if a.element != b.element:
        # f32 x bf16 (a model that keeps some activations in f32): both operands as the
        # matmul reads them, in f32; the 16-bit side's cast stays before the call (folded
        # where it is a weight's, a kernel otherwise).
        a = gemm_operand(mm.operands[0], casts=False)
        b = gemm_operand(mm.operands[1], casts=False)
    if not (_operand_ok(a) and _operand_ok(b)) or a.element != b.element:
        return f"operand types {a.element} x {b.element} are not a cuBLASLt pair"
    if str(ir.RankedTensorType(mm.results[0].type).element_type) != "f32" and \
            a.element != str(ir.RankedTensorType(mm.results[0].type).element_type):
        return "the matmul's result type differs from its operands'"
    core = a.ops + b.ops + [fill, mm]
    absorbed, fused, out_type = absorb_epilogue(mm, a.element, allow_bias=True)
    if absorbed is None:
        absorbed, fused, out_type = absorb_epilogue(mm, a.element, allow_bias=False)
    gemm = core + absorbed
    prologue, epilogue = split_around(ops, gemm)
    why = "matmul-rooted group: cuBLASLt"
    if fused:
        why += f" with the fused epilogue {'+'.join(fused)}"
    if any(unary_kind(o) == "gelu" for o in epilogue if o.name == "linalg.generic") \
            and out_type == "f32":
        why += ("; GELU stays in the elementwise kernel (cuBLASLt's GELU is the tanh "
                "approximation, ~1e-4 from torch's erf GELU: over fp32's 1e-5 tolerance)")
    return GemmSplit(prologue, gemm, epilogue, fused, why)


def _is_zero_splat(value: ir.Value) -> bool:
    op = defining(value)
    if op is None or op.name != "arith.constant":
        return False
    attr = op.attributes["value"]
    if not (isinstance(attr, ir.DenseElementsAttr) and attr.is_splat):
        return False
    try:
        return float(ir.FloatAttr(attr.get_splat_value()).value) == 0.0
    except Exception:  # noqa: BLE001 - not a float splat
        return False


def absorb_epilogue(mm: ir.Operation, in_type: str, allow_bias: bool
                     ) -> tuple[list[ir.Operation] | None, list[str], str]:
    """The elementwise ops after `mm` that cuBLASLt's epilogue runs, in order:
    [+ bias] [relu] [round f32 to the operands' 16-bit type] [relu | gelu (16-bit only)].
    Returns (ops, their names, output element type); ops None when the bias's type would
    differ from the output's (cuBLASLt reads the bias in the output's type)."""
    rank = ir.RankedTensorType(mm.results[0].type).rank
    out_type = str(ir.RankedTensorType(mm.results[0].type).element_type)
    value = mm.results[0]
    ops: list[ir.Operation] = []
    fused: list[str] = []
    bias_type = None
    reshaped = False
    while True:
        if not {"relu", "gelu"} & set(fused) and cost_model.gelu_in_gemm_epilogue(out_type):
            # GELU written as several ops (GPT-2's tanh form): cuBLASLt's GELU is that form.
            cone = gelu_cone(value)
            if cone is not None and \
                    str(ir.RankedTensorType(cone[-1].results[0].type).element_type) == out_type:
                fused.append("gelu")
                ops += cone
                value = cone[-1].results[0]
                continue
        if not single_use(value):
            break
        user = next(iter(value.uses)).owner
        user = user.operation if hasattr(user, "operation") else user
        if user.name in RESHAPE_OPS:
            # A reshape of the result is where cuBLASLt writes (the D view), not an op:
            # `[16, 2048] + bias -> [1, 16, 2048] -> ReLU` stays one cuBLASLt call.
            ops.append(user)
            value = user.results[0]
            reshaped = True
            continue
        if user.name != "linalg.generic":
            break
        kind = unary_kind(user)
        cast = cast_types(user) if kind == "cast" else None
        bias = bias_add(user, value) if allow_bias and not fused and not reshaped \
            and rank == 2 else None
        if bias is not None and _is_zero_splat(bias):
            # + zeros (torch's default in-projection bias): the identity, no epilogue step.
            ops.append(user)
            value = user.results[0]
            continue
        if bias is not None:
            bias_op = gemm_operand(bias, matrix=False)
            if not _operand_ok(bias_op):
                break
            ops += bias_op.ops
            bias_type = bias_op.element
            step = "bias"
        elif cast and "cast" not in fused and cast[0] == "f32" and cast[1] == in_type \
                and in_type in ("bf16", "f16"):
            out_type = cast[1]
            step = "cast"
        elif kind == "relu" and not {"relu", "gelu"} & set(fused):
            step = "relu"
        elif kind == "gelu" and not {"relu", "gelu"} & set(fused) and \
                cost_model.gelu_in_gemm_epilogue(out_type):
            step = "gelu"
        else:
            break
        fused.append(step)
        ops.append(user)
        value = user.results[0]
    if bias_type is not None and bias_type != out_type:
        return None, [], out_type
    return ops, fused, out_type


def _gemm_epilogue_code(fused: list[str]) -> str:
    act = "relu" if "relu" in fused else "gelu" if "gelu" in fused else ""
    if "bias" in fused:
        return f"{act}_bias" if act else "bias"
    return act or "default"


def operand_buffers(group: ir.Operation, operands: list[int], weight_buffer: Any,
                    module_asm: Any, what: str) -> Callable[[ir.Value], int]:
    """The plan buffer of a value a library or GEMM launch reads: a group input's, or a
    weight's (its bytes uploaded once, `weight_buffer`)."""
    args = {value_key(a): i for i, a in enumerate(group.regions[0].blocks[0].arguments)}

    def buffer_of(value: ir.Value) -> int:
        key = value_key(value)
        if key in args:
            return operands[args[key]]
        producer = defining(value)
        if producer is not None and is_weight(producer):
            shape, elt = tensor_info(value.type)
            return weight_buffer(shape, elt, constant_bytes(producer, module_asm))
        raise CudaCodegenError(f"a {what} operand is neither a group input nor a weight")

    return buffer_of


def gemm_launch(group: ir.Operation, operands: list[int], weight_buffer: Any,
                result_buffers: Any, module_asm: Any) -> Launch:
    """The cuBLASLt launch of a gemm group (formed by `split_matmul_groups`).

    `Launch.buffers` = [A, B, D] (+ [bias]) in row-major terms: D[b] = A[b] @ B[b] with A
    [M, K] (or its transpose stored [K, M] when `trans_a`), B [K, N] (or [N, K]). The shim
    calls cuBLASLt in column-major terms (D^T = B^T A^T); host_code derives those numbers.
    """
    body = group.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    mm = next(o for o in ops if o.name in GEMM_OPS)
    buffer_of = operand_buffers(group, operands, weight_buffer, module_asm, "gemm")
    a, b = gemm_operand(mm.operands[0]), gemm_operand(mm.operands[1])
    fused = str(ir.StringAttr(group.attributes[attributes.GEMM_EPILOGUE]).value).split("+")
    fused = [f for f in fused if f != "none"]
    bias = None
    value = mm.results[0]
    for op in ops:  # the bias add reads the matmul's result directly (plan_gemm_split)
        if op.name == "linalg.generic" and len(op.operands) == 3 and any(
                value_key(v) == value_key(value) for v in op.operands[:2]):
            bias = bias_add(op, value)
    a_shape = list(ir.RankedTensorType(mm.operands[0].type).shape)
    b_shape = list(ir.RankedTensorType(mm.operands[1].type).shape)
    batch = math.prod(a_shape[:-2]) if len(a_shape) > 2 else 1
    m, k = a_shape[-2:]
    n = b_shape[-1]
    results = result_buffers()
    if len(results) != 1:
        raise CudaCodegenError(f"a gemm group has {len(results)} results, not one")
    buffers = [buffer_of(a.source), buffer_of(b.source), results[0]]
    if "bias" in fused:
        if bias is None:
            raise CudaCodegenError("the gemm group's bias add was not found")
        buffers.append(buffer_of(gemm_operand(bias, matrix=False).source))
    out_elt = str(ir.RankedTensorType(group.results[0].type).element_type)
    la = matrix_layout(a.view, ELEMENT_BYTES[a.element])
    lb = matrix_layout(b.view, ELEMENT_BYTES[b.element])
    d_view = result_view(group)
    ld = matrix_layout(d_view, ELEMENT_BYTES[out_elt], output=True) if d_view else None
    if la is None or lb is None or ld is None:
        raise CudaCodegenError(f"a gemm operand or result has no cuBLASLt layout: A {a.view}, "
                               f"B {b.view}, D {d_view}")
    gemm = {"library": "cublasLt", "op": mm.name, "batch": batch, "m": m, "n": n, "k": k,
            "trans_a": la.transposed, "trans_b": lb.transposed, "in_dtype": DTYPES[a.element],
            "out_dtype": DTYPES[out_elt], "epilogue": _gemm_epilogue_code(fused),
            "fused": fused,
            # Row-major strided layouts (elements): leading dims, batch strides, offsets.
            "lda": la.ld, "ldb": lb.ld, "ldd": ld.ld, "stride_a": la.batch_stride,
            "stride_b": lb.batch_stride, "stride_d": ld.batch_stride, "offset_a": la.offset,
            "offset_b": lb.offset, "offset_d": ld.offset}
    if attributes.TF32 in mm.attributes and a.element == "f32":
        gemm["compute"] = "tf32"  # a convolution's, asked for (CudaOptions.conv_tf32)
    info = {"path": "gemm", "why": str(ir.StringAttr(group.attributes[attributes.WHY]).value),
            "flops": 2 * batch * m * n * k}
    ops_in = [o.name for o in ops if o.name.startswith("linalg.")]
    kind = str(group.attributes["kind"]).strip('"')
    return Launch(symbol="__gemm__", buffers=buffers, grid=0, kind=kind, ops=ops_in, info=info,
                  block=0, shared_bytes=0, launch_kind="gemm", gemm=gemm)


def gemm_table(launch: Launch, element_of: Any) -> list[int]:
    """The shim's GEMM_FIELDS numbers for one gemm launch (column-major cuBLASLt terms).

    cuBLASLt's A is our B, its B our A: D^T[N, M] = B^T[N, K] A^T[K, M], where a row-major
    [r, c] matrix with leading dimension ld is a column-major [c, r] one with the same ld.
    Fields: in/out type, op A, op B, rows/cols/ld of A, of B, rows/cols of D, batch,
    epilogue, has bias, compute type, batch strides of cuBLASLt's A, B, D (elements), ld of
    D, then byte offsets of *our* A, B, D into their buffers (strided views).
    """
    g = launch.gemm
    m, n, k = g["m"], g["n"], g["k"]
    op_a = 1 if g["trans_b"] else 0   # cuBLASLt A = our B: stored [K, N] (N) or [N, K] (T)
    op_b = 1 if g["trans_a"] else 0   # cuBLASLt B = our A: stored [M, K] (N) or [K, M] (T)
    rows_a, cols_a = (k, n) if op_a else (n, k)
    rows_b, cols_b = (m, k) if op_b else (k, m)
    in_elt = {v: k_ for k_, v in DTYPES.items()}[g["in_dtype"]]
    out_elt = {v: k_ for k_, v in DTYPES.items()}[g["out_dtype"]]
    batched = g["batch"] > 1
    return [CUDA_DATA_TYPES[in_elt], CUDA_DATA_TYPES[out_elt], op_a, op_b,
            rows_a, cols_a, g.get("ldb", rows_a), rows_b, cols_b, g.get("lda", rows_b),
            n, m, g["batch"], CUBLASLT_EPILOGUES[g["epilogue"]],
            int("bias" in g["fused"]),
            CUBLAS_COMPUTE_32F_FAST_TF32 if g.get("compute") == "tf32" else CUBLAS_COMPUTE_32F,
            g.get("stride_b", rows_a * cols_a if batched else 0),
            g.get("stride_a", rows_b * cols_b if batched else 0),
            g.get("stride_d", n * m if batched else 0), g.get("ldd", n),
            g.get("offset_a", 0) * ELEMENT_BYTES[in_elt],
            g.get("offset_b", 0) * ELEMENT_BYTES[in_elt],
            g.get("offset_d", 0) * ELEMENT_BYTES[out_elt]]


GEMM_FIELDS = 23
