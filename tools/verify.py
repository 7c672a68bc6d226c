"""fusec-verify: run a fused-vs-unfused check that `fusec --verify --verify-dir DIR` built.

    fusec-verify DIR [--debug]

The check is two programs (fused.so: the model as fusec builds it, every kernel's outputs also
returned; unfused.so: one kernel per op, the same values returned) and the seed of its random
inputs. Both run here on the same fresh inputs; every fused kernel's outputs are compared with
the unfused program's, in program order, and the first kernel that differs is named with its
location in the model (`file:line:col: error: ...`, exit code 1). A CUDA check is built where
fusec runs (no GPU needed) and run with this command on the machine with the GPU.
"""

from __future__ import annotations

import argparse
import sys


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fusec-verify", description=__doc__.split("\n")[0])
    parser.add_argument("bundle", metavar="DIR", help="the directory --verify-dir wrote")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks")
    args = parser.parse_args(argv)
    from fusec.compiler import verify_run as verify  # numpy and the runtime only, no MLIR

    result = verify.run_bundle(args.bundle)
    print("\n".join(result.kernel_lines()))
    print(result.summary())
    verify.check_or_raise(result, result.source)
    return 0


def main(argv: list[str] | None = None) -> int:
    from fusec.tools.fusec import command_main

    return command_main("fusec-verify", run, argv)


if __name__ == "__main__":
    sys.exit(main())
