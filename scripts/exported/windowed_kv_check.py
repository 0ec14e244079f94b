"""How plain onnxruntime (CPU) must drive the builder's windowed-KV decoder, measured on the committed folders.

For each (folder, local-layer KV capacity, global capacity) it runs greedy decoding with fixed-capacity
KV buffers fed back each step (present -> past) and a static attention_mask [1, global capacity] whose
first n entries are 1, then compares the tokens with the folder's transformers float32 tokens. It also
tries the growing-KV protocol (past starts at length 0, grows by the step). Writes
tests/data/exported/windowed_kv_check.json. Needs only numpy + onnxruntime (the package venv):

    python scripts/exported/windowed_kv_check.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent.parent / "tests" / "data" / "exported"
STEPS = 150
CASES = [("builder-text-fp32", c, 256) for c in (8, 12, 13, 64, 256)] + [("builder-text-fp32-fullkv", 256, 256),
                                                                        ("builder-text-fp32-fullkv", 12, 256)]


def layer_count(sess) -> int:
    return sum(1 for i in sess.get_inputs() if i.name.endswith(".key"))


def fixed(folder: str, cap_local: int, cap: int, ids: list[int]) -> list[int]:
    sess = ort.InferenceSession(str(ROOT / folder / "model.onnx"), providers=["CPUExecutionProvider"])
    cfg = json.loads((ROOT / folder / "genai_config.json").read_text())
    local = set(cfg["model"]["decoder"].get("sliding_window", {}).get("layers", range(5)))
    outs = [o.name for o in sess.get_outputs()]
    kv = {f"{i}.{k}": np.zeros((1, 1, cap_local if i in local else cap, 16), np.float32)
          for i in range(layer_count(sess)) for k in ("key", "value")}
    mask = np.zeros((1, cap), np.int64)
    mask[0, : len(ids)] = 1
    step_ids, n, toks = ids, len(ids), []
    for _ in range(STEPS):
        feed = {"input_ids": np.array([step_ids], np.int64), "attention_mask": mask}
        feed.update({f"past_key_values.{name}": v for name, v in kv.items()})
        r = dict(zip(outs, sess.run(None, feed)))
        kv = {name: r[f"present.{name}"] for name in kv}
        toks.append(int(r["logits"][0, -1].argmax()))
        mask = mask.copy()
        mask[0, n] = 1
        n += 1
        step_ids = [toks[-1]]
    return toks


def growing(folder: str, ids: list[int]) -> list[int]:
    sess = ort.InferenceSession(str(ROOT / folder / "model.onnx"), providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    kv = {f"{i}.{k}": np.zeros((1, 1, 0, 16), np.float32) for i in range(layer_count(sess)) for k in ("key", "value")}
    step_ids, n, toks = ids, len(ids), []
    for _ in range(STEPS):
        feed = {"input_ids": np.array([step_ids], np.int64), "attention_mask": np.ones((1, n), np.int64)}
        feed.update({f"past_key_values.{name}": v for name, v in kv.items()})
        r = dict(zip(outs, sess.run(None, feed)))
        kv = {name: r[f"present.{name}"] for name in kv}
        toks.append(int(r["logits"][0, -1].argmax()))
        n += 1
        step_ids = [toks[-1]]
    return toks


def verdict(fn, ref: list[int]) -> str:
    try:
        toks = fn()
    except Exception as e:  # the refusal message is the finding
        return "refused: " + str(e).split("Status Message: ")[-1].strip()
    d = next((i for i, (a, b) in enumerate(zip(toks, ref)) if a != b), None)
    return f"equal to transformers for {STEPS} steps" if d is None else f"differs from step {d}"


def main() -> None:
    exp = json.loads((ROOT / "builder-text-fp32" / "expected.json").read_text())
    ids, ref = exp["prompt"]["input_ids"], exp["hf_float32_greedy"]["tokens"]
    rows = [{"folder": f, "protocol": "fixed buffers, static mask [1, global capacity]", "local_capacity": c,
             "global_capacity": g, "result": verdict(lambda f=f, c=c, g=g: fixed(f, c, g, ids), ref)}
            for f, c, g in CASES]
    rows += [{"folder": f, "protocol": "growing KV (past length 0 at prefill, mask [1, n])",
              "result": verdict(lambda f=f: growing(f, ids), ref)}
             for f in ("builder-text-fp32", "builder-text-fp32-fullkv")]
    out = {"onnxruntime": ort.__version__, "prompt_ids": len(ids), "steps": STEPS, "window": 12, "cases": rows}
    (ROOT / "windowed_kv_check.json").write_text(json.dumps(out, indent=1) + "\n")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
