"""The streaming GEMV `gemv_st<EPI, NW, NR>`: the weight rows of each block copied into a ring of shared-memory
stages by the copy engine (cp.async.bulk, one transaction barrier a stage), NW consumer warps reducing them
(NR rows a warp at once), one producer warp refilling the ring.

Why: `gemv` holds its rows in registers, so each row group is a full memory round trip and a block's next
group is not requested until the current one is reduced; at 2-32 MB its blocks spend the step waiting
(h200_native_ncu_gemma3-1b: 0.6-2.2 TB/s). Here every block owns a contiguous range of rows (EPI_GELU: of
channels, gate rows and their up rows), its first S stages are requested at the kernel's start -- before
`pdl_wait`, while the previous kernel still runs on other SMs -- and a stage is refilled as soon as its rows
are reduced, so the copy engine keeps the block's share of HBM traffic in flight to the end.
Same arguments and results as gemv<NV, RPW, EPI, PF> (EPI_PLAIN with one slice, EPI_GELU), plus the ring's
shape: `stage_units` rows (GELU: channels) a stage and `n_stages` stages. No LM head epilogue.

Part of `native.kernels_src.SOURCE`, which concatenates the parts in order (after common); CUDA C++ in a string.
"""

CODE = r"""
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(unsigned long long* bar, const unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(unsigned long long* bar, const unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait_parity(unsigned long long* bar, const unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
}

// global -> this block's shared memory by the copy engine (16-byte aligned, a multiple of 16 bytes), counted on bar
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, const unsigned bytes, unsigned long long* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

// one warp: the dot products of NR k-element fp16 rows in shared memory with vec (fp32, shared), on every lane;
// the rows' loads and sums interleaved (NR independent chains), each vector load serving all NR rows
template <int NR>
__device__ __forceinline__ void rows_dot(float (&acc)[NR], const __half* const (&row)[NR], const float* vec,
                                         const int k) {
#pragma unroll
    for (int i = 0; i < NR; ++i) acc[i] = 0.f;
#pragma unroll 2
    for (int c = threadIdx.x & 31; c < (k >> 3); c += 32) {
        uint4 w[NR];
#pragma unroll
        for (int i = 0; i < NR; ++i) w[i] = reinterpret_cast<const uint4*>(row[i])[c];
#pragma unroll
        for (int i = 0; i < NR; ++i) acc[i] += dot8(w[i], vec + 8 * c);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int i = 0; i < NR; ++i) acc[i] += __shfl_xor_sync(FULL, acc[i], o);
}

template <int EPI, int NW, int NR>
__global__ void __launch_bounds__((NW + 1) * 32, 1) gemv_st(
    const __half* __restrict__ W, const int n_rows, const int ld, const int k_len,
    const float* src, const __half* x_in, const float x_scale,
    const float* delta, const int delta_parts, const float* delta_w,
    float* resid_out, const float* norm_w, const float eps,
    float* y,                                      // PLAIN [n_rows]; GELU [n_rows]
    __half* logits, const float softcap, float* part_v, long long* part_i,  // unused (gemv's argument list)
    const long long* suppress, const int* n_suppress,
    const int stage_units, const int n_stages)
{
    static_assert(EPI == EPI_PLAIN || EPI == EPI_GELU, "gemv_st: plain or gelu(gate) * up");
    static_assert(NR >= 1 && (EPI != EPI_GELU || NR % 2 == 0), "gemv_st: NR rows a warp at once, (gate, up) pairs");
    constexpr int ROWS = EPI == EPI_GELU ? 2 : 1;  // rows a unit: (gate, up) or one
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ float red[32];
    const size_t row_bytes = (size_t)ld * 2;  // k_len == ld: one slice
    const int vec_bytes = ((4 * k_len + 127) / 128) * 128;
    const int stage_bytes = (int)((((size_t)ROWS * stage_units * row_bytes) + 127) / 128 * 128);
    float* vec = reinterpret_cast<float*>(smem);
    unsigned char* ring = smem + vec_bytes;
    unsigned long long* full = reinterpret_cast<unsigned long long*>(ring + (size_t)n_stages * stage_bytes);
    unsigned long long* empty = full + n_stages;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // this block's units [u0, u1): an even share of the rows (GELU: of the channels)
    const int u0 = (int)((long long)blockIdx.x * n_rows / gridDim.x);
    const int u1 = (int)((long long)(blockIdx.x + 1) * n_rows / gridDim.x);
    const int n_st = (u1 - u0 + stage_units - 1) / stage_units;  // stages this block streams
    if (threadIdx.x == 0) {
        for (int s = 0; s < n_stages; ++s) { mbar_init(full + s, 1); mbar_init(empty + s, NW); }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // visible to the copy engine
    }
    __syncthreads();
    pdl_trigger();
    const bool producer = warp == NW && lane == 0;
    auto issue = [&](const int s) {  // stage s of this block -> ring slot s % n_stages
        const int a = u0 + s * stage_units, n = min(stage_units, u1 - a);
        unsigned char* dst = ring + (size_t)(s % n_stages) * stage_bytes;
        unsigned long long* bar = full + s % n_stages;
        mbar_expect_tx(bar, (unsigned)(ROWS * n * row_bytes));
        bulk_copy(dst, W + (size_t)a * ld, (unsigned)(n * row_bytes), bar);
        if (EPI == EPI_GELU)  // the same channels' up rows, after the stage's stage_units gate rows
            bulk_copy(dst + stage_units * row_bytes, W + (size_t)(a + n_rows) * ld, (unsigned)(n * row_bytes), bar);
    };
    if (producer)
        for (int s = 0; s < min(n_st, n_stages); ++s) issue(s);  // weights only: in flight during the prologue
    pdl_wait();  // the input vector's parts are earlier kernels' outputs
    form_vector(vec, red, k_len, src, x_in, x_scale, delta, delta_parts, delta_w, resid_out, norm_w, eps);
    if (warp == NW) {  // the producer warp: refill each slot once its NW warps released it
        if (lane == 0)
            for (int s = n_stages; s < n_st; ++s) {
                mbar_wait_parity(empty + s % n_stages, (unsigned)((s / n_stages - 1) & 1));
                issue(s);
            }
        return;
    }
    for (int s = 0; s < n_st; ++s) {
        const int slot = s % n_stages, a = u0 + s * stage_units, n = min(stage_units, u1 - a);
        mbar_wait_parity(full + slot, (unsigned)((s / n_stages) & 1));
        const __half* rows = reinterpret_cast<const __half*>(ring + (size_t)slot * stage_bytes);
        // PLAIN: rows r, r + NW, .. (NR at once); GELU: NR / 2 channels, their gate and up rows
        constexpr int PER = EPI == EPI_GELU ? NR / 2 : NR;
        for (int r = warp; r < n; r += NW * PER) {
            const __half* row[NR];
            float acc[NR];
#pragma unroll
            for (int i = 0; i < PER; ++i) {
                const int q = min(r + i * NW, n - 1);  // past the stage's last row: a repeat, not stored
                row[i] = rows + (size_t)q * ld;
                if (EPI == EPI_GELU) row[PER + i] = rows + (size_t)(stage_units + q) * ld;
            }
            rows_dot<NR>(acc, row, vec, k_len);
#pragma unroll
            for (int i = 0; i < PER; ++i)
                if (lane == 0 && r + i * NW < n)
                    y[a + r + i * NW] = EPI == EPI_GELU ? gelu_tanh(acc[i]) * acc[PER + i] : acc[i];
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + slot);
    }
}

"""
