"""The host step's pieces on the CPU: step = launch + collect, and the queue-ahead loop (decoders.base) that CUDA
host sampling uses gives the plain loop's tokens, byte records and errors (the CUDA side: test_host_step_cuda.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import vlmdecode
from vlmdecode.buffers import Buffer, allocate, allocate_mapped
from vlmdecode.devices import parse_device
from vlmdecode.fixture.config import IMAGE_TOKEN_ID
from vlmdecode.generation import GenerationError
from vlmdecode.profiling import prompt_ids
from vlmdecode.sampling import Sampler, SamplingParams


@pytest.fixture(scope="module")
def pipe(tiny_folder):
    return vlmdecode.load(tiny_folder, "cpu")


def _run(dec, x, n, params, ahead):
    dec.queue_ahead = ahead
    try:
        toks = list(dec.generate(x, n, Sampler(params)))
    finally:
        del dec.queue_ahead  # back to the class attribute
    recs = [(s.h2d, s.d2h, dict(s.by_what)) for s in dec.transfers.steps]
    return toks, recs, dec.position


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(do_sample=True, seed=3, top_k=20)])
@pytest.mark.parametrize("n", [1, 2, 24])
def test_queue_ahead_loop_matches_plain_loop(pipe, params, n):
    dec = pipe.decoder
    x = pipe.embed(prompt_ids(12), None)
    plain = _run(dec, x, n, params, False)
    ahead = _run(dec, x, n, params, True)
    assert ahead == plain
    assert len(plain[0]) == n and len(plain[1]) == n and plain[2] == 12 + n - 1


def test_queue_ahead_launches_before_the_token_is_out(pipe):
    dec = pipe.decoder
    x = pipe.embed(prompt_ids(12), None)
    dec.queue_ahead = True
    try:
        it = dec.generate(x, 5, Sampler(SamplingParams()))
        next(it)
        assert dec.position == 12  # the first token: yielded right after the prefill's pick
        next(it)
        assert dec.position == 14  # the second: its successor's step is already launched
        it.close()  # abandoned: that step is discarded, the next generation starts from a fresh prefill
    finally:
        del dec.queue_ahead
    assert list(dec.generate(x, 5, Sampler(SamplingParams())))[:2] == _run(dec, x, 2, SamplingParams(), False)[0]


def test_queue_ahead_hands_over_the_image_token_before_failing(pipe):
    """Without suppression the tiny model can emit its image soft token (test_generation; this seed does at token
    46): the queue-ahead loop yields it, then fails where the plain loop fails, keeping the same tokens."""
    outcomes = []
    for ahead in (False, True):
        pipe.decoder.queue_ahead = ahead
        try:
            with pytest.raises(GenerationError) as e:
                pipe.generate("...", do_sample=True, temperature=0.8, top_k=50, top_p=0.9, min_p=0.05, seed=22,
                              max_new_tokens=64, stop=(), suppress_tokens=())
        finally:
            del pipe.decoder.queue_ahead
        outcomes.append(e.value.tokens)
    assert outcomes[0] == outcomes[1] and outcomes[0][-1] == IMAGE_TOKEN_ID


def test_step_is_launch_then_collect(pipe):
    dec = pipe.decoder
    x = pipe.embed(prompt_ids(9), None)
    emb = dec.token_input(100)
    with dec.generation():
        dec.prefill(x)
        a = dec.step(emb)
        dec.prefill(x)
        dec.launch(emb)
        b = dec.collect()
        assert dec.collect(reuse=True) is dec.logits_host
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32 and dec.transfers.steps[-1] is dec.step_bytes


def test_buffer_write_on_cpu_ignores_stream_and_mapped_is_cuda_only():
    cpu = parse_device("cpu")
    b = allocate((1, 4), np.int64, cpu)
    b.write(np.array([7, 8]), offset=1, stream=123)
    b.write_scalar(9, offset=3, stream=123)
    assert b.array.tolist() == [[0, 7, 8, 9]] and b.on_host and not b.mapped
    assert isinstance(b, Buffer) and b.copy_to_host().tolist() == [0, 7, 8, 9]
    with pytest.raises(ValueError, match="CUDA"):
        allocate_mapped((4,), np.float16, cpu)
