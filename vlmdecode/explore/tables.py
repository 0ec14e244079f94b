"""Tables of what a model folder's ONNX files hold, for the notebooks (plain pandas DataFrames).

    component_table(dir) / io_table(dir) / op_counts(dir)   per component: sizes, inputs/outputs, op types
    layout_table(dirs)                                       decoder nodes (per layer) and op counts, by layout

Reads graphs without their external weights; not a validator of folders (see modelfolder).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..modelfolder import ModelFolder

ROLES = ("vision", "embedding", "decoder")

def _components(model_dir) -> list:
    folder = ModelFolder.load(model_dir)
    return [c for c in (getattr(folder, r, None) for r in ROLES) if c is not None]


def _load_graph(path):
    import onnx

    return onnx.load(str(path), load_external_data=False)


def _n_params(model) -> int:
    return int(sum(int(np.prod(t.dims)) if len(t.dims) else 1 for t in model.graph.initializer))


def component_table(model_dir) -> pd.DataFrame:
    """One row per component: file, #inputs, #outputs, #nodes, #distinct ops, #initializers, params, MB."""
    rows = []
    for c in _components(model_dir):
        m = _load_graph(c.path)
        size = c.path.stat().st_size + sum(p.stat().st_size for p in c.path.parent.glob(c.path.name + ".data"))
        rows.append({"component": c.role, "file": c.path.name, "inputs": len(m.graph.input),
                     "outputs": len(m.graph.output), "nodes": len(m.graph.node),
                     "op_types": len({n.op_type for n in m.graph.node}),
                     "initializers": len(m.graph.initializer), "params": _n_params(m),
                     "size_MB": round(size / 2**20, 3)})
    return pd.DataFrame(rows).set_index("component")


def io_table(model_dir) -> pd.DataFrame:
    """Inputs and outputs of every component: component, direction, name, dtype, shape."""
    rows = []
    for c in _components(model_dir):
        sig = c.signature
        for direction, items in (("input", sig.inputs), ("output", sig.outputs)):
            for name, (dtype, shape) in items.items():
                rows.append({"component": c.role, "direction": direction, "name": name,
                             "dtype": str(np.dtype(dtype)) if not isinstance(dtype, int) else str(dtype),
                             "shape": "[" + ", ".join(str(d) for d in shape) + "]"})
    return pd.DataFrame(rows)


def op_counts(model_dir) -> pd.DataFrame:
    """Node counts by op type (rows, 'domain:op' for non-default domains) and component (columns)."""
    counts = {}
    for c in _components(model_dir):
        m = _load_graph(c.path)
        ops = [f"{n.domain}:{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type for n in m.graph.node]
        counts[c.role] = pd.Series(ops).value_counts()
    df = pd.DataFrame(counts).fillna(0).astype(int)
    df["total"] = df.sum(axis=1)
    df.index.name = "op"
    return df.reset_index().sort_values(["total", "op"], ascending=[False, True]).set_index("op")


def layout_table(model_dirs: dict) -> pd.DataFrame:
    """Decoder op counts by layout: one column per layout folder, rows `nodes`, `nodes_per_layer`, then the op
    types whose count differs between the layouts (what the fusions change), then the rest. Counts are ints
    (the column dtype is object so that `nodes_per_layer` can stay fractional)."""
    from ..fixture import load_fixture_config

    cols, layers = {}, {}
    for label, d in model_dirs.items():
        ops = op_counts(d)["decoder"]
        cols[label] = {op.split(":")[-1]: int(n) for op, n in ops.items() if n}
        layers[label] = load_fixture_config(d).num_layers
    t = pd.DataFrame(cols).fillna(0).astype(int)
    changed = t.nunique(axis=1) > 1
    t = pd.concat([t[changed].sort_values(list(t)[0], ascending=False), t[~changed].sort_index()])
    nodes = {lay: int(t[lay].sum()) for lay in t}
    head = pd.DataFrame([nodes, {lay: round(n / layers[lay], 1) for lay, n in nodes.items()}],
                        index=["nodes", "nodes_per_layer"], dtype=object)
    out = pd.concat([head, t.astype(object)])
    out.index.name = "op"
    return out
