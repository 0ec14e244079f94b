"""Programmatic dependent launch (PDL) of a CuPy kernel: `cuLaunchKernelEx` through ctypes with
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, so a kernel may be scheduled while the previous
kernel of its stream is still finishing (sm_90+). Stream capture records it as a programmatic edge, so a
replayed step overlaps each kernel's launch and weight prefetch with its predecessor's tail.

The kernels hold up their side (`cuda_src.common`: `pdl_trigger()` first, `pdl_wait()` before the first read
of an earlier kernel's output); in a plain launch both are no-ops. What it is not: a general launcher --
one kernel, fixed arguments packed once, launched on the current CuPy stream.
"""

from __future__ import annotations

import ctypes

import numpy as np

PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID


class _Attr(ctypes.Structure):  # CUlaunchAttribute: id, padding to 8 bytes, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _Config(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_Attr)), ("num_attrs", ctypes.c_uint)]


_driver = None


def _lib():
    global _driver
    if _driver is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                         ctypes.c_void_p]
        lib.cuLaunchKernelEx.restype = ctypes.c_int
        lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        _driver = lib
    return _driver


def _c_arg(a):
    if isinstance(a, np.uint64):
        return ctypes.c_uint64(int(a))
    if isinstance(a, np.int32):
        return ctypes.c_int32(int(a))
    if isinstance(a, np.float32):
        return ctypes.c_float(float(a))
    raise TypeError(f"a PDL kernel argument must be np.uint64 (pointer), np.int32 or np.float32, got {type(a)}")


def supported() -> bool:
    """PDL needs compute capability 9.0 or later (Hopper)."""
    import cupy

    return int(cupy.cuda.Device().compute_capability) >= 90


class PdlLaunch:
    """fn (a CuPy RawKernel) with `args` packed once; call() launches it on the current stream with PDL."""

    def __init__(self, fn, grid: tuple, block: tuple, args: tuple, shared: int, name: str):
        self.name = name
        self._func = ctypes.c_void_p(int(fn.kernel.ptr))
        self._vals = [_c_arg(a) for a in args]  # kept alive: kernelParams points at them
        self._params = (ctypes.c_void_p * len(self._vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p)
                                                             for v in self._vals])
        self._attr = _Attr(id=PROGRAMMATIC_STREAM_SERIALIZATION)
        self._attr.value[0] = 1  # programmaticStreamSerializationAllowed
        self._cfg = _Config(grid=(ctypes.c_uint * 3)(*grid), block=(ctypes.c_uint * 3)(*block), shared=shared,
                            stream=None, attrs=ctypes.pointer(self._attr), num_attrs=1)
        self._launch = _lib().cuLaunchKernelEx
        import cupy

        self._current_stream = cupy.cuda.get_current_stream  # looked up once: sampling launches advance per token

    def __call__(self) -> None:
        self._cfg.stream = self._current_stream().ptr or None
        rc = self._launch(ctypes.byref(self._cfg), self._func, self._params, None)
        if rc:
            msg = ctypes.c_char_p()
            _lib().cuGetErrorString(rc, ctypes.byref(msg))
            raise RuntimeError(f"cuLaunchKernelEx({self.name}) failed: CUDA error {rc} "
                               f"({(msg.value or b'?').decode()})")
