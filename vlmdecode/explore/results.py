"""The recorded results under data/results, read as DataFrames for the notebooks and plots.

    results_dir()                                  data/results of the repository, or $VLMDECODE_RESULTS
    load_results(pattern) / ok_results(df)         benchmark CSVs; the rows that ran
    bytes_table(df)                                h2d + d2h bytes per step by mode; "not measured" if none
    bench_ratios(df)                               the targets' ratios (graph/eager, device/floor, ...)
    gpu_test_log() / profile_table() / kernel_groups() / launch_floor()   the other recorded H200 files
    MODE_ORDER                                     the order modes are shown in

Missing or errored rows (e.g. genai-* scenarios that failed on the recorded run) are kept out of
computations, never raised on. A missing results folder raises (it never loads as empty). Measures
nothing itself (see bench).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..modes import ORDER

MODE_ORDER = list(ORDER)  # the registry's display order (vlmdecode.modes)

REPO_RESULTS = Path(__file__).resolve().parents[2] / "data" / "results"  # in a checkout or an editable install


def results_dir(root=None) -> Path:
    """The folder of recorded results: `root` if given, else $VLMDECODE_RESULTS, else the repository's
    data/results. Raises FileNotFoundError naming the folder when it is not there (after a non-editable
    install the repository's folder is not next to the package: point VLMDECODE_RESULTS at a checkout's)."""
    if root is not None:
        path, origin = Path(root), "the folder passed"
    elif os.environ.get("VLMDECODE_RESULTS"):
        path, origin = Path(os.environ["VLMDECODE_RESULTS"]), "$VLMDECODE_RESULTS"
    else:
        path, origin = REPO_RESULTS, "the repository's data/results"
    if not path.is_dir():
        raise FileNotFoundError(
            f"recorded results folder not found: {path} ({origin}). The recorded results live in a checkout of "
            "the vlmdecode repository under data/results: use an editable install (pip install -e .) or set "
            "VLMDECODE_RESULTS=/path/to/vlmdecode/data/results")
    return path


def load_results(pattern: str | tuple = "h200_bench_*.csv", root=None) -> pd.DataFrame:
    """All recorded benchmark CSVs matching `pattern` (or any of a tuple of patterns), concatenated, with
    the file name in `source` (empty DataFrame if no file matches; a missing folder raises).
    h200_bench_*: layouts side by side at one KV capacity; h200_matrix_*: every mode at contexts up to 4096
    (another capacity: keep them apart)."""
    patterns = (pattern,) if isinstance(pattern, str) else tuple(pattern)
    files = sorted({f for p in patterns for f in results_dir(root).glob(p)})
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


def bytes_table(df: pd.DataFrame) -> pd.DataFrame:
    """h2d + d2h bytes per decode step of the rows that ran: one row per (preset, layout, context, KV capacity),
    one column per mode in MODE_ORDER; integers with thousands separators, "not measured" where a run recorded
    no bytes (onnxruntime-genai's modes), "-" where the mode did not run in that scenario."""
    ok = ok_results(df)
    keys = ["preset", "layout", "context", "kv_capacity"]
    ok = ok.assign(layout=ok["layout"] if "layout" in ok else "unfused",
                   kv_capacity=ok["kv_capacity"] if "kv_capacity" in ok else np.nan,
                   total=pd.to_numeric(ok.get("h2d_per_step"), errors="coerce")
                   + pd.to_numeric(ok.get("d2h_per_step"), errors="coerce"))
    ok = ok.astype({"context": int, "kv_capacity": "Int64"})
    rows = []
    for key, g in ok.groupby(keys, sort=True, dropna=False):
        med = g.groupby("mode")["total"].median()
        rows.append({**dict(zip(keys, key)), **{m: f"{int(v):,}" if np.isfinite(v) else "not measured"
                                                 for m, v in med.items()}})
    modes = sorted(set(ok["mode"]), key=lambda m: (MODE_ORDER.index(m) if m in MODE_ORDER else len(MODE_ORDER), m))
    t = pd.DataFrame(rows, columns=keys + modes).set_index(keys).fillna("-")
    t.columns.name = "mode"
    return t


def gpu_test_log(path=None) -> pd.DataFrame:
    """Per test of the recorded H200 CUDA run: file, test, outcome (PASSED, FAILED, ERROR, SKIPPED, XFAIL). Read
    from the run's JUnit XML (`h200_gpu_tests.xml`, pytest --junitxml; the default: the same run's
    h200_gpu_test_log.txt is pytest -q output, which names no test), or from a pytest -v log (a path not ending
    in .xml: its `file::test OUTCOME` lines). Empty where the file is missing."""
    path = Path(path or results_dir() / "h200_gpu_tests.xml")
    cols = ["file", "test", "outcome"]
    if not path.is_file():
        return pd.DataFrame(columns=cols)
    if path.suffix == ".xml":
        return pd.DataFrame(_junit_rows(path), columns=cols)
    rows, seen = [], set()
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"^(\S+\.py)::(\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b", line)
        if m and (m[1], m[2]) not in seen:
            seen.add((m[1], m[2]))
            rows.append({"file": m[1], "test": m[2], "outcome": m[3]})
    return pd.DataFrame(rows, columns=cols)


def _junit_rows(path: Path) -> list[dict]:
    """A pytest JUnit XML's testcases: classname `tests.test_x` -> file tests/test_x.py (a module whose collection
    was skipped has no classname and the module as its name: test "(collection)")."""
    import xml.etree.ElementTree as ET  # our own committed file (pytest's output), not untrusted input

    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        cls, name = case.get("classname", ""), case.get("name", "")
        module, test = (cls, name) if cls else (name, "(collection)")
        tags = {child.tag: child for child in case}
        if "failure" in tags:
            outcome = "FAILED"
        elif "error" in tags:
            outcome = "ERROR"
        elif "skipped" in tags:
            outcome = "XFAIL" if tags["skipped"].get("type") == "pytest.xfail" else "SKIPPED"
        else:
            outcome = "PASSED"
        rows.append({"file": module.replace(".", "/") + ".py", "test": test, "outcome": outcome})
    return rows


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


def native_kernels(path=None) -> pd.DataFrame:
    """h200_native_kernels.json as rows (kernel, best block shape, MB, µs, TB/s, share of the run's copy
    bandwidth, and the first run's µs where it has one); the copy bandwidth in `.attrs["copy_tb_per_s"]`."""
    data = _recorded_json(path, "h200_native_kernels.json")
    cols = ["kernel", "shape", "MB", "us", "TB/s", "of_copy_bw", "first_run_us"]
    if data is None:
        t = pd.DataFrame(columns=cols)
        t.attrs["copy_tb_per_s"] = float("nan")
        return t
    bw, before = float(data["copy_tb_per_s"]), data.get("before", {}).get("us", {})
    rows = [{"kernel": name, "shape": k["best_shape"], "MB": k["bytes"] / 1e6, "us": k["us"], "TB/s": k["tb_per_s"],
             "of_copy_bw": k["tb_per_s"] / bw, "first_run_us": before.get(name, float("nan"))}
            for name, k in data["kernels"].items()]
    t = pd.DataFrame(rows, columns=cols)
    t.attrs["copy_tb_per_s"] = bw
    return t
