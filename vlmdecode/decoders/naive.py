"""The naive decode loop, for comparison only: plain `session.run`, numpy in and out.

Each step sends the whole KV cache to onnxruntime and gets it back (for the `onnx` variant it is
concatenated by the graph; for `gqa` the fixed [1,kvh,max_length,D] buffer travels both ways).
Every byte is counted, so benchmarks can show what residency saves. Not used by the pipeline.
"""

from __future__ import annotations

import numpy as np

from ..devices import Device
from ..kvcache import layer_capacities
from ..modelfolder import ModelFolder
from ..transfers import Transfers


def naive_decode(folder: ModelFolder, session, first_x: np.ndarray, next_input, steps: int,
                 transfers: Transfers | None = None, max_length: int | None = None):
    """Prefill with `first_x` ([1,S,H] or ids [1,S]) then `steps` greedy steps.

    next_input(token) -> the next host input ([1,1,H] or [[token]]). Yields (token, logits) per step.
    """
    t = transfers if transfers is not None else Transfers()
    info, dec = folder.info, folder.decoder
    dtype = np.dtype(info.dtype)
    shared = info.kv_layout == "shared"
    caps = (layer_capacities(info.windows or [None] * info.num_layers, folder.capacity(max_length), Device("cpu"),
                             info.cache_slack) if shared else [0] * info.num_layers)
    kv = [np.zeros((1, info.num_kv_heads, c, info.head_size), dtype) for c in caps for _ in range(2)]
    pasts = [n for pair in info.past_names(dec) for n in pair]
    x_name = dec.inputs["inputs_embeds" if info.drive == "embeds" else "input_ids"]
    x, length = first_x, 0
    for step in range(steps + 1):
        t.begin(step)
        S = x.shape[1]
        feeds = {x_name: x, dec.inputs["attention_mask"]: np.ones((1, length + S), np.int64)}
        if "position_ids" in dec.inputs:
            feeds[dec.inputs["position_ids"]] = np.arange(length, length + S, dtype=np.int64)[None]
        feeds.update(zip(pasts, kv))
        for name, arr in feeds.items():
            t.note("h2d", arr.nbytes, "kv" if name in pasts else name)
        out = session.run(None, feeds)
        logits, kv = out[0], out[1:]
        t.note("d2h", logits.nbytes, "logits")
        t.note("d2h", sum(a.nbytes for a in kv), "kv")
        t.end()
        length += S
        last = logits[0, -1]
        token = int(np.argmax(last))
        yield token, last
        x = next_input(token)
