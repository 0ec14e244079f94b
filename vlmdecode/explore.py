"""Small helpers for the notebooks: tables of a model folder, recorded results, CPU measurements.

    component_table(dir) / io_table(dir) / op_counts(dir)   what the ONNX files hold, as DataFrames
    load_results() / ok_results(df) / gpu_test_log()         the recorded H200 results (data/results)
    gpu_available()                                          CUDA provider + a visible GPU
    predicted_bytes(folder, mode, position)                  host<->device bytes a decode step should move
    cpu_trajectory / reference_trajectory / parity_table     CPU vs float64 reference vs genai, per step
    residency_sweep(dirs, contexts)                          naive vs resident CPU decode vs context
    layout_table(dirs)                                       decoder nodes per layer and op mix, by layout
    bench_ratios(df) / profile_table()                       the targets' ratios; captured-step times by layout
    explorer(make_pipe)                                      an ipywidgets box that streams a generation

Every function returns plain pandas/numpy objects (plots live in `vlmdecode.plots`). Missing or
errored result rows (e.g. genai-* scenarios that failed on the recorded run) are kept out of
computations, never raised on. Not a benchmark harness (see bench).
"""

from __future__ import annotations

import os
import re
import statistics
from pathlib import Path

import numpy as np
import pandas as pd

import vlmdecode

from . import modes
from .costmodel import predicted_bytes
from .modelfolder import ModelFolder

ROLES = ("vision", "embedding", "decoder")
MODE_ORDER = list(modes.ORDER)  # display order: the registry's


# ---- model folder tables ------------------------------------------------------------------------
def _components(model_dir) -> list:
    folder = ModelFolder.load(model_dir)
    return [c for c in (getattr(folder, r, None) for r in ROLES) if c is not None]


def _load_graph(path):
    import onnx

    return onnx.load(str(path), load_external_data=False)


def _n_params(model) -> int:
    return int(sum(int(np.prod(t.dims)) if len(t.dims) else 1 for t in model.graph.initializer))


def component_table(model_dir) -> pd.DataFrame:
    """One row per component: file, #inputs, #outputs, #nodes, #distinct ops, #initializers, params, MB."""
    rows = []
    for c in _components(model_dir):
        m = _load_graph(c.path)
        size = c.path.stat().st_size + sum(p.stat().st_size for p in c.path.parent.glob(c.path.name + ".data"))
        rows.append({"component": c.role, "file": c.path.name, "inputs": len(m.graph.input),
                     "outputs": len(m.graph.output), "nodes": len(m.graph.node),
                     "op_types": len({n.op_type for n in m.graph.node}),
                     "initializers": len(m.graph.initializer), "params": _n_params(m),
                     "size_MB": round(size / 2**20, 3)})
    return pd.DataFrame(rows).set_index("component")


def io_table(model_dir) -> pd.DataFrame:
    """Inputs and outputs of every component: component, direction, name, dtype, shape."""
    rows = []
    for c in _components(model_dir):
        sig = c.signature
        for direction, items in (("input", sig.inputs), ("output", sig.outputs)):
            for name, (dtype, shape) in items.items():
                rows.append({"component": c.role, "direction": direction, "name": name,
                             "dtype": str(np.dtype(dtype)) if not isinstance(dtype, int) else str(dtype),
                             "shape": "[" + ", ".join(str(d) for d in shape) + "]"})
    return pd.DataFrame(rows)


