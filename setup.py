"""Build step: generate the fusion dialect from ODS and compile its library.

Runs mlir-tblgen on dialects/FusionOps.td and g++ on dialects/fusion_dialect.cpp
against the MLIR headers of the build environment (xtc-mlir-dev), linking the
bindings' libMLIRPythonCAPI.so and libLLVM.so. The outputs land in
`fusec/dialects/_build/`: in the wheel for `pip install .`, in the source tree
for `pip install -e .`.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "dialects"))
import build_dialect  # noqa: E402


class BuildPyWithDialect(build_py):
    def run(self) -> None:
        super().run()
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dialects")
        if self.editable_mode:
            out = os.path.join(src, "_build")
        else:
            out = os.path.join(self.build_lib, "fusec", "dialects", "_build")
        build_dialect.build(src, out)

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode)


setup(cmdclass={"build_py": BuildPyWithDialect})
