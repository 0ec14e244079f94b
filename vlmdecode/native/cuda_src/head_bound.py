"""The bounded LM head's two kernels (greedy steps): `head_bound<FLAT8, NQ, RPW, PF, MINB, BITS>` streams an int8
(or 6-bit) copy of the head and bounds every logit, `head_pick<NV>` computes exactly (as `gemv<NV, .., EPI_HEAD>`)
only the rows that can win.

The argument (`native.bounded_head` states it in full and checks it in numpy): row r's exact fp32 dot z_r and
its integer estimate a_r = s_r s_x (q_r . X) (int8 weights, x in 16 bits) differ by at most
E_r = c_r ||x|| + d_r ||x - s_x X|| (c_r, d_r: the row's quantisation error and norm with fp32 rounding, computed at
set-up). With T the largest lower bound a_r - E_r over the ids not suppressed, a row whose softcapped upper bound
g(a_r + E_r) lies more than |g(T)| / 256 below g(T) has an fp16 logit strictly below the winner's, so the argmax
(value and first index) over the other rows is the full head's.

Part of `native.kernels_src.SOURCE`, which concatenates the parts in order; CUDA C++ in a string.
"""

CODE = r"""// the head's softcap as the full head applies it (gemv's EPI_HEAD)
__device__ __forceinline__ float head_cap(const float x, const float softcap) {
    return softcap > 0.f ? softcap * tanhf(x / softcap) : x;
}

__device__ __forceinline__ bool suppressed(const long long r, const long long* suppress, const int ns) {
    bool skip = false;
    for (int q = 0; q < ns; ++q) skip |= suppress[q] == r;
    return skip;
}

// The int8 dot of 16 weights (4 words) with x as X = 256 hi + lo (two int8 planes, the same order): two exact
// int32 sums, one DP4A a word each
__device__ __forceinline__ void dot16_dp4a(const uint4 w, const int4 h, const int4 l, int& sh, int& sl) {
    sh = __dp4a((int)w.x, h.x, sh); sh = __dp4a((int)w.y, h.y, sh); sh = __dp4a((int)w.z, h.z, sh);
    sh = __dp4a((int)w.w, h.w, sh);
    sl = __dp4a((int)w.x, l.x, sl); sl = __dp4a((int)w.y, l.y, sl); sl = __dp4a((int)w.z, l.z, sl);
    sl = __dp4a((int)w.w, l.w, sl);
}

// BITS 6: 16 columns' values u = q + 32 (1 .. 63) from two nibble words (n0: columns 0-7, n1: 8-15; byte b holds column
// b in its low and 4 + b in its high nibble) and a crumb word (byte b, bit pair j: the top two bits of column 4 j + b)
__device__ __forceinline__ uint4 unpack6(const unsigned n0, const unsigned n1, const unsigned c) {
    const unsigned m4 = 0x0F0F0F0Fu, m2 = 0x03030303u;
    return make_uint4((n0 & m4) | ((c & m2) << 4), ((n0 >> 4) & m4) | (((c >> 2) & m2) << 4),
                      (n1 & m4) | (((c >> 4) & m2) << 4), ((n1 >> 4) & m4) | (((c >> 6) & m2) << 4));
}

// Pass 1, over Q [n_rows, k_len] int8 and sc [n_rows] (s_r, c_r, d_r, 0): every block forms the head's input vector
// exactly as gemv<NV, RPW, EPI_HEAD> does (same fold, same block size; block 0 stores it to xvec), rounds it to
// X = rint(x / s_x) in 16 bits (s_x = max|x| / 32639) kept as two int8 planes, and measures ||x||_2 and
// del = ||x - s_x X||_2 (both rounded up). Row r: a_r = s_r s_x (256 q.hi + q.lo) (int32 sums, exact), its bound
// E_r = c_r ||x|| + d_r del; upper[r] = a_r + E_r; each block's largest lower bound a_r - E_r over the ids not
// suppressed -> low[block] (NaN rows are left out of it: their upper bound is NaN, so pass 2 takes them). The
// first row group's weights load before pdl_wait; PF 1: each next group's while this one is reduced (double buffer).
// MINB: blocks an SM the registers must allow (ptxas caps them at 65536 / (256 MINB)); 0: ptxas's own choice.
// BITS 6 (`bounded_head.pack6`): a row is k_len / 2 nibble bytes then k_len / 4 crumb bytes, a lane takes 64 columns
// at a time (two nibble uint4 and one crumb uint4), u = q + 32 is summed and 32 (sum hi, sum lo) taken off; the x
// planes are stored [16-column group g][64-column chunk m] so that a warp's reads of one g are consecutive.
template <bool FLAT8, int NQ, int RPW, int PF, int MINB, int BITS>
__global__ void __launch_bounds__(256, MINB) head_bound(
    const signed char* __restrict__ Q, const float4* __restrict__ sc, const int n_rows, const int k_len,
    const float* src, const float* delta, const int delta_parts, const float* delta_w, const float* norm_w,
    const float eps, float* xvec, float* upper, float* low, const long long* suppress, const int* n_suppress)
{
    extern __shared__ float vec[];  // [k_len] floats, then the planes hi [k_len], lo [k_len] (int8)
    __shared__ float red[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int per_group = nwarps * RPW, n_groups = (n_rows + per_group - 1) / per_group;
    constexpr int NW = BITS == 6 ? 3 : 1, CW = BITS == 6 ? 64 : 16;  // uint4 a lane loads a chunk; its columns
    uint4 w[RPW][NQ][NW], wn[PF ? RPW : 1][NQ][NW];
    auto load = [&](uint4 (&w)[RPW][NQ][NW], const int g) {
#pragma unroll
        for (int i = 0; i < RPW; ++i) {
            const int r = (g * nwarps + warp) * RPW + i;
#pragma unroll
            for (int j = 0; j < NQ; ++j) {
                const int m = lane + 32 * j;
                const bool in = r < n_rows && m * CW < k_len;
                if constexpr (BITS == 6) {
                    const signed char* row = Q + (size_t)r * (3 * k_len / 4);
                    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
                    w[i][j][0] = in ? __ldcs(reinterpret_cast<const uint4*>(row + 32 * m)) : z;
                    w[i][j][1] = in ? __ldcs(reinterpret_cast<const uint4*>(row + 32 * m + 16)) : z;
                    w[i][j][2] = in ? __ldcs(reinterpret_cast<const uint4*>(row + k_len / 2 + 16 * m)) : z;
                } else {
                    w[i][j][0] = in ? __ldcs(reinterpret_cast<const uint4*>(Q + (size_t)r * k_len + m * 16))
                                    : make_uint4(0u, 0u, 0u, 0u);
                }
            }
        }
    };
    pdl_trigger();
    int g = blockIdx.x;
    if (g < n_groups) load(w, g);
    pdl_wait();  // the last layer's residual and down partials
    form_vector<FLAT8>(vec, red, k_len, src, NULL, 1.f, delta, delta_parts, delta_w, NULL, norm_w, eps);
    if (blockIdx.x == 0)
        for (int i = threadIdx.x; i < k_len; i += blockDim.x) xvec[i] = vec[i];
    float ss = 0.f, mx = 0.f;
    for (int i = threadIdx.x; i < k_len; i += blockDim.x) {
        ss = fmaf(vec[i], vec[i], ss);
        mx = fmaxf(mx, fabsf(vec[i]));
    }
    const float xn = sqrtf(block_sum(ss, red)) * 1.001f;  // ||x||_2, rounded up well past fp32's error
    // (the block maxima here stay inline: through common's block_max ptxas spills 172 bytes at 8 bits)
    mx = warp_max(mx);
    __syncthreads();
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    mx = red[0];
    for (int k = 1; k < nwarps; ++k) mx = fmaxf(mx, red[k]);
    // |X| <= 32639, so hi = (X + 128) >> 8 stays in [-128, 127] (lo in [-128, 127]); NaN/inf x: NaN bounds everywhere
    const float s_x = mx > 0.f ? mx / 32639.f : 1.f, inv = 1.f / s_x;
    signed char* xh = reinterpret_cast<signed char*>(vec + k_len);
    signed char* xl = xh + k_len;
    float dd = 0.f, hsum = 0.f, lsum = 0.f;  // (BITS 6: the planes' sums, exact in fp32 below 2^24)
    for (int i = threadIdx.x; i < k_len; i += blockDim.x) {
        const int X = max(-32639, min(32639, __float2int_rn(vec[i] * inv)));
        const int hi = (X + 128) >> 8;
        // BITS 6: column i at byte 16 (g nch + m) + i % 16, g = (i % 64) / 16, m = i / 64, nch = k_len / 64
        const int at = BITS == 6 ? 16 * (((i & 63) >> 4) * (k_len >> 6) + (i >> 6)) + (i & 15) : i;
        xh[at] = (signed char)hi;
        xl[at] = (signed char)(X - 256 * hi);
        if (BITS == 6) {
            hsum += (float)hi;
            lsum += (float)(X - 256 * hi);
        }
        const float r = vec[i] - s_x * (float)X;
        dd = fmaf(r, r, dd);
    }
    // (+ 2^-20 ||x||: r's own fp32 rounding, <= 2 u |x_i| an element)
    const float del = sqrtf(block_sum(dd, red)) * 1.001f + 9.5367431640625e-7f * xn;
    int off_h = 0, off_l = 0;  // BITS 6: 32 x the planes' sums, taken off every row's u sums
    if (BITS == 6) {
        off_h = 32 * (int)block_sum(hsum, red);
        off_l = 32 * (int)block_sum(lsum, red);
    }
    const int4* h4 = reinterpret_cast<const int4*>(xh);
    const int4* l4 = reinterpret_cast<const int4*>(xl);
    const int ns = n_suppress != NULL ? n_suppress[0] : 0;
    float best = -INF_F;
    for (; g < n_groups; g += gridDim.x) {
        if (PF) {
            if (g + (int)gridDim.x < n_groups) load(reinterpret_cast<uint4 (&)[RPW][NQ][NW]>(wn), g + gridDim.x);
        } else if (g != (int)blockIdx.x) {
            load(w, g);
        }
        int sh[RPW], sl[RPW];
#pragma unroll
        for (int i = 0; i < RPW; ++i) sh[i] = sl[i] = 0;
#pragma unroll
        for (int j = 0; j < NQ; ++j) {
            const int m = lane + 32 * j;
            if (m * CW < k_len) {
                if constexpr (BITS == 6) {
                    const int nch = k_len >> 6;
#pragma unroll
                    for (int q = 0; q < 4; ++q) {  // 16-column group q of chunk m
                        const int4 h = h4[q * nch + m], l = l4[q * nch + m];
                        const int c = q & 1 ? 2 : 0;  // nibble words 2q, 2q + 1 of the chunk's 8
#pragma unroll
                        for (int i = 0; i < RPW; ++i) {
                            const uint4 a = w[i][j][q >> 1];
                            const unsigned n0 = c ? a.z : a.x, n1 = c ? a.w : a.y;
                            const uint4 cw = w[i][j][2];
                            const unsigned cr = q == 0 ? cw.x : q == 1 ? cw.y : q == 2 ? cw.z : cw.w;
                            dot16_dp4a(unpack6(n0, n1, cr), h, l, sh[i], sl[i]);
                        }
                    }
                } else {
                    const int4 h = h4[m], l = l4[m];  // x's 16 columns, once for every row
#pragma unroll
                    for (int i = 0; i < RPW; ++i) dot16_dp4a(w[i][j][0], h, l, sh[i], sl[i]);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < RPW; ++i) {
            const int h = __reduce_add_sync(FULL, sh[i]) - off_h, l = __reduce_add_sync(FULL, sl[i]) - off_l;
            const int r = (g * nwarps + warp) * RPW + i;
            if (r < n_rows) {
                const float4 s = sc[r];
                const float a = s.x * (s_x * fmaf(256.f, (float)h, (float)l));
                const float e = fmaf(s.y, xn, s.z * del);
                if (lane == 0) upper[r] = a + e;
                if (!suppressed(r, suppress, ns)) best = fmaxf(best, a - e);
            }
        }
        if (PF) {
#pragma unroll
            for (int i = 0; i < RPW; ++i)
#pragma unroll
                for (int j = 0; j < NQ; ++j)
#pragma unroll
                    for (int v = 0; v < NW; ++v) w[i][j][v] = wn[PF ? i : 0][j][v];
        }
    }
    __syncthreads();
    if (lane == 0) red[warp] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = red[0];
        for (int k = 1; k < nwarps; ++k) m = fmaxf(m, red[k]);
        low[blockIdx.x] = m;
    }
}

// Pass 2: T = max(low[0 .. n_low)); the rows of this block's contiguous range whose softcapped upper bound is not
// below g(T) - |g(T)| / 256 - 1e-6 (NaN bounds included) are computed exactly, with gemv<NV, .., EPI_HEAD>'s loads,
// dot products and warp sum (the same bits), softcapped, rounded to fp16 and picked as it picks: one (max, first
// index) partial a block, NaN when a candidate's logit is NaN/+inf. No logits are stored.
template <int NV>
__global__ void __launch_bounds__(256) head_pick(
    const __half* __restrict__ W, const int n_rows, const int ld, const int k_len, const float* xvec,
    const float* upper, const float* low, const int n_low, const float softcap, float* part_v, long long* part_i,
    const long long* suppress, const int* n_suppress)
{
    extern __shared__ float vec[];
    __shared__ float red[32];
    __shared__ float best_v[32];
    __shared__ long long best_i[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    pdl_trigger();
    pdl_wait();  // head_bound's vector, bounds and block maxima
    for (int i = threadIdx.x; i < k_len; i += blockDim.x) vec[i] = xvec[i];
    float t = -INF_F;
    for (int i = threadIdx.x; i < n_low; i += blockDim.x) t = fmaxf(t, low[i]);
    t = block_max(t, red);
    const float gt = head_cap(t, softcap), th = gt - (fabsf(gt) * (1.f / 256.f) + 1e-6f);
    const int ns = n_suppress != NULL ? n_suppress[0] : 0;
    const int span = ((n_rows + gridDim.x - 1) / gridDim.x + 31) / 32 * 32;
    const int r0 = blockIdx.x * span, r1 = min(n_rows, r0 + span);
    float bv = -INF_F;
    long long bi = NO_INDEX;
    bool bad = false;
    for (int base = r0 + 32 * warp; base < r1; base += 32 * nwarps) {  // 32 rows a warp at a time, ascending
        const int r = base + lane;
        const bool cand = r < r1 && !(head_cap(upper[r], softcap) < th) && !suppressed(r, suppress, ns);
        unsigned mask = __ballot_sync(FULL, cand);
        while (mask) {
            const int row = base + __ffs(mask) - 1;
            mask &= mask - 1;
            uint4 w[NV];
#pragma unroll
            for (int j = 0; j < NV; ++j) {
                const int col = (lane + 32 * j) * 8;
                w[j] = col < k_len ? __ldcs(reinterpret_cast<const uint4*>(W + (size_t)row * ld + col))
                                   : make_uint4(0u, 0u, 0u, 0u);
            }
            float acc = 0.f;
#pragma unroll
            for (int j = 0; j < NV; ++j) {
                const int col = (lane + 32 * j) * 8;
                if (col < k_len) acc += dot8(w[j], vec + col);
            }
            acc = warp_sum(acc);
            const float xv = __half2float(__float2half_rn(head_cap(acc, softcap)));
            if (xv != xv || xv == INF_F) bad = true;
            if (xv > bv || bi == NO_INDEX) { bv = xv; bi = row; }
        }
    }
    block_partial(bv, bi, bad, best_v, best_i, part_v, part_i);
}
"""
