"""Token and logit parity for the notebooks: the pipeline's CPU greedy trajectory vs the float64
reference vs onnxruntime-genai (and the CUDA modes with a GPU), and the logit margins that bound them.

    cpu_trajectory / reference_trajectory / genai_tokens / cuda_parity   tokens (and logits) per path
    parity_table(**tokens) / logit_error / margins / margin_table          the comparisons, as DataFrames

Not a test: the assertions live in tests/ and in notebook 02's printed checks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import vlmdecode

from ..fixture.margins import trajectory_margins
from ..processor import Processor
from ..reference import Reference


def cpu_trajectory(pipe, prompt: str, image=None, steps: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """Greedy (tokens [steps], logits [steps, V]) from the pipeline's decode loop, never stopping at eos."""
    from ..sampling import Recorder

    _, x = pipe.prepare(prompt, image)
    rec = Recorder()
    tokens = list(pipe.decoder.generate(x, steps, rec))
    return np.array(tokens, np.int64), np.stack(rec.logits)


def reference_trajectory(model_dir, prompt: str, image=None, steps: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """The float64 reference's greedy (tokens [steps], logits [steps, V]) for the same prompt and image."""
    ref, proc = Reference.load(model_dir), Processor.load(model_dir)
    ids = proc.encode_prompt(prompt, 0 if image is None else 1)
    feats = None if image is None else ref.vision(proc.preprocess([image], dtype=np.float32))
    tokens, logits = ref.greedy(ref.embed(ids, feats), steps)  # never stops at eos
    return np.asarray(tokens[0], np.int64), np.asarray(logits[:, 0], np.float64)


def margins(logits: np.ndarray) -> pd.DataFrame:
    """step, top1, top2, margin = top1 - top2 of logits [steps, V]."""
    top2 = np.sort(np.asarray(logits), axis=-1)[:, -2:]
    return pd.DataFrame({"step": np.arange(len(top2)), "top1": top2[:, 1], "top2": top2[:, 0],
                         "margin": top2[:, 1] - top2[:, 0]})


def margin_table(model_dir, prompt: str, image=None, steps: int = 24) -> pd.DataFrame:
    """step, token, top1, top2, margin of the float64 reference's greedy trajectory
    (`vlmdecode.fixture.margins.trajectory_margins`)."""
    return trajectory_margins(model_dir, prompt, image, steps)


def genai_tokens(model_dir, pipe, prompt: str, image=None, steps: int = 24):
    """onnxruntime-genai's greedy tokens for the pipeline's prompt ids and pixel values; None if unavailable."""
    from ..peer import genai_available, genai_greedy

    if not genai_available():
        return None
    ids, _ = pipe.prepare(prompt, image)
    px = None if image is None else pipe.processor.preprocess([image])
    return list(genai_greedy(model_dir, ids, steps, pixel_values=px).tokens)


def parity_table(**tokens) -> pd.DataFrame:
    """step, one column per named token list, and `equal` (all columns agree). None lists are left out;
    a shorter list leaves <NA> (not equal)."""
    tokens = {k: v for k, v in tokens.items() if v is not None}
    n = max((len(t) for t in tokens.values() if t is not None), default=0)
    df = pd.DataFrame({"step": np.arange(n)})
    for name, t in tokens.items():
        t = [] if t is None else list(t)
        df[name] = pd.array([int(v) for v in t] + [None] * (n - len(t)), dtype="Int64")
    cols = list(tokens)
    df["equal"] = df[cols].notna().all(axis=1) & df[cols].nunique(axis=1).eq(1)
    return df


def logit_error(logits: np.ndarray, ref_logits: np.ndarray) -> pd.DataFrame:
    """Per step: max_abs = max|logits - ref| and rel = max_abs / max|ref|."""
    a, r = np.asarray(logits, np.float64), np.asarray(ref_logits, np.float64)
    n = min(len(a), len(r))
    err = np.abs(a[:n] - r[:n]).max(axis=-1)
    return pd.DataFrame({"step": np.arange(n), "max_abs": err, "rel": err / np.abs(r[:n]).max(axis=-1)})


def cuda_parity(model_dir, prompt: str, image, steps: int, modes=("eager", "graph", "device")) -> pd.DataFrame:
    """Tokens of each CUDA mode on one folder as a parity table (needs a GPU)."""
    toks = {m: vlmdecode.load(model_dir, "cuda", m).generate(prompt, image=image, max_new_tokens=steps,
                                                               stop=()).tokens for m in modes}
    return parity_table(**toks)
