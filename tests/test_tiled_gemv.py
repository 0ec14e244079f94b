"""`native.tiled_gemv` on the CPU: the tiled layout and its inverse, and the layout read the way gemv_tiled's
lanes read it (lane l of a tile: row l % R, 8-half chunk cg S + l / R of chunk group cg; warp w: chunk groups
i NW + w; gate rows first in a tile, then their up rows) gives gelu(gate) * up of the row-major weights; shapes and
Shapes fields it cannot run are refused. The kernel itself runs on a GPU (tests/test_native_cuda.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vlmdecode.native import tiled_gemv as TG
from vlmdecode.native.kernels import EPI_FOLD, EPI_GELU, EPI_PLAIN, KernelShapeError
from vlmdecode.native.shapes import Shapes


def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def lanes_emulated(w_t: np.ndarray, x: np.ndarray, R: int, nw: int) -> np.ndarray:
    """gemv_tiled's sums in float64 by its own indexing, tile by tile -> y [n] (gelu(gate) * up)."""
    n_tiles, CG = w_t.shape[:2]
    S, P = 32 // R, R // 2
    sub = np.arange(32) // R
    y = np.zeros(n_tiles * P)
    for t in range(n_tiles):
        acc = np.zeros((nw, 32))
        for cg in range(CG):  # warp cg % nw, every lane one 16-byte chunk of its row
            cols = (cg * S + sub)[:, None] * 8 + np.arange(8)
            acc[cg % nw] += (w_t[t, cg].astype(np.float64) * x[cols]).sum(-1)
        v = acc.sum(0).reshape(S, R).sum(0)  # the sub-lanes, then the warps: row r's sum at lane r
        y[t * P:(t + 1) * P] = gelu(v[:P]) * v[P:]
    return y


