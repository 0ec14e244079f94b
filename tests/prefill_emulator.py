"""A numpy stand-in for the native prefill's row kernels and its cuBLAS calls (tests only, no GPU).

`install(cp)` adds to a `native_emulator.fake_cupy()` module: the pf_* kernels (what each argument list of
`native.cuda_src.prefill` says, in float64) and `FakeCublas`, the four libcublas entry points `native.prefill.Blas`
calls through ctypes, as column-major GEMMs over raw addresses (cuBLAS's own convention, so a wrong transpose,
leading dimension or stride shows). GEMMs issued during a capture are recorded into the graph like kernels.
What it does not check: the CUDA code or cuBLAS itself (tests/test_native_prefill_cuda.py does, on a GPU).
"""

from __future__ import annotations

import ctypes

import native_emulator as emu
import numpy as np

F16, F32, I32, I64 = np.float16, np.float32, np.int32, np.int64
R_TYPES = {2: F16, 0: F32}


def _val(v):
    v = getattr(v, "value", v)
    return 0 if v is None else v


def _mat(p, dt, rows: int, cols: int, ld: int):
    """The column-major rows x cols matrix at address p with leading dimension ld (a writable view)."""
    dt = np.dtype(dt)
    flat = emu.view(p, dt, ld * (cols - 1) + rows)
    return np.lib.stride_tricks.as_strided(flat, (rows, cols), (dt.itemsize, ld * dt.itemsize))


def _gemm(ta, tb, m, n, k, alpha, A, atype, lda, B, btype, ldb, C, ctype, ldc):
    a = _mat(A, R_TYPES[atype], m if ta == 0 else k, k if ta == 0 else m, lda)
    b = _mat(B, R_TYPES[btype], k if tb == 0 else n, n if tb == 0 else k, ldb)
    a, b = (a if ta == 0 else a.T), (b if tb == 0 else b.T)
    c = _mat(C, R_TYPES[ctype], m, n, ldc)
    c[...] = (alpha * (a.astype(np.float64) @ b.astype(np.float64))).astype(c.dtype)


def cublas_gemm(name, grid, a):
    _gemm(*a)


def cublas_batched(name, grid, a):
    ta, tb, m, n, k, alpha, A, atype, lda, sa, B, btype, ldb, sb, C, ctype, ldc, sc, batch = a
    size = lambda t: np.dtype(R_TYPES[t]).itemsize  # noqa: E731
    for i in range(batch):
        _gemm(ta, tb, m, n, k, alpha, A + i * sa * size(atype), atype, lda, B + i * sb * size(btype), btype, ldb,
              C + i * sc * size(ctype), ctype, ldc)


class FakeCublas:
    """libcublas as `native.prefill.Blas` calls it (ctypes arguments); host pointer mode, beta 0."""

    def __init__(self, cp):
        self.cp, self.calls = cp, []

    def _launch(self, name, args):
        self.calls.append(name)
        self.cp.RawModule().get_function(name)(None, None, args)  # recorded when the stream captures

    def cublasCreate_v2(self, ref):
        ref._obj.value = 1
        return 0

    def cublasSetStream_v2(self, handle, stream):
        return 0

    def cublasSetWorkspace_v2(self, handle, ptr, size):
        return 0

    @staticmethod
    def _alpha(p) -> float:
        return float(ctypes.c_float.from_address(_val(p)).value)

    def cublasGemmEx(self, h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute, algo):
        v = [_val(x) for x in (ta, tb, m, n, k)]
        self._launch("cublas_gemm", (*v, self._alpha(alpha), *[_val(x) for x in (A, at, lda, B, bt, ldb, C, ct, ldc)]))
        return 0

    def cublasGemmStridedBatchedEx(self, h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc,
                                   sc, batch, compute, algo):
        v = [_val(x) for x in (ta, tb, m, n, k)]
        rest = [_val(x) for x in (A, at, lda, sa, B, bt, ldb, sb, C, ct, ldc, sc, batch)]
        self._launch("cublas_batched", (*v, self._alpha(alpha), *rest))
        return 0


# ---- the row kernels ----------------------------------------------------------------------------------
def _n(p) -> int:
    return int(emu.view(p, I32, 1)[0])


def pf_embed(name, grid, a):
    x, ids, table, scale, nv, H, resid, norm_w, eps, xn = a
    Sb, H, S = grid[0], int(H), _n(nv)
    r = np.zeros((Sb, H))
    if int(ids):
        idv = emu.view(ids, I64, S)
        r[:S] = emu.view(table, F16, (int(idv.max()) + 1) * H).reshape(-1, H)[idv] * float(scale)
    else:
        r[:S] = emu.view(x, F16, S * H).reshape(S, H) * float(scale)
    emu.view(resid, F32, Sb * H)[:] = r.reshape(-1)
    emu.view(xn, F16, Sb * H)[:] = emu.rms(r, emu.view(norm_w, F32, H), float(eps)).astype(F16).reshape(-1)


