"""The streaming GEMV gemv_st on the GPU (`pytest -m cuda tests/test_native_stream_cuda.py`; skipped without one).

The kernel against float64 numpy with its outputs poisoned (NaN) first: plain and gate|up rows, the residual
fold prologue, shares of rows that leave blocks empty, rings whose slots are refilled many times, bit-identical
relaunches; then the native step with every projection streamed vs the register GEMVs on the tiny layouts
(logits within fp16 rounding, tokens equal up to a near tie), with and without PDL.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_gate import require_cuda

pytestmark = pytest.mark.cuda

cupy, ort = require_cuda()

from test_native_cuda import _native_run, gelu_tanh, poisoned, rel, rms  # noqa: E402

import vlmdecode  # noqa: E402
from vlmdecode.fixture import build_fixture, preset  # noqa: E402
from vlmdecode.native import kernels as K  # noqa: E402
from vlmdecode.processor import demo_image  # noqa: E402


def _fns(*epis, warps=8, nr=2):
    return K.compile_module(set(), set(), streamed={(e, warps, nr) for e in epis})


@pytest.mark.parametrize("rows,k", [(1536, 1152), (1152, 1024), (1152, 6912), (37, 200), (5, 64)])
@pytest.mark.parametrize("blocks,stage", [(0, 32768), (3, 4096), (200, 32768)])  # 200 > rows of some: empty blocks
@pytest.mark.parametrize("warps,nr", [(8, 2), (4, 1), (16, 4)])
def test_gemv_st_plain(rows, k, blocks, stage, warps, nr):
    rng = np.random.default_rng(rows * 7 + k + blocks + warps)
    W = rng.standard_normal((rows, k)).astype(np.float16)
    x = rng.standard_normal(k).astype(np.float32)
    y = poisoned(rows)
    launch = K.gemv_stream(_fns(K.EPI_PLAIN, warps=warps, nr=nr), "t", cupy.asarray(W), rows, y=y,
                           src=cupy.asarray(x), warps=warps, rows=nr, blocks=blocks, stage_bytes=stage)
    launch()
    assert rel(y.get(), W.astype(np.float64) @ x) < 1e-5
    first = y.get()
    launch()
    assert np.array_equal(y.get(), first)  # same inputs, same bits


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("stage", [32768, 2304])  # 2304: one row a stage, a block's slots refilled ~4 times
def test_gemv_st_fold_prologue(first, stage):
    """r = resid + rms(sum of delta partials) * w_post (or x_in * scale), resid_out = r, y = W rms(r) * w_in."""
    rng = np.random.default_rng(3 + first)
    H, rows, parts, eps = 1152, 1536, 1, 1e-6
    W = rng.standard_normal((rows, H)).astype(np.float16)
    resid = rng.standard_normal(H).astype(np.float32)
    x_in = rng.standard_normal(H).astype(np.float16)
    delta = rng.standard_normal((parts, H)).astype(np.float32)
    w_post, w_in = (rng.uniform(0.5, 2.0, H).astype(np.float32) for _ in range(2))
    y, out = poisoned(rows), poisoned(H)
    keep = [cupy.asarray(a) for a in (W, resid, x_in, delta, w_post, w_in)]  # alive while the launch runs
    K.gemv_stream(_fns(K.EPI_PLAIN), "t", keep[0], rows, y=y, src=None if first else keep[1], x_in=keep[2],
                  x_scale=3.0, delta=None if first else keep[3], delta_parts=parts, delta_w=keep[4], resid_out=out,
                  norm_w=keep[5], eps=eps, stage_bytes=stage)()
    r = x_in.astype(np.float64) * 3.0 if first else resid + rms(delta.astype(np.float64).sum(0), w_post, eps)
    assert rel(out.get(), r) < 1e-6
    assert rel(y.get(), W.astype(np.float64) @ rms(r, w_in, eps)) < 1e-5


@pytest.mark.parametrize("I,blocks,stage", [(6912, 0, 32768), (700, 0, 32768), (700, 7, 9216), (50, 132, 32768)])
@pytest.mark.parametrize("nr", [2, 4])
def test_gemv_st_gate_up_gelu(I, blocks, stage, nr):
    rng = np.random.default_rng(I + blocks)
    H, eps = 1152, 1e-6
    W = (rng.standard_normal((2 * I, H)) * 0.05).astype(np.float16)  # gate rows, then up rows
    resid, o = rng.standard_normal(H).astype(np.float32), rng.standard_normal(H).astype(np.float32)
    w_post, w_in = (rng.uniform(0.5, 2.0, H).astype(np.float32) for _ in range(2))
    m, out = poisoned(I), poisoned(H)
    keep = [cupy.asarray(a) for a in (W, resid, o, w_post, w_in)]
    K.gemv_stream(_fns(K.EPI_GELU, nr=nr), "t", keep[0], I, epi=K.EPI_GELU, y=m, src=keep[1], delta=keep[2],
                  delta_w=keep[3], resid_out=out, norm_w=keep[4], eps=eps, rows=nr, blocks=blocks,
                  stage_bytes=stage)()
    r = resid + rms(o, w_post, eps)
    gu = W.astype(np.float64) @ rms(r, w_in, eps)
    assert rel(out.get(), r) < 1e-6
    assert rel(m.get(), gelu_tanh(gu[:I]) * gu[I:]) < 1e-5


# ---- the step ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    return {layout: build_fixture(preset("tiny", dtype="fp16", layout=layout), root / layout)
            for layout in ("unfused", "fused-cuda")}


def _run(folder, shapes, steps=64):
    pipe = vlmdecode.load(folder, "cuda", "native", shapes=shapes)
    _, x = pipe.prepare("Describe the image.", demo_image(32))
    return (*_native_run(pipe, x, steps), pipe.decoder)


@pytest.mark.parametrize("layout", ["unfused", "fused-cuda"])
def test_native_step_streamed_follows_gemvs(folders, layout):
    """Every projection through gemv_st (down unsplit) gives the register GEMVs' logits within fp16 rounding
    (another summation order) at every step; tokens equal up to the first near tie."""
    want, wl, _ = _run(folders[layout], K.Shapes())
    got, gl, dec = _run(folders[layout], K.Shapes(stream=K.STREAMED))
    kind = lambda name: next(k for k in ("gemv_st", "attention_cl", "gemv") if k in name)  # noqa: E731 (mangled)
    assert [kind(b.fn.name) for b in dec.body[:5]] == ["gemv_st", "attention_cl", "gemv_st", "gemv_st",
                                                       "gemv_st"] and dec.ksd == 1
    d = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), len(want))
    assert d > 0, "the prefill's token differs: the step kernels cannot have caused it"
    for i in range(1, min(d + 1, len(want))):
        assert np.abs(wl[i] - gl[i]).max() <= 2e-2 * max(1.0, np.abs(wl[i]).max()), f"step {i}"
    if d < len(want):
        r = wl[d]
        margin = r[want[d]] - r[got[d]]
        assert margin <= 2e-2 * max(1.0, np.abs(r).max()), f"step {d}: not a near tie (margin {margin:.3g})"


def test_native_streamed_pdl_equals_plain(folders):
    """PDL changes when gemv_st may start (its first stages are requested before the wait), never what it reads:
    bit-identical logits with and without it, 40 steps."""
    runs = [_run(folders["fused-cuda"], K.Shapes(stream=K.STREAMED, pdl=pdl), 40) for pdl in (True, False)]
    assert runs[0][0] == runs[1][0]
    assert all(np.array_equal(a, b) for a, b in zip(runs[0][1][1:], runs[1][1][1:]))
