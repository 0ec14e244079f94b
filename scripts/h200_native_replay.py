"""H200: the native decoder's own replayed step, alone in a process (for A/B runs across processes: two kernel
modules of the same source time up to 1.3% apart within one process, h200_native_timeline_flat8_ab_9457657.json, so a
source change is compared over several processes of each tree, alternating): the gemma3-1b step (fused-cuda,
context 1024, KV capacity 1072), the decoder's graph replayed 200 times a round, 7 rounds, medians. $NATIVE_SHAPES:
Shapes overrides (JSON, e.g. '{"qkv": [8, 2]}', `Shapes.with_overrides`) for the step replayed; $NATIVE_CONTEXT: the
step at that context instead (KV capacity context + 48, as h200_native.py's context-4096 part); $NATIVE_CAPACITY: that
KV capacity instead (a short context in a long buffer, as a default load's 4096); $NATIVE_REBUILD: "same" rebuilds
the step with its shapes (new buffers and launches, the cached module), "fresh" also with its kernel module compiled
and loaded again, "fresh_free" so with the first module let go (h200_native.rebuild_from_env). A variant whose
overrides change a template instance gets a second module that way; on 394d079 that alone timed 1.3-1.8% faster
than the first (docs/native_decoder.md), so compare such variants all "fresh".
$NATIVE_DUMMY_MODULE=1: a one-kernel module (pad_module(1)) compiled, loaded and launched before the pipeline loads
(is the first module slow for being the first one the process loads?). Set CUDA_MODULE_LOADING in a variant to vary
that too.
$NATIVE_RELOADS=N: after the measurement, N more in the same process, each on the step rebuilt on a module loaded
afresh (the earlier ones kept loaded) -> "reloads": the module order's effect within one process.
$NATIVE_PAD_KERNELS=a,b,...: before reload i, a module of the i-th count (cycled) of unrolled kernels loaded and
launched, shifting where the next module's code lands (does the code's address matter?). $NATIVE_RELOADS_FREE=1:
each dropped module let go (unloaded once the rebuild no longer holds it) instead of held.
Writes $OUT/h200_native_replay.json. Usage: OUT=/tmp/out python3 scripts/h200_native_replay.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import h200_native as hn  # noqa: E402  (fixtures, provenance; nothing runs at import)
from h200_native_ablate import timed  # noqa: E402


def pad_module(n: int):
    """A loaded module of n kernels, each a few KB of unrolled code, launched once (so lazy loading places it)."""
    import cupy

    body = (
        "float v = x[threadIdx.x];\n#pragma unroll\nfor (int i = 0; i < 256; ++i) v = v * 1.0001f + (float)(i ^ K);\n"
    )
    code = "".join(
        f'extern "C" __global__ void pad{k}(float* x) {{ const int K = {k}; {body} x[threadIdx.x] = v; }}\n'
        for k in range(n)
    )
    mod = cupy.RawModule(code=code)
    buf = cupy.zeros(32, cupy.float32)
    for k in range(n):
        mod.get_function(f"pad{k}")((1,), (32,), (buf,))
    cupy.cuda.Device().synchronize()
    return mod


def main(rounds: int = 7) -> None:
    from vlmdecode.profiling import prompt_ids

    hn.provenance()
    context = int(os.environ.get("NATIVE_CONTEXT", hn.CONTEXT))
    capacity = int(os.environ.get("NATIVE_CAPACITY", hn.capacity_for(context)))
    res = {
        "provenance": hn.results.get("provenance"),
        "command": " ".join(sys.argv),
        "context": context,
        "kv_capacity": capacity,
    }
    if os.environ.get("NATIVE_DUMMY_MODULE") == "1":  # a one-kernel module loaded first, held for the process
        hn.HELD_MODULES.append(pad_module(1))
    res["module_loading"] = os.environ.get("CUDA_MODULE_LOADING", "(driver default)")
    pipe = hn.gemma_pipe("native", capacity)
    dec = pipe.decoder
    res["rebuild"] = hn.rebuild_from_env(dec)  # NATIVE_SHAPES, NATIVE_REBUILD
    res["modules_held"], res["shapes"] = len(hn.HELD_MODULES), str(dec.shapes)
    x = pipe.embed(prompt_ids(context), None)

    def measure() -> list[float]:
        dec.prepare_timing(x)
        g = dec.graph(False)
        timed(dec, g)  # warm-up
        return [timed(dec, g) for _ in range(rounds)]

    res["replay_ms"] = measure()
    res["replay_ms_median"] = float(np.median(res["replay_ms"]))
    print(json.dumps({k: res[k] for k in ("replay_ms_median", "replay_ms")}), flush=True)
    res["reloads"] = []
    pads = [int(v) for v in os.environ.get("NATIVE_PAD_KERNELS", "").split(",") if v]
    # NATIVE_RELOADS_FREE=1: each dropped module let go, not held (does the load after next take its place?)
    free = os.environ.get("NATIVE_RELOADS_FREE") == "1"
    for i in range(int(os.environ.get("NATIVE_RELOADS", "0"))):
        hn.drop_modules(hold=not free)
        pad = pads[i % len(pads)] if pads else 0
        if pad:  # a module of `pad` unrolled kernels loaded first: does the next module's code address matter?
            hn.HELD_MODULES.append(pad_module(pad))
        dec.rebuild(dec.shapes)
        ms = measure()
        res["reloads"].append(
            {
                "module": i + 2,
                "pad_kernels": pad,
                "earlier_freed": free,
                "replay_ms": ms,
                "replay_ms_median": float(np.median(ms)),
            }
        )
        print(json.dumps(res["reloads"][-1]), flush=True)
    hn.OUT.mkdir(parents=True, exist_ok=True)
    (hn.OUT / "h200_native_replay.json").write_text(json.dumps(res, indent=2, default=str))


if __name__ == "__main__":
    main()
