"""H200: the native decoder's bounded LM head (vlmdecode.native.bounded_head) against its full fp16 head, side by
side in one process. Writes $OUT/h200_bounded_head.json.

    gemma3-1b fp16 fused-cuda at each context (1024: KV capacity 1072; 4096: 4144):
      tokens   200 greedy tokens (a 256-token prompt) of native head="auto" (bounded) and head="full": equal?
               and the candidates the bounded head computed exactly at the last step (read back from its buffers)
      replay   the greedy step (with advance) replayed back to back, bounded vs full, interleaved rounds
      kernels  head (full), head_bound, head_pick alone (CUDA events around each launch of an uncaptured step)
      pipeline per token through the pipeline (bench.pipeline_once: the default lookahead loop), bounded vs full vs
               device, and onnxruntime-genai graph on the same folder at the same capacity, interleaved rounds
    --bits6: the same for head_bits=6 (the 6-bit copy) beside them
Usage: OUT=/tmp/out python3 scripts/h200_bounded_head.py [--contexts 1024 4096] [--rounds 5] [--no-genai] [--bits6]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
OUT = Path(os.environ.get("OUT", "/tmp/out"))
T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def candidates(dec) -> int:
    """Rows the last bounded step computed exactly (head_pick's rule, on its buffers)."""
    dec.stream.synchronize()
    from vlmdecode.native.bounded_head import candidates as rule

    up, low = dec.upper.get(), dec.low.get()[: dec.bounded[0].grid[0]]
    return int(rule(up, np.nanmax(low), dec.plan.final_softcap).sum())


def one_context(folder, context: int, rounds: int, genai: bool, six: bool = False) -> dict:
    import vlmdecode
    from vlmdecode import bench, costmodel
    from vlmdecode.modelfolder import ModelFolder
    from vlmdecode.profiling import prompt_ids

    cap = context + 48
    pipes = {"native bounded": vlmdecode.load(folder, "cuda", "native", max_length=cap),
             "native full": vlmdecode.load(folder, "cuda", "native", max_length=cap, head="full")}
    if six:
        pipes["native bounded6"] = vlmdecode.load(folder, "cuda", "native", max_length=cap, head_bits=6)
    b, f = pipes["native bounded"].decoder, pipes["native full"].decoder
    out = {"context": context, "kv_capacity": cap, "head": {k: p.decoder.counters()["head"] for k, p in pipes.items()},
           "kernels_per_step": {k: p.decoder.kernels_per_step() for k, p in pipes.items()},
           "int8_copy_bytes": b.bound_table.nbytes}
    mf = ModelFolder.load(folder)
    bw = bench.copy_bandwidth()
    weight, kv = costmodel.decoder_weight_bytes(mf), costmodel.kv_read_bytes(mf, context)
    out.update(copy_bandwidth_tb_s=bw / 1e12, floor_ms=(weight + kv) / bw * 1e3)
    x = pipes["native bounded"].embed(prompt_ids(256, seed=1), None)  # tokens: a 256-token prompt, 200 steps
    tb = list(b.generate(x, 200, _sampler(b)))
    nb = candidates(b)
    tf = list(f.generate(x, 200, _sampler(f)))
    first = next((i for i in range(200) if tb[i] != tf[i]), None)
    out["tokens"] = {"steps": 200, "equal": tb == tf, "first_difference": first, "candidates_last_step": nb,
                     "first_tokens": tb[:12]}
    if six:
        d6 = pipes["native bounded6"].decoder
        t6 = list(d6.generate(x, 200, _sampler(d6)))
        out["tokens"].update(bounded6_equal=t6 == tf, bounded6_candidates_last_step=candidates(d6))
    log("tokens", out["tokens"])
    x = pipes["native bounded"].embed(prompt_ids(context), None)
    reps = cap - context - 8
    order = [("bounded", b), ("full", f)] + ([("bounded6", pipes["native bounded6"].decoder)] if six else [])
    per: dict = {name: [] for name, _ in order}
    for r in range(rounds):
        for name, dec in (order if r % 2 == 0 else order[::-1]):
            dec.prepare_timing(x)
            per[name].append(dec.replay_ms(reps, greedy=True))
    out["greedy_replay_ms"] = {k: float(np.median(v)) for k, v in per.items()}
    out["greedy_replay_rounds"] = per
    out["greedy_replay_bounded_over_full"] = out["greedy_replay_ms"]["bounded"] / out["greedy_replay_ms"]["full"]
    b.prepare_timing(x)
    ker = b.kernel_ms(repeats=20)
    out["head_kernels"] = [k for k in ker if k["kernel"] in ("head", "head_bound", "head_pick")]
    out["candidates_at_context"] = candidates(b)
    log("replay", out["greedy_replay_ms"], out["head_kernels"])
    onces = {k: bench.pipeline_once(p, context, 48, 8) for k, p in pipes.items()}
    onces["device"] = bench.pipeline_once(vlmdecode.load(folder, "cuda", "device", max_length=cap), context, 48, 8)
    if genai:
        from vlmdecode.peer import load_genai_model

        onces["genai graph"] = bench.genai_once(load_genai_model(folder, "cuda", cuda_graph=True), context, 48, 8,
                                                max_length=cap)
    rows: dict = {m: [] for m in onces}
    for r in range(rounds):
        for m in (list(onces) if r % 2 == 0 else list(onces)[::-1]):
            rows[m].append(onces[m]()["steady"])
    ms = {m: float(np.median(v)) for m, v in rows.items()}
    out.update(pipeline_ms_per_token=ms, pipeline_rounds=rows,
               native_bounded_over_full=ms["native bounded"] / ms["native full"],
               native_bounded_over_floor=ms["native bounded"] / out["floor_ms"])
    if six:
        out["bounded6_copy_bytes"] = pipes["native bounded6"].decoder.bound_table.nbytes
        out["native_bounded6_over_bounded"] = ms["native bounded6"] / ms["native bounded"]
    if genai:
        out["native_bounded_over_genai_graph"] = ms["native bounded"] / ms["genai graph"]
        out["native_full_over_genai_graph"] = ms["native full"] / ms["genai graph"]
    log("pipeline", ms)
    for p in pipes.values():
        p.decoder.stream.synchronize()
    return out


def _sampler(dec):
    """Greedy, the image token suppressed (not embeddable without image features; as h200_native.parity)."""
    from vlmdecode.sampling import Sampler, SamplingParams

    image_token = getattr(dec.folder, "image_token_id", None)
    return Sampler(SamplingParams(suppress=() if image_token is None else (int(image_token),)))


def provenance() -> dict:
    import cupy

    from vlmdecode.profiling import provenance as prov

    p = prov()
    p.update(cupy=cupy.__version__, cuda_runtime=cupy.cuda.runtime.runtimeGetVersion(),
             cuda_driver=cupy.cuda.runtime.driverGetVersion(),
             gpu=cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-genai", action="store_true")
    ap.add_argument("--bits6", action="store_true", help="also the 6-bit copy (head_bits=6)")
    a = ap.parse_args()
    import gc

    from h200_native import fixture

    results = {"command": " ".join(sys.argv), "provenance": provenance()}
    folder = fixture("gemma3-1b", "fused-cuda")
    log("folder", folder)
    OUT.mkdir(parents=True, exist_ok=True)
    for c in a.contexts:
        try:
            results[f"ctx{c}"] = one_context(folder, c, a.rounds, not a.no_genai, a.bits6)
        except Exception:  # noqa: BLE001 - recorded; the next context still runs
            import traceback

            results[f"ctx{c}_error"] = traceback.format_exc()
            log(results[f"ctx{c}_error"])
        (OUT / "h200_bounded_head.json").write_text(json.dumps(results, indent=2, default=str))
        gc.collect()  # the context's pipelines
    log("done")


if __name__ == "__main__":
    main()
