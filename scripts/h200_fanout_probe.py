"""H200 probe: how long after `pdl_wait` does a block have the small vectors it reads, as a function of how many
blocks read them at once (the fan-out) and how many bytes each block reads?

Why: in the step a fold (qkv, gate|up, LM head) has its loads in 1.2-1.5 us after its wait, where a plain vector
(o, down) has them in 0.47-0.64 us (h200_native_timeline_fold_484453d.json). Every block of a GEMV reads the whole
input (qkv: 192 blocks x 8 split-K parts + residual + 2 norm weights of 1152 floats, ~50 KB each), so either the
same lines requested by hundreds of SMs at once queue at their L2 slices, or the norm weights come from DRAM. This
probe separates the two, outside the step, in the step's own pattern:

  stream   one kernel like down: P blocks stream a 16 MB weight copy (__ldcs, past the L2 with 4 rotating copies)
           and then write `parts` x 1152 fp32 (the split-K partials); launched plainly
  read     its PDL successor, like qkv's prologue: G blocks of 256 threads, each block's first weights-free
           part is pdl_trigger + pdl_wait; then every thread loads its float4 slots of all `parts` vectors (and,
           `konst`, two 1152-float vectors no kernel writes: the norm weights) and sums them. Thread 0 of each
           block stamps %globaltimer at its start, after the wait, when its own sum is in (the clock read depends
           on the sum) and after a block barrier (every thread's loads in).

Per (G, parts, konst) it reports, over 20 stream/read pairs in one CUDA graph replayed 5 times, the medians over
blocks and pairs of: wait (the release after the stream's last block ends), own (thread 0's loads in, after the
wait) and block (every thread's, after the wait), and the slowest block's `block`. G in {8, 66, 132, 192, 264,
396}, parts in {1, 8}, konst on/off. If `block` grows with G x bytes, redundant reads queue in L2 and the fix is
fewer readers (a cluster sharing one read: DSMEM or TMA multicast); if konst alone adds ~0.5 us at any G, the
norm weights come from DRAM. Writes $OUT/h200_fanout_probe.json. CuPy only.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

N = 1152  # gemma3-1b's hidden size: the folds' vector length
PROBE = r"""
// the stream kernel: a share of a weight copy read (__ldcs), then the partials written (grid-stride)
__global__ void __launch_bounds__(256) stream_write(const uint4* __restrict__ w, const long long n16, float* parts,
                                                    const int n_out, unsigned long long* ends) {
    pdl_trigger();  // as every step kernel: its PDL successor's blocks may become resident while it streams
    unsigned acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        const uint4 v = __ldcs(w + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_out; i += gridDim.x * blockDim.x)
        parts[i] = (float)(i & 1023) * 1e-3f + (float)(acc & 1u);
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ends[blockIdx.x]) :: "memory");
}

// clock_after: native_kernel_bench.GTIMER_CU

