"""Per-step timing of a generation as a pandas DataFrame, plus run provenance.

`profile_generation` runs a pipeline on token ids of a chosen context length and returns one row
per generated token: host wall time, device time (CUDA events around the step, on CUDA), bytes
moved, and the decoder's eager/captured/replayed counters. Not a benchmark harness (see bench):
no repeats, no statistics.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import subprocess
import time
from pathlib import Path

import numpy as np


def fixture_hash(folder) -> str | None:
    """The `content_sha256` a fixture folder's fixture.json records (it hashes every file of the folder);
    None for a folder that is not a fixture (e.g. a real exported model)."""
    from .fixture.build import FIXTURE_JSON

    try:
        return json.loads((Path(folder) / FIXTURE_JSON).read_text()).get("content_sha256")
    except (OSError, ValueError, AttributeError):
        return None


def provenance(folders: dict | None = None) -> dict:
    """GPU, driver, CUDA, onnxruntime, onnxruntime-genai and package versions, git sha, date, the command
    line, and for each model folder in `folders` (label -> path) its fixture hash (`fixture_hash`)."""
    import shlex
    import sys

    import onnxruntime

    import vlmdecode

    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else None,
        "fixtures": {k: fixture_hash(v) for k, v in (folders or {}).items()},
        "vlmdecode": vlmdecode.__version__,
        "onnxruntime": onnxruntime.__version__,
        "onnxruntime_providers": onnxruntime.get_available_providers(),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": __import__("os").cpu_count(),
    }
    try:
        from .peer import genai_version

        info["onnxruntime_genai"] = genai_version()
    except Exception:  # noqa: BLE001 - provenance must never fail a run
        info["onnxruntime_genai"] = None
    root = Path(__file__).resolve().parent.parent
    try:
        info["git_sha"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                         timeout=5).stdout.strip() or None
    except Exception:  # noqa: BLE001
        info["git_sha"] = None
    import os

    info["git_sha"] = os.environ.get("VLMDECODE_GIT_SHA", info["git_sha"])
    try:
        import cupy

        rt = cupy.cuda.runtime
        if rt.getDeviceCount() > 0:
            props = rt.getDeviceProperties(0)
            info.update(gpu=props["name"].decode(), cuda_runtime=rt.runtimeGetVersion(),
                        cuda_driver=rt.driverGetVersion(), cupy=cupy.__version__)
            query = ["nvidia-smi", "--query-gpu=driver_version,name,memory.total", "--format=csv,noheader"]
            smi = subprocess.run(query,
                                 capture_output=True, text=True, timeout=10).stdout.strip()
            info["nvidia_smi"] = smi
    except Exception:  # noqa: BLE001
        pass
    return info


def prompt_ids(context: int, seed: int = 0, bos: int = 2) -> np.ndarray:
    """[1, context] int64: bos then random byte tokens (ids 9..264), for a prompt of exact length."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(9, 265, size=context, dtype=np.int64)
    ids[0] = bos
    return ids[None]


def profile_generation(pipe, context: int, new_tokens: int, seed: int = 0):
    """Greedy decode of `new_tokens` after a random prompt of `context` tokens; one row per token.

    Columns: step, token, host wall `ms` (step 0 includes the prefill), bytes moved, KV position, the
    decoder's eager/captured/replayed counters and, for a CUDA decoder built with time_steps=True,
    `device_ms`: CUDA-event time of the decoder run that produced the token (NaN for step 0).
    """
    import pandas as pd

    ids = prompt_ids(context, seed)
    t0 = time.perf_counter()
    steps = list(pipe.generate_from_ids(ids, max_new_tokens=new_tokens, stop=(), _t0=t0).steps)
    df = pd.DataFrame([s.__dict__ for s in steps])
    df["context"] = context
    df["ms"] = df["seconds"] * 1e3
    if getattr(pipe.decoder, "step_events", None) is not None:
        dev = pipe.decoder.step_device_ms()[-(len(df) - 1):] if len(df) > 1 else []
        df["device_ms"] = [float("nan")] + dev
    for k, v in pipe.decoder.counters().items():
        df[k] = v
    return df


def node_times(profile_json, by: str = "role"):
    """An onnxruntime profile (session.end_profiling()'s file) as kernel counts and time per run, grouped by
    node "role" (`fixture.onnxgraph.node_role`: `attn/qkv_proj`, `mlp/down_proj`, ... all layers together),
    "op" (op type) or "node" (full name). DataFrame indexed by group: nodes_per_run, us_per_run; most time first."""
    import pandas as pd

    from .fixture.onnxgraph import node_role

    if by not in ("role", "op", "node"):
        raise ValueError(f"by must be 'role', 'op' or 'node', got {by!r}")
    events = json.loads(Path(profile_json).read_text())
    runs = max(sum(e.get("name") == "model_run" for e in events), 1)
    rows = []
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") == "Node" and name.endswith("_kernel_time"):
            node = name[: -len("_kernel_time")]
            group = {"role": node_role(node), "op": e.get("args", {}).get("op_name", "?"), "node": node}[by]
            rows.append((group, e.get("dur", 0)))
    t = pd.DataFrame(rows, columns=[by, "us"]).groupby(by)["us"].agg(["count", "sum"])
    t = pd.DataFrame({"nodes_per_run": t["count"] / runs, "us_per_run": t["sum"] / runs})
    return t.sort_values("us_per_run", ascending=False)


def write_json(path, obj) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(obj, indent=2, default=str) + "\n")
