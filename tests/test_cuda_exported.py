"""Windowed KV caches and exported folders on CUDA (run on a GPU with `pytest -m cuda`; skipped without one).

onnxruntime's CUDA GroupQueryAttention with sliding_window_cache=1 requires each windowed layer's KV
capacity to equal its window (vlmdecode allocates exactly that: kvcache.layer_capacities). Here, in
the eager, graph and device modes: the fixture's fp16 build with windowed local layers (windowed_util,
what the builder exports by default) gives the tokens of the same weights with full-length caches
(CUDA eager), and the CUDA exports of the real exporters (tests/data/exported/*, when present) give
their expected tokens (the full-KV export's / onnxruntime-genai eager's; not genai's graph mode, which
diverges on windowed exports, see #11).
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
    for _ in range(2):  # a second generation replays the same captured graph
        out = p.generate("Describe the image.", image=demo_image(32), max_new_tokens=STEPS, stop=())
        assert out.tokens == reference


@pytest.mark.parametrize("mode", MODES)
def test_windowed_fixture_sampling_equal_across_modes(fp16, mode):
    """Seeded sampling on the windowed build: eager, graph and device draw from the same logits."""
    kw = {"do_sample": True, "temperature": 0.8, "top_k": 50, "seed": 3, "max_new_tokens": 40, "stop": ()}
    want = vlmdecode.load(fp16["full"], "cuda", mode).generate("Describe the image.", image=demo_image(32), **kw)
    got = vlmdecode.load(fp16["windowed"], "cuda", mode).generate("Describe the image.", image=demo_image(32), **kw)
    assert got.tokens == want.tokens


@pytest.fixture(scope="module")
def genai_eager():
    """onnxruntime-genai-cuda's eager tokens per exported CUDA folder (its graph mode diverges on windowed
    exports, #11), computed here on the same GPU."""
    from vlmdecode.peer import genai_available, genai_greedy

    if not genai_available():
        pytest.skip("onnxruntime-genai is not installed")
    memo = {}

    def run(case):
        if case.folder not in memo:
            ids = np.asarray(case.ids, np.int64)
            memo[case.folder] = genai_greedy(case.folder, ids, len(case.tokens), device="cuda", cuda_graph=False).tokens
        return memo[case.folder]

    return run


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("folder", folders(cuda=True), ids=lambda d: d.name)
def test_exported_cuda_folder(folder, mode, genai_eager):
    """The builder's CUDA exports (fp16 and int4, windowed local layers, q/k norms inside GQA) in every
    mode: tokens = onnxruntime-genai-cuda eager's on the same folder; the first 8 = transformers float32's."""
    (case,) = cases(folder)
    pipe = vlmdecode.load(folder, "cuda", mode)
    assert pipe.decoder.kv.capacities[:5] == [12] * 5  # the window exactly: CUDA GroupQueryAttention's rule
    got = decode(pipe, case)
    assert got == genai_eager(case)
    if "int4" not in folder.name:  # int4 tokens differ from float32 HF's from step 0 (builder-text-int4)
        assert got[:8] == case.tokens[:8]
