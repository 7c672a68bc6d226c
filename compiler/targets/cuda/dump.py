"""What runs on the GPU, readable: the kernels' gpu.module as it goes to NVVM, their PTX, and
per kernel its GPU IR, its PTX and (where ptxas is found) its resources.

`fusec --emit cuda` prints `kernels_text`, `--emit ptx` the PTX; `--dump-dir DIR` writes, for
target cuda, beside the stages' IR:

    DIR/<model>.cuda.mlir            the gpu.module of every kernel (before NVVM)
    DIR/<model>.ptx                  the PTX of all of them
    DIR/<model>.kernels/<k>.mlir     one kernel's gpu.func
    DIR/<model>.kernels/<k>.ptx      its PTX entry (and the functions it calls)
    DIR/<model>.resources.txt        ptxas -v: registers, shared memory, spills per kernel
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import textwrap
from pathlib import Path

from fusec.compiler.targets.cuda.program import CudaProgram
from fusec.compiler.targets.cuda.ptx import find_cuda_toolkit


def kernel_functions(program: CudaProgram) -> dict[str, str]:
    """Each kernel's `gpu.func` text, by symbol."""
    found = {}
    for match in re.finditer(r"^ *gpu\.func @(\w+)\(", program.kernels_mlir, re.M):
        start = match.start()
        end = program.kernels_mlir.find("gpu.return", start)
        end = program.kernels_mlir.find("}", end) + 1
        found[match.group(1)] = textwrap.dedent(program.kernels_mlir[start:end]) + "\n"
    return found


def ptx_entries(ptx: str) -> dict[str, str]:
    """Each `.entry`'s PTX (header included, so that each file assembles alone)."""
    header_end = ptx.find(".visible .entry")
    header = ptx[:header_end] if header_end >= 0 else ""
    found = {}
    for match in re.finditer(r"^\.visible \.entry (\w+)\(", ptx, re.M):
        start = match.start()
        nxt = ptx.find("\n.visible .entry", start + 1)
        found[match.group(1)] = header + ptx[start:nxt if nxt >= 0 else len(ptx)]
    return found


def resource_usage(ptx: str, arch: str) -> str | None:
    """`ptxas -v`'s report on `ptx` (registers, shared memory, spills per kernel); None when
    no CUDA toolkit is found."""
    toolkit = find_cuda_toolkit()
    ptxas = Path(toolkit) / "bin" / "ptxas" if toolkit else None
    if ptxas is None or not ptxas.exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernels.ptx"
        source.write_text(ptx)
        done = subprocess.run([str(ptxas), f"-arch={arch}", "-v", str(source), "-o",
                               str(Path(tmp) / "kernels.cubin")], capture_output=True, text=True)
    return (done.stdout + done.stderr).replace(str(source), "kernels.ptx")


def write_dump(program: CudaProgram, directory: str, model: str, arch: str) -> list[str]:
    """Write the files the module docstring lists; returns their paths."""
    folder = Path(directory)
    kernels = folder / f"{model}.kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    files = {folder / f"{model}.cuda.mlir": program.kernels_mlir,
             folder / f"{model}.ptx": program.ptx}
    for symbol, text in kernel_functions(program).items():
        files[kernels / f"{symbol}.mlir"] = text
    for symbol, text in ptx_entries(program.ptx).items():
        files[kernels / f"{symbol}.ptx"] = text
    usage = resource_usage(program.ptx, arch)
    if usage is not None:
        files[folder / f"{model}.resources.txt"] = usage
    for path, text in files.items():
        path.write_text(text)  # a plain open(): the mode the umask gives
    return [str(p) for p in files]
