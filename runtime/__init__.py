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
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fusec.runtime.cuda import _CudaCall, _is_torch
from fusec.runtime.library import (CPU_LEVEL_FLAGS, _Library, _open_library,  # noqa: F401
                                   host_cpu_flags)
from fusec.runtime.specs import (ABI_VERSION, ARTIFACT_FORMAT, HOST_TARGETS,  # noqa: F401
                                 INDEX_ERROR_STATUS, SUPPORTED_TARGETS, ZERO_DIVISION_MESSAGE,
                                 ArtifactError,
                                 Signature, TensorSpec, _check_array, _host_array,
                                 _numbers_for_scalars)

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

def gpu_present() -> bool:
    """Whether this machine can run a CUDA artifact: the driver library and a GPU device."""
    import ctypes.util

    return ctypes.util.find_library("cuda") is not None and os.path.exists("/dev/nvidia0")


def _overlap(a: Any, b: Any) -> bool:
    """Whether two host arrays or torch tensors share memory (a view of the other, or the
    same one)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.shares_memory(a, b)
    if _is_torch(a) and _is_torch(b) and a.device == b.device and a.numel() and b.numel():
        start_a, start_b = a.data_ptr(), b.data_ptr()
        return start_a < start_b + _extent(b) and start_b < start_a + _extent(a)
    return False


def aliased_update(inputs: Sequence[Any], updated: Sequence[int]) -> tuple[int, int] | None:
    """(i, k): input i, which the model updates in place, shares memory with input k; or
    None. Eager reads k through the alias after the update, an artifact reads each input
    once before it."""
    for i in updated:
        for k, other in enumerate(inputs):
            if k != i and _overlap(inputs[i], other):
                return i, k
    return None


def argument_count_error(specs: Sequence[Any], got: int, path: Path) -> ValueError:
    """A call with `got` inputs to an artifact that takes `specs`."""
    names = ", ".join(s.name for s in specs)
    return ValueError(f"the compiled model takes {len(specs)} inputs ({names}), got {got} "
                      f"(artifact {path})")


def _extent(t: Any) -> int:
    """Bytes from a tensor's first element to one past its last (any strides >= 0)."""
    return (sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if s > 0) + 1) * \
        t.element_size()


def load(path: str | os.PathLike) -> Module:
    """Load the artifact at `path`; raises ArtifactError if it is not one this runtime can run."""
    p = Path(path)
    if not p.exists():
        raise ArtifactError(p, "no such file")
    if not p.is_file():
        raise ArtifactError(p, "not a regular file")
    return Module(p, _open_library(p))


def _tree_leaves(tree: Any) -> int:
    """How many outputs an `outputs_tree` holds."""
    if isinstance(tree, int):
        return 1
    (kind, children), = tree.items()
    return sum(_tree_leaves(c[1] if kind == "dict" else c) for c in children)


def _unflatten(tree: Any, outputs: list[Any]) -> Any:
    """`outputs` (flat, in order) nested as `tree` says (`frontend.output_tree`)."""
    if isinstance(tree, int):
        return outputs[tree]
    (kind, children), = tree.items()
    if kind == "dict":
        return {_key(key): _unflatten(child, outputs) for key, child in children}
    values = [_unflatten(child, outputs) for child in children]
    return values if kind == "list" else tuple(values)


def _key(key: Any) -> Any:
    """A dict key as `frontend.output_tree` wrote it: a number, string or bool as itself,
    None as {"none": null}, a tuple as {"tuple": [keys]}."""
    if isinstance(key, dict):
        return tuple(_key(k) for k in key["tuple"]) if "tuple" in key else None
    return key


class IntegerDivisionByZero(ZeroDivisionError, RuntimeError):
    """An integer division by zero in a model: a ZeroDivisionError, and a RuntimeError as
    torch raises it (`RuntimeError: ZeroDivisionError`), so code written for eager catches
    it too."""


