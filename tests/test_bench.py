"""Benchmark harness on CPU (tiny preset): rows, files, provenance, floor helpers, compare()."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from vlmdecode import bench, cli, costmodel
from vlmdecode.modelfolder import ModelFolder
from vlmdecode.sessions import make_session, memcpy_nodes, node_assignment


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    df = bench.run_matrix(presets=["tiny"], devices=["cpu"], contexts=[16], new_tokens=8, repeats=2,
                          out_dir=root / "out", root=root / "cache", log=lambda s: None)
    return df, root


def test_matrix_rows_and_files(result):
    df, root = result
    assert set(df["mode"]) == set(bench.CPU_MODES)
    ok = df[df.get("error").isna()] if "error" in df else df
    assert len(ok) == len(bench.CPU_MODES), df.get("error")
    assert (ok["per_token_ms"] > 0).all()
    res = df.set_index("mode")
    assert res.loc["resident", "kv_per_step"] == 0 and res.loc["naive", "kv_per_step"] > 0
    # all modes decode the same greedy tokens from the same prompt
    assert len(set(ok["first_tokens"])) == 1
    saved = json.loads((root / "out" / "bench.json").read_text())
    prov = saved["provenance"]
    assert {"date", "onnxruntime", "git_sha", "vlmdecode", "command"} <= set(prov)
    built = json.loads((root / "cache" / "tiny-gqa-fp32" / "fixture.json").read_text())["content_sha256"]
    assert prov["fixtures"]["tiny/unfused"] == built and len(built) == 64
    assert len(pd.read_csv(root / "out" / "bench.csv")) == len(df)


def test_layouts_tag_and_one_kv_capacity(result, tmp_path):
    df, root = result
    assert (df["layout"] == "unfused").all() and (df["kv_capacity"] == 16 + 8).all()
    rows = bench.run_matrix(presets=["tiny"], devices=["cpu"], modes=["resident", "naive-concat"], contexts=[16, 32],
                            new_tokens=8, repeats=2, layouts=["unfused", "fused", "fused-cuda"], out_dir=tmp_path,
                            root=root / "cache", tag="layouts", log=lambda s: None, peer=False)
    # fused-cuda cannot run on CPU (skipped, not an error row); naive-concat exists for the unfused build only
    assert sorted(set(zip(rows["layout"], rows["mode"]))) == [("fused", "resident"), ("unfused", "naive-concat"),
                                                               ("unfused", "resident")]
    assert "error" not in rows and (rows["kv_capacity"] == 32 + 8).all()
    fused = rows[rows["layout"] == "fused"]
    unfused = rows[(rows["layout"] == "unfused") & (rows["mode"] == "resident")]
    assert list(fused["first_tokens"]) == list(unfused["first_tokens"])  # same model, same greedy tokens
    assert (tmp_path / "layouts.csv").is_file() and (tmp_path / "layouts.json").is_file()


def test_rounds_interleave_scenarios_and_keep_errors_to_their_row(result, tmp_path, monkeypatch):
    _, root = result
    calls = []

    def fake_once(vlmdecode, plan, folder_dir, dev, mode, ctx, loaded, capacity):
        if (mode, ctx) == ("naive", 32):
            raise RuntimeError("cannot load")
        seq = iter([5.0, 1.0, 3.0])  # this scenario's per-round steady ms

        def once():
            calls.append((mode, ctx))
            if (mode, ctx) == ("naive", 16) and calls.count(("naive", 16)) == 2:
                raise ValueError("round 2 failed")
            return dict(steady=next(seq), tail=dict(tokens=8))
        return once

    monkeypatch.setattr(bench, "_once", fake_once)
    df = bench.run_matrix(presets=["tiny"], devices=["cpu"], modes=["resident", "naive"], contexts=[16, 32],
                          new_tokens=8, repeats=3, out_dir=tmp_path, root=root / "cache", log=lambda s: None,
                          progress=False)
    r16, r32, n16 = ("resident", 16), ("resident", 32), ("naive", 16)
    # round 1 forward; round 2 in reverse, where naive/16 fails and the rest go on; round 3 forward without it
    assert calls == [r16, r32, n16, n16, r32, r16, r16, r32]
    df = df.set_index(["mode", "context"])
    assert df.loc[r16, "per_token_ms"] == 3.0 and df.loc[r16, "repeats"] == 3
    assert df.loc[r16, "spread"] == (5.0 - 1.0) / 3.0
    assert df.loc[n16, "error"] == "ValueError: round 2 failed" and df.loc[("naive", 32), "error"].startswith("Runt")


def test_compare_flags_a_slowdown(result, tmp_path):
    df, root = result
    base = root / "out" / "bench.csv"
    slow = df.copy()
    slow.loc[slow["mode"] == "resident", "per_token_ms"] *= 3
    slow.to_csv(tmp_path / "slow.csv", index=False)
    t = bench.compare(base, tmp_path / "slow.csv")
    flagged = t.set_index("mode")["regression"]
    assert flagged["resident"] and not flagged.drop("resident").any()
    noise = pd.concat([df, df.assign(per_token_ms=df["per_token_ms"] * 1.01)])
    noise.to_csv(tmp_path / "noise.csv", index=False)
    t2 = bench.compare(base, tmp_path / "slow.csv", noise_csv=tmp_path / "noise.csv")
    assert (t2["threshold_pct"] >= 5.0).all() and t2.set_index("mode").loc["resident", "regression"]
    assert cli.main(["bench", "compare", str(base), str(tmp_path / "slow.csv")]) == cli.EXIT_REGRESSION
    assert cli.main(["bench", "compare", str(base), str(base)]) == 0


def test_floor_helpers(result):
    _, root = result
    folder = ModelFolder.load(root / "cache" / "tiny-gqa-fp32")
    from vlmdecode.fixture import preset

    cfg = preset("tiny")
    w = costmodel.decoder_weight_bytes(folder)
    assert cfg.n_text_params() * 4 <= w < cfg.n_text_params() * 4 * 1.5  # + rope tables
    per_tok = 2 * cfg.num_kv_heads * cfg.head_dim * 4
    globals_, locals_ = cfg.layer_types.count("global"), cfg.layer_types.count("local")
    assert costmodel.kv_read_bytes(folder, 100) == per_tok * (100 * globals_ + cfg.sliding_window * locals_)


def test_cpu_sessions_report_assignment(result):
    _, root = result
    folder = ModelFolder.load(root / "cache" / "tiny-gqa-fp32")
    sess = make_session(folder.decoder.path, "cpu")
    eps = {ep for ep, _, _ in node_assignment(sess)}
    assert eps == {"CPUExecutionProvider"} and memcpy_nodes(sess) == []


def test_profile_generation_cpu_rows(result):
    import vlmdecode
    from vlmdecode.profiling import profile_generation

    _, root = result
    df = profile_generation(vlmdecode.load(root / "cache" / "tiny-gqa-fp32", "cpu"), context=16, new_tokens=5)
    assert list(df["step"]) == list(range(5)) and (df["ms"] > 0).all() and (df["kv_bytes"] == 0).all()
    assert "device_ms" not in df  # CPU: host time only
