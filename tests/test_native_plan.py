"""vlmdecode.native: recognition of decoder graphs as DecoderPlans and the numpy executor.

Every fixture layout (unfused, fused, fused-cuda) in fp32 and fp16, driven by embeddings and by ids:
the plan's fields and weights against the fixture's config and initializers, its logits at every step
against the float64 reference, its greedy tokens against the onnxruntime CPU decoder; the windowed-KV
layout against onnxruntime's sliding_window_cache; primitive and contrib forms of the same math; and
refusals naming the node. Tiny preset: sliding_window 16, layers local, local, global; a 10-token prompt and
60 steps run 54 tokens past the window.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from PIL import Image

import vlmdecode
from vlmdecode.fixture import build_fixture, preset
from vlmdecode.native import DecoderPlan, LayerPlan, PlanError, recognise
from vlmdecode.native.numpy_exec import NumpyDecoder, embed, resident
from vlmdecode.reference import Reference

LAYOUTS = ("unfused", "fused", "fused-cuda")
DTYPES = ("fp32", "fp16")
PROMPT, STEPS = 10, 60
# float64 executor vs the float64 reference, max|a - b| / max|ref| over all steps: measured 1.2e-7 (fp32: the
# graph's float32 rotary tables) and 9.0e-4 (fp16: its fp16 tables; the reference computes cos/sin exactly)
TOL = {"fp32": 1e-5, "fp16": 5e-3}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("native")
    return {(lay, dt): build_fixture(preset("tiny", layout=lay, dtype=dt), root / f"{lay}-{dt}")
            for lay in LAYOUTS for dt in DTYPES}


def prompt_ids() -> np.ndarray:
    return np.random.default_rng(0).integers(9, 300, size=(1, PROMPT))


def decoder_path(folder, drive):
    return folder / ("decoder.onnx" if drive == "embeds" else "text/decoder.onnx")


def inits(path) -> dict:
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


# ---- recognition of the fixture layouts -----------------------------------------------------------------
@pytest.mark.parametrize("drive", ["embeds", "ids"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_recognises_fixture_layouts(folders, layout, dtype, drive):
    path = decoder_path(folders[layout, dtype], drive)
    cfg, w = preset("tiny", dtype=dtype), inits(path)
    plan = recognise(path)
    assert (plan.drive, plan.dtype, plan.source) == (drive, np.dtype(cfg.np_dtype), str(path))
    assert (plan.hidden, plan.num_heads, plan.num_kv_heads, plan.head_dim, plan.intermediate, plan.vocab) == (
        cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size)
    assert plan.eps == pytest.approx(cfg.rms_eps) and plan.attn_scale == cfg.head_dim ** -0.5
    assert plan.attn_softcap is None and plan.final_softcap is None
    assert plan.nodes_accounted == len(onnx.load(str(path)).graph.node)
    assert [L.kind for L in plan.layers] == list(cfg.layer_types)
    for i, (L, kind) in enumerate(zip(plan.layers, cfg.layer_types)):
        p = f"layers.{i}."
        assert L.index == i and L.kv_capacity is None
        assert L.window == (cfg.sliding_window if kind == "local" else None)
        theta = cfg.rope_local_theta if kind == "local" else cfg.rope_theta
        assert L.rope_theta == pytest.approx(theta, rel=1e-4)
        assert L.rope_cos.dtype == np.float32 and L.rope_cos.shape == (cfg.max_length, cfg.head_dim // 2)
        np.testing.assert_array_equal(L.rope_sin, w[f"rope_sin_{kind}"].astype(np.float32))
        np.testing.assert_array_equal(L.w_qkv, np.concatenate([w[p + "q_proj"], w[p + "k_proj"], w[p + "v_proj"]], 1))
        np.testing.assert_array_equal(L.w_gate_up, np.concatenate([w[p + "gate_proj"], w[p + "up_proj"]], 1))
        np.testing.assert_array_equal(L.w_o, w[p + "o_proj"])
        np.testing.assert_array_equal(L.w_down, w[p + "down_proj"])
        for field, name in (("input_norm", "input_norm"), ("q_norm", "q_norm"), ("k_norm", "k_norm"),
                            ("post_attn_norm", "post_attn_norm"), ("pre_ffn_norm", "pre_ff_norm"),
                            ("post_ffn_norm", "post_ff_norm")):  # effective: the graph's (1 + w), in its dtype
            want = (np.float32(1) + w[p + name]).astype(cfg.np_dtype).astype(np.float32)
            np.testing.assert_array_equal(getattr(L, field), want)
        assert L.w_qkv.dtype == cfg.np_dtype and not L.w_qkv.flags.writeable
    np.testing.assert_array_equal(plan.lm_head, w["embed_tokens"].T)
    if drive == "ids":
        assert plan.embed_scale == cfg.embed_scale and np.shares_memory(plan.lm_head, plan.embed_table)
    else:
        assert plan.embed_scale is None and plan.embed_table is None


def reference_run(folder, drive):
    """(reference, its greedy tokens [STEPS], logits [STEPS, V], the inputs for the plan, the embedding table)."""
    ref = Reference.load(folder, text_only=drive == "ids")
    ids = prompt_ids()
    x = ref.embed(ids) if drive == "embeds" else ids
    tokens, logits = ref.greedy(x, STEPS)
    table = ref.embed_ids(np.arange(ref.cfg.vocab_size)[None])[0] if drive == "embeds" else None
    return tokens[0], logits[:, 0], x[0], table


@pytest.mark.parametrize("drive", ["embeds", "ids"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_numpy_executor_matches_reference_every_step(folders, layout, dtype, drive):
    folder = folders[layout, dtype]
    tokens, want, x, table = reference_run(folder, drive)
    dec = NumpyDecoder(recognise(decoder_path(folder, drive)), 256, np.float64)
    cache = dec.new_cache()
    got = [dec.forward(x, cache)[-1]]
    for t in tokens[:-1]:  # teacher-forced on the reference's tokens: every step compares like with like
        got.append(dec.forward(np.array([t]) if table is None else table[[t]], cache)[-1])
    err = np.abs(np.stack(got) - want).max(axis=1) / np.abs(want).max()
    assert err.max() < TOL[dtype], f"worst step {err.argmax()}: {err.max():.2e}"
    np.testing.assert_array_equal(np.argmax(got, axis=1), tokens)
    assert cache.tokens == PROMPT + STEPS - 1 and cache.rows == [PROMPT + STEPS - 1] * 3


@pytest.mark.parametrize("drive", ["embeds", "ids"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["unfused", "fused"])  # fused-cuda: onnxruntime CPU cannot run it
def test_greedy_tokens_match_onnxruntime_cpu(folders, layout, dtype, drive):
    folder = folders[layout, dtype]
    pipe = vlmdecode.load(folder if drive == "embeds" else folder / "text", "cpu")
    ort_tokens = pipe.generate_from_ids(prompt_ids(), STEPS, stop=()).tokens
    _, _, x, table = reference_run(folder, drive)
    ours, _ = NumpyDecoder(recognise(decoder_path(folder, drive)), 256, np.float32).greedy_embeds(x, table, STEPS)
    np.testing.assert_array_equal(ours, ort_tokens)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pruned_lm_head_last_row_slice_is_recognised(tmp_path, layout):
    """The fixture's prune_lm_head (a Slice of the last position before the LM head, as the gemma3-1b preset
    exports) -> plan.logits_last_only; the plan's last row equals the reference's logits."""
    folder = build_fixture(preset("tiny", layout=layout, dtype="fp32", prune_lm_head=True), tmp_path / layout)
    assert any(n.op_type == "Slice" for n in onnx.load(str(folder / "decoder.onnx")).graph.node)
    plan = recognise(folder / "decoder.onnx")
    assert plan.logits_last_only
    tokens, want, x, table = reference_run(folder, "embeds")
    dec = NumpyDecoder(plan, 256, np.float64)
    cache = dec.new_cache()
    got = [dec.forward(x, cache)[-1]]
    for t in tokens[:5]:
        got.append(dec.forward(table[[t]], cache)[-1])
    np.testing.assert_allclose(np.stack(got), want[:6], atol=TOL["fp32"] * np.abs(want).max())


def test_slice_other_than_the_last_row_is_refused(tmp_path):
    folder = build_fixture(preset("tiny", layout="unfused", dtype="fp32", prune_lm_head=True), tmp_path / "m")
    model = onnx.load(str(folder / "decoder.onnx"))
    sl = next(n for n in model.graph.node if n.op_type == "Slice")
    starts = next(t for t in model.graph.initializer if t.name == sl.input[1]) if any(
        t.name == sl.input[1] for t in model.graph.initializer) else None
    if starts is not None:
        starts.CopyFrom(numpy_helper.from_array(np.array([-2], np.int64), starts.name))
    else:
        c = next(n for n in model.graph.node if sl.input[1] in n.output)
        c.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array([-2], np.int64)))
    with pytest.raises(PlanError, match=r"Slice .*starts \[-2\].*not the last position"):
        recognise(model)


# ---- windowed KV (GroupQueryAttention sliding_window_cache) -------------------------------------------
def windowed(path, capacity) -> onnx.ModelProto:
    """The decoder with sliding_window_cache=1 and window-sized past/present on its local layers."""
    m = onnx.load(str(path))
    local = []
    for n in m.graph.node:
        if n.op_type == "GroupQueryAttention" and helper.get_attribute_value(
                next(a for a in n.attribute if a.name == "local_window_size")) > 0:
            n.attribute.append(helper.make_attribute("sliding_window_cache", 1))
            local.append(n.input[3].split(".")[1])
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.name.startswith(("past_key_values.", "present.")) and vi.name.split(".")[1] in local:
            vi.type.tensor_type.shape.dim[2].dim_value = capacity
    return m


def lockstep(model, plan, max_len, x, next_input, steps, atol):
    """Run onnxruntime CPU (past fed back from present) and NumpyDecoder side by side for `steps` calls:
    the same logits at every call, and for windowed layers the same resident K/V rows in the same order.
    x: the first call's input ([1, S] ids or [1, S, H] embeddings); next_input(token) -> the next one."""
    sess = ort.InferenceSession(model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model),
                                providers=["CPUExecutionProvider"])
    names, inputs = [o.name for o in sess.get_outputs()], {i.name for i in sess.get_inputs()}
    dec = NumpyDecoder(plan, max_len, np.float64)
    cache = dec.new_cache()
    past = {f"past_key_values.{i}.{kv}": np.zeros((1, plan.num_kv_heads, c, plan.head_dim), np.float32)
            for i, c in enumerate(cache.capacities) for kv in ("key", "value")}
    T = 0
    for _ in range(steps):
        T += x.shape[1]
        feed = dict(past, attention_mask=np.ones((1, T), np.int64))
        feed["input_ids" if plan.drive == "ids" else "inputs_embeds"] = x
        if "position_ids" in inputs:
            feed["position_ids"] = np.arange(T - x.shape[1], T)[None]
        out = dict(zip(names, sess.run(None, feed)))
        ours = dec.forward(x[0], cache)
        np.testing.assert_allclose(ours[-1:] if plan.logits_last_only else ours, out["logits"][0], atol=atol)
        for i, L in enumerate(plan.layers):
            if L.kv_capacity:
                r = cache.rows[i]
                assert r == resident(T, L.kv_capacity, L.window) and min(T, L.window) <= r <= min(T, L.kv_capacity)
                np.testing.assert_allclose(cache.keys[i][:, :r], out[f"present.{i}.key"][0, :, :r], atol=atol)
                np.testing.assert_allclose(cache.values[i][:, :r], out[f"present.{i}.value"][0, :, :r], atol=atol)
                np.testing.assert_array_equal(cache.token_of_row(i), np.arange(T - r, T))
        past = {k: out[k.replace("past_key_values", "present")] for k in past}
        x = next_input(int(np.argmax(out["logits"][0, -1])))
    return cache


