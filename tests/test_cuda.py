"""CUDA decoder proofs (run on a GPU with `pytest -m cuda`; skipped without one).

Parity (CPU fp32 vs CUDA fp16, vs the float64 reference, eager == graph == device, vs
onnxruntime-genai-cuda), capture (counters, a stale-binding replay proof, no Memcpy nodes),
transfers (exact bytes per step), bad input, and memory over 200 generations.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from cuda_gate import require_cuda

pytestmark = pytest.mark.cuda

cupy, ort = require_cuda()

import vlmdecode  # noqa: E402
from vlmdecode.fixture import preset  # noqa: E402
from vlmdecode.processor import demo_image  # noqa: E402
from vlmdecode.sessions import CudaUnavailableError, memcpy_nodes  # noqa: E402

STEPS = 40
PROMPT = "Describe the image."
FP16_LAYOUTS = ["fp16", "fused16", "fusedcuda16"]  # unfused, fused, fused-cuda (q/k norms inside GQA)


@pytest.fixture(scope="module")
def folders(fixture_folder):
    return {name: fixture_folder("tiny", **kw) for name, kw in {
        "fp32": {},
        "fp16": {"dtype": "fp16"},
        "onnx16": {"dtype": "fp16", "attention": "onnx"},
        "fused16": {"dtype": "fp16", "layout": "fused"},
        "fusedcuda16": {"dtype": "fp16", "layout": "fused-cuda"},
    }.items()}


@pytest.fixture(scope="module")
def image():
    return demo_image(32)


def _tokens(folder, device, mode, image, **kw):
    p = vlmdecode.load(folder, device, mode)
    return p.generate(PROMPT, image=image, max_new_tokens=STEPS, stop=(), **kw)


@pytest.mark.parametrize("layout", FP16_LAYOUTS)
def test_cpu_fp32_equals_cuda_fp16_all_modes(folders, image, layout):
    cpu = _tokens(folders["fp32"], "cpu", None, image).tokens
    for mode in ("eager", "graph", "device"):
        assert _tokens(folders[layout], "cuda", mode, image).tokens == cpu, mode
    assert len(cpu) == STEPS


@pytest.mark.parametrize("vocab", [320, 262144])
def test_device_argmax_kernels(vocab):
    """The device loop's greedy pick: first index of the max over many blocks; NaN, +inf or all -inf -> -1."""
    from vlmdecode.decoders.cuda import argmax_blocks, device_kernels

    partial, advance = device_kernels(np.float16)
    nb = argmax_blocks(vocab)
    part_v, part_i = cupy.empty(nb, cupy.float32), cupy.empty(nb, cupy.int64)
    ring, pos, mask, t = (cupy.zeros(n, cupy.int64) for n in (1, 1, 8, 1))
    rng = np.random.default_rng(0)
    cases = {"random": rng.standard_normal(vocab).astype(np.float16)}
    tie = cases["random"].copy()
    tie[[vocab // 3, vocab - 1, 7]] = 60  # ties: the smallest index wins
    cases["tie"] = tie
    cases["all -inf"] = np.full(vocab, -np.inf, np.float16)
    for bad in (np.nan, np.inf):
        row = cases["random"].copy()
        row[vocab - 2] = bad
        cases[f"has {bad}"] = row
    suppress = cupy.asarray([int(np.argmax(cases["random"]))], cupy.int64)  # the top id, never picked
    for name, row in cases.items():
        logits = cupy.asarray(row)
        partial((nb,), (256,), (logits, np.int32(vocab), part_v, part_i, suppress, np.int32(0)))
        advance((1,), (1024,), (part_v, part_i, np.int32(nb), np.uint64(0), np.uint64(0), np.int32(0), np.uint64(0),
                                np.uint64(0), ring, np.int32(0), pos, mask, t))
        # -1: NaN, +inf, or nothing to pick (every logit -inf): the host's rule (sampling.check_finite)
        want = -1 if np.isnan(row).any() or np.isposinf(row).any() or np.isneginf(row).all() else int(np.argmax(row))
        assert int(ring.get()[0]) == want, name
    row = cases["random"].astype(np.float32)
    partial((nb,), (256,), (cupy.asarray(cases["random"]), np.int32(vocab), part_v, part_i, suppress, np.int32(1)))
    advance((1,), (1024,), (part_v, part_i, np.int32(nb), np.uint64(0), np.uint64(0), np.int32(0), np.uint64(0),
                            np.uint64(0), ring, np.int32(0), pos, mask, t))
    row[int(suppress.get()[0])] = -np.inf
    assert int(ring.get()[0]) == int(np.argmax(row)), "suppressed id picked"


def test_device_mode_embedding_session_path_matches_gather(folders, image):
    p = vlmdecode.load(folders["fp16"], "cuda", "device", embed_via="session")
    ref = _tokens(folders["fp16"], "cuda", "eager", image).tokens
    r = p.generate(PROMPT, image=image, max_new_tokens=STEPS, stop=())
    assert r.tokens == ref
    assert all(s.h2d_bytes == 0 and s.d2h_bytes <= 8 for s in r.steps[1:])


@pytest.mark.parametrize("layout", FP16_LAYOUTS)
def test_cuda_logits_match_float64_reference_every_step(folders, image, layout):
    from vlmdecode.reference import Reference

    p = vlmdecode.load(folders[layout], "cuda", "graph")
    ids, x = p.prepare(PROMPT, image)
    ref = Reference.load(folders[layout])
    cache = ref.new_cache()
    feats = ref.vision(p.processor.preprocess([image], dtype=np.float32).astype(np.float64))
    r_logits = ref.decode(ref.embed(ids, feats), cache)[:, -1]
    dec = p.decoder
    rt = cupy.cuda.runtime  # host sampling downloads into page-locked memory (one DMA per step)
    assert rt.pointerGetAttributes(dec.logits_host.ctypes.data).type == rt.memoryTypeHost
    with dec.generation():
        logits = dec.prefill(x)
        worst = 0.0
        for step in range(STEPS):
            err = np.abs(logits.astype(np.float64) - r_logits[0]).max() / np.abs(r_logits[0]).max()
            worst = max(worst, err)
            assert err < 2e-2, f"step {step}: relative error {err:.2e}"
            tok = int(np.argmax(r_logits[0]))
            assert int(np.argmax(logits)) == tok, f"step {step}"
            logits = dec.step(p.token_input(tok))
            r_logits = ref.decode(ref.embed(np.array([[tok]]), None), cache)[:, -1]
    print(f"{layout}: worst CUDA fp16 vs float64 relative max error over {STEPS} steps: {worst:.2e}")


def test_graph_counters(folders, image):
    p = vlmdecode.load(folders["fp16"], "cuda", "graph")
    r = p.generate(PROMPT, image=image, max_new_tokens=STEPS, stop=())
    c = r.counters
    decode_steps = STEPS - 1
    assert c["captured"] == 1
    assert c["eager_steps"] == 0  # the first decode step's Run captures (onnxruntime warms up inside it)
    assert c["replayed"] == decode_steps - 1
    e = vlmdecode.load(folders["fp16"], "cuda", "eager").generate(PROMPT, image=image, max_new_tokens=8, stop=())
    assert e.counters["replayed"] == 0 and e.counters["captured"] == 0


def test_stale_binding_changes_output_in_eager_but_not_in_graph(folders, image):
    results = {}
    for mode in ("eager", "graph"):
        p = vlmdecode.load(folders["fp16"], "cuda", mode)
        dec = p.decoder
        _, x = p.prepare(PROMPT, image)
        with dec.generation():
            dec.prefill(x)
            emb = p.token_input(42)
            for _ in range(4):
                dec.step(emb)
            before = dec.position
            other = cupy.asarray(p.token_input(43))
            dec.io_step.bind_input(dec.name_x, "cuda", 0, dec.dtype, list(other.shape), other.data.ptr)
            with dec.stream:
                dec.feed(emb)
                dec.run_step()
                results[mode] = (dec._read_logits(dec.logits_step), before)
    # same position, same cache contents: eager read token 43 (new binding), graph replayed token 42
    assert not np.allclose(results["eager"][0], results["graph"][0])


@pytest.mark.parametrize("layout", FP16_LAYOUTS)
def test_no_memcpy_nodes_in_captured_decoder(folders, layout):
    p = vlmdecode.load(folders[layout], "cuda", "graph")
    assert memcpy_nodes(p.decoder.session) == []


def test_transfer_bytes_per_step(folders, image):
    H = preset("tiny").hidden_size
    V = preset("tiny").vocab_size
    for mode in ("eager", "graph"):
        r = _tokens(folders["fp16"], "cuda", mode, image)
        for s in r.steps[1:]:
            assert s.h2d_bytes == H * 2 + 8 + 8, (mode, s)  # embedding fp16 + position + mask slot
            assert s.d2h_bytes == V * 2  # logits for host sampling
            assert s.kv_bytes == 0
    r = _tokens(folders["fp16"], "cuda", "device", image)
    for s in r.steps[1:]:
        assert s.h2d_bytes == 0 and s.d2h_bytes <= 8 and s.kv_bytes == 0, s


def test_bad_input_errors(folders, image):
    n = cupy.cuda.runtime.getDeviceCount()
    with pytest.raises(CudaUnavailableError, match=f"cuda:{n}"):
        vlmdecode.load(folders["fp16"], f"cuda:{n}", "eager")
    with pytest.raises(ValueError, match="Concat"):
        vlmdecode.load(folders["onnx16"], "cuda", "graph")
    with pytest.raises(ValueError, match="float32"):
        vlmdecode.load(folders["fp32"], "cuda", "graph")
    p = vlmdecode.load(folders["fp16"], "cuda", "graph")
    with pytest.raises(ValueError, match="max_length"):
        p.generate(PROMPT, image=image, max_new_tokens=p.decoder.max_length)


def test_onnx_variant_runs_eager_on_cuda(folders, image):
    r = _tokens(folders["onnx16"], "cuda", "eager", image)
    assert len(r.tokens) == STEPS and all(s.kv_bytes == 0 for s in r.steps)


@pytest.mark.xfail(strict=True, reason="onnxruntime-gpu 1.31.1 on the H200: with a fresh gpu_graph_id per generation "
                   "device memory grows ~0.29 MiB a generation, with or without release_captured_graph "
                   "(data/results/h200_graph_memory.json); the default, one graph per decoder, stays flat (next test)")
def test_memory_flat_over_200_generations_with_a_fresh_graph_id_each(folders, image):
    p = vlmdecode.load(folders["fp16"], "cuda", "device", graph_per_generation=True)
    q = vlmdecode.load(folders["fp16"], "cuda", "graph", graph_per_generation=True)
    pool = cupy.get_default_memory_pool()
    ids, free = set(), {}
    for n in range(1, 201):
        p.generate(PROMPT, image=image, max_new_tokens=8, stop=())
        ids.add(p.decoder.graph_id)
        if n in (10, 100, 200):
            gc.collect()  # earlier tests' pipelines must not free memory inside the window
            pool.free_all_blocks()
            free[n] = cupy.cuda.runtime.memGetInfo()[0]
    q.generate(PROMPT, image=image, max_new_tokens=8, stop=())
    assert len(ids) == 200 and q.decoder.graph_id not in ids
    moved = {k: (free[10] - v) / 2**20 for k, v in free.items()}
    print(f"device memory used since generation 10, MiB: {moved}")
    assert abs(free[100] - free[200]) < 16 << 20, f"device memory moved by {moved} MiB"


def test_token_id_decoder_graph_equals_embeds_decoder(folders, image):
    text = folders["fp16"] / "text"
    a = vlmdecode.load(text, "cuda", "graph").generate("Hello", max_new_tokens=STEPS, stop=())
    b = vlmdecode.load(folders["fp16"], "cuda", "graph").generate("Hello", max_new_tokens=STEPS, stop=())
    assert a.tokens == b.tokens
    d = vlmdecode.load(text, "cuda", "device").generate("Hello", max_new_tokens=STEPS, stop=())
    assert d.tokens == a.tokens


@pytest.mark.parametrize("layout", FP16_LAYOUTS)
def test_genai_cuda_same_tokens(folders, image, layout):
    peer = pytest.importorskip("vlmdecode.peer")
    if not peer.genai_available():
        pytest.skip("onnxruntime-genai not installed")
    p = vlmdecode.load(folders[layout], "cuda", "graph")
    ids, _ = p.prepare(PROMPT, image)
    px = p.processor.preprocess([image], dtype=np.float16)
    ours = p.generate(PROMPT, image=image, max_new_tokens=16, stop=()).tokens
    theirs = peer.genai_greedy(folders[layout], ids[0], 16, pixel_values=px, device="cuda", cuda_graph=True)
    assert theirs.tokens[: len(ours)] == ours[: len(theirs.tokens)] and len(theirs.tokens) > 0


def test_memory_flat_over_200_generations_one_graph_per_decoder(folders, image):
    """The default: one gpu_graph_id for the decoder's life; two pipelines never share an id."""
    p = vlmdecode.load(folders["fp16"], "cuda", "device")
    q = vlmdecode.load(folders["fp16"], "cuda", "graph")
    pool = cupy.get_default_memory_pool()
    free, tokens = {}, set()
    for n in range(1, 201):
        tokens.add(tuple(p.generate(PROMPT, image=image, max_new_tokens=8, stop=()).tokens))
        if n in (10, 200):
            gc.collect()
            pool.free_all_blocks()
            free[n] = cupy.cuda.runtime.memGetInfo()[0]
    assert len(tokens) == 1  # every generation replays the same graph and gets the same tokens
    assert p.decoder.counters()["captured"] == 1
    q.generate(PROMPT, image=image, max_new_tokens=8, stop=())
    assert q.decoder.graph_id != p.decoder.graph_id and min(p.decoder.graph_id, q.decoder.graph_id) > 0
    assert abs(free[10] - free[200]) < 4 << 20, f"moved {(free[10] - free[200]) / 2**20:.1f} MiB"


def test_profile_generation_device_times(folders):
    from vlmdecode.profiling import profile_generation

    for mode in ("eager", "graph", "device"):
        p = vlmdecode.load(folders["fp16"], "cuda", mode, time_steps=True)
        df = profile_generation(p, context=32, new_tokens=12)
        dev = df["device_ms"].iloc[1:]
        assert len(df) == 12 and df["device_ms"].isna().iloc[0] and (dev > 0).all(), (mode, df)
        # the host time around the run that produced token i: its own record, and with queue_ahead (graph) or
        # device mode's lookahead (decoders.token_ring) the previous record too (where that run was launched) and
        # the detokenizer between them
        host = df["ms"]
        if p.decoder.queue_ahead or (mode == "device" and p.decoder.lookahead):
            host = host + (df["ms"] + df["detok_seconds"] * 1e3).shift(1)
        assert (dev <= host.iloc[1:] * 1.5 + 0.05).all(), (mode, df[["ms", "device_ms"]])


# ---- the one decode loop on CUDA: sampling, sync_every, stream(), generate_from_embeds, bad rows ---------------
SAMPLED = dict(do_sample=True, temperature=1.0, top_k=0, top_p=0.95)


@pytest.mark.parametrize("seed", [0, 1, 2**40 + 3])
def test_same_seed_same_sampled_tokens_in_every_mode(folders, image, seed):
    """Philox draws (seed, step) are the same bits on the host and the GPU: mode changes speed, never tokens."""
    runs = {m: _tokens(folders["fp16"], "cuda", m, image, seed=seed, **SAMPLED).tokens for m in ("eager", "graph",
                                                                                                 "device")}
    assert runs["eager"] == runs["graph"] == runs["device"], runs
    other = _tokens(folders["fp16"], "cuda", "device", image, seed=seed + 1, **SAMPLED).tokens
    assert other != runs["device"]  # the seed matters


@pytest.mark.parametrize("sync_every", [3, 8])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_device_mode_sync_every(folders, image, sync_every, sampled):
    kw = dict(seed=5, **SAMPLED) if sampled else {}
    want = _tokens(folders["fp16"], "cuda", "graph", image, **kw).tokens
    p = vlmdecode.load(folders["fp16"], "cuda", "device", sync_every=sync_every)
    r = p.generate(PROMPT, image=image, max_new_tokens=STEPS, stop=(), **kw)  # 40: not a multiple of 3
    assert r.tokens == want
    assert all(s.d2h_bytes == 8 and s.h2d_bytes == 0 for s in r.steps[1:])
    # between two ring reads the host waits on nothing: steps that did not read are cheap
    assert sorted(s.seconds for s in r.steps[1:])[len(r.steps) // 2] < max(s.seconds for s in r.steps[1:])


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_device_mode_lookahead_is_the_default_and_changes_no_token(folders, image, sampled):
    """The default loop reads each token while the next step runs (decoders.token_ring); the plain loop
    (lookahead=False) gives the same tokens. A stop id ends a generation with the next step queued (one run more)
    and the next generation starts over from its prefill."""
    kw = dict(seed=5, **SAMPLED) if sampled else {}
    p = vlmdecode.load(folders["fp16"], "cuda", "device")
    plain = vlmdecode.load(folders["fp16"], "cuda", "device", lookahead=False)
    assert p.decoder.lookahead and not plain.decoder.lookahead
    full = p.generate(PROMPT, image=image, max_new_tokens=STEPS, stop=(), **kw).tokens
    assert full == plain.generate(PROMPT, image=image, max_new_tokens=STEPS, stop=(), **kw).tokens
    before = p.decoder.steps_run
    cut = p.generate(PROMPT, image=image, max_new_tokens=STEPS, stop=(full[5],), **kw).tokens
    n = full.index(full[5]) + 1
    assert cut == full[:n] and p.decoder.steps_run == before + n  # n - 1 runs fed back, one queued ahead
    assert p.generate(PROMPT, image=image, max_new_tokens=STEPS, stop=(), **kw).tokens == full


@pytest.mark.parametrize("mode", ["eager", "graph", "device"])
def test_stream_and_generate_from_embeds(folders, image, mode):
    p = vlmdecode.load(folders["fp16"], "cuda", mode)
    want = p.generate(PROMPT, image=image, max_new_tokens=12, stop=())
    it = p.stream(PROMPT, image=image, max_new_tokens=12, stop=())
    first = [next(it) for _ in range(3)]
    it.close()  # abandoned mid-generation: the next one starts clean
    recs = list(p.stream(PROMPT, image=image, max_new_tokens=12, stop=()))
    assert [r.token for r in recs] == want.tokens and [r.token for r in first] == want.tokens[:3]
    assert "".join(r.text for r in recs) == want.text
    _, x = p.prepare(PROMPT, image)
    assert p.generate_from_embeds(x, max_new_tokens=12, stop=()).tokens == want.tokens


@pytest.mark.parametrize("mode", ["graph", "device"])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_all_minus_inf_row_is_an_error_on_host_and_device(folders, image, mode, sampled, monkeypatch):
    """Nothing to pick: host sampling (graph) and device sampling both raise NonFiniteLogitsError at that step."""
    from vlmdecode.sampling import NonFiniteLogitsError

    p = vlmdecode.load(folders["fp16"], "cuda", mode)
    dec = p.decoder
    run = dec.run_step

    def poisoned():
        run()
        if dec.steps_run == 2:  # the second decode step of this fresh decoder: token 2
            if dec.logits_step.mapped:  # host sampling: host memory the queued run writes; poison it once written
                dec.stream.synchronize()
            dec.logits_step.array.fill(-np.inf)  # device mode: on the decoder's stream, ordered after the run

    monkeypatch.setattr(dec, "run_step", poisoned)
    kw = dict(seed=1, **SAMPLED) if sampled else {}
    from vlmdecode.generation import GenerationError

    with pytest.raises(GenerationError, match="step 2") as e:  # the two tokens made before it are kept
        p.generate(PROMPT, image=image, max_new_tokens=8, stop=(), **kw)
    assert isinstance(e.value.__cause__, NonFiniteLogitsError) and len(e.value.tokens) == 2
    monkeypatch.setattr(dec, "run_step", run)
    assert len(p.generate(PROMPT, image=image, max_new_tokens=8, stop=()).tokens) == 8  # usable afterwards


def test_replay_ms_runs_the_loop(folders, image):
    from vlmdecode.decoders.cuda import replay_ms

    p = vlmdecode.load(folders["fp16"], "cuda", "graph")
    _, x = p.prepare(PROMPT, image)
    before = p.decoder.counters()["generations"]
    ms = replay_ms(p.decoder, x, n=20)
    assert 0 < ms < 50 and p.decoder.counters()["generations"] == before + 1
