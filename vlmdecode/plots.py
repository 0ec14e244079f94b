"""Matplotlib figures for the notebooks; every function returns the Figure (nothing is shown or saved).

    plot_image(img)                       the input image
    plot_margins(df)                      top1 - top2 logit margin per greedy step (log y)
    plot_logit_error(df)                  max|logits - ref| / max|ref| per step (log y)
    plot_bytes_vs_context(df)             measured vs predicted bytes per decode step (log y)
    plot_time_vs_context(df)              ms per decode step vs context
    plot_recorded_bytes(df)               recorded CUDA bytes per step by mode (log y; unmeasured: no bar)
    plot_latency_by_mode(df)              recorded per-token latency bars by mode + floor line
    plot_recorded_cpu_latency(df)         recorded CPU ms per step vs context, one line per mode
    plot_launch_floor(df)                 replayed-graph time vs kernel count, with the fitted slope
    plot_step_times(ms)                   per-step time of one generation
    plot_ttft_phases(df)                  time to first token by phase and mode, ours beside genai's
    plot_kv_per_layer(df)                 KV bytes allocated per layer, windowed vs full (explore.exported)

The native decoder's recorded step (kernel groups, read rates, timeline) has its figures in `plots_native`.

Inputs are the DataFrames of the `vlmdecode.explore` modules. A value that was never measured (NaN) is
never drawn (no bar, no point; never a stand-in such as 0 or 1); empty inputs give an axis with a
"no data" note instead of an error.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .explore.results import MODE_ORDER, ok_results
from .fixture.config import LAYOUTS

MODE_COLORS = {"naive": "tab:red", "naive-concat": "lightcoral", "resident": "tab:green", "eager": "tab:orange",
               "graph": "tab:blue", "device": "tab:purple", "device-session": "plum", "tokenid-graph": "tab:cyan",
               "native": "tab:olive", "genai-eager": "tab:brown", "genai-graph": "tab:gray", "genai": "tab:gray"}


def _fig(figsize=(7, 3.5), ncols: int = 1):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=figsize, squeeze=False)
    return fig, list(axes[0])


def _no_data(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no data: {what}", ha="center", va="center", transform=ax.transAxes)


def _empty(fig, ax, what: str, title: str):
    """fig, shown empty: "no data: what" under the title."""
    _no_data(ax, what)
    ax.set_title(title)
    return fig


def plot_image(img, title: str = "input image"):
    fig, (ax,) = _fig((3, 3))
    arr = np.asarray(img)
    ax.imshow(arr, interpolation="nearest")
    ax.set_title(f"{title} ({arr.shape[1]}x{arr.shape[0]} px)")
    ax.axis("off")
    return fig


def plot_margins(df: pd.DataFrame, title: str = "greedy logit margin (top1 - top2) per step", threshold=None):
    """df: step, margin (explore.parity.margins or margin_table)."""
    fig, (ax,) = _fig()
    fig.set_layout_engine("constrained")
    d = df.dropna(subset=["margin"]) if len(df) else df
    if d.empty:
        _no_data(ax, "margins")
    else:
        ax.bar(d["step"], d["margin"], color="tab:blue", label="margin")
        i = int(d["margin"].idxmin())
        ax.bar([d.loc[i, "step"]], [d.loc[i, "margin"]], color="tab:red", label=f"min {d.loc[i, 'margin']:.3g}")
        if threshold is not None:
            ax.axhline(threshold, color="k", ls="--", label=f"threshold {threshold:.3g}")
        ax.set_yscale("log")
        _legend_outside(fig, [ax])
    ax.set_xlabel("decode step")
    ax.set_ylabel("logit margin (logit units)")
    ax.set_title(title)
    return fig


def plot_logit_error(errors: dict, title: str = "logit error vs float64 reference"):
    """errors: label -> DataFrame(step, rel[, max_abs]) (explore.parity.logit_error)."""
    fig, (ax,) = _fig()
    drawn = False
    for label, df in errors.items():
        if df is None or len(df) == 0:
            continue
        ax.plot(df["step"], df["rel"], marker="o", ms=3, label=label)
        drawn = True
    if drawn:
        ax.set_yscale("log")
        ax.legend()
    else:
        _no_data(ax, "logit errors")
    ax.set_xlabel("decode step")
    ax.set_ylabel("max|logits - ref| / max|ref|")
    ax.set_title(title)
    return fig


def plot_bytes_vs_context(df: pd.DataFrame, title: str = "host<->device bytes per decode step (CPU)"):
    """df: explore.residency.residency_sweep; measured (markers) vs predicted (dashed) h2d + d2h bytes."""
    fig, (ax,) = _fig((8, 3.5))
    fig.set_layout_engine("constrained")
    if df.empty:
        _no_data(ax, "sweep")
    first = True
    for (variant, mode), g in df.groupby(["variant", "mode"], sort=True):
        g = g.sort_values("context")
        c = MODE_COLORS.get(mode)
        ls = "-" if variant == "gqa" else ":"
        ax.plot(g["context"], g["h2d_bytes"] + g["d2h_bytes"], marker="o", color=c, ls=ls,
                label=f"{mode} ({variant}) measured")
        ax.plot(g["context"], g["pred_h2d"] + g["pred_d2h"], marker="x", ms=8, color="k", ls="none",
                label="predicted" if first else None)
        first = False
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens in the KV cache)")
    ax.set_ylabel("bytes per step (h2d + d2h)")
    ax.set_title(title)
    _legend_outside(fig, [ax])
    return fig


def plot_time_vs_context(df: pd.DataFrame, title: str = "time per decode step (CPU, median)"):
    fig, (ax,) = _fig((8, 3.5))
    fig.set_layout_engine("constrained")
    if df.empty:
        _no_data(ax, "sweep")
    for (variant, mode), g in df.groupby(["variant", "mode"], sort=True):
        g = g.sort_values("context")
        ax.plot(g["context"], g["ms_per_step"], marker="o", color=MODE_COLORS.get(mode),
                ls="-" if variant == "gqa" else ":", label=f"{mode} ({variant})")
    ax.set_xlabel("context (tokens in the KV cache)")
    ax.set_ylabel("ms per step")
    ax.set_title(title)
    _legend_outside(fig, [ax])
    return fig


def _ordered_modes(modes) -> list:
    modes = list(dict.fromkeys(modes))
    return sorted(modes, key=lambda m: (MODE_ORDER.index(m) if m in MODE_ORDER else len(MODE_ORDER), m))


def _legend_outside(fig, axes) -> None:
    """One legend for the figure, right of the axes (never over the bars); duplicate labels once."""
    seen = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, h)
    first = {label: i for i, label in enumerate(seen)}  # labels that are not modes keep their drawing order
    labels = sorted(seen, key=lambda m: (MODE_ORDER.index(m) if m in MODE_ORDER else len(MODE_ORDER), first[m]))
    if labels:
        fig.legend([seen[label] for label in labels], labels, loc="outside right upper", fontsize=7)


def _bytes_label(b: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{int(b)} B"


def plot_recorded_bytes(df: pd.DataFrame, title: str = "recorded CUDA bytes per decode step (H200)"):
    """Grouped bars per (preset, context): h2d + d2h bytes per step by mode (log y), each bar labelled.

    A value that was never measured (NaN: the bench counts no bytes for onnxruntime-genai) draws no bar;
    the modes without any measurement are named in a note under the axis. A measured 0 is written as "0 B"
    (a log axis cannot draw it)."""
    d = ok_results(df) if len(df) else df
    fig, (ax,) = _fig((10, 3.8))
    fig.set_layout_engine("constrained")
    if d.empty:
        _no_data(ax, "recorded results")
        return fig
    d = d.assign(total=pd.to_numeric(d["h2d_per_step"], errors="coerce") + pd.to_numeric(d["d2h_per_step"],
                                                                                         errors="coerce"),
                 scenario=d["preset"] + " ctx " + d["context"].astype(int).astype(str))
    scen = list(dict.fromkeys(d.sort_values(["preset", "context"])["scenario"]))
    modes = _ordered_modes(d["mode"])
    measured = [m for m in modes if d[d["mode"] == m]["total"].notna().any()]
    w = 0.8 / max(1, len(measured))
    for j, m in enumerate(measured):
        for i, s in enumerate(scen):
            v = d[(d["scenario"] == s) & (d["mode"] == m)]["total"].median()
            if not np.isfinite(v):
                continue
            x = i + j * w
            if v > 0:
                ax.bar(x, v, w, color=MODE_COLORS.get(m), label=m)
            ax.text(x, max(v, 1), _bytes_label(v), ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(np.arange(len(scen)) + 0.4 - w / 2, scen)
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 30)  # room for the labels
    ax.set_ylabel("bytes per step (h2d + d2h)")
    ax.set_title(title)
    unmeasured = [m for m in modes if m not in measured]
    if unmeasured:
        ax.set_xlabel("not measured (no bar): " + ", ".join(unmeasured))
    _legend_outside(fig, [ax])
    return fig


def plot_latency_by_mode(df: pd.DataFrame, title: str = "per-token decode latency by mode (H200)",
                         log: bool | None = None):
    """One panel per preset: bars per (layout, context) and mode, the bandwidth floor as a black line.

    log: None picks per panel, a log axis only when its bars span more than 20x (else linear from 0, where
    differences of a few percent between modes are visible). A missing value draws no bar."""
    d = ok_results(df) if len(df) else df
    presets = sorted(d["preset"].unique()) if len(d) else []
    fig, axes = _fig((5.8 * max(1, len(presets)) + 1.2, 4), ncols=max(1, len(presets)))
    fig.set_layout_engine("constrained")
    fig.suptitle(title)
    if not presets:
        _no_data(axes[0], "recorded results")
        axes[0].set_title("no data")
        return fig
    order = {name: i for i, name in enumerate(LAYOUTS)}
    for ax, p in zip(axes, presets):
        g = d[d["preset"] == p]
        g = g.assign(layout=g["layout"].fillna("unfused")) if "layout" in g else g.assign(layout="unfused")
        groups = sorted({(lay, c) for lay, c in zip(g["layout"], g["context"])}, key=lambda k: (order.get(k[0], 9), k))
        modes = _ordered_modes(g["mode"])
        w = 0.8 / len(modes)
        for j, m in enumerate(modes):
            for i, (lay, c) in enumerate(groups):
                v = g[(g["layout"] == lay) & (g["context"] == c) & (g["mode"] == m)]["per_token_ms"].median()
                if np.isfinite(v):
                    ax.bar(i + j * w, v, w, color=MODE_COLORS.get(m), label=m)
        if "floor_ms" in g:
            for i, (lay, c) in enumerate(groups):
                f = g[(g["layout"] == lay) & (g["context"] == c)]["floor_ms"].median()
                if np.isfinite(f):
                    ax.hlines(f, i - w / 2, i + 0.8 - w / 2, color="k", lw=2, label="bandwidth floor")
        ms = g["per_token_ms"].astype(float)
        use_log = (ms.max() / ms.min() > 20) if log is None else log
        if use_log:
            ax.set_yscale("log")
        else:
            ax.set_ylim(0, ms.max() * 1.08)
        labels = [f"{lay}\nctx {int(c)}" if g["layout"].nunique() > 1 else f"ctx {int(c)}" for lay, c in groups]
        ax.set_xticks(np.arange(len(groups)) + 0.4 - w / 2, labels, fontsize=7)
        ax.set_ylabel("ms per token (median)" + (", log" if use_log else ""))
        ax.set_title(p if g["layout"].nunique() > 1 else f"{p}, {g['layout'].iloc[0]}")
    _legend_outside(fig, axes)
    return fig


def plot_recorded_cpu_latency(df: pd.DataFrame, title: str = "recorded CPU ms per decode step vs context"):
    """Lines per mode: per_token_ms vs context of recorded CPU runs (e.g. cpu_bench_small.csv), linear y from 0."""
    d = ok_results(df) if len(df) else df
    fig, (ax,) = _fig((7, 3.5))
    fig.set_layout_engine("constrained")
    if d.empty:
        _no_data(ax, "recorded results")
    for m in _ordered_modes(d["mode"]) if len(d) else []:
        g = d[d["mode"] == m].groupby("context")["per_token_ms"].median()
        ax.plot(g.index, g.values, marker="o", color=MODE_COLORS.get(m), label=m)
    ax.set_ylim(bottom=0)
    if len(d):
        ax.set_xscale("log", base=2)
        ticks = sorted(d["context"].astype(int).unique())
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
    ax.set_xlabel("context (tokens in the KV cache)")
    ax.set_ylabel("ms per step (median)")
    ax.set_title(title)
    _legend_outside(fig, [ax])
    return fig


def plot_launch_floor(df: pd.DataFrame, title: str = "replayed CUDA graph: time vs kernels in it (H200)"):
    """df: explore.results.launch_floor (kernels, graph_us; the fit in attrs["us_per_kernel"]): points and
    the fitted slope through the origin."""
    fig, (ax,) = _fig((6, 3.5))
    if df.empty:
        _no_data(ax, "launch floor")
    else:
        ax.plot(df["kernels"], df["graph_us"], "o", color="tab:blue", label="measured")
        slope = df.attrs.get("us_per_kernel", float("nan"))
        if np.isfinite(slope):
            x = np.array([0, df["kernels"].max()])
            ax.plot(x, slope * x, "k--", label=f"fit: {slope:.2f} us per kernel")
        ax.legend()
    ax.set_xlabel("dependent kernels in one graph")
    ax.set_ylabel("graph replay time (us)")
    ax.set_title(title)
    return fig


def plot_step_times(ms, title: str = "per-step time"):
    """ms: per generated token (step 0 includes the prompt); plot_step_lines plus the median decode step."""
    ms = list(ms)
    fig = plot_step_lines(pd.DataFrame({"label": "step time", "step": range(len(ms)), "ms": ms}), title)
    if len(ms) > 1:
        (ax,) = fig.axes
        med = float(np.median(ms[1:]))
        ax.axhline(med, color="k", ls="--", label=f"median decode {med:.3g} ms")
        ax.legend()
    return fig


def plot_step_lines(df: pd.DataFrame, title: str = "per-step decode time (live)"):
    """One line per label: ms per generated token vs step (log scale); df has label, step, ms."""
    fig, (ax,) = _fig()
    if df is None or df.empty:
        _no_data(ax, "step times")
    else:
        for label, g in df.groupby("label", sort=False):
            ax.plot(g["step"], g["ms"], marker=".", label=label)
        ax.set_yscale("log")
        ax.legend()
    ax.set_xlabel("generated token (step 0 includes the prefill)")
    ax.set_ylabel("ms per step")
    ax.set_title(title)
    return fig


PHASE_COLORS = {"processor": "tab:olive", "vision": "tab:pink", "embedding": "tab:cyan", "prefill": "tab:blue",
                "first_pick": "tab:orange", "other": "lightgray"}


def plot_ttft_phases(df: pd.DataFrame, title: str = "time to first token by phase"):
    """df: vlmdecode.ttft rows. One panel per (preset, layout, prompt); a stacked bar per mode: our phases
    (`*_ms`), genai's prompt call (vision + embedding + prefill, drawn as prefill) and first pick; the rest
    of the measured TTFT (host time between phases) as "other"."""
    from .prompt_path import PHASES

    d = df[df["ttft_ms"].notna()] if len(df) and "ttft_ms" in df else pd.DataFrame()
    keys = list(dict.fromkeys(zip(d["preset"], d["layout"], d["prompt"]))) if len(d) else []
    fig, axes = _fig((5 * max(1, len(keys)), 3.8), ncols=max(1, len(keys)))
    if not keys:
        _no_data(axes[0], "TTFT results (not measured)")
        return fig
    for ax, (preset, layout, prompt) in zip(axes, keys):
        g = d[(d["preset"] == preset) & (d["layout"] == layout) & (d["prompt"] == prompt)]
        modes = _ordered_modes(g["mode"])
        bottom = np.zeros(len(modes))
        for phase in (*PHASES, "other"):
            if phase == "other":
                vals = [g[g["mode"] == m]["ttft_ms"].median() for m in modes] - bottom
            else:
                col = f"{phase}_ms"
                vals = np.array([g[g["mode"] == m][col].median() if col in g else np.nan for m in modes])
            vals = np.asarray(vals, float).clip(min=0)
            have = np.flatnonzero(~np.isnan(vals))  # a phase a mode did not measure gets no bar at all
            ax.bar(have, vals[have], bottom=bottom[have], color=PHASE_COLORS[phase], label=phase)
            bottom[have] += vals[have]
        ax.set_xticks(range(len(modes)), modes, rotation=30, fontsize=8)
        n = int(g["prompt_tokens"].median())
        ax.set_title(f"{preset} {layout}, {prompt} prompt ({n} tokens)", fontsize=9)
        ax.set_ylabel("ms")
    axes[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_kv_per_layer(df: pd.DataFrame, title: str = "KV bytes allocated per layer"):
    """Bars of KV bytes (K and V) per decoder layer, one colour per folder (explore.exported.kv_per_layer)."""
    fig, (ax,) = _fig((7, 3.5))
    if df.empty:
        _no_data(ax, "KV sizes")
        return fig
    labels = list(dict.fromkeys(df["folder"]))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        d = df[df["folder"] == label]
        ax.bar(d["layer"] + (i - (len(labels) - 1) / 2) * width, d["bytes"] / 1024, width,
               label=f"{label} ({d['bytes'].sum() / 1024:.0f} KiB)")
    ax.set_xlabel("decoder layer")
    ax.set_ylabel("KiB (K + V)")
    ax.set_xticks(sorted(df["layer"].unique()))
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig
