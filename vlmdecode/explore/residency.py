"""KV residency on CPU for notebook 03: the host<->device bytes a decode step should move (by mode) and a
sweep that measures bytes and time of the naive loop vs the resident decoder over prompt lengths.

    predicted_bytes(folder, mode, position)   bytes one step should move: h2d, d2h, kv
    residency_sweep(dirs, contexts)           measured vs predicted bytes and median ms per step

A quick live sweep, not the benchmark harness (see bench).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

import vlmdecode

from ..decoders.naive import naive_decode
from ..modelfolder import ModelFolder
from ..profiling import prompt_ids
from ..sessions import make_session
from ..transfers import Transfers


def predicted_bytes(folder, mode: str, position: int, max_length: int | None = None) -> dict:
    """Bytes one decode step should move (h2d, d2h, kv), the token at cache index `position`.

    naive: every input and output crosses: the embedding [1,1,H], mask [1,position+1], position id
    and the whole KV both ways ('shared' layout: the [1,kvh,max_length,D] buffers; otherwise
    `position` rows in, position+1 out), logits back. resident/eager/graph: embedding + position id
    + mask slot (H*itemsize + 16) in, logits out. device: 8 bytes (the token id) out.
    """
    if not isinstance(folder, ModelFolder):
        folder = ModelFolder.load(folder)
    info = folder.info
    item = np.dtype(info.dtype).itemsize
    x = info.hidden_size * item if info.drive == "embeds" else 8
    per_row = 2 * info.num_layers * info.num_kv_heads * info.head_size * item  # K+V of one token
    logits = folder_vocab(folder) * item
    if mode == "naive":
        rows_in = (max_length or folder.max_length) if info.kv_layout == "shared" else position
        rows_out = (max_length or folder.max_length) if info.kv_layout == "shared" else position + 1
        kv_in, kv_out = rows_in * per_row, rows_out * per_row
        return {"h2d": x + 8 * (position + 1) + 8 + kv_in, "d2h": logits + kv_out, "kv": kv_in + kv_out}
    if mode in ("resident", "cpu", "eager", "graph"):
        return {"h2d": x + 16, "d2h": logits, "kv": 0}
    if mode == "device":
        return {"h2d": 0, "d2h": 8, "kv": 0}
    raise ValueError(f"mode {mode!r}: allowed naive, resident, eager, graph, device")


def folder_vocab(folder) -> int:
    """Vocabulary size: the last dim of the decoder's logits output."""
    dec = folder.decoder
    return int(dec.signature.outputs[dec.outputs["logits"]][1][-1])


def _median_decode(df: pd.DataFrame, col: str) -> float:
    d = df[df["step"] > 0][col]
    return float(d.median()) if len(d) else float("nan")


def residency_sweep(model_dirs: dict, contexts, new_tokens: int = 8) -> pd.DataFrame:
    """Naive vs resident decode on CPU for each folder and prompt length.

    model_dirs: label -> folder (e.g. {"gqa": ..., "onnx": ...}). One row per (variant, mode,
    context): measured median bytes and ms per decode step, predicted bytes. Step 0 (prefill) is
    excluded from the medians.
    """
    rows = []
    for label, d in model_dirs.items():
        pipe = vlmdecode.load(d, "cpu")
        sess = make_session(pipe.folder.decoder.path, "cpu")
        for ctx in contexts:
            ids = prompt_ids(ctx)
            x = ids if pipe.folder.info.drive == "ids" else pipe.embed(ids, None)
            # resident
            pipe.generate_from_ids(ids, max_new_tokens=2, stop=())  # warm-up
            r = pipe.generate_from_ids(ids, max_new_tokens=new_tokens, stop=())
            f = r.frame()
            f["ms"] = f["seconds"] * 1e3
            rows.append(_row(label, "resident", ctx, f, predicted_bytes(pipe.folder, "resident", ctx)))
            # naive
            t = Transfers()
            times, last = [], time.perf_counter()
            for _token, _ in naive_decode(pipe.folder, sess, x, pipe.token_input, new_tokens - 1, t):
                now = time.perf_counter()
                times.append((now - last) * 1e3)
                last = now
            tb = t.table()
            f = pd.DataFrame({"step": tb["step"], "h2d_bytes": tb["h2d_bytes"], "d2h_bytes": tb["d2h_bytes"],
                              "kv_bytes": tb["kv_bytes"], "ms": times})
            rows.append(_row(label, "naive", ctx, f, predicted_bytes(pipe.folder, "naive", ctx)))
    return pd.DataFrame(rows)


def _row(label, mode, ctx, f, pred) -> dict:
    first = f[f["step"] == 1]
    take = lambda c: int(first[c].iloc[0]) if len(first) else -1
    return {"variant": label, "mode": mode, "context": ctx,
            "h2d_bytes": take("h2d_bytes"), "d2h_bytes": take("d2h_bytes"), "kv_bytes": take("kv_bytes"),
            "pred_h2d": pred["h2d"], "pred_d2h": pred["d2h"], "pred_kv": pred["kv"],
            "ms_per_step": _median_decode(f, "ms")}