def _check_error(text: str) -> Exception:
    """The exception for a failed check (`fusion.index_checks`): IntegerDivisionByZero for
    an integer division by zero (`--fusion-guard-division`), else IndexError."""
    zero = ZERO_DIVISION_MESSAGE.format(index=0)
    return IntegerDivisionByZero(text) if zero in text else IndexError(text)


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
        self._check_updated(inputs)
        targets = self._check_outputs(out, arrays) if out is not None else None
        returned = self.returned_outputs
        outputs = [np.empty(s.shape, s.numpy_dtype) for s in self.signature.outputs]
        # A model that checks indices read from its inputs may fail half-way: the caller's
        # `out` arrays are then written only once the run has succeeded.
        direct = targets is not None and not self._lib.metadata.get("index_checks")
        if direct:
            for position, target in zip(returned, targets):
                outputs[position] = target
        in_ptrs = self._in_array_type(*(a.ctypes.data for a in arrays))
        out_ptrs = self._out_array_type(*(a.ctypes.data for a in outputs))
        status = self._lib.run(in_ptrs, out_ptrs)
        if status == INDEX_ERROR_STATUS:
            # torch raises IndexError for an index out of range (and an error for an integer
            # division by zero); so does the model.
            raise _check_error(f"{self.path.name}: {self._lib.error_text()}")
        if status != 0:
            raise RuntimeError(
                f"{self.path}: fusec_run failed (status {status}): {self._lib.error_text()}"
            )
        self._write_back(inputs, outputs)
        if targets is not None:
            if not direct:
                for position, target in zip(returned, targets):
                    np.copyto(target, outputs[position])
            return self._pack(targets)
        specs = self.signature.outputs
        return self._pack(_numbers_for_scalars([outputs[i] for i in returned],
                                               [specs[i] for i in returned]))

    @property
    def input_updates(self) -> list[tuple[int, int]]:
        """(input, output) positions: the model updates that input in place (`x.add_(1)`, a
        KV cache written at a position); the output is its new value, which a call writes
        back into the caller's array (numpy or torch) and does not return."""
        return [tuple(u) for u in self._lib.metadata.get("input_updates", [])]

    @property
    def returned_outputs(self) -> list[int]:
        """Positions in `signature.outputs` that a call returns (all but the inputs' new
        values, `input_updates`)."""
        updated = {j for _, j in self.input_updates}
        return [i for i in range(len(self.signature.outputs)) if i not in updated]

    def _check_updated(self, inputs: Sequence[Any]) -> None:
        """Before running: an input the model updates in place must be an array the new value
        can be written into (a writeable numpy array or a torch tensor)."""
        for i, _ in self.input_updates:
            x, spec = inputs[i], self.signature.inputs[i]
            if isinstance(x, np.ndarray) and x.flags.writeable or _is_torch(x) or \
                    self.target == "cuda" and hasattr(x, "__cuda_array_interface__"):
                continue
            what = "a read-only numpy array" if isinstance(x, np.ndarray) else \
                type(x).__name__
            raise ValueError(f"input {i} ({spec.name!r}): the model updates it in place, so "
                             f"it must be a writeable numpy array or torch tensor; got {what}")
        # The same array passed twice gave a + b = 1 where eager gives 2.
        aliased = aliased_update(inputs, [i for i, _ in self.input_updates])
        if aliased is not None:
            (i, k), names = aliased, self.signature.inputs
            raise ValueError(
                f"input {k} ({names[k].name!r}) shares memory with input {i} "
                f"({names[i].name!r}), which the model updates in place: the update "
                f"would not be seen through it as in eager; pass a copy")

    def _write_back(self, inputs: Sequence[Any], outputs: list[Any]) -> None:
        """The inputs' new values (`input_updates`) copied into the caller's arrays."""
        for i, j in self.input_updates:
            x, value = inputs[i], outputs[j]
            if isinstance(x, np.ndarray):
                np.copyto(x, value.view(x.dtype) if value.dtype.itemsize == x.dtype.itemsize
                          and value.dtype != x.dtype else value)
                continue
            if not _is_torch(x):  # a CuPy array (cuda)
                x[...] = value
                continue
            import torch

            if isinstance(value, np.ndarray):
                if x.dtype == torch.bfloat16:  # numpy holds its bits (ml_dtypes or uint16)
                    value = torch.from_numpy(value.view(np.int16)).view(torch.bfloat16)
                else:
                    value = torch.from_numpy(value)
            with torch.no_grad():
                x.copy_(value)

    def profiling(self, on: bool = True) -> None:
        """CUDA: time every launch of the runs from now on (a CUDA event before each launch
        and after the last; each run then waits for its stream), until `profiling(False)`;
        `profile()` reads the times. CPU artifacts time every run already: a no-op."""
        if self.target != "cuda":
            return
        if self._lib.profile_enable is None:
            raise RuntimeError(f"{self.path.name}: this artifact has no profiler (built "
                               f"before it)")
        self._lib.profile_enable(int(on))

    def profile(self, reset: bool = True) -> list[dict[str, Any]]:
        """Where the time of the runs since the last reset went, launch by launch (CUDA:
        the runs since `profiling()` was turned on).

        One dict per launch in plan order: its metadata (`symbol`, `kind`, `ops`, `grid`,
        `info`) and `ms`, the mean time per run in milliseconds (CPU: wall time from
        posting the launch to its last tile's end, so a launch that cannot use every thread
        shows it; CUDA: GPU time between the events around it), and `share`, its fraction
        of the launches' total. `reset` starts a new count. `fusec --profile` prints this."""
        fn = self._lib.profile
        if fn is None:
            raise RuntimeError(f"{self.path.name}: this artifact has no profiler "
                               f"(target {self.target}, or built before it)")
        kernels = self.kernels
        ns = (ctypes.c_int64 * max(1, len(kernels)))()
        runs = ctypes.c_int64(0)
        used = fn(ns, len(kernels), ctypes.byref(runs), int(reset))
        if runs.value == 0:
            return []
        if used != len(kernels):
            raise RuntimeError(f"{self.path.name}: the profile has {used} launches, "
                               f"the metadata {len(kernels)}")
        total = sum(ns[:used]) or 1
        return [dict(k, ms=ns[i] / runs.value / 1e6, share=ns[i] / total)
                for i, k in enumerate(kernels)]

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
            raise _check_error(f"{self.path.name}: {lib.error_text()}")
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
        output name (a model that returned a dict), nested as the model nested them (a list
        in a tuple, a dict of tuples: the metadata's `outputs_tree`)."""
        tree = self._lib.metadata.get("outputs_tree")
        if tree is not None and _tree_leaves(tree) == len(outputs):
            return _unflatten(tree, outputs)
        if self._lib.metadata.get("outputs_as") == "dict":
            specs = [self.signature.outputs[i] for i in self.returned_outputs]
            return {s.name: o for s, o in zip(specs, outputs)}
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
            raise argument_count_error(specs, len(inputs), self.path)
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
        specs = [self.signature.outputs[i] for i in self.returned_outputs]
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

