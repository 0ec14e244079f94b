"""Time to first token by phase for one model folder: vlmdecode's modes beside onnxruntime-genai's.

    python scripts/ttft_phases.py --model DIR --device cuda [--modes eager graph device genai-graph]
        [--contexts 1024] [--repeats 10] [--no-image] [--out data/results --tag h200_ttft_phases]

Text prompts of each context and, when the folder has a vision model, an image prompt (the folder's
soft tokens per image + 16 text tokens); one generated token, the same ids and pixel_values on both
sides (vlmdecode.ttft.run_folder). Prints one row per (mode, prompt) in milliseconds; with --out also
writes TAG.csv/TAG.json with provenance.
"""

from __future__ import annotations

import argparse

import pandas as pd

from vlmdecode.bench import _write
from vlmdecode.profiling import provenance
from vlmdecode.ttft import PHASES, run_folder


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--modes", nargs="+", default=None, help="default: every TTFT mode of the device (vlmdecode.ttft)")
    p.add_argument("--contexts", nargs="+", type=int, default=[1024])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--no-image", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--tag", default="ttft_phases")
    a = p.parse_args(argv)
    rows = run_folder(a.model, a.device, a.modes, a.contexts, a.repeats, image=not a.no_image,
                      base=dict(model=str(a.model)))
    if a.out:
        _write(a.out, a.tag, rows, provenance())
    df = pd.DataFrame(rows)
    cols = ["mode", "prompt", "prompt_tokens", "ttft_ms"] + [f"{ph}_ms" for ph in PHASES if f"{ph}_ms" in df]
    cols += [c for c in ("spread", "first_token", "error") if c in df]
    with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
        print(df[cols].to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
