"""onnxruntime (CPU) against the float64 reference `vlmdecode.reference`, plus fixture hygiene.

The reference never runs onnxruntime, so agreement here means the ONNX graphs compute what the
reference says: components, caches, masks, positions and sliding windows. The tiny preset is used
throughout (sliding_window=16, layers local, local, global); contexts of 24-40 tokens cross the window.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from vlmdecode.fixture import build_fixture, load_fixture_config, preset
from vlmdecode.fixture.config import BOS_ID, END_OF_IMAGE_ID, IMAGE_TOKEN_ID, START_OF_IMAGE_ID
from vlmdecode.reference import Reference

# fp32 graphs vs float64 (onnxruntime 1.31 CPU): measured worst 8.3e-7 (||a-b||/||b||) and 1.5e-6
# (max abs / max |ref|) over vision, embedding, a 24-token image prefill and 16 decode steps, both variants.
FP32_TOL = 1e-4
# fp16 graphs vs float64 on the same fp16 weights: measured worst 1.2e-3 relative norm and 1.7e-3
# max abs / max |ref| (prefill; gqa and onnx alike; the token-id path 1.3e-3): ~6x margin.
FP16_TOL = 1e-2
# a modification "matters" when it moves the logits by more than this (relative norm); the smallest
# measured is 3.6e-2 (masking key 5, seen by the global layer only), the others 0.3 to 0.7
CHANGED = 1e-2
PROMPT = 24  # > sliding_window: local layers already drop keys during prefill
STEPS = 16  # decode steps after the prompt: 40 positions in all


# ---- helpers ------------------------------------------------------------------------------------
def errors(a, ref) -> tuple[float, float]:
    """(||a - ref|| / ||ref||, max|a - ref| / max|ref|)."""
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref)), float(np.abs(a - ref).max() / np.abs(ref).max())


def rel_change(a, b) -> float:
    return errors(a, b)[0]


def session(path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def no_image(embedding: ort.InferenceSession, cfg) -> np.ndarray:
    """Empty image_features for the embedding model, whatever rank the graph declares."""
    rank = len(embedding.get_inputs()[1].shape)
    return np.zeros((0,) * (rank - 1) + (cfg.hidden_size,), cfg.np_dtype)


class OrtLM:
    """Drives decoder.onnx (or the token-id text/decoder.onnx) on CPU the way a runtime does.

    gqa:  one [1, kvh, max_length, D] buffer per past tensor, bound as both past and present (in
          place, through IOBinding). `past[name]` is a zero-copy numpy view of that buffer. Default
          mask: static [1, max_length] with ones on the valid positions (capture-safe), or
          [1, current length] with static_mask=False.
    onnx: each call's present is fed back as the next past (grows by S); mask [1, T].
    """

    def __init__(self, model_dir, cfg, text: bool = False, static_mask: bool = True):
        self.sess = session(model_dir / ("text/decoder.onnx" if text else "decoder.onnx"))
        self.cfg, self.text, self.length = cfg, text, 0
        self.gqa = cfg.attention == "gqa"
        self.static = static_mask and self.gqa
        self.names = [f"{i}.{kv}" for i in range(cfg.num_layers) for kv in ("key", "value")]
        P = cfg.max_length if self.gqa else 0
        self._bind({n: np.zeros((1, cfg.num_kv_heads, P, cfg.head_dim), cfg.np_dtype) for n in self.names})

    def _bind(self, past: dict[str, np.ndarray]):
        self.past = past
        if self.gqa:  # OrtValues over the numpy memory: ORT writes the new rows into self.past in place
            self.ov = {n: ort.OrtValue.ortvalue_from_numpy(a) for n, a in past.items()}

    def fork(self) -> OrtLM:
        """An independent copy of the cache sharing the session (to try a modified step)."""
        other = copy.copy(self)
        other._bind({n: a.copy() for n, a in self.past.items()})
        return other

    def mask(self, T: int) -> np.ndarray:
        if not self.static:
            return np.ones((1, T), np.int64)
        m = np.zeros((1, self.cfg.max_length), np.int64)
        m[0, :T] = 1
        return m

    def __call__(self, x, mask=None, pos=None) -> np.ndarray:
        """x: embeddings [1,S,H] (or ids [1,S] when text) -> logits [1,S,V]; appends S positions."""
        S = x.shape[1]
        T = self.length + S
        feeds = {
            "input_ids" if self.text else "inputs_embeds": x if self.text else np.asarray(x, self.cfg.np_dtype),
            "attention_mask": self.mask(T) if mask is None else mask,
            "position_ids": (self.length + np.arange(S))[None] if pos is None else pos,
        }
        if self.gqa:
            b = self.sess.io_binding()
            for k, v in feeds.items():
                b.bind_cpu_input(k, v)
            b.bind_output("logits")
            for n in self.names:
                b.bind_ortvalue_input(f"past_key_values.{n}", self.ov[n])
                b.bind_ortvalue_output(f"present.{n}", self.ov[n])
            self.sess.run_with_iobinding(b)
            logits = b.copy_outputs_to_cpu()[0]
        else:
            feeds.update({f"past_key_values.{n}": a for n, a in self.past.items()})
            logits, *presents = self.sess.run(["logits"] + [f"present.{n}" for n in self.names], feeds)
            self._bind(dict(zip(self.names, presents)))
        self.length = T
        return logits


def image_prompt(cfg, rng) -> np.ndarray:
    """[1, PROMPT]: <bos> <start_of_image> soft tokens <end_of_image> then byte tokens."""
    head = [BOS_ID, START_OF_IMAGE_ID] + [IMAGE_TOKEN_ID] * cfg.n_image_tokens + [END_OF_IMAGE_ID]
    return np.array([head + list(rng.integers(9, 265, PROMPT - len(head)))], np.int64)


def vlm_errors(model_dir, static_mask: bool = True) -> dict[str, tuple[float, float]]:
    """vision -> embedding -> prefill -> STEPS greedy steps, ORT and reference side by side.

    Each step feeds the reference's greedy token to both (through each side's embedding model), so
    the two walk the same token stream. Returns the worst errors per stage.
    """
    cfg, ref = load_fixture_config(model_dir), Reference.load(model_dir)
    rng = np.random.default_rng(0)
    px = rng.uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(cfg.np_dtype)
    ids = image_prompt(cfg, rng)
    vision, embedding = session(model_dir / "vision.onnx"), session(model_dir / "embedding.onnx")
    feats = vision.run(None, {"pixel_values": px})[0]
    ref_feats = ref.vision(px)
    out = {"vision": errors(feats.reshape(ref_feats.shape), ref_feats)}
    x = embedding.run(None, {"input_ids": ids, "image_features": feats})[0]
    ref_x = ref.embed(ids, ref_feats)
    out["embedding"] = errors(x, ref_x)
    lm, cache = OrtLM(model_dir, cfg, static_mask=static_mask), ref.new_cache()
    logits = lm(x)
    ref_logits = ref.decode(ref_x, cache, attention_mask=lm.mask(PROMPT))
    out["prefill"] = errors(logits, ref_logits)
    steps = []
    for _ in range(STEPS):
        tok = ref_logits[:, -1:].argmax(-1)  # [1,1]
        x = embedding.run(None, {"input_ids": tok, "image_features": no_image(embedding, cfg)})[0]
        logits = lm(x)
        ref_logits = ref.decode(ref.embed(tok), cache, attention_mask=lm.mask(lm.length))
        steps.append(errors(logits, ref_logits))
    out["decode"] = tuple(np.max(steps, axis=0))
    assert lm.length == cache.length == PROMPT + STEPS
    return out


@pytest.fixture(scope="module")
def build(fixture_folder):
    """build(**preset_overrides) -> folder of preset("tiny", ...), built once per session (conftest)."""
    return lambda **overrides: fixture_folder("tiny", **overrides)


def text_embeds(ref: Reference, n: int, seed: int = 0) -> np.ndarray:
    """[1,n,H] fp32 embeddings of random byte tokens (exact: fp32 rows times sqrt(64) = 8)."""
    return ref.embed_ids(np.random.default_rng(seed).integers(9, 265, (1, n))).astype(np.float32)


def prefilled(model_dir):
    """ORT and reference after the same PROMPT-token text prefill, plus the next token's embedding."""
    cfg, ref = load_fixture_config(model_dir), Reference.load(model_dir)
    x = text_embeds(ref, PROMPT + 1)
    lm, cache = OrtLM(model_dir, cfg), ref.new_cache()
    lm(x[:, :PROMPT])
    ref.decode(x[:, :PROMPT], cache)
    return cfg, ref, lm, cache, x[:, PROMPT:]


