"""The bounded LM head's argument in numpy (`vlmdecode.native.bounded_head`; its kernels: tests/test_native_cuda.py):
the int8 estimate's bound holds for every row, and picking among the rows it cannot exclude gives the full head's
token (first index of the largest fp16 logit; -1 for NaN/+inf) on random heads with ties, near-ties, suppressed ids,
zero and non-finite rows, with and without a softcap."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlmdecode.native import bounded_head as BH
from vlmdecode.native.kernels import KernelShapeError


def test_width_must_be_a_multiple_of_16():
    with pytest.raises(KernelShapeError, match="multiple of 16"):
        BH.quantise(np.zeros((4, 40), np.float16))
    with pytest.raises(KernelShapeError, match="multiple of 64"):
        BH.quantise(np.zeros((4, 48), np.float16), bits=6)
    with pytest.raises(KernelShapeError, match="bits a weight"):
        BH.quantise(np.zeros((4, 64), np.float16), bits=4)


def _kernel_unpack6(packed: np.ndarray, k: int) -> np.ndarray:
    """head_bound<.., 6>'s reading of one row, word by word as the CUDA code does (little-endian words; unpack6's
    masks and shifts; chunk m's nibble words 8m .. 8m + 7 and crumb words 4m .. 4m + 3)."""
    words = packed.view(np.uint8).astype(np.uint32)
    words = words.reshape(-1, 4) @ np.array([1, 1 << 8, 1 << 16, 1 << 24], np.uint32)
    nib, crumb = words[: k // 8], words[k // 8:]
    m4, m2 = 0x0F0F0F0F, 0x03030303
    out = []
    for m in range(k // 64):
        for q in range(4):
            n0, n1, c = int(nib[8 * m + 2 * q]), int(nib[8 * m + 2 * q + 1]), int(crumb[4 * m + q])
            for u in ((n0 & m4) | ((c & m2) << 4), ((n0 >> 4) & m4) | (((c >> 2) & m2) << 4),
                      (n1 & m4) | (((c >> 4) & m2) << 4), ((n1 >> 4) & m4) | (((c >> 6) & m2) << 4)):
                out += [(u >> (8 * b)) & 255 for b in range(4)]
    return np.array(out, np.int16) - 32


@pytest.mark.parametrize("k", [64, 128, 1152])
def test_pack6_is_what_the_kernel_reads(k):
    rng = np.random.default_rng(k)
    q = rng.integers(-31, 32, (3, k)).astype(np.int8)
    packed = BH.pack6(q)
    assert packed.shape == (3, 3 * k // 4) and (BH.unpack6(packed, k) == q).all()
    for r in range(3):
        assert (_kernel_unpack6(packed[r], k) == q[r]).all()


def _x(rng, k, outliers):
    x = rng.standard_normal(k).astype(np.float32)
    if outliers:
        x[rng.integers(0, k, 3)] *= 50  # massive activations, as Gemma's
    return x


def _bound_holds(table, W, x):
    """|z_r - a_r| <= E_r for every finite row, z_r as fp32 computes it and as float64 does."""
    a, e = BH.estimate(table, x)
    ok = np.isfinite(a)
    z32 = W.astype(np.float32) @ x
    z64 = W.astype(np.float64) @ x.astype(np.float64)
    return bool((np.abs(z32 - a)[ok] <= e[ok]).all() and (np.abs(z64 - a)[ok] <= e[ok]).all())


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(1, 1500), k16=st.integers(1, 40),
       softcap=st.sampled_from([None, 30.0, 2.0]), ties=st.integers(0, 3), n_sup=st.integers(0, 4),
       outliers=st.booleans(), scale=st.sampled_from([1e-3, 0.05, 1.0, 300.0]), bits=st.sampled_from(BH.BITS))
def test_bounded_pick_equals_full_pick(seed, V, k16, softcap, ties, n_sup, outliers, scale, bits):
    rng = np.random.default_rng(seed)
    k = 16 * k16 if bits == 8 else 64 * (1 + k16 % 12)
    W = (rng.standard_normal((V, k)) * scale).astype(np.float16)
    x = _x(rng, k, outliers)
    if ties and V > ties:  # copies of the best row: equal logits, the first index must win
        best = int(np.argmax(W.astype(np.float32) @ x))
        for r in rng.choice(V, ties, replace=False):
            W[r] = W[best]
    if V > 4:
        W[rng.integers(0, V)] = 0  # a zero row: scale 0
        near = int(np.argmax(W.astype(np.float32) @ x))  # a near-tie: one fp16 ulp off the best row
        r = int(rng.integers(0, V))
        W[r] = W[near]
        W[r, int(np.argmax(np.abs(x)))] = np.nextafter(W[near, int(np.argmax(np.abs(x)))], np.float16(0))
    sup = tuple(int(i) for i in rng.choice(V, min(n_sup, V), replace=False))
    table = BH.quantise(W, bits=bits)
    assert _bound_holds(table, W, x)
    tok, n_cand = BH.reference_pick(table, W, x, softcap, sup)
    assert tok == BH.full_pick(W, x, softcap, sup)
    # the winner among the rows head_pick's rule keeps, and as many rows as the reference computed
    a, e = BH.estimate(table, x)
    keep = np.ones(V, bool)
    keep[list(sup)] = False
    lows = (a - e)[keep]
    cand = BH.candidates(a + e, np.nanmax(lows) if np.isfinite(lows).any() else -np.inf, softcap) & keep
    assert (tok < 0 or cand[tok]) and n_cand == int(cand.sum()) <= V


def test_non_finite_rows_are_always_candidates():
    rng = np.random.default_rng(1)
    W = (rng.standard_normal((400, 64)) * 0.1).astype(np.float16)
    x = _x(rng, 64, False)
    W[7, 3] = np.nan
    table = BH.quantise(W)
    assert BH.reference_pick(table, W, x)[0] == BH.full_pick(W, x) == -1
    assert BH.reference_pick(table, W, x, suppress=(7,))[0] == BH.full_pick(W, x, suppress=(7,)) >= 0
    W[7] = 0
    W[9] = 60000 * np.sign(x)  # an fp16 +inf logit (no softcap)
    table = BH.quantise(W)
    assert BH.reference_pick(table, W, x)[0] == BH.full_pick(W, x) == -1
    every = tuple(range(400))
    assert BH.reference_pick(table, W, x, suppress=every)[0] == BH.full_pick(W, x, suppress=every) == -1


def test_few_candidates_on_a_random_head():
    """At a gemma3-1b-like width the bound (~0.3 sd of a row's dot) leaves a handful of rows of 50000 to compute."""
    rng = np.random.default_rng(5)
    W = (rng.standard_normal((50000, 1152)) * 0.03).astype(np.float16)
    x = _x(rng, 1152, True)
    tok, n_cand = BH.reference_pick(BH.quantise(W), W, x, 30.0)
    assert tok == BH.full_pick(W, x, 30.0) and n_cand < 50
