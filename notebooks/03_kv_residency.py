# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · KV residency: bytes and time per decode step vs context
#
# The naive decoder (mode `naive`, `decoders.naive`: plain `session.run`) ships the KV cache to
# onnxruntime and back every step; the resident CPU decoder binds it once and moves only the token's
# embedding (+ position id and mask slot, 16 bytes) in and the logits out. Two attention variants:
# `gqa` (fixed [1,kvh,max_length,D] buffers: naive moves the whole buffer) and `onnx` (KV grows by Concat).

# %%
# %matplotlib inline
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from vlmdecode import plots
from vlmdecode.explore import residency, results
from vlmdecode.fixture.cache import ensure_fixture

CONTEXTS = [8, 32, 64, 128, 200]
NEW_TOKENS = 16
ROOT = Path(tempfile.mkdtemp())
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", None)

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

# %% [markdown]
# Look at the gap between the naive lines and the resident lines: naive's bytes follow the KV cache (flat for
# `gqa`'s fixed buffers, growing with context for `onnx`), resident's stay at the embedding and the logits.
# The crosses (predicted) sit on the measured points.

# %%
plots.plot_bytes_vs_context(sweep)
plt.show()

# %% [markdown]
# Time per step on tiny, live on this machine (medians of one short run per point):

# %% tags=["nbval-ignore-output"]
# timings: different on every run
sweep.pivot_table(index="context", columns=["variant", "mode"], values="ms_per_step").round(3)

# %% [markdown]
# On tiny, resident is no faster than naive (often a little slower): the KV copy it saves is too small to
# show against the fixed cost of a step. The next section shows the preset where the copy is large.

# %%
plots.plot_time_vs_context(sweep, title="time per decode step on tiny (CPU, live, median)")
plt.show()

# %% [markdown]
# ## Where residency pays: the `small` preset (recorded)
# `data/results/cpu_bench_small.csv` (64 M parameters, fp32, CPU, contexts 64 to 2048): naive copies the whole
# KV buffer both ways every step, naive-concat the KV that exists so far, resident none; genai is
# onnxruntime-genai on the same folder.

# %%
small = results.ok_results(results.load_results("cpu_bench_small.csv"))
ms = small.pivot_table(index="context", columns="mode", values="per_token_ms")
saved = ms["naive"] - ms["resident"]
kv_small = small[small["mode"] == "naive"]["kv_per_step"].max()
kv_tiny = sweep[(sweep["variant"] == "gqa") & (sweep["mode"] == "naive")]["kv_bytes"].max()
print(f"why tiny does not show it: tiny's naive step copies {kv_tiny / 2**10:.0f} KiB of KV (measured above), "
      f"small's {kv_small / 2**20:.0f} MiB ({kv_small / kv_tiny:.0f}x); on small, resident saves "
      f"{saved.min():.1f}-{saved.max():.1f} ms per step")
ms[["naive", "naive-concat", "resident", "genai"]].round(2)

# %% [markdown]
# Look at the green line (resident) under the red one (naive) at every context: the 64 MiB copy naive makes
# per step is the difference. naive-concat closes in at short contexts, where there is little KV to copy.

# %%
plots.plot_recorded_cpu_latency(small, title="small preset, CPU: ms per decode step vs context (recorded)")
plt.show()

# %% [markdown]
# ## Recorded on an H200 (fp16)
# Bytes per step (h2d + d2h) of the CUDA modes from `data/results/h200_bench_*.csv` and `h200_matrix_*.csv`, per
# preset, layout, context and KV capacity: naive moves the KV both ways, eager/graph move the embedding and
# logits, device mode reads back 8 bytes (the token id). The bench counts no bytes for onnxruntime-genai:
# "not measured"; "-": the mode did not run in that scenario.

# %%
recorded = results.load_results(("h200_bench_*.csv", "h200_matrix_*.csv"))
results.bytes_table(recorded)

# %% [markdown]
# Look at the purple bars (device, 8 B) against the others: the token id is all device mode moves per step.
# Modes without a measurement have no bar (named under the axis).

# %%
plots.plot_recorded_bytes(recorded)
plt.show()
