"""Time-to-first-token benchmark: by phase, ours and onnxruntime-genai's, text prompts and image prompts.

    run_ttft(presets, devices, modes, contexts, ...) -> DataFrame; writes OUT/TAG.csv + OUT/TAG.json
    run_folder(folder, device, modes, contexts, ...) -> rows of one model folder (scripts/ttft_phases.py)
    image_prompt_ids(n_image_tokens, text_tokens)   -> the ids of an image prompt (Gemma 3's image block)
    ttft_table(df)                                   -> TTFT by mode and the ratio to onnxruntime-genai

Scenarios per preset/layout/device: every mode on a text prompt of each `context` (profiling.prompt_ids)
and, where the folder has a vision model, on an image prompt: bos, <start_of_image>, n_image_tokens
soft tokens (256 for gemma3-1b, as Gemma 3), <end_of_image>, then `image_text_tokens` text tokens.
Both sides start from the same token ids and the same preprocessed pixel_values (no tokenizer, no
image processor on either side) and produce one token: ours `Pipeline.generate_from_ids(...,
pixel_values=...)` with its feature cache cleared first (vision runs every time, as in genai), genai
`peer.genai_greedy`. Ours reports `GenerationResult.ttft_breakdown` (CUDA events on CUDA); genai its
prompt call (vision + embedding + prefill, `prefill_ms`) and its first pick (`first_pick_ms`).

Method as in `bench`: all models load and warm up first, then `repeats` rounds each run every scenario
once (odd rounds reversed); medians over rounds; rows rewritten after every round. One KV capacity
for every mode and the peer (the longest prompt + 8). Not a timed test: targets are read off the files.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .prompt_path import PHASES

CUDA_MODES = ("eager", "graph", "device", "tokenid-graph", "native", "native-ort", "eager+native-prefill",
              "graph+native-prefill", "device+native-prefill", "tokenid-graph+native-prefill", "genai-eager",
              "genai-graph")
# native: the native decoder and its default, the native prefill (native.prefill); native-ort: the same decoder
# with onnxruntime's prefill; MODE+native-prefill: onnxruntime's MODE decoder with prefill="native"
NATIVE_PREFILL = "+native-prefill"
CPU_MODES = ("resident", "genai")
CONTEXTS = {"tiny": [128], "small": [256, 1024], "gemma3-1b": [1024]}
IMAGE_TEXT_TOKENS = 16


def image_prompt_ids(n_image_tokens: int, text_tokens: int = IMAGE_TEXT_TOKENS, seed: int = 0,
                     processor=None) -> np.ndarray:
    """[1, n_image_tokens + 3 + text_tokens] int64: bos, the image block (<start_of_image>, the soft tokens,
    <end_of_image>), then random byte-token ids. Special ids: the fixture's, or `processor`'s (a real folder)."""
    from .fixture.config import BOS_ID, END_OF_IMAGE_ID, IMAGE_TOKEN_ID, START_OF_IMAGE_ID
    from .profiling import prompt_ids

    bos, boi, img, eoi = BOS_ID, START_OF_IMAGE_ID, IMAGE_TOKEN_ID, END_OF_IMAGE_ID
    if processor is not None:
        tok, (boi_text, _, eoi_text) = processor.tokenizer, processor.image_tokens
        bos, img = processor.bos_token_id, processor.image_token_id
        boi, eoi = tok.token_to_id(boi_text), tok.token_to_id(eoi_text)
    text = prompt_ids(text_tokens + 1, seed)[0, 1:]
    return np.concatenate([np.array([bos, boi] + [img] * n_image_tokens + [eoi], np.int64), text])[None]


def _ours_once(pipe, ids, px):
    pipe.generate_from_ids(ids, max_new_tokens=1, pixel_values=px, stop=())  # warm-up: sessions, kernels, shapes

    def once() -> dict:
        pipe.prompt.features.clear()  # vision runs every time, as in onnxruntime-genai
        r = pipe.generate_from_ids(ids, max_new_tokens=1, pixel_values=px, stop=())
        return dict(ttft=r.ttft_seconds * 1e3, **{f"{k}_ms": v * 1e3 for k, v in r.ttft_breakdown.items()},
                    first_token=r.tokens[0])
    return once


def _genai_once(model, ids, px, capacity):
    from .peer import genai_greedy

    genai_greedy(model, ids, 1, pixel_values=px, max_length=capacity)

    def once() -> dict:
        r = genai_greedy(model, ids, 1, pixel_values=px, max_length=capacity)
        return dict(ttft=r.ttft_seconds * 1e3, prefill_ms=r.prefill_seconds * 1e3,
                    first_pick_ms=r.step_seconds[0] * 1e3, first_token=r.tokens[0])
    return once


def _summary(samples: list[dict]) -> dict:
    ttft = [s["ttft"] for s in samples]
    row = dict(ttft_ms=float(np.median(ttft)), spread=float((max(ttft) - min(ttft)) / np.median(ttft)),
               repeats=len(samples), first_token=samples[-1]["first_token"])
    for key in [f"{p}_ms" for p in PHASES]:
        if key in samples[0]:
            row[key] = float(np.median([s[key] for s in samples]))
    return row


def run_ttft(presets=("tiny",), devices=("cpu",), modes=None, contexts=None, repeats=5, image=True,
             image_text_tokens=IMAGE_TEXT_TOKENS, layouts=("unfused",), peer=True, out_dir="data/results",
             root=None, tag="ttft", log=print):
    """Every (mode, prompt) scenario of each preset, layout and device; one row each (module docstring)."""
    import pandas as pd

    from .bench import _write
    from .profiling import provenance

    rows, prov = [], provenance()
    prov["method"] = ("TTFT of one generated token from the same ids and pixel_values on both sides; ours with its "
                      "feature cache cleared each run; models warmed up first, then `repeats` interleaved rounds "
                      "(odd rounds reversed); medians over rounds")
    for device in devices:
        for name in presets:
            for layout in layouts:
                _run_one(name, layout, device, modes, contexts, repeats, image, image_text_tokens, peer, root,
                         rows, lambda: _write(out_dir, tag, rows, prov))
    _write(out_dir, tag, rows, prov)
    for row in rows:
        log(json.dumps(row, default=str))
    return pd.DataFrame(rows)


def _run_one(name, layout, device, modes, contexts, repeats, image, image_text_tokens, peer, root, rows, write):
    from .devices import parse_device
    from .fixture.cache import ensure_fixture

    dev = parse_device(device)
    if layout == "fused-cuda" and not dev.is_cuda:
        return  # onnxruntime's CPU GroupQueryAttention has no q/k-norm inputs
    dtype = "fp16" if dev.is_cuda else "fp32"
    folder_dir = ensure_fixture(name, "gqa", dtype, None if root is None else Path(root), layout=layout)
    run_folder(folder_dir, dev, modes, contexts or CONTEXTS.get(name, [128]), repeats, image, image_text_tokens,
               peer, dict(preset=name, layout=layout, dtype=dtype), rows, write)


def run_folder(folder_dir, device, modes, contexts, repeats, image=True, image_text_tokens=IMAGE_TEXT_TOKENS,
               peer=True, base=None, rows=None, write=lambda: None) -> list:
    """The scenarios of one model folder (a fixture or any folder genai and vlmdecode load) on one device,
    appended to `rows` (returned); `write()` after every round. The image prompt needs processor_config.json."""
    import vlmdecode

    from .devices import parse_device
    from .modelfolder import ModelFolder
    from .processor import Processor, demo_image
    from .profiling import prompt_ids

    dev, folder_dir = parse_device(device), Path(folder_dir)
    rows = [] if rows is None else rows
    prompts = [("text", prompt_ids(c)) for c in contexts]
    px, folder = None, ModelFolder.load(folder_dir)
    if image and folder.vision is not None:
        proc = Processor.load(folder_dir, folder)
        px = proc.preprocess([demo_image(proc.spec.height)], dtype=np.dtype(folder.info.dtype))
        prompts.append(("image", image_prompt_ids(proc.tokens_per_image, image_text_tokens, processor=proc)))
    capacity = max(ids.shape[1] for _, ids in prompts) + 8
    want = [m for m in (modes or (CUDA_MODES if dev.is_cuda else CPU_MODES)) if peer or not m.startswith("genai")]
    loaded, scenarios = {}, []
    for mode in want:
        for kind, ids in prompts:
            if kind == "image" and mode.startswith("tokenid-graph"):
                continue  # a text model
            row0 = dict(**(base or {}), device=str(dev), mode=mode, prompt=kind, prompt_tokens=int(ids.shape[1]),
                        kv_capacity=capacity)
            try:
                once, error = _once(vlmdecode, folder_dir, dev, mode, loaded, capacity, ids,
                                    px if kind == "image" else None), None
            except Exception as e:  # noqa: BLE001 - a failed scenario is reported in its row, not fatal
                once, error = None, f"{type(e).__name__}: {e}"[:300]
            scenarios.append(dict(base=row0, once=once, error=error, samples=[]))
    first = len(rows)
    for r in range(repeats):
        for sc in scenarios if r % 2 == 0 else scenarios[::-1]:
            if sc["error"] is None:
                try:
                    sc["samples"].append(sc["once"]())
                except Exception as e:  # noqa: BLE001
                    sc["error"] = f"{type(e).__name__}: {e}"[:300]
        rows[first:] = [dict(**(_summary(sc["samples"]) if sc["samples"] and sc["error"] is None
                                else dict(error=sc["error"])), **sc["base"]) for sc in scenarios]
        write()
    loaded.clear()
    return rows


def _once(vlmdecode, folder_dir, dev, mode, loaded, capacity, ids, px):
    if mode.startswith("genai"):
        from .peer import load_genai_model

        if mode not in loaded:
            loaded[mode] = load_genai_model(folder_dir, dev.kind, cuda_graph=(mode == "genai-graph")
                                            if dev.is_cuda else None)
        return _genai_once(loaded[mode], ids, px, capacity)
    if mode not in loaded:
        base, native_prefill = mode.removesuffix(NATIVE_PREFILL), mode.endswith(NATIVE_PREFILL)
        kw = dict(prefill="native") if native_prefill else {}
        if base == "tokenid-graph":
            loaded[mode] = vlmdecode.load(folder_dir / "text", str(dev), "graph", max_length=capacity, **kw)
        elif mode == "native-ort":
            loaded[mode] = vlmdecode.load(folder_dir, str(dev), "native", max_length=capacity, prefill="onnxruntime")
        elif native_prefill:
            loaded[mode] = vlmdecode.load(folder_dir, str(dev), base, max_length=capacity, **kw)
        else:
            loaded[mode] = vlmdecode.load(folder_dir, str(dev), None if mode == "resident" else mode,
                                          max_length=capacity)
    return _ours_once(loaded[mode], ids, px)


def ttft_table(df, peer: str = "genai-graph"):
    """TTFT (ms) per (preset, layout, prompt) and mode, and each mode's ratio to `peer` in the same run
    (CPU rows: to "genai" when `peer` is absent)."""
    import pandas as pd

    if not len(df) or "ttft_ms" not in df:
        return pd.DataFrame()
    d = df[df["ttft_ms"].notna()]
    t = d.pivot_table(index=["preset", "layout", "device", "prompt", "prompt_tokens"], columns="mode",
                      values="ttft_ms")
    for ref in (peer, "genai"):
        if ref in t:
            for m in [c for c in t.columns if not str(c).startswith("genai") and not str(c).endswith("/genai")]:
                t[f"{m}/{ref}"] = t[m] / t[ref]
            break
    return t
