"""The typed plan of a Gemma-3 decoder graph: weights as arrays, per-layer attributes, one convention.

What it is: the contract between recognition (`vlmdecode.native.recognise`, which reads an ONNX
decoder and fills these types) and the executors that run them (`vlmdecode.native.numpy_exec`, the
float32/float64 oracle; the CUDA kernels of `vlmdecode.native.decoder`). Whatever layout the graph had
(packed or separate MatMuls, contrib or standard ops, norms folded or added in-graph), the plan holds
the same math in the same layout. What it is not: a graph, a runner, or a config read from
genai_config.json (everything here comes from the ONNX graph itself).

The math a plan describes, per token position with absolute position id p (row-vector `x @ W` layout,
all norms are RMSNorm `x / sqrt(mean(x^2) + eps) * weight` with the EFFECTIVE weight, i.e. Gemma's
`(1 + w)` already applied; every `eps` is `DecoderPlan.eps`):

    x = inputs_embeds                          drive "embeds"  (x *= embed_scale if embed_scale is not None)
    x = embed_table[input_ids] * embed_scale   drive "ids"     (embed_scale None -> no multiply)
    for each layer L:
        h    = rmsnorm(x, L.input_norm)
        qkv  = h @ L.w_qkv                      columns: Q [nq*D] | K [nkv*D] | V [nkv*D], head-major in each
        q, k = per-head rmsnorm over D with L.q_norm / L.k_norm (skipped when None), then rotary
        rotary (half split, "rotate_half", never interleaved): with c = L.rope_cos[p], s = L.rope_sin[p]
               ([D/2] rows indexed by the position id), x1 = v[:D/2], x2 = v[D/2:]:
               out = concat(x1*c - x2*s, x2*c + x1*s)
        K/V of this position appended to the layer's cache (see numpy_exec for capacity and rings)
        attention: query head h uses KV head h // (nq // nkv); scores = (q . k) * attn_scale;
               if attn_softcap: scores = attn_softcap * tanh(scores / attn_softcap);
               the query at position i sees cached keys j <= i, and on layers with `window` only those with
               i - j < window (the current key counts: GroupQueryAttention's local_window_size);
               softmax over visible keys, weighted sum of V -> a [nq*D] (heads concatenated, head-major)
        x    = x + rmsnorm(a @ L.w_o, L.post_attn_norm)
        h    = rmsnorm(x, L.pre_ffn_norm)
        gu   = h @ L.w_gate_up;  m = gelu_tanh(gu[:I]) * gu[I:]     (tanh-approximate GELU of the gate)
        x    = x + rmsnorm(m @ L.w_down, L.post_ffn_norm)
    logits = rmsnorm(x, final_norm) @ lm_head
    if final_softcap: logits = final_softcap * tanh(logits / final_softcap)

Dtypes: projection matrices, embed_table and lm_head are in `DecoderPlan.dtype` (the graph's storage
dtype, float16 or float32); norm weights and rotary tables are float32. Arrays are read-only and need not be
C-contiguous: a tied model keeps ONE array and the other is its transposed view (the fixture's lm_head is
Transpose(embed_tokens); onnxruntime-genai's builder gathers from Transpose(lm_head.MatMul.weight), so there
embed_table is the view). Use np.ascontiguousarray where a kernel needs row-major [V, H] or [H, V].

Graph interface (checked by recognition): layer i reads past_key_values.{i}.key/value and writes
present.{i}.key/value, [B, nkv, capacity, D]; attention lengths come from attention_mask (seqlens_k =
sum(mask) - 1). Rotary positions are the position_ids input, or the token index where GroupQueryAttention
derives them (the builder's graphs have no position_ids): the same for batch-1 unpadded decoding.
kv_capacity describes the graph's own cache layout (GroupQueryAttention sliding_window_cache=1); the math
does not depend on it, so an executor may keep a full-length cache for such a layer unless it shares its KV
buffers with the ONNX graph (then the layout of `vlmdecode.native.numpy_exec` applies).
Plans compare by identity (eq=False: arrays have no truth value).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class PlanError(ValueError):
    """A graph the plan cannot describe. The message names the first node (name and op type) that could
    not be placed and why, and what would have been accepted."""


@dataclass(frozen=True, eq=False)
class LayerPlan:
    """One decoder layer (see the module docstring for the math and the layouts)."""

    index: int
    kind: str  # "local" (sliding window) | "global"
    window: int | None  # keys visible incl. the current one (GQA local_window_size semantics), None = full
    kv_capacity: int | None  # None: the caller's max_length; an int for windowed-KV exports (capacity == window)
    rope_theta: float  # fitted from the tables (informational: executors use rope_cos/rope_sin)
    rope_cos: np.ndarray  # [max_pos, head_dim // 2] float32, from the graph's cos_cache when present else computed
    rope_sin: np.ndarray
    input_norm: np.ndarray  # [H] EFFECTIVE weight (Gemma's (1 + w) already applied), float32
    q_norm: np.ndarray | None  # [head_dim] effective, float32
    k_norm: np.ndarray | None
    w_qkv: np.ndarray  # [H, (nq + 2*nkv) * head_dim] model dtype, x @ W layout; separate Q/K/V concatenated
    w_o: np.ndarray  # [nq * head_dim, H]
    post_attn_norm: np.ndarray  # [H] effective
    pre_ffn_norm: np.ndarray  # [H]
    w_gate_up: np.ndarray  # [H, 2 * I]: gate columns first, then up
    w_down: np.ndarray  # [I, H]
    post_ffn_norm: np.ndarray  # [H]


@dataclass(frozen=True, eq=False)
class DecoderPlan:
    """A whole decoder: embedding scale, layers, final norm, LM head (see the module docstring)."""

    source: str  # the ONNX path ("<model>" when recognised from an in-memory ModelProto)
    drive: str  # "embeds" | "ids"
    dtype: np.dtype  # storage dtype of the weights (float16 or float32)
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    eps: float  # RMSNorm epsilon (one for every norm of the graph, q/k norms included)
    attn_scale: float  # softmax scale (query_pre_attn_scalar ** -0.5 for Gemma 3)
    attn_softcap: float | None  # GQA softcap attribute (0/None = off)
    final_softcap: float | None  # logits = softcap * tanh(logits / softcap)
    embed_scale: float | None  # multiplier applied to inputs_embeds inside the decoder graph (None = not in graph)
    embed_table: np.ndarray | None  # [V, H] for "ids" decoders (the graph's Gather table, maybe a view), else None
    layers: tuple[LayerPlan, ...]
    final_norm: np.ndarray  # [H] effective
    lm_head: np.ndarray  # [H, V] model dtype (tied: the embedding table transposed, a view)
    nodes_accounted: int  # every node of the graph placed by the plan
    logits_last_only: bool = False  # the graph returns [B, 1, V]: the last position only (builder prune_lm_head)
    hidden_output: str | None = None  # graph output holding rmsnorm(x, final_norm) [B, S, H] (include_hidden_states)

    @property
    def q_size(self) -> int:
        """nq * head_dim: the Q columns of every w_qkv and the rows of every w_o."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """nkv * head_dim: the K (and the V) columns of every w_qkv."""
        return self.num_kv_heads * self.head_dim

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def kv_capacities(self, max_length: int) -> tuple[int, ...]:
        """Rows of each layer's K/V buffer for a caller's max_length (windowed-KV layers keep their own)."""
        return tuple(max_length if L.kv_capacity is None else L.kv_capacity for L in self.layers)