@pytest.mark.parametrize("capacity", [16, 19])  # == window (what CUDA accepts); > window (CPU compacts by 4)
@pytest.mark.parametrize("prompt", [10, 24])  # 24 > capacity: the prefill evicts keys it still reads
def test_windowed_kv_layout_and_logits_match_onnxruntime(folders, capacity, prompt):
    folder = folders["fused", "fp32"]
    plan = recognise(windowed(folder / "decoder.onnx", 16))
    assert [L.kv_capacity for L in plan.layers] == [16, 16, None]
    assert plan.kv_capacities(64) == (16, 16, 64)
    plan = dataclasses.replace(plan, layers=tuple(
        dataclasses.replace(L, kv_capacity=capacity) if L.kv_capacity else L for L in plan.layers))
    ref = Reference.load(folder)
    x = ref.embed(np.random.default_rng(1).integers(9, 300, size=(1, prompt))).astype(np.float32)
    table = ref.embed_ids(np.arange(320)[None])[0].astype(np.float32)
    cache = lockstep(windowed(folder / "decoder.onnx", capacity), plan, 64, x, lambda t: table[[t]][None], 40, 5e-5)
    assert cache.tokens == prompt + 39


def test_windowed_capacity_other_than_window_is_refused(folders):
    with pytest.raises(PlanError, match=r"GroupQueryAttention\).*capacity 19 for window 16"):
        recognise(windowed(folders["fused", "fp32"] / "decoder.onnx", 19))


