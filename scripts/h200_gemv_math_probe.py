"""H200 probe: how much of a native GEMV's time is its arithmetic, and which arithmetic hides behind the loads?

The rows probe (h200_rows_probe.json, branch producer-fold) found gate_up read in the register gemv's own access
pattern at about the plain read's rate with the loads alone, and ~2 us slower once each 16-byte load is dotted with
the input vector read back from shared memory (two float4 shared loads per weight load). This probe times, for
each of gemma3-1b's four projections (split-K as the step runs down), over 4 rotating weight copies (past the L2):
  rd4            a plain streaming read, no math (h200_stream_probe's rd<4>, 8 blocks an SM): the floor
  gx<NV,RPW,0>   the gemv's pattern and math: x fp32 in shared memory, dot8 per load (the step's kernel today)
  gx<NV,RPW,1>   the same with the lane's x columns held in registers (loaded once a block): no shared loads
  gm<NB,NW>      tensor cores: mma.sync m16n8k16 with the weights as the B operand (a block a tile of 8 rows, its
                 NW warps splitting the row's 32-half chunks, NB 16-byte loads a lane in flight, 64 bytes of each
                 row a load), x in fp16 from shared memory (8 lanes share an address), fp32 accumulation
Every kernel's y is checked against float64 numpy (max |err| / max |y|) and the rows record it: gm rounds x to fp16
as onnxruntime's fp16 MatMul does. -> $OUT/h200_gemv_math.json. CuPy only; about a minute.
Usage: OUT=/tmp/out python3 scripts/h200_gemv_math_probe.py
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from h200_stream_probe import METHOD, PROBE, provenance, size_inputs, timed, write  # noqa: E402

from vlmdecode.native.cuda_src import common  # noqa: E402 - dot8, the step's 8-wide dot

SRC = common.CODE + r"""
// the register gemv's pattern (warp w of block b: rows (g * warps + w) * RPW + i, g = b, b + grid, ..; lane l loads
// columns (l + 32 j) * 8 of its rows); split-K slice blockIdx.y; XR 1: the lane's x columns in registers
template <int NV, int RPW, int XR>
__global__ void __launch_bounds__(256) gx(const __half* __restrict__ W, const int n_rows, const int ld,
                                          const int k_len, const float* x, float* y) {
    extern __shared__ float vec[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5, k0 = blockIdx.y * k_len;
    for (int i = threadIdx.x; i < k_len; i += blockDim.x) vec[i] = x[k0 + i];
    __syncthreads();
    float4 xa[NV], xb[NV];
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int col = (lane + 32 * j) * 8;
        xa[j] = make_float4(0.f, 0.f, 0.f, 0.f); xb[j] = xa[j];
        if (XR && col < k_len) {
            xa[j] = *reinterpret_cast<const float4*>(vec + col);
            xb[j] = *reinterpret_cast<const float4*>(vec + col + 4);
        }
    }
    const int n_groups = (n_rows + nw * RPW - 1) / (nw * RPW);
    for (int g = blockIdx.x; g < n_groups; g += gridDim.x) {
        uint4 w[RPW][NV];
#pragma unroll
        for (int i = 0; i < RPW; ++i)
#pragma unroll
            for (int j = 0; j < NV; ++j) {
                const int r = (g * nw + warp) * RPW + i, col = (lane + 32 * j) * 8;
                w[i][j] = (r < n_rows && col < k_len)
                    ? __ldcs(reinterpret_cast<const uint4*>(W + (size_t)r * ld + k0 + col)) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
        for (int i = 0; i < RPW; ++i) {
            const int r = (g * nw + warp) * RPW + i;
            float acc = 0.f;
#pragma unroll
            for (int j = 0; j < NV; ++j) {
                const int col = (lane + 32 * j) * 8;
                if (col < k_len) {
                    if (XR) acc += dot8(w[i][j], xa[j], xb[j]);
                    else acc += dot8(w[i][j], *reinterpret_cast<const float4*>(vec + col),
                                     *reinterpret_cast<const float4*>(vec + col + 4));
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
            if (lane == 0 && r < n_rows) y[(size_t)blockIdx.y * n_rows + r] = acc;
        }
    }
}

__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned a0, const unsigned a2, const unsigned b0,
                                         const unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a0), "r"(a2), "r"(a2), "r"(b0), "r"(b1));
}

