"""Fixed-address buffers that onnxruntime binds by pointer: numpy on CPU, CuPy on CUDA.

A `Buffer` is allocated once and bound to an IOBinding input or output by its raw address, so the
same memory serves every step (required by CUDA graphs; on CPU it removes per-step allocation).
Host copies into and out of a buffer are methods here. Two ways in: `copy_from_host` (setup and
prompt uploads, counted by `Transfers.upload`) and `write` / `write_scalar` (the decode step's
inputs, whose bytes the decoder fixes at setup): on CUDA `write` copies into the buffer's own
page-locked staging array and issues ONE async DMA from it (on the stream passed, else the current
one); on the CPU it assigns into the array. A staged write must not reuse its staging slot before
the previous DMA from it ran: the decoders wait for each step's logits before writing its slots again,
which orders that.

`allocate_mapped` (CUDA): a buffer in page-locked host memory that the GPU addresses directly
(unified addressing), for an output the host reads every step: the kernel that writes it writes
host memory, and after the stream is synchronized the host reads `array` with no copy call. Its
bytes still cross the bus (the decoder counts them as before); host writes to it are immediate,
not stream-ordered. Not a general tensor type: shape, dtype and address never change after
allocation. Not in `decoders/`: the KV caches use it too.
"""

from __future__ import annotations

import numpy as np

from .devices import Device


class Buffer:
    def __init__(self, array, device: Device, ptr: int | None = None):
        self.array = array  # numpy.ndarray (cpu, or cuda mapped host memory) or cupy.ndarray (cuda)
        self.device = device
        # on_host: numpy memory, read and written by the host directly (CPU; CUDA: allocate_mapped)
        self.on_host = isinstance(array, np.ndarray)
        self.mapped = self.on_host and device.is_cuda
        if ptr is None:
            ptr = array.ctypes.data if self.on_host else array.data.ptr
        self._ptr = int(ptr)  # the address the session binds, fixed for life (mapped: the device's)
        self._flat = array.reshape(-1) if self.on_host else None  # host writes: a view made once
        self._staging = None  # CUDA writes: page-locked [size] host array, made on the first write

    @property
    def ptr(self) -> int:
        return self._ptr

    @property
    def dtype(self):
        return np.dtype(self.array.dtype)

    @property
    def shape(self) -> tuple:
        return tuple(self.array.shape)

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    def bind_input(self, io, name: str, shape=None) -> None:
        io.bind_input(name, self.device.kind, self.device.index, self.dtype, list(shape or self.shape), self.ptr)

    def bind_output(self, io, name: str, shape=None) -> None:
        io.bind_output(name, self.device.kind, self.device.index, self.dtype, list(shape or self.shape), self.ptr)

    def fill(self, value, start: int = 0, stop: int | None = None) -> None:
        """Set elements [start, stop) to `value` where the buffer lives (on CUDA a kernel on the current
        stream): no host copy, so nothing for `Transfers` to count."""
        flat = self.array.reshape(-1)[start:stop]
        if not self.on_host and value == 0 and flat.size:
            import cupy  # one memset: cheaper to issue from Python than a fill kernel

            cupy.cuda.runtime.memsetAsync(flat.data.ptr, 0, flat.nbytes, cupy.cuda.get_current_stream().ptr)
        else:
            flat[...] = value

    def copy_from_host(self, host: np.ndarray, offset: int = 0) -> None:
        """host (contiguous, same dtype) -> elements [offset, offset + host.size) of this buffer."""
        if not self.on_host:
            import cupy

            n = host.nbytes
            cupy.cuda.runtime.memcpyAsync(self.ptr + offset * self.dtype.itemsize, host.ctypes.data, n,
                                          cupy.cuda.runtime.memcpyHostToDevice,
                                          cupy.cuda.get_current_stream().ptr)
        else:
            self.array.reshape(-1)[offset: offset + host.size] = host.reshape(-1)

    def write(self, host: np.ndarray, offset: int = 0, stream: int | None = None) -> None:
        """host values (any layout; cast to this dtype) -> elements [offset, offset + host.size): on CUDA one
        host copy into page-locked staging, then one async DMA on `stream` (a CUDA stream pointer; None: the
        current stream; see module docstring)."""
        n = host.size
        if self.on_host:
            self._flat[offset: offset + n] = host.reshape(-1)
            return
        staging = self._stage()
        staging[offset: offset + n] = host.reshape(-1)
        self._dma(offset, n, stream)

    def write_scalar(self, value, offset: int = 0, stream: int | None = None) -> None:
        """One element, as `write` does it."""
        if self.on_host:
            self._flat[offset] = value
            return
        self._stage()[offset] = value
        self._dma(offset, 1, stream)

    def _stage(self) -> np.ndarray:
        if self._staging is None:
            self._staging = host_array(self.array.size, self.dtype, self.device)
            self._staging_ptr = int(self._staging.ctypes.data)
        return self._staging

    def _dma(self, offset: int, n: int, stream: int | None) -> None:
        import cupy

        k = self.dtype.itemsize
        rt = cupy.cuda.runtime
        rt.memcpyAsync(self.ptr + offset * k, self._staging_ptr + offset * k, n * k, rt.memcpyHostToDevice,
                       cupy.cuda.get_current_stream().ptr if stream is None else stream)

    def copy_to_host(self, count: int | None = None, offset: int = 0, out: np.ndarray | None = None) -> np.ndarray:
        """Elements [offset, offset + count) -> a new host array, or into `out` (1-D, same dtype, `count` long;
        on CUDA page-locked from `host_array`, so the copy is one DMA). On CUDA it waits for the current
        stream (and the work queued before the copy; a mapped buffer: the work that writes it). Returns the
        host array."""
        count = self.array.size - offset if count is None else count
        flat = self.array.reshape(-1)[offset: offset + count]
        if out is not None and (out.shape != (count,) or out.dtype != self.dtype):
            raise ValueError(f"out must be a ({count},) {self.dtype} host array, got {out.shape} {out.dtype}")
        if self.mapped:
            import cupy

            cupy.cuda.get_current_stream().synchronize()
        if out is None:
            return flat.copy() if self.on_host else flat.get()
        if self.on_host:
            out[...] = flat
        else:
            flat.get(out=out)  # on the current stream; waits for it (and the work queued before the copy)
        return out


