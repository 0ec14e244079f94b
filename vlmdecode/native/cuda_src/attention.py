"""The native decode-attention kernel `attention<HD>` (q/k norm, rotary, KV append, one chunk of keys per block)
and its chunk softmax / combine: the chunked baseline that `attention_cl` (attn_split) is tested against.

Part of `native.kernels_src.SOURCE`, which concatenates the parts in order; CUDA C++ in a string.
"""

CODE = r"""// part, nq * gridDim.x * (HD + 2) floats: the chunks' unnormalised outputs o [nq][gridDim.x][HD] (rows
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
// exp(s - m), and (m, sum) go to the chunk's partial for combine_chunks.
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
    pdl_trigger();
    pdl_wait();  // qkv is the previous kernel's output

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

"""
