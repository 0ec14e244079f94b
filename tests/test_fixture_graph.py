"""The fixture graphs' node names: by layer and role, as onnxruntime-genai's builder names them, unique, and
the same count in every layer (the counts per layout are pinned here; decoder_graph's docstring points here)."""

from __future__ import annotations

from collections import Counter

import pytest

from vlmdecode.fixture import preset
from vlmdecode.fixture.decoder_graph import build_decoder
from vlmdecode.fixture.onnxgraph import node_role
from vlmdecode.fixture.vision_graph import build_embedding, build_vision

# nodes per decoder layer as written (before onnxruntime folds the weight-only ones), fp32 / fp16 (one Cast
# more per (1 + w) norm weight)
PER_LAYER = {("unfused", "gqa"): (30, 36), ("unfused", "onnx"): (47, 53), ("fused", "gqa"): (27, 33),
             ("fused-cuda", "gqa"): (20, 26)}


@pytest.mark.parametrize("layout, attention", list(PER_LAYER))
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_decoder_nodes_named_by_layer_and_role(layout, attention, dtype):
    cfg = preset("tiny", layout=layout, attention=attention, dtype=dtype)
    names = [n.name for n in build_decoder(cfg).graph.node]
    assert len(set(names)) == len(names)
    per_layer = Counter(n.split("/")[2] for n in names if n.startswith("/model/layers."))
    assert set(per_layer) == {f"layers.{i}" for i in range(cfg.num_layers)}
    assert set(per_layer.values()) == {PER_LAYER[layout, attention][dtype == "fp16"]}
    roles = {node_role(n) for n in names}
    attn_proj = {"attn/qkv_proj"} if layout != "unfused" else {"attn/q_proj", "attn/k_proj", "attn/v_proj"}
    mlp = {"mlp/gate_up_proj"} if layout != "unfused" else {"mlp/gate_proj", "mlp/up_proj"}
    assert attn_proj | mlp | {"attn/o_proj", "mlp/down_proj", "input_layernorm", "model/norm", "lm_head"} <= roles
    gqa = [n for n in names if n.endswith("/GroupQueryAttention")]
    assert gqa == [f"/model/layers.{i}/attn/GroupQueryAttention" for i in range(cfg.num_layers)] or attention == "onnx"


def test_vision_and_embedding_nodes_are_scoped():
    cfg = preset("tiny")
    for model in (build_vision(cfg), build_embedding(cfg)):
        names = [n.name for n in model.graph.node if n.op_type != "Identity"]
        assert len(set(names)) == len(names) and all(n.startswith(("/vision/", "/mm/", "/embed/")) for n in names)


def test_node_role():
    assert node_role("/model/layers.3/attn/qkv_proj/MatMul_1") == "attn/qkv_proj"
    assert node_role("/model/layers.12/input_layernorm/RMSNormalization") == "input_layernorm"
    assert node_role("/lm_head/MatMul") == "lm_head"
    assert node_role("MatMul_17") == "MatMul_17"  # not ours: as is
