"""CUDA C++ source of the native decoder's kernels (compiled at run time by `native.kernels` through NVRTC).

Storage fp16, arithmetic fp32. Weights are [out, in] row-major, contiguous along the reduction, so one
warp streams a row with 16-byte loads (uint4 = 8 halves). Every GEMV loads its first rows' weights into
registers BEFORE it forms its input vector, so the vector's prologue (a residual fold and RMSNorm that
each block recomputes from the [H] row) runs while the weights are in flight.

    gemv<NV, RPW, EPI, PF>  y = W x', x' formed by `form_vector`; EPI_PLAIN writes y (split-K partials along
                         gridDim.y), EPI_GELU writes gelu_tanh(W[j] x') * (W[j + n] x') for the packed
                         gate|up rows (RPW / 2 pairs a warp), EPI_HEAD writes fp16 logits (optional
                         softcap) and one (max, first index) partial per block over the ids not
                         suppressed, NaN when one of those logits is NaN/+inf (device mode's semantics)
    attention<HD>        q/k RMSNorm + half-split rotary + KV append at position pos[0] + one chunk of the
                         visible keys (sliding window, scale, optional softcap) per block; the last block
                         of a KV head to finish combines the chunks (a counter it resets, no extra launch)
    attention_pf<HD, KW> the same with each warp's K and V rows loaded into registers first (KW key passes)
    advance              the token (argmax over the partials, or one sampled elsewhere) -> its embedding
                         row into the step's input, the ring of ids the host reads, the next position

Not here: launch geometry and buffers (`native.kernels`), the step's order (`native.decoder`).
"""

