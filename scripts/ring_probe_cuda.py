"""The CUDA source of scripts/h200_ring_probe.py (one RawModule): the persistent ring kernel `ring<STAGE, NS, CW, MODE,
STAMP, PD>` (a cp.async.bulk producer warp, CW consumer warps; modes 0-4 as the probe's docstring says; mode 4's
folds and its attention, attn_partial / attn_combine), the per-op GEMV `opk<LL>` and its stand-in `opspin<LL>`, the
LL helpers (ld_volatile4, st_ll, st_ll2, ll_gather, ll_pairs, ll_two), `ll_prep` and the step launches' stand-in
`spin16`. What each kernel computes and why is in its comments; the probe
builds the op tables they read (OPW int64 an op)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from native_kernel_bench import GTIMER_CU  # noqa: E402

from vlmdecode.native.cuda_src import common  # noqa: E402 - dot8, warp_sum, gelu_tanh

SRC = common.CODE + GTIMER_CU + r"""
__device__ __forceinline__ unsigned sa(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void mb_wait(const unsigned bar, const unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}
template <int CW>
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" :: "n"(32 * CW) : "memory"); }
// the consumers' sum of v (red: 32 floats of shared memory, this call's own)
template <int CW>
__device__ __forceinline__ float consumers_sum(float v, float* red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    consumers_sync<CW>();
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < CW; ++w) t += red[w];
    return t;
}

// ops: OPW int64 an op: W [rows, k] fp16 (0: an attention stand-in), x (fp32 [parts, k]: the input is the parts'
// sum), y (fp32), rows, k, tile rows tr (<= RMAX), tile columns ks (a divisor of k), parts, epi (0: y[s, r] = row r's
// dot over column slice s; 1: rows paired, gate 2i and up 2i + 1: y[i] = gelu_tanh(gate) * up), spin ns (stand-in);
// MODE 4 only (MODE 3 with the folds and the attention compiled in): fold (0: x as it is; 1: h = resid + rms(x) *
// (1 + w_delta), x -> rms(h) * (1 + w_norm); 2: h = resid, x -> rms(h) * (1 + w_norm); block 0 stores h to resid_out,
// LL), resid, w_delta, w_norm (fp32 [k]), resid_out; attention ops (W 0): [11] K, [12] V cache, [15] kind (1 its
// partials, 2 its combine), rows its context L, k its blocks.
#define OPW 16
// Op j's tiles t = g * (k / ks) + s (rows g * tr .., columns s * ks ..); a block takes t = block, block + grid, ..;
// a stand-in has 16 tiles of no weights. done[j]: op j's tiles done (each warp adds its own, release).
#define RMAX 8
#define KCMAX 864  // 16-byte chunks of the widest input (k = 6912)
#define TS 1024    // stamps (block 0): [op][ready, x formed, warp 0 done] from 0, [tile][asked, full, done] from TS

// R rows of a tile [R, kc chunks] against x: lane l takes chunks l, l + 32, .., U of them a step with their own
// partial sums, so R * U loads are in flight at once; acc[r] = lane l's share of row r's dot
template <int R, int U>
__device__ __forceinline__ void dot_rows(const uint4* tile, const float4* xa, const float4* xb, const int kc,
                                         const int lane, float (&acc)[RMAX]) {
    float part[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r) part[u][r] = 0.f;
    int c = lane;
    for (; c + 32 * (U - 1) < kc; c += 32 * U) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const float4 a = xa[c + 32 * u], b = xb[c + 32 * u];
#pragma unroll
            for (int r = 0; r < R; ++r) part[u][r] += dot8(tile[r * kc + c + 32 * u], a, b);
        }
    }
    for (; c < kc; c += 32) {
        const float4 a = xa[c], b = xb[c];
#pragma unroll
        for (int r = 0; r < R; ++r) part[0][r] += dot8(tile[r * kc + c], a, b);
    }
#pragma unroll
    for (int r = 0; r < RMAX; ++r) {
        float v = 0.f;
        if (r < R) {
#pragma unroll
            for (int u = 0; u < U; ++u) v += part[u][r];
        }
        acc[r] = v;
    }
}

// MODE 3's outputs: each float stored with the step's epoch beside it in one 8-byte store ({value, epoch}, as
// NCCL's LL protocol), so a consumer polls the values themselves: no fence, release or counter between ops
__device__ __forceinline__ uint4 ld_volatile4(const void* p) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_ll(void* p, const float v, const unsigned e) {
    asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" :: "l"(p), "r"(__float_as_uint(v)), "r"(e) : "memory");
}
// one LL line: two floats, each with epoch e beside it
__device__ __forceinline__ void st_ll2(unsigned* line, const float a, const float b, const unsigned e) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "l"(line), "r"(__float_as_uint(a)), "r"(e), "r"(__float_as_uint(b)), "r"(e) : "memory");
}

