"""A numpy stand-in for CuPy and for the native kernels' launch contracts (tests only, no GPU).

`fake_cupy()` is a module with the few CuPy calls the native decoder makes at set-up and in its loop
(arrays whose `.data.ptr` is their host address, a stream whose capture records launches into a graph,
pinned memory and async copies as plain memory moves). Its RawModule returns kernels that do, in float64
numpy, what each CUDA kernel's arguments say (`native.kernels_src`): a GEMV with its fold prologue and
epilogue, attention with the KV append, advance, and device mode's argmax_partial. So the decoder's
Python side -- buffers, the order of the step's launches, their pointers, ping-pong residuals, split-K
partials, the device loop -- runs on the CPU and can be compared with `native.numpy_exec`. What it does
not check: the CUDA code itself (tests/test_native_cuda.py does, on a GPU).
"""

from __future__ import annotations

import ctypes
import math
import re
import types

import numpy as np

F16, F32, I32, I64 = np.float16, np.float32, np.int32, np.int64
NO_INDEX = np.iinfo(np.int64).max


class _Ptr:
    def __init__(self, a):
        self.ptr = a.ctypes.data


class FArr(np.ndarray):
    """A host array that answers `.data.ptr`, `.get()` and `.set()` as a CuPy array does."""

    @property
    def data(self):
        return _Ptr(self)

    def get(self, stream=None, out=None):
        if out is not None:
            out[...] = np.asarray(self)
            return out
        return np.array(self)

    def set(self, host, stream=None):
        self[...] = host


def farr(a) -> FArr:
    a = np.asarray(a)
    out = np.empty(a.shape, a.dtype).view(FArr)
    out[...] = a
    return out


def view(p, dtype, n) -> np.ndarray | None:
    """n elements of `dtype` at host address p, or of an array passed as is (None for NULL), writable."""
    if isinstance(p, np.ndarray):
        p = p.ctypes.data
    if int(p) == 0:
        return None
    dt = np.dtype(dtype)
    return np.frombuffer((ctypes.c_char * (n * dt.itemsize)).from_address(int(p)), dt, n)


def rms(x, w, eps):
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * w


def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


# ---- the kernels' contracts --------------------------------------------------------------------------
def gemv(name, grid, a):
    (W, n_rows, ld, k_len, src, x_in, x_scale, delta, dparts, delta_w, resid_out, norm_w, eps, y, logits, softcap,
     part_v, part_i, suppress, n_suppress) = a
    n_rows, ld, k, dparts, splits = int(n_rows), int(ld), int(k_len), int(dparts), grid[1]
    epi = int(name[name.index("<") + 1:-1].split(",")[2])  # gemv<NV,RPW,EPI,PF>
    total = 2 * n_rows if epi == 1 else n_rows
    Wm = view(W, F16, total * ld).reshape(total, ld).astype(np.float64)
    if int(norm_w):
        out = [Wm @ fold(k, src, x_in, x_scale, delta, dparts, delta_w, resid_out, norm_w, eps)]
    else:
        v = view(src, F32, k * splits).astype(np.float64)
        out = [Wm[:, s * k:(s + 1) * k] @ v[s * k:(s + 1) * k] for s in range(splits)]
    if epi == 0:
        view(y, F32, splits * n_rows)[:] = np.concatenate(out)
    elif epi == 1:
        view(y, F32, n_rows)[:] = gelu(out[0][:n_rows]) * out[0][n_rows:]
    else:
        x = out[0] if float(softcap) <= 0 else float(softcap) * np.tanh(out[0] / float(softcap))
        view(logits, F16, n_rows)[:] = x.astype(F16)
        partials(x.astype(F16), grid[0], part_v, part_i, _suppressed(suppress, n_suppress))


def fold(k, src, x_in, x_scale, delta, dparts, delta_w, resid_out, norm_w, eps):
    """form_vector's folded input vector (float64): residual (+ RMSNorm'd delta parts), stored if asked, RMSNorm'd."""
    r = view(src, F32, k).astype(np.float64) if int(src) else view(x_in, F16, k) * float(x_scale)
    if int(delta):
        r = r + rms(view(delta, F32, int(dparts) * k).reshape(int(dparts), k).sum(0), view(delta_w, F32, k), float(eps))
    if int(resid_out):
        view(resid_out, F32, k)[:] = r
    return rms(r, view(norm_w, F32, k), float(eps))


