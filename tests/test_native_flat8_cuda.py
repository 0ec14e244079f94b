"""The GEMV fold of down's split-K parts in one L2 round trip (`cuda_src.common` fold_flat8; `pytest -m cuda
tests/test_native_flat8_cuda.py`; skipped without a GPU).

qkv and the LM head fold 8 delta parts into their input vector; at 1152 elements over 256 threads the first warp
holds an extra slot. fold_flat8 loads every value before the first use; it must compute fold_regs's bits (the
build with -DVLM_NO_FLAT8 holds fold_regs alone) and what the float64 reference says, and shapes past its limits
must take fold_regs.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_gate import require_cuda

pytestmark = pytest.mark.cuda

cupy, ort = require_cuda()

from test_native_cuda import poisoned, rel, rms  # noqa: E402

from vlmdecode.native import kernels as K  # noqa: E402
from vlmdecode.native.kernels_src import SOURCE  # noqa: E402

_MODS: dict = {}


def _fns(inst, defines=()):
    """gemv instances (nv, rpw, epi, pf) of a module compiled with these -D options."""
    names = tuple(sorted(K.gemv_name(*g) for g in inst))
    key = (names, tuple(defines))
    if key not in _MODS:
        mod = cupy.RawModule(code=SOURCE, options=("-std=c++17", *defines), name_expressions=names)
        _MODS[key] = {n: mod.get_function(n) for n in names}
    return _MODS[key]


@pytest.mark.parametrize("epi,H,parts,warps", [(K.EPI_PLAIN, 1152, 8, 8), (K.EPI_PLAIN, 1152, 3, 8),
                                               (K.EPI_PLAIN, 1088, 8, 8), (K.EPI_HEAD, 1152, 8, 8),
                                               (K.EPI_PLAIN, 1152, 8, 4), (K.EPI_PLAIN, 1280, 8, 8),
                                               (K.EPI_PLAIN, 1152, 9, 8)])
@pytest.mark.parametrize("nan", [False, True])
def test_flat8_fold_equals_fold_regs_bit_for_bit(epi, H, parts, warps, nan):
    """qkv / the LM head folding split-K parts: the default build's outputs and stored residual equal those of the
    build holding fold_regs alone (a NaN in one part: NaN everywhere in both), and the float64 reference.
    1152 and 1088 at 8 warps take fold_flat8 (32 / 16 extra slots, the first warp's lanes); 1152 at 4 warps (160
    extra), 1280 (64 extra) and nine parts (more than FLAT8_PARTS) are past it: fold_regs in both builds."""
    rng = np.random.default_rng(H + parts + warps + nan)
    rows, eps = 700, 1e-6
    W = (rng.standard_normal((rows, H)) * 0.05).astype(np.float16)
    resid = rng.standard_normal(H).astype(np.float32)
    delta = rng.standard_normal((parts, H)).astype(np.float32)
    if nan:
        delta[parts // 2, H - 5] = np.nan  # in an extra slot's float4 at 1152 / 8 warps
    w_post, w_in = (rng.uniform(0.5, 2.0, H).astype(np.float32) for _ in range(2))
    rpw, pf = (2, 0) if epi == K.EPI_HEAD else (1, 1)  # the step's head and qkv instances
    inst = {(K.loads_per_lane(H), rpw, epi, pf)}
    got = []
    for defines in ((), ("-DVLM_NO_FLAT8",)):
        out = poisoned(H)
        kw = dict(src=cupy.asarray(resid), delta=cupy.asarray(delta), delta_parts=parts, delta_w=cupy.asarray(w_post),
                  resid_out=out, norm_w=cupy.asarray(w_in), eps=eps, warps=warps, rpw=rpw, prefetch_weights=pf)
        if epi == K.EPI_HEAD:
            y = poisoned(rows, np.float16)
            part_v, part_i = poisoned(K.HEAD_MAX_BLOCKS), cupy.full(K.HEAD_MAX_BLOCKS, -5, cupy.int64)
            kw.update(logits=y, part_v=part_v, part_i=part_i)
        else:
            y = poisoned(rows)
            kw.update(y=y)
        K.gemv(_fns(inst, defines), "t", cupy.asarray(W), rows, H, epi=epi, **kw)()
        got.append((y.get(), out.get()))
    for a, b in zip(*got):
        assert np.array_equal(a, b, equal_nan=True)
    if nan:
        assert np.isnan(got[0][0].astype(np.float32)).all() and np.isnan(got[0][1]).all()
        return
    r = resid + rms(delta.astype(np.float64).sum(0), w_post, eps)
    assert rel(got[0][1], r) < 1e-6
    assert rel(got[0][0], W.astype(np.float64) @ rms(r, w_in, eps)) < (2e-3 if epi == K.EPI_HEAD else 1e-5)


def test_first_layer_x_in_fold_is_unchanged():
    """The first layer's qkv folds x_in * scale with no delta: fold_regs in both builds, the same bits."""
    rng = np.random.default_rng(5)
    H, rows = 1152, 300
    W = (rng.standard_normal((rows, H)) * 0.05).astype(np.float16)
    x_in = rng.standard_normal(H).astype(np.float16)
    w_in = rng.uniform(0.5, 2.0, H).astype(np.float32)
    inst = {(K.loads_per_lane(H), 1, K.EPI_PLAIN, 1)}
    got = []
    for defines in ((), ("-DVLM_NO_FLAT8",)):
        y, out = poisoned(rows), poisoned(H)
        K.gemv(_fns(inst, defines), "t", cupy.asarray(W), rows, H, y=y, x_in=cupy.asarray(x_in), x_scale=3.0,
               resid_out=out, norm_w=cupy.asarray(w_in), warps=8, rpw=1)()
        got.append((y.get(), out.get()))
    assert np.array_equal(got[0][0], got[1][0]) and np.array_equal(got[0][1], got[1][1])
    assert rel(got[0][0], W.astype(np.float64) @ rms(x_in.astype(np.float64) * 3.0, w_in, 1e-6)) < 1e-5
