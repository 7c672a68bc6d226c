"""--fusion-check-supported: reject, with a located error, what fusec cannot compile.

The first pass of the `linalg` stage. Every function body may hold only linalg-on-tensors
as torch-mlir emits it: ops of the dialects in `SUPPORTED_DIALECTS`, static shapes, and element
types in `SUPPORTED_ELEMENT_TYPES`. Anything else is an error naming the op (or the argument)
and its location, and listing what is supported, instead of a failure deep in lowering.

Before (rejected):
    func.func @f(%a: tensor<?x4xf32>) -> ...     // error: dynamic shape
    %0 = "foo.bar"(%a) : ...                      // error: unsupported op 'foo.bar'
After: the module, unchanged, when it passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlir.ir as ir

from fusec.passes.grouping import walk_ops
from fusec.passes.fusion.lower_tm_tensor import LOWERED_OPS
from fusec.passes.registry import Pass, PassError, register

SUPPORTED_DIALECTS = ("arith", "math", "linalg", "tensor", "func", "fusion", "builtin",
                      "ml_program", "scf", "affine", "complex")
# Ops of other dialects that the `linalg` stage removes (--fusion-drop-asserts), and
# torch-mlir's TMTensor ops (unregistered in fusec's MLIR) that the `fusion` stage lowers
# first (--fusion-lower-tm-tensor).
DROPPED_OPS = frozenset({"cf.assert", "tm_tensor.yield"}) | LOWERED_OPS
SUPPORTED_ELEMENT_TYPES = ("f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "i1",
                           "index")


# Ops of supported dialects that fusec's lowering cannot handle (they are not structured
# linalg ops, so convert-linalg-to-loops leaves them behind and LLVM translation fails).
UNSUPPORTED_OPS = ("linalg.softmax", "linalg.winograd_filter_transform",
                   "linalg.winograd_input_transform", "linalg.winograd_output_transform",
                   "linalg.pack", "linalg.unpack")


def _check_type(t: ir.Type, what: str, location: ir.Location) -> None:
    if not isinstance(t, ir.ShapedType):  # the bindings return types already downcast
        return
    shaped = t
    if not shaped.has_static_shape:
        raise PassError(f"{what} has dynamic shape {t}; fusec compiles static shapes only "
                        "(export the model with fixed example input sizes)", location)
    element = str(shaped.element_type)
    if element not in SUPPORTED_ELEMENT_TYPES:
        raise PassError(f"{what} has element type {element}, which fusec does not support "
                        f"(supported: {', '.join(SUPPORTED_ELEMENT_TYPES)})", location)


def _check_tensor(t: ir.Type, what: str, location: ir.Location, result: bool) -> None:
    # The model's signature is buffers: a scalar argument would have no place in the
    # artifact's ABI. A scalar result of a supported type becomes a 0-d tensor output that
    # the runtime returns as a Python number (--fusion-scalars-to-tensors); anything else
    # would be dropped, a silent wrong answer.
    if isinstance(t, ir.RankedTensorType):
        return
    if result and str(t) in SUPPORTED_ELEMENT_TYPES and str(t) != "index":
        return
    if result:
        raise PassError(f"{what} is {t}; fusec models return tensors and numbers only",
                        location)
    raise PassError(f"{what} is a scalar {t}; fusec models take tensors only "
                    "(pass torch.tensor(value) instead of a Python number)", location)


@register
@dataclass
class CheckSupportedPass(Pass):
    """Reject unsupported ops, dynamic shapes and element types with located errors."""

    ARGUMENT = "fusion-check-supported"

    def run(self, module: ir.Operation) -> None:
        for op in walk_ops(module):
            dialect = op.name.split(".", 1)[0]
            if dialect not in SUPPORTED_DIALECTS and op.name not in DROPPED_OPS:
                raise PassError(
                    f"unsupported op '{op.name}'; fusec supports ops of the dialects "
                    f"{', '.join(d for d in SUPPORTED_DIALECTS if d != 'builtin')} "
                    "(linalg-on-tensors as torch-mlir emits it)", op.location)
            if op.name in UNSUPPORTED_OPS:
                raise PassError(
                    f"unsupported op '{op.name}'; fusec cannot lower it yet (decompose it into "
                    "linalg.generic ops, as torch-mlir does for torch.softmax)", op.location)
            if op.name == "func.func":
                name = ir.StringAttr(op.attributes["sym_name"]).value
                function_type = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
                public = "sym_visibility" not in op.attributes
                for i, t in enumerate(function_type.inputs):
                    _check_type(t, f"argument {i} of @{name}", op.location)
                    if public:
                        _check_tensor(t, f"argument {i} of @{name}", op.location, False)
                for i, t in enumerate(function_type.results):
                    _check_type(t, f"result {i} of @{name}", op.location)
                    if public:
                        _check_tensor(t, f"result {i} of @{name}", op.location, True)
            for i, result in enumerate(op.results):
                _check_type(result.type, f"result {i} of '{op.name}'", op.location)
