"""What the host loop adds to a captured step on CUDA: per-token time of the pipeline vs the replayed step.

    python scripts/h200_host_overhead.py [OUT.json] [--preset tiny] [--layout unfused] [--rounds 7]

For each mode (graph, device): the replayed decoder step with no host work between steps
(`decoders.cuda.replay_ms`, CUDA events over 200 back-to-back runs) and the pipeline's per-token time
(`StepRecord.seconds + detok_seconds`, median of the steady window after 8 tokens, 64 new tokens at
context 128, one KV capacity for both), in interleaved rounds; ratio = per-token / replayed step.
Issue #13's target: graph-mode ratio <= 1.3 on tiny.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

CONTEXT, NEW, SKIP = 128, 64, 8


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", nargs="?", default=None)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--layout", default="unfused")
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args(argv)

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
    replay = {m: [] for m in pipes}
    for r in range(a.rounds):
        for m, pipe in (pipes.items() if r % 2 == 0 else reversed(list(pipes.items()))):
            steps = pipe.generate_from_ids(ids, max_new_tokens=NEW, stop=()).steps[SKIP:]
            per_token[m].append(statistics.median(s.seconds + s.detok_seconds for s in steps) * 1e3)
            x = pipe.embed(ids, None)
            replay[m].append(replay_ms(pipe.decoder, x))
    rows = {}
    for m in pipes:
        tok, rep = statistics.median(per_token[m]), statistics.median(replay[m])
        rows[m] = {"per_token_ms": tok, "replayed_step_ms": rep, "ratio": tok / rep,
                   "per_token_rounds": per_token[m], "replay_rounds": replay[m]}
        print(f"{m:7s} per token {tok:.4f} ms  replayed step {rep:.4f} ms  ratio {tok / rep:.2f}", flush=True)
    out = {"preset": a.preset, "layout": a.layout, "context": CONTEXT, "new_tokens": NEW, "skip": SKIP,
           "rows": rows, "target": "graph ratio <= 1.3 (issue 13)", "provenance": provenance({a.preset: folder})}
    text = json.dumps(out, indent=2, default=str)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
