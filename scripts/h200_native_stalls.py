"""H200: where the warps of one native gemma3-1b step wait (issue 16: why the GEMVs stream below the copy bandwidth
and attention is latency-bound). Nsight Compute's warp-state counters over ONE uncaptured native step (the
`profile` process of scripts/h200_native_ncu.py: fused-cuda, context 1024, KV capacity 1072), caches and clocks as
found, kernels serialized (no PDL overlap, so a kernel's wait returns at once).

Per kernel class (qkv, attn, o, gate_up, down by position, 5 a layer, checked by name; then head, or the
bounded head's head_bound and head_pick, and advance, by name), summed over its launches: time, DRAM bytes and
TB/s, issue-active share, warp instructions, shared-memory wavefronts, and each stall reason's share of the warps'
resident cycles (`smsp__warps_issue_stalled_<reason>` over their sum, `selected` being the cycles that issued).
The reasons this ncu does not know are left out and listed. $NATIVE_SHAPES (JSON Shapes overrides, as
h200_native_ncu.py) profiles another step shape, $NATIVE_REBUILD=fresh the step on a kernel module loaded afresh
(h200_native.rebuild_from_env); --tag names the file.
Writes $OUT/h200_native_stalls[_TAG].json and ncu's CSV beside it. Not here: the step's time (a replayed step
overlaps its kernels).
Usage: OUT=/tmp/out python3 scripts/h200_native_stalls.py [--tag TAG]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import h200_kernels  # noqa: E402 - the ncu CSV reader
import h200_native  # noqa: E402 - fixtures, provenance
import h200_native_ncu as hnc  # noqa: E402 - the profiled step (`profile`), the ncu binary

REASONS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle", "long_scoreboard",
           "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction", "not_selected", "selected",
           "short_scoreboard", "sleeping", "tex_throttle", "wait")
STALL = "smsp__warps_issue_stalled_{}.sum"
OTHER = ["gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "smsp__inst_executed.sum",
         "smsp__issue_active.avg.pct_of_peak_sustained_active", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
         "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread"]
CLASSES = ("qkv", "attn", "o", "gate_up", "down")


def known_metrics() -> set[str]:
    """The metric base names this ncu knows on this GPU (`ncu --query-metrics`)."""
    r = subprocess.run([hnc.NCU, "--query-metrics"], capture_output=True, text=True, timeout=120)
    return {line.split()[0] for line in r.stdout.splitlines() if line.strip() and not line.startswith(("-", " "))}


def launch_class(i: int, layer_launches: int, name: str) -> str:
    """The class of launch i: 5 a layer, then the LM head's launches (the full head's GEMV, or the bounded head's
    head_bound and head_pick) and advance, each tail launch named by its kernel."""
    if i < layer_launches:
        return CLASSES[i % 5]
    return next((t for t in ("head_bound", "head_pick", "advance") if t in name), "head")


def by_class(kernels: list[dict], reasons: list[str]) -> dict:
    out: dict = defaultdict(lambda: defaultdict(float))
    layer_launches = 5 * sum("attention" in k["name"] for k in kernels)
    for i, k in enumerate(kernels):
        c = launch_class(i, layer_launches, k["name"])
        stem = {"attn": "attention", "head_bound": "head_bound", "head_pick": "head_pick",
                "advance": "advance"}.get(c, "gemv")
        if stem not in k["name"]:
            raise RuntimeError(f"kernel {i}: ncu saw {k['name'][:60]!r} where the step launches a {c}")
        m, d = k["metrics"], out[c]
        d["launches"] += 1
        for name in OTHER + [STALL.format(r) for r in reasons]:
            if name in m and not name.endswith(("pct_of_peak_sustained_active", "registers_per_thread")):
                d[name] += m[name]
        for name in ("smsp__issue_active.avg.pct_of_peak_sustained_active",
                     "sm__warps_active.avg.pct_of_peak_sustained_active"):  # time-weighted means
            if name in m:
                d[name] += m[name] * m["gpu__time_duration.sum"]
        d["registers"] = m.get("launch__registers_per_thread", float("nan"))
    table = {}
    for c, d in out.items():
        ns = d["gpu__time_duration.sum"]
        stalls = {r: d.get(STALL.format(r), 0.0) for r in reasons}
        total = sum(stalls.values()) or float("nan")
        table[c] = {"launches": int(d["launches"]), "us": ns / 1e3,
                    "dram_tb_s": (d["dram__bytes_read.sum"] + d["dram__bytes_write.sum"]) / ns * 1e-3,
                    "issue_active_pct": d["smsp__issue_active.avg.pct_of_peak_sustained_active"] / ns,
                    "warps_active_pct": d["sm__warps_active.avg.pct_of_peak_sustained_active"] / ns,
                    "warp_instructions": d["smsp__inst_executed.sum"],
                    "shared_wavefronts": d["l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"],
                    "registers": d["registers"],
                    "stall_share": {r: v / total for r, v in sorted(stalls.items(), key=lambda kv: -kv[1]) if v}}
    return table


def main() -> None:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "native_stalls"
    tmp.mkdir(parents=True, exist_ok=True)
    folder = h200_native.fixture("gemma3-1b", "fused-cuda")  # built once here, cached for the profiled process
    known = known_metrics()  # empty if the query failed: ask for every metric (ncu then names a refused one)
    reasons = [r for r in REASONS if not known or STALL.format(r).rsplit(".", 1)[0] in known]
    # launch__* are launch attributes, which --query-metrics does not list; x.avg.pct_... are ratios of a listed base
    metrics = [m for m in OTHER if not known or m.rsplit(".", 1)[0] in known or m.count(".") > 1
               or m.startswith("launch__")] + [STALL.format(r) for r in reasons]
    t0 = time.time()
    hnc.ncu(tmp / "stalls.csv", metrics, str(HERE / "h200_native_ncu.py"), "profile")
    kernels = h200_kernels.read_ncu_metrics(tmp / "stalls.csv")
    out.mkdir(parents=True, exist_ok=True)
    tag = "_" + sys.argv[sys.argv.index("--tag") + 1] if "--tag" in sys.argv else ""
    shutil.copy(tmp / "stalls.csv", out / f"h200_native_stalls{tag}.csv")  # kept whatever the classing below says
    from vlmdecode.profiling import provenance

    prov = provenance({"gemma3-1b/fused-cuda": folder})
    prov["ncu"] = hnc.ncu_version()
    prov["command"] = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    result = {"provenance": prov, "native_shapes": os.environ.get("NATIVE_SHAPES", ""),
              "native_rebuild": os.environ.get("NATIVE_REBUILD", ""),
              "method": "ncu --cache-control none --clock-control none --metrics " + ",".join(metrics)
                        + "; one uncaptured native step after warm-up, kernels serialized",
              "context": hnc.CONTEXT, "kv_capacity": hnc.CAPACITY, "kernels": len(kernels),
              "reasons_unknown_to_ncu": [r for r in REASONS if r not in reasons],
              "profile_seconds": time.time() - t0, "classes": by_class(kernels, reasons)}
    (out / f"h200_native_stalls{tag}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    for c, v in result["classes"].items():
        top = ", ".join(f"{r} {s:.0%}" for r, s in list(v["stall_share"].items())[:5])
        print(f"{c:8s} x{v['launches']:2d} {v['us']:7.1f} us {v['dram_tb_s']:5.2f} TB/s issue "
              f"{v['issue_active_pct']:4.1f}% warps {v['warps_active_pct']:4.1f}% regs {v['registers']:.0f}: {top}",
              flush=True)


if __name__ == "__main__":
    main()
