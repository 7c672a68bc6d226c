"""fusec.runtime: load a `model.so` built by fusec and run it on numpy arrays.

    import fusec.runtime
    model = fusec.runtime.load("model.so")
    print(model.signature)          # (x: float32[64, 32], ...) -> (...)
    y = model(x)                    # one output: an array; several: a tuple
    model(x, out=y)                 # or write into caller-provided arrays

This module needs only numpy and ctypes: it imports no MLIR and nothing of fusec's compiler,
so a deployment process stays small. The artifact's C ABI is documented at the top of
runtime/shim.c; everything the runtime knows about a model comes from `fusec_metadata()`.

Inputs: each must have exactly the shape and dtype of the signature (no implicit casts);
otherwise ValueError names the input (index and name), what was expected and what was given.
Inputs that are not C-contiguous (or not aligned) are copied to contiguous arrays first; other
array-likes go through `numpy.asarray`. `out=` arrays must match exactly and be C-contiguous
and writeable, since the model writes into them in place; they may not overlap the inputs.

bfloat16: numpy has no bfloat16. A bfloat16 input may be given as a `ml_dtypes.bfloat16`
array (if ml_dtypes is installed) or as a uint16 array holding the raw bits; bfloat16 outputs
are `ml_dtypes.bfloat16` arrays if ml_dtypes is installed, else uint16 arrays of raw bits
(`(bits.astype(np.uint32) << 16).view(np.float32)` widens them).

Other targets: a "cuda" artifact loads here too (its metadata reads without a GPU) and runs
through `Module.run_pointers` on device pointers and a stream; calling it with numpy arrays
raises RuntimeError. `Module.run_pointers` also serves host callers that manage their own
buffers (torch tensors' `data_ptr()`), without any checks.

Loading: a file that is missing, not an ELF shared library for this machine, truncated, not a
fusec artifact, built for another ABI version or for a target this runtime cannot run raises
ArtifactError (a ValueError) carrying the path and the reason. Loading one path twice gives two
Modules over one library; if the file was replaced since it was first loaded (a rebuild), the
new file is loaded from a private copy, since the dynamic loader would hand back the old one.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import struct
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ABI_VERSION",
    "ARTIFACT_FORMAT",
    "HOST_TARGETS",
    "SUPPORTED_TARGETS",
    "ArtifactError",
    "Module",
    "Signature",
    "TensorSpec",
    "load",
]

# Must equal FUSEC_ABI_VERSION in runtime/shim.c (the build checks it).
ABI_VERSION = 1
ARTIFACT_FORMAT = "fusec-artifact"
# Targets this runtime loads. A "cuda" artifact runs on device pointers (Module.run_pointers);
# numpy arrays (Module.__call__) are for the host targets only.
SUPPORTED_TARGETS = ("cpu", "cuda")
HOST_TARGETS = ("cpu",)

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


# ---------------------------------------------------------------- loading


def _check_elf(path: Path) -> None:
    """Refuse what dlopen would refuse obscurely, or map and crash on (a truncated file)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        header = f.read(64)
        if header[:4] != b"\x7fELF":
            raise ArtifactError(path, "not a shared library (no ELF header)")
        if len(header) < 64 or header[4] != 2 or header[5] != 1:
            raise ArtifactError(path, "not a 64-bit little-endian ELF file (or truncated)")
        e_type, e_machine = struct.unpack_from("<HH", header, 16)
        phoff, shoff = struct.unpack_from("<QQ", header, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", header, 54)
        if e_type != 3:
            raise ArtifactError(path, f"ELF type {e_type} is not a shared library")
        host = _ELF_MACHINES.get(platform.machine().lower())
        if host is not None and e_machine != host:
            raise ArtifactError(
                path, f"built for ELF machine {e_machine}, this is {platform.machine()}"
            )
        if phoff + phentsize * phnum > size or shoff + shentsize * shnum > size:
            raise ArtifactError(path, f"truncated or corrupt: headers lie past its {size} bytes")
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
        if p_type == 1 and p_offset + p_filesz > size:  # PT_LOAD
            raise ArtifactError(path, f"truncated: a segment ends past its {size} bytes")


class _Library:
    """The ctypes view of one loaded model.so."""

    def __init__(self, path: Path, load_from: Path) -> None:
        try:
            self.cdll = ctypes.CDLL(os.fspath(load_from), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as e:
            raise ArtifactError(path, f"cannot be loaded: {e}") from None
        pointers = ctypes.POINTER(ctypes.c_void_p)
        abi = self._function(path, "fusec_abi_version", ctypes.c_int, [])
        meta = self._function(path, "fusec_metadata", ctypes.c_char_p, [])
        version = abi()
        if version != ABI_VERSION:
            self._close()
            raise ArtifactError(
                path, f"built for fusec ABI version {version}; this runtime runs {ABI_VERSION}"
            )
        try:
            self.metadata = _parse_metadata(path, meta())
            self.signature = Signature(
                _tensor_specs(path, self.metadata["inputs"], "input"),
                _tensor_specs(path, self.metadata["outputs"], "output"),
            )
        except ArtifactError:
            self._close()
            raise
        self.run = self._function(path, "fusec_run", ctypes.c_int, [pointers, pointers])
        self.run_stream = self._function(
            path, "fusec_run_stream", ctypes.c_int, [pointers, pointers, ctypes.c_void_p]
        )
        self.last_error = self._function(path, "fusec_last_error", ctypes.c_char_p, [])
        self.num_threads = self._function(path, "fusec_num_threads", ctypes.c_int, [])

    def _function(self, path: Path, name: str, restype: Any, argtypes: list) -> Any:
        try:
            fn = getattr(self.cdll, name)
        except AttributeError:
            self._close()
            raise ArtifactError(path, f"not a fusec artifact (no {name})") from None
        fn.restype, fn.argtypes = restype, argtypes
        return fn

    def _close(self) -> None:
        # A rejected library should not stay mapped; ctypes has no public dlclose.
        try:
            import _ctypes

            _ctypes.dlclose(self.cdll._handle)
        except (ImportError, AttributeError, OSError):
            pass

    def error_text(self) -> str:
        raw = self.last_error()
        return raw.decode("utf-8", "replace") if raw else ""


def _parse_metadata(path: Path, raw: bytes | None) -> dict[str, Any]:
    if not raw:
        raise ArtifactError(path, "fusec_metadata() returned nothing")
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(path, f"corrupt metadata: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != ARTIFACT_FORMAT:
        raise ArtifactError(path, f"metadata is not of format {ARTIFACT_FORMAT!r}")
    if meta.get("abi_version") != ABI_VERSION:
        raise ArtifactError(path, f"metadata says ABI version {meta.get('abi_version')!r}")
    if meta.get("target") not in SUPPORTED_TARGETS:
        raise ArtifactError(
            path,
            f"built for target {meta.get('target')!r}; this runtime runs {list(SUPPORTED_TARGETS)}",
        )
    for key in ("inputs", "outputs", "kernels"):
        if not isinstance(meta.get(key), list):
            raise ArtifactError(path, f"metadata has no {key!r} list")
    return meta


def _tensor_specs(path: Path, entries: list[Any], what: str) -> tuple[TensorSpec, ...]:
    specs = []
    for i, e in enumerate(entries):
        try:
            spec = TensorSpec(str(e["name"]), tuple(int(d) for d in e["shape"]), str(e["dtype"]))
        except (KeyError, TypeError, ValueError):
            raise ArtifactError(path, f"metadata {what} {i} is malformed: {e!r}") from None
        if spec.dtype != "bfloat16" and spec.dtype not in _NUMPY_DTYPES:
            raise ArtifactError(path, f"{what} {i} ({spec.name!r}) has unknown dtype {spec.dtype}")
        specs.append(spec)
    return tuple(specs)


_cache_lock = threading.Lock()
# realpath -> (file identity, library): dlopen of a path it already loaded returns the old
# library even if the file was replaced, so a changed file is loaded from a private copy.
_cache: dict[str, tuple[tuple[int, ...], _Library]] = {}


def _file_identity(path: Path) -> tuple[int, ...]:
    st = path.stat()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _open_library(path: Path) -> _Library:
    real = os.path.realpath(path)
    identity = _file_identity(path)
    with _cache_lock:
        cached = _cache.get(real)
        if cached is not None and cached[0] == identity:
            return cached[1]
        _check_elf(path)
        if cached is None:
            lib = _Library(path, Path(real))
        else:
            lib = _load_private_copy(path)
        _cache[real] = (identity, lib)
        return lib


def _load_private_copy(path: Path) -> _Library:
    fd, copy = tempfile.mkstemp(prefix="fusec-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as dst, open(path, "rb") as src:
            shutil.copyfileobj(src, dst)
        return _Library(path, Path(copy))
    finally:
        os.unlink(copy)  # the mapping outlives the name


def load(path: str | os.PathLike) -> Module:
    """Load the artifact at `path`; raises ArtifactError if it is not one this runtime can run."""
    p = Path(path)
    if not p.exists():
        raise ArtifactError(p, "no such file")
    if not p.is_file():
        raise ArtifactError(p, "not a regular file")
    return Module(p, _open_library(p))


# ---------------------------------------------------------------- running


class Module:
    """A loaded model: call it with numpy arrays, one per input, in signature order."""

    def __init__(self, path: Path, library: _Library) -> None:
        self.path = Path(path)
        self._lib = library
        self.signature: Signature = library.signature
        self._in_array_type = ctypes.c_void_p * max(1, len(self.signature.inputs))
        self._out_array_type = ctypes.c_void_p * max(1, len(self.signature.outputs))

    @property
    def metadata(self) -> dict[str, Any]:
        """The artifact's metadata JSON (see runtime/shim.c), as a fresh dict."""
        return json.loads(json.dumps(self._lib.metadata))

    @property
    def kernels(self) -> list[dict[str, Any]]:
        """One dict per launch, in order: symbol, kind, ops, grid, info."""
        return self.metadata["kernels"]

    @property
    def target(self) -> str:
        return self._lib.metadata["target"]

    @property
    def num_threads(self) -> int:
        """Threads that run a launch's tiles (FUSEC_NUM_THREADS, else the cores available)."""
        n = self._lib.num_threads()
        if n < 0:
            raise RuntimeError(f"{self.path}: {self._lib.error_text()}")
        return n

    def __repr__(self) -> str:
        return (
            f"<fusec.runtime.Module {self.path.name} {self.signature}, "
            f"{len(self._lib.metadata['kernels'])} kernel(s), target {self.target}>"
        )

    def __call__(self, *inputs: Any, out: Any = None) -> Any:
        """Run the model. Returns the output array, or a tuple of them if there are several
        (the `out` arrays themselves when given)."""
        if self.target not in HOST_TARGETS:
            raise RuntimeError(
                f"{self.path}: a {self.target!r} artifact runs on device pointers: "
                "use Module.run_pointers"
            )
        arrays = self._check_inputs(inputs)
        outputs = (
            self._check_outputs(out, arrays)
            if out is not None
            else [np.empty(s.shape, s.numpy_dtype) for s in self.signature.outputs]
        )
        in_ptrs = self._in_array_type(*(a.ctypes.data for a in arrays))
        out_ptrs = self._out_array_type(*(a.ctypes.data for a in outputs))
        status = self._lib.run(in_ptrs, out_ptrs)
        if status != 0:
            raise RuntimeError(
                f"{self.path}: fusec_run failed (status {status}): {self._lib.error_text()}"
            )
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def run_pointers(
        self, inputs: Sequence[int], outputs: Sequence[int], stream: int | None = None
    ) -> None:
        """Run on raw data pointers (ints: numpy `a.ctypes.data`, torch `t.data_ptr()`, cupy
        `a.data.ptr`), through `fusec_run_stream`. For a "cuda" artifact they are device
        pointers and `stream` a CUstream handle (None: the default stream), and the run is
        asynchronous on that stream; for "cpu", `stream` must be None. Only the counts are
        checked: shapes, dtypes, contiguity and lifetimes are the caller's to get right."""
        n_in, n_out = len(self.signature.inputs), len(self.signature.outputs)
        if len(inputs) != n_in or len(outputs) != n_out:
            raise ValueError(
                f"{self.path.name} takes {n_in} input and {n_out} output pointers, "
                f"got {len(inputs)} and {len(outputs)}"
            )
        in_ptrs = self._in_array_type(*inputs)
        out_ptrs = self._out_array_type(*outputs)
        status = self._lib.run_stream(in_ptrs, out_ptrs, stream)
        if status != 0:
            raise RuntimeError(
                f"{self.path}: fusec_run_stream failed (status {status}): {self._lib.error_text()}"
            )

    def _check_inputs(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        specs = self.signature.inputs
        if len(inputs) != len(specs):
            names = ", ".join(s.name for s in specs)
            raise ValueError(
                f"{self.path.name} takes {len(specs)} inputs ({names}), got {len(inputs)}"
            )
        arrays = []
        for i, (x, spec) in enumerate(zip(inputs, specs)):
            try:
                a = x if isinstance(x, np.ndarray) else np.asarray(x)
            except (TypeError, RuntimeError) as e:  # e.g. a torch tensor on a GPU
                raise ValueError(
                    f"input {i} ({spec.name!r}): cannot be read as a host array: {e}"
                ) from None
            _check_array(a, spec, f"input {i} ({spec.name!r})")
            if not (a.flags.c_contiguous and a.flags.aligned):
                a = np.array(a, order="C", copy=True)
            arrays.append(a)
        return arrays

    def _check_outputs(self, out: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
        specs = self.signature.outputs
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(specs):
            raise ValueError(f"{self.path.name} has {len(specs)} outputs, out= gave {len(outs)}")
        for i, (a, spec) in enumerate(zip(outs, specs)):
            where = f"out[{i}] ({spec.name!r})"
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{where}: expected a numpy array, got {type(a).__name__}")
            _check_array(a, spec, where)
            if not (a.flags.c_contiguous and a.flags.aligned and a.flags.writeable):
                raise ValueError(f"{where}: must be C-contiguous, aligned and writeable")
            for j, x in enumerate(inputs):
                if a.size and x.size and np.may_share_memory(a, x):
                    raise ValueError(f"{where}: overlaps input {j}")
            for j in range(i):
                if a.size and outs[j].size and np.may_share_memory(a, outs[j]):
                    raise ValueError(f"{where}: overlaps out[{j}]")
        return outs


def _check_array(a: np.ndarray, spec: TensorSpec, where: str) -> None:
    if not spec.accepts(a.dtype):
        expected = spec.dtype + (" (or uint16 bits)" if spec.dtype == "bfloat16" else "")
        raise ValueError(f"{where}: expected dtype {expected}, got {a.dtype}")
    if a.shape != spec.shape:
        raise ValueError(f"{where}: expected shape {spec.shape}, got {a.shape}")
