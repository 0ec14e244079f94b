"""What a model folder's genai_config.json may ask of onnxruntime: the one session_options policy.

A genai_config.json can carry `session_options` (under model.decoder, model.vision, model.embedding, ...).
onnxruntime-genai honours them, and some of them make onnxruntime run code or write files:
`custom_ops_library` dlopen()s a shared library (its constructors run), `enable_profiling` writes
profiles at any path, `ep_context_file_path` writes a file, `config_entries` sets arbitrary session
entries, and provider options such as TensorRT's `trt_extra_plugin_lib_paths` or QNN's `backend_path`
load libraries. The policy, applied on every path that creates a session from a folder:

    SAFE (checked, applied)     log_id, intra_op_num_threads, inter_op_num_threads (at most the CPUs
                                here), enable_cpu_mem_arena, enable_mem_pattern, graph_optimization_level
    log_severity_level          checked; onnxruntime-genai applies it, vlmdecode keeps its own level
    provider_options            a list of {"cuda": {...}} whose keys are in CUDA_PROVIDER_KEYS (tuning
                                only; checked; onnxruntime-genai applies them, vlmdecode sets its own)
    anything else               refused with `SessionPolicyError` naming the key and where it is;
                                `custom_ops_library` anywhere in the file is refused too

vlmdecode's own sessions (`sessions.make_session`) apply the SAFE keys through `ort_settings`. For
onnxruntime-genai (`peer.load_genai_model`), which reads genai_config.json itself, `check_genai_config`
runs on the parsed bytes and the peer hands genai exactly those bytes in a private folder
(`genai_view`) whose other entries are symlinks to the model folder's: a file swapped after the check
is never what genai reads, and every `filename` must stay inside the folder.

What it is not: no check of the ONNX graphs themselves (their ops run only with the libraries above,
which the policy keeps out), no sandbox.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

SAFE_KEYS = {
    "log_id": str,
    "log_severity_level": int,
    "intra_op_num_threads": int,
    "inter_op_num_threads": int,
    "enable_cpu_mem_arena": bool,
    "enable_mem_pattern": bool,
    "graph_optimization_level": str,
}
GRAPH_OPT_LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")
CUDA_PROVIDER_KEYS = frozenset({
    "enable_cuda_graph", "enable_skip_layer_norm_strict_mode", "prefer_nhwc", "tunable_op_enable",
    "tunable_op_tuning_enable", "tunable_op_max_tuning_duration_ms", "cudnn_conv_algo_search",
    "cudnn_conv_use_max_workspace", "cudnn_conv1d_pad_to_nc1d", "arena_extend_strategy", "gpu_mem_limit",
    "do_copy_in_default_stream", "use_tf32", "enable_flash_attention", "sdpa_kernel",
})
REFUSED_WHY = {
    "custom_ops_library": "loads a shared library into the process (its code runs)",
    "enable_profiling": "writes profiling files at a path the folder chooses",
    "profile_file_prefix": "writes profiling files at a path the folder chooses",
    "ep_context_file_path": "writes a file at a path the folder chooses",
    "ep_context_enable": "writes an EP context model file",
    "config_entries": "sets arbitrary onnxruntime session entries",
}


class SessionPolicyError(ValueError):
    """genai_config.json asks onnxruntime for something the policy refuses; the message names it."""


def max_threads() -> int:
    """The most threads a session may use: the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_threads(n, what: str = "threads") -> int:
    """An int in [0, max_threads()] (0: onnxruntime's default)."""
    top = max_threads()
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= top:
        raise ValueError(f"{what}={n!r} must be an int in [0, {top}] (0: onnxruntime's default; {top} CPUs here)")
    return n