// B LL lines, line i at addr(i) (i < n), polled until each carries epoch e; f[i] = its two floats
template <int B, typename F>
__device__ __forceinline__ void ll_gather(F addr, const int n, const unsigned e, float2 (&f)[B]) {
    uint4 v[B];
#pragma unroll
    for (int i = 0; i < B; ++i)
        if (i < n) v[i] = ld_volatile4(addr(i));
    for (bool ok = false; !ok;) {
        ok = true;
#pragma unroll
        for (int i = 0; i < B; ++i)
            if (i < n && (v[i].y != e || v[i].w != e)) {
                ok = false;
                v[i] = ld_volatile4(addr(i));
            }
    }
#pragma unroll
    for (int i = 0; i < B; ++i) f[i] = make_float2(__uint_as_float(v[i].x), __uint_as_float(v[i].z));
}

// pairs q = q0 + i * step (i < n) of an LL vector (2 floats a 16-byte line) into f, polled until every line
// carries epoch e
template <int B>
__device__ __forceinline__ void ll_pairs(const uint4* src, const int q0, const int step, const int n, const unsigned e,
                                         float2 (&f)[B]) {
    ll_gather<B>([&](int i) { return src + q0 + i * step; }, n, e, f);
}

// two LL vectors' pairs q0 + i * step (i < n) polled together (a null: zeros)
template <int NI>
__device__ __forceinline__ void ll_two(const uint4* a, const uint4* b, const int q0, const int step, const int n,
                                       const unsigned e, float2 (&fa)[NI], float2 (&fb)[NI]) {
    uint4 va[NI], vb[NI];
#pragma unroll
    for (int i = 0; i < NI; ++i) {
        va[i] = vb[i] = make_uint4(0u, e, 0u, e);
        if (i < n && a) va[i] = ld_volatile4(a + q0 + i * step);
        if (i < n && b) vb[i] = ld_volatile4(b + q0 + i * step);
    }
    for (bool ok = false; !ok;) {
        ok = true;
#pragma unroll
        for (int i = 0; i < NI; ++i) {
            if (i < n && a && (va[i].y != e || va[i].w != e)) { ok = false; va[i] = ld_volatile4(a + q0 + i * step); }
            if (i < n && b && (vb[i].y != e || vb[i].w != e)) { ok = false; vb[i] = ld_volatile4(b + q0 + i * step); }
        }
    }
#pragma unroll
    for (int i = 0; i < NI; ++i) {
        fa[i] = make_float2(__uint_as_float(va[i].x), __uint_as_float(va[i].z));
        fb[i] = make_float2(__uint_as_float(vb[i].x), __uint_as_float(vb[i].z));
    }
}

__device__ __forceinline__ void red_release(unsigned* p, const unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}


