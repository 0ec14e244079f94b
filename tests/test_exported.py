"""Folders as the real exporters write them (#11): loaded unchanged, decoded on CPU to their expected tokens.

tests/data/exported/ (made by scripts/exported/, see its README): onnxruntime-genai builder text folders
(fp32 windowed and full KV, int4 MatMulNBits, pruned LM head, hidden states), a VLM folder (builder
decoder driven by inputs_embeds + torch.onnx vision/embedding + onnxruntime-extensions processor config)
and an optimum export (KV grows by Concat). The CUDA-only exports load here; they decode in
tests/test_cuda_exported.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from exported_util import cases, decode, folders

import vlmdecode
from vlmdecode.kvcache import kv_nbytes
from vlmdecode.modelfolder import ModelFolder

CPU = folders(cuda=False)
CASES = [c for d in CPU for c in cases(d)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.folder.name}-{c.image.name if c.image else 'text'}")
def test_prompt_ids_equal_hf_processor(case):
    pipe = vlmdecode.load(case.folder, "cpu")
    assert pipe.processor.encode_prompt(case.prompt, 1 if case.image else 0)[0].tolist() == case.ids


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.folder.name}-{c.image.name if c.image else 'text'}")
def test_decodes_to_expected_tokens(case):
    pipe = vlmdecode.load(case.folder, "cpu")
    assert decode(pipe, case) == case.tokens, case.source


def test_windowed_equals_full_kv_and_allocates_less():
    names = {d.name: d for d in CPU}
    if not {"builder-text-fp32", "builder-text-fp32-fullkv"} <= set(names):
        pytest.skip("the builder's windowed / full-KV pair is not in tests/data/exported")
    win, full = (vlmdecode.load(names[n], "cpu") for n in ("builder-text-fp32", "builder-text-fp32-fullkv"))
    case = cases(names["builder-text-fp32"])[0]
    assert decode(win, case) == decode(full, case) == case.tokens
    info = win.folder.info
    assert info.windows == (12, 12, 12, 12, 12, None) and full.folder.info.windows == (None,) * 6
    assert win.decoder.kv.capacities == [12 + 16] * 5 + [512]  # CPU: window + 16 (onnxruntime-genai's CPU slack)
    assert full.decoder.kv.capacities == [512] * 6
    assert win.decoder.kv.nbytes == kv_nbytes(win.decoder.kv.capacities, 1, 16, np.float32) < full.decoder.kv.nbytes


@pytest.mark.parametrize("folder", folders(cuda=True), ids=lambda d: d.name)
def test_cuda_exports_load_and_refuse_cpu(folder):
    f = ModelFolder.load(folder)
    assert f.info.windowed and f.decoder.signature.cuda_only
    with pytest.raises(vlmdecode.modelfolder.ModelFolderError, match="cannot run on cpu"):
        vlmdecode.load(folder, "cpu")


def test_optimum_export_is_eager_only():
    d = next((d for d in CPU if d.name.startswith("optimum")), None)
    if d is None:
        pytest.skip("no optimum export in tests/data/exported")
    from vlmdecode.decoders.cuda import check_mode

    f = ModelFolder.load(d)
    assert f.info.kv_layout == "concat"
    for mode in ("graph", "device"):
        with pytest.raises(ValueError, match="grows by Concat"):
            check_mode(mode, f)


@pytest.mark.parametrize("folder", folders(cuda=True), ids=lambda d: d.name)
def test_cuda_exports_pass_check_mode_in_every_mode(folder):
    """Windowed KV runs in every CUDA mode (graph and device capture on a harmless step first: decoders.cuda,
    "Windowed KV"; tokens on the H200: test_windowed_cuda, test_cuda_exported)."""
    from vlmdecode.decoders.cuda import check_mode

    f = ModelFolder.load(folder)
    assert f.info.windowed
    assert [check_mode(m, f) for m in ("eager", "graph", "device")] == ["eager", "graph", "device"]


def test_vlm_images_of_any_size_and_mode(tmp_path):
    from PIL import Image

    d = next((d for d in CPU if (d / "vision.onnx").is_file()), None)
    if d is None:
        pytest.skip("no VLM folder in tests/data/exported")
    pipe = vlmdecode.load(d, "cpu")
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (1500, 2000, 3), np.uint8)).save(tmp_path / "big.jpg")
    Image.fromarray(rng.integers(0, 256, (41, 57), np.uint8), "L").save(tmp_path / "gray.jpg")
    for name in ("big.jpg", "gray.jpg"):
        out = pipe.generate("What is in this image?", image=tmp_path / name, max_new_tokens=4, do_sample=False)
        assert out.tokens
    assert pipe.processor.preprocess([tmp_path / "big.jpg"]).shape == (1, 3, 64, 64)
    (tmp_path / "bad.png").write_bytes((d / "image_64x64.png").read_bytes()[:200])  # truncated PNG
    with pytest.raises(vlmdecode.processor.ProcessorError, match="bad.png.*could not be read or decoded"):
        pipe.generate("What is in this image?", image=tmp_path / "bad.png", max_new_tokens=2)


def test_notebook_05_tables(tmp_path):
    """explore.exported (notebook 05): components, decoder I/O, KV per layer, tokens beside the expectations."""
    import pandas as pd

    from vlmdecode import plots
    from vlmdecode.explore import exported

    names = {d.name for d in CPU}
    if not {"builder-text-fp32", "builder-vlm"} <= names:
        pytest.skip("the builder's folders are not in tests/data/exported")
    text_dir, vlm_dir = exported.exported_dir("builder-text-fp32"), exported.exported_dir("builder-vlm")
    with pytest.raises(FileNotFoundError, match="VLMDECODE_EXPORTED"):
        exported.exported_dir("nope", root=tmp_path)
    vlm = ModelFolder.load(vlm_dir)
    assert list(exported.components(vlm)["role"]) == ["vision", "embedding", "decoder"]
    io = exported.decoder_io(vlm)
    assert "inputs_embeds" in set(io["name"]) and "past_key_values.3.key" not in set(io["name"])
    pipe = vlmdecode.load(text_dir, "cpu")
    kv = exported.kv_per_layer({"w": pipe})
    assert list(kv["capacity"]) == pipe.decoder.kv.capacities and kv["bytes"].sum() == pipe.decoder.kv.nbytes
    df = exported.tokens_beside_expected(pipe, text_dir)
    assert len(df) == 200 and df["= transformers"].all() and df["= genai"].all()
    assert plots.plot_kv_per_layer(kv) is not None and plots.plot_kv_per_layer(pd.DataFrame()) is not None


@pytest.mark.parametrize("where,key", [("model", "speculative"), ("model.decoder", "pipeline"),
                                       ("model.decoder.inputs", "past_sequence_length"), ("", "engine")])
def test_unknown_genai_config_fields_are_refused_by_name(tmp_path, where, key):
    import json
    import shutil

    src = next((d for d in CPU if d.name == "builder-text-fp32"), None)
    if src is None:
        pytest.skip("builder-text-fp32 is not in tests/data/exported")
    work = tmp_path / "m"
    shutil.copytree(src, work)
    cfg = json.loads((work / "genai_config.json").read_text())
    node = cfg
    for part in filter(None, where.split(".")):
        node = node[part]
    node[key] = 1
    (work / "genai_config.json").write_text(json.dumps(cfg))
    with pytest.raises(vlmdecode.modelfolder.ModelFolderError,
                       match=rf"field\(s\) \['{key}'\] that vlmdecode does not read"):
        ModelFolder.load(work)


def test_pixels_equal_hf_and_genai_processors():
    """The VLM folder's four images: with preprocessor_config.json the pixels are transformers' Gemma3ImageProcessor's
    exactly; with processor_config.json (what vlmdecode follows, as onnxruntime-genai) genai's within 2e-7."""
    from vlmdecode.imageconfig import read_image_config
    from vlmdecode.images import preprocess_image

    d = next((d for d in CPU if (d / "pixel_values").is_dir()), None)
    if d is None:
        pytest.skip("no VLM folder with recorded pixel_values in tests/data/exported")
    hf, ortx = read_image_config(d, "preprocessor_config.json").spec, read_image_config(d).spec
    images = sorted(p for p in d.iterdir() if p.suffix in (".png", ".jpg"))
    assert len(images) >= 4
    for image in images:
        np.testing.assert_array_equal(preprocess_image(image, hf), np.load(d / "pixel_values" / f"hf_{image.stem}.npy"))
        genai = np.load(d / "pixel_values" / f"genai_{image.stem}.npy")
        np.testing.assert_allclose(preprocess_image(image, ortx), genai, rtol=0, atol=2e-7)


def test_image_config_must_fit_the_vision_model(tmp_path):
    import json
    import shutil

    src = next((d for d in CPU if (d / "vision.onnx").is_file()), None)
    if src is None:
        pytest.skip("no VLM folder in tests/data/exported")
    work = tmp_path / "m"
    shutil.copytree(src, work)
    cfg = json.loads((work / "processor_config.json").read_text())
    resize = next(t["operation"] for t in cfg["processor"]["transforms"] if t["operation"]["type"] == "Resize")
    resize["attrs"]["width"] = 32
    (work / "processor_config.json").write_text(json.dumps(cfg))
    with pytest.raises(vlmdecode.processor.ProcessorError, match=r"resizes images to 64x32 .* pixel_values"):
        vlmdecode.load(work, "cpu")
