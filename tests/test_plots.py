"""vlmdecode.explore (notebook helpers) and vlmdecode.plots: tables, recorded results, figures."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

import vlmdecode
from vlmdecode import plots as P
from vlmdecode.devices import gpu_available
from vlmdecode.explore import parity, residency, results, tables, widget
from vlmdecode.fixture.cache import ensure_fixture
from vlmdecode.processor import demo_image

PROMPT = "Describe the image."


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("explore")
    return {kind: ensure_fixture("tiny", kind, "fp32", root=root) for kind in ("gqa", "onnx")}


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


@pytest.fixture
def bench():
    """A recorded-results-like frame, with an errored genai row and a missing floor."""
    rows = []
    for ctx in (128, 1024):
        for mode, ms in (("naive", 50.0), ("eager", 10.0), ("graph", 5.0), ("device", 2.0), ("tokenid-graph", 4.0)):
            rows.append({"preset": "p", "dtype": "fp16", "device": "cuda:0", "mode": mode, "context": ctx,
                         "per_token_ms": ms, "floor_ms": 1.0, "h2d_per_step": 100.0, "d2h_per_step": 8.0,
                         "error": np.nan})
        rows.append({"preset": "p", "dtype": "fp16", "device": "cuda:0", "mode": "genai-graph", "context": ctx,
                     "per_token_ms": np.nan, "floor_ms": np.nan, "h2d_per_step": np.nan, "d2h_per_step": np.nan,
                     "error": "ValueError: boom"})
    return pd.DataFrame(rows)


def test_component_io_and_op_tables(dirs):
    ct = tables.component_table(dirs["gqa"])
    assert list(ct.index) == ["vision", "embedding", "decoder"]
    assert {"inputs", "outputs", "nodes", "params", "size_MB"} <= set(ct.columns)
    assert (ct["params"] > 0).all()
    io = tables.io_table(dirs["gqa"])
    assert list(io.columns) == ["component", "direction", "name", "dtype", "shape"]
    dec_in = io[(io.component == "decoder") & (io.direction == "input")]
    assert "inputs_embeds" in set(dec_in["name"])
    ops = tables.op_counts(dirs["gqa"])
    assert "com.microsoft:GroupQueryAttention" in ops.index
    assert (ops["total"] == ops[["vision", "embedding", "decoder"]].sum(axis=1)).all()
    assert ops["total"].is_monotonic_decreasing


def test_load_results_and_ratios(bench, tmp_path):
    bench.to_csv(tmp_path / "h200_bench_x.csv", index=False)
    df = results.load_results(root=tmp_path)
    assert len(df) == len(bench) and (df["source"] == "h200_bench_x.csv").all()
    assert len(results.ok_results(df)) == 10  # the errored genai rows are dropped
    assert (df["layout"] == "unfused").all()  # a file without the column: results from before layouts
    r = results.bench_ratios(df)
    assert list(r.columns) == ["preset", "layout", "dtype", "device", "context", "kv_capacity", "graph/eager",
                               "graph/tokenid-graph", "device/tokenid-graph", "device/genai-graph", "device/floor"]
    assert np.allclose(r["graph/eager"], 0.5) and np.allclose(r["device/tokenid-graph"], 0.5)
    assert np.allclose(r["graph/tokenid-graph"], 1.25) and r["device/genai-graph"].isna().all()  # genai errored
    assert np.allclose(r["device/floor"], 2.0)
    fused = bench.assign(layout="fused", per_token_ms=bench["per_token_ms"] / 2)
    pd.concat([bench.assign(layout="unfused"), fused]).to_csv(tmp_path / "h200_bench_x.csv", index=False)
    r = results.bench_ratios(results.load_results(root=tmp_path))
    assert list(r["layout"]) == ["fused", "fused", "unfused", "unfused"]
    assert np.allclose(r["device/floor"], [1.0, 1.0, 2.0, 2.0])
    # another KV capacity is other work: its own rows, never pooled with the first
    big = bench.assign(layout="unfused", kv_capacity=4096, per_token_ms=bench["per_token_ms"] * 3)
    pd.concat([bench.assign(layout="unfused", kv_capacity=256), big]).to_csv(tmp_path / "h200_bench_x.csv", index=False)
    r = results.bench_ratios(results.load_results(root=tmp_path))
    assert sorted(r["kv_capacity"]) == [256, 256, 4096, 4096]
    assert np.allclose(r.set_index("kv_capacity")["device/floor"].sort_index(), [2, 2, 6, 6])
    (tmp_path / "none").mkdir()
    empty = results.load_results(root=tmp_path / "none")
    assert empty.empty and results.bench_ratios(empty).empty


def test_recorded_results_in_repo_load():
    df = results.load_results()
    assert len(df) and {"preset", "mode", "per_token_ms"} <= set(df.columns)  # the committed H200 CSVs
    assert not results.ok_results(df)["per_token_ms"].isna().any()


def test_results_folder_resolves_or_says_why(tmp_path, monkeypatch):
    monkeypatch.delenv("VLMDECODE_RESULTS", raising=False)
    assert results.results_dir() == results.REPO_RESULTS and (results.REPO_RESULTS / "README.md").is_file()
    monkeypatch.setenv("VLMDECODE_RESULTS", str(tmp_path))
    assert results.results_dir() == tmp_path and results.load_results().empty  # a folder without CSVs
    missing = tmp_path / "gone"
    monkeypatch.setenv("VLMDECODE_RESULTS", str(missing))
    for read in (results.load_results, results.profile_table, results.gpu_test_log, results.launch_floor):
        with pytest.raises(FileNotFoundError, match=r"gone \(\$VLMDECODE_RESULTS\).*VLMDECODE_RESULTS="):
            read()
    monkeypatch.delenv("VLMDECODE_RESULTS")
    monkeypatch.setattr(results, "REPO_RESULTS", missing)  # a non-editable install: no data/results beside it
    with pytest.raises(FileNotFoundError, match="repository's data/results.*pip install -e"):
        results.load_results()
    with pytest.raises(FileNotFoundError, match="the folder passed"):
        results.load_results(root=missing)


def test_explore_and_plots_import_no_cycle():
    """Every import of vlmdecode.explore.* and vlmdecode.plots, lazy ones (inside functions) included, points
    away from a module that imports it back."""
    import ast
    from pathlib import Path

    pkg = Path(vlmdecode.__file__).parent
    files = {"vlmdecode.plots": pkg / "plots.py"} | {
        f"vlmdecode.explore.{f.stem}": f for f in (pkg / "explore").glob("*.py") if f.stem != "__init__"}
    files["vlmdecode.explore"] = pkg / "explore" / "__init__.py"
    edges = {}
    for name, path in files.items():
        base = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level:
                    mod = ".".join(base.split(".")[: len(base.split(".")) - node.level + 1] + ([mod] if mod else []))
                deps |= {mod} | {f"{mod}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        edges[name] = {d for d in deps if d in files} | ({"vlmdecode.explore"} if any(
            d.startswith("vlmdecode.explore.") for d in deps) else set())
    assert edges["vlmdecode.explore"] == set()  # the package file imports none of its modules
    assert "vlmdecode.explore.results" in edges["vlmdecode.plots"] and "vlmdecode.plots" in edges[
        "vlmdecode.explore.widget"]

    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for d in edges.get(todo.pop(), ()):
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return seen

    assert [m for m in files if m in reach(m)] == []


def test_gpu_test_log(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("tests/test_cuda.py::test_a PASSED   [ 50%]\ntests/test_cuda.py::test_b FAILED [100%]\n"
                   "noise\nFAILED tests/test_cuda.py::test_b - AssertionError\n")
    t = results.gpu_test_log(log)
    assert t.to_dict("list") == {"file": ["tests/test_cuda.py"] * 2, "test": ["test_a", "test_b"],
                                 "outcome": ["PASSED", "FAILED"]}
    assert results.gpu_test_log(tmp_path / "missing.txt").empty
    xml = tmp_path / "run.xml"  # pytest --junitxml: what the recorded run's per-test outcomes are read from
    xml.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest">'
                   '<testcase classname="" name="tests.test_nb"><skipped message="collection skipped"/></testcase>'
                   '<testcase classname="tests.test_cuda" name="test_a[x]" time="1"/>'
                   '<testcase classname="tests.test_cuda" name="test_b"><failure message="boom"/></testcase>'
                   '<testcase classname="tests.test_cuda" name="test_c"><error message="setup"/></testcase>'
                   '<testcase classname="tests.test_cuda" name="test_d"><skipped type="pytest.xfail" message="k"/>'
                   '</testcase><testcase classname="tests.test_cuda" name="test_e"><skipped message="no"/></testcase>'
                   '</testsuite></testsuites>')
    assert results.gpu_test_log(xml).to_dict("list") == {
        "file": ["tests/test_nb.py"] + ["tests/test_cuda.py"] * 5,
        "test": ["(collection)", "test_a[x]", "test_b", "test_c", "test_d", "test_e"],
        "outcome": ["SKIPPED", "PASSED", "FAILED", "ERROR", "XFAIL", "SKIPPED"]}


def test_gpu_available_is_bool():
    assert isinstance(gpu_available(), bool)


def test_predicted_bytes(dirs):
    from vlmdecode.modelfolder import ModelFolder

    f = ModelFolder.load(dirs["gqa"])
    H, V = f.info.hidden_size, f.vocab_size
    assert residency.predicted_bytes(f, "resident", 10) == {"h2d": H * 4 + 16, "d2h": V * 4, "kv": 0}
    assert residency.predicted_bytes(f, "device", 10) == {"h2d": 0, "d2h": 8, "kv": 0}
    i = f.info
    row = 2 * i.num_layers * i.num_kv_heads * i.head_size * 4
    assert residency.predicted_bytes(f, "naive", 10)["kv"] == 2 * f.max_length * row
    o = ModelFolder.load(dirs["onnx"])
    assert residency.predicted_bytes(o, "naive", 10)["kv"] == 10 * row + 11 * row
    with pytest.raises(ValueError):
        residency.predicted_bytes(f, "bogus", 1)


def test_trajectories_parity_and_errors(dirs):
    pipe = vlmdecode.load(dirs["gqa"], "cpu")
    img = demo_image(32)
    t, lg = parity.cpu_trajectory(pipe, PROMPT, img, 8)
    rt, rl = parity.reference_trajectory(dirs["gqa"], PROMPT, img, 8)
    assert t.shape == (8,) and lg.shape == (8, pipe.folder.vocab_size)
    assert t.tolist() == pipe.generate(PROMPT, image=img, max_new_tokens=8, stop=()).tokens
    p = parity.parity_table(cpu=t, reference=rt, genai=None)
    assert list(p.columns) == ["step", "cpu", "reference", "equal"]  # None is left out
    assert p["equal"].all()
    short = parity.parity_table(cpu=t, reference=rt[:5])
    assert short["equal"].tolist() == [True] * 5 + [False] * 3
    mt = parity.margin_table(dirs["gqa"], PROMPT, img, 8)
    assert {"step", "token", "margin"} <= set(mt.columns) and mt["token"].tolist() == rt.tolist()
    g = parity.genai_tokens(dirs["gqa"], pipe, PROMPT, img, 8)
    assert g is None or g == t.tolist()
    err = parity.logit_error(lg, rl)
    assert list(err.columns) == ["step", "max_abs", "rel"] and (err["rel"] < 1e-4).all()
    m = parity.margins(rl)
    assert (m["margin"] >= 0).all() and np.allclose(m["margin"], m["top1"] - m["top2"])


def test_residency_sweep_matches_prediction(dirs):
    df = residency.residency_sweep(dirs, [8, 40], new_tokens=4)
    assert len(df) == 8
    assert (df["h2d_bytes"] == df["pred_h2d"]).all() and (df["d2h_bytes"] == df["pred_d2h"]).all()
    assert (df[df["mode"] == "resident"]["kv_bytes"] == 0).all()
    onnx = df[(df.variant == "onnx") & (df["mode"] == "naive")].sort_values("context")
    assert onnx["kv_bytes"].is_monotonic_increasing
    assert (df["ms_per_step"] > 0).all()


def test_explorer_builds_and_runs(dirs):
    box = widget.explorer(widget.fixture_pipes(dirs["gqa"].parent), image=demo_image(32))
    assert box.widgets["device"].options == (("cpu", "cuda") if gpu_available() else ("cpu",))
    box.widgets["tokens"].value = 5
    recs = box.run()
    assert len(recs) == 5 and box.records is recs and box.error is None
    assert box.widgets["text"].value.startswith("tokens: ") and not box.widgets["button"].disabled
    assert repr(box).startswith("explorer: ")  # what an untrusted notebook shows instead of VBox(children=...


def test_explorer_shows_a_failing_run_as_one_line():
    seen = {}

    def make_pipe(preset, device, mode):
        seen["disabled while running"] = box.widgets["button"].disabled
        raise RuntimeError("no pipeline for you\nsecond line of detail")

    box = widget.explorer(make_pipe)
    assert box.run() == [] and isinstance(box.error, RuntimeError)
    assert seen == {"disabled while running": True} and not box.widgets["button"].disabled
    assert box.widgets["button"].description == "Run"
    (shown,) = box.widgets["output"].outputs
    assert shown["output_type"] == "stream" and shown["text"] == "error: RuntimeError: no pipeline for you\n"
    assert "failed" in box.widgets["text"].value


def test_explorer_offers_only_choices_that_fit():
    from vlmdecode.fixture.config import preset

    box = widget.explorer(lambda *a: None, presets=("tiny", "small"), image=demo_image(32))
    assert box.widgets["preset"].options == ("tiny",)  # small takes 224-px images
    both = widget.explorer(lambda *a: None, presets=("tiny", "small"))  # each preset's own demo image
    assert both.widgets["preset"].options == ("tiny", "small")
    with pytest.raises(ValueError, match=r"64x64 px fits none.*\[32\]"):
        widget.explorer(lambda *a: None, presets=("tiny",), image=demo_image(64))
    assert preset("small").image_size == 224
    if not gpu_available():
        assert "cuda" not in box.widgets["device"].options


def _is_fig(fig):
    return isinstance(fig, matplotlib.figure.Figure) and all(a.get_title() for a in fig.axes)


def test_plots_return_titled_figures(dirs, bench):
    sweep = residency.residency_sweep(dirs, [8, 24], new_tokens=3)
    m = parity.margins(np.random.default_rng(0).normal(size=(6, 20)))
    err = parity.logit_error(np.ones((4, 5)) + 1e-6, np.ones((4, 5)))
    figs = [P.plot_image(demo_image(32)), P.plot_margins(m, threshold=0.01),
            P.plot_logit_error({"cpu": err, "genai": None}), P.plot_bytes_vs_context(sweep),
            P.plot_time_vs_context(sweep), P.plot_recorded_bytes(bench), P.plot_latency_by_mode(bench),
            P.plot_step_times([5.0, 1.0, 1.1])]
    assert all(_is_fig(f) for f in figs)
    assert figs[1].axes[0].get_yscale() == "log" and figs[6].axes[0].get_yscale() == "log"
    labels = figs[6].axes[0].get_legend_handles_labels()[1]
    assert "bandwidth floor" in labels and "genai-graph" not in labels and labels.index("eager") < labels.index("graph")


def test_plots_handle_empty_inputs():
    empty = pd.DataFrame(columns=["preset", "mode", "context", "per_token_ms", "error", "floor_ms",
                                  "h2d_per_step", "d2h_per_step"])
    for f in (P.plot_latency_by_mode(empty), P.plot_recorded_bytes(empty), P.plot_logit_error({}),
              P.plot_step_times([]), P.plot_margins(pd.DataFrame(columns=["step", "margin"]))):
        assert isinstance(f, matplotlib.figure.Figure)


def test_live_step_times_and_step_lines(tmp_path):
    df = widget.live_step_times(tmp_path, max_new_tokens=6)
    assert list(df.columns) == ["label", "step", "ms"]
    assert set(df["label"]) >= {"cpu resident"} and (df["ms"] > 0).all()
    assert df.groupby("label").size().eq(6).all()
    fig = P.plot_step_lines(df)
    assert fig.axes[0].get_title() and fig.axes[0].get_yscale() == "log"
    assert P.plot_step_lines(df.iloc[:0]).axes[0].texts  # "no data" note


def test_every_bench_mode_has_its_own_color():
    from vlmdecode import bench, plots

    modes = set(bench.CUDA_MODES) | set(bench.CPU_MODES)
    assert modes <= set(plots.MODE_COLORS)
    assert len({plots.MODE_COLORS[m] for m in bench.CUDA_MODES}) == len(bench.CUDA_MODES)


def test_layout_table(tmp_path):
    from vlmdecode.fixture import build_fixture, preset

    layouts = ("unfused", "fused", "fused-cuda")
    dirs = {lay: build_fixture(preset("tiny", layout=lay), tmp_path / lay) for lay in layouts}
    t = tables.layout_table(dirs)
    assert list(t.columns) == ["unfused", "fused", "fused-cuda"] and list(t.index[:2]) == ["nodes", "nodes_per_layer"]
    assert list(t.loc["nodes"]) == sorted(t.loc["nodes"], reverse=True)
    assert t.loc["RotaryEmbedding", "unfused"] == 2 * preset("tiny").num_layers
    assert t.loc["RotaryEmbedding", "fused-cuda"] == 0 and t.loc["SkipSimplifiedLayerNormalization", "fused"] > 0
    ops = t.iloc[2:]
    changed = ops.nunique(axis=1) > 1
    assert changed.any() and not changed[changed.idxmin():].any()  # the ops the fusions change come first
    assert all(type(v) is int for v in ops.to_numpy().ravel()) and type(t.loc["nodes", "fused"]) is int


def test_profile_table(tmp_path):
    import json

    path = tmp_path / "p.json"
    path.write_text(json.dumps({"provenance": {}, "copy_bandwidth_GBps": 4000.0,
                                "tiny": {"context": 128, "fused": {"graph_step_device_ms": 0.1, "ops": {}}},
                                "gemma3-1b": {"context": 1024, "unfused": {"graph_step_device_ms": 2.8},
                                              "gemv": {"replay_ms": 0.9}}}))
    t = results.profile_table(path)
    assert t[["preset", "layout", "context", "graph_step_device_ms"]].values.tolist() == [
        ["tiny", "fused", 128, 0.1], ["gemma3-1b", "unfused", 1024, 2.8]]
    assert "ops" not in t and results.profile_table(tmp_path / "missing.json").empty
    recorded = results.profile_table()
    if not recorded.empty:
        assert set(recorded["layout"]) == {"unfused", "fused", "fused-cuda"}


def test_launch_floor_reads_rows_and_fit(tmp_path):
    path = tmp_path / "lf.json"
    path.write_text('{"rows": [{"kernels": 1, "graph_us": 2.0, "us_per_kernel": 2.0}, '
                    '{"kernels": 10, "graph_us": 11.0, "us_per_kernel": 1.1}], "fit_us_per_kernel": 1.0}')
    t = results.launch_floor(path)
    assert list(t["kernels"]) == [1, 10] and t.attrs["us_per_kernel"] == 1.0
    missing = results.launch_floor(tmp_path / "none.json")
    assert missing.empty and np.isnan(missing.attrs["us_per_kernel"])


def test_kernel_groups_shares(tmp_path):
    path = tmp_path / "k.json"
    path.write_text('{"provenance": {}, "p": {"kernel_us": 10.0, "groups": {"matmul": {"kernels": 3, "us": 6.0}, '
                    '"norm": {"kernels": 2, "us": 4.0}}}}')
    t = results.kernel_groups(path)
    assert list(t["group"]) == ["matmul", "norm"] and np.allclose(t["share"], [0.6, 0.4])
    assert results.kernel_groups(tmp_path / "none.json").empty
    assert set(results.kernel_groups()["group"]) >= {"matmul", "norm"}  # the committed H200 profile loads


def test_unmeasured_values_are_never_drawn(bench):
    """genai-graph ran (a latency) but recorded no bytes; device did not run at ctx 1024: neither gets a bar."""
    ran = bench.assign(per_token_ms=bench["per_token_ms"].fillna(3.0), error=np.nan)  # genai rows ran, no bytes
    ran = ran[~((ran["mode"] == "device") & (ran["context"] == 1024))]
    fig = P.plot_recorded_bytes(ran)
    (ax,) = fig.axes
    heights = sorted(round(p.get_height()) for p in ax.patches)
    assert heights == sorted([108] * 4 * 2 + [108])  # 5 modes x 2 contexts with bytes, minus the missing device
    assert "genai-graph" not in fig.legends[0].get_texts()[0].get_text() and all(
        t.get_text() != "genai-graph" for t in fig.legends[0].get_texts())
    assert ax.get_xlabel() == "not measured (no bar): genai-graph"
    table = results.bytes_table(ran)
    assert (table["genai-graph"] == "not measured").all() and table.loc[("p", "unfused", 1024), "device"].item() == "-"
    assert table.loc[("p", "unfused", 128), "graph"].item() == "108"
    fig = P.plot_latency_by_mode(ran)
    bars = [p for p in fig.axes[0].patches]
    assert len(bars) == 6 * 2 - 1 and all(np.isfinite(b.get_height()) for b in bars)


def test_latency_axis_is_linear_when_modes_are_close(bench):
    close = bench[bench["mode"].isin(["graph", "tokenid-graph"])]  # 5 and 4 ms: 25% apart
    fig = P.plot_latency_by_mode(close)
    assert fig.axes[0].get_yscale() == "linear" and fig.axes[0].get_ylim()[0] == 0
    assert P.plot_latency_by_mode(bench).axes[0].get_yscale() == "log"  # naive 50 ms vs device 2 ms
    assert fig.get_suptitle() and fig.axes[0].get_title() == "p, unfused"  # the title once, the panel by preset


def test_recorded_cpu_latency_and_launch_floor_figures():
    cpu = results.load_results("cpu_bench_small.csv")
    fig = P.plot_recorded_cpu_latency(cpu)
    assert {ln.get_label() for ln in fig.axes[0].lines} == {"naive", "naive-concat", "resident", "genai"}
    lf = results.launch_floor()
    fig = P.plot_launch_floor(lf)
    measured, fit = fig.axes[0].lines
    assert len(measured.get_xdata()) == len(lf) and fit.get_label().startswith("fit: ")


def test_native_kernels_reads_the_recorded_file(tmp_path):
    t = results.native_kernels()
    assert {"qkv", "gate_up", "head"} <= set(t["kernel"]) and t.attrs["copy_tb_per_s"] > 0
    assert np.allclose(t["of_copy_bw"], t["TB/s"] / t.attrs["copy_tb_per_s"])
    assert t.set_index("kernel").loc["head", "first_run_us"] > 0  # the first run's time beside the tuned one
    empty = results.native_kernels(tmp_path / "absent.json")
    assert empty.empty and np.isnan(empty.attrs["copy_tb_per_s"])
