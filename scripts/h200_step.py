"""H200: device time of one gemma3-1b fused-cuda decode step at the bench's KV capacity. Writes argv[1].

Graph mode (replays back to back) and eager, five measurements of `replay_ms` each (200 runs of the
bound step after a 1024-token prompt, CUDA events, no host work between runs), capacity 1088.
Made in the same call as h200_kernels_warm.json (scripts/h200.sh kernels-warm), so the per-kernel
times there compare with this step time.
"""

import json
import sys

import numpy as np

from vlmdecode.decoders.cuda import CudaDecoder, replay_ms
from vlmdecode.fixture.cache import ensure_fixture
from vlmdecode.modelfolder import ModelFolder
from vlmdecode.profiling import provenance

folder = ModelFolder.load(ensure_fixture("gemma3-1b", "gqa", "fp16", layout="fused-cuda"))
H = folder.info.hidden_size
x = (np.random.default_rng(0).standard_normal((1, 1024, H)) * 0.03).astype(np.float16)
out = {"provenance": provenance(), "layout": "fused-cuda", "context": 1024, "kv_capacity": 1088}
for mode in ("graph", "eager"):
    dec = CudaDecoder(folder, "cuda", mode, max_length=1088)
    out[f"{mode}_step_device_ms"] = [replay_ms(dec, x) for _ in range(5)]
    print(mode, out[f"{mode}_step_device_ms"], flush=True)
    del dec
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=2, default=str)
