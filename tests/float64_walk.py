"""Test helper: walk the float64 reference (vlmdecode.reference) along a decoder's tokens (CUDA tests).

`walk(ref, ids, feats, toks, logits)`: at every step the decoder's logits (None: not exposed for that step) must
be within fp16 tolerance of the reference's, and its token must be the reference's argmax until the first step
whose top-1/top-2 margin is at most twice the worst logit error so far (#16's rule: beyond it fp16 tokens may
legitimately differ). Returns (that step, or len(toks); the worst logit error).
"""

from __future__ import annotations

import numpy as np


def walk(ref, ids, feats, toks, logits, tol: float = 2e-2):
    cache = ref.new_cache()
    r = ref.decode(ref.embed(ids, feats), cache)[0, -1]
    worst, first_close = 0.0, None
    for step in range(len(toks)):
        if logits[step] is not None:  # the row token `step` was picked from
            err = float(np.abs(logits[step] - r).max())
            worst = max(worst, err)
            assert err < tol * np.abs(r).max(), f"step {step}: logit error {err:.3g}"
        top2 = np.sort(r)[-2:]
        if first_close is None and top2[1] - top2[0] <= 2 * max(worst, 1e-3):
            first_close = step
        if first_close is None:
            assert toks[step] == int(np.argmax(r)), f"step {step}: decoder {toks[step]} vs float64 {np.argmax(r)}"
        r = ref.decode(ref.embed(np.array([[toks[step]]]), None), cache)[0, -1]  # along the decoder's tokens
    return (len(toks) if first_close is None else first_close), worst