def ort_and_ref(lm: OrtLM, ref: Reference, cache, x, mask=None, pos=None):
    """One step on copies of both caches (the originals stay as they are)."""
    return lm.fork()(x, mask, pos), ref.decode(x, copy.deepcopy(cache), mask, pos)


# ---- ORT vs reference ---------------------------------------------------------------------------
VARIANTS = [dict(attention="gqa"), dict(attention="gqa", layout="fused"), dict(attention="onnx")]
VARIANT_IDS = ["gqa", "gqa-fused", "onnx"]


@pytest.mark.parametrize("variant,static_mask", [(VARIANTS[0], True), (VARIANTS[0], False), (VARIANTS[1], True),
                                                 (VARIANTS[1], False), (VARIANTS[2], False)],
                         ids=["gqa-static-mask", "gqa-current-mask", "gqa-fused-static-mask",
                              "gqa-fused-current-mask", "onnx"])
def test_vlm_matches_reference_fp32(build, variant, static_mask):
    errs = vlm_errors(build(**variant), static_mask)
    for stage, (rel, peak) in errs.items():
        assert rel < FP32_TOL and peak < FP32_TOL, (stage, rel, peak)


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
def test_vlm_matches_reference_fp16(build, variant):
    errs = vlm_errors(build(**variant, dtype="fp16"))
    for stage, (rel, peak) in errs.items():
        assert rel < FP16_TOL and peak < FP16_TOL, (stage, rel, peak)


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
def test_token_id_decoder_matches_reference(build, variant):
    d = build(**variant)
    cfg, ref = load_fixture_config(d), Reference.load(d, text_only=True)
    ids = np.random.default_rng(1).integers(9, 265, (1, PROMPT))
    tokens, ref_logits = ref.greedy(ids, STEPS + 1)  # ref_logits[t]: [1,V] that chose tokens[:, t]
    lm = OrtLM(d, cfg, text=True)
    logits = [lm(ids)[:, -1]] + [lm(tokens[:, t : t + 1])[:, -1] for t in range(STEPS)]
    for t, (a, r) in enumerate(zip(logits, ref_logits)):
        assert max(errors(a, r)) < FP32_TOL, t
    assert (np.stack(logits).argmax(-1) == tokens.T).all()


