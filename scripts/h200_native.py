"""H200: the native decoder checked and timed in one call (< 8 minutes). Writes $OUT/h200_native.json.

    (a) kernels vs numpy: the kernel tests of tests/test_native_cuda.py at gemma3-1b's head dim (pytest, in a
        subprocess; `scripts/h200.sh native-tests` runs the whole file)
    (b) tokens of native vs onnxruntime CUDA eager over 200 steps (tiny: three fp16 layouts; gemma3-1b
        fp16 fused-cuda): onnxruntime is run teacher-forced along native's tokens, so the first step
        where its argmax differs is the first divergence; recorded there: the fp16 logit error so far and
        the top-1/top-2 margins of onnxruntime's logits, native's and (tiny) the float64 reference's
    (c) gemma3-1b fused-cuda, context 1024, KV capacity 1072: native per token (greedy graph replays,
        CUDA events) and the replayed step without advance; device, graph, native (its default loop,
        lookahead) and native's plain loop per token through the pipeline (bench.pipeline_once, interleaved rounds);
        per-kernel times of an uncaptured step (CUDA events) with bytes and TB/s; the copy bandwidth of this
        run and the floor (weight + KV bytes / copy bandwidth); tiny: native vs device per token
    (d) each kernel class alone at gemma3-1b's shapes with several block shapes (weights rotated past the
        L2, graph replays); then (c) again with the fastest shapes (tokens re-checked over 64 steps)
    (e) gemma3-1b at context 4096 (KV capacity 4144): (c)'s native / device / graph timing (#16: native <= 0.80 ms)
    (f) gemma3-1b device memory over 200 generations with an image (CuPy pool + cudaMemGetInfo): flat
Each part runs in try/except (its error recorded, the rest goes on). Prints a short table last.
Usage: OUT=/tmp/out python3 scripts/h200_native.py [--skip-1b]        (a)-(d)
       OUT=/tmp/out python3 scripts/h200_native.py --parts timing_gemma3_1b_ctx4096,memory_gemma3_1b   (those only;
       the names: PARTS)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(os.environ.get("OUT", "/tmp/out"))
STEPS, CONTEXT, CAPACITY, PROMPT = 200, 1024, 1072, "Describe the image."
T0 = time.time()
results: dict = {"command": " ".join(sys.argv), "errors": {}}


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def part(name):
    def wrap(fn):
        def run(*a, **kw):
            log(f"--- {name}")
            try:
                results[name] = fn(*a, **kw)
            except Exception:  # noqa: BLE001 - a failing part is recorded, the others still run
                results["errors"][name] = traceback.format_exc()
                log(f"{name} FAILED:\n{results['errors'][name]}")
            save()
        return run
    return wrap


def save():
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "h200_native.json").write_text(json.dumps(results, indent=2, default=str))


def fixture(name, layout, dtype="fp16"):
    try:
        from vlmdecode.fixture.cache import ensure_fixture
    except ImportError:
        from vlmdecode.cli import ensure_fixture
    return ensure_fixture(name, "gqa", dtype, layout=layout)


@part("provenance")
def provenance():
    import cupy

    from vlmdecode.profiling import provenance as prov

    p = prov()
    p["cupy"] = cupy.__version__
    p["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
    p["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    p["gpu"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    return p


@part("kernel_tests")
def kernel_tests():
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "tests/test_native_cuda.py", "-q", "-p", "no:cacheprovider",
           "-o", "addopts=", "-k", "gemv or head or advance or (attention and 256)"]  # the full file: native-tests
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=200)
    tail = (r.stdout + r.stderr).strip().splitlines()
    log("\n".join(tail[-15:]))
    return {"returncode": r.returncode, "summary": tail[-1] if tail else "", "tail": tail[-40:]}


def parity(pipe, x, steps, reference=None, ids=None, feats=None):
    """Native greedy tokens vs onnxruntime eager (the native decoder's own prefill session) teacher-forced."""
    from vlmdecode.sampling import Sampler, SamplingParams

    dec = pipe.decoder
    toks, nlog = [], []
    image_token = getattr(dec.folder, "image_token_id", None)  # not embeddable without image features: never picked
    params = SamplingParams(suppress=() if image_token is None else (int(image_token),))
    with dec.loop_order(lookahead=False):  # the logits buffer read per token: the plain loop
        for tok in dec.generate(x, steps, Sampler(params)):
            toks.append(tok)
            nlog.append(dec.logits.get().astype(np.float64) if len(toks) > 1 else None)
    ortd = dec.ort
    ortd.begin_generation()
    try:
        olog = [ortd.prefill(x).astype(np.float64)]
        for tok in toks[:-1]:
            olog.append(ortd.step(pipe.token_input(tok)).astype(np.float64))
    finally:
        ortd.end_generation()
    rlog = None
    if reference is not None:  # float64, teacher-forced along native's tokens
        cache = reference.new_cache()
        rlog = [reference.decode(reference.embed(ids, feats), cache)[0, -1]]
        for tok in toks[:-1]:
            rlog.append(reference.decode(reference.embed(np.array([[tok]]), None), cache)[0, -1])
    off = np.isin(np.arange(olog[0].shape[-1]), params.suppress)  # suppressed ids: out of every argmax and margin
    gap = lambda v: float(np.diff(np.sort(v[~off])[-2:])[0])  # noqa: E731
    pick = lambda v: int(np.argmax(np.where(off, -np.inf, v)))  # noqa: E731
    errs = [float(np.abs(n - o).max()) for n, o in zip(nlog[1:], olog[1:])]
    div = next((i for i in range(steps) if toks[i] != pick(olog[i])), None)
    out = {"steps": steps, "first_divergence": div, "max_logit_err_vs_ort": max(errs),
           "median_logit_err_vs_ort": float(np.median(errs)), "first_tokens": toks[:16]}
    if rlog is not None:
        rerr = [float(np.abs(n - r).max()) for n, r in zip(nlog[1:], rlog[1:])]
        out["max_logit_err_vs_float64"] = max(rerr)
        out["ort_max_logit_err_vs_float64"] = max(float(np.abs(o - r).max()) for o, r in zip(olog, rlog))
    if div is not None:
        out["at_divergence"] = {"native_token": toks[div], "ort_argmax": pick(olog[div]),
                                "ort_margin": gap(olog[div]), "native_margin": gap(nlog[div]) if div else None,
                                "max_err_so_far": max(errs[:div]) if div > 1 else None,
                                "float64_margin": gap(rlog[div]) if rlog is not None else None}
    out.update(proof(toks, nlog, olog, rlog, pick, gap, out))
    return out


def proof(toks, nlog, olog, rlog, pick, gap, out) -> dict:
    """#16's token criterion over every step (onnxruntime is teacher-forced, so each step compares alone):
    native's token must equal onnxruntime's wherever the reference margin (float64's top-1 - top-2; without a
    float64 reference, onnxruntime's own) exceeds twice the measured fp16 logit error (the larger of native's
    and onnxruntime's max error vs float64; without it, native vs onnxruntime). Every disagreement is listed."""
    ref = rlog if rlog is not None else olog
    err = (max(out["max_logit_err_vs_float64"], out["ort_max_logit_err_vs_float64"]) if rlog is not None
           else out["max_logit_err_vs_ort"])
    margins = [gap(r) for r in ref]
    bad = [i for i in range(len(toks)) if toks[i] != pick(olog[i])]
    return {"fp16_error": err, "margin_from": "float64" if rlog is not None else "onnxruntime",
            "steps_above_2x_error": sum(m > 2 * err for m in margins), "disagreements": [
                {"step": i, "native_token": toks[i], "ort_argmax": pick(olog[i]), "reference_margin": margins[i],
                 "native_margin": gap(nlog[i]) if i else None} for i in bad],
            "criterion_holds": all(margins[i] <= 2 * err for i in bad)}


@part("parity_tiny")
def parity_tiny():
    import vlmdecode
    from vlmdecode.processor import demo_image
    from vlmdecode.reference import Reference

    image, out = demo_image(32), {}
    for layout in ("unfused", "fused", "fused-cuda"):
        folder = fixture("tiny", layout)
        pipe = vlmdecode.load(folder, "cuda", "native")
        ids, x = pipe.prepare(PROMPT, image)
        ref = Reference.load(folder)
        feats = ref.vision(pipe.processor.preprocess([image], dtype=np.float32).astype(np.float64))
        out[layout] = parity(pipe, x, STEPS, ref, ids, feats)
        out[layout]["counters"] = pipe.decoder.counters()
        log(layout, {k: v for k, v in out[layout].items() if k != "first_tokens"})
    return out


_gemma: dict = {}


def capacity_for(context: int) -> int:
    """The KV capacity the H200 scripts give a step at `context`: the context + the 48 positions CAPACITY adds."""
    return context + CAPACITY - CONTEXT


def gemma_pipe(mode="native", capacity=CAPACITY):
    """The gemma3-1b fp16 fused-cuda pipeline of `mode` at KV capacity `capacity`, loaded once per process."""
    import vlmdecode

    if "folder" not in _gemma:
        _gemma["folder"] = fixture("gemma3-1b", "fused-cuda")
        log("gemma3-1b folder", _gemma["folder"])
    key = mode if capacity == CAPACITY else (mode, capacity)
    if key not in _gemma:
        _gemma[key] = vlmdecode.load(_gemma["folder"], "cuda", mode, max_length=capacity)
    return _gemma[key]


def gemma_native():
    return gemma_pipe("native")


HELD_MODULES: list = []  # kernel modules dropped from the cache but kept loaded (so the next load lands elsewhere)


def drop_modules(hold: bool) -> None:
    """Forget the compiled kernel modules (`kernels.drop_module_cache`), so that the next build loads its own: held
    (kept loaded in HELD_MODULES, so the next load lands in a new place) or let go (so a later load can take theirs)."""
    from vlmdecode.native import kernels as K

    dropped = K.drop_module_cache()
    if hold:
        HELD_MODULES.extend(dropped)


def rebuild_from_env(dec) -> str:
    """The step rebuilt as $NATIVE_SHAPES (JSON Shapes overrides) and $NATIVE_REBUILD say: "same" rebuilds on the
    cached module (new buffers and launches), "fresh" on a module compiled and loaded again (the first kept loaded,
    in HELD_MODULES), "fresh_free" the same with the first let go (so the load after it can take its place).
    Returns what was done ("" for nothing)."""
    again, shapes = os.environ.get("NATIVE_REBUILD", ""), os.environ.get("NATIVE_SHAPES") or ""
    if again not in ("", "same", "fresh", "fresh_free"):
        raise SystemExit(f"NATIVE_REBUILD takes 'same', 'fresh' or 'fresh_free', got {again!r}")
    if again.startswith("fresh"):
        drop_modules(hold=again == "fresh")
    if shapes or again:
        dec.rebuild(dec.shapes.with_overrides(json.loads(shapes or "{}")))
    return again or ("shapes" if shapes else "")


@part("parity_gemma3_1b")
def parity_gemma():
    from vlmdecode.profiling import prompt_ids

    pipe = gemma_native()
    x = pipe.embed(prompt_ids(256, seed=1), None)  # a 256-token random byte prompt
    out = parity(pipe, x, STEPS)
    out["prompt_tokens"] = int(x.shape[1])
    log({k: v for k, v in out.items() if k != "first_tokens"})
    return out


def timing_gemma(shapes=None, modes=("device", "graph"), rounds=5, context=CONTEXT, capacity=CAPACITY):
    from vlmdecode import bench, costmodel
    from vlmdecode.modelfolder import ModelFolder
    from vlmdecode.profiling import prompt_ids

    pipe = gemma_pipe("native", capacity)
    dec = pipe.decoder
    if shapes is not None:
        dec.rebuild(shapes)
    out0 = {"shapes": str(dec.shapes)}
    folder = ModelFolder.load(_gemma["folder"])
    bw = bench.copy_bandwidth()
    weight, kv = costmodel.decoder_weight_bytes(folder), costmodel.kv_read_bytes(folder, context)
    out = {"context": context, "kv_capacity": capacity, "copy_bandwidth_tb_s": bw / 1e12, "weight_bytes": weight,
           "kv_bytes": kv, "floor_ms": (weight + kv) / bw * 1e3, "kernels_per_step": dec.kernels_per_step(), **out0}
    if shapes is not None:  # the tuned shapes must give the same tokens as onnxruntime
        out["parity_64_steps"] = parity(pipe, pipe.embed(prompt_ids(256, seed=1), None), 64)
        log("tuned parity", {k: v for k, v in out["parity_64_steps"].items() if k != "first_tokens"})
    x = pipe.embed(prompt_ids(context), None) if folder.info.drive == "embeds" else prompt_ids(context)
    dec.prepare_timing(x)
    out["native_step_replay_ms"] = [dec.replay_ms(200) for _ in range(5)]
    ker = dec.kernel_ms(repeats=20)
    out["kernels"] = ker
    out["kernel_sum_ms"] = sum(k["ms"] for k in ker if k["kernel"] not in ("head_bound", "head_pick"))  # the body
    out["bounded_head_ms"] = sum(k["ms"] for k in ker if k["kernel"] in ("head_bound", "head_pick"))  # its greedy tail
    groups: dict = {}
    for k in ker:
        g = groups.setdefault(k["kernel"].split(".")[-1], {"count": 0, "ms": 0.0, "bytes": 0})
        g["count"] += 1
        g["ms"] += k["ms"]
        g["bytes"] += k["bytes"]
    for g in groups.values():
        g["tb_per_s"] = g["bytes"] / (g["ms"] * 1e-3) / 1e12
    out["kernel_groups"] = groups
    # greedy tokens as generated: the captured step with advance, replayed back to back
    dec.prepare_timing(x)
    out["native_greedy_replay_ms_per_token"] = dec.replay_ms(capacity - context - 8, greedy=True)
    log({k: v for k, v in out.items() if k not in ("kernels",)})
    # the pipeline's per-token time, modes interleaved at the same capacity
    pipes = {"native": pipe}
    for mode in modes:
        pipes[mode] = gemma_pipe(mode, capacity)
    onces = {m: bench.pipeline_once(p, context, 48, 8) for m, p in pipes.items()}
    onces["native plain loop"] = with_loop(bench.pipeline_once(pipe, context, 48, 8), dec, lookahead=False)
    per: dict = {m: [] for m in onces}
    for r in range(rounds):
        for m in (list(onces) if r % 2 == 0 else list(onces)[::-1]):
            per[m].append(onces[m]()["steady"])
    out["pipeline_ms_per_token"] = {m: float(np.median(v)) for m, v in per.items()}
    out["pipeline_rounds"] = per
    out["native_over_floor"] = out["pipeline_ms_per_token"]["native"] / out["floor_ms"]
    ms = out["pipeline_ms_per_token"]
    out["native_over_device"] = ms["native"] / ms["device"]
    out["native_plain_loop_over_floor"] = ms["native plain loop"] / out["floor_ms"]
    if "graph" in ms:
        out["native_over_graph"] = ms["native"] / ms["graph"]
    log(out["pipeline_ms_per_token"])
    return out


def with_loop(once, dec, lookahead: bool):
    """once() with the decoder's ring read in that order (decoders.token_ring's loop_order)."""
    def run():
        with dec.loop_order(lookahead):
            return once()
    return run


@part("timing_gemma3_1b")
def timing_default():
    return timing_gemma()


@part("timing_gemma3_1b_tuned")
def timing_tuned():
    if "sweep_gemma3_1b_shapes" not in results:
        raise RuntimeError("no sweep results to tune from")
    return timing_gemma(tuned_shapes(results["sweep_gemma3_1b_shapes"]), modes=("device",), rounds=3)


CONTEXT_LONG = 4096
CAPACITY_LONG = capacity_for(CONTEXT_LONG)  # one capacity for every mode (as h200_matrix_gemma3-1b)


@part("timing_gemma3_1b_ctx4096")
def timing_ctx4096():
    """#16's context-4096 target (native <= 0.80 ms/token): native vs device vs graph per token, interleaved
    rounds at one KV capacity, with the floor from this run's copy bandwidth."""
    out = timing_gemma(modes=("device", "graph"), rounds=5, context=CONTEXT_LONG, capacity=CAPACITY_LONG)
    out["target_ms"] = 0.80
    out["native_meets_target"] = out["pipeline_ms_per_token"]["native"] <= out["target_ms"]
    return out


@part("memory_gemma3_1b")
def memory_gemma(generations=200):
    """Device memory over `generations` greedy generations of the gemma3-1b native pipeline with an image
    (#16 proof: flat): CuPy's pool (used / held bytes) and cudaMemGetInfo's free bytes after 5 warm-up
    generations, every 20 generations and at the end (garbage collected and the stream synchronized first)."""
    import gc

    import cupy

    from vlmdecode.processor import demo_image

    pipe, image = gemma_native(), demo_image(64)
    pool = cupy.get_default_memory_pool()

    def reading(n):
        gc.collect()
        cupy.cuda.Device().synchronize()
        return {"generations": n, "pool_used": pool.used_bytes(), "pool_held": pool.total_bytes(),
                "device_free": cupy.cuda.runtime.memGetInfo()[0]}

    gen = lambda: pipe.generate(PROMPT, image=image, max_new_tokens=8, stop=())  # noqa: E731
    for _ in range(5):
        gen()
    trace = [reading(0)]
    for i in range(generations):
        tokens = gen().tokens
        if (i + 1) % 20 == 0:
            trace.append(reading(i + 1))
    first, last = trace[0], trace[-1]
    out = {"generations": generations, "new_tokens": 8, "prompt": PROMPT, "image": "demo_image(64)",
           "last_tokens": list(tokens), "trace": trace, "counters": pipe.decoder.counters(),
           "pool_used_growth": last["pool_used"] - first["pool_used"],
           "pool_held_growth": last["pool_held"] - first["pool_held"],
           "device_free_drop": first["device_free"] - last["device_free"],
           "max_device_free_drop": max(first["device_free"] - r["device_free"] for r in trace)}
    out["flat"] = out["pool_used_growth"] <= 0 and out["max_device_free_drop"] < 2 << 20  # as the tiny CUDA test
    log({k: v for k, v in out.items() if k != "trace"})
    return out


def time_graph(launches, reps=15, pdl=False):
    """Device ms per launch of `launches` captured back to back in one CUDA graph (median of reps replays);
    pdl: every launch with programmatic dependent launch (native.pdl), as the decoder's step runs them, or not;
    None: each launch as it is set."""
    import cupy

    for launch in launches:
        if pdl is not None:
            launch.pdl = pdl

    st = cupy.cuda.Stream(non_blocking=True)
    with st:
        for launch in launches:
            launch()
        st.begin_capture()
        for launch in launches:
            launch()
        g = st.end_capture()
        g.launch(st)
        st.synchronize()
        times = []
        for _ in range(reps):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            g.launch(st)
            end.record()
            end.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, end))
    return float(np.median(times)) / len(launches)


