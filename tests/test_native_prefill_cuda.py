"""The native prefill on the GPU (`pytest -m cuda tests/test_native_prefill_cuda.py`; skipped without one).

Against onnxruntime's prefill into the same decoder (prefill="onnxruntime"): the last position's logits and
every KV row the prompt wrote, within fp16 tolerance, at prompt lengths around the bucket edges; against
the float64 reference: logits and tokens wherever its top-1/top-2 margin exceeds twice the measured fp16
error; the builder's windowed CUDA export (KV buffers of exactly the window, prompts longer than it); one
capture per bucket, replays after; sampling; refusals.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_gate import require_cuda
from float64_walk import walk

pytestmark = pytest.mark.cuda

cupy, ort = require_cuda()

import vlmdecode  # noqa: E402
from vlmdecode.fixture import build_fixture, preset  # noqa: E402
from vlmdecode.native.prefill import BUCKET  # noqa: E402
from vlmdecode.processor import demo_image  # noqa: E402
from vlmdecode.sampling import Sampler, SamplingParams  # noqa: E402

PROMPT = "Describe the image."
LAYOUTS = {"fp16": "unfused", "fused16": "fused", "fusedcuda16": "fused-cuda"}
MAX_LENGTH = 192


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("prefill")
    return {name: build_fixture(preset("tiny", dtype="fp16", layout=layout), root / name)
            for name, layout in LAYOUTS.items()}


def _pair(folder, **kw):
    """(native decoder with onnxruntime's prefill, the same with the native prefill)."""
    a = vlmdecode.load(folder, "cuda", "native", max_length=MAX_LENGTH, prefill="onnxruntime", **kw)
    b = vlmdecode.load(folder, "cuda", "native", max_length=MAX_LENGTH, **kw)  # prefill="native": the default
    return a, b


def _kv_rows(dec, S):
    """Each layer's K and V of positions 0..S-1 (ring layers: position p at row p % window)."""
    out = []
    for l in range(len(dec.kv.keys)):
        for buf in (dec.kv.keys[l].array, dec.kv.values[l].array):
            a = buf.get().reshape(buf.shape[-3:]).astype(np.float64)
            C = a.shape[1]
            p = np.arange(max(0, S - C), S) if l in dec.ring_layers else np.arange(S)
            out.append(a[:, p % C if l in dec.ring_layers else p])
    return out


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("S", [1, 2, BUCKET - 1, BUCKET, BUCKET + 1, 150])
def test_native_prefill_equals_onnxruntime_prefill(folders, layout, S):
    a, b = _pair(folders[layout])
    H = a.folder.info.hidden_size
    x = (np.random.default_rng(S).standard_normal((1, S, H)) * 0.5).astype(np.float16)
    ra = a.decoder.prefill(x)
    kva = _kv_rows(a.decoder, S)
    rb = b.decoder.prefill(x)
    kvb = _kv_rows(b.decoder, S)
    assert np.isfinite(rb).all()
    assert np.abs(rb - ra).max() < 2e-2 * max(1.0, np.abs(ra).max()), f"S={S}: last-position logits differ"
    for i, (u, v) in enumerate(zip(kva, kvb)):
        assert np.abs(u - v).max() < 2e-2 * max(1.0, np.abs(u).max()), f"S={S}: KV buffer {i} differs"
    assert a.decoder.kv.position == b.decoder.kv.position == S
    assert int(np.argmax(rb)) == int(np.argmax(ra)) or np.sort(ra)[-1] - np.sort(ra)[-2] < 2e-2


def test_one_capture_per_bucket_then_replays(folders):
    _, b = _pair(folders["fp16"])
    H, pf = b.folder.info.hidden_size, None
    outs = {}
    for S in (BUCKET - 1, BUCKET, 5, BUCKET + 1, BUCKET - 1):
        x = (np.random.default_rng(S).standard_normal((1, S, H)) * 0.5).astype(np.float16)
        outs.setdefault(S, []).append(b.decoder.prefill(x))
        pf = b.decoder._native_prefill
    assert (pf.eager, pf.captured) == (2, 2)  # buckets 64 and 128: each run eagerly once, then captured
    assert pf.replayed == 3
    assert np.array_equal(outs[BUCKET - 1][0], outs[BUCKET - 1][1])  # a replay = the eager run, bit for bit


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_native_prefill_tokens_near_float64(folders, layout):
    """Through the pipeline's prompt path (image soft tokens, Staged in the prefill buffer): every step's logits
    within fp16 tolerance of the float64 reference, tokens its argmax wherever the margin exceeds twice the
    fp16 error, and equal to onnxruntime's prefill's tokens up to the first near tie."""
    from vlmdecode.reference import Reference

    image, n = demo_image(32), 64
    a, b = _pair(folders[layout])
    ids, _ = b.prepare(PROMPT, image)
    dec = b.decoder
    toks, logits = [], []
    x = b.prompt.embed(ids, b.prompt.image_features(b.pixel_values(image)))
    with dec.loop_order(lookahead=False):  # the logits buffer read per token: the plain loop
        for tok in dec.generate(x, n, Sampler(SamplingParams())):
            toks.append(tok)
            logits.append(dec.logits.get().astype(np.float64))
    want = a.generate(PROMPT, image=image, max_new_tokens=n, stop=(), suppress_tokens=()).tokens
    ref = Reference.load(folders[layout])
    feats = ref.vision(b.processor.preprocess([image], dtype=np.float32).astype(np.float64))
    m, _ = walk(ref, ids, feats, toks, logits)
    assert m >= 16, f"margin below twice the fp16 error already at step {m}"
    assert toks[:m] == want[:m]


def test_native_prefill_windowed_export_equals_eager():
    """The builder's windowed fp16 CUDA export (5 local layers whose KV buffer is exactly their window of 12,
    a prompt longer than it): the native prefill writes the rings itself; tokens = onnxruntime CUDA eager."""
    from exported_util import cases, decode
    from exported_util import folders as exported

    found = [f for f in exported(cuda=True) if f.name == "builder-text-fp16-cuda"]
    if not found:
        pytest.skip("tests/data/exported/builder-text-fp16-cuda is not in this checkout")
    (case,) = cases(found[0])
    eager = decode(vlmdecode.load(found[0], "cuda", "eager"), case)
    pipe = vlmdecode.load(found[0], "cuda", "native")
    assert pipe.decoder.ring_layers == [0, 1, 2, 3, 4] and len(case.ids) > 12
    assert decode(pipe, case) == eager
    for mode in ("eager", "graph", "device"):  # onnxruntime's decoders, the native prefill in onnxruntime's rows
        pipe = vlmdecode.load(found[0], "cuda", mode, prefill="native")
        assert pipe.decoder.native._native_prefill.windowed == 2
        assert decode(pipe, case) == eager, mode


@pytest.mark.parametrize("mode", ["eager", "graph", "device"])
@pytest.mark.parametrize("layout", ["fp16", "fusedcuda16"])
def test_onnxruntime_modes_with_the_native_prefill(folders, layout, mode):
    """CudaDecoder(prefill="native"): the same first-row logits as its own onnxruntime prefill (fp16 tolerance)
    and the same tokens through the pipeline up to the first near tie of the two."""
    image, n = demo_image(32), 48
    a = vlmdecode.load(folders[layout], "cuda", mode, max_length=MAX_LENGTH)
    b = vlmdecode.load(folders[layout], "cuda", mode, max_length=MAX_LENGTH, prefill="native")
    H = a.folder.info.hidden_size
    x = (np.random.default_rng(5).standard_normal((1, 70, H)) * 0.5).astype(np.float16)
    ra, rb = a.decoder.prefill(x), b.decoder.prefill(x)
    assert np.abs(rb - ra).max() < 2e-2 * max(1.0, np.abs(ra).max())
    assert b.decoder.position == 70 and b.decoder.native._native_prefill.captured == 1
    want = a.generate(PROMPT, image=image, max_new_tokens=n, stop=()).tokens
    got = b.generate(PROMPT, image=image, max_new_tokens=n, stop=()).tokens
    d = next((i for i in range(n) if got[i] != want[i]), None)
    assert d is None or d >= 8, f"{mode}: native-prefill tokens differ from onnxruntime-prefill tokens at step {d}"
    print(f"{layout} {mode}: tokens equal over {n if d is None else d} steps")


def test_native_prefill_sampling_reproducible(folders):
    _, b = _pair(folders["fp16"])
    image = demo_image(32)
    runs = [b.generate(PROMPT, image=image, max_new_tokens=24, do_sample=True, temperature=0.9, seed=3, stop=()).tokens
            for _ in range(2)]
    assert runs[0] == runs[1] and all(0 <= t < preset("tiny").vocab_size for t in runs[0])


def test_native_prefill_refusals(folders):
    from vlmdecode.decoders.base import DecoderError

    with pytest.raises(ValueError, match="prefill must be one of"):
        vlmdecode.load(folders["fp16"], "cuda", "native", prefill="fast")
    _, b = _pair(folders["fp16"])
    H = b.folder.info.hidden_size
    with pytest.raises(DecoderError, match="max_length-1"):
        b.decoder.prefill(np.zeros((1, MAX_LENGTH, H), np.float16))
