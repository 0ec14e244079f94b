"""vlmdecode.load(...).generate on CPU: parity, residency, caching, streaming, sampling and errors.

Parity: greedy tokens equal the float64 `Reference` (vision -> embed -> decode loop feeding each
greedy token's embedding) and onnxruntime-genai on the same ONNX files, for both decoder variants
(gqa: shared fixed KV buffer; onnx: Concat-grown KV), with an image and text-only; the text/
token-id decoder equals the embeds decoder; the naive session.run loop gives the same tokens.
Residency: the KV buffers keep their addresses for a whole generation, onnxruntime's present
outputs are those buffers, and a decode step moves exactly the embedding + position + mask slot in.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from pathlib import Path

import numpy as np
import pytest

import vlmdecode
from vlmdecode.buffers import allocate
from vlmdecode.decoders.base import DecoderError
from vlmdecode.fixture import preset
from vlmdecode.fixture.config import IMAGE_TOKEN_ID
from vlmdecode.generation import GenerationError
from vlmdecode.ortenv import OnnxruntimeInstallError, check_single_onnxruntime, installed_ort_distributions
from vlmdecode.peer import genai_available, genai_greedy
from vlmdecode.processor import ProcessorError, demo_image
from vlmdecode.reference import Reference
from vlmdecode.sampling import NonFiniteLogitsError
from vlmdecode.sessions import CudaUnavailableError, make_session
from vlmdecode.transfers import Transfers

PROMPT = "Describe the image."
N = 24
TINY = preset("tiny")
H, V = TINY.hidden_size, TINY.vocab_size
STEP_H2D = H * 4 + 16  # fp32 embedding [1,1,H] + position_ids (8) + one mask slot (8)
VARIANTS = ["gqa", "gqa-fused", "onnx"]  # gqa-fused: layout="fused" (packed MatMuls, rotary in GQA, skip-norms)


def variant_config(variant: str):
    attention, _, layout = variant.partition("-")
    return preset("tiny", attention=attention, layout=layout or "unfused")


@pytest.fixture(scope="module")
def folders(fixture_folder):
    out = {}
    for a in VARIANTS:
        attention, _, layout = a.partition("-")
        out[a] = fixture_folder("tiny", attention=attention, layout=layout or "unfused")
    return out


@pytest.fixture(scope="module")
def pipes(folders):
    """Pipelines loaded once per module: pipes[variant] (VLM) and pipes[variant + '/text'] (token ids)."""
    out = {}
    for a, f in folders.items():
        out[a] = vlmdecode.load(f, "cpu")
        out[a + "/text"] = vlmdecode.load(f / "text", "cpu")
    return out


@pytest.fixture(scope="module")
def image():
    return demo_image(32)


def run(pipe, prompt=PROMPT, image=None, n=N, stop=(), **kw):
    return pipe.generate(prompt, image=image, max_new_tokens=n, stop=stop, **kw)


def reference_tokens(folder, pipe, prompt, image, n) -> list[int]:
    """float64: vision -> embed -> prefill, then feed each greedy token's embedding back."""
    ids, _ = pipe.prepare(prompt, image)
    ref = Reference.load(folder)
    feats = None if image is None else ref.vision(pipe.processor.preprocess([image]))
    cache = ref.new_cache()
    logits = ref.decode(ref.embed(ids, feats), cache)[0, -1]
    tokens = []
    for t in range(n):
        tokens.append(int(np.argmax(logits)))
        if t + 1 < n:
            logits = ref.decode(ref.embed(np.array([[tokens[-1]]])), cache)[0, -1]
    return tokens


# ---- parity -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("with_image", [True, False], ids=["image", "text"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_matches_float64_reference(folders, pipes, image, variant, with_image):
    img = image if with_image else None
    r = run(pipes[variant], image=img)
    assert len(r.tokens) == N
    assert r.tokens == reference_tokens(folders[variant], pipes[variant], PROMPT, img, N)


