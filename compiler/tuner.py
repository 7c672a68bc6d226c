"""`fusec --tune` / `fusec.compile(..., tune=True)`: measure the tiles the cost model is least
sure of, on the device, and keep the winners in the tuning cache (runtime/tuning.py): our
GPU GEMM's and attention's tiles, the CPU matmul kernels' row and column tiles.

    lower to the fusion stage once
    for i in 0 .. (most candidates any kernel has) - 1:
        build the program with every tunable kernel on its i-th candidate tile
        (`--cuda-tile-candidate i` / `--cpu-tile-candidate i`; 0 is the cost model's choice)
    ROUNDS times, for each program: time it on the device, kernel by kernel, in a child
        process (runtime/timing.py: CUDA events around each launch; on the CPU the runtime's
        per-launch profile), each kernel keeping its best time
    per kernel: the fastest candidate whose program's outputs agree with candidate 0's; the
        model's tile stays unless another is faster by MARGIN, or by more than the spread
        between rounds of either where that is larger (timing noise must not flip a choice)
    record every kernel's winner and the measured times in the cache, then build the model
        as any compile does: reading the cache (so the artifact is the one a later compile
        without --tune gives, byte for byte)

Candidates come from the cost model (`tc_gemm_tile_candidates`,
`attention_tile_candidates`, `cpu_matmul_tiling_candidates`); the key of each kernel is
recorded on its group (`--fusion-gpu-choose-tiles`, `--fusion-tile`). A program whose outputs disagree with candidate 0's beyond
the tolerance (a tile the kernel family gets wrong) has none of its timings used, and the
report says so.

`select` takes plain measurements, so that candidates built on one machine can be timed on
another (bench/tune_gpu.py does this for the H200, whose image has no MLIR bindings).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable

from fusec.runtime import tuning
from fusec.compiler.diagnostics import FusecError

# Another tile replaces the cost model's only when measured at least this much faster.
MARGIN = 0.03
# Passes over all the candidates; each kernel keeps its best time of them.
ROUNDS = 2
# Candidate i's outputs against candidate 0's (relative norm error): what a different tile
# (another accumulation order, another online-softmax blocking) may change.
TOLERANCE_16BIT = 2e-2
TOLERANCE = 1e-4


@dataclass
class Measured:
    """One candidate program's measurement: per kernel key, µs per launch and the tile."""

    us: dict[str, float]
    tiles: dict[str, list[int]]
    valid: bool = True
    note: str = ""
    # Per kernel: the spread of its times between rounds, relative to the best ((max - min)
    # / min): how much of a difference the machine's noise can make.
    spread: dict[str, float] = field(default_factory=dict)


@dataclass
class KernelReport:
    key: str
    predicted_us: float | None
    model_tile: list[int]
    model_us: float
    tile: list[int]
    us: float
    candidates: list[tuple[list[int], float | None]] = field(default_factory=list)
    noise: float = 0.0  # the largest spread between rounds of any of its candidates

    def entry(self) -> dict[str, Any]:
        return {"tile": self.tile, "measured_us": round(self.us, 3),
                "noise": round(self.noise, 4),
                "model_tile": self.model_tile, "model_us": round(self.model_us, 3),
                "predicted_us": None if self.predicted_us is None else
                round(self.predicted_us, 3),
                "candidates": [[t, None if u is None else round(u, 3)]
                               for t, u in self.candidates]}


def tunable(kernels: list[dict]) -> dict[str, tuple[int, float | None]]:
    """Per tuning key in an artifact's launches with more than one candidate: their number
    and the cost model's prediction (µs) for its tile."""
    out = {}
    for k in kernels:
        info = k.get("info") or {}
        if info.get("tune_key") and int(info.get("tile_candidates", 1)) > 1:
            out[info["tune_key"]] = (int(info.get("tile_candidates", 1)),
                                     info.get("predicted_us"))
    return out


def tiles_of(kernels: list[dict]) -> dict[str, list[int]]:
    """Per tuning key in an artifact's launches: the tile it was built with."""
    return {k["info"]["tune_key"]: list(k["info"].get("tile") or [])
            for k in kernels if (k.get("info") or {}).get("tune_key")}


def select(counts: dict[str, tuple[int, float | None]],
           measured: list[Measured]) -> list[KernelReport]:
    """Each kernel's winner from the measurements of candidates 0..n-1 (measured[i]: the
    program built with candidate i; measured[0] must be valid)."""
    if not measured or not measured[0].valid:
        raise FusecError("--tune: the cost model's own program could not be measured")
    reports = []
    for key, (n, predicted) in sorted(counts.items()):
        base = measured[0]
        if key not in base.us:
            continue
        model_us, model_tile = base.us[key], base.tiles[key]
        best_tile, best_us = model_tile, model_us
        seen = []
        for i in range(n):
            m = measured[i] if i < len(measured) else None
            if m is None or key not in m.tiles:
                continue
            tile = m.tiles[key]
            if any(t == tile for t, _ in seen):
                continue
            us = m.us.get(key) if m.valid else None
            seen.append((tile, us))
            # The margin: MARGIN, or the noise seen between rounds where that is larger.
            margin = max(MARGIN, base.spread.get(key, 0.0), m.spread.get(key, 0.0))
            if us is not None and us < best_us and us <= model_us * (1 - margin):
                best_tile, best_us = tile, us
        noise = max([m.spread.get(key, 0.0) for m in measured if m.valid] or [0.0])
        reports.append(KernelReport(key, predicted, model_tile, model_us, best_tile,
                                    best_us, seen, noise))
    return reports


