"""onnxruntime-genai loads and runs the fixture folders, and agrees with a plain onnxruntime loop.

The reference is written inline: vision -> embedding -> decoder with numpy KV feedback (gqa: one
fixed [1, kvh, max_length, D] buffer per past, the previous present fed back as past; onnx: a
Concat-grown cache), attention_mask [1, current_len], position_ids [[t]], argmax, no eos stop.
Besides the tokens, genai's logits before every step are compared with the reference's (they agree
bit for bit on CPU): equal argmaxes alone could hide a wrong position, mask or image feature.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

og = pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed")
ort = pytest.importorskip("onnxruntime")

from vlmdecode.fixture import build_fixture, preset
from vlmdecode.fixture.config import (
    BOS_ID,
    END_OF_IMAGE_ID,
    IMAGE_TOKEN_ID,
    N_TOKENIZER_TOKENS,
    START_OF_IMAGE_ID,
    START_OF_TURN_ID,
)
from vlmdecode.peer import genai_available, genai_greedy, load_genai_model

STEPS = 16
MAX_LENGTH = 64  # genai's search max_length == the reference's gqa buffer length


def _byte_ids(text: bytes) -> list[int]:
    return [N_TOKENIZER_TOKENS - 256 + b for b in text]


IMAGE_PROMPT = [BOS_ID, START_OF_IMAGE_ID] + [IMAGE_TOKEN_ID] * 4 + [END_OF_IMAGE_ID] + _byte_ids(b"a cat?")
TEXT_PROMPT = [BOS_ID, START_OF_TURN_ID] + _byte_ids(b"hello wor")


@pytest.fixture(scope="module", params=["gqa", "onnx"])
def folder(request, tmp_path_factory):
    cfg = preset("tiny", attention=request.param, seed=0)  # seed 0: its text trajectory reaches <eos>
    assert cfg.n_image_tokens == 4
    return build_fixture(cfg, tmp_path_factory.mktemp(f"peer_{request.param}")), cfg


@pytest.fixture(scope="module")
def pixels():
    return np.random.default_rng(1234).standard_normal((1, 3, 32, 32)).astype(np.float32)


def _session(path):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _reference(folder, cfg, ids, steps, pixel_values=None, token_ids=False):
    """Plain onnxruntime greedy loop: (tokens, logits before each pick)."""
    dec = _session(folder / ("text/decoder.onnx" if token_ids else "decoder.onnx"))
    if not token_ids:
        emb = _session(folder / "embedding.onnx")
        empty = np.zeros((0, cfg.hidden_size), np.float32)
        feats = empty if pixel_values is None else _session(folder / "vision.onnx").run(
            None, {"pixel_values": pixel_values})[0]
    gqa = cfg.attention == "gqa"
    past = {f"past_key_values.{i}.{kv}": np.zeros((1, cfg.num_kv_heads, MAX_LENGTH if gqa else 0, cfg.head_dim),
                                                  np.float32)
            for i in range(cfg.num_layers) for kv in ("key", "value")}
    out_names = [o.name for o in dec.get_outputs()]
    seq, new = list(ids), list(ids)
    tokens, logits = [], []
    for _ in range(steps):
        start = len(seq) - len(new)
        feed = {"attention_mask": np.ones((1, len(seq)), np.int64),
                "position_ids": np.arange(start, len(seq), dtype=np.int64)[None], **past}
        if token_ids:
            feed["input_ids"] = np.array([new], np.int64)
        else:
            feed["inputs_embeds"] = emb.run(None, {"input_ids": np.array([new], np.int64), "image_features": feats})[0]
            feats = empty
        outs = dec.run(None, feed)
        for name, value in zip(out_names[1:], outs[1:]):
            if gqa:
                assert value.shape[2] == MAX_LENGTH  # shared fixed buffer
            past[name.replace("present.", "past_key_values.")] = value
        last = outs[0][0, -1]
        logits.append(last)
        tok = int(last.argmax())
        tokens.append(tok)
        seq.append(tok)
        new = [tok]
    return tokens, logits


def _genai_logits(model_dir, ids, steps, pixel_values=None):
    """genai greedy, reading get_logits() before each generate_next_token.

    eos is moved to an id the fixture never picks here (as vlmdecode.peer does), because genai stops
    at eos and the reference does not; TEXT_PROMPT does reach <eos> (id 1) within 16 steps.
    """
    config = og.Config(str(model_dir))
    vocab = json.loads((model_dir / "genai_config.json").read_text())["model"]["vocab_size"]
    config.overlay(json.dumps({"model": {"eos_token_id": vocab - 1}}))  # scalar: replaces the list
    model = og.Model(config)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=MAX_LENGTH, do_sample=False)
    gen = og.Generator(model, params)
    if pixel_values is None:
        gen.append_tokens(np.array(ids, np.int32))
    else:
        inputs = og.NamedTensors()
        inputs["input_ids"] = np.array([ids], np.int32)
        inputs["pixel_values"] = pixel_values
        inputs["num_image_tokens"] = np.array([ids.count(IMAGE_TOKEN_ID)], np.int64)
        gen.set_inputs(inputs)
    tokens, logits = [], []
    for _ in range(steps):
        logits.append(np.array(gen.get_logits()).reshape(-1))
        gen.generate_next_token()
        tokens.append(int(gen.get_next_tokens()[0]))
    return tokens, logits


def _assert_same(got, ref):
    (gt, gl), (rt, rl) = got, ref
    assert gt == rt
    for step, (a, b) in enumerate(zip(gl, rl)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=f"logits differ at step {step}")


def test_genai_available(monkeypatch):
    """True here (the module imported it); False when the import fails, as on a machine without it."""
    assert genai_available()
    monkeypatch.setitem(sys.modules, "onnxruntime_genai", None)  # makes `import onnxruntime_genai` raise
    assert not genai_available()


def test_genai_config_shape(folder):
    path, cfg = folder
    gc = json.loads((path / "genai_config.json").read_text())
    assert gc["model"]["type"] == "gemma3"
    assert gc["search"]["past_present_share_buffer"] == (cfg.attention == "gqa")
    assert json.loads((path / "text" / "genai_config.json").read_text())["model"]["type"] == "gemma3_text"


def test_text_folder_matches_reference(folder):
    path, cfg = folder
    ref = _reference(path, cfg, TEXT_PROMPT, STEPS, token_ids=True)
    _assert_same(_genai_logits(path / "text", TEXT_PROMPT, STEPS), ref)


def test_vlm_folder_text_only_matches_reference(folder):
    path, cfg = folder
    ref = _reference(path, cfg, TEXT_PROMPT, STEPS)
    _assert_same(_genai_logits(path, TEXT_PROMPT, STEPS), ref)


def test_vlm_folder_image_matches_reference(folder, pixels):
    path, cfg = folder
    ref = _reference(path, cfg, IMAGE_PROMPT, STEPS, pixel_values=pixels)
    # the image must matter, or this test could not tell a skipped vision model
    other = _reference(path, cfg, IMAGE_PROMPT, 1, pixel_values=-pixels)
    assert np.abs(ref[1][0] - other[1][0]).max() > 1e-2
    _assert_same(_genai_logits(path, IMAGE_PROMPT, STEPS, pixel_values=pixels), ref)


def test_peer_wrapper(folder, pixels):
    path, cfg = folder
    ref_img, _ = _reference(path, cfg, IMAGE_PROMPT, STEPS, pixel_values=pixels)
    res = genai_greedy(path, IMAGE_PROMPT, STEPS, pixel_values=pixels, max_length=MAX_LENGTH)
    assert res.tokens == ref_img and not res.finished_early
    assert len(res.step_seconds) == STEPS and all(s >= 0 for s in res.step_seconds)
    assert res.ttft_seconds >= res.prefill_seconds > 0
    # a loaded model is reusable; text/ and the VLM folder without pixels; default max_length
    ref_txt, _ = _reference(path, cfg, TEXT_PROMPT, STEPS, token_ids=True)
    text = load_genai_model(path / "text")
    for _ in range(2):
        assert genai_greedy(text, np.array([TEXT_PROMPT]), STEPS).tokens == ref_txt
    assert genai_greedy(path, TEXT_PROMPT, STEPS).tokens == ref_txt


def test_peer_eos_handling(folder):
    """TEXT_PROMPT reaches <eos> mid-way: genai stops there unless eos is ignored (the default)."""
    path, cfg = folder
    ref, _ = _reference(path, cfg, TEXT_PROMPT, STEPS, token_ids=True)
    first_eos = ref.index(1)  # the test relies on it; the fixture's weights are fixed by its seed
    assert first_eos < STEPS - 1 and cfg.vocab_size - 1 not in ref
    res = genai_greedy(path / "text", TEXT_PROMPT, STEPS)
    assert res.tokens == ref and not res.finished_early
    stopped = genai_greedy(path / "text", TEXT_PROMPT, STEPS, ignore_eos=False)
    assert stopped.finished_early and stopped.tokens == ref[: first_eos + 1]
    assert len(stopped.step_seconds) == len(stopped.tokens)


def test_peer_rejects_bad_input(folder, pixels):
    path, _ = folder
    with pytest.raises(ValueError, match="image soft tokens"):
        genai_greedy(path, TEXT_PROMPT, 2, pixel_values=pixels)
    with pytest.raises(ValueError, match="no vision model"):
        genai_greedy(path / "text", IMAGE_PROMPT, 2, pixel_values=pixels)
    with pytest.raises(ValueError, match="context_length"):
        genai_greedy(path, TEXT_PROMPT, 2, max_length=10_000)
    with pytest.raises(ValueError, match="device"):
        genai_greedy(path, TEXT_PROMPT, 2, device="tpu")


def test_genai_tokenizer_loads(folder):
    path, _ = folder
    tok = og.Tokenizer(og.Model(str(path / "text")))
    ids = tok.encode("<bos>hi")
    assert list(ids) == [BOS_ID] + _byte_ids(b"hi")
    assert tok.decode(np.array(_byte_ids("héllo".encode()), np.int32)) == "héllo"
    assert list(tok.eos_token_ids) == [1, 5] and tok.bos_token_id == BOS_ID
