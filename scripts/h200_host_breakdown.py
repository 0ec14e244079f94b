"""Where graph mode's host time went on CUDA before issue 13's host step: a per-token breakdown, and variants.

    python scripts/h200_host_breakdown.py [OUT.json] [--preset tiny] [--gens 5]    (at commit e48717b)

The study that chose decoders.cuda's host step (mapped logits, scalars queued behind the run, launch ahead of
the yield). It times the pieces of the host path as it was at e48717b (three staged copies, a CuPy logits
read, ORT's sync): at later commits the package's step is the new one and this script refuses to run (check
out e48717b to repeat it); the new step's breakdown is scripts/h200_host_overhead.py's "breakdown".

One process, one graph-mode pipeline at context 128 (+64 new, as scripts/h200_host_overhead.py). Every
loop below runs `gens` generations of 63 decode steps after a prefill and keeps the steps after the first
8 of each (>= 200 tokens); numbers are medians in microseconds per token (time.perf_counter_ns).

    pipeline / generate    the pipeline's StepRecord (seconds, detok_seconds) / next() of decoder.generate
    parts                  the decoder's step cut at each host call: token_input, feed (x, position, mask
                           copies), run_with_iobinding, bookkeeping, the logits read (views + copy/sync),
                           the byte record, pick; and with disable_synchronize_execution_providers=1 the
                           launch, the stream sync and the read apart
    events                 CUDA events around feed, run and read: device spans and the idle gap per step
    graph_device           the captured graph's device time alone (queued behind a spin kernel)
    variants               a whole token -> next token step, each alternative of the host path on its own:
                           raw copies with precomputed pointers, one feed kernel reading mapped pinned memory,
                           inputs and/or logits bound to mapped pinned host memory (zero copies), a device
                           argmax reading 8 bytes, the step launched before the detokenizer runs (overlap)
Every variant's tokens are checked against the package's (greedy) and reported (tokens_match).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
import traceback

import numpy as np

CONTEXT, NEW, SKIP = 128, 64, 8
ns = time.perf_counter_ns
KEEP = []  # mapped host allocations: alive for the process

_SRC = r"""
#include <cuda_fp16.h>
extern "C" __global__ void feed(const unsigned short* src, const long long* t_src, unsigned short* x,
                                long long* pos, long long* mask, const int H) {
    for (int h = threadIdx.x; h < H; h += blockDim.x) x[h] = src[h];
    if (threadIdx.x == 0) { long long t = t_src[0]; pos[0] = t; mask[t] = 1; }
}
extern "C" __global__ void argmax1(const __half* logits, const int V, long long* out) {
    __shared__ float v[256];
    __shared__ int ix[256];
    const int tid = threadIdx.x;
    float bv = -__int_as_float(0x7f800000); int bi = 0x7fffffff;
    for (int i = tid; i < V; i += 256) {
        float x = __half2float(logits[i]);
        if (x > bv || bi == 0x7fffffff) { bv = x; bi = i; }
    }
    v[tid] = bv; ix[tid] = bi;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (tid < s) {
            float b = v[tid + s]; int j = ix[tid + s];
            if (b > v[tid] || (b == v[tid] && j < ix[tid])) { v[tid] = b; ix[tid] = j; }
        }
        __syncthreads();
    }
    if (tid == 0) out[0] = ix[0];
}
extern "C" __global__ void spin(const long long cycles) {
    long long s = clock64();
    while (clock64() - s < cycles) { }
}
"""


def med(xs):
    return round(statistics.median(xs) / 1e3, 2) if xs else None  # ns -> us


class Env:
    def __init__(self, preset: str, gens: int):
        import cupy as cp

        import vlmdecode
        from vlmdecode.fixture.cache import ensure_fixture
        from vlmdecode.profiling import prompt_ids
        from vlmdecode.sampling import Sampler, SamplingParams

        self.cp, self.rt, self.gens = cp, cp.cuda.runtime, gens
        self.folder = ensure_fixture(preset, "gqa", "fp16", layout="unfused")
        self.ids = prompt_ids(CONTEXT)
        self.pipe = vlmdecode.load(self.folder, "cuda", "graph", max_length=CONTEXT + NEW)
        for _ in range(2):
            self.pipe.generate_from_ids(self.ids, max_new_tokens=16, stop=())  # capture, kernels, table
        self.dec = dec = self.pipe.decoder
        if dec.logits_step.mapped:
            raise SystemExit("this study measures the host path before issue 13's host step (mapped logits): "
                             "run it at commit e48717b; the current step's breakdown: scripts/h200_host_overhead.py")
        self.x = self.pipe.embed(self.ids, None)
        self.sampler = Sampler(SamplingParams())
        self.stream = dec.stream
        self.sp = int(dec.stream.ptr)
        self.mod = cp.RawModule(code=_SRC)
        self.detok = self.pipe.processor.stream_decoder() if self.pipe.processor else None
        self.ref = None  # the package's tokens per generation

    def mapped(self, count: int, dtype):
        """A page-locked, device-mapped host array and its device address (cudaHostAllocMapped)."""
        dtype = np.dtype(dtype)
        nbytes = max(count * dtype.itemsize, 8)
        ptr = self.rt.hostAlloc(nbytes, 2 | 1)  # cudaHostAllocMapped | cudaHostAllocPortable
        KEEP.append(ptr)
        arr = np.frombuffer((ctypes.c_byte * nbytes).from_address(ptr), dtype, count)
        arr[...] = 0
        dev = int(self.rt.pointerGetAttributes(ptr).devicePointer)
        return arr, dev

    def ro(self, graph_id: int, nosync: bool):
        ro = self.dec._run_options(graph_id)
        if nosync:
            ro.add_run_config_entry("disable_synchronize_execution_providers", "1")
        return ro


def loop(env: Env, step, name: str, first=None, check=True) -> dict:
    """gens generations: prefill (untimed), pick, then 63 x `step(tok, s) -> next tok` timed. first(tok0) is
    called once per generation after the prefill's pick (e.g. to launch ahead)."""
    dec, per, toks_all = env.dec, [], []
    for _g in range(env.gens):
        with dec.generation(), env.stream:
            logits = dec.prefill(env.x, reuse=True)
            tok = env.sampler.pick(logits, 0)
            toks = [tok]
            if first is not None:
                first(tok)
            for s in range(1, NEW):
                t0 = ns()
                tok = step(tok, s)
                t1 = ns()
                toks.append(tok)
                if s > SKIP:
                    per.append(t1 - t0)
            toks_all.append(toks)
    out = {"per_token_us": med(per), "n": len(per)}
    if check and env.ref is not None:
        out["tokens_match"] = toks_all == env.ref
    if name == "package":
        env.ref = toks_all
    print(f"  {name:28s} {out['per_token_us']} us/token  {out.get('tokens_match', '')}", flush=True)
    return out