// MODE 4's attention (`--attn`): gemma3-1b's decode attention, 4 query heads on one KV head of 256, the cache's rows
// [0, L - 1) in fp16 and the current row L - 1 from qkv (no q/k norm or rotary here). Split over 16 blocks (op kind
// 1): block b takes rows [b L/16, (b + 1) L/16), and stores its partial (m[4], l[4], acc[4][256]: ATTN_PART floats,
// LL) ; then 4 blocks (op kind 2) combine one head each into o's input [4 x 256] (LL). scratch: shared memory.
#define ATTN_PART 1032
template <int CW>
__device__ void attn_partial(const long long* o, const unsigned e, float* scratch) {
    const int L = (int)o[3], nk = L / 16, k0 = (int)blockIdx.x * nk;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const __half* Kc = reinterpret_cast<const __half*>(o[11]);
    const __half* Vc = reinterpret_cast<const __half*>(o[12]);
    float* qs = scratch;         // q [4][256], then the current k [256] and v [256]
    float* sc = scratch + 1536;  // [4][nk]: scores, then exp(score - m)
    float* st = sc + 4 * nk;     // the partial, staged for its LL store
    {
        constexpr int B = (768 + 32 * CW - 1) / (32 * CW);
        float2 f[B];
        const int n = (768 - tid + 32 * CW - 1) / (32 * CW);
        const uint4* src = reinterpret_cast<const uint4*>(o[1]);
        ll_gather<B>([&](int i) { return src + tid + 32 * CW * i; }, n, e, f);
#pragma unroll
        for (int i = 0; i < B; ++i)
            if (i < n) {
                const int q = tid + 32 * CW * i;
                qs[2 * q] = f[i].x;
                qs[2 * q + 1] = f[i].y;
            }
    }
    consumers_sync<CW>();
    for (int kk = warp; kk < nk; kk += CW) {  // a row a warp: lane l holds dims 8l .. 8l + 7
        const int pos = k0 + kk;
        float kv[8];
        if (pos == L - 1) {
#pragma unroll
            for (int i = 0; i < 8; ++i) kv[i] = qs[1024 + 8 * lane + i];
        } else {
            const uint4 w = __ldcs(reinterpret_cast<const uint4*>(Kc + (size_t)pos * 256) + lane);
            const __half2* h2 = reinterpret_cast<const __half2*>(&w);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 f = __half22float2(h2[i]);
                kv[2 * i] = f.x;
                kv[2 * i + 1] = f.y;
            }
        }
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            float s = 0.f;
#pragma unroll
            for (int i = 0; i < 8; ++i) s = fmaf(kv[i], qs[256 * h + 8 * lane + i], s);
            s = warp_sum(s);
            if (lane == 0) sc[h * nk + kk] = s * 0.0625f;  // 256 ** -0.5
        }
    }
    consumers_sync<CW>();
    if (warp < 4) {  // head `warp`: m, exp(s - m), l
        float m = -INF_F;
        for (int kk = lane; kk < nk; kk += 32) m = fmaxf(m, sc[warp * nk + kk]);
        m = warp_max(m);
        float l = 0.f;
        for (int kk = lane; kk < nk; kk += 32) {
            const float p = __expf(sc[warp * nk + kk] - m);
            sc[warp * nk + kk] = p;
            l += p;
        }
        l = warp_sum(l);
        if (lane == 0) {
            st[warp] = m;
            st[4 + warp] = l;
        }
    }
    consumers_sync<CW>();
    for (int d = tid; d < 256; d += 32 * CW) {  // one dim a thread, every head
        float a[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 8
        for (int kk = 0; kk < nk; ++kk) {
            const int pos = k0 + kk;
            const float v = pos == L - 1 ? qs[1280 + d] : __half2float(Vc[(size_t)pos * 256 + d]);
#pragma unroll
            for (int h = 0; h < 4; ++h) a[h] = fmaf(sc[h * nk + kk], v, a[h]);
        }
#pragma unroll
        for (int h = 0; h < 4; ++h) st[8 + 256 * h + d] = a[h];
    }
    consumers_sync<CW>();
    unsigned* out = reinterpret_cast<unsigned*>(o[2]) + (size_t)blockIdx.x * ATTN_PART * 2;
    for (int q = tid; q < ATTN_PART / 2; q += 32 * CW) st_ll2(out + 4 * q, st[2 * q], st[2 * q + 1], e);
}

template <int CW>
__device__ void attn_combine(const long long* o, const unsigned e, float* scratch) {
    const int h = (int)blockIdx.x, tid = threadIdx.x;
    const uint4* parts = reinterpret_cast<const uint4*>(o[1]);  // [16][ATTN_PART / 2 lines]
    float* ml = scratch;        // m[16], l[16]
    float* acc = scratch + 32;  // [16][256]
    if (tid < 16) {
        float2 f[2];
        const uint4* part = parts + tid * (ATTN_PART / 2);
        ll_gather<2>([&](int i) { return part + (i ? 2 : 0) + (h >> 1); }, 2, e, f);
        ml[tid] = (h & 1) ? f[0].y : f[0].x;
        ml[16 + tid] = (h & 1) ? f[1].y : f[1].x;
    }
    {
        constexpr int NP = 16 * 128, B = (NP + 32 * CW - 1) / (32 * CW);
        float2 f[B];
        const int n = (NP - tid + 32 * CW - 1) / (32 * CW);
        ll_gather<B>([&](int i) {
            const int idx = tid + 32 * CW * i;
            return parts + (idx >> 7) * (ATTN_PART / 2) + 4 + 128 * h + (idx & 127);
        }, n, e, f);
#pragma unroll
        for (int i = 0; i < B; ++i)
            if (i < n) {
                const int idx = tid + 32 * CW * i;
                acc[(idx >> 7) * 256 + 2 * (idx & 127)] = f[i].x;
                acc[(idx >> 7) * 256 + 2 * (idx & 127) + 1] = f[i].y;
            }
    }
    consumers_sync<CW>();
    float M = -INF_F;
#pragma unroll
    for (int p = 0; p < 16; ++p) M = fmaxf(M, ml[p]);
    float Ls = 0.f;
#pragma unroll
    for (int p = 0; p < 16; ++p) Ls += __expf(ml[p] - M) * ml[16 + p];
    unsigned* out = reinterpret_cast<unsigned*>(o[2]) + (size_t)h * 256 * 2;
    for (int r = tid; r < 128; r += 32 * CW) {
        float a = 0.f, b = 0.f;
#pragma unroll
        for (int p = 0; p < 16; ++p) {
            const float w = __expf(ml[p] - M);
            a = fmaf(w, acc[p * 256 + 2 * r], a);
            b = fmaf(w, acc[p * 256 + 2 * r + 1], b);
        }
        st_ll2(out + 4 * r, a / Ls, b / Ls, e);
    }
}

