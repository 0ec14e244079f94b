"""Read and check a model folder's genai_config.json (ours or onnxruntime-genai's).

    ModelFolder.load(dir) -> components (vision?, embedding?, decoder) with file paths and I/O names,
    checked against the ONNX files' real inputs and outputs.

Every problem raises `ModelFolderError` naming the field or file and what is accepted; nothing is
guessed. This module reads only JSON and ONNX graph signatures (no weights, no onnxruntime).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .foldercheck import check_folder, inside, kind_of

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
    cuda_only: str = ""  # why onnxruntime's CPU provider cannot run this graph ("" = it can)

    @staticmethod
    def read(path: Path) -> Signature:
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

        return Signature(sig(m.graph.input), sig(m.graph.output), frozenset(n.op_type for n in m.graph.node),
                         _cuda_only(m.graph))


def _cuda_only(graph) -> str:
    """onnxruntime 1.31's CPU GroupQueryAttention rejects q_norm_weight / k_norm_weight (inputs 14, 15)."""
    for n in graph.node:
        if n.op_type == "GroupQueryAttention" and any(n.input[14:16]):
            return (f"its GroupQueryAttention node {n.name!r} applies the q/k RMSNorms itself (q_norm_weight, "
                    "k_norm_weight), which onnxruntime implements on CUDA only")
    return ""


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

    def require_cpu_support(self) -> None:
        """Raise ModelFolderError when the decoder cannot run on onnxruntime's CPU provider."""
        if self.decoder.signature.cuda_only:
            raise ModelFolderError(
                f"{self.decoder.path.name} cannot run on cpu: {self.decoder.signature.cuda_only}; use a CUDA "
                "device, or build the fixture with --layout fused (norms as separate nodes)"
            )

    @property
    def is_vlm(self) -> bool:
        return self.vision is not None and self.embedding is not None

    @staticmethod
    def load(model_dir) -> ModelFolder:
        return _load(Path(model_dir))


def _get(d: dict, path: str, kind=None):
    node = d
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ModelFolderError(f"{CONFIG_NAME}: missing field '{path}'")
        node = node[part]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if kind is not None and (not isinstance(node, kind) or (int in kinds and isinstance(node, bool))):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ModelFolderError(f"{CONFIG_NAME}: field '{path}' must be {names}, got {node!r}")
    return node


def _positive_int(d: dict, path: str) -> int:
    n = _get(d, path, int)
    if n <= 0:
        raise ModelFolderError(f"{CONFIG_NAME}: field '{path}' must be > 0, got {n}")
    return n


def _check_pattern(role: str, name: str, pattern: str) -> None:
    """A per-layer name pattern: exactly one %d and no other % conversion."""
    try:
        ok = pattern.count("%d") == 1 and isinstance(pattern % 0, str)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ModelFolderError(
            f"{CONFIG_NAME}: model.{role} {name} {pattern!r} must contain %d (once, the layer index) and no other "
            f"% conversion"
        )


def _resolve(root: Path, filename, where: str = "") -> Path:
    if not isinstance(filename, str) or not filename:
        raise ModelFolderError(f"{CONFIG_NAME}: {where}a filename must be a non-empty string, got {filename!r}")
    try:
        if Path(filename).is_absolute():
            raise ModelFolderError(
                f"{CONFIG_NAME}: {where}filename {filename!r} is absolute; only paths inside {root} are accepted")
        path = (root / filename).resolve()
        if not path.is_relative_to(root.resolve()):
            raise ModelFolderError(f"{CONFIG_NAME}: {where}filename {filename!r} escapes the model folder {root}")
        if not path.is_file():
            kind = kind_of(path)
            what = "does not exist" if kind == "missing" else f"is a {kind}, not a regular file"
            raise ModelFolderError(f"{CONFIG_NAME}: {where}file {filename!r} {what} in {root}")
    except (OSError, ValueError, RuntimeError) as e:  # NUL bytes, names too long, symlink loops
        if isinstance(e, ModelFolderError):
            raise
        raise ModelFolderError(f"{CONFIG_NAME}: {where}filename {filename!r} is not a usable path: {e}") from None
    return path


