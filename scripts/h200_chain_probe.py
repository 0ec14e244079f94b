"""H200 probe: what do the kernel boundaries between a decode step's GEMVs cost? A kernel a GEMV vs one for all.

The replayed native step is about the sum of its kernels timed alone (h200_stream_probe.json, the Nsight tables):
PDL lets a GEMV's blocks launch early, but they cannot become resident while the previous GEMV's blocks fill the
SMs, so each GEMV pays its ramp (first weights in flight) and drain (last rows reduced) in turn. A persistent kernel
(one launch for the whole chain; Hazy Research's "no bubbles" megakernel for Llama-1B) lets a block issue its next
GEMV's weight loads as soon as it has finished its share of the current one, then wait for the current one's counter.

This probe runs the same task code three ways over gemma3-1b's GEMV chain (a layer: qkv [1536 x 1152] -> o
[1152 x 1024, reading qkv's first 1024 outputs] -> gate|up [13824 x 1152] -> down [1152 x 6912, reading
gelu_tanh(gate) * up, in 8 k-slices]; the next layer's qkv reads down's output; no attention, norms or residuals):
  per-op        one launch per GEMV, stream order
  per-op PDL    one launch per GEMV with programmatic dependent launch: each launch's blocks issue their first
                weights, then wait on the previous GEMV's counter (device-scope acquire)
  persistent    one launch for the whole chain, every block resident: the same waits, no kernel boundary
Tasks are 2 rows x one k-slice a warp (16-byte loads, NV a lane), accumulated with atomicAdd into zeroed outputs;
a block counts itself done with a GEMV once all its warps are. Each step zeroes the outputs and counters first (one
fill, in every variant). Checked against float64 numpy on a 2-layer chain. Times: 26 layers, graph replays, CUDA
events, medians of interleaved rounds; beside them the plain read of the same matrices (rd<4>, one launch each).
-> $OUT/h200_chain_probe.json. CuPy only; about a minute.
Usage: OUT=/tmp/out python3 scripts/h200_chain_probe.py
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from h200_stream_probe import PROBE, provenance, write  # noqa: E402

SRC = r"""
#include <cuda_fp16.h>
__device__ __forceinline__ float gelu_tanh(float x) {
    return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// ops: 8 int64 an op: W [rows, k] fp16, x (fp32, k; xform 1: 2k, read as gelu_tanh(x[i]) * x[i + k]), y (fp32, rows,
// zeroed), rows, k, ks (the k-slice of a task), xform. Tasks of an op: (rows / RPT) x (k / ks), warp-strided.
template <int NV, int RPT>
__device__ __forceinline__ void load_task(uint4 (&w)[RPT][NV], const __half* W, const int k, const int ks,
                                          const int n_ks, const int t) {
    const int lane = threadIdx.x & 31, r0 = (t / n_ks) * RPT, c0 = (t % n_ks) * ks;
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            const int col = (lane + 32 * v) * 8;
            w[i][v] = col < ks ? __ldcs(reinterpret_cast<const uint4*>(W + (size_t)(r0 + i) * k + c0 + col))
                               : make_uint4(0u, 0u, 0u, 0u);
        }
}

