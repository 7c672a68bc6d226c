"""Re-export every example's model.mlir from its model.py through fusec's frontend.

    python examples/export.py              # rewrite every examples/<name>/model.mlir
    python examples/export.py mlp cnn      # only these
    python examples/export.py --check      # exit 1 if a committed file is out of date
    python examples/export.py --inventory  # also print the ops of each model, with counts

The export is deterministic (fixed seeds, torch-mlir's printer), which is what lets the tests
compare the committed files with a fresh export.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

EXAMPLES_DIR = os.path.dirname(os.path.abspath(__file__))


def example_names() -> list[str]:
    """Every folder under examples/ that holds a model.py, sorted."""
    return sorted(
        name
        for name in os.listdir(EXAMPLES_DIR)
        if os.path.isfile(os.path.join(EXAMPLES_DIR, name, "model.py"))
    )


def export_example(name: str) -> str:
    """The generic-form linalg-on-tensors text of examples/<name>/model.py."""
    from fusec.compiler.frontend import import_torch, load_model_file

    module, inputs = load_model_file(os.path.join(EXAMPLES_DIR, name, "model.py"))
    return import_torch(module, *inputs)


def op_inventory(text: str) -> collections.Counter[str]:
    """How many of each op the module holds, nested ops included (the module itself excluded)."""
    import mlir.ir as ir

    from fusec.compiler.frontend import parse_module

    counts: collections.Counter[str] = collections.Counter()

    def count(op: ir.Operation) -> ir.WalkResult:
        counts[op.name] += 1
        return ir.WalkResult.ADVANCE

    module = parse_module(text)
    for op in module.body.operations:
        op.operation.walk(count)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="examples to export (default: all)")
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--inventory", action="store_true", help="print op counts")
    args = parser.parse_args(argv)

    stale = []
    for name in args.names or example_names():
        text = export_example(name)
        path = os.path.join(EXAMPLES_DIR, name, "model.mlir")
        if args.check:
            with open(path) as file:
                if file.read() != text:
                    stale.append(name)
        else:
            with open(path, "w") as file:
                file.write(text)
        print(f"{name}: {len(text)} bytes{' (stale)' if name in stale else ''}")
        if args.inventory:
            for op_name, n in sorted(op_inventory(text).items()):
                print(f"    {op_name} {n}")
    if stale:
        print("out of date:", ", ".join(stale), "- run python examples/export.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
