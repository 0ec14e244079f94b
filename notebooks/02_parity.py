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
# # 02 · Parity: CPU (onnxruntime) vs float64 reference vs onnxruntime-genai, then CUDA
#
# Same prompt and image through three independent paths; tokens must agree at every step and the
# CPU logits must stay within float32 rounding of the float64 reference.

# %%
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

import vlmdecode
from vlmdecode import plots
from vlmdecode.fixture.cache import ensure_fixture
from vlmdecode.devices import gpu_available
from vlmdecode.explore import parity, results
from vlmdecode.processor import demo_image

PROMPT, STEPS = "Describe the image.", 24
ROOT = Path(tempfile.mkdtemp())
pd.set_option("display.max_rows", 40)

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

# %% tags=["nbval-ignore-output"]
plots.plot_logit_error({"onnxruntime CPU fp32": err})
plt.show()

# %% tags=["nbval-ignore-output"]
plots.plot_margins(parity.margins(ref_logits), threshold=float(err["max_abs"].max()) * 2,
                   title="reference margin per step vs 2x max CPU logit error")
plt.show()

# %% [markdown]
# ## CUDA
# Live when a GPU is visible (fp16 fixture, modes eager / graph / device vs the CPU tokens above);
# otherwise the recorded H200 test run from `data/results/h200_gpu_test_log.txt`.

# %% tags=["nbval-ignore-output"]
if gpu_available():
    fp16_dir = ensure_fixture("tiny", "gqa", "fp16", root=ROOT)
    cuda = parity.cuda_parity(fp16_dir, PROMPT, image, STEPS)
    cuda.insert(1, "cpu_fp32", cpu_tokens)
    same = cuda[["eager", "graph", "device"]].eq(cuda["cpu_fp32"], axis=0)
    print("CUDA modes equal CPU fp32 at every step:", bool(same.all().all()))
    display(cuda)
else:
    log = results.gpu_test_log()
    print("no GPU here: recorded H200 run;", log["outcome"].value_counts().to_dict())
    display(log)
