"""The prompt path on CUDA (run with `pytest -m cuda` on a GPU; skipped without one).

pixel_values -> vision -> image_features (device) -> embedding -> the decoder's prefill buffer ->
prefill: the byte counters show only the ids and the pixels going in and no feature or embedding
coming back, the features are cached on the device, the prefill buffers keep their addresses, a
pruned LM head gives the same tokens, and TTFT comes by phase from CUDA events.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_gate import require_cuda

pytestmark = pytest.mark.cuda

cupy, ort = require_cuda()

import vlmdecode  # noqa: E402
from vlmdecode.fixture import build_fixture, preset  # noqa: E402
from vlmdecode.processor import demo_image  # noqa: E402
from vlmdecode.prompt_path import PHASES  # noqa: E402

PROMPT = "Describe the image."
STEPS = 24
TINY = preset("tiny")
MODES = ("eager", "graph", "device")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("prompt_cuda")
    return {name: build_fixture(cfg, root / name) for name, cfg in {
        "fp32": TINY,
        "fp16": TINY.replace(dtype="fp16"),
        "pruned16": TINY.replace(dtype="fp16", prune_lm_head=True),
        "pruned-fusedcuda16": TINY.replace(dtype="fp16", prune_lm_head=True, layout="fused-cuda"),
    }.items()}


@pytest.fixture(scope="module")
def cpu_tokens(folders):
    cpu = vlmdecode.load(folders["fp32"], "cpu")
    return {img: cpu.generate(PROMPT, image=None if img is None else demo_image(32), max_new_tokens=STEPS,
                              stop=()).tokens for img in ("image", None)}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["fp16", "pruned16", "pruned-fusedcuda16"])
def test_prompt_stays_on_the_device(folders, cpu_tokens, name, mode):
    """Step 0 moves in only the ids and the pixels (+ the device loop's 8-byte position), and out only the
    last logits row (host sampling) or the token id (device loop): no features, no embeddings."""
    p = vlmdecode.load(folders[name], "cuda", mode)
    r = p.generate(PROMPT, image=demo_image(32), max_new_tokens=STEPS, stop=())
    assert r.tokens == cpu_tokens["image"]
    S, px, V = r.prompt_tokens, 3 * 32 * 32 * 2, TINY.vocab_size
    want = {"ids:h2d": S * 8, "pixel_values:h2d": px}
    want.update({"position:h2d": 8, "token:d2h": 8} if mode == "device" else {"logits:d2h": V * 2})
    assert dict(p.transfers.steps[0].by_what) == want
    feats = p.image_features(demo_image(32))  # the cached features: no second vision run
    assert p.vision_runs == 1 and len(p.prompt.features) == 1 and isinstance(feats, cupy.ndarray)  # on the device
    assert feats.shape == (TINY.n_image_tokens, TINY.hidden_size)
    text = p.generate(PROMPT, max_new_tokens=STEPS, stop=())
    assert text.tokens == cpu_tokens[None]
    assert "pixel_values:h2d" not in p.transfers.steps[0].by_what


def test_embeddings_written_on_device_equal_the_host_path(folders):
    p = vlmdecode.load(folders["fp16"], "cuda", "graph")
    ids, x = p.prepare(PROMPT, demo_image(32))  # host: vision -> .get() -> embedding.run
    staged = p.prompt.embed(ids, p.image_features(demo_image(32)))
    p.decoder.stream.synchronize()
    got = p.decoder.prefill_buffers.x.array[:, :staged.length].get()
    np.testing.assert_array_equal(got, x)


def test_prefill_buffers_keep_their_addresses(folders):
    p = vlmdecode.load(folders["fp16"], "cuda", "device")
    b = p.decoder.prefill_buffers
    p.generate(PROMPT, image=demo_image(32), max_new_tokens=4, stop=())
    before = (b.x.ptr, b.ids.ptr, b.pos.ptr, b.logits.ptr)
    for seed in range(3):
        p.generate(PROMPT, image=demo_image(32, seed=seed), max_new_tokens=4, stop=())
    assert (b.x.ptr, b.ids.ptr, b.pos.ptr, b.logits.ptr) == before
    pruned = vlmdecode.load(folders["pruned16"], "cuda", "device").decoder
    assert pruned.prefill_buffers.logits is pruned.logits_step  # one row: the step's own (device) buffer
    host = vlmdecode.load(folders["pruned16"], "cuda", "graph")  # the step's logits are mapped host memory:
    host.generate(PROMPT, max_new_tokens=2, stop=())  # the prompt's row gets its own device buffer
    rows = host.decoder.prefill_buffers.logits
    assert host.decoder.logits_step.mapped and not rows.mapped and rows.shape == (1, 1, TINY.vocab_size)


@pytest.mark.parametrize("mode", MODES)
def test_ttft_breakdown_from_cuda_events(folders, mode):
    p = vlmdecode.load(folders["pruned16"], "cuda", mode)
    p.generate(PROMPT, image=demo_image(32), max_new_tokens=2, stop=())  # warm-up
    r = p.generate(PROMPT, image=demo_image(32, seed=5), max_new_tokens=2, stop=())  # a new image
    t = r.ttft_breakdown
    assert list(t) == list(PHASES) and all(v > 0 for v in t.values()), t
    assert sum(t.values()) <= r.ttft_seconds + 1e-4  # events: the last one runs a few us after the host mark
    ids = p.generate_from_ids(p.prepare(PROMPT)[0], max_new_tokens=2, stop=()).ttft_breakdown
    assert ids["vision"] == ids["processor"] == 0.0 and ids["prefill"] > 0


def test_device_mode_embedding_session_and_token_ids(folders, cpu_tokens):
    p = vlmdecode.load(folders["pruned16"], "cuda", "device", embed_via="session")
    assert p.generate(PROMPT, image=demo_image(32), max_new_tokens=STEPS, stop=()).tokens == cpu_tokens["image"]
    text = vlmdecode.load(folders["pruned16"] / "text", "cuda", "graph")
    cpu_text = vlmdecode.load(folders["fp32"] / "text", "cpu").generate(PROMPT, max_new_tokens=STEPS, stop=())
    r = text.generate(PROMPT, max_new_tokens=STEPS, stop=())
    assert r.tokens == cpu_text.tokens
    assert dict(text.transfers.steps[0].by_what) == {"prompt:h2d": r.prompt_tokens * 8,
                                                       "logits:d2h": TINY.vocab_size * 2}
