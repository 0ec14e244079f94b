"""scripts/h200_ab.py's arguments, no GPU: --fresh gives every variant, the base too, NATIVE_REBUILD=fresh (its step
rebuilt on a kernel module loaded afresh), so that a variant with a template instance of its own is not the only
one on a second module; a variant that names its own NATIVE_REBUILD keeps it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import h200_ab  # noqa: E402

VARIANTS = '{"base": {}, "x": {"NATIVE_SHAPES": {"qkv": [8, 2]}}, "y": {"NATIVE_REBUILD": "same"}}'


def test_fresh_gives_every_variant_a_fresh_module():
    name, variants, rounds = h200_ab.parse_args(["ab", VARIANTS, "2", "--fresh"])
    assert (name, rounds) == ("ab", 2)
    assert variants == {"base": {"NATIVE_REBUILD": "fresh"},
                        "x": {"NATIVE_REBUILD": "fresh", "NATIVE_SHAPES": {"qkv": [8, 2]}},
                        "y": {"NATIVE_REBUILD": "same"}}


def test_without_fresh_the_variants_are_as_given():
    name, variants, rounds = h200_ab.parse_args(["ab", VARIANTS])
    assert rounds == 3 and variants["base"] == {} and "NATIVE_REBUILD" not in variants["x"]
    assert h200_ab.variant_env(variants["x"]) == {"NATIVE_SHAPES": '{"qkv": [8, 2]}'}


def test_a_missing_argument_prints_the_usage():
    with pytest.raises(SystemExit, match="Usage"):
        h200_ab.parse_args(["ab"])


STUB = """import json, os, pathlib
ms = {"base": 1.0, "x": 0.9}[os.environ["AB_VARIANT"]]
pathlib.Path(os.environ["OUT"], "h200_native_replay.json").write_text(json.dumps({"replay_ms_median": ms}))
"""


def run_stub(tmp_path, monkeypatch, variants: dict[str, str], rounds: int) -> dict:
    """h200_ab.main over the stub replay (each variant's AB_VARIANT picks its time); the summary it wrote."""
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    h200_ab.main("ab", {v: {"AB_VARIANT": a} for v, a in variants.items()}, rounds=rounds, replay=stub)
    return json.loads((tmp_path / "out" / "ab.json").read_text())


def test_main_writes_the_rounds_done_and_the_ratio_to_the_base(tmp_path, monkeypatch):
    got = run_stub(tmp_path, monkeypatch, {"base": "base", "x": "x"}, rounds=2)
    assert "2 rounds" in got["what"]
    assert [r["round"] for r in got["runs"]["x"]] == [0, 1]
    assert got["median_of_process_medians_ms"] == {"base": 1.0, "x": 0.9}
    assert got["vs_base"]["x"] == pytest.approx(0.9)


def test_a_failing_variant_is_left_out_and_the_others_kept(tmp_path, monkeypatch):
    got = run_stub(tmp_path, monkeypatch, {"base": "base", "bad": "none"}, rounds=1)
    assert got["runs"]["bad"] == [] and got["median_of_process_medians_ms"] == {"base": 1.0}
