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
# # 05 · Folders as the real exporters write them
#
# `vlmdecode.load` on folders made by onnxruntime-genai's model builder (and a VLM folder with torch.onnx
# vision/embedding models and an onnxruntime-extensions processor config), unchanged: what they hold, the
# decoder's inputs and outputs, the KV cache each layer gets (the builder's sliding layers keep a windowed
# cache), and the tokens beside transformers' float32 greedy tokens and onnxruntime-genai's, recorded in
# each folder's `expected.json` (tests/data/exported, made by scripts/exported/). Random weights: the text is
# noise by design, the tokens are the check.

# %%
# %matplotlib inline
import pandas as pd

import vlmdecode
from vlmdecode import plots
from vlmdecode.explore import exported

WINDOWED, FULL, VLM = "builder-text-fp32", "builder-text-fp32-fullkv", "builder-vlm"
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", None)

# %%
dirs = {name: exported.exported_dir(name) for name in (WINDOWED, FULL, VLM)}
pipes = {name: vlmdecode.load(d, "cpu") for name, d in dirs.items()}
vlm = pipes[VLM].folder
print(f"{VLM}: type {vlm.model_type}, decoder driven by {vlm.info.drive}, search defaults {vlm.search}")
exported.components(vlm)

# %% [markdown]
# The decoder's graph inputs and outputs (layers 0 and 5 of 6 shown): no `position_ids` (rotary runs inside
# GroupQueryAttention from the mask), `inputs_embeds` for the VLM's decoder, and the sliding layers' KV with
# their own symbolic length (`past_sliding_length`).

# %%
exported.decoder_io(vlm)

# %% [markdown]
# KV positions and bytes per layer on the CPU: the windowed export's five sliding layers hold their window
# (12) + 16 positions (onnxruntime-genai's CPU slack; on CUDA exactly the window), the global layer the
# capacity (the folder's max_length 512); the full-KV export of the same weights gives every layer 512.

# %%
kv = exported.kv_per_layer({WINDOWED: pipes[WINDOWED], FULL: pipes[FULL]})
print(kv.groupby("folder")["bytes"].sum())
kv.pivot(index="layer", columns="folder", values="capacity")

# %% [markdown]
# Look at the five short bars: the windowed layers, 18x smaller than the full-KV export's on this tiny model.

# %%
fig = plots.plot_kv_per_layer(kv, "KV bytes per layer: windowed vs full-KV export (CPU)")

# %% [markdown]
# Tokens beside transformers' and onnxruntime-genai's, greedy: the windowed text export (200 steps) and the
# VLM folder on its 48x36 grayscale JPEG (48 steps; converted to RGB and resized to 64x64 as
# processor_config.json says, CUBIC, as onnxruntime-genai does). Transformers' processor follows
# preprocessor_config.json instead (BILINEAR): other pixels, and its tokens part from the other two where the
# `= transformers` column turns False.

# %%
text = exported.tokens_beside_expected(pipes[WINDOWED], dirs[WINDOWED])
image = exported.tokens_beside_expected(pipes[VLM], dirs[VLM], image="image_48x36_gray.jpg")
for label, df in (("text, windowed KV", text), ("VLM, 48x36 grayscale", image)):
    agree = {c: int(df[c].sum()) for c in df.columns if c.startswith("= ")}
    print(f"{label}: {len(df)} steps, steps equal: {agree}")
image.iloc[4:14]
