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
# # 01 · Build the tiny fixture and run one generation
#
# Builds the `tiny` Gemma-3-style VLM (GroupQueryAttention, fp32) into a temp folder, shows what the
# three ONNX components hold, generates 24 tokens on CPU and plots the reference's per-step logit margins.

# %%
# %matplotlib inline
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

import vlmdecode
from vlmdecode import plots
from vlmdecode.explore import parity, tables
from vlmdecode.fixture.cache import ensure_fixture
from vlmdecode.processor import demo_image

PRESET, ATTENTION, DTYPE = "tiny", "gqa", "fp32"
PROMPT, STEPS = "Describe the image.", 24
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", None)

# %%
model_dir = ensure_fixture(PRESET, ATTENTION, DTYPE, root=Path(tempfile.mkdtemp()))
sorted(p.name for p in model_dir.iterdir())

# %% [markdown]
# ## Components: size, inputs/outputs, ops

# %%
tables.component_table(model_dir)

# %%
tables.io_table(model_dir)

# %%
tables.op_counts(model_dir)

# %% [markdown]
# ## Decoder layouts
# The same weights and function in fewer onnxruntime nodes (`--layout`): `fused` packs the QKV and gate|up
# MatMuls, moves rotary into GroupQueryAttention and fuses each residual Add with the next norm;
# `fused-cuda` also moves the q/k norms into GroupQueryAttention (onnxruntime runs that on CUDA only).
# The op types whose counts differ between the layouts (what the fusions change) come first.

# %%
layouts = {lay: ensure_fixture(PRESET, ATTENTION, DTYPE, root=model_dir.parent, layout=lay)
           for lay in ("unfused", "fused", "fused-cuda")}
tables.layout_table(layouts)

# %% [markdown]
# ## One generation on CPU
# The fixture's weights are random (seeded), so the generated text is noise: what matters is that the token
# ids are reproducible and match the float64 reference below, not what they spell.

# %%
image = demo_image(32)
pipe = vlmdecode.load(model_dir, "cpu")
result = pipe.generate(PROMPT, image=image, max_new_tokens=STEPS, stop=())
print("prompt tokens:", result.prompt_tokens)
print("tokens:", result.tokens)
print("text (noise from random weights):", repr(result.text))

# %% tags=["nbval-ignore-output"]
# timings: different on every run
print(f"time to first token {result.ttft_seconds * 1e3:.2f} ms, "
      f"median step {pd.Series(result.decode_seconds).median() * 1e3:.3f} ms")
result.frame().head()

# %% [markdown]
# The input image: `demo_image(32)`, a deterministic synthetic picture (the tiny preset takes 32x32 px).

# %%
plots.plot_image(image)
plt.show()

# %% [markdown]
# ## Per-step logit margins (float64 reference)
# A greedy token can only flip between two numeric paths if the top-2 logits move by more than the margin.

# %%
m = parity.margin_table(model_dir, PROMPT, image, STEPS)
print("reference tokens == CPU tokens:", m["token"].tolist() == result.tokens)
print("min margin > 0.01:", bool(m["margin"].min() > 0.01), "at step", int(m["margin"].idxmin()))

# %% [markdown]
# Look at the red bar, the smallest margin: every step's top-1 logit leads by far more than float32
# rounding (notebook 02 measures that error), so CPU and reference cannot pick different tokens.

# %%
plots.plot_margins(m)
plt.show()
