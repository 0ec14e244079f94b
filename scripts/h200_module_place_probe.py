"""H200 probe: does a kernel module's place in memory change how fast its kernels run, with nothing of the decoder in
the process? (issue 16: the native step replays 0.6-1.2% slower on its first module's place than on the next one,
and a freed place is taken again by the load after next, h200_module_freed_reloads_c69763e.json.)

The probe: a module of CHAIN kernels, each KB KB of straight-line FFMAs (h200_code_fetch_probe.py's bodies), 132
blocks of 8 warps, launched one after another as a layer's kernels are. In the `cold` case each round first reads
192 MB through L2 (`l2_sweep`, from a module of its own that stays put), so the bodies' code and its translations are
cold; in `cold_cs` that read is made with __ldcs (evict-first), as the step's GEMVs read their weights (does code
survive such a stream in L2?); in the `warm` case the rounds follow one another directly. A graph of
REPS rounds is timed with events (us a round; after a read, less the reads alone), and each body's thread 0 stamps its
start and the end of its FFMAs (median us over blocks, rounds and replays).
The places: copy 0 of the module is loaded first and measured; then each next copy (the same code, a comment apart, so
CuPy compiles it as a module of its own) is loaded while the one before it is held, measured, and the one before is
let go, as h200_native_replay.py's NATIVE_RELOADS_FREE=1. If the place matters, the copies alternate as the step did.
--held: every copy kept loaded instead (each lands in a new place). --chain N, --kb K: the module's shape (default
5 kernels of 32 KB: about a layer's code). --copies N (default 7). --tag TAG names the file.
Writes $OUT/h200_module_place_probe[_TAG].json. CuPy only.
Usage: OUT=/tmp/out python3 scripts/h200_module_place_probe.py [--held] [--chain N] [--kb K] [--copies N] [--tag T]
"""

from __future__ import annotations

import gc
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from h200_code_fetch_probe import GRID, HEAD, STREAM_BYTES, body  # noqa: E402  (the bodies, the L2 sweep)

REPS, REPLAYS, ROUNDS = 8, 3, 5
# the step's weight stream: the same read as l2_sweep with __ldcs (evict-first), as the GEMVs load their weights
SWEEP_CS = (HEAD.replace("l2_sweep", "l2_sweep_cs").replace("const uint4 v = w[i];", "const uint4 v = __ldcs(w + i);")
            .replace("(plain loads: the lines stay in L2 and push out what was there)", "(__ldcs: evict-first)"))
CONDS = ("cold", "cold_cs", "warm")


def arg(name: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def module_source(copy: int, chain: int, kb: int) -> str:
    """Copy `copy` of the probe's module: `chain` kernels body0.. of kb KB each; copies differ by a comment only."""
    import native_kernel_bench

    return (f"// module copy {copy}\n" + native_kernel_bench.GTIMER_CU
            + "".join(body(f"body{j}", kb) for j in range(chain)))


def main() -> None:
    import cupy
    import native_kernel_bench

    from vlmdecode.native import kernels as K
    from vlmdecode.native.timing import graph_ms

    chain, kb, copies, held = arg("--chain", 5), arg("--kb", 32), arg("--copies", 7), "--held" in sys.argv
    stream = cupy.cuda.Stream(non_blocking=True)
    sweep_mod = cupy.RawModule(code=HEAD + SWEEP_CS)
    sweep_fns = {"cold": sweep_mod.get_function("l2_sweep"), "cold_cs": sweep_mod.get_function("l2_sweep_cs")}
    sweep = cupy.zeros(STREAM_BYTES // 4, cupy.uint32)
    usink, sink = cupy.zeros(4, cupy.uint32), cupy.zeros(1024, cupy.float32)
    stamps = cupy.zeros((REPS, chain, GRID, 2), cupy.uint64)
    b, c = np.float32(0.999), np.float32(1e-3)

    def graph_of(fns, cond: str):
        launches = []
        for r in range(REPS):
            if cond in sweep_fns:
                launches.append(K.Launch("sweep", sweep_fns[cond], (528, 1, 1), (256, 1, 1),
                                         (K.ptr(sweep), np.int64(sweep.nbytes // 16), K.ptr(usink)), 0, sweep.nbytes))
            for j, fn in enumerate(fns):
                st = stamps.data.ptr + (r * chain + j) * GRID * 16
                launches.append(K.Launch(f"body{j}", fn, (GRID, 1, 1), (256, 1, 1),
                                         (b, c, np.uint64(st), K.ptr(sink)), 0, 0))
        for launch in launches:
            launch.prepare()
        return K.capture(stream, lambda: [launch() for launch in launches]), launches

    sweeps_alone = {cond: graph_of([], cond) for cond in sweep_fns}  # (graph, launches): subtracted, kept alive
    res: dict = {"provenance": {**native_kernel_bench.provenance(), "command": " ".join(sys.argv),
                                "method": __doc__.split("The probe: ")[1].split("Writes")[0].strip()},
                 "chain": chain, "kb": kb, "reps": REPS, "held": held, "copies": []}

    def measure(mod, copy: int) -> dict:
        fns = [mod.get_function(f"body{j}") for j in range(chain)]
        row: dict = {"copy": copy}
        for cond in CONDS:
            graph, launches = graph_of(fns, cond)
            ms = []
            for _ in range(ROUNDS):
                t = graph_ms(cupy, stream, graph, 20)
                ms.append(t - graph_ms(cupy, stream, sweeps_alone[cond][0], 20) if cond in sweep_fns else t)
            reps = list(native_kernel_bench.replayed_stamps(graph, stream, stamps, REPLAYS))  # [REPS, chain, GRID, 2]
            body_us = [statistics.median(float(np.median(s[r, j, :, 1] - s[r, j, :, 0])) / 1e3
                                         for s in reps for r in range(REPS)) for j in range(chain)]
            row[cond] = {"round_us": float(np.median(ms)) * 1e3 / REPS, "round_us_by_rep": [m * 1e3 / REPS for m in ms],
                         "body_us": body_us}
            del graph, launches
        print(f"copy {copy}: " + ", ".join(f"{cond} {row[cond]['round_us']:.2f} us a round (bodies "
                                            f"{sum(row[cond]['body_us']):.2f})" for cond in CONDS), flush=True)
        return row

    mods = []
    for copy in range(copies):
        mods.append(cupy.RawModule(code=module_source(copy, chain, kb), options=("-std=c++17",)))
        res["copies"].append(measure(mods[-1], copy))
        if not held and len(mods) > 1:
            # the one before let go: unloaded once neither it nor CuPy's memo (which keeps a module per source and
            # options; the sweep's stays held by its function) holds it, so the next load may take its place
            del mods[0]
            cupy.clear_memo()
            gc.collect()
    native_kernel_bench.write_result(
        f"h200_module_place_probe{'_' + sys.argv[sys.argv.index('--tag') + 1] if '--tag' in sys.argv else ''}.json",
        res)


if __name__ == "__main__":
    main()
