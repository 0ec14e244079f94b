"""The native GEMV kernel `gemv<NV, RPW, EPI, PF>` and its row helpers (epilogues: plain / split-K,
gelu(gate) * up, LM head with argmax partials); `gemv_split<NV, RPW>`: gate|up with half the warps' first rows in
flight while the other half forms the vector.

Part of `native.kernels_src.SOURCE`, which concatenates the parts in order; CUDA C++ in a string.
"""

CODE = r"""// rows of one warp in group g; EPI_GELU: RPW / 2 gate rows j.. and their up rows j + n_rows..
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

// form_vector's parameters touched before pdl_wait (keep_param_reads)
__device__ __forceinline__ void touch_params(const float* src, const __half* x_in, const float* delta,
                                             const float* delta_w, float* resid_out, const float* norm_w, float* y,
                                             const float x_scale, const float eps, const int delta_parts,
                                             const int k_len) {
    keep_param_reads((unsigned long long)src ^ (unsigned long long)x_in ^ (unsigned long long)delta
                         ^ (unsigned long long)delta_w ^ (unsigned long long)resid_out ^ (unsigned long long)norm_w
                         ^ (unsigned long long)y,
                     __float_as_uint(x_scale) ^ __float_as_uint(eps) ^ (unsigned int)delta_parts ^ (unsigned int)k_len,
                     y);
}

template <int NV, int RPW, int EPI, int PF>
__global__ void __launch_bounds__(256) gemv(
    const __half* __restrict__ W, const int n_rows, const int ld, const int k_len,
    const float* src, const __half* x_in, const float x_scale,
    const float* delta, const int delta_parts, const float* delta_w,
    float* resid_out, const float* norm_w, const float eps,
    float* y,                                      // PLAIN [gridDim.y, n_rows]; GELU [n_rows]
    __half* logits, const float softcap, float* part_v, long long* part_i,  // HEAD
    const long long* suppress, const int* n_suppress  // HEAD: ids the argmax skips ([n_suppress[0]], or NULL)
    STAMP_PARAM)
{
    extern __shared__ float vec[];
    __shared__ float red[32];
    __shared__ float best_v[32];
    __shared__ long long best_i[32];
    const int lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
    const int k0 = blockIdx.y * k_len;
    static_assert(EPI != EPI_GELU || RPW % 2 == 0, "GELU rows come in (gate, up) pairs");
    const int per_group = nwarps * (EPI == EPI_GELU ? RPW / 2 : RPW);
    const int n_groups = (n_rows + per_group - 1) / per_group;
    const int row_end = EPI == EPI_GELU ? 2 * n_rows : n_rows;
    int row[RPW];
    uint4 w[RPW][NV];
    int g = blockIdx.x;
    warp_rows<RPW, EPI>(row, g, n_rows);
    STAMP(0);
    pdl_trigger();
    if (PF) load_rows<NV, RPW>(w, W, row, row_end, ld, k0, k_len);  // in flight during the prologue
    if (EPI == EPI_GELU || NV >= 5)  // the folding GEMVs (qkv, gate|up, LM head): every form_vector parameter
        touch_params(src, x_in, delta, delta_w, resid_out, norm_w, y, x_scale, eps, delta_parts, k_len);
    else  // o and down: only what their plain vector and stores read (all: more registers, fold_ptxas_2d8dc3e.txt)
        keep_param_reads((unsigned long long)src ^ (unsigned long long)norm_w ^ (unsigned long long)y,
                         (unsigned int)k_len, y);
    pdl_wait();  // the input vector's parts are earlier kernels' outputs
    STAMP(1);
    form_vector<EPI != EPI_GELU && NV >= 5>(vec, red, k_len, src == NULL ? NULL : src + (norm_w == NULL ? k0 : 0),
                                            x_in, x_scale, delta, delta_parts, delta_w, resid_out, norm_w, eps);
    float bv = -INF_F;
    long long bi = NO_INDEX;
    bool bad = false;
    const int ns = (EPI == EPI_HEAD && n_suppress != NULL) ? n_suppress[0] : 0;
    for (; g < n_groups; g += gridDim.x) {
        if (PF == 0 || (PF == 1 && g != (int)blockIdx.x)) {  // PF 0: fewer live registers in the prologue
            warp_rows<RPW, EPI>(row, g, n_rows);
            load_rows<NV, RPW>(w, W, row, row_end, ld, k0, k_len);
        }
        // PF 2: the next group's rows are in flight while this group's are reduced (double-buffered)
        int row_next[RPW];
        uint4 w_next[RPW][NV];
        if (PF == 2 && g + (int)gridDim.x < n_groups) {
            warp_rows<RPW, EPI>(row_next, g + gridDim.x, n_rows);
            load_rows<NV, RPW>(w_next, W, row_next, row_end, ld, k0, k_len);
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
        if (PF == 2 && g + (int)gridDim.x < n_groups) {
#pragma unroll
            for (int i = 0; i < RPW; ++i) {
                row[i] = row_next[i];
#pragma unroll
                for (int j = 0; j < NV; ++j) w[i][j] = w_next[i][j];
            }
        }
    }
    if (EPI == EPI_HEAD) {
        block_partial(bv, bi, bad, best_v, best_i, part_v, part_i);
    }
    STAMP_END();
}

// one row group of gate|up from registers: gelu(gate) * up of this warp's pairs -> y
template <int NV, int RPW>
__device__ __forceinline__ void gelu_group(const uint4 (&w)[RPW][NV], const int (&row)[RPW], const float* vec,
                                           float* y, const int n_rows, const int k_len) {
    const int lane = threadIdx.x & 31;
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
#pragma unroll
    for (int i = 0; i < RPW / 2; ++i)
        if (lane == 0 && row[i] < n_rows) y[row[i]] = gelu_tanh(acc[i]) * acc[RPW / 2 + i];
}

// gemv<NV, RPW, EPI_GELU, *>'s rows and sums with the vector formed by the first half of the warps (fold_half)
// while the second half's first row groups are in flight: those warps load before pdl_wait and reduce their first
// group in a branch of their own, so no thread holds weights and the fold's registers at once. The same parameters
// as gemv (the LM head's unused).
template <int NV, int RPW>
__global__ void __launch_bounds__(256) gemv_split(
    const __half* __restrict__ W, const int n_rows, const int ld, const int k_len,
    const float* src, const __half* x_in, const float x_scale,
    const float* delta, const int delta_parts, const float* delta_w,
    float* resid_out, const float* norm_w, const float eps,
    float* y,                                      // [n_rows]
    __half* logits, const float softcap, float* part_v, long long* part_i,
    const long long* suppress, const int* n_suppress
    STAMP_PARAM)
{
    static_assert(RPW % 2 == 0, "GELU rows come in (gate, up) pairs");
    extern __shared__ float vec[];
    __shared__ float red[32];
    const int nwarps = blockDim.x >> 5, T = (nwarps / 2) * 32;
    const int per_group = nwarps * (RPW / 2);
    const int n_groups = (n_rows + per_group - 1) / per_group;
    const bool early = (int)threadIdx.x >= T;
    STAMP(0);
    pdl_trigger();
    touch_params(src, x_in, delta, delta_w, resid_out, norm_w, y, x_scale, eps, delta_parts, k_len);
    int g = blockIdx.x;
    if (early) {
        int row[RPW];
        uint4 w[RPW][NV];
        if (g < n_groups) {
            warp_rows<RPW, EPI_GELU>(row, g, n_rows);
            load_rows<NV, RPW>(w, W, row, 2 * n_rows, ld, 0, k_len);  // in flight during the wait and the fold
        }
        pdl_wait();
        bar_vector();  // the first half has formed the vector
        if (g < n_groups) gelu_group<NV, RPW>(w, row, vec, y, n_rows, k_len);
        g += gridDim.x;
    } else {
        pdl_wait();  // the input vector's parts are earlier kernels' outputs
        STAMP(1);
        fold_half(vec, red, k_len, src, delta, delta_parts, delta_w, resid_out, norm_w, eps, T);
        bar_vector();
    }
    for (; g < n_groups; g += gridDim.x) {
        int row[RPW];
        uint4 w[RPW][NV];
        warp_rows<RPW, EPI_GELU>(row, g, n_rows);
        load_rows<NV, RPW>(w, W, row, 2 * n_rows, ld, 0, k_len);
        gelu_group<NV, RPW>(w, row, vec, y, n_rows, k_len);
    }
    STAMP_END();
}

"""
