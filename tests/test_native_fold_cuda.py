"""The producer-side fold on the GPU (`pytest -m cuda tests/test_native_fold_cuda.py`; skipped without one).

A plain GEMV whose last block to finish folds its output (all split-K parts) for the next GEMV, against
float64 numpy with every output poisoned (NaN) first, its counter back at zero, relaunches bit-identical; the
plain-vector instantiation (FOLD 0) bit-identical to the folding one fed a plain vector; then the native step
with Shapes(fold="producer") against the consumer fold on the tiny layouts (logits within fp32 rounding of a
different block size, tokens equal), and PDL vs plain launches bit-identical with it.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_gate import require_cuda

pytestmark = pytest.mark.cuda

cupy, ort = require_cuda()

from test_native_cuda import _native_run, poisoned, rel, rms  # noqa: E402

import vlmdecode  # noqa: E402
from vlmdecode.fixture import build_fixture, preset  # noqa: E402
from vlmdecode.native import kernels as K  # noqa: E402
from vlmdecode.processor import demo_image  # noqa: E402


@pytest.mark.parametrize("rows,k,splits,warps,pf", [(1152, 6912, 8, 4, 2), (1152, 1024, 1, 8, 1), (64, 384, 3, 4, 1),
                                                     (1152, 6912, 8, 8, 0)])
def test_gemv_tail_fold(rows, k, splits, warps, pf):
    """y = W x (split-K parts), then once: r = base + rms(sum of parts) * w_post -> resid, out = rms(r) * w_in."""
    rng = np.random.default_rng(rows + k + splits)
    eps = 1e-6
    W = (rng.standard_normal((rows, k)) * 0.05).astype(np.float16)
    x, base = rng.standard_normal(k).astype(np.float32), rng.standard_normal(rows).astype(np.float32)
    w_post, w_in = (rng.uniform(0.5, 2.0, rows).astype(np.float32) for _ in range(2))
    keep = [cupy.asarray(a) for a in (W, x, base, w_post, w_in)]  # alive while the launch runs
    y, resid, out, counter = poisoned((splits, rows)), poisoned(rows), poisoned(rows), cupy.zeros(1, cupy.int32)
    fns = K.compile_module({(K.loads_per_lane(k // splits), 1, K.EPI_PLAIN, pf, False)}, set())
    launch = K.gemv(fns, "t", keep[0], rows, k // splits, splits=splits, y=y, src=keep[1], warps=warps, rpw=1,
                    prefetch_weights=pf, fold_base=keep[2], fold_dw=keep[3], fold_norm=keep[4], fold_resid=resid,
                    fold_counter=counter, fold_out=out, eps=eps, plain_kernel=True)
    launch()
    yy = W.astype(np.float64) @ x
    assert rel(y.get().sum(0), yy) < 1e-5
    r = base + rms(y.get().astype(np.float64).sum(0), w_post, eps)
    assert rel(resid.get(), r) < 1e-6 and rel(out.get(), rms(r, w_in, eps)) < 1e-6
    assert int(counter.get()[0]) == 0  # reset for the next replay
    first = (resid.get(), out.get())
    launch()
    assert np.array_equal(resid.get(), first[0]) and np.array_equal(out.get(), first[1])
    # new inputs, same launch: the last block must read this launch's parts (no line of the last one's kept)
    x2 = rng.standard_normal(k).astype(np.float32)
    keep[1].set(x2)
    launch()
    r2 = base + rms((W.astype(np.float64) @ x2), w_post, eps)
    assert rel(resid.get(), r2) < 1e-5 and rel(out.get(), rms(r2, w_in, eps)) < 1e-5


@pytest.mark.parametrize("nv,rpw,epi,pf", [(5, 1, K.EPI_PLAIN, 1), (5, 2, K.EPI_GELU, 0), (5, 2, K.EPI_GELU, 1),
                                           (4, 1, K.EPI_PLAIN, 2)])
def test_plain_vector_instantiation_equals_folding_one(nv, rpw, epi, pf):
    """gemv<..,0> (no fold code) computes what gemv<..> computes from a plain vector, bit for bit."""
    rng = np.random.default_rng(nv * 10 + rpw + pf)
    k = 1152 if nv == 5 else 1024
    n = 700
    W = cupy.asarray((rng.standard_normal(((2 if epi == K.EPI_GELU else 1) * n, k)) * 0.05).astype(np.float16))
    x = cupy.asarray(rng.standard_normal(k).astype(np.float32))
    fns = K.compile_module({(nv, rpw, epi, pf, True), (nv, rpw, epi, pf, False)}, set())
    outs = []
    for fold in (True, False):
        y = poisoned(n)
        launch = K.gemv(fns, "t", W, n, k, epi=epi, y=y, src=x, warps=8, rpw=rpw, prefetch_weights=pf,
                        plain_kernel=not fold)
        launch()
        outs.append(y.get())
    assert np.isfinite(outs[0]).all() and np.array_equal(outs[0], outs[1])


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("fold")
    return {layout: build_fixture(preset("tiny", dtype="fp16", layout=layout), root / layout)
            for layout in ("unfused", "fused-cuda")}


def _run(folder, shapes, steps=64):
    pipe = vlmdecode.load(folder, "cuda", "native", shapes=shapes)
    _, x = pipe.prepare("Describe the image.", demo_image(32))
    return _native_run(pipe, x, steps)


CONSUMER = dict(fold="consumer", gate_up=(8, 2, 0))  # the default until h200_native_fold.json


@pytest.mark.parametrize("layout,gate_up", [("unfused", (8, 2, 0)), ("fused-cuda", (8, 2, 0)),
                                            ("fused-cuda", K.Shapes().gate_up)])
def test_native_producer_fold_follows_consumer(folders, layout, gate_up):
    assert K.Shapes().fold == "producer"
    want, wl = _run(folders[layout], K.Shapes(**CONSUMER))
    got, gl = _run(folders[layout], K.Shapes(fold="producer", gate_up=gate_up))
    assert got == want
    for i in range(1, len(want)):
        assert np.abs(wl[i] - gl[i]).max() <= 1e-2 * max(1.0, np.abs(wl[i]).max()), f"step {i}"


def test_native_producer_fold_pdl_equals_plain(folders):
    runs = [_run(folders["fused-cuda"], K.Shapes(pdl=pdl), 40) for pdl in (True, False)]
    assert runs[0][0] == runs[1][0]
    assert all(np.array_equal(a, b) for a, b in zip(runs[0][1][1:], runs[1][1][1:]))
