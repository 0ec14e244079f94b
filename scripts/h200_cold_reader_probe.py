"""H200 probe: does a block that becomes resident only after its predecessor's blocks leave (as attention_cl's
cluster does after qkv) take longer to get that predecessor's outputs than one resident early (as o and the GEMVs
are, under PDL)?

Why: in the step attention_cl's q rows come in ~1.4 us after its wait (`h200_native_timeline_probes_be261dc.json`),
copying them once a block did not help (`h200_native_timeline_stage_q_cf382aa.json`), and o's plain vector comes in
~0.5 us after its own. The fan-out probe (`h200_fanout_probe.json`: 0.3-0.4 us for one part at any grid) had its
readers resident early. attention_cl's 228 registers a thread leave it no room beside qkv's blocks, so its cluster
starts late, cold: this probe separates "late" from "cluster" from "what attention does", outside the step.

  write   like qkv: W blocks of 256 threads stream a share of a 3.5 MB weight copy (__ldcs; 16 rotating copies,
          past the L2), wait (PDL), then lane 0 of each warp stores one fp32 output row (1536 rows, as gemv's
          epilogue). HOG bytes of dynamic shared memory a block: 100 KB at 264 blocks (2 an SM) leaves no room for a
          reader block until they leave ("late"); 0 leaves room ("early")
  read    its PDL successor, like attention_cl's first phase: 16 blocks of 256 threads, a cluster of 16 or plain
          blocks, 40 KB of dynamic shared memory (attention_cl's order); pdl_trigger (and, clustered,
          cluster_arrive_relaxed), pdl_wait, then every warp loads the G = 4 q rows of 256 floats through L2
          (ld.global.cg, 2 float4 a lane a row) and sums them. Thread 0 stamps %globaltimer at its start, after the
          wait, when its sum is in, and after a block barrier.

Per (reader, placement) it reports, over 20 write/read pairs in one CUDA graph replayed 5 times, medians over blocks
and pairs of: start (a read block's start minus the writer's last block end: negative when resident early), wait
(its after-wait stamp minus that end), own (thread 0's rows in, after its wait) and block (every warp's). If "late"
readers take ~1 us longer for the same bytes, the q-row latency is a cold block's, and what helps is residency,
not fewer bytes. Writes $OUT/h200_cold_reader_probe.json. CuPy only.

The first run (72eb1c9) answered no: late and early readers took the same ~1.0 us (a cluster) for the rows, against
the fan-out probe's 0.3-0.4 us. That probe differed in its writer (coalesced stores by every thread) and its reader
(each thread its own float4s), so `--stores` takes those two apart at qkv's grid (192 blocks, early): the writer's
rows as gemv stores them (lane 0 of each warp, 4 bytes) or gathered into whole 32-byte sectors, read every warp all
rows (attention_cl) or each thread its own (a fold) -> $OUT/h200_cold_reader_probe_stores.json.
Usage: OUT=/tmp/out python3 scripts/h200_cold_reader_probe.py [--stores]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ROWS, G, HD = 1536, 4, 256  # gemma3-1b's qkv outputs, q heads a KV head, head dim
PROBE = r"""
// the writer: a share of a weight copy (__ldcs), then one output row a warp (lane 0's 4-byte store, gemv's PLAIN)
// STORE 0: lane 0 of each warp stores its row (gemv's PLAIN epilogue: 4-byte stores, a 32-byte sector from 8 warps);
// 1: the block's rows gathered through shared memory and stored by its first threads (whole sectors)
template <int STORE>
__global__ void __launch_bounds__(256) qkv_write(const uint4* __restrict__ w, const long long n16, float* y,
                                                 const int n_out, unsigned long long* ends) {
    __shared__ float rows_s[8];
    pdl_trigger();
    unsigned acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        const uint4 v = __ldcs(w + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    pdl_wait();  // the previous reader, as qkv waits on down
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int r0 = blockIdx.x * nw; r0 < n_out; r0 += gridDim.x * nw) {  // a block's nw (8) consecutive rows
        const int r = r0 + warp;
        const float v = (float)(r & 1023) * 1e-3f + (float)(acc & 1u);
        if (STORE == 0) {
            if (lane == 0 && r < n_out) y[r] = v;
        } else {
            if (lane == 0) rows_s[warp] = v;
            __syncthreads();
            if ((int)threadIdx.x < nw && r0 + (int)threadIdx.x < n_out) y[r0 + threadIdx.x] = rows_s[threadIdx.x];
            __syncthreads();
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ends[blockIdx.x]) :: "memory");
}

// PAT 0: every warp loads the G q rows (attention_cl's first phase); 1: each thread its own float4s of the rows
// (a fold's pattern, as the fan-out probe's reader)
template <bool CL, int PAT>
__device__ __forceinline__ void q_read(const float* qkv_in, unsigned long long* stamps, float* sink) {
    const unsigned long long t0 = gtimer();
    pdl_trigger();
    if (CL) cluster_arrive_relaxed();
    pdl_wait();
    const unsigned long long t1 = gtimer();
    const float* qkv;  // as attention_cl: no load of it above the wait
    asm volatile("mov.b64 %0, %1;" : "=l"(qkv) : "l"(qkv_in) : "memory");
    const int lane = threadIdx.x & 31;
    float s = 0.f;
    if (PAT == 0) {
#pragma unroll
        for (int r = 0; r < QG; ++r) {
            float x[8];
            ld8_cg(qkv + (size_t)r * QHD + lane * 8, x);
#pragma unroll
            for (int e = 0; e < 8; ++e) s += x[e];
        }
    } else {
        for (int i = threadIdx.x; i < QG * QHD / 4; i += blockDim.x) {
            const float4 v = __ldcg(reinterpret_cast<const float4*>(qkv) + i);
            s += v.x + v.y + v.z + v.w;
        }
    }
    const unsigned long long t2 = clock_after(s);
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long* st = stamps + (size_t)blockIdx.x * 4;
        st[0] = t0; st[1] = t1; st[2] = t2;
        st[3] = gtimer();
    }
    if (s == 1234.5f) sink[blockIdx.x] = s;  // keeps the loads
    if (CL) cluster_wait();
}

