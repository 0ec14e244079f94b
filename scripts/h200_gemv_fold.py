"""H200: what the GEMV prologue's fold (residual + split-K partials + RMSNorm, `form_vector`) costs.

The qkv (1536 x 1152) and gate|up (2 x 6912 x 1152) GEMVs at gemma3-1b's shapes, each with a plain input
vector (no fold), a fold of the residual alone, with 1 delta part and with 8 (what qkv and the head see
after the split-K down projection), weights prefetched before the prologue or not; all with PDL, timed as
graph replays over weight copies past the L2 (scripts/h200_native.py `time_graph`). CuPy only.
Writes $OUT/h200_gemv_fold.json. Usage: OUT=/tmp/out python3 scripts/h200_gemv_fold.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import h200_native as hn  # noqa: E402
import native_kernel_bench as nkb  # noqa: E402

H, I = 1152, 6912


def main() -> None:
    import cupy

    from vlmdecode.native import kernels as K

    f32 = lambda n: cupy.random.standard_normal(n, dtype=cupy.float32)  # noqa: E731
    resid, delta, w_a, w_b = f32(H), f32((8, H)), f32(H), f32(H)
    y, r_out = cupy.zeros(2 * I, cupy.float32), cupy.zeros(H, cupy.float32)
    cases = {"qkv": (1536, K.EPI_PLAIN, (8, 1)), "gate_up": (I, K.EPI_GELU, (8, 2))}
    nv = K.loads_per_lane(H)
    fns = K.compile_module({(nv, rpw, epi, pf) for _, epi, (_, rpw) in cases.values() for pf in (0, 1)}, set())
    folds = {"plain": dict(src=resid), "fold resid": dict(src=resid, norm_w=w_b, resid_out=r_out),
             "fold 1 part": dict(src=resid, delta=delta, delta_parts=1, delta_w=w_a, norm_w=w_b, resid_out=r_out),
             "fold 8 parts": dict(src=resid, delta=delta, delta_parts=8, delta_w=w_a, norm_w=w_b, resid_out=r_out)}
    out: dict = {"provenance": nkb.provenance(), "copy_tb_per_s": nkb.copy_tb_per_s(), "cases": {}}
    for name, (rows, epi, (warps, rpw)) in cases.items():
        total = 2 * rows if epi == K.EPI_GELU else rows
        copies = max(1, -(-256_000_000 // (total * H * 2)))
        Ws = [(cupy.random.standard_normal((total, H), dtype=cupy.float32) * 0.05).astype(cupy.float16)
              for _ in range(copies)]
        for label, kw in folds.items():
            for pf in (0, 1):
                ls = [K.gemv(fns, name, W, rows, H, epi=epi, y=y, warps=warps, rpw=rpw, prefetch_weights=bool(pf),
                             **kw) for W in Ws] * max(1, 200 // copies)
                ms = hn.time_graph(ls, pdl=True)
                key = f"{name} {label} pf{pf}"
                out["cases"][key] = {"us": ms * 1e3, "tb_per_s": total * H * 2 / (ms * 1e-3) / 1e12,
                                     "bytes": total * H * 2, "shape": f"{warps}x{rpw}"}
                print(f"{key:28s} {ms * 1e3:7.2f} us {total * H * 2 / (ms * 1e-3) / 1e12:5.2f} TB/s", flush=True)
        del Ws
    nkb.write_result("h200_gemv_fold.json", out)


if __name__ == "__main__":
    main()