GEMV_SHAPES = [(4, 1), (4, 2), (4, 4), (8, 1), (8, 2), (8, 4)]
PAIR_SHAPES = [(4, 2), (4, 4), (8, 2), (8, 4)]
HEAD_SHAPES = [(8, 4), (8, 2), (4, 4), (8, 1)]
# kernels.attention's block shapes: plain (chunk, threads), cl (threads, batch, cluster, clusters a KV head or 0
# for one batch a sub-group at the capacity)
ATTN_SHAPES = [("plain", 16, 256), ("cl", 256, 8, 8, 0), ("cl", 256, 8, 8, 1), ("cl", 256, 4, 8, 0),
               ("cl", 256, 2, 8, 0), ("cl", 256, 4, 4, 0), ("cl", 128, 4, 8, 0), ("cl", 128, 8, 8, 1),
               ("cl", 256, 4, 16, 1), ("cl", 256, 8, 16, 1), ("cl", 256, 2, 16, 0), ("cl", 256, 4, 16, 0),
               ("cl", 128, 8, 16, 1), ("cl", 128, 4, 16, 0)]


def attn_kwargs(shape):
    """kernels.attention's keyword arguments for an ATTN_SHAPES entry."""
    if shape[0] == "cl":
        return dict(threads=shape[1], batch=shape[2], cluster=shape[3], clusters=shape[4])
    return dict(chunk=shape[1], threads=shape[2])


