"""The native decode-attention kernel `attention_cl<HD, G, KB, C, NW>`: q/k RMSNorm + rotary + KV append + the
visible keys split over the grid's sub-groups of lanes (NW warps a block), combined in three levels (the
sub-groups of a block in shared memory, the C blocks of a thread-block cluster through distributed shared
memory, the clusters of a KV head by the last block to finish). The grid holds the clusters the most keys need;
at position t only the first `live` = min(clusters, (visible keys - 1) / ckeys + 1) of them work (ckeys 0: all),
the others exit at once, so a short context pays neither their blocks' work nor the clusters' combine. Position p
sits at row p % capacity.

Layout: a sub-group of LPK lanes holds one key row at a time (8 x VPL dims a lane, 16-byte loads), its q
heads in registers (every warp normalises and rotates q and the new k itself: no shared memory and no
block barrier before the scores). Sub-group `slot` of a KV head's W takes the cached keys lo + slot + W i;
key t (the new one, never read from the cache) joins sub-group (t - lo) % W (one with the fewest) after its
batches, from registers. Cached keys go in batches of KB; the first batch's K/V loads are issued before
`pdl_wait` (earlier positions' rows only), and where the registers fit (KB x VPL <= 4: no spills) each next batch's
while the current one is reduced, so a long window's batches are not one dependent round trip each.
Scores of a batch (G x KB values a lane) are summed across the sub-group by a transposing butterfly (each
level halves the values a lane keeps: ~G x KB shuffles instead of G x KB x log2 LPK), softmax runs in the
log2 domain with an online max per head, and p @ V accumulates in fp32 registers. qkv (the previous
kernel's output) is read only after the wait, through L2 (its address laundered through an asm so that
no load of it can be scheduled above the wait). Helpers: `cuda_src.attn_util`.

Part of `native.kernels_src.SOURCE`, which concatenates the parts in order; CUDA C++ in a string.
"""

