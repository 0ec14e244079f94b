"""H200: GPU time of every kernel in one gemma3-1b decode step, by layout (Nsight Compute).

    ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --log-file K.csv \
        [--cache-control none --clock-control none] \
        python3 scripts/h200_kernels.py run LAYOUT [MAX_LENGTH]   # one eager step at context 1024
    python3 scripts/h200_kernels.py summarize OUT.json K1.csv [K2.csv ...]

Eager launches the same kernels a captured step replays; ncu times each kernel alone (serialized),
so the sum is the step's pure kernel time without launch gaps. Kernels are grouped by what they do.
MAX_LENGTH: the KV capacity (GroupQueryAttention's work follows it); default the folder's 8192.
With ncu's defaults (caches flushed before each kernel, clocks locked to base) every kernel is slower
than in a replayed step; `--cache-control none --clock-control none` leaves caches and clocks as the
step finds them, so the sum compares with the replayed step's time and the difference is launch gaps.
"""

import csv
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

GROUPS = [  # first match wins
    ("matmul", r"gemv|gemm|sm90|cutlass|xmma|splitk|cublas"),
    ("attention", r"flash|attention|attn|gqa|softmax|unfused"),
    ("rotary", r"rotary"),
    ("norm", r"norm"),
    ("elementwise", r"elementwise|gelu|binary|unary|cast|_add|mul|concat|split|copy|transpose|reduce"),
]


def group(kernel_name: str) -> str:
    """The GROUPS name of an onnxruntime kernel ("other" when no pattern matches)."""
    return next((g for g, pat in GROUPS if re.search(pat, kernel_name, re.I)), "other")


def run(layout: str, max_length: int | None = None) -> None:
    import cupy
    import numpy as np

    from vlmdecode.decoders.cuda import CudaDecoder
    from vlmdecode.fixture.cache import ensure_fixture
    from vlmdecode.modelfolder import ModelFolder

    folder = ModelFolder.load(ensure_fixture("gemma3-1b", "gqa", "fp16", layout=layout))
    dec = CudaDecoder(folder, "cuda", "eager", max_length=max_length)
    H = folder.info.hidden_size
    x = (np.random.default_rng(0).standard_normal((1, 1024, H)) * 0.03).astype(np.float16)
    sx = x[:, :1]
    dec.begin_generation()
    dec.prefill(x)
    for _ in range(3):
        dec.step(sx)
    dec.stream.synchronize()
    cupy.cuda.profiler.start()
    dec.step(sx)
    dec.stream.synchronize()
    cupy.cuda.profiler.stop()


UNITS = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9,  # -> bytes, nanoseconds, hertz
         "ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9,  # --print-units base prints "ns"
         "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
         "hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9, "cycle/second": 1.0, "cycle/nsecond": 1e9,
         "cycle/usecond": 1e6, "cycle/msecond": 1e3}


def read_ncu_metrics(path: Path) -> list[dict]:
    """Every kernel ncu profiled, in launch order: {"id", "name", "block", "grid", "metrics": {metric: value},
    "units": {metric: unit as printed}}; values in bytes, ns and Hz where the unit is one of UNITS, else as
    printed (ncu --csv, any --print-units)."""
    lines = Path(path).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    kernels: dict = {}
    for row in csv.DictReader(lines[start:]):
        k = kernels.setdefault(int(row["ID"]), {"id": int(row["ID"]), "name": row["Kernel Name"],
                                                "block": row.get("Block Size"), "grid": row.get("Grid Size"),
                                                "metrics": {}, "units": {}})
        value = row["Metric Value"].replace(",", "")
        try:
            v = float(value)
        except ValueError:  # a metric ncu could not collect ("n/a")
            continue
        unit = row.get("Metric Unit", "")
        k["metrics"][row["Metric Name"]] = v * UNITS.get(unit.lower(), 1.0)
        k["units"][row["Metric Name"]] = unit
    return [kernels[i] for i in sorted(kernels)]


def read_ncu_csv(path: Path) -> list[tuple[str, float]]:
    """(kernel name, microseconds) for every kernel ncu profiled."""
    return [(k["name"], k["metrics"]["gpu__time_duration.sum"] * 1e-3) for k in read_ncu_metrics(path)
            if "gpu__time_duration.sum" in k["metrics"]]


def summarize(out_json: str, csvs: list[str]) -> None:
    from vlmdecode.profiling import provenance

    result = {"provenance": provenance()}
    for path in map(Path, csvs):
        kernels = read_ncu_csv(path)
        groups = defaultdict(lambda: {"kernels": 0, "us": 0.0})
        names = defaultdict(lambda: {"kernels": 0, "us": 0.0})
        for name, us in kernels:
            g = group(name)
            groups[g]["kernels"] += 1
            groups[g]["us"] += us
            short = name.split("(")[0][:80]
            names[short]["kernels"] += 1
            names[short]["us"] += us
        top = sorted(names.items(), key=lambda kv: -kv[1]["us"])[:15]
        warm = "warm" in path.stem  # made with --cache-control none --clock-control none
        note = ("ncu serializes kernels; caches and clocks as found (--cache-control none --clock-control none): "
                "the sum is the step's kernel time without launch gaps" if warm else
                "ncu serializes kernels and flushes caches between them, clocks locked to base: an upper bound "
                "per kernel; compare shares, not the sum, with a replayed step")
        result[path.stem] = {"note": note,
                             "kernels": len(kernels), "kernel_us": sum(us for _, us in kernels),
                             "groups": dict(groups), "top": dict(top)}
        print(path.stem, json.dumps({k: v for k, v in result[path.stem].items() if k != "top"}), flush=True)
    Path(out_json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
    else:
        summarize(sys.argv[2], sys.argv[3:])
