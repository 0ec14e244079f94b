"""Checks that `ModelFolder.load` runs last, so a folder that would fail inside onnxruntime fails at load.

    check_folder(folder) -> None, or ModelFolderError naming the field or file and what is accepted

What it checks (each was an onnxruntime error at the first generation before):
  * genai_config.json's session_options against `vlmdecode.sessionpolicy` (no custom ops library, no
    profiling paths, no unknown keys), booleans that are JSON booleans (`"false"` is not false);
  * every graph input of every component is one vlmdecode binds (a removed `position_ids` mapping
    leaves the decoder's position_ids input unbound), with the rank and the fixed dims vlmdecode feeds;
  * special token ids (bos, eos, pad, image) inside [0, vocab_size);
  * processor_config.json's image_size equals the vision model's declared pixel_values size;
  * the files vlmdecode reads from the folder are regular files inside it (`inside`): a symlinked
    tokenizer.json pointing elsewhere is refused, a FIFO or a directory is reported as what it is.

What it is not: no onnxruntime session is created and no weights are read.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from .sessionpolicy import SessionPolicyError, check_genai_config

# files vlmdecode itself opens from a folder, besides the ONNX files genai_config.json names
FOLDER_FILES = ("genai_config.json", "tokenizer.json", "tokenizer_config.json", "processor_config.json",
                "chat_template.jinja", "chat_template.json", "preprocessor_config.json")
SEARCH_BOOLS = ("past_present_share_buffer", "do_sample", "early_stopping")
VAR, ANY = "varies", "any"  # an axis whose length vlmdecode changes call to call / one checked elsewhere


def _error(msg: str):
    from .modelfolder import ModelFolderError

    return ModelFolderError(msg)


def kind_of(path: Path) -> str:
    """'file', 'missing', 'directory', 'FIFO', 'socket', 'device' or 'special file' (symlinks followed)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "missing"
    except OSError:  # a symlink loop, a name too long
        return "unreadable path"
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "device"), (stat.S_ISBLK, "device")):
        if test(mode):
            return name
    return "special file"


def inside(root: Path, name: str, what: str = "") -> Path:
    """root/name resolved, refused unless it is a regular file inside `root` (symlinks followed)."""
    path = Path(root) / name
    real = path.resolve()
    label = what or name
    if not real.is_relative_to(Path(root).resolve()):
        raise _error(f"{label} {str(path)!r} links to {str(real)!r}, outside the model folder {root}: refused")
    kind = kind_of(path)
    if kind == "missing":
        raise _error(f"{label} {name!r} does not exist in {root}")
    if kind != "file":
        raise _error(f"{label} {str(path)!r} is a {kind}, not a regular file")
    return real


def check_folder(folder) -> None:
    """Raise ModelFolderError for what would fail later (see the module docstring)."""
    root, cfg = folder.root, folder.raw
    try:
        check_genai_config(cfg, root)
    except SessionPolicyError as e:
        raise _error(f"genai_config.json: {e}") from None
    search = cfg.get("search", {})
    for key in SEARCH_BOOLS:
        if key in search and not isinstance(search[key], bool):
            raise _error(f"genai_config.json: search.{key} must be true or false (a JSON boolean), "
                         f"got {search[key]!r}")
    for name in FOLDER_FILES:
        if (root / name).exists() or (root / name).is_symlink():
            inside(root, name)
    _check_ids(folder)
    _check_inputs(folder)
    _check_image_size(folder)


def _check_ids(folder) -> None:
    V = folder.vocab_size
    ids = {"bos_token_id": [folder.bos_token_id], "pad_token_id": [folder.pad_token_id],
           "eos_token_id": list(folder.eos_token_ids)}
    if folder.image_token_id is not None:
        ids["image_token_id"] = [folder.image_token_id]
    for name, values in ids.items():
        for v in values:
            if not 0 <= v < V:
                raise _error(f"genai_config.json: model.{name} {v} is outside the vocabulary [0, {V})")


def _check_inputs(folder) -> None:
    """Each graph input must be one vlmdecode binds, with the rank and fixed dims it feeds.

    VAR: an axis vlmdecode feeds different lengths (it must be symbolic); ANY: not checked here."""
    info, dec = folder.info, folder.decoder
    H, var = info.hidden_size, VAR
    lead = dec.inputs["inputs_embeds" if info.drive == "embeds" else "input_ids"]
    want = {lead: (1, var, H) if info.drive == "embeds" else (1, var), dec.inputs["attention_mask"]: (1, var)}
    if "position_ids" in dec.inputs:
        want[dec.inputs["position_ids"]] = (1, var)
    for pair in info.past_names(dec):
        for n in pair:
            want[n] = (1, info.num_kv_heads, ANY if info.kv_layout == "shared" else VAR, info.head_size)
    _check_component(dec, want, "model.decoder.inputs")
    if folder.embedding is not None:
        e = folder.embedding
        feats = e.signature.inputs[e.inputs["image_features"]][1]
        _check_component(e, {e.inputs["input_ids"]: (1, var), e.inputs["image_features"]: (ANY,) * (len(feats) - 1)
                             + (H,)}, "model.embedding.inputs")
    if folder.vision is not None:
        v = folder.vision
        _check_component(v, {v.inputs["pixel_values"]: (1, 3, ANY, ANY)}, "model.vision.inputs")


def _check_component(comp, want: dict, field: str) -> None:
    sig = comp.signature.inputs
    extra = sorted(set(sig) - set(want))
    if extra:
        raise _error(f"{comp.path.name} has input(s) {extra} that genai_config.json does not map to anything "
                     f"vlmdecode feeds ({field}: accepted {sorted(want)}); e.g. a removed "
                     f"'position_ids' mapping leaves position_ids unbound")
    for name, shape in want.items():
        declared = sig[name][1]
        if len(declared) != len(shape):
            raise _error(f"{comp.path.name}: input {name!r} has rank {len(declared)} (shape {list(declared)}); "
                         f"vlmdecode feeds rank {len(shape)} ({_show(shape)})")
        for axis, (d, w) in enumerate(zip(declared, shape)):
            if not isinstance(d, int) or d <= 0 or w is ANY or d == w:
                continue
            if w is VAR:
                raise _error(f"{comp.path.name}: input {name!r} fixes axis {axis} to {d} (shape {list(declared)})"
                             " but vlmdecode feeds a length that varies (prompt, step, KV); it must be symbolic")
            raise _error(f"{comp.path.name}: input {name!r} axis {axis} is {d} (shape {list(declared)}) but "
                             f"vlmdecode feeds {w} ({_show(shape)})")


def _show(shape) -> str:
    return "[" + ", ".join({VAR: "varies", ANY: "any"}.get(d, str(d)) for d in shape) + "]"


def _check_image_size(folder) -> None:
    if folder.vision is None or not (folder.root / "processor_config.json").is_file():
        return
    try:
        size = json.loads(inside(folder.root, "processor_config.json").read_text()).get("image_size")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return  # the processor reports a malformed processor_config.json with its own message
    v = folder.vision
    declared = v.signature.inputs[v.inputs["pixel_values"]][1][2:]
    for d in declared:
        if isinstance(size, int) and isinstance(d, int) and d > 0 and d != size:
            raise _error(f"processor_config.json: image_size is {size} but {v.path.name} declares pixel_values "
                         f"{list(v.signature.inputs[v.inputs['pixel_values']][1])}: they must agree")