# ---- other forms of the same math ---------------------------------------------------------------------
class Edit:
    """Rewrites a decoder ModelProto node by node (for forms the fixture does not write)."""

    def __init__(self, path):
        self.m = onnx.load(str(path))
        self.n = 0

    def const(self, value, dtype=np.float32):
        self.n += 1
        name = f"edit_const_{self.n}"
        self.m.graph.initializer.append(numpy_helper.from_array(np.array(value, dtype), name))
        return name

    def node(self, op, ins, out=None, domain="", **attrs):
        self.n += 1
        out = out or f"edit_{op}_{self.n}"
        self.new.append(helper.make_node(op, ins, [out], name=f"edit_{op}_{self.n}", domain=domain, **attrs))
        return out

    def rewrite(self, fn):
        """fn(node) -> None (keep the node) or True (it appended its replacement to self.new)."""
        old, self.new = list(self.m.graph.node), []
        for nd in old:
            if not fn(nd):
                self.new.append(nd)
        del self.m.graph.node[:]
        self.m.graph.node.extend(self.new)
        if any(nd.domain == "com.microsoft" for nd in self.new) and not any(
                o.domain == "com.microsoft" for o in self.m.opset_import):
            self.m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        return self.m


def attr(nd, name, default=None):
    return next((helper.get_attribute_value(a) for a in nd.attribute if a.name == name), default)


