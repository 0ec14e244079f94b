"""KV caches for the decoder, allocated once, with an explicit position.

`FixedKV` ("shared" layout, GroupQueryAttention): per layer K and V of [B, kv_heads, max_length,
head_dim], bound as BOTH past_key_values.i.* and present.i.* so the kernel writes the new rows in
place; nothing is ever reallocated or copied, and the addresses stay fixed (capture-safe).

`ConcatKV` ("concat" layout, standard ops): the graph returns present = Concat(past, new), so each
step's present OrtValues (left where onnxruntime allocated them) are bound as the next step's past.
No host round trip, but the addresses change every step, so it cannot be graph-captured.
"""

from __future__ import annotations

import numpy as np

from .decoders.buffers import allocate
from .devices import Device


class FixedKV:
    layout = "shared"

    def __init__(self, n_layers: int, kv_heads: int, head_dim: int, max_length: int, dtype, device: Device,
                 batch: int = 1):
        shape = (batch, kv_heads, max_length, head_dim)
        self.keys = [allocate(shape, dtype, device) for _ in range(n_layers)]
        self.values = [allocate(shape, dtype, device) for _ in range(n_layers)]
        self.max_length = max_length
        self.position = 0  # tokens held; the next token is written at this index

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.keys + self.values)

    def pointers(self) -> list[int]:
        return [b.ptr for b in self.keys + self.values]

    def bind(self, io, past_names, present_names) -> None:
        """Bind each layer's buffer as past and present (same address: GQA writes in place)."""
        for (pk, pv), (nk, nv), k, v in zip(past_names, present_names, self.keys, self.values):
            k.bind_input(io, pk)
            v.bind_input(io, pv)
            k.bind_output(io, nk)
            v.bind_output(io, nv)

    def reset(self) -> None:
        self.position = 0


class ConcatKV:
    layout = "concat"

    def __init__(self, n_layers: int, kv_heads: int, head_dim: int, dtype, device: Device, batch: int = 1):
        self.device = device
        self.empty_shape = (batch, kv_heads, 0, head_dim)
        self.dtype = np.dtype(dtype)
        self.n_layers = n_layers
        self.values_ov: list = []
        self.position = 0
        self.reset()

    def reset(self) -> None:
        from .sessions import ort

        # zero-length past for the first run; OrtValues live on the decoder's device
        empty = [ort().OrtValue.ortvalue_from_shape_and_type(self.empty_shape, self.dtype, self.device.kind,
                                                             self.device.index)
                 for _ in range(2 * self.n_layers)]
        self.values_ov = empty
        self.position = 0

    @property
    def nbytes(self) -> int:
        return sum(int(np.prod(v.shape())) * self.dtype.itemsize for v in self.values_ov)

    def bind(self, io, past_names, present_names) -> None:
        for i, ((pk, pv), (nk, nv)) in enumerate(zip(past_names, present_names)):
            io.bind_ortvalue_input(pk, self.values_ov[2 * i])
            io.bind_ortvalue_input(pv, self.values_ov[2 * i + 1])
            io.bind_output(nk, self.device.kind, self.device.index)  # onnxruntime allocates the grown KV
            io.bind_output(nv, self.device.kind, self.device.index)

    def take_presents(self, outputs: list, first: int) -> None:
        """outputs: io.get_outputs(); presents are outputs[first:] as k0, v0, k1, v1, ..."""
        self.values_ov = list(outputs[first: first + 2 * self.n_layers])
