"""H200 (CuPy only): the bounded LM head's first pass at gemma3-1b's head shape (262144 x 1152, random fp16 weights,
past the L2), alone, for several (rows a warp, PF, MINB, bits) shapes of head_bound (bits 6: the 6-bit copy), beside
the full fp16 head (gemv EPI_HEAD at the decoder's head shape): each pair (head_bound + head_pick) and the full head
captured as a CUDA graph and replayed, rounds interleaved, medians; the token of every variant checked against the
full head's. Writes $OUT/h200_head_bound_sweep.json.
Usage: OUT=/tmp/out python3 scripts/h200_head_bound_sweep.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = Path(os.environ.get("OUT", "/tmp/out"))
# (rows a warp, PF, MINB, bits)
SHAPES = [(4, 0, 0, 8), (2, 1, 0, 8), (4, 0, 2, 8), (4, 0, 3, 8), (2, 0, 3, 8), (2, 1, 3, 8), (4, 0, 4, 8),
          (2, 0, 4, 8), (4, 0, 0, 6), (2, 1, 0, 6), (2, 0, 0, 6)]
V, H = 262144, 1152


def main() -> None:
    import cupy

    from vlmdecode.native import bounded_head as BH
    from vlmdecode.native import kernels as K

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    W = cupy.asarray((rng.standard_normal((V, H)) * 0.03).astype(np.float16))
    tables = {b: BH.quantise(W, bits=b) for b in BH.BITS}
    resid = cupy.asarray(rng.standard_normal(H).astype(np.float32))
    ones = cupy.ones(H, cupy.float32)
    nv = K.loads_per_lane(H)
    fns = K.compile_module({(nv, 2, K.EPI_HEAD, 0)}, set(), (),
                           tuple(n for s in SHAPES for n in BH.names(H, nv, s[:3], s[3])))
    logits = cupy.zeros(V, cupy.float16)
    part_v, part_i = cupy.zeros(K.HEAD_MAX_BLOCKS, cupy.float32), cupy.zeros(K.HEAD_MAX_BLOCKS, cupy.int64)
    sup, nsup = cupy.zeros(1, cupy.int64), cupy.zeros(1, cupy.int32)
    ring, n, pos, t = (cupy.zeros(1, cupy.int64) for _ in range(4))
    stream = cupy.cuda.Stream(non_blocking=True)

    def advance(parts):
        return K.advance(fns, part_v, part_i, parts, table=None, hidden=0, x_out=None, ring=ring, n_dev=n, pos=pos,
                         t_dev=t)

    full = K.gemv(fns, "head", W, V, H, epi=K.EPI_HEAD, src=resid, norm_w=ones, logits=logits, part_v=part_v,
                  part_i=part_i, suppress=sup, n_suppress=nsup, warps=8, rpw=2, prefetch_weights=0)
    variants = {"full head": [full, advance(full.grid[0])]}
    bufs = []
    for s in SHAPES:
        xvec, upper, low = cupy.zeros(H, cupy.float32), cupy.zeros(V, cupy.float32), cupy.zeros(K.HEAD_MAX_BLOCKS,
                                                                                                cupy.float32)
        bufs.append((xvec, upper, low))
        bound, pick = BH.launches(fns, tables[s[3]], W, V, H, nv, 256, src=resid, delta=None, delta_parts=1,
                                  delta_w=None, norm_w=ones, eps=1e-6, softcap=None, xvec=xvec, upper=upper, low=low,
                                  part_v=part_v, part_i=part_i, suppress=sup, n_suppress=nsup, shape=s[:3])
        variants[f"bounded rpw {s[0]} pf {s[1]} minb {s[2]} bits {s[3]}"] = [bound, pick, advance(pick.grid[0])]
    out = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "command": " ".join(sys.argv),
           "git_sha": os.environ.get("VLMDECODE_GIT_SHA", ""), "cupy": cupy.__version__,
           "gpu": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "nvidia_smi": subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True).stdout.strip(),
           "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(), "shape": [V, H],
           "copy_bytes": {b: t.nbytes for b, t in tables.items()},
           "fp16_bytes": int(W.nbytes), "registers": {}, "grids": {}, "tokens": {}, "method":
           "each variant's launches captured once as a CUDA graph (plain launches), 50 replays between CUDA events "
           "after one warm replay, rounds interleaved (odd rounds reversed), medians"}
    graphs = {}
    for name, launches in variants.items():
        with stream:
            for la in launches:
                la()
            stream.synchronize()
            out["tokens"][name] = int(ring.get()[0])
            stream.begin_capture()
            for la in launches:
                la()
            graphs[name] = stream.end_capture()
        out["registers"][name] = [int(la.fn.num_regs) for la in launches]
        out["grids"][name] = [list(la.grid) for la in launches]
    times = {k: [] for k in graphs}
    for r in range(a.rounds):
        for name in (list(graphs) if r % 2 == 0 else list(graphs)[::-1]):
            g = graphs[name]
            with stream:
                g.launch(stream)
                e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
                e0.record(stream)
                for _ in range(50):
                    g.launch(stream)
                e1.record(stream)
                e1.synchronize()
            times[name].append(cupy.cuda.get_elapsed_time(e0, e1) / 50 * 1e3)
    out["us"] = {k: float(np.median(v)) for k, v in times.items()}
    out["rounds_us"] = times
    out["tokens_equal_full"] = all(v == out["tokens"]["full head"] for v in out["tokens"].values())
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "h200_head_bound_sweep.json").write_text(json.dumps(out, indent=2))
    for k, v in sorted(out["us"].items(), key=lambda kv: kv[1]):
        print(f"{v:8.1f} us  {k}  regs {out['registers'][k]}  grid {out['grids'][k][0]}  token {out['tokens'][k]}")
    print("tokens equal:", out["tokens_equal_full"])


if __name__ == "__main__":
    main()
