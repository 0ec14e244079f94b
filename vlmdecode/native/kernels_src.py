"""CUDA C++ source of the native decoder's kernels (compiled at run time by `native.kernels` through NVRTC).

Storage fp16, arithmetic fp32. Weights are [out, in] row-major, contiguous along the reduction, so one
warp streams a row with 16-byte loads (uint4 = 8 halves). Every GEMV loads its first rows' weights into
registers BEFORE it forms its input vector, so the vector's prologue (a residual fold and RMSNorm that
each block recomputes from the [H] row) runs while the weights are in flight.

    gemv<NV, RPW, EPI>   y = W x', x' formed by `form_vector`; EPI_PLAIN writes y (split-K partials along
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

// The GEMV's input vector, n floats in shared memory.
//   fold  (norm_w != NULL): r = base + rms(sum_p delta[p]) * delta_w, base = resid_in, or x_in * x_scale
//         when resid_in is NULL; no delta term when delta is NULL. Block (0,0) stores r to resid_out
//         (when not NULL); vec = rms(r) * norm_w. All weights are effective ((1 + w) applied).
//   plain (norm_w == NULL): vec = src[0, n)
__device__ void form_vector(float* vec, float* red, const int n, const float* src, const __half* x_in,
                            const float x_scale, const float* delta, const int delta_parts, const float* delta_w,
                            float* resid_out, const float* norm_w, const float eps) {
    if (norm_w == NULL) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) vec[i] = src[i];
        __syncthreads();
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

template <int NV, int RPW, int EPI>
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
    load_rows<NV, RPW>(w, W, row, row_end, ld, k0, k_len);  // in flight during the prologue
    form_vector(vec, red, k_len, src == NULL ? NULL : src + (norm_w == NULL ? k0 : 0), x_in, x_scale,
                delta, delta_parts, delta_w, resid_out, norm_w, eps);
    float bv = -INF_F;
    long long bi = NO_INDEX;
    bool bad = false;
    const int ns = (EPI == EPI_HEAD && n_suppress != NULL) ? n_suppress[0] : 0;
    for (; g < n_groups; g += gridDim.x) {
        if (g != (int)blockIdx.x) {
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

template <int HD>
__global__ void __launch_bounds__(256) attention(
    const float* __restrict__ qkv, const int nq, const int nkv,   // qkv [(nq + 2 nkv) * HD]: q, k, v
    const float* q_norm, const float* k_norm, const float eps,     // [HD] effective, or NULL
    const float* rope_cos, const float* rope_sin,                 // [max_pos, HD / 2]
    const long long* pos,                                          // [1]: this token's position t
    __half* K, __half* V, const int cap,                           // [nkv, cap, HD], t < cap: row t appended
    const int window, const float scale, const float softcap, const int chunk,  // window 0: all keys
    float* part,                                                   // [nq, gridDim.x, HD + 2]
    int* counter,                                                  // [nkv]: 0 between launches
    float* out)                                                    // [nq * HD]
{
    constexpr int VPL = HD >= 256 ? HD / 256 : 1;  // uint4 per lane per key
    constexpr int LPK = HD / (8 * VPL);           // lanes per key (a power of two)
    constexpr int KPW = 32 / LPK;                 // keys per warp pass
    constexpr int HALF = HD / 2;
    extern __shared__ float sm[];                 // q [grp][HD] | k [HD] | v [HD] | p [grp][chunk]
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
            float* P = part + ((size_t)(g * grp + h) * gridDim.x + c) * (HD + 2);
            P[HD] = m;
            P[HD + 1] = sum;
        }
    }
    __syncthreads();
    // 5. unnormalised p @ V of the chunk, threads over (head, dim)
    for (int e = tid; e < grp * HD; e += blockDim.x) {
        const int h = e / HD, d = e % HD;
        float acc = 0.f;
        for (int i = 0; i < nk; ++i) {
            const int j = j0 + i;
            const float v = j == t ? vs[d] : __half2float(V[base + (size_t)j * HD + d]);
            acc = fmaf(p[h * chunk + i], v, acc);
        }
        part[((size_t)(g * grp + h) * gridDim.x + c) * (HD + 2) + d] = acc;
    }
    // 6. the last block of this KV head to finish combines the chunks and resets the counter
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(counter + g, 1) == nchunks - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int e = tid; e < grp * HD; e += blockDim.x) {
        const int h = e / HD, d = e % HD;
        const float* P = part + (size_t)(g * grp + h) * gridDim.x * (HD + 2);
        float M = -INF_F;
        for (int cc = 0; cc < nchunks; ++cc) M = fmaxf(M, __ldcg(P + (size_t)cc * (HD + 2) + HD));
        float L = 0.f, o = 0.f;
        for (int cc = 0; cc < nchunks; ++cc) {
            const float* Q = P + (size_t)cc * (HD + 2);
            const float wgt = __expf(__ldcg(Q + HD) - M);
            L = fmaf(wgt, __ldcg(Q + HD + 1), L);
            o = fmaf(wgt, __ldcg(Q + d), o);
        }
        out[(size_t)(g * grp + h) * HD + d] = o / L;
    }
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
    extern __shared__ float sm[];                 // q [grp][HD] | k [HD] | v [HD] | p [grp][chunk] | o [grp][HD]
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
    float* os = p + grp * chunk;
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
            float* P = part + ((size_t)(g * grp + h) * gridDim.x + c) * (HD + 2);
            P[HD] = m;
            P[HD + 1] = sum;
        }
    }
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
        part[((size_t)(g * grp + e / HD) * gridDim.x + c) * (HD + 2) + e % HD] = os[e];
    // 6. combine, as `attention`
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(counter + g, 1) == nchunks - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int e = tid; e < grp * HD; e += blockDim.x) {
        const int h = e / HD, d = e % HD;
        const float* P = part + (size_t)(g * grp + h) * gridDim.x * (HD + 2);
        float M = -INF_F;
        for (int cc = 0; cc < nchunks; ++cc) M = fmaxf(M, __ldcg(P + (size_t)cc * (HD + 2) + HD));
        float L = 0.f, o = 0.f;
        for (int cc = 0; cc < nchunks; ++cc) {
            const float* Q = P + (size_t)cc * (HD + 2);
            const float wgt = __expf(__ldcg(Q + HD) - M);
            L = fmaf(wgt, __ldcg(Q + HD + 1), L);
            o = fmaf(wgt, __ldcg(Q + d), o);
        }
        out[(size_t)(g * grp + h) * HD + d] = o / L;
    }
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
