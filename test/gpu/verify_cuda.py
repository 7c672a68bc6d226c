"""`fusec --verify` on the H200: fused vs unfused, kernel by kernel, for CUDA artifacts.

    python3 test/gpu/verify_cuda.py build DIR      # here (no GPU): one check per case
    python3 test/gpu/verify_cuda.py run DIR        # on the H200: fusec-verify each check

Cases: every example (must pass) and deliberately wrong fused
programs (a group's body edited after the fusion stage, as test/python/test_verify.py does on
the CPU): each must fail, naming the group edited, with every earlier group agreeing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["attention", "cnn", "elementwise", "gpt2_block", "layernorm_mlp", "mlp", "rmsnorm",
            "softmax", "transformer"]
# (case, example, group edited, old, new)
WRONG = [
    ("softmax-divide-becomes-multiply", "softmax", 0, "arith.divf", "arith.mulf"),
    ("layernorm-first-group", "layernorm_mlp", 0, "arith.subf", "arith.addf"),
    ("mlp-second-group", "mlp", 1, "arith.addf", "arith.subf"),
    ("gpt2-late-group", "gpt2_block", -1, "arith.addf", "arith.subf"),
]


def _edit_group(index: int, old: str, new: str, edited: dict):
    """A mutation: in the `index`-th fusion.group (the last holding `old` for -1), replace
    the first `old` with `new`; records the group's number in `edited`."""

    def mutate(text: str) -> str:
        starts = [m.start() for m in re.finditer(r"fusion\.group ", text)]
        chosen = [i for i, start in enumerate(starts)
                  if old in text[start:starts[i + 1] if i + 1 < len(starts) else len(text)]]
        i = chosen[-1] if index < 0 else index
        start, end = starts[i], starts[i + 1] if i + 1 < len(starts) else len(text)
        body = text[start:end]
        assert old in body, f"group {i} has no {old!r}"
        edited["group"] = i
        return text[:start] + body.replace(old, new, 1) + text[end:]

    return mutate


def build(folder: Path) -> None:
    from fusec.compiler import verify
    from fusec.compiler.pipeline import CompileOptions

    options = CompileOptions(target="cuda")
    cases = {}
    for name in EXAMPLES:
        text = (ROOT / "examples" / name / "model.mlir").read_text()
        verify.prepare(text, f"examples/{name}/model.mlir", options, str(folder / name),
                       seed=7)
        cases[name] = {"expect": "ok"}
        print(f"built {name}", flush=True)
    for case, name, index, old, new in WRONG:
        text = (ROOT / "examples" / name / "model.mlir").read_text()
        edited: dict = {}
        verify.prepare(text, f"examples/{name}/model.mlir", options, str(folder / case),
                       seed=7, mutate_fused=_edit_group(index, old, new, edited))
        cases[case] = {"expect": "mismatch", "group": edited["group"]}
        print(f"built {case} (group {edited['group']} edited)", flush=True)
    (folder / "cases.json").write_text(json.dumps(cases, indent=1))


def run(folder: Path) -> int:
    cases = json.loads((folder / "cases.json").read_text())
    failures = 0
    for case, want in cases.items():
        done = subprocess.run([sys.executable, "-m", "fusec.tools.verify", str(folder / case)],
                              capture_output=True, text=True, timeout=600)
        summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
        if want["expect"] == "ok":
            # (A group whose outputs lost their tags to a rewrite is listed "not compared";
            # the model's outputs are compared all the same.)
            ok = done.returncode == 0 and "verify OK (cuda)" in summary
        else:
            err = done.stderr.strip().splitlines()
            g = want["group"]
            ok = done.returncode == 1 and len(err) == 1 and \
                f"--verify: kernel {g} (fusion group {g}, " in err[0] and \
                re.match(r"examples/\w+/model\.mlir:\d+:\d+: error: ", err[0]) is not None
            summary = err[0] if err else summary
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'} {case}: {summary}", flush=True)
        if not ok:
            print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
    print(f"verify_cuda: {len(cases) - failures} of {len(cases)} cases as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    command, folder = sys.argv[1], Path(sys.argv[2])
    folder.mkdir(parents=True, exist_ok=True)
    if command == "build":
        build(folder)
    else:
        sys.exit(run(folder))
