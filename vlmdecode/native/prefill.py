"""The native prefill: a prompt of S positions through cuBLAS GEMMs and our row kernels, straight into the native
step's KV buffers; one CUDA graph per prompt-length bucket.

    prefill input [S, H] fp16 (the embedding model's output, in PrefillBuffers.x) or ids [S] (table gather)
      pf_embed     resid = x * embed_scale; xn = rms(resid) * input_norm          one block a row, Sb rows
      per layer:
        GEMM       qkv [Sb, (nq + 2 nkv) D] = xn @ w_qkv                            cuBLAS, fp16 out
        pf_qk      q/k norm + rotary -> Q [nq, Sb, D], K/V [nkv, Sb, D]; K/V rows < S into the cache
        attention  per KV head and query chunk: scores = Q K^T * scale (batched GEMM over the group, fp32),
                   pf_softmax (causal, window, softcap), out = P V (batched GEMM, straight into [Sb, nq D])
        GEMM       o [Sb, H] = out @ w_o                                            fp32 out
        pf_fold    resid += rms(o) * post_attn_norm; xn = rms(resid) * pre_ffn_norm
        GEMM       gu [Sb, 2I] = xn @ w_gate_up; pf_gelu m = gelu_tanh(gate) * up   fp16
        GEMM       d [Sb, H] = m @ w_down                                           fp32 out
        pf_fold    resid += rms(d) * post_ffn_norm; xn = rms(resid) * next input_norm (not after the last layer)
      pf_last      row S-1's residual and down output into the decode step's buffers; then the step's own LM
                   head launch (final norm, head GEMV, softcap, fp16 logits + argmax partials) picks from them

Why this shape: at S >= 64 positions the projections are GEMMs (tensor cores through cuBLAS), not GEMVs; the
row kernels are memory-light. The whole prefill (~12 launches a layer) is captured once per bucket of
`BUCKET` positions (shapes are static in a graph; the prompt's length is read from device memory by the row
kernels, so padding rows never reach the cache), and replayed: Python's per-launch cost stays out of the
time to first token. Rows are padded to the bucket; attention is causal, so padding never reaches a real row.
The KV cache layout: rows = positions for full buffers; a windowed layer's buffer of exactly its window
gets the last `window` positions as the native step's ring (row p % window).

Not here: the decode step (`native.decoder`), the prompt path that fills the prefill input (`prompt_path`).
CUDA only (CuPy, cuBLAS); the bucket arithmetic is plain Python and is tested on the CPU.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .kernels import capture, ptr

BUCKET = 64  # prompt lengths round up to a multiple of this (one captured graph per bucket)
Q_CHUNK = 1024  # queries a scores block holds: scratch grp x Q_CHUNK x max keys fp32 (+ fp16 probabilities)
ROW_THREADS = 256
FOLD_SLOTS = 6  # pf_fold's float4 slots a thread (PF_R of cuda_src/prefill.py, set at compile time)
FOLD_MAX = FOLD_SLOTS * 4 * ROW_THREADS  # the longest row pf_fold holds
# a windowed layer's buffer of exactly its window: the native step's ring (position p at row p % window), or
# onnxruntime's rows (the last min(S, window) positions at rows 0.. in order, kvcache.windowed_rows)
WINDOWED = {"ring": 1, "onnxruntime": 2}
# cuBLAS enums (cublas_api.h / library_types.h)
OP_N, OP_T = 0, 1
R_16F, R_32F = 2, 0
COMPUTE_32F, GEMM_DEFAULT = 68, -1
WORKSPACE = 32 << 20  # cuBLAS workspace set on the private handle (a capture must not allocate one)


def bucket(S: int, capacity: int, step: int = BUCKET) -> int:
    """Padded length of a prompt of S positions: the next multiple of `step`, at most `capacity` rounded up."""
    if S <= 0:
        raise ValueError(f"a prompt has at least one position, got {S}")
    top = -(-capacity // step) * step
    if S > top:
        raise ValueError(f"prompt of {S} positions exceeds the prefill's {top} rows")
    return min(-(-S // step) * step, top)


def attention_chunks(Sb: int, window: int | None, q_chunk: int = Q_CHUNK, align: int = BUCKET):
    """(q0, q1, k0) of each query chunk of a padded prompt: queries [q0, q1) attend keys [k0, q1), k0 the first
    key any of them sees (window), aligned down to `align` rows."""
    out = []
    for q0 in range(0, Sb, q_chunk):
        q1 = min(q0 + q_chunk, Sb)
        k0 = 0 if not window else max(0, q0 - window + 1) // align * align
        out.append((q0, q1, k0))
    return out


def _libcublas():
    """The cuBLAS library CuPy already loaded (its own binding refuses calls during a stream capture, which
    cuBLAS itself supports with a user workspace: cuBLAS docs, "CUDA Graphs Support")."""
    for name in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise RuntimeError("native prefill: libcublas not found (CuPy's CUDA 13 build ships it)")


class Blas:
    """Row-major GEMMs on one stream: a private cuBLAS handle bound to it once, with its own workspace, fp16
    inputs, fp32 accumulation (CUBLAS_COMPUTE_32F), fp16 or fp32 outputs; called through ctypes, so the calls
    can be captured. Pointers are raw addresses."""

    def __init__(self, cp, stream):
        lib = self.lib = _libcublas()
        self.handle = ctypes.c_void_p()
        self._check(lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        self.workspace = cp.empty(WORKSPACE, cp.uint8)
        for what, rc in (("cublasSetStream", lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream.ptr))),
                         ("cublasSetWorkspace", lib.cublasSetWorkspace_v2(
                             self.handle, ctypes.c_void_p(int(self.workspace.data.ptr)),
                             ctypes.c_size_t(WORKSPACE)))):
            if rc:
                raise RuntimeError(f"native prefill: {what} failed (cuBLAS status {rc})")
        self._scalars: dict[float, np.ndarray] = {}

    def _s(self, v: float):
        if v not in self._scalars:
            self._scalars[v] = np.array([v], np.float32)  # host pointer mode: read at call (capture) time
        return ctypes.c_void_p(int(self._scalars[v].ctypes.data))

    @staticmethod
    def _check(rc: int, what: str) -> None:
        if rc:
            raise RuntimeError(f"native prefill: {what} failed (cuBLAS status {rc})")

    def linear(self, x: int, w: int, y: int, m: int, n: int, k: int, out32: bool) -> None:
        """y [m, n] = x [m, k] @ w [n, k]^T (w: the native [out, in] rows)."""
        P, I = ctypes.c_void_p, ctypes.c_int
        self._check(self.lib.cublasGemmEx(self.handle, I(OP_T), I(OP_N), I(n), I(m), I(k), self._s(1.0), P(w),
                                          I(R_16F), I(k), P(x), I(R_16F), I(k), self._s(0.0), P(y),
                                          I(R_32F if out32 else R_16F), I(n), I(COMPUTE_32F), I(GEMM_DEFAULT)),
                    "cublasGemmEx")

    def _batched(self, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, c, ctype, ldc, sc, batch) -> None:
        P, I, L = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        self._check(self.lib.cublasGemmStridedBatchedEx(
            self.handle, I(ta), I(tb), I(m), I(n), I(k), self._s(alpha), P(a), I(R_16F), I(lda), L(sa), P(b),
            I(R_16F), I(ldb), L(sb), self._s(0.0), P(c), I(ctype), I(ldc), L(sc), I(batch), I(COMPUTE_32F),
            I(GEMM_DEFAULT)), "cublasGemmStridedBatchedEx")

    def scores(self, k: int, q: int, c: int, Tk: int, Qc: int, D: int, q_stride: int, ldK: int, c_stride: int,
               batch: int, scale: float) -> None:
        """c[b] [Qc, Tk] (ld ldK, fp32) = scale * q[b] [Qc, D] @ k [Tk, D]^T for b < batch (k shared)."""
        self._batched(OP_T, OP_N, Tk, Qc, D, scale, k, D, 0, q, D, q_stride, c, R_32F, ldK, c_stride, batch)

    def mix(self, p: int, v: int, out: int, Tk: int, Qc: int, D: int, ldK: int, p_stride: int, ld_out: int,
            batch: int) -> None:
        """out[b] [Qc, D] (ld ld_out, b-th block of D columns) = p[b] [Qc, Tk] (ld ldK) @ v [Tk, D] (v shared)."""
        self._batched(OP_N, OP_N, D, Qc, Tk, 1.0, v, D, 0, p, ldK, p_stride, out, R_16F, ld_out, D, batch)


_modules: dict = {}


def _functions(cp) -> dict:
    names = ("pf_embed", "pf_fold", "pf_qk", "pf_softmax", "pf_gelu", "pf_last")
    key = cp.cuda.Device().id
    if key not in _modules:
        from .cuda_src import common, prefill

        mod = cp.RawModule(code=common.CODE + prefill.CODE, options=("-std=c++17", f"-DPF_R={FOLD_SLOTS}"))
        _modules[key] = {n: mod.get_function(n) for n in names}
    return _modules[key]


class NativePrefill:
    """A NativeDecoder's prompt through its own weights (module docstring); `run(S)` on the decoder's stream,
    after the prompt is in `decoder.prefill_buffers.x`. Scratch is sized for the decoder's max_length once."""

    def __init__(self, dec, bucket_step: int = BUCKET, q_chunk: int = Q_CHUNK, windowed: str = "ring"):
        cp = self.cp = dec.cp
        self.dec, self.plan, self.step = dec, dec.plan, bucket_step
        if windowed not in WINDOWED:
            raise ValueError(f"windowed must be one of {tuple(WINDOWED)}, got {windowed!r}")
        self.windowed = WINDOWED[windowed]  # pf_qk's layout of a KV buffer that holds exactly its window
        p = self.plan
        H, D, I, nq, nkv = p.hidden, p.head_dim, p.intermediate, p.num_heads, p.num_kv_heads
        if H > FOLD_MAX:
            from .plan import PlanError

            raise PlanError(f"{p.source}: the native prefill's residual fold holds rows of <= {FOLD_MAX} in registers, "
                            f"got hidden {H}; use prefill='onnxruntime'")
        if D % 2 or D > 2 * 256:
            from .plan import PlanError

            raise PlanError(f"{p.source}: the native prefill's rotary kernel takes an even head_dim <= 512 (one "
                            f"thread a rotary pair), got {D}; use prefill='onnxruntime'")
        self.rows = -(-dec.max_length // bucket_step) * bucket_step  # ldS: rows of every scratch buffer
        self.q_chunk = min(q_chunk, self.rows)
        self.fns = _functions(cp)
        self.blas = Blas(cp, dec.stream)
        R, grp = self.rows, nq // nkv
        e = lambda shape, dt=cp.float16: cp.zeros(shape, dt)  # noqa: E731
        with dec.stream:
            self.n_valid = e(1, cp.int32)
            self.resid, self.xn = e((R, H), cp.float32), e((R, H))
            self.qkv, self.q, self.k, self.v = e((R, (nq + 2 * nkv) * D)), e((nq, R, D)), e((nkv, R, D)), e((nkv, R, D))
            self.s, self.p = e((grp, self.q_chunk, R), cp.float32), e((grp, self.q_chunk, R))
            self.attn, self.o = e((R, nq * D)), e((R, H), cp.float32)
            self.gu, self.m, self.d = e((R, 2 * I)), e((R, I)), e((R, H), cp.float32)
        self.graphs: dict[int, object] = {}
        self.captured = self.replayed = self.eager = 0

    # ---- launches ----------------------------------------------------------------------------------
    def _rows(self, name: str, n: int, args: tuple, threads: int = ROW_THREADS) -> None:
        self.fns[name]((n,), (threads,), args)

    def enqueue(self, Sb: int) -> None:
        """Every launch of a prompt padded to Sb rows, on the current stream (what a capture records)."""
        dec, p, blas = self.dec, self.plan, self.blas
        H, D, I, nq, nkv = p.hidden, p.head_dim, p.intermediate, p.num_heads, p.num_kv_heads
        R, eps = self.rows, np.float32(p.eps)
        pb = dec.prefill_buffers
        ids = p.drive == "ids"
        x16 = None if ids else pb.x.array
        self._rows("pf_embed", Sb, (ptr(x16), ptr(pb.x.array if ids else None), ptr(dec.table if ids else None),
                                    np.float32(p.embed_scale or 1.0), ptr(self.n_valid), np.int32(H), ptr(self.resid),
                                    ptr(dec.layers[0]["input_norm"]), eps, ptr(self.xn)))
        ldq = (nq + 2 * nkv) * D
        for l, (L, W) in enumerate(zip(p.layers, dec.layers)):
            blas.linear(self.xn.data.ptr, W["w_qkv"].data.ptr, self.qkv.data.ptr, Sb, ldq, H, False)
            Kc, Vc = dec.kv.keys[l].array, dec.kv.values[l].array
            C = int(Kc.shape[-2])
            layout = self.windowed if l in dec.ring_layers else 0
            self.fns["pf_qk"]((Sb, nq + 2 * nkv), (-(-D // 64) * 32,), (
                ptr(self.qkv), np.int32(nq), np.int32(nkv), np.int32(D), ptr(W["q_norm"]), ptr(W["k_norm"]), eps,
                ptr(W["cos"]), ptr(W["sin"]), np.int32(W["cos"].shape[0]), ptr(self.n_valid), np.int32(R),
                ptr(self.q), ptr(self.k), ptr(self.v), ptr(Kc), ptr(Vc), np.int32(C), np.int32(layout)))
            self._attention(Sb, L.window)
            blas.linear(self.attn.data.ptr, W["w_o"].data.ptr, self.o.data.ptr, Sb, H, nq * D, True)
            self._rows("pf_fold", Sb, (ptr(self.o), ptr(W["post_attn_norm"]), ptr(self.resid), ptr(W["pre_ffn_norm"]),
                                       eps, np.int32(H), ptr(self.xn)))
            blas.linear(self.xn.data.ptr, W["w_gate_up"].data.ptr, self.gu.data.ptr, Sb, 2 * I, H, False)
            self.fns["pf_gelu"]((Sb, -(-(I // 2) // ROW_THREADS)), (ROW_THREADS,),
                                (ptr(self.gu), ptr(self.m), np.int32(I)))
            blas.linear(self.m.data.ptr, W["w_down"].data.ptr, self.d.data.ptr, Sb, H, I, True)
            if l + 1 < p.num_layers:
                self._rows("pf_fold", Sb, (ptr(self.d), ptr(W["post_ffn_norm"]), ptr(self.resid),
                                           ptr(dec.layers[l + 1]["input_norm"]), eps, np.int32(H), ptr(self.xn)))
        self._rows("pf_last", 1, (ptr(self.resid), ptr(self.d), ptr(self.n_valid), np.int32(H), ptr(dec.resid[0]),
                                  ptr(dec.dpart), np.int32(dec.ksd)))
        dec.head()  # the decode step's LM head over the last position: logits + argmax partials

    def _attention(self, Sb: int, window: int | None) -> None:
        p, blas, R = self.plan, self.blas, self.rows
        D, nq, nkv = p.head_dim, p.num_heads, p.num_kv_heads
        grp, Qm, h2 = nq // nkv, self.q_chunk, 2  # h2: bytes of an fp16
        for q0, q1, k0 in attention_chunks(Sb, window, self.q_chunk, self.step):
            Qc, Tk = q1 - q0, q1 - k0
            for j in range(nkv):
                qp = self.q.data.ptr + ((j * grp) * R + q0) * D * h2
                kp = self.k.data.ptr + (j * R + k0) * D * h2
                vp = self.v.data.ptr + (j * R + k0) * D * h2
                blas.scores(kp, qp, self.s.data.ptr, Tk, Qc, D, R * D, R, Qm * R, grp, float(p.attn_scale))
                self.fns["pf_softmax"]((Qc, grp), (ROW_THREADS,), (
                    ptr(self.s), ptr(self.p), np.int32(Qm), np.int32(R), np.int32(q0), np.int32(k0), np.int32(Tk),
                    np.int32(window or 0), np.float32(p.attn_softcap or 0.0)))
                out = self.attn.data.ptr + (q0 * nq + j * grp) * D * h2
                blas.mix(self.p.data.ptr, vp, out, Tk, Qc, D, R, Qm * R, nq * D, grp)

    # ---- running -----------------------------------------------------------------------------------
    def __call__(self, x) -> int:
        """Prefill a prompt into the decoder's KV (position S after it) and its head's logits; returns S.
        x: Staged (already in the prefill input buffer), a host array [1, S, H] / ids [1, S] (uploaded, counted as
        "prompt") or an OrtValue on the device (copied device to device)."""
        from ..decoders.base import DecoderError, prompt_length
        from ..prompt_path import Staged

        dec = self.dec
        pb = dec.prefill_buffers
        S = prompt_length(x, dec.max_length, dec.folder.context_length)
        with dec.stream:
            if isinstance(x, np.ndarray):
                dec.transfers.upload(pb.x, x, "prompt")
            elif not isinstance(x, Staged):
                if x.device_name().lower() != "cuda":
                    raise DecoderError(f"native prefill: an OrtValue prompt must be on cuda, got {x.device_name()}")
                n = S * int(np.prod(pb.x.shape[2:], dtype=np.int64)) * pb.x.dtype.itemsize
                rt = self.cp.cuda.runtime
                rt.memcpyAsync(pb.x.ptr, x.data_ptr(), n, rt.memcpyDeviceToDevice, dec.stream.ptr)
            dec.kv.reset()
            self.run(S)
        dec.kv.advance(S)
        return S

    def run(self, S: int) -> None:
        """Prefill S positions (already in the prefill input buffer) on the decoder's stream: the bucket's graph,
        captured after the bucket's first (eager) run."""
        dec = self.dec
        Sb = bucket(S, dec.max_length, self.step)
        with dec.stream:
            self.n_valid.fill(S)
            g = self.graphs.get(Sb)
            if g is not None:
                g.launch(dec.stream)
                self.replayed += 1
                return
            self.enqueue(Sb)  # eager: loads every kernel (cuBLAS's too) before any capture
            self.eager += 1
            self.graphs[Sb] = capture(dec.stream, lambda: self.enqueue(Sb))
            self.captured += 1
