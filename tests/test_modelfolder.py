"""vlmdecode.modelfolder: reading genai_config.json and checking it against the ONNX files.

Our fixture folders (VLM and text/) load with the right components and decoder facts; every broken
folder or config raises ModelFolderError naming the field or file; a hypothesis fuzz of random
mutations of a valid config never gets any other exception type out of ModelFolder.load.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlmdecode.fixture import preset
from vlmdecode.modelfolder import CONFIG_NAME, ModelFolder, ModelFolderError


@pytest.fixture(scope="module")
def folders(fixture_folder):
    return {a: fixture_folder("tiny", attention=a) for a in ("gqa", "onnx")}  # shared (conftest): copy to modify


@pytest.fixture(scope="module")
def gqa(folders) -> Path:
    return folders["gqa"]


@pytest.fixture(scope="module")
def valid_cfg(gqa) -> dict:
    return json.loads((gqa / CONFIG_NAME).read_text())


@pytest.fixture
def work(gqa, tmp_path) -> Path:
    """A writable copy of the gqa fixture folder (ONNX files included) for one test."""
    out = tmp_path / "m"
    shutil.copytree(gqa, out)
    return out


def write_cfg(folder: Path, cfg) -> None:
    (folder / CONFIG_NAME).write_text(json.dumps(cfg))


def edit(cfg: dict, path: str, value=None, delete: bool = False) -> dict:
    cfg = copy.deepcopy(cfg)
    *parents, last = path.split(".")
    node = cfg
    for p in parents:
        node = node[p]
    if delete:
        del node[last]
    else:
        node[last] = value
    return cfg


def load_error(folder: Path, cfg) -> str:
    write_cfg(folder, cfg)
    with pytest.raises(ModelFolderError) as e:
        ModelFolder.load(folder)
    return str(e.value)


# ---- our folders load ------------------------------------------------------------------------------
@pytest.mark.parametrize("attention,layout", [("gqa", "shared"), ("onnx", "concat")])
def test_load_vlm_folder(folders, attention, layout):
    f = ModelFolder.load(folders[attention])
    cfg = preset("tiny", attention=attention)
    assert f.is_vlm and f.model_type == "gemma3"
    assert f.vision.path.name == "vision.onnx" and f.embedding.path.name == "embedding.onnx"
    assert f.decoder.path == (folders[attention] / "decoder.onnx").resolve()
    i = f.info
    assert (i.num_layers, i.num_heads, i.num_kv_heads, i.head_size, i.hidden_size) == (
        cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size)
    assert i.drive == "embeds" and i.kv_layout == layout and np.dtype(i.dtype) == np.float32
    assert f.max_length == cfg.max_length and f.vocab_size == cfg.vocab_size
    assert f.eos_token_ids == (1, 5) and f.bos_token_id == 2 and f.pad_token_id == 0 and f.image_token_id == 8
    assert i.past_names(f.decoder)[2] == ("past_key_values.2.key", "past_key_values.2.value")
    assert i.present_names(f.decoder)[0] == ("present.0.key", "present.0.value")
    assert f.vision.inputs["pixel_values"] == "pixel_values" and f.embedding.outputs["inputs_embeds"] == "inputs_embeds"
    assert ("GroupQueryAttention" in f.decoder.signature.ops) == (attention == "gqa")


def test_load_text_folder(gqa):
    f = ModelFolder.load(str(gqa / "text"))  # a str works too
    assert not f.is_vlm and f.vision is None and f.embedding is None and f.image_token_id is None
    assert f.model_type == "gemma3_text" and f.info.drive == "ids" and f.info.kv_layout == "shared"
    assert f.decoder.inputs["input_ids"] == "input_ids"


def test_context_length_used_without_search_max_length(work, valid_cfg):
    cfg = edit(valid_cfg, "search.max_length", delete=True)
    cfg["model"]["context_length"] = 200
    write_cfg(work, cfg)
    assert ModelFolder.load(work).max_length == 200


def test_no_share_buffer_is_concat(work, valid_cfg):
    write_cfg(work, edit(valid_cfg, "search.past_present_share_buffer", False))
    assert ModelFolder.load(work).info.kv_layout == "concat"


def test_scalar_eos(work, valid_cfg):
    write_cfg(work, edit(valid_cfg, "model.eos_token_id", 1))
    assert ModelFolder.load(work).eos_token_ids == (1,)


# ---- folder-level errors -----------------------------------------------------------------------------
def test_missing_dir(tmp_path):
    with pytest.raises(ModelFolderError, match="does not exist"):
        ModelFolder.load(tmp_path / "nowhere")


def test_file_instead_of_dir(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ModelFolderError, match="not a directory"):
        ModelFolder.load(tmp_path / "f")


def test_no_genai_config(tmp_path):
    with pytest.raises(ModelFolderError, match=CONFIG_NAME):
        ModelFolder.load(tmp_path)


@pytest.mark.parametrize("text", ["{", "", "{'model': 1}", "[" * 100_000, "\ufeff{}"], ids=[
    "truncated", "empty", "single-quotes", "deeply-nested", "bom"])
def test_invalid_json(work, text):
    (work / CONFIG_NAME).write_text(text, encoding="utf-8")
    with pytest.raises(ModelFolderError, match="not valid JSON"):
        ModelFolder.load(work)


def test_not_utf8(work):
    (work / CONFIG_NAME).write_bytes(b'{"model": "\xff\xfe"}')
    with pytest.raises(ModelFolderError, match="not valid JSON"):
        ModelFolder.load(work)


@pytest.mark.parametrize("top", [[], 3, "x", None])
def test_top_level_not_object(work, top):
    assert "top level must be an object" in load_error(work, top)


# ---- field errors ------------------------------------------------------------------------------------
REQUIRED = [
    "model",
    "model.type",
    "model.decoder",
    "model.decoder.filename",
    "model.decoder.inputs.past_key_names",
    "model.decoder.inputs.past_value_names",
    "model.decoder.outputs.present_key_names",
    "model.decoder.outputs.present_value_names",
    "model.decoder.num_hidden_layers",
    "model.decoder.num_attention_heads",
    "model.decoder.num_key_value_heads",
    "model.decoder.head_size",
    "model.decoder.hidden_size",
    "model.vision",
    "model.vision.filename",
    "model.embedding",
    "model.embedding.filename",
    "model.image_token_id",
    "model.eos_token_id",
    "model.bos_token_id",
    "model.pad_token_id",
    "model.vocab_size",
]


@pytest.mark.parametrize("field", REQUIRED)
def test_required_field_missing(work, valid_cfg, field):
    msg = load_error(work, edit(valid_cfg, field, delete=True))
    assert field in msg, msg


def test_max_length_and_context_length_missing(work, valid_cfg):
    cfg = edit(edit(valid_cfg, "search.max_length", delete=True), "model.context_length", delete=True)
    assert "model.context_length" in load_error(work, cfg)


def test_inputs_embeds_entry_missing_names_input_ids(work, valid_cfg):
    """Without inputs_embeds in the config the decoder is taken to be driven by input_ids, which it lacks."""
    msg = load_error(work, edit(valid_cfg, "model.decoder.inputs.inputs_embeds", delete=True))
    assert "'input_ids'" in msg and "decoder.onnx" in msg


@pytest.mark.parametrize("field,value", [
    ("model.decoder.num_hidden_layers", "3"),
    ("model.decoder.num_hidden_layers", True),
    ("model.decoder.num_hidden_layers", 0),
    ("model.decoder.num_hidden_layers", 3.0),
    ("model.decoder.hidden_size", None),
    ("model.decoder.head_size", -16),
    ("model.decoder.num_attention_heads", 0),
    ("model.decoder.num_key_value_heads", [2]),
    ("model.eos_token_id", "1"),
    ("model.eos_token_id", [1, "5"]),
    ("model.eos_token_id", True),
    ("model.bos_token_id", 2.5),
    ("model.vocab_size", {}),
    ("model.type", 3),
    ("model.decoder", []),
    ("model.decoder.inputs", "attention_mask"),
    ("model.decoder.inputs", ["attention_mask"]),
    ("model.decoder.outputs", 7),
    ("model.vision", "vision.onnx"),
    ("model.decoder.inputs.attention_mask", 5),
    ("model.image_token_id", "8"),
    ("search", None),
    ("search", []),
    ("search.max_length", 0),
    ("search.max_length", "256"),
    ("search.max_length", False),
    ("model.decoder.filename", 0),
    ("model.decoder.filename", ""),
])
def test_bad_field_value(work, valid_cfg, field, value):
    msg = load_error(work, edit(valid_cfg, field, value))
    assert field.split(".")[-1] in msg, msg


@pytest.mark.parametrize("field,value", [
    ("model.decoder.num_key_value_heads", 4),
    ("model.decoder.head_size", 8),
    ("model.decoder.hidden_size", 32),
    ("model.vocab_size", 256),
    ("model.decoder.num_hidden_layers", 2),
    ("model.decoder.num_hidden_layers", 4),
    ("model.decoder.num_hidden_layers", 10**18),
])
def test_decoder_facts_disagree_with_onnx(work, valid_cfg, field, value):
    """A config whose sizes contradict the ONNX file's declared shapes fails at load, not mid-decode."""
    msg = load_error(work, edit(valid_cfg, field, value))
    assert field.split(".")[-1] in msg or "past_key_values" in msg, msg


