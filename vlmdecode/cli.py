"""The `vlmdecode` command: demo, build-fixture, generate, bench run, bench compare.

Every run ends with at most one line on stderr and one of these exit statuses (never a traceback
unless --debug is given):

    0    done                      2    bad input: the line names what was wrong and what is accepted
    1    internal error: the line names the exception; rerun with --debug for the traceback
    3    bench compare flagged a regression
    130  interrupted (Ctrl-C)      141  stdout was closed early (e.g. `| head`)

Progress bars are drawn only when stderr is a terminal. Not here: what the commands do (bench,
fixture, pipeline); this module parses arguments and turns outcomes into one line and a status.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import modes

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT, EXIT_REGRESSION = 0, 1, 2, 3
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141
COMMANDS = ("demo", "build-fixture", "generate", "bench")
# exceptions that mean the input (arguments, files, model folder, environment) was unusable
# (with CudaUnavailableError: CUDA asked for and unusable); anything else is an internal error
BAD_INPUT = (ValueError, FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError,
             ImportError)


def _print_result(r, label: str) -> None:
    dec = r.decode_seconds
    per = (sorted(dec)[len(dec) // 2] * 1e3) if dec else float("nan")
    print(f"[{label}] {len(r.tokens)} tokens: {r.tokens}")
    print(f"[{label}] text: {r.text!r}")
    print(f"[{label}] time to first token {r.ttft_seconds * 1e3:.2f} ms; median per step {per:.3f} ms; "
          f"bytes/step host->device {r.steps[-1].h2d_bytes}, device->host {r.steps[-1].d2h_bytes}, "
          f"KV {r.steps[-1].kv_bytes}" + (f"; counters {r.counters}" if r.counters else ""))


def cmd_demo(args) -> int:
    import vlmdecode

    from .devices import cuda_device_count
    from .fixture.cache import ensure_fixture
    from .processor import demo_image

    prompt = "Describe the image."
    folder = ensure_fixture("tiny", "gqa", "fp32")
    image = demo_image(32)
    print(f"fixture: {folder}", flush=True)
    pipe = vlmdecode.load(folder, "cpu")
    _print_result(pipe.generate(prompt, image=image, max_new_tokens=args.max_new_tokens, stop=()), "cpu")
    if cuda_device_count() > 0:
        folder16 = ensure_fixture("tiny", "gqa", "fp16")
        for mode in modes.on("cuda", "pipeline"):
            pipe = vlmdecode.load(folder16, "cuda", mode)
            _print_result(pipe.generate(prompt, image=image, max_new_tokens=args.max_new_tokens, stop=()),
                          f"cuda {mode}")
    else:
        print("[cuda] no CUDA device visible: CPU only")
    return EXIT_OK


def cmd_build(args) -> int:
    from .fixture import build_fixture, preset

    # the whole config is validated here, before anything is written; build_fixture refuses to replace
    # anything but an empty folder or an intact earlier fixture
    cfg = preset(args.preset, attention=args.attention, dtype=args.dtype, seed=args.seed, max_length=args.max_length,
                 layout=args.layout)
    what = f"{cfg.name} ({cfg.attention}, {cfg.layout}, {cfg.dtype}, seed {cfg.seed})"
    print(f"building {what} into {args.out}", flush=True)
    out = build_fixture(cfg, Path(args.out), progress=sys.stderr.isatty())
    print(f"built {what} into {out}")
    return EXIT_OK


def cmd_generate(args) -> int:
    import vlmdecode

    pipe = vlmdecode.load(args.model, args.device, args.mode, max_length=args.max_length)
    kw = dict(max_new_tokens=args.max_new_tokens, do_sample=args.do_sample, temperature=args.temperature,
              top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, seed=args.seed,
              stop=() if args.ignore_eos else None)
    if args.stream:
        for rec in pipe.stream(args.prompt, image=args.image, **kw):
            print(rec.text, end="", flush=True)
        print()
    else:
        _print_result(pipe.generate(args.prompt, image=args.image, **kw), f"{pipe.device} {pipe.mode}")
    return EXIT_OK


def cmd_bench(args) -> int:
    from . import bench

    if args.bench_cmd == "compare":
        table = bench.compare(args.base, args.new, noise_csv=args.noise)
        print(table.to_string(index=False))
        return EXIT_REGRESSION if table["regression"].any() else EXIT_OK
    from .fixture.cache import cache_dir

    tag = "ttft" if args.ttft and args.tag == "bench" else args.tag
    out = bench.results_dir(args.out, tag, force=args.force)
    print(f"results: {out / tag}.csv, .json", flush=True)
    if args.ttft:
        from . import ttft

        rows = ttft.run_ttft(presets=args.presets, devices=args.devices, modes=args.modes, contexts=args.contexts,
                             repeats=args.repeats, peer=not args.no_peer, out_dir=out, root=cache_dir(),
                             layouts=args.layouts, tag=tag)
        print(rows.to_string(index=False))
        return EXIT_OK
    rows = bench.run_matrix(presets=args.presets, devices=args.devices, modes=args.modes, contexts=args.contexts,
                            new_tokens=args.new_tokens, repeats=args.repeats, peer=not args.no_peer,
                            out_dir=out, root=cache_dir(), layouts=args.layouts, tag=args.tag, force=True,
                            progress=sys.stderr.isatty())
    print(rows.to_string(index=False))
    return EXIT_OK


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit 2), not usage text plus the error."""

    def error(self, message):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def ttft_modes() -> list:
    from .ttft import CPU_MODES, CUDA_MODES

    return list(dict.fromkeys(CPU_MODES + CUDA_MODES))


