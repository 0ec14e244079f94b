# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · KV residency: bytes and time per decode step vs context
#
# The naive loop (`decoders.naive.naive_decode`: plain `session.run`) ships the KV cache to
# onnxruntime and back every step; the resident CPU decoder binds it once and moves only the token's
# embedding (+ position id and mask slot, 16 bytes) in and the logits out. Two attention variants:
# `gqa` (fixed [1,kvh,max_length,D] buffers: naive moves the whole buffer) and `onnx` (KV grows by Concat).

# %%
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from vlmdecode import plots
from vlmdecode.fixture.cache import ensure_fixture
from vlmdecode.explore import residency, results

CONTEXTS = [8, 32, 64, 128, 200]
NEW_TOKENS = 16
ROOT = Path(tempfile.mkdtemp())
pd.set_option("display.width", 160)

# %%
dirs = {att: ensure_fixture("tiny", att, "fp32", root=ROOT) for att in ("gqa", "onnx")}
sweep = residency.residency_sweep(dirs, CONTEXTS, new_tokens=NEW_TOKENS)

# %% [markdown]
# Measured (from `Transfers`) vs predicted bytes for one decode step: must match exactly.

# %%
bytes_table = sweep[["variant", "mode", "context", "h2d_bytes", "d2h_bytes", "kv_bytes",
                     "pred_h2d", "pred_d2h", "pred_kv"]]
print("measured == predicted:", bool((sweep["h2d_bytes"] == sweep["pred_h2d"]).all()
                                     and (sweep["d2h_bytes"] == sweep["pred_d2h"]).all()))
bytes_table

# %% tags=["nbval-ignore-output"]
plots.plot_bytes_vs_context(sweep)
plt.show()

# %% tags=["nbval-ignore-output"]
print(sweep.pivot_table(index="context", columns=["variant", "mode"], values="ms_per_step").round(3))
plots.plot_time_vs_context(sweep)
plt.show()

# %% [markdown]
# ## Recorded on an H200 (fp16)
# Bytes per step of the CUDA modes from `data/results/h200_bench_*.csv` and `h200_matrix_*.csv`: naive
# moves the KV both ways, eager/graph move the embedding and logits, device mode reads back 8 bytes (the
# token id).

# %% tags=["nbval-ignore-output"]
recorded = results.ok_results(results.load_results(("h200_bench_*.csv", "h200_matrix_*.csv")))
cols = ["preset", "context", "mode", "h2d_per_step", "d2h_per_step", "kv_per_step"]
display(recorded[cols].sort_values(["preset", "context", "mode"]).reset_index(drop=True))
plots.plot_recorded_bytes(recorded)
plt.show()