def test_embedding_scatters_images_row_major_over_the_batch(build):
    d = build(attention="gqa")
    cfg, ref = load_fixture_config(d), Reference.load(d)
    n = cfg.n_image_tokens
    rng = np.random.default_rng(2)
    ids = rng.integers(9, 265, (2, 3 * n))
    ids[0, 2 : 2 + n] = IMAGE_TOKEN_ID  # image 0 in row 0, image 1 in row 1
    ids[1, 5 : 5 + n] = IMAGE_TOKEN_ID
    feats = rng.standard_normal((2 * n, cfg.hidden_size)).astype(np.float32)
    embedding = session(d / "embedding.onnx")
    feats_in = feats.reshape((-1,) + tuple(embedding.get_inputs()[1].shape[1:-1]) + (cfg.hidden_size,))
    x = embedding.run(None, {"input_ids": ids, "image_features": feats_in})[0]
    assert max(errors(x, ref.embed(ids, feats))) < 1e-6
    np.testing.assert_array_equal(x[1, 5 : 5 + n], feats[n:])


# ---- the mask, positions and cache matter, exactly as the reference says ------------------------
def test_masking_a_past_key_onnx(build):
    """onnx variant: mask[0, j] = 0 removes key j from every query's softmax."""
    d = build(attention="onnx")
    cfg, ref, lm, cache, x = prefilled(d)
    T = PROMPT + 1
    base, ref_base = ort_and_ref(lm, ref, cache, x)
    for j in (5, 20):  # 5: only the global layer still sees it from query 24; 20: every layer does
        mask = np.ones((1, T), np.int64)
        mask[0, j] = 0
        got, want = ort_and_ref(lm, ref, cache, x, mask)
        assert rel_change(got, base) > CHANGED, j
        assert max(errors(got, want)) < FP32_TOL, j
        assert errors(got - base, want - ref_base)[0] < 1e-3, j  # the change itself (measured 7e-6)
    # left padding in a prefill: the padded keys drop out of every query (padded rows average all keys)
    xs, pad = text_embeds(ref, 10), np.ones((1, 10), np.int64)
    pad[0, :3] = 0
    got, want = OrtLM(d, cfg)(xs, pad), ref.decode(xs, ref.new_cache(), pad)
    assert max(errors(got, want)) < FP32_TOL
    assert rel_change(got[:, 3:], OrtLM(d, cfg)(xs)[:, 3:]) > CHANGED


