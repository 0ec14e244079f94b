"""Run a DecoderPlan in numpy (float32 or float64): the oracle of the native CUDA kernels.

What it is: the plan's math (see `vlmdecode.native.plan`) as small functions, one per block a kernel
implements (`rmsnorm`, `qkv`, `head_norm`, `rope`, `attend`, `mlp`, `logits`, `embed`), and `NumpyDecoder`,
which strings them into prefill (S tokens) and single steps over a `KVCache`. Batch 1; activations are
[S, H] (no batch axis). Weights are cast to the compute dtype once per decoder (so an fp16 plan runs with
its fp16-rounded weights in float32/float64 arithmetic). What it is not: fast, batched, or a model of
reduced-precision arithmetic.

KV cache, per layer, as com.microsoft.GroupQueryAttention keeps it (K and V [nkv, C, D] each):
- full layers (kv_capacity None): C = max_length; row r holds absolute token r (the r-th token fed).
- windowed layers (kv_capacity C, window W <= C; GQA sliding_window_cache=1): after T tokens, rows [0, Lt)
  hold the Lt most recent tokens in order (row r = token T - Lt + r), never wrapped:
  G = C - W + 1, Lt = T if T <= C else T - G * ceil((T - C) / G). With C == W (all CUDA accepts) the
  buffer keeps the last min(T, W) tokens and shifts one row per step once full.
  A step of S tokens attends over the resident rows plus its own S keys before evicting (GQA "stages" a
  step that would evict keys it still reads), so S may exceed C.
Rows beyond what is resident are zero here (GroupQueryAttention leaves them unspecified).
A query for token t sees keys s <= t, and on layers with a window only t - s < W. Rotary uses the position
ids given to the step (default: the token indices T, T+1, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .plan import DecoderPlan, LayerPlan


# ---- blocks -------------------------------------------------------------------------------------------
def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * w over the last axis (w is the plan's effective weight)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w.astype(x.dtype)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def qkv(plan: DecoderPlan, w_qkv: np.ndarray, h: np.ndarray):
    """h [S, H] @ w_qkv -> q [S, nq, D], k [S, nkv, D], v [S, nkv, D] (before norms and rotary)."""
    y = h @ w_qkv
    q, k, v = np.split(y, [plan.q_size, plan.q_size + plan.kv_size], axis=-1)
    D = plan.head_dim
    return q.reshape(-1, plan.num_heads, D), k.reshape(-1, plan.num_kv_heads, D), v.reshape(-1, plan.num_kv_heads, D)


def head_norm(x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    """Per-head RMSNorm of [S, n, D] over D (identity when the plan has no q/k norm)."""
    return x if w is None else rmsnorm(x, w, eps)


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Half-split rotary of x [S, n, D] at positions [S] with the layer's [max_pos, D/2] tables."""
    D = x.shape[-1]
    c = cos[positions].astype(x.dtype)[:, None, :]
    s = sin[positions].astype(x.dtype)[:, None, :]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def attend(plan: DecoderPlan, layer: LayerPlan, q: np.ndarray, keys: np.ndarray, values: np.ndarray,
           q_tok: np.ndarray, k_tok: np.ndarray) -> np.ndarray:
    """q [S, nq, D] for tokens q_tok [S]; keys/values [nkv, N, D] of tokens k_tok [N] -> [S, nq * D].
    Visible: k_tok <= q_tok, and q_tok - k_tok < window on windowed layers."""
    grp = plan.num_heads // plan.num_kv_heads
    K, V = np.repeat(keys, grp, axis=0), np.repeat(values, grp, axis=0)  # q head h uses kv head h // grp
    s = np.einsum("shd,hnd->hsn", q, K) * plan.attn_scale
    if plan.attn_softcap:
        s = plan.attn_softcap * np.tanh(s / plan.attn_softcap)
    d = q_tok[:, None] - k_tok[None, :]
    ok = (d >= 0) & ((d < layer.window) if layer.window else True)
    s = np.where(ok[None], s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hsn,hnd->shd", p, V).reshape(q.shape[0], -1)


def mlp(plan: DecoderPlan, w_gate_up: np.ndarray, w_down: np.ndarray, h: np.ndarray) -> np.ndarray:
    """gelu_tanh(h @ gate) * (h @ up) @ down."""
    gu = h @ w_gate_up
    return (gelu_tanh(gu[:, : plan.intermediate]) * gu[:, plan.intermediate:]) @ w_down


def logits(plan: DecoderPlan, x: np.ndarray, lm_head: np.ndarray | None = None) -> np.ndarray:
    """Final norm, LM head, soft-cap: [S, H] -> [S, V]."""
    y = rmsnorm(x, plan.final_norm, plan.eps) @ (plan.lm_head if lm_head is None else lm_head).astype(x.dtype)
    return plan.final_softcap * np.tanh(y / plan.final_softcap) if plan.final_softcap else y


def embed(plan: DecoderPlan, inputs: np.ndarray, dtype=np.float32) -> np.ndarray:
    """What enters layer 0: ids [S] through the plan's table ("ids") or embeddings [S, H] ("embeds"),
    times embed_scale when the graph applies one."""
    inputs = np.asarray(inputs)
    if plan.drive == "ids":
        if inputs.dtype.kind not in "iu" or inputs.ndim != 1:
            raise ValueError(f"an 'ids' plan takes token ids [S], got {inputs.dtype} {inputs.shape}")
        x = plan.embed_table[inputs].astype(dtype)
    else:
        if inputs.dtype.kind != "f" or inputs.ndim != 2 or inputs.shape[1] != plan.hidden:
            raise ValueError(f"an 'embeds' plan takes inputs_embeds [S, {plan.hidden}], got {inputs.dtype} "
                             f"{inputs.shape}")
        x = inputs.astype(dtype)
    return x * dtype(plan.embed_scale) if plan.embed_scale is not None else x


def resident(T: int, capacity: int, window: int) -> int:
    """Rows a windowed GroupQueryAttention cache holds after T tokens (its L(T))."""
    if T <= capacity:
        return T
    G = capacity - window + 1
    return T - G * math.ceil((T - capacity) / G)


# ---- cache and decoder --------------------------------------------------------------------------------
@dataclass
class KVCache:
    """Per-layer K and V [nkv, C, D] in GroupQueryAttention's layout, and the tokens fed so far."""

    keys: list
    values: list
    capacities: tuple
    windows: tuple  # window of each windowed-capacity layer, None for full layers
    tokens: int = 0
    rows: list = field(default_factory=list)  # resident rows per layer

    def token_of_row(self, i: int) -> np.ndarray:
        """Absolute token index held by each resident row of layer i."""
        return self.tokens - self.rows[i] + np.arange(self.rows[i])


class NumpyDecoder:
    """Prefill and steps of a DecoderPlan in `dtype` (float32 or float64)."""

    def __init__(self, plan: DecoderPlan, max_length: int, dtype=np.float32):
        if np.dtype(dtype) not in (np.float32, np.float64):
            raise ValueError(f"NumpyDecoder computes in float32 or float64, not {np.dtype(dtype)}")
        self.plan, self.max_length, self.dtype = plan, max_length, np.dtype(dtype).type
        self._w = {}

    def w(self, a: np.ndarray) -> np.ndarray:
        """The weight in the compute dtype (cast once per decoder)."""
        if id(a) not in self._w:
            self._w[id(a)] = (a, a.astype(self.dtype))  # keep `a` alive: ids are unique only while it lives
        return self._w[id(a)][1]

    def new_cache(self) -> KVCache:
        p = self.plan
        caps = p.kv_capacities(self.max_length)
        shape = lambda c: (p.num_kv_heads, c, p.head_dim)
        return KVCache([np.zeros(shape(c), self.dtype) for c in caps], [np.zeros(shape(c), self.dtype) for c in caps],
                       caps, tuple(L.window if L.kv_capacity is not None else None for L in p.layers),
                       rows=[0] * len(caps))

    def forward(self, inputs, cache: KVCache, positions=None) -> np.ndarray:
        """Feed S tokens (ids [S] or embeddings [S, H]) -> logits [S, V]; appends them to `cache`."""
        p = self.plan
        x = embed(p, inputs, self.dtype)
        S = x.shape[0]
        tok = cache.tokens + np.arange(S)
        pos = tok if positions is None else np.asarray(positions, np.int64).reshape(S)
        if pos.max() >= p.layers[0].rope_cos.shape[0]:
            raise ValueError(f"position {pos.max()} is past the rotary tables ({p.layers[0].rope_cos.shape[0]} rows)")
        for i, L in enumerate(p.layers):
            x = self.layer(i, L, x, cache, tok, pos)
        cache.tokens += S
        return logits(p, x, self.w(p.lm_head))

    def layer(self, i: int, L: LayerPlan, x, cache: KVCache, tok, pos):
        p, w = self.plan, self.w
        h = rmsnorm(x, L.input_norm, p.eps)
        q, k, v = qkv(p, w(L.w_qkv), h)
        q = rope(head_norm(q, L.q_norm, p.eps), L.rope_cos, L.rope_sin, pos)
        k = rope(head_norm(k, L.k_norm, p.eps), L.rope_cos, L.rope_sin, pos)
        keys, values, k_tok = self.append(i, cache, k.transpose(1, 0, 2), v.transpose(1, 0, 2), tok)
        a = attend(p, L, q, keys, values, tok, k_tok)
        x = x + rmsnorm(a @ w(L.w_o), L.post_attn_norm, p.eps)
        h = rmsnorm(x, L.pre_ffn_norm, p.eps)
        return x + rmsnorm(mlp(p, w(L.w_gate_up), w(L.w_down), h), L.post_ffn_norm, p.eps)

    def append(self, i: int, cache: KVCache, k, v, tok):
        """Write the step's K/V [nkv, S, D] into layer i; return the keys, values and tokens it attends over."""
        K, V, C, r = cache.keys[i], cache.values[i], cache.capacities[i], cache.rows[i]
        if cache.windows[i] is None:  # full layer: row = token index
            if tok[-1] >= C:
                raise ValueError(f"layer {i}: token {tok[-1]} does not fit a KV capacity of {C}")
            K[:, tok], V[:, tok] = k, v
            cache.rows[i] = int(tok[-1]) + 1
            return K[:, : tok[-1] + 1], V[:, : tok[-1] + 1], np.arange(tok[-1] + 1)
        keys = np.concatenate([K[:, :r], k], axis=1)  # staged: resident rows, then the new ones
        values = np.concatenate([V[:, :r], v], axis=1)
        k_tok = np.concatenate([tok[0] - r + np.arange(r), tok])
        keep = resident(int(tok[-1]) + 1, C, cache.windows[i])
        K[:], V[:] = 0, 0
        K[:, :keep], V[:, :keep] = keys[:, -keep:], values[:, -keep:]
        cache.rows[i] = keep
        return keys, values, k_tok

    def greedy(self, inputs, max_new_tokens: int):
        """Prefill then greedy steps -> (tokens [N], logits [N, V]); logits[t] chose token t. An 'embeds'
        plan needs `embed_next(token) -> [1, H]` via greedy_embeds instead."""
        if self.plan.drive != "ids":
            raise ValueError("greedy() feeds token ids back; an 'embeds' plan needs greedy_embeds(inputs, table)")
        return self.greedy_embeds(inputs, None, max_new_tokens)

    def greedy_embeds(self, inputs, table: np.ndarray | None, max_new_tokens: int):
        """As greedy(); each chosen token enters as table[token] ([V, H] embeddings, scaled as the
        embedding model scales them) for 'embeds' plans, as its id for 'ids' plans."""
        cache = self.new_cache()
        y = self.forward(inputs, cache)[-1]
        toks, steps = [], []
        for t in range(max_new_tokens):
            steps.append(y)
            toks.append(int(np.argmax(y)))
            if t + 1 < max_new_tokens:
                nxt = np.array([toks[-1]]) if table is None else table[[toks[-1]]]
                y = self.forward(nxt, cache)[-1]
        return np.array(toks), np.stack(steps)