CODE = r"""
// part (live > 1 clusters a KV head): o [nq][ncl][HD] unnormalised, then (max log2, sum) [nq][ncl][2]
template <int HD, int G, int KB, int C, int NW>
__global__ void __launch_bounds__(NW * 32, 1) __cluster_dims__(C, 1, 1) attention_cl(
    const float* qkv_in, const int nq, const int nkv,              // qkv [(nq + 2 nkv) * HD]: q, k, v
    const float* q_norm, const float* k_norm, const float eps,     // [HD] effective, or NULL
    const float* rope_cos, const float* rope_sin,                 // [max_pos, HD / 2]
    const long long* pos,                                          // [1]: this token's position t
    __half* K, __half* V, const int cap,                           // [nkv, cap, HD]: position p at row p % cap
    const int window, const float scale, const float softcap, const int ckeys,  // window 0: all keys; ckeys: keys
    // a cluster takes before the next cluster of the KV head joins (0: every cluster of the grid works)
    float* part, int* counter, float* out                          // counter [nkv]: 0 between launches
    STAMP_PARAM)
{
    constexpr int VPL = HD >= 256 ? HD / 256 : 1;  // uint4 per lane per key
    constexpr int LPK = HD / (8 * VPL);            // lanes per key (a sub-group)
    constexpr int KPW = 32 / LPK;                  // sub-groups a warp
    constexpr int UNITS = NW * KPW;                // sub-groups a block
    constexpr int E = 8 * VPL;                     // dims a lane
    constexpr int HALF = HD / 2;
    constexpr int NP = pow2_ceil(G * KB);          // a batch's scores, padded to a power of two
    constexpr int R = NP > LPK ? NP / LPK : 1;     // of them a lane holds after the butterfly
    constexpr int D = NP < LPK ? LPK / NP : 1;     // lanes holding each
    constexpr int RK = R < KB ? R : KB;            // one head's scores in a lane's registers
    constexpr int HL = R > KB ? R / KB : 1;        // heads a lane holds
    constexpr int NT = pow2_ceil(G);               // key t's scores (one a head), padded
    constexpr int RT = NT > LPK ? NT / LPK : 1, DT = NT < LPK ? LPK / NT : 1;
    constexpr int Q4 = G * HD / 4;                 // float4s of a KV head's output
    constexpr int PER = (Q4 + C - 1) / C;          // of them each block of a cluster combines
    constexpr bool DB = KB * VPL <= 4;             // double-buffered batches: 8 more uint4 a lane at most
    extern __shared__ float4 sm4[];
    __shared__ int last;
    const int g = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int sub = lane / LPK, l = lane % LPK, u = warp * KPW + sub;
    float* wo = reinterpret_cast<float*>(sm4);  // [UNITS][G][HD] each sub-group's unnormalised o
    float4* rx = reinterpret_cast<float4*>(wo + UNITS * G * HD);  // [C][PER] the cluster's blocks' o, my slice
    float2* rxm = reinterpret_cast<float2*>(rx + C * PER);         // [C][G] their (max, sum)
    float* pb = reinterpret_cast<float*>(rxm + (C * G + 1) / 2 * 2);  // [UNITS][NP] a batch's probabilities
    float* ab = pb + UNITS * NP;                // [UNITS][G] a batch's rescale of o
    float* mb = ab + UNITS * G;                 // [UNITS][G] running max (log2 domain)
    float* wl = mb + UNITS * G;                 // [UNITS][G] running sum
    const int t = (int)__ldcg(pos);  // positions fit in 32 bits
    const int lo = window > 0 ? max(0, t - window + 1) : 0;
    const int nmem = t - lo;                      // cached keys lo .. t - 1 (key t comes from qkv)
    const int ncl = gridDim.x / C, cl = blockIdx.x / C;  // clusters a KV head, this block's
    const int live = ckeys > 0 ? min(ncl, nmem / ckeys + 1) : ncl;  // of them working at t (nmem + 1 keys visible)
    if (cl >= live) {  // the whole cluster exits: none of its barriers is pending
        STAMP(0);
        STAMP_END();
        return;
    }
    const int W = live * C * UNITS;              // sub-groups of this KV head at work
    const int slot = blockIdx.x * UNITS + u;
    const int cnt = nmem > slot ? (nmem - slot + W - 1) / W : 0;  // its cached keys lo + slot + W n, n < cnt
    const bool own = slot == nmem % W;            // one of the sub-groups with the fewest takes key t too
    const bool tail = __any_sync(FULL, own);      // this warp holds it
    int most = cnt;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) most = max(most, __shfl_xor_sync(FULL, most, o));
    const int nb = (most + KB - 1) / KB;  // warp-uniform batch count
    const size_t base = (size_t)g * cap * HD;
    const int row0 = lo % cap + slot;  // position p sits at row p mod cap (the identity while t < cap)
    const size_t lane0 = base + l * 8;
    STAMP(0);
    pdl_trigger();
    cluster_arrive_relaxed();  // this block has started (waited on before the first remote store, step 4)
    // 0. the first batch of cached keys and values (earlier positions), norm weights and rotary at t
    uint4 kr[KB][VPL], vr[KB][VPL];
    load_batch<KB, VPL, LPK>(kr, vr, K, V, lane0, row0, W, cap, 0, cnt, HD);
    int dd[VPL], dp[VPL];  // this lane's 8-dim slices and their rotary partners
#pragma unroll
    for (int v = 0; v < VPL; ++v) {
        dd[v] = (l + LPK * v) * 8;
        dp[v] = dd[v] < HALF ? dd[v] + HALF : dd[v] - HALF;
    }
    float cs[E], sn[E], qw[E], qwp[E], kw[E], kwp[E];
#pragma unroll
    for (int v = 0; v < VPL; ++v) {
        const int r = dd[v] < HALF ? dd[v] : dp[v];
        ld8(rope_cos + (size_t)t * HALF + r, cs + 8 * v);
        ld8(rope_sin + (size_t)t * HALF + r, sn + 8 * v);
        if (q_norm != NULL) { ld8(q_norm + dd[v], qw + 8 * v); ld8(q_norm + dp[v], qwp + 8 * v); }
        if (k_norm != NULL && tail) { ld8(k_norm + dd[v], kw + 8 * v); ld8(k_norm + dp[v], kwp + 8 * v); }
    }
    keep_param_reads((unsigned long long)qkv_in ^ (unsigned long long)part ^ (unsigned long long)counter
                         ^ (unsigned long long)out,
                     __float_as_uint(scale) ^ __float_as_uint(softcap) ^ __float_as_uint(eps) ^ (unsigned int)nq, out);
    pdl_wait();  // qkv is the previous kernel's output
    STAMP(1);
    const float* qkv;  // its address only from here on: no load of it can be scheduled above the wait
    asm volatile("mov.b64 %0, %1;" : "=l"(qkv) : "l"(qkv_in) : "memory");
    // 1. q heads (and k in the warp holding key t): RMSNorm (sum over the sub-group), half-split rotary with
    // the partner dims taken from the lane (or slice) that loaded them
    float q[G][E], kn[E], vn[E];
#pragma unroll
    for (int r = 0; r <= G; ++r) {
        if (r == G && !tail) break;
        const float* s = qkv + (size_t)(r < G ? g * G + r : nq + g) * HD;
        const float* w = r < G ? q_norm : k_norm;
        float x[E], xp[E];
#pragma unroll
        for (int v = 0; v < VPL; ++v) ld8_cg(s + dd[v], x + 8 * v);
        partner_dims<VPL, LPK>(x, xp);  // each row read once per lane: half the L2 bytes of loading dp too
        float inv = 1.f;
        if (w != NULL) {
            float ss = 0.f;
#pragma unroll
            for (int e = 0; e < E; ++e) ss = fmaf(x[e], x[e], ss);
#pragma unroll
            for (int o = LPK / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(FULL, ss, o);
            inv = rsqrtf(ss / HD + eps);
        }
#pragma unroll
        for (int v = 0; v < VPL; ++v)
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int i = 8 * v + e;
                float a = x[i] * inv, b = xp[i] * inv;
                if (w != NULL) { a *= r < G ? qw[i] : kw[i]; b *= r < G ? qwp[i] : kwp[i]; }
                const float y = dd[v] < HALF ? a * cs[i] - b * sn[i] : a * cs[i] + b * sn[i];
                if (r < G) q[r][i] = y;
                else kn[i] = __half2float(__float2half_rn(y));  // as the cache holds it
            }
    }
    if (tail) {
#pragma unroll
        for (int v = 0; v < VPL; ++v) {
            ld8_cg(qkv + (size_t)(nq + nkv + g) * HD + dd[v], vn + 8 * v);
#pragma unroll
            for (int e = 0; e < 8; ++e) vn[8 * v + e] = __half2float(__float2half_rn(vn[8 * v + e]));
        }
        if (own)  // the sub-group holding key t appends it at row t mod cap, which no block of this launch reads
#pragma unroll
            for (int v = 0; v < VPL; ++v) {
                *reinterpret_cast<uint4*>(K + base + (size_t)(t % cap) * HD + dd[v]) = f_to_h8(kn + 8 * v);
                *reinterpret_cast<uint4*>(V + base + (size_t)(t % cap) * HD + dd[v]) = f_to_h8(vn + 8 * v);
            }
    }
    STAMP(3);  // q / k normalised and rotated, key t appended
    // 2. batches of cached keys: scores, online softmax (log2 domain, running max m of every head in every
    // lane, sums in the lanes holding a head), p @ V into fp32 registers
    const float sc = softcap > 0.f ? scale : scale * LOG2E_F;
    const int i0 = R * (l / D);  // number of the first score this lane holds after the butterfly
    const bool writer = l % D == 0 && i0 % KB == 0;  // writes its heads' rescale, max and sum
    float acc[G][E], m[G], lh[HL];
#pragma unroll
    for (int h = 0; h < G; ++h) {
        m[h] = -INF_F;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[h][e] = 0.f;
    }
#pragma unroll
    for (int hh = 0; hh < HL; ++hh) lh[hh] = 0.f;
    for (int b = 0; b < nb; ++b) {
        uint4 kq[KB][VPL], vq[KB][VPL];  // DB: batch b + 1, in flight while batch b is reduced
        if constexpr (DB) {
            if (b + 1 < nb) load_batch<KB, VPL, LPK>(kq, vq, K, V, lane0, row0, W, cap, b + 1, cnt, HD);
        } else if (b > 0) {
            load_batch<KB, VPL, LPK>(kr, vr, K, V, lane0, row0, W, cap, b, cnt, HD);
        }
        float s[NP];
#pragma unroll
        for (int i = G * KB; i < NP; ++i) s[i] = 0.f;
#pragma unroll
        for (int i = 0; i < KB; ++i) {
            float kf[E];
#pragma unroll
            for (int v = 0; v < VPL; ++v) h8_to_f(kr[i][v], kf + 8 * v);
#pragma unroll
            for (int h = 0; h < G; ++h) {
                float d = 0.f;
#pragma unroll
                for (int e = 0; e < E; ++e) d = fmaf(kf[e], q[h][e], d);
                s[h * KB + i] = d;
            }
        }
        XSum<LPK / 2, NP>::run(s, l);
        float x[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int idx = i0 + r, i = idx % KB;
            float y = s[r] * sc;
            if (softcap > 0.f) y = softcap * tanhf(y / softcap) * LOG2E_F;
            x[r] = idx < G * KB && b * KB + i < cnt ? y : -INF_F;
        }
        __syncwarp();  // the previous batch's reads of pb / ab / mb are done
#pragma unroll
        for (int hh = 0; hh < HL; ++hh) {
            const int h = i0 / KB + hh;
            float mo = -INF_F;
#pragma unroll
            for (int h2 = 0; h2 < G; ++h2) mo = h2 == h ? m[h2] : mo;
            float bmx = -INF_F;
#pragma unroll
            for (int r = 0; r < RK; ++r) bmx = fmaxf(bmx, x[hh * RK + r]);
#pragma unroll
            for (int o = D; o < D * (KB / RK); o <<= 1) bmx = fmaxf(bmx, __shfl_xor_sync(FULL, bmx, o));
            const float mn = fmaxf(mo, bmx);
            const float a = mn == -INF_F ? 1.f : exp2f(mo - mn);
            float ps = 0.f;
#pragma unroll
            for (int r = 0; r < RK; ++r) {
                const float y = x[hh * RK + r];
                const float p = y == -INF_F ? 0.f : exp2f(y - mn);
                x[hh * RK + r] = p;
                ps += p;
            }
#pragma unroll
            for (int o = D; o < D * (KB / RK); o <<= 1) ps += __shfl_xor_sync(FULL, ps, o);
            lh[hh] = fmaf(lh[hh], a, ps);
            if (writer && h < G) { ab[u * G + h] = a; mb[u * G + h] = mn; }
        }
        if (l % D == 0)
#pragma unroll
            for (int r = 0; r < R; ++r) pb[u * NP + i0 + r] = x[r];
        __syncwarp();
        float p[NP], a[G];
        if constexpr (NP % 4 == 0) {
#pragma unroll
            for (int i = 0; i < NP / 4; ++i) {
                const float4 f = reinterpret_cast<const float4*>(pb + u * NP)[i];
                p[4 * i] = f.x; p[4 * i + 1] = f.y; p[4 * i + 2] = f.z; p[4 * i + 3] = f.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < NP; ++i) p[i] = pb[u * NP + i];
        }
#pragma unroll
        for (int h = 0; h < G; ++h) { a[h] = ab[u * G + h]; m[h] = mb[u * G + h]; }
#pragma unroll
        for (int h = 0; h < G; ++h)
#pragma unroll
            for (int e = 0; e < E; ++e) acc[h][e] *= a[h];
#pragma unroll
        for (int i = 0; i < KB; ++i) {
            float vf[E];
#pragma unroll
            for (int v = 0; v < VPL; ++v) h8_to_f(vr[i][v], vf + 8 * v);
#pragma unroll
            for (int h = 0; h < G; ++h)
#pragma unroll
                for (int e = 0; e < E; ++e) acc[h][e] = fmaf(p[h * KB + i], vf[e], acc[h][e]);
        }
        if constexpr (DB)
            if (b + 1 < nb)
#pragma unroll
                for (int i = 0; i < KB; ++i)
#pragma unroll
                    for (int v = 0; v < VPL; ++v) { kr[i][v] = kq[i][v]; vr[i][v] = vq[i][v]; }
    }
    // 3. key t, from registers, into the running softmax of the sub-group that owns it (its warp only)
    if (tail) {
        float st[NT];
#pragma unroll
        for (int h = 0; h < NT; ++h) {
            float d = 0.f;
            if (h < G)
#pragma unroll
                for (int e = 0; e < E; ++e) d = fmaf(kn[e], q[h][e], d);
            st[h] = d;
        }
        XSum<LPK / 2, NT>::run(st, l);
        __syncwarp();
        if (l % DT == 0)
#pragma unroll
            for (int r = 0; r < RT; ++r) pb[u * NP + RT * (l / DT) + r] = st[r];
        __syncwarp();
        float pt[G], at[G];
#pragma unroll
        for (int h = 0; h < G; ++h) {
            float y = pb[u * NP + h] * sc;
            if (softcap > 0.f) y = softcap * tanhf(y / softcap) * LOG2E_F;
            y = own ? y : -INF_F;
            const float mn = fmaxf(m[h], y);
            at[h] = mn == -INF_F ? 1.f : exp2f(m[h] - mn);
            pt[h] = y == -INF_F ? 0.f : exp2f(y - mn);
            m[h] = mn;
#pragma unroll
            for (int e = 0; e < E; ++e) acc[h][e] = fmaf(pt[h], vn[e], acc[h][e] * at[h]);
        }
#pragma unroll
        for (int hh = 0; hh < HL; ++hh) {
            const int h = i0 / KB + hh;
#pragma unroll
            for (int h2 = 0; h2 < G; ++h2)
                if (h2 == h) lh[hh] = fmaf(lh[hh], at[h2], pt[h2]);
        }
    }
    STAMP(4);  // every batch and key t folded in (thread 0's sub-group)
    // 4. each sub-group's partial -> shared memory; the block's partial over its sub-groups
#pragma unroll
    for (int h = 0; h < G; ++h)
#pragma unroll
        for (int v = 0; v < VPL; ++v) {
            float4* d = reinterpret_cast<float4*>(wo + (u * G + h) * HD + dd[v]);
            d[0] = make_float4(acc[h][8 * v], acc[h][8 * v + 1], acc[h][8 * v + 2], acc[h][8 * v + 3]);
            d[1] = make_float4(acc[h][8 * v + 4], acc[h][8 * v + 5], acc[h][8 * v + 6], acc[h][8 * v + 7]);
        }
    __syncwarp();  // every lane has read mb (step 2) before it is overwritten with the final max
    if (l == 0)
#pragma unroll
        for (int h = 0; h < G; ++h) mb[u * G + h] = m[h];
#pragma unroll
    for (int hh = 0; hh < HL; ++hh) {
        const int h = i0 / KB + hh;
        if (writer && h < G) wl[u * G + h] = lh[hh];
    }
    __syncthreads();
    STAMP(5);  // the block's sub-groups in shared memory
    cluster_wait();  // every block of the cluster has started: its shared memory may be written
    const int rank = blockIdx.x % C;
    for (int e = tid; e < Q4; e += NW * 32) {
        const int h = e / (HD / 4);
        float M = -INF_F, L = 0.f;
#pragma unroll
        for (int w = 0; w < UNITS; ++w) M = fmaxf(M, mb[w * G + h]);
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
        for (int w = 0; w < UNITS; ++w) {
            const float mw = mb[w * G + h], f = mw == -INF_F ? 0.f : exp2f(mw - M);
            const float4 y = reinterpret_cast<const float4*>(wo)[w * Q4 + e];
            L = fmaf(f, wl[w * G + h], L);
            o.x = fmaf(f, y.x, o.x); o.y = fmaf(f, y.y, o.y); o.z = fmaf(f, y.z, o.z); o.w = fmaf(f, y.w, o.w);
        }
        // pushed to the block that combines float4 e, and the head's (max, sum) to every block
        st_dsmem4(dsmem(rx + rank * PER + e % PER, e / PER), o);
        if (e % (HD / 4) == 0)
#pragma unroll
            for (int c = 0; c < C; ++c) st_dsmem2(dsmem(rxm + rank * G + h, c), M, L);
    }
    // 5. the cluster's partial: block `rank` combines float4s [rank PER, (rank + 1) PER) over the C blocks,
    // from its own shared memory (no block reads another's after the barrier: they may exit)
    cluster_barrier();
    STAMP(6);  // every block's partial pushed to the cluster
    for (int e = rank * PER + tid; e < min(Q4, (rank + 1) * PER); e += NW * 32) {
        const int h = e / (HD / 4), d4 = e % (HD / 4);
        float mc[C], lc[C];
        float4 oc[C];
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const float2 ml = rxm[c * G + h];
            mc[c] = ml.x;
            lc[c] = ml.y;
            oc[c] = rx[c * PER + e - rank * PER];
        }
        float M = -INF_F, L = 0.f;
#pragma unroll
        for (int c = 0; c < C; ++c) M = fmaxf(M, mc[c]);
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const float f = mc[c] == -INF_F ? 0.f : exp2f(mc[c] - M);
            L = fmaf(f, lc[c], L);
            o.x = fmaf(f, oc[c].x, o.x); o.y = fmaf(f, oc[c].y, o.y);
            o.z = fmaf(f, oc[c].z, o.z); o.w = fmaf(f, oc[c].w, o.w);
        }
        if (live == 1) {
            const float r = 1.f / L;
            reinterpret_cast<float4*>(out)[g * Q4 + e] = make_float4(o.x * r, o.y * r, o.z * r, o.w * r);
        } else {
            const size_t row = (size_t)(g * G + h) * ncl + cl;
            reinterpret_cast<float4*>(part + row * HD)[d4] = o;
            if (d4 == 0) {
                float* ml = part + (size_t)nq * ncl * HD + row * 2;
                ml[0] = M;
                ml[1] = L;
            }
            __threadfence();
        }
    }
    if (live == 1) { STAMP_END(); return; }
    // 6. the last block of this KV head's live clusters to finish combines their partials, resets the counter
    __syncthreads();
    if (tid == 0) last = atomicAdd(counter + g, 1) == live * C - 1;
    __syncthreads();
    if (!last) { STAMP_END(); return; }
    __threadfence();
    for (int f = tid; f < Q4; f += NW * 32) {  // one pass, online max: 8 partials' loads in flight at once
        const int h = f / (HD / 4), d4 = f % (HD / 4);
        const size_t row0 = (size_t)(g * G + h) * ncl;
        const float2* ml = reinterpret_cast<const float2*>(part + (size_t)nq * ncl * HD) + row0;
        float M = -INF_F, L = 0.f;
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
        for (int c = 0; c < live; ++c) {
            const float2 m = __ldcg(ml + c);
            const float4 y = __ldcg(reinterpret_cast<const float4*>(part + (row0 + c) * HD) + d4);
            const float Mn = fmaxf(M, m.x);
            const float fa = M == -INF_F ? 0.f : exp2f(M - Mn), fb = m.x == -INF_F ? 0.f : exp2f(m.x - Mn);
            L = L * fa + m.y * fb;
            o.x = o.x * fa + y.x * fb; o.y = o.y * fa + y.y * fb; o.z = o.z * fa + y.z * fb; o.w = o.w * fa + y.w * fb;
            M = Mn;
        }
        const float r = 1.f / L;
        reinterpret_cast<float4*>(out)[g * Q4 + f] = make_float4(o.x * r, o.y * r, o.z * r, o.w * r);
    }
    if (tid == 0) counter[g] = 0;
    STAMP_END();
}

"""