// (op j, tile t) -> the block's next tile in consumption order (t += grid, then the next op's first; stand-ins and
// ops with no tile for this block skipped); false past the last op
__device__ __forceinline__ bool next_tile(const long long* ops, const int n_ops, int& j, int& t) {
    for (t += gridDim.x;; ++j, t = blockIdx.x) {
        if (j >= n_ops) return false;
        const long long* o = ops + OPW * j;
        if (o[0] != 0 && t < ((int)o[3] + (int)o[5] - 1) / (int)o[5] * ((int)o[4] / (int)o[6])) return true;
    }
}

// tile t of op o: its bulk copies' (address, bytes), pieces of them: f(address, bytes) for each
template <typename F>
__device__ __forceinline__ void tile_pieces(const long long* o, const int t, F f) {
    const unsigned char* W = reinterpret_cast<const unsigned char*>(o[0]);
    const int rows = (int)o[3], k = (int)o[4], tr = (int)o[5], ks = (int)o[6], nsl = k / ks;
    const int r0 = t / nsl * tr, s = t % nsl, nr = min(tr, rows - r0);
    const int pieces = ks == k ? 1 : nr, len = ks == k ? nr * k * 2 : ks * 2;
    for (int r = 0; r < pieces; ++r) f(W + ((size_t)(r0 + r) * k + (size_t)s * ks) * 2, len, r);
}

