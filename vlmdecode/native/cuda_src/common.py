"""Shared CUDA helpers of the native kernels: fp16/fp32 constants, warp and block reductions, the
argmax order, gelu_tanh, 8-wide dot products, and the GEMV prologue that folds the residual and RMSNorm
into the input vector (`fold_regs`, `fold_flat8`, `form_vector`).

Part of `native.kernels_src.SOURCE`, which concatenates the parts in order; CUDA C++ in a string.
"""

CODE = r"""
#include <cuda_fp16.h>

#define INF_F __int_as_float(0x7f800000)
#define NAN_F __int_as_float(0x7fc00000)
#define NO_INDEX 0x7fffffffffffffffLL
#define FULL 0xffffffffu

enum { EPI_PLAIN = 0, EPI_GELU = 1, EPI_HEAD = 2, EPI_FOLD = 3 };  // EPI_FOLD: gemv_tiled's folded plain rows

// Programmatic dependent launch (native.pdl; no-ops in a plain launch). Every kernel calls pdl_trigger()
// first (the next kernel may be scheduled once all our blocks run) and pdl_wait() before its first read of
// an earlier kernel's output and before its first global write. Before the wait a kernel reads only what no
// kernel of this step writes: weights, the KV rows of earlier positions, the position.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// A kernel's first read of each parameter misses the immediate-constant cache (imc_miss in
// h200_native_stalls_8fc2db4.json). A kernel that touches the parameters it needs after pdl_wait before the
// wait overlaps those misses with the earlier kernel's tail (h200_param_warm_ab.json, h200_attn_touch_ab.json):
// it xors them into `ptrs` (pointers) and `words` (scalars' bits) and hands both here. The store never runs:
// every pointer is at least 2-byte aligned, so their xor is never 1; it only keeps the reads.
__device__ __forceinline__ void keep_param_reads(const unsigned long long ptrs, const unsigned int words,
                                                 float* sink) {
    if (ptrs == 1ull && words == 1u) sink[0] = 0.f;
}

// Timeline stamps (scripts/h200_native_timeline.py compiles with -DVLM_STAMPS; empty otherwise): a kernel
// that takes STAMP_PARAM (its last parameter) records %globaltimer per block (thread 0) at its start (0), after
// pdl_wait (1), at its end (2, after a block barrier) and, attention_cl, at its phases (3-6) into
// stamps[block * STAMP_SLOTS + i].
#define STAMP_SLOTS 8
#ifdef VLM_STAMPS
#define STAMP_PARAM , unsigned long long* stamps
__device__ __forceinline__ void stamp_at(unsigned long long* s, const int i) {
    if (threadIdx.x == 0) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");
        s[((size_t)blockIdx.y * gridDim.x + blockIdx.x) * STAMP_SLOTS + i] = t;
    }
}
#define STAMP(i) stamp_at(stamps, i)
#define STAMP_END() do { __syncthreads(); stamp_at(stamps, 2); } while (0)
#else
#define STAMP_PARAM
#define STAMP(i)
#define STAMP_END()
#endif

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

// every thread gets the block's max (NaNs ignored, as fmaxf); red: 32 floats of shared memory
__device__ __forceinline__ float block_max(float v, float* red) {
    v = warp_max(v);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (l == 0) red[w] = v;
    __syncthreads();
    return warp_max(l < nw ? red[l] : -INF_F);
}

// (a, ia) <- the better of (a, ia), (b, ib): NaN wins (reported), then larger, then the smaller index
__device__ __forceinline__ void better(float& a, long long& ia, float b, long long ib) {
    if (b != b || (a == a && (b > a || (b == a && ib < ia)))) { a = b; ia = ib; }
}

// the block's (max, first index) partial from each warp's (bv, bi), NaN where a warp saw a NaN/+inf (`bad`):
// thread 0 writes part_v/part_i[block]. best_v, best_i: 32 slots of shared memory. The LM heads' last step.
__device__ __forceinline__ void block_partial(const float bv, const long long bi, const bool bad, float* best_v,
                                              long long* best_i, float* part_v, long long* part_i) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
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

__device__ __forceinline__ float gelu_tanh(float x) {
    return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

// w's 8 halves . (a, b); the second form reads a, b from x (shared memory, 16-byte aligned)
__device__ __forceinline__ float dot8(const uint4 w, const float4 a, const float4 b) {
    const __half2* h = reinterpret_cast<const __half2*>(&w);
    const float2 f0 = __half22float2(h[0]), f1 = __half22float2(h[1]);
    const float2 f2 = __half22float2(h[2]), f3 = __half22float2(h[3]);
    float s = f0.x * a.x;
    s = fmaf(f0.y, a.y, s); s = fmaf(f1.x, a.z, s); s = fmaf(f1.y, a.w, s);
    s = fmaf(f2.x, b.x, s); s = fmaf(f2.y, b.y, s); s = fmaf(f3.x, b.z, s); s = fmaf(f3.y, b.w, s);
    return s;
}

__device__ __forceinline__ float dot8(const uint4 w, const float* x) {
    return dot8(w, *reinterpret_cast<const float4*>(x), *reinterpret_cast<const float4*>(x + 4));
}

#define FOLD_R 3  // float4 slots per thread of the register fold: n <= 12 x threads (1152 at >= 96 threads)

__device__ __forceinline__ float4 f4_fma(const float4 a, const float s, const float4 b, const float4 c) {
    return make_float4(fmaf(a.x * s, b.x, c.x), fmaf(a.y * s, b.y, c.y),
                       fmaf(a.z * s, b.z, c.z), fmaf(a.w * s, b.w, c.w));
}

__device__ __forceinline__ float f4_dot(const float4 a) { return a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w; }

// fold_flat8's reductions and stores over a thread's R float4 slots (i = thread + j x threads), every load done:
// base b, delta d (summed over parts), delta_w dw, norm_w nw, zero in slots past n4. fold_regs keeps the same
// lines inline: called through here, ptxas schedules the other GEMVs (o, gate|up, down) differently, and those
// builds were not the ones measured (h200_native_flat8_ab_9457657.json)
template <int R>
__device__ __forceinline__ void fold_tail(float* vec, float* red, const int n, const int n4, float4 (&b)[R],
                                          const float4 (&d)[R], const float4 (&dw)[R], const float4 (&nw)[R],
                                          const bool has_delta, float* resid_out, const float eps) {
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    float inv_d = 0.f;
    if (has_delta) {
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < R; ++j) ss += f4_dot(d[j]);
        inv_d = rsqrtf(block_sum(ss, red) / n + eps);
    }
    const bool store = resid_out != NULL && blockIdx.x == 0 && blockIdx.y == 0;
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < R; ++j) {
        b[j] = f4_fma(d[j], inv_d, dw[j], b[j]);  // zero delta / delta_w when there is no delta term
        ss += f4_dot(b[j]);
        const int i = threadIdx.x + j * blockDim.x;
        if (store && i < n4) reinterpret_cast<float4*>(resid_out)[i] = b[j];
    }
    const float inv = rsqrtf(block_sum(ss, red) / n + eps);
#pragma unroll
    for (int j = 0; j < R; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < n4) reinterpret_cast<float4*>(vec)[i] = f4_fma(b[j], inv, nw[j], z);
    }
    __syncthreads();
}

// form_vector's fold with n / 4 <= FR x threads: this thread's float4s of base, delta (summed over
// parts), delta_w and norm_w are all loaded before the first reduction (one L2 round trip, not one per pass);
// FR < FOLD_R (gemv_tiled's 2) holds fewer registers for the same bits wherever n / 4 <= FR x threads
template <int FR = FOLD_R>
__device__ void fold_regs(float* vec, float* red, const int n, const int n4, const float* src, const __half* x_in,
                          const float x_scale, const float* delta, const int delta_parts, const float* delta_w,
                          float* resid_out, const float* norm_w, const float eps) {
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    float4 b[FR], d[FR], dw[FR], nw[FR];
#pragma unroll
    for (int j = 0; j < FR; ++j) {
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
        for (int j = 0; j < FR; ++j) ss += f4_dot(d[j]);
        inv_d = rsqrtf(block_sum(ss, red) / n + eps);
    }
    const bool store = resid_out != NULL && blockIdx.x == 0 && blockIdx.y == 0;
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < FR; ++j) {
        b[j] = f4_fma(d[j], inv_d, dw[j], b[j]);  // zero delta / delta_w when there is no delta term
        ss += f4_dot(b[j]);
        const int i = threadIdx.x + j * blockDim.x;
        if (store && i < n4) reinterpret_cast<float4*>(resid_out)[i] = b[j];
    }
    const float inv = rsqrtf(block_sum(ss, red) / n + eps);
#pragma unroll
    for (int j = 0; j < FR; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < n4) reinterpret_cast<float4*>(vec)[i] = f4_fma(b[j], inv, nw[j], z);
    }
    __syncthreads();
}

// fold_regs over the first T threads (a multiple of 32, n / 4 <= FOLD_R T; src and norm_w given) with named barrier
// 1 among them; the block's other warps hold their first rows' weights meanwhile (gemv_split) and meet them at
// bar_vector (named barrier 2, every thread) once the vector is written. The same sums as fold_regs over T threads;
// its own lines rather than a fold_regs with a thread count: through one template, the default GEMVs' PTX stays
// equal but gemv_split's changes, and that build is not the one measured (h200_gate_up_split_ab_321767e.json)
__device__ __forceinline__ void bar_named(const int T) { asm volatile("bar.sync 1, %0;" :: "r"(T) : "memory"); }

__device__ __forceinline__ void bar_vector() { asm volatile("bar.sync 2;" ::: "memory"); }

__device__ __forceinline__ float part_sum(float v, float* red, const int T) {
    v = warp_sum(v);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    bar_named(T);  // red may still be read by a previous call
    if (l == 0) red[w] = v;
    bar_named(T);
    return warp_sum(l < T / 32 ? red[l] : 0.f);
}

__device__ void fold_half(float* vec, float* red, const int n, const float* src, const float* delta,
                          const int delta_parts, const float* delta_w, float* resid_out, const float* norm_w,
                          const float eps, const int T) {
    const int n4 = n >> 2;
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    float4 b[FOLD_R], d[FOLD_R], dw[FOLD_R], nw[FOLD_R];
#pragma unroll
    for (int j = 0; j < FOLD_R; ++j) {
        const int i = threadIdx.x + j * T;
        b[j] = z; d[j] = z; dw[j] = z; nw[j] = z;
        if (i < n4) {
            b[j] = reinterpret_cast<const float4*>(src)[i];
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
        inv_d = rsqrtf(part_sum(ss, red, T) / n + eps);
    }
    const bool store = resid_out != NULL && blockIdx.x == 0 && blockIdx.y == 0;
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < FOLD_R; ++j) {
        b[j] = f4_fma(d[j], inv_d, dw[j], b[j]);
        ss += f4_dot(b[j]);
        const int i = threadIdx.x + j * T;
        if (store && i < n4) reinterpret_cast<float4*>(resid_out)[i] = b[j];
    }
    const float inv = rsqrtf(part_sum(ss, red, T) / n + eps);
#pragma unroll
    for (int j = 0; j < FOLD_R; ++j) {
        const int i = threadIdx.x + j * T;
        if (i < n4) reinterpret_cast<float4*>(vec)[i] = f4_fma(b[j], inv, nw[j], z);
    }
}

#define FLAT8_PARTS 8  // most delta parts fold_flat8 takes
// a global float4 load issued where it stands: NVVM may sink a plain load to its first use (the base and weights
// below would go out only after the parts are summed, a second round trip); the same LDG.E.128 as a plain load
__device__ __forceinline__ float4 ld4_here(const float* base, const size_t i) {
    float4 v;
    asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(reinterpret_cast<const float4*>(base) + i));
    return v;
}

// fold_regs for a fold of several delta parts (after a split-K down) at threads < n4 <= threads + 32, in one L2
// round trip. fold_regs gives the first warp a second slot and loads its parts after the first slot's are
// consumed (and ptxas interleaves that second batch with its adds): three or more round trips on the path
// of the first block reduction. Here every thread loads its slot (base, norm_w, delta_w, the parts), the first
// warp also the base and weights of an extra slot (threads + lane), and every thread one part of the extra slots
// (slot threads + t % E, part t / E, E = n4 - threads: parts x E <= threads); those go through the vector's
// shared memory (parts x E < n4 float4s, one spare), and the first warp sums them in part order after a barrier:
// the same sums in the same order as fold_regs (bit-equal vectors for finite inputs).
__device__ void fold_flat8(float* vec, float* red, const int n, const int n4, const float* src,
                           const float* delta, const int parts, const float* delta_w,
                           float* resid_out, const float* norm_w, const float eps) {
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    const int t = threadIdx.x, bd = blockDim.x, E = n4 - bd;
    float4 b[2], d[2] = {z, z}, dw[2], nw[2];
    const int xe = bd + min(t, E - 1);  // the first warp's extra slot (clamped for the other lanes)
    const int xp = t / E;               // this thread's part of the extra slots
    b[0] = ld4_here(src, t);  // the residual (src != NULL: the first layer's x_in fold takes fold_regs)
    b[1] = ld4_here(src, xe);
    nw[0] = ld4_here(norm_w, t);
    nw[1] = ld4_here(norm_w, xe);
    dw[0] = ld4_here(delta_w, t);
    dw[1] = ld4_here(delta_w, xe);
    const float4 xv = ld4_here(delta, (size_t)min(xp, parts - 1) * n4 + bd + t % E);
    float4 pv[FLAT8_PARTS];  // every part of this thread's slot (a clamped part index repeats the last part's
#pragma unroll               // address: no branch between the loads)
    for (int p = 0; p < FLAT8_PARTS; ++p) pv[p] = ld4_here(delta, (size_t)min(p, parts - 1) * n4 + t);
    // dependences that change no result, so that ptxas issues every load above before the first use (it
    // otherwise sinks some below the first stall: a second round trip): the parts' sum starts from -0 instead of
    // +0 when a loaded value is NaN (x + parts: the same sums), and the extra part goes to the spare slot when
    // this slot's sum is NaN (the block's delta norm, hence every output, is NaN then either way)
    bool nan_in = isnan(b[0].x) | isnan(b[1].x) | isnan(nw[0].x) | isnan(nw[1].x) | isnan(dw[0].x) | isnan(dw[1].x)
                  | isnan(xv.x);
#pragma unroll
    for (int p = 0; p < FLAT8_PARTS; ++p) nan_in |= isnan(pv[p].x);
    if (nan_in) d[0] = make_float4(-0.f, -0.f, -0.f, -0.f);
#pragma unroll
    for (int p = 0; p < FLAT8_PARTS; ++p)
        if (p < parts) { d[0].x += pv[p].x; d[0].y += pv[p].y; d[0].z += pv[p].z; d[0].w += pv[p].w; }
    float4* scratch = reinterpret_cast<float4*>(vec);  // [parts][E] (+ one spare), before the vector is written
    scratch[xp < parts && !isnan(d[0].x) ? xp * E + t % E : parts * E] = xv;
    __syncthreads();
    if (t < E) {
        for (int p = 0; p < parts; ++p) {
            const float4 v = scratch[p * E + t];
            d[1].x += v.x; d[1].y += v.y; d[1].z += v.z; d[1].w += v.w;
        }
    } else {
        b[1] = z; d[1] = z; dw[1] = z; nw[1] = z;
    }
    fold_tail<2>(vec, red, n, n4, b, d, dw, nw, true, resid_out, eps);
}

// The GEMV's input vector, n floats in shared memory.
//   fold  (norm_w != NULL): r = base + rms(sum_p delta[p]) * delta_w, base = resid_in, or x_in * x_scale
//         when resid_in is NULL; no delta term when delta is NULL. Block (0,0) stores r to resid_out
//         (when not NULL); vec = rms(r) * norm_w. All weights are effective ((1 + w) applied).
//   plain (norm_w == NULL): vec = src[0, n)
// FLAT8: the instance may take fold_flat8, compiled only into the instances whose rows are longer than 1024 and
// that are not gate|up (the only folds of several parts, after a split-K down, that can hold extra slots at 256
// threads: gemma3-1b's qkv and LM head), so that the other GEMVs keep their registers.
template <bool FLAT8>
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
#ifndef VLM_NO_FLAT8  // (the tests' build of fold_regs alone, to compare bits)
    const int extra = n4 - (int)blockDim.x;
    if (FLAT8 && src != NULL && delta != NULL && delta_parts > 1 && delta_parts <= FLAT8_PARTS && extra > 0
        && extra <= 32 && delta_parts * extra <= blockDim.x && delta_parts * extra < n4) {
        fold_flat8(vec, red, n, n4, src, delta, delta_parts, delta_w, resid_out, norm_w, eps);
        return;
    }
#endif
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

"""
