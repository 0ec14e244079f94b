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
  per-layer PDL one launch a layer (its four GEMVs persistent), PDL between layers: the one boundary a layer that
                attention would leave in a persistent GEMV segment
  persistent    one launch for the whole chain, every block resident: the same waits, no kernel boundary
and beside them the same chain through the decode step's own GEMV launches (with its folds, PDL).
Two task codes, each run the three ways:
  tasks (`chain`)    2 rows x one k-slice a warp (16-byte loads, NV a lane), x read per task from L2, accumulated
                     with atomicAdd into zeroed outputs (h200_chain_probe_efce0a0.json: the first run, this
                     kernel only, then with its dot and gelu written inline: 99 registers; 80 with common's)
  blocks (`blocks`)  the step's GEMV structure: a block per k-slice and row groups, x formed once per GEMV in shared
                     memory, plain stores (down's 8 partials summed by the next qkv), PF 1 / 0: the first group's
                     weights loaded before / after the wait
A block counts itself done with a GEMV once all its warps are. Each step zeroes the outputs and counters first (one
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

from vlmdecode.native.cuda_src import common  # noqa: E402 - dot8, warp_sum, gelu_tanh
from vlmdecode.native.numpy_exec import gelu_tanh  # noqa: E402

SRC = common.CODE + r"""
__device__ __forceinline__ float4 gelu_up4(const float4 g, const float4 u) {  // gelu_tanh(gate) * up
    return make_float4(gelu_tanh(g.x) * u.x, gelu_tanh(g.y) * u.y, gelu_tanh(g.z) * u.z, gelu_tanh(g.w) * u.w);
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
                    float4 a = __ldcg(reinterpret_cast<const float4*>(x + c0 + col));
                    float4 b = __ldcg(reinterpret_cast<const float4*>(x + c0 + col + 4));
                    if (xform) {
                        a = gelu_up4(a, __ldcg(reinterpret_cast<const float4*>(x + k + c0 + col)));
                        b = gelu_up4(b, __ldcg(reinterpret_cast<const float4*>(x + k + c0 + col + 4)));
                    }
#pragma unroll
                    for (int i = 0; i < RPT; ++i) acc[i] += dot8(w[i][v], a, b);
                }
            }
#pragma unroll
            for (int i = 0; i < RPT; ++i) {
                acc[i] = warp_sum(acc[i]);
                if (lane == 0) atomicAdd(y + r0 + i, acc[i]);
            }
        }
        __threadfence();  // this thread's outputs before the block is counted
        __syncthreads();
        if (threadIdx.x == 0) atomicAdd(done + j, 1u);
    }
}

// The step's GEMV structure in one kernel: per op, block b of P takes k-slice s = b % splits and row groups
// g = b / splits, + P / splits, .. (a group: warps x RPW rows; lane l loads columns (l + 32 v) * 8 of the slice), forms
// the slice of x once in shared memory (xform 0: x; 1: gelu_tanh(x[i]) * x[i + k]; 2: the sum of `parts` vectors
// [parts, k], a split-K producer's partials), stores y[s, rows] plainly. PF 1: the first group's weights are loaded
// before the wait on the previous op. A block is counted done with an op as cooperative groups' grid sync counts it
// (bar.sync, then one thread's fence and atomic).
template <int NV, int RPW, int PF>
__global__ void __launch_bounds__(256) blocks(const long long* __restrict__ ops, const int op_begin, const int op_end,
                                              unsigned* done) {
    extern __shared__ __align__(16) float vec[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    for (int j = op_begin; j < op_end; ++j) {
        const long long* o = ops + 8 * j;
        const __half* W = reinterpret_cast<const __half*>(o[0]);
        const float* x = reinterpret_cast<const float*>(o[1]);
        float* y = reinterpret_cast<float*>(o[2]);
        const int rows = (int)o[3], k = (int)o[4], ks = (int)o[5], xform = (int)o[6], parts = (int)o[7];
        const int splits = k / ks, s = blockIdx.x % splits, nb = gridDim.x / splits, c0 = s * ks;
        const int n_groups = (rows + nw * RPW - 1) / (nw * RPW);
        int g = blockIdx.x / splits;
        uint4 w[RPW][NV];
        auto load = [&](const int grp) {
#pragma unroll
            for (int i = 0; i < RPW; ++i)
#pragma unroll
                for (int v = 0; v < NV; ++v) {
                    const int r = (grp * nw + warp) * RPW + i, col = (lane + 32 * v) * 8;
                    w[i][v] = (r < rows && col < ks)
                        ? __ldcs(reinterpret_cast<const uint4*>(W + (size_t)r * k + c0 + col))
                        : make_uint4(0u, 0u, 0u, 0u);
                }
        };
        if (PF && g < n_groups) load(g);
        if (j > 0) {
            if (threadIdx.x == 0)
                while (ld_acquire(done + j - 1) < gridDim.x) {}
            __syncthreads();
        }
        if (g < n_groups) {  // uniform in the block
            for (int i = 4 * threadIdx.x; i < ks; i += 4 * blockDim.x) {
                float4 v = __ldcg(reinterpret_cast<const float4*>(x + c0 + i));
                if (xform == 1) {
                    v = gelu_up4(v, __ldcg(reinterpret_cast<const float4*>(x + k + c0 + i)));
                } else if (xform == 2) {
                    for (int p = 1; p < parts; ++p) {
                        const float4 u = __ldcg(reinterpret_cast<const float4*>(x + (size_t)p * k + c0 + i));
                        v.x += u.x; v.y += u.y; v.z += u.z; v.w += u.w;
                    }
                }
                *reinterpret_cast<float4*>(vec + i) = v;
            }
            __syncthreads();
        }
        for (; g < n_groups; g += nb) {
            if (!PF || g != (int)blockIdx.x / splits) load(g);
#pragma unroll
            for (int i = 0; i < RPW; ++i) {
                float acc = 0.f;
#pragma unroll
                for (int v = 0; v < NV; ++v) {
                    const int col = (lane + 32 * v) * 8;
                    if (col < ks) acc += dot8(w[i][v], vec + col);
                }
#pragma unroll
                acc = warp_sum(acc);
                const int r = (g * nw + warp) * RPW + i;
                if (lane == 0 && r < rows) y[(size_t)s * rows + r] = acc;
            }
        }
        __syncthreads();  // every warp's rows stored, and vec free for the next op
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(done + j, 1u);
        }
    }
}
"""

H, Q, I, SLICES = 1152, 1024, 6912, 8
QKV = 1536
NV, RPT = 5, 2


class Weights:
    """gemma3-1b's four GEMV matrices for `layers` layers (unit gain: entries / sqrt(k)), host and device, and x0."""

    def __init__(self, cupy, layers: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        mats = lambda r, k: (rng.standard_normal((r, k)) / np.sqrt(k)).astype(np.float16)  # noqa: E731
        self.host = [(mats(QKV, H), mats(H, Q), mats(2 * I, H), mats(H, I)) for _ in range(layers)]
        self.dev = [tuple(cupy.asarray(m) for m in ws) for ws in self.host]
        self.x0h = rng.standard_normal(H).astype(np.float32)
        self.x0 = cupy.asarray(self.x0h)
        self.nbytes = sum(int(m.nbytes) for ws in self.dev for m in ws)

    def reference(self) -> np.ndarray:
        """down's output of the last layer, float64 numpy."""
        x = self.x0h.astype(np.float64)
        for wq, wo, wgu, wd in self.host:
            qkv = wq.astype(np.float64) @ x
            o = wo.astype(np.float64) @ qkv[:Q]
            gu = wgu.astype(np.float64) @ o
            x = wd.astype(np.float64) @ (gelu_tanh(gu[:I]) * gu[I:])
        return x


class Chain:
    """The chain's outputs and counters (zeroed each step, one buffer) and op table for kernel `kind`: "tasks"
    (`chain`: down accumulates its 8 k-slices atomically into [H]) or "blocks" (`blocks`: down stores [8, H] partials,
    the next qkv sums them)."""

    def __init__(self, cupy, w: Weights, kind: str):
        split = kind == "blocks"
        layers = len(w.dev)
        sizes = [QKV, H, 2 * I, H * (SLICES if split else 1)] * layers
        self.n_ops = len(sizes)
        offs = np.concatenate([[0], np.cumsum([-(-s // 32) * 32 for s in sizes])])  # 128-byte aligned outputs
        self.buf = cupy.zeros(int(offs[-1]) + self.n_ops, cupy.float32)  # outputs, then the counters
        self.y = [self.buf[int(offs[i]):int(offs[i]) + s] for i, s in enumerate(sizes)]
        self.done = self.buf[int(offs[-1]):].view(cupy.uint32)
        table = []
        for layer, (wq, wo, wgu, wd) in enumerate(w.dev):
            j = 4 * layer
            xin = w.x0 if layer == 0 else self.y[j - 1]
            qkv_in = (2, 1 if layer == 0 else SLICES) if split else (0, 0)  # (xform, parts)
            for W, x, rows, k, ks, (xform, parts) in ((wq, xin, QKV, H, H, qkv_in), (wo, self.y[j], H, Q, Q, (0, 0)),
                                                      (wgu, self.y[j + 1], 2 * I, H, H, (0, 0)),
                                                      (wd, self.y[j + 2], H, I, I // SLICES, (1, 0))):
                table.append([W.data.ptr, x.data.ptr, 0, rows, k, ks, xform, parts])
        for j, row in enumerate(table):
            row[2] = self.y[j].data.ptr
        self.ops = cupy.asarray(np.array(table, dtype=np.int64))
        self.split = split

    def out(self) -> np.ndarray:
        y = self.y[-1].get().astype(np.float64)
        return y.reshape(SLICES, H).sum(0) if self.split else y


def plain_reads(cupy, w: Weights, sms: int) -> list:
    """The plain read (rd<4>, 8 blocks an SM) of every matrix of `w`, a launch each: what the chains are set against."""
    rd = cupy.RawModule(code=PROBE, options=("-std=c++17",), name_expressions=["rd<4>"]).get_function("rd<4>")
    sink = cupy.zeros(1, cupy.uint32)
    return [partial(rd, (sms * 8,), (256,), (m, np.int64(m.nbytes // 16), sink)) for ws in w.dev for m in ws]


def launches(K, fn, chain: Chain, grid: int, variant: str, shared: int = 0) -> list:
    """One step: the zero fill, then the chain as `variant` ("per-op", "per-op PDL", "per-layer PDL", "persistent")."""
    zero = partial(chain.buf.fill, 0)
    mk = lambda a, b, pdl: K.Launch(f"chain[{a}:{b}]", fn, (grid, 1, 1), (256, 1, 1),  # noqa: E731
                                    (K.ptr(chain.ops), np.int32(a), np.int32(b), K.ptr(chain.done)), shared, 0,
                                    pdl=pdl)
    if variant == "persistent":
        return [zero, mk(0, chain.n_ops, False)]
    if variant == "per-layer PDL":  # a layer's four GEMVs a launch: the boundary attention would leave in a layer
        return [zero] + [mk(j, j + 4, j > 0) for j in range(0, chain.n_ops, 4)]
    pdl = variant == "per-op PDL"
    return [zero] + [mk(j, j + 1, pdl and j > 0) for j in range(chain.n_ops)]  # the first follows the fill


def step_gemvs(cupy, K, w: Weights):
    """The same chain through the decode step's own GEMV launches (native.kernels, Shapes() defaults, PDL): qkv and
    gate|up fold their input as the step does (residual + RMSNorm, unit norm weights), down in its split-K slices.
    Returns the launches and the buffers they use (kept alive by the caller)."""
    from vlmdecode.native.shapes import Shapes

    sh = Shapes()
    fns = K.compile_module(sh.gemv_instances({"qkv": H, "o": Q, "gate_up": H, "down": I // SLICES}), set())
    z = lambda n: cupy.zeros(n, cupy.float32)  # noqa: E731
    Ra, Rb, qkv, o, m, dpart, ones = z(H), z(H), z(QKV), z(H), z(I), z(SLICES * H), cupy.ones(H, cupy.float32)
    out = []
    for layer, (wq, wo, wgu, wd) in enumerate(w.dev):
        fold = dict(src=Ra, delta=dpart, delta_parts=SLICES, delta_w=ones) if layer else dict(src=w.x0)
        out.append(K.gemv(fns, f"L{layer}.qkv", wq, QKV, H, y=qkv, resid_out=Rb, norm_w=ones, **fold, **sh.gemv("qkv")))
        out.append(K.gemv(fns, f"L{layer}.o", wo, H, Q, y=o, src=qkv[:Q], **sh.gemv("o")))
        out.append(K.gemv(fns, f"L{layer}.gate_up", wgu, I, H, epi=K.EPI_GELU, y=m, src=Rb, delta=o, delta_w=ones,
                          resid_out=Ra, norm_w=ones, **sh.gemv("gate_up")))
        out.append(K.gemv(fns, f"L{layer}.down", wd, H, I // SLICES, splits=SLICES, y=dpart, src=m, **sh.gemv("down")))
    for launch in out:
        launch.pdl = True
    return out, (Ra, Rb, qkv, o, m, dpart, ones)


def main() -> None:
    import cupy
    import h200_native as hn

    from vlmdecode.native import kernels as K

    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    names = {"tasks": f"chain<{NV},{RPT}>", "blocks PF1": f"blocks<{NV},{RPT},1>",
             "blocks PF0": f"blocks<{NV},{RPT},0>"}
    mod = cupy.RawModule(code=SRC, options=("-std=c++17",), name_expressions=list(names.values()))
    fns = {kind: mod.get_function(n) for kind, n in names.items()}
    shared = {kind: 0 if kind == "tasks" else 4 * H for kind in names}  # blocks: the widest k-slice of x
    resident = {kind: K.resident_blocks(fn, 256, shared[kind]) for kind, fn in fns.items()}
    # every block resident (the persistent variant waits on all of them); blocks: a multiple of down's 8 slices
    mult = {kind: 1 if kind == "tasks" else SLICES for kind in names}
    grids = {kind: sorted({c // mult[kind] * mult[kind] for c in (r, sms, 2 * sms) if c <= r})
             for kind, r in resident.items()}
    variants = ("per-op", "per-op PDL", "per-layer PDL", "persistent")
    res: dict = {"provenance": provenance("graph replays (CUDA events), medians of interleaved rounds; every step "
                                          "zeroes its outputs and counters first"),
                 "kernels": names, "registers": {kind: int(fn.num_regs) for kind, fn in fns.items()},
                 "resident_blocks": resident, "grids": grids, "nv": NV, "rows_a_task": RPT, "check": {}, "layers": 26,
                 "ms": {}}
    small = Weights(cupy, 2, seed=1)
    ref = small.reference()
    for kind, fn in fns.items():
        ch = Chain(cupy, small, kind.split()[0])
        for grid in grids[kind]:
            for v in variants:
                hn.time_graph(launches(K, fn, ch, grid, v, shared[kind]), reps=1, pdl=None)
                res["check"][f"{kind} {v} grid {grid}"] = float(np.abs(ch.out() - ref).max() / np.abs(ref).max())
    print("max rel err vs float64:", max(res["check"].values()), flush=True)
    del small, ch
    w = Weights(cupy, 26)
    res["weight_bytes"] = w.nbytes
    steps = {"plain read, one launch a matrix": plain_reads(cupy, w, sms)}
    chains = {kind: Chain(cupy, w, kind.split()[0]) for kind in fns}
    steps["the step's GEMV launches (native.kernels), PDL"], keep = step_gemvs(cupy, K, w)
    for kind, fn in fns.items():
        for g in grids[kind]:
            for v in variants:
                steps[f"{kind} {v} grid {g}"] = launches(K, fn, chains[kind], g, v, shared[kind])
    times: dict = {n: [] for n in steps}
    for _ in range(5):  # interleaved rounds
        for n, s in steps.items():
            times[n].append(hn.time_graph(s, reps=6, pdl=None) * len(s))  # ms a step
    del keep  # the step launches' buffers, alive until here
    res["ms"] = {n: round(float(np.median(t)), 4) for n, t in times.items()}
    res["tb_per_s"] = {n: round(w.nbytes / (t * 1e-3) / 1e12, 3) for n, t in res["ms"].items()}
    print(sorted(res["ms"].items(), key=lambda kv: kv[1]), flush=True)
    write("h200_chain_probe.json", res)


if __name__ == "__main__":
    main()
