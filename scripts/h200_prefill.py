"""H200: the native prefill (native.prefill) beside onnxruntime's on the same decoder, by prompt length.

gemma3-1b fp16 fused-cuda, KV capacity 1072: for each prompt length S, the native prefill's captured graph
(buckets of 64 and of 32 positions) and onnxruntime's prefill run (`CudaDecoder.prefill_on_device`), each
timed with CUDA events on the decoder's stream after warm-up, variants interleaved over rounds, medians; the
last position's logits of both compared (max abs difference, same argmax). Writes $OUT/h200_prefill.json.
`--ncu S`: one replay of S's graph between cudaProfilerStart/Stop, for
`ncu --profile-from-start off --csv --metrics gpu__time_duration.sum python3 scripts/h200_prefill.py --ncu S`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import h200_native as hn  # noqa: E402  (fixtures, provenance; nothing runs at import)

LENGTHS = (64, 128, 256, 275, 512, 768, 1024)
CAPACITY = 1072


def timed(stream, fn, reps: int) -> float:
    import cupy

    a, b = cupy.cuda.Event(), cupy.cuda.Event()
    out = []
    for _ in range(reps):
        a.record(stream)
        fn()
        b.record(stream)
        b.synchronize()
        out.append(cupy.cuda.get_elapsed_time(a, b))
    return float(np.median(out))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ncu", type=int, default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args(argv)
    import cupy

    import vlmdecode
    from vlmdecode.native.prefill import NativePrefill

    folder = hn.fixture("gemma3-1b", "fused-cuda")
    pipe = vlmdecode.load(folder, "cuda", "native", max_length=CAPACITY, prefill="native")
    dec = pipe.decoder
    H = dec.plan.hidden
    rng = np.random.default_rng(0)
    x = {S: (rng.standard_normal((1, S, H)) * 0.5).astype(np.float16) for S in LENGTHS}
    pf = {64: dec._native_prefill, 32: NativePrefill(dec, bucket_step=32)}
    st = dec.stream

    def stage(S):
        with st:
            dec.transfers.begin()
            dec.transfers.upload(dec.prefill_buffers.x, x[S], "prompt")
            dec.transfers.end()

    def native(S, b):
        def go():
            dec.kv.reset()
            pf[b].run(S)
            dec.kv.advance(S)
        return go

    def ort(S):
        from vlmdecode.prompt_path import Staged

        def go():
            with st:
                dec.transfers.begin()
                dec.ort.prefill_on_device(Staged(S))  # the staged input; binds the mask, runs, sets the position
                dec.transfers.end()
        return go

    if a.ncu:
        S = a.ncu
        stage(S)
        for _ in range(2):
            native(S, 64)()
        st.synchronize()
        cupy.cuda.runtime.profilerStart()
        native(S, 64)()
        st.synchronize()
        cupy.cuda.runtime.profilerStop()
        return 0
    res: dict = {S: {"native_b64": [], "native_b32": [], "onnxruntime": []} for S in LENGTHS}
    for r in range(a.rounds):
        for S in (LENGTHS if r % 2 == 0 else LENGTHS[::-1]):
            stage(S)
            variants = [("native_b64", native(S, 64)), ("native_b32", native(S, 32)), ("onnxruntime", ort(S))]
            for name, fn in (variants if r % 2 == 0 else variants[::-1]):
                fn()  # warm-up: first use of a bucket runs eagerly and captures
                st.synchronize()
                res[S][name].append(timed(st, fn, a.reps))
    rows = {}
    for S in LENGTHS:
        stage(S)
        native(S, 64)()
        lg = dec.logits.get(stream=st).astype(np.float32)  # the decoder's stream is non-blocking: read after it
        ref = dec.ort.prefill(x[S])  # onnxruntime's last-position logits
        med = {k: float(np.median(v)) for k, v in res[S].items()}
        rows[S] = dict(ms=res[S], median_ms=med, native_over_onnxruntime=med["native_b64"] / med["onnxruntime"],
                       b32_over_b64=med["native_b32"] / med["native_b64"],
                       max_logit_diff=float(np.abs(lg - ref).max()), same_argmax=int(lg.argmax()) == int(ref.argmax()))
        print(f"S={S:5d}  native b64 {med['native_b64']:.3f} ms  b32 {med['native_b32']:.3f}  onnxruntime "
              f"{med['onnxruntime']:.3f}  ratio {rows[S]['native_over_onnxruntime']:.3f}  "
              f"logit diff {rows[S]['max_logit_diff']:.3g} argmax {'=' if rows[S]['same_argmax'] else '!='}")
    out = dict(provenance=hn.provenance(), command="scripts/h200_prefill.py " + " ".join(argv or sys.argv[1:]),
               preset="gemma3-1b", layout="fused-cuda", kv_capacity=CAPACITY, rounds=a.rounds, reps=a.reps,
               method="CUDA events around each prefill on the decoder's stream (uploads outside), after a warm-up "
                      "run (a bucket's first run is eager and captures); medians over rounds x reps",
               lengths=rows)
    Path(os.environ.get("OUT", ".")).mkdir(parents=True, exist_ok=True)
    Path(os.environ.get("OUT", "."), "h200_prefill.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