def primitive_forms(e: Edit, nd) -> bool:
    """RMSNormalization -> Pow/ReduceMean/Add/Sqrt/Div|Reciprocal/Mul; tanh Gelu -> its polynomial form."""
    if nd.op_type == "RMSNormalization":
        x, w = nd.input
        sq = e.node("Pow", [x, e.const(2.0)]) if e.n % 2 else e.node("Mul", [x, x])
        rms = e.node("Sqrt", [e.node("Add", [e.node("ReduceMean", [sq, e.const([-1], np.int64)]),
                                             e.const(attr(nd, "epsilon"))])])
        normed = e.node("Div", [x, rms]) if e.n % 3 else e.node("Mul", [e.node("Reciprocal", [rms]), x])
        e.node("Mul", [normed, w], out=nd.output[0])
        return True
    if nd.op_type == "Gelu":
        x = nd.input[0]
        inner = e.node("Add", [x, e.node("Mul", [e.const(0.044715), e.node("Pow", [x, e.const(3.0)])])])
        t = e.node("Tanh", [e.node("Mul", [inner, e.const(np.sqrt(2 / np.pi))])])
        e.node("Mul", [e.node("Mul", [x, e.const(0.5)]), e.node("Add", [t, e.const(1.0)])], out=nd.output[0])
        return True
    return False


def contrib_forms(e: Edit, nd) -> bool:
    """RMSNormalization -> SimplifiedLayerNormalization, Gelu -> FastGelu, RotaryEmbedding-23 -> contrib."""
    if nd.op_type == "RMSNormalization":
        e.node("SimplifiedLayerNormalization", list(nd.input), out=nd.output[0], axis=-1,
               epsilon=attr(nd, "epsilon"))
    elif nd.op_type == "Gelu":
        e.node("FastGelu", list(nd.input), out=nd.output[0], domain="com.microsoft")
    elif nd.op_type == "RotaryEmbedding":
        x, cos, sin, pos = nd.input
        e.node("RotaryEmbedding", [x, pos, cos, sin], out=nd.output[0], domain="com.microsoft",
               num_heads=attr(nd, "num_heads"))
    else:
        return False
    return True


@pytest.mark.parametrize("form", [primitive_forms, contrib_forms])
@pytest.mark.parametrize("layout", ["unfused", "fused"])
def test_primitive_and_contrib_forms_give_the_same_plan(folders, layout, form):
    folder = folders[layout, "fp32"]
    base = recognise(folder / "decoder.onnx")
    e = Edit(folder / "decoder.onnx")
    model = e.rewrite(lambda nd: form(e, nd))
    plan = recognise(model)
    assert plan.nodes_accounted == len(model.graph.node) > base.nodes_accounted - 1
    assert plan.eps == base.eps and plan.source == "<model>"
    for a, b in zip(plan.layers, base.layers):
        for f in dataclasses.fields(LayerPlan):
            va, vb = getattr(a, f.name), getattr(b, f.name)
            np.testing.assert_array_equal(va, vb) if isinstance(va, np.ndarray) else (va == vb or pytest.fail(f.name))
    x, want = ort_prefill(model, folder)
    dec = NumpyDecoder(plan, 256, np.float64)
    np.testing.assert_allclose(dec.forward(x, dec.new_cache()), want, atol=1e-4)


