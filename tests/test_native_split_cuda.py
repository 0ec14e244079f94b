"""gemv_split on a GPU (`pytest -m cuda tests/test_native_split_cuda.py`; skipped without one): gate|up with the
vector formed by half the warps while the other half's first rows are in flight (PF 3), against float64 numpy and
against gemv's PF 0 (the same rows; the fold's sums over half the threads may round differently), then the tiny step
with gate|up at PF 3 against the default step (40 steps: tokens equal, logits within fp16 rounding)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from cuda_gate import require_cuda

pytestmark = pytest.mark.cuda

cupy, ort = require_cuda()

import vlmdecode  # noqa: E402
from vlmdecode.fixture import build_fixture, preset  # noqa: E402
from vlmdecode.native import kernels as K  # noqa: E402
from vlmdecode.native.shapes import Shapes  # noqa: E402
from vlmdecode.processor import demo_image  # noqa: E402
from vlmdecode.sampling import Sampler, SamplingParams  # noqa: E402


def rms(x, w, eps):
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.mean(x * x) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize("H,I,warps,rpw", [(1152, 6912, 8, 2), (1152, 700, 8, 4), (1536, 24000, 8, 2),
                                           (64, 128, 4, 2), (64, 128, 8, 2), (200, 1040, 2, 2)])
def test_gemv_split_gate_up(H, I, warps, rpw):
    rng = np.random.default_rng(H + I + rpw)
    eps = 1e-6
    W = (rng.standard_normal((2 * I, H)) * 0.05).astype(np.float16)
    resid, o = rng.standard_normal(H).astype(np.float32), rng.standard_normal(H).astype(np.float32)
    w_post, w_in = (rng.uniform(0.5, 2.0, H).astype(np.float32) for _ in range(2))
    nv = K.loads_per_lane(H)
    fns = K.compile_module({(nv, rpw, K.EPI_GELU, 3), (nv, rpw, K.EPI_GELU, 0)}, set())
    got = {}
    for pf in (3, 0):
        m, out = cupy.full(I, np.nan, cupy.float32), cupy.full(H, np.nan, cupy.float32)
        K.gemv(fns, "t", cupy.asarray(W), I, H, epi=K.EPI_GELU, y=m, src=cupy.asarray(resid), delta=cupy.asarray(o),
               delta_w=cupy.asarray(w_post), resid_out=out, norm_w=cupy.asarray(w_in), eps=eps, warps=warps,
               rpw=rpw, prefetch_weights=pf)()
        got[pf] = (m.get(), out.get())
    r = resid + rms(o, w_post, eps)
    gu = W.astype(np.float64) @ rms(r, w_in, eps)
    want = gelu_tanh(gu[:I]) * gu[I:]
    for pf in (3, 0):
        m, out = got[pf]
        assert np.linalg.norm(out - r) / np.linalg.norm(r) < 1e-6
        assert np.linalg.norm(m - want) / np.linalg.norm(want) < 1e-5
    assert np.allclose(got[3][0], got[0][0], rtol=1e-5, atol=1e-6)


def test_gemv_split_refusals():
    fns = K.compile_module({(1, 2, K.EPI_GELU, 3)}, set())
    z = cupy.zeros(64, cupy.float32)
    with pytest.raises(K.KernelShapeError, match="half the warps"):
        K.gemv(fns, "t", cupy.zeros((16, 64), cupy.float16), 8, 64, epi=K.EPI_GELU, y=z, src=z, norm_w=z, warps=3,
               rpw=2, prefetch_weights=3)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_fixture(preset("tiny", dtype="fp16", layout="fused"), tmp_path_factory.mktemp("split") / "fused16")


def _run(pipe, steps):
    dec = pipe.decoder
    _, x = pipe.prepare("Describe the image.", demo_image(32))
    toks, logits = [], []
    with dec.loop_order(lookahead=False):
        for tok in dec.generate(x, steps, Sampler(SamplingParams())):
            toks.append(tok)
            logits.append(dec.logits.get().astype(np.float64))
    return toks, logits


def test_native_step_with_split_gate_up_follows_default(folder):
    base = Shapes.for_head_dim(preset("tiny").head_dim)
    runs = {pf: _run(vlmdecode.load(folder, "cuda", "native", shapes=replace(base, gate_up=(8, 2, pf))), 40)
            for pf in (0, 3)}
    assert runs[3][0] == runs[0][0]
    worst = max(float(np.abs(a - b).max() / max(1.0, np.abs(b).max())) for a, b in zip(runs[3][1], runs[0][1]))
    assert worst < 4e-3, f"logits differ by {worst:.2e} of their scale"