def test_gqa_mask_is_a_count(build):
    """gqa variant: only sum(mask) matters. Moving a zero leaves logits bit-identical; one 1 fewer makes
    seqlens_k one smaller, so the new token overwrites buffer row T-2 and queries rows <= T-2."""
    _, ref, lm, cache, x = prefilled(build(attention="gqa"))
    T = PROMPT + 1
    base, ref_base = ort_and_ref(lm, ref, cache, x, lm.mask(T))
    moved = lm.mask(T)
    moved[0, 5], moved[0, 100] = 0, 1  # same count, different places
    got, want = ort_and_ref(lm, ref, cache, x, moved)
    np.testing.assert_array_equal(got, base)
    np.testing.assert_array_equal(want, ref_base)
    fewer = lm.mask(T - 1)
    got, want = ort_and_ref(lm, ref, cache, x, fewer, np.array([[T - 1]]))
    assert rel_change(got, base) > CHANGED
    assert max(errors(got, want)) < FP32_TOL


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
def test_position_ids_matter(build, variant):
    """Rotary is relative: shifting every position by 5 changes nothing (up to rounding), while
    shifting only the new token's position changes its logits, as the reference predicts."""
    d = build(**variant)
    cfg, ref, lm, cache, x = prefilled(d)
    T = PROMPT + 1
    base, _ = ort_and_ref(lm, ref, cache, x)
    got, want = ort_and_ref(lm, ref, cache, x, pos=np.array([[T - 1 + 5]]))
    assert rel_change(got, base) > CHANGED
    assert max(errors(got, want)) < FP32_TOL
    # the whole sequence shifted: prefill and the next step at positions + 5
    shifted, ref_shifted = OrtLM(d, cfg), ref.new_cache()
    xs = text_embeds(ref, PROMPT + 1)  # the same tokens as prefilled()
    shifted(xs[:, :PROMPT], pos=5 + np.arange(PROMPT)[None])
    ref.decode(xs[:, :PROMPT], ref_shifted, position_ids=5 + np.arange(PROMPT)[None])
    got, want = ort_and_ref(shifted, ref, ref_shifted, x, pos=np.array([[T - 1 + 5]]))
    assert rel_change(got, base) < 1e-5  # fp32 rounding of different angles only
    assert rel_change(want, ref.decode(x, copy.deepcopy(cache))) < 1e-12


@pytest.mark.parametrize("attention", ["gqa", "onnx"])
def test_corrupting_one_kv_row(build, attention):
    """Overwrite layer 0's key at row j: inside the local window it changes the logits exactly as the
    reference says; outside (j <= T-1-sliding_window) layer 0 never reads it."""
    cfg, ref, lm, cache, x = prefilled(build(attention=attention))
    T = PROMPT + 1
    row = np.random.default_rng(3).standard_normal((cfg.num_kv_heads, cfg.head_dim)).astype(np.float32) * 3
    base, _ = ort_and_ref(lm, ref, cache, x)
    for j, inside in ((20, True), (T - 1 - cfg.sliding_window, False)):
        bad, bad_cache = lm.fork(), copy.deepcopy(cache)
        bad.past["0.key"][0, :, j] = row  # gqa: edits the in-place buffer itself
        bad_cache.keys[0][0, :, j] = row
        got, want = bad(x), ref.decode(x, bad_cache)
        if inside:
            assert rel_change(got, base) > CHANGED
            assert max(errors(got, want)) < FP32_TOL
        else:
            np.testing.assert_array_equal(got, base)


