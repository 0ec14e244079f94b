"""Greedy tokens from onnxruntime-genai on one folder, printed as JSON on stdout.

Run with the Python that has the onnxruntime-genai version to record (e.g. the package venv's 0.18.0):

    python genai_run.py FOLDER [--ids 2,5,...] --steps 200 [--image PNG --prompt TEXT]

Text folders: the prompt ids are appended as given (default: `prompt.input_ids` of
FOLDER/expected.json). The execution provider is the one genai_config.json names (cuda for the
-e cuda exports). VLM folders (--image): onnxruntime-genai's own multimodal processor builds
input_ids and pixel_values from --prompt (which must contain <start_of_image>) and the image; its
input_ids and pixel_values shape/sum are printed too (--save-pixel-values writes the array).
Greedy: do_sample=False, top_k=1; min_length is not set, so the run stops early only at an eos id
(reported as stopped_at_eos).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import onnxruntime_genai as og


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--ids", default="")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--image")
    ap.add_argument("--prompt")
    ap.add_argument("--save-pixel-values", help="write genai's pixel_values (float32 .npy) here")
    a = ap.parse_args()
    model = og.Model(a.folder)
    params = og.GeneratorParams(model)
    out: dict = {"onnxruntime_genai": og.__version__}
    if a.image:
        processor = model.create_multimodal_processor()
        inputs = processor(a.prompt, images=og.Images.open(a.image))
        ids = inputs["input_ids"].as_numpy().reshape(-1).tolist()
        out["input_ids"] = ids
        pv = inputs["pixel_values"].as_numpy()
        out["pixel_values_shape"] = list(pv.shape)
        out["pixel_values_sum"] = float(pv.astype(np.float64).sum())
        if a.save_pixel_values:
            np.save(a.save_pixel_values, pv.astype(np.float32))
        params.set_search_options(do_sample=False, top_k=1, max_length=len(ids) + a.steps)
        gen = og.Generator(model, params)
        gen.set_inputs(inputs)
    else:
        if a.ids:
            ids = [int(t) for t in a.ids.split(",")]
        else:
            with open(f"{a.folder}/expected.json") as f:
                ids = json.load(f)["prompt"]["input_ids"]
        params.set_search_options(do_sample=False, top_k=1, max_length=len(ids) + a.steps)
        gen = og.Generator(model, params)
        gen.append_tokens(np.asarray([ids], dtype=np.int32))
    tokens = []
    while not gen.is_done() and len(tokens) < a.steps:
        gen.generate_next_token()
        tokens.append(int(gen.get_next_tokens()[0]))
    out["tokens"] = tokens
    out["stopped_at_eos"] = len(tokens) < a.steps
    print(json.dumps(out))


if __name__ == "__main__":
    main()
