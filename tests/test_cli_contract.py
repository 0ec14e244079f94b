"""Issue 12, defects 3 and 5: every `vlmdecode` subcommand ends with one line on stderr and a documented exit
status (2 bad input, 130 interrupted, 1 internal error, 141 stdout closed), never a traceback; builds and bench
runs never lose files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vlmdecode import cli
from vlmdecode.fixture import build_fixture, preset
from vlmdecode.fixture.build import FIXTURE_JSON, verify_fixture

REPO = Path(__file__).resolve().parents[1]
NOISE = REPO / "data" / "results" / "cpu_noise_tiny.csv"


@pytest.fixture(scope="module")
def model(tiny_folder) -> Path:
    return tiny_folder  # shared (conftest): copy to modify


@pytest.fixture(scope="module")
def long_model(tmp_path_factory) -> Path:
    """tiny with room for a very long generation (something to interrupt)."""
    return build_fixture(preset("tiny", max_length=65536), tmp_path_factory.mktemp("contract") / "long")


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def cli_run(capfd, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capfd.readouterr()
    return rc, out, err


# ---- bad input: exit 2, one line, for every subcommand -----------------------------------------------------------
def bad_inputs(model, tmp_path):
    return {
        "demo": ["demo", "--max-new-tokens", "0"],
        "demo-usage": ["demo", "--max-new-tokens", "many"],
        "build-fixture": ["build-fixture", "--seed", "-1", "--out", tmp_path / "x"],
        "build-fixture-length": ["build-fixture", "--max-length", "100000000", "--out", tmp_path / "y"],
        "generate": ["generate", "--model", model, "--prompt", "hi", "--max-new-tokens", "-3"],
        "generate-usage": ["generate", "--prompt", "hi"],
        "bench run": ["bench", "run", "--devices", "tpu", "--out", tmp_path / "b"],
        "bench compare": ["bench", "compare", tmp_path / "none.csv", NOISE],
        "bench compare bad csv": ["bench", "compare", model / "genai_config.json", NOISE],
        "no command": [],
    }


@pytest.mark.parametrize("case", ["demo", "demo-usage", "build-fixture", "build-fixture-length", "generate",
                                  "generate-usage", "bench run", "bench compare", "bench compare bad csv",
                                  "no command"])
def test_bad_input_is_one_line_and_exit_2(model, tmp_path, capfd, monkeypatch, case):
    monkeypatch.setenv("VLMDECODE_CACHE", str(tmp_path / "cache"))
    rc, out, err = cli_run(capfd, *bad_inputs(model, tmp_path)[case])
    line = one_line(err)
    assert rc == cli.EXIT_BAD_INPUT, (rc, err)
    assert line.startswith("vlmdecode") and "error: " in line
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_build_fixture_bounds_are_named(tmp_path, capfd):
    rc, _, err = cli_run(capfd, "build-fixture", "--max-length", 100_000_000, "--out", tmp_path / "y")
    assert rc == 2 and "max_length" in err and "131072" in err
    rc, _, err = cli_run(capfd, "build-fixture", "--seed", -1, "--out", tmp_path / "x")
    assert rc == 2 and "seed" in err and "[0, 4294967295]" in err
    assert list(tmp_path.iterdir()) == []  # validated before anything was written: no half-built folder


def test_bench_compare_with_the_committed_noise_file(tmp_path, capfd):
    """The committed noise file has no layout column: KeyError 'layout' before."""
    rc, out, err = cli_run(capfd, "bench", "compare", NOISE, NOISE, "--noise", NOISE)
    assert rc == cli.EXIT_OK, err
    assert "threshold_pct" in out and err == ""


# ---- internal errors: exit 1, one line with the hint; --debug shows the traceback --------------------------------
@pytest.mark.parametrize("exc", [MemoryError("no room"), OSError(28, "No space left on device"), KeyError("layout"),
                                 TypeError("bad operand"), Exception("onnxruntime Fail: [ONNXRuntimeError]\nline 2")])
def test_internal_errors_are_one_line_with_a_hint(model, capfd, monkeypatch, exc):
    import vlmdecode.pipeline

    def boom(*a, **k):
        raise exc

    monkeypatch.setattr(vlmdecode.pipeline, "load", boom)
    rc, out, err = cli_run(capfd, "generate", "--model", model, "--prompt", "hi")
    line = one_line(err)
    assert rc == cli.EXIT_INTERNAL and "--debug" in line and line.startswith("vlmdecode generate: ")
    rc, out, err = cli_run(capfd, "generate", "--model", model, "--prompt", "hi", "--debug")
    assert rc == cli.EXIT_INTERNAL and "Traceback" in err


def test_an_interrupt_a_library_re_raised_is_still_an_interrupt(model, capfd, monkeypatch):
    """pybind11 raises ImportError("initialization failed") from a KeyboardInterrupt that lands while a C extension
    module initialises (seen once in CI: Ctrl-C during `bench run` exited 2, "error: initialization failed")."""
    import vlmdecode.pipeline

    def wrapped(*a, **k):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise ImportError("initialization failed") from ki

    def chained(*a, **k):  # raised while handling it, without `from`
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise ValueError("cleanup failed")  # noqa: B904 - its __context__ is the interrupt, on purpose

    for boom in (wrapped, chained):
        monkeypatch.setattr(vlmdecode.pipeline, "load", boom)
        rc, _, err = cli_run(capfd, "generate", "--model", model, "--prompt", "hi")
        assert rc == cli.EXIT_INTERRUPTED and one_line(err) == "vlmdecode generate: interrupted", (boom, err)
    monkeypatch.setattr(vlmdecode.pipeline, "load", lambda *a, **k: (_ for _ in ()).throw(ImportError("no module")))
    rc, _, err = cli_run(capfd, "generate", "--model", model, "--prompt", "hi")
    assert rc == cli.EXIT_BAD_INPUT and "no module" in err  # a plain ImportError stays bad input


def test_onnxruntime_exception_class(model, capfd, monkeypatch):
    """onnxruntime's own exception classes (they derive from Exception only) do not escape."""
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail

    import vlmdecode.pipeline

    def boom(*a, **k):
        raise Fail("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Add node.")

    monkeypatch.setattr(vlmdecode.pipeline.Pipeline, "generate", boom)
    rc, _, err = cli_run(capfd, "generate", "--model", model, "--prompt", "hi")
    assert rc == cli.EXIT_INTERNAL and "Fail" in one_line(err)