def host_array(count: int, dtype, device: Device) -> np.ndarray:
    """A 1-D host array to download into again and again: page-locked for a CUDA device (one DMA per
    copy, no driver staging), plain numpy for the CPU."""
    dtype = np.dtype(dtype)
    if not device.is_cuda:
        return np.zeros(count, dtype)
    import cupy

    mem = cupy.cuda.alloc_pinned_memory(max(count * dtype.itemsize, 1))
    return np.frombuffer(mem, dtype, count)  # the array keeps `mem` (and so the pinned pages) alive


def allocate(shape, dtype, device: Device, fill=0) -> Buffer:
    """A new buffer of `shape`, filled with `fill` once (so unread slots are never NaN garbage)."""
    if device.is_cuda:
        import cupy

        with cupy.cuda.Device(device.index):
            arr = cupy.full(shape, fill, dtype=dtype)
    else:
        arr = np.full(shape, fill, dtype=dtype)
    return Buffer(arr, device)


def allocate_mapped(shape, dtype, device: Device) -> Buffer:
    """A CUDA buffer of `shape` in page-locked host memory that kernels address directly (module docstring):
    `array` is the numpy view the host reads, `ptr` the address the GPU uses. Zero-filled."""
    if not device.is_cuda:
        raise ValueError(f"allocate_mapped is for CUDA devices (host memory the GPU addresses); got {device}")
    import cupy

    rt = cupy.cuda.runtime
    host = host_array(int(np.prod(shape)), dtype, device)
    host[...] = 0
    with cupy.cuda.Device(device.index):
        attrs = rt.pointerGetAttributes(host.ctypes.data)
    if attrs.type != rt.memoryTypeHost or not attrs.devicePointer:
        raise RuntimeError(f"page-locked host memory at {host.ctypes.data:#x} has no address on {device} "
                           f"(memory type {attrs.type}, device pointer {attrs.devicePointer:#x}): unified "
                           "addressing is required for mapped buffers")
    return Buffer(host.reshape(shape), device, ptr=attrs.devicePointer)