def _suppressed(suppress, n_suppress):
    ns = int(view(n_suppress, I32, 1)[0]) if int(n_suppress) else 0
    return view(suppress, I64, ns) if ns else ()


def head_bound(name, grid, a):
    """The bounded head's first pass (native.bounded_head): the vector, each row's upper bound, the largest lower
    bound over the ids not suppressed in block 0's slot (the other blocks' -inf)."""
    Q, sc, n_rows, k_len, src, delta, dparts, delta_w, norm_w, eps, xvec, upper, low, suppress, n_suppress = a
    V, k = int(n_rows), int(k_len)
    x = fold(k, src, 0, 1.0, delta, dparts, delta_w, 0, norm_w, eps)
    view(xvec, F32, k)[:] = x
    from vlmdecode.native.bounded_head import BoundTable, estimate

    bits = int(name[name.index("<") + 1:-1].split(",")[5])  # head_bound<FLAT8,NQ,RPW,PF,MINB,BITS>
    width = k if bits == 8 else 3 * k // 4
    table = BoundTable(view(Q, np.int8, V * width).reshape(V, width), view(sc, F32, 4 * V).reshape(V, 4), bits)
    est, e = (v.astype(np.float64) for v in estimate(table, view(xvec, F32, k)))
    view(upper, F32, V)[:] = est + e
    lows = est - e
    lows[np.asarray(_suppressed(suppress, n_suppress), np.int64)] = -np.inf
    lo = view(low, F32, grid[0])
    lo[:] = -np.inf
    lo[0] = np.nanmax(lows)


def head_pick(name, grid, a):
    """The bounded head's second pass: the candidates' exact fp16 logits, picked into block 0's partial."""
    W, n_rows, ld, k_len, xvec, upper, low, n_low, softcap, part_v, part_i, suppress, n_suppress = a
    from vlmdecode.native.bounded_head import candidates

    V, ld, k, cap = int(n_rows), int(ld), int(k_len), float(softcap)
    g = (lambda z: cap * np.tanh(z / cap)) if cap > 0 else (lambda z: z)
    cand = candidates(view(upper, F32, V).copy(), np.max(view(low, F32, int(n_low))), cap if cap > 0 else None)
    sup = np.asarray(_suppressed(suppress, n_suppress), np.int64)
    cand[sup] = False
    Wm = view(W, F16, V * ld).reshape(V, ld)[:, :k].astype(np.float64)
    h16 = np.full(V, -np.inf, F16)
    h16[cand] = g(Wm[cand] @ view(xvec, F32, k).astype(np.float64)).astype(F16)
    partials(h16, grid[0], part_v, part_i, sup)


def partials(h16, nb, part_v, part_i, suppress=()):
    """One (max, first index) partial per block over the ids not suppressed: here all in block 0, the others
    empty (-inf, NO_INDEX)."""
    pv, pi = view(part_v, F32, nb), view(part_i, I64, nb)
    pv[:], pi[:] = -np.inf, NO_INDEX
    f = h16.astype(np.float32)
    f[np.asarray(suppress, np.int64)] = -np.inf  # never picked, never checked
    pv[0] = np.nan if (np.isnan(f) | np.isposinf(f)).any() else f.max()
    pi[0] = int(np.argmax(f))


def argmax_partial(name, grid, a):
    logits, V, part_v, part_i, suppress, n_suppress = a
    ns = int(n_suppress)
    partials(view(logits, F16, int(V)), grid[0], part_v, part_i, view(suppress, I64, ns) if ns else ())


