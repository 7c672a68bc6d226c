"""Compile every examples/<name> for CUDA here (no GPU needed), for test/gpu to run there.

    python test/gpu/build_examples.py DIR [NAME ...]

Each example goes through fusec's own pipeline for target cuda, as `fusec model.mlir
--target cuda` does (linalg -> fusion planned for the H200 -> cuda, then model.so): the
fast emitter where it applies, the upstream-MLIR fallback for the other groups. Writes
DIR/example_<name>.so and DIR/examples.json: per example whether it compiled, its group
count after the fusion stage, its kernel count, each launch's path (fast | fallback) and
launch shape, or the reason it did not compile.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _count_groups(module) -> int:
    from fusec.passes.inline_groups import groups_in

    return len(groups_in(module.operation))


def build_example(folder: Path, out_dir: Path) -> dict:
    import mlir.ir as ir

    from fusec.compiler import pipeline as pl
    from fusec.dialects import make_context

    name = folder.name
    start = time.perf_counter()
    with make_context() as ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse((folder / "model.mlir").read_text())
        options = pl.CompileOptions(target="cuda", model_name=name)
        try:
            pl.lower(module, options, stop_after="fusion")
            groups = _count_groups(module)
            pl.lower(module, options)
            meta = pl.build_so(module, options, str(out_dir / f"example_{name}.so"))
        except Exception as e:  # noqa: BLE001 - recorded: a refusal is a result
            return {"ok": False, "reason": str(e).splitlines()[0][:500]}
    launches = meta["plan"]["launches"]
    return {"ok": True, "groups": groups, "kernels": len(launches),
            "paths": [k["info"].get("path") for k in launches],
            "launch": [[k["grid"], k["block"]] for k in launches],
            "compile_s": round(time.perf_counter() - start, 3)}


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    names = argv[1:]
    report_path = out_dir / "examples.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    folders = sorted(p for p in (ROOT / "examples").iterdir() if (p / "model.mlir").exists())
    for folder in folders:
        if names and folder.name not in names:
            continue
        report[folder.name] = build_example(folder, out_dir)
        print(f"example {folder.name}: {report[folder.name]}", flush=True)
    report_path.write_text(json.dumps(report, indent=1))
    return 0 if all(r["ok"] for r in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
