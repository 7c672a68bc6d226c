"""Running a fused-vs-unfused check that `fusec.compiler.verify.prepare` built.

This half of `--verify` needs numpy and `fusec.runtime` only, not MLIR: a check built for the
CUDA target here runs on a machine that has the GPU and nothing of the compiler
(`fusec-verify DIR`). See `fusec.compiler.verify` for how the two programs are built.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fusec.compiler.diagnostics import FusecError

# Relative error ||fused - unfused|| / ||unfused|| allowed per element type.
TOLERANCE = {"float32": 1e-4, "float64": 1e-9, "float16": 1e-2, "bfloat16": 1e-2}

BUNDLE = "verify.json"  # the description of a prepared check, beside fused.so and unfused.so


class VerificationError(FusecError):
    """The fused program disagrees with the unfused one; `result` holds the details."""

    def __init__(self, message: str, location: str | None, result: VerifyResult) -> None:
        super().__init__(message, location)
        self.result = result


@dataclass
class GroupCheck:
    """One fused group (= one kernel) and how its outputs compare with the unfused program."""

    index: int
    kind: str
    ops: list[str]
    location: str | None
    errors: list[float] = field(default_factory=list)  # one per probed output
    tolerances: list[float] = field(default_factory=list)  # the same outputs' tolerances
    unmatched: int = 0  # outputs that could not be found in the unfused program
    target: str = "cpu"

    @property
    def symbol(self) -> str:
        """The CPU kernel's symbol (--fusion-outline-kernels' name for the group); on the
        CUDA target a group may be built as several kernels (fusec_k<n>), so the group."""
        return f"fusec_kernel_{self.index}" if self.target == "cpu" else \
            f"fusion group {self.index}"

    def describe(self) -> str:
        counts: dict[str, int] = {}
        for name in self.ops:
            counts[name] = counts.get(name, 0) + 1
        ops = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in counts.items())
        return f"kernel {self.index} ({self.symbol}, {self.kind}: {ops})"


@dataclass
class VerifyResult:
    """The outcome of `verify`: per-output and per-kernel relative errors."""

    output_errors: list[float]
    groups: list[GroupCheck]
    tolerances: list[float]
    first_bad: GroupCheck | None
    ok: bool
    kernels: tuple[int, int] = (0, 0)  # (fused, unfused) kernel counts
    target: str = "cpu"
    source: str | None = None

    def kernel_lines(self) -> list[str]:
        """One line per fused kernel: its worst relative error against the unfused program."""
        lines = []
        for g in self.groups:
            if not g.errors:
                lines.append(f"  {g.describe()}: not compared (outputs not found unfused)")
                continue
            worst = max(g.errors, key=_nan_last)
            bad = any(_exceeds(e, t) for e, t in zip(g.errors, g.tolerances))
            lines.append(f"  {g.describe()}: relative error {worst:.2e}"
                         f"{'  <-- DIFFERS' if bad else ''}")
        return lines

    def summary(self) -> str:
        probed = sum(1 for g in self.groups if g.errors)
        worst = max([0.0, *self.output_errors], key=_nan_last)
        head = "OK" if self.ok else "MISMATCH"
        return (f"verify {head} ({self.target}): fused ({self.kernels[0]} kernels) vs unfused "
                f"({self.kernels[1]} kernels) on random inputs: {probed} of "
                f"{len(self.groups)} fused kernels compared, worst output relative error "
                f"{worst:.2e}")


# --------------------------------------------------------------------------- comparing


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """||actual - expected|| / ||expected|| in float64; NaN where they disagree on NaNs.

    Integer and boolean values must match exactly: the error is the fraction that differ.
    """
    if expected.dtype.kind in "biu":
        return float(np.mean(actual != expected)) if expected.size else 0.0
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(e)):
        return float("nan")
    finite = ~np.isnan(e)
    diff = float(np.linalg.norm(a[finite] - e[finite]))
    scale = float(np.linalg.norm(e[finite]))
    if scale == 0.0:
        return diff  # an all-zero reference: absolute error
    return diff / scale


def random_inputs(signature: Any, rng: np.random.Generator,
                  examples: tuple | None = None) -> list[np.ndarray]:
    """Fresh inputs for `signature` (a fusec.runtime.Signature): standard normal floats;
    integers from the example inputs when given (they are often indices), else small
    non-negative integers."""
    arrays = []
    for i, spec in enumerate(signature.inputs):
        dtype = spec.numpy_dtype
        if spec.dtype in TOLERANCE and spec.dtype != "bfloat16":
            arrays.append(rng.standard_normal(spec.shape).astype(dtype))
        elif examples is not None and i < len(examples):
            arrays.append(np.array(examples[i], dtype=dtype).reshape(spec.shape))
        elif spec.dtype == "bool":
            arrays.append(rng.random(spec.shape) < 0.5)
        elif spec.dtype == "bfloat16":
            bits = rng.standard_normal(spec.shape).astype(np.float32).view(np.uint32) >> 16
            arrays.append(bits.astype(np.uint16).view(dtype))
        else:
            arrays.append(rng.integers(0, 4, spec.shape).astype(dtype))
    return arrays


def _nan_last(error: float) -> float:
    """Sort key: NaN is the worst error of all."""
    return math.inf if math.isnan(error) else error


def _exceeds(error: float, tolerance: float) -> bool:
    return math.isnan(error) or error > tolerance  # NaN always fails


# --------------------------------------------------------------------------- running


def run_bundle(bundle: str) -> VerifyResult:
    """Run a check `prepare` built: both programs on the same fresh inputs (from the bundle's
    seed), every fused kernel's outputs compared with the unfused program's."""
    from fusec import runtime

    path = os.path.join(bundle, BUNDLE)
    if not os.path.isfile(path):
        raise FusecError(f"not a verify bundle (no {BUNDLE}; build one with "
                         "`fusec MODEL --verify --verify-dir DIR`)", bundle)
    with open(path) as f:
        description = json.load(f)
    target = description["target"]
    if target == "cuda":
        from fusec.runtime import gpu_present

        if not gpu_present():
            raise FusecError("the check was built for the CUDA target and there is no GPU "
                             "here (libcuda.so.1 and /dev/nvidia0 not found): run it where "
                             "the GPU is", bundle)
    groups = [GroupCheck(index=g["index"], kind=g["kind"], ops=g["ops"],
                         location=g["location"], unmatched=g["unmatched"], target=target)
              for g in description["groups"]]
    examples = None
    if os.path.exists(os.path.join(bundle, "examples.npz")):
        with np.load(os.path.join(bundle, "examples.npz")) as saved:
            examples = tuple(saved[f"arr_{i}"] for i in range(len(saved.files)))
    fused_model = runtime.load(os.path.join(bundle, "fused.so"))
    unfused_model = runtime.load(os.path.join(bundle, "unfused.so"))
    inputs = random_inputs(unfused_model.signature,
                           np.random.default_rng(description["seed"]), examples)
    got = _as_tuple(fused_model(*inputs))
    want = _as_tuple(unfused_model(*inputs))
    result = _compare(got, fused_model.signature.outputs, want,
                      unfused_model.signature.outputs, description["outputs"], groups,
                      description["probes"])
    result.kernels = (len(fused_model.kernels), len(unfused_model.kernels))
    result.target = target
    result.source = description["source"]
    return result


def _as_tuple(result: Any) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def _as_float(array: np.ndarray, dtype: str) -> np.ndarray:
    """bfloat16 comes back as raw uint16 bits without ml_dtypes: compare it as numbers."""
    if dtype == "bfloat16":
        if array.dtype == np.uint16:
            return (array.astype(np.uint32) << 16).view(np.float32)
        return array.astype(np.float32)
    return array


def _compare(got: tuple, got_specs: Any, want: tuple, want_specs: Any, n_outputs: int,
             groups: list[GroupCheck], probes: list) -> VerifyResult:
    """`probes`: (group index, fused result number, unfused result number) per probed value."""
    tolerances = [TOLERANCE.get(s.dtype, 0.0) for s in want_specs]
    got = tuple(_as_float(a, s.dtype) for a, s in zip(got, got_specs))
    want = tuple(_as_float(a, s.dtype) for a, s in zip(want, want_specs))
    output_errors = [relative_error(g, w) for g, w in zip(got[:n_outputs], want[:n_outputs])]
    for group_index, f, u in probes:
        groups[group_index].errors.append(relative_error(got[f], want[u]))
        groups[group_index].tolerances.append(tolerances[u])
    first_bad = next((g for g in groups
                      if any(_exceeds(e, t) for e, t in zip(g.errors, g.tolerances))), None)
    outputs_ok = not any(_exceeds(e, t) for e, t in zip(output_errors, tolerances))
    return VerifyResult(output_errors, groups, tolerances[:n_outputs], first_bad,
                        ok=outputs_ok and first_bad is None)


def check_or_raise(result: VerifyResult, filename: str | None) -> None:
    """Raise VerificationError naming the first differing kernel (or output) if not ok."""
    if result.ok:
        return
    bad = result.first_bad
    if bad is not None:
        k = next(k for k, (e, t) in enumerate(zip(bad.errors, bad.tolerances)) if _exceeds(e, t))
        raise VerificationError(
            f"--verify: {bad.describe()} differs from the unfused program: output {k} of the "
            f"kernel has relative error {bad.errors[k]:.2e} (tolerance {bad.tolerances[k]:.0e})",
            bad.location or filename, result)
    index, error = next((i, e) for i, (e, t) in enumerate(zip(result.output_errors,
                                                              result.tolerances))
                        if _exceeds(e, t))
    raise VerificationError(
        f"--verify: output {index} differs from the unfused program: relative error "
        f"{error:.2e} (tolerance {result.tolerances[index]:.0e}); no single kernel could be "
        "named (its outputs could not be matched)", filename, result)
