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
# # 04 · Eager vs CUDA graph vs device-resident decoding
#
# Recorded per-token latencies on an H200 (`data/results/h200_bench_*.csv`, median over a steady-state
# window) against the bandwidth floor (weights + KV read once per token at measured copy bandwidth).
# Rows that errored (e.g. genai-* on that run) are left out.

# %%
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from vlmdecode import explore, plots
from vlmdecode.processor import demo_image

ROOT = Path(tempfile.mkdtemp())
pd.set_option("display.width", 160)

# %% tags=["nbval-ignore-output"]
bench = explore.load_results()
ok = explore.ok_results(bench)
print(f"{len(bench)} recorded rows, {len(ok)} ran; errored modes:", sorted(set(bench["mode"]) - set(ok["mode"])))
ok.pivot_table(index=["preset", "context"], columns="mode", values="per_token_ms").round(3)

# %% tags=["nbval-ignore-output"]
plots.plot_latency_by_mode(bench)
plt.show()

# %% [markdown]
# Ratios: < 1 means the first mode is faster (graph/eager 0.5: graph takes half the time). device/floor is how far from the bandwidth bound we are
# (the tiny preset is launch-bound: its floor is nanoseconds).

# %% tags=["nbval-ignore-output"]
explore.bench_ratios(bench).round(3)

# %% [markdown]
# ## Explorer
# Pick a mode and press **Run**: tokens stream in with a per-step timing plot. On CPU only the tiny preset
# and the resident mode exist; with a GPU, cuda eager/graph/device on the tiny fp16 fixture.
# (Nothing runs until you press the button.)

# %% tags=["nbval-ignore-output"]
box = explore.explorer(explore.fixture_pipes(ROOT), presets=("tiny",), image=demo_image(32))
display(box)
