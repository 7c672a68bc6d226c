"""Issue 20's first question, measured before building anything: does a persisting L2
access-policy window make an unfusable pair of memory-bound kernels faster on this GPU?

Kernel A writes an intermediate `y = x * 2` of S MB, kernel B reads it, `z = y + 1`; HBM
traffic is 4 S without L2 reuse (x, y written, y read, z), 3 S if B reads y from L2. Each
size is timed (CUDA events, median of 50 pairs, one process) four ways: plain; with a
persisting window on `y` (cuStreamSetAttribute with CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW,
hitRatio 1, and cuCtxSetLimit's persisting L2 size set to S, capped by the device); a
window and the persisting lines reset after each pair (cuCtxResetPersistingL2Cache, what
a runtime must do when the buffer dies); and the fused kernel (z = x * 2 + 1, the bound).
Prints a table, with the HBM floor of the pair (4 S at the copy bandwidth measured here).

    python bench/l2_window.py [--sizes 8 16 24 32 48]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics

import torch

CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1
CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
CU_ACCESS_PROPERTY_NORMAL, CU_ACCESS_PROPERTY_STREAMING, CU_ACCESS_PROPERTY_PERSISTING = 0, 1, 2


class AccessPolicyWindow(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t),
                ("hitRatio", ctypes.c_float), ("hitProp", ctypes.c_int),
                ("missProp", ctypes.c_int)]


class StreamAttrValue(ctypes.Union):  # CUstreamAttrValue: a union of 64 bytes
    _fields_ = [("accessPolicyWindow", AccessPolicyWindow), ("pad", ctypes.c_char * 64)]


def _driver():
    cuda = ctypes.CDLL("libcuda.so.1")
    for name in ("cuStreamSetAttribute", "cuCtxSetLimit", "cuCtxGetLimit",
                 "cuCtxResetPersistingL2Cache", "cuDeviceGetAttribute"):
        getattr(cuda, name).restype = ctypes.c_int
    return cuda


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed: CUresult {status}")


def set_window(cuda, stream: int, tensor: torch.Tensor | None, nbytes: int,
               persist: int = 0) -> None:
    """A persisting window of `nbytes` over `tensor`; the hit ratio is what the persisting
    set-aside (`persist` bytes) holds of it (CUDA's guidance: more would thrash)."""
    value = StreamAttrValue()
    if tensor is not None:
        ratio = min(1.0, persist / nbytes) if nbytes else 0.0
        value.accessPolicyWindow = AccessPolicyWindow(
            tensor.data_ptr(), nbytes, ratio, CU_ACCESS_PROPERTY_PERSISTING,
            CU_ACCESS_PROPERTY_STREAMING)
    else:  # an empty window: nothing persists
        value.accessPolicyWindow = AccessPolicyWindow(0, 0, 0.0, CU_ACCESS_PROPERTY_NORMAL,
                                                      CU_ACCESS_PROPERTY_NORMAL)
    _check(cuda.cuStreamSetAttribute(ctypes.c_void_p(stream),
                                     CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW,
                                     ctypes.byref(value)), "cuStreamSetAttribute")


def time_pairs(fn, reps: int = 50) -> float:
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3  # us


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 24, 32, 48],
                   help="intermediate sizes in MB")
    args = p.parse_args()
    cuda = _driver()
    torch.cuda.init()
    props = torch.cuda.get_device_properties(0)
    limit = ctypes.c_size_t()
    value = ctypes.c_int()
    _check(cuda.cuDeviceGetAttribute(ctypes.byref(value), 108, 0), "cuDeviceGetAttribute")
    max_persist = value.value  # CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE
    _check(cuda.cuDeviceGetAttribute(ctypes.byref(value), 109, 0), "cuDeviceGetAttribute")
    max_window = value.value  # CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE
    big = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    copy_us = time_pairs(lambda: big[: 1 << 27].copy_(big[1 << 27:]))
    bandwidth = 2 * (1 << 27) / (copy_us * 1e-6)  # bytes/s, read + write
    print(f"# {props.name}, L2 {props.L2_cache_size >> 20} MB, persisting max "
          f"{max_persist >> 20} MB, window max {max_window >> 20} MB; copy bandwidth "
          f"{bandwidth / 1e12:.2f} TB/s")
    print("| S MB | floor us (4 S) | plain us | window us | window+reset us | fused us | "
          "window vs plain | fused vs plain |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    stream = torch.cuda.current_stream().cuda_stream
    for mb in args.sizes:
        n = mb * (1 << 20) // 4
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        z = torch.empty_like(x)

        def pair():
            torch.mul(x, 2.0, out=y)
            torch.add(y, 1.0, out=z)

        def fused():
            torch.add(x, x, out=z)  # one read, one write: the pair's bound

        set_window(cuda, stream, None, 0)
        plain = time_pairs(pair)
        ref = (x * 2 + 1)
        persist = min(y.numel() * 4, max_persist)
        _check(cuda.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(persist)),
               "cuCtxSetLimit")
        _check(cuda.cuCtxGetLimit(ctypes.byref(limit), CU_LIMIT_PERSISTING_L2_CACHE_SIZE),
               "cuCtxGetLimit")
        set_window(cuda, stream, y, min(y.numel() * 4, max_window), persist)
        window = time_pairs(pair)

        def pair_reset():
            pair()
            cuda.cuCtxResetPersistingL2Cache()

        window_reset = time_pairs(pair_reset)
        set_window(cuda, stream, None, 0)
        cuda.cuCtxResetPersistingL2Cache()
        _check(cuda.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(0)),
               "cuCtxSetLimit")
        pair()
        torch.cuda.synchronize()
        assert torch.equal(z, ref), "the pair's result changed"
        fused_us = time_pairs(fused)
        floor = 4 * mb * (1 << 20) / bandwidth * 1e6
        print(f"| {mb} | {floor:.1f} | {plain:.1f} | {window:.1f} | {window_reset:.1f} | "
              f"{fused_us:.1f} | {plain / window:.2f}x | {plain / fused_us:.2f}x |"
              f"  (persisting limit set: {limit.value >> 20} MB)")


if __name__ == "__main__":
    main()
