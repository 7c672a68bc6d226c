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

Outputs: arrays of the signature's shapes and dtypes, except that an output the metadata marks
`"scalar"` (a model that returns a Python number, such as `int(t)` or `a + b`) comes back as
a Python `int`, `float` or `bool` (given `out=`, its 0-d array is filled instead). torch-mlir's
integers are signless: a torch.uint8 argument is an int8 input here, and the runtime does not
reinterpret a uint8 array on its own (see `signless_inputs` in fusec.tools.torch_mlir_e2e).

bfloat16: numpy has no bfloat16. A bfloat16 input may be given as a `ml_dtypes.bfloat16`
array (if ml_dtypes is installed) or as a uint16 array holding the raw bits; bfloat16 outputs
are `ml_dtypes.bfloat16` arrays if ml_dtypes is installed, else uint16 arrays of raw bits
(`(bits.astype(np.uint32) << 16).view(np.float32)` widens them).

CUDA: a "cuda" artifact loads anywhere (its metadata reads without a GPU). Called, it takes
torch CUDA tensors, objects with `__cuda_array_interface__` (CuPy) or DLPack (zero copy), and
numpy arrays (copied in and out); outputs are allocated (torch tensors if an input is one, CuPy
arrays if an input is one, else numpy) or given with `out=`; `stream=` (an int CUstream or a
torch/CuPy stream; default: torch's or CuPy's current stream, else the legacy default stream);
`graph=True` replays the launches as a CUDA graph captured once per set of pointers. Wrong
dtype, shape, device or a non-contiguous array: ValueError naming the argument; a driver or
cuBLASLt failure: RuntimeError with the CUDA error name and the kernel or launch.
`Module.run_pointers` serves callers that manage their own device pointers, without checks.

Loading: a file that is missing, not an ELF shared library for this machine, truncated, not a
fusec artifact, built for another ABI version or for a target this runtime cannot run raises
ArtifactError (a ValueError) carrying the path and the reason. Loading one path twice gives two
Modules over one library; if the file was replaced since it was first loaded (a rebuild), the
new file is loaded from a private copy, since the dynamic loader would hand back the old one.
"""

from __future__ import annotations

import ctypes
import functools
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
# fusec_run's status for an index read from an input out of range (runtime/shim.c).
INDEX_ERROR_STATUS = 3
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
        # CUDA artifacts since the cuBLASLt work also export fusec_run_graph (optional).
        self.run_graph = getattr(self.cdll, "fusec_run_graph", None)
        if self.run_graph is not None:
            self.run_graph.restype = ctypes.c_int
            self.run_graph.argtypes = [pointers, pointers, ctypes.c_void_p]
        self.num_threads = self._function(path, "fusec_num_threads", ctypes.c_int, [])
        # CUDA artifacts that check indices read from data (optional): the device's record
        # of a failed check, read after the run (runtime/shim_cuda.c).
        self.index_status = getattr(self.cdll, "fusec_index_status", None)
        if self.index_status is not None:
            self.index_status.restype = ctypes.c_int
            self.index_status.argtypes = [ctypes.c_void_p]

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
    _check_cpu_level(path, meta)
    return meta


# What an x86-64 level's kernels execute (LLVM's definitions, highest level first): an artifact
# built for a level this CPU lacks would die of SIGILL in its first kernel, so it is refused at
# load time instead. The CPU code generator picks the highest level of the build machine.
CPU_LEVEL_FLAGS = {
    "x86-64-v4": ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
    "x86-64-v3": ("avx2", "fma", "bmi2", "movbe"),
}


@functools.lru_cache(maxsize=1)
def host_cpu_flags() -> frozenset[str] | None:
    """The CPU flags of this machine from /proc/cpuinfo (read once), or None where unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None  # unknown (not Linux): trust the artifact


def _check_cpu_level(path: Path, meta: dict[str, Any]) -> None:
    needed = CPU_LEVEL_FLAGS.get(meta.get("cpu") or "", ())
    flags = host_cpu_flags() if needed and meta.get("target") == "cpu" else None
    missing = [f for f in needed if flags is not None and f not in flags]
    if missing:
        raise ArtifactError(
            path, f"built for CPU {meta['cpu']}, which needs {', '.join(missing)}: this CPU "
                  "lacks it (rebuild here, or with FUSEC_CPU=x86-64-v3 or generic)")


