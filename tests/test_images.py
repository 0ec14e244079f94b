"""vlmdecode.images and vlmdecode.imageconfig: any image in, pixel_values out, as the folder's config says.

Configs: the fixture's flat one (with its onnxruntime-extensions section), onnxruntime-extensions alone,
and Hugging Face's preprocessor_config.json; every unsupported transform or field is refused by name.
Images: paths, PIL images and arrays of any size and mode; corrupt files refused with a message.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vlmdecode.fixture import build_fixture, preset
from vlmdecode.fixture.genai_config import processor_config
from vlmdecode.imageconfig import read_image_config
from vlmdecode.images import ImageSpec, demo_image, load_image, preprocess_image, rgb_pixels
from vlmdecode.processor import ProcessorError

TINY = preset("tiny")
SIZE = TINY.image_size


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> ImageSpec:
    d = build_fixture(TINY, tmp_path_factory.mktemp("img") / "m")
    return read_image_config(d).spec


def write(tmp_path: Path, name: str, obj) -> Path:
    (tmp_path / name).write_text(json.dumps(obj))
    return tmp_path


def tiny_spec(**kw) -> ImageSpec:
    args = {"height": 2, "width": 2, "rescale_factor": 1 / 255, "mean": (0.1, 0.2, 0.3), "std": (0.5, 0.25, 2.0)}
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
    np.testing.assert_array_equal(preprocess_image(Image.fromarray(a), spec), x)
    x16 = preprocess_image(a, spec, dtype=np.float16)
    assert x16.dtype == np.float16
    np.testing.assert_allclose(x16.astype(np.float32), x, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "CMYK", "I;16", "LA", "1"])
def test_any_mode_is_converted_to_rgb(spec, mode, tmp_path):
    img = demo_image(SIZE).convert(mode)
    x = preprocess_image(img, spec)
    assert x.shape == (1, 3, SIZE, SIZE)
    np.testing.assert_array_equal(rgb_pixels(img, spec), np.asarray(img.convert("RGB")))
    if mode in ("L", "RGBA", "P"):  # from a file too
        img.save(tmp_path / "im.png")
        np.testing.assert_array_equal(preprocess_image(tmp_path / "im.png", spec), x)


@pytest.mark.parametrize("w,h", [(57, 41), (2000, 1500), (1, 1), (32, 32), (16, 64)])
def test_any_size_is_resized(spec, w, h):
    img = Image.fromarray(np.random.default_rng(w).integers(0, 256, (h, w, 3), np.uint8))
    x = preprocess_image(img, spec)
    assert x.shape == (1, 3, SIZE, SIZE)
    want = img if (w, h) == (SIZE, SIZE) else img.resize((SIZE, SIZE), Image.Resampling.BILINEAR)
    np.testing.assert_array_equal(x, preprocess_image(np.asarray(want), spec))


def test_arrays_of_any_channels(spec):
    rgb = np.asarray(demo_image(SIZE))
    gray = rgb[..., 0].copy()
    rgba = np.concatenate([rgb, np.full((SIZE, SIZE, 1), 7, np.uint8)], -1)
    np.testing.assert_array_equal(preprocess_image(rgba, spec), preprocess_image(rgb, spec))  # alpha dropped
    np.testing.assert_array_equal(rgb_pixels(gray, spec), np.stack([gray] * 3, -1))


@pytest.mark.parametrize("arr,match", [
    (np.zeros((SIZE, SIZE, 2), np.uint8), r"shape \(32, 32, 2\); accepted: HxW"),
    (np.zeros((SIZE, SIZE, 3), np.float32), "dtype float32; only uint8"),
    (np.zeros((0, 0, 3), np.uint8), "no pixels"),
])
def test_bad_arrays(spec, arr, match):
    with pytest.raises(ProcessorError, match=match):
        preprocess_image(arr, spec)


def test_bad_type_and_dtype(spec):
    with pytest.raises(ProcessorError, match="type list is not accepted: pass a path"):
        preprocess_image([[1, 2, 3]], spec)
    with pytest.raises(ProcessorError, match="dtype .* is not accepted: use np.float32 or np.float16"):
        preprocess_image(demo_image(SIZE), spec, dtype=np.float64)


def test_missing_and_corrupt_files(spec, tmp_path):
    with pytest.raises(ProcessorError, match=r"image file '.*nope\.png' does not exist"):
        load_image(tmp_path / "nope.png")
    with pytest.raises(ProcessorError, match="is not a file"):
        load_image(tmp_path)
    (tmp_path / "notes.png").write_text("this is not a picture")
    with pytest.raises(ProcessorError, match=r"notes\.png' is not an image Pillow can read"):
        preprocess_image(tmp_path / "notes.png", spec)
    full = tmp_path / "full.png"
    demo_image(SIZE).save(full)
    data = full.read_bytes()
    for cut in (len(data) // 2, 100, 20):  # inside the pixels, the first chunk, the IHDR chunk
        p = tmp_path / f"cut{cut}.png"
        p.write_bytes(data[:cut])
        with pytest.raises(ProcessorError, match=rf"cut{cut}\.png' could not be read or decoded"):
            preprocess_image(p, spec)
    with Image.open(tmp_path / f"cut{len(data) // 2}.png") as im, pytest.raises(ProcessorError, match="decoded"):
        preprocess_image(im, spec)


def test_image_spec_errors():
    with pytest.raises(ProcessorError, match=r"height=0 is invalid"):
        tiny_spec(height=0)
    with pytest.raises(ProcessorError, match=r"std=.*> 0"):
        tiny_spec(std=(1.0, -1.0, 1.0))
    with pytest.raises(ProcessorError, match="resample='cubic' is invalid: allowed: nearest"):
        tiny_spec(resample="cubic")


# ---- configs -----------------------------------------------------------------------------------
ORTX = {"processor": processor_config(TINY)["processor"]}
HF = {"do_convert_rgb": None, "do_normalize": True, "do_pan_and_scan": None, "do_rescale": True, "do_resize": True,
      "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "Gemma3ImageProcessor", "image_seq_length": 256,
      "image_std": [0.5, 0.5, 0.5], "pan_and_scan_max_num_crops": None, "pan_and_scan_min_crop_size": None,
      "pan_and_scan_min_ratio_to_activate": None, "processor_class": "Gemma3Processor", "resample": 2,
      "rescale_factor": 1 / 255, "size": {"height": 64, "width": 48}}


def test_flat_fixture_config(tmp_path):
    c = read_image_config(write(tmp_path, "processor_config.json", processor_config(TINY)))
    assert c.spec.size == (SIZE, SIZE) and c.tokens_per_image == TINY.n_image_tokens
    assert c.tokens["boi_token"] == "<start_of_image>" and c.spec.resample == "bilinear"
    bad = processor_config(TINY)
    bad["processor"]["transforms"][1]["operation"]["attrs"]["width"] = 16
    with pytest.raises(ProcessorError, match="'processor' transforms .* disagree with its flat fields"):
        read_image_config(write(tmp_path, "processor_config.json", bad))


def test_ortx_config_and_hf_token_count(tmp_path):
    c = read_image_config(write(tmp_path, "processor_config.json", ORTX))
    assert c.spec.size == (SIZE, SIZE) and c.tokens_per_image is None  # from the vision model then
    write(tmp_path, "preprocessor_config.json", HF)
    assert read_image_config(tmp_path).tokens_per_image == 256  # HF's image_seq_length beside it
    assert read_image_config(tmp_path).spec.size == (SIZE, SIZE)  # processor_config.json defines the pixels


def test_hf_config_alone(tmp_path):
    c = read_image_config(write(tmp_path, "preprocessor_config.json", HF))
    assert c.spec.size == (64, 48) and c.spec.resample == "bilinear" and c.tokens_per_image == 256


def _ortx_with(fn) -> dict:
    d = copy.deepcopy(ORTX)
    fn(d["processor"]["transforms"])
    return d


@pytest.mark.parametrize("cfg,match", [
    (_ortx_with(lambda t: t.insert(1, {"operation": {"type": "Gemma4ImageTransform"}})),
     "transform type 'Gemma4ImageTransform' is not supported"),
    (_ortx_with(lambda t: t[1]["operation"]["attrs"].update(keep_aspect_ratio=1)), "keep_aspect_ratio=1"),
    (_ortx_with(lambda t: t[1]["operation"]["attrs"].update(interpolation="AREA")), "interpolation 'AREA'"),
    (_ortx_with(lambda t: t[1]["operation"]["attrs"].update(smart_resize=1)), r"\['smart_resize'\] are not read"),
    (_ortx_with(lambda t: t[0]["operation"]["attrs"].update(color_space="BGR")), "BGR pixels"),
    (_ortx_with(lambda t: t.reverse()), "out of order"),
    (_ortx_with(lambda t: t.pop(3)), "no Normalize"),
    (_ortx_with(lambda t: t[4]["operation"]["attrs"].update(dims=[0, 1, 2])), "Permute3D dims"),
    ({"something": 1}, "neither an onnxruntime-extensions config"),
])
def test_ortx_refusals(tmp_path, cfg, match):
    with pytest.raises(ProcessorError, match=match):
        read_image_config(write(tmp_path, "processor_config.json", cfg))


def test_ortx_bgr_then_convert_rgb(tmp_path):
    def bgr(t):
        t[0]["operation"]["attrs"]["color_space"] = "BGR"
        t.insert(1, {"operation": {"name": "convert_to_rgb", "type": "ConvertRGB"}})

    assert read_image_config(write(tmp_path, "processor_config.json", _ortx_with(bgr))).spec.size == (SIZE, SIZE)


@pytest.mark.parametrize("change,match", [
    ({"do_pan_and_scan": True}, "do_pan_and_scan is on"),
    ({"do_resize": False}, "do_resize=False"),
    ({"size": {"shortest_edge": 64}}, "'size' must be"),
    ({"resample": 9}, "'resample'=9"),
    ({"crop_size": 3}, r"\['crop_size'\] are not read"),
    ({"image_seq_length": 0}, "image_seq_length"),
])
def test_hf_refusals(tmp_path, change, match):
    with pytest.raises(ProcessorError, match=match):
        read_image_config(write(tmp_path, "preprocessor_config.json", HF | change))


def test_no_config(tmp_path):
    with pytest.raises(ProcessorError, match="processor_config.json: file not found .* or preprocessor_config.json"):
        read_image_config(tmp_path)


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
