"""Read a VLM folder's image preprocessing config into an `images.ImageSpec`, strictly.

    read_image_config(root, config_filename) -> ImageConfig(spec, tokens_per_image, tokens, source)

Which file: genai_config.json's model.vision.config_filename (onnxruntime-genai's default
"processor_config.json") when it exists, else Hugging Face's preprocessor_config.json. Formats:

    onnxruntime-extensions  {"processor": {"transforms": [{"operation": {"type": ..., "attrs": ...}}]}}:
                            DecodeImage (color_space RGB, or BGR followed by ConvertRGB), ConvertRGB,
                            Resize (width, height, interpolation NEAREST|LINEAR|CUBIC|LANCZOS,
                            keep_aspect_ratio 0), Rescale (rescale_factor, default 1/255), Normalize
                            (mean, std), Permute3D (dims [2, 0, 1]); in that order, each once
    Hugging Face            preprocessor_config.json of an image processor: size {height, width},
                            resample (PIL code), do_resize/do_rescale/do_normalize/do_convert_rgb,
                            rescale_factor, image_mean/std, image_seq_length; pan-and-scan off
    vlmdecode fixture       flat keys (image_size, rescale_factor, image_mean, image_std, mode,
                            mm_tokens_per_image, image_token_id, boi/eoi/image_token, resample) beside
                            an onnxruntime-extensions "processor" section, which must agree with them

Tokens per image: the flat mm_tokens_per_image or a Hugging Face image_seq_length (in either file);
the processor checks it against the vision model's output shape, or takes it from there. Unknown
transforms or fields are refused by name (a Gemma 4 / Phi-3 / pan-and-scan transform is not silently
skipped). Every problem raises ProcessorError naming the file and field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ProcessorError
from .images import ImageSpec

PROCESSOR_CONFIG = "processor_config.json"  # onnxruntime-genai's name
HF_PREPROCESSOR_CONFIG = "preprocessor_config.json"

_ORTX_RESAMPLE = {"NEAREST": "nearest", "LINEAR": "bilinear", "CUBIC": "bicubic", "LANCZOS": "lanczos"}
_PIL_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic"}  # PIL.Image.Resampling codes
_FLAT = {"image_size", "rescale_factor", "image_mean", "image_std", "mode", "mm_tokens_per_image", "image_token_id",
         "boi_token", "eoi_token", "image_token", "resample", "processor"}
_HF = {"do_convert_rgb", "do_normalize", "do_rescale", "do_resize", "image_mean", "image_std", "resample",
       "rescale_factor", "size", "image_processor_type", "processor_class", "image_seq_length", "do_pan_and_scan",
       "pan_and_scan_max_num_crops", "pan_and_scan_min_crop_size", "pan_and_scan_min_ratio_to_activate"}


@dataclass(frozen=True)
class ImageConfig:
    spec: ImageSpec
    tokens_per_image: int | None  # None: take it from the vision model's output shape
    tokens: dict = field(default_factory=dict)  # boi_token / eoi_token / image_token / image_token_id if given
    source: str = ""


def read_json(path: Path):
    if not path.is_file():
        raise ProcessorError(f"{path}: file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ProcessorError(f"{path}: not valid JSON ({e})") from None


def _unknown(d: dict, known: set, where: str) -> None:
    extra = sorted(set(d) - known)
    if extra:
        raise ProcessorError(f"{where}: field(s) {extra} are not read by vlmdecode; accepted: {sorted(known)}")


def _seq_length(d: dict, where: str) -> int | None:
    n = d.get("image_seq_length")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n <= 0):
        raise ProcessorError(f"{where}: field 'image_seq_length' must be a positive integer, got {n!r}")
    return n


def read_image_config(root: Path, config_filename: str | None = None) -> ImageConfig:
    """The folder's image config (module docstring for the order and the formats)."""
    name = config_filename or PROCESSOR_CONFIG
    path = root / name
    hf_path = root / HF_PREPROCESSOR_CONFIG
    hf = read_json(hf_path) if hf_path.is_file() else None
    if not path.is_file():
        if hf is None:
            raise ProcessorError(f"{path}: file not found (a VLM folder needs {name} or {HF_PREPROCESSOR_CONFIG})")
        return _from_hf(hf, str(hf_path))
    d = read_json(path)
    if not isinstance(d, dict):
        raise ProcessorError(f"{path}: expected a JSON object, got {type(d).__name__}")
    if "image_size" in d:
        cfg = _from_flat(d, str(path))
    elif "processor" in d:
        _unknown(d, {"processor"}, str(path))
        cfg = ImageConfig(_from_ortx(d["processor"], str(path)), None, {}, str(path))
    elif "image_processor_type" in d or "size" in d:
        return _from_hf(d, str(path))
    else:
        raise ProcessorError(f"{path}: neither an onnxruntime-extensions config (a 'processor' object), a Hugging "
                             "Face image processor config, nor vlmdecode's flat config ('image_size')")
    if hf is not None and cfg.tokens_per_image is None:  # onnxruntime-extensions configs carry no token count
        cfg = ImageConfig(cfg.spec, _seq_length(hf, str(hf_path)), cfg.tokens, cfg.source)
    return cfg