def ort_prefill(model, folder):
    """(prompt embeddings [S, H], onnxruntime CPU logits [S, V]) of an edited fp32 tiny decoder."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = Reference.load(folder).embed(prompt_ids()).astype(np.float32)
    feeds = {"inputs_embeds": x, "attention_mask": np.ones((1, PROMPT), np.int64),
             "position_ids": np.arange(PROMPT)[None]}
    feeds |= {i.name: np.zeros((1, 2, 256, 16), np.float32) for i in sess.get_inputs() if i.name.startswith("past")}
    return x[0], sess.run(["logits"], feeds)[0][0]


# ---- refusals ------------------------------------------------------------------------------------------
def first(model, op):
    return next(nd for nd in model.graph.node if nd.op_type == op)


def insert_after(e: Edit, value: str, op: str, extra=(), **attrs):
    """A node `op(value, *extra)` whose output replaces `value` for every consumer."""
    new = f"{value}_edited"
    for nd in e.m.graph.node:
        for k, name in enumerate(nd.input):
            if name == value:
                nd.input[k] = new
    e.m.graph.node.append(helper.make_node(op, [value, *extra], [new], name="the_extra_node", **attrs))
    onnx_sort(e.m)
    return e.m


def onnx_sort(m):
    """Topological order (the extra node was appended at the end)."""
    nodes, done, order = list(m.graph.node), {i.name for i in m.graph.input} | {t.name for t in m.graph.initializer}, []
    while nodes:
        ready = [nd for nd in nodes if all(x in done or x == "" for x in nd.input)]
        for nd in ready:
            order.append(nd)
            done.update(nd.output)
            nodes.remove(nd)
    del m.graph.node[:]
    m.graph.node.extend(order)


@pytest.mark.parametrize("layout", ["unfused", "fused"])
def test_refuses_extra_nodes_naming_them(folders, layout):
    path = folders[layout, "fp32"] / "decoder.onnx"
    e = Edit(path)
    o_proj = next(nd for nd in e.m.graph.node if nd.op_type == "MatMul" and nd.input[0].startswith("attn_"))
    with pytest.raises(PlanError, match=r"node 'the_extra_node' \(Relu\) is not an op"):
        recognise(insert_after(e, o_proj.output[0], "Relu"))
    e = Edit(path)
    with pytest.raises(PlanError, match=r"node 'the_extra_node' \(Mul\) is not the attention output projection"):
        recognise(insert_after(e, o_proj.output[0], "Mul", [e.const(2.0)]))
    e = Edit(path)  # a dead node
    e.m.graph.node.append(helper.make_node("Mul", ["inputs_embeds", "inputs_embeds"], ["dead"], name="the_dead_one"))
    with pytest.raises(PlanError, match=r"node 'the_dead_one' \(Mul\) is not part of the decoder"):
        recognise(e.m)


def test_refuses_what_the_plan_has_no_place_for(folders):
    path = folders["unfused", "fp32"] / "decoder.onnx"
    e = Edit(path)
    gelu = first(e.m, "Gelu")
    gelu.name, gelu.attribute[0].s = "exact_gelu", b"none"
    with pytest.raises(PlanError, match=r"'exact_gelu' \(Gelu\) is an exact \(erf\) GELU"):
        recognise(e.m)
    e = Edit(path)
    mm = first(e.m, "MatMul")
    mm.op_type, mm.domain, mm.name = "MatMulNBits", "com.microsoft", "int4"
    e.m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(PlanError, match=r"'int4' \(com.microsoft.MatMulNBits\) holds block-quantised"):
        recognise(e.m)
    e = Edit(path)
    e.m.graph.output.append(helper.make_tensor_value_info(first(e.m, "Gelu").output[0], 1, None))
    with pytest.raises(PlanError, match=r"graph output 'gelu_\d+' has no place in the plan"):
        recognise(e.m)
    e = Edit(path)
    e.m.graph.output[0].name = "scores"
    first(e.m, "Identity").output[0] = "scores"
    with pytest.raises(PlanError, match="no 'logits' output"):
        recognise(e.m)
    e = Edit(path)
    gqa = first(e.m, "GroupQueryAttention")
    gqa.input[5] = "attention_mask"
    with pytest.raises(PlanError, match="seqlens_k/total_sequence_length that are not computed from attention_mask"):
        recognise(e.m)
    with pytest.raises(FileNotFoundError, match="recognise"):
        recognise(path.parent / "nothing")


# ---- executor edges ------------------------------------------------------------------------------------
def test_executor_checks_inputs_and_capacity(folders):
    plan = recognise(folders["fused", "fp32"] / "decoder.onnx")
    with pytest.raises(ValueError, match=r"inputs_embeds \[S, 64\]"):
        embed(plan, np.zeros((3, 5), np.float32))
    ids_plan = recognise(folders["fused", "fp32"] / "text" / "decoder.onnx")
    with pytest.raises(ValueError, match=r"token ids \[S\]"):
        embed(ids_plan, np.zeros((3, 64), np.float32))
    with pytest.raises(ValueError, match="greedy_embeds"):
        NumpyDecoder(plan, 8).greedy(np.zeros((2, 64), np.float32), 2)
    with pytest.raises(ValueError, match="float32 or float64, not float16"):
        NumpyDecoder(ids_plan, 8, np.float16)
    dec = NumpyDecoder(ids_plan, 8)
    with pytest.raises(ValueError, match="does not fit a KV capacity of 8"):
        dec.forward(np.arange(9), dec.new_cache())
    with pytest.raises(ValueError, match="past the rotary tables"):
        dec.forward(np.arange(2), dec.new_cache(), positions=[0, 256])
    tokens, logits = NumpyDecoder(ids_plan, 32).greedy(np.arange(3), 4)
    assert tokens.shape == (4,) and logits.shape == (4, 320) and (tokens == logits.argmax(1)).all()


def test_plan_sizes():
    z = np.zeros((2, 2), np.float32)
    layers = tuple(LayerPlan(i, "local" if c else "global", c, c, 1e4, z, z, z[0], None, None, z, z, z[0], z[0], z,
                             z, z[0]) for i, c in enumerate((16, None)))
    p = DecoderPlan("x.onnx", "embeds", np.dtype(np.float16), 64, 4, 2, 16, 128, 320, 1e-6, 0.25, None, None, None,
                    None, layers, z[0], z, 7)
    assert (p.q_size, p.kv_size, p.num_layers, p.kv_capacities(256)) == (64, 32, 2, (16, 256))


# ---- model variants ------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["unfused", "fused-cuda"])
@pytest.mark.parametrize("change", [{"num_kv_heads": 1}, {"final_logit_softcap": 5.0}])
def test_single_kv_head_and_final_softcap(tmp_path, layout, change):
    """One KV head (Gemma 3 1B: its per-head k norm is a norm over the whole K width) and a logit soft-cap."""
    folder = build_fixture(preset("tiny", layout=layout, **change), tmp_path / "f")
    plan = recognise(folder / "text" / "decoder.onnx")
    assert plan.num_kv_heads == change.get("num_kv_heads", 2)
    assert plan.final_softcap == change.get("final_logit_softcap")
    tokens, want, x, _ = reference_run(folder, "ids")
    got_tokens, got = NumpyDecoder(plan, 256, np.float64).greedy(x, STEPS)
    np.testing.assert_array_equal(got_tokens, tokens)
    assert np.abs(got - want).max() / np.abs(want).max() < TOL["fp32"]


def test_attention_softcap_matches_onnxruntime(folders):
    """GroupQueryAttention's softcap attribute (Gemma 2 style) reaches the plan and the executor."""
    e = Edit(folders["fused", "fp32"] / "decoder.onnx")
    for nd in e.m.graph.node:
        if nd.op_type == "GroupQueryAttention":
            nd.attribute.append(helper.make_attribute("softcap", 0.5))
    plan = recognise(e.m)
    assert plan.attn_softcap == 0.5
    x, want = ort_prefill(e.m, folders["fused", "fp32"])
    dec = NumpyDecoder(plan, 256, np.float64)
    np.testing.assert_allclose(dec.forward(x, dec.new_cache()), want, atol=1e-4)
    base = NumpyDecoder(recognise(folders["fused", "fp32"] / "decoder.onnx"), 256, np.float64)
    assert np.abs(base.forward(x, base.new_cache()) - want).max() > 1e-2  # the cap changes the logits