def test_filename_does_not_exist(work, valid_cfg):
    msg = load_error(work, edit(valid_cfg, "model.vision.filename", "nope.onnx"))
    assert "'nope.onnx'" in msg and "does not exist" in msg


def test_filename_is_a_directory(work, valid_cfg):
    msg = load_error(work, edit(valid_cfg, "model.decoder.filename", "text"))
    assert "'text'" in msg


def test_filename_not_onnx(work, valid_cfg):
    msg = load_error(work, edit(valid_cfg, "model.decoder.filename", "tokenizer.json"))
    assert "tokenizer.json" in msg and "ONNX" in msg


def test_filename_escapes_parent(work, valid_cfg):
    shutil.copy(work / "decoder.onnx", work.parent / "x.onnx")  # exists: refused anyway
    msg = load_error(work, edit(valid_cfg, "model.decoder.filename", "../x.onnx"))
    assert "'../x.onnx'" in msg and "escapes" in msg


def test_filename_escapes_through_subdir(work, valid_cfg):
    msg = load_error(work, edit(valid_cfg, "model.embedding.filename", "text/../../x.onnx"))
    assert "escapes" in msg


def test_filename_absolute(work, valid_cfg, gqa):
    absolute = str((gqa / "decoder.onnx").resolve())  # a real ONNX file, outside this folder
    msg = load_error(work, edit(valid_cfg, "model.decoder.filename", absolute))
    assert absolute in msg and "absolute" in msg


