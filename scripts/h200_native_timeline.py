"""H200: the timeline of one replayed native step (issue 16: where inside the step the time goes, PDL overlap
included): the gemma3-1b step (fused-cuda, context 1024, KV capacity 1072, default Shapes) rebuilt from the
decoder's own launches on a module compiled with -DVLM_STAMPS, so that every block of every GEMV and attention
launch records %globaltimer at its start, after `pdl_wait` and at its end (`cuda_src.common` STAMP; without
the define the kernels compile to the same cubin). Captured as one graph and replayed back to back; the stamps
of the last of 10 replays are read, 7 times.

Per launch (times relative to the first block of the step's first launch): first / last block start, first /
median / last wait release, last end. Per kernel class over layers 1-24 (medians): `lead` (first start minus
the predecessor's last end: negative = resident before it finished; `lead2`: the same against the launch
two back, i.e. whether PDL lets a kernel in before its predecessor's predecessor ends), `release` (first
wait release minus the predecessor's last end: the dependency's latency), `body` (last end minus first
release), `span` (last end minus the predecessor's last end: the class's share of the step; the spans sum to
the step).
attention_cl also stamps its phases (slots 3-6: q/k norm + rotary + append, the keys, the block's partial in shared
memory, the cluster exchange; PHASES), reported per attention launch and over local / global layers (thread 0's
view of each block, medians). The stamped graph's replay time beside the decoder's own graph says how much the
stamps perturb.
--context N: the step at context N (KV capacity N + 48, as h200_native.py's context-4096 part) instead of 1024.
--shapes JSON: Shapes overrides for the step (`Shapes.with_overrides`, e.g. '{"o": [8, 2]}'); --tag TAG names the file.
$NATIVE_REBUILD (h200_native.rebuild_from_env): "fresh" puts the decoder's own graph on a module loaded after its
first, as every stamped build is; without it the decoder graph runs on the first module's place, ~1% slower.
--variants JSON ('{"name": ["-DVLM_X", "nopdl:attn", ...]}'): stamped builds of source variants (or of kernel
classes launched without PDL) beside the plain stamped one (an entry "nostamps": built without stamps and only
replay-timed, the unstamped side by side with the decoder's own graph),
each checked against the decoder's graph (max |logit difference|), all replay-timed interleaved over 5 rounds, and
each given the tables above under "variants" (the plain one also at the top level). Every build also keeps each
block's stamps of the first local and first global attention launch after layer 0, and, for GEMVs that stamp
slot 3, the wait-to-vector time by class. The defines used in issue 16's tenth session (VLM_HOIST_QK, VLM_OLD_Q,
VLM_PROBE_*: slot 7 / gemv slot 3 stamped when some data arrived) are on branch attn-pro.
Writes $OUT/h200_native_timeline[_TAG].json.
Usage: OUT=/tmp/out python3 scripts/h200_native_timeline.py [--context N] [--shapes JSON] [--variants JSON] [--tag TAG]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import h200_native as hn  # noqa: E402  (fixtures, provenance; nothing runs at import)

# stamps a block (cuda_src.common STAMP_SLOTS): start, after pdl_wait, end, attention_cl's phases 3-6; slot 7
# only in branch attn-pro's variants (its q rows loaded, or a probe's data arrived)
SLOTS = 8
PHASES = {7: "q/k rows loaded, norms summed", 3: "q/k norm, rotary, append", 4: "keys (batches + key t)",
          5: "block partial in shared memory",
          6: "cluster exchange (wait + barrier)", 2: "combine + write"}  # slot -> phase ending there
from h200_native_ablate import kind, timed  # noqa: E402  (class of a launch name, graph replay timer)


def stamped_launches(dec, stamps, defines=()):
    """The decoder's step launches on a -DVLM_STAMPS module (plus `defines`, source variants; an entry
    "nopdl:CLASS" instead launches that kernel class without programmatic dependent launch, so that it starts
    only once its predecessor is done), each with its slice of `stamps` as last argument; returns (launches,
    block offsets)."""
    import cupy

    from vlmdecode.native import kernels as K
    from vlmdecode.native.kernels_src import SOURCE

    names = {id(f): n for mod in K._modules.values() for n, f in mod.items()}
    used = sorted({names[id(b.fn)] for b in dec.body})
    no_pdl = {d.split(":", 1)[1] for d in defines if d.startswith("nopdl:")}
    stamped = "nostamps" not in defines
    defines = tuple(d for d in defines if not d.startswith("nopdl:") and d != "nostamps")
    options = ("-std=c++17", *(("-DVLM_STAMPS",) if stamped else ()), *defines)
    mod = cupy.RawModule(code=SOURCE, options=options, name_expressions=used)
    fns = {n: mod.get_function(n) for n in used}
    launches, offsets, off = [], [], 0
    for b in dec.body:
        name = names[id(b.fn)]
        fn = fns[name]
        K._need_shared(fn, b.shared)  # the stamped build's functions need the decoder's shared memory size too
        if name.startswith("attention_cl") and int(name.split(",")[3]) > 8:
            K._allow_large_clusters(fn)
        arg = np.uint64(stamps.data.ptr + off * SLOTS * 8)
        launch = K.Launch(b.name, fn, b.grid, b.block, b.args + ((arg,) if stamped else ()), b.shared, b.nbytes,
                          pdl=b.pdl and kind(b.name) not in no_pdl)
        launch.prepare()
        launches.append(launch)
        offsets.append(off)
        off += int(np.prod(b.grid))
    return launches, offsets + [off]


def per_launch(raw, offsets, names):
    """Rows of start / wait / end statistics (ns, relative to the step's first stamp) per launch; the wait's over the
    blocks that waited (an attention cluster the position does not need exits before its wait)."""
    t0 = raw[offsets[0]:offsets[1], 0].min()
    rows = []
    for i, name in enumerate(names):
        s = raw[offsets[i]:offsets[i + 1]].astype(np.int64) - int(t0)
        w = s[raw[offsets[i]:offsets[i + 1], 1] > 0, 1]
        rows.append({"launch": name, "blocks": int(len(s)), "waited": int(len(w)), "start_first": int(s[:, 0].min()),
                     "start_last": int(s[:, 0].max()), "wait_first": int(w.min()),
                     "wait_median": int(np.median(w)), "wait_last": int(w.max()),
                     "end_last": int(s[:, 2].max())})
    return rows


def attention_phases(raw, offsets, names):
    """Per attention launch, each phase's duration (us, median over blocks) from the wait release through the
    stamps attention_cl leaves in slots 3-6 and its end."""
    out = {}
    for i, name in enumerate(names):
        if not name.endswith(".attn"):
            continue
        s = raw[offsets[i]:offsets[i + 1]].astype(np.int64)
        s = s[s[:, 1] > 0]  # the blocks that worked (an exited cluster stamps its start and end only)
        prev, d = s[:, 1], {}
        for slot, phase in PHASES.items():
            if not s[:, slot].any():  # a phase this build does not stamp
                continue
            d[phase] = float(np.median(s[:, slot] - prev)) / 1e3
            prev = s[:, slot]
        out[name] = d
    return out


def classes(rows, layers):
    """Medians per kernel class over layers 1 .. layers - 2 of lead / release / body / span (us)."""
    out: dict = {}
    for i in range(1, len(rows)):
        name, prev = rows[i]["launch"], rows[i - 1]
        if "." in name and not 1 <= int(name[1:name.index(".")]) <= layers - 2:
            continue
        r = rows[i]
        d = out.setdefault(kind(name), {"lead": [], "lead2": [], "release": [], "body": [], "span": []})
        d["lead"].append(r["start_first"] - prev["end_last"])
        if i > 1:
            d["lead2"].append(r["start_first"] - rows[i - 2]["end_last"])
        d["release"].append(r["wait_first"] - prev["end_last"])
        d["body"].append(r["end_last"] - r["wait_first"])
        d["span"].append(r["end_last"] - prev["end_last"])
    return {c: {k: float(np.median(v)) / 1e3 for k, v in d.items() if v} for c, d in out.items()}


def record(dec, graph, stamps, offsets, names, samples, back_to_back):
    """Replay `graph` back to back, `samples` times, reading the stamps of the last replay each time: per-launch
    rows and attention phases per sample, and the last sample's raw stamps."""
    import cupy

    rows, phases = [], []
    for _ in range(samples):
        with dec.stream:
            for _ in range(back_to_back):
                graph.launch(dec.stream)
        dec.stream.synchronize()
        raw = cupy.asnumpy(stamps).reshape(-1, SLOTS)
        rows.append(per_launch(raw, offsets, names))
        phases.append(attention_phases(raw, offsets, names))
    return rows, phases, raw


def summarise(dec, samples_rows, phases, raw, offsets, names) -> dict:
    """Medians over samples per launch, per kernel class and per attention phase (local / global layers), and
    each block's stamps (ns from the launch's first start) of the first local and first global attention
    launch after layer 0."""
    res: dict = {}
    keys = [k for k in samples_rows[0][0] if k not in ("launch", "blocks", "waited")]
    rows = [{"launch": r["launch"], "blocks": r["blocks"], "waited": r["waited"],
             **{k: float(np.median([s[i][k] for s in samples_rows])) for k in keys}}
            for i, r in enumerate(samples_rows[0])]
    res["launches"] = rows
    res["step_us"] = rows[-1]["end_last"] / 1e3
    layers = len(dec.layers)
    res["classes_us"] = classes(rows, layers)
    res["classes_us_by_sample"] = [classes(s, layers) for s in samples_rows]
    # attention_cl's phases per launch (medians over samples) and over its local / global layers
    res["attention_phases_us"] = {n: {p: float(np.median([s[n][p] for s in phases])) for p in phases[0][n]}
                                  for n in phases[0]}
    glob = {f"L{l}.attn" for l, L in enumerate(dec.plan.layers) if L.window is None}
    res["attention_phases_by_kind_us"] = {
        kind_: {p: float(np.median([v[p] for n, v in res["attention_phases_us"].items() if (n in glob) == g]))
                for p in next(iter(res["attention_phases_us"].values()))}
        for kind_, g in (("local", False), ("global", True)) if any((n in glob) == g for n in phases[0])}
    blocks = {}
    for want in (False, True):
        n = next((n for n in phases[0] if (n in glob) == want and not n.startswith("L0.")), None)
        if n is not None:
            i = names.index(n)
            s = raw[offsets[i]:offsets[i + 1]].astype(np.int64)
            blocks[n] = np.where(s == 0, -1, s - int(s[:, 0].min())).tolist()  # an unstamped slot reads -1
    res["attention_block_stamps_ns"] = blocks
    # GEMVs stamping slot 3 (-DVLM_PROBE_GEMV: input vector formed): wait release -> vector, by class
    pro: dict = {}
    for i, n in enumerate(names):
        s = raw[offsets[i]:offsets[i + 1]].astype(np.int64)
        if not n.endswith(".attn") and s[:, 3].any():
            pro.setdefault(kind(n), []).append(float(np.median(s[:, 3] - s[:, 1])) / 1e3)
    res["gemv_vector_formed_us"] = {k: float(np.median(v)) for k, v in pro.items()}
    return res


def main(samples: int = 7, back_to_back: int = 10, rounds: int = 5) -> None:
    import cupy

    from vlmdecode.native import kernels as K
    from vlmdecode.profiling import prompt_ids

    hn.provenance()
    context = int(sys.argv[sys.argv.index("--context") + 1]) if "--context" in sys.argv else hn.CONTEXT
    capacity = hn.capacity_for(context)
    res = {"provenance": hn.results.get("provenance"), "command": " ".join(sys.argv),
           "context": context, "kv_capacity": capacity}
    pipe = hn.gemma_pipe("native", capacity)
    dec = pipe.decoder
    if "--shapes" in sys.argv:
        dec.rebuild(dec.shapes.with_overrides(json.loads(sys.argv[sys.argv.index("--shapes") + 1])))
    # NATIVE_REBUILD=fresh: the decoder's graph too on a module loaded after its first, as the stamped builds are
    # (the first module's place replays ~1% slower, h200_module_freed_reloads_c69763e.json)
    res["rebuild"] = hn.rebuild_from_env(dec)
    # --variants '{"name": ["-DVLM_X", ...]}': stamped builds of source variants beside the plain stamped one
    variants = {"stamped": [], **(json.loads(sys.argv[sys.argv.index("--variants") + 1])
                                  if "--variants" in sys.argv else {})}
    x = pipe.embed(prompt_ids(context), None)
    dec.prepare_timing(x)
    res["shapes"], res["pdl"], res["variant_defines"] = str(dec.shapes), dec.pdl, variants
    total = sum(int(np.prod(b.grid)) for b in dec.body)
    names = [b.name for b in dec.body]
    built = {}
    with dec.stream:
        dec.graph(False).launch(dec.stream)
        ref = cupy.asnumpy(dec.logits).astype(np.float64)
    for name, defines in variants.items():
        stamps = cupy.zeros(total * SLOTS if "nostamps" not in defines else 1, cupy.uint64)  # unstamped: never read
        launches, offsets = stamped_launches(dec, stamps, tuple(defines))
        graph = K.capture(dec.stream, lambda launches=launches: [launch() for launch in launches])
        with dec.stream:  # the stamped step computes what the decoder's own step does (from the same KV)
            dec.graph(False).launch(dec.stream)
            graph.launch(dec.stream)
            got = cupy.asnumpy(dec.logits).astype(np.float64)
        built[name] = (graph, stamps, offsets)
        res.setdefault("stamped_vs_decoder_graph_max_abs", {})[name] = float(np.abs(got - ref).max())
    times: dict = {"decoder graph": []}
    order = ["decoder graph", *variants]
    for r in range(rounds):  # interleaved, alternating order
        for name in (order if r % 2 == 0 else order[::-1]):
            g = dec.graph(False) if name == "decoder graph" else built[name][0]
            times.setdefault(name, []).append(timed(dec, g))
    res["replay_ms"] = times
    res["replay_ms_median"] = {n: float(np.median(v)) for n, v in times.items()}
    res["variants"] = {}
    for name, (graph, stamps, offsets) in built.items():
        if "nostamps" in variants[name]:  # replay-timed only (an unstamped build beside the decoder's own graph)
            continue
        rows, phases, raw = record(dec, graph, stamps, offsets, names, samples, back_to_back)
        res["variants"][name] = summarise(dec, rows, phases, raw, offsets, names)
    ticks = np.diff(np.unique(raw[:, :3].astype(np.int64)))
    res["timer_min_tick_ns"] = int(ticks[ticks > 0].min()) if (ticks > 0).any() else None
    res.update(res["variants"]["stamped"])  # the plain stamped build at the top level, as before --variants
    for name, v in res["variants"].items():
        print(name, json.dumps({k: v[k] for k in ("step_us", "classes_us", "attention_phases_by_kind_us")}),
              flush=True)
    print(json.dumps({k: res[k] for k in ("replay_ms_median", "stamped_vs_decoder_graph_max_abs",
                                          "timer_min_tick_ns")}), flush=True)
    hn.OUT.mkdir(parents=True, exist_ok=True)
    tag = "_" + sys.argv[sys.argv.index("--tag") + 1] if "--tag" in sys.argv else ""
    (hn.OUT / f"h200_native_timeline{tag}.json").write_text(json.dumps(res, indent=2, default=str))


if __name__ == "__main__":
    main()
