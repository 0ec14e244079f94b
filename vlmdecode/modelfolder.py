"""Read and check a model folder's genai_config.json (ours or onnxruntime-genai's): the ONE reader.

    ModelFolder.load(dir) -> components (vision?, embedding?, decoder) with file paths and I/O names,
    checked against the ONNX files' real inputs and outputs; the decoder's per-layer KV windows
    (graphinfo); the token ids, context length and `search` defaults (search.SearchConfig) that
    the processor and the pipeline use. The processor reads its ids from here, never the file.

Every field onnxruntime-genai's builder writes is read: honoured, or refused with a message naming
it when it asks for something vlmdecode does not do (unknown fields too). Every problem raises
`ModelFolderError` naming the field or file and what is accepted; nothing is guessed. This module
reads only JSON and ONNX graph signatures (no weights, no onnxruntime).

KV capacity rule (`ModelFolder.capacity`): `max_length=` when given (2 .. context_length), else
min(search.max_length or context_length, DEFAULT_CAPACITY = 4096); a prompt past it is an error
that names `max_length=`. Sliding-window layers exported with a windowed cache get their own,
smaller capacity (`kvcache.layer_capacities`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from .foldercheck import check_folder, kind_of
from .genaiconfig import (
    CONFIG_NAME,
    ModelFolderError,
    TokenIds,
    check_known,
    get_field,
    positive_int,
    read_config,
    token_ids,
)
from .graphinfo import GraphError, Signature
from .search import SearchConfig, SearchConfigError

DEFAULT_CAPACITY = 4096  # KV positions allocated by default when the folder's max_length is larger

__all__ = ["CONFIG_NAME", "DEFAULT_CAPACITY", "Component", "DecoderInfo", "ModelFolder", "ModelFolderError",
           "Signature", "TokenIds", "read_config", "token_ids"]


@dataclass(frozen=True)
class Component:
    """One ONNX file with the names genai_config.json gives its inputs and outputs."""

    role: str
    path: Path
    inputs: dict  # logical name -> graph name
    outputs: dict
    signature: Signature
    session_options: dict = field(default_factory=dict)  # as written; checked by sessionpolicy (foldercheck)


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
    # per layer: the window W of a layer whose GroupQueryAttention keeps a windowed KV cache
    # (sliding_window_cache=1: its buffer holds C >= W positions), None for a full-length cache
    windows: tuple = ()
    cache_slack: int = 0  # model.decoder.sliding_window.cache_slack (0: the device's default)
    logits_last_only: bool = False  # logits [B, 1, V] (the builder's prune_lm_head): prefill gives one row

    @property
    def windowed(self) -> bool:
        return any(w is not None for w in self.windows)

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
    context_length: int = 0
    search: SearchConfig = field(default_factory=SearchConfig)
    ids: TokenIds | None = None  # the same ids as above, as the processor takes them

    def capacity(self, max_length: int | None = None) -> int:
        """KV positions a decoder allocates (the module docstring's rule); max_length= overrides."""
        if max_length is None:
            return min(self.max_length, DEFAULT_CAPACITY)
        if not isinstance(max_length, int) or isinstance(max_length, bool) or not 1 < max_length <= self.context_length:
            raise ValueError(f"max_length={max_length!r} must be an int in [2, {self.context_length}] (the model's "
                             f"context_length, from {self.root.name}/{CONFIG_NAME})")
        return max_length

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
    sec = get_field(cfg, f"model.{role}", dict)
    check_known(sec, role, f"model.{role}")
    path = _resolve(root, get_field(cfg, f"model.{role}.filename", str), f"model.{role}.")
    for key in ("inputs", "outputs"):
        if key in sec:
            check_known(get_field(cfg, f"model.{role}.{key}", dict), f"{role}.{key}", f"model.{role}.{key}")
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
    try:
        signature = Signature.read(path)
    except GraphError as e:
        raise ModelFolderError(str(e)) from None
    return Component(role, path, inputs, outputs, signature, opts if isinstance(opts, dict) else {})


def _windows(cfg: dict, dec: Component, n_layers: int) -> tuple[tuple, int]:
    """Per-layer windows of the layers whose attention keeps a windowed cache (from the graph), checked
    against model.decoder.sliding_window when the config has one. Returns (windows, cache_slack)."""
    by_past = dec.signature.windows_by_past_key()
    pk = dec.inputs["past_key_names"]
    windows = tuple(by_past[pk % i].window if pk % i in by_past and by_past[pk % i].windowed_cache else None
                    for i in range(n_layers))
    sw = cfg["model"]["decoder"].get("sliding_window")
    if sw is None:
        return windows, 0
    where = "model.decoder.sliding_window"
    if not isinstance(sw, dict):
        raise ModelFolderError(f"{CONFIG_NAME}: {where} must be an object, got {sw!r}")
    check_known(sw, "sliding_window", where)
    for key, want in (("slide_key_value_cache", False), ("slide_inputs", False)):
        if sw.get(key, True) is not want:
            raise ModelFolderError(
                f"{CONFIG_NAME}: {where}.{key} is {sw.get(key, True)!r}; vlmdecode drives only the windowed cache that "
                f"GroupQueryAttention evicts itself (sliding_window_cache=1, {key}: false)")
    size = positive_int(cfg, f"{where}.window_size")
    layers = get_field(cfg, f"{where}.layers", list)
    slack = get_field(cfg, f"{where}.cache_slack", int) if "cache_slack" in sw else 0
    if slack < 0:
        raise ModelFolderError(f"{CONFIG_NAME}: {where}.cache_slack must be >= 0, got {slack}")
    graph = [i for i, w in enumerate(windows) if w is not None]
    if sorted(set(layers)) != graph or any(windows[i] != size for i in graph):
        raise ModelFolderError(
            f"{CONFIG_NAME}: {where} says layers {layers} keep a window of {size}, but {dec.path.name}'s "
            f"GroupQueryAttention nodes with sliding_window_cache=1 are layers {graph} with windows "
            f"{sorted({windows[i] for i in graph})}")
    return windows, slack


def _require(comp: Component, names, where: str) -> None:
    have = comp.signature.inputs if where == "input" else comp.signature.outputs
    for n in names:
        if n not in have:
            raise ModelFolderError(
                f"{comp.path.name}: genai_config.json names {where} {n!r} but the ONNX file has "
                f"{where}s {sorted(have)}"
            )


def _load(root: Path) -> ModelFolder:
    cfg = read_config(root)
    check_known(cfg, "", "")
    check_known(get_field(cfg, "model", dict), "model", "model")
    model_type = get_field(cfg, "model.type", str)
    dec = _component(root, cfg, "decoder", ["attention_mask"], ["logits"])
    for key in ("past_key_names", "past_value_names"):
        get_field(cfg, f"model.decoder.inputs.{key}", str)
    for key in ("present_key_names", "present_value_names"):
        get_field(cfg, f"model.decoder.outputs.{key}", str)
    n_layers = positive_int(cfg, "model.decoder.num_hidden_layers")
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
    try:
        search = SearchConfig.parse(cfg.get("search", {}))
    except SearchConfigError as e:
        raise ModelFolderError(str(e)) from None
    layout = "shared" if search.past_present_share_buffer and "GroupQueryAttention" in sig.ops else "concat"
    kv_dtype, _ = sig.inputs[dec.inputs["past_key_names"] % 0]
    windows, slack = _windows(cfg, dec, n_layers)
    if any(w is not None for w in windows) and layout != "shared":
        raise ModelFolderError(f"{CONFIG_NAME}: {dec.path.name} keeps windowed KV caches (sliding_window_cache=1), "
                               "which need search.past_present_share_buffer: true")
    _, logits_shape = sig.outputs[dec.outputs["logits"]]
    info = DecoderInfo(
        num_layers=n_layers,
        num_heads=positive_int(cfg, "model.decoder.num_attention_heads"),
        num_kv_heads=positive_int(cfg, "model.decoder.num_key_value_heads"),
        head_size=positive_int(cfg, "model.decoder.head_size"),
        hidden_size=positive_int(cfg, "model.decoder.hidden_size"),
        drive=drive, kv_layout=layout, dtype=kv_dtype, windows=windows, cache_slack=slack,
        logits_last_only=len(logits_shape) == 3 and logits_shape[1] == 1,
    )
    vocab_size = positive_int(cfg, "model.vocab_size")
    # the sizes the decoders allocate must agree with the shapes the ONNX file declares (where it fixes them)
    _, kv_shape = sig.inputs[pk % 0]
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
                               "section: each generated token must be embedded before the next step (add an "
                               "embedding model, or export the decoder with input_ids)")
    ids = token_ids(cfg)
    max_length = search.max_length or ids.context_length
    if max_length is None:
        get_field(cfg, "model.context_length", int)  # raises: one of the two is needed
    context = ids.context_length or max_length
    if max_length > context:
        raise ModelFolderError(f"{CONFIG_NAME}: search.max_length {max_length} exceeds model.context_length {context}")
    if vision is not None and ids.image_token_id is None:
        raise ModelFolderError(f"{CONFIG_NAME}: model.image_token_id (int) is required with a vision section")
    folder = ModelFolder(
        root=root, model_type=model_type, decoder=dec, info=info, vision=vision, embedding=embedding,
        max_length=max_length, bos_token_id=ids.bos_token_id, eos_token_ids=ids.eos_token_ids,
        pad_token_id=ids.pad_token_id, image_token_id=ids.image_token_id, vocab_size=vocab_size, raw=cfg,
        context_length=context, search=search, ids=ids,
    )
    check_folder(folder)  # what would fail later inside onnxruntime (foldercheck)
    return folder
    check_folder(folder)  # what would fail later inside onnxruntime (foldercheck)
    return folder
