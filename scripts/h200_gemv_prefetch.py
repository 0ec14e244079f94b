"""H200: the native GEMVs with weight prefetch PF 0 / 1 / 2 (`native.kernels.gemv_name`) as the decode step
runs them at gemma3-1b's shapes: qkv (fold of 8 split-K parts), o (plain), gate|up (fold of 1 part), down
(split-K 8, plain), LM head (fold of 8 parts); the step's default block shape (and one other), with PDL, timed as
graph replays over weight copies past the L2 (scripts/h200_native.py `time_graph`). CuPy only.
Writes $OUT/h200_gemv_prefetch.json. Usage: OUT=/tmp/out python3 scripts/h200_gemv_prefetch.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import h200_native as hn  # noqa: E402
import native_kernel_bench as nkb  # noqa: E402

H, I, NQ, D, V, SPLITS = 1152, 6912, 4, 256, 262144, 8


def main() -> None:
    import cupy

    from vlmdecode.native import kernels as K
    from vlmdecode.native.shapes import Shapes

    f32 = lambda n: cupy.random.standard_normal(n, dtype=cupy.float32)  # noqa: E731
    resid, delta, w_a, w_b, vec = f32(H), f32((SPLITS, H)), f32(H), f32(H), f32(I)
    y, r_out = cupy.zeros(2 * V, cupy.float32), cupy.zeros(H, cupy.float32)
    logits, pv, pi = cupy.zeros(V, cupy.float16), cupy.zeros(1024, cupy.float32), cupy.zeros(1024, cupy.int64)
    fold = lambda parts: dict(src=resid, delta=delta, delta_parts=parts, delta_w=w_a, norm_w=w_b,  # noqa: E731
                              resid_out=r_out)
    sh = Shapes()
    # name: rows, reduction, splits, epilogue, (warps, rows a warp), input
    cases = {"qkv": (NQ * D + 2 * D, H, 1, K.EPI_PLAIN, [sh.qkv[:2], (4, 1)], fold(SPLITS)),
             "o": (H, NQ * D, 1, K.EPI_PLAIN, [sh.o[:2]], dict(src=vec)),
             "gate_up": (I, H, 1, K.EPI_GELU, [sh.gate_up[:2], (4, 2)], fold(1)),
             "down/8": (H, I, SPLITS, K.EPI_PLAIN, [sh.down[:2], (8, 1)], dict(src=vec)),
             "head": (V, H, 1, K.EPI_HEAD, [sh.head[:2]],
                      dict(fold(SPLITS), resid_out=None, logits=logits, part_v=pv, part_i=pi))}
    fns = K.compile_module({(K.loads_per_lane(k // sp), wr[1], epi, pf) for _, k, sp, epi, wrs, _ in cases.values()
                            for wr in wrs for pf in (0, 1, 2)}, set())
    out: dict = {"provenance": nkb.provenance(), "copy_tb_per_s": nkb.copy_tb_per_s(), "cases": {}}
    for name, (rows, k, sp, epi, shapes, kw) in cases.items():
        total = 2 * rows if epi == K.EPI_GELU else rows
        nbytes = total * k * 2
        copies = max(1, -(-256_000_000 // nbytes))
        Ws = [(cupy.random.standard_normal((total, k), dtype=cupy.float32) * 0.05).astype(cupy.float16)
              for _ in range(copies)]
        for (warps, rpw), pf in ((wr, pf) for wr in shapes for pf in (0, 1, 2)):
            ls = [K.gemv(fns, name, W, rows, k // sp, splits=sp, epi=epi, y=y, warps=warps, rpw=rpw,
                         prefetch_weights=pf, **kw) for W in Ws] * max(1, 200 // copies)
            ms = hn.time_graph(ls if epi != K.EPI_HEAD else ls[:20], pdl=True)
            key = f"{name} {warps}x{rpw} pf{pf}"
            out["cases"][key] = {"us": ms * 1e3, "tb_per_s": nbytes / (ms * 1e-3) / 1e12, "bytes": nbytes,
                                 "grid": list(ls[0].grid), "registers": int(ls[0].fn.num_regs)}
            print(f"{key:22s} {ms * 1e3:8.2f} us {nbytes / (ms * 1e-3) / 1e12:5.2f} TB/s grid {ls[0].grid} "
                  f"regs {ls[0].fn.num_regs}", flush=True)
        del Ws
    nkb.write_result("h200_gemv_prefetch.json", out)


if __name__ == "__main__":
    main()
