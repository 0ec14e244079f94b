"""H200: can the native step pull its next GEMVs' weights into L2 while latency-bound kernels run? (issue 16)

Answer (data/results/h200_l2_prefetch*.json, README there): barely. A GEMV whose 16-32 MB of weights were just
prefetched runs ~1 us faster than cold (gate_up 14.6 -> 13.6-13.9 us between events), so the GEMVs at these sizes
are not HBM-bound; and in the real step (data/results/h200_native_l2.json, made with the prefetch wiring of
branch l2pf, which did not land) issuing the prefetch from a kernel on the step's path costs that kernel more
than the GEMVs gain. This script has its own prefetch kernels; the GEMVs are the package's.

The real gate_up (32 MB) and down (16 MB, split-K 8) GEMVs of gemma3-1b (hidden 1152, intermediate 6912, random
fp16 weights, `native.kernels.gemv` with the default `Shapes`), and both back to back over one 48 MB buffer
("mlp"), each timed alone between two CUDA events (median of REPS, after a warm-up; the empty-kernel gap between
two events is reported as `event_gap_us`, not subtracted):
    cold        after flushing the L2 (a 200 MB buffer streamed with plain loads; any evict_last line of the
                weights first reset to evict_normal with applypriority)
    warm        right after the same kernel read the weights (no flush)
    issue       the prefetch kernel itself (`l2_prefetch_t<MODE, CHUNK>` here: MODE 0 bulk
                cp.async.bulk.prefetch.L2 pieces of CHUNK bytes, 1 bulk with an evict_last policy, 2 one
                prefetch.global.L2::evict_last every CHUNK bytes) on a wide grid (8 blocks x 256 threads an SM, as
                the qkv GEMV) and a narrow one (16 x 128, as attention_cl at gemma3-1b)
    after       flush, prefetch, a spin of `delay` us (the latency-bound kernels the prefetch would overlap),
                then the GEMV(s)
    survive     flush, prefetch, 20 us, then `stream_mb` MB of other weights read with __ldcs (as qkv + o read
                theirs), then the GEMV(s)
  --parts resident,shapes (written to $OUT/h200_l2_prefetch_shapes.json):
    resident    each reader cold, right after a prefetch (bulk16k and line128_evict_last, wide grid, 0 and 20 us
                later), and L2-resident (flush, the reader once, 30 us, then timed: the host has queued it by
                then); readers: the GEMVs and `stream32`, a plain __ldcs stream over gate_up's 32 MB (does the
                prefetch land in L2, and how fast is L2 read by a kernel that does nothing else)
    shapes      gate_up and down with other block shapes (warps, rows a warp, PF): cold vs prefetched (bulk16k,
                wide, 10 us): which shape reads L2 fastest
CuPy only. Writes $OUT/h200_l2_prefetch.json (after each section, so a failure keeps what ran).
Usage: OUT=/tmp/out PYTHONPATH=. python3 scripts/h200_l2_prefetch.py [--parts baseline,variants,survive]
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import native_kernel_bench as nkb  # noqa: E402  (provenance, copy bandwidth; nothing runs at import)

H, I, SPLITS = 1152, 6912, 8
REPS = 25
FLUSH_BYTES = 200 << 20
DELAYS_US = (0, 5, 10, 20)
PARTS = ("baseline", "variants", "survive", "resident", "shapes")
GATE_UP_SHAPES = [(8, 2, 0), (8, 2, 2), (4, 2, 0), (4, 2, 2), (8, 4, 0), (8, 4, 2), (8, 2, 1)]
DOWN_SHAPES = [(4, 1, 2), (8, 1, 2), (4, 2, 2), (4, 1, 0), (8, 2, 1), (2, 1, 2)]
STREAM_MB = (0, 6, 12, 24)
# variant name -> (MODE, CHUNK) of l2_prefetch_t; the riskier (largest pieces) last
VARIANTS = {"bulk16k": (0, 16384), "bulk4k": (0, 4096), "bulk16k_evict_last": (1, 16384),
            "line128_evict_last": (2, 128), "line32_evict_last": (2, 32), "bulk64k": (0, 65536)}

KERNELS = r"""
// L2 prefetch of [p, p + bytes): p 16-byte aligned, bytes a multiple of 16 (NULL or 0: none).
// Block b of the grid (flattened) takes units [U b / nb, U (b + 1) / nb) of the U = bytes / 16 (equal shares
// that cover the region exactly); its threads take its pieces round-robin. MODE 0: bulk prefetches of <= CHUNK
// bytes (sm_90 cp.async.bulk.prefetch.L2); 1: the same with an L2::evict_last cache policy; 2: one
// prefetch.global.L2::evict_last every CHUNK bytes. Only a hint: results never depend on it.
template <int MODE, int CHUNK>
__device__ __forceinline__ void l2_prefetch_t(const void* p, const unsigned long long bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    static_assert(CHUNK % 16 == 0 && CHUNK > 0, "prefetch pieces are whole 16-byte units");
    if (p == NULL || bytes == 0) return;
    const unsigned long long units = bytes >> 4;
    const unsigned long long nb = (unsigned long long)gridDim.x * gridDim.y * gridDim.z;
    const unsigned long long b = blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned long long u0 = units * b / nb, u1 = units * (b + 1) / nb;
    const unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const char* base = reinterpret_cast<const char*>(p);
    constexpr unsigned long long CU = CHUNK / 16;  // units a piece
    unsigned long long policy = 0;
    if (MODE == 1) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    for (unsigned long long u = u0 + (unsigned long long)tid * CU; u < u1; u += (unsigned long long)nt * CU) {
        const char* a = base + u * 16;
        if (MODE == 2) {
            asm volatile("prefetch.global.L2::evict_last [%0];" :: "l"(a) : "memory");
        } else {
            const unsigned n = (unsigned)((u1 - u < CU ? u1 - u : CU) * 16);
            if (MODE == 1)
                asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;"
                             :: "l"(a), "r"(n), "l"(policy) : "memory");
            else
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(a), "r"(n) : "memory");
        }
    }
