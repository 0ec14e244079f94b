"""H200: what each kernel class of the native step costs INSIDE the replayed step (issue 16's question "which
boundary or kernel is worth fusing away"): the gemma3-1b step (fused-cuda, context 1024, KV capacity 1072,
default Shapes, PDL as the decoder sets it) captured with every launch, and again with one class of launches
(or a pair) left out; the difference of the replayed times is that class's marginal cost in the step, PDL overlap
included, which the per-kernel sums (Nsight, kernel_ms) cannot give.

A timing probe, not a decoder: a graph with launches left out computes garbage (the kernels after a missing one
read stale buffers), so only times are kept; the full step's logits are checked against the decoder's own graph.
Variants interleaved over rounds (order reversed every other round), 200 replays each, medians.
Writes $OUT/h200_native_ablate.json.
Usage: OUT=/tmp/out python3 scripts/h200_native_ablate.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import h200_native as hn  # noqa: E402  (fixtures, provenance; nothing runs at import)

CLASSES = ("qkv", "attn", "o", "gate_up", "down", "head")
# name -> classes left out of the step
VARIANTS = {"full": (), **{f"-{c}": (c,) for c in CLASSES}, "-attn -o": ("attn", "o"),
            "-qkv -o": ("qkv", "o"), "attn only": ("qkv", "o", "gate_up", "down", "head"),
            "gemvs only": ("attn",)}


def kind(name: str) -> str:
    """'L3.gate_up' -> 'gate_up', 'head' -> 'head'."""
    return name.split(".", 1)[1] if "." in name else name


def timed(dec, graph, n=200) -> float:
    """Device ms of one replay of a probe graph on the decoder's stream (native.timing.graph_ms)."""
    from vlmdecode.native.timing import graph_ms

    return graph_ms(dec.cp, dec.stream, graph, n)


def main(rounds: int = 5) -> None:
    from vlmdecode import bench
    from vlmdecode.native import kernels as K
    from vlmdecode.profiling import prompt_ids

    hn.provenance()
    res = {"provenance": hn.results.get("provenance"), "command": " ".join(sys.argv),
           "context": hn.CONTEXT, "kv_capacity": hn.CAPACITY}
    res["copy_bandwidth_tb_s"] = bench.copy_bandwidth() / 1e12
    pipe = hn.gemma_native()
    dec = pipe.decoder
    x = pipe.embed(prompt_ids(hn.CONTEXT), None)
    dec.prepare_timing(x)
    res["shapes"], res["pdl"] = str(dec.shapes), dec.pdl
    body = dec.body
    res["launches"] = {c: sum(kind(b.name) == c for b in body) for c in CLASSES}
    graphs = {}
    for name, out in VARIANTS.items():
        keep = [b for b in body if kind(b.name) not in out]
        graphs[name] = K.capture(dec.stream, lambda keep=keep: [b() for b in keep])
    # the full probe graph computes what the decoder's own step does
    cp = dec.cp
    with dec.stream:
        dec.graph(False).launch(dec.stream)
        ref = cp.asnumpy(dec.logits).astype(np.float64)
        graphs["full"].launch(dec.stream)
        got = cp.asnumpy(dec.logits).astype(np.float64)
    res["full_vs_decoder_graph_max_abs"] = float(np.abs(got - ref).max())
    ms: dict = {n: [] for n in VARIANTS}
    names = list(VARIANTS)
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            ms[n].append(timed(dec, graphs[n]))
    res["replay_ms"] = ms
    med = {n: float(np.median(v)) for n, v in ms.items()}
    res["replay_ms_median"] = med
    res["saved_us"] = {n: (med["full"] - med[n]) * 1e3 for n in names if n != "full"}
    res["saved_us_per_launch"] = {f"-{c}": res["saved_us"][f"-{c}"] / res["launches"][c] for c in CLASSES}
    print(json.dumps({k: res[k] for k in ("replay_ms_median", "saved_us", "saved_us_per_launch",
                                          "full_vs_decoder_graph_max_abs")}, indent=1), flush=True)
    hn.OUT.mkdir(parents=True, exist_ok=True)
    (hn.OUT / "h200_native_ablate.json").write_text(json.dumps(res, indent=2, default=str))


if __name__ == "__main__":
    main()
