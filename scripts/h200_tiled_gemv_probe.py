"""H200 probe: does a GEMV whose lanes each own a row (weights re-laid in tiles) read closer to the plain read rate?

The step's gemv gives a warp RPW whole rows: each lane loads 16-byte slices across the row, dots them with the
input vector and the warp sums each row with a 5-step shuffle chain before it loads its next row group. The rows
probe (h200_rows_probe.json) put gate_up's loads alone in that pattern at 8.69 us and with the dot at 10.65, and
double-buffering, more blocks or more loads in flight did not close that gap (docs/native_decoder.md). Here the
weights are re-laid once, at set-up, so that no row needs a warp sum:

    W_t[slice][tile][cg][32 lanes][8 halves]     tile: R rows; S = 32 / R lanes a row; lane l: row l % R, sub l / R
    chunk group cg: the 8-half chunks cg S .. cg S + S - 1 of the tile's R rows, 512 contiguous bytes

  gt<CPW, R, NW, DB>  a block a tile (grid-stride), its NW warps taking chunk groups i NW + w (i < CPW) of it:
                      each lane keeps one fp32 sum over its row's chunks against the vector in shared memory
                      (broadcast reads), the S sub-lanes summed by log2 S shuffles once a tile, the warps' sums
                      in shared memory once a tile; DB 1: the next tile's loads in flight during this tile's dot,
                      DB 0: issued after the dot, in flight during the tile's sums

beside, in the same run and over the same bytes:
  rd4 x8              a plain streaming read, no math (h200_stream_probe's rd<4>, 8 blocks an SM): the floor
  gemv                the step's register gemv at its default shape with a plain vector (h200_stream_probe's row
                      `gemv`: gate_up (8, 2, 0) with its gelu epilogue, down (4, 1, 2) in 8 split-K slices, qkv and
                      o (8, 1, 1)); for gate_up also gemv_split (PF 3), the step's gate|up, with its fold
  gt ROW 1            the same kernel reading W as stored (row-major): lane l loads row t R + l % R's 16-byte
                      column cg S + l / R, so a warp load is R runs of 16 S bytes; no re-layout
Sizes: gemma3-1b's four projections (gt treats gate_up as 13824 plain rows). Every gt's y is checked against
float64 numpy (max |err| / max |y|). Each launch reads one of 4 rotating weight copies (past the L2), 20 x 4
launches in one CUDA graph, replayed 5 times, median us per launch (h200_stream_probe.timed).
-> $OUT/h200_tiled_gemv_probe.json. CuPy only; about two minutes.
Usage: OUT=/tmp/out python3 scripts/h200_tiled_gemv_probe.py
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SRC = r"""
template <int CPW, int R, int NW, int ROW>
__device__ __forceinline__ void gt_load(uint4 (&buf)[CPW], const uint4* base, const int t, const int n_tiles,
                                        const int CG, const int ld16) {
    constexpr int S = 32 / R;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < CPW; ++i) {
        const int cg = i * NW + warp;
        // ROW 0: the tiled layout; ROW 1: W as stored, row t R + lane % R, 16-byte column cg S + lane / R
        const size_t at = ROW ? (size_t)(t * R + lane % R) * ld16 + cg * S + lane / R
                              : ((size_t)t * CG + cg) * 32 + lane;
        buf[i] = (t < n_tiles && cg < CG) ? __ldcs(base + at) : make_uint4(0u, 0u, 0u, 0u);
    }
}

