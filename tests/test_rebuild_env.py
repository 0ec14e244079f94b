"""scripts/h200_native.py's rebuild_from_env, no GPU (a stand-in decoder, the module cache's drop stubbed): what
each $NATIVE_REBUILD does to the step and to the dropped kernel modules, and that a bad value is refused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import h200_native  # noqa: E402

from vlmdecode.native import kernels as K  # noqa: E402
from vlmdecode.native.shapes import Shapes  # noqa: E402


class Dec:
    def __init__(self):
        self.shapes, self.rebuilt = Shapes(), []

    def rebuild(self, shapes):
        self.rebuilt.append(shapes)
        self.shapes = shapes


@pytest.fixture
def env(monkeypatch):
    dropped = []
    monkeypatch.setattr(K, "drop_module_cache", lambda: dropped.append("module") or ["module"])
    monkeypatch.setattr(h200_native, "HELD_MODULES", [])
    monkeypatch.delenv("NATIVE_SHAPES", raising=False)
    return monkeypatch, dropped


@pytest.mark.parametrize(("value", "drops", "held", "done"), [
    ("", 0, 0, ""), ("same", 0, 0, "same"), ("fresh", 1, 1, "fresh"), ("fresh_free", 1, 0, "fresh_free")])
def test_each_rebuild(env, value, drops, held, done):
    mp, dropped = env
    mp.setenv("NATIVE_REBUILD", value)
    dec = Dec()
    assert h200_native.rebuild_from_env(dec) == done
    assert len(dropped) == drops and len(h200_native.HELD_MODULES) == held
    assert len(dec.rebuilt) == (1 if value else 0)


def test_shapes_alone_rebuild_on_the_cached_module(env):
    mp, dropped = env
    mp.delenv("NATIVE_REBUILD", raising=False)
    mp.setenv("NATIVE_SHAPES", '{"qkv": [8, 2]}')
    dec = Dec()
    assert h200_native.rebuild_from_env(dec) == "shapes"
    assert dec.shapes.qkv == (8, 2) and not dropped


def test_an_unknown_rebuild_is_refused(env):
    mp, _ = env
    mp.setenv("NATIVE_REBUILD", "again")
    with pytest.raises(SystemExit, match="'same', 'fresh' or 'fresh_free', got 'again'"):
        h200_native.rebuild_from_env(Dec())