def pipeline_rows(env: Env) -> dict:
    sec, det, tot = [], [], []
    for _ in range(env.gens):
        steps = env.pipe.generate_from_ids(env.ids, max_new_tokens=NEW, stop=()).steps[SKIP + 1:]
        sec += [s.seconds * 1e9 for s in steps]
        det += [s.detok_seconds * 1e9 for s in steps]
        tot += [(s.seconds + s.detok_seconds) * 1e9 for s in steps]
    gen = []
    for _ in range(env.gens):
        it = env.dec.generate(env.x, NEW, env.sampler)
        t0 = ns()
        for i, _tok in enumerate(it):
            t1 = ns()
            if i > SKIP:
                gen.append(t1 - t0)
            t0 = ns()
    from vlmdecode.decoders.cuda import replay_ms

    rep = [replay_ms(env.dec, env.x) * 1e6 for _ in range(3)]
    return {"pipeline_seconds_us": med(sec), "pipeline_detok_us": med(det), "pipeline_per_token_us": med(tot),
            "generate_next_us": med(gen), "replay_ms_us": med(rep)}


def parts(env: Env, nosync: bool) -> dict:
    """The package's step, cut at every host call (the same calls as BoundDecoder.step + Decoder.generate)."""
    dec = env.dec
    names = ["token_input", "feed_x", "feed_pos", "feed_mask", "run", "sync", "bookkeeping", "read_views",
             "read_copy", "byte_record", "pick", "stream_ctx", "total"]
    acc = {k: [] for k in names}
    ro = env.ro(dec.graph_id, nosync)

    def step(tok, s):
        a = ns()
        with dec.stream:
            b = ns()
            x = dec.token_input(tok, s)
            c = ns()
            t = dec.kv.position
            dec.x_step.write(x)
            d = ns()
            dec.pos_step.write_scalar(t)
            e = ns()
            dec.mask.write(dec._one, offset=t)
            f = ns()
            dec.session.run_with_iobinding(dec.io_step, ro)
            g = ns()
            if nosync:
                env.stream.synchronize()
            h = ns()
            dec.steps_run += 1
            dec.kv.advance(1)
            dec._count_graph_run()
            i = ns()
            flat = dec.logits_step.array.reshape(-1)[0: dec.vocab]
            j = ns()
            flat.get(out=dec.logits_host)
            k = ns()
            dec.transfers.add(dec.step_bytes)
            m = ns()
        n = ns()
        nxt = env.sampler.pick(dec.logits_host, s)
        o = ns()
        if s > SKIP:
            for key, v in zip(names, (c - b, d - c, e - d, f - e, g - f, h - g, i - h, j - i, k - j, m - k, o - n,
                                      (b - a) + (n - m), o - a)):
                acc[key].append(v)
        return nxt

    tot = loop(env, step, f"parts{'_nosync' if nosync else ''}")
    out = {k: med(v) for k, v in acc.items()}
    out["tokens_match"] = tot.get("tokens_match")
    return out


