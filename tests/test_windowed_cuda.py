"""Windowed KV on CUDA (#11 part 2), on the builder's own fp16 CUDA export (run with `pytest -m cuda` on a GPU).

tests/data/exported/builder-text-fp16-cuda keeps windowed caches on its 5 sliding layers (GroupQueryAttention
sliding_window_cache=1, window 12; onnxruntime's CUDA kernel requires capacity == window). Its full-KV twin is
made by windowed_util.full_kv_copy (what the builder writes with windowed_kv_cache=false; checked against the
builder on the fp32 pair in test_windowed_layout). Same weights, so the tokens must be equal, for a prompt longer
than the window (45 ids: full from the first step) and one shorter (5 ids: the window fills while decoding),
and every resident row of a windowed buffer must hold the position kvcache.windowed_rows names.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cuda_gate import require_cuda
from windowed_util import full_kv_copy

pytestmark = pytest.mark.cuda

cupy, ort = require_cuda()

import vlmdecode  # noqa: E402
from vlmdecode.kvcache import windowed_rows  # noqa: E402

WINDOWED = Path(__file__).parent / "data" / "exported" / "builder-text-fp16-cuda"
W, STEPS, MAX_LENGTH = 12, 64, 256
if not WINDOWED.is_dir():
    pytest.skip("tests/data/exported absent", allow_module_level=True)
PROMPT = json.loads((WINDOWED / "expected.json").read_text())["prompt"]["input_ids"]
PROMPTS = {"long": PROMPT, "short": PROMPT[:5]}


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return full_kv_copy(WINDOWED, tmp_path_factory.mktemp("cudawin") / "full-kv")


@pytest.fixture(scope="module")
def reference(full):
    """The full-KV export's eager greedy tokens per prompt."""
    p = vlmdecode.load(full, "cuda", "eager", max_length=MAX_LENGTH)
    assert p.decoder.kv.capacities == [MAX_LENGTH] * 6
    return {k: greedy(p, ids) for k, ids in PROMPTS.items()}


def greedy(pipe, ids) -> list[int]:
    return pipe.generate_from_ids(np.array([ids]), max_new_tokens=STEPS, do_sample=False, stop=()).tokens


@pytest.mark.parametrize("prompt", PROMPTS)
def test_eager_equals_full_kv_and_rows_follow_windowed_rows(full, reference, prompt):
    win = vlmdecode.load(WINDOWED, "cuda", "eager", max_length=MAX_LENGTH)
    assert win.decoder.kv.capacities == [W] * 5 + [MAX_LENGTH]
    assert greedy(win, PROMPTS[prompt]) == reference[prompt]
    ref = vlmdecode.load(full, "cuda", "eager", max_length=MAX_LENGTH)
    assert greedy(ref, PROMPTS[prompt]) == reference[prompt]
    total = len(PROMPTS[prompt]) + STEPS - 1  # the last token is not fed back
    kw = win.decoder.kv.keys[0].array[0, 0].get().astype(np.float32)  # layer 0: rows depend on token + position
    kf = ref.decoder.kv.keys[0].array[0, 0].get().astype(np.float32)
    for r, p in enumerate(windowed_rows(total, W, W)):
        np.testing.assert_allclose(kw[r], kf[p], atol=1e-2, err_msg=f"row {r} should hold position {p}")


@pytest.mark.parametrize("graph_per_generation", [False, True])
@pytest.mark.parametrize("mode", ["graph", "device"])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_captured_modes_equal_full_kv(reference, mode, prompt, graph_per_generation):
    """Graph and device modes on the windowed export: the full-KV tokens, in the first generation (the one that
    captures: onnxruntime executes a new graph id's first Run three times, which corrupted a full window when it
    was a real step; decoders.cuda captures on a harmless step first) and in the second (replays), with one graph
    id for the decoder's life or one per generation. Every real step is a replay (counters)."""
    p = vlmdecode.load(WINDOWED, "cuda", mode, max_length=MAX_LENGTH, graph_per_generation=graph_per_generation)
    for _ in range(2):
        assert greedy(p, PROMPTS[prompt]) == reference[prompt]
    c = p.decoder.counters()
    assert c["eager_steps"] == 0 and c["captured"] == (2 if graph_per_generation else 1)
    assert c["replayed"] == 2 * (STEPS - 1)
    total = len(PROMPTS[prompt]) + STEPS - 1
    assert p.decoder.position == total
    ref = vlmdecode.load(WINDOWED, "cuda", "eager", max_length=MAX_LENGTH)
    greedy(ref, PROMPTS[prompt])
    for a, b in zip(p.decoder.kv.keys + p.decoder.kv.values, ref.decoder.kv.keys + ref.decoder.kv.values):
        np.testing.assert_allclose(a.array.get(), b.array.get(), atol=1e-3)  # the same cache (a bad capture: ~3.5)