def check_session_options(opts, where: str) -> dict:
    """Check one `session_options` object; return it unchanged (see the module docstring)."""
    if not isinstance(opts, dict):
        raise SessionPolicyError(f"{where} must be an object, got {opts!r}")
    for key, value in opts.items():
        at = f"{where}.{key}"
        if key == "provider_options":
            _check_provider_options(value, at)
        elif key in SAFE_KEYS:
            kind = SAFE_KEYS[key]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise SessionPolicyError(f"{at} must be {kind.__name__}, got {value!r}")
            if key.endswith("_num_threads"):
                try:
                    check_threads(value, at)
                except ValueError as e:
                    raise SessionPolicyError(str(e)) from None
            if key == "log_severity_level" and not 0 <= value <= 4:
                raise SessionPolicyError(f"{at} must be in [0, 4], got {value}")
            if key == "graph_optimization_level" and value not in GRAPH_OPT_LEVELS:
                raise SessionPolicyError(f"{at}={value!r}: allowed {', '.join(GRAPH_OPT_LEVELS)}")
        elif key in REFUSED_WHY:
            raise SessionPolicyError(f"{at} is refused: it {REFUSED_WHY[key]}; remove it from genai_config.json")
        else:
            raise SessionPolicyError(f"{at} is not an accepted session option; accepted: "
                                     f"{', '.join([*SAFE_KEYS, 'provider_options'])}")
    return opts


def _check_provider_options(value, at: str) -> None:
    if not isinstance(value, list):
        raise SessionPolicyError(f"{at} must be a list of {{provider: {{option: value}}}}, got {value!r}")
    for entry in value:
        if not isinstance(entry, dict) or len(entry) != 1:
            raise SessionPolicyError(f"{at}: each entry must be one {{provider: {{...}}}} object, got {entry!r}")
        (provider, options), = entry.items()
        if provider != "cuda":
            raise SessionPolicyError(f"{at}: provider {provider!r} is refused (only 'cuda' options are accepted; "
                                     "other providers' options can load libraries)")
        if not isinstance(options, dict):
            raise SessionPolicyError(f"{at}.cuda must be an object, got {options!r}")
        for k, v in options.items():
            if k not in CUDA_PROVIDER_KEYS:
                raise SessionPolicyError(f"{at}.cuda.{k} is not an accepted CUDA option; accepted: "
                                         f"{', '.join(sorted(CUDA_PROVIDER_KEYS))}")
            if not isinstance(v, (str, int)) or isinstance(v, bool):
                raise SessionPolicyError(f"{at}.cuda.{k} must be a string or an int, got {v!r}")


def check_genai_config(cfg: dict, root: Path) -> dict:
    """Every session_options in `cfg`, no custom_ops_library anywhere, every model.*.filename inside `root`."""

    def walk(node, where: str):
        if isinstance(node, dict):
            for k, v in node.items():
                at = f"{where}.{k}" if where else k
                if k == "custom_ops_library":
                    raise SessionPolicyError(f"{at} is refused: it {REFUSED_WHY[k]}; remove it from genai_config.json")
                if k == "session_options":
                    check_session_options(v, at)
                else:
                    walk(v, at)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")

    walk(cfg, "")
    model = cfg.get("model") if isinstance(cfg, dict) else None
    for role, sec in (model.items() if isinstance(model, dict) else ()):
        name = sec.get("filename") if isinstance(sec, dict) else None
        if name is not None:
            path = (root / str(name)).resolve()
            if Path(str(name)).is_absolute() or not path.is_relative_to(root.resolve()):
                raise SessionPolicyError(f"model.{role}.filename {name!r} is outside the model folder {root}")
    return cfg


def ort_settings(opts: dict) -> dict:
    """The SessionOptions attributes one checked `session_options` sets in vlmdecode's own sessions."""
    out = {k: opts[k] for k in SAFE_KEYS if k in opts and k not in ("log_id", "log_severity_level")}
    if "log_id" in opts:
        out["logid"] = opts["log_id"]
    return out


def genai_view(root: Path) -> tuple[tempfile.TemporaryDirectory, dict]:
    """(private folder for onnxruntime-genai, its checked config): genai_config.json read once, checked,
    written into the private folder; every other entry of `root` linked into it. Keep the folder alive
    while genai uses the model; it is removed when the returned object is cleaned up."""
    root = Path(root)
    path = root / "genai_config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: not an onnxruntime-genai model folder")
    raw = path.read_bytes()
    try:
        cfg = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SessionPolicyError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise SessionPolicyError(f"{path}: top level must be an object")
    check_genai_config(cfg, root)
    view = tempfile.TemporaryDirectory(prefix="vlmdecode-genai-")
    for entry in root.iterdir():
        if entry.name != "genai_config.json":
            os.symlink(entry.resolve(), Path(view.name) / entry.name)
    (Path(view.name) / "genai_config.json").write_bytes(raw)
    return view, cfg
