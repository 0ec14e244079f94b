"""H200: Nsight Compute table of one native decode step beside onnxruntime's, gemma3-1b fp16 fused-cuda.

    OUT=/tmp/out python3 scripts/h200_native_ncu.py         # everything below (~1 min once the fixture is cached)
    python3 scripts/h200_native_ncu.py step FILE.json        # no ncu: replayed step times, the step's launches
    python3 scripts/h200_native_ncu.py profile               # one uncaptured native step inside profiler start/stop

Context 1024, KV capacity 1072 (the native bench's). Three processes: `step` (no profiler attached) records
NativeDecoder.replay_ms (the captured step without advance, 5 x 200 replays), onnxruntime's captured step at
the same capacity (decoders.cuda.replay_ms), the copy bandwidth, the floor, and every launch of the native step
(name, grid, the bytes it must move); then ncu profiles ONE uncaptured native step (`profile`) and ONE eager
onnxruntime step (`scripts/h200_kernels.py run fused-cuda 1072`) with METRICS, caches and clocks as found
(`--cache-control none --clock-control none`). ncu serializes kernels (PDL overlap is off while profiling), so
a sum of kernel times is the step without launch gaps, to compare with the replayed step.
Writes $OUT/h200_native_ncu_gemma3-1b.{json,csv}: per kernel the DRAM bytes read + written, time, achieved
TB/s, L2 bytes, SM and DRAM clocks; per native kernel class (qkv, attn, o, gate_up, down, head, advance) and
onnxruntime group (scripts/h200_kernels.GROUPS) the sums. Not here: the kernels themselves (vlmdecode.native).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import h200_kernels  # noqa: E402 - the ncu CSV reader and onnxruntime's kernel groups
import h200_native  # noqa: E402 - the gemma3-1b native pipeline as the native checks build it

NCU = os.environ.get("NCU", "/usr/local/cuda/bin/ncu")
METRICS = ["gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
           "gpc__cycles_elapsed.avg.per_second", "dram__cycles_elapsed.avg.per_second",
           "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread"]
CORE = METRICS[:3]  # what the table needs; the run falls back to these (and says so) if ncu refuses the others
NAME = "h200_native_ncu_gemma3-1b"
CONTEXT, CAPACITY = h200_native.CONTEXT, h200_native.CAPACITY


def native_prepared():
    """The gemma3-1b native decoder after a CONTEXT-token prompt (prefilled, first token picked); $NATIVE_SHAPES:
    Shapes overrides (JSON) for the step profiled; $NATIVE_REBUILD: the step rebuilt on the cached module or on one
    loaded afresh (h200_native.rebuild_from_env)."""
    from vlmdecode.profiling import prompt_ids

    pipe = h200_native.gemma_native()
    h200_native.rebuild_from_env(pipe.decoder)
    pipe.decoder.prepare_timing(pipe.embed(prompt_ids(CONTEXT), None))
    return pipe


def step(path: str) -> None:
    import numpy as np

    from vlmdecode import bench, costmodel
    from vlmdecode.decoders.cuda import CudaDecoder, replay_ms
    from vlmdecode.modelfolder import ModelFolder

    pipe = native_prepared()
    dec = pipe.decoder
    # the body (sampling's step: the full head) replayed in place; then the greedy step the profile runs (the bounded
    # head's tail by default), replayed along the sequence from the prompt
    out = {"native_replay_ms": [dec.replay_ms(200) for _ in range(5)],
           "native_greedy_replay_ms": dec.replay_ms(CAPACITY - CONTEXT - 8, greedy=True),
           "kernels_per_step": dec.kernels_per_step(),
           "pdl": dec.pdl, "shapes": str(dec.shapes),
           "launches": [{"launch": b.name, "grid": [int(g) for g in b.grid], "block": [int(t) for t in b.block],
                         "planned_bytes": int(b.nbytes)}
                        for b in dec.step_launches(True)]}  # the greedy step: the bounded head's tail if any
    folder = ModelFolder.load(h200_native._gemma["folder"])
    bw = bench.copy_bandwidth()
    weight, kv = costmodel.decoder_weight_bytes(folder), costmodel.kv_read_bytes(folder, CONTEXT)
    out.update(copy_bandwidth_tb_s=bw / 1e12, weight_bytes=weight, kv_bytes=kv, floor_ms=(weight + kv) / bw * 1e3)
    del pipe, dec
    ort = CudaDecoder(folder, "cuda", "graph", max_length=CAPACITY)  # as scripts/h200_step.py, at this capacity
    x = (np.random.default_rng(0).standard_normal((1, CONTEXT, folder.info.hidden_size)) * 0.03).astype(np.float16)
    out["ort_graph_step_ms"] = [replay_ms(ort, x) for _ in range(5)]
    Path(path).write_text(json.dumps(out, indent=2))
    print({k: v for k, v in out.items() if k != "launches"}, flush=True)


def profile() -> None:
    import cupy

    dec = native_prepared().decoder
    dec.replay_ms(10)  # the graph captured and warm
    with dec.stream:
        dec.enqueue_step(False)  # one uncaptured step first: the profiled one finds the caches as a step leaves them
    dec.stream.synchronize()
    cupy.cuda.profiler.start()
    with dec.stream:
        dec.enqueue_step(True)
    dec.stream.synchronize()
    cupy.cuda.profiler.stop()


def ncu(csv_path: Path, metrics: list[str], *argv: str) -> None:
    cmd = [NCU, "--profile-from-start", "off", "--cache-control", "none", "--clock-control", "none",
           "--metrics", ",".join(metrics), "--csv", "--print-units", "base", "--log-file", str(csv_path),
           sys.executable, *argv]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    tail = [line for line in (r.stdout + r.stderr).splitlines() if "plugin EP" not in line][-5:]
    print(f"ncu {argv[-1]}: exit {r.returncode} in {time.time() - t0:.0f} s", *tail, sep="\n  ", flush=True)
    if r.returncode or not csv_path.is_file():
        raise RuntimeError(f"ncu failed (exit {r.returncode}): {' '.join(cmd)}\n" + "\n".join(tail))


def row(k: dict) -> dict:
    """One profiled kernel: time, DRAM bytes, achieved TB/s, L2 bytes, clocks, occupancy, registers."""
    m = k["metrics"]
    ns = m["gpu__time_duration.sum"]
    mhz = lambda name: m[name] / 1e6 if name in m else None  # noqa: E731 - a clock ncu did not report: None
    rd, wr = m.get("dram__bytes_read.sum", float("nan")), m.get("dram__bytes_write.sum", float("nan"))
    return {"kernel": k["name"].split("(")[0][:80], "grid": k["grid"], "block": k["block"], "us": ns * 1e-3,
            "dram_read": rd, "dram_write": wr, "dram_bytes": rd + wr, "tb_per_s": (rd + wr) / ns * 1e-3,
            "l2_bytes": m.get("lts__t_bytes.sum"), "sm_mhz": mhz("gpc__cycles_elapsed.avg.per_second"),
            "dram_mhz": mhz("dram__cycles_elapsed.avg.per_second"),
            "occupancy_pct": m.get("sm__warps_active.avg.pct_of_peak_sustained_active"),
            "registers": m.get("launch__registers_per_thread")}


def totals(rows: list[dict], key: str) -> dict:
    """Per value of rows[key]: kernels, us, DRAM bytes, TB/s, share of the kernel time."""
    out: dict = defaultdict(lambda: {"kernels": 0, "us": 0.0, "dram_bytes": 0.0})
    for r in rows:
        g = out[r[key]]
        g["kernels"] += 1
        g["us"] += r["us"]
        g["dram_bytes"] += r["dram_bytes"]
    total = sum(r["us"] for r in rows)
    for g in out.values():
        g["tb_per_s"] = g["dram_bytes"] / g["us"] * 1e-6
        g["share"] = g["us"] / total
    return dict(out)


def native_rows(kernels: list[dict], launches: list[dict]) -> list[dict]:
    """ncu's kernels matched to the step's launches by launch order (the names must agree)."""
    if len(kernels) != len(launches):
        raise RuntimeError(f"ncu profiled {len(kernels)} kernels; the native step launches {len(launches)}")
    rows = []
    for i, (k, lau) in enumerate(zip(kernels, launches)):
        stem = {"attn": "attention", "head": "gemv", "advance": "advance", "head_bound": "head_bound",
                "head_pick": "head_pick"}.get(lau["launch"].split(".")[-1], "gemv")
        if stem not in k["name"]:
            raise RuntimeError(f"kernel {i}: ncu saw {k['name'][:60]!r} where the step launches {lau['launch']}")
        r = row(k)
        rows.append({"side": "native", "index": i, "launch": lau["launch"], "class": lau["launch"].split(".")[-1],
                     "planned_bytes": lau["planned_bytes"], **r})
    return rows


def ncu_version() -> str:
    try:
        r = subprocess.run([NCU, "--version"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        return f"unknown ({e})"
    return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else f"unknown (exit {r.returncode})"


def summarize(step_info: dict, native_csv: Path, ort_csv: Path, folder, metrics: list[str] = METRICS) -> dict:
    import statistics

    from vlmdecode.profiling import provenance

    kernels = h200_kernels.read_ncu_metrics(native_csv)
    ort_kernels = h200_kernels.read_ncu_metrics(ort_csv)
    nat = native_rows(kernels, step_info["launches"])
    ort = [{"side": "onnxruntime", "index": i, "launch": "", "class": h200_kernels.group(k["name"]),
            "planned_bytes": None, **row(k)} for i, k in enumerate(ort_kernels)]
    body = [r for r in nat if r["class"] != "advance"]
    # the profiled step is the greedy one: its replays where recorded (files before the bounded head: the body's)
    replay = step_info.get("native_greedy_replay_ms") or min(step_info["native_replay_ms"])
    ort_step = min(step_info["ort_graph_step_ms"])
    prov = provenance({"gemma3-1b/fused-cuda": folder} if folder else None)
    prov["ncu"] = ncu_version()
    prov["ncu_units"] = {m: u for k in kernels for m, u in k["units"].items()}
    sides = {}
    for name, rows, step_ms, extra in (
            ("native", nat, replay, {"body_us": sum(r["us"] for r in body),
                                     "body_over_replay": sum(r["us"] for r in body) * 1e-3 / replay}),
            ("onnxruntime", ort, ort_step, {})):
        sides[name] = {"kernels": len(rows), "kernel_us": sum(r["us"] for r in rows),
                       "dram_bytes": sum(r["dram_bytes"] for r in rows), "replayed_step_ms": step_ms,
                       "kernel_sum_over_replay": sum(r["us"] for r in rows) * 1e-3 / step_ms,
                       "groups": totals(rows, "class"), **extra}
    return {
        "provenance": prov,
        "method": ("ncu " + " ".join(["--cache-control none --clock-control none --print-units base --metrics",
                                      ",".join(metrics)])
                   + "; one uncaptured native greedy step (the layers, the bounded head's two kernels or the full "
                     "head, advance) and one eager onnxruntime step, after warm-up; "
                     "kernels serialized by ncu (no PDL overlap, no launch gaps); replayed steps measured in a "
                     "separate process without ncu (CUDA events: the body 5 x 200 replays, min; the greedy step "
                     "along the sequence once)"),
        "context": CONTEXT, "kv_capacity": CAPACITY,
        "copy_bandwidth_tb_s": step_info["copy_bandwidth_tb_s"], "weight_bytes": step_info["weight_bytes"],
        "kv_bytes": step_info["kv_bytes"], "floor_ms": step_info["floor_ms"],
        "native_replay_ms": step_info["native_replay_ms"], "ort_graph_step_ms": step_info["ort_graph_step_ms"],
        "native_replay_median_ms": statistics.median(step_info["native_replay_ms"]),
        "native_greedy_replay_ms": step_info.get("native_greedy_replay_ms"),
        "kernels_per_step": step_info["kernels_per_step"], "pdl": step_info["pdl"], "shapes": step_info["shapes"],
        "native": sides["native"], "onnxruntime": sides["onnxruntime"], "rows": nat + ort}


def write(result: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{NAME}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    with open(out / f"{NAME}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(result["rows"][0]))
        w.writeheader()
        w.writerows(result["rows"])


def report(result: dict) -> None:
    print(f"\n==== {NAME}: copy {result['copy_bandwidth_tb_s']:.2f} TB/s, floor {result['floor_ms']:.3f} ms")
    for side in ("native", "onnxruntime"):
        s = result[side]
        print(f"{side}: {s['kernels']} kernels, sum {s['kernel_us']:.1f} us, {s['dram_bytes'] / 1e9:.3f} GB DRAM; "
              f"replayed step {s['replayed_step_ms']:.3f} ms (sum / replay {s['kernel_sum_over_replay']:.2f})")
        for g, v in sorted(s["groups"].items(), key=lambda kv: -kv[1]["us"]):
            print(f"   {g:12s} x{v['kernels']:3d} {v['us']:8.1f} us {v['dram_bytes'] / 1e6:9.2f} MB "
                  f"{v['tb_per_s']:5.2f} TB/s  {v['share']:.1%}")


def main() -> None:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "native_ncu"
    tmp.mkdir(parents=True, exist_ok=True)
    folder = h200_native.fixture("gemma3-1b", "fused-cuda")  # built once here, cached for the child processes
    me = str(Path(__file__).resolve())
    r = subprocess.run([sys.executable, me, "step", str(tmp / "step.json")], timeout=300)
    if r.returncode:
        raise RuntimeError(f"the step process failed (exit {r.returncode})")
    metrics, refused = METRICS, None
    try:
        ncu(tmp / "native.csv", metrics, me, "profile")
    except RuntimeError as e:  # a metric this ncu does not know: the table's three, recorded as such
        metrics, refused = CORE, str(e)
        ncu(tmp / "native.csv", metrics, me, "profile")
    ncu(tmp / "ort.csv", metrics, str(HERE / "h200_kernels.py"), "run", "fused-cuda", str(CAPACITY))
    result = summarize(json.loads((tmp / "step.json").read_text()), tmp / "native.csv", tmp / "ort.csv", folder,
                       metrics)
    if refused:
        result["metrics_refused"] = refused
    result["provenance"]["command"] = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    write(result, out)
    report(result)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "step":
        step(sys.argv[2])
    elif len(sys.argv) > 1 and sys.argv[1] == "profile":
        profile()
    else:
        main()
