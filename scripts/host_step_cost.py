"""Per-step host cost of the decode loop, by part, on the CPU: what the loop adds to onnxruntime's run.

    python scripts/host_step_cost.py [--preset tiny] [--steps 400] [--out FILE.json]

Each part is timed on its own over `steps` decode steps (median microseconds): onnxruntime's run of the bound
step alone, the decoder's feed (input + position + mask slot), run_step (the run + KV/position bookkeeping),
the logits read, the byte record, token_input (embedding row), greedy and sampled picks, the detokenizer;
then the whole loop as the pipeline times it (StepRecord.seconds + detok_seconds). On CUDA the same loop's
per-token time against the replayed step is measured by the bench (README; `python -m vlmdecode.cli bench`).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def _median_us(fn, n: int) -> float:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out) * 1e6


def measure(preset: str = "tiny", steps: int = 400) -> dict:
    import vlmdecode
    from vlmdecode.fixture.cache import ensure_fixture
    from vlmdecode.profiling import prompt_ids, provenance
    from vlmdecode.sampling import Sampler, SamplingParams

    folder = ensure_fixture(preset, "gqa", "fp32")
    pipe = vlmdecode.load(folder, "cpu")
    dec = pipe.decoder
    ids = prompt_ids(8)
    x = pipe.embed(ids, None)
    greedy, sampled = Sampler(SamplingParams()), Sampler(SamplingParams(do_sample=True, seed=0, top_k=50, top_p=0.9))
    row = dec.prefill(x, reuse=True).copy()
    tok = greedy.pick(row, 0)
    step_x = dec.token_input(tok)
    room = dec.max_length - ids.shape[1] - 2

    def steps_of(fn):  # `fn` advances the KV: re-prefill whenever the cache is full
        done = [0]

        def call():
            if done[0] == room:
                dec.prefill(x, reuse=True)
                done[0] = 0
            fn()
            done[0] += 1
        return call

    detok = pipe.processor.stream_decoder()
    parts = {
        "onnxruntime_run": _median_us(lambda: dec.session.run_with_iobinding(dec.io_step, dec.run_options), steps),
        "feed": _median_us(lambda: dec.feed(step_x), steps),
        "run_step": _median_us(steps_of(dec.run_step), steps),
        "read_logits": _median_us(lambda: dec._read_logits(dec.logits_step, reuse=True), steps),
        "byte_record": _median_us(lambda: dec.transfers.add(dec.step_bytes), steps),
        "token_input": _median_us(lambda: dec.token_input(tok), steps),
        "pick_greedy": _median_us(lambda: greedy.pick(row, 3), steps),
        "pick_sampled": _median_us(lambda: sampled.pick(row, 3), steps),
        "detokenizer": _median_us(lambda: detok.put(tok), steps),
    }
    dec.transfers.steps.clear()
    n = min(room, 64)
    pipe.generate_from_ids(ids, max_new_tokens=n, stop=())  # warm
    loop = [s.seconds + s.detok_seconds for s in pipe.generate_from_ids(ids, max_new_tokens=n, stop=()).steps[8:]]
    parts["loop_per_token"] = statistics.median(loop) * 1e6
    parts["loop_minus_onnxruntime"] = parts["loop_per_token"] - parts["onnxruntime_run"]
    return {"preset": preset, "steps": steps, "us": {k: round(v, 2) for k, v in parts.items()},
            "provenance": provenance({preset: folder})}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="tiny")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    r = measure(a.preset, a.steps)
    for k, v in r["us"].items():
        print(f"{k:24s} {v:9.2f} us")
    if a.out:
        from vlmdecode.profiling import write_json

        write_json(a.out, r)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
