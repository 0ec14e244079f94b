"""genai_config.json as JSON: reading the file, its field rules, and the ids the processor needs.

    read_config(root) -> the parsed file; token_ids(cfg) / TokenIds.read(root) -> bos / eos / pad /
    image token ids and context_length; the per-section lists of fields vlmdecode reads (anything else
    is refused by name; what session_options may hold is `sessionpolicy`'s, checked by foldercheck).

The half of `modelfolder` (the one reader of genai_config.json) that needs no ONNX file: the processor
reads its ids through TokenIds, never the file itself. Every problem raises `ModelFolderError`
naming the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CONFIG_NAME = "genai_config.json"


class ModelFolderError(ValueError):
    """A model folder or its genai_config.json is unusable; the message says why and what is accepted."""


def get_field(d: dict, path: str, kind=None):
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


def positive_int(d: dict, path: str) -> int:
    n = get_field(d, path, int)
    if n <= 0:
        raise ModelFolderError(f"{CONFIG_NAME}: field '{path}' must be > 0, got {n}")
    return n


# the fields of each section that vlmdecode reads; anything else is refused by name (_known)
_FIELDS = {
    "": {"model", "search"},
    "model": {"type", "vocab_size", "context_length", "bos_token_id", "eos_token_id", "pad_token_id",
              "image_token_id", "decoder", "vision", "embedding"},
    "decoder": {"filename", "head_size", "hidden_size", "num_attention_heads", "num_key_value_heads",
                "num_hidden_layers", "inputs", "outputs", "session_options", "sliding_window"},
    "vision": {"filename", "config_filename", "inputs", "outputs", "session_options"},
    "embedding": {"filename", "inputs", "outputs", "session_options"},
    "decoder.inputs": {"input_ids", "inputs_embeds", "attention_mask", "position_ids", "past_key_names",
                       "past_value_names"},
    "decoder.outputs": {"logits", "present_key_names", "present_value_names"},
    "vision.inputs": {"pixel_values"}, "vision.outputs": {"image_features"},
    "embedding.inputs": {"input_ids", "image_features"}, "embedding.outputs": {"inputs_embeds"},
    "sliding_window": {"window_size", "layers", "cache_slack", "slide_key_value_cache", "slide_inputs",
                       "pad_value", "alignment"},
}


def check_known(section: dict, kind: str, where: str) -> None:
    unknown = sorted(set(section) - _FIELDS[kind])
    if unknown:
        raise ModelFolderError(f"{CONFIG_NAME}: {where or 'the top level'} has field(s) {unknown} that vlmdecode does "
                               f"not read; accepted: {sorted(_FIELDS[kind])}")


def read_config(root: Path) -> dict:
    """genai_config.json of `root`, parsed (ModelFolderError when missing, not a regular file inside the
    folder, or not a JSON object)."""
    from .foldercheck import inside, kind_of

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
    return cfg


@dataclass(frozen=True)
class TokenIds:
    """The special ids and context length of genai_config.json's model section."""

    bos_token_id: int
    eos_token_ids: tuple
    pad_token_id: int
    image_token_id: int | None
    context_length: int | None

    @staticmethod
    def read(model_dir) -> TokenIds:
        """From a folder's genai_config.json alone (no ONNX file is opened): what the processor needs."""
        return token_ids(read_config(Path(model_dir)))


def token_ids(cfg: dict) -> TokenIds:
    eos = get_field(cfg, "model.eos_token_id", (int, list))
    eos = tuple(eos) if isinstance(eos, list) else (eos,)
    if not eos or not all(isinstance(e, int) and not isinstance(e, bool) for e in eos):
        raise ModelFolderError(f"{CONFIG_NAME}: model.eos_token_id must be an int or a non-empty list of ints")
    ids = {name: get_field(cfg, f"model.{name}", int) for name in ("bos_token_id", "pad_token_id", "image_token_id")
           if name != "image_token_id" or name in cfg["model"]}  # ranges: foldercheck ([0, vocab_size))
    context = positive_int(cfg, "model.context_length") if "context_length" in cfg["model"] else None
    return TokenIds(ids["bos_token_id"], eos, ids["pad_token_id"], ids.get("image_token_id"), context)