@pytest.mark.skipif(not genai_available(), reason="onnxruntime-genai is not installed")
@pytest.mark.parametrize("with_image", [True, False], ids=["image", "text"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_matches_genai(folders, pipes, image, variant, with_image):
    pipe = pipes[variant]
    img = image if with_image else None
    ids, _ = pipe.prepare(PROMPT, img)
    px = pipe.processor.preprocess([image]) if with_image else None
    peer = genai_greedy(folders[variant], ids, N, pixel_values=px)
    assert not peer.finished_early
    assert run(pipe, image=img).tokens == peer.tokens


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("chat_template", [True, False])
def test_text_folder_equals_embeds_pipeline(pipes, variant, chat_template):
    vlm, text = pipes[variant], pipes[variant + "/text"]
    assert text.folder.info.drive == "ids" and vlm.folder.info.drive == "embeds"
    ids_v, _ = vlm.prepare("hello wor", chat_template=chat_template)
    ids_t, x_t = text.prepare("hello wor", chat_template=chat_template)
    np.testing.assert_array_equal(ids_v, ids_t)
    np.testing.assert_array_equal(x_t, ids_t)  # the token-id decoder takes the ids themselves
    a = run(vlm, "hello wor", chat_template=chat_template)
    b = run(text, "hello wor", chat_template=chat_template)
    assert a.tokens == b.tokens and a.text == b.text
    # the id decoder's step moves one int64 id + position + mask slot
    assert all(s.h2d_bytes == 8 + 16 and s.kv_bytes == 0 for s in b.steps[1:])


@pytest.mark.parametrize("variant", VARIANTS)
def test_naive_loop_same_tokens_but_moves_kv(folders, pipes, image, variant):
    """mode "naive" runs the same loop and pipeline with numpy KV through session.run every step."""
    ours = run(pipes[variant], image=image).tokens
    naive = vlmdecode.load(folders[variant], "cpu", "naive")
    r = run(naive, image=image)
    assert naive.mode == "naive" and r.tokens == ours
    kv = [s.kv_bytes for s in r.steps]
    assert len(kv) == N and all(b > 0 for b in kv)
    if variant == "onnx":  # the Concat cache grows: every step sends and receives more
        assert all(b2 > b1 for b1, b2 in itertools.pairwise(kv[1:]))
    else:  # the whole fixed [1, kvh, max_length, D] buffer travels both ways, every step
        per_way = 2 * TINY.num_layers * TINY.num_kv_heads * TINY.max_length * TINY.head_dim * 4
        assert kv[1:] == [2 * per_way] * (N - 1)


# ---- residency -------------------------------------------------------------------------------------------
def test_kv_resident_gqa(folders, image, monkeypatch):
    pipe = vlmdecode.load(folders["gqa"], "cpu")
    dec = pipe.decoder
    seen = {}
    real_prefill = dec.prefill

    def prefill(x, **kw):
        out = real_prefill(x, **kw)
        seen["prefill"] = dec.kv.pointers()
        return out

    monkeypatch.setattr(dec, "prefill", prefill)
    r = run(pipe, image=image)
    assert seen["prefill"] == dec.kv.pointers()  # same buffers from prefill to the last step
    assert len(set(seen["prefill"])) == 2 * TINY.num_layers
    dec.check_kv_outputs(dec.io_step)  # ORT's present outputs ARE our buffers, after a step
    outs = dec.io_step.get_outputs()
    interleaved = [b.ptr for kv in zip(dec.kv.keys, dec.kv.values) for b in kv]  # k0, v0, k1, ...
    assert [o.data_ptr() for o in outs[1:]] == interleaved and sorted(interleaved) == sorted(dec.kv.pointers())
    # ORT wrote the rows in place: rows [0, position) hold keys, the rest of the buffer is untouched
    pos = r.prompt_tokens + N - 1
    assert dec.position == pos
    k0 = dec.kv.keys[0].array
    assert np.all(np.abs(k0[0, :, :pos]).sum(-1) > 0) and not k0[0, :, pos:].any()
    for s in r.steps:
        assert s.kv_bytes == 0
    for i, s in enumerate(r.steps[1:], 1):
        assert s.h2d_bytes == STEP_H2D and s.d2h_bytes == V * 4 and s.position == r.prompt_tokens + i
    assert r.steps[0].position == r.prompt_tokens
    # the guard fires when an output is not our buffer
    other = allocate(dec.kv.keys[0].shape, np.float32, dec.device)
    monkeypatch.setattr(dec.kv, "keys", [other] + dec.kv.keys[1:])
    with pytest.raises(DecoderError, match="round-trip"):
        dec.check_kv_outputs(dec.io_step)


def test_kv_resident_onnx(pipes, image):
    pipe = pipes["onnx"]
    r = run(pipe, image=image)
    assert pipe.decoder.kv.layout == "concat"
    assert all(s.kv_bytes == 0 for s in r.steps)
    assert all(s.h2d_bytes == STEP_H2D and s.d2h_bytes == V * 4 for s in r.steps[1:])
    # the presents onnxruntime returned are the cache, grown to the position, on the CPU device
    for ov in pipe.decoder.kv.values_ov:
        assert ov.device_name().lower() == "cpu" and ov.shape()[2] == r.prompt_tokens + N - 1


# ---- image features cache ------------------------------------------------------------------------------
def test_image_features_cached(folders, image):
    pipe = vlmdecode.load(folders["gqa"], "cpu")
    a = run(pipe, image=image, n=4)
    run(pipe, "Another question?", image=demo_image(32), n=4)  # equal pixels, new object
    assert pipe.vision_runs == 1
    run(pipe, image=demo_image(32, seed=1), n=4)
    assert pipe.vision_runs == 2
    assert run(pipe, image=image, n=4).tokens == a.tokens and pipe.vision_runs == 2
    # the image matters: another image changes the prompt's embeddings and the first logits (it would not if the
    # image features were dropped on the way)
    (_, xa), (_, xc) = pipe.prepare(PROMPT, image), pipe.prepare(PROMPT, demo_image(32, seed=1))
    assert not np.array_equal(xa, xc)
    assert not np.array_equal(pipe.decoder.prefill(xa), pipe.decoder.prefill(xc))
    run(pipe, n=2)  # text only: no vision run
    assert pipe.vision_runs == 2


# ---- stream, results, embeds ---------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 5, N])
def test_stream_equals_generate(pipes, image, n):
    pipe = pipes["gqa"]
    recs = list(pipe.stream(PROMPT, image=image, max_new_tokens=n, stop=()))
    r = run(pipe, image=image, n=n)
    assert [s.token for s in recs] == r.tokens
    assert "".join(s.text for s in recs) == r.text
    assert [s.step for s in recs] == list(range(n))


def test_stop_tokens(folders):
    pipe = vlmdecode.load(folders["gqa"], "cpu")
    full = run(pipe)
    tok = full.tokens[N // 2]
    cut = full.tokens[: full.tokens.index(tok) + 1]
    assert run(pipe, stop=[tok]).tokens == cut
    recs = list(pipe.stream(PROMPT, max_new_tokens=N, stop={tok}))
    assert [s.token for s in recs] == cut and "".join(s.text for s in recs) == pipe.processor.decode(cut)
    # the default stop set is the model's eos ids
    assert not set(full.tokens) & set(pipe.folder.eos_token_ids)
    pipe.folder = dataclasses.replace(pipe.folder, eos_token_ids=(tok,))
    assert pipe.generate(PROMPT, max_new_tokens=N).tokens == cut
    assert pipe.generate(PROMPT, max_new_tokens=N, stop=None).tokens == cut


def test_result_fields(pipes, image):
    r = run(pipes["gqa"], image=image)
    r = run(pipes["gqa"], image=image)
    # the byte records are per generation (not accumulated over the pipeline's life)
    table = pipes["gqa"].transfers.table()
    assert len(table) == N and list(table["kv_bytes"]) == [s.kv_bytes for s in r.steps]
    assert list(table["h2d_bytes"]) == [s.h2d_bytes for s in r.steps]
    assert r.mode == "resident" and r.device == "cpu" and r.counters == {}
    assert r.prompt_tokens == pipes["gqa"].prepare(PROMPT, image)[0].shape[1]
    assert r.ttft_seconds > 0 and len(r.decode_seconds) == N - 1 and all(s >= 0 for s in r.decode_seconds)
    df = r.frame()
    assert list(df["token"]) == r.tokens and set(df.columns) >= {"h2d_bytes", "kv_bytes", "position"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_generate_from_embeds(pipes, image, variant):
    pipe = pipes[variant]
    _, x = pipe.prepare(PROMPT, image)
    a = pipe.generate_from_embeds(x, max_new_tokens=N, stop=())
    b = run(pipe, image=image)
    assert a.tokens == b.tokens and a.text == b.text and a.prompt_tokens == b.prompt_tokens
    assert pipe.generate_from_embeds(x.astype(np.float64), max_new_tokens=4, stop=()).tokens == b.tokens[:4]


@pytest.mark.parametrize("shape", [(5, H), (1, 5, H + 1), (2, 5, H), (1, 0, H), (1, 5, H, 1)])
def test_generate_from_embeds_bad_shape(pipes, shape):
    with pytest.raises(ValueError, match="inputs_embeds must have shape"):
        pipes["gqa"].generate_from_embeds(np.zeros(shape, np.float32))


def test_generate_from_embeds_needs_embeds_decoder(pipes):
    with pytest.raises(ValueError, match="input_ids"):
        pipes["gqa/text"].generate_from_embeds(np.zeros((1, 3, H), np.float32))


# ---- sampling ------------------------------------------------------------------------------------------
def test_sampling_params_flow_through(pipes, image):
    pipe = pipes["gqa"]
    # sampled runs use the image soft token as a stop: the embedding model cannot embed a generated one
    run = functools.partial(globals()["run"], stop=[IMAGE_TOKEN_ID])
    greedy = run(pipe, image=image).tokens
    s1 = run(pipe, image=image, do_sample=True, seed=1).tokens
    assert s1 == run(pipe, image=image, do_sample=True, seed=1).tokens  # reproducible
    others = [run(pipe, image=image, do_sample=True, seed=s).tokens for s in range(2, 6)]
    assert any(o != s1 for o in others)  # different seeds usually differ
    assert any(o != greedy for o in [s1] + others)
    # filters reach the sampler: top_k=1 or a tiny temperature is greedy whatever the seed
    assert run(pipe, image=image, do_sample=True, seed=3, top_k=1).tokens == greedy
    assert run(pipe, image=image, do_sample=True, seed=3, temperature=1e-4).tokens == greedy
    assert run(pipe, image=image, do_sample=True, seed=3, top_p=1e-9).tokens == greedy
    text = pipes["gqa/text"]  # near-uniform sampling: the token-id model takes any token
    hot = [run(text, do_sample=True, seed=s, temperature=50.0, stop=()).tokens for s in range(3)]
    assert len({tuple(h) for h in hot}) == 3
    # stream takes the same parameters
    st = [s.token for s in pipe.stream(PROMPT, image=image, max_new_tokens=N, do_sample=True, seed=1,
                                       stop=[IMAGE_TOKEN_ID])]
    assert st == s1


@pytest.mark.parametrize("kw", [{"temperature": 0.0}, {"top_k": -1}, {"top_p": 0.0}, {"min_p": 1.0},
                                {"seed": -1}, {"do_sample": 1}])
def test_bad_sampling_params(pipes, kw):
    with pytest.raises(ValueError):
        run(pipes["gqa"], n=2, **kw)


# ---- errors --------------------------------------------------------------------------------------------
def test_too_long_for_max_length(pipes, image):
    pipe = pipes["gqa"]
    text = pipes["gqa/text"]
    S = pipe.prepare(PROMPT, image)[0].shape[1]
    with pytest.raises(ValueError, match="max_length 256"):
        run(pipe, image=image, n=10_000)
    with pytest.raises(ValueError, match="max_length"):
        run(pipe, image=image, n=256 - S + 1)
    with pytest.raises(ValueError, match="max_length"):
        next(pipe.stream(PROMPT, image=image, max_new_tokens=10_000))
    with pytest.raises(ValueError, match="max_length"):
        pipe.generate_from_embeds(np.zeros((1, 250, H), np.float32), max_new_tokens=10)
    S = text.prepare(PROMPT)[0].shape[1]
    with pytest.raises(ValueError, match="max_length 256"):
        run(text, n=256 - S + 1)
    r = run(text, n=256 - S)  # exactly fills the cache (token ids: any generated token can be fed back)
    assert len(r.tokens) == 256 - S and text.decoder.position == 255


def test_max_new_tokens_must_be_positive(pipes):
    with pytest.raises(ValueError, match="max_new_tokens"):
        run(pipes["gqa"], n=0)


def test_load_max_length(folders, image):
    small = vlmdecode.load(folders["gqa"], "cpu", max_length=64)
    assert small.decoder.max_length == 64 and small.decoder.kv.keys[0].shape[2] == 64
    S = small.prepare(PROMPT, image)[0].shape[1]
    with pytest.raises(ValueError, match="max_length 64"):
        run(small, image=image, n=64 - S + 1)
    full = vlmdecode.load(folders["gqa"], "cpu")
    assert run(small, image=image, n=64 - S).tokens == run(full, image=image, n=64 - S).tokens
    for bad in (300, 0, 1, -5, 2.5):
        with pytest.raises(ValueError, match="max_length"):
            vlmdecode.load(folders["gqa"], "cpu", max_length=bad)


def test_image_tokens_must_match_features(pipes, image, monkeypatch):
    pipe = pipes["gqa"]
    with pytest.raises(ProcessorError, match="placeholder"):
        run(pipe, "<start_of_image> and <start_of_image>", image=image, n=2)
    with pytest.raises(ProcessorError, match="placeholder"):
        run(pipe, "<start_of_image> but no image", n=2)
    with pytest.raises(ProcessorError, match="image soft token"):
        run(pipe, "<image_soft_token>", n=2)
    # features that do not line up with the prompt's soft tokens (a vision model with another count)
    feats = pipe.image_features(image)
    monkeypatch.setattr(pipe.prompt, "image_features", lambda px: feats[:3])  # what generation calls
    with pytest.raises(ProcessorError, match="image tokens"):
        run(pipe, image=image, n=2)


@pytest.mark.parametrize("where", ["step", "prefill"])
def test_nan_logits(folders, image, monkeypatch, where):
    pipe = vlmdecode.load(folders["gqa"], "cpu")
    good = run(pipe, image=image, n=6).tokens
    real = getattr(pipe.decoder, where)

    def poisoned(x, **kw):
        out = real(x, **kw)
        return np.full_like(out, np.nan)

    monkeypatch.setattr(pipe.decoder, where, poisoned)
    step = 1 if where == "step" else 0
    # after the first token: a GenerationError carrying what was made; at the prefill: the error itself
    want = GenerationError if step else NonFiniteLogitsError
    with pytest.raises(want, match=f"step {step}") as e:
        run(pipe, image=image, n=6)
    cause = e.value.__cause__ if step else e.value
    assert isinstance(cause, NonFiniteLogitsError) and cause.step == step
    if step:
        assert e.value.step == step and e.value.tokens == good[:step]  # the tokens made before the error survive
    with pytest.raises(want, match=f"step {step}") as e:
        list(pipe.stream(PROMPT, image=image, max_new_tokens=6))
    if step:
        assert e.value.tokens == good[:step]
    monkeypatch.undo()
    assert run(pipe, image=image, n=6).tokens == good  # the pipeline recovers


def test_images_of_any_size_and_mode(pipes, image, tmp_path):
    """Any size and mode is resized / converted as the config says; a missing or corrupt file is refused."""
    pipe = pipes["gqa"]
    for other in (demo_image(16), demo_image(57).convert("RGBA"), image.convert("L"), image.convert("P")):
        out = run(pipe, image=other, n=4)
        assert len(out.tokens) == 4
    with pytest.raises(ProcessorError, match="does not exist"):
        run(pipe, image=tmp_path / "missing.png", n=2)
    (tmp_path / "junk.png").write_bytes(b"not a png")
    with pytest.raises(ProcessorError, match="junk.png"):
        run(pipe, image=tmp_path / "junk.png", n=2)
    image.save(tmp_path / "ok.png")
    assert run(pipe, image=tmp_path / "ok.png", n=4).tokens == run(pipe, image=image, n=4).tokens
    assert run(pipe, image=np.asarray(image), n=4).tokens == run(pipe, image=image, n=4).tokens
    assert list(pipe.stream(PROMPT, image=demo_image(40), max_new_tokens=3))  # stream resizes as well
    with pytest.raises(TypeError, match="'resize' is not accepted: every image is resized"):
        run(pipe, image=image, n=2, resize=True)


@pytest.mark.parametrize("variant", VARIANTS)
def test_generated_image_token(folders, image, monkeypatch, variant):
    """A generated image soft token cannot be embedded without features: a clear error, or stop there."""
    pipe = vlmdecode.load(folders[variant], "cpu")
    real = pipe.decoder.prefill

    def prefill(x, **kw):
        out = real(x, **kw)
        out[:] = 0
        out[IMAGE_TOKEN_ID] = 1
        return out

    monkeypatch.setattr(pipe.decoder, "prefill", prefill)
    # suppressed by default (it cannot be fed back): the next best token instead, and generation goes on
    out = run(pipe, image=image, n=4).tokens
    assert IMAGE_TOKEN_ID not in out and len(out) == 4
    with pytest.raises(GenerationError, match=f"image soft token \\(id {IMAGE_TOKEN_ID}\\) at step 0") as e:
        run(pipe, image=image, n=4, suppress_tokens=())
    assert e.value.tokens == [IMAGE_TOKEN_ID]
    assert run(pipe, image=image, n=4, stop=[IMAGE_TOKEN_ID], suppress_tokens=()).tokens == [IMAGE_TOKEN_ID]
    assert run(pipe, image=image, n=1, suppress_tokens=()).tokens == [IMAGE_TOKEN_ID]  # nothing fed back after it


def test_image_on_text_model(pipes, image):
    with pytest.raises(ValueError, match="no vision component"):
        run(pipes["gqa/text"], image=image, n=2)


def test_no_tokenizer(folders, tmp_path):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(folders["gqa"], d)
    (d / "tokenizer.json").unlink()
    pipe = vlmdecode.load(d, "cpu")
    assert pipe.processor is None
    with pytest.raises(ValueError, match="tokenizer.json"):
        run(pipe, "hi", n=2)
    with pytest.raises(ValueError, match="tokenizer.json"):
        run(pipe, "hi", image=demo_image(32), n=2)
    x = pipe.embed(np.array([[2, 20, 30]]), None)
    r = pipe.generate_from_embeds(x, max_new_tokens=3, stop=())
    assert len(r.tokens) == 3 and r.text == "" and all(s.text == "" for s in r.steps)


@pytest.mark.parametrize("mode", ["graph", "eager", "device", "bogus"])
def test_cuda_mode_on_cpu(folders, mode):
    with pytest.raises(ValueError, match=f"mode '{mode}' is not available on cpu"):
        vlmdecode.load(folders["gqa"], "cpu", mode)
    assert vlmdecode.load(folders["gqa"], "cpu", "resident").mode == "resident"


@pytest.mark.parametrize("device", ["cudabad", "CPU", "cuda:-1", "gpu", 0])
def test_bad_device(folders, device):
    with pytest.raises(ValueError, match="invalid device"):
        vlmdecode.load(folders["gqa"], device)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:7"])
def test_cuda_without_gpu_never_falls_back(folders, variant, device):
    from vlmdecode.devices import cuda_device_count
    from vlmdecode.sessions import ort

    if "CUDAExecutionProvider" in ort().get_available_providers() and cuda_device_count() > 0:
        pytest.skip("a CUDA device is available here")
    with pytest.raises(CudaUnavailableError, match="CUDA"):
        vlmdecode.load(folders[variant], device)


def test_check_single_onnxruntime():
    for both in (["onnxruntime", "onnxruntime-gpu"], [("onnxruntime", "/site"), ("onnxruntime-gpu", "/site")]):
        with pytest.raises(OnnxruntimeInstallError, match="pip uninstall -y onnxruntime onnxruntime-gpu") as e:
            check_single_onnxruntime(both)
        assert isinstance(e.value, ImportError) and "vlmdecode[cuda]" in str(e.value)
    # in different site directories they do not overwrite each other: the first is the one imported
    assert check_single_onnxruntime([("onnxruntime-gpu", "/a"), ("onnxruntime", "/b")]) == "onnxruntime-gpu"
    assert check_single_onnxruntime(["onnxruntime"]) == "onnxruntime"
    assert check_single_onnxruntime([]) is None
    found = installed_ort_distributions()
    assert check_single_onnxruntime() in [n for n, _ in found] + [None]
    assert installed_ort_distributions(["surely-not-a-distribution-xyz"]) == []


# ---- decoder, cache and session details ---------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
def test_decoder_bounds_and_ortvalue_prompt(folders, pipes, variant):
    from vlmdecode.sessions import ort

    text = vlmdecode.load(folders[variant] / "text", "cpu", max_length=8)
    dec = text.decoder
    ids = np.array([[2, 20, 30, 40, 50, 60, 70]], np.int64)
    a = dec.prefill(ids)
    b = dec.prefill(ort().OrtValue.ortvalue_from_numpy(ids))  # a prompt already in onnxruntime memory
    np.testing.assert_array_equal(a, b)
    assert dec.position == 7
    dec.step(np.array([[5]], np.int64))
    assert dec.position == 8
    with pytest.raises(DecoderError, match="KV cache full"):
        dec.step(np.array([[5]], np.int64))
    with pytest.raises(DecoderError, match="max_length-1=7"):
        dec.prefill(np.zeros((1, 8), np.int64))
    kv = pipes[variant].decoder.kv
    run(pipes[variant], n=3)
    per_row = 2 * TINY.num_layers * TINY.num_kv_heads * TINY.head_dim * 4
    rows = TINY.max_length if variant.startswith("gqa") else pipes[variant].decoder.position
    assert kv.nbytes == per_row * rows


def test_reuse_logits_one_host_array_same_values(folders):
    """reuse=True (the pipeline's host loop) reads into the decoder's own [V] array in the model's dtype; the
    default hands the caller a float32 copy of the same values that no later step touches."""
    dec = vlmdecode.load(folders["gqa"] / "text", "cpu").decoder
    ids = np.array([[2, 20, 30, 40]], np.int64)
    owned = dec.prefill(ids)
    shared = dec.prefill(ids, reuse=True)
    assert shared is dec.logits_host and shared.dtype == dec.dtype and shared.shape == (dec.vocab,)
    assert owned.dtype == np.float32 and not np.shares_memory(owned, shared)
    np.testing.assert_array_equal(owned, shared)
    kept = owned.copy()
    assert dec.step(np.array([[5]], np.int64), reuse=True) is dec.logits_host  # overwritten in place
    assert not np.array_equal(dec.logits_host, kept)
    np.testing.assert_array_equal(owned, kept)  # the caller's copy did not move


def test_transfers_accounting():
    t = Transfers()
    with pytest.raises(ValueError, match="direction"):
        t.note("sideways", 1, "x")
    t.note("h2d", 5, "setup")  # before any step: lands in setup
    t.begin()
    t.note("d2h", 7, "kv")
    assert t.end().kv == 7 and t.setup.h2d == 5
    t.reset()
    assert t.steps == [] and t.setup.h2d == 0


def test_cpu_sessions(folders, tmp_path):
    from vlmdecode.sessions import memcpy_nodes, node_assignment

    path = folders["gqa"] / "decoder.onnx"
    with pytest.raises(ValueError, match="cuda_graph"):
        make_session(path, "cpu", cuda_graph=True)
    with pytest.raises(ValueError, match="CUDA provider options.*cpu"):
        make_session(path, "cpu", provider_options={"arena_extend_strategy": "kSameAsRequested"})
    sess = make_session(path, "cpu", threads=1, profile_prefix=str(tmp_path / "prof"))
    nodes = node_assignment(sess)
    assert nodes and {ep for ep, _, _ in nodes} == {"CPUExecutionProvider"}
    assert "GroupQueryAttention" in {op for _, op, _ in nodes}
    assert memcpy_nodes(sess) == []
    profile = Path(sess.end_profiling())
    assert profile.exists() and profile.name.startswith("prof")


def test_cuda_provider_but_no_gpu(folders, monkeypatch):
    """onnxruntime-gpu installed on a machine without a visible GPU: an error naming the count, no fallback."""
    from vlmdecode import sessions

    monkeypatch.setattr(sessions.ort(), "get_available_providers",
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(sessions, "cuda_device_count", lambda: 0)
    with pytest.raises(CudaUnavailableError, match=r"cuda:0 asked for, but 0 CUDA device\(s\) are visible"):
        vlmdecode.load(folders["gqa"], "cuda:0")
    with pytest.raises(CudaUnavailableError, match="no GPU"):
        make_session(folders["gqa"] / "vision.onnx", "cuda")
    monkeypatch.setattr(sessions, "cuda_device_count", lambda: 1)
    with pytest.raises(ValueError, match="'enable_cuda_graph' is set by vlmdecode"):
        make_session(folders["gqa"] / "vision.onnx", "cuda", provider_options={"enable_cuda_graph": "1"})


def test_embedding_table_rows_are_the_embedding_models_output(folders, pipes):
    from vlmdecode.embedtable import embedding_table

    pipe = pipes["gqa"]
    table = embedding_table(pipe.folder, np.float32)
    assert table.shape == (V, H) and not table.flags.writeable
    for tok in (0, 9, 100, V - 1):
        np.testing.assert_array_equal(table[tok], pipe.embed(np.array([[tok]]), None)[0, 0])
        np.testing.assert_array_equal(pipe.token_input(tok)[0, 0], table[tok])
    np.testing.assert_array_equal(table[IMAGE_TOKEN_ID], table[0])  # no row of its own: pad's
    assert embedding_table(pipe.folder, np.float32) is table  # built once per folder
    with pytest.raises(ValueError, match="no embedding component"):
        embedding_table(pipes["gqa/text"].folder, np.float32)


# ---- the decode loop: timing inside the loop, generation lifetime, KV position --------------------------
def test_step_seconds_exclude_the_consumer(pipes):
    """StepRecord.seconds is timed inside the loop: a consumer sleeping 200 ms per token never shows in it.

    A leaked sleep would make every step >= 0.2 s; the bound is half that, so a loaded machine (a tiny step
    is well under a millisecond alone) cannot fail it."""
    import time

    pipe = pipes["gqa/text"]
    list(pipe.stream("hi", max_new_tokens=5, stop=()))  # warm
    slow = []
    for rec in pipe.stream("hi", max_new_tokens=5, stop=()):
        slow.append(rec)
        time.sleep(0.2)
    assert len(slow) == 5
    assert all(0 < r.seconds < 0.1 for r in slow[1:]), [r.seconds for r in slow]
    assert all(0 <= r.detok_seconds < 0.1 for r in slow)


def test_abandoned_stream_ends_the_generation(pipes, monkeypatch):
    dec = pipes["gqa"].decoder
    calls = []
    monkeypatch.setattr(dec, "begin_generation", lambda: calls.append("begin"))
    monkeypatch.setattr(dec, "end_generation", lambda: calls.append("end"))
    it = pipes["gqa"].stream(PROMPT, max_new_tokens=8, stop=())
    next(it)
    assert calls == ["begin"]
    it.close()
    assert calls == ["begin", "end"]
    with dec.generation():  # nested contexts are one generation
        with dec.generation():
            pass
        assert calls == ["begin", "end", "begin"]
    assert calls == ["begin", "end", "begin", "end"]


def test_kv_position_is_owned_by_the_cache(pipes):
    kv = pipes["gqa"].decoder.kv
    with pytest.raises(AttributeError):
        kv.position = 3
    kv.reset()
    assert kv.advance(4) == 4 and kv.position == 4
    with pytest.raises(ValueError, match="capacity"):
        kv.advance(kv.max_length)
    with pytest.raises(ValueError, match="n must be >= 1"):
        kv.advance(0)
    kv.reset()
    assert kv.position == 0


def test_teacher_forced_loop_matches_free_run(pipes):
    """Recorder(force=...) drives the same loop with given tokens; forcing the greedy tokens changes nothing."""
    from vlmdecode.sampling import Recorder

    pipe = pipes["gqa"]
    _, x = pipe.prepare(PROMPT)
    free = Recorder()
    tokens = list(pipe.decoder.generate(x, 8, free))
    forced = Recorder(force=tokens)
    assert list(pipe.decoder.generate(x, 8, forced)) == tokens
    np.testing.assert_array_equal(np.stack(free.logits), np.stack(forced.logits))
    other = Recorder(force=[tokens[0], (tokens[1] + 1) % V] + tokens[2:])
    list(pipe.decoder.generate(x, 8, other))
    assert not np.array_equal(other.logits[2], free.logits[2])  # the forced token was fed back


def test_profile_groups_kernels_by_layer_free_role(folders, tmp_path):
    """The fixture names nodes by layer and role, so an onnxruntime profile groups the decode loop's kernels
    by what they do (every layer's q_proj together), not by a regex over kernel names."""
    from vlmdecode.decoders.cpu import CpuDecoder
    from vlmdecode.modelfolder import ModelFolder
    from vlmdecode.profiling import node_times
    from vlmdecode.sampling import Sampler, SamplingParams

    folder = ModelFolder.load(folders["gqa"] / "text")
    dec = CpuDecoder(folder, make_session(folder.decoder, "cpu", profile_prefix=str(tmp_path / "p")))
    assert len(list(dec.generate(np.array([[2, 20, 30]], np.int64), 5, Sampler(SamplingParams())))) == 5
    path = dec.session.end_profiling()
    t = node_times(path, "role")
    assert {"attn/q_proj", "attn/k_proj", "attn/v_proj", "attn/o_proj", "mlp/down_proj", "lm_head"} <= set(t.index)
    assert t.loc["attn/q_proj", "nodes_per_run"] == TINY.num_layers  # one per layer, all layers in one row
    by_op = node_times(path, "op")
    assert by_op["nodes_per_run"].sum() == pytest.approx(t["nodes_per_run"].sum())
    with pytest.raises(ValueError, match="by must be"):
        node_times(path, "kernel")


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("opts", [{"sync_every": 4}, {"lookahead": False}, {"sync_every": 1, "lookahead": True}])
def test_cuda_ring_options_only_in_device_mode(fixture_folder, mode, opts):
    """sync_every and lookahead set device mode's token ring (decoders.token_ring); eager and graph modes have
    none, so naming either there is an error that says so (checked before any GPU call: it holds on CPU too)."""
    from vlmdecode.decoders.cuda import CudaDecoder
    from vlmdecode.modelfolder import ModelFolder

    folder = ModelFolder.load(fixture_folder("tiny", dtype="fp16", attention="gqa", layout="fused-cuda"))
    with pytest.raises(ValueError, match=f"{' and '.join(opts)} out or use mode='device'") as e:
        CudaDecoder(folder, "cuda", mode, **opts)
    assert f"mode {mode!r} runs no device loop" in str(e.value)
