"""H200 microbenchmark (CuPy only, issue 16): does gate|up's row layout change how fast its weights stream? gemma3-1b's
gate|up is [2 x 6912, 1152] fp16, gate rows then up rows, so each warp of gemv_split reads from two regions 16 MB
apart (row j and row j + 6912). This streams the same 32 MB with gemv_split's load pattern (8 warps a block, P
(gate, up) row pairs a warp, a row's 144 uint4 over 32 lanes, __ldcs, a resident grid looping over row groups), in
three layouts. "split": the two regions, as main stores them. "interleaved": gate row j at 2j and its up row at
2j + 1, one contiguous stream. "linear": a grid-stride uint4 stream over the same bytes, no rows. The kernels only
load and fold the bits (nothing is computed that would hide the loads). Each launch reads one of 8 copies in turn,
so it starts cold in L2 (8 x 32 MB > 60 MB L2). Each time is a batch of 64 launches between two events, divided by
64. "empty": a batch of empty kernels, the launch-to-launch gap (not subtracted). The batches of all variants
are interleaved over 9 rounds, and the result is their medians.
"linear" is h200_stream_probe.py's plain read (rd), timed here beside the row layouts.
Writes $OUT/h200_gate_up_layout.json (with provenance: native_kernel_bench's; the committed run at 3e5b473 used a
copy of its own: GPU, SMs, L2, driver, CUDA, CuPy, clocks, git sha, command, date).
Usage: OUT=/tmp/out python3 scripts/h200_gate_up_layout.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import cupy as cp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import native_kernel_bench as nkb  # noqa: E402  (provenance; nothing runs at import)

ROWS, COLS, COPIES, BATCH, ROUNDS = 6912, 1152, 8, 64, 9

SRC = r"""
template <int P, int INTER>
__global__ void __launch_bounds__(256) rows(const uint4* __restrict__ W, const int n_rows, const int row_u4,
                                            const int n_groups, const unsigned key, unsigned* sink) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    unsigned acc = 0u;
    for (int g = blockIdx.x; g < n_groups; g += gridDim.x) {
        const int j = (g * nwarps + warp) * P;
        uint4 w[2 * P][5];
#pragma unroll
        for (int i = 0; i < P; ++i) {
            const int rg = INTER ? 2 * (j + i) : j + i, ru = INTER ? 2 * (j + i) + 1 : j + i + n_rows;
#pragma unroll
            for (int v = 0; v < 5; ++v) {
                const int col = lane + 32 * v;
                const bool ok = j + i < n_rows && col < row_u4;
                w[i][v] = ok ? __ldcs(W + (size_t)rg * row_u4 + col) : make_uint4(0u, 0u, 0u, 0u);
                w[P + i][v] = ok ? __ldcs(W + (size_t)ru * row_u4 + col) : make_uint4(0u, 0u, 0u, 0u);
            }
        }
#pragma unroll
        for (int i = 0; i < 2 * P; ++i)
#pragma unroll
            for (int v = 0; v < 5; ++v) acc += w[i][v].x ^ w[i][v].y ^ w[i][v].z ^ w[i][v].w;
    }
    if (acc == key) sink[0] = acc;  // never true for the random key: the loads stay, nothing is stored
}

__global__ void empty() {}

__global__ void __launch_bounds__(256) linear(const uint4* __restrict__ W, const long long n, const unsigned key,
                                              unsigned* sink) {
    unsigned acc = 0u;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const uint4 w = __ldcs(W + i);
        acc += w.x ^ w.y ^ w.z ^ w.w;
    }
    if (acc == key) sink[0] = acc;
}
"""


def main() -> None:
    out = Path(os.environ["OUT"])
    out.mkdir(parents=True, exist_ok=True)
    names = [f"rows<{p},{i}>" for p in (1, 2) for i in (0, 1)]
    mod = cp.RawModule(code=SRC, options=("-std=c++17",), name_expressions=[*names, "linear", "empty"])
    fns = {n: mod.get_function(n) for n in names}
    lin, empty = mod.get_function("linear"), mod.get_function("empty")
    row_u4 = COLS * 2 // 16
    copies = [cp.random.randint(0, 2**31, size=(2 * ROWS * row_u4 * 4,), dtype=cp.uint32) for _ in range(COPIES)]
    sink = cp.zeros(1, cp.uint32)
    key = cp.uint32(0x9E3779B9)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    n_u4 = 2 * ROWS * row_u4

    def launcher(name: str, blocks: int):
        if name == "empty":
            return lambda w: empty((blocks,), (32,), ())
        if name == "linear":
            return lambda w: lin((blocks,), (256,), (w, cp.int64(n_u4), key, sink))
        p = int(name.split("<")[1][0])
        n_groups = -(-ROWS // (8 * p))
        return lambda w: fns[name]((min(blocks, n_groups),), (256,),
                                   (w, cp.int32(ROWS), cp.int32(row_u4), cp.int32(n_groups), key, sink))

    variants = {f"{layout}_P{p}_x{k}": (f"rows<{p},{int(layout == 'interleaved')}>", k * sms)
                for layout in ("split", "interleaved") for p in (1, 2) for k in (2, 3, 4, 6, 8)}
    variants.update({f"linear_x{k}": ("linear", k * sms) for k in (2, 4, 8)})
    variants["empty"] = ("empty", sms)  # the launch-to-launch gap a batch holds (not subtracted)
    calls = {v: launcher(*nb) for v, nb in variants.items()}
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(ROUNDS + 1):  # round 0: warm-up, not kept
        order = list(variants)[r % len(variants):] + list(variants)[:r % len(variants)]
        for v in order:
            start.record()
            for b in range(BATCH):
                calls[v](copies[b % COPIES])
            stop.record()
            stop.synchronize()
            if r:
                times[v].append(cp.cuda.get_elapsed_time(start, stop) * 1e3 / BATCH)
    assert int(sink[0]) == 0, "the sink was written: the key matched a fold (rerun)"
    nbytes = 2 * ROWS * COLS * 2
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    prov = {**nkb.provenance(), "sms": props["multiProcessorCount"], "l2_bytes": props["l2CacheSize"],
            "method": "batches of 64 launches between two events over 8 rotating copies; medians of 9 rounds"}
    res = {"provenance": prov, "bytes": nbytes, "rows": 2 * ROWS, "cols": COLS, "copies": COPIES,
           "batch": BATCH, "rounds": ROUNDS, "blocks": {v: nb[1] for v, nb in variants.items()},
           "us_per_launch": times,
           "median_us": {v: statistics.median(t) for v, t in times.items()}}
    res["median_tb_s"] = {v: nbytes / (us * 1e-6) / 1e12 for v, us in res["median_us"].items()}
    (out / "h200_gate_up_layout.json").write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({v: round(u, 3) for v, u in res["median_us"].items()}))


if __name__ == "__main__":
    main()