#endif
}

template <int MODE, int CHUNK>
__global__ void prefetch(const void* p, const unsigned long long bytes) { l2_prefetch_t<MODE, CHUNK>(p, bytes); }

// streams n16 uint4s with plain loads (allocating in L2 at normal priority); sink written only if never true
extern "C" __global__ void flush_read(const uint4* p, const unsigned long long n16, unsigned* sink) {
    unsigned acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n16;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

// the same with __ldcs (evict-first), as the GEMVs read their weights
extern "C" __global__ void stream_cs(const uint4* p, const unsigned long long n16, unsigned* sink) {
    unsigned acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n16;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

// every 128-byte line of [p, p + bytes) back to evict_normal (lines not in L2: no-op)
extern "C" __global__ void unpin(const char* p, const unsigned long long bytes) {
    for (unsigned long long o = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) * 128; o < bytes;
         o += (unsigned long long)gridDim.x * blockDim.x * 128)
        asm volatile("applypriority.global.L2::evict_normal [%0], 128;" :: "l"(p + o) : "memory");
}

extern "C" __global__ void spin(const long long ns) {
    long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}

extern "C" __global__ void empty() {}
"""


class Bench:
    def __init__(self):
        import cupy

        from vlmdecode.native import kernels as K
        from vlmdecode.native.cuda_src import common
        from vlmdecode.native.shapes import Shapes

        self.cp, self.K = cupy, K
        dev = cupy.cuda.Device()
        self.l2_bytes = int(dev.attributes["L2CacheSize"])
        self.sms = int(dev.attributes["MultiProcessorCount"])
        names = [f"prefetch<{m},{c}>" for m, c in VARIANTS.values()]
        mod = cupy.RawModule(code=common.CODE + KERNELS, options=("-std=c++17",), name_expressions=names)
        self.pf = {v: mod.get_function(f"prefetch<{m},{c}>") for v, (m, c) in VARIANTS.items()}
        self.fn = {n: mod.get_function(n) for n in ("flush_read", "stream_cs", "unpin", "spin", "empty")}
        self.sink = cupy.zeros(1, cupy.uint32)
        self.flush_buf = cupy.ones(FLUSH_BYTES // 4, cupy.uint32)
        self.other = cupy.ones((max(STREAM_MB) << 20) // 4, cupy.uint32)  # the "other weights" streamed
        sh = Shapes()
        gu, dn = 2 * I * H, H * I
        self.w = (cupy.random.standard_normal(gu + dn, dtype=cupy.float32) * 0.05).astype(cupy.float16)
        w_gu, w_dn = self.w[:gu].reshape(2 * I, H), self.w[gu:].reshape(H, I)
        f32 = lambda n: cupy.random.standard_normal(n, dtype=cupy.float32)  # noqa: E731
        resid, dlt, wa, wb, self.vec = f32(H), f32(H), f32(H), f32(H), f32(I)
        z = lambda n: cupy.zeros(n, cupy.float32)  # noqa: E731
        y_gu, y_dn, r_out = z(I), z((SPLITS, H)), z(H)
        fns = K.compile_module({(K.loads_per_lane(H), s[1], K.EPI_GELU, s[2]) for s in GATE_UP_SHAPES}
                               | {(K.loads_per_lane(I // SPLITS), s[1], K.EPI_PLAIN, s[2]) for s in DOWN_SHAPES}, set())
        self.gate_up = lambda s: K.gemv(fns, "gate_up", w_gu, I, H, epi=K.EPI_GELU, y=y_gu, src=resid,  # noqa: E731
                                        delta=dlt, delta_w=wa, norm_w=wb, resid_out=r_out, warps=s[0], rpw=s[1],
                                        prefetch_weights=s[2])
        self.down = lambda s: K.gemv(fns, "down", w_dn, H, I // SPLITS, splits=SPLITS, y=y_dn,  # noqa: E731
                                     src=self.vec, warps=s[0], rpw=s[1], prefetch_weights=s[2])
        gate_up, down = self.gate_up(sh.gate_up), self.down(sh.down)
        # reader name -> (launches, first byte offset in self.w, bytes)
        self.readers = {"gate_up": ([gate_up], 0, 2 * gu), "down": ([down], 2 * gu, 2 * dn),
                        "mlp": ([gate_up, down], 0, 2 * (gu + dn))}
        stream32 = lambda: self.fn["stream_cs"]((8 * self.sms,), (256,), (self._ptr(), np.uint64(2 * gu // 16),  # noqa: E731
                                                                         self.sink))
        self.stream32 = ([stream32], 0, 2 * gu)
        self.grids = {"wide": (8 * self.sms, 256), "narrow": (16, 128)}

    def _ptr(self, offset=0):
        return np.uint64(self.w.data.ptr + offset)

    def flush(self):
        self.fn["unpin"]((4 * self.sms,), (256,), (self._ptr(), np.uint64(self.w.nbytes)))
        n16 = self.flush_buf.nbytes // 16
        self.fn["flush_read"]((8 * self.sms,), (256,), (self.flush_buf, np.uint64(n16), self.sink))

    def prefetch(self, variant, grid, offset, nbytes):
        blocks, threads = self.grids[grid]
        self.pf[variant]((blocks,), (threads,), (self._ptr(offset), np.uint64(nbytes)))

    def spin(self, us):
        if us:
            self.fn["spin"]((1,), (32,), (np.int64(int(us * 1000)),))

    def stream(self, mb):
        if mb:
            self.fn["stream_cs"]((8 * self.sms,), (256,), (self.other, np.uint64((mb << 20) // 16), self.sink))

    def timed(self, pre, target, reps=REPS):
        """us between events around `target` (callables), `pre` run before each; median of reps after 2."""
        cp = self.cp
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for _ in range(reps + 2):
            for f in pre:
                f()
            e0.record()
            for f in target:
                f()
            e1.record()
            e1.synchronize()
            times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
        return round(float(np.median(times[2:])), 3)


def main() -> None:
    parts = sys.argv[sys.argv.index("--parts") + 1].split(",") if "--parts" in sys.argv else list(PARTS[:3])
    if set(parts) - set(PARTS):
        raise SystemExit(f"--parts: some of {PARTS}, got {parts}")
    name = "h200_l2_prefetch.json" if "resident" not in parts else "h200_l2_prefetch_shapes.json"
    t_start = time.time()
    b = Bench()
    out: dict = {"provenance": nkb.provenance(), "parts": parts, "l2_cache_bytes": b.l2_bytes, "sms": b.sms,
                 "copy_tb_per_s": nkb.copy_tb_per_s(), "reps": REPS, "flush_bytes": FLUSH_BYTES,
                 "variants": {k: {"mode": m, "chunk": c} for k, (m, c) in VARIANTS.items()},
                 "grids": {k: list(v) for k, v in b.grids.items()},
                 "readers": {k: {"bytes": n, "kernels": [x.name for x in ls], "grids": [list(x.grid) for x in ls]}
                             for k, (ls, _, n) in b.readers.items()}}
    out["provenance"]["method"] = ("each case timed alone between two CUDA events after its set-up kernels "
                                   f"(median of {REPS} after 2 warm-ups); L2 flushed by streaming 200 MB")
    print(f"L2 cache {b.l2_bytes / 2**20:.1f} MiB, {b.sms} SMs, copy {out['copy_tb_per_s']:.2f} TB/s", flush=True)
    dest = Path(os.environ.get("OUT", "/tmp/out"))
    dest.mkdir(parents=True, exist_ok=True)

    def save(section):
        out["elapsed_s"] = round(time.time() - t_start, 1)
        (dest / name).write_text(json.dumps(out, indent=2))
        print(f"[{out['elapsed_s']:6.1f}s] {section} saved", flush=True)

    out["event_gap_us"] = b.timed([b.flush], [lambda: b.fn["empty"]((1,), (32,), ())])
    print(f"event gap (an empty kernel between two events) {out['event_gap_us']:.2f} us", flush=True)
    for part in parts:
        globals()[f"part_{part}"](b, out)
        save(part)


def part_baseline(b, out):
    base = out["baseline"] = {}
    for r, (ls, _, n) in b.readers.items():
        cold = b.timed([b.flush], ls)
        warm = b.timed(ls, ls)  # the host may still be queueing the timed launch: see part_resident
        base[r] = {"cold_us": cold, "warm_us": warm, "cold_tb_s": round(n / cold / 1e6, 3),
                   "warm_tb_s": round(n / warm / 1e6, 3)}
        print(f"{r:8s} cold {cold:7.2f} us ({n / cold / 1e6:.2f} TB/s)  warm {warm:7.2f} us "
              f"({n / warm / 1e6:.2f} TB/s)", flush=True)


def _after(b, out, v):
    issue, after = out.setdefault("issue_us", {}), out.setdefault("after", {})
    for grid in b.grids:
        for r, (ls, off, n) in b.readers.items():
            pf = lambda grid=grid, off=off, n=n: b.prefetch(v, grid, off, n)  # noqa: E731
            issue[f"{v} {grid} {r}"] = b.timed([b.flush], [pf])
            row = after.setdefault(f"{v} {grid} {r}", {})
            for d in DELAYS_US:
                row[f"delay{d}"] = b.timed([b.flush, pf, lambda d=d: b.spin(d)], ls)
            row["with_prefetch_us"] = b.timed([b.flush], [pf] + ls)  # prefetch then GEMV, no gap
            print(f"{v:20s} {grid:6s} {r:8s} issue {issue[f'{v} {grid} {r}']:7.2f} us  after "
                  + " ".join(f"{k} {x:7.2f}" for k, x in row.items())
                  + f"  (cold {out['baseline'][r]['cold_us']:.2f})", flush=True)


def part_variants(b, out):
    for v in VARIANTS:
        if v != "bulk64k":  # the largest pieces last (after part_survive): a refused size must not cost the others
            _after(b, out, v)


def part_survive(b, out):
    surv = out["survive"] = {}
    for v in ("bulk16k", "bulk16k_evict_last", "line128_evict_last"):
        for r in ("gate_up", "mlp"):
            ls, off, n = b.readers[r]
            pf = lambda v=v, off=off, n=n: b.prefetch(v, "wide", off, n)  # noqa: E731
            row = surv.setdefault(f"{v} wide {r}", {})
            for mb in STREAM_MB:
                row[f"stream{mb}mb"] = b.timed([b.flush, pf, lambda: b.spin(20), lambda mb=mb: b.stream(mb)], ls)
            print(f"survive {v:20s} {r:8s} " + " ".join(f"{k} {x:7.2f}" for k, x in row.items()), flush=True)
    if "bulk64k" in VARIANTS:
        _after(b, out, "bulk64k")


def part_resident(b, out):
    res = out["resident"] = {}
    for r, (ls, off, n) in {**b.readers, "stream32": b.stream32}.items():
        row = res[r] = {"bytes": n, "cold_us": b.timed([b.flush], ls),
                        "resident_us": b.timed([b.flush] + ls + [lambda: b.spin(30)], ls)}
        for v in ("bulk16k", "line128_evict_last"):
            pf = lambda v=v, off=off, n=n: b.prefetch(v, "wide", off, n)  # noqa: E731
            for d in (0, 20):
                row[f"{v} delay{d}_us"] = b.timed([b.flush, pf, lambda d=d: b.spin(d)], ls)
        print(f"resident {r:9s} " + " ".join(f"{k} {x:7.2f}" for k, x in row.items() if k != "bytes"), flush=True)


def part_shapes(b, out):
    res = out["shapes"] = {}
    for r, make, shapes, off, n in (("gate_up", b.gate_up, GATE_UP_SHAPES, 0, b.readers["gate_up"][2]),
                                    ("down", b.down, DOWN_SHAPES, b.readers["down"][1], b.readers["down"][2])):
        for s in shapes:
            ls = [make(s)]
            pf = lambda off=off, n=n: b.prefetch("bulk16k", "wide", off, n)  # noqa: E731
            row = res[f"{r} {s[0]}x{s[1]} pf{s[2]}"] = {
                "grid": list(ls[0].grid), "registers": int(ls[0].fn.num_regs), "cold_us": b.timed([b.flush], ls),
                "prefetched_us": b.timed([b.flush, pf, lambda: b.spin(10)], ls),
                "resident_us": b.timed([b.flush] + ls + [lambda: b.spin(30)], ls)}
            print(f"shape {r:8s} {s} " + " ".join(f"{k} {x}" for k, x in row.items()), flush=True)


if __name__ == "__main__":
    main()
