"""Canonical symbols of a decoder graph, and the numpy arithmetic that folds and classifies them.

What it is: `Sym` (one canonical value: op, arguments, attributes, the ONNX nodes it realises, the width
of its last axis), `evaluate` (the dozen ONNX ops that constant folding and the attention_mask plumbing
need, on numpy arrays) and the elementwise-function helpers: an "ew" Sym is a function of one tensor
built from scalar arithmetic, Tanh, GELU...; `ew_kind` classifies it by evaluating it. What it is not: the
lifting pass (`lift`) or the matcher (`recognise`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import helper

from .numpy_exec import gelu_tanh

MS = "com.microsoft"


@dataclass(eq=False)
class Sym:
    op: str
    args: tuple = ()
    attrs: dict = field(default_factory=dict)
    nodes: set = field(default_factory=set)  # indices of the ONNX nodes this symbol realises
    feat: int | None = None  # size of the last axis, where known

    @property
    def value(self) -> np.ndarray:
        return self.attrs["value"]


def describe(nodes, i: int | None, what: str = "") -> str:
    """'node NAME (OpType)' for error messages ('<graph input/initializer>' when i is None)."""
    if i is None:
        return what or "a graph input or initializer"
    n = nodes[i]
    return f"node {n.name or '#' + str(i)!r} ({(n.domain + '.') if n.domain else ''}{n.op_type})"


def node_attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


# ---- numpy evaluation of the few ops constant folding and the mask plumbing need -------------------------
def _reshape(x, shape):
    shape = [x.shape[i] if s == 0 else int(s) for i, s in enumerate(shape)]
    return x.reshape(shape)


def _axes(attrs, ins, k):
    return tuple(int(a) for a in (ins[k] if len(ins) > k and ins[k] is not None else attrs.get("axes", ())))


def evaluate(op: str, a: dict, ins: list):
    """One node on numpy arrays; None for an op this evaluator does not know."""
    x = ins[0] if ins else None
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Pow": np.power}
    if op in binary:
        return binary[op](x, ins[1]).astype(np.result_type(x, ins[1]))
    table = {
        "Identity": lambda: x,
        "Cast": lambda: x.astype(helper.tensor_dtype_to_np_dtype(a["to"])),
        "Div": lambda: (x // ins[1] if x.dtype.kind in "iu" else x / ins[1]).astype(np.result_type(x, ins[1])),
        "Neg": lambda: -x,
        "Sqrt": lambda: np.sqrt(x),
        "Reciprocal": lambda: 1 / x,
        "Concat": lambda: np.concatenate(ins, axis=a["axis"]),
        "Transpose": lambda: x.transpose(a.get("perm")),  # a view: a tied head stays the embedding table
        "Reshape": lambda: _reshape(x, ins[1]),
        "Unsqueeze": lambda: np.expand_dims(x, _axes(a, ins, 1)),
        "Squeeze": lambda: np.squeeze(x, _axes(a, ins, 1) or None),
        "Shape": lambda: np.array(x.shape[a.get("start", 0):a.get("end")], np.int64),
        "Gather": lambda: np.take(x, ins[1], axis=a.get("axis", 0)),
        "ReduceSum": lambda: np.sum(x, axis=_axes(a, ins, 1) or None, keepdims=bool(a.get("keepdims", 1))),
    }
    return table[op]() if op in table else None


# ---- elementwise functions of one tensor ----------------------------------------------------------------
UNARY = {"Tanh": np.tanh, "Sqrt": np.sqrt, "Neg": np.negative, "Reciprocal": lambda t: 1 / t}
BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power}


def scalar(s: Sym) -> float | None:
    if s is not None and s.op == "const" and s.value.size == 1 and s.value.dtype.kind == "f":
        return float(s.value.reshape(()))
    return None


def fn_of(s: Sym, base: Sym):
    """s as a function of base (None if it is not one): base itself, an ew of base, or a scalar constant."""
    if s is base:
        return lambda t: t
    if s.op == "ew" and s.args[0] is base:
        return s.attrs["fn"]
    c = scalar(s)
    return None if c is None else (lambda t, c=c: np.full_like(t, c))


def make_ew(base: Sym, fn, nodes, i) -> Sym:
    return Sym("ew", (base,), {"fn": fn}, set(nodes) | {i}, base.feat)


def ew_kind(s: Sym):
    """Classify an elementwise function by evaluating it: ('scale', c) | ('softcap', c) | ('gelu_tanh',) |
    ('square',) | None. Constants of an fp16 graph are fp16: GELU is accepted within fp16 rounding."""
    f = s.attrs["fn"]
    t = np.linspace(-8.0, 8.0, 161)
    y = f(t)
    c = float(f(np.array([1.0]))[0])
    if np.allclose(y, c * t, rtol=1e-12, atol=0):
        return ("scale", c)
    if np.allclose(y, t * t, rtol=1e-12, atol=0):
        return ("square",)
    if np.allclose(y, gelu_tanh(t), rtol=0, atol=2e-3 * 8):
        return ("gelu_tanh",)
    cap = float(f(np.array([1e30]))[0])
    if cap > 0 and np.allclose(y, cap * np.tanh(t / cap), rtol=1e-9, atol=0):
        return ("softcap", cap)
    return None


EVAL_OPS = {"Add", "Sub", "Mul", "Pow", "Identity", "Cast", "Div", "Neg", "Sqrt", "Reciprocal", "Concat",
             "Transpose", "Reshape", "Unsqueeze", "Squeeze", "Shape", "Gather", "ReduceSum"}
