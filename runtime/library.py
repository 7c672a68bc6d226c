"""Loading a `model.so`: the ELF check, the C ABI through ctypes, the metadata, the CPU level, private copies of rebuilt files."""

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
from pathlib import Path
from typing import Any

from fusec.runtime.specs import ABI_VERSION, ARTIFACT_FORMAT, ArtifactError, SUPPORTED_TARGETS, Signature, TensorSpec, _ELF_MACHINES, _NUMPY_DTYPES


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
        # Artifacts since the profiler (optional): per-launch nanoseconds over runs (CUDA:
        # between events, while fusec_profile_enable(1); CPU: every run).
        self.profile_enable = getattr(self.cdll, "fusec_profile_enable", None)
        if self.profile_enable is not None:
            self.profile_enable.restype = None
            self.profile_enable.argtypes = [ctypes.c_int]
        self.profile = getattr(self.cdll, "fusec_profile", None)
        if self.profile is not None:
            self.profile.restype = ctypes.c_int64
            self.profile.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int64,
                                     ctypes.POINTER(ctypes.c_int64), ctypes.c_int]

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
# library even if the file was replaced, so a changed file is loaded from a private copy, and
# so is a library with state each time it is loaded again.
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
            if not cached[1].metadata.get("states"):
                return cached[1]
            # A model that keeps state between calls (a buffer `forward` updates): each load
            # is an instance of its own, starting from the state it was compiled with (the
            # library's globals): two fusec.compile of fresh models shared one counter when
            # the second took the first's cached artifact.
            return _load_private_copy(path)
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

