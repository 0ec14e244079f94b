"""What the host loop adds to a captured step on CUDA: per-token time of the pipeline vs the replayed step.

    python scripts/h200_host_overhead.py [OUT.json] [--preset tiny] [--layout unfused] [--rounds 7]
                                         [--before COMMITTED.json]

For each mode (graph, device): the replayed decoder step with no host work between steps
(`decoders.cuda.replay_ms`, CUDA events over 200 back-to-back runs) and the pipeline's per-token time
(`StepRecord.seconds + detok_seconds`, median of the steady window after 8 tokens, 64 new tokens at
context 128, one KV capacity for both), in interleaved rounds; ratio = per-token / replayed step.
Issue #13's target: graph-mode ratio <= 1.3 on tiny. Each row also has wall_per_token_ms: the consumer's
time per decode token over the whole call (the pipeline's own work and the detokenizer included, hidden or not).

"breakdown" (graph mode, the same pipeline): medians in microseconds per token of each host call of the step
(decoders.cuda, "The host step"), timed by wrapping the decoder's own methods (~0.3 us each): collect (the
wait for the running step), pick, token_input, and launch's parts (the embedding's DMA, the run call, the next
scalars); the pipeline's own time (StepRecord.seconds minus the decoder's parts), the detokenizer; and from
CUDA events around each run (time_steps=True) the device time of a run and the device's idle gap between
runs (the host's share of the critical path). "before": the reference numbers (--before FILE: a committed result;
its own "before" when it has one, so the reference stays the numbers before issue 13's host step).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

CONTEXT, NEW, SKIP = 128, 64, 8


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", nargs="?", default=None)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--layout", default="unfused")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--before", default=None, help="a committed h200_host_overhead JSON to quote as 'before'")
    a = p.parse_args(argv)
    before = _before(a.before) if a.before else None  # read first: a bad path fails before the GPU work

    import vlmdecode
    from vlmdecode.decoders.cuda import replay_ms
    from vlmdecode.fixture.cache import ensure_fixture
    from vlmdecode.profiling import prompt_ids, provenance

    folder = ensure_fixture(a.preset, "gqa", "fp16", layout=a.layout)
    ids = prompt_ids(CONTEXT)
    pipes = {m: vlmdecode.load(folder, "cuda", m, max_length=CONTEXT + NEW) for m in ("graph", "device")}
    for pipe in pipes.values():
        pipe.generate_from_ids(ids, max_new_tokens=16, stop=())  # warm-up: capture, kernels, embedding table
    per_token = {m: [] for m in pipes}
    wall = {m: [] for m in pipes}
    replay = {m: [] for m in pipes}
    for r in range(a.rounds):
        for m, pipe in (pipes.items() if r % 2 == 0 else reversed(list(pipes.items()))):
            steps, wall_s = _timed_stream(pipe, ids)
            per_token[m].append(statistics.median(s.seconds + s.detok_seconds for s in steps[SKIP:]) * 1e3)
            wall[m].append(wall_s * 1e3)
            x = pipe.embed(ids, None)
            replay[m].append(replay_ms(pipe.decoder, x))
    rows = {}
    for m in pipes:
        tok, rep = statistics.median(per_token[m]), statistics.median(replay[m])
        rows[m] = {"per_token_ms": tok, "replayed_step_ms": rep, "ratio": tok / rep,
                   "wall_per_token_ms": statistics.median(wall[m]),
                   "per_token_rounds": per_token[m], "replay_rounds": replay[m], "wall_rounds": wall[m]}
        print(f"{m:7s} per token {tok:.4f} ms  replayed step {rep:.4f} ms  ratio {tok / rep:.2f}  wall per token "
              f"{rows[m]['wall_per_token_ms']:.4f} ms", flush=True)
    out = {"preset": a.preset, "layout": a.layout, "context": CONTEXT, "new_tokens": NEW, "skip": SKIP,
           "rows": rows, "target": "graph ratio <= 1.3 (issue 13)"}
    out["breakdown"] = breakdown(pipes["graph"], folder, ids, a.rounds)
    print("breakdown (graph, us per token):", json.dumps(out["breakdown"]), flush=True)
    if before:
        out["before"] = before
    out["provenance"] = provenance({a.preset: folder})
    text = json.dumps(out, indent=2, default=str)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


def _before(path: str) -> dict:
    """The reference numbers from a committed result: its own "before" when it has one (a result of this
    script after the host step: the reference stays the numbers before it), else its rows."""
    with open(path) as f:
        b = json.load(f)
    if "before" in b:
        return b["before"]
    return {"git_sha": b["provenance"].get("git_sha"), "date": b["provenance"].get("date"),
            "rows": {m: {k: r[k] for k in ("per_token_ms", "replayed_step_ms", "ratio")} for m, r in b["rows"].items()}}


def _timed_stream(pipe, ids):
    """One generation's StepRecords and its wall time per decode token: (the call's time - the first token's)
    / (tokens - 1), the pipeline's own work and the detokenizer included."""
    t = time.perf_counter()
    steps = pipe.generate_from_ids(ids, max_new_tokens=NEW, stop=()).steps
    total = time.perf_counter() - t
    return steps, (total - steps[0].seconds) / (len(steps) - 1)


