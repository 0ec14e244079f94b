"""H200 (or any CUDA GPU with CuPy): each native kernel alone at gemma3-1b's shapes, with every block shape
of `h200_native.sweep` (weights rotated over copies past the L2, CUDA-graph replays, median per launch),
plus the device-to-device copy bandwidth of this run; every shape with plain launches and with programmatic
dependent launch (" pdl", as the decoder's step launches them). Needs CuPy only (no onnxruntime).

Writes data/results/h200_native_kernels.json (or $OUT/h200_native_kernels.json when OUT is set): per
kernel class the best shape's us and TB/s, every shape's time, the bytes moved, and provenance.
Usage: PYTHONPATH=. python3 scripts/native_kernel_bench.py
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import h200_native as hn  # noqa: E402  (its sweep and timing helpers; nothing runs at import)

H, I, NQ, D, V = 1152, 6912, 4, 256, 262144
BYTES = {"qkv": 1536 * H * 2, "o": H * NQ * D * 2, "gate_up": 2 * I * H * 2, "head": V * H * 2,
         "down/4": H * I * 2, "down/6": H * I * 2, "down/8": H * I * 2}


# CUDA C++ for the probes' clocks: %globaltimer now, and read only once `dep` is in (a register dependency)
GTIMER_CU = r"""
__device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");
    return t;
}
__device__ __forceinline__ unsigned long long clock_after(const float dep) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "f"(dep) : "memory");
    return t;
}
"""


def write_result(name: str, obj: dict, default: Path | str = "/tmp/out") -> Path:
    """obj as JSON in $OUT (else `default`) under `name`; the path written."""
    dest = Path(os.environ["OUT"]) if os.environ.get("OUT") else Path(default)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / name).write_text(json.dumps(obj, indent=2))
    return dest / name


def replayed_stamps(graph, stream, stamps, replays: int = 5):
    """The probes' replays: `graph` launched once to warm up, then `replays` times, each followed by a
    synchronize; yields the stamps array (int64 on the host) after each."""
    import numpy as np

    with stream:
        graph.launch(stream)  # warm-up
        stream.synchronize()
        for _ in range(replays):
            graph.launch(stream)
            stream.synchronize()
            yield stamps.get().astype(np.int64)


def pair_stamps(graph, stream, stamps, ends, replays: int = 5) -> dict[str, list[float]]:
    """The probes' (fan-out, cold reader) per-pair block stamps: `graph` holds writer/reader pairs, replayed as
    `replayed_stamps` does; per pair (medians over the reader's blocks, ns) start / wait are a block's start /
    after-wait stamp minus the writer's last block end, own its thread 0's data in and block its barrier, both
    after its wait; block_max the slowest block's block. stamps: [pair, block, 4] (start, after wait, own,
    barrier); ends: [pair, writer block] (each writer block's end)."""
    import numpy as np

    rows: dict[str, list[float]] = {"start": [], "wait": [], "own": [], "block": [], "block_max": []}
    for s in replayed_stamps(graph, stream, stamps, replays):
        e = ends.get().astype(np.int64).max(axis=1)
        for r in range(s.shape[0]):
            t = s[r]
            rows["start"].append(float(np.median(t[:, 0] - e[r])))
            rows["wait"].append(float(np.median(t[:, 1] - e[r])))
            rows["own"].append(float(np.median(t[:, 2] - t[:, 1])))
            rows["block"].append(float(np.median(t[:, 3] - t[:, 1])))
            rows["block_max"].append(float(np.max(t[:, 3] - t[:, 1])))
    return rows


def copy_tb_per_s(nbytes=1 << 30, reps=20) -> float:
    import cupy
    import numpy as np

    a, b = cupy.empty(nbytes, cupy.uint8), cupy.empty(nbytes, cupy.uint8)
    b[...] = a
    times = []
    for _ in range(reps):
        s, e = cupy.cuda.Event(), cupy.cuda.Event()
        s.record()
        b[...] = a
        e.record()
        e.synchronize()
        times.append(cupy.cuda.get_elapsed_time(s, e))
    return 2 * nbytes / (float(np.median(times)) * 1e-3) / 1e12


def provenance() -> dict:
    import cupy

    rt = cupy.cuda.runtime
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    return {"gpu": rt.getDeviceProperties(0)["name"].decode(), "nvidia_smi": smi,
            "driver": rt.driverGetVersion(), "cuda_runtime": rt.runtimeGetVersion(), "cupy": cupy.__version__,
            "git_sha": os.environ.get("VLMDECODE_GIT_SHA") or os.environ.get("GIT_SHA") or sha or "unknown",
            "command": " ".join([sys.executable] + sys.argv),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "method": "graph replay of >= 200 launches over weight copies > 256 MB; median of 15 replays / launches"}


def uncapped_grid() -> dict:
    """The GEMVs at 8 warps with one block per row group (resident_grid=False), and with the weights loaded
    after the prologue (prefetch_weights=False: fewer registers), for comparison."""
    import cupy

    from vlmdecode.native import kernels as K

    cases = {"qkv": (1536, H, 1, K.EPI_PLAIN, 1), "gate_up": (I, H, 1, K.EPI_GELU, 2),
             "down/8": (H, I, 8, K.EPI_PLAIN, 1)}
    fns = K.compile_module({(K.loads_per_lane(k // sp), rpw, epi, pf) for _, k, sp, epi, rpw in cases.values()
                            for pf in (0, 1)}, set())
    f32 = lambda n: cupy.random.standard_normal(n, dtype=cupy.float32)  # noqa: E731
    vec, resid, delta, w_a, w_b, y = f32(I), f32(H), f32((8, H)), f32(H), f32(H), cupy.zeros(2 * I, cupy.float32)
    res = {}
    for name, (rows, k, sp, epi, rpw) in cases.items():
        total = 2 * rows if epi == K.EPI_GELU else rows
        copies = max(1, -(-256_000_000 // (total * k * 2)))
        Ws = [(cupy.random.standard_normal((total, k), dtype=cupy.float32) * 0.05).astype(cupy.float16)
              for _ in range(copies)]
        kw = dict(src=vec) if sp > 1 else dict(src=resid, delta=delta, delta_parts=6, delta_w=w_a, norm_w=w_b)
        for label, opts in (("uncapped", dict(resident_grid=False)), ("late weights", dict(prefetch_weights=False))):
            for warps in (4, 8):
                ls = [K.gemv(fns, name, W, rows, k // sp, splits=sp, y=y, epi=epi, warps=warps, rpw=rpw, **opts,
                             **kw) for W in Ws] * max(1, 200 // copies)
                for pdl in (False, True):
                    ms = hn.time_graph(ls, pdl=pdl)
                    res.setdefault(f"{name} {label}", {})[f"{warps}x{rpw}" + (" pdl" if pdl else "")] = {
                        "us": ms * 1e3, "tb_per_s": total * k * 2 / (ms * 1e-3) / 1e12}
                BYTES[f"{name} {label}"] = total * k * 2
        del Ws
    return res


def main() -> None:
    hn.sweep()
    if "sweep_gemma3_1b_shapes" not in hn.results:
        raise SystemExit(hn.results["errors"].get("sweep_gemma3_1b_shapes", "sweep failed"))
    sweep = dict(hn.results["sweep_gemma3_1b_shapes"])
    att = sweep.pop("attention")
    for kind, keys in (("global", hn.CONTEXT + 1), ("local", 512)):  # K and V rows read at context 1024
        sweep[f"attention {kind}"] = {c.split(" ", 1)[1]: r for c, r in att.items() if c.startswith(kind)}
        BYTES[f"attention {kind}"] = 2 * keys * D * 2
    sweep.update(uncapped_grid())
    out = {"provenance": provenance(), "copy_tb_per_s": copy_tb_per_s(), "kernels": {}}
    for name, res in sweep.items():
        best = min(res, key=lambda c: res[c]["us"])
        out["kernels"][name] = {"best_shape": best, "us": res[best]["us"], "tb_per_s": res[best]["tb_per_s"],
                                "bytes": BYTES[name], "all_us": {c: round(r["us"], 3) for c, r in res.items()}}
        print(f"{name:18s} best {best:14s} {res[best]['us']:8.2f} us {res[best]['tb_per_s']:5.2f} TB/s")
    print(f"copy {out['copy_tb_per_s']:.2f} TB/s")
    write_result("h200_native_kernels.json", out, ROOT / "data" / "results")


if __name__ == "__main__":
    main()