def events(env: Env) -> dict:
    """CUDA events: before feed, after feed, after run, after the logits read; device spans and idle gap."""
    cp, dec = env.cp, env.dec
    spans = {"feed_dev": [], "run_dev": [], "read_dev": [], "idle_between_steps": []}
    prev = [None]

    def step(tok, s):
        e0, e1, e2, e3 = (cp.cuda.Event() for _ in range(4))
        with dec.stream:
            e0.record()
            dec.feed(dec.token_input(tok, s))
            e1.record()
            dec.run_step()
            e2.record()
            out = dec._read_logits(dec.logits_step, reuse=True)  # syncs: e3 is recorded before it
            e3.record()
            e3.synchronize()
            dec.transfers.add(dec.step_bytes)
        nxt = env.sampler.pick(out, s)
        if s > SKIP:
            spans["feed_dev"].append(cp.cuda.get_elapsed_time(e0, e1) * 1e6)
            spans["run_dev"].append(cp.cuda.get_elapsed_time(e1, e2) * 1e6)
            spans["read_dev"].append(cp.cuda.get_elapsed_time(e2, e3) * 1e6)
            if prev[0] is not None:
                spans["idle_between_steps"].append(cp.cuda.get_elapsed_time(prev[0], e0) * 1e6)
        prev[0] = e3
        return nxt

    loop(env, step, "events")
    return {k: med(v) for k, v in spans.items()}


