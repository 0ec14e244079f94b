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


def provenance() -> dict:
    """GPU, driver, CUDA, onnxruntime, onnxruntime-genai and package versions, git sha, date."""
    import onnxruntime

    import vlmdecode

    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
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


def write_json(path, obj) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(obj, indent=2, default=str) + "\n")
