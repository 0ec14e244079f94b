"""Issue 12, defect 1: a model folder never makes onnxruntime (ours or onnxruntime-genai's) run its code or
write files; a changed cached fixture is never reused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import vlmdecode
from vlmdecode.fixture.cache import FixtureCacheError, ensure_fixture
from vlmdecode.modelfolder import ModelFolder, ModelFolderError
from vlmdecode.peer import genai_available, genai_greedy, load_genai_model
from vlmdecode.sessionpolicy import SessionPolicyError, check_genai_config, check_session_options, max_threads

needs_genai = pytest.mark.skipif(not genai_available(), reason="onnxruntime-genai not installed")


@pytest.fixture(scope="module")
def model(tiny_folder) -> Path:
    return tiny_folder  # shared (conftest): copy to modify


@pytest.fixture
def folder_with(model, tmp_path):
    """folder_with(options, role="decoder") -> a copy of the fixture whose model.<role>.session_options is options."""

    def make(options, role="decoder"):
        d = tmp_path / "m"
        shutil.copytree(model, d)
        cfg = json.loads((d / "genai_config.json").read_text())
        cfg["model"][role]["session_options"] = options
        (d / "genai_config.json").write_text(json.dumps(cfg))
        return d

    return make


@pytest.fixture(scope="module")
def constructor_library(tmp_path_factory):
    """A shared library whose constructor writes a marker file: proof that it was loaded. None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    d = tmp_path_factory.mktemp("so")
    marker = d / "constructor_ran"
    src = d / "evil.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void run(void) '
                   f'{{ FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }} }}\n')
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / "evil.so"), str(src)], check=True)
    return d / "evil.so", marker


REFUSED = [
    ({"custom_ops_library": "evil.so"}, "custom_ops_library"),
    ({"enable_profiling": "/tmp/vlmdecode_profile"}, "enable_profiling"),
    ({"config_entries": {"session.use_env_allocators": "1"}}, "config_entries"),
    ({"ep_context_file_path": "/tmp/x.onnx"}, "ep_context_file_path"),
    ({"made_up_option": 1}, "made_up_option"),
    ({"provider_options": [{"tensorrt": {"trt_extra_plugin_lib_paths": "evil.so"}}]}, "tensorrt"),
    ({"provider_options": [{"cuda": {"backend_path": "evil.so"}}]}, "backend_path"),
    ({"intra_op_num_threads": 10**6}, "intra_op_num_threads"),
    ({"intra_op_num_threads": "2"}, "intra_op_num_threads"),
    ("fast please", "session_options"),
]


@pytest.mark.parametrize("options, needle", REFUSED)
@pytest.mark.parametrize("role", ["decoder", "vision", "embedding"])
def test_vlmdecode_load_refuses_unsafe_session_options(folder_with, options, needle, role):
    d = folder_with(options, role)
    with pytest.raises(ModelFolderError, match=needle) as e:
        ModelFolder.load(d)
    assert f"model.{role}.session_options" in str(e.value)


@needs_genai
@pytest.mark.parametrize("options, needle", REFUSED[:6])
def test_genai_peer_refuses_unsafe_session_options(folder_with, options, needle):
    with pytest.raises(SessionPolicyError, match=needle):
        load_genai_model(folder_with(options))


@needs_genai
def test_custom_ops_library_is_never_loaded(folder_with, constructor_library):
    """Before the policy, onnxruntime-genai dlopen()ed the folder's library and its constructor ran."""
    if constructor_library is None:
        pytest.skip("no C compiler to build the probe library")
    lib, marker = constructor_library
    d = folder_with({"custom_ops_library": str(lib)})
    shutil.copy(lib, d / "evil.so")
    for opts in ({"custom_ops_library": str(lib)}, {"custom_ops_library": "evil.so"}):
        cfg = json.loads((d / "genai_config.json").read_text())
        cfg["model"]["decoder"]["session_options"] = opts
        (d / "genai_config.json").write_text(json.dumps(cfg))
        with pytest.raises(SessionPolicyError, match="custom_ops_library"):
            genai_greedy(d, [2, 10, 11], 2)
        with pytest.raises(ModelFolderError, match="custom_ops_library"):
            vlmdecode.load(d)
    assert not marker.exists()
    # and nowhere else in the file either (a key genai might read at another level)
    cfg["model"]["decoder"]["session_options"] = {}
    cfg["model"]["custom_ops_library"] = "evil.so"
    with pytest.raises(SessionPolicyError, match="model.custom_ops_library"):
        check_genai_config(cfg, d)
    assert not marker.exists()


