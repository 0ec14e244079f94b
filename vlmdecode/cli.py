"""The `vlmdecode` command: demo, build-fixture, generate, bench.

Bad input ends with one line on stderr naming what was wrong, and exit status 2; never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

EXIT_BAD_INPUT = 2


def cache_dir() -> Path:
    return Path(os.environ.get("VLMDECODE_CACHE", Path.home() / ".cache" / "vlmdecode"))


def ensure_fixture(name: str = "tiny", attention: str = "gqa", dtype: str = "fp32", root: Path | None = None,
                   layout: str = "unfused") -> Path:
    """The fixture folder for (preset, attention, dtype, layout) in the cache, built if missing or stale."""
    import json

    from .fixture import build_fixture, preset
    from .fixture.build import BUILDER_VERSION, FIXTURE_JSON

    cfg = preset(name, attention=attention, dtype=dtype, layout=layout)
    out = (root or cache_dir()) / (f"{name}-{attention}-{dtype}" + ("" if layout == "unfused" else f"-{layout}"))
    meta = out / FIXTURE_JSON
    if meta.is_file():
        import dataclasses

        want = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.init}
        saved = json.loads(meta.read_text())
        if saved.get("config") == json.loads(json.dumps(want)) and saved.get("builder_version") == BUILDER_VERSION:
            return out
    return build_fixture(cfg, out, progress=name != "tiny")


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
    from .processor import demo_image

    prompt = "Describe the image."
    folder = ensure_fixture("tiny", "gqa", "fp32")
    image = demo_image(32)
    print(f"fixture: {folder}")
    pipe = vlmdecode.load(folder, "cpu")
    _print_result(pipe.generate(prompt, image=image, max_new_tokens=args.max_new_tokens, stop=()), "cpu")
    if cuda_device_count() > 0:
        folder16 = ensure_fixture("tiny", "gqa", "fp16")
        for mode in ("eager", "graph", "device"):
            pipe = vlmdecode.load(folder16, "cuda", mode)
            _print_result(pipe.generate(prompt, image=image, max_new_tokens=args.max_new_tokens, stop=()),
                          f"cuda {mode}")
    else:
        print("[cuda] no CUDA device visible: CPU only")
    return 0


def cmd_build(args) -> int:
    from .fixture import build_fixture, preset
    from .fixture.build import FIXTURE_JSON

    cfg = preset(args.preset, attention=args.attention, dtype=args.dtype, seed=args.seed, max_length=args.max_length,
                 layout=args.layout)
    target = Path(args.out)
    # build_fixture replaces the folder: only ever an empty one or an earlier fixture, never arbitrary files
    if target.exists() and not (target.is_dir() and (not any(target.iterdir()) or (target / FIXTURE_JSON).is_file())):
        raise ValueError(f"--out {target} is neither an empty folder nor a fixture folder: refusing to replace")
    out = build_fixture(cfg, target, progress=True)
    print(f"built {cfg.name} ({cfg.attention}, {cfg.layout}, {cfg.dtype}, seed {cfg.seed}) into {out}")
    return 0


def cmd_generate(args) -> int:
    import vlmdecode

    pipe = vlmdecode.load(args.model, args.device, args.mode)
    kw = dict(max_new_tokens=args.max_new_tokens, do_sample=args.do_sample, temperature=args.temperature,
              top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, seed=args.seed)
    image = args.image
    if args.stream:
        for rec in pipe.stream(args.prompt, image=image, **kw):
            print(rec.text, end="", flush=True)
        print()
    else:
        _print_result(pipe.generate(args.prompt, image=image, **kw), f"{pipe.device} {pipe.mode}")
    return 0


def cmd_bench(args) -> int:
    from . import bench

    if args.bench_cmd == "compare":
        table = bench.compare(args.base, args.new, noise_csv=args.noise)
        print(table.to_string(index=False))
        return 1 if table["regression"].any() else 0
    rows = bench.run_matrix(presets=args.presets, devices=args.devices, modes=args.modes, contexts=args.contexts,
                            new_tokens=args.new_tokens, repeats=args.repeats, peer=not args.no_peer,
                            out_dir=args.out, root=cache_dir(), layouts=args.layouts, tag=args.tag)
    print(rows.to_string(index=False))
    return 0


def parser() -> argparse.ArgumentParser:
    from .bench import CONTEXTS
    p = argparse.ArgumentParser(prog="vlmdecode", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="build the tiny fixture if needed and run image + prompt -> text")
    d.add_argument("--max-new-tokens", type=int, default=24)
    b = sub.add_parser("build-fixture", help="build a fixture model folder")
    b.add_argument("--preset", default="tiny")
    b.add_argument("--attention", default="gqa")
    b.add_argument("--layout", default="unfused", help="decoder node layout: unfused, fused, fused-cuda")
    b.add_argument("--dtype", default="fp32")
    b.add_argument("--seed", type=int, default=None)
    b.add_argument("--max-length", type=int, default=None)
    b.add_argument("--out", required=True)
    g = sub.add_parser("generate", help="image + prompt -> text")
    g.add_argument("--model", required=True)
    g.add_argument("--prompt", required=True)
    g.add_argument("--image", default=None)
    g.add_argument("--device", default="cpu")
    g.add_argument("--mode", default=None)
    g.add_argument("--max-new-tokens", type=int, default=32)
    g.add_argument("--stream", action="store_true")
    # sampling: unset = the folder's genai_config.json search defaults (as onnxruntime-genai applies them)
    g.add_argument("--do-sample", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--temperature", type=float, default=None)
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--min-p", type=float, default=None)
    g.add_argument("--seed", type=int, default=None)
    be = sub.add_parser("bench", help="benchmarks; 'bench compare BASE NEW' for a regression report")
    bsub = be.add_subparsers(dest="bench_cmd", required=True)
    r = bsub.add_parser("run")
    r.add_argument("--presets", nargs="+", default=["tiny"])
    r.add_argument("--devices", nargs="+", default=["cpu"])
    r.add_argument("--modes", nargs="+", default=None)
    r.add_argument("--contexts", nargs="+", type=int, default=None,
                   help="prompt lengths; default per preset: " + ", ".join(
                       f"{k} {' '.join(map(str, v))}" for k, v in CONTEXTS.items()))
    r.add_argument("--new-tokens", type=int, default=64)
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--no-peer", action="store_true")
    r.add_argument("--layouts", nargs="+", default=["unfused"], help="decoder layouts to build and time")
    r.add_argument("--tag", default="bench", help="results file stem: OUT/TAG.csv, OUT/TAG.json")
    r.add_argument("--out", default="data/results")
    c = bsub.add_parser("compare")
    c.add_argument("base")
    c.add_argument("new")
    c.add_argument("--noise", default=None, help="CSV of repeated runs of one build, to calibrate thresholds")
    return p


def main(argv=None) -> int:
    from .modelfolder import ModelFolderError

    args = parser().parse_args(argv)
    handlers = {"demo": cmd_demo, "build-fixture": cmd_build, "generate": cmd_generate, "bench": cmd_bench}
    try:
        return handlers[args.cmd](args)
    except (ModelFolderError, ValueError, FileNotFoundError, RuntimeError, ImportError) as e:
        print(f"vlmdecode {args.cmd}: error: {e}", file=sys.stderr)
        if hasattr(e, "tokens"):  # a GenerationError: what was made before it
            print(f"vlmdecode {args.cmd}: {len(e.tokens)} token(s) generated before the error: {e.tokens}",
                  file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