def op_counts(model_dir) -> pd.DataFrame:
    """Node counts by op type (rows, 'domain:op' for non-default domains) and component (columns)."""
    counts = {}
    for c in _components(model_dir):
        m = _load_graph(c.path)
        ops = [f"{n.domain}:{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type for n in m.graph.node]
        counts[c.role] = pd.Series(ops).value_counts()
    df = pd.DataFrame(counts).fillna(0).astype(int)
    df["total"] = df.sum(axis=1)
    df.index.name = "op"
    return df.reset_index().sort_values(["total", "op"], ascending=[False, True]).set_index("op")


def layout_table(model_dirs: dict) -> pd.DataFrame:
    """Decoder nodes (total, per layer) and the count of each op type, one row per layout folder."""
    from .fixture import load_fixture_config

    rows = []
    for label, d in model_dirs.items():
        ops = op_counts(d)["decoder"]
        layers = load_fixture_config(d).num_layers
        rows.append({"layout": label, "nodes": int(ops.sum()), "nodes_per_layer": round(ops.sum() / layers, 1),
                     **{op.split(":")[-1]: int(n) for op, n in ops.items() if n}})
    t = pd.DataFrame(rows).set_index("layout")
    ops = [c for c in t if c != "nodes_per_layer"]
    t[ops] = t[ops].fillna(0).astype(int)
    return t


# ---- recorded results -----------------------------------------------------------------------------
def results_dir() -> Path:
    """data/results of the repository (or $VLMDECODE_RESULTS)."""
    env = os.environ.get("VLMDECODE_RESULTS")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "data" / "results"


def load_results(pattern: str | tuple = "h200_bench_*.csv", root=None) -> pd.DataFrame:
    """All recorded benchmark CSVs matching `pattern` (or any of a tuple of patterns), concatenated, with
    the file name in `source` (empty DataFrame if none). h200_bench_*: layouts side by side at one KV
    capacity; h200_matrix_*: every mode at contexts up to 4096 (another capacity: keep them apart)."""
    patterns = (pattern,) if isinstance(pattern, str) else tuple(pattern)
    files = sorted({f for p in patterns for f in Path(root or results_dir()).glob(p)})
    if not files:
        return pd.DataFrame(columns=["preset", "dtype", "device", "mode", "context", "per_token_ms", "error"])
    df = pd.concat([pd.read_csv(f).assign(source=f.name) for f in files], ignore_index=True)
    if "error" not in df:
        df["error"] = np.nan
    # files from before decoder layouts existed were all unfused
    df["layout"] = df["layout"].fillna("unfused") if "layout" in df else "unfused"
    return df


def ok_results(df: pd.DataFrame) -> pd.DataFrame:
    """Rows that ran: no error and a finite per_token_ms."""
    err = (df["error"].astype(str).where(df["error"].notna(), "").str.strip() if "error" in df
           else pd.Series("", index=df.index))  # (fillna("") on an all-NaN float column warns in pandas 3)
    return df[(err == "") & np.isfinite(pd.to_numeric(df["per_token_ms"], errors="coerce"))].copy()


def gpu_test_log(path=None) -> pd.DataFrame:
    """PASSED/FAILED/SKIPPED/ERROR lines of a pytest -v log: file, test, outcome."""
    path = Path(path or results_dir() / "h200_gpu_test_log.txt")
    rows, seen = [], set()
    if not path.is_file():
        return pd.DataFrame(columns=["file", "test", "outcome"])
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"^(\S+\.py)::(\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b", line)
        if m and (m[1], m[2]) not in seen:
            seen.add((m[1], m[2]))
            rows.append({"file": m[1], "test": m[2], "outcome": m[3]})
    return pd.DataFrame(rows, columns=["file", "test", "outcome"])


RATIOS = {  # the targets, as numerator/denominator modes
    "graph/eager": ("graph", "eager"), "graph/tokenid-graph": ("graph", "tokenid-graph"),
    "device/tokenid-graph": ("device", "tokenid-graph"), "device/genai-graph": ("device", "genai-graph"),
}