@pytest.mark.parametrize("R", [2, 4, 8, 16, 32])
def test_layout_round_trip_and_lanes(R):
    rng = np.random.default_rng(R)
    n, k = 3 * R, 2 * 8 * (32 // R)
    w = rng.standard_normal((2 * n, k)).astype(np.float16)
    w_t = TG.layout(w, R)
    assert w_t.shape == (n // (R // 2), k // (8 * (32 // R)), 32, 8) and w_t.flags.c_contiguous
    np.testing.assert_array_equal(TG.rows(w_t, R), w)
    x = rng.standard_normal(k)
    ref = w.astype(np.float64) @ x
    for nw in (1, 3, 8):
        np.testing.assert_allclose(lanes_emulated(w_t, x, R, nw), gelu(ref[:n]) * ref[n:], rtol=1e-12, atol=1e-12)


def test_a_tile_holds_gate_rows_then_their_up_rows():
    w = np.arange(16 * 64, dtype=np.float16).reshape(16, 64)  # 8 gate rows, 8 up rows; exact in fp16
    first = TG.layout(w, 4)[1, 0]  # tile 1 (pairs 2, 3), chunk group 0: lanes s * 4 + r
    assert (first[0] == w[2, :8]).all() and (first[1] == w[3, :8]).all()  # gate rows 2, 3
    assert (first[2] == w[10, :8]).all() and (first[3] == w[11, :8]).all()  # their up rows 8 + 2, 8 + 3
    assert (first[4] == w[2, 8:16]).all()  # sub-lane 1: the next 8 halves of gate row 2


@pytest.mark.parametrize("n, k, R, warps, match", [
    (8, 64, 6, 8, "even divisor"), (8, 64, 64, 8, "even divisor"), (3, 64, 4, 8, "do not tile"),
    (8, 40, 4, 8, "do not tile"), (8, 4096, 4, 1, "needs >= 16 warps"), (8, 64, 4, 0, "1 to 32 warps")])
def test_shapes_it_cannot_run_are_refused(n, k, R, warps, match):
    with pytest.raises(KernelShapeError, match=match):
        TG.check(n, k, R, warps)


def test_launch_needs_a_fold_and_the_tiled_bytes():
    with pytest.raises(KernelShapeError, match="give norm_w"):
        TG.launch({}, "L0.gate_up", np.zeros(2 * 8 * 64, np.float16), 8, 64, y=None, src=None, resid_out=None,
                  norm_w=None, eps=1e-6, R=4)
    with pytest.raises(KernelShapeError, match="holds 2048 bytes"):
        TG.launch({}, "L0.gate_up", np.zeros(8 * 64, np.float16), 8, 64, y=None, src=None, resid_out=None,
                  norm_w=np.ones(64, np.float32), eps=1e-6, R=4)


def test_fold_launch_takes_plain_rows_and_its_slots():
    """EPI_FOLD (qkv): n rows (not pairs) of a one-slice copy; one float4 slot a thread from 16 warps, so its longest
    row there is half gate|up's; a plain EPI is launch_slices'."""
    fold = dict(y=None, src=None, resid_out=None, norm_w=np.ones(64, np.float32), eps=1e-6, R=8)
    with pytest.raises(KernelShapeError, match="holds 1024 bytes"):
        TG.launch({}, "L0.qkv", np.zeros(2 * 8 * 64, np.float16), 8, 64, epi=EPI_FOLD, **fold)
    with pytest.raises(KernelShapeError, match="launch_slices"):
        TG.launch({}, "L0.qkv", np.zeros(8 * 64, np.float16), 8, 64, epi=EPI_PLAIN, **fold)
    assert [TG.fold_slots(w, EPI_FOLD) for w in (8, 15, 16, 32)] == [2, 2, 1, 1]
    assert [TG.fold_slots(w, EPI_GELU) for w in (8, 16, 32)] == [2, 2, 2]
    with pytest.raises(KernelShapeError, match="needs >= 32 warps"):
        TG.launch({}, "L0.qkv", np.zeros(16 * 4096, np.float16), 16, 4096, epi=EPI_FOLD, warps=16,
                  **(fold | {"R": 16}))
    TG.check(16, 4096, 16, 16)  # gate|up's fold keeps its 2 slots at 16 warps


@pytest.mark.parametrize("field", ["gate_up_tiled", "down_tiled", "o_tiled", "qkv_tiled"])
@pytest.mark.parametrize("bad", [(4,), (4, 8, -1), (4.0, 8, 4)])
def test_shapes_refuses_a_malformed_tiled_field(bad, field):
    with pytest.raises(KernelShapeError, match=field):
        Shapes(**{field: bad})
    assert Shapes().gate_up_tiled == ()
    assert Shapes().with_overrides({"gate_up_tiled": [4, 8, 4]}).gate_up_tiled == (4, 8, 4)


def slices_emulated(w_t: np.ndarray, x: np.ndarray, R: int, nw: int) -> np.ndarray:
    """gemv_tiled EPI_PLAIN's sums in float64 by its own indexing -> y [splits, n]: slice p's tiles against x's
    slice p."""
    splits, n_tiles, CG = w_t.shape[:3]
    S, k = 32 // R, CG * 8 * (32 // R)
    sub = np.arange(32) // R
    y = np.zeros((splits, n_tiles * R))
    for p in range(splits):
        xs = x[p * k:(p + 1) * k]
        for t in range(n_tiles):
            acc = np.zeros((nw, 32))
            for cg in range(CG):
                cols = (cg * S + sub)[:, None] * 8 + np.arange(8)
                acc[cg % nw] += (w_t[p, t, cg].astype(np.float64) * xs[cols]).sum(-1)
            y[p, t * R:(t + 1) * R] = acc.sum(0).reshape(S, R).sum(0)
    return y


@pytest.mark.parametrize("R,splits", [(2, 1), (4, 3), (8, 2), (16, 8), (32, 2)])
def test_slice_layout_round_trip_and_lanes(R, splits):
    rng = np.random.default_rng(R + splits)
    n, k = 2 * R, 2 * 8 * (32 // R)
    w = rng.standard_normal((n, splits * k)).astype(np.float16)
    w_t = TG.layout_slices(w, R, splits)
    assert w_t.shape == (splits, n // R, k // (8 * (32 // R)), 32, 8) and w_t.flags.c_contiguous
    np.testing.assert_array_equal(TG.rows_slices(w_t, R), w)
    x = rng.standard_normal(splits * k)
    ref = (w.astype(np.float64).reshape(n, splits, k) * x.reshape(1, splits, k)).sum(-1).T
    for nw in (1, 3, 8):
        np.testing.assert_allclose(slices_emulated(w_t, x, R, nw), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n, k, R, match", [(16, 64, 6, "even divisor of 32"), (12, 64, 8, "do not tile"),
                                            (16, 40, 8, "do not tile"), (16, 64, 1, "even divisor of 32")])
def test_slices_it_cannot_run_are_refused(n, k, R, match):
    with pytest.raises(KernelShapeError, match=match):
        TG.check_slices(n, k, R, 8)


def test_slice_launch_needs_the_tiled_bytes():
    with pytest.raises(KernelShapeError, match="holds 4096 bytes"):
        TG.launch_slices({}, "L0.down", np.zeros(16 * 64, np.float16), 16, 64, 2, y=None, src=None, R=8)
    with pytest.raises(KernelShapeError, match="slices do not cover"):
        TG.layout_slices(np.zeros((16, 100), np.float16), 8, 3)