def report_lines(reports: list[KernelReport], notes: list[str]) -> list[str]:
    lines = []
    for r in reports:
        pred = f"predicted {r.predicted_us:.1f} us, " if r.predicted_us is not None else ""
        tried = ", ".join(f"{t}: {'wrong' if u is None else f'{u:.1f}'}"
                          for t, u in r.candidates)
        verdict = (f"tuned {r.tile} {r.us:.1f} us ({r.model_us / r.us:.2f}x)"
                   if r.tile != r.model_tile else "the cost model's tile stays")
        lines.append(f"{r.key}: model {r.model_tile} {pred}measured {r.model_us:.1f} us; "
                     f"{verdict} [{tried}]; noise between rounds {100 * r.noise:.0f}%")
    return lines + notes


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def tune(module: Any, filename: str, options: Any, output: str,
         log: Callable[[str], None] = _stderr, runs: int = 20) -> dict:
    """Tune `module` (fusec's MLIR, any stage before `tiled`), record the winners in the
    tuning cache, and build `output` with them; returns the artifact's metadata."""
    from fusec.compiler import driver
    from fusec.compiler.pipeline import lower

    from fusec.runtime import gpu_present

    cuda = options.resolved_target() == "cuda"
    if cuda and not gpu_present():
        raise FusecError("--tune times each candidate tile on the GPU, and there is none here "
                         "(libcuda.so.1 and /dev/nvidia0 not found): tune where the GPU is and "
                         "bring its tuning cache (FUSEC_TUNING_CACHE) here")
    path = tuning.resolve(options.cuda.tuning if cuda else options.cpu.tuning)
    if path == "off":
        raise FusecError(f"--tune records what it measures in the tuning cache, and "
                         f"--{'cuda' if cuda else 'cpu'}-tuning is off")
    module = driver.as_module(module, filename)
    lower(module, options, stop_after="fusion", filename=filename)
    fused_text = driver.as_text(module)
    with tempfile.TemporaryDirectory(prefix="fusec-tune-") as tmp:
        reports, notes = _measure_all(fused_text, filename, options, tmp, runs)
    if reports:
        tuning.store(path, {tuning.entry_key(_device(options), r.key): r.entry()
                            for r in reports})
    nothing = ("no tunable kernel (our GEMM, attention)" if cuda else
               "no tunable kernel (a matmul whose columns may be tiled)")
    for line in report_lines(reports, notes) or [nothing]:
        log(f"fusec: tune: {line}")
    return driver.compile_text(fused_text, filename, options, output)


def _device(options: Any) -> str:
    """The tuning cache's device for `options`' target (the GPU's description; the CPU the
    code is built for)."""
    if options.resolved_target() == "cuda":
        return options.cuda.description.name
    from fusec.compiler.targets.cpu import tuning_device

    return tuning_device(options.cpu)


def _with_candidate(options: Any, i: int) -> Any:
    """`options` building every tunable kernel on its candidate `i`, the cache unread."""
    if options.resolved_target() == "cuda":
        return dataclasses.replace(options, cuda=dataclasses.replace(
            options.cuda, tile_candidate=i, tuning="off"))
    return dataclasses.replace(options, cpu=dataclasses.replace(
        options.cpu, tile_candidate=i, tuning="off"))


def _measure_all(text: str, filename: str, options: Any, tmp: str,
                 runs: int) -> tuple[list[KernelReport], list[str]]:
    """Build candidates 0..n-1, then time each in a child process (runtime/timing.py's
    `time_isolated`: this process never touches the GPU, and a candidate that hangs is
    killed at the time limit), in ROUNDS passes over all of them, keeping each kernel's
    best: a burst of other work on the machine during one candidate's turn must not decide."""
    import fusec.runtime as runtime
    from fusec.compiler import driver
    from fusec.runtime import timing

    def build(i: int) -> tuple[str, dict]:
        path = os.path.join(tmp, f"candidate{i}.so")
        meta = driver.compile_text(text, filename, _with_candidate(options, i), path)
        return path, meta

    first, meta = build(0)
    counts = tunable(meta["kernels"])
    if not counts:
        return [], []
    built = [(first, meta)] + [build(i) for i in range(1, max(n for n, _ in counts.values()))]
    outputs = runtime.load(first).signature.outputs
    measured = [Measured({}, tiles_of(m["kernels"])) for _, m in built]
    notes: list[str] = []
    base_outputs = None
    rounds: dict[tuple[int, str], list[float]] = {}
    for _ in range(ROUNDS):
        for i, (path, _) in enumerate(built):
            m = measured[i]
            if not m.valid:
                continue
            try:
                times = timing.time_isolated(path, seed=0, runs=runs)
            except (FusecError, RuntimeError) as e:
                if i == 0:
                    raise FusecError(f"--tune: the cost model's own program failed: {e}") \
                        from None
                m.valid, m.note = False, f"candidate {i}: {e}"
                notes.append(f"candidate {i} failed ({str(e).splitlines()[0]}); not used")
                continue
            if base_outputs is None:
                base_outputs = times.outputs
            worst = 0.0
            for got, want, spec in zip(times.outputs, base_outputs, outputs):
                limit = TOLERANCE_16BIT if spec.dtype in ("bfloat16", "float16") \
                    else TOLERANCE
                worst = max(worst, timing.relative_error(got, want) / limit)
            if worst > 1.0:
                m.valid = False
                notes.append(f"candidate {i}: outputs differ from the cost model's program "
                             f"({worst:.1f}x the tolerance); its times are not used")
                continue
            m.tiles.update(times.tiles)
            for key, us in times.us.items():
                rounds.setdefault((i, key), []).append(us)
                m.us[key] = min(rounds[(i, key)])
                m.spread[key] = (max(rounds[(i, key)]) - m.us[key]) / m.us[key] \
                    if m.us[key] else 0.0
    return select(counts, measured), notes
