"""KV residency on CPU for notebook 03: the host<->device bytes a decode step should move (by mode) and a
sweep that measures bytes and time of the naive loop vs the resident decoder over prompt lengths.

    predicted_bytes(folder, mode, position)   bytes one step should move: h2d, d2h, kv (vlmdecode.costmodel)
    residency_sweep(dirs, contexts)           measured vs predicted bytes and median ms per step

A quick live sweep, not the benchmark harness (see bench).
"""

from __future__ import annotations

import pandas as pd

import vlmdecode

from ..costmodel import predicted_bytes
from ..profiling import prompt_ids

__all__ = ["predicted_bytes", "residency_sweep"]  # predicted_bytes: vlmdecode.costmodel's, shown here


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
        pipes = {m: vlmdecode.load(d, "cpu", m) for m in ("resident", "naive")}  # the same loop, two decoders
        for ctx in contexts:
            ids = prompt_ids(ctx)
            for mode, pipe in pipes.items():
                pipe.generate_from_ids(ids, max_new_tokens=2, stop=())  # warm-up
                f = pipe.generate_from_ids(ids, max_new_tokens=new_tokens, stop=()).frame()
                f["ms"] = f["seconds"] * 1e3
                rows.append(_row(label, mode, ctx, f, predicted_bytes(pipe.folder, mode, ctx)))
    return pd.DataFrame(rows)


def _row(label, mode, ctx, f, pred) -> dict:
    first = f[f["step"] == 1]
    take = lambda c: int(first[c].iloc[0]) if len(first) else -1
    return {"variant": label, "mode": mode, "context": ctx,
            "h2d_bytes": take("h2d_bytes"), "d2h_bytes": take("d2h_bytes"), "kv_bytes": take("kv_bytes"),
            "pred_h2d": pred["h2d"], "pred_d2h": pred["d2h"], "pred_kv": pred["kv"],
            "ms_per_step": _median_decode(f, "ms")}
