"""H200 profile: what holds decode back, by decoder layout. Writes $OUT/h200_profile_layouts.json.

For tiny@128 and gemma3-1b@1024 and each layout (unfused, fused, fused-cuda):
  - device time of one decode step with no host work (replays back to back; eager launches too),
    the token-id decoder's captured step, onnxruntime nodes per step by op type, the bandwidth floor;
  - gemma3-1b only, "gemv": the same weight matrices as the fused layout's MatMuls (per layer packed
    QKV [H, q+2kv], o [q, H], packed gate|up [H, 2I], down [I, H]; then the LM head [H, V]) as
    independent M=1 fp16 MatMuls in one captured graph: the time onnxruntime's MatMul kernels need
    just to stream the weights, i.e. the best a decoder built from these kernels could do.
"""

import json
import os
import tempfile
from pathlib import Path

import cupy
import numpy as np
import onnxruntime

import vlmdecode
from vlmdecode.bench import copy_bandwidth, nodes_per_step
from vlmdecode.costmodel import decoder_weight_bytes, kv_read_bytes
from vlmdecode.decoders.cuda import CudaDecoder, replay_ms
from vlmdecode.fixture import load_fixture_config
from vlmdecode.fixture.cache import ensure_fixture
from vlmdecode.profiling import prompt_ids, provenance
from vlmdecode.sessions import make_session

LAYOUTS = ("unfused", "fused", "fused-cuda")


def gemv_model(cfg, path: Path) -> int:
    """Write the independent-MatMul model; returns its weight bytes."""
    import onnx

    from vlmdecode.fixture.onnxgraph import Graph

    g, rng, H, outs = Graph("gemv"), np.random.default_rng(0), cfg.hidden_size, []
    xs = {n: g.input(f"x{n}", np.float16, [1, 1, n]) for n in {H, cfg.q_size, cfg.intermediate_size}}
    shapes = [(H, cfg.q_size + 2 * cfg.kv_size), (cfg.q_size, H), (H, 2 * cfg.intermediate_size),
              (cfg.intermediate_size, H)] * cfg.num_layers + [(H, cfg.vocab_size)]
    for i, (k, n) in enumerate(shapes):
        w = (rng.standard_normal((k, n), dtype=np.float32) * k ** -0.5).astype(np.float16)
        outs.append(g.op("MatMul", [xs[k], g.init(f"w{i}", w)]))
    for i, (o, (_, n)) in enumerate(zip(outs, shapes)):
        g.output(o, f"y{i}", np.float16, [1, 1, n])
    onnx.save_model(g.model(), str(path), save_as_external_data=True, location=path.name + ".data")
    return sum(2 * k * n for k, n in shapes)


def gemv_ms(cfg, n: int = 200) -> dict:
    tmp = Path(tempfile.mkdtemp()) / "gemv.onnx"
    nbytes = gemv_model(cfg, tmp)
    stream = cupy.cuda.Stream(non_blocking=True)
    sess = make_session(tmp, "cuda", cuda_graph=True, stream_ptr=int(stream.ptr))
    io, keep = sess.io_binding(), []
    with stream:
        for i in sess.get_inputs():
            a = cupy.full([1, 1, i.shape[-1]], 0.01, cupy.float16)
            keep.append(a)
            io.bind_input(i.name, "cuda", 0, np.float16, a.shape, a.data.ptr)
        for o in sess.get_outputs():
            y = cupy.empty(o.shape, cupy.float16)
            keep.append(y)
            io.bind_output(o.name, "cuda", 0, np.float16, y.shape, y.data.ptr)
        ro = onnxruntime.RunOptions()
        ro.add_run_config_entry("gpu_graph_id", "1")
        for _ in range(4):  # 2 warm-up runs, capture, one replay
            sess.run_with_iobinding(io, ro)
        ro.add_run_config_entry("disable_synchronize_execution_providers", "1")
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(n):
            sess.run_with_iobinding(io, ro)
        end.record()
        end.synchronize()
    ms = cupy.cuda.get_elapsed_time(start, end) / n
    return {"matmuls": 4 * cfg.num_layers + 1, "weight_bytes": nbytes, "replay_ms": ms,
            "achieved_GBps": nbytes / ms / 1e6}


out = {"provenance": provenance()}
bw = copy_bandwidth()
out["copy_bandwidth_GBps"] = bw / 1e9
for name, ctx in (("tiny", 128), ("gemma3-1b", 1024)):
    res = {"context": ctx}
    for layout in LAYOUTS:
        d = ensure_fixture(name, "gqa", "fp16", layout=layout)
        p = vlmdecode.load(d, "cuda", "eager")
        ids = prompt_ids(ctx)
        x = p.embed(ids, None)
        r = {}
        for mode in ("eager", "graph"):
            r[f"{mode}_step_device_ms"] = replay_ms(CudaDecoder(p.folder, "cuda", mode), x)
        # the KV capacity (max_length) sets GQA's total_sequence_length: the same step at capacity ctx + 64
        small = CudaDecoder(p.folder, "cuda", "graph", max_length=ctx + 64)
        r[f"graph_step_device_ms_capacity_{ctx + 64}"] = replay_ms(small, x)
        r["capacity_default"] = p.decoder.max_length
        del small
        tid = vlmdecode.load(Path(d) / "text", "cuda", "graph")
        r["tokenid_graph_step_device_ms"] = replay_ms(tid.decoder, ids)
        r["floor_ms"] = (decoder_weight_bytes(p.folder) + kv_read_bytes(p.folder, ctx)) / bw * 1e3
        r["ops"] = nodes_per_step(p.folder, "cuda", by="op")
        r["nodes_per_step"] = sum(v["per_step"] for v in r["ops"].values())
        res[layout] = r
        print(name, layout, json.dumps({k: v for k, v in r.items() if k != "ops"}), flush=True)
        del p, tid
    if name == "gemma3-1b":
        res["gemv"] = gemv_ms(load_fixture_config(d))
        print(name, "gemv", json.dumps(res["gemv"]), flush=True)
    out[name] = res
Path(os.environ.get("OUT", "."), "h200_profile_layouts.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
