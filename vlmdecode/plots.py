"""Matplotlib figures for the notebooks; every function returns the Figure (nothing is shown or saved).

    plot_image(img)                       the input image
    plot_margins(df)                      top1 - top2 logit margin per greedy step (log y)
    plot_logit_error(df)                  max|logits - ref| / max|ref| per step (log y)
    plot_bytes_vs_context(df)             measured vs predicted bytes per decode step (log y)
    plot_time_vs_context(df)              ms per decode step vs context
    plot_recorded_bytes(df)               recorded CUDA bytes per step by mode (log y)
    plot_latency_by_mode(df)              recorded per-token latency bars by mode + floor line (log y)
    plot_step_times(ms)                   per-step time of one generation
    plot_ttft_phases(df)                  time to first token by phase and mode, ours beside genai's

Inputs are the DataFrames of the `vlmdecode.explore` modules; NaN rows are dropped, empty inputs give an axis
with a "no data" note instead of an error.
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
        ax.legend()
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
    fig, (ax,) = _fig()
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
    ax.legend(fontsize=7)
    return fig


def plot_time_vs_context(df: pd.DataFrame, title: str = "time per decode step (CPU, median)"):
    fig, (ax,) = _fig()
    if df.empty:
        _no_data(ax, "sweep")
    for (variant, mode), g in df.groupby(["variant", "mode"], sort=True):
        g = g.sort_values("context")
        ax.plot(g["context"], g["ms_per_step"], marker="o", color=MODE_COLORS.get(mode),
                ls="-" if variant == "gqa" else ":", label=f"{mode} ({variant})")
    ax.set_xlabel("context (tokens in the KV cache)")
    ax.set_ylabel("ms per step")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return fig


def _ordered_modes(modes) -> list:
    modes = list(dict.fromkeys(modes))
    return sorted(modes, key=lambda m: (MODE_ORDER.index(m) if m in MODE_ORDER else len(MODE_ORDER), m))


def plot_recorded_bytes(df: pd.DataFrame, title: str = "recorded CUDA bytes per decode step (H200)"):
    """Grouped bars per (preset, context): h2d + d2h + kv per step, by mode (log y; 0 drawn at 1)."""
    d = ok_results(df) if len(df) else df
    fig, (ax,) = _fig((9, 3.8))
    if d.empty:
        _no_data(ax, "recorded results")
        return fig
    d = d.assign(total=d["h2d_per_step"].fillna(0) + d["d2h_per_step"].fillna(0),
                 scenario=d["preset"] + " ctx " + d["context"].astype(int).astype(str))
    scen = list(dict.fromkeys(d.sort_values(["preset", "context"])["scenario"]))
    modes = _ordered_modes(d["mode"])
    w = 0.8 / len(modes)
    for j, m in enumerate(modes):
        vals = [d[(d["scenario"] == s) & (d["mode"] == m)]["total"].median() for s in scen]
        ax.bar(np.arange(len(scen)) + j * w, np.maximum(np.nan_to_num(vals, nan=0), 1), w,
               color=MODE_COLORS.get(m), label=m)
    ax.set_xticks(np.arange(len(scen)) + 0.4 - w / 2, scen, rotation=20)
    ax.set_yscale("log")
    ax.set_ylabel("bytes per step (h2d + d2h)")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    return fig


def plot_latency_by_mode(df: pd.DataFrame, title: str = "per-token decode latency by mode (H200)"):
    """One panel per preset: bars per context and mode (log y), the bandwidth floor as a black line."""
    d = ok_results(df) if len(df) else df
    presets = sorted(d["preset"].unique()) if len(d) else []
    fig, axes = _fig((5.5 * max(1, len(presets)), 4), ncols=max(1, len(presets)))
    if not presets:
        _no_data(axes[0], "recorded results")
        return fig
    for ax, p in zip(axes, presets):
        g = d[d["preset"] == p]
        g = g.assign(layout=g["layout"].fillna("unfused")) if "layout" in g else g.assign(layout="unfused")
        order = {name: i for i, name in enumerate(LAYOUTS)}
        groups = sorted({(lay, c) for lay, c in zip(g["layout"], g["context"])}, key=lambda k: (order.get(k[0], 9), k))
        modes = _ordered_modes(g["mode"])
        w = 0.8 / len(modes)
        for j, m in enumerate(modes):
            vals = [g[(g["layout"] == lay) & (g["context"] == c) & (g["mode"] == m)]["per_token_ms"].median()
                    for lay, c in groups]
            ax.bar(np.arange(len(groups)) + j * w, vals, w, color=MODE_COLORS.get(m), label=m)
        if "floor_ms" in g:
            for i, (lay, c) in enumerate(groups):
                f = g[(g["layout"] == lay) & (g["context"] == c)]["floor_ms"].median()
                if np.isfinite(f):
                    ax.hlines(f, i - w / 2, i + 0.8 - w / 2, color="k", lw=2,
                              label="bandwidth floor" if i == 0 else None)
        ax.set_xticks(np.arange(len(groups)) + 0.4 - w / 2, [f"{lay}\nctx {int(c)}" for lay, c in groups],
                      fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("ms per token (median)")
        ax.set_title(f"{title}: {p}")
        ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    fig.tight_layout()
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
            vals = np.nan_to_num(np.asarray(vals, float), nan=0.0).clip(min=0)
            ax.bar(range(len(modes)), vals, bottom=bottom, color=PHASE_COLORS[phase], label=phase)
            bottom += vals
        ax.set_xticks(range(len(modes)), modes, rotation=30, fontsize=8)
        n = int(g["prompt_tokens"].median())
        ax.set_title(f"{preset} {layout}, {prompt} prompt ({n} tokens)", fontsize=9)
        ax.set_ylabel("ms")
    axes[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