def _tensor_specs(path: Path, entries: list[Any], what: str) -> tuple[TensorSpec, ...]:
    specs = []
    for i, e in enumerate(entries):
        try:
            spec = TensorSpec(str(e["name"]), tuple(int(d) for d in e["shape"]), str(e["dtype"]),
                              bool(e.get("scalar", False)))
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

    def __call__(self, *inputs: Any, out: Any = None, stream: Any = None,
                 graph: bool = False) -> Any:
        """Run the model. Returns the output array, or a tuple of them if there are several
        (the `out` arrays themselves when given).

        A "cuda" artifact takes torch CUDA tensors, objects with `__cuda_array_interface__`
        (CuPy) or DLPack (zero copy), and numpy arrays (copied in and out); see `_CudaCall`.
        `stream` and `graph` are for "cuda" artifacts only."""
        if self.target == "cuda":
            return _CudaCall(self, inputs, out, stream).run(graph)
        if stream is not None or graph:
            raise ValueError(f"{self.path.name}: stream= and graph= are for cuda artifacts")
        arrays = self._check_inputs(inputs)
        targets = self._check_outputs(out, arrays) if out is not None else None
        # A model that checks indices read from its inputs may fail half-way: the caller's
        # `out` arrays are then written only once the run has succeeded.
        outputs = (
            targets
            if targets is not None and not self._lib.metadata.get("index_checks")
            else [np.empty(s.shape, s.numpy_dtype) for s in self.signature.outputs]
        )
        in_ptrs = self._in_array_type(*(a.ctypes.data for a in arrays))
        out_ptrs = self._out_array_type(*(a.ctypes.data for a in outputs))
        status = self._lib.run(in_ptrs, out_ptrs)
        if status == INDEX_ERROR_STATUS:
            # torch raises IndexError for an index out of range; so does the model.
            raise IndexError(f"{self.path.name}: {self._lib.error_text()}")
        if status != 0:
            raise RuntimeError(
                f"{self.path}: fusec_run failed (status {status}): {self._lib.error_text()}"
            )
        if targets is not None and outputs is not targets:
            for target, result in zip(targets, outputs):
                np.copyto(target, result)
            outputs = targets
        if out is None:
            outputs = _numbers_for_scalars(outputs, self.signature.outputs)
        return self._pack(outputs)

    def _raise_failed_index_check(self, stream: Any = None) -> None:
        """For a "cuda" artifact that checks indices read from data (embeddings, gathers):
        wait for `stream` and raise IndexError if a kernel found an index out of range (the
        kernel read index 0 instead; torch raises IndexError, through its device-side
        assert). Models without index checks return at once, without waiting."""
        lib = self._lib
        if not lib.metadata.get("index_checks") or lib.index_status is None:
            return
        status = lib.index_status(stream)
        if status == INDEX_ERROR_STATUS:
            raise IndexError(f"{self.path.name}: {lib.error_text()}")
        if status != 0:
            raise RuntimeError(f"{self.path}: fusec_index_status failed (status {status}): "
                               f"{lib.error_text()}")

    def check_indices(self, stream: Any = None) -> None:
        """Raise IndexError if a run on `stream` (a CUstream handle; None: the default
        stream) since the last check read an index out of range. `__call__` checks after
        every run; `run_pointers`, asynchronous, leaves it to the caller."""
        self._raise_failed_index_check(stream)

    def _pack(self, outputs: list[Any]) -> Any:
        """The outputs as the model returned them: one value, a tuple, or a dict keyed by
        output name (a model that returned a dict)."""
        if self._lib.metadata.get("outputs_as") == "dict":
            return {s.name: o for s, o in zip(self.signature.outputs, outputs)}
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
                a = x if isinstance(x, np.ndarray) else _host_array(x)
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


# ---------------------------------------------------------------- CUDA artifacts: arguments

_DLPACK_CUDA, _DLPACK_CPU = 2, 1
# DLPack (type code, bits) -> dtype name (numpy spelling; bfloat16 has code 4).
_DLPACK_DTYPES = {(2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (4, 16): "bfloat16",
                  (0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
                  (1, 8): "uint8", (6, 8): "bool"}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Driver:
    """The few CUDA driver calls the runtime makes itself (libcuda.so.1, through ctypes)."""

    _lib: Any = None

    @classmethod
    def get(cls) -> Any:
        if cls._lib is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                raise RuntimeError(f"cannot open libcuda.so.1 (no NVIDIA driver?): {e}") from None
            cls._lib = lib
            cls.check(lib.cuInit(0), "cuInit")
        return cls._lib

    @classmethod
    def check(cls, status: int, what: str) -> None:
        if status != 0:
            name = ctypes.c_char_p()
            cls._lib.cuGetErrorName(status, ctypes.byref(name))
            raise RuntimeError(f"{what}: {(name.value or b'CUDA error').decode()} ({status})")

    @classmethod
    def current_device(cls) -> int:
        """The device of the current context; device 0's primary context made current if none
        is (as the shim does)."""
        lib = cls.get()
        ctx = ctypes.c_void_p()
        cls.check(lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            dev = ctypes.c_int()
            cls.check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
            cls.check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev),
                      "cuDevicePrimaryCtxRetain")
            cls.check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        dev = ctypes.c_int()
        cls.check(lib.cuCtxGetDevice(ctypes.byref(dev)), "cuCtxGetDevice")
        return dev.value

    @classmethod
    def pointer_device(cls, ptr: int) -> int | None:
        """The device that owns `ptr`, or None if it is not device memory."""
        lib = cls.get()
        ordinal = ctypes.c_int()
        status = lib.cuPointerGetAttribute(ctypes.byref(ordinal), 9,  # DEVICE_ORDINAL
                                           ctypes.c_uint64(ptr))
        return ordinal.value if status == 0 else None

    @classmethod
    def alloc(cls, nbytes: int) -> int:
        ptr = ctypes.c_uint64()
        cls.check(cls.get().cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(max(nbytes, 1))),
                  "cuMemAlloc")
        return ptr.value

    @classmethod
    def free(cls, ptr: int) -> None:
        cls.get().cuMemFree_v2(ctypes.c_uint64(ptr))

    @classmethod
    def to_device(cls, ptr: int, array: np.ndarray, stream: int) -> None:
        cls.check(cls.get().cuMemcpyHtoDAsync_v2(ctypes.c_uint64(ptr),
                                                 ctypes.c_void_p(array.ctypes.data),
                                                 ctypes.c_size_t(array.nbytes),
                                                 ctypes.c_void_p(stream)), "cuMemcpyHtoDAsync")

    @classmethod
    def to_host(cls, array: np.ndarray, ptr: int, stream: int) -> None:
        cls.check(cls.get().cuMemcpyDtoHAsync_v2(ctypes.c_void_p(array.ctypes.data),
                                                 ctypes.c_uint64(ptr),
                                                 ctypes.c_size_t(array.nbytes),
                                                 ctypes.c_void_p(stream)), "cuMemcpyDtoHAsync")

    @classmethod
    def synchronize(cls, stream: int) -> None:
        cls.check(cls.get().cuStreamSynchronize(ctypes.c_void_p(stream)), "cuStreamSynchronize")


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr")