def test_filename_symlink_escape(work, valid_cfg, gqa):
    (work / "link.onnx").symlink_to((gqa / "decoder.onnx").resolve())
    msg = load_error(work, edit(valid_cfg, "model.decoder.filename", "link.onnx"))
    assert "escapes" in msg


@pytest.mark.parametrize("name", ["a\x00b.onnx", "x" * 5000 + ".onnx", "a/" * 3000 + "b.onnx"],
                         ids=["nul", "long-name", "long-path"])
def test_filename_unusable_path(work, valid_cfg, name):
    msg = load_error(work, edit(valid_cfg, "model.decoder.filename", name))
    assert "model.decoder" in msg or "filename" in msg, msg


def test_filename_inside_subfolder_ok(work, valid_cfg):
    """A relative path into a subfolder that stays inside the model folder is fine."""
    (work / "sub").mkdir()
    shutil.copy(work / "vision.onnx", work / "sub" / "v.onnx")
    write_cfg(work, edit(valid_cfg, "model.vision.filename", "sub/v.onnx"))
    assert ModelFolder.load(work).vision.path == (work / "sub" / "v.onnx").resolve()


@pytest.mark.parametrize("field,name", [
    ("model.decoder.inputs.attention_mask", "nope"),
    ("model.decoder.inputs.past_key_names", "past.%d.k"),
    ("model.decoder.outputs.present_value_names", "present.%d.v"),
    ("model.decoder.outputs.logits", "nope"),
    ("model.vision.inputs.pixel_values", "nope"),
    ("model.vision.outputs.image_features", "nope"),
    ("model.embedding.inputs.input_ids", "nope"),
    ("model.embedding.inputs.image_features", "nope"),
    ("model.embedding.outputs.inputs_embeds", "nope"),
])
def test_name_missing_from_onnx(work, valid_cfg, field, name):
    msg = load_error(work, edit(valid_cfg, field, name))
    shown = name % 0 if "%d" in name else name
    assert repr(shown) in msg and ".onnx" in msg, msg


