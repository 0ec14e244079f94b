"""Test helper: what a folder of tests/data/exported/ must decode to, from its expected.json.

Cases per folder (the exporters' expected.json, see tests/data/exported/README.md):
  text folders  prompt.messages[0].content, ids = prompt.input_ids, tokens = onnxruntime-genai CPU's
                greedy tokens where it ran (int4: they differ from HF's by quantization; genai stopped at
                eos), else onnxruntime-genai CUDA's (the -cuda exports, run on an H200: fp16's equal
                HF's for all 200 steps, int4's differ from step 0), else transformers float32 greedy
                (hf_float32_greedy)
  VLM folder    per image: the text item, that image, ids = HF Gemma3Processor's input_ids, tokens =
                onnxruntime-genai CPU's (it resizes as processor_config.json says, CUBIC, as vlmdecode
                does; HF's processor follows preprocessor_config.json, BILINEAR, which changes the
                57x41 image's pixels and its tokens from step 30)
Greedy (the folders' search says do_sample true: the test asks for do_sample=False, as the expectations
were made). Stop at eos exactly when the expectation did.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parent / "data" / "exported"


@dataclass(frozen=True)
class Case:
    folder: Path
    prompt: str
    image: Path | None
    ids: list
    tokens: list
    stopped_at_eos: bool
    source: str  # which expectation


def folders(cuda: bool) -> list[Path]:
    """The exported folders with an expected.json; CUDA-only exports (name ends in -cuda) or the others."""
    if not ROOT.is_dir():
        return []
    return [d for d in sorted(ROOT.iterdir()) if (d / "expected.json").is_file() and d.name.endswith("-cuda") == cuda]


def _pick(block: dict, hf: dict) -> tuple[list, bool, str]:
    for key in ("onnxruntime_genai_cpu_greedy", "onnxruntime_genai_cuda_greedy"):
        genai = block.get(key, {})
        if "tokens" in genai:
            return genai["tokens"], bool(genai.get("stopped_at_eos")), key
    return hf["tokens"], False, next(k for k, v in block.items() if v is hf)


def cases(folder: Path) -> list[Case]:
    e = json.loads((folder / "expected.json").read_text())
    if "images" in e:
        text = next(c["text"] for c in e["messages"][0]["content"] if c["type"] == "text")
        out = []
        for name, im in e["images"].items():
            tokens, eos, src = _pick(im, im["hf_float32_greedy_causal"])
            out.append(Case(folder, text, folder / name, im["hf_processor"]["input_ids"], tokens, eos, src))
        return out
    tokens, eos, src = _pick(e, e["hf_float32_greedy"])
    return [Case(folder, e["prompt"]["messages"][0]["content"], None, e["prompt"]["input_ids"], tokens, eos, src)]


def decode(pipe, case: Case, **kw) -> list:
    """Greedy tokens of `pipe` for the case, as many as expected (stopping at eos iff the expectation did)."""
    n = len(case.tokens)
    return pipe.generate(case.prompt, image=case.image, max_new_tokens=n, do_sample=False,
                         stop=None if case.stopped_at_eos else (), **kw).tokens
