"""CUDA C++ source of the native decoder's kernels (compiled at run time by `native.kernels` through NVRTC).

Storage fp16, arithmetic fp32. Weights are [out, in] row-major, contiguous along the reduction, so one
warp streams a row with 16-byte loads (uint4 = 8 halves). Every GEMV loads its first rows' weights into
registers BEFORE it forms its input vector, so the vector's prologue (a residual fold and RMSNorm that
each block recomputes from the [H] row) runs while the weights are in flight.

    gemv<NV, RPW, EPI, PF>  y = W x', x' formed by `form_vector`; EPI_PLAIN writes y (split-K partials along
                         gridDim.y), EPI_GELU writes gelu_tanh(W[j] x') * (W[j + n] x') for the packed
                         gate|up rows (RPW / 2 pairs a warp), EPI_HEAD writes fp16 logits (optional
                         softcap) and one (max, first index) partial per block over the ids not
                         suppressed, NaN when one of those logits is NaN/+inf (device mode's semantics)
    gemv_split<NV, RPW>  gemv's EPI_GELU rows (gate|up's default, PF 3): half the warps form the vector while the
                         other half's first rows are in flight, each half in a branch of its own (fewer registers)
    gemv_tiled<CPW, R, NW, MB, EPI>  gemv's rows over weights re-laid in tiles of R rows (`native.tiled_gemv`):
                         a lane a row, one fp32 sum a lane, the warps' sums in shared memory once a tile;
                         EPI_GELU gate|up, EPI_FOLD plain rows after the fold (qkv), EPI_PLAIN split-K slices
    attention<HD>        q/k RMSNorm + half-split rotary + KV append at position pos[0] + one chunk of the
                         visible keys (sliding window, scale, optional softcap) per block; the last block
                         of a KV head to finish combines the chunks (a counter it resets, no extra launch)
    attention_cl<HD, G, KB, C, NW>  the same math with the cached keys over every sub-group of lanes of the
                         grid (KB at a time in registers, the first batch before `pdl_wait`; key t from
                         registers), combined in shared memory, then across a C-block cluster (distributed
                         shared memory), then (several clusters a KV head) by the last block; position p at
                         row p % capacity, so a windowed layer's buffer of exactly its window is a ring
    head_bound<FLAT8, NQ, RPW>, head_pick<NV>  the bounded LM head of a greedy step (`native.bounded_head`):
                         an int8 copy streamed with a bound on every logit, then only the rows that can win
                         computed exactly as gemv's EPI_HEAD computes them
    advance              the token (argmax over the partials, or one sampled elsewhere) -> its embedding
                         row into the step's input, the ring of ids the host reads, the next position

The source lives in `native.cuda_src` (common, gemv, gemv_tiled, attention, attn_util, attn_split, head_bound,
advance), joined
here in that order.
Not here: launch geometry and buffers (`native.kernels`), the step's order (`native.decoder`).
"""

from .cuda_src import advance, attention, attn_split, attn_util, common, gemv, gemv_tiled, head_bound

SOURCE = (common.CODE + gemv.CODE + gemv_tiled.CODE + attention.CODE + attn_util.CODE + attn_split.CODE
          + head_bound.CODE + advance.CODE)
