"""The native GEMV over weights re-laid in tiles, `gemv_tiled<CPW, R, NW, MB, EPI>`: each lane owns one row of a
tile, so no row needs a warp sum (`native.tiled_gemv` lays the weights out and launches it). EPI_GELU: gate|up with
its fold; EPI_FOLD: plain rows (qkv) with the same fold; EPI_PLAIN: a split-K slice of down (or o's one slice) over
a plain vector.

Part of `native.kernels_src.SOURCE`, which concatenates the parts in order; CUDA C++ in a string.
"""

CODE = r"""// tile t's chunk groups i NW + warp (i < CPW) -> buf (zero past the tiles or the groups); lane l's 16 bytes
template <int CPW, int NW>
__device__ __forceinline__ void tiled_load(uint4 (&buf)[CPW], const uint4* Wt, const int t, const int n_tiles,
                                           const int CG) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < CPW; ++i) {
        const int cg = i * NW + warp;
        buf[i] = (t < n_tiles && cg < CG) ? __ldcs(Wt + ((size_t)t * CG + cg) * 32 + lane)
                                          : make_uint4(0u, 0u, 0u, 0u);
    }
}

// EPI_GELU (gate|up): y[j] = gelu_tanh(W[j] x') * (W[j + n_rows] x'), x' formed by form_vector (the fold, norm_w
// always given). W: the tiled layout [n_tiles = 2 n_rows / R][CG = k_len / 8S][32 lanes][8 halves], S = 32 / R:
// tile t's rows are gate rows t R/2 .. t R/2 + R/2 - 1 then their up rows. EPI_FOLD (qkv): y[j] = W[j] x', the same
// fold, W [1][n_rows / R][CG][32][8] as EPI_PLAIN's one slice. The fold holds FR float4 slots a thread (2; EPI_FOLD
// from 16 warps 1; k_len <= 4 FR x threads): one slot loads every delta part at once, as qkv's split-K partials of
// down want, where a second slot's parts wait for the first's (fold_flat8's note). EPI_PLAIN (down's split-K): slice
// p = blockIdx.y, y[p n_rows + j] = W_p[j] . src[p k_len ..], W [gridDim.y][n_tiles = n_rows / R][CG][32][8], tile
// t's rows t R .. t R + R - 1. Lane l holds row l % R's 8-half chunk cg S + l / R of chunk group cg (512 contiguous
// bytes). Block b takes tiles b, b + grid, ..; warp w the chunk groups i NW + w, each lane one fp32 sum; the S
// sub-lanes are summed by shuffles and the NW warps in shared memory once a tile, while the next tile's loads are
// in flight. The first tile's loads are issued before pdl_wait (weights are constants). The same parameters as
// gemv (the LM head's unused). MB: blocks an SM that ptxas must leave room for (its register cap; 0: none)
template <int CPW, int R, int NW, int MB, int EPI>
__global__ void __launch_bounds__(NW * 32, MB) gemv_tiled(
    const __half* __restrict__ W, const int n_rows, const int ld, const int k_len,
    const float* src, const __half* x_in, const float x_scale,
    const float* delta, const int delta_parts, const float* delta_w,
    float* resid_out, const float* norm_w, const float eps,
    float* y,                                      // GELU [n_rows]; PLAIN [gridDim.y, n_rows]
    __half* logits, const float softcap, float* part_v, long long* part_i,
    const long long* suppress, const int* n_suppress
    STAMP_PARAM)
{
    constexpr int S = 32 / R, P = EPI == EPI_GELU ? R / 2 : R;  // outputs a tile
    constexpr bool FOLD = EPI != EPI_PLAIN;
    constexpr int FR = EPI == EPI_FOLD && NW >= 16 ? 1 : 2;  // the fold's float4 slots (`tiled_gemv.fold_slots`)
    static_assert(R >= 2 && R <= 32 && 32 % R == 0, "a tile's rows divide a warp's lanes");
    static_assert(EPI == EPI_GELU || EPI == EPI_PLAIN || EPI == EPI_FOLD, "gate|up, folded plain rows or a slice");
    extern __shared__ float vec[];
    __shared__ float red[32];
    __shared__ float sums[2][NW][R];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, s = lane / R;
    const int CG = k_len / (8 * S), n_tiles = n_rows / P;
    const uint4* Wt = reinterpret_cast<const uint4*>(W) + (size_t)blockIdx.y * n_tiles * CG * 32;
    if (EPI == EPI_PLAIN) y += (size_t)blockIdx.y * n_rows;
    uint4 a[CPW], b[CPW];
    int t = blockIdx.x;
    STAMP(0);
    pdl_trigger();
    tiled_load<CPW, NW>(a, Wt, t, n_tiles, CG);  // in flight during the wait and the fold
    if (FOLD)
        touch_params(src, x_in, delta, delta_w, resid_out, norm_w, y, x_scale, eps, delta_parts, k_len);
    else  // only what the plain vector and the stores read
        keep_param_reads((unsigned long long)src ^ (unsigned long long)y, (unsigned int)k_len, y);
    pdl_wait();  // the input vector's parts are earlier kernels' outputs
    STAMP(1);
    if (FOLD)  // form_vector's fold (the same bits) in FR float4 slots a thread: k_len <= 4 FR x threads
        fold_regs<FR>(vec, red, k_len, k_len >> 2, src, x_in, x_scale, delta, delta_parts, delta_w, resid_out, norm_w,
                     eps);
    else  // this slice of the plain vector
        form_vector<false>(vec, red, k_len, src + (size_t)blockIdx.y * k_len, NULL, 1.f, NULL, 1, NULL, NULL, NULL,
                           0.f);
    int par = 0;
    for (; t < n_tiles; t += gridDim.x) {
        tiled_load<CPW, NW>(b, Wt, t + gridDim.x, n_tiles, CG);  // the next tile's, during this one's sums
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < CPW; ++i) {
            const int cg = i * NW + warp;
            if (cg < CG) acc += dot8(a[i], vec + (cg * S + s) * 8);
        }
#pragma unroll
        for (int o = R; o < 32; o <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane < R) sums[par][warp][lane] = acc;
        __syncthreads();  // sums[par] is written again two tiles on, after every warp has passed the next barrier
        if (warp == 0) {
            float v = 0.f;
#pragma unroll
            for (int w = 0; w < NW; ++w) v += lane < R ? sums[par][w][lane] : 0.f;
            if (EPI == EPI_GELU) {
                const float up = __shfl_down_sync(0xffffffffu, v, P);  // row lane + R/2: gate row lane's up row
                if (lane < P) y[t * P + lane] = gelu_tanh(v) * up;
            } else if (lane < R) {
                y[t * R + lane] = v;
            }
        }
        par ^= 1;
#pragma unroll
        for (int i = 0; i < CPW; ++i) a[i] = b[i];
    }
    STAMP_END();
}

"""