def _component(root: Path, cfg: dict, role: str, required_inputs, required_outputs) -> Component:
    sec = _get(cfg, f"model.{role}", dict)
    path = _resolve(root, _get(cfg, f"model.{role}.filename", str), f"model.{role}.")
    for key in ("inputs", "outputs"):
        if key in sec:
            _get(cfg, f"model.{role}.{key}", dict)
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
        kind = kind_of(root)
        raise ModelFolderError(f"model folder {root} " + ("does not exist" if kind == "missing" else
                                                           f"is a {kind}, not a directory"))
    if kind_of(root / CONFIG_NAME) == "missing":
        raise ModelFolderError(f"{root} has no {CONFIG_NAME}")
    cfg_path = inside(root, CONFIG_NAME)
    try:
        cfg = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ModelFolderError(f"{cfg_path} is not valid JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise ModelFolderError(f"{CONFIG_NAME}: top level must be an object")
    model_type = _get(cfg, "model.type", str)
    dec = _component(root, cfg, "decoder", ["attention_mask"], ["logits"])
    for key in ("past_key_names", "past_value_names"):
        _get(cfg, f"model.decoder.inputs.{key}", str)
    for key in ("present_key_names", "present_value_names"):
        _get(cfg, f"model.decoder.outputs.{key}", str)
    n_layers = _positive_int(cfg, "model.decoder.num_hidden_layers")
    for name in ("past_key_names", "past_value_names", "present_key_names", "present_value_names"):
        _check_pattern("decoder", name, (dec.inputs | dec.outputs)[name])
    sig = dec.signature
    drive = "embeds" if "inputs_embeds" in dec.inputs and dec.inputs["inputs_embeds"] in sig.inputs else "ids"
    dec.inputs.setdefault("input_ids", "input_ids")
    lead = dec.inputs["inputs_embeds" if drive == "embeds" else "input_ids"]
    _require(dec, [lead, dec.inputs["attention_mask"]], "input")
    if "position_ids" in dec.inputs and dec.inputs["position_ids"] not in sig.inputs:
        dec.inputs.pop("position_ids")  # genai treats position_ids as optional too
    # per layer, lazily: a huge num_hidden_layers fails at the first missing name, not in a giant list
    pk, pv = dec.inputs["past_key_names"], dec.inputs["past_value_names"]
    nk, nv = dec.outputs["present_key_names"], dec.outputs["present_value_names"]
    _require(dec, (p % i for i in range(n_layers) for p in (pk, pv)), "input")
    _require(dec, itertools.chain([dec.outputs["logits"]], (p % i for i in range(n_layers) for p in (nk, nv))),
             "output")
    if pk % n_layers in sig.inputs:  # the file has more layers than the config says: they would be unbound
        raise ModelFolderError(
            f"{CONFIG_NAME}: model.decoder.num_hidden_layers is {n_layers} but {dec.path.name} also has input "
            f"{pk % n_layers!r}"
        )
    search = cfg.get("search", {})
    if not isinstance(search, dict):
        raise ModelFolderError(f"{CONFIG_NAME}: field 'search' must be an object, got {search!r}")
    share = bool(search.get("past_present_share_buffer", False))
    layout = "shared" if share and "GroupQueryAttention" in sig.ops else "concat"
    kv_dtype, _ = sig.inputs[dec.inputs["past_key_names"] % 0]
    info = DecoderInfo(
        num_layers=n_layers,
        num_heads=_positive_int(cfg, "model.decoder.num_attention_heads"),
        num_kv_heads=_positive_int(cfg, "model.decoder.num_key_value_heads"),
        head_size=_positive_int(cfg, "model.decoder.head_size"),
        hidden_size=_positive_int(cfg, "model.decoder.hidden_size"),
        drive=drive, kv_layout=layout, dtype=kv_dtype,
    )
    vocab_size = _positive_int(cfg, "model.vocab_size")
    # the sizes the decoders allocate must agree with the shapes the ONNX file declares (where it fixes them)
    _, kv_shape = sig.inputs[pk % 0]
    _, logits_shape = sig.outputs[dec.outputs["logits"]]
    _, x_shape = sig.inputs[lead]
    for field_name, value, shape, axis in [
        ("num_key_value_heads", info.num_kv_heads, kv_shape, 1),
        ("head_size", info.head_size, kv_shape, 3),
        ("vocab_size", vocab_size, logits_shape, -1),
        ("hidden_size", info.hidden_size, x_shape if drive == "embeds" else (), -1),
    ]:
        declared = shape[axis] if len(shape) > max(axis, -axis - 1) else None
        if isinstance(declared, int) and declared > 0 and declared != value:
            raise ModelFolderError(
                f"{CONFIG_NAME}: {field_name} is {value} but {dec.path.name} declares {declared} "
                f"(shape {list(shape)})"
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
        raise ModelFolderError(f"{CONFIG_NAME}: the decoder takes inputs_embeds but there is no model.embedding "
                               "section")
    eos = _get(cfg, "model.eos_token_id", (int, list))
    eos = tuple(eos) if isinstance(eos, list) else (eos,)
    if not all(isinstance(e, int) and not isinstance(e, bool) for e in eos):
        raise ModelFolderError(f"{CONFIG_NAME}: model.eos_token_id must be an int or a list of ints")
    max_length = search.get("max_length", None)
    if max_length is None:
        max_length = _get(cfg, "model.context_length", int)
    if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length <= 0:
        raise ModelFolderError(f"{CONFIG_NAME}: search.max_length must be a positive int, got {max_length!r}")
    image_token = cfg["model"].get("image_token_id")
    if vision is not None and (not isinstance(image_token, int) or isinstance(image_token, bool)):
        raise ModelFolderError(f"{CONFIG_NAME}: model.image_token_id (int) is required with a vision section")
    folder = ModelFolder(
        root=root, model_type=model_type, decoder=dec, info=info, vision=vision, embedding=embedding,
        max_length=max_length, bos_token_id=_get(cfg, "model.bos_token_id", int), eos_token_ids=eos,
        pad_token_id=_get(cfg, "model.pad_token_id", int), image_token_id=image_token,
        vocab_size=vocab_size, raw=cfg,
    )
    check_folder(folder)  # what would fail later inside onnxruntime (foldercheck)
    return folder
