"""The native decoder's Python side on the CPU: set-up, the step's launches and the device loop, with each
kernel replaced by numpy doing what its arguments say (tests/native_emulator.py) and onnxruntime's prefill
by `native.numpy_exec`. Tokens and logits must follow numpy_exec's float64 run of the same plan; a wrong
pointer, buffer, residual ping-pong, split-K partial count or launch order would not. The CUDA code itself
is tested on a GPU (tests/test_native_cuda.py)."""

from __future__ import annotations

import gc
import sys
import types
import weakref

import native_emulator as emu  # tests/ is on sys.path (pytest's rootdir insertion)
import numpy as np
import prefill_emulator as pemu
import pytest

from vlmdecode.buffers import allocate
from vlmdecode.fixture import build_fixture, preset
from vlmdecode.kvcache import FixedKV
from vlmdecode.modelfolder import ModelFolder
from vlmdecode.native import decoder as ND
from vlmdecode.native import kernels as K
from vlmdecode.native import prefill as NP
from vlmdecode.native.numpy_exec import NumpyDecoder
from vlmdecode.native.plan import PlanError
from vlmdecode.native.shapes import Shapes
from vlmdecode.profiling import prompt_ids
from vlmdecode.sampling import Sampler, SamplingParams
from vlmdecode.transfers import Transfers


class FakeDevice:
    is_cuda, index, kind = True, 0, "cuda"


class FakeOrt:
    """CudaDecoder's part the native decoder uses (eager prefill into FixedKV), computed by numpy_exec."""

    capacities = None  # per-layer KV capacities (None: max_length everywhere)

    def __init__(self, folder, device, mode, max_length=None):
        assert mode == "eager"
        self.folder, self.device, self.transfers = folder, FakeDevice(), Transfers()
        self.max_length = max_length or folder.max_length
        self.stream = sys.modules["cupy"].cuda.Stream()
        self.stream_ptr = 0
        info = folder.info
        caps = self.capacities or [self.max_length] * info.num_layers
        self.kv = FixedKV(caps, info.num_kv_heads, info.head_size, self.max_length, np.float16, self.device)
        self.ref = self.cache = None
        embeds = info.drive == "embeds"  # the prompt path's staging: what the native prefill reads
        x = allocate((1, self.max_length, info.hidden_size) if embeds else (1, self.max_length),
                     np.float16 if embeds else np.int64, self.device)
        self.prefill_buffers = types.SimpleNamespace(x=x)

    def prefill_on_device(self, x):
        self.kv.reset()
        self.cache = self.ref.new_cache()
        inputs = x[0].astype(np.float64) if x.dtype != np.int64 else x[0]
        logits = self.ref.forward(inputs, self.cache)  # [S, V]
        for i in range(len(self.kv.keys)):
            n = self.cache.rows[i]
            m = min(n, self.kv.keys[i].array.shape[-2])  # a windowed buffer: the last C positions, oldest in row 0
            self.kv.keys[i].array[0, :, :m] = self.cache.keys[i][:, n - m:n].astype(np.float16)
            self.kv.values[i].array[0, :, :m] = self.cache.values[i][:, n - m:n].astype(np.float16)
        S = logits.shape[0]
        self.kv.advance(S)
        buf = allocate((1, S, logits.shape[1]), np.float16, self.device)
        buf.array[0] = logits.astype(np.float16)
        return buf, (S - 1) * logits.shape[1]  # the logits and the offset of the last row


@pytest.fixture
def fake(monkeypatch):
    cp = emu.fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(K, "_modules", {})  # never leave emulated kernels in the real cache
    monkeypatch.setattr(NP, "_modules", {})
    monkeypatch.setattr(ND, "CudaDecoder", FakeOrt)
    cp.cublas = pemu.install(cp)
    monkeypatch.setattr(NP, "_libcublas", lambda: cp.cublas)
    return cp


