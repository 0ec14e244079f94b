"""The `vlmdecode` command: demo, build-fixture and generate, in-process and once as a subprocess.

Success prints tokens, text and the time to first token; bad input exits 2 with exactly one line on
stderr naming the problem, and never a traceback (nor a silent CPU fallback for a CUDA device).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import vlmdecode
from vlmdecode.cli import EXIT_BAD_INPUT, main, parser
from vlmdecode.fixture import build_fixture, preset
from vlmdecode.fixture.build import FIXTURE_JSON
from vlmdecode.modelfolder import ModelFolder
from vlmdecode.processor import demo_image


@pytest.fixture(scope="module")
def model(tiny_folder) -> Path:
    return tiny_folder  # shared (conftest): copy to modify


@pytest.fixture(scope="module")
def png(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("img") / "demo.png"
    demo_image(32).save(path)
    return path


@pytest.fixture(scope="module")
def pipe(model):
    return vlmdecode.load(model, "cpu")


def cli(capfd, *argv):
    """main(argv) in-process -> (exit status, stdout, stderr); capfd also sees onnxruntime's own logging."""
    rc = main([str(a) for a in argv])
    out, err = capfd.readouterr()
    return rc, out, err


def assert_bad_input(rc, out, err, *needles):
    assert rc == EXIT_BAD_INPUT, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("vlmdecode ") and ": error: " in lines[0], err
    assert "Traceback" not in err and "Traceback" not in out
    for n in needles:
        assert n in lines[0], (n, err)


def tokens_line(out: str) -> list[int]:
    line = next(x for x in out.splitlines() if " tokens: [" in x)
    return json.loads(line.split(" tokens: ", 1)[1])


# ---- success ---------------------------------------------------------------------------------------------
def test_demo(monkeypatch, tmp_path, capfd):
    monkeypatch.setenv("VLMDECODE_CACHE", str(tmp_path / "cache"))
    rc, out, err = cli(capfd, "demo", "--max-new-tokens", 6)
    assert rc == 0, err
    folder = tmp_path / "cache" / "tiny-gqa-fp32"
    assert f"fixture: {folder}" in out and (folder / FIXTURE_JSON).is_file()
    assert "[cpu] 6 tokens: [" in out and "time to first token" in out and "ms" in out
    assert "KV 0" in out  # the resident decoder moved no KV bytes
    expected = vlmdecode.load(folder).generate("Describe the image.", image=demo_image(32), max_new_tokens=6,
                                               stop=()).tokens
    assert tokens_line(out) == expected
    # a second run reuses the cached fixture (not rebuilt) and prints the same tokens
    stamp = (folder / FIXTURE_JSON).stat().st_mtime_ns
    rc2, out2, _ = cli(capfd, "demo", "--max-new-tokens", 6)
    assert rc2 == 0 and (folder / FIXTURE_JSON).stat().st_mtime_ns == stamp and tokens_line(out2) == expected


def test_demo_rebuilds_stale_cache(monkeypatch, tmp_path, capfd):
    monkeypatch.setenv("VLMDECODE_CACHE", str(tmp_path))
    folder = build_fixture(preset("tiny", seed=preset("tiny").seed + 1), tmp_path / "tiny-gqa-fp32")
    rc, _, err = cli(capfd, "demo", "--max-new-tokens", 2)
    assert rc == 0, err
    assert json.loads((folder / FIXTURE_JSON).read_text())["config"]["seed"] == preset("tiny").seed


def test_build_fixture(tmp_path, capfd):
    out_dir = tmp_path / "built"
    rc, out, err = cli(capfd, "build-fixture", "--preset", "tiny", "--out", out_dir)
    assert rc == 0, err
    assert f"into {out_dir}" in out and "built tiny (gqa, unfused, fp32" in out
    f = ModelFolder.load(out_dir)
    assert f.is_vlm and f.info.kv_layout == "shared"
    # options flow through; rebuilding over a fixture folder is allowed
    rc, out, err = cli(capfd, "build-fixture", "--out", out_dir, "--attention", "onnx", "--seed", 3,
                       "--max-length", 128)
    assert rc == 0, err
    f = ModelFolder.load(out_dir)
    assert f.info.kv_layout == "concat" and f.max_length == 128
    assert json.loads((out_dir / FIXTURE_JSON).read_text())["config"]["seed"] == 3


