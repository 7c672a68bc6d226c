"""Running a "cuda" artifact: the few driver calls the runtime makes itself, device arguments (torch, CuPy, DLPack, numpy), a call's launch and its index checks."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fusec.runtime.specs import TensorSpec, _check_array

if TYPE_CHECKING:
    from fusec.runtime import Module


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
        self.inputs = inputs
        module._check_updated(inputs)
        specs = module.signature.inputs
        if len(inputs) != len(specs):
            from fusec.runtime import argument_count_error

            raise argument_count_error(specs, len(inputs), module.path)
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
        if any(arg.host is not None and not arg.owned for arg in self.args):
            # The device (and so a current context: device 0's primary one if none is) before
            # allocating: numpy alone in a fresh process makes no context (found by the e2e
            # suite on the H200: cuMemAlloc failed with CUDA_ERROR_INVALID_CONTEXT).
            _ = self.device
        for arg in self.args:
            if arg.host is not None and not arg.owned:
                arg.ptr = _Driver.alloc(arg.host.nbytes)
                arg.owned = True
                if arg.copy_in:
                    _Driver.to_device(arg.ptr, arg.host, self.stream)

    def _outputs(self, out: Any) -> tuple[list[_DeviceArg], list[Any]]:
        specs = self.module.signature.outputs
        returned = self.module.returned_outputs
        if out is not None:
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            if len(outs) != len(returned):
                raise ValueError(f"{self.module.path.name} has {len(returned)} outputs, out= "
                                 f"gave {len(outs)}")
            given = dict(zip(returned, outs))
            # The updated inputs' new values: on the device, like the inputs.
            outs = [given[i] if i in given else self._new_array(s)
                    for i, s in enumerate(specs)]
            args = [self._arg(o, s, f"out[{returned.index(i)}] ({s.name!r})" if i in given
                              else f"output {i} ({s.name!r})", False)
                    for i, (o, s) in enumerate(zip(outs, specs))]
            return args, outs
        results = [self._new_array(s) for s in specs]
        args = [self._arg(r, s, f"output {i} ({s.name!r})", False)
                for i, (r, s) in enumerate(zip(results, specs))]
        return args, results

    def _new_array(self, spec: TensorSpec) -> Any:
        """An output array: a torch tensor on the inputs' device if an input is a torch
        tensor, a CuPy array if one is a CuPy array, numpy otherwise."""
        if self.torch_like is not None:
            import torch

            return torch.empty(spec.shape, dtype=getattr(torch, spec.dtype),
                               device=self.torch_like.device)
        if self.cupy_like is not None:
            import cupy

            return cupy.empty(spec.shape, dtype=spec.numpy_dtype)
        return np.empty(spec.shape, spec.numpy_dtype)

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
        self.module._write_back(self.inputs, results)
        return self.module._pack([results[i] for i in self.module.returned_outputs])

    def _release(self) -> None:
        for a in self.args:
            if a.owned:
                _Driver.free(a.ptr)
                a.owned = False