template <int NV, int RPT>
__global__ void __launch_bounds__(256) chain(const long long* __restrict__ ops, const int op_begin, const int op_end,
                                             unsigned* done) {
    const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int gw = blockIdx.x * nw + (threadIdx.x >> 5), n_warps = gridDim.x * nw;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");  // a no-op without PDL
#endif
    for (int j = op_begin; j < op_end; ++j) {
        const long long* o = ops + 8 * j;
        const __half* W = reinterpret_cast<const __half*>(o[0]);
        const float* x = reinterpret_cast<const float*>(o[1]);
        float* y = reinterpret_cast<float*>(o[2]);
        const int rows = (int)o[3], k = (int)o[4], ks = (int)o[5], xform = (int)o[6];
        const int n_ks = k / ks, tasks = (rows / RPT) * n_ks;
        uint4 w[RPT][NV];
        if (gw < tasks) load_task<NV, RPT>(w, W, k, ks, n_ks, gw);  // before the wait: weights depend on nothing
        if (j > 0) {  // every block done with op j - 1 (the previous launch's, or this launch's)
            if (threadIdx.x == 0)
                while (ld_acquire(done + j - 1) < gridDim.x) {}
            __syncthreads();
        }
        for (int t = gw; t < tasks; t += n_warps) {
            if (t != gw) load_task<NV, RPT>(w, W, k, ks, n_ks, t);
            const int r0 = (t / n_ks) * RPT, c0 = (t % n_ks) * ks;
            float acc[RPT];
#pragma unroll
            for (int i = 0; i < RPT; ++i) acc[i] = 0.f;
#pragma unroll
            for (int v = 0; v < NV; ++v) {
                const int col = (lane + 32 * v) * 8;
                if (col < ks) {
                    float xv[8];
                    const float4 a = __ldcg(reinterpret_cast<const float4*>(x + c0 + col));
                    const float4 b = __ldcg(reinterpret_cast<const float4*>(x + c0 + col + 4));
                    xv[0] = a.x; xv[1] = a.y; xv[2] = a.z; xv[3] = a.w;
                    xv[4] = b.x; xv[5] = b.y; xv[6] = b.z; xv[7] = b.w;
                    if (xform) {
                        const float4 c = __ldcg(reinterpret_cast<const float4*>(x + k + c0 + col));
                        const float4 d = __ldcg(reinterpret_cast<const float4*>(x + k + c0 + col + 4));
                        const float u[8] = {c.x, c.y, c.z, c.w, d.x, d.y, d.z, d.w};
#pragma unroll
                        for (int q = 0; q < 8; ++q) xv[q] = gelu_tanh(xv[q]) * u[q];
                    }
#pragma unroll
                    for (int i = 0; i < RPT; ++i) {
                        const __half2* h = reinterpret_cast<const __half2*>(&w[i][v]);
#pragma unroll
                        for (int q = 0; q < 4; ++q) {
                            const float2 f = __half22float2(h[q]);
                            acc[i] = fmaf(f.x, xv[2 * q], fmaf(f.y, xv[2 * q + 1], acc[i]));
                        }
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < RPT; ++i) {
#pragma unroll
                for (int s = 16; s > 0; s >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], s);
                if (lane == 0) atomicAdd(y + r0 + i, acc[i]);
            }
        }
        __threadfence();  // this thread's outputs before the block is counted
        __syncthreads();
        if (threadIdx.x == 0) atomicAdd(done + j, 1u);
    }
}
"""

H, Q, I, SLICES = 1152, 1024, 6912, 8
QKV = 1536
NV, RPT = 5, 2


class Chain:
    """gemma3-1b's GEMV chain over `layers` layers: weights, zeroed outputs + counters in one buffer, the op table."""

    def __init__(self, cupy, layers: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        mats = lambda r, k: (rng.standard_normal((r, k)) / np.sqrt(k)).astype(np.float16)  # noqa: E731 - unit gain
        self.host = [(mats(QKV, H), mats(H, Q), mats(2 * I, H), mats(H, I)) for _ in range(layers)]
        self.W = [tuple(cupy.asarray(m) for m in ws) for ws in self.host]
        self.x0h = rng.standard_normal(H).astype(np.float32)
        self.x0 = cupy.asarray(self.x0h)
        sizes = [QKV, H, 2 * I, H] * layers
        self.n_ops = len(sizes)
        offs = np.concatenate([[0], np.cumsum([-(-s // 32) * 32 for s in sizes])])  # 128-byte aligned outputs
        self.buf = cupy.zeros(int(offs[-1]) + self.n_ops, cupy.float32)  # outputs, then the counters
        self.y = [self.buf[int(offs[i]):int(offs[i]) + s] for i, s in enumerate(sizes)]
        self.done = self.buf[int(offs[-1]):].view(cupy.uint32)
        table = []
        for layer, (wq, wo, wgu, wd) in enumerate(self.W):
            j = 4 * layer
            xin = self.x0 if layer == 0 else self.y[j - 1]
            for W, x, rows, k, ks, xform in ((wq, xin, QKV, H, H, 0), (wo, self.y[j], H, Q, Q, 0),
                                             (wgu, self.y[j + 1], 2 * I, H, H, 0),
                                             (wd, self.y[j + 2], H, I, I // SLICES, 1)):
                table.append([W.data.ptr, x.data.ptr, 0, rows, k, ks, xform, 0])
        for j, row in enumerate(table):
            row[2] = self.y[j].data.ptr
        self.ops = cupy.asarray(np.array(table, dtype=np.int64))
        self.nbytes = sum(int(m.nbytes) for ws in self.W for m in ws)

    def reference(self) -> np.ndarray:
        """down's output of the last layer, float64 numpy."""
        x = self.x0h.astype(np.float64)
        for wq, wo, wgu, wd in self.host:
            qkv = wq.astype(np.float64) @ x
            o = wo.astype(np.float64) @ qkv[:Q]
            gu = wgu.astype(np.float64) @ o
            g = gu[:I]
            m = 0.5 * g * (1 + np.tanh(0.7978845608028654 * (g + 0.044715 * g ** 3))) * gu[I:]
            x = wd.astype(np.float64) @ m
        return x


def launches(cupy, K, fn, chain: Chain, grid: int, variant: str) -> list:
    """One step: the zero fill, then the chain as `variant` ("per-op", "per-op PDL", "persistent")."""
    zero = partial(chain.buf.fill, 0)
    mk = lambda a, b, pdl: K.Launch(f"chain[{a}:{b}]", fn, (grid, 1, 1), (256, 1, 1),  # noqa: E731
                                    (K.ptr(chain.ops), np.int32(a), np.int32(b), K.ptr(chain.done)), 0, 0, pdl=pdl)
    if variant == "persistent":
        return [zero, mk(0, chain.n_ops, False)]
    pdl = variant == "per-op PDL"
    return [zero] + [mk(j, j + 1, pdl and j > 0) for j in range(chain.n_ops)]  # the first follows the fill


def graph_ms(cupy, steps: list, reps: int = 10) -> list:
    """Device ms per replay of `steps` (callables) captured in one graph; every replay timed (CUDA events)."""
    for s in steps:
        if hasattr(s, "prepare"):
            s.prepare()
    st = cupy.cuda.Stream(non_blocking=True)
    with st:
        for s in steps:
            s()
        st.begin_capture()
        for s in steps:
            s()
        g = st.end_capture()
        g.launch(st)
        st.synchronize()
        out = []
        for _ in range(reps):
            a, b = cupy.cuda.Event(), cupy.cuda.Event()
            a.record(st)
            g.launch(st)
            b.record(st)
            b.synchronize()
            out.append(cupy.cuda.get_elapsed_time(a, b))
    return out


def main() -> None:
    import cupy

    from vlmdecode.native import kernels as K

    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    mod = cupy.RawModule(code=SRC, options=("-std=c++17",), name_expressions=[f"chain<{NV},{RPT}>"])
    fn = mod.get_function(f"chain<{NV},{RPT}>")
    resident = K.resident_blocks(fn, 256, 0)
    grids = sorted({resident, sms, 2 * sms} - {g for g in (2 * sms,) if g > resident})
    variants = ("per-op", "per-op PDL", "persistent")
    res: dict = {"provenance": provenance("graph replays (CUDA events), medians of interleaved rounds; every step "
                                          "zeroes its outputs and counters first"),
                 "registers": int(fn.num_regs), "resident_blocks": resident, "nv": NV, "rows_a_task": RPT,
                 "check": {}, "layers": 26, "ms": {}}
    small = Chain(cupy, 2, seed=1)
    ref = small.reference()
    for grid in grids:
        for v in variants:
            graph_ms(cupy, launches(cupy, K, fn, small, grid, v), reps=1)
            got = small.y[-1].get().astype(np.float64)
            res["check"][f"{v} grid {grid}"] = float(np.abs(got - ref).max() / np.abs(ref).max())
    print("max rel err vs float64:", res["check"], flush=True)
    del small
    ch = Chain(cupy, 26)
    res["weight_bytes"] = ch.nbytes
    rd = cupy.RawModule(code=PROBE, options=("-std=c++17",), name_expressions=["rd<4>"]).get_function("rd<4>")
    sink = cupy.zeros(1, cupy.uint32)
    reads = [partial(rd, (sms * 8,), (256,), (m, np.int64(m.nbytes // 16), sink)) for ws in ch.W for m in ws]
    steps = {f"{v} grid {g}": launches(cupy, K, fn, ch, g, v) for g in grids for v in variants}
    steps["plain read, one launch a matrix"] = reads
    times: dict = {n: [] for n in steps}
    for _ in range(5):  # interleaved rounds
        for n, s in steps.items():
            times[n] += graph_ms(cupy, s, reps=6)
    res["ms"] = {n: round(float(np.median(t)), 4) for n, t in times.items()}
    res["tb_per_s"] = {n: round(ch.nbytes / (t * 1e-3) / 1e12, 3) for n, t in res["ms"].items()}
    print(sorted(res["ms"].items(), key=lambda kv: kv[1]), flush=True)
    write("h200_chain_probe.json", res)


if __name__ == "__main__":
    main()