def graph_device(env: Env) -> dict:
    """The replay's device time with its launch already queued (behind a 2 ms spin kernel), and whether a
    run with disable_synchronize_execution_providers=1 returns before the GPU is done (host call time)."""
    cp, dec = env.cp, env.dec
    spin = env.mod.get_function("spin")
    out = {"graph_device_us": [], "run_call_nosync_behind_spin_us": [], "run_call_sync_behind_spin_us": []}
    with dec.generation(), env.stream:
        dec.prefill(env.x, reuse=True)
        dec.feed(dec.token_input(100))
        for _ in range(5):  # replays of the same step (idempotent): position stays
            a, b = cp.cuda.Event(), cp.cuda.Event()
            spin((1,), (1,), (np.int64(4_000_000),))
            a.record()
            t0 = ns()
            dec.session.run_with_iobinding(dec.io_step, env.ro(dec.graph_id, True))
            t1 = ns()
            b.record()
            b.synchronize()
            out["graph_device_us"].append(cp.cuda.get_elapsed_time(a, b) * 1e6)
            out["run_call_nosync_behind_spin_us"].append(t1 - t0)
            spin((1,), (1,), (np.int64(4_000_000),))
            t0 = ns()
            dec.session.run_with_iobinding(dec.io_step, env.ro(dec.graph_id, False))
            t1 = ns()
            env.stream.synchronize()
            out["run_call_sync_behind_spin_us"].append(t1 - t0)
    r = {k: med(v) for k, v in out.items()}
    r["spin_us_approx"] = "4e6 cycles (~2 ms at 1.98 GHz)"
    r["nosync_honoured"] = r["run_call_nosync_behind_spin_us"] < 500
    # back-to-back replays with and without ORT's own sync
    for nosync in (True, False):
        ro = env.ro(dec.graph_id, nosync)
        with dec.generation(), env.stream:
            dec.prefill(env.x, reuse=True)
            dec.feed(dec.token_input(100))
            for _ in range(5):
                dec.session.run_with_iobinding(dec.io_step, ro)
            a, b = cp.cuda.Event(), cp.cuda.Event()
            t0 = ns()
            a.record()
            for _ in range(200):
                dec.session.run_with_iobinding(dec.io_step, ro)
            b.record()
            b.synchronize()
            t1 = ns()
            r[f"back_to_back_{'nosync' if nosync else 'sync'}_device_us"] = round(cp.cuda.get_elapsed_time(a, b)
                                                                                   * 1e3 / 200, 2)
            r[f"back_to_back_{'nosync' if nosync else 'sync'}_host_us"] = round((t1 - t0) / 200 / 1e3, 2)
    print("  graph_device", r, flush=True)
    return r


