"""H200 probe: what does a kernel pay to fetch its own code, warm against cold?

Why: the step's kernels are long straight-line code, each run once a layer by every block (attention_cl's sm_90
instance is 4093 instructions, 64 KB; qkv's and gate|up's GEMVs 38 and 31 KB; a layer's five kernels 187 KB:
data/results/step_code_size_36122c0.txt), and
several phases of the step take far longer than their loads and arithmetic explain: the fold's ~0.9 us between its
loads and its first reduction, even right after itself (h200_icache_probe_312527d.json), and attention's 16 blocks
ending their keys phase on the same 32 ns tick (h200_native_timeline_attn_trigger_d538729.json). If cold code is
fetched at a rate far below the issue rate, code size is a cost of its own.

The probe: generated kernels whose body is S KB of straight-line FFMAs (32 independent accumulators, so a warp can
issue one a cycle), 132 blocks of 1 or 8 warps; thread 0 stamps %globaltimer at its start and once the sum of its
accumulators is in. Each body is timed
  warm      right after a launch of itself (its code in every cache it can be in)
  cold_l2   right after a different 192 KB body on every SM (its code out of the SMs' instruction caches, in L2)
  cold_dram as cold_l2, then a 192 MB read through L2 (its code out of L2 as well)
in one CUDA graph of 10 repetitions, replayed 3 times; medians over blocks and repetitions. `issue_us` is the body's
FFMA count a scheduler issues at one a cycle (1 warp: one warp a scheduler; 8 warps: two), at the clock read from
the device. Writes $OUT/h200_code_fetch_probe.json. CuPy only.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES_KB = (4, 16, 32, 64, 128)
EVICT_KB = 192
REPS, REPLAYS, GRID = 10, 3, 132
STREAM_BYTES = 192 << 20
ACC = 32


def ffmas(kb: int) -> int:
    """FFMAs in kb KB of sm_90 code (16 bytes an instruction)."""
    return kb * 1024 // 16


def body(name: str, kb: int) -> str:
    """An extern "C" kernel `name` whose body is kb KB of FFMAs over ACC accumulators (gtimer and clock_after:
    native_kernel_bench.GTIMER_CU)."""
    lines = [f"    a{i % ACC} = fmaf(a{i % ACC}, b, c);" for i in range(ffmas(kb))]
    init = " ".join(f"float a{i} = (float)(threadIdx.x + {i}) * 1e-3f;" for i in range(ACC))
    total = " + ".join(f"a{i}" for i in range(ACC))
    return f"""
extern "C" __global__ void {name}(const float b, const float c, unsigned long long* st, float* sink) {{
    const unsigned long long t0 = gtimer();
    {init}
{chr(10).join(lines)}
    const float s = {total};
    const unsigned long long t1 = clock_after(s);
    if (threadIdx.x == 0) {{ st[2 * blockIdx.x] = t0; st[2 * blockIdx.x + 1] = t1; }}
    if (s == 1234.5f) sink[blockIdx.x] = s;
}}
"""


HEAD = r"""
// a read of n16 uint4 through L2 (plain loads: the lines stay in L2 and push out what was there)
extern "C" __global__ void l2_sweep(const uint4* w, const long long n16, unsigned int* sink) {
    unsigned int acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        const uint4 v = w[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) sink[0] = acc;
}
"""


def main() -> None:
    import cupy
    import native_kernel_bench

    from vlmdecode.native import kernels as K

    bodies = "".join(body(f"body{kb}", kb) for kb in SIZES_KB) + body("evict", EVICT_KB)
    src = native_kernel_bench.GTIMER_CU + HEAD + bodies
    mod = cupy.RawModule(code=src, options=("-std=c++17",))
    fns = {n: mod.get_function(n) for n in [f"body{kb}" for kb in SIZES_KB] + ["evict", "l2_sweep"]}
    sweep = cupy.zeros(STREAM_BYTES // 4, cupy.uint32)
    sink = cupy.zeros(1024, cupy.float32)
    usink = cupy.zeros(4, cupy.uint32)
    dummy = cupy.zeros(2 * GRID, cupy.uint64)
    clock_mhz = cupy.cuda.Device().attributes.get("ClockRate", 1980000) / 1e3  # kHz; the H200's boost if absent
    b, c = np.float32(0.999), np.float32(1e-3)
    res: dict = {"provenance": {**native_kernel_bench.provenance(),
                                "method": __doc__.split("The probe: ")[1].split("Writes")[0].strip()},
                 "clock_mhz": clock_mhz, "evict_kb": EVICT_KB, "cases": {}}
    stream = cupy.cuda.Stream(non_blocking=True)

    def run(fn, warps, st):
        return K.Launch("x", fn, (GRID, 1, 1), (32 * warps, 1, 1), (b, c, np.uint64(st), K.ptr(sink)), 0, 0)

    for kb in SIZES_KB:
        for warps in (1, 8):
            for cond in ("warm", "cold_l2", "cold_dram"):
                stamps = cupy.zeros((REPS, GRID, 2), cupy.uint64)
                launches = []
                for r in range(REPS):
                    if cond == "warm":
                        launches.append(run(fns[f"body{kb}"], warps, dummy.data.ptr))
                    else:
                        launches.append(run(fns["evict"], 8, dummy.data.ptr))
                    if cond == "cold_dram":
                        launches.append(K.Launch("sweep", fns["l2_sweep"], (528, 1, 1), (256, 1, 1),
                                                 (K.ptr(sweep), np.int64(sweep.nbytes // 16), K.ptr(usink)), 0,
                                                 sweep.nbytes))
                    launches.append(run(fns[f"body{kb}"], warps, stamps.data.ptr + r * GRID * 16))
                for launch in launches:
                    launch.prepare()
                graph = K.capture(stream, lambda ls=launches: [launch() for launch in ls])
                replays = native_kernel_bench.replayed_stamps(graph, stream, stamps, REPLAYS)
                times = [float(np.median(s[r, :, 1] - s[r, :, 0])) for s in replays for r in range(REPS)]
                n = ffmas(kb)
                issue_us = n * (1 if warps <= 4 else warps // 4) / clock_mhz
                us = statistics.median(times) / 1e3
                res["cases"][f"{kb}KB_w{warps}_{cond}"] = {"kb": kb, "warps": warps, "cond": cond, "ffma": n,
                                                           "us": us, "issue_us": issue_us}
                print(f"{kb:4d} KB warps {warps} {cond:9s}: {us:.3f} us (issue {issue_us:.3f})", flush=True)
    native_kernel_bench.write_result("h200_code_fetch_probe.json", res)


if __name__ == "__main__":
    main()