# ---- as processes: SIGINT mid-run and a closed stdout --------------------------------------------------------------
LAUNCH = ("import os, sys; import vlmdecode.cli as c; fd = int(sys.argv.pop(1)); os.write(fd, b'r'); os.close(fd); "
          "sys.exit(c.main(sys.argv[1:]))")


def _interrupt(argv, env, after: float = 0.5):
    """Start `vlmdecode argv` exactly as the console script does; SIGINT it `after` s into main()."""
    r, w = os.pipe()
    p = subprocess.Popen([sys.executable, "-c", LAUNCH, str(w), *map(str, argv)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, pass_fds=(w,), cwd=REPO)
    os.close(w)
    assert os.read(r, 1) == b"r"  # main is about to run
    os.close(r)
    time.sleep(after)
    assert p.poll() is None, p.communicate()  # still running: the signal lands mid-run
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    return p.returncode, out, err


@pytest.fixture
def env(tmp_path):
    return dict(os.environ, VLMDECODE_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(REPO))


def test_sigint_mid_run_every_subcommand(long_model, tmp_path, env):
    fifo = tmp_path / "base.csv"
    os.mkfifo(fifo)  # compare blocks reading it: interrupted while reading its input
    runs = {
        "demo": ["demo", "--max-new-tokens", 8],  # builds the tiny fixture in an empty cache first
        "build-fixture": ["build-fixture", "--preset", "small", "--out", tmp_path / "small"],
        "generate": ["generate", "--model", long_model / "text", "--prompt", "hi", "--max-new-tokens", 60000,
                     "--max-length", 65536, "--stream", "--ignore-eos"],
        "bench run": ["bench", "run", "--contexts", 16, "--new-tokens", 8, "--repeats", 100000, "--no-peer",
                      "--modes", "resident", "--out", tmp_path / "bench"],
        "bench compare": ["bench", "compare", fifo, NOISE],
    }
    for name, argv in runs.items():
        rc, out, err = _interrupt(argv, env, after=0.05 if name == "demo" else 1.0)  # demo: ~0.3 s in all
        assert rc == cli.EXIT_INTERRUPTED, (name, rc, err)
        assert one_line(err) == f"vlmdecode {name}: interrupted", (name, err)
    # the interrupted build left nothing: no target, no temporary folder
    assert not (tmp_path / "small").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".small.build-")]