def variants(env: Env) -> dict:
    cp, rt, dec, sp = env.cp, env.rt, env.dec, env.sp
    from vlmdecode.decoders.cuda import _graph_ids

    H2D, D2H = rt.memcpyHostToDevice, rt.memcpyDeviceToHost
    V, H = dec.vocab, dec.info.hidden_size
    pick = env.sampler.pick
    res = {}
    ro_sync, ro_nosync = env.ro(dec.graph_id, False), env.ro(dec.graph_id, True)
    host_logits = dec.logits_host
    hl_ptr, lg_ptr, lg_bytes = int(host_logits.ctypes.data), dec.logits_step.ptr, dec.logits_step.nbytes

    def guard(n, fn):  # a section's setup failing must not hide the other sections
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            res[f"section{n}"] = {"error": f"{type(e).__name__}: {e}"}

    def trial(name, fn, **kw):
        try:
            res[name] = loop(env, fn, name, **kw)
        except Exception as e:  # noqa: BLE001 -- one failed variant must not hide the others
            traceback.print_exc()
            res[name] = {"error": f"{type(e).__name__}: {e}"}

    # 0. the package: the loop body of Decoder.generate (step + pick)
    trial("package", lambda tok, s: pick(dec.step(dec.token_input(tok, s), reuse=True), s))

    # 1. ORT does not sync; the logits read (CuPy get) is the only sync
    def nosync(tok, s):
        with dec.stream:
            dec.feed(dec.token_input(tok, s))
            dec.session.run_with_iobinding(dec.io_step, ro_nosync)
            dec.steps_run += 1
            dec.kv.advance(1)
            out = dec._read_logits(dec.logits_step, reuse=True)
            dec.transfers.add(dec.step_bytes)
        return pick(out, s)
    trial("nosync", nosync)

    # 2. raw read: memcpyAsync + streamSynchronize with precomputed pointers (no CuPy views), sync / nosync
    def raw_read(ro):
        def step(tok, s):
            with dec.stream:
                dec.feed(dec.token_input(tok, s))
                dec.session.run_with_iobinding(dec.io_step, ro)
                dec.kv.advance(1)
                rt.memcpyAsync(hl_ptr, lg_ptr, lg_bytes, D2H, sp)
                rt.streamSynchronize(sp)
            return pick(host_logits, s)
        return step
    trial("raw_read_sync", raw_read(ro_sync))
    trial("raw_read_nosync", raw_read(ro_nosync))

    # 3. raw feed: 3 memcpyAsync from pinned staging with precomputed pointers, raw read, no stream context
    xs = dec.x_step._stage()  # the package's own staging array of x
    xs_ptr = int(xs.ctypes.data)
    ts = np.frombuffer(cp.cuda.alloc_pinned_memory(16), np.int64, 2)
    ts[1] = 1
    ts_ptr = int(ts.ctypes.data)
    x_ptr, pos_ptr, mask_ptr, x_bytes = dec.x_step.ptr, dec.pos_step.ptr, dec.mask.ptr, dec.x_step.nbytes
    table = dec._table

    def raw_feed(ro):
        def step(tok, s):
            t = dec.kv.position
            xs[:] = table[tok]
            ts[0] = t
            rt.memcpyAsync(x_ptr, xs_ptr, x_bytes, H2D, sp)
            rt.memcpyAsync(pos_ptr, ts_ptr, 8, H2D, sp)
            rt.memcpyAsync(mask_ptr + 8 * t, ts_ptr + 8, 8, H2D, sp)
            dec.session.run_with_iobinding(dec.io_step, ro)
            dec.kv.advance(1)
            rt.memcpyAsync(hl_ptr, lg_ptr, lg_bytes, D2H, sp)
            rt.streamSynchronize(sp)
            return pick(host_logits, s)
        return step
    trial("raw_feed_raw_read_sync", raw_feed(ro_sync))
    trial("raw_feed_raw_read_nosync", raw_feed(ro_nosync))

    # 4. one feed kernel reading mapped pinned staging (x, t) -> x, position, mask slot
    def _section4():
        feed_k = env.mod.get_function("feed")
        mx, mx_dev = env.mapped(H, np.float16)
        mt, mt_dev = env.mapped(1, np.int64)
        kargs = (np.uint64(mx_dev), np.uint64(mt_dev), np.uint64(x_ptr), np.uint64(pos_ptr), np.uint64(mask_ptr),
                 np.int32(H))

        def kernel_feed(tok, s):
            t = dec.kv.position
            mx[:] = table[tok]
            mt[0] = t
            feed_k((1,), (64,), kargs)
            dec.session.run_with_iobinding(dec.io_step, ro_nosync)
            dec.kv.advance(1)
            rt.memcpyAsync(hl_ptr, lg_ptr, lg_bytes, D2H, sp)
            rt.streamSynchronize(sp)
            return pick(host_logits, s)
        trial("kernel_feed_raw_read_nosync", kernel_feed)
    guard(4, _section4)

    # 5. device argmax: 1 kernel + 8 bytes back (greedy fast path), raw feed
    def _section5():
        am = env.mod.get_function("argmax1")
        hid = np.frombuffer(cp.cuda.alloc_pinned_memory(8), np.int64, 1)
        id_dev = cp.zeros(1, cp.int64)
        aargs = (np.uint64(lg_ptr), np.int32(V), np.uint64(id_dev.data.ptr))
        hid_ptr = int(hid.ctypes.data)

        def device_argmax(tok, s):
            t = dec.kv.position
            xs[:] = table[tok]
            ts[0] = t
            rt.memcpyAsync(x_ptr, xs_ptr, x_bytes, H2D, sp)
            rt.memcpyAsync(pos_ptr, ts_ptr, 8, H2D, sp)
            rt.memcpyAsync(mask_ptr + 8 * t, ts_ptr + 8, 8, H2D, sp)
            dec.session.run_with_iobinding(dec.io_step, ro_nosync)
            dec.kv.advance(1)
            am((1,), (256,), aargs)
            rt.memcpyAsync(hid_ptr, int(id_dev.data.ptr), 8, D2H, sp)
            rt.streamSynchronize(sp)
            return int(hid[0])
        trial("raw_feed_device_argmax", device_argmax)
    guard(5, _section5)

    # 6. zero copies: inputs and/or logits bound to mapped pinned host memory (a new binding + graph id)
    def _section6():
        hx, hx_dev = env.mapped(H, np.float16)
        hpos, hpos_dev = env.mapped(1, np.int64)
        hmask, hmask_dev = env.mapped(dec.max_length, np.int64)
        hlog, hlog_dev = env.mapped(V, np.float16)
        S = env.x.shape[1]

        def zero_copy(inputs: bool, outputs: bool, ro_kind: str):
            io = dec.session.io_binding()
            f16, i64 = np.float16, np.int64
            if inputs:
                io.bind_input(dec.name_x, "cuda", 0, f16, list(dec.x_step.shape), hx_dev)
                io.bind_input(dec.name_pos, "cuda", 0, i64, [1, 1], hpos_dev)
                io.bind_input(dec.name_mask, "cuda", 0, i64, [1, dec.max_length], hmask_dev)
            else:
                dec.x_step.bind_input(io, dec.name_x)
                dec.pos_step.bind_input(io, dec.name_pos)
                dec.mask.bind_input(io, dec.name_mask)
            if outputs:
                io.bind_output(dec.name_logits, "cuda", 0, f16, list(dec.logits_step.shape), hlog_dev)
            else:
                dec.logits_step.bind_output(io, dec.name_logits)
            dec.kv.bind(io, dec.past_names, dec.present_names)
            gid = next(_graph_ids)
            ro = env.ro(gid, ro_kind == "nosync")
            warm = env.ro(gid, False)
            runs = [0]

            def first(tok0):
                if inputs:
                    hmask[:] = 0
                    hmask[:S] = 1

            def step(tok, s):
                t = dec.kv.position
                if inputs:
                    hx[:] = table[tok]
                    hpos[0] = t
                    hmask[t] = 1
                else:
                    xs[:] = table[tok]
                    ts[0] = t
                    rt.memcpyAsync(x_ptr, xs_ptr, x_bytes, H2D, sp)
                    rt.memcpyAsync(pos_ptr, ts_ptr, 8, H2D, sp)
                    rt.memcpyAsync(mask_ptr + 8 * t, ts_ptr + 8, 8, H2D, sp)
                runs[0] += 1
                dec.session.run_with_iobinding(io, ro if runs[0] > 3 else warm)
                dec.kv.advance(1)
                if outputs:
                    if ro_kind == "nosync":
                        rt.streamSynchronize(sp)
                    return pick(hlog, s)
                rt.memcpyAsync(hl_ptr, lg_ptr, lg_bytes, D2H, sp)
                rt.streamSynchronize(sp)
                return pick(host_logits, s)
            return step, first

        for inputs, outputs, kind in ((True, False, "nosync"), (False, True, "sync"), (False, True, "nosync"),
                                      (True, True, "sync"), (True, True, "nosync")):
            name = "zero_copy_" + "_".join(w for w, on in (("in", inputs), ("out", outputs)) if on) + f"_{kind}"
            try:
                fn, first = zero_copy(inputs, outputs, kind)
                trial(name, fn, first=first)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                res[name] = {"error": f"{type(e).__name__}: {e}"}
    guard(6, _section6)

    # 7. detokenizer: serial (after the step) vs overlapped (the next step launched before it runs)
    def _section7():
        detok = env.detok
        if detok is not None:
            rf = raw_feed(ro_nosync)

            def serial(tok, s):
                nxt = rf(tok, s)
                detok.put(nxt)
                return nxt

            def launch(tok):
                t = dec.kv.position
                xs[:] = table[tok]
                ts[0] = t
                rt.memcpyAsync(x_ptr, xs_ptr, x_bytes, H2D, sp)
                rt.memcpyAsync(pos_ptr, ts_ptr, 8, H2D, sp)
                rt.memcpyAsync(mask_ptr + 8 * t, ts_ptr + 8, 8, H2D, sp)
                dec.session.run_with_iobinding(dec.io_step, ro_nosync)
                dec.kv.advance(1)
                rt.memcpyAsync(hl_ptr, lg_ptr, lg_bytes, D2H, sp)

            def ahead(tok, s):
                rt.streamSynchronize(sp)  # the step launched for `tok` (before the previous detok ran)
                nxt = pick(host_logits, s)
                if s + 1 < NEW:
                    launch(nxt)
                detok.put(nxt)
                return nxt

            detok.reset()
            trial("raw_serial_plus_detok", serial)
            detok.reset()
            trial("raw_launch_ahead_plus_detok", ahead, first=launch)
            detok.reset()
            trial("package_plus_detok", lambda tok, s: (lambda n: (detok.put(n), n)[1])(
                pick(dec.step(dec.token_input(tok, s), reuse=True), s)))
    guard(7, _section7)

    return res