def bench_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Per (preset, layout, dtype, device, context, KV capacity): the RATIOS and device/floor (NaN where a mode
    is missing). Capacity is a key because attention work follows it on CUDA: runs with different capacities
    are different work, never pooled."""
    ok = ok_results(df)
    if "layout" not in ok:
        ok = ok.assign(layout="unfused")
    # files from before one capacity for all modes: -1, their own group
    ok = ok.assign(kv_capacity=ok["kv_capacity"].fillna(-1) if "kv_capacity" in ok else -1)
    keys = ["preset", "layout", "dtype", "device", "context", "kv_capacity"]
    if ok.empty:
        return pd.DataFrame(columns=keys + list(RATIOS) + ["device/floor"])
    wide = ok.pivot_table(index=keys, columns="mode", values="per_token_ms", aggfunc="median")
    floor = ok.groupby(keys)["floor_ms"].median() if "floor_ms" in ok else pd.Series(np.nan, index=wide.index)
    col = lambda m: wide[m] if m in wide else pd.Series(np.nan, index=wide.index)  # noqa: E731
    out = pd.DataFrame({name: col(a) / col(b) for name, (a, b) in RATIOS.items()})
    out["device/floor"] = col("device") / floor.reindex(wide.index)
    return out.reset_index()


def _recorded_json(path, name: str) -> dict | None:
    """The JSON at `path`, else data/results/`name`; None when the file is not there."""
    import json

    path = Path(path or results_dir() / name)
    return json.loads(path.read_text()) if path.is_file() else None


def profile_table(path=None) -> pd.DataFrame:
    """h200_profile_layouts.json as rows: device ms of one step (no host work) by preset and layout."""
    data = _recorded_json(path, "h200_profile_layouts.json")
    if data is None:
        return pd.DataFrame(columns=["preset", "layout", "nodes_per_step"])
    rows = []
    for preset, res in data.items():
        if not isinstance(res, dict) or "context" not in res:
            continue
        for layout, r in res.items():
            if isinstance(r, dict) and "graph_step_device_ms" in r:
                rows.append({"preset": preset, "layout": layout, "context": res["context"],
                             **{k: v for k, v in r.items() if k != "ops"}})
    return pd.DataFrame(rows)


def kernel_groups(path=None) -> pd.DataFrame:
    """h200_kernels_warm.json (or another scripts/h200_kernels.py summary) as rows: kernels and GPU µs by
    group (matmul, norm, elementwise, other = attention and rotary) and their share, one block per profile."""
    data = _recorded_json(path, "h200_kernels_warm.json")
    if data is None:
        return pd.DataFrame(columns=["profile", "group", "kernels", "us", "share"])
    rows = []
    for name, prof in data.items():
        if name == "provenance":
            continue
        for group, g in prof["groups"].items():
            rows.append({"profile": name, "group": group, "kernels": g["kernels"], "us": g["us"],
                         "share": g["us"] / prof["kernel_us"]})
    return pd.DataFrame(rows).sort_values(["profile", "us"], ascending=[True, False]).reset_index(drop=True)


def launch_floor(path=None) -> pd.DataFrame:
    """h200_launch_floor.json as rows (kernels, graph_us, us_per_kernel); the fitted µs per kernel of a
    replayed CUDA graph in `.attrs["us_per_kernel"]` (NaN without the file)."""
    data = _recorded_json(path, "h200_launch_floor.json")
    if data is None:
        t = pd.DataFrame(columns=["kernels", "graph_us", "us_per_kernel"])
        t.attrs["us_per_kernel"] = float("nan")
        return t
    t = pd.DataFrame(data["rows"])
    t.attrs["us_per_kernel"] = float(data["fit_us_per_kernel"])
    return t


# ---- devices ------------------------------------------------------------------------------------------
def gpu_available() -> bool:
    """True when onnxruntime has the CUDA provider and CuPy sees a GPU; never raises."""
    try:
        import onnxruntime

        from .devices import cuda_device_count

        return "CUDAExecutionProvider" in onnxruntime.get_available_providers() and cuda_device_count() > 0
    except Exception:  # noqa: BLE001
        return False


# ---- bytes per step: vlmdecode.costmodel ------------------------------------------------------------
def folder_vocab(folder) -> int:
    """Vocabulary size: the last dim of the decoder's logits output."""
    dec = folder.decoder
    return int(dec.signature.outputs[dec.outputs["logits"]][1][-1])


