"""Read and check a model folder's genai_config.json (ours or onnxruntime-genai's).

    ModelFolder.load(dir) -> components (vision?, embedding?, decoder) with file paths and I/O names,
    checked against the ONNX files' real inputs and outputs.

Every problem raises `ModelFolderError` naming the field or file and what is accepted; nothing is
guessed. This module reads only JSON and ONNX graph signatures (no weights, no onnxruntime).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

CONFIG_NAME = "genai_config.json"
_ONNX_DTYPES = {1: np.float32, 10: np.float16, 7: np.int64, 6: np.int32, 16: "bfloat16"}


class ModelFolderError(ValueError):
    """A model folder or its genai_config.json is unusable; the message says why and what is accepted."""


@dataclass(frozen=True)
class Signature:
    """Names, element types and shapes (ints or symbolic strings) of an ONNX graph's inputs/outputs."""

    inputs: dict
    outputs: dict
    ops: frozenset

    @staticmethod
    def read(path: Path) -> "Signature":
        import onnx

        try:
            m = onnx.load(str(path), load_external_data=False)
        except Exception as e:  # protobuf decode errors have many types
            raise ModelFolderError(f"{path} is not a readable ONNX model: {e}") from None

        def sig(values):
            out = {}
            for v in values:
                t = v.type.tensor_type
                shape = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.shape.dim)
                out[v.name] = (_ONNX_DTYPES.get(t.elem_type, t.elem_type), shape)
            return out

        return Signature(sig(m.graph.input), sig(m.graph.output), frozenset(n.op_type for n in m.graph.node))


@dataclass(frozen=True)
class Component:
    """One ONNX file with the names genai_config.json gives its inputs and outputs."""

    role: str
    path: Path
    inputs: dict  # logical name -> graph name
    outputs: dict
    signature: Signature
    session_options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class DecoderInfo:
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    hidden_size: int
    drive: str  # "embeds" (inputs_embeds) or "ids" (input_ids), from the file's declared inputs
    kv_layout: str  # "shared": fixed-capacity past/present buffer (GQA); "concat": grows each step
    dtype: type

    def past_names(self, dec: Component) -> list[tuple[str, str]]:
        k, v = dec.inputs["past_key_names"], dec.inputs["past_value_names"]
        return [(k % i, v % i) for i in range(self.num_layers)]

    def present_names(self, dec: Component) -> list[tuple[str, str]]:
        k, v = dec.outputs["present_key_names"], dec.outputs["present_value_names"]
        return [(k % i, v % i) for i in range(self.num_layers)]


@dataclass(frozen=True)
class ModelFolder:
    root: Path
    model_type: str
    decoder: Component
    info: DecoderInfo
    vision: Component | None
    embedding: Component | None
    max_length: int
    bos_token_id: int
    eos_token_ids: tuple
    pad_token_id: int
    image_token_id: int | None
    vocab_size: int
    raw: dict

    @property
    def is_vlm(self) -> bool:
        return self.vision is not None and self.embedding is not None

    @staticmethod
    def load(model_dir) -> "ModelFolder":
        return _load(Path(model_dir))


