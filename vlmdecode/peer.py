"""onnxruntime-genai as a peer: greedy decoding of a model folder, with host-side timings.

What it is: a thin wrapper over onnxruntime-genai's Python API (`og.Config`, `og.Model`,
`og.GeneratorParams`, `og.Generator`, `og.NamedTensors`) that runs a plain greedy loop on a folder
that genai can load -- a fixture folder (type gemma3: vision -> embedding -> decoder), its `text/`
folder (type gemma3_text) or a real genai export -- and returns the token ids with the wall time of
every step. We benchmark our own decoders against it on the very same ONNX files.

What it is not: no sampling, no batching, no beam search, no tokenizer and no image preprocessing.
Callers pass token ids and, for images, their OWN preprocessed `pixel_values`; these go straight to
genai through `Generator.set_inputs`, so genai's image processor (onnxruntime-extensions) is never
used. (genai 0.18's Gemma 3 processor hard-codes 256 soft tokens per image, so it cannot drive
fixtures with another count; see `vlmdecode.fixture.genai_config`.) onnxruntime_genai is imported
only inside functions, so importing this module never needs it.

How genai 0.18 runs (observed on CPU, relevant to reading the timings):
  * `append_tokens` / `set_inputs` run the prompt (vision, embedding, decoder prefill) right away;
    `PeerResult.prefill_seconds` is that call.
  * the first `generate_next_token` only picks the first token from the prompt's logits; each later
    call first runs one decoder step on the previous token, then picks. So `step_seconds[0]` is
    tiny, `step_seconds[i]` (i >= 1) is one decode step, and N tokens cost N - 1 decode steps.
    `ttft_seconds = prefill_seconds + step_seconds[0]`. A step is timed over `generate_next_token`
    plus `get_next_tokens` (the latter brings the token to the host; on CUDA that is the sync).

End of sequence: genai stops a sequence (`is_done()`) when it picks an eos id, and it also stops at
`max_length`. We want exactly `max_new_tokens` greedy tokens, the way a plain argmax loop that
ignores eos produces them, so that token lists can be compared at equal length. With
`ignore_eos=True` (the default) the model's eos ids are replaced, through `og.Config.overlay`, by the
single id `vocab_size - 1` (for fixtures an unused row past the tokenizer's ids). Greedy choices are
unchanged (no logits are masked, unlike `min_length`). If genai still finishes early (the model
picked that id, or `max_length` was too small), the loop stops, `PeerResult.finished_early` is True
and `tokens` is shorter; callers should check it. Note: an array-valued overlay of eos_token_id is
merged with the folder's list in genai 0.18, hence the scalar.

Devices: `device="cpu"` clears the providers (genai's CPU default); `device="cuda"` appends the
"cuda" provider and, when `cuda_graph` is not None, sets its "enable_cuda_graph" option ("1"/"0").
genai's CUDA graphs need `past_present_share_buffer` (our gqa decoders); the model is checked to
really run on the requested device.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["GenaiModel", "PeerResult", "genai_available", "genai_greedy", "genai_version", "load_genai_model"]

_DEVICES = ("cpu", "cuda")


@dataclass
class PeerResult:
    """Greedy tokens from genai and host wall times (seconds, `time.perf_counter`)."""

    tokens: list[int]
    step_seconds: list[float]  # one per generate_next_token (+ get_next_tokens), len == len(tokens)
    ttft_seconds: float  # prompt call + first generate_next_token
    prefill_seconds: float = 0.0  # append_tokens / set_inputs alone
    finished_early: bool = False  # genai reported is_done() before max_new_tokens tokens
    device: str = "cpu"
    info: dict = field(default_factory=dict)  # max_length, eos handling, genai version, ...


@dataclass
class GenaiModel:
    """A loaded `og.Model` with what `genai_greedy` needs to drive it."""

    model: Any  # onnxruntime_genai.Model
    model_dir: Path
    genai_config: dict
    device: str
    cuda_graph: bool | None
    ignore_eos: bool
    view: Any = None  # the checked private folder genai loaded from (sessionpolicy.genai_view); kept alive


def genai_available() -> bool:
    """True when onnxruntime_genai imports."""
    try:
        import onnxruntime_genai  # noqa: F401
    except (ImportError, OSError):  # not installed, or its native library does not load
        return False
    return True


def _og():
    try:
        import onnxruntime_genai as og
    except ImportError as e:
        raise ImportError(f"onnxruntime-genai is not installed ({e}); install it with pip install \".[cpu]\" "
                          "(onnxruntime-genai) or \".[cuda]\" (onnxruntime-genai-cuda)") from None
    return og


def genai_version() -> str | None:
    try:
        import onnxruntime_genai as og
    except (ImportError, OSError):
        return None
    return getattr(og, "__version__", "unknown")


def load_genai_model(model_dir: str | Path, device: str = "cpu", cuda_graph: bool | None = None,
                     ignore_eos: bool = True) -> GenaiModel:
    """Load `model_dir` in genai on `device` (see the module docstring for `ignore_eos`).

    Load once and pass the model to `genai_greedy` repeatedly to keep loading out of timed runs.
    genai never sees `model_dir` itself: it loads a private copy of genai_config.json that passed
    `vlmdecode.sessionpolicy` (no custom ops library, no profiling paths, only named safe session
    options), with links to the folder's other files.
    """
    from .sessionpolicy import genai_view

    og = _og()

    if device not in _DEVICES:
        raise ValueError(f"device={device!r} is invalid: allowed: {', '.join(_DEVICES)}")
    if cuda_graph is not None and device != "cuda":
        raise ValueError("cuda_graph applies to device='cuda' only")
    model_dir = Path(model_dir)
    view, gcfg = genai_view(model_dir)
    config = og.Config(view.name)
    config.clear_providers()  # no provider: CPU
    if device == "cuda":
        config.append_provider("cuda")
        if cuda_graph is not None:
            config.set_provider_option("cuda", "enable_cuda_graph", "1" if cuda_graph else "0")
    if ignore_eos:
        # scalar: genai 0.18 replaces the eos list (an array would be merged into it)
        config.overlay(json.dumps({"model": {"eos_token_id": int(gcfg["model"]["vocab_size"]) - 1}}))
    model = og.Model(config)
    got = str(getattr(model, "device_type", device)).lower()
    if got != device:
        raise RuntimeError(f"onnxruntime-genai loaded {model_dir} on {got!r}, not on {device!r}")
    return GenaiModel(model, model_dir, gcfg, device, cuda_graph, ignore_eos, view)


def _vision_input_dtype(model_dir: Path, gcfg: dict) -> np.dtype:
    """dtype of the vision model's pixel_values input (genai does not convert what set_inputs gets)."""
    import onnx
    from onnx import helper

    vision = gcfg["model"]["vision"]
    m = onnx.load(str(model_dir / vision["filename"]), load_external_data=False)
    name = vision.get("inputs", {}).get("pixel_values", "pixel_values")
    for inp in m.graph.input:
        if inp.name == name:
            return np.dtype(helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type))
    raise ValueError(f"{vision['filename']} has no input {name!r}")


