"""The prompt path on CPU: reused prefill buffers, the pruned LM head, the prompt's bytes, TTFT by phase.

CUDA's device-resident version of the same path: tests/test_prompt_path_cuda.py.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import vlmdecode
from vlmdecode.fixture import build_fixture, preset
from vlmdecode.fixture.config import IMAGE_TOKEN_ID
from vlmdecode.processor import demo_image
from vlmdecode.prompt_path import LOGITS_ROWS_STEP, PHASES, PhaseTimer, Staged, pruned_lm_head
from vlmdecode.reference import Reference

PROMPT = "Describe the image."
N = 12
TINY = preset("tiny")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("prompt")
    return {name: build_fixture(cfg, root / name) for name, cfg in {
        "full": TINY,
        "pruned": TINY.replace(prune_lm_head=True),
        "pruned-fused": TINY.replace(prune_lm_head=True, layout="fused"),
    }.items()}


@pytest.fixture(scope="module")
def image():
    return demo_image(32)


def test_gemma3_1b_preset_has_gemma3s_image_prompt():
    cfg = preset("gemma3-1b")
    assert cfg.n_image_tokens == 256 and cfg.prune_lm_head  # 256 soft tokens per image, as Gemma 3
    assert not TINY.prune_lm_head
    with pytest.raises(ValueError, match="prune_lm_head"):
        TINY.replace(prune_lm_head="yes")


@pytest.mark.parametrize("name", ["pruned", "pruned-fused"])
def test_pruned_lm_head_declares_one_row_and_keeps_tokens(folders, image, name):
    m = onnx.load(str(folders[name] / "decoder.onnx"))
    dims = [d.dim_value or d.dim_param for d in m.graph.output[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 1, TINY.vocab_size]
    full = vlmdecode.load(folders["full"], "cpu")
    pruned = vlmdecode.load(folders[name], "cpu")
    assert pruned_lm_head(pruned.folder) and not pruned_lm_head(full.folder)
    assert pruned.decoder.prefill_buffers.logits is pruned.decoder.logits_step  # the step's [1,1,V] buffer
    for img in (image, None):
        a = full.generate(PROMPT, image=img, max_new_tokens=N, stop=())
        b = pruned.generate(PROMPT, image=img, max_new_tokens=N, stop=())
        assert a.tokens == b.tokens and len(a.tokens) == N
    # the one row it computes is the float64 reference's last position
    ids, x = pruned.prepare(PROMPT, image)
    ref = Reference.load(folders[name])
    want = ref.decode(ref.embed(ids, ref.vision(pruned.processor.preprocess([image]))), ref.new_cache())[0, -1]
    got = pruned.decoder.prefill(x)
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-4


def test_prefill_buffers_reused_and_logits_grow_to_the_largest_prompt(folders, image):
    pipe = vlmdecode.load(folders["full"], "cpu")
    b = pipe.decoder.prefill_buffers
    addresses = (b.x.ptr, b.ids.ptr, b.pos.ptr)
    assert b.logits is None  # allocated by the first prompt
    short = pipe.generate("hi", max_new_tokens=2, stop=())
    first = b.logits
    assert first.shape == (1, LOGITS_ROWS_STEP, TINY.vocab_size) and short.prompt_tokens < LOGITS_ROWS_STEP
    long_ids = np.array([[2] + [20] * (LOGITS_ROWS_STEP + 5)])
    pipe.generate_from_ids(long_ids, max_new_tokens=2, stop=())
    grown = b.logits
    assert grown.shape[1] == 2 * LOGITS_ROWS_STEP and grown is not first
    r = pipe.generate(PROMPT, image=image, max_new_tokens=N, stop=())
    assert b.logits is grown and (b.x.ptr, b.ids.ptr, b.pos.ptr) == addresses  # no new buffers
    np.testing.assert_array_equal(b.pos.array[0], np.arange(pipe.decoder.max_length))
    # the mask holds exactly the tokens in the cache: set on the device, no upload
    assert int(pipe.decoder.mask.array.sum()) == r.prompt_tokens + N - 1
    again = vlmdecode.load(folders["full"], "cpu").generate(PROMPT, image=image, max_new_tokens=N, stop=())
    assert again.tokens == r.tokens


def test_prompt_bytes_are_ids_and_pixels_only(folders, image):
    """Step 0 moves the ids and the pixels in and the last logits row out: no embedding, mask or position
    bytes; the features stay where the vision model wrote them (a second prompt with the image: ids only)."""
    pipe = vlmdecode.load(folders["full"], "cpu")
    setup = dict(pipe.transfers.setup.by_what)
    assert setup.get("position:h2d") == pipe.decoder.max_length * 8  # uploaded once, at load
    r = pipe.generate(PROMPT, image=image, max_new_tokens=3, stop=())
    S, px = r.prompt_tokens, 3 * TINY.image_size ** 2 * 4
    first = pipe.transfers.steps[0]
    assert dict(first.by_what) == {"ids:h2d": S * 8, "pixel_values:h2d": px, "logits:d2h": TINY.vocab_size * 4}
    assert r.steps[0].h2d_bytes == S * 8 + px
    pipe.generate(PROMPT, image=demo_image(32), max_new_tokens=3, stop=())  # same pixels: cached features
    assert dict(pipe.transfers.steps[0].by_what) == {"ids:h2d": S * 8, "logits:d2h": TINY.vocab_size * 4}
    assert pipe.vision_runs == 1
    x = pipe.prepare(PROMPT, image)[1]
    pipe.generate_from_embeds(x, max_new_tokens=2, stop=())  # the caller's embeddings go in once
    assert dict(pipe.transfers.steps[0].by_what)["prompt:h2d"] == x.nbytes


def test_generate_from_ids_with_pixel_values_equals_generate(folders, image):
    pipe = vlmdecode.load(folders["full"], "cpu")
    ids, _ = pipe.prepare(PROMPT, image)
    px = pipe.processor.preprocess([image])
    a = pipe.generate(PROMPT, image=image, max_new_tokens=N, stop=())
    b = pipe.generate_from_ids(ids, max_new_tokens=N, pixel_values=px, stop=())
    assert a.tokens == b.tokens and b.prompt_tokens == ids.shape[1]
    with pytest.raises(ValueError, match="4 image soft tokens .* 0 rows"):
        pipe.generate_from_ids(ids, max_new_tokens=2)
    with pytest.raises(ValueError, match="2 image soft tokens .* 4 rows"):
        pipe.generate_from_ids(np.array([[2, IMAGE_TOKEN_ID, IMAGE_TOKEN_ID]]), max_new_tokens=2, pixel_values=px)
    text = vlmdecode.load(folders["full"] / "text", "cpu")
    with pytest.raises(ValueError, match="no vision component"):
        text.generate_from_ids(ids, max_new_tokens=2, pixel_values=px)


def test_ttft_breakdown_by_phase(folders, image):
    pipe = vlmdecode.load(folders["full"], "cpu")
    r = pipe.generate(PROMPT, image=demo_image(32, seed=3), max_new_tokens=3, stop=())
    t = r.ttft_breakdown
    assert list(t) == list(PHASES) and all(v > 0 for v in t.values()), t
    assert sum(t.values()) <= r.ttft_seconds
    cached = pipe.generate(PROMPT, image=demo_image(32, seed=3), max_new_tokens=3, stop=()).ttft_breakdown
    assert pipe.vision_runs == 1 and cached["embedding"] > 0  # the image's features were cached: a lookup
    ids = pipe.generate_from_ids(np.array([[2, 20, 30]]), max_new_tokens=2, stop=()).ttft_breakdown
    assert ids["processor"] == ids["vision"] == 0.0 and ids["prefill"] > 0 and ids["first_pick"] > 0
    embeds = pipe.generate_from_embeds(pipe.prepare(PROMPT)[1], max_new_tokens=2, stop=()).ttft_breakdown
    assert embeds["embedding"] == 0.0 and embeds["prefill"] > 0
    text = vlmdecode.load(folders["full"] / "text", "cpu").generate(PROMPT, max_new_tokens=2, stop=())
    assert text.ttft_breakdown["embedding"] == 0.0 and text.ttft_breakdown["processor"] > 0
    recs = list(pipe.stream(PROMPT, max_new_tokens=2, stop=()))
    assert recs and pipe.last_ttft_breakdown["prefill"] > 0  # set before the first token was yielded


def test_phase_timer_rules():
    t = PhaseTimer()
    t.mark("prefill")  # not started: ignored (a decoder driven directly)
    assert t.breakdown() == dict.fromkeys(PHASES, 0.0)
    t.start(0.0)
    with pytest.raises(ValueError, match="unknown TTFT phase 'decode'"):
        t.mark("decode")
    t.mark("prefill")
    t.mark("first_pick")
    out = t.breakdown()
    assert out["prefill"] > 0 and out["first_pick"] >= 0 and out["vision"] == 0.0
    assert t.breakdown() == dict.fromkeys(PHASES, 0.0)  # read once


def test_staged_prompt_bounds(folders):
    pipe = vlmdecode.load(folders["full"], "cpu", max_length=8)
    with pytest.raises(ValueError, match="between 1 and max_length=8"):
        pipe.prompt.embed(np.zeros((1, 9), np.int64))
    staged = pipe.prompt.embed(np.array([[2, 20, 30]]))
    assert staged == Staged(3)
    np.testing.assert_array_equal(pipe.decoder.prefill_buffers.x.array[0, :3],
                                  pipe.embed(np.array([[2, 20, 30]]), None)[0])
    assert pipe.decoder.prefill(staged).shape == (TINY.vocab_size,)


def test_genai_runs_the_pruned_folder_to_the_same_tokens(folders, image):
    from vlmdecode.peer import genai_available, genai_greedy

    if not genai_available():
        pytest.skip("onnxruntime-genai is not installed")
    pipe = vlmdecode.load(folders["pruned"], "cpu")
    ids, _ = pipe.prepare(PROMPT, image)
    ours = pipe.generate(PROMPT, image=image, max_new_tokens=N, stop=()).tokens
    peer = genai_greedy(folders["pruned"], ids, N, pixel_values=pipe.processor.preprocess([image]))
    assert peer.tokens == ours and not peer.finished_early


def test_prompt_sessions_do_not_spin_into_the_prefill(folders):
    """Vision and embedding run once per prompt: their intra-op threads sleep after a run instead of spinning
    on, taking CPU from the decoder's prefill that follows; the decoder's threads spin as before."""
    pipe = vlmdecode.load(folders["full"], "cpu")
    key = "session.intra_op.allow_spinning"
    for sess in (pipe.vision, pipe.embedding):
        assert sess.get_session_options().get_session_config_entry(key) == "0"
    with pytest.raises(RuntimeError, match="does not have configuration"):
        pipe.decoder.session.get_session_options().get_session_config_entry(key)