def parser() -> argparse.ArgumentParser:
    from .bench import CONTEXTS

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of an error, and onnxruntime's own log lines")
    p = _Parser(prog="vlmdecode", description=__doc__.splitlines()[0], parents=[common],
                epilog="exit status: 0 done, 1 internal error, 2 bad input, 3 bench regression, 130 interrupted, "
                       "141 output closed")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="build the tiny fixture if needed and run image + prompt -> text", parents=[common])
    d.add_argument("--max-new-tokens", type=int, default=24)
    b = sub.add_parser("build-fixture", help="build a fixture model folder", parents=[common])
    b.add_argument("--preset", default="tiny")
    b.add_argument("--attention", default="gqa")
    b.add_argument("--layout", default="unfused", help="decoder node layout: unfused, fused, fused-cuda")
    b.add_argument("--dtype", default="fp32")
    b.add_argument("--seed", type=int, default=None)
    b.add_argument("--max-length", type=int, default=None)
    b.add_argument("--out", required=True, help="a new or empty folder, or an earlier fixture (replaced)")
    g = sub.add_parser("generate", help="image + prompt -> text", parents=[common])
    g.add_argument("--model", required=True)
    g.add_argument("--prompt", required=True)
    g.add_argument("--image", default=None)
    g.add_argument("--device", default="cpu")
    g.add_argument("--mode", default=None,
                   help=f"decode mode, one of {', '.join(modes.PIPELINE)} (vlmdecode.modes); default: resident on "
                        "cpu, graph on cuda")
    g.add_argument("--max-new-tokens", type=int, default=32)
    g.add_argument("--max-length", type=int, default=None,
                   help="KV capacity (prompt + new tokens); default min(the folder's max_length, 4096)")
    g.add_argument("--stream", action="store_true")
    g.add_argument("--ignore-eos", action="store_true", help="generate exactly --max-new-tokens tokens")
    # sampling: unset = the folder's genai_config.json search defaults (as onnxruntime-genai applies them)
    g.add_argument("--do-sample", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--temperature", type=float, default=None)
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--min-p", type=float, default=None)
    g.add_argument("--seed", type=int, default=None)
    be = sub.add_parser("bench", help="benchmarks; 'bench compare BASE NEW' for a regression report", parents=[common])
    bsub = be.add_subparsers(dest="bench_cmd", required=True)
    r = bsub.add_parser("run", parents=[common])
    r.add_argument("--presets", nargs="+", default=["tiny"])
    r.add_argument("--devices", nargs="+", default=["cpu"])
    r.add_argument("--modes", nargs="+", default=None,
                   help=f"scenarios among {', '.join(modes.ORDER)} (vlmdecode.modes); default: every one of the device")
    r.add_argument("--contexts", nargs="+", type=int, default=None,
                   help="prompt lengths; default per preset: " + ", ".join(
                       f"{k} {' '.join(map(str, v))}" for k, v in CONTEXTS.items()))
    r.add_argument("--new-tokens", type=int, default=64)
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--no-peer", action="store_true")
    r.add_argument("--layouts", nargs="+", default=["unfused"], help="decoder layouts to build and time")
    r.add_argument("--tag", default="bench", help="results file stem: OUT/TAG.csv, OUT/TAG.json (--ttft: ttft)")
    r.add_argument("--out", default=None, help="results folder (default: a new timestamped folder under the cache)")
    r.add_argument("--force", action="store_true", help="overwrite OUT/TAG.csv and OUT/TAG.json if they exist")
    r.add_argument("--ttft", action="store_true",
                   help="time to first token by phase, text and image prompts, beside onnxruntime-genai "
                        "(vlmdecode.ttft; modes: " + " ".join(ttft_modes()) + ")")
    c = bsub.add_parser("compare", parents=[common])
    c.add_argument("base")
    c.add_argument("new")
    c.add_argument("--noise", default=None, help="CSV of repeated runs of one build, to calibrate thresholds")
    return p


def _one_line(e: BaseException) -> str:
    text = " | ".join(line.strip() for line in str(e).splitlines() if line.strip())
    return text or type(e).__name__


def _interrupted(e: BaseException | None) -> bool:
    """A Ctrl-C, also where a library re-raised it as its own error: pybind11 turns a KeyboardInterrupt during a
    C extension's import (onnxruntime's, loaded lazily mid-command) into ImportError("initialization failed")
    raised from it, which would otherwise read as bad input."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _outcome(e: BaseException) -> tuple[int, str]:
    """(exit status, the one stderr line after the command name) for an exception that ended a command."""
    if _interrupted(e):
        return EXIT_INTERRUPTED, "interrupted"
    if isinstance(e, BrokenPipeError):
        # nothing more can reach stdout; point it at /dev/null so the exit-time flush stays silent
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE, "stdout was closed before the output ended"
    if isinstance(e, MemoryError):
        return EXIT_INTERNAL, f"out of memory ({_one_line(e)}); rerun with --debug for the traceback"
    from .sessions import CudaUnavailableError

    if hasattr(e, "tokens") and e.__cause__ is not None:  # a GenerationError: the tokens made before it too
        code, line = _outcome(e.__cause__)
        return code, f"{line}; {len(e.tokens)} token(s) generated before it: {e.tokens}"
    if isinstance(e, (*BAD_INPUT, CudaUnavailableError)):
        return EXIT_BAD_INPUT, f"error: {_one_line(e)}"
    if not isinstance(e, Exception):  # SystemExit from a handler, GeneratorExit: not ours to swallow
        raise e
    return EXIT_INTERNAL, f"internal error: {type(e).__name__}: {_one_line(e)}; rerun with --debug for the traceback"


def _command_name(argv: list[str]) -> str:
    """'vlmdecode CMD [SUB]' from argv's words: known before parsing, so an early Ctrl-C is named too."""
    words = [a for a in argv if not a.startswith("-")]
    name = ["vlmdecode"]
    if words and words[0] in COMMANDS:
        name.append(words[0])
        if words[0] == "bench" and words[1:2] in (["run"], ["compare"]):
            name.append(words[1])
    return " ".join(name)


def main(argv=None) -> int:
    """Run one command; return its exit status (see the module docstring)."""
    argv = [str(a) for a in (sys.argv[1:] if argv is None else argv)]
    debug, name = "--debug" in argv, _command_name(argv)
    try:
        args = parser().parse_args(argv)
        if not debug:
            from .sessions import quiet_logs

            quiet_logs()  # onnxruntime's own error lines would be a second line on stderr
        handlers = {"demo": cmd_demo, "build-fixture": cmd_build, "generate": cmd_generate, "bench": cmd_bench}
        return handlers[args.cmd](args)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2, its one line already printed)
        return e.code if isinstance(e.code, int) else EXIT_BAD_INPUT
    except BaseException as e:  # noqa: BLE001 - onnxruntime's exceptions derive from Exception only
        code, line = _outcome(e)
        if debug:
            import traceback

            traceback.print_exception(e)
    print(f"{name}: {line}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
