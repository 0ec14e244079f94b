"""What an ONNX decoder file declares about itself: I/O signature and its attention layers' KV contract.

    Signature.read(path) -> names, element types and shapes of inputs/outputs, op types, and the
    per-layer attention facts of every com.microsoft.GroupQueryAttention node:
    `AttentionLayer(past_key, window, windowed_cache)`.

`window` is the node's local_window_size (None: full attention). `windowed_cache` is its
`sliding_window_cache` attribute (onnxruntime-genai's model builder sets it on the sliding layers
by default): the layer's past/present buffers then hold the last C >= window positions, not the
whole sequence, and the kernel evicts from the front itself (onnxruntime's GroupQueryAttention
schema, "Windowed KV Cache"; its CUDA kernel requires C == window). The caller only sizes and binds
that buffer; seqlens_k / total_sequence_length stay absolute (the builder derives them from the
attention mask), so the mask is the same as for a full-length cache.

Reads graph structure only (no weights, no onnxruntime). Not here: genai_config.json (modelfolder).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

_ONNX_DTYPES = {1: np.float32, 10: np.float16, 7: np.int64, 6: np.int32, 16: "bfloat16"}


class GraphError(ValueError):
    """An ONNX file cannot be read or declares something vlmdecode cannot drive."""


@dataclass(frozen=True)
class AttentionLayer:
    past_key: str  # the past_key graph input this node reads (names the layer)
    window: int | None  # local_window_size, None for full attention
    windowed_cache: bool  # sliding_window_cache=1: the KV buffer holds C >= window positions


@dataclass(frozen=True)
class Signature:
    """Names, element types and shapes (ints or symbolic strings) of an ONNX graph's inputs/outputs."""

    inputs: dict
    outputs: dict
    ops: frozenset
    cuda_only: str = ""  # why onnxruntime's CPU provider cannot run this graph ("" = it can)
    attention: tuple = ()  # AttentionLayer per GroupQueryAttention node that reads a graph input as past_key

    @staticmethod
    def read(path: Path) -> Signature:
        import onnx

        try:
            m = onnx.load(str(path), load_external_data=False)
        except Exception as e:  # protobuf decode errors have many types
            raise GraphError(f"{path} is not a readable ONNX model: {e}") from None

        def sig(values):
            out = {}
            for v in values:
                t = v.type.tensor_type
                shape = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.shape.dim)
                out[v.name] = (_ONNX_DTYPES.get(t.elem_type, t.elem_type), shape)
            return out

        inputs = sig(m.graph.input)
        return Signature(inputs, sig(m.graph.output), frozenset(n.op_type for n in m.graph.node),
                         _cuda_only(m.graph), _attention_layers(m.graph, inputs))

    def windows_by_past_key(self) -> dict[str, AttentionLayer]:
        return {a.past_key: a for a in self.attention}


def _cuda_only(graph) -> str:
    """onnxruntime 1.31's CPU GroupQueryAttention rejects q_norm_weight / k_norm_weight (inputs 14, 15)."""
    for n in graph.node:
        if n.op_type == "GroupQueryAttention" and any(n.input[14:16]):
            return (f"its GroupQueryAttention node {n.name!r} applies the q/k RMSNorms itself (q_norm_weight, "
                    "k_norm_weight), which onnxruntime implements on CUDA only")
    return ""


def _attention_layers(graph, inputs: dict) -> tuple:
    from onnx import helper

    out = []
    for n in graph.node:
        if n.op_type != "GroupQueryAttention" or len(n.input) < 4 or n.input[3] not in inputs:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        w = int(attrs.get("local_window_size", -1))
        windowed = bool(attrs.get("sliding_window_cache", 0))
        if windowed and w <= 0:
            raise GraphError(f"GroupQueryAttention node {n.name!r} has sliding_window_cache=1 but local_window_size "
                             f"{w}; onnxruntime requires a window > 0 there")
        out.append(AttentionLayer(n.input[3], w if w > 0 else None, windowed))
    return tuple(out)
