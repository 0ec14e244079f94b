"""Native CUDA decoder proofs (`pytest -m cuda tests/test_native_cuda.py`; skipped without a GPU).

Each kernel against a float64 numpy reference on fresh random inputs with its outputs poisoned (NaN)
before the run; then the decoder on the tiny fixture's three fp16 layouts: tokens equal to onnxruntime
CUDA (eager) and logits within fp16 tolerance of the float64 reference at every step of 200, sampling,
counters (one capture, replays), flat device memory over many generations, and refusals.
"""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from cuda_gate import require_cuda
from float64_walk import walk

pytestmark = pytest.mark.cuda

cupy, ort = require_cuda()

import vlmdecode  # noqa: E402
from vlmdecode.fixture import build_fixture, preset  # noqa: E402
from vlmdecode.native import bounded_head as BH  # noqa: E402
from vlmdecode.native import kernels as K  # noqa: E402
from vlmdecode.native.plan import PlanError  # noqa: E402
from vlmdecode.native.shapes import MAX_AUTO_CLUSTERS, Shapes  # noqa: E402
from vlmdecode.processor import demo_image  # noqa: E402
from vlmdecode.sampling import Sampler, SamplingParams  # noqa: E402

PROMPT = "Describe the image."
STEPS = 200
LAYOUTS = {"fp16": "unfused", "fused16": "fused", "fusedcuda16": "fused-cuda"}


# ---- float64 references -------------------------------------------------------------------------
def rms(x, w, eps):
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def rel(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert np.isfinite(got).all(), "non-finite output (an element was not written?)"
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def poisoned(shape, dtype=np.float32):
    return cupy.full(shape, np.nan, dtype)


def _fns(gemvs=(), heads=()):
    return K.compile_module(set(gemvs), set(heads))


# ---- GEMV ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("rows,k,splits", [(1536, 1152, 1), (1152, 1024, 1), (37, 200, 1), (1152, 6912, 6),
                                           (64, 384, 3)])