def _generate_process(model, n: int, env):
    argv = ["generate", "--model", model / "text", "--prompt", "hi", "--max-new-tokens", n, "--max-length", 65536,
            "--stream", "--ignore-eos"]
    return subprocess.Popen([sys.executable, "-m", "vlmdecode.cli", *map(str, argv)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=REPO)


def test_sigint_through_python_m(long_model, env):
    p = _generate_process(long_model, 60000, env)
    assert p.stdout.read(1)  # generating
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == cli.EXIT_INTERRUPTED and one_line(err.decode()) == "vlmdecode generate: interrupted"


def test_closed_stdout_is_one_line(long_model, env):
    p = _generate_process(long_model, 3000, env)
    p.stdout.read(1)
    p.stdout.close()  # `| head -c 1`
    err = p.stderr.read().decode()
    p.wait(timeout=120)
    assert p.returncode == cli.EXIT_BROKEN_PIPE and one_line(err) == "vlmdecode generate: stdout was closed before " \
                                                                     "the output ended"


# ---- defect 5: no data loss ------------------------------------------------------------------------------------------
def test_build_over_a_fixture_keeps_foreign_files(tmp_path, capfd):
    d = tmp_path / "f"
    assert cli_run(capfd, "build-fixture", "--out", d)[0] == 0
    (d / "precious.txt").write_text("keep me")
    rc, _, err = cli_run(capfd, "build-fixture", "--out", d, "--seed", 3)
    assert rc == 2 and "precious.txt is not a file the build wrote" in one_line(err)
    assert (d / "precious.txt").read_text() == "keep me" and verify_fixture(d) == ["precious.txt is not a file the "
                                                                                   "build wrote"]
    (d / "precious.txt").unlink()
    (d / "decoder.onnx").write_bytes(b"my own edit")  # a file the build wrote, changed since: not the build's now
    rc, _, err = cli_run(capfd, "build-fixture", "--out", d, "--seed", 3)
    assert rc == 2 and "decoder.onnx changed since the build" in err and (d / "decoder.onnx").read_bytes() == \
        b"my own edit"


def test_rebuild_replaces_an_intact_fixture(tmp_path, capfd):
    d = tmp_path / "f"
    assert cli_run(capfd, "build-fixture", "--out", d)[0] == 0
    assert cli_run(capfd, "build-fixture", "--out", d, "--seed", 3)[0] == 0
    assert json.loads((d / FIXTURE_JSON).read_text())["config"]["seed"] == 3 and verify_fixture(d) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # no temporary folder left
    assert oct(d.stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_failed_build_keeps_the_old_fixture(tmp_path, monkeypatch):
    import vlmdecode.fixture.build as build

    d = build_fixture(preset("tiny"), tmp_path / "f")
    before = verify_fixture(d), json.loads((d / FIXTURE_JSON).read_text())

    def fail(cfg, **kw):
        raise MemoryError("half way")

    monkeypatch.setattr(build, "build_decoder", fail)
    with pytest.raises(MemoryError):
        build_fixture(preset("tiny", seed=3), d)
    assert (verify_fixture(d), json.loads((d / FIXTURE_JSON).read_text())) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_bench_run_writes_a_new_folder_under_the_cache_and_never_overwrites(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("VLMDECODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    argv = ["bench", "run", "--contexts", 16, "--new-tokens", 4, "--repeats", 1, "--no-peer", "--modes", "resident"]
    rc, out, err = cli_run(capfd, *argv)
    assert rc == 0, err
    path = Path(out.splitlines()[0].split("results: ", 1)[1].split(".csv")[0] + ".csv")
    assert path.is_file() and path.parent.parent == tmp_path / "cache" / "bench"
    assert not (tmp_path / "data").exists()  # nothing in the current directory
    rc, out2, err = cli_run(capfd, *argv)  # a second run: another folder
    assert rc == 0 and out2.splitlines()[0] != out.splitlines()[0]
    stamp = path.read_bytes()
    rc, _, err = cli_run(capfd, *argv, "--out", path.parent)
    assert rc == 2 and "--force" in one_line(err) and path.read_bytes() == stamp
    rc, _, err = cli_run(capfd, *argv, "--out", path.parent, "--force")
    assert rc == 0, err
    assert cli_run(capfd, *argv, "--tag", "../escape")[0] == 2