def _is_cupy(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "cupy"


def _contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


@dataclass
class _DeviceArg:
    """One argument as the shim sees it: a device pointer, and how it got there."""

    ptr: int
    host: np.ndarray | None = None  # a host array copied in (input) or out (output)
    owned: bool = False  # ptr was allocated here (freed after the run)
    keep: Any = None  # what must stay alive while the run uses ptr
    copy_in: bool = False  # host: an input, copied to the device before the run


class _CudaCall:
    """One call of a cuda artifact: arguments checked and turned into device pointers.

    Checks, each a ValueError naming the argument (index and name): dtype and shape equal to
    the signature's; device arrays C-contiguous, on the device of the current context (torch:
    the current device); a CPU torch tensor is refused (pass numpy to copy). Outputs: `out=`
    arrays (device or numpy), else torch tensors on the inputs' device if an input is a torch
    tensor, CuPy arrays if one is a CuPy array, numpy arrays otherwise.
    """

    def __init__(self, module: Module, inputs: Sequence[Any], out: Any, stream: Any) -> None:
        self.module = module
        specs = module.signature.inputs
        if len(inputs) != len(specs):
            names = ", ".join(s.name for s in specs)
            raise ValueError(
                f"{module.path.name} takes {len(specs)} inputs ({names}), got {len(inputs)}")
        outs = [] if out is None else list(out) if isinstance(out, (tuple, list)) else [out]
        for where, x in [(f"input {i} ({s.name!r})", x) for i, (x, s) in
                         enumerate(zip(inputs, specs))] + [(f"out[{i}]", o)
                                                           for i, o in enumerate(outs)]:
            if _is_torch(x) and x.device.type != "cuda":
                raise ValueError(f"{where}: a torch tensor on {x.device}; a cuda artifact takes "
                                 "CUDA tensors (or numpy arrays, copied)")
        self.torch_like = next((x for x in inputs if _is_torch(x)), None)
        self.cupy_like = next((x for x in inputs if _is_cupy(x)), None)
        self._device_index: int | None = None
        self.stream = self._stream(stream)
        self.args: list[_DeviceArg] = []
        try:
            self.ins = [self._arg(x, spec, f"input {i} ({spec.name!r})", True)
                        for i, (x, spec) in enumerate(zip(inputs, specs))]
            self.outs, self.results = self._outputs(out)
            self._place_host_arrays()
        except BaseException:
            self._release()
            raise

    @property
    def device(self) -> int:
        """The device the model runs on: torch's current device, else the current context's."""
        if self._device_index is None:
            if self.torch_like is not None:
                import torch

                self._device_index = torch.cuda.current_device()
            else:
                self._device_index = _Driver.current_device()
        return self._device_index

    def _stream(self, stream: Any) -> int:
        if stream is None:
            if self.torch_like is not None:
                import torch

                return int(torch.cuda.current_stream().cuda_stream)
            if self.cupy_like is not None:
                import cupy

                return int(cupy.cuda.get_current_stream().ptr)
            return 0
        if isinstance(stream, int) and not isinstance(stream, bool):
            return stream
        for attr in ("cuda_stream", "ptr"):
            if isinstance(getattr(stream, attr, None), int):
                return int(getattr(stream, attr))
        raise ValueError(f"stream: expected a CUstream handle (int), a torch or CuPy stream, "
                         f"got {type(stream).__name__}")

    def _check(self, dtype: str, shape: tuple[int, ...], spec: TensorSpec, where: str) -> None:
        if dtype != spec.dtype:
            raise ValueError(f"{where}: expected dtype {spec.dtype}, got {dtype}")
        if tuple(shape) != spec.shape:
            raise ValueError(f"{where}: expected shape {spec.shape}, got {tuple(shape)}")

    def _on_device(self, device: int | None, where: str) -> None:
        if device is None:
            raise ValueError(f"{where}: the pointer is not CUDA device memory")
        if device != self.device:
            raise ValueError(f"{where}: on cuda:{device}, but the model runs on cuda:"
                             f"{self.device} (the current device)")

    def _arg(self, x: Any, spec: TensorSpec, where: str, is_input: bool) -> _DeviceArg:
        if _is_torch(x):
            arg = self._torch_arg(x, spec, where)
        elif hasattr(x, "__cuda_array_interface__"):
            arg = self._cai_arg(x, spec, where)
        elif hasattr(x, "__dlpack_device__") and not isinstance(x, np.ndarray) and \
                x.__dlpack_device__()[0] == _DLPACK_CUDA:
            arg = self._dlpack_arg(x, spec, where)
        else:
            arg = self._host_arg(x, spec, where, is_input)
        self.args.append(arg)
        return arg

    def _torch_arg(self, x: Any, spec: TensorSpec, where: str) -> _DeviceArg:
        self._check(str(x.dtype).removeprefix("torch."), tuple(x.shape), spec, where)
        if not x.is_contiguous():
            raise ValueError(f"{where}: not contiguous (call .contiguous())")
        self._on_device(x.device.index, where)
        return _DeviceArg(int(x.data_ptr()), keep=x)

    def _cai_arg(self, x: Any, spec: TensorSpec, where: str) -> _DeviceArg:
        cai = x.__cuda_array_interface__
        dtype = np.dtype(cai["typestr"])
        name = "bool" if dtype == np.bool_ else dtype.name
        shape = tuple(cai["shape"])
        self._check(name, shape, spec, where)
        strides = cai.get("strides")
        if strides is not None and tuple(strides) != _contiguous_strides(shape, dtype.itemsize):
            raise ValueError(f"{where}: not C-contiguous (strides {tuple(strides)})")
        ptr = int(cai["data"][0])
        if ptr:
            self._on_device(_Driver.pointer_device(ptr), where)
        return _DeviceArg(ptr, keep=x)

    def _dlpack_arg(self, x: Any, spec: TensorSpec, where: str) -> _DeviceArg:
        capsule = x.__dlpack__()
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        # DLManagedTensor starts with its DLTensor.
        t = _DLTensor.from_address(get(capsule, b"dltensor"))
        dtype = _DLPACK_DTYPES.get((t.dtype.code, t.dtype.bits))
        if dtype is None or t.dtype.lanes != 1:
            raise ValueError(f"{where}: DLPack dtype code {t.dtype.code} bits {t.dtype.bits} "
                             "is not supported")
        shape = tuple(t.shape[i] for i in range(t.ndim))
        self._check(dtype, shape, spec, where)
        if t.strides:
            strides = tuple(t.strides[i] for i in range(t.ndim))  # in elements
            expected = _contiguous_strides(shape, 1)
            if any(d > 1 and s != e for d, s, e in zip(shape, strides, expected)):
                raise ValueError(f"{where}: not C-contiguous (DLPack strides {strides})")
        self._on_device(t.device.device_id, where)
        return _DeviceArg(int(t.data or 0) + int(t.byte_offset), keep=(x, capsule))

    def _host_arg(self, x: Any, spec: TensorSpec, where: str, is_input: bool) -> _DeviceArg:
        try:
            a = x if isinstance(x, np.ndarray) else np.asarray(x)
        except (TypeError, RuntimeError) as e:
            raise ValueError(f"{where}: not a CUDA array and not readable as a host array: "
                             f"{e}") from None
        _check_array(a, spec, where)
        if not is_input and not (a.flags.c_contiguous and a.flags.writeable):
            raise ValueError(f"{where}: a numpy out= array must be C-contiguous and writeable")
        # Device memory and the copy in come after every argument passed its checks.
        return _DeviceArg(0, host=np.ascontiguousarray(a), copy_in=is_input)

    def _place_host_arrays(self) -> None:
        for arg in self.args:
            if arg.host is not None and not arg.owned:
                arg.ptr = _Driver.alloc(arg.host.nbytes)
                arg.owned = True
                if arg.copy_in:
                    _Driver.to_device(arg.ptr, arg.host, self.stream)

    def _outputs(self, out: Any) -> tuple[list[_DeviceArg], list[Any]]:
        specs = self.module.signature.outputs
        if out is not None:
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            if len(outs) != len(specs):
                raise ValueError(f"{self.module.path.name} has {len(specs)} outputs, out= gave "
                                 f"{len(outs)}")
            args = [self._arg(o, s, f"out[{i}] ({s.name!r})", False)
                    for i, (o, s) in enumerate(zip(outs, specs))]
            return args, outs
        if self.torch_like is not None:
            import torch

            results = [torch.empty(s.shape, dtype=getattr(torch, s.dtype),
                                   device=self.torch_like.device) for s in specs]
        elif self.cupy_like is not None:
            import cupy

            results = [cupy.empty(s.shape, dtype=s.numpy_dtype) for s in specs]
        else:
            results = [np.empty(s.shape, s.numpy_dtype) for s in specs]
        args = [self._arg(r, s, f"output {i} ({s.name!r})", False)
                for i, (r, s) in enumerate(zip(results, specs))]
        return args, results

    def run(self, graph: bool) -> Any:
        lib = self.module._lib
        ins = self.module._in_array_type(*(a.ptr for a in self.ins))
        outs = self.module._out_array_type(*(a.ptr for a in self.outs))
        try:
            if graph:
                if lib.run_graph is None:
                    raise RuntimeError(f"{self.module.path}: this artifact has no "
                                       "fusec_run_graph (rebuild it)")
                status = lib.run_graph(ins, outs, self.stream)
                what = "fusec_run_graph"
            else:
                status = lib.run_stream(ins, outs, self.stream)
                what = "fusec_run_stream"
            if status != 0:
                raise RuntimeError(f"{self.module.path}: {what} failed (status {status}): "
                                   f"{lib.error_text()}")
            self.module._raise_failed_index_check(self.stream)
            host_outs = [a for a in self.outs if a.host is not None]
            for a in host_outs:
                _Driver.to_host(a.host, a.ptr, self.stream)
            if any(a.owned for a in self.args):
                _Driver.synchronize(self.stream)
        finally:
            self._release()
        results = self.results
        return self.module._pack(results)

    def _release(self) -> None:
        for a in self.args:
            if a.owned:
                _Driver.free(a.ptr)
                a.owned = False
