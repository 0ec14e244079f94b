"""H200 probe: how fast can one kernel stream a decode step's weight matrix, and where do the native GEMVs lose?

For each of gemma3-1b's projection sizes (qkv 3.5 MB, o 2.4 MB, down 15.9 MB, gate_up 31.9 MB) it times, per
launch, kernels replayed back to back in one CUDA graph over 4 rotating copies of the weight (more than the
L2 holds, so every launch reads HBM):
  rd<NV> x blocks an SM  a plain streaming read (16-byte loads, NV in flight a thread, grid-stride), no math:
                         the read rate a kernel of that size can reach, ramp and tail included
  bulk<STAGE> x blocks   the copy engine (cp.async.bulk) filling a ring of shared-memory stages, each block a
                         contiguous share, consumers only release the stages: gemv_st's transport alone
  gemv                   the native decoder's register GEMV at its default shape
(h200_stream_probe_gemv_st_9e1636e.json holds the same probe run at branch `gemv-st`'s commit 9e1636e, with rows
for its streaming GEMV gemv_st: slower at every size; it did not land.)
Writes $OUT/h200_stream_probe.json (us per launch, TB/s). `--gemv-sweep`: the register gemv of gate_up and down
at other block shapes, splits and grids instead (h200_gemv_sweep.json); `--rows`: gate_up read in the gemv's own
access pattern, with and without its arithmetic (h200_rows_probe.json; not yet run). CuPy only.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

PROBE = r"""
#include <cuda_fp16.h>
template <int NV>
__global__ void __launch_bounds__(256) rd(const uint4* __restrict__ w, const long long n16, unsigned* out) {
    unsigned acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x * NV;
    for (long long i = (long long)blockIdx.x * blockDim.x * NV + threadIdx.x; i < n16; i += stride) {
        uint4 v[NV];
#pragma unroll
        for (int j = 0; j < NV; ++j)
            v[j] = (i + j * blockDim.x < n16) ? __ldcs(w + i + j * blockDim.x) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < NV; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    if (acc == 0x12345678u) out[0] = acc;  // keeps the loads
}

__device__ __forceinline__ unsigned sa(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

__global__ void __launch_bounds__(288, 1) bulk(const unsigned char* __restrict__ w, const long long bytes,
                                               const int stage, const int stages, unsigned* out) {
    extern __shared__ __align__(128) unsigned char sm[];
    unsigned long long* full = reinterpret_cast<unsigned long long*>(sm + (size_t)stages * stage);
    unsigned long long* empty = full + stages;
    const long long per = (bytes / gridDim.x + 15) / 16 * 16;
    const long long b0 = per * blockIdx.x, b1 = min(bytes, b0 + per);
    const int n = b1 > b0 ? (int)((b1 - b0 + stage - 1) / stage) : 0;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x / 32 - 1;
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(full + s)));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(sa(empty + s)), "r"(nw));
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    auto wait = [&](unsigned long long* bar, unsigned par) {
        unsigned done = 0;
        while (!done)
            asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                         "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(sa(bar)), "r"(par) : "memory");
    };
    if (warp == nw) {
        if (lane == 0)
            for (int s = 0; s < n; ++s) {
                if (s >= stages) wait(empty + s % stages, (unsigned)((s / stages - 1) & 1));
                const long long a = b0 + (long long)s * stage;
                const unsigned len = (unsigned)min((long long)stage, b1 - a);
                const unsigned bar = sa(full + s % stages), dst = sa(sm + (size_t)(s % stages) * stage);
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(len) : "memory");
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                             :: "r"(dst), "l"(w + a), "r"(len), "r"(bar) : "memory");
            }
        return;
    }
    unsigned acc = 0;
    for (int s = 0; s < n; ++s) {
        wait(full + s % stages, (unsigned)((s / stages) & 1));
        acc ^= reinterpret_cast<const unsigned*>(sm + (size_t)(s % stages) * stage)[threadIdx.x];
        __syncwarp();
        if (lane == 0)
            asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(sa(empty + s % stages)) : "memory");
    }
    if (acc == 0x12345678u) out[0] = acc;
}