def _from_flat(d: dict, where: str) -> ImageConfig:
    _unknown(d, _FLAT, where)
    for key in ("image_size", "rescale_factor", "image_mean", "image_std", "mode", "mm_tokens_per_image"):
        if key not in d:
            raise ProcessorError(f"{where}: missing field '{key}'")
    if d["mode"] != "RGB":
        raise ProcessorError(f"{where}: field 'mode'={d['mode']!r} is invalid: only 'RGB' is supported")
    n = d["mm_tokens_per_image"]
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise ProcessorError(f"{where}: field 'mm_tokens_per_image'={n!r} must be a positive integer")
    size = d["image_size"]
    spec = ImageSpec(size, size, d["rescale_factor"], d["image_mean"], d["image_std"], d.get("resample", "bilinear"),
                     where)
    if "processor" in d:
        ortx = _from_ortx(d["processor"], where)
        if (ortx.size, ortx.mean, ortx.std, ortx.resample) != (spec.size, spec.mean, spec.std, spec.resample):
            raise ProcessorError(f"{where}: its 'processor' transforms ({ortx}) disagree with its flat fields ({spec})")
    tokens = {k: d[k] for k in ("boi_token", "eoi_token", "image_token", "image_token_id") if k in d}
    return ImageConfig(spec, n, tokens, where)


def _from_ortx(p, where: str) -> ImageSpec:
    if not isinstance(p, dict) or not isinstance(p.get("transforms"), list):
        raise ProcessorError(f"{where}: 'processor' must be an object with a 'transforms' list")
    _unknown(p, {"name", "transforms"}, f"{where}: processor")
    seen: dict = {}
    order = ["DecodeImage", "ConvertRGB", "Resize", "Rescale", "Normalize", "Permute3D"]
    last = -1
    for t in p["transforms"]:
        op = t.get("operation") if isinstance(t, dict) else None
        if not isinstance(op, dict) or not isinstance(op.get("type"), str):
            raise ProcessorError(f"{where}: each transform must be {{'operation': {{'type': ..., 'attrs': ...}}}}, "
                                 f"got {t!r}")
        kind, attrs = op["type"], op.get("attrs", {})
        if kind not in order:
            raise ProcessorError(f"{where}: transform type {kind!r} is not supported; accepted: {order}")
        if order.index(kind) <= last:
            raise ProcessorError(f"{where}: transform {kind!r} is out of order or repeated; expected order {order}")
        last = order.index(kind)
        if not isinstance(attrs, dict):
            raise ProcessorError(f"{where}: {kind} attrs must be an object, got {attrs!r}")
        seen[kind] = attrs
    for kind in ("DecodeImage", "Resize", "Normalize", "Permute3D"):
        if kind not in seen:
            raise ProcessorError(f"{where}: the transforms have no {kind}; vlmdecode needs {order} (ConvertRGB and "
                                 "Rescale optional)")
    space = seen["DecodeImage"].get("color_space", "BGR")  # onnxruntime-extensions decodes to BGR by default
    if space != "RGB" and not (space == "BGR" and "ConvertRGB" in seen):
        raise ProcessorError(f"{where}: DecodeImage color_space {space!r} without a ConvertRGB: the model would get "
                             "BGR pixels; accepted: color_space RGB, or BGR then ConvertRGB")
    r = seen["Resize"]
    _unknown(r, {"width", "height", "interpolation", "keep_aspect_ratio"}, f"{where}: Resize attrs")
    if r.get("keep_aspect_ratio", 0) not in (0, False):
        raise ProcessorError(f"{where}: Resize keep_aspect_ratio={r['keep_aspect_ratio']!r}; only 0 (resize to "
                             "width x height) is supported")
    interp = r.get("interpolation", "LINEAR")
    if interp not in _ORTX_RESAMPLE:
        raise ProcessorError(f"{where}: Resize interpolation {interp!r}; accepted: {sorted(_ORTX_RESAMPLE)}")
    if seen["Permute3D"].get("dims") != [2, 0, 1]:
        raise ProcessorError(f"{where}: Permute3D dims {seen['Permute3D'].get('dims')!r}; only [2, 0, 1] (HWC -> CHW)")
    scale = seen.get("Rescale", {}).get("rescale_factor", 1 / 255) if "Rescale" in seen else 1.0
    norm = seen["Normalize"]
    _unknown(norm, {"mean", "std"}, f"{where}: Normalize attrs")
    return ImageSpec(r.get("height"), r.get("width"), scale, norm.get("mean"), norm.get("std"),
                     _ORTX_RESAMPLE[interp], where)


def _from_hf(d, where: str) -> ImageConfig:
    if not isinstance(d, dict):
        raise ProcessorError(f"{where}: expected a JSON object")
    _unknown(d, _HF, where)
    if d.get("do_pan_and_scan"):
        raise ProcessorError(f"{where}: do_pan_and_scan is on; vlmdecode does not crop images (set it to false)")
    for key in ("do_resize", "do_rescale", "do_normalize"):
        if d.get(key, True) is not True:
            raise ProcessorError(f"{where}: {key}={d[key]!r}; vlmdecode always resizes, rescales and normalises "
                                 "(each must be true)")
    if d.get("do_convert_rgb", True) not in (True, None):
        raise ProcessorError(f"{where}: do_convert_rgb={d['do_convert_rgb']!r}; images are always converted to RGB")
    size = d.get("size")
    if not isinstance(size, dict) or set(size) != {"height", "width"}:
        raise ProcessorError(f"{where}: field 'size' must be {{'height': H, 'width': W}}, got {size!r}")
    code = d.get("resample", 2)
    if code not in _PIL_RESAMPLE:
        raise ProcessorError(f"{where}: field 'resample'={code!r}; accepted PIL codes {_PIL_RESAMPLE}")
    for key in ("rescale_factor", "image_mean", "image_std"):
        if key not in d:
            raise ProcessorError(f"{where}: missing field '{key}'")
    spec = ImageSpec(size["height"], size["width"], d["rescale_factor"], d["image_mean"], d["image_std"],
                     _PIL_RESAMPLE[code], where)
    return ImageConfig(spec, _seq_length(d, where), {}, where)
