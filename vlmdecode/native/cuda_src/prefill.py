"""The native prefill's row kernels (the GEMMs are cuBLAS): embedding + input norm, q/k norm + rotary + the
K/V cache write, the attention softmax with its causal / window mask, gelu(gate) * up, the residual folds, and
the hand-off of the last position to the decode step's LM head.

Compiled with `common.CODE` in front (block_sum, block_max, gelu_tanh) by `native.prefill`; CUDA C++ in a
string. Rows of the prompt are padded to a bucket of Sb positions; `n_valid[0]` is the prompt's length S
(device memory, so one captured graph serves every S of its bucket): rows >= S are computed (they never reach
a row < S: attention is causal) but never written into the KV cache.
"""

CODE = r"""
// one block a position s: resid[s] = x[s] * scale (or table[ids[s]] * scale), 0 for s >= S;
// xn[s] = rms(resid[s]) * norm_w (fp16, the QKV GEMM's input)
extern "C" __global__ void __launch_bounds__(256) pf_embed(
    const __half* x, const long long* ids, const __half* table, const float scale, const int* n_valid,
    const int H, float* resid, const float* norm_w, const float eps, __half* xn) {
    __shared__ float red[32];
    const int s = blockIdx.x;
    const bool ok = s < n_valid[0];
    float* r = resid + (size_t)s * H;
    float ss = 0.f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float v = 0.f;
        if (ok) v = __half2float(ids != NULL ? table[(size_t)ids[s] * H + i] : x[(size_t)s * H + i]) * scale;
        r[i] = v;
        ss += v * v;
    }
    const float inv = rsqrtf(block_sum(ss, red) / H + eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) xn[(size_t)s * H + i] = __float2half_rn(r[i] * inv * norm_w[i]);
}

#ifndef PF_R  // float4 slots a thread of pf_fold holds: rows of up to PF_R x 4 x blockDim floats; native.prefill
#define PF_R 6  // passes its FOLD_SLOTS (-DPF_R)
#endif

// one block a position: resid[s] += rms(delta[s]) * delta_w; then (norm_w not NULL) xn[s] = rms(resid[s]) * norm_w.
// The row stays in registers (float4 slots): one round of loads, two block reductions, the stores.
extern "C" __global__ void __launch_bounds__(256) pf_fold(
    const float* delta, const float* delta_w, float* resid, const float* norm_w, const float eps, const int H,
    __half* xn) {
    __shared__ float red[32];
    const size_t o = (size_t)blockIdx.x * H;
    const int n4 = H >> 2;  // H % 8 == 0
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4* d4 = reinterpret_cast<const float4*>(delta + o);
    float4* r4 = reinterpret_cast<float4*>(resid + o);
    float4 d[PF_R], r[PF_R], dw[PF_R], nw[PF_R];
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < PF_R; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        const bool on = i < n4;
        d[j] = on ? d4[i] : z;
        r[j] = on ? r4[i] : z;
        dw[j] = on ? reinterpret_cast<const float4*>(delta_w)[i] : z;
        nw[j] = (on && norm_w != NULL) ? reinterpret_cast<const float4*>(norm_w)[i] : z;
        ss += f4_dot(d[j]);
    }
    const float inv_d = rsqrtf(block_sum(ss, red) / H + eps);
    ss = 0.f;
#pragma unroll
    for (int j = 0; j < PF_R; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        r[j] = f4_fma(d[j], inv_d, dw[j], r[j]);  // zero slots stay zero
        ss += f4_dot(r[j]);
        if (i < n4) r4[i] = r[j];
    }
    if (norm_w == NULL) return;
    const float inv = rsqrtf(block_sum(ss, red) / H + eps);
#pragma unroll
    for (int j = 0; j < PF_R; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i >= n4) continue;
        const float4 v = f4_fma(r[j], inv, nw[j], z);
        const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
        uint2 u;
        u.x = *reinterpret_cast<const unsigned*>(&lo);
        u.y = *reinterpret_cast<const unsigned*>(&hi);
        reinterpret_cast<uint2*>(xn + o)[i] = u;
    }
}

// grid (Sb, nq + 2 nkv), D / 2 threads rounded up to whole warps: head h of position s from the QKV GEMM's
// row [nq | nkv | nkv] x D.
// q heads: q norm + rotary -> Q [nq][ldS][D]; k heads: k norm + rotary -> K [nkv][ldS][D]; v heads -> V.
// K and V of positions s < S also go to the cache [nkv][C][D]: layout 0 row s; 1 (ring, C = window) the last
// C positions at row s % C; 2 (onnxruntime's windowed layout) the last L = min(S, C) at rows 0..L-1 in order.
extern "C" __global__ void __launch_bounds__(256) pf_qk(
    const __half* qkv, const int nq, const int nkv, const int D, const float* q_norm, const float* k_norm,
    const float eps, const float* cos_t, const float* sin_t, const int rope_rows, const int* n_valid,
    const int ldS, __half* Q, __half* K, __half* V, __half* Kc, __half* Vc, const int C, const int layout) {
    __shared__ float red[32];
    const int s = blockIdx.x, h = blockIdx.y, i = threadIdx.x, half = D / 2;
    const bool on = i < half;  // lanes past D / 2 only join the norm's reduction
    const __half* src = qkv + (size_t)s * (nq + 2 * nkv) * D + (size_t)h * D;
    float a = on ? __half2float(src[i]) : 0.f, b = on ? __half2float(src[i + half]) : 0.f;
    if (h < nq + nkv) {
        const float* nw = h < nq ? q_norm : k_norm;
        if (nw != NULL) {  // uniform over the block
            const float inv = rsqrtf(block_sum(a * a + b * b, red) / D + eps);
            if (on) {
                a *= inv * nw[i];
                b *= inv * nw[i + half];
            }
        }
        if (on) {
            const size_t p = (size_t)min(s, rope_rows - 1) * half + i;  // padding rows: any valid position
            const float c = cos_t[p], sn = sin_t[p];
            const float a2 = a * c - b * sn, b2 = b * c + a * sn;
            a = a2;
            b = b2;
        }
    }
    if (!on) return;
    const __half ha = __float2half_rn(a), hb = __float2half_rn(b);
    if (h < nq) {
        __half* q = Q + ((size_t)h * ldS + s) * D;
        q[i] = ha;
        q[i + half] = hb;
        return;
    }
    const bool is_k = h < nq + nkv;
    const int j = is_k ? h - nq : h - nq - nkv;
    __half* dst = (is_k ? K : V) + ((size_t)j * ldS + s) * D;
    dst[i] = ha;
    dst[i + half] = hb;
    const int S = n_valid[0];
    if (s >= S) return;
    int row = s;
    if (layout == 1) {
        if (s < S - C) return;
        row = s % C;
    } else if (layout == 2) {
        const int L = min(S, C);
        if (s < S - L) return;
        row = s - (S - L);
    }
    __half* c = (is_k ? Kc : Vc) + ((size_t)j * C + row) * D;
    c[i] = ha;
    c[i + half] = hb;
}

// grid (queries of the chunk, group): scores [grp][ldQ][ldK] fp32 (already scaled) of query q0 + r against keys
// k0 + t, t < Tk -> P (same layout, fp16): query s sees keys p <= s, and s - p < window when window > 0;
// softcap (0: none) before the softmax; invisible keys get 0
extern "C" __global__ void __launch_bounds__(256) pf_softmax(
    const float* scores, __half* P, const int ldQ, const int ldK, const int q0, const int k0, const int Tk,
    const int window, const float softcap) {
    __shared__ float red[32];
    const int r = blockIdx.x, s = q0 + r;
    const size_t o = ((size_t)blockIdx.y * ldQ + r) * ldK;
    const int lo = window > 0 ? max(0, s - window + 1 - k0) : 0, hi = min(Tk, s - k0 + 1);  // visible: [lo, hi)
    float m = -INF_F;
    for (int t = lo + threadIdx.x; t < hi; t += blockDim.x) {
        float v = scores[o + t];
        if (softcap > 0.f) v = softcap * tanhf(v / softcap);
        m = fmaxf(m, v);
    }
    m = block_max(m, red);
    float sum = 0.f;
    for (int t = lo + threadIdx.x; t < hi; t += blockDim.x) {
        float v = scores[o + t];
        if (softcap > 0.f) v = softcap * tanhf(v / softcap);
        sum += expf(v - m);
    }
    const float inv = 1.f / block_sum(sum, red);
    for (int t = threadIdx.x; t < Tk; t += blockDim.x) {
        float e = 0.f;
        if (t >= lo && t < hi) {
            float v = scores[o + t];
            if (softcap > 0.f) v = softcap * tanhf(v / softcap);
            e = expf(v - m) * inv;
        }
        P[o + t] = __float2half_rn(e);
    }
}

// grid (rows, pairs / blockDim): m[s, j] = gelu_tanh(gu[s, j]) * gu[s, I + j] (I even: half2 pairs), fp16
extern "C" __global__ void pf_gelu(const __half* gu, __half* m, const int I) {
    const int I2 = I / 2, j = blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= I2) return;
    const size_t s = blockIdx.x;
    const __half2* row = reinterpret_cast<const __half2*>(gu + s * 2 * I);
    const float2 g = __half22float2(row[j]), u = __half22float2(row[I2 + j]);
    reinterpret_cast<__half2*>(m + s * I)[j] = __floats2half2_rn(gelu_tanh(g.x) * u.x, gelu_tanh(g.y) * u.y);
}

// the last position (S - 1) into the decode step's buffers, as its head kernel reads them: the residual before
// the last down projection's fold, and that projection as split-K part 0 (parts 1.. zero)
extern "C" __global__ void pf_last(const float* resid, const float* delta, const int* n_valid, const int H,
                                   float* resid_out, float* dpart, const int parts) {
    const size_t o = (size_t)(n_valid[0] - 1) * H;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < H; i += gridDim.x * blockDim.x) {
        resid_out[i] = resid[o + i];
        dpart[i] = delta[o + i];
        for (int p = 1; p < parts; ++p) dpart[(size_t)p * H + i] = 0.f;
    }
}
"""
