"""The embedding model evaluated once for every token id: a [V, H] table of decode-step inputs.

A decode step embeds one generated token with no image features. For the embedding models
vlmdecode drives (a row lookup, scaled; image rows scattered in only where image features are
given), that output depends on the token id alone, so running the model once over every id gives
rows that are byte-identical to per-step runs: the host loop copies a row instead of running a
session each step, and the CUDA device loop gathers rows on the GPU.

The image soft token has no row of its own (its embedding is an image feature): its row holds the
pad token's embedding, and callers refuse to feed it. Not here: prompt embedding (the pipeline
runs the model on the whole prompt with its image features).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .modelfolder import ModelFolder
from .sessions import make_session

CHUNK = 16384  # ids per embedding-model run while building
_cache: dict[tuple[str, str], np.ndarray] = {}


def embedding_table(folder: ModelFolder, dtype) -> np.ndarray:
    """[V, H] rows of `dtype`, computed by the folder's embedding model on the CPU (cached per folder)."""
    e = folder.embedding
    if e is None:
        raise ValueError(f"{folder.root} has no embedding component: its decoder takes token ids")
    key = (str(Path(e.path).resolve()), np.dtype(dtype).str)
    if key not in _cache:
        host = make_session(e, "cpu")
        shape = e.signature.inputs[e.inputs["image_features"]][1]
        empty = np.zeros([0 if isinstance(d, str) else d for d in shape], dtype)
        rows = []
        for lo in range(0, folder.vocab_size, CHUNK):
            ids = np.arange(lo, min(lo + CHUNK, folder.vocab_size), dtype=np.int64)[None]
            if folder.image_token_id is not None:
                ids[ids == folder.image_token_id] = folder.pad_token_id
            rows.append(host.run([e.outputs["inputs_embeds"]], {e.inputs["input_ids"]: ids,
                                                                e.inputs["image_features"]: empty})[0][0])
        table = np.ascontiguousarray(np.concatenate(rows).astype(dtype, copy=False))
        table.flags.writeable = False  # shared by every pipeline of this folder
        _cache.clear()  # one table at a time: gemma3-1b's is 604 MB
        _cache[key] = table
    return _cache[key]
