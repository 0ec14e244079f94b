"""The native `advance` kernel: the picked (or given) token -> its embedding row, the id ring, the next
position.

Part of `native.kernels_src.SOURCE`, which concatenates the parts in order; CUDA C++ in a string.
"""

CODE = r"""// One block of 1024 threads. The token: argmax over nparts (max, first index) partials, or given[0].
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
    pdl_trigger();
    pdl_wait();  // the head's partials
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