def _get(d: dict, path: str, kind=None):
    node = d
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ModelFolderError(f"{CONFIG_NAME}: missing field '{path}'")
        node = node[part]
    if kind is not None and not isinstance(node, kind) or (kind is int and isinstance(node, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ModelFolderError(f"{CONFIG_NAME}: field '{path}' must be {names}, got {node!r}")
    return node


def _resolve(root: Path, filename) -> Path:
    if not isinstance(filename, str) or not filename:
        raise ModelFolderError(f"{CONFIG_NAME}: a filename must be a non-empty string, got {filename!r}")
    if Path(filename).is_absolute():
        raise ModelFolderError(f"{CONFIG_NAME}: filename {filename!r} is absolute; only paths inside {root} are accepted")
    path = (root / filename).resolve()
    if not path.is_relative_to(root.resolve()):
        raise ModelFolderError(f"{CONFIG_NAME}: filename {filename!r} escapes the model folder {root}")
    if not path.is_file():
        raise ModelFolderError(f"{CONFIG_NAME}: file {filename!r} does not exist in {root}")
    return path


def _component(root: Path, cfg: dict, role: str, required_inputs, required_outputs) -> Component:
    sec = _get(cfg, f"model.{role}", dict)
    path = _resolve(root, _get(cfg, f"model.{role}.filename", str))
    inputs = dict(sec.get("inputs", {}))
    outputs = dict(sec.get("outputs", {}))
    for k in required_inputs:
        inputs.setdefault(k, k)
    for k in required_outputs:
        outputs.setdefault(k, k)
    for k, v in list(inputs.items()) + list(outputs.items()):
        if not isinstance(v, str):
            raise ModelFolderError(f"{CONFIG_NAME}: model.{role} name for {k!r} must be a string, got {v!r}")
    opts = sec.get("session_options", {})
    return Component(role, path, inputs, outputs, Signature.read(path), opts if isinstance(opts, dict) else {})


def _require(comp: Component, names, where: str) -> None:
    have = comp.signature.inputs if where == "input" else comp.signature.outputs
    for n in names:
        if n not in have:
            raise ModelFolderError(
                f"{comp.path.name}: genai_config.json names {where} {n!r} but the ONNX file has "
                f"{where}s {sorted(have)}"
            )


def _load(root: Path) -> ModelFolder:
    if not root.is_dir():
        raise ModelFolderError(f"model folder {root} does not exist or is not a directory")
    cfg_path = root / CONFIG_NAME
    if not cfg_path.is_file():
        raise ModelFolderError(f"{root} has no {CONFIG_NAME}")
    try:
        cfg = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelFolderError(f"{cfg_path} is not valid JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise ModelFolderError(f"{CONFIG_NAME}: top level must be an object")
    model_type = _get(cfg, "model.type", str)
    dec = _component(root, cfg, "decoder", ["attention_mask"], ["logits"])
    for key in ("past_key_names", "past_value_names"):
        _get(cfg, f"model.decoder.inputs.{key}", str)
    for key in ("present_key_names", "present_value_names"):
        _get(cfg, f"model.decoder.outputs.{key}", str)
    n_layers = _get(cfg, "model.decoder.num_hidden_layers", int)
    if n_layers <= 0:
        raise ModelFolderError(f"{CONFIG_NAME}: model.decoder.num_hidden_layers must be > 0, got {n_layers}")
    for name in ("past_key_names", "past_value_names", "present_key_names", "present_value_names"):
        pattern = (dec.inputs | dec.outputs)[name]
        if "%d" not in pattern:
            raise ModelFolderError(f"{CONFIG_NAME}: model.decoder {name} {pattern!r} must contain %d")
    sig = dec.signature
    drive = "embeds" if "inputs_embeds" in dec.inputs and dec.inputs["inputs_embeds"] in sig.inputs else "ids"
    dec.inputs.setdefault("input_ids", "input_ids")
    lead = dec.inputs["inputs_embeds" if drive == "embeds" else "input_ids"]
    _require(dec, [lead, dec.inputs["attention_mask"]], "input")
    if "position_ids" in dec.inputs and dec.inputs["position_ids"] not in sig.inputs:
        dec.inputs.pop("position_ids")  # genai treats position_ids as optional too
    _require(dec, [dec.inputs["past_key_names"] % i for i in range(n_layers)]
             + [dec.inputs["past_value_names"] % i for i in range(n_layers)], "input")
    _require(dec, [dec.outputs["logits"]] + [dec.outputs["present_key_names"] % i for i in range(n_layers)]
             + [dec.outputs["present_value_names"] % i for i in range(n_layers)], "output")
    share = bool(cfg.get("search", {}).get("past_present_share_buffer", False))
    layout = "shared" if share and "GroupQueryAttention" in sig.ops else "concat"
    kv_dtype, _ = sig.inputs[dec.inputs["past_key_names"] % 0]
    info = DecoderInfo(
        num_layers=n_layers,
        num_heads=_get(cfg, "model.decoder.num_attention_heads", int),
        num_kv_heads=_get(cfg, "model.decoder.num_key_value_heads", int),
        head_size=_get(cfg, "model.decoder.head_size", int),
        hidden_size=_get(cfg, "model.decoder.hidden_size", int),
        drive=drive, kv_layout=layout, dtype=kv_dtype,
    )
    vision = embedding = None
    if "vision" in cfg["model"] or "embedding" in cfg["model"]:
        vision = _component(root, cfg, "vision", ["pixel_values"], ["image_features"])
        embedding = _component(root, cfg, "embedding", ["input_ids", "image_features"], ["inputs_embeds"])
        _require(vision, [vision.inputs["pixel_values"]], "input")
        _require(vision, [vision.outputs["image_features"]], "output")
        _require(embedding, [embedding.inputs["input_ids"], embedding.inputs["image_features"]], "input")
        _require(embedding, [embedding.outputs["inputs_embeds"]], "output")
    if drive == "embeds" and embedding is None:
        raise ModelFolderError(f"{CONFIG_NAME}: the decoder takes inputs_embeds but there is no model.embedding section")
    eos = _get(cfg, "model.eos_token_id", (int, list))
    eos = tuple(eos) if isinstance(eos, list) else (eos,)
    if not all(isinstance(e, int) for e in eos):
        raise ModelFolderError(f"{CONFIG_NAME}: model.eos_token_id must be an int or a list of ints")
    max_length = cfg.get("search", {}).get("max_length", None)
    if max_length is None:
        max_length = _get(cfg, "model.context_length", int)
    if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length <= 0:
        raise ModelFolderError(f"{CONFIG_NAME}: search.max_length must be a positive int, got {max_length!r}")
    image_token = cfg["model"].get("image_token_id")
    if vision is not None and not isinstance(image_token, int):
        raise ModelFolderError(f"{CONFIG_NAME}: model.image_token_id (int) is required with a vision section")
    return ModelFolder(
        root=root, model_type=model_type, decoder=dec, info=info, vision=vision, embedding=embedding,
        max_length=max_length, bos_token_id=_get(cfg, "model.bos_token_id", int), eos_token_ids=eos,
        pad_token_id=_get(cfg, "model.pad_token_id", int), image_token_id=image_token,
        vocab_size=_get(cfg, "model.vocab_size", int), raw=cfg,
    )