def pf_fold(name, grid, a):
    delta, delta_w, resid, norm_w, eps, H, xn = a
    Sb, H = grid[0], int(H)
    r = emu.view(resid, F32, Sb * H).reshape(Sb, H)
    new = r + emu.rms(emu.view(delta, F32, Sb * H).reshape(Sb, H), emu.view(delta_w, F32, H), float(eps))
    r[...] = new
    if int(norm_w):
        emu.view(xn, F16, Sb * H)[:] = emu.rms(new, emu.view(norm_w, F32, H), float(eps)).astype(F16).reshape(-1)


def pf_qk(name, grid, a):
    qkv, nq, nkv, D, qn, kn, eps, cos, sin, rope_rows, nv, ldS, Q, K, V, Kc, Vc, C, layout = a
    Sb, nq, nkv, D, ldS, C, layout, S = grid[0], int(nq), int(nkv), int(D), int(ldS), int(C), int(layout), _n(nv)
    y = emu.view(qkv, F16, Sb * (nq + 2 * nkv) * D).reshape(Sb, nq + 2 * nkv, D).astype(np.float64)
    q, k, v = y[:, :nq], y[:, nq:nq + nkv], y[:, nq + nkv:]
    if int(qn):
        q = emu.rms(q, emu.view(qn, F32, D), float(eps))
    if int(kn):
        k = emu.rms(k, emu.view(kn, F32, D), float(eps))
    h, rows = D // 2, int(rope_rows)
    pos = np.minimum(np.arange(Sb), rows - 1)
    c = emu.view(cos, F32, rows * h).reshape(rows, h)[pos][:, None]
    s = emu.view(sin, F32, rows * h).reshape(rows, h)[pos][:, None]
    rot = lambda t: np.concatenate([t[..., :h] * c - t[..., h:] * s, t[..., h:] * c + t[..., :h] * s], -1)  # noqa: E731
    q, k = rot(q), rot(k)
    for buf, val, n in ((Q, q, nq), (K, k, nkv), (V, v, nkv)):
        emu.view(buf, F16, n * ldS * D).reshape(n, ldS, D)[:, :Sb] = val.transpose(1, 0, 2).astype(F16)
    for buf, val in ((Kc, k), (Vc, v)):
        cache = emu.view(buf, F16, nkv * C * D).reshape(nkv, C, D)
        L = min(S, C)
        for p in range(S):
            if layout == 0:
                cache[:, p] = val[p].astype(F16)
            elif p >= S - L:
                cache[:, p % C if layout == 1 else p - (S - L)] = val[p].astype(F16)


def pf_softmax(name, grid, a):
    scores, P, ldQ, ldK, q0, k0, Tk, window, softcap = a
    Qc, grp, ldQ, ldK, q0, k0, Tk, window = grid[0], grid[1], int(ldQ), int(ldK), int(q0), int(k0), int(Tk), int(window)
    sc = emu.view(scores, F32, grp * ldQ * ldK).reshape(grp, ldQ, ldK)[:, :Qc, :Tk].astype(np.float64)
    if float(softcap) > 0:
        sc = float(softcap) * np.tanh(sc / float(softcap))
    s, p = q0 + np.arange(Qc)[:, None], k0 + np.arange(Tk)[None]
    vis = (p <= s) & ((s - p < window) if window else True)
    sc = np.where(vis, sc, -np.inf)
    e = np.exp(sc - sc.max(-1, keepdims=True))
    emu.view(P, F16, grp * ldQ * ldK).reshape(grp, ldQ, ldK)[:, :Qc, :Tk] = (e / e.sum(-1, keepdims=True)).astype(F16)


def pf_gelu(name, grid, a):
    gu, m, I = a
    I, rows = int(I), grid[0]
    g = emu.view(gu, F16, rows * 2 * I).reshape(rows, 2 * I).astype(np.float64)
    emu.view(m, F16, rows * I)[:] = (emu.gelu(g[:, :I]) * g[:, I:]).astype(F16).reshape(-1)


def pf_last(name, grid, a):
    resid, delta, nv, H, resid_out, dpart, parts = a
    H, S, parts = int(H), _n(nv), int(parts)
    emu.view(resid_out, F32, H)[:] = emu.view(resid, F32, S * H)[(S - 1) * H:]
    d = emu.view(dpart, F32, parts * H)
    d[:] = 0
    d[:H] = emu.view(delta, F32, S * H)[(S - 1) * H:]


def install(cp) -> FakeCublas:
    """Register the prefill's kernels with the emulator; cp.empty/uint8 for the workspace; the fake cuBLAS."""
    emu.KERNELS.update({f.__name__: f for f in (pf_embed, pf_fold, pf_qk, pf_softmax, pf_gelu, pf_last, cublas_gemm,
                                                cublas_batched)})
    cp.uint8 = np.uint8
    cp.empty = lambda shape, dtype=F32: emu.farr(np.zeros(shape, dtype))
    return FakeCublas(cp)
