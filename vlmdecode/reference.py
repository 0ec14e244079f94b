"""A float64 numpy reference for the fixture models (vision, embedding, decoder, token-id decoder).

What it is: an independent re-implementation of the graphs written by `vlmdecode.fixture`, reading
only the weight initializers of the .onnx files (onnx.load, external data included) and the
FixtureConfig in fixture.json. Everything else is recomputed here in float64: rotary cos/sin from
the config thetas (the rope_* initializers are never read), (1 + w) RMSNorm from the raw `w`
initializers, LayerNorm, tanh-GELU, softmax attention with grouped KV heads, sliding windows, the
optional final logit soft-cap and the embedding model's image-token scatter. Tests compare
onnxruntime against it.

What it is not: fast, batched for production, a general ONNX interpreter, or a model of
reduced-precision arithmetic (fp16 fixtures are computed from their fp16 weights in float64). It
never imports onnxruntime.

Attention masks, modelled as each decoder variant computes them (`cfg.attention`):

`onnx`  KV grows by Concat: the cache holds T = past + S positions after a call and the mask must
        be [B, T]. Query s has absolute index i = T - S + s and sees key j iff mask[b, j] != 0 and
        j <= i (causal) and, on local layers, i - j < sliding_window. Masked scores are replaced by
        the dtype's most negative finite value before the softmax, so a query with no visible key
        averages all T values uniformly (as the graph does).
`gqa`   com.microsoft.GroupQueryAttention over a [B, kvh, max_length, D] buffer. Only the mask's
        *count* is used: seqlens_k = sum(mask) - 1 per row, total_sequence_length = mask.shape[1].
        The call is a "first prompt" when S == total_sequence_length; then past = 0. Otherwise
        (a decode step S = 1, or a later chunk S > 1, batch 1 only) past = seqlens_k + 1 - S.
        The S new keys/values are written at buffer rows [past, past + S) (other rows untouched)
        and query s (index i = past + s) sees buffer rows j <= i, on local layers only
        i - j < sliding_window: the graph sets local_window_size = sliding_window, which since
        onnxruntime 1.23 (PR #25927) counts the current key (1.22 and older saw one key more).
        Where the zeros of the mask sit is irrelevant; a mask with one 1 fewer makes the step
        overwrite the previous row. In a first prompt whose mask counts fewer than S ones,
        onnxruntime's rows s > seqlens_k are undefined (they read scratch memory); the reference
        returns causal attention for them. Bound in place (IOBinding, past and present one
        OrtValue) or fed back as arrays, the logits are the same.
        (Checked against onnxruntime 1.31 CPU by tests/test_reference.py.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from .fixture.build import load_fixture_config
from .fixture.config import IMAGE_TOKEN_ID, FixtureConfig


# ---- building blocks (all float64) --------------------------------------------------------------
def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """Gemma RMSNorm over the last axis with scale (1 + w)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1.0 + w)


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def rotary(x: np.ndarray, pos: np.ndarray, theta: float) -> np.ndarray:
    """Half-split (rotate_half) rotary embedding. x [B,S,n,D], pos [B,S] -> [B,S,n,D]."""
    D = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, D, 2, dtype=np.float64) / D)  # [D/2]
    ang = pos.astype(np.float64)[..., None, None] * inv  # [B,S,1,D/2]
    cos, sin = np.cos(ang), np.sin(ang)
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _weights(path: Path) -> dict[str, np.ndarray]:
    """Initializers of one .onnx file in their stored dtype (cast to float64 where used)."""
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


# ---- KV cache -----------------------------------------------------------------------------------
@dataclass
class RefKV:
    """Per-layer float64 K and V [B, kvh, L, D] with an explicit length.

    onnx variant: L grows by concatenation and equals `length` (the T of the last mask).
    gqa variant:  L = max_length (the shared buffer); `length` = max over rows of seqlens_k + 1,
                  the buffer rows in use. The default mask of the next call is ones [B, length + S].
    Edit `keys[i][b, h, j]` to model a corrupted cache row.
    """

    keys: list[np.ndarray]
    values: list[np.ndarray]
    length: int = 0