// tensor-core gemv: a tile is 8 rows (the mma's n), row r0 + lane / 4, one block a tile (grid-stride); warp w takes
// chunks c = w + NW b (b < NB) of 32 halves; lane q = lane % 4 loads 8 halves at c * 32 + q * 8 of its row: halves 0-3
// are mma 1's B fragment (k slots 2q, 2q+1 | 2q+8, 2q+9), 4-7 mma 2's; A is x (fp16, shared) in all 16 rows at the
// same slots, so every lane's d[0], d[1] are rows r0 + 2q, r0 + 2q + 1; the NW warps' partials summed in shared memory.
// The first tile's loads are issued before x is read (as the gemv's PF 1); split-K slice blockIdx.y.
template <int NB, int NW>
__global__ void __launch_bounds__(NW * 32) gm(const __half* __restrict__ W, const int n_rows, const int ld,
                                             const int k_len, const float* x, float* y) {
    extern __shared__ __align__(16) __half xh[];
    __shared__ float red[NW][8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, k0 = blockIdx.y * k_len;
    const int q = lane & 3, rg = lane >> 2;
    const int n_chunks = k_len / 32, n_tiles = n_rows / 8;
    bool first = true;
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x) {
        uint4 u[NB];
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const int c = warp + NW * b;
            u[b] = c < n_chunks
                ? __ldcs(reinterpret_cast<const uint4*>(W + (size_t)(t * 8 + rg) * ld + k0 + c * 32 + q * 8))
                : make_uint4(0u, 0u, 0u, 0u);
        }
        if (first) {
            for (int i = threadIdx.x; i < k_len; i += blockDim.x) xh[i] = __float2half_rn(x[k0 + i]);
            __syncthreads();
            first = false;
        }
        float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const int c = warp + NW * b;
            if (c < n_chunks) {
                const uint4 xv = *reinterpret_cast<const uint4*>(xh + c * 32 + q * 8);
                mma16816(d, xv.x, xv.y, u[b].x, u[b].y);
                mma16816(d, xv.z, xv.w, u[b].z, u[b].w);
            }
        }
        if (rg == 0) { red[warp][2 * q] = d[0]; red[warp][2 * q + 1] = d[1]; }
        __syncthreads();
        if (threadIdx.x < 8) {
            float s = 0.f;
#pragma unroll
            for (int w = 0; w < NW; ++w) s += red[w][threadIdx.x];
            y[(size_t)blockIdx.y * n_rows + t * 8 + threadIdx.x] = s;
        }
        __syncthreads();
    }
}
"""

# (rows, k, split-K slices, the step's gemv shape (warps, rows a warp)); gate_up's 13824 rows as plain rows here
SHAPES = {"qkv": (1536, 1152, 1, (8, 1)), "o": (1152, 1024, 1, (8, 1)), "down": (1152, 6912, 8, (4, 1)),
          "gate_up": (13824, 1152, 1, (8, 2))}
MMA_WARPS = (4, 8)


def main() -> None:
    import cupy

    from vlmdecode.native import kernels as K

    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    gx_names = sorted({f"gx<{K.loads_per_lane(k // s)},{sh[1]},{xr}>" for _, k, s, sh in SHAPES.values()
                       for xr in (0, 1)})
    nb = lambda k_len, nw: -(-(k_len // 32) // nw)  # noqa: E731 - chunks a warp
    mma_names = sorted({f"gm<{nb(k // s, nw)},{nw}>" for _, k, s, _ in SHAPES.values() for nw in MMA_WARPS})
    mod = cupy.RawModule(code=SRC, options=("-std=c++17",), name_expressions=gx_names + mma_names)
    rd = cupy.RawModule(code=PROBE, options=("-std=c++17",), name_expressions=["rd<4>"]).get_function("rd<4>")
    sink = cupy.zeros(1, cupy.uint32)
    res: dict = {"provenance": provenance(METHOD + "; y checked against float64 numpy"), "sms": sms,
                 "registers": {n: int(mod.get_function(n).num_regs) for n in gx_names + mma_names}, "sizes": {}}
    for name, (rows, k, splits, (warps, rpw)) in SHAPES.items():
        k_len = k // splits
        Wh, Ws, x, ref, y, r = size_inputs(cupy, rows, k, splits)
        r["us"]["rd4 x8"] = timed([partial(rd, (sms * 8,), (256,), (W, np.int64(W.nbytes // 16), sink)) for W in Ws])

        def run(label, fn, grid, threads, shared, Ws=Ws, x=x, y=y, r=r, ref=ref, dims=(rows, k, k_len, splits)):
            args = (np.int32(dims[0]), np.int32(dims[1]), np.int32(dims[2]), x, y)
            fn(grid, (threads,), (Ws[0], *args), shared_mem=shared)
            got = y.get().reshape(dims[3], dims[0]).astype(np.float64)
            r["max_rel_err"][label] = float(np.abs(got - ref).max() / np.abs(ref).max())
            r["us"][label] = timed([partial(fn, grid, (threads,), (W, *args), shared_mem=shared) for W in Ws])

        nv = K.loads_per_lane(k_len)
        for xr in (0, 1):
            fn = mod.get_function(f"gx<{nv},{rpw},{xr}>")
            groups = -(-rows // (warps * rpw))
            grid = min(groups, -(-K.resident_blocks(fn, warps * 32, 4 * k_len) // splits))
            run(f"gx {warps}w {rpw}r xr{xr} grid {grid}", fn, (grid, splits), warps * 32, 4 * k_len)
        for nw in MMA_WARPS:
            fn = mod.get_function(f"gm<{nb(k_len, nw)},{nw}>")
            res_grid = -(-K.resident_blocks(fn, nw * 32, 2 * k_len) // splits)
            for grid in sorted({min(rows // 8, res_grid), min(rows // 8, sms), min(rows // 8, 4 * sms)}):
                run(f"gm {nw}w nb{nb(k_len, nw)} grid {grid}", fn, (grid, splits), nw * 32, 2 * k_len)
        r["us"] = {n: round(v, 3) for n, v in r["us"].items()}
        res["sizes"][name] = r
        best = sorted(r["us"].items(), key=lambda kv: kv[1])[:6]
        print(name, "rd4", r["us"]["rd4 x8"], "gx:", {n: v for n, v in r["us"].items() if n.startswith("gx")},
              "best:", best, "max rel err:", max(r["max_rel_err"].values()), flush=True)
        del Ws
    write("h200_gemv_math.json", res)


if __name__ == "__main__":
    main()
