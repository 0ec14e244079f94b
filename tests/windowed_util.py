"""Test helper: a copy of a fixture folder whose local layers keep a windowed KV cache.

What onnxruntime-genai's model builder does by default (windowed_kv_cache=true): every
GroupQueryAttention node with local_window_size > 0 gets sliding_window_cache=1, those layers' past /
present inputs get their own symbolic sequence dimension, and genai_config.json gets
model.decoder.sliding_window {window_size, layers, cache_slack, slide_key_value_cache: false,
slide_inputs: false}. Same weights, so tokens must equal the unpatched folder's.

`full_kv_copy` goes the other way, from an exported windowed folder (the builder's default) to what its
`--extra_options windowed_kv_cache=false` writes: no sliding_window_cache attribute, the windowed layers'
past/present sequence dims named as the global layer's, no sliding_window section.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import onnx


def windowed_copy(src: Path, dst: Path, cache_slack: int | None = 0, decoder: str = "decoder.onnx") -> Path:
    shutil.copytree(src, dst)
    path = dst / decoder
    m = onnx.load(str(path))
    layers, window = [], None
    for n in m.graph.node:
        if n.op_type != "GroupQueryAttention":
            continue
        w = next(a.i for a in n.attribute if a.name == "local_window_size")
        if w > 0:
            n.attribute.append(onnx.helper.make_attribute("sliding_window_cache", 1))
            layers.append(int(re.search(r"\.(\d+)\.", n.input[3]).group(1)))
            window = w
    for v in list(m.graph.input) + list(m.graph.output):
        hit = re.search(r"\.(\d+)\.(key|value)$", v.name)
        if hit and int(hit.group(1)) in layers:
            v.type.tensor_type.shape.dim[2].dim_param = "sliding_window_cache_length"
    onnx.save(m, str(path))
    cfg = json.loads((dst / "genai_config.json").read_text())
    sw = {"window_size": window, "slide_key_value_cache": False, "slide_inputs": False, "layers": sorted(layers)}
    if cache_slack is not None:
        sw["cache_slack"] = cache_slack
    cfg["model"]["decoder"]["sliding_window"] = sw
    (dst / "genai_config.json").write_text(json.dumps(cfg, indent=2))
    return dst


def full_kv_copy(src: Path, dst: Path, model: str = "model.onnx") -> Path:
    shutil.copytree(src, dst)
    path = dst / model
    m = onnx.load(str(path), load_external_data=False)  # the weights stay in the copied external data file
    for n in m.graph.node:
        if n.op_type == "GroupQueryAttention":
            keep = [a for a in n.attribute if a.name != "sliding_window_cache"]
            del n.attribute[:]
            n.attribute.extend(keep)
    rename = {"past_sliding_length": "past_sequence_length", "total_sliding_length": "total_sequence_length"}
    for v in list(m.graph.input) + list(m.graph.output):
        for d in v.type.tensor_type.shape.dim:
            if d.dim_param in rename:  # (assigning dim_param to any other dim would clear its dim_value)
                d.dim_param = rename[d.dim_param]
    onnx.save(m, str(path))
    cfg = json.loads((dst / "genai_config.json").read_text())
    cfg["model"]["decoder"].pop("sliding_window", None)
    (dst / "genai_config.json").write_text(json.dumps(cfg, indent=2))
    return dst
