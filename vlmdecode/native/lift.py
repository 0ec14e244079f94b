"""Lift an ONNX decoder graph to canonical symbols: the same math gives the same symbols, whatever the layout.

What it is: one pass over the nodes in graph order that maps every tensor to a `Sym`, folding what can be
folded on the way: nodes whose inputs are all constant are evaluated with numpy (the in-graph `(1 + w)`,
packed Concats, the tied head's Transpose, Casts of weights); the `attention_mask` plumbing of
GroupQueryAttention (ReduceSum / Sub / Shape / Gather / Cast) becomes a function of the mask that
recognition probes; a Split of a MatMul becomes MatMuls on column slices; Cast, Identity and no-op
Reshapes are transparent; contrib and standard ops of one meaning give one symbol (RMSNormalization,
SimplifiedLayerNormalization and the Pow/ReduceMean/Add/Sqrt/Div/Mul primitives give "norm";
SkipSimplifiedLayerNormalization gives "add" and a "norm" of it; Gelu(tanh), FastGelu and scalar
arithmetic give "ew", an elementwise function of one tensor that recognition classifies by evaluating it).
Any node it cannot lift raises PlanError naming it, in graph order. What it is not: the decoder matcher
(`recognise` walks these symbols) or a general ONNX evaluator (constant folding knows a dozen ops).

Sym ops: input, const, mask, gather, last (the last position, [B, 1, F]), ew, norm, headnorm, view, linear,
add, mul, rotary, attn, attn_out, present, and the partial primitive-RMSNorm pieces ms, ms_eps, rms, inv_rms,
normalized.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import symbols as sy
from .plan import PlanError
from .symbols import MS, Sym, describe, ew_kind, scalar


@dataclass
class Lifted:
    model: onnx.ModelProto
    syms: dict  # value name -> Sym
    nodes: list  # the graph's NodeProtos, in order


# ---- the lifting pass -----------------------------------------------------------------------------------
class _Lifter:
    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.nodes = list(g.node)
        self.syms: dict[str, Sym] = {}
        for t in g.initializer:
            self.syms[t.name] = Sym("const", attrs={"value": numpy_helper.to_array(t), "name": t.name})
        for vi in g.input:
            if vi.name not in self.syms:
                tt = vi.type.tensor_type
                shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                              for d in tt.shape.dim)
                dt = helper.tensor_dtype_to_np_dtype(tt.elem_type)
                feat = shape[-1] if shape and isinstance(shape[-1], int) else None
                self.syms[vi.name] = Sym("input", attrs={"name": vi.name, "dtype": dt, "shape": shape}, feat=feat)
        self.consumers: dict[str, list] = {}
        for i, n in enumerate(self.nodes):
            for x in n.input:
                self.consumers.setdefault(x, []).append(i)
        self.outputs = {o.name for o in g.output}

    def fail(self, i, why):
        raise PlanError(f"{describe(self.nodes, i)} {why}")

    def get(self, i, name):
        if name == "":
            return None
        if name not in self.syms:
            self.fail(i, f"reads {name!r}, which no earlier node, input or initializer defines")
        return self.syms[name]

    def unused(self, i, k):
        """Output k of node i must not be read by anything."""
        out = self.nodes[i].output
        if len(out) > k and out[k] and (out[k] in self.consumers or out[k] in self.outputs):
            self.fail(i, f"output {k} ({out[k]!r}) is used; the plan has no place for it")

    def run(self) -> Lifted:
        for i, n in enumerate(self.nodes):
            ins = [self.get(i, x) for x in n.input]
            outs = self.lift(i, n, ins, sy.node_attrs(n))
            outs = outs if isinstance(outs, list) else [outs]
            folded = set().union(*(s.nodes for s in ins if s is not None and s.op == "const"))
            for s in outs:  # Constant nodes feeding shapes, axes, split sizes: placed with their consumer
                if s is not None:
                    s.nodes |= folded
            for name, s in zip(n.output, outs):
                if name and s is not None:
                    self.syms[name] = s
        return Lifted(None, self.syms, self.nodes)

    def lift(self, i, n, ins, a):
        op, dom = n.op_type, n.domain
        if op == "Constant" and dom == "":
            t = a.get("value")
            if t is None:
                self.fail(i, "is a Constant without a tensor 'value'")
            return Sym("const", attrs={"value": numpy_helper.to_array(t)}, nodes={i})
        real = [s for s in ins if s is not None]
        if dom == "" and real and all(s.op == "const" for s in real):
            v = sy.evaluate(op, a, [None if s is None else s.value for s in ins])
            if v is not None:
                return Sym("const", attrs={"value": v}, nodes={i}.union(*(s.nodes for s in real)))
        if dom == "" and real and all(s.op in ("const", "mask") for s in real) and any(s.op == "mask" for s in real):
            return self.mask_fn(i, op, a, ins)
        method = getattr(self, f"op_{op}", None)
        if method is None or dom not in ("", MS) or (dom == MS and op not in _MS_OPS) or (dom == "" and op in _MS_ONLY):
            self.fail(i, "is not an op of the Gemma-3 decoder layouts the plan knows "
                         "(contrib: " + ", ".join(sorted(_MS_OPS)) + "; standard ops of the fixture layouts)")
        return method(i, ins, a)

    def mask_fn(self, i, op, a, ins):
        """A function of attention_mask (the GQA lengths), evaluated when recognition probes it."""
        if op not in sy.EVAL_OPS:
            self.fail(i, "computes from attention_mask with an op the mask plumbing does not use")

        def fn(mask, ins=tuple(ins)):
            vals = [None if s is None else (s.attrs["fn"](mask) if s.op == "mask" else s.value) for s in ins]
            return sy.evaluate(op, a, vals)
        return Sym("mask", tuple(s for s in ins if s is not None and s.op == "mask"), {"fn": fn}, {i})

    def op_Gather(self, i, ins, a):
        table, ids = ins
        if table.op != "const" and ids.op == "const" and ids.value.shape == () and int(ids.value) == -1 \
                and a.get("axis", 0) == 1:  # the last position of [B, S, H] (the builder's prune_lm_head)
            return Sym("last", (table,), {}, {i}, table.feat)
        if table.op != "const" or table.value.ndim != 2 or ids.op != "input" or ids.attrs["dtype"].kind not in "iu" \
                or a.get("axis", 0) != 0:
            self.fail(i, "is a Gather that is not the token embedding lookup (a constant [V, H] table by input ids)")
        return Sym("gather", (ids,), {"table": table}, {i}, table.value.shape[1])

    def op_Slice(self, i, ins, a):
        """Slice(h, starts [-1], ends [>= INT32_MAX], axes [1], steps [1]): the fixture's last position."""
        x, rest = ins[0], ins[1:]
        if x.op == "const" or len(rest) < 2 or any(s is not None and s.op != "const" for s in rest):
            self.fail(i, "is a Slice that is not the last position of [B, S, H] (constant starts [-1], ends "
                         "[>= 2^31 - 1], axes [1], steps [1])")
        v = [None if s is None else np.asarray(s.value).reshape(-1).tolist() for s in rest] + [None] * 3
        starts, ends, axes, steps = v[:4]
        if starts != [-1] or ends is None or len(ends) != 1 or ends[0] < 2**31 - 1 or axes not in ([1], [-2]) \
                or steps not in (None, [1]):
            self.fail(i, f"is a Slice (starts {starts}, ends {ends}, axes {axes}, steps {steps}) that is not the "
                         "last position of [B, S, H] (starts [-1], ends [>= 2^31 - 1], axes [1], steps [1])")
        return Sym("last", (x,), {"keepdims": True}, {i}, x.feat)

    # ---- transparent and folded ops --------------------------------------------------------------------
    def op_Identity(self, i, ins, a):
        ins[0].nodes.add(i)
        return ins[0]

    def op_Cast(self, i, ins, a):
        if ins[0].op == "input" and ins[0].attrs["name"] == "attention_mask":
            return self.mask_fn(i, "Cast", a, [Sym("mask", attrs={"fn": lambda m: m})])
        if helper.tensor_dtype_to_np_dtype(a["to"]).kind != "f":
            self.fail(i, "casts an activation to a non-float type")
        return self.op_Identity(i, ins, a)

    def op_Shape(self, i, ins, a):
        return self.op_ReduceSum(i, ins, a, "Shape")

    def op_ReduceSum(self, i, ins, a, op="ReduceSum"):
        if ins[0].op != "input" or ins[0].attrs["name"] != "attention_mask":
            self.fail(i, f"is a {op} of something other than attention_mask")
        return self.mask_fn(i, op, a, [Sym("mask", attrs={"fn": lambda m: m})] + ins[1:])

    def op_MatMul(self, i, ins, a):
        x, w = ins
        if w.op != "const" or w.value.ndim != 2:
            self.fail(i, "multiplies two activations (attention outside GroupQueryAttention is not supported)")
        if w.value.dtype.kind != "f":
            self.fail(i, f"has a {w.value.dtype} weight; float16/float32 matrices only")
        return Sym("linear", (x,), {"w": w.value, "wsym": w}, {i}, w.value.shape[1])

    def op_MatMulNBits(self, i, ins, a):
        self.fail(i, "holds block-quantised (int4/int8) weights: the plan stores float16/float32 matrices and "
                     "does not dequantise; export the decoder with fp16 or fp32 precision")

    def op_GatherBlockQuantized(self, i, ins, a):
        self.op_MatMulNBits(i, ins, a)

    def op_Unsqueeze(self, i, ins, a):
        x = ins[0]
        axes = tuple(int(v) for v in (ins[1].value if len(ins) > 1 and ins[1] is not None else a.get("axes", ())))
        if x.op != "last" or axes != (1,):
            self.fail(i, "is an Unsqueeze other than the sequence axis of a last-position Gather")
        return Sym("last", x.args, {"keepdims": True}, x.nodes | {i}, x.feat)

    def op_Split(self, i, ins, a):
        x = ins[0]
        if x.op != "linear" or a.get("axis", 0) not in (-1, 2):
            self.fail(i, "splits something other than the last axis of a MatMul's output")
        if len(ins) > 1 and ins[1] is not None:
            sizes = [int(s) for s in ins[1].value]
        elif "split" in a:
            sizes = list(a["split"])
        else:
            k = a.get("num_outputs", len(self.nodes[i].output))
            sizes = [x.feat // k] * k
        if sum(sizes) != x.feat:
            self.fail(i, f"splits {x.feat} columns into {sizes}")
        edges = np.cumsum([0] + sizes)
        w = x.attrs["w"]
        return [Sym("linear", x.args, {"w": w[:, s:e], "wsym": x.attrs["wsym"], "parent": w, "cols": (s, e)},
                    {i} | x.nodes, e - s) for s, e in zip(edges[:-1], edges[1:])]

    def op_Reshape(self, i, ins, a):
        x, shape = ins
        if shape is None or shape.op != "const":
            self.fail(i, "reshapes to a computed shape")
        last = int(shape.value[-1])
        if last <= 0 or x.feat is None or (x.feat % last and last % x.feat):
            self.fail(i, f"reshapes the last axis ({x.feat}) to {last}: only head splits and merges are placed")
        if last == x.feat:
            return self.op_Identity(i, [x], a)
        if x.op == "norm" and x.args[0].op == "view" and x.args[0].args[0].feat == last:
            v = x.args[0]
            return Sym("headnorm", v.args, dict(x.attrs), x.nodes | v.nodes | {i}, last)
        if x.op == "view":
            return Sym("view", x.args, {}, x.nodes | {i}, last)
        return Sym("view", (x,), {}, {i}, last)

    # ---- norms --------------------------------------------------------------------------------------------
    def _norm(self, i, x, w, eps, axis=-1, chain=()):
        if axis != -1:
            self.fail(i, f"normalises axis {axis}; the plan's norms are over the last axis")
        if w is None or w.op != "const" or w.value.ndim != 1 or (x.feat is not None and w.value.size != x.feat):
            self.fail(i, "has a norm weight that is not a constant vector over the last axis")
        return Sym("norm", (x,), {"w": w.value.astype(np.float32), "wsym": w, "eps": float(eps)}, {i, *chain}, x.feat)

    def op_RMSNormalization(self, i, ins, a):
        return self._norm(i, ins[0], ins[1], a.get("epsilon", 1e-5), a.get("axis", -1))

    def op_SimplifiedLayerNormalization(self, i, ins, a):
        self.unused(i, 1)
        return self._norm(i, ins[0], ins[1], a.get("epsilon", 1e-5), a.get("axis", -1))

    def op_SkipSimplifiedLayerNormalization(self, i, ins, a):
        if len(ins) > 3 and ins[3] is not None:
            self.fail(i, "has a bias input; Gemma norms have none")
        self.unused(i, 1)
        self.unused(i, 2)
        s = Sym("add", (ins[0], ins[1]), {}, {i}, ins[0].feat or ins[1].feat)
        return [self._norm(i, s, ins[2], a.get("epsilon", 1e-5)), None, None, s]

    def op_ReduceMean(self, i, ins, a):
        x = ins[0]
        axes = tuple(int(v) for v in (ins[1].value if len(ins) > 1 and ins[1] is not None else a.get("axes", ())))
        if x.op != "ew" or ew_kind(x) != ("square",) or axes not in ((-1,),) or not a.get("keepdims", 1):
            self.fail(i, "is a ReduceMean that is not the mean square over the last axis of an RMSNorm")
        return Sym("ms", x.args, {}, x.nodes | {i}, 1)

    # ---- elementwise arithmetic ---------------------------------------------------------------------------
    def op_Add(self, i, ins, a):
        x, y = ins
        for p, q in ((x, y), (y, x)):
            if p.op == "ms" and scalar(q) is not None:
                return Sym("ms_eps", p.args, {"eps": scalar(q)}, p.nodes | q.nodes | {i}, 1)
        return self._arith(i, "Add", x, y) or Sym("add", (x, y), {}, {i}, x.feat or y.feat)

    def op_Mul(self, i, ins, a):
        x, y = ins
        for p, q in ((x, y), (y, x)):
            if p.op == "normalized" and q.op == "const" and q.value.ndim == 1:
                return self._norm(i, p.args[0], q, p.attrs["eps"], chain=p.nodes)
            if p.op == "inv_rms" and q is p.args[0]:
                return Sym("normalized", p.args, dict(p.attrs), p.nodes | {i}, q.feat)
        return self._arith(i, "Mul", x, y) or Sym("mul", (x, y), {}, {i}, x.feat or y.feat)

    def op_Div(self, i, ins, a):
        x, y = ins
        if y.op == "rms" and x is y.args[0]:
            return Sym("normalized", y.args, dict(y.attrs), y.nodes | {i}, x.feat)
        if y.op == "rms" and scalar(x) == 1.0:
            return Sym("inv_rms", y.args, dict(y.attrs), y.nodes | x.nodes | {i}, 1)
        return self._arith(i, "Div", x, y) or self.fail(i, "divides two activations")

    def op_Sub(self, i, ins, a):
        return self._arith(i, "Sub", *ins) or self.fail(i, "subtracts two activations")

    def op_Pow(self, i, ins, a):
        return self._arith(i, "Pow", *ins) or self.fail(i, "raises to a non-constant power")

    def op_Sqrt(self, i, ins, a):
        if ins[0].op == "ms_eps":
            return Sym("rms", ins[0].args, dict(ins[0].attrs), ins[0].nodes | {i}, 1)
        return self._unary(i, "Sqrt", ins[0])

    def op_Reciprocal(self, i, ins, a):
        if ins[0].op == "rms":
            return Sym("inv_rms", ins[0].args, dict(ins[0].attrs), ins[0].nodes | {i}, 1)
        return self._unary(i, "Reciprocal", ins[0])

    def op_Tanh(self, i, ins, a):
        return self._unary(i, "Tanh", ins[0])

    def op_Neg(self, i, ins, a):
        return self._unary(i, "Neg", ins[0])

    def op_Gelu(self, i, ins, a):
        if a.get("approximate", b"none") not in (b"tanh", "tanh"):
            self.fail(i, "is an exact (erf) GELU; Gemma's MLP uses the tanh approximation")
        return self._unary(i, "Gelu", ins[0])

    def op_FastGelu(self, i, ins, a):
        if len(ins) > 1 and ins[1] is not None:
            self.fail(i, "has a bias input; Gemma's MLP has none")
        return self._unary(i, "Gelu", ins[0])

    def _unary(self, i, op, x):
        f = sy.gelu_tanh if op == "Gelu" else sy.UNARY[op]
        if x.op == "ew":
            g = x.attrs["fn"]
            return sy.make_ew(x.args[0], lambda t: f(g(t)), x.nodes, i)
        if x.op == "const":
            self.fail(i, "is a constant expression the folder does not evaluate")
        return sy.make_ew(x, f, (), i)

    def _arith(self, i, op, x, y):
        """Elementwise x op y as a function of one tensor, or None when x and y are two tensors."""
        if op == "Pow" and scalar(y) is None:
            return None
        bases = [s.args[0] if s.op == "ew" else s for s in (x, y) if s.op != "const"]
        if not bases or any(b is not bases[0] for b in bases) or (x.op == "const" and y.op == "const"):
            return None
        base = bases[0]
        fx, fy = sy.fn_of(x, base), sy.fn_of(y, base)
        if fx is None or fy is None:
            if x.op == "const" or y.op == "const":
                self.fail(i, f"{op}s a constant that is not a scalar (a bias or per-channel scale the plan lacks)")
            return None
        f = sy.BINARY[op]
        nodes = set().union(*(s.nodes for s in (x, y) if s is not base))
        return sy.make_ew(base, lambda t: f(fx(t), fy(t)), nodes, i)

    # ---- rotary, attention -------------------------------------------------------------------------------
    def _rotary(self, i, x, pos, cos, sin, a):
        if a.get("interleaved", 0):
            self.fail(i, "rotates interleaved pairs; Gemma rotates halves (rotate_half)")
        if pos is None or cos is None or cos.op != "const" or sin.op != "const" or cos.value.ndim != 2:
            self.fail(i, "needs position_ids and constant [max_pos, head_dim/2] cos/sin caches")
        n = a.get("num_heads", 0)
        if not n or x.feat is None or x.feat % n or a.get("rotary_embedding_dim", 0) not in (0, x.feat // n):
            self.fail(i, "is a partial or head-count-less rotary; the plan rotates whole heads of 3-D inputs")
        if cos.value.shape[1] * 2 != x.feat // n:
            self.fail(i, f"has cos/sin caches of width {cos.value.shape[1]} for heads of {x.feat // n}")
        return Sym("rotary", (x, pos), {"cos": cos, "sin": sin, "num_heads": n}, {i}, x.feat)

    def op_RotaryEmbedding(self, i, ins, a):
        if self.nodes[i].domain == MS:
            if a.get("scale", 1.0) != 1.0 or a.get("is_packed_batching", 0):
                self.fail(i, "uses scale or packed batching")
            x, pos, cos, sin = ins
        else:
            x, cos, sin, pos = (ins + [None])[:4]
        return self._rotary(i, x, pos, cos, sin, a)

    def op_GroupQueryAttention(self, i, ins, a):
        ins = ins + [None] * (17 - len(ins))
        names = ("attention_bias", "head_sink", "k_scale", "v_scale")
        for k, nm in zip(range(10, 14), names):
            if ins[k] is not None:
                self.fail(i, f"has a {nm} input; the plan has no place for it")
        if ins[16] is not None:
            self.fail(i, "has a query_seqlens input (padded chunks); the plan drives unpadded calls")
        for k in ("qk_output", "smooth_softmax", "kv_cache_bit_width"):
            if a.get(k, 0):
                self.fail(i, f"sets {k}; the plan has no place for it")
        if a.get("causal", 1) != 1 or a.get("rotary_interleaved", 0):
            self.fail(i, "is non-causal or rotates interleaved pairs")
        self.unused(i, 3)
        nq, nkv, q = a.get("num_heads", 0), a.get("kv_num_heads", 0), ins[0]
        if not nq or not nkv or q is None or q.feat is None or q.feat % (nq + (2 * nkv if ins[1] is None else 0)):
            self.fail(i, "has no num_heads/kv_num_heads or a query whose width does not split into heads")
        d = q.feat // (nq + (2 * nkv if ins[1] is None else 0))
        att = Sym("attn", tuple(ins[:10]) + (ins[14], ins[15]), dict(a), {i}, nq * d)
        outs = [Sym("attn_out", (att,), {}, set(), nq * d),
                Sym("present", (att,), {"which": "key"}, set()), Sym("present", (att,), {"which": "value"}, set())]
        return outs[: len(self.nodes[i].output)]


_MS_ONLY = {"GroupQueryAttention", "SkipSimplifiedLayerNormalization", "FastGelu", "MatMulNBits",
            "GatherBlockQuantized"}
_MS_OPS = _MS_ONLY | {"RotaryEmbedding", "SimplifiedLayerNormalization"}  # these two exist in both domains


def lift(model: onnx.ModelProto) -> Lifted:
    """Every node of `model` lifted to a Sym (PlanError names the first that cannot be)."""
    out = _Lifter(model).run()
    out.model = model
    return out