template <int PAT>
__global__ void __launch_bounds__(256, 1) __cluster_dims__(16, 1, 1) q_read_cl(const float* q, unsigned long long* st,
                                                                              float* sink) {
    q_read<true, PAT>(q, st, sink);
}

template <int PAT>
__global__ void __launch_bounds__(256, 1) q_read_plain(const float* q, unsigned long long* st, float* sink) {
    q_read<false, PAT>(q, st, sink);
}
"""
PLACEMENTS = {"late": (264, 100 << 10), "early": (264, 0), "early192": (192, 0)}  # writer blocks, its smem a block
# (writer, reader, placement): the placement study (the first run), and --stores: the writer's stores and the
# reader's pattern at qkv's grid
CASES = [("qkv_write<0>", f"{r}<0>", p) for r in ("q_read_cl", "q_read_plain") for p in PLACEMENTS]
STORE_CASES = [(f"qkv_write<{w}>", r, "early192") for w in (0, 1)
               for r in ("q_read_cl<0>", "q_read_plain<0>", "q_read_cl<1>", "q_read_plain<1>")]
READ_BLOCKS, READ_SMEM = 16, 40 << 10
PAIRS, COPIES, WRITE_BYTES = 20, 16, ROWS * 1152 * 2
METHOD = (f"{PAIRS} write/read pairs in one CUDA graph (write: a {WRITE_BYTES / 2**20:.1f} MB weight copy of "
          f"{COPIES} rotating, then {ROWS} rows by lane 0 of each warp, each block stamping its end; read: its PDL "
          f"successor, {READ_BLOCKS} blocks, {READ_SMEM >> 10} KB dynamic shared memory), replayed 5 times; per pair: "
          "start / wait = a read block's start / after-wait stamp minus the writer's last block end, own = thread "
          "0's rows in minus its after-wait, block = after the block barrier minus after-wait; medians over blocks "
          "and pairs; block_max: the median over pairs of the slowest block's block")


def main(stores: bool = False) -> None:
    import cupy
    import native_kernel_bench

    from vlmdecode.native import kernels as K
    from vlmdecode.native.kernels_src import SOURCE

    cases = STORE_CASES if stores else CASES
    names = sorted({n for c in cases for n in c[:2]})
    defs = f"#define QG {G}\n#define QHD {HD}\n"
    mod = cupy.RawModule(code=SOURCE + native_kernel_bench.GTIMER_CU + defs + PROBE, options=("-std=c++17",),
                         name_expressions=names)
    fns = {n: mod.get_function(n) for n in names}
    for n in names:
        fns[n].max_dynamic_shared_size_bytes = max(h for _, h in PLACEMENTS.values()) if n.startswith("qkv") \
            else READ_SMEM
        if n.startswith("q_read_cl"):
            K._allow_large_clusters(fns[n])  # a cluster of 16, as attention_cl's
    rng = np.random.default_rng(0)
    weights = [cupy.asarray(rng.integers(0, 2**31, WRITE_BYTES // 4, dtype=np.int64).astype(np.uint32))
               for _ in range(COPIES)]
    y = cupy.zeros(ROWS, cupy.float32)
    sink = cupy.zeros(1024, cupy.float32)
    res: dict = {"provenance": {**native_kernel_bench.provenance(), "method": METHOD}, "cases": {}}
    stream = cupy.cuda.Stream(non_blocking=True)
    for writer, reader, place in cases:
        wb, hog = PLACEMENTS[place]
        stamps = cupy.zeros((PAIRS, READ_BLOCKS, 4), cupy.uint64)
        ends = cupy.zeros((PAIRS, wb), cupy.uint64)
        launches = []
        for r in range(PAIRS):
            w = weights[r % COPIES]
            launches.append(K.Launch("write", fns[writer], (wb, 1, 1), (256, 1, 1),
                                     (K.ptr(w), np.uint64(w.nbytes // 16), K.ptr(y), np.int32(ROWS),
                                      np.uint64(ends.data.ptr + r * wb * 8)), hog, w.nbytes, pdl=True))
            launches.append(K.Launch("read", fns[reader], (READ_BLOCKS, 1, 1), (256, 1, 1),
                                     (K.ptr(y), np.uint64(stamps.data.ptr + r * READ_BLOCKS * 4 * 8), K.ptr(sink)),
                                     READ_SMEM, 0, pdl=True))
        for launch in launches:
            launch.prepare()
        graph = K.capture(stream, lambda ls=launches: [launch() for launch in ls])
        rows = native_kernel_bench.pair_stamps(graph, stream, stamps, ends)
        us = {f"{name}_us": statistics.median(v) / 1e3 for name, v in rows.items()}
        key = f"{writer}_{reader}_{place}" if stores else f"{reader.split('<')[0]}_{place}"
        res["cases"][key] = {"writer": writer, "reader": reader, "placement": place, "writer_blocks": wb,
                             "writer_smem": hog, **us}
        print(f"{writer:13s} {reader:16s} {place:8s}: " + ", ".join(f"{n} {v:.3f}" for n, v in us.items()),
              flush=True)
    native_kernel_bench.write_result("h200_cold_reader_probe_stores.json" if stores else "h200_cold_reader_probe.json",
                                     res)


if __name__ == "__main__":
    main("--stores" in sys.argv[1:])