// PD > 0: the producer also prefetches into L2 the tile PD tiles after each one it copies
// (cp.async.bulk.prefetch.L2), so DRAM keeps streaming while the ring is full
template <int STAGE, int NS, int CW, int MODE, int STAMP, int PD = 0>
__global__ void __launch_bounds__(352, 1) ring(const long long* __restrict__ ops, const int n_ops, unsigned* done,
                                               unsigned long long* stamps, const unsigned* epoch) {
    extern __shared__ __align__(128) unsigned char sm[];
    unsigned long long* full = reinterpret_cast<unsigned long long*>(sm + (size_t)NS * STAGE);
    unsigned long long* empty = full + NS;
    float4* xbuf = reinterpret_cast<float4*>(empty + NS);  // x, two buffers (op parity) of two planes [KCMAX]
    float* fred = reinterpret_cast<float*>(xbuf + 4 * KCMAX);  // the folds' two sums, 32 floats each
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tid = threadIdx.x;
    if (tid == 0) {
        for (int s = 0; s < NS; ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(full + s)));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(empty + s)));
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == CW) {  // the producer: every tile of every op in consumption order, as fast as stages free up
        if (lane == 0) {
            unsigned seq = 0;
            int pj = 0, pt = (int)blockIdx.x - (int)gridDim.x;  // the prefetch cursor, PD tiles ahead
            bool pmore = PD > 0 && next_tile(ops, n_ops, pj, pt);
            auto prefetch = [&]() {
                if (!pmore) return;
                tile_pieces(ops + OPW * pj, pt, [](const unsigned char* a, const int len, int) {
                    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(a), "r"(len) : "memory");
                });
                pmore = next_tile(ops, n_ops, pj, pt);
            };
            for (int i = 0; i < PD; ++i) prefetch();
            for (int j = 0; j < n_ops; ++j) {
                const long long* o = ops + OPW * j;
                if (o[0] == 0) continue;
                const unsigned char* W = reinterpret_cast<const unsigned char*>(o[0]);
                const int rows = (int)o[3], k = (int)o[4], tr = (int)o[5], ks = (int)o[6], nsl = k / ks;
                const int ntiles = (rows + tr - 1) / tr * nsl;
                for (int t = blockIdx.x; t < ntiles; t += gridDim.x, ++seq) {
                    const unsigned slot = seq % NS;
                    if (seq >= NS) mb_wait(sa(empty + slot), (seq / NS - 1) & 1);
                    const int r0 = t / nsl * tr, s = t % nsl, nr = min(tr, rows - r0);
                    const unsigned bar = sa(full + slot), dst = sa(sm + (size_t)slot * STAGE);
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                                 :: "r"(bar), "r"((unsigned)(nr * ks * 2)) : "memory");
                    const int pieces = ks == k ? 1 : nr, len = ks == k ? nr * k * 2 : ks * 2;
                    for (int r = 0; r < pieces; ++r)
                        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                                     " [%0], [%1], %2, [%3];"
                                     :: "r"(dst + r * len), "l"(W + ((size_t)(r0 + r) * k + (size_t)s * ks) * 2),
                                     "r"(len), "r"(bar) : "memory");
                    if (PD) prefetch();
                }
            }
        }
        return;
    }
    // consumers: a tile is one warp's: warp w takes the tiles whose ring sequence number is w mod CW, so it alone
    // uses the stages w, w + CW, .. (NS a multiple of CW) and waits on each stage's fills in order. x formed once an
    // op in shared memory (fp32, as two planes of float4 a 16-byte weight chunk: xa[c] = x[8c .. 8c + 3],
    // xb[c] = x[8c + 4 .. 8c + 7]: conflict-free), in the buffer of the op's parity, so no warp waits for another at
    // an op's end: each adds its tiles to the op's counter as it finishes them.
    unsigned base = 0;  // the block's tile count before op j: the ring sequence number of its first tile
    int prev_ntiles = 0;
    const unsigned e = MODE >= 3 ? *epoch : 0u;  // MODE 3, 4: this step's epoch (set by the kernel before)
    for (int j = 0; j < n_ops; ++j) {
        const long long* o = ops + OPW * j;
        const bool spin = o[0] == 0;
        const int rows = (int)o[3], k = (int)o[4], tr = (int)o[5], ks = (int)o[6], parts = (int)o[7];
        const int epi = (int)o[8], nsl = spin ? 1 : k / ks;
        const int ntiles = spin ? (k > 0 ? k : 16) : (rows + tr - 1) / tr * nsl;  // (attention: k its blocks)
        if (MODE == 0 && j > 0 && tid == 0)  // every tile of op j - 1 done
            while ((int)ld_acquire(done + j - 1) < prev_ntiles) {}
        consumers_sync<CW>();  // (also: every warp of this block past op j - 2, whose x buffer op j takes)
        if (STAMP && blockIdx.x == 0 && tid == 0) stamps[3 * j] = gtimer();
        prev_ntiles = ntiles;
        if ((int)blockIdx.x >= ntiles) continue;
        if (spin && MODE == 4 && o[15]) {  // the attention's partials (1) or its combine (2), --attn
            if (o[15] == 1) attn_partial<CW>(o, e, reinterpret_cast<float*>(xbuf));
            else attn_combine<CW>(o, e, reinterpret_cast<float*>(xbuf));
            if (STAMP && blockIdx.x == 0 && tid == 0) stamps[3 * j + 2] = gtimer();
            continue;
        }
        if (spin && MODE >= 3) {  // block b: qkv's pairs 32b .. 32b + 31 in, the wait, out (o's input, LL)
            float2 f[1];
            if (tid < 32) ll_pairs<1>(reinterpret_cast<const uint4*>(o[1]), 32 * blockIdx.x + tid, 0, 1, e, f);
            consumers_sync<CW>();
            if (tid == 0) {
                const unsigned long long t0 = gtimer();
                while (gtimer() - t0 < (unsigned long long)o[9]) {}
            }
            consumers_sync<CW>();
            if (tid < 32) {
                unsigned* out = reinterpret_cast<unsigned*>(o[2]) + 4 * (32 * blockIdx.x + tid);
                st_ll2(out, f[0].x, f[0].y, e);
            }
            if (STAMP && blockIdx.x == 0 && tid == 0) stamps[3 * j + 2] = gtimer();
            continue;
        }
        if (spin) {
            if (tid == 0) {
                const unsigned long long t0 = gtimer();
                while (gtimer() - t0 < (unsigned long long)o[9]) {}
                red_release(done + j, 1u);
                if (STAMP && blockIdx.x == 0) stamps[3 * j + 2] = gtimer();
            }
            continue;
        }
        const float* x = reinterpret_cast<const float*>(o[1]);
        float* y = reinterpret_cast<float*>(o[2]);
        float4* xa = xbuf + (j & 1) * 2 * KCMAX;
        float4* xb = xa + KCMAX;
        const int mine = (ntiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
        if (MODE == 4 && o[10]) {  // a fold (k <= 2 pairs a thread): delta and residual polled together
            const int fold = (int)o[10], np = k / 2, n = min(2, (np - tid + 32 * CW - 1) / (32 * CW));
            const float* wd = reinterpret_cast<const float*>(o[12]);
            const float* wn = reinterpret_cast<const float*>(o[13]);
            float2 dl[2], h[2];
            ll_two<2>(fold == 1 ? reinterpret_cast<const uint4*>(x) : nullptr,
                      reinterpret_cast<const uint4*>(o[11]), tid, 32 * CW, n, e, dl, h);
            if (fold == 1) {
                float ss = 0.f;
#pragma unroll
                for (int i = 0; i < 2; ++i)
                    if (i < n) ss += dl[i].x * dl[i].x + dl[i].y * dl[i].y;
                const float sc = rsqrtf(consumers_sum<CW>(ss, fred) / k + 1e-6f);
#pragma unroll
                for (int i = 0; i < 2; ++i)
                    if (i < n) {
                        const int q = tid + 32 * CW * i;
                        h[i].x += dl[i].x * sc * (1.f + wd[2 * q]);
                        h[i].y += dl[i].y * sc * (1.f + wd[2 * q + 1]);
                    }
            }
            float ss = 0.f;
#pragma unroll
            for (int i = 0; i < 2; ++i)
                if (i < n) ss += h[i].x * h[i].x + h[i].y * h[i].y;
            const float sc = rsqrtf(consumers_sum<CW>(ss, fred + 32) / k + 1e-6f);
            float* fa = reinterpret_cast<float*>(xa);
            float* fb = reinterpret_cast<float*>(xb);
            unsigned* hout = reinterpret_cast<unsigned*>(o[14]);
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int q = tid + 32 * CW * i, c = q >> 2, w = (q & 3) * 2;
                if (i < n) {
                    const float2 v = make_float2(h[i].x * sc * (1.f + wn[2 * q]), h[i].y * sc * (1.f + wn[2 * q + 1]));
                    *reinterpret_cast<float2*>((w < 4 ? fa + 4 * c + w : fb + 4 * c + w - 4)) = v;
                    if (blockIdx.x == 0)
                        st_ll2(hout + 4 * q, h[i].x, h[i].y, e);
                }
            }
            consumers_sync<CW>();
        } else if (MODE >= 3) {  // x's pairs polled in (parts 1), then stored in the planes
            constexpr int B = (KCMAX * 4 + 32 * CW - 1) / (32 * CW);
            float2 f[B];
            const int np = k / 2, n = (np - tid + 32 * CW - 1) / (32 * CW);
            ll_pairs<B>(reinterpret_cast<const uint4*>(x), tid, 32 * CW, n, e, f);
            float* fa = reinterpret_cast<float*>(xa);
            float* fb = reinterpret_cast<float*>(xb);
#pragma unroll
            for (int i = 0; i < B; ++i) {
                const int q = tid + 32 * CW * i, c = q >> 2, w = (q & 3) * 2;  // floats 2q, 2q + 1: chunk c
                if (i < n) *reinterpret_cast<float2*>((w < 4 ? fa + 4 * c + w : fb + 4 * c + w - 4)) = f[i];
            }
            consumers_sync<CW>();
        } else if (MODE != 2) {  // every load first, then the sums and the stores
            constexpr int XU = (KCMAX + 32 * CW - 1) / (32 * CW);
            float4 va[XU], vb[XU];
            const int kc = k / 8;
#pragma unroll
            for (int u = 0; u < XU; ++u) {
                const int c = tid + 32 * CW * u;
                if (c < kc) {
                    va[u] = __ldcg(reinterpret_cast<const float4*>(x + 8 * c));
                    vb[u] = __ldcg(reinterpret_cast<const float4*>(x + 8 * c + 4));
                }
            }
            for (int p = 1; p < parts; ++p) {
#pragma unroll
                for (int u = 0; u < XU; ++u) {
                    const int c = tid + 32 * CW * u;
                    if (c < kc) {
                        const float4 a = __ldcg(reinterpret_cast<const float4*>(x + (size_t)p * k + 8 * c));
                        const float4 b = __ldcg(reinterpret_cast<const float4*>(x + (size_t)p * k + 8 * c + 4));
                        va[u] = make_float4(va[u].x + a.x, va[u].y + a.y, va[u].z + a.z, va[u].w + a.w);
                        vb[u] = make_float4(vb[u].x + b.x, vb[u].y + b.y, vb[u].z + b.z, vb[u].w + b.w);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < XU; ++u) {
                const int c = tid + 32 * CW * u;
                if (c < kc) {
                    xa[c] = va[u];
                    xb[c] = vb[u];
                }
            }
            consumers_sync<CW>();
        }
        if (STAMP && blockIdx.x == 0 && tid == 0) stamps[3 * j + 1] = gtimer();
        unsigned my = 0;
        for (int i = (warp + CW - (int)(base % CW)) % CW; i < mine; i += CW, ++my) {
            const unsigned seq = base + i, slot = seq % NS;
            const int t = (int)blockIdx.x + i * (int)gridDim.x, r0 = t / nsl * tr, s = t % nsl;
            const int nr = min(tr, rows - r0);
            if (MODE == 2) {
                if (lane == 0) {
                    mb_wait(sa(full + slot), (seq / NS) & 1);
                    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(sa(empty + slot)) : "memory");
                }
                continue;
            }
            unsigned long long t_ask = 0;
            if (STAMP) t_ask = gtimer();
            mb_wait(sa(full + slot), (seq / NS) & 1);
            if (STAMP && blockIdx.x == 0 && lane == 0 && seq < 2048) {
                stamps[TS + 3 * seq] = t_ask;
                stamps[TS + 3 * seq + 1] = gtimer();
            }
            const uint4* tile = reinterpret_cast<const uint4*>(sm + (size_t)slot * STAGE);
            const int kc = ks / 8, x0 = s * kc;
            float acc[RMAX];
            switch (nr) {  // the rows a compile-time count: every row's loads in flight together
                case 1: dot_rows<1, 4>(tile, xa + x0, xb + x0, kc, lane, acc); break;
                case 2: dot_rows<2, 2>(tile, xa + x0, xb + x0, kc, lane, acc); break;
                case 3: dot_rows<3, 2>(tile, xa + x0, xb + x0, kc, lane, acc); break;
                case 4: dot_rows<4, 1>(tile, xa + x0, xb + x0, kc, lane, acc); break;
                case 5: dot_rows<5, 1>(tile, xa + x0, xb + x0, kc, lane, acc); break;
                case 6: dot_rows<6, 1>(tile, xa + x0, xb + x0, kc, lane, acc); break;
                case 7: dot_rows<7, 1>(tile, xa + x0, xb + x0, kc, lane, acc); break;
                default: dot_rows<8, 1>(tile, xa + x0, xb + x0, kc, lane, acc); break;
            }
            __syncwarp();
            if (lane == 0)  // every lane's reads of the stage are consumed: free it
                asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(sa(empty + slot)) : "memory");
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
#pragma unroll
                for (int r = 0; r < RMAX; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
            if (MODE >= 3) {
#pragma unroll
                for (int r = 0; r < RMAX; ++r) {
                    if (epi == 0 && lane == r && r < nr) st_ll(y + 2 * ((size_t)s * rows + r0 + r), acc[r], e);
                    if (epi == 1 && lane == r && (r & 1) == 0 && r + 1 < nr)
                        st_ll(y + 2 * ((r0 + r) / 2), gelu_tanh(acc[r]) * acc[r + 1], e);
                }
            } else if (epi == 0) {
#pragma unroll
                for (int r = 0; r < RMAX; ++r)
                    if (lane == r && r < nr) y[(size_t)s * rows + r0 + r] = acc[r];
            } else {
#pragma unroll
                for (int r = 0; r + 1 < RMAX; r += 2)
                    if (lane == r && r + 1 < nr) y[(r0 + r) / 2] = gelu_tanh(acc[r]) * acc[r + 1];
            }
            if (STAMP && blockIdx.x == 0 && lane == 0 && seq < 2048) stamps[TS + 3 * seq + 2] = gtimer();
        }
        base += mine;
        if (my && MODE < 3) {  // this warp's outputs stored (warp-ordered), then counted
            __syncwarp();
            if (lane == 0) red_release(done + j, my);
        }
        if (STAMP && blockIdx.x == 0 && tid == 0) stamps[3 * j + 2] = gtimer();
    }
}

