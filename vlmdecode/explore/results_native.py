"""The native decoder's recorded decode step beside onnxruntime's, by kernel group (data/results).

    step_groups(root=None)     one gemma3-1b fp16 fused-cuda decode step (context 1024): kernels and GPU µs by
                               STEP_GROUPS, native vs onnxruntime; the floor, kernel sums and replayed steps in attrs
    ncu_classes(root=None)     the Nsight Compute table by native kernel class (qkv, attn, o, gate_up, down, head,
                               advance): µs, DRAM vs planned bytes, TB/s, share of the copy bandwidth; empty without
                               the file
    step_group(decoder, name)  the STEP_GROUPS name of a native kernel class or an onnxruntime kernel name
    read_rates(root=None)      one kernel reading each of gemma3-1b's projection matrices (h200_stream_probe*.json):
                               the best plain streaming read, the copy engine alone, the register GEMV, the streaming
                               GEMV of branch gemv-st; µs and TB/s per projection and reader
    step_timeline(root=None)   the replayed native step's timeline (TIMELINE_FILE, scripts/h200_native_timeline.py):
                               per launch its first block's start, first wait release and last end (µs); per kernel
                               class its lead, release, body and span in attrs["classes"]; attention's phases by
                               layer kind in attrs["attention_phases"] where the run stamped them
    step_time(root=None)       the same step's time by kernel class, summed over its launches: the gaps before
                               each launch's wait release and its bodies, which add up to the step
    layer_budget(root=None)    a layer's span per kernel class (step_timeline) beside one kernel's plain read of
                               that class's weights (read_rates), and what a step would take if every GEMV ran at
                               that read rate with attention and the LM head as measured
    bounded_head(root=None)    the bounded LM head against the full head (BOUNDED_FILE, scripts/h200_bounded_head.py):
                               per context the greedy step and the per-token times of both heads, device mode and
                               onnxruntime-genai graph, the head kernels alone, whether the tokens were equal
    warp_stalls(root=None)     where each kernel class's warps wait (STALLS_FILE, scripts/h200_native_stalls.py):
                               Nsight Compute's stall reasons as shares of resident warp cycles, issue- and
                               warps-active shares, µs and TB/s per class over one serialized step

Sources, first found wins: `h200_native_ncu_gemma3-1b.json` (scripts/h200_native_ncu.py: both steps under
Nsight Compute in one run at one KV capacity, caches and clocks as found, plus both replayed steps and the
floor); else the earlier files: native composed from `h200_native_kernels.json` (each kernel class alone at its
best block shape, times its count in a step of the gemma3-1b preset; `advance` was not timed alone),
onnxruntime from `h200_kernels_warm.json` (its itemised kernels by name, the rest as "other"; KV capacity 1088)
with its replayed step from `h200_step_cap1088.json`, the floor from `h200_native_bench_gemma3-1b.csv`.
`attrs["source"]` names the files. Measures nothing; a missing file gives an empty frame, never a stand-in.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from .results import _recorded_json, load_results, results_dir

NCU_FILE = "h200_native_ncu_gemma3-1b.json"
BOUNDED_FILE = "h200_bounded_head.json"
STEP_GROUPS = ("attention", "GEMV / matmul", "norm", "other")
DECODERS = ("native", "onnxruntime")
NATIVE_GROUPS = {"attn": "attention", "qkv": "GEMV / matmul", "o": "GEMV / matmul", "gate_up": "GEMV / matmul",
                 "down": "GEMV / matmul", "head": "GEMV / matmul", "head_bound": "GEMV / matmul",
                 "head_pick": "GEMV / matmul"}  # advance: other
ORT_PATTERNS = [  # onnxruntime kernel names, first match wins; rotary + KV append and GQA's sequence lengths are
    # attention's work (the native attention kernel does them)
    ("attention", r"mha|attention|attn|flash|xqa|rope|rotary|sequencelength|softmax|gqa"),
    ("GEMV / matmul", r"gemv|gemm|nvjet|cutlass|xmma|splitk|cublas"),
    ("norm", r"norm"),
]
COLUMNS = ["decoder", "group", "kernels", "us", "share", "dram_MB", "TB/s"]


def step_group(decoder: str, name: str) -> str:
    """STEP_GROUPS name of a native kernel class (decoder "native") or an onnxruntime kernel name."""
    if decoder == "native":
        return NATIVE_GROUPS.get(name, "other")
    return next((g for g, pat in ORT_PATTERNS if re.search(pat, name, re.I)), "other")


def _frame(rows: list[dict], source: str, floor_ms: float, step_ms: dict, note: str) -> pd.DataFrame:
    t = pd.DataFrame(rows, columns=["decoder", "group", "kernels", "us", "dram_bytes"])
    t = t.groupby(["decoder", "group"], as_index=False).sum(min_count=1)
    t["share"] = t["us"] / t.groupby("decoder")["us"].transform("sum")
    t["dram_MB"] = t["dram_bytes"] / 1e6
    t["TB/s"] = t["dram_bytes"] / t["us"] * 1e-6
    order = t["decoder"].map(DECODERS.index) * len(STEP_GROUPS) + t["group"].map(STEP_GROUPS.index)
    t = t.iloc[np.argsort(order.to_numpy(), kind="stable")].reset_index(drop=True)[COLUMNS]
    t.attrs.update(source=source, floor_ms=floor_ms, step_ms=step_ms, note=note,
                   kernel_ms={d: float(g["us"].sum()) * 1e-3 for d, g in t.groupby("decoder")})
    return t


def _empty() -> pd.DataFrame:
    t = pd.DataFrame(columns=COLUMNS)
    t.attrs.update(source="", floor_ms=float("nan"), step_ms={}, kernel_ms={}, note="no recorded step")
    return t


def step_groups(root=None) -> pd.DataFrame:
    """Kernel time of one decode step by group, native vs onnxruntime (module docstring: sources). Columns:
    decoder, group, kernels, us, share (of that decoder's kernel sum), dram_MB and TB/s (NaN where not measured).
    attrs: source, floor_ms, kernel_ms and step_ms (replayed step, NaN if not recorded) per decoder, note."""
    folder = results_dir(root)
    ncu = _recorded_json(folder / NCU_FILE, NCU_FILE)
    if ncu is not None:
        rows = [{"decoder": r["side"], "group": step_group(r["side"], r["class"] if r["side"] == "native"
                                                           else r["kernel"]),
                 "kernels": 1, "us": r["us"], "dram_bytes": r["dram_bytes"]} for r in ncu["rows"]]
        steps = {"native": min(ncu["native_replay_ms"]), "onnxruntime": min(ncu["ort_graph_step_ms"])}
        return _frame(rows, NCU_FILE, ncu["floor_ms"], steps,
                      f"Nsight Compute, one step each at context {ncu['context']}, KV capacity {ncu['kv_capacity']} "
                      "(kernels serialized: the sum has no launch gaps)")
    rows = _native_alone(folder) + _ort_warm(folder)
    if not rows:
        return _empty()
    bench = load_results("h200_native_bench_gemma3-1b.csv", root)
    floor = float(bench["floor_ms"].median()) if "floor_ms" in bench and len(bench) else float("nan")
    step = _recorded_json(folder / "h200_step_cap1088.json", "h200_step_cap1088.json")
    steps = {"native": float("nan"),
             "onnxruntime": min(step["graph_step_device_ms"]) if step else float("nan")}
    return _frame(rows, "h200_native_kernels.json + h200_kernels_warm.json (+ h200_step_cap1088.json, "
                  "h200_native_bench_gemma3-1b.csv)", floor, steps,
                  "native: each kernel class alone x its count per step (no advance); onnxruntime: ncu, KV capacity "
                  "1088; not one run")


def _native_alone(folder) -> list[dict]:
    """A native step composed from each kernel class's time alone (h200_native_kernels.json) x its count."""
    from ..fixture.config import preset
    from ..native.kernels import split_k

    data = _recorded_json(folder / "h200_native_kernels.json", "h200_native_kernels.json")
    if data is None:
        return []
    cfg = preset("gemma3-1b", attention="gqa", dtype="fp16", layout="fused-cuda")
    L, types = cfg.num_layers, list(cfg.layer_types)
    counts = {"qkv": L, "o": L, "gate_up": L, f"down/{split_k(cfg.intermediate_size)}": L, "head": 1,
              "attention global": types.count("global"), "attention local": types.count("local")}
    k = data["kernels"]
    return [{"decoder": "native", "group": step_group("native", "attn" if name.startswith("attention") else
                                                      name.split("/")[0]),
             "kernels": n, "us": n * k[name]["us"], "dram_bytes": np.nan} for name, n in counts.items() if n]


def _ort_warm(folder) -> list[dict]:
    """onnxruntime's eager step from h200_kernels_warm.json: its itemised kernels by name, the remainder other."""
    data = _recorded_json(folder / "h200_kernels_warm.json", "h200_kernels_warm.json")
    if data is None:
        return []
    prof = next(v for k, v in data.items() if k != "provenance")
    rows = [{"decoder": "onnxruntime", "group": step_group("onnxruntime", name), "kernels": v["kernels"],
             "us": v["us"], "dram_bytes": np.nan} for name, v in prof["top"].items()]
    rest_n = prof["kernels"] - sum(r["kernels"] for r in rows)
    rest_us = prof["kernel_us"] - sum(r["us"] for r in rows)
    if rest_n:
        rows.append({"decoder": "onnxruntime", "group": "other", "kernels": rest_n, "us": rest_us,
                     "dram_bytes": np.nan})
    return rows


def ncu_classes(root=None) -> pd.DataFrame:
    """The native step's Nsight Compute table by kernel class (launch order): kernels, µs (all, and per kernel),
    DRAM MB read + written, the MB the launches account for (Launch.nbytes: weights, the KV rows their grid
    covers, vectors; more than the DRAM bytes where the L2 already holds them), achieved DRAM TB/s, share of the
    step's kernel time and of the run's copy bandwidth. attrs: copy_tb_per_s, kernel_sum_ms, body_ms (without
    advance), replay_ms (the captured step without advance, full head), greedy_replay_ms (the captured greedy step,
    the one profiled where the file has it: the bounded head's), floor_ms. Empty (attrs NaN) without the file."""
    data = _recorded_json(results_dir(root) / NCU_FILE, NCU_FILE)
    cols = ["class", "kernels", "us", "us_each", "dram_MB", "planned_MB", "TB/s", "share", "of_copy_bw"]
    if data is None:
        t = pd.DataFrame(columns=cols)
        t.attrs.update({k: float("nan") for k in ("copy_tb_per_s", "kernel_sum_ms", "body_ms", "replay_ms",
                                                  "greedy_replay_ms", "floor_ms")})
        return t
    bw, nat = float(data["copy_bandwidth_tb_s"]), data["native"]
    rows = pd.DataFrame([r for r in data["rows"] if r["side"] == "native"])
    g = rows.groupby("class", sort=False).agg(kernels=("us", "size"), us=("us", "sum"), dram=("dram_bytes", "sum"),
                                              planned=("planned_bytes", "sum")).reset_index()
    t = pd.DataFrame({"class": g["class"], "kernels": g["kernels"], "us": g["us"], "us_each": g["us"] / g["kernels"],
                      "dram_MB": g["dram"] / 1e6, "planned_MB": g["planned"] / 1e6,
                      "TB/s": g["dram"] / g["us"] * 1e-6, "share": g["us"] / g["us"].sum()})
    t["of_copy_bw"] = t["TB/s"] / bw
    t.attrs.update(copy_tb_per_s=bw, kernel_sum_ms=nat["kernel_us"] * 1e-3, body_ms=nat["body_us"] * 1e-3,
                   replay_ms=min(data["native_replay_ms"]),
                   greedy_replay_ms=float(data.get("native_greedy_replay_ms") or float("nan")),
                   floor_ms=float(data["floor_ms"]))
    return t[cols]


PROBE_FILE, PROBE_BRANCH_FILE = "h200_stream_probe.json", "h200_stream_probe_gemv_st_9e1636e.json"
READERS = {"plain read": "rd", "copy engine": "bulk", "register gemv": "gemv", "gemv_st (branch)": "gemv_st"}


def read_rates(root=None) -> pd.DataFrame:
    """Per projection (qkv, o, down, gate_up) and reader (READERS): the fastest recorded configuration of that
    reader (a key of the probe file), its µs per launch and TB/s. The plain read, copy engine and register gemv
    come from PROBE_FILE; gemv_st from PROBE_BRANCH_FILE (run at the branch's commit), where present. attrs:
    source. Empty without PROBE_FILE."""
    folder = results_dir(root)
    main = _recorded_json(folder / PROBE_FILE, PROBE_FILE)
    cols = ["projection", "MB", "reader", "config", "us", "TB/s"]
    if main is None:
        t = pd.DataFrame(columns=cols)
        t.attrs["source"] = ""
        return t
    branch = _recorded_json(folder / PROBE_BRANCH_FILE, PROBE_BRANCH_FILE)
    rows = []
    for proj, r in main["sizes"].items():
        runs = {k: v for k, v in r.items() if k != "bytes"}
        if branch is not None:
            runs.update({k: v for k, v in branch["sizes"].get(proj, {}).items() if k.startswith("gemv_st")})
        for reader, prefix in READERS.items():
            mine = {k: v for k, v in runs.items() if re.match(r"[a-z_]+", k).group(0) == prefix}  # rd4 x8 -> rd
            if not mine:
                continue
            key = min(mine, key=lambda k: mine[k]["us"])
            rows.append({"projection": proj, "MB": r["bytes"] / 1e6, "reader": reader, "config": key,
                         "us": mine[key]["us"], "TB/s": mine[key]["tb_s"]})
    t = pd.DataFrame(rows, columns=cols)
    t.attrs["source"] = PROBE_FILE + (f" + {PROBE_BRANCH_FILE}" if branch is not None else "")
    return t


TIMELINE_FILE = "h200_native_timeline_base_c32b5fe.json"  # main at c32b5fe: the default shapes, capacity 1072
TIMELINE_COLUMNS = ["launch", "layer", "class", "blocks", "start_us", "wait_us", "end_us"]


def step_timeline(root=None, name: str = TIMELINE_FILE) -> pd.DataFrame:
    """One replayed native step launch by launch (every block stamps the GPU clock at its start, after
    pdl_wait and at its end; medians of 7 replays): start_us (first block resident), wait_us (first block
    past pdl_wait: its predecessor is done), end_us (last block done), from the step's first stamp. layer:
    the launch's layer (-1: the LM head); class: qkv, attn, o, gate_up, down, head. attrs: source, step_us,
    replay_ms (decoder's graph and the stamped one), shapes, and classes (per class, layers 1 .. L-2: lead =
    start minus the predecessor's end, release = wait minus the predecessor's end, body = end minus wait,
    span = end minus the predecessor's end, µs), attention_phases (a DataFrame: per phase of attention_cl, µs from
    its wait release, median over blocks and layers, local / global columns; empty where the run did not stamp
    them). Empty without the file."""
    data = _recorded_json(results_dir(root) / name, name)
    if data is None:
        t = pd.DataFrame(columns=TIMELINE_COLUMNS)
        t.attrs.update(source="", step_us=float("nan"), replay_ms={}, shapes="", classes={},
                       attention_phases=pd.DataFrame())
        return t
    rows = []
    for r in data["launches"]:
        layer, _, cls = r["launch"].partition(".")
        rows.append({"launch": r["launch"], "layer": int(layer[1:]) if cls else -1, "class": cls or layer,
                     "blocks": r["blocks"], "start_us": r["start_first"] / 1e3, "wait_us": r["wait_first"] / 1e3,
                     "end_us": r["end_last"] / 1e3})
    t = pd.DataFrame(rows, columns=TIMELINE_COLUMNS)
    t.attrs.update(source=name, step_us=float(data["step_us"]), replay_ms=data["replay_ms_median"],
                   shapes=data["shapes"], classes=data["classes_us"],
                   attention_phases=pd.DataFrame(data.get("attention_phases_by_kind_us", {})))
    return t


BUDGET_CLASSES = ("qkv", "attn", "o", "gate_up", "down")  # a layer's launches, in order
STEP_TIME_COLUMNS = ["class", "launches", "gap_us", "body_us", "total_us", "share"]


def step_time(root=None) -> pd.DataFrame:
    """The stamped step's time split by kernel class, summed over its launches (step_timeline): gap_us, from the
    predecessor's last block's end to the launch's first wait release (launch, residency and dependency latency),
    and body_us, from that release to its last block's end; total_us and share of their sum, which spans the step
    from the first launch's release to the head's end, since each launch's gap starts where the previous one ends.
    The timeline's step runs the full LM head, not the bounded one. attrs: source, step_us. Empty without the
    file."""
    t = step_timeline(root)
    if t.empty:
        out = pd.DataFrame(columns=STEP_TIME_COLUMNS)
        out.attrs.update(source="", step_us=float("nan"))
        return out
    gap = t["wait_us"] - t["end_us"].shift(1)
    part = pd.DataFrame({"class": t["class"], "gap_us": gap.fillna(0.0), "body_us": t["end_us"] - t["wait_us"]})
    order = list(dict.fromkeys(t["class"]))
    out = part.groupby("class", sort=False).agg(launches=("gap_us", "size"), gap_us=("gap_us", "sum"),
                                                body_us=("body_us", "sum")).loc[order].reset_index()
    out["total_us"] = out["gap_us"] + out["body_us"]
    out["share"] = out["total_us"] / out["total_us"].sum()
    out = out[STEP_TIME_COLUMNS]
    out.attrs.update(source=t.attrs["source"], step_us=t.attrs["step_us"])
    return out


def layer_budget(root=None) -> pd.DataFrame:
    """Per kernel class of a layer (BUDGET_CLASSES): span_us (step_timeline's median span of a layer), MB and
    plain_read_us (read_rates: the fastest plain streaming read of that projection by one kernel; attention: NaN,
    it streams no weights). attrs: source, layers (the timeline's), head_us (the LM head's span), step_ms (the
    stamped step), and at_plain_read_ms = layers x (sum of the GEMVs' plain reads + attention's span) + head_us:
    the step if every layer GEMV streamed at one kernel's plain-read rate and attention and the head took what
    they take now. The timeline's step runs the full LM head; bounded_saving_ms is what the bounded head saves in
    the replayed step at context 1024 (bounded_head: replay full minus replay bounded, NaN without its file) and
    at_plain_read_bounded_ms the same budget with it, the greedy step the 0.70 ms target is about. Empty without
    the timeline and the read rates."""
    t, r = step_timeline(root), read_rates(root)
    cols = ["class", "span_us", "MB", "plain_read_us"]
    if t.empty or r.empty:
        out = pd.DataFrame(columns=cols)
        out.attrs.update(source="", layers=0, head_us=float("nan"), step_ms=float("nan"),
                         at_plain_read_ms=float("nan"), bounded_saving_ms=float("nan"),
                         at_plain_read_bounded_ms=float("nan"))
        return out
    plain = r[r["reader"] == "plain read"].set_index("projection")
    classes = t.attrs["classes"]
    rows = [{"class": c, "span_us": float(classes[c]["span"]),
             "MB": float(plain.loc[c, "MB"]) if c in plain.index else float("nan"),
             "plain_read_us": float(plain.loc[c, "us"]) if c in plain.index else float("nan")}
            for c in BUDGET_CLASSES]
    out = pd.DataFrame(rows, columns=cols)
    layers = int(t["layer"].max()) + 1
    head_us = float(classes["head"]["span"])
    per_layer = out["plain_read_us"].sum() + float(classes["attn"]["span"])  # NaN-skipping sum: the GEMVs
    at_plain = float(layers * per_layer + head_us) / 1e3
    bh = bounded_head(root)
    at1024 = bh[bh["context"] == 1024]
    saving = float(at1024["replay full"].iloc[0] - at1024["replay bounded"].iloc[0]) if len(at1024) else float("nan")
    sources = [t.attrs["source"], r.attrs["source"]] + ([bh.attrs["source"]] if len(at1024) else [])
    out.attrs.update(source=" + ".join(sources), layers=layers, head_us=head_us, step_ms=t.attrs["step_us"] / 1e3,
                     at_plain_read_ms=at_plain, bounded_saving_ms=saving, at_plain_read_bounded_ms=at_plain - saving)
    return out


STALLS_FILE = "h200_native_stalls_749ff3a.json"  # main at 749ff3a (code of 8f7bae3): the decoder's default shapes
STALL_COLUMNS = ("long_scoreboard", "short_scoreboard", "wait", "barrier", "membar", "selected")  # the rest: "other"


def warp_stalls(root=None, name: str = STALLS_FILE) -> pd.DataFrame:
    """Per kernel class (rows, the step's order): us and TB/s over its launches in one serialized step, the shares
    of issue slots used (issue %) and of the SM's warp slots held (warps %), and the share of resident warp cycles
    spent in each of STALL_COLUMNS (long scoreboard: global memory; short scoreboard: shared memory and shuffles;
    wait: fixed-latency dependencies; selected: issuing) and in every other reason together. attrs: source.
    Empty without the file."""
    data = _recorded_json(results_dir(root) / name, name)
    cols = ["class", "us", "TB/s", "issue %", "warps %", *STALL_COLUMNS, "other"]
    if data is None:
        t = pd.DataFrame(columns=cols)
        t.attrs["source"] = ""
        return t
    rows = []
    for cls, v in data["classes"].items():
        share = v["stall_share"]
        rows.append({"class": cls, "us": v["us"], "TB/s": v["dram_tb_s"], "issue %": v["issue_active_pct"],
                     "warps %": v["warps_active_pct"], **{r: share.get(r, 0.0) for r in STALL_COLUMNS},
                     "other": sum(x for r, x in share.items() if r not in STALL_COLUMNS)})
    t = pd.DataFrame(rows, columns=cols)
    t.attrs["source"] = name
    return t


def bounded_head(root=None) -> pd.DataFrame:
    """One row per recorded context of BOUNDED_FILE: ms a token through the pipeline (native with the bounded and
    with the full head, device, genai graph), the replayed greedy steps, the head kernels alone (µs) and the token
    check; attrs: source, floor_ms by context. Empty without the file."""
    data = _recorded_json(None if root is None else Path(root) / BOUNDED_FILE, BOUNDED_FILE)
    cols = ["context", "native bounded", "native full", "device", "genai graph", "replay bounded", "replay full",
            "head_us", "head_bound_us", "head_pick_us", "tokens_equal", "candidates"]
    rows, floors = [], {}
    for key, r in (data or {}).items():
        if not key.startswith("ctx") or not isinstance(r, dict):
            continue
        ms, ker = r["pipeline_ms_per_token"], {k["kernel"]: k["ms"] * 1e3 for k in r["head_kernels"]}
        rows.append({"context": r["context"], **{m: ms.get(m, np.nan) for m in cols[1:5]},
                     "replay bounded": r["greedy_replay_ms"]["bounded"], "replay full": r["greedy_replay_ms"]["full"],
                     "head_us": ker.get("head"), "head_bound_us": ker.get("head_bound"),
                     "head_pick_us": ker.get("head_pick"), "tokens_equal": r["tokens"]["equal"],
                     "candidates": r["tokens"]["candidates_last_step"]})
        floors[r["context"]] = r["floor_ms"]
    t = pd.DataFrame(rows, columns=cols)
    t.attrs.update(source=BOUNDED_FILE if data else "", floor_ms=floors)
    return t

