"""vlmdecode.processor: prompts through the folder's chat template, image tokens, decoding, and bad input.

Runs on the tiny fixture (tokenizer and configs only; no ONNX session is created). The prompt format is
transformers' Gemma3Processor's: the chat template's text with each <start_of_image> replaced by
"\n\n<start_of_image>" + n x <image_soft_token> + "<end_of_image>\n\n" (tests/test_exported.py checks
the ids against HF's processor on a real folder). Images: tests/test_images.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from vlmdecode.chat import ChatTemplate
from vlmdecode.fixture import preset
from vlmdecode.fixture.config import (
    BOS_ID,
    END_OF_IMAGE_ID,
    END_OF_TURN_ID,
    EOS_ID,
    IMAGE_TOKEN_ID,
    PAD_ID,
    START_OF_IMAGE_ID,
    START_OF_TURN_ID,
)
from vlmdecode.fixture.tokenizer import GEMMA3_CHAT_TEMPLATE
from vlmdecode.processor import Processor, ProcessorError, StreamDecoder

TINY = preset("tiny")
N_TOK = TINY.n_image_tokens  # 4 soft tokens per image
SIZE = TINY.image_size  # 32


def byte_id(b: int) -> int:
    return 9 + b  # fixture tokenizer: ids 9..264 are bytes 0..255


def text_ids(s: str) -> list[int]:
    return [byte_id(b) for b in s.encode("utf-8")]


@pytest.fixture(scope="module")
def model_dir(tiny_folder) -> Path:
    return tiny_folder  # shared, built once per session (conftest): copy before modifying


@pytest.fixture(scope="module")
def proc(model_dir) -> Processor:
    return Processor.load(model_dir)


@pytest.fixture
def copy_dir(model_dir, tmp_path) -> Path:
    """A writable copy of the config files (no ONNX needed) for config-error tests."""
    out = tmp_path / "m"
    out.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "processor_config.json", "genai_config.json"):
        shutil.copy(model_dir / name, out / name)
    return out


def edit_json(path: Path, fn) -> None:
    d = json.loads(path.read_text())
    fn(d)
    path.write_text(json.dumps(d))


# ---- loading ---------------------------------------------------------------------------------


def test_load_ids(proc):
    assert proc.bos_token_id == BOS_ID
    assert proc.eos_token_ids == (EOS_ID, END_OF_TURN_ID)
    assert proc.pad_token_id == PAD_ID
    assert proc.image_token_id == IMAGE_TOKEN_ID
    assert proc.context_length == TINY.max_length
    assert proc.spec.size == (SIZE, SIZE) and proc.tokens_per_image == N_TOK
    assert proc.spec.mean == (0.5, 0.5, 0.5) and proc.spec.resample == "bilinear"
    assert proc.image_tokens == ("<start_of_image>", "<image_soft_token>", "<end_of_image>")
    assert proc.template is not None and proc.template.text == GEMMA3_CHAT_TEMPLATE
    assert proc.is_eos(EOS_ID) and proc.is_eos(END_OF_TURN_ID) and not proc.is_eos(BOS_ID)


def test_special_tokens_are_single_ids(proc):
    for text, tid in [("<start_of_image>", START_OF_IMAGE_ID), ("<end_of_image>", END_OF_IMAGE_ID),
                      ("<image_soft_token>", IMAGE_TOKEN_ID), ("<start_of_turn>", START_OF_TURN_ID),
                      ("<end_of_turn>", END_OF_TURN_ID), ("<bos>", BOS_ID)]:
        assert proc.tokenizer.encode(text, add_special_tokens=False).ids == [tid]


def test_text_folder_needs_no_image_config(model_dir):
    text = Processor.load(model_dir / "text")
    assert text.spec is None and text.image_tokens is None and text.image_token_id is None
    with pytest.raises(ProcessorError, match="text model"):
        text.encode_prompt("hi", 1)
    with pytest.raises(ProcessorError, match="text model"):
        text.preprocess([np.zeros((4, 4, 3), np.uint8)])


def test_eos_as_int(copy_dir):
    edit_json(copy_dir / "genai_config.json", lambda d: d["model"].update(eos_token_id=EOS_ID))
    assert Processor.load(copy_dir).eos_token_ids == (EOS_ID,)


@pytest.mark.parametrize("field", ["bos_token_id", "eos_token_id", "pad_token_id"])
def test_genai_config_missing_field(copy_dir, field):
    edit_json(copy_dir / "genai_config.json", lambda d: d["model"].pop(field))
    with pytest.raises(ProcessorError, match=f"genai_config.json: missing field 'model.{field}'"):
        Processor.load(copy_dir)


@pytest.mark.parametrize("value", ["1", [], [1, "5"], 1.5])
def test_genai_config_bad_eos(copy_dir, value):
    edit_json(copy_dir / "genai_config.json", lambda d: d["model"].update(eos_token_id=value))
    with pytest.raises(ProcessorError, match="model.eos_token_id"):
        Processor.load(copy_dir)


def test_image_token_id_not_the_tokenizers(copy_dir):
    edit_json(copy_dir / "genai_config.json", lambda d: d["model"].update(image_token_id=7))
    with pytest.raises(ProcessorError, match="image_token_id is 7 but the tokenizer maps .<image_soft_token>. to 8"):
        Processor.load(copy_dir)
    edit_json(copy_dir / "genai_config.json", lambda d: d["model"].update(image_token_id=8))
    edit_json(copy_dir / "processor_config.json", lambda d: d.update(image_token_id=7))
    with pytest.raises(ProcessorError, match="processor_config.json image_token_id is 7"):
        Processor.load(copy_dir)


def test_image_tokens_from_tokenizer_config(copy_dir):
    """Without the flat fields, boi / eoi / image token come from tokenizer_config.json (Gemma 3's keys)."""
    keys = ("boi_token", "eoi_token", "image_token", "image_token_id")
    flat = json.loads((copy_dir / "processor_config.json").read_text())
    edit_json(copy_dir / "processor_config.json", lambda d: [d.pop(k) for k in keys])
    with pytest.raises(ProcessorError, match="no boi_token"):
        Processor.load(copy_dir)
    edit_json(copy_dir / "tokenizer_config.json", lambda d: d.update({k: flat[k] for k in keys[:3]}))
    assert Processor.load(copy_dir).image_tokens == ("<start_of_image>", "<image_soft_token>", "<end_of_image>")
    edit_json(copy_dir / "tokenizer_config.json", lambda d: d.update(boi_token="<sta"))
    with pytest.raises(ProcessorError, match="splits boi_token '<sta' into 4 tokens"):
        Processor.load(copy_dir)


def test_missing_files(copy_dir, tmp_path):
    with pytest.raises(ProcessorError, match="does not exist or is not a folder"):
        Processor.load(tmp_path / "nope")
    (copy_dir / "processor_config.json").unlink()
    with pytest.raises(ProcessorError, match="processor_config.json: file not found"):
        Processor.load(copy_dir)
    (copy_dir / "genai_config.json").write_text("{not json")
    with pytest.raises(ProcessorError, match="genai_config.json is not valid JSON"):
        Processor.load(copy_dir)
    (copy_dir / "tokenizer.json").write_text("{}")
    with pytest.raises(ProcessorError, match="tokenizer.json: not a tokenizer.json"):
        Processor.load(copy_dir)
    (copy_dir / "tokenizer.json").unlink()
    with pytest.raises(ProcessorError, match="tokenizer.json: file not found"):
        Processor.load(copy_dir)


# ---- chat template ---------------------------------------------------------------------------

CHAT_HEAD = [BOS_ID, START_OF_TURN_ID, *text_ids("user\n")]
CHAT_TAIL = [END_OF_TURN_ID, *text_ids("\n"), START_OF_TURN_ID, *text_ids("model\n")]
IMAGE = [*text_ids("\n\n"), START_OF_IMAGE_ID] + [IMAGE_TOKEN_ID] * N_TOK + [END_OF_IMAGE_ID, *text_ids("\n\n")]


def test_text_only_prompt(proc):
    ids = proc.encode_prompt("Hi there", 0)
    assert ids.dtype == np.int64 and ids.shape == (1, len(ids[0]))
    assert ids[0].tolist() == CHAT_HEAD + text_ids("Hi there") + CHAT_TAIL
    assert proc.encode_prompt("  Hi there \n", 0)[0].tolist() == ids[0].tolist()  # the template trims


def test_chat_template_off(proc):
    assert proc.encode_prompt("Hi", 0, chat_template=False)[0].tolist() == [BOS_ID, *text_ids("Hi")]
    assert proc.expand_prompt("Hi", 0, chat_template=False) == "<bos>Hi"
    assert proc.encode_prompt("Hi", 1, chat_template=False)[0].tolist() == [BOS_ID, *IMAGE, *text_ids("Hi")]


def test_single_image_goes_before_the_text(proc):
    ids = proc.encode_prompt("Describe.", 1)[0].tolist()
    assert ids == CHAT_HEAD + IMAGE + text_ids("Describe.") + CHAT_TAIL
    assert proc.expand_prompt("Describe.", 1).startswith(
        "<bos><start_of_turn>user\n\n\n<start_of_image><image_soft_token>")


def test_placeholders_expanded_in_place(proc):
    ids = proc.encode_prompt("A <start_of_image> and B <start_of_image>?", 2)[0].tolist()
    assert ids == CHAT_HEAD + text_ids("A ") + IMAGE + text_ids(" and B ") + IMAGE + text_ids("?") + CHAT_TAIL
    proc.check_image_tokens(np.asarray([ids]), 2 * N_TOK)


@pytest.mark.parametrize("prompt,n_images,n_found", [
    ("<start_of_image> one", 0, 1),
    ("<start_of_image><start_of_image> two", 1, 2),
    ("<start_of_image> one", 3, 1),
])
def test_placeholder_count_mismatch(proc, prompt, n_images, n_found):
    with pytest.raises(ProcessorError, match=f"has {n_found} image placeholder.*but {n_images} image"):
        proc.encode_prompt(prompt, n_images)


def test_two_images_without_placeholders(proc):
    ids = proc.encode_prompt("Compare.", 2)[0].tolist()
    assert ids == CHAT_HEAD + IMAGE + IMAGE + text_ids("Compare.") + CHAT_TAIL


def test_literal_soft_token_rejected(proc):
    with pytest.raises(ProcessorError, match="literal image soft token '<image_soft_token>'"):
        proc.encode_prompt("sneaky <image_soft_token>", 0)


@pytest.mark.parametrize("prompt,n_images,match", [
    (b"bytes", 0, "prompt must be a str"),
    ("x", -1, "n_images=-1 is invalid"),
    ("x", 1.0, "n_images=1.0 is invalid"),
    ("x", True, "n_images=True is invalid"),
])
def test_bad_prompt_args(proc, prompt, n_images, match):
    with pytest.raises(ProcessorError, match=match):
        proc.encode_prompt(prompt, n_images)


def test_prompt_longer_than_context(proc):
    with pytest.raises(ProcessorError, match=f"tokens; the model's context_length is {TINY.max_length}"):
        proc.encode_prompt("x" * TINY.max_length, 0)


def test_template_sources_and_errors(copy_dir):
    tc = json.loads((copy_dir / "tokenizer_config.json").read_text())
    (copy_dir / "chat_template.jinja").write_text("{{ bos_token }}[{{ messages[0]['content'] }}]")
    p = Processor.load(copy_dir)  # chat_template.jinja wins over tokenizer_config.json, as in transformers
    assert p.expand_prompt("hi", 0) == "<bos>[hi]"
    (copy_dir / "chat_template.jinja").write_text("{{ raise_exception('no way') }}")
    with pytest.raises(ProcessorError, match="chat template .*chat_template.jinja.* failed: no way"):
        Processor.load(copy_dir).encode_prompt("hi", 0)
    (copy_dir / "chat_template.jinja").unlink()
    edit_json(copy_dir / "tokenizer_config.json", lambda d: d.update(
        chat_template=[{"name": "tool_use", "template": "x"}, {"name": "default", "template": "D{{ bos_token }}"}]))
    assert Processor.load(copy_dir).expand_prompt("hi", 0) == "D<bos>"
    edit_json(copy_dir / "tokenizer_config.json", lambda d: d.pop("chat_template"))
    with pytest.raises(ProcessorError, match="has no chat template.*chat_template=False"):
        Processor.load(copy_dir).encode_prompt("hi", 0)
    assert ChatTemplate.load(copy_dir, tc).text == GEMMA3_CHAT_TEMPLATE


def test_template_roles_must_alternate(proc):
    with pytest.raises(ProcessorError, match="Conversation roles must alternate"):
        proc.template.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    text = proc.template.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert text == "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_round_trip_decode(proc):
    prompt = "Wörld 😀, <start_of_image> ünïcödé ✓"
    ids = proc.encode_prompt(prompt, 1)
    assert proc.decode(ids, skip_special_tokens=False) == proc.expand_prompt(prompt, 1)
    assert proc.decode(ids) == "user\nWörld 😀, \n\n\n\n ünïcödé ✓\nmodel\n"
    assert proc.decode(ids[0].tolist()) == proc.decode(ids)


def test_decode_edge_cases(proc):
    assert proc.decode([]) == ""
    assert proc.decode([*text_ids("ok"), 300]) == "ok"  # beyond the tokenizer's vocab: nothing
    with pytest.raises(ProcessorError, match="negative id"):
        proc.decode([5, -1])
    with pytest.raises(ProcessorError, match="must be 1-D"):
        proc.decode(np.zeros((2, 3), np.int64))
    with pytest.raises(ProcessorError, match="must be integers"):
        proc.decode([1.5])


def test_check_image_tokens(proc):
    ids = proc.encode_prompt("x", 1)
    proc.check_image_tokens(ids, N_TOK)
    with pytest.raises(ProcessorError, match=f"input_ids hold {N_TOK} image tokens .* but there are {2 * N_TOK}"):
        proc.check_image_tokens(ids, 2 * N_TOK)
    with pytest.raises(ProcessorError, match=f"hold 0 image tokens .* there are {N_TOK}"):
        proc.check_image_tokens(proc.encode_prompt("x", 0), N_TOK)


# ---- streaming -------------------------------------------------------------------------------


def test_stream_multibyte(proc):
    text = "wörld 😀!"
    ids = text_ids(text)
    sd = proc.stream_decoder()
    pieces = [sd.put(i) for i in ids]
    # w, ö (2 bytes), r, l, d, space, 😀 (4 bytes), !
    assert pieces == ["w", "", "ö", "r", "l", "d", " ", "", "", "", "😀", "!"]
    assert sd.flush() == "" and sd.text == text == proc.decode(ids)
    assert "\ufffd" not in "".join(pieces)


def test_stream_special_tokens_and_numpy_ids(proc):
    ids = [BOS_ID, *text_ids("hé"), END_OF_TURN_ID, *text_ids("!")]
    sd = proc.stream_decoder()
    assert "".join(sd.put(np.int64(i)) for i in ids) + sd.flush() == "hé!"
    sd = StreamDecoder(proc.tokenizer, skip_special_tokens=False)
    assert "".join(sd.put(i) for i in ids) + sd.flush() == "<bos>hé<end_of_turn>!"


def test_stream_incomplete_and_invalid_bytes(proc):
    sd = proc.stream_decoder()
    assert sd.put(byte_id(0xC3)) == ""
    assert sd.put(byte_id(ord("a"))) == "\ufffda"  # invalid sequence: emitted once it cannot complete
    assert sd.put(byte_id(0xF0)) == "" and sd.put(byte_id(0x9F)) == ""
    assert sd.flush() == "\ufffd"  # incomplete tail at the end
    assert sd.text == "\ufffda\ufffd"
    sd.reset()
    assert sd.text == "" and sd.put(byte_id(ord("z"))) == "z"
    with pytest.raises(ProcessorError, match="negative id"):
        sd.put(-3)