# ---- onnxruntime-genai builder exports (tests/data/exported, see its README) ---------------------------
EXPORTED = Path(__file__).parent / "data" / "exported"
BUILDER_TEXT = {  # folder -> (dtype, windowed local layers, logits_last_only, hidden_output)
    "builder-text-fp32": (np.float32, True, False, None),
    "builder-text-fp32-fullkv": (np.float32, False, False, None),
    "builder-text-pruned": (np.float32, True, True, None),
    "builder-text-hidden": (np.float32, True, False, "hidden_states"),
    "builder-text-fp16-cuda": (np.float16, True, False, None),  # q/k norms inside GQA, fp32 residual stream
}


def expected(folder) -> dict:
    return json.loads((folder / "expected.json").read_text())


@pytest.mark.parametrize("name", sorted(BUILDER_TEXT))
def test_builder_text_exports_are_recognised_and_decode_their_tokens(name):
    """200 greedy steps equal to onnxruntime-genai 0.18 CPU (or HF float32 where genai cannot run the graph)."""
    dtype, windowed_kv, last_only, hidden = BUILDER_TEXT[name]
    folder = EXPORTED / name
    plan = recognise(folder / "model.onnx")
    assert (plan.drive, plan.dtype, plan.logits_last_only, plan.hidden_output) == ("ids", dtype, last_only, hidden)
    assert (plan.hidden, plan.num_heads, plan.num_kv_heads, plan.head_dim, plan.intermediate, plan.vocab) == (
        64, 4, 1, 16, 128, 368)
    assert plan.attn_scale == 0.25 and plan.embed_scale == 8.0 and plan.final_softcap is plan.attn_softcap is None
    assert [L.kind for L in plan.layers] == ["local"] * 5 + ["global"]
    assert [L.window for L in plan.layers] == [12] * 5 + [None]
    assert [L.kv_capacity for L in plan.layers] == ([12] if windowed_kv else [None]) * 5 + [None]
    assert [round(L.rope_theta) for L in plan.layers] == [10_000] * 5 + [1_000_000]
    assert plan.nodes_accounted == len(onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.node)
    assert np.shares_memory(plan.lm_head, plan.embed_table)  # tied: the Gather reads Transpose(lm_head)
    e = expected(folder)
    run = e["onnxruntime_genai_cpu_greedy"]
    want = run["tokens"] if "tokens" in run else e["hf_float32_greedy"]["tokens"]
    tokens, _ = NumpyDecoder(plan, 512, np.float32).greedy(np.array(e["prompt"]["input_ids"]), len(want))
    np.testing.assert_array_equal(tokens, want)