def attention(name, grid, a):
    (qkv, nq, nkv, qn, kn, eps, cos, sin, pos, K, V, cap, window, scale, softcap, chunk, part, counter, out) = a
    D = int(re.search(r"<(\d+)", name).group(1))
    nq, nkv, cap, window, eps = int(nq), int(nkv), int(cap), int(window), float(eps)
    t = int(view(pos, I64, 1)[0])
    v_all = view(qkv, F32, (nq + 2 * nkv) * D).astype(np.float64)
    q, k = v_all[: nq * D].reshape(nq, D), v_all[nq * D:(nq + nkv) * D].reshape(nkv, D)
    v = v_all[(nq + nkv) * D:].reshape(nkv, D)
    if int(qn):
        q = rms(q, view(qn, F32, D), eps)
    if int(kn):
        k = rms(k, view(kn, F32, D), eps)
    c = view(cos, F32, (t + 1) * (D // 2)).reshape(t + 1, D // 2)[t]
    s = view(sin, F32, (t + 1) * (D // 2)).reshape(t + 1, D // 2)[t]
    half = D // 2
    rot = lambda x: np.concatenate([x[:, :half] * c - x[:, half:] * s, x[:, half:] * c + x[:, :half] * s], 1)  # noqa: E731
    q, k = rot(q), rot(k)
    Kc, Vc = (view(b, F16, nkv * cap * D).reshape(nkv, cap, D) for b in (K, V))
    Kc[:, t % cap], Vc[:, t % cap] = k.astype(F16), v.astype(F16)  # position p at row p % cap
    lo = max(0, t - window + 1) if window > 0 else 0
    rows = np.arange(lo, t + 1) % cap
    o = view(out, F32, nq * D).reshape(nq, D)
    for h in range(nq):
        g = h // (nq // nkv)
        sc = Kc[g, rows].astype(np.float64) @ q[h] * float(scale)
        if float(softcap) > 0:
            sc = float(softcap) * np.tanh(sc / float(softcap))
        p = np.exp(sc - sc.max())
        o[h] = p @ Vc[g, rows].astype(np.float64) / p.sum()


def advance(name, grid, a):
    part_v, part_i, nparts, given, table, H, x_out, ring, ring_len, n_dev, pos, t_dev = a
    nparts, H, ring_len = int(nparts), int(H), int(ring_len)
    if int(given):
        tok = int(view(given, I64, 1)[0])
    else:
        pv, pi = view(part_v, F32, nparts), view(part_i, I64, nparts)
        tok = -1 if np.isnan(pv).any() or pv.max() == -np.inf else int(pi[pv == pv.max()].min())
    n = view(n_dev, I64, 1)
    view(ring, I64, ring_len)[int(n[0]) % ring_len] = tok
    n[0] += 1
    if tok >= 0:
        if int(table):
            view(x_out, F16, H)[:] = view(table, F16, (tok + 1) * H)[tok * H:]
        tt = view(t_dev, I64, 1)
        view(pos, I64, 1)[0] = tt[0]
        tt[0] += 1


def gemv_split(name, grid, a):
    """gemv_split<NV,RPW>: gemv<NV,RPW,EPI_GELU,3>'s contract (the fold over half the warps is the same math)."""
    gemv(name.replace("gemv_split<", "gemv<")[:-1] + ",1,3>", grid, a)


def gemv_tiled(name, grid, a):
    """gemv_tiled<CPW,R,NW,MB,EPI>: gemv<..,EPI_GELU,..>'s contract (EPI 1), gemv<..,EPI_PLAIN,..>'s over split-K
    slices (EPI 0, grid y the slices) or its folded plain rows (EPI 3, EPI_FOLD: one slice) over the tiled weights
    (`native.tiled_gemv`), read back into rows by `tiled_gemv.rows` / `rows_slices` (tests/test_tiled_gemv.py
    checks the layouts against the kernel's lanes)."""
    from vlmdecode.native import tiled_gemv

    (W, n_rows, _, k_len, src, x_in, x_scale, delta, dparts, delta_w, resid_out, norm_w, eps, y) = a[:14]
    targs = [int(v) for v in name[name.index("<") + 1:-1].split(",")]
    R, n, k = targs[1], int(n_rows), int(k_len)
    if targs[4] == 0:  # EPI_PLAIN: y [splits, n] the slices' partial sums
        sp = int(grid[1])
        wt = view(W, F16, sp * n * k).reshape(sp, n // R, k // (8 * (32 // R)), 32, 8)
        w_rows = tiled_gemv.rows_slices(wt, R).astype(np.float64).reshape(n, sp, k)
        x = view(src, F32, sp * k).astype(np.float64).reshape(sp, k)
        view(y, F32, sp * n)[:] = np.einsum("npk,pk->pn", w_rows, x).reshape(-1)
        return
    x = fold(k, src, x_in, x_scale, delta, dparts, delta_w, resid_out, norm_w, eps)
    if targs[4] == 3:  # EPI_FOLD: y [n] over the folded vector
        wt = view(W, F16, n * k).reshape(1, n // R, k // (8 * (32 // R)), 32, 8)
        view(y, F32, n)[:] = tiled_gemv.rows_slices(wt, R).astype(np.float64) @ x
        return
    wt = view(W, F16, 2 * n * k).reshape(n // (R // 2), k // (8 * (32 // R)), 32, 8)
    v = tiled_gemv.rows(wt, R).astype(np.float64) @ x
    view(y, F32, n)[:] = gelu(v[:n]) * v[n:]


KERNELS = {"gemv": gemv, "gemv_split": gemv_split, "gemv_tiled": gemv_tiled, "attention": attention, "advance": advance,
           "argmax_partial": argmax_partial, "head_bound": head_bound, "head_pick": head_pick}


# ---- the module -------------------------------------------------------------------------------------
def fake_cupy():
    state = types.SimpleNamespace(capture=None, launches=[], attrs=[])

    class Kernel:
        num_regs = 96
        shared_size_bytes = 512
        max_dynamic_shared_size_bytes = 0
        kernel = types.SimpleNamespace(ptr=0)  # the CUfunction handle function attributes are set on

        def __init__(self, name):
            self.name = name

        def __call__(self, grid, block, args, shared_mem=0):
            run = (self.name, grid, args)
            if state.capture is not None:
                state.capture.append(run)
            else:
                self.run(run)

        @staticmethod
        def run(run):
            name, grid, args = run
            state.launches.append(name)
            KERNELS[re.match(r"[a-z_]+?(?=_cl|<|$)", name).group(0)](name, grid, args)

    class Graph:
        def __init__(self, runs):
            self.runs = runs

        def launch(self, stream=None):
            for run in self.runs:
                Kernel.run(run)

    class Stream:
        ptr = 0

        def __init__(self, non_blocking=False):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def synchronize(self):
            pass

        def wait_event(self, event):
            pass

        def begin_capture(self):
            state.capture = []

        def end_capture(self):
            g, state.capture = Graph(state.capture), None
            return g

    class Event:
        def __init__(self, block=False, disable_timing=False, interprocess=False):
            pass

        def record(self, stream=None):
            pass

        def synchronize(self):
            pass

    class Device:
        def __init__(self, index=0):
            self.id = index
            self.attributes = {"MultiProcessorCount": 132, "MaxSharedMemoryPerMultiprocessor": 233472}
            self.compute_capability = "80"  # plain launches (no PDL): what the emulated kernels stand for

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def use(self):
            pass

    def memcpy(dst, src, n, kind, stream):
        ctypes.memmove(int(dst), int(src), int(n))

    cp = types.ModuleType("cupy")
    cp.float16, cp.float32, cp.int32, cp.int64 = F16, F32, I32, I64
    cp.ndarray = FArr
    cp.asarray = lambda a, dtype=None: farr(np.asarray(a, dtype))
    cp.zeros = lambda shape, dtype=F32: farr(np.zeros(shape, dtype))
    cp.full = lambda shape, fill, dtype=F32: farr(np.full(shape, fill, dtype))
    cp.roll = lambda a, shift, axis=None: farr(np.roll(np.asarray(a), shift, axis))
    cp.RawModule = lambda code=None, options=(), name_expressions=None: types.SimpleNamespace(get_function=Kernel)
    runtime = types.SimpleNamespace(memcpyAsync=memcpy, memcpyHostToDevice=1,
                                    memsetAsync=lambda p, v, n, s: ctypes.memset(int(p), v, int(n)))
    driver = types.SimpleNamespace(funcSetAttribute=lambda fn, attr, value: state.attrs.append((attr, value)))
    cp.cuda = types.SimpleNamespace(Device=Device, Stream=Stream, Event=Event, runtime=runtime, driver=driver,
                                    alloc_pinned_memory=lambda n: bytearray(n),
                                    get_current_stream=lambda: Stream())
    cp.state = state
    return cp