// the tiled gemv (module docstring); ROW 0: Wt [gridDim.y slices][n_rows / R tiles][CG][32][8 halves], CG =
// k_len / 8S; ROW 1: W [n_rows, ld] as stored, slice blockIdx.y at column blockIdx.y k_len; y: [gridDim.y, n_rows]
template <int CPW, int R, int NW, int DB, int ROW>
__global__ void __launch_bounds__(NW * 32) gt(const uint4* __restrict__ Wt, const int n_rows, const int k_len,
                                             const int ld, const float* x, float* y) {
    constexpr int S = 32 / R;
    extern __shared__ float gt_vec[];  // the vector slice (dynamic shared memory is 16-byte aligned)
    __shared__ float red[2][NW][R];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, s = lane / R;
    const int CG = k_len / (8 * S), n_tiles = n_rows / R;
    const int ld16 = ld / 8;
    const uint4* base = Wt + (ROW ? (size_t)blockIdx.y * k_len / 8 : (size_t)blockIdx.y * n_tiles * CG * 32);
    uint4 a[CPW], b[CPW];
    int t = blockIdx.x;
    gt_load<CPW, R, NW, ROW>(a, base, t, n_tiles, CG, ld16);  // in flight while the vector is read
    for (int i = threadIdx.x; i < k_len; i += blockDim.x) gt_vec[i] = x[(size_t)blockIdx.y * k_len + i];
    __syncthreads();
    int par = 0;
    for (; t < n_tiles; t += gridDim.x) {
        const int tn = t + gridDim.x;
        if (DB) gt_load<CPW, R, NW, ROW>(b, base, tn, n_tiles, CG, ld16);
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < CPW; ++i) {
            const int cg = i * NW + warp;
            if (cg < CG) acc += dot8(a[i], gt_vec + (cg * S + s) * 8);
        }
        if (!DB) gt_load<CPW, R, NW, ROW>(a, base, tn, n_tiles, CG, ld16);
#pragma unroll
        for (int o = R; o < 32; o <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane < R) red[par][warp][lane] = acc;
        __syncthreads();  // red[par] is next written two tiles on, after every warp has passed the next barrier
        if (warp == 0 && lane < R) {
            float v = 0.f;
#pragma unroll
            for (int w = 0; w < NW; ++w) v += red[par][w][lane];
            y[(size_t)blockIdx.y * n_rows + t * R + lane] = v;
        }
        par ^= 1;
        if (DB) {
#pragma unroll
            for (int i = 0; i < CPW; ++i) a[i] = b[i];
        }
    }
}
"""

# (rows, k, split-K slices); the step gemv's shape (warps, rows a warp, PF) and epilogue as h200_stream_probe's
SHAPES = {"qkv": (1536, 1152, 1, (8, 1, 1), "plain"), "o": (1152, 1024, 1, (8, 1, 1), "plain"),
          "down": (1152, 6912, 8, (4, 1, 2), "plain"), "gate_up": (13824, 1152, 1, (8, 2, 0), "gelu")}
# gt variants a size: (R, NW, DB, ROW); CPW follows (chunk groups a warp). The first run (5ba5ea5's file) swept
# R 8-32 and found gate_up fastest at R 8 with 8 warps (the fewest registers, the most blocks an SM)
VARIANTS = {
    "qkv": [(8, 8, 1, 0), (8, 8, 1, 1), (4, 8, 1, 1), (8, 8, 0, 1)],
    "o": [(8, 8, 1, 0), (8, 8, 1, 1), (4, 8, 1, 1), (8, 8, 0, 1)],
    "down": [(16, 8, 1, 0), (16, 8, 1, 1), (8, 8, 1, 1), (8, 4, 1, 1), (8, 8, 0, 1), (16, 6, 1, 1)],
    "gate_up": [(8, 8, 1, 0), (8, 8, 1, 1), (8, 8, 0, 0), (8, 8, 0, 1), (8, 12, 1, 1), (8, 16, 1, 1), (4, 8, 1, 0),
                (4, 8, 1, 1), (4, 4, 1, 1), (4, 8, 0, 1), (16, 8, 1, 1)],
}


def tile(W: np.ndarray, R: int, splits: int = 1) -> np.ndarray:
    """W [N, K] re-laid as gt reads it: [splits][N / R][CG][32][8], CG = (K / splits) / (8 S), S = 32 / R."""
    N, K = W.shape
    S, k_len = 32 // R, K // splits
    if N % R or K % splits or k_len % (8 * S):
        raise ValueError(f"tile: {N} x {K} in {splits} slices does not tile by R = {R} (k slice {k_len} must be a "
                         f"multiple of {8 * S})")
    cg = k_len // (8 * S)
    # [t, r, p, cg, s, e] -> [p, t, cg, s, r, e]: lane s R + r of chunk group cg holds row t R + r's chunk cg S + s
    return np.ascontiguousarray(W.reshape(N // R, R, splits, cg, S, 8).transpose(2, 0, 3, 4, 1, 5))


def emulate(Wt: np.ndarray, x: np.ndarray, R: int, NW: int, splits: int = 1) -> np.ndarray:
    """gt's sums in float64 by its own indexing: warp w's lanes over chunk groups i NW + w, the S sub-lanes and the
    NW warps summed; -> y [splits, N]. What the CPU test checks the layout with."""
    S = 32 // R
    p_, n_tiles, CG = Wt.shape[:3]
    k_len = CG * 8 * S
    lanes = Wt.reshape(p_, n_tiles, CG, 32, 8).astype(np.float64)
    sub = np.arange(32) // R  # each lane's sub-lane s
    y = np.zeros((splits, n_tiles * R))
    for p in range(splits):
        xs = x[p * k_len:(p + 1) * k_len].astype(np.float64)
        for t in range(n_tiles):
            acc = np.zeros((NW, 32))
            for cg in range(CG):  # warp cg % NW's lanes: row lane % R, chunk cg S + s
                cols = (cg * S + sub)[:, None] * 8 + np.arange(8)
                acc[cg % NW] += (lanes[p, t, cg] * xs[cols]).sum(-1)
            y[p, t * R:(t + 1) * R] = acc.sum(0).reshape(S, R).sum(0)
    return y


def main() -> None:
    import cupy
    from h200_stream_probe import METHOD, PROBE, provenance, size_inputs, timed, write

    from vlmdecode.native import kernels as K
    from vlmdecode.native.cuda_src import common

    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]

    def cpw(k_len, R, nw):
        return -(-(k_len // (8 * (32 // R))) // nw)

    names = sorted({f"gt<{cpw(k // sp, R, nw)},{R},{nw},{db},{row}>" for name, (_, k, sp, _, _) in SHAPES.items()
                    for R, nw, db, row in VARIANTS[name]})
    mod = cupy.RawModule(code=common.CODE + SRC, options=("-std=c++17",), name_expressions=names)
    rd = cupy.RawModule(code=PROBE, options=("-std=c++17",), name_expressions=["rd<4>"]).get_function("rd<4>")
    fns = K.compile_module({(K.loads_per_lane(k // sp), sh[1], K.EPI_GELU if epi == "gelu" else K.EPI_PLAIN, sh[2])
                            for _, k, sp, sh, epi in SHAPES.values()} | {(5, 2, K.EPI_GELU, 3)}, set())
    rng = np.random.default_rng(1)
    resid, o_out, w1, w2 = (cupy.asarray(rng.standard_normal(1152).astype(np.float32) + c) for c in (0, 0, 2, 2))
    r_out = cupy.zeros(1152, cupy.float32)
    sink = cupy.zeros(1, cupy.uint32)
    res: dict = {"provenance": provenance(METHOD + "; gt's y checked against float64 numpy"), "sms": sms,
                 "registers": {n: int(mod.get_function(n).num_regs) for n in names}, "sizes": {}}
    for name, (rows, k, splits, (warps, rpw, pf), epi) in SHAPES.items():
        k_len = k // splits
        Wh, Ws, x, ref, y, r = size_inputs(cupy, rows, k, splits)
        r["us"]["rd4 x8"] = timed([partial(rd, (sms * 8,), (256,), (W, np.int64(W.nbytes // 16), sink)) for W in Ws])
        n_out = rows // 2 if epi == "gelu" else rows
        r["us"][f"gemv {warps}w {rpw}r pf{pf} {epi}"] = timed(
            [K.gemv(fns, "t", W, n_out, k_len, splits=splits, epi=K.EPI_GELU if epi == "gelu" else K.EPI_PLAIN,
                    y=y, src=x, warps=warps, rpw=rpw, prefetch_weights=pf) for W in Ws])
        if name == "gate_up":  # the step's own gate|up: gemv_split (PF 3) with its residual fold and both norms
            r["us"]["gemv_split 8w 2r pf3 gelu + fold"] = timed(
                [K.gemv(fns, "t", W, n_out, k_len, epi=K.EPI_GELU, y=y, src=resid, delta=o_out, delta_w=w1,
                        resid_out=r_out, norm_w=w2, warps=8, rpw=2, prefetch_weights=3) for W in Ws])
        for R, row in sorted({(v[0], v[3]) for v in VARIANTS[name]}):
            Wt = Ws if row else [cupy.asarray(tile(w, R, splits)) for w in Wh]
            for R_, nw, db, row_ in VARIANTS[name]:
                if (R_, row_) != (R, row):
                    continue
                fn = mod.get_function(f"gt<{cpw(k_len, R, nw)},{R},{nw},{db},{row}>")
                n_tiles = rows // R
                res_grid = K.resident_blocks(fn, nw * 32, 4 * k_len)
                grids = sorted({min(n_tiles, -(-res_grid // splits))}
                               | {min(n_tiles, -(-sms * m // splits)) for m in (2, 3, 4, 5, 6)})
                for grid in grids:
                    layout = "rows" if row else "tiled"
                    label = f"gt R{R} {nw}w cpw{cpw(k_len, R, nw)} db{db} {layout} grid {grid}x{splits}"
                    args = (np.int32(rows), np.int32(k_len), np.int32(k), x, y)
                    y.fill(0)
                    fn((grid, splits), (nw * 32,), (Wt[0], *args), shared_mem=4 * k_len)
                    got = y.get().reshape(splits, rows).astype(np.float64)
                    r["max_rel_err"][label] = float(np.abs(got - ref).max() / np.abs(ref).max())
                    r["us"][label] = timed([partial(fn, (grid, splits), (nw * 32,), (W, *args), shared_mem=4 * k_len)
                                            for W in Wt])
            del Wt
        r["us"] = {n: round(v, 3) for n, v in r["us"].items()}
        res["sizes"][name] = r
        best = sorted(((v, n) for n, v in r["us"].items() if n.startswith("gt")))[:3]
        print(name, "rd4", r["us"]["rd4 x8"], "gemv", [v for n, v in r["us"].items() if n.startswith("gemv")],
              "best gt:", best, "max rel err:", max(r["max_rel_err"].values()), flush=True)
        del Ws
    write("h200_tiled_gemv_probe.json", res)


if __name__ == "__main__":
    main()
