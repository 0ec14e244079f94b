"""explore.results_native (native vs onnxruntime step by kernel group) and plots_native.plot_step_groups, and what
scripts/h200_native_ncu.py writes: its summary of an ncu CSV is read back by the reader."""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from vlmdecode import plots_native as P
from vlmdecode.explore import results_native as R
from vlmdecode.explore.results import results_dir

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
          "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def ncu_script():
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location("h200_native_ncu", SCRIPTS / "h200_native_ncu.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(SCRIPTS))


def write_ncu_csv(path: Path, kernels: list[tuple[str, float, float, float]]) -> None:
    """An ncu --csv log: (kernel name, time, DRAM read, DRAM write) per kernel, mixed units as ncu prints them."""
    with open(path, "w", newline="") as f:
        f.write("==PROF== Connected to process 1 (python3)\n")
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(HEADER)
        for i, (name, us, rd, wr) in enumerate(kernels):
            for metric, unit, value in (("gpu__time_duration.sum", "usecond", f"{us:,.3f}"),
                                        ("dram__bytes_read.sum", "Mbyte", f"{rd / 1e6:.6f}"),
                                        ("dram__bytes_write.sum", "byte", f"{wr:,.0f}"),
                                        ("gpc__cycles_elapsed.avg.per_second", "Ghz", "1.98"),
                                        ("lts__t_bytes.sum", "byte", "n/a")):
                w.writerow([i, 1, "python3", "h", name, 1, 7, "(256, 1, 1)", "(132, 1, 1)", 0, "9.0", "", metric,
                            unit, value])


def native_step(layers: int = 2):
    """ncu kernels + launches of a native step of `layers` layers (times and bytes chosen per class)."""
    per = {"qkv": ("void gemv<5, 1, 0, 1>", 6.0, 3.5e6), "attn": ("void attention<256>", 10.0, 1.0e6),
           "o": ("void gemv<4, 1, 0, 1>", 3.0, 2.4e6), "gate_up": ("void gemv<5, 2, 1, 0>", 14.0, 31.9e6),
           "down": ("void gemv<4, 1, 0, 1>", 7.0, 15.9e6)}
    kernels, launches = [], []
    for layer in range(layers):
        for cls, (name, us, nbytes) in per.items():
            kernels.append((f"{name}(const __half *, int)", us, nbytes, 4096.0))
            launches.append({"launch": f"L{layer}.{cls}", "grid": [132, 1, 1], "block": [256, 1, 1],
                             "planned_bytes": int(nbytes)})
    kernels += [("void gemv<5, 2, 2, 1>(const __half *)", 150.0, 604e6, 524288.0), ("advance", 2.0, 3000.0, 2304.0)]
    launches += [{"launch": "head", "grid": [1024, 1, 1], "block": [256, 1, 1], "planned_bytes": 604_000_000},
                 {"launch": "advance", "grid": [1, 1, 1], "block": [1024, 1, 1], "planned_bytes": 14592}]
    return kernels, launches


ORT = [("nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_NNT", 10.0, 4e6, 1e4), ("H256::kernel_mha", 17.0, 1e6, 1e4),
       ("void contrib::UnpackRoPEAppend<__half, __half, 16, 256>", 4.0, 1e5, 1e5),
       ("void onnxruntime::cuApplyLayerNorm<__half, float, __half, 1>", 3.0, 1e4, 1e4),
       ("void onnxruntime::FastGeluKernel2<256>", 2.0, 1e5, 1e5)]


@pytest.fixture
def ncu_root(tmp_path, ncu_script):
    """A results folder holding what scripts/h200_native_ncu.py writes for a synthetic run."""
    kernels, launches = native_step()
    write_ncu_csv(tmp_path / "native.csv", kernels)
    write_ncu_csv(tmp_path / "ort.csv", ORT)
    info = {"native_replay_ms": [0.40, 0.38, 0.39], "ort_graph_step_ms": [0.07, 0.06], "kernels_per_step": 13,
            "pdl": True, "shapes": "Shapes()", "launches": launches, "copy_bandwidth_tb_s": 4.0, "weight_bytes": 1e9,
            "kv_bytes": 1e6, "floor_ms": 0.25}
    result = ncu_script.summarize(info, tmp_path / "native.csv", tmp_path / "ort.csv", None)
    ncu_script.write(result, tmp_path / "out")
    return tmp_path / "out"


def test_step_group_names_native_classes_and_ort_kernels():
    assert [R.step_group("native", c) for c in ("attn", "qkv", "down", "head", "advance")] == [
        "attention", "GEMV / matmul", "GEMV / matmul", "GEMV / matmul", "other"]
    assert [R.step_group("onnxruntime", n) for n, *_ in ORT] == [
        "GEMV / matmul", "attention", "attention", "norm", "other"]
    assert R.step_group("onnxruntime", "void cublasLt::splitKreduce_kernel<32, 16>") == "GEMV / matmul"


def test_ncu_script_summary_per_kernel_and_class(ncu_root, ncu_script):
    data = json.loads((ncu_root / f"{ncu_script.NAME}.json").read_text())
    nat = [r for r in data["rows"] if r["side"] == "native"]
    assert [r["launch"] for r in nat[:5]] == ["L0.qkv", "L0.attn", "L0.o", "L0.gate_up", "L0.down"]
    qkv = nat[0]
    assert qkv["us"] == pytest.approx(6.0) and qkv["dram_bytes"] == pytest.approx(3.5e6 + 4096)
    assert qkv["tb_per_s"] == pytest.approx((3.5e6 + 4096) / 6e-6 / 1e12) and qkv["sm_mhz"] == pytest.approx(1980)
    assert qkv["l2_bytes"] is None and qkv["dram_mhz"] is None  # "n/a" / not in the CSV: never a stand-in
    g = data["native"]["groups"]
    assert g["gate_up"]["kernels"] == 2 and g["gate_up"]["us"] == pytest.approx(28.0)
    assert data["native"]["body_us"] == pytest.approx(data["native"]["kernel_us"] - 2.0)  # advance left out
    assert data["native"]["kernel_sum_over_replay"] == pytest.approx(data["native"]["kernel_us"] * 1e-3 / 0.38)
    assert data["onnxruntime"]["groups"]["matmul"]["kernels"] == 1  # scripts/h200_kernels.GROUPS
    with open(ncu_root / f"{ncu_script.NAME}.csv") as f:
        assert len(list(csv.DictReader(f))) == len(data["rows"]) == 12 + len(ORT)


def test_ncu_script_refuses_a_profile_that_is_not_the_step(tmp_path, ncu_script):
    kernels, launches = native_step()
    write_ncu_csv(tmp_path / "short.csv", kernels[:-1])
    read = ncu_script.h200_kernels.read_ncu_metrics
    with pytest.raises(RuntimeError, match="profiled 11 kernels; the native step launches 12"):
        ncu_script.native_rows(read(tmp_path / "short.csv"), launches)
    swapped = kernels[:1] + [kernels[2], kernels[1]] + kernels[3:]
    write_ncu_csv(tmp_path / "swapped.csv", swapped)
    with pytest.raises(RuntimeError, match="kernel 1: ncu saw 'void gemv<4, 1, 0, 1>.*L0.attn"):
        ncu_script.native_rows(read(tmp_path / "swapped.csv"), launches)


def test_step_groups_from_the_ncu_file(ncu_root):
    t = R.step_groups(ncu_root)
    assert t.attrs["source"] == R.NCU_FILE
    nat = t[t["decoder"] == "native"].set_index("group")
    assert list(nat.index) == ["attention", "GEMV / matmul", "other"]  # in STEP_GROUPS order; no norm kernel
    assert nat.loc["attention", "kernels"] == 2 and nat.loc["attention", "us"] == pytest.approx(20.0)
    assert nat.loc["GEMV / matmul", "kernels"] == 9 and nat.loc["GEMV / matmul", "us"] == pytest.approx(210.0)
    assert np.isclose(t.groupby("decoder")["share"].sum(), 1).all()
    ort = t[t["decoder"] == "onnxruntime"].set_index("group")
    assert ort.loc["attention", "kernels"] == 2 and ort.loc["attention", "us"] == pytest.approx(21.0)
    assert ort.loc["attention", "dram_MB"] == pytest.approx((1e6 + 1e4 + 1e5 + 1e5) / 1e6)
    assert t.attrs["floor_ms"] == 0.25 and t.attrs["step_ms"] == {"native": 0.38, "onnxruntime": 0.06}
    assert t.attrs["kernel_ms"]["native"] == pytest.approx(0.232)


def test_ncu_classes(ncu_root, tmp_path):
    t = R.ncu_classes(ncu_root).set_index("class")
    assert list(t.index) == ["qkv", "attn", "o", "gate_up", "down", "head", "advance"]
    assert t.loc["head", "TB/s"] == pytest.approx((604e6 + 524288) / 150e-6 / 1e12)
    assert t.loc["head", "of_copy_bw"] == pytest.approx(t.loc["head", "TB/s"] / 4.0)
    assert t.loc["gate_up", "us_each"] == pytest.approx(14.0) and t.loc["gate_up", "planned_MB"] == pytest.approx(63.8)
    assert t.loc["attn", "dram_MB"] == pytest.approx(2 * (1e6 + 4096) / 1e6)
    assert t.attrs["replay_ms"] == 0.38 and t.attrs["body_ms"] == pytest.approx(0.230)
    assert np.isnan(t.attrs["greedy_replay_ms"])  # a run without a greedy replay (the synthetic one)
    data = json.loads((ncu_root / R.NCU_FILE).read_text())
    (tmp_path / "greedy").mkdir()
    (tmp_path / "greedy" / R.NCU_FILE).write_text(json.dumps({**data, "native_greedy_replay_ms": 0.36}))
    assert R.ncu_classes(tmp_path / "greedy").attrs["greedy_replay_ms"] == 0.36
    empty = R.ncu_classes(tmp_path)
    assert empty.empty and np.isnan(empty.attrs["replay_ms"]) and np.isnan(empty.attrs["greedy_replay_ms"])


def test_step_groups_from_the_earlier_files(tmp_path):
    """Without the ncu file: native composed from each class alone x its count, onnxruntime's itemised kernels."""
    for name in ("h200_native_kernels.json", "h200_kernels_warm.json", "h200_step_cap1088.json",
                 "h200_native_bench_gemma3-1b.csv"):
        shutil.copy(results_dir() / name, tmp_path / name)
    t = R.step_groups(tmp_path)
    assert R.NCU_FILE not in t.attrs["source"] and np.isnan(t.attrs["step_ms"]["native"])
    nat = t[t["decoder"] == "native"].set_index("group")
    alone = json.loads((tmp_path / "h200_native_kernels.json").read_text())["kernels"]
    assert nat.loc["attention", "kernels"] == 26 and nat.loc["GEMV / matmul", "kernels"] == 4 * 26 + 1
    assert nat.loc["attention", "us"] == pytest.approx(4 * alone["attention global"]["us"]
                                                      + 22 * alone["attention local"]["us"])
    warm = json.loads((tmp_path / "h200_kernels_warm.json").read_text())["kernels_fused-cuda_cap1088_warm"]
    ort = t[t["decoder"] == "onnxruntime"]
    assert ort["kernels"].sum() == warm["kernels"] and ort["us"].sum() == pytest.approx(warm["kernel_us"])
    assert t["dram_MB"].isna().all() and t.attrs["floor_ms"] > 0


def test_step_groups_without_files_is_empty(tmp_path):
    t = R.step_groups(tmp_path)
    assert t.empty and list(t.columns) == R.COLUMNS and np.isnan(t.attrs["floor_ms"])
    fig = P.plot_step_groups(t)
    assert "no data" in fig.axes[0].texts[0].get_text()


def test_plot_step_groups_bars_floor_and_replayed_steps(ncu_root):
    t = R.step_groups(ncu_root)
    fig = P.plot_step_groups(t)
    (ax,) = fig.axes
    assert len(ax.patches) == len(t)  # one segment per (decoder, group)
    widths = sorted(round(p.get_width(), 6) for p in ax.patches)
    assert widths == sorted(round(v * 1e-3, 6) for v in t["us"])
    labels = [h.get_text() for h in fig.legends[0].get_texts()]
    assert labels == ["attention", "GEMV / matmul", "norm", "other", "replayed step", "floor 0.25 ms"]
    ticks = [ln for ln in ax.lines if ln.get_label() == "replayed step"]
    assert sorted(ln.get_xdata()[0] for ln in ticks) == [0.06, 0.38]
    t.attrs["step_ms"] = {"native": float("nan"), "onnxruntime": float("nan")}
    assert not [ln for ln in P.plot_step_groups(t).axes[0].lines if ln.get_label() == "replayed step"]


def _probe(path, sizes):
    path.write_text(json.dumps({"provenance": {}, "sizes": sizes}))


def test_read_rates_pick_each_readers_fastest_config(tmp_path):
    us = lambda u, mb: {"us": u, "tb_s": mb / u}  # noqa: E731
    _probe(tmp_path / R.PROBE_FILE, {
        "o": {"bytes": 2e6, "rd4 x1": us(2.0, 2), "rd8 x4": us(1.5, 2), "bulk8K x1": us(2.5, 2), "gemv": us(3.0, 2)},
        "gate_up": {"bytes": 32e6, "rd4 x8": us(9.0, 32), "bulk32K x2": us(10.0, 32), "gemv": us(12.0, 32)}})
    t = R.read_rates(tmp_path)
    assert t.attrs["source"] == R.PROBE_FILE and set(t["reader"]) == {"plain read", "copy engine", "register gemv"}
    o = t[t["projection"] == "o"].set_index("reader")
    assert o.loc["plain read", "config"] == "rd8 x4" and o.loc["plain read", "us"] == 1.5  # the fastest rd
    assert o.loc["copy engine", "config"] == "bulk8K x1" and o.loc["register gemv", "us"] == 3.0
    # the branch's file adds its gemv_st rows only (its own rd / gemv rows are not mixed in)
    _probe(tmp_path / R.PROBE_BRANCH_FILE, {"gate_up": {"bytes": 32e6, "rd4 x1": us(0.1, 32),
                                                        "gemv_st 8w 2r 32K": us(14.0, 32),
                                                        "gemv_st 16w 2r 32K": us(13.5, 32)}})
    t = R.read_rates(tmp_path)
    g = t[t["projection"] == "gate_up"].set_index("reader")
    assert g.loc["gemv_st (branch)", "config"] == "gemv_st 16w 2r 32K" and g.loc["plain read", "us"] == 9.0
    assert (t["projection"] == "o").sum() == 3 and R.PROBE_BRANCH_FILE in t.attrs["source"]
    fig = P.plot_read_rates(t)
    assert len(fig.axes[0].patches) == len(t) and fig.axes[0].get_title()
    # gemv_st was measured for gate_up only (not the first projection drawn): every reader in the legend once
    assert sorted(x.get_text() for x in fig.legends[0].get_texts()) == sorted(set(t["reader"]))
    assert sorted(round(p.get_width(), 6) for p in fig.axes[0].patches) == sorted(t["us"].round(6))


def test_read_rates_without_the_probe_is_empty(tmp_path):
    t = R.read_rates(tmp_path)
    assert t.empty and t.attrs["source"] == ""
    assert "no data" in P.plot_read_rates(t).axes[0].texts[0].get_text()


def _timeline(path, phases=None):
    launches = []
    t = 0
    for layer in range(4):
        for cls, (lead, wait, body) in {"qkv": (-2, 0.4, 3), "attn": (0.6, 0.2, 6), "o": (-5, 0.3, 1.3),
                                         "gate_up": (-6, 0.4, 11), "down": (-3, 0.5, 5)}.items():
            launches.append({"launch": f"L{layer}.{cls}", "blocks": 16, "start_first": int((t + lead) * 1e3),
                             "start_last": 0, "wait_first": int((t + wait) * 1e3), "wait_median": 0, "wait_last": 0,
                             "end_last": int((t + wait + body) * 1e3)})
            t += wait + body
    launches.append({"launch": "head", "blocks": 396, "start_first": int((t - 2) * 1e3), "start_last": 0,
                     "wait_first": int((t + 0.4) * 1e3), "wait_median": 0, "wait_last": 0,
                     "end_last": int((t + 140) * 1e3)})
    classes = {"qkv": {"lead": -2, "release": 0.4, "body": 3, "span": 3.4}, "head": {"lead": -2, "release": 0.4,
                                                                                      "body": 140, "span": 140.4}}
    data = {"provenance": {}, "launches": launches, "step_us": t + 140, "shapes": "Shapes()",
            "replay_ms_median": {"decoder graph": 0.2, "stamped graph": 0.2}, "classes_us": classes}
    if phases is not None:
        data["attention_phases_by_kind_us"] = phases
    path.write_text(json.dumps(data))


def test_step_timeline_reads_launches_and_classes(tmp_path):
    _timeline(tmp_path / R.TIMELINE_FILE)
    t = R.step_timeline(tmp_path)
    assert len(t) == 21 and t.attrs["source"] == R.TIMELINE_FILE and t.attrs["classes"]["qkv"]["span"] == 3.4
    head = t[t["class"] == "head"].iloc[0]
    assert head["layer"] == -1 and head["blocks"] == 396
    a = t[t["launch"] == "L1.attn"].iloc[0]
    assert a["layer"] == 1 and a["class"] == "attn" and a["end_us"] - a["wait_us"] == pytest.approx(6, abs=1e-3)
    fig = P.plot_step_timeline(t, layers=(1, 2))
    ax, bx = fig.axes[:2]
    assert len(ax.patches) == 2 * 10  # a pale and a solid bar for each of the two layers' 5 launches
    assert [x.get_text() for x in ax.get_yticklabels()][:2] == ["L1.qkv", "L1.attn"]
    assert [x.get_text() for x in bx.get_yticklabels()] == ["qkv"]  # the head is not a layer's class
    assert t.attrs["attention_phases"].empty  # a run without attention_cl's phase stamps
    _timeline(tmp_path / R.TIMELINE_FILE, {"local": {"keys": 1.1, "combine": 0.6}, "global": {"keys": 2.4,
                                                                                              "combine": 0.6}})
    ph = R.step_timeline(tmp_path).attrs["attention_phases"]
    assert list(ph.columns) == ["local", "global"] and ph.loc["keys", "global"] == 2.4


def test_step_time_splits_the_step_into_gaps_and_bodies_by_class(tmp_path):
    _timeline(tmp_path / R.TIMELINE_FILE)  # 4 layers; each launch's wait release comes `wait` after the last end
    t = R.step_time(tmp_path).set_index("class")
    assert list(t.index) == ["qkv", "attn", "o", "gate_up", "down", "head"] and list(t["launches"]) == [4] * 5 + [1]
    assert t.loc["qkv", "gap_us"] == pytest.approx(3 * 0.4, abs=1e-3)  # the first launch has no predecessor
    assert t.loc["attn", "gap_us"] == pytest.approx(4 * 0.2, abs=1e-3) and t.loc["attn", "body_us"] == pytest.approx(24)
    assert t.loc["head", "gap_us"] == pytest.approx(0.4) and t.loc["head", "body_us"] == pytest.approx(139.6)
    # the gaps and bodies tile the step from the first release to the last end
    data = json.loads((tmp_path / R.TIMELINE_FILE).read_text())
    span = (data["launches"][-1]["end_last"] - data["launches"][0]["wait_first"]) / 1e3
    assert t["total_us"].sum() == pytest.approx(span, abs=1e-3) and t["share"].sum() == pytest.approx(1.0)
    (tmp_path / "none").mkdir()
    assert R.step_time(tmp_path / "none").empty and R.step_time(tmp_path / "none").attrs["source"] == ""


def test_layer_budget_sums_plain_reads_and_attention_over_the_layers(tmp_path):
    _timeline(tmp_path / R.TIMELINE_FILE)  # 4 layers; classes: qkv span 3.4, head 140.4 (attn: none recorded)
    data = json.loads((tmp_path / R.TIMELINE_FILE).read_text())
    data["classes_us"].update({c: {"lead": 0, "release": 0.4, "body": s - 0.4, "span": s}
                               for c, s in (("attn", 6.0), ("o", 1.5), ("gate_up", 11.0), ("down", 5.5))})
    (tmp_path / R.TIMELINE_FILE).write_text(json.dumps(data))
    us = lambda u, mb: {"us": u, "tb_s": mb / u}  # noqa: E731
    _probe(tmp_path / R.PROBE_FILE, {p: {"bytes": mb * 1e6, "rd4 x1": us(u, mb), "rd8 x2": us(u + 1, mb),
                                         "gemv": us(u + 2, mb)}
                                     for p, mb, u in (("qkv", 3.5, 1.7), ("o", 2.4, 1.6), ("gate_up", 32, 8.5),
                                                      ("down", 16, 5.0))})
    b = R.layer_budget(tmp_path)
    assert list(b["class"]) == list(R.BUDGET_CLASSES) and b.set_index("class").loc["gate_up", "plain_read_us"] == 8.5
    assert np.isnan(b.set_index("class").loc["attn", "plain_read_us"]) and b.attrs["layers"] == 4
    # 4 x (1.7 + 1.6 + 8.5 + 5.0 + attention's 6.0) + the head's 140.4 us
    assert b.attrs["at_plain_read_ms"] == pytest.approx((4 * 22.8 + 140.4) / 1e3)
    assert b.attrs["head_us"] == 140.4 and R.PROBE_FILE in b.attrs["source"]
    assert np.isnan(b.attrs["bounded_saving_ms"]) and np.isnan(b.attrs["at_plain_read_bounded_ms"])  # no head file
    _bounded(tmp_path / R.BOUNDED_FILE)  # its replayed greedy steps at 1024: full 0.88, bounded 0.83 ms
    b = R.layer_budget(tmp_path)
    assert b.attrs["bounded_saving_ms"] == pytest.approx(0.05) and R.BOUNDED_FILE in b.attrs["source"]
    assert b.attrs["at_plain_read_bounded_ms"] == pytest.approx((4 * 22.8 + 140.4) / 1e3 - 0.05)
    (tmp_path / "none").mkdir()
    assert R.layer_budget(tmp_path / "none").empty  # neither file: nothing stands in


def test_step_timeline_without_the_file_is_empty(tmp_path):
    t = R.step_timeline(tmp_path)
    assert t.empty and t.attrs["source"] == "" and t.attrs["attention_phases"].empty
    assert "no data" in P.plot_step_timeline(t).axes[0].texts[0].get_text()


def _bounded(path):
    ctx = {"context": 1024, "floor_ms": 0.49, "pipeline_ms_per_token": {"native bounded": 0.82, "native full": 0.87,
                                                                          "device": 2.0},
           "greedy_replay_ms": {"bounded": 0.83, "full": 0.88},
           "head_kernels": [{"kernel": "head", "ms": 0.146}, {"kernel": "head_bound", "ms": 0.085},
                            {"kernel": "head_pick", "ms": 0.009}],
           "tokens": {"equal": True, "candidates_last_step": 1}}
    path.write_text(json.dumps({"provenance": {}, "ctx1024": ctx, "ctx4096_error": "x"}))


def test_bounded_head_rows_per_context(tmp_path):
    _bounded(tmp_path / R.BOUNDED_FILE)
    t = R.bounded_head(tmp_path)
    assert list(t["context"]) == [1024] and t.attrs["floor_ms"] == {1024: 0.49}
    row = t.iloc[0]
    assert row["native bounded"] == 0.82 and np.isnan(row["genai graph"]) and row["head_bound_us"] == 85.0
    assert bool(row["tokens_equal"]) and row["candidates"] == 1
    assert R.bounded_head(tmp_path / "none").empty


def test_warp_stalls_shares_and_other(tmp_path):
    classes = {"gate_up": {"launches": 26, "us": 437.0, "dram_tb_s": 1.9, "issue_active_pct": 40.9,
                           "warps_active_pct": 33.9, "stall_share": {"long_scoreboard": 0.46, "short_scoreboard": 0.15,
                                                                     "wait": 0.13, "selected": 0.08, "drain": 0.1,
                                                                     "not_selected": 0.08}},
               "attn": {"launches": 26, "us": 238.0, "dram_tb_s": 0.07, "issue_active_pct": 28.6,
                        "warps_active_pct": 11.9, "stall_share": {"long_scoreboard": 0.5, "membar": 0.5}}}
    (tmp_path / R.STALLS_FILE).write_text(json.dumps({"provenance": {}, "classes": classes}))
    t = R.warp_stalls(tmp_path).set_index("class")
    assert list(t.index) == ["gate_up", "attn"] and t.attrs["source"] == R.STALLS_FILE
    assert t.loc["gate_up", "other"] == pytest.approx(0.18) and t.loc["gate_up", "barrier"] == 0.0
    assert t.loc["attn", "membar"] == 0.5 and t.loc["gate_up", "issue %"] == 40.9
    shares = list(R.STALL_COLUMNS) + ["other"]
    assert np.allclose(t[shares].sum(axis=1), 1.0)
    fig = P.plot_warp_stalls(t.reset_index())
    assert len(fig.axes[0].patches) == 2 * len(shares) and fig.axes[0].get_title()
    assert [x.get_text() for x in fig.axes[0].get_yticklabels()] == ["gate_up", "attn"]
    (tmp_path / "none").mkdir()
    empty = R.warp_stalls(tmp_path / "none")
    assert empty.empty and "no data" in P.plot_warp_stalls(empty).axes[0].texts[0].get_text()


def test_h200_native_parts_selection(ncu_script):
    hn = ncu_script.h200_native
    assert hn.selected_parts(["x"]) is None  # the default run
    assert hn.selected_parts(["x", "--parts", "memory_gemma3_1b,provenance,timing_gemma3_1b_ctx4096"]) == [
        "provenance", "memory_gemma3_1b", "timing_gemma3_1b_ctx4096"]
    for bad in (["--parts", "memory,parity_tiny"], ["--parts"], ["--parts", ""]):
        with pytest.raises(SystemExit, match="--parts takes a comma-separated list of provenance, "):
            hn.selected_parts(["x", *bad])


def test_h200_native_proof_lists_every_disagreement_against_the_margin(ncu_script):
    """A disagreement is allowed only where the reference margin is <= twice the fp16 error."""
    hn = ncu_script.h200_native
    off = np.zeros(4, bool)
    gap = lambda v: float(np.diff(np.sort(v[~off])[-2:])[0])  # noqa: E731
    pick = lambda v: int(np.argmax(v))  # noqa: E731
    ort = [np.array([0, 1, 0.5, 0]), np.array([0, 1, 0.999, 0]), np.array([3, 1, 0, 0.0])]
    nat = [None, np.array([0, 0.999, 1, 0]), np.array([3, 1, 0, 0.0])]
    r = hn.proof([1, 2, 0], nat, ort, None, pick, gap, {"max_logit_err_vs_ort": 0.002})
    assert r["margin_from"] == "onnxruntime" and r["steps_above_2x_error"] == 2 and r["criterion_holds"]
    assert [d["step"] for d in r["disagreements"]] == [1] and r["disagreements"][0]["ort_argmax"] == 1
    assert not hn.proof([1, 2, 1], nat, ort, None, pick, gap, {"max_logit_err_vs_ort": 0.002})["criterion_holds"]
    f64 = [np.array([0, 1, 0.9, 0]), np.array([0, 1, 0.99, 0]), np.array([3, 1, 0, 0.0])]
    r = hn.proof([1, 2, 0], nat, ort, f64, pick, gap, {"max_logit_err_vs_float64": 0.001,
                                                         "ort_max_logit_err_vs_float64": 0.004})
    assert r["fp16_error"] == 0.004 and r["margin_from"] == "float64"
    assert not r["criterion_holds"]  # float64's margin at step 1 (0.01) is above 2 x 0.004: a real disagreement
    r = hn.proof([1, 2, 0], nat, ort, f64, pick, gap, {"max_logit_err_vs_float64": 0.006,
                                                         "ort_max_logit_err_vs_float64": 0.004})
    assert r["criterion_holds"] and r["steps_above_2x_error"] == 2  # 0.01 <= 2 x 0.006: steps 0 and 2 must agree
