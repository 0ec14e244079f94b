"""Matplotlib figures of the native decoder's recorded decode step (`vlmdecode.explore.results_native`); every
function returns the Figure (nothing is shown or saved).

    plot_step_groups(df)                  one decode step's kernel time by group, native vs onnxruntime, + floor
    plot_read_rates(df)                   one kernel reading each projection: µs per reader, labelled TB/s
    plot_step_timeline(df)                the replayed native step launch by launch over two layers (resident /
                                          running bars) and each kernel class's span of a layer

The conventions of `vlmdecode.plots` hold (its helpers draw the empty case): a value never measured is never
drawn, and an empty input gives an axis with a "no data" note.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .plots import _empty, _fig

GROUP_COLORS = {"attention": "tab:red", "GEMV / matmul": "tab:blue", "norm": "tab:green", "other": "tab:gray"}


def plot_step_groups(df: pd.DataFrame, title: str = "one decode step by kernel group (H200)"):
    """df: explore.results_native.step_groups: one stacked horizontal bar per decoder (ms of kernel time by
    group, each segment labelled), the floor (attrs floor_ms) as a dashed line and each decoder's replayed
    step (attrs step_ms) as a black tick where it was recorded."""
    fig, (ax,) = _fig((8, 2.8))
    fig.set_layout_engine("constrained")
    if df.empty:
        return _empty(fig, ax, "recorded step groups", title)
    decoders = list(dict.fromkeys(df["decoder"]))
    for i, dec in enumerate(decoders):
        left = 0.0
        for _, r in df[df["decoder"] == dec].iterrows():
            ms = r["us"] * 1e-3
            ax.barh(i, ms, left=left, color=GROUP_COLORS.get(r["group"], "tab:gray"), label=r["group"],
                    edgecolor="white")
            if r["share"] >= 0.06:
                ax.text(left + ms / 2, i, f"{ms:.2f}", ha="center", va="center", fontsize=7, color="white")
            left += ms
        step = df.attrs.get("step_ms", {}).get(dec, float("nan"))
        if np.isfinite(step):
            ax.plot([step, step], [i - 0.42, i + 0.42], color="k", lw=2.5, label="replayed step")
    floor = df.attrs.get("floor_ms", float("nan"))
    if np.isfinite(floor):
        ax.axvline(floor, color="k", ls="--", lw=1.2, label=f"floor {floor:.2f} ms")
    ax.set_yticks(range(len(decoders)), decoders)
    ax.invert_yaxis()
    ax.set_xlabel("ms of kernel time in one step")
    ax.set_title(title)
    handles = dict(zip(*ax.get_legend_handles_labels()[::-1]))  # label -> handle, once each
    order = [g for g in GROUP_COLORS if g in handles] + [k for k in handles if k not in GROUP_COLORS]
    fig.legend([handles[k] for k in order], order, loc="outside right upper", fontsize=7)
    return fig


READER_COLORS = {"plain read": "tab:green", "copy engine": "tab:olive", "register gemv": "tab:blue",
                 "gemv_st (branch)": "tab:gray"}


def plot_read_rates(df: pd.DataFrame, title: str = "one kernel reading each projection's weights (H200)"):
    """df: explore.results_native.read_rates: per projection (rows, largest at the top) one horizontal bar per
    reader, µs per launch, each labelled with its TB/s."""
    fig, (ax,) = _fig((8, 3.6))
    fig.set_layout_engine("constrained")
    if df.empty:
        return _empty(fig, ax, "recorded read rates", title)
    projs = list(dict.fromkeys(df.sort_values("MB")["projection"]))
    readers = [r for r in READER_COLORS if r in set(df["reader"])]
    h = 0.8 / len(readers)
    for j, reader in enumerate(readers):
        for i, proj in enumerate(projs):
            r = df[(df["projection"] == proj) & (df["reader"] == reader)]
            if r.empty:
                continue
            y = i + (j - (len(readers) - 1) / 2) * h
            first = reader not in ax.get_legend_handles_labels()[1]  # a reader measured at some sizes only
            ax.barh(y, r["us"].iloc[0], height=h, color=READER_COLORS[reader], label=reader if first else None)
            ax.text(r["us"].iloc[0], y, f" {r['TB/s'].iloc[0]:.2f} TB/s", va="center", fontsize=6)
    mb = df.drop_duplicates("projection").set_index("projection")["MB"]
    ax.set_yticks(range(len(projs)), [f"{p} ({mb[p]:.1f} MB)" for p in projs])
    ax.set_xlabel("µs per launch (weights past the L2)")
    ax.set_title(title)
    fig.legend(loc="outside right upper", fontsize=7)
    return fig


TIMELINE_COLORS = {"qkv": "tab:blue", "attn": "tab:red", "o": "tab:cyan", "gate_up": "tab:green", "down": "tab:olive",
                   "head": "tab:purple"}


def plot_step_timeline(df: pd.DataFrame, layers=(1, 2), title: str = "inside one replayed native step (H200)"):
    """df: explore.results_native.step_timeline. Left: the launches of `layers`, one row each (first launch at
    the top), a pale bar while its first blocks are resident and waiting (start to first wait release) and a
    solid bar while it runs (release to last block's end), µs from the first of them. Right: each class's span
    of a layer (attrs["classes"]) split into release (the dependency's latency) and body."""
    fig, (ax, bx) = _fig((10, 3.8), ncols=2)
    fig.set_layout_engine("constrained")
    part = df[df["layer"].isin(layers)] if not df.empty else df
    if part.empty:
        _empty(fig, bx, "recorded timeline", "span of a layer by class")
        return _empty(fig, ax, "recorded timeline", title)
    t0 = part["start_us"].min()
    for i, r in enumerate(part.to_dict("records")):
        c = TIMELINE_COLORS.get(r["class"], "tab:gray")
        ax.barh(i, r["wait_us"] - r["start_us"], left=r["start_us"] - t0, color=c, alpha=0.3, height=0.7)
        ax.barh(i, r["end_us"] - r["wait_us"], left=r["wait_us"] - t0, color=c, height=0.7)
    ax.set_yticks(range(len(part)), list(part["launch"]))
    ax.invert_yaxis()
    ax.set_xlabel("µs (pale: resident, waiting on its predecessor; solid: running)")
    ax.set_title(title)
    classes = df.attrs.get("classes", {})
    names = [c for c in TIMELINE_COLORS if c in classes and c != "head"]
    for i, c in enumerate(names):
        rel, body = classes[c]["release"], classes[c]["body"]
        bx.barh(i, rel, color=TIMELINE_COLORS[c], alpha=0.3)
        bx.barh(i, body, left=rel, color=TIMELINE_COLORS[c])
        bx.text(rel + body, i, f" {classes[c]['span']:.1f}", va="center", fontsize=7)
    bx.set_yticks(range(len(names)), names)
    bx.invert_yaxis()
    bx.set_xlabel("µs a layer (pale: release after the predecessor; solid: body)")
    bx.set_title("span of a layer by class (layers 1 .. L-2, medians)")
    return fig


STALL_COLORS = {"long_scoreboard": "tab:red", "short_scoreboard": "tab:orange", "wait": "tab:olive",
                "barrier": "tab:purple", "membar": "tab:pink", "selected": "tab:green", "other": "tab:gray"}


def plot_warp_stalls(df: pd.DataFrame, title: str = "where the warps of one native step wait (H200, Nsight Compute)"):
    """df: explore.results_native.warp_stalls: one stacked horizontal bar per kernel class (the step's order from
    the top), each stall reason's share of its resident warp cycles, labelled with the class's issue-active share."""
    fig, (ax,) = _fig((9, 3.4))
    fig.set_layout_engine("constrained")
    if df.empty:
        return _empty(fig, ax, "recorded warp states", title)
    for i, r in enumerate(df.to_dict("records")):
        left = 0.0
        for reason, color in STALL_COLORS.items():
            ax.barh(i, r[reason], left=left, color=color, label=reason if i == 0 else None)
            left += r[reason]
        ax.text(left, i, f" issue {r['issue %']:.0f}%", va="center", fontsize=7)
    ax.set_yticks(range(len(df)), list(df["class"]))
    ax.invert_yaxis()
    ax.set_xlim(0, 1.15)
    ax.set_xlabel("share of resident warp cycles")
    ax.set_title(title)
    fig.legend(loc="outside right upper", fontsize=7)
    return fig