// the step launches' attention stand-in: 16 blocks spin ns after the previous kernel (PDL wait)
// The same chain as one launch an op (PDL), to compare LL with PDL's wait where a kernel boundary stays: opk<0>
// waits for the previous launch (griddepcontrol.wait), then reads x plainly; opk<1> never waits, it polls x's LL
// lines (the first launch of a step follows ll_prep, which has no early trigger). Both: warp w of block b takes units
// (a row; epi 1: a gate/up row pair) u = 8b + w, + 8 grid, ..; its first unit's first weights loaded before the wait;
// x formed in shared memory first (the ring's planes). ops as the ring's, whole rows only (ks = k, parts 1).
template <int LL>
__global__ void __launch_bounds__(256) opk(const long long* __restrict__ o, const unsigned* epoch) {
    extern __shared__ float4 xs4[];
    float4* xa = xs4;
    float4* xb = xs4 + KCMAX;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    const __half* W = reinterpret_cast<const __half*>(o[0]);
    const float* x = reinterpret_cast<const float*>(o[1]);
    float* y = reinterpret_cast<float*>(o[2]);
    const int rows = (int)o[3], k = (int)o[4], epi = (int)o[8], kc = k / 8;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tid = threadIdx.x;
    const int units = epi ? rows / 2 : rows, nr = epi ? 2 : 1;
    const int u0 = blockIdx.x * 8 + warp;
    uint4 pf[2][4];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = lane + 32 * i;
            pf[r][i] = (u0 < units && r < nr && c < kc)
                ? __ldcs(reinterpret_cast<const uint4*>(W + (size_t)(u0 * nr + r) * k) + c) : make_uint4(0, 0, 0, 0);
        }
    const unsigned e = LL ? *epoch : 0u;
    if (!LL) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
        for (int c = tid; c < kc; c += 256) {
            xa[c] = __ldcg(reinterpret_cast<const float4*>(x + 8 * c));
            xb[c] = __ldcg(reinterpret_cast<const float4*>(x + 8 * c + 4));
        }
    } else {
        constexpr int B = (KCMAX * 4 + 255) / 256;
        float2 f[B];
        const int n = (k / 2 - tid + 255) / 256;
        ll_pairs<B>(reinterpret_cast<const uint4*>(x), tid, 256, n, e, f);
        float* fa = reinterpret_cast<float*>(xa);
        float* fb = reinterpret_cast<float*>(xb);
#pragma unroll
        for (int i = 0; i < B; ++i) {
            const int q = tid + 256 * i, c = q >> 2, w = (q & 3) * 2;
            if (i < n) *reinterpret_cast<float2*>((w < 4 ? fa + 4 * c + w : fb + 4 * c + w - 4)) = f[i];
        }
    }
    __syncthreads();
    for (int u = u0; u < units; u += gridDim.x * 8) {
        float acc[2] = {0.f, 0.f};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if (r >= nr) break;
            const uint4* wr = reinterpret_cast<const uint4*>(W + (size_t)(u * nr + r) * k);
            float part[4] = {0.f, 0.f, 0.f, 0.f};
            for (int c0 = 0; c0 < kc; c0 += 128) {
                uint4 wv[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int c = c0 + lane + 32 * i;
                    wv[i] = (u == u0 && c0 == 0) ? pf[r][i] : (c < kc ? __ldcs(wr + c) : make_uint4(0, 0, 0, 0));
                }
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int c = c0 + lane + 32 * i;
                    if (c < kc) part[i] += dot8(wv[i], xa[c], xb[c]);
                }
            }
            acc[r] = warp_sum(part[0] + part[1] + part[2] + part[3]);
        }
        if (lane == 0) {
            const float v = epi ? gelu_tanh(acc[0]) * acc[1] : acc[0];
            if (LL) st_ll(y + 2 * u, v, e);
            else y[u] = v;
        }
    }
}