def attn_key(window, shape):
    kind = {None: "global", 1: "only t"}.get(window, "local")
    return f"{kind} {shape[0]} " + "x".join(str(v) for v in shape[1:])


def attention_sweep(shapes=ATTN_SHAPES, windows=(None, 512)):
    """The attention kernel at gemma3-1b's shapes (4 q heads, 1 KV head, head_dim 256, t = CONTEXT, capacity
    CAPACITY) for each shape and window: 64 layers' K/V (more than the L2) rotated over 192 launches, graph
    replays with and without PDL; us a launch and the K/V bytes over that time."""
    import cupy

    from vlmdecode.native import kernels as K

    nq, D, cap, t = 4, 256, CAPACITY, CONTEXT
    clustered = {(D, nq, s[2], s[3], s[1] // 32) for s in shapes if s[0] == "cl"}
    fns = K.compile_module(set(), {D}, clustered)
    f32 = lambda n: cupy.random.standard_normal(n, dtype=cupy.float32)  # noqa: E731
    Ks = [cupy.random.standard_normal((1, 1, cap, D), dtype=cupy.float32).astype(cupy.float16) for _ in range(64)]
    Vs = [cupy.random.standard_normal((1, 1, cap, D), dtype=cupy.float32).astype(cupy.float16) for _ in range(64)]
    qkv, norm = f32(6 * D), cupy.ones(D, cupy.float32)
    ang = cupy.arange(cap)[:, None] * cupy.linspace(1e-4, 1.0, D // 2)[None]
    cos, sin = cupy.cos(ang).astype(cupy.float32), cupy.sin(ang).astype(cupy.float32)
    pos, o = cupy.asarray([t], cupy.int64), cupy.zeros(nq * D, cupy.float32)
    part, counter = cupy.zeros(nq * (cap // 4 + 2) * (D + 2), cupy.float32), cupy.zeros(1, cupy.int32)
    res = {}
    for window in windows:
        for shape in shapes:
            try:  # a shape the GPU refuses (e.g. a cluster of 16 it cannot place) is recorded, not fatal
                ls = [K.attention(fns, "attn", qkv, nq, 1, D, q_norm=norm, k_norm=norm, eps=1e-6, rope_cos=cos,
                                  rope_sin=sin, pos=pos, K=k_, V=v_, window=window, scale=D**-0.5, softcap=None,
                                  part=part, counter=counter, out=o, **attn_kwargs(shape))
                      for k_, v_ in zip(Ks, Vs)] * 3
                keys = t + 1 if window is None else window
                for pdl in (False, True):
                    ms = time_graph(ls, pdl=pdl)
                    res[attn_key(window, shape) + (" pdl" if pdl else "")] = {
                        "us": ms * 1e3, "tb_per_s": 2 * keys * D * 2 / (ms * 1e-3) / 1e12, "blocks": ls[0].grid[0]}
            except Exception as e:  # noqa: BLE001
                log("attention", attn_key(window, shape), "FAILED", repr(e)[:300])
                cupy.cuda.runtime.deviceSynchronize()
    return res


@part("sweep_gemma3_1b_shapes")
def sweep():
    """Each kernel class at gemma3-1b's shapes, alone, with every block shape: weights rotated over copies
    that together exceed the L2 (as in a step, where no weight is re-read), timed as graph replays."""
    import cupy

    from vlmdecode.native import kernels as K

    H, I, nq, D, V = 1152, 6912, 4, 256, 262144
    cases = {"qkv": (1536, H, 1, K.EPI_PLAIN, True, GEMV_SHAPES), "o": (H, nq * D, 1, K.EPI_PLAIN, False, GEMV_SHAPES),
             "gate_up": (I, H, 1, K.EPI_GELU, True, PAIR_SHAPES), "head": (V, H, 1, K.EPI_HEAD, True, HEAD_SHAPES)}
    for splits in (4, 6, 8):
        cases[f"down/{splits}"] = (H, I, splits, K.EPI_PLAIN, False, GEMV_SHAPES)
    gemvs = {(K.loads_per_lane(k // sp), rpw, epi)
             for rows, k, sp, epi, _, shapes in cases.values() for _, rpw in shapes}
    fns = K.compile_module(gemvs, set())  # attention_sweep compiles its own
    f32 = lambda n: cupy.random.standard_normal(n, dtype=cupy.float32)  # noqa: E731
    out, rng_w = {}, lambda n: (cupy.random.standard_normal(n, dtype=cupy.float32) * 0.05).astype(cupy.float16)
    vec, resid, delta, w_a, w_b = f32(I), f32(H), f32((8, H)), f32(H), f32(H)
    y = cupy.zeros(2 * V, cupy.float32)
    logits, pv, pi = cupy.zeros(V, cupy.float16), cupy.zeros(1024, cupy.float32), cupy.zeros(1024, cupy.int64)
    for name, (rows, k, sp, epi, fold, shapes) in cases.items():
        total_rows = 2 * rows if epi == K.EPI_GELU else rows
        nbytes = total_rows * k * 2
        copies = max(1, -(-256_000_000 // nbytes))
        Ws = [rng_w(total_rows * k).reshape(total_rows, k) for _ in range(copies)]
        res = {}
        for warps, rpw in shapes:
            kw = dict(warps=warps, rpw=rpw, splits=sp, y=y, epi=epi)
            if fold:
                kw.update(src=resid, delta=delta, delta_parts=6, delta_w=w_a, norm_w=w_b)
            else:
                kw.update(src=vec)
            if epi == K.EPI_HEAD:
                kw.update(logits=logits, part_v=pv, part_i=pi, resid_out=None)
            ls = [K.gemv(fns, name, W, rows, k // sp, **kw) for W in Ws] * max(1, 200 // copies)
            for pdl in (False, True):
                ms = time_graph(ls if epi != K.EPI_HEAD else ls[:20], pdl=pdl)
                res[f"{warps}x{rpw}" + (" pdl" if pdl else "")] = {"us": ms * 1e3,
                                                                   "tb_per_s": nbytes / (ms * 1e-3) / 1e12}
        del Ws
        out[name] = res
        best = min(res, key=lambda c: res[c]["us"])
        log(name, {c: round(r["us"], 2) for c, r in res.items()}, "best", best, f"{res[best]['tb_per_s']:.2f} TB/s")
    res = attention_sweep()
    out["attention"] = res
    log("attention", {c: round(r["us"], 2) for c, r in res.items()})
    return out


def tuned_shapes(sw):
    """The fastest measured shape of each kernel class (attention: 5 local + 1 global layers)."""
    from vlmdecode.native.kernels import ATTN_CHUNK, Shapes

    # the step launches with PDL: pick among the " pdl" timings
    pdl = lambda d: [c for c in d if c.endswith(" pdl")]  # noqa: E731
    shape = lambda c: tuple(int(v) for v in c.split(" ")[0].split("x"))  # noqa: E731
    best = lambda d: shape(min(pdl(d), key=lambda c: d[c]["us"]))  # noqa: E731
    down = min(((sp, c) for sp in (4, 6, 8) for c in pdl(sw[f"down/{sp}"])),
               key=lambda sc: sw[f"down/{sc[0]}"][sc[1]]["us"])
    att = sw["attention"]
    ok = [a for a in ATTN_SHAPES if all(attn_key(w, a) + " pdl" in att for w in (512, None))]
    a = attn_kwargs(min(ok, key=lambda a: 5 * att[attn_key(512, a) + " pdl"]["us"]
                        + att[attn_key(None, a) + " pdl"]["us"]))
    return Shapes(qkv=best(sw["qkv"]), o=best(sw["o"]), gate_up=best(sw["gate_up"]),
                  down=shape(down[1]), head=best(sw["head"]), slice_target=6912 // down[0],
                  attn_chunk=a.get("chunk", ATTN_CHUNK), attn_threads=a["threads"],
                  attn_batch=a.get("batch", 0),
                  attn_cluster=a.get("cluster", 8), attn_clusters=a.get("clusters", 0))


@part("timing_tiny")
def timing_tiny():
    import vlmdecode
    from vlmdecode import bench

    folder = fixture("tiny", "fused-cuda")
    pipes = {m: vlmdecode.load(folder, "cuda", m, max_length=192) for m in ("native", "device")}
    onces = {m: bench.pipeline_once(p, 128, 64, 8) for m, p in pipes.items()}
    native = pipes["native"]
    onces["native plain loop"] = with_loop(bench.pipeline_once(native, 128, 64, 8), native.decoder, lookahead=False)
    rounds: dict = {m: [] for m in onces}
    for r in range(7):
        for m in (list(onces) if r % 2 == 0 else list(onces)[::-1]):
            rounds[m].append(onces[m]()["steady"])
    out = {m: float(np.median(v)) for m, v in rounds.items()}
    out["native_over_device"] = out["native"] / out["device"]
    out["native_plain_loop_over_device"] = out["native plain loop"] / out["device"]
    out["rounds"] = rounds
    return out


def proof_line(r: dict) -> str:
    return (f"proof: {len(r['disagreements'])} disagreements over {r['steps']} steps, all where the "
            f"{r['margin_from']} margin <= 2 x {r['fp16_error']:.3g}: {r['criterion_holds']} "
            f"({r['steps_above_2x_error']} steps above it); " + ", ".join(
                f"step {d['step']} margin {d['reference_margin']:.3g}" for d in r["disagreements"][:8]))


def table():
    print("\n==== h200_native summary ====")
    kt = results.get("kernel_tests", {})
    print(f"kernel tests: rc={kt.get('returncode')} {kt.get('summary', '')}")
    for layout, r in results.get("parity_tiny", {}).items():
        print(f"tiny {layout:10s} first divergence {r['first_divergence']} / {r['steps']}, err vs ort "
              f"{r['max_logit_err_vs_ort']:.2e}, vs float64 {r.get('max_logit_err_vs_float64', float('nan')):.2e}"
              f" (ort {r.get('ort_max_logit_err_vs_float64', float('nan')):.2e}) {r.get('at_divergence', '')}")
        print(f"   {proof_line(r)}")
    r = results.get("parity_gemma3_1b")
    if r:
        print(f"gemma3-1b first divergence {r['first_divergence']} / {r['steps']}, err vs ort "
              f"{r['max_logit_err_vs_ort']:.3g} (median {r['median_logit_err_vs_ort']:.3g}) "
              f"{r.get('at_divergence', '')}")
        print(f"   {proof_line(r)}")
    for key in ("timing_gemma3_1b", "timing_gemma3_1b_tuned", "timing_gemma3_1b_ctx4096"):
        t = results.get(key)
        if not t:
            continue
        print(f"[{key}] shapes {t['shapes']}")
        print(f"  gemma3-1b ctx {t['context']} cap {t['kv_capacity']}: copy {t['copy_bandwidth_tb_s']:.2f} TB/s, floor "
              f"{t['floor_ms']:.3f} ms; native step replay {min(t['native_step_replay_ms']):.3f} ms, greedy replay "
              f"{t['native_greedy_replay_ms_per_token']:.3f} ms/token, kernels/step {t['kernels_per_step']}, "
              f"uncaptured kernel sum {t['kernel_sum_ms']:.3f} ms")
        for name, g in t["kernel_groups"].items():
            print(f"   {name:8s} x{g['count']:3d} {g['ms'] * 1e3:8.1f} us  {g['bytes'] / 1e6:8.2f} MB  "
                  f"{g['tb_per_s']:.2f} TB/s")
        if "pipeline_ms_per_token" in t:
            print(f"   pipeline ms/token {t['pipeline_ms_per_token']}; native/floor {t['native_over_floor']:.2f}, "
                  f"native/device {t['native_over_device']:.2f}")
        if "parity_64_steps" in t:
            p = t["parity_64_steps"]
            print(f"   tuned parity: first divergence {p['first_divergence']} / 64, "
                  f"err vs ort {p['max_logit_err_vs_ort']:.3g}")
    sw = results.get("sweep_gemma3_1b_shapes")
    if sw:
        for name, res in sw.items():
            best = min(res, key=lambda c: res[c]["us"])
            print(f"sweep {name:8s} best {best:14s} {res[best]['us']:7.2f} us {res[best]['tb_per_s']:.2f} TB/s  ("
                  + ", ".join(f"{c} {r['us']:.1f}" for c, r in res.items()) + ")")
    m = results.get("memory_gemma3_1b")
    if m:
        print(f"gemma3-1b memory over {m['generations']} generations: pool used {m['pool_used_growth']:+d} B, held "
              f"{m['pool_held_growth']:+d} B, device free drop {m['device_free_drop']:+d} B (max "
              f"{m['max_device_free_drop']:+d}); flat: {m['flat']}")
    if "timing_tiny" in results:
        print(f"tiny fused-cuda ctx 128 ms/token {results['timing_tiny']}")
    for name, err in results["errors"].items():
        print(f"ERROR {name}: {err.strip().splitlines()[-1]}")
    print(f"total {time.time() - T0:.0f} s; JSON: {OUT / 'h200_native.json'}")


PARTS = {"provenance": provenance, "kernel_tests": kernel_tests, "parity_tiny": parity_tiny, "timing_tiny": timing_tiny,
         "parity_gemma3_1b": parity_gemma, "timing_gemma3_1b": timing_default, "sweep_gemma3_1b_shapes": sweep,
         "timing_gemma3_1b_tuned": timing_tuned, "timing_gemma3_1b_ctx4096": timing_ctx4096,
         "memory_gemma3_1b": memory_gemma}


def selected_parts(argv) -> list[str] | None:
    """The part names of `--parts a,b` (in the order given; provenance always first), or None (the default run)."""
    if "--parts" not in argv:
        return None
    i = argv.index("--parts")
    names = [n for n in (argv[i + 1] if i + 1 < len(argv) else "").split(",") if n]
    bad = [n for n in names if n not in PARTS]
    if not names or bad:
        raise SystemExit(f"--parts takes a comma-separated list of {', '.join(PARTS)}; got {bad or 'nothing'}")
    return ["provenance"] + [n for n in names if n != "provenance"]


if __name__ == "__main__":
    only = selected_parts(sys.argv)
    if only is not None:
        for name in only:
            PARTS[name]()
    else:
        provenance()
        kernel_tests()
        parity_tiny()
        timing_tiny()
        if "--skip-1b" not in sys.argv:
            parity_gemma()
            timing_default()
            sweep()
            if time.time() - T0 < 400:
                timing_tuned()
            else:
                results["errors"]["timing_gemma3_1b_tuned"] = f"skipped: {time.time() - T0:.0f} s spent (budget 8 min)"
    results["seconds"] = time.time() - T0
    save()
    table()
