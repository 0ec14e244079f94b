"""Windowed KV caches and exported folders on CUDA (run on a GPU with `pytest -m cuda`; skipped without one).

onnxruntime's CUDA GroupQueryAttention with sliding_window_cache=1 requires each windowed layer's KV
capacity to equal its window (vlmdecode allocates exactly that: kvcache.layer_capacities). In every CUDA mode
(eager, graph, device) the fixture's fp16 build with windowed local layers (windowed_util, what the builder
exports by default) gives the tokens of the same weights with full-length caches, and the CUDA exports of the
real exporters (tests/data/exported/*, when present) give their expected tokens (onnxruntime-genai-cuda
eager's, committed in expected.json). Graph and device modes capture a windowed decoder's graph on a harmless
step first (decoders.cuda, "Windowed KV": onnxruntime executes a graph id's first Run three times); more on
the builder's export in test_windowed_cuda.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_gate import require_cuda
from exported_util import cases, decode, folders
from windowed_util import windowed_copy

pytestmark = pytest.mark.cuda

cupy, ort = require_cuda()

import vlmdecode  # noqa: E402
from vlmdecode.fixture import build_fixture, preset  # noqa: E402
from vlmdecode.kvcache import kv_nbytes  # noqa: E402
from vlmdecode.processor import demo_image  # noqa: E402

MODES = ["eager", "graph", "device"]
STEPS = 48  # the prompt with an image (45 tokens) is past the window (16) already; 48: tiny_margin_report.json's steps


@pytest.fixture(scope="module")
def fp16(tmp_path_factory):
    root = tmp_path_factory.mktemp("cudawin")
    full = build_fixture(preset("tiny", dtype="fp16"), root / "full")
    return {"full": full, "windowed": windowed_copy(full, root / "windowed")}


@pytest.fixture(scope="module")
def reference(fp16):
    p = vlmdecode.load(fp16["full"], "cuda", "eager")
    return p.generate("Describe the image.", image=demo_image(32), max_new_tokens=STEPS, stop=()).tokens


@pytest.mark.parametrize("mode", MODES)
def test_windowed_fixture_equals_full_kv(fp16, reference, mode):
    p = vlmdecode.load(fp16["windowed"], "cuda", mode)
    cfg = preset("tiny")
    assert p.decoder.kv.capacities == [cfg.sliding_window, cfg.sliding_window, 256]  # == the window: CUDA's rule
    assert p.decoder.kv.nbytes == kv_nbytes(p.decoder.kv.capacities, cfg.num_kv_heads, cfg.head_dim, np.float16)
    for _ in range(2):  # a second generation on the same decoder
        out = p.generate("Describe the image.", image=demo_image(32), max_new_tokens=STEPS, stop=())
        assert out.tokens == reference


@pytest.mark.parametrize("mode", MODES)
def test_windowed_fixture_sampling_equals_full_kv(fp16, mode):
    """Seeded sampling on the windowed build draws what the full-KV build draws in eager mode."""
    kw = {"do_sample": True, "temperature": 0.8, "top_k": 50, "seed": 3, "max_new_tokens": 40, "stop": ()}
    want = vlmdecode.load(fp16["full"], "cuda", "eager").generate("Describe the image.", image=demo_image(32), **kw)
    got = vlmdecode.load(fp16["windowed"], "cuda", mode).generate("Describe the image.", image=demo_image(32), **kw)
    assert got.tokens == want.tokens


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("folder", folders(cuda=True), ids=lambda d: d.name)
def test_exported_cuda_folder(folder, mode):
    """The builder's CUDA exports (fp16 and int4, windowed local layers, q/k norms inside GQA) in every mode:
    tokens = onnxruntime-genai-cuda 0.18 eager's on the same folder (expected.json), which for fp16 are also
    transformers float32's for all 200 steps (int4 differs from step 0: quantization)."""
    (case,) = cases(folder)
    assert case.source == "onnxruntime_genai_cuda_greedy"
    pipe = vlmdecode.load(folder, "cuda", mode)
    assert pipe.decoder.kv.capacities[:5] == [12] * 5  # the window exactly: CUDA GroupQueryAttention's rule
    assert decode(pipe, case) == case.tokens
