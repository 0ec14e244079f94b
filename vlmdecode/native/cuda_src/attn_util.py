"""Device helpers of `attention_cl` (`cuda_src.attn_split`): distributed shared memory of a thread-block
cluster (address mapping, remote stores, split barrier), the transposing butterfly sum `XSum`, fp16 <-> fp32
packs, L2-only loads, and the batch loader of cached K/V rows.

Part of `native.kernels_src.SOURCE`, which concatenates the parts in order; CUDA C++ in a string.
"""

CODE = r"""
#define LOG2E_F 1.4426950408889634f

__host__ __device__ constexpr int pow2_ceil(const int n) { return n <= 1 ? 1 : 2 * pow2_ceil((n + 1) / 2); }

// distributed shared memory: a shared-memory address of this block -> the same address in block `rank`
// of the cluster; stores to it; the cluster barrier (also a barrier of this block's threads, and what makes
// the stores visible)
#ifndef __cluster_dims__
#define __cluster_dims__(...) __attribute__((cluster_dims(__VA_ARGS__)))
#endif

__device__ __forceinline__ unsigned dsmem(const void* p, const unsigned rank) {
    unsigned a, r;
    asm("{\n\t.reg .u64 t;\n\tcvta.to.shared.u64 t, %1;\n\tcvt.u32.u64 %0, t;\n\t}" : "=r"(a) : "l"(p));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}

__device__ __forceinline__ void st_dsmem2(const unsigned a, const float x, const float y) {
    asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" :: "r"(a), "f"(x), "f"(y) : "memory");
}

__device__ __forceinline__ void st_dsmem4(const unsigned a, const float4 v) {
    asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" :: "r"(a), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
}

// split barrier phase: arrive early, wait before the first access to another block's shared memory (which
// needs every block of the cluster to have started)
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }

__device__ __forceinline__ void cluster_barrier() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// s[0, N) summed over the lanes that differ in bits < 2O: each level a lane keeps the half of its values
// that its bit O selects and adds the partner's copy of that half. After it, value number
// i + max(1, N / 2O) * (lane_bits / max(1, 2O / N)) sits in s[i], i < max(1, N / 2O).
template <int O, int N>
struct XSum {
    static __device__ __forceinline__ void run(float* s, const int lane) {
        if constexpr (O > 0) {
            if constexpr (N > 1) {
                constexpr int H = N / 2;
                const bool up = lane & O;
#pragma unroll
                for (int i = 0; i < H; ++i) {
                    const float send = up ? s[i] : s[i + H];
                    const float keep = up ? s[i + H] : s[i];
                    s[i] = keep + __shfl_xor_sync(FULL, send, O);
                }
                XSum<O / 2, H>::run(s, lane);
            } else {
                s[0] += __shfl_xor_sync(FULL, s[0], O);
                XSum<O / 2, 1>::run(s, lane);
            }
        }
    }
};

__device__ __forceinline__ void h8_to_f(const uint4 u, float* f) {
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float2 v = __half22float2(h[e]);
        f[2 * e] = v.x;
        f[2 * e + 1] = v.y;
    }
}

__device__ __forceinline__ uint4 f_to_h8(const float* f) {
    uint4 u;
    __half2* h = reinterpret_cast<__half2*>(&u);
#pragma unroll
    for (int e = 0; e < 4; ++e) h[e] = __floats2half2_rn(f[2 * e], f[2 * e + 1]);
    return u;
}

__device__ __forceinline__ void ld8(const float* p, float* f) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

// the same through L2 only (ld.global.cg): for data another kernel of the step wrote (never the
// non-coherent read-only path, never a line an L1 may hold from before the write)
__device__ __forceinline__ void ld8_cg(const float* p, float* f) {
    const float4 a = __ldcg(reinterpret_cast<const float4*>(p)), b = __ldcg(reinterpret_cast<const float4*>(p) + 1);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

// the half-split rotary's partner dims of a lane's 8 x VPL dims (d + HD/2 or d - HD/2) from the row it already
// holds: lane l's slice v starts at dim 8 (l + LPK v), so with VPL 1 the partner is lane l ^ LPK/2 of the same
// sub-group (a shuffle, the whole warp: call it warp-uniformly), with VPL >= 2 slice v ^ VPL/2 of the same lane
template <int VPL, int LPK>
__device__ __forceinline__ void partner_dims(const float* x, float* xp) {
    static_assert(VPL > 1 || LPK > 1, "attention_cl takes head_dim >= 16 (partner dims in another lane or slice)");
    if constexpr (VPL == 1) {
#pragma unroll
        for (int e = 0; e < 8; ++e) xp[e] = __shfl_xor_sync(FULL, x[e], LPK / 2);
    } else {
#pragma unroll
        for (int v = 0; v < VPL; ++v)
#pragma unroll
            for (int e = 0; e < 8; ++e) xp[8 * v + e] = x[8 * (v ^ (VPL / 2)) + e];
    }
}

// batch b of a sub-group's cached keys into registers, zeros past cnt: key number n is position
// lo + slot + W n, at row (r0 + slot + W n) mod cap (r0 = lo mod cap, slot + W n < cap)
template <int KB, int VPL, int LPK>
__device__ __forceinline__ void load_batch(uint4 (&kr)[KB][VPL], uint4 (&vr)[KB][VPL], const __half* K,
                                           const __half* V, const size_t lane0, const int row0, const int W,
                                           const int cap, const int b, const int cnt, const int HD) {
#pragma unroll
    for (int i = 0; i < KB; ++i) {
        const int n = b * KB + i;
        int row = row0 + W * n;
        row -= row >= cap ? cap : 0;
        const size_t at = lane0 + (size_t)row * HD;
#pragma unroll
        for (int v = 0; v < VPL; ++v) {
            const uint4 z = make_uint4(0u, 0u, 0u, 0u);
            kr[i][v] = n < cnt ? __ldcg(reinterpret_cast<const uint4*>(K + at + v * LPK * 8)) : z;
            vr[i][v] = n < cnt ? __ldcg(reinterpret_cast<const uint4*>(V + at + v * LPK * 8)) : z;
        }
    }
}

"""