SOURCE = r"""
#include <cuda_fp16.h>

#define INF_F __int_as_float(0x7f800000)
#define NAN_F __int_as_float(0x7fc00000)
#define NO_INDEX 0x7fffffffffffffffLL
#define FULL 0xffffffffu

enum { EPI_PLAIN = 0, EPI_GELU = 1, EPI_HEAD = 2 };

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
    return v;
}

// every thread gets the block's sum; red: 32 floats of shared memory
__device__ __forceinline__ float block_sum(float v, float* red) {
    v = warp_sum(v);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();  // red may still be read by a previous call
    if (l == 0) red[w] = v;
    __syncthreads();
    return warp_sum(l < nw ? red[l] : 0.f);
}

// (a, ia) <- the better of (a, ia), (b, ib): NaN wins (reported), then larger, then the smaller index
__device__ __forceinline__ void better(float& a, long long& ia, float b, long long ib) {
    if (b != b || (a == a && (b > a || (b == a && ib < ia)))) { a = b; ia = ib; }
}

__device__ __forceinline__ float gelu_tanh(float x) {
    return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float dot8(const uint4 w, const float* x) {
    const __half2* h = reinterpret_cast<const __half2*>(&w);
    const float4 a = *reinterpret_cast<const float4*>(x);
    const float4 b = *reinterpret_cast<const float4*>(x + 4);
    const float2 f0 = __half22float2(h[0]), f1 = __half22float2(h[1]);
    const float2 f2 = __half22float2(h[2]), f3 = __half22float2(h[3]);
    float s = f0.x * a.x;
    s = fmaf(f0.y, a.y, s); s = fmaf(f1.x, a.z, s); s = fmaf(f1.y, a.w, s);
    s = fmaf(f2.x, b.x, s); s = fmaf(f2.y, b.y, s); s = fmaf(f3.x, b.z, s); s = fmaf(f3.y, b.w, s);
    return s;
}

#define FOLD_R 3  // float4 slots per thread of the register fold: n <= 12 x threads (1152 at >= 96 threads)

__device__ __forceinline__ float4 f4_fma(const float4 a, const float s, const float4 b, const float4 c) {
    return make_float4(fmaf(a.x * s, b.x, c.x), fmaf(a.y * s, b.y, c.y),
                       fmaf(a.z * s, b.z, c.z), fmaf(a.w * s, b.w, c.w));
}

__device__ __forceinline__ float f4_dot(const float4 a) { return a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w; }

// form_vector's fold with n / 4 <= FOLD_R x threads: this thread's float4s of base, delta (summed over
// parts), delta_w and norm_w are all loaded before the first reduction (one L2 round trip, not one per pass)
__device__ void fold_regs(float* vec, float* red, const int n, const int n4, const float* src, const __half* x_in,
                          const float x_scale, const float* delta, const int delta_parts, const float* delta_w,
                          float* resid_out, const float* norm_w, const float eps) {
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    float4 b[FOLD_R], d[FOLD_R], dw[FOLD_R], nw[FOLD_R];
#pragma unroll
    for (int j = 0; j < FOLD_R; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        b[j] = z; d[j] = z; dw[j] = z; nw[j] = z;
        if (i < n4) {
            if (src != NULL) {
                b[j] = reinterpret_cast<const float4*>(src)[i];
            } else {
                const uint2 u = reinterpret_cast<const uint2*>(x_in)[i];
                const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
                const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
                b[j] = make_float4(lo.x * x_scale, lo.y * x_scale, hi.x * x_scale, hi.y * x_scale);
            }
            nw[j] = reinterpret_cast<const float4*>(norm_w)[i];
            if (delta != NULL) {
                dw[j] = reinterpret_cast<const float4*>(delta_w)[i];
#pragma unroll 8
                for (int p = 0; p < delta_parts; ++p) {
                    const float4 v = reinterpret_cast<const float4*>(delta + (size_t)p * n)[i];
                    d[j].x += v.x; d[j].y += v.y; d[j].z += v.z; d[j].w += v.w;
                }
            }
        }
    }
    float inv_d = 0.f;
    if (delta != NULL) {
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < FOLD_R; ++j) ss += f4_dot(d[j]);
        inv_d = rsqrtf(block_sum(ss, red) / n + eps);
    }
    const bool store = resid_out != NULL && blockIdx.x == 0 && blockIdx.y == 0;
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < FOLD_R; ++j) {
        b[j] = f4_fma(d[j], inv_d, dw[j], b[j]);  // zero delta / delta_w when there is no delta term
        ss += f4_dot(b[j]);
        const int i = threadIdx.x + j * blockDim.x;
        if (store && i < n4) reinterpret_cast<float4*>(resid_out)[i] = b[j];
    }
    const float inv = rsqrtf(block_sum(ss, red) / n + eps);
#pragma unroll
    for (int j = 0; j < FOLD_R; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < n4) reinterpret_cast<float4*>(vec)[i] = f4_fma(b[j], inv, nw[j], z);
    }
    __syncthreads();
}

// The GEMV's input vector, n floats in shared memory.
//   fold  (norm_w != NULL): r = base + rms(sum_p delta[p]) * delta_w, base = resid_in, or x_in * x_scale
//         when resid_in is NULL; no delta term when delta is NULL. Block (0,0) stores r to resid_out
//         (when not NULL); vec = rms(r) * norm_w. All weights are effective ((1 + w) applied).
//   plain (norm_w == NULL): vec = src[0, n)
__device__ void form_vector(float* vec, float* red, const int n, const float* src, const __half* x_in,
                            const float x_scale, const float* delta, const int delta_parts, const float* delta_w,
                            float* resid_out, const float* norm_w, const float eps) {
    const int n4 = n >> 2;  // n % 8 == 0: float4 / 4-half loads stay aligned
    if (norm_w == NULL) {
        for (int i = threadIdx.x; i < n4; i += blockDim.x)
            reinterpret_cast<float4*>(vec)[i] = reinterpret_cast<const float4*>(src)[i];
        __syncthreads();
        return;
    }
    if (n4 <= FOLD_R * (int)blockDim.x) {  // every load of the fold in flight at once, 2 block reductions
        fold_regs(vec, red, n, n4, src, x_in, x_scale, delta, delta_parts, delta_w, resid_out, norm_w, eps);
        return;
    }
    float inv_d = 0.f;
    if (delta != NULL) {
        float ss = 0.f;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            float d = 0.f;
            for (int p = 0; p < delta_parts; ++p) d += delta[p * n + i];
            vec[i] = d;
            ss += d * d;
        }
        inv_d = rsqrtf(block_sum(ss, red) / n + eps);
    }
    const bool store = resid_out != NULL && blockIdx.x == 0 && blockIdx.y == 0;
    float ss = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {  // each thread reads back only what it wrote
        float r = src != NULL ? src[i] : __half2float(x_in[i]) * x_scale;
        if (delta != NULL) r += vec[i] * inv_d * delta_w[i];
        vec[i] = r;
        ss += r * r;
        if (store) resid_out[i] = r;
    }
    const float inv = rsqrtf(block_sum(ss, red) / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) vec[i] *= inv * norm_w[i];
    __syncthreads();
}

// rows of one warp in group g; EPI_GELU: RPW / 2 gate rows j.. and their up rows j + n_rows..
template <int RPW, int EPI>
__device__ __forceinline__ void warp_rows(int (&row)[RPW], const int g, const int n_rows) {
    const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (EPI == EPI_GELU) {
        constexpr int P = RPW / 2;
        const int j = (g * nwarps + warp) * P;
#pragma unroll
        for (int i = 0; i < P; ++i) {
            row[i] = j + i;
            row[P + i] = j + i + n_rows;
        }
    } else {
#pragma unroll
        for (int i = 0; i < RPW; ++i) row[i] = (g * nwarps + warp) * RPW + i;
    }
}

template <int NV, int RPW>
__device__ __forceinline__ void load_rows(uint4 (&w)[RPW][NV], const __half* W, const int (&row)[RPW],
                                          const int row_end, const int ld, const int k0, const int k_len) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < RPW; ++i)
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            const int col = (lane + 32 * j) * 8;
            w[i][j] = (row[i] < row_end && col < k_len)
                ? __ldcs(reinterpret_cast<const uint4*>(W + (size_t)row[i] * ld + k0 + col))
                : make_uint4(0u, 0u, 0u, 0u);
        }
}

template <int NV, int RPW, int EPI, int PF>
__global__ void __launch_bounds__(256) gemv(
    const __half* __restrict__ W, const int n_rows, const int ld, const int k_len,
    const float* src, const __half* x_in, const float x_scale,
    const float* delta, const int delta_parts, const float* delta_w,
    float* resid_out, const float* norm_w, const float eps,
    float* y,                                      // PLAIN [gridDim.y, n_rows]; GELU [n_rows]
    __half* logits, const float softcap, float* part_v, long long* part_i,  // HEAD
    const long long* suppress, const int* n_suppress)  // HEAD: ids the argmax skips ([n_suppress[0]], or NULL)
{
    extern __shared__ float vec[];
    __shared__ float red[32];
    __shared__ float best_v[32];
    __shared__ long long best_i[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int k0 = blockIdx.y * k_len;
    static_assert(EPI != EPI_GELU || RPW % 2 == 0, "GELU rows come in (gate, up) pairs");
    const int per_group = nwarps * (EPI == EPI_GELU ? RPW / 2 : RPW);
    const int n_groups = (n_rows + per_group - 1) / per_group;
    const int row_end = EPI == EPI_GELU ? 2 * n_rows : n_rows;
    int row[RPW];
    uint4 w[RPW][NV];
    int g = blockIdx.x;
    warp_rows<RPW, EPI>(row, g, n_rows);
    if (PF) load_rows<NV, RPW>(w, W, row, row_end, ld, k0, k_len);  // in flight during the prologue
    form_vector(vec, red, k_len, src == NULL ? NULL : src + (norm_w == NULL ? k0 : 0), x_in, x_scale,
                delta, delta_parts, delta_w, resid_out, norm_w, eps);
    float bv = -INF_F;
    long long bi = NO_INDEX;
    bool bad = false;
    const int ns = (EPI == EPI_HEAD && n_suppress != NULL) ? n_suppress[0] : 0;
    for (; g < n_groups; g += gridDim.x) {
        if (!PF || g != (int)blockIdx.x) {  // PF 0: fewer live registers in the prologue, more blocks an SM
            warp_rows<RPW, EPI>(row, g, n_rows);
            load_rows<NV, RPW>(w, W, row, row_end, ld, k0, k_len);
        }
        float acc[RPW];
#pragma unroll
        for (int i = 0; i < RPW; ++i) {
            acc[i] = 0.f;
#pragma unroll
            for (int j = 0; j < NV; ++j) {
                const int col = (lane + 32 * j) * 8;
                if (col < k_len) acc[i] += dot8(w[i][j], vec + col);
            }
            acc[i] = warp_sum(acc[i]);
        }
        if (EPI == EPI_GELU) {
#pragma unroll
            for (int i = 0; i < RPW / 2; ++i)
                if (lane == 0 && row[i] < n_rows) y[row[i]] = gelu_tanh(acc[i]) * acc[RPW / 2 + i];
        } else if (EPI == EPI_PLAIN) {
#pragma unroll
            for (int i = 0; i < RPW; ++i)
                if (lane == 0 && row[i] < n_rows) y[(size_t)blockIdx.y * n_rows + row[i]] = acc[i];
        } else {
#pragma unroll
            for (int i = 0; i < RPW; ++i) {
                const int r = row[i];
                float x = acc[i];
                if (softcap > 0.f) x = softcap * tanhf(x / softcap);
                const __half h = __float2half_rn(x);
                if (lane == 0 && r < n_rows) logits[r] = h;
                bool skip = r >= n_rows;  // a suppressed id is never picked nor checked (device mode's argmax)
                for (int q = 0; q < ns; ++q) skip |= suppress[q] == r;
                const float xv = __half2float(h);  // pick on the stored logit, as device mode does
                if (!skip && (xv != xv || xv == INF_F)) bad = true;
                if (!skip && (xv > bv || bi == NO_INDEX)) { bv = xv; bi = r; }  // rows ascend within a warp
            }
        }
    }
    if (EPI == EPI_HEAD) {
        if (lane == 0) { best_v[warp] = bad ? NAN_F : bv; best_i[warp] = bi; }
        __syncthreads();
        if (threadIdx.x == 0) {
            float a = best_v[0];
            long long ia = best_i[0];
            for (int k = 1; k < nwarps; ++k) better(a, ia, best_v[k], best_i[k]);
            part_v[blockIdx.x] = a;
            part_i[blockIdx.x] = ia;
        }
    }
}

// part, nq * gridDim.x * (HD + 2) floats: the chunks' unnormalised outputs o [nq][gridDim.x][HD] (rows
// 16-byte aligned for the combine's float4 loads), then their (max, sum) pairs ml [nq][gridDim.x][2]
template <int HD>
__device__ __forceinline__ float* part_o(float* part, const int head, const int c) {
    return part + ((size_t)head * gridDim.x + c) * HD;
}

template <int HD>
__device__ __forceinline__ float* part_ml(float* part, const int nq, const int head, const int c) {
    return part + (size_t)nq * gridDim.x * HD + ((size_t)head * gridDim.x + c) * 2;
}

// The last block of KV head g: out[h] = sum_c e^(m_c - M) o_c / sum_c e^(m_c - M) l_c over the nchunks
// partials of each of its grp heads. One warp a head forms the chunk weights in cw [grp][nchunks] (lanes
// over chunks), then each thread sums float4s of o over the chunks, 8 chunks' loads in flight at once.
// Softmax of one chunk's scores p[h * chunk + i] (i < nk) per head of the group, one warp a head: p becomes
// exp(s - m), and (m, sum) go to the chunk's partial for combine_chunks. Shared by both attention kernels.
template <int HD>
__device__ __forceinline__ void chunk_softmax(float* p, float* part, const int nq, const int g, const int grp,
                                              const int c, const int chunk, const int nk, const int warp,
                                              const int nwarps, const int lane) {
    for (int h = warp; h < grp; h += nwarps) {
        float m = -INF_F;
        for (int i = lane; i < nk; i += 32) m = fmaxf(m, p[h * chunk + i]);
        m = warp_max(m);
        float sum = 0.f;
        for (int i = lane; i < nk; i += 32) {
            const float e = __expf(p[h * chunk + i] - m);
            p[h * chunk + i] = e;
            sum += e;
        }
        sum = warp_sum(sum);
        if (lane == 0) {
            float* ml = part_ml<HD>(part, nq, g * grp + h, c);
            ml[0] = m;
            ml[1] = sum;
        }
    }
}

template <int HD>
__device__ void combine_chunks(float* part, const int nq, const int g, const int grp, const int nchunks,
                               float* cw, float* out) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    for (int h = warp; h < grp; h += nwarps) {
        float M = -INF_F;
        for (int cc = lane; cc < nchunks; cc += 32) M = fmaxf(M, __ldcg(part_ml<HD>(part, nq, g * grp + h, cc)));
        M = warp_max(M);
        float L = 0.f;
        for (int cc = lane; cc < nchunks; cc += 32) {
            const float* ml = part_ml<HD>(part, nq, g * grp + h, cc);
            const float w = __expf(__ldcg(ml) - M);
            cw[h * nchunks + cc] = w;
            L = fmaf(w, __ldcg(ml + 1), L);
        }
        L = warp_sum(L);
        for (int cc = lane; cc < nchunks; cc += 32) cw[h * nchunks + cc] /= L;
    }
    __syncthreads();
    constexpr int Q = HD / 4;  // float4s a head
    for (int e = tid; e < grp * Q; e += blockDim.x) {
        const int h = e / Q, d4 = e % Q;
        const float4* P = reinterpret_cast<const float4*>(part_o<HD>(part, g * grp + h, 0)) + d4;
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
        for (int cc = 0; cc < nchunks; ++cc) {
            const float4 v = __ldcg(P + (size_t)cc * Q);
            const float w = cw[h * nchunks + cc];
            o.x = fmaf(w, v.x, o.x); o.y = fmaf(w, v.y, o.y); o.z = fmaf(w, v.z, o.z); o.w = fmaf(w, v.w, o.w);
        }
        reinterpret_cast<float4*>(out + (size_t)(g * grp + h) * HD)[d4] = o;
    }
}

template <int HD>
__global__ void __launch_bounds__(256) attention(
    const float* __restrict__ qkv, const int nq, const int nkv,   // qkv [(nq + 2 nkv) * HD]: q, k, v
    const float* q_norm, const float* k_norm, const float eps,     // [HD] effective, or NULL
    const float* rope_cos, const float* rope_sin,                 // [max_pos, HD / 2]
    const long long* pos,                                          // [1]: this token's position t
    __half* K, __half* V, const int cap,                           // [nkv, cap, HD], t < cap: row t appended
    const int window, const float scale, const float softcap, const int chunk,  // window 0: all keys
    float* part,                                                   // o [nq, gridDim.x, HD] | ml [nq, gridDim.x, 2]
    int* counter,                                                  // [nkv]: 0 between launches
    float* out)                                                    // [nq * HD]
{
    constexpr int VPL = HD >= 256 ? HD / 256 : 1;  // uint4 per lane per key
    constexpr int LPK = HD / (8 * VPL);           // lanes per key (a power of two)
    constexpr int KPW = 32 / LPK;                 // keys per warp pass
    constexpr int HALF = HD / 2;
    extern __shared__ float sm[];                 // q [grp][HD] | k [HD] | v [HD] | p [grp][max(chunk, nchunks)]
    __shared__ int last;
    const int grp = nq / nkv, g = blockIdx.y, c = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    const int t = (int)pos[0];  // positions fit in 32 bits (64-bit division would be a called routine)
    const int lo = window > 0 ? max(0, t - window + 1) : 0;
    const int nchunks = (t - lo + chunk) / chunk;  // ceil((t - lo + 1) / chunk)
    if (c >= nchunks) return;                            // not counted: the combine waits for nchunks
    float* qs = sm;
    float* ks = qs + grp * HD;
    float* vs = ks + HD;
    float* p = vs + HD;
    const int j0 = lo + c * chunk;
    const int nk = min(chunk, t + 1 - j0);

    // 1. this group's q heads and the new k, RMSNorm'd per head (one warp a row); v as is
    for (int r = warp; r <= grp; r += nwarps) {
        const float* s = r < grp ? qkv + (size_t)(g * grp + r) * HD : qkv + (size_t)(nq + g) * HD;
        const float* nw = r < grp ? q_norm : k_norm;
        float* d = r < grp ? qs + r * HD : ks;
        float ss = 0.f;
        for (int i = lane; i < HD; i += 32) { const float x = s[i]; d[i] = x; ss += x * x; }
        if (nw != NULL) {
            const float inv = rsqrtf(warp_sum(ss) / HD + eps);
            for (int i = lane; i < HD; i += 32) d[i] *= inv * nw[i];
        }
    }
    for (int i = tid; i < HD; i += blockDim.x)
        vs[i] = __half2float(__float2half_rn(qkv[(size_t)(nq + nkv + g) * HD + i]));  // as the cache holds it
    __syncthreads();
    // 2. rotary (half-split) at t; k rounded to fp16 as the cache holds it
    const float* cs = rope_cos + (size_t)t * HALF;
    const float* sn = rope_sin + (size_t)t * HALF;
    for (int e = tid; e < (grp + 1) * HALF; e += blockDim.x) {
        const int r = e / HALF, i = e % HALF;
        float* x = r < grp ? qs + r * HD : ks;
        const float a = x[i], b = x[i + HALF];
        float ra = a * cs[i] - b * sn[i], rb = b * cs[i] + a * sn[i];
        if (r == grp) { ra = __half2float(__float2half_rn(ra)); rb = __half2float(__float2half_rn(rb)); }
        x[i] = ra;
        x[i + HALF] = rb;
    }
    __syncthreads();
    const size_t base = (size_t)g * cap * HD;
    if (c == nchunks - 1)  // the block holding key t appends it; no block of this launch reads row t
        for (int i = tid; i < HD; i += blockDim.x) {
            K[base + (size_t)t * HD + i] = __float2half_rn(ks[i]);
            V[base + (size_t)t * HD + i] = __float2half_rn(vs[i]);
        }

    // 3. scores of this chunk's keys: LPK lanes a key, KPW keys a warp pass
    const int sub = lane / LPK, l = lane % LPK;
#pragma unroll 4
    for (int b0 = warp * KPW; b0 < nk; b0 += nwarps * KPW) {  // warp-uniform bound: shuffles stay full
        const int kk = b0 + sub;
        const int j = j0 + kk;
        float kf[8 * VPL];
        if (kk < nk && j != t) {
#pragma unroll
            for (int v = 0; v < VPL; ++v) {
                const uint4 u = *reinterpret_cast<const uint4*>(K + base + (size_t)j * HD + (l + LPK * v) * 8);
                const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 f = __half22float2(h[e]);
                    kf[8 * v + 2 * e] = f.x;
                    kf[8 * v + 2 * e + 1] = f.y;
                }
            }
        } else {
#pragma unroll
            for (int v = 0; v < VPL; ++v)
#pragma unroll
                for (int e = 0; e < 8; ++e) kf[8 * v + e] = kk < nk ? ks[(l + LPK * v) * 8 + e] : 0.f;
        }
        for (int h = 0; h < grp; ++h) {
            float s = 0.f;
#pragma unroll
            for (int v = 0; v < VPL; ++v)
#pragma unroll
                for (int e = 0; e < 8; ++e) s = fmaf(kf[8 * v + e], qs[h * HD + (l + LPK * v) * 8 + e], s);
#pragma unroll
            for (int o = LPK / 2; o > 0; o >>= 1) s += __shfl_xor_sync(FULL, s, o);
            s *= scale;
            if (softcap > 0.f) s = softcap * tanhf(s / softcap);
            if (l == 0 && kk < nk) p[h * chunk + kk] = s;
        }
    }
    __syncthreads();
    // 4. softmax over the chunk per head (one warp a head): max, exp, sum
    chunk_softmax<HD>(p, part, nq, g, grp, c, chunk, nk, warp, nwarps, lane);
    __syncthreads();
    // 5. unnormalised p @ V of the chunk, threads over (head, dim)
    for (int d = tid; d < HD; d += blockDim.x)
        for (int h0 = 0; h0 < grp; h0 += 4) {  // each V element loaded once per 4 heads
            float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 8
            for (int i = 0; i < nk; ++i) {
                const int j = j0 + i;
                const float v = j == t ? vs[d] : __half2float(V[base + (size_t)j * HD + d]);
#pragma unroll
                for (int hh = 0; hh < 4; ++hh)
                    if (h0 + hh < grp) acc[hh] = fmaf(p[(h0 + hh) * chunk + i], v, acc[hh]);
            }
#pragma unroll
            for (int hh = 0; hh < 4; ++hh)
                if (h0 + hh < grp) part_o<HD>(part, g * grp + h0 + hh, c)[d] = acc[hh];
        }
    // 6. the last block of this KV head to finish combines the chunks and resets the counter
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(counter + g, 1) == nchunks - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    combine_chunks<HD>(part, nq, g, grp, nchunks, p, out);
    if (tid == 0) counter[g] = 0;
}

// attention with this warp's keys AND values loaded into registers before anything else (KW passes of
// KPW keys a warp: chunk = KW * warps * KPW keys a block), p @ V from those registers (shared-memory
// atomics across warps). Same arguments, math and combine as `attention`.
template <int HD, int KW>
__global__ void __launch_bounds__(256) attention_pf(
    const float* __restrict__ qkv, const int nq, const int nkv,
    const float* q_norm, const float* k_norm, const float eps,
    const float* rope_cos, const float* rope_sin, const long long* pos,
    __half* K, __half* V, const int cap,
    const int window, const float scale, const float softcap, const int chunk,
    float* part, int* counter, float* out)
{
    constexpr int VPL = HD >= 256 ? HD / 256 : 1;
    constexpr int LPK = HD / (8 * VPL);
    constexpr int KPW = 32 / LPK;
    constexpr int HALF = HD / 2;
    extern __shared__ float sm[];  // q [grp][HD] | k [HD] | v [HD] | p [grp][max(chunk, nchunks)] | o [grp][HD]
    __shared__ int last;
    const int grp = nq / nkv, g = blockIdx.y, c = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    const int t = (int)pos[0];
    const int lo = window > 0 ? max(0, t - window + 1) : 0;
    const int nchunks = (t - lo + chunk) / chunk;
    if (c >= nchunks) return;
    float* qs = sm;
    float* ks = qs + grp * HD;
    float* vs = ks + HD;
    float* p = vs + HD;
    float* os = p + grp * max(chunk, (int)gridDim.x);  // p also holds the combine weights [grp][nchunks]
    const int j0 = lo + c * chunk;
    const int nk = min(chunk, t + 1 - j0);
    const size_t base = (size_t)g * cap * HD;
    const int sub = lane / LPK, l = lane % LPK;
    // 0. this warp's cached keys and values, in flight while q/k are normalised and rotated
    uint4 kr[KW][VPL], vr[KW][VPL];
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) {
        const int kk = (kw * nwarps + warp) * KPW + sub, j = j0 + kk;
        const bool cached = kk < nk && j != t;
#pragma unroll
        for (int v = 0; v < VPL; ++v) {
            const size_t at = base + (size_t)j * HD + (l + LPK * v) * 8;
            kr[kw][v] = cached ? *reinterpret_cast<const uint4*>(K + at) : make_uint4(0u, 0u, 0u, 0u);
            vr[kw][v] = cached ? *reinterpret_cast<const uint4*>(V + at) : make_uint4(0u, 0u, 0u, 0u);
        }
    }
    for (int i = tid; i < grp * HD; i += blockDim.x) os[i] = 0.f;
    // 1-2. as `attention`: q heads and k normalised, v as the cache holds it, rotary at t
    for (int r = warp; r <= grp; r += nwarps) {
        const float* s = r < grp ? qkv + (size_t)(g * grp + r) * HD : qkv + (size_t)(nq + g) * HD;
        const float* nw = r < grp ? q_norm : k_norm;
        float* d = r < grp ? qs + r * HD : ks;
        float ss = 0.f;
        for (int i = lane; i < HD; i += 32) { const float x = s[i]; d[i] = x; ss += x * x; }
        if (nw != NULL) {
            const float inv = rsqrtf(warp_sum(ss) / HD + eps);
            for (int i = lane; i < HD; i += 32) d[i] *= inv * nw[i];
        }
    }
    for (int i = tid; i < HD; i += blockDim.x)
        vs[i] = __half2float(__float2half_rn(qkv[(size_t)(nq + nkv + g) * HD + i]));
    __syncthreads();
    const float* cs = rope_cos + (size_t)t * HALF;
    const float* sn = rope_sin + (size_t)t * HALF;
    for (int e = tid; e < (grp + 1) * HALF; e += blockDim.x) {
        const int r = e / HALF, i = e % HALF;
        float* x = r < grp ? qs + r * HD : ks;
        const float a = x[i], b = x[i + HALF];
        float ra = a * cs[i] - b * sn[i], rb = b * cs[i] + a * sn[i];
        if (r == grp) { ra = __half2float(__float2half_rn(ra)); rb = __half2float(__float2half_rn(rb)); }
        x[i] = ra;
        x[i + HALF] = rb;
    }
    __syncthreads();
    if (c == nchunks - 1)
        for (int i = tid; i < HD; i += blockDim.x) {
            K[base + (size_t)t * HD + i] = __float2half_rn(ks[i]);
            V[base + (size_t)t * HD + i] = __float2half_rn(vs[i]);
        }
    // 3. scores from the registers (key t from shared memory)
#pragma unroll
    for (int kw = 0; kw < KW; ++kw) {
        const int kk = (kw * nwarps + warp) * KPW + sub, j = j0 + kk;
        float kf[8 * VPL];
#pragma unroll
        for (int v = 0; v < VPL; ++v) {
            const __half2* h2 = reinterpret_cast<const __half2*>(&kr[kw][v]);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float2 f = __half22float2(h2[e]);
                kf[8 * v + 2 * e] = f.x;
                kf[8 * v + 2 * e + 1] = f.y;
            }
            if (kk < nk && j == t)
#pragma unroll
                for (int e = 0; e < 8; ++e) kf[8 * v + e] = ks[(l + LPK * v) * 8 + e];
        }
        for (int h = 0; h < grp; ++h) {
            float s = 0.f;
#pragma unroll
            for (int v = 0; v < VPL; ++v)
#pragma unroll
                for (int e = 0; e < 8; ++e) s = fmaf(kf[8 * v + e], qs[h * HD + (l + LPK * v) * 8 + e], s);
#pragma unroll
            for (int o = LPK / 2; o > 0; o >>= 1) s += __shfl_xor_sync(FULL, s, o);
            s *= scale;
            if (softcap > 0.f) s = softcap * tanhf(s / softcap);
            if (l == 0 && kk < nk) p[h * chunk + kk] = s;
        }
    }
    __syncthreads();
    // 4. softmax over the chunk per head, as `attention`
    chunk_softmax<HD>(p, part, nq, g, grp, c, chunk, nk, warp, nwarps, lane);
    __syncthreads();
    // 5. p @ V from the registers: sum over this lane's keys, then its warp's key groups, then the warps
    for (int h = 0; h < grp; ++h) {
        float acc[8 * VPL];
#pragma unroll
        for (int e = 0; e < 8 * VPL; ++e) acc[e] = 0.f;
#pragma unroll
        for (int kw = 0; kw < KW; ++kw) {
            const int kk = (kw * nwarps + warp) * KPW + sub, j = j0 + kk;
            const float w = kk < nk ? p[h * chunk + kk] : 0.f;
#pragma unroll
            for (int v = 0; v < VPL; ++v) {
                const __half2* h2 = reinterpret_cast<const __half2*>(&vr[kw][v]);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float2 f = __half22float2(h2[e]);
                    if (kk < nk && j == t) {
                        const int d = (l + LPK * v) * 8 + 2 * e;
                        f = make_float2(vs[d], vs[d + 1]);
                    }
                    acc[8 * v + 2 * e] = fmaf(w, f.x, acc[8 * v + 2 * e]);
                    acc[8 * v + 2 * e + 1] = fmaf(w, f.y, acc[8 * v + 2 * e + 1]);
                }
            }
        }
#pragma unroll
        for (int e = 0; e < 8 * VPL; ++e)
#pragma unroll
            for (int o = LPK; o < 32; o <<= 1) acc[e] += __shfl_xor_sync(FULL, acc[e], o);
        if (sub == 0)
#pragma unroll
            for (int v = 0; v < VPL; ++v)
#pragma unroll
                for (int e = 0; e < 8; ++e) atomicAdd(os + h * HD + (l + LPK * v) * 8 + e, acc[8 * v + e]);
    }
    __syncthreads();
    for (int e = tid; e < grp * HD; e += blockDim.x)
        part_o<HD>(part, g * grp + e / HD, c)[e % HD] = os[e];
    // 6. combine, as `attention`
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(counter + g, 1) == nchunks - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    combine_chunks<HD>(part, nq, g, grp, nchunks, p, out);
    if (tid == 0) counter[g] = 0;
}

// One block of 1024 threads. The token: argmax over nparts (max, first index) partials, or given[0].
// Nothing to pick (a NaN partial: NaN/+inf logits; or every logit -inf; or given -1) -> ring gets -1 and
// nothing else is written (sampling.check_finite's rule, as device mode).
extern "C" __global__ void __launch_bounds__(1024) advance(
    const float* part_v, const long long* part_i, const int nparts, const long long* given,
    const __half* table, const int H, __half* x_out,  // [V, H] rows -> the step's input [H]
    long long* ring, const int ring_len, long long* n_dev, long long* pos, long long* t_dev)
{
    __shared__ float v[1024];
    __shared__ long long idx[1024];
    __shared__ long long tok;
    const int tid = threadIdx.x;
    if (given == NULL) {
        float a = -INF_F;
        long long ia = NO_INDEX;
        for (int q = tid; q < nparts; q += blockDim.x) better(a, ia, part_v[q], part_i[q]);
        v[tid] = a;
        idx[tid] = ia;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (tid < s) {
                a = v[tid]; ia = idx[tid];
                better(a, ia, v[tid + s], idx[tid + s]);
                v[tid] = a; idx[tid] = ia;
            }
            __syncthreads();
        }
        if (tid == 0) tok = (v[0] != v[0] || v[0] == -INF_F) ? -1 : idx[0];  // NaN/+inf, or every logit -inf
    } else if (tid == 0) {
        tok = given[0];
    }
    __syncthreads();
    if (tok >= 0)
        for (int h = tid; h < H; h += blockDim.x) x_out[h] = table[tok * H + h];
    if (tid == 0) {
        const long long n = n_dev[0];
        ring[n % ring_len] = tok < 0 ? -1 : tok;
        n_dev[0] = n + 1;
        if (tok >= 0) { const long long t = t_dev[0]; pos[0] = t; t_dev[0] = t + 1; }
    }
}
"""