def test_fused_layouts_build_and_cpu_refuses_the_cuda_only_one(tmp_path, capfd):
    import onnx

    nodes = {}
    for layout in ("unfused", "fused", "fused-cuda"):
        rc, out, err = cli(capfd, "build-fixture", "--layout", layout, "--out", tmp_path / layout)
        assert rc == 0 and f"gqa, {layout}, fp32" in out, err
        nodes[layout] = len(onnx.load(str(tmp_path / layout / "decoder.onnx")).graph.node)
    assert nodes["unfused"] > nodes["fused"] > nodes["fused-cuda"]
    rc, out, err = cli(capfd, "generate", "--model", tmp_path / "fused", "--prompt", "hi", "--max-new-tokens", 2)
    assert rc == 0, err
    rc, out, err = cli(capfd, "generate", "--model", tmp_path / "fused-cuda", "--prompt", "hi")
    assert_bad_input(rc, out, err, "cannot run on cpu", "q_norm_weight", "--layout fused")
    assert_bad_input(*cli(capfd, "build-fixture", "--layout", "fast", "--out", tmp_path / "x"),
                     "layout", "unfused, fused, fused-cuda")
    assert_bad_input(*cli(capfd, "build-fixture", "--layout", "fused", "--attention", "onnx",
                          "--out", tmp_path / "y"), "layout", "attention='gqa'")


def test_build_fixture_into_empty_dir(tmp_path, capfd):
    (tmp_path / "empty").mkdir()
    rc, _, err = cli(capfd, "build-fixture", "--out", tmp_path / "empty")
    assert rc == 0, err
    assert (tmp_path / "empty" / "genai_config.json").is_file()


def test_build_fixture_never_replaces_other_files(tmp_path, capfd):
    """build_fixture deletes its target first: a folder of someone's files must be refused, untouched."""
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    rc, out, err = cli(capfd, "build-fixture", "--out", precious)
    assert_bad_input(rc, out, err, str(precious), "refusing")
    assert (precious / "notes.txt").read_text() == "keep me"
    a_file = tmp_path / "file.txt"
    a_file.write_text("keep me too")
    assert_bad_input(*cli(capfd, "build-fixture", "--out", a_file), "refusing")
    assert a_file.read_text() == "keep me too"


def test_generate(model, pipe, capfd):
    rc, out, err = cli(capfd, "generate", "--model", model, "--prompt", "hi", "--max-new-tokens", 4)
    assert rc == 0, err
    r = pipe.generate("hi", max_new_tokens=4)
    assert tokens_line(out) == r.tokens and f"text: {r.text!r}" in out
    assert "time to first token" in out and "[cpu resident]" in out


def test_generate_stream(model, pipe, capfd):
    rc, out, err = cli(capfd, "generate", "--model", model, "--prompt", "hi", "--max-new-tokens", 4, "--stream")
    assert rc == 0, err
    assert out == pipe.generate("hi", max_new_tokens=4).text + "\n"


def test_generate_image(model, pipe, png, capfd):
    rc, out, err = cli(capfd, "generate", "--model", model, "--prompt", "What is this?", "--image", png,
                       "--max-new-tokens", 4)
    assert rc == 0, err
    assert tokens_line(out) == pipe.generate("What is this?", image=demo_image(32), max_new_tokens=4).tokens


def test_generate_sampling_flags(model, pipe, capfd):
    rc, out, err = cli(capfd, "generate", "--model", model, "--prompt", "hi", "--max-new-tokens", 6, "--do-sample",
                       "--seed", 5, "--temperature", 0.7, "--top-k", 20, "--top-p", 0.9, "--min-p", 0.01)
    assert rc == 0, err
    want = pipe.generate("hi", max_new_tokens=6, do_sample=True, seed=5, temperature=0.7, top_k=20, top_p=0.9,
                         min_p=0.01).tokens
    assert tokens_line(out) == want


def test_generate_text_folder(model, capfd):
    rc, out, err = cli(capfd, "generate", "--model", model / "text", "--prompt", "hi", "--max-new-tokens", 3)
    assert rc == 0, err
    assert tokens_line(out) == vlmdecode.load(model / "text").generate("hi", max_new_tokens=3).tokens


# ---- bad input: exit 2, one line, no traceback -------------------------------------------------------------
@pytest.fixture
def broken(model, tmp_path):
    """broken(edit) -> a copy of the model folder whose genai_config.json was changed by edit(cfg)."""

    def make(edit):
        d = tmp_path / "broken"
        shutil.copytree(model, d)
        cfg = json.loads((d / "genai_config.json").read_text())
        edit(cfg)
        (d / "genai_config.json").write_text(json.dumps(cfg))
        return d

    return make


def test_missing_model_dir(tmp_path, capfd):
    rc, out, err = cli(capfd, "generate", "--model", tmp_path / "nope", "--prompt", "hi")
    assert_bad_input(rc, out, err, "does not exist", str(tmp_path / "nope"))
    assert out == ""


def test_missing_config_field(broken, capfd):
    d = broken(lambda c: c["model"].pop("vocab_size"))
    assert_bad_input(*cli(capfd, "generate", "--model", d, "--prompt", "hi"), "model.vocab_size")


def test_escape_filename(broken, capfd):
    d = broken(lambda c: c["model"]["decoder"].update(filename="../decoder.onnx"))
    assert_bad_input(*cli(capfd, "generate", "--model", d, "--prompt", "hi"), "'../decoder.onnx'", "escapes")


