"""scripts/h200_tiled_gemv_probe.py's weight layout, no GPU: the tiled gemv's own indexing (lane l of a tile holds
row l % R, sub-lane l / R; warp w takes chunk groups i NW + w), emulated in float64 over the re-laid weights, gives
W @ x for every tile height, split-K slice count and warp count the probe runs; shapes that do not tile are refused."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import h200_tiled_gemv_probe as P  # noqa: E402


@pytest.mark.parametrize("R", [8, 16, 32])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("nw", [3, 4, 8])
def test_the_tiled_sums_are_the_product(R, splits, nw):
    rng = np.random.default_rng(R * 10 + splits + nw)
    N, K = 2 * R, splits * 8 * (32 // R) * 5
    W = rng.standard_normal((N, K)).astype(np.float16)
    x = rng.standard_normal(K).astype(np.float32)
    got = P.emulate(P.tile(W, R, splits), x, R, nw, splits)
    ref = (W.astype(np.float64).reshape(N, splits, K // splits)
           * x.astype(np.float64).reshape(1, splits, K // splits)).sum(-1).T
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_a_lane_holds_one_row_and_a_chunk_group_is_contiguous():
    W = np.arange(32 * 64, dtype=np.float16).reshape(32, 64)  # exact in fp16: every value < 2048
    Wt = P.tile(W, 16)  # S = 2: chunk group 0 is chunks 0 (lanes 0-15) and 1 (lanes 16-31) of rows 0-15
    first = Wt[0, 0, 0].reshape(32, 8)
    assert (first[:16] == W[:16, :8]).all() and (first[16:] == W[:16, 8:16]).all()


@pytest.mark.parametrize("shape, R, splits", [((24, 64), 16, 1), ((32, 68), 32, 1), ((32, 80), 16, 2)])
def test_shapes_that_do_not_tile_are_refused(shape, R, splits):
    with pytest.raises(ValueError, match="does not tile"):
        P.tile(np.zeros(shape, np.float16), R, splits)


def test_every_variant_of_the_probe_tiles_its_size():
    """Both layouts need whole tiles and whole chunk groups (the kernel's CG = k_len / 8S rounds down)."""
    for name, (rows, k, splits, _, _) in P.SHAPES.items():
        for R, *_ in P.VARIANTS[name]:
            assert P.tile(np.zeros((rows, k), np.float16), R, splits).shape[:2] == (splits, rows // R)