// the read kernel: a fold's loads (PARTS vectors of N floats + optionally two constants), summed per thread
template <int PARTS, int KONST>
__global__ void __launch_bounds__(256) fanout_read(const float* parts, const float* konst, const int n,
                                                   unsigned long long* stamps, float* sink) {
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0) :: "memory");
    pdl_trigger();
    pdl_wait();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1) :: "memory");
    const int n4 = n >> 2;
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 2; ++j) {  // n4 <= 2 x 256: the slots of fold_regs
        const int i = threadIdx.x + j * blockDim.x;
        if (i < n4) {
            float4 v[PARTS + 2 * KONST];
#pragma unroll
            for (int p = 0; p < PARTS; ++p) v[p] = reinterpret_cast<const float4*>(parts + (size_t)p * n)[i];
#pragma unroll
            for (int k = 0; k < KONST * 2; ++k)
                v[PARTS + k] = reinterpret_cast<const float4*>(konst + (size_t)k * n)[i];
#pragma unroll
            for (int p = 0; p < PARTS + 2 * KONST; ++p) s += v[p].x + v[p].y + v[p].z + v[p].w;
        }
    }
    const unsigned long long t2 = clock_after(s);
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long* st = stamps + (size_t)blockIdx.x * 4;
        st[0] = t0; st[1] = t1; st[2] = t2;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(st[3]) :: "memory");
    }
    if (s == 1234.5f) sink[blockIdx.x] = s;  // keeps the loads
}
"""

GRIDS = (8, 66, 132, 192, 264, 396)
CASES = ((1, 0), (1, 1), (8, 0), (8, 1))  # (parts, konst)
PAIRS, COPIES, STREAM_BYTES, STREAM_BLOCKS = 20, 4, 16 << 20, 528
METHOD = (f"{PAIRS} stream/read pairs in one CUDA graph (stream: {STREAM_BLOCKS} blocks over a {STREAM_BYTES >> 20} MB "
          f"copy, {COPIES} rotating, then the partials, each block stamping its end; read: its PDL successor), "
          "replayed 5 times; per pair: wait = a read block's after-wait stamp minus the stream's last block end, "
          "own = thread 0's sum in minus its after-wait, block = after the block barrier minus after-wait; medians "
          "over blocks and pairs; block_max: the median over pairs of the slowest block's block")


def main() -> None:
    import cupy
    import native_kernel_bench

    from vlmdecode.native import kernels as K
    from vlmdecode.native.kernels_src import SOURCE

    names = [f"fanout_read<{p},{k}>" for p, k in CASES] + ["stream_write"]
    mod = cupy.RawModule(code=SOURCE + native_kernel_bench.GTIMER_CU + PROBE, options=("-std=c++17",),
                         name_expressions=names)
    fns = {n: mod.get_function(n) for n in names}
    rng = np.random.default_rng(0)
    weights = [cupy.asarray(rng.integers(0, 2**31, STREAM_BYTES // 4, dtype=np.int64).astype(np.uint32))
               for _ in range(COPIES)]
    parts = cupy.zeros(8 * N, cupy.float32)
    konst = cupy.asarray(rng.uniform(0.5, 2.0, 2 * N).astype(np.float32))
    sink = cupy.zeros(1024, cupy.float32)
    res: dict = {"provenance": {**native_kernel_bench.provenance(), "method": METHOD}, "n": N, "cases": {}}
    stream = cupy.cuda.Stream(non_blocking=True)
    for p, k in CASES:
        for G in GRIDS:
            stamps = cupy.zeros((PAIRS, G, 4), cupy.uint64)
            ends = cupy.zeros((PAIRS, STREAM_BLOCKS), cupy.uint64)
            launches = []
            for r in range(PAIRS):
                w = weights[r % COPIES]
                launches.append(K.Launch("stream", fns["stream_write"], (STREAM_BLOCKS, 1, 1), (256, 1, 1),
                                         (K.ptr(w), np.uint64(w.nbytes // 16), K.ptr(parts), np.int32(p * N),
                                          np.uint64(ends.data.ptr + r * STREAM_BLOCKS * 8)), 0, w.nbytes))
                launches.append(K.Launch("read", fns[f"fanout_read<{p},{k}>"], (G, 1, 1), (256, 1, 1),
                                         (K.ptr(parts), K.ptr(konst), np.int32(N),
                                          np.uint64(stamps.data.ptr + r * G * 4 * 8), K.ptr(sink)), 0, 0, pdl=True))
            for launch in launches:
                launch.prepare()
            graph = K.capture(stream, lambda ls=launches: [launch() for launch in ls])
            rows = native_kernel_bench.pair_stamps(graph, stream, stamps, ends)
            del rows["start"]  # the columns h200_fanout_probe.json has
            bytes_block = 4 * N * (p + 2 * k)
            us = {f"{name}_us": statistics.median(v) / 1e3 for name, v in rows.items()}
            res["cases"][f"G{G}_parts{p}_konst{k}"] = {
                "grid": G, "parts": p, "konst": k, "bytes_a_block": bytes_block, "bytes_all_blocks": G * bytes_block,
                **us}
            print(f"G {G:3d} parts {p} konst {k}: " + ", ".join(f"{n} {v:.3f}" for n, v in us.items()), flush=True)
    native_kernel_bench.write_result("h200_fanout_probe.json", res)


if __name__ == "__main__":
    main()
