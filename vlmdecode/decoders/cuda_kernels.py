"""Device mode's CUDA kernels: the greedy argmax over a logits row and `advance`, which writes the next step's
decoder inputs on the device (CuPy RawModule source, compiled per logits dtype). Used by decoders.cuda (device
mode) and vlmdecode.native; the launches and their argument lists live with those decoders. Not here: any
host loop.
"""

from __future__ import annotations

import numpy as np

ARGMAX_BLOCKS = 256  # argmax_partial's grid: 256 x 256 threads read a 262144-entry row in 4 strided passes
MAX_SUPPRESS = 64  # suppressed ids the device argmax takes (SamplingParams.suppress)

# Greedy pick in two launches. argmax_partial: ARGMAX_BLOCKS blocks each reduce a strided share of the
# logits row to (max, first index of it); advance: one block reduces the partials (or takes a token
# sampled elsewhere) and writes the next step's decoder inputs on the device. One block scanning the
# whole 262144-entry row of gemma3-1b cost 0.04 ms more per token on the H200 (device mode 2.95 -> 2.91
# ms, data/results/h200_runs_{b96166a,5fb6458}_gemma3-1b_unequal_capacity.csv).
_KERNEL = r"""
#include <cuda_fp16.h>
#define TO_F(x) (float)(x)
#define INF_F __int_as_float(0x7f800000)
#define NAN_F __int_as_float(0x7fc00000)

// (a, ia) <- the better of (a, ia), (b, ib): NaN wins (reported), then larger, then the smaller index
__device__ __forceinline__ void better(float& a, long long& ia, float b, long long ib) {
    if (b != b || (a == a && (b > a || (b == a && ib < ia)))) { a = b; ia = ib; }
}

__device__ void block_reduce(float* v, long long* idx, int tid) {
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) { float a = v[tid]; long long ia = idx[tid]; better(a, ia, v[tid + s], idx[tid + s]);
                       v[tid] = a; idx[tid] = ia; }
        __syncthreads();
    }
}

extern "C" __global__ void argmax_partial(const T* logits, const int V, float* part_v, long long* part_i,
                                          const long long* suppress, const int n_suppress)  // ids never picked
{
    __shared__ float v[256];
    __shared__ long long idx[256];
    const int tid = threadIdx.x;
    float bv = -INF_F; long long bi = 0x7fffffffffffffffLL; int bad = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + tid; i < V; i += (long long)gridDim.x * blockDim.x) {
        int skip = 0;
        for (int j = 0; j < n_suppress; ++j) skip |= suppress[j] == i;
        if (skip) continue;
        float x = TO_F(logits[i]);
        if (x != x || x == INF_F) bad = 1;
        if (x > bv || bi == 0x7fffffffffffffffLL) { bv = x; bi = i; }  // strided: the first max of this share
    }
    v[tid] = bad ? NAN_F : bv; idx[tid] = bi;
    block_reduce(v, idx, tid);
    if (tid == 0) { part_v[blockIdx.x] = v[0]; part_i[blockIdx.x] = idx[0]; }
}

extern "C" __global__ void advance(
    const float* part_v, const long long* part_i, const int nparts,  // argmax_partial's output
    const long long* given,                 // [1]: a token sampled elsewhere, or NULL -> reduce the partials
    const T* table, const int H, T* x_out,  // [V,H] embedding rows -> [H] decoder input, or table NULL
    long long* id_out,                      // [1]: the token as an input id (embedding session / id decoder)
    long long* ring, const int slot,        // [k]: token ids the host reads every k steps (-1: no valid token)
    long long* pos, long long* mask, long long* t_dev)
{
    __shared__ float v[1024];
    __shared__ long long idx[1024];
    __shared__ long long tok;
    const int tid = threadIdx.x;
    if (given == NULL) {
        v[tid] = tid < nparts ? part_v[tid] : -INF_F;
        idx[tid] = tid < nparts ? part_i[tid] : 0x7fffffffffffffffLL;
        block_reduce(v, idx, tid);
        // -1: NaN/+inf (reported as NaN) or every logit -inf: nothing to pick (sampling.check_finite's rule)
        if (tid == 0) tok = (v[0] != v[0] || v[0] == -INF_F) ? -1 : idx[0];
    } else if (tid == 0) {
        tok = given[0];
    }
    __syncthreads();
    if (tok < 0) { if (tid == 0) ring[slot] = -1; return; }
    if (table != NULL)
        for (int h = tid; h < H; h += blockDim.x) x_out[h] = table[tok * H + h];
    if (tid == 0) {
        long long t = t_dev[0];
        ring[slot] = tok;
        if (id_out != NULL) id_out[0] = tok;
        pos[0] = t;
        mask[t] = 1;
        t_dev[0] = t + 1;
    }
}
"""


def device_kernels(dtype):
    """(argmax_partial, advance) compiled for logits/embeddings of `dtype` (float16 or float32)."""
    import cupy

    ctype = {np.dtype(np.float16): "__half", np.dtype(np.float32): "float"}[np.dtype(dtype)]
    module = cupy.RawModule(code=_KERNEL.replace("T*", f"{ctype}*"))
    return module.get_function("argmax_partial"), module.get_function("advance")


def argmax_blocks(vocab: int) -> int:
    """argmax_partial's grid for a row of `vocab` logits: blocks of 256 threads, at most ARGMAX_BLOCKS."""
    return int(min(ARGMAX_BLOCKS, -(-vocab // 256)))