def genai_greedy(model_dir: str | Path | GenaiModel, input_ids: list[int] | np.ndarray, max_new_tokens: int,
                 pixel_values: np.ndarray | None = None, device: str = "cpu",
                 cuda_graph: bool | None = None, *, max_length: int | None = None,
                 ignore_eos: bool = True) -> PeerResult:
    """Greedy-decode `max_new_tokens` tokens after the prompt `input_ids` with onnxruntime-genai.

    model_dir: a genai folder, or a `GenaiModel` from `load_genai_model` (then device, cuda_graph and
        ignore_eos come from that model and the arguments here are ignored).
    input_ids: one prompt, [S] or [1, S]; with `pixel_values`, it holds the image soft tokens
        (`image_token_id` of genai_config.json) that the image features replace, n per image.
    pixel_values: [num_images, 3, H, W], already preprocessed; cast to the vision model's dtype.
        Needs a folder with a vision model (type gemma3). None: text only, which works on both the
        VLM folder and text/.
    max_length: genai's search max_length (prompt + generated, and the size of a shared KV buffer);
        default len(input_ids) + max_new_tokens. Must not exceed the folder's context_length.
    """
    og = _og()

    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1")
    if isinstance(model_dir, GenaiModel):
        loaded = model_dir
    elif isinstance(model_dir, (str, Path)):
        loaded = load_genai_model(model_dir, device=device, cuda_graph=cuda_graph, ignore_eos=ignore_eos)
    else:
        raise TypeError(f"model_dir must be a folder or a GenaiModel, not {type(model_dir).__name__}")
    model, gcfg = loaded.model, loaded.genai_config

    ids = np.asarray(input_ids, dtype=np.int64)
    if ids.ndim == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError(f"input_ids must be one non-empty prompt, [S] or [1, S]; got shape {ids.shape}")
    context = int(gcfg["model"].get("context_length", 0)) or None
    if max_length is None:
        max_length = ids.size + max_new_tokens
    if max_length < ids.size + max_new_tokens:
        raise ValueError(f"max_length={max_length} < prompt {ids.size} + max_new_tokens {max_new_tokens}")
    if context is not None and max_length > context:
        raise ValueError(f"max_length={max_length} exceeds the folder's context_length {context}")

    inputs = None
    if pixel_values is not None:
        if "vision" not in gcfg["model"]:
            raise ValueError(f"{loaded.model_dir} has no vision model: pixel_values cannot be used")
        px = np.ascontiguousarray(pixel_values, dtype=_vision_input_dtype(loaded.model_dir, gcfg))
        if px.ndim != 4:
            raise ValueError(f"pixel_values must be [num_images, 3, H, W]; got shape {px.shape}")
        n_soft = int((ids == int(gcfg["model"]["image_token_id"])).sum())
        if n_soft == 0 or n_soft % px.shape[0]:
            raise ValueError(f"input_ids hold {n_soft} image soft tokens: not a positive multiple of "
                             f"{px.shape[0]} images")
        inputs = og.NamedTensors()
        inputs["input_ids"] = ids.astype(np.int32)[None]  # genai's own processors emit int32
        inputs["pixel_values"] = px
        # genai sizes the vision output / embedding input from the sum of this tensor
        inputs["num_image_tokens"] = np.full((px.shape[0],), n_soft // px.shape[0], dtype=np.int64)

    params = og.GeneratorParams(model)
    params.set_search_options(max_length=int(max_length), do_sample=False, num_beams=1)
    generator = og.Generator(model, params)

    tokens: list[int] = []
    steps: list[float] = []
    clock = time.perf_counter
    t0 = clock()
    if inputs is not None:
        generator.set_inputs(inputs)
    else:
        generator.append_tokens(ids.astype(np.int32))
    prefill = clock() - t0
    finished_early = False
    for _ in range(max_new_tokens):
        if generator.is_done():
            finished_early = True
            break
        t = clock()
        generator.generate_next_token()
        tok = int(generator.get_next_tokens()[0])
        steps.append(clock() - t)
        tokens.append(tok)
    ttft = prefill + steps[0] if steps else float("nan")
    return PeerResult(
        tokens=tokens, step_seconds=steps, ttft_seconds=ttft, prefill_seconds=prefill,
        finished_early=finished_early or len(tokens) < max_new_tokens, device=loaded.device,
        info={"genai_version": genai_version(), "model_type": gcfg["model"].get("type"),
              "max_length": int(max_length), "ignore_eos": loaded.ignore_eos,
              "cuda_graph": loaded.cuda_graph, "prompt_length": int(ids.size),
              "num_images": 0 if pixel_values is None else int(pixel_values.shape[0])},
    )
