"""The naive decoder, for comparison: plain `session.run`, numpy in and out, the KV cache included.

Each step sends the whole KV cache to onnxruntime and gets it back (`kvcache.HostKV`: for the `onnx`
variant it is concatenated by the graph; for `gqa` the fixed [1,kvh,max_length,D] buffer travels both
ways). Every byte is counted, so benchmarks show what residency saves. It follows the decoder contract
(decoders.base), so `vlmdecode.load(folder, device, "naive")` runs it through the same loop and pipeline
as every other mode.
"""

from __future__ import annotations

import numpy as np

from ..devices import Device
from ..kvcache import HostKV, layer_capacities
from ..modelfolder import ModelFolder
from ..transfers import Transfers
from .base import Decoder, DecoderError


class NaiveDecoder(Decoder):
    mode = "naive"

    def __init__(self, folder: ModelFolder, session, device: Device, transfers: Transfers | None = None,
                 max_length: int | None = None):
        super().__init__(folder, device, transfers, max_length)
        self.session = session
        info, dec = self.info, folder.decoder
        fixed = (layer_capacities(info.windows or [None] * info.num_layers, self.max_length, Device("cpu"),
                                  info.cache_slack) if info.kv_layout == "shared" else 0)  # numpy: CPU's rule
        self.kv = HostKV(info.num_layers, info.num_kv_heads, info.head_size, self.dtype, fixed)
        self.pasts = [n for pair in info.past_names(dec) for n in pair]
        self.name_x = dec.inputs["inputs_embeds" if info.drive == "embeds" else "input_ids"]
        self.name_mask = dec.inputs["attention_mask"]
        self.name_pos = dec.inputs.get("position_ids")

    def prefill(self, x: np.ndarray, reuse: bool = False) -> np.ndarray:
        self.kv.reset()
        return self._run(x, reuse)

    def step(self, x: np.ndarray, reuse: bool = False) -> np.ndarray:
        return self._run(x, reuse)

    def _run(self, x: np.ndarray, reuse: bool) -> np.ndarray:
        t, S = self.kv.position, x.shape[1]
        if t + S > self.max_length:
            raise DecoderError(f"KV cache full: position {t} + {S} tokens exceeds max_length={self.max_length}")
        tr = self.transfers
        tr.begin()
        try:
            feeds = {self.name_x: x, self.name_mask: np.ones((1, t + S), np.int64)}
            if self.name_pos:
                feeds[self.name_pos] = np.arange(t, t + S, dtype=np.int64)[None]
            for name, arr in feeds.items():
                tr.note("h2d", arr.nbytes, name)
            feeds.update(zip(self.pasts, self.kv.arrays))
            tr.note("h2d", self.kv.nbytes, "kv")
            out = self.session.run(None, feeds)
            self.kv.take(out[1:])
            self.kv.advance(S)
            tr.note("d2h", out[0].nbytes, "logits")
            tr.note("d2h", self.kv.nbytes, "kv")
        finally:
            tr.end()
        last = out[0][0, -1]
        return last if reuse else last.astype(np.float32)


def build(folder: ModelFolder, device: Device, mode: str, *, max_length: int | None = None, threads: int = 0,
          **options) -> NaiveDecoder:
    """modes factory: a session on `device` (CPU or onnxruntime's CUDA provider, numpy in and out)."""
    from ..sessions import make_session

    if options:
        raise ValueError(f"options {sorted(options)} do not apply to mode 'naive'")
    return NaiveDecoder(folder, make_session(folder.decoder, device, threads=threads), device,
                        max_length=max_length)
