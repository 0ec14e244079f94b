"""The CUDA host step (decoders.cuda, "The host step"): mapped logits, scalars queued behind the run, the queue-ahead
loop. Run on a GPU with `pytest -m cuda`; skipped without one. The CPU side of the loop: test_host_step.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_gate import require_cuda

pytestmark = pytest.mark.cuda

cupy, ort = require_cuda()

import vlmdecode  # noqa: E402
from vlmdecode.buffers import allocate_mapped  # noqa: E402
from vlmdecode.devices import parse_device  # noqa: E402
from vlmdecode.profiling import prompt_ids  # noqa: E402
from vlmdecode.sampling import Sampler, SamplingParams  # noqa: E402

SAMPLED = SamplingParams(do_sample=True, seed=5, top_k=40, temperature=0.9)


@pytest.fixture(scope="module")
def fp16(fixture_folder):
    return fixture_folder("tiny", dtype="fp16")


@pytest.fixture(scope="module")
def pipes(fp16):
    return {m: vlmdecode.load(fp16, "cuda", m) for m in ("eager", "graph", "device")}


def test_allocate_mapped_is_host_memory_the_gpu_writes():
    dev = parse_device("cuda")
    b = allocate_mapped((3, 5), np.float16, dev)
    rt = cupy.cuda.runtime
    assert b.mapped and isinstance(b.array, np.ndarray) and b.array.shape == (3, 5) and not b.array.any()
    assert rt.pointerGetAttributes(b.ptr).type == rt.memoryTypeHost
    # a kernel writes through the device address; after the sync the host reads it, no copy call
    mem = cupy.cuda.UnownedMemory(b.ptr, b.nbytes, b, 0)
    view = cupy.ndarray((3, 5), np.float16, cupy.cuda.MemoryPointer(mem, 0))
    view[...] = cupy.arange(15, dtype=cupy.float16).reshape(3, 5)
    assert b.copy_to_host(2, 1).tolist() == [1, 2]  # waits for the current stream: the kernel's writes are in
    assert b.array.reshape(-1).tolist() == list(range(15))
    b.write_scalar(99, offset=14)  # host write, immediate
    assert view[2, 4].item() == 99


def test_host_modes_map_their_logits_device_mode_does_not(pipes):
    for mode, p in pipes.items():
        dec = p.decoder
        assert dec.logits_step.mapped == (mode != "device"), mode
        assert dec.queue_ahead == (mode == "graph")
        if mode != "device":
            assert dec.logits_host.ctypes.data == dec.logits_step.array.ctypes.data
            assert not dec.prefill_buffers.logits or not dec.prefill_buffers.logits.mapped  # prompt rows stay on GPU


def test_mapped_step_logits_equal_device_logits(pipes):
    """The same steps: logits written into mapped host memory (graph) == logits copied down (device mode's
    decoder, whose logits_step is device memory), bit for bit; reuse=True is the decoder's one array."""
    x = pipes["graph"].embed(prompt_ids(20), None)
    rows = {}
    for mode in ("graph", "device"):
        dec = pipes[mode].decoder
        with dec.generation():
            out = [dec.prefill(x)]
            for tok in (100, 70, 250, 31, 90, 120):  # past onnxruntime's warm-up and capture runs
                r = dec.step(dec.token_input(tok), reuse=True)
                assert r is dec.logits_host and r.dtype == np.float16
                out.append(r.astype(np.float32))
        rows[mode] = out
    for a, b in zip(rows["graph"], rows["device"]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("params", [SamplingParams(), SAMPLED])
def test_queue_ahead_equals_plain_loop_on_cuda(pipes, mode, params):
    """Same tokens, same byte records, same counters' replays, same final position as Decoder.generate's loop."""
    p = pipes[mode]
    dec = p.decoder
    x = p.embed(prompt_ids(30), None)
    list(dec.generate(x, 5, Sampler(SamplingParams())))  # the graph id's warm-up and capture are behind us
    out = []
    for ahead in (False, True):
        dec.queue_ahead = ahead
        try:
            before = dec.counters()["replayed"]
            toks = list(dec.generate(x, 40, Sampler(params)))
            recs = [(s.h2d, s.d2h) for s in dec.transfers.steps]
            out.append((toks, recs, dec.position, dec.counters()["replayed"] - before))
        finally:
            del dec.queue_ahead
    assert out[0][:3] == out[1][:3]
    if mode == "graph":
        assert out[1][3] == out[0][3] == 39  # every decode step a replay (the graph was captured earlier)


def test_early_stop_discards_the_launched_step(pipes):
    """A stop id ends the generation with the next step already running: the tokens are the same as without the
    stop, and the next generation (fresh prefill) is unaffected."""
    p = pipes["graph"]
    dec, ids = p.decoder, prompt_ids(25)
    x = p.embed(ids, None)
    ref = list(dec.generate(x, 30, Sampler(SamplingParams())))
    full = p.generate_from_ids(ids, max_new_tokens=30, stop=()).tokens
    stop = full[10]
    cut = p.generate_from_ids(ids, max_new_tokens=30, stop=(stop,)).tokens
    assert cut == full[: full.index(stop) + 1]
    assert p.generate_from_ids(ids, max_new_tokens=30, stop=()).tokens == full
    gen = dec.generate(x, 30, Sampler(SamplingParams()))
    assert [next(gen) for _ in range(3)] == ref[:3]
    gen.close()  # abandoned with a step in flight
    assert list(dec.generate(x, 30, Sampler(SamplingParams()))) == ref
    with dec.generation():  # direct step() use after an abandoned launch
        dec.prefill(x)
        assert int(np.argmax(dec.step(dec.token_input(ref[0])))) == ref[1]


def test_launch_queues_the_next_scalars(pipes):
    """After a launch at position t, the stream holds position_ids = t+1 and mask slot t+1 = 1 (queued behind the
    run), so the following launch copies only the embedding."""
    p = pipes["graph"]
    dec = p.decoder
    x = p.embed(prompt_ids(16), None)
    with dec.generation():
        dec.prefill(x)
        dec.launch(dec.token_input(100))
        dec.collect()
        assert dec._scalars_at == 17
        mask = cupy.asnumpy(dec.mask.array)[0]
        assert mask[:18].all() and not mask[18:].any()
        assert int(cupy.asnumpy(dec.pos_step.array)[0, 0]) == 17
