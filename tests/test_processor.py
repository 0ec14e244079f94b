"""vlmdecode.processor: prompt encoding, image preprocessing, decoding and every bad-input error.

Runs on the tiny fixture (tokenizer and configs only matter here; no ONNX session is created).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

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
from vlmdecode.processor import ImageSpec, Processor, ProcessorError, StreamDecoder, demo_image, preprocess_image

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
    for name in ("tokenizer.json", "processor_config.json", "genai_config.json"):
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
    assert proc.spec.size == SIZE and proc.spec.tokens_per_image == N_TOK
    assert proc.spec.mean == (0.5, 0.5, 0.5) and proc.spec.resample == "bilinear"
    assert proc.is_eos(EOS_ID) and proc.is_eos(END_OF_TURN_ID) and not proc.is_eos(BOS_ID)


def test_special_tokens_are_single_ids(proc):
    for text, tid in [("<start_of_image>", START_OF_IMAGE_ID), ("<end_of_image>", END_OF_IMAGE_ID),
                      ("<image_soft_token>", IMAGE_TOKEN_ID), ("<start_of_turn>", START_OF_TURN_ID),
                      ("<end_of_turn>", END_OF_TURN_ID), ("<bos>", BOS_ID)]:
        assert proc.tokenizer.encode(text, add_special_tokens=False).ids == [tid]


def test_eos_as_int(copy_dir):
    edit_json(copy_dir / "genai_config.json", lambda d: d["model"].update(eos_token_id=EOS_ID))
    assert Processor.load(copy_dir).eos_token_ids == (EOS_ID,)


@pytest.mark.parametrize("field", ["image_size", "mm_tokens_per_image", "image_mean", "boi_token", "image_token_id"])
def test_processor_config_missing_field(copy_dir, field):
    edit_json(copy_dir / "processor_config.json", lambda d: d.pop(field))
    with pytest.raises(ProcessorError, match=f"processor_config.json: missing field '{field}'"):
        Processor.load(copy_dir)


@pytest.mark.parametrize("field,value,match", [
    ("image_size", "32", "positive integer"),
    ("image_size", True, "positive integer"),
    ("image_mean", [0.5, 0.5], "list of 3 numbers"),
    ("image_std", [0.5, 0.0, 0.5], "> 0"),
    ("rescale_factor", -1, "positive number"),
    ("mode", "L", "only 'RGB'"),
    ("mm_tokens_per_image", 0, "positive integer"),
    ("resample", "cubic", "allowed: nearest, bilinear"),
])
def test_processor_config_ill_typed(copy_dir, field, value, match):
    edit_json(copy_dir / "processor_config.json", lambda d: d.update({field: value}))
    with pytest.raises(ProcessorError, match=f"field '{field}'.*{match}"):
        Processor.load(copy_dir)


def test_resample_optional(copy_dir):
    edit_json(copy_dir / "processor_config.json", lambda d: d.pop("resample"))
    assert Processor.load(copy_dir).spec.resample == "bilinear"


def test_text_model_without_image_token_id_uses_processor_config(copy_dir):
    # a gemma3_text genai_config has no image_token_id; processor_config.json supplies it
    edit_json(copy_dir / "genai_config.json", lambda d: d["model"].pop("image_token_id"))
    assert Processor.load(copy_dir).image_token_id == IMAGE_TOKEN_ID


@pytest.mark.parametrize("field", ["bos_token_id", "eos_token_id", "pad_token_id", "context_length"])
def test_genai_config_missing_field(copy_dir, field):
    edit_json(copy_dir / "genai_config.json", lambda d: d["model"].pop(field))
    with pytest.raises(ProcessorError, match=f"genai_config.json: missing field 'model.{field}'"):
        Processor.load(copy_dir)


@pytest.mark.parametrize("value", ["1", [], [1, "5"], 1.5])
def test_genai_config_bad_eos(copy_dir, value):
    edit_json(copy_dir / "genai_config.json", lambda d: d["model"].update(eos_token_id=value))
    with pytest.raises(ProcessorError, match="'model.eos_token_id'.*integer or a non-empty list"):
        Processor.load(copy_dir)


def test_image_token_id_disagreement(copy_dir):
    edit_json(copy_dir / "genai_config.json", lambda d: d["model"].update(image_token_id=7))
    with pytest.raises(ProcessorError, match="image_token_id disagrees.*says 7.*says 8"):
        Processor.load(copy_dir)


def test_image_token_id_not_the_tokenizers(copy_dir):
    for name in ("genai_config.json", "processor_config.json"):
        key = "model" if name.startswith("genai") else None
        edit_json(copy_dir / name, lambda d, key=key: (d[key] if key else d).update(image_token_id=7))
    with pytest.raises(ProcessorError, match="image_token_id is 7 but the tokenizer maps '<image_soft_token>' to 8"):
        Processor.load(copy_dir)


def test_missing_files(copy_dir, tmp_path):
    with pytest.raises(ProcessorError, match="does not exist or is not a folder"):
        Processor.load(tmp_path / "nope")
    (copy_dir / "genai_config.json").write_text("{not json")
    with pytest.raises(ProcessorError, match="genai_config.json: not valid JSON"):
        Processor.load(copy_dir)
    (copy_dir / "processor_config.json").unlink()
    with pytest.raises(ProcessorError, match="processor_config.json: file not found"):
        Processor.load(copy_dir)
    (copy_dir / "tokenizer.json").write_text("{}")
    with pytest.raises(ProcessorError, match="tokenizer.json: not a tokenizer.json"):
        Processor.load(copy_dir)
    (copy_dir / "tokenizer.json").unlink()
    with pytest.raises(ProcessorError, match="tokenizer.json: file not found"):
        Processor.load(copy_dir)


# ---- prompts ---------------------------------------------------------------------------------

CHAT_HEAD = [BOS_ID, START_OF_TURN_ID, *text_ids("user\n")]
CHAT_TAIL = [END_OF_TURN_ID, *text_ids("\n"), START_OF_TURN_ID, *text_ids("model\n")]
IMAGE = [START_OF_IMAGE_ID] + [IMAGE_TOKEN_ID] * N_TOK + [END_OF_IMAGE_ID]


def test_text_only_prompt(proc):
    ids = proc.encode_prompt("Hi there", 0)
    assert ids.dtype == np.int64 and ids.shape == (1, len(ids[0]))
    assert ids[0].tolist() == CHAT_HEAD + text_ids("Hi there") + CHAT_TAIL


def test_chat_template_off(proc):
    assert proc.encode_prompt("Hi", 0, chat_template=False)[0].tolist() == [BOS_ID, *text_ids("Hi")]
    assert proc.expand_prompt("Hi", 0, chat_template=False) == "<bos>Hi"
    assert proc.encode_prompt("Hi", 1, chat_template=False)[0].tolist() == [BOS_ID, *IMAGE, *text_ids("\nHi")]


def test_single_image_without_placeholder_is_prepended(proc):
    ids = proc.encode_prompt("Describe.", 1)[0].tolist()
    assert ids == CHAT_HEAD + IMAGE + text_ids("\nDescribe.") + CHAT_TAIL
    assert proc.expand_prompt("Describe.", 1).startswith("<bos><start_of_turn>user\n<start_of_image><image_soft_token>")


def test_placeholders_expanded_in_place(proc):
    ids = proc.encode_prompt("A <start_of_image> and B <start_of_image>?", 2)[0].tolist()
    assert ids == CHAT_HEAD + text_ids("A ") + IMAGE + text_ids(" and B ") + IMAGE + text_ids("?") + CHAT_TAIL
    proc.check_image_tokens(np.asarray([ids]), 2 * N_TOK)


@pytest.mark.parametrize("prompt,n_images,n_found", [
    ("no image here", 2, 0),
    ("<start_of_image> one", 0, 1),
    ("<start_of_image><start_of_image> two", 1, 2),
    ("<start_of_image> one", 3, 1),
])
def test_placeholder_count_mismatch(proc, prompt, n_images, n_found):
    with pytest.raises(ProcessorError, match=f"has {n_found} image placeholder.*but {n_images} image"):
        proc.encode_prompt(prompt, n_images)


def test_literal_soft_token_rejected(proc):
    with pytest.raises(ProcessorError, match="literal image soft token '<image_soft_token>'"):
        proc.encode_prompt("sneaky <image_soft_token>", 0)
    with pytest.raises(ProcessorError, match="literal image soft token"):
        proc.encode_prompt("<start_of_image><image_soft_token>", 1)


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


def test_round_trip_decode(proc):
    prompt = "Wörld 😀, <start_of_image> ünïcödé ✓"
    ids = proc.encode_prompt(prompt, 1)
    assert proc.decode(ids, skip_special_tokens=False) == proc.expand_prompt(prompt, 1)
    assert proc.decode(ids) == "user\nWörld 😀,  ünïcödé ✓\nmodel\n"
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


# ---- images ----------------------------------------------------------------------------------


def tiny_spec(**kw) -> ImageSpec:
    args = {"size": 2, "rescale_factor": 1 / 255, "mean": (0.1, 0.2, 0.3), "std": (0.5, 0.25, 2.0),
            "mode": "RGB", "tokens_per_image": 1, "image_token_id": 8, "boi_token": "<boi>", "eoi_token": "<eoi>",
            "image_token": "<img>"}
    return ImageSpec(**(args | kw))


def test_preprocess_numbers_by_hand():
    a = np.array([[[0, 255, 128], [10, 20, 30]],
                  [[255, 0, 1], [100, 200, 50]]], np.uint8)  # [H=2, W=2, C=3]
    spec = tiny_spec()
    x = preprocess_image(a, spec)
    assert x.shape == (1, 3, 2, 2) and x.dtype == np.float32 and x.flags.c_contiguous
    mean, std = (0.1, 0.2, 0.3), (0.5, 0.25, 2.0)
    for c in range(3):
        for h in range(2):
            for w in range(2):
                want = (a[h, w, c] / 255 - mean[c]) / std[c]
                assert x[0, c, h, w] == pytest.approx(want, abs=1e-6), (c, h, w)
    # the same from a PIL image and from a PNG file
    np.testing.assert_array_equal(preprocess_image(Image.fromarray(a), spec), x)
    x16 = preprocess_image(a, spec, dtype=np.float16)
    assert x16.dtype == np.float16
    np.testing.assert_allclose(x16.astype(np.float32), x, rtol=1e-3, atol=1e-3)


def test_preprocess_fixture_range(proc, tmp_path):
    img = demo_image(SIZE)
    path = tmp_path / "img.png"
    img.save(path)
    x = preprocess_image(path, proc.spec)
    assert x.shape == (1, 3, SIZE, SIZE)
    assert -1.0 <= x.min() and x.max() <= 1.0  # mean 0.5, std 0.5 maps [0, 255] to [-1, 1]
    np.testing.assert_array_equal(preprocess_image(str(path), proc.spec), x)
    np.testing.assert_array_equal(x, proc.preprocess(img))
    assert proc.preprocess([img, img]).shape == (2, 3, SIZE, SIZE)
    assert proc.preprocess([]).shape == (0, 3, SIZE, SIZE)


def test_missing_file(proc, tmp_path):
    with pytest.raises(ProcessorError, match=r"image file '.*nope\.png' does not exist"):
        preprocess_image(tmp_path / "nope.png", proc.spec)
    with pytest.raises(ProcessorError, match="is not a file"):
        preprocess_image(tmp_path, proc.spec)


def test_non_image_file(proc, tmp_path):
    p = tmp_path / "notes.png"
    p.write_text("this is not a picture")
    with pytest.raises(ProcessorError, match=r"notes\.png' is not an image Pillow can read"):
        preprocess_image(p, proc.spec)


def test_truncated_png(proc, tmp_path):
    full = tmp_path / "full.png"
    demo_image(SIZE).save(full)
    data = full.read_bytes()
    # cut inside the pixel data, inside the first chunk after the header, inside the IHDR chunk.
    # (Cutting only the zlib checksum and IEND is not detected: Pillow has every pixel by then.)
    for cut in (len(data) // 2, 100, 20):
        p = tmp_path / f"cut{cut}.png"
        p.write_bytes(data[:cut])
        with pytest.raises(ProcessorError, match=rf"cut{cut}\.png' could not be read or decoded"):
            preprocess_image(p, proc.spec)
    # a lazily opened PIL image of a truncated file: the error comes at load time, still a ProcessorError
    with Image.open(tmp_path / f"cut{len(data) // 2}.png") as im, pytest.raises(ProcessorError, match="decoded"):
        preprocess_image(im, proc.spec)


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "CMYK"])
def test_wrong_mode(proc, tmp_path, mode):
    img = demo_image(SIZE).convert(mode)
    with pytest.raises(ProcessorError, match=rf"image mode is '{mode}'; only 'RGB' is accepted.*convert\('RGB'\)"):
        preprocess_image(img, proc.spec)
    if mode in ("L", "RGBA"):  # also from a file
        p = tmp_path / f"img_{mode}.png"
        img.save(p)
        with pytest.raises(ProcessorError, match=f"mode is '{mode}'"):
            preprocess_image(p, proc.spec)


@pytest.mark.parametrize("arr,match", [
    (np.zeros((SIZE, SIZE), np.uint8), r"shape \(32, 32\).*HxWx3"),
    (np.zeros((SIZE, SIZE, 4), np.uint8), r"shape \(32, 32, 4\).*a\[\.\.\., :3\]"),
    (np.zeros((SIZE, SIZE, 3), np.float32), "dtype float32; only uint8"),
    (np.zeros((0, 0, 3), np.uint8), "no pixels"),
])
def test_bad_arrays(proc, arr, match):
    with pytest.raises(ProcessorError, match=match):
        preprocess_image(arr, proc.spec)


def test_bad_type_and_dtype(proc):
    with pytest.raises(ProcessorError, match="type list is not accepted: pass a path"):
        preprocess_image([[1, 2, 3]], proc.spec)
    with pytest.raises(ProcessorError, match="dtype .* is not accepted: use np.float32 or np.float16"):
        preprocess_image(demo_image(SIZE), proc.spec, dtype=np.float64)
    with pytest.raises(ProcessorError, match="dtype 'banana' is not accepted"):
        preprocess_image(demo_image(SIZE), proc.spec, dtype="banana")


def test_wrong_size_and_resize(proc):
    img = demo_image(64).crop((0, 0, 48, 40))  # 48x40, not square, not 32
    with pytest.raises(ProcessorError, match=r"image is 48x40 \(WxH\); the model expects 32x32.*resize=True"):
        preprocess_image(img, proc.spec)
    with pytest.raises(ProcessorError, match="image is 48x40"):
        preprocess_image(np.asarray(img), proc.spec)
    x = preprocess_image(img, proc.spec, resize=True)
    assert x.shape == (1, 3, SIZE, SIZE)
    want = preprocess_image(img.resize((SIZE, SIZE), Image.Resampling.BILINEAR), proc.spec)
    np.testing.assert_array_equal(x, want)
    np.testing.assert_array_equal(preprocess_image(np.asarray(img), proc.spec, resize=True), want)
    assert proc.preprocess([img], resize=True).shape == (1, 3, SIZE, SIZE)


def test_image_spec_direct_errors():
    with pytest.raises(ProcessorError, match=r"ImageSpec.size=0 is invalid"):
        tiny_spec(size=0)
    with pytest.raises(ProcessorError, match=r"ImageSpec.std=.*> 0"):
        tiny_spec(std=(1.0, -1.0, 1.0))
    with pytest.raises(ProcessorError, match="must differ"):
        tiny_spec(image_token="<boi>")
    with pytest.raises(ProcessorError, match="expected a JSON object"):
        ImageSpec.from_dict([1, 2])


def test_image_spec_from_json(model_dir):
    spec = ImageSpec.from_json(model_dir / "processor_config.json")
    assert spec.size == SIZE and spec.rescale_factor == pytest.approx(1 / 255)
    assert spec.boi_token == "<start_of_image>" and spec.eoi_token == "<end_of_image>"


# ---- demo image ------------------------------------------------------------------------------


def test_demo_image():
    a, b, c = demo_image(48), demo_image(48), demo_image(48, seed=1)
    assert a.mode == "RGB" and a.size == (48, 48)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(a), np.asarray(c))
    assert np.asarray(a).std() > 10  # not flat
    assert demo_image(1).size == (1, 1)
    with pytest.raises(ProcessorError, match="size=0 is invalid"):
        demo_image(0)
    with pytest.raises(ProcessorError, match="seed=-1 is invalid"):
        demo_image(8, seed=-1)
