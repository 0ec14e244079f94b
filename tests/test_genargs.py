"""Issue 12, defects 6 (one validation layer for generation arguments), 4 (every size bounded before it is
allocated) and 7's tokenizer rule (no silently wrong chat prompt)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

import vlmdecode
from vlmdecode.fixture import build_fixture, preset
from vlmdecode.genargs import GenerationArgumentError, check_ids, check_stop
from vlmdecode.processor import MAX_IMAGE_PIXELS, Processor, ProcessorError, demo_image
from vlmdecode.sessionpolicy import max_threads

V = 320  # the tiny preset's vocabulary


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return build_fixture(preset("tiny"), tmp_path_factory.mktemp("args") / "tiny")


@pytest.fixture(scope="module")
def pipe(model):
    return vlmdecode.load(model)


CALLS = {
    "generate": lambda p, **kw: p.generate("hi", **kw),
    "stream": lambda p, **kw: list(p.stream("hi", **kw)),
    "generate_from_ids": lambda p, **kw: p.generate_from_ids([[2, 10, 11]], **kw),
    "generate_from_embeds": lambda p, **kw: p.generate_from_embeds(np.zeros((1, 3, 64), np.float32), **kw),
}


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("kw, needle", [
    ({"stop": "abc"}, "a string is not a token id"),          # silently ignored before
    ({"stop": 5.0}, "stop must be None"),
    ({"stop": [1, 999]}, "[0, 320)"),
    ({"stop": [True]}, "each stop id must be an int"),
    ({"max_new_tokens": 2.5}, "max_new_tokens must be an int > 0"),   # raw TypeError before
    ({"max_new_tokens": "4"}, "got '4' (str)"),
    ({"max_new_tokens": True}, "(bool)"),
    ({"max_length": 40}, "max_new_tokens=N counts the tokens after the prompt"),  # SamplingParams.__init__() before
    ({"num_beams": 4}, "no beam search"),
    ({"repetition_penalty": 1.2}, "no history-dependent logits processors"),
    ({"eos_token_id": 1}, "stop=[ids]"),
    ({"made_up": 1}, "accepted: max_new_tokens, stop"),
])
def test_generation_arguments_are_checked_in_one_place(pipe, call, kw, needle):
    with pytest.raises(GenerationArgumentError) as e:
        CALLS[call](pipe, **kw)
    assert needle in str(e.value)
    assert isinstance(e.value, ValueError) and isinstance(e.value, TypeError)


def test_stop_int_and_sequences_work(pipe):
    r = pipe.generate_from_ids([[2, 10, 11]], max_new_tokens=8, stop=())
    t = r.tokens[2]
    assert pipe.generate_from_ids([[2, 10, 11]], max_new_tokens=8, stop=t).tokens == r.tokens[:r.tokens.index(t) + 1]
    assert pipe.generate_from_ids([[2, 10, 11]], max_new_tokens=8, stop=np.array([t])).tokens[-1] == t


@pytest.mark.parametrize("ids, needle", [
    ([[2, -1, 11]], "hold -1"),                 # wrapped to the last row before
    ([[2.0, 10.7, 11.0]], "must be integers"),   # truncated before
    ([[2, 10], [11, 12]], "a batch is not supported"),  # merged into one prompt before
    ([[2, 10, 320]], "[0, 320)"),
    ([[]], "empty"),
    ([[True, False]], "must be integers"),
])
def test_generate_from_ids_refuses(pipe, ids, needle):
    with pytest.raises(GenerationArgumentError, match=None) as e:
        pipe.generate_from_ids(ids, max_new_tokens=2)
    assert needle in str(e.value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.integers(-2**40, 2**40), min_size=0, max_size=4), min_size=0, max_size=3))
def test_check_ids_accepts_exactly_one_row_of_vocabulary_ids(rows):
    arr = np.array(rows, dtype=np.int64) if rows and len({len(r) for r in rows}) == 1 else None
    ok = arr is not None and arr.shape[0] == 1 and arr.shape[1] > 0 and arr.min() >= 0 and arr.max() < V
    if ok:
        assert check_ids(arr, V).tolist() == rows
    elif arr is not None:
        with pytest.raises(GenerationArgumentError):
            check_ids(arr, V)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.integers(-5, 400), st.text(max_size=3), st.floats(), st.booleans(),
                 st.lists(st.one_of(st.integers(-5, 400), st.floats(), st.text(max_size=2)), max_size=4)))
def test_check_stop_property(stop):
    valid = stop is None or (isinstance(stop, int) and not isinstance(stop, bool) and 0 <= stop < V) or (
        isinstance(stop, list) and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < V for i in stop))
    if valid:
        got = check_stop(stop, V)
        assert got is None if stop is None else got == frozenset([stop] if isinstance(stop, int) else stop)
    else:
        with pytest.raises(GenerationArgumentError):
            check_stop(stop, V)


def test_cli_generate_goes_through_the_same_checks(model, capfd):
    from vlmdecode.cli import main

    assert main(["generate", "--model", str(model), "--prompt", "hi", "--max-new-tokens", "-1"]) == 2
    assert "max_new_tokens must be an int > 0" in capfd.readouterr().err


# ---- defect 4: sizes bounded before allocation ------------------------------------------------------------------
@pytest.mark.parametrize("threads", [-1, 10**6, 2000, 1.5, True])
def test_threads_are_bounded(model, threads):
    with pytest.raises(ValueError, match=rf"threads={threads!r} must be an int in \[0, {max_threads()}\]"):
        vlmdecode.load(model, threads=threads)


def test_huge_image_is_refused_from_its_header(pipe, tmp_path):
    """A 12000x12000 PNG reached 1.18 GB before refusal; the header alone now decides."""
    path = tmp_path / "huge.png"
    side = 12000
    Image.new("RGB", (side, 1)).save(path)  # a tiny file, then a header that claims side x side
    raw = bytearray(path.read_bytes())
    raw[16 + 4:16 + 8] = side.to_bytes(4, "big")  # IHDR height
    import zlib

    raw[29:33] = zlib.crc32(bytes(raw[12:29])).to_bytes(4, "big")
    path.write_bytes(bytes(raw))
    with pytest.raises(ProcessorError, match=f"12000x12000 = 144000000 pixels; at most {MAX_IMAGE_PIXELS}"):
        pipe.generate("hi", image=path, max_new_tokens=1)
    with pytest.raises(ProcessorError, match="at most"):
        pipe.processor.preprocess(np.zeros((9000, 8000, 3), np.uint8))


def test_huge_prompt_is_refused_before_tokenising(pipe):
    with pytest.raises(ProcessorError, match=r"10000000 characters; at most 16384 \(64 x context_length 256\)"):
        pipe.generate("x" * 10_000_000, max_new_tokens=1)


# ---- defect 7: a tokenizer without the chat-format tokens -------------------------------------------------------
def test_tokenizer_without_start_of_turn_is_refused(model, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(model, d)
    tok = json.loads((d / "tokenizer.json").read_text())
    tok["added_tokens"] = [a for a in tok["added_tokens"] if a["content"] != "<start_of_turn>"]
    (d / "tokenizer.json").write_text(json.dumps(tok))  # still in the vocabulary: split into pieces before
    p = Processor.load(d)
    with pytest.raises(ProcessorError, match="has no '<start_of_turn>' token"):
        p.encode_prompt("hi", 0)
    assert p.encode_prompt("hi", 0, chat_template=False).shape[0] == 1
    assert demo_image(32).size == (32, 32)