CONFIGS = {
    "tiny": dict(),  # 3 layers, 2 KV heads of 16, window 16, no split-K
    "split-k": dict(hidden_size=128, num_heads=4, num_kv_heads=1, head_dim=256, intermediate_size=2560, num_layers=6,
                    sliding_window_pattern=6, vocab_size=1000),  # gemma3-1b's head layout, 2 down slices
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("wiring")
    return {(name, layout): build_fixture(preset("tiny", dtype="fp16", layout=layout, **kw), root / f"{name}-{layout}")
            for name, kw in CONFIGS.items() for layout in ("unfused", "fused-cuda")}


def _decoder(folder, shapes=None, sync_every=3, prefill="onnxruntime", **options):
    dec = ND.build(ModelFolder.load(folder), FakeDevice(), "native", sync_every=sync_every, shapes=shapes,
                   prefill=prefill, **options)
    dec.ort.ref = NumpyDecoder(dec.plan, dec.max_length, np.float64)
    return dec


@pytest.mark.parametrize("config,layout,variant", [
    ("tiny", "unfused", "default"), ("tiny", "fused-cuda", "other"), ("split-k", "fused-cuda", "default"),
    ("split-k", "unfused", "other")])
def test_device_loop_follows_numpy_exec(fake, folders, config, layout, variant):
    shapes = None
    if variant != "default":  # attention_cl, finer split-K, another head shape
        shapes = Shapes(attn_batch=8, attn_cluster=8, attn_clusters=1, attn_clusters_global=2, attn_threads=128,
                        attn_cluster_keys=64, slice_target=640, head=(4, 2), gate_up=(8, 4, 1, 3))
    # each token read before the next step is queued (lookahead off): dec.logits are that token's row
    dec = _decoder(folders[config, layout], shapes, sync_every=1, lookahead=False)
    plan, steps = dec.plan, 12
    if shapes is not None:  # two clusters a KV head on the layers with no window, one on the windowed
        grids = [L.grid[0] for L in dec.body if L.name.endswith(".attn")]
        assert grids == [8 * (2 if P.window is None else 1) for P in plan.layers] and 16 in grids and 8 in grids
        # attention_cl's 16th argument: the keys a cluster takes before the next joins (the chunked kernel's chunk)
        assert {int(L.args[15]) for L in dec.body if L.name.endswith(".attn")} == {64}
        # gate|up's grid capped at 3 blocks (its shape's fourth element): fewer than its row groups (tiny: 4 of
        # 16 (gate, up) pairs), which stride over them
        assert {L.grid[0] for L in dec.body if L.name.endswith(".gate_up")} == {3}
    assert dec.kernels_per_step() == 5 * plan.num_layers + 2 and dec.counters()["kernels_per_step"] == len(dec.body) + 1
    ids = prompt_ids(10)
    x = np.asarray(dec.table)[ids] if plan.drive == "embeds" else ids
    toks = []
    for tok in dec.generate(x, steps, Sampler(SamplingParams())):
        toks.append(tok)
        if len(toks) > 1:  # the logits this token was picked from, vs numpy_exec fed the same tokens
            ref = dec.ort.ref.forward(np.asarray(dec.table)[toks[-2]][None].astype(np.float64)
                                      if plan.drive == "embeds" else np.array([toks[-2]]), dec.ort.cache)[-1]
            got = np.asarray(dec.logits, np.float64)
            assert np.abs(got - ref).max() < 2e-2 * np.abs(ref).max(), len(toks)
            assert tok == int(np.argmax(np.asarray(dec.logits, np.float32)))
    assert len(toks) == steps and dec.position == 10 + steps - 1
    c = dec.counters()
    assert c["captured"] == 1 and c["replayed"] == steps - 1 and c["generations"] == 1
    assert [s.d2h for s in dec.transfers.steps[1:]] == [8] * (steps - 1)
    assert all(s.h2d == 0 for s in dec.transfers.steps[1:])
    # one graph, launched per step: the emulated launches are the body + advance, in the body's order
    fake.state.launches.clear()
    for _ in dec.generate(x, 2, Sampler(SamplingParams())):
        pass
    assert fake.state.launches[-len(dec.body) - 1:] == [b.fn.name for b in dec.body] + ["advance"]
    # suppressed ids are never picked (the prefill's argmax and the head kernel's): suppress this run's tokens
    sup = tuple(sorted(set(toks[:3])))
    other = list(_decoder(folders[config, layout], shapes, sync_every=1).generate(
        x, 6, Sampler(SamplingParams(suppress=sup))))
    assert not set(other) & set(sup)
    # the id ring read every 3 tokens, or each token while the next step runs, gives the same tokens
    batched = _decoder(folders[config, layout], shapes, sync_every=3)
    assert list(batched.generate(x, steps, Sampler(SamplingParams()))) == toks
    ahead = _decoder(folders[config, layout], shapes, sync_every=1)
    assert ahead.lookahead  # the default
    with ahead.loop_order(lookahead=False):  # the plain loop for one block of calls, then the default again
        assert list(ahead.generate(x, steps, Sampler(SamplingParams()))) == toks and not ahead.lookahead
    assert ahead.lookahead and ahead.counters()["replayed"] == steps - 1
    assert list(ahead.generate(x, steps, Sampler(SamplingParams()))) == toks
    assert ahead.counters()["replayed"] == 2 * (steps - 1) and len(ahead.transfers.steps) == steps
    # a caller that stops after 4 tokens: lookahead has queued the step after the 4th (one extra replay, the KV
    # one position on); the next generation starts over from its prefill and gives the same tokens
    gen = ahead.generate(x, steps, Sampler(SamplingParams()))
    assert [next(gen) for _ in range(4)] == toks[:4]
    gen.close()
    assert ahead.counters()["replayed"] == 2 * (steps - 1) + 4 and ahead.position == 10 + 4
    assert list(ahead.generate(x, steps, Sampler(SamplingParams()))) == toks


def test_a_launch_keeps_the_arrays_behind_its_addresses(fake):
    """A Launch's arguments are raw addresses (`kernels.pack`): the arrays behind them stay referenced by it, so a
    caller that lets a temporary go cannot have its memory freed and reused before the launch runs."""
    fns = K.compile_module({(K.loads_per_lane(64), 2, K.EPI_PLAIN, 1)}, set())
    W, x, y = fake.asarray(np.ones((16, 64), np.float16)), fake.asarray(np.full(64, 0.5, np.float32)), fake.zeros(16)
    refs = [weakref.ref(a) for a in (W, x)]
    launch = K.gemv(fns, "t", W, 16, 64, y=y, src=x, warps=1, rpw=2)
    del W, x
    gc.collect()
    assert all(r() is not None for r in refs) and {id(r()) for r in refs} <= {id(a) for a in launch.held}
    assert int(launch.args[0]) == refs[0]().data.ptr and int(launch.args[5]) == 0  # x_in: NULL
    launch()
    assert np.array_equal(np.asarray(y), np.full(16, 32.0))


def test_host_fed_step_and_rebuild(fake, folders):
    dec = _decoder(folders["split-k", "fused-cuda"])
    ids = prompt_ids(12)
    x = np.asarray(dec.table)[ids]
    dec.ort.prefill_on_device(x)
    tok = 7
    logits = dec.step(np.asarray(dec.table)[tok][None, None])
    ref = dec.ort.ref.forward(np.asarray(dec.table)[tok][None].astype(np.float64), dec.ort.cache)[-1]
    assert logits.dtype == np.float32 and np.abs(logits - ref).max() < 2e-2 * np.abs(ref).max()
    assert dec.position == 13 and dec.transfers.steps[-1].h2d == dec.plan.hidden * 2 + 8
    dec.rebuild(Shapes(qkv=(8, 4), down=(8, 1), slice_target=1280, attn_chunk=8))
    assert dec.ksd == 2 and dec.captured == 1 and not dec._graphs  # the new shapes capture afresh
    # the default loop's greedy step: the layers, head_bound + head_pick + advance (the bounded head)
    assert dec.counters()["head"] == "bounded" and dec.counters()["kernels_per_step"] == 5 * dec.plan.num_layers + 3
    assert dec.kernels_per_step(greedy=False) == len(dec.body) == 5 * dec.plan.num_layers + 1


@pytest.mark.parametrize("prompt", [10, 21, 32])
def test_windowed_ring_follows_numpy_exec(fake, folders, prompt):
    """Local layers whose KV buffer holds exactly their window (onnxruntime CUDA's windowed cache, last C
    positions in rows [0, C) after prefill): rotated into a ring once, then read and appended as one
    (attention_cl); the logits follow numpy_exec's full-length cache across the wrap."""
    folder = folders["tiny", "fused-cuda"]
    plan = ND.folder_plan(ModelFolder.load(folder))
    FakeOrt.capacities = [L.window or ModelFolder.load(folder).max_length for L in plan.layers]
    try:
        dec = _decoder(folder, Shapes(attn_batch=2, attn_cluster=2, attn_threads=128), sync_every=1,
                       lookahead=False)  # dec.logits read per token
    finally:
        FakeOrt.capacities = None
    assert dec.ring_layers == [i for i, L in enumerate(plan.layers) if L.window] and dec.ring_layers
    table = np.asarray(dec.table)
    toks = []
    for tok in dec.generate(table[prompt_ids(prompt)], 24, Sampler(SamplingParams())):
        toks.append(tok)
        if len(toks) > 1:
            ref = dec.ort.ref.forward(table[toks[-2]][None].astype(np.float64), dec.ort.cache)[-1]
            got = np.asarray(dec.logits, np.float64)
            assert np.abs(got - ref).max() < 2e-2 * np.abs(ref).max(), len(toks)
    assert len(toks) == 24


def test_refusals(fake, folders, tmp_path):
    with pytest.raises(ValueError, match="builds mode 'native'"):
        ND.build(ModelFolder.load(folders["tiny", "unfused"]), FakeDevice(), "device")
    with pytest.raises(ValueError, match="sync_every"):
        _decoder(folders["tiny", "unfused"], sync_every=0)
    fp32 = build_fixture(preset("tiny"), tmp_path / "fp32")
    with pytest.raises(PlanError, match="fp16"):
        _decoder(fp32)
    FakeOrt.capacities = [256, 20, 256]  # a windowed cache of 20 rows for a window of 16
    try:
        with pytest.raises(PlanError, match="layer 1's KV buffer holds 20 positions"):
            _decoder(folders["tiny", "unfused"])
        FakeOrt.capacities = [16, 16, 256]  # exactly the window: a ring, which only attention_cl reads
        with pytest.raises(PlanError, match=r"layers \[0, 1\] keep a windowed KV buffer"):
            _decoder(folders["tiny", "unfused"], Shapes(attn_batch=0))  # the chunked kernel reads no rings
    finally:
        FakeOrt.capacities = None
    plan = ND.folder_plan(ModelFolder.load(folders["tiny", "unfused"]))
    with pytest.raises(PlanError, match="rotary table"):
        ND.check_plan(plan, plan.layers[0].rope_cos.shape[0] + 1)
    with pytest.raises(ValueError, match="head must be one of"):
        _decoder(folders["tiny", "unfused"], head="int8")
    odd = build_fixture(preset("tiny", dtype="fp16", hidden_size=72), tmp_path / "h72")  # 72: not 16 x n
    with pytest.raises(PlanError, match="multiple of 16"):
        _decoder(odd, head="bounded")
    assert _decoder(odd).counters()["head"] == "full"  # "auto": the full head where the bounded one cannot run


def test_full_head_option(fake, folders):
    """head="full": no int8 copy, the full head in every step (5 a layer + 2); the same tokens as the default."""
    full = _decoder(folders["split-k", "fused-cuda"], head="full")
    assert full.bound_table is None and full.counters()["head"] == "full"
    assert full.kernels_per_step() == 5 * full.plan.num_layers + 2
    auto = _decoder(folders["split-k", "fused-cuda"])
    assert auto.bound_table.q.shape == (auto.plan.vocab, auto.plan.hidden)
    assert auto.kernels_per_step() == len(full.body) + 2
    x, greedy = np.asarray(full.table)[prompt_ids(10)], Sampler(SamplingParams())
    want = list(full.generate(x, 12, greedy))
    assert list(auto.generate(x, 12, greedy)) == want
    six = _decoder(folders["split-k", "fused-cuda"], head_bits=6)  # the 6-bit copy: 3/4 of the int8 bytes
    assert six.counters()["head"] == "bounded6"
    assert six.bound_table.q.shape == (six.plan.vocab, 3 * six.plan.hidden // 4)
    assert list(six.generate(x, 12, greedy)) == want
    with pytest.raises(ValueError, match="head_bits"):
        _decoder(folders["split-k", "fused-cuda"], head_bits=4)


# ---- the native prefill (native.prefill: cuBLAS and its row kernels emulated, tests/prefill_emulator.py) --------
def _kv_rows(kv, S, layout):
    """Per layer, K and V of positions 0..S-1 as the buffer holds them: rows = positions (full), the ring
    (row p % C) or onnxruntime's rows (the last C positions at rows 0.. in order)."""
    out = []
    for buf in (b for pair in zip(kv.keys, kv.values) for b in pair):
        a = np.asarray(buf.array, np.float64)[0]
        C = a.shape[1]
        if C >= S:
            out.append((np.arange(S), a[:, :S]))
        else:
            p = np.arange(S - C, S)
            out.append((p, a[:, p % C] if layout == "ring" else a[:, :C]))
    return out


@pytest.mark.parametrize("config,layout,S,sub", [("tiny", "unfused", 10, ""), ("tiny", "fused-cuda", 64, ""),
                                                 ("split-k", "fused-cuda", 70, ""), ("split-k", "unfused", 1, ""),
                                                 ("tiny", "fused-cuda", 33, "text")])
def test_native_prefill_follows_numpy_exec(fake, folders, config, layout, S, sub):
    """The prefill's GEMMs (column-major cuBLAS calls), row kernels and the hand-off to the step's head: the last
    position's logits, every KV row and the decode steps after it follow numpy_exec's float64 run (text/: a
    decoder driven by input_ids, the table gathered by the prefill's first kernel)."""
    dec = _decoder(folders[config, layout] / sub, sync_every=1, prefill="native", lookahead=False)  # logits per token
    assert dec.plan.drive == ("ids" if sub else "embeds")
    plan, ref = dec.plan, NumpyDecoder(dec.plan, dec.max_length, np.float64)
    table = np.asarray(dec.table)
    ids = prompt_ids(S + 1)[:, :S]
    x = table[ids] if plan.drive == "embeds" else ids
    inputs = x[0].astype(np.float64) if plan.drive == "embeds" else x[0]
    cache = ref.new_cache()
    want = ref.forward(inputs, cache)[-1]
    got = dec.prefill(x)
    assert np.abs(got - want).max() < 2e-2 * np.abs(want).max()
    assert dec.position == S and dec.transfers.steps[-1].h2d == x.nbytes
    for (pos, rows), kv in zip(_kv_rows(dec.kv, S, "ring"), [c for pair in zip(cache.keys, cache.values)
                                                               for c in pair]):
        assert np.abs(rows - kv[:, pos]).max() < 2e-2 * max(1.0, np.abs(kv).max())
    pf = dec._native_prefill
    assert (pf.eager, pf.captured, pf.replayed) == (1, 1, 0)
    assert np.array_equal(dec.prefill(x), got) and pf.replayed == 1  # the bucket's graph = its eager run
    toks, cache = [], ref.new_cache()
    ref.forward(inputs, cache)
    for tok in dec.generate(x, 5, Sampler(SamplingParams())):
        toks.append(tok)
        if len(toks) > 1:
            r = ref.forward(table[toks[-2]][None].astype(np.float64) if plan.drive == "embeds"
                            else np.array([toks[-2]]), cache)[-1]
            assert np.abs(np.asarray(dec.logits, np.float64) - r).max() < 2e-2 * np.abs(r).max(), len(toks)
    assert pf.replayed == 2 and "cublas_batched" in fake.cublas.calls


@pytest.mark.parametrize("serving", [False, True])
def test_native_prefill_windowed_rows(fake, folders, serving):
    """Local layers whose KV buffer holds exactly their window, a prompt longer than it: the native step's ring
    (position p at row p % window) or, serving an onnxruntime decoder's prefill="native", onnxruntime's rows --
    the same rows FakeOrt's numpy prefill writes."""
    folder = folders["tiny", "fused-cuda"]
    mf = ModelFolder.load(folder)
    plan = ND.folder_plan(mf)
    FakeOrt.capacities = [L.window or mf.max_length for L in plan.layers]
    try:
        if serving:
            ort = FakeOrt(mf, FakeDevice(), "eager")
            dec = ND.NativeDecoder(mf, FakeDevice(), ort=ort, shapes=Shapes(attn_batch=2, attn_cluster=2))
        else:
            dec = _decoder(folder, Shapes(attn_batch=2, attn_cluster=2), prefill="native")
    finally:
        FakeOrt.capacities = None
    assert dec.ring_layers and dec._native_prefill.windowed == (2 if serving else 1)
    S = 37
    x = np.asarray(dec.table)[prompt_ids(S)]
    dec.prefill(x)
    mine = _kv_rows(dec.kv, S, "onnxruntime" if serving else "ring")
    dec.ort.ref = NumpyDecoder(plan, dec.max_length, np.float64)
    dec.ort.prefill_on_device(x)  # numpy_exec's K/V in onnxruntime's rows, into the same buffers
    theirs = _kv_rows(dec.kv, S, "onnxruntime")
    for (p, a), (q, b) in zip(mine, theirs):
        assert np.array_equal(p, q) and np.abs(a - b).max() < 2e-2 * max(1.0, np.abs(b).max())


def test_prefill_buckets_and_query_chunks():
    assert [NP.bucket(S, 1072) for S in (1, 64, 65, 1071)] == [64, 64, 128, 1088]
    assert NP.bucket(100, 1072, 32) == 128
    for bad in (0, 1089):
        with pytest.raises(ValueError):
            NP.bucket(bad, 1072)
    assert NP.attention_chunks(1024, None) == [(0, 1024, 0)]
    assert NP.attention_chunks(2048, 512) == [(0, 1024, 0), (1024, 2048, 512)]  # 1024 - 511 aligned down to 64
    assert NP.attention_chunks(192, 16, 32) == [(0, 32, 0), (32, 64, 0), (64, 96, 0), (96, 128, 64),
                                                (128, 160, 64), (160, 192, 128)]


def test_native_prefill_query_chunks_follow_numpy_exec(fake, folders):
    """Query chunks smaller than the prompt, windowed layers whose chunks start past key 0 (k0 > 0): the same
    logits and KV as numpy_exec (the one-chunk path is the default below 1024 positions)."""
    dec = _decoder(folders["tiny", "fused-cuda"], prefill="native")
    dec._native_prefill = NP.NativePrefill(dec, q_chunk=32)
    assert any(k0 > 0 for _, _, k0 in NP.attention_chunks(192, 16, 32))
    ref = NumpyDecoder(dec.plan, dec.max_length, np.float64)
    S = 150
    x = np.asarray(dec.table)[prompt_ids(S)]
    cache = ref.new_cache()
    want = ref.forward(x[0].astype(np.float64), cache)[-1]
    got = dec.prefill(x)
    assert np.abs(got - want).max() < 2e-2 * np.abs(want).max()
    for (pos, rows), kv in zip(_kv_rows(dec.kv, S, "ring"), [c for pair in zip(cache.keys, cache.values)
                                                               for c in pair]):
        assert np.abs(rows - kv[:, pos]).max() < 2e-2 * max(1.0, np.abs(kv).max())


def test_graph_ms_replays_once_warm_then_n_between_events():
    """native.timing.graph_ms (StepTiming.replay_ms and the H200 scripts): one warm replay outside the events,
    then n, and the events' ms over n."""
    from vlmdecode.native.timing import graph_ms

    order = []

    class Event:
        def record(self):
            order.append("record")

        def synchronize(self):
            order.append("sync")

    class Graph:
        def launch(self, stream):
            order.append("launch")

    class Stream:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(Event=Event, get_elapsed_time=lambda a, b: 30.0))
    assert graph_ms(cp, Stream(), Graph(), n=3) == 10.0
    assert order == ["launch", "record", "launch", "launch", "launch", "record", "sync"]


def _tokens_near_reference(dec, x, steps):
    """dec's greedy tokens (a plain loop, lookahead off), each step's logits near the float64 reference's."""
    toks = []
    for tok in dec.generate(x, steps, Sampler(SamplingParams())):
        toks.append(tok)
        if len(toks) > 1:
            ref = dec.ort.ref.forward(np.asarray(dec.table)[toks[-2]][None].astype(np.float64), dec.ort.cache)[-1]
            assert np.abs(np.asarray(dec.logits, np.float64) - ref).max() < 2e-2 * np.abs(ref).max(), len(toks)
    return toks


def test_tiled_gate_up_follows_numpy_exec(fake, folders):
    """Shapes.gate_up_tiled: gate|up as gemv_tiled over each layer's tiled copy; the same tokens as the gemv_split
    step's and logits near numpy_exec's; a rebuild without it lets the copies go; the decoder's default takes it."""
    folder, steps = folders["split-k", "fused-cuda"], 8
    x = np.asarray(_decoder(folder).table)[prompt_ids(10)]
    base = list(_decoder(folder, Shapes.for_head_dim(256), sync_every=1).generate(x, steps, Sampler(SamplingParams())))
    dec = _decoder(folder, Shapes.for_head_dim(256).with_overrides({"gate_up_tiled": [4, 8, 4]}), sync_every=1,
                   lookahead=False)
    names = {L.fn.name for L in dec.body if L.name.endswith(".gate_up")}
    assert names == {"gemv_tiled<1,4,8,4,1>"} and all("w_gate_up_t" in W for W in dec.layers)
    toks = _tokens_near_reference(dec, x, steps)
    assert toks == base and dec.kernels_per_step() == 5 * dec.plan.num_layers + 2
    dec.rebuild(Shapes.for_head_dim(256))
    assert not any("w_gate_up_t" in W for W in dec.layers)
    assert {L.fn.name for L in dec.body if L.name.endswith(".gate_up")} == {"gemv_split<1,2>"}
    default = _decoder(folder)
    assert default.shapes.gate_up_tiled == (16, 8, 0)
    assert {L.fn.name for L in default.body if L.name.endswith(".gate_up")} == {"gemv_tiled<1,16,8,0,1>"}


def test_tiled_down_follows_numpy_exec(fake, folders):
    """Shapes.down_tiled: down's split-K slices as gemv_tiled over each layer's tiled copy; the same tokens as the
    row-major step's, logits near the float64 reference; a rebuild without it lets the copies go."""
    folder, steps = folders["split-k", "fused-cuda"], 8
    default = _decoder(folder)
    x = np.asarray(default.table)[prompt_ids(10)]
    assert default.shapes.down_tiled == (16, 8, 0)  # the decoder's default where down's slices tile (for_model)
    rows = default.shapes.with_overrides({"down_tiled": []})
    base = list(_decoder(folder, rows, sync_every=1).generate(x, steps, Sampler(SamplingParams())))
    dec = _decoder(folder, rows.with_overrides({"down_tiled": [4, 8, 0]}), sync_every=1, lookahead=False)
    assert dec.ksd > 1  # the split-k fixture: down's launches take several slices
    names = {L.fn.name for L in dec.body if L.name.endswith(".down")}
    k = dec.plan.intermediate // dec.ksd
    assert names == {f"gemv_tiled<{-(-k // 64 // 8)},4,8,0,0>"} and all("w_down_t" in W for W in dec.layers)
    assert {L.grid[1] for L in dec.body if L.name.endswith(".down")} == {dec.ksd}
    toks = _tokens_near_reference(dec, x, steps)
    assert toks == base and dec.kernels_per_step() == 5 * dec.plan.num_layers + 2
    dec.rebuild(dec.shapes.with_overrides({"down_tiled": []}))
    assert not any("w_down_t" in W for W in dec.layers)
    assert {L.fn.name.split("<")[0] for L in dec.body if L.name.endswith(".down")} == {"gemv"}


@pytest.mark.parametrize("field,cls,tiled,epi", [("o_tiled", "o", [8, 8, 0], 0), ("qkv_tiled", "qkv", [16, 16, 0], 3)])
def test_tiled_o_and_qkv_follow_numpy_exec(fake, folders, field, cls, tiled, epi):
    """Shapes.o_tiled / qkv_tiled: o, or qkv with its fold (EPI_FOLD), as gemv_tiled over each layer's one-slice
    tiled copy; the row-major step's tokens, logits near the float64 reference; a rebuild without it lets the copies
    go."""
    folder, steps = folders["split-k", "fused-cuda"], 8
    default = _decoder(folder)
    x = np.asarray(default.table)[prompt_ids(10)]
    row = default.shapes.with_overrides({field: []})  # the row-major gemv (for_model tiles o and qkv)
    base = list(_decoder(folder, row, sync_every=1).generate(x, steps, Sampler(SamplingParams())))
    dec = _decoder(folder, default.shapes.with_overrides({field: tiled}), sync_every=1, lookahead=False)
    body = [L for L in dec.body if L.name.endswith(f".{cls}")]
    assert {(L.fn.name.split("<")[0], L.fn.name.split(",")[-1]) for L in body} == {("gemv_tiled", f"{epi}>")}
    assert {L.grid[1] for L in body} == {1} and all(f"w_{cls}_t" in W for W in dec.layers)
    assert _tokens_near_reference(dec, x, steps) == base
    dec.rebuild(row)
    assert not any(f"w_{cls}_t" in W for W in dec.layers)
    assert {L.fn.name.split("<")[0] for L in dec.body if L.name.endswith(f".{cls}")} == {"gemv"}
