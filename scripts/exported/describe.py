"""Print, as Markdown, what each folder under tests/data/exported holds: files, genai_config.json fields,
ONNX inputs/outputs with their shapes, attention node attributes per layer, and how its expected tokens
compare. Needs only onnx (the package venv has it):

    python scripts/exported/describe.py > tests/data/exported/FOLDERS.md
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent.parent / "tests" / "data" / "exported"
ELEM = {1: "float32", 7: "int64", 6: "int32", 10: "float16", 16: "bfloat16", 9: "bool"}


def dims(vi) -> str:
    t = vi.type.tensor_type
    return f"{ELEM.get(t.elem_type, t.elem_type)}[{', '.join(d.dim_param or str(d.dim_value) for d in t.shape.dim)}]"


def squash(names_shapes: list[tuple[str, str]]) -> list[str]:
    """Collapse past_key_values.N.key-style runs into one line with the N range."""
    out, seen = [], {}
    for n, s in names_shapes:
        parts = n.split(".")
        key = ".".join("%d" if p.isdigit() else p for p in parts)
        idx = next((p for p in parts if p.isdigit()), None)
        seen.setdefault((key, s), []).append(idx)
    for (key, s), idxs in seen.items():
        rng = f" (N = {','.join(i for i in idxs)})" if idxs[0] is not None else ""
        out.append(f"`{key.replace('%d', 'N')}` {s}{rng}")
    return out


def attention(model: onnx.ModelProto) -> list[str]:
    rows = []
    for node in model.graph.node:
        if node.op_type in ("GroupQueryAttention", "Attention", "MultiHeadAttention"):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            attrs = {k: (v.decode() if isinstance(v, bytes) else round(v, 6) if isinstance(v, float) else v)
                     for k, v in attrs.items()}
            ins = [i for i in node.input]
            op = f"{node.domain or 'ai.onnx'}.{node.op_type}"
            rows.append(f"- `{node.name}` {op} {json.dumps(attrs, sort_keys=True)}; "
                        f"inputs: {', '.join(i or '∅' for i in ins)}")
    return rows


def describe(folder: Path) -> None:
    print(f"\n### {folder.name}\n")
    files = sorted(p.name for p in folder.iterdir())
    print("Files: " + ", ".join(f"`{f}` ({(folder / f).stat().st_size} B)" for f in files) + "\n")
    cfg = json.loads((folder / "genai_config.json").read_text())
    print("genai_config.json:\n\n```json\n" + json.dumps(cfg, indent=1) + "\n```\n")
    for f in files:
        if not f.endswith(".onnx"):
            continue
        m = onnx.load(str(folder / f), load_external_data=False)
        ops = Counter(f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in m.graph.node)
        opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in m.opset_import)
        print(f"`{f}`: opsets {opsets}; "
              f"{len(m.graph.node)} nodes; ops {dict(sorted(ops.items()))}\n")
        print("- inputs: " + "; ".join(squash([(i.name, dims(i)) for i in m.graph.input])))
        print("- outputs: " + "; ".join(squash([(o.name, dims(o)) for o in m.graph.output])))
        if f == "model.onnx" and folder.name.startswith("builder"):
            print("\nNode order outside the layers and in layer 0 (op: name without its /model/ prefix):\n")
            print("- outside: " + ", ".join(f"{n.op_type}: {n.name.replace('/model/', '')}" for n in m.graph.node
                                            if "/layers." not in n.name and n.op_type != "Constant"))
            print("- layer 0: " + ", ".join(f"{n.op_type}: {n.name.replace('/model/layers.0/', '')}"
                                            for n in m.graph.node if n.name.startswith("/model/layers.0/")))
        att = attention(m)
        if att:
            print("\nAttention nodes:\n")
            print("\n".join(att))
        print()
    exp = json.loads((folder / "expected.json").read_text())
    print("expected.json: " + summary(exp) + "\n")


def summary(exp: dict) -> str:
    if "images" in exp:
        parts = []
        for name, e in exp["images"].items():
            g = e["onnxruntime_genai_cpu_greedy"]
            hf = e["hf_float32_greedy_causal"]["tokens"]
            parts.append(f"{name}: {len(e['hf_processor']['input_ids'])} prompt ids (genai's processor "
                         f"{'same' if g.get('input_ids') == e['hf_processor']['input_ids'] else 'DIFFERENT'}); "
                         f"genai {g.get('onnxruntime_genai')} tokens vs HF causal: {agree(g.get('tokens'), hf)}")
        return "; ".join(parts)
    g = exp["onnxruntime_genai_cpu_greedy"]
    hf = exp["hf_float32_greedy"]["tokens"]
    if "tokens" not in g:
        return f"{len(hf)} HF tokens; onnxruntime-genai not run: {g.get('not_run') or g.get('error')}"
    return (f"{len(exp['prompt']['input_ids'])} prompt ids; genai {g['onnxruntime_genai']} CPU tokens vs HF "
            f"float32: {agree(g['tokens'], hf)}")


def agree(a, b) -> str:
    if a is None:
        return "no genai tokens"
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if n is None and len(a) == len(b):
        return f"equal for all {len(a)}"
    if n is not None:
        return f"first difference at step {n}"
    return f"equal for {min(len(a), len(b))} (lengths {len(a)}, {len(b)})"


if __name__ == "__main__":
    print("# What the exported folders hold (generated by scripts/exported/describe.py)")
    for d in sorted(p for p in ROOT.iterdir() if p.is_dir()):
        describe(d)
    sys.exit(0)
