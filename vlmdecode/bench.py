"""Benchmarks: per-token decode latency by mode, side by side in one process, against the floor.

    run_matrix(presets, devices, modes, contexts) -> DataFrame; writes CSV + JSON (with provenance)
    compare(base_csv, new_csv)                     -> % change per scenario, regressions flagged

Method: every model of a preset and layout loads and warms up before timing; then `repeats` rounds
each run every scenario once (odd rounds in reverse order), so the modes being compared are measured
interleaved, not one after another. Per-token time is the median over rounds of a steady-state
window's median (first `skip` tokens dropped: capture, warm-up), and
independently the two-length method ((T(n) - T(n/2)) / (n/2), which cancels prefill). The floor is
`costmodel.floor_ms`: (decoder weight bytes + KV bytes read at that context) / device-to-device copy
bandwidth measured in the same run. Per-token time is the loop's own time per token (decoder work,
sampling and the detokenizer: `StepRecord.seconds + detok_seconds`), never the caller's. Not a timed
test: targets are read off the results files.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import modes
from .costmodel import decoder_weight_bytes, floor_ms
from .profiling import fixture_hash, prompt_ids, provenance

CUDA_MODES = modes.on("cuda")  # every scenario the bench runs, pipeline modes and comparisons (vlmdecode.modes)
CPU_MODES = modes.on("cpu")
CONTEXTS = {"tiny": [128], "small": [64, 256, 1024, 2048], "gemma3-1b": [128, 1024, 4096]}


# ---- the floor -------------------------------------------------------------------------------
def copy_bandwidth(nbytes: int = 1 << 30, iters: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    import cupy

    a = cupy.random.random(nbytes // 8)
    b = cupy.empty_like(a)
    for _ in range(3):
        b[...] = a
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(iters):
        start.record()
        b[...] = a
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return 2 * a.nbytes / float(np.median(times))


# ---- timing one scenario: a warmed-up `once()` per scenario, repeats taken in rounds ------------
def _steady_ms(seconds: list, skip: int) -> float:
    window = seconds[skip:] if len(seconds) > skip + 2 else seconds[1:]
    return float(np.median(window) * 1e3)


def pipeline_once(pipe, context: int, new_tokens: int, skip: int):
    """Warm `pipe` up on this scenario, return once() -> one repeat: steady per-token ms, the two-length
    estimate (T(n) - T(n/2)) / (n/2), time to first token, and the last generation's bytes and counters."""
    ids = prompt_ids(context)
    pipe.generate_from_ids(ids, max_new_tokens=min(new_tokens, 8), stop=())  # warm-up: sessions, kernels

    def once() -> dict:
        totals, last = {}, None
        for n in (new_tokens // 2, new_tokens):
            t0 = time.perf_counter()
            last = pipe.generate_from_ids(ids, max_new_tokens=n, stop=(), _t0=t0)
            totals[n] = time.perf_counter() - t0
        tail = last.steps[-1]
        per_token = [s.seconds + s.detok_seconds for s in last.steps]
        return dict(steady=_steady_ms(per_token, skip), ttft=last.ttft_seconds * 1e3,
                    two_length=(totals[new_tokens] - totals[new_tokens // 2]) / (new_tokens - new_tokens // 2) * 1e3,
                    tail=dict(h2d_per_step=tail.h2d_bytes, d2h_per_step=tail.d2h_bytes, kv_per_step=tail.kv_bytes,
                              tokens=len(last.tokens), first_tokens=" ".join(map(str, last.tokens[:8])),
                              **{f"n_{k}": v for k, v in last.counters.items()}))
    return once


def genai_once(model, context: int, new_tokens: int, skip: int, max_length: int | None = None):
    """onnxruntime-genai's greedy loop on a loaded model (peer.load_genai_model); warmed up once."""
    from .peer import genai_greedy

    ids = prompt_ids(context)[0]
    genai_greedy(model, ids, min(new_tokens, 8), max_length=max_length)

    def once() -> dict:
        r = genai_greedy(model, ids, new_tokens, max_length=max_length)
        return dict(steady=_steady_ms(r.step_seconds, skip), ttft=r.ttft_seconds * 1e3,
                    tail=dict(tokens=len(r.tokens), first_tokens=" ".join(map(str, r.tokens[:8]))))
    return once


def summarize(samples: list[dict]) -> dict:
    """Repeats of one scenario -> medians (per_token_ms from the steady windows), spread = (max - min) /
    median of the steady medians, and the last repeat's bytes, counters and tokens."""
    steady = [s["steady"] for s in samples]
    row = dict(per_token_ms=float(np.median(steady)),
               spread=float((max(steady) - min(steady)) / np.median(steady)), repeats=len(samples))
    for key, col in (("two_length", "two_length_ms"), ("ttft", "ttft_ms")):
        if key in samples[0]:
            row[col] = float(np.median([s[key] for s in samples]))
    row.update(samples[-1]["tail"])
    return row


def nodes_per_step(folder, device: str, steps: int = 4, by: str | None = None):
    """onnxruntime profile of eager decode steps: kernel (node) events per run, or with by="op" / "role" a
    {group: {"per_step", "us_per_step"}} dict (profiling.node_times: role = layer-free node name)."""
    import tempfile

    from .decoders.cuda import CudaDecoder
    from .profiling import node_times
    from .sampling import Sampler, SamplingParams

    prefix = str(Path(tempfile.mkdtemp()) / "ortprof")
    dec = CudaDecoder(folder, device, "eager", profile_prefix=prefix)
    x = np.zeros((1, 4, folder.info.hidden_size), dec.dtype)
    for _ in dec.generate(x, steps + 1, Sampler(SamplingParams())):  # prefill, then `steps` decode steps
        pass
    t = node_times(dec.session.end_profiling(), by or "op")
    if by is None:
        return float(t["per_run"].sum()) if len(t) else float("nan")
    return {g: {"per_step": r.per_run, "us_per_step": r.us_per_run} for g, r in t.iterrows()}


# ---- the matrix ------------------------------------------------------------------------------
def results_dir(out_dir, tag: str, force: bool = False) -> Path:
    """The folder run_matrix writes TAG.csv and TAG.json into: `out_dir`, or (None) a new timestamped folder
    under the cache (`$VLMDECODE_CACHE/bench/YYYYmmdd-HHMMSS`). FileExistsError if either file exists there
    and not `force`; ValueError for a tag that is not a plain file stem."""
    import re

    if not isinstance(tag, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", tag):
        raise ValueError(f"tag {tag!r} must be a plain file name stem (letters, digits, '_', '-', '.')")
    if out_dir is None:
        from .fixture.cache import cache_dir

        stamp, n = time.strftime("%Y%m%d-%H%M%S"), 1
        out = cache_dir() / "bench" / stamp
        while out.exists():
            n += 1
            out = cache_dir() / "bench" / f"{stamp}-{n}"
        return out
    out = Path(out_dir)
    existing = [str(p) for p in (out / f"{tag}.csv", out / f"{tag}.json") if p.exists()]
    if existing and not force:
        raise FileExistsError(f"{' and '.join(existing)} already exist: pass --force (force=True) to overwrite "
                              "them, or choose another --out or --tag")
    return out


def run_matrix(presets=("tiny",), devices=("cpu",), modes=None, contexts=None, new_tokens=64, repeats=3, skip=8,
               peer=True, out_dir=None, root=None, tag="bench", log=print, progress=True,
               layouts=("unfused",), force=False):
    """Time every scenario; return the rows. out_dir: write OUT/TAG.csv and OUT/TAG.json after every round
    (None: no files; existing files are refused unless `force`, see `results_dir`)."""
    import pandas as pd

    import vlmdecode

    from .devices import parse_device
    from .sessions import check_cuda

    if out_dir is not None:
        out_dir = results_dir(out_dir, tag, force)
    for device in devices:  # before any work: a CUDA device that cannot be used is a CudaUnavailableError
        if parse_device(device).is_cuda:
            check_cuda(parse_device(device))
    plan = _Plan(modes, contexts, peer, root, new_tokens, repeats, skip, out_dir, tag, log, progress)
    rows, prov = [], provenance()
    prov["method"] = ("models loaded and warmed up first; then `repeats` rounds, each running every scenario of a "
                      "preset/layout once, odd rounds in reverse order; medians over rounds")
    bw = None
    for device in devices:
        dev = parse_device(device)
        if dev.is_cuda:
            bw = copy_bandwidth()
            prov["copy_bandwidth_GBps"] = bw / 1e9
        for name in presets:
            for layout in layouts:
                _run_preset(vlmdecode, plan, dev, name, layout, bw, rows, prov)
    _write(out_dir, tag, rows, prov)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class _Plan:
    """run_matrix's settings, shared by every preset, layout and device."""

    modes: object
    contexts: object
    peer: bool
    root: object
    new_tokens: int
    repeats: int
    skip: int
    out_dir: object
    tag: str
    log: object
    progress: bool


def _run_preset(vlmdecode, plan: _Plan, dev, name, layout, bw, rows, prov):
    """Every (mode, context) scenario of one preset and layout on one device, side by side: all models
    load and warm up first, then each round runs every scenario once (alternate rounds in reverse order,
    so a drift of the machine during the run falls evenly on all of them); rows are rewritten after
    every round, so a cut-off run keeps what it measured."""
    from tqdm.auto import tqdm

    from .fixture.cache import ensure_fixture
    from .modelfolder import ModelFolder

    dtype = "fp16" if dev.is_cuda else "fp32"
    if layout == "fused-cuda" and not dev.is_cuda:
        return  # onnxruntime's CPU GroupQueryAttention has no q/k-norm inputs
    folder_dir = ensure_fixture(name, "gqa", dtype, plan.root, layout=layout)
    want = list(plan.modes or (CUDA_MODES if dev.is_cuda else CPU_MODES))
    if not plan.peer:
        want = [m for m in want if not m.startswith("genai")]
    if layout != "unfused":  # the onnx-attention build has one layout only
        want = [m for m in want if m != "naive-concat"]
    ctxs = plan.contexts or CONTEXTS.get(name, [128])
    # one KV capacity (max_length) for every mode and the peer: attention work follows it on CUDA
    # (total_sequence_length = the static mask's length), so unequal capacities are unequal work
    capacity = max(ctxs) + plan.new_tokens
    folder = ModelFolder.load(folder_dir)
    weight_bytes = decoder_weight_bytes(folder) if dev.is_cuda else 0
    key = f"{name}/{layout}"
    prov.setdefault("fixtures", {})[key] = fixture_hash(folder_dir)  # what was measured, by content
    scenarios, loaded = [], {}
    with tqdm(total=len(want) * len(ctxs) * (plan.repeats + 1), desc=f"bench {key} {dev}", unit="run",
              disable=not plan.progress) as bar:  # closed on every way out, Ctrl-C too
        for mode in want:
            for ctx in ctxs:
                bar.set_postfix_str(f"warm-up {mode} ctx {ctx}")
                base = dict(preset=name, layout=layout, dtype=dtype, device=str(dev), mode=mode, context=ctx,
                            kv_capacity=capacity)
                try:
                    once, error = _once(vlmdecode, plan, folder_dir, dev, mode, ctx, loaded, capacity), None
                except Exception as e:  # noqa: BLE001 - a failed scenario is reported, not fatal
                    once, error = None, f"{type(e).__name__}: {e}"[:300]
                scenarios.append(dict(base=base, once=once, error=error, samples=[]))
                bar.update(1)
        first_row = len(rows)
        for r in range(plan.repeats):
            for sc in scenarios if r % 2 == 0 else scenarios[::-1]:
                if sc["error"] is None:
                    bar.set_postfix_str(f"round {r + 1} {sc['base']['mode']} ctx {sc['base']['context']}")
                    try:
                        sc["samples"].append(sc["once"]())
                    except Exception as e:  # noqa: BLE001
                        sc["error"] = f"{type(e).__name__}: {e}"[:300]
                bar.update(1)
            rows[first_row:] = [_row(sc, folder, weight_bytes, bw) for sc in scenarios]
            _write(plan.out_dir, plan.tag, rows, prov)
    for row in rows[first_row:]:
        plan.log(json.dumps(row, default=str))
    if dev.is_cuda and loaded:
        try:
            prov[f"nodes_per_step[{key}]"] = nodes_per_step(folder, str(dev))
        except Exception as e:  # noqa: BLE001
            prov[f"nodes_per_step[{key}]"] = f"unavailable: {e}"
    loaded.clear()


def _row(sc: dict, folder, weight_bytes: int, bw: float | None) -> dict:
    """One scenario's result row: its summary (or its error) and, on CUDA, the floor at its context."""
    row = summarize(sc["samples"]) if sc["samples"] and sc["error"] is None else dict(error=sc["error"])
    row.update(sc["base"])
    if bw and "per_token_ms" in row:
        floor = floor_ms(folder, row["context"], bw, weight_bytes)
        row.update(floor_ms=floor, ratio_to_floor=row["per_token_ms"] / floor)
    return row


def _write(out_dir, tag, rows, prov) -> None:
    import pandas as pd

    if not out_dir:
        return
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / f"{tag}.csv", index=False)
    (out / f"{tag}.json").write_text(json.dumps({"provenance": prov, "rows": rows}, indent=2, default=str) + "\n")


def _once(vlmdecode, plan: _Plan, folder_dir, dev, mode, ctx, loaded, capacity):
    """The warmed-up once() of one scenario; models load once per mode into `loaded` and serve every context."""
    new_tokens, skip = plan.new_tokens, plan.skip
    if mode.startswith("genai"):
        from .peer import load_genai_model

        if mode not in loaded:
            graph = mode == "genai-graph" if dev.is_cuda else None
            loaded[mode] = load_genai_model(folder_dir, dev.kind, cuda_graph=graph)
        return genai_once(loaded[mode], ctx, new_tokens, skip, max_length=capacity)
    load = functools.partial(vlmdecode.load, max_length=capacity)
    if mode == "naive-concat":  # the `onnx` attention build: numpy KV concatenated by the graph each step
        loaded.setdefault(mode, load(cli_fixture(folder_dir, "onnx"), str(dev), "naive"))
    if mode not in loaded:
        if mode == "tokenid-graph":
            loaded[mode] = load(Path(folder_dir) / "text", str(dev), "graph")
        elif mode == "device-session":  # the embedding session writes the decoder's input (vs a gather)
            loaded[mode] = load(folder_dir, str(dev), "device", embed_via="session")
        else:
            loaded[mode] = load(folder_dir, str(dev), None if mode == "resident" else mode)
    return pipeline_once(loaded[mode], ctx, new_tokens, skip)


def cli_fixture(folder_dir, attention: str) -> Path:
    """The sibling fixture folder (same preset and dtype) with another attention kind, unfused."""
    from .fixture import load_fixture_config
    from .fixture.cache import ensure_fixture

    cfg = load_fixture_config(folder_dir)
    return ensure_fixture(cfg.name, attention, cfg.dtype, Path(folder_dir).parent)


def _read_results(path, key, extra=("spread",)):
    """A results CSV with the columns compare() needs; files from before layouts existed were all unfused."""
    import pandas as pd

    t = pd.read_csv(path)
    if "layout" not in t:
        t["layout"] = "unfused"
    missing = [c for c in [*key, "per_token_ms", *extra] if c not in t]
    if missing:
        raise ValueError(f"{path} lacks column(s) {missing}: not a bench run results CSV")
    return t


def compare(base_csv, new_csv, noise_csv=None, floor_pct: float = 5.0):
    """Per-scenario % change of per_token_ms; a change above the scenario's noise threshold is flagged.

    Threshold: 3 x the relative spread seen in `noise_csv` (repeated runs of one build) for that
    scenario, else the larger of the two runs' own spreads x 100, never below `floor_pct`.
    """

    key = ["preset", "layout", "device", "mode", "context"]
    base, new = _read_results(base_csv, key), _read_results(new_csv, key)
    t = base[key + ["per_token_ms", "spread"]].merge(new[key + ["per_token_ms", "spread"]], on=key,
                                                      suffixes=("_base", "_new"))
    t["change_pct"] = (t["per_token_ms_new"] / t["per_token_ms_base"] - 1) * 100
    if noise_csv:
        noise = _read_results(noise_csv, key, ()).groupby(key)["per_token_ms"].agg(lambda s: s.std() / s.mean() * 100)
        t = t.merge(noise.rename("noise_pct").reset_index(), on=key, how="left")
        t["threshold_pct"] = (3 * t["noise_pct"]).fillna(floor_pct).clip(lower=floor_pct)
    else:
        t["threshold_pct"] = (t[["spread_base", "spread_new"]].max(axis=1) * 100).clip(lower=floor_pct)
    t["regression"] = t["change_pct"] > t["threshold_pct"]
    return t[key + ["per_token_ms_base", "per_token_ms_new", "change_pct", "threshold_pct", "regression"]]
