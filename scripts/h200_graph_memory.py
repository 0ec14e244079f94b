"""H200 diagnostic: where does device memory go when every generation captures a fresh CUDA graph?

Each policy runs in its own process (a clean CUDA context and onnxruntime arena): the tiny fp16 VLM,
image + prompt, 8 new tokens a generation, GENS generations; device free memory (cudaMemGetInfo,
after freeing CuPy's pool) is read after each of a few generations. Policies:
  eager                 no capture at all
  fresh_release         a fresh gpu_graph_id per generation, release_captured_graph at its end (default)
  fresh_no_release      a fresh id per generation, never released (what release should be saving)
  fresh_release_trim    as fresh_release, then cudaDeviceGraphMemTrim (returns graph memory pools)
  fresh_release_same    as fresh_release, arena_extend_strategy kSameAsRequested (no power-of-2 extends)
  one_graph             one id for the decoder's lifetime (captured once, replayed by every generation)
Usage: python3 scripts/h200_graph_memory.py [OUT_JSON]    (one policy: --policy NAME)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GENS = 120
MARKS = (10, 20, 40, 80, 120)
POLICIES = ("eager", "fresh_release", "fresh_no_release", "fresh_release_trim", "fresh_release_same", "one_graph")


def run_policy(policy: str) -> dict:
    import ctypes

    import cupy

    import vlmdecode
    from vlmdecode.fixture.cache import ensure_fixture
    from vlmdecode.processor import demo_image

    d = ensure_fixture("tiny", "gqa", "fp16")
    mode = "eager" if policy == "eager" else "graph"
    extra = {"provider_options": {"arena_extend_strategy": "kSameAsRequested"}} if policy.endswith("_same") else {}
    pipe = vlmdecode.load(d, "cuda", mode, graph_per_generation=policy != "one_graph", **extra)
    sess = pipe.decoder.session
    if policy == "fresh_no_release":
        sess.release_captured_graph = lambda graph_id: None
    if policy == "fresh_release_trim":
        cudart = ctypes.CDLL("libcudart.so.13")
        release = sess.release_captured_graph

        def release_and_trim(graph_id):
            release(graph_id)
            assert cudart.cudaDeviceGraphMemTrim(0) == 0

        sess.release_captured_graph = release_and_trim
    img, pool, free = demo_image(32), cupy.get_default_memory_pool(), {}
    for n in range(1, GENS + 1):
        pipe.generate("Describe the image.", image=img, max_new_tokens=8, stop=())
        if n in MARKS:
            pool.free_all_blocks()
            cupy.cuda.runtime.deviceSynchronize()
            free[n] = cupy.cuda.runtime.memGetInfo()[0]
    used = {n: (free[MARKS[0]] - f) / 2**20 for n, f in free.items()}  # MiB used since generation 10
    slope = used[MARKS[-1]] / (MARKS[-1] - MARKS[0])
    return {"policy": policy, "MiB_used_since_gen_10": used, "MiB_per_generation": slope,
            "counters": pipe.decoder.counters()}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--policy"]:
        print(json.dumps(run_policy(argv[1])), flush=True)
        return 0
    from vlmdecode.profiling import provenance

    rows = []
    for policy in POLICIES:
        r = subprocess.run([sys.executable, __file__, "--policy", policy], capture_output=True, text=True)
        last = r.stdout.strip().splitlines()[-1:] if r.returncode == 0 else []
        row = json.loads(last[0]) if last else {"policy": policy, "error": r.stderr[-800:]}
        print(json.dumps(row), flush=True)
        rows.append(row)
    out = {"provenance": provenance(), "generations": GENS, "rows": rows}
    if argv:
        Path(argv[0]).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