def test_unreadable_image(model, tmp_path, capfd):
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    assert_bad_input(*cli(capfd, "generate", "--model", model, "--prompt", "hi", "--image", junk), "junk.png")
    assert_bad_input(*cli(capfd, "generate", "--model", model, "--prompt", "hi", "--image", tmp_path / "no.png"),
                     "does not exist")
    assert_bad_input(*cli(capfd, "generate", "--model", model, "--prompt", "hi", "--image", tmp_path), "not a file")


def test_image_of_any_size_and_mode(model, tmp_path, capfd):
    for name, im in (("small.png", demo_image(16)), ("gray.png", demo_image(32).convert("L")),
                     ("rgba.png", demo_image(57).convert("RGBA"))):
        im.save(tmp_path / name)
        rc, out, err = cli(capfd, "generate", "--model", model, "--prompt", "hi", "--image", tmp_path / name,
                           "--max-new-tokens", 3)
        assert rc == 0 and "3 tokens" in out, (rc, out, err)


def test_generation_error_prints_tokens(model, capfd, monkeypatch):
    from vlmdecode.sampling import Sampler

    real = Sampler.pick

    def failing(self, row, step):
        if step == 2:
            raise ValueError("injected failure")
        return real(self, row, step)

    monkeypatch.setattr(Sampler, "pick", failing)
    rc, out, err = cli(capfd, "generate", "--model", model, "--prompt", "hi", "--max-new-tokens", 5)
    assert rc == EXIT_BAD_INPUT and "injected failure" in err and "2 token(s) generated before it" in err
    assert len(err.strip().splitlines()) == 1  # one stderr line


def test_prompt_too_long_for_max_length(model, capfd):
    assert_bad_input(*cli(capfd, "generate", "--model", model, "--prompt", "hi", "--max-new-tokens", 10000),
                     "max_length", "10000")


def test_max_new_tokens_zero(model, capfd):
    assert_bad_input(*cli(capfd, "generate", "--model", model, "--prompt", "hi", "--max-new-tokens", 0),
                     "max_new_tokens")


def test_bad_device(model, capfd):
    assert_bad_input(*cli(capfd, "generate", "--model", model, "--prompt", "hi", "--device", "cudabad"),
                     "'cudabad'", "cuda:N")


def test_cuda_without_gpu_does_not_fall_back(model, capfd):
    from vlmdecode.devices import cuda_device_count
    from vlmdecode.sessions import ort

    if "CUDAExecutionProvider" in ort().get_available_providers() and cuda_device_count() > 0:
        pytest.skip("a CUDA device is available here")
    rc, out, err = cli(capfd, "generate", "--model", model, "--prompt", "hi", "--device", "cuda:0")
    assert_bad_input(rc, out, err, "cuda:0", "CUDA")
    assert out == ""  # nothing was generated on the CPU instead


def test_cuda_mode_on_cpu(model, capfd):
    assert_bad_input(*cli(capfd, "generate", "--model", model, "--prompt", "hi", "--mode", "graph"),
                     "'graph'", "cpu")


def test_sampling_flag_out_of_range(model, capfd):
    assert_bad_input(*cli(capfd, "generate", "--model", model, "--prompt", "hi", "--do-sample", "--top-p", 0),
                     "top_p")


def test_unknown_preset(tmp_path, capfd):
    rc, out, err = cli(capfd, "build-fixture", "--preset", "huge-nope", "--out", tmp_path / "x")
    assert_bad_input(rc, out, err, "'huge-nope'", "tiny")
    assert not (tmp_path / "x").exists()


# ---- as a process --------------------------------------------------------------------------------------------
def _run(*argv, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "vlmdecode.cli", *map(str, argv)], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def test_subprocess(model, pipe, tmp_path):
    demo = _run("demo", "--max-new-tokens", 3, env_extra={"VLMDECODE_CACHE": str(tmp_path / "cache")})
    assert demo.returncode == 0, demo.stderr
    assert "[cpu] 3 tokens: [" in demo.stdout and "time to first token" in demo.stdout
    assert (tmp_path / "cache" / "tiny-gqa-fp32" / "genai_config.json").is_file()
    p = _run("generate", "--model", model, "--prompt", "hi", "--max-new-tokens", 4)
    assert p.returncode == 0, p.stderr
    assert tokens_line(p.stdout) == pipe.generate("hi", max_new_tokens=4).tokens
    assert "time to first token" in p.stdout and "Traceback" not in p.stderr
    bad = _run("generate", "--model", tmp_path / "nope", "--prompt", "hi")
    assert_bad_input(bad.returncode, bad.stdout, bad.stderr, "does not exist")


def test_bench_run_contexts_default_per_preset():
    # no --contexts: run_matrix takes each preset's own list (gemma3-1b 128 1024 4096), not one list for all
    args = parser().parse_args(["bench", "run", "--presets", "gemma3-1b"])
    assert args.contexts is None
    assert parser().parse_args(["bench", "run", "--contexts", "64", "96"]).contexts == [64, 96]
