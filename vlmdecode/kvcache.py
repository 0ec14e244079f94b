"""KV caches for the decoder, allocated once, with an explicit position.

`FixedKV` ("shared" layout, GroupQueryAttention): per layer K and V of [B, kv_heads, C_i,
head_dim], bound as BOTH past_key_values.i.* and present.i.* so the kernel writes the new rows in
place; nothing is ever reallocated or copied, and the addresses stay fixed (capture-safe).
C_i is the decoder's max_length, except for a layer exported with a windowed cache
(GroupQueryAttention sliding_window_cache=1, see graphinfo): there C_i = `layer_capacities`' choice,
as onnxruntime-genai sizes it (CUDA: exactly the window, which its kernel requires; CPU: window + 16
unless model.decoder.sliding_window.cache_slack says otherwise). The kernel keeps the last L <= C_i
positions at rows [0, L), oldest first, and evicts from the front itself (`windowed_rows`: which row holds
which position); seqlens_k and the mask stay absolute.

`ConcatKV` ("concat" layout, standard ops): the graph returns present = Concat(past, new), so each
step's present OrtValues (left where onnxruntime allocated them) are bound as the next step's past.
No host round trip, but the addresses change every step, so it cannot be graph-captured.

`HostKV` (the naive loop): numpy arrays handed to `session.run` and replaced by its outputs
every step, so the whole cache crosses the host/onnxruntime boundary twice per step.

Every cache owns its position (tokens held; the next token is written at that index): `position`
is read-only, `advance(n)` moves it after a run wrote n rows, `reset()` forgets the sequence.
Nothing outside the cache writes it. Not here: binding policy and masks (decoders/).
"""

from __future__ import annotations

import numpy as np

from .buffers import allocate
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


def windowed_resident(total: int, capacity: int, window: int) -> int:
    """Rows L that onnxruntime's GroupQueryAttention (sliding_window_cache=1) keeps resident in a windowed
    layer's buffer of `capacity` C once the sequence holds `total` positions T (after prefill or a decode step).

    Its kernels' WindowedCacheEnd: L = T while T <= C, else T - g * ceil((T - C) / g) with g = C - W + 1; the
    front g rows are dropped in one shift when an append would pass C ("drifting" layout: the shift runs once
    every g steps). On CUDA C == W (its kernel refuses anything else), so g = 1 and L = min(T, C): every step past
    the window shifts the rows left by one and appends at row C - 1."""
    if not 1 <= window <= capacity:
        raise ValueError(f"window {window} and capacity {capacity}: onnxruntime needs 1 <= window <= capacity")
    if total <= capacity:
        return max(total, 0)
    gap = capacity - window + 1
    return total - gap * -(-(total - capacity) // gap)


def windowed_rows(total: int, capacity: int, window: int) -> list[int | None]:
    """Absolute position held by each row of a windowed layer's KV buffer (K and V alike, every kv head) once
    the sequence holds `total` positions: rows [0, L) hold positions [T - L, T) in order, newest last (a shifted
    window, not a ring p % C); rows [L, C) are None (stale, never read). L: `windowed_resident`."""
    n = windowed_resident(total, capacity, window)
    return [total - n + r for r in range(n)] + [None] * (capacity - n)


def kv_nbytes(capacities, kv_heads: int, head_dim: int, dtype, batch: int = 1) -> int:
    """Bytes of the K and V buffers FixedKV allocates for these per-layer capacities."""
    return 2 * batch * kv_heads * head_dim * np.dtype(dtype).itemsize * sum(int(c) for c in capacities)


class _Position:
    """The position bookkeeping every cache shares; `limit` None: no fixed capacity (Concat grows)."""

    limit: int | None = None
    _position = 0

    @property
    def position(self) -> int:
        return self._position

    def advance(self, n: int = 1) -> int:
        """The run just written n new rows: move past them. Returns the new position."""
        new = self._position + n
        if n < 1 or (self.limit is not None and new > self.limit):
            raise ValueError(f"advance({n}) from position {self._position}: n must be >= 1 and the position "
                             f"stay <= capacity {self.limit}")
        self._position = new
        return new


class FixedKV(_Position):
    layout = "shared"

    def __init__(self, capacities, kv_heads: int, head_dim: int, max_length: int, dtype, device: Device,
                 batch: int = 1):
        """capacities: positions per layer (`layer_capacities`); max_length: positions of the sequence."""
        self.capacities = [int(c) for c in capacities]
        self.keys = [allocate((batch, kv_heads, c, head_dim), dtype, device) for c in self.capacities]
        self.values = [allocate((batch, kv_heads, c, head_dim), dtype, device) for c in self.capacities]
        self.max_length = self.limit = max_length

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
        self._position = 0


class ConcatKV(_Position):
    layout = "concat"

    def __init__(self, n_layers: int, kv_heads: int, head_dim: int, dtype, device: Device, batch: int = 1):
        self.device = device
        self.empty_shape = (batch, kv_heads, 0, head_dim)
        self.dtype = np.dtype(dtype)
        self.n_layers = n_layers
        self.values_ov: list = []
        self.reset()

    def reset(self) -> None:
        from .sessions import ort

        # zero-length past for the first run; OrtValues live on the decoder's device
        empty = [ort().OrtValue.ortvalue_from_shape_and_type(self.empty_shape, self.dtype, self.device.kind,
                                                             self.device.index)
                 for _ in range(2 * self.n_layers)]
        self.values_ov = empty
        self._position = 0

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


class HostKV(_Position):
    """numpy K and V per layer ([B, kv_heads, P, head_dim]; P = max_length for the fixed-buffer
    `gqa` graph, 0 and growing for `onnx`) that travel through `session.run` every step."""

    layout = "host"

    def __init__(self, n_layers: int, kv_heads: int, head_dim: int, dtype, fixed_length, batch: int = 1):
        """fixed_length: positions of every layer's buffer (0: grows), or a list per layer (`layer_capacities`)."""
        lengths = list(fixed_length) if isinstance(fixed_length, (list, tuple)) else [fixed_length] * n_layers
        self.shapes = [(batch, kv_heads, n, head_dim) for n in lengths]
        self.dtype = np.dtype(dtype)
        self.n_layers = n_layers
        self.reset()

    def reset(self) -> None:
        self.arrays = [np.zeros(s, self.dtype) for s in self.shapes for _ in range(2)]  # k0, v0, k1, ...
        self._position = 0

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    def take(self, outputs: list) -> None:
        """The presents session.run returned (k0, v0, ...) become the next run's past."""
        self.arrays = list(outputs)
