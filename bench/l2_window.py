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

`--far` asks the two questions run 111 left open (run 148), under CUDA graphs (launch costs
out of the way): (1) what a persisting set-aside costs traffic that never touches the window
(a 1 GiB and a 16 MiB copy at set-asides of 0-37.5 MiB); (2) whether a window pays where
the default policy cannot keep the intermediate: copy pairs `y = x; z = y` with an unrelated
copy of M MiB between the two (M = 0, 32, 128), plain (no set-aside), with a window on the
producer's launch and a set-aside of S, and the same followed by a `discard.global.L2` of y
(the release without a write-back a runtime would use, a PTX kernel loaded here).

    python bench/l2_window.py [--sizes 8 16 24 32 48] [--far]
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


DISCARD_PTX = b"""
.version 7.8
.target sm_90
.address_size 64
.visible .entry discard_l2(.param .u64 p, .param .u64 n) {
  .reg .u64 %rd<6>; .reg .u32 %r<5>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [p];
  ld.param.u64 %rd2, [n];
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x;
  mad.lo.u32 %r4, %r1, %r2, %r3;
  cvt.u64.u32 %rd3, %r4;
  setp.ge.u64 %p1, %rd3, %rd2;
  @%p1 bra DONE;
  shl.b64 %rd4, %rd3, 7;
  add.u64 %rd5, %rd1, %rd4;
  discard.global.L2 [%rd5], 128;
DONE:
  ret;
}
"""


def _discard_kernel(cuda):
    """launch(stream, tensor): discard.global.L2 over the tensor's 128-byte lines."""
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    _check(cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(DISCARD_PTX + b"\0")),
           "cuModuleLoadData")
    _check(cuda.cuModuleGetFunction(ctypes.byref(function), module, b"discard_l2"),
           "cuModuleGetFunction")

    def launch(stream: int, tensor: torch.Tensor) -> None:
        lines = tensor.numel() * tensor.element_size() // 128
        ptr, count = ctypes.c_uint64(tensor.data_ptr()), ctypes.c_uint64(lines)
        params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(ptr), ctypes.c_void_p),
                                       ctypes.cast(ctypes.byref(count), ctypes.c_void_p))
        _check(cuda.cuLaunchKernel(function, (lines + 255) // 256, 1, 1, 256, 1, 1, 0,
                                   ctypes.c_void_p(stream), params, None), "cuLaunchKernel")
    return launch


def _set_aside(cuda, nbytes: int) -> None:
    _check(cuda.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(nbytes)),
           "cuCtxSetLimit")
    cuda.cuCtxResetPersistingL2Cache()


def time_graph(body, reps: int = 30, rounds: int = 9) -> float:
    """Median us of one `body(stream)` over `rounds` replays of a graph of `reps` bodies."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            body(side.cuda_stream)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        stream = torch.cuda.current_stream().cuda_stream
        for _ in range(reps):
            body(stream)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / reps * 1e3)
    return statistics.median(times)


def far(cuda, max_persist: int, sizes: list[int]) -> None:
    """`--far`: the set-aside's cost to other traffic, and windows over a distant reuse."""
    def copy_bandwidth(nbytes: int) -> float:
        a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        b = torch.empty_like(a)
        return 2 * nbytes / (time_graph(lambda s: b.copy_(a)) * 1e-6) / 1e12

    print("| persisting set-aside MiB | copy 1 GiB TB/s | copy 16 MiB TB/s |")
    print("| --- | --- | --- |")
    for mib in (0, 4, 8, 16, 24, 32, max_persist / 2**20, 0):
        _set_aside(cuda, int(mib * 2**20))
        print(f"| {mib:.1f} | {copy_bandwidth(1 << 30):.2f} | {copy_bandwidth(1 << 24):.2f} |")
    discard = _discard_kernel(cuda)
    print()
    print("| S MiB | between MiB | plain us | window us | window + discard us | "
          "window vs plain | window + discard vs plain |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for mb in sizes:
        if mb << 20 > max_persist:
            continue
        for between in (0, 32, 128):
            x = torch.randn(mb << 18, device="cuda")
            y, z = torch.empty_like(x), torch.empty_like(x)
            a = torch.empty(max(between, 1) << 20, dtype=torch.uint8, device="cuda")
            b = torch.empty_like(a)

            def body(stream, window=False, release=False):
                if window:
                    set_window(cuda, stream, y, mb << 20, mb << 20)
                y.copy_(x)
                if window:
                    set_window(cuda, stream, None, 0)
                if between:
                    b.copy_(a)
                z.copy_(y)
                if release:
                    discard(stream, y)

            _set_aside(cuda, 0)
            plain = time_graph(body)
            _set_aside(cuda, mb << 20)
            window = time_graph(lambda s: body(s, True))
            released = time_graph(lambda s: body(s, True, True))
            _set_aside(cuda, 0)
            assert torch.equal(z, x), "the pair's result changed"
            print(f"| {mb} | {between} | {plain:.1f} | {window:.1f} | {released:.1f} | "
                  f"{plain / window:.2f}x | {plain / released:.2f}x |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 24, 32, 48],
                   help="intermediate sizes in MB")
    p.add_argument("--far", action="store_true",
                   help="the set-aside's cost to other traffic, and windows over a distant "
                        "reuse (run 148), instead of the pair table")
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
    if args.far:
        far(cuda, max_persist, args.sizes)
        return
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