@pytest.mark.parametrize("attention", ["gqa", "onnx"])
def test_sliding_window_bounds_reach(build, attention):
    """One local layer: the last query (index S-1) sees exactly keys S-sliding_window .. S-1. Perturbing
    the token just outside leaves its logits bit-identical (ORT and reference); just inside changes them.
    Checked for a one-call prefill and for a decode step after a prefill."""
    d = build(attention=attention, num_layers=1, sliding_window_pattern=99)
    cfg, ref = load_fixture_config(d), Reference.load(d)
    assert cfg.layer_types == ("local",)
    S, W = 30, cfg.sliding_window
    x = text_embeds(ref, S, seed=4)

    def last_logits(x, split):  # prefill x[:, :split], then the rest; logits of the last position
        lm, cache = OrtLM(d, cfg), ref.new_cache()
        got, want = lm(x[:, :split]), ref.decode(x[:, :split], cache)
        if split < S:
            got, want = lm(x[:, split:]), ref.decode(x[:, split:], cache)
        return got[:, -1], want[:, -1]

    for split in (S, S - 1):
        base, ref_base = last_logits(x, split)
        for p, inside in ((S - 1 - W, False), (S - W, True)):
            xp = x.copy()
            xp[0, p] += np.float32(2.0)
            got, want = last_logits(xp, split)
            if inside:
                assert rel_change(got, base) > CHANGED and rel_change(want, ref_base) > CHANGED
                assert max(errors(got, want)) < FP32_TOL
            else:
                np.testing.assert_array_equal(got, base)
                np.testing.assert_array_equal(want, ref_base)


# ---- fixture hygiene ----------------------------------------------------------------------------
@pytest.mark.parametrize("overrides", [{"attention": "gqa"}, {"attention": "onnx"}, {"dtype": "fp16"},
                                       {"external_data": True}], ids=["gqa", "onnx", "fp16", "external"])
def test_onnx_checker_passes(build, overrides):
    d = build(**overrides)
    files = sorted(d.rglob("*.onnx"))
    assert {f.relative_to(d).as_posix() for f in files} == {"vision.onnx", "embedding.onnx", "decoder.onnx",
                                                            "text/decoder.onnx"}
    for f in files:
        onnx.checker.check_model(str(f))  # the path form also checks external data files


def test_external_data_gives_the_same_reference(build):
    d, ext = build(attention="gqa"), build(external_data=True)
    assert (ext / "decoder.onnx.data").is_file()
    ids = np.arange(9, 29)[None]
    a = Reference.load(d).logits_for_ids(ids, Reference.load(d).new_cache())
    r = Reference.load(ext)
    np.testing.assert_array_equal(r.logits_for_ids(ids, r.new_cache()), a)


def test_builds_are_deterministic(tmp_path):
    cfg = preset("tiny")
    a, b = build_fixture(cfg, tmp_path / "a"), build_fixture(cfg, tmp_path / "b")
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f

    def content(d):
        return json.loads((d / "fixture.json").read_text())["content_sha256"]

    assert content(a) == content(b)
    assert content(build_fixture(preset("tiny", seed=1), tmp_path / "c")) != content(a)


@pytest.mark.parametrize("make,field", [
    (lambda: preset("tiny", hidden_size=66), "hidden_size"),  # not divisible by num_heads=4
    (lambda: preset("tiny", num_kv_heads=3), "num_heads"),  # 4 heads, 3 KV heads
    (lambda: preset("tiny", sliding_window=0), "sliding_window"),
    (lambda: preset("tiny", sliding_window=-4), "sliding_window"),
    (lambda: preset("nope"), "nope"),
    (lambda: preset("tiny", attention="flash"), "attention"),
    (lambda: preset("tiny", dtype="bf16"), "dtype"),
], ids=["hidden", "kv-heads", "window-0", "window-neg", "preset", "attention", "dtype"])
def test_bad_config_names_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()
