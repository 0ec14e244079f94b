"""The bytes-per-step cost model of a model folder: what one decode step must read, and what it moves.

    decoder_weight_bytes(folder)               the decoder's initializers: read at least once per step
    kv_read_bytes(folder, context)             K+V one step reads at `context` (local layers: their window)
    floor_ms(folder, context, bandwidth)       (weights + KV read) / device bandwidth: the step's lower bound
    predicted_bytes(folder, mode, position)    host<->device bytes one step of a `vlmdecode.modes` mode moves

The bench (the floor column), the notebooks (predicted vs measured bytes) and the H200 scripts read these;
tests check `predicted_bytes` against what `Transfers` records. Not a timing model: no latencies here.
"""

from __future__ import annotations

import numpy as np

from . import modes
from .modelfolder import ModelFolder


def _folder(folder) -> ModelFolder:
    return folder if isinstance(folder, ModelFolder) else ModelFolder.load(folder)


def decoder_weight_bytes(folder) -> int:
    """Bytes of the decoder's initializers (what one decode step must read at least once)."""
    import onnx

    m = onnx.load(str(_folder(folder).decoder.path), load_external_data=False)
    total = 0
    for t in m.graph.initializer:
        ext = {e.key: e.value for e in t.external_data}
        if "length" in ext:
            total += int(ext["length"])
        else:
            total += len(t.raw_data) or int(np.prod(t.dims)) * 4
    return total


def kv_read_bytes(folder, context: int) -> int:
    """K+V bytes one decode step reads at `context`: global layers all of it, local layers the window."""
    from .fixture import load_fixture_config

    folder = _folder(folder)
    info = folder.info
    per_token_layer = 2 * info.num_kv_heads * info.head_size * np.dtype(info.dtype).itemsize
    try:
        cfg = load_fixture_config(folder.root)
        kinds, window = cfg.layer_types, cfg.sliding_window
    except (FileNotFoundError, TypeError, ValueError):
        kinds, window = ("global",) * info.num_layers, context
    return int(sum(per_token_layer * (context if k == "global" else min(context, window)) for k in kinds))


def floor_ms(folder, context: int, bandwidth: float, weight_bytes: int | None = None) -> float:
    """The step's lower bound in ms: (weights + KV read at `context`) / `bandwidth` (bytes/s, read + written)."""
    w = decoder_weight_bytes(folder) if weight_bytes is None else weight_bytes
    return (w + kv_read_bytes(folder, context)) / bandwidth * 1e3


def predicted_bytes(folder, mode: str, position: int, max_length: int | None = None) -> dict:
    """Bytes one decode step should move (h2d, d2h, kv), the token at cache index `position`.

    naive: every input and output crosses: the embedding [1,1,H], mask [1,position+1], position id
    and the whole KV both ways ('shared' layout: the [1,kvh,max_length,D] buffers; otherwise
    `position` rows in, position+1 out), logits back. Other host-sampling modes: embedding + position
    id + mask slot (H*itemsize + 16) in, logits out. Device-sampling modes: 8 bytes (the token id) out.
    """
    folder = _folder(folder)
    m = modes.get(mode)
    if m.factory is None:
        raise ValueError(f"mode {mode!r} is a bench scenario, not a decoder mode: allowed "
                         f"{tuple(x.name for x in modes.MODES if x.factory)}")
    info = folder.info
    item = np.dtype(info.dtype).itemsize
    x = info.hidden_size * item if info.drive == "embeds" else 8
    per_row = 2 * info.num_layers * info.num_kv_heads * info.head_size * item  # K+V of one token
    logits = folder.vocab_size * item
    if mode == "naive":
        rows_in = (max_length or folder.max_length) if info.kv_layout == "shared" else position
        rows_out = (max_length or folder.max_length) if info.kv_layout == "shared" else position + 1
        kv_in, kv_out = rows_in * per_row, rows_out * per_row
        return {"h2d": x + 8 * (position + 1) + 8 + kv_in, "d2h": logits + kv_out, "kv": kv_in + kv_out}
    if m.sampling == "device":
        return {"h2d": 0, "d2h": 8, "kv": 0}
    return {"h2d": x + 16, "d2h": logits, "kv": 0}
