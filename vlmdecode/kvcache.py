"""KV caches for the decoder, allocated once, with an explicit position.

`FixedKV` ("shared" layout, GroupQueryAttention): per layer K and V of [B, kv_heads, C_i,
head_dim], bound as BOTH past_key_values.i.* and present.i.* so the kernel writes the new rows in
place; nothing is ever reallocated or copied, and the addresses stay fixed (capture-safe).
C_i is the decoder's max_length, except for a layer exported with a windowed cache
(GroupQueryAttention sliding_window_cache=1, see graphinfo): there C_i = `layer_capacities`' choice,
as onnxruntime-genai sizes it (CUDA: exactly the window, which its kernel requires; CPU: window + 16
unless model.decoder.sliding_window.cache_slack says otherwise). The kernel keeps the last L <= C_i
positions at rows [0, L) and evicts from the front itself; seqlens_k and the mask stay absolute.

`ConcatKV` ("concat" layout, standard ops): the graph returns present = Concat(past, new), so each
step's present OrtValues (left where onnxruntime allocated them) are bound as the next step's past.
No host round trip, but the addresses change every step, so it cannot be graph-captured.
"""

from __future__ import annotations

import numpy as np

from .decoders.buffers import allocate
from .devices import Device

CPU_WINDOW_SLACK = 16  # onnxruntime-genai's CPU default: positions kept beyond a window (amortises compaction)


def layer_capacities(windows, max_length: int, device: Device, cache_slack: int = 0) -> list[int]:
    """KV positions to allocate per layer: max_length, or for a windowed-cache layer (window W) W on CUDA
    and W + (cache_slack or CPU_WINDOW_SLACK) on CPU, never more than max(W, max_length) and never below W
    (onnxruntime rejects C < W). `windows`: per layer W or None (ModelFolder.info.windows)."""
    if device.is_cuda and cache_slack:
        raise ValueError(f"model.decoder.sliding_window.cache_slack is {cache_slack}; onnxruntime's CUDA "
                         "GroupQueryAttention requires a windowed KV cache of exactly the window (cache_slack 0)")
    slack = 0 if device.is_cuda else (cache_slack or CPU_WINDOW_SLACK)
    return [max_length if w is None else max(w, min(w + slack, max_length)) for w in windows]


def kv_nbytes(capacities, kv_heads: int, head_dim: int, dtype, batch: int = 1) -> int:
    """Bytes of the K and V buffers FixedKV allocates for these per-layer capacities."""
    return 2 * batch * kv_heads * head_dim * np.dtype(dtype).itemsize * sum(int(c) for c in capacities)


class FixedKV:
    layout = "shared"

    def __init__(self, capacities, kv_heads: int, head_dim: int, max_length: int, dtype, device: Device,
                 batch: int = 1):
        """capacities: positions per layer (`layer_capacities`); max_length: positions of the sequence."""
        self.capacities = [int(c) for c in capacities]
        self.keys = [allocate((batch, kv_heads, c, head_dim), dtype, device) for c in self.capacities]
        self.values = [allocate((batch, kv_heads, c, head_dim), dtype, device) for c in self.capacities]
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
