"""Issue 12, defects 7 and 8: what used to fail late inside onnxruntime fails at `ModelFolder.load` with a
message naming the field or file; missing installs and double installs say how to fix them."""

from __future__ import annotations

import builtins
import json
import os
import shutil
from pathlib import Path

import onnx
import pytest

import vlmdecode
from vlmdecode.modelfolder import ModelFolder, ModelFolderError
from vlmdecode.ortenv import OnnxruntimeInstallError, check_single_onnxruntime


@pytest.fixture(scope="module")
def model(tiny_folder) -> Path:
    return tiny_folder  # shared (conftest): copy to modify


@pytest.fixture
def copy(model, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(model, d)
    return d


def edit_cfg(d: Path, fn) -> Path:
    cfg = json.loads((d / "genai_config.json").read_text())
    fn(cfg)
    (d / "genai_config.json").write_text(json.dumps(cfg))
    return d


def load_error(d) -> str:
    with pytest.raises(ModelFolderError) as e:
        ModelFolder.load(d)
    return str(e.value)


def test_removed_position_ids_mapping(copy):
    """onnxruntime failed at the first run: 'Missing Input: position_ids'."""
    msg = load_error(edit_cfg(copy, lambda c: c["model"]["decoder"]["inputs"].pop("position_ids")))
    assert "['position_ids']" in msg and "decoder.onnx" in msg


@pytest.mark.parametrize("field, value", [("pad_token_id", 320), ("pad_token_id", -1), ("bos_token_id", 10**9),
                                          ("eos_token_id", [1, 400]), ("image_token_id", 999)])
def test_token_ids_outside_the_vocabulary(copy, field, value):
    msg = load_error(edit_cfg(copy, lambda c: c["model"].update({field: value})))
    assert f"model.{field}" in msg and "[0, 320)" in msg


def test_processor_image_size_disagrees_with_the_vision_model(copy):
    p = json.loads((copy / "processor_config.json").read_text())
    p["image_size"] = 48
    (copy / "processor_config.json").write_text(json.dumps(p))
    msg = load_error(copy)
    assert "image_size is 48" in msg and "vision.onnx" in msg and "32" in msg


def _set_dims(path: Path, name: str, dims) -> None:
    m = onnx.load(str(path))
    (v,) = [v for v in m.graph.input if v.name == name]
    del v.type.tensor_type.shape.dim[:]
    for d in dims:
        v.type.tensor_type.shape.dim.add().dim_value = d if isinstance(d, int) else 0
        if isinstance(d, str):
            v.type.tensor_type.shape.dim[-1].dim_param = d
    onnx.save(m, str(path))


@pytest.mark.parametrize("name, dims, needle", [
    ("inputs_embeds", ["batch", 7, 64], "fixes axis 1 to 7"),          # the prompt length cannot be bound
    ("attention_mask", ["batch", 256], "fixes axis 1 to 256"),
    ("position_ids", [2, "seq"], "axis 0 is 2"),                         # batch 2: vlmdecode feeds 1
    ("inputs_embeds", ["batch", "seq"], "rank 2"),
])
def test_decoder_dims_that_cannot_be_bound(copy, name, dims, needle):
    _set_dims(copy / "decoder.onnx", name, dims)
    assert needle in load_error(copy)


def test_session_options_string_booleans_are_refused(copy):
    """"false" read as true: search.past_present_share_buffer was bool("false") == True."""
    msg = load_error(edit_cfg(copy, lambda c: c["search"].update(past_present_share_buffer="false")))
    assert "search.past_present_share_buffer" in msg and "JSON boolean" in msg


@pytest.mark.parametrize("name", ["tokenizer.json", "processor_config.json", "genai_config.json"])
def test_symlink_outside_the_folder_is_refused(copy, tmp_path, name):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(copy / name, outside / name)
    (copy / name).symlink_to(outside / name)
    msg = load_error(copy)
    assert "outside the model folder" in msg and name in msg


def test_symlink_inside_the_folder_is_fine(copy):
    (copy / "tokenizer.json").unlink()
    (copy / "tokenizer.json").symlink_to(copy / "text" / "tokenizer.json")
    assert vlmdecode.load(copy).generate("hi", max_new_tokens=2).tokens


def test_fifo_and_directory_are_named_as_such(copy):
    os.unlink(copy / "tokenizer.json")
    os.mkfifo(copy / "tokenizer.json")
    assert "is a FIFO, not a regular file" in load_error(copy)  # not "does not exist", and no hang
    os.unlink(copy / "tokenizer.json")
    (copy / "tokenizer.json").mkdir()
    assert "is a directory, not a regular file" in load_error(copy)
    os.unlink(copy / "decoder.onnx")
    os.mkfifo(copy / "decoder.onnx")
    assert "'decoder.onnx' is a FIFO" in load_error(copy)
    f = copy.parent / "plain"
    f.write_text("")
    assert "is a file, not a directory" in load_error(f)


# ---- defect 8: errors with a hint --------------------------------------------------------------------------------
def test_double_genai_install_is_refused():
    with pytest.raises(OnnxruntimeInstallError, match="pip uninstall -y onnxruntime-genai onnxruntime-genai-cuda"):
        check_single_onnxruntime([("onnxruntime", "/a")], [("onnxruntime-genai", "/a"), ("onnxruntime-genai-cuda",
                                                                                          "/a")])
    assert check_single_onnxruntime([("onnxruntime", "/a")], [("onnxruntime-genai", "/a"),
                                                              ("onnxruntime-genai-cuda", "/b")]) == "onnxruntime"


def test_missing_onnxruntime_says_what_to_install(monkeypatch):
    from vlmdecode import peer, sessions

    real = builtins.__import__

    def no_ort(name, *a, **k):
        if name in ("onnxruntime", "onnxruntime_genai"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_ort)
    with pytest.raises(ImportError, match=r'pip install "\.\[cpu\]"'):
        sessions.ort()
    with pytest.raises(ImportError, match=r'"\.\[cuda\]" \(onnxruntime-genai-cuda\)'):
        peer.genai_greedy("x", [1], 1)


def test_bench_cuda_without_a_gpu_is_a_cuda_error(tmp_path):
    from vlmdecode import bench
    from vlmdecode.devices import cuda_device_count
    from vlmdecode.sessions import CudaUnavailableError, ort

    if "CUDAExecutionProvider" in ort().get_available_providers() and cuda_device_count() > 0:
        pytest.skip("a CUDA device is available here")
    with pytest.raises(CudaUnavailableError, match="cuda"):  # not "No module named 'cupy'"
        bench.run_matrix(devices=["cuda"], out_dir=None, root=tmp_path, log=lambda s: None, progress=False)