// opk's attention stand-in: 16 blocks; LL: block b polls qkv's pairs 32b .., spins, writes them to o's input
template <int LL>
__global__ void opspin(const long long* __restrict__ o, const unsigned* epoch) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (!LL) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    float2 f[1];
    const unsigned e = LL ? *epoch : 0u;
    if (LL) ll_pairs<1>(reinterpret_cast<const uint4*>(o[1]), 32 * blockIdx.x + threadIdx.x, 0, 1, e, f);
    __syncwarp();
    if (threadIdx.x == 0) {
        const unsigned long long t0 = gtimer();
        while (gtimer() - t0 < (unsigned long long)o[9]) {}
    }
    __syncwarp();
    if (LL) {
        unsigned* out = reinterpret_cast<unsigned*>(o[2]) + 4 * (32 * blockIdx.x + threadIdx.x);
        st_ll2(out, f[0].x, f[0].y, e);
    }
}

// MODE 3's step start: the epoch advanced and x0 rewritten as LL lines of it (one block)
__global__ void ll_prep(unsigned* epoch, const float* x0, unsigned* x0ll, const int n) {
    const unsigned e = *epoch + 1;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        x0ll[2 * i] = __float_as_uint(x0[i]);
        x0ll[2 * i + 1] = e;
    }
    __syncthreads();
    if (threadIdx.x == 0) *epoch = e;
}

__global__ void spin16(const unsigned long long ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    if (threadIdx.x == 0) {
        const unsigned long long t0 = gtimer();
        while (gtimer() - t0 < ns) {}
    }
}
"""
