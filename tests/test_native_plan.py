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

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

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


@pytest.mark.parametrize("capacity", [16, 19])  # == window (what CUDA accepts); > window (CPU compacts by 4)
@pytest.mark.parametrize("prompt", [10, 24])  # 24 > capacity: the prefill evicts keys it still reads
def test_windowed_kv_layout_and_logits_match_onnxruntime(folders, capacity, prompt):
    folder, W, max_len = folders["fused", "fp32"], 16, 64
    plan = recognise(windowed(folder / "decoder.onnx", 16))
    assert [L.kv_capacity for L in plan.layers] == [16, 16, None]
    assert plan.kv_capacities(max_len) == (16, 16, max_len)
    plan = dataclasses.replace(plan, layers=tuple(
        dataclasses.replace(L, kv_capacity=capacity) if L.kv_capacity else L for L in plan.layers))
    sess = ort.InferenceSession(windowed(folder / "decoder.onnx", capacity).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ref = Reference.load(folder)
    x = ref.embed(np.random.default_rng(1).integers(9, 300, size=(1, prompt))).astype(np.float32)
    table = ref.embed_ids(np.arange(320)[None])[0].astype(np.float32)
    dec = NumpyDecoder(plan, max_len, np.float64)
    cache = dec.new_cache()
    past = {f"past_key_values.{i}.{kv}": np.zeros((1, 2, c, 16), np.float32)
            for i, c in enumerate(cache.capacities) for kv in ("key", "value")}
    T = 0
    for _ in range(40):
        T += x.shape[1]
        out = dict(zip(names, sess.run(None, dict(past, inputs_embeds=x, attention_mask=np.ones((1, T), np.int64),
                                                  position_ids=np.arange(T - x.shape[1], T)[None]))))
        ours = dec.forward(x[0], cache)
        np.testing.assert_allclose(ours, out["logits"][0], atol=5e-5)
        for i in (0, 1):
            r = cache.rows[i]
            assert r == resident(T, capacity, W) and min(T, W) <= r <= min(T, capacity)
            np.testing.assert_allclose(cache.keys[i][:, :r], out[f"present.{i}.key"][0, :, :r], atol=1e-5)
            np.testing.assert_allclose(cache.values[i][:, :r], out[f"present.{i}.value"][0, :, :r], atol=1e-5)
            np.testing.assert_array_equal(cache.token_of_row(i), np.arange(T - r, T))
        past = {k: out[k.replace("past_key_values", "present")] for k in past}
        x = table[[int(np.argmax(out["logits"][0, -1]))]][None]


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
