"""H200: the captured gemma3-1b (fused-cuda) decode step under onnxruntime's GQA kernel switches.

onnxruntime picks GroupQueryAttention's CUDA decode kernel itself (XQA, flash, memory-efficient);
the switches are process-wide environment variables, so each setting runs in its own process.
Device time of one captured step (replays back to back, no host work) at context 1024, with KV
capacity (max_length) 1088 and the folder's 8192.  Usage: python3 scripts/h200_attention_env.py OUT.json
"""

import json
import os
import subprocess
import sys
from pathlib import Path

SETTINGS = {"default": {}, "xqa_off": {"ORT_ENABLE_XQA": "0"},
            "xqa_off_flash_off": {"ORT_ENABLE_XQA": "0", "ORT_DISABLE_FLASH_ATTENTION": "1"}}
CONTEXT = 1024


def measure() -> dict:
    import vlmdecode
    from vlmdecode.decoders.cuda import CudaDecoder, replay_ms
    from vlmdecode.fixture.cache import ensure_fixture
    from vlmdecode.profiling import prompt_ids

    d = ensure_fixture("gemma3-1b", "gqa", "fp16", layout="fused-cuda")
    p = vlmdecode.load(d, "cuda", "eager", max_length=CONTEXT + 64)
    x = p.embed(prompt_ids(CONTEXT), None)
    out = {}
    for cap in (CONTEXT + 64, None):
        dec = CudaDecoder(p.folder, "cuda", "graph", max_length=cap)
        out[f"graph_step_device_ms_capacity_{dec.max_length}"] = replay_ms(dec, x)
        del dec
    return out


if __name__ == "__main__":
    if sys.argv[1:] == ["--measure"]:
        print(json.dumps(measure()))
        sys.exit(0)
    from vlmdecode.profiling import provenance

    rows = {}
    for name, env in SETTINGS.items():
        r = subprocess.run([sys.executable, __file__, "--measure"], env={**os.environ, **env},
                           capture_output=True, text=True)
        rows[name] = {"env": env, **(json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0
                                     else {"error": r.stderr[-600:]})}
        print(name, json.dumps(rows[name]), flush=True)
    Path(sys.argv[1]).write_text(json.dumps({"provenance": provenance(), "context": CONTEXT, "rows": rows},
                                            indent=2) + "\n")
