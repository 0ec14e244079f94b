"""Fixed-address buffers that onnxruntime binds by pointer: numpy on CPU, CuPy on CUDA.

A `Buffer` is allocated once and bound to an IOBinding input or output by its raw address, so the
same memory serves every step (required by CUDA graphs; on CPU it removes per-step allocation).
Host copies into and out of a buffer are methods here. Two ways in: `copy_from_host` (setup and
prompt uploads, counted by `Transfers.upload`) and `write` / `write_scalar` (the decode step's
inputs, whose bytes the decoder fixes at setup): on CUDA `write` copies into the buffer's own
page-locked staging array and issues ONE async DMA from it; on the CPU it assigns into the array.
A staged write must not reuse its staging slot before the previous DMA from it ran: host-fed steps
wait for their logits every step, which orders that. Not a general tensor type: shape, dtype and
address never change after allocation. Not in `decoders/`: the KV caches use it too.
"""

from __future__ import annotations

import numpy as np

from .devices import Device


class Buffer:
    def __init__(self, array, device: Device):
        self.array = array  # numpy.ndarray (cpu) or cupy.ndarray (cuda); kept alive here
        self.device = device
        self._ptr = int(array.data.ptr) if device.is_cuda else int(array.ctypes.data)  # fixed for life
        self._flat = None if device.is_cuda else array.reshape(-1)  # CPU writes: a view made once
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
        if self.device.is_cuda and value == 0 and flat.size:
            import cupy  # one memset: cheaper to issue from Python than a fill kernel

            cupy.cuda.runtime.memsetAsync(flat.data.ptr, 0, flat.nbytes, cupy.cuda.get_current_stream().ptr)
        else:
            flat[...] = value

    def copy_from_host(self, host: np.ndarray, offset: int = 0) -> None:
        """host (contiguous, same dtype) -> elements [offset, offset + host.size) of this buffer."""
        if self.device.is_cuda:
            import cupy

            n = host.nbytes
            cupy.cuda.runtime.memcpyAsync(self.ptr + offset * self.dtype.itemsize, host.ctypes.data, n,
                                          cupy.cuda.runtime.memcpyHostToDevice,
                                          cupy.cuda.get_current_stream().ptr)
        else:
            self.array.reshape(-1)[offset: offset + host.size] = host.reshape(-1)

    def write(self, host: np.ndarray, offset: int = 0) -> None:
        """host values (any layout; cast to this dtype) -> elements [offset, offset + host.size): on CUDA one
        host copy into page-locked staging, then one async DMA on the current stream (see module docstring)."""
        n = host.size
        if not self.device.is_cuda:
            self._flat[offset: offset + n] = host.reshape(-1)
            return
        staging = self._stage()
        staging[offset: offset + n] = host.reshape(-1)
        self._dma(offset, n)

    def write_scalar(self, value, offset: int = 0) -> None:
        """One element, as `write` does it."""
        if not self.device.is_cuda:
            self._flat[offset] = value
            return
        self._stage()[offset] = value
        self._dma(offset, 1)

    def _stage(self) -> np.ndarray:
        if self._staging is None:
            self._staging = host_array(self.array.size, self.dtype, self.device)
            self._staging_ptr = int(self._staging.ctypes.data)
        return self._staging

    def _dma(self, offset: int, n: int) -> None:
        import cupy

        k = self.dtype.itemsize
        rt = cupy.cuda.runtime
        rt.memcpyAsync(self.ptr + offset * k, self._staging_ptr + offset * k, n * k, rt.memcpyHostToDevice,
                       cupy.cuda.get_current_stream().ptr)

    def copy_to_host(self, count: int | None = None, offset: int = 0, out: np.ndarray | None = None) -> np.ndarray:
        """Elements [offset, offset + count) -> a new host array, or into `out` (1-D, same dtype, `count` long;
        on CUDA page-locked from `host_array`, so the copy is one DMA). Returns the host array."""
        count = self.array.size - offset if count is None else count
        flat = self.array.reshape(-1)[offset: offset + count]
        if out is None:
            return flat.get() if self.device.is_cuda else flat.copy()
        if out.shape != (count,) or out.dtype != self.dtype:
            raise ValueError(f"out must be a ({count},) {self.dtype} host array, got {out.shape} {out.dtype}")
        if self.device.is_cuda:
            flat.get(out=out)  # on the current stream; waits for it (and the work queued before the copy)
        else:
            out[...] = flat
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