def test_position_ids_mapped_to_an_absent_name_leaves_the_input_unbound(work, valid_cfg):
    # the mapping is dropped (genai treats position_ids as optional), but the graph's own position_ids input
    # would then be unbound at the first run: refused at load (issue 12, defect 7)
    msg = load_error(work, edit(valid_cfg, "model.decoder.inputs.position_ids", "nope"))
    assert "['position_ids']" in msg and "unbound" in msg, msg


@pytest.mark.parametrize("key", ["past_key_names", "past_value_names", "present_key_names", "present_value_names"])
@pytest.mark.parametrize("pattern", ["past_key_values.key", "present.%s.key", "p.%d.%d", "p.%d.%", "%x.%d"])
def test_kv_pattern_without_single_percent_d(work, valid_cfg, key, pattern):
    section = "inputs" if key.startswith("past") else "outputs"
    msg = load_error(work, edit(valid_cfg, f"model.decoder.{section}.{key}", pattern))
    assert key in msg and "%d" in msg, msg


def test_embeds_decoder_without_embedding(work, valid_cfg):
    cfg = edit(edit(valid_cfg, "model.vision", delete=True), "model.embedding", delete=True)
    assert "model.embedding" in load_error(work, cfg)


# ---- fuzz --------------------------------------------------------------------------------------------
FILENAMES = ["decoder.onnx", "vision.onnx", "embedding.onnx", "text/decoder.onnx", "tokenizer.json",
             "genai_config.json", "fixture.json", "text", ".", "..", "../m/decoder.onnx", "/etc/passwd", "/",
             "nope.onnx", "a\x00b", "x" * 300, "~/x.onnx", "decoder.onnx/", "./decoder.onnx", "%d", " "]

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-3, 400), st.floats(allow_nan=True),
    st.text(max_size=12), st.sampled_from(FILENAMES),
    st.sampled_from(["%d", "past_key_values.%d.key", "present.%d.value", "p.%d.%d", "%s", "%", "%(x)d"]),
)
json_value = st.recursive(json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c,
                                                                                            max_size=3),
                          max_leaves=6)


def _paths(node, prefix=()):
    """Every (container path, key) in a JSON tree, dict keys and list indices alike."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        yield prefix + (k,)
        yield from _paths(v, prefix + (k,))


def _mutate(cfg, data):
    paths = sorted(_paths(cfg), key=lambda p: tuple(map(str, p)))
    if not paths:
        return data.draw(json_value)
    path = data.draw(st.sampled_from(paths))
    parent = cfg
    for k in path[:-1]:
        parent = parent[k]
    op = data.draw(st.sampled_from(["delete", "replace", "filename", "pattern"]))
    key = path[-1]
    if op == "delete":
        parent.pop(key)  # dict key or list index
    elif op == "replace":
        parent[key] = data.draw(json_value)
    elif op == "filename":
        parent[key] = data.draw(st.sampled_from(FILENAMES) | st.text(max_size=20))
    else:
        parent[key] = data.draw(st.text(alphabet="%dsx.k0", max_size=8))
    return cfg


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_config_only_raises_modelfoldererror(fuzz_dir, valid_cfg, data):
    cfg = copy.deepcopy(valid_cfg)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        cfg = _mutate(cfg, data)
    text = json.dumps(cfg)
    if data.draw(st.booleans(), label="truncate"):
        text = text[: data.draw(st.integers(0, len(text)), label="cut")]
    (fuzz_dir / CONFIG_NAME).write_text(text)
    try:
        f = ModelFolder.load(fuzz_dir)
    except ModelFolderError as e:
        assert str(e)  # a message, whatever it says
        return
    # what loaded is usable: the facts the decoders need are well typed
    assert isinstance(f.max_length, int) and f.max_length > 0
    assert all(isinstance(e, int) and not isinstance(e, bool) for e in f.eos_token_ids)
    assert f.info.num_layers > 0 and len(f.info.past_names(f.decoder)) == f.info.num_layers
    assert f.info.drive in ("embeds", "ids")


@pytest.fixture(scope="module")
def fuzz_dir(gqa, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fuzz") / "m"
    shutil.copytree(gqa, out)
    return out
