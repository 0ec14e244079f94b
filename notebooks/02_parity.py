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
# # 02 · Parity: CPU (onnxruntime) vs float64 reference vs onnxruntime-genai, then CUDA
#
# Same prompt and image through three independent paths; tokens must agree at every step and the
# CPU logits must stay within float32 rounding of the float64 reference.

# %%
# %matplotlib inline
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

import vlmdecode
from vlmdecode import plots
from vlmdecode.devices import gpu_available
from vlmdecode.explore import parity, results
from vlmdecode.fixture.cache import ensure_fixture
from vlmdecode.processor import demo_image

PROMPT, STEPS = "Describe the image.", 24
ROOT = Path(tempfile.mkdtemp())
pd.set_option("display.max_rows", 40)
pd.set_option("display.max_colwidth", None)  # full test names

# %%
model_dir = ensure_fixture("tiny", "gqa", "fp32", root=ROOT)
image = demo_image(32)
pipe = vlmdecode.load(model_dir, "cpu")
cpu_tokens, cpu_logits = parity.cpu_trajectory(pipe, PROMPT, image, STEPS)
ref_tokens, ref_logits = parity.reference_trajectory(model_dir, PROMPT, image, STEPS)
genai = parity.genai_tokens(model_dir, pipe, PROMPT, image, STEPS)
print("genai available:", genai is not None)

# %%
table = parity.parity_table(cpu=cpu_tokens, reference=ref_tokens, genai=genai)
print("all steps equal:", bool(table["equal"].all()))
table

# %%
err = parity.logit_error(cpu_logits, ref_logits)
print("max relative logit error < 1e-5:", bool(err["rel"].max() < 1e-5))

# %% [markdown]
# Look at the scale: the CPU's logits stay within float32 rounding of the float64 reference at every step
# (relative error below 1e-6 at every step, under the 1e-5 checked above).

# %%
plots.plot_logit_error({"onnxruntime CPU fp32": err})
plt.show()

# %% [markdown]
# Look at the gap between the bars and the dashed line: the smallest margin is orders of magnitude above
# twice the largest CPU logit error, so no step is close to a token flip.

# %%
plots.plot_margins(parity.margins(ref_logits), threshold=float(err["max_abs"].max()) * 2,
                   title="reference margin per step vs 2x max CPU logit error")
plt.show()

# %% [markdown]
# ## CUDA
# The recorded H200 test run (`data/results/h200_gpu_tests.xml`, the JUnit file of the run logged in
# `h200_gpu_test_log.txt`): every CUDA test, its file and outcome.

# %%
log = results.gpu_test_log()
print("recorded H200 run:", log["outcome"].value_counts().to_dict())
log

# %% [markdown]
# Live when a GPU is visible: the fp16 fixture's tokens in modes eager / graph / device vs the CPU tokens above.

# %% tags=["nbval-ignore-output"]
# depends on the machine: a GPU here or not
if gpu_available():
    fp16_dir = ensure_fixture("tiny", "gqa", "fp16", root=ROOT)
    cuda = parity.cuda_parity(fp16_dir, PROMPT, image, STEPS)
    cuda.insert(1, "cpu_fp32", cpu_tokens)
    same = cuda[["eager", "graph", "device"]].eq(cuda["cpu_fp32"], axis=0)
    print("CUDA modes equal CPU fp32 at every step:", bool(same.all().all()))
    display(cuda)
else:
    print("no GPU here: see the recorded H200 run above")
