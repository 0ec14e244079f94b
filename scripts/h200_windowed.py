"""H200: windowed KV (GroupQueryAttention sliding_window_cache=1) under CUDA graphs (issue #11 part 2).

The builder's fp16 CUDA export (tests/data/exported/builder-text-fp16-cuda: 5 sliding layers with
sliding_window_cache=1, window 12, + 1 global layer) decodes correctly in eager mode but diverged from
the first decode step in graph/device mode on onnxruntime-gpu 1.31 (data/results/h200_gpu_test_log_round2.txt).
This script pins down where and tries fixes. Every variant runs in its own process (onnxruntime's kernel
switches are process-wide environment variables; a crash or a poisoned CUDA context stays in that process)
and reports JSON; one variant failing never stops the others.

  raw:*      a minimal fixed-binding loop (IOBinding at fixed addresses, static mask [1, M], past = present):
             the protocol of vlmdecode's CUDA decoders and onnxruntime-genai's, with knobs: CUDA-graph session
             or not, the gpu_graph_id of the decode runs (-1 = never captured), the step at which capture may
             start, kernel switches (env / provider options), short prompt (window not yet full) or full.
             Dumps layer 0's K buffer (and the global layer's) at a few steps so the windowed layout can be
             compared row by row with the full-KV export's buffer (which row holds which position).
  vlm:*      vlmdecode's own CUDA decoders (eager / graph / device) on the windowed and full-KV folders, with the
             windowed refusal of decoders.cuda.check_mode bypassed (that refusal is what is being tested).
  genai:*    onnxruntime-genai-cuda 0.18, eager and graph, on the same folders.

The full-KV export of the same weights is made here from the windowed one (sliding_window_cache removed,
full-length KV inputs; what `--extra_options windowed_kv_cache=false` writes, checked on the fp32 CPU pair
in tests/data/exported: builder-text-fp32 vs builder-text-fp32-fullkv).

Usage:  python3 scripts/h200_windowed.py [--set cause|fix] [--device cuda|cpu] [--steps 64] [--only SUBSTR,...]
        writes $OUT/h200_windowed.json (--set cause, the default: why graph/device diverged) or
        $OUT/h200_windowed_fix.json (--set fix: decoders.cuda's harmless capture, raw and in the decoders).
        --device cpu runs the raw variants on the fp32 CPU folder (a local check of the script and of the CPU
        kernel's layout at C == W; no graphs there: gpu_graph_id is ignored).
        python3 scripts/h200_windowed.py --child SPEC_JSON   (one variant; used by the parent)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPORTED = ROOT / "tests" / "data" / "exported"
FOLDER = {"cuda": "builder-text-fp16-cuda", "cpu": "builder-text-fp32"}
MAX_LENGTH = 256  # M: static mask length = global layer's KV capacity (prompt 45 + steps <= 256)
SHORT_PROMPT = 5  # < window (12): decode starts before the window is full
DUMP_STEPS = (0, 1, 2, 3, 8, 13, 30)  # KV snapshots after these steps (0 = after prefill)
CHILD_TIMEOUT_S = 150


# ---- folders -------------------------------------------------------------------------------------------
def fullkv_copy(src: Path, dst: Path) -> Path:
    """The same weights with full-length KV on every layer (tests/windowed_util.full_kv_copy: what the builder
    writes with windowed_kv_cache=false, checked against it on the fp32 pair by tests/test_windowed_layout.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from windowed_util import full_kv_copy

    return full_kv_copy(src, dst)


def prompt_ids(folder: Path) -> list[int]:
    return json.loads((folder / "expected.json").read_text())["prompt"]["input_ids"]


# ---- child: the raw fixed-binding loop -------------------------------------------------------------------
def _layers(model: Path, n_layers: int) -> list[tuple[int | None, bool]]:
    """(local_window_size or None, sliding_window_cache) per layer, from the GQA nodes."""
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    out = {}
    for n in m.graph.node:
        if n.op_type != "GroupQueryAttention":
            continue
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        i = int(re.search(r"\.(\d+)\.key$", n.input[3]).group(1))
        w = int(a.get("local_window_size", -1))
        out[i] = (w if w > 0 else None, bool(a.get("sliding_window_cache", 0)))
    return [out[i] for i in range(n_layers)]


def raw_run(spec: dict) -> dict:
    import numpy as np
    import onnxruntime as ort

    dev = spec["device"]
    if dev == "cuda":
        ort.preload_dlls()
        import cupy as xp
    else:
        xp = np
    folder = Path(spec["folder"])
    cfg = json.loads((folder / "genai_config.json").read_text())["model"]
    d = cfg["decoder"]
    n_layers, kvh, hd, vocab = d["num_hidden_layers"], d["num_key_value_heads"], d["head_size"], cfg["vocab_size"]
    layers = _layers(folder / "model.onnx", n_layers)
    caps = [w if (w and windowed) else MAX_LENGTH for w, windowed in layers]
    dtype = np.float16 if dev == "cuda" else np.float32
    ids = prompt_ids(folder)[: spec["prompt_len"]] if spec.get("prompt_len") else prompt_ids(folder)
    S, steps = len(ids), spec["steps"]

    so = ort.SessionOptions()
    so.log_severity_level = 0 if spec.get("log") else 3
    if dev == "cuda":
        opts = {"device_id": "0", "enable_cuda_graph": "1" if spec["graph_session"] else "0",
                **spec.get("provider", {})}
        providers = [("CUDAExecutionProvider", opts)]
    else:
        providers = ["CPUExecutionProvider"]
    sess = ort.InferenceSession(str(folder / "model.onnx"), so, providers=providers)

    def ptr(a):
        return int(a.data.ptr) if dev == "cuda" else int(a.ctypes.data)

    def bind_in(io, name, a, shape=None):
        io.bind_input(name, dev, 0, np.dtype(a.dtype), list(shape or a.shape), ptr(a))

    def bind_out(io, name, a, shape=None):
        io.bind_output(name, dev, 0, np.dtype(a.dtype), list(shape or a.shape), ptr(a))

    keys = [xp.zeros((1, kvh, c, hd), dtype) for c in caps]
    vals = [xp.zeros((1, kvh, c, hd), dtype) for c in caps]
    mask = xp.zeros((1, MAX_LENGTH), np.int64)
    ids_pf = xp.asarray(np.array([ids], np.int64))
    ids_st = xp.zeros((1, 1), np.int64)
    logits_pf = xp.zeros((1, S, vocab), dtype)
    logits_st = xp.zeros((1, 1, vocab), dtype)

    def bind_kv(io):
        for i in range(n_layers):
            for kind, arr in (("key", keys[i]), ("value", vals[i])):
                bind_in(io, f"past_key_values.{i}.{kind}", arr)
                bind_out(io, f"present.{i}.{kind}", arr)

    io_pf, io_st = sess.io_binding(), sess.io_binding()
    bind_in(io_pf, "input_ids", ids_pf)
    bind_in(io_pf, "attention_mask", mask, (1, S))
    bind_out(io_pf, "logits", logits_pf)
    bind_kv(io_pf)
    bind_in(io_st, "input_ids", ids_st)
    bind_in(io_st, "attention_mask", mask)  # static [1, M]: total_sequence_length = M on every step
    bind_out(io_st, "logits", logits_st)
    bind_kv(io_st)

    def ro(graph_id):
        r = ort.RunOptions()
        r.add_run_config_entry("gpu_graph_id", str(graph_id))
        return r

    sync = xp.cuda.Device().synchronize if dev == "cuda" else (lambda: None)
    host = (lambda a: a.get()) if dev == "cuda" else (lambda a: a.copy())
    dumps, logit_rows = {}, {}

    def dump(step):
        if spec.get("dump") and step in DUMP_STEPS:
            sync()
            dumps[f"k0_s{step}"] = host(keys[0]).astype(np.float32)
            dumps[f"kg_s{step}"] = host(keys[n_layers - 1]).astype(np.float32)

    if spec.get("capture_first"):  # the fix: capture the graph id at position 0 (no layer evicts), then forget it
        mask[0, 0] = 1
        sync()
        os.write(2, b"@@RUN capture\n")
        sess.run_with_iobinding(io_st, ro(spec["graph_id"]))
        mask[...] = 0
    mask[0, :S] = 1
    sync()
    os.write(2, b"@@RUN prefill\n")
    sess.run_with_iobinding(io_pf, ro(-1))
    last = host(logits_pf[0, S - 1]).astype(np.float32)
    tokens = [int(np.argmax(last))]
    logit_rows["s0"] = last
    dump(0)
    graph_from = spec.get("graph_from_step", 1)
    ro_eager, ro_graph = ro(-1), ro(spec.get("graph_id", -1))
    t = S
    for step in range(1, steps):
        ids_st[0, 0] = tokens[-1]
        mask[0, t] = 1
        sync()
        os.write(2, f"@@RUN {step}\n".encode())
        sess.run_with_iobinding(io_st, ro_graph if step >= graph_from else ro_eager)
        row = host(logits_st[0, 0]).astype(np.float32)
        tokens.append(int(np.argmax(row)))
        if step <= 3:
            logit_rows[f"s{step}"] = row
        t += 1
        dump(step)
    out = {"tokens": tokens, "prompt_len": S, "capacities": caps, "onnxruntime": ort.__version__}
    if spec.get("dump"):
        np.savez(spec["dump"], **dumps, **{f"logits_{k}": v for k, v in logit_rows.items()})
    return out


# ---- child: vlmdecode's decoders and onnxruntime-genai -------------------------------------------------
def vlm_run(spec: dict) -> dict:
    import numpy as np

    import vlmdecode
    import vlmdecode.decoders.cuda as dc

    real = dc.check_mode

    def check_mode(mode, folder):  # the windowed refusal is what is tested: let windowed folders through
        if folder.info.windowed:
            return mode
        return real(mode, folder)

    dc.check_mode = check_mode
    p = vlmdecode.load(spec["folder"], "cuda", spec["mode"], max_length=MAX_LENGTH, **spec.get("options", {}))
    ids = np.array([prompt_ids(Path(spec["folder"]))[: spec.get("prompt_len") or None]], np.int64)
    runs = [p.generate_from_ids(ids, max_new_tokens=spec["steps"], do_sample=False, stop=()).tokens
            for _ in range(2)]  # a second generation replays the first one's graph (graph ids: decoders.cuda)
    return {"tokens": runs[0], "second_generation": runs[1], "prompt_len": int(ids.shape[1]),
            "capacities": p.decoder.kv.capacities,
            "counters": p.decoder.counters()}


def genai_run(spec: dict) -> dict:
    from vlmdecode.peer import genai_greedy, genai_version

    r = genai_greedy(spec["folder"], prompt_ids(Path(spec["folder"])), spec["steps"], device="cuda",
                     cuda_graph=spec["graph"])
    return {"tokens": r.tokens, "finished_early": r.finished_early, "genai": genai_version()}


def child(spec: dict) -> dict:
    return {"raw": raw_run, "vlm": vlm_run, "genai": genai_run}[spec["kind"]](spec)


# ---- parent -----------------------------------------------------------------------------------------------
def fix_variants(device: str, windowed: Path, full: Path, steps: int, dumps: Path) -> dict[str, dict]:
    """--set fix: decoders.cuda's capture on a harmless step (position 0), raw and in vlmdecode's decoders."""
    raw = {"kind": "raw", "device": device, "steps": steps, "graph_session": False}
    g = {**raw, "graph_session": True, "folder": str(windowed), "graph_id": 1}
    v = {"raw:full-kv:eager": {**raw, "folder": str(full), "dump": str(dumps / "full_eager.npz")},
         "raw:full-kv:eager:short": {**raw, "folder": str(full), "prompt_len": SHORT_PROMPT},
         "raw:windowed:graph": g,
         "raw:windowed:graph:capture-at-0": {**g, "capture_first": True, "log": True,
                                             "dump": str(dumps / "win_graph.npz")},
         "raw:windowed:graph:capture-at-0:short": {**g, "capture_first": True, "prompt_len": SHORT_PROMPT}}
    if device != "cuda":
        return v
    for mode in ("eager", "graph", "device"):
        v[f"vlm:windowed:{mode}"] = {"kind": "vlm", "folder": str(windowed), "mode": mode, "steps": steps}
    for mode in ("graph", "device"):
        v[f"vlm:windowed:{mode}:short"] = {"kind": "vlm", "folder": str(windowed), "mode": mode, "steps": steps,
                                           "prompt_len": SHORT_PROMPT}
        v[f"vlm:windowed:{mode}:graph-per-generation"] = {"kind": "vlm", "folder": str(windowed), "mode": mode,
                                                          "steps": steps,
                                                          "options": {"graph_per_generation": True}}
    return v


def variants(device: str, windowed: Path, full: Path, steps: int, dumps: Path) -> dict[str, dict]:
    """--set cause: name -> spec. The raw eager runs are the references; every other variant is compared with them."""
    raw = {"kind": "raw", "device": device, "steps": steps, "graph_session": False}
    v = {
        "raw:full-kv:eager": {**raw, "folder": str(full), "dump": str(dumps / "full_eager.npz")},
        "raw:windowed:eager": {**raw, "folder": str(windowed), "dump": str(dumps / "win_eager.npz")},
        "raw:full-kv:eager:short": {**raw, "folder": str(full), "prompt_len": SHORT_PROMPT,
                                    "dump": str(dumps / "full_eager_short.npz")},
        "raw:windowed:eager:short": {**raw, "folder": str(windowed), "prompt_len": SHORT_PROMPT,
                                     "dump": str(dumps / "win_eager_short.npz")},
    }
    if device != "cuda":
        return v
    g = {**raw, "graph_session": True}
    v.update({
        # the session option alone (nothing ever captured: every run gpu_graph_id -1)
        "raw:windowed:graph-session-uncaptured": {**g, "folder": str(windowed), "graph_id": -1,
                                                  "dump": str(dumps / "win_gsess.npz")},
        # the protocol of vlmdecode's graph mode; ORT logs (severity 0) say at which run it captures
        "raw:windowed:graph": {**g, "folder": str(windowed), "graph_id": 1, "log": True,
                               "dump": str(dumps / "win_graph.npz")},
        "raw:full-kv:graph": {**g, "folder": str(full), "graph_id": 1},
        # capture first allowed at a later step (decode runs before it use gpu_graph_id -1)
        "raw:windowed:graph-from-step-8": {**g, "folder": str(windowed), "graph_id": 1, "graph_from_step": 8},
        "raw:windowed:graph:short": {**g, "folder": str(windowed), "graph_id": 1, "prompt_len": SHORT_PROMPT,
                                     "dump": str(dumps / "win_graph_short.npz")},
        "raw:windowed:graph-from-step-12:short": {**g, "folder": str(windowed), "graph_id": 1,
                                                  "prompt_len": SHORT_PROMPT, "graph_from_step": 12},
    })
    for mode in ("eager", "graph", "device"):
        v[f"vlm:windowed:{mode}"] = {"kind": "vlm", "folder": str(windowed), "mode": mode, "steps": steps}
    v["vlm:full-kv:graph"] = {"kind": "vlm", "folder": str(full), "mode": "graph", "steps": steps}
    v["genai:windowed:eager"] = {"kind": "genai", "folder": str(windowed), "graph": False, "steps": steps}
    v["genai:windowed:graph"] = {"kind": "genai", "folder": str(windowed), "graph": True, "steps": steps}
    v.update({
        # onnxruntime's attention-kernel switches (read when the session's kernels are built)
        "raw:windowed:graph:xqa-on": {**g, "folder": str(windowed), "graph_id": 1, "env": {"ORT_ENABLE_XQA": "1"}},
        "raw:windowed:graph:xqa-off": {**g, "folder": str(windowed), "graph_id": 1, "env": {"ORT_ENABLE_XQA": "0"}},
        "raw:windowed:graph:no-flash": {**g, "folder": str(windowed), "graph_id": 1,
                                        "env": {"ORT_DISABLE_FLASH_ATTENTION": "1"}},
        "raw:windowed:graph:no-flash-decode": {**g, "folder": str(windowed), "graph_id": 1,
                                               "env": {"ORT_DISABLE_FLASH_DECODE": "1"}},
        "raw:windowed:graph:no-mea": {**g, "folder": str(windowed), "graph_id": 1,
                                      "env": {"ORT_DISABLE_MEMORY_EFFICIENT_ATTENTION": "1"}},
        "raw:windowed:graph:no-flash-no-mea": {**g, "folder": str(windowed), "graph_id": 1,
                                               "env": {"ORT_DISABLE_FLASH_ATTENTION": "1",
                                                       "ORT_DISABLE_MEMORY_EFFICIENT_ATTENTION": "1"}},
        "raw:windowed:eager:no-flash-no-mea": {**raw, "folder": str(windowed),
                                               "env": {"ORT_DISABLE_FLASH_ATTENTION": "1",
                                                       "ORT_DISABLE_MEMORY_EFFICIENT_ATTENTION": "1"}},
        "raw:windowed:graph:sdpa-flash": {**g, "folder": str(windowed), "graph_id": 1,
                                          "provider": {"sdpa_kernel": "1"}},
        "raw:windowed:graph:sdpa-efficient": {**g, "folder": str(windowed), "graph_id": 1,
                                              "provider": {"sdpa_kernel": "2"}},
        "raw:windowed:graph:sdpa-math": {**g, "folder": str(windowed), "graph_id": 1,
                                         "provider": {"sdpa_kernel": "16"}},
    })
    return v


def run_child(spec: dict) -> tuple[dict, str]:
    env = {**os.environ, **spec.get("env", {})}
    t0 = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env, capture_output=True,
                           text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        return {"error": f"timeout after {CHILD_TIMEOUT_S} s"}, (e.stderr or b"").decode(errors="replace")[-2000:]
    wall = round(time.perf_counter() - t0, 1)
    lines = [x for x in r.stdout.splitlines() if x.startswith("@@JSON ")]
    if r.returncode != 0 or not lines:
        return {"error": f"exit {r.returncode}: {r.stderr[-1500:]}", "wall_s": wall}, r.stderr
    return {**json.loads(lines[-1][7:]), "wall_s": wall}, r.stderr


def capture_runs(stderr: str) -> list[str]:
    """The runs (prefill, 1, 2, ...) during which onnxruntime logged a CUDA-graph capture or replay line."""
    hits, run = [], None
    for line in stderr.splitlines():
        if line.startswith("@@RUN "):
            run = line[6:]
        elif re.search(r"captur|replay", line, re.I) and "graph" in line.lower():
            hits.append(f"{run}: {line.strip()[-160:]}")
    return hits[:12]


def first_divergence(a: list[int] | None, b: list[int] | None) -> int | None:
    """First step where two token lists differ (None: equal over the shorter length)."""
    if not a or not b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def layout(win_npz: Path, full_npz: Path, prompt_len: int) -> dict:
    """Which absolute position each row of the windowed layer-0 K buffer holds, found by matching its rows with
    the full-KV buffer's rows (layer 0's K depends only on the token and its position, so the same tokens give
    the same rows), against the contract: rows [0, L) = positions [T - L, T), L = min(T, C)."""
    import numpy as np

    w, f = np.load(win_npz), np.load(full_npz)
    out = {}
    for step in DUMP_STEPS:
        key = f"k0_s{step}"
        if key not in w or key not in f:
            continue
        kw, kf = w[key][0, 0], f[key][0, 0]  # [C, hd], [M, hd] (kv head 0)
        T = prompt_len + step
        C = kw.shape[0]
        L = min(T, C)
        rows = []
        for r in range(C):
            diff = np.abs(kf[:T] - kw[r]).max(axis=1)
            p = int(np.argmin(diff))
            rows.append(p if diff[p] < 1e-2 and np.abs(kw[r]).max() > 0 else None)
        want = [T - L + r for r in range(L)] + [None] * (C - L)
        out[f"after_step_{step}"] = {"T": T, "C": C, "row_positions": rows, "contract": want,
                                     "matches_contract": rows[:L] == want[:L]}
    return out


def kv_diff(a_npz: Path, b_npz: Path) -> dict:
    """max |a - b| of the dumped K buffers and first logits rows, per dump (where does b leave a?)."""
    import numpy as np

    a, b = np.load(a_npz), np.load(b_npz)
    return {k: float(np.abs(a[k] - b[k]).max()) for k in a.files if k in b.files}


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--only", default="", help="comma-separated substrings of variant names")
    ap.add_argument("--budget", type=float, default=170.0, help="seconds; later variants are skipped past it")
    ap.add_argument("--set", default="cause", choices=("cause", "fix"),
                    help="cause: why graph/device diverged (the first H200 run); fix: the harmless-capture fix")
    args = ap.parse_args(argv)
    out_dir = Path(os.environ.get("OUT", "."))
    tmp = Path(tempfile.mkdtemp(prefix="h200_windowed_"))
    src = EXPORTED / FOLDER[args.device]
    windowed = shutil.copytree(src, tmp / "windowed")
    full = (EXPORTED / "builder-text-fp32-fullkv" if args.device == "cpu"
            else fullkv_copy(src, tmp / "full-kv"))
    dumps = tmp / "dumps"
    dumps.mkdir()
    specs = (variants if args.set == "cause" else fix_variants)(args.device, windowed, full, args.steps, dumps)
    if args.only:
        keep = args.only.split(",")
        specs = {k: v for k, v in specs.items() if any(s in k for s in keep) or k.startswith("raw:full-kv:eager")}
    expected = json.loads((src / "expected.json").read_text())
    results, t_start = {}, time.perf_counter()
    for name, spec in specs.items():
        if time.perf_counter() - t_start > args.budget:
            results[name] = {"error": f"skipped: past the {args.budget:.0f} s budget"}
            continue
        r, stderr = run_child(spec)
        if spec.get("log"):
            r["capture_log"] = capture_runs(stderr)
        results[name] = r
        print(f"{name}: {json.dumps(r)[:400]}", flush=True)

    ref = {"full": results.get("raw:full-kv:eager", {}).get("tokens"),
           "short": results.get("raw:full-kv:eager:short", {}).get("tokens"),
           "hf": expected["hf_float32_greedy"]["tokens"][: args.steps]}
    summary = {}
    for name, r in results.items():
        short = name.endswith(":short") or results[name].get("prompt_len") == SHORT_PROMPT
        full_ref = ref["short"] if short else ref["full"]
        summary[name] = {"error": r.get("error"),
                         "first_divergence_vs_full_kv_eager": first_divergence(r.get("tokens"), full_ref),
                         "equal_to_full_kv_eager": bool(r.get("tokens")) and r.get("tokens") == full_ref,
                         "first_divergence_vs_hf_float32": None if short else first_divergence(r.get("tokens"),
                                                                                               ref["hf"])}
        if "second_generation" in r:
            summary[name]["second_generation_equal"] = r["second_generation"] == r["tokens"]
    analysis = {}
    pairs = {"layout_full_prompt": ("win_eager.npz", "full_eager.npz", len(prompt_ids(src))),
             "layout_short_prompt": ("win_eager_short.npz", "full_eager_short.npz", SHORT_PROMPT),
             "layout_graph_full_prompt": ("win_graph.npz", "full_eager.npz", len(prompt_ids(src)))}
    for key, (a, b, n) in pairs.items():
        if (dumps / a).is_file() and (dumps / b).is_file():
            try:
                analysis[key] = layout(dumps / a, dumps / b, n)
            except Exception as e:  # noqa: BLE001 - report, keep going
                analysis[key] = {"error": repr(e)}
    for key, (a, b) in {"eager_vs_graph_session_uncaptured": ("win_eager.npz", "win_gsess.npz"),
                        "eager_vs_graph": ("win_eager.npz", "win_graph.npz"),
                        "eager_vs_graph_short": ("win_eager_short.npz", "win_graph_short.npz")}.items():
        if (dumps / a).is_file() and (dumps / b).is_file():
            analysis[key] = kv_diff(dumps / a, dumps / b)
    for name, s in summary.items():
        print(f"{name:48s} first divergence vs full-KV eager: {s['first_divergence_vs_full_kv_eager']}"
              f"{'  ERROR' if s['error'] else ''}", flush=True)
    print(json.dumps(analysis, indent=1)[:6000], flush=True)
    sys.path.insert(0, str(ROOT))
    from vlmdecode.profiling import provenance

    doc = {"provenance": provenance(), "script": "scripts/h200_windowed.py", "set": args.set, "device": args.device,
           "steps": args.steps,
           "git": os.environ.get("VLMDECODE_GIT_SHA"), "folder": FOLDER[args.device], "max_length": MAX_LENGTH,
           "summary": summary, "analysis": analysis, "results": results}
    name = "h200_windowed.json" if args.set == "cause" else "h200_windowed_fix.json"
    (out_dir / name).write_text(json.dumps(doc, indent=1) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.path.insert(0, str(ROOT))
        print("@@JSON " + json.dumps(child(json.loads(sys.argv[2]))), flush=True)
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
