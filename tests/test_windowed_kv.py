"""Windowed KV caches (#11 part 2) on CPU: per-layer capacities, same tokens as the full-length cache.

A folder whose local layers keep a windowed cache (GroupQueryAttention sliding_window_cache=1, as
onnxruntime-genai's builder exports by default; windowed_util makes one from a fixture) decodes to
the tokens of the same weights with full-length caches, past the window and past the window's
capacity, while allocating only the window (+ slack) for those layers. CUDA: tests/test_cuda_exported.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from windowed_util import windowed_copy

import vlmdecode
from vlmdecode.devices import Device
from vlmdecode.fixture import build_fixture, preset
from vlmdecode.kvcache import CPU_WINDOW_SLACK, kv_nbytes, layer_capacities
from vlmdecode.modelfolder import ModelFolder, ModelFolderError
from vlmdecode.processor import demo_image

TINY = preset("tiny")  # 3 layers: 0, 1 local (window 16), 2 global
W = TINY.sliding_window


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return build_fixture(TINY, tmp_path_factory.mktemp("wkv") / "full")


@pytest.fixture(scope="module")
def windowed(full, tmp_path_factory):
    return windowed_copy(full, tmp_path_factory.mktemp("wkv") / "windowed")


def test_folder_reads_windows(windowed, full):
    f = ModelFolder.load(windowed)
    assert f.info.windows == (W, W, None) and f.info.windowed and f.info.cache_slack == 0
    assert ModelFolder.load(full).info.windows == (None, None, None)


def test_layer_capacities_rule():
    cpu, cuda = Device("cpu"), Device("cuda")
    assert layer_capacities((W, None), 256, cuda) == [W, 256]
    assert layer_capacities((W, None), 256, cpu) == [W + CPU_WINDOW_SLACK, 256]
    assert layer_capacities((W, None), 256, cpu, cache_slack=3) == [W + 3, 256]
    assert layer_capacities((W, None), 20, cpu) == [20, 20]  # never past max_length ...
    assert layer_capacities((W, None), 8, cpu) == [W, 8]  # ... and never below the window (onnxruntime: C >= W)
    with pytest.raises(ValueError, match="cache_slack is 3.*CUDA.*exactly the window"):
        layer_capacities((W,), 256, cuda, cache_slack=3)


@pytest.mark.parametrize("with_image", [True, False])
def test_windowed_tokens_equal_full(full, windowed, with_image):
    """Greedy tokens of the windowed export = the full-length export's, over 120 steps (the prompt alone
    is longer than the window; the cache evicts many times over)."""
    image = demo_image(TINY.image_size) if with_image else None
    a = vlmdecode.load(full, "cpu").generate("Describe the image.", image=image, max_new_tokens=120, stop=())
    pipe = vlmdecode.load(windowed, "cpu")
    b = pipe.generate("Describe the image.", image=image, max_new_tokens=120, stop=())
    assert a.prompt_tokens > W and b.tokens == a.tokens
    caps = [W + CPU_WINDOW_SLACK, W + CPU_WINDOW_SLACK, 256]
    assert pipe.decoder.kv.capacities == caps
    assert [k.shape[2] for k in pipe.decoder.kv.keys] == caps
    assert pipe.decoder.kv.nbytes == kv_nbytes(caps, TINY.num_kv_heads, TINY.head_dim, np.float32)


def test_windowed_text_model_and_slack(full, tmp_path):
    """The token-id decoder, and a config cache_slack of 1 (a capacity just above the window)."""
    w = windowed_copy(full / "text", tmp_path / "t", cache_slack=1)
    ids = np.array([[2, *range(20, 60)]], np.int64)
    a = vlmdecode.load(full / "text", "cpu").generate_from_ids(ids, max_new_tokens=60, stop=()).tokens
    pipe = vlmdecode.load(w, "cpu")
    assert pipe.decoder.kv.capacities[:2] == [W + 1, W + 1]
    assert pipe.generate_from_ids(ids, max_new_tokens=60, stop=()).tokens == a


@pytest.mark.parametrize("edit,match", [
    (lambda sw: sw.update(window_size=8), "say layers .* window of 8"),
    (lambda sw: sw.update(layers=[0]), r"say layers \[0\]"),
    (lambda sw: sw.update(slide_key_value_cache=True), "slide_key_value_cache is True"),
    (lambda sw: sw.update(cache_slack=-1), "cache_slack must be >= 0"),
    (lambda sw: sw.update(chunking=1), r"field\(s\) \['chunking'\]"),
])
def test_sliding_window_config_checked(windowed, tmp_path, edit, match):
    import shutil

    work = tmp_path / "m"
    shutil.copytree(windowed, work, ignore=shutil.ignore_patterns("text"))
    cfg = json.loads((work / "genai_config.json").read_text())
    edit(cfg["model"]["decoder"]["sliding_window"])
    (work / "genai_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelFolderError, match=match.replace("say", "says")):
        ModelFolder.load(work)


def test_default_capacity_is_bounded(full, tmp_path):
    """A folder whose max_length is large allocates min(max_length, 4096) by default; max_length= overrides,
    and a prompt past the capacity is an error that names max_length=."""
    import shutil

    from vlmdecode.modelfolder import DEFAULT_CAPACITY

    work = tmp_path / "big"
    shutil.copytree(full / "text", work)
    cfg = json.loads((work / "genai_config.json").read_text())
    cfg["model"]["context_length"] = cfg["search"]["max_length"] = 131072
    (work / "genai_config.json").write_text(json.dumps(cfg))
    folder = ModelFolder.load(work)
    assert folder.capacity() == DEFAULT_CAPACITY == 4096 and folder.capacity(5000) == 5000
    with pytest.raises(ValueError, match=r"max_length=200000 must be an int in \[2, 131072\]"):
        folder.capacity(200000)
    pipe = vlmdecode.load(work, "cpu", max_length=64)
    assert pipe.decoder.max_length == 64 and pipe.decoder.kv.capacities == [64, 64, 64]
    with pytest.raises(ValueError, match="exceeds max_length 64.*larger max_length= .*131072"):
        pipe.generate_from_ids(np.arange(9, 69)[None], max_new_tokens=8)


def test_kv_bytes_results_file_is_the_sizing_code():
    """data/results/kv_bytes_gemma3-4b.json is what scripts/kv_bytes.py computes with kvcache's own functions."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).parent.parent
    spec = importlib.util.spec_from_file_location("kv_bytes", root / "scripts" / "kv_bytes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    committed = json.loads((root / "data" / "results" / "kv_bytes_gemma3-4b.json").read_text())
    assert committed == json.loads(json.dumps(mod.report("cuda")))
    assert committed["full"]["bytes"] == 34 * 2 * 4 * 256 * 2 * 131072  # 17 GiB
    assert committed["windowed"]["capacities"].count(1024) == 29 and committed["global_layers"] == [5, 11, 17, 23, 29]
