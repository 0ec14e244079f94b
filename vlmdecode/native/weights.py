"""The native decoder's weights on the device: each layer's GEMV rows (`kernels.rows_layout`), norms and rotary
tables, the LM head with the bounded head's int8 copy, the embedding table the step's advance reads, and the tiled
copies of gate|up and down that gemv_tiled streams (`native.tiled_gemv`).

What it is not: the choice of shapes (`native.shapes`) or the step's launches (`native.decoder`). Uploads run once
per decoder, tiled copies once per tiling the shapes ask for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import bounded_head as BH
from . import kernels as K
from .plan import DecoderPlan


@dataclass
class DeviceWeights:
    layers: list  # per layer: a dict of device arrays (w_qkv, w_o, w_gate_up, w_down, norms, cos, sin; tiled copies)
    final_norm: object
    lm_head: object  # [vocab, hidden] rows; tied: the embedding table itself
    bound_table: object  # BH.BoundTable of the bounded head, or None
    table: object  # [vocab, hidden] fp16: the embedding row of each id


def upload(cp, plan: DecoderPlan, folder, head_kind: str, head_bits: int) -> DeviceWeights:
    """The plan's weights as the step's kernels read them (global and local layers share two rotary tables)."""
    f32 = lambda a: cp.asarray(np.ascontiguousarray(a, np.float32))  # noqa: E731
    opt = lambda a: None if a is None else f32(a)  # noqa: E731
    rows = lambda w: cp.asarray(K.rows_layout(np.asarray(w, np.float16)))  # noqa: E731
    ropes: list[tuple[np.ndarray, np.ndarray, object, object]] = []

    def rope(L):
        for c, s, dc, ds in ropes:
            if c.shape == L.rope_cos.shape and np.array_equal(c, L.rope_cos) and np.array_equal(s, L.rope_sin):
                return dc, ds
        ropes.append((L.rope_cos, L.rope_sin, f32(L.rope_cos), f32(L.rope_sin)))
        return ropes[-1][2:]

    layers = []
    for L in plan.layers:
        cos, sin = rope(L)
        layers.append(dict(
            w_qkv=rows(L.w_qkv), w_o=rows(L.w_o), w_gate_up=rows(L.w_gate_up), w_down=rows(L.w_down),
            input_norm=f32(L.input_norm), post_attn_norm=f32(L.post_attn_norm), pre_ffn_norm=f32(L.pre_ffn_norm),
            post_ffn_norm=f32(L.post_ffn_norm), q_norm=opt(L.q_norm), k_norm=opt(L.k_norm), cos=cos, sin=sin))
    lm_head = rows(plan.lm_head)  # tied: lm_head is embed_table.T, so this is the table itself
    # the bounded head's int8 copy and row bounds (vocab x hidden bytes + 16 a row), quantised on the GPU
    bound_table = None
    if head_kind == "bounded":
        t = BH.quantise(lm_head, plan.hidden, bits=head_bits)
        bound_table = BH.BoundTable(cp.asarray(t.q), cp.asarray(t.sc), t.bits)
    if plan.drive == "ids":
        table = np.asarray(plan.embed_table, np.float16)
    else:
        from ..embedtable import embedding_table

        table = embedding_table(folder, np.float16)  # the embedding model's row for each id
    return DeviceWeights(layers, f32(plan.final_norm), lm_head, bound_table, cp.asarray(np.ascontiguousarray(table)))


def retile(cp, plan: DecoderPlan, layers: list, key: str, form, shape) -> None:
    """Each layer's `key` weights (w_gate_up, w_down) tiled (`form`(rows): `native.tiled_gemv`) beside its rows as
    layers[l][key + "_t"], made from the plan's weights when `shape` (what the tiling depends on) changes; shape
    None: the tiled copies let go."""
    for L, W in zip(plan.layers, layers):
        if shape is None:
            W.pop(key + "_t", None)
            W.pop(key + "_t_shape", None)
        elif W.get(key + "_t_shape") != shape:
            W[key + "_t"] = cp.asarray(form(K.rows_layout(np.asarray(getattr(L, key), np.float16))))
            W[key + "_t_shape"] = shape