def micro(env: Env) -> dict:
    """Single host calls, each timed alone 400 times."""
    dec, cp = env.dec, env.cp
    row = dec.logits_host.copy()
    tok = env.sampler.pick(row, 1)

    def t(fn, n=400):
        xs = []
        for _ in range(n):
            a = ns()
            fn()
            xs.append(ns() - a)
        return med(xs)
    detok = env.detok
    toks = (env.ref or [[tok] * NEW])[0]
    it = iter(toks * 20)
    pin = np.frombuffer(cp.cuda.alloc_pinned_memory(8), np.int64, 1)
    out = {
        "pick_greedy_f16": t(lambda: env.sampler.pick(row, 1)),
        "argmax_f16_int": t(lambda: int(row.argmax())),
        "token_input": t(lambda: dec.token_input(tok, 1)),
        "stream_enter_exit": t(lambda: dec.stream.__enter__() and dec.stream.__exit__(None, None, None)),
        "byte_record": t(lambda: dec.transfers.add(dec.step_bytes)),
        "cupy_view_reshape_slice": t(lambda: dec.logits_step.array.reshape(-1)[0: dec.vocab]),
        "memcpyAsync_h2d_8B": t(lambda: env.rt.memcpyAsync(dec.pos_step.ptr, int(pin.ctypes.data), 8,
                                                           env.rt.memcpyHostToDevice, env.sp)),
        "streamSynchronize_idle": t(lambda: env.rt.streamSynchronize(env.sp)),
        "run_options_new": t(lambda: dec._run_options(dec.graph_id)),
        "perf_counter_ns": t(ns),
    }
    dec.transfers.steps.clear()
    if detok is not None:
        detok.reset()
        out["detok_put"] = t(lambda: detok.put(next(it)), n=min(400, len(toks) * 20))
    print("  micro", out, flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", nargs="?", default=None)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--gens", type=int, default=5)
    a = p.parse_args(argv)
    env = Env(a.preset, a.gens)
    out = {"preset": a.preset, "context": CONTEXT, "new_tokens": NEW, "skip": SKIP, "gens": a.gens}
    for name, fn in (("pipeline", lambda: pipeline_rows(env)), ("variants", lambda: variants(env)),
                     ("parts", lambda: parts(env, False)), ("parts_nosync", lambda: parts(env, True)),
                     ("events", lambda: events(env)), ("graph_device", lambda: graph_device(env)),
                     ("micro", lambda: micro(env)), ("variants_again", lambda: variants(env))):
        print(f"== {name}", flush=True)
        try:
            out[name] = fn()
            if name in ("pipeline", "parts", "parts_nosync", "events"):
                print("  ", out[name], flush=True)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            out[name] = {"error": f"{type(e).__name__}: {e}"}
    from vlmdecode.profiling import provenance

    out["provenance"] = provenance({a.preset: env.folder})
    text = json.dumps(out, indent=2, default=str)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