// the register gemv's access pattern without its prologue or epilogues: warp w of block b reads rows
// (g * warps + w) * RPW + i of group g = b, b + grid, .. (NV 16-byte loads a lane a row, as gemv<NV, RPW, ..>);
// DOT 0: the loads only (XOR), DOT 1: + the dot with a shared fp32 vector, warp sums and one store a row
template <int NV, int RPW, int DOT>
__global__ void __launch_bounds__(256) rdrow(const __half* __restrict__ W, const int rows, const int k,
                                            const float* x, float* y) {
    extern __shared__ float vec[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (DOT) {
        for (int i = threadIdx.x; i < k; i += blockDim.x) vec[i] = x[i];
        __syncthreads();
    }
    const int n_groups = (rows + nw * RPW - 1) / (nw * RPW);
    unsigned xr = 0;
    for (int g = blockIdx.x; g < n_groups; g += gridDim.x) {
        uint4 w[RPW][NV];
#pragma unroll
        for (int i = 0; i < RPW; ++i)
#pragma unroll
            for (int j = 0; j < NV; ++j) {
                const int r = (g * nw + warp) * RPW + i, col = (lane + 32 * j) * 8;
                w[i][j] = (r < rows && col < k) ? __ldcs(reinterpret_cast<const uint4*>(W + (size_t)r * k + col))
                                                : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
        for (int i = 0; i < RPW; ++i) {
            const int r = (g * nw + warp) * RPW + i;
            if (DOT) {
                float acc = 0.f;
#pragma unroll
                for (int j = 0; j < NV; ++j) {
                    const int col = (lane + 32 * j) * 8;
                    if (col < k) {
                        const __half2* h = reinterpret_cast<const __half2*>(&w[i][j]);
#pragma unroll
                        for (int q = 0; q < 4; ++q) {
                            const float2 f = __half22float2(h[q]);
                            acc = fmaf(f.x, vec[col + 2 * q], fmaf(f.y, vec[col + 2 * q + 1], acc));
                        }
                    }
                }
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
                if (lane == 0 && r < rows) y[r] = acc;
            } else {
#pragma unroll
                for (int j = 0; j < NV; ++j) xr ^= w[i][j].x ^ w[i][j].y ^ w[i][j].z ^ w[i][j].w;
            }
        }
    }
    if (!DOT && xr == 0x12345678u) y[0] = 1.f;
}
"""

SIZES = {"qkv": (1536, 1152), "o": (1152, 1024), "down": (1152, 6912), "gate_up": (13824, 1152)}
COPIES = 4


def provenance(method: str) -> dict:
    """native_kernel_bench's provenance (GPU, driver, CUDA, CuPy, git sha, command, date) with this probe's method."""
    import native_kernel_bench

    return {**native_kernel_bench.provenance(), "method": method}


METHOD = (f"each launch reads one of {COPIES} rotating weight copies (past the L2); 20 x {COPIES} launches captured in "
          "one CUDA graph (plain launches), replayed 5 times; median us per launch")


def write(name: str, obj: dict) -> None:
    import native_kernel_bench

    native_kernel_bench.write_result(name, obj)


def size_inputs(cupy, rows: int, k: int, splits: int):
    """A projection's probe inputs: COPIES fp16 weight copies [rows, k] (host and device), the vector x, its float64
    reference per split-K slice [splits, rows], a zeroed y and the size's result dict."""
    k_len = k // splits
    Wh = [(np.random.default_rng(c).standard_normal((rows, k)) * 0.05).astype(np.float16) for c in range(COPIES)]
    xh = np.random.default_rng(9).standard_normal(k).astype(np.float32)
    ref = (Wh[0].astype(np.float64).reshape(rows, splits, k_len)
           * xh.astype(np.float64).reshape(1, splits, k_len)).sum(-1).T  # [splits, rows]
    r: dict = {"bytes": int(Wh[0].nbytes), "splits": splits, "us": {}, "max_rel_err": {}}
    return Wh, [cupy.asarray(w) for w in Wh], cupy.asarray(xh), ref, cupy.zeros(splits * rows, cupy.float32), r


def timed(launches, reps: int = 20, rounds: int = 5) -> float:
    """us per launch: `reps` x COPIES launches (one callable a weight copy) captured in one graph, replayed
    `rounds` times, median (h200_native.time_graph, plain launches)."""
    import h200_native

    return 1e3 * h200_native.time_graph(list(launches) * reps, reps=rounds)


def gemv_sweep() -> None:
    """The register gemv at other block shapes and grids (a grid-stride kernel: any grid is correct) for gate_up
    and down, the two largest, with the fold prologue of the step where it has one. -> h200_gemv_sweep.json"""
    import dataclasses

    import cupy

    from vlmdecode.native import kernels as K

    H, I = 1152, 6912
    rng = np.random.default_rng(0)
    vec = lambda n: cupy.asarray(rng.standard_normal(n).astype(np.float32))  # noqa: E731
    resid, o, w1, w2, m = vec(H), vec(H), vec(H) + 2, vec(H) + 2, vec(I)
    y, out = cupy.zeros(8 * I, cupy.float32), cupy.zeros(H, cupy.float32)
    res: dict = {"provenance": provenance(METHOD), "copies": COPIES, "gate_up": {}, "down": {}}
    Wg = [cupy.asarray((np.random.default_rng(c).standard_normal((2 * I, H)) * 0.05).astype(np.float16))
          for c in range(COPIES)]
    gu_shapes = ((8, 2, 0), (8, 2, 1), (8, 2, 2), (4, 2, 0), (8, 4, 0), (4, 4, 0), (2, 2, 0))
    d_shapes = ((4, 1, 2), (8, 1, 2), (4, 2, 2), (4, 1, 1), (8, 1, 0))
    fns = K.compile_module({(5, rpw, K.EPI_GELU, pf) for _, rpw, pf in gu_shapes}
                           | {(K.loads_per_lane(I // s), rpw, K.EPI_PLAIN, pf) for s in (4, 6, 8, 12)
                              for _, rpw, pf in d_shapes}, set())
    for warps, rpw, pf in gu_shapes:
        base = [K.gemv(fns, "gu", W, I, H, epi=K.EPI_GELU, y=y, src=resid, delta=o, delta_w=w1, resid_out=out,
                       norm_w=w2, warps=warps, rpw=rpw, prefetch_weights=pf) for W in Wg]
        groups = -(-I // (warps * rpw // 2))
        for grid in sorted({base[0].grid[0], 132, 264, 396, groups // 2, groups // 3}):
            ls = [dataclasses.replace(b, grid=(grid, 1, 1)) for b in base]
            res["gate_up"][f"{warps}w {rpw}r pf{pf} grid {grid}"] = round(timed(ls), 3)
            if (warps, rpw, pf) == (8, 2, 0) and grid == base[0].grid[0]:
                res["default_gate_up"] = f"{warps}w {rpw}r pf{pf} grid {grid}"  # Shapes().gate_up, its grid
    del Wg
    Wd = [cupy.asarray((np.random.default_rng(c).standard_normal((H, I)) * 0.05).astype(np.float16))
          for c in range(COPIES)]
    for splits in (4, 6, 8, 12):
        for warps, rpw, pf in d_shapes:
            base = [K.gemv(fns, "d", W, H, I // splits, splits=splits, y=y, src=m, warps=warps, rpw=rpw,
                           prefetch_weights=pf) for W in Wd]
            for grid in sorted({base[0].grid[0], 66, 132, 264}):
                ls = [dataclasses.replace(b, grid=(grid, splits, 1)) for b in base]
                res["down"][f"{splits} splits {warps}w {rpw}r pf{pf} grid {grid}"] = round(timed(ls), 3)
                if (splits, warps, rpw, pf) == (8, 4, 1, 2) and grid == base[0].grid[0]:
                    res["default_down"] = f"{splits} splits {warps}w {rpw}r pf{pf} grid {grid}"
    for k in ("gate_up", "down"):
        print(k, "default:", res.get(f"default_{k}"), res[k].get(res.get(f"default_{k}")), "best:",
              sorted(res[k].items(), key=lambda kv: kv[1])[:5], flush=True)
    write("h200_gemv_sweep.json", res)


def rows_probe() -> None:
    """gate_up's 13824 x 1152 rows read in the register gemv's pattern (`rdrow`), loads only and with the dot,
    at 1-4 rows a warp and 2-8 blocks an SM, beside the plain read `rd<4>` at 8 blocks an SM and the gemv itself
    at PF 0 / 1 / 2 with and without the fold prologue: which part of the gemv's cost is its access pattern, its
    arithmetic, its prologue. -> h200_rows_probe.json"""
    import cupy

    from vlmdecode.native import kernels as K

    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    rows, k = SIZES["gate_up"]
    names = [f"rdrow<5,{r},{d}>" for r in (1, 2, 4) for d in (0, 1)] + ["rd<4>"]
    mod = cupy.RawModule(code=PROBE, options=("-std=c++17",), name_expressions=names)
    Ws = [cupy.asarray((np.random.default_rng(c).standard_normal((rows, k)) * 0.05).astype(np.float16))
          for c in range(COPIES)]
    x, y = cupy.asarray(np.random.default_rng(9).standard_normal(k).astype(np.float32)), cupy.zeros(rows, cupy.float32)
    res: dict = {"provenance": provenance(METHOD), "rows": rows, "k": k, "copies": COPIES, "us": {}}
    rd = mod.get_function("rd<4>")
    res["us"]["rd4 x8"] = timed([partial(rd, (sms * 8,), (256,), (W, np.int64(W.nbytes // 16), y)) for W in Ws])
    for r in (1, 2, 4):
        for d in (0, 1):
            fn = mod.get_function(f"rdrow<5,{r},{d}>")
            for per_sm in (2, 3, 4, 8):
                launches = [partial(fn, (sms * per_sm,), (256,), (W, np.int32(rows), np.int32(k), x, y),
                                    shared_mem=4 * k) for W in Ws]
                res["us"][f"rdrow {r}r dot{d} x{per_sm}"] = timed(launches)
    # the gemv itself: PF 0 (weights after the prologue, the default) vs PF 1 / 2 (weights first) with a cheap
    # prologue (a plain copy of x) and with the step's fold: is the fold what keeps PF off and the gemv slow?
    fns = K.compile_module({(5, 2, 1, pf) for pf in (0, 1, 2)}, set())
    rng = np.random.default_rng(1)
    resid, o, w1, w2 = (cupy.asarray(rng.standard_normal(k).astype(np.float32) + b) for b in (0, 0, 2, 2))
    out = cupy.zeros(k, cupy.float32)
    for pf in (0, 1, 2):
        for fold in (False, True):
            kw = dict(src=resid, delta=o, delta_w=w1, resid_out=out, norm_w=w2) if fold else dict(src=x)
            res["us"][f"gemv 8w 2r pf{pf} gelu{' + fold' if fold else ''}"] = timed(
                [K.gemv(fns, "gu", W, rows // 2, k, epi=K.EPI_GELU, y=y, warps=8, rpw=2, prefetch_weights=pf, **kw)
                 for W in Ws])
    res["us"] = {n: round(v, 3) for n, v in res["us"].items()}
    print(sorted(res["us"].items(), key=lambda kv: kv[1]), flush=True)
    write("h200_rows_probe.json", res)


def main() -> None:
    import cupy

    from vlmdecode.native import kernels as K

    attrs = cupy.cuda.Device().attributes
    sms = attrs["MultiProcessorCount"]
    mod = cupy.RawModule(code=PROBE, options=("-std=c++17",),
                         name_expressions=[f"rd<{n}>" for n in (4, 8, 16)] + ["bulk"])
    bulk = mod.get_function("bulk")
    bulk.max_dynamic_shared_size_bytes = 227 * 1024
    sink = cupy.zeros(1, cupy.uint32)
    res: dict = {"provenance": provenance(METHOD), "sms": sms, "copies": COPIES, "sizes": {}}
    fns = K.compile_module({(5, 1, 0, 1), (4, 1, 0, 1), (5, 2, 1, 0), (4, 1, 0, 2)}, set())
    for name, (rows, k) in SIZES.items():
        Ws = [cupy.asarray((np.random.default_rng(c).standard_normal((rows, k)) * 0.05).astype(np.float16))
              for c in range(COPIES)]
        nbytes = Ws[0].nbytes
        r: dict = {"bytes": nbytes}
        for nv in (4, 8, 16):
            for per_sm in (1, 2, 4, 8):
                fn = mod.get_function(f"rd<{nv}>")
                r[f"rd{nv} x{per_sm}"] = timed([partial(fn, (sms * per_sm,), (256,), (W, np.int64(nbytes // 16), sink))
                                                for W in Ws])
        for stage in (8192, 16384, 32768):
            for per_sm in (1, 2):
                stages = min(16, (220 * 1024 // per_sm) // (stage + 16))
                tail = (np.int64(nbytes), np.int32(stage), np.int32(stages), sink)
                r[f"bulk{stage // 1024}K x{per_sm}"] = timed([partial(bulk, (sms * per_sm,), (288,), (W, *tail),
                                                                      shared_mem=stages * (stage + 16)) for W in Ws])
        x = cupy.asarray(np.random.default_rng(9).standard_normal(k).astype(np.float32))
        y = cupy.zeros(rows * 8, cupy.float32)
        gelu = name == "gate_up"
        n_out = rows // 2 if gelu else rows
        epi = K.EPI_GELU if gelu else K.EPI_PLAIN
        if name == "down":
            reg = [K.gemv(fns, "t", W, rows, 864, splits=8, y=y, src=x, warps=4, rpw=1, prefetch_weights=2)
                   for W in Ws]
        else:
            wr = (8, 2, 0) if gelu else (8, 1, 1)
            reg = [K.gemv(fns, "t", W, n_out, k, epi=epi, y=y, src=x, warps=wr[0], rpw=wr[1],
                          prefetch_weights=wr[2]) for W in Ws]
        r["gemv"] = timed(reg)
        r = {kk: (v if kk == "bytes" else {"us": round(v, 3), "tb_s": round(nbytes / v / 1e6, 3)})
             for kk, v in r.items()}
        res["sizes"][name] = r
        best = sorted(((v["us"], kk) for kk, v in r.items() if kk != "bytes"))[:4]
        print(name, nbytes, "gemv", r["gemv"], "best", best, flush=True)
        del Ws
    write("h200_stream_probe.json", res)


if __name__ == "__main__":
    {"--gemv-sweep": gemv_sweep, "--rows": rows_probe}.get(next((a for a in sys.argv[1:] if a.startswith("--")), ""),
                                                          main)()