@pytest.mark.parametrize("warps,rpw", [(4, 2), (8, 1), (8, 4)])
def test_gemv_plain_and_split_k(rows, k, splits, warps, rpw):
    rng = np.random.default_rng(rows * 31 + k + warps)
    W = rng.standard_normal((rows, k)).astype(np.float16)
    x = rng.standard_normal(k).astype(np.float32)
    fns = _fns({(K.loads_per_lane(k // splits), rpw, K.EPI_PLAIN)})
    y = poisoned((splits, rows))
    K.gemv(fns, "t", cupy.asarray(W), rows, k // splits, splits=splits, y=y, src=cupy.asarray(x), warps=warps,
           rpw=rpw)()
    assert rel(y.get().sum(0), W.astype(np.float64) @ x) < 1e-5


@pytest.mark.parametrize("warps", [4, 2])  # 4: the register fold (1152 <= 12 x 128 threads); 2: the looped one
@pytest.mark.parametrize("pf", [1, 0, 2])
@pytest.mark.parametrize("first", [True, False])
def test_gemv_fold_prologue(first, warps, pf):
    """r = resid + rms(sum of delta partials) * w_post (or x_in * scale), resid_out = r, y = W rms(r) * w_in."""
    rng = np.random.default_rng(7 + first)
    H, rows, parts, eps = 1152, 200, 6, 1e-6
    W = rng.standard_normal((rows, H)).astype(np.float16)
    resid = rng.standard_normal(H).astype(np.float32)
    x_in = rng.standard_normal(H).astype(np.float16)
    delta = rng.standard_normal((parts, H)).astype(np.float32)
    w_post, w_in = (rng.uniform(0.5, 2.0, H).astype(np.float32) for _ in range(2))
    fns = _fns({(K.loads_per_lane(H), 2, K.EPI_PLAIN, pf)})
    y, out = poisoned(rows), poisoned(H)
    K.gemv(fns, "t", cupy.asarray(W), rows, H, y=y, src=None if first else cupy.asarray(resid),
           x_in=cupy.asarray(x_in), x_scale=3.0, delta=None if first else cupy.asarray(delta), delta_parts=parts,
           delta_w=cupy.asarray(w_post), resid_out=out, norm_w=cupy.asarray(w_in), eps=eps, warps=warps,
           prefetch_weights=pf)()
    r = x_in.astype(np.float64) * 3.0 if first else resid + rms(delta.astype(np.float64).sum(0), w_post, eps)
    assert rel(out.get(), r) < 1e-6
    assert rel(y.get(), W.astype(np.float64) @ rms(r, w_in, eps)) < 1e-5


@pytest.mark.parametrize("warps,rpw,pf", [(4, 2, 1), (8, 4, 1), (8, 2, 0), (8, 2, 2), (4, 4, 2)])  # pf: gemv_name
def test_gemv_gate_up_gelu(warps, rpw, pf):
    rng = np.random.default_rng(11 + rpw)
    H, I, eps = 1152, 700, 1e-6
    W = (rng.standard_normal((2 * I, H)) * 0.05).astype(np.float16)  # gate rows, then up rows
    resid, o = rng.standard_normal(H).astype(np.float32), rng.standard_normal(H).astype(np.float32)
    w_post, w_in = (rng.uniform(0.5, 2.0, H).astype(np.float32) for _ in range(2))
    fns = _fns({(K.loads_per_lane(H), rpw, K.EPI_GELU, pf)})
    m, out = poisoned(I), poisoned(H)
    K.gemv(fns, "t", cupy.asarray(W), I, H, epi=K.EPI_GELU, y=m, src=cupy.asarray(resid), delta=cupy.asarray(o),
           delta_w=cupy.asarray(w_post), resid_out=out, norm_w=cupy.asarray(w_in), eps=eps, warps=warps, rpw=rpw,
           prefetch_weights=pf)()
    r = resid + rms(o, w_post, eps)
    gu = W.astype(np.float64) @ rms(r, w_in, eps)
    assert rel(out.get(), r) < 1e-6
    assert rel(m.get(), gelu_tanh(gu[:I]) * gu[I:]) < 1e-5


@pytest.mark.parametrize("H,I", [(1152, 6912), (64, 128), (1152, 700)])
@pytest.mark.parametrize("R,warps,mb", [(4, 8, 4), (8, 8, 0), (2, 8, 0), (16, 8, 0)])
def test_gemv_tiled_gate_up(H, I, R, warps, mb):
    """gemv_tiled over the tiled copy (`native.tiled_gemv`): gate|up's fold and gelu(gate) * up against float64,
    the residual it stores the same bits as gemv PF 1's (the same fold in fewer slots)."""
    from vlmdecode.native import tiled_gemv as TG

    try:
        TG.check(I, H, R, warps)
    except K.KernelShapeError:
        pytest.skip(f"{I} x {H} does not tile by R = {R}")
    rng = np.random.default_rng(H + I + R)
    W = (rng.standard_normal((2 * I, H)) * 0.05).astype(np.float16)
    resid, o = rng.standard_normal(H).astype(np.float32), rng.standard_normal(H).astype(np.float32)
    w_post, w_in = (rng.uniform(0.5, 2.0, H).astype(np.float32) for _ in range(2))
    fns = K.compile_module({(K.loads_per_lane(H), 2, K.EPI_GELU, 1)}, set(), (), (TG.name(H, R, warps, mb),))
    fold = dict(src=cupy.asarray(resid), delta=cupy.asarray(o), delta_w=cupy.asarray(w_post),
                norm_w=cupy.asarray(w_in), eps=1e-6)
    m, out, m1, out1 = poisoned(I), poisoned(H), poisoned(I), poisoned(H)
    TG.launch(fns, "t", cupy.asarray(TG.layout(W, R)), I, H, y=m, resid_out=out, R=R, warps=warps, mb=mb, **fold)()
    K.gemv(fns, "t", cupy.asarray(W), I, H, epi=K.EPI_GELU, y=m1, resid_out=out1, warps=8, rpw=2, **fold)()
    r = resid + rms(o, w_post, 1e-6)
    gu = W.astype(np.float64) @ rms(r, w_in, 1e-6)
    assert np.array_equal(out.get(), out1.get()) and rel(out.get(), r) < 1e-6
    assert rel(m.get(), gelu_tanh(gu[:I]) * gu[I:]) < 1e-5


@pytest.mark.parametrize("H,I,splits", [(1152, 6912, 8), (64, 256, 2), (1152, 864, 1)])
@pytest.mark.parametrize("R,warps", [(16, 8), (8, 4), (32, 8)])
def test_gemv_tiled_down_slices(H, I, splits, R, warps):
    """gemv_tiled EPI_PLAIN over down's tiled slices (`tiled_gemv.layout_slices`): every slice's partial sums
    against float64, the grid's y its slices (as gemv's split-K stores them)."""
    from vlmdecode.native import tiled_gemv as TG

    k = I // splits
    try:
        TG.check_slices(H, k, R, warps)
    except K.KernelShapeError:
        pytest.skip(f"{H} rows x slices of {k} do not tile by R = {R}")
    rng = np.random.default_rng(H + I + R + warps)
    W = (rng.standard_normal((H, I)) * 0.05).astype(np.float16)
    m = rng.standard_normal(I).astype(np.float32)
    fns = K.compile_module(set(), set(), (), (TG.name(k, R, warps, 0, K.EPI_PLAIN),))
    y = poisoned((splits, H))
    L = TG.launch_slices(fns, "t", cupy.asarray(TG.layout_slices(W, R, splits)), H, k, splits, y=y,
                         src=cupy.asarray(m), R=R, warps=warps)
    assert L.grid[1] == splits
    L()
    ref = (W.astype(np.float64).reshape(H, splits, k) * m.astype(np.float64).reshape(1, splits, k)).sum(-1).T
    assert rel(y.get(), ref) < 1e-5


@pytest.mark.parametrize("parts", [8, 1, 0])
@pytest.mark.parametrize("R,warps", [(16, 16), (16, 8), (8, 16)])
def test_gemv_tiled_qkv_fold(parts, R, warps):
    """gemv_tiled EPI_FOLD over qkv's one-slice tiled copy at gemma3-1b's shapes: the fold of the residual and the
    previous layer's split-K down partials (parts 0: the first layer's embedding x_in times its scale), its RMSNorm,
    the plain rows, against float64; the residual it stores against float64 too (one float4 slot a thread from 16
    warps: its block sums run over other threads than gemv's, so its bits may differ from gemv's)."""
    from vlmdecode.native import tiled_gemv as TG

    H, n, eps, scale = 1152, 1536, 1e-6, 33.9
    rng = np.random.default_rng(parts + R + warps)
    W = (rng.standard_normal((n, H)) * 0.05).astype(np.float16)
    resid = rng.standard_normal(H).astype(np.float32)
    x_in = rng.standard_normal(H).astype(np.float16)
    d = rng.standard_normal((max(parts, 1), H)).astype(np.float32)
    w_post, w_in = (rng.uniform(0.5, 2.0, H).astype(np.float32) for _ in range(2))
    fns = K.compile_module(set(), set(), (), (TG.name(H, R, warps, 0, K.EPI_FOLD),))
    if parts:
        fold = dict(src=cupy.asarray(resid), delta=cupy.asarray(d), delta_parts=parts, delta_w=cupy.asarray(w_post))
        r = resid.astype(np.float64) + rms(d.astype(np.float64).sum(0), w_post, eps)
    else:
        fold = dict(src=None, x_in=cupy.asarray(x_in), x_scale=scale)
        r = x_in.astype(np.float64) * scale
    y, out = poisoned(n), poisoned(H)
    L = TG.launch(fns, "t", cupy.asarray(TG.layout_slices(W, R, 1)), n, H, y=y, resid_out=out,
                  norm_w=cupy.asarray(w_in), eps=eps, R=R, warps=warps, epi=K.EPI_FOLD, **fold)
    assert L.grid[0] <= n // R and L.grid[1:] == (1, 1) and L.block == (32 * warps, 1, 1)
    L()
    assert rel(out.get(), r) < 1e-6
    assert rel(y.get(), W.astype(np.float64) @ rms(r, w_in, eps)) < 1e-5


@pytest.mark.parametrize("field,tiled,launch,rows", [("gate_up_tiled", (4, 8, 4), ".gate_up", "gemv_split"),
                                                     ("down_tiled", (16, 8, 0), ".down", "gemv"),
                                                     ("o_tiled", (8, 8, 0), ".o", "gemv"),
                                                     ("o_tiled", (16, 8, 0), ".o", "gemv"),
                                                     ("qkv_tiled", (16, 16, 0), ".qkv", "gemv")])
def test_native_tiled_gemv_follows_the_default_step(folders, image, field, tiled, launch, rows):
    """Shapes.gate_up_tiled / down_tiled / o_tiled / qkv_tiled in the captured step: the row-major step's tokens over
    40 steps, logits within fp16 rounding of its (the dot sums in another order)."""
    runs = {}
    for t in ((), tiled):
        pipe = vlmdecode.load(folders["fused16"], "cuda", "native", shapes=Shapes(**{field: t}))
        names = {id(f): n for mod in K._modules.values() for n, f in mod.items()}
        assert {names[id(L.fn)].split("<")[0] for L in pipe.decoder.body if L.name.endswith(launch)} == (
            {"gemv_tiled"} if t else {rows})
        _, x = pipe.prepare(PROMPT, image)
        runs[t] = _native_run(pipe, x, 40)
    assert runs[()][0] == runs[tiled][0]
    worst = max(np.abs(a - b).max() / np.abs(b).max() for a, b in zip(runs[tiled][1][1:], runs[()][1][1:]))
    assert worst < 1e-2, worst


@pytest.mark.parametrize("blocks", [288, 216, 5])
def test_gemv_capped_grids_stride_over_every_row_group(blocks):
    """A step GEMV's grid capped by its shape's fourth element (max_blocks): gemma3-1b's gate|up as the step runs it
    (gemv_split, PF 3, 864 row groups: 288 blocks take 3 each) and down's split-K slices (PF 2), against numpy."""
    rng = np.random.default_rng(blocks)
    H, I, eps, splits = 1152, 6912, 1e-6, 8
    W = (rng.standard_normal((2 * I, H)) * 0.05).astype(np.float16)
    resid, o = rng.standard_normal(H).astype(np.float32), rng.standard_normal(H).astype(np.float32)
    w_post, w_in = (rng.uniform(0.5, 2.0, H).astype(np.float32) for _ in range(2))
    Wd = (rng.standard_normal((H, I)) * 0.05).astype(np.float16)
    fns = _fns({(K.loads_per_lane(H), 2, K.EPI_GELU, 3), (K.loads_per_lane(I // splits), 1, K.EPI_PLAIN, 2)})
    m, out, y = poisoned(I), poisoned(H), poisoned((splits, H))
    # the device copies, referenced here (since a99b6e4 each Launch holds the arrays behind its addresses too)
    dev = {k: cupy.asarray(v) for k, v in dict(W=W, Wd=Wd, resid=resid, o=o, w_post=w_post, w_in=w_in).items()}
    gu = K.gemv(fns, "gu", dev["W"], I, H, epi=K.EPI_GELU, y=m, src=dev["resid"], delta=dev["o"],
                delta_w=dev["w_post"], resid_out=out, norm_w=dev["w_in"], eps=eps, warps=8, rpw=2, prefetch_weights=3,
                max_blocks=blocks)
    dn = K.gemv(fns, "down", dev["Wd"], H, I // splits, splits=splits, y=y, src=m, warps=4, rpw=1,
                prefetch_weights=2, max_blocks=blocks)
    free = K.gemv(fns, "down", dev["Wd"], H, I // splits, splits=splits, y=y, src=m, warps=4, rpw=1,
                  prefetch_weights=2)  # the resident grid, shared by the slices
    assert gu.grid[0] == blocks and dn.grid[:2] == (min(blocks, free.grid[0]), splits)
    gu()
    dn()
    r = resid + rms(o, w_post, eps)
    g = W.astype(np.float64) @ rms(r, w_in, eps)
    ref = gelu_tanh(g[:I]) * g[I:]
    assert rel(out.get(), r) < 1e-6 and rel(m.get(), ref) < 1e-5
    assert rel(y.get().sum(0), Wd.astype(np.float64) @ m.get().astype(np.float64)) < 1e-5


@pytest.mark.parametrize("epi,rows", [(K.EPI_PLAIN, 50001), (K.EPI_GELU, 24000)])
def test_gemv_double_buffered_over_many_groups(epi, rows):
    """PF 2 (the next row group in flight while this one is reduced) where every block strides over many groups."""
    rng = np.random.default_rng(rows)
    H = 1152
    total = 2 * rows if epi == K.EPI_GELU else rows
    W = (rng.standard_normal((total, H)) * 0.05).astype(np.float16)
    x = rng.standard_normal(H).astype(np.float32)
    fns = _fns({(K.loads_per_lane(H), 2, epi, 2)})
    y = poisoned(rows)
    launch = K.gemv(fns, "t", cupy.asarray(W), rows, H, epi=epi, y=y, src=cupy.asarray(x), warps=8, rpw=2,
                    prefetch_weights=2)
    assert launch.grid[0] * 3 < -(-rows // (8 if epi == K.EPI_GELU else 16))  # >= 3 groups a block
    launch()
    ref = W.astype(np.float64) @ x
    assert rel(y.get(), gelu_tanh(ref[:rows]) * ref[rows:] if epi == K.EPI_GELU else ref) < 1e-5


def _head(V, H, W, resid, softcap=None, warps=8, rpw=4, suppress=(), pf=1):
    fns = _fns({(K.loads_per_lane(H), rpw, K.EPI_HEAD, pf)})
    logits = poisoned(V, np.float16)
    part_v, part_i = poisoned(K.HEAD_MAX_BLOCKS), cupy.full(K.HEAD_MAX_BLOCKS, -5, cupy.int64)
    ones = cupy.ones(H, cupy.float32)
    sup = cupy.asarray(list(suppress) + [0], cupy.int64)
    launch = K.gemv(fns, "head", cupy.asarray(W), V, H, epi=K.EPI_HEAD, src=cupy.asarray(resid), norm_w=ones,
                    logits=logits, softcap=softcap, part_v=part_v, part_i=part_i, warps=warps, rpw=rpw,
                    prefetch_weights=pf, suppress=sup, n_suppress=cupy.asarray([len(suppress)], cupy.int32))
    launch()
    nb = launch.grid[0]
    ring, n, pos, t = (cupy.zeros(1, cupy.int64) for _ in range(4))
    K.advance(fns, part_v, part_i, nb, table=None, hidden=0, x_out=None, ring=ring, n_dev=n, pos=pos, t_dev=t)()
    assert (part_i[:nb].get() >= 0).all(), "a head block did not write its partial"
    return logits.get(), int(ring.get()[0])


@pytest.mark.parametrize("V,softcap,warps,rpw,pf", [(262144, None, 8, 4, 1), (320, 30.0, 8, 4, 1),
                                                     (50001, 2.0, 8, 4, 1), (262144, None, 4, 2, 1),
                                                     (50001, None, 8, 1, 1), (262144, None, 8, 2, 2),
                                                     (50001, 2.0, 8, 1, 2)])
def test_lm_head_logits_and_argmax(V, softcap, warps, rpw, pf):
    rng = np.random.default_rng(V + rpw)
    H = 1152 if V > 1000 else 64
    W = (rng.standard_normal((V, H)) * 0.1).astype(np.float16)
    resid = rng.standard_normal(H).astype(np.float32)
    logits, tok = _head(V, H, W, resid, softcap, warps, rpw, pf=pf)
    ref = W.astype(np.float64) @ rms(resid, 1.0, 1e-6)
    if softcap:
        ref = softcap * np.tanh(ref / softcap)
    assert rel(logits, ref) < 1e-3
    assert tok == int(np.argmax(logits.astype(np.float32)))  # first max of the stored fp16 logits


def _tied_head():
    """A random head whose rows 4242, 77777 and 99990 are equal and give the largest logits."""
    rng = np.random.default_rng(3)
    V, H = 100000, 64
    W = (rng.standard_normal((V, H)) * 0.1).astype(np.float16)
    resid = rng.standard_normal(H).astype(np.float32)
    W[[99990, 4242, 77777]] = (rms(resid, 1.0, 1e-6) * 2).astype(np.float16)
    return V, H, W, resid


def test_lm_head_ties_and_non_finite():
    V, H, W, resid = _tied_head()
    logits, tok = _head(V, H, W, resid)
    assert logits[4242] == logits[99990] == logits[77777] == logits.max()
    assert tok == 4242
    assert _head(V, H, W, resid, suppress=(4242, 5))[1] == 77777  # suppressed: never picked
    assert _head(V, H, W, resid, suppress=(4242, 77777, 99990))[1] == int(np.argsort(-logits.astype(np.float32),
                                                                                     kind="stable")[3])
    W[123] = np.nan
    assert _head(V, H, W, resid)[1] == -1
    assert _head(V, H, W, resid, suppress=(123,))[1] == 4242  # a suppressed id is not checked either
    W[123] = 0
    W[9] = 60000  # overflows fp16: +inf logit
    assert _head(V, H, W, resid)[1] == -1


def _bounded(V, H, W, resid, softcap=None, suppress=(), bits=8):
    """The bounded head's two launches (native.bounded_head) + advance: (token, the winner's value, candidates)."""
    nv = K.loads_per_lane(H)
    fns = K.compile_module(set(), set(), (), BH.names(H, nv, bits=bits))
    Wd = cupy.asarray(W)
    table = BH.quantise(Wd, bits=bits)
    part_v, part_i = poisoned(K.HEAD_MAX_BLOCKS), cupy.full(K.HEAD_MAX_BLOCKS, -5, cupy.int64)
    xvec, upper, low = poisoned(H), poisoned(V), poisoned(K.HEAD_MAX_BLOCKS)
    sup = cupy.asarray(list(suppress) + [0], cupy.int64)
    bound, pick = BH.launches(fns, table, Wd, V, H, nv, 256, src=cupy.asarray(resid), delta=None, delta_parts=1,
                              delta_w=None, norm_w=cupy.ones(H, cupy.float32), eps=1e-6, softcap=softcap, xvec=xvec,
                              upper=upper, low=low, part_v=part_v, part_i=part_i, suppress=sup,
                              n_suppress=cupy.asarray([len(suppress)], cupy.int32))
    bound()
    pick()
    nb = pick.grid[0]
    ring, n, pos, t = (cupy.zeros(1, cupy.int64) for _ in range(4))
    K.advance(fns, part_v, part_i, nb, table=None, hidden=0, x_out=None, ring=ring, n_dev=n, pos=pos, t_dev=t)()
    assert not np.isnan(upper.get()).any() or not np.isfinite(W).all(), "head_bound left a row's bound unwritten"
    pv, pi = part_v[:nb].get(), part_i[:nb].get()
    assert (pi != -5).all(), "a head_pick block did not write its partial"
    x = xvec.get().astype(np.float32)
    assert np.array_equal(x, rms(resid, 1.0, 1e-6).astype(np.float32)) or rel(x, rms(resid, 1.0, 1e-6)) < 1e-6
    return int(ring.get()[0]), pv, BH.reference_pick(BH.BoundTable(table.q.get(), table.sc.get(), bits), W, x,
                                                     softcap, suppress)


@pytest.mark.parametrize("bits", BH.BITS)
@pytest.mark.parametrize("V,H,softcap", [(262144, 1152, None), (262144, 1152, 30.0), (50001, 64, 2.0),
                                         (320, 64, 30.0), (4099, 1536, None)])
def test_bounded_head_picks_the_full_heads_token(V, H, softcap, bits):
    """head_bound + head_pick: the full head's token and winning value (the same bits: head_pick computes a
    candidate as gemv's EPI_HEAD does, from the same vector), the numpy reference's token, a handful of candidates."""
    rng = np.random.default_rng(V + H)
    W = (rng.standard_normal((V, H)) * 0.05).astype(np.float16)
    for trial in range(3):
        resid = rng.standard_normal(H).astype(np.float32)
        resid[rng.integers(0, H, 2)] *= 40  # outliers
        logits, want = _head(V, H, W, resid, softcap, warps=8, rpw=2, pf=0)  # the decoder's head shape
        tok, pv, (ref_tok, n_cand) = _bounded(V, H, W, resid, softcap, bits=bits)
        assert tok == want == ref_tok, trial
        assert np.float32(logits[want]) == np.nanmax(pv)  # the winner's fp16 logit, bit for bit
        assert n_cand < (64 if bits == 8 else V / 3 + 64)  # 6 bits: 4.3k of 262144, 1.1k of 4099 (numpy, these seeds)


@pytest.mark.parametrize("bits", BH.BITS)
def test_bounded_head_ties_suppression_and_non_finite(bits):
    V, H, W, resid = _tied_head()
    for sup in ((), (4242, 5), (4242, 77777, 99990)):
        assert _bounded(V, H, W, resid, suppress=sup, bits=bits)[0] == _head(V, H, W, resid, suppress=sup)[1]
    W[123] = np.nan
    assert _bounded(V, H, W, resid, bits=bits)[0] == -1
    assert _bounded(V, H, W, resid, suppress=(123,), bits=bits)[0] == 4242
    W[123] = 0
    W[9] = 60000 * np.sign(rms(resid, 1.0, 1e-6))  # overflows fp16: +inf logit
    assert _bounded(V, H, W, resid, bits=bits)[0] == _head(V, H, W, resid)[1] == -1


# ---- attention ----------------------------------------------------------------------------------
def ref_attention(qkv, nq, nkv, D, qn, kn, eps, cos, sin, t, Kc, Vc, window, scale, softcap):
    q = qkv[: nq * D].reshape(nq, D).astype(np.float64)
    k = qkv[nq * D: (nq + nkv) * D].reshape(nkv, D).astype(np.float64)
    v = qkv[(nq + nkv) * D:].reshape(nkv, D)
    if qn is not None:
        q, k = rms(q, qn, eps), rms(k, kn, eps)

    def rot(x):
        a, b = x[:, : D // 2], x[:, D // 2:]
        return np.concatenate([a * cos[t] - b * sin[t], b * cos[t] + a * sin[t]], axis=1)

    q, k = rot(q), rot(k).astype(np.float16)
    Kc, Vc = Kc.copy(), Vc.copy()
    Kc[:, t], Vc[:, t] = k, v.astype(np.float16)
    lo = 0 if window is None else max(0, t - window + 1)
    out = np.zeros((nq, D))
    for h in range(nq):
        g = h // (nq // nkv)
        s = Kc[g, lo: t + 1].astype(np.float64) @ q[h] * scale
        if softcap:
            s = softcap * np.tanh(s / softcap)
        p = np.exp(s - s.max())
        out[h] = p @ Vc[g, lo: t + 1].astype(np.float64) / p.sum()
    return out.reshape(-1), Kc, Vc


# plain: `size` keys a block; cl: (keys a batch, blocks a cluster, clusters a KV head or 0 for one batch a
# sub-group at the capacity)
@pytest.mark.parametrize("kernel,threads,size", [("plain", 128, 16), ("plain", 256, 64), ("cl", 256, (8, 8, 0)),
                                                 ("cl", 128, (4, 8, 1)), ("cl", 256, (8, 4, 2)),
                                                 ("cl", 64, (1, 1, 0)), ("cl", 256, (4, 2, 3)),
                                                 ("cl", 256, (4, 16, 1)), ("cl", 512, (1, 16, 1))])
@pytest.mark.parametrize("D,nq,nkv", [(256, 4, 1), (16, 4, 2), (64, 8, 2), (128, 6, 2)])
@pytest.mark.parametrize("t,window,softcap", [(0, None, None), (5, 16, None), (16, 16, 5.0), (17, 16, None),
                                              (200, None, None), (300, 7, None), (1071, 512, None),
                                              (1071, None, 50.0)])
def test_attention_norm_rotary_append_window(D, nq, nkv, t, window, softcap, kernel, threads, size):
    rng = np.random.default_rng(D * 1000 + t)
    cap, eps, scale, max_pos = 1072, 1e-6, D**-0.5, 1100
    qkv = rng.standard_normal((nq + 2 * nkv) * D).astype(np.float32)
    qn, kn = (rng.uniform(0.5, 1.5, D).astype(np.float32) for _ in range(2))
    ang = np.arange(max_pos)[:, None] * rng.uniform(0.001, 1.0, D // 2)[None]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    Kc = rng.standard_normal((nkv, cap, D)).astype(np.float16)
    Vc = rng.standard_normal((nkv, cap, D)).astype(np.float16)
    cl = size if kernel == "cl" else (0, 8, 0)
    chunk = 16 if cl[0] else size
    fns = K.compile_module(set(), {D}, {(D, nq // nkv, cl[0], cl[1], threads // 32)} if cl[0] else ())
    splits = max(K.attention_splits(cap, window, chunk), K.cluster_splits(cap, window, D, threads, *cl) if cl[0] else 1)
    dK, dV = cupy.asarray(Kc[None]), cupy.asarray(Vc[None])
    out, counter = poisoned(nq * D), cupy.zeros(nkv, cupy.int32)
    launch = K.attention(fns, "attn", cupy.asarray(qkv), nq, nkv, D, q_norm=cupy.asarray(qn), k_norm=cupy.asarray(kn),
                         eps=eps, rope_cos=cupy.asarray(cos), rope_sin=cupy.asarray(sin),
                         pos=cupy.asarray([t], cupy.int64), K=dK, V=dV, window=window, scale=scale, softcap=softcap,
                         part=poisoned(nq * splits * (D + 2)), counter=counter, out=out, chunk=chunk,
                         threads=threads, batch=cl[0], cluster=cl[1], clusters=cl[2])
    ref, rK, rV = ref_attention(qkv, nq, nkv, D, qn, kn, eps, cos, sin, t, Kc, Vc, window, scale, softcap)
    for run in range(2):  # the second launch proves the combine counter was reset
        launch()
        assert rel(out.get(), ref) < 2e-3, f"run {run}"
        assert (counter.get() == 0).all()
        out.fill(np.nan)
    got_K, got_V = dK.get()[0], dV.get()[0]
    assert np.abs(got_K[:, t].astype(np.float64) - rK[:, t]).max() <= 2e-3 * np.abs(rK[:, t]).max()
    assert np.array_equal(got_V[:, t], rV[:, t])
    others = np.ones(cap, bool)
    others[t] = False
    assert np.array_equal(got_K[:, others], Kc[:, others]) and np.array_equal(got_V[:, others], Vc[:, others])


@pytest.mark.parametrize("D,nq,nkv,cap,cl", [(256, 4, 1, 512, (2, 8, 0)), (256, 4, 1, 512, (8, 8, 1)),
                                              (256, 4, 1, 512, (2, 8, 1)),  # 4 double-buffered batches, wrapped
                                              (64, 8, 2, 16, (4, 2, 0)), (16, 4, 2, 16, (1, 1, 0))])
@pytest.mark.parametrize("t_over", [-1, 0, 1, 37, 3])  # t = cap + t_over (3: t = 3 cap + 3, wrapped 3 times)
def test_attention_cl_ring_buffer(D, nq, nkv, cap, cl, t_over):
    """A windowed layer whose buffer holds exactly its window (capacity == window): position p at row p % cap.
    Same result as the full-length cache, row t % cap appended, every other row untouched."""
    t = 3 * cap + 3 if t_over == 3 else cap + t_over
    window, eps, scale, max_pos, full = cap, 1e-6, D**-0.5, 4 * cap + 8, 4 * cap + 8
    rng = np.random.default_rng(D + t)
    qkv = rng.standard_normal((nq + 2 * nkv) * D).astype(np.float32)
    qn, kn = (rng.uniform(0.5, 1.5, D).astype(np.float32) for _ in range(2))
    ang = np.arange(max_pos)[:, None] * rng.uniform(0.001, 1.0, D // 2)[None]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    Kf = rng.standard_normal((nkv, full, D)).astype(np.float16)  # the full-length cache: position p at row p
    Vf = rng.standard_normal((nkv, full, D)).astype(np.float16)
    Kc, Vc = rng.standard_normal((2, nkv, cap, D)).astype(np.float16)  # the ring: rows of the window's positions
    for p in range(max(0, t - cap + 1), t):
        Kc[:, p % cap], Vc[:, p % cap] = Kf[:, p], Vf[:, p]
    threads = 256 if D == 256 else 128
    fns = K.compile_module(set(), {D}, {(D, nq // nkv, cl[0], cl[1], threads // 32)})
    splits = K.cluster_splits(cap, window, D, threads, *cl)
    dK, dV = cupy.asarray(Kc[None]), cupy.asarray(Vc[None])
    out, counter = poisoned(nq * D), cupy.zeros(nkv, cupy.int32)
    launch = K.attention(fns, "attn", cupy.asarray(qkv), nq, nkv, D, q_norm=cupy.asarray(qn), k_norm=cupy.asarray(kn),
                         eps=eps, rope_cos=cupy.asarray(cos), rope_sin=cupy.asarray(sin),
                         pos=cupy.asarray([t], cupy.int64), K=dK, V=dV, window=window, scale=scale, softcap=None,
                         part=poisoned(nq * splits * (D + 2)), counter=counter, out=out,
                         threads=threads, batch=cl[0], cluster=cl[1], clusters=cl[2])
    launch()
    ref, rK, rV = ref_attention(qkv, nq, nkv, D, qn, kn, eps, cos, sin, t, Kf, Vf, window, scale, None)
    assert rel(out.get(), ref) < 2e-3
    assert (counter.get() == 0).all()
    got_K, got_V = dK.get()[0], dV.get()[0]
    r = t % cap
    assert np.abs(got_K[:, r].astype(np.float64) - rK[:, t]).max() <= 2e-3 * np.abs(rK[:, t]).max()
    assert np.array_equal(got_V[:, r], rV[:, t])
    others = np.ones(cap, bool)
    others[r] = False
    assert np.array_equal(got_K[:, others], Kc[:, others]) and np.array_equal(got_V[:, others], Vc[:, others])


@pytest.mark.parametrize("D,nq,nkv,threads,batch", [(256, 4, 1, 256, 4), (64, 8, 2, 128, 2), (16, 4, 2, 64, 1)])
@pytest.mark.parametrize("window", [None, 150])
def test_attention_cl_live_clusters_follow_the_visible_keys(D, nq, nkv, threads, batch, window):
    """A grid of 4 clusters a KV head with cluster_keys 100: at position t only min(4, (visible - 1) // 100 + 1)
    clusters work, the rest exit at once. One launch over positions whose live count rises and falls (a window caps
    it at 2): every output near float64, the row appended, the combine counter back to 0, and the cross-cluster
    partials written by the live clusters only (none when one is live)."""
    rng = np.random.default_rng(D + (window or 0))
    cap, eps, scale, ckeys = 1072, 1e-6, D**-0.5, 100
    qkv = cupy.asarray(rng.standard_normal((nq + 2 * nkv) * D).astype(np.float32))
    qn, kn = (rng.uniform(0.5, 1.5, D).astype(np.float32) for _ in range(2))
    ang = np.arange(cap)[:, None] * rng.uniform(0.001, 1.0, D // 2)[None]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    Kc = rng.standard_normal((nkv, cap, D)).astype(np.float16)
    Vc = rng.standard_normal((nkv, cap, D)).astype(np.float16)
    fns = K.compile_module(set(), {D}, {(D, nq // nkv, batch, 4, threads // 32)})
    splits = K.cluster_splits(cap, window, D, threads, batch, 4, 4)
    dK, dV, pos, out = cupy.asarray(Kc[None]), cupy.asarray(Vc[None]), cupy.zeros(1, cupy.int64), poisoned(nq * D)
    counter, part = cupy.zeros(nkv, cupy.int32), poisoned(nq * 4 * (D + 2))
    launch = K.attention(fns, "attn", qkv, nq, nkv, D, q_norm=cupy.asarray(qn), k_norm=cupy.asarray(kn), eps=eps,
                         rope_cos=cupy.asarray(cos), rope_sin=cupy.asarray(sin), pos=pos, K=dK, V=dV, window=window,
                         scale=scale, softcap=None, part=part, counter=counter, out=out, threads=threads, batch=batch,
                         cluster=4, clusters=4, cluster_keys=ckeys)
    assert launch.grid[0] == 16 and splits == 16
    for t in (0, 99, 100, 250, 399, 400, 1000, 220, 5, 1071):  # live 1, 1, 2, 3, 4, 4, 4, 3, 1, 4 (window: <= 2)
        pos.fill(t)
        out.fill(np.nan)
        part.fill(np.nan)
        launch()
        # the clusters' partials [nq][4][HD], then (max, sum) [nq][4][2]: written by the live clusters only, and by
        # none when one cluster is live (it writes the output itself). A live cluster whose sub-groups got no key
        # writes max -inf, sum 0 (keys are dealt slot-interleaved over every live sub-group), so written = not NaN
        live = min(4, (t - (0 if window is None else max(0, t - window + 1))) // ckeys + 1)
        p = part.get()
        o, ml = p[: nq * 4 * D].reshape(nq, 4, D), p[nq * 4 * D:].reshape(nq, 4, 2)
        wrote = [bool(not np.isnan(o[:, c]).any() and not np.isnan(ml[:, c]).any()) for c in range(4)]
        assert wrote == [live > 1 and c < live for c in range(4)], f"position {t}: live {live}, wrote {wrote}"
        assert np.isnan(o[:, live:]).all() and np.isnan(ml[:, live:]).all(), f"position {t}"
        if live > 1:  # a written partial is finite, or the empty one: o 0, max -inf, sum 0
            empty = np.isneginf(ml[:, :live, 0])
            assert np.isfinite(o[:, :live]).all() and np.isfinite(ml[:, :live][~empty]).all(), f"position {t}"
            assert (ml[:, :live, 1][empty] == 0).all() and (o[:, :live][empty] == 0).all(), f"position {t}"
        ref, rK, rV = ref_attention(qkv.get(), nq, nkv, D, qn, kn, eps, cos, sin, t, Kc, Vc, window, scale, None)
        assert rel(out.get(), ref) < 2e-3, f"position {t}"
        assert (counter.get() == 0).all(), f"position {t}"
        Kc[:, t], Vc[:, t] = dK.get()[0][:, t], dV.get()[0][:, t]  # the rows as the kernel wrote them
        assert np.array_equal(Vc[:, t], rV[:, t])
        assert np.abs(Kc[:, t].astype(np.float64) - rK[:, t]).max() <= 2e-3 * np.abs(rK[:, t]).max()


@pytest.mark.parametrize("D,nq,nkv", [(16, 4, 2), (256, 4, 1)])
def test_attention_cl_reads_qkv_after_the_previous_kernel_under_pdl(D, nq, nkv):
    """The step's hazard under programmatic dependent launch: a GEMV writes qkv, then attention_cl (launched with
    PDL, as the step runs it) reads it, appends row t and attends; 12 consecutive positions with a fresh qkv
    each. Every output = numpy on the qkv the GEMV wrote (a load of qkv scheduled before the dependency wait
    reads the previous position's: what the first attention_cl did, caught by the decoder tests on the H200)."""
    rng = np.random.default_rng(D)
    H, cap, eps, scale, rows = 64, 64, 1e-6, D**-0.5, (nq + 2 * nkv) * D
    fns = K.compile_module({(K.loads_per_lane(H), 1, K.EPI_PLAIN, 1)}, {D}, {(D, nq // nkv, 8, 16, 4)})
    W = cupy.asarray(K.rows_layout((rng.standard_normal((H, rows)) * 0.3).astype(np.float16)))
    x, qkv = cupy.zeros(H, cupy.float32), poisoned(rows)
    qn, kn = (rng.uniform(0.5, 1.5, D).astype(np.float32) for _ in range(2))
    ang = np.arange(cap)[:, None] * rng.uniform(0.001, 1.0, D // 2)[None]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    Kc = rng.standard_normal((nkv, cap, D)).astype(np.float16)
    Vc = rng.standard_normal((nkv, cap, D)).astype(np.float16)
    dK, dV, pos, out = cupy.asarray(Kc[None]), cupy.asarray(Vc[None]), cupy.zeros(1, cupy.int64), poisoned(nq * D)
    gemv = K.gemv(fns, "qkv", W, rows, H, y=qkv, src=x, warps=8, rpw=1)
    attn = K.attention(fns, "attn", qkv, nq, nkv, D, q_norm=cupy.asarray(qn), k_norm=cupy.asarray(kn), eps=eps,
                       rope_cos=cupy.asarray(cos), rope_sin=cupy.asarray(sin), pos=pos, K=dK, V=dV, window=None,
                       scale=scale, softcap=None, part=poisoned(nq * 16 * (D + 2)),
                       counter=cupy.zeros(nkv, cupy.int32), out=out, threads=128, batch=8, cluster=16, clusters=1)
    gemv.pdl = attn.pdl = True
    for t in range(20, 32):
        x.set(rng.standard_normal(H).astype(np.float32))
        pos.fill(t)
        gemv()
        attn()
        got, q = out.get(), qkv.get()
        ref, rK, Vc = ref_attention(q, nq, nkv, D, qn, kn, eps, cos, sin, t, Kc, Vc, None, scale, None)
        assert rel(got, ref) < 2e-3, f"position {t}"
        assert np.array_equal(dV.get()[0][:, t], Vc[:, t])
        Kc[:, t] = dK.get()[0][:, t]  # the row as the kernel rounded it, for the next positions
        assert np.abs(Kc[:, t].astype(np.float64) - rK[:, t]).max() <= 2e-3 * np.abs(rK[:, t]).max()


def test_drop_module_cache_loads_the_module_afresh():
    """compile_module hands back its module while cached; after drop_module_cache (ours and CuPy's memo) the same
    names come from a module loaded again, and the dropped one, still held, still runs."""
    a = K.compile_module(set(), {16})
    assert K.compile_module(set(), {16}) is a
    held = K.drop_module_cache()
    b = K.compile_module(set(), {16})
    assert any(h is a for h in held) and b is not a
    assert b["advance"].kernel.ptr != a["advance"].kernel.ptr  # a CUfunction of another loaded module
    for fns in (a, b):  # advance with nothing to pick: the position moves on
        pos, t = cupy.zeros(1, cupy.int64), cupy.asarray([3], cupy.int64)
        ring, n = cupy.full(2, -7, cupy.int64), cupy.zeros(1, cupy.int64)
        table, x = cupy.zeros((4, 8), cupy.float16), cupy.zeros(8, cupy.float16)
        K.advance(fns, None, None, 0, table=table, hidden=8, x_out=x, ring=ring, n_dev=n, pos=pos, t_dev=t,
                  given=cupy.asarray([1], cupy.int64))()
        assert int(t.get()[0]) == 4 and int(pos.get()[0]) == 3


def test_advance_given_and_table():
    fns = _fns()
    H, V = 40, 9
    table = cupy.asarray(np.arange(V * H, dtype=np.float16).reshape(V, H))
    x = cupy.full(H, np.nan, cupy.float16)
    ring = cupy.full(3, -7, cupy.int64)
    n, pos, t = cupy.asarray([4], cupy.int64), cupy.zeros(1, cupy.int64), cupy.asarray([10], cupy.int64)
    given = cupy.asarray([5], cupy.int64)
    K.advance(fns, None, None, 0, table=table, hidden=H, x_out=x, ring=ring, n_dev=n, pos=pos, t_dev=t, given=given)()
    assert np.array_equal(x.get(), table.get()[5])
    assert ring.get().tolist() == [-7, 5, -7] and int(n.get()[0]) == 5  # slot n % 3
    assert int(pos.get()[0]) == 10 and int(t.get()[0]) == 11
    given[0] = -1  # a bad row's draw (sample_unchecked): the ring says so, nothing else moves
    K.advance(fns, None, None, 0, table=table, hidden=H, x_out=x, ring=ring, n_dev=n, pos=pos, t_dev=t, given=given)()
    assert ring.get().tolist() == [-7, 5, -1] and int(t.get()[0]) == 11
    part_v = cupy.asarray([-np.inf, -np.inf, -np.inf], cupy.float32)  # every logit -inf: nothing to pick
    part_i = cupy.asarray([3, 1, 2], cupy.int64)
    K.advance(fns, part_v, part_i, 3, table=table, hidden=H, x_out=x, ring=ring, n_dev=n, pos=pos, t_dev=t)()
    assert ring.get().tolist() == [-1, 5, -1] and int(t.get()[0]) == 11
    part_v[1] = 2.0
    part_v[2] = 2.0
    K.advance(fns, part_v, part_i, 3, table=table, hidden=H, x_out=x, ring=ring, n_dev=n, pos=pos, t_dev=t)()
    assert ring.get().tolist() == [-1, 1, -1] and int(t.get()[0]) == 12  # equal maxima: the smaller index


# ---- the decoder --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("native")
    out = {name: build_fixture(preset("tiny", dtype="fp16", layout=layout), root / name)
           for name, layout in LAYOUTS.items()}
    out["fp32"] = build_fixture(preset("tiny"), root / "fp32")
    out["onnx16"] = build_fixture(preset("tiny", dtype="fp16", attention="onnx"), root / "onnx16")
    return out


@pytest.fixture(scope="module")
def image():
    return demo_image(32)


def _native_run(pipe, x, steps, params=None):
    """Tokens and the logits each token after the first was picked from (the decoder's logits buffer), read
    through the plain loop (with lookahead the buffer may already hold the next step's row)."""
    dec = pipe.decoder
    toks, logits = [], []
    with dec.loop_order(lookahead=False):
        for tok in dec.generate(x, steps, Sampler(params or SamplingParams())):
            toks.append(tok)
            logits.append(dec.logits.get().astype(np.float64) if len(toks) > 1 else None)
    return toks, logits


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_native_tokens_equal_onnxruntime_and_logits_near_float64(folders, image, layout):
    from vlmdecode.reference import Reference

    pipe = vlmdecode.load(folders[layout], "cuda", "native")
    ids, x = pipe.prepare(PROMPT, image)
    toks, logits = _native_run(pipe, x, STEPS)
    eager = vlmdecode.load(folders[layout], "cuda", "eager").generate(PROMPT, image=image, max_new_tokens=STEPS,
                                                                      stop=(), suppress_tokens=()).tokens
    ref = Reference.load(folders[layout])
    feats = ref.vision(pipe.processor.preprocess([image], dtype=np.float32).astype(np.float64))
    n, worst = walk(ref, ids, feats, toks, logits)
    assert n >= 40, f"margin below twice the fp16 error already at step {n}"
    diverged = next((i for i in range(n) if toks[i] != eager[i]), None)
    assert diverged is None, f"native differs from onnxruntime at step {diverged} (margins hold to step {n})"
    print(f"{layout}: native == onnxruntime over {n}/{STEPS} steps, worst logit error {worst:.2e}")


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_native_pipeline_tokens_equal_eager(folders, image, layout):
    """Through the pipeline (its default suppress_tokens: the image soft token), 64 tokens: native = eager up
    to their first difference, which may only come where the float64 reference's top-1/top-2 margin is at
    most twice the measured fp16 logit error (#16's rule; reported with its step and margin); before it,
    native's token is the float64 argmax at every step whose margin exceeds that."""
    from vlmdecode.generation import call_params
    from vlmdecode.reference import Reference

    n = 64
    pipe = vlmdecode.load(folders[layout], "cuda", "native")
    got = pipe.generate(PROMPT, image=image, max_new_tokens=n, stop=()).tokens
    want = vlmdecode.load(folders[layout], "cuda", "eager").generate(PROMPT, image=image, max_new_tokens=n,
                                                                     stop=()).tokens
    d = next((i for i in range(n) if got[i] != want[i]), None)
    assert d != 0, "the first token: native prefill vs onnxruntime's, far from a tie on this fixture"
    last = n - 1 if d is None else d
    params = call_params(pipe.folder)  # what generate used: greedy, the image soft token suppressed
    ids, x = pipe.prepare(PROMPT, image)
    toks, logits = _native_run(pipe, x, last + 1, params)
    assert toks == got[: last + 1]  # the same run, its logits exposed
    keep = np.ones(preset("tiny").vocab_size, bool)
    keep[list(params.suppress)] = False
    ref = Reference.load(folders[layout])
    cache = ref.new_cache()
    feats = ref.vision(pipe.processor.preprocess([image], dtype=np.float32).astype(np.float64))
    ref.decode(ref.embed(ids, feats), cache)
    worst = 0.0
    for step in range(1, last + 1):
        r = np.where(keep, ref.decode(ref.embed(np.array([[toks[step - 1]]]), None), cache)[0, -1], -np.inf)
        worst = max(worst, float(np.abs(logits[step] - r)[keep].max()))
        tol = 2 * max(worst, 1e-3)
        top2 = np.sort(r)[-2:]
        margin = float(top2[1] - top2[0])
        if margin > tol:
            assert toks[step] == int(np.argmax(r)), f"step {step}: native {toks[step]} vs float64 {np.argmax(r)} " \
                                                    f"(margin {margin:.3g} > twice the fp16 error {tol:.3g})"
    if d is not None:
        print(f"{layout}: native {got[d]} vs eager {want[d]} at step {d}: float64 margin {margin:.3g}, "
              f"twice the fp16 logit error {tol:.3g}")
        assert margin <= tol, f"native differs from eager at step {d} where the float64 margin {margin:.3g} > {tol:.3g}"
        assert max(r.max() - r[got[d]], r.max() - r[want[d]]) <= tol, f"step {d}: a token outside the near-tie"


def test_native_counters_and_one_capture(folders, image):
    pipe = vlmdecode.load(folders["fp16"], "cuda", "native", sync_every=4)
    for _ in range(2):
        r = pipe.generate(PROMPT, image=image, max_new_tokens=10, stop=())
    c = r.counters
    L = preset("tiny").num_layers
    assert c["kernels_per_step"] == 5 * L + 3 and c["head"] == "bounded"  # head_bound + head_pick + advance
    assert c["captured"] == 1 and c["replayed"] == 2 * 9 and c["generations"] == 2
    assert all(s.h2d_bytes == 0 and s.d2h_bytes <= 4 * 8 and s.kv_bytes == 0 for s in r.steps[1:])


CL = dict(attn_batch=8, attn_cluster=16, attn_clusters=1, attn_threads=128)  # attention_cl, the sweep's fastest
CHUNKED = dict(attn_batch=0, attn_threads=256)  # the chunked attention kernel at its fastest measured shape


def test_default_attention_is_cluster(folders):
    assert all(getattr(Shapes(), k) == v for k, v in CL.items())
    r = vlmdecode.load(folders["fusedcuda16"], "cuda", "native", max_length=64)  # the decoder picks by head dim
    plan = r.decoder.plan
    assert r.decoder.shapes == Shapes.for_model(plan.head_dim, plan.hidden, plan.intermediate, plan.num_heads,
                                               plan.num_kv_heads)
    assert r.decoder.shapes.gate_up_tiled and r.decoder.shapes.attn_batch


@pytest.mark.parametrize("attention", ["chunked", "cl"])
def test_native_pdl_equals_plain_launches(folders, image, attention):
    """Programmatic dependent launch changes when a kernel may start, never what it computes: the captured
    step with PDL gives the same tokens and bit-identical logits as plain launches, 40 steps."""
    runs = {}
    for pdl in (True, False):
        shapes = Shapes(pdl=pdl, **(CL if attention == "cl" else CHUNKED))
        pipe = vlmdecode.load(folders["fused16"], "cuda", "native", shapes=shapes)
        assert pipe.decoder.counters()["pdl"] is (pdl and int(cupy.cuda.Device().compute_capability) >= 90)
        _, x = pipe.prepare(PROMPT, image)
        runs[pdl] = _native_run(pipe, x, 40)
    assert runs[True][0] == runs[False][0]
    assert all(np.array_equal(a, b) for a, b in zip(runs[True][1][1:], runs[False][1][1:]))


@pytest.mark.parametrize("batch,cluster,clusters,glob,keys", [(8, 16, 1, 0, 2048), (8, 8, 0, 0, 2048),
                                                              (2, 8, 1, 0, 2048), (4, 1, 0, 0, 2048),
                                                              (4, 16, 1, 2, 0), (2, 8, 1, 4, 0), (2, 8, 1, 4, 16),
                                                              (1, 4, 1, "auto", 16)])
def test_native_cluster_attention_follows_chunked(folders, image, batch, cluster, clusters, glob, keys):
    """The step with attention_cl gives the logits of the chunked kernel (attn_batch=0) within fp16 rounding
    (another summation order), 40 steps, PDL on; tokens equal up to the first step where the chunked kernel's
    top two are closer than that tolerance (a near tie; after it the runs see different tokens). keys: the
    attn_cluster_keys (0: every cluster of the grid works; 16: the live clusters grow over the generation)."""
    runs = []
    for shapes in (Shapes(**CHUNKED), Shapes(attn_batch=batch, attn_cluster=cluster, attn_clusters=clusters,
                                             attn_clusters_global=glob, attn_cluster_keys=keys)):
        pipe = vlmdecode.load(folders["fused16"], "cuda", "native", shapes=shapes)
        if glob and shapes.attn_batch:  # the layers with no window get `glob` clusters, the windowed ones `clusters`
            blocks = {L.name.split(".")[0]: L.grid[0] for L in pipe.decoder.body if L.name.endswith(".attn")}
            kinds = {f"L{i}": P.window is None for i, P in enumerate(pipe.decoder.plan.layers)}
            assert any(kinds.values()) and not all(kinds.values())
            want = shapes.clusters_for(None, pipe.decoder.max_length)
            assert want == (glob if glob != "auto" else min(MAX_AUTO_CLUSTERS, -(-pipe.decoder.max_length // keys)))
            assert all(b == cluster * (want if kinds[n] else clusters) for n, b in blocks.items()), blocks
        _, x = pipe.prepare(PROMPT, image)
        runs.append(_native_run(pipe, x, 40))
    (want, wl), (got, gl) = runs
    d = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), len(want))
    assert d > 0, "the prefill's token differs: the step kernels cannot have caused it"
    for i in range(1, min(d + 1, len(want))):
        tol = 2e-2 * max(1.0, np.abs(wl[i]).max())
        assert np.abs(wl[i] - gl[i]).max() <= tol, f"step {i}"
    if d < len(want):
        r = wl[d]
        margin = r[want[d]] - r[got[d]]
        print(f"attention_cl {batch},{cluster},{clusters},{glob},{keys}: tokens differ at step {d}, "
              f"chunked margin {margin:.3g}")
        assert margin <= 2e-2 * max(1.0, np.abs(r).max()), f"step {d}: not a near tie (margin {margin:.3g})"


def test_native_windowed_export_equals_eager():
    """onnxruntime-genai's CUDA export (builder-text-fp16-cuda: 5 local layers whose KV buffer is exactly their
    window of 12, a prompt longer than the window): native, reading those buffers as rings (attention_cl),
    gives onnxruntime CUDA eager's tokens over the whole expected run (200 steps)."""
    from exported_util import cases, decode, folders

    found = [f for f in folders(cuda=True) if f.name == "builder-text-fp16-cuda"]
    if not found:
        pytest.skip("tests/data/exported/builder-text-fp16-cuda is not in this checkout")
    (case,) = cases(found[0])
    assert len(case.ids) > 12 and len(case.tokens) >= 64
    eager = decode(vlmdecode.load(found[0], "cuda", "eager"), case)
    with pytest.raises(PlanError, match="only attention_cl reads rings"):
        vlmdecode.load(found[0], "cuda", "native", shapes=Shapes(**CHUNKED))  # reads rows by position
    pipe = vlmdecode.load(found[0], "cuda", "native")  # attention_cl, the default
    assert pipe.decoder.ring_layers == [0, 1, 2, 3, 4]
    assert decode(pipe, case) == eager


def test_native_replay_ms_body_and_greedy(folders, image):
    from vlmdecode.decoders.base import DecoderError

    pipe = vlmdecode.load(folders["fp16"], "cuda", "native", max_length=64)
    _, x = pipe.prepare(PROMPT, image)
    dec = pipe.decoder
    S = dec.prepare_timing(x)
    assert dec.replay_ms(10) > 0 and dec.replay_ms(64 - S - 2, greedy=True) > 0
    assert dec.counters()["captured"] == 2
    with pytest.raises(DecoderError, match="greedy replays"):
        dec.replay_ms(64 - S, greedy=True)


def test_native_sampling(folders, image):
    pipe = vlmdecode.load(folders["fp16"], "cuda", "native")
    greedy = pipe.generate(PROMPT, image=image, max_new_tokens=24, stop=()).tokens
    top1 = pipe.generate(PROMPT, image=image, max_new_tokens=24, stop=(), do_sample=True, top_k=1, seed=1).tokens
    assert top1 == greedy
    a, b = (pipe.generate(PROMPT, image=image, max_new_tokens=24, stop=(), do_sample=True, temperature=1.5,
                          seed=9).tokens for _ in range(2))
    assert a == b and a != greedy and all(0 <= t < preset("tiny").vocab_size for t in a)


@pytest.mark.parametrize("sync_every", [1, 5])
def test_native_loop_variants_give_the_same_tokens(folders, image, sync_every):
    """The plain loop (each token read before the next step is queued) and the id ring read every 5 tokens: the
    same tokens, greedy and seeded sampling, as the default loop (lookahead: each token read while the next
    step runs)."""
    base = vlmdecode.load(folders["fused16"], "cuda", "native")
    assert base.decoder.lookahead and base.decoder.sync_every == 1
    other = vlmdecode.load(folders["fused16"], "cuda", "native", sync_every=sync_every, lookahead=False)
    for kw in ({}, dict(do_sample=True, temperature=1.3, seed=5)):
        want = base.generate(PROMPT, image=image, max_new_tokens=33, stop=(), **kw)
        got = other.generate(PROMPT, image=image, max_new_tokens=33, stop=(), **kw)
        assert got.tokens == want.tokens, kw
    assert got.counters["replayed"] == 2 * 32 and got.counters["captured"] == 2  # greedy graph + body graph


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_native_bounded_head_tokens_equal_full_head(folders, image, layout):
    """The default greedy loop runs the bounded head (head "auto" on a hidden size of a multiple of 16): over 200
    steps the same tokens as head="full", one kernel more a step; the plain loop (logits read per token) keeps the
    full head."""
    auto = vlmdecode.load(folders[layout], "cuda", "native")
    full = vlmdecode.load(folders[layout], "cuda", "native", head="full")
    assert auto.decoder.counters()["head"] == "bounded" and full.decoder.counters()["head"] == "full"
    assert auto.decoder.kernels_per_step() == full.decoder.kernels_per_step() + 1
    with auto.decoder.loop_order(lookahead=False):
        assert not auto.decoder.bounded_now(True)
    got = auto.generate(PROMPT, image=image, max_new_tokens=STEPS, stop=()).tokens
    assert got == full.generate(PROMPT, image=image, max_new_tokens=STEPS, stop=()).tokens
    six = vlmdecode.load(folders[layout], "cuda", "native", head_bits=6)  # the 6-bit copy: the same tokens
    assert six.decoder.counters()["head"] == "bounded6"
    assert six.generate(PROMPT, image=image, max_new_tokens=STEPS, stop=()).tokens == got


def test_native_lookahead_stop_then_the_next_generation(folders, image):
    """A stop id ends a generation while lookahead has the next step queued: the tokens up to and with the stop
    id as the full run's; that step ran (one replay more), and the next generation starts over from its prefill
    with the full run's tokens."""
    pipe = vlmdecode.load(folders["fused16"], "cuda", "native")
    full = pipe.generate(PROMPT, image=image, max_new_tokens=16, stop=()).tokens
    before = pipe.decoder.counters()["replayed"]
    cut = pipe.generate(PROMPT, image=image, max_new_tokens=16, stop=(full[5],)).tokens
    n = full.index(full[5]) + 1
    assert cut == full[:n] and pipe.decoder.counters()["replayed"] == before + n
    assert pipe.generate(PROMPT, image=image, max_new_tokens=16, stop=()).tokens == full


def test_native_device_memory_flat(folders, image):
    pipe = vlmdecode.load(folders["fp16"], "cuda", "native")
    pool = cupy.get_default_memory_pool()
    for _ in range(5):
        pipe.generate(PROMPT, image=image, max_new_tokens=4, stop=())
    gc.collect()  # the pool counts every CuPy array of the process: earlier tests' garbage must go first
    used, free = pool.used_bytes(), cupy.cuda.runtime.memGetInfo()[0]
    for _ in range(200):
        pipe.generate(PROMPT, image=image, max_new_tokens=4, stop=())
    gc.collect()
    assert pool.used_bytes() <= used  # never grows (at 0813669 it fell 2131456 -> 1410560: others' garbage freed)
    assert abs(cupy.cuda.runtime.memGetInfo()[0] - free) < 2 << 20


def test_native_refusals(folders):
    with pytest.raises(PlanError, match="fp16"):
        vlmdecode.load(folders["fp32"], "cuda", "native")
    with pytest.raises(ValueError):
        vlmdecode.load(folders["onnx16"], "cuda", "native")
