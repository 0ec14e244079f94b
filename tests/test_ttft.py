"""vlmdecode.ttft on CPU (tiny): rows per mode and prompt, phases, the same first token as genai, files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from vlmdecode.fixture.config import END_OF_IMAGE_ID, IMAGE_TOKEN_ID, START_OF_IMAGE_ID
from vlmdecode.peer import genai_available
from vlmdecode.ttft import image_prompt_ids, run_ttft


def test_image_prompt_ids():
    ids = image_prompt_ids(256, 16)
    assert ids.shape == (1, 256 + 3 + 16) and ids.dtype == np.int64
    assert (ids == IMAGE_TOKEN_ID).sum() == 256 and ids[0, 1] == START_OF_IMAGE_ID and ids[0, 258] == END_OF_IMAGE_ID


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ttft")
    modes = ["resident", "genai"] if genai_available() else ["resident"]
    df = run_ttft(presets=["tiny"], devices=["cpu"], modes=modes, contexts=[64], repeats=2, root=tmp / "cache",
                  out_dir=tmp / "out", tag="t", log=lambda _: None)
    return df, tmp / "out"


def test_rows_phases_and_files(result):
    df, out = result
    ours = df[df["mode"] == "resident"].set_index("prompt")
    assert set(ours.index) == {"text", "image"} and (ours["repeats"] == 2).all()
    assert ours.loc["text", "prompt_tokens"] == 64 and ours.loc["image", "prompt_tokens"] == 4 + 3 + 16
    assert ours.loc["image", "vision_ms"] > 0 and ours.loc["text", "vision_ms"] == 0  # vision runs every time
    phases = ours[["processor_ms", "vision_ms", "embedding_ms", "prefill_ms", "first_pick_ms"]].sum(axis=1)
    assert (phases <= ours["ttft_ms"]).all() and (ours["prefill_ms"] > 0).all()
    assert (df["kv_capacity"] == 72).all()
    saved = pd.read_csv(out / "t.csv")
    assert len(saved) == len(df) and json.loads((out / "t.json").read_text())["provenance"]["method"]


@pytest.mark.skipif(not genai_available(), reason="onnxruntime-genai is not installed")
def test_same_first_token_as_genai(result):
    df, _ = result
    t = df.pivot(index="prompt", columns="mode", values="first_token")
    assert (t["resident"] == t["genai"]).all()
    g = df[df["mode"] == "genai"]
    assert (g["prefill_ms"] > 0).all() and g["vision_ms"].isna().all()


def test_table_and_plot(result):
    import matplotlib

    matplotlib.use("Agg")
    from vlmdecode import plots
    from vlmdecode.ttft import ttft_table

    df, _ = result
    t = ttft_table(df)
    assert list(t.index.get_level_values("prompt")) == ["image", "text"]
    if "genai" in t:
        assert np.allclose(t["resident/genai"], t["resident"] / t["genai"])
    fig = plots.plot_ttft_phases(df)
    assert len(fig.axes) == 2 and all(ax.patches for ax in fig.axes)
    # genai measures no vision phase: its column holds no vision bar at all (not a zero-height one)
    ax = fig.axes[0]
    modes = [t.get_text() for t in ax.get_xticklabels()]
    vision = next(c for c in ax.containers if c.get_label() == "vision")
    assert modes.index("genai") not in [round(b.get_x() + b.get_width() / 2) for b in vision]
    empty = plots.plot_ttft_phases(df.iloc[0:0])
    assert "not measured" in empty.axes[0].texts[0].get_text()
    assert ttft_table(df.iloc[0:0]).empty


def test_cli_bench_run_ttft(tmp_path, monkeypatch, capsys):
    from vlmdecode.cli import main

    monkeypatch.setenv("VLMDECODE_CACHE", str(tmp_path / "cache"))
    rc = main(["bench", "run", "--ttft", "--presets", "tiny", "--devices", "cpu", "--modes", "resident",
               "--contexts", "32", "--repeats", "1", "--out", str(tmp_path / "out")])
    assert rc == 0
    df = pd.read_csv(tmp_path / "out" / "ttft.csv")  # the default tag of --ttft
    assert list(df["prompt"]) == ["text", "image"] and (df["mode"] == "resident").all()
    assert "ttft.csv" in capsys.readouterr().out