@pytest.mark.parametrize("name", ["builder-text-fp32", "builder-text-fp32-fullkv", "builder-text-pruned"])
def test_builder_exports_match_onnxruntime_every_step(name):
    """Logits at every call and the windowed layers' resident K/V against onnxruntime CPU on the export."""
    folder = EXPORTED / name
    plan = recognise(folder / "model.onnx")
    ids = np.array([expected(folder)["prompt"]["input_ids"]])
    cache = lockstep(folder / "model.onnx", plan, 512, ids, lambda t: np.array([[t]]), 40, 2e-4)
    assert cache.tokens == ids.shape[1] + 39


def test_builder_vlm_export_decodes_genais_tokens_from_its_embeddings():
    """The exclude_embeds decoder (inputs_embeds) fed by the folder's own vision and embedding models."""
    folder = EXPORTED / "builder-vlm"
    plan = recognise(folder / "model.onnx")
    assert (plan.drive, plan.embed_scale, plan.embed_table) == ("embeds", None, None)
    case = expected(folder)["images"]["image_64x64.png"]
    rgb = np.asarray(Image.open(folder / "image_64x64.png").convert("RGB"), np.float32)  # 64x64: no resize
    pixels = ((rgb / 255 - 0.5) / 0.5).transpose(2, 0, 1)[None]
    assert pixels.sum() == pytest.approx(case["onnxruntime_genai_cpu_greedy"]["pixel_values_sum"], abs=0.05)
    sess = lambda f: ort.InferenceSession(str(folder / f), providers=["CPUExecutionProvider"])  # noqa: E731
    feats = sess("vision.onnx").run(None, {"pixel_values": pixels})[0]
    embedding = sess("embedding.onnx")
    ids = np.array([case["onnxruntime_genai_cpu_greedy"]["input_ids"]])
    x = embedding.run(None, {"input_ids": ids, "image_features": feats})[0][0]
    vocab = np.where(np.arange(plan.vocab) == 9, 0, np.arange(plan.vocab))[None]  # 9 = <image_soft_token>
    table = embedding.run(None, {"input_ids": vocab, "image_features": feats[:, :0]})[0][0]
    want = case["onnxruntime_genai_cpu_greedy"]["tokens"]
    tokens, _ = NumpyDecoder(plan, 512, np.float32).greedy_embeds(x, table, len(want))
    np.testing.assert_array_equal(tokens, want)


@pytest.mark.parametrize("name, match", [
    ("builder-text-int4", r"GatherBlockQuantized\) holds block-quantised"),
    ("builder-text-int4-cuda", r"GatherBlockQuantized\) holds block-quantised"),
    ("optimum-text", r"this graph has no com.microsoft.GroupQueryAttention"),
])
def test_exports_the_plan_cannot_describe_are_refused(name, match):
    with pytest.raises(PlanError, match=match):
        recognise(EXPORTED / name / "model.onnx")


def test_a_packed_matrix_split_in_order_is_not_copied():
    from vlmdecode.native.recognise import _cat
    from vlmdecode.native.symbols import Sym

    w = np.arange(24.0).reshape(3, 8)
    part = lambda s, e, parent=w: Sym("linear", attrs={"w": parent[:, s:e], "parent": parent, "cols": (s, e)})  # noqa: E731
    assert _cat([part(0, 2), part(2, 5), part(5, 8)]) is w
    for parts in ([part(2, 5), part(0, 2), part(5, 8)], [part(0, 2), part(2, 5)], [part(0, 2), part(2, 8, w.copy())]):
        got = _cat(parts)
        assert got is not w and not np.shares_memory(got, w)
        np.testing.assert_array_equal(got, np.concatenate([p.attrs["w"] for p in parts], 1))


