"""H200: the native step with and without programmatic dependent launch (`native.pdl`), side by side.

gemma3-1b fp16 fused-cuda at context 1024 (KV capacity 1072) and tiny at context 128: per variant the
replayed step without advance (200 replays, CUDA events), the greedy step with advance replayed back to
back (per token), and the pipeline's steady per-token time (bench.pipeline_once), variants interleaved over
rounds; the copy bandwidth and the floor of this run; greedy tokens of both variants over 64 steps (equal).
Writes $OUT/h200_native_pdl.json. Usage: OUT=/tmp/out python3 scripts/h200_native_pdl.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import h200_native as hn  # noqa: E402  (fixtures, provenance, timing helpers; nothing runs at import)


def compare(pipe, x, context, capacity, rounds=5):
    from vlmdecode import bench
    from vlmdecode.native.kernels import Shapes

    dec = pipe.decoder
    base = dec.shapes
    out: dict = {"shapes": str(base), "context": context, "kv_capacity": capacity, "variants": {}}
    tokens = {}
    once = bench.pipeline_once(pipe, context, 48, 8)
    for r in range(rounds):
        for pdl in ((False, True) if r % 2 == 0 else (True, False)):
            dec.rebuild(Shapes(**{**base.__dict__, "pdl": pdl}))
            v = out["variants"].setdefault("pdl" if pdl else "plain", {"replay_ms": [], "greedy_ms": [],
                                                                       "pipeline_ms": []})
            dec.prepare_timing(x)
            v["replay_ms"].append(dec.replay_ms(200))
            v["greedy_ms"].append(dec.replay_ms(capacity - context - 8, greedy=True))
            v["pipeline_ms"].append(once()["steady"])
            if r == 0:
                tokens[pdl] = pipe.generate_from_embeds(x, max_new_tokens=min(64, capacity - context - 1),
                                                        stop=()).tokens
    for v in out["variants"].values():
        for k in ("replay_ms", "greedy_ms", "pipeline_ms"):
            v[k + "_median"] = float(np.median(v[k]))
    out["tokens_equal"] = tokens[True] == tokens[False]
    var = out["variants"]
    out["pdl_over_plain"] = var["pdl"]["pipeline_ms_median"] / var["plain"]["pipeline_ms_median"]
    dec.rebuild(base)
    return out


def medians(r: dict) -> dict:
    return {n: {k: round(v[k], 4) for k in v if k.endswith("median")} for n, v in r["variants"].items()}


def main() -> None:
    import vlmdecode
    from vlmdecode import bench, costmodel
    from vlmdecode.modelfolder import ModelFolder
    from vlmdecode.profiling import prompt_ids

    hn.provenance()
    res = {"provenance": hn.results.get("provenance"), "command": " ".join(sys.argv)}
    bw = bench.copy_bandwidth()
    res["copy_bandwidth_tb_s"] = bw / 1e12
    pipe = hn.gemma_native()
    folder = ModelFolder.load(hn._gemma["folder"])
    weight, kv = costmodel.decoder_weight_bytes(folder), costmodel.kv_read_bytes(folder, hn.CONTEXT)
    res["gemma3_1b_floor_ms"] = (weight + kv) / bw * 1e3
    x = pipe.embed(prompt_ids(hn.CONTEXT), None)
    res["gemma3-1b"] = compare(pipe, x, hn.CONTEXT, hn.CAPACITY)
    print("gemma3-1b", json.dumps({k: v for k, v in res["gemma3-1b"].items() if k != "variants"}),
          medians(res["gemma3-1b"]), flush=True)
    tiny = vlmdecode.load(hn.fixture("tiny", "fused-cuda"), "cuda", "native", max_length=192)
    res["tiny"] = compare(tiny, tiny.embed(prompt_ids(128), None), 128, 192, rounds=7)
    print("tiny", medians(res["tiny"]), "tokens equal", res["tiny"]["tokens_equal"], flush=True)
    hn.OUT.mkdir(parents=True, exist_ok=True)
    (hn.OUT / "h200_native_pdl.json").write_text(json.dumps(res, indent=2, default=str))


if __name__ == "__main__":
    main()
