"""KV bytes of gemma-3-4b's decoder with full-length vs windowed sliding-layer caches, from vlmdecode's sizing code.

    python scripts/kv_bytes.py [--out data/results/kv_bytes_gemma3-4b.json]

The shapes are google/gemma-3-4b-it's text config (config.json "text_config" on the Hugging Face Hub, as
quoted in issue #11): 34 layers, every 6th global (sliding_window_pattern 6: layers 5, 11, ..., 29) and the
others sliding with window 1024, 4 KV heads, head_dim 256, fp16 KV, a 131072-token context. The capacities
per layer are `kvcache.layer_capacities` (what a CudaDecoder allocates: the window exactly on CUDA; CPU adds
16) and the bytes `kvcache.kv_nbytes` (what FixedKV allocates, tests/test_windowed_kv.py checks they agree).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from vlmdecode.devices import Device
from vlmdecode.kvcache import kv_nbytes, layer_capacities

SOURCE = "google/gemma-3-4b-it config.json text_config (Hugging Face Hub), as quoted in issue #11"
LAYERS, PATTERN, WINDOW, KV_HEADS, HEAD_DIM, CONTEXT = 34, 6, 1024, 4, 256, 131072


def report(device: str = "cuda") -> dict:
    windows = [None if (i + 1) % PATTERN == 0 else WINDOW for i in range(LAYERS)]
    dev = Device(device)
    full = layer_capacities([None] * LAYERS, CONTEXT, dev)
    win = layer_capacities(windows, CONTEXT, dev)
    per_layer = lambda caps: [kv_nbytes([c], KV_HEADS, HEAD_DIM, np.float16) for c in caps]  # noqa: E731
    full_b, win_b = kv_nbytes(full, KV_HEADS, HEAD_DIM, np.float16), kv_nbytes(win, KV_HEADS, HEAD_DIM, np.float16)
    return {
        "model": "gemma-3-4b", "shapes_source": SOURCE,
        "shapes": {"layers": LAYERS, "sliding_window_pattern": PATTERN, "sliding_window": WINDOW,
                   "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "dtype": "float16", "context": CONTEXT},
        "device_rule": device, "global_layers": [i for i, w in enumerate(windows) if w is None],
        "full": {"capacities": full, "bytes_per_layer": per_layer(full), "bytes": full_b, "GiB": full_b / 2**30},
        "windowed": {"capacities": win, "bytes_per_layer": per_layer(win), "bytes": win_b, "GiB": win_b / 2**30},
        "ratio_windowed_over_full": win_b / full_b,
        "generated_by": "python scripts/kv_bytes.py (vlmdecode.kvcache.layer_capacities and kv_nbytes)",
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="data/results/kv_bytes_gemma3-4b.json")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="whose capacity rule")
    a = p.parse_args(argv)
    rep = report(a.device)
    Path(a.out).write_text(json.dumps(rep, indent=2) + "\n")
    print(f"full {rep['full']['GiB']:.2f} GiB, windowed {rep['windowed']['GiB']:.2f} GiB -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
