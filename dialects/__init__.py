"""The `fusion` dialect: loading it into an MLIR context, and its Python op classes.

The dialect is defined in ODS (FusionDialect.td, FusionOps.td) and compiled at install time
into `_build/libFusecFusionDialect.so`; `_build/_fusion_ops_gen.py` holds the op classes that
mlir-tblgen generated. `make_context()` is the one way fusec creates a context.
"""

import ctypes
import os

import mlir.ir as ir

_BUILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_build")
_LIB_PATH = os.path.join(_BUILD, "libFusecFusionDialect.so")
_lib = None

GROUP_KINDS = ("single", "vertical", "horizontal", "input", "reduction", "epilogue", "attention")
MEM_LEVELS = ("register", "shared", "l2", "global")


def _library() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        if not os.path.exists(_LIB_PATH):
            raise RuntimeError(
                f"fusec: the fusion dialect library is missing ({_LIB_PATH}); "
                "reinstall fusec with `pip install -e .` so that its build step runs"
            )
        # `import mlir.ir` above has loaded libMLIRPythonCAPI.so and libLLVM.so, which the
        # library links against; RTLD_GLOBAL is not needed.
        _lib = ctypes.CDLL(_LIB_PATH)
        _lib.fusecLoadFusionDialect.argtypes = [ctypes.c_void_p]
        _lib.fusecLoadFusionDialect.restype = None
    return _lib


# PyCapsule_GetPointer, its signature set once: setting restype and argtypes on every call
# cost 6 us of the 7 each (447 000 calls, 2.6 s, in one ResNet-18 compile for cuda).
_GET_POINTER = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def _capsule_pointer(capsule: object, name: bytes) -> int:
    return _GET_POINTER(capsule, name)


def load_dialect(context: ir.Context) -> None:
    """Load the fusion dialect into `context`."""
    pointer = _capsule_pointer(context._CAPIPtr, b"mlir.ir.Context._CAPIPtr")
    _library().fusecLoadFusionDialect(pointer)


def make_context() -> ir.Context:
    """A context with every upstream dialect registered and the fusion dialect loaded."""
    context = ir.Context()
    load_dialect(context)
    _register_python_classes()
    return context


def _register_python_classes() -> None:
    """Let the bindings find the fusion op classes without importing a module per op.

    To wrap an op, the Python bindings import its dialect's module `mlir.dialects.<name>`,
    and a failed import is retried on every op: with thousands of `fusion.group`s, walking a
    block spent most of its time in failed imports (measured: 58 s -> 16 s to plan a
    2,000-op graph).
    """
    import sys

    sys.modules.setdefault("mlir.dialects.fusion", ops())


def ops():
    """The generated Python op classes (GroupOp, YieldOp)."""
    from fusec.dialects._build import _fusion_ops_gen

    return _fusion_ops_gen