# ---- trajectories and parity --------------------------------------------------------------------
def cpu_trajectory(pipe, prompt: str, image=None, steps: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """Greedy (tokens [steps], logits [steps, V]) from the pipeline's decoder loop, never stopping at eos."""
    from .sampling import Recorder

    _, x = pipe.prepare(prompt, image)
    rec = Recorder()
    tokens = list(pipe.decoder.generate(x, steps, rec))
    return np.array(tokens, np.int64), np.stack(rec.logits)


def reference_trajectory(model_dir, prompt: str, image=None, steps: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """The float64 reference's greedy (tokens [steps], logits [steps, V]) for the same prompt and image."""
    from .processor import Processor
    from .reference import Reference

    ref, proc = Reference.load(model_dir), Processor.load(model_dir)
    ids = proc.encode_prompt(prompt, 0 if image is None else 1)
    feats = None if image is None else ref.vision(proc.preprocess([image], dtype=np.float32))
    tokens, logits = ref.greedy(ref.embed(ids, feats), steps)  # never stops at eos
    return np.asarray(tokens[0], np.int64), np.asarray(logits[:, 0], np.float64)


def margins(logits: np.ndarray) -> pd.DataFrame:
    """step, top1, top2, margin = top1 - top2 of logits [steps, V]."""
    top2 = np.sort(np.asarray(logits), axis=-1)[:, -2:]
    return pd.DataFrame({"step": np.arange(len(top2)), "top1": top2[:, 1], "top2": top2[:, 0],
                         "margin": top2[:, 1] - top2[:, 0]})


def margin_table(model_dir, prompt: str, image=None, steps: int = 24) -> pd.DataFrame:
    """step, token, top1, top2, margin of the float64 reference's greedy trajectory.

    `vlmdecode.fixture.margins.trajectory_margins` when it imports, else computed here the same way.
    """
    try:
        from .fixture.margins import trajectory_margins

        return trajectory_margins(model_dir, prompt, image, steps)
    except (ImportError, SyntaxError, AttributeError):
        tokens, logits = reference_trajectory(model_dir, prompt, image, steps)
        df = margins(logits)
        df.insert(1, "token", tokens)
        return df


def genai_tokens(model_dir, pipe, prompt: str, image=None, steps: int = 24):
    """onnxruntime-genai's greedy tokens for the pipeline's prompt ids and pixel values; None if unavailable."""
    from .peer import genai_available, genai_greedy

    if not genai_available():
        return None
    ids, _ = pipe.prepare(prompt, image)
    px = None if image is None else pipe.processor.preprocess([image])
    return list(genai_greedy(model_dir, ids, steps, pixel_values=px).tokens)


def fixture_pipes(root):
    """make_pipe(preset, device, mode) for `explorer`: tiny fixtures under `root` (fp32 on CPU, fp16 on CUDA)."""
    import vlmdecode

    from .cli import ensure_fixture

    cache = {}

    def make_pipe(preset: str, device: str, mode: str):
        dtype = "fp32" if device == "cpu" else "fp16"
        key = (preset, device, mode)
        if key not in cache:
            cache[key] = vlmdecode.load(ensure_fixture(preset, "gqa", dtype, root=Path(root)), device,
                                        None if device == "cpu" else mode)
        return cache[key]

    return make_pipe


def parity_table(**tokens) -> pd.DataFrame:
    """step, one column per named token list, and `equal` (all columns agree). None lists are left out;
    a shorter list leaves <NA> (not equal)."""
    tokens = {k: v for k, v in tokens.items() if v is not None}
    n = max((len(t) for t in tokens.values() if t is not None), default=0)
    df = pd.DataFrame({"step": np.arange(n)})
    for name, t in tokens.items():
        t = [] if t is None else list(t)
        df[name] = pd.array([int(v) for v in t] + [None] * (n - len(t)), dtype="Int64")
    cols = list(tokens)
    df["equal"] = df[cols].notna().all(axis=1) & df[cols].nunique(axis=1).eq(1)
    return df


def logit_error(logits: np.ndarray, ref_logits: np.ndarray) -> pd.DataFrame:
    """Per step: max_abs = max|logits - ref| and rel = max_abs / max|ref|."""
    a, r = np.asarray(logits, np.float64), np.asarray(ref_logits, np.float64)
    n = min(len(a), len(r))
    err = np.abs(a[:n] - r[:n]).max(axis=-1)
    return pd.DataFrame({"step": np.arange(n), "max_abs": err, "rel": err / np.abs(r[:n]).max(axis=-1)})


def cuda_parity(model_dir, prompt: str, image, steps: int, modes=("eager", "graph", "device")) -> pd.DataFrame:
    """Tokens of each CUDA mode on one folder as a parity table (needs a GPU)."""
    import vlmdecode

    toks = {m: vlmdecode.load(model_dir, "cuda", m).generate(prompt, image=image, max_new_tokens=steps,
                                                               stop=()).tokens for m in modes}
    return parity_table(**toks)


# ---- residency sweep -------------------------------------------------------------------------------
def _median_decode(df: pd.DataFrame, col: str) -> float:
    d = df[df["step"] > 0][col]
    return float(d.median()) if len(d) else float("nan")


def residency_sweep(model_dirs: dict, contexts, new_tokens: int = 8) -> pd.DataFrame:
    """Naive vs resident decode on CPU for each folder and prompt length.

    model_dirs: label -> folder (e.g. {"gqa": ..., "onnx": ...}). One row per (variant, mode,
    context): measured median bytes and ms per decode step, predicted bytes. Step 0 (prefill) is
    excluded from the medians.
    """
    import vlmdecode

    from .profiling import prompt_ids

    rows = []
    for label, d in model_dirs.items():
        pipes = {m: vlmdecode.load(d, "cpu", m) for m in ("resident", "naive")}
        for ctx in contexts:
            ids = prompt_ids(ctx)
            for mode, pipe in pipes.items():
                pipe.generate_from_ids(ids, max_new_tokens=2, stop=())  # warm-up
                f = pipe.generate_from_ids(ids, max_new_tokens=new_tokens, stop=()).frame()
                f["ms"] = f["seconds"] * 1e3
                rows.append(_row(label, mode, ctx, f, predicted_bytes(pipe.folder, mode, ctx)))
    return pd.DataFrame(rows)


def _row(label, mode, ctx, f, pred) -> dict:
    first = f[f["step"] == 1]
    take = lambda c: int(first[c].iloc[0]) if len(first) else -1
    return {"variant": label, "mode": mode, "context": ctx,
            "h2d_bytes": take("h2d_bytes"), "d2h_bytes": take("d2h_bytes"), "kv_bytes": take("kv_bytes"),
            "pred_h2d": pred["h2d"], "pred_d2h": pred["d2h"], "pred_kv": pred["kv"],
            "ms_per_step": _median_decode(f, "ms")}


# ---- widget ---------------------------------------------------------------------------------------------
def explorer(make_pipe, presets=("tiny",), devices=None, modes=None, image=None,
             prompt: str = "Describe the image."):
    """An ipywidgets box: preset, device, mode, max tokens, a Run button, the tokens and a live plot.

    make_pipe(preset, device, mode) -> Pipeline. Nothing runs until the button is clicked
    (`box.run()` clicks it programmatically). Returns the VBox; `box.records` holds the last run.
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt

    devices = list(devices or (["cpu", "cuda"] if gpu_available() else ["cpu"]))
    modes = dict(modes or {"cpu": ["resident"], "cuda": ["eager", "graph", "device"]})
    preset_w = w.Dropdown(options=list(presets), description="preset")
    device_w = w.Dropdown(options=devices, description="device")
    mode_w = w.Dropdown(options=modes[devices[0]], description="mode")
    tokens_w = w.IntSlider(value=16, min=1, max=64, description="max tokens")
    button = w.Button(description="Run", button_style="primary")
    text = w.HTML(value="<i>press Run</i>")
    out = w.Output()

    def on_device(change):
        mode_w.options = modes[change["new"].split(":")[0]]

    device_w.observe(on_device, names="value")
    box = w.VBox([w.HBox([preset_w, device_w, mode_w, tokens_w, button]), text, out])
    box.records = []

    def run(_=None):
        pipe = make_pipe(preset_w.value, device_w.value, mode_w.value)
        box.records = []
        out.clear_output(wait=True)
        for rec in pipe.stream(prompt, image=image, max_new_tokens=tokens_w.value, stop=()):
            box.records.append(rec)
            text.value = "tokens: " + " ".join(str(r.token) for r in box.records)
            if len(box.records) % 4 == 0 or len(box.records) == tokens_w.value:
                with out:
                    out.clear_output(wait=True)
                    from .plots import plot_step_times

                    plot_step_times([r.seconds * 1e3 for r in box.records],
                                    title=f"{preset_w.value} {device_w.value} {mode_w.value}")
                    plt.show()
        return box.records

    button.on_click(run)
    box.run = run
    box.widgets = {"preset": preset_w, "device": device_w, "mode": mode_w, "tokens": tokens_w, "button": button}
    return box


def summary_stats(values) -> dict:
    """median/min/max of a list of numbers (empty -> NaNs)."""
    v = [float(x) for x in values]
    if not v:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan")}
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def live_step_times(root, max_new_tokens: int = 48, prompt: str = "Describe the image.") -> pd.DataFrame:
    """Per-step milliseconds of one generation per mode available here (cpu resident; cuda modes with a GPU)."""
    from .cli import ensure_fixture
    from .processor import demo_image

    runs = [("cpu", "resident", "fp32")]
    if gpu_available():
        runs += [("cuda", m, "fp16") for m in ("eager", "graph", "device")]
    rows = []
    for device, mode, dtype in runs:
        pipe = vlmdecode.load(ensure_fixture("tiny", "gqa", dtype, root=Path(root)), device,
                              None if device == "cpu" else mode)
        r = pipe.generate(prompt, image=demo_image(32), max_new_tokens=max_new_tokens, stop=())
        rows += [{"label": f"{device} {mode}", "step": s.step, "ms": s.seconds * 1e3} for s in r.steps]
    return pd.DataFrame(rows)
