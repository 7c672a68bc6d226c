"""The house's layering, read from the sources' own imports (function-local ones too).

Top-level parts, bottom to top: dialects, runtime -> passes -> compiler (its targets under
compiler/targets) -> tools. An import may only run down: nothing under passes/ imports
compiler/ (a target tells the passes what it builds through fusec.passes.targets), runtime/
imports nothing of the compiler, and no part imports one above it. No source file is over
1,500 lines (a kernel family gets a room of its own).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("dialects", "runtime", "passes", "compiler", "tools")
# What each part may import (besides itself).
ALLOWED = {
    "dialects": set(),
    "runtime": set(),
    "passes": {"dialects", "runtime"},
    "compiler": {"dialects", "runtime", "passes"},
    "tools": {"dialects", "runtime", "passes", "compiler"},
}


def _sources() -> list[Path]:
    return [p for part in PARTS for p in (ROOT / part).rglob("*.py")
            if "_build" not in p.parts and "__pycache__" not in p.parts]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, `fusec.x.y`) of every import of fusec in `path`, wherever it stands."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("fusec."):
                found.append((node.lineno, node.module))
            elif node.module == "fusec":
                found += [(node.lineno, f"fusec.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("fusec.")]
    return found


def test_imports_run_down_the_house() -> None:
    wrong = []
    for path in _sources():
        part = path.relative_to(ROOT).parts[0]
        for line, module in _imports(path):
            target = module.split(".")[1]
            if target in PARTS and target != part and target not in ALLOWED[part]:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {part}/ imports {module}")
    assert not wrong, "\n".join(wrong)


def test_the_cuda_target_modules_form_no_cycle() -> None:
    """Inside compiler/targets/cuda, module-level imports form no cycle (the rooms are
    ordered, see the package docstring)."""
    package = ROOT / "compiler" / "targets" / "cuda"
    edges = {}
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text())
        edges[path.stem] = {n.module.rsplit(".", 1)[1] for n in tree.body
                            if isinstance(n, ast.ImportFrom) and n.module
                            and n.module.startswith("fusec.compiler.targets.cuda.")}

    def reaches(a: str, b: str, seen: frozenset = frozenset()) -> bool:
        return any(n == b or (n not in seen and reaches(n, b, seen | {n}))
                   for n in edges.get(a, ()))

    cycles = [m for m in edges if reaches(m, m)]
    assert not cycles, f"modules on an import cycle: {cycles}"


def test_no_source_file_over_1500_lines() -> None:
    long = [f"{p.relative_to(ROOT)}: {n}" for p in _sources()
            if (n := p.read_text().count("\n")) > 1500]
    assert not long, long
