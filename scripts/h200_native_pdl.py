"""H200: variants of the native step side by side: with and without programmatic dependent launch
(`native.pdl`; `--set pdl`, the default), the chunked vs the cluster attention kernel (`--set attention`), o's
block shape (`--set o`), down's split-K (`--set slice`) or gate|up's prefetch (`--set gate_up_pf`); branch
staged-gemv adds `--set stage`, gate|up's weights staged in shared memory. A set may hold more than two variants
(branch `gemv-st` added one of four, the streaming GEMV).

gemma3-1b fp16 fused-cuda at context 1024 (KV capacity 1072) and tiny at context 128: per variant the
replayed step without advance (200 replays, CUDA events), the greedy step with advance replayed back to
back (per token), and the pipeline's steady per-token time (bench.pipeline_once), variants interleaved over
rounds; the copy bandwidth and the floor of this run; greedy tokens of every variant over 64 steps (equal to the
first variant's?), and each against onnxruntime eager teacher-forced (h200_native.parity). Writes
$OUT/h200_native_<set>.json.
--context N: gemma3-1b at context N (KV capacity N + 48; tiny left out), written as h200_native_<set>_ctxN.json.
Usage: OUT=/tmp/out python3 scripts/h200_native_pdl.py [--set pdl|attention|o|slice|gate_up_pf|clusters] [--context N]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import h200_native as hn  # noqa: E402  (fixtures, provenance, timing helpers; nothing runs at import)

# variant sets: name -> Shapes overrides, measured interleaved on the same decoder (rebuilt between them)
SETS = {"pdl": {"plain": {"pdl": False}, "pdl": {"pdl": True}},
        "attention": {"chunked": {"attn_batch": 0, "attn_threads": 256},
                      "cluster": {"attn_batch": 8, "attn_cluster": 16, "attn_clusters": 1, "attn_threads": 128}},
        # o's blocks (resident during attention) keep the last of gate|up's out until o ends (the timeline):
        # fewer or lighter o blocks beside the default (8 warps, 1 row a warp, PF 1: 144 blocks at gemma3-1b)
        "o": {"default": {}, "o 8x2": {"o": (8, 2)}, "o 8x4": {"o": (8, 4)}, "o 4x2": {"o": (4, 2)},
              "o 8x2 PF 2": {"o": (8, 2, 2)}, "o 8x1 PF 0": {"o": (8, 1, 0)}},
        # down's split-K (8 slices of 864 at gemma3-1b) sets how many parts the next qkv's fold reads (its vector
        # takes 2.1 us after the wait, h200_native_timeline_probes_be261dc.json); slices <= 2048 (NV_MAX)
        "slice": {"default": {}, "slice 1152 (6)": {"slice_target": 1152}, "slice 1728 (4)": {"slice_target": 1728}},
        # gate|up's first row group in flight during its fold (2.1 us after the wait) instead of after it
        "gate_up_pf": {"default": {}, "gate_up PF 1": {"gate_up": (8, 2, 1)}, "gate_up PF 2": {"gate_up": (8, 2, 2)}},
        # attention_cl's clusters a KV head: a global layer's sub-groups each take keys / (16 x 8) of its keys
        # in batches of 4, one dependent round trip a batch (8 at context 4096); 2 clusters halve them, 0 takes the
        # fewest with one batch each (local layers: 1) at the cost of the cross-cluster combine
        "clusters": {"default": {}, "clusters 2": {"attn_clusters": 2}, "clusters auto": {"attn_clusters": 0}}}


def compare(pipe, x, context, capacity, rounds=5, variants=SETS["pdl"]):
    from vlmdecode import bench
    from vlmdecode.native.shapes import Shapes

    dec = pipe.decoder
    base = dec.shapes
    out: dict = {"shapes": str(base), "context": context, "kv_capacity": capacity, "variants": {}}
    tokens = {}
    once = bench.pipeline_once(pipe, context, 48, 8)
    names = list(variants)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            dec.rebuild(Shapes(**{**base.__dict__, **variants[name]}))
            v = out["variants"].setdefault(name, {"replay_ms": [], "greedy_ms": [], "pipeline_ms": []})
            dec.prepare_timing(x)
            v["replay_ms"].append(dec.replay_ms(200))
            v["greedy_ms"].append(dec.replay_ms(capacity - context - 8, greedy=True))
            v["pipeline_ms"].append(once()["steady"])
            if r == 0:
                tokens[name] = pipe.generate_from_embeds(x, max_new_tokens=min(64, capacity - context - 1),
                                                         stop=()).tokens
                p = hn.parity(pipe, x, min(64, capacity - context - 1))  # vs onnxruntime eager, teacher-forced
                v["vs_onnxruntime"] = {k: p.get(k) for k in ("steps", "first_divergence", "at_divergence",
                                                             "max_logit_err_vs_ort")}
    for v in out["variants"].values():
        for k in ("replay_ms", "greedy_ms", "pipeline_ms"):
            v[k + "_median"] = float(np.median(v[k]))
    out["tokens_equal"] = all(tokens[n] == tokens[names[0]] for n in names[1:])
    var = out["variants"]
    for n in names[1:]:
        out[f"{n}_over_{names[0]}"] = var[n]["pipeline_ms_median"] / var[names[0]]["pipeline_ms_median"]
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
    which = sys.argv[sys.argv.index("--set") + 1] if "--set" in sys.argv else "pdl"
    context = int(sys.argv[sys.argv.index("--context") + 1]) if "--context" in sys.argv else hn.CONTEXT
    capacity = hn.capacity_for(context)
    pipe = hn.gemma_pipe("native", capacity)
    folder = ModelFolder.load(hn._gemma["folder"])
    weight, kv = costmodel.decoder_weight_bytes(folder), costmodel.kv_read_bytes(folder, context)
    res["gemma3_1b_floor_ms"] = (weight + kv) / bw * 1e3
    x = pipe.embed(prompt_ids(context), None)
    res["gemma3-1b"] = compare(pipe, x, context, capacity, variants=SETS[which])
    print("gemma3-1b", json.dumps({k: v for k, v in res["gemma3-1b"].items() if k != "variants"}),
          medians(res["gemma3-1b"]), flush=True)
    if context == hn.CONTEXT:  # tiny only beside the default context
        tiny = vlmdecode.load(hn.fixture("tiny", "fused-cuda"), "cuda", "native", max_length=192)
        res["tiny"] = compare(tiny, tiny.embed(prompt_ids(128), None), 128, 192, rounds=7, variants=SETS[which])
        print("tiny", medians(res["tiny"]), "tokens equal", res["tiny"]["tokens_equal"], flush=True)
    hn.OUT.mkdir(parents=True, exist_ok=True)
    tag = "" if context == hn.CONTEXT else f"_ctx{context}"
    (hn.OUT / f"h200_native_{which}{tag}.json").write_text(json.dumps(res, indent=2, default=str))


if __name__ == "__main__":
    main()