def _nodes(m, op):
    return [nd for nd in m.graph.node if nd.op_type == op]


def _set_attr(nd, name, value):
    kept = [a for a in nd.attribute if a.name != name]
    del nd.attribute[:]
    nd.attribute.extend(kept + [helper.make_attribute(name, value)])
    return nd


def _rename(nd):
    nd.name = "renamed"


def _gqa_input(nd, k, value):
    while len(nd.input) <= k:
        nd.input.append("")
    nd.input[k] = value


def _o_proj(m):
    return next(nd for nd in _nodes(m, "MatMul") if nd.input[0].startswith("attn_"))


REFUSALS = {  # (layout, edit(Edit), message)
    "two activations": ("unfused", lambda e: _nodes(e.m, "MatMul")[0].input.__setitem__(1, "inputs_embeds"),
                        r"\(MatMul\) multiplies two activations"),
    "int cast": ("unfused", lambda e: insert_after(e, _o_proj(e.m).output[0], "Cast", to=7),
                 r"'the_extra_node' \(Cast\) casts an activation to a non-float type"),
    "bias": ("unfused", lambda e: insert_after(e, _o_proj(e.m).output[0], "Add", [e.const(np.ones(64))]),
             r"'the_extra_node' \(Add\) Adds a constant that is not a scalar"),
    "computed shape": ("unfused", lambda e: _nodes(e.m, "Reshape")[0].input.__setitem__(1, "position_ids"),
                       r"\(Reshape\) reshapes to a computed shape"),
    "norm axis": ("unfused", lambda e: _set_attr(_nodes(e.m, "RMSNormalization")[0], "axis", 1),
                  r"\(RMSNormalization\) normalises axis 1"),
    "interleaved": ("unfused", lambda e: _set_attr(_nodes(e.m, "RotaryEmbedding")[0], "interleaved", 1),
                    r"\(RotaryEmbedding\) rotates interleaved pairs"),
    "undefined": ("unfused", lambda e: _nodes(e.m, "Gelu")[0].input.__setitem__(0, "nowhere"),
                  r"\(Gelu\) reads 'nowhere', which no earlier node"),
    "mask sum": ("unfused", lambda e: _nodes(e.m, "ReduceSum")[0].input.__setitem__(0, "position_ids"),
                 r"\(ReduceSum\) is a ReduceSum of something other than attention_mask"),
    "bias input": ("unfused", lambda e: _gqa_input(_nodes(e.m, "GroupQueryAttention")[0], 10, "inputs_embeds"),
                   r"\(com.microsoft.GroupQueryAttention\) has a attention_bias input"),
    "non-causal": ("unfused", lambda e: _set_attr(_nodes(e.m, "GroupQueryAttention")[0], "causal", 0),
                   r"GroupQueryAttention\) is non-causal"),
    "rotary inside and out": ("unfused", lambda e: _set_attr(_nodes(e.m, "GroupQueryAttention")[0], "do_rotary", 1),
                              r"GroupQueryAttention\) rotates inside and outside"),
    "one rotary": ("unfused", lambda e: _nodes(e.m, "GroupQueryAttention")[0].input.__setitem__(
        1, _nodes(e.m, "RotaryEmbedding")[1].input[0]), r"GroupQueryAttention\) has rotary on only one"),
    "two epsilons": ("unfused", lambda e: _rename(_set_attr(_nodes(e.m, "RMSNormalization")[3], "epsilon", 1e-5)),
                     r"'renamed' \(RMSNormalization\) uses RMSNorm epsilon 1e-05 where the graph's first norm uses"),
    "past name": ("unfused", lambda e: [nd.input.__setitem__(3, "past_key_values.1.key") for nd in
                                        _nodes(e.m, "GroupQueryAttention")[:1]],
                  r"\(layer 0\) does not read graph input past_key_values.0.key"),
    "one q/k norm": ("fused-cuda", lambda e: _gqa_input(_nodes(e.m, "GroupQueryAttention")[0], 15, ""),
                     r"GroupQueryAttention\) has one of q_norm_weight/k_norm_weight"),
    "skip output used": ("fused", lambda e: e.m.graph.output.append(helper.make_tensor_value_info(
        _set_output(_nodes(e.m, "SkipSimplifiedLayerNormalization")[0], 1, "mean"), 1, None)),
        r"\(com.microsoft.SkipSimplifiedLayerNormalization\) output 1 \('mean'\) is used"),
}


def _set_output(nd, k, name):
    nd.output[k] = name
    return name


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_name_the_node_and_the_reason(folders, case):
    layout, edit, message = REFUSALS[case]
    e = Edit(folders[layout, "fp32"] / "decoder.onnx")
    edit(e)
    with pytest.raises(PlanError, match=message):
        recognise(e.m)
