"""What a fusec artifact is to the runtime: the ABI constants, tensor specs and signatures, the argument checks."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


# Must equal FUSEC_ABI_VERSION in runtime/shim.c (the build checks it).
ABI_VERSION = 1

ARTIFACT_FORMAT = "fusec-artifact"

# fusec_run's status for an index read from an input out of range (runtime/shim.c).
INDEX_ERROR_STATUS = 3
# The start of a failed check's message for an integer division by zero
# (--fusion-guard-division writes it; the runtime puts the divisor, 0, in place of {index}
# and raises ZeroDivisionError for it).
ZERO_DIVISION_MESSAGE = "integer division by {index} ("

# Targets this runtime loads. A "cuda" artifact runs on device pointers (Module.run_pointers);
# numpy arrays (Module.__call__) are for the host targets only.
SUPPORTED_TARGETS = ("cpu", "cuda")

HOST_TARGETS = ("cpu",)


def cache_dir() -> str:
    """Where fusec keeps what it builds once (compiled artifacts, the tuning cache, the
    runtime shim's object): $FUSEC_CACHE_DIR, else ~/.cache/fusec."""
    return os.environ.get("FUSEC_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "fusec")


try:  # optional: numpy has no bfloat16 of its own
    import ml_dtypes as _ml_dtypes

    _BFLOAT16: np.dtype | None = np.dtype(_ml_dtypes.bfloat16)
except ImportError:
    _BFLOAT16 = None

_NUMPY_DTYPES = {
    name: np.dtype(name)
    for name in (
        "float32",
        "float64",
        "float16",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint8",
        "bool",
    )
}

# e_machine of the ELF header, for the machines fusec builds on.
_ELF_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}

class ArtifactError(ValueError):
    """A file that cannot be loaded as a fusec artifact; `path` and `reason` say which and why."""

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        super().__init__(f"{os.fspath(path)}: {reason}")
        self.path = os.fspath(path)
        self.reason = reason

@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model: name, static shape, dtype name (numpy spelling)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    # An output the model returns as a Python number (int, float or bool), not an array.
    scalar: bool = False

    @property
    def numpy_dtype(self) -> np.dtype:
        """The dtype of arrays the runtime returns for this tensor."""
        if self.dtype == "bfloat16":
            return _BFLOAT16 if _BFLOAT16 is not None else np.dtype(np.uint16)
        return _NUMPY_DTYPES[self.dtype]

    def accepts(self, dtype: np.dtype) -> bool:
        """Whether an input array of `dtype` can be passed for this tensor."""
        if self.dtype == "bfloat16":
            return dtype == np.uint16 or (_BFLOAT16 is not None and dtype == _BFLOAT16)
        return dtype == _NUMPY_DTYPES[self.dtype]

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"

@dataclass(frozen=True)
class Signature:
    """The inputs and outputs of a model, in call order."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def __str__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.outputs))
        return f"({ins}) -> ({outs})"

def _host_array(x: Any) -> np.ndarray:
    """`x` as a numpy array. A torch bfloat16 tensor (which numpy cannot read) comes as its
    bits, viewed as `ml_dtypes.bfloat16` where ml_dtypes is installed (raw uint16 bits
    otherwise); torch is not imported here: a torch tensor means torch is loaded already."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 \
            and x.device.type == "cpu":
        bits = np.asarray(x.detach().contiguous().view(torch.int16)).view(np.uint16)
        return bits.view(_BFLOAT16) if _BFLOAT16 is not None else bits
    return np.asarray(x)

def _numbers_for_scalars(outputs: list[np.ndarray], specs: Sequence[TensorSpec]) -> list[Any]:
    """Scalar outputs as Python numbers (`int`, `float`, `bool`), as the torch model returns."""
    return [a.item() if spec.scalar else a for a, spec in zip(outputs, specs)]

def _check_array(a: np.ndarray, spec: TensorSpec, where: str) -> None:
    if not spec.accepts(a.dtype):
        expected = spec.dtype + (" (or uint16 bits)" if spec.dtype == "bfloat16" else "")
        raise ValueError(f"{where}: expected dtype {expected}, got {a.dtype}")
    if a.shape != spec.shape:
        raise ValueError(f"{where}: expected shape {spec.shape}, got {a.shape}")

