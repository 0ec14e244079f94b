"""Notebook 05's tables: a folder written by the real exporters, what it holds, its KV and its tokens.

    exported_dir(name)              tests/data/exported/NAME of the checkout ($VLMDECODE_EXPORTED overrides)
    components(folder)              one row per ONNX component: file, inputs, outputs, op count
    decoder_io(folder)              the decoder's graph inputs and outputs with shapes and element types
    kv_per_layer(pipes)             per layer and pipeline: window, KV positions allocated, bytes
    tokens_beside_expected(pipe, folder)   our greedy tokens next to transformers' and onnxruntime-genai's
                                    (tests/data/exported/*/expected.json), per step, with agreement flags

Inputs are vlmdecode objects (ModelFolder, Pipeline); nothing here runs a model except
tokens_beside_expected (one greedy generation). Not here: figures (plots.plot_kv_per_layer).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..kvcache import kv_nbytes
from .results import REPO_RESULTS

REPO_EXPORTED = REPO_RESULTS.parents[1] / "tests" / "data" / "exported"


def exported_dir(name: str, root=None) -> Path:
    """The exported folder `name` under `root`, $VLMDECODE_EXPORTED or the checkout's tests/data/exported."""
    base = Path(root or os.environ.get("VLMDECODE_EXPORTED") or REPO_EXPORTED)
    path = base / name
    if not (path / "genai_config.json").is_file():
        raise FileNotFoundError(f"exported folder not found: {path} (the exporters' folders live in a checkout "
                                "under tests/data/exported; set VLMDECODE_EXPORTED to that folder)")
    return path


def _shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def components(folder) -> pd.DataFrame:
    rows = []
    for comp in (folder.vision, folder.embedding, folder.decoder):
        if comp is None:
            continue
        sig = comp.signature
        rows.append({"role": comp.role, "file": comp.path.name, "inputs": len(sig.inputs), "outputs": len(sig.outputs),
                     "op types": len(sig.ops), "ops (some)": ", ".join(sorted(sig.ops)[:6])})
    return pd.DataFrame(rows)


def decoder_io(folder, layers: int = 1) -> pd.DataFrame:
    """Graph inputs and outputs of the decoder; per-layer KV names for the first `layers` layers and the last."""
    sig, n = folder.decoder.signature, folder.info.num_layers
    keep = {i for i in range(min(layers, n))} | {n - 1}
    rows = []
    for kind, values in (("input", sig.inputs), ("output", sig.outputs)):
        for name, (dtype, shape) in values.items():
            parts = name.split(".")
            if len(parts) > 2 and parts[-2].isdigit() and int(parts[-2]) not in keep:
                continue
            rows.append({"kind": kind, "name": name, "dtype": np.dtype(dtype).name if dtype != "bfloat16" else dtype,
                         "shape": _shape(shape)})
    return pd.DataFrame(rows)


def kv_per_layer(pipes: dict) -> pd.DataFrame:
    """pipes: label -> Pipeline (shared-buffer KV). Rows: label, layer, window, capacity, bytes (K and V)."""
    rows = []
    for label, pipe in pipes.items():
        info, kv = pipe.folder.info, pipe.decoder.kv
        windows = info.windows or (None,) * info.num_layers
        for layer, (w, c) in enumerate(zip(windows, kv.capacities)):
            rows.append({"folder": label, "layer": layer, "window": w if w is not None else "full",
                         "capacity": c, "bytes": kv_nbytes([c], info.num_kv_heads, info.head_size, info.dtype)})
    return pd.DataFrame(rows)


def tokens_beside_expected(pipe, folder: Path, image: str | None = None) -> pd.DataFrame:
    """Greedy tokens of `pipe` on the folder's expected.json prompt (and `image`, a file of the folder) next to
    transformers' float32 greedy tokens and onnxruntime-genai CPU's, when recorded."""
    e = json.loads((Path(folder) / "expected.json").read_text())
    if image is not None:
        block = e["images"][image]
        prompt = next(c["text"] for c in e["messages"][0]["content"] if c["type"] == "text")
        hf = block["hf_float32_greedy_causal"]["tokens"]
        genai = block.get("onnxruntime_genai_cpu_greedy", {}).get("tokens")
    else:
        block, prompt = e, e["prompt"]["messages"][0]["content"]
        hf, genai = e["hf_float32_greedy"]["tokens"], e.get("onnxruntime_genai_cpu_greedy", {}).get("tokens")
    n = len(genai or hf)
    ours = pipe.generate(prompt, image=None if image is None else Path(folder) / image, max_new_tokens=n,
                         do_sample=False, stop=()).tokens
    df = pd.DataFrame({"step": range(n), "vlmdecode": ours, "transformers": hf[:n]})
    df["= transformers"] = df["vlmdecode"] == df["transformers"]
    if genai is not None:
        df["onnxruntime-genai"] = genai[:n]
        df["= genai"] = df["vlmdecode"] == df["onnxruntime-genai"]
    return df
