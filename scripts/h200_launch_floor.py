"""H200: what a decode step of N kernels costs when the kernels do (almost) nothing. Writes argv[1] (JSON).

A captured gemma3-1b fused-cuda step launches ~395 kernels (data/results/h200_kernels.json) and
replays in 2.06 ms at KV capacity 1088 (h200_profile_layouts.json); its MatMuls alone, as one graph,
take 0.90 ms. This measures the other term: N dependent launches of a tiny kernel (one [1152] fp16
row, gemma3-1b's hidden size, read and written: the size of a norm, residual add or activation of a
decode step) captured as one CUDA graph and replayed back to back, timed with CUDA events (median of
repeats). N = 1 .. 400. The slope is the cost of one kernel in a replayed graph whatever its bytes; a
step of N kernels cannot run faster than N times it. Needs only CuPy (no onnxruntime GPU build).
"""

import json
import sys

import cupy
import numpy as np

from vlmdecode.profiling import provenance

H = 1152
COUNTS = (1, 50, 100, 200, 300, 395)
REPLAYS, REPEATS = 200, 7

kernel = cupy.ElementwiseKernel("T x", "T y", "y = x * (T)0.999f + (T)0.001f", "tiny_row")


def graph_of(n: int, a, b, stream):
    """n launches, each reading the previous one's output (a -> b -> a ...), captured on `stream`."""
    with stream:
        stream.begin_capture()
        for i in range(n):
            src, dst = (a, b) if i % 2 == 0 else (b, a)
            kernel(src, dst)
        return stream.end_capture()


def replay_us(graph, stream) -> float:
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(REPEATS):
        start.record(stream)
        for _ in range(REPLAYS):
            graph.launch(stream)
        end.record(stream)
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) * 1e3 / REPLAYS)
    return float(np.median(times))


def main(path: str) -> None:
    stream = cupy.cuda.Stream(non_blocking=True)
    a = cupy.asarray(np.random.default_rng(0).standard_normal(H), dtype=cupy.float16)
    b = cupy.empty_like(a)
    kernel(a, b)  # compile and load the module outside any capture
    cupy.cuda.Device().synchronize()
    rows = []
    for n in COUNTS:
        g = graph_of(n, a, b, stream)
        g.launch(stream)  # warm-up
        stream.synchronize()
        us = replay_us(g, stream)
        rows.append({"kernels": n, "graph_us": us, "us_per_kernel": us / n})
        print(f"{n:4d} kernels: {us:8.1f} us per replay, {us / n:.2f} us per kernel", flush=True)
    k = np.array([r["kernels"] for r in rows], float)
    t = np.array([r["graph_us"] for r in rows])
    slope, intercept = np.polyfit(k, t, 1)
    assert bool(cupy.isfinite(a).all()), "the chain produced non-finite values"
    out = {"provenance": provenance(), "row_elements": H, "dtype": "float16", "replays": REPLAYS,
           "repeats": REPEATS, "rows": rows, "fit_us_per_kernel": float(slope), "fit_intercept_us": float(intercept)}
    with open(path, "w") as f:
        json.dump(out, f, indent=2, default=str)
    print(f"fit: {slope:.3f} us per kernel + {intercept:.1f} us")


if __name__ == "__main__":
    main(sys.argv[1])