@dataclass
class _Plan:
    """Where a call writes its S new K/V rows and which cache rows each query sees."""

    start: np.ndarray  # [B] first buffer row written (gqa); unused by onnx (Concat)
    allowed: dict[str, np.ndarray]  # kind -> bool [B, S, L] (L = cache rows after the write)
    length: int  # cache length after the call


# ---- the reference model ------------------------------------------------------------------------
class Reference:
    """float64 forward passes of a fixture folder; `variant` (mask semantics) is cfg.attention."""

    def __init__(self, model_dir: str | Path, cfg: FixtureConfig, text_only: bool = False):
        self.dir, self.cfg, self.variant = Path(model_dir), cfg, cfg.attention
        self._decoder_file = self.dir / ("text/decoder.onnx" if text_only else "decoder.onnx")

    @classmethod
    def load(cls, model_dir: str | Path, text_only: bool = False) -> Reference:
        """text_only=True: decoder weights from text/decoder.onnx (the token-id model)."""
        return cls(model_dir, load_fixture_config(model_dir), text_only)

    # weights are read on first use, one component at a time
    @cached_property
    def wv(self) -> dict[str, np.ndarray]:
        return _weights(self.dir / "vision.onnx")

    @cached_property
    def we(self) -> dict[str, np.ndarray]:
        return _weights(self.dir / "embedding.onnx")

    @cached_property
    def wd(self) -> dict[str, np.ndarray]:
        return _weights(self._decoder_file)

    # ---- vision ---------------------------------------------------------------------------------
    def vision(self, pixel_values: np.ndarray) -> np.ndarray:
        """pixel_values [B,3,S,S] -> image_features [B, n_image_tokens, hidden] (reshape(-1, hidden)
        gives the rank-2 layout that vision.onnx may declare; `embed` takes either)."""
        c, w = self.cfg, {k: _f64(v) for k, v in self.wv.items()}
        x = _f64(pixel_values)
        B, p, V, nh = x.shape[0], c.patch_size, c.vision_hidden, c.vision_heads
        g, hd = c.image_size // p, V // nh
        # Conv with stride = kernel = p is a matmul over flattened (channel, row, col) patches, row-major grid
        patches = x.reshape(B, 3, g, p, g, p).transpose(0, 2, 4, 1, 3, 5).reshape(B, g * g, 3 * p * p)
        x = patches @ w["vision.patch_embed"].reshape(V, -1).T + w["vision.patch_bias"] + w["vision.pos_embed"]
        for i in range(c.vision_layers):
            L = f"vision.layers.{i}."
            h = layer_norm(x, w[L + "ln1_w"], w[L + "ln1_b"])
            qkv = (h @ w[L + "qkv"] + w[L + "qkv_b"]).reshape(B, g * g, 3, nh, hd).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv  # [B,nh,N,hd]
            a = softmax(q @ k.transpose(0, 1, 3, 2) * hd**-0.5) @ v
            x = x + a.transpose(0, 2, 1, 3).reshape(B, g * g, V) @ w[L + "o"] + w[L + "o_b"]
            h = layer_norm(x, w[L + "ln2_w"], w[L + "ln2_b"])
            x = x + gelu_tanh(h @ w[L + "fc1"] + w[L + "fc1_b"]) @ w[L + "fc2"] + w[L + "fc2_b"]
        x = layer_norm(x, w["vision.post_ln_w"], w["vision.post_ln_b"])
        gp, P = g // c.pool, c.pool  # average-pool the grid, tokens row-major over the pooled grid
        x = x.reshape(B, gp, P, gp, P, V).mean(axis=(2, 4)).reshape(B, gp * gp, V)
        return rms_norm(x, w["mm.norm"], c.rms_eps) @ w["mm.proj"]

    # ---- embedding ------------------------------------------------------------------------------
    def embed(self, input_ids: np.ndarray, image_features: np.ndarray | None = None) -> np.ndarray:
        """input_ids [B,S] -> inputs_embeds [B,S,H]; the k-th image token (row-major over the batch)
        takes the k-th row of image_features ([..., H], flattened over the leading axes)."""
        ids = np.asarray(input_ids, dtype=np.int64)
        x = _f64(self.we["embed_tokens"][ids]) * math.sqrt(self.cfg.hidden_size)
        is_img = ids == IMAGE_TOKEN_ID
        n = int(is_img.sum())
        if n:
            rows = np.zeros((0, self.cfg.hidden_size)) if image_features is None else _f64(image_features)
            rows = rows.reshape(-1, self.cfg.hidden_size)
            if rows.shape[0] < n:
                raise ValueError(f"{n} image tokens but only {rows.shape[0]} image feature rows")
            x[is_img] = rows[:n]  # boolean indexing walks [B,S] row-major, like the graph's CumSum
        return x

    # ---- decoder --------------------------------------------------------------------------------
    def new_cache(self, batch: int = 1) -> RefKV:
        c = self.cfg
        L = c.max_length if self.variant == "gqa" else 0
        shape = (batch, c.num_kv_heads, L, c.head_dim)
        return RefKV([np.zeros(shape) for _ in range(c.num_layers)], [np.zeros(shape) for _ in range(c.num_layers)])

    def _plan(self, cache: RefKV, mask: np.ndarray, S: int) -> _Plan:
        """Visibility of cache rows for each query, per layer kind (see the module docstring)."""
        B, W = mask.shape[0], self.cfg.sliding_window
        if self.variant == "onnx":
            T = cache.length + S
            if mask.shape[1] != T:
                raise ValueError(f"onnx variant: attention_mask must be [B, {T}] (past + new), got {mask.shape}")
            start = np.full(B, cache.length)
            qi = np.broadcast_to(T - S + np.arange(S), (B, S))  # absolute query index
            key_ok = (mask != 0)[:, None, :]  # [B,1,T]
            L, length = T, T
        else:
            seqlens = mask.sum(axis=1) - 1  # [B]
            if S == mask.shape[1]:
                start = np.zeros(B, dtype=np.int64)  # first prompt
            else:
                if S > 1 and B != 1:
                    raise ValueError("gqa variant: a chunk with S > 1 after the first prompt needs batch 1")
                start = seqlens + 1 - S
            if (start < 0).any() or (start + S > self.cfg.max_length).any():
                raise ValueError(f"gqa variant: write rows {start}+{S} fall outside the buffer")
            qi = start[:, None] + np.arange(S)  # [B,S]
            key_ok = np.ones((B, 1, 1), dtype=bool)
            L, length = self.cfg.max_length, int((start + S).max())
        d = qi[..., None] - np.arange(L)  # [B,S,L] query index - key index
        causal = (d >= 0) & key_ok
        return _Plan(start, {"global": causal, "local": causal & (d < W)}, length)

    def _attend(self, q, K, V, allowed):
        """q [B,S,nh,D], K/V [B,kvh,L,D], allowed [B,S,L] -> [B,S,nh*D]."""
        B, S, nh, D = q.shape
        grp = nh // K.shape[1]
        K, V = np.repeat(K, grp, axis=1), np.repeat(V, grp, axis=1)  # q head h uses kv head h // grp
        s = np.einsum("bshd,bhld->bhsl", q, K) * D**-0.5
        neg = np.finfo(self.cfg.np_dtype).min  # as the onnx graph; gqa always has >= 1 visible key
        p = softmax(np.where(allowed[:, None], s, neg))
        return np.einsum("bhsl,bhld->bshd", p, V).reshape(B, S, nh * D)

    def _layer(self, x, i, kind, cache: RefKV, plan: _Plan, pos):
        c, w = self.cfg, self.wd
        f = lambda n: _f64(w[f"layers.{i}.{n}"])
        B, S, _ = x.shape
        theta = c.rope_theta if kind == "global" else c.rope_local_theta
        h = rms_norm(x, f("input_norm"), c.rms_eps)
        q = (h @ f("q_proj")).reshape(B, S, c.num_heads, c.head_dim)
        k = (h @ f("k_proj")).reshape(B, S, c.num_kv_heads, c.head_dim)
        v = (h @ f("v_proj")).reshape(B, S, c.num_kv_heads, c.head_dim)
        q = rotary(rms_norm(q, f("q_norm"), c.rms_eps), pos, theta)
        k = rotary(rms_norm(k, f("k_norm"), c.rms_eps), pos, theta)
        k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B,kvh,S,D]
        if self.variant == "onnx":
            cache.keys[i] = np.concatenate([cache.keys[i], k], axis=2)
            cache.values[i] = np.concatenate([cache.values[i], v], axis=2)
        else:
            for b, s0 in enumerate(plan.start):
                cache.keys[i][b, :, s0 : s0 + S] = k[b]
                cache.values[i][b, :, s0 : s0 + S] = v[b]
        a = self._attend(q, cache.keys[i], cache.values[i], plan.allowed[kind])
        x = x + rms_norm(a @ f("o_proj"), f("post_attn_norm"), c.rms_eps)
        h = rms_norm(x, f("pre_ff_norm"), c.rms_eps)
        m = (gelu_tanh(h @ f("gate_proj")) * (h @ f("up_proj"))) @ f("down_proj")
        return x + rms_norm(m, f("post_ff_norm"), c.rms_eps)

    def decode(self, inputs_embeds, cache: RefKV, attention_mask=None, position_ids=None) -> np.ndarray:
        """inputs_embeds [B,S,H] -> logits [B,S,V]; appends S positions to `cache`.

        Defaults: attention_mask = ones [B, cache.length + S], position_ids = cache.length + arange(S).
        """
        c, x = self.cfg, _f64(inputs_embeds)
        B, S, _ = x.shape
        mask = np.ones((B, cache.length + S), np.int64) if attention_mask is None else np.asarray(attention_mask)
        pos = cache.length + np.arange(S)[None].repeat(B, 0) if position_ids is None else np.asarray(position_ids)
        plan = self._plan(cache, mask, S)
        for i, kind in enumerate(c.layer_types):
            x = self._layer(x, i, kind, cache, plan, pos)
        cache.length = plan.length
        logits = rms_norm(x, _f64(self.wd["final_norm"]), c.rms_eps) @ _f64(self.wd["embed_tokens"]).T
        if c.final_logit_softcap:
            logits = c.final_logit_softcap * np.tanh(logits / c.final_logit_softcap)
        return logits

    def embed_ids(self, input_ids) -> np.ndarray:
        """The token-id decoder's own lookup: embed_tokens[ids] * sqrt(H) (no image scatter)."""
        return _f64(self.wd["embed_tokens"][np.asarray(input_ids, np.int64)]) * math.sqrt(self.cfg.hidden_size)

    def logits_for_ids(self, input_ids, cache: RefKV, attention_mask=None, position_ids=None) -> np.ndarray:
        """The token-id decoder (text/decoder.onnx): input_ids [B,S] -> logits [B,S,V]."""
        return self.decode(self.embed_ids(input_ids), cache, attention_mask, position_ids)

    def greedy(self, inputs_embeds_or_ids, max_new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """Prefill then greedy steps -> (tokens [B, max_new_tokens], logits [max_new_tokens, B, V]);
        logits[t] is what token t was chosen from. Integer input = token ids, float = embeddings."""
        x = np.asarray(inputs_embeds_or_ids)
        cache = self.new_cache(x.shape[0])
        logits = (self.logits_for_ids if x.dtype.kind in "iu" else self.decode)(x, cache)[:, -1]
        tokens, steps = [], []
        for t in range(max_new_tokens):
            steps.append(logits)
            tokens.append(logits.argmax(-1))
            if t + 1 < max_new_tokens:
                logits = self.logits_for_ids(tokens[-1][:, None], cache)[:, -1]
        return np.stack(tokens, axis=1), np.stack(steps)