def breakdown(pipe, folder, ids, rounds: int) -> dict:
    """Graph mode's step, part by part (module docstring): the decoder's methods wrapped with a clock."""
    import vlmdecode

    dec = pipe.decoder
    acc: dict[str, list] = {}

    def wrap(obj, name, label):
        f = getattr(obj, name)
        acc[label] = []

        def timed(*args, **kw):
            t = time.perf_counter_ns()
            r = f(*args, **kw)
            acc[label].append(time.perf_counter_ns() - t)
            return r
        setattr(obj, name, timed)
        return lambda: delattr(obj, name)

    undo = [wrap(dec, "collect", "collect_wait"), wrap(dec, "token_input", "token_input"),
            wrap(dec, "launch", "launch"), wrap(dec.x_step, "write", "launch_embedding_dma"),
            wrap(dec, "run_step", "launch_run"), wrap(dec, "write_scalars", "launch_next_scalars")]
    import vlmdecode.sampling as sampling

    pick = sampling.Sampler.pick
    acc["pick"] = []

    def timed_pick(self, row, step):
        t = time.perf_counter_ns()
        r = pick(self, row, step)
        acc["pick"].append(time.perf_counter_ns() - t)
        return r
    sampling.Sampler.pick = timed_pick
    seconds, detok = [], []
    try:
        for _ in range(rounds):
            steps = pipe.generate_from_ids(ids, max_new_tokens=NEW, stop=()).steps[SKIP:]
            seconds += [s.seconds * 1e9 for s in steps]
            detok += [s.detok_seconds * 1e9 for s in steps]
    finally:
        sampling.Sampler.pick = pick
        for u in undo:
            u()

    def med(xs):
        return round(statistics.median(xs) / 1e3, 2) if xs else None

    out = {k: med(v) for k, v in acc.items()}  # every call of every round (the prefill's pick included)
    out["pipeline_seconds"] = med(seconds)
    out["detokenizer"] = med(detok)
    decoder_parts = sum(out[k] for k in ("collect_wait", "pick", "token_input", "launch"))
    out["pipeline_own"] = round(out["pipeline_seconds"] - decoder_parts, 2)
    # device side: CUDA events around every run (a second graph pipeline with time_steps=True)
    ev = vlmdecode.load(folder, "cuda", "graph", max_length=CONTEXT + NEW, time_steps=True)
    ev.generate_from_ids(ids, max_new_tokens=16, stop=())
    cp = ev.decoder.cp
    run_us, idle_us = [], []
    for _ in range(rounds):
        ev.decoder.step_events.clear()
        ev.generate_from_ids(ids, max_new_tokens=NEW, stop=())
        pairs = list(ev.decoder.step_events[SKIP:])
        ev.decoder.stream.synchronize()
        run_us += [cp.cuda.get_elapsed_time(a, b) * 1e3 for a, b in pairs]
        idle_us += [cp.cuda.get_elapsed_time(pairs[i][1], pairs[i + 1][0]) * 1e3 for i in range(len(pairs) - 1)]
    out["device_run"] = round(statistics.median(run_us), 2)
    out["device_idle_between_runs"] = round(statistics.median(idle_us), 2)
    return out


if __name__ == "__main__":
    sys.exit(main())
