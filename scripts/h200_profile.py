"""H200 profile: what holds decode back. Device time per step with no host work (replays back to back),
onnxruntime nodes per step by op type, the bandwidth floor, device mode with k-step queueing, and
device memory per generation for each graph-id policy. Writes $OUT/h200_profile.json."""

import json
import os
from pathlib import Path

import cupy
import numpy as np

import vlmdecode
from vlmdecode.bench import copy_bandwidth, decoder_weight_bytes, kv_read_bytes, nodes_per_step, time_pipeline
from vlmdecode.cli import ensure_fixture
from vlmdecode.decoders.cuda import CudaDecoder, replay_ms
from vlmdecode.processor import demo_image
from vlmdecode.profiling import prompt_ids, provenance

out = {"provenance": provenance()}
bw = copy_bandwidth()
out["copy_bandwidth_GBps"] = bw / 1e9


def device_pipe(d, **kw):
    return vlmdecode.load(d, "cuda", "device", **kw)


for name, ctx in (("tiny", 128), ("gemma3-1b", 1024)):
    d = ensure_fixture(name, "gqa", "fp16")
    p = vlmdecode.load(d, "cuda", "eager")
    ids = prompt_ids(ctx)
    x, sx = p.embed(ids, None), p.token_input(42)
    res = {"context": ctx}
    for mode in ("eager", "graph"):
        res[f"{mode}_step_device_ms"] = replay_ms(CudaDecoder(p.folder, "cuda", mode), x, sx)
    tid = vlmdecode.load(Path(d) / "text", "cuda", "graph")
    res["tokenid_graph_step_device_ms"] = replay_ms(tid.decoder, ids, np.array([[42]], np.int64))
    res["floor_ms"] = (decoder_weight_bytes(p.folder) + kv_read_bytes(p.folder, ctx)) / bw * 1e3
    res["ops"] = nodes_per_step(p.folder, "cuda", by_op=True)
    res["nodes_per_step"] = sum(v["per_step"] for v in res["ops"].values())
    for k in (1, 4):
        res[f"device_sync_every_{k}"] = time_pipeline(device_pipe(d, sync_every=k), ctx, 64, 3, 8)
    res["device_one_graph"] = time_pipeline(device_pipe(d, graph_per_generation=False), ctx, 64, 3, 8)
    out[name] = res
    print(name, json.dumps({k: v for k, v in res.items() if k != "ops"}, default=str)[:1500], flush=True)

# device memory per generation, by mode and graph-id policy (tiny, 8 tokens a generation)
d = ensure_fixture("tiny", "gqa", "fp16")
img, pool, mem = demo_image(32), cupy.get_default_memory_pool(), {}
for label, make in {
    "eager": lambda: vlmdecode.load(d, "cuda", "eager"),
    "graph_fresh_id": lambda: vlmdecode.load(d, "cuda", "graph"),
    "device_fresh_id": lambda: vlmdecode.load(d, "cuda", "device"),
    "device_one_graph": lambda: device_pipe(d, graph_per_generation=False),
}.items():
    pipe, free = make(), []
    for n in range(1, 111):
        pipe.generate("Describe the image.", image=img, max_new_tokens=8, stop=())
        if n in (10, 110):
            pool.free_all_blocks()
            free.append(cupy.cuda.runtime.memGetInfo()[0])
    mem[label] = {"MiB_per_generation": (free[0] - free[1]) / 2**20 / 100, "counters": pipe.decoder.counters()}
    print(label, mem[label], flush=True)
    del pipe
out["memory"] = mem
Path(os.environ.get("OUT", "."), "h200_profile.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