@needs_genai
def test_profiling_writes_nothing(folder_with, tmp_path):
    prefix = tmp_path / "outside" / "profile"
    prefix.parent.mkdir()
    d = folder_with({"enable_profiling": str(prefix)})
    with pytest.raises(SessionPolicyError, match="enable_profiling"):
        genai_greedy(d, [2, 10, 11], 2)
    assert list(prefix.parent.iterdir()) == []


@needs_genai
def test_genai_loads_the_checked_copy(model, folder_with):
    """genai reads the bytes that were checked, from a private folder of links; tokens are unchanged."""
    safe = {"log_id": "x", "intra_op_num_threads": 1, "enable_mem_pattern": True,
            "provider_options": [{"cuda": {"enable_cuda_graph": "0"}}]}
    d = folder_with(safe)
    m = load_genai_model(d)
    view = Path(m.view.name)
    assert view != d and (view / "genai_config.json").read_bytes() == (d / "genai_config.json").read_bytes()
    assert (view / "decoder.onnx").resolve() == (d / "decoder.onnx").resolve()
    ref = vlmdecode.load(model).generate_from_ids([[2, 10, 11, 12]], max_new_tokens=5, stop=()).tokens
    assert genai_greedy(m, [2, 10, 11, 12], 5).tokens == ref


def test_genai_filename_outside_the_folder_is_refused(model, tmp_path):
    cfg = json.loads((model / "genai_config.json").read_text())
    cfg["model"]["decoder"]["filename"] = "../elsewhere/decoder.onnx"
    with pytest.raises(SessionPolicyError, match="outside the model folder"):
        check_genai_config(cfg, model)


def test_safe_options_apply_to_vlmdecode_sessions(folder_with):
    d = folder_with({"log_id": "mine", "intra_op_num_threads": 1, "enable_mem_pattern": False,
                     "graph_optimization_level": "ORT_ENABLE_BASIC"})
    pipe = vlmdecode.load(d)
    so = pipe.decoder.session.get_session_options()
    assert so.intra_op_num_threads == 1 and so.enable_mem_pattern is False and so.logid == "mine"
    assert str(so.graph_optimization_level).endswith("ORT_ENABLE_BASIC")
    assert vlmdecode.load(d, threads=2 if max_threads() >= 2 else 1).decoder.session.get_session_options() \
        .intra_op_num_threads == (2 if max_threads() >= 2 else 1)  # the caller's threads win


def test_session_options_keys_are_named():
    assert check_session_options({"log_id": "a", "provider_options": []}, "x") == {"log_id": "a",
                                                                                     "provider_options": []}
    with pytest.raises(SessionPolicyError, match=r"x\.custom_ops_library is refused: it loads a shared library"):
        check_session_options({"custom_ops_library": "a.so"}, "x")
    with pytest.raises(SessionPolicyError, match="accepted: log_id"):
        check_session_options({"nope": 1}, "x")


# ---- the fixture cache ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tamper", ["edit", "add", "remove", "link"])
def test_changed_cached_fixture_is_refused(tmp_path, tamper):
    folder = ensure_fixture("tiny", root=tmp_path)
    if tamper == "edit":
        cfg = json.loads((folder / "genai_config.json").read_text())
        cfg["model"]["decoder"]["session_options"] = {"custom_ops_library": "evil.so"}
        (folder / "genai_config.json").write_text(json.dumps(cfg))
        needle = "genai_config.json changed since the build"
    elif tamper == "add":
        (folder / "evil.so").write_bytes(b"\x7fELF")
        needle = "evil.so is not a file the build wrote"
    elif tamper == "remove":
        (folder / "text" / "tokenizer.json").unlink()
        needle = "text/tokenizer.json is missing"
    else:
        (folder / "decoder.onnx").unlink()
        (folder / "decoder.onnx").symlink_to(folder / "text" / "decoder.onnx")
        needle = "decoder.onnx is not a regular file"
    with pytest.raises(FixtureCacheError, match=needle) as e:
        ensure_fixture("tiny", root=tmp_path)
    assert "rm -r" in str(e.value)


def test_intact_cached_fixture_is_reused(tmp_path):
    folder = ensure_fixture("tiny", root=tmp_path)
    stamp = (folder / "fixture.json").stat().st_mtime_ns
    assert ensure_fixture("tiny", root=tmp_path) == folder
    assert (folder / "fixture.json").stat().st_mtime_ns == stamp


def test_cli_no_longer_holds_the_cache():
    """issue 13: the cache lives in fixture/, so bench does not import cli (no cycle)."""
    code = "import sys, vlmdecode.bench, vlmdecode.fixture.cache; print('vlmdecode.cli' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
