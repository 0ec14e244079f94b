"""Tables of what a model folder's ONNX files hold, for the notebooks (plain pandas DataFrames).

    component_table(dir) / io_table(dir) / op_counts(dir)   per component: sizes, inputs/outputs, op types
    layout_table(dirs)                                       decoder nodes per layer and op mix, by layout

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
    """Decoder nodes (total, per layer) and the count of each op type, one row per layout folder."""
    from ..fixture import load_fixture_config

    rows = []
    for label, d in model_dirs.items():
        ops = op_counts(d)["decoder"]
        layers = load_fixture_config(d).num_layers
        rows.append({"layout": label, "nodes": int(ops.sum()), "nodes_per_layer": round(ops.sum() / layers, 1),
                     **{op.split(":")[-1]: int(n) for op, n in ops.items() if n}})
    t = pd.DataFrame(rows).set_index("layout")
    ops = [c for c in t if c != "nodes_per_layer"]
    t[ops] = t[ops].fillna(0).astype(int)
    return t
