"""Recognise a Gemma-3 decoder in an ONNX graph and return its DecoderPlan.

What it is: the matcher over the canonical symbols of `vlmdecode.native.lift`. It walks back from the
`logits` output: soft-cap, LM head, final norm, then layer after layer (the residual Add of the MLP branch
`post_ffn_norm(down(gelu_tanh(gate(h)) * up(h)))` with h = pre_ffn_norm(x'), x' = the residual Add of the
attention branch `post_attn_norm(o(attention))`), down to the embedding (inputs_embeds, optionally scaled;
or a Gather of input_ids, optionally scaled). Attention is com.microsoft.GroupQueryAttention: packed or
separate Q/K/V, q/k norms as nodes or inside it, rotary as nodes or inside it, its lengths derived from
attention_mask (probed: seqlens_k = sum(mask) - 1, total_sequence_length = mask.shape[1]). Layer i reads
past_key_values.{i}.key/value and writes present.{i}.key/value. Accepted as well: a last-position Gather
before the head (the builder's prune_lm_head: plan.logits_last_only) and the final norm's output as a graph
output (include_hidden_states: plan.hidden_output). Every node must end up in the plan: one that does not
raises PlanError naming it. What it is not: a converter of other architectures (no biases, no
LayerNorm, no exact GELU, no int4), or a reader of genai_config.json.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import onnx

from .lift import Lifted, lift
from .plan import DecoderPlan, LayerPlan, PlanError
from .symbols import Sym, describe, ew_kind


def _load(path_or_model) -> tuple[onnx.ModelProto, str]:
    if isinstance(path_or_model, onnx.ModelProto):
        return path_or_model, "<model>"
    p = Path(path_or_model)
    if p.is_dir():
        p = p / "decoder.onnx"
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found: recognise() takes a decoder .onnx file, its folder or a ModelProto")
    return onnx.load(str(p)), str(p)  # external data is loaded from beside the file


def recognise(path_or_model) -> DecoderPlan:
    """The DecoderPlan of a decoder ONNX file (or a folder holding decoder.onnx, or a ModelProto).
    PlanError names the first node the plan has no place for and why."""
    model, source = _load(path_or_model)
    try:
        lifted = lift(model)
    except PlanError as e:
        if not any(n.op_type == "GroupQueryAttention" for n in model.graph.node):
            raise PlanError(f"{e} (this graph has no com.microsoft.GroupQueryAttention: attention written in "
                            "standard ops, as optimum exports it, is not recognised)") from None
        raise
    return _Matcher(lifted, source).plan()


def _cat(parts: list[Sym]) -> np.ndarray:
    """Columns of several MatMuls side by side; a packed matrix split in order comes back as itself."""
    parent, col = parts[0].attrs.get("parent"), 0
    for p in parts:
        if parent is None or p.attrs.get("parent") is not parent or p.attrs["cols"][0] != col:
            return np.concatenate([p.attrs["w"] for p in parts], axis=1)
        col = p.attrs["cols"][1]
    return parent if col == parent.shape[1] else np.concatenate([p.attrs["w"] for p in parts], axis=1)


def _theta(cos: np.ndarray, sin: np.ndarray, head_dim: int) -> float:
    """theta with inv_freq_k = theta ** (-2k / head_dim), fitted from column 1 of the tables (all rows)."""
    if cos.shape[0] < 2 or cos.shape[1] < 2:
        return float("nan")
    ang = np.unwrap(np.arctan2(sin[:, 1].astype(np.float64), cos[:, 1].astype(np.float64)))
    p = np.arange(len(ang), dtype=np.float64)
    inv1 = float(p @ ang / (p @ p))
    return inv1 ** (-head_dim / 2.0)


class _Matcher:
    def __init__(self, L: Lifted, source: str):
        self.L, self.source = L, source
        self.used: dict[int, Sym] = {}
        self.eps: list[tuple[float, Sym]] = []
        self.tables: dict[int, np.ndarray] = {}
        self.atts: list[Sym] = []

    # ---- helpers -------------------------------------------------------------------------------------
    def fail(self, s: Sym | None, why: str):
        i = max(s.nodes) if s is not None and s.nodes else None
        what = None if s is None else f"graph value {s.attrs.get('name', '?')!r} ({s.op})"
        raise PlanError(f"{describe(self.L.nodes, i, what)} {why}")

    def peel(self, s: Sym, kind: str, other: str) -> tuple:
        """(parameter, input) of an elementwise `kind` op at `s` (a soft-cap's c, a scale's factor), or
        (None, s) when `s` is not elementwise; any other elementwise op is refused ("is an elementwise
        function " + other)."""
        if s.op != "ew":
            return None, s
        k = ew_kind(s)
        if not k or k[0] != kind:
            self.fail(s, f"is an elementwise function {other}")
        return k[1], s.args[0]

    def use(self, *syms):
        for s in syms:
            if s is not None and id(s) not in self.used:
                self.used[id(s)] = s
                if s.op == "mask":
                    self.use(*s.args)

    def expect(self, s: Sym | None, op: str, role: str) -> Sym:
        if s is None or s.op != op:
            self.fail(s, f"is not {role} (expected a {op}, found {'nothing' if s is None else s.op})")
        self.use(s)
        return s

    def norm(self, s: Sym, role: str, head: bool = False) -> np.ndarray:
        """The effective weight of a norm (a per-head norm: head=True), its epsilon noted."""
        self.expect(s, "headnorm" if head else "norm", role)
        self.use(s.attrs["wsym"])
        self.eps.append((s.attrs["eps"], s))
        return s.attrs["w"]

    def linear(self, s: Sym, role: str) -> Sym:
        self.expect(s, "linear", role)
        self.use(s.attrs["wsym"])
        return s

    def table(self, s: Sym) -> np.ndarray:
        self.use(s)
        if id(s) not in self.tables:
            t = s.value.astype(np.float32)
            t.setflags(write=False)
            self.tables[id(s)] = t
        return self.tables[id(s)]

    def branch(self, add: Sym, role: str) -> tuple[Sym, Sym]:
        """(the branch, the residual) of a residual Add: the branch is norm(MatMul(...))."""
        self.expect(add, "add", f"the residual add after {role}")
        is_norm = [a.op == "norm" for a in add.args]
        if sum(is_norm) == 2:  # the branch is the norm of a MatMul
            is_norm = [a.args[0].op == "linear" for a in add.args]
        if sum(is_norm) != 1:
            self.fail(add, f"does not add one normalised {role} output to the residual stream")
        k = is_norm.index(True)
        return add.args[k], add.args[1 - k]

    # ---- the decoder ---------------------------------------------------------------------------------
    def plan(self) -> DecoderPlan:
        g, syms = self.L.model.graph, self.L.syms
        outs = [o.name for o in g.output]
        if "logits" not in outs:
            raise PlanError(f"the graph has no 'logits' output (outputs: {outs})")
        y = syms["logits"]
        self.use(y)
        final_softcap, y = self.peel(y, "softcap", "of the logits other than a soft-cap c * tanh(x / c)")
        head = self.linear(y, "the LM head")
        h, last_only = head.args[0], False
        if h.op == "last":  # only the last position's logits (prune_lm_head)
            if not h.attrs.get("keepdims"):
                self.fail(h, "drops the sequence axis before the LM head; the plan's logits are [B, 1, V]")
            self.use(h)
            h, last_only = h.args[0], True
        final_norm = self.norm(h, "the final norm")
        x, rev = h.args[0], []
        while x.op == "add":
            layer, x = self.layer(x)
            rev.append(layer)
        drive, embed_scale, embed_table = self.embedding(x)
        layers = [self.attention(k, parts) for k, parts in enumerate(reversed(rev))]
        if not layers:
            self.fail(x, "is where a decoder layer should start; the graph has none")
        hidden = self.outputs(outs, h)
        plan = self.finish(drive, embed_scale, embed_table, layers, final_norm, head, final_softcap)
        return dataclasses.replace(plan, logits_last_only=last_only, hidden_output=hidden)

    def layer(self, x_out: Sym):
        post_ffn, x_mid = self.branch(x_out, "the MLP")
        down = self.linear(post_ffn.args[0], "the MLP down projection")
        m = self.expect(down.args[0], "mul", "the GeGLU product gelu(gate) * up")
        is_gelu = [a.op == "ew" and ew_kind(a) == ("gelu_tanh",) for a in m.args]
        if sum(is_gelu) != 1:
            self.fail(m, "is not gelu_tanh(gate) * up")
        gelu = self.expect(m.args[is_gelu.index(True)], "ew", "the tanh GELU of the gate")
        gate = self.linear(gelu.args[0], "the gate projection")
        up = self.linear(m.args[1 - is_gelu.index(True)], "the up projection")
        h2 = gate.args[0]
        if up.args[0] is not h2:
            self.fail(up, "reads a different input than the gate projection")
        pre_ffn = self.norm(h2, "the pre-MLP norm")
        if h2.args[0] is not x_mid:
            self.fail(h2, "does not normalise the residual stream after attention")
        post_attn, x_prev = self.branch(x_mid, "attention")
        o = self.linear(post_attn.args[0], "the attention output projection")
        ao = self.expect(o.args[0], "attn_out", "the output of GroupQueryAttention")
        parts = dict(post_ffn=self.norm(post_ffn, "the post-MLP norm"), w_down=down.attrs["w"],
                     w_gate_up=_cat([gate, up]), pre_ffn_norm=pre_ffn,
                     post_attn_norm=self.norm(post_attn, "the post-attention norm"), w_o=o.attrs["w"],
                     att=ao.args[0], x_prev=x_prev)
        return parts, x_prev

    def qk(self, s: Sym, role: str, head_dim: int):
        """(linear, rotary sym or None, norm weight or None) of a separate q or k input. A norm over the
        whole width is a per-head norm when the width is one head (Gemma 3 1B's single KV head)."""
        rot = None
        if s is not None and s.op == "rotary":
            rot = self.expect(s, "rotary", f"the {role} rotary")
            s = s.args[0]
        w = None
        if s is not None and (s.op == "headnorm" or (s.op == "norm" and s.feat == head_dim)):
            w = self.norm(s, f"the {role} norm", head=s.op == "headnorm")
            s = s.args[0]
        return self.linear(s, f"the {role} projection"), rot, w

    def attention(self, idx: int, p: dict) -> LayerPlan:
        att = self.expect(p["att"], "attn", "GroupQueryAttention")
        self.atts.append(att)
        q_in, k_in, v_in, pk, pv, seqlens, total, cos, sin, pos, qn, kn = att.args
        a = att.attrs
        nq, nkv = a["num_heads"], a["kv_num_heads"]
        rot_q = rot_k = qw = kw = None
        if k_in is None:  # packed QKV into the attention
            if v_in is not None:
                self.fail(att, "has a value input but no key input")
            lin = self.linear(q_in, "the packed QKV projection")
            h1, w_qkv = lin.args[0], lin.attrs["w"]
        else:
            d = att.feat // nq
            (lq, rot_q, qw), (lk, rot_k, kw) = self.qk(q_in, "query", d), self.qk(k_in, "key", d)
            lv = self.linear(v_in, "the value projection")
            h1 = lq.args[0]
            if lk.args[0] is not h1 or lv.args[0] is not h1:
                self.fail(att, "reads Q, K and V projections of different inputs")
            w_qkv = _cat([lq, lk, lv])
        input_norm = self.norm(h1, "the input norm of a layer")
        if h1.args[0] is not p["x_prev"]:
            self.fail(h1, "does not normalise the residual stream entering the layer")
        d = w_qkv.shape[1] // (nq + 2 * nkv)
        if (qn is None) != (kn is None) or (qn is not None and qw is not None):
            self.fail(att, "has one of q_norm_weight/k_norm_weight, or norms both inside and outside it")
        if qn is not None:
            for w in (qn, kn):
                if w.op != "const" or w.value.shape != (d,):
                    self.fail(att, f"has q/k norm weights that are not constant [{d}] vectors")
                self.use(w)
            qw, kw = qn.value.astype(np.float32), kn.value.astype(np.float32)
            e = a.get("qk_norm_epsilon", 1e-6)
            self.eps += [(a.get("q_norm_epsilon", e), att), (a.get("k_norm_epsilon", e), att)]
        if (rot_q is None) != (rot_k is None):
            self.fail(att, "has rotary on only one of query and key")
        if rot_q is not None:
            if a.get("do_rotary", 0):
                self.fail(att, "rotates inside and outside GroupQueryAttention")
            if rot_q.attrs["cos"].value is not rot_k.attrs["cos"].value or rot_q.args[1] is not rot_k.args[1]:
                self.fail(rot_k, "rotates key and query with different tables or positions")
            cos, sin, pos = rot_q.attrs["cos"], rot_q.attrs["sin"], rot_q.args[1]
        elif not a.get("do_rotary", 0) or cos is None or cos.op != "const" or sin is None or sin.op != "const":
            self.fail(att, "has no rotary embedding (neither do_rotary with constant caches nor rotary nodes)")
        self.use(pos)
        self.check_lengths(att, seqlens, total)
        self.check_cache(att, idx, pk, pv)
        window = a.get("local_window_size", -1)
        window = int(window) if window > 0 else None
        cap = None
        if a.get("sliding_window_cache", 0):  # the capacity is the caller's choice unless the graph fixes it
            cap = pk.attrs["shape"][2] if isinstance(pk.attrs["shape"][2], int) else window
            if window is None or cap != window:
                self.fail(att, f"has a windowed KV cache of capacity {cap} for window {window}: the plan needs "
                               "capacity == local_window_size (what CUDA GroupQueryAttention accepts)")
        rc, rs = self.table(cos), self.table(sin)
        return LayerPlan(
            index=idx, kind="local" if window else "global", window=window, kv_capacity=cap,
            rope_theta=_theta(rc, rs, d), rope_cos=rc, rope_sin=rs, input_norm=input_norm, q_norm=qw, k_norm=kw,
            w_qkv=w_qkv, w_o=p["w_o"], post_attn_norm=p["post_attn_norm"], pre_ffn_norm=p["pre_ffn_norm"],
            w_gate_up=p["w_gate_up"], w_down=p["w_down"], post_ffn_norm=p["post_ffn"])

    def check_lengths(self, att: Sym, seqlens: Sym, total: Sym):
        """GroupQueryAttention's lengths must be sum(mask) - 1 and mask.shape[1], as int32 (probed)."""
        for s in (seqlens, total):
            if s is None or s.op != "mask":
                self.fail(att, "has seqlens_k/total_sequence_length that are not computed from attention_mask")
            self.use(s)
        for mask in (np.ones((1, 5), np.int64), np.array([[1, 1, 1, 0, 0, 0, 0]], np.int64),
                     np.array([[1, 1, 0, 0], [1, 1, 1, 1]], np.int64)):
            got_s, got_t = seqlens.attrs["fn"](mask), total.attrs["fn"](mask)
            want_s = mask.sum(1) - 1
            if np.asarray(got_s).dtype != np.int32 or not np.array_equal(got_s, want_s) or \
                    np.asarray(got_t).dtype != np.int32 or np.asarray(got_t).size != 1 or int(got_t) != mask.shape[1]:
                self.fail(att, f"is given seqlens_k={got_s}, total_sequence_length={got_t} for mask {mask.tolist()}; "
                               "the plan needs int32 sum(mask)-1 and mask.shape[1]")

    def check_cache(self, att: Sym, idx: int, pk: Sym, pv: Sym):
        for s, which in ((pk, "key"), (pv, "value")):
            if s is None or s.op != "input" or s.attrs["name"] != f"past_key_values.{idx}.{which}":
                self.fail(att, f"(layer {idx}) does not read graph input past_key_values.{idx}.{which}")
            self.use(s)

    def outputs(self, outs: list[str], final: Sym) -> str | None:
        """Check every graph output; returns the name of the one holding the final norm's output, if any."""
        atts, hidden = dict(enumerate(self.atts)), None
        for name in outs:
            if name == "logits":
                continue
            if self.L.syms.get(name) is final and hidden is None:  # include_hidden_states
                hidden = name
                continue
            m = re.fullmatch(r"present\.(\d+)\.(key|value)", name)
            s = self.L.syms.get(name)
            if not m or int(m[1]) not in atts or s is None or s.op != "present" or s.args[0] is not atts[int(m[1])] \
                    or s.attrs["which"] != m[2]:
                raise PlanError(f"graph output {name!r} has no place in the plan (expected logits, "
                                f"present.<layer>.key/value of the layer's GroupQueryAttention, and optionally "
                                f"the final norm's output)")
            self.use(s)
        return hidden

    def embedding(self, x: Sym):
        self.use(x)
        scale, x = self.peel(x, "scale", "of the embeddings other than a scale")
        self.use(x)
        if x.op == "gather":
            self.use(x.args[0], x.attrs["table"])
            return "ids", scale, x.attrs["table"].value
        if x.op == "input" and x.attrs["dtype"].kind == "f":
            return "embeds", scale, None
        self.fail(x, "is where the embeddings should enter (inputs_embeds, or a Gather of input_ids)")

    def finish(self, drive, embed_scale, embed_table, layers, final_norm, head, final_softcap) -> DecoderPlan:
        acc = set().union(*(s.nodes for s in self.used.values()))
        for i in range(len(self.L.nodes)):
            if i not in acc:
                raise PlanError(f"{describe(self.L.nodes, i)} is not part of the decoder the plan describes "
                                "(nothing it computes reaches a place in the plan)")
        in_order = sorted(self.eps, key=lambda e: max(e[1].nodes))  # graph order: the first norm sets it
        eps = float(np.float32(in_order[0][0]))
        for e, s in in_order:
            if float(np.float32(e)) != eps:
                self.fail(s, f"uses RMSNorm epsilon {e:g} where the graph's first norm uses {eps:g}; the plan has one")
        L0, att = layers[0], self.atts[0]
        nq, nkv = att.attrs["num_heads"], att.attrs["kv_num_heads"]
        H, V = head.attrs["w"].shape
        d = L0.w_qkv.shape[1] // (nq + 2 * nkv)
        I = L0.w_gate_up.shape[1] // 2
        dts = {w.dtype for L in layers for w in (L.w_qkv, L.w_o, L.w_gate_up, L.w_down)} | {head.attrs["w"].dtype}
        if len(dts) != 1:
            raise PlanError(f"the graph's matrices mix dtypes {sorted(map(str, dts))}; the plan has one dtype")
        for k, L in enumerate(layers):
            a = self.atts[k].attrs
            shapes = {"w_qkv": (L.w_qkv.shape, (H, (nq + 2 * nkv) * d)), "w_o": (L.w_o.shape, (nq * d, H)),
                      "w_gate_up": (L.w_gate_up.shape, (H, 2 * I)), "w_down": (L.w_down.shape, (I, H)),
                      "heads": ((a["num_heads"], a["kv_num_heads"]), (nq, nkv)),
                      "scale, softcap": ((a.get("scale", 0.0), a.get("softcap", 0.0)),
                                         (att.attrs.get("scale", 0.0), att.attrs.get("softcap", 0.0)))}
            for what, (got, want) in shapes.items():
                if got != want:
                    raise PlanError(f"layer {k}: {what} is {got}, expected {want} from layer 0 and the LM head")
        arrays = [getattr(x, f.name) for x in layers for f in dataclasses.fields(x)]
        for a in arrays + [embed_table, final_norm, head.attrs["w"]]:
            if isinstance(a, np.ndarray):
                a.setflags(write=False)
        softcap = att.attrs.get("softcap", 0.0)
        return DecoderPlan(
            source=self.source, drive=drive, dtype=np.dtype(dts.pop()), hidden=H, num_heads=nq, num_kv_heads=nkv,
            head_dim=d, intermediate=I, vocab=V, eps=eps, attn_scale=float(att.attrs.get("scale", 0.0)
                                                                                     or d ** -0.5),
            attn_softcap=float(softcap) if softcap else None, final_softcap=final_softcap, embed_scale=embed_scale,
            embed_table=embed_table, layers=tuple(layers), final_norm=final_norm, lm_head=head.attrs["w"],
            nodes_accounted=len(acc))
